//! Real-cluster fidelity (issue #14): what proxsync does where a real PVE cluster behaves
//! differently from the easy case, against the harness's model of it: a paused VM, a clone to
//! another node, a long task log, a network boot order, a new cloud-init drive, an HA-managed VM.

use crate::common;

use std::time::Duration;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, Scenario, default_scenario};
use proxsync::pve::Error;
use serde_json::json;

fn stopped(name: &str, extra: &str) -> String {
    spec(
        name,
        "pve1",
        "9000",
        &format!("    powerState: stopped\n{extra}"),
    )
}

/// A spec's VM, created and running.
fn running_vm(pve: &mut FakePve, ws: &Workspace, name: &str) -> u32 {
    ws.commit_specs(&[(&format!("{name}.yaml"), spec(name, "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms = owned_vms(pve);
    assert_eq!(vms.len(), 1, "{out}");
    let vmid = vms[0].0 as u32;
    assert_eq!(pve.vm(vmid)["status"], "running", "{out}");
    vmid
}

// ------------------------------------------------------------------- (1) a paused VM

#[test]
fn a_paused_vm_is_stopped_when_its_spec_says_stopped() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vmid = running_vm(&mut pve, &ws, "web-01");
    // Paused (a backup interrupted, `qm suspend` without --todisk): PVE lists it as running.
    pve.set_vm(vmid, json!({"status": "running", "qmpstatus": "paused"}));
    ws.commit_specs(&[("web-01.yaml", stopped("web-01", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(pve.vm(vmid)["status"], "stopped", "{out}");
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{out}");
    // One shutdown that stops by itself after its timeout (forceStop), no refusal.
    let shutdowns: Vec<_> = pve
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/status/shutdown"))
        .collect();
    assert_eq!(shutdowns.len(), 1, "{shutdowns:?}");
    assert!(shutdowns[0].body.contains("forceStop=1"), "{shutdowns:?}");
}

#[test]
fn a_failed_shutdown_is_followed_by_a_stop_that_overrules_it() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vmid = running_vm(&mut pve, &ws, "web-01");
    pve.fail_error("POST", "/status/shutdown", "quit_powerdown_failed", Some(1));
    ws.commit_specs(&[("web-01.yaml", stopped("web-01", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(pve.vm(vmid)["status"], "stopped", "{out}");
    let stop = pve
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/status/stop"))
        .expect("a stop");
    assert!(stop.body.contains("overrule-shutdown=1"), "{stop:?}");
}

/// Interrupted while a slow shutdown runs: the next run waits for that shutdown rather than
/// sending a second one that would queue behind its lock.
#[test]
fn a_shutdown_still_running_is_waited_for_not_sent_again() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vmid = running_vm(&mut pve, &ws, "web-01");
    pve.set_time_scale(1.0);
    pve.set_vm(vmid, json!({"shutdown_secs": 3}));
    ws.commit_specs(&[("web-01.yaml", stopped("web-01", ""))]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(["run", "--once", "--config"])
        .arg(ws.config())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start proxsync");
    let sent = |pve: &mut FakePve| {
        pve.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/status/shutdown"))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while sent(&mut pve) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(sent(&mut pve), 1, "the shutdown was sent");
    assert_eq!(pve.vm(vmid)["status"], "running", "killed before it ended");
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(pve.vm(vmid)["status"], "stopped", "{out}");
    assert_eq!(sent(&mut pve), 1, "no second shutdown: {out}");
}

// ------------------------------------------------------------------- (2) clone to another node

fn shared_storage_scenario() -> Scenario {
    Scenario::default()
        .storage(
            "ceph",
            json!({"type": "rbd", "content": "images", "shared": 1, "pool": "rbd"}),
        )
        .vm(json!({
            "vmid": 9100, "name": "shared-tpl", "node": "pve1", "status": "stopped", "template": true,
            "config": {"name": "shared-tpl", "scsi0": "ceph:base-9100-disk-0,size=2G",
                       "net0": "virtio=BC:24:11:00:91:00,bridge=vmbr0", "boot": "order=scsi0",
                       "ide2": "local:iso/debian-12.7.0-amd64-netinst.iso,media=cdrom"},
        }))
}

#[test]
fn a_clone_to_another_node_of_a_template_with_local_volumes_is_refused_before_sending() {
    let mut pve = shared_storage_scenario().start();
    let ws = Workspace::new(&pve);
    // Template 9000's disk is on local-lvm; 9100's disk is shared but its CD-ROM holds an
    // ISO on `local`. Both are on pve1; the specs want pve2 on the shared storage.
    ws.commit_specs(&[
        (
            "a.yaml",
            spec("a-01", "pve2", "9000", "    storage: ceph\n"),
        ),
        (
            "b.yaml",
            spec("b-01", "pve2", "9100", "    storage: ceph\n"),
        ),
    ]);
    let (_ok, out) = ws.run_once();
    for name in ["a-01", "b-01"] {
        let (status, _reason, message) = ws.condition(name, "Ready");
        assert_eq!(status, "False", "{name}: {out}");
        assert!(
            message.contains("shared storage") && message.contains("pve1"),
            "{name}: {message}"
        );
    }
    assert!(message_names(
        &ws,
        "a-01",
        "scsi0=local-lvm:base-9000-disk-0"
    ));
    assert!(message_names(
        &ws,
        "b-01",
        "ide2=local:iso/debian-12.7.0-amd64-netinst.iso"
    ));
    let clones: Vec<_> = pve
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/clone"))
        .collect();
    assert!(clones.is_empty(), "no clone request is sent: {clones:?}");
    assert!(owned_vms(&mut pve).is_empty());
}

fn message_names(ws: &Workspace, name: &str, what: &str) -> bool {
    let (_, _, message) = ws.condition(name, "Ready");
    message.contains(what)
}

#[test]
fn a_template_on_shared_storage_clones_to_another_node() {
    let mut pve = Scenario::default()
        .storage(
            "ceph",
            json!({"type": "rbd", "content": "images", "shared": 1, "pool": "rbd"}),
        )
        .vm(json!({
            "vmid": 9100, "name": "shared-tpl", "node": "pve1", "status": "stopped", "template": true,
            "config": {"name": "shared-tpl", "scsi0": "ceph:base-9100-disk-0,size=2G",
                       "net0": "virtio=BC:24:11:00:91:00,bridge=vmbr0", "boot": "order=scsi0",
                       "ide2": "none,media=cdrom"},
        }))
        .start();
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[(
        "a.yaml",
        spec("a-01", "pve2", "9100", "    storage: ceph\n"),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms = owned_vms(&mut pve);
    assert_eq!(vms.len(), 1, "{out}");
    assert_eq!(pve.vm(vms[0].0 as u32)["node"], "pve2");
    assert_eq!(ws.condition("a-01", "Ready").0, "True", "{out}");
}

// ------------------------------------------------------------------- (3) a long task log

#[tokio::test]
async fn a_long_task_log_keeps_its_task_error_line() {
    let mut pve = FakePve::start(default_scenario());
    let client = pve.client();
    let upid = pve
        .call(
            "task_with_log",
            json!({"node": "pve1", "lines": 6000, "error": "disk image went away"}),
        )
        .expect("a task");
    let upid: proxsync::pve::Upid = upid.as_str().unwrap().parse().unwrap();
    let err = client
        .wait_task(&upid, Duration::from_secs(10))
        .await
        .expect_err("the task failed");
    let Error::TaskFailed { log_tail, .. } = err else {
        panic!("{err:?}");
    };
    assert_eq!(log_tail.len(), 10, "{log_tail:?}");
    assert_eq!(
        log_tail.last().map(String::as_str),
        Some("TASK ERROR: disk image went away"),
        "{log_tail:?}"
    );
    assert_eq!(log_tail[0], "line 5993", "{log_tail:?}");
}

// ------------------------------------------------------------------- (4) network boot first

#[test]
fn a_network_boot_order_grows_the_disk_not_the_nic() {
    let mut pve = Scenario::default()
        .vm(json!({
            "vmid": 9200, "name": "pxe-tpl", "node": "pve1", "status": "stopped", "template": true,
            "config": {"name": "pxe-tpl", "scsi0": "local-lvm:base-9200-disk-0,size=2G",
                       "net0": "virtio=BC:24:11:00:92:00,bridge=vmbr0", "boot": "order=net0;scsi0"},
        }))
        .start();
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("a-01", "pve1", "9200", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms = owned_vms(&mut pve);
    assert_eq!(vms.len(), 1, "{out}");
    let cfg = pve.vm(vms[0].0 as u32)["config"].clone();
    assert!(
        cfg["scsi0"]
            .as_str()
            .unwrap_or_default()
            .contains("size=8G"),
        "{cfg}"
    );
    assert_eq!(ws.condition("a-01", "Ready").0, "True", "{out}");
    let resizes: Vec<_> = pve
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/resize"))
        .collect();
    assert!(
        resizes.iter().all(|r| r.body.contains("disk=scsi0")),
        "{resizes:?}"
    );
}

// ------------------------------------------------------------------- (5) a new cloud-init drive

#[test]
fn a_cloud_init_drive_is_added_with_the_asynchronous_config_call() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[(
        "a.yaml",
        spec(
            "a-01",
            "pve1",
            "9000",
            "    cloudInit:\n      user: alice\n      ipConfig: [{ip: dhcp}]\n",
        ),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    let cfg = pve.vm(vmid)["config"].clone();
    assert!(
        cfg.as_object()
            .unwrap()
            .values()
            .any(|v| v.as_str().is_some_and(|v| v.contains("cloudinit"))),
        "{cfg}"
    );
    let reqs = pve.requests();
    let adds: Vec<_> = reqs
        .iter()
        .filter(|r| r.path.ends_with("/config") && r.body.contains("cloudinit"))
        .collect();
    assert!(!adds.is_empty(), "{reqs:?}");
    assert!(
        adds.iter().all(|r| r.method == "POST"),
        "a drive that allocates storage goes through POST .../config: {adds:?}"
    );
}

// ------------------------------------------------------------------- (9) HA-managed VMs

#[test]
fn an_ha_managed_vm_is_stopped_once_the_ha_manager_has_stopped_it() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vmid = running_vm(&mut pve, &ws, "web-01");
    // The HA manager acts 100 PVE seconds after the request (1 s here); its hastop task ends
    // at once.
    pve.set_vm(vmid, json!({"ha_state": "started"}));
    pve.call("set_model", json!({"ha_delay": 100})).unwrap();
    pve.set_time_scale(0.01);
    ws.commit_specs(&[("web-01.yaml", stopped("web-01", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(
        pve.vm(vmid)["status"],
        "stopped",
        "run --once returned before the HA manager stopped the VM: {out}"
    );
    assert!(
        pve.tasks().iter().any(|t| t["type"] == "hastop"),
        "{:?}",
        pve.tasks()
    );
}
