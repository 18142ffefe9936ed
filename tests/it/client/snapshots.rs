//! The client's snapshot calls against fakepve, as PVE makes them (pve-guest-common
//! src/PVE/AbstractConfig.pm snapshot_create, snapshot_rollback, snapshot_delete; qemu-server
//! src/PVE/API2/Qemu.pm and pve-container src/PVE/API2/LXC/Snapshot.pm): each a task of its kind
//! (`qmsnapshot`/`vzsnapshot`, `qmrollback`/`vzrollback`, `qmdelsnapshot`/`vzdelsnapshot`) whose
//! worker makes PVE's checks, so a locked guest, a name taken or missing and a storage that cannot
//! snapshot end the task, in PVE's words, each a text of `pve::texts`. A rollback and a delete
//! need the gate's permit for that snapshot of that guest, and without it send nothing.
//!
//! The permits are made with `Permit::new` here: the gate has no decision for a rollback or a
//! snapshot's delete yet (`tests/tidy.rs` keeps the daemon's code from making one; tests may).

use crate::common;

use std::time::Duration;

use common::{FakePve, Scenario, TOKEN_ID, TOKEN_SECRET, token_header, verified_client};
use proxsync::category::Category;
use proxsync::guest::GuestKind::{self, Lxc, Qemu};
use proxsync::pve::permit::{Act, Permit};
use proxsync::pve::texts::Meaning;
use proxsync::pve::{Client, Error, TaskOutcome, Upid, VmParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);
/// 1 PVE second = 10 ms: a 100 s task lasts 1 s.
const SCALE: f64 = 0.01;
/// The description each guest starts with: where proxsync's marker line lives.
const MARK: &str = "proxsync: the marker line";

/// A stopped VM (130) and a stopped container (330) on `local-lvm` (thin LVM: it snapshots),
/// and a VM (131) and a container (331) with a volume on `local` (a `dir` storage's raw image:
/// it does not).
fn scenario() -> Scenario {
    Scenario::default()
        .vm(
            json!({"vmid": 130, "name": "vm130", "node": "pve1", "status": "stopped",
                   "config": {"name": "vm130", "description": MARK, "memory": "1024",
                              "scsi0": "local-lvm:vm-130-disk-0,size=8G", "boot": "order=scsi0"}}),
        )
        .vm(
            json!({"vmid": 131, "name": "vm131", "node": "pve1", "status": "stopped",
                   "config": {"name": "vm131", "memory": "1024",
                              "scsi0": "local-lvm:vm-131-disk-0,size=8G",
                              "scsi1": "local:131/vm-131-disk-1.raw,size=1G"}}),
        )
        .ct(
            json!({"vmid": 330, "name": "ct330", "node": "pve1", "status": "stopped",
                   "config": {"hostname": "ct330", "description": MARK, "memory": "512",
                              "ostype": "debian", "rootfs": "local-lvm:vm-330-disk-0,size=8G"}}),
        )
        .ct(
            json!({"vmid": 331, "name": "ct331", "node": "pve1", "status": "stopped",
                   "config": {"hostname": "ct331", "memory": "512", "ostype": "debian",
                              "rootfs": "local:331/vm-331-disk-0.raw,size=8G"}}),
        )
}

fn rollback_permit(vmid: u32, name: &str) -> Permit {
    Permit::new(
        "lab",
        vmid,
        Act::Rollback {
            snapshot: name.into(),
        },
    )
}

fn delete_permit(vmid: u32, name: &str) -> Permit {
    Permit::new(
        "lab",
        vmid,
        Act::DeleteSnapshot {
            snapshot: name.into(),
        },
    )
}

/// The task types of a guest kind: qemu-server's `qm*`, pve-container's `vz*`.
fn prefix(kind: GuestKind) -> &'static str {
    match kind {
        Qemu => "qm",
        Lxc => "vz",
    }
}

/// The harness's dump of guest `vmid` of `kind`.
fn dump(pve: &mut FakePve, kind: GuestKind, vmid: u32) -> Value {
    match kind {
        Qemu => pve.vm(vmid),
        Lxc => pve.ct(vmid),
    }
}

/// A person's edit of the guest's notes (its description) in the web UI: proxsync's own write
/// of it needs a permit.
async fn edit_notes(pve: &FakePve, kind: GuestKind, vmid: u32, text: &str) {
    let url = pve.api_url(&format!("/nodes/pve1/{kind}/{vmid}/config"));
    let answer = verified_client(&pve.ca_pem())
        .put(url)
        .header("Authorization", token_header(TOKEN_ID, TOKEN_SECRET))
        .form(&[("description", text)])
        .send()
        .await
        .expect("an answer");
    assert!(answer.status().is_success(), "{answer:?}");
}

async fn ends_ok(c: &Client, upid: &Upid) {
    assert_eq!(
        c.wait_task(upid, WAIT).await.unwrap(),
        TaskOutcome::Ok,
        "{upid}"
    );
}

/// How a started task failed: its exit status and what `pve::texts` makes of it.
async fn failure(c: &Client, started: Result<Upid, Error>) -> (String, Option<Meaning>, Error) {
    let upid = started.expect("a task: PVE's checks run in the worker");
    let e = c.wait_task(&upid, WAIT).await.unwrap_err();
    let Error::TaskFailed { exitstatus, .. } = &e else {
        panic!("a failed task: {e}");
    };
    (exitstatus.trim_end().to_string(), e.meaning(), e)
}

/// A VM and a container: a snapshot is a `qmsnapshot`/`vzsnapshot` task and is listed without
/// `current` (the guest's own state), with its description; a rollback (`qmrollback`/
/// `vzrollback`) puts back a value changed after the snapshot, keeps the guest's description (so
/// the marker stays; pve-guest-common `__snapshot_apply_config`) and, with `start=1`, starts
/// the guest; a delete (`qmdelsnapshot`/`vzdelsnapshot`) removes it.
#[tokio::test]
async fn a_guest_is_snapshotted_rolled_back_and_its_snapshot_deleted() {
    let mut pve = scenario().start();
    let c = pve.client();
    for (kind, vmid, changed) in [(Qemu, 130, "2048"), (Lxc, 330, "1024")] {
        let p = prefix(kind);
        let upid = c
            .snapshot("pve1", kind, vmid, "before", "taken by proxsync")
            .await
            .unwrap();
        assert_eq!(upid.kind, format!("{p}snapshot"));
        assert_eq!(upid.id, vmid.to_string());
        ends_ok(&c, &upid).await;
        let listed = c.snapshots("pve1", kind, vmid).await.unwrap();
        let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["before"], "no `current`: {listed:?}");
        assert_eq!(listed[0].description, "taken by proxsync");
        assert!(listed[0].snaptime.is_some_and(|t| t > 0), "{listed:?}");

        // After the snapshot: a value changed, the description edited by a person.
        let edited = format!("{MARK}\nnotes typed later");
        let params = VmParams::new().set("memory", changed);
        c.set_config("pve1", kind, vmid, &params, None)
            .await
            .unwrap();
        edit_notes(&pve, kind, vmid, &edited).await;
        let cfg = c.vm_config("pve1", kind, vmid).await.unwrap();
        assert_eq!(cfg.get("memory"), Some(changed));

        let upid = c
            .rollback(
                "pve1",
                kind,
                vmid,
                "before",
                &rollback_permit(vmid, "before"),
            )
            .await
            .unwrap();
        assert_eq!(upid.kind, format!("{p}rollback"));
        ends_ok(&c, &upid).await;
        let cfg = c.vm_config("pve1", kind, vmid).await.unwrap();
        let original = match kind {
            Qemu => "1024",
            Lxc => "512",
        };
        assert_eq!(cfg.get("memory"), Some(original), "the snapshot's value");
        assert_eq!(cfg.description(), Some(edited.as_str()), "the guest's kept");
        assert_eq!(cfg.get("lock"), None);
        assert_eq!(cfg.get("parent"), Some("before"));
        let guest = dump(&mut pve, kind, vmid);
        assert_eq!(guest["status"], "running", "start=1: {guest}");

        let upid = c
            .delete_snapshot("pve1", kind, vmid, "before", &delete_permit(vmid, "before"))
            .await
            .unwrap();
        assert_eq!(upid.kind, format!("{p}delsnapshot"));
        ends_ok(&c, &upid).await;
        assert!(c.snapshots("pve1", kind, vmid).await.unwrap().is_empty());
        let cfg = c.vm_config("pve1", kind, vmid).await.unwrap();
        assert_eq!(cfg.get("parent"), None);
    }
}

/// A rollback or a delete without the permit for that very snapshot of that very guest (none of
/// the act, another snapshot's, another guest's) is refused before anything is sent.
#[tokio::test]
async fn a_rollback_or_delete_without_its_permit_sends_nothing() {
    let mut pve = scenario().start();
    let c = pve.client();
    let upid = c.snapshot("pve1", Qemu, 130, "before", "").await.unwrap();
    ends_ok(&c, &upid).await;
    pve.clear_requests();
    let wrong = [
        Permit::new("lab", 130, Act::DeleteVm),
        rollback_permit(130, "other"),
        rollback_permit(131, "before"),
        delete_permit(130, "before"),
    ];
    for permit in &wrong {
        let e = c
            .rollback("pve1", Qemu, 130, "before", permit)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::NotPermitted(_)), "{e}");
    }
    let wrong = [
        Permit::new("lab", 130, Act::DeleteVm),
        delete_permit(130, "other"),
        delete_permit(330, "before"),
        rollback_permit(130, "before"),
    ];
    for permit in &wrong {
        let e = c
            .delete_snapshot("pve1", Qemu, 130, "before", permit)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::NotPermitted(_)), "{e}");
    }
    let sent = pve.requests();
    assert!(sent.is_empty(), "nothing reaches PVE: {sent:?}");
    let listed = c.snapshots("pve1", Qemu, 130).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
}

/// A guest with a volume on a storage that cannot snapshot (a `dir` storage's raw image): the
/// snapshot task fails `snapshot feature is not available` (pve-guest-common
/// `__snapshot_prepare`), both kinds, a configuration matter and not load; nothing is taken and
/// no lock stays. A name taken and a snapshot missing fail their tasks in PVE's words too.
#[tokio::test]
async fn snapshot_refusals_end_the_task_in_pves_words() {
    let pve = scenario().start();
    let c = pve.client();
    for (kind, vmid) in [(Qemu, 131), (Lxc, 331)] {
        let (text, meaning, e) =
            failure(&c, c.snapshot("pve1", kind, vmid, "before", "").await).await;
        assert_eq!(text, "snapshot feature is not available", "{kind:?}");
        assert_eq!(meaning, Some(Meaning::SnapshotUnsupported));
        assert_eq!(e.category(), Category::ConfigurationError, "{e}");
        assert!(!e.is_overload(), "{e}");
        assert!(c.snapshots("pve1", kind, vmid).await.unwrap().is_empty());
        let cfg = c.vm_config("pve1", kind, vmid).await.unwrap();
        assert_eq!(cfg.get("lock"), None);
    }
    for (kind, vmid) in [(Qemu, 130), (Lxc, 330)] {
        let upid = c.snapshot("pve1", kind, vmid, "before", "").await.unwrap();
        ends_ok(&c, &upid).await;
        let (text, meaning, e) =
            failure(&c, c.snapshot("pve1", kind, vmid, "before", "").await).await;
        assert_eq!(text, "snapshot name 'before' already used");
        assert_eq!(meaning, Some(Meaning::SnapshotExists));
        assert!(!e.is_overload(), "{e}");
        let started = c
            .rollback("pve1", kind, vmid, "gone", &rollback_permit(vmid, "gone"))
            .await;
        let (text, meaning, e) = failure(&c, started).await;
        assert_eq!(text, "snapshot 'gone' does not exist");
        assert_eq!(meaning, Some(Meaning::SnapshotMissing));
        assert!(
            !e.is_overload() && !e.is_not_found(),
            "the guest is there: {e}"
        );
        let started = c
            .delete_snapshot("pve1", kind, vmid, "gone", &delete_permit(vmid, "gone"))
            .await;
        let (text, meaning, _) = failure(&c, started).await;
        assert_eq!(text, "snapshot 'gone' does not exist");
        assert_eq!(meaning, Some(Meaning::SnapshotMissing));
    }
}

/// A container answers in pve-container's words: while its snapshot task runs it holds `lock:
/// snapshot` (pve-guest-common `__snapshot_prepare`) and a config write meanwhile is refused `CT
/// is locked (snapshot)`, a lock and not load; a snapshot of a container another task locked
/// fails its task `CT is locked (backup)`.
#[tokio::test]
async fn a_container_meets_its_snapshot_lock_in_pve_containers_words() {
    let mut pve = scenario().start();
    let c = pve.client();
    pve.set_time_scale(SCALE);
    pve.call("snapshot_timing", json!({"secs": 100.0}))
        .expect("snapshot_timing");
    let upid = c.snapshot("pve1", Lxc, 330, "before", "").await.unwrap();
    let cfg = c.vm_config("pve1", Lxc, 330).await.unwrap();
    assert_eq!(cfg.get("lock"), Some("snapshot"));
    let params = VmParams::new().set("memory", "1024");
    let e = c
        .set_config("pve1", Lxc, 330, &params, None)
        .await
        .unwrap_err();
    assert_eq!(e.pve_message().trim_end(), "CT is locked (snapshot)", "{e}");
    assert_eq!(e.meaning(), Some(Meaning::LockHeld));
    assert_eq!(e.category(), Category::LockError, "{e}");
    assert!(!e.is_overload() && e.surely_not_executed(), "{e}");
    ends_ok(&c, &upid).await;
    let cfg = c.vm_config("pve1", Lxc, 330).await.unwrap();
    assert_eq!(cfg.get("lock"), None);

    pve.call("snapshot_timing", json!({"secs": 0.0}))
        .expect("snapshot_timing");
    pve.snapshot_lock(330, "backup");
    let (text, meaning, e) = failure(&c, c.snapshot("pve1", Lxc, 330, "again", "").await).await;
    assert_eq!(text, "CT is locked (backup)");
    assert_eq!(meaning, Some(Meaning::LockHeld));
    assert_eq!(e.category(), Category::LockError, "{e}");
    pve.unlock(330);
}

/// A container's rollback with `start=1` needs only VM.Snapshot (or VM.Snapshot.Rollback):
/// pve-container's rollback starts it with `PVE::API2::LXC::Status->vm_start`, a direct call that
/// checks no permission. A VM's needs VM.PowerMgmt too (qemu-server's rollback checks it up front
/// from 9.1.10, commit 7ba9640b).
#[tokio::test]
async fn a_container_rollback_that_starts_it_needs_no_power_privilege() {
    let mut pve = scenario()
        .grant(TOKEN_ID, "/", &["Sys.Audit"])
        .grant(TOKEN_ID, "/nodes", &["Sys.Audit"])
        .grant(
            TOKEN_ID,
            "/vms",
            &["VM.Audit", "VM.Snapshot", "VM.Snapshot.Rollback"],
        )
        .start();
    let c = pve.client();
    for (kind, vmid) in [(Qemu, 130), (Lxc, 330)] {
        let upid = c.snapshot("pve1", kind, vmid, "before", "").await.unwrap();
        ends_ok(&c, &upid).await;
    }
    let upid = c
        .rollback("pve1", Lxc, 330, "before", &rollback_permit(330, "before"))
        .await
        .unwrap();
    ends_ok(&c, &upid).await;
    assert_eq!(pve.ct(330)["status"], "running");

    let e = c
        .rollback("pve1", Qemu, 130, "before", &rollback_permit(130, "before"))
        .await
        .unwrap_err();
    assert_eq!(e.category(), Category::PermissionDenied, "{e}");
    assert!(e.pve_message().contains("VM.PowerMgmt"), "{e}");
}
