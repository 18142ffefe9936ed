//! Volumes: attaching a cloud-init seed, destroying a `destroyDisks` disk, removing drives of a
//! protected VM, and deleting a protected VM. Pure: callers hand in what the storage listing,
//! the VM's config and the spec's record say; each answer is what to do, or a refusal
//! ([`VolumeRefusal`]: what is wrong, as a value; its words, with what to do, are
//! `crate::words`').
//!
//! - A seed is attached only when the storage lists the file proxsync uploaded: the volume,
//!   its size and its ctime as listed right after the upload ([`seed_uploaded`]), the same at
//!   the attach ([`seed_on_storage`]). A file under a seed's name is anyone's who can upload
//!   to the storage; its ctime is set by the kernel, never by an uploader.
//! - A destroy is bound to the volume the slot held when it was first applied, happens once,
//!   and never touches a later volume in that slot ([`destroy`]).
//! - PVE refuses to remove any drive of a protected VM, and the VM itself ([`drive_removal`],
//!   [`vm_delete`]).
//!
//! - A seed image goes once no guest uses it ([`seed_unused`]): after its spec's guest was
//!   deleted, or (a sweep) once its spec is gone too; never while a guest's config names it.
//!
//! The permits of these acts ([`super::permit`]) are made here, on the VM's verified marker:
//! [`seed_attach`], [`seed_delete`], [`destroy_drive`], [`detach`] and
//! [`cloudinit_drive_removal`]; and on a checked site alone, for a seed no guest uses:
//! [`seed_unused`].

use super::identity::VerifiedMarker;
use super::permit::{Act, Permit, own};
use super::refusal::Refusal;
use super::site::SiteChecked;
use crate::guest::GuestKind;
use crate::model::{DestroyState, DiskDestroy, SeedUpload};
use crate::pve::types::StorageVolume;

// ---- refusals ----

/// What the gate refused of a volume or a drive: the guest it concerns and why, or the seed
/// image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeRefusal {
    /// The guest is not this install's to act on (its verified marker said otherwise).
    Guest(Refusal),
    /// An act on guest `vmid`'s drives, volumes or protection.
    Drive {
        /// What the VMID holds, for the words.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// Why.
        why: DriveRefused,
    },
    /// An act on the seed image `volid`.
    Seed {
        /// The seed volume.
        volid: String,
        /// Why.
        why: SeedRefused,
    },
    /// The file under a seed's name is not the one proxsync uploaded: uploaded (again) first.
    Untrusted(SeedDistrust),
    /// The delete of an image version `volid` no `ProxmoxImage` names.
    Image {
        /// The volume.
        volid: String,
        /// Why it is kept.
        why: ImageKept,
    },
}

/// Why a version of a `ProxmoxImage` no image names any more is kept ([`image_unused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageKept {
    /// This install did not record downloading it: another's, or a person's.
    NotRecorded,
    /// An image of the source names it (it is a current version).
    Current,
    /// Some spec file could not be read, or the source holds no spec and no image: nothing is
    /// judged unused on its strength.
    SourceIncomplete,
    /// An ISO: a guest may hold it in its CD-ROM drive, which only each guest's config says.
    Iso,
    /// Guest `vmid` of the site is being created or cloned (`lock`): an import may read it.
    Importing {
        /// The guest.
        vmid: u32,
    },
    /// Unused for less than the grace period: a revert of the push may want it back.
    Grace {
        /// When it may go (unix ms).
        until_ms: u64,
    },
}

/// What is known of an image version no `ProxmoxImage` may name: see [`image_unused`].
#[derive(Debug, Clone, Copy)]
pub struct ImageUnused<'a> {
    /// The volume (`local:import/noble-cloud-5f0c1a2b3c4d.qcow2`).
    pub volid: &'a str,
    /// This install's database recorded the download of this volume on this storage, durably,
    /// before it was asked for.
    pub recorded: bool,
    /// Some image of the source (valid, of any shard) names this volume.
    pub current: bool,
    /// Every spec file was read and the source holds a spec or an image.
    pub source_complete: bool,
    /// The guests of the site listed with a `create` or `clone` lock (an import-from may be
    /// reading a volume of the storage).
    pub importing: &'a [u32],
    /// Since when no image names it (unix ms), and the grace: kept until the sum.
    pub unused_since_ms: u64,
    /// The grace period in ms.
    pub grace_ms: u64,
    /// Now (unix ms).
    pub now_ms: u64,
}

/// The permit to delete an image version `volid` that no `ProxmoxImage` names any more, on a
/// checked site: this install recorded downloading it; no image of a completely read source
/// names it; not an ISO (a guest's CD-ROM may hold it); no guest of the site is being created
/// or cloned (an import may read it); unused for the grace period. A VM made from an `import`
/// volume holds a copy, so none refers to it once made. The permit names no VM (VMID 0).
pub fn image_unused(site: &SiteChecked, s: ImageUnused<'_>) -> Result<Permit, VolumeRefusal> {
    let kept = |why| {
        Err(VolumeRefusal::Image {
            volid: s.volid.to_string(),
            why,
        })
    };
    if !s.recorded {
        return kept(ImageKept::NotRecorded);
    }
    if s.current {
        return kept(ImageKept::Current);
    }
    if !s.source_complete {
        return kept(ImageKept::SourceIncomplete);
    }
    let content = s.volid.split_once(':').map(|(_, v)| v.split('/').next());
    if !matches!(content, Some(Some("import" | "vztmpl"))) {
        return kept(ImageKept::Iso);
    }
    if let Some(&vmid) = s.importing.first() {
        return kept(ImageKept::Importing { vmid });
    }
    let until_ms = s.unused_since_ms.saturating_add(s.grace_ms);
    if s.now_ms < until_ms {
        return kept(ImageKept::Grace { until_ms });
    }
    let act = Act::DeleteVolume {
        volume: s.volid.to_string(),
    };
    Ok(Permit::new(site.site(), 0, act))
}

impl From<Refusal> for VolumeRefusal {
    fn from(r: Refusal) -> Self {
        VolumeRefusal::Guest(r)
    }
}

impl From<VolumeRefusal> for String {
    fn from(r: VolumeRefusal) -> String {
        r.to_string()
    }
}

/// Why an act on a guest's drives, volumes or protection was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriveRefused {
    /// `destroyDisks` names a slot never destroyed: the boot disk, a CD-ROM or the cloud-init
    /// drive.
    Kept {
        /// The slot.
        slot: String,
        /// What it is.
        what: &'static str,
    },
    /// The guest is protected: PVE removes none of its drives.
    Protected {
        /// The guest's flag and the spec's hold on it.
        protection: Protection,
        /// The slots leaving `disks`.
        detach: Vec<String>,
        /// The slots of `destroyDisks`.
        destroy: Vec<String>,
    },
    /// The VM is protected: PVE's cloud-init drive cannot make way for the seed image.
    CloudInitDrive {
        /// The VM's flag and the spec's hold on it.
        protection: Protection,
        /// The cloud-init drive's slot.
        slot: String,
    },
    /// The slot holds no disk proxsync may destroy.
    NoDisk {
        /// The slot.
        slot: String,
    },
    /// The slot's destroy is not bound to the volume it holds.
    NotBound {
        /// The slot.
        slot: String,
        /// The volume it holds.
        volume: String,
    },
    /// An `unused` entry holds a volume no recorded destroy of the mount point is bound to (or
    /// the entry is no `unusedN`).
    UnusedNotBound {
        /// The mount point `destroyVolumes` names.
        slot: String,
        /// The entry.
        unused: String,
        /// The volume it holds.
        volume: String,
    },
    /// Protected by someone else than a spec of this install: not deleted.
    DeleteProtected,
}

/// Why an act on a seed image was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedRefused {
    /// Not a seed image of the spec (of the install).
    OtherSpec {
        /// The spec.
        spec: String,
        /// The install, when the words name it.
        install: Option<String>,
        /// What was refused.
        act: SeedAct,
    },
    /// The storage does not list it: uploaded first.
    NotOnStorage,
    /// The guest still names it.
    StillNamed {
        /// What the VMID holds.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// A guest of the site (of a kind not read) names it.
    NamedBy {
        /// The guest.
        vmid: u32,
    },
    /// A guest that may use the spec's seeds could not be read.
    Unread {
        /// The guest.
        vmid: u32,
        /// The spec.
        spec: String,
    },
    /// The spec (or its record) still exists: a sweep leaves its seeds to its converge.
    SpecExists {
        /// The spec.
        spec: String,
    },
    /// Not on its storage after its upload ended.
    MissingAfterUpload,
    /// Listed with another size than proxsync uploaded.
    SizeAfterUpload {
        /// The size listed.
        listed: Option<u64>,
        /// The size uploaded.
        uploaded: u64,
    },
    /// Listed without a ctime to recognise it by.
    NoCtime,
}

/// What was refused of a seed image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedAct {
    /// Attaching it.
    Attach,
    /// Deleting it.
    Delete,
}

// ---- seeds ----

/// What to do with the seed image a spec needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedCheck {
    /// The storage lists the file proxsync uploaded: attach it (or keep it attached).
    Attach,
    /// Upload it (again): PVE overwrites a file of that name. `found` says why a file of that
    /// name is not trusted (for the history and the log); `None`: there is none.
    Upload {
        /// Why the file of that name is not trusted; `None`: there is none.
        found: Option<SeedDistrust>,
    },
}

/// Why the file under a seed's name is not the one proxsync uploaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedDistrust {
    /// proxsync has no record of uploading it.
    Unrecorded {
        /// The seed volume.
        volid: String,
    },
    /// Listed otherwise than uploaded (or the record is of another volume): replaced since.
    Replaced {
        /// The seed volume.
        volid: String,
        /// Its size as listed.
        listed_size: Option<u64>,
        /// Its ctime as listed.
        listed_ctime: Option<u64>,
        /// The size proxsync uploaded.
        size: u64,
        /// The ctime listed right after the upload.
        ctime: u64,
    },
}

/// Whether the seed `volid` may be attached as the storage lists it (`listed`, from a listing
/// read now): only when proxsync recorded uploading it (`recorded`) and the listing shows the
/// same size and ctime.
pub fn seed_on_storage(
    volid: &str,
    listed: Option<&StorageVolume>,
    recorded: Option<&SeedUpload>,
) -> SeedCheck {
    let Some(listed) = listed else {
        return SeedCheck::Upload { found: None };
    };
    let volid = volid.to_string();
    let why = match recorded {
        None => SeedDistrust::Unrecorded { volid },
        Some(r)
            if listed.size == Some(r.size) && listed.ctime == Some(r.ctime) && r.volid == volid =>
        {
            return SeedCheck::Attach;
        }
        Some(r) => SeedDistrust::Replaced {
            volid,
            listed_size: listed.size,
            listed_ctime: listed.ctime,
            size: r.size,
            ctime: r.ctime,
        },
    };
    SeedCheck::Upload { found: Some(why) }
}

/// What to record of the seed `volid` just uploaded (`size` bytes), from the storage listing
/// read right after its upload task ended. A refusal (the file missing, of another size, or
/// listed without a ctime to recognise it by later) means: do not attach it.
pub fn seed_uploaded(
    volid: &str,
    size: u64,
    listed: Option<&StorageVolume>,
) -> Result<SeedUpload, VolumeRefusal> {
    let refused = |why| VolumeRefusal::Seed {
        volid: volid.to_string(),
        why,
    };
    let Some(listed) = listed else {
        return Err(refused(SeedRefused::MissingAfterUpload));
    };
    if listed.size != Some(size) {
        return Err(refused(SeedRefused::SizeAfterUpload {
            listed: listed.size,
            uploaded: size,
        }));
    }
    let Some(ctime) = listed.ctime else {
        return Err(refused(SeedRefused::NoCtime));
    };
    Ok(SeedUpload {
        volid: volid.to_string(),
        size,
        ctime,
    })
}

// ---- destroyDisks ----

/// What a `destroyDisks` slot of the VM holds now (a removal PVE keeps pending counts as
/// gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotHolds<'a> {
    /// No drive.
    Nothing,
    /// A disk that is not the boot disk: its volume.
    Disk(&'a str),
    /// Never destroyed: the boot disk, a CD-ROM or the cloud-init drive (what it is).
    Kept(&'static str),
}

/// The decision for one `destroyDisks` slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestroyStep {
    /// What the record keeps for the slot from now on; with `destroy`, written before the
    /// destroy is sent (state `Bound`).
    pub binding: DiskDestroy,
    /// Destroy this volume (the one `binding` is bound to).
    pub destroy: Option<String>,
    /// A fact for the spec's history (and a warning in the log), said once.
    pub note: Option<DestroyNote>,
}

/// A fact about a `destroyDisks` slot worth a line in the spec's history: what is not
/// destroyed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestroyNote {
    /// What the VMID holds, for the words.
    pub kind: GuestKind,
    /// The guest.
    pub vmid: u32,
    /// The slot.
    pub slot: String,
    /// What happened to it.
    pub noted: DestroyNoted,
}

/// What a [`DestroyNote`] says of its slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestroyNoted {
    /// Listed before the record followed the guest: the volume in it is not destroyed.
    Unfollowed {
        /// The volume in the slot.
        volume: String,
    },
    /// The bound volume is gone from the slot after the destroy was sent.
    Detached {
        /// The volume the destroy was bound to.
        bound: String,
    },
    /// The slot holds another volume than the one its destroy was bound to: kept.
    Replaced {
        /// The volume the destroy was bound to.
        bound: String,
        /// The volume in the slot now.
        now: String,
    },
    /// The destroy is done: a later volume in the slot is kept.
    Done {
        /// The volume it destroyed; `None`: the slot was empty when first applied.
        destroyed: Option<String>,
        /// The volume in the slot now.
        now: String,
    },
    /// The destroy is bound to nothing: a later volume in the slot is not destroyed.
    Unbound {
        /// The volume in the slot now.
        now: String,
    },
}

/// The decision for `slot` of `destroyDisks` (a container's `destroyVolumes`) on guest `vmid`
/// (a `kind`, which only words the messages): destroy its volume only when the
/// destroy is bound to it, that is when the slot held it as the destroy was first applied
/// (`binding` `None` while `followed`: the record has followed the VM since before the slot was
/// listed), and only until it is done. A slot listed before the record followed the VM (an
/// adoption, a rebuilt database, an older release) is bound to nothing: what the spec's author
/// meant is unknown, and a destroy cannot be undone, so nothing in it is destroyed.
// Long because: one decision over every state a slot's binding and contents can be in; each
// arm says its case.
pub fn destroy(
    kind: GuestKind,
    vmid: u32,
    slot: &str,
    holds: SlotHolds<'_>,
    binding: Option<&DiskDestroy>,
    followed: bool,
    now_ms: u64,
) -> Result<DestroyStep, VolumeRefusal> {
    let current = match holds {
        SlotHolds::Kept(what) => {
            let slot = slot.to_string();
            let why = DriveRefused::Kept { slot, what };
            return Err(VolumeRefusal::Drive { kind, vmid, why });
        }
        SlotHolds::Nothing => None,
        SlotHolds::Disk(v) => Some(v.to_string()),
    };
    let entry =
        |volume: Option<String>, state: DestroyState, reported: Option<String>| DiskDestroy {
            slot: slot.to_string(),
            volume,
            state,
            at_ms: now_ms,
            reported,
        };
    let noted = |noted| DestroyNote {
        kind,
        vmid,
        slot: slot.to_string(),
        noted,
    };
    let step = |binding: DiskDestroy, destroy: Option<String>, note: Option<DestroyNoted>| {
        Ok(DestroyStep {
            binding,
            destroy,
            note: note.map(noted),
        })
    };
    let Some(b) = binding else {
        if !followed {
            let note = current
                .clone()
                .map(|volume| DestroyNoted::Unfollowed { volume });
            return step(
                entry(current.clone(), DestroyState::Unbound, current),
                None,
                note,
            );
        }
        // First applied now: bound to what the slot holds.
        return match current {
            Some(v) => step(
                entry(Some(v.clone()), DestroyState::Bound, None),
                Some(v),
                None,
            ),
            None => step(entry(None, DestroyState::Destroyed, None), None, None),
        };
    };
    let unchanged = |note: Option<DestroyNoted>, reported: Option<String>| {
        step(
            DiskDestroy {
                reported,
                ..b.clone()
            },
            None,
            note,
        )
    };
    match (b.state, current) {
        (DestroyState::Destroyed | DestroyState::Unbound, None) => {
            unchanged(None, b.reported.clone())
        }
        // Bound and still there: the destroy was not carried out yet (refused, or a crash
        // before it left).
        (DestroyState::Bound, Some(v)) if b.volume.as_deref() == Some(v.as_str()) => {
            step(b.clone(), Some(v), None)
        }
        (DestroyState::Bound, current) => {
            let bound = b.volume.clone().unwrap_or_default();
            let note = match &current {
                None => DestroyNoted::Detached { bound },
                Some(w) => DestroyNoted::Replaced {
                    bound,
                    now: w.clone(),
                },
            };
            step(
                entry(b.volume.clone(), DestroyState::Destroyed, current),
                None,
                Some(note),
            )
        }
        (_, Some(w)) if b.reported.as_deref() == Some(w.as_str()) => {
            unchanged(None, b.reported.clone())
        }
        (DestroyState::Destroyed, Some(w)) => {
            let note = DestroyNoted::Done {
                destroyed: b.volume.clone(),
                now: w.clone(),
            };
            unchanged(Some(note), Some(w))
        }
        (DestroyState::Unbound, Some(w)) => {
            unchanged(Some(DestroyNoted::Unbound { now: w.clone() }), Some(w))
        }
    }
}

// ---- protection ----

/// The VM's `protection` flag and the spec's hold on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protection {
    /// Set on the VM (after this converge's config update, for a spec that declares it).
    pub on: bool,
    /// The spec's `protection` (for a removed spec: as last applied); `None`: not managed.
    pub managed: Option<bool>,
}

/// Whether drives may be removed from guest `vmid`, a `kind` (`detach`: slots leaving `disks`; `destroy`:
/// slots of `destroyDisks`): PVE refuses removing any drive of a protected VM, and fails the
/// whole update with it (qemu-server `PVE/API2/Qemu.pm` `update_vm_api`, the `delete` loop's
/// `check_protection`), so they must not be sent with anything else.
pub fn drive_removal(
    kind: GuestKind,
    vmid: u32,
    protection: Protection,
    detach: &[String],
    destroy: &[String],
) -> Result<(), VolumeRefusal> {
    if !protection.on || (detach.is_empty() && destroy.is_empty()) {
        return Ok(());
    }
    let why = DriveRefused::Protected {
        protection,
        detach: detach.to_vec(),
        destroy: destroy.to_vec(),
    };
    Err(VolumeRefusal::Drive { kind, vmid, why })
}

/// Whether PVE's cloud-init drive in `slot` may be removed from VM `vm` to make way for
/// proxsync's seed image (two `cidata` volumes would leave cloud-init to pick either): not on
/// a protected VM, where PVE refuses it ([`drive_removal`]); nothing of `userData` is applied
/// then. The permit detaches that slot.
pub fn cloudinit_drive_removal(
    vm: &VerifiedMarker,
    protection: Protection,
    slot: &str,
) -> Result<Permit, VolumeRefusal> {
    own(vm)?;
    let vmid = vm.vmid();
    let slot = slot.to_string();
    if !protection.on {
        let slots = vec![slot];
        return Ok(Permit::new(vm.site(), vmid, Act::Detach { slots }));
    }
    let why = DriveRefused::CloudInitDrive { protection, slot };
    Err(VolumeRefusal::Drive {
        kind: vm.kind(),
        vmid,
        why,
    })
}

/// The permit to detach `slots` (disks leaving `disks`) from VM `vm`: PVE keeps their volumes
/// as `unusedN`. Not on a protected VM ([`drive_removal`]).
pub fn detach(
    vm: &VerifiedMarker,
    protection: Protection,
    slots: &[String],
) -> Result<Permit, VolumeRefusal> {
    own(vm)?;
    drive_removal(vm.kind(), vm.vmid(), protection, slots, &[])?;
    let slots = slots.to_vec();
    Ok(Permit::new(vm.site(), vm.vmid(), Act::Detach { slots }))
}

/// The permit to destroy the disk in `slot` of VM `vm` (`destroyDisks`): only the volume its
/// destroy is bound to (`binding`, recorded before the request by [`destroy`]), while the slot
/// holds that volume and the destroy is not done; never the boot disk, a CD-ROM or the
/// cloud-init drive; not on a protected VM.
pub fn destroy_drive(
    vm: &VerifiedMarker,
    slot: &str,
    holds: SlotHolds<'_>,
    binding: Option<&DiskDestroy>,
    protection: Protection,
) -> Result<Permit, VolumeRefusal> {
    own(vm)?;
    let (kind, vmid) = (vm.kind(), vm.vmid());
    let SlotHolds::Disk(volume) = holds else {
        let why = DriveRefused::NoDisk {
            slot: slot.to_string(),
        };
        return Err(VolumeRefusal::Drive { kind, vmid, why });
    };
    let bound = binding.is_some_and(|b| {
        b.slot == slot && b.state == DestroyState::Bound && b.volume.as_deref() == Some(volume)
    });
    if !bound {
        let why = DriveRefused::NotBound {
            slot: slot.to_string(),
            volume: volume.to_string(),
        };
        return Err(VolumeRefusal::Drive { kind, vmid, why });
    }
    drive_removal(kind, vmid, protection, &[], &[slot.to_string()])?;
    let act = Act::Destroy {
        slot: slot.to_string(),
        volume: volume.to_string(),
    };
    Ok(Permit::new(vm.site(), vmid, act))
}

/// The permit to destroy a container's volume that `destroyVolumes` names by its mount point
/// `slot`, once detached to `unused` (pve-container frees a volume when its `unusedN` entry
/// is deleted; a mount point cannot be destroyed in place): only the volume the slot's
/// destroy is bound to ([`destroy`], recorded before the detach), found in `unused` now; not
/// on a protected container.
pub fn destroy_unused(
    vm: &VerifiedMarker,
    slot: &str,
    unused: &str,
    holds: &str,
    binding: Option<&DiskDestroy>,
    protection: Protection,
) -> Result<Permit, VolumeRefusal> {
    own(vm)?;
    let (kind, vmid) = (vm.kind(), vm.vmid());
    let bound = binding.is_some_and(|b| {
        b.slot == slot && b.state == DestroyState::Bound && b.volume.as_deref() == Some(holds)
    });
    if !bound || !unused.starts_with("unused") {
        let why = DriveRefused::UnusedNotBound {
            slot: slot.to_string(),
            unused: unused.to_string(),
            volume: holds.to_string(),
        };
        return Err(VolumeRefusal::Drive { kind, vmid, why });
    }
    drive_removal(kind, vmid, protection, &[], &[slot.to_string()])?;
    let act = Act::Destroy {
        slot: unused.to_string(),
        volume: holds.to_string(),
    };
    Ok(Permit::new(vm.site(), vmid, act))
}

/// The permit to attach the seed image `volid` to VM `vm` in `slot`: a seed of the VM's install
/// and spec ([`crate::cloudinit::is_seed_of`]), listed by the storage as proxsync uploaded it
/// ([`seed_on_storage`]). `Err`: upload it (again) first.
pub fn seed_attach(
    vm: &VerifiedMarker,
    slot: &str,
    volid: &str,
    listed: Option<&StorageVolume>,
    recorded: Option<&SeedUpload>,
) -> Result<Permit, VolumeRefusal> {
    own(vm)?;
    let refused = |why| VolumeRefusal::Seed {
        volid: volid.to_string(),
        why,
    };
    if !crate::cloudinit::is_seed_of(volid, vm.install(), vm.spec()) {
        return Err(refused(SeedRefused::OtherSpec {
            spec: vm.spec().to_string(),
            install: Some(vm.install().to_string()),
            act: SeedAct::Attach,
        }));
    }
    match seed_on_storage(volid, listed, recorded) {
        SeedCheck::Attach => {
            let act = Act::AttachSeed {
                slot: slot.to_string(),
                volume: volid.to_string(),
            };
            Ok(Permit::new(vm.site(), vm.vmid(), act))
        }
        SeedCheck::Upload { found: Some(why) } => Err(VolumeRefusal::Untrusted(why)),
        SeedCheck::Upload { found: None } => Err(refused(SeedRefused::NotOnStorage)),
    }
}

/// The permit to delete the seed image `volid` of VM `vm`'s spec, which the VM no longer names
/// (`in_use`: the seed images it names now or at its next start). Only the images of the VM's
/// install and spec: no other VM uses them.
pub fn seed_delete(
    vm: &VerifiedMarker,
    volid: &str,
    in_use: &[String],
) -> Result<Permit, VolumeRefusal> {
    own(vm)?;
    let refused = |why| VolumeRefusal::Seed {
        volid: volid.to_string(),
        why,
    };
    if !crate::cloudinit::is_seed_of(volid, vm.install(), vm.spec()) {
        return Err(refused(SeedRefused::OtherSpec {
            spec: vm.spec().to_string(),
            install: None,
            act: SeedAct::Delete,
        }));
    }
    if in_use.iter().any(|v| v == volid) {
        return Err(refused(SeedRefused::StillNamed {
            kind: vm.kind(),
            vmid: vm.vmid(),
        }));
    }
    let act = Act::DeleteVolume {
        volume: volid.to_string(),
    };
    Ok(Permit::new(vm.site(), vm.vmid(), act))
}

/// What is known of a seed image whose spec's guest is gone, or that no guest is known to use:
/// see [`seed_unused`].
#[derive(Debug, Clone, Copy)]
pub struct SeedUnused<'a> {
    /// The seed volume (`local:iso/proxsync.<install>.<spec>.<hash>.iso`).
    pub volid: &'a str,
    /// This install.
    pub install: &'a str,
    /// The spec whose seeds may go: the deleted guest's, or (a sweep) the volume's own.
    pub spec: &'a str,
    /// The guests of the site whose config, read now (its pending values too), names the volume.
    pub named_by: &'a [u32],
    /// The guests of the site that may use the spec's seeds (their marker, of any install, names
    /// the spec; or it cannot be read; or a create of this install's token is making them) and
    /// whose config could not be read now.
    pub unread: &'a [u32],
    /// The deleted guest (its delete task ended, or PVE says its VMID is free); `None` for a
    /// sweep, which also needs `spec_gone`.
    pub gone: Option<u32>,
    /// For a sweep: no spec of the source (valid or not, of any shard) and no record has the
    /// seed's spec's name, so no guest of this install is its any more.
    pub spec_gone: bool,
}

/// The permit to delete seed image `volid` once no guest uses it, on a checked site: a seed of
/// this install and of `spec` (by its name, which only proxsync writes), named by no guest's
/// config read now and with no guest that may use the spec's seeds left unread; and either the
/// spec's guest is gone (its delete ended: `gone`), or, for a sweep, the spec is gone too. The
/// permit names no VM when it is a sweep's (VMID 0: PVE's VMIDs start at 100). The seed holds
/// the guest's user data (with SOPS, the decrypted secret): it goes with the guest.
pub fn seed_unused(site: &SiteChecked, s: SeedUnused<'_>) -> Result<Permit, VolumeRefusal> {
    let refused = |why| VolumeRefusal::Seed {
        volid: s.volid.to_string(),
        why,
    };
    match crate::cloudinit::parse_seed_file_name(s.volid) {
        Some((install, spec, _)) if install == s.install && spec == s.spec => {}
        _ => {
            return Err(refused(SeedRefused::OtherSpec {
                spec: s.spec.to_string(),
                install: Some(s.install.to_string()),
                act: SeedAct::Delete,
            }));
        }
    }
    if let Some(&vmid) = s.named_by.first() {
        return Err(refused(SeedRefused::NamedBy { vmid }));
    }
    if let Some(&vmid) = s.unread.first() {
        let spec = s.spec.to_string();
        return Err(refused(SeedRefused::Unread { vmid, spec }));
    }
    if s.gone.is_none() && !s.spec_gone {
        let spec = s.spec.to_string();
        return Err(refused(SeedRefused::SpecExists { spec }));
    }
    let act = Act::DeleteVolume {
        volume: s.volid.to_string(),
    };
    Ok(Permit::new(site.site(), s.gone.unwrap_or(0), act))
}

/// What a delete of a guest does about its `protection` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteProtection {
    /// Not protected: delete it.
    Unprotected,
    /// Protected by the removed spec's own `protection`: clear the flag (an update of its
    /// own, before the VM is powered off), then delete it.
    Clear,
}

/// Whether the removed spec's VM `vmid` may be deleted as far as `protection` goes: PVE
/// refuses to delete a protected VM (qemu-server `PVE/API2/Qemu.pm` `destroy_vm`:
/// `can't remove VM N - protection mode enabled`). The flag is cleared only when the spec
/// managed it; one set by someone else stops the delete before the VM is powered off. `kind`
/// (a VM or a container) only words the refusal.
pub fn vm_delete(
    kind: GuestKind,
    vmid: u32,
    protection: Protection,
) -> Result<DeleteProtection, VolumeRefusal> {
    match protection {
        Protection { on: false, .. } => Ok(DeleteProtection::Unprotected),
        Protection {
            managed: Some(_), ..
        } => Ok(DeleteProtection::Clear),
        Protection { managed: None, .. } => Err(VolumeRefusal::Drive {
            kind,
            vmid,
            why: DriveRefused::DeleteProtected,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(volid: &str, size: Option<u64>, ctime: Option<u64>) -> StorageVolume {
        StorageVolume {
            volid: volid.into(),
            content: Some("iso".into()),
            format: Some("iso".into()),
            size,
            vmid: None,
            ctime,
        }
    }

    const SEED: &str = "local:iso/proxsync.main.web-01.0123456789ab.iso";

    fn uploaded() -> SeedUpload {
        SeedUpload {
            volid: SEED.into(),
            size: 51200,
            ctime: 1_700_000_000,
        }
    }

    #[test]
    fn an_image_version_goes_only_when_recorded_unused_complete_idle_and_past_grace() {
        let site = crate::gate::site::tests::checked("lab");
        let old = ImageUnused {
            volid: "local:import/noble-cloud-111111111111.qcow2",
            recorded: true,
            current: false,
            source_complete: true,
            importing: &[],
            unused_since_ms: 1_000,
            grace_ms: 600_000,
            now_ms: 601_000,
        };
        let permit = image_unused(&site, old).expect("unused past its grace");
        assert_eq!((permit.site(), permit.vmid()), ("lab", 0));
        assert!(matches!(permit.act(), Act::DeleteVolume { volume } if volume == old.volid));
        let why = |s: ImageUnused<'_>| match image_unused(&site, s) {
            Err(VolumeRefusal::Image { why, .. }) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            why(ImageUnused {
                recorded: false,
                ..old
            }),
            ImageKept::NotRecorded
        );
        assert_eq!(
            why(ImageUnused {
                current: true,
                ..old
            }),
            ImageKept::Current
        );
        assert_eq!(
            why(ImageUnused {
                source_complete: false,
                ..old
            }),
            ImageKept::SourceIncomplete
        );
        let iso = "local:iso/debian-111111111111.iso";
        assert_eq!(why(ImageUnused { volid: iso, ..old }), ImageKept::Iso);
        assert_eq!(
            why(ImageUnused {
                importing: &[104],
                ..old
            }),
            ImageKept::Importing { vmid: 104 }
        );
        assert_eq!(
            why(ImageUnused {
                now_ms: 600_999,
                ..old
            }),
            ImageKept::Grace { until_ms: 601_000 }
        );
        let ct = "local:vztmpl/debian-111111111111.tar.zst";
        assert!(image_unused(&site, ImageUnused { volid: ct, ..old }).is_ok());
    }

    #[test]
    fn a_seed_goes_only_once_no_guest_uses_it() {
        let site = crate::gate::site::tests::checked("lab");
        let gone = SeedUnused {
            volid: SEED,
            install: "main",
            spec: "web-01",
            named_by: &[],
            unread: &[],
            gone: Some(105),
            spec_gone: false,
        };
        let permit = seed_unused(&site, gone).expect("the deleted guest's seed");
        assert_eq!((permit.site(), permit.vmid()), ("lab", 105));
        assert!(matches!(permit.act(), Act::DeleteVolume { volume } if volume == SEED));
        // A sweep: only once the spec is gone too.
        let swept = SeedUnused { gone: None, ..gone };
        assert!(
            seed_unused(&site, swept)
                .unwrap_err()
                .to_string()
                .contains("still exists")
        );
        let permit = seed_unused(
            &site,
            SeedUnused {
                spec_gone: true,
                ..swept
            },
        )
        .expect("a gone spec's seed");
        assert_eq!(permit.vmid(), 0);
        // Another guest names it (a copy of the VM keeps its CD-ROM), or may and cannot be read.
        let named = SeedUnused {
            named_by: &[201],
            ..gone
        };
        assert!(
            seed_unused(&site, named)
                .unwrap_err()
                .to_string()
                .contains("guest 201 names")
        );
        let unread = SeedUnused {
            unread: &[201],
            ..gone
        };
        assert!(
            seed_unused(&site, unread)
                .unwrap_err()
                .to_string()
                .contains("could not be read")
        );
        // Only this install's seeds of that spec: another install's, another spec's, any file.
        for volid in [
            "local:iso/proxsync.other.web-01.0123456789ab.iso",
            "local:iso/proxsync.main.web-02.0123456789ab.iso",
            "local:iso/debian-12.iso",
        ] {
            assert!(
                seed_unused(&site, SeedUnused { volid, ..gone }).is_err(),
                "{volid}"
            );
        }
    }

    #[test]
    fn a_seed_is_attached_only_as_the_file_proxsync_uploaded() {
        let ours = listed(SEED, Some(51200), Some(1_700_000_000));
        assert_eq!(
            seed_on_storage(SEED, Some(&ours), Some(&uploaded())),
            SeedCheck::Attach
        );
        // Not on the storage: an upload, nothing to report.
        assert_eq!(
            seed_on_storage(SEED, None, Some(&uploaded())),
            SeedCheck::Upload { found: None }
        );
        // On the storage, but no upload recorded: someone's file under the seed's name.
        let SeedCheck::Upload { found: Some(why) } = seed_on_storage(SEED, Some(&ours), None)
        else {
            panic!("not attached");
        };
        let why = why.to_string();
        assert!(why.contains("not the file proxsync uploaded") && why.contains(SEED));
        // The same size, a later ctime (planted after the seed was deleted): uploaded again.
        let planted = listed(SEED, Some(51200), Some(1_700_003_600));
        let SeedCheck::Upload { found: Some(why) } =
            seed_on_storage(SEED, Some(&planted), Some(&uploaded()))
        else {
            panic!("not attached");
        };
        let why = why.to_string();
        assert!(why.contains("1700003600") && why.contains("never attaching"));
        // Another size, or no ctime to compare: not the file either.
        for other in [
            listed(SEED, Some(51201), Some(1_700_000_000)),
            listed(SEED, Some(51200), None),
            listed(SEED, None, Some(1_700_000_000)),
        ] {
            assert!(matches!(
                seed_on_storage(SEED, Some(&other), Some(&uploaded())),
                SeedCheck::Upload { found: Some(_) }
            ));
        }
        // A record of another volume proves nothing about this one.
        let elsewhere = SeedUpload {
            volid: "other:iso/proxsync.main.web-01.0123456789ab.iso".into(),
            ..uploaded()
        };
        assert!(matches!(
            seed_on_storage(SEED, Some(&ours), Some(&elsewhere)),
            SeedCheck::Upload { found: Some(_) }
        ));
    }

    #[test]
    fn an_upload_is_recorded_from_the_listing_only_as_uploaded() {
        let ours = listed(SEED, Some(51200), Some(1_700_000_000));
        assert_eq!(seed_uploaded(SEED, 51200, Some(&ours)), Ok(uploaded()));
        let err = seed_uploaded(SEED, 51200, None).unwrap_err().to_string();
        assert!(err.contains("not attaching"), "{err}");
        let err = seed_uploaded(SEED, 51200, Some(&listed(SEED, Some(9), Some(1))))
            .unwrap_err()
            .to_string();
        assert!(err.contains("9 bytes") && err.contains("51200"), "{err}");
        let err = seed_uploaded(SEED, 51200, Some(&listed(SEED, Some(51200), None)))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ctime") && err.contains("seedStorage"),
            "{err}"
        );
    }

    fn bound(state: DestroyState, volume: Option<&str>, reported: Option<&str>) -> DiskDestroy {
        DiskDestroy {
            slot: "scsi1".into(),
            volume: volume.map(str::to_string),
            state,
            at_ms: 5,
            reported: reported.map(str::to_string),
        }
    }

    const V: &str = "data:100/vm-100-disk-1.raw";
    const W: &str = "data:100/vm-100-disk-2.raw";

    #[test]
    fn a_destroy_first_applied_is_bound_to_what_the_slot_holds() {
        let s = destroy(
            GuestKind::Qemu,
            100,
            "scsi1",
            SlotHolds::Disk(V),
            None,
            true,
            9,
        )
        .unwrap();
        assert_eq!(s.destroy.as_deref(), Some(V));
        assert_eq!(s.binding.state, DestroyState::Bound);
        assert_eq!(s.binding.volume.as_deref(), Some(V));
        assert_eq!(s.binding.at_ms, 9);
        assert!(s.note.is_none());
        // An empty slot: bound to nothing, done; a disk put there later is never destroyed.
        let s = destroy(
            GuestKind::Qemu,
            100,
            "scsi1",
            SlotHolds::Nothing,
            None,
            true,
            9,
        )
        .unwrap();
        assert_eq!(s.destroy, None);
        assert_eq!(s.binding.state, DestroyState::Destroyed);
        let later = destroy(
            GuestKind::Qemu,
            100,
            "scsi1",
            SlotHolds::Disk(W),
            Some(&s.binding),
            true,
            10,
        )
        .unwrap();
        assert_eq!(later.destroy, None);
        let note = later.note.unwrap().to_string();
        assert!(note.contains("was empty") && note.contains(W), "{note}");
    }

    #[test]
    fn a_bound_destroy_is_sent_until_its_volume_is_gone_and_then_never() {
        let b = bound(DestroyState::Bound, Some(V), None);
        // Still there (refused, or a crash before the request left): sent again.
        let s = destroy(
            GuestKind::Qemu,
            100,
            "scsi1",
            SlotHolds::Disk(V),
            Some(&b),
            true,
            9,
        )
        .unwrap();
        assert_eq!(s.destroy.as_deref(), Some(V));
        assert_eq!(s.binding, b);
        // Gone (a crash between the destroy and the record): done, and said so.
        let s = destroy(
            GuestKind::Qemu,
            100,
            "scsi1",
            SlotHolds::Nothing,
            Some(&b),
            true,
            9,
        )
        .unwrap();
        assert_eq!(s.destroy, None);
        assert_eq!(s.binding.state, DestroyState::Destroyed);
        assert!(s.note.unwrap().to_string().contains("no longer attached"));
        // Another volume there now: done, and that one is kept.
        let s = destroy(
            GuestKind::Qemu,
            100,
            "scsi1",
            SlotHolds::Disk(W),
            Some(&b),
            true,
            9,
        )
        .unwrap();
        assert_eq!(s.destroy, None);
        assert_eq!(s.binding.state, DestroyState::Destroyed);
        assert_eq!(s.binding.reported.as_deref(), Some(W));
        assert!(
            s.note
                .unwrap()
                .to_string()
                .contains("destroyDisks no longer applies")
        );
    }

    #[test]
    fn a_done_destroy_never_touches_a_later_volume_and_says_so_once() {
        let done = bound(DestroyState::Destroyed, Some(V), None);
        // The same volume id again (PVE re-uses vm-N-disk-M): still another disk.
        for now in [V, W] {
            let s = destroy(
                GuestKind::Qemu,
                100,
                "scsi1",
                SlotHolds::Disk(now),
                Some(&done),
                true,
                9,
            )
            .unwrap();
            assert_eq!(s.destroy, None);
            let note = s.note.unwrap().to_string();
            assert!(
                note.contains("destroyDisks no longer applies to scsi1")
                    && note.contains(now)
                    && note.contains("qm set 100 --delete scsi1 --force 1")
                    && note.contains("list scsi1 in disks"),
                "{note}"
            );
            assert_eq!(s.binding.state, DestroyState::Destroyed);
            // Reported once.
            let again = destroy(
                GuestKind::Qemu,
                100,
                "scsi1",
                SlotHolds::Disk(now),
                Some(&s.binding),
                true,
                10,
            );
            assert_eq!(again.unwrap().note, None);
        }
        let s = destroy(
            GuestKind::Qemu,
            100,
            "scsi1",
            SlotHolds::Nothing,
            Some(&done),
            true,
            9,
        )
        .unwrap();
        assert_eq!((s.destroy, s.note), (None, None));
    }

    #[test]
    fn without_a_record_following_the_vm_nothing_is_destroyed() {
        let s = destroy(
            GuestKind::Qemu,
            100,
            "scsi1",
            SlotHolds::Disk(V),
            None,
            false,
            9,
        )
        .unwrap();
        assert_eq!(s.destroy, None);
        assert_eq!(s.binding.state, DestroyState::Unbound);
        let note = s.note.unwrap().to_string();
        assert!(note.contains("no record of the volume") && note.contains(V));
        // Said once; a disk put there later is not destroyed either.
        let again = destroy(
            GuestKind::Qemu,
            100,
            "scsi1",
            SlotHolds::Disk(V),
            Some(&s.binding),
            true,
            10,
        )
        .unwrap();
        assert_eq!((again.destroy, again.note), (None, None));
        let later = destroy(
            GuestKind::Qemu,
            100,
            "scsi1",
            SlotHolds::Disk(W),
            Some(&s.binding),
            true,
            10,
        )
        .unwrap();
        assert_eq!(later.destroy, None);
        assert!(later.note.unwrap().to_string().contains(W));
        // Empty then: nothing to say.
        let s = destroy(
            GuestKind::Qemu,
            100,
            "scsi1",
            SlotHolds::Nothing,
            None,
            false,
            9,
        )
        .unwrap();
        assert_eq!((s.destroy, s.note), (None, None));
        assert_eq!(s.binding.state, DestroyState::Unbound);
    }

    #[test]
    fn the_boot_disk_a_cdrom_or_the_cloud_init_drive_is_refused() {
        for followed in [true, false] {
            let err = destroy(
                GuestKind::Qemu,
                100,
                "scsi0",
                SlotHolds::Kept("boot disk"),
                None,
                followed,
                9,
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("boot disk: refused"), "{err}");
        }
    }

    #[test]
    fn drives_of_a_protected_vm_are_not_removed() {
        let slots = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let off = Protection {
            on: false,
            managed: None,
        };
        assert!(
            drive_removal(
                GuestKind::Qemu,
                100,
                off,
                &slots(&["scsi1"]),
                &slots(&["scsi2"])
            )
            .is_ok()
        );
        let by_spec = Protection {
            on: true,
            managed: Some(true),
        };
        assert!(drive_removal(GuestKind::Qemu, 100, by_spec, &[], &[]).is_ok());
        let err = drive_removal(
            GuestKind::Qemu,
            100,
            by_spec,
            &slots(&["scsi1"]),
            &slots(&["scsi2"]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("scsi1 (to detach)")
                && err.contains("scsi2 (to destroy)")
                && err.contains("protection: false in the spec (proxsync clears the flag first)")
                && !err.contains("qm set"),
            "the spec manages the flag: the fix is in the spec: {err}"
        );
        let by_hand = Protection {
            on: true,
            managed: None,
        };
        let err = drive_removal(GuestKind::Qemu, 100, by_hand, &slots(&["scsi1"]), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("qm set 100 --protection 0"), "{err}");
    }

    #[test]
    fn the_cloud_init_drive_of_a_protected_vm_stays() {
        let p = |on, managed| Protection { on, managed };
        let vm = ours("web-01", 7);
        let permit = cloudinit_drive_removal(&vm, p(false, Some(false)), "ide0").unwrap();
        assert_eq!(
            permit.act(),
            &Act::Detach {
                slots: vec!["ide0".into()]
            }
        );
        let err = cloudinit_drive_removal(&vm, p(true, Some(true)), "ide0")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ide0") && err.contains("protection: false"),
            "{err}"
        );
        let err = cloudinit_drive_removal(&vm, p(true, None), "ide0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("qm set 7 --protection 0"), "{err}");
    }

    /// The VM `vmid` of spec `spec`, its signed marker verified on site lab.
    fn ours(spec: &str, vmid: u32) -> VerifiedMarker {
        guest(GuestKind::Qemu, spec, vmid)
    }

    /// The guest `vmid` (a `kind`) of spec `spec`, its signed marker verified on site lab.
    fn guest(kind: GuestKind, spec: &str, vmid: u32) -> VerifiedMarker {
        let key = crate::gate::identity::tests::key();
        let d = crate::ownership::Marker::signed(&key, "main", spec, "u1", vmid).description();
        let site = crate::gate::site::tests::checked("lab");
        crate::gate::identity::verify(&site, &key, "main", kind, vmid, Some(&d), None, None)
            .unwrap()
    }

    const OFF: Protection = Protection {
        on: false,
        managed: None,
    };

    #[test]
    fn a_seed_is_attached_by_permit_only_as_uploaded_and_only_the_specs() {
        let vm = ours("web-01", 100);
        let ours_listed = listed(SEED, Some(51200), Some(1_700_000_000));
        let p = seed_attach(&vm, "ide3", SEED, Some(&ours_listed), Some(&uploaded())).unwrap();
        assert_eq!(
            p.act(),
            &Act::AttachSeed {
                slot: "ide3".into(),
                volume: SEED.into()
            }
        );
        // A file planted under the seed's name (no upload recorded, or a later ctime).
        let why = seed_attach(&vm, "ide3", SEED, Some(&ours_listed), None)
            .unwrap_err()
            .to_string();
        assert!(why.contains("not the file proxsync uploaded"), "{why}");
        let planted = listed(SEED, Some(51200), Some(1_700_003_600));
        assert!(seed_attach(&vm, "ide3", SEED, Some(&planted), Some(&uploaded())).is_err());
        assert!(seed_attach(&vm, "ide3", SEED, None, Some(&uploaded())).is_err());
        // Another spec's seed, even as uploaded, is not this VM's to attach.
        let other = ours("db-01", 100);
        let why = seed_attach(&other, "ide3", SEED, Some(&ours_listed), Some(&uploaded()))
            .unwrap_err()
            .to_string();
        assert!(why.contains("not a seed image of spec db-01"), "{why}");
    }

    #[test]
    fn only_the_specs_unused_seeds_are_deleted() {
        let vm = ours("web-01", 100);
        assert_eq!(
            seed_delete(&vm, SEED, &[]).unwrap().act(),
            &Act::DeleteVolume {
                volume: SEED.into()
            }
        );
        assert!(seed_delete(&vm, SEED, &[SEED.to_string()]).is_err());
        assert!(seed_delete(&vm, "local:iso/debian-12.iso", &[]).is_err());
        assert!(seed_delete(&ours("db-01", 100), SEED, &[]).is_err());
    }

    #[test]
    fn a_destroy_permit_is_bound_to_the_recorded_volume() {
        let vm = ours("web-01", 100);
        let b = bound(DestroyState::Bound, Some(V), None);
        let p = destroy_drive(&vm, "scsi1", SlotHolds::Disk(V), Some(&b), OFF).unwrap();
        assert_eq!(
            p.act(),
            &Act::Destroy {
                slot: "scsi1".into(),
                volume: V.into()
            }
        );
        // Another volume in the slot, a destroy done or never bound, another slot's binding,
        // the boot disk, a protected VM: no permit.
        assert!(destroy_drive(&vm, "scsi1", SlotHolds::Disk(W), Some(&b), OFF).is_err());
        let done = bound(DestroyState::Destroyed, Some(V), None);
        assert!(destroy_drive(&vm, "scsi1", SlotHolds::Disk(V), Some(&done), OFF).is_err());
        assert!(destroy_drive(&vm, "scsi1", SlotHolds::Disk(V), None, OFF).is_err());
        assert!(destroy_drive(&vm, "scsi2", SlotHolds::Disk(V), Some(&b), OFF).is_err());
        assert!(destroy_drive(&vm, "scsi1", SlotHolds::Kept("boot disk"), Some(&b), OFF).is_err());
        let on = Protection {
            on: true,
            managed: None,
        };
        assert!(destroy_drive(&vm, "scsi1", SlotHolds::Disk(V), Some(&b), on).is_err());
        // A detach is refused on a protected VM too.
        let slots = vec!["scsi2".to_string()];
        assert!(detach(&vm, OFF, &slots).is_ok());
        assert!(detach(&vm, on, &slots).is_err());
    }

    /// `destroyVolumes`: a container's mount point is freed from the `unusedN` entry it was
    /// detached to, only the volume its destroy is bound to.
    #[test]
    fn a_containers_volume_is_freed_from_unused_only_as_bound() {
        let vm = ours("data-01", 101);
        let mut b = bound(DestroyState::Bound, Some(V), None);
        b.slot = "mp1".into();
        let p = destroy_unused(&vm, "mp1", "unused0", V, Some(&b), OFF).unwrap();
        assert_eq!(
            p.act(),
            &Act::Destroy {
                slot: "unused0".into(),
                volume: V.into()
            }
        );
        // Another volume in the entry, a destroy done or never bound, another slot's binding,
        // an entry that is no unusedN, a protected container: no permit.
        assert!(destroy_unused(&vm, "mp1", "unused0", W, Some(&b), OFF).is_err());
        let mut done = b.clone();
        done.state = DestroyState::Destroyed;
        assert!(destroy_unused(&vm, "mp1", "unused0", V, Some(&done), OFF).is_err());
        assert!(destroy_unused(&vm, "mp1", "unused0", V, None, OFF).is_err());
        assert!(destroy_unused(&vm, "mp2", "unused0", V, Some(&b), OFF).is_err());
        assert!(destroy_unused(&vm, "mp1", "mp1", V, Some(&b), OFF).is_err());
        let on = Protection {
            on: true,
            managed: None,
        };
        assert!(destroy_unused(&vm, "mp1", "unused0", V, Some(&b), on).is_err());
    }

    #[test]
    fn a_protected_vm_is_deleted_only_when_its_spec_managed_the_flag() {
        let p = |on, managed| Protection { on, managed };
        assert_eq!(
            vm_delete(GuestKind::Qemu, 7, p(false, None)),
            Ok(DeleteProtection::Unprotected)
        );
        assert_eq!(
            vm_delete(GuestKind::Qemu, 7, p(false, Some(true))),
            Ok(DeleteProtection::Unprotected)
        );
        assert_eq!(
            vm_delete(GuestKind::Qemu, 7, p(true, Some(true))),
            Ok(DeleteProtection::Clear)
        );
        assert_eq!(
            vm_delete(GuestKind::Qemu, 7, p(true, Some(false))),
            Ok(DeleteProtection::Clear)
        );
        let err = vm_delete(GuestKind::Qemu, 7, p(true, None))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("protection") && err.contains("qm set 7 --protection 0"),
            "{err}"
        );
    }

    /// A container's messages name it, its `pct` and its mountPoints; the decisions are a VM's.
    #[test]
    fn a_containers_messages_say_container() {
        let p = |on, managed| Protection { on, managed };
        assert_eq!(
            vm_delete(GuestKind::Lxc, 7, p(true, None))
                .unwrap_err()
                .to_string(),
            "container 7 has protection set, and no spec of this install set it: PVE refuses to \
             delete a protected container, so proxsync neither powers it off nor deletes it. To \
             delete it, clear the flag: pct set 7 --protection 0 (or Options > Protection in the \
             web UI)"
        );
        let ct = guest(GuestKind::Lxc, "data-01", 101);
        let mut b = bound(DestroyState::Bound, Some(V), None);
        b.slot = "mp1".into();
        assert_eq!(
            destroy_unused(&ct, "mp1", "unused0", V, Some(&b), p(true, None))
                .unwrap_err()
                .to_string(),
            "container 101 has protection set, and PVE refuses to remove any mount point of \
             a protected container: mp1 (to destroy) stay attached while the rest of the \
             spec is applied. To remove them, clear the flag (pct set 101 --protection 0, or \
             protection: false in the spec); to keep them, list them in mountPoints again"
        );
        let kept = destroy(
            GuestKind::Lxc,
            101,
            "rootfs",
            SlotHolds::Kept("root disk"),
            None,
            true,
            9,
        );
        assert_eq!(
            kept.unwrap_err().to_string(),
            "destroyVolumes names rootfs of container 101, which is its root disk: refused; \
             remove it from destroyVolumes"
        );
        let unbound = destroy(
            GuestKind::Lxc,
            101,
            "mp1",
            SlotHolds::Disk(V),
            None,
            false,
            9,
        );
        let note = unbound.unwrap().note.unwrap().to_string();
        assert!(
            note.contains("it began following container 101 after")
                && note.ends_with(&format!(
                    "to keep it, list mp1 in mountPoints and remove it from destroyVolumes; to \
                     destroy it: pct set 101 --delete mp1, then pct set 101 --delete the unusedN \
                     entry that holds it (container 101's volume {V})"
                )),
            "{note}"
        );
    }
}
