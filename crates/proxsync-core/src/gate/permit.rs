//! Permits: the only way a destructive or identity-changing call reaches Proxmox VE.
//!
//! A [`Permit`] allows one act on one VM of one site: a delete of the VM, a release or a
//! hand-over (the ownership tag removed), a take-over, a re-label or a re-signing (a marker
//! written), a detach or a destroy of a drive, the attach of a seed image, the delete of a seed
//! image, the removal of an HA resource, group or rule. It cannot be cloned, and only the
//! gate's decision functions make one (`Permit::new` is public because the client's crate is
//! below the gate; `tests/tidy.rs` checks no other code calls it), each from verified evidence (a
//! [`VerifiedMarker`], which needs a [`SiteChecked`]; the recorded volumes; the HA mark). The
//! calls that act take one: `Pve::delete_vm`, `Pve::delete_volume` and
//! `Pve::remove_ha_affinity` and `Pve::remove_ha_resource` a `&Permit`, and a config write
//! carries the permits of its guarded edits inside its `VmParams` (its builders `detach`,
//! `destroy_drive`, `marker`, `release`, `drop_ownership`, `attach_seed` take one). [`check_write`] is the backstop every config write
//! passes in the client (and the unit tests' fake): a guarded edit without a matching permit is
//! refused before anything is sent. The guarded edits of a config write:
//! - `delete=` of a drive (`ide|sata|scsi|virtio|efidisk|tpmstate|unusedN`): a detach, or with
//!   `force` a destroy of its volume;
//! - `description`: a marker line written (the install, spec and uid it carries must be the
//!   permit's), or none (the marker removed), or `delete=description`;
//! - `tags` without any `proxsync.*` tag, or `delete=tags`: the ownership tag removed;
//! - a drive set to an image: a CD-ROM of a volume (`V,media=cdrom`) or `import-from=V`.
//!
//! A drive rewritten with its own volume and other options, a new disk (`S:N`), PVE's cloud-init
//! drive (`S:cloudinit`) and an ejected CD-ROM (`none,media=cdrom`) are not guarded.

use super::identity::{Trust, VerifiedMarker};
use super::refusal::{Refusal, Refused};
use super::site::SiteChecked;
use crate::guest::{GuestId, GuestKind};
use crate::ownership::{ExerciseLine, Marker, MarkerKey, ownership_tag};
pub use crate::pve::permit::{
    Act, Grant, MarkerId, Permit, check_delete_vm, check_delete_volume, check_remove_affinity,
    check_remove_ha_resource, check_write,
};

// ---- the acts on a VM of this install, from its verified marker ----

/// `vm`'s refusal for `why`.
fn refused(vm: &VerifiedMarker, why: Refused) -> Refusal {
    Refusal {
        kind: vm.kind(),
        vmid: vm.vmid(),
        why,
    }
}

/// `vm`'s marker names this install.
pub(super) fn own(vm: &VerifiedMarker) -> Result<(), Refusal> {
    if vm.is_own() {
        return Ok(());
    }
    let install = vm.install().to_string();
    Err(refused(vm, Refused::OtherInstall { install }))
}

fn of_spec(vm: &VerifiedMarker, spec: &str) -> Result<(), Refusal> {
    own(vm)?;
    if vm.spec() == spec {
        return Ok(());
    }
    let (carries, wanted) = (vm.spec().to_string(), spec.to_string());
    Err(refused(vm, Refused::OtherSpec { carries, wanted }))
}

/// The removal of spec `spec`'s VM: its delete, or with `release` (`deletionPolicy: Orphan`)
/// its release (this install's tag and marker removed, the VM kept). The VM's marker must
/// name `spec` (verified or vouched for by the spec's record): its identity alone is not
/// enough.
pub fn remove(vm: &VerifiedMarker, spec: &str, release: bool) -> Result<Permit, Refusal> {
    of_spec(vm, spec)?;
    // A guest shown the spec's only by its identity (its notes lost the marker line) gets the
    // line back first; it is deleted or released only on the marker itself.
    if vm.trust() == Trust::Identity {
        return Err(refused(vm, Refused::MarkerLineMissing));
    }
    let act = if release { Act::Release } else { Act::DeleteVm };
    Ok(Permit::new(vm.site(), vm.vmid(), act))
}

/// The delete of spec `spec`'s VM to make it anew from a new version of its image: as a
/// removal's delete (the marker names the spec, not only its identity), and only while the spec
/// asks for it (`imagePolicy: Recreate` with `deletionPolicy: Delete`). Which version the guest
/// was made from is the plan's and the record's.
pub fn recreate(vm: &VerifiedMarker, spec: &crate::spec::Spec) -> Result<Permit, Refusal> {
    of_spec(vm, &spec.name)?;
    if vm.trust() == Trust::Identity {
        return Err(refused(vm, Refused::MarkerLineMissing));
    }
    if spec.image_policy != crate::spec::ImagePolicy::Recreate
        || spec.deletion_policy != crate::spec::DeletionPolicy::Delete
    {
        let spec = spec.name.clone();
        return Err(refused(
            vm,
            Refused::NotRecreate {
                spec: spec.to_string(),
            },
        ));
    }
    Ok(Permit::new(vm.site(), vm.vmid(), Act::DeleteVm))
}

/// Spec `spec`'s guest rolled back to `snapshot`, the one proxsync took before the change in
/// flight (`changePolicy.rollback: OnUnhealthy`): the guest's marker names the spec, and its
/// record names the snapshot as the guard of that change. A snapshot a person made is never
/// rolled back to.
pub fn rollback(
    vm: &VerifiedMarker,
    spec: &str,
    rec: &crate::model::SpecRecord,
    snapshot: &str,
) -> Result<Permit, Refusal> {
    of_spec(vm, spec)?;
    let guarded = rec.changes_of(vm.vmid()).is_some_and(|c| {
        c.snapshots.iter().any(|s| s == snapshot)
            && c.guard.as_ref().is_some_and(|g| g.snapshot == snapshot)
    });
    if !guarded {
        let snapshot = snapshot.to_string();
        return Err(refused(vm, Refused::NotOwnSnapshot { snapshot }));
    }
    let snapshot = snapshot.to_string();
    Ok(Permit::new(
        vm.site(),
        vm.vmid(),
        Act::Rollback { snapshot },
    ))
}

/// The delete of spec `spec`'s guest's snapshot `snapshot`, one proxsync took (its record names
/// it for this guest) and no change in flight is guarded by. A snapshot a person made is never
/// deleted.
pub fn delete_snapshot(
    vm: &VerifiedMarker,
    spec: &str,
    rec: &crate::model::SpecRecord,
    snapshot: &str,
) -> Result<Permit, Refusal> {
    of_spec(vm, spec)?;
    let own = rec.changes_of(vm.vmid()).is_some_and(|c| {
        c.snapshots.iter().any(|s| s == snapshot)
            && c.guard.as_ref().is_none_or(|g| g.snapshot != snapshot)
    });
    if !own {
        let snapshot = snapshot.to_string();
        return Err(refused(vm, Refused::NotOwnSnapshot { snapshot }));
    }
    let snapshot = snapshot.to_string();
    Ok(Permit::new(
        vm.site(),
        vm.vmid(),
        Act::DeleteSnapshot { snapshot },
    ))
}

/// The hand-over of spec `spec`'s VM to the install whose selector now matches the spec: this
/// install's tag removed, the marker kept (written signed for the VM when it was not).
pub fn hand_over(vm: &VerifiedMarker, spec: &str) -> Result<Permit, Refusal> {
    of_spec(vm, spec)?;
    let marker = MarkerId::of(vm.marker());
    Ok(Permit::new(vm.site(), vm.vmid(), Act::HandOver { marker }))
}

/// The delete of an orphan (or of a second VM of a spec): this install's ownership tag among
/// `tags` and a marker whose MAC verifies (no record vouches for an orphan). That it is
/// stopped, unlocked, unprotected and past its grace period is the plan's and the caller's.
pub fn delete_orphan(vm: &VerifiedMarker, tags: &[String]) -> Result<Permit, Refusal> {
    own(vm)?;
    if vm.trust() != Trust::Mac {
        return Err(refused(vm, Refused::UnsignedOrphan));
    }
    let tag = ownership_tag(vm.install());
    if !tags.contains(&tag) {
        return Err(refused(vm, Refused::NoOwnershipTag { tag }));
    }
    Ok(Permit::new(vm.site(), vm.vmid(), Act::DeleteVm))
}

/// Writing the VM's own marker again, signed for its VMID (a marker from before signing, or
/// with a lost key, vouched for by the record), or below a description the spec declares: the
/// install, spec and uid it carries are the verified marker's.
pub fn sign(vm: &VerifiedMarker) -> Result<Permit, Refusal> {
    own(vm)?;
    let marker = MarkerId::of(vm.marker());
    Ok(Permit::new(vm.site(), vm.vmid(), Act::Sign { marker }))
}

/// Taking over a VM another install handed over (`vm` from `identity::verify_handed`: its
/// marker names `spec` and verifies with the key the installs share) once it is released: no
/// `proxsync.*` tag left among `tags`. This install's marker (same spec and uid) is written.
pub fn take_over(
    vm: &VerifiedMarker,
    install_id: &str,
    spec: &str,
    tags: &[String],
) -> Result<Permit, Refusal> {
    let vmid = vm.vmid();
    if vm.is_own() || vm.spec() != spec || vm.trust() != Trust::Mac {
        let spec = spec.to_string();
        return Err(refused(vm, Refused::NotHandedOver { spec }));
    }
    released(vm.kind(), vmid, vm.install(), tags)?;
    let marker = MarkerId {
        install: install_id.to_string(),
        spec: spec.to_string(),
        uid: vm.uid().to_string(),
    };
    Ok(Permit::new(vm.site(), vmid, Act::TakeOver { marker }))
}

/// No `proxsync.*` tag is left among `tags` of guest `vmid`.
fn released(kind: GuestKind, vmid: u32, install: &str, tags: &[String]) -> Result<(), Refusal> {
    match tags.iter().find(|t| t.starts_with("proxsync.")) {
        Some(tag) => Err(Refusal {
            kind,
            vmid,
            why: Refused::NotReleased {
                install: install.to_string(),
                tag: tag.clone(),
            },
        }),
        None => Ok(()),
    }
}

/// A person's confirmation that guest `vmid` is spec `spec`'s: `proxsync adopt SPEC --vmid N`.
#[derive(Debug, Clone, Copy)]
pub struct ByHand<'a> {
    /// The spec the person named.
    pub spec: &'a str,
    /// What the VMID holds, as listed: only the messages use it.
    pub kind: GuestKind,
    /// The VMID the person named (`--vmid`).
    pub vmid: u32,
}

/// `proxsync adopt` of a VM another install handed over without a shared marker key: on a
/// checked site, the VM a person named carries the marker of the spec they named, for another
/// install, and no `proxsync.*` tag is left (released). This install's marker (same spec and
/// uid) is written. The marker's MAC cannot be checked (another key): the person's confirmation
/// stands for it.
pub fn adopt_by_hand(
    site: &SiteChecked,
    by_hand: ByHand<'_>,
    install_id: &str,
    description: Option<&str>,
    tags: &[String],
) -> Result<Permit, Refusal> {
    let ByHand { spec, kind, vmid } = by_hand;
    let refused = |why| Refusal { kind, vmid, why };
    let m = description
        .and_then(Marker::parse)
        .filter(|m| m.spec == spec && m.install != install_id)
        .ok_or_else(|| {
            refused(Refused::NothingToTakeOver {
                spec: spec.to_string(),
            })
        })?;
    released(kind, vmid, &m.install, tags)?;
    let marker = MarkerId {
        install: install_id.to_string(),
        spec: spec.to_string(),
        uid: m.uid.to_string(),
    };
    Ok(Permit::new(site.site(), vmid, Act::TakeOver { marker }))
}

/// `proxsync adopt SPEC --vmid N` of the guest spec `spec`'s record names (`recorded_vmid`),
/// whose notes lost their marker line (the spec is `Stalled`, `MarkerMissing`): on a checked
/// site, the guest a person named is the record's and its description holds no marker line at
/// all (one of another spec or install is not written over). The record's marker (this
/// install, the spec, the record's `uid`) is written back below the notes.
pub fn remark_by_hand(
    site: &SiteChecked,
    by_hand: ByHand<'_>,
    install_id: &str,
    recorded_vmid: Option<u32>,
    uid: &str,
    description: Option<&str>,
) -> Result<Permit, Refusal> {
    let ByHand { spec, kind, vmid } = by_hand;
    let refused = |why| Refusal { kind, vmid, why };
    let spec_named = spec.to_string();
    if recorded_vmid != Some(vmid) || uid.is_empty() {
        return Err(refused(Refused::NotRecorded { spec: spec_named }));
    }
    if description.is_some_and(|d| d.contains(crate::ownership::MARKER_PREFIX)) {
        return Err(refused(Refused::ForeignMarkerLine { spec: spec_named }));
    }
    let marker = MarkerId {
        install: install_id.to_string(),
        spec: spec.to_string(),
        uid: uid.to_string(),
    };
    Ok(Permit::new(site.site(), vmid, Act::Sign { marker }))
}

/// `proxsync adopt SPEC --vmid N` of a guest no record names that carries this install's tag
/// and the spec's guest's name but no marker line (`Verdict::Unmarked`: its notes replaced
/// after the record was lost): on a checked site, the person's confirmation stands for the
/// marker. The description holds no marker line at all (one of another spec or install is not
/// written over). This install's marker for the spec, with `uid`, is written below the notes.
// Many arguments because: the guest read (description, tags, name) and what the person named.
#[allow(clippy::too_many_arguments)]
pub fn mark_unrecorded_by_hand(
    site: &SiteChecked,
    by_hand: ByHand<'_>,
    install_id: &str,
    uid: &str,
    description: Option<&str>,
    tags: &[String],
    name: Option<&str>,
    vm_name: &str,
) -> Result<Permit, Refusal> {
    let ByHand { spec, kind, vmid } = by_hand;
    let refused = |why| Refusal { kind, vmid, why };
    let tag = ownership_tag(install_id);
    if !tags.contains(&tag) || name != Some(vm_name) {
        return Err(refused(Refused::NotRecognised {
            spec: spec.to_string(),
            tag,
            name: vm_name.to_string(),
        }));
    }
    if description.is_some_and(|d| d.contains(crate::ownership::MARKER_PREFIX)) || uid.is_empty() {
        let spec = spec.to_string();
        return Err(refused(Refused::ForeignMarkerLine { spec }));
    }
    let marker = MarkerId {
        install: install_id.to_string(),
        spec: spec.to_string(),
        uid: uid.to_string(),
    };
    Ok(Permit::new(site.site(), vmid, Act::Sign { marker }))
}

/// Whether `vm` still has the value its consent pins (a reused VMID is another guest).
fn proven(vm: &Bare<'_>, proof: &GuestId, spec: &str) -> Result<(), Refused> {
    let (found, want) = match proof {
        GuestId::Uuid(want) => (
            vm.smbios1
                .and_then(|s| crate::pve::values::prop_value(s, "uuid", None))
                .map(str::to_ascii_lowercase),
            want,
        ),
        GuestId::Hwaddr(want) => (vm.hwaddr.map(str::to_ascii_uppercase), want),
    };
    if found.as_deref() == Some(want.as_str()) {
        return Ok(());
    }
    Err(Refused::IdentityChanged {
        found,
        want: proof.clone(),
        spec: spec.to_string(),
    })
}

/// What a guest's config shows of who it is, read right before an adoption by consent.
#[derive(Debug, Clone, Copy)]
pub struct Bare<'a> {
    /// The guest's VMID.
    pub vmid: u32,
    /// A VM's `name`, a container's `hostname`.
    pub name: Option<&'a str>,
    /// A VM's `smbios1`.
    pub smbios1: Option<&'a str>,
    /// A container's first NIC's `hwaddr`.
    pub hwaddr: Option<&'a str>,
    /// Its `description` (the notes), where any install's marker line would be.
    pub description: Option<&'a str>,
    /// Its tags, where any install's `proxsync.*` tag would be.
    pub tags: &'a [String],
}

/// Taking over guest `vm.vmid`, which a spec consents to (`proxsync.io/adopt` with the VM's
/// uuid or the container's MAC), on a checked site: the VMID is the consent's, the proof
/// (smbios1 uuid, first NIC's MAC) and the name are the ones recorded in the spec (a VMID
/// freed and reused is another guest), and no install has a claim on it (no marker line of
/// any install, no `proxsync.*` tag). This install's first marker, for `spec` and the new
/// `uid`, is written.
pub fn adopt_by_consent(
    site: &SiteChecked,
    consent: &crate::spec::AdoptConsent,
    vm: Bare<'_>,
    install_id: &str,
    spec: &str,
    vm_name: &str,
    uid: &str,
) -> Result<Permit, Refusal> {
    let vmid = vm.vmid;
    // The proof is the spec's kind's (a VM's uuid, a container's MAC), as is the guest.
    let kind = match consent.proof {
        GuestId::Uuid(_) => GuestKind::Qemu,
        GuestId::Hwaddr(_) => GuestKind::Lxc,
    };
    let refused = |why| Refusal { kind, vmid, why };
    let spec_named = || spec.to_string();
    if consent.vmid != vmid {
        return Err(refused(Refused::NotConsented {
            spec: spec_named(),
            consented: consent.vmid,
        }));
    }
    proven(&vm, &consent.proof, spec).map_err(refused)?;
    if vm.name != Some(vm_name) {
        return Err(refused(Refused::NameDiffers {
            found: vm.name.map(str::to_string),
            want: vm_name.to_string(),
            spec: spec_named(),
        }));
    }
    if let Some(tag) = vm.tags.iter().find(|t| t.starts_with("proxsync.")) {
        return Err(refused(Refused::Managed { tag: tag.clone() }));
    }
    if let Some(d) = vm.description
        && d.contains(crate::ownership::MARKER_PREFIX)
    {
        return Err(refused(Refused::HasMarkerLine));
    }
    let marker = MarkerId {
        install: install_id.to_string(),
        spec: spec.to_string(),
        uid: uid.to_string(),
    };
    Ok(Permit::new(site.site(), vmid, Act::Adopt { marker }))
}

// ---- the guests an exercise made ----

/// How an exercise (`proxsync doctor --exercise`, the conformance suite) marks each guest it
/// makes, so that it, and only it, deletes them again: a pool of its own, a name prefix and a
/// line of its own in the description, signed with the install's marker key
/// ([`ExerciseLine`]).
#[derive(Debug, Clone, Copy)]
pub struct ExerciseMarks<'a> {
    /// The pool every guest it makes joins (`proxsync-exercise`).
    pub pool: &'a str,
    /// The start of every name it gives (`proxsync-exercise-`).
    pub prefix: &'a str,
    /// The sentence its line begins with, before the signed fields.
    pub marker: &'a str,
    /// The install's marker key, which signs the line.
    pub key: &'a MarkerKey,
    /// Now, in seconds since the epoch (a clone's line is trusted for a while only).
    pub now: u64,
}

/// How long a clone's line (signed before PVE picked the clone's identity) proves the clone
/// an exercise's: a day after its run began.
pub(crate) const EXERCISE_PENDING_SECS: u64 = 24 * 3600;

/// What a guest shows of who made it, read right before its delete: the pool and HA state
/// from the cluster's listing and the HA resources, the rest from its config.
#[derive(Debug, Clone, Copy)]
pub struct Made<'a> {
    /// The guest's VMID.
    pub vmid: u32,
    /// A VM or a container.
    pub kind: GuestKind,
    /// The pool the cluster's listing shows it in.
    pub pool: Option<&'a str>,
    /// A VM's `name`, a container's `hostname`.
    pub name: Option<&'a str>,
    /// Its `description`, where the exercise's line would be.
    pub description: Option<&'a str>,
    /// It is a template.
    pub template: bool,
    /// Its identity (`VmConfig::guest_id`).
    pub identity: Option<&'a GuestId>,
    /// Its tags, the listing's and the config's.
    pub tags: &'a [String],
    /// Whether HA manages it (a delete's `purge` would drop its HA resource).
    pub ha: bool,
}

/// The proof that an exercise marked `marks` made guest `guest.vmid`: it is in the exercise's
/// pool, its name is the prefix and more, a line of its description is the exercise's,
/// signed with the install's key for this VMID and this guest's identity (a clone's, for
/// this VMID alone, within [`EXERCISE_PENDING_SECS`] of its run's start), and it is neither
/// a template, nor a guest any install manages (a `proxsync-id:` line, a `proxsync.*` tag),
/// nor HA-managed. Anything less, and it is someone else's. Marks that would match any guest
/// (an empty pool, prefix or marker) prove nothing. The line proven, whose run made it.
pub fn exercise_proof(marks: ExerciseMarks<'_>, guest: Made<'_>) -> Result<ExerciseLine, Refusal> {
    let refused = |why| Refusal {
        kind: guest.kind,
        vmid: guest.vmid,
        why,
    };
    if [marks.pool, marks.prefix, marks.marker]
        .iter()
        .any(|m| m.trim().is_empty())
    {
        return Err(refused(Refused::EmptyExerciseMarks {
            pool: marks.pool.to_string(),
            prefix: marks.prefix.to_string(),
            marker: marks.marker.to_string(),
        }));
    }
    exercise_shown(marks, guest).map_err(refused)?;
    let description = guest.description.unwrap_or_default();
    let line = ExerciseLine::parse(description, marks.marker).ok_or_else(|| {
        refused(Refused::NoExerciseLine {
            marker: marks.marker.to_string(),
        })
    })?;
    let (pool, vmid) = (marks.pool, guest.vmid);
    let signed = guest
        .identity
        .is_some_and(|id| line.verifies(marks.key, pool, vmid, Some(id)));
    let young = marks.now.saturating_sub(line.started) < EXERCISE_PENDING_SECS;
    let pending = young && line.verifies(marks.key, pool, vmid, None);
    if !signed && !pending {
        return Err(refused(Refused::ExerciseUnsigned {
            identity: guest.identity.cloned(),
        }));
    }
    Ok(line)
}

/// The unsigned part of [`exercise_proof`]: the pool, the name, and what no exercise's guest
/// has.
fn exercise_shown(marks: ExerciseMarks<'_>, guest: Made<'_>) -> Result<(), Refused> {
    if guest.pool != Some(marks.pool) {
        return Err(Refused::NotInExercisePool {
            found: guest.pool.map(str::to_string),
            pool: marks.pool.to_string(),
        });
    }
    let name = guest.name.unwrap_or_default();
    if name.len() <= marks.prefix.len() || !name.starts_with(marks.prefix) {
        return Err(Refused::NotExerciseNamed {
            found: name.to_string(),
            prefix: marks.prefix.to_string(),
        });
    }
    if guest
        .description
        .is_some_and(|d| d.contains(crate::ownership::MARKER_PREFIX))
    {
        return Err(Refused::ManagedByLine);
    }
    if let Some(tag) = guest.tags.iter().find(|t| t.starts_with("proxsync.")) {
        return Err(Refused::ManagedByTag { tag: tag.clone() });
    }
    if guest.ha {
        return Err(Refused::HaManaged);
    }
    if guest.template {
        return Err(Refused::Template);
    }
    Ok(())
}

/// The delete of guest `guest.vmid`, on [`exercise_proof`] that an exercise made it.
pub fn exercise_delete(
    site: &str,
    marks: ExerciseMarks<'_>,
    guest: Made<'_>,
) -> Result<Permit, Refusal> {
    exercise_proof(marks, guest)?;
    Ok(Permit::new(site, guest.vmid, Act::DeleteVm))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gate::identity::tests::key;
    use crate::gate::identity::{verify, verify_handed};
    use crate::gate::site::tests::checked;

    fn signed(install: &str, spec: &str, uid: &str, vmid: u32) -> String {
        Marker::signed(&key(), install, spec, uid, vmid).description()
    }

    fn ours(spec: &str, vmid: u32) -> VerifiedMarker {
        let d = signed("main", spec, "u1", vmid);
        verify(
            &checked("lab"),
            &key(),
            "main",
            crate::guest::GuestKind::Qemu,
            vmid,
            Some(&d),
            None,
            None,
        )
        .unwrap()
    }

    fn vouched(spec: &str, vmid: u32) -> VerifiedMarker {
        let d = format!("proxsync-id: install=main spec={spec} uid=u1");
        verify(
            &checked("lab"),
            &key(),
            "main",
            crate::guest::GuestKind::Qemu,
            vmid,
            Some(&d),
            None,
            Some("u1"),
        )
        .unwrap()
    }

    fn theirs(spec: &str, vmid: u32) -> VerifiedMarker {
        let d = signed("other", spec, "u1", vmid);
        verify_handed(
            &checked("lab"),
            &key(),
            "main",
            crate::guest::GuestKind::Qemu,
            vmid,
            Some(&d),
            spec,
        )
        .unwrap()
    }

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn an_adoption_by_consent_needs_the_consented_bare_vm() {
        let consent = crate::spec::AdoptConsent {
            vmid: 105,
            proof: crate::guest::GuestId::Uuid("3f2504e0-4f89-11d3-9a0c-0305e82c3301".into()),
        };
        let none: Vec<String> = Vec::new();
        let smbios = "uuid=3F2504E0-4F89-11D3-9A0C-0305E82C3301,manufacturer=QUVNVQ==";
        let bare = Bare {
            vmid: 105,
            name: Some("db"),
            smbios1: Some(smbios),
            hwaddr: Some("BC:24:11:00:00:01"),
            description: Some("billing\n"),
            tags: &none,
        };
        let adopt = |vm: Bare<'_>| {
            adopt_by_consent(&checked("lab"), &consent, vm, "main", "db", "db", "u7")
        };
        let p = adopt(bare).unwrap();
        let Act::Adopt { marker } = p.act() else {
            panic!("not an adoption: {:?}", p.act());
        };
        assert_eq!((p.site(), p.vmid()), ("lab", 105));
        assert_eq!(
            (
                marker.install.as_str(),
                marker.spec.as_str(),
                marker.uid.as_str()
            ),
            ("main", "db", "u7")
        );
        let tagged = tags(&["web", "proxsync.other"]);
        let refused = [
            (Bare { vmid: 106, ..bare }, "not the VM spec db consents"),
            (
                Bare {
                    smbios1: Some("uuid=00000000-0000-0000-0000-000000000000"),
                    ..bare
                },
                "another guest holds the VMID",
            ),
            (
                Bare {
                    smbios1: None,
                    ..bare
                },
                "uuid (none)",
            ),
            (
                Bare {
                    name: Some("db2"),
                    ..bare
                },
                "named db2",
            ),
            (Bare { name: None, ..bare }, "(no name)"),
            (
                Bare {
                    tags: &tagged,
                    ..bare
                },
                "ownership tag proxsync.other",
            ),
            (
                Bare {
                    description: Some("x proxsync-id: install=other spec=db uid=u1"),
                    ..bare
                },
                "marker line",
            ),
        ];
        for (vm, why) in refused {
            let e = adopt(vm).unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    /// A container's consent is pinned by its first NIC's MAC (it has no smbios1 uuid).
    #[test]
    fn a_containers_consent_is_proven_by_its_nics_mac() {
        let consent = crate::spec::AdoptConsent {
            vmid: 105,
            proof: crate::guest::GuestId::Hwaddr("BC:24:11:5E:0A:01".into()),
        };
        let none: Vec<String> = Vec::new();
        let bare = Bare {
            vmid: 105,
            name: Some("dns"),
            smbios1: None,
            hwaddr: Some("bc:24:11:5e:0a:01"),
            description: None,
            tags: &none,
        };
        let adopt = |vm: Bare<'_>| {
            adopt_by_consent(&checked("lab"), &consent, vm, "main", "dns", "dns", "u7")
        };
        assert!(adopt(bare).is_ok());
        for (vm, why) in [
            (
                Bare {
                    hwaddr: Some("BC:24:11:5E:0A:02"),
                    ..bare
                },
                "first NIC has MAC BC:24:11:5E:0A:02, not BC:24:11:5E:0A:01",
            ),
            (
                Bare {
                    hwaddr: None,
                    ..bare
                },
                "MAC (none)",
            ),
            (
                Bare {
                    smbios1: Some("uuid=3f2504e0-4f89-11d3-9a0c-0305e82c3301"),
                    hwaddr: None,
                    ..bare
                },
                "MAC (none)",
            ),
        ] {
            let e = adopt(vm).unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    /// A record whose guest 100 has proxsync's snapshots `old` and `new`, the change in
    /// flight guarded by `new`.
    fn guarded_record() -> crate::model::SpecRecord {
        use crate::model::{ChangeStep, GuardedChange, SpecRecord};
        let mut rec = SpecRecord::default();
        let c = rec.changes_mut(100);
        c.snapshots = vec!["proxsync-1".into(), "proxsync-2".into()];
        c.guard = Some(GuardedChange {
            snapshot: "proxsync-2".into(),
            step: ChangeStep::Applied,
            since_ms: 1,
        });
        rec
    }

    /// A rollback goes only to the snapshot guarding the change in flight, of the spec's own
    /// guest; a delete only of proxsync's own snapshots but that one. A person's snapshot, one
    /// named like proxsync's, another guest's records or another spec's guest: refused.
    #[test]
    fn snapshots_are_rolled_back_to_and_deleted_only_as_the_record_names_them() {
        let rec = guarded_record();
        let p = rollback(&ours("web", 100), "web", &rec, "proxsync-2").unwrap();
        assert_eq!(
            (p.vmid(), p.act()),
            (
                100,
                &Act::Rollback {
                    snapshot: "proxsync-2".into()
                }
            )
        );
        for other in ["proxsync-1", "proxsync-3", "before-upgrade"] {
            let why = rollback(&ours("web", 100), "web", &rec, other).unwrap_err();
            assert!(why.to_string().contains("not one proxsync took"), "{why}");
        }
        assert!(rollback(&ours("db", 100), "web", &rec, "proxsync-2").is_err());
        assert!(rollback(&theirs("web", 100), "web", &rec, "proxsync-2").is_err());
        // The record's snapshots are of guest 100, not of 101 at the same spec.
        assert!(rollback(&ours("web", 101), "web", &rec, "proxsync-2").is_err());

        let p = delete_snapshot(&ours("web", 100), "web", &rec, "proxsync-1").unwrap();
        assert_eq!(
            p.act(),
            &Act::DeleteSnapshot {
                snapshot: "proxsync-1".into()
            }
        );
        for refused in ["proxsync-2", "proxsync-3", "before-upgrade"] {
            assert!(
                delete_snapshot(&ours("web", 100), "web", &rec, refused).is_err(),
                "{refused}"
            );
        }
        assert!(delete_snapshot(&ours("web", 101), "web", &rec, "proxsync-1").is_err());
        assert!(delete_snapshot(&theirs("web", 100), "web", &rec, "proxsync-1").is_err());
    }

    #[test]
    fn a_removal_needs_the_specs_marker() {
        let p = remove(&ours("web", 100), "web", false).unwrap();
        assert_eq!((p.site(), p.vmid(), p.act()), ("lab", 100, &Act::DeleteVm));
        assert_eq!(
            remove(&vouched("web", 100), "web", true).unwrap().act(),
            &Act::Release
        );
        let why = remove(&ours("db", 100), "web", false)
            .unwrap_err()
            .to_string();
        assert!(why.contains("spec db, not of web"), "{why}");
        assert!(remove(&theirs("web", 100), "web", false).is_err());
        assert!(hand_over(&theirs("web", 100), "web").is_err());
        assert!(sign(&theirs("web", 100)).is_err());
        let Act::HandOver { marker } = hand_over(&vouched("web", 100), "web")
            .unwrap()
            .act()
            .clone()
        else {
            panic!("not a hand-over");
        };
        assert_eq!((marker.spec.as_str(), marker.uid.as_str()), ("web", "u1"));
    }

    /// Container 105, verified as spec web's of this install.
    fn container_105_of_web() -> VerifiedMarker {
        let d = signed("main", "web", "u1", 105);
        let checked = checked("lab");
        verify(
            &checked,
            &key(),
            "main",
            GuestKind::Lxc,
            105,
            Some(&d),
            None,
            None,
        )
        .unwrap()
    }

    /// A refusal is a value: which guest, of which kind, and what the evidence said.
    #[test]
    fn a_refusal_names_the_guest_its_kind_and_the_evidence() {
        let ct = container_105_of_web();
        assert_eq!(
            remove(&ct, "db", true).unwrap_err(),
            Refusal {
                kind: GuestKind::Lxc,
                vmid: 105,
                why: Refused::OtherSpec {
                    carries: "web".into(),
                    wanted: "db".into()
                },
            }
        );
        assert_eq!(
            delete_orphan(&ct, &tags(&["web"])).unwrap_err().why,
            Refused::NoOwnershipTag {
                tag: "proxsync.main".into()
            }
        );
    }

    /// A container's refusals name it as one; the decisions are the VM's.
    #[test]
    fn a_containers_refusals_say_container() {
        let ct = container_105_of_web();
        assert_eq!(
            remove(&ct, "db", false).unwrap_err().to_string(),
            "container 105 carries the marker of spec web, not of db"
        );
        assert_eq!(
            delete_orphan(&ct, &tags(&["web"])).unwrap_err().to_string(),
            "container 105 does not carry the ownership tag proxsync.main: not deleting it"
        );
        let theirs = signed("other", "web", "u1", 105);
        let ct = verify_handed(
            &checked("lab"),
            &key(),
            "main",
            GuestKind::Lxc,
            105,
            Some(&theirs),
            "web",
        )
        .unwrap();
        assert_eq!(
            hand_over(&ct, "web").unwrap_err().to_string(),
            "container 105 carries the marker of install other: not this install's to act on"
        );
        let why = take_over(&ct, "main", "web", &tags(&["proxsync.other"]))
            .unwrap_err()
            .to_string();
        assert!(
            why.starts_with("container 105 carries install other's marker"),
            "{why}"
        );
        let by_hand = ByHand {
            spec: "web",
            kind: GuestKind::Lxc,
            vmid: 105,
        };
        assert_eq!(
            adopt_by_hand(&checked("lab"), by_hand, "main", None, &[])
                .unwrap_err()
                .to_string(),
            "container 105 does not carry the marker of spec web of another install: nothing to \
             take over"
        );
        let consent = crate::spec::AdoptConsent {
            vmid: 105,
            proof: crate::guest::GuestId::Hwaddr("BC:24:11:5E:0A:01".into()),
        };
        let none: Vec<String> = Vec::new();
        let bare = Bare {
            vmid: 106,
            name: Some("dns"),
            smbios1: None,
            hwaddr: Some("BC:24:11:5E:0A:01"),
            description: None,
            tags: &none,
        };
        let adopt =
            |vm| adopt_by_consent(&checked("lab"), &consent, vm, "main", "dns", "dns", "u7");
        assert_eq!(
            adopt(bare).unwrap_err().to_string(),
            "container 106 is not the container spec dns consents to take over (105)"
        );
        let named = adopt(Bare {
            vmid: 105,
            name: Some("ns"),
            ..bare
        });
        assert_eq!(
            named.unwrap_err().to_string(),
            "container 105 is named ns, not dns as spec dns says"
        );
    }

    /// A guest shown the spec's by its identity alone (its notes lost the marker line) gets
    /// the line back (`sign`), but is deleted or released only on the marker itself.
    #[test]
    fn identity_writes_the_marker_back_but_never_removes() {
        let uuid = crate::guest::GuestId::uuid("3f2504e0-4f89-11d3-9a0c-0305e82c3301").unwrap();
        let tags = vec!["proxsync.main".to_string()];
        let by_identity = crate::gate::identity::verify_by_identity(
            &checked("lab"),
            "main",
            GuestKind::Qemu,
            100,
            (Some("Owner: ops"), &tags),
            Some(&uuid),
            crate::gate::identity::Recorded {
                spec: "web",
                uid: "u1",
                identity: Some(&uuid),
            },
        )
        .unwrap();
        let p = sign(&by_identity).unwrap();
        assert_eq!(
            p.act(),
            &Act::Sign {
                marker: MarkerId {
                    install: "main".into(),
                    spec: "web".into(),
                    uid: "u1".into()
                }
            }
        );
        for release in [false, true] {
            let e = remove(&by_identity, "web", release)
                .unwrap_err()
                .to_string();
            assert!(e.contains("written back first"), "{e}");
        }
        assert!(remove(&ours("web", 100), "web", false).is_ok());
    }

    /// `proxsync adopt` writes a missing marker line back only on the guest the spec's record
    /// names (or, no record naming one, a guest with this install's tag and the spec's guest's
    /// name), and never over another marker line.
    #[test]
    fn a_missing_marker_is_written_back_by_hand_only_on_the_specs_guest() {
        let by_hand = ByHand {
            spec: "web",
            kind: GuestKind::Qemu,
            vmid: 100,
        };
        let site = checked("lab");
        let ok =
            remark_by_hand(&site, by_hand, "main", Some(100), "u1", Some("Owner: ops")).unwrap();
        assert_eq!((ok.vmid(), ok.site()), (100, "lab"));
        assert!(
            matches!(ok.act(), Act::Sign { marker } if marker.uid == "u1" && marker.spec == "web")
        );
        assert!(remark_by_hand(&site, by_hand, "main", Some(101), "u1", None).is_err());
        assert!(remark_by_hand(&site, by_hand, "main", None, "u1", None).is_err());
        assert!(remark_by_hand(&site, by_hand, "main", Some(100), "", None).is_err());
        let typed = Some("proxsync-id: install=main spec=db uid=u9");
        assert!(remark_by_hand(&site, by_hand, "main", Some(100), "u1", typed).is_err());

        let tagged = vec!["proxsync.main".to_string()];
        let unrecorded = |tags: &[String], name: Option<&str>, description: Option<&str>| {
            mark_unrecorded_by_hand(&site, by_hand, "main", "u2", description, tags, name, "web")
        };
        let ok = unrecorded(&tagged, Some("web"), Some("Owner: ops")).unwrap();
        assert!(matches!(ok.act(), Act::Sign { marker } if marker.uid == "u2"));
        assert!(
            unrecorded(&[], Some("web"), None).is_err(),
            "without the tag"
        );
        assert!(
            unrecorded(&tagged, Some("db"), None).is_err(),
            "another name"
        );
        assert!(
            unrecorded(&tagged, Some("web"), typed).is_err(),
            "another marker line"
        );
    }

    #[test]
    fn an_orphan_is_deleted_only_signed_and_tagged() {
        let tagged = tags(&["proxsync.main", "web"]);
        assert_eq!(
            delete_orphan(&ours("gone", 100), &tagged).unwrap().act(),
            &Act::DeleteVm
        );
        let why = delete_orphan(&ours("gone", 100), &tags(&["web"]))
            .unwrap_err()
            .to_string();
        assert!(why.contains("proxsync.main"), "{why}");
        // No record vouches for an orphan.
        assert!(delete_orphan(&vouched("gone", 100), &tagged).is_err());
        assert!(delete_orphan(&theirs("gone", 100), &tags(&["proxsync.other"])).is_err());
    }

    #[test]
    fn a_take_over_needs_a_released_vm_of_another_install() {
        let p = take_over(&theirs("web", 100), "main", "web", &tags(&["keep"])).unwrap();
        let Act::TakeOver { marker } = p.act() else {
            panic!("{:?}", p.act());
        };
        assert_eq!(marker.install, "main");
        let why = take_over(
            &theirs("web", 100),
            "main",
            "web",
            &tags(&["proxsync.other"]),
        )
        .unwrap_err()
        .to_string();
        assert!(why.contains("not handed it over yet"), "{why}");
        assert!(take_over(&theirs("web", 100), "main", "db", &[]).is_err());
        assert!(take_over(&ours("web", 100), "main", "web", &[]).is_err());

        let by_hand = ByHand {
            spec: "web",
            kind: GuestKind::Qemu,
            vmid: 100,
        };
        let typed = "proxsync-id: install=other spec=web uid=u9";
        let p = adopt_by_hand(&checked("lab"), by_hand, "main", Some(typed), &[]).unwrap();
        assert_eq!(
            p.act(),
            &Act::TakeOver {
                marker: MarkerId {
                    install: "main".into(),
                    spec: "web".into(),
                    uid: "u9".into()
                }
            }
        );
        assert!(
            adopt_by_hand(
                &checked("lab"),
                by_hand,
                "main",
                Some(typed),
                &tags(&["proxsync.other"])
            )
            .is_err()
        );
        let other_spec = "proxsync-id: install=other spec=db uid=u9";
        assert!(adopt_by_hand(&checked("lab"), by_hand, "main", Some(other_spec), &[]).is_err());
        assert!(adopt_by_hand(&checked("lab"), by_hand, "main", None, &[]).is_err());
    }

    fn check(vmid: u32, values: &[(&str, &str)], permits: &[&Permit]) -> Result<(), String> {
        let grants: Vec<Grant> = permits.iter().map(|p| p.grant()).collect();
        check_write(vmid, values.iter().copied(), &grants)
    }

    #[test]
    fn a_write_without_a_guarded_edit_needs_no_permit() {
        let marker = signed("main", "web", "u1", 100);
        for values in [
            vec![("cores", "4"), ("memory", "2048")],
            vec![("delete", "vga,net2,balloon,scsihw")],
            // PVE's cloud-init drive as the config lists it once made.
            vec![("ide2", "local-lvm:vm-100-cloudinit,media=cdrom")],
            vec![("tags", "proxsync.main;web")],
            vec![
                ("scsi1", "local-lvm:8,cache=none"),
                ("ide0", "local-lvm:cloudinit"),
            ],
            vec![
                ("ide3", "none,media=cdrom"),
                ("scsi1", "data:vm-100-disk-1,cache=none,size=8G"),
            ],
            vec![("protection", "0")],
        ] {
            assert_eq!(check(100, &values, &[]), Ok(()), "{values:?}");
        }
        // A marker write is guarded, and allowed by the VM's own permit.
        let sign = sign(&ours("web", 100)).unwrap();
        assert_eq!(check(100, &[("description", &marker)], &[&sign]), Ok(()));
    }

    #[test]
    fn every_guarded_edit_is_refused_without_its_permit() {
        let marker = signed("main", "web", "u1", 100);
        for (values, what) in [
            (vec![("delete", "scsi1")], "detaching drive scsi1"),
            // Deleting an unusedN entry frees its volume: a destroy, with or without force.
            (
                vec![("delete", "cores;unused0")],
                "destroying drive unused0",
            ),
            // A container's mount point holds a volume as a drive does.
            (vec![("delete", "mp1")], "detaching drive mp1"),
            (
                vec![("delete", "scsi1"), ("force", "1")],
                "destroying drive scsi1",
            ),
            (
                vec![("delete", "efidisk0"), ("force", "1")],
                "destroying drive efidisk0",
            ),
            (
                vec![("description", marker.as_str())],
                "writing the marker of spec web",
            ),
            (
                vec![("description", "Released by proxsync.")],
                "removing the marker",
            ),
            (vec![("delete", "description")], "removing the marker"),
            (vec![("tags", "web;db")], "removing the ownership tag"),
            (vec![("delete", "tags")], "removing the ownership tag"),
            (
                vec![("ide3", "local:iso/seed.iso,media=cdrom")],
                "attaching the image local:iso/seed.iso",
            ),
            (
                vec![("scsi0", "local-lvm:0,import-from=local:import/x.qcow2")],
                "attaching the image local:import/x.qcow2",
            ),
        ] {
            let why = check(100, &values, &[]).unwrap_err().to_string();
            assert!(
                why.contains(what) && why.contains("nothing was sent"),
                "{values:?}: {why}"
            );
        }
    }

    #[test]
    fn a_seed_attach_allows_only_its_slot_and_volume() {
        let seed = "local:iso/proxsync-main-web-seed.iso";
        let permit = || {
            Permit::new(
                "lab",
                100,
                Act::AttachSeed {
                    slot: "ide3".into(),
                    volume: seed.into(),
                },
            )
        };
        let cdrom = |v: &str| format!("{v},media=cdrom");
        assert_eq!(check(100, &[("ide3", &cdrom(seed))], &[&permit()]), Ok(()));
        for (slot, volume) in [("sata3", seed), ("ide3", "local:iso/other.iso")] {
            let why = check(100, &[(slot, &cdrom(volume))], &[&permit()])
                .unwrap_err()
                .to_string();
            assert!(
                why.contains(&format!("attaching the image {volume}")),
                "{why}"
            );
        }
    }

    #[test]
    fn a_permit_allows_only_its_act_on_its_vm() {
        let release = remove(&ours("web", 100), "web", true).unwrap();
        let delete = remove(&ours("web", 100), "web", false).unwrap();
        let release_write = [
            ("description", "notes\nReleased by proxsync."),
            ("delete", "tags"),
        ];
        assert_eq!(check(100, &release_write, &[&release]), Ok(()));
        // The same permit on another VM, or another act's permit: refused.
        let why = check(101, &release_write, &[&release])
            .unwrap_err()
            .to_string();
        assert!(why.contains("cannot be used on VM 101"), "{why}");
        assert!(check(100, &release_write, &[&delete]).is_err());
        // A release allows removing the marker and the tag, nothing else.
        let own = signed("main", "web", "u1", 100);
        for other in [
            vec![("delete", "scsi1")],
            vec![("description", own.as_str())],
            vec![("ide3", "local:iso/x.iso,media=cdrom")],
        ] {
            assert!(check(100, &other, &[&release]).is_err(), "{other:?}");
        }
        // A hand-over removes the tag, keeps (or signs) its own marker, not another.
        let hand = hand_over(&ours("web", 100), "web").unwrap();
        let own = signed("main", "web", "u1", 100);
        assert_eq!(
            check(100, &[("tags", "web"), ("description", &own)], &[&hand]),
            Ok(())
        );
        let other_uid = signed("main", "web", "u2", 100);
        let why = check(100, &[("description", &other_uid)], &[&hand])
            .unwrap_err()
            .to_string();
        assert!(why.contains("uid u2"), "{why}");
        assert!(check(100, &[("description", "no marker")], &[&hand]).is_err());
        // A re-signing permit writes the verified marker, never another spec's.
        let sign = sign(&ours("web", 100)).unwrap();
        let db = signed("main", "db", "u1", 100);
        assert!(check(100, &[("description", &db)], &[&sign]).is_err());
        assert!(check(100, &[("tags", "web")], &[&sign]).is_err());
    }

    #[test]
    fn the_calls_check_their_permit() {
        let delete = remove(&ours("web", 100), "web", false).unwrap();
        assert_eq!(check_delete_vm(100, &delete), Ok(()));
        assert!(
            check_delete_vm(101, &delete)
                .unwrap_err()
                .to_string()
                .contains("nothing was sent")
        );
        let release = remove(&ours("web", 100), "web", true).unwrap();
        assert!(check_delete_vm(100, &release).is_err());
        assert!(check_delete_volume("local:iso/x.iso", &delete).is_err());
        assert!(check_remove_affinity("proxsync-vm100", &delete).is_err());
    }
    const HEAD: &str = "proxsync-exercise: made by proxsync doctor --exercise";
    const NOW: u64 = 1_800_000_000;

    fn exercise_key() -> MarkerKey {
        MarkerKey::from_bytes([9; 32])
    }

    fn marks(key: &MarkerKey) -> ExerciseMarks<'_> {
        ExerciseMarks {
            pool: "proxsync-exercise",
            prefix: "proxsync-exercise-",
            marker: HEAD,
            key,
            now: NOW,
        }
    }

    fn vm_id() -> GuestId {
        GuestId::uuid("3f2504e0-4f89-11d3-9a0c-0305e82c3301").unwrap()
    }

    /// The description of guest `vmid` of run `0a1b` (begun `age` seconds ago), its line
    /// signed for `identity`.
    fn described(vmid: u32, identity: Option<&GuestId>, age: u64) -> String {
        let line = ExerciseLine::signed(
            &exercise_key(),
            "proxsync-exercise",
            ("0a1b", NOW - age),
            vmid,
            identity,
        );
        format!("notes\n{}\n", line.line(HEAD))
    }

    fn made<'a>(kind: GuestKind, description: &'a str, identity: &'a GuestId) -> Made<'a> {
        Made {
            vmid: 120,
            kind,
            pool: Some("proxsync-exercise"),
            name: Some("proxsync-exercise-vm"),
            description: Some(description),
            template: false,
            identity: Some(identity),
            tags: &[],
            ha: false,
        }
    }

    /// A delete for the other test modules (`pve::fake`): the exercise's evidence, complete.
    pub(crate) fn exercise_permit(site: &str, vmid: u32) -> Permit {
        let (key, id) = (exercise_key(), vm_id());
        let description = described(vmid, Some(&id), 0);
        let guest = Made {
            vmid,
            ..made(GuestKind::Qemu, &description, &id)
        };
        exercise_delete(site, marks(&key), guest).unwrap()
    }

    #[test]
    fn an_exercise_deletes_a_guest_with_its_pool_prefix_and_signed_line() {
        let (key, id) = (exercise_key(), vm_id());
        let description = described(120, Some(&id), 0);
        for kind in [GuestKind::Qemu, GuestKind::Lxc] {
            let permit =
                exercise_delete("lab", marks(&key), made(kind, &description, &id)).unwrap();
            assert_eq!((permit.site(), permit.vmid()), ("lab", 120));
            assert_eq!(permit.act(), &Act::DeleteVm);
            assert!(check_delete_vm(120, &permit).is_ok());
            assert!(check_delete_vm(121, &permit).is_err(), "that guest only");
        }
        let line = exercise_proof(marks(&key), made(GuestKind::Qemu, &description, &id)).unwrap();
        assert_eq!((line.run.as_str(), line.started), ("0a1b", NOW));
        assert_eq!(exercise_permit("lab", 7).vmid(), 7);
        // A clone's line (no identity yet): for a day after its run began.
        let pending = described(120, None, EXERCISE_PENDING_SECS - 1);
        assert!(exercise_delete("lab", marks(&key), made(GuestKind::Qemu, &pending, &id)).is_ok());
        let old = described(120, None, EXERCISE_PENDING_SECS);
        let err = exercise_delete("lab", marks(&key), made(GuestKind::Qemu, &old, &id))
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not verify"), "{err}");
    }

    #[test]
    fn an_exercise_refuses_a_guest_lacking_any_of_its_marks() {
        let (key, id) = (exercise_key(), vm_id());
        let other_id = GuestId::uuid("3f2504e0-4f89-11d3-9a0c-0305e82c3302").unwrap();
        let good = described(120, Some(&id), 0);
        let base = made(GuestKind::Lxc, &good, &id);
        let public = format!("notes\n{HEAD}\n");
        let forged = good.replace("mac=", "mac=0");
        let other_vmid = described(121, Some(&id), 0);
        let managed = format!("{good}proxsync-id: install=main spec=web uid=u1");
        let inside = format!("not {}", good.lines().nth(1).unwrap());
        let ours_tag = ["proxsync.main".to_string()];
        let refused = [
            ("no pool", Made { pool: None, ..base }),
            (
                "another pool",
                Made {
                    pool: Some("prod"),
                    ..base
                },
            ),
            (
                "a pool's look-alike",
                Made {
                    pool: Some("proxsync-exercise-2"),
                    ..base
                },
            ),
            ("no name", Made { name: None, ..base }),
            (
                "another name",
                Made {
                    name: Some("web-01"),
                    ..base
                },
            ),
            (
                "the prefix alone",
                Made {
                    name: Some("proxsync-exercise-"),
                    ..base
                },
            ),
            (
                "the prefix inside",
                Made {
                    name: Some("x-proxsync-exercise-vm"),
                    ..base
                },
            ),
            (
                "no description",
                Made {
                    description: None,
                    ..base
                },
            ),
            (
                "another description",
                Made {
                    description: Some("web server"),
                    ..base
                },
            ),
            (
                "the public sentence alone",
                Made {
                    description: Some(&public),
                    ..base
                },
            ),
            (
                "a forged signature",
                Made {
                    description: Some(&forged),
                    ..base
                },
            ),
            (
                "another VMID's line",
                Made {
                    description: Some(&other_vmid),
                    ..base
                },
            ),
            (
                "another guest at the VMID",
                Made {
                    identity: Some(&other_id),
                    ..base
                },
            ),
            (
                "no identity",
                Made {
                    identity: None,
                    ..base
                },
            ),
            (
                "the line inside another",
                Made {
                    description: Some(&inside),
                    ..base
                },
            ),
            (
                "a managed guest's line too",
                Made {
                    description: Some(&managed),
                    ..base
                },
            ),
            (
                "an ownership tag",
                Made {
                    tags: &ours_tag,
                    ..base
                },
            ),
            ("HA-managed", Made { ha: true, ..base }),
            (
                "a template",
                Made {
                    template: true,
                    ..base
                },
            ),
        ];
        for (why, guest) in refused {
            let err = exercise_delete("lab", marks(&key), guest)
                .expect_err(why)
                .to_string();
            assert!(err.contains("container 120"), "{why}: {err}");
        }
        let stranger = MarkerKey::from_bytes([1; 32]);
        assert!(
            exercise_delete("lab", marks(&stranger), base).is_err(),
            "another key"
        );
        for weak in [
            ExerciseMarks {
                pool: "",
                ..marks(&key)
            },
            ExerciseMarks {
                prefix: "",
                ..marks(&key)
            },
            ExerciseMarks {
                marker: " ",
                ..marks(&key)
            },
        ] {
            let guest = Made {
                pool: Some(weak.pool),
                ..base
            };
            assert!(exercise_delete("lab", weak, guest).is_err(), "{weak:?}");
        }
    }
}
