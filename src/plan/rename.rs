//! Renames of `metadata.name`: a removed spec whose VM a new spec of the same commit takes over.

use std::collections::{BTreeMap, BTreeSet};

use super::{Action, PlanInput, Verdict, content_hash};
use crate::spec::Spec;
use crate::state::{SpecRecord, VmState};

/// A removed spec whose VM a new spec of the same commit takes over.
pub(super) struct Rename<'a> {
    pub(super) from: &'a str,
    site: &'a str,
    node: &'a str,
    vmid: u32,
    /// The new spec's `proxsync.io/renamed-from` annotation names `from`.
    confirmed: bool,
}

/// Renames of `metadata.name` in this commit: a new spec (no VM recorded) that either names a
/// removed spec in its `proxsync.io/renamed-from` annotation (confirmed), or has exactly the
/// content a removed spec's VM was last converged to (suspected). Only removed specs whose VM
/// exists are considered.
pub(super) fn renames<'a>(
    input: &'a PlanInput<'a>,
    desired: &BTreeSet<&str>,
) -> BTreeMap<&'a str, Rename<'a>> {
    let mut out = BTreeMap::new();
    if !input.complete {
        return out;
    }
    let removed: Vec<(&str, &SpecRecord)> = input
        .records
        .iter()
        .filter(|(name, r)| {
            // A spec now outside the selector is still in the repository: not removed.
            !desired.contains(name.as_str())
                && !input.invalid.contains(*name)
                && !input.elsewhere.contains(*name)
                && matches!(r.vm, VmState::Exists { .. })
        })
        .map(|(n, r)| (n.as_str(), r))
        .collect();
    if removed.is_empty() {
        return out;
    }
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    for spec in input.desired {
        if input
            .records
            .get(&spec.name)
            .and_then(SpecRecord::vmid)
            .is_some()
        {
            continue;
        }
        let by_annotation = spec
            .renamed_from
            .as_deref()
            .and_then(|old| removed.iter().find(|(n, _)| *n == old));
        let found = by_annotation.or_else(|| {
            let hash = content_hash(spec);
            removed.iter().find(|(_, r)| {
                r.site == spec.site && r.applied_content.as_deref() == Some(hash.as_str())
            })
        });
        if let Some((from, r)) = found
            && let VmState::Exists { vmid, node } = &r.vm
            && r.site == spec.site
            && taken.insert(from)
        {
            out.insert(
                spec.name.as_str(),
                Rename {
                    from,
                    site: r.site.as_str(),
                    node: node.as_str(),
                    vmid: *vmid,
                    confirmed: by_annotation.is_some(),
                },
            );
        }
    }
    out
}

/// A rename: re-label the VM when confirmed and the node is healthy; otherwise hold both
/// the delete and the create and say so.
pub(super) fn plan_rename(
    input: &PlanInput<'_>,
    spec: &Spec,
    r: &Rename<'_>,
    actions: &mut Vec<Action>,
) -> Verdict {
    if !r.confirmed {
        return Verdict::RenameSuspected {
            from: r.from.to_string(),
            vmid: r.vmid,
        };
    }
    let Some(view) = input.sites.get(r.site).filter(|v| v.reachable()) else {
        return match input.sites.get(r.site) {
            Some(view) if view.identity_changed => super::spec::not_readable(view),
            _ => Verdict::SiteUnreachable {
                error: format!("site {} cannot be read", r.site),
            },
        };
    };
    let node = view
        .vms
        .get(&r.vmid)
        .map(|vm| vm.node.as_str())
        .unwrap_or(r.node);
    if !view.node_healthy(node) {
        return Verdict::NodeUnhealthy {
            node: node.to_string(),
            quorate: view.health.quorate,
        };
    }
    actions.push(Action::Relabel {
        spec: spec.name.clone(),
        from: r.from.to_string(),
        site: r.site.to_string(),
        node: node.to_string(),
        vmid: r.vmid,
    });
    Verdict::Acting
}
