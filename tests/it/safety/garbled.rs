//! A server whose answers are garbage: fakepve garbles 60 % of its successful answers at random
//! (values replaced by nulls, huge or negative numbers and odd strings, keys and list items
//! dropped; the requests themselves are carried out), over many cycles of five guests whose
//! specs keep changing. proxsync may fail any cycle, but never panics, never hangs, never
//! deletes a guest and never makes a second guest for a spec; with the answers whole again,
//! every spec is Ready with its one guest.
//!
//! `PROXSYNC_GARBLE_CYCLES` sets the number of cycles (default 120), `PROXSYNC_GARBLE_SEED` the
//! seed (default: a few fixed ones, one per test run).

use std::time::{Duration, Instant};

use crate::common;

use common::engine::{Workspace, marker_claims, spec, text};
use common::{FakePve, Scenario};

const VZTMPL: &str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";
/// One cycle of five guests on a fake whose tasks end at once: far longer means a hang.
const CYCLE_LIMIT: Duration = Duration::from_secs(90);

fn ct_spec(name: &str, memory: u32) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: {name}\nspec:\n  \
         forProvider:\n    site: lab\n    node: pve1\n    template: {VZTMPL}\n    \
         memory: {memory}Mi\n    networks:\n      - {{name: eth0, bridge: vmbr0, ip: dhcp}}\n"
    )
}

/// The five specs of cycle `round`: three VMs and two containers, each one's memory stepping
/// with the round so converges keep coming.
fn specs(round: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, name) in ["g-vm-1", "g-vm-2", "g-vm-3"].iter().enumerate() {
        let mib = 1024 + 256 * ((round + i) / 7 % 4);
        let doc =
            spec(name, "pve1", "9000", "").replace("memory: 2Gi", &format!("memory: {mib}Mi"));
        out.push((format!("{name}.yaml"), doc));
    }
    for (i, name) in ["g-ct-1", "g-ct-2"].iter().enumerate() {
        let mib = 512 + 128 * ((round + i) / 5 % 3);
        out.push((format!("{name}.yaml"), ct_spec(name, mib as u32)));
    }
    out
}

/// `proxsync run --once` within [`CYCLE_LIMIT`]: its success and output.
fn bounded_run(ws: &Workspace) -> (bool, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(["run", "--once", "--config"])
        .arg(ws.config())
        .env("PROXSYNC_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run proxsync");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            let out = child.wait_with_output().expect("output");
            return (out.status.success(), text(&out));
        }
        if started.elapsed() > CYCLE_LIMIT {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("a cycle did not end within {CYCLE_LIMIT:?}: {}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn garbled_cycles(seed: u64) {
    let cycles: usize = std::env::var("PROXSYNC_GARBLE_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let mut pve = FakePve::start(Scenario::default().file(
        "local",
        "debian-12-standard_12.7-1_amd64.tar.zst",
        126_000_000,
        "vztmpl",
    ));
    let ws = Workspace::new(&pve);
    let commit = |round: usize| {
        let files = specs(round);
        let files: Vec<(&str, String)> =
            files.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        ws.commit_specs(&files);
    };
    commit(0);
    pve.garble(0.6, seed, None);
    let mut failed = 0;
    for round in 0..cycles {
        if round % 3 == 0 {
            commit(round);
        }
        let (ok, out) = bounded_run(&ws);
        failed += usize::from(!ok);
        assert!(
            !out.contains("panicked") && !out.contains("RUST_BACKTRACE"),
            "seed {seed}, round {round}: a panic\n{out}"
        );
        for (spec, vmids) in marker_claims(&mut pve) {
            assert!(
                vmids.len() <= 1,
                "seed {seed}, round {round}: spec {spec} has guests {vmids:?}\n{out}"
            );
        }
        let deletes: Vec<String> = pve
            .requests()
            .into_iter()
            .filter(|r| r.method == "DELETE")
            .map(|r| r.path)
            .collect();
        assert!(
            deletes.is_empty(),
            "seed {seed}, round {round}: deleted {deletes:?}\n{out}"
        );
        pve.clear_requests();
    }
    let counts = pve.garbled();
    assert!(
        counts["garbled"].as_u64().unwrap_or(0) > 100,
        "the fake garbled answers: {counts}"
    );
    // Whole answers again, and a commit (a spec stalled on a write made from a garbled read,
    // which PVE refused, waits for its inputs to change, as an operator's fix does): every spec
    // converges on its one guest.
    pve.garble(0.0, seed, None);
    let healed: Vec<(String, String)> = specs(cycles)
        .into_iter()
        .map(|(n, t)| {
            (
                n,
                t.replace("    node: pve1\n", "    node: pve1\n    tags: [whole]\n"),
            )
        })
        .collect();
    let healed: Vec<(&str, String)> = healed
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    ws.commit_specs(&healed);
    let _ = bounded_run(&ws);
    let _ = bounded_run(&ws);
    let (ok, out) = bounded_run(&ws);
    let claims = marker_claims(&mut pve);
    let stalled: Vec<String> = specs(0)
        .iter()
        .map(|(file, _)| file.trim_end_matches(".yaml"))
        .map(|name| format!("{name}: {:?}", ws.condition(name, "Ready")))
        .collect();
    assert!(
        ok,
        "seed {seed}: Ready once the answers are whole ({failed} garbled cycles failed)\n{out}\n\
         {claims:?}\n{stalled:#?}"
    );
    assert_eq!(claims.len(), 5, "{claims:?}");
    assert!(claims.values().all(|v| v.len() == 1), "{claims:?}");
}

fn seed(default: u64) -> u64 {
    std::env::var("PROXSYNC_GARBLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn garbled_answers_cost_no_second_guest_and_no_delete() {
    garbled_cycles(seed(7));
}

/// A person's notes, the marker line kept below them, survive garbled answers to config reads
/// while the specs keep changing: no garbled description is ever written back as the notes.
#[test]
fn garbled_config_reads_never_overwrite_a_persons_notes() {
    let mut pve = FakePve::start(Scenario::default());
    let ws = Workspace::new(&pve);
    let names = ["n1", "n2", "n3"];
    let commit = |mib: u32| {
        let files: Vec<(String, String)> = names
            .iter()
            .map(|n| {
                let doc =
                    spec(n, "pve1", "9000", "").replace("memory: 2Gi", &format!("memory: {mib}Mi"));
                (format!("{n}.yaml"), doc)
            })
            .collect();
        let files: Vec<(&str, String)> =
            files.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        ws.commit_specs(&files);
    };
    commit(1024);
    let (ok, out) = bounded_run(&ws);
    assert!(ok, "{out}");
    let mut ids = Vec::new();
    for n in names {
        let vmid = ws.status(n)["vmId"].as_u64().expect("a VMID");
        let text = pve.vm(vmid as u32)["config"]["description"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let line = text
            .lines()
            .find(|l| l.contains("proxsync-id:"))
            .expect("a marker line")
            .to_string();
        assert!(pve.edit_notes("pve1", "qemu", vmid, &format!("RUNBOOK keep me\n{line}")));
        ids.push(vmid as u32);
    }
    let seed = seed(3);
    pve.garble(0.6, seed, Some(&["/config"]));
    for round in 0..30u32 {
        commit(1024 + 128 * (round % 4));
        let (_, out) = bounded_run(&ws);
        for &vmid in &ids {
            let text = pve.vm(vmid)["config"]["description"]
                .as_str()
                .unwrap_or("")
                .to_string();
            assert!(
                text.starts_with("RUNBOOK keep me\n"),
                "seed {seed}, round {round}: VM {vmid}'s notes are now {:?}\n{out}",
                &text[..text.len().min(120)]
            );
        }
    }
}
