//! A flaky network converges: with a fifth of the connections to Proxmox reset, repeated
//! `proxsync run --once` reach exactly one VM per spec, all Ready, within a few runs. Reads are
//! retried (jittered, within a time budget); a write whose answer was lost is settled by
//! reading, never resent blindly; and an explicit `run --once` retries specs whose last
//! failure was transient instead of waiting out their backoff.

use crate::common;

use common::engine::{Workspace, marker_claims, spec};
use common::{FakePve, default_scenario};

#[test]
fn a_fifth_of_connections_reset_still_converges_to_one_vm_per_spec() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let names: Vec<String> = (0..6).map(|i| format!("flaky-{i}")).collect();
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

    pve.flaky_network(0.2, 0.0, 0.0, Some(7));
    let mut outputs = Vec::new();
    let mut converged = false;
    for _ in 0..8 {
        let (ok, out) = ws.run_once();
        outputs.push(out);
        // Never a second VM for a spec, after any run.
        for (spec, vmids) in marker_claims(&mut pve) {
            assert!(
                vmids.len() <= 1,
                "{spec}: VMs {vmids:?}\n{}",
                outputs.join("\n---\n")
            );
        }
        if ok {
            converged = true;
            break;
        }
    }
    pve.flaky_network(0.0, 0.0, 0.0, None);
    assert!(
        converged,
        "not converged in 8 runs of `run --once`:\n{}",
        outputs.join("\n---\n")
    );
    let claims = marker_claims(&mut pve);
    for n in &names {
        assert_eq!(claims.get(n).map(Vec::len), Some(1), "{n}: {claims:?}");
        let (status, _, message) = ws.condition(n, "Ready");
        assert_eq!(status, "True", "{n}: {message}");
    }
    assert_eq!(
        pve.vms().len(),
        names.len() + 1,
        "the template and one VM per spec"
    );
}
