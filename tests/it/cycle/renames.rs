//! Renames of `metadata.name` that cannot delete or take over, end to end on fakepve:
//!
//! - a rename that also changes site follows the site-change rule (`SiteMoved`, the old VM kept
//!   and listed), never a delete plus a create;
//! - after the state database is lost, an annotated rename re-labels the original VM (found by
//!   its verifying marker), running or stopped: no second VM, no delete of the original; a
//!   second VM an earlier run left beside the original is `DuplicateVM` and the run exits 1;
//! - `proxsync.io/renamed-from` naming a spec that still exists is an error in `validate`, in
//!   `plan` and in `run`, and neither spec is applied until it is fixed;
//! - a lost answer to the re-label's marker write is completed by the next run, and the removed
//!   old spec is never shown as Ready meanwhile.

use crate::common;

use std::time::Duration;

use common::engine::{Workspace, marker_claims, owned_vms, spec, text};
use common::{FakePve, default_scenario};

const FAST_ORPHANS: &str = "[reconcile]\norphans = \"delete-stopped\"\norphan_grace = \"1s\"\n";

/// `spec(...)` with `metadata.annotations: proxsync.io/renamed-from: <from>`.
fn renamed(name: &str, from: &str, extra: &str) -> String {
    spec(name, "pve1", "9000", extra).replace(
        &format!("  name: {name}\n"),
        &format!("  name: {name}\n  annotations:\n    proxsync.io/renamed-from: {from}\n"),
    )
}

/// Runs twice, past the orphan grace period in between.
fn run_past_grace(ws: &Workspace) -> (bool, String) {
    let (_, first) = ws.run_once();
    std::thread::sleep(Duration::from_millis(1300));
    let (ok, second) = ws.run_once();
    (ok, format!("{first}\n---\n{second}"))
}

fn orphans_file(ws: &Workspace) -> String {
    std::fs::read_to_string(ws.path("status/_orphans.yaml")).unwrap_or_default()
}

fn vmid_of(ws: &Workspace, name: &str) -> u64 {
    ws.status(name)["vmId"].as_u64().expect("a VMID")
}

/// Item 3: one commit removes `app-old` (site `lab`) and adds `app-new` renamed from it on
/// site `other`. The VM on `lab` is kept (not shut down or deleted) and listed, nothing is
/// created on `other`, and `app-new` says `SiteMoved`; once the old VM is removed by hand,
/// `app-new` is created on its site.
#[test]
fn a_rename_to_another_site_keeps_the_original_and_says_site_moved() {
    let mut lab = FakePve::start(default_scenario());
    let mut other = FakePve::start(default_scenario());
    let ws = Workspace::two_sites(&lab, &other, "");
    // A second VM on lab, so that one delete stays within max_delete_fraction.
    let db = ("db.yaml", spec("db", "pve1", "9000", ""));
    ws.commit_specs(&[
        ("app.yaml", spec("app-old", "pve1", "9000", "")),
        db.clone(),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = vmid_of(&ws, "app-old");
    let db_vmid = vmid_of(&ws, "db");

    let moved = renamed("app-new", "app-old", "").replace("site: lab", "site: other");
    ws.commit_specs(&[("app.yaml", moved), db.clone()]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "a spec waiting for a person is not Ready: {out}");
    // The two were created side by side: either may have the lower VMID.
    let mut kept = vec![(vmid, "app-old".to_string()), (db_vmid, "db".to_string())];
    kept.sort();
    assert_eq!(owned_vms(&mut lab), kept, "the original is kept: {out}");
    assert_eq!(lab.vm(vmid as u32)["status"], "running", "{out}");
    assert!(owned_vms(&mut other).is_empty(), "nothing created: {out}");
    let (status, reason, message) = ws.condition("app-new", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "SiteMoved"),
        "{message}"
    );
    assert!(
        message.contains(&format!("VM {vmid}")) && message.contains("lab"),
        "{message}"
    );
    let orphans = orphans_file(&ws);
    assert!(
        orphans.contains(&format!("vmId: {vmid}"))
            && orphans.contains("spec app-new now names site other"),
        "the original is listed: {orphans}"
    );

    // Removed by hand on the old site: app-new is created on its own site.
    lab.remove_vm(vmid as u32);
    let _ = ws.run_once();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(owned_vms(&mut other).len(), 1, "{out}");
    assert_eq!(ws.status("app-new")["site"], "other");
    assert_eq!(owned_vms(&mut lab), vec![(db_vmid, "db".to_string())]);
}

/// Item 3 after a lost database: the rename across sites is found from the original's
/// verifying marker; the stopped original is kept past the orphan grace period.
#[test]
fn a_rename_to_another_site_after_a_lost_database_deletes_nothing() {
    let mut lab = FakePve::start(default_scenario());
    let mut other = FakePve::start(default_scenario());
    let ws = Workspace::two_sites(&lab, &other, FAST_ORPHANS);
    let stopped = "    powerState: stopped\n";
    ws.commit_specs(&[("app.yaml", spec("app-old", "pve1", "9000", stopped))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = vmid_of(&ws, "app-old");

    ws.remove_state();
    let moved = renamed("app-new", "app-old", stopped).replace("site: lab", "site: other");
    ws.commit_specs(&[("app.yaml", moved)]);
    let (ok, out) = run_past_grace(&ws);
    assert!(!ok, "{out}");
    assert_eq!(
        owned_vms(&mut lab),
        vec![(vmid, "app-old".to_string())],
        "{out}"
    );
    assert!(owned_vms(&mut other).is_empty(), "{out}");
    let (_, reason, message) = ws.condition("app-new", "Ready");
    assert_eq!(reason, "SiteMoved", "{message}");
    assert!(
        orphans_file(&ws).contains("spec app-new now names site other"),
        "{}",
        orphans_file(&ws)
    );
}

/// Item 4: only `proxsync.redb` is lost, then `app-old` is renamed to `app-new` (annotated).
/// The rename is resolved from the VM whose verifying marker names `app-old`: that VM is
/// re-labelled, running or stopped (past the orphan grace period), and no second VM is made.
#[test]
fn a_rename_after_a_lost_database_relabels_the_original() {
    for power in ["running", "stopped"] {
        let mut pve = FakePve::start(default_scenario());
        let ws = Workspace::with_extra(&pve, FAST_ORPHANS);
        let extra = format!("    powerState: {power}\n");
        ws.commit_specs(&[("app.yaml", spec("app-old", "pve1", "9000", &extra))]);
        let (ok, out) = ws.run_once();
        assert!(ok, "{power}: {out}");
        let vmid = vmid_of(&ws, "app-old");

        ws.remove_state();
        ws.commit_specs(&[("app.yaml", renamed("app-new", "app-old", &extra))]);
        let (ok, out) = run_past_grace(&ws);
        assert!(ok, "{power}: {out}");
        assert_eq!(
            owned_vms(&mut pve),
            vec![(vmid, "app-new".to_string())],
            "{power}: the original, re-labelled: {out}"
        );
        let claims = marker_claims(&mut pve);
        assert_eq!(
            claims,
            [("app-new".to_string(), vec![vmid])].into(),
            "{power}: {out}"
        );
        assert_eq!(vmid_of(&ws, "app-new"), vmid, "{power}");
        assert_eq!(pve.vm(vmid as u32)["status"], power, "{power}: {out}");
    }
}

/// Item 4, the state an earlier release left: a second VM made for the new name beside the
/// original (here: the rename committed without its annotation after the database was lost).
/// Once the annotation links them, the spec is `DuplicateVM` naming both, the run exits 1, and
/// neither VM is deleted, the stopped original included, past the orphan grace period.
#[test]
fn a_second_vm_beside_the_renamed_original_is_reported_and_never_exits_0() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(&pve, FAST_ORPHANS);
    let stopped = "    powerState: stopped\n";
    ws.commit_specs(&[("app.yaml", spec("app-old", "pve1", "9000", stopped))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let original = vmid_of(&ws, "app-old");
    ws.remove_state();
    ws.commit_specs(&[("app.yaml", spec("app-new", "pve1", "9000", stopped))]);
    let (_, out) = ws.run_once();
    let second = vmid_of(&ws, "app-new");
    assert_ne!(original, second, "{out}");

    ws.commit_specs(&[("app.yaml", renamed("app-new", "app-old", stopped))]);
    let (ok, out) = run_past_grace(&ws);
    assert!(!ok, "a run that leaves a duplicate never exits 0: {out}");
    let vms: Vec<u64> = owned_vms(&mut pve).into_iter().map(|(id, _)| id).collect();
    assert_eq!(vms, vec![original, second], "neither is deleted: {out}");
    let (status, reason, message) = ws.condition("app-new", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "DuplicateVM"),
        "{message}"
    );
    assert!(
        message.contains(&original.to_string()) && message.contains(&second.to_string()),
        "{message}"
    );
    let orphans = orphans_file(&ws);
    assert!(
        orphans.contains(&format!("vmId: {original}")) && orphans.contains("duplicateOf: app-new"),
        "{orphans}"
    );
}

/// Item 5: one commit renames `app` to `app-legacy` (annotated) and adds a new spec `app`.
/// `validate` refuses it (file:line, what to do), `plan` shows the error and plans nothing for
/// either, `run` leaves the original VM exactly as it is (not reconfigured, not re-labelled) and
/// makes no VM. Once the new `app` is gone, the rename goes through.
#[test]
fn renamed_from_naming_a_spec_that_exists_applies_neither() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("app.yaml", spec("app", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = vmid_of(&ws, "app");
    let before = pve.vm(vmid as u32);

    let new_app = spec("app", "pve1", "9000", "").replace("cpu: 2", "cpu: 4");
    ws.commit_specs(&[
        ("legacy.yaml", renamed("app-legacy", "app", "")),
        ("app.yaml", new_app),
    ]);

    let out = ws.proxsync(&["validate", ws.path("repo").to_str().unwrap()]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("legacy.yaml:4:")
            && said.contains("proxsync.io/renamed-from")
            && said.contains("app.yaml:4:"),
        "file:line of both: {said}"
    );

    let out = ws.proxsync(&["plan"]);
    let said = text(&out);
    assert!(said.contains("proxsync.io/renamed-from"), "{said}");
    assert!(
        !said
            .lines()
            .any(|l| l.starts_with("+ ") || l.starts_with("~ ") || l.starts_with("- ")),
        "nothing planned for either: {said}"
    );
    // Both invalid: an incomplete plan (exit 1), never "no changes" above its errors.
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(!said.contains("no changes"), "{said}");

    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert_eq!(
        owned_vms(&mut pve),
        vec![(vmid, "app".to_string())],
        "{out}"
    );
    assert_eq!(
        pve.vm(vmid as u32)["config"],
        before["config"],
        "the VM is left exactly as it is: {out}"
    );
    for name in ["app", "app-legacy"] {
        let (status, reason, message) = ws.condition(name, "Ready");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "InvalidSpec"),
            "{name}: {message}"
        );
    }

    // Fixed: the new `app` is dropped; the rename goes through on the same VM.
    ws.commit_specs(&[("legacy.yaml", renamed("app-legacy", "app", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(
        owned_vms(&mut pve),
        vec![(vmid, "app-legacy".to_string())],
        "{out}"
    );
}

/// Item 6: the answer to the re-label's marker write is lost (the write was made). That run
/// fails; `proxsync status` does not show the removed `web-01` as Ready; the next run sees the
/// marker already naming `web-02` with the recorded uid and completes the rename.
#[test]
fn a_lost_answer_to_the_relabel_is_completed_by_the_next_run() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = vmid_of(&ws, "web-01");

    ws.commit_specs(&[("web.yaml", renamed("web-02", "web-01", ""))]);
    pve.lose_answer("PUT", &format!("/qemu/{vmid}/config"), 1);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert_eq!(pve.lost_answers().len(), 1, "{out}");
    let description = pve.vm(vmid as u32)["config"]["description"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        description.contains("spec=web-02"),
        "the write was made: {description}"
    );
    let shown = text(&ws.proxsync(&["status"]));
    assert!(
        !shown
            .lines()
            .any(|l| l.contains("web-01") && l.contains("True")),
        "the removed web-01 is not shown Ready: {shown}"
    );
    if ws.path("status/web-01.yaml").exists() {
        let (status, _, message) = ws.condition("web-01", "Ready");
        assert_ne!(status, "True", "{message}");
    }

    let (ok, out) = ws.run_once();
    assert!(ok, "the next run completes the rename: {out}");
    assert_eq!(
        owned_vms(&mut pve),
        vec![(vmid, "web-02".to_string())],
        "{out}"
    );
    assert_eq!(vmid_of(&ws, "web-02"), vmid);
    assert!(!ws.path("status/web-01.yaml").exists());
}

/// A rename whose new spec is invalid for its site (`site: nowhere`, no configured one) holds
/// the spec it is renamed from as well: `app-old`'s VM is not taken for a removed spec's and
/// deleted, and once the site is fixed the rename re-labels it.
#[test]
fn a_rename_into_a_spec_naming_an_unknown_site_deletes_nothing() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    // Three VMs more, so that one delete stays within max_delete_fraction.
    let others = vec![
        ("a.yaml", spec("a", "pve1", "9000", "")),
        ("b.yaml", spec("b", "pve1", "9000", "")),
        ("c.yaml", spec("c", "pve1", "9000", "")),
    ];
    let with = |app: String| {
        let mut specs = others.clone();
        specs.push(("app.yaml", app));
        specs
    };
    ws.commit_specs(&with(spec("app-old", "pve1", "9000", "")));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = vmid_of(&ws, "app-old");

    let lost = renamed("app-new", "app-old", "").replace("site: lab", "site: nowhere");
    ws.commit_specs(&with(lost));
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 4, "nothing deleted: {out}");
    assert_eq!(pve.vm(vmid as u32)["status"], "running", "{out}");

    ws.commit_specs(&with(renamed("app-new", "app-old", "")));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(vmid_of(&ws, "app-new"), vmid, "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 4, "{out}");
}
