//! What blocks an action until a person acts ([`Blocked`]) and the guest found at a record's
//! VMID instead of the spec's ([`Stranger`]): the guest named by its kind, and how a person
//! clears what blocks it with PVE's own tools.

use std::fmt;

use crate::guest::GuestKind;
use crate::model::{Blocked, Interrupted, Shows, SlotFor, Stranger};
use crate::render::cloud_init::{CLOUDINIT_DRIVE_SLOTS, SEED_SLOTS};

impl fmt::Display for Blocked {
    // Long because: one arm per block, each with what a person does about it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unjudged = "nothing is judged on it this cycle";
        match self {
            Blocked::StaleLock {
                kind,
                vmid,
                node,
                lock,
            } => {
                write!(
                    f,
                    "{} on node {node} is locked ({lock}) but no task holds the lock: ",
                    kind.named(*vmid)
                )?;
                unheld_lock_advice(f, *kind, *vmid, lock)
            }
            Blocked::LinkedClones { vmid, node, clones } => write!(
                f,
                "template {vmid} on node {node} is kept: it is the base of linked clones ({}); \
                 it is deleted once they are gone (make them full clones with `qm move-disk` or \
                 delete them)",
                clones.join(", ")
            ),
            Blocked::StaleTemplateLock {
                kind,
                vmid,
                node,
                lock,
            } => {
                write!(
                    f,
                    "{} template {vmid} on node {node} is locked ({lock}) and no task holds the \
                     lock, so nothing can be cloned from it: ",
                    kind.noun()
                )?;
                match lock.as_str() {
                    "mounted" | "destroyed" => unheld_lock_advice(f, *kind, *vmid, lock),
                    _ => write!(
                        f,
                        "an interrupted clone, backup or volume move. After checking that \
                         nothing is running on it, clear it on the node with: {} unlock {vmid}",
                        kind.cli()
                    ),
                }
            }
            Blocked::InterruptedCreate {
                kind,
                vmid,
                node,
                lock,
                of,
            } => {
                let (noun, cli) = (kind.noun(), kind.cli());
                write!(
                    f,
                    "{noun} {vmid} on node {node} is locked ({lock}) and no task holds the lock: "
                )?;
                match of {
                    Interrupted::Resumed => write!(
                        f,
                        "an interrupted create or clone, perhaps this spec's. proxsync keeps VMID \
                         {vmid} reserved and creates nothing until it is resolved. Look at it \
                         ({cli} config {vmid}); if it is an empty leftover, remove it with: {cli} \
                         unlock {vmid} && {cli} destroy {vmid}"
                    ),
                    Interrupted::LeftSelector { spec } => write!(
                        f,
                        "an interrupted create of spec {spec}, which left this install's \
                         selector. Look at it ({cli} config {vmid}); if it is an empty leftover: \
                         {cli} unlock {vmid} && {cli} destroy {vmid}"
                    ),
                    Interrupted::Removed { spec } => write!(
                        f,
                        "an interrupted create of removed spec {spec}. Look at it ({cli} config \
                         {vmid}); if it is an empty leftover: {cli} unlock {vmid} && {cli} \
                         destroy {vmid}"
                    ),
                }
            }
            Blocked::MarkerMissing {
                kind,
                vmid,
                spec,
                why,
                not,
                tag,
                removed,
            } => {
                let noun = kind.noun();
                write!(
                    f,
                    "{} does not carry the marker of spec {spec} ({why}; {not}). It is still the \
                     {noun} the spec's record names, so ",
                    kind.named(*vmid)
                )?;
                if *removed {
                    // The spec is removed: there is nothing to adopt it for.
                    write!(
                        f,
                        "it is not deleted on a marker it does not carry. Delete it by hand ({} \
                         destroy {vmid}) if it is the removed spec's, or remove the tag {tag} and \
                         any proxsync-id line from it to keep it: the record then lets it go",
                        kind.cli()
                    )
                } else {
                    write!(
                        f,
                        "nothing is made for the spec while it exists, and nothing is done to \
                         it. If it is the spec's {noun}: proxsync adopt {spec} --vmid {vmid} (the \
                         marker line is written back below its notes); if it is not: delete it, \
                         or remove the tag {tag} and any proxsync-id line from it (and rename \
                         it, if it has the spec's name), and the next cycle makes the spec a new \
                         {noun}"
                    )
                }
            }
            Blocked::Gone(stranger) => write!(
                f,
                "{stranger}: the spec's {} is gone; a new one is made at the next cycle",
                stranger.kind.noun()
            ),
            Blocked::ChangedIdentity(stranger) => write!(
                f,
                "{stranger}: it changed identity during the delete; not deleting"
            ),
            Blocked::NotOnNode { kind, vmid, node } => write!(
                f,
                "{} is not on node {node} any more; it is looked for again at the next cycle, and \
                 made again only once PVE says VMID {vmid} is free",
                kind.named(*vmid)
            ),
            Blocked::ReadsDisagree { kind, vmid, two } => write!(
                f,
                "{} answered {}reads of its config differently; {unjudged}",
                kind.named(*vmid),
                if *two { "two " } else { "" }
            ),
            Blocked::NoDigest { kind, vmid } => write!(
                f,
                "{}'s config came without its digest; read again",
                kind.named(*vmid)
            ),
            Blocked::OrphanNotOurs { kind, vmid, why } => write!(
                f,
                "{} is not ours any more ({why}); not deleting",
                kind.named(*vmid)
            ),
            Blocked::NotHandedOver {
                kind,
                vmid,
                spec,
                why,
            } => write!(
                f,
                "{} no longer carries a verifying marker of spec {spec} from another install \
                 ({why}); not adopting it",
                kind.named(*vmid)
            ),
            Blocked::KindChanged { kind, vmid, now } => write!(
                f,
                "the create in flight of {} {vmid} was sent for a {}, and the spec is now a {}: \
                 nothing is created or converged until a person decides",
                kind.noun(),
                kind.spec_kind(),
                now.spec_kind()
            ),
            Blocked::StillTaken {
                kind,
                vmid,
                site,
                spec,
            } => write!(
                f,
                "{} is not in this cycle's listing of site {site}, but PVE says VMID {vmid} is \
                 taken: the record of spec {spec} is kept",
                kind.named(*vmid)
            ),
            Blocked::HiddenFromListing { kind, vmid, site } => write!(
                f,
                "{}, which the spec's record names, is not in this cycle's listing of site \
                 {site}, but PVE says VMID {vmid} is taken: the listing is incomplete, or the \
                 token cannot see the guest (VM.Audit on /vms/{vmid}). Nothing is created for \
                 the spec while it may exist",
                kind.named(*vmid)
            ),
            Blocked::PinnedVmidHeld { vmid } => write!(
                f,
                "vmId {vmid} is held by another VM (or another spec's create); proxsync never \
                 takes a pinned VMID from someone else: free it or change vmId"
            ),
            Blocked::NoMarkerOfSpec { kind, vmid, spec } => write!(
                f,
                "{} does not carry the marker of spec {spec}",
                kind.named(*vmid)
            ),
            Blocked::RelabelInFlight {
                from,
                kind,
                vmid,
                guest,
                guest_vmid,
            } => write!(
                f,
                "the record of spec {from} has a create or delete of {} in flight: not \
                 re-labelling {} until it ends",
                kind.named(*vmid),
                guest.named(*guest_vmid)
            ),
            Blocked::NotRelabelled {
                kind,
                vmid,
                from,
                to,
                why,
            } => write!(
                f,
                "not re-labelling {} from spec {from} to {to}: {why}",
                kind.named(*vmid)
            ),
            Blocked::NoConsent { spec } => {
                write!(f, "spec {spec} does not consent to take over a guest")
            }
            Blocked::NotAdopted { why } | Blocked::ConsentUnfit { why } => {
                write!(f, "{why}; nothing adopted")
            }
            Blocked::ConsentedGone { kind, vmid, node } => write!(
                f,
                "{} is gone from node {node}; nothing adopted",
                kind.named(*vmid)
            ),
            Blocked::NoFreeSlot { vmid, drive } => {
                let (what, tried) = match drive {
                    SlotFor::SeedCdrom => ("the cloud-init seed CD-ROM", &SEED_SLOTS),
                    SlotFor::CloudInitDrive => ("a cloud-init drive", &CLOUDINIT_DRIVE_SLOTS),
                };
                write!(
                    f,
                    "VM {vmid} has no free slot for {what} (tried {})",
                    tried.join(", ")
                )
            }
            Blocked::SiteNotObserved { site } => write!(
                f,
                "site {site} was not observed this cycle: nothing is done there"
            ),
            Blocked::Unmovable {
                kind,
                vmid,
                node,
                target,
                why,
            } => write!(
                f,
                "{} cannot be migrated from node {node} to node {target}: {why}. It stays on \
                 {node}; remove what blocks the move, or set node: {node} in the spec",
                kind.named(*vmid)
            ),
            Blocked::SlotChanged { vmid, slot, volume } => write!(
                f,
                "{slot} of VM {vmid} changed while this converge ran (it held {volume}); \
                 nothing destroyed, the next converge looks again"
            ),
            Blocked::HaErrorState { kind, vmid, state } => {
                let sid = kind.ha_sid(*vmid);
                write!(
                    f,
                    "the HA resource {sid} is in the error state: the HA manager gave up on the \
                     {}, and PVE refuses every change of it but disabling it (\"service '{sid}' \
                     in error state, must be disabled and fixed first\"). Find the cause \
                     (ha-manager status, the node's journal), fix it, then run `ha-manager set \
                     {sid} --state disabled`; proxsync then sets it to {state} again (at its next \
                     attempt, or at once after `proxsync reconcile <spec>`)",
                    kind.noun()
                )
            }
            Blocked::RebootGivenUp {
                kind,
                vmid,
                timeout,
                why,
            } => {
                let (noun, fix) = match kind {
                    GuestKind::Qemu => {
                        ("guest", "fix its ACPI shutdown (qemu-guest-agent or acpid)")
                    }
                    GuestKind::Lxc => ("container", "check why its init does not shut it down"),
                };
                write!(
                    f,
                    "the reboot of {} was given up: the {noun} did not shut down within \
                     {timeout} s ({why}). It keeps running with its changes pending; set \
                     forceStopAfter to stop it hard after a while, or {fix}",
                    kind.named(*vmid)
                )
            }
            Blocked::SnapshotFailed {
                kind,
                vmid,
                unsupported,
                why,
            } => {
                let fix = if *unsupported {
                    "its disks are on a storage that cannot snapshot (LVM thick, a directory with \
                     raw images, a passthrough device, a bind mount): move them to one that can \
                     (LVM-thin, ZFS, Ceph RBD, qcow2), or write changePolicy.snapshot: \
                     IfPossible to apply such changes unprotected"
                } else {
                    "see the task log; the next attempt takes it again"
                };
                write!(
                    f,
                    "the change was held: the snapshot changePolicy takes before it could not be \
                     taken of {} ({why}); {fix}",
                    kind.named(*vmid)
                )
            }
            Blocked::SnapshotIncomplete {
                kind,
                vmid,
                snapshot,
                snapstate,
            } => {
                let tool = match kind {
                    GuestKind::Lxc => "pct",
                    GuestKind::Qemu => "qm",
                };
                write!(
                    f,
                    "the change was held: snapshot {snapshot} of {}, taken before it, was left \
                     incomplete (snapstate {snapstate}); delete it (`{tool} delsnapshot {vmid} \
                     {snapshot} --force`) and the next attempt takes it again",
                    kind.named(*vmid)
                )
            }
            Blocked::RollbackImpossible {
                kind,
                vmid,
                snapshot,
                snapstate,
                why,
            } => {
                let state = match snapstate {
                    Some(s) => format!("incomplete (snapstate {s})"),
                    None => "gone: deleted by someone else".to_string(),
                };
                write!(
                    f,
                    "{} is unhealthy after its change ({why}), but snapshot {snapshot} taken \
                     before the change is {state}: it was not rolled back, the change stays \
                     applied; fix the guest or change the spec",
                    kind.named(*vmid)
                )
            }
            Blocked::MountPointsHeld {
                vmid,
                managed,
                held,
            } => {
                write!(
                    f,
                    "container {vmid} has protection set, and PVE refuses to add, change or \
                     remove a mount point of a protected container: {} stay as they are while \
                     the rest of the spec is applied. To change them, ",
                    held.join(", ")
                )?;
                if *managed {
                    f.write_str(
                        "set protection: false in the spec (proxsync clears the flag first)",
                    )?;
                } else {
                    write!(
                        f,
                        "clear the flag (pct set {vmid} --protection 0, or protection: false in \
                         the spec)"
                    )?;
                }
                f.write_str("; to keep them, list them in mountPoints as they are")
            }
            Blocked::SpecNotLoaded { spec } => write!(f, "spec {spec} is not loaded"),
            Blocked::SiteNotConfigured { site } => write!(f, "site {site:?} is not configured"),
        }
    }
}

impl fmt::Display for Stranger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let named = self.kind.named(self.vmid);
        let neither = "carries neither the tag";
        match &self.shows {
            Shows::OtherMarker { spec, install } => write!(
                f,
                "{named} carries the marker of spec {spec} of install {install}, signed for it"
            ),
            Shows::LetGo { tag } => write!(
                f,
                "{named} {neither} {tag} nor a marker of this install: a person let it go"
            ),
            Shows::OtherIdentity { tag, recorded } => write!(
                f,
                "{named} {neither} {tag} nor a marker of this install, and not the recorded \
                 {recorded}: another guest holds the VMID"
            ),
            Shows::Untagged { tag } => {
                write!(f, "{named} {neither} {tag} nor a marker of this install")
            }
        }?;
        // A stranger is judged on two reads that agree.
        f.write_str(" (read twice)")
    }
}

/// What a guest's lock that no running task holds says, and how a person clears it as PVE's
/// own tools do: `mounted` by `pct unmount` (`pct mount` left it; an unlock would leave the
/// file systems mounted), `destroyed` by destroying it again (pve-container and qemu-server
/// lock a guest `destroyed` while their destroy frees its volumes, so the guest is partly gone),
/// any other with `unlock` once nothing runs on it.
fn unheld_lock_advice(
    f: &mut fmt::Formatter<'_>,
    kind: GuestKind,
    vmid: u32,
    lock: &str,
) -> fmt::Result {
    let cli = kind.cli();
    match lock {
        "mounted" => write!(
            f,
            "its file systems are mounted on the host (`{cli} mount` sets the lock and leaves it \
             until `{cli} unmount`). When done with them, unmount them on the node with: {cli} \
             unmount {vmid}"
        ),
        "destroyed" => write!(
            f,
            "a destroy of it was interrupted (PVE locks a guest `destroyed` while it frees its \
             volumes), so it is partly gone. Finish the destroy on the node with: {cli} destroy \
             {vmid}"
        ),
        _ => write!(
            f,
            "a crashed or interrupted operation. After checking that nothing is running on it, \
             clear it on the node with: {cli} unlock {vmid}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words of blocks no test of execute reaches, as execute said them before they were
    /// values.
    #[test]
    fn reads_of_a_guest_are_said_as_before() {
        let ct = GuestKind::Lxc;
        let said = |b: Blocked| b.to_string();
        assert_eq!(
            said(Blocked::ReadsDisagree {
                kind: ct,
                vmid: 7,
                two: true
            }),
            "container 7 answered two reads of its config differently; nothing is judged on \
             it this cycle"
        );
        assert_eq!(
            said(Blocked::NotOnNode {
                kind: GuestKind::Qemu,
                vmid: 7,
                node: "pve1".into()
            }),
            "VM 7 is not on node pve1 any more; it is looked for again at the next cycle, and \
             made again only once PVE says VMID 7 is free"
        );
        assert_eq!(
            said(Blocked::KindChanged {
                kind: ct,
                vmid: 7,
                now: GuestKind::Qemu
            }),
            "the create in flight of container 7 was sent for a ProxmoxLXC, and the spec is now \
             a ProxmoxVM: nothing is created or converged until a person decides"
        );
        let stranger = Stranger {
            kind: ct,
            vmid: 7,
            shows: Shows::LetGo { tag: "t".into() },
        };
        assert_eq!(
            said(Blocked::Gone(stranger)),
            "container 7 carries neither the tag t nor a marker of this install: a person let \
             it go (read twice): the spec's container is gone; a new one is made at the next \
             cycle"
        );
    }
}
