//! The reconcile engine against fakepve: create, update, delete, release, adopt, converge,
//! refusals, offline nodes, locks and a flaky network.

use crate::common;

use common::engine::{Workspace, owned_vms, spec, text};
use common::{FakePve, default_scenario};

#[test]
fn creates_by_clone_and_by_import_then_idles() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        (
            "web.yaml",
            spec("web-01", "pve1", "9000", "    tags: [web]\n"),
        ),
        (
            "db.yaml",
            spec(
                "db-01",
                "pve2",
                "local:import/debian-12-genericcloud-amd64.qcow2",
                "",
            ),
        ),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms = owned_vms(&mut pve);
    assert_eq!(vms.len(), 2, "{vms:?}\n{out}");
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{out}");
    assert_eq!(ws.condition("db-01", "Ready").0, "True", "{out}");

    // A second run changes nothing and costs two reads per site, and, being a new process,
    // one read of the site's root CA (its identity, checked once per process).
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let reqs = pve.requests();
    assert!(reqs.iter().all(|r| r.method == "GET"), "{reqs:?}");
    assert_eq!(
        reqs.len(),
        3,
        "an idle cycle is one status and one listing (and the root CA): {reqs:?}"
    );
}

fn vm_config(pve: &mut FakePve, vmid: u64) -> serde_json::Value {
    pve.vm(vmid as u32)["config"].clone()
}

#[test]
fn updates_each_declared_field_and_keeps_hand_added_tags() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[(
        "web.yaml",
        spec("web-01", "pve1", "9000", "    tags: [web, old]\n"),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let (vmid, _) = owned_vms(&mut pve)[0].clone();

    // Someone adds a tag by hand in the web UI.
    let tags = vm_config(&mut pve, vmid)["tags"]
        .as_str()
        .unwrap()
        .to_string();
    let c = common::engine::text(&ws.proxsync(&["plan"]));
    assert!(c.contains("no changes"), "{c}");
    pve.call(
        "set_vm",
        serde_json::json!({"vmid": vmid, "config": {"tags": format!("{tags};owner-alice")}}),
    )
    .ok();
    let mut cfg = vm_config(&mut pve, vmid);
    if !cfg["tags"].as_str().unwrap_or("").contains("owner-alice") {
        // set_vm may not take config: change it through the API instead, as a human would.
        let c = reqwest_put_tags(&pve, vmid as u32, &format!("{tags};owner-alice"));
        assert!(c, "could not add a tag by hand");
        cfg = vm_config(&mut pve, vmid);
    }
    assert!(cfg["tags"].as_str().unwrap().contains("owner-alice"));

    // Every declared field changes, and the VM is to be stopped.
    let changed = "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: web-01\nspec:\n  forProvider:\n    \
        site: lab\n    node: pve1\n    image: \"9000\"\n    cpu: 4\n    memory: 4Gi\n    disk: 20Gi\n    \
        network: vmbr1\n    tags: [web, new]\n    powerState: stopped\n";
    ws.commit_specs(&[("web.yaml", changed.to_string())]);
    let plan = ws.proxsync(&["plan"]);
    assert_eq!(plan.status.code(), Some(2), "{}", text(&plan));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(
        owned_vms(&mut pve).len(),
        1,
        "updated in place, never recreated"
    );
    let vm = pve.vm(vmid as u32);
    let cfg = &vm["config"];
    // The VM was running: PVE keeps CPU, memory and NIC changes pending until its next start.
    let effective = |key: &str| {
        let v = if vm["pending"][key].is_null() {
            &cfg[key]
        } else {
            &vm["pending"][key]
        };
        v.to_string().trim_matches('"').to_string()
    };
    assert_eq!(effective("cores"), "4", "{vm}");
    assert_eq!(effective("memory"), "4096", "{vm}");
    assert!(effective("net0").contains("bridge=vmbr1"), "{vm}");
    let (s, reason, message) = ws.condition("web-01", "RebootPending");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "PendingChanges"),
        "{message}"
    );
    assert!(
        message.contains("cores") && message.contains("memory"),
        "{message}"
    );
    let tags: Vec<&str> = cfg["tags"].as_str().unwrap().split(';').collect();
    assert!(
        tags.contains(&"new") && tags.contains(&"web") && tags.contains(&"proxsync.test"),
        "{tags:?}"
    );
    assert!(
        !tags.contains(&"old"),
        "a tag we applied and the spec dropped goes: {tags:?}"
    );
    assert!(
        tags.contains(&"owner-alice"),
        "a hand-added tag stays: {tags:?}"
    );
    assert_eq!(vm["status"], "stopped");
    let resize = pve
        .requests()
        .into_iter()
        .find(|r| r.method == "PUT" && r.path.ends_with("/resize") && r.body.contains("20G"));
    assert!(resize.is_some(), "the disk grew to 20G");

    // A smaller disk is reported, not applied.
    ws.commit_specs(&[("web.yaml", changed.replace("disk: 20Gi", "disk: 10Gi"))]);
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(
        !pve.requests().iter().any(|r| r.path.ends_with("/resize")),
        "never shrinks"
    );
}

/// Changes a VM's tags through the API, as someone in the web UI would.
fn reqwest_put_tags(pve: &FakePve, vmid: u32, tags: &str) -> bool {
    let client = common::verified_client(&pve.ca_pem());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        client
            .put(pve.api_url(&format!("/nodes/pve1/qemu/{vmid}/config")))
            .header(
                "Authorization",
                common::token_header(common::TOKEN_ID, common::TOKEN_SECRET),
            )
            .form(&[("tags", tags)])
            .send()
            .await
            .map(|r| r.status().is_success())
            .unwrap_or(false)
    })
}

#[test]
fn removing_a_spec_deletes_its_vm_and_orphan_policy_releases() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("gone-01", "pve1", "9000", "")),
        (
            "b.yaml",
            spec("kept-01", "pve1", "9000", "  deletionPolicy: Orphan\n"),
        ),
        ("c.yaml", spec("stay-01", "pve1", "9000", "")),
        ("d.yaml", spec("stay-02", "pve1", "9000", "")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms = owned_vms(&mut pve);
    assert_eq!(vms.len(), 4);
    let kept = vms.iter().find(|(_, n)| n == "kept-01").unwrap().0;

    ws.commit_specs(&[
        ("c.yaml", spec("stay-01", "pve1", "9000", "")),
        ("d.yaml", spec("stay-02", "pve1", "9000", "")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let names: Vec<String> = owned_vms(&mut pve).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(!names.contains(&"gone-01".to_string()));
    // The released VM is still there, without our tag or marker.
    let vm = pve.vm(kept as u32);
    assert_eq!(vm["name"], "kept-01");
    assert!(
        !vm["config"]["tags"]
            .as_str()
            .unwrap_or("")
            .contains("proxsync.test"),
        "{vm}"
    );
    assert!(
        !vm["config"]["description"]
            .as_str()
            .unwrap_or("")
            .contains("proxsync-id:"),
        "{vm}"
    );
    assert!(
        !ws.path("status/gone-01.yaml").exists(),
        "status of a deleted spec is removed"
    );
    // The shutdown came before the delete, and the delete purged.
    let reqs = pve.requests();
    let del = reqs
        .iter()
        .position(|r| r.method == "DELETE")
        .expect("a delete");
    assert!(
        reqs[..del]
            .iter()
            .any(|r| r.path.ends_with("/status/shutdown")),
        "graceful shutdown first"
    );
    assert!(reqs[del].query.contains("purge=1"), "{:?}", reqs[del]);
}

#[test]
fn safety_valves_refuse_mass_deletes() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let specs: Vec<(String, String)> = (0..4)
        .map(|i| {
            (
                format!("s{i}.yaml"),
                spec(&format!("vm-{i}"), "pve1", "9000", ""),
            )
        })
        .collect();
    let refs: Vec<(&str, String)> = specs.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    ws.commit_specs(&refs);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");

    // An empty commit: nothing is deleted.
    ws.commit_specs(&[]);
    let (_, out) = ws.run_once();
    assert!(
        out.contains("refused to delete or release 4 VM(s): the desired set is empty"),
        "{out}"
    );
    assert_eq!(owned_vms(&mut pve).len(), 4);
    let summary = std::fs::read_to_string(ws.path("status/_summary.yaml")).unwrap();
    assert!(summary.contains("refused to delete"), "{summary}");

    // Three of four in one commit is more than half: refused. `plan` agrees with the daemon:
    // the valve's refusal fails it (exit 1), never "no changes" (a CI gate must not pass it).
    ws.commit_specs(&refs[..1]);
    let plan = ws.proxsync(&["plan"]);
    let said = text(&plan);
    assert_eq!(plan.status.code(), Some(1), "{said}");
    assert!(said.contains("refused: "), "{said}");
    assert!(
        said.contains("a safety valve refuses this plan's removals"),
        "{said}"
    );
    assert!(!said.contains("no changes"), "{said}");
    let (_, out) = ws.run_once();
    assert!(out.contains("more than max_delete_fraction"), "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 4);

    // One of four is fine.
    ws.commit_specs(&refs[..3]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 3);
}

#[test]
fn adopts_after_the_database_is_deleted() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        (
            "b.yaml",
            spec(
                "db-01",
                "pve2",
                "local:import/debian-12-genericcloud-amd64.qcow2",
                "",
            ),
        ),
    ]);
    assert!(ws.run_once().0);
    let before = owned_vms(&mut pve);
    ws.remove_state();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(out.contains("adopt"), "{out}");
    let after = owned_vms(&mut pve);
    assert_eq!(before, after, "the same VMs, none created");
    assert_eq!(ws.condition("web-01", "Ready").0, "True");
}

/// After a lost database every VM's marker is read from its config, and each site's reads go
/// side by side with the other sites': site `lab`, whose node answers slowly, does not hold
/// back site `other`'s. Read site after site (as they were), `lab`'s read (first by name) was
/// answered before `other`'s was sent; at 10 sites an empty-database start took ten times one
/// site's reads.
#[test]
fn each_sites_markers_are_read_beside_the_others() {
    let mut lab = FakePve::start(default_scenario());
    let mut other = FakePve::start(default_scenario());
    let ws = Workspace::two_sites(&lab, &other, "");
    let at_other = spec("db-01", "pve1", "9000", "").replace("site: lab", "site: other");
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", at_other),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    ws.remove_state();
    let vms = |pve: &mut FakePve| owned_vms(pve).into_iter().map(|(vmid, _)| vmid).collect();
    let (at_lab, at_other): (Vec<u64>, Vec<u64>) = (vms(&mut lab), vms(&mut other));
    assert_eq!((at_lab.len(), at_other.len()), (1, 1));
    // fakepve logs a request when it answers it, after its latency (in PVE seconds: real ones
    // at time scale 1).
    lab.set_time_scale(1.0);
    lab.slow_network(4.0, 0.0, Some("pve1"));
    lab.clear_requests();
    other.clear_requests();
    let config_read = |pve: &mut FakePve, vmid: u64| {
        let path = format!("/api2/json/nodes/pve1/qemu/{vmid}/config");
        (pve.requests().iter()).any(|r| r.method == "GET" && r.path == path)
    };
    let run = std::thread::spawn(move || {
        let result = ws.run_once();
        (ws, result)
    });
    let waited = std::time::Instant::now();
    while !config_read(&mut other, at_other[0]) {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60) && !run.is_finished(),
            "site other's marker was never read"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        !config_read(&mut lab, at_lab[0]),
        "site other's marker was read only after site lab's was answered"
    );
    let (ws, (ok, out)) = run.join().unwrap();
    assert!(ok, "{out}");
    assert_eq!(
        owned_vms(&mut lab).len() + owned_vms(&mut other).len(),
        2,
        "none made"
    );
    assert_eq!(ws.condition("web-01", "Ready").0, "True");
    assert_eq!(ws.condition("db-01", "Ready").0, "True");
}

#[test]
fn a_failed_configure_step_converges_the_same_vm() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[(
        "a.yaml",
        spec("web-01", "pve1", "9000", "    tags: [web]\n"),
    )]);
    // The clone succeeds; the config change after it fails once.
    pve.fail_times(
        "PUT",
        "/config",
        500,
        "unable to write config: disk full",
        1,
    );
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert_eq!(
        owned_vms(&mut pve).len(),
        0,
        "the tag was not set yet, but..."
    );
    let all: Vec<_> = pve
        .vms()
        .into_iter()
        .filter(|v| v["name"] == "web-01")
        .collect();
    assert_eq!(all.len(), 1, "...exactly one VM was created: {all:?}");
    let (status, reason, message) = ws.condition("web-01", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Failed"),
        "{message}"
    );
    assert!(message.contains("disk full"), "{message}");

    // The backoff holds the next attempt back; once due (spec change resets it), the same VM
    // is converged.
    ws.commit_specs(&[(
        "a.yaml",
        spec("web-01", "pve1", "9000", "    tags: [web, retry]\n"),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let all: Vec<_> = pve
        .vms()
        .into_iter()
        .filter(|v| v["name"] == "web-01")
        .collect();
    assert_eq!(all.len(), 1, "still one VM: {all:?}");
    assert_eq!(owned_vms(&mut pve).len(), 1);
}

#[test]
fn an_image_that_cannot_work_creates_nothing_and_stalls() {
    let mut pve = FakePve::start(
        default_scenario()
            .as_object()
            .cloned()
            .map(|mut s| {
                s.insert("version".into(), "8.1.4".into());
                serde_json::Value::Object(s)
            })
            .unwrap(),
    );
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("no-template", "pve1", "9999", "")),
        (
            "b.yaml",
            spec(
                "too-old",
                "pve1",
                "local:import/debian-12-genericcloud-amd64.qcow2",
                "",
            ),
        ),
        (
            "c.yaml",
            spec("seed-bug", "pve1", "local:iso/ubuntu-22.04-cloud.img", ""),
        ),
    ]);
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert!(pve.vms().len() == 1, "only the template: nothing created");
    let writes: Vec<_> = pve
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "no write request at all: {writes:?}");

    let (s, reason, message) = ws.condition("no-template", "Stalled");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "ImageNotFound"),
        "{message}"
    );
    assert!(
        message.contains("template 9999 does not exist"),
        "{message}"
    );
    let (s, reason, message) = ws.condition("too-old", "Stalled");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "APINotSupported"),
        "{message}"
    );
    assert!(
        // import-from of `import` content came with PVE 8.3 (qemu-server 8.2.7).
        message.contains("8.1.4") && message.contains("needs Proxmox VE 8.3 or later"),
        "{message}"
    );
    // The seed's failure: a cloud image kept in iso content.
    let (s, reason, message) = ws.condition("seed-bug", "Stalled");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "ValidationFailed"),
        "{message}"
    );
    assert!(
        message.contains("import"),
        "the message says where to put it: {message}"
    );

    // Stalled specs wait for the backoff cap: the next cycle sends no request beyond the two
    // reads of an idle cycle (and a new process's read of the site's root CA).
    pve.clear_requests();
    let (_, _out) = ws.run_once();
    let reqs = pve.requests();
    assert_eq!(
        reqs.len(),
        3,
        "a stalled spec causes no API calls until its retry: {reqs:?}"
    );
}

#[test]
fn nothing_is_created_or_deleted_on_an_offline_node() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("on-pve1", "pve1", "9000", "")),
        ("b.yaml", spec("keep-1", "pve1", "9000", "")),
        ("c.yaml", spec("keep-2", "pve1", "9000", "")),
    ]);
    assert!(ws.run_once().0);
    pve.set_node_offline("pve1", true);
    ws.commit_specs(&[
        ("b.yaml", spec("keep-1", "pve1", "9000", "")),
        ("c.yaml", spec("keep-2", "pve1", "9000", "")),
        // Not the same content as on-pve1: that would be a rename (held, see wrong_delete.rs).
        (
            "d.yaml",
            spec("new-on-pve1", "pve1", "9000", "").replace("cpu: 2", "cpu: 3"),
        ),
    ]);
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let writes: Vec<_> = pve
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(
        writes.is_empty(),
        "nothing sent while pve1 is offline: {writes:?}"
    );
    let (s, reason, _) = ws.condition("new-on-pve1", "NodeHealthy");
    assert_eq!((s.as_str(), reason.as_str()), ("False", "NodeOffline"));
    let (s, _, _) = ws.condition("keep-1", "Ready");
    assert_eq!(s, "Unknown", "a VM listed as unknown is not judged");

    pve.set_node_offline("pve1", false);
    let (ok, out) = ws.run_once();
    let ready: Vec<_> = ["keep-1", "keep-2", "new-on-pve1"]
        .iter()
        .map(|n| (n, ws.condition(n, "Ready")))
        .collect();
    assert!(ok, "{out}\n{ready:?}");
    let names: Vec<String> = owned_vms(&mut pve).into_iter().map(|(_, n)| n).collect();
    assert!(
        names.contains(&"new-on-pve1".to_string()) && !names.contains(&"on-pve1".to_string()),
        "{names:?}"
    );
}

#[test]
fn a_locked_vm_is_waited_for_and_a_stale_lock_is_reported() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    assert!(ws.run_once().0);
    let (vmid, _) = owned_vms(&mut pve)[0].clone();

    // A stale lock (an interrupted backup): no task holds it.
    pve.snapshot_lock(vmid as u32, "backup");
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", "    tags: [x]\n"))]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let (s, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "StaleLock"),
        "{message}"
    );
    assert!(
        message.contains(&format!("qm unlock {vmid}")),
        "the exact command: {message}"
    );
    pve.unlock(vmid as u32);

    // A lock held by a running task (a backup): waited for, not a failure.
    pve.set_time_scale(0.05);
    pve.call("backup", serde_json::json!({"vmid": vmid, "secs": 40}))
        .expect("backup started");
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", "    tags: [y]\n"))]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let (s, _, message) = ws.condition("web-01", "Stalled");
    assert_eq!(s, "False", "{message}\n{out}");
    let (s, reason, message) = ws.condition("web-01", "Ready");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("False", "WaitingForLock"),
        "{message}"
    );
    assert!(
        message.contains("vzdump"),
        "names the task holding the lock: {message}"
    );
    // Once the backup is done, the change goes through.
    for _ in 0..100 {
        if pve.vm(vmid as u32)["lock"].is_null() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(
        pve.vm(vmid as u32)["config"]["tags"]
            .as_str()
            .unwrap()
            .contains('y')
    );
}

#[test]
fn a_flaky_network_converges_without_duplicates() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let specs: Vec<(String, String)> = (0..5)
        .map(|i| {
            (
                format!("s{i}.yaml"),
                spec(&format!("flaky-{i}"), "pve1", "9000", ""),
            )
        })
        .collect();
    let refs: Vec<(&str, String)> = specs.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    ws.commit_specs(&refs);
    pve.flaky_network(0.2, 0.0, 0.0, Some(42));
    // A failed attempt backs off (30 s and more); a spec change resets that, so each round
    // nudges a harmless field until every spec is Ready.
    let mut converged = false;
    for round in 0..30 {
        let nudged: Vec<(&str, String)> = refs
            .iter()
            .map(|(n, t)| (*n, format!("{t}    tags: [r{round}]\n")))
            .collect();
        ws.commit_specs(&nudged);
        if ws.run_once().0 {
            converged = true;
            break;
        }
    }
    pve.flaky_network(0.0, 0.0, 0.0, None);
    if !converged {
        let nudged: Vec<(&str, String)> = refs
            .iter()
            .map(|(n, t)| (*n, format!("{t}    tags: [last]\n")))
            .collect();
        ws.commit_specs(&nudged);
        let (ok, out) = ws.run_once();
        assert!(ok, "converges once the network is back: {out}");
    }
    let vms = pve.vms();
    for i in 0..5 {
        let n = vms
            .iter()
            .filter(|v| v["name"] == format!("flaky-{i}"))
            .count();
        assert_eq!(n, 1, "exactly one VM for flaky-{i}");
    }
}

#[test]
fn orphans_are_reported_and_stopped_ones_deleted_after_the_grace_period() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(&pve, "[reconcile]\norphan_grace = \"1s\"\n");
    ws.commit_specs(&[
        ("a.yaml", spec("keep-01", "pve1", "9000", "")),
        ("b.yaml", spec("lost-01", "pve1", "9000", "")),
        ("c.yaml", spec("lost-02", "pve1", "9000", "")),
    ]);
    assert!(ws.run_once().0);
    let vms = owned_vms(&mut pve);
    let lost: Vec<u64> = vms
        .iter()
        .filter(|(_, n)| n.starts_with("lost"))
        .map(|(id, _)| *id)
        .collect();
    // The database is lost and the specs removed in the same commit: the VMs are orphans now,
    // not deletions (nothing remembers they were ours by spec).
    ws.remove_state();
    ws.commit_specs(&[("a.yaml", spec("keep-01", "pve1", "9000", ""))]);
    pve.set_vm(lost[0] as u32, serde_json::json!({"status": "stopped"}));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let orphans = std::fs::read_to_string(ws.path("status/_orphans.yaml")).unwrap();
    assert!(
        orphans.contains(&format!("vmId: {}", lost[0]))
            && orphans.contains(&format!("vmId: {}", lost[1])),
        "{orphans}"
    );
    assert!(orphans.contains("will delete after"), "{orphans}");
    assert!(
        orphans.contains("reported"),
        "a running orphan is only reported: {orphans}"
    );
    assert_eq!(
        owned_vms(&mut pve).len(),
        3,
        "nothing deleted inside the grace period"
    );

    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let left: Vec<u64> = owned_vms(&mut pve).into_iter().map(|(id, _)| id).collect();
    assert!(
        !left.contains(&lost[0]),
        "the stopped orphan is deleted after the grace period"
    );
    assert!(left.contains(&lost[1]), "the running orphan stays");
}

#[test]
fn plan_changes_nothing_and_says_what_it_would_do() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    let out = ws.proxsync(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("+ create  web-01: new VM on lab/pve1 from template 9000"),
        "{}",
        text(&out)
    );
    assert!(
        pve.requests().iter().all(|r| r.method == "GET"),
        "plan only reads"
    );
    assert!(ws.run_once().0);
    let out = ws.proxsync(&["plan"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("no changes"));
}

#[test]
fn an_invalid_spec_leaves_its_vm_untouched() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    assert!(ws.run_once().0);
    // web-01 breaks (an unknown field); it is neither updated nor deleted.
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "    cpus: 8\n")),
        ("b.yaml", spec("web-02", "pve1", "9000", "    tags: [ok]\n")),
    ]);
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert!(out.contains("a.yaml:"), "the error names the file: {out}");
    assert_eq!(owned_vms(&mut pve).len(), 2);
    let (s, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "ValidationFailed"),
        "{message}"
    );
    assert!(message.contains("cpus"), "{message}");
    assert_eq!(ws.condition("web-02", "Ready").0, "True");
    let web01 = owned_vms(&mut pve)
        .into_iter()
        .find(|(_, n)| n == "web-01")
        .unwrap()
        .0;
    let touched: Vec<_> = pve
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET" && r.path.contains(&format!("/qemu/{web01}/")))
        .collect();
    assert!(
        touched.is_empty(),
        "the invalid spec's VM got a write: {touched:?}"
    );
}

#[test]
fn guest_agent_addresses_reach_the_status() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    assert!(ws.run_once().0);
    assert_eq!(
        ws.status("web-01")["ipAddresses"],
        serde_json::json!([]),
        "no agent, no addresses"
    );
    let (vmid, _) = owned_vms(&mut pve)[0].clone();
    pve.set_vm(vmid as u32, serde_json::json!({"agent": {}}));
    ws.commit_specs(&[(
        "a.yaml",
        spec("web-01", "pve1", "9000", "    tags: [agent]\n"),
    )]);
    assert!(ws.run_once().0);
    assert_eq!(
        ws.status("web-01")["ipAddresses"],
        serde_json::json!(["192.0.2.10"]),
        "loopback left out"
    );
}

/// Adoptions count against `max_parallel_per_node` like every other action on a node. They
/// did not (an `Adopt` names no node): with an empty database all N adoptions ran at once, and
/// at 10,000 VMs thousands of connections opened together timed out while connecting (the
/// bench's adoptions "failing their first attempt", NetworkError on GET .../config).
#[test]
fn adoptions_respect_max_parallel_per_node() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let names: Vec<String> = (1..=6).map(|i| format!("web-{i:02}")).collect();
    let files: Vec<(String, String)> = names
        .iter()
        .map(|n| (format!("{n}.yaml"), spec(n, "pve1", "9000", "")))
        .collect();
    let refs: Vec<(&str, String)> = files.iter().map(|(f, s)| (f.as_str(), s.clone())).collect();
    ws.commit_specs(&refs);
    assert!(ws.run_once().0);
    ws.remove_state();
    // A VM that matches its spec is adopted without a request; one whose memory differs is
    // converged, and its requests are what the limit holds.
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(f, s)| (f.clone(), s.replace("memory: 2Gi", "memory: 3Gi")))
        .collect();
    let refs: Vec<(&str, String)> = files.iter().map(|(f, s)| (f.as_str(), s.clone())).collect();
    ws.commit_specs(&refs);
    // Every request takes a while, so actions running side by side interleave in the log.
    pve.slow_network(0.03, 0.0, None);
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(out.matches("adopt ").count(), 6, "{out}");
    // Each adoption's converge requests (pending, the config write, status...): from its first
    // to its last, the action is running. No more than 2 (the default) may be open at any point of the log.
    let reqs = pve.requests();
    let mut spans: std::collections::BTreeMap<u32, (usize, usize)> = Default::default();
    for (i, r) in reqs.iter().enumerate() {
        let Some(rest) = r.path.strip_prefix("/api2/json/nodes/pve1/qemu/") else {
            continue;
        };
        let Some((vmid, tail)) = rest.split_once('/') else {
            continue;
        };
        if tail == "config" {
            continue; // also read by the observation (the marker), before any action
        }
        let vmid: u32 = vmid.parse().unwrap();
        let span = spans.entry(vmid).or_insert((i, i));
        span.1 = i;
    }
    assert_eq!(spans.len(), 6, "{spans:?}");
    let most = (0..reqs.len())
        .map(|i| spans.values().filter(|(a, b)| *a <= i && i <= *b).count())
        .max()
        .unwrap_or(0);
    assert!(
        most <= 2,
        "{most} adoptions ran at once on pve1 (max_parallel_per_node = 2): {spans:?}"
    );
}
