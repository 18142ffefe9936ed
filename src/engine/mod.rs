//! One reconcile cycle: observe every site, plan, act, and write status. `run --once`,
//! `plan` and the daemon's loop all go through [`Engine::reconcile`] (or [`plan_view`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::config::Config;
use crate::execute::{ActionResult, ExecCtx, FreshConfigs, Outcome, SiteCtx, execute, now_ms};
use crate::observe::{MarkerRead, SiteView, needs_marker, observe_site_answered, read_markers};
use crate::ownership::{Marker, MarkerKey};
use crate::plan::{Action, FnvHashMap, FnvHashSet, Plan, PlanInput, fnv_hex, plan};
use crate::pve::{Client, ClientOptions, Meter, NoMeter};
use crate::site_identity::{self, SiteChecks};
use crate::spec::{SpecSet, Specs};
use crate::status::{
    ConditionStatus as S, CycleMark, FromPlan, LastStatus, RequestSummary, SpecStatus, StatusDir,
    SummaryStatus, Version, has_condition, invalid_status, kinds, site_summary, spec_status,
};
use crate::store::{SpecRecord, Store};
use crate::util::clock::Clock;

mod adopt;
mod counts;
mod describe;
mod look;
mod placement;
mod plan_view;
mod sites;

pub(crate) use self::adopt::{
    ClaimsBySpec, Standing, UnverifiedClaim, adopt_by_hand, claims_by_spec, unverified_claims,
};
use self::counts::*;
use self::describe::log_planned;
pub(crate) use self::describe::{describe, removed_kinds, specs_by_name};
use self::look::*;
pub(crate) use self::plan_view::{PlanView, plan_view, start_looking};
pub(crate) use self::sites::{MeterFor, no_meter, site_clients, site_clients_metered};

/// How long one cycle waits for a task before leaving it running (a slow task is not failed:
/// the next cycle waits again).
pub(crate) const TASK_WAIT: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    State(#[from] crate::store::StateError),
    #[error("site {site}: {message}")]
    Site { site: String, message: String },
    #[error("status directory {path}: {message}")]
    Status { path: String, message: String },
    /// A request a person made cannot be done as asked (the message says why and what to do).
    #[error("{0}")]
    Refused(String),
}

pub use crate::report::{ConditionKey, CycleReport, GuestKinds};

/// Checks that each spec's site is configured; a spec naming an unknown site is an invalid
/// spec (an error tied to its name), taken out of the desired set, so its VM is left alone.
/// Specs outside `[source] selector` are not checked: another install, with its own sites,
/// manages them.
pub fn check_spec_sites(config: &Config, set: &mut SpecSet) {
    let sites: Vec<&str> = config.sites.iter().map(|s| s.name.as_str()).collect();
    let mine = set.specs.iter().filter(|s| config.selects(&s.labels));
    let diagnostics = crate::spec::check_sites(mine, &sites);
    hold_invalid(set, diagnostics);
    let (images, unknown): (Vec<_>, Vec<_>) =
        (set.images.drain(..)).partition(|i| sites.contains(&i.site.as_str()));
    set.images = images;
    for image in unknown {
        set.diagnostics.push(
            crate::spec::Diagnostic::error(
                &image.file,
                image.pos,
                format!(
                    "ProxmoxImage {} names site {:?}, which is not a [[site]] of the proxsync \
                     config; valid sites are: {}",
                    image.name,
                    image.site,
                    sites.join(", ")
                ),
            )
            .for_spec(Some(&image.name)),
        );
    }
}

/// Each spec naming a node its site's cluster does not have (`plan::UnknownNode`: a typo, or
/// a node since removed) made an invalid spec: an error at its `node` field, and taken out of
/// the desired set, so its guest is left exactly as it is (neither changed, moved nor
/// removed) and it is Stalled until the spec is fixed. Judged only on a site whose membership
/// `views` read whole (`SiteView::members`): an unreachable site, one without quorum or a
/// partial listing judges no node, and its specs wait as before. Borrowed when none is.
pub(crate) fn check_spec_nodes<'a>(
    specs: &'a SpecSet,
    views: &BTreeMap<String, SiteView>,
) -> Cow<'a, SpecSet> {
    let unknown = crate::plan::specs_with_unknown_nodes(specs.specs.iter(), views);
    if unknown.is_empty() {
        return Cow::Borrowed(specs);
    }
    let diagnostics: Vec<crate::spec::Diagnostic> = (unknown.into_iter())
        .flat_map(|(spec, nodes)| {
            (nodes.into_iter()).map(move |u| crate::spec::node_error(spec, u.to_string()))
        })
        .collect();
    let mut set = specs.clone();
    hold_invalid(&mut set, diagnostics);
    Cow::Owned(set)
}

/// `diagnostics` (errors, each tied to its spec's name) added to `set`, and their specs taken
/// out of its valid ones: held as invalid, their guests left alone. A held spec renamed from
/// a removed one (`proxsync.io/renamed-from`) holds that one too (`spec::renames`'s rule): not
/// taken for a removed spec, its VM is left as it is too.
pub(crate) fn hold_invalid(set: &mut SpecSet, mut diagnostics: Vec<crate::spec::Diagnostic>) {
    let names: BTreeSet<String> = (diagnostics.iter())
        .filter(|d| d.is_error())
        .filter_map(|d| d.spec.clone())
        .collect();
    let sources: Vec<crate::spec::Diagnostic> = (set.specs.iter())
        .filter(|s| names.contains(s.name.as_str()))
        .filter(|s| (s.renamed_from.as_ref()).is_some_and(|from| !names.contains(from)))
        .filter_map(crate::spec::renames::source_held)
        .collect();
    diagnostics.extend(sources);
    set.specs.retain(|s| !names.contains(s.name.as_str()));
    set.diagnostics.extend(diagnostics);
}

/// This install's share of the repository: the specs `[source] selector` matches (every spec
/// without one), and the valid specs it does not match. Those are another install's: neither
/// desired nor removed here, their VMs are handed over. Invalid specs stay in the set (their
/// labels may not be readable): each install reports them and leaves their VMs alone.
pub(crate) fn shard<'a>(config: &Config, specs: &'a SpecSet) -> (Cow<'a, SpecSet>, Specs) {
    if config.source.selector.is_none() {
        return (Cow::Borrowed(specs), Specs::default());
    }
    // The specs are shared, not copied.
    let (mine, theirs): (Vec<_>, Vec<_>) =
        (specs.specs.shared().iter().cloned()).partition(|s| config.selects(&s.labels));
    let set = SpecSet {
        specs: mine.into_iter().collect(),
        images: specs.images.clone(),
        diagnostics: specs.diagnostics.clone(),
    };
    (Cow::Owned(set), theirs.into_iter().collect())
}

/// What a cycle's actions are run with, beside its first look.
struct Acting<'a> {
    /// This install's specs.
    specs: &'a SpecSet,
    /// Other installs' specs (a hand-over converges their VMs' tags).
    theirs: &'a Specs,
    invalid: &'a BTreeSet<String>,
    elsewhere: &'a BTreeSet<String>,
    config_hash: &'a str,
    suspensions: &'a Suspensions,
    images_waiting: &'a BTreeMap<(String, String), String>,
    /// The sites this cycle observed (all, or those a push touched): looked at again after.
    observed_sites: &'a BTreeMap<String, Arc<SiteCtx>>,
}

/// The records as the last cycle left them, shared by the engine with the control socket's
/// plans; `None` while a cycle has them, or before the first.
pub(crate) type HeldRecords = Arc<std::sync::Mutex<Option<Arc<BTreeMap<String, SpecRecord>>>>>;

/// What acting left: the results, the plan after acting, and the views and records it saw.
type AfterActing = (
    Vec<ActionResult>,
    Plan,
    BTreeMap<String, SiteView>,
    BTreeMap<String, SpecRecord>,
);

/// What a cycle plans from besides what it observes and the records: the same for its first
/// plan, the plan after acting and `plan_view`'s.
struct PlanBasis<'a> {
    config: &'a Config,
    specs: &'a SpecSet,
    invalid: &'a BTreeSet<String>,
    elsewhere: &'a BTreeSet<String>,
    config_hash: &'a str,
    retry_transient_now: bool,
    rewind: Option<&'a crate::source::chain::RewindBatch>,
    suspensions: &'a Suspensions,
    /// Per (image, node): why guests of that node cannot be made from the image yet.
    images_waiting: &'a BTreeMap<(String, String), String>,
    /// The guests' health checks, and the sites whose views this cycle took (another's are an
    /// earlier cycle's): a running guest that has not passed its checks on the views planned
    /// from is not Ready (`None`: every guest counts as healthy).
    health: Option<(
        &'a crate::health::HealthChecks,
        &'a BTreeMap<String, Arc<SiteCtx>>,
    )>,
}

/// Each set's members, by set name.
fn set_members(specs: &SpecSet) -> BTreeMap<&str, Vec<String>> {
    let mut sets: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for spec in specs.specs.iter() {
        if let Some(m) = spec.set.as_deref() {
            sets.entry(m.set.as_str())
                .or_default()
                .push(spec.name.to_string());
        }
    }
    sets
}

/// The most waves of dependants one cycle acts on after its first actions (`dependsOn`): a
/// longer chain goes on at the next cycle.
const MAX_DEPENDENCY_WAVES: usize = 8;

/// The specs `plan` holds for their turn: until a dependency is Ready (`dependsOn`), until a
/// set member's reboot fits `maxUnavailable`, or (removed) until the VMs of their dependants
/// are gone.
fn waiting_for_dependencies(plan: &Plan) -> BTreeSet<String> {
    (plan.verdicts.iter())
        .filter(|(_, v)| {
            matches!(
                v,
                crate::plan::Verdict::WaitingForDependencies { .. }
                    | crate::plan::Verdict::RollingOut { .. }
            )
        })
        .map(|(name, _)| name.to_string())
        .chain(plan.removals_waiting.iter().cloned())
        .collect()
}

/// The suspensions of the state database, by spec name or [`crate::store::SUSPEND_ALL`].
pub(crate) type Suspensions = BTreeMap<String, crate::store::Suspension>;

impl PlanBasis<'_> {
    fn plan(
        &self,
        sites: &BTreeMap<String, SiteView>,
        records: &BTreeMap<String, SpecRecord>,
        orphans_seen: &BTreeMap<(String, u32), u64>,
        now_ms: u64,
    ) -> Plan {
        let images = self.specs.images_by_name();
        let unwell = (self.health)
            .map(|(h, fresh)| {
                h.unwell(self.specs, sites, records, now_ms, |s| {
                    fresh.contains_key(s)
                })
            })
            .unwrap_or_default();
        plan(&PlanInput {
            install_id: &self.config.install_id,
            desired: &self.specs.specs,
            invalid: self.invalid,
            elsewhere: self.elsewhere,
            sharded: self.config.source.selector.is_some(),
            complete: self.specs.is_complete(),
            sites,
            records,
            orphans_seen,
            reconcile: &self.config.reconcile,
            config_hash: self.config_hash,
            now_ms,
            retry_transient_now: self.retry_transient_now,
            rewind: self.rewind,
            suspensions: self.suspensions,
            images_waiting: self.images_waiting,
            images: &images,
            unwell: &unwell,
            health_checked: self.health.is_some(),
        })
    }
}

/// The names of specs.
/// The sites where this install may keep seed images: a spec's there has `userData`, a record
/// there recorded an upload, or this cycle removes a guest there (its seeds go with it, and an
/// interrupted removal may have left some).
fn seed_sites(
    specs: &SpecSet,
    records: &BTreeMap<String, SpecRecord>,
    actions: &[Action],
) -> BTreeSet<String> {
    let specs = (specs.specs.iter())
        .filter(|s| s.vm().is_some_and(|vm| vm.user_data.is_some()))
        .map(|s| s.site.to_string());
    let recorded = (records.values())
        .filter(|r| r.volumes.as_ref().is_some_and(|v| !v.seeds.is_empty()))
        .map(|r| r.site.to_string());
    let removing = (actions.iter())
        .filter(|a| a.removes())
        .filter_map(|a| a.site(records).map(str::to_string));
    specs.chain(recorded).chain(removing).collect()
}

fn names(specs: &Specs) -> BTreeSet<String> {
    specs.iter().map(|s| s.name.to_string()).collect()
}

/// A hash of the config parts a spec's outcome depends on: a change resets backoff.
pub(crate) fn config_hash(config: &Config) -> String {
    let sites: Vec<String> = config
        .sites
        .iter()
        .map(|s| format!("{}|{}|{}|{:?}", s.name, s.endpoint, s.token_id, s.trust))
        .collect();
    fnv_hex(format!("{}|{}", config.install_id, sites.join(";")).as_bytes())
}

/// Hashes names in order (each followed by a separator, so "ab"+"c" differs from "a"+"bc").
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(crate::plan::fnv([]))
    }
    fn add(&mut self, s: &str) {
        self.0 = crate::plan::fnv_from(self.0, s.bytes().chain([0xff]));
    }
    fn finish(self) -> u64 {
        self.0
    }
}

/// A full cycle at least this often, however idle: a safety net under the fingerprint of
/// [`CycleInputs`] (a change it would not see is planned for within this time).
const FULL_CYCLE_INTERVAL: Duration = Duration::from_secs(3600);

/// What a cycle plans and builds statuses from, besides the time. Equal inputs before the
/// plan's `valid_until_ms` give the same plan, statuses and counts.
#[derive(Debug, PartialEq)]
struct CycleInputs {
    /// The specs: the daemon reads them from this commit with the engine's config (a reload
    /// makes a new engine), so an equal commit means equal specs. The counts are a cheap
    /// second look. Without a commit (specs from paths) no cycle is kept.
    commit: String,
    specs: (usize, usize),
    /// [`crate::observe::fingerprint`] of the views (markers read included).
    views: u64,
    /// What each image is: one becoming Ready lets its guests be created.
    images: BTreeMap<String, crate::image_sync::ImageState>,
    orphans_seen: BTreeMap<(String, u32), u64>,
    config_hash: String,
    retry_transient_now: bool,
    /// What the guests' health checks found ([`crate::health::HealthChecks::fingerprint`]):
    /// a changed verdict or answer is a changed status.
    health: u64,
}

/// The last cycle, when it acted on nothing: what it read, what it reported, and until when
/// that holds.
struct IdleCycle {
    inputs: CycleInputs,
    report: CycleReport,
    /// The earliest of the plan's `valid_until_ms`, the next backoff deadline the report
    /// names (it says only deadlines still ahead) and the safety net's full cycle.
    until_ms: u64,
}

/// What the last cycle looked at: a cycle after a push looks again only at the sites the push
/// touched and takes the other sites' views from here (see [`Engine::reconcile_after_push`]).
struct LastLook {
    /// The valid specs that cycle was given (every shard's), shared with the source's cache.
    specs: Specs,
    /// Its `ProxmoxImage`s: a push that changes one looks at the image's site.
    images: Vec<Arc<crate::spec::images::ImageSpec>>,
    /// The names of its invalid specs.
    invalid: BTreeSet<String>,
    /// Whether every spec file could be read.
    complete: bool,
    config_hash: String,
    /// Every site as it was last observed (after that cycle's actions).
    views: BTreeMap<String, SiteView>,
}

/// What kept the daemon from the source's newest commit (the last good one is used meanwhile).
/// Typed, so a successful read clears a read failure and never a fetch failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceTrouble {
    /// Fetching the remote failed (until the next fetch).
    Fetch(String),
    /// Reading the specs of the commit failed (until the next read succeeds).
    Read(String),
}

impl std::fmt::Display for SourceTrouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceTrouble::Fetch(e) => f.write_str(e),
            SourceTrouble::Read(e) => write!(f, "cannot read the source: {e}"),
        }
    }
}

/// The long-lived engine: clients, state, status writer, marker cache.
pub struct Engine {
    config: Config,
    store: Arc<Store>,
    sites: BTreeMap<String, Arc<SiteCtx>>,
    /// The status directory, and what this process last wrote there: an idle cycle hands it
    /// nothing and lists no directory.
    status: crate::status::Writer,
    /// Markers read from VM configs, by site and vmid: a VM's marker is read once.
    markers: MarkerCache,
    /// Each site's cluster identity as seen and recorded (`site_identity`): its root CA is
    /// read once per site, then again only when the cluster's shape changes.
    identities: SiteChecks,
    /// The secret that signs and verifies markers (`Config::marker_key_path`).
    marker_key: Arc<MarkerKey>,
    pub task_wait: Duration,
    /// Attempt specs whose last failure was transient despite their backoff (`run --once`).
    pub retry_transient_now: bool,
    /// Why the source could not be read (the last good commit is being used), for the summary.
    pub source_error: Option<SourceTrouble>,
    /// The branch tip refused by `[source] verify` (the last verified commit is being used),
    /// for the summary and the cycle's report.
    pub source_refusal: Option<crate::source::verify::Refusal>,
    /// The commit applied rewinds the branch: for the summary, and the valves judge its
    /// deletes as one batch.
    pub source_rewind: Option<crate::source::Rewind>,
    /// The last `proxsync reconcile` request handled, for the summary.
    pub last_request: Option<RequestSummary>,
    /// `[[notify]]` targets that fail (set by the daemon before a cycle), for the summary.
    pub notify_failures: Vec<crate::status::NotifyFailure>,
    /// Set to true to stop: no new action starts, task waits end early (their UPIDs are
    /// recorded), and the cycle returns.
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// The records as the last cycle left them (the engine is the database's only writer):
    /// an idle cycle decodes nothing, nor a plan the control socket makes between cycles.
    records: HeldRecords,
    /// The wall clock of plans, actions and status files (the system's; tests set their own).
    clock: Clock,
    /// The last cycle if it acted on nothing, with its cached `records` untouched since (see
    /// `reconcile`: a cycle reading the same keeps its plan and statuses).
    idle: Option<IdleCycle>,
    /// What the last cycle that ended looked at (dropped before a full cycle observes).
    last_look: Option<LastLook>,
    /// The suspensions as the database holds them; read again when one is set or lifted.
    suspensions: Option<Arc<Suspensions>>,
    /// Seed images of gone specs the sweep found a guest naming, kept while that guest is
    /// listed (`execute::seeds::sweep`).
    seeds_kept: crate::execute::seeds::SweepKept,
    /// The `ProxmoxImage`s' downloads and what was seen of their volumes.
    images: crate::image_sync::ImageSync,
    /// What the last cycle found of each image, for the summary.
    image_summaries: Vec<crate::status::ImageSummary>,
    /// What the guests' health checks found (`spec.health`), checked by full cycles.
    health: crate::health::HealthChecks,
}

impl Engine {
    pub fn new(config: Config) -> Result<Engine, EngineError> {
        Engine::with_meters(config, &no_meter)
    }

    /// An engine whose site clients count their requests and tasks in `meter_for(site)`.
    pub(crate) fn with_meters(
        config: Config,
        meter_for: MeterFor<'_>,
    ) -> Result<Engine, EngineError> {
        let store = Arc::new(Store::open(&config.state_dir)?);
        let key_path = config.marker_key_path();
        let marker_key = Arc::new(MarkerKey::load_or_create_file(&key_path).map_err(
            |message| EngineError::Status {
                path: key_path.display().to_string(),
                message,
            },
        )?);
        let sites = site_clients_metered(&config, meter_for)?;
        let identities = SiteChecks::new(&config.state_dir, true);
        let status = StatusDir::open(&config.status_dir).map_err(|e| EngineError::Status {
            path: config.status_dir.display().to_string(),
            message: e.to_string(),
        })?;
        let status = crate::status::Writer::new(status);
        Ok(Engine {
            config,
            store,
            sites,
            status,
            markers: HashMap::new(),
            identities,
            marker_key,
            task_wait: TASK_WAIT,
            retry_transient_now: false,
            source_error: None,
            source_refusal: None,
            source_rewind: None,
            last_request: None,
            notify_failures: Vec::new(),
            shutdown: tokio::sync::watch::channel(false).1,
            records: HeldRecords::default(),
            clock: Clock::system(),
            idle: None,
            last_look: None,
            suspensions: None,
            seeds_kept: Default::default(),
            images: Default::default(),
            image_summaries: Vec::new(),
            health: Default::default(),
        })
    }

    /// Reads the time from `clock` instead of the system's.
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// Lets `shutdown` stop a cycle gracefully.
    pub(crate) fn set_shutdown(&mut self, shutdown: tokio::sync::watch::Receiver<bool>) {
        self.shutdown = shutdown;
    }

    /// Makes a spec's next attempt due now (a `proxsync reconcile NAME` request). The error
    /// stays recorded for status until the attempt.
    pub fn clear_backoff(&mut self, name: &str) -> Result<bool, EngineError> {
        match self.store.record(name)? {
            Some(mut rec) if rec.next_attempt_ms.is_some() => {
                rec.next_attempt_ms = None;
                self.store.put(name, &rec)?;
                // The records changed: the next cycle plans.
                self.idle = None;
                self.change_records(|cache| {
                    cache.insert(name.to_string(), rec);
                });
                Ok(true)
            }
            Some(_) => Ok(true),
            None => Ok(false),
        }
    }

    /// Lets the spec's change that was rolled back (`changePolicy`) be tried again (a
    /// `proxsync reconcile NAME --retry` request): the record forgets the rollback; the
    /// snapshot stays proxsync's own.
    pub fn retry_rolled_back(&mut self, name: &str) -> Result<bool, EngineError> {
        let Some(mut rec) = self.store.record(name)? else {
            return Ok(false);
        };
        let Some(changes) = rec
            .changes
            .as_deref_mut()
            .filter(|c| c.rolled_back.is_some())
        else {
            return Ok(false);
        };
        changes.rolled_back = None;
        self.store.put(name, &rec)?;
        self.idle = None;
        self.change_records(|cache| {
            cache.insert(name.to_string(), rec);
        });
        Ok(true)
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// What is kept of the status each spec was last given, by name: the specs of the
    /// commit, and removed specs whose VM is not gone yet (for notifications).
    pub(crate) fn statuses(&self) -> &HashMap<compact_str::CompactString, LastStatus> {
        self.status.statuses()
    }

    /// The state database (the control socket serves its records to `proxsync plan`).
    pub(crate) fn store(&self) -> Arc<Store> {
        self.store.clone()
    }

    /// The records as the last cycle left them, for the control socket's plans (`None`
    /// during a cycle: a plan then reads the database).
    pub(crate) fn records_handle(&self) -> HeldRecords {
        self.records.clone()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<Arc<BTreeMap<String, SpecRecord>>>> {
        // An `Option` of an `Arc` is whole after any panic: poisoning says nothing here.
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn held_records(&self) -> Option<Arc<BTreeMap<String, SpecRecord>>> {
        self.held().clone()
    }

    /// The records, taken for a cycle to change (copied only if a plan holds them now).
    fn take_records(&mut self) -> Option<BTreeMap<String, SpecRecord>> {
        self.held().take().map(Arc::unwrap_or_clone)
    }

    fn keep_records(&mut self, records: BTreeMap<String, SpecRecord>) {
        *self.held() = Some(Arc::new(records));
    }

    /// Changes the records held, if any.
    fn change_records(&mut self, change: impl FnOnce(&mut BTreeMap<String, SpecRecord>)) {
        if let Some(records) = self.held().as_mut() {
            change(Arc::make_mut(records));
        }
    }

    /// One full cycle: observe, plan, act (waiting for the tasks it starts), observe again,
    /// and write status. `commit` is the source commit the specs come from. A cycle that
    /// observes what the last one did, when that one acted on nothing, keeps its plan and
    /// statuses until the plan's `valid_until_ms` (see [`CycleInputs`]): it observes and
    /// writes the summary only.
    pub async fn reconcile(
        &mut self,
        specs: &SpecSet,
        commit: Option<&str>,
    ) -> Result<CycleReport, EngineError> {
        self.cycle(specs, commit, false).await
    }

    /// The cycle after a push: it looks again only at the sites the push touched (each added,
    /// removed or changed spec's old and new site and its record's site, and those of specs
    /// that became or stopped being invalid), plans every spec with the other sites as the
    /// last cycle saw them, and acts only on the sites it looked at. The others are looked at
    /// by the next full cycle (resync, backoff deadline, request). A full cycle instead when
    /// there is no last look to build on: the first cycle, after an error, or when the set's
    /// completeness or the config changed (see [`push_scope`]).
    pub async fn reconcile_after_push(
        &mut self,
        specs: &SpecSet,
        commit: Option<&str>,
    ) -> Result<CycleReport, EngineError> {
        self.cycle(specs, commit, true).await
    }

    // Long because: the steps of one cycle (observe, keep the last plan or plan, act, observe
    // and plan again, write status) read in order in one place; each step is already a call.
    async fn cycle(
        &mut self,
        all_specs: &SpecSet,
        commit: Option<&str>,
        after_push: bool,
    ) -> Result<CycleReport, EngineError> {
        let started = Instant::now();
        self.reload_written()?;
        let suspensions = self.suspensions(&all_specs.specs, commit)?;
        let last = self.idle.take();
        let last_look = self.last_look.take();
        let (specs, theirs) = shard(&self.config, all_specs);
        let specs = specs.as_ref();
        // Records read again from the database are not known to be the last cycle's.
        let records = self.take_records();
        let last = last.filter(|_| records.is_some());
        let records = match records {
            Some(r) => r,
            None => self.store.specs()?,
        };
        let orphans_seen = self.store.orphans()?;
        let chash = config_hash(&self.config);
        let mut invalid: BTreeSet<String> = all_specs
            .invalid_names()
            .into_iter()
            .map(str::to_string)
            .collect();
        let scope = last_look
            .as_ref()
            .filter(|_| after_push)
            .and_then(|look| push_scope(look, all_specs, &invalid, &records, &chash, &self.sites));
        // The specs the last cycle held invalid: a node error is logged when it is new.
        let invalid_before = last_look.as_ref().map(|l| l.invalid.clone());
        let (observed_sites, stale) = self.sites_to_observe(scope.as_ref(), last_look);
        let mut fresh = FreshConfigs::new();
        let mut views = observe_all(
            &observed_sites,
            &self.config,
            specs,
            &records,
            &mut self.markers,
            &mut self.identities,
            Some(&self.marker_key),
            Some(&mut fresh),
        )
        .await;
        views.extend(stale);
        // A spec naming a node its site's cluster does not have is invalid, on this look.
        let read = specs.diagnostics.len();
        let checked = check_spec_nodes(specs, &views);
        let specs = checked.as_ref();
        if let Cow::Owned(set) = &checked {
            for d in &set.diagnostics[read..] {
                let spec = d.spec.as_deref().unwrap_or_default();
                if invalid_before.as_ref().is_none_or(|b| !b.contains(spec)) {
                    tracing::warn!(
                        spec,
                        "{d}: the spec is held as invalid, its guest left as it is"
                    );
                }
            }
            invalid.extend(set.invalid_names().into_iter().map(str::to_string));
        }
        let now_ms = self.clock.now_ms();
        // The images first: a guest made from one waits until it is on its node's storage.
        // Old versions go only in a full cycle that may remove (as the seed sweep).
        let may_act = self.config.reconcile.management_policy
            != crate::config::ManagementPolicy::Observe
            && !suspensions.contains_key(crate::store::SUSPEND_ALL)
            && !*self.shutdown.borrow();
        // A spec with errors may name an image the set no longer has (a template or guest
        // whose ProxmoxImage was removed): no version is judged unused until it is fixed.
        let prune = scope.is_none().then(|| crate::image_sync::Prune {
            source_complete: !(all_specs.has_errors()
                || (all_specs.specs.is_empty() && all_specs.images.is_empty())),
            grace_ms: self.config.reconcile.orphan_grace.as_millis() as u64,
        });
        let synced = self
            .images
            .sync(
                specs,
                &crate::image_sync::SyncCtx {
                    views: &views,
                    sites: &observed_sites,
                    store: &self.store,
                    now_ms,
                    task_wait: self.task_wait,
                    may_act,
                    prune,
                },
            )
            .await;
        let images_waiting = synced.waiting;
        let image_states = synced.states;
        self.image_summaries = (specs.images.iter())
            .filter_map(|i| {
                Some(crate::status::ImageSummary::of(
                    i,
                    image_states.get(&i.name)?,
                ))
            })
            .chain(
                synced
                    .unused
                    .iter()
                    .map(crate::status::ImageSummary::unused),
            )
            .collect();
        // The guests' health checks, by full cycles: their answers are part of the statuses.
        if scope.is_none() {
            self.health
                .round(specs, &views, &records, &observed_sites, now_ms)
                .await;
        }
        let observe_ms = started.elapsed().as_millis() as u64;
        // A cycle that looked at some sites only is not kept as an idle one.
        let inputs = commit
            .filter(|_| scope.is_none())
            .map(|commit| CycleInputs {
                commit: commit.to_string(),
                specs: (specs.specs.len(), specs.diagnostics.len()),
                views: crate::observe::fingerprint(&views),
                images: image_states.clone(),
                orphans_seen: orphans_seen.clone(),
                config_hash: chash.clone(),
                retry_transient_now: self.retry_transient_now,
                health: self.health.fingerprint(specs, now_ms),
            });
        let look = |views| LastLook {
            specs: all_specs.specs.clone(),
            images: all_specs.images.clone(),
            invalid: invalid.clone(),
            complete: all_specs.is_complete(),
            config_hash: chash.clone(),
            views,
        };
        if let Some(last) = last.filter(|l| {
            scope.is_none() && inputs.as_ref() == Some(&l.inputs) && now_ms < l.until_ms
        }) {
            tracing::debug!(
                until_ms = last.until_ms,
                "nothing changed: the last cycle's plan and statuses hold"
            );
            let due = (self.health).next_due_ms(specs, &views, &records, now_ms, |s| {
                observed_sites.contains_key(s)
            });
            let report = self
                .keep_last_cycle(&last.report, specs, commit, &views, started)
                .map(|r| wake_for_health(r, due));
            self.keep_records(records);
            self.idle = Some(last);
            if report.is_ok() {
                self.last_look = Some(look(views));
            }
            return report;
        }
        let elsewhere = names(&theirs);
        let mut records = records;
        // A set's FreeMemory members get their nodes from this look and, only when one has no
        // VM yet, its site's nodes' memory (none: borrowed as is).
        let free = placement::free_memory(specs, &records, &views, &observed_sites).await;
        let placed = placement::place(specs, &views, &records, &free);
        let specs = placed.as_ref();
        self.records_follow_specs(specs, &mut records)?;
        let basis = PlanBasis {
            config: &self.config,
            specs,
            invalid: &invalid,
            elsewhere: &elsewhere,
            config_hash: &chash,
            retry_transient_now: self.retry_transient_now,
            rewind: self.source_rewind.as_ref().map(|r| &r.batch),
            suspensions: &suspensions,
            images_waiting: &images_waiting,
            health: Some((&self.health, &observed_sites)),
        };
        let mut first = basis.plan(&views, &records, &orphans_seen, now_ms);
        if let Some(scope) = &scope {
            // Planned on views of the last cycle: acted on by the next full cycle, which looks.
            first
                .actions
                .retain(|a| a.site(&records).is_some_and(|site| scope.contains(site)));
        }
        tracing::debug!(
            observe_ms,
            plan_ms = started.elapsed().as_millis() as u64 - observe_ms,
            actions = first.actions.len(),
            sites_observed = observed_sites.len(),
            "observed and planned"
        );
        if first.orphans_seen != orphans_seen {
            // A durable write only when the sightings changed: an idle cycle writes nothing.
            self.store.set_orphans(&first.orphans_seen)?;
        }
        for action in &first.actions {
            log_planned(action);
        }
        // Where this install's seed images may be, for the sweep after the actions.
        let seed_sites = seed_sites(all_specs, &records, &first.actions);
        let mut guest_kinds = removed_kinds(&first.actions, &views, &records);

        // After actions, look again, so status says what is true now. The first look's records
        // and views go to the actions and are dropped before the second look: held together
        // they were a push's peak (two record maps and two views of thousands of VMs).
        // Waves were left when the cycle's ran out: the next cycle follows at once.
        let mut waves_left = false;
        let (results, after_plan, views, records) = if first.actions.is_empty() {
            (Vec::new(), None, views, records)
        } else {
            let acting = Acting {
                specs,
                theirs: &theirs,
                invalid: &invalid,
                elsewhere: &elsewhere,
                config_hash: &chash,
                suspensions: &suspensions,
                images_waiting: &images_waiting,
                observed_sites: &observed_sites,
            };
            let (mut results, mut after, mut views, mut records) = self
                .act_and_look_again(&acting, &first.actions, views, records, fresh)
                .await?;
            // Specs that waited for a dependency this cycle made Ready go on in the same cycle,
            // one wave per link of the chain (database, then application, then proxy); and a
            // set's reboots roll on, `maxUnavailable` at a time.
            let mut waiting = waiting_for_dependencies(&first);
            for _ in 0..MAX_DEPENDENCY_WAVES {
                let next: Vec<Action> = (after.actions.iter())
                    .filter(|a| a.spec().is_some_and(|s| waiting.contains(s)))
                    .filter(|a| {
                        scope.as_ref().is_none_or(|scope| {
                            a.site(&records).is_some_and(|site| scope.contains(site))
                        })
                    })
                    .cloned()
                    .collect();
                // A suspension made meanwhile is honoured before any further wave acts.
                if next.is_empty() || *self.shutdown.borrow() || self.store.suspensions_changed() {
                    break;
                }
                waiting = waiting_for_dependencies(&after);
                for action in &next {
                    log_planned(action);
                }
                guest_kinds.extend(removed_kinds(&next, &views, &records));
                let wave = self
                    .act_and_look_again(&acting, &next, views, records, FreshConfigs::new())
                    .await?;
                results.extend(wave.0);
                (after, views, records) = (wave.1, wave.2, wave.3);
            }
            // A set rolling through more waves than a cycle runs (a rebuild of 20 members two
            // at a time) goes on at the next cycle, not at the resync minutes later.
            waves_left = (after.actions.iter())
                .any(|a| a.spec().is_some_and(|s| waiting.contains(s)))
                && !*self.shutdown.borrow();
            (results, Some(after), views, records)
        };
        if scope.is_none() {
            self.sweep_seeds(
                all_specs,
                &invalid,
                &records,
                &views,
                &seed_sites,
                &suspensions,
            )
            .await;
        }
        let report = self.write_status(
            specs,
            commit,
            &views,
            &records,
            after_plan.as_ref().unwrap_or(&first),
            &results,
            &first.refused,
            started,
        )?;
        // On the look after the actions: a guest this cycle created or restarted is checked soon.
        let health_due = (self.health).next_due_ms(specs, &views, &records, now_ms, |s| {
            observed_sites.contains_key(s)
        });
        self.keep_records(records);
        self.last_look = Some(look(views));
        let next_attempt_ms = match waves_left {
            true => Some(report.next_attempt_ms.unwrap_or(u64::MAX).min(now_ms + 1)),
            false => report.next_attempt_ms,
        };
        let report = CycleReport {
            plan: first,
            results,
            after: after_plan,
            scope,
            guest_kinds,
            next_attempt_ms,
            ..report
        };
        if let Some(inputs) = inputs.filter(|_| report.plan.actions.is_empty()) {
            self.remember_idle(inputs, &report, now_ms);
        }
        Ok(wake_for_health(report, health_due))
    }

    /// The seed sweep of a full cycle that planned (`execute::seeds::sweep`): this install's
    /// seed images whose spec no source spec (valid or not, of any shard) or record names, on
    /// `seed_sites`, unless a guest uses them. Not while the spec set is incomplete (a spec may
    /// be unread), nothing is removed (an observing install, `suspend --all`) or the daemon
    /// stops.
    async fn sweep_seeds(
        &mut self,
        all_specs: &SpecSet,
        invalid: &BTreeSet<String>,
        records: &BTreeMap<String, SpecRecord>,
        views: &BTreeMap<String, SiteView>,
        seed_sites: &BTreeSet<String>,
        suspensions: &Suspensions,
    ) {
        let removes_nothing = !all_specs.is_complete()
            || self.config.reconcile.management_policy == crate::config::ManagementPolicy::Observe
            || suspensions.contains_key(crate::store::SUSPEND_ALL)
            || *self.shutdown.borrow();
        if removes_nothing || seed_sites.is_empty() {
            return;
        }
        let known_specs: BTreeSet<String> = (all_specs.specs.iter().map(|s| s.name.to_string()))
            .chain(invalid.iter().cloned())
            .chain(records.keys().cloned())
            .collect();
        let input = crate::execute::seeds::SweepInput {
            install_id: &self.config.install_id,
            views,
            known_specs: &known_specs,
            seed_sites,
            per_node: self.config.reconcile.max_parallel_per_node,
            task_wait: self.task_wait,
        };
        let removed = crate::execute::seeds::sweep(&self.sites, &input, &mut self.seeds_kept).await;
        if removed > 0 {
            tracing::info!(
                removed,
                "seed sweep: removed seed images of specs that are gone"
            );
        }
    }

    /// The sites a cycle observes, and the views it keeps from the last look: every site, or
    /// after a push the sites of `scope` (the others keep their views). A full cycle drops the
    /// last look before observing (it is as big as the new views).
    fn sites_to_observe(
        &self,
        scope: Option<&BTreeSet<String>>,
        last_look: Option<LastLook>,
    ) -> (BTreeMap<String, Arc<SiteCtx>>, BTreeMap<String, SiteView>) {
        match (scope, last_look) {
            (Some(scope), Some(look)) => {
                tracing::debug!(sites = %scope.iter().map(String::as_str).collect::<Vec<_>>().join(","), "after a push: looking again at the sites it touched");
                (
                    self.sites
                        .iter()
                        .filter(|(name, _)| scope.contains(*name))
                        .map(|(name, site)| (name.clone(), site.clone()))
                        .collect(),
                    look.views
                        .into_iter()
                        .filter(|(name, _)| !scope.contains(name))
                        .collect(),
                )
            }
            _ => (self.sites.clone(), BTreeMap::new()),
        }
    }

    /// Keeps a cycle that planned nothing as the idle one: its plan and statuses hold while
    /// its inputs do, until the plan's validity, the next backoff deadline or the full-cycle
    /// interval ends.
    fn remember_idle(&mut self, inputs: CycleInputs, report: &CycleReport, now_ms: u64) {
        let until_ms = [
            report.plan.valid_until_ms,
            report.next_attempt_ms.unwrap_or(u64::MAX),
            now_ms.saturating_add(FULL_CYCLE_INTERVAL.as_millis() as u64),
        ];
        self.idle = Some(IdleCycle {
            inputs,
            report: report.clone(),
            until_ms: until_ms.into_iter().min().unwrap_or(now_ms),
        });
    }

    /// Runs `actions`, then looks again at the sites the cycle observed and plans, so status
    /// says what is true now. Returns the results, the plan after acting, and the views and
    /// records it was made from.
    async fn act_and_look_again(
        &mut self,
        acting: &Acting<'_>,
        actions: &[Action],
        views: BTreeMap<String, SiteView>,
        records: BTreeMap<String, SpecRecord>,
        fresh: FreshConfigs,
    ) -> Result<AfterActing, EngineError> {
        let observed_sites = acting.observed_sites;
        // The sites not looked at again keep their views (the actions are not on them).
        let (views, stale): (BTreeMap<_, _>, BTreeMap<_, _>) = views
            .into_iter()
            .partition(|(name, _)| observed_sites.contains_key(name));
        // Only the specs the actions name (a push changing one spec of thousands clones one).
        let acted: BTreeSet<&str> = actions.iter().filter_map(Action::spec).collect();
        let ctx = Arc::new(ExecCtx {
            store: self.store.clone(),
            install_id: self.config.install_id.clone(),
            sites: self.sites.clone(),
            // Other installs' specs too: a hand-over brings its VM's tags in line with the
            // spec as it now reads.
            // Shared, not copied: an adoption of thousands of VMs would copy every spec.
            specs: acting
                .specs
                .specs
                .shared()
                .iter()
                .chain(acting.theirs.shared())
                .filter(|s| acted.contains(s.name.as_str()))
                .map(|s| (s.name.to_string(), s.clone()))
                .collect(),
            views,
            config_hash: acting.config_hash.to_string(),
            task_wait: self.task_wait,
            max_parallel_per_node: self.config.reconcile.max_parallel_per_node,
            max_parallel_reboots: self.config.reconcile.max_parallel_reboots,
            reboot_slots: Default::default(),
            shutdown: self.shutdown.clone(),
            node_facts: Default::default(),
            marker_key: self.marker_key.clone(),
            fresh_configs: fresh,
            vmid_cursors: Default::default(),
            clock: self.clock.clone(),
            password_files: Arc::new(self.config.password_files()),
            images: acting.specs.images_by_name(),
        });
        // What the actions write is read again after them, not every record.
        self.store.take_written();
        let acted_at_ms = self.clock.now_ms();
        let results = execute(ctx, actions.to_vec(), &records).await;
        let mut records = self.records_after_acting(records)?;
        // A guest these actions started is checked afresh, not Ready until it passes.
        self.health.forget_started(&results, &records, acted_at_ms);
        // The records the actions made keep what they need of their specs from now on.
        self.records_follow_specs(acting.specs, &mut records)?;
        // VMIDs may have been freed and reused by this cycle's deletes and creates: the
        // markers cached for the sites acted on are no longer trusted.
        self.markers
            .retain(|site, _| !observed_sites.contains_key(site));
        let orphans_seen = self.store.orphans()?;
        let mut views = observe_all(
            observed_sites,
            &self.config,
            acting.specs,
            &records,
            &mut self.markers,
            &mut self.identities,
            Some(&self.marker_key),
            None,
        )
        .await;
        views.extend(stale);
        let basis = PlanBasis {
            config: &self.config,
            specs: acting.specs,
            invalid: acting.invalid,
            elsewhere: acting.elsewhere,
            config_hash: acting.config_hash,
            retry_transient_now: self.retry_transient_now,
            rewind: self.source_rewind.as_ref().map(|r| &r.batch),
            suspensions: acting.suspensions,
            images_waiting: acting.images_waiting,
            health: Some((&self.health, observed_sites)),
        };
        let after = basis.plan(&views, &records, &orphans_seen, self.clock.now_ms());
        Ok((results, after, views, records))
    }

    /// The suspensions to plan with: read from the database at the first cycle and after
    /// `proxsync suspend`/`resume` changed them, with `spec.suspend` brought in line. A
    /// spec's `spec.suspend` is recorded (by `git` and `commit`, and when), and forgotten when
    /// the spec no longer says it; a removed spec's stays, so its removal waits until `proxsync
    /// resume`, unless the spec's record is gone too. A change drops the idle cycle: statuses
    /// say who suspended.
    fn suspensions(
        &mut self,
        specs: &Specs,
        commit: Option<&str>,
    ) -> Result<Arc<Suspensions>, EngineError> {
        let changed = self.store.take_suspensions_changed();
        let held = match self.suspensions.take() {
            Some(s) if !changed => s,
            _ => {
                self.idle = None;
                Arc::new(self.store.suspensions()?)
            }
        };
        let records = self.held_records();
        let records = records.as_deref();
        let mut lift = Vec::new();
        let from_git: Vec<&String> = (held.iter().filter(|(_, s)| s.from_git))
            .map(|(name, _)| name)
            .collect();
        // Built only when `spec.suspend` was recorded: an idle cycle builds nothing.
        let suspend: FnvHashMap<&str, bool> = match from_git.is_empty() {
            true => FnvHashMap::default(),
            false => specs.iter().map(|s| (s.name.as_str(), s.suspend)).collect(),
        };
        for name in from_git {
            let keep = match suspend.get(name.as_str()) {
                Some(suspended) => *suspended,
                None => records.is_none_or(|r| r.contains_key(name)),
            };
            if !keep {
                lift.push(name.clone());
            }
        }
        let by = match commit {
            Some(c) => format!("git commit {}", &c[..c.len().min(12)]),
            None => "git".to_string(),
        };
        let now_ms = self.clock.now_ms();
        let add: Vec<&str> = (specs.iter())
            .filter(|s| s.suspend && !held.contains_key(s.name.as_str()))
            .map(|s| s.name.as_str())
            .collect();
        if lift.is_empty() && add.is_empty() {
            self.suspensions = Some(held.clone());
            return Ok(held);
        }
        let add: Vec<(String, crate::store::Suspension)> = (add.into_iter())
            .map(|name| {
                let s = crate::store::Suspension {
                    by: by.clone(),
                    reason: None,
                    at_ms: now_ms,
                    from_git: true,
                };
                (name.to_string(), s)
            })
            .collect();
        // Checked and written in one transaction: a `proxsync suspend` of the same name that
        // came in since the read is kept, never lifted or overwritten. Read again after: what
        // the socket wrote meanwhile is planned with too.
        self.store.sync_git_suspensions(&lift, &add)?;
        let held = Arc::new(self.store.suspensions()?);
        self.idle = None;
        self.suspensions = Some(held.clone());
        Ok(held)
    }

    /// Brings into each record what it keeps of its spec for when the spec is gone, and that
    /// no converge carries because it is not applied to the VM: `deletionPolicy` (switched to
    /// Orphan to keep a VM, its removal must release it), `dependsOn` (removals go in
    /// reverse order) and whether the spec is observe-only (a removed spec keeps the policy it
    /// was last seen with: its VM gets no action). Written durably before the cycle plans;
    /// nothing when nothing changed.
    fn records_follow_specs(
        &self,
        specs: &SpecSet,
        records: &mut BTreeMap<String, SpecRecord>,
    ) -> Result<(), EngineError> {
        // A set's name in `dependsOn` is kept as its members' names (built only when a spec
        // names a set).
        let mut sets: Option<BTreeMap<&str, Vec<String>>> = None;
        let mut names: Option<FnvHashSet<&str>> = None;
        for spec in specs.specs.iter() {
            let Some(rec) = records.get_mut(spec.name.as_str()) else {
                continue;
            };
            let names_a_set = spec.depends_on.iter().any(|d| {
                let names = names
                    .get_or_insert_with(|| specs.specs.iter().map(|s| s.name.as_str()).collect());
                !names.contains(d.as_str())
            });
            let depends_on: std::borrow::Cow<'_, [String]> = match names_a_set {
                false => std::borrow::Cow::Borrowed(&spec.depends_on),
                true => {
                    let sets = sets.get_or_insert_with(|| set_members(specs));
                    (spec.depends_on.iter())
                        .flat_map(|d| {
                            sets.get(d.as_str())
                                .cloned()
                                .unwrap_or_else(|| vec![d.clone()])
                        })
                        .collect::<Vec<String>>()
                        .into()
                }
            };
            let observe_only =
                spec.policy(&self.config.reconcile) == crate::spec::ManagementPolicy::Observe;
            if rec.follow_with(spec, &depends_on, observe_only) {
                self.store.put(&spec.name, rec)?;
            }
        }
        Ok(())
    }

    /// Records written since the last cycle by another hand than the cycle's (a `proxsync
    /// adopt` confirmed through the control socket) are read again, and the idle cycle is
    /// dropped: the next cycle plans with them.
    fn reload_written(&mut self) -> Result<(), EngineError> {
        let written = self.store.take_written();
        if written.is_empty() {
            return Ok(());
        }
        self.idle = None;
        // Taken while they change (a read that fails leaves none: the next cycle reads the
        // database).
        if let Some(mut cache) = self.take_records() {
            for name in written {
                match self.store.record(&name)? {
                    Some(rec) => cache.insert(name, rec),
                    None => cache.remove(&name),
                };
            }
            self.keep_records(cache);
        }
        Ok(())
    }

    /// `records` with the records the actions wrote or removed read again (a push at 50,000
    /// specs read all 50,000 to learn one). When most were written (an adoption), one read
    /// of them all is quicker, and `records` is dropped first: two maps of every record were
    /// an adoption's peak.
    fn records_after_acting(
        &self,
        mut records: BTreeMap<String, SpecRecord>,
    ) -> Result<BTreeMap<String, SpecRecord>, EngineError> {
        let written = self.store.take_written();
        if written.len() > records.len() / 4 {
            drop(records);
            return Ok(self.store.specs()?);
        }
        for name in written {
            match self.store.record(&name)? {
                Some(rec) => records.insert(name, rec),
                None => records.remove(&name),
            };
        }
        Ok(records)
    }

    /// The report of a cycle that keeps the last one's plan and statuses (`last`): the same
    /// counts, this cycle's time, and the summary written (its `lastCycle` and `cycleMs`, and
    /// what may change between cycles without changing a plan: the source's trouble, the
    /// last request, failing notification targets). No spec status is built or written.
    fn keep_last_cycle(
        &mut self,
        last: &CycleReport,
        specs: &SpecSet,
        commit: Option<&str>,
        views: &BTreeMap<String, SiteView>,
        started: Instant,
    ) -> Result<CycleReport, EngineError> {
        let cycle_ms = started.elapsed().as_millis() as u64;
        let summary = SummaryStatus {
            specs: last.specs,
            ready: last.ready,
            stalled: last.stalled,
            backing_off: last.backing_off,
            invalid: last.specs.saturating_sub(specs.specs.len()),
            sites: self.site_summaries(views),
            cycle_ms,
            refused: last.plan.refused.iter().map(ToString::to_string).collect(),
            sets: self.set_summaries(specs),
            cycle: CycleMark {
                sites_down: sites_down(views),
                ..CycleMark::default()
            },
            ..self.summary(commit, self.clock.system_time())
        };
        self.status
            .write_summary(&summary)
            .map_err(status_err(&self.config.status_dir))?;
        Ok(CycleReport {
            cycle_ms,
            source_refusal: self.source_refusal.clone(),
            unchanged: true,
            ..last.clone()
        })
    }

    // Long because: each spec's status, then the invalid specs', the removals' and the summary,
    // counted as they are written. The arguments are the cycle's products, passed as they are.
    #[allow(clippy::too_many_arguments)]
    fn write_status(
        &mut self,
        specs: &SpecSet,
        commit: Option<&str>,
        views: &BTreeMap<String, SiteView>,
        records: &BTreeMap<String, SpecRecord>,
        after: &Plan,
        results: &[ActionResult],
        refused: &[crate::plan::Refused],
        started: Instant,
    ) -> Result<CycleReport, EngineError> {
        let now = self.clock.system_time();
        let mut counts = Counts::default();
        let outcomes: BTreeMap<&str, &Outcome> = results
            .iter()
            .filter_map(|r| Some((r.action.spec()?, &r.outcome)))
            .collect();
        // The names this cycle writes, in order, hashed: no set is built in an idle cycle.
        let mut names = Fnv::new();
        // The action still planned for each spec names the step Reconciling shows.
        let planned: BTreeMap<&str, &Action> = after
            .actions
            .iter()
            .filter_map(|a| Some((a.spec()?, a)))
            .collect();
        // Each file names the commit its spec's version was first applied at (read from the
        // file once after a start): a push rewrites the files of the specs it changed.
        let images = specs.images_by_name();
        for spec in &specs.specs {
            let hash = crate::spec::spec_hash(spec);
            let image_now = spec.made_from_now(&images);
            let spec_commit =
                commit.map(|c| self.status.commit_of(&spec.name, Version::Valid(&hash), c));
            let st = spec_status(
                spec,
                records.get(spec.name.as_str()),
                views.get(spec.site.as_str()),
                FromPlan {
                    verdict: after.verdicts.get(&spec.name),
                    duplicate: after.duplicates.get(spec.name.as_str()),
                    action: planned.get(spec.name.as_str()).copied(),
                    image_now,
                    health: self.health.get(&spec.name),
                    now_ms: self.clock.now_ms(),
                },
                outcomes.get(spec.name.as_str()).copied(),
                spec_commit.as_deref(),
            );
            counts.add(&st);
            counts.tally(&st);
            self.status
                .write_spec_if_changed(st, now)
                .map_err(status_err(&self.config.status_dir))?;
            names.add(&spec.name);
        }
        for name in specs.invalid_names() {
            counts.invalid += 1;
            counts.stalled += 1;
            let messages: Vec<String> = specs
                .errors()
                .filter(|d| d.spec.as_deref() == Some(name))
                .map(|d| d.to_string())
                .collect();
            let undecryptable = specs
                .errors()
                .filter(|d| d.spec.as_deref() == Some(name))
                .all(|d| d.decryption);
            let mut st = if undecryptable {
                crate::status::decryption_failed_status(name, records.get(name), &messages, None)
            } else {
                invalid_status(name, records.get(name), &messages, None)
            };
            let ready = st.conditions.iter().find(|c| c.kind == kinds::READY);
            if let (Some(c), Some(ready)) = (commit, ready) {
                let version = Version::Invalid(&ready.message);
                st.commit = Some(self.status.commit_of(name, version, c));
            }
            counts.tally(&st);
            self.status
                .write_spec_if_changed(st, now)
                .map_err(status_err(&self.config.status_dir))?;
            names.add(name);
        }
        // A removed spec whose VM its protection flag keeps (the spec did not set the flag)
        // says so in its file, which stays while the record does.
        for (name, rec) in records.iter().filter(|(_, r)| {
            r.last_error
                .as_ref()
                .is_some_and(|e| e.kind == crate::store::ErrorKind::Protected)
        }) {
            if !specs.specs.iter().any(|s| s.name == name) {
                let view = views.get(rec.site.as_str());
                let st = crate::status::removed_status(name, rec, view, None);
                self.status
                    .write_spec_if_changed(st, now)
                    .map_err(status_err(&self.config.status_dir))?;
            }
        }
        // An old template version kept (for its successor, or a clone from it) says why.
        for (name, why) in &after.templates_kept {
            if let Some(rec) = records.get(name) {
                let view = views.get(rec.site.as_str());
                let st = crate::status::removed_status(name, rec, view, Some(why));
                self.status
                    .write_spec_if_changed(st, now)
                    .map_err(status_err(&self.config.status_dir))?;
            }
        }
        let count = specs.specs.len() + counts.invalid;
        let current = specs.specs.iter().map(|s| s.name.as_str());
        self.status
            .forget_others(count, current.chain(specs.invalid_names()));
        // Status files of specs that are gone with their VM (looked for when the set of
        // specs changed, and on the first cycle).
        for name in records.keys() {
            names.add(name);
        }
        // A renamed spec's old name keeps its record until the rename is done; gone from the
        // repository, its file would go on saying what it said before (Ready).
        for old in after.renamed.keys() {
            names.add(old);
        }
        let current = specs.specs.iter().map(|s| s.name.as_str());
        self.status
            .remove_stale(
                current.chain(specs.invalid_names()),
                records,
                &after.renamed,
                names.finish(),
            )
            .map_err(status_err(&self.config.status_dir))?;
        let orphans = crate::status::orphan_entries(&after.orphans);
        self.status
            .write_orphans(&orphans, now)
            .map_err(status_err(&self.config.status_dir))?;
        let cycle_ms = started.elapsed().as_millis() as u64;
        let summary = SummaryStatus {
            specs: specs.specs.len() + counts.invalid,
            ready: counts.ready,
            stalled: counts.stalled,
            backing_off: counts.backing_off,
            invalid: counts.invalid,
            sites: self.site_summaries(views),
            cycle_ms,
            refused: refused.iter().map(ToString::to_string).collect(),
            sets: self.set_summaries(specs),
            cycle: CycleMark {
                actions: results.len() as u32,
                failed: (results.iter())
                    .filter(|r| matches!(r.outcome, Outcome::Failed(_)))
                    .count() as u32,
                sites_down: sites_down(views),
            },
            ..self.summary(commit, now)
        };
        self.status
            .write_summary(&summary)
            .map_err(status_err(&self.config.status_dir))?;
        Ok(CycleReport {
            source_refusal: self.source_refusal.clone(),
            ..cycle_report(
                &counts,
                specs,
                views,
                records,
                cycle_ms,
                self.clock.now_ms(),
            )
        })
    }

    /// Each `ProxmoxVMSet` of `specs`: its desired members and those Ready, from the statuses
    /// just written (or kept by an idle cycle). Nothing is built without a set.
    fn set_summaries(&self, specs: &SpecSet) -> Vec<crate::status::SetSummary> {
        let mut sets: BTreeMap<&str, crate::status::SetSummary> = BTreeMap::new();
        let statuses = self.status.statuses();
        for spec in specs.specs.iter() {
            let Some(m) = spec.set.as_deref() else {
                continue;
            };
            let set = sets
                .entry(m.set.as_str())
                .or_insert_with(|| crate::status::SetSummary {
                    name: m.set.clone(),
                    desired: u64::from(m.replicas),
                    ..Default::default()
                });
            match statuses.get(spec.name.as_str()).is_some_and(|s| s.ready) {
                true => set.ready += 1,
                false if set.not_ready.len() < 20 => set.not_ready.push(spec.name.to_string()),
                false => {}
            }
        }
        sets.into_values().collect()
    }

    /// Writes `_summary.yaml` when no commit can be applied (the tip refused by
    /// `[source] verify` and no verified commit to fall back on): nothing was observed or
    /// planned, and the summary says why.
    pub(crate) fn write_unapplied_summary(&mut self) -> Result<(), EngineError> {
        let summary = self.summary(None, self.clock.system_time());
        self.status
            .write_summary(&summary)
            .map_err(status_err(&self.config.status_dir))?;
        Ok(())
    }

    /// Each site of the summary, from its view, with the actions each node takes at once now
    /// (its client's `crate::concurrency` limits).
    fn site_summaries(
        &self,
        views: &BTreeMap<String, SiteView>,
    ) -> Vec<crate::status::SiteSummary> {
        views
            .values()
            .map(|v| crate::status::SiteSummary {
                parallel: self
                    .sites
                    .get(&v.name)
                    .map(|s| s.client.parallel_limits())
                    .unwrap_or_default(),
                ..site_summary(v)
            })
            .collect()
    }

    /// A summary of `commit` at `last_cycle` with what the engine holds between cycles (the
    /// source's trouble, the last request, failing notification targets) and nothing counted:
    /// each caller fills in its cycle's counts.
    fn summary(&self, commit: Option<&str>, last_cycle: SystemTime) -> SummaryStatus {
        SummaryStatus {
            commit: commit.map(str::to_string),
            source_error: self.source_error.as_ref().map(ToString::to_string),
            refused_commit: self.source_refusal.clone(),
            specs: 0,
            ready: 0,
            stalled: 0,
            backing_off: 0,
            invalid: 0,
            sites: Vec::new(),
            last_cycle,
            cycle_ms: 0,
            refused: Vec::new(),
            last_request: self.last_request.clone(),
            notify_failures: self.notify_failures.clone(),
            rewind: self
                .source_rewind
                .as_ref()
                .map(|r| crate::status::RewindSummary {
                    commit: r.batch.commit.clone(),
                    from: r.batch.from.clone(),
                    since: SystemTime::UNIX_EPOCH + Duration::from_millis(r.at_ms),
                }),
            sets: Vec::new(),
            images: self.image_summaries.clone(),
            cycle: CycleMark::default(),
        }
    }
}

/// How many sites could not be read this cycle.
/// The report with its next attempt no later than `due`, when the next guest's health check is
/// due (one just started, starting, failing or unhealthy): the daemon runs a cycle for it. Not
/// kept in the idle cycle's deadline: a check that finds the same keeps the last plan.
fn wake_for_health(report: CycleReport, due: Option<u64>) -> CycleReport {
    let next_attempt_ms = match due {
        Some(due) => Some(report.next_attempt_ms.map_or(due, |at| at.min(due))),
        None => report.next_attempt_ms,
    };
    CycleReport {
        next_attempt_ms,
        ..report
    }
}

fn sites_down(views: &BTreeMap<String, SiteView>) -> u32 {
    views.values().filter(|v| !v.reachable()).count() as u32
}

/// A status directory error as an engine error.
fn status_err(dir: &Path) -> impl Fn(crate::status::StatusError) -> EngineError + Copy + '_ {
    move |e| EngineError::Status {
        path: dir.display().to_string(),
        message: e.to_string(),
    }
}
