//! `proxsync run`, the daemon, as systemd runs it: pushes are noticed and applied, systemd
//! hears READY, STATUS and WATCHDOG on its notify socket, SIGHUP with a broken config keeps
//! the old one, SIGTERM during a clone then a restart leaves exactly one VM, and a remote
//! source is fetched. In process, `daemon::run` stops when its shutdown future completes (no
//! signal), after a cycle or in the middle of one with the clone's UPID recorded.

use crate::common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::engine::{Workspace, owned_vms, spec, text};
use common::{FakePve, default_scenario};

use super::plan_attack::{plan_with, plans_made};

/// A running `proxsync run` with a notify socket of our own.
pub(crate) struct Daemon {
    child: Child,
    messages: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
    log: std::path::PathBuf,
}

impl Daemon {
    pub(crate) fn start(ws: &Workspace, watchdog_usec: Option<u64>) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let sock_path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&sock_path).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let messages = Arc::new(Mutex::new(Vec::new()));
        let sink = messages.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match sock.recv(&mut buf) {
                    Ok(n) => sink
                        .lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&buf[..n]).to_string()),
                    Err(e)
                        if e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::TimedOut =>
                    {
                        if Arc::strong_count(&sink) == 1 {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
        });
        let log = ws.path(&format!("daemon-{}.log", std::process::id() ^ rand_u32()));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_proxsync"));
        cmd.args(["run", "--config"])
            .arg(ws.config())
            .env("NOTIFY_SOCKET", &sock_path)
            .env("PROXSYNC_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(usec) = watchdog_usec {
            cmd.env("WATCHDOG_USEC", usec.to_string());
        }
        let child = cmd.spawn().expect("start proxsync run");
        Daemon {
            child,
            messages,
            _dir: dir,
            log,
        }
    }

    fn messages(&self) -> Vec<String> {
        self.messages.lock().unwrap().clone()
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `pred` holds on the notify messages.
    pub(crate) fn wait_message(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.messages().iter().any(|m| pred(m)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "no {what} within {timeout:?}; messages: {:?}\nlog:\n{}",
            self.messages(),
            self.log()
        );
    }

    pub(crate) fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGTERM and wait for the exit, returning whether it exited cleanly.
    pub(crate) fn stop(mut self) -> bool {
        self.signal("-TERM");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        false
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rand_u32() -> u32 {
    proxsync::util::clock::system_now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
}

/// Polls until `pred` holds (or panics after `timeout`), returning how long it took.
pub(crate) fn wait_until(
    what: &str,
    timeout: Duration,
    mut pred: impl FnMut() -> bool,
) -> Duration {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if pred() {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("{what}: not within {timeout:?}");
}

fn names(pve: &mut FakePve) -> Vec<String> {
    owned_vms(pve).into_iter().map(|(_, n)| n).collect()
}

#[test]
fn a_push_is_applied_within_seconds_and_systemd_hears_about_it() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    let daemon = Daemon::start(&ws, Some(200_000));
    daemon.wait_message("READY=1", Duration::from_secs(20), |m| {
        m.contains("READY=1")
    });
    assert!(
        names(&mut pve).contains(&"web-01".to_string()),
        "the first cycle created web-01"
    );
    daemon.wait_message("STATUS=", Duration::from_secs(5), |m| {
        m.contains("STATUS=1 specs: 1 Ready")
    });
    // WATCHDOG_USEC=200ms: the loop pings at half of it.
    daemon.wait_message("WATCHDOG=1", Duration::from_secs(5), |m| {
        m.contains("WATCHDOG=1")
    });
    // `plan` works while the daemon holds the state database (it asks the daemon).
    let plan = ws.proxsync(&["plan"]);
    assert_eq!(plan.status.code(), Some(0), "{}", text(&plan));
    assert!(text(&plan).contains("no changes"), "{}", text(&plan));

    // A push is noticed through the refs (no polling: resync_interval is 5 minutes).
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    ws.push();
    let took = wait_until(
        "web-02 created after the push",
        Duration::from_secs(10),
        || names(&mut pve).contains(&"web-02".to_string()),
    );
    eprintln!("push to create seen in fakepve: {took:?}");

    // Removing a spec in a later commit deletes its VM.
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    wait_until(
        "web-02 deleted after the push",
        Duration::from_secs(10),
        || !names(&mut pve).contains(&"web-02".to_string()),
    );
    // The cycle writes its status after the delete.
    wait_until(
        "the summary shows one spec",
        Duration::from_secs(10),
        || {
            let summary =
                std::fs::read_to_string(ws.path("status/_summary.yaml")).unwrap_or_default();
            summary.contains("specs: 1\n") && summary.contains("ready: 1\n")
        },
    );
    assert!(daemon.stop(), "SIGTERM ends the daemon cleanly");
}

/// A push's cycle looks again only at the site whose specs the push changed: the other site
/// hears nothing from it (what changed there waits for the next full cycle).
#[test]
fn a_push_reaches_only_the_site_it_changed() {
    let mut lab = FakePve::start(default_scenario());
    let mut other = FakePve::start(default_scenario());
    let ws = Workspace::two_sites(&lab, &other, "");
    ws.use_bare_source();
    let at_other = spec("db-01", "pve1", "9000", "").replace("site: lab", "site: other");
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", at_other.clone()),
    ]);
    ws.push();
    let daemon = Daemon::start(&ws, None);
    daemon.wait_message("READY=1", Duration::from_secs(20), |m| {
        m.contains("READY=1")
    });
    assert_eq!(
        names(&mut other),
        ["db-01"],
        "the first cycle looked at both sites"
    );
    other.clear_requests();

    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", at_other),
        ("c.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    ws.push();
    wait_until(
        "the push's cycle wrote its summary",
        Duration::from_secs(10),
        || {
            let summary =
                std::fs::read_to_string(ws.path("status/_summary.yaml")).unwrap_or_default();
            summary.contains("specs: 3\n") && summary.contains("ready: 3\n")
        },
    );
    assert!(names(&mut lab).contains(&"web-02".to_string()));
    assert!(
        other.requests().is_empty(),
        "site other was not looked at: {:?}",
        other.requests()
    );
    assert!(daemon.stop(), "SIGTERM ends the daemon cleanly");
}

#[test]
fn sighup_with_a_broken_config_keeps_the_old_one() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    let mut daemon = Daemon::start(&ws, None);
    daemon.wait_message("READY=1", Duration::from_secs(20), |m| {
        m.contains("READY=1")
    });
    let good = std::fs::read_to_string(ws.config()).unwrap();
    std::fs::write(
        ws.config(),
        good.replace("[[site]]", "[[site]]\nbogus_key = 1"),
    )
    .unwrap();
    daemon.signal("-HUP");
    daemon.wait_message(
        "RELOADING=1 with MONOTONIC_USEC",
        Duration::from_secs(5),
        |m| m.contains("RELOADING=1") && m.contains("MONOTONIC_USEC="),
    );
    daemon.wait_message("the refusal", Duration::from_secs(5), |m| {
        m.contains("config reload refused")
    });
    assert!(daemon.alive(), "still running");
    assert!(
        daemon.log().contains("bogus_key"),
        "the refusal names the key:\n{}",
        daemon.log()
    );
    // Still working, on the old config.
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    ws.push();
    wait_until(
        "web-02 created on the old config",
        Duration::from_secs(10),
        || names(&mut pve).contains(&"web-02".to_string()),
    );
    // A good config is taken, and the daemon goes on with it.
    let before = daemon_ready_count(&daemon);
    std::fs::write(ws.config(), good.replace("[reconcile]", "[reconcile]\n")).unwrap();
    daemon.signal("-HUP");
    daemon.wait_message("READY after the reload", Duration::from_secs(10), |_| {
        daemon_ready_count(&daemon) > before
    });
    assert!(
        daemon.alive(),
        "still running after a good reload:\n{}",
        daemon.log()
    );
    assert!(daemon.log().contains("config reloaded"), "{}", daemon.log());
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
        ("c.yaml", spec("web-03", "pve1", "9000", "")),
    ]);
    ws.push();
    wait_until(
        "web-03 created on the new config",
        Duration::from_secs(10),
        || names(&mut pve).contains(&"web-03".to_string()),
    );
    assert!(daemon.stop());
}

/// `proxsync plan` beside the running daemon is asked of it (it holds the specs parsed), and
/// says word for word what a plan made without it says, in every format and for a name.
/// Another config file, or the daemon's own changed since it loaded it, is planned by the
/// asker: the daemon plans only with the config it runs with.
#[test]
fn plan_is_asked_of_the_daemon_for_its_own_config_only() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    let broken = spec("web-02", "pve1", "9000", "").replace("cpu: 2", "cpu: lots");
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", broken),
    ]);
    ws.push();
    let daemon = Daemon::start(&ws, None);
    daemon.wait_message("READY=1", Duration::from_secs(20), |m| {
        m.contains("READY=1")
    });
    // The same config at another path: planned here (records asked of the daemon).
    let copy = ws.path("copy.toml");
    std::fs::copy(ws.config(), &copy).unwrap();
    for args in [
        &[][..],
        &["--format", "json"],
        &["--format", "markdown"],
        &["web-01"],
    ] {
        let made = plans_made(&daemon);
        let asked = plan_with(&ws.config(), args);
        assert_eq!(
            plans_made(&daemon),
            made + 1,
            "plan {args:?} was asked of the daemon"
        );
        let here = plan_with(&copy, args);
        assert_eq!(
            plans_made(&daemon),
            made + 1,
            "another config file is planned here"
        );
        assert_eq!(
            asked, here,
            "plan {args:?}: the daemon's and this process's"
        );
        assert!(asked.2.contains("cpu"), "the diagnostic: {}", asked.2);
    }
    // The daemon's config changed since it loaded it (a reload not yet asked for).
    let good = std::fs::read_to_string(ws.config()).unwrap();
    std::fs::write(
        ws.config(),
        good.replace("[source]", "[source]\ninterval = \"17s\""),
    )
    .unwrap();
    let made = plans_made(&daemon);
    let here = plan_with(&ws.config(), &[]);
    assert_eq!(
        plans_made(&daemon),
        made,
        "a changed config is planned here"
    );
    assert_eq!(here, plan_with(&copy, &[]));
    assert!(daemon.stop());
}

pub(crate) fn daemon_ready_count(d: &Daemon) -> usize {
    d.messages()
        .iter()
        .filter(|m| m.contains("READY=1"))
        .count()
}

#[test]
fn sigterm_during_a_clone_then_a_restart_leaves_exactly_one_vm() {
    let mut pve = FakePve::start(default_scenario());
    // Clones to the Ceph pool take 3 s (time_scale 1), so SIGTERM lands mid-task.
    pve.call("add_ceph_storage", serde_json::json!({"name": "ceph-vm"}))
        .unwrap();
    pve.set_time_scale(1.0);
    pve.call("ceph_slow", serde_json::json!({"secs": 3}))
        .unwrap();
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    ws.commit_specs(&[(
        "a.yaml",
        spec("slow-01", "pve1", "9000", "    storage: ceph-vm\n"),
    )]);
    ws.push();
    let daemon = Daemon::start(&ws, None);
    wait_until("the clone task started", Duration::from_secs(15), || {
        pve.requests().iter().any(|r| r.path.ends_with("/clone"))
    });
    std::thread::sleep(Duration::from_millis(300));
    let log_before_stop = daemon.log();
    assert!(daemon.stop(), "stops cleanly during the clone");
    assert!(
        log_before_stop.contains("create task started"),
        "the UPID was recorded before the stop:\n{log_before_stop}"
    );
    // The clone goes on in PVE; a restarted daemon finds the recorded task and finishes the VM.
    let daemon = Daemon::start(&ws, None);
    daemon.wait_message("READY=1", Duration::from_secs(30), |m| {
        m.contains("READY=1")
    });
    wait_until("slow-01 Ready", Duration::from_secs(30), || {
        ws.path("status/slow-01.yaml").exists() && ws.condition("slow-01", "Ready").0 == "True"
    });
    let all: Vec<_> = pve
        .vms()
        .into_iter()
        .filter(|v| v["name"] == "slow-01")
        .collect();
    assert_eq!(all.len(), 1, "exactly one VM: {all:?}");
    assert!(daemon.stop());
}

#[test]
fn a_remote_source_is_fetched_into_a_mirror() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    // The same bare repository, but as a file:// remote fetched every second.
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let bare = ws.path("vms.git");
    let config = config.replace(
        &format!("path = \"{}\"", bare.display()),
        &format!("url = \"file://{}\"\ninterval = \"1s\"", bare.display()),
    );
    std::fs::write(ws.config(), config).unwrap();
    let daemon = Daemon::start(&ws, None);
    daemon.wait_message("READY=1", Duration::from_secs(20), |m| {
        m.contains("READY=1")
    });
    assert!(
        names(&mut pve).contains(&"web-01".to_string()),
        "{}",
        daemon.log()
    );
    assert!(
        ws.path("state/mirror.git/HEAD").exists(),
        "the mirror lives under state_dir"
    );
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    ws.push();
    wait_until(
        "web-02 created from the fetched commit",
        Duration::from_secs(15),
        || names(&mut pve).contains(&"web-02".to_string()),
    );
    // A request makes it fetch and reconcile at once.
    let out = ws.proxsync(&["reconcile", "web-01"]);
    assert!(out.status.success(), "{}", text(&out));
    wait_until(
        "the request shows in the summary",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(ws.path("status/_summary.yaml"))
                .unwrap_or_default()
                .contains("lastRequest")
        },
    );
    assert!(daemon.stop());
}

#[test]
fn status_renders_a_mix_of_states() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("ok-01", "pve1", "9000", "")),
        ("b.yaml", spec("no-image", "pve1", "9999", "")),
        ("c.yaml", spec("broken", "pve1", "9000", "    cpus: 2\n")),
    ]);
    let _ = ws.run_once();
    pve.clear_requests();
    let out = ws.proxsync(&["status"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for want in [
        "ok-01",
        "no-image",
        "ImageNotFound",
        "broken",
        "ValidationFailed",
    ] {
        assert!(t.contains(want), "{want} missing:\n{t}");
    }
    let out = ws.proxsync(&["status", "no-image"]);
    assert!(
        text(&out).contains("template 9999 does not exist"),
        "{}",
        text(&out)
    );
    let out = ws.proxsync(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["specs"].as_array().map(|a| a.len()), Some(3), "{v}");
    assert!(!Path::new(&ws.path("status/_summary.yaml")).exists() || v["summary"].is_object());
}

#[test]
fn a_past_backoff_deadline_with_no_action_does_not_spin_the_loop() {
    // A spec in backoff whose deadline has passed but which gets no action (its node is
    // offline) must not wake the daemon every second: it waits for the resync (5 minutes).
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    ws.commit_specs(&[("a.yaml", spec("no-image", "pve1", "9999", ""))]);
    ws.push();
    let (_, out) = ws.run_once();
    let store = proxsync::store::Store::open(&ws.path("state")).unwrap();
    let mut rec = store
        .specs()
        .unwrap()
        .remove("no-image")
        .unwrap_or_else(|| panic!("a record for no-image:\n{out}"));
    assert!(rec.next_attempt_ms.is_some(), "in backoff: {rec:?}\n{out}");
    // As if the backoff had run out a moment ago.
    let now = proxsync::util::clock::system_now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    rec.next_attempt_ms = Some(now - 1_000);
    store.put("no-image", &rec).unwrap();
    drop(store);
    pve.set_node_offline("pve1", true);

    let daemon = Daemon::start(&ws, None);
    daemon.wait_message("READY=1", Duration::from_secs(20), |m| {
        m.contains("READY=1")
    });
    std::thread::sleep(Duration::from_secs(5));
    let log = daemon.log();
    let cycles = log.matches("cycle done").count();
    assert!(
        cycles <= 2,
        "{cycles} cycles in about 5 s: the loop wakes for a deadline already past\n{log}"
    );
    // The control socket appeared with its final mode, in a private state_dir.
    let mode = |p: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(ws.path(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("state/control.sock"), 0o660);
    assert_eq!(mode("state"), 0o700);
    assert!(daemon.stop());
}

/// Runs `proxsync::shell::daemon::run` in this process until `stop` says so (polled from a thread,
/// since the fake's controls block), returning its result and how long it took after the
/// shutdown future completed.
fn run_in_process(
    ws: &Workspace,
    stop: impl FnOnce() + Send + 'static,
) -> (Result<(), String>, Duration) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<Instant>();
    let watcher = std::thread::spawn(move || {
        stop();
        let _ = tx.send(Instant::now());
    });
    let stopped_at = Arc::new(Mutex::new(None));
    let seen = stopped_at.clone();
    let shutdown = async move {
        if let Ok(at) = rx.await {
            *seen.lock().unwrap() = Some(at);
        }
    };
    let result = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(60),
            proxsync::shell::daemon::run(ws.config(), shutdown),
        )
        .await
    });
    watcher.join().unwrap();
    let after = stopped_at
        .lock()
        .unwrap()
        .map(|at| at.elapsed())
        .unwrap_or_default();
    match result {
        Ok(r) => (r.map_err(|e| e.to_string()), after),
        Err(_) => (Err("still running after 60 s".into()), after),
    }
}

#[test]
fn run_returns_cleanly_when_its_shutdown_future_completes_after_a_cycle() {
    // No signal: the caller's shutdown future stops the daemon (the seam `cli` uses with
    // SIGTERM/SIGINT).
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    let summary = ws.path("status/_summary.yaml");
    let (result, after) = run_in_process(&ws, move || {
        wait_until(
            "the first cycle wrote its summary",
            Duration::from_secs(30),
            || summary.exists(),
        );
    });
    assert_eq!(result, Ok(()));
    assert!(
        after < Duration::from_secs(5),
        "stopped {after:?} after shutdown"
    );
    assert!(
        names(&mut pve).contains(&"web-01".to_string()),
        "the cycle created web-01"
    );
    assert!(ws.condition("web-01", "Ready").0 == "True");
    assert!(
        !ws.path("state/control.sock").exists(),
        "the control socket is removed on the way out"
    );
    // The database is closed: `run --once` can open it.
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
}

#[test]
fn a_shutdown_future_during_a_clone_returns_after_the_cycle_recorded_its_upid() {
    let mut pve = FakePve::start(default_scenario());
    // Clones to the Ceph pool take 3 s (time_scale 1), so the shutdown lands mid-task.
    pve.call("add_ceph_storage", serde_json::json!({"name": "ceph-vm"}))
        .unwrap();
    pve.set_time_scale(1.0);
    pve.call("ceph_slow", serde_json::json!({"secs": 3}))
        .unwrap();
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[(
        "a.yaml",
        spec("slow-01", "pve1", "9000", "    storage: ceph-vm\n"),
    )]);
    let (result, mut pve) = {
        let (tx, rx) = std::sync::mpsc::channel();
        let (result, _) = run_in_process(&ws, move || {
            wait_until("the clone task started", Duration::from_secs(30), || {
                pve.requests().iter().any(|r| r.path.ends_with("/clone"))
            });
            let _ = tx.send(pve);
        });
        (result, rx.recv().unwrap())
    };
    assert_eq!(result, Ok(()));
    let store = proxsync::store::Store::open(&ws.path("state")).unwrap();
    let rec = store.specs().unwrap().remove("slow-01").expect("a record");
    match &rec.vm {
        proxsync::store::VmState::Creating { task, .. } => {
            assert!(task.is_some(), "the clone's UPID is recorded: {rec:?}")
        }
        other => panic!("still creating when stopped mid-clone: {other:?}"),
    }
    drop(store);
    let all: Vec<_> = pve
        .vms()
        .into_iter()
        .filter(|v| v["name"] == "slow-01")
        .collect();
    assert!(all.len() <= 1, "one clone at most: {all:?}");
}

/// The commit at the tip of the work repository.
pub(crate) fn head(ws: &Workspace) -> String {
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(ws.path("repo"))
        .output()
        .expect("git");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A status file's text and modification time.
fn status_file(ws: &Workspace, name: &str) -> (String, std::time::SystemTime) {
    let path = ws.path(&format!("status/{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mtime = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or(std::time::UNIX_EPOCH);
    (text, mtime)
}

/// Waits until `_summary.yaml` names `commit` with `ready` specs Ready.
fn wait_applied(ws: &Workspace, commit: &str, ready: usize) {
    wait_until(
        &format!("commit {commit} applied"),
        Duration::from_secs(30),
        || {
            let text = std::fs::read_to_string(ws.path("status/_summary.yaml")).unwrap_or_default();
            text.contains(&format!("commit: {commit}\n"))
                && text.contains(&format!("ready: {ready}\n"))
        },
    );
}

#[test]
fn a_push_rewrites_only_the_status_of_the_spec_it_changed_also_after_a_restart() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    let specs = |v2: &str, v3: &str| {
        vec![
            ("a.yaml", spec("web-01", "pve1", "9000", "")),
            ("b.yaml", spec("web-02", "pve1", "9000", v2)),
            ("c.yaml", spec("web-03", "pve1", "9000", v3)),
            ("d.yaml", spec("broken", "pve1", "9000", "    cpus: 2\n")),
        ]
    };
    ws.commit_specs(&specs("", ""));
    ws.push();
    let c1 = head(&ws);
    let daemon = Daemon::start(&ws, None);
    wait_applied(&ws, &c1, 3);
    let names = ["web-01", "web-02", "web-03", "broken"];
    let before: Vec<_> = names.iter().map(|n| status_file(&ws, n)).collect();
    for n in names {
        assert_eq!(ws.status(n)["commit"], c1.as_str(), "{n}");
    }

    // The push changes web-02 only: its file alone is rewritten, naming the new commit.
    ws.commit_specs(&specs("    tags: [v2]\n", ""));
    ws.push();
    let c2 = head(&ws);
    wait_applied(&ws, &c2, 3);
    assert_eq!(ws.status("web-02")["commit"], c2.as_str());
    assert_ne!(status_file(&ws, "web-02").0, before[1].0);
    for (i, n) in names.iter().enumerate().filter(|(i, _)| *i != 1) {
        assert_eq!(
            status_file(&ws, n),
            before[i],
            "{n}'s file was rewritten by a push that did not change it"
        );
    }
    assert!(daemon.stop(), "SIGTERM ends the daemon cleanly");

    // Across a restart: the files say which commit each version came with; the push made
    // while the daemon was down changes web-03 only.
    let after_push: Vec<_> = names.iter().map(|n| status_file(&ws, n)).collect();
    ws.commit_specs(&specs("    tags: [v2]\n", "    tags: [v3]\n"));
    ws.push();
    let c3 = head(&ws);
    let daemon = Daemon::start(&ws, None);
    wait_applied(&ws, &c3, 3);
    assert_eq!(ws.status("web-03")["commit"], c3.as_str());
    assert_eq!(ws.status("web-02")["commit"], c2.as_str());
    for (i, n) in names.iter().enumerate().filter(|(i, _)| *i != 2) {
        assert_eq!(
            status_file(&ws, n),
            after_push[i],
            "{n}'s file was rewritten after a restart"
        );
    }
    assert!(daemon.stop(), "SIGTERM ends the daemon cleanly");
}

/// The descriptors `pid` holds open.
fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or_else(|e| panic!("cannot list /proc/{pid}/fd: {e}"))
}

/// How many of `pid`'s descriptors are the control socket's (the listener and the
/// connections it accepted, which carry its path in /proc/net/unix).
fn control_fds(pid: u32) -> usize {
    let unix = std::fs::read_to_string("/proc/net/unix").expect("/proc/net/unix");
    let inodes: std::collections::HashSet<String> = unix
        .lines()
        .filter(|l| l.ends_with("/control.sock"))
        .filter_map(|l| l.split_whitespace().nth(6).map(str::to_string))
        .collect();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the daemon's descriptors")
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|l| {
            let l = l.to_string_lossy();
            l.strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .is_some_and(|i| inodes.contains(i))
        })
        .count()
}

/// Sets the daemon's descriptor limit, as `prlimit --nofile=N:` would: the soft limit, which
/// the hard one lets the test raise again without privileges.
fn set_fd_limit(pid: u32, limit: u64) {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit on a valid pid, reading into a valid struct.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            std::ptr::null(),
            &mut old,
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    let lim = libc::rlimit {
        rlim_cur: limit.min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    // SAFETY: prlimit on a valid pid with a valid new limit and no old limit to fill.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &lim,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// A flood of the daemon's control socket: `n` connections that send nothing, each one the
/// daemon closes replaced at once by a new one (as an attacker keeps them coming), until the
/// flood is dropped.
struct Flood {
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Flood {
    fn start(ws: &Workspace, n: usize) -> Flood {
        use std::io::Read;
        use std::os::unix::net::UnixStream;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let path = ws.path("state/control.sock");
        let connect = move || {
            let s = UnixStream::connect(&path).expect("a connection");
            s.set_nonblocking(true).unwrap();
            s
        };
        let mut held: Vec<UnixStream> = (0..n).map(|_| connect()).collect();
        let flag = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            while !flag.load(std::sync::atomic::Ordering::SeqCst) {
                for s in held.iter_mut() {
                    // Closed by the daemon (a refusal, or its read timeout): connect again.
                    let closed = match s.read(&mut buf) {
                        Ok(_) => true,
                        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                    };
                    if closed {
                        *s = connect();
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Flood { stop }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A flood of control connections cannot stall the daemon. First, with room for a few dozen
/// descriptors: many more connections than that are kept coming, and a push made meanwhile is
/// applied during the flood (the daemon serves a few at once and refuses the others at once). Then with no descriptor to spare (EMFILE everywhere): the
/// accept loop pauses instead of spinning, the push's read of the repository fails, and it is
/// read again on its own once descriptors are back, not at the next trigger (the resync is an
/// hour away).
#[test]
fn a_control_socket_flood_does_not_stall_the_daemon() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(&pve, "[reconcile]\nresync_interval = \"1h\"\n");
    ws.use_bare_source();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    ws.push();
    let mut daemon = Daemon::start(&ws, None);
    daemon.wait_message("READY=1", Duration::from_secs(20), |m| {
        m.contains("READY=1")
    });
    assert!(names(&mut pve).contains(&"web-01".to_string()));
    let pid = daemon.child.id();
    // What the idle daemon holds (its files, sockets, the connections to the fake).
    let idle = open_fds(pid);
    assert_eq!(control_fds(pid), 1, "the control socket is found");

    // Room for 64 more descriptors, and 100 connections kept coming: the daemon serves a few
    // at once and refuses the others at once, so the flood never takes the descriptors the
    // push needs (reading the repository, talking to the cluster, writing status).
    set_fd_limit(pid, idle + 64);
    let flood = Flood::start(&ws, 100);
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    ws.push();
    wait_until(
        "web-02 created while 100 connections are kept coming",
        Duration::from_secs(60),
        || names(&mut pve).contains(&"web-02".to_string()),
    );
    wait_until("the push's cycle done", Duration::from_secs(20), || {
        daemon.log().matches("cycle done").count() >= 2
    });
    let log = daemon.log();
    assert!(
        !log.contains("Too many open files"),
        "the flood took the daemon's descriptors:\n{log}"
    );
    assert!(daemon.alive(), "{log}");
    drop(flood);

    // No descriptor to spare: once the flood's connections are closed, the limit is what the
    // daemon holds, and everything that opens a descriptor fails until it is raised.
    wait_until(
        "the flood's connections closed",
        Duration::from_secs(20),
        || control_fds(pid) == 1,
    );
    let room = open_fds(pid);
    set_fd_limit(pid, room);
    let warned = |log: &str| {
        log.matches("control socket: cannot accept a connection")
            .count()
    };
    let before = warned(&daemon.log());
    let flood = Flood::start(&ws, 50);
    wait_until(
        "the accept loop meets EMFILE",
        Duration::from_secs(20),
        || warned(&daemon.log()) > before,
    );
    let log_has = |what: &str| {
        let what = what.to_string();
        let daemon = &daemon;
        move || daemon.log().contains(&what)
    };
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
        ("c.yaml", spec("web-03", "pve1", "9000", "")),
    ]);
    ws.push();
    wait_until(
        "the push's read of the repository fails",
        Duration::from_secs(20),
        log_has("cannot read the source"),
    );
    assert!(!names(&mut pve).contains(&"web-03".to_string()));
    // The flood ends and descriptors are back.
    drop(flood);
    set_fd_limit(pid, room + 1024);
    wait_until(
        "web-03 created once descriptors are back, without another trigger",
        Duration::from_secs(60),
        || names(&mut pve).contains(&"web-03".to_string()),
    );
    assert!(daemon.alive(), "{}", daemon.log());
    assert!(daemon.stop(), "SIGTERM ends the daemon cleanly");
}

/// Every file under `dir` (the state directory: mirror, records) whose content holds `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_containing(&path, needle));
        } else if let Ok(bytes) = std::fs::read(&path)
            && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
        {
            found.push(path.display().to_string());
        }
    }
    found
}

/// A password in `[source] url`, with the server down (nothing listens on its port): it
/// appears nowhere `run --once` or the daemon writes (stdout, stderr and so the journal,
/// systemd's `STATUS=`, `_summary.yaml`, the state directory), nor in `proxsync status`,
/// `doctor` or `validate`, which warn about it instead.
#[test]
fn a_password_in_the_source_url_is_never_shown() {
    const PASSWORD: &str = "PASSWORD";
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("https://alice:{PASSWORD}@127.0.0.1:{port}/x.git");
    let masked = format!("https://***@127.0.0.1:{port}/x.git");
    let config = std::fs::read_to_string(ws.config()).unwrap().replace(
        &format!("path = \"{}\"", ws.path("repo").display()),
        &format!("url = \"{url}\"\ninterval = \"1s\""),
    );
    std::fs::write(ws.config(), config).unwrap();

    let out = ws.proxsync(&["run", "--once"]);
    assert!(!out.status.success());
    let once = text(&out);
    assert!(!once.contains(PASSWORD), "{once}");
    assert!(once.contains(&masked), "{once}");

    let daemon = Daemon::start(&ws, None);
    let summary = ws.path("status/_summary.yaml");
    wait_until(
        "the fetch failure in the summary",
        Duration::from_secs(20),
        || {
            std::fs::read_to_string(&summary)
                .unwrap_or_default()
                .contains("sourceError")
        },
    );
    daemon.wait_message("STATUS= naming the source", Duration::from_secs(20), |m| {
        m.contains("STATUS=") && m.contains("source:")
    });
    let written = std::fs::read_to_string(&summary).unwrap();
    assert!(!written.contains(PASSWORD), "{written}");
    assert!(written.contains(&masked), "{written}");
    for m in daemon.messages() {
        assert!(!m.contains(PASSWORD), "{m}");
    }
    let status = text(&ws.proxsync(&["status"]));
    assert!(!status.contains(PASSWORD), "{status}");
    assert!(status.contains(&masked), "{status}");
    let doctor = text(&ws.proxsync(&["doctor"]));
    assert!(!doctor.contains(PASSWORD), "{doctor}");
    assert!(
        doctor.contains(&format!(
            "warn source: [source] url = \"{masked}\" carries a password or token"
        )),
        "{doctor}"
    );
    let validate = ws.proxsync(&["validate", ws.path("repo").to_str().unwrap()]);
    let validate = text(&validate);
    assert!(!validate.contains(PASSWORD), "{validate}");
    assert!(validate.contains("warning: [source] url"), "{validate}");
    let log = daemon.log();
    assert!(daemon.stop());
    assert!(!log.contains(PASSWORD), "{log}");
    assert!(log.contains(&masked), "{log}");
    assert_eq!(
        files_containing(&ws.path("state"), PASSWORD),
        Vec::<String>::new()
    );
}

/// After a lost `marker.key`, `proxsync adopt --all-unverified` lists every VM whose marker
/// names this install and one of its specs (nothing changed), and `--yes` confirms them all
/// through the running daemon, which holds the state database: every spec is Ready again
/// without stopping it.
#[test]
fn a_lost_marker_key_is_confirmed_in_bulk_through_the_running_daemon() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let before = owned_vms(&mut pve);
    ws.remove_state_and_key();
    let d = Daemon::start(&ws, None);
    let unverified = |name: &str| {
        std::fs::read_to_string(ws.path(&format!("status/{name}.yaml")))
            .is_ok_and(|t| t.contains("UnverifiedClaim"))
    };
    wait_until(
        "both specs UnverifiedClaim",
        Duration::from_secs(30),
        || unverified("web-01") && unverified("web-02"),
    );

    let list = ws.proxsync(&["adopt", "--all-unverified"]);
    assert!(list.status.success(), "{}", text(&list));
    let listed = String::from_utf8_lossy(&list.stdout).to_string();
    for (vmid, name) in &before {
        assert!(
            listed.contains(&format!("{name}\tVM {vmid} ({name}) on lab/")),
            "{listed}"
        );
    }
    assert!(text(&list).contains("nothing changed"), "{}", text(&list));
    assert!(unverified("web-01"), "a listing confirms nothing");

    let yes = ws.proxsync(&["adopt", "--all-unverified", "--yes"]);
    assert!(yes.status.success(), "{}\n{}", text(&yes), d.log());
    assert!(ws.proxsync(&["reconcile"]).status.success());
    let ready = |name: &str| {
        std::fs::read_to_string(ws.path(&format!("status/{name}.yaml")))
            .is_ok_and(|t| t.contains("reason: Available"))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(ready("web-01") && ready("web-02")) {
        assert!(
            Instant::now() < deadline,
            "both specs Ready: not within 30 s\n{}\n{}",
            std::fs::read_to_string(ws.path("status/web-01.yaml")).unwrap_or_default(),
            d.log()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(owned_vms(&mut pve), before, "nothing created or deleted");
    assert!(
        d.log().contains("adoption confirmed by hand"),
        "{}",
        d.log()
    );
}

/// `proxsync suspend` while the daemon runs goes through its control socket (the daemon holds
/// the state database): the next cycle, which the request queues, shows the spec Suspended
/// with the reason and the uid the socket saw; a change meanwhile is not applied; `resume`
/// lifts it and the change follows.
#[test]
fn suspend_and_resume_go_through_the_running_daemon() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    let d = Daemon::start(&ws, None);
    let status = || std::fs::read_to_string(ws.path("status/web-01.yaml")).unwrap_or_default();
    wait_until("the control socket", Duration::from_secs(30), || {
        ws.path("state/control.sock").exists()
    });

    let out = ws.proxsync(&["suspend", "web-01", "--reason", "disk replacement"]);
    assert!(out.status.success(), "{}\n{}", text(&out), d.log());
    let uid = format!("(uid {})", own_uid());
    wait_until("web-01 Suspended", Duration::from_secs(30), || {
        let s = status();
        s.contains("type: Suspended") && s.contains("disk replacement") && s.contains(&uid)
    });
    ws.commit_specs(&[(
        "a.yaml",
        spec("web-01", "pve1", "9000", "").replace("memory: 2Gi", "memory: 4Gi"),
    )]);
    assert!(ws.proxsync(&["reconcile"]).status.success());
    wait_until("the drift reported", Duration::from_secs(30), || {
        status().contains("memory: spec 4096 MiB, VM 2048 MiB")
    });
    assert_eq!(
        pve.vm(vmid)["config"]["memory"]
            .to_string()
            .trim_matches('"'),
        "2048"
    );

    let out = ws.proxsync(&["resume", "web-01"]);
    assert!(out.status.success(), "{}\n{}", text(&out), d.log());
    wait_until("web-01 resumed and Ready", Duration::from_secs(30), || {
        let s = status();
        !s.contains("type: Suspended") && s.contains("reason: Available")
    });
    let vm = pve.vm(vmid);
    let memory = |v: &serde_json::Value| v.to_string().trim_matches('"').to_string();
    assert!(
        memory(&vm["config"]["memory"]) == "4096" || memory(&vm["pending"]["memory"]) == "4096",
        "{vm}"
    );
    assert!(
        d.log().contains("suspended (proxsync suspend)"),
        "{}",
        d.log()
    );
}

/// This process's uid, from /proc (no libc call in tests).
fn own_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
