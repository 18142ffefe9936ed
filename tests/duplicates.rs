//! Two VMs claiming one spec are surfaced, never ignored: someone clones a managed VM in the
//! web UI (PVE copies the description, marker included, and the tags). The spec turns
//! `Ready: False / DuplicateVM` naming every VMID, `_orphans.yaml` lists the extras with
//! `duplicateOf`, `proxsync status` shows them, and the orphan policy applies to the extras
//! only: a tagged, stopped extra is deleted after the grace period (its marker read again), a
//! running one is only reported, and the spec's own VM is never touched.

mod common;

use common::engine::{Workspace, spec};
use common::{FakePve, default_scenario};
use serde_json::json;

/// A hand clone of VM `of`: same config (description with the marker, tags), new VMID.
fn hand_clone(pve: &mut FakePve, of: u64, vmid: u32, status: &str) {
    let original = pve.vm(of as u32);
    let mut config = original["config"].clone();
    config["name"] = json!("web-copy");
    pve.add_vm(json!({
        "vmid": vmid,
        "name": "web-copy",
        "node": "pve1",
        "status": status,
        "config": config,
    }));
}

#[test]
fn a_hand_clone_of_a_managed_vm_is_reported_and_only_the_extra_is_handled() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(
        &pve,
        "[reconcile]\norphans = \"delete-stopped\"\norphan_grace = \"1s\"\n",
    );
    ws.commit_specs(&[("web.yaml", spec("web", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let kept = ws.status("web")["vmId"].as_u64().expect("a VMID");

    // A running copy and a stopped copy, both with the marker and the tag.
    hand_clone(&mut pve, kept, 201, "running");
    hand_clone(&mut pve, kept, 202, "stopped");
    let (ok, out) = ws.run_once();
    assert!(!ok, "two VMs claiming a spec is not Ready: {out}");
    let (status, reason, message) = ws.condition("web", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "DuplicateVM"),
        "{message}"
    );
    for id in [kept.to_string(), "201".into(), "202".into()] {
        assert!(message.contains(&id), "names VM {id}: {message}");
    }
    let orphans = std::fs::read_to_string(ws.path("status/_orphans.yaml")).unwrap();
    assert!(
        orphans.contains("vmId: 201") && orphans.contains("vmId: 202"),
        "{orphans}"
    );
    assert!(orphans.contains("duplicateOf: web"), "{orphans}");
    assert!(
        !orphans.contains(&format!("vmId: {kept}")),
        "the spec's VM is not an orphan: {orphans}"
    );
    let shown = ws.proxsync(&["status"]);
    let shown = common::engine::text(&shown);
    assert!(
        shown.contains("DuplicateVM") && shown.contains("duplicate of web"),
        "{shown}"
    );

    // Past the grace period: the stopped extra goes, the running one stays reported, the
    // spec's VM is untouched.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let (_, out) = ws.run_once();
    let vmids: Vec<u64> = pve
        .vms()
        .iter()
        .filter_map(|v| v["vmid"].as_u64())
        .collect();
    assert!(
        !vmids.contains(&202),
        "the stopped extra is deleted: {vmids:?}\n{out}"
    );
    assert!(
        vmids.contains(&201),
        "the running extra is only reported: {vmids:?}"
    );
    assert!(vmids.contains(&kept), "the spec's VM stays: {vmids:?}");
    let orphans = std::fs::read_to_string(ws.path("status/_orphans.yaml")).unwrap();
    assert!(
        orphans.contains("vmId: 201") && orphans.contains("action: reported"),
        "{orphans}"
    );

    // Once the running copy is gone too, the spec is Ready again.
    pve.set_vm(201, json!({"status": "stopped"}));
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let _ = ws.run_once();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let (status, reason, _) = ws.condition("web", "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Available"));
}
