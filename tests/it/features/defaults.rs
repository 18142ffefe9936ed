//! `_defaults.yaml` against fakepve through the git source: specs take the defaults' values,
//! a changed default is an update of every VM below it (and `plan` says so per VM), a default
//! `deletionPolicy: Orphan` is what a removal follows, and a broken defaults file holds the
//! specs below it.

use crate::common;

use common::engine::{Workspace, owned_vms, text};
use common::{FakePve, default_scenario};

fn defaults(cpu: u32) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxDefaults\nspec:\n  deletionPolicy: Orphan\n  \
         forProvider:\n    site: lab\n    node: pve1\n    image: \"9000\"\n    cpu: {cpu}\n    \
         disk: 8Gi\n"
    )
}

fn short_spec(name: &str, memory: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\nspec:\n  \
         forProvider:\n    memory: {memory}\n"
    )
}

fn cores(pve: &mut FakePve, vmid: u64) -> String {
    let vm = pve.vm(vmid as u32);
    let v = |v: &serde_json::Value| v.to_string().trim_matches('"').to_string();
    match v(&vm["pending"]["cores"]).as_str() {
        "null" => v(&vm["config"]["cores"]),
        pending => pending.to_string(),
    }
}

#[test]
fn specs_take_their_directorys_defaults_and_a_changed_default_updates_each_vm() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let files = |cpu: u32| {
        vec![
            ("_defaults.yaml", defaults(cpu)),
            ("web-01.yaml", short_spec("web-01", "1Gi")),
            ("web-02.yaml", short_spec("web-02", "3Gi")),
        ]
    };
    ws.commit_specs(&files(2));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms = owned_vms(&mut pve);
    assert_eq!(vms.len(), 2, "{out}");
    for (vmid, _) in &vms {
        assert_eq!(cores(&mut pve, *vmid), "2");
    }

    // One default changed: both VMs are updated, and plan says so for each.
    ws.commit_specs(&files(3));
    let plan = ws.proxsync(&["plan"]);
    let shown = text(&plan);
    for name in ["web-01", "web-02"] {
        assert!(
            shown
                .lines()
                .any(|l| l.contains(&format!("~ update  {name}")) && l.contains("cores 2 -> 3")),
            "{shown}"
        );
    }
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    for (vmid, _) in &vms {
        assert_eq!(cores(&mut pve, *vmid), "3", "{out}");
    }

    // The default deletionPolicy: Orphan is what a removal follows: released, not deleted.
    ws.commit_specs(&[
        ("_defaults.yaml", defaults(3)),
        ("web-01.yaml", short_spec("web-01", "1Gi")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(out.contains("- release web-02"), "{out}");
    assert!(
        !pve.requests().iter().any(|r| r.method == "DELETE"),
        "{out}"
    );
}

#[test]
fn a_broken_defaults_file_holds_the_specs_below_it() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("_defaults.yaml", defaults(2)),
        ("web-01.yaml", short_spec("web-01", "1Gi")),
        ("web-02.yaml", short_spec("web-02", "3Gi")),
    ]);
    assert!(ws.run_once().0);
    ws.commit_specs(&[
        (
            "_defaults.yaml",
            defaults(2).replace("kind: ProxmoxDefaults", "kind: ["),
        ),
        ("web-01.yaml", short_spec("web-01", "1Gi")),
        ("web-02.yaml", short_spec("web-02", "3Gi")),
    ]);
    let since = pve.requests().last().map_or(0, |r| r.seq + 1);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let writes: Vec<String> = (pve.requests_since(since).into_iter())
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(writes, Vec::<String>::new(), "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 2);
    let (_, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(reason, "ValidationFailed");
    assert!(message.contains("_defaults.yaml"), "{message}");
}

/// Paths given relative to a subdirectory find the defaults above them by where they are, not
/// by how they are written: `.` inside a directory takes the top's `_defaults.yaml`, and
/// `../eu` from a sibling never takes the sibling's.
#[test]
fn relative_paths_find_the_defaults_where_the_files_are() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    for d in ["eu", "us"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let write = |path: &str, text: &str| std::fs::write(root.join(path), text).unwrap();
    write("_defaults.yaml", &defaults(2).replace("cpu: 2", "cpu: 3"));
    write(
        "us/_defaults.yaml",
        "apiVersion: proxsync.io/v1\nkind: ProxmoxDefaults\nspec:\n  forProvider: {cpu: 8}\n",
    );
    write("eu/web.yaml", &short_spec("web-01", "1Gi"));
    let effective = |cwd: &str, path: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(["validate", "--effective", path])
            .current_dir(root.join(cwd))
            .output()
            .unwrap();
        text(&out)
    };
    let from_eu = effective("eu", "web.yaml");
    assert!(from_eu.contains("cpu: 3"), "{from_eu}");
    let from_us = effective("us", "../eu/web.yaml");
    assert!(
        from_us.contains("cpu: 3") && !from_us.contains("cpu: 8"),
        "{from_us}"
    );
}
