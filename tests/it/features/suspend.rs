//! Suspend and resume against fakepve: a suspended spec (`proxsync suspend`, `spec.suspend`,
//! or `--all`) gets reads only across change and removal, its status says who suspended it,
//! and resuming lets the next cycle apply what waited.

use crate::common;

use common::engine::{Workspace, next_seq, owned_vms, spec, text, writes_since};
use common::{FakePve, default_scenario};

fn summary(ws: &Workspace) -> String {
    std::fs::read_to_string(ws.path("status/_summary.yaml")).unwrap()
}

fn memory_of(pve: &mut FakePve, vmid: u32) -> String {
    let vm = pve.vm(vmid);
    let v = |v: &serde_json::Value| v.to_string().trim_matches('"').to_string();
    match v(&vm["pending"]["memory"]).as_str() {
        "null" => v(&vm["config"]["memory"]),
        pending => pending.to_string(),
    }
}

fn vmid_of(pve: &mut FakePve, name: &str) -> u32 {
    let vms = owned_vms(pve);
    vms.iter().find(|(_, n)| n == name).expect(name).0 as u32
}

#[test]
fn a_suspended_spec_gets_reads_only_and_its_removal_waits_until_it_is_resumed() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    assert!(ws.run_once().0);
    let web1 = vmid_of(&mut pve, "web-01");

    let out = ws.proxsync(&["suspend", "web-01", "--reason", "restoring a backup"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(ws.proxsync(&["suspend", "web-02"]).status.success());
    let unknown = ws.proxsync(&["suspend", "web-99"]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown).contains("no such spec: web-99"),
        "{}",
        text(&unknown)
    );

    // web-01 changed, web-02 removed: neither happens.
    let changed = spec("web-01", "pve1", "9000", "").replace("memory: 2Gi", "memory: 4Gi");
    ws.commit_specs(&[("a.yaml", changed)]);
    let since = next_seq(&mut pve);
    let (_, out) = ws.run_once();
    assert_eq!(writes_since(&mut pve, since), Vec::<String>::new(), "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 2, "web-02's VM is kept");
    let (status, reason, message) = ws.condition("web-01", "Suspended");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Suspended"));
    assert!(message.contains("restoring a backup"), "{message}");
    assert!(message.contains("proxsync resume web-01"), "{message}");
    let (ready, reason, message) = ws.condition("web-01", "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "Suspended"));
    assert!(
        message.contains("memory: spec 4096 MiB, VM 2048 MiB"),
        "{message}"
    );
    let (_, reason, _) = ws.condition("web-01", "Reconciling");
    assert_eq!(reason, "Suspended");
    assert!(
        summary(&ws).contains("the removal of spec web-02's VM waits"),
        "{}",
        summary(&ws)
    );
    let listed = text(&ws.proxsync(&["status"]));
    assert!(listed.contains("Suspended"), "{listed}");

    // Resumed: the next cycle applies both.
    let out = ws.proxsync(&["resume", "web-01"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(ws.proxsync(&["resume", "web-02"]).status.success());
    assert!(ws.run_once().0);
    assert_eq!(memory_of(&mut pve, web1), "4096");
    assert_eq!(owned_vms(&mut pve).len(), 1, "web-02's VM deleted");
    assert!(
        !ws.status("web-01").to_string().contains("\"Suspended\""),
        "{}",
        ws.status("web-01")
    );
}

#[test]
fn spec_suspend_in_git_holds_the_vm_and_its_removal_until_resumed() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    // A second spec stays: removing every spec is refused by a valve of its own.
    let db = || {
        (
            "db.yaml",
            spec("db-01", "pve1", "9000", "").replace("cpu: 2", "cpu: 4"),
        )
    };
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", "")), db()]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let suspended = |memory: &str| {
        spec("web-01", "pve1", "9000", "")
            .replace("memory: 2Gi", memory)
            .replacen("spec:\n", "spec:\n  suspend: true\n", 1)
    };
    ws.commit_specs(&[("a.yaml", suspended("memory: 4Gi")), db()]);
    let since = next_seq(&mut pve);
    let (_, out) = ws.run_once();
    assert_eq!(writes_since(&mut pve, since), Vec::<String>::new(), "{out}");
    let (_, reason, message) = ws.condition("web-01", "Suspended");
    assert_eq!(reason, "Suspended");
    assert!(message.contains("spec.suspend in git"), "{message}");
    assert!(message.contains("remove spec.suspend"), "{message}");

    // Removed from git while suspended: the VM stays until a person resumes the name.
    ws.commit_specs(&[db()]);
    let since = next_seq(&mut pve);
    let (_, out) = ws.run_once();
    assert_eq!(writes_since(&mut pve, since), Vec::<String>::new(), "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 2);
    assert!(
        summary(&ws).contains("proxsync resume web-01"),
        "{}",
        summary(&ws)
    );
    let out = ws.proxsync(&["resume", "web-01"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("web-01 resumed"), "{}", text(&out));
    assert!(text(&out).contains("suspended again"), "{}", text(&out));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 1, "deleted once resumed");
}

#[test]
fn lifting_spec_suspend_in_git_applies_what_waited() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let text4 = spec("web-01", "pve1", "9000", "").replace("memory: 2Gi", "memory: 4Gi");
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    assert!(ws.run_once().0);
    let vmid = vmid_of(&mut pve, "web-01");
    ws.commit_specs(&[(
        "a.yaml",
        text4.replacen("spec:\n", "spec:\n  suspend: true\n", 1),
    )]);
    ws.run_once();
    assert_eq!(memory_of(&mut pve, vmid), "2048");
    ws.commit_specs(&[("a.yaml", text4)]);
    assert!(ws.run_once().0);
    assert_eq!(memory_of(&mut pve, vmid), "4096");
}

#[test]
fn suspend_all_holds_every_spec_and_new_ones_until_resume_all() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let keep = || {
        (
            "k.yaml",
            spec("keep-01", "pve1", "9000", "").replace("cpu: 2", "cpu: 3"),
        )
    };
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", "")), keep()]);
    assert!(ws.run_once().0);
    let out = ws.proxsync(&["suspend", "--all", "--reason", "cluster upgrade"]);
    assert!(out.status.success(), "{}", text(&out));
    // web-01 removed (1 of 2: the valve allows it), web-02 added (another content: not a
    // rename).
    let web2 = spec("web-02", "pve1", "9000", "").replace("memory: 2Gi", "memory: 3Gi");
    ws.commit_specs(&[("b.yaml", web2.clone()), keep()]);
    let since = next_seq(&mut pve);
    let (_, out) = ws.run_once();
    assert_eq!(writes_since(&mut pve, since), Vec::<String>::new(), "{out}");
    let (_, _, message) = ws.condition("web-02", "Suspended");
    assert!(message.contains("cluster upgrade"), "{message}");
    assert!(
        summary(&ws).contains("proxsync resume --all"),
        "{}",
        summary(&ws)
    );
    let out = ws.proxsync(&["resume", "--all"]);
    assert!(
        text(&out).contains("1 suspension(s) lifted"),
        "{}",
        text(&out)
    );
    assert!(ws.run_once().0);
    let mut names: Vec<String> = owned_vms(&mut pve).into_iter().map(|(_, n)| n).collect();
    names.sort();
    assert_eq!(names, ["keep-01", "web-02"], "web-01 deleted, web-02 made");
    assert!(!summary(&ws).contains("suspended"), "{}", summary(&ws));
}

/// A suspended spec's removal is held only after the valves judged the cycle's removals all
/// together: 3 of 4 removed in one commit are refused whole, one of them suspended or not.
#[test]
fn a_suspension_never_splits_a_batch_of_removals_under_the_valve() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(&pve, "[reconcile]\nmax_delete_fraction = 0.5\n");
    let s = |n: &str, mem: &str| {
        spec(n, "pve1", "9000", "").replace("memory: 2Gi", &format!("memory: {mem}"))
    };
    ws.commit_specs(&[
        ("a.yaml", s("web-01", "1Gi")),
        ("b.yaml", s("web-02", "2Gi")),
        ("c.yaml", s("web-03", "3Gi")),
        ("d.yaml", s("web-04", "4Gi")),
    ]);
    assert!(ws.run_once().0);
    assert!(ws.proxsync(&["suspend", "web-01"]).status.success());
    ws.commit_specs(&[("d.yaml", s("web-04", "4Gi"))]);
    let (_, out) = ws.run_once();
    assert_eq!(owned_vms(&mut pve).len(), 4, "{out}");
    assert!(
        summary(&ws).contains("max_delete_fraction"),
        "{}",
        summary(&ws)
    );
}

/// Issue 41 item 2: `proxsync suspend app`, then a commit renaming `app` to `app-new`
/// (`proxsync.io/renamed-from: app`) with 4 cores. The suspension of the old name holds the
/// rename and everything after it: the VM is neither re-labelled nor changed, `app-new` says
/// it is suspended through `app`, and `proxsync resume app` lets both happen.
#[test]
fn a_suspension_of_the_old_name_holds_a_rename_until_resumed() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let db = || {
        (
            "db.yaml",
            spec("db-01", "pve1", "9000", "").replace("memory: 2Gi", "memory: 3Gi"),
        )
    };
    ws.commit_specs(&[("app.yaml", spec("app", "pve1", "9000", "")), db()]);
    assert!(ws.run_once().0);
    let vmid = vmid_of(&mut pve, "app");
    let out = ws.proxsync(&["suspend", "app", "--reason", "restoring a backup by hand"]);
    assert!(out.status.success(), "{}", text(&out));

    let renamed = spec("app-new", "pve1", "9000", "")
        .replace(
            "  name: app-new\n",
            "  name: app-new\n  annotations:\n    proxsync.io/renamed-from: app\n",
        )
        .replace("cpu: 2", "cpu: 4");
    ws.commit_specs(&[("app.yaml", renamed), db()]);
    for round in 0..2 {
        let since = next_seq(&mut pve);
        let (_, out) = ws.run_once();
        assert_eq!(
            writes_since(&mut pve, since),
            Vec::<String>::new(),
            "round {round}: {out}"
        );
        let claims = common::engine::marker_claims(&mut pve);
        assert_eq!(claims.get("app"), Some(&vec![vmid as u64]), "{claims:?}");
        assert_eq!(claims.get("app-new"), None, "{claims:?}");
        assert_eq!(
            pve.vm(vmid)["config"]["cores"]
                .to_string()
                .trim_matches('"'),
            "2"
        );
        let (status, reason, message) = ws.condition("app-new", "Suspended");
        assert_eq!((status.as_str(), reason.as_str()), ("True", "Suspended"));
        assert!(message.contains("restoring a backup by hand"), "{message}");
        assert!(message.contains("proxsync resume app`"), "{message}");
        let (_, reason, message) = ws.condition("app-new", "Ready");
        assert_eq!(reason, "Suspended", "{message}");
    }

    let out = ws.proxsync(&["resume", "app"]);
    assert!(out.status.success(), "{}", text(&out));
    let _ = ws.run_once();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let claims = common::engine::marker_claims(&mut pve);
    assert_eq!(
        claims.get("app-new"),
        Some(&vec![vmid as u64]),
        "{claims:?}"
    );
    assert_eq!(claims.get("app"), None, "{claims:?}");
    let cores = pve.vm(vmid)["config"]["cores"].to_string();
    let pending = pve.vm(vmid)["pending"]["cores"].to_string();
    assert!(
        cores.trim_matches('"') == "4" || pending.trim_matches('"') == "4",
        "{cores} {pending}"
    );
}
