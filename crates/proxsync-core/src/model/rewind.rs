//! What the git source tells the planner of the commit it applies when that commit rewinds.

use std::collections::BTreeSet;

/// A commit applied although it does not descend from the commit applied before it (a
/// rewind). While it is the applied commit, the valves judge its deletes as one batch: every
/// VM of a removed spec still to be deleted, released or handed over, planned this cycle or
/// not (its node offline, its site unreadable), counts, against the managed VMs without those
/// of the specs it added (the VMs it creates do not dilute its deletes). So the batch cannot
/// slip under `max_delete_fraction` by being spread over cycles or mixed with its creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindBatch {
    /// The commit applied.
    pub commit: String,
    /// The commit applied before it.
    pub from: String,
    /// The names of `from`'s specs (valid and invalid); `None` when it can no longer be read,
    /// and then the batch cannot be judged and every delete is refused.
    pub from_specs: Option<BTreeSet<String>>,
}
