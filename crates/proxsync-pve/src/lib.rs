//! proxsync's Proxmox VE layer: the API's types and values, PVE's texts and what they mean,
//! error classification, the permit a destructive call carries and, with the `client`
//! feature (the default), the HTTP client ([`pve`]). `fake` adds the in-memory PVE that the
//! unit tests of the crates above run against.

// Without the client, the request helpers and imports its calls use are idle.
#![cfg_attr(not(feature = "client"), allow(unused_imports, dead_code))]
#![deny(missing_docs)]

pub mod category;
pub mod pve;

// The foundation this crate builds on, under the names its modules use.
pub(crate) use proxsync_spec::{concurrency, config, guest, ownership, util};
