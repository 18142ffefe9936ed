//! A spec's `node` changed within its cluster: the VM is migrated by PVE (live when it runs,
//! carrying local disks along), never recreated; a VM PVE cannot move stays where it is and is
//! reported with PVE's reason. Against the harness's model of qemu-server's migration
//! (`GET`/`POST .../migrate`; fakepve 0.5.0 has none).

use crate::common;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, default_scenario};
use serde_json::json;

fn created(pve: &mut FakePve, ws: &Workspace, name: &str, image: &str, extra: &str) -> u32 {
    ws.commit_specs(&[(&format!("{name}.yaml"), spec(name, "pve1", image, extra))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms = owned_vms(pve);
    assert_eq!(vms.len(), 1, "{out}");
    vms[0].0 as u32
}

fn migrate_posts(pve: &mut FakePve) -> Vec<common::RecordedRequest> {
    pve.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/migrate"))
        .collect()
}

fn creates_or_deletes(pve: &mut FakePve) -> usize {
    pve.requests()
        .into_iter()
        .filter(|r| {
            (r.method == "POST" && (r.path.ends_with("/qemu") || r.path.ends_with("/clone")))
                || r.method == "DELETE"
        })
        .count()
}

#[test]
fn a_node_change_migrates_the_running_vm_live_with_its_local_disks() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vmid = created(&mut pve, &ws, "web-01", "9000", "");
    assert_eq!(pve.vm(vmid)["status"], "running");
    pve.clear_requests();

    ws.commit_specs(&[("web-01.yaml", spec("web-01", "pve2", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    assert_eq!(vm["node"], "pve2", "{out}");
    assert_eq!(
        vm["status"], "running",
        "a live migration keeps the VM running: {out}"
    );
    let posts = migrate_posts(&mut pve);
    assert_eq!(posts.len(), 1, "{posts:?}");
    // Running, with its disk on local-lvm (not shared): PVE needs both flags.
    assert!(
        posts[0].body.contains("online=1") && posts[0].body.contains("with-local-disks=1"),
        "{posts:?}"
    );
    assert_eq!(creates_or_deletes(&mut pve), 0, "never a recreate: {out}");
    assert_eq!(owned_vms(&mut pve).len(), 1);
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{out}");
    assert_eq!(ws.status("web-01")["node"], "pve2");

    // Nothing left to do: the next cycle sends no migration.
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(migrate_posts(&mut pve).is_empty(), "{out}");
}

#[test]
fn a_stopped_vm_is_migrated_offline() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let stopped = "    powerState: stopped\n";
    let vmid = created(&mut pve, &ws, "db-01", "9000", stopped);
    assert_eq!(pve.vm(vmid)["status"], "stopped");
    ws.commit_specs(&[("db-01.yaml", spec("db-01", "pve2", "9000", stopped))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(pve.vm(vmid)["node"], "pve2", "{out}");
    assert_eq!(pve.vm(vmid)["status"], "stopped", "{out}");
    let posts = migrate_posts(&mut pve);
    assert_eq!(posts.len(), 1, "{posts:?}");
    // `online` is always sent: PVE migrates a stopped VM offline with it (qemu-server
    // `migrate_vm`), and a VM started meanwhile still moves.
    assert!(posts[0].body.contains("online=1"), "{posts:?}");
}

#[test]
fn a_vm_with_a_local_cdrom_image_stays_where_it_is_and_says_why() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let iso = "local:iso/debian-12.7.0-amd64-netinst.iso";
    let vmid = created(&mut pve, &ws, "inst-01", iso, "");
    pve.clear_requests();

    ws.commit_specs(&[("inst-01.yaml", spec("inst-01", "pve2", iso, ""))]);
    let (_ok, out) = ws.run_once();
    assert_eq!(pve.vm(vmid)["node"], "pve1", "{out}");
    assert!(
        migrate_posts(&mut pve).is_empty(),
        "PVE's pre-check says it cannot move: nothing is sent"
    );
    let (status, reason, message) = ws.condition("inst-01", "Stalled");
    assert_eq!(status, "True", "{reason}: {message}");
    assert!(
        message.contains("local cdrom image") && message.contains(iso),
        "{message}"
    );
    assert!(
        message.contains("node: pve1"),
        "says how to undo: {message}"
    );
    assert_eq!(creates_or_deletes(&mut pve), 0);
}

#[test]
fn a_migration_under_way_is_waited_for_and_not_requested_again() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vmid = created(&mut pve, &ws, "web-01", "9000", "");
    // A migration to pve2 already running (ours from before a crash, or a person's), holding
    // the `migrate` lock for 300 PVE seconds (3 s here).
    pve.set_time_scale(0.01);
    pve.call(
        "migrate",
        json!({"vmid": vmid, "target": "pve2", "secs": 300}),
    )
    .unwrap();
    pve.clear_requests();
    ws.commit_specs(&[("web-01.yaml", spec("web-01", "pve2", "9000", ""))]);
    let (_ok, out) = ws.run_once();
    assert!(migrate_posts(&mut pve).is_empty(), "{out}");
    let (_, reason, message) = ws.condition("web-01", "Ready");
    assert_eq!(reason, "WaitingForLock", "{message}");
    assert!(message.contains("qmigrate"), "{message}");

    std::thread::sleep(std::time::Duration::from_secs(4));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(pve.vm(vmid)["node"], "pve2");
    assert!(migrate_posts(&mut pve).is_empty(), "{out}");
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{out}");
}

#[test]
fn an_ha_managed_vm_is_migrated_by_the_ha_manager() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vmid = created(&mut pve, &ws, "web-01", "9000", "");
    pve.set_vm(vmid, json!({"ha_state": "started"}));
    ws.commit_specs(&[("web-01.yaml", spec("web-01", "pve2", "9000", ""))]);
    let (_ok, out) = ws.run_once();
    let (_, reason, message) = ws.condition("web-01", "Ready");
    assert!(
        reason == "WaitingForLock" && message.contains("HA manager"),
        "{reason}: {message}\n{out}"
    );
    assert!(
        pve.tasks().iter().any(|t| t["type"] == "hamigrate"),
        "PVE hands an HA-managed VM's migration to the HA manager: {:?}",
        pve.tasks()
    );
    // The HA manager moved it (ha_delay is 0 at time_scale 0); the next cycle sees it there.
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(pve.vm(vmid)["node"], "pve2", "{out}");
    assert_eq!(migrate_posts(&mut pve).len(), 1, "{out}");
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{out}");
}
