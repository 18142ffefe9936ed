//! The reconcile engine against fakepve: create, update, delete, release, adopt, converge,
//! refusals, offline nodes, locks and a flaky network.

mod common;

use common::engine::{Workspace, owned_vms, spec, text};
use common::{FakePve, default_scenario};

#[test]
fn creates_by_clone_and_by_import_then_idles() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("web.yaml", spec("web-01", "pve1", "9000", "    tags: [web]\n")),
        ("db.yaml", spec("db-01", "pve2", "local:import/debian-12-genericcloud-amd64.qcow2", "")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms = owned_vms(&mut pve);
    assert_eq!(vms.len(), 2, "{vms:?}\n{out}");
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{out}");
    assert_eq!(ws.condition("db-01", "Ready").0, "True", "{out}");

    // A second run changes nothing and costs two reads per site.
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let reqs = pve.requests();
    assert!(reqs.iter().all(|r| r.method == "GET"), "{reqs:?}");
    assert_eq!(reqs.len(), 2, "an idle cycle is one status and one listing: {reqs:?}");
}

