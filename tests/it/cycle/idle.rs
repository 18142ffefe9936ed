//! Idle cycles against fakepve, with the engine in this process: a cycle that observes what
//! the last one did, when that one acted on nothing, keeps its plan and statuses (it plans
//! nothing and writes only the summary); a VM changed by hand, or a backoff deadline coming,
//! is still acted on.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::engine::{Workspace, spec};
use common::{FakePve, default_scenario};
use proxsync::config::Config;
use proxsync::engine::{CycleReport, Engine, check_spec_sites};
use proxsync::plan::{Action, Verdict};
use proxsync::spec::SpecSet;
use proxsync::util::clock::now_ms;

/// An engine on a workspace whose repository holds `files`, and the specs of its commit.
struct Setup {
    pve: FakePve,
    ws: Workspace,
    engine: Engine,
    specs: SpecSet,
    commit: String,
}

fn setup(files: &[(&str, String)]) -> Setup {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(files);
    let config = Config::load(&ws.config()).expect("config");
    let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply)
        .expect("the specs of the commit");
    let mut specs = read.specs;
    check_spec_sites(&config, &mut specs);
    let engine = Engine::new(config).expect("engine");
    Setup {
        pve,
        ws,
        engine,
        specs,
        commit: read.commit,
    }
}

impl Setup {
    async fn cycle(&mut self) -> CycleReport {
        self.engine
            .reconcile(&self.specs, Some(&self.commit))
            .await
            .expect("a cycle")
    }

    /// `_summary.yaml`'s text.
    fn summary(&self) -> String {
        std::fs::read_to_string(self.ws.path("status/_summary.yaml")).unwrap_or_default()
    }
}

fn modified(path: &std::path::Path) -> std::time::SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

#[tokio::test]
async fn an_idle_cycle_after_a_settled_one_keeps_its_plan_and_writes_no_status() {
    let mut s = setup(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    let created = s.cycle().await;
    assert!(
        matches!(
            created.results.first().map(|r| &r.action),
            Some(Action::Create { .. })
        ),
        "{:?}",
        created.results
    );
    let settled = s.cycle().await;
    assert!(settled.plan.actions.is_empty(), "{:?}", settled.plan);
    assert!(!settled.unchanged, "the cycle after one that acted plans");

    let status = s.ws.path("status/web-01.yaml");
    let written = modified(&status);
    let summary = s.ws.path("status/_summary.yaml");
    let summarised = modified(&summary);
    // The summary's `lastCycle` has whole seconds (it is written when its text changes).
    std::thread::sleep(Duration::from_millis(1_100));
    s.pve.clear_requests();
    let idle = s.cycle().await;
    assert!(idle.unchanged, "nothing changed: the last plan holds");
    assert_eq!((idle.ready, idle.specs, idle.stalled), (1, 1, 0));
    assert_eq!(idle.plan, settled.plan);
    assert!(idle.all_ready());
    assert_eq!(modified(&status), written, "no status file is rewritten");
    assert!(
        modified(&summary) > summarised,
        "the summary says when the cycle ran"
    );
    assert!(s.summary().contains("ready: 1\n"), "{}", s.summary());
    // Observing still happens: the cluster's two listings.
    let reads: Vec<String> = s.pve.requests().iter().map(|r| r.path.clone()).collect();
    assert!(
        reads.iter().any(|p| p.contains("/cluster/resources")),
        "{reads:?}"
    );
    assert!(s.cycle().await.unchanged);
}

#[tokio::test]
async fn idle_cycles_share_the_last_plans_verdicts_instead_of_copying_them() {
    let mut s = setup(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    s.cycle().await;
    let settled = s.cycle().await;
    assert!(!settled.unchanged, "the cycle after one that acted plans");
    let idle = s.cycle().await;
    let again = s.cycle().await;
    assert!(idle.unchanged && again.unchanged);
    // One map of one entry per spec, held by the kept cycle and each report it returns: an
    // idle cycle copies none of it (issue 47: at 50,000 specs, 3.3M allocations a cycle).
    assert!(Arc::ptr_eq(&settled.plan.verdicts, &idle.plan.verdicts));
    assert!(Arc::ptr_eq(&idle.plan.verdicts, &again.plan.verdicts));
    assert!(
        matches!(
            again.plan.verdicts.get("web-01"),
            Some(Verdict::UpToDate { .. })
        ),
        "{:?}",
        again.plan.verdicts
    );
}

#[tokio::test]
async fn a_vm_stopped_by_hand_between_idle_cycles_is_started() {
    let mut s = setup(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    s.cycle().await;
    s.cycle().await;
    assert!(s.cycle().await.unchanged);
    let vmid = match s.cycle().await.plan.verdicts.get("web-01") {
        Some(Verdict::UpToDate { vmid }) => *vmid,
        other => panic!("web-01: {other:?}"),
    };

    s.pve.set_vm(vmid, serde_json::json!({"status": "stopped"}));
    let after = s.cycle().await;
    assert!(!after.unchanged, "the stopped VM is a change");
    let started = after.results.iter().any(
        |r| matches!(&r.action, Action::Converge { why, .. } if why.iter().any(|w| w == "start")),
    );
    assert!(started, "{:?}", after.results);
    assert_eq!(s.pve.vm(vmid)["status"], "running");
}

#[tokio::test]
async fn a_spec_in_backoff_is_retried_at_its_deadline_or_when_asked_with_nothing_else_changed() {
    // Template 9999 does not exist: the create fails, and the spec backs off.
    let mut s = setup(&[("a.yaml", spec("no-image", "pve1", "9999", ""))]);
    s.engine
        .set_clock(proxsync::util::clock_following_tokio(now_ms()));
    let failed = s.cycle().await;
    assert!(
        matches!(
            failed.results.first().map(|r| &r.action),
            Some(Action::Create { .. })
        ),
        "{:?}",
        failed.results
    );
    s.cycle().await;
    assert!(s.cycle().await.unchanged, "waiting for the deadline");

    // `proxsync reconcile no-image` clears the backoff: the next cycle tries at once.
    assert!(s.engine.clear_backoff("no-image").unwrap());
    let asked = s.cycle().await;
    assert!(!asked.unchanged, "the records changed");
    assert!(
        matches!(
            asked.results.first().map(|r| &r.action),
            Some(Action::Create { .. })
        ),
        "{:?}",
        asked.plan
    );
    let backing_off = s.cycle().await;
    let until = match backing_off.plan.verdicts.get("no-image") {
        Some(Verdict::BackingOff { until_ms }) => *until_ms,
        other => panic!("no-image: {other:?}"),
    };
    assert!(s.cycle().await.unchanged, "waiting for the deadline");

    // The wall clock passes the deadline (and nothing else changes).
    tokio::time::pause();
    tokio::time::advance(Duration::from_millis(until - now_ms() + 1_000)).await;
    tokio::time::resume();
    let retried = s.cycle().await;
    assert!(!retried.unchanged, "the deadline came");
    assert!(
        matches!(
            retried.results.first().map(|r| &r.action),
            Some(Action::Create { .. })
        ),
        "the create is attempted again: {:?}",
        retried.plan
    );
}
