//! What a spec's `disks` ask of a VM as PVE drives, pure: a create's drives, and what a converge
//! changes (qemu-server `PVE/API2/Qemu.pm` `update_vm_api`, `PVE/QemuServer/Drive.pm`). How
//! execute sends it, and the destroys of `destroyDisks`: `execute::disks`.
//!
//! - A disk missing from the VM is added as `<slot>=<storage>:<GiB>,<options>`: PVE allocates
//!   it (`create_disks`), so the update goes through the asynchronous `POST .../config`.
//! - A declared option that differs (`cache`, `discard`, `ssd`, `iothread`, `backup`,
//!   `replicate`) rewrites the drive with its volume, size and other options kept. An option
//!   the spec leaves out is not managed. `format` applies only when the disk is made (PVE keeps
//!   no `format` in the config).
//! - A disk smaller than the spec grows (`resize`); disks never shrink.
//! - A slot of `destroyDisks` is deleted with `force` (its volume deallocated); never the boot
//!   disk. A disk of the VM that the spec no longer lists (and `destroyDisks` does not name)
//!   is detached (`delete=<slot>`): PVE keeps its volume as `unusedN`
//!   (`vmconfig_delete_or_detach_drive` without `force`), nothing is destroyed, and the detach
//!   is noted in the spec's history. CD-ROMs and the cloud-init drive
//!   are never touched.
//!
//! The boot disk is the image's disk: on the VM it is the spec's boot slot when the VM has it,
//! else the disk PVE boots from (a template's disk may be on another slot).

use crate::pve::types::NodeStorage;
use crate::pve::values::{DriveValue, is_drive_key, pve_bool, pve_size};
use crate::pve::{Error as PveError, VmParams};
use crate::spec::{Disk, GIB, RAW_ONLY_STORAGE_TYPES, VmSpec};

use super::hardware::Current;

/// What converge sends for the disks.
#[derive(Debug, Default)]
pub struct DiskChanges {
    /// New drives and rewritten options (one `POST .../config`).
    pub params: VmParams,
    /// Slots to detach (`delete=`).
    pub detach: Vec<String>,
    /// Slots to grow, to bytes.
    pub grow: Vec<(String, u64)>,
    /// What changes, for the log.
    pub changed: Vec<String>,
}

impl DiskChanges {
    /// Nothing changes.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
    }

    /// Takes the detaches out (a protected VM keeps its drives): the slots, no longer in
    /// `detach` or `changed`.
    pub fn keep_detached(&mut self) -> Vec<String> {
        let kept = std::mem::take(&mut self.detach);
        self.changed
            .retain(|c| !kept.iter().any(|k| *c == detached(k)));
        kept
    }
}

/// What `changed` says of a detached slot.
fn detached(slot: &str) -> String {
    format!("{slot} detached")
}

/// The options `disk` declares, as PVE spells them, sorted by key as PVE prints them.
pub(crate) fn declared_options(disk: &Disk) -> Vec<(String, String)> {
    let flag = |b: bool| if b { "1" } else { "0" }.to_string();
    let mut out: Vec<(String, String)> = Vec::new();
    if let Some(v) = disk.backup {
        out.push(("backup".into(), flag(v)));
    }
    if let Some(v) = &disk.cache {
        out.push(("cache".into(), v.clone()));
    }
    if let Some(v) = disk.discard {
        out.push(("discard".into(), if v { "on" } else { "ignore" }.into()));
    }
    if let Some(v) = disk.iothread {
        out.push(("iothread".into(), flag(v)));
    }
    if let Some(v) = disk.replicate {
        out.push(("replicate".into(), flag(v)));
    }
    if let Some(v) = disk.ssd {
        out.push(("ssd".into(), flag(v)));
    }
    out
}

/// The options of a new disk: the declared ones and `format`.
fn new_disk_options(disk: &Disk) -> Vec<(String, String)> {
    let mut out = declared_options(disk);
    if let Some(f) = &disk.format {
        out.push(("format".into(), f.clone()));
    }
    out
}

/// Whether the drive `now` has every option `disk` declares, read the way PVE reads it (an
/// absent option is PVE's default: `cache` none, `discard` ignore, `backup` and `replicate`
/// on, `ssd` and `iothread` off).
pub(crate) fn options_match(disk: &Disk, now: &DriveValue) -> bool {
    let on = |key: &str, default: bool| now.get(key).map_or(default, pve_bool);
    disk.cache
        .as_deref()
        .is_none_or(|c| now.get("cache").unwrap_or("none") == c)
        && disk
            .discard
            .is_none_or(|d| (now.get("discard") == Some("on")) == d)
        && disk.ssd.is_none_or(|v| on("ssd", false) == v)
        && disk.iothread.is_none_or(|v| on("iothread", false) == v)
        && disk.backup.is_none_or(|v| on("backup", true) == v)
        && disk.replicate.is_none_or(|v| on("replicate", true) == v)
}

/// Why `disk`'s `format` cannot be on its storage (PVE's lvm, lvmthin, zfspool, zfs and rbd
/// storages hold raw volumes only), or `None`.
pub fn format_refusal(disk: &Disk, storages: &[NodeStorage]) -> Option<String> {
    let format = disk.format.as_deref().filter(|f| *f != "raw")?;
    let kind = storages
        .iter()
        .find(|s| s.storage == disk.storage)
        .and_then(|s| s.kind.as_deref())?;
    RAW_ONLY_STORAGE_TYPES.contains(&kind).then(|| {
        format!(
            "disk {} asks for format {format}, but storage {} is of type {kind}, which holds raw \
             volumes only; leave format out or put the disk on a file storage (dir, nfs, cifs)",
            disk.slot, disk.storage
        )
    })
}

/// The drives of a new VM made by a create (not a clone): the boot disk imported from
/// `import` (or empty), every other disk new. Returns the params and the boot slot.
pub fn create_drives(
    vm: &VmSpec,
    params: VmParams,
    import: Option<&str>,
) -> Result<(VmParams, String), PveError> {
    let short = [Disk {
        slot: "scsi0".into(),
        size_bytes: vm.disk_bytes,
        storage: vm.storage.to_string(),
        format: None,
        cache: None,
        discard: None,
        ssd: None,
        iothread: None,
        backup: None,
        replicate: None,
        boot: true,
    }];
    let disks: &[Disk] = vm.disks.as_deref().unwrap_or(&short);
    let mut params = params;
    let mut boot_slot = "scsi0".to_string();
    for d in disks {
        let options = new_disk_options(d);
        params = match import {
            Some(volume) if d.boot => {
                params.import_disk_with(&d.slot, &d.storage, volume, &options)?
            }
            _ => params.new_disk_with(&d.slot, &d.storage, d.size_bytes.div_ceil(GIB), &options)?,
        };
        if d.boot {
            boot_slot = d.slot.clone();
        }
    }
    Ok((params, boot_slot))
}

/// The slot of the VM that holds the spec's boot disk: the spec's boot slot when the VM has a
/// disk there, else the disk PVE boots from (`vm_boot_disk`).
fn boot_slot_on_vm(boot: &Disk, current: Current, vm_boot_disk: Option<&str>) -> Option<String> {
    let here = current(&boot.slot).is_some_and(|v| !DriveValue::parse(&v).is_cdrom_or_cloudinit());
    if here {
        Some(boot.slot.clone())
    } else {
        vm_boot_disk.map(str::to_string)
    }
}

/// The disk changes that bring the VM to `spec.disks` (nothing for the short form, whose boot
/// disk converge grows). `current`: the config with pending values in place; `pending_delete`:
/// the keys whose removal waits for the next start; `drive_keys`: the drive keys of the config.
/// Errors when a slot the spec wants holds a CD-ROM or the cloud-init drive.
pub fn disk_changes(
    vm: &VmSpec,
    current: Current,
    drive_keys: &[String],
    pending_delete: &[String],
    vm_boot_disk: Option<&str>,
) -> Result<DiskChanges, String> {
    let mut out = DiskChanges::default();
    let Some(disks) = &vm.disks else {
        return Ok(out);
    };
    let mut managed: Vec<String> = Vec::new();
    for d in disks {
        let slot = if d.boot {
            match boot_slot_on_vm(d, current, vm_boot_disk) {
                Some(s) => s,
                // No disk to boot from yet (a create still to finish): nothing to manage.
                None => continue,
            }
        } else {
            d.slot.clone()
        };
        managed.push(slot.clone());
        let now = current(&slot)
            .filter(|_| !pending_delete.contains(&slot))
            .map(|v| DriveValue::parse(&v));
        let Some(now) = now else {
            let options = new_disk_options(d);
            out.params = std::mem::take(&mut out.params)
                .new_disk_with(&slot, &d.storage, d.size_bytes / GIB, &options)
                .map_err(|e| e.to_string())?;
            out.changed.push(format!("{slot} added"));
            continue;
        };
        if now.is_cdrom_or_cloudinit() {
            return Err(format!(
                "slot {slot} of the VM holds a CD-ROM or the cloud-init drive, not a disk; give \
                 the disk another slot in the spec"
            ));
        }
        if !options_match(d, &now) {
            let mut options: Vec<(String, String)> = now
                .options
                .iter()
                .filter(|(k, _)| !declared_options(d).iter().any(|(dk, _)| dk == k))
                .cloned()
                .collect();
            options.extend(declared_options(d));
            options.sort();
            out.params = std::mem::take(&mut out.params)
                .existing_drive(&slot, &now.volume, &options)
                .map_err(|e| e.to_string())?;
            out.changed.push(format!("{slot} options"));
        }
        if now.size().is_some_and(|s| s < d.size_bytes) {
            out.grow.push((slot.clone(), d.size_bytes));
            out.changed
                .push(format!("{slot} grown to {}", pve_size(d.size_bytes)));
        }
    }
    for key in drive_keys {
        if managed.contains(key)
            || pending_delete.contains(key)
            || vm.destroy_disks.contains(key)
            || !is_drive_key(key)
        {
            continue;
        }
        let Some(v) = current(key) else { continue };
        if !DriveValue::parse(&v).is_cdrom_or_cloudinit() {
            out.detach.push(key.clone());
            out.changed.push(detached(key));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::spec::Spec;

    fn spec(disks: &str) -> Spec {
        crate::spec::test_spec(&format!("    disks:\n{disks}"))
    }

    fn changes(spec: &Spec, cfg: &[(&str, &str)], pending_delete: &[&str]) -> DiskChanges {
        let map: BTreeMap<String, String> = cfg
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let keys: Vec<String> = map.keys().cloned().collect();
        let pd: Vec<String> = pending_delete.iter().map(|s| s.to_string()).collect();
        disk_changes(
            spec.vm().unwrap(),
            &|k| map.get(k).cloned(),
            &keys,
            &pd,
            Some("scsi0"),
        )
        .unwrap()
    }

    #[test]
    fn a_missing_disk_is_added_and_an_unlisted_one_detached() {
        let s = spec(
            "      - {size: 32Gi}\n      - {slot: virtio1, size: 100Gi, storage: data, format: qcow2, cache: writeback}\n",
        );
        let c = changes(
            &s,
            &[
                ("scsi0", "local-lvm:vm-100-disk-0,size=32G"),
                ("scsi2", "local-lvm:vm-100-disk-2,size=8G"),
                ("ide2", "local-lvm:vm-100-cloudinit,media=cdrom"),
                ("sata3", "local:iso/seed.iso,media=cdrom"),
            ],
            &[],
        );
        assert_eq!(
            c.params.get("virtio1"),
            Some("data:100,cache=writeback,format=qcow2")
        );
        assert_eq!(c.detach, ["scsi2"]);
        assert!(c.grow.is_empty());
        // A detach already waiting for the next start is not sent again.
        let c = changes(
            &s,
            &[
                ("scsi0", "local-lvm:vm-100-disk-0,size=32G"),
                ("virtio1", "data:vm-100-disk-1,cache=writeback,size=100G"),
                ("scsi2", "local-lvm:vm-100-disk-2,size=8G"),
            ],
            &["scsi2"],
        );
        assert!(c.is_empty(), "{:?}", c.changed);
    }

    #[test]
    fn options_are_rewritten_keeping_the_volume_and_the_rest_and_disks_grow() {
        let s = spec("      - {size: 40Gi, discard: true, ssd: true}\n");
        let c = changes(
            &s,
            &[("scsi0", "local-lvm:vm-100-disk-0,iops_rd=100,size=32G")],
            &[],
        );
        assert_eq!(
            c.params.get("scsi0"),
            Some("local-lvm:vm-100-disk-0,discard=on,iops_rd=100,size=32G,ssd=1")
        );
        assert_eq!(c.grow, [("scsi0".to_string(), 40 * GIB)]);
        // Never shrinks.
        let c = changes(
            &s,
            &[("scsi0", "local-lvm:vm-100-disk-0,discard=on,size=64G,ssd=1")],
            &[],
        );
        assert!(c.is_empty(), "{:?}", c.changed);
    }

    #[test]
    fn a_cdrom_in_a_wanted_slot_is_an_error_not_overwritten() {
        let s = spec("      - {size: 32Gi}\n      - {slot: sata1, size: 8Gi}\n");
        let map: BTreeMap<String, String> = [
            ("scsi0", "local-lvm:vm-100-disk-0,size=32G"),
            ("sata1", "local-lvm:vm-100-cloudinit,media=cdrom"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let keys: Vec<String> = map.keys().cloned().collect();
        let err = disk_changes(
            s.vm().unwrap(),
            &|k| map.get(k).cloned(),
            &keys,
            &[],
            Some("scsi0"),
        )
        .unwrap_err();
        assert!(err.contains("sata1"), "{err}");
    }

    #[test]
    fn the_boot_disk_is_the_images_disk_on_the_vm() {
        // A template whose disk is virtio0: the spec's boot disk (scsi0) is that disk, not a
        // new one, and it is not detached.
        let s = spec("      - {size: 32Gi, cache: none}\n");
        let map: BTreeMap<String, String> = [(
            "virtio0".to_string(),
            "local-lvm:vm-100-disk-0,size=32G".to_string(),
        )]
        .into();
        let keys: Vec<String> = map.keys().cloned().collect();
        let c = disk_changes(
            s.vm().unwrap(),
            &|k| map.get(k).cloned(),
            &keys,
            &[],
            Some("virtio0"),
        )
        .unwrap();
        assert!(c.is_empty(), "{:?}", c.changed);
    }

    #[test]
    fn format_is_refused_on_raw_only_storages() {
        let s = spec(
            "      - {size: 32Gi}\n      - {slot: scsi1, size: 8Gi, format: qcow2, storage: fast}\n",
        );
        let storages = |kind: &str| -> Vec<NodeStorage> {
            serde_json::from_value(serde_json::json!([{"storage": "fast", "type": kind}])).unwrap()
        };
        let disk = &s.vm().unwrap().disks.as_ref().unwrap()[1];
        for kind in ["lvmthin", "lvm", "zfspool", "rbd"] {
            let why = format_refusal(disk, &storages(kind)).expect(kind);
            assert!(why.contains("raw") && why.contains("fast"), "{why}");
        }
        assert!(format_refusal(disk, &storages("dir")).is_none());
        assert!(format_refusal(disk, &storages("nfs")).is_none());
    }
}
