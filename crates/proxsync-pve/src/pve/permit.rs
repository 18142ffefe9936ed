//! The permit a destructive or identity-changing call carries, and the checks that refuse a
//! call without the right one. The gate (`gate::permit`) decides and makes permits; this
//! module is the token and the backstop where the calls are sent, below the gate so the client
//! needs nothing above it. What each act allows and which config edits are guarded: see
//! `gate::permit`.

use crate::ownership::Marker;

/// The identity a marker write carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerId {
    /// The install that writes it (its ownership tag is `proxsync.<install>`).
    pub install: String,
    /// The spec's name.
    pub spec: String,
    /// The marker's uid (16 random hex characters, `ownership::new_uid`).
    pub uid: String,
}

impl MarkerId {
    /// The identity `m` carries.
    pub fn of(m: &Marker) -> MarkerId {
        MarkerId {
            install: m.install.to_string(),
            spec: m.spec.to_string(),
            uid: m.uid.to_string(),
        }
    }
}

impl std::fmt::Display for MarkerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "spec {} (install {}, uid {})",
            self.spec, self.install, self.uid
        )
    }
}

/// What a permit allows, on its VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    /// Delete the VM: a removed spec's (`deletionPolicy: Delete`), an orphan, or a second VM of
    /// a spec.
    DeleteVm,
    /// Remove this install's ownership tag and marker (`deletionPolicy: Orphan`).
    Release,
    /// Remove this install's ownership tag, keeping the marker (written signed as `marker`).
    HandOver {
        /// The marker the VM keeps, signed.
        marker: MarkerId,
    },
    /// Write this install's `marker` on a VM another install handed over.
    TakeOver {
        /// The marker to write.
        marker: MarkerId,
    },
    /// Write this install's first `marker` on a VM no install made, which a spec consents to
    /// take over (`proxsync.io/adopt`).
    Adopt {
        /// The marker to write.
        marker: MarkerId,
    },
    /// Write `marker` for the spec a VM is renamed to.
    Relabel {
        /// The marker naming the new spec.
        marker: MarkerId,
    },
    /// Write the VM's own `marker` again, signed (converge).
    Sign {
        /// The VM's marker, to be written signed.
        marker: MarkerId,
    },
    /// Detach the drives in `slots` (PVE keeps their volumes as `unusedN`).
    Detach {
        /// The drive slots (`scsi1`, `ide2`, ...).
        slots: Vec<String>,
    },
    /// Destroy the drive in `slot`, bound to `volume`.
    Destroy {
        /// The drive slot, or an `unusedN` entry.
        slot: String,
        /// The volume the gate saw in the slot (the check before sending compares only the
        /// slot).
        volume: String,
    },
    /// Attach the seed image `volume` as a CD-ROM in `slot`.
    AttachSeed {
        /// The CD-ROM's drive slot.
        slot: String,
        /// The seed image's volume ID.
        volume: String,
    },
    /// Delete the storage volume `volume` (a seed image the VM no longer uses).
    DeleteVolume {
        /// The volume ID (`storage:...`).
        volume: String,
    },
    /// Remove the HA group or rule `id` made for the VM.
    RemoveAffinity {
        /// The group's or rule's id.
        id: String,
    },
    /// Roll the guest back to its snapshot `snapshot`, which proxsync took before a change.
    Rollback {
        /// The snapshot's name.
        snapshot: String,
    },
    /// Delete the guest's snapshot `snapshot`, which proxsync took.
    DeleteSnapshot {
        /// The snapshot's name.
        snapshot: String,
    },
    /// Remove the VM's HA resource `sid` (`vm:N`, `ct:N`), which proxsync added for it.
    RemoveHaResource {
        /// `vm:N` or `ct:N`.
        sid: String,
    },
}

impl Act {
    /// The marker a write under this act must carry, when it writes one.
    fn marker(&self) -> Option<&MarkerId> {
        match self {
            Act::HandOver { marker }
            | Act::TakeOver { marker }
            | Act::Adopt { marker }
            | Act::Relabel { marker }
            | Act::Sign { marker } => Some(marker),
            _ => None,
        }
    }
}

/// One act on one VM, allowed by the gate. Not `Clone`; made only by the gate's decision
/// functions (see [`Permit::new`] and `gate::permit`).
#[derive(Debug)]
pub struct Permit {
    grant: Grant,
}

/// What a [`Permit`] allows, as a config write carries it (`VmParams`). Made only from a permit
/// (`Permit::grant`); a copy allows nothing more than its permit (the same act on the same
/// VM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    site: String,
    vmid: u32,
    act: Act,
}

impl Permit {
    /// Made by the gate's decision functions only (`proxsync-core`'s `gate`; `tests/tidy.rs`
    /// checks that no other module calls it: a crate below the gate cannot hide it from the
    /// crates above).
    pub fn new(site: &str, vmid: u32, act: Act) -> Permit {
        Permit {
            grant: Grant {
                site: site.to_string(),
                vmid,
                act,
            },
        }
    }

    /// The site the permit is for.
    pub fn site(&self) -> &str {
        &self.grant.site
    }

    /// The VMID of the VM the permit is for.
    pub fn vmid(&self) -> u32 {
        self.grant.vmid
    }

    /// What the permit allows.
    pub fn act(&self) -> &Act {
        &self.grant.act
    }

    /// What a config write carrying this permit is allowed to do.
    pub fn grant(&self) -> Grant {
        self.grant.clone()
    }
}

// ---- the checks where the calls are sent ----

/// A guarded edit of a config write (see the module's doc).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Edit {
    Detach(String),
    Destroy(String),
    WriteMarker(MarkerId),
    RemoveMarker,
    RemoveOwnership,
    Attach { slot: String, volume: String },
}

impl Edit {
    fn allowed_by(&self, act: &Act) -> bool {
        match (self, act) {
            (Edit::Detach(s), Act::Detach { slots }) => slots.contains(s),
            (Edit::Destroy(s), Act::Destroy { slot, .. }) => s == slot,
            (Edit::WriteMarker(m), act) => act.marker() == Some(m),
            (Edit::RemoveMarker, Act::Release) => true,
            (Edit::RemoveOwnership, Act::Release | Act::HandOver { .. }) => true,
            (Edit::Attach { slot, volume }, Act::AttachSeed { slot: s, volume: v }) => {
                slot == s && volume == v
            }
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            Edit::Detach(s) => format!("detaching drive {s} (delete={s})"),
            Edit::Destroy(s) => format!("destroying drive {s} (delete={s} with force)"),
            Edit::WriteMarker(m) => format!("writing the marker of {m}"),
            Edit::RemoveMarker => "removing the marker (a description without it)".to_string(),
            Edit::RemoveOwnership => {
                "removing the ownership tag (tags without a proxsync.* tag)".to_string()
            }
            Edit::Attach { slot, volume } => format!("attaching the image {volume} at {slot}"),
        }
    }
}

/// `delete=` lists: PVE splits them at `,`, `;` and white space (pve-common
/// `PVE::Tools::split_list`).
fn split_list(list: &str) -> impl Iterator<Item = &str> {
    list.split([',', ';', ' ', '\t', '\n'])
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

/// A config key that holds a volume: deleting it detaches or destroys one.
fn holds_volume(key: &str) -> bool {
    // A container's mount points (`mpN`) hold volumes too.
    [
        "ide", "sata", "scsi", "virtio", "efidisk", "tpmstate", "unused", "mp",
    ]
    .iter()
    .any(|p| {
        key.strip_prefix(p)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The image a drive value attaches, if it attaches one: `import-from=V`, or a CD-ROM of a
/// volume (not `none`/`cdrom`, not PVE's cloud-init drive).
fn attached_image(value: &str) -> Option<String> {
    let drive = super::values::DriveValue::parse(value);
    if let Some(v) = drive.get("import-from") {
        return Some(v.to_string());
    }
    let cdrom = drive.get("media") == Some("cdrom");
    let empty = matches!(drive.volume.as_str(), "" | "none" | "cdrom");
    let cloudinit = drive.volume.ends_with(":cloudinit") || drive.volume.contains("-cloudinit");
    (cdrom && !empty && !cloudinit).then_some(drive.volume)
}

fn edits<'a>(values: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<Edit> {
    let values: Vec<(&str, &str)> = values.into_iter().collect();
    let force = values.iter().any(|(k, v)| *k == "force" && *v != "0");
    let mut out = Vec::new();
    for (key, value) in &values {
        match *key {
            "delete" => {
                for k in split_list(value) {
                    // Deleting an `unusedN` entry frees its volume, with or without `force`
                    // (qemu-server and pve-container alike): always a destroy.
                    if k.starts_with("unused") && holds_volume(k) {
                        out.push(Edit::Destroy(k.to_string()));
                    } else if holds_volume(k) {
                        out.push(if force {
                            Edit::Destroy(k.to_string())
                        } else {
                            Edit::Detach(k.to_string())
                        });
                    } else if k == "description" {
                        out.push(Edit::RemoveMarker);
                    } else if k == "tags" {
                        out.push(Edit::RemoveOwnership);
                    }
                }
            }
            "description" => out.push(match Marker::parse(value) {
                Some(m) => Edit::WriteMarker(MarkerId::of(&m)),
                None => Edit::RemoveMarker,
            }),
            "tags" if !split_list(value).any(|t| t.starts_with("proxsync.")) => {
                out.push(Edit::RemoveOwnership);
            }
            k if super::values::is_drive_key(k) => {
                if let Some(volume) = attached_image(value) {
                    out.push(Edit::Attach {
                        slot: k.to_string(),
                        volume,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether a config write of `values` to VM `vmid` may be sent with `grants`: every guarded
/// edit (see the module's doc) needs a grant for this VM whose act allows it. `Err` says which
/// edit lacks one; nothing may be sent then.
pub fn check_write<'a>(
    vmid: u32,
    values: impl IntoIterator<Item = (&'a str, &'a str)>,
    grants: &[Grant],
) -> Result<(), String> {
    if let Some(g) = grants.iter().find(|g| g.vmid != vmid) {
        return Err(format!(
            "a permit for VM {} on site {} ({:?}) cannot be used on VM {vmid}: nothing was sent",
            g.vmid, g.site, g.act
        ));
    }
    for edit in edits(values) {
        if !grants.iter().any(|g| edit.allowed_by(&g.act)) {
            return Err(format!(
                "VM {vmid}: {} needs a permit of the gate, and this write carries none that \
                 allows it: nothing was sent",
                edit.describe()
            ));
        }
    }
    Ok(())
}

/// Whether `permit` allows deleting VM `vmid`.
pub fn check_delete_vm(vmid: u32, permit: &Permit) -> Result<(), String> {
    if permit.vmid() == vmid && permit.act() == &Act::DeleteVm {
        return Ok(());
    }
    Err(format!(
        "deleting VM {vmid} needs the gate's permit for that delete; the one given is {:?} for \
         VM {}: nothing was sent",
        permit.act(),
        permit.vmid()
    ))
}

/// Whether `permit` allows deleting the storage volume `volume`.
pub fn check_delete_volume(volume: &str, permit: &Permit) -> Result<(), String> {
    if matches!(permit.act(), Act::DeleteVolume { volume: v } if v == volume) {
        return Ok(());
    }
    Err(format!(
        "deleting volume {volume} needs the gate's permit for that delete; the one given is \
         {:?}: nothing was sent",
        permit.act()
    ))
}

/// Whether `permit` allows rolling guest `vmid` back to its snapshot `name`.
pub fn check_rollback(vmid: u32, name: &str, permit: &Permit) -> Result<(), String> {
    if permit.vmid() == vmid
        && matches!(permit.act(), Act::Rollback { snapshot } if snapshot == name)
    {
        return Ok(());
    }
    Err(format!(
        "rolling guest {vmid} back to snapshot {name} needs the gate's permit for it; the one \
         given is {:?} for guest {}: nothing was sent",
        permit.act(),
        permit.vmid()
    ))
}

/// Whether `permit` allows deleting guest `vmid`'s snapshot `name`.
pub fn check_delete_snapshot(vmid: u32, name: &str, permit: &Permit) -> Result<(), String> {
    if permit.vmid() == vmid
        && matches!(permit.act(), Act::DeleteSnapshot { snapshot } if snapshot == name)
    {
        return Ok(());
    }
    Err(format!(
        "deleting snapshot {name} of guest {vmid} needs the gate's permit for it; the one given \
         is {:?} for guest {}: nothing was sent",
        permit.act(),
        permit.vmid()
    ))
}

/// Whether `permit` allows removing the HA resource `sid` (`vm:N`, `ct:N`).
pub fn check_remove_ha_resource(sid: &str, permit: &Permit) -> Result<(), String> {
    if matches!(permit.act(), Act::RemoveHaResource { sid: s } if s == sid) {
        return Ok(());
    }
    Err(format!(
        "removing the HA resource {sid} needs the gate's permit for it; the one given is {:?}: \
         nothing was sent",
        permit.act()
    ))
}

/// Whether `permit` allows removing the HA group or rule `id`.
pub fn check_remove_affinity(id: &str, permit: &Permit) -> Result<(), String> {
    if matches!(permit.act(), Act::RemoveAffinity { id: i } if i == id) {
        return Ok(());
    }
    Err(format!(
        "removing the HA group or rule {id} needs the gate's permit for it; the one given is \
         {:?}: nothing was sent",
        permit.act()
    ))
}
