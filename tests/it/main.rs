//! The integration tests against fakepve, in one binary: one build and one link for them all,
//! not one per file (each would link git2, reqwest, rustls and redb on its own).
//! `spec_validate` and `tidy` (and proxsync-core's `plan_props`) stay apart: they need no fakepve.
//!
//! Run one file's tests with a filter: `scripts/test --test it safety::crash::`.

mod client;
mod common;
mod cycle;
mod features;
mod safety;
