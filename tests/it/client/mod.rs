//! The Proxmox VE client and the fake it runs against: requests, tasks, permits, fidelity to a real cluster.

pub mod conformance;
mod download_url;
mod fake_fidelity;
mod fakepve_wiring;
mod fidelity;
mod flaky;
mod migrate;
mod permits;
mod pve_client;
mod requests;
mod snapshots;
mod surface_fidelity;
mod task_polling;
mod vm_surface;
