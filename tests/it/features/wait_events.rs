//! `proxsync wait` and `proxsync events` against a running daemon on fakepve: a push waited
//! for until its specs are Ready, a stalled spec ending the wait at once with its reason, a
//! timeout's own exit status; the daemon's actions with their PVE tasks, and `--follow`
//! printing what happens after it started.

use crate::common;

use std::time::{Duration, Instant};

use common::engine::{Workspace, spec, text};
use common::{FakePve, default_scenario};

use super::daemon::{Daemon, head};

/// `proxsync wait ...`: (exit code, stdout, stderr, how long it took).
fn wait(ws: &Workspace, args: &[&str]) -> (Option<i32>, String, String, Duration) {
    let start = Instant::now();
    let mut all = vec!["wait"];
    all.extend_from_slice(args);
    let out = ws.proxsync(&all);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
        start.elapsed(),
    )
}

#[test]
fn wait_follows_a_push_until_ready_and_stops_at_once_on_a_stalled_spec() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    let first = head(&ws);
    let daemon = Daemon::start(&ws, None);

    // Right after the push: the commit is waited for, then its spec.
    let (code, out, err, _) = wait(&ws, &["--commit", &first, "--timeout", "60s"]);
    assert_eq!(code, Some(0), "{out}{err}\n{}", daemon.log());
    assert!(out.contains("web-01: Ready"), "{out}");
    assert!(out.contains("1 spec(s) Ready after"), "{out}");
    let status = std::fs::read_to_string(ws.path("status/web-01.yaml")).unwrap();
    assert!(
        status.contains("type: Ready\n  status: \"True\""),
        "{status}"
    );

    // A push adding a spec whose template does not exist: it stalls, and the wait ends at
    // once with its reason instead of running into its timeout.
    let two = [
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("c.yaml", spec("web-02", "pve1", "9000", "")),
    ];
    let mut three = two.to_vec();
    three.push(("b.yaml", spec("bad-01", "pve1", "9999", "")));
    ws.commit_specs(&three);
    ws.push();
    let second = head(&ws);
    let (code, out, err, took) = wait(&ws, &["--commit", &second, "--timeout", "60s"]);
    assert_eq!(code, Some(3), "{out}{err}\n{}", daemon.log());
    assert!(took < Duration::from_secs(45), "{took:?}");
    assert!(err.contains("bad-01: Stalled (ImageNotFound"), "{err}");
    assert!(out.contains("web-02: Ready"), "{out}");
    // Named alone, the Ready specs of the same commit are waited for successfully.
    let (code, out, err, _) = wait(&ws, &["web-01", "web-02", "--commit", &second[..12]]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("2 spec(s) Ready"), "{out}");

    // A spec leaves git: waited for until its guest is deleted and its status gone.
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    let third = head(&ws);
    let (code, out, err, _) = wait(
        &ws,
        &[
            "web-02",
            "--for",
            "deleted",
            "--commit",
            &third,
            "--timeout",
            "60s",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}\n{}", daemon.log());
    assert!(out.contains("web-02: deleted"), "{out}");
    assert!(!ws.path("status/web-02.yaml").exists());
    assert!(daemon.stop(), "SIGTERM ends the daemon cleanly");
}

#[test]
fn wait_times_out_with_its_own_status_and_refuses_an_unknown_name() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    std::fs::create_dir_all(ws.path("status")).unwrap();

    // No daemon runs: nothing becomes Ready.
    let (code, out, err, took) = wait(&ws, &["web-01", "--timeout", "2s"]);
    assert_eq!(code, Some(124), "{out}{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(err.contains("the daemon is not running"), "{err}");
    assert!(err.contains("timed out after 2s"), "{err}");
    assert!(err.contains("web-01: no status yet"), "{err}");

    // A typo is an error at once, with the name meant.
    let out = ws.proxsync(&["wait", "web-0l", "--timeout", "1m"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("did you mean web-01?"),
        "{}",
        text(&out)
    );

    // Not a duration, not a commit id.
    let out = ws.proxsync(&["wait", "web-01", "--timeout", "soon"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = ws.proxsync(&["wait", "--commit", "HEAD"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is not a commit id"), "{}", text(&out));
}
