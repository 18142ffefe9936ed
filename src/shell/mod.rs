//! The process shell: the command line, the daemon's event loop, the control socket, the
//! instance lock and allocator tuning, and what the commands print (`status`, `plan`,
//! `doctor`, `inventory`). It wires the layers below together and decides nothing they decide.

pub mod cli;
pub mod cmd;
pub mod control;
pub mod daemon;
pub mod doctor;
pub mod instance_lock;
pub mod inventory;
pub mod malloc;
pub mod plan_report;
pub mod status_view;
