//! The repository cannot make proxsync delete a VM by hiding its spec, and what proxsync
//! writes in `state_dir` is private from the start (issue 11).

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::engine::{Workspace, owned_vms, spec, text};
use common::{FakePve, default_scenario};

fn names(pve: &mut FakePve) -> Vec<String> {
    let mut n: Vec<String> = owned_vms(pve).into_iter().map(|(_, n)| n).collect();
    n.sort();
    n
}

#[test]
fn a_spec_the_reader_cannot_see_does_not_delete_its_vm() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let all = [
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
        ("c.yaml", spec("web-03", "pve1", "9000", "")),
        ("db.yaml", spec("db-01", "pve1", "9000", "")),
    ];
    ws.commit_specs(&all);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(names(&mut pve).len(), 4);

    // Renamed to an extension the reader does not take: the spec is not seen, but it is not
    // gone either. (One VM in four is under max_delete_fraction: no safety valve hides this.)
    let repo = ws.path("repo");
    ws.git(&["mv", "db.yaml", "db.YAML"]);
    ws.git(&["commit", "-q", "-m", "rename"]);
    let (_, out) = ws.run_once();
    assert!(
        names(&mut pve).contains(&"db-01".to_string()),
        "db-01 was deleted because db.YAML was not read:\n{out}"
    );
    assert!(
        out.contains("db.YAML:1:1: error:") && out.contains("lower case"),
        "the path is named:\n{out}"
    );

    // A submodule (gitlink) where the spec was: the same.
    ws.git(&["rm", "-q", "db.YAML"]);
    let inner = tempfile::tempdir().unwrap();
    let git_in = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example"])
            .args(args)
            .current_dir(inner.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    git_in(&["init", "-q", "-b", "main"]);
    std::fs::write(inner.path().join("db.yaml"), &all[3].1).unwrap();
    git_in(&["add", "."]);
    git_in(&["commit", "-q", "-m", "db"]);
    let head = git_in(&["rev-parse", "HEAD"]);
    ws.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{head},team-db"),
    ]);
    ws.git(&["commit", "-q", "-m", "db moved to a submodule"]);
    let (_, out) = ws.run_once();
    assert!(
        names(&mut pve).contains(&"db-01".to_string()),
        "db-01 was deleted because the submodule was not read:\n{out}"
    );
    assert!(
        out.contains("team-db:1:1: error:") && out.contains("submodule"),
        "{out}"
    );

    // Really removed (and only documentation left beside the specs): deleted.
    ws.git(&["rm", "-q", "--cached", "team-db"]);
    std::fs::write(repo.join("README.md"), "# our VMs\n").unwrap();
    ws.commit_specs(&all[..3]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(names(&mut pve), ["web-01", "web-02", "web-03"], "{out}");
}

#[test]
fn state_dir_and_database_are_private_from_the_start() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    // As a user's shell runs it: umask 022, no systemd to make the directory.
    let out = Command::new("sh")
        .args(["-c", "umask 022; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_proxsync"))
        .args(["run", "--once", "--config"])
        .arg(ws.config())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let mode = |p: &str| {
        std::fs::metadata(ws.path(p))
            .unwrap_or_else(|e| panic!("{p}: {e}"))
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("state"), 0o700, "state_dir");
    assert_eq!(mode("state/proxsync.redb"), 0o600, "the database");
    // Status files stay readable: that is what they are for.
    assert_eq!(mode("status/web-01.yaml"), 0o644);
}

/// 1,000 `ProxmoxVMSet` documents of `replicas: 1000` in one 162 KB file: each within every
/// per-file and per-set limit, together a million specs. The members are counted before any
/// set is expanded, and past `[source] max_specs` (200,000 by default) the read is refused
/// with one error: `validate` says so within an address space of 1 GiB (it took 1.77 GiB to
/// report a million valid specs).
#[test]
fn one_small_file_cannot_expand_to_a_million_specs() {
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::new();
    for i in 0..1000 {
        yaml.push_str(&format!(
            "---\napiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata: {{name: s{i}}}\n\
             spec:\n  replicas: 1000\n  template:\n    forProvider: {{site: lab, node: pve1, \
             image: \"9000\"}}\n"
        ));
    }
    assert!(yaml.len() < 170_000, "{}", yaml.len());
    std::fs::write(dir.path().join("sets.yaml"), &yaml).unwrap();
    // The guard is the address space, not a time: an expansion would pass 1 GiB.
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 1048576 && exec \"$0\" validate \"$1\"")
        .arg(env!("CARGO_BIN_EXE_proxsync"))
        .arg(dir.path())
        .output()
        .expect("sh");
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert_eq!(said.matches("error:").count(), 1, "one error: {said}");
    assert!(
        said.contains("[source] max_specs = 200000") && said.contains("No spec is read"),
        "{said}"
    );
    assert!(said.contains("0 valid spec(s)"), "{said}");
}

/// A commit past `[source] max_specs` holds no spec and one error: nothing is created and,
/// the set being incomplete, nothing is removed; the next commit within the cap applies.
#[test]
fn a_commit_past_max_specs_creates_and_removes_nothing() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let config = std::fs::read_to_string(ws.config()).unwrap();
    std::fs::write(
        ws.config(),
        config.replace("[source]\n", "[source]\nmax_specs = 20\n"),
    )
    .unwrap();
    let web = ("web.yaml", spec("web-01", "pve1", "9000", ""));
    ws.commit_specs(std::slice::from_ref(&web));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let set = "apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata: {name: crew}\nspec:\n  \
               replicas: 25\n  template:\n    forProvider: {site: lab, node: pve1, image: \"9000\", \
               cpu: 1, memory: 1Gi, disk: 8Gi}\n";
    ws.commit_specs(&[("crew.yaml", set.to_string())]);
    let (_, out) = ws.run_once();
    assert_eq!(out.matches("error:").count(), 1, "one error: {out}");
    assert!(out.contains("max_specs = 20"), "{out}");
    assert_eq!(
        names(&mut pve),
        ["web-01"],
        "nothing created or deleted: {out}"
    );
    ws.commit_specs(&[
        ("crew.yaml", set.replace("replicas: 25", "replicas: 2")),
        web,
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(names(&mut pve), ["crew-01", "crew-02", "web-01"], "{out}");
}
