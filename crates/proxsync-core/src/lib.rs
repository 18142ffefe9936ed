//! proxsync's pure core: what a cycle decides, without any I/O.
//!
//! - [`model`]: what is recorded and observed, as the layers above hand it down;
//! - [`gate`]: every destructive or identity-changing decision, on evidence, as a permit or a
//!   refusal;
//! - [`plan`]: the planner, from specs and what was observed to actions;
//! - [`render`]: a spec as PVE parameters; [`cloudinit`]: seed images;
//! - [`words`]: the decisions of the gate, the planner and execute, in words.
//!
//! Its dependencies hold no async runtime, HTTP client, git or database (`tests/tidy.rs`
//! checks): every function here is tested without a network.

#![deny(missing_docs)]

pub mod cloudinit;
pub mod gate;
pub mod model;
pub mod plan;
pub mod render;
pub mod words;

// The layers this crate builds on, under the names its modules use.
pub(crate) use proxsync_pve::{category, pve};
pub(crate) use proxsync_spec::{config, guest, ownership, spec, util};
