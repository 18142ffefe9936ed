//! What a spec asks of a VM, as Proxmox VE parameters: spec x the VM's current config -> the
//! update to send. Pure: no I/O, no clock; `execute` reads the config, sends what this
//! renders, and `plan` shows it. A create renders against an empty config, so a new VM and a
//! converged one get the same values.

pub mod cloud_init;
pub mod config;
pub mod container;
pub mod current;
pub mod disks;
pub mod hardware;
pub mod network;
pub mod vm;

pub use config::{ConfigChange, ConfigError, preview_config, preview_disk};
