//! `dependsOn` against fakepve: a chain is created in order within one cycle, a dependant of a
//! spec that cannot be made waits and says for which, and removals go dependants first.

use crate::common;

use common::engine::{Workspace, next_seq, owned_vms, spec};
use common::{FakePve, default_scenario};

/// `spec` with `dependsOn` and a memory size of its own (no two specs alike: not renames).
fn depending(name: &str, mem: &str, on: &[&str]) -> String {
    let deps = match on {
        [] => String::new(),
        _ => format!("  dependsOn: [{}]\n", on.join(", ")),
    };
    spec(name, "pve1", "9000", "")
        .replace("memory: 2Gi", &format!("memory: {mem}"))
        .replacen("spec:\n", &format!("spec:\n{deps}"), 1)
}

/// The spec names in the order their VMs were cloned (the clone request carries the name).
fn clone_order(pve: &mut FakePve) -> Vec<String> {
    pve.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/clone"))
        .filter_map(|r| {
            let name = r.body.split('&').find_map(|kv| kv.strip_prefix("name="))?;
            Some(name.to_string())
        })
        .collect()
}

fn chain() -> Vec<(&'static str, String)> {
    vec![
        ("web.yaml", depending("web-01", "1Gi", &["app-01"])),
        ("app.yaml", depending("app-01", "3Gi", &["db-01"])),
        ("db.yaml", depending("db-01", "4Gi", &[])),
    ]
}

#[test]
fn a_chain_is_created_in_order_in_one_cycle_and_removed_in_reverse() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(&pve, "[reconcile]\nmax_delete_fraction = 1.0\n");
    ws.commit_specs(&chain());
    let (ok, out) = ws.run_once();
    assert!(ok, "all three Ready after one cycle: {out}");
    assert_eq!(
        clone_order(&mut pve),
        ["db-01", "app-01", "web-01"],
        "{out}"
    );

    // The three removed at once: web-01's VM goes first, db-01's last.
    let keep = ("keep.yaml", depending("keep-01", "5Gi", &[]));
    ws.commit_specs(&[keep]);
    let vmids: std::collections::BTreeMap<String, u64> = owned_vms(&mut pve)
        .into_iter()
        .map(|(id, n)| (n, id))
        .collect();
    let since = next_seq(&mut pve);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let deleted = deleted_since(&mut pve, since);
    assert_eq!(
        deleted,
        [vmids["web-01"], vmids["app-01"], vmids["db-01"]],
        "{out}"
    );
    let names: Vec<String> = owned_vms(&mut pve).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["keep-01"]);
}

#[test]
fn a_dependant_of_a_spec_that_cannot_be_made_waits_naming_it() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let mut specs = chain();
    // db-01 from a template that does not exist: it fails, so app-01 and web-01 wait.
    specs[2].1 = specs[2].1.replace("image: \"9000\"", "image: \"9999\"");
    ws.commit_specs(&specs);
    let (ok, out) = ws.run_once();
    assert!(!ok);
    assert!(clone_order(&mut pve).is_empty(), "{out}");
    let (ready, reason, message) = ws.condition("app-01", "Ready");
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("False", "WaitingForDependencies")
    );
    assert!(message.contains("waiting for db-01"), "{message}");
    let (status, reason, _) = ws.condition("web-01", "Reconciling");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "WaitingForDependencies")
    );
    assert!(ws.condition("web-01", "Ready").2.contains("app-01"));
    assert_eq!(owned_vms(&mut pve).len(), 0);
}

/// A cycle is refused by `validate` and held by the daemon, naming the cycle.
#[test]
fn a_dependency_cycle_is_refused_by_validate_naming_it() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let dir = ws.path("cyclic");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.yaml"), depending("a-01", "1Gi", &["b-01"])).unwrap();
    std::fs::write(dir.join("b.yaml"), depending("b-01", "3Gi", &["a-01"])).unwrap();
    let out = ws.proxsync(&["validate", dir.to_str().unwrap()]);
    let text = common::engine::text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("cycle: a-01 -> b-01 -> a-01"), "{text}");
}

/// A set's name in `dependsOn` stands for all its members: the dependant is made once every
/// member is Ready.
#[test]
fn a_spec_depending_on_a_set_waits_for_all_its_members() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let set = db_set();
    ws.commit_specs(&[
        ("db.yaml", set),
        ("app.yaml", depending("app-01", "3Gi", &["db"])),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let order = clone_order(&mut pve);
    assert_eq!(order.len(), 3, "{out}");
    assert_eq!(order[2], "app-01", "{order:?}\n{out}");
}

/// A set and a spec depending on it, removed together: the dependant's VM goes first.
#[test]
fn a_set_and_its_dependant_removed_together_go_dependant_first() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(&pve, "[reconcile]\nmax_delete_fraction = 1.0\n");
    let set = db_set();
    ws.commit_specs(&[
        ("db.yaml", set),
        ("zz.yaml", depending("zz-app-01", "3Gi", &["db"])),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmids: std::collections::BTreeMap<String, u64> = owned_vms(&mut pve)
        .into_iter()
        .map(|(id, n)| (n, id))
        .collect();
    ws.commit_specs(&[("keep.yaml", depending("keep-01", "5Gi", &[]))]);
    let since = next_seq(&mut pve);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let deleted = deleted_since(&mut pve, since);
    assert_eq!(deleted.len(), 3, "{out}");
    assert_eq!(
        deleted[0], vmids["zz-app-01"],
        "{deleted:?} {vmids:?}\n{out}"
    );
}

/// A set `db` of two members on pve1.
fn db_set() -> String {
    "apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata:\n  name: db\nspec:\n  replicas: 2\n  \
     template:\n    forProvider:\n      site: lab\n      node: pve1\n      image: \"9000\"\n      \
     disk: 8Gi\n"
        .to_string()
}

/// The VMIDs deleted from sequence number `since` on, in the order the deletes were sent.
fn deleted_since(pve: &mut FakePve, since: u64) -> Vec<u64> {
    pve.requests_since(since)
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .filter_map(|r| r.path.rsplit('/').next()?.parse().ok())
        .collect()
}

/// A set member held invalid (its node is no node of the cluster: `pve9` for `pve1`) is a
/// member all the same: a spec depending on the set waits for it, as it waited while such a
/// node was taken for an offline one, instead of taking the set for Ready without it.
#[test]
fn a_spec_depending_on_a_set_waits_for_a_member_held_invalid() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let set = db_set() + "  overrides:\n    db-02: {forProvider: {node: pve9}}\n";
    ws.commit_specs(&[
        ("db.yaml", set),
        ("app.yaml", depending("app-01", "3Gi", &["db"])),
    ]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert!(out.contains("node pve9 is not a node"), "{out}");
    assert_eq!(clone_order(&mut pve), vec!["db-01"], "{out}");
}
