//! The conformance suite (`proxsync::conformance`) against the fakepve harness, over HTTP: the
//! scenarios the in-memory fake meets in the unit tests, here in the harness's words. A real
//! cluster runs the same with `scripts/conformance`.

use std::time::Duration;

use serde_json::json;

use crate::common::Scenario;
use proxsync::conformance::{self, CONFORMANCE_POOL, Outcome, Scope, Setup, coverage};

pub const CT_TEMPLATE: &str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";

/// The default scenario with a container template; tasks take time (1 PVE second = 10 ms) and
/// clones copy for 0.3 s, so their locks can be met.
pub fn scenario() -> Scenario {
    Scenario::default()
        .file(
            "local",
            "debian-12-standard_12.7-1_amd64.tar.zst",
            129_038_336,
            "vztmpl",
        )
        .set("time_scale", json!(0.01))
}

pub fn setup(scope: Scope, pool: &str) -> Setup {
    Setup {
        site: "lab".into(),
        node: "pve1".into(),
        other_node: Some("pve2".into()),
        vm_storage: "local-lvm".into(),
        ct_storage: "local-lvm".into(),
        bridge: "vmbr0".into(),
        ct_template: Some(CT_TEMPLATE.into()),
        pool: pool.into(),
        task_timeout: Duration::from_secs(30),
        scope,
        key: proxsync::ownership::MarkerKey::from_bytes([5; 32]),
        run: conformance::Run::new(vec![]),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_suite_meets_every_expectation_of_fakepve() {
    let mut pve = scenario().start();
    pve.create_timing(0.0, 30.0, 0.0);
    pve.ct_timing(0.0, 30.0, 0.0, 0.0, 0.0);
    let client = pve.client();
    let report = conformance::run(&client, &setup(Scope::Full, CONFORMANCE_POOL)).await;
    let all: String = report.steps.iter().map(|s| format!("{s}\n")).collect();
    assert!(report.differences().is_empty(), "{all}");
    assert!(
        !report
            .steps
            .iter()
            .any(|s| matches!(s.outcome, Outcome::NotRun(_))),
        "{all}"
    );
    assert_eq!(coverage::unmet(&report), Vec::<String>::new(), "{all}");
    // Nothing left behind in the pool or anywhere: only the template remains.
    let vmids: Vec<u64> = pve
        .vms()
        .iter()
        .chain(pve.cts().iter())
        .filter_map(|v| v["vmid"].as_u64())
        .collect();
    assert_eq!(vmids, [9000], "{all}");
}
