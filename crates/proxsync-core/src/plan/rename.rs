//! Renames of `metadata.name`: a removed spec whose VM a new spec of the same commit takes over.
//!
//! A new spec is renamed from a removed one when its `proxsync.io/renamed-from` annotation names
//! it (confirmed), or when it has exactly the content the removed spec's VM was last converged
//! to (suspected). The old spec's VM is found from its record, or, after the state database was
//! lost, from the VM whose verifying marker names the old spec; `gate::rename` judges what the
//! observation saw of it. What happens then:
//! - on the new spec's site, the new spec without a VM of its own: the VM is re-labelled
//!   (`Action::Relabel`), once confirmed;
//! - on another site: the site-change rule. The VM stays there, listed (`SiteMoved`), and the new
//!   spec waits (`SiteMoved`) unless it has a VM already or allows a recreate;
//! - on the new spec's site while the new spec has a VM of its own: a second VM of the spec
//!   (`DuplicateVM`), kept and listed, never deleted by the orphan policy.
//!
//! In every case the old spec is not removed and its VM is not an orphan to delete.

use std::collections::{BTreeMap, BTreeSet};

use super::index::SiteIndex;
use super::{Action, Duplicate, PlanInput, Unreadable, Verdict};
use crate::gate::rename::{Evidence, Recorded, Refused, may_relabel};
use crate::model::{ObservedVm, SiteView};
use crate::model::{SpecRecord, VmState};
use crate::spec::Spec;
use crate::spec::content_hash;
use crate::util::fnv::FnvHashSet;

/// A removed spec whose VM a new spec takes over.
pub(super) struct Rename<'a> {
    pub(super) from: &'a str,
    /// Where the old spec's VM is.
    pub(super) site: &'a str,
    node: &'a str,
    pub(super) vmid: u32,
    /// The new spec's `proxsync.io/renamed-from` annotation names `from`.
    confirmed: bool,
    /// What the observation could see of the VM.
    seen: Seen,
    pub(super) fate: Fate<'a>,
}

/// What the observation could see of the old spec's VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Listed, its marker judged (or not read: execute reads it before anything).
    Listed,
    /// Listed with an unknown state.
    Unknown,
    /// Its site (the record's) could not be read.
    Unreachable,
}

/// What the rename comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fate<'a> {
    /// The VM is re-labelled for the new spec (same site, the new spec has no VM).
    Relabel,
    /// The VM is on another site than the new spec names: it stays there, listed; the new spec
    /// waits (`SiteMoved`) when `wait`, else is planned as any spec (it has a VM, or allows a
    /// recreate on a site change).
    OnOtherSite { to: &'a str, wait: bool },
    /// The new spec has its own VM `kept`: the old spec's VM is a second one, kept and listed.
    Second { kept: u32 },
    /// The old spec's record names this VM, but its marker does not show it is the old spec's
    /// (`why`): the evidence disagrees, so both specs wait for a person (never a delete of the
    /// old spec's VM plus a create of the new spec's).
    Unproven { why: Refused },
}

/// The renames of a cycle, by the new spec's name.
#[derive(Default)]
pub(super) struct Renames<'a> {
    pub(super) by_spec: BTreeMap<&'a str, Rename<'a>>,
    /// Specs renamed from a removed spec whose VM is not found while a place it may be in
    /// cannot be read: nothing is created for them yet.
    waiting: BTreeMap<&'a str, Verdict>,
}

impl<'a> Renames<'a> {
    /// The old spec `name` is taken by a rename: it is not removed.
    pub(super) fn is_source(&self, name: &str) -> bool {
        self.by_spec.values().any(|r| r.from == name)
    }

    /// The rename whose old VM is `vmid` on `site`, with the new spec's name.
    pub(super) fn of_vm(&self, site: &str, vmid: u32) -> Option<(&'a str, &Rename<'a>)> {
        self.by_spec
            .iter()
            .find(|(_, r)| r.site == site && r.vmid == vmid && r.seen != Seen::Unreachable)
            .map(|(spec, r)| (*spec, r))
    }

    /// The decision for `spec` when its rename makes it: the re-label (or why not yet), or the
    /// wait of a rename across sites, or of one whose VM cannot be looked for. `None`: planned
    /// as any spec.
    pub(super) fn decide(
        &self,
        input: &PlanInput<'_>,
        spec: &Spec,
        actions: &mut Vec<Action>,
    ) -> Option<Verdict> {
        if let Some(v) = self.waiting.get(spec.name.as_str()) {
            return Some(v.clone());
        }
        let r = self.by_spec.get(spec.name.as_str())?;
        match &r.fate {
            Fate::Relabel => Some(plan_rename(input, spec, r, actions)),
            Fate::OnOtherSite { wait: true, .. } => Some(Verdict::SiteMoved {
                from: r.site.to_string(),
                vmid: r.vmid,
            }),
            Fate::OnOtherSite { wait: false, .. } | Fate::Second { .. } => None,
            Fate::Unproven { why } => Some(Verdict::RenameUnproven {
                from: r.from.to_string(),
                vmid: r.vmid,
                why: Box::new(why.clone()),
            }),
        }
    }

    /// The removed spec `spec` is renamed from, when the rename decides the spec (see
    /// [`Renames::decide`]: a re-label, or a wait), with its VM as (site, VMID) when found: a
    /// hands-off source covering that spec holds the rename and all after it.
    pub(super) fn decided_from<'s>(
        &'s self,
        spec: &'s Spec,
    ) -> Option<(&'s str, Option<(&'s str, u32)>)> {
        if self.waiting.contains_key(spec.name.as_str()) {
            return (spec.renamed_from.as_deref()).map(|from| (from, None));
        }
        let r = self.by_spec.get(spec.name.as_str())?;
        match r.fate {
            Fate::Relabel | Fate::Unproven { .. } | Fate::OnOtherSite { wait: true, .. } => {
                Some((r.from, Some((r.site, r.vmid))))
            }
            Fate::OnOtherSite { wait: false, .. } | Fate::Second { .. } => None,
        }
    }

    /// The old spec's VM as a second VM of `spec`, besides `found` (VMs carrying its marker).
    pub(super) fn duplicate(&self, spec: &Spec, found: Option<Duplicate>) -> Option<Duplicate> {
        let r = self.by_spec.get(spec.name.as_str());
        let Some((r, kept)) = r.and_then(|r| match r.fate {
            Fate::Second { kept } => Some((r, kept)),
            _ => None,
        }) else {
            return found;
        };
        let mut d = found.unwrap_or_else(|| Duplicate {
            site: spec.site.to_string(),
            kept,
            extras: Vec::new(),
            renamed_from: None,
        });
        d.extras.push(r.vmid);
        d.extras.sort_unstable();
        d.extras.dedup();
        d.renamed_from = Some(r.from.to_string());
        Some(d)
    }
}

/// Finds the renames of this commit (see the module's doc). Nothing when the spec set was not
/// read completely (nothing is treated as removed then).
pub(super) fn renames<'a>(
    input: &'a PlanInput<'a>,
    desired: &FnvHashSet<&str>,
    indexes: &BTreeMap<&'a str, SiteIndex<'a>>,
) -> Renames<'a> {
    let mut out = Renames::default();
    let gone = |name: &str| {
        // A spec now outside the selector is still in the repository: not removed.
        !desired.contains(name) && !input.is_invalid(name) && !input.elsewhere.contains(name)
    };
    if !input.complete {
        held_while_incomplete(input, indexes, gone, &mut out);
        return out;
    }
    // The removed specs' records with a VM: what a suspected rename is looked for in.
    let removed: Vec<(&str, &SpecRecord)> = input
        .records
        .iter()
        .filter(|(name, r)| gone(name) && matches!(r.vm, VmState::Exists { .. }))
        .map(|(n, r)| (n.as_str(), r))
        .collect();
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    for spec in input.desired {
        let confirmed = spec.renamed_from.as_deref().filter(|from| gone(from));
        if confirmed.is_none() && removed.is_empty() {
            continue;
        }
        let own_vm = own_vm(input, spec, input.records.get(spec.name.as_str()), indexes);
        let found = match confirmed {
            Some(from) => find(input, indexes, spec, from, input.records.get(from)),
            // A suspected rename only for a new spec without a VM, from the records' content.
            None if own_vm.is_none() => {
                let hash = content_hash(spec);
                removed
                    .iter()
                    .filter(|(from, r)| {
                        r.site == spec.site
                            && r.applied_content.as_deref() == Some(hash.as_str())
                            && !taken.contains(from)
                    })
                    .find_map(|(from, r)| by_record(input, spec, from, r, false))
            }
            None => None,
        };
        let Some(mut r) = found else {
            if let Some(from) = confirmed
                && own_vm.is_none()
                && let Some(wait) =
                    in_flight(input, from).or_else(|| unresolved(input, indexes, from))
            {
                out.waiting.insert(spec.name.as_str(), wait);
            }
            continue;
        };
        if !taken.insert(r.from) {
            continue;
        }
        r.confirmed = confirmed.is_some();
        r.fate = match own_vm.filter(|id| *id != r.vmid) {
            // The evidence disagrees: held whatever else holds.
            _ if matches!(r.fate, Fate::Unproven { .. }) => r.fate.clone(),
            _ if r.site != spec.site => Fate::OnOtherSite {
                to: spec.site.as_str(),
                wait: own_vm.is_none() && !spec.allow_recreate_on_site_change,
            },
            Some(kept) => Fate::Second { kept },
            None => Fate::Relabel,
        };
        out.by_spec.insert(spec.name.as_str(), r);
    }
    out
}

/// With a spec set not read completely nothing is treated as removed, so no rename is judged:
/// the spec named by an annotation may be in a file that could not be read. A spec renamed from
/// one not in the set, with no VM of its own, waits while that spec's VM (by its record, or by
/// its verifying marker) is there: creating it now would make a second VM beside its original.
fn held_while_incomplete<'a>(
    input: &'a PlanInput<'a>,
    indexes: &BTreeMap<&'a str, SiteIndex<'a>>,
    gone: impl Fn(&str) -> bool,
    out: &mut Renames<'a>,
) {
    for spec in input.desired {
        let Some(from) = spec.renamed_from.as_deref().filter(|f| gone(f)) else {
            continue;
        };
        if own_vm(input, spec, input.records.get(spec.name.as_str()), indexes).is_some() {
            continue;
        }
        let recorded = input.records.get(from).and_then(SpecRecord::vmid);
        let marked = || {
            (indexes.values())
                .filter_map(|i| i.by_marker.get(from))
                .flat_map(|vms| vms.iter().map(|vm| vm.vmid))
                .min()
        };
        if let Some(vmid) = recorded.or_else(marked) {
            let from = from.to_string();
            let error = Unreadable::RenameUndecided { from, vmid };
            out.waiting
                .insert(spec.name.as_str(), Verdict::SiteUnreachable { error });
        }
    }
}

/// The new spec's own VM: its record's (unless gone from its reachable site), else the lowest
/// VMID carrying its verifying marker on its site.
fn own_vm(
    input: &PlanInput<'_>,
    spec: &Spec,
    rec: Option<&SpecRecord>,
    indexes: &BTreeMap<&str, SiteIndex<'_>>,
) -> Option<u32> {
    let recorded = rec.and_then(|r| {
        let vmid = r.vmid()?;
        let view = input.sites.get(r.site.as_str())?;
        (!view.reachable() || view.vms.contains_key(&vmid)).then_some(vmid)
    });
    recorded.or_else(|| {
        let claimants = indexes
            .get(spec.site.as_str())?
            .by_marker
            .get(spec.name.as_str())?;
        claimants.iter().map(|vm| vm.vmid).min()
    })
}

/// The VM of removed spec `from` a confirmed rename into `spec` takes: the VM of its record;
/// without a record (a lost database) or when that VM is gone, the lowest VMID whose verifying
/// marker names `from`, on the new spec's site first. A record with a create or a delete in
/// flight is no rename (the removal finishes it).
fn find<'a>(
    input: &'a PlanInput<'a>,
    indexes: &BTreeMap<&'a str, SiteIndex<'a>>,
    spec: &Spec,
    from: &'a str,
    rec: Option<&'a SpecRecord>,
) -> Option<Rename<'a>> {
    if let Some(r) = rec {
        match r.vm {
            VmState::Exists { .. } => {
                if let Some(found) = by_record(input, spec, from, r, true) {
                    return Some(found);
                }
            }
            VmState::Creating { .. } | VmState::Deleting { .. } => return None,
            VmState::Absent => {}
        }
    }
    // Sites in order, the new spec's first.
    let sites = indexes
        .get_key_value(spec.site.as_str())
        .into_iter()
        .chain(indexes.iter().filter(|(s, _)| **s != spec.site));
    for (site, index) in sites {
        let Some(view) = input.sites.get(*site).filter(|v| v.reachable()) else {
            continue;
        };
        let mut claimants: Vec<&ObservedVm> = index
            .by_marker
            .get(from)
            .map(|c| {
                c.iter()
                    .copied()
                    .filter(|vm| !recorded(input, site, vm.vmid))
                    .collect()
            })
            .unwrap_or_default();
        claimants.sort_by_key(|vm| vm.vmid);
        let found = claimants.into_iter().find_map(|vm| {
            let ev = evidence(vm, site, None);
            judged(input, spec, from, &ev, vm, view, false)
        });
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The VM of `from`'s record, when the observation finds it there: listed and judged the old
/// spec's by the gate (or not yet judgeable: its site unreachable, its state unknown, its marker
/// not read). `None`: the VMID now holds another VM, or none on a reachable site.
/// `confirmed`: the spec's annotation names `from`, so a record-named VM the gate refuses is held
/// (`Fate::Unproven`), not given up.
fn by_record<'a>(
    input: &'a PlanInput<'a>,
    spec: &Spec,
    from: &'a str,
    r: &'a SpecRecord,
    confirmed: bool,
) -> Option<Rename<'a>> {
    let VmState::Exists { vmid, node } = &r.vm else {
        return None;
    };
    let unjudged = |seen| Rename {
        from,
        site: r.site.as_str(),
        node: node.as_str(),
        vmid: *vmid,
        confirmed: false,
        seen,
        fate: Fate::Relabel,
    };
    let Some(view) = input.sites.get(r.site.as_str()).filter(|v| v.reachable()) else {
        return Some(unjudged(Seen::Unreachable));
    };
    let vm = view.vms.get(vmid)?;
    if vm.is_unknown() {
        return Some(unjudged(Seen::Unknown));
    }
    if vm.marker.is_none() && !vm.marker_read {
        // Not read (a VM without our tag that the record names): execute reads its config and
        // asks the gate before writing anything.
        return Some(Rename {
            node: vm.node.as_str(),
            ..unjudged(Seen::Listed)
        });
    }
    let recorded = Recorded {
        site: r.site.as_str(),
        vmid: *vmid,
        uid: r.uid.as_str(),
    };
    judged(
        input,
        spec,
        from,
        &evidence(vm, &r.site, Some(recorded)),
        vm,
        view,
        confirmed,
    )
}

/// Whether a record of this cycle names VM `vmid` on `site`.
fn recorded(input: &PlanInput<'_>, site: &str, vmid: u32) -> bool {
    input
        .records
        .values()
        .any(|r| r.site == site && r.vmid() == Some(vmid))
}

fn evidence<'v>(vm: &'v ObservedVm, site: &'v str, record: Option<Recorded<'v>>) -> Evidence<'v> {
    Evidence {
        kind: vm.kind,
        vmid: vm.vmid,
        site,
        marker: vm.marker.as_deref(),
        mac_verifies: vm.marker_verified,
        record,
    }
}

/// The rename of `vm` when the gate finds it the old spec's (on the new spec's site or not).
/// When it does not, `None`; or with `hold`, the rename held as unproven (the annotation and
/// the old spec's record name this VM, and its marker disagrees: never a delete plus a create).
fn judged<'a>(
    input: &PlanInput<'_>,
    spec: &Spec,
    from: &'a str,
    ev: &Evidence<'_>,
    vm: &'a ObservedVm,
    view: &'a SiteView,
    hold: bool,
) -> Option<Rename<'a>> {
    match may_relabel(input.install_id, from, &spec.name, &spec.site, ev) {
        Ok(_) | Err(Refused::OtherSite { .. }) => Some(Rename {
            from,
            site: view.name.as_str(),
            node: vm.node.as_str(),
            vmid: vm.vmid,
            confirmed: false,
            seen: if vm.is_unknown() {
                Seen::Unknown
            } else {
                Seen::Listed
            },
            fate: Fate::Relabel,
        }),
        Err(why @ Refused::NotShown { .. }) if hold => Some(Rename {
            from,
            site: view.name.as_str(),
            node: vm.node.as_str(),
            vmid: vm.vmid,
            confirmed: true,
            seen: Seen::Listed,
            fate: Fate::Unproven { why },
        }),
        Err(Refused::NotShown { .. }) => None,
    }
}

/// Why a spec renamed from `from`, whose VM was not found, waits: a site that cannot be read,
/// or a VM of this install whose marker could not be read, may hold it. `None`: it was looked
/// for everywhere.
/// The wait of a spec renamed from `from` while `from`'s record has a create or a delete in
/// flight (no rename is found then, [`find`]): a guest carrying `from`'s marker may be that
/// create's, or one no record names; creating now could make a second one beside it.
fn in_flight(input: &PlanInput<'_>, from: &str) -> Option<Verdict> {
    let rec = input.records.get(from)?;
    let (VmState::Creating { vmid, .. } | VmState::Deleting { vmid, .. }) = rec.vm else {
        return None;
    };
    Some(Verdict::SiteUnreachable {
        error: Unreadable::RenameInFlight {
            from: from.to_string(),
            vmid,
        },
    })
}

fn unresolved(
    input: &PlanInput<'_>,
    indexes: &BTreeMap<&str, SiteIndex<'_>>,
    from: &str,
) -> Option<Verdict> {
    if let Some(site) = input.sites.values().find(|v| !v.reachable()) {
        return Some(Verdict::SiteUnreachable {
            error: Unreadable::RenamedMayBeThere {
                site: site.name.clone(),
                from: from.to_string(),
            },
        });
    }
    indexes
        .values()
        .flat_map(|i| {
            i.unread_by_name
                .values()
                .chain(i.unread_tagged_nameless.values())
        })
        .min()
        .map(|vmid| Verdict::Unknown { vmid: *vmid })
}

/// A re-label on the new spec's site, when confirmed and the VM's node is healthy; otherwise
/// both the delete and the create are held, and the verdict says why.
fn plan_rename(
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
                error: Unreadable::RenameSite {
                    site: r.site.to_string(),
                },
            },
        };
    };
    if r.seen == Seen::Unknown {
        return Verdict::Unknown { vmid: r.vmid };
    }
    if !view.node_healthy(r.node) {
        return Verdict::NodeUnhealthy {
            node: r.node.to_string(),
            quorate: view.health.quorate,
        };
    }
    // Renamed and made the other kind in one change: the old guest is held, not re-labelled
    // as a guest it is not.
    if let Some(vm) = view.vms.get(&r.vmid)
        && vm.kind != spec.kind()
    {
        return Verdict::KindChanged {
            vmid: r.vmid,
            found: vm.kind,
        };
    }
    actions.push(Action::Relabel {
        spec: spec.name.to_string(),
        from: r.from.to_string(),
        site: r.site.to_string(),
        node: r.node.to_string(),
        vmid: r.vmid,
    });
    Verdict::Acting
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use super::super::{Action, OrphanDisposition, Plan, PlanInput, Verdict, plan};
    use crate::config::ReconcileConfig;
    use crate::model::{ObservedVm, Power, SiteView};
    use crate::model::{SpecRecord, VmState};
    use crate::ownership::Marker;
    use crate::pve::types::ClusterHealth;
    use crate::spec::{Spec, Specs, parse_file};

    const NOW: u64 = 10_000_000;

    /// What `plan` looks at: sites `lab` and `eu` (node `pve1` each), install `main`.
    struct World {
        desired: Specs,
        invalid: BTreeSet<String>,
        sites: BTreeMap<String, SiteView>,
        records: BTreeMap<String, SpecRecord>,
        /// Every VM first seen long ago: stopped ones are past the grace period.
        seen: BTreeMap<(String, u32), u64>,
        reconcile: ReconcileConfig,
    }

    impl World {
        fn new(specs: &[Spec]) -> World {
            let site = |name: &str| SiteView {
                name: name.into(),
                error: None,
                health: ClusterHealth {
                    quorate: true,
                    nodes: [("pve1".to_string(), true)].into(),
                },
                vms: BTreeMap::new(),
                other_vmids: BTreeSet::new(),
                unreadable: Vec::new(),
                cluster: Default::default(),
                identity_changed: false,
            };
            World {
                desired: specs.iter().cloned().collect(),
                invalid: BTreeSet::new(),
                sites: [("lab".into(), site("lab")), ("eu".into(), site("eu"))].into(),
                records: BTreeMap::new(),
                seen: BTreeMap::new(),
                reconcile: ReconcileConfig::default(),
            }
        }

        /// A tagged VM on `site` whose marker names `spec` (verifying when `verified`).
        fn vm(&mut self, site: &str, vmid: u32, spec: &str, power: Power, verified: bool) {
            let vm = ObservedVm {
                kind: crate::guest::GuestKind::Qemu,
                vmid,
                node: "pve1".into(),
                name: Some(spec.into()),
                power,
                tags: vec!["proxsync.main".into()],
                cpus: Some(2),
                memory_bytes: Some(2 << 30),
                disk_bytes: Some(32 << 30),
                lock: None,
                ha_state: None,
                template: false,
                marker: Some(Arc::new(Marker {
                    install: "main".into(),
                    spec: spec.into(),
                    uid: format!("uid-{spec}").into(),
                    mac: Some("00".into()),
                })),
                marker_read: true,
                marker_verified: verified,
                making: None,
                uptime_secs: Default::default(),
            };
            self.sites.get_mut(site).unwrap().vms.insert(vmid, vm);
            self.seen.insert((site.to_string(), vmid), 0);
        }

        /// `spec`'s record of VM `vmid` on `site`.
        fn record(&mut self, spec: &str, site: &str, vmid: u32) {
            let rec = SpecRecord {
                uid: format!("uid-{spec}").into(),
                site: site.into(),
                vm: VmState::Exists {
                    vmid,
                    node: "pve1".into(),
                },
                provisioned: true,
                ..Default::default()
            };
            self.records.insert(spec.into(), rec);
        }

        fn plan(&self) -> Plan {
            self.plan_read(true)
        }

        /// The plan when the spec set was read completely (`complete`) or not.
        fn plan_read(&self, complete: bool) -> Plan {
            plan(&PlanInput {
                install_id: "main",
                desired: &self.desired,
                invalid: &self.invalid,
                elsewhere: &BTreeSet::new(),
                sharded: false,
                complete,
                sites: &self.sites,
                records: &self.records,
                orphans_seen: &self.seen,
                reconcile: &self.reconcile,
                config_hash: "",
                now_ms: NOW,
                retry_transient_now: false,
                rewind: None,
                suspensions: &BTreeMap::new(),
                images_waiting: &BTreeMap::new(),
                images: &BTreeMap::new(),
                unwell: &BTreeMap::new(),
                health_checked: false,
            })
        }
    }

    /// Spec `name` on `site`, renamed from `from`, with `extra` under `forProvider`.
    fn spec(name: &str, from: Option<&str>, site: &str, extra: &str) -> Spec {
        let annotation = from
            .map(|f| format!("  annotations:\n    proxsync.io/renamed-from: {f}\n"))
            .unwrap_or_default();
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\n{annotation}\
             spec:\n  forProvider:\n    site: {site}\n    node: pve1\n    image: \"9000\"\n{extra}"
        );
        let (mut specs, diags) = parse_file("t.yaml", yaml.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        specs.remove(0)
    }

    fn relabel(vmid: u32) -> Action {
        Action::Relabel {
            spec: "new".into(),
            from: "old".into(),
            site: "lab".into(),
            node: "pve1".into(),
            vmid,
        }
    }

    /// A spec set not read completely judges no rename (the old spec may be in the file that
    /// could not be read): the renamed spec waits while its original is there, found by its
    /// record or its verifying marker, instead of getting a second VM beside it. One with a VM
    /// of its own is planned as usual, and one whose original is nowhere is created.
    #[test]
    fn an_incomplete_spec_set_creates_no_second_vm_beside_a_renamed_original() {
        let waits = |p: &Plan| {
            assert!(p.actions.is_empty(), "{p:?}");
            let Some(Verdict::SiteUnreachable { error }) = p.verdicts.get("new") else {
                panic!("{p:?}");
            };
            let error = error.to_string();
            assert!(
                error.contains("could not be read completely") && error.contains("VM 100"),
                "{error}"
            );
        };
        let mut w = World::new(&[spec("new", Some("old"), "lab", "")]);
        w.vm("lab", 100, "old", Power::Running, true);
        waits(&w.plan_read(false));
        w.sites.get_mut("lab").unwrap().vms.clear();
        w.record("old", "lab", 100);
        waits(&w.plan_read(false));
        // Read completely: the re-label.
        w.vm("lab", 100, "old", Power::Running, true);
        assert_eq!(w.plan_read(true).actions, vec![relabel(100)]);

        let mut own = World::new(&[spec("new", Some("old"), "lab", "")]);
        own.vm("lab", 100, "old", Power::Running, true);
        own.vm("lab", 101, "new", Power::Running, true);
        own.record("new", "lab", 101);
        let p = own.plan_read(false);
        assert!(
            !matches!(p.verdicts["new"], Verdict::SiteUnreachable { .. }),
            "{p:?}"
        );

        let nowhere = World::new(&[spec("new", Some("old"), "lab", "")]);
        let p = nowhere.plan_read(false);
        assert!(
            matches!(p.actions.as_slice(), [Action::Create { .. }]),
            "{p:?}"
        );
    }

    /// After a lost database (no record), the VM whose verifying marker names the old spec is
    /// re-labelled, running or stopped past the orphan grace period: not deleted as an orphan,
    /// no VM created. A marker that does not verify is no evidence.
    #[test]
    fn a_rename_after_a_lost_database_is_found_by_the_verifying_marker() {
        for power in [Power::Running, Power::Stopped] {
            let mut w = World::new(&[spec("new", Some("old"), "lab", "")]);
            w.vm("lab", 100, "old", power, true);
            let p = w.plan();
            assert_eq!(p.actions, vec![relabel(100)], "{power:?}: {p:?}");
            assert!(p.orphans.is_empty(), "{p:?}");
            assert_eq!(p.renamed, [("old".into(), "new".into())].into());
        }
        let mut w = World::new(&[spec("new", Some("old"), "lab", "")]);
        w.vm("lab", 100, "old", Power::Running, false);
        let p = w.plan();
        assert!(
            !p.actions
                .iter()
                .any(|a| matches!(a, Action::Relabel { .. })),
            "{p:?}"
        );
    }

    /// A rename to another site: the old VM stays (no delete, no re-label), listed; the new
    /// spec waits, or with `allowRecreateOnSiteChange` is created on its site. From the
    /// record, and from the verifying marker after a lost database.
    #[test]
    fn a_rename_across_sites_keeps_the_old_vm_and_follows_the_site_change_rule() {
        for recorded in [true, false] {
            for allow in [false, true] {
                let extra = if allow {
                    "    allowRecreateOnSiteChange: true\n"
                } else {
                    ""
                };
                let mut w = World::new(&[spec("new", Some("old"), "eu", extra)]);
                w.vm("lab", 100, "old", Power::Stopped, true);
                if recorded {
                    w.record("old", "lab", 100);
                }
                let p = w.plan();
                let case = format!("recorded {recorded}, allow {allow}: {p:?}");
                let creates = vec![Action::Create {
                    spec: "new".into(),
                    site: "eu".into(),
                    node: "pve1".into(),
                }];
                if allow {
                    assert_eq!(p.actions, creates, "{case}");
                } else {
                    assert!(p.actions.is_empty(), "{case}");
                    assert_eq!(
                        p.verdicts["new"],
                        Verdict::SiteMoved {
                            from: "lab".into(),
                            vmid: 100
                        },
                        "{case}"
                    );
                }
                let listed: Vec<(u32, &OrphanDisposition)> =
                    p.orphans.iter().map(|o| (o.vmid, &o.disposition)).collect();
                let moved = OrphanDisposition::SiteMoved {
                    spec: "new".into(),
                    to: "eu".into(),
                };
                assert_eq!(listed, vec![(100, &moved)], "{case}");
            }
        }
    }

    /// The new spec has a VM of its own and the old spec's VM is still there: a duplicate
    /// naming both, the old VM kept (stopped, past the grace period) and listed.
    #[test]
    fn a_renamed_spec_with_its_own_vm_is_a_duplicate_and_nothing_is_deleted() {
        for recorded in [true, false] {
            let mut w = World::new(&[spec("new", Some("old"), "lab", "")]);
            w.vm("lab", 100, "old", Power::Stopped, true);
            w.vm("lab", 101, "new", Power::Running, true);
            w.record("new", "lab", 101);
            if recorded {
                w.record("old", "lab", 100);
            }
            let p = w.plan();
            let on_old = |a: &Action| match a {
                Action::Remove { vmid, .. }
                | Action::DeleteOrphan { vmid, .. }
                | Action::Relabel { vmid, .. }
                | Action::Converge { vmid, .. } => *vmid == 100,
                _ => false,
            };
            assert!(!p.actions.iter().any(on_old), "recorded {recorded}: {p:?}");
            let d = &p.duplicates["new"];
            assert_eq!(
                (d.kept, d.extras.as_slice(), d.renamed_from.as_deref()),
                (101, [100].as_slice(), Some("old")),
                "{p:?}"
            );
            let listed: Vec<(u32, &OrphanDisposition, Option<&str>)> = (p.orphans.iter())
                .map(|o| (o.vmid, &o.disposition, o.duplicate_of.as_deref()))
                .collect();
            assert_eq!(
                listed,
                vec![(100, &OrphanDisposition::Reported, Some("new"))],
                "{p:?}"
            );
        }
    }

    /// A spec renamed from a removed spec whose VM is not found is created only once every
    /// place it may be in was read.
    #[test]
    fn a_renamed_spec_is_not_created_while_a_site_cannot_be_read() {
        let mut w = World::new(&[spec("new", Some("old"), "lab", "")]);
        w.sites.insert(
            "eu".into(),
            SiteView::unreachable("eu", "connection refused".into()),
        );
        let p = w.plan();
        assert!(p.actions.is_empty(), "{p:?}");
        assert!(
            matches!(&p.verdicts["new"], Verdict::SiteUnreachable { error } if error.to_string().contains("old")),
            "{p:?}"
        );
        w.sites.get_mut("eu").unwrap().error = None;
        assert_eq!(w.plan().actions.len(), 1, "then created");
    }

    /// `renamed-from` naming a spec that is still desired: the planner holds both as invalid,
    /// plans nothing for their VM, and removes nothing.
    #[test]
    fn renamed_from_a_desired_spec_holds_both() {
        let mut w = World::new(&[
            spec("app", None, "lab", "    cpu: 4\n"),
            spec("app-legacy", Some("app"), "lab", ""),
        ]);
        w.vm("lab", 100, "app", Power::Running, true);
        w.record("app", "lab", 100);
        let p = w.plan();
        assert!(p.actions.is_empty(), "{p:?}");
        assert_eq!(p.verdicts["app"], Verdict::Invalid, "{p:?}");
        assert_eq!(p.verdicts["app-legacy"], Verdict::Invalid, "{p:?}");
        assert!(p.orphans.is_empty(), "{p:?}");
    }

    /// The marker already names the new spec with the old record's uid (a re-label whose
    /// answer was lost): planned again, and execute only moves the record.
    #[test]
    fn a_marker_already_naming_the_new_spec_with_the_old_uid_is_relabelled() {
        let mut w = World::new(&[spec("new", Some("old"), "lab", "")]);
        w.vm("lab", 100, "new", Power::Running, true);
        w.record("old", "lab", 100);
        let vm = w.sites.get_mut("lab").unwrap().vms.get_mut(&100).unwrap();
        vm.marker = Some(Arc::new(Marker {
            uid: "uid-old".into(),
            ..(**vm.marker.as_ref().unwrap()).clone()
        }));
        let p = w.plan();
        assert_eq!(p.actions, vec![relabel(100)], "{p:?}");
    }

    /// The annotation and the old spec's record name VM 100, whose verifying marker carries
    /// another uid than the record's: the evidence disagrees, so the rename is held. Neither a
    /// re-label, nor the old spec's VM deleted, nor a VM created for the new spec.
    #[test]
    fn a_record_and_a_marker_that_disagree_hold_the_rename() {
        let mut w = World::new(&[spec("new", Some("old"), "lab", "")]);
        w.vm("lab", 100, "old", Power::Stopped, true);
        w.record("old", "lab", 100);
        w.records.get_mut("old").unwrap().uid = "uid-recorded".into();
        let p = w.plan();
        assert!(p.actions.is_empty(), "{p:?}");
        assert!(p.orphans.is_empty(), "{p:?}");
        match p.verdicts.get("new") {
            Some(Verdict::RenameUnproven { from, vmid, why }) => {
                assert_eq!((from.as_str(), *vmid), ("old", 100));
                assert!(why.to_string().contains("uid-recorded"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// A container spec named like a VM's: the container spec (`kind: ProxmoxLXC`).
    fn ct_spec(name: &str) -> Spec {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: {name}\nspec:\n  \
             forProvider:\n    site: lab\n    node: pve1\n    template: \"9100\"\n"
        );
        let (mut specs, diags) = parse_file("t.yaml", yaml.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        specs.remove(0)
    }

    /// A spec whose guest is of the other kind, found by its record or by its marker, is held:
    /// no converge of the wrong kind, no create beside it, no adoption; a guest of the spec's
    /// own kind is its own.
    #[test]
    fn a_guest_of_the_other_kind_is_held_never_converged_or_replaced() {
        for by_record in [true, false] {
            let mut w = World::new(&[ct_spec("dns")]);
            w.vm("lab", 100, "dns", Power::Running, true);
            if by_record {
                w.record("dns", "lab", 100);
            }
            let p = w.plan();
            assert_eq!(
                p.verdicts["dns"],
                Verdict::KindChanged {
                    vmid: 100,
                    found: crate::guest::GuestKind::Qemu
                },
                "by record: {by_record}: {p:?}"
            );
            assert!(p.actions.is_empty(), "{p:?}");
            // The same guest as a container: the spec's own.
            w.sites
                .get_mut("lab")
                .unwrap()
                .vms
                .get_mut(&100)
                .unwrap()
                .kind = crate::guest::GuestKind::Lxc;
            let p = w.plan();
            assert!(
                !matches!(p.verdicts["dns"], Verdict::KindChanged { .. }),
                "{p:?}"
            );
            assert!(
                !p.actions.iter().any(|a| matches!(a, Action::Create { .. })),
                "{p:?}"
            );
        }
    }

    /// A create in flight sent for a VM, and the spec now a container: held, neither resumed
    /// as the container's nor answered with a create.
    #[test]
    fn a_create_in_flight_of_the_other_kind_is_held() {
        let mut w = World::new(&[ct_spec("dns")]);
        w.records.insert(
            "dns".into(),
            SpecRecord {
                uid: "uid-dns".into(),
                site: "lab".into(),
                vm: VmState::Creating {
                    vmid: 100,
                    node: "pve1".into(),
                    task: None,
                    started_ms: NOW - 1000,
                    clone_of: None,
                },
                ..Default::default()
            },
        );
        let p = w.plan();
        assert_eq!(
            p.verdicts["dns"],
            Verdict::KindChanged {
                vmid: 100,
                found: crate::guest::GuestKind::Qemu
            },
            "{p:?}"
        );
        assert!(p.actions.is_empty(), "{p:?}");
        // Made by a container's intent: resumed.
        w.records.get_mut("dns").unwrap().kind = crate::guest::GuestKind::Lxc;
        let p = w.plan();
        assert!(
            p.actions
                .iter()
                .any(|a| matches!(a, Action::ResumeCreate { vmid: 100, .. })),
            "{p:?}"
        );
    }

    /// Renamed and turned into a container in one change: the old VM is held, not re-labelled
    /// (found in review: the re-label read the container's path, found nothing, every cycle),
    /// and nothing is deleted or created.
    #[test]
    fn a_rename_to_the_other_kind_is_held() {
        let yaml = "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: new\n  \
                    annotations:\n    proxsync.io/renamed-from: old\nspec:\n  forProvider:\n    \
                    site: lab\n    node: pve1\n    template: \"9100\"\n";
        let (mut specs, diags) = parse_file("t.yaml", yaml.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        let mut w = World::new(&[specs.remove(0)]);
        w.vm("lab", 100, "old", Power::Running, true);
        let p = w.plan();
        assert_eq!(
            p.verdicts["new"],
            Verdict::KindChanged {
                vmid: 100,
                found: crate::guest::GuestKind::Qemu
            },
            "{p:?}"
        );
        assert!(p.actions.is_empty(), "{p:?}");
    }
}
