//! Attacks on health gating (rolls and `dependsOn` waiting for health), with the engine in
//! this process and a controllable clock.

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use crate::common;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, default_scenario};
use proxsync::config::Config;
use proxsync::engine::{CycleReport, Engine, check_spec_sites};
use proxsync::plan::Verdict;
use proxsync::spec::SpecSet;

/// The VMID of spec `name`'s VM on `pve`.
fn vmid_of(pve: &mut FakePve, name: &str) -> Option<u32> {
    owned_vms(pve)
        .into_iter()
        .find(|(_, n)| n == name)
        .map(|(v, _)| v as u32)
}

/// A cycle after a push looks again only at the sites the push touched, and plans with the
/// other sites' views as the last full cycle saw them. A guest there that passed its checks
/// is still the same run, healthy: a push a minute after the last full cycle must not make it
/// Pending (its listed uptime is a minute old, so "now - uptime" moves a minute), holding
/// what depends on it with "waiting for db-01 to be Ready" while db-01's own status reads
/// Ready.
#[test]
fn a_push_does_not_make_a_healthy_guest_on_a_site_it_did_not_look_at_pending() {
    let mut lab = FakePve::start(default_scenario());
    let mut other = FakePve::start(default_scenario());
    let ws = Workspace::two_sites(&lab, &other, "");
    let config = Config::load(&ws.config()).expect("config");
    let mut engine = Engine::new(config.clone()).expect("engine");
    let offset = Arc::new(AtomicU64::new(0));
    let clock_offset = offset.clone();
    engine.set_clock(proxsync::util::clock::Clock::from_fn(move || {
        proxsync::util::clock::now_ms() + clock_offset.load(Ordering::SeqCst)
    }));
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    let db = spec(
        "db-01",
        "pve1",
        "9000",
        &format!("    health: {{tcp: {{port: {port}}}, address: 127.0.0.1, timeout: 10m}}\n"),
    )
    .replace("site: lab", "site: other");
    let app = |power: &str| {
        spec(
            "app-01",
            "pve1",
            "9000",
            &format!("    powerState: {power}\n"),
        )
        .replace("memory: 2Gi", "memory: 3Gi")
        .replacen("spec:\n", "spec:\n  dependsOn: [db-01]\n", 1)
    };
    let commit = |files: &[(&str, String)]| -> (SpecSet, String) {
        ws.commit_specs(files);
        let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply)
            .expect("the specs of the commit");
        let mut specs = read.specs;
        check_spec_sites(&config, &mut specs);
        (specs, read.commit)
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let full = |engine: &mut Engine, (specs, c): &(SpecSet, String)| -> CycleReport {
        rt.block_on(engine.reconcile(specs, Some(c)))
            .expect("a cycle")
    };
    // db-01's guest runs, its uptime moving on with the engine's clock.
    let later = |other: &mut FakePve, vmid: u32, secs: u64| {
        let now = offset.fetch_add(secs * 1000, Ordering::SeqCst) / 1000 + secs;
        other.set_vm(vmid, json!({"uptime": 600 + now}));
    };

    let first = commit(&[("db.yaml", db.clone()), ("app.yaml", app("stopped"))]);
    full(&mut engine, &first);
    let db_vmid = vmid_of(&mut other, "db-01").expect("db-01 made");
    other.set_vm(db_vmid, json!({"uptime": 600}));
    for _ in 0..3 {
        later(&mut other, db_vmid, 20);
        full(&mut engine, &first);
    }
    let app_vmid = vmid_of(&mut lab, "app-01").expect("app-01 made once db-01 passed");
    assert_eq!(lab.vm(app_vmid)["status"], "stopped");
    assert_eq!(ws.condition("db-01", "Healthy").1, "Passing");
    assert_eq!(ws.condition("db-01", "Ready").0, "True");

    // A minute on (the cluster's uptime too), a push asks app-01 to run: a change at lab only.
    later(&mut other, db_vmid, 60);
    let pushed = commit(&[("db.yaml", db), ("app.yaml", app("running"))]);
    let report = rt
        .block_on(engine.reconcile_after_push(&pushed.0, Some(&pushed.1)))
        .expect("a cycle");
    assert_eq!(
        report.scope,
        Some(["lab".to_string()].into_iter().collect()),
        "a push-scoped cycle"
    );
    assert!(
        !matches!(
            report.plan.verdicts.get("app-01"),
            Some(Verdict::WaitingForDependencies { .. })
        ),
        "db-01 passed its checks and still runs the same run: {:?}",
        report.plan.verdicts.get("app-01")
    );
    assert_eq!(lab.vm(app_vmid)["status"], "running");
}

/// A guest the cycle restarted for a change is checked afresh with its whole `timeout`
/// (docs/health.md). Uptime is listed from pvestatd's last update, so the look 5 s after the
/// restart may still list the old run's uptime: the guest, still booting, fails its first
/// check. It must be Pending (starting, within its timeout), not Unhealthy "never passed" at
/// once because its timeout was counted from the old run's start (which stops a roll and
/// warns of an unhealthy guest that is only booting).
#[test]
fn a_guest_restarted_for_a_change_is_not_unhealthy_on_a_stale_uptime() {
    let mut pve = common::Scenario::default().start();
    let ws = Workspace::new(&pve);
    let web = |memory: &str| {
        spec(
            "web-01",
            "pve1",
            "9000",
            "    rebootPolicy: IfNeeded\n    health: {agent: true, timeout: 2m, checkTimeout: 1s}\n",
        )
        .replace("memory: 2Gi", &format!("memory: {memory}"))
    };
    ws.commit_specs(&[("web.yaml", web("1Gi"))]);
    ws.run_once();
    let vmid = vmid_of(&mut pve, "web-01").expect("made");
    pve.set_vm(vmid, json!({"agent": {}, "uptime": 600}));
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
    let cycle = |d: &mut common::engine::InProcess| {
        rt.block_on(d.engine.reconcile(&d.specs, Some(&d.commit)))
            .expect("a cycle")
    };
    cycle(&mut d);
    assert_eq!(ws.condition("web-01", "Healthy").1, "Passing");

    // The change: memory goes pending and rebootPolicy restarts the guest, in this engine.
    ws.commit_specs(&[("web.yaml", web("2Gi"))]);
    let config = Config::load(&ws.config()).expect("config");
    let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply)
        .expect("the specs of the commit");
    d.specs = read.specs;
    check_spec_sites(&config, &mut d.specs);
    d.commit = read.commit;
    let restarted = cycle(&mut d);
    assert!(
        restarted
            .results
            .iter()
            .any(|r| r.action.spec() == Some("web-01")),
        "{:?}",
        restarted.results
    );
    assert_eq!(
        pve.vm(vmid)["config"]["memory"]
            .to_string()
            .trim_matches('"'),
        "2048"
    );
    // 5 s on: the listing still says the old run (600 s and on), the agent not up yet.
    offset.fetch_add(5_000, Ordering::SeqCst);
    pve.set_vm(vmid, json!({"agent": null, "uptime": 605}));
    cycle(&mut d);
    let (status, reason, message) = ws.condition("web-01", "Healthy");
    assert_ne!(
        reason, "Unhealthy",
        "a guest restarted 5 s ago is within its 2m timeout: {status} {message}"
    );
}
