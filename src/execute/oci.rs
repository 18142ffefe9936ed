//! A container's OCI image (`template: {oci: REFERENCE}`, PVE 9.1), pulled by PVE to the node's
//! `vztmpl` storage before the container is made from it: once per node, storage and image in a
//! cycle however many creates need it, before any VMID is reserved.

use std::sync::Arc;

use crate::model::{Unfit, Wait};
use crate::pve::{Pve, TaskOutcome};

use super::preflight::Source;
use super::{ActionError, ExecCtx, SiteCtx, fail};

/// What a pull came to: the archive is there, or PVE still pulls it.
#[derive(Debug)]
pub(super) enum Pulled {
    /// Ready to create from.
    Ready(Source),
    /// The pull's task still runs when the wait ended: the create waits.
    Running(Wait),
}

/// `source` ready to create from: an OCI image not yet on `node` ([`Source::OciPull`]) is pulled
/// first (`POST .../oci-registry-pull`, its task waited for) and becomes its `vztmpl` archive;
/// any other source is returned as it is. A failed pull fails the create with PVE's words (and
/// its backoff); one still running when the wait ends is a wait, looked at again soon.
pub(super) async fn pulled(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    node: &str,
    source: Source,
) -> Result<Pulled, ActionError> {
    let Source::OciPull {
        shared,
        reference,
        storage,
        volume,
    } = source
    else {
        return Ok(Pulled::Ready(source));
    };
    // A shared storage holds one file for every node: one pull per storage, not per node.
    let place = (!shared).then(|| node.to_string());
    let key = (site.name.clone(), place, volume.clone());
    let cell = ctx
        .node_facts
        .pulls
        .lock()
        .await
        .entry(key)
        .or_default()
        .clone();
    let failed = |why: String| {
        let unfit = Unfit::OciPullFailed {
            reference: reference.clone(),
            storage: storage.clone(),
            node: node.to_string(),
            why,
        };
        fail(unfit.category(), unfit.to_string())
    };
    // A failed pull is remembered for the cycle too: every other create of the image on this
    // node fails with it, and none sends the pull again.
    let outcome = cell
        .get_or_init(|| async {
            let file = crate::spec::oci::file_stem(&reference);
            let client = &site.client;
            // A pull started earlier (a cycle whose wait ended first) is waited for, not sent
            // again: PVE would run a second skopeo beside it.
            let task_id = crate::spec::oci::archive(&reference);
            let running = (client.active_tasks(node).await.unwrap_or_default())
                .into_iter()
                .find(|t| {
                    t.kind.as_deref() == Some("ociregistrypull")
                        && t.id.as_deref() == Some(task_id.as_str())
                })
                .and_then(|t| t.upid.parse().ok());
            let upid = match running {
                Some(upid) => upid,
                None => match client
                    .oci_registry_pull(node, &storage, &reference, &file)
                    .await
                {
                    Ok(upid) => upid,
                    // The archive came after preflight's listing (a pull that just ended,
                    // another install's, another node's on a shared storage): PVE renames
                    // it into place only once skopeo is done, so it is whole.
                    Err(e) if e.meaning() == Some(crate::pve::texts::Meaning::FileExists) => {
                        return Arc::new(Ok(None));
                    }
                    Err(e) => return Arc::new(Err(failed(e.pve_message().to_string()))),
                },
            };
            tracing::info!(%reference, node, %storage, %upid, "PVE pulls the OCI image");
            Arc::new(match super::wait_until_stop(ctx, client, &upid).await {
                Ok(TaskOutcome::StillRunning) => Ok(Some(upid.to_string())),
                Ok(_) => Ok(None),
                Err(e) => Err(failed(e.pve_message().to_string())),
            })
        })
        .await
        .clone();
    let outcome = match outcome.as_ref() {
        Ok(o) => o.clone(),
        Err(e) => return Err(e.clone()),
    };
    Ok(match outcome {
        Some(upid) => Pulled::Running(Wait::OciPulling {
            reference,
            node: node.to_string(),
            upid,
        }),
        None => Pulled::Ready(Source::OsTemplate { volume }),
    })
}
