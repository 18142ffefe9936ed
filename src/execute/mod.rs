//! Running the plan's actions against Proxmox VE, with at most each node's limit at once
//! (`crate::concurrency`, up to `max_parallel_per_node`), and keeping the state database true
//! at every step.
//!
//! Invariants (see ARCHITECTURE.md):
//! - No create or clone request is sent before its intent (spec, VMID, node) is durable in
//!   the state database; the task's UPID is made durable right after PVE answers.
//! - VMIDs are allocated by one allocator per site (a mutex held from choosing the id until
//!   the UPID is recorded): the lowest id of the datacenter's `next-id` range free in the
//!   cycle's listing, `nextid` only when none is; `already exists` means take the next id,
//!   never retry the same (`vmid`).
//! - Before any change, shutdown, stop or delete, the VM's identity is re-verified from a
//!   fresh config read: this install's marker and the spec's name.
//! - Pre-flight checks (node, storage, bridge, image, PVE version) run before any create, so
//!   a create that cannot succeed is never started.
//! - A task that outlives our wait is still running, not failed: its UPID stays recorded and
//!   the next cycle waits for it again.

mod change;
mod cloud_init;
mod consent;
mod container;
mod converge;
mod create;
pub(crate) mod disks;
mod ha;
mod handover;
mod identity;
mod intent;
mod migrate;
mod oci;
mod outcome;
mod preflight;
mod reboot;
mod remove;
pub(crate) mod seeds;
#[cfg(test)]
mod tests;
mod vm;
mod vmid;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, OnceCell};

pub(crate) use self::reboot::RebootSlots;
pub(crate) use self::vmid::CycleCursors as VmidCursors;
use crate::category::Category;
use crate::guest::GuestKind;
use crate::model::{Blocked, Wait};
use crate::observe::SiteView;
use crate::plan::Action;
use crate::pve::types::{NodeStorage, Version};
use crate::pve::{Client, Error as PveError, Pve, TaskOutcome, Upid};
use crate::spec::Spec;
use crate::store::{ErrorKind, SpecRecord, Store, TaskRecord};
use crate::util::clock::Clock;
use crate::util::lanes::Next;

use self::change::guarded_or_converge;
pub(crate) use self::converge::guest_addresses;
use self::create::{adopt, create, relabel, resume_create};
use self::handover::hand_over;
pub(crate) use self::handover::sign_over;
use self::migrate::migrate;
use self::remove::{delete_orphan, forget, recreate, remove};
pub(crate) use self::vm::{find_vm, protection_of};

/// A failure of one action, with its category.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionError {
    pub category: Category,
    pub message: String,
    /// What it is beyond its category (a stale lock).
    pub kind: ErrorKind,
    /// A create that is tried again in this cycle ([`create_again`]): its clone was refused
    /// while a task held its template's lock, and that task has ended.
    pub again: bool,
}

impl ActionError {
    /// A human must act: the spec is `Stalled` and retried only at the backoff cap.
    pub(crate) fn needs_human(&self) -> bool {
        self.category.needs_human() || self.kind != ErrorKind::Plain
    }
}

impl From<PveError> for ActionError {
    fn from(e: PveError) -> Self {
        let mut message = e.to_string();
        if let PveError::TaskFailed { log_tail, .. } = &e
            && !log_tail.is_empty()
        {
            message.push_str(" | task log: ");
            message.push_str(&log_tail.join(" / "));
        }
        ActionError {
            category: e.category(),
            message,
            kind: ErrorKind::Plain,
            again: false,
        }
    }
}

impl From<crate::render::ConfigError> for ActionError {
    fn from(e: crate::render::ConfigError) -> Self {
        match e {
            crate::render::ConfigError::Params(e) => e.into(),
            crate::render::ConfigError::Refused(why) => fail(Category::Conflict, why),
        }
    }
}

impl From<crate::store::StateError> for ActionError {
    fn from(e: crate::store::StateError) -> Self {
        ActionError {
            category: Category::ConfigurationError,
            message: e.to_string(),
            kind: ErrorKind::Plain,
            again: false,
        }
    }
}

fn fail(category: Category, message: impl Into<String>) -> ActionError {
    ActionError {
        category,
        message: message.into(),
        kind: ErrorKind::Plain,
        again: false,
    }
}

/// What blocks an action ([`Blocked`]), as the spec's error: a lock no running task can hold
/// (`StaleLock`: only a human can tell it is stale and clear it); a guest a record names that
/// does not show it is the spec's (`MarkerMissing`: a person confirms it with `proxsync adopt`
/// or removes it); a guest not on its node (not found); anything else a read of the guest
/// showed (a conflict).
fn blocked(why: Blocked) -> ActionError {
    let (category, kind) = match why {
        Blocked::StaleLock { .. }
        | Blocked::StaleTemplateLock { .. }
        | Blocked::InterruptedCreate { .. } => (Category::LockError, ErrorKind::StaleLock),
        Blocked::MarkerMissing { .. } => (Category::Conflict, ErrorKind::MarkerMissing),
        Blocked::NotOnNode { .. } => (Category::NotFound, ErrorKind::Plain),
        Blocked::Gone(_)
        | Blocked::ChangedIdentity(_)
        | Blocked::ReadsDisagree { .. }
        | Blocked::NoDigest { .. }
        | Blocked::OrphanNotOurs { .. }
        | Blocked::NotHandedOver { .. }
        | Blocked::KindChanged { .. }
        | Blocked::StillTaken { .. }
        | Blocked::HiddenFromListing { .. }
        | Blocked::PinnedVmidHeld { .. }
        | Blocked::NoMarkerOfSpec { .. }
        | Blocked::RelabelInFlight { .. }
        | Blocked::NotRelabelled { .. }
        | Blocked::NoConsent { .. }
        | Blocked::NotAdopted { .. }
        | Blocked::SiteNotObserved { .. }
        | Blocked::SlotChanged { .. } => (Category::Conflict, ErrorKind::Plain),
        Blocked::ConsentedGone { .. } => (Category::NotFound, ErrorKind::Plain),
        Blocked::ConsentUnfit { .. }
        | Blocked::NoFreeSlot { .. }
        | Blocked::Unmovable { .. }
        | Blocked::HaErrorState { .. }
        | Blocked::SiteNotConfigured { .. } => (Category::ConfigurationError, ErrorKind::Plain),
        Blocked::MountPointsHeld { .. } => (Category::ConfigurationError, ErrorKind::Protected),
        // Kept as a protection flag keeps a guest: the removed spec's file says why.
        Blocked::LinkedClones { .. } => (Category::Conflict, ErrorKind::Protected),
        Blocked::RebootGivenUp { .. } => (Category::TaskFailed, ErrorKind::Plain),
        Blocked::SnapshotFailed {
            unsupported: true, ..
        } => (Category::ConfigurationError, ErrorKind::Plain),
        Blocked::SnapshotFailed { .. } => (Category::TaskFailed, ErrorKind::Plain),
        Blocked::SnapshotIncomplete { .. } | Blocked::RollbackImpossible { .. } => {
            (Category::Conflict, ErrorKind::Plain)
        }
        Blocked::SpecNotLoaded { .. } => (Category::ValidationFailed, ErrorKind::Plain),
    };
    ActionError {
        kind,
        ..fail(category, why.to_string())
    }
}

/// A refusal of the VM's `protection` flag ([`crate::gate::volume`]): a person must clear it
/// or change the spec.
fn protected(message: impl Into<String>) -> ActionError {
    ActionError {
        kind: ErrorKind::Protected,
        ..fail(Category::ConfigurationError, message)
    }
}

/// How an action ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// A task outlived our wait; its UPID is recorded and will be waited for again.
    StillRunning {
        upid: String,
    },
    /// Blocked by something that resolves by itself (a lock held by a running task): what,
    /// said in `words`.
    Waiting(Wait),
    Failed(ActionError),
}

#[derive(Debug, Clone)]
pub struct ActionResult {
    pub action: Action,
    pub outcome: Outcome,
}

impl<P> AsRef<P> for SiteCtx<P> {
    fn as_ref(&self) -> &P {
        &self.client
    }
}

/// One site's client and allocator, long-lived across cycles. `P` is [`Client`] but in unit
/// tests (the in-memory fake).
pub(crate) struct SiteCtx<P = Client> {
    pub name: String,
    pub client: P,
    /// How long after a create or clone request was sent it may still turn into a VM: the
    /// client's request timeout (pveproxy forwards for up to 30 s) plus a margin.
    pub request_window: Duration,
    /// One VMID allocation at a time per site, with the site's `next-id` range.
    allocator: Mutex<vmid::SiteAllocator>,
    version: OnceCell<Version>,
}

impl<P: Pve> SiteCtx<P> {
    pub(crate) fn new(name: &str, client: P, request_timeout: Duration) -> SiteCtx<P> {
        SiteCtx {
            name: name.to_string(),
            client,
            request_window: request_timeout.max(Duration::from_secs(30)) + REQUEST_WINDOW_MARGIN,
            allocator: Mutex::new(vmid::SiteAllocator::default()),
            version: OnceCell::new(),
        }
    }

    async fn version(&self) -> Result<&Version, PveError> {
        self.version.get_or_try_init(|| self.client.version()).await
    }
}

/// Added to a site's request timeout for [`SiteCtx::request_window`].
const REQUEST_WINDOW_MARGIN: Duration = Duration::from_secs(5);

/// A guest by where it is: site, node, its kind (the API path) and VMID.
#[derive(Debug, Clone, Copy)]
struct VmRef<'a> {
    site: &'a str,
    node: &'a str,
    kind: GuestKind,
    vmid: u32,
}

impl<'a> VmRef<'a> {
    fn new(site: &'a str, node: &'a str, kind: GuestKind, vmid: u32) -> Self {
        VmRef {
            site,
            node,
            kind,
            vmid,
        }
    }

    /// The same guest on another node (a migration's target).
    fn on(self, node: &'a str) -> Self {
        VmRef { node, ..self }
    }
}

/// The kind of guest at `vmid` as this cycle's listing shows it, else as the spec's record
/// made or took it (a create in flight is not listed yet), else a VM (an orphan is listed).
fn listed_kind(
    ctx: &ExecCtx<impl Pve>,
    site: &str,
    vmid: u32,
    rec: Option<&SpecRecord>,
) -> GuestKind {
    ctx.views
        .get(site)
        .and_then(|v| v.vms.get(&vmid))
        .map(|vm| vm.kind)
        .or(rec.map(|r| r.kind))
        .unwrap_or(GuestKind::Qemu)
}

/// What every action needs.
pub(crate) struct ExecCtx<P = Client> {
    pub store: Arc<Store>,
    pub install_id: String,
    pub sites: BTreeMap<String, Arc<SiteCtx<P>>>,
    /// The specs the actions name (and only those), by name, shared with the spec set.
    pub specs: BTreeMap<String, Arc<Spec>>,
    pub views: BTreeMap<String, SiteView>,
    pub config_hash: String,
    /// How long one action waits for a task before leaving it running.
    pub task_wait: Duration,
    /// The limit of actions at once per node where the site's client keeps none of its own.
    pub max_parallel_per_node: u32,
    /// At most this many reboots (`rebootPolicy`) started per site this cycle.
    pub max_parallel_reboots: u32,
    pub reboot_slots: RebootSlots,
    /// True once the daemon is stopping: no new action starts and task waits end early.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Per (site, node) the storages and bridges, per template its config, read for
    /// pre-flight this cycle.
    pub node_facts: NodeFacts,
    /// Signs the markers of new VMs and verifies those read back.
    pub marker_key: Arc<crate::ownership::MarkerKey>,
    /// The configs this cycle's observation read to learn markers (see [`FreshConfigs`]).
    pub fresh_configs: FreshConfigs,
    /// Per site, where this cycle's search for a free VMID goes on.
    pub vmid_cursors: VmidCursors,
    /// The wall clock: intents, task records, reboots and backoff deadlines are stamped with it.
    pub clock: Clock,
    /// Where a container's root password may be read from (`config::PasswordFiles`).
    pub password_files: Arc<crate::config::PasswordFiles>,
    /// The spec set's `ProxmoxImage`s, for the creates of guests made from one.
    pub images: crate::spec::images::ImagesByName,
}

/// VM configs read by this cycle's observation (to learn a marker), by (site, VMID). An
/// adoption whose VM already matches its spec records it from this read and sends nothing
/// (`create::adopt`); they are never used to decide a change, which reads the config again.
pub(crate) type FreshConfigs = HashMap<(String, u32), crate::pve::types::VmConfig>;

/// See [`ExecCtx::node_facts`]: what pre-flight reads once per cycle however many creates
/// need it.
#[derive(Default)]
pub(crate) struct NodeFacts {
    /// Per (site, node): the node's storages and bridges.
    nodes: Cache<(String, String), StoragesAndBridges>,
    /// Per (site, template VMID): the template's config (its volumes decide whether it can be
    /// cloned to another node).
    templates: Cache<(String, u32), crate::pve::types::VmConfig>,
    /// Per (site, node, volume): an OCI image pulled this cycle (`oci::pulled`), the task of
    /// its pull still running, or its failure (`None` for the node: a shared storage's, once).
    pulls: Cache<PullKey, Result<Option<String>, ActionError>>,
}

/// (site, node or `None` for a shared storage, volume): one OCI pull of a cycle.
type PullKey = (String, Option<String>, String);

type StoragesAndBridges = (Vec<NodeStorage>, Vec<crate::pve::types::NetworkInterface>);

/// Values read at most once per cycle and key, however many actions ask together.
type Cache<K, V> = Mutex<HashMap<K, Arc<OnceCell<Arc<V>>>>>;

/// What the run's pre-flight would refuse of a create of `spec` on `site`, for `proxsync
/// plan`: the same checks, reading what they read (the node's storages and bridges, the
/// template's config, the storage's content, the PVE release), `facts` once per plan.
/// `None`: the create would be sent.
pub(crate) async fn create_refusal(
    views: &BTreeMap<String, SiteView>,
    facts: &NodeFacts,
    images: &crate::spec::images::ImagesByName,
    install_id: &str,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
) -> Option<ActionError> {
    let reads = preflight::Reads {
        views,
        facts,
        images,
        install_id,
    };
    preflight::preflight(&reads, site, spec).await.err()
}

/// The `reboot_pending` key of a cloud-init change (status: RebootPending).
pub(crate) const CLOUDINIT_PENDING: &str = "cloudinit";

/// The system's wall clock, for callers outside a cycle; actions read [`ExecCtx::clock`].
pub(crate) use crate::util::clock::now_ms;

/// Runs the actions: in parallel, at most each node's limit at once (its site's client's
/// [`Pve::parallel_limit`], asked again as actions end; `max_parallel_per_node` for a PVE that
/// keeps none). Only the running actions are tasks, each given a copy of its record when it
/// starts (`lanes`): one task per action from the start would hold a task and a record for
/// every VM of a large adoption at once. A create whose clone or create died on a lock timeout
/// and left nothing is tried again in the same cycle, after the node's other actions
/// ([`create_again`]).
pub(crate) async fn execute<P: Pve>(
    ctx: Arc<ExecCtx<P>>,
    actions: Vec<Action>,
    records: &BTreeMap<String, SpecRecord>,
) -> Vec<ActionResult> {
    let per_node = ctx.max_parallel_per_node.max(1);
    // Handed over one by one: no Vec of every action with its node beside the plan's.
    let lanes = actions
        .into_iter()
        .map(|action| (limit_node(&ctx, &action), (action, 1)));
    // `None`: not limited (`Forget`).
    let limit = |node: &Option<(String, String)>| match node {
        Some((site, node)) => ctx
            .sites
            .get(site)
            .and_then(|s| s.client.parallel_limit(node))
            .unwrap_or(per_node)
            .max(1) as usize,
        None => usize::MAX,
    };
    let mut results =
        crate::util::lanes::run_again(lanes, limit, |(action, attempt): (Action, u32)| {
            // A first attempt starts from the cycle's records; another from what the last wrote.
            let rec = if attempt == 1 {
                action.spec().and_then(|s| records.get(s)).cloned()
            } else {
                None
            };
            let ctx = ctx.clone();
            async move {
                if *ctx.shutdown.borrow() {
                    return Next::Done(ActionResult {
                        action,
                        outcome: Outcome::Waiting(Wait::Stopping),
                    });
                }
                let rec = match (attempt, action.spec()) {
                    (1, _) | (_, None) => rec,
                    (_, Some(spec)) => match ctx.store.record(spec) {
                        Ok(rec) => rec,
                        Err(e) => {
                            let outcome = Outcome::Failed(e.into());
                            return Next::Done(ActionResult { action, outcome });
                        }
                    },
                };
                match run_action(&ctx, &action, rec, attempt).await {
                    Some(outcome) => Next::Done(ActionResult { action, outcome }),
                    None => Next::Again((action, attempt + 1)),
                }
            }
        })
        .await;
    // The adoptions recorded lazily made durable together: one fsync, not one per adoption.
    if let Err(e) = ctx.store.flush() {
        tracing::error!(error = %e, "cannot make the records of this cycle's adoptions durable");
    }
    results.sort_by(|a, b| a.action.cmp(&b.action));
    results
}

/// How many times one cycle tries a create whose clone or create PVE gave up on a lock timeout,
/// or whose clone waited for its template's lock.
pub(crate) const CREATE_TRIES: u32 = 5;

/// Whether `attempt` of `action`, which ended with `outcome` and left the spec's record as
/// `rec`, is tried again in this cycle: a create whose clone or create died on lock contention
/// (the node's storage or a config lock was too busy: `pve::is_lock_timeout`), or whose clone
/// PVE refused while a task held the template's lock and that task has ended
/// ([`ActionError::again`]: pve-container locks a template `disk` for each clone of it), whose
/// intent is released (the VMID verifiably holds nothing of ours and no request is on its
/// way: `create` keeps the intent otherwise), while proxsync is not stopping. After a lock
/// timeout the node's limit was cut by the same failure, so the try comes when the node has
/// room again.
fn create_again(
    ctx: &ExecCtx<impl Pve>,
    action: &Action,
    rec: &SpecRecord,
    outcome: &Outcome,
    attempt: u32,
) -> bool {
    matches!(action, Action::Create { .. })
        && attempt < CREATE_TRIES
        && matches!(rec.vm, crate::store::VmState::Absent)
        && !*ctx.shutdown.borrow()
        && matches!(outcome, Outcome::Failed(e)
            if e.category == Category::LockError
                && e.kind == ErrorKind::Plain
                && (e.again || crate::pve::is_lock_timeout(&e.message)))
}

/// The (site, node) whose `max_parallel_per_node` limit an action counts against. An adoption
/// names no node: it is the node the VM was seen on this cycle (where `adopt` sends its
/// requests), else the spec's. Without it, every adoption of a cycle ran at once (all N with an
/// empty database). `Forget` sends nothing to PVE and is not limited.
fn limit_node(ctx: &ExecCtx<impl Pve>, action: &Action) -> Option<(String, String)> {
    if let Some((site, node)) = action.node() {
        return Some((site.to_string(), node.to_string()));
    }
    let Action::Adopt { spec, site, vmid } = action else {
        return None;
    };
    let node = ctx
        .views
        .get(site)
        .and_then(|v| v.vms.get(vmid))
        .map(|vm| vm.node.clone())
        .or_else(|| ctx.specs.get(spec).map(|s| s.node.clone()))
        .unwrap_or_default();
    Some((site.clone(), node.to_string()))
}

/// Runs one attempt of an action and records its outcome; `None`: it is to be tried again
/// ([`create_again`]), its failure noted in the spec's history without a backoff.
// Long because: one arm per action kind, each a call; then the outcome recorded as one step.
async fn run_action(
    ctx: &ExecCtx<impl Pve>,
    action: &Action,
    rec: Option<SpecRecord>,
    attempt: u32,
) -> Option<Outcome> {
    let mut rec = rec.unwrap_or_default();
    // An adoption done with its state changed in `rec` only: the state still stored.
    let mut unwritten = None;
    let started_ms = ctx.clock.now_ms();
    // A create in flight is resumed on the path of the kind its intent made.
    let rec_kind = rec.kind;
    let result = match action {
        Action::Create { spec, site, .. } => {
            with_spec(ctx, spec, |s| create(ctx, site, s, &mut rec)).await
        }
        Action::ResumeCreate {
            spec,
            site,
            vmid,
            upid,
            node,
        } => {
            with_spec(ctx, spec, |s| {
                resume_create(
                    ctx,
                    VmRef::new(site, node, rec_kind, *vmid),
                    s,
                    &mut rec,
                    upid.as_deref().cloned(),
                )
            })
            .await
        }
        Action::Adopt { spec, site, vmid } => {
            with_spec(ctx, spec, |s| {
                adopt(ctx, site, s, &mut rec, *vmid, &mut unwritten)
            })
            .await
        }
        Action::AdoptByConsent {
            spec,
            site,
            node,
            vmid,
        } => {
            with_spec(ctx, spec, |s| {
                consent::adopt_by_consent(ctx, VmRef::new(site, node, s.kind(), *vmid), s, &mut rec)
            })
            .await
        }
        Action::Converge {
            spec,
            site,
            node,
            vmid,
            why,
        } => {
            with_spec(ctx, spec, |s| {
                let vm = VmRef::new(site, node, s.kind(), *vmid);
                guarded_or_converge(ctx, vm, s, why, &mut rec)
            })
            .await
        }
        Action::Migrate {
            spec,
            site,
            node,
            vmid,
            target,
        } => {
            with_spec(ctx, spec, |s| {
                migrate(
                    ctx,
                    VmRef::new(site, node, s.kind(), *vmid),
                    target,
                    s,
                    &mut rec,
                )
            })
            .await
        }
        Action::Recreate {
            spec,
            site,
            node,
            vmid,
        } => {
            with_spec(ctx, spec, |s| {
                recreate(ctx, VmRef::new(site, node, rec_kind, *vmid), s, &mut rec)
            })
            .await
        }
        Action::Remove {
            spec,
            site,
            node,
            vmid,
            release,
        } => {
            let kind = listed_kind(ctx, site, *vmid, Some(&rec));
            let vm = VmRef::new(site, node, kind, *vmid);
            remove(ctx, vm, spec, &mut rec, *release).await
        }
        Action::Forget { spec } => forget(ctx, spec, &rec).await,
        Action::HandOver {
            spec,
            site,
            node,
            vmid,
        } => {
            let kind = listed_kind(ctx, site, *vmid, Some(&rec));
            let vm = VmRef::new(site, node, kind, *vmid);
            hand_over(ctx, vm, spec, &mut rec).await
        }
        Action::Relabel {
            spec,
            from,
            site,
            node,
            vmid,
        } => {
            // The old spec's record becomes the new one's: it is what vouches for the VM.
            match ctx.store.record(from) {
                Ok(old) => {
                    with_spec(ctx, spec, |s| {
                        relabel(
                            ctx,
                            VmRef::new(site, node, s.kind(), *vmid),
                            from,
                            old,
                            s,
                            &mut rec,
                        )
                    })
                    .await
                }
                Err(e) => Outcome::Failed(e.into()),
            }
        }
        Action::DeleteOrphan { site, node, vmid } => {
            delete_orphan(
                ctx,
                VmRef::new(site, node, listed_kind(ctx, site, *vmid, None), *vmid),
            )
            .await
        }
    };
    // A rename that failed before moving the record: the old spec's record still stands, and
    // none may be written under the new name (two records would claim one VM).
    if let Action::Relabel { from, .. } = action
        && !ctx.store.record(from).is_ok_and(|r| r.is_none())
    {
        return Some(result);
    }
    if create_again(ctx, action, &rec, &result, attempt) {
        outcome::retrying(ctx, action, rec, &result, started_ms);
        return None;
    }
    let recorded = outcome::record(ctx, action, rec, unwritten.as_ref(), &result, started_ms);
    match recorded {
        // Nothing on the guest changed, and its record was changed meanwhile: not adopted.
        Err(e) if unwritten.is_some() => Some(Outcome::Failed(e.into())),
        _ => Some(result),
    }
}

async fn with_spec<'a, P: Pve, F, Fut>(ctx: &'a ExecCtx<P>, name: &str, f: F) -> Outcome
where
    F: FnOnce(&'a Spec) -> Fut,
    Fut: std::future::Future<Output = Result<Outcome, ActionError>>,
{
    match ctx.specs.get(name) {
        Some(spec) => f(spec).await.unwrap_or_else(Outcome::Failed),
        None => Outcome::Failed(blocked(Blocked::SpecNotLoaded {
            spec: name.to_string(),
        })),
    }
}

fn site<'a, P: Pve>(ctx: &'a ExecCtx<P>, name: &str) -> Result<&'a SiteCtx<P>, ActionError> {
    ctx.sites.get(name).map(|s| s.as_ref()).ok_or_else(|| {
        blocked(Blocked::SiteNotConfigured {
            site: name.to_string(),
        })
    })
}

fn task_record(ctx: &ExecCtx<impl Pve>, upid: &Upid, status: &str) -> TaskRecord {
    TaskRecord {
        upid: upid.to_string(),
        kind: upid.kind.clone(),
        status: status.to_string(),
        at_ms: ctx.clock.now_ms(),
        earlier: Vec::new(),
    }
}

/// Waits for a task, up to the task wait; when proxsync is stopping, `StillRunning` at once.
async fn wait_until_stop(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    upid: &Upid,
) -> Result<TaskOutcome, PveError> {
    // When stopping, the wait ends at once: callers record the UPID before they wait, so the
    // next start resumes it.
    let mut shutdown = ctx.shutdown.clone();
    tokio::select! {
        r = client.wait_task(upid, ctx.task_wait) => r,
        _ = async {
            // Without a sender (no daemon) there is no stop to wait for.
            if shutdown.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        } => Ok(TaskOutcome::StillRunning),
    }
}

/// Waits for a task; records how it ended in `rec.last_task`.
async fn wait(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    upid: &Upid,
    rec: &mut SpecRecord,
) -> Result<TaskOutcome, WaitError> {
    let waited = wait_until_stop(ctx, client, upid).await;
    match waited {
        Ok(outcome) => {
            rec.set_task(task_record(ctx, upid, &outcome.status()));
            Ok(outcome)
        }
        Err(e) => {
            let task_failed = matches!(e, PveError::TaskFailed { .. });
            if task_failed {
                rec.set_task(task_record(ctx, upid, e.pve_message()));
            }
            Err(WaitError {
                task_failed,
                error: e.into(),
            })
        }
    }
}

/// A wait that did not see its task end well: either the task failed (`task_failed`), or
/// the wait could not tell (a failed poll), in which case the task may still be running.
#[derive(Debug)]
struct WaitError {
    task_failed: bool,
    error: ActionError,
}

impl From<WaitError> for ActionError {
    fn from(e: WaitError) -> Self {
        e.error
    }
}
