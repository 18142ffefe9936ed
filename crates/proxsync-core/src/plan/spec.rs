//! The decision for one valid spec: resume, adopt, create, converge, or why not.

use serde::Serialize;

use super::index::SiteIndex;
use super::{Action, Duplicate, PlanInput, Verdict, drift, inputs_hash};
use crate::guest::GuestKind;
use crate::model::{ObservedVm, SiteView};
use crate::model::{SpecRecord, VmState};
use crate::spec::Spec;

/// Why a spec's site (or the guest it waits for) cannot be read, for `Verdict::SiteUnreachable`
/// (its words in `words`; serialised as them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// The observation's error, as it said it.
    Observed(String),
    /// The site is not in the config.
    NotInConfig {
        /// The site.
        site: String,
    },
    /// The spec set could not be read completely, so whether spec `from`, which the spec is
    /// renamed from, is gone cannot be told: its guest `vmid` is kept.
    RenameUndecided {
        /// The spec it is renamed from.
        from: String,
        /// That spec's guest.
        vmid: u32,
    },
    /// Site `site` cannot be read, and spec `from`'s guest, which the spec is renamed from, may
    /// be there.
    RenamedMayBeThere {
        /// The site.
        site: String,
        /// The spec it is renamed from.
        from: String,
    },
    /// Spec `from`, which the spec is renamed from, has a create or a delete of guest `vmid`
    /// in flight: its removal finishes it before the rename is judged.
    RenameInFlight {
        /// The spec it is renamed from.
        from: String,
        /// The guest of that spec's create or delete.
        vmid: u32,
    },
    /// The site of a rename's guest cannot be read.
    RenameSite {
        /// The site.
        site: String,
    },
}

impl Serialize for Unreadable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What differs from a spec's consent to take over guest `vmid` (`proxsync.io/adopt`), for
/// `Verdict::AdoptRefused` (its words in `words`; serialised as them). `kind`: the spec's kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdoptRefusal {
    /// No guest of the spec's kind is at `vmid` on `site`.
    Gone {
        /// The spec's kind.
        kind: GuestKind,
        /// The VMID consented to.
        vmid: u32,
        /// The spec's site.
        site: String,
    },
    /// The guest is a template.
    Template {
        /// The spec's kind.
        kind: GuestKind,
        /// The VMID consented to.
        vmid: u32,
    },
    /// The guest is named `found`, not `want` as when the spec was written.
    Renamed {
        /// The spec's kind.
        kind: GuestKind,
        /// The VMID consented to.
        vmid: u32,
        /// The guest's name, if any.
        found: Option<String>,
        /// The spec's guest name.
        want: String,
    },
    /// The guest carries an install's ownership tag.
    Managed {
        /// The spec's kind.
        kind: GuestKind,
        /// The VMID consented to.
        vmid: u32,
        /// The tag.
        tag: String,
    },
    /// The guest carries a proxsync marker.
    Marked {
        /// The spec's kind.
        kind: GuestKind,
        /// The VMID consented to.
        vmid: u32,
        /// The spec the marker names.
        spec: String,
        /// The install the marker names.
        install: String,
    },
}

impl Serialize for AdoptRefusal {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The VMs beyond the first that carry the marker of `spec`, if any. The kept one is the VM
/// the plan acts on (record, recorded uid, lowest VMID); a create in flight keeps its VMID.
pub(super) fn duplicate(
    spec: &Spec,
    rec: Option<&SpecRecord>,
    index: Option<&SiteIndex<'_>>,
    verdict: &Verdict,
) -> Option<Duplicate> {
    let claimants = claimants(spec, index?);
    if claimants.is_empty() {
        return None;
    }
    let mut ids: Vec<u32> = claimants.iter().map(|vm| vm.vmid).collect();
    ids.sort_unstable();
    let recorded = rec.and_then(SpecRecord::vmid);
    let kept = match (verdict, recorded) {
        (Verdict::UpToDate { vmid }, _) => *vmid,
        (_, Some(id)) => id,
        _ => {
            // Adopting: the same choice plan_spec made (recorded uid first, then lowest).
            let uid = rec.map(|r| r.uid.as_str()).unwrap_or("");
            claimants
                .iter()
                .filter(|vm| !uid.is_empty() && vm.marker.as_ref().is_some_and(|m| m.uid == uid))
                .map(|vm| vm.vmid)
                .min()
                .unwrap_or(ids[0])
        }
    };
    let extras: Vec<u32> = ids.into_iter().filter(|id| *id != kept).collect();
    (!extras.is_empty()).then(|| Duplicate {
        site: spec.site.to_string(),
        kept,
        extras,
        renamed_from: None,
    })
}

/// The decision for one valid spec that is neither hands-off (`hands_off`, asked first) nor a
/// rename. Checked in this order, each step returning when it decides: the site can be read;
/// the spec moved sites; a create in flight is resumed; the VM is found (by record, else by
/// marker: adopted), else created; a found VM is converged when it drifted.
pub(super) fn plan_spec(
    input: &PlanInput<'_>,
    spec: &Spec,
    rec: Option<&SpecRecord>,
    index: Option<&SiteIndex<'_>>,
    actions: &mut Vec<Action>,
) -> Verdict {
    let Some(view) = input.sites.get(spec.site.as_str()) else {
        return Verdict::SiteUnreachable {
            error: Unreadable::NotInConfig {
                site: spec.site.to_string(),
            },
        };
    };
    if view.error.is_some() {
        return not_readable(view);
    }
    if let Some(verdict) = site_move(input, spec, rec, actions) {
        return verdict;
    }
    if let Some(verdict) = resume_create(spec, rec, view, actions) {
        return verdict;
    }
    if let Some(verdict) = super::images::resume_recreate(spec, rec, view, actions) {
        return verdict;
    }
    let backoff = backoff(input, spec, rec);
    if let Some(vm) = by_record(rec, view) {
        if let Some(held) = other_kind(spec, vm) {
            return held;
        }
        return converge(input, spec, rec, view, vm, backoff, actions);
    }
    if let Some(vm) = by_marker(spec, rec, index) {
        if let Some(held) = other_kind(spec, vm) {
            return held;
        }
        return adopt(spec, view, vm, actions);
    }
    if input.sharded
        && let Some(verdict) = from_another_install(spec, view, index, actions)
    {
        return verdict;
    }
    if let Some(consent) = &spec.adopt {
        return adopt_by_consent(spec, consent, view, backoff, actions);
    }
    // The guest's spec's own guest, made a template by a person (the database lost since): it
    // is not adopted as a guest, and never replaced by a second one beside it.
    if let Some(vm) = index.and_then(|i| made_a_template(spec, i)) {
        return Verdict::AdoptRefused {
            vmid: vm.vmid,
            why: AdoptRefusal::Template {
                kind: vm.kind,
                vmid: vm.vmid,
            },
        };
    }
    create(spec, view, index, backoff, actions)
}

/// The spec consents to take over an existing VM (`proxsync.io/adopt`) and no VM of its own is
/// known: take that VM when the listing shows it still is the one consented to (its name, no
/// install's tag, no marker). Its uuid is checked by execute, from its config, right before
/// the write. Never a create: the consent names a VM, not an image.
fn adopt_by_consent(
    spec: &Spec,
    consent: &crate::spec::AdoptConsent,
    view: &SiteView,
    backoff: Option<u64>,
    actions: &mut Vec<Action>,
) -> Verdict {
    let vmid = consent.vmid;
    let kind = spec.kind();
    let refused = |why: AdoptRefusal| Verdict::AdoptRefused { vmid, why };
    let Some(vm) = view.vms.get(&vmid).filter(|vm| vm.kind == kind) else {
        return refused(AdoptRefusal::Gone {
            kind,
            vmid,
            site: spec.site.to_string(),
        });
    };
    if vm.is_unknown() || !vm.marker_read {
        return Verdict::Unknown { vmid };
    }
    if vm.template {
        return refused(AdoptRefusal::Template { kind, vmid });
    }
    if vm.name.as_deref() != Some(spec.guest_name()) {
        return refused(AdoptRefusal::Renamed {
            kind,
            vmid,
            found: vm.name.as_deref().map(str::to_string),
            want: spec.guest_name().to_string(),
        });
    }
    if let Some(tag) = vm.tags.iter().find(|t| t.starts_with("proxsync.")) {
        return refused(AdoptRefusal::Managed {
            kind,
            vmid,
            tag: tag.to_string(),
        });
    }
    if let Some(m) = &vm.marker {
        return refused(AdoptRefusal::Marked {
            kind,
            vmid,
            spec: m.spec.to_string(),
            install: m.install.to_string(),
        });
    }
    if let Some(until_ms) = backoff {
        return Verdict::BackingOff { until_ms };
    }
    if !view.node_healthy(&vm.node) {
        return unhealthy(view, &vm.node);
    }
    actions.push(Action::AdoptByConsent {
        spec: spec.name.to_string(),
        site: spec.site.to_string(),
        node: vm.node.to_string(),
        vmid,
    });
    Verdict::Acting
}

/// How a hands-off spec's guest compares with the spec, as the verdict `Observed` (which
/// `hands_off::verdict` makes the spec's), or why it cannot be judged (its site unreadable, its
/// state unknown). The guest: `old` (site, VMID), the VM of the spec this one is renamed from;
/// else the spec's own, found as [`observe`] finds it.
pub(super) fn look(
    input: &PlanInput<'_>,
    spec: &Spec,
    rec: Option<&SpecRecord>,
    index: Option<&SiteIndex<'_>>,
    old: Option<(&str, u32)>,
) -> Verdict {
    let site = old.map_or(spec.site.as_str(), |(site, _)| site);
    let Some(view) = input.sites.get(site) else {
        return Verdict::SiteUnreachable {
            error: Unreadable::NotInConfig { site: site.into() },
        };
    };
    if view.error.is_some() {
        return not_readable(view);
    }
    let Some((_, vmid)) = old else {
        return observe(spec, rec, index, view);
    };
    match view.vms.get(&vmid) {
        Some(vm) if vm.is_unknown() => Verdict::Unknown { vmid },
        vm => Verdict::Observed {
            vmid: vm.map(|vm| vm.vmid),
            drift: vm.map_or_else(Vec::new, |vm| super::observed_drift(spec, vm)),
            renamed_from: None,
        },
    }
}

/// An observe-only spec (`managementPolicy: Observe`): its VM (by record, marker, or the VM its
/// consent names) compared with the spec from the listing, and no action of any kind, not even
/// finishing a create in flight or an adoption.
fn observe(
    spec: &Spec,
    rec: Option<&SpecRecord>,
    index: Option<&SiteIndex<'_>>,
    view: &SiteView,
) -> Verdict {
    let consented = || {
        let c = spec.adopt.as_ref()?;
        view.vms.get(&c.vmid).filter(|vm| {
            vm.kind == spec.kind() && !vm.template && vm.name.as_deref() == Some(spec.guest_name())
        })
    };
    let vm = by_record(rec, view)
        .or_else(|| by_marker(spec, rec, index))
        .or_else(consented);
    match vm {
        Some(vm) if vm.is_unknown() => Verdict::Unknown { vmid: vm.vmid },
        Some(vm) => Verdict::Observed {
            vmid: Some(vm.vmid),
            drift: super::observed_drift(spec, vm),
            renamed_from: None,
        },
        None => Verdict::Observed {
            vmid: None,
            drift: Vec::new(),
            renamed_from: None,
        },
    }
}

/// The verdict of a spec on a site that is not to be judged: unreachable, or reaching another
/// cluster than the recorded one.
pub(super) fn not_readable(view: &SiteView) -> Verdict {
    let error = view.error.clone().unwrap_or_default();
    if view.identity_changed {
        Verdict::SiteIdentityChanged { message: error }
    } else {
        Verdict::SiteUnreachable {
            error: Unreadable::Observed(error),
        }
    }
}

pub(super) fn unhealthy(view: &SiteView, node: &str) -> Verdict {
    Verdict::NodeUnhealthy {
        node: node.to_string(),
        quorate: view.health.quorate,
    }
}

/// The spec moved to another site while its VM (or its create) is on the old one. The old
/// site's VMID means nothing on the new site: nothing is looked up there.
fn site_move(
    input: &PlanInput<'_>,
    spec: &Spec,
    rec: Option<&SpecRecord>,
    actions: &mut Vec<Action>,
) -> Option<Verdict> {
    let r = rec.filter(|r| !r.site.is_empty() && r.site != spec.site)?;
    let vmid = r.vmid()?;
    let creating = matches!(r.vm, VmState::Creating { .. });
    let gone = input.sites.get(r.site.as_str()).is_some_and(|old| {
        old.reachable() && !old.incomplete() && !old.vms.contains_key(&vmid) && !creating
    });
    if gone || (spec.allow_recreate_on_site_change && !creating) {
        // Its VM was removed on the old site (or the spec allows a new VM while the old one
        // stays, listed as an orphan by its marker; never while a create there may still be
        // in flight): forget it; the next cycle creates the VM on the new site.
        actions.push(Action::Forget {
            spec: spec.name.to_string(),
        });
        return Some(Verdict::Acting);
    }
    Some(Verdict::SiteMoved {
        from: r.site.to_string(),
        vmid,
    })
}

/// A create in flight is finished, whatever else is true: never a second create.
fn resume_create(
    spec: &Spec,
    rec: Option<&SpecRecord>,
    view: &SiteView,
    actions: &mut Vec<Action>,
) -> Option<Verdict> {
    let rec = rec?;
    let VmState::Creating {
        vmid, node, task, ..
    } = &rec.vm
    else {
        return None;
    };
    // The create in flight makes the other kind of guest (the spec's `kind` changed since its
    // intent): finished as neither kind, and no create of the new kind beside it. A person
    // decides, as for a made guest of the other kind.
    if rec.kind != spec.kind() {
        return Some(Verdict::KindChanged {
            vmid: *vmid,
            found: rec.kind,
        });
    }
    if !view.node_healthy(node) {
        return Some(unhealthy(view, node));
    }
    if let Some(vm) = view.vms.get(vmid)
        && vm.is_unknown()
    {
        return Some(Verdict::Unknown { vmid: *vmid });
    }
    actions.push(Action::ResumeCreate {
        spec: spec.name.to_string(),
        site: spec.site.to_string(),
        node: node.to_string(),
        vmid: *vmid,
        upid: task.clone(),
    });
    Some(Verdict::Acting)
}

/// Until when the spec backs off, if its last failure's next attempt is not due and its
/// inputs did not change (in `run --once`, a transient failure does not hold it back).
fn backoff(input: &PlanInput<'_>, spec: &Spec, rec: Option<&SpecRecord>) -> Option<u64> {
    let r = rec?;
    let until = r.next_attempt_ms?;
    let error = r.last_error.as_ref()?;
    if input.retry_transient_now && !error.needs_human() {
        return None;
    }
    let same_inputs = error.inputs == inputs_hash(spec, input.config_hash);
    (until > input.now_ms && same_inputs).then_some(until)
}

/// The spec's guest is of the other kind (the spec's `kind` changed, or a marker copied onto
/// a guest of the other kind): held for a person, never converged as the wrong kind, never
/// replaced by a create beside it.
fn other_kind(spec: &Spec, vm: &ObservedVm) -> Option<Verdict> {
    (vm.kind != spec.kind()).then_some(Verdict::KindChanged {
        vmid: vm.vmid,
        found: vm.kind,
    })
}

/// The guest at the record's VMID, whatever it shows: the record's guest stays the spec's until
/// it is shown gone. Whether it still is the spec's is judged by execute on a fresh read of its
/// config (`vm::read_own_config`): its marker, else its own identity (the line written back),
/// else a stranger at a reused VMID (the VMID released) or a `MarkerMissing` stall; never by
/// the listing or a marker read once.
fn by_record<'v>(rec: Option<&SpecRecord>, view: &'v SiteView) -> Option<&'v ObservedVm> {
    rec.and_then(|r| r.vm.made_vmid())
        .and_then(|id| view.vms.get(&id))
}

/// The VM carrying the spec's marker: the one with the recorded uid, else the lowest VMID
/// (deterministic).
fn by_marker<'v>(
    spec: &Spec,
    rec: Option<&SpecRecord>,
    index: Option<&SiteIndex<'v>>,
) -> Option<&'v ObservedVm> {
    let mut found: Vec<&ObservedVm> = index.map(|i| claimants(spec, i)).unwrap_or_default();
    found.sort_by_key(|vm| {
        let uid_match = rec.is_some_and(|r| vm.marker.as_ref().is_some_and(|m| m.uid == r.uid));
        (!uid_match, vm.vmid)
    });
    found.first().copied()
}

/// The VMs carrying the spec's verified marker: a `ProxmoxTemplate`'s templates too (its VM
/// before and after it is made one); a guest spec's never a template (a VM a person made a
/// template is not adopted for the spec it was made for).
fn claimants<'v>(spec: &Spec, index: &SiteIndex<'v>) -> Vec<&'v ObservedVm> {
    let name = spec.name.as_str();
    let mut out: Vec<&ObservedVm> = index.by_marker.get(name).cloned().unwrap_or_default();
    if spec.template.is_some() {
        out.extend(index.templates_by_marker.get(name).into_iter().flatten());
    }
    out
}

/// A template carrying a guest spec's verified marker (the lowest VMID).
fn made_a_template<'v>(spec: &Spec, index: &SiteIndex<'v>) -> Option<&'v ObservedVm> {
    if spec.template.is_some() {
        return None;
    }
    let found = index.templates_by_marker.get(spec.name.as_str())?;
    found.iter().min_by_key(|vm| vm.vmid).copied()
}

/// A VM carrying the spec's marker that the state did not know: adopt it.
fn adopt(spec: &Spec, view: &SiteView, vm: &ObservedVm, actions: &mut Vec<Action>) -> Verdict {
    if vm.is_unknown() {
        return Verdict::Unknown { vmid: vm.vmid };
    }
    if !view.node_healthy(&vm.node) {
        return unhealthy(view, &vm.node);
    }
    actions.push(Action::Adopt {
        spec: spec.name.to_string(),
        site: spec.site.to_string(),
        vmid: vm.vmid,
    });
    Verdict::Acting
}

/// A VM whose marker names this spec for another install (the lowest VMID): the spec moved
/// here from that install. While the VM carries any ownership tag `proxsync.*`, that install
/// still holds it: wait (never a second VM). Once released (no such tag) it is adopted when
/// its marker verifies (the installs share a marker key; adoption re-signs it for this
/// install), else a person confirms it with `proxsync adopt`.
fn from_another_install(
    spec: &Spec,
    view: &SiteView,
    index: Option<&SiteIndex<'_>>,
    actions: &mut Vec<Action>,
) -> Option<Verdict> {
    let vm = *index?
        .other_install_by_spec
        .get(spec.name.as_str())?
        .first()?;
    let install = vm.marker.as_ref()?.install.clone();
    if vm.tags.iter().any(|t| t.starts_with("proxsync.")) {
        return Some(Verdict::HeldByInstall {
            install: install.to_string(),
            vmid: vm.vmid,
        });
    }
    if !vm.marker_verified {
        return Some(Verdict::UnverifiedClaim { vmid: vm.vmid });
    }
    if let Some(held) = other_kind(spec, vm) {
        return Some(held);
    }
    Some(adopt(spec, view, vm, actions))
}

/// No VM of the spec is found: create one, unless a VM that may be it cannot be judged yet.
fn create(
    spec: &Spec,
    view: &SiteView,
    index: Option<&SiteIndex<'_>>,
    backoff: Option<u64>,
    actions: &mut Vec<Action>,
) -> Verdict {
    // A guest a create or clone of this install's token is making, which no record explains
    // (the state database was lost while the task ran): it holds only its lock until the task
    // ends and may be this spec's. Wait, then judge it by its marker; never a second one.
    let making = index.and_then(|i| {
        i.making_on_node
            .get(&(spec.kind(), spec.node.as_str()))
            .or_else(|| i.making_anywhere.get(&spec.kind()))
            .copied()
    });
    if let Some(vmid) = making {
        return Verdict::BeingMade { vmid };
    }
    // A VM that may be this spec's (its name, or tagged and nameless on its node) whose
    // marker could not be read: creating now could make a second one. Wait until it is read.
    let unread = index.and_then(|i| {
        i.unread_by_name
            .get(spec.guest_name())
            .or_else(|| i.unread_tagged_nameless.get(spec.node.as_str()))
            .copied()
    });
    if let Some(vmid) = unread {
        return Verdict::Unknown { vmid };
    }
    // A VM claims this spec with a marker that does not verify. It may be the spec's own VM
    // after the marker key was lost: creating now could make a second one, so a human
    // decides (`proxsync adopt`, or delete the VM).
    if let Some(vmid) = index.and_then(|i| i.unverified_by_spec.get(spec.name.as_str())) {
        return Verdict::UnverifiedClaim { vmid: *vmid };
    }
    // A guest with this install's tag and the spec's guest's name but no marker line, which no
    // record explains: the spec's own, its notes replaced, after the record was lost? Never a
    // second one beside it: a person decides (`proxsync adopt`, or the tag removed).
    if let Some(vmid) = index.and_then(|i| i.unmarked_tagged_by_name.get(spec.guest_name())) {
        return Verdict::Unmarked { vmid: *vmid };
    }
    // The spec's guest may be among the listing's entries that could not be read.
    if view.incomplete() {
        return Verdict::ListingIncomplete {
            why: view.incomplete_why(),
        };
    }
    if let Some(until_ms) = backoff {
        return Verdict::BackingOff { until_ms };
    }
    if !view.node_healthy(&spec.node) {
        return unhealthy(view, &spec.node);
    }
    actions.push(Action::Create {
        spec: spec.name.to_string(),
        site: spec.site.to_string(),
        node: spec.node.to_string(),
    });
    Verdict::Acting
}

/// The spec's VM is found: converge it when it drifted from the spec.
fn converge(
    input: &PlanInput<'_>,
    spec: &Spec,
    rec: Option<&SpecRecord>,
    view: &SiteView,
    vm: &ObservedVm,
    backoff: Option<u64>,
    actions: &mut Vec<Action>,
) -> Verdict {
    if vm.is_unknown() {
        return Verdict::Unknown { vmid: vm.vmid };
    }
    if !view.node_healthy(&vm.node) {
        return unhealthy(view, &vm.node);
    }
    // A `ProxmoxTemplate`'s template is what the spec asks for: a change of the spec is a new
    // version (another spec), so nothing of this one is changed any more. Built only once its
    // `qmtemplate` task ended (PVE lists `template: 1` from the task's start, while it still
    // converts the disks): until the record says so, execute looks for the task.
    if spec.template.is_some() && vm.template {
        if template_built(spec, rec, vm) {
            return Verdict::UpToDate { vmid: vm.vmid };
        }
        // Not held by a backoff: it only reads (the task, or that none runs) and records.
        actions.push(Action::Converge {
            spec: spec.name.to_string(),
            site: spec.site.to_string(),
            node: vm.node.to_string(),
            vmid: vm.vmid,
            why: vec!["template".into()],
        });
        return Verdict::Acting;
    }
    // Made from an older version of its image under `imagePolicy: Recreate`: made anew from
    // the spec, whatever else differs (on the node the spec names now: never moved first).
    if let Some(recreate) = super::images::recreate(input, spec, rec, vm) {
        if let Some(until_ms) = backoff {
            return Verdict::BackingOff { until_ms };
        }
        actions.push(recreate);
        return Verdict::Acting;
    }
    if vm.node != spec.node {
        return migrate(spec, view, vm, backoff, actions);
    }
    let default_rec = SpecRecord::default();
    let rec_or_default = rec.unwrap_or(&default_rec);
    let mut why = drift(spec, rec_or_default, vm, input.install_id);
    // Changes waiting for a reboot that the spec's rebootPolicy allows now (its window opened).
    if vm.power == crate::model::Power::Running
        && super::reboot_due(spec, rec_or_default, input.now_ms)
    {
        why.push("reboot".into());
    }
    if let Some(held) = super::change::judge(input, spec, rec, vm, &mut why) {
        return held;
    }
    if why.is_empty() {
        return Verdict::UpToDate { vmid: vm.vmid };
    }
    // A lock is not judged here: execute looks at who holds it (a running task is waited
    // for; a lock no task holds is reported with the command to clear it).
    if let Some(until_ms) = backoff {
        return Verdict::BackingOff { until_ms };
    }
    actions.push(Action::Converge {
        spec: spec.name.to_string(),
        site: spec.site.to_string(),
        node: vm.node.to_string(),
        vmid: vm.vmid,
        why,
    });
    Verdict::Acting
}

/// Whether a `ProxmoxTemplate`'s VM is built: a template, whose record says the spec is
/// applied (set once its `qmtemplate` task ended: `execute::converge`).
pub(super) fn template_built(spec: &Spec, rec: Option<&SpecRecord>, vm: &ObservedVm) -> bool {
    let hash = crate::spec::spec_hash(spec);
    vm.template && rec.is_some_and(|r| r.applied_hash.as_deref() == Some(hash.as_str()))
}

/// The spec names another node than the VM's: migrate it there, when both nodes are healthy.
/// A migration in progress holds the VM's `migrate` lock, so planning it again while it runs
/// only waits for it (execute looks at who holds a lock before acting).
fn migrate(
    spec: &Spec,
    view: &SiteView,
    vm: &ObservedVm,
    backoff: Option<u64>,
    actions: &mut Vec<Action>,
) -> Verdict {
    if !view.node_healthy(&spec.node) {
        return unhealthy(view, &spec.node);
    }
    if let Some(until_ms) = backoff {
        return Verdict::BackingOff { until_ms };
    }
    actions.push(Action::Migrate {
        spec: spec.name.to_string(),
        site: spec.site.to_string(),
        node: vm.node.to_string(),
        vmid: vm.vmid,
        target: spec.node.to_string(),
    });
    Verdict::Migrating {
        from: vm.node.to_string(),
        to: spec.node.to_string(),
        vmid: vm.vmid,
    }
}
