//! Small helpers below every layer: the clock, hashing, durations, timestamps, the state
//! directory's creation and pure work on every core (`par`).
//! They know nothing of specs, Proxmox or reconciling, and import nothing of the crate but each
//! other.

pub mod clock;
pub mod duration;
pub mod fnv;
pub mod par;
pub mod state_dir;
pub mod time;
