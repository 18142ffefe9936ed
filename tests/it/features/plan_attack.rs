//! `plan` asked of the running daemon, attacked: hostile request lines on the control socket,
//! a flood of plans, a reload while plans wait, a remote source pushed to since the daemon
//! fetched, a tip `[source] verify` refuses, and a plan's read of specs the daemon has not read
//! yet with an age identity the daemon does not run with. Each time the daemon keeps
//! answering and reloading, and what the asker is shown is what a plan made without the
//! daemon shows.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::engine::{Workspace, spec, text};
use common::{FakePve, default_scenario};

use super::daemon::{Daemon, wait_until};

/// Sends `line` on the workspace's control socket and returns the one-line answer ("" when
/// the daemon closed the connection without one).
fn ask(ws: &Workspace, line: &str) -> String {
    let mut stream = UnixStream::connect(ws.path("state/control.sock")).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let _ = stream.write_all(line.as_bytes());
    let mut answer = String::new();
    let _ = BufReader::new(stream).read_line(&mut answer);
    answer
}

/// A `plan <json>` request line for `config`.
fn plan_line(config: &Path, names: &[&str]) -> String {
    let request = serde_json::json!({"config": config, "names": names, "format": null});
    format!("plan {request}\n")
}

/// `proxsync plan ARGS --config CONFIG`: (exit code, stdout, stderr).
pub(crate) fn plan_with(config: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .arg("plan")
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .expect("run proxsync plan");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Log lines without their timestamps (two runs of one plan log at different times).
fn untimed(stderr: &str) -> String {
    stderr
        .lines()
        .map(|l| match l.split_once(' ') {
            Some((first, rest)) if first.starts_with("20") && first.ends_with('Z') => {
                rest.trim_start()
            }
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Plans the daemon made for its control socket, as its log says.
pub(crate) fn plans_made(d: &Daemon) -> usize {
    d.log()
        .matches("a plan made for the control socket")
        .count()
}

/// A copy of the workspace's config at another path: planned by the asker, never the daemon.
fn copy_of_config(ws: &Workspace) -> PathBuf {
    let copy = ws.path("copy.toml");
    std::fs::copy(ws.config(), &copy).unwrap();
    copy
}

/// Stops the daemon, which must exit cleanly.
fn stop(daemon: Daemon) {
    let log = daemon.log();
    assert!(daemon.stop(), "the daemon did not stop cleanly:\n{log}");
}

fn started(ws: &Workspace) -> Daemon {
    let daemon = Daemon::start(ws, None);
    daemon.wait_message("READY=1", Duration::from_secs(30), |m| {
        m.contains("READY=1")
    });
    daemon
}

/// Request lines that name another file, no file, or no request at all are refused, the
/// daemon stays up and answers `state` after each, and a symlink to its config is its config.
#[test]
fn hostile_plan_requests_are_refused_and_the_daemon_keeps_answering() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    let daemon = started(&ws);
    let fifo = ws.path("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let link = ws.path("link.toml");
    std::os::unix::fs::symlink(ws.config(), &link).unwrap();
    let long: Vec<String> = (0..400).map(|i| format!("web-{i:03}")).collect();
    let long: Vec<&str> = long.iter().map(String::as_str).collect();
    let hostile = [
        plan_line(Path::new("/etc/shadow"), &[]),
        plan_line(&fifo, &[]),
        plan_line(Path::new("/dev/zero"), &[]),
        plan_line(&ws.path("state"), &[]),
        plan_line(Path::new("relative.toml"), &[]),
        format!(
            "plan {{\"config\":\"{}\\u0000x\",\"names\":[],\"format\":null}}\n",
            ws.config().display()
        ),
        format!(
            "plan {{\"config\":\"{}\\nreconcile\",\"names\":[],\"format\":null}}\n",
            ws.config().display()
        ),
        plan_line(&ws.config(), &long),
        "plan \n".to_string(),
        "plan {\n".to_string(),
        "plan [1,2,3]\n".to_string(),
        format!("plan {}\n", "x".repeat(5000)),
        "plan {\"config\":1}\n".to_string(),
    ];
    for line in &hostile {
        let answer = ask(&ws, line);
        assert!(
            answer.starts_with("error "),
            "{:.80}: {answer:.300}",
            line.trim()
        );
        assert!(ask(&ws, "state\n").starts_with("ok "), "state answered");
    }
    assert_eq!(plans_made(&daemon), 0, "{}", daemon.log());
    // A symlink to its config is its config; names with terminal escapes and a format it does
    // not know are planned (in words) for their asker alone.
    let answer = ask(&ws, &plan_line(&link, &["web-01"]));
    assert!(answer.starts_with("ok "), "{answer:.300}");
    let bogus = format!(
        "plan {}\n",
        serde_json::json!({"config": link, "names": ["\u{1b}]0;owned\u{7}", "web-\u{9b}1m"], "format": "yaml"})
    );
    let answer = ask(&ws, &bogus);
    assert!(answer.starts_with("ok "), "{answer:.300}");
    stop(daemon);
}

/// Many plans at once: each is made by the daemon or refused at once (the asker then plans
/// itself), none fails for want of a control connection of the daemon's own, and the socket
/// keeps answering `state` meanwhile.
#[test]
fn a_flood_of_plans_fails_none_and_the_socket_keeps_answering() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    let daemon = started(&ws);
    let line = plan_line(&ws.config(), &[]);
    let answers: Vec<String> = std::thread::scope(|s| {
        let asks: Vec<_> = (0..12).map(|_| s.spawn(|| ask(&ws, &line))).collect();
        std::thread::sleep(Duration::from_millis(100));
        let state = ask(&ws, "state\n");
        assert!(
            state.starts_with("ok ") || state.contains("too many"),
            "{state}"
        );
        asks.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let mut made = 0;
    for answer in &answers {
        if let Some(json) = answer.strip_prefix("ok ") {
            let planned: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(planned["code"], 0, "{planned}");
            made += 1;
        } else {
            assert!(answer.starts_with("error "), "{answer}");
        }
    }
    assert!(made >= 1, "{answers:?}");
    assert!(ask(&ws, "state\n").starts_with("ok "));
    stop(daemon);
}

/// SIGHUP while plans are under way on a slow site: the reload opens the state database
/// again at once (no plan holds it while it waits its turn or lists sites), the daemon goes
/// on with the new config, and no plan is answered as failed for the reload.
#[test]
fn a_reload_while_plans_wait_is_taken() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    let daemon = started(&ws);
    // Every request to the site hangs 8 s: a plan lists it for longer than a reload waits
    // for the state database (10 s).
    pve.flaky_network(0.0, 1.0, 8.0, None);
    let line = plan_line(&ws.config(), &[]);
    std::thread::scope(|s| {
        let asks: Vec<_> = (0..4).map(|_| s.spawn(|| ask(&ws, &line))).collect();
        std::thread::sleep(Duration::from_millis(1500));
        daemon.signal("-HUP");
        wait_until("the reload's outcome", Duration::from_secs(60), || {
            let log = daemon.log();
            log.contains("config reloaded") || log.contains("config reload failed")
        });
        for t in asks {
            let answer = t.join().unwrap();
            // Made, or left to the asker; never a plan that failed for the reload.
            match answer.strip_prefix("ok ") {
                Some(json) => {
                    let planned: serde_json::Value = serde_json::from_str(json).unwrap();
                    assert_eq!(planned["code"], 0, "{planned}\n{}", daemon.log());
                }
                None => assert!(
                    answer.starts_with("error ") || answer.is_empty(),
                    "{answer:.300}"
                ),
            }
        }
    });
    let log = daemon.log();
    assert!(log.contains("config reloaded"), "{log}");
    assert!(!log.contains("config reload failed"), "{log}");
    pve.flaky_network(0.0, 0.0, 0.0, None);
    assert!(ask(&ws, "state\n").starts_with("ok "), "{log}");
    stop(daemon);
}

/// A remote source pushed to since the daemon last fetched: the plan the daemon makes
/// fetches first, as a plan made without it does, and both show the pushed spec.
#[test]
fn a_plan_of_a_remote_source_made_by_the_daemon_sees_the_push() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let bare = ws.path("vms.git");
    let config = config.replace(
        &format!("path = \"{}\"", bare.display()),
        &format!("url = \"file://{}\"\ninterval = \"1h\"", bare.display()),
    );
    std::fs::write(ws.config(), config).unwrap();
    let daemon = started(&ws);
    let copy = copy_of_config(&ws);
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    ws.push();
    let made = plans_made(&daemon);
    let asked = plan_with(&ws.config(), &[]);
    assert_eq!(plans_made(&daemon), made + 1, "asked of the daemon");
    let here = plan_with(&copy, &[]);
    assert!(here.1.contains("web-02"), "{here:?}");
    assert_eq!(asked, here, "the daemon's plan and the asker's");
    stop(daemon);
}

/// An ed25519 key pair without a passphrase; returns the private key's path.
fn ssh_key(ws: &Workspace, name: &str) -> PathBuf {
    let key = ws.path(name);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .output()
        .expect("ssh-keygen runs");
    assert!(out.status.success(), "{}", text(&out));
    key
}

/// A tip `[source] verify` refuses: the plan is of the last verified commit with the refusal,
/// and the asker sees what a plan made without the daemon shows, its log lines included; the
/// daemon's log does not say the refusal again for each plan.
#[test]
fn a_refused_tip_is_planned_as_the_asker_would_plan_it() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    let trusted = ssh_key(&ws, "trusted");
    let public = std::fs::read_to_string(trusted.with_extension("pub")).unwrap();
    let public: Vec<&str> = public.split_whitespace().take(2).collect();
    std::fs::write(
        ws.path("allowed_signers"),
        format!("ci@example.org {}\n", public.join(" ")),
    )
    .unwrap();
    let config = std::fs::read_to_string(ws.config()).unwrap().replace(
        "branch = \"main\"\n",
        &format!(
            "branch = \"main\"\nverify = \"ssh\"\nallowed_signers = \"{}\"\n",
            ws.path("allowed_signers").display()
        ),
    );
    std::fs::write(ws.config(), config).unwrap();
    std::fs::write(ws.path("repo/a.yaml"), spec("web-01", "pve1", "9000", "")).unwrap();
    ws.git(&["add", "-A"]);
    let signing = format!("user.signingkey={}", trusted.display());
    ws.git(&[
        "-c",
        "gpg.format=ssh",
        "-c",
        &signing,
        "commit",
        "-q",
        "-S",
        "-m",
        "signed",
    ]);
    ws.push();
    let daemon = started(&ws);
    std::fs::write(ws.path("repo/b.yaml"), spec("web-02", "pve1", "9000", "")).unwrap();
    ws.git(&["add", "-A"]);
    ws.git(&["commit", "-q", "--no-gpg-sign", "-m", "unsigned"]);
    ws.push();
    wait_until(
        "the daemon refused the tip",
        Duration::from_secs(15),
        || daemon.log().contains("the branch tip is refused"),
    );
    let copy = copy_of_config(&ws);
    let refusals = daemon.log().matches("the branch tip is refused").count();
    let asked = plan_with(&ws.config(), &[]);
    let here = plan_with(&copy, &[]);
    assert!(here.2.contains("refused"), "{here:?}");
    assert_eq!(asked.0, here.0);
    assert_eq!(asked.1, here.1);
    assert_eq!(untimed(&asked.2), untimed(&here.2));
    assert_eq!(
        daemon.log().matches("the branch tip is refused").count(),
        refusals,
        "a plan does not log the refusal in the daemon's log: {}",
        daemon.log()
    );
    stop(daemon);
}

/// A new age identity written to `path`; its recipient.
fn identity(path: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let id = age::x25519::Identity::generate();
    let secret = age::secrecy::ExposeSecret::expose_secret(&id.to_string()).to_string();
    std::fs::write(path, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    id.to_public().to_string()
}

const LINE: &str = "    userData: \"#cloud-config\\nruncmd: [\\\"echo c0ffee-4711\\\"]\\n\"";

fn sealed_spec(name: &str, extra: &str, recipient: &str) -> String {
    let plain = spec(name, "pve1", "9000", &format!("{LINE}\n{extra}"));
    proxsync::spec::seal_for_tests(&plain, LINE, recipient)
}

/// The age identity file changed since the daemon loaded it (a new key, no reload yet), and
/// a plan reads a pushed commit before the daemon does: what the plan could not decrypt is
/// not what the daemon's next cycle finds in its parse cache. The daemon applies the commit
/// with the identity it runs with.
#[test]
fn a_plan_does_not_change_what_the_daemon_decrypts() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    let key = ws.path("age.key");
    let recipient = identity(&key);
    let config = std::fs::read_to_string(ws.config()).unwrap();
    std::fs::write(
        ws.config(),
        format!("sops_age_identity_file = \"{}\"\n{config}", key.display()),
    )
    .unwrap();
    ws.commit_specs(&[("web.yaml", sealed_spec("web-01", "", &recipient))]);
    ws.push();
    let daemon = started(&ws);
    assert_eq!(
        ws.condition("web-01", "Ready").0,
        "True",
        "{}",
        daemon.log()
    );
    // The identity file now holds another key; the daemon still runs with the first.
    identity(&key);
    // A cycle on a slow site (each request hangs 3 s): the daemon reads no source until
    // it ends, and the plan below reads the pushed commit first.
    pve.flaky_network(0.0, 1.0, 3.0, None);
    let out = Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(["reconcile", "--config"])
        .arg(ws.config())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    std::thread::sleep(Duration::from_millis(500));
    ws.commit_specs(&[(
        "web.yaml",
        sealed_spec("web-01", "    tags: [changed]\n", &recipient),
    )]);
    ws.push();
    let line = plan_line(&ws.config(), &[]);
    let answer = std::thread::scope(|s| {
        let plan = s.spawn(|| ask(&ws, &line));
        std::thread::sleep(Duration::from_secs(1));
        pve.flaky_network(0.0, 0.0, 0.0, None);
        plan.join().unwrap()
    });
    assert!(!answer.is_empty(), "the plan was answered");
    // The daemon applies the pushed commit: the tag reaches the VM, nothing is stalled.
    let tagged = |pve: &mut FakePve| {
        pve.vms().iter().any(|vm| {
            vm["name"] == "web-01"
                && vm["config"]["tags"]
                    .as_str()
                    .is_some_and(|t| t.contains("changed"))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(40);
    while !tagged(&mut pve) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (stalled, reason, message) = ws.condition("web-01", "Stalled");
    assert!(
        tagged(&mut pve),
        "the pushed commit was not applied: Stalled={stalled} {reason}: {message}\n{}",
        daemon.log()
    );
    stop(daemon);
}
