//! proxsync: keeps Proxmox VE clusters holding exactly the VMs described by YAML specs in git.
//!
//! The binary (`src/main.rs`) only parses arguments and calls [`shell::cli::run`]. See
//! ARCHITECTURE.md for the crates, the modules and the invariants between them.
//!
//! # Layout
//!
//! Four crates, each depending only on those below it (cargo checks):
//! - `proxsync` (this one): [`shell`] (the command line, the daemon, the control socket),
//!   [`telemetry`] (metrics and notifications), [`engine`] (one reconcile cycle: observe ->
//!   plan -> act -> look again -> status), [`site_identity`], [`report`], [`status`] (the
//!   status files), [`execute`] (acting on Proxmox VE), [`source`] (commits -> specs),
//!   [`observe`] and [`store`] (what a cycle saw; the state database), [`conformance`],
//!   [`import`], [`backoff`]; inside it a module imports only from below it (`tests/tidy.rs`);
//! - `proxsync-core`: [`model`], [`gate`], [`plan`], [`render`], [`cloudinit`]: pure;
//! - `proxsync-pve`: [`pve`], [`category`]: Proxmox VE's types and words, and the client;
//! - `proxsync-spec`: [`spec`], [`config`], [`ownership`], [`guest`], [`concurrency`],
//!   [`redact`], [`selector`], [`sops`], [`util`]: the formats and the foundation.
//!
//! The modules of the crates below are re-exported here under their old names, so a path
//! reads the same in every crate (`crate::spec::Spec`, `proxsync::spec::Spec`).

pub mod backoff;
pub mod conformance;
pub mod engine;
pub mod execute;
pub mod health;
pub mod image_sync;
pub mod import;
pub mod observe;
pub mod report;
pub mod shell;
pub mod site_identity;
pub mod source;
pub mod status;
pub mod store;
pub mod telemetry;
pub mod util;

pub use proxsync_core::{cloudinit, gate, model, plan, render};
pub use proxsync_pve::{category, pve};
pub use proxsync_spec::{concurrency, config, guest, ownership, redact, selector, sops, spec};
