//! Health checks (`spec.forProvider.health`) against fakepve, whose harness answers an agent
//! ping in qemu-server's words (`assert_agent_available`: no agent configured, a VM not running,
//! an agent that does not answer), and real TCP and HTTP servers on 127.0.0.1 standing in for
//! the guest's services: `Ready` waits for the checks, an unhealthy guest is reported and never
//! restarted, a healthy one counts its failures before it is unhealthy, and recovers.

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use crate::common;
use common::Scenario;
use common::engine::{Workspace, next_seq, spec, writes_since};
use common::http::Http;

/// The VMID of the only VM the workspace's specs made.
fn made_vmid(pve: &mut common::FakePve) -> u32 {
    let owned = common::engine::owned_vms(pve);
    assert_eq!(owned.len(), 1, "{owned:?}");
    owned[0].0 as u32
}

/// A guest is Ready only once it passes its checks: not before its first check, not while its
/// agent is not configured (said in PVE's words); once it passes, Ready. A guest that never
/// passed within its timeout is Unhealthy, the refused connection named, and nothing is sent to
/// PVE for it: proxsync never restarts it.
#[test]
fn a_guest_is_ready_once_it_passes_and_an_unhealthy_one_is_only_reported() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    let health = format!(
        "    health:\n      agent: true\n      tcp: {{port: {port}}}\n      address: 127.0.0.1\n      \
         timeout: 10m\n"
    );
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", &health))]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "not all Ready while the guest is not checked: {out}");
    let vmid = made_vmid(&mut pve);
    assert_eq!(pve.vm(vmid)["status"], "running");
    let (status, reason, message) = ws.condition("web-01", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "HealthPending"),
        "{message}"
    );
    let (status, reason, _) = ws.condition("web-01", "Healthy");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("Unknown", "HealthPending")
    );

    // The VM has no agent in its config: qemu-server says so, and the guest has until its
    // timeout.
    let (ok, _) = ws.run_once();
    assert!(!ok);
    let (status, reason, message) = ws.condition("web-01", "Healthy");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("Unknown", "HealthPending"),
        "{message}"
    );
    assert!(
        message.contains("agent ping: the VM has no guest agent configured")
            && message.contains(&format!("tcp 127.0.0.1:{port} ok")),
        "{message}"
    );

    pve.set_vm(vmid, json!({"agent": {}}));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let (status, reason, message) = ws.condition("web-01", "Healthy");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Passing"),
        "{message}"
    );
    assert_eq!(ws.condition("web-01", "Ready").0, "True");

    // The service stops; the guest started an hour ago (past its timeout) and this process
    // never saw it pass.
    drop(listener);
    pve.set_vm(vmid, json!({"uptime": 3600}));
    let before = next_seq(&mut pve);
    let (ok, _) = ws.run_once();
    assert!(!ok);
    let (status, reason, message) = ws.condition("web-01", "Healthy");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unhealthy"),
        "{message}"
    );
    assert!(
        message.contains(&format!("tcp 127.0.0.1:{port}: connection refused"))
            && message.contains("proxsync does not restart it"),
        "{message}"
    );
    let (status, reason, _) = ws.condition("web-01", "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Unhealthy"));
    // The agent ping is a POST that changes nothing.
    let writes: Vec<String> = (writes_since(&mut pve, before).into_iter())
        .filter(|w| !w.ends_with("/agent/ping"))
        .collect();
    assert_eq!(writes, Vec::<String>::new(), "only reported");
    assert_eq!(pve.vm(vmid)["status"], "running");
}

/// Without `address`, tcp and http go to the first address the guest's agent reports (its
/// loopback and link-local ones skipped); a VM whose agent reports none fails with that said.
#[test]
fn the_address_is_the_guest_agent_s() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let health = "    health:\n      tcp: {port: 22}\n      checkTimeout: 1s\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", health))]);
    ws.run_once();
    let vmid = made_vmid(&mut pve);
    pve.set_vm(vmid, json!({"agent": {"interfaces": []}}));
    ws.run_once();
    let (_, _, message) = ws.condition("web-01", "Healthy");
    assert!(
        message.contains("the guest reports no address to connect to; name one in health.address"),
        "{message}"
    );
    let interfaces = json!([
        {"name": "lo", "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4"}]},
        {"name": "eth0", "ip-addresses": [
            {"ip-address": "fe80::1", "ip-address-type": "ipv6"},
            {"ip-address": "<b>x</b>", "ip-address-type": "ipv4"},
            {"ip-address": "2001:db8::7", "ip-address-type": "ipv6"},
            {"ip-address": "192.0.2.77", "ip-address-type": "ipv4"}
        ]}
    ]);
    pve.set_vm(vmid, json!({"agent": {"interfaces": interfaces}}));
    ws.run_once();
    let (_, _, message) = ws.condition("web-01", "Healthy");
    assert!(message.contains("tcp 192.0.2.77:22: "), "{message}");
    assert!(!message.contains("<b>"), "{message}");
}

/// The daemon's view over cycles: an HTTP check that passes, then fails fewer times than
/// `failures` (still Healthy, Failing, Ready; the daemon told to come back in 15 s), then enough
/// to be Unhealthy (Ready False), then passes again. What the guest's server says in its status
/// line is never kept: only the code. A cycle with nothing due and nothing changed keeps the last
/// plan.
#[test]
fn the_daemon_counts_failures_before_unhealthy_and_sees_a_recovery() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let http = Http::start("HTTP/1.1 204 No Content");
    let health = format!(
        "    health:\n      http: {{port: {}, path: /healthz, expect: 204}}\n      address: 127.0.0.1\n      \
         failures: 2\n",
        http.port
    );
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", &health))]);
    ws.run_once();
    let vmid = made_vmid(&mut pve);
    pve.set_vm(vmid, json!({"uptime": 600}));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut d = common::engine::in_process(&ws);
    let offset = Arc::new(AtomicU64::new(0));
    let clock_offset = offset.clone();
    d.engine
        .set_clock(proxsync::util::clock::Clock::from_fn(move || {
            proxsync::util::clock::now_ms() + clock_offset.load(Ordering::SeqCst)
        }));
    // Moves the engine's clock and the guest's uptime on together, as they move on a cluster.
    let later = |pve: &mut common::FakePve, secs: u64| {
        let now = offset.fetch_add(secs * 1000, Ordering::SeqCst) / 1000 + secs;
        pve.set_vm(vmid, json!({"uptime": 600 + now}));
    };
    let cycle = |d: &mut common::engine::InProcess| {
        rt.block_on(d.engine.reconcile(&d.specs, Some(&d.commit)))
            .expect("a cycle")
    };
    cycle(&mut d);
    assert_eq!(ws.condition("web-01", "Healthy").1, "Passing");
    assert_eq!(ws.condition("web-01", "Ready").0, "True");

    http.answer("HTTP/1.1 500 <script>alert(1)</script>\u{1b}[31m");
    later(&mut pve, 240);
    let report = cycle(&mut d);
    let (status, reason, message) = ws.condition("web-01", "Healthy");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Failing"),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "http GET 127.0.0.1:{}/healthz: answered HTTP 500, expected 204",
            http.port
        )),
        "{message}"
    );
    assert!(
        !message.contains("script") && !message.contains('\u{1b}'),
        "{message}"
    );
    assert_eq!(
        ws.condition("web-01", "Ready").0,
        "True",
        "under its failures"
    );
    let next = report.next_attempt_ms.expect("a cycle for the next check");
    let now = proxsync::util::clock::now_ms() + offset.load(Ordering::SeqCst);
    assert!(next <= now + 15_000 && next > now, "{next} vs {now}");

    // Not due yet: nothing checked, nothing changed, the last plan kept.
    let report = cycle(&mut d);
    assert!(report.unchanged, "nothing due, nothing changed");

    later(&mut pve, 16);
    cycle(&mut d);
    let (status, reason, message) = ws.condition("web-01", "Healthy");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unhealthy"),
        "{message}"
    );
    assert!(
        message.contains("after 2 failed round(s) of checks in a row"),
        "{message}"
    );
    let (status, reason, _) = ws.condition("web-01", "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Unhealthy"));

    http.answer("HTTP/1.1 204 No Content");
    later(&mut pve, 61);
    cycle(&mut d);
    assert_eq!(ws.condition("web-01", "Healthy").1, "Passing");
    assert_eq!(ws.condition("web-01", "Ready").0, "True");
    assert_eq!(pve.vm(vmid)["status"], "running");
}

/// A guest the daemon's cycle creates is checked within seconds, not at the next resync: the
/// cycle asks to be woken for its first check, which passes, and the guest is Ready.
#[test]
fn a_guest_the_daemon_creates_is_checked_within_seconds() {
    let mut pve = Scenario::default().start();
    let ws = Workspace::new(&pve);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    let health = format!("    health:\n      tcp: {{port: {port}}}\n      address: 127.0.0.1\n");
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", &health))]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut d = common::engine::in_process(&ws);
    let before = proxsync::util::clock::now_ms();
    let report = rt
        .block_on(d.engine.reconcile(&d.specs, Some(&d.commit)))
        .expect("a cycle");
    made_vmid(&mut pve);
    let next = report.next_attempt_ms.expect("woken for the first check");
    assert!(
        next > before && next <= proxsync::util::clock::now_ms() + 5_000,
        "{next}"
    );
    let (status, reason, message) = ws.condition("web-01", "Healthy");
    assert_eq!(
        (status.as_str(), reason.as_str(), message.as_str()),
        ("Unknown", "HealthPending", "the VM runs; not checked yet")
    );
    rt.block_on(d.engine.reconcile(&d.specs, Some(&d.commit)))
        .expect("a cycle");
    assert_eq!(ws.condition("web-01", "Healthy").1, "Passing");
    assert_eq!(ws.condition("web-01", "Ready").0, "True");
}

/// A container is checked at the address of its network namespace (pve-container's
/// `.../lxc/{vmid}/interfaces`), its loopback skipped; a check it passes makes it Ready.
#[test]
fn a_container_is_checked_at_its_own_address() {
    let mut pve = Scenario::default()
        .file(
            "local",
            "debian-12-standard_12.7-1_amd64.tar.zst",
            126_000_000,
            "vztmpl",
        )
        .start();
    let ws = Workspace::new(&pve);
    let ct = |health: &str| {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: dns\nspec:\n  \
             forProvider:\n    site: lab\n    node: pve1\n    template: \
             local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\n    networks:\n      - {{name: \
             eth0, bridge: vmbr0, ip: 192.0.2.55/24, gateway: 192.0.2.1}}\n    health:\n{health}"
        )
    };
    ws.commit_specs(&[(
        "dns.yaml",
        ct("      tcp: {port: 53}\n      checkTimeout: 1s\n"),
    )]);
    ws.run_once();
    assert_eq!(pve.cts().len(), 1, "the container is made");
    ws.run_once();
    let (_, _, message) = ws.condition("dns", "Healthy");
    assert!(message.starts_with("container "), "{message}");
    assert!(message.contains("tcp 192.0.2.55:53: "), "{message}");
    // A service the daemon reaches, at the address the spec names.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    ws.commit_specs(&[(
        "dns.yaml",
        ct(&format!(
            "      tcp: {{port: {port}}}\n      address: 127.0.0.1\n"
        )),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(ws.condition("dns", "Healthy").1, "Passing");
}

/// A set of ten whose change needs a restart rolls two at a time and waits for health: the next
/// two go only once the two before pass their checks; a member that does not come back (its
/// agent never answers within `timeout`) stops the roll, and the members left say which.
#[test]
fn a_set_rolls_two_at_a_time_on_health_and_stops_at_a_member_that_does_not_come_back() {
    let mut pve = Scenario::default().start();
    // Two reboots a cycle (the default is one per site): maxUnavailable is what holds the roll.
    let ws = Workspace::with_extra(&pve, "[reconcile]\nmax_parallel_reboots = 2\n");
    let set = |memory: &str| {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata:\n  name: web\nspec:\n  \
             replicas: 10\n  maxUnavailable: 2\n  namePattern: \"web-{{index:02}}\"\n  \
             template:\n    forProvider:\n      site: lab\n      node: pve1\n      image: \
             \"9000\"\n      cpu: 1\n      memory: {memory}\n      disk: 8Gi\n      \
             rebootPolicy: IfNeeded\n      health: {{agent: true, timeout: 10s, checkTimeout: \
             1s}}\n"
        )
    };
    ws.commit_specs(&[("web.yaml", set("1Gi"))]);
    ws.run_once();
    let vmids: std::collections::BTreeMap<String, u32> = common::engine::owned_vms(&mut pve)
        .into_iter()
        .map(|(vmid, name)| (name, vmid as u32))
        .collect();
    assert_eq!(vmids.len(), 10, "{vmids:?}");
    for vmid in vmids.values() {
        pve.set_vm(*vmid, json!({"agent": {}}));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut d = common::engine::in_process(&ws);
    let offset = Arc::new(AtomicU64::new(0));
    let clock_offset = offset.clone();
    d.engine
        .set_clock(proxsync::util::clock::Clock::from_fn(move || {
            proxsync::util::clock::now_ms() + clock_offset.load(Ordering::SeqCst)
        }));
    let cycle = |d: &mut common::engine::InProcess| {
        rt.block_on(d.engine.reconcile(&d.specs, Some(&d.commit)))
            .expect("a cycle");
    };
    cycle(&mut d);
    assert_eq!(ws.condition("web-10", "Ready").0, "True");

    // The change: each member's memory goes pending, and rebootPolicy restarts it.
    ws.commit_specs(&[("web.yaml", set("2Gi"))]);
    drop(d);
    let mut d = common::engine::in_process(&ws);
    d.engine.set_clock(proxsync::util::clock::Clock::from_fn({
        let offset = offset.clone();
        move || proxsync::util::clock::now_ms() + offset.load(Ordering::SeqCst)
    }));
    let memory_of = |pve: &mut common::FakePve, name: &str| {
        let vm = pve.vm(vmids[name]);
        vm["config"]["memory"]
            .to_string()
            .trim_matches('"')
            .to_string()
    };
    let rolled = |pve: &mut common::FakePve| -> Vec<String> {
        (vmids.keys())
            .filter(|n| memory_of(pve, n) == "2048")
            .cloned()
            .collect()
    };
    cycle(&mut d);
    assert_eq!(
        rolled(&mut pve),
        ["web-01", "web-02"],
        "two, then a wait for their health"
    );
    cycle(&mut d);
    assert_eq!(
        rolled(&mut pve),
        ["web-01", "web-02", "web-03", "web-04"],
        "the two before passed"
    );
    // web-03 does not come back: its agent never answers.
    pve.set_vm(vmids["web-03"], json!({"agent": null}));
    cycle(&mut d);
    assert_eq!(
        rolled(&mut pve),
        ["web-01", "web-02", "web-03", "web-04", "web-05"],
        "web-03 still within its timeout counts as down: one more"
    );
    offset.fetch_add(11_000, Ordering::SeqCst);
    cycle(&mut d);
    cycle(&mut d);
    assert_eq!(
        rolled(&mut pve),
        ["web-01", "web-02", "web-03", "web-04", "web-05"],
        "stopped at web-03"
    );
    let (status, reason, message) = ws.condition("web-03", "Healthy");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unhealthy"),
        "{message}"
    );
    let (_, reason, message) = ws.condition("web-06", "Ready");
    assert_eq!(reason, "RollingOut", "{message}");
    assert!(
        message.contains("roll stopped at member web-03"),
        "{message}"
    );
    // web-03 comes back: the roll goes on, two at a time.
    pve.set_vm(vmids["web-03"], json!({"agent": {}}));
    offset.fetch_add(61_000, Ordering::SeqCst);
    cycle(&mut d);
    assert_eq!(ws.condition("web-03", "Healthy").1, "Passing");
    assert_eq!(rolled(&mut pve).len(), 7, "{:?}", rolled(&mut pve));
}
