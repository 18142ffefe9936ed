//! The promises: one VM per spec through kills and lost answers, no delete without evidence, signed commits, site identity.

mod crash;
mod create_window;
mod duplicates;
mod garbled;
mod notes;
mod repo_safety;
mod signed_commits;
mod site_identity;
mod unknown_node;
mod volume_gate;
mod wrong_delete;
