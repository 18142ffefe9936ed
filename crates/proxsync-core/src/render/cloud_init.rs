//! PVE's cloud-init options and drives as a spec asks for them, pure: which slot holds PVE's
//! cloud-init drive or a seed image, the options that differ, a config with its pending values
//! in place. Uploading, attaching and removing seeds: `execute::cloud_init`.

use crate::pve::types::{PendingEntry, VmConfig};
use crate::pve::values::{is_drive_key, percent_decode};
use crate::pve::{Error as PveError, VmParams};
use crate::spec::VmSpec;

/// Slots for PVE's cloud-init drive when the VM has none (never `ide2`, the installer CD-ROM).
pub const CLOUDINIT_DRIVE_SLOTS: [&str; 4] = ["ide0", "ide1", "sata1", "sata2"];

/// Slots for proxsync's seed image.
pub const SEED_SLOTS: [&str; 4] = ["ide3", "sata3", "sata4", "sata5"];

/// The slot holding PVE's cloud-init drive (`local-lvm:vm-100-cloudinit,media=cdrom`).
pub fn cloudinit_drive_slot(cfg: &VmConfig) -> Option<String> {
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
pub fn seed_slots(cfg: &VmConfig, install: &str, spec: &str) -> Vec<(String, String)> {
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

/// The first of `slots` the config does not use.
pub fn free_slot<'a>(cfg: &VmConfig, slots: &[&'a str]) -> Option<&'a str> {
    slots.iter().copied().find(|s| cfg.get(s).is_none())
}

/// An empty CD-ROM drive (what an ejected seed leaves).
pub const EJECTED: &str = "none,media=cdrom";

/// A slot for the seed: free, or an empty CD-ROM drive.
pub fn free_seed_slot(cfg: &VmConfig) -> Option<&'static str> {
    SEED_SLOTS.iter().copied().find(|s| {
        cfg.get(s)
            .is_none_or(|v| v == EJECTED || v == "cdrom,media=cdrom")
    })
}

/// PVE's cloud-init options as the spec declares them (only declared fields).
pub fn cloud_init_params(
    vm: &VmSpec,
    cfg: &VmConfig,
    mut params: VmParams,
    changed: &mut Vec<String>,
) -> Result<VmParams, PveError> {
    let Some(ci) = &vm.cloud_init else {
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

/// The config with the values waiting for the next start in place of the current ones.
pub fn with_pending(cfg: &VmConfig, pending: Vec<PendingEntry>) -> VmConfig {
    let mut effective = cfg.clone();
    for p in pending {
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
    effective
}
