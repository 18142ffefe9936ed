//! `proxsync adopt SPEC --vmid N`: a person's confirmation that a VM is a spec's.

use super::*;

/// `proxsync adopt NAME --vmid N`: a person confirms that VM `vmid` is spec `name`'s although
/// its marker does not verify (the marker key was lost, or the VM comes from a release before
/// signing). The VM must carry this install's marker naming the spec; the record written here
/// vouches for it, and the next cycle converges it and signs its marker. A sharded install
/// (`[source] selector`) also takes a VM another install handed over without a shared marker
/// key: its marker names the spec, no install's tag is left on it, and it is signed over to
/// this install at once. Needs the state database, so it runs while the daemon is stopped.
// Long because: the refusals in the order a person meets them (spec, selector, VM, marker,
// tags), then the one takeover; each check names what to do.
pub async fn adopt_by_hand(
    config: &Config,
    specs: &SpecSet,
    name: &str,
    vmid: u32,
) -> Result<String, EngineError> {
    let refused = |m: String| EngineError::Refused(m);
    let spec = specs
        .specs
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| refused(format!("no valid spec named {name} in the source")))?;
    if !config.selects(&spec.labels) {
        return Err(refused(format!(
            "spec {name} is outside [source] selector = \"{}\": another install manages it",
            config
                .source
                .selector
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default()
        )));
    }
    let sites = site_clients(config)?;
    let site = sites
        .get(&spec.site)
        .ok_or_else(|| refused(format!("site {} is not configured", spec.site)))?;
    let store = Store::open(&config.state_dir).map_err(|e| {
        refused(format!(
            "{e}; if the daemon runs, stop it (systemctl stop proxsync), adopt, and start it again"
        ))
    })?;
    let mut records = store.specs()?;
    let mut rec = records.remove(name).unwrap_or_default();
    if let Some(other) = rec.vmid().filter(|v| *v != vmid) {
        return Err(refused(format!(
            "spec {name} already maps to VM {other}; nothing changed"
        )));
    }
    // A take-over on another cluster than the site's would bind the spec to a stranger's VM.
    let checked = SiteChecks::new(&config.state_dir, true)
        .check_now(&spec.site, &site.client)
        .await
        .map_err(|e| refused(format!("{e}; nothing changed")))?;
    let site_err = |e: crate::pve::Error| EngineError::Site {
        site: spec.site.clone(),
        message: e.to_string(),
    };
    let (node, cfg) = crate::execute::find_vm(&site.client, vmid)
        .await
        .map_err(site_err)?
        .ok_or_else(|| refused(format!("VM {vmid} does not exist on site {}", spec.site)))?;
    let handed = config.source.selector.is_some();
    let marker = cfg
        .description()
        .and_then(Marker::parse)
        .filter(|m| (m.install == config.install_id || handed) && m.spec == name)
        .ok_or_else(|| {
            refused(format!(
                "VM {vmid} does not carry the marker of spec {name} of install {}; proxsync adopts \
                 only a VM whose description has that proxsync-id line",
                config.install_id
            ))
        })?;
    if marker.install != config.install_id {
        take_over_by_hand(config, &site.client, &checked, &node, vmid, &cfg, &marker).await?;
    }
    rec.uid = marker.uid;
    rec.site = spec.site.clone();
    rec.adopted = true;
    rec.provisioned = true;
    rec.orphan_on_delete = spec.deletion_policy == crate::spec::DeletionPolicy::Orphan;
    rec.note(now_ms(), "adopt", "confirmed by hand (proxsync adopt)");
    let adopted = crate::store::VmState::Exists {
        vmid,
        node: node.clone(),
    };
    store.transition(name, &mut rec, adopted)?;
    Ok(format!(
        "VM {vmid} on {}/{node} is now spec {name}'s; the next cycle converges it and signs its \
         marker",
        spec.site
    ))
}

/// `proxsync adopt` of a VM another install handed over without sharing its marker key: only
/// once released (no install's ownership tag left), signed over to this install at once (its
/// marker for this install and key, this install's tag).
pub(super) async fn take_over_by_hand(
    config: &Config,
    client: &Client,
    checked: &crate::gate::site::SiteChecked,
    node: &str,
    vmid: u32,
    cfg: &crate::pve::types::VmConfig,
    marker: &Marker,
) -> Result<(), EngineError> {
    // The person named the spec and the VM: that confirmation, on a checked site, is the
    // gate's evidence for a marker this install cannot verify.
    let by_hand = crate::gate::permit::ByHand {
        spec: &marker.spec,
        vmid,
    };
    let permit = crate::gate::permit::adopt_by_hand(
        checked,
        by_hand,
        &config.install_id,
        cfg.description(),
        &cfg.tags(),
    )
    .map_err(EngineError::Refused)?;
    let key_path = config.marker_key_path();
    let key = MarkerKey::load_or_create_file(&key_path).map_err(|message| EngineError::Status {
        path: key_path.display().to_string(),
        message,
    })?;
    let signed = Marker::signed(&key, &config.install_id, &marker.spec, &marker.uid, vmid);
    crate::execute::sign_over(client, node, vmid, cfg, &signed, &permit)
        .await
        .map_err(|e| EngineError::Refused(format!("VM {vmid}: {e}; nothing changed")))
}
