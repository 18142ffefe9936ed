//! `rebootPolicy`: a running VM whose changes PVE keeps pending until its next start is
//! rebooted (clean shutdown, then start) only when its spec allows it now, at most
//! `max_parallel_reboots` per site and cycle, never hard-stopped unless `forceStopAfter` says so.

use crate::common;

use common::engine::{Workspace, owned_vms};
use common::{FakePve, default_scenario};
use serde_json::{Value, json};

/// A spec with `cpu` cores and extra `forProvider` lines.
fn spec(name: &str, cpu: u32, extra: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n    \
         site: lab\n    node: pve1\n    image: \"9000\"\n    cpu: {cpu}\n    memory: 2Gi\n    disk: 8Gi\n{extra}"
    )
}

fn running(pve: &mut FakePve, ws: &Workspace, names: &[&str]) -> Vec<u32> {
    let files: Vec<(String, String)> = names
        .iter()
        .map(|n| (format!("{n}.yaml"), spec(n, 2, "")))
        .collect();
    let refs: Vec<(&str, String)> = files.iter().map(|(f, s)| (f.as_str(), s.clone())).collect();
    ws.commit_specs(&refs);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms: Vec<u32> = owned_vms(pve).iter().map(|v| v.0 as u32).collect();
    assert_eq!(vms.len(), names.len(), "{out}");
    vms
}

fn tasks_of(pve: &mut FakePve, kind: &str) -> Vec<Value> {
    pve.tasks()
        .into_iter()
        .filter(|t| t["type"] == kind)
        .collect()
}

fn rebooted(pve: &mut FakePve, vmid: u32) -> bool {
    let id = vmid.to_string();
    tasks_of(pve, "qmshutdown")
        .iter()
        .any(|t| t["id"] == id.as_str())
}

#[test]
fn never_is_the_default_and_only_reports_the_pending_change() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vmid = running(&mut pve, &ws, &["web-01"])[0];
    ws.commit_specs(&[("web-01.yaml", spec("web-01", 4, ""))]);
    let (_ok, out) = ws.run_once();
    assert_eq!(pve.vm(vmid)["pending"]["cores"], json!("4"), "{out}");
    assert_eq!(ws.condition("web-01", "RebootPending").0, "True", "{out}");
    assert!(!rebooted(&mut pve, vmid), "{out}");
}

#[test]
fn if_needed_reboots_cleanly_once_and_the_change_applies() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vmid = running(&mut pve, &ws, &["web-01"])[0];
    ws.commit_specs(&[(
        "web-01.yaml",
        spec("web-01", 4, "    rebootPolicy: IfNeeded\n"),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    assert_eq!(vm["status"], "running", "{out}");
    assert_eq!(vm["config"]["cores"], json!("4"), "{vm}");
    assert!(
        vm["pending"].as_object().is_none_or(|p| p.is_empty()),
        "{vm}"
    );
    assert_eq!(ws.condition("web-01", "RebootPending").0, "False", "{out}");
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{out}");
    let shutdowns: Vec<_> = pve
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/status/shutdown"))
        .collect();
    assert_eq!(shutdowns.len(), 1, "{shutdowns:?}");
    // A clean shutdown with the default timeout: never a hard stop without forceStopAfter.
    assert!(
        shutdowns[0].body.contains("forceStop=0") && shutdowns[0].body.contains("timeout=180"),
        "{shutdowns:?}"
    );
    assert!(tasks_of(&mut pve, "qmstop").is_empty());

    // Nothing pending any more: no second reboot.
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(tasks_of(&mut pve, "qmshutdown").len(), 1, "{out}");
}

/// A window over one whole day that is not today (UTC), and one over every day.
fn other_day_window() -> String {
    let days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .weekday()
        .to_monday_zero_offset() as usize;
    // Two days on: never today, even if the test runs across midnight.
    format!("{} 00:00-24:00 UTC", days[(today + 2) % 7])
}

#[test]
fn a_window_waits_until_it_is_open() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vmid = running(&mut pve, &ws, &["web-01"])[0];
    let closed = format!(
        "    rebootPolicy: Window\n    maintenanceWindow: \"{}\"\n",
        other_day_window()
    );
    ws.commit_specs(&[("web-01.yaml", spec("web-01", 4, &closed))]);
    let (_ok, out) = ws.run_once();
    assert!(!rebooted(&mut pve, vmid), "outside the window: {out}");
    assert_eq!(ws.condition("web-01", "RebootPending").0, "True", "{out}");

    // The window opens (here: the spec's window now covers every day); nothing else changed.
    let open = "    rebootPolicy: Window\n    maintenanceWindow: \"* 00:00-24:00 UTC\"\n";
    ws.commit_specs(&[("web-01.yaml", spec("web-01", 4, open))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(rebooted(&mut pve, vmid), "{out}");
    assert_eq!(pve.vm(vmid)["config"]["cores"], json!("4"));
    assert_eq!(ws.condition("web-01", "RebootPending").0, "False", "{out}");
}

#[test]
fn a_guest_that_ignores_acpi_is_stopped_hard_only_with_force_stop_after() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vmid = running(&mut pve, &ws, &["web-01"])[0];
    pve.set_vm(vmid, json!({"acpi": false}));
    let if_needed = "    rebootPolicy: IfNeeded\n    shutdownTimeout: 30s\n";
    ws.commit_specs(&[("web-01.yaml", spec("web-01", 4, if_needed))]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert_eq!(pve.vm(vmid)["status"], "running", "not stopped hard: {out}");
    assert!(tasks_of(&mut pve, "qmstop").is_empty());
    let (_, reason, message) = ws.condition("web-01", "Ready");
    assert!(
        message.contains("did not shut down within 30 s") && message.contains("forceStopAfter"),
        "{reason}: {message}"
    );
    assert_eq!(ws.condition("web-01", "RebootPending").0, "True", "{out}");

    // With forceStopAfter, PVE's shutdown stops it hard after that long; the change applies.
    let forced = "    rebootPolicy: IfNeeded\n    forceStopAfter: 2m\n";
    ws.commit_specs(&[("web-01.yaml", spec("web-01", 4, forced))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    assert_eq!(vm["status"], "running", "{out}");
    assert_eq!(vm["config"]["cores"], json!("4"), "{vm}");
    let forced: Vec<_> = pve
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/status/shutdown") && r.body.contains("forceStop=1"))
        .collect();
    assert_eq!(forced.len(), 1, "{forced:?}");
    assert!(forced[0].body.contains("timeout=120"), "{forced:?}");
}

#[test]
fn at_most_max_parallel_reboots_per_site_and_cycle() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let vms = running(&mut pve, &ws, &["a-01", "b-01"]);
    let p = "    rebootPolicy: IfNeeded\n";
    ws.commit_specs(&[
        ("a-01.yaml", spec("a-01", 4, p)),
        ("b-01.yaml", spec("b-01", 4, p)),
    ]);
    let (_ok, out) = ws.run_once();
    let first: Vec<bool> = vms.iter().map(|v| rebooted(&mut pve, *v)).collect();
    assert_eq!(
        first.iter().filter(|r| **r).count(),
        1,
        "one reboot (the default max): {out}"
    );
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(
        vms.iter().all(|v| rebooted(&mut pve, *v)),
        "the other one next cycle: {out}"
    );
}
