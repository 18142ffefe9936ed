//! `changePolicy` against fakepve, whose snapshots, rollbacks and deletes run as PVE's tasks
//! (`qmsnapshot`, `qmrollback` with `start`, `qmdelsnapshot`) and keep the description, and a
//! real HTTP server on 127.0.0.1 standing in for the guest's service: a change after which the
//! guest does not pass its check is rolled back to the snapshot taken before it, reported
//! `RolledBack`, and not tried again until the spec changes; a change that passes keeps
//! `keep` snapshots of proxsync's own and deletes the older ones.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use crate::common;
use common::Scenario;
use common::engine::{InProcess, Workspace, spec};
use common::http::Http;

/// The spec `web-01` with `memory`, a health check on `port`, a restart when a change needs
/// one, and a snapshot before such a change, keeping one.
fn web(memory: &str, port: u16) -> String {
    let extra = format!(
        "    rebootPolicy: IfNeeded\n    health:\n      http: {{port: {port}, path: /healthz}}\n      \
         address: 127.0.0.1\n      timeout: 1m\n    changePolicy:\n      snapshot: BeforeRestart\n      \
         rollback: OnUnhealthy\n      keep: 1\n"
    );
    spec("web-01", "pve1", "9000", &extra).replace("memory: 2Gi", &format!("memory: {memory}"))
}

/// The workspace's last commit, read again into the in-process daemon.
fn reload(ws: &Workspace, d: &mut InProcess) {
    let config = proxsync::config::Config::load(&ws.config()).expect("config");
    let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply)
        .expect("the specs of the commit");
    d.specs = read.specs;
    proxsync::engine::check_spec_sites(&config, &mut d.specs);
    d.commit = read.commit;
}

/// The names of the VM's snapshots, as fakepve holds them.
fn snapshots(pve: &mut common::FakePve, vmid: u32) -> Vec<String> {
    let vm = pve.vm(vmid);
    let mut names: Vec<String> = (vm["snapshots"].as_array().into_iter().flatten())
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// A change (more memory, which a running VM takes at its next start) is snapshotted first,
/// applied and the VM restarted; its check then fails until the timeout, so the VM is rolled
/// back to the snapshot (its memory as before, running, its marker kept) and the spec is
/// `RolledBack`, naming the snapshot and the retry. The next cycles leave it so. A new commit's
/// change that passes ends with one snapshot kept: the newest, the older one deleted.
#[test]
fn a_change_the_guest_fails_is_rolled_back_and_one_that_passes_keeps_one_snapshot() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let http = Http::start("HTTP/1.1 200 OK");
    ws.commit_specs(&[("web.yaml", web("2Gi", http.port))]);
    ws.run_once();
    let owned = common::engine::owned_vms(&mut pve);
    assert_eq!(owned.len(), 1, "{owned:?}");
    let vmid = owned[0].0 as u32;
    pve.set_vm(vmid, json!({"uptime": 600}));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut d = common::engine::in_process(&ws);
    let offset = Arc::new(AtomicU64::new(0));
    let clock_offset = offset.clone();
    d.engine
        .set_clock(proxsync::util::clock::Clock::from_fn(move || {
            proxsync::util::clock::now_ms() + clock_offset.load(Ordering::SeqCst)
        }));
    // The engine's clock and the guest's uptime move on together; `boot` is when it started.
    let boot = Arc::new(AtomicU64::new(0));
    let later = |pve: &mut common::FakePve, secs: u64| {
        let now = offset.fetch_add(secs * 1000, Ordering::SeqCst) / 1000 + secs;
        let up = 600 + now - boot.load(Ordering::SeqCst).min(600 + now);
        pve.set_vm(vmid, json!({"uptime": up}));
    };
    let restarted = |pve: &mut common::FakePve| {
        let now = offset.load(Ordering::SeqCst) / 1000;
        boot.store(600 + now, Ordering::SeqCst);
        pve.set_vm(vmid, json!({"uptime": 0}));
    };
    let cycle = |d: &mut InProcess| {
        rt.block_on(d.engine.reconcile(&d.specs, Some(&d.commit)))
            .expect("a cycle")
    };
    cycle(&mut d);
    assert_eq!(ws.condition("web-01", "Healthy").1, "Passing");
    assert!(snapshots(&mut pve, vmid).is_empty(), "no change yet");
    let description = pve.vm(vmid)["config"]["description"].clone();

    // The change: snapshotted, applied, the VM restarted to take it.
    ws.commit_specs(&[("web.yaml", web("4Gi", http.port))]);
    reload(&ws, &mut d);
    http.answer("HTTP/1.1 503 Service Unavailable");
    later(&mut pve, 10);
    cycle(&mut d);
    restarted(&mut pve);
    let taken = snapshots(&mut pve, vmid);
    eprintln!(
        "DEBUG vm {} tasks {:?} status {}",
        pve.vm(vmid),
        pve.tasks()
            .iter()
            .map(|t| t["type"].to_string())
            .collect::<Vec<_>>(),
        ws.status("web-01")
    );
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert!(taken[0].starts_with("proxsync-"), "{taken:?}");
    let vm = pve.vm(vmid);
    assert_eq!(vm["config"]["memory"], "4096", "{vm}");
    assert_eq!(vm["status"], "running");

    // Failing, within its timeout: nothing undone yet.
    later(&mut pve, 20);
    cycle(&mut d);
    assert_eq!(pve.vm(vmid)["config"]["memory"], "4096");
    // Past its timeout without passing: rolled back and started.
    later(&mut pve, 45);
    cycle(&mut d);
    let vm = pve.vm(vmid);
    assert_eq!(vm["config"]["memory"], "2048", "rolled back: {vm}");
    assert_eq!(vm["status"], "running", "started after the rollback");
    assert_eq!(
        vm["config"]["description"], description,
        "the marker is kept"
    );
    let rollbacks: Vec<_> = (pve.tasks().into_iter())
        .filter(|t| t["type"] == "qmrollback")
        .collect();
    assert_eq!(rollbacks.len(), 1, "{rollbacks:?}");
    let (status, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "RolledBack"),
        "{message}"
    );
    assert!(message.contains(&taken[0]), "{message}");
    assert!(
        message.contains("proxsync reconcile web-01 --retry"),
        "{message}"
    );

    // Not tried again: no new snapshot, no config write, however many cycles.
    http.answer("HTTP/1.1 200 OK");
    restarted(&mut pve);
    later(&mut pve, 120);
    let seq = common::engine::next_seq(&mut pve);
    cycle(&mut d);
    later(&mut pve, 300);
    cycle(&mut d);
    let writes: Vec<_> = (pve.requests_since(seq).into_iter())
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    assert_eq!(snapshots(&mut pve, vmid), taken);
    assert_eq!(ws.condition("web-01", "Stalled").1, "RolledBack");

    // A new commit's change, which passes (an hour after the last restart: proxsync restarts a
    // guest at most once an hour): a new snapshot, then the older one deleted.
    ws.commit_specs(&[("web.yaml", web("3Gi", http.port))]);
    reload(&ws, &mut d);
    later(&mut pve, 3600);
    cycle(&mut d);
    restarted(&mut pve);
    assert_eq!(pve.vm(vmid)["config"]["memory"], "3072");
    let both = snapshots(&mut pve, vmid);
    assert_eq!(both.len(), 2, "{both:?}");
    later(&mut pve, 6);
    cycle(&mut d);
    let kept = snapshots(&mut pve, vmid);
    assert_eq!(kept.len(), 1, "keep: 1: {kept:?}");
    assert_ne!(kept, taken, "the newest is kept: {kept:?}");
    assert_eq!(ws.condition("web-01", "Healthy").1, "Passing");
    assert_eq!(ws.condition("web-01", "Ready").0, "True");
}

/// Where no snapshot can be taken (the disks on thick LVM: PVE's `snapshot feature is not
/// available`), a change that asks for one is held, not applied unprotected: the spec is
/// Stalled saying why and what to do, and the guest keeps its memory. `snapshot: IfPossible`
/// applies it unprotected.
#[test]
fn a_change_is_held_where_no_snapshot_can_be_taken_unless_if_possible() {
    let mut pve = Scenario::default()
        .storage(
            "local-lvm",
            json!({"type": "lvm", "vgname": "pve", "content": "images,rootdir"}),
        )
        .start();
    let ws = Workspace::new(&pve);
    let http = Http::start("HTTP/1.1 200 OK");
    ws.commit_specs(&[("web.yaml", web("2Gi", http.port))]);
    ws.run_once();
    let owned = common::engine::owned_vms(&mut pve);
    let vmid = owned[0].0 as u32;
    pve.set_vm(vmid, json!({"uptime": 600}));

    ws.commit_specs(&[("web.yaml", web("4Gi", http.port))]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let vm = pve.vm(vmid);
    assert_eq!(vm["config"]["memory"], "2048", "held: {vm}");
    assert!(
        vm["pending"].as_object().is_none_or(|p| p.is_empty()),
        "{vm}"
    );
    let (status, _, message) = ws.condition("web-01", "Stalled");
    assert_eq!(status, "True", "{message}");
    assert!(
        message.contains("snapshot feature is not available") && message.contains("IfPossible"),
        "{message}"
    );

    let if_possible = web("4Gi", http.port).replace("BeforeRestart", "IfPossible");
    ws.commit_specs(&[("web.yaml", if_possible)]);
    ws.run_once();
    let vm = pve.vm(vmid);
    assert_eq!(vm["config"]["memory"], "4096", "applied unprotected: {vm}");
    assert!(
        vm["snapshots"].as_array().is_none_or(|s| s.is_empty()),
        "{vm}"
    );
}
