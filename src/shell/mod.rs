//! The process shell: the command line, the daemon's event loop, the control socket, the
//! instance lock and allocator tuning, the web listener (webhooks, read-only pages), and what the commands print (`status`, `plan`,
//! `doctor`, `inventory`). It wires the layers below together and decides nothing they decide.

pub mod cli;
pub(crate) mod cmd;
pub(crate) mod completions;
pub(crate) mod control;
pub mod daemon;
pub(crate) mod doctor;
pub(crate) mod instance_lock;
pub(crate) mod inventory;
pub(crate) mod malloc;
pub(crate) mod manpages;
pub(crate) mod plan_report;
pub(crate) mod planning;
pub(crate) mod status_view;
pub(crate) mod web;
