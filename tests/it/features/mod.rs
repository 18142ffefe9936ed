//! What a person meets: the daemon, the CLI, doctor, plan, metrics, notifications, SOPS, the package.

mod cli_habits;
mod containers;
mod daemon;
mod defaults;
mod doctor;
mod exercise;
mod images;
mod import;
mod inventory;
mod metrics;
mod notify;
mod observe;
mod oci;
mod oci_attack;
mod order;
mod packaging;
mod plan_cli;
mod sets;
mod sops;
mod suspend;
mod templates;
mod templates_attack;
mod templates_attack2;
mod wait_events;
mod web_ui;
mod webhooks;
