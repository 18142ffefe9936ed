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
        }
    }
    out
}

impl ImageSync {
    /// Brings every image of `specs` to the storages that need it, as far as one cycle can:
    /// lists, downloads, waits for a download up to `task_wait`. Returns each image's state
    /// by name. Sites not in `sites` (not observed this cycle) are left as they are.
    pub(crate) async fn sync<P: Pve>(
        &mut self,
        specs: &SpecSet,
        views: &BTreeMap<String, SiteView>,
        sites: &BTreeMap<String, Arc<SiteCtx<P>>>,
        now_ms: u64,
        task_wait: Duration,
    ) -> BTreeMap<String, ImageState> {
        let needed = needed_on(&specs.images, specs.specs.iter());
        self.listings = Listings::default();
        let mut out = BTreeMap::new();
        // What is known of a volume some image still names is kept, whatever this cycle could
        // look at: a site not read, or a node not reached, does not reset a backoff nor forget
        // a running download.
        let wanted: BTreeSet<(&str, &str, String)> = (specs.images.iter())
            .map(|i| (i.site.as_str(), i.storage.as_str(), i.volume_id()))
            .collect();
        for image in &specs.images {
            let (Some(site), Some(view)) = (sites.get(&image.site), views.get(&image.site)) else {
                out.insert(
                    image.name.clone(),
                    ImageState::Waiting {
                        why: format!("site {} was not looked at this cycle", image.site),
                    },
                );
                continue;
            };
            let nodes = needed.get(image.name.as_str()).cloned().unwrap_or_default();
            let state = self
                .image(image, &nodes, site, view, now_ms, task_wait)
                .await;
            out.insert(image.name.clone(), state);
        }
        // A target no image needs any more is forgotten (its volume is left where it is).
        self.known.retain(|t, _| {
            wanted.contains(&(t.site.as_str(), t.storage.as_str(), t.volume.clone()))
        });
        out
    }

    async fn image<P: Pve>(
        &mut self,
        image: &ImageSpec,
        nodes: &BTreeSet<&str>,
        site: &SiteCtx<P>,
        view: &SiteView,
        now_ms: u64,
        task_wait: Duration,
    ) -> ImageState {
        if !view.reachable() {
            return ImageState::Waiting {
                why: format!("site {} cannot be reached", image.site),
            };
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
                    return ImageState::Waiting {
                        why: "no guest uses it and it names no nodes: no node needs it".into(),
                    };
                }
            },
        };
        let mut nodes: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
        if nodes.is_empty() {
            nodes.push(first.clone());
        }
        let mut found = Vec::new();
        let mut shared = (self.shared)
            .get(&(image.site.clone(), image.storage.clone()))
            .copied();
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
                return ImageState::Waiting {
                    why: format!("node {node} is not healthy"),
                };
            }
            match self
                .target(image, &target, site, now_ms, task_wait, &mut shared)
                .await
            {
                ImageState::Ready { .. } => found.push(node),
                other => return other,
            }
        }
        ImageState::Ready {
            volume,
            nodes: found,
        }
    }

    /// One target: known present, listed, or downloaded. `shared` is set from the node's
    /// storage listing when it is read.
    async fn target<P: Pve>(
        &mut self,
        image: &ImageSpec,
        target: &Target,
        site: &SiteCtx<P>,
        now_ms: u64,
        task_wait: Duration,
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
        let key = (target.site.clone(), node.to_string(), content.to_string());
        if !self.listings.storages.contains_key(&key) {
            let listed = site.client.node_storages(node, Some(content)).await;
            self.listings.storages.insert(key.clone(), listed);
        }
        let storages = match self.listings.storages[&key].clone() {
            Ok(s) => s,
            Err(e) => return fail(self, format!("cannot list the storages of {node}: {e}")),
        };
        let Some(storage) = storages.iter().find(|s| s.storage == image.storage) else {
            return fail(
                self,
                format!(
                    "storage {} on node {node} does not hold `{content}` content (or is not \
                     active); storages that do: {}",
                    image.storage,
                    names_or_none(storages.iter().map(|s| s.storage.as_str()))
                ),
            );
        };
        *shared = Some(storage.shared == Some(true));
        self.shared.insert(
            (target.site.clone(), target.storage.clone()),
            storage.shared == Some(true),
        );
        // A file of the volume's name is used as it is only when this daemon saw PVE check its
        // checksum (its download, or PVE's check of the file already there); else it is sent
        // as a download, which PVE answers at once for the right bytes and fails for others.
        let verified = matches!(self.known.get(target), Some(Known::Present { .. }));
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
        let listed = match &self.listings.volumes[&key] {
            Ok(volumes) => Ok(volumes.contains(&target.volume)),
            Err(e) => Err(e.to_string()),
        };
        match listed {
            Ok(true) if verified => {
                self.known
                    .insert(target.clone(), Known::Present { seen_ms: now_ms });
                return ready();
            }
            Ok(_) => {}
            Err(e) => return fail(self, format!("cannot list {}: {e}", image.storage)),
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
    fn a_failed_download_waits_longer_each_time_up_to_six_hours() {
        assert_eq!(retry_after(1), Duration::from_secs(300));
        assert_eq!(retry_after(2), Duration::from_secs(600));
        assert_eq!(retry_after(50), MAX_RETRY);
    }
}
