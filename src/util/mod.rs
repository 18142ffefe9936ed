//! Small helpers below every layer: hashing, durations, timestamps and the state directory's
//! creation. They know nothing of specs, Proxmox or reconciling, and import nothing of the crate.

pub mod duration;
pub mod fnv;
pub mod state_dir;
pub mod time;
