//! Running the plan's actions against Proxmox VE, with at most `max_parallel_per_node` at once
//! per node, and keeping the state database true at every step.
//!
//! Invariants (see ARCHITECTURE.md):
//! - No create or clone request is sent before its intent (spec, VMID, node) is durable in
//!   the state database; the task's UPID is made durable right after PVE answers.
//! - VMIDs are allocated by one allocator per site (a mutex held from `nextid` until the UPID
//!   is recorded); `already exists` means take the next id, never retry the same.
//! - Before any change, shutdown, stop or delete, the VM's identity is re-verified from a
//!   fresh config read: this install's marker and the spec's name.
//! - Pre-flight checks (node, storage, bridge, image, PVE version) run before any create, so
//!   a create that cannot succeed is never started.
//! - A task that outlives our wait is still running, not failed: its UPID stays recorded and
//!   the next cycle waits for it again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Mutex, OnceCell, Semaphore};

use crate::backoff;
use crate::category::Category;
use crate::observe::SiteView;
use crate::ownership::{Marker, new_uid, ownership_tag};
use crate::plan::{Action, inputs_hash, merge_tags, spec_hash};
use crate::pve::types::{NodeStorage, Version, VmConfig};
pub use crate::pve::values::parse_pve_size;
use crate::pve::values::{
    current_bridge, is_drive_key, nic_macs, percent_decode, pve_size, with_bridge,
};
use crate::pve::{Client, CloneRequest, Error as PveError, TaskOutcome, Upid, VmParams};
use crate::spec::{Image, PowerState, Spec, VolumeKind};
use crate::state::{ErrorRecord, Phase, SpecRecord, Store, TaskRecord};

/// A failure of one action, with its category.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionError {
    pub category: Category,
    pub message: String,
    /// A human must act: the spec is `Stalled` and retried only at the backoff cap.
    pub needs_human: bool,
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
            needs_human: e.category().needs_human(),
            message,
        }
    }
}

impl From<crate::state::StateError> for ActionError {
    fn from(e: crate::state::StateError) -> Self {
        ActionError {
            category: Category::ConfigurationError,
            message: e.to_string(),
            needs_human: true,
        }
    }
}

fn fail(category: Category, message: impl Into<String>) -> ActionError {
    ActionError {
        category,
        message: message.into(),
        needs_human: category.needs_human(),
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
    /// Blocked by something that resolves by itself (a lock held by a running task).
    Waiting {
        reason: String,
    },
    Failed(ActionError),
}

#[derive(Debug, Clone)]
pub struct ActionResult {
    pub action: Action,
    pub outcome: Outcome,
}

/// One site's client and allocator, long-lived across cycles.
pub struct SiteCtx {
    pub name: String,
    pub client: Client,
    /// One VMID allocation at a time per site.
    allocator: Mutex<()>,
    version: OnceCell<Version>,
}

impl SiteCtx {
    pub fn new(name: &str, client: Client) -> SiteCtx {
        SiteCtx {
            name: name.to_string(),
            client,
            allocator: Mutex::new(()),
            version: OnceCell::new(),
        }
    }

    async fn version(&self) -> Result<&Version, PveError> {
        self.version.get_or_try_init(|| self.client.version()).await
    }
}

/// What every action needs.
pub struct ExecCtx {
    pub store: Arc<Store>,
    pub install_id: String,
    pub sites: BTreeMap<String, Arc<SiteCtx>>,
    pub specs: BTreeMap<String, Spec>,
    pub views: BTreeMap<String, SiteView>,
    pub config_hash: String,
    /// How long one action waits for a task before leaving it running.
    pub task_wait: Duration,
    pub max_parallel_per_node: u32,
    /// True once the daemon is stopping: no new action starts and task waits end early.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Per (site, node), the storages and bridges read for pre-flight this cycle.
    pub node_facts: NodeFacts,
}

/// See [`ExecCtx::node_facts`].
pub type NodeFacts = Mutex<
    HashMap<
        (String, String),
        Arc<OnceCell<Arc<(Vec<NodeStorage>, Vec<crate::pve::types::NetworkInterface>)>>>,
    >,
>;

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Runs the actions: in parallel, at most `max_parallel_per_node` per node.
pub async fn execute(
    ctx: Arc<ExecCtx>,
    actions: Vec<Action>,
    records: &BTreeMap<String, SpecRecord>,
) -> Vec<ActionResult> {
    let mut limits: HashMap<(String, String), Arc<Semaphore>> = HashMap::new();
    let mut set = tokio::task::JoinSet::new();
    for action in actions {
        let permit_source = action.node().map(|(site, node)| {
            limits
                .entry((site.to_string(), node.to_string()))
                .or_insert_with(|| {
                    Arc::new(Semaphore::new(ctx.max_parallel_per_node.max(1) as usize))
                })
                .clone()
        });
        let rec = action.spec().and_then(|s| records.get(s)).cloned();
        let ctx = ctx.clone();
        set.spawn(async move {
            let _permit = match &permit_source {
                Some(sem) => sem.acquire().await.ok(),
                None => None,
            };
            if *ctx.shutdown.borrow() {
                return ActionResult {
                    action,
                    outcome: Outcome::Waiting {
                        reason: "proxsync is stopping; not started".into(),
                    },
                };
            }
            let outcome = run_action(&ctx, &action, rec).await;
            ActionResult { action, outcome }
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(r) => results.push(r),
            Err(e) => tracing::error!(error = %e, "an action panicked or was cancelled"),
        }
    }
    results.sort_by(|a, b| a.action.cmp(&b.action));
    results
}

async fn run_action(ctx: &ExecCtx, action: &Action, rec: Option<SpecRecord>) -> Outcome {
    let mut rec = rec.unwrap_or_default();
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
                resume_create(ctx, site, s, &mut rec, *vmid, node, upid.clone())
            })
            .await
        }
        Action::Adopt { spec, site, vmid } => {
            with_spec(ctx, spec, |s| adopt(ctx, site, s, &mut rec, *vmid)).await
        }
        Action::Converge {
            spec,
            site,
            node,
            vmid,
            ..
        } => with_spec(ctx, spec, |s| converge(ctx, site, s, &mut rec, node, *vmid)).await,
        Action::Remove {
            spec,
            site,
            node,
            vmid,
            release,
        } => remove(ctx, site, spec, &mut rec, node, *vmid, *release).await,
        Action::Forget { spec } => forget(ctx, spec, &rec).await,
        Action::DeleteOrphan { site, node, vmid } => delete_orphan(ctx, site, node, *vmid).await,
    };
    let Some(spec_name) = action.spec() else {
        return result;
    };
    // Record the outcome for backoff and status. Removed specs have no record any more.
    if matches!(action, Action::Forget { .. })
        || matches!(action, Action::Remove { .. }) && result == Outcome::Done
    {
        return result;
    }
    let now = now_ms();
    match &result {
        Outcome::Failed(e) => {
            rec.attempts = rec.attempts.saturating_add(1);
            let delay = backoff::delay(spec_name, rec.attempts, e.needs_human);
            rec.next_attempt_ms = Some(now + delay.as_millis() as u64);
            let inputs = ctx
                .specs
                .get(spec_name)
                .map(|s| inputs_hash(s, &ctx.config_hash))
                .unwrap_or_default();
            rec.last_error = Some(ErrorRecord {
                category: e.category.as_str().to_string(),
                message: e.message.clone(),
                at_ms: now,
                inputs,
                needs_human: e.needs_human,
            });
            rec.note(
                now,
                action_name(action),
                &format!("{}: {}", e.category, e.message),
            );
            tracing::warn!(spec = spec_name, category = %e.category, error = %e.message, attempts = rec.attempts, "action failed");
        }
        Outcome::Done => {
            rec.attempts = 0;
            rec.next_attempt_ms = None;
            rec.last_error = None;
            rec.note(now, action_name(action), "ok");
        }
        Outcome::StillRunning { upid } => rec.note(
            now,
            action_name(action),
            &format!("task {upid} still running"),
        ),
        Outcome::Waiting { reason } => {
            // Blocked by something that resolves by itself: whatever failed before no longer
            // applies, and nothing is to be held back.
            rec.attempts = 0;
            rec.next_attempt_ms = None;
            rec.last_error = None;
            rec.note(now, action_name(action), reason);
        }
    }
    if let Err(e) = ctx.store.put(spec_name, &rec) {
        tracing::error!(spec = spec_name, error = %e, "cannot record the outcome");
    }
    result
}

fn action_name(action: &Action) -> &'static str {
    match action {
        Action::Create { .. } => "create",
        Action::ResumeCreate { .. } => "resume-create",
        Action::Adopt { .. } => "adopt",
        Action::Converge { .. } => "converge",
        Action::Remove { release: true, .. } => "release",
        Action::Remove { .. } => "delete",
        Action::Forget { .. } => "forget",
        Action::DeleteOrphan { .. } => "delete-orphan",
    }
}

async fn with_spec<'a, F, Fut>(ctx: &'a ExecCtx, name: &str, f: F) -> Outcome
where
    F: FnOnce(&'a Spec) -> Fut,
    Fut: std::future::Future<Output = Result<Outcome, ActionError>>,
{
    match ctx.specs.get(name) {
        Some(spec) => f(spec).await.unwrap_or_else(Outcome::Failed),
        None => Outcome::Failed(fail(
            Category::ValidationFailed,
            format!("spec {name} is not loaded"),
        )),
    }
}

fn site<'a>(ctx: &'a ExecCtx, name: &str) -> Result<&'a SiteCtx, ActionError> {
    ctx.sites.get(name).map(|s| s.as_ref()).ok_or_else(|| {
        fail(
            Category::ConfigurationError,
            format!("site {name:?} is not configured"),
        )
    })
}

fn task_record(upid: &Upid, status: &str) -> TaskRecord {
    TaskRecord {
        upid: upid.to_string(),
        kind: upid.kind.clone(),
        status: status.to_string(),
        at_ms: now_ms(),
    }
}

/// Waits for a task; records how it ended in `rec.last_task`.
async fn wait(
    ctx: &ExecCtx,
    client: &Client,
    upid: &Upid,
    rec: &mut SpecRecord,
) -> Result<TaskOutcome, ActionError> {
    // When stopping, the wait ends at once: callers record the UPID before they wait, so the
    // next start resumes it.
    let mut shutdown = ctx.shutdown.clone();
    let waited = tokio::select! {
        r = client.wait_task(upid, ctx.task_wait) => r,
        _ = async {
            // Without a sender (no daemon) there is no stop to wait for.
            if shutdown.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        } => Ok(TaskOutcome::StillRunning),
    };
    match waited {
        Ok(outcome) => {
            let status = match &outcome {
                TaskOutcome::Ok => "OK".to_string(),
                TaskOutcome::Warnings(n) => format!("WARNINGS: {n}"),
                TaskOutcome::StillRunning => "running".to_string(),
            };
            rec.last_task = Some(task_record(upid, &status));
            Ok(outcome)
        }
        Err(e) => {
            rec.last_task = Some(task_record(upid, e.pve_message()));
            Err(e.into())
        }
    }
}

// ---- create ------------------------------------------------------------------------------

/// What a create starts from, once resolved and checked.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    Clone {
        template: u32,
        template_node: String,
    },
    Import {
        volume: String,
    },
    Iso {
        volume: String,
    },
}

/// A node's storages and bridges, read once per cycle and node however many creates need
/// them.
async fn node_facts(
    ctx: &ExecCtx,
    site: &SiteCtx,
    node: &str,
) -> Result<Arc<(Vec<NodeStorage>, Vec<crate::pve::types::NetworkInterface>)>, ActionError> {
    let key = (site.name.clone(), node.to_string());
    let cell = ctx.node_facts.lock().await.entry(key).or_default().clone();
    let facts = cell
        .get_or_try_init(|| async {
            let storages = site.client.node_storages(node, None).await?;
            let bridges = site.client.node_bridges(node).await?;
            Ok::<_, PveError>(Arc::new((storages, bridges)))
        })
        .await?;
    Ok(facts.clone())
}

/// Checks everything a create needs before anything is created.
async fn preflight(ctx: &ExecCtx, site: &SiteCtx, spec: &Spec) -> Result<Source, ActionError> {
    let view = ctx.views.get(&site.name).ok_or_else(|| {
        fail(
            Category::NetworkError,
            format!("site {} was not observed", site.name),
        )
    })?;
    if !view.node_healthy(&spec.node) {
        return Err(fail(
            Category::NodeUnhealthy,
            format!(
                "node {} is offline, unknown, or the cluster has no quorum",
                spec.node
            ),
        ));
    }
    let client = &site.client;
    let facts = node_facts(ctx, site, &spec.node).await?;
    let (storages, bridges) = (facts.0.as_slice(), facts.1.as_slice());
    check_storage(storages, &spec.storage, "images", &spec.node)?;
    if !bridges.iter().any(|b| b.iface == spec.network) {
        return Err(fail(
            Category::ConfigurationError,
            format!(
                "bridge {} does not exist on node {} (it has: {}); create it or change spec.forProvider.network",
                spec.network,
                spec.node,
                bridges
                    .iter()
                    .map(|b| b.iface.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if spec.user_data.is_some() {
        // The seed image needs an `iso` storage: known now, not after the VM exists.
        pick_seed_storage(storages, spec)?;
    }
    let version = site.version().await?;
    let features = version.features();
    // A clone to another node than the template's needs the target storage to be shared.
    let clone_check = |template: u32, template_node: &str| -> Result<Source, ActionError> {
        if template_node != spec.node
            && !storages
                .iter()
                .any(|s| s.storage == spec.storage && s.shared == Some(true))
        {
            return Err(fail(
                Category::ConfigurationError,
                format!(
                    "template {template} is on node {template_node}, and a clone to node {} needs shared \
                     storage, but {} is local to each node; put a copy of the template on {} or use a \
                     shared storage",
                    spec.node, spec.storage, spec.node
                ),
            ));
        }
        Ok(Source::Clone {
            template,
            template_node: template_node.to_string(),
        })
    };
    let template_in_view = |vmid: u32| view.vms.get(&vmid).filter(|vm| vm.template);
    match &spec.image {
        Image::Template { vmid } => match template_in_view(*vmid) {
            Some(t) => clone_check(*vmid, &t.node),
            None => Err(fail(
                Category::ImageNotFound,
                format!(
                    "template {vmid} does not exist on site {} (or is not a template); create it or \
                     name an existing template in spec.forProvider.image",
                    site.name
                ),
            )),
        },
        Image::Volume {
            storage,
            volume,
            kind,
        } => {
            check_volume(
                client, storages, &spec.node, storage, volume, *kind, version,
            )
            .await
        }
        Image::Name(name) => {
            let templates: Vec<_> = view
                .vms
                .values()
                .filter(|vm| vm.template && vm.name.as_deref() == Some(name.as_str()))
                .collect();
            match templates.as_slice() {
                [t] => return clone_check(t.vmid, &t.node),
                [] => {}
                many => {
                    return Err(fail(
                        Category::ConfigurationError,
                        format!(
                            "image {name:?} is ambiguous: templates {} share that name; use the VMID",
                            many.iter()
                                .map(|t| t.vmid.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
            let mut found = Vec::new();
            for s in storages {
                for (content, kind) in [
                    ("import", VolumeKind::Import),
                    ("iso", VolumeKind::Iso),
                    ("images", VolumeKind::Images),
                ] {
                    if !s.has_content(content)
                        || (kind == VolumeKind::Import && !features.import_content)
                    {
                        continue;
                    }
                    for v in client
                        .storage_content(&spec.node, &s.storage, Some(content))
                        .await?
                    {
                        if crate::pve::types::volume_stem(&v.volid) == Some(name.as_str())
                            && v.vmid.is_none()
                        {
                            found.push((v.volid, kind));
                        }
                    }
                }
            }
            found.sort_by(|a, b| a.0.cmp(&b.0));
            found.dedup_by(|a, b| a.0 == b.0);
            match found.as_slice() {
                [(volume, VolumeKind::Iso)] => Ok(Source::Iso {
                    volume: volume.clone(),
                }),
                [(volume, _)] => {
                    if !features.import_from {
                        return Err(too_old(version, "the import-from disk option", "7.2"));
                    }
                    Ok(Source::Import {
                        volume: volume.clone(),
                    })
                }
                [] => Err(fail(
                    Category::ImageNotFound,
                    format!(
                        "image {name:?}: no template of that name on site {} and no volume with that file \
                         stem on node {}'s storages; upload it (e.g. to local:import/{name}.qcow2) or fix the spec",
                        site.name, spec.node
                    ),
                )),
                many => Err(fail(
                    Category::ConfigurationError,
                    format!(
                        "image {name:?} is ambiguous: {}; use the full volume ID",
                        many.iter()
                            .map(|(v, _)| v.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        }
    }
}

fn too_old(version: &Version, what: &str, needed: &str) -> ActionError {
    fail(
        Category::ApiNotSupported,
        format!(
            "Proxmox VE {} lacks {what} (needs {needed} or later); upgrade the cluster or use a template \
             image (a VMID) instead",
            version.version
        ),
    )
}

fn check_storage(
    storages: &[NodeStorage],
    storage: &str,
    content: &str,
    node: &str,
) -> Result<(), ActionError> {
    match storages.iter().find(|s| s.storage == storage) {
        None => Err(fail(
            Category::ConfigurationError,
            format!(
                "storage {storage} does not exist on node {node} (it has: {})",
                storages
                    .iter()
                    .map(|s| s.storage.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        Some(s) if !s.has_content(content) => Err(fail(
            Category::ConfigurationError,
            format!(
                "storage {storage} on node {node} does not hold {content} content (it holds {}); add \
                 {content} to its content types or use another storage",
                s.content.as_deref().unwrap_or("nothing")
            ),
        )),
        Some(s) if s.active == Some(false) => Err(fail(
            Category::ConfigurationError,
            format!("storage {storage} on node {node} is not active; check it with `pvesm status`"),
        )),
        Some(_) => Ok(()),
    }
}

async fn check_volume(
    client: &Client,
    storages: &[NodeStorage],
    node: &str,
    storage: &str,
    volume: &str,
    kind: VolumeKind,
    version: &Version,
) -> Result<Source, ActionError> {
    let features = version.features();
    let content = match kind {
        VolumeKind::Import => {
            if !features.import_content {
                return Err(too_old(version, "the `import` storage content type", "8.2"));
            }
            "import"
        }
        VolumeKind::Images => "images",
        VolumeKind::Iso => "iso",
    };
    if kind != VolumeKind::Iso && !features.import_from {
        return Err(too_old(version, "the import-from disk option", "7.2"));
    }
    check_storage(storages, storage, content, node)
        .map_err(|e| fail(Category::ImageNotFound, e.message))?;
    let volumes = client.storage_content(node, storage, Some(content)).await?;
    if !volumes.iter().any(|v| v.volid == volume) {
        return Err(fail(
            Category::ImageNotFound,
            format!(
                "{volume} does not exist on node {node}; upload it to {storage} ({content} content) or fix the spec"
            ),
        ));
    }
    Ok(match kind {
        VolumeKind::Iso => Source::Iso {
            volume: volume.to_string(),
        },
        _ => Source::Import {
            volume: volume.to_string(),
        },
    })
}

/// The description marker of a spec's VM.
fn marker(ctx: &ExecCtx, spec: &Spec, rec: &SpecRecord) -> Marker {
    Marker {
        install: ctx.install_id.clone(),
        spec: spec.name.clone(),
        uid: rec.uid.clone(),
    }
}

fn desired_tags(ctx: &ExecCtx, spec: &Spec) -> Vec<String> {
    let mut tags = spec.tags.clone();
    tags.push(ownership_tag(&ctx.install_id));
    tags.sort();
    tags.dedup();
    tags
}

async fn create(
    ctx: &ExecCtx,
    site_name: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    let site = site(ctx, site_name)?;
    let source = preflight(ctx, site, spec).await?;
    if rec.uid.is_empty() {
        rec.uid = new_uid();
    }
    rec.site = site_name.to_string();
    rec.node = spec.node.clone();
    rec.orphan_on_delete = spec.deletion_policy == crate::spec::DeletionPolicy::Orphan;

    let upid = {
        let _allocating = site.allocator.lock().await;
        let mut skip: Vec<u32> = ctx.store.allocations(site_name)?.into_keys().collect();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let vmid = next_free_vmid(&site.client, &skip).await?;
            // The intent is durable before the request leaves.
            rec.phase = Phase::Creating {
                vmid,
                node: spec.node.clone(),
                upid: None,
            };
            rec.vmid = None;
            ctx.store.begin_create(&spec.name, rec, site_name, vmid)?;
            tracing::info!(spec = %spec.name, vmid, node = %spec.node, "creating");
            match send_create(ctx, site, spec, rec, vmid, &source).await {
                Ok(upid) => {
                    rec.phase = Phase::Creating {
                        vmid,
                        node: spec.node.clone(),
                        upid: Some(upid.to_string()),
                    };
                    rec.last_task = Some(task_record(&upid, "running"));
                    ctx.store.put(&spec.name, rec)?;
                    tracing::info!(spec = %spec.name, vmid, upid = %upid, "create task started");
                    break upid;
                }
                Err(e) if e.is_already_exists() && attempt < 5 => {
                    // Someone took the id between nextid and our request: take the next one.
                    ctx.store.release_vmid(site_name, vmid)?;
                    skip.push(vmid);
                }
                Err(e) if e.outcome_unknown() => {
                    // The request may have reached PVE: keep the intent; the next cycle looks
                    // for the VM before doing anything else.
                    return Err(e.into());
                }
                Err(e) => {
                    // PVE refused it: nothing was created.
                    ctx.store.release_vmid(site_name, vmid)?;
                    rec.phase = Phase::Pending;
                    ctx.store.put(&spec.name, rec)?;
                    return Err(e.into());
                }
            }
        }
    };
    let vmid = upid_vmid(&rec.phase);
    finish_create(ctx, site, spec, rec, vmid, &upid).await
}

fn upid_vmid(phase: &Phase) -> u32 {
    match phase {
        Phase::Creating { vmid, .. } => *vmid,
        _ => 0,
    }
}

/// The lowest id PVE calls free that we have not reserved ourselves.
async fn next_free_vmid(client: &Client, skip: &[u32]) -> Result<u32, ActionError> {
    let first = client.next_id().await?;
    // PVE just called it free; only ids past our own reservations need asking again.
    if !skip.contains(&first) {
        return Ok(first);
    }
    let mut id = first;
    for _ in 0..1000 {
        id = id.saturating_add(1);
        if !skip.contains(&id) && client.vmid_is_free(id).await? {
            return Ok(id);
        }
    }
    Err(fail(
        Category::QuotaExceeded,
        "no free VMID found near /cluster/nextid",
    ))
}

async fn send_create(
    ctx: &ExecCtx,
    site: &SiteCtx,
    spec: &Spec,
    rec: &SpecRecord,
    vmid: u32,
    source: &Source,
) -> Result<Upid, PveError> {
    let description = marker(ctx, spec, rec).description();
    match source {
        Source::Clone {
            template,
            template_node,
        } => {
            let req = CloneRequest {
                newid: vmid,
                name: spec.vm_name.clone(),
                description,
                full: true,
                storage: Some(spec.storage.clone()),
                target: (template_node != &spec.node).then(|| spec.node.clone()),
                pool: None,
            };
            site.client.clone_vm(template_node, *template, &req).await
        }
        Source::Import { volume } | Source::Iso { volume } => {
            let mut params = VmParams::new()
                .set("name", &spec.vm_name)
                .set("description", description)
                .tags(&desired_tags(ctx, spec))?
                .set("cores", spec.cpu)
                .set("memory", spec.memory_mib)
                .set("scsihw", "virtio-scsi-single")
                .set("ostype", "l26")
                .set("agent", "1")
                .nic("net0", &spec.network)?;
            params = match source {
                Source::Iso { .. } => params
                    .new_disk("scsi0", &spec.storage, spec.disk_bytes.div_ceil(1 << 30))?
                    .cdrom("ide2", volume)?
                    .set("boot", "order=scsi0;ide2"),
                _ => params
                    .import_disk("scsi0", &spec.storage, volume)?
                    .set("boot", "order=scsi0")
                    .set("serial0", "socket"),
            };
            site.client.create_vm(&spec.node, vmid, &params).await
        }
    }
}

/// After the create task: wait, record the VM, configure it.
async fn finish_create(
    ctx: &ExecCtx,
    site: &SiteCtx,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
    upid: &Upid,
) -> Result<Outcome, ActionError> {
    match wait(ctx, &site.client, upid, rec).await {
        Ok(TaskOutcome::StillRunning) => Ok(Outcome::StillRunning {
            upid: upid.to_string(),
        }),
        Ok(_) => {
            created(ctx, site, spec, rec, vmid)?;
            converge(ctx, &site.name, spec, rec, &spec.node, vmid).await
        }
        Err(e) => {
            // Did the failed task leave a VM behind? If so it is ours (our marker): keep it and
            // converge it next time; otherwise go back to Pending.
            match site.client.vm_config(&spec.node, vmid).await {
                Ok(cfg) if is_ours(ctx, spec, &cfg) => created(ctx, site, spec, rec, vmid)?,
                _ => {
                    ctx.store.release_vmid(&site.name, vmid)?;
                    rec.phase = Phase::Pending;
                    ctx.store.put(&spec.name, rec)?;
                }
            }
            Err(e)
        }
    }
}

fn created(
    ctx: &ExecCtx,
    site: &SiteCtx,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
) -> Result<(), ActionError> {
    rec.vmid = Some(vmid);
    rec.phase = Phase::Exists;
    rec.provisioned = true;
    ctx.store.put(&spec.name, rec)?;
    ctx.store.release_vmid(&site.name, vmid)?;
    Ok(())
}

fn is_ours(ctx: &ExecCtx, spec: &Spec, cfg: &VmConfig) -> bool {
    cfg.description()
        .and_then(Marker::parse)
        .is_some_and(|m| m.install == ctx.install_id && m.spec == spec.name)
}

async fn resume_create(
    ctx: &ExecCtx,
    site_name: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
    node: &str,
    upid: Option<String>,
) -> Result<Outcome, ActionError> {
    let site = site(ctx, site_name)?;
    if let Some(upid) = upid {
        let upid: Upid = upid.parse().map_err(|e: String| {
            fail(
                Category::ProxmoxError,
                format!("recorded task id unreadable: {e}"),
            )
        })?;
        tracing::info!(spec = %spec.name, vmid, upid = %upid, "resuming the wait for a create task");
        return finish_create(ctx, site, spec, rec, vmid, &upid).await;
    }
    // The intent was recorded but not the answer: the request may or may not have reached
    // PVE. Look before doing anything.
    match site.client.vm_config(node, vmid).await {
        Ok(cfg) if is_ours(ctx, spec, &cfg) => {
            tracing::info!(spec = %spec.name, vmid, "found the VM of an interrupted create");
            if cfg.lock().is_some()
                && let Some(outcome) =
                    wait_for_running_create(ctx, site, spec, rec, node, vmid).await?
            {
                // The create task still runs (it holds the lock): waited for.
                return Ok(outcome);
            }
            created(ctx, site, spec, rec, vmid)?;
            converge(ctx, site_name, spec, rec, node, vmid).await
        }
        Ok(_) => {
            // Another VM holds that id: ours was never created.
            tracing::info!(spec = %spec.name, vmid, "VMID taken by another VM; creating anew");
            abandon(ctx, site_name, spec, rec, vmid)?;
            create(ctx, site_name, spec, rec).await
        }
        Err(e) if e.is_not_found() => {
            // Not there. A create whose worker has not written the config yet would show as
            // an active task for the id: wait for it rather than create a second VM.
            if let Some(outcome) = wait_for_running_create(ctx, site, spec, rec, node, vmid).await?
            {
                return Ok(outcome);
            }
            abandon(ctx, site_name, spec, rec, vmid)?;
            create(ctx, site_name, spec, rec).await
        }
        Err(e) => Err(e.into()),
    }
}

/// If a task runs for `vmid` on the node (the create whose answer was lost), records its
/// UPID and finishes the create with it; `None` when no task runs.
async fn wait_for_running_create(
    ctx: &ExecCtx,
    site: &SiteCtx,
    spec: &Spec,
    rec: &mut SpecRecord,
    node: &str,
    vmid: u32,
) -> Result<Option<Outcome>, ActionError> {
    let active = site.client.active_vm_tasks(node, vmid).await?;
    let Some(upid) = active.into_iter().find_map(|t| t.upid.parse::<Upid>().ok()) else {
        return Ok(None);
    };
    rec.phase = Phase::Creating {
        vmid,
        node: node.to_string(),
        upid: Some(upid.to_string()),
    };
    ctx.store.put(&spec.name, rec)?;
    finish_create(ctx, site, spec, rec, vmid, &upid)
        .await
        .map(Some)
}

fn abandon(
    ctx: &ExecCtx,
    site: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
) -> Result<(), ActionError> {
    ctx.store.release_vmid(site, vmid)?;
    rec.phase = Phase::Pending;
    rec.vmid = None;
    ctx.store.put(&spec.name, rec)?;
    Ok(())
}

async fn adopt(
    ctx: &ExecCtx,
    site_name: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
) -> Result<Outcome, ActionError> {
    site(ctx, site_name)?;
    // The marker was read from the VM's config this cycle (that is why the plan adopts);
    // converge reads the config again and re-verifies it before changing anything.
    let vm = ctx.views.get(site_name).and_then(|v| v.vms.get(&vmid));
    let node = vm
        .map(|vm| vm.node.clone())
        .unwrap_or_else(|| spec.node.clone());
    let Some(m) = vm
        .and_then(|vm| vm.marker.clone())
        .filter(|m| m.install == ctx.install_id && m.spec == spec.name)
    else {
        return Err(fail(
            Category::Conflict,
            format!("VM {vmid} does not carry the marker of spec {}", spec.name),
        ));
    };
    tracing::info!(spec = %spec.name, vmid, "adopting the VM carrying this spec's marker");
    rec.uid = m.uid;
    rec.site = site_name.to_string();
    rec.node = node.clone();
    rec.vmid = Some(vmid);
    rec.phase = Phase::Exists;
    rec.provisioned = true;
    rec.orphan_on_delete = spec.deletion_policy == crate::spec::DeletionPolicy::Orphan;
    ctx.store.put(&spec.name, rec)?;
    converge(ctx, site_name, spec, rec, &node, vmid).await
}

// ---- converge ----------------------------------------------------------------------------

/// The boot disk's key and size in bytes, from the config.
fn boot_disk(cfg: &VmConfig) -> Option<(String, u64)> {
    let order = cfg
        .get("boot")
        .and_then(|b| b.strip_prefix("order="))
        .map(|o| o.split(';').map(str::to_string).collect::<Vec<_>>())
        .unwrap_or_default();
    let candidates = order
        .into_iter()
        .chain(["scsi0", "virtio0", "sata0", "ide0"].map(String::from));
    for key in candidates {
        if let Some(v) = cfg.get(&key)
            && !v.contains("media=cdrom")
            && !v.contains("cloudinit")
        {
            let size = v
                .split(',')
                .find_map(|p| p.strip_prefix("size="))
                .and_then(parse_pve_size);
            return Some((key, size.unwrap_or(0)));
        }
    }
    None
}

async fn check_lock(
    site: &SiteCtx,
    node: &str,
    vmid: u32,
    cfg: &VmConfig,
) -> Result<Option<Outcome>, ActionError> {
    let Some(lock) = cfg.lock() else {
        return Ok(None);
    };
    let tasks = site.client.active_vm_tasks(node, vmid).await?;
    if let Some(t) = tasks.first() {
        return Ok(Some(Outcome::Waiting {
            reason: format!(
                "VM {vmid} is locked ({lock}) by task {}; waiting for it",
                t.upid
            ),
        }));
    }
    Err(ActionError {
        // Only a human can tell whether the lock is really stale.
        needs_human: true,
        ..fail(
            Category::LockError,
            format!(
                "VM {vmid} on node {node} is locked ({lock}) but no task holds the lock (a crashed or \
                 interrupted operation). After checking that nothing is running on it, clear it on the \
                 node with: qm unlock {vmid}"
            ),
        )
    })
}

async fn converge(
    ctx: &ExecCtx,
    site_name: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
    node: &str,
    vmid: u32,
) -> Result<Outcome, ActionError> {
    let site = site(ctx, site_name)?;
    let client = &site.client;
    let cfg = match client.vm_config(node, vmid).await {
        Ok(c) => c,
        Err(e) if e.is_not_found() => {
            rec.vmid = None;
            rec.phase = Phase::Pending;
            ctx.store.put(&spec.name, rec)?;
            return Err(fail(
                Category::NotFound,
                format!("VM {vmid} is gone; it will be created again"),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    // Identity, from a fresh read, before any change.
    if !is_ours(ctx, spec, &cfg) {
        rec.vmid = None;
        rec.phase = Phase::Pending;
        ctx.store.put(&spec.name, rec)?;
        return Err(fail(
            Category::Conflict,
            format!(
                "VM {vmid} does not carry the marker of spec {}: not touching it",
                spec.name
            ),
        ));
    }
    if let Some(waiting) = check_lock(site, node, vmid, &cfg).await? {
        return Ok(waiting);
    }
    // Declared fields only, compared with PVE's normalised values. A value waiting for a
    // reboot counts as set: it is not sent again every cycle.
    let pending = client.vm_pending(node, vmid).await?;
    let effective = |key: &str| -> Option<String> {
        match pending
            .iter()
            .find(|p| p.key == key)
            .and_then(|p| p.pending.as_ref())
        {
            Some(serde_json::Value::String(v)) => Some(v.clone()),
            Some(v) => Some(v.to_string()),
            None => cfg.get(key).map(str::to_string),
        }
    };
    let mut params = VmParams::new();
    let mut changed: Vec<&str> = Vec::new();
    if cfg.get("name") != Some(spec.vm_name.as_str()) {
        params = params.set("name", &spec.vm_name);
        changed.push("name");
    }
    let number = |key: &str| {
        effective(key)
            .and_then(|c| c.parse::<u32>().ok())
            .unwrap_or(1)
    };
    if number("cores") * number("sockets") != spec.cpu {
        params = params.set("cores", spec.cpu).set("sockets", 1);
        changed.push("cores");
    }
    let memory = effective("memory")
        .and_then(|m| {
            m.trim_start_matches("current=")
                .split(',')
                .next()
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(512);
    if memory != spec.memory_mib {
        params = params.set("memory", spec.memory_mib);
        changed.push("memory");
    }
    let net = effective("net0").unwrap_or_else(|| "virtio".to_string());
    if current_bridge(&net) != Some(spec.network.as_str()) {
        params = params.set("net0", with_bridge(&net, &spec.network));
        changed.push("net0");
    }
    let tags = merge_tags(
        &cfg.tags(),
        &rec.applied_tags,
        &spec.tags,
        &ownership_tag(&ctx.install_id),
    );
    if tags != {
        let mut t = cfg.tags();
        t.sort();
        t.dedup();
        t
    } {
        params = params.tags(&tags)?;
        changed.push("tags");
    }
    if !changed.is_empty() {
        tracing::info!(spec = %spec.name, vmid, changed = ?changed, "updating the VM config");
        client.set_config(node, vmid, &params, cfg.digest()).await?;
    }
    rec.applied_tags = spec.tags.clone();

    // cloud-init: PVE's options, its drive or proxsync's seed image. Before the power step, so
    // a new VM boots with it.
    let cfg = if changed.is_empty() {
        cfg
    } else {
        client.vm_config(node, vmid).await?
    };
    let cloudinit_changed =
        match converge_cloud_init(ctx, site, spec, rec, node, vmid, &cfg).await? {
            CloudInitStep::Done(c) => c,
            CloudInitStep::Running(upid) => {
                ctx.store.put(&spec.name, rec)?;
                return Ok(Outcome::StillRunning { upid });
            }
        };
    if cloudinit_changed {
        changed.push("cloudinit");
    }

    // Disks only grow.
    if let Some((disk, size)) = boot_disk(&cfg)
        && size < spec.disk_bytes
        && rec.applied_disk_bytes.is_none_or(|a| a < spec.disk_bytes)
    {
        tracing::info!(spec = %spec.name, vmid, disk = %disk, from = size, to = spec.disk_bytes, "growing the disk");
        let resize = client
            .resize_disk(node, vmid, &disk, &pve_size(spec.disk_bytes), None)
            .await?;
        if let Some(upid) = resize
            && let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await?
        {
            ctx.store.put(&spec.name, rec)?;
            return Ok(Outcome::StillRunning {
                upid: upid.to_string(),
            });
        }
        rec.applied_disk_bytes = Some(spec.disk_bytes);
    }

    // Power state last, read now: the cycle's listing may describe an earlier VM with this
    // VMID (deleted and reused within the cycle), or a state this action changed.
    let is_running = client.vm_running(node, vmid).await?;
    match spec.power_state {
        PowerState::Running if !is_running => {
            let upid = client.start_vm(node, vmid).await?;
            if let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await? {
                ctx.store.put(&spec.name, rec)?;
                return Ok(Outcome::StillRunning {
                    upid: upid.to_string(),
                });
            }
            changed.push("power");
        }
        PowerState::Stopped if is_running => {
            if let Some(o) = power_off(ctx, site, node, vmid, rec).await? {
                ctx.store.put(&spec.name, rec)?;
                return Ok(o);
            }
            changed.push("power");
        }
        _ => {}
    }

    // What waits for the VM's next start (PVE applies CPU, memory and NIC changes of a
    // running VM then, unless hotplug is on). proxsync reports it and never reboots.
    let pending = if changed.is_empty() {
        pending
    } else {
        client.vm_pending(node, vmid).await?
    };
    let was_running_before = is_running && !changed.contains(&"power");
    let cloudinit_pending = was_running_before
        && (cloudinit_changed || rec.reboot_pending.iter().any(|k| k == CLOUDINIT_PENDING));
    rec.reboot_pending = pending
        .into_iter()
        .filter(|p| {
            p.is_pending() && ["cores", "sockets", "memory", "net0"].contains(&p.key.as_str())
        })
        .map(|p| p.key)
        .collect();
    // cloud-init reads its inputs at boot: a change on a running VM applies at the next start
    // (PVE regenerates its drive then; a new seed image is read then). Kept while the VM runs.
    if cloudinit_pending && spec.power_state == PowerState::Running {
        rec.reboot_pending.push(CLOUDINIT_PENDING.to_string());
    }
    // The guest's addresses, when its agent answers (best effort: no agent is no error).
    let running_now = match spec.power_state {
        PowerState::Running => true,
        PowerState::Stopped => false,
    };
    rec.ip_addresses = if running_now {
        client
            .agent_interfaces(node, vmid)
            .await
            .map(|ifaces| guest_addresses(&ifaces))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    rec.applied_hash = Some(spec_hash(spec));
    rec.vmid = Some(vmid);
    rec.phase = Phase::Exists;
    rec.provisioned = true;
    Ok(Outcome::Done)
}

// ---- cloud-init ---------------------------------------------------------------------------

/// The `reboot_pending` key of a cloud-init change (status: RebootPending).
pub const CLOUDINIT_PENDING: &str = "cloudinit";
/// Slots for PVE's cloud-init drive when the VM has none (never `ide2`, the installer CD-ROM).
const CLOUDINIT_DRIVE_SLOTS: [&str; 4] = ["ide0", "ide1", "sata1", "sata2"];
/// Slots for proxsync's seed image.
const SEED_SLOTS: [&str; 4] = ["ide3", "sata3", "sata4", "sata5"];

enum CloudInitStep {
    /// Whether anything changed.
    Done(bool),
    /// An upload task outlived our wait.
    Running(String),
}

/// The slot holding PVE's cloud-init drive (`local-lvm:vm-100-cloudinit,media=cdrom`).
fn cloudinit_drive_slot(cfg: &VmConfig) -> Option<String> {
    cfg.values
        .iter()
        .find(|(k, v)| {
            is_drive_key(k)
                && v.split(',')
                    .next()
                    .is_some_and(|vol| vol.ends_with(":cloudinit") || vol.ends_with("-cloudinit"))
        })
        .map(|(k, _)| k.clone())
}

/// The slots holding a seed of this install and spec, with the volume.
fn seed_slots(cfg: &VmConfig, install: &str, spec: &str) -> Vec<(String, String)> {
    cfg.values
        .iter()
        .filter(|(k, v)| is_drive_key(k) && crate::cloudinit::is_seed_of(v, install, spec))
        .map(|(k, v)| {
            (
                k.clone(),
                v.split(',').next().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn free_slot<'a>(cfg: &VmConfig, slots: &[&'a str]) -> Option<&'a str> {
    slots.iter().copied().find(|s| cfg.get(s).is_none())
}

/// An empty CD-ROM drive (what an ejected seed leaves).
const EJECTED: &str = "none,media=cdrom";

/// A slot for the seed: free, or an empty CD-ROM drive.
fn free_seed_slot(cfg: &VmConfig) -> Option<&'static str> {
    SEED_SLOTS.iter().copied().find(|s| {
        cfg.get(s)
            .is_none_or(|v| v == EJECTED || v == "cdrom,media=cdrom")
    })
}

/// PVE's cloud-init options as the spec declares them (only declared fields).
fn cloud_init_params(
    spec: &Spec,
    cfg: &VmConfig,
    mut params: VmParams,
    changed: &mut Vec<String>,
) -> Result<VmParams, ActionError> {
    let Some(ci) = &spec.cloud_init else {
        return Ok(params);
    };
    if let Some(user) = &ci.user
        && cfg.get("ciuser") != Some(user.as_str())
    {
        params = params.set("ciuser", user);
        changed.push("ciuser".into());
    }
    if !ci.ssh_keys.is_empty() {
        let current = cfg.get("sshkeys").map(percent_decode).unwrap_or_default();
        let current: Vec<&str> = current
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if current != ci.ssh_keys.iter().map(String::as_str).collect::<Vec<_>>() {
            params = params.sshkeys(&ci.ssh_keys);
            changed.push("sshkeys".into());
        }
    }
    for (i, ip) in ci.ip_config.iter().enumerate() {
        let key = format!("ipconfig{i}");
        if cfg.get(&key) != Some(ip.to_pve().as_str()) {
            params = params.ipconfig(
                &key,
                ip.ip.as_deref(),
                ip.gateway.as_deref(),
                ip.ip6.as_deref(),
                ip.gateway6.as_deref(),
            )?;
            changed.push(key);
        }
    }
    if !ci.nameservers.is_empty() {
        let current: Vec<&str> = cfg
            .get("nameserver")
            .unwrap_or_default()
            .split([' ', ',', ';'])
            .filter(|s| !s.is_empty())
            .collect();
        if current
            != ci
                .nameservers
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
        {
            params = params.nameservers(&ci.nameservers)?;
            changed.push("nameserver".into());
        }
    }
    if let Some(d) = &ci.search_domain
        && cfg.get("searchdomain") != Some(d.as_str())
    {
        params = params.set("searchdomain", d);
        changed.push("searchdomain".into());
    }
    if let Some(up) = ci.upgrade_packages {
        let want = if up { "1" } else { "0" };
        if cfg.get("ciupgrade").map(|v| {
            if v == "true" {
                "1"
            } else if v == "false" {
                "0"
            } else {
                v
            }
        }) != Some(want)
        {
            params = params.set("ciupgrade", want);
            changed.push("ciupgrade".into());
        }
    }
    Ok(params)
}

/// The storage for seed images: the spec's `cloudInit.seedStorage`, else the first active
/// storage of the node with `iso` content.
async fn seed_storage(client: &Client, spec: &Spec) -> Result<String, ActionError> {
    let storages = client.node_storages(&spec.node, None).await?;
    pick_seed_storage(&storages, spec)
}

/// [`seed_storage`] from a storage listing (pre-flight has one already).
fn pick_seed_storage(storages: &[NodeStorage], spec: &Spec) -> Result<String, ActionError> {
    if let Some(s) = spec
        .cloud_init
        .as_ref()
        .and_then(|c| c.seed_storage.as_ref())
    {
        check_storage(storages, s, "iso", &spec.node)?;
        return Ok(s.clone());
    }
    storages
        .iter()
        .filter(|s| s.has_content("iso") && s.active != Some(false) && s.enabled != Some(false))
        .map(|s| s.storage.clone())
        .min()
        .ok_or_else(|| {
            fail(
                Category::ConfigurationError,
                format!(
                    "userData needs a storage with iso content on node {} for its seed image, and \
                     there is none; add iso to a storage's content types or set \
                     spec.forProvider.cloudInit.seedStorage",
                    spec.node
                ),
            )
        })
}

/// Deletes this spec's seed images on `storage` except `keep` (best effort: a failure is
/// logged and retried at the next change). Only this spec's VM ever uses them.
async fn remove_old_seeds(
    ctx: &ExecCtx,
    client: &Client,
    node: &str,
    storage: &str,
    spec: &str,
    keep: &[String],
) {
    let volumes = match client.storage_content(node, storage, Some("iso")).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(spec, storage, error = %e, "cannot list seed images to remove old ones");
            return;
        }
    };
    for v in volumes {
        if !crate::cloudinit::is_seed_of(&v.volid, &ctx.install_id, spec) || keep.contains(&v.volid)
        {
            continue;
        }
        tracing::info!(spec, volume = %v.volid, "removing a seed image no VM uses any more");
        let result = match client.delete_volume(node, storage, &v.volid).await {
            Ok(Some(upid)) => client.wait_task(&upid, ctx.task_wait).await.map(|_| ()),
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::warn!(spec, volume = %v.volid, error = %e, "cannot remove an old seed image");
        }
    }
}

/// Brings the VM's cloud-init in line with the spec. Never logs user-data or keys.
async fn converge_cloud_init(
    ctx: &ExecCtx,
    site: &SiteCtx,
    spec: &Spec,
    rec: &mut SpecRecord,
    node: &str,
    vmid: u32,
    cfg: &VmConfig,
) -> Result<CloudInitStep, ActionError> {
    let client = &site.client;
    let attached = seed_slots(cfg, &ctx.install_id, &spec.name);
    if spec.cloud_init.is_none() && spec.user_data.is_none() && attached.is_empty() {
        return Ok(CloudInitStep::Done(false));
    }
    let mut changed: Vec<String> = Vec::new();
    // Values waiting for the next start count as set (PVE keeps changes to a running VM's
    // cloud-init options pending).
    let mut effective = cfg.clone();
    for p in client.vm_pending(node, vmid).await? {
        match p.pending {
            Some(serde_json::Value::String(v)) => {
                effective.values.insert(p.key, v);
            }
            Some(v) => {
                effective.values.insert(p.key, v.to_string());
            }
            None => {}
        }
    }
    let cfg = &effective;
    let mut params = cloud_init_params(spec, cfg, VmParams::new(), &mut changed)?;
    let mut deletes: Vec<String> = Vec::new();
    let mut keep_seed: Option<(String, String)> = None; // (storage, volid)
    match &spec.user_data {
        Some(_) => {
            let macs = nic_macs(
                cfg,
                spec.cloud_init.as_ref().map_or(0, |c| c.ip_config.len()),
            );
            let Some(seed) = crate::cloudinit::build_seed(&ctx.install_id, spec, &rec.uid, &macs)
            else {
                return Ok(CloudInitStep::Done(false));
            };
            let storage = seed_storage(client, spec).await?;
            let volid = format!("{storage}:iso/{}", seed.file_name);
            let present = client
                .storage_content(node, &storage, Some("iso"))
                .await?
                .iter()
                .any(|v| v.volid == volid);
            if !present {
                tracing::info!(spec = %spec.name, vmid, volume = %volid, bytes = seed.image.len(), "uploading the cloud-init seed image");
                let upid = client
                    .upload_iso(node, &storage, &seed.file_name, &seed.image, &seed.sha256)
                    .await?;
                if let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await? {
                    return Ok(CloudInitStep::Running(upid.to_string()));
                }
            }
            let slot = match attached.first() {
                Some((slot, _)) => Some(slot.as_str()),
                None => free_seed_slot(cfg),
            };
            let Some(slot) = slot else {
                return Err(fail(
                    Category::ConfigurationError,
                    format!(
                        "VM {vmid} has no free slot for the cloud-init seed CD-ROM (tried {})",
                        SEED_SLOTS.join(", ")
                    ),
                ));
            };
            if attached.first().map(|(_, v)| v.as_str()) != Some(volid.as_str()) {
                params = params.cdrom(slot, &volid)?;
                changed.push(
                    if attached.is_empty() {
                        "seed attached"
                    } else {
                        "userData changed"
                    }
                    .into(),
                );
            }
            for (other, _) in attached.iter().skip(1) {
                params = params.set(other, EJECTED);
            }
            // PVE's own drive would be a second `cidata` volume: cloud-init would pick either.
            if let Some(drive) = cloudinit_drive_slot(cfg) {
                deletes.push(drive);
            }
            keep_seed = Some((storage, volid));
        }
        None => {
            // Ejected rather than removed: a CD-ROM's medium changes at once on a running VM,
            // where removing the drive would wait for a reboot (and keep the image in use).
            for (slot, _) in &attached {
                params = params.set(slot, EJECTED);
                changed.push("userData removed".into());
            }
            if spec.cloud_init.is_some() && cloudinit_drive_slot(cfg).is_none() {
                let Some(slot) = free_slot(cfg, &CLOUDINIT_DRIVE_SLOTS) else {
                    return Err(fail(
                        Category::ConfigurationError,
                        format!(
                            "VM {vmid} has no free slot for a cloud-init drive (tried {})",
                            CLOUDINIT_DRIVE_SLOTS.join(", ")
                        ),
                    ));
                };
                params = params.cloudinit_drive(slot, &spec.storage)?;
                changed.push("cloud-init drive".into());
            }
        }
    }
    deletes.sort();
    deletes.dedup();
    if !deletes.is_empty() {
        params = params.delete_keys(&deletes);
    }
    if !changed.is_empty() || !deletes.is_empty() {
        // Names of what changed only: never values (keys, user-data).
        tracing::info!(spec = %spec.name, vmid, changed = ?changed, removed = ?deletes, "updating cloud-init");
        client.set_config(node, vmid, &params, None).await?;
    }
    // Seeds of this spec that the VM no longer uses.
    let old_storages: Vec<String> = attached
        .iter()
        .filter_map(|(_, v)| v.split_once(':').map(|(s, _)| s.to_string()))
        .chain(keep_seed.iter().map(|(s, _)| s.clone()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let swapped = attached
        .iter()
        .any(|(_, v)| keep_seed.as_ref().is_none_or(|(_, k)| k != v));
    if swapped || (keep_seed.is_some() && !changed.is_empty()) {
        // Never an image the VM still names, now or at its next start.
        let in_use: Vec<String> = client
            .vm_pending(node, vmid)
            .await?
            .into_iter()
            .flat_map(|p| [p.value, p.pending])
            .flatten()
            .filter_map(|v| {
                v.as_str()
                    .map(|s| s.split(',').next().unwrap_or_default().to_string())
            })
            .filter(|v| crate::cloudinit::is_seed_of(v, &ctx.install_id, &spec.name))
            .collect();
        for storage in &old_storages {
            remove_old_seeds(ctx, client, node, storage, &spec.name, &in_use).await;
        }
    }
    Ok(CloudInitStep::Done(
        !changed.is_empty() || !deletes.is_empty(),
    ))
}

/// The addresses worth showing: not loopback, not IPv6 link-local.
fn guest_addresses(ifaces: &[crate::pve::types::AgentInterface]) -> Vec<String> {
    let mut out: Vec<String> = ifaces
        .iter()
        .filter(|i| i.name != "lo")
        .flat_map(|i| &i.ip_addresses)
        .map(|a| a.ip_address.clone())
        .filter(|ip| {
            !ip.starts_with("127.") && ip != "::1" && !ip.to_ascii_lowercase().starts_with("fe80:")
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Graceful shutdown, then a hard stop if the guest does not power off.
async fn power_off(
    ctx: &ExecCtx,
    site: &SiteCtx,
    node: &str,
    vmid: u32,
    rec: &mut SpecRecord,
) -> Result<Option<Outcome>, ActionError> {
    let client = &site.client;
    let upid = client.shutdown_vm(node, vmid, 120, false).await?;
    match wait(ctx, client, &upid, rec).await {
        Ok(TaskOutcome::StillRunning) => Ok(Some(Outcome::StillRunning {
            upid: upid.to_string(),
        })),
        Ok(_) => Ok(None),
        Err(_) => {
            // The guest ignored ACPI or the shutdown timed out: stop it.
            let upid = client.stop_vm(node, vmid).await?;
            match wait(ctx, client, &upid, rec).await? {
                TaskOutcome::StillRunning => Ok(Some(Outcome::StillRunning {
                    upid: upid.to_string(),
                })),
                _ => Ok(None),
            }
        }
    }
}

// ---- remove ------------------------------------------------------------------------------

#[allow(clippy::too_many_arguments)]
async fn remove(
    ctx: &ExecCtx,
    site_name: &str,
    spec_name: &str,
    rec: &mut SpecRecord,
    node: &str,
    vmid: u32,
    release: bool,
) -> Outcome {
    let result: Result<Outcome, ActionError> = async {
        let site = site(ctx, site_name)?;
        let client = &site.client;
        if let Phase::Deleting { upid: Some(upid) } = &rec.phase
            && let Ok(upid) = upid.parse::<Upid>()
        {
            match wait(ctx, client, &upid, rec).await {
                Ok(TaskOutcome::StillRunning) => {
                    return Ok(Outcome::StillRunning {
                        upid: upid.to_string(),
                    });
                }
                Ok(_) => {
                    ctx.store.remove(spec_name)?;
                    return Ok(Outcome::Done);
                }
                Err(_) => {} // fall through: look again and retry the delete
            }
        }
        let cfg = match client.vm_config(node, vmid).await {
            Ok(c) => c,
            Err(e) if e.is_not_found() => {
                if let Phase::Creating { .. } = rec.phase {
                    // The spec went away while its create was in flight. A task still making
                    // the VM is waited for (then the VM is deleted); no task: the request never
                    // took effect, and the intent is dropped.
                    if let Some(task) = client.active_vm_tasks(node, vmid).await?.first() {
                        return Ok(Outcome::Waiting {
                            reason: format!(
                                "the create of VM {vmid} is still running ({}); deleting it after",
                                task.upid
                            ),
                        });
                    }
                    ctx.store.release_vmid(site_name, vmid)?;
                }
                ctx.store.remove(spec_name)?;
                return Ok(Outcome::Done);
            }
            Err(e) => return Err(e.into()),
        };
        let ours = cfg
            .description()
            .and_then(Marker::parse)
            .is_some_and(|m| m.install == ctx.install_id && m.spec == spec_name);
        if !ours {
            tracing::warn!(
                spec = spec_name,
                vmid,
                "VM does not carry the spec's marker: forgetting it, not touching it"
            );
            ctx.store.remove(spec_name)?;
            return Ok(Outcome::Done);
        }
        if let Some(waiting) = check_lock(site, node, vmid, &cfg).await? {
            return Ok(waiting);
        }
        if release {
            // Drop ownership: the tag and the marker go; the VM stays as it is.
            let tag = ownership_tag(&ctx.install_id);
            let tags: Vec<String> = cfg.tags().into_iter().filter(|t| *t != tag).collect();
            let description: String = cfg
                .description()
                .unwrap_or("")
                .lines()
                .filter(|l| !l.contains(crate::ownership::MARKER_PREFIX))
                .collect::<Vec<_>>()
                .join("\n");
            let mut params = VmParams::new().set(
                "description",
                format!("{description}\nReleased by proxsync."),
            );
            params = if tags.is_empty() {
                params.delete_keys(&["tags"])
            } else {
                params.tags(&tags)?
            };
            client.set_config(node, vmid, &params, cfg.digest()).await?;
            tracing::info!(spec = spec_name, vmid, "released (deletionPolicy: Orphan)");
            ctx.store.remove(spec_name)?;
            return Ok(Outcome::Done);
        }
        let running = client.vm_running(node, vmid).await?;
        if running && let Some(o) = power_off(ctx, site, node, vmid, rec).await? {
            return Ok(o);
        }
        // Identity once more, just before the delete.
        let cfg = client.vm_config(node, vmid).await?;
        if !cfg
            .description()
            .and_then(Marker::parse)
            .is_some_and(|m| m.install == ctx.install_id && m.spec == spec_name)
        {
            return Err(fail(
                Category::Conflict,
                format!("VM {vmid} changed identity during the delete; not deleting"),
            ));
        }
        let seeds: Vec<String> = seed_slots(&cfg, &ctx.install_id, spec_name)
            .into_iter()
            .filter_map(|(_, v)| v.split_once(':').map(|(s, _)| s.to_string()))
            .collect();
        let upid = client.delete_vm(node, vmid, true, true).await?;
        rec.phase = Phase::Deleting {
            upid: Some(upid.to_string()),
        };
        ctx.store.put(spec_name, rec)?;
        tracing::info!(spec = spec_name, vmid, upid = %upid, "deleting");
        match wait(ctx, client, &upid, rec).await? {
            TaskOutcome::StillRunning => Ok(Outcome::StillRunning {
                upid: upid.to_string(),
            }),
            _ => {
                ctx.store.remove(spec_name)?;
                // The VM's seed images go with it (best effort).
                for storage in seeds {
                    remove_old_seeds(ctx, client, node, &storage, spec_name, &[]).await;
                }
                Ok(Outcome::Done)
            }
        }
    }
    .await;
    result.unwrap_or_else(Outcome::Failed)
}

async fn forget(ctx: &ExecCtx, spec_name: &str, rec: &SpecRecord) -> Outcome {
    let result = (|| {
        if let Phase::Creating { vmid, .. } = rec.phase {
            ctx.store.release_vmid(&rec.site, vmid)?;
        }
        ctx.store.remove(spec_name)?;
        Ok::<_, ActionError>(Outcome::Done)
    })();
    result.unwrap_or_else(Outcome::Failed)
}

async fn delete_orphan(ctx: &ExecCtx, site_name: &str, node: &str, vmid: u32) -> Outcome {
    let result: Result<Outcome, ActionError> = async {
        let site = site(ctx, site_name)?;
        let client = &site.client;
        let cfg = client.vm_config(node, vmid).await?;
        let tag = ownership_tag(&ctx.install_id);
        let ours = cfg.tags().contains(&tag)
            && cfg
                .description()
                .and_then(Marker::parse)
                .is_some_and(|m| m.install == ctx.install_id);
        if !ours {
            return Err(fail(
                Category::Conflict,
                format!("VM {vmid} is not ours any more; not deleting"),
            ));
        }
        if cfg.lock().is_some() {
            return Ok(Outcome::Waiting {
                reason: format!("orphan {vmid} is locked"),
            });
        }
        tracing::info!(
            vmid,
            node,
            "deleting a stopped orphan past its grace period"
        );
        let upid = client.delete_vm(node, vmid, true, true).await?;
        let mut scratch = SpecRecord::default();
        match wait(ctx, client, &upid, &mut scratch).await? {
            TaskOutcome::StillRunning => Ok(Outcome::StillRunning {
                upid: upid.to_string(),
            }),
            _ => Ok(Outcome::Done),
        }
    }
    .await;
    result.unwrap_or_else(Outcome::Failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_disk_is_found() {
        let cfg: VmConfig = serde_json::from_str(
            r#"{"boot":"order=scsi0;ide2","scsi0":"local-lvm:vm-100-disk-0,size=2G","ide2":"local:iso/x.iso,media=cdrom"}"#,
        )
        .unwrap();
        assert_eq!(boot_disk(&cfg), Some(("scsi0".into(), 2 << 30)));
        let cfg: VmConfig =
            serde_json::from_str(r#"{"virtio0":"local-lvm:vm-100-disk-0,size=10G"}"#).unwrap();
        assert_eq!(boot_disk(&cfg), Some(("virtio0".into(), 10 << 30)));
    }
}
