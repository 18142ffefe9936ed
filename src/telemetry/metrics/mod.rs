//! Prometheus metrics: what the daemon counts and the OpenMetrics text a scrape gets
//! (`prometheus-client` writes it; `server` serves it on `[metrics] listen`).
//!
//! [`Metrics`] is a cheap handle (an `Option<Arc<_>>`): with metrics off it is `None` and
//! every record call is one branch. Labels are bounded by construction: site names and the
//! install id come from the config, node names from the site's cluster, methods, endpoints,
//! task types, outcomes, conditions and reasons from fixed sets in proxsync's own code (an endpoint is the path with its node,
//! VMID, UPID, storage and volume replaced by placeholders; a task type PVE sends that is not
//! known is `other`). No spec name, VMID or secret is ever a label or a value.

mod server;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::plan::OrphanDisposition;
use crate::report::CycleReport;
use crate::status::Reason;

pub(crate) use server::{Server, serve};

/// Seconds a reconcile cycle may take: an idle one is milliseconds, one waiting for tasks up
/// to `engine::TASK_WAIT` (10 min) and beyond.
const CYCLE_BUCKETS: [f64; 13] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 180.0, 600.0, 1800.0,
];
/// Seconds one PVE API request may take (a request times out after `request_timeout`).
const REQUEST_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The task types proxsync starts (PVE's UPID `type` field: a disk resize is `resize`, an
/// upload `imgcopy`, a volume delete `imgdel`; an HA-managed VM's start, stop and migration
/// `hastart`, `hastop`, `hamigrate`); any other is counted as `other`.
const TASK_TYPES: [&str; 25] = [
    "qmcreate",
    "qmclone",
    "qmtemplate",
    "qmconfig",
    "resize",
    "qmstart",
    "qmshutdown",
    "qmstop",
    "qmreboot",
    "qmigrate",
    "hastart",
    "hastop",
    "hamigrate",
    "qmdestroy",
    "imgcopy",
    "imgdel",
    "download",
    // A container's (pve-container's `pct` tasks).
    "vzcreate",
    "vzclone",
    "vzstart",
    "vzshutdown",
    "vzstop",
    "vzreboot",
    "vzdestroy",
    "vzmigrate",
];

/// The metrics of one daemon. Clone freely; `Metrics::default()` is off.
#[derive(Clone, Default)]
pub(crate) struct Metrics(Option<Arc<Registered>>);

/// The metrics of one site's API client (see [`Metrics::for_site`]).
#[derive(Clone, Default)]
pub(crate) struct SiteMetrics(Option<(Arc<Registered>, Arc<str>)>);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    condition: &'static str,
    status: &'static str,
    reason: Reason,
}

impl EncodeLabelValue for Reason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        self.as_str().encode(encoder)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommitLabels {
    commit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SiteLabels {
    site: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    site: Arc<str>,
    method: &'static str,
    endpoint: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    site: Arc<str>,
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    site: Arc<str>,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    site: Arc<str>,
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NotifyLabels {
    target: String,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NotifyResultLabels {
    target: String,
    r#type: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    receiver: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OrphanLabels {
    site: Arc<str>,
    disposition: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The registry and a handle on each metric in it.
struct Registered {
    registry: Registry,
    /// Held while a cycle's gauges are replaced and while a scrape encodes: a scrape sees one
    /// cycle's numbers, never half of two.
    cycle_lock: Mutex<()>,
    specs: Family<ConditionLabels, Gauge>,
    specs_backing_off: Gauge,
    cycles: Family<OutcomeLabels, Counter>,
    cycle_duration: Histogram,
    started: FloatGauge,
    last_success: FloatGauge,
    applied_commit: Family<CommitLabels, Gauge>,
    requests: Family<RequestLabels, Counter>,
    request_duration: HistogramFamily<LatencyLabels>,
    tasks_started: Family<TaskLabels, Counter>,
    tasks_failed: Family<TaskLabels, Counter>,
    parallel_limit: Family<NodeLabels, Gauge>,
    orphans: Family<OrphanLabels, Gauge>,
    valve_trips: Counter,
    valve_tripped: Gauge,
    site_up: Family<SiteLabels, Gauge>,
    site_quorate: Family<SiteLabels, Gauge>,
    site_nodes: Family<SiteLabels, Gauge>,
    site_nodes_online: Family<SiteLabels, Gauge>,
    notify_messages: Family<NotifyResultLabels, Gauge>,
    notify_failing: Family<NotifyLabels, Gauge>,
    webhooks: Family<WebhookLabels, Counter>,
}

impl Metrics {
    /// Metrics that record nothing (no `[metrics] listen`, `run --once`, `plan`).
    pub(crate) fn off() -> Metrics {
        Metrics(None)
    }

    /// A registry of every proxsync metric, for install `install_id`.
    pub(crate) fn new(install_id: &str) -> Metrics {
        Metrics(Some(Arc::new(Registered::new(install_id))))
    }

    #[cfg(test)]
    pub(crate) fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Records the `[[notify]]` targets' counts (`Notifier::stats`), replacing the last ones.
    pub(crate) fn notify_targets(&self, stats: &[crate::report::TargetStats]) {
        let Some(r) = &self.0 else { return };
        let _scrape = r.cycle_lock.lock().unwrap_or_else(|e| e.into_inner());
        r.notify_messages.clear();
        r.notify_failing.clear();
        for t in stats {
            for (result, n) in [
                ("sent", t.sent),
                ("failed", t.failures),
                ("dropped", t.dropped),
            ] {
                let labels = NotifyResultLabels {
                    target: t.name.clone(),
                    r#type: t.kind,
                    result,
                };
                r.notify_messages.get_or_create(&labels).set(n as i64);
            }
            let labels = NotifyLabels {
                target: t.name.clone(),
                r#type: t.kind,
            };
            r.notify_failing
                .get_or_create(&labels)
                .set(i64::from(t.failing_since.is_some()));
        }
    }

    /// Counts a request to a webhook receiver: `receiver` a `[[receiver]] name` (or empty),
    /// `outcome` one of the fixed set in `shell::web`.
    pub(crate) fn webhook(&self, receiver: &str, outcome: &'static str) {
        let Some(r) = &self.0 else { return };
        r.webhooks
            .get_or_create(&WebhookLabels {
                receiver: receiver.to_string(),
                outcome,
            })
            .inc();
    }

    /// The handle a site's API client counts its requests and tasks with.
    pub(crate) fn for_site(&self, site: &str) -> SiteMetrics {
        SiteMetrics(self.0.as_ref().map(|r| (r.clone(), Arc::from(site))))
    }

    /// [`Metrics::for_site`] as the meter a site's client holds (the engine's `MeterFor`).
    pub(crate) fn meter(&self, site: &str) -> Arc<dyn crate::pve::Meter> {
        Arc::new(self.for_site(site))
    }

    /// Records a finished reconcile cycle: `report` with the commit it applied, or `None` when
    /// the cycle failed. The gauges (specs, orphans, sites) are replaced as a whole.
    pub(crate) fn cycle_finished(&self, report: Option<(&CycleReport, &str)>, took: Duration) {
        let Some(r) = &self.0 else { return };
        r.cycle_duration.observe(took.as_secs_f64());
        let outcome = if report.is_some() { "success" } else { "error" };
        r.cycles.get_or_create(&OutcomeLabels { outcome }).inc();
        let Some((report, commit)) = report else {
            return;
        };
        let _scrape = r.cycle_lock.lock().unwrap_or_else(|e| e.into_inner());
        r.last_success
            .set(unix_seconds(crate::util::clock::system_now()));
        r.applied_commit.clear();
        r.applied_commit
            .get_or_create(&CommitLabels {
                commit: commit
                    .chars()
                    .filter(char::is_ascii_hexdigit)
                    .take(64)
                    .collect(),
            })
            .set(1);
        r.specs.clear();
        for ((condition, status, reason), n) in &report.conditions {
            let labels = ConditionLabels {
                condition,
                status,
                reason: *reason,
            };
            r.specs.get_or_create(&labels).set(*n as i64);
        }
        r.specs_backing_off.set(report.backing_off as i64);
        r.record_orphans(report);
        if !report.plan.refused.is_empty() {
            r.valve_trips.inc();
        }
        r.valve_tripped
            .set(i64::from(!report.plan.refused.is_empty()));
        r.record_sites(report);
    }

    /// The OpenMetrics text of every metric (ends with `# EOF`).
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        if let Some(r) = &self.0 {
            let _cycle = r.cycle_lock.lock().unwrap_or_else(|e| e.into_inner());
            // Writing to a String cannot fail.
            let _ = prometheus_client::encoding::text::encode(&mut out, &r.registry);
        }
        out
    }
}

/// The client's counts ([`crate::pve::Meter`]) go to this site's series.
impl crate::pve::Meter for SiteMetrics {
    fn request(&self, method: &str, path: &str, status: Option<u16>, took: Duration) {
        SiteMetrics::request(self, method, path, status, took)
    }
    fn task_started(&self, kind: &str) {
        SiteMetrics::task_started(self, kind)
    }
    fn task_failed(&self, kind: &str) {
        SiteMetrics::task_failed(self, kind)
    }
    fn parallel_limit(&self, node: &str, limit: u32) {
        SiteMetrics::parallel_limit(self, node, limit)
    }
}

impl SiteMetrics {
    /// Counts one HTTP exchange with PVE: `status` is `None` when no answer came (connect,
    /// TLS, timeout).
    pub(crate) fn request(&self, method: &str, path: &str, status: Option<u16>, took: Duration) {
        let Some((r, site)) = &self.0 else { return };
        let method = method_label(method);
        let labels = RequestLabels {
            site: site.clone(),
            method,
            endpoint: endpoint(path),
            outcome: outcome(status),
        };
        r.requests.get_or_create(&labels).inc();
        r.request_duration
            .get_or_create(&LatencyLabels {
                site: site.clone(),
                method,
            })
            .observe(took.as_secs_f64());
    }

    /// Counts a PVE task started (its UPID came back), by type.
    pub(crate) fn task_started(&self, kind: &str) {
        if let Some((r, site)) = &self.0 {
            r.tasks_started
                .get_or_create(&task_labels(site, kind))
                .inc();
        }
    }

    /// Counts a PVE task that stopped with an error, by type.
    pub(crate) fn task_failed(&self, kind: &str) {
        if let Some((r, site)) = &self.0 {
            r.tasks_failed.get_or_create(&task_labels(site, kind)).inc();
        }
    }

    /// Sets how many actions may run at once on `node` (a cluster node of this site: bounded).
    pub(crate) fn parallel_limit(&self, node: &str, limit: u32) {
        if let Some((r, site)) = &self.0
            && !node.is_empty()
        {
            let labels = NodeLabels {
                site: site.clone(),
                node: node.to_string(),
            };
            r.parallel_limit
                .get_or_create(&labels)
                .set(i64::from(limit));
        }
    }
}

impl Registered {
    // Long because: one registration per metric, each with its help text, in exposition order.
    fn new(install_id: &str) -> Registered {
        let mut registry = Registry::with_prefix("proxsync");
        registry.register(
            "build",
            "The running proxsync: its version and install id",
            Info::new(vec![
                ("version", env!("CARGO_PKG_VERSION").to_string()),
                ("install", install_id.to_string()),
            ]),
        );
        let m = Registered {
            registry: Registry::default(),
            cycle_lock: Mutex::new(()),
            specs: Family::default(),
            specs_backing_off: Gauge::default(),
            cycles: Family::default(),
            cycle_duration: Histogram::new(CYCLE_BUCKETS),
            started: FloatGauge::default(),
            last_success: FloatGauge::default(),
            applied_commit: Family::default(),
            requests: Family::default(),
            request_duration: Family::new_with_constructor(|| Histogram::new(REQUEST_BUCKETS)),
            tasks_started: Family::default(),
            tasks_failed: Family::default(),
            parallel_limit: Family::default(),
            orphans: Family::default(),
            valve_trips: Counter::default(),
            valve_tripped: Gauge::default(),
            site_up: Family::default(),
            site_quorate: Family::default(),
            site_nodes: Family::default(),
            site_nodes_online: Family::default(),
            notify_messages: Family::default(),
            notify_failing: Family::default(),
            webhooks: Family::default(),
        };
        let r = &mut registry;
        r.register(
            "specs",
            "Specs by condition, status and reason, as the status files say after the last successful cycle",
            m.specs.clone(),
        );
        r.register(
            "specs_backing_off",
            "Specs waiting for their next attempt after a failure",
            m.specs_backing_off.clone(),
        );
        r.register(
            "reconcile_cycles",
            "Reconcile cycles run, by outcome (success, error)",
            m.cycles.clone(),
        );
        // Histograms carry their unit in the name only, without a `# UNIT` line: the spec allows
        // one, but openmetrics-parser (tests/it/features/metrics.rs) refuses it on a histogram.
        r.register(
            "reconcile_cycle_duration_seconds",
            "How long reconcile cycles took, waits for PVE tasks included",
            m.cycle_duration.clone(),
        );
        m.started
            .set(unix_seconds(crate::util::clock::system_now()));
        r.register_with_unit(
            "start_time",
            "When this daemon started (unix time)",
            Unit::Seconds,
            m.started.clone(),
        );
        r.register_with_unit(
            "last_successful_cycle_timestamp",
            "When the last successful cycle ended (unix time; 0: none yet)",
            Unit::Seconds,
            m.last_success.clone(),
        );
        r.register(
            "applied_commit",
            "1 for the source commit the last successful cycle applied",
            m.applied_commit.clone(),
        );
        r.register(
            "pve_requests",
            "Proxmox VE API requests by site, method, endpoint and outcome",
            m.requests.clone(),
        );
        r.register(
            "pve_request_duration_seconds",
            "Proxmox VE API request latency by site and method",
            m.request_duration.clone(),
        );
        r.register(
            "pve_tasks_started",
            "Proxmox VE tasks started, by site and type",
            m.tasks_started.clone(),
        );
        r.register(
            "pve_tasks_failed",
            "Proxmox VE tasks that stopped with an error, by site and type",
            m.tasks_failed.clone(),
        );
        r.register(
            "parallel_limit",
            "Actions proxsync may run at once on the node now (adaptive up to max_parallel_per_node, \
             or that number when fixed), by site and node, once proxsync has learnt something there",
            m.parallel_limit.clone(),
        );
        r.register(
            "orphans",
            "VMs with this install's tag that no spec claims, by site and disposition",
            m.orphans.clone(),
        );
        r.register(
            "delete_valve_trips",
            "Cycles in which a safety valve refused every delete and release",
            m.valve_trips.clone(),
        );
        r.register(
            "delete_valve_tripped",
            "1 when a safety valve refused the deletes of the last successful cycle",
            m.valve_tripped.clone(),
        );
        r.register(
            "site_up",
            "1 when the site's API answered the last cycle's observation",
            m.site_up.clone(),
        );
        r.register(
            "site_quorate",
            "1 when the site's cluster had quorum at the last cycle",
            m.site_quorate.clone(),
        );
        r.register(
            "site_nodes",
            "Nodes of the site's cluster at the last cycle",
            m.site_nodes.clone(),
        );
        r.register(
            "site_nodes_online",
            "Nodes of the site's cluster online at the last cycle",
            m.site_nodes_online.clone(),
        );
        r.register(
            "notify_messages",
            "Messages per [[notify]] target since the targets were (re)started (a reload restarts \
             them), by result: sent, failed (given up), dropped (a full queue)",
            m.notify_messages.clone(),
        );
        r.register(
            "notify_target_failing",
            "1 while a [[notify]] target's last message could not be delivered",
            m.notify_failing.clone(),
        );
        r.register(
            "webhook_requests",
            "Requests to the webhook receivers ([[receiver]]), by receiver (empty for a name no \
             receiver has) and outcome: accepted (a fetch now), coalesced (a fetch was pending), \
             ping, ignored_event, ignored_branch, unauthorized, bad_request, too_large, timeout, \
             method_not_allowed, not_found, unavailable",
            m.webhooks.clone(),
        );
        Registered { registry, ..m }
    }

    fn record_orphans(&self, report: &CycleReport) {
        let plan = report.after.as_ref().unwrap_or(&report.plan);
        let mut counts: BTreeMap<(&str, &'static str), i64> = BTreeMap::new();
        for o in &plan.orphans {
            *counts
                .entry((o.site.as_str(), disposition(&o.disposition)))
                .or_default() += 1;
        }
        self.orphans.clear();
        for ((site, disposition), n) in counts {
            let labels = OrphanLabels {
                site: Arc::from(site),
                disposition,
            };
            self.orphans.get_or_create(&labels).set(n);
        }
    }

    fn record_sites(&self, report: &CycleReport) {
        for family in [
            &self.site_up,
            &self.site_quorate,
            &self.site_nodes,
            &self.site_nodes_online,
        ] {
            family.clear();
        }
        for site in &report.site_health {
            let labels = SiteLabels {
                site: Arc::from(site.name.as_str()),
            };
            self.site_up
                .get_or_create(&labels)
                .set(i64::from(site.reachable));
            self.site_quorate
                .get_or_create(&labels)
                .set(i64::from(site.quorate));
            let online = site.nodes_online.len();
            self.site_nodes
                .get_or_create(&labels)
                .set((online + site.nodes_offline.len()) as i64);
            self.site_nodes_online
                .get_or_create(&labels)
                .set(online as i64);
        }
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn task_labels(site: &Arc<str>, kind: &str) -> TaskLabels {
    TaskLabels {
        site: site.clone(),
        r#type: TASK_TYPES
            .iter()
            .find(|t| **t == kind)
            .copied()
            .unwrap_or("other"),
    }
}

fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        _ => "other",
    }
}

/// What an exchange came to: PVE's status class, or no answer at all.
fn outcome(status: Option<u16>) -> &'static str {
    match status {
        None => "transport_error",
        Some(200..=299) => "success",
        Some(400..=499) => "client_error",
        Some(500..=599) => "server_error",
        Some(_) => "other",
    }
}

fn disposition(d: &OrphanDisposition) -> &'static str {
    match d {
        OrphanDisposition::Reported => "reported",
        OrphanDisposition::ForeignClaim { .. } => "foreign_claim",
        OrphanDisposition::Template { .. } => "template",
        OrphanDisposition::Deleting => "deleting",
        OrphanDisposition::DeleteAfter { .. } => "delete_after_grace",
        OrphanDisposition::Refused => "refused",
        OrphanDisposition::SiteMoved { .. } => "site_moved",
    }
}

/// A request path as a bounded label: the segment after `nodes`, `qemu`, `tasks`, `storage`
/// and `content` is a value (node, VMID, UPID, storage, volume) and becomes a placeholder;
/// any other segment that is not a plain lowercase word does too.
fn endpoint(path: &str) -> String {
    let mut out = String::new();
    let mut previous = "";
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        let placeholder = match previous {
            "nodes" => Some("{node}"),
            "qemu" => Some("{vmid}"),
            "tasks" => Some("{upid}"),
            "storage" => Some("{storage}"),
            "content" => Some("{volume}"),
            _ => None,
        };
        let word = segment.len() <= 32
            && segment
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'-' || b == b'_');
        out.push('/');
        out.push_str(match placeholder {
            Some(p) => p,
            None if word => segment,
            None => "{value}",
        });
        previous = if placeholder.is_some() { "" } else { segment };
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_keep_no_node_vmid_upid_or_storage() {
        let cases = [
            ("/version", "/version"),
            ("/cluster/resources", "/cluster/resources"),
            ("/nodes/pve1/qemu", "/nodes/{node}/qemu"),
            (
                "/nodes/pve1/qemu/105/config",
                "/nodes/{node}/qemu/{vmid}/config",
            ),
            (
                "/nodes/pve1/qemu/105/status/start",
                "/nodes/{node}/qemu/{vmid}/status/start",
            ),
            (
                "/nodes/pve1/tasks/UPID%3Apve1%3A0001%3Aqmcreate%3A105%3Aroot%40pam%3A/status",
                "/nodes/{node}/tasks/{upid}/status",
            ),
            (
                "/nodes/pve1/storage/local-lvm/content/local%3Aiso%2Fseed.iso",
                "/nodes/{node}/storage/{storage}/content/{volume}",
            ),
            ("/nodes/pve1/storage", "/nodes/{node}/storage"),
            ("/weird/Name.With.Dots/x", "/weird/{value}/x"),
            ("", "/"),
        ];
        for (path, want) in cases {
            assert_eq!(endpoint(path), want, "{path}");
        }
    }

    #[test]
    fn labels_from_the_server_are_bounded() {
        let site: Arc<str> = Arc::from("lab");
        assert_eq!(task_labels(&site, "qmclone").r#type, "qmclone");
        assert_eq!(task_labels(&site, "qmclone; rm -rf").r#type, "other");
        assert_eq!(method_label("PATCH"), "other");
        assert_eq!(outcome(None), "transport_error");
        assert_eq!(outcome(Some(596)), "server_error");
        assert_eq!(outcome(Some(403)), "client_error");
    }

    fn orphan(site: &str, vmid: u32, disposition: OrphanDisposition) -> crate::plan::Orphan {
        crate::plan::Orphan {
            site: site.into(),
            vmid,
            kind: Default::default(),
            node: "pve1".into(),
            name: Some(format!("vm-{vmid}")),
            power: "stopped".into(),
            first_seen_ms: 0,
            disposition,
            duplicate_of: None,
        }
    }

    fn report() -> CycleReport {
        let plan = crate::plan::Plan {
            orphans: vec![
                orphan("a", 101, OrphanDisposition::Reported),
                orphan("a", 102, OrphanDisposition::Reported),
                orphan("b", 103, OrphanDisposition::DeleteAfter { at_ms: 1 }),
            ],
            refused: vec![crate::plan::Refused::Deletes {
                valve: crate::plan::Valve::DesiredSetEmpty { removing: 1 },
                hand_overs: 0,
            }],
            ..Default::default()
        };
        let site = |name: &str, reachable, nodes_online: usize| crate::status::SiteSummary {
            name: name.into(),
            reachable,
            quorate: reachable,
            nodes_online: (0..nodes_online).map(|i| format!("n{i}")).collect(),
            nodes_offline: (nodes_online..3).map(|i| format!("n{i}")).collect(),
            error: None,
            parallel: Vec::new(),
        };
        CycleReport {
            plan,
            results: Vec::new(),
            after: None,
            ready: 1,
            specs: 2,
            stalled: 1,
            backing_off: 1,
            sites: 2,
            sites_healthy: 1,
            cycle_ms: 5,
            next_attempt_ms: None,
            conditions: [
                (("Ready", "True", Reason::Available), 1),
                (("Ready", "False", Reason::Failed), 1),
            ]
            .into_iter()
            .collect(),
            site_health: vec![site("a", true, 2), site("b", false, 0)],
            source_refusal: None,
            unchanged: false,
            scope: None,
            guest_kinds: Default::default(),
        }
    }

    /// Each sample of the encoded text, as `name{labels} value` (labels sorted), parsed by
    /// openmetrics-parser.
    fn samples(m: &Metrics) -> Vec<String> {
        use openmetrics_parser::OpenMetricsValue as V;
        let text = m.encode();
        let exp = openmetrics_parser::openmetrics::parse_openmetrics(&text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut out = Vec::new();
        for (name, family) in &exp.families {
            for sample in family.iter_samples() {
                let mut labels: Vec<String> = sample
                    .get_labelset()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                labels.sort();
                let value = match &sample.value {
                    V::Gauge(n) => n.as_f64(),
                    V::Counter(c) => c.value.as_f64(),
                    V::Histogram(h) => h.count.unwrap_or(0) as f64,
                    _ => 1.0,
                };
                out.push(format!("{name}{{{}}} {value}", labels.join(",")));
            }
        }
        out
    }

    #[test]
    fn a_cycle_replaces_the_gauges_and_adds_to_the_counters() {
        let m = Metrics::new("main");
        let first = report();
        m.cycle_finished(Some((&first, "abc123")), Duration::from_millis(5));
        let got = samples(&m);
        for want in [
            "proxsync_specs{condition=Ready,reason=Available,status=True} 1",
            "proxsync_specs{condition=Ready,reason=Failed,status=False} 1",
            "proxsync_specs_backing_off{} 1",
            "proxsync_orphans{disposition=reported,site=a} 2",
            "proxsync_orphans{disposition=delete_after_grace,site=b} 1",
            "proxsync_delete_valve_trips{} 1",
            "proxsync_delete_valve_tripped{} 1",
            "proxsync_site_up{site=b} 0",
            "proxsync_site_quorate{site=a} 1",
            "proxsync_site_nodes{site=b} 3",
            "proxsync_site_nodes_online{site=a} 2",
            "proxsync_applied_commit{commit=abc123} 1",
            "proxsync_reconcile_cycles{outcome=success} 1",
            "proxsync_reconcile_cycle_duration_seconds{} 1",
        ] {
            assert!(got.contains(&want.to_string()), "{want} not in {got:#?}");
        }

        // The next cycle: everything Ready, no orphan, no refusal, another commit; a failed
        // cycle after it changes no gauge.
        let mut second = report();
        second.plan = crate::plan::Plan::default();
        second.backing_off = 0;
        second.conditions = [(("Ready", "True", Reason::Available), 2)]
            .into_iter()
            .collect();
        m.cycle_finished(Some((&second, "def456")), Duration::from_millis(5));
        m.cycle_finished(None, Duration::from_millis(5));
        let got = samples(&m);
        for want in [
            "proxsync_specs{condition=Ready,reason=Available,status=True} 2",
            "proxsync_delete_valve_trips{} 1",
            "proxsync_delete_valve_tripped{} 0",
            "proxsync_applied_commit{commit=def456} 1",
            "proxsync_reconcile_cycles{outcome=success} 2",
            "proxsync_reconcile_cycles{outcome=error} 1",
            "proxsync_reconcile_cycle_duration_seconds{} 3",
        ] {
            assert!(got.contains(&want.to_string()), "{want} not in {got:#?}");
        }
        for gone in ["Failed", "abc123", "proxsync_orphans"] {
            assert!(!got.iter().any(|s| s.contains(gone)), "{gone} in {got:#?}");
        }
    }

    #[test]
    fn notify_targets_are_replaced_by_each_snapshot() {
        let m = Metrics::new("main");
        let stats = |sent, failing: bool| crate::report::TargetStats {
            name: "ops".into(),
            kind: "webhook",
            sent,
            failures: 2,
            dropped: 0,
            last_error: failing.then(|| "HTTP 401".to_string()),
            failing_since: failing.then(crate::util::clock::system_now),
        };
        m.notify_targets(&[stats(5, true)]);
        let s = samples(&m);
        assert!(
            s.contains(
                &"proxsync_notify_messages{result=sent,target=ops,type=webhook} 5".to_string()
            ),
            "{s:?}"
        );
        assert!(
            s.contains(&"proxsync_notify_target_failing{target=ops,type=webhook} 1".to_string()),
            "{s:?}"
        );
        m.notify_targets(&[stats(6, false)]);
        let s = samples(&m);
        assert!(
            s.contains(
                &"proxsync_notify_messages{result=sent,target=ops,type=webhook} 6".to_string()
            ),
            "{s:?}"
        );
        assert!(
            s.contains(&"proxsync_notify_target_failing{target=ops,type=webhook} 0".to_string()),
            "{s:?}"
        );
    }

    /// Label values come from the config (sites, targets), the cluster (nodes) and git (the
    /// commit), never from a spec or a guest; whatever they hold, a scrape parses and reads
    /// them back as they were (prometheus-client escapes `\\`, `"` and line breaks since
    /// 0.25.2), and the strings of specs and guests in a cycle's report appear nowhere.
    #[test]
    fn label_values_are_escaped_and_spec_text_is_no_label() {
        let odd = "a\"b\\c\nd} e{x=\"y\"} 1\n# EOF";
        let hostile = "{{ lookup('pipe','touch MARK') }} <!channel>";
        let m = Metrics::new("main");
        let site = m.for_site(odd);
        site.parallel_limit(odd, 3);
        site.request(
            "GET",
            "/nodes/x\ny/qemu",
            Some(200),
            Duration::from_millis(1),
        );
        let mut r = report();
        r.site_health[0].name = odd.into();
        r.plan.orphans[0].name = Some(hostile.into());
        r.plan.orphans[0].site = odd.into();
        r.plan.refused = vec![crate::plan::Refused::ListingIncomplete {
            removals: 1,
            site: odd.into(),
            why: hostile.into(),
        }];
        m.cycle_finished(Some((&r, "0123abc\"}\n#")), Duration::from_millis(5));
        m.notify_targets(&[crate::report::TargetStats {
            name: odd.into(),
            kind: "slack",
            sent: 1,
            failures: 0,
            dropped: 0,
            last_error: Some(hostile.into()),
            failing_since: None,
        }]);
        let got = samples(&m);
        for want in [
            format!("proxsync_parallel_limit{{node={odd},site={odd}}} 3"),
            format!("proxsync_site_up{{site={odd}}} 1"),
            format!("proxsync_orphans{{disposition=reported,site={odd}}} 1"),
            "proxsync_applied_commit{commit=0123abc} 1".to_string(),
            format!("proxsync_notify_messages{{result=sent,target={odd},type=slack}} 1"),
        ] {
            assert!(got.contains(&want), "{want:?} not in {got:#?}");
        }
        let text = m.encode();
        assert!(
            !text.contains("MARK") && !text.contains("channel"),
            "{text}"
        );
    }

    #[test]
    fn off_records_nothing_and_encodes_nothing() {
        let m = Metrics::off();
        m.for_site("lab")
            .request("GET", "/version", Some(200), Duration::from_millis(3));
        assert!(!m.is_on());
        assert_eq!(m.encode(), "");
    }
}
