//! The planner's side of the gate: the evidence each kind of action needs in the plan's inputs.
//! Above the gate (it reads the plan's actions), beside the planner it checks.
//!
//! [`planned`] states, for every [`Action`] kind (an exhaustive `match`: a new kind does not
//! compile without its rule), what the cycle's inputs must show before the planner may emit it.
//! The rules are the planner's promises written down once, apart from the code that keeps them,
//! and checked against it by a property test over random worlds (`crates/proxsync-core/tests/plan_props.rs`): forged
//! and copied markers, lost records, sites reaching another cluster, rewinds, renames, specs
//! handed over. `execute` asks the gate again, from a fresh read, before anything is sent
//! ([`crate::gate::permit`]).
//!
//! Every action needs its site observed and shown to reach its recorded cluster (a view the
//! observation left unreachable gets none); a removal (a delete, a release, a hand-over, an
//! orphan's delete) also needs the spec set read completely, a desired set that is not empty,
//! and a rewind whose previous commit can be read. A commit that was refused is never planned at
//! all (`gate::commit`: the last verified commit is read instead), so no removal comes from one.

use std::fmt;

use super::{Action, PlanInput};
use crate::config::OrphanPolicy;
use crate::model::{ObservedVm, Power, SiteView};
use crate::model::{SpecRecord, VmState};
use crate::spec::Spec;

use crate::gate::rename::{Evidence, Recorded, may_relabel};

/// What an action lacks: the evidence its kind needs that the inputs do not show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing(pub String);

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Checked = Result<(), Missing>;

fn missing(why: impl Into<String>) -> Checked {
    Err(Missing(why.into()))
}

/// Whether `input` shows the evidence `action`'s kind needs (see the module's doc).
pub fn planned(action: &Action, input: &PlanInput<'_>) -> Checked {
    match action {
        Action::Create { spec, site, node } => create(input, spec, site, node),
        Action::ResumeCreate {
            spec,
            site,
            node,
            vmid,
            ..
        } => resume_create(input, spec, site, node, *vmid),
        Action::Adopt { spec, site, vmid } => adopt(input, spec, site, *vmid),
        Action::AdoptByConsent {
            spec,
            site,
            node,
            vmid,
        } => adopt_by_consent(input, spec, site, node, *vmid),
        Action::Converge {
            spec,
            site,
            node,
            vmid,
            ..
        } => {
            let vm = recorded_vm(input, spec, site, *vmid)?;
            on_node(input, site, vm, node)
        }
        Action::Migrate {
            spec,
            site,
            node,
            vmid,
            target,
        } => {
            let (s, _) = desired_on(input, spec, site)?;
            let vm = recorded_vm(input, spec, site, *vmid)?;
            on_node(input, site, vm, node)?;
            if *target != s.node || *target == vm.node {
                return missing(format!(
                    "a migration of VM {vmid} to node {target}, which is not another node its \
                     spec {spec} names"
                ));
            }
            healthy(input, site, target)
        }
        Action::Remove {
            spec,
            site,
            node,
            vmid,
            release,
        } => remove(input, spec, site, node, *vmid, *release),
        Action::Forget { spec } => forget(input, spec),
        Action::Relabel {
            spec,
            from,
            site,
            node,
            vmid,
        } => relabel(input, spec, from, site, node, *vmid),
        Action::HandOver {
            spec,
            site,
            node,
            vmid,
        } => hand_over(input, spec, site, node, *vmid),
        Action::DeleteOrphan { site, node, vmid } => delete_orphan(input, site, node, *vmid),
    }
}

// ---- what every kind needs ----

/// The site was observed and reaches its recorded cluster.
fn view<'a>(input: &'a PlanInput<'_>, site: &str) -> Result<&'a SiteView, Missing> {
    let Some(view) = input.sites.get(site) else {
        return Err(Missing(format!("site {site} was not observed")));
    };
    if view.identity_changed {
        return Err(Missing(format!(
            "site {site} reaches another cluster than the recorded one"
        )));
    }
    if let Some(e) = &view.error {
        return Err(Missing(format!("site {site} could not be read: {e}")));
    }
    Ok(view)
}

fn healthy(input: &PlanInput<'_>, site: &str, node: &str) -> Checked {
    if view(input, site)?.node_healthy(node) {
        return Ok(());
    }
    missing(format!("node {node} of site {site} is not healthy"))
}

fn desired<'a>(input: &'a PlanInput<'_>, name: &str) -> Option<&'a Spec> {
    input.desired.iter().find(|s| s.name == name)
}

/// The spec is desired and names `site`.
fn desired_on<'a>(
    input: &'a PlanInput<'_>,
    name: &str,
    site: &str,
) -> Result<(&'a Spec, &'a SiteView), Missing> {
    let Some(spec) = desired(input, name) else {
        return Err(Missing(format!("spec {name} is not desired")));
    };
    if spec.site != site {
        return Err(Missing(format!(
            "spec {name} names site {}, not {site}",
            spec.site
        )));
    }
    Ok((spec, view(input, site)?))
}

/// VM `vmid` as listed on `site`: judged (its state known), not a template.
fn listed(view: &SiteView, vmid: u32) -> Result<&ObservedVm, Missing> {
    let Some(vm) = view.vms.get(&vmid) else {
        return Err(Missing(format!(
            "VM {vmid} is not listed on site {}",
            view.name
        )));
    };
    if vm.template {
        return Err(Missing(format!("VM {vmid} is a template")));
    }
    if vm.is_unknown() {
        return Err(Missing(format!("VM {vmid}'s state is unknown")));
    }
    Ok(vm)
}

/// The action runs on the node the VM is listed on, and that node is healthy.
fn on_node(input: &PlanInput<'_>, site: &str, vm: &ObservedVm, node: &str) -> Checked {
    if vm.node != node {
        return missing(format!("VM {} is on node {}, not {node}", vm.vmid, vm.node));
    }
    healthy(input, site, node)
}

/// The VM's marker names this install and spec `spec`, and it verifies (or a record vouches).
fn verified_for(input: &PlanInput<'_>, vm: &ObservedVm, spec: &str) -> bool {
    vm.marker_verified
        && vm
            .marker
            .as_ref()
            .is_some_and(|m| m.install == input.install_id && m.spec == spec)
}

/// Whether a record of this cycle names VM `vmid` on `site`.
fn named_by_a_record(input: &PlanInput<'_>, site: &str, vmid: u32) -> bool {
    input
        .records
        .values()
        .any(|r| r.site == site && r.vmid() == Some(vmid))
}

/// The spec is desired on `site` and its record names VM `vmid` there (a VM it made or
/// adopted), listed. The record's guest stays the spec's until it is shown gone: whether it
/// still is (its marker, else its own identity) `execute` reads and judges before any change
/// (`vm::read_own_config`), and it changes nothing on a guest it cannot show is the spec's.
fn recorded_vm<'a>(
    input: &'a PlanInput<'_>,
    spec: &str,
    site: &str,
    vmid: u32,
) -> Result<&'a ObservedVm, Missing> {
    let (_, view) = desired_on(input, spec, site)?;
    let rec = input.records.get(spec);
    let names = rec
        .is_some_and(|r| r.vm.made_vmid() == Some(vmid) && (r.site == site || r.site.is_empty()));
    if !names {
        return Err(Missing(format!(
            "no record of spec {spec} names VM {vmid} on site {site}"
        )));
    }
    listed(view, vmid)
}

/// A delete, release or hand-over may be planned at all: the spec set was read completely, the
/// desired set is not empty, and a rewind's previous commit can be read.
fn removals_allowed(input: &PlanInput<'_>) -> Checked {
    if !input.complete {
        return missing("the spec set was not read completely: nothing is removed");
    }
    if input.desired.is_empty() && input.invalid.is_empty() {
        return missing("the desired set is empty: nothing is removed");
    }
    if input.rewind.is_some_and(|r| r.from_specs.is_none()) {
        return missing(
            "the commit rewinds the branch from one that cannot be read: its deletes cannot be \
             judged as one batch",
        );
    }
    Ok(())
}

/// The VM a removal acts on: its spec's record names it on `site` (listed on `node`, or a create
/// in flight there), or, without one, `owned` says the listing shows it as the spec's.
fn removal_target(
    input: &PlanInput<'_>,
    rec: Option<&SpecRecord>,
    site: &str,
    node: &str,
    vmid: u32,
    owned: impl Fn(&ObservedVm) -> bool,
) -> Checked {
    let view = view(input, site)?;
    let recorded = rec.filter(|r| r.site == site && r.vmid() == Some(vmid));
    match (view.vms.get(&vmid), recorded) {
        (Some(_), Some(_)) => on_node(input, site, listed(view, vmid)?, node),
        (Some(vm), None) if owned(vm) => on_node(input, site, listed(view, vmid)?, node),
        (None, Some(r)) if matches!(&r.vm, VmState::Creating { node: n, .. } if n == node) => {
            healthy(input, site, node)
        }
        _ => missing(format!(
            "neither a record nor a verified marker shows VM {vmid} on site {site} to be the \
             spec's"
        )),
    }
}

// ---- each kind ----

/// A create: the spec is desired on its site and node, nothing of it is in flight, and no VM
/// there is or may be the spec's: none its record names, none carrying its verified marker
/// (adopted instead), none claiming it with a marker that does not verify, none whose marker
/// could not be read and that may be it, none of another install (sharded), and none carrying
/// the verified marker of the spec it is renamed from (re-labelled instead).
fn create(input: &PlanInput<'_>, spec: &str, site: &str, node: &str) -> Checked {
    let (s, view) = desired_on(input, spec, site)?;
    if s.node != node {
        return missing(format!("spec {spec} names node {}, not {node}", s.node));
    }
    healthy(input, site, node)?;
    if let Some(r) = input.records.get(spec) {
        if matches!(r.vm, VmState::Creating { .. }) {
            return missing(format!("a create of spec {spec} is in flight"));
        }
        if !r.site.is_empty() && r.site != site && r.vmid().is_some() {
            return missing(format!(
                "spec {spec}'s record names a VM on site {}: a site move",
                r.site
            ));
        }
        if let Some(vm) = r.vm.made_vmid().and_then(|id| view.vms.get(&id)) {
            let tag = crate::ownership::ownership_tag(input.install_id);
            let may_be = vm.is_unknown()
                || vm.has_tag(&tag)
                || !vm.marker_read
                || vm
                    .marker
                    .as_ref()
                    .is_some_and(|m| m.install == input.install_id && m.spec == spec);
            if may_be {
                return missing(format!(
                    "spec {spec}'s record names VM {}, which is there",
                    vm.vmid
                ));
            }
        }
    }
    let known = |vmid: u32| named_by_a_record(input, site, vmid);
    for vm in view.vms.values().filter(|vm| !vm.template) {
        let vmid = vm.vmid;
        if verified_for(input, vm, spec) {
            return missing(format!("VM {vmid} carries spec {spec}'s verified marker"));
        }
        if vm.unverified_claim(input.install_id) == Some(spec) {
            return missing(format!(
                "VM {vmid} claims spec {spec} with a marker that does not verify"
            ));
        }
        if !vm.marker_read && !known(vmid) && vm.name.as_deref() == Some(s.guest_name()) {
            return missing(format!(
                "VM {vmid}, named like spec {spec}'s VM, has a marker not read yet"
            ));
        }
        let theirs = vm
            .marker
            .as_ref()
            .is_some_and(|m| m.install != input.install_id && m.spec == spec);
        if input.sharded && theirs {
            return missing(format!(
                "VM {vmid} carries spec {spec}'s marker for another install"
            ));
        }
        if let Some(from) = &s.renamed_from
            && verified_for(input, vm, from)
            && !known(vmid)
        {
            return missing(format!(
                "spec {spec} is renamed from {from}, whose VM {vmid} is on its site"
            ));
        }
    }
    Ok(())
}

/// Resuming a create: the spec's record holds the create in flight, at this VMID and node.
fn resume_create(input: &PlanInput<'_>, spec: &str, site: &str, node: &str, vmid: u32) -> Checked {
    desired_on(input, spec, site)?;
    let in_flight = input.records.get(spec).is_some_and(
        |r| matches!(&r.vm, VmState::Creating { vmid: v, node: n, .. } if *v == vmid && n == node),
    );
    if !in_flight {
        return missing(format!(
            "no record of spec {spec} holds a create of VM {vmid} on node {node}"
        ));
    }
    healthy(input, site, node)
}

/// An adoption: the VM carries the spec's marker and it verifies: this install's, or (a sharded
/// install) another install's that no install's tag holds any more.
fn adopt(input: &PlanInput<'_>, spec: &str, site: &str, vmid: u32) -> Checked {
    let (_, view) = desired_on(input, spec, site)?;
    if input
        .records
        .get(spec)
        .is_some_and(|r| matches!(r.vm, VmState::Creating { .. }))
    {
        return missing(format!("a create of spec {spec} is in flight"));
    }
    let vm = listed(view, vmid)?;
    healthy(input, site, &vm.node)?;
    if verified_for(input, vm, spec) {
        return Ok(());
    }
    let handed = input.sharded
        && vm.marker_verified
        && vm.marker.as_ref().is_some_and(|m| m.spec == spec)
        && !vm.tags.iter().any(|t| t.starts_with("proxsync."));
    if handed {
        return Ok(());
    }
    missing(format!(
        "VM {vmid} carries no verified marker of spec {spec} (or another install still holds it)"
    ))
}

/// An adoption by consent: the spec names the VMID in its consent, has no record of a VM, and
/// the VM is listed on that node with the spec's VM name, read, without a marker or any
/// install's tag.
fn adopt_by_consent(
    input: &PlanInput<'_>,
    spec: &str,
    site: &str,
    node: &str,
    vmid: u32,
) -> Checked {
    let (s, view) = desired_on(input, spec, site)?;
    if s.adopt.as_ref().map(|c| c.vmid) != Some(vmid) {
        return missing(format!(
            "spec {spec} does not consent to take over VM {vmid} (proxsync.io/adopt)"
        ));
    }
    if input
        .records
        .get(spec)
        .is_some_and(|r| r.vm.vmid().is_some())
    {
        return missing(format!("spec {spec} already has a VM in its record"));
    }
    let vm = listed(view, vmid)?;
    on_node(input, site, vm, node)?;
    let bare = vm.marker_read
        && vm.kind == s.kind()
        && vm.marker.is_none()
        && !vm.template
        && vm.name.as_deref() == Some(s.guest_name())
        && !vm.tags.iter().any(|t| t.starts_with("proxsync."));
    if bare {
        return Ok(());
    }
    missing(format!(
        "{} {vmid} is not a bare {} named {} (read, without a marker or an install's tag)",
        s.kind().noun(),
        s.kind().noun(),
        s.guest_name()
    ))
}

/// A removal of a gone spec's VM: the spec is neither desired, invalid nor outside the selector,
/// and its record names the VM on that site (`release` as the record says).
fn remove(
    input: &PlanInput<'_>,
    spec: &str,
    site: &str,
    node: &str,
    vmid: u32,
    release: bool,
) -> Checked {
    removals_allowed(input)?;
    if desired(input, spec).is_some() || input.invalid.contains(spec) {
        return missing(format!("spec {spec} is still in the set"));
    }
    if input.elsewhere.contains(spec) {
        return missing(format!(
            "spec {spec} is another install's: handed over, never removed"
        ));
    }
    let rec = input.records.get(spec);
    if rec.is_none_or(|r| r.orphan_on_delete != release) {
        return missing(format!(
            "no record of spec {spec} asks for this (deletionPolicy as recorded)"
        ));
    }
    removal_target(input, rec, site, node, vmid, |_| false)
}

/// A record forgotten: a gone spec whose VM is gone from its reachable site, or a spec that moved
/// to another site whose old VM is gone (or which allows a new VM beside it). Never a create in
/// flight.
fn forget(input: &PlanInput<'_>, spec: &str) -> Checked {
    let Some(rec) = input.records.get(spec) else {
        return missing(format!("spec {spec} has no record"));
    };
    if matches!(rec.vm, VmState::Creating { .. }) {
        return missing(format!("a create of spec {spec} is in flight"));
    }
    let gone_from_site = || {
        view(input, &rec.site).is_ok_and(|v| rec.vmid().is_none_or(|id| !v.vms.contains_key(&id)))
    };
    match desired(input, spec) {
        Some(s) if s.site != rec.site && !rec.site.is_empty() => {
            if s.allow_recreate_on_site_change || gone_from_site() {
                Ok(())
            } else {
                missing(format!(
                    "spec {spec}'s VM is still on site {}, its old site",
                    rec.site
                ))
            }
        }
        Some(_) => missing(format!("spec {spec} is desired on its record's site")),
        None if input.invalid.contains(spec) => missing(format!("spec {spec} is invalid")),
        None if !input.complete => missing("the spec set was not read completely"),
        None if gone_from_site() => Ok(()),
        None => missing(format!(
            "spec {spec}'s VM is still listed on site {}",
            rec.site
        )),
    }
}

/// A re-label: the spec is desired on the VM's site, renamed (by its annotation) from a spec
/// that is gone, has no VM of its own, and `gate::rename` allows re-signing the VM's marker on
/// what the observation saw; a VM the old spec's record names whose marker was not read is
/// judged by `execute` from a fresh read before the write.
fn relabel(
    input: &PlanInput<'_>,
    spec: &str,
    from: &str,
    site: &str,
    node: &str,
    vmid: u32,
) -> Checked {
    let (s, view) = desired_on(input, spec, site)?;
    if s.renamed_from.as_deref() != Some(from) {
        return missing(format!(
            "spec {spec} is not annotated as renamed from {from}"
        ));
    }
    if !input.complete
        || desired(input, from).is_some()
        || input.invalid.contains(from)
        || input.elsewhere.contains(from)
    {
        return missing(format!("spec {from} is not shown to be gone"));
    }
    let vm = listed(view, vmid)?;
    on_node(input, site, vm, node)?;
    let own = |other: &ObservedVm| {
        other.vmid != vmid && !other.template && verified_for(input, other, spec)
    };
    let recorded_own = input.records.get(spec).is_some_and(|r| {
        r.site == site
            && r.vmid()
                .is_some_and(|id| id != vmid && view.vms.contains_key(&id))
    });
    if recorded_own || view.vms.values().any(own) {
        return missing(format!("spec {spec} has a VM of its own"));
    }
    let record = input.records.get(from).and_then(|r| match r.vm {
        VmState::Exists { vmid: v, .. } if v == vmid && r.site == site => Some(Recorded {
            site: &r.site,
            vmid: v,
            uid: &r.uid,
        }),
        _ => None,
    });
    if record.is_some() && vm.marker.is_none() && !vm.marker_read {
        return Ok(());
    }
    let ev = Evidence {
        kind: vm.kind,
        vmid,
        site,
        marker: vm.marker.as_deref(),
        mac_verifies: vm.marker_verified,
        record,
    };
    may_relabel(input.install_id, from, spec, &s.site, &ev)
        .map(|_| ())
        .map_err(|why| Missing(why.to_string()))
}

/// A hand-over: the spec is outside this install's selector now, and its record names the VM on
/// that site, or the VM is this install's (its tag and a verified marker naming the spec).
fn hand_over(input: &PlanInput<'_>, spec: &str, site: &str, node: &str, vmid: u32) -> Checked {
    removals_allowed(input)?;
    if !input.elsewhere.contains(spec) {
        return missing(format!("spec {spec} is not another install's"));
    }
    let rec = input.records.get(spec);
    removal_target(input, rec, site, node, vmid, |vm| {
        vm.owned_by(input.install_id) && verified_for(input, vm, spec)
    })
}

/// An orphan's delete: under `orphans = "delete-stopped"`, a VM of this install (its tag and a
/// verified marker), stopped, unlocked, on a healthy node, that no record names, whose spec is
/// gone (or which is a second VM of a desired spec beside the one the spec keeps), that is no
/// renamed spec's original, and whose grace period has passed.
fn delete_orphan(input: &PlanInput<'_>, site: &str, node: &str, vmid: u32) -> Checked {
    removals_allowed(input)?;
    if input.reconcile.orphans != OrphanPolicy::DeleteStopped {
        return missing("orphans are only reported (orphans = \"report\")");
    }
    let view = view(input, site)?;
    let vm = listed(view, vmid)?;
    on_node(input, site, vm, node)?;
    if !vm.owned_by(input.install_id) {
        return missing(format!(
            "VM {vmid} lacks this install's tag or a verified marker"
        ));
    }
    if vm.power != Power::Stopped || vm.lock.is_some() {
        return missing(format!("VM {vmid} is not stopped and unlocked"));
    }
    if named_by_a_record(input, site, vmid) {
        return missing(format!("a record names VM {vmid}"));
    }
    let spec = vm.marker.as_ref().map(|m| m.spec.as_str()).unwrap_or("");
    if input.elsewhere.contains(spec) || input.invalid.contains(spec) {
        return missing(format!("VM {vmid} is spec {spec}'s, which is in the set"));
    }
    if desired(input, spec).is_some() {
        let kept_elsewhere = |other: &ObservedVm| {
            other.vmid != vmid && !other.template && verified_for(input, other, spec)
        };
        let recorded_other = input
            .records
            .get(spec)
            .is_some_and(|r| r.site == site && r.vmid().is_some_and(|id| id != vmid));
        if !(recorded_other || view.vms.values().any(kept_elsewhere)) {
            return missing(format!(
                "VM {vmid} is desired spec {spec}'s only VM, not a second one"
            ));
        }
    }
    if let Some(renamed) = input
        .desired
        .iter()
        .find(|s| s.renamed_from.as_deref() == Some(spec))
    {
        return missing(format!(
            "VM {vmid} is spec {spec}'s, which spec {} is renamed from",
            renamed.name
        ));
    }
    let first_seen = input
        .orphans_seen
        .get(&(site.to_string(), vmid))
        .copied()
        .unwrap_or(input.now_ms);
    let grace = input.reconcile.orphan_grace.as_millis() as u64;
    if input.now_ms < first_seen.saturating_add(grace) {
        return missing(format!("VM {vmid}'s grace period has not passed"));
    }
    Ok(())
}
