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

/// Lines a child prints, collected as they come.
fn collect_lines(child: &mut std::process::Child) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    use std::io::BufRead;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = lines.clone();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

#[test]
fn events_show_each_action_with_its_task_and_follow_what_happens_next() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    let daemon = Daemon::start(&ws, None);
    let (code, out, err, _) = wait(&ws, &["--commit", &head(&ws), "--timeout", "60s"]);
    assert_eq!(code, Some(0), "{out}{err}\n{}", daemon.log());

    // The create, with the PVE task it ran, and the Ready it led to.
    let out = ws.proxsync(&["events", "--spec", "web-01"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let create = (stdout.lines())
        .find(|l| l.contains("web-01  action     create: ok"))
        .unwrap_or_else(|| panic!("no create in {stdout}"));
    // Every task it ran, the clone first.
    assert!(create.contains("(tasks UPID:pve1:"), "{create}");
    assert!(create.contains(":qmclone:9000:"), "{create}");
    assert!(
        create.find(":qmclone:") < create.find(":qmstart:"),
        "{create}"
    );
    assert!(stdout.contains("web-01  condition  Ready=True"), "{stdout}");
    // As data: one object per line.
    let out = ws.proxsync(&["events", "--spec", "web-01", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let objects: Vec<serde_json::Value> = (stdout.lines())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        objects.iter().any(|o| o["kind"] == "action"
            && o["tasks"][0]
                .as_str()
                .is_some_and(|t| t.contains(":qmclone:"))),
        "{stdout}"
    );
    // Nothing older than a minute but what just happened; nothing of another spec.
    let out = ws.proxsync(&["events", "--since", "1m", "--spec", "nothing-01"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");

    // --follow: what happens after it started.
    let mut follow = std::process::Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(["events", "--follow", "--config"])
        .arg(ws.config())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lines = collect_lines(&mut follow);
    super::daemon::wait_until("the first read printed", Duration::from_secs(10), || {
        lines.lock().unwrap().iter().any(|l| l.contains("web-01"))
    });
    assert!(!lines.lock().unwrap().iter().any(|l| l.contains("web-02")));
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    ws.push();
    super::daemon::wait_until("web-02's create followed", Duration::from_secs(30), || {
        let lines = lines.lock().unwrap();
        lines
            .iter()
            .any(|l| l.contains("web-02  action     create: ok  (tasks UPID:"))
            && lines
                .iter()
                .any(|l| l.contains("web-02  condition  Ready=True"))
    });
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(daemon.stop(), "SIGTERM ends the daemon cleanly");
}

/// What a guest or PVE says reaches the terminal as text, never as an escape sequence.
#[test]
fn events_keep_hostile_text_off_the_terminal() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    std::fs::create_dir_all(ws.path("status")).unwrap();
    let hostile = "\\e]0;owned\\a\\e[2J\\r\\nforged\\u009b31m\\u202e";
    std::fs::write(
        ws.path("status/web-01.yaml"),
        format!(
            "name: web-01\nsite: lab\nnode: pve1\nvmName: web-01\nstate: running\n\
             ipAddresses: []\ninitialization:\n  provisioned: true\nconditions:\n\
             - type: Ready\n  status: \"False\"\n  reason: Failed\n  message: \"{hostile}\"\n  \
             lastTransitionTime: \"2025-03-01T12:00:00Z\"\nhistory:\n\
             - at: \"2025-03-01T12:00:00Z\"\n  action: converge\n  outcome: \"{hostile}\"\n"
        ),
    )
    .unwrap();
    let out = ws.proxsync(&["events"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(stdout.contains("forged"), "{stdout}");
    assert!(
        !stdout
            .chars()
            .any(|c| c != '\n' && (c.is_control() || c == '\u{202e}')),
        "{stdout:?}"
    );
    let out = ws.proxsync(&["events", "--json"]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(stdout.contains("\\u001b]0;owned"), "{stdout}");
    assert!(
        !stdout
            .chars()
            .any(|c| c != '\n' && (c.is_control() || c == '\u{202e}')),
        "{stdout:?}"
    );
}
