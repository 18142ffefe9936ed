//! The guests' health checks (`spec.forProvider.health`): each full cycle, the running guests
//! of the specs that ask for it are checked (the agent pinged through PVE, a TCP connection, an
//! HTTP `GET`), and what each found is kept (`model::health::GuestHealth`) for the `Healthy`
//! condition and `Ready`. A guest is checked again when due: at a full cycle at most every 4
//! minutes while it is healthy, every 15 s while it starts or fails, every minute while it is
//! unhealthy. A round is bounded: at most [`AT_ONCE`] guests at once, each check within its
//! `checkTimeout`, no guest started after [`ROUND_BUDGET`] (a guest started finishes, so what
//! it found is kept; the guests left over are checked first next time). Nothing here acts on a
//! guest: an unhealthy guest is reported, never restarted.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::execute::SiteCtx;
use crate::model::health::{Check, Failure, GuestHealth, Probe, Unwell, Verdict};
use crate::observe::{Power, SiteView};
use crate::pve::Pve;
use crate::pve::texts::Meaning;
use crate::spec::health::Health;
use crate::spec::{PowerState, Spec, SpecSet};
use crate::store::SpecRecord;

/// Guests checked at once: each holds at most one connection or one PVE request at a time.
pub(crate) const AT_ONCE: usize = 32;
/// The longest a round may take; what is not checked by then is checked first next time.
pub(crate) const ROUND_BUDGET: Duration = Duration::from_secs(20);
/// How often a healthy guest is checked at most: a full cycle checks it when this has passed,
/// and no cycle is run for it alone (the resync, 5 min by default, checks it).
const HEALTHY_EVERY_MS: u64 = 240_000;
/// How often a guest that starts or fails is checked.
const PENDING_EVERY_MS: u64 = 15_000;
/// How soon a guest first seen running (just created, started or restarted) is checked.
const FIRST_CHECK_MS: u64 = 5_000;
/// How often an unhealthy guest is checked, to see it recover.
const UNHEALTHY_EVERY_MS: u64 = 60_000;
/// Uptime is listed in whole seconds, from pvestatd's last update (every 10 s, later on a busy
/// node), and read at another instant each cycle: a start within this of the last one is the
/// same run.
const SAME_RUN_MS: u64 = 30_000;
/// The most of an HTTP answer read: its status line.
const STATUS_LINE_MAX: usize = 1024;

/// What the daemon keeps of the guests' checks between cycles: in memory only (a restart
/// checks afresh, each guest's `timeout` counted from its listed start).
#[derive(Debug, Default)]
pub(crate) struct HealthChecks {
    guests: HashMap<String, GuestHealth>,
    /// The address each spec's guest is checked at (not the spec's own), read from the guest
    /// once and again after a failure.
    addresses: HashMap<String, IpAddr>,
    /// When this daemon's actions started each spec's guest (unix ms, [`forget_started`]):
    /// the run began then at the earliest, whatever a listing not updated yet says.
    started: HashMap<String, u64>,
}

/// One guest to check this round (owned: each is checked in a task of its own).
struct Due {
    spec: String,
    kind: crate::guest::GuestKind,
    health: Health,
    node: String,
    vmid: u32,
    address: Option<IpAddr>,
}

impl HealthChecks {
    /// What the last checks found of `spec`'s guest, if it is checked.
    pub(crate) fn get(&self, spec: &str) -> Option<&GuestHealth> {
        self.guests.get(spec)
    }

    /// The judgement of each checked guest now, for the cycle's fingerprint: a change of
    /// verdict or of what a check found (not the time of a check) is a change of status.
    pub(crate) fn fingerprint(&self, specs: &SpecSet, now_ms: u64) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = crate::util::fnv::FnvHasher::default();
        for spec in &specs.specs {
            let (Some(health), Some(g)) =
                (spec.health.as_deref(), self.guests.get(spec.name.as_str()))
            else {
                continue;
            };
            spec.name.hash(&mut h);
            g.vmid.hash(&mut h);
            g.verdict(health, now_ms).hash(&mut h);
            for p in &g.probes {
                p.hash(&mut h);
            }
        }
        h.finish()
    }

    /// Forgets what the checks found of the guests the actions `results` started (a create's
    /// start, a start, a restart for a change: a `qmstart`/`vzstart` task in the attempt its
    /// record noted since `since_ms`): each is checked afresh with its whole `timeout`, and is
    /// not healthy until it passes. The listed uptime alone cannot tell a restart within
    /// [`SAME_RUN_MS`] of the last start from a stale listing.
    pub(crate) fn forget_started(
        &mut self,
        results: &[crate::execute::ActionResult],
        records: &BTreeMap<String, SpecRecord>,
        since_ms: u64,
    ) {
        for name in results.iter().filter_map(|r| r.action.spec()) {
            let started = (records.get(name))
                .and_then(|rec| rec.history.first())
                .filter(|h| h.at_ms >= since_ms)
                .is_some_and(|h| h.tasks.iter().any(|t| started_task(t)));
            if started {
                self.guests.remove(name);
                self.addresses.remove(name);
                self.started.insert(name.to_string(), since_ms);
            }
        }
    }

    /// When the guest of spec `name` listed as started at `listed_ms` began its run: no
    /// earlier than this daemon started it, while the listing (pvestatd's, updated every 10 s)
    /// still shows the run before.
    fn boot_of(&self, name: &str, listed_ms: u64) -> u64 {
        match self.started.get(name) {
            Some(&at) if listed_ms.saturating_add(SAME_RUN_MS) < at => at,
            _ => listed_ms,
        }
    }

    /// What the checks found of `spec`'s guest `vmid` in its current run, listed as started at
    /// `listed_ms` on a view taken this cycle (`fresh`); on a view of an earlier cycle (a site a
    /// push did not look at) its uptime is as old as the view, so the guest is matched by VMID
    /// alone.
    fn current(&self, name: &str, vmid: u32, listed_ms: u64, fresh: bool) -> Option<&GuestHealth> {
        let g = self.guests.get(name).filter(|g| g.vmid == vmid)?;
        (!fresh || same_run(g, vmid, self.boot_of(name, listed_ms))).then_some(g)
    }

    /// Each spec with `health` whose guest runs on `views`, with what the checks found of it in
    /// its current run (`None`: not checked in it yet). `fresh`: whether a site's view was
    /// taken this cycle.
    fn running<'a>(
        &'a self,
        specs: &'a SpecSet,
        views: &'a BTreeMap<String, SiteView>,
        records: &'a BTreeMap<String, SpecRecord>,
        now_ms: u64,
        fresh: impl Fn(&str) -> bool + 'a,
    ) -> impl Iterator<Item = (&'a Spec, &'a Health, Option<&'a GuestHealth>)> + 'a {
        specs.specs.iter().filter_map(move |s| {
            let h = s.health.as_deref()?;
            let (vmid, _, boot_ms) = running_guest(s, views, records, now_ms)?;
            let g = self.current(&s.name, vmid, boot_ms, fresh(&s.site));
            Some((s, h, g))
        })
    }

    /// The specs with `health` whose guest runs on `views` and has not passed its checks in
    /// its current run (not checked in it yet: just created, started or restarted), or is
    /// unhealthy: what the planner counts as not Ready.
    pub(crate) fn unwell(
        &self,
        specs: &SpecSet,
        views: &BTreeMap<String, SiteView>,
        records: &BTreeMap<String, SpecRecord>,
        now_ms: u64,
        fresh: impl Fn(&str) -> bool,
    ) -> BTreeMap<String, Unwell> {
        self.running(specs, views, records, now_ms, fresh)
            .filter_map(|(s, h, g)| {
                let unwell = match g {
                    Some(g) => g.verdict(h, now_ms).unwell()?,
                    None => Unwell::Pending,
                };
                Some((s.name.to_string(), unwell))
            })
            .collect()
    }

    /// When the next guest is due (unix ms) on `views` (the look after a cycle's actions): the
    /// daemon wakes for it. A running guest not checked in its current run (just created,
    /// started or restarted, or left over by a round out of time) is due in
    /// [`FIRST_CHECK_MS`]; a healthy one wakes nothing.
    pub(crate) fn next_due_ms(
        &self,
        specs: &SpecSet,
        views: &BTreeMap<String, SiteView>,
        records: &BTreeMap<String, SpecRecord>,
        now_ms: u64,
        fresh: impl Fn(&str) -> bool,
    ) -> Option<u64> {
        self.running(specs, views, records, now_ms, fresh)
            .filter_map(|(_, h, g)| match g.filter(|g| !g.probes.is_empty()) {
                None => Some(now_ms + FIRST_CHECK_MS),
                Some(g) => {
                    let (at, wake) = due_at(g, h, now_ms);
                    wake.then_some(at.max(now_ms))
                }
            })
            .min()
    }

    /// Checks the guests that are due, on the sites observed this cycle. Forgets the guests no
    /// longer checked (not running, gone, another VMID).
    pub(crate) async fn round<P: Pve>(
        &mut self,
        specs: &SpecSet,
        views: &BTreeMap<String, SiteView>,
        records: &BTreeMap<String, SpecRecord>,
        sites: &BTreeMap<String, Arc<SiteCtx<P>>>,
        now_ms: u64,
    ) {
        let mut due = self.due(specs, views, records, now_ms, |site| {
            sites.contains_key(site)
        });
        if due.is_empty() {
            return;
        }
        // The longest unchecked first: a round cut short by its budget is fair over cycles.
        due.sort_by(|a, b| (a.0, &a.2.spec).cmp(&(b.0, &b.2.spec)));
        let total = due.len();
        // The budget closes the round to guests not started yet; a guest started goes to the
        // end of its checks (each within its checkTimeout), so what it found is always kept.
        let slots = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
        let closed = Arc::new(AtomicBool::new(false));
        let mut tasks = tokio::task::JoinSet::new();
        for (_, site, d) in due {
            let (site, slots, closed) = (sites[site].clone(), slots.clone(), closed.clone());
            tasks.spawn(async move {
                let _slot = slots.acquire_owned().await;
                if closed.load(Ordering::SeqCst) {
                    return None;
                }
                let (probes, address) = check_guest(&site, &d).await;
                Some((d, probes, address))
            });
        }
        let started = std::time::Instant::now();
        let deadline = tokio::time::sleep(ROUND_BUDGET);
        tokio::pin!(deadline);
        let mut done = 0;
        loop {
            tokio::select! {
                next = tasks.join_next() => {
                    let Some(joined) = next else { break };
                    if let Ok(Some((d, probes, address))) = joined {
                        done += 1;
                        // Checked when its round ended: a long one is not due again at once.
                        let at_ms = now_ms + started.elapsed().as_millis() as u64;
                        self.keep(specs, d, probes, address, at_ms);
                    }
                }
                () = &mut deadline, if !closed.load(Ordering::SeqCst) => {
                    closed.store(true, Ordering::SeqCst);
                }
            }
        }
        if done < total {
            tracing::warn!(
                checked = done,
                left = total - done,
                "the health checks ran out of their round's time; the rest go first next cycle"
            );
        }
    }

    /// The guests due this round, with when each was last checked, and its site (those of
    /// `checkable` sites only); forgets the guests no longer checked (not running, gone,
    /// another VMID) and starts afresh those in another run.
    fn due<'s>(
        &mut self,
        specs: &'s SpecSet,
        views: &BTreeMap<String, SiteView>,
        records: &BTreeMap<String, SpecRecord>,
        now_ms: u64,
        checkable: impl Fn(&str) -> bool,
    ) -> Vec<(u64, &'s str, Due)> {
        let mut due: Vec<(u64, &str, Due)> = Vec::new();
        let mut checked = std::collections::HashSet::new();
        for spec in &specs.specs {
            let Some(health) = spec.health.as_deref() else {
                continue;
            };
            let Some((vmid, node, listed_ms)) = running_guest(spec, views, records, now_ms) else {
                continue;
            };
            checked.insert(spec.name.as_str());
            let boot_ms = self.boot_of(&spec.name, listed_ms);
            if boot_ms == listed_ms {
                // The listing shows the run this daemon started (or none was): it is the truth.
                self.started.remove(spec.name.as_str());
            }
            let g = self.guests.get(spec.name.as_str());
            if !g.is_some_and(|g| same_run(g, vmid, boot_ms)) {
                self.guests
                    .insert(spec.name.to_string(), GuestHealth::new(vmid, boot_ms));
                self.addresses.remove(spec.name.as_str());
            }
            let g = &self.guests[spec.name.as_str()];
            let (at, _) = due_at(g, health, now_ms);
            if (at <= now_ms || checked_other(g, health)) && checkable(&spec.site) {
                due.push((
                    g.checked_ms,
                    &spec.site,
                    Due {
                        spec: spec.name.to_string(),
                        kind: spec.kind(),
                        health: health.clone(),
                        node,
                        vmid,
                        address: health
                            .address
                            .or(self.addresses.get(spec.name.as_str()).copied()),
                    },
                ));
            }
        }
        self.guests
            .retain(|name, _| checked.contains(name.as_str()));
        self.addresses
            .retain(|name, _| checked.contains(name.as_str()));
        self.started
            .retain(|name, _| checked.contains(name.as_str()));
        due
    }

    /// Keeps what a guest's round found, and the address it was checked at when all passed.
    fn keep(
        &mut self,
        specs: &SpecSet,
        d: Due,
        probes: Vec<Probe>,
        address: Option<IpAddr>,
        now_ms: u64,
    ) {
        let failed = probes.iter().any(|p| p.failure.is_some());
        match address {
            Some(ip) if !failed && d.health.address.is_none() => {
                self.addresses.insert(d.spec.clone(), ip);
            }
            _ => {
                self.addresses.remove(&d.spec);
            }
        }
        let Some(g) = self.guests.get_mut(&d.spec) else {
            return;
        };
        let before = g.verdict(&d.health, now_ms);
        g.record(&d.health, probes, now_ms);
        if let Some(spec) = specs.specs.iter().find(|s| s.name == d.spec) {
            log_change(spec, g, before, &d.health, now_ms);
        }
    }
}

/// Whether a task (its UPID) started a guest.
fn started_task(upid: &str) -> bool {
    upid.parse::<crate::pve::Upid>().is_ok_and(|u| {
        matches!(
            u.kind.as_str(),
            "qmstart" | "vzstart" | "qmreboot" | "vzreboot" | "hastart"
        )
    })
}

/// Whether `g` is of the guest `vmid` in its run that began at `boot_ms`.
fn same_run(g: &GuestHealth, vmid: u32, boot_ms: u64) -> bool {
    g.vmid == vmid && g.boot_ms.abs_diff(boot_ms) <= SAME_RUN_MS
}

/// When `g` is due next (unix ms), and whether a cycle should run for it (a healthy guest
/// waits for a full cycle that runs anyway).
fn due_at(g: &GuestHealth, health: &Health, now_ms: u64) -> (u64, bool) {
    if g.probes.is_empty() {
        return (0, true);
    }
    let (every, wake) = match g.verdict(health, now_ms) {
        Verdict::Healthy => (HEALTHY_EVERY_MS, false),
        Verdict::Failing { .. } | Verdict::Starting { .. } => (PENDING_EVERY_MS, true),
        Verdict::Unhealthy { .. } => (UNHEALTHY_EVERY_MS, true),
    };
    (g.checked_ms.saturating_add(every), wake)
}

/// Whether `g`'s last round checked other than `health` asks (another port, path or address:
/// the spec changed since): it is due at once, not judged on checks the spec no longer names.
fn checked_other(g: &GuestHealth, health: &Health) -> bool {
    if g.probes.is_empty()
        || g.probes
            .iter()
            .any(|p| p.failure == Some(Failure::NoAddress))
    {
        return false;
    }
    let mut asked = Vec::new();
    if health.agent {
        asked.push((0u8, 0u16, ""));
    }
    if let Some(port) = health.tcp {
        asked.push((1, port, ""));
    }
    if let Some(http) = &health.http {
        asked.push((2, http.port, http.path.as_str()));
    }
    let probed: Vec<(u8, u16, &str)> = (g.probes.iter())
        .map(|p| match &p.check {
            Check::Agent => (0, 0, ""),
            Check::Tcp(addr) => (1, addr.port(), ""),
            Check::Http(addr, path) => (2, addr.port(), path.as_str()),
        })
        .collect();
    let moved = health.address.is_some_and(|ip| {
        g.probes
            .iter()
            .any(|p| matches!(&p.check, Check::Tcp(a) | Check::Http(a, _) if a.ip() != ip))
    });
    asked != probed || moved
}

/// The spec's guest when it runs as the spec asks: its VMID, node and when its run began.
fn running_guest(
    spec: &Spec,
    views: &BTreeMap<String, SiteView>,
    records: &BTreeMap<String, SpecRecord>,
    now_ms: u64,
) -> Option<(u32, String, u64)> {
    if spec.power_state != PowerState::Running || spec.template.is_some() {
        return None;
    }
    let rec = records.get(spec.name.as_str())?;
    let vmid = rec.vm.made_vmid()?;
    let view = views
        .get(spec.site.as_str())
        .filter(|v| v.error.is_none())?;
    let vm = view
        .vms
        .get(&vmid)
        .filter(|vm| vm.power == Power::Running)?;
    if vm.template || vm.kind != spec.kind() {
        return None;
    }
    let boot_ms = now_ms.saturating_sub(u64::from(vm.uptime_secs.0) * 1000);
    // A guarded change applied to the running guest (`changePolicy`) is judged from then on,
    // as a start would be: checks from before it say nothing of it.
    let boot_ms = boot_ms.max(rec.change_applied_ms(vmid).unwrap_or(0));
    Some((vmid, vm.node.to_string(), boot_ms))
}

/// Logs a guest whose verdict changed: the journal says what the status file says.
fn log_change(spec: &Spec, g: &GuestHealth, before: Verdict, health: &Health, now_ms: u64) {
    let now = g.verdict(health, now_ms);
    if std::mem::discriminant(&now) == std::mem::discriminant(&before) {
        return;
    }
    let text = crate::plan::ConditionText::Health {
        kind: spec.kind(),
        guest: g,
        verdict: now,
        health,
    };
    match now {
        Verdict::Unhealthy { .. } => tracing::warn!(spec = %spec.name, "{text}"),
        _ => tracing::info!(spec = %spec.name, "{text}"),
    }
}

/// One round of `d`'s checks, in the spec's order; the address `tcp` and `http` used.
async fn check_guest<P: Pve>(site: &SiteCtx<P>, d: &Due) -> (Vec<Probe>, Option<IpAddr>) {
    let limit = Duration::from_secs(u64::from(d.health.check_timeout_secs));
    let mut probes = Vec::new();
    if d.health.agent {
        let failure =
            match tokio::time::timeout(limit, site.client.agent_ping(&d.node, d.vmid)).await {
                Err(_) => Some(Failure::NoAnswer(d.health.check_timeout_secs)),
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(match e.meaning() {
                    Some(Meaning::NoAgent) => Failure::AgentNotConfigured,
                    Some(Meaning::AgentDown | Meaning::NotRunning) => Failure::AgentNotRunning,
                    _ => Failure::Pve(e.status().unwrap_or(0)),
                }),
            };
        probes.push(Probe {
            check: Check::Agent,
            failure,
        });
    }
    if !d.health.connects() {
        return (probes, None);
    }
    let address = match d.address {
        Some(ip) => Some(ip),
        None => guest_address(site, d, limit).await,
    };
    let Some(ip) = address else {
        probes.push(Probe {
            check: match &d.health.http {
                Some(http) if d.health.tcp.is_none() => Check::Http(
                    SocketAddr::new([0, 0, 0, 0].into(), http.port),
                    http.path.clone(),
                ),
                _ => Check::Tcp(SocketAddr::new(
                    [0, 0, 0, 0].into(),
                    d.health.tcp.unwrap_or_default(),
                )),
            },
            failure: Some(Failure::NoAddress),
        });
        return (probes, None);
    };
    if let Some(port) = d.health.tcp {
        let addr = SocketAddr::new(ip, port);
        probes.push(Probe {
            check: Check::Tcp(addr),
            failure: tcp(addr, limit, d.health.check_timeout_secs).await.err(),
        });
    }
    if let Some(http) = &d.health.http {
        let addr = SocketAddr::new(ip, http.port);
        let failure = match get_status(addr, &http.path, limit, d.health.check_timeout_secs).await {
            Ok(code) if d.health.http_passes(code) => None,
            Ok(code) => Some(Failure::Status(code)),
            Err(f) => Some(f),
        };
        probes.push(Probe {
            check: Check::Http(addr, http.path.clone()),
            failure,
        });
    }
    (probes, Some(ip))
}

/// The guest's first usable address, IPv4 first, as its agent (a container: its network
/// namespace) reports it.
async fn guest_address<P: Pve>(site: &SiteCtx<P>, d: &Due, limit: Duration) -> Option<IpAddr> {
    let ifaces = tokio::time::timeout(limit, site.client.guest_interfaces(&d.node, d.kind, d.vmid))
        .await
        .ok()?
        .ok()?;
    let mut ips: Vec<IpAddr> = crate::execute::guest_addresses(&ifaces)
        .iter()
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .map(|ip| ip.to_canonical())
        .filter(usable)
        .collect();
    ips.sort_by_key(|ip| ip.is_ipv6());
    ips.first().copied()
}

/// Whether a guest's reported address is one to connect to: not loopback, link-local,
/// unspecified, multicast or broadcast, an IPv4-mapped IPv6 address judged as its IPv4 one
/// (`::ffff:127.0.0.1` is the daemon's own machine).
fn usable(ip: &IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.octets()[0] == 0)
        }
        IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_unicast_link_local()
                || v6.is_unspecified()
                || v6.is_multicast())
        }
    }
}

/// A TCP connection to `addr`, closed at once.
async fn tcp(addr: SocketAddr, limit: Duration, limit_secs: u32) -> Result<(), Failure> {
    match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
        Err(_) => Err(Failure::NoAnswer(limit_secs)),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(connect_failure(&e)),
    }
}

fn connect_failure(e: &std::io::Error) -> Failure {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => Failure::Refused,
        K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable => Failure::Unreachable,
        K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof | K::BrokenPipe => {
            Failure::Reset
        }
        K::TimedOut => Failure::NoAnswer(0),
        _ => Failure::Connection,
    }
}

/// The status of `GET path` at `addr` (HTTP/1.1, `Connection: close`), read from the status
/// line alone; the whole exchange within `limit`.
async fn get_status(
    addr: SocketAddr,
    path: &str,
    limit: Duration,
    limit_secs: u32,
) -> Result<u16, Failure> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| connect_failure(&e))?;
        // The path is visible ASCII only (`spec::health`): it cannot end the request line.
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: proxsync/{}\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n",
            host_header(addr),
            env!("CARGO_PKG_VERSION")
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| connect_failure(&e))?;
        let mut line = Vec::with_capacity(64);
        let mut buf = [0u8; 256];
        while !line.contains(&b'\n') && line.len() < STATUS_LINE_MAX {
            let n = stream
                .read(&mut buf)
                .await
                .map_err(|e| connect_failure(&e))?;
            if n == 0 {
                break;
            }
            line.extend_from_slice(&buf[..n]);
        }
        status_of(&line)
    };
    match tokio::time::timeout(limit, exchange).await {
        Err(_) => Err(Failure::NoAnswer(limit_secs)),
        Ok(result) => result,
    }
}

/// `Host:` for an address: an IPv6 one in brackets.
fn host_header(addr: SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V4(ip) => format!("{ip}:{}", addr.port()),
        IpAddr::V6(ip) => format!("[{ip}]:{}", addr.port()),
    }
}

/// The status code of an HTTP status line (`HTTP/1.1 200 OK`); nothing else of it is read.
fn status_of(answer: &[u8]) -> Result<u16, Failure> {
    if answer.is_empty() {
        return Err(Failure::Reset);
    }
    let line = answer.split(|&b| b == b'\n').next().unwrap_or_default();
    // `HTTP/1.1 200` CRLF, without a reason phrase or the space before it, is a status line.
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|&b| b == b' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    if !version.starts_with(b"HTTP/1.") || code.len() != 3 || !code.iter().all(u8::is_ascii_digit) {
        return Err(Failure::NotHttp);
    }
    let code = code.iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
    if (100..=599).contains(&code) {
        Ok(code)
    } else {
        Err(Failure::NotHttp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_http_status_line_gives_a_status() {
        assert_eq!(status_of(b"HTTP/1.1 204 No Content\r\n"), Ok(204));
        assert_eq!(status_of(b"HTTP/1.0 503 \xff\xfe\r\nX: y"), Ok(503));
        assert_eq!(status_of(b"HTTP/1.1 200"), Ok(200));
        assert_eq!(status_of(b"HTTP/1.1 200\r\n"), Ok(200));
        assert_eq!(status_of(b"HTTP/1.1 404 \r\n"), Ok(404));
        for bad in [
            &b"SSH-2.0-OpenSSH_9.6\r\n"[..],
            b"HTTP/1.1 20 OK\r\n",
            b"HTTP/1.1 2000 OK\r\n",
            b"HTTP/1.1 099 OK\r\n",
            b"HTTP/2 200\r\n",
            b"\x16\x03\x01",
        ] {
            assert_eq!(status_of(bad), Err(Failure::NotHttp), "{bad:?}");
        }
        assert_eq!(status_of(b""), Err(Failure::Reset));
    }

    #[test]
    fn only_an_address_of_the_guest_s_network_is_usable() {
        for ok in ["192.0.2.10", "2001:db8::7", "::ffff:192.0.2.10", "10.0.0.1"] {
            assert!(usable(&ok.parse().unwrap()), "{ok}");
        }
        for bad in [
            "127.0.0.1",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:127.1.2.3",
            "::ffff:0.0.0.0",
            "::ffff:169.254.169.254",
            "::ffff:224.0.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "ff02::1",
            "fe80::1",
            "::",
        ] {
            assert!(!usable(&bad.parse().unwrap()), "{bad}");
        }
    }

    /// An HA-managed guest is started through the HA manager: PVE answers a start (and the
    /// start after a stop for a change, a container's reboot under HA) with a `hastart` task,
    /// which starts the guest as `qmstart`/`vzstart` do; its earlier answers are not its new run's.
    #[test]
    fn an_ha_start_is_a_start() {
        for kind in ["qmstart", "vzstart", "qmreboot", "vzreboot", "hastart"] {
            let upid =
                format!("UPID:pve1:000A1A2B:0B3C4C5D:67C2F0A0:{kind}:101:proxsync@pve!gitops:");
            assert!(started_task(&upid), "{kind}");
        }
        for kind in ["qmshutdown", "hastop", "qmconfig", "qmigrate"] {
            let upid =
                format!("UPID:pve1:000A1A2B:0B3C4C5D:67C2F0A0:{kind}:101:proxsync@pve!gitops:");
            assert!(!started_task(&upid), "{kind}");
        }
    }

    #[test]
    fn an_ipv6_host_is_bracketed() {
        assert_eq!(
            host_header("[2001:db8::1]:80".parse().unwrap()),
            "[2001:db8::1]:80"
        );
        assert_eq!(
            host_header("192.0.2.1:8080".parse().unwrap()),
            "192.0.2.1:8080"
        );
    }
}
