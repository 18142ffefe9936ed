//! What a VM's config says now, read the way PVE reads it: the disk it boots from, a key's value
//! once its pending change applies, which pending keys proxsync reports.

use crate::pve::types::{PendingEntry, VmConfig};
use crate::pve::values::{is_drive_key, parse_pve_size};

/// The boot disk's key and size in bytes, from the config.
pub fn boot_disk(cfg: &VmConfig) -> Option<(String, u64)> {
    let order = cfg
        .get("boot")
        .and_then(|b| b.strip_prefix("order="))
        .map(|o| o.split(';').map(str::to_string).collect::<Vec<_>>())
        .unwrap_or_default();
    let candidates = order
        .into_iter()
        .chain(["scsi0", "virtio0", "sata0", "ide0"].map(String::from));
    // `order=` names NICs (`net0`) and passed-through devices too: only drives are disks,
    // and PVE's resize takes only a drive key (else a 400).
    for key in candidates.filter(|k| is_drive_key(k)) {
        if let Some(v) = cfg.get(&key)
            && !v.contains("media=cdrom")
            && !v.contains("cloudinit")
        {
            let size = v
                .split(',')
                .find_map(|p| p.strip_prefix("size="))
                .and_then(parse_pve_size);
            return Some((key, size.unwrap_or(0)));
        }
    }
    None
}

/// A config key's value as it will be: the pending value when one waits for the next start,
/// else the current one.
pub fn effective_value(cfg: &VmConfig, pending: &[PendingEntry], key: &str) -> Option<String> {
    match pending
        .iter()
        .find(|p| p.key == key)
        .and_then(|p| p.pending.as_ref())
    {
        Some(serde_json::Value::String(v)) => Some(v.clone()),
        Some(v) => Some(v.to_string()),
        None => cfg.get(key).map(str::to_string),
    }
}

/// The config keys whose change waits for the VM's next start, as proxsync reports them: the
/// ones it manages (PVE applies the others' changes, or queues those a human made).
pub fn reported_pending(key: &str) -> bool {
    const KEYS: [&str; 16] = [
        "cores",
        "sockets",
        "memory",
        "balloon",
        "cpu",
        "numa",
        "bios",
        "machine",
        "scsihw",
        "vga",
        "serial0",
        "ostype",
        "agent",
        "efidisk0",
        "tpmstate0",
        "boot",
    ];
    // What pve-container keeps pending on a running container (`vmconfig_hotplug_pending`
    // applies memory, swap, CPU limits and NICs at once; `entrypoint` and `env` wait).
    const CONTAINER_KEYS: [&str; 10] = [
        "entrypoint",
        "env",
        "rootfs",
        "nameserver",
        "searchdomain",
        "features",
        "timezone",
        "console",
        "tty",
        "swap",
    ];
    let numbered = |prefix: &str| {
        key.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    KEYS.contains(&key)
        || CONTAINER_KEYS.contains(&key)
        || numbered("net")
        || numbered("mp")
        || is_drive_key(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_disk_is_found() {
        let cfg: VmConfig = serde_json::from_str(
            r#"{"boot":"order=scsi0;ide2","scsi0":"local-lvm:vm-100-disk-0,size=2G","ide2":"local:iso/x.iso,media=cdrom"}"#,
        )
        .unwrap();
        assert_eq!(boot_disk(&cfg), Some(("scsi0".into(), 2 << 30)));
        let cfg: VmConfig =
            serde_json::from_str(r#"{"virtio0":"local-lvm:vm-100-disk-0,size=10G"}"#).unwrap();
        assert_eq!(boot_disk(&cfg), Some(("virtio0".into(), 10 << 30)));
        // A network boot first: the NIC is no disk to grow.
        let cfg: VmConfig = serde_json::from_str(
            r#"{"boot":"order=net0;scsi0","net0":"virtio=BC:24:11:00:00:01,bridge=vmbr0","scsi0":"local-lvm:vm-100-disk-0,size=2G"}"#,
        )
        .unwrap();
        assert_eq!(boot_disk(&cfg), Some(("scsi0".into(), 2 << 30)));
    }
}
