//! The command line as people use it: `reconcile` of a name that is no spec, `status` saying
//! whether the daemon runs, "did you mean" for typos, `validate`'s counts, logs in plain words,
//! one warning per legacy field, and what to do when the config cannot be read.

use crate::common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use common::engine::{Workspace, spec};
use common::{FakePve, default_scenario};

fn proxsync(ws: &Workspace, args: &[&str]) -> std::process::Output {
    Command::cargo_bin("proxsync")
        .unwrap()
        .args(args)
        .arg("--config")
        .arg(ws.config())
        .env("PROXSYNC_LOG", "info")
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap()
}

fn out(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn err(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// `proxsync run` as a child, stopped (SIGTERM, then waited for) when dropped.
struct Daemon(Child);

impl Daemon {
    fn start(ws: &Workspace) -> Daemon {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(["run", "--config"])
            .arg(ws.config())
            .env("PROXSYNC_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let d = Daemon(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ws.path("state/control.sock").exists() {
            assert!(
                Instant::now() < deadline,
                "the daemon opened no control socket"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is this test's child.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM)
        };
        let _ = self.0.wait();
    }
}

#[test]
fn reconcile_of_an_unknown_name_is_an_error_and_status_tells_the_daemon_state() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    assert!(ws.run_once().0);

    let status = proxsync(&ws, &["status"]);
    let first = out(&status).lines().next().unwrap_or_default().to_string();
    assert!(
        first.starts_with("Daemon:      not running (nothing answers on "),
        "{first}"
    );
    assert!(
        first.contains("what follows is from its last cycle"),
        "{first}"
    );

    let daemon = Daemon::start(&ws);
    let status = proxsync(&ws, &["status"]);
    let first = out(&status).lines().next().unwrap_or_default().to_string();
    assert!(first.starts_with("Daemon:      running since "), "{first}");
    assert!(first.contains(&format!("pid {}", daemon.0.id())), "{first}");
    assert!(first.contains("1 of 1 spec(s) Ready"), "{first}");
    // JSON keeps its shape.
    let json = proxsync(&ws, &["status", "--json"]);
    assert!(out(&json).trim_start().starts_with('{'), "{}", out(&json));

    let r = proxsync(&ws, &["reconcile", "web-O1"]);
    assert_eq!(r.status.code(), Some(1), "{}", err(&r));
    assert!(err(&r).contains("no such spec: web-O1"), "{}", err(&r));
    assert!(err(&r).contains("did you mean web-01?"), "{}", err(&r));
    assert!(out(&r).is_empty(), "nothing queued: {}", out(&r));
    let r = proxsync(&ws, &["reconcile", "web-01"]);
    assert_eq!(r.status.code(), Some(0), "{}", err(&r));
    assert!(out(&r).contains("queued"), "{}", out(&r));
}

#[test]
fn typos_get_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let typed = [
        ("memmory", "memory"),
        ("memroy", "memory"),
        ("dsik", "disk"),
        ("netwrk", "network"),
        ("cpus", "cpu"),
    ];
    for (i, (typo, _)) in typed.iter().enumerate() {
        let text = spec(&format!("vm-{i}"), "pve1", "9000", "").replace("    cpu: 2\n", "")
            + &format!("    {typo}: 2\n");
        std::fs::write(dir.path().join(format!("{i}.yaml")), text).unwrap();
    }
    std::fs::write(
        dir.path().join("labels.yaml"),
        spec("vm-l", "pve1", "9000", "").replace("metadata:\n", "metadata:\n  lables: {}\n"),
    )
    .unwrap();
    let o = Command::cargo_bin("proxsync")
        .unwrap()
        .arg("validate")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    for (typo, meant) in typed.iter().copied().chain([("lables", "labels")]) {
        assert!(
            err(&o).contains(&format!("unknown field {typo:?}"))
                && err(&o).contains(&format!("(did you mean {meant:?}?)")),
            "{typo}: {}",
            err(&o)
        );
    }
}

#[test]
fn validate_counts_only_what_is_valid_and_says_when_it_found_nothing() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let dir = ws.path("specs");
    std::fs::create_dir(&dir).unwrap();
    let o = proxsync(&ws, &["validate", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        out(&o).contains(&format!("no spec files found under {}", dir.display())),
        "{}",
        out(&o)
    );

    std::fs::write(dir.join("a.yaml"), spec("web-01", "pve1", "9000", "")).unwrap();
    std::fs::write(
        dir.join("b.yaml"),
        spec("web-02", "pve1", "9000", "").replace("site: lab", "site: nowhere"),
    )
    .unwrap();
    let o = proxsync(&ws, &["validate", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains("nowhere"), "{}", err(&o));
    assert!(
        err(&o).contains("1 valid spec(s) in 1 file(s)"),
        "the spec naming an unknown site is not counted as valid: {}",
        err(&o)
    );
}

#[test]
fn logs_are_plain_words_and_a_legacy_warning_shows_once() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let legacy = spec("web-01", "pve1", "9000", "").replace(
        "spec:\n",
        "spec:\n  providerConfigRef:\n    name: default\n",
    );
    ws.commit_specs(&[("a.yaml", legacy)]);
    let o = proxsync(&ws, &["run", "--once"]);
    let all = format!("{}{}", out(&o), err(&o));
    assert!(o.status.success(), "{all}");
    let planned = all
        .lines()
        .find(|l| l.contains("planned"))
        .unwrap_or_else(|| panic!("{all}"));
    assert!(
        planned.contains("action=\"create\"") || planned.contains("action=create"),
        "{planned}"
    );
    assert!(
        planned.contains("spec=web-01") || planned.contains("spec=\"web-01\""),
        "{planned}"
    );
    for debug in ["Create {", "Some(", "Converge {", "[\""] {
        assert!(
            !all.contains(debug),
            "Rust's debug format {debug:?} in: {all}"
        );
    }
    assert_eq!(
        all.matches("providerConfigRef is ignored").count(),
        1,
        "{all}"
    );
}

#[test]
fn an_unreadable_config_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("proxsync.toml");
    let o = Command::cargo_bin("proxsync")
        .unwrap()
        .args(["status", "--config"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    for hint in [
        "--config",
        "PROXSYNC_CONFIG",
        "/usr/share/doc/proxsync/examples/proxsync.toml",
    ] {
        assert!(err(&o).contains(hint), "{hint}: {}", err(&o));
    }

    // Root reads any file (CI runs as root): the message for a refused read is checked on
    // the error itself.
    let denied = proxsync::config::ConfigError::Read {
        path: "/etc/proxsync/proxsync.toml".into(),
        source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
    };
    let text = denied.to_string();
    assert!(text.contains("proxsync group"), "{text}");
    assert!(text.contains("adduser $USER proxsync"), "{text}");
}

#[test]
fn status_colours_follow_the_usual_variables() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    assert!(ws.run_once().0);
    let status = |vars: &[(&str, &str)]| {
        let mut c = Command::cargo_bin("proxsync").unwrap();
        c.args(["status", "--config"]).arg(ws.config());
        for v in ["NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE"] {
            c.env_remove(v);
        }
        for (k, v) in vars {
            c.env(k, v);
        }
        out(&c.output().unwrap())
    };
    // Not a terminal: plain, unless forced; NO_COLOR wins over everything (no-color.org).
    assert!(!status(&[]).contains('\x1b'));
    assert!(status(&[("CLICOLOR_FORCE", "1")]).contains("\x1b[32mTrue\x1b[0m"));
    assert!(!status(&[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]).contains('\x1b'));
}

/// Output into a pipe whose reader has gone (`proxsync schema | head -1`, `status | head`) is
/// no error and never a panic.
#[test]
fn a_reader_that_stops_early_is_no_panic() {
    for args in [
        &["schema"][..],
        &["validate", "--effective", "specs.example/eu-fra/app.yaml"],
    ] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The read end closed before the command writes: its writes fail with EPIPE.
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_ne!(output.status.code(), Some(101), "{args:?}: {stderr}");
    }
}
