//! What proxsync costs a cluster, in requests (issue 15): per adopted VM after the database
//! was lost, and per created VM. Counts are behaviour, not timing: fakepve logs every request.

use crate::common;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, Scenario, default_scenario};
use serde_json::json;

/// The spec files of `n` VMs `web-NN` on node pve1, cloned from template 9000.
fn specs(n: usize) -> Vec<(String, String)> {
    (1..=n)
        .map(|i| {
            let name = format!("web-{i:02}");
            (format!("{name}.yaml"), spec(&name, "pve1", "9000", ""))
        })
        .collect()
}

fn commit(ws: &Workspace, files: &[(String, String)]) {
    let refs: Vec<(&str, String)> = files.iter().map(|(f, s)| (f.as_str(), s.clone())).collect();
    ws.commit_specs(&refs);
}

/// The requests fakepve logged, as "METHOD path" without the API prefix.
fn logged(pve: &mut FakePve) -> Vec<String> {
    pve.requests()
        .iter()
        .map(|r| {
            let path = r.path.strip_prefix("/api2/json").unwrap_or(&r.path);
            format!("{} {path}", r.method)
        })
        .collect()
}

/// After the database is lost (the marker key kept), VMs that already match their specs are
/// adopted with one config read each, read side by side, and nothing else: the cycle's two
/// listings, one marker read per VM, and the two listings of the look after the actions.
#[test]
fn an_adoption_of_a_matching_vm_costs_one_config_read() {
    const N: usize = 6;
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    commit(&ws, &specs(N));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let before = owned_vms(&mut pve);
    assert_eq!(before.len(), N, "{out}");

    ws.remove_state();
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(out.matches("adopt ").count(), N, "{out}");
    let reqs = logged(&mut pve);
    let configs = reqs
        .iter()
        .filter(|r| r.starts_with("GET /nodes/pve1/qemu/") && r.ends_with("/config"))
        .count();
    assert_eq!(configs, N, "one marker read per VM: {reqs:#?}");
    assert!(
        reqs.iter().all(|r| r.starts_with("GET ")),
        "an adoption of a matching VM writes nothing: {reqs:#?}"
    );
    assert_eq!(
        reqs.len(),
        N + 5,
        "listings (2 before, 2 after the actions), the root CA once per process (the site's \
         identity) and one config read per VM: {reqs:#?}"
    );
    assert_eq!(owned_vms(&mut pve), before, "the same VMs, none created");
    for i in 1..=N {
        let name = format!("web-{i:02}");
        assert_eq!(ws.condition(&name, "Ready").0, "True", "{name}: {out}");
        assert_eq!(ws.condition(&name, "Provisioned").1, "Adopted", "{name}");
    }

    // Then idle: the record holds what a converge would have recorded. A new process reads
    // the site's root CA once (its identity), then only the two listings.
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let mut reqs = logged(&mut pve);
    reqs.sort();
    assert_eq!(
        reqs,
        [
            "GET /cluster/resources",
            "GET /cluster/status",
            "GET /nodes/pve1/certificates/info"
        ],
        "an idle cycle after adopting: {reqs:#?}"
    );
}

/// An adopted VM that differs from its spec (memory changed by hand) is converged, from a
/// config read again before the change: the identity is re-verified before any write.
#[test]
fn an_adoption_of_a_drifted_vm_converges_after_a_fresh_read() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    commit(&ws, &specs(1));
    assert!(ws.run_once().0);
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    ws.remove_state();
    ws.commit_specs(&[(
        "web-01.yaml",
        spec("web-01", "pve1", "9000", "").replace("memory: 2Gi", "memory: 3Gi"),
    )]);
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let reqs = logged(&mut pve);
    let config = format!("/nodes/pve1/qemu/{vmid}/config");
    let put = reqs
        .iter()
        .position(|r| *r == format!("PUT {config}"))
        .unwrap_or_else(|| panic!("the memory is converged: {reqs:#?}"));
    let reads: Vec<usize> = reqs
        .iter()
        .enumerate()
        .filter(|(_, r)| **r == format!("GET {config}"))
        .map(|(i, _)| i)
        .collect();
    assert!(
        reads.iter().filter(|i| **i < put).count() >= 2,
        "the marker read, then a fresh read before the write: {reqs:#?}"
    );
}

/// Creating VMs by clone: what each one costs. The spec's 8 GiB disk is larger than the
/// template's 2 GiB, so each VM's disk is grown too (a resize and its task).
#[test]
fn a_created_vm_costs_few_requests() {
    const N: usize = 4;
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    commit(&ws, &specs(N));
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms = owned_vms(&mut pve);
    assert_eq!(vms.len(), N, "{out}");
    let reqs = logged(&mut pve);
    let count = |f: &dyn Fn(&str) -> bool| reqs.iter().filter(|r| f(r)).count();
    // Once per cycle or node, however many VMs: the listings before and after the actions,
    // and pre-flight's storages, bridges and version.
    assert_eq!(
        count(&|r| r.starts_with("GET /cluster/resources")),
        2,
        "{reqs:#?}"
    );
    assert_eq!(count(&|r| r == "GET /nodes/pve1/storage"), 1, "{reqs:#?}");
    assert_eq!(count(&|r| r == "GET /nodes/pve1/network"), 1, "{reqs:#?}");
    assert_eq!(count(&|r| r == "GET /version"), 1, "{reqs:#?}");
    // The clone, with one poll of its quick task.
    assert_eq!(count(&|r| r.ends_with("/qemu/9000/clone")), N, "{reqs:#?}");
    assert_eq!(count(&|r| r.contains(":qmclone:9000:")), N, "{reqs:#?}");
    // The VMIDs come from the listing's gaps: no nextid; the datacenter's range read once.
    assert_eq!(count(&|r| r == "GET /cluster/nextid"), 0, "{reqs:#?}");
    assert_eq!(count(&|r| r == "GET /cluster/options"), 1, "{reqs:#?}");
    for (vmid, name) in &vms {
        let on_vm: Vec<&String> = reqs
            .iter()
            .filter(|r| r.contains(&format!("/qemu/{vmid}/")))
            .collect();
        // The config read (identity, before the change), the change, the resize, the start.
        // A VM its own clone task has just made is stopped with nothing pending, so neither is
        // read; no second config read (nothing the change touched is read again); no guest
        // agent read right after the start.
        assert_eq!(
            on_vm,
            [
                format!("GET /nodes/pve1/qemu/{vmid}/config"),
                format!("PUT /nodes/pve1/qemu/{vmid}/config"),
                format!("PUT /nodes/pve1/qemu/{vmid}/resize"),
                format!("POST /nodes/pve1/qemu/{vmid}/status/start"),
            ]
            .iter()
            .collect::<Vec<_>>(),
            "{name}"
        );
        // One poll each of the resize and the start task.
        assert_eq!(count(&|r| r.contains(&format!(":{vmid}:"))), 2, "{reqs:#?}");
        assert_eq!(ws.condition(name, "Ready").0, "True", "{name}: {out}");
        assert_eq!(ws.condition(name, "Provisioned").1, "Created", "{name}");
    }
}

/// The spec files of `n` VMs `web-NN` whose disk is the template's size: nothing to grow.
fn specs_as_template(n: usize) -> Vec<(String, String)> {
    specs(n)
        .into_iter()
        .map(|(f, s)| (f, s.replace("disk: 8Gi", "disk: 2Gi")))
        .collect()
}

/// The requests that name VM `vmid` or one of its tasks, in order.
fn on_vm(reqs: &[String], vmid: u64) -> Vec<String> {
    reqs.iter()
        .filter(|r| r.contains(&format!("/qemu/{vmid}/")) || r.contains(&format!(":{vmid}:")))
        .cloned()
        .collect()
}

/// A cloned VM that needs no disk growth costs six requests: the clone and one poll of its
/// task, the config read (identity) and the change, the start and one poll of its task. The
/// VMID comes from the cycle's listing: no `/cluster/nextid` while the range has a gap, and
/// the datacenter's range is read once, however many VMs are made.
#[test]
fn a_cloned_vm_costs_six_requests() {
    const N: usize = 4;
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    commit(&ws, &specs_as_template(N));
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let reqs = logged(&mut pve);
    let mut vms = owned_vms(&mut pve);
    vms.sort();
    let vmids: Vec<u64> = vms.iter().map(|(id, _)| *id).collect();
    assert_eq!(vmids, [100, 101, 102, 103], "the lowest free ids: {out}");
    for (vmid, name) in &vms {
        let mine = on_vm(&reqs, *vmid);
        assert_eq!(mine.len(), 4, "{name}: {mine:#?}");
        assert_eq!(
            mine[..3],
            [
                format!("GET /nodes/pve1/qemu/{vmid}/config"),
                format!("PUT /nodes/pve1/qemu/{vmid}/config"),
                format!("POST /nodes/pve1/qemu/{vmid}/status/start"),
            ],
            "{name}"
        );
        assert!(
            mine[3].starts_with("GET /nodes/pve1/tasks/") && mine[3].contains(":qmstart:"),
            "one poll of the start task: {mine:#?}"
        );
        assert_eq!(ws.condition(name, "Provisioned").1, "Created", "{name}");
    }
    // The clone requests and their task polls name the template, not the new VM.
    let clones = reqs.iter().filter(|r| r.ends_with("/qemu/9000/clone"));
    let clone_polls = reqs
        .iter()
        .filter(|r| r.starts_with("GET /nodes/pve1/tasks/") && r.contains(":qmclone:9000:"));
    assert_eq!((clones.count(), clone_polls.count()), (N, N), "{reqs:#?}");
    // Everything else is once per cycle: the listings before and after the actions (status
    // and resources each), the site's root CA (once per process: its identity), pre-flight's
    // version, storages and bridges, and the datacenter's VMID range.
    let mut per_cycle: Vec<&String> = reqs
        .iter()
        .filter(|r| {
            !vmids
                .iter()
                .any(|v| !on_vm(&[r.to_string()], *v).is_empty())
        })
        .filter(|r| !r.ends_with("/qemu/9000/clone") && !r.contains(":qmclone:9000:"))
        .collect();
    per_cycle.sort();
    assert_eq!(
        per_cycle,
        [
            "GET /cluster/options",
            "GET /cluster/resources",
            "GET /cluster/resources",
            "GET /cluster/status",
            "GET /cluster/status",
            "GET /nodes/pve1/certificates/info",
            "GET /nodes/pve1/network",
            "GET /nodes/pve1/storage",
            "GET /version",
        ],
        "{reqs:#?}"
    );
    assert_eq!(reqs.len(), 6 * N + per_cycle.len(), "six requests per VM");
}

/// The datacenter's `next-id` range (`lower=5000`) is PVE's own rule for new VMIDs: VMs land at
/// or above it, in the gaps a container and a VM leave there.
#[test]
fn new_vms_land_in_the_datacenter_range() {
    let mut pve = Scenario::default()
        .set("datacenter", json!({"next-id": {"lower": "5000"}}))
        .start();
    pve.call("add_ct", json!({"vmid": 5000})).unwrap();
    pve.add_vm(json!({"vmid": 5002, "name": "someone-else", "node": "pve2"}));
    let ws = Workspace::new(&pve);
    commit(&ws, &specs_as_template(3));
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let mut vmids: Vec<u64> = owned_vms(&mut pve).iter().map(|(id, _)| *id).collect();
    vmids.sort();
    assert_eq!(vmids, [5001, 5003, 5004], "{out}");
    let reqs = logged(&mut pve);
    assert_eq!(
        reqs.iter()
            .filter(|r| r.ends_with("/qemu/9000/clone"))
            .count(),
        3,
        "no clone sent to a taken id (the container's counts): {reqs:#?}"
    );
    assert!(
        !reqs.iter().any(|r| r.starts_with("GET /cluster/nextid")),
        "{reqs:#?}"
    );
    assert!(
        !reqs.iter().any(|r| r.contains("/qemu/5002/")),
        "the other VM is not touched: {reqs:#?}"
    );
}

/// Someone creates a VM at the id the listing showed free, after the listing and before the
/// clone: PVE refuses the clone (`config file already exists`), and proxsync takes the next
/// id without touching that VM.
#[test]
fn an_id_taken_after_the_listing_is_skipped() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    commit(&ws, &specs_as_template(2));
    pve.call(
        "add_vm_before",
        json!({"method": "POST", "suffix": "/qemu/9000/clone", "vmid": 100,
               "name": "someone-else", "node": "pve1"}),
    )
    .unwrap();
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let mut vmids: Vec<u64> = owned_vms(&mut pve).iter().map(|(id, _)| *id).collect();
    vmids.sort();
    assert_eq!(vmids, [101, 102], "{out}");
    let reqs = logged(&mut pve);
    assert_eq!(
        reqs.iter()
            .filter(|r| r.ends_with("/qemu/9000/clone"))
            .count(),
        3,
        "the refused clone and one per VM: {reqs:#?}"
    );
    assert!(
        !reqs.iter().any(|r| r.contains("/qemu/100/")),
        "nothing sent to the other VM: {reqs:#?}"
    );
    let other = pve.vm(100);
    assert_eq!(other["name"], "someone-else");
    assert!(
        !other["config"]["tags"]
            .as_str()
            .unwrap_or("")
            .contains("proxsync"),
        "{other}"
    );
    assert!(
        !reqs.iter().any(|r| r.starts_with("GET /cluster/nextid")),
        "{reqs:#?}"
    );
    for name in ["web-01", "web-02"] {
        assert_eq!(ws.condition(name, "Ready").0, "True", "{name}: {out}");
    }
}

/// When the range has no gap left in the listing, PVE's own nextid decides (here: its error for
/// a full range, kept verbatim); nothing is cloned.
#[test]
fn a_full_range_asks_nextid() {
    let mut pve = Scenario::default()
        .set(
            "datacenter",
            json!({"next-id": {"lower": "5000", "upper": "5001"}}),
        )
        .start();
    pve.add_vm(json!({"vmid": 5000, "name": "someone-else", "node": "pve1"}));
    let ws = Workspace::new(&pve);
    commit(&ws, &specs_as_template(1));
    pve.clear_requests();
    let (_, out) = ws.run_once();
    let reqs = logged(&mut pve);
    assert_eq!(
        reqs.iter()
            .filter(|r| r.starts_with("GET /cluster/nextid"))
            .count(),
        1,
        "{reqs:#?}"
    );
    assert!(!reqs.iter().any(|r| r.ends_with("/clone")), "{reqs:#?}");
    assert!(owned_vms(&mut pve).is_empty(), "{out}");
    let (_, _, message) = ws.condition("web-01", "Ready");
    assert!(
        message.contains("unable to get any free VMID in range [5000, 5001]"),
        "{message}: {out}"
    );
}
