//! Small helpers below every layer: hashing, durations and timestamps. They know nothing of specs,
//! Proxmox or reconciling, and import nothing of the crate.

pub mod duration;
pub mod fnv;
pub mod time;
