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
pub(crate) async fn adopt_by_hand(
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
        .get(spec.site.as_str())
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
        site: spec.site.to_string(),
        message: e.to_string(),
    };
    let (node, kind, cfg) = crate::execute::find_vm(&site.client, vmid)
        .await
        .map_err(site_err)?
        .ok_or_else(|| refused(format!("VM {vmid} does not exist on site {}", spec.site)))?;
    if kind != spec.kind() {
        return Err(refused(format!(
            "{vmid} is a {} and spec {name} is a {}: proxsync adopts a guest only for a spec of \
             its kind",
            kind.noun(),
            spec.kind().spec_kind()
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
            .map(|r| r.uid.to_string())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(crate::ownership::new_uid);
        let guest = (node.as_str(), kind, vmid);
        remark_by_hand(config, &site.client, &checked, spec, guest, &cfg, rec, &uid).await?;
        return Ok(crate::store::Adoption {
            spec: name.to_string(),
            site: spec.site.to_string(),
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
        site: spec.site.to_string(),
        node,
        vmid,
        uid: marker.uid.to_string(),
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
            spec.guest_name(),
        ),
    }
    .map_err(|r| EngineError::Refused(r.into()))?;
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

/// A guest whose marker names this install and one of its specs: what `proxsync adopt
/// --all-unverified` lists, for every spec that at least one guest claims with a marker that
/// does not verify (a lost marker key, a marker from before signing, a copied or typed one)
/// and that no record maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnverifiedClaim {
    pub spec: String,
    pub site: String,
    pub node: String,
    pub kind: crate::guest::GuestKind,
    pub vmid: u32,
    pub name: Option<String>,
    /// Why this guest claims the spec.
    pub standing: Standing,
    /// What tells it apart from another guest claiming the spec.
    pub traits: GuestTraits,
}

/// How a guest claims a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Its marker does not verify, and no record maps it: only a person can confirm it.
    Unverified,
    /// Its marker verifies for its VMID with this install's key.
    Verified,
    /// The spec's record names it.
    Recorded,
}

/// What tells one guest from another that claims the same spec, read from its config: what PVE
/// made at random for it (a VM's smbios1 uuid, each NIC's MAC), its disks, and when it was
/// made as far as its config says (qemu-server's `meta` ctime: written by a create; a clone
/// keeps its template's). A person typing a marker into another guest's notes can copy none
/// of these.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct GuestTraits {
    /// A VM's smbios1 uuid.
    pub uuid: Option<String>,
    /// Each NIC's MAC, `netN` order.
    pub macs: Vec<String>,
    /// Each disk as `slot=volume` with its size as PVE records it (no CD-ROM).
    pub disks: Vec<String>,
    /// The config's `meta` ctime, seconds since the epoch.
    pub meta_ctime: Option<u64>,
}

impl GuestTraits {
    /// The traits `cfg` shows of a guest of `kind`.
    pub(crate) fn of(
        cfg: &crate::pve::types::VmConfig,
        kind: crate::guest::GuestKind,
    ) -> GuestTraits {
        use crate::pve::values::{DriveValue, NetValue, prop_value};
        let is_qemu = kind == crate::guest::GuestKind::Qemu;
        let uuid = is_qemu
            .then(|| cfg.get("smbios1").and_then(|s| prop_value(s, "uuid", None)))
            .flatten()
            .map(str::to_string);
        let macs = (0..32)
            .filter_map(|i| cfg.get(&format!("net{i}")))
            .filter_map(|v| match kind {
                crate::guest::GuestKind::Qemu => NetValue::parse(v).mac,
                crate::guest::GuestKind::Lxc => prop_value(v, "hwaddr", None).map(str::to_string),
            })
            .map(|m| m.to_ascii_uppercase())
            .collect();
        let disk_key = |k: &str| {
            let bus = k.trim_end_matches(|c: char| c.is_ascii_digit());
            bus.len() < k.len()
                && match kind {
                    crate::guest::GuestKind::Qemu => {
                        matches!(
                            bus,
                            "scsi" | "virtio" | "sata" | "ide" | "efidisk" | "tpmstate"
                        )
                    }
                    crate::guest::GuestKind::Lxc => bus == "mp",
                }
                || (!is_qemu && k == "rootfs")
        };
        let disks = (cfg.values.iter())
            .filter(|(k, _)| disk_key(k))
            .map(|(k, v)| (k, DriveValue::parse(v)))
            .filter(|(_, d)| !d.is_cdrom_or_cloudinit())
            .map(|(k, d)| match d.get("size") {
                Some(size) => format!("{k}={} ({size})", d.volume),
                None => format!("{k}={}", d.volume),
            })
            .collect();
        let meta_ctime = cfg
            .get("meta")
            .and_then(|m| prop_value(m, "ctime", None))
            .and_then(|t| t.parse().ok());
        GuestTraits {
            uuid,
            macs,
            disks,
            meta_ctime,
        }
    }

    /// In words, for a person comparing two guests: `smbios1 uuid U; MACs M1, M2; disks D;
    /// config meta ctime T`.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(u) = &self.uuid {
            parts.push(format!("smbios1 uuid {u}"));
        }
        if !self.macs.is_empty() {
            parts.push(format!("MACs {}", self.macs.join(", ")));
        }
        if !self.disks.is_empty() {
            parts.push(format!("disks {}", self.disks.join(", ")));
        }
        if let Some(t) = self.meta_ctime {
            let when = crate::util::time::rfc3339_secs(i64::try_from(t).unwrap_or(i64::MAX));
            parts.push(format!("config meta ctime {when}"));
        }
        if parts.is_empty() {
            "its config shows no uuid, MAC or disk".into()
        } else {
            parts.join("; ")
        }
    }
}

/// The claims of [`unverified_claims`] split as `--all-unverified --yes` treats them:
/// `single`, the specs one guest alone claims, with a marker that does not verify (each
/// confirmed as `adopt NAME --vmid N` does); `contested`, the specs two or more guests claim
/// (a guest can be given a spec's marker by anyone who may edit its notes), each with every
/// claimant, which only a person's `adopt NAME --vmid N` settles.
pub(crate) struct ClaimsBySpec {
    pub single: Vec<UnverifiedClaim>,
    pub contested: BTreeMap<String, Vec<UnverifiedClaim>>,
}

/// Splits `claims` (see [`ClaimsBySpec`]).
pub(crate) fn claims_by_spec(claims: Vec<UnverifiedClaim>) -> ClaimsBySpec {
    let mut by_spec: BTreeMap<String, Vec<UnverifiedClaim>> = BTreeMap::new();
    for c in claims {
        by_spec.entry(c.spec.clone()).or_default().push(c);
    }
    let mut out = ClaimsBySpec {
        single: Vec::new(),
        contested: BTreeMap::new(),
    };
    for (spec, mut claims) in by_spec {
        match claims.as_slice() {
            [one] if one.standing == Standing::Unverified => out.single.extend(claims.pop()),
            [_] => {}
            _ => {
                out.contested.insert(spec, claims);
            }
        }
    }
    out.single
        .sort_by(|a, b| (&a.site, a.vmid).cmp(&(&b.site, b.vmid)));
    out
}

/// Every guest on the configured sites whose marker names this install and a spec of its site,
/// for each spec that at least one of them claims with a marker that does not verify and no
/// record maps ([`Standing::Unverified`]); the spec's other claimants (verified, or its
/// record's guest) too, so that a spec two guests claim is never confirmed by `--yes`
/// ([`claims_by_spec`]). One listing per site, then a config read for each guest carrying this
/// install's tag or named as a spec's guest, one at a time. Reads only.
pub(crate) async fn unverified_claims(
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
    let vm_names: BTreeSet<&str> = ours.values().map(|s| s.guest_name()).collect();
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
                && (r.tags.iter().any(|t| *t == tag)
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
            if m.install != config.install_id
                || ours.get(m.spec.as_str()).is_none_or(|s| s.site != name)
            {
                continue;
            }
            let standing = if recorded.contains(&(m.spec.as_str(), r.vmid)) {
                Standing::Recorded
            } else if key.as_ref().is_some_and(|k| m.verifies(k, r.vmid)) {
                Standing::Verified
            } else {
                Standing::Unverified
            };
            out.push(UnverifiedClaim {
                spec: m.spec.to_string(),
                site: name.clone(),
                node: r.node.to_string(),
                kind,
                vmid: r.vmid,
                name: r.name.as_deref().map(str::to_string),
                standing,
                traits: GuestTraits::of(&cfg, kind),
            });
        }
    }
    // Only the specs some guest claims unverified (a spec whose record maps another guest is
    // refused by `adopt_by_hand` when confirmed).
    let unverified: BTreeSet<String> = (out.iter())
        .filter(|c| c.standing == Standing::Unverified)
        .map(|c| c.spec.clone())
        .collect();
    out.retain(|c| unverified.contains(&c.spec));
    out.sort_by(|a, b| (&a.site, &a.spec, a.vmid).cmp(&(&b.site, &b.spec, b.vmid)));
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
    .map_err(|r| EngineError::Refused(r.into()))?;
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
