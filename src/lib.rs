//! proxsync: keeps Proxmox VE clusters holding exactly the VMs described by YAML specs in git.
//!
//! The binary (`src/main.rs`) only parses arguments and calls [`cli::run`]. See ARCHITECTURE.md
//! for the modules and the invariants between them.

pub mod backoff;
pub mod category;
pub mod cli;
pub mod clock;
pub mod cloudinit;
pub mod concurrency;
pub mod config;
pub mod control;
pub mod daemon;
pub mod doctor;
pub mod engine;
pub mod execute;
pub mod gate;
pub mod instance_lock;
pub mod lanes;
pub mod malloc;
pub mod metrics;
pub mod notify;
pub mod observe;
pub mod ownership;
pub mod par;
pub mod plan;
pub mod plan_report;
pub mod pve;
pub mod redact;
pub mod render;
pub mod report;
pub mod selector;
pub mod site_identity;
pub mod sops;
pub mod source;
pub mod spec;
pub mod status;
pub mod status_view;
pub mod store;
pub mod util;
