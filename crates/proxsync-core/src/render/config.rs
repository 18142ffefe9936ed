//! A VM's config as its spec asks for it, pure: the update a converge sends (hardware, NICs,
//! name, memory, description and marker, tags), key by key for `plan`, and the boot disk to
//! grow.

use std::fmt;

use crate::gate::identity::VerifiedMarker;
use crate::model::SpecRecord;
use crate::ownership::{Marker, MarkerKey, ownership_tag};
use crate::plan::merge_tags;
use crate::pve::types::{PendingEntry, VmConfig};
use crate::pve::{Error as PveError, VmParams};
use crate::spec::{Guest, Spec, VmSpec};

use super::current::{boot_disk, effective_value};

/// Why a config update cannot be made.
#[derive(Debug)]
pub enum ConfigError {
    /// A value PVE would not take.
    Params(PveError),
    /// The gate refused the marker's write (the permit's refusal).
    Refused(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Params(e) => write!(f, "{e}"),
            ConfigError::Refused(why) => f.write_str(why),
        }
    }
}

impl From<PveError> for ConfigError {
    fn from(e: PveError) -> Self {
        ConfigError::Params(e)
    }
}

/// The declared fields that differ from the VM's config, compared with PVE's normalised values
/// (a value waiting for a reboot counts as set: it is not sent again every cycle): the update
/// to send and the names of what it changes. A converge sends it and `plan` shows it, so what
/// `plan` shows is the update a converge sends.
#[allow(clippy::too_many_arguments)]
pub fn config_changes(
    key: &MarkerKey,
    install_id: &str,
    spec: &Spec,
    vm: &VmSpec,
    rec: &SpecRecord,
    ours: &VerifiedMarker,
    cfg: &VmConfig,
    pending: &[PendingEntry],
) -> Result<(VmParams, Vec<&'static str>), ConfigError> {
    let effective = |key: &str| effective_value(cfg, pending, key);
    let hw = super::hardware::hardware_changes(spec, &effective, &vm.storage)?;
    let mut params = hw.params;
    let mut changed: Vec<&str> = hw.changed;
    let mut delete = hw.delete;
    if let Some((description, what)) = description_change(key, install_id, spec, rec, ours, cfg) {
        // The VM's own marker, as verified: the gate's permit to write it again.
        let permit = crate::gate::permit::sign(ours).map_err(|r| ConfigError::Refused(r.into()))?;
        params = params.marker(&permit, description)?;
        changed.push(what);
    }
    if cfg.get("name") != Some(vm.vm_name.as_str()) {
        params = params.set("name", &vm.vm_name);
        changed.push("name");
    }
    let memory = effective("memory")
        .and_then(|m| {
            m.trim_start_matches("current=")
                .split(',')
                .next()
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(512);
    if memory != vm.memory_mib {
        params = params.set("memory", vm.memory_mib);
        changed.push("memory");
    }
    let nics = super::network::network_changes(vm, &effective)?;
    params = params.merge(nics.params);
    changed.extend(nics.changed);
    delete.extend(nics.delete);
    if let Some(tags) = tags_change(install_id, spec, rec, cfg) {
        params = params.tags(&tags)?;
        changed.push("tags");
    }
    if !delete.is_empty() {
        delete.sort_unstable();
        params = params.delete_keys(&delete);
    }
    Ok((params, changed))
}

/// One config key a converge would change: its value now (`None`: absent) and the one sent
/// (`None`: removed).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigChange {
    /// The config key (`memory`, `net0`, ...; `description` or `marker` for the notes).
    pub key: String,
    /// Its value now (a pending one counts); `None`: absent, or the notes, whose text is not
    /// shown.
    pub old: Option<String>,
    /// The value sent; `None`: the key is removed, or the notes, whose text is not shown.
    pub new: Option<String>,
}

/// What a converge of VM `vmid` would change in its config, key by key, from its config and
/// pending values as read now: the update a converge sends ([`config_changes`]).
/// The description is named without its text (`key` "description" or "marker"). `ours`: the
/// VM's marker as the gate verified it, as a converge verifies it first.
pub fn preview_config(
    key: &MarkerKey,
    install_id: &str,
    spec: &Spec,
    rec: &SpecRecord,
    ours: &VerifiedMarker,
    cfg: &VmConfig,
    pending: &[PendingEntry],
) -> Result<Vec<ConfigChange>, String> {
    // A container's update is pve-container's options, as its converge sends them.
    let (params, changed) = match &spec.guest {
        Guest::Vm(vm) => config_changes(key, install_id, spec, vm, rec, ours, cfg, pending),
        Guest::Container(ct) => {
            super::container::container_changes(key, install_id, spec, ct, rec, ours, cfg, pending)
        }
    }
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (k, new) in params.entries() {
        match k {
            "delete" => out.extend(new.split(',').map(|d| ConfigChange {
                key: d.to_string(),
                old: effective_value(cfg, pending, d),
                new: None,
            })),
            // Its text and MAC are noise in a plan: what changes is named.
            "description" => out.push(ConfigChange {
                key: changed
                    .iter()
                    .find(|c| matches!(**c, "description" | "marker"))
                    .unwrap_or(&"description")
                    .to_string(),
                old: None,
                new: None,
            }),
            _ => {
                let old = effective_value(cfg, pending, k);
                // PVE reads an absent `sockets` as 1: sent beside `cores`, it changes nothing.
                let unchanged =
                    old.as_deref() == Some(new) || (k == "sockets" && old.is_none() && new == "1");
                if !unchanged {
                    out.push(ConfigChange {
                        key: k.to_string(),
                        old,
                        new: Some(new.to_string()),
                    });
                }
            }
        }
    }
    Ok(out)
}

/// The description to write, and what it changes: the text above the marker when the spec
/// declares another, or the marker. A marker from before signing (or signed with a lost key,
/// the record vouching for the VM) is rewritten signed for this VMID; the rest of the
/// description stays, unless the spec declares the text above the marker.
pub(super) fn description_change(
    key: &MarkerKey,
    install_id: &str,
    spec: &Spec,
    rec: &SpecRecord,
    ours: &VerifiedMarker,
    cfg: &VmConfig,
) -> Option<(String, &'static str)> {
    let vmid = ours.vmid();
    let current = cfg.description().unwrap_or("");
    let text_differs = spec
        .hardware
        .description
        .as_deref()
        .is_some_and(|text| description_text(current) != text);
    if !text_differs && ours.signed() {
        return None;
    }
    let signed = Marker::signed(key, install_id, &spec.name, &rec.uid, vmid);
    let base = spec.hardware.description.as_deref().unwrap_or(current);
    let what = if text_differs {
        "description"
    } else {
        "marker"
    };
    Some((signed.replace_in(base), what))
}

/// The VM's tags after the three-way merge (tags added by hand stay), when they differ.
pub(super) fn tags_change(
    install_id: &str,
    spec: &Spec,
    rec: &SpecRecord,
    cfg: &VmConfig,
) -> Option<Vec<String>> {
    let tags = merge_tags(
        &cfg.tags(),
        &rec.applied_tags,
        &spec.tags,
        &ownership_tag(install_id),
    );
    let mut current = cfg.tags();
    current.sort();
    current.dedup();
    (tags != current).then_some(tags)
}

/// The description without proxsync's marker line: the text a spec's `description` sets.
fn description_text(description: &str) -> String {
    description
        .lines()
        .filter(|l| !l.contains(crate::ownership::MARKER_PREFIX))
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_string()
}

/// The boot disk a converge grows and its size now: the short form's disk, smaller than the
/// spec's and not grown to it before.
pub fn disk_to_grow(vm: &VmSpec, rec: &SpecRecord, cfg: &VmConfig) -> Option<(String, u64)> {
    boot_disk(cfg).filter(|(_, size)| {
        vm.disks.is_none()
            && *size < vm.disk_bytes
            && rec.applied_disk_bytes.is_none_or(|a| a < vm.disk_bytes)
    })
}

/// The boot disk a converge grows, as a change of its size in bytes (for `plan`).
pub fn preview_disk(spec: &Spec, rec: &SpecRecord, cfg: &VmConfig) -> Option<ConfigChange> {
    let (key, old) = match &spec.guest {
        Guest::Vm(vm) => disk_to_grow(vm, rec, cfg)?,
        Guest::Container(ct) => (
            "rootfs".to_string(),
            super::container::rootfs_to_grow(ct, rec, cfg)?,
        ),
    };
    Some(ConfigChange {
        key,
        old: Some(old.to_string()),
        new: Some(spec.root_disk_bytes().to_string()),
    })
}
