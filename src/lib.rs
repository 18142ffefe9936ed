//! proxsync: keeps Proxmox VE clusters holding exactly the VMs described by YAML specs in git.
//!
//! The binary (`src/main.rs`) only parses arguments and calls [`shell::cli::run`]. See
//! ARCHITECTURE.md for the modules and the invariants between them.
//!
//! # Layout
//!
//! From the top down; a module imports only from below it (`tests/tidy.rs` checks):
//! - [`shell`]: the command line, the daemon, the control socket, what commands print;
//! - [`telemetry`]: metrics and notifications;
//! - [`engine`]: one reconcile cycle, the pipeline observe -> plan -> act -> look again ->
//!   status; [`site_identity`], [`report`];
//! - [`status`]: the status files;
//! - [`execute`]: acting on Proxmox VE; [`render`]: a spec as PVE parameters, pure;
//! - [`plan`]: the pure planner; [`source`]: commits -> specs; [`gate`]: every destructive
//!   decision on evidence, pure;
//! - [`observe`], [`store`]: what a cycle saw; the state database;
//! - [`pve`]: the Proxmox VE client; [`cloudinit`]: seed images;
//! - [`spec`], [`config`], [`ownership`]: what people write, and the marker;
//! - [`backoff`], [`category`], [`concurrency`], [`guest`], [`redact`], [`selector`], [`sops`],
//!   [`util`]: the foundation.

pub mod backoff;
pub mod category;
pub mod cloudinit;
pub mod concurrency;
pub mod config;
pub mod conformance;
pub mod engine;
pub mod execute;
pub mod gate;
pub mod guest;
pub mod import;
pub mod model;
pub mod observe;
pub mod ownership;
pub mod plan;
pub mod pve;
pub mod redact;
pub mod render;
pub mod report;
pub mod selector;
pub mod shell;
pub mod site_identity;
pub mod sops;
pub mod source;
pub mod spec;
pub mod status;
pub mod store;
pub mod telemetry;
pub mod util;
