//! HA node affinity proxsync made for a VM: a PVE 8 group or a PVE 9 node-affinity rule
//! (`ha.nodes`). proxsync changes one only when it carries proxsync's mark for this install and
//! spec (its comment), and removes one only when the spec's record also names it as made by
//! proxsync: a group or rule a person made is never changed or removed, even one that happens to
//! have proxsync's id.

use super::identity::VerifiedMarker;
use super::permit::{Act, Permit, own};
use super::refusal::Refusal;
use crate::guest::GuestKind;
use crate::pve::ha::AffinityKind;

/// The comment proxsync writes on the group or rule it makes: its mark.
pub fn affinity_mark(install_id: &str, spec: &str) -> String {
    format!("proxsync {install_id}: spec {spec}")
}

/// The id of the group or rule proxsync makes for guest `vmid` (PVE's `pve-configid`: a letter
/// first), a container's too. A VMID is the cluster's, shared by VMs and containers, so two
/// guests or installs never share one.
pub fn affinity_id(vmid: u32) -> String {
    format!("proxsync-vm{vmid}")
}

/// What the gate refused of an HA group, rule or resource proxsync made: left to a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HaRefusal {
    /// The guest is not this install's to act on (its verified marker said otherwise).
    Guest(Refusal),
    /// The group or rule `id` (a `what`).
    Affinity {
        /// A PVE 8 group or a PVE 9 node-affinity rule.
        what: AffinityKind,
        /// Its id.
        id: String,
        /// Why.
        why: AffinityRefused,
    },
    /// The HA resource `sid` (`vm:N`, `ct:N`) is not recorded as added by proxsync for the
    /// spec.
    ResourceNotRecorded {
        /// The resource.
        sid: String,
    },
}

impl From<Refusal> for HaRefusal {
    fn from(r: Refusal) -> Self {
        HaRefusal::Guest(r)
    }
}

impl From<HaRefusal> for String {
    fn from(r: HaRefusal) -> String {
        r.to_string()
    }
}

/// Why a group or rule is not proxsync's to change or remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AffinityRefused {
    /// It exists without proxsync's mark: not changed.
    NotMade {
        /// Its comment.
        comment: Option<String>,
        /// The mark it would carry.
        mark: String,
    },
    /// Not the id proxsync makes for the guest.
    NotTheGuests {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// The spec's record does not name it as made by proxsync.
    NotRecorded,
    /// Its comment is no longer proxsync's mark.
    MarkChanged {
        /// The mark it carried.
        mark: String,
    },
}

/// Whether proxsync may change the existing group or rule `id` (`what`: its kind): only one
/// carrying `mark`.
pub fn may_change(
    what: AffinityKind,
    id: &str,
    comment: Option<&str>,
    mark: &str,
) -> Result<(), HaRefusal> {
    if comment == Some(mark) {
        return Ok(());
    }
    let why = AffinityRefused::NotMade {
        comment: comment.map(str::to_string),
        mark: mark.to_string(),
    };
    Err(affinity(what, id, why))
}

fn affinity(what: AffinityKind, id: &str, why: AffinityRefused) -> HaRefusal {
    HaRefusal::Affinity {
        what,
        id: id.to_string(),
        why,
    }
}

/// Whether proxsync may remove the group or rule `id` made for VM `vm`: it is the VM's id
/// ([`affinity_id`]), the spec's record names it as made by proxsync (`recorded`) and it still
/// carries `mark`. A refusal is no failure: the caller leaves it to a person and says so.
pub fn may_remove(
    vm: &VerifiedMarker,
    what: AffinityKind,
    id: &str,
    recorded: Option<&str>,
    comment: Option<&str>,
    mark: &str,
) -> Result<Permit, HaRefusal> {
    own(vm)?;
    if id != affinity_id(vm.vmid()) {
        let (kind, vmid) = (vm.kind(), vm.vmid());
        return Err(affinity(
            what,
            id,
            AffinityRefused::NotTheGuests { kind, vmid },
        ));
    }
    if recorded != Some(id) {
        return Err(affinity(what, id, AffinityRefused::NotRecorded));
    }
    if comment != Some(mark) {
        let mark = mark.to_string();
        return Err(affinity(what, id, AffinityRefused::MarkChanged { mark }));
    }
    let act = Act::RemoveAffinity { id: id.to_string() };
    Ok(Permit::new(vm.site(), vm.vmid(), act))
}

/// Whether proxsync may remove guest `vm`'s HA resource (`vm:N`, `ct:N`, of `kind`): the
/// guest is this install's (its verified marker) and the spec's record says proxsync added the
/// resource (`applied`: `SpecRecord::ha_applied`); one a person added is left alone.
pub fn may_remove_resource(
    vm: &VerifiedMarker,
    kind: crate::guest::GuestKind,
    applied: bool,
) -> Result<Permit, HaRefusal> {
    own(vm)?;
    let sid = kind.ha_sid(vm.vmid());
    if !applied {
        return Err(HaRefusal::ResourceNotRecorded { sid });
    }
    Ok(Permit::new(
        vm.site(),
        vm.vmid(),
        Act::RemoveHaResource { sid },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_proxsync_marked_is_changed_and_only_what_it_recorded_is_removed() {
        let mark = affinity_mark("main", "web-01");
        assert_eq!(mark, "proxsync main: spec web-01");
        assert_eq!(affinity_id(100), "proxsync-vm100");
        let rule = AffinityKind::Rule;
        assert!(may_change(rule, "proxsync-vm100", Some(&mark), &mark).is_ok());
        let why = may_change(rule, "proxsync-vm100", Some("ops: keep on pve1"), &mark)
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("proxsync did not make it") && why.contains("ops: keep on pve1"),
            "{why}"
        );
        assert!(may_change(rule, "proxsync-vm100", None, &mark).is_err());
        assert!(
            may_change(
                rule,
                "proxsync-vm100",
                Some("proxsync main: spec web-02"),
                &mark
            )
            .is_err(),
            "another spec's mark"
        );

        let key = crate::gate::identity::tests::key();
        let site = crate::gate::site::tests::checked("lab");
        let d = crate::ownership::Marker::signed(&key, "main", "web-01", "u1", 100).description();
        let vm = crate::gate::identity::verify(
            &site,
            &key,
            "main",
            crate::guest::GuestKind::Qemu,
            100,
            Some(&d),
            None,
            None,
        )
        .unwrap();
        let permit = may_remove(
            &vm,
            rule,
            "proxsync-vm100",
            Some("proxsync-vm100"),
            Some(&mark),
            &mark,
        )
        .unwrap();
        assert_eq!(
            permit.act(),
            &Act::RemoveAffinity {
                id: "proxsync-vm100".into()
            }
        );
        assert!(may_remove(&vm, rule, "proxsync-vm100", None, Some(&mark), &mark).is_err());
        // The resource: only one proxsync added, and only the guest's own.
        let qemu = crate::guest::GuestKind::Qemu;
        let resource = may_remove_resource(&vm, qemu, true).unwrap();
        assert_eq!(
            (resource.vmid(), resource.act()),
            (
                100,
                &Act::RemoveHaResource {
                    sid: "vm:100".into()
                }
            )
        );
        assert!(
            may_remove_resource(&vm, qemu, false)
                .unwrap_err()
                .to_string()
                .contains("left to a person")
        );
        assert!(
            may_remove(
                &vm,
                rule,
                "proxsync-vm100",
                Some("proxsync-vm101"),
                Some(&mark),
                &mark
            )
            .is_err()
        );
        // Another VM's rule, even recorded and marked: not this VM's to remove.
        let other = may_remove(
            &vm,
            rule,
            "proxsync-vm101",
            Some("proxsync-vm101"),
            Some(&mark),
            &mark,
        );
        let other = other.unwrap_err().to_string();
        assert!(
            other.contains("not the one proxsync makes for VM 100"),
            "{other}"
        );
        // A container's rule names the container.
        let d = crate::ownership::Marker::signed(&key, "main", "dns-01", "u2", 101).description();
        let ct = crate::gate::identity::verify(
            &site,
            &key,
            "main",
            crate::guest::GuestKind::Lxc,
            101,
            Some(&d),
            None,
            None,
        )
        .unwrap();
        let why = may_remove(&ct, rule, "proxsync-vm100", None, Some(&mark), &mark)
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("not the one proxsync makes for container 101"),
            "{why}"
        );
        let why = may_remove(
            &vm,
            rule,
            "proxsync-vm100",
            Some("proxsync-vm100"),
            Some("edited"),
            &mark,
        )
        .unwrap_err()
        .to_string();
        assert!(why.contains("left to a person"), "{why}");
    }
}
