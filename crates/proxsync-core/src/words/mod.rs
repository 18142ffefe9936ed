//! The one place where decisions become words.
//!
//! The gate, the planner and execute decide with typed values: which guest
//! of which kind, what was refused, which evidence was missing. Each value's `Display` is here,
//! one file per kind of decision, so a status condition, `plan`, `describe`, a notification
//! and the journal say the same thing in the same words, and a guest is named by its kind in
//! all of them. The deciding code builds no prose (`tests/tidy.rs` checks the gate and
//! execute).

mod blocked;
mod commit;
mod condition;
mod evidence;
mod guest;
mod ha;
mod hands_off;
pub mod health;
mod identity;
mod nodes;
mod note;
mod plan;
mod preflight;
mod rename;
mod site;
mod verdict;
mod volume;
mod wait;
