//! Keeps each `ProxmoxImage`'s volume on the storages that need it: PVE downloads it
//! (`download-url`, with the checksum), proxsync only asks and watches the task.
//!
//! Where an image is needed: on the nodes it names and on the node of every guest made from
//! it; on a shared storage once. Each (node, storage, file) is a target; per cycle a target
//! costs nothing while it was seen present within [`RECHECK`], else one storage listing, and
//! a download when the listing lacks the file or when this daemon has not yet seen PVE check
//! the file's checksum (a file of that name put there by someone else, or after a restart):
//! PVE then hashes the file there and ends the task at once ("OK, got correct file already")
//! or fails it (checksum mismatch), so no guest is made from bytes never checked. A download
//! that fails is not sent again before its backoff ends ([`retry_after`]): a wrong checksum or
//! a dead URL does not become one request per cycle. The file name carries the checksum, so a
//! new version is a new target and nothing in use is overwritten. A restart forgets running
//! tasks: a download still running then is sent again and, the file not being there yet, PVE
//! fetches it a second time (two temporary files, the last rename wins; same bytes).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::execute::SiteCtx;
use crate::observe::SiteView;
use crate::pve::types::NodeStorage;
use crate::pve::{Download, Pve, Upid};
use crate::spec::images::ImageSpec;
use crate::spec::{Image, SpecSet};

/// A volume seen present is listed again after this long (it may have been removed by hand).
const RECHECK: Duration = Duration::from_secs(3600);

/// The first wait before a failed download is tried again; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(300);
/// The longest wait before a failed download is tried again.
const MAX_RETRY: Duration = Duration::from_secs(6 * 3600);

/// What an image is this cycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum ImageState {
    /// Every volume it needs is there with its checksum.
    #[serde(rename_all = "camelCase")]
    Ready {
        /// The volume ID.
        volume: String,
        /// The nodes it was found on (one for a shared storage).
        nodes: Vec<String>,
    },
    /// PVE is downloading it.
    #[serde(rename_all = "camelCase")]
    Downloading {
        /// A node it is downloaded to.
        node: String,
        /// The task's UPID.
        upid: String,
    },
    /// A download failed, or cannot be sent: PVE's words, and when it is tried again.
    #[serde(rename_all = "camelCase")]
    Failed {
        /// The node it failed on.
        node: String,
        /// What PVE (or the check before sending) said.
        message: String,
        /// When it is tried again (unix ms).
        retry_at_ms: u64,
    },
    /// Nothing can be done now: the site or the node cannot be reached.
    #[serde(rename_all = "camelCase")]
    Waiting {
        /// Why.
        why: String,
    },
}

impl ImageState {
    /// Whether guests may be made from it.
    pub fn is_ready(&self) -> bool {
        matches!(self, ImageState::Ready { .. })
    }

    /// Why guests made from it wait, in words (`None`: Ready).
    pub fn waiting_why(&self) -> Option<String> {
        match self {
            ImageState::Ready { .. } => None,
            ImageState::Downloading { node, upid } => {
                Some(format!("PVE is downloading it on {node} (task {upid})"))
            }
            ImageState::Failed { node, message, .. } => {
                Some(format!("its download on {node} failed: {message}"))
            }
            ImageState::Waiting { why } => Some(why.clone()),
        }
    }
}

/// One place an image is kept.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Target {
    site: String,
    node: String,
    storage: String,
    volume: String,
}

/// What is known of a target between cycles.
#[derive(Debug, Clone)]
enum Known {
    Present {
        seen_ms: u64,
    },
    Downloading {
        upid: Upid,
        /// The failures before it: its own failure is the next.
        attempts: u32,
    },
    Failed {
        message: String,
        retry_at_ms: u64,
        attempts: u32,
    },
}

/// The daemon's memory of its images' targets (lost on restart: a target is then listed and
/// checked again, and a download running then is sent again). A target's memory is kept while
/// an image of the spec set names its volume, whether or not its site was read this cycle.
#[derive(Debug, Default)]
pub(crate) struct ImageSync {
    known: HashMap<Target, Known>,
    /// Whether a storage of a site is shared, as its last listing said: a shared storage's
    /// volume seen on one node is not looked for on the others.
    shared: HashMap<(String, String), bool>,
    /// This cycle's listings, read once per site, node and content (storages) or per site,
    /// node, storage and content (volumes), whatever the number of images: emptied each cycle.
    listings: Listings,
    /// What each image (by site and volume) was when its site was last looked at: a cycle
    /// after a push to another site says it again instead of "not looked at".
    last: HashMap<(String, String), (ImageState, BTreeMap<String, String>)>,
}

/// A listing as read: what PVE answered, or its error.
type Listed<T> = Result<Vec<T>, crate::pve::Error>;

/// A cycle's storage listings: site, node, (storage,) content.
#[derive(Debug, Default)]
struct Listings {
    storages: HashMap<(String, String, String), Listed<NodeStorage>>,
    /// The volume IDs.
    volumes: HashMap<(String, String, String, String), Listed<String>>,
}

/// How long after its `attempts`-th failure a download is tried again.
fn retry_after(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// The nodes each of `images` is needed on: those it names and those of `specs` made from it.
/// What the daemon downloads to, `plan` shows and `doctor` checks the privileges of.
pub(crate) fn needed_on<'a>(
    images: &'a [Arc<ImageSpec>],
    specs: impl IntoIterator<Item = &'a crate::spec::Spec>,
) -> BTreeMap<&'a str, BTreeSet<&'a str>> {
    let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for image in images {
        out.entry(image.name.as_str())
            .or_default()
            .extend(image.nodes.iter().map(String::as_str));
    }
    for spec in specs {
        if let Image::Managed(name) = spec.image()
            && let Some(nodes) = out.get_mut(name.as_str())
        {
            nodes.insert(spec.node.as_str());
            // A set member placed by free memory may go to any of its candidates: the image
            // is kept on each, so the member's create never waits on where it lands.
            let candidates = spec.set.as_ref().and_then(|m| m.candidates.as_deref());
            nodes.extend(candidates.into_iter().flatten().map(String::as_str));
        }
    }
    out
}

/// What a cycle's image work is given besides the specs.
pub(crate) struct SyncCtx<'a, P> {
    pub views: &'a BTreeMap<String, SiteView>,
    /// The sites observed this cycle: only these are acted on.
    pub sites: &'a BTreeMap<String, Arc<SiteCtx<P>>>,
    /// Where a download is recorded before it is asked for.
    pub store: &'a crate::store::Store,
    pub now_ms: u64,
    pub task_wait: Duration,
    /// False for an observe-only install or `suspend --all`: nothing is downloaded or deleted,
    /// only listed.
    pub may_act: bool,
    /// Old versions may be deleted this cycle (a full cycle that may remove, see [`Prune`]).
    pub prune: Option<Prune>,
}

/// What deleting old image versions is judged on (`gate::volume::image_unused`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Prune {
    /// Every spec file of the source was read, and it holds a spec or an image.
    pub source_complete: bool,
    /// `[reconcile] orphan_grace`: how long a version is unused before it goes.
    pub grace_ms: u64,
}

/// What a cycle's image work found.
#[derive(Debug, Default)]
pub(crate) struct Synced {
    /// Each image by name.
    pub states: BTreeMap<String, ImageState>,
    /// Per (image, node) that needs it and lacks it: why. A guest's create waits on its own
    /// node's entry only.
    pub waiting: BTreeMap<(String, String), String>,
    /// Recorded versions no image names: each kept (why) or deleted this cycle.
    pub unused: Vec<UnusedVersion>,
}

/// A version of an image no `ProxmoxImage` names any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnusedVersion {
    pub image: String,
    pub volume: String,
    pub node: String,
    /// `None`: deleted this cycle; else why it is kept, in words.
    pub kept: Option<String>,
}

impl ImageSync {
    /// Brings every image of `specs` to the storages that need it, as far as one cycle can:
    /// lists, downloads, waits for a download up to `task_wait`; then (with `prune`) deletes
    /// the recorded versions no image names, through the gate. Sites not in `sites` (not
    /// observed this cycle) are left as they are.
    pub(crate) async fn sync<P: Pve>(&mut self, specs: &SpecSet, cx: &SyncCtx<'_, P>) -> Synced {
        let needed = needed_on(&specs.images, specs.specs.iter());
        self.listings = Listings::default();
        // Every download is asked for first, then all are waited for together (one task wait,
        // not one per node and image), then each image is judged again.
        let mut out = self.each_image(specs, &needed, cx).await;
        let running = self.running(cx);
        if !running.is_empty() && !cx.task_wait.is_zero() {
            let mut waits = tokio::task::JoinSet::new();
            for (site, upid) in running {
                let wait = cx.task_wait;
                waits.spawn(async move { site.client.wait_task(&upid, wait).await.ok() });
            }
            while waits.join_next().await.is_some() {}
            out = self.each_image(specs, &needed, cx).await;
        }
        // What is known of a volume some image still names is kept, whatever this cycle could
        // look at: a site not read, or a node not reached, does not reset a backoff nor forget
        // a running download.
        let wanted: BTreeSet<(&str, &str, String)> = (specs.images.iter())
            .map(|i| (i.site.as_str(), i.storage.as_str(), i.volume_id()))
            .collect();
        // A target no image needs any more is forgotten (its volume is left where it is).
        self.known.retain(|t, _| {
            wanted.contains(&(t.site.as_str(), t.storage.as_str(), t.volume.clone()))
        });
        let named: BTreeSet<(&str, String)> = (specs.images.iter())
            .map(|i| (i.site.as_str(), i.volume_id()))
            .collect();
        self.last
            .retain(|(site, volume), _| named.contains(&(site.as_str(), volume.clone())));
        if cx.may_act
            && let Some(prune) = cx.prune
        {
            out.unused = self.prune(specs, cx, prune).await;
        }
        out
    }

    /// The downloads running on the sites observed this cycle, with their sites.
    fn running<P: Pve>(&self, cx: &SyncCtx<'_, P>) -> Vec<(Arc<SiteCtx<P>>, Upid)> {
        (self.known.iter())
            .filter_map(|(t, known)| match known {
                Known::Downloading { upid, .. } => {
                    Some((cx.sites.get(&t.site)?.clone(), upid.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Each image judged once, asking for what it lacks without waiting for a task.
    async fn each_image<P: Pve>(
        &mut self,
        specs: &SpecSet,
        needed: &BTreeMap<&str, BTreeSet<&str>>,
        cx: &SyncCtx<'_, P>,
    ) -> Synced {
        let mut out = Synced::default();
        for image in &specs.images {
            let nodes = needed.get(image.name.as_str()).cloned().unwrap_or_default();
            let wait_all = |why: String, out: &mut Synced| {
                for node in &nodes {
                    let key = (image.name.clone(), node.to_string());
                    out.waiting.insert(key, why.clone());
                }
                out.states
                    .insert(image.name.clone(), ImageState::Waiting { why });
            };
            let at = (image.site.clone(), image.volume_id());
            let (Some(site), Some(view)) = (cx.sites.get(&image.site), cx.views.get(&image.site))
            else {
                match self.last.get(&at) {
                    Some((state, waiting)) => {
                        for (node, why) in waiting {
                            out.waiting
                                .insert((image.name.clone(), node.clone()), why.clone());
                        }
                        out.states.insert(image.name.clone(), state.clone());
                    }
                    None => wait_all(
                        format!("site {} was not looked at this cycle", image.site),
                        &mut out,
                    ),
                }
                continue;
            };
            if !cx.may_act {
                wait_all(
                    "proxsync takes no action (an observe-only install, or suspend --all)".into(),
                    &mut out,
                );
                continue;
            }
            let (state, waiting) = self.image(image, &nodes, site, view, cx).await;
            for (node, why) in &waiting {
                out.waiting
                    .insert((image.name.clone(), node.clone()), why.clone());
            }
            out.states.insert(image.name.clone(), state.clone());
            self.last.insert(at, (state, waiting));
        }
        out
    }

    /// One image on the nodes that need it: its state, and why each node lacking it lacks it.
    async fn image<P: Pve>(
        &mut self,
        image: &ImageSpec,
        nodes: &BTreeSet<&str>,
        site: &SiteCtx<P>,
        view: &SiteView,
        cx: &SyncCtx<'_, P>,
    ) -> (ImageState, BTreeMap<String, String>) {
        // A task is not waited for here: `sync` waits for all of them together.
        let (now_ms, task_wait) = (cx.now_ms, Duration::ZERO);
        if !view.reachable() {
            let why = format!("site {} cannot be reached", image.site);
            let waiting = (nodes.iter())
                .map(|n| (n.to_string(), why.clone()))
                .collect();
            return (ImageState::Waiting { why }, waiting);
        }
        let volume = image.volume_id();
        // A storage is shared or not as storage.cfg says: asked of the first node.
        let first = match nodes.iter().next() {
            Some(n) => n.to_string(),
            None => match view
                .members()
                .and_then(|m| m.into_iter().find(|n| view.node_healthy(n)))
            {
                Some(n) => n.to_string(),
                None => {
                    let why = "no guest uses it and it names no nodes: no node needs it";
                    return (ImageState::Waiting { why: why.into() }, BTreeMap::new());
                }
            },
        };
        let mut nodes: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
        if nodes.is_empty() {
            nodes.push(first.clone());
        }
        let mut found = Vec::new();
        let mut waiting = BTreeMap::new();
        let mut problem = None;
        let mut shared = (self.shared)
            .get(&(image.site.clone(), image.storage.clone()))
            .copied();
        // Each node on its own: one that cannot be served holds the guests of that node only.
        for node in nodes {
            let target = Target {
                site: image.site.clone(),
                node: node.clone(),
                storage: image.storage.clone(),
                volume: volume.clone(),
            };
            if shared == Some(true) && !found.is_empty() {
                break;
            }
            if !view.node_healthy(&node) {
                let why = format!("node {node} is not healthy");
                problem.get_or_insert(ImageState::Waiting { why: why.clone() });
                waiting.insert(node, why);
                continue;
            }
            match self
                .target(
                    image,
                    &target,
                    site,
                    now_ms,
                    task_wait,
                    cx.store,
                    &mut shared,
                )
                .await
            {
                ImageState::Ready { .. } => found.push(node),
                other => {
                    waiting.insert(node, other.waiting_why().unwrap_or_default());
                    problem.get_or_insert(other);
                }
            }
        }
        // One copy on a shared storage serves every node.
        if shared == Some(true) && !found.is_empty() {
            return (
                ImageState::Ready {
                    volume,
                    nodes: found,
                },
                BTreeMap::new(),
            );
        }
        let state = problem.unwrap_or(ImageState::Ready {
            volume,
            nodes: found,
        });
        (state, waiting)
    }

    /// One target: known present, listed, or downloaded. `shared` is set from the node's
    /// storage listing when it is read.
    #[allow(clippy::too_many_arguments)]
    async fn target<P: Pve>(
        &mut self,
        image: &ImageSpec,
        target: &Target,
        site: &SiteCtx<P>,
        now_ms: u64,
        task_wait: Duration,
        store: &crate::store::Store,
        shared: &mut Option<bool>,
    ) -> ImageState {
        let ready = || ImageState::Ready {
            volume: target.volume.clone(),
            nodes: vec![target.node.clone()],
        };
        let node = target.node.as_str();
        let attempts = match self.known.get(target) {
            Some(Known::Present { seen_ms })
                if now_ms.saturating_sub(*seen_ms) < RECHECK.as_millis() as u64 =>
            {
                return ready();
            }
            Some(Known::Failed {
                message,
                retry_at_ms,
                ..
            }) if now_ms < *retry_at_ms => {
                return ImageState::Failed {
                    node: node.to_string(),
                    message: message.clone(),
                    retry_at_ms: *retry_at_ms,
                };
            }
            Some(Known::Downloading { upid, attempts }) => {
                let (upid, attempts) = (upid.clone(), *attempts);
                return (self.watch(target, site, upid, now_ms, task_wait, attempts)).await;
            }
            Some(Known::Failed { attempts, .. }) => *attempts,
            _ => 0,
        };
        let content = image.content.as_str();
        let fail = |this: &mut ImageSync, message: String| {
            this.failed(target, node, message, now_ms, attempts + 1)
        };
        // A file of the volume's name is used as it is only when this daemon saw PVE check its
        // checksum (its download, or PVE's check of the file already there); else it is sent
        // as a download, which PVE answers at once for the right bytes and fails for others.
        let verified = matches!(self.known.get(target), Some(Known::Present { .. }));
        let there = match self.look(image, target, site, shared).await {
            Ok(true) if verified => {
                self.known
                    .insert(target.clone(), Known::Present { seen_ms: now_ms });
                return ready();
            }
            Ok(there) => there,
            Err(why) => return fail(self, why),
        };
        // A file this download makes is this install's: recorded, durably, before it is asked
        // for, so a version no image names any more can be deleted however the daemon ends.
        // A file already there (only checked) is recorded only if it was before.
        if !there {
            let key = (target.site.clone(), node.to_string(), target.volume.clone());
            let rec = crate::store::ImageVolume {
                image: image.name.clone(),
                recorded_ms: now_ms,
                unused_since_ms: None,
            };
            if let Err(e) = store.put_image_volume(&key, &rec) {
                return fail(self, format!("cannot record the download: {e}"));
            }
        }
        let download = Download {
            url: image.url.clone(),
            content: content.to_string(),
            filename: image.filename.clone(),
            checksum_algorithm: image.checksum.algorithm.as_str().to_string(),
            checksum: image.checksum.hex.clone(),
        };
        tracing::info!(
            image = %image.name,
            node,
            volume = %target.volume,
            url = %image.url,
            "asking PVE to download the image"
        );
        match site
            .client
            .download_url(node, &image.storage, &download)
            .await
        {
            Ok(upid) => {
                self.watch(target, site, upid, now_ms, task_wait, attempts)
                    .await
            }
            Err(e) => fail(self, e.to_string()),
        }
    }

    /// Whether `target`'s node lists its volume, from this cycle's listings (read once per
    /// node, storage and content); `shared` is set from the node's storage listing. `Err`:
    /// why it cannot be known, or the storage does not hold the content.
    async fn look<P: Pve>(
        &mut self,
        image: &ImageSpec,
        target: &Target,
        site: &SiteCtx<P>,
        shared: &mut Option<bool>,
    ) -> Result<bool, String> {
        let (node, content) = (target.node.as_str(), image.content.as_str());
        let key = (target.site.clone(), node.to_string(), content.to_string());
        if !self.listings.storages.contains_key(&key) {
            let listed = site.client.node_storages(node, Some(content)).await;
            self.listings.storages.insert(key.clone(), listed);
        }
        let storages = match &self.listings.storages[&key] {
            Ok(s) => s,
            Err(e) => return Err(format!("cannot list the storages of {node}: {e}")),
        };
        let Some(storage) = storages.iter().find(|s| s.storage == image.storage) else {
            return Err(format!(
                "storage {} on node {node} does not hold `{content}` content (or is not \
                 active); storages that do: {}",
                image.storage,
                names_or_none(storages.iter().map(|s| s.storage.as_str()))
            ));
        };
        let is_shared = storage.shared == Some(true);
        *shared = Some(is_shared);
        (self.shared).insert((target.site.clone(), target.storage.clone()), is_shared);
        let key = (
            target.site.clone(),
            node.to_string(),
            image.storage.clone(),
            content.to_string(),
        );
        if !self.listings.volumes.contains_key(&key) {
            let listed = (site.client)
                .storage_content(node, &image.storage, Some(content))
                .await
                .map(|v| v.into_iter().map(|v| v.volid).collect());
            self.listings.volumes.insert(key.clone(), listed);
        }
        match &self.listings.volumes[&key] {
            Ok(volumes) => Ok(volumes.contains(&target.volume)),
            Err(e) => Err(format!("cannot list {}: {e}", image.storage)),
        }
    }

    /// The recorded versions no image of the source names, on the sites observed this cycle:
    /// each deleted through the gate (`gate::volume::image_unused`), or kept, with why.
    async fn prune<P: Pve>(
        &mut self,
        specs: &SpecSet,
        cx: &SyncCtx<'_, P>,
        prune: Prune,
    ) -> Vec<UnusedVersion> {
        let recorded = match cx.store.image_volumes() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the recorded image volumes");
                return Vec::new();
            }
        };
        let current: BTreeSet<(String, String)> = (specs.images.iter())
            .map(|i| (i.site.clone(), i.volume_id()))
            .collect();
        let mut out = Vec::new();
        for (key, rec) in recorded {
            let (site_name, node, volid) = (&key.0, &key.1, &key.2);
            let is_current = current.contains(&(site_name.clone(), volid.clone()));
            let since = unused_since(cx.store, &key, &rec, is_current, cx.now_ms);
            if is_current {
                continue;
            }
            let (Some(site), Some(view)) = (cx.sites.get(site_name), cx.views.get(site_name))
            else {
                continue;
            };
            let Ok(checked) = crate::gate::site::checked(view) else {
                continue;
            };
            let mut kept = |why: String| {
                out.push(UnusedVersion {
                    image: rec.image.clone(),
                    volume: volid.clone(),
                    node: node.clone(),
                    kept: Some(why),
                })
            };
            if view.incomplete() || !view.node_healthy(node) {
                kept(format!(
                    "{volid} is kept this cycle: the site's listing is incomplete or node {node} \
                     is not healthy"
                ));
                continue;
            }
            // A guest being created or cloned may be importing from a volume of the storage.
            let importing: Vec<u32> = (view.vms.values())
                .filter(|vm| matches!(vm.lock.as_deref(), Some("create" | "clone")))
                .map(|vm| vm.vmid)
                .collect();
            let unused = crate::gate::volume::ImageUnused {
                volid,
                recorded: true,
                current: false,
                source_complete: prune.source_complete,
                importing: &importing,
                unused_since_ms: since,
                grace_ms: prune.grace_ms,
                now_ms: cx.now_ms,
            };
            let permit = match crate::gate::volume::image_unused(&checked, unused) {
                Ok(permit) => permit,
                Err(why) => {
                    kept(why.to_string());
                    continue;
                }
            };
            match delete_version(site, node, volid, &permit, cx.task_wait).await {
                Ok(false) => {
                    // Gone already (deleted by hand): only the record goes.
                    let _ = cx.store.remove_image_volume(&key);
                }
                Ok(true) => {
                    tracing::info!(
                        image = %rec.image,
                        volume = %volid,
                        node = %node,
                        "deleted an image version no ProxmoxImage names"
                    );
                    let _ = cx.store.remove_image_volume(&key);
                    out.push(UnusedVersion {
                        image: rec.image.clone(),
                        volume: volid.clone(),
                        node: node.clone(),
                        kept: None,
                    });
                }
                Err(e) => kept(format!("{volid} is kept: {e}")),
            }
        }
        out
    }

    /// Waits up to `task_wait` for download task `upid`.
    async fn watch<P: Pve>(
        &mut self,
        target: &Target,
        site: &SiteCtx<P>,
        upid: Upid,
        now_ms: u64,
        task_wait: Duration,
        attempts: u32,
    ) -> ImageState {
        match site.client.wait_task(&upid, task_wait).await {
            Ok(crate::pve::TaskOutcome::StillRunning) => {
                let state = ImageState::Downloading {
                    node: target.node.clone(),
                    upid: upid.to_string(),
                };
                self.known
                    .insert(target.clone(), Known::Downloading { upid, attempts });
                state
            }
            Ok(_) => {
                tracing::info!(volume = %target.volume, node = %target.node, "image downloaded");
                self.known
                    .insert(target.clone(), Known::Present { seen_ms: now_ms });
                ImageState::Ready {
                    volume: target.volume.clone(),
                    nodes: vec![target.node.clone()],
                }
            }
            Err(e) => {
                let message = match &e {
                    crate::pve::Error::TaskFailed { exitstatus, .. } => exitstatus.clone(),
                    other => other.to_string(),
                };
                self.failed(target, &target.node, message, now_ms, attempts + 1)
            }
        }
    }

    fn failed(
        &mut self,
        target: &Target,
        node: &str,
        message: String,
        now_ms: u64,
        attempts: u32,
    ) -> ImageState {
        let retry_at_ms = now_ms.saturating_add(retry_after(attempts).as_millis() as u64);
        tracing::warn!(
            volume = %target.volume,
            node,
            attempts,
            retry_at_ms,
            "the image's download failed: {message}"
        );
        self.known.insert(
            target.clone(),
            Known::Failed {
                message: message.clone(),
                retry_at_ms,
                attempts,
            },
        );
        ImageState::Failed {
            node: node.to_string(),
            message,
            retry_at_ms,
        }
    }
}

/// Since when recorded volume `key` is unused (now, the first time it is seen so, which is
/// recorded); a current one's mark is cleared (a revert).
fn unused_since(
    store: &crate::store::Store,
    key: &crate::store::ImageVolumeKey,
    rec: &crate::store::ImageVolume,
    current: bool,
    now_ms: u64,
) -> u64 {
    let want = (!current).then(|| rec.unused_since_ms.unwrap_or(now_ms));
    if want != rec.unused_since_ms {
        let rec = crate::store::ImageVolume {
            unused_since_ms: want,
            ..rec.clone()
        };
        if let Err(e) = store.put_image_volume(key, &rec) {
            tracing::warn!(error = %e, volume = %key.2, "cannot record the image volume's use");
        }
    }
    want.unwrap_or(now_ms)
}

/// Deletes image version `volid` from `node` with `permit`, when the node still lists it:
/// `Ok(true)` deleted, `Ok(false)` not there, `Err` why not.
async fn delete_version<P: Pve>(
    site: &SiteCtx<P>,
    node: &str,
    volid: &str,
    permit: &crate::gate::permit::Permit,
    task_wait: Duration,
) -> Result<bool, String> {
    let (storage, rest) = volid.split_once(':').ok_or("not a volume ID")?;
    let content = rest.split('/').next().unwrap_or_default();
    let listed = (site
        .client
        .storage_content(node, storage, Some(content))
        .await)
        .map_err(|e| format!("cannot list {storage}: {e}"))?;
    if !listed.iter().any(|v| v.volid == volid) {
        return Ok(false);
    }
    match site
        .client
        .delete_volume(node, storage, volid, permit)
        .await
    {
        Ok(Some(upid)) => match site.client.wait_task(&upid, task_wait).await {
            Ok(crate::pve::TaskOutcome::StillRunning) => Err("its delete task still runs".into()),
            Ok(_) => Ok(true),
            Err(e) => Err(format!("its delete failed: {e}")),
        },
        Ok(None) => Ok(true),
        Err(e) => Err(format!("its delete failed: {e}")),
    }
}

fn names_or_none<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    match names.is_empty() {
        true => "none".into(),
        false => names.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_kept_on_every_node_a_free_memory_member_may_land_on() {
        let dir = tempfile::tempdir().unwrap();
        let sum = "a".repeat(64);
        let text = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {{name: noble}}\nspec:\n  \
             forProvider:\n    site: lab\n    url: https://h/x.qcow2\n    checksum: sha256:{sum}\n\
             ---\napiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata: {{name: web}}\nspec:\n  \
             replicas: 1\n  namePattern: \"web-{{index}}\"\n  placement: {{nodes: [pve1, pve2, pve3], \
             strategy: FreeMemory}}\n  template:\n    forProvider:\n      site: lab\n      \
             image: {{image: noble}}\n"
        );
        std::fs::write(dir.path().join("a.yaml"), text).unwrap();
        let set = crate::spec::load_paths(&[dir.path().to_path_buf()]);
        assert!(!set.has_errors(), "{:?}", set.diagnostics);
        let needed = needed_on(&set.images, set.specs.iter());
        let nodes: Vec<&str> = needed["noble"].iter().copied().collect();
        assert_eq!(nodes, ["pve1", "pve2", "pve3"]);
    }

    #[test]
    fn a_failed_download_waits_longer_each_time_up_to_six_hours() {
        assert_eq!(retry_after(1), Duration::from_secs(300));
        assert_eq!(retry_after(2), Duration::from_secs(600));
        assert_eq!(retry_after(50), MAX_RETRY);
    }
}
