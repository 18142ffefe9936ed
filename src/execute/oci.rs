//! A container's OCI image (`template: {oci: REFERENCE}`, PVE 9.1), pulled by PVE to the node's
//! `vztmpl` storage before the container is made from it: once per node, storage and image in a
//! cycle however many creates need it, before any VMID is reserved.

use std::sync::Arc;

use crate::category::Category;
use crate::pve::{Pve, TaskOutcome};

use super::preflight::Source;
use super::{ActionError, ExecCtx, SiteCtx, fail};

/// `source` ready to create from: an OCI image not yet on `node` ([`Source::OciPull`]) is pulled
/// first (`POST .../oci-registry-pull`, its task waited for) and becomes its `vztmpl` archive;
/// any other source is returned as it is. A failed pull fails the create with PVE's words (and
/// its backoff); one still running when the wait ends is looked at again at the next attempt.
pub(super) async fn pulled(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    node: &str,
    source: Source,
) -> Result<Source, ActionError> {
    let Source::OciPull {
        reference,
        storage,
        volume,
    } = source
    else {
        return Ok(source);
    };
    let key = (site.name.clone(), node.to_string(), volume.clone());
    let cell = ctx
        .node_facts
        .pulls
        .lock()
        .await
        .entry(key)
        .or_default()
        .clone();
    cell.get_or_try_init(|| async {
        let file = crate::spec::oci::file_stem(&reference);
        let client = &site.client;
        let upid = client
            .oci_registry_pull(node, &storage, &reference, &file)
            .await?;
        tracing::info!(%reference, node, %storage, %upid, "PVE pulls the OCI image");
        let failed = |why: String| {
            fail(
                Category::ProxmoxError,
                format!("PVE's pull of OCI image {reference} to {storage} on {node} {why}"),
            )
        };
        match super::wait_until_stop(ctx, client, &upid).await {
            Ok(TaskOutcome::StillRunning) => Err(failed(format!(
                "still runs (task {upid}); the create goes on once it ends"
            ))),
            Ok(_) => Ok(Arc::new(())),
            Err(e) => Err(failed(format!("failed: {}", e.pve_message()))),
        }
    })
    .await?;
    Ok(Source::OsTemplate { volume })
}
