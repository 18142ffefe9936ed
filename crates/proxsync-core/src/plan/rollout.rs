//! A `ProxmoxVMSet`'s members are rebooted for a change at most `maxUnavailable` at a time:
//! a template change that needs a reboot (under the members' `rebootPolicy`) rolls through the
//! set instead of taking it down at once. A converge reboots in the same action when what it
//! applies goes pending, so every converge of a running member whose policy reboots counts;
//! members whose policy never reboots take a change all at once (nothing goes down). A rebuild
//! from a new image (`imagePolicy: Recreate`) takes a member down too, and rolls the same way.

use std::collections::BTreeMap;

use super::{Action, Plan, PlanInput, Verdict};
use crate::util::fnv::{FnvHashMap, FnvHashSet};

/// One set's rollout this cycle.
struct Roll<'a> {
    /// `maxUnavailable`.
    max: u32,
    /// Members not Ready for another reason.
    busy: u32,
    /// Members a converge may reboot, by index.
    rebooting: Vec<(u32, &'a str)>,
}

/// Holds the reboots of a set's members beyond what its `maxUnavailable` leaves: members not
/// Ready for another reason (creating, failing, waiting) count as unavailable first; the
/// lowest indexes reboot first. A held member's verdict is [`Verdict::RollingOut`].
pub(super) fn hold(input: &PlanInput<'_>, out: &mut Plan) {
    if input.desired.iter().all(|s| s.set.is_none()) {
        return;
    }
    let members: FnvHashMap<&str, &crate::spec::Spec> = (input.desired.iter())
        .filter(|s| s.set.is_some())
        .map(|s| (s.name.as_str(), s))
        .collect();
    // A rebuild from a new image takes the member down as a reboot does.
    let reboots = |a: &Action| {
        (a.spec().and_then(|n| members.get(n)))
            .is_some_and(|s| matches!(a, Action::Recreate { .. }) || super::may_reboot(input, s, a))
    };
    if !out.actions.iter().any(reboots) {
        return;
    }
    let rebooting: FnvHashSet<&str> = (out.actions.iter())
        .filter(|a| reboots(a))
        .filter_map(Action::spec)
        .collect();
    let mut sets: BTreeMap<&str, Roll<'_>> = BTreeMap::new();
    for spec in input.desired.iter() {
        let Some(m) = spec.set.as_deref() else {
            continue;
        };
        let entry = sets.entry(m.set.as_str()).or_insert(Roll {
            max: m.max_unavailable,
            busy: 0,
            rebooting: Vec::new(),
        });
        if rebooting.contains(spec.name.as_str()) {
            entry.rebooting.push((m.index, spec.name.as_str()));
        } else if !super::dependencies::ready(out, &spec.name) {
            entry.busy += 1;
        }
    }
    let mut held: FnvHashSet<String> = FnvHashSet::default();
    for (set, roll) in sets {
        let Roll {
            max,
            busy,
            rebooting: mut members,
        } = roll;
        members.sort_unstable();
        let room = max.saturating_sub(busy) as usize;
        for (_, name) in members.into_iter().skip(room) {
            held.insert(name.to_string());
            out.verdicts.insert(
                name.to_string(),
                Verdict::RollingOut {
                    set: set.to_string(),
                    max_unavailable: max,
                },
            );
        }
    }
    if !held.is_empty() {
        out.actions
            .retain(|a| !(reboots(a) && a.spec().is_some_and(|s| held.contains(s))));
    }
}
