//! The gate's permits where the calls leave proxsync: `pve::Client` refuses a destructive or
//! identity-changing call without the permit for it before anything reaches Proxmox VE
//! (fakepve's request log shows nothing), and sends it with one. The permits are made as
//! `execute` makes them: from the VM's marker verified on a site the observation checked.

use crate::common;

use common::{FakePve, default_scenario};
use proxsync::gate::identity::{VerifiedMarker, verify};
use proxsync::gate::volume::{self, Protection};
use proxsync::gate::{self, permit};
use proxsync::ownership::{Marker, MarkerKey};
use proxsync::pve::ha::{AffinityKind, AffinityParams};
use proxsync::pve::{Client, Error, VmParams};
use serde_json::json;

const VMID: u32 = 120;
const SPEC: &str = "web-01";

fn key() -> MarkerKey {
    MarkerKey::from_bytes([7; 32])
}

/// fakepve with VM 120 of spec `web-01`: its signed marker, this install's tag, a second disk.
fn fake() -> FakePve {
    let mut pve = FakePve::start(default_scenario());
    let marker = Marker::signed(&key(), "main", SPEC, "u1", VMID).description();
    pve.add_vm(json!({
        "vmid": VMID,
        "name": SPEC,
        "node": "pve1",
        "status": "stopped",
        "config": {
            "name": SPEC,
            "description": marker,
            "tags": "proxsync.main;web",
            "scsi0": "local-lvm:vm-120-disk-0,size=2G",
            "scsi1": "local-lvm:vm-120-disk-1,size=1G",
            "boot": "order=scsi0",
        },
    }));
    pve.clear_requests();
    pve
}

/// The VM's marker, verified on the site as a cycle observes and checks it.
async fn ours(c: &Client) -> VerifiedMarker {
    let view = proxsync::observe::observe_site("lab", c).await;
    let site = gate::site::checked(&view).expect("a reachable site");
    let cfg = c
        .vm_config("pve1", proxsync::guest::GuestKind::Qemu, VMID)
        .await
        .expect("the VM");
    verify(
        &site,
        &key(),
        "main",
        proxsync::guest::GuestKind::Qemu,
        VMID,
        cfg.description(),
        Some(SPEC),
        None,
    )
    .expect("ours")
}

fn refused(e: Error) {
    assert!(
        matches!(&e, Error::NotPermitted(m) if m.contains("nothing was sent")),
        "{e}"
    );
}

/// Each guarded edit of a config write, without its permit: refused by the synchronous and the
/// asynchronous write alike, and not one request sent.
#[tokio::test]
async fn a_guarded_config_write_without_its_permit_sends_nothing() {
    let mut pve = fake();
    let c = pve.client();
    let before = pve.vm(VMID);
    let other_spec = Marker::signed(&key(), "main", "db-01", "u1", VMID).description();
    let seed = format!(
        "local:iso/{}",
        proxsync::cloudinit::seed_file_name("main", SPEC, &"ab".repeat(32))
    );
    let writes = [
        VmParams::new().delete_keys(&["scsi1"]),
        VmParams::new().delete_keys(&["scsi1"]).set("force", "1"),
        VmParams::new().delete_keys(&["unused0"]),
        VmParams::new().set("description", &other_spec),
        VmParams::new().set("description", "Released by hand"),
        VmParams::new().delete_keys(&["description"]),
        VmParams::new().tags(&["web"]).unwrap(),
        VmParams::new().delete_keys(&["tags"]),
        VmParams::new().cdrom("ide3", &seed).unwrap(),
        VmParams::new()
            .import_disk(
                "scsi2",
                "local-lvm",
                "local:import/debian-12-genericcloud-amd64.qcow2",
            )
            .unwrap(),
    ];
    for params in &writes {
        refused(
            c.set_config("pve1", proxsync::guest::GuestKind::Qemu, VMID, params, None)
                .await
                .unwrap_err(),
        );
        refused(
            c.set_config_async("pve1", VMID, params, None)
                .await
                .unwrap_err(),
        );
    }
    assert_eq!(pve.requests(), Vec::new(), "nothing reached PVE");
    assert_eq!(pve.vm(VMID), before);
    // A write without a guarded edit needs no permit.
    let cores = VmParams::new()
        .set("cores", 2)
        .tags(&["proxsync.main", "db"]);
    c.set_config(
        "pve1",
        proxsync::guest::GuestKind::Qemu,
        VMID,
        &cores.unwrap(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(pve.requests().len(), 1);
}

/// With its permit a detach goes through, and PVE keeps the volume as `unusedN`; the same permit
/// on another VM, or a permit for another act, sends nothing.
#[tokio::test]
async fn a_detach_is_sent_with_its_permit_only() {
    let mut pve = fake();
    let c = pve.client();
    let ours = ours(&c).await;
    pve.clear_requests();
    let off = Protection {
        on: false,
        managed: None,
    };
    let detach = volume::detach(&ours, off, &["scsi1".to_string()]).unwrap();
    let params = VmParams::new().detach(&detach).unwrap();
    refused(
        c.set_config("pve1", proxsync::guest::GuestKind::Qemu, 121, &params, None)
            .await
            .unwrap_err(),
    );
    let sign = permit::sign(&ours).unwrap();
    assert!(VmParams::new().detach(&sign).is_err());
    assert!(VmParams::new().destroy_drive(&detach).is_err());
    assert_eq!(pve.requests(), Vec::new());

    c.set_config(
        "pve1",
        proxsync::guest::GuestKind::Qemu,
        VMID,
        &params,
        None,
    )
    .await
    .unwrap();
    let cfg = c
        .vm_config("pve1", proxsync::guest::GuestKind::Qemu, VMID)
        .await
        .unwrap();
    assert_eq!(cfg.get("scsi1"), None);
    assert_eq!(cfg.get("unused0"), Some("local-lvm:vm-120-disk-1"));
}

/// A seed image deleted only with the permit for that very volume; an HA rule removed only with
/// the permit for that rule.
#[tokio::test]
async fn a_volume_an_ha_rule_or_resource_is_removed_with_its_permit_only() {
    let mut pve = fake();
    let c = pve.client();
    let ours = ours(&c).await;
    let name = proxsync::cloudinit::seed_file_name("main", SPEC, &"cd".repeat(32));
    pve.store_file("local", &name, 2048, "iso");
    let seed = format!("local:iso/{name}");
    let other = format!(
        "local:iso/{}",
        proxsync::cloudinit::seed_file_name("main", SPEC, &"ef".repeat(32))
    );
    let mark = gate::ha::affinity_mark("main", SPEC);
    let rule = gate::ha::affinity_id(VMID);
    let params = AffinityParams {
        nodes: vec![("pve1".into(), 1)],
        strict: false,
        sid: format!("vm:{VMID}"),
        comment: mark.clone(),
    };
    c.add_ha_resource(
        proxsync::guest::GuestKind::Qemu,
        VMID,
        &proxsync::pve::ha::HaParams {
            state: "stopped".into(),
            group: None,
            max_restart: 1,
            max_relocate: 1,
            comment: mark.clone(),
        },
    )
    .await
    .unwrap();
    c.add_ha_affinity(AffinityKind::Rule, &rule, &params)
        .await
        .unwrap();
    pve.clear_requests();

    let delete_other = volume::seed_delete(&ours, &other, &[]).unwrap();
    refused(
        c.delete_volume("pve1", "local", &seed, &delete_other)
            .await
            .unwrap_err(),
    );
    let delete_vm = permit::remove(&ours, SPEC, false).unwrap();
    refused(
        c.remove_ha_affinity(AffinityKind::Rule, &rule, &delete_vm)
            .await
            .unwrap_err(),
    );
    let qemu = proxsync::guest::GuestKind::Qemu;
    refused(
        c.remove_ha_resource(qemu, VMID, true, &delete_vm)
            .await
            .unwrap_err(),
    );
    // The permit of another guest's resource (a container's `ct:N` at the same VMID).
    let ct_resource =
        gate::ha::may_remove_resource(&ours, proxsync::guest::GuestKind::Lxc, true).unwrap();
    refused(
        c.remove_ha_resource(qemu, VMID, true, &ct_resource)
            .await
            .unwrap_err(),
    );
    assert!(
        gate::ha::may_remove_resource(&ours, qemu, false).is_err(),
        "a resource proxsync did not add is left to a person"
    );
    assert_eq!(pve.requests(), Vec::new());

    let delete_seed = volume::seed_delete(&ours, &seed, &[]).unwrap();
    c.delete_volume("pve1", "local", &seed, &delete_seed)
        .await
        .unwrap();
    let what = AffinityKind::Rule;
    let remove = gate::ha::may_remove(&ours, what, &rule, Some(&rule), Some(&mark), &mark).unwrap();
    c.remove_ha_affinity(AffinityKind::Rule, &rule, &remove)
        .await
        .unwrap();
    let resource = gate::ha::may_remove_resource(&ours, qemu, true).unwrap();
    c.remove_ha_resource(qemu, VMID, false, &resource)
        .await
        .unwrap();
    let sent: Vec<String> = pve.requests().iter().map(|r| r.method.clone()).collect();
    assert_eq!(sent, ["DELETE", "DELETE", "DELETE"]);
    assert!(c.ha_resource(qemu, VMID).await.unwrap().is_none());
    assert!(
        c.ha_affinity(AffinityKind::Rule, &rule)
            .await
            .unwrap()
            .is_none()
    );
}
