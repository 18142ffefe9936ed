//! `proxsync doctor --exercise` against fakepve: the throwaway guests made, cloned, resized,
//! started, stopped and deleted, the durations kept, and nothing left behind, even after a
//! kill in the middle (the next run deletes what the killed one left).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{FakePve, TOKEN_ID, TOKEN_SECRET};

fn write_config(dir: &Path, pve: &FakePve) -> PathBuf {
    let secret = dir.join("lab.token");
    std::fs::write(&secret, format!("{TOKEN_SECRET}\n")).unwrap();
    let path = dir.join("proxsync.toml");
    let text = format!(
        "state_dir = \"{}\"\n\n[source]\npath = \"{}\"\n\n[[site]]\nname = \"lab\"\n\
         endpoint = \"{}\"\ntoken_id = \"{TOKEN_ID}\"\ntoken_secret_file = \"{}\"\n\
         ca_file = \"{}\"\nrequest_timeout = \"10s\"\nconnect_timeout = \"3s\"\n",
        dir.join("state").display(),
        dir.join("repo").display(),
        pve.url(),
        secret.display(),
        pve.ca_file().display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn exercise(config: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxsync"));
    cmd.args(["doctor", "--exercise", "--config"]).arg(config);
    cmd
}

fn run(config: &Path) -> (bool, String) {
    let out = exercise(config).output().expect("run proxsync");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Every guest's VMID, VMs and containers.
fn guests(pve: &mut FakePve) -> Vec<u64> {
    let mut all: Vec<u64> = pve
        .vms()
        .iter()
        .chain(pve.cts().iter())
        .filter_map(|v| v["vmid"].as_u64())
        .collect();
    all.sort_unstable();
    all
}

#[test]
fn an_exercise_reports_each_task_keeps_the_durations_and_leaves_nothing() {
    let mut pve = crate::client::conformance::scenario().start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pve);
    let (ok, out) = run(&config);
    assert!(ok, "{out}");
    for line in [
        "ok   vm create [qmcreate]",
        "ok   vm clone [qmclone]",
        "ok   vm resize [resize]",
        "ok   vm start [qmstart]",
        "ok   vm stop [qmstop]",
        "ok   vm delete VM 101 [qmdestroy]",
        "ok   ct create [vzcreate]",
        "ok   ct clone [vzclone]",
        "ok   ct delete container 100 [vzdestroy]",
        "0 differ from what proxsync expects, 0 not run",
        // Found on the node by itself.
        "template local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
    ] {
        assert!(out.contains(line), "{line:?} in:\n{out}");
    }
    assert_eq!(guests(&mut pve), [9000], "{out}");
    let durations =
        proxsync::conformance::durations::read_durations(&dir.path().join("state"), "lab");
    for task in ["qmcreate", "qmclone", "vzcreate", "vzclone", "qmdestroy"] {
        assert!(durations.contains_key(task), "{task}: {durations:?}");
    }
}

/// Killed while it clones: the guests stay (PVE's tasks go on without proxsync); the next run
/// deletes them, the clone too once its task has ended and it has joined the pool.
#[test]
fn a_killed_exercise_is_cleaned_up_by_the_next_run() {
    let mut pve = crate::client::conformance::scenario().start();
    // 1 PVE second = 10 ms: a create takes 1 s, a clone 3 s.
    pve.create_timing(100.0, 300.0, 0.0);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pve);
    let mut child = exercise(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run proxsync");
    // Wait until the VM is made and its clone has begun: three VMs with the template.
    let deadline = Instant::now() + Duration::from_secs(20);
    while pve.vms().len() < 3 {
        assert!(Instant::now() < deadline, "no clone began: {:?}", pve.vms());
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(guests(&mut pve), [100, 101, 9000], "left by the kill");
    let (ok, out) = run(&config);
    assert!(ok, "{out}");
    assert!(
        out.contains("ok   sweep delete VM 100 [qmdestroy]"),
        "{out}"
    );
    assert!(
        out.contains("ok   sweep delete VM 101 [qmdestroy]"),
        "{out}"
    );
    assert_eq!(guests(&mut pve), [9000], "{out}");
}
