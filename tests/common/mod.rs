//! Helpers shared by the integration tests (`mod common;` in a test crate).
//!
//! Every test crate compiles this module on its own and uses only part of it.
#![allow(dead_code, unused_imports)]

pub mod engine;
pub mod fakepve;

pub use fakepve::{
    FakePve, RecordedRequest, Scenario, TEMPLATE_NAME, TEMPLATE_VMID, TOKEN_ID, TOKEN_SECRET,
    default_scenario, token_header, verified_client,
};
