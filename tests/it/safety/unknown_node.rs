//! A node a spec names that its site's cluster does not have (a typo: `pve9` for `pve1`) is an
//! invalid spec, not an outage: `run` stalls the spec and leaves its VM exactly where it is
//! (neither deleted, released nor moved, orphan cleanup included), `plan` exits 1 naming it,
//! `status` shows it invalid with the site still healthy, and `validate --config` says so when
//! the site can be read. Judged only on a membership read whole: without quorum the spec waits
//! as before.

use crate::common;

use std::time::Duration;

use common::engine::{Workspace, next_seq, owned_vms, spec, text, writes_since};
use common::{FakePve, default_scenario};

/// Orphans deleted when stopped, after 1 s: a VM wrongly taken for one would go.
const FAST_ORPHANS: &str = "[reconcile]\norphans = \"delete-stopped\"\norphan_grace = \"1s\"\n";

/// What `node pve9` on site lab (nodes pve1 and pve2) is said to be.
const TYPO: &str = "node pve9 is not a node of site lab's cluster; known nodes: pve1, pve2 (did \
                    you mean pve1?)";

/// Specs `a` to `d`, each a stopped VM on pve1, `d`'s on `d_node`.
fn four(d_node: &str) -> Vec<(&'static str, String)> {
    let stopped = "    powerState: stopped\n";
    vec![
        ("a.yaml", spec("a", "pve1", "9000", stopped)),
        ("b.yaml", spec("b", "pve1", "9000", stopped)),
        ("c.yaml", spec("c", "pve1", "9000", stopped)),
        ("d.yaml", spec("d", d_node, "9000", stopped)),
    ]
}

/// The node fakepve lists VM `name` on.
fn node_of(pve: &mut FakePve, name: &str) -> Option<String> {
    pve.vms()
        .into_iter()
        .find(|vm| vm["name"] == name)
        .and_then(|vm| vm["node"].as_str().map(str::to_string))
}

#[test]
fn a_typo_in_a_managed_vms_node_stalls_its_spec_and_leaves_the_vm_where_it_is() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(&pve, FAST_ORPHANS);
    ws.commit_specs(&four("pve1"));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 4);
    let vmid = ws.status("d")["vmId"].as_u64().unwrap();

    ws.commit_specs(&four("pve9"));
    let since = next_seq(&mut pve);
    // Twice, past the orphan grace period in between: nothing takes d's VM for an orphan.
    let (ok, first) = ws.run_once();
    std::thread::sleep(Duration::from_millis(1300));
    let (_, second) = ws.run_once();
    assert!(!ok, "an invalid spec fails the run: {first}");
    assert!(first.contains(TYPO), "said by the run: {first}");
    assert_eq!(
        owned_vms(&mut pve).len(),
        4,
        "nothing deleted: {first}\n{second}"
    );
    assert_eq!(node_of(&mut pve, "d").as_deref(), Some("pve1"), "not moved");
    assert_eq!(
        writes_since(&mut pve, since),
        Vec::<String>::new(),
        "nothing written at all: {first}\n{second}"
    );
    let (stalled, reason, message) = ws.condition("d", "Stalled");
    assert_eq!(
        (stalled.as_str(), reason.as_str()),
        ("True", "ValidationFailed")
    );
    assert!(message.contains(TYPO), "{message}");
    assert!(
        message.contains("d.yaml:"),
        "where it is written: {message}"
    );
    let (ready, reason, _) = ws.condition("d", "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert_eq!(ws.status("d")["vmId"].as_u64(), Some(vmid), "its VM named");

    // `status`: the spec invalid, the site healthy (a typo is not an offline node).
    let status = ws.proxsync(&["status"]);
    let shown = text(&status);
    assert!(shown.contains("Sites:       1/1 healthy"), "{shown}");
    assert!(!shown.contains("NodeUnhealthy"), "{shown}");
    let detail = text(&ws.proxsync(&["status", "d"]));
    assert!(detail.contains(TYPO), "{detail}");

    // Fixed, the spec is Ready again with the same VM.
    ws.commit_specs(&four("pve1"));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(ws.condition("d", "Ready").0, "True");
    assert_eq!(ws.status("d")["vmId"].as_u64(), Some(vmid));
    assert_eq!(owned_vms(&mut pve).len(), 4);
}

#[test]
fn without_quorum_the_membership_is_not_judged_and_the_spec_waits() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&four("pve1"));
    assert!(ws.run_once().0);
    ws.commit_specs(&four("pve9"));

    // A node out of quorum may hold an old list of members: no spec is judged on it.
    pve.lose_quorum();
    let _ = ws.run_once();
    let (stalled, _, message) = ws.condition("d", "Stalled");
    assert_ne!(
        stalled, "True",
        "not invalid on an answer without quorum: {message}"
    );
    assert!(!ws.condition("d", "Ready").2.contains("is not a node"));

    pve.regain_quorum();
    let _ = ws.run_once();
    let (stalled, reason, message) = ws.condition("d", "Stalled");
    assert_eq!(
        (stalled.as_str(), reason.as_str()),
        ("True", "ValidationFailed")
    );
    assert!(message.contains(TYPO), "{message}");
    assert_eq!(node_of(&mut pve, "d").as_deref(), Some("pve1"));
    assert_eq!(owned_vms(&mut pve).len(), 4);
}

#[test]
fn plan_names_the_node_and_exits_1_and_creates_nothing_on_it() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("a", "pve1", "9000", "")),
        ("e.yaml", spec("e", "pve9", "9000", "")),
    ]);
    let out = ws.proxsync(&["plan"]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains(TYPO), "{shown}");
    assert!(shown.contains("e.yaml:"), "{shown}");
    assert!(shown.contains("error: invalid spec(s): e"), "{shown}");
    assert!(!shown.contains("offline; waiting"), "{shown}");
    let creates = |name: &str| {
        (shown.lines()).any(|l| l.starts_with("+ create") && l.contains(&format!(" {name}:")))
    };
    assert!(!creates("e"), "{shown}");
    assert!(creates("a"), "{shown}");
    assert!(shown.contains("! e: the spec is invalid"), "{shown}");

    let json = ws.proxsync(&["plan", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let errors = doc["errors"].to_string();
    assert!(errors.contains("invalid spec(s): e"), "{doc}");
}

#[test]
fn validate_with_the_config_checks_nodes_on_a_reachable_site_and_warns_on_another() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("a", "pve1", "9000", "")),
        ("e.yaml", spec("e", "pve9", "9000", "")),
    ]);
    let repo = ws.path("repo");
    let out = ws.proxsync(&["validate", repo.to_str().unwrap()]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("e.yaml:"), "{shown}");
    assert!(shown.contains(&format!("error: {TYPO}")), "{shown}");
    assert!(shown.contains("1 valid spec(s)"), "{shown}");

    // Without --config no site is asked: the spec is valid as far as it goes.
    let alone = std::process::Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(["validate", repo.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(alone.status.success(), "{}", text(&alone));

    // A site that cannot be read is a warning, not an error.
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let broken = config.replace(pve.url(), &format!("https://127.0.0.1:{port}"));
    std::fs::write(ws.config(), broken).unwrap();
    let out = ws.proxsync(&["validate", repo.to_str().unwrap()]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("warning: cannot read site lab's nodes to check spec.node"),
        "{shown}"
    );
}

/// `d` renamed to `d2` (`proxsync.io/renamed-from: d`) in the commit that also puts a typo in
/// its node: `d2` is invalid, and `d`, the spec it is renamed from, is not a removed one. Its
/// VM is neither deleted nor written to, and once the node is fixed the rename re-labels it:
/// no second VM.
#[test]
fn a_rename_with_a_typo_in_its_node_deletes_nothing() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&four("pve1"));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("d")["vmId"].as_u64().unwrap();

    let stopped = "    powerState: stopped\n";
    let renamed = |node: &str| {
        spec("d2", node, "9000", stopped).replace(
            "  name: d2\n",
            "  name: d2\n  annotations:\n    proxsync.io/renamed-from: d\n",
        )
    };
    let mut specs = four("pve1");
    specs[3] = ("d.yaml", renamed("pve9"));
    ws.commit_specs(&specs);
    let plan = text(&ws.proxsync(&["plan"]));
    assert!(!plan.contains("- delete"), "{plan}");
    let since = next_seq(&mut pve);
    let (ok, out) = ws.run_once();
    assert!(!ok, "an invalid spec fails the run: {out}");
    assert!(out.contains(TYPO), "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 4, "nothing deleted: {out}");
    assert_eq!(
        writes_since(&mut pve, since),
        Vec::<String>::new(),
        "nothing written at all: {out}"
    );
    let (stalled, reason, _) = ws.condition("d2", "Stalled");
    assert_eq!(
        (stalled.as_str(), reason.as_str()),
        ("True", "ValidationFailed")
    );

    // Fixed, the rename goes on: d's VM is d2's, and no other is made.
    specs[3] = ("d.yaml", renamed("pve1"));
    ws.commit_specs(&specs);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(ws.status("d2")["vmId"].as_u64(), Some(vmid), "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 4, "{out}");
}

/// Without quorum `validate --config` checks no node and says so in one readable line.
#[test]
fn validate_without_quorum_warns_in_words() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("e.yaml", spec("e", "pve9", "9000", ""))]);
    pve.lose_quorum();
    let repo = ws.path("repo");
    let out = ws.proxsync(&["validate", repo.to_str().unwrap()]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains(
            "warning: site lab's cluster has no quorum or did not list all its nodes: spec.node \
             is not checked"
        ),
        "{shown}"
    );
}
