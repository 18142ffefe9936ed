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

use super::{Action, PlanInput};
use crate::config::OrphanPolicy;
use crate::model::{ObservedVm, Power, SiteView};
use crate::model::{SpecRecord, VmState};
use crate::spec::Spec;

use crate::gate::rename::{Evidence, Recorded, Refused, may_relabel};
use crate::guest::GuestKind;

/// What an action lacks: the evidence its kind needs that the inputs do not show. A guest is
/// named with its kind (`kind`) where the inputs show it; its words are in `words::evidence`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// The site was not observed.
    SiteNotObserved {
        /// The site.
        site: String,
    },
    /// The site reaches another cluster than the recorded one.
    OtherCluster {
        /// The site.
        site: String,
    },
    /// The site could not be read.
    SiteUnreadable {
        /// The site.
        site: String,
        /// Why, as the observation said.
        error: String,
    },
    /// The node the action runs on is not healthy.
    NodeUnhealthy {
        /// The node.
        node: String,
        /// Its site.
        site: String,
    },
    /// The spec is not desired.
    NotDesired {
        /// The spec.
        spec: String,
    },
    /// The spec names another site than the action's.
    OtherSite {
        /// The spec.
        spec: String,
        /// The site the spec names.
        names: String,
        /// The action's site.
        site: String,
    },
    /// The guest is not listed on the site.
    NotListed {
        /// The guest.
        vmid: u32,
        /// The site.
        site: String,
    },
    /// The guest is a template.
    Template {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// The guest's state is unknown.
    StateUnknown {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// The guest is listed on another node than the action's.
    NotOnNode {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The node it is listed on.
        node: String,
        /// The action's node.
        want: String,
    },
    /// A migration's target is not another node its spec names.
    NotTheTarget {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The migration's target.
        target: String,
        /// The spec.
        spec: String,
    },
    /// No record of the spec names the guest on the site.
    NotRecorded {
        /// The spec.
        spec: String,
        /// What the spec's guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The site.
        site: String,
    },
    /// A removal: the spec set was not read completely.
    SpecSetIncomplete,
    /// A removal: the desired set is empty.
    DesiredSetEmpty,
    /// A removal: the commit rewinds the branch from one that cannot be read.
    RewindUnreadable,
    /// A removal: neither a record nor a verified marker shows the guest is the spec's.
    NotShownTheSpecs {
        /// What the guest is (as listed, else as recorded).
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The site.
        site: String,
    },
    /// The spec names another node than the create's.
    OtherNode {
        /// The spec.
        spec: String,
        /// The node the spec names.
        names: String,
        /// The action's node.
        node: String,
    },
    /// A create of the spec is in flight.
    CreateInFlight {
        /// The spec.
        spec: String,
    },
    /// The spec's record names a guest on another site: a site move.
    RecordedOnOtherSite {
        /// The spec.
        spec: String,
        /// What the recorded guest is.
        kind: GuestKind,
        /// The site the record names.
        site: String,
    },
    /// The spec's record names a guest that is there (or may be).
    RecordedThere {
        /// The spec.
        spec: String,
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// The guest carries the spec's verified marker.
    CarriesMarker {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The spec.
        spec: String,
    },
    /// The guest claims the spec with a marker that does not verify.
    UnverifiedClaim {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The spec.
        spec: String,
    },
    /// The guest, named like the spec's, has a marker not read yet.
    MarkerNotRead {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The spec.
        spec: String,
    },
    /// The guest carries the spec's marker for another install.
    AnotherInstalls {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The spec.
        spec: String,
    },
    /// The spec is renamed from `from`, whose guest is on its site.
    RenamedFromThere {
        /// The spec.
        spec: String,
        /// The spec it is renamed from.
        from: String,
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// No record of the spec holds a create of the guest on the node.
    NoCreateInFlight {
        /// The spec.
        spec: String,
        /// What the spec's guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The node.
        node: String,
    },
    /// The guest carries no verified marker of the spec (or another install still holds it).
    NotVerifiedFor {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The spec.
        spec: String,
    },
    /// The spec does not consent to take over the guest.
    NotConsented {
        /// The spec.
        spec: String,
        /// What the spec's guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// The spec already has a guest in its record.
    AlreadyRecorded {
        /// The spec.
        spec: String,
        /// What the recorded guest is.
        kind: GuestKind,
    },
    /// The guest is not a bare one of the spec's kind and guest name.
    NotBare {
        /// What the spec's guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The spec's guest name.
        name: String,
    },
    /// A removal: the spec is still in the set.
    StillInSet {
        /// The spec.
        spec: String,
    },
    /// A removal: the spec is another install's.
    HandedOver {
        /// The spec.
        spec: String,
    },
    /// A removal: no record of the spec asks for it (deletionPolicy as recorded).
    NotAsked {
        /// The spec.
        spec: String,
    },
    /// The removal of an old version of a `ProxmoxTemplate` while a guest is being cloned
    /// from it, or before its current version is built.
    TemplateNeeded {
        /// The old version's spec.
        spec: String,
    },
    /// A rebuild: the spec does not say `imagePolicy: Recreate`, or its guest was made from
    /// the version its image names now (or no version is recorded), and no delete of it is
    /// recorded.
    NotOlderImage {
        /// The spec.
        spec: String,
    },
    /// The spec has no record.
    NoRecord {
        /// The spec.
        spec: String,
    },
    /// The spec's guest is still on its old site.
    StillOnOldSite {
        /// The spec.
        spec: String,
        /// What the recorded guest is.
        kind: GuestKind,
        /// The old site.
        site: String,
    },
    /// The spec is desired on its record's site.
    DesiredOnSite {
        /// The spec.
        spec: String,
    },
    /// The spec is invalid.
    Invalid {
        /// The spec.
        spec: String,
    },
    /// Forgetting a record: the spec set was not read completely.
    SpecSetUnread,
    /// The spec's guest is still listed on its site.
    StillListed {
        /// The spec.
        spec: String,
        /// What the recorded guest is.
        kind: GuestKind,
        /// The site.
        site: String,
    },
    /// The spec is not annotated as renamed from `from`.
    NotRenamedFrom {
        /// The spec.
        spec: String,
        /// The spec it would be renamed from.
        from: String,
    },
    /// The spec renamed from is not shown to be gone.
    NotGone {
        /// The spec renamed from.
        from: String,
    },
    /// The spec has a guest of its own.
    HasOwnGuest {
        /// The spec.
        spec: String,
        /// What the spec's guest is.
        kind: GuestKind,
    },
    /// `gate::rename` does not allow re-signing the guest's marker.
    Relabel(Refused),
    /// A hand-over: the spec is not another install's.
    NotElsewhere {
        /// The spec.
        spec: String,
    },
    /// Orphans are only reported (`orphans = "report"`).
    OrphansReported,
    /// The guest lacks this install's tag or a verified marker.
    NotOwned {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// The guest is not stopped and unlocked.
    NotStopped {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// A record names the guest.
    NamedByARecord {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// The guest is the spec's, which is in the set.
    SpecInSet {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The spec its marker names.
        spec: String,
    },
    /// The guest is a desired spec's only guest, not a second one.
    OnlyGuest {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The spec.
        spec: String,
    },
    /// The guest is the spec's, which a desired spec is renamed from.
    RenamedOriginal {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The spec its marker names.
        spec: String,
        /// The spec renamed from it.
        renamed: String,
    },
    /// The guest's grace period has not passed.
    InGrace {
        /// What the guest is.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
}

type Checked = Result<(), Missing>;

fn missing(why: Missing) -> Checked {
    Err(why)
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
                return missing(Missing::NotTheTarget {
                    kind: vm.kind,
                    vmid: *vmid,
                    target: target.clone(),
                    spec: spec.clone(),
                });
            }
            healthy(input, site, target)
        }
        Action::Recreate {
            spec,
            site,
            node,
            vmid,
        } => recreate(input, spec, site, node, *vmid),
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
        return Err(Missing::SiteNotObserved { site: site.into() });
    };
    if view.identity_changed {
        return Err(Missing::OtherCluster { site: site.into() });
    }
    if let Some(e) = &view.error {
        return Err(Missing::SiteUnreadable {
            site: site.into(),
            error: e.clone(),
        });
    }
    Ok(view)
}

fn healthy(input: &PlanInput<'_>, site: &str, node: &str) -> Checked {
    if view(input, site)?.node_healthy(node) {
        return Ok(());
    }
    missing(Missing::NodeUnhealthy {
        node: node.into(),
        site: site.into(),
    })
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
        return Err(Missing::NotDesired { spec: name.into() });
    };
    if spec.site != site {
        return Err(Missing::OtherSite {
            spec: name.into(),
            names: spec.site.to_string(),
            site: site.into(),
        });
    }
    Ok((spec, view(input, site)?))
}

/// VM `vmid` as listed on `site`: judged (its state known), not a template.
fn listed(view: &SiteView, vmid: u32) -> Result<&ObservedVm, Missing> {
    listed_as(view, vmid, false)
}

/// [`listed`], a template allowed when `built` (a `ProxmoxTemplate`'s: its spec or its record
/// says it built one).
fn listed_as(view: &SiteView, vmid: u32, built: bool) -> Result<&ObservedVm, Missing> {
    let Some(vm) = view.vms.get(&vmid) else {
        return Err(Missing::NotListed {
            vmid,
            site: view.name.clone(),
        });
    };
    if vm.template && !built {
        return Err(Missing::Template {
            kind: vm.kind,
            vmid,
        });
    }
    if vm.is_unknown() {
        return Err(Missing::StateUnknown {
            kind: vm.kind,
            vmid,
        });
    }
    Ok(vm)
}

/// The action runs on the node the VM is listed on, and that node is healthy.
fn on_node(input: &PlanInput<'_>, site: &str, vm: &ObservedVm, node: &str) -> Checked {
    if vm.node != node {
        return missing(Missing::NotOnNode {
            kind: vm.kind,
            vmid: vm.vmid,
            node: vm.node.to_string(),
            want: node.into(),
        });
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
    let (s, view) = desired_on(input, spec, site)?;
    let rec = input.records.get(spec);
    let names = rec
        .is_some_and(|r| r.vm.made_vmid() == Some(vmid) && (r.site == site || r.site.is_empty()));
    if !names {
        return Err(Missing::NotRecorded {
            spec: spec.into(),
            kind: s.kind(),
            vmid,
            site: site.into(),
        });
    }
    let built = s.template.is_some() && rec.is_some_and(|r| r.built_template);
    listed_as(view, vmid, built)
}

/// A delete, release or hand-over may be planned at all: the spec set was read completely, the
/// desired set is not empty, and a rewind's previous commit can be read.
fn removals_allowed(input: &PlanInput<'_>) -> Checked {
    if !input.complete {
        return missing(Missing::SpecSetIncomplete);
    }
    if input.desired.is_empty() && input.invalid.is_empty() {
        return missing(Missing::DesiredSetEmpty);
    }
    if input.rewind.is_some_and(|r| r.from_specs.is_none()) {
        return missing(Missing::RewindUnreadable);
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
    let listed_kind = view.vms.get(&vmid).map(|vm| vm.kind);
    let kind = listed_kind.or(rec.map(|r| r.kind)).unwrap_or_default();
    let built = recorded.is_some_and(|r| r.built_template);
    match (view.vms.get(&vmid), recorded) {
        (Some(_), Some(_)) => on_node(input, site, listed_as(view, vmid, built)?, node),
        (Some(vm), None) if owned(vm) => on_node(input, site, listed(view, vmid)?, node),
        (None, Some(r)) if matches!(&r.vm, VmState::Creating { node: n, .. } if n == node) => {
            healthy(input, site, node)
        }
        _ => missing(Missing::NotShownTheSpecs {
            kind,
            vmid,
            site: site.into(),
        }),
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
        return missing(Missing::OtherNode {
            spec: spec.into(),
            names: s.node.to_string(),
            node: node.into(),
        });
    }
    healthy(input, site, node)?;
    if let Some(r) = input.records.get(spec) {
        if matches!(r.vm, VmState::Creating { .. }) {
            return missing(Missing::CreateInFlight { spec: spec.into() });
        }
        if !r.site.is_empty() && r.site != site && r.vmid().is_some() {
            return missing(Missing::RecordedOnOtherSite {
                spec: spec.into(),
                kind: r.kind,
                site: r.site.to_string(),
            });
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
                return missing(Missing::RecordedThere {
                    spec: spec.into(),
                    kind: vm.kind,
                    vmid: vm.vmid,
                });
            }
        }
    }
    let known = |vmid: u32| named_by_a_record(input, site, vmid);
    for vm in view.vms.values() {
        let (kind, vmid) = (vm.kind, vm.vmid);
        // A template too: the spec's guest, made a template by a person, is still its guest.
        if verified_for(input, vm, spec) {
            return missing(Missing::CarriesMarker {
                kind,
                vmid,
                spec: spec.into(),
            });
        }
        if vm.template {
            continue;
        }
        if vm.unverified_claim(input.install_id) == Some(spec) {
            return missing(Missing::UnverifiedClaim {
                kind,
                vmid,
                spec: spec.into(),
            });
        }
        if !vm.marker_read && !known(vmid) && vm.name.as_deref() == Some(s.guest_name()) {
            return missing(Missing::MarkerNotRead {
                kind,
                vmid,
                spec: spec.into(),
            });
        }
        let theirs = vm
            .marker
            .as_ref()
            .is_some_and(|m| m.install != input.install_id && m.spec == spec);
        if input.sharded && theirs {
            return missing(Missing::AnotherInstalls {
                kind,
                vmid,
                spec: spec.into(),
            });
        }
        if let Some(from) = &s.renamed_from
            && verified_for(input, vm, from)
            && !known(vmid)
        {
            return missing(Missing::RenamedFromThere {
                spec: spec.into(),
                from: from.clone(),
                kind,
                vmid,
            });
        }
    }
    Ok(())
}

/// Resuming a create: the spec's record holds the create in flight, at this VMID and node.
fn resume_create(input: &PlanInput<'_>, spec: &str, site: &str, node: &str, vmid: u32) -> Checked {
    let (s, _) = desired_on(input, spec, site)?;
    let in_flight = input.records.get(spec).is_some_and(
        |r| matches!(&r.vm, VmState::Creating { vmid: v, node: n, .. } if *v == vmid && n == node),
    );
    if !in_flight {
        return missing(Missing::NoCreateInFlight {
            spec: spec.into(),
            kind: s.kind(),
            vmid,
            node: node.into(),
        });
    }
    healthy(input, site, node)
}

/// An adoption: the VM carries the spec's marker and it verifies: this install's, or (a sharded
/// install) another install's that no install's tag holds any more.
fn adopt(input: &PlanInput<'_>, spec: &str, site: &str, vmid: u32) -> Checked {
    let (s, view) = desired_on(input, spec, site)?;
    if input
        .records
        .get(spec)
        .is_some_and(|r| matches!(r.vm, VmState::Creating { .. }))
    {
        return missing(Missing::CreateInFlight { spec: spec.into() });
    }
    let vm = listed_as(view, vmid, s.template.is_some())?;
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
    missing(Missing::NotVerifiedFor {
        kind: vm.kind,
        vmid,
        spec: spec.into(),
    })
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
        return missing(Missing::NotConsented {
            spec: spec.into(),
            kind: s.kind(),
            vmid,
        });
    }
    if let Some(r) = input.records.get(spec).filter(|r| r.vm.vmid().is_some()) {
        return missing(Missing::AlreadyRecorded {
            spec: spec.into(),
            kind: r.kind,
        });
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
    missing(Missing::NotBare {
        kind: s.kind(),
        vmid,
        name: s.guest_name().to_string(),
    })
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
    if desired(input, spec).is_some() || input.is_invalid(spec) {
        return missing(Missing::StillInSet { spec: spec.into() });
    }
    if input.elsewhere.contains(spec) {
        return missing(Missing::HandedOver { spec: spec.into() });
    }
    let rec = input.records.get(spec);
    if rec.is_none_or(|r| r.orphan_on_delete != release) {
        return missing(Missing::NotAsked { spec: spec.into() });
    }
    if let (Some(r), Ok(view)) = (rec, view(input, site))
        && super::removals::template_still_needed(input, spec, r, view).is_some()
    {
        return missing(Missing::TemplateNeeded { spec: spec.into() });
    }
    removal_target(input, rec, site, node, vmid, |_| false)
}

/// A rebuild from a new image: the spec is desired with `imagePolicy: Recreate` and its record
/// names the guest; either the record says the guest was made from another file than the image
/// names now and the guest is listed on `node`, or the record says a delete of
/// it is in flight (the guest may be gone from the listing).
fn recreate(input: &PlanInput<'_>, spec: &str, site: &str, node: &str, vmid: u32) -> Checked {
    let (s, _) = desired_on(input, spec, site)?;
    let not_older = || missing(Missing::NotOlderImage { spec: spec.into() });
    if s.image_policy != crate::spec::ImagePolicy::Recreate {
        return not_older();
    }
    let rec = input.records.get(spec);
    if let Some(VmState::Deleting {
        vmid: v, node: n, ..
    }) = rec.map(|r| &r.vm)
        && *v == vmid
        && n == node
    {
        return healthy(input, site, node);
    }
    let vm = recorded_vm(input, spec, site, vmid)?;
    // Whether the guest is still the spec's, execute reads and judges (`gate::permit::recreate`).
    on_node(input, site, vm, node)?;
    let file = s.made_from_now(input.images);
    match rec.and_then(SpecRecord::made_from) {
        Some(made) if file.is_some_and(|f| f != made) => Ok(()),
        _ => not_older(),
    }
}

/// A record forgotten: a gone spec whose VM is gone from its reachable site, or a spec that moved
/// to another site whose old VM is gone (or which allows a new VM beside it). Never a create in
/// flight.
fn forget(input: &PlanInput<'_>, spec: &str) -> Checked {
    let Some(rec) = input.records.get(spec) else {
        return missing(Missing::NoRecord { spec: spec.into() });
    };
    if matches!(rec.vm, VmState::Creating { .. }) {
        return missing(Missing::CreateInFlight { spec: spec.into() });
    }
    let gone_from_site = || {
        view(input, &rec.site).is_ok_and(|v| rec.vmid().is_none_or(|id| !v.vms.contains_key(&id)))
    };
    match desired(input, spec) {
        Some(s) if s.site != rec.site && !rec.site.is_empty() => {
            if s.allow_recreate_on_site_change || gone_from_site() {
                Ok(())
            } else {
                missing(Missing::StillOnOldSite {
                    spec: spec.into(),
                    kind: rec.kind,
                    site: rec.site.to_string(),
                })
            }
        }
        Some(_) => missing(Missing::DesiredOnSite { spec: spec.into() }),
        None if input.is_invalid(spec) => missing(Missing::Invalid { spec: spec.into() }),
        None if !input.complete => missing(Missing::SpecSetUnread),
        None if gone_from_site() => Ok(()),
        None => missing(Missing::StillListed {
            spec: spec.into(),
            kind: rec.kind,
            site: rec.site.to_string(),
        }),
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
        return missing(Missing::NotRenamedFrom {
            spec: spec.into(),
            from: from.into(),
        });
    }
    if !input.complete
        || desired(input, from).is_some()
        || input.is_invalid(from)
        || input.elsewhere.contains(from)
    {
        return missing(Missing::NotGone { from: from.into() });
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
        return missing(Missing::HasOwnGuest {
            spec: spec.into(),
            kind: s.kind(),
        });
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
        .map_err(Missing::Relabel)
}

/// A hand-over: the spec is outside this install's selector now, and its record names the VM on
/// that site, or the VM is this install's (its tag and a verified marker naming the spec).
fn hand_over(input: &PlanInput<'_>, spec: &str, site: &str, node: &str, vmid: u32) -> Checked {
    removals_allowed(input)?;
    if !input.elsewhere.contains(spec) {
        return missing(Missing::NotElsewhere { spec: spec.into() });
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
        return missing(Missing::OrphansReported);
    }
    let view = view(input, site)?;
    let vm = listed(view, vmid)?;
    on_node(input, site, vm, node)?;
    let kind = vm.kind;
    if !vm.owned_by(input.install_id) {
        return missing(Missing::NotOwned { kind, vmid });
    }
    if vm.power != Power::Stopped || vm.lock.is_some() {
        return missing(Missing::NotStopped { kind, vmid });
    }
    if named_by_a_record(input, site, vmid) {
        return missing(Missing::NamedByARecord { kind, vmid });
    }
    let spec = vm.marker.as_ref().map(|m| m.spec.as_str()).unwrap_or("");
    if input.elsewhere.contains(spec) || input.is_invalid(spec) {
        return missing(Missing::SpecInSet {
            kind,
            vmid,
            spec: spec.into(),
        });
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
            return missing(Missing::OnlyGuest {
                kind,
                vmid,
                spec: spec.into(),
            });
        }
    }
    if let Some(renamed) = input
        .desired
        .iter()
        .find(|s| s.renamed_from.as_deref() == Some(spec))
    {
        return missing(Missing::RenamedOriginal {
            kind,
            vmid,
            spec: spec.into(),
            renamed: renamed.name.to_string(),
        });
    }
    let first_seen = input
        .orphans_seen
        .get(&(site.to_string(), vmid))
        .copied()
        .unwrap_or(input.now_ms);
    let grace = input.reconcile.orphan_grace.as_millis() as u64;
    if input.now_ms < first_seen.saturating_add(grace) {
        return missing(Missing::InGrace { kind, vmid });
    }
    Ok(())
}
