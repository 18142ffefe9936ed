//! `dependsOn`: a spec's VM is created, started or rebooted only once every spec it depends
//! on is Ready; removals go dependants first. Applied to a plan after each spec's decision,
//! from the verdicts of this cycle (a dependency acting this cycle is not Ready yet).

use std::sync::Arc;

use super::{Action, Plan, PlanInput, Verdict};
use crate::util::fnv::{FnvHashMap, FnvHashSet};

/// The members of each `ProxmoxVMSet` among the desired specs, by set name, with the set's
/// `replicas`: fewer desired members than that, and some are held (invalid).
fn set_members<'a>(input: &PlanInput<'a>) -> FnvHashMap<&'a str, (Vec<&'a str>, usize)> {
    let mut sets: FnvHashMap<&str, (Vec<&str>, usize)> = FnvHashMap::default();
    for spec in input.desired.iter() {
        if let Some(m) = spec.set.as_deref() {
            let set = sets.entry(m.set.as_str()).or_default();
            set.0.push(spec.name.as_str());
            set.1 = set.1.max(m.replicas as usize);
        }
    }
    sets
}

/// Holds the actions that would create, start or reboot the VM of a spec whose dependency is
/// not Ready (its verdict becomes [`Verdict::WaitingForDependencies`], naming the first one
/// not Ready), and the removal of a gone spec while a gone spec that depended on it still has
/// its VM.
pub(super) fn hold(input: &PlanInput<'_>, out: &mut Plan) {
    hold_starts(input, out);
    hold_removals(input, out);
}

/// Whether spec `name` is Ready as far as this cycle's plan knows: its VM matches it (or, for
/// an observe-only or suspended spec, is listed matching it).
pub(super) fn ready(input: &PlanInput<'_>, out: &Plan, name: &str) -> bool {
    if input.unwell.contains_key(name) {
        return false;
    }
    match out.verdicts.get(name) {
        Some(Verdict::UpToDate { .. }) => true,
        Some(Verdict::Observed { vmid, drift, .. } | Verdict::Suspended { vmid, drift, .. }) => {
            vmid.is_some() && drift.is_empty()
        }
        _ => false,
    }
}

/// Whether `action` creates, starts or reboots `spec`'s VM: what waits for dependencies
/// (a converge whose `rebootPolicy` reboots in the same action counts). Other changes of a
/// running VM go on.
fn starts(input: &PlanInput<'_>, spec: &crate::spec::Spec, action: &Action) -> bool {
    match action {
        Action::Create { .. } | Action::Recreate { .. } => true,
        Action::Converge { why, .. } if why.iter().any(|w| w == "start") => true,
        _ => super::may_reboot(input, spec, action),
    }
}

fn hold_starts(input: &PlanInput<'_>, out: &mut Plan) {
    let mut held: FnvHashMap<String, &crate::spec::Spec> = FnvHashMap::default();
    let mut sets: Option<FnvHashMap<&str, (Vec<&str>, usize)>> = None;
    for spec in input.desired.iter().filter(|s| !s.depends_on.is_empty()) {
        // A set's name stands for its members: Ready when every one is.
        let mut not_ready = None;
        for dep in spec.depends_on.iter() {
            let is_spec = out.verdicts.contains_key(dep.as_str());
            let members = match is_spec {
                true => None,
                false => sets
                    .get_or_insert_with(|| set_members(input))
                    .get(dep.as_str()),
            };
            let waiting = match members {
                // A member held invalid is not Ready either: the set waits for it.
                Some((m, replicas)) => (m
                    .iter()
                    .find(|n| !ready(input, out, n))
                    .map(|n| n.to_string()))
                .or_else(|| (m.len() < *replicas).then(|| dep.clone())),
                None => (!ready(input, out, dep)).then(|| dep.clone()),
            };
            if waiting.is_some() {
                not_ready = waiting;
                break;
            }
        }
        let Some(on) = not_ready else {
            continue;
        };
        let name = spec.name.as_str();
        if !(out.actions.iter()).any(|a| a.spec() == Some(name) && starts(input, spec, a)) {
            continue;
        }
        Arc::make_mut(&mut out.verdicts).insert(
            spec.name.clone(),
            Verdict::WaitingForDependencies {
                elsewhere: input.elsewhere.contains(&on),
                not_healthy: input.unwell.contains_key(&on),
                on,
            },
        );
        held.insert(spec.name.to_string(), spec);
    }
    if !held.is_empty() {
        out.actions
            .retain(|a| match a.spec().and_then(|s| held.get(s)) {
                Some(spec) => !starts(input, spec, a),
                None => true,
            });
    }
}

/// A gone spec's VM is removed after the VMs of the gone specs that depended on it: while one
/// of those still has its VM (removed this cycle, held, or waiting), its removal waits.
fn hold_removals(input: &PlanInput<'_>, out: &mut Plan) {
    let removing = |a: &Action| matches!(a, Action::Remove { release: false, .. });
    if !out.actions.iter().any(removing) {
        return;
    }
    // The dependencies of gone specs whose VM still exists.
    let needed: FnvHashSet<&str> = (input.records.iter())
        .filter(|(name, rec)| {
            !rec.depends_on.is_empty()
                && rec.vmid().is_some()
                && !out.verdicts.contains_key(name.as_str())
        })
        .flat_map(|(_, rec)| rec.depends_on.iter().map(String::as_str))
        .collect();
    if needed.is_empty() {
        return;
    }
    let waiting = &mut out.removals_waiting;
    out.actions.retain(|a| {
        let held = removing(a) && a.spec().is_some_and(|s| needed.contains(s));
        if held && let Some(spec) = a.spec() {
            waiting.insert(spec.to_string());
        }
        !held
    });
}
