//! HA node affinity proxsync made for a VM: a PVE 8 group or a PVE 9 node-affinity rule
//! (`ha.nodes`). proxsync changes one only when it carries proxsync's mark for this install and
//! spec (its comment), and removes one only when the spec's record also names it as made by
//! proxsync: a group or rule a person made is never changed or removed, even one that happens to
//! have proxsync's id.

use super::identity::VerifiedMarker;
use super::permit::{Act, Permit, own};

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

/// Whether proxsync may change the existing group or rule `id` (`what`: its kind, for the
/// message): only one carrying `mark`.
pub fn may_change(what: &str, id: &str, comment: Option<&str>, mark: &str) -> Result<(), String> {
    if comment == Some(mark) {
        return Ok(());
    }
    Err(format!(
        "the {what} {id} exists and proxsync did not make it (its comment is {}, not {mark:?}): \
         proxsync never changes a {what} it did not make; rename or remove it (ha-manager), or \
         drop ha.nodes from the spec",
        comment.map_or_else(|| "empty".to_string(), |c| format!("{c:?}"))
    ))
}

/// Whether proxsync may remove the group or rule `id` made for VM `vm`: it is the VM's id
/// ([`affinity_id`]), the spec's record names it as made by proxsync (`recorded`) and it still
/// carries `mark`. A refusal is no failure: the caller leaves it to a person and says so.
pub fn may_remove(
    vm: &VerifiedMarker,
    what: &str,
    id: &str,
    recorded: Option<&str>,
    comment: Option<&str>,
    mark: &str,
) -> Result<Permit, String> {
    own(vm)?;
    if id != affinity_id(vm.vmid()) {
        return Err(format!(
            "the {what} {id} is not the one proxsync makes for VM {}: left to a person",
            vm.vmid()
        ));
    }
    if recorded != Some(id) {
        return Err(format!(
            "the {what} {id} is not recorded as made by proxsync for this spec: left to a person"
        ));
    }
    if comment != Some(mark) {
        return Err(format!(
            "the {what} {id} no longer carries proxsync's mark {mark:?} (someone changed it): left \
             to a person"
        ));
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
) -> Result<Permit, String> {
    own(vm)?;
    let sid = kind.ha_sid(vm.vmid());
    if !applied {
        return Err(format!(
            "the HA resource {sid} is not recorded as added by proxsync for this spec: left to a \
             person"
        ));
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
        let rule = "HA node-affinity rule";
        assert!(may_change(rule, "proxsync-vm100", Some(&mark), &mark).is_ok());
        let why = may_change(rule, "proxsync-vm100", Some("ops: keep on pve1"), &mark).unwrap_err();
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
        assert!(other.unwrap_err().contains("not the one"));
        let why = may_remove(
            &vm,
            rule,
            "proxsync-vm100",
            Some("proxsync-vm100"),
            Some("edited"),
            &mark,
        )
        .unwrap_err();
        assert!(why.contains("left to a person"), "{why}");
    }
}
