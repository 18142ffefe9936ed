//! A `ProxmoxVMSet`'s members are taken down for a change at most `maxUnavailable` at a time:
//! a template change that needs a reboot (under the members' `rebootPolicy`), or a rebuild from
//! a new image (`imagePolicy: Recreate`), rolls through the set instead of taking it down at
//! once. A converge reboots in the same action when what it applies goes pending, so every
//! converge of a running member whose policy reboots counts; members whose policy never reboots
//! take a change all at once (nothing goes down). The rebuilds of specs of their own (no set)
//! roll too, one at a time per site.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Action, Plan, PlanInput, Verdict};
use crate::model::VmState;
use crate::model::health::Unwell;
use crate::spec::{ImagePolicy, Spec};
use crate::util::fnv::{FnvHashMap, FnvHashSet};

/// What rolls together: a set, or the specs of their own of one site (their rebuilds only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Group<'a> {
    Set(&'a str),
    Lone(&'a str),
}

/// One group's roll this cycle.
struct Roll<'a> {
    /// How many may be down at once: `maxUnavailable`, 1 for specs of their own.
    max: u32,
    /// Down already: not Ready for another reason, or a rebuild whose delete is recorded (it
    /// goes on, never held).
    busy: u32,
    /// Members an action would take down now, by (index, name).
    taking_down: Vec<(u32, &'a str)>,
    /// The first member (by index) whose guest is unhealthy: the roll stops at it.
    stopped_by: Option<(u32, &'a str)>,
}

/// The group a spec rolls in, with its place in it, if it rolls at all.
fn group(spec: &Spec) -> Option<(Group<'_>, u32, u32)> {
    match spec.set.as_deref() {
        Some(m) => Some((Group::Set(&m.set), m.max_unavailable, m.index)),
        None if spec.image_policy == ImagePolicy::Recreate => Some((Group::Lone(&spec.site), 1, 0)),
        None => None,
    }
}

/// Holds what would take down a group's members beyond what it leaves (`maxUnavailable`;
/// one per site for specs of their own): members not Ready for another reason count as
/// unavailable first, and so does a rebuild whose delete is recorded (its guest is down: it
/// goes on); the lowest indexes go first. A held member's verdict is [`Verdict::RollingOut`].
pub(super) fn hold(input: &PlanInput<'_>, out: &mut Plan) {
    let rolling: FnvHashMap<&str, &Spec> = (input.desired.iter())
        .filter(|s| group(s).is_some())
        .map(|s| (s.name.as_str(), s))
        .collect();
    if rolling.is_empty() {
        return;
    }
    // A rebuild takes the member down as a reboot does; a spec of its own rolls its rebuilds.
    let takes_down = |a: &Action| {
        (a.spec().and_then(|n| rolling.get(n))).is_some_and(|s| {
            matches!(a, Action::Recreate { .. })
                || s.set.is_some() && super::may_reboot(input, s, a)
        })
    };
    if !out.actions.iter().any(takes_down) {
        return;
    }
    let acting: FnvHashSet<&str> = (out.actions.iter())
        .filter(|a| takes_down(a))
        .filter_map(Action::spec)
        .collect();
    let mut groups: BTreeMap<Group<'_>, Roll<'_>> = BTreeMap::new();
    for spec in rolling.values() {
        let Some((key, max, index)) = group(spec) else {
            continue;
        };
        let entry = groups.entry(key).or_insert(Roll {
            max,
            busy: 0,
            taking_down: Vec::new(),
            stopped_by: None,
        });
        let deleting = (input.records.get(spec.name.as_str()))
            .is_some_and(|r| matches!(r.vm, VmState::Deleting { .. }));
        let name = spec.name.as_str();
        if input.unwell.get(name) == Some(&Unwell::Unhealthy)
            && entry.stopped_by.is_none_or(|(i, _)| index < i)
        {
            entry.stopped_by = Some((index, name));
        }
        if acting.contains(name) && !deleting {
            entry.taking_down.push((index, name));
        } else if deleting || !super::dependencies::ready(input, out, name) {
            entry.busy += 1;
        }
    }
    let mut held: FnvHashSet<String> = FnvHashSet::default();
    for (key, roll) in groups {
        let Roll {
            max,
            busy,
            taking_down: mut members,
            stopped_by,
        } = roll;
        members.sort_unstable();
        // An unhealthy member is down already: the change that may bring it back (a fixed
        // template or image) still reaches it, and takes no room.
        members.retain(|(_, name)| input.unwell.get(*name) != Some(&Unwell::Unhealthy));
        // An unhealthy member stops the roll: no other member goes down until it passes.
        let room = match stopped_by {
            Some(_) => 0,
            None => max.saturating_sub(busy) as usize,
        };
        for (_, name) in members.into_iter().skip(room) {
            held.insert(name.to_string());
            let set = match key {
                Group::Set(set) => Some(set.to_string()),
                Group::Lone(_) => None,
            };
            Arc::make_mut(&mut out.verdicts).insert(
                name.into(),
                Verdict::RollingOut {
                    set,
                    max_unavailable: max,
                    stopped_by: stopped_by.map(|(_, n)| n.to_string()),
                },
            );
        }
    }
    if !held.is_empty() {
        out.actions
            .retain(|a| !(takes_down(a) && a.spec().is_some_and(|s| held.contains(s))));
    }
}
