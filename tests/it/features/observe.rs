//! Observe-only management against fakepve: a spec with `managementPolicy: Observe` (or an
//! install with `[reconcile] management_policy = "observe"`) sends nothing but reads, across
//! create, change, power and delete; it reports the VM's drift field by field with both values;
//! switched to `Full`, the next cycle applies the spec.

use crate::common;

use common::engine::{Workspace, next_seq, owned_vms, spec, writes_since};
use common::{FakePve, default_scenario};

fn observing(text: String) -> String {
    text.replacen("spec:\n", "spec:\n  managementPolicy: Observe\n", 1)
}

#[test]
fn an_observed_spec_sends_only_reads_and_reports_its_drift_until_it_is_full_again() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", ""))]);
    assert!(ws.run_once().0);
    let vms = owned_vms(&mut pve);
    let vmid = vms[0].0 as u32;

    // Observe-only: more memory, stopped, and a second spec whose VM does not exist.
    let changed = spec("web-01", "pve1", "9000", "    powerState: stopped\n")
        .replace("memory: 2Gi", "memory: 4Gi");
    ws.commit_specs(&[
        ("web.yaml", observing(changed.clone())),
        ("new.yaml", observing(spec("new-01", "pve1", "9000", ""))),
    ]);
    let since = next_seq(&mut pve);
    let (_, out) = ws.run_once();
    assert_eq!(writes_since(&mut pve, since), Vec::<String>::new(), "{out}");
    let (synced, reason, message) = ws.condition("web-01", "Synced");
    assert_eq!((synced.as_str(), reason.as_str()), ("False", "Drifted"));
    assert!(
        message.contains("memory: spec 4096 MiB, VM 2048 MiB"),
        "{message}"
    );
    assert!(
        message.contains("power: spec stopped, VM running"),
        "{message}"
    );
    let (_, reason, _) = ws.condition("web-01", "Reconciling");
    assert_eq!(reason, "Observing");
    let (_, reason, message) = ws.condition("new-01", "Synced");
    assert_eq!(reason, "Drifted");
    assert!(message.contains("no VM of the spec"), "{message}");
    assert_eq!(owned_vms(&mut pve).len(), 1, "nothing created");

    // Full again: the next cycle applies the spec.
    ws.commit_specs(&[
        ("web.yaml", changed),
        ("new.yaml", spec("new-01", "pve1", "9000", "")),
    ]);
    assert!(ws.run_once().0);
    let vm = pve.vm(vmid);
    // Sent while the VM ran, the memory waits in PVE's pending values until its next start.
    let memory = |v: &serde_json::Value| v.to_string().trim_matches('"').to_string();
    assert!(
        memory(&vm["config"]["memory"]) == "4096" || memory(&vm["pending"]["memory"]) == "4096",
        "{vm}"
    );
    assert_eq!(vm["status"], "stopped");
    assert_eq!(owned_vms(&mut pve).len(), 2);
}

#[test]
fn an_observing_install_deletes_nothing_of_a_removed_spec() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    assert!(ws.run_once().0);
    let config = std::fs::read_to_string(ws.config()).unwrap()
        + "\n[reconcile]\nmanagement_policy = \"observe\"\n";
    std::fs::write(ws.config(), config).unwrap();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    let since = next_seq(&mut pve);
    let (_, out) = ws.run_once();
    assert_eq!(writes_since(&mut pve, since), Vec::<String>::new(), "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 2, "web-02's VM is kept");
    let summary = std::fs::read_to_string(ws.path("status/_summary.yaml")).unwrap();
    assert!(
        summary.contains("management_policy = \\\"observe\\\" takes no action")
            || summary.contains("management_policy = \"observe\" takes no action"),
        "{summary}"
    );
    let (ready, reason, _) = ws.condition("web-01", "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("True", "Observed"));
}

/// Issue 41 item 1: a VM proxsync made, whose spec then became observe-only (its
/// `managementPolicy: Observe`, or its directory under `[reconcile] observe_paths`), and whose
/// spec file was then removed: the spec keeps the policy it was last seen with, so its VM gets
/// no action, neither shut down nor deleted, cycle after cycle. Put back as `Full` for a
/// cycle, its removal then deletes the VM.
#[test]
fn an_observed_spec_removed_from_git_keeps_its_vm_untouched() {
    for how in ["managementPolicy", "observe_paths"] {
        let mut pve = FakePve::start(default_scenario());
        let ws = Workspace::new(&pve);
        std::fs::create_dir(ws.path("repo/prod")).unwrap();
        // A second spec stays: removing every spec is refused by a valve of its own.
        let db = || {
            (
                "db.yaml",
                spec("db-01", "pve1", "9000", "").replace("cpu: 2", "cpu: 3"),
            )
        };
        let web = || ("prod/web.yaml", spec("web-01", "pve1", "9000", ""));
        ws.commit_specs(&[web(), db()]);
        let (ok, out) = ws.run_once();
        assert!(ok, "{how}: {out}");
        let vms = owned_vms(&mut pve);
        let web_vmid = vms.iter().find(|(_, n)| n == "web-01").expect("web-01").0 as u32;

        match how {
            "managementPolicy" => ws.commit_specs(&[("prod/web.yaml", observing(web().1)), db()]),
            _ => {
                let config = std::fs::read_to_string(ws.config()).unwrap()
                    + "\n[reconcile]\nobserve_paths = [\"prod\"]\n";
                std::fs::write(ws.config(), config).unwrap();
            }
        }
        let (_, out) = ws.run_once();
        let (_, reason, _) = ws.condition("web-01", "Reconciling");
        assert_eq!(reason, "Observing", "{how}: {out}");

        // The spec file removed: twice, so the policy is kept, not only remembered once.
        std::fs::remove_file(ws.path("repo/prod/web.yaml")).unwrap();
        ws.commit_specs(&[db()]);
        for round in 0..2 {
            let since = next_seq(&mut pve);
            let (_, out) = ws.run_once();
            assert_eq!(
                writes_since(&mut pve, since),
                Vec::<String>::new(),
                "{how}, round {round}: {out}"
            );
            assert_eq!(
                owned_vms(&mut pve).len(),
                2,
                "{how}: web-01's VM is kept: {out}"
            );
            assert_eq!(pve.vm(web_vmid)["status"], "running", "{how}: {out}");
            let summary = std::fs::read_to_string(ws.path("status/_summary.yaml")).unwrap();
            assert!(
                summary.contains("web-01") && summary.contains("observe-only"),
                "{how}: {summary}"
            );
        }

        // Back as Full for a cycle (out of the observed directory, without the policy), then
        // removed: deleted.
        if how == "managementPolicy" {
            ws.commit_specs(&[("prod/web.yaml", web().1), db()]);
            assert!(ws.run_once().0, "{how}");
            std::fs::remove_file(ws.path("repo/prod/web.yaml")).unwrap();
            ws.commit_specs(&[db()]);
            let (ok, out) = ws.run_once();
            assert!(ok, "{how}: {out}");
            assert_eq!(
                owned_vms(&mut pve).len(),
                1,
                "{how}: deleted once Full: {out}"
            );
        }
    }
}
