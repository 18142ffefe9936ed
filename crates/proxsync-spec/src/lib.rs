//! proxsync's formats: what people write and what proxsync reads from disk.
//!
//! - [`spec`]: the spec format, its validation, defaults, sets, renames and JSON schema;
//! - [`config`]: the daemon's `proxsync.toml`;
//! - [`ownership`]: the marker a guest carries, and the key that signs it;
//! - [`guest`], [`concurrency`], [`redact`], [`selector`], [`sops`], [`util`]: the foundation.
//!
//! No I/O runtime: the crates above (`proxsync-core`, `proxsync`) read with it.

#![deny(missing_docs)]

pub mod concurrency;
pub mod config;
pub mod guest;
pub mod ownership;
pub mod redact;
pub mod selector;
pub mod sops;
pub mod spec;
pub mod util;
