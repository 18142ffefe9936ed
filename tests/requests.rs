//! What proxsync costs a cluster, in requests (issue 15): per adopted VM after the database
//! was lost, and per created VM. Counts are behaviour, not timing: fakepve logs every request.

mod common;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, default_scenario};

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
        N + 4,
        "listings (2 before, 2 after the actions) and one config read per VM: {reqs:#?}"
    );
    assert_eq!(owned_vms(&mut pve), before, "the same VMs, none created");
    for i in 1..=N {
        let name = format!("web-{i:02}");
        assert_eq!(ws.condition(&name, "Ready").0, "True", "{name}: {out}");
        assert_eq!(ws.condition(&name, "Provisioned").1, "Adopted", "{name}");
    }

    // Then idle: the record holds what a converge would have recorded.
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let reqs = logged(&mut pve);
    assert_eq!(reqs.len(), 2, "an idle cycle after adopting: {reqs:#?}");
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
    // nextid once, and again only when a VM created alongside took the answer.
    assert!(count(&|r| r == "GET /cluster/nextid") <= 2 * N, "{reqs:#?}");
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
