//! The gate's refusals of a volume's or a drive's act ([`VolumeRefusal`]) and the facts of a
//! `destroyDisks` or `destroyVolumes` slot ([`DestroyNote`]): the guest named by its kind, what was refused and
//! what to do.

use std::fmt;

use crate::gate::volume::{
    DestroyNote, DestroyNoted, DriveRefused, ImageKept, SeedAct, SeedDistrust, SeedRefused,
    VolumeRefusal,
};
use crate::guest::GuestKind;

impl fmt::Display for VolumeRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VolumeRefusal::Guest(r) => r.fmt(f),
            VolumeRefusal::Drive { kind, vmid, why } => drive(f, *kind, *vmid, why),
            VolumeRefusal::Seed { volid, why } => seed(f, volid, why),
            VolumeRefusal::Untrusted(why) => why.fmt(f),
            VolumeRefusal::Image { volid, why } => image(f, volid, why),
        }
    }
}

fn image(f: &mut fmt::Formatter<'_>, volid: &str, why: &ImageKept) -> fmt::Result {
    match why {
        ImageKept::NotRecorded => write!(
            f,
            "{volid} is kept: this install's database has no record of downloading it (another \
             install's, or a person's file)"
        ),
        ImageKept::Current => write!(f, "{volid} is kept: an image of the repository names it"),
        ImageKept::SourceIncomplete => write!(
            f,
            "{volid} is kept: some spec file could not be read or has errors (a spec with \
             errors may name this image), or the repository holds none, so no version is \
             judged unused"
        ),
        ImageKept::Iso => write!(
            f,
            "{volid} is kept: an ISO may be in a guest's CD-ROM drive; delete it by hand when \
             none holds it"
        ),
        ImageKept::Importing { vmid } => write!(
            f,
            "{volid} is kept this cycle: guest {vmid} is being created or cloned, and an import \
             may be reading it"
        ),
        ImageKept::Grace { until_ms } => write!(
            f,
            "{volid} is unused and kept until {} (orphan_grace: a revert may want it back)",
            crate::util::time::rfc3339_secs((*until_ms / 1000) as i64)
        ),
    }
}

fn drive(
    f: &mut fmt::Formatter<'_>,
    kind: GuestKind,
    vmid: u32,
    why: &DriveRefused,
) -> fmt::Result {
    let (named, noun, cli) = (kind.named(vmid), kind.noun(), kind.cli());
    let destroy = kind.destroy_field();
    match why {
        DriveRefused::Kept { slot, what } => write!(
            f,
            "{destroy} names {slot} of {named}, which is its {what}: refused; remove it from \
             {destroy}"
        ),
        DriveRefused::Protected {
            protection,
            detach,
            destroy,
        } => {
            let slots: Vec<String> = detach
                .iter()
                .map(|s| format!("{s} (to detach)"))
                .chain(destroy.iter().map(|s| format!("{s} (to destroy)")))
                .collect();
            let fix = match protection.managed {
                Some(true) => {
                    "set protection: false in the spec (proxsync clears the flag first)".into()
                }
                _ => format!(
                    "clear the flag ({cli} set {vmid} --protection 0, or protection: false in the \
                     spec)"
                ),
            };
            let drive = match kind {
                GuestKind::Qemu => "drive",
                GuestKind::Lxc => "mount point",
            };
            let listed = kind.drives_field();
            write!(
                f,
                "{named} has protection set, and PVE refuses to remove any {drive} of a protected \
                 {noun}: {} stay attached while the rest of the spec is applied. To remove them, \
                 {fix}; to keep them, list them in {listed} again",
                slots.join(", ")
            )
        }
        DriveRefused::CloudInitDrive { protection, slot } => write!(
            f,
            "{named} has protection set, and PVE refuses to remove any drive of a protected \
             {noun}: its cloud-init drive {slot} cannot make way for the userData seed image, so \
             userData is not applied. Clear the flag ({}), or drop userData",
            match protection.managed {
                Some(true) => "protection: false in the spec".to_string(),
                _ => format!("{cli} set {vmid} --protection 0"),
            }
        ),
        DriveRefused::NoDisk { slot } => write!(
            f,
            "{slot} of {named} holds no disk proxsync may destroy: nothing is destroyed"
        ),
        DriveRefused::NotBound { slot, volume } => write!(
            f,
            "the destroy of {slot} of {named} is not bound to {volume}, the volume it holds (no \
             destroy of it is recorded as pending): {volume} is kept"
        ),
        DriveRefused::UnusedNotBound {
            slot,
            unused,
            volume,
        } => write!(
            f,
            "{unused} of {named} holds {volume}, which no recorded destroy of {slot} is bound \
             to: {volume} is kept"
        ),
        DriveRefused::DeleteProtected => write!(
            f,
            "{named} has protection set, and no spec of this install set it: PVE refuses to \
             delete a protected {noun}, so proxsync neither powers it off nor deletes it. To \
             delete it, clear the flag: {cli} set {vmid} --protection 0 (or Options > \
             Protection in the web UI)"
        ),
    }
}

fn seed(f: &mut fmt::Formatter<'_>, volid: &str, why: &SeedRefused) -> fmt::Result {
    match why {
        SeedRefused::OtherSpec { spec, install, act } => {
            let of_install = match install {
                Some(install) => format!(" of install {install}"),
                None => String::new(),
            };
            let done = match act {
                SeedAct::Attach => "attached",
                SeedAct::Delete => "deleted",
            };
            write!(
                f,
                "{volid} is not a seed image of spec {spec}{of_install}: not {done}"
            )
        }
        SeedRefused::NotOnStorage => write!(
            f,
            "{volid} is not on its storage: not attached; it is uploaded first"
        ),
        SeedRefused::StillNamed { kind, vmid } => write!(
            f,
            "{} still names the seed image {volid}: not deleted",
            kind.named(*vmid)
        ),
        SeedRefused::NamedBy { vmid } => {
            write!(f, "guest {vmid} names the seed image {volid}: not deleted")
        }
        SeedRefused::Unread { vmid, spec } => write!(
            f,
            "guest {vmid} may use spec {spec}'s seed images and its config could not be read: \
             {volid} is not deleted"
        ),
        SeedRefused::SpecExists { spec } => write!(
            f,
            "spec {spec} still exists (or its record does): its own converge removes the seed \
             images it no longer uses, not a sweep; {volid} is not deleted"
        ),
        SeedRefused::MissingAfterUpload => write!(
            f,
            "the seed image {volid} is not on its storage after its upload ended: not attaching \
             it; the next attempt uploads it again"
        ),
        SeedRefused::SizeAfterUpload { listed, uploaded } => write!(
            f,
            "the storage lists the seed image {volid} with {} bytes, not the {uploaded} proxsync \
             uploaded (replaced right after the upload?): not attaching it; the next attempt \
             uploads it again",
            shown(*listed)
        ),
        SeedRefused::NoCtime => write!(
            f,
            "the storage lists the seed image {volid} without a ctime, so proxsync cannot tell \
             it from a file put there later: no seed is attached from it; set \
             cloudInit.seedStorage to a directory storage (dir, nfs, cifs, cephfs)"
        ),
    }
}

impl fmt::Display for SeedDistrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeedDistrust::Unrecorded { volid } => write!(
                f,
                "{volid} is on the storage but is not the file proxsync uploaded (it has no \
                 record of uploading it: someone else's file, or one from before its state \
                 database was rebuilt)"
            ),
            SeedDistrust::Replaced {
                volid,
                listed_size,
                listed_ctime,
                size,
                ctime,
            } => write!(
                f,
                "{volid} on the storage is not the file proxsync uploaded (listed: size {}, \
                 ctime {}; uploaded: size {size}, ctime {ctime}): replaced since",
                shown(*listed_size),
                shown(*listed_ctime),
            ),
        }?;
        f.write_str("; uploading the seed again, never attaching that file")
    }
}

fn shown(v: Option<u64>) -> String {
    v.map_or_else(|| "none".to_string(), |v| v.to_string())
}

impl fmt::Display for DestroyNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, vmid, slot) = (self.kind, self.vmid, &self.slot);
        let named = kind.named(vmid);
        let how_to = |volume: &str| how_to(kind, vmid, slot, volume);
        let destroy = kind.destroy_field();
        match &self.noted {
            DestroyNoted::Unfollowed { volume } => write!(
                f,
                "{destroy} names {slot}, but proxsync has no record of the volume that \
                 destroy was written for (it began following {named} after: an adoption, a \
                 rebuilt state database or an older release): {volume} in {slot} is not \
                 destroyed; {}",
                how_to(volume)
            ),
            DestroyNoted::Detached { bound } => write!(
                f,
                "{slot} ({bound}) is no longer attached to {named} after the destroy sent for \
                 {destroy}"
            ),
            DestroyNoted::Replaced { bound, now } => write!(
                f,
                "{slot} no longer holds {bound}, the volume its destroy was bound to; \
                 {destroy} no longer applies to {now}, now in {slot}, which is kept; {}",
                how_to(now)
            ),
            DestroyNoted::Done { destroyed, now } => {
                let before = match destroyed {
                    Some(v) => format!("it destroyed {v} once"),
                    None => format!("{slot} was empty when {destroy} was first applied"),
                };
                write!(
                    f,
                    "{destroy} no longer applies to {slot}: {before}; {now}, in {slot} now, is \
                     kept; {}",
                    how_to(now)
                )
            }
            DestroyNoted::Unbound { now } => write!(
                f,
                "{destroy} names {slot}, but proxsync has no record of the volume that \
                 destroy was written for: {now} in {slot} is not destroyed; {}",
                how_to(now)
            ),
        }
    }
}

/// How to keep or destroy by hand the volume in a `destroyDisks` (`destroyVolumes`) slot
/// proxsync keeps.
fn how_to(kind: GuestKind, vmid: u32, slot: &str, volume: &str) -> String {
    match kind {
        GuestKind::Qemu => format!(
            "to keep it, list {slot} in disks and remove it from destroyDisks; to destroy it: qm \
             set {vmid} --delete {slot} --force 1 (VM {vmid}'s volume {volume})"
        ),
        // pve-container moves a detached volume to `unusedN`, and frees it when that goes.
        GuestKind::Lxc => format!(
            "to keep it, list {slot} in mountPoints and remove it from destroyVolumes; to destroy \
             it: pct set {vmid} --delete {slot}, then pct set {vmid} --delete the unusedN entry \
             that holds it ({}'s volume {volume})",
            kind.named(vmid)
        ),
    }
}
