//! `[metrics] listen`: a running `proxsync run` serves OpenMetrics text at `/metrics`, scraped
//! over TCP and a unix socket and read by a real OpenMetrics parser (`openmetrics-parser`),
//! with values that follow what the daemon did against fakepve: specs by condition, cycles,
//! requests by site, tasks by type, site health, the applied commit, a tripped delete valve, a
//! failed task. A port already taken is a startup error naming the key.

use crate::common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::engine::{Workspace, spec};
use common::{FakePve, TOKEN_SECRET, default_scenario, free_port};
use openmetrics_parser::{MetricsExposition, OpenMetricsType, OpenMetricsValue};

type Exposition = MetricsExposition<OpenMetricsType, OpenMetricsValue>;

/// A running `proxsync run`; killed when dropped.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(ws: &Workspace) -> Daemon {
        let log = ws.path("daemon.log");
        let child = Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(["run", "--config"])
            .arg(ws.config())
            .env("PROXSYNC_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start proxsync run");
        Daemon { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, and whether it exited cleanly within 30 s.
    fn stop(mut self) -> bool {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the daemon listens, and how to reach it.
#[derive(Clone)]
enum Endpoint {
    Tcp(u16),
    Unix(PathBuf),
}

/// An HTTP answer: status, headers (names lowercased), body.
struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

/// One HTTP/1.1 request with `Connection: close`, written by hand so the test depends on
/// nothing of the daemon's own HTTP stack.
fn http(endpoint: &Endpoint, method: &str, path: &str) -> std::io::Result<Answer> {
    let request =
        format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let mut raw = String::new();
    match endpoint {
        Endpoint::Tcp(port) => {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", *port))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(request.as_bytes())?;
            s.read_to_string(&mut raw)?;
        }
        Endpoint::Unix(path) => {
            let mut s = std::os::unix::net::UnixStream::connect(path)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(request.as_bytes())?;
            s.read_to_string(&mut raw)?;
        }
    }
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer: {raw:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok(Answer {
        status,
        headers,
        body: body.to_string(),
    })
}

/// Scrapes `/metrics` and parses it as OpenMetrics (a parse error fails the test).
fn scrape(endpoint: &Endpoint) -> std::io::Result<(Answer, Exposition)> {
    let answer = http(endpoint, "GET", "/metrics")?;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let parsed = openmetrics_parser::openmetrics::parse_openmetrics(&answer.body)
        .unwrap_or_else(|e| panic!("not OpenMetrics: {e}\n{}", answer.body));
    Ok((answer, parsed))
}

/// Every metric family proxsync exposes (docs/metrics.md lists the same).
const FAMILIES: [&str; 23] = [
    "proxsync_build",
    "proxsync_specs",
    "proxsync_specs_backing_off",
    "proxsync_reconcile_cycles",
    "proxsync_reconcile_cycle_duration_seconds",
    "proxsync_start_time_seconds",
    "proxsync_last_successful_cycle_timestamp_seconds",
    "proxsync_applied_commit",
    "proxsync_pve_requests",
    "proxsync_pve_request_duration_seconds",
    "proxsync_pve_tasks_started",
    "proxsync_pve_tasks_failed",
    "proxsync_parallel_limit",
    "proxsync_orphans",
    "proxsync_delete_valve_trips",
    "proxsync_delete_valve_tripped",
    "proxsync_site_up",
    "proxsync_site_quorate",
    "proxsync_site_nodes",
    "proxsync_site_nodes_online",
    "proxsync_notify_messages",
    "proxsync_notify_target_failing",
    "proxsync_webhook_requests",
];

/// The sum of a family's samples whose labels include `labels` (a counter's or gauge's value,
/// a histogram's count); 0 when there are none (a family without samples is not exposed).
fn value(exp: &Exposition, family: &str, labels: &[(&str, &str)]) -> f64 {
    assert!(FAMILIES.contains(&family), "{family} is not a known family");
    let Some(f) = exp.families.get(family) else {
        return 0.0;
    };
    f.iter_samples()
        .filter(|s| {
            let set = s.get_labelset().expect("a sample of a family has labels");
            labels
                .iter()
                .all(|(k, v)| set.get_label_value(k) == Some(*v))
        })
        .map(|s| match &s.value {
            OpenMetricsValue::Gauge(n) | OpenMetricsValue::Unknown(n) => n.as_f64(),
            OpenMetricsValue::Counter(c) => c.value.as_f64(),
            OpenMetricsValue::Histogram(h) => h.count.unwrap_or(0) as f64,
            OpenMetricsValue::Info => 1.0,
            other => panic!("{family}: unexpected value {other:?}"),
        })
        .sum()
}

/// Scrapes until `pred` holds on the parsed metrics (connection refused counts as not yet),
/// returning the last scrape.
fn scrape_until(
    endpoint: &Endpoint,
    daemon: &Daemon,
    what: &str,
    pred: impl Fn(&Exposition) -> bool,
) -> (Answer, Exposition) {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < Duration::from_secs(60) {
        if let Ok((answer, exp)) = scrape(endpoint) {
            if pred(&exp) {
                return (answer, exp);
            }
            last = Some(answer.body);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "{what}: not within 60 s\nlast scrape:\n{}\nlog:\n{}",
        last.unwrap_or_default(),
        daemon.log()
    );
}

fn head_commit(ws: &Workspace) -> String {
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(ws.path("repo"))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn metrics_config(listen: &str) -> String {
    format!("[metrics]\nlisten = \"{listen}\"\n")
}

#[test]
fn a_running_daemon_serves_metrics_that_parse_and_follow_its_cycles() {
    let pve = FakePve::start(default_scenario());
    let port = free_port();
    let ws = Workspace::with_extra(&pve, &metrics_config(&format!("127.0.0.1:{port}")));
    ws.use_bare_source();
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    ws.push();
    let daemon = Daemon::start(&ws);
    let endpoint = Endpoint::Tcp(port);
    let ready = [
        ("condition", "Ready"),
        ("status", "True"),
        ("reason", "Available"),
    ];
    let (answer, m) = scrape_until(&endpoint, &daemon, "both specs Ready", |m| {
        value(m, "proxsync_specs", &ready) == 2.0
    });

    assert_eq!(
        answer.headers.get("content-type").map(String::as_str),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(answer.body.ends_with("# EOF\n"), "{}", answer.body);
    // Every family exposed is a documented one (one without samples yet is left out).
    for family in m.families.keys() {
        assert!(
            FAMILIES.contains(&family.as_str()),
            "unknown family {family}"
        );
    }
    assert!(value(&m, "proxsync_reconcile_cycles", &[("outcome", "success")]) >= 1.0);
    assert_eq!(
        value(&m, "proxsync_reconcile_cycles", &[("outcome", "error")]),
        0.0
    );
    assert!(value(&m, "proxsync_reconcile_cycle_duration_seconds", &[]) >= 1.0);
    let started = value(&m, "proxsync_start_time_seconds", &[]);
    assert!(started > 1.0e9, "{}", answer.body);
    assert!(value(&m, "proxsync_last_successful_cycle_timestamp_seconds", &[]) >= started);
    // Nothing stalled, nothing backing off, nothing orphaned, no valve tripped.
    assert_eq!(
        value(
            &m,
            "proxsync_specs",
            &[("condition", "Stalled"), ("status", "True")]
        ),
        0.0
    );
    assert_eq!(value(&m, "proxsync_specs_backing_off", &[]), 0.0);
    assert_eq!(value(&m, "proxsync_orphans", &[]), 0.0);
    assert_eq!(value(&m, "proxsync_delete_valve_tripped", &[]), 0.0);
    assert_eq!(
        value(
            &m,
            "proxsync_applied_commit",
            &[("commit", &head_commit(&ws))]
        ),
        1.0
    );
    // Requests counted by site, method, endpoint and outcome; latency by site and method.
    let lab = ("site", "lab");
    let listings = [
        lab,
        ("method", "GET"),
        ("endpoint", "/cluster/resources"),
        ("outcome", "success"),
    ];
    assert!(value(&m, "proxsync_pve_requests", &listings) >= 1.0);
    let clones = [
        lab,
        ("method", "POST"),
        ("endpoint", "/nodes/{node}/qemu/{vmid}/clone"),
    ];
    assert_eq!(value(&m, "proxsync_pve_requests", &clones), 2.0);
    assert!(
        value(
            &m,
            "proxsync_pve_request_duration_seconds",
            &[lab, ("method", "GET")]
        ) >= 1.0
    );
    assert_eq!(
        value(
            &m,
            "proxsync_pve_tasks_started",
            &[lab, ("type", "qmclone")]
        ),
        2.0
    );
    // The template's 2G disk grows to the spec's 8Gi: PVE's task type is `resize`.
    assert_eq!(
        value(&m, "proxsync_pve_tasks_started", &[lab, ("type", "resize")]),
        2.0
    );
    assert_eq!(
        value(&m, "proxsync_pve_tasks_started", &[("type", "other")]),
        0.0,
        "every task type proxsync starts is named:\n{}",
        answer.body
    );
    assert_eq!(value(&m, "proxsync_pve_tasks_failed", &[]), 0.0);
    // pve1's limit of actions at once grew from 2 with the clones, resizes and starts that
    // ended in their usual time (adaptive, the default, up to 10).
    let limit = value(&m, "proxsync_parallel_limit", &[lab, ("node", "pve1")]);
    assert!((3.0..=10.0).contains(&limit), "{limit}:\n{}", answer.body);
    // The site as observed: up, quorate, both nodes online.
    assert_eq!(value(&m, "proxsync_site_up", &[lab]), 1.0);
    assert_eq!(value(&m, "proxsync_site_quorate", &[lab]), 1.0);
    assert_eq!(value(&m, "proxsync_site_nodes", &[lab]), 2.0);
    assert_eq!(value(&m, "proxsync_site_nodes_online", &[lab]), 2.0);
    assert_eq!(
        value(&m, "proxsync_build", &[("install", "test")]),
        1.0,
        "the build info names the install"
    );
    // No spec name, VMID or secret anywhere in the text.
    for private in ["web-01", "web-02", TOKEN_SECRET] {
        assert!(
            !answer.body.contains(private),
            "{private} in:\n{}",
            answer.body
        );
    }

    // Anything but GET /metrics is refused.
    let other = http(&endpoint, "GET", "/").unwrap();
    assert_eq!(other.status, 404);
    let post = http(&endpoint, "POST", "/metrics").unwrap();
    assert_eq!(post.status, 405);

    // An empty commit trips the valve: nothing is deleted, and the metrics say so.
    ws.commit_specs(&[]);
    ws.push();
    let (_, m) = scrape_until(&endpoint, &daemon, "the valve trip counted", |m| {
        value(m, "proxsync_delete_valve_trips", &[]) >= 1.0
    });
    assert_eq!(value(&m, "proxsync_delete_valve_tripped", &[]), 1.0);
    assert_eq!(
        value(
            &m,
            "proxsync_applied_commit",
            &[("commit", &head_commit(&ws))]
        ),
        1.0,
        "the applied commit follows the push"
    );
    assert_eq!(
        m.families["proxsync_applied_commit"].iter_samples().count(),
        1,
        "one commit at a time"
    );
    assert!(daemon.stop(), "SIGTERM ends the daemon cleanly");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the listener is gone with the daemon"
    );
}

#[test]
fn metrics_on_a_unix_socket_count_a_failed_task_and_go_with_the_daemon() {
    let mut pve = FakePve::start(default_scenario());
    let socket = tempfile::tempdir().unwrap();
    let path = socket.path().join("metrics.sock");
    let ws = Workspace::with_extra(&pve, &metrics_config(&path.display().to_string()));
    // The first start is accepted and its task then fails (as PVE's `start failed: ...`).
    let in_task = pve
        .errors_for("POST", "/nodes/pve1/qemu/100/status/start")
        .into_iter()
        .find(|e| e["in_task"] == true)
        .and_then(|e| e["name"].as_str().map(str::to_string))
        .expect("fakepve knows an error of a start's task (tests/harness, errors_for)");
    pve.fail_error("POST", "/status/start", &in_task, Some(1));
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    let daemon = Daemon::start(&ws);
    let endpoint = Endpoint::Unix(path.clone());
    let (answer, m) = scrape_until(&endpoint, &daemon, "the failed start counted", |m| {
        value(m, "proxsync_pve_tasks_failed", &[("type", "qmstart")]) >= 1.0
            && value(m, "proxsync_specs_backing_off", &[]) == 1.0
    });
    let lab = ("site", "lab");
    assert_eq!(
        value(&m, "proxsync_pve_tasks_failed", &[lab, ("type", "qmstart")]),
        1.0
    );
    assert!(
        value(
            &m,
            "proxsync_pve_tasks_started",
            &[lab, ("type", "qmclone")]
        ) >= 1.0
    );
    let failed = [
        ("condition", "Ready"),
        ("status", "False"),
        ("reason", "Failed"),
    ];
    assert_eq!(value(&m, "proxsync_specs", &failed), 1.0, "{}", answer.body);

    // Retried at once on request: the start succeeds, the gauges follow, the counter stays.
    let asked = ws.proxsync(&["reconcile", "web-01"]);
    assert!(asked.status.success(), "{}", common::engine::text(&asked));
    let ready = [("condition", "Ready"), ("status", "True")];
    let (_, m) = scrape_until(&endpoint, &daemon, "web-01 Ready after the retry", |m| {
        value(m, "proxsync_specs", &ready) == 1.0
    });
    assert_eq!(value(&m, "proxsync_specs_backing_off", &[]), 0.0);
    assert_eq!(value(&m, "proxsync_specs", &failed), 0.0);
    assert_eq!(value(&m, "proxsync_pve_tasks_failed", &[]), 1.0);
    assert!(
        value(
            &m,
            "proxsync_pve_tasks_started",
            &[lab, ("type", "qmstart")]
        ) >= 2.0
    );
    assert_socket_mode(&path);
    assert!(daemon.stop(), "SIGTERM ends the daemon cleanly");
    assert!(!path.exists(), "the socket file is removed on stop");
}

fn assert_socket_mode(path: &Path) {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
}

#[test]
fn a_metrics_address_in_use_is_a_startup_error_naming_the_key() {
    let pve = FakePve::start(default_scenario());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let ws = Workspace::with_extra(&pve, &metrics_config(&format!("127.0.0.1:{port}")));
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    let mut daemon = Daemon::start(&ws);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = daemon.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "still running with its metrics address taken:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = daemon.log();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "[metrics] listen = \"127.0.0.1:{port}\": cannot listen"
        )),
        "{text}"
    );
    drop(taken);
}

/// The metric names the docs, the alert rules and the dashboard use, without their sample
/// suffixes (`_total`, `_bucket`, ...).
fn names_in(file: &str) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("proxsync_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let family = ["_total", "_bucket", "_sum", "_count", "_info", "_created"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| FAMILIES.contains(f)))
            .unwrap_or(name);
        if family.len() > "proxsync_".len() {
            names.insert(family.to_string());
        }
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_docs_alerts_and_dashboard_use_only_metrics_proxsync_exposes() {
    for file in [
        "docs/metrics.md",
        "docs/prometheus-alerts.yaml",
        "docs/grafana-dashboard.json",
    ] {
        let names = names_in(file);
        assert!(!names.is_empty(), "{file} names no metric");
        for name in &names {
            assert!(
                FAMILIES.contains(&name.as_str()),
                "{file}: unknown metric {name}"
            );
        }
    }
    let documented = names_in("docs/metrics.md");
    for family in FAMILIES {
        assert!(
            documented.contains(family),
            "docs/metrics.md lacks {family}"
        );
    }
}
