//! The windows of a create on a real cluster's timing, each opened on purpose: the answer to
//! a create or clone lost (pveproxy's 596) or late (the VM exists, locked, before the answer),
//! a failed poll of the running task, and locks held by tasks that do not name the VM (a
//! clone names its template, a backup job no VM) or by no task at all (a hibernated VM).
//! Each ends with exactly one VM per spec and nothing sent twice.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::engine::{Workspace, marker_claims, spec};
use common::{FakePve, default_scenario};
use serde_json::json;

const IMPORT: &str = "local:import/debian-12-genericcloud-amd64.qcow2";

/// A fakepve whose tasks take real time. A VM in its window is listed as `VM <vmid>`, as on a
/// cluster whose pvestatd reported it during a long clone: proxsync cannot rely on a missing
/// name to know the VM is still being made.
fn timed_pve(create_secs: f64, clone_secs: f64, answer_delay: f64) -> FakePve {
    let mut pve = FakePve::start(default_scenario());
    pve.set_time_scale(1.0);
    pve.create_timing_listed(create_secs, clone_secs, answer_delay, true);
    pve
}

fn one_spec(pve: &FakePve, image: &str) -> Workspace {
    let ws = Workspace::new(pve);
    ws.commit_specs(&[("web.yaml", spec("web", "pve1", image, ""))]);
    ws
}

/// `run --once` until it exits 0, for at most `secs`; the outputs of every run.
fn run_until_ready(ws: &Workspace, secs: u64) -> (bool, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut outs = Vec::new();
    while Instant::now() < deadline {
        let (ok, out) = ws.run_once();
        outs.push(out);
        if ok {
            return (true, outs);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    (false, outs)
}

fn non_templates(pve: &mut FakePve) -> Vec<serde_json::Value> {
    pve.vms()
        .into_iter()
        .filter(|v| v["template"] != json!(true))
        .collect()
}

/// Exactly one VM, carrying the spec's marker, unlocked; and `creates` create/clone requests.
fn assert_one_vm(pve: &mut FakePve, outs: &[String], creates: usize) {
    let vms = non_templates(pve);
    let log = outs.join("\n---\n");
    assert_eq!(vms.len(), 1, "one VM: {vms:?}\n{log}");
    assert_eq!(vms[0]["lock"], json!(null), "{:?}", vms[0]);
    assert_eq!(
        marker_claims(pve).get("web").map(Vec::len),
        Some(1),
        "{vms:?}"
    );
    let sent = pve
        .requests()
        .iter()
        .filter(|r| {
            r.method == "POST"
                && (r.path.ends_with("/clone") || r.path == "/api2/json/nodes/pve1/qemu")
        })
        .count();
    assert_eq!(sent, creates, "create/clone requests sent\n{log}");
}

#[test]
fn a_lost_answer_to_a_clone_is_settled_by_reading_not_by_a_second_clone() {
    let mut pve = timed_pve(0.0, 1.5, 0.0);
    pve.lose_answer("POST", "/clone", 1);
    let ws = one_spec(&pve, "9000");
    let (ok, outs) = run_until_ready(&ws, 40);
    assert!(ok, "{}", outs.join("\n---\n"));
    assert_one_vm(&mut pve, &outs, 1);
}

#[test]
fn a_lost_answer_to_a_create_is_settled_by_reading_not_by_a_second_create() {
    let mut pve = timed_pve(1.5, 0.0, 0.0);
    pve.lose_answer("POST", "/nodes/{node}/qemu", 1);
    let ws = one_spec(&pve, IMPORT);
    let (ok, outs) = run_until_ready(&ws, 40);
    assert!(ok, "{}", outs.join("\n---\n"));
    assert_one_vm(&mut pve, &outs, 1);
}

/// Killed after the VM exists (locked, nameless) but before the answer: the next run finds a
/// locked VM at its reserved VMID and waits for it instead of calling it someone else's.
#[test]
fn killed_between_the_vm_and_the_answer_the_clone_is_waited_for() {
    for (image, create, clone) in [("9000", 0.0, 2.0), (IMPORT, 2.0, 0.0)] {
        let mut pve = timed_pve(create, clone, 1.0);
        let ws = one_spec(&pve, image);
        let mut child = Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(["run", "--once", "--config"])
            .arg(ws.config())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start proxsync");
        let deadline = Instant::now() + Duration::from_secs(20);
        while non_templates(&mut pve).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        let vms = non_templates(&mut pve);
        assert_eq!(vms.len(), 1, "{image}: the VM exists, locked: {vms:?}");
        assert!(
            !vms[0]["lock"].is_null(),
            "{image}: still in its window: {vms:?}"
        );
        let (ok, outs) = run_until_ready(&ws, 40);
        assert!(ok, "{image}: {}", outs.join("\n---\n"));
        assert_one_vm(&mut pve, &outs, 1);
    }
}

/// One failed poll of the task status while waiting for the clone is not the end of the
/// clone: the intent stays, and the next run waits for the task again, even when a push of
/// the spec (which resets any backoff) comes right after.
#[test]
fn a_failed_poll_of_the_task_keeps_the_intent() {
    let mut pve = timed_pve(0.0, 2.0, 0.0);
    pve.fail_times(
        "GET",
        "/nodes/{node}/tasks/{upid}/status",
        500,
        "unable to read task status",
        50,
    );
    let ws = one_spec(&pve, "9000");
    let (ok, first) = ws.run_once();
    assert!(!ok, "{first}");
    pve.clear_failures();
    ws.commit_specs(&[(
        "web.yaml",
        spec("web", "pve1", "9000", "    tags: [pushed]\n"),
    )]);
    let (ok, mut outs) = run_until_ready(&ws, 40);
    outs.insert(0, first);
    assert!(ok, "{}", outs.join("\n---\n"));
    assert_one_vm(&mut pve, &outs, 1);
}

/// A lock held by a backup job (a `vzdump` task with no VMID) is waited for, never called
/// stale (advising `qm unlock` mid-backup would be dangerous).
#[test]
fn locks_are_judged_by_who_can_hold_them() {
    let mut pve = FakePve::start(default_scenario());
    let ws = one_spec(&pve, "9000");
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = non_templates(&mut pve)[0]["vmid"].as_u64().unwrap() as u32;

    pve.set_time_scale(1.0);
    pve.backup(vmid, 30.0, false);
    // A change to converge while the backup holds the lock.
    ws.commit_specs(&[(
        "web.yaml",
        spec("web", "pve1", "9000", "").replace("cpu: 2", "cpu: 3"),
    )]);
    let (_, out) = ws.run_once();
    let (_, reason, message) = ws.condition("web", "Ready");
    assert!(
        !message.contains("qm unlock") && !out.contains("qm unlock"),
        "a backup's lock is not stale: {reason}: {message}\n{out}"
    );
    assert!(
        message.contains("backup") || out.contains("backup"),
        "{message}\n{out}"
    );
}

/// Killed while the VM exists only as its lock (a clone's `lock: clone`, a create's `lock:
/// create`, listed as `VM <vmid>` without this install's tag), then the state database lost:
/// nothing names the VM, and nothing in its config says whose it is until the task ends. Its
/// running task was started by this install's token, so the next runs wait for it (the spec
/// `BeingMade`) and then adopt it by its marker: never a second VM.
#[test]
fn killed_in_the_window_and_the_database_lost_the_vm_is_waited_for() {
    for (image, create, clone) in [("9000", 0.0, 4.0), (IMPORT, 4.0, 0.0)] {
        let mut pve = timed_pve(create, clone, 0.0);
        let ws = one_spec(&pve, image);
        let mut child = Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(["run", "--once", "--config"])
            .arg(ws.config())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start proxsync");
        let deadline = Instant::now() + Duration::from_secs(20);
        while non_templates(&mut pve).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        ws.remove_state();
        let (ok, out) = ws.run_once();
        let vms = non_templates(&mut pve);
        assert_eq!(vms.len(), 1, "{image}: no second VM: {vms:?}\n{out}");
        assert!(!vms[0]["lock"].is_null(), "{image}: {vms:?}");
        assert!(!ok, "{image}: waiting for the task: {out}");
        let (_, _, message) = ws.condition("web", "Ready");
        assert!(message.contains("is being made by"), "{image}: {message}");
        let (ok, outs) = run_until_ready(&ws, 40);
        assert!(ok, "{image}: {}", outs.join("\n---\n"));
        assert_one_vm(&mut pve, &outs, 1);
    }
}
