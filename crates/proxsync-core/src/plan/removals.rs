//! What goes away: the VMs of removed specs, the VMs of specs now outside this install's
//! selector (handed over, never deleted), orphans, and the safety valves that refuse every
//! delete, release and hand-over of a cycle at once.

use std::collections::{BTreeMap, BTreeSet};

use super::rename::{Fate, Renames};
use super::{Action, Orphan, OrphanDisposition, Plan, PlanInput, Refused, TemplateKept};
use crate::config::OrphanPolicy;
use crate::model::{Making, ObservedVm, Power, SiteView};
use crate::model::{SpecRecord, VmState};
use crate::util::fnv::{FnvHashMap, FnvHashSet};

/// The removals of specs that are gone (neither desired, invalid, nor renamed): delete or
/// release their VM, or forget the record when the VM is gone too; a spec now outside the
/// selector (`elsewhere`) has its VM handed over instead. Nothing when the spec set was not
/// read completely.
pub(super) fn gone_specs(
    input: &PlanInput<'_>,
    desired: &FnvHashSet<&str>,
    renames: &Renames<'_>,
    templates_kept: &mut BTreeMap<String, TemplateKept>,
) -> Vec<Action> {
    let mut removals = Vec::new();
    if !input.complete {
        return removals;
    }
    for (name, rec) in input.records {
        if !is_gone(input, desired, renames, name) {
            continue;
        }
        let Some(view) = input.sites.get(rec.site.as_str()) else {
            // The site left the config: nothing can be done there; keep the record.
            continue;
        };
        if !view.reachable() {
            continue;
        }
        if let Some(why) = template_still_needed(input, name, rec, view) {
            templates_kept.insert(name.clone(), why);
            continue;
        }
        let removal = gone_spec(name, rec, view);
        if input.elsewhere.contains(name) {
            removals.extend(removal.map(hand_over));
        } else {
            removals.extend(removal);
        }
    }
    removals
}

/// Whether the gone spec `name` is an old version of a `ProxmoxTemplate` (its record says it
/// built a template) that must wait: while a guest is being cloned from it (a create's intent
/// names it, or a clone of this install's token that no record explains runs on its site), or
/// while its template's current version is not built yet (the site keeps a template to clone
/// from: make before break). `Some`: why, in words.
pub(super) fn template_still_needed(
    input: &PlanInput<'_>,
    name: &str,
    rec: &SpecRecord,
    view: &SiteView,
) -> Option<TemplateKept> {
    let vmid = rec.vmid().filter(|_| rec.built_template)?;
    let cloning = input.records.iter().find(|(_, r)| {
        r.site == rec.site
            && matches!(&r.vm, VmState::Creating { clone_of: Some(c), .. } if c.vmid == vmid)
    });
    if let Some((guest, _)) = cloning {
        return Some(TemplateKept::Cloning {
            guest: guest.clone(),
        });
    }
    if (view.vms.values()).any(|vm| matches!(vm.making, Some(Making::Clone | Making::Unread))) {
        return Some(TemplateKept::UnexplainedClone);
    }
    let template = crate::spec::templates::template_of_name(name)?;
    let current = input
        .desired
        .iter()
        .find(|s| s.site == rec.site && s.template.as_ref().is_some_and(|t| t.name == template))?;
    let rec = input.records.get(current.name.as_str());
    let vm = rec
        .and_then(SpecRecord::vmid)
        .and_then(|id| view.vms.get(&id));
    let built = vm.is_some_and(|vm| super::spec::template_built(current, rec, vm));
    (!built).then(|| TemplateKept::Successor {
        current: current.name.to_string(),
        template: template.to_string(),
    })
}

/// Whether the spec of a record is gone: neither desired, invalid, nor renamed.
fn is_gone(
    input: &PlanInput<'_>,
    desired: &FnvHashSet<&str>,
    renames: &Renames<'_>,
    name: &str,
) -> bool {
    !(desired.contains(name) || input.is_invalid(name) || renames.is_source(name))
}

/// While a rewind is applied, the removals of gone specs due but not planned this cycle (the
/// site unreachable, the node unhealthy, the VM's state unknown): the valves count them with
/// the planned ones, as one batch. 0 otherwise.
pub(super) fn held_back(
    input: &PlanInput<'_>,
    desired: &FnvHashSet<&str>,
    renames: &Renames<'_>,
) -> usize {
    if input.rewind.is_none() || !input.complete {
        return 0;
    }
    let held = |rec: &SpecRecord| {
        // A site that left the config: nothing will be removed there.
        let Some(view) = input.sites.get(rec.site.as_str()) else {
            return false;
        };
        if !view.reachable() || view.incomplete() {
            return rec.vmid().is_some();
        }
        match rec.vmid().and_then(|id| view.vms.get(&id)) {
            None => matches!(&rec.vm, VmState::Creating { node, .. } if !view.node_healthy(node)),
            Some(vm) => vm.is_unknown() || !view.node_healthy(&vm.node),
        }
    };
    input
        .records
        .iter()
        .filter(|(name, rec)| is_gone(input, desired, renames, name) && held(rec))
        .count()
}

/// The removal of one gone spec on its reachable site, if one can happen now.
fn gone_spec(name: &str, rec: &SpecRecord, view: &SiteView) -> Option<Action> {
    match rec.vmid().and_then(|id| view.vms.get(&id)) {
        // A create in flight whose VM is not listed yet: execute finds out (it waits for the
        // task, then deletes; or forgets an intent that never reached PVE). Forgetting it
        // here would leak the VM the task is making.
        None => match &rec.vm {
            VmState::Creating { vmid, node, .. } => {
                view.node_healthy(node).then(|| Action::Remove {
                    spec: name.to_string(),
                    site: rec.site.to_string(),
                    node: node.to_string(),
                    vmid: *vmid,
                    release: rec.orphan_on_delete,
                })
            }
            _ => Some(Action::Forget {
                spec: name.to_string(),
            }),
        },
        Some(vm) if vm.is_unknown() || !view.node_healthy(&vm.node) => None,
        Some(vm) => Some(Action::Remove {
            spec: name.to_string(),
            site: rec.site.to_string(),
            node: vm.node.to_string(),
            vmid: vm.vmid,
            release: rec.orphan_on_delete,
        }),
    }
}

/// A spec's removal as a hand-over: its VM goes to the install whose selector matches the spec.
fn hand_over(removal: Action) -> Action {
    match removal {
        Action::Remove {
            spec,
            site,
            node,
            vmid,
            ..
        } => Action::HandOver {
            spec,
            site,
            node,
            vmid,
        },
        other => other,
    }
}

/// Orphans: owned VMs that no record and no spec explains, plus the extra VMs claiming a
/// spec (`out.duplicates`) and VMs whose marker claims a spec but does not verify. Each is
/// remembered in `out.orphans_seen` and listed in `out.orphans`; those due for deletion add a
/// `DeleteOrphan` to `removals`.
pub(super) fn orphans(
    input: &PlanInput<'_>,
    desired: &FnvHashSet<&str>,
    renames: &Renames<'_>,
    out: &mut Plan,
    removals: &mut Vec<Action>,
) {
    // The records' VMIDs, per site (looked up for every VM listed).
    let mut reserved: BTreeMap<&str, FnvHashSet<u32>> = BTreeMap::new();
    for r in input.records.values() {
        if let Some(vmid) = r.vmid() {
            reserved.entry(r.site.as_str()).or_default().insert(vmid);
        }
    }
    let no_vmids = FnvHashSet::default();
    let extras: BTreeSet<(&str, u32)> = out
        .duplicates
        .values()
        .flat_map(|d| d.extras.iter().map(|id| (d.site.as_str(), *id)))
        .collect();
    let (spec_site, moved_records) = site_moves(input);
    let renamed_from: FnvHashSet<&str> = (input.desired.iter())
        .filter_map(|s| s.renamed_from.as_deref())
        .collect();
    for view in input.sites.values().filter(|v| v.reachable()) {
        let reserved = reserved.get(view.name.as_str()).unwrap_or(&no_vmids);
        for vm in view.vms.values() {
            if let Some((spec, rename)) = renames.of_vm(&view.name, vm.vmid) {
                // A renamed spec's old VM: never an orphan to delete.
                if let Some((disposition, duplicate_of)) = kept_by_rename(spec, &rename.fate) {
                    let first_seen = sighted(input, &mut out.orphans_seen, view, vm);
                    out.orphans
                        .push(orphan(view, vm, first_seen, disposition, duplicate_of));
                }
                continue;
            }
            let site_moved = moved_records
                .get(&(view.name.as_str(), vm.vmid))
                .copied()
                .or_else(|| {
                    let m = vm.marker.as_ref()?;
                    let to = spec_site.get(m.spec.as_str())?;
                    (vm.owned_by(input.install_id) && *to != view.name).then_some(m.spec.as_str())
                });
            if let Some(spec) = site_moved.filter(|_| !vm.template) {
                let first_seen = sighted(input, &mut out.orphans_seen, view, vm);
                let disposition = OrphanDisposition::SiteMoved {
                    spec: spec.to_string(),
                    to: spec_site[spec].to_string(),
                };
                out.orphans
                    .push(orphan(view, vm, first_seen, disposition, None));
                continue;
            }
            // A second VM claiming a spec is listed even without the ownership tag (a clone
            // gets the tag only when converged), but deleted only with it.
            let extra = extras.contains(&(view.name.as_str(), vm.vmid));
            let owned = vm.owned_by(input.install_id);
            let forged = vm.unverified_claim(input.install_id);
            if vm.template && owned && !reserved.contains(&vm.vmid) {
                let (seen, orphans) = (&mut out.orphans_seen, &mut out.orphans);
                orphans.extend(template_orphan(input, desired, view, vm, seen));
                continue;
            }
            if vm.template || !(owned || extra || forged.is_some()) || reserved.contains(&vm.vmid) {
                continue;
            }
            let marker_spec = vm.marker.as_ref().map(|m| m.spec.as_str()).unwrap_or("");
            if owned && !extra && input.elsewhere.contains(marker_spec) {
                // Another install's spec now (the database lost its record): handed over.
                if !vm.is_unknown() && view.node_healthy(&vm.node) {
                    removals.push(Action::HandOver {
                        spec: marker_spec.to_string(),
                        site: view.name.clone(),
                        node: vm.node.to_string(),
                        vmid: vm.vmid,
                    });
                }
                continue;
            }
            if !extra
                && forged.is_none()
                && (desired.contains(marker_spec) || input.is_invalid(marker_spec))
            {
                continue; // adopted above, or an invalid spec's VM left alone
            }
            let first_seen = sighted(input, &mut out.orphans_seen, view, vm);
            // A guest of the spec a desired one is renamed from (`proxsync.io/renamed-from`) is
            // never deleted as an orphan while the annotation stands: the rename may take it.
            let deletable = owned && !renamed_from.contains(marker_spec);
            let disposition = disposition(input, view, vm, deletable, forged, first_seen, removals);
            let duplicate_of = extra.then(|| marker_spec.to_string());
            out.orphans
                .push(orphan(view, vm, first_seen, disposition, duplicate_of));
        }
    }
}

/// A template of this install's that no record explains: listed when no spec claims it (an
/// old version of a `ProxmoxTemplate` whose record was lost, or a guest a person made a
/// template), never deleted as an orphan (nothing shows proxsync built it).
fn template_orphan(
    input: &PlanInput<'_>,
    desired: &FnvHashSet<&str>,
    view: &SiteView,
    vm: &ObservedVm,
    seen: &mut BTreeMap<(String, u32), u64>,
) -> Option<Orphan> {
    let marker_spec = vm.marker.as_ref().map_or("", |m| m.spec.as_str());
    if desired.contains(marker_spec) || input.is_invalid(marker_spec) {
        return None;
    }
    let first_seen = sighted(input, seen, view, vm);
    let disposition = OrphanDisposition::Template {
        spec: marker_spec.to_string(),
    };
    Some(orphan(view, vm, first_seen, disposition, None))
}

/// How the old VM of a rename into `spec` is listed, if it is: left on another site, or kept
/// beside the spec's own VM. One being re-labelled is not listed.
fn kept_by_rename(spec: &str, fate: &Fate<'_>) -> Option<(OrphanDisposition, Option<String>)> {
    match fate {
        // Still the old spec's by its record: not an orphan.
        Fate::Relabel | Fate::Unproven { .. } => None,
        Fate::OnOtherSite { to, .. } => Some((
            OrphanDisposition::SiteMoved {
                spec: spec.to_string(),
                to: to.to_string(),
            },
            None,
        )),
        Fate::Second { .. } => Some((OrphanDisposition::Reported, Some(spec.to_string()))),
    }
}

/// Spec name -> the site it names (looked up for every VM listed).
type SpecSites<'a> = FnvHashMap<&'a str, &'a str>;
/// (site, VMID) of a record's VM -> its spec, when the spec now names another site.
type MovedRecords<'a> = BTreeMap<(&'a str, u32), &'a str>;

/// Where each desired spec lives now, and the records whose VM is on another site than their
/// spec names: a VM of a spec on another site was left behind by a site change (found by the
/// record, or by its verified marker once the record moved on).
fn site_moves<'a>(input: &PlanInput<'a>) -> (SpecSites<'a>, MovedRecords<'a>) {
    let spec_site: SpecSites = input
        .desired
        .iter()
        .map(|s| (s.name.as_str(), s.site.as_str()))
        .collect();
    let moved_records = input
        .records
        .iter()
        .filter(|(name, r)| spec_site.get(name.as_str()).is_some_and(|s| *s != r.site))
        .filter_map(|(name, r)| Some(((r.site.as_str(), r.vmid()?), name.as_str())))
        .collect();
    (spec_site, moved_records)
}

fn orphan(
    view: &SiteView,
    vm: &ObservedVm,
    first_seen_ms: u64,
    disposition: OrphanDisposition,
    duplicate_of: Option<String>,
) -> Orphan {
    Orphan {
        site: view.name.clone(),
        vmid: vm.vmid,
        kind: vm.kind,
        node: vm.node.to_string(),
        name: vm.name.as_deref().map(str::to_string),
        power: vm.power.as_str().to_string(),
        first_seen_ms,
        disposition,
        duplicate_of,
    }
}

/// When the orphan `vm` was first seen (now, if this is the first time), remembered in the plan.
fn sighted(
    input: &PlanInput<'_>,
    seen: &mut BTreeMap<(String, u32), u64>,
    view: &SiteView,
    vm: &ObservedVm,
) -> u64 {
    let key = (view.name.clone(), vm.vmid);
    let first_seen = input
        .orphans_seen
        .get(&key)
        .copied()
        .unwrap_or(input.now_ms);
    seen.insert(key, first_seen);
    first_seen
}

/// What happens to an orphan first seen at `first_seen`: a foreign claim is only reported; a
/// stopped, unlocked VM on a healthy node that this install owns and may delete (`deletable`:
/// owned, and not the original of a rename) is deleted after the grace period (under
/// `orphans = "delete-stopped"`; the `DeleteOrphan` goes to `removals`); others are reported.
fn disposition(
    input: &PlanInput<'_>,
    view: &SiteView,
    vm: &ObservedVm,
    owned_deletable: bool,
    forged: Option<&str>,
    first_seen: u64,
    removals: &mut Vec<Action>,
) -> OrphanDisposition {
    let grace_end = first_seen + input.reconcile.orphan_grace.as_millis() as u64;
    let deletable = input.reconcile.orphans == OrphanPolicy::DeleteStopped
        && owned_deletable
        && vm.power == Power::Stopped
        && vm.lock.is_none()
        && view.node_healthy(&vm.node);
    if let Some(spec) = forged {
        // Typed by hand or copied from another VM: never adopted, changed or deleted.
        OrphanDisposition::ForeignClaim {
            spec: spec.to_string(),
        }
    } else if deletable && input.now_ms >= grace_end {
        removals.push(Action::DeleteOrphan {
            site: view.name.clone(),
            node: vm.node.to_string(),
            vmid: vm.vmid,
        });
        OrphanDisposition::Deleting
    } else if deletable {
        OrphanDisposition::DeleteAfter { at_ms: grace_end }
    } else {
        OrphanDisposition::Reported
    }
}

/// A delete, a release or a hand-over: what the valves count and may refuse.
fn is_delete(a: &Action) -> bool {
    matches!(
        a,
        Action::Remove { .. } | Action::DeleteOrphan { .. } | Action::HandOver { .. }
    )
}

/// The valves, over every delete, release and hand-over of this cycle (spec removals and
/// orphans alike): a spec set not read completely, an empty desired set, or more than
/// `max_delete_fraction` of the managed VMs refuse them all. The removals join the plan's
/// actions, without the deletes and releases when refused (the reason goes to
/// `out.refused`, and orphans being deleted are reported instead).
pub(super) fn apply_valves(
    input: &PlanInput<'_>,
    removals: Vec<Action>,
    held_back: usize,
    out: &mut Plan,
) {
    match refusal(input, &removals, held_back) {
        Some(reason) => {
            out.refused.push(reason);
            out.actions
                .extend(removals.into_iter().filter(|a| !is_delete(a)));
            for o in out
                .orphans
                .iter_mut()
                .filter(|o| o.disposition == OrphanDisposition::Deleting)
            {
                o.disposition = OrphanDisposition::Refused;
            }
        }
        None => out.actions.extend(removals),
    }
}

/// Why the valves refused this cycle's deletes, releases and hand-overs (its words in
/// `words`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Valve {
    /// The spec set could not be read completely.
    SpecSetIncomplete {
        /// The deletes refused.
        removing: usize,
    },
    /// The desired set is empty.
    DesiredSetEmpty {
        /// The deletes refused.
        removing: usize,
    },
    /// More than `max_delete_fraction` of the managed guests in one commit.
    TooMany {
        /// The deletes refused.
        removing: usize,
        /// The managed guests.
        managed: usize,
        /// `[reconcile] max_delete_fraction`.
        max: Fraction,
    },
    /// Commit `to` rewinds the branch from `from`, which can no longer be read.
    RewindUnreadable {
        /// The rewind's deletes, planned this cycle or not.
        batch: usize,
        /// The commit rewound to.
        to: String,
        /// The commit rewound from.
        from: String,
    },
    /// Commit `to` rewinds the branch from `from`, and its deletes, one batch, are more than
    /// `max_delete_fraction` of the managed guests.
    RewindTooMany {
        /// The rewind's deletes, planned this cycle or not.
        batch: usize,
        /// The managed guests, without those of the specs the rewind added.
        managed: usize,
        /// The commit rewound to.
        to: String,
        /// The commit rewound from.
        from: String,
        /// `[reconcile] max_delete_fraction`.
        max: Fraction,
    },
}

/// A fraction from the configuration, compared by its bits (so a plan is `Eq`).
#[derive(Debug, Clone, Copy)]
pub struct Fraction(pub f64);

impl PartialEq for Fraction {
    fn eq(&self, other: &Fraction) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Fraction {}

/// Why the deletes, releases and hand-overs among `removals` are refused, if they are.
/// `held_back`: a rewind's removals not planned this cycle ([`held_back`]).
fn refusal(input: &PlanInput<'_>, removals: &[Action], held_back: usize) -> Option<Refused> {
    let removing = removals.iter().filter(|a| is_delete(a)).count();
    if removing == 0 {
        return None;
    }
    let hand_overs = removals
        .iter()
        .filter(|a| matches!(a, Action::HandOver { .. }))
        .count();
    let valve = valve(input, removing, held_back)?;
    Some(Refused::Deletes { valve, hand_overs })
}

/// The valve that refuses `removing` deletes, if one does.
fn valve(input: &PlanInput<'_>, removing: usize, held_back: usize) -> Option<Valve> {
    if !input.complete {
        return Some(Valve::SpecSetIncomplete { removing });
    }
    if input.desired.is_empty() && input.invalid.is_empty() {
        return Some(Valve::DesiredSetEmpty { removing });
    }
    if let Some(rewind) = input.rewind {
        return rewind_refusal(input, rewind, removing + held_back);
    }
    let managed = managed(input, &BTreeSet::new());
    let max = input.reconcile.max_delete_fraction;
    (removing as f64 > max * managed as f64).then_some(Valve::TooMany {
        removing,
        managed,
        max: Fraction(max),
    })
}

/// Why a rewind's deletes are refused, if they are: the whole batch (`batch` VMs, planned
/// this cycle or not) against the managed VMs without those of the specs the rewind added,
/// which it creates (see [`crate::model::RewindBatch`]).
fn rewind_refusal(
    input: &PlanInput<'_>,
    rewind: &crate::model::RewindBatch,
    batch: usize,
) -> Option<Valve> {
    let (to, from) = (rewind.commit.clone(), rewind.from.clone());
    let Some(from_specs) = &rewind.from_specs else {
        return Some(Valve::RewindUnreadable { batch, to, from });
    };
    let added: BTreeSet<&str> = input
        .desired
        .iter()
        .map(|s| s.name.as_str())
        .filter(|name| !from_specs.contains(*name))
        .collect();
    let managed = managed(input, &added);
    let max = input.reconcile.max_delete_fraction;
    (batch as f64 > max * managed as f64).then_some(Valve::RewindTooMany {
        batch,
        managed,
        to,
        from,
        max: Fraction(max),
    })
}

/// The number of managed VMs: those the records know and the owned VMs listed (after a lost
/// database the records are empty, but the VMs are still there), without those of the specs
/// `leave_out` names.
fn managed(input: &PlanInput<'_>, leave_out: &BTreeSet<&str>) -> usize {
    let mut managed: BTreeSet<(&str, u32)> = input
        .records
        .iter()
        .filter(|(name, _)| !leave_out.contains(name.as_str()))
        .filter_map(|(_, r)| Some((r.site.as_str(), r.vmid()?)))
        .collect();
    for view in input.sites.values() {
        for vm in view.vms.values() {
            let left_out = vm
                .marker
                .as_ref()
                .is_some_and(|m| leave_out.contains(m.spec.as_str()));
            if !vm.template && vm.owned_by(input.install_id) && !left_out {
                managed.insert((view.name.as_str(), vm.vmid));
            }
        }
    }
    managed.len()
}
