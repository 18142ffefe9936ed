//! Keeping a VM's HA resource as its spec's `ha` says: added when missing, changed when it
//! differs, removed when the spec drops `ha` and proxsync had added it (one a person added is
//! left alone).

use crate::pve::Pve;
use crate::pve::ha::HaParams;
use crate::spec::Spec;
use crate::state::SpecRecord;

use super::{ActionError, SiteCtx};

/// Returns whether anything changed.
pub(super) async fn converge_ha(
    site: &SiteCtx<impl Pve>,
    install_id: &str,
    vmid: u32,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<bool, ActionError> {
    let client = &site.client;
    let Some(ha) = &spec.ha else {
        if !rec.ha_applied {
            return Ok(false);
        }
        if client.ha_resource(vmid).await?.is_some() {
            tracing::info!(spec = %spec.name, vmid, "removing the HA resource (ha removed from the spec)");
            client.remove_ha_resource(vmid).await?;
        }
        rec.ha_applied = false;
        return Ok(true);
    };
    let want = HaParams {
        state: ha.state.as_str().to_string(),
        group: ha.group.clone(),
        max_restart: ha.max_restart,
        max_relocate: ha.max_relocate,
        comment: format!("proxsync {install_id}: spec {}", spec.name),
    };
    let changed = match client.ha_resource(vmid).await? {
        None => {
            tracing::info!(spec = %spec.name, vmid, state = %want.state, "adding the VM to the HA manager");
            client.add_ha_resource(vmid, &want).await?;
            true
        }
        Some(current) if want.differs_from(&current) => {
            tracing::info!(spec = %spec.name, vmid, "updating the VM's HA resource");
            client
                .update_ha_resource(vmid, &want, current.digest.as_deref())
                .await?;
            true
        }
        Some(_) => false,
    };
    rec.ha_applied = true;
    Ok(changed)
}
