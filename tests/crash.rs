//! The crash test: proxsync is killed with SIGKILL at arbitrary moments while it creates
//! several VMs, and restarted each time. At the end every spec has exactly one VM, no VM is
//! orphaned, and every status is Ready. This is the seed's failure (66 orphaned VMs from a
//! create loop) made impossible by construction: the intent is durable before each create.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::engine::{Workspace, spec};
use common::{FakePve, default_scenario};

/// A small deterministic generator, so a failure can be replayed.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

#[test]
fn sigkill_at_random_moments_never_duplicates_or_orphans() {
    let mut pve = FakePve::start(default_scenario());
    // Every answer takes a little while, so the kills land between all kinds of steps:
    // before the intent, between intent and request, between request and UPID, mid-task,
    // mid-configure, mid-start.
    pve.set_time_scale(1.0);
    pve.slow_network(0.015, 0.01, None);
    let ws = Workspace::new(&pve);
    let names: Vec<String> = (0..6).map(|i| format!("crash-{i}")).collect();
    let files: Vec<(String, String)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let image = if i % 3 == 2 {
                "local:import/debian-12-genericcloud-amd64.qcow2"
            } else {
                "9000"
            };
            (format!("{n}.yaml"), spec(n, "pve1", image, ""))
        })
        .collect();
    let refs: Vec<(&str, String)> = files.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    ws.commit_specs(&refs);

    let seed = std::env::var("PROXSYNC_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261122);
    let mut rng = Lcg(seed);
    let kills = 25;
    let mut progress = Vec::new();
    for round in 0..kills {
        let mut child = Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(["run", "--once", "--config"])
            .arg(ws.config())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start proxsync");
        let delay = 5 + rng.next(600);
        std::thread::sleep(Duration::from_millis(delay));
        // SIGKILL: no cleanup, no flush, nothing.
        let _ = child.kill();
        let _ = child.wait();
        // Never more than one VM per spec, at any point.
        let vms = pve.vms();
        for n in &names {
            let count = vms.iter().filter(|v| v["name"] == n.as_str()).count();
            assert!(
                count <= 1,
                "round {round} (seed {seed}, kill after {delay} ms): {count} VMs named {n}"
            );
        }
        progress.push(vms.len());
    }
    // The kills really interrupted the work: the first runs were cut short before every VM
    // existed (each answer takes 15-25 ms, a full run well over the longest kill delay).
    assert!(
        progress
            .first()
            .is_some_and(|first| *first < names.len() + 1),
        "kills landed mid-work (VM counts per round: {progress:?})"
    );

    // Let it finish. A run whose last attempt failed backs off; a spec change resets that.
    let mut last = String::new();
    let mut ok = false;
    for round in 0..6 {
        let (done, out) = ws.run_once();
        last = out;
        if done {
            ok = true;
            break;
        }
        let nudged: Vec<(&str, String)> = refs
            .iter()
            .map(|(n, t)| (*n, format!("{t}    tags: [f{round}]\n")))
            .collect();
        ws.commit_specs(&nudged);
    }
    assert!(ok, "converges after the crashes (seed {seed}): {last}");

    let vms = pve.vms();
    for n in &names {
        let count = vms.iter().filter(|v| v["name"] == n.as_str()).count();
        assert_eq!(count, 1, "exactly one VM for {n} (seed {seed})");
        let (s, _, m) = ws.condition(n, "Ready");
        assert_eq!(s, "True", "{n}: {m}");
    }
    // Nothing else was created: the template plus one VM per spec.
    assert_eq!(
        vms.len(),
        names.len() + 1,
        "no stray VMs (seed {seed}): {vms:?}"
    );
    let orphans = std::fs::read_to_string(ws.path("status/_orphans.yaml")).unwrap_or_default();
    assert!(!orphans.contains("vmId"), "no orphans: {orphans}");
}
