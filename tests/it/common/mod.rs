//! Helpers shared by the integration tests (`use crate::common;` in a test file).
#![allow(dead_code, unused_imports)]

pub mod engine;
pub mod fakepve;

pub use fakepve::{
    FakePve, RecordedRequest, Scenario, TEMPLATE_NAME, TEMPLATE_VMID, TOKEN_ID, TOKEN_SECRET,
    default_scenario, token_header, venv_program, verified_client,
};
