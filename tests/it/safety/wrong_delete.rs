//! Never a wrong delete: orphan cleanup and releases pass the same valves as spec deletes.
//! Reproduced as the issue did, after the state database is lost (which the README says is
//! safe), with `orphan_grace = "1s"`: a YAML syntax error in one file must not get that file's
//! VM deleted, and an empty commit must not get every stopped managed VM deleted (nor every
//! `deletionPolicy: Orphan` VM released).

use crate::common;

use std::time::Duration;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, default_scenario};

const FAST_ORPHANS: &str = "[reconcile]\norphans = \"delete-stopped\"\norphan_grace = \"1s\"\n";

/// Three stopped VMs made by proxsync from specs `a`, `b`, `c`.
fn three_stopped(pve: &mut FakePve, extra: &str) -> Workspace {
    let ws = Workspace::with_extra(pve, FAST_ORPHANS);
    let stopped = format!("    powerState: stopped\n{extra}");
    ws.commit_specs(&[
        ("a.yaml", spec("a", "pve1", "9000", &stopped)),
        ("b.yaml", spec("b", "pve1", "9000", &stopped)),
        ("c.yaml", spec("c", "pve1", "9000", &stopped)),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(owned_vms(pve).len(), 3);
    ws
}

/// Runs twice, past the orphan grace period in between.
fn run_past_grace(ws: &Workspace) -> String {
    let (_, first) = ws.run_once();
    std::thread::sleep(Duration::from_millis(1300));
    let (_, second) = ws.run_once();
    format!("{first}\n---\n{second}")
}

#[test]
fn a_yaml_error_after_a_lost_database_deletes_nothing() {
    let mut pve = FakePve::start(default_scenario());
    let ws = three_stopped(&mut pve, "");
    ws.remove_state();
    let broken =
        spec("c", "pve1", "9000", "    powerState: stopped\n").replace("cpu: 2", "cpu: [2");
    ws.commit_specs(&[
        (
            "a.yaml",
            spec("a", "pve1", "9000", "    powerState: stopped\n"),
        ),
        (
            "b.yaml",
            spec("b", "pve1", "9000", "    powerState: stopped\n"),
        ),
        ("c.yaml", broken),
    ]);
    let out = run_past_grace(&ws);
    assert_eq!(owned_vms(&mut pve).len(), 3, "nothing deleted: {out}");
    let summary = std::fs::read_to_string(ws.path("status/_summary.yaml")).unwrap();
    assert!(
        summary.contains("could not be read completely"),
        "the refusal is reported: {summary}\n{out}"
    );
}

#[test]
fn an_empty_commit_after_a_lost_database_deletes_and_releases_nothing() {
    for extra in ["", "  deletionPolicy: Orphan\n"] {
        let mut pve = FakePve::start(default_scenario());
        let ws = three_stopped(&mut pve, extra);
        ws.remove_state();
        ws.commit_specs(&[]);
        let out = run_past_grace(&ws);
        assert_eq!(
            owned_vms(&mut pve).len(),
            3,
            "{extra:?}: nothing deleted or released: {out}"
        );
        let summary = std::fs::read_to_string(ws.path("status/_summary.yaml")).unwrap();
        assert!(summary.contains("refused"), "{extra:?}: {summary}\n{out}");
    }
}

/// With the database intact, an empty commit releases nothing either: releases count toward
/// the valve like deletes (reverting the commit would otherwise create second VMs).
#[test]
fn an_empty_commit_releases_nothing() {
    let mut pve = FakePve::start(default_scenario());
    let ws = three_stopped(&mut pve, "  deletionPolicy: Orphan\n");
    ws.commit_specs(&[]);
    let (_, out) = ws.run_once();
    assert_eq!(owned_vms(&mut pve).len(), 3, "nothing released: {out}");
    assert!(out.contains("refused"), "{out}");
}

fn orphans_file(ws: &Workspace) -> String {
    std::fs::read_to_string(ws.path("status/_orphans.yaml")).unwrap_or_default()
}

/// A spec moved to another site: its VM on the old site is neither leaked (left running and
/// unreported) nor deleted with a second VM made on the new site. The spec says where its VM
/// is and what to do; once the old VM is removed by hand, the VM is created on the new site.
#[test]
fn a_spec_moved_to_another_site_reports_its_old_vm_until_it_is_removed() {
    let mut lab = FakePve::start(default_scenario());
    let mut other = FakePve::start(default_scenario());
    let ws = Workspace::two_sites(&lab, &other, "");

    ws.commit_specs(&[("web.yaml", spec("web", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("web")["vmId"].as_u64().unwrap() as u32;

    let moved = spec("web", "pve1", "9000", "").replace("site: lab", "site: other");
    ws.commit_specs(&[("web.yaml", moved)]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let (status, reason, message) = ws.condition("web", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "SiteMoved"),
        "{message}"
    );
    assert!(
        message.contains(&format!("VM {vmid}")) && message.contains("lab"),
        "{message}"
    );
    assert_eq!(
        owned_vms(&mut lab).len(),
        1,
        "the old VM is not deleted: {out}"
    );
    assert_eq!(
        owned_vms(&mut other).len(),
        0,
        "no second VM on the new site: {out}"
    );
    let orphans = orphans_file(&ws);
    assert!(
        orphans.contains(&format!("vmId: {vmid}"))
            && orphans.contains("spec web now names site other"),
        "the old VM is listed in _orphans.yaml too: {orphans}"
    );

    // Removed by hand on the old site: the spec is created on its new site.
    lab.remove_vm(vmid);
    let _ = ws.run_once();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(owned_vms(&mut other).len(), 1, "{out}");
    assert_eq!(ws.status("web")["site"], "other");
}

/// `allowRecreateOnSiteChange: true`: the VM is created on the new site at once, and the old
/// one is kept and listed in `_orphans.yaml`, never deleted by the orphan policy (even stopped,
/// past the grace period), until a person deletes it.
#[test]
fn allow_recreate_on_site_change_creates_there_and_keeps_the_old_vm_listed() {
    let mut lab = FakePve::start(default_scenario());
    let mut other = FakePve::start(default_scenario());
    let ws = Workspace::two_sites(&lab, &other, "[reconcile]\norphan_grace = \"1s\"\n");
    let stopped = "    powerState: stopped\n";
    ws.commit_specs(&[("web.yaml", spec("web", "pve1", "9000", stopped))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let old = ws.status("web")["vmId"].as_u64().unwrap() as u32;

    let moved = spec(
        "web",
        "pve1",
        "9000",
        &format!("{stopped}    allowRecreateOnSiteChange: true\n"),
    )
    .replace("site: lab", "site: other");
    ws.commit_specs(&[("web.yaml", moved)]);
    let _ = ws.run_once();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(
        owned_vms(&mut other).len(),
        1,
        "created on the new site: {out}"
    );
    assert_eq!(ws.status("web")["site"], "other");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (_, out) = ws.run_once();
    assert_eq!(
        owned_vms(&mut lab).len(),
        1,
        "the old VM is kept, though stopped and past the grace period: {out}"
    );
    assert_eq!(lab.vm(old)["status"], "stopped");
    let orphans = orphans_file(&ws);
    assert!(
        orphans.contains(&format!("vmId: {old}"))
            && orphans.contains("spec web now names site other"),
        "{orphans}"
    );
}

/// Renaming `metadata.name` is not a delete plus a create: in the commit that removes `web-01`
/// and adds `web-02` with the same content, nothing is deleted or created and the new spec
/// says why; the `proxsync.io/renamed-from` annotation confirms it, and the VM is re-labelled
/// (its marker re-signed for the new name, its name converged), the same VM throughout.
#[test]
fn a_rename_of_metadata_name_relabels_the_vm_instead_of_replacing_it() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("web-01")["vmId"].as_u64().unwrap();

    ws.commit_specs(&[("web.yaml", spec("web-02", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let (status, reason, message) = ws.condition("web-02", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RenameSuspected"),
        "{message}"
    );
    assert!(
        message.contains("proxsync.io/renamed-from: web-01"),
        "{message}"
    );
    let owned = owned_vms(&mut pve);
    assert_eq!(
        owned.len(),
        1,
        "neither deleted nor created: {owned:?}\n{out}"
    );

    let confirmed = spec("web-02", "pve1", "9000", "").replace(
        "  name: web-02\n",
        "  name: web-02\n  annotations:\n    proxsync.io/renamed-from: web-01\n",
    );
    ws.commit_specs(&[("web.yaml", confirmed)]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let owned = owned_vms(&mut pve);
    assert_eq!(owned, vec![(vmid, "web-02".to_string())], "{out}");
    assert_eq!(ws.status("web-02")["vmId"].as_u64(), Some(vmid));
    let description = pve.vm(vmid as u32)["config"]["description"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(description.contains("spec=web-02"), "{description}");
    assert!(
        !ws.path("status/web-01.yaml").exists(),
        "the old status file goes"
    );
}

/// One unreadable VM does not block every create of its site: a tagged VM on an offline node
/// (its config read answers 595, so its marker cannot be read after the database was lost)
/// holds back only the spec it may be (by its name), not a new spec on a healthy node.
#[test]
fn an_unreadable_vm_holds_back_only_the_spec_it_may_be() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let a = spec(
        "a",
        "pve2",
        "local:import/debian-12-genericcloud-amd64.qcow2",
        "",
    );
    ws.commit_specs(&[("a.yaml", a.clone())]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    ws.remove_state();
    pve.set_node_offline("pve2", true);
    ws.commit_specs(&[("a.yaml", a), ("b.yaml", spec("b", "pve1", "9000", ""))]);
    let (_, out) = ws.run_once();
    let (status, _, message) = ws.condition("b", "Ready");
    assert_eq!(
        status, "True",
        "b is created on the healthy node: {message}\n{out}"
    );
    let (status, _, _) = ws.condition("a", "Ready");
    assert_ne!(status, "True", "a waits for its node");
    assert_eq!(owned_vms(&mut pve).len(), 2, "{out}");
}

/// `deletionPolicy` changed on a VM that exists (Delete -> Orphan, to keep it) is what its
/// removal follows: the VM is released, not deleted; and back (Orphan -> Delete) it is deleted.
/// The policy is no part of the spec's hash, so no converge carries it into the record.
#[test]
fn a_deletion_policy_changed_after_the_create_is_the_one_its_removal_follows() {
    for (first, then, kept) in [
        ("", "  deletionPolicy: Orphan\n", true),
        ("  deletionPolicy: Orphan\n", "", false),
    ] {
        let mut pve = FakePve::start(default_scenario());
        let ws = Workspace::new(&pve);
        let web = |policy: &str| {
            spec("web-01", "pve1", "9000", "").replacen("spec:\n", &format!("spec:\n{policy}"), 1)
        };
        let db = || {
            (
                "db.yaml",
                spec("db-01", "pve1", "9000", "").replace("cpu: 2", "cpu: 3"),
            )
        };
        ws.commit_specs(&[("web.yaml", web(first)), db()]);
        assert!(ws.run_once().0);
        ws.commit_specs(&[("web.yaml", web(then)), db()]);
        assert!(ws.run_once().0);
        ws.commit_specs(&[db()]);
        let (_, out) = ws.run_once();
        let names: Vec<String> = owned_vms(&mut pve).into_iter().map(|(_, n)| n).collect();
        let web_left = pve.requests().iter().any(|r| r.method == "DELETE");
        assert_eq!(!web_left, kept, "{then:?}: {names:?}\n{out}");
    }
}
