//! The VM surface as a real Proxmox VE 8.4 or 9.x cluster decides it, where proxsync once
//! differed: privileges PVE checks on paths or options doctor did not ask for, HA groups that
//! PVE 9 turned into rules, machine pinning of Windows guests, the HA manager's hard stops and
//! error state, every NIC's bridge, a migration of a VM started meanwhile. Each case runs
//! proxsync against the harness's model of PVE (`tests/fake_fidelity.rs` checks the models).

mod common;

use std::path::Path;
use std::process::Command;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, Scenario, TOKEN_ID, TOKEN_SECRET, default_scenario};
use serde_json::{Value, json};

/// A config value as a string, whether PVE (or the fake) stored it as a number or a string.
fn value(v: &Value) -> String {
    v.to_string().trim_matches('"').to_string()
}

// ------------------------------------------------------------------------ every NIC's bridge

#[test]
fn a_create_checks_the_bridge_of_every_nic() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let nics = "    networks:\n      - {bridge: vmbr0}\n      - {bridge: vmbr9}\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", nics))]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert!(
        owned_vms(&mut pve).is_empty(),
        "no VM whose start would fail: {out}"
    );
    let (s, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!((s.as_str(), reason.as_str()), ("True", "ConfigurationError"));
    assert!(message.contains("bridge vmbr9 does not exist on node pve1"), "{message}");
}

// ------------------------------------------------------------------- a migration's `online`

#[test]
fn a_vm_started_after_the_migrate_pre_check_is_migrated_live() {
    // qemu-server `migrate_vm` refuses a running VM without `online` and migrates a stopped
    // one offline when `online` is sent: proxsync always sends it, so a VM started between
    // the pre-check and the request moves anyway.
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let stopped = "    powerState: stopped\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", stopped))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    assert_eq!(pve.vm(vmid)["status"], "stopped");

    // Someone starts it right before proxsync's migrate request.
    pve.call(
        "set_vm_before",
        json!({"method": "POST", "suffix": "/migrate", "vmid": vmid, "status": "running"}),
    )
    .unwrap();
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve2", "9000", stopped))]);
    let (_, out) = ws.run_once();
    let vm = pve.vm(vmid);
    assert_eq!(vm["node"], "pve2", "migrated: {out}");
    let migrate = pve
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path.ends_with("/migrate"))
        .expect("a migrate request");
    assert!(migrate.body.contains("online=1"), "{}", migrate.body);
}

// ------------------------------------------------------------------- machine pinning

const IMPORT: &str = "local:import/debian-12-genericcloud-amd64.qcow2";

#[test]
fn a_windows_vm_keeps_the_machine_version_pve_pinned() {
    // qemu-server pins a Windows guest's `q35` to `pc-q35-10.0+pve1` at create: that is the
    // spec's q35, and a later converge must not write bare `q35` back (the machine version
    // would then change at each start).
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let win = "    machine: q35\n    osType: win11\n";
    ws.commit_specs(&[("win.yaml", spec("win-01", "pve1", IMPORT, win))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    assert_eq!(
        value(&pve.vm(vmid)["config"]["machine"]),
        "pc-q35-10.0+pve1"
    );

    // Another change makes proxsync converge the VM's config.
    let win = format!("{win}    description: Windows 11 build host\n");
    ws.commit_specs(&[("win.yaml", spec("win-01", "pve1", IMPORT, &win))]);
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    assert_eq!(value(&vm["config"]["machine"]), "pc-q35-10.0+pve1", "{vm}");
    assert!(vm["pending"].get("machine").is_none(), "{vm}");
    assert!(
        value(&vm["config"]["description"]).starts_with("Windows 11 build host"),
        "converged: {vm}"
    );
    for r in pve.requests() {
        assert!(!r.body.contains("machine="), "{} {}: {}", r.method, r.path, r.body);
    }
}
