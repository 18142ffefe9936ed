//! `proxsync adopt SPEC --vmid N`: a person's confirmation that a VM is a spec's.

use super::*;

/// `proxsync adopt NAME --vmid N`: a person confirms that VM `vmid` is spec `name`'s although
/// its marker does not verify (the marker key was lost, or the VM comes from a release before
/// signing). The VM must carry this install's marker naming the spec; the record the caller
/// writes from the answer ([`Store::record_adoption`], directly or through the running
/// daemon) vouches for it, and the next cycle converges it and signs its marker. A sharded
/// install (`[source] selector`) also takes a VM another install handed over without a shared
/// marker key: its marker names the spec, no install's tag is left on it, and it is signed over
/// to this install at once. `records`: the state's records (the daemon's while it runs).
// Long because: the refusals in the order a person meets them (spec, selector, VM, marker,
// tags), then the one takeover; each check names what to do.
pub async fn adopt_by_hand(
    config: &Config,
    specs: &SpecSet,
    name: &str,
    vmid: u32,
    records: &BTreeMap<String, SpecRecord>,
) -> Result<crate::store::Adoption, EngineError> {
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
    if let Some(other) = records
        .get(name)
        .and_then(SpecRecord::vmid)
        .filter(|v| *v != vmid)
    {
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
    let (node, kind, cfg) = crate::execute::find_vm(&site.client, vmid)
        .await
        .map_err(site_err)?
        .ok_or_else(|| refused(format!("VM {vmid} does not exist on site {}", spec.site)))?;
    if kind != spec.kind {
        return Err(refused(format!(
            "{vmid} is a {} and spec {name} is a {}: proxsync adopts a guest only for a spec of \
             its kind",
            kind.noun(),
            spec.kind.spec_kind()
        )));
    }
    let handed = config.source.selector.is_some();
    let rec = records.get(name);
    let no_marker_line = !cfg
        .description()
        .is_some_and(|d| d.contains(crate::ownership::MARKER_PREFIX));
    let names_it = rec.is_some_and(|r| {
        r.site == spec.site
            && matches!(r.vm, crate::store::VmState::Exists { vmid: v, .. } if v == vmid)
    });
    // No record names a guest of the spec (it was lost): a guest with this install's tag and
    // the spec's guest's name (`Verdict::Unmarked`).
    let unrecorded = rec.is_none_or(|r| r.vm.vmid().is_none());
    if no_marker_line && (names_it || unrecorded) {
        // The record's guest, or the spec's by its tag and name, whose notes lost the marker
        // line (`MarkerMissing`).
        let uid = rec
            .map(|r| r.uid.clone())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(crate::ownership::new_uid);
        let guest = (node.as_str(), kind, vmid);
        remark_by_hand(config, &site.client, &checked, spec, guest, &cfg, rec, &uid).await?;
        return Ok(crate::store::Adoption {
            spec: name.to_string(),
            site: spec.site.clone(),
            node,
            vmid,
            uid,
            orphan_on_delete: spec.deletion_policy == crate::spec::DeletionPolicy::Orphan,
            identity: cfg.guest_id(kind),
        });
    }
    let marker = cfg
        .description()
        .and_then(Marker::parse)
        .filter(|m| (m.install == config.install_id || handed) && m.spec == name)
        .ok_or_else(|| {
            refused(format!(
                "{} does not carry the marker of spec {name} of install {}; proxsync adopts \
                 only a guest whose description has that proxsync-id line, or the guest the \
                 spec's record names when its notes lost the line",
                kind.named(vmid),
                config.install_id
            ))
        })?;
    if marker.install != config.install_id {
        take_over_by_hand(
            config,
            &site.client,
            &checked,
            (&node, kind, vmid),
            &cfg,
            &marker,
        )
        .await?;
    }
    Ok(crate::store::Adoption {
        spec: name.to_string(),
        site: spec.site.clone(),
        node,
        vmid,
        uid: marker.uid,
        orphan_on_delete: spec.deletion_policy == crate::spec::DeletionPolicy::Orphan,
        identity: cfg.guest_id(kind),
    })
}

/// `proxsync adopt` of the guest the spec's record names, or (no record naming one) of a guest
/// with this install's tag and the spec's guest's name, whose notes lost the marker line: the
/// person's confirmation is the gate's evidence (`gate::permit::remark_by_hand`,
/// `mark_unrecorded_by_hand`), and the marker (the record's uid, or a new one) is written
/// below the notes at once (with this install's tag), guarded by the config's digest.
// Many arguments because: the install, the site's client and check, the spec, the guest and its
// config, and the record and uid the marker carries.
#[allow(clippy::too_many_arguments)]
async fn remark_by_hand(
    config: &Config,
    client: &Client,
    checked: &crate::gate::site::SiteChecked,
    spec: &crate::spec::Spec,
    (node, kind, vmid): (&str, crate::guest::GuestKind, u32),
    cfg: &crate::pve::types::VmConfig,
    rec: Option<&SpecRecord>,
    uid: &str,
) -> Result<(), EngineError> {
    let by_hand = crate::gate::permit::ByHand {
        spec: &spec.name,
        kind,
        vmid,
    };
    let recorded = rec.and_then(SpecRecord::vmid);
    let name_key = match kind {
        crate::guest::GuestKind::Qemu => "name",
        crate::guest::GuestKind::Lxc => "hostname",
    };
    let permit = match recorded {
        Some(_) => crate::gate::permit::remark_by_hand(
            checked,
            by_hand,
            &config.install_id,
            recorded,
            uid,
            cfg.description(),
        ),
        None => crate::gate::permit::mark_unrecorded_by_hand(
            checked,
            by_hand,
            &config.install_id,
            uid,
            cfg.description(),
            &cfg.tags(),
            cfg.get(name_key),
            &spec.vm_name,
        ),
    }
    .map_err(EngineError::Refused)?;
    if cfg.digest().is_none() {
        return Err(EngineError::Refused(format!(
            "{}'s config came without its digest; try again",
            kind.named(vmid)
        )));
    }
    let key_path = config.marker_key_path();
    let key = MarkerKey::load_or_create_file(&key_path).map_err(|message| EngineError::Status {
        path: key_path.display().to_string(),
        message,
    })?;
    let signed = Marker::signed(&key, &config.install_id, &spec.name, uid, vmid);
    crate::execute::sign_over(client, node, kind, vmid, cfg, &signed, &permit)
        .await
        .map_err(|e| EngineError::Refused(format!("{}: {e}; nothing changed", kind.named(vmid))))
}

/// A VM whose marker names this install and one of its specs but does not verify (a lost
/// marker key, a marker from before signing), and that no record maps: what
/// `proxsync adopt --all-unverified` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnverifiedClaim {
    pub spec: String,
    pub site: String,
    pub node: String,
    pub vmid: u32,
    pub name: Option<String>,
}

/// Every [`UnverifiedClaim`] on the configured sites: one listing per site, then a config read
/// for each VM carrying this install's tag or named as a spec's VM, one at a time. Reads only.
pub async fn unverified_claims(
    config: &Config,
    specs: &SpecSet,
    records: &BTreeMap<String, SpecRecord>,
) -> Result<Vec<UnverifiedClaim>, EngineError> {
    let key = MarkerKey::load_file(&config.marker_key_path())
        .ok()
        .flatten();
    let tag = crate::ownership::ownership_tag(&config.install_id);
    let ours: BTreeMap<&str, &crate::spec::Spec> = (specs.specs.iter())
        .filter(|s| config.selects(&s.labels))
        .map(|s| (s.name.as_str(), s))
        .collect();
    let vm_names: BTreeSet<&str> = ours.values().map(|s| s.vm_name.as_str()).collect();
    let recorded: BTreeSet<(&str, u32)> = (records.iter())
        .filter_map(|(n, r)| r.vm.made_vmid().map(|v| (n.as_str(), v)))
        .collect();
    let mut out = Vec::new();
    for (name, site) in site_clients(config)? {
        let site_err = |e: crate::pve::Error| EngineError::Site {
            site: name.clone(),
            message: e.to_string(),
        };
        let listing = site.client.vm_resources().await.map_err(site_err)?;
        let candidates = listing.guests.iter().filter(|r| {
            r.guest_kind().is_some()
                && r.template != Some(true)
                && (r.tags.contains(&tag)
                    || r.name.as_deref().is_some_and(|n| vm_names.contains(n)))
        });
        for r in candidates {
            let kind = r.guest_kind().unwrap_or_default();
            let cfg = match site.client.vm_config(&r.node, kind, r.vmid).await {
                Ok(c) => c,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(site_err(e)),
            };
            let Some(m) = cfg.description().and_then(Marker::parse) else {
                continue;
            };
            let claims = m.install == config.install_id
                && ours.get(m.spec.as_str()).is_some_and(|s| s.site == name)
                && !key.as_ref().is_some_and(|k| m.verifies(k, r.vmid))
                && !recorded.contains(&(m.spec.as_str(), r.vmid));
            if claims {
                out.push(UnverifiedClaim {
                    spec: m.spec.clone(),
                    site: name.clone(),
                    node: r.node.clone(),
                    vmid: r.vmid,
                    name: r.name.clone(),
                });
            }
        }
    }
    out.sort_by(|a, b| (&a.site, a.vmid).cmp(&(&b.site, b.vmid)));
    Ok(out)
}

/// `proxsync adopt` of a VM another install handed over without sharing its marker key: only
/// once released (no install's ownership tag left), signed over to this install at once (its
/// marker for this install and key, this install's tag).
pub(super) async fn take_over_by_hand(
    config: &Config,
    client: &Client,
    checked: &crate::gate::site::SiteChecked,
    (node, kind, vmid): (&str, crate::guest::GuestKind, u32),
    cfg: &crate::pve::types::VmConfig,
    marker: &Marker,
) -> Result<(), EngineError> {
    // The person named the spec and the VM: that confirmation, on a checked site, is the
    // gate's evidence for a marker this install cannot verify.
    let by_hand = crate::gate::permit::ByHand {
        spec: &marker.spec,
        kind,
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
    crate::execute::sign_over(client, node, kind, vmid, cfg, &signed, &permit)
        .await
        .map_err(|e| EngineError::Refused(format!("VM {vmid}: {e}; nothing changed")))
}
