//! Attacks on the health checks (`spec.forProvider.health`): hostile guests (their agent's
//! addresses, their HTTP servers), the listed uptime as PVE really lists it, a check slower than
//! the round's budget, and a steady daemon's cost.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common;
use common::Scenario;
use common::engine::{Workspace, next_seq, spec};

fn made_vmid(pve: &mut common::FakePve) -> u32 {
    let owned = common::engine::owned_vms(pve);
    assert_eq!(owned.len(), 1, "{owned:?}");
    owned[0].0 as u32
}

/// How a [`Guest`] HTTP server answers.
#[derive(Clone)]
enum Mode {
    /// These bytes, then the connection is closed.
    Bytes(Vec<u8>),
    /// Nothing: the connection is held open and never written to.
    Hang,
    /// These bytes one at a time, `ms` apart.
    Slow(Vec<u8>, u64),
}

/// A hostile guest's HTTP service on 127.0.0.1.
struct Guest {
    port: u16,
    mode: Arc<Mutex<Mode>>,
}

impl Guest {
    fn start(mode: Mode) -> Guest {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(mode));
        let m = mode.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mode = m.lock().unwrap().clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 2048];
                    let _ = stream.read(&mut buf);
                    match mode {
                        Mode::Bytes(b) => {
                            let _ = stream.write_all(&b);
                        }
                        Mode::Hang => std::thread::sleep(Duration::from_secs(120)),
                        Mode::Slow(b, ms) => {
                            for byte in b {
                                if stream.write_all(&[byte]).is_err() {
                                    return;
                                }
                                std::thread::sleep(Duration::from_millis(ms));
                            }
                        }
                    }
                });
            }
        });
        Guest { port, mode }
    }

    fn answer(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

/// The engine in this process with a clock the test moves, and the guest's uptime moved with
/// it (`lag_secs` behind, as PVE's listing lags: pvestatd refreshes it every 10 s).
struct Daemon {
    rt: tokio::runtime::Runtime,
    d: common::engine::InProcess,
    offset: Arc<AtomicU64>,
    vmid: u32,
    uptime0: u64,
}

impl Daemon {
    fn new(ws: &Workspace, vmid: u32, uptime0: u64) -> Daemon {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut d = common::engine::in_process(ws);
        let offset = Arc::new(AtomicU64::new(0));
        let o = offset.clone();
        d.engine
            .set_clock(proxsync::util::clock::Clock::from_fn(move || {
                proxsync::util::clock::now_ms() + o.load(Ordering::SeqCst)
            }));
        Daemon {
            rt,
            d,
            offset,
            vmid,
            uptime0,
        }
    }

    fn now_ms(&self) -> u64 {
        proxsync::util::clock::now_ms() + self.offset.load(Ordering::SeqCst)
    }

    /// Moves the clock on `secs`, and the listed uptime with it, `lag_secs` stale.
    fn later(&self, pve: &mut common::FakePve, secs: u64, lag_secs: u64) {
        let now = self.offset.fetch_add(secs * 1000, Ordering::SeqCst) / 1000 + secs;
        pve.set_vm(self.vmid, json!({"uptime": self.uptime0 + now - lag_secs}));
    }

    fn cycle(&mut self) -> proxsync::engine::CycleReport {
        self.rt
            .block_on(self.d.engine.reconcile(&self.d.specs, Some(&self.d.commit)))
            .expect("a cycle")
    }
}

/// PVE lists a guest's uptime from pvestatd's last update, every 10 s: two cycles minutes apart
/// read starts up to 10 s apart for one run. A guest that passed and then fails once (of
/// `failures: 3`) is Failing, not Unhealthy at once as a guest that "never passed since it
/// restarted".
#[test]
fn a_listed_uptime_seconds_stale_is_not_a_restart() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let http = Guest::start(Mode::Bytes(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()));
    let health = format!(
        "    health:\n      http: {{port: {}, path: /healthz}}\n      address: 127.0.0.1\n      \
         failures: 3\n",
        http.port
    );
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", &health))]);
    ws.run_once();
    let vmid = made_vmid(&mut pve);
    pve.set_vm(vmid, json!({"uptime": 3600}));
    let mut d = Daemon::new(&ws, vmid, 3600);
    d.cycle();
    assert_eq!(ws.condition("web-01", "Healthy").1, "Passing");

    // One failed round; the listing's uptime is 8 s stale this time.
    http.answer(Mode::Bytes(b"HTTP/1.1 503 Busy\r\n\r\n".to_vec()));
    d.later(&mut pve, 241, 8);
    d.cycle();
    let (status, reason, message) = ws.condition("web-01", "Healthy");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Failing"),
        "one failed round of 3 after passing: {message}"
    );
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{message}");
}

/// A guest's agent that reports an IPv4-mapped IPv6 loopback address (`::ffff:127.0.0.1`):
/// loopback addresses are skipped (docs/health.md), so the check has no address. Taken, the
/// daemon checks its own machine's port: here a service of the daemon's machine makes a
/// guest that runs nothing pass.
#[test]
fn an_ipv4_mapped_loopback_address_is_not_the_guest_s() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    // A service of the daemon's machine, on loopback only.
    let local = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = local.local_addr().unwrap().port();
    let health = format!("    health:\n      tcp: {{port: {port}}}\n      checkTimeout: 2s\n");
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", &health))]);
    ws.run_once();
    let vmid = made_vmid(&mut pve);
    for hostile in [
        "::ffff:127.0.0.1",
        "::ffff:127.1.2.3",
        "::ffff:0.0.0.0",
        "::ffff:169.254.169.254",
    ] {
        let interfaces = json!([
            {"name": "eth0", "ip-addresses": [{"ip-address": hostile, "ip-address-type": "ipv6"}]}
        ]);
        pve.set_vm(vmid, json!({"agent": {"interfaces": interfaces}}));
        ws.run_once();
        let (_, reason, message) = ws.condition("web-01", "Healthy");
        assert!(
            message.contains("the guest reports no address to connect to"),
            "{hostile}: {reason}: {message}"
        );
    }
}

/// A status line without a reason phrase (`HTTP/1.1 200` CRLF, as minimal servers write it;
/// RFC 9112 asks a client to read the code) is HTTP 200, not "not HTTP".
#[test]
fn a_status_line_without_a_reason_phrase_is_http() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let http = Guest::start(Mode::Bytes(
        b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n".to_vec(),
    ));
    let health = format!(
        "    health:\n      http: {{port: {}, path: /}}\n      address: 127.0.0.1\n",
        http.port
    );
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", &health))]);
    ws.run_once();
    made_vmid(&mut pve);
    ws.run_once();
    let (_, reason, message) = ws.condition("web-01", "Healthy");
    assert_eq!(reason, "Passing", "{message}");
}

/// A guest whose service stops answering (connections taken, nothing written) with a
/// `checkTimeout` the spec may set (up to 1m) longer than the round's 20 s: its round never
/// ends within the budget, is never kept, and the guest stays Healthy (Passing) however long its
/// service hangs.
#[test]
fn a_check_longer_than_the_round_budget_still_counts() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let http = Guest::start(Mode::Bytes(b"HTTP/1.1 200 OK\r\n\r\n".to_vec()));
    let health = format!(
        "    health:\n      http: {{port: {}, path: /}}\n      address: 127.0.0.1\n      \
         checkTimeout: 21s\n      failures: 1\n",
        http.port
    );
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", &health))]);
    ws.run_once();
    let vmid = made_vmid(&mut pve);
    pve.set_vm(vmid, json!({"uptime": 3600}));
    let mut d = Daemon::new(&ws, vmid, 3600);
    d.cycle();
    assert_eq!(ws.condition("web-01", "Healthy").1, "Passing");

    http.answer(Mode::Hang);
    d.later(&mut pve, 241, 0);
    let started = Instant::now();
    d.cycle();
    let took = started.elapsed();
    let (status, reason, message) = ws.condition("web-01", "Healthy");
    assert_ne!(
        reason, "Passing",
        "a service that hangs for {took:?} is not passing ({status}): {message}"
    );
}

/// What a hostile guest's HTTP server answers is bounded in time (checkTimeout) and never
/// reaches a status: an answer that never comes, megabytes without a newline, a status line
/// sent byte by byte past the timeout, a status line with control characters, escapes, HTML
/// and YAML.
#[test]
fn a_hostile_http_server_is_bounded_and_never_quoted() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let http = Guest::start(Mode::Hang);
    let health = format!(
        "    health:\n      http: {{port: {}, path: /}}\n      address: 127.0.0.1\n      \
         checkTimeout: 2s\n      failures: 100\n",
        http.port
    );
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", &health))]);
    ws.run_once();
    let vmid = made_vmid(&mut pve);
    pve.set_vm(vmid, json!({"uptime": 3600}));
    let mut d = Daemon::new(&ws, vmid, 3600);
    let mut huge = b"HTTP/1.1 200 ".to_vec();
    huge.extend(std::iter::repeat_n(b'A', 8 << 20));
    let hostile: Vec<(&str, Mode, &str)> = vec![
        ("hang", Mode::Hang, "no answer within 2s"),
        ("huge", Mode::Bytes(huge), "answered as expected"),
        (
            "slow",
            Mode::Slow(b"HTTP/1.1 200 OK\r\n".to_vec(), 400),
            "no answer within 2s",
        ),
        (
            "hostile line",
            Mode::Bytes(
                b"HTTP/1.1 503 \x1b[2J<script>x</script>\x00\r\nstatus: {reason: Forged}\r\n- \
                  Ready: True\r\n\r\n"
                    .to_vec(),
            ),
            "answered HTTP 503, expected 2xx",
        ),
        (
            "not http",
            Mode::Bytes(b"<html>\x07reason: Passing\n".to_vec()),
            "the answer is not HTTP",
        ),
    ];
    for (what, mode, said) in hostile {
        http.answer(mode);
        d.later(&mut pve, 241, 0);
        let started = Instant::now();
        d.cycle();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(6), "{what}: a cycle of {took:?}");
        let (_, _, message) = ws.condition("web-01", "Healthy");
        assert!(message.contains(said), "{what}: {message}");
        let status = std::fs::read_to_string(ws.path("status/web-01.yaml")).unwrap();
        for forged in ["script", "Forged", "AAAA", "html", "\u{1b}", "\\e", "\\x1b"] {
            assert!(!status.contains(forged), "{what}: {forged} in\n{status}");
        }
    }
}

/// An idle daemon whose guest passes stays idle: no status file written, the last plan kept,
/// and PVE asked nothing for health between the checks (an address read once, no ping).
#[test]
fn a_steady_healthy_daemon_stays_idle() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let local = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = local.local_addr().unwrap().port();
    let health = format!(
        "    health:\n      agent: true\n      tcp: {{port: {port}}}\n      address: 127.0.0.1\n"
    );
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", &health))]);
    ws.run_once();
    let vmid = made_vmid(&mut pve);
    pve.set_vm(vmid, json!({"uptime": 3600, "agent": {}}));
    let mut d = Daemon::new(&ws, vmid, 3600);
    d.cycle();
    d.later(&mut pve, 10, 0);
    d.cycle();
    assert_eq!(ws.condition("web-01", "Healthy").1, "Passing");
    let status_path = ws.path("status/web-01.yaml");
    let text = std::fs::read_to_string(&status_path).unwrap();
    let mtime = std::fs::metadata(&status_path).unwrap().modified().unwrap();
    let mut pings = 0;
    let mut unchanged = 0;
    // 20 minutes of cycles a minute apart.
    for i in 0..20 {
        let before = next_seq(&mut pve);
        d.later(&mut pve, 60, 0);
        let report = d.cycle();
        unchanged += usize::from(report.unchanged);
        let reqs = pve.requests_since(before);
        pings += reqs
            .iter()
            .filter(|r| r.path.ends_with("/agent/ping"))
            .count();
        assert!(
            reqs.iter()
                .all(|r| !r.path.contains("/agent/network-get-interfaces")
                    && !r.path.ends_with("/interfaces")),
            "no address read: {:?}",
            reqs.iter().map(|r| &r.path).collect::<Vec<_>>()
        );
        if let Some(next) = report.next_attempt_ms {
            assert!(
                next >= d.now_ms() + 30_000,
                "cycle {i}: no cycle run for a healthy guest alone"
            );
        }
    }
    assert_eq!(std::fs::read_to_string(&status_path).unwrap(), text);
    assert_eq!(
        std::fs::metadata(&status_path).unwrap().modified().unwrap(),
        mtime,
        "no status file written"
    );
    assert!(
        pings <= 6,
        "a healthy guest pinged at most every 4 minutes: {pings} in 20"
    );
    assert_eq!(unchanged, 20, "each cycle keeps the last plan");
}

/// A guest whose service hangs from its first check, with a `checkTimeout` longer than the
/// round's 20 s: its round is never kept, so it is "not checked yet" and due at once, every
/// cycle: the daemon is told to run the next cycle at once, and each cycle waits out the 20 s.
#[test]
fn a_guest_whose_checks_outlast_the_round_does_not_spin_the_daemon() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let http = Guest::start(Mode::Hang);
    let health = format!(
        "    health:\n      http: {{port: {}, path: /}}\n      address: 127.0.0.1\n      \
         checkTimeout: 21s\n",
        http.port
    );
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", &health))]);
    ws.run_once();
    let vmid = made_vmid(&mut pve);
    pve.set_vm(vmid, json!({"uptime": 30}));
    let mut d = Daemon::new(&ws, vmid, 30);
    let report = d.cycle();
    let (_, reason, message) = ws.condition("web-01", "Healthy");
    let next = report.next_attempt_ms.unwrap_or(u64::MAX);
    assert!(
        next >= d.now_ms() + 10_000,
        "the next cycle in {} ms ({reason}: {message})",
        next.saturating_sub(d.now_ms())
    );
}

/// The spec's checks change (another port) while its guest is healthy: the guest is judged on
/// the new checks at the next cycle, not shown Passing, and Ready, on a port the spec no
/// longer names until the healthy guest's next check minutes later.
#[test]
fn changed_checks_are_checked_at_the_next_cycle() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let old = TcpListener::bind("127.0.0.1:0").expect("bind");
    let old_port = old.local_addr().unwrap().port();
    // Nothing listens on the new port.
    let new_port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().unwrap().port()
    };
    let health = |port: u16| {
        format!(
            "    health:\n      tcp: {{port: {port}}}\n      address: 127.0.0.1\n      \
             failures: 1\n"
        )
    };
    ws.commit_specs(&[(
        "web.yaml",
        spec("web-01", "pve1", "9000", &health(old_port)),
    )]);
    ws.run_once();
    let vmid = made_vmid(&mut pve);
    pve.set_vm(vmid, json!({"uptime": 3600}));
    let mut d = Daemon::new(&ws, vmid, 3600);
    d.cycle();
    assert_eq!(ws.condition("web-01", "Healthy").1, "Passing");

    ws.commit_specs(&[(
        "web.yaml",
        spec("web-01", "pve1", "9000", &health(new_port)),
    )]);
    let config = proxsync::config::Config::load(&ws.config()).expect("config");
    let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply)
        .expect("the specs of the commit");
    let mut specs = read.specs;
    proxsync::engine::check_spec_sites(&config, &mut specs);
    (d.d.specs, d.d.commit) = (specs, read.commit);
    d.later(&mut pve, 20, 0);
    d.cycle();
    let (_, reason, message) = ws.condition("web-01", "Healthy");
    assert!(
        !message.contains(&format!(":{old_port}")),
        "judged on a check the spec no longer asks ({reason}): {message}"
    );
    assert_ne!(reason, "Passing", "{message}");
}
