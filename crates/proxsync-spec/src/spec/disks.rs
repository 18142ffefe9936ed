//! `forProvider.disks`: the VM's disks, the boot disk (the first, or the one with `boot: true`)
//! receiving the image. The short form `disk: 100Gi` / `storage: local-lvm` stays valid (one
//! boot disk); writing it next to `disks` is an error.
//!
//! Slots and options are checked as PVE's schema checks the `scsiN`/`virtioN`/`sataN` drive
//! property string (qemu-server `PVE/QemuServer/Drive.pm`): `scsi0`..`scsi30`, `virtio0`..
//! `virtio15`, `sata0`..`sata5`; `ide` is refused (`ide2` is the CD-ROM, `ide0`/`ide1` take the
//! cloud-init drive); `ssd` exists on scsi and sata only, `iothread` on scsi and virtio only.

use serde::Serialize;

use super::fields::{Ctx, Obj, enum_field, object, size_field, string};
use super::hardware::bool_field;
use super::names::check_storage;
use super::units::{GIB, format_bytes};
use super::yaml::{Node, Value};
use super::{DEFAULT_DISK_BYTES, DEFAULT_STORAGE, MAX_DISK_BYTES, MIN_DISK_BYTES};

/// The buses a disk may be on and their highest index (PVE's `MAX_SCSI_DISKS` 31,
/// `MAX_VIRTIO_DISKS` 16, `MAX_SATA_DISKS` 6).
pub const DISK_BUSES: [(&str, u8); 3] = [("scsi", 30), ("virtio", 15), ("sata", 5)];
/// PVE's drive `cache` values.
pub const DISK_CACHES: [&str; 5] = ["none", "writethrough", "writeback", "unsafe", "directsync"];
/// The image formats a new disk may have (on file storages only).
pub const DISK_FORMATS: [&str; 3] = ["raw", "qcow2", "vmdk"];
/// The storage types that hold only raw volumes: `format` is refused on them.
pub const RAW_ONLY_STORAGE_TYPES: [&str; 5] = ["lvm", "lvmthin", "zfspool", "zfs", "rbd"];
/// The most disks a spec declares (every scsi, virtio and sata slot).
pub const MAX_DISKS: usize = 31 + 16 + 6;

const DISK_FIELDS: &[&str] = &[
    "slot",
    "size",
    "storage",
    "format",
    "cache",
    "discard",
    "ssd",
    "iothread",
    "backup",
    "replicate",
    "boot",
];
const PATH: &str = "spec.forProvider.disks";

/// One disk of `disks`. An absent option is PVE's default (`cache` none, `discard` ignore,
/// `ssd` and `iothread` off, `backup` and `replicate` on), so an option removed from the spec
/// is set back to the default.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    /// `scsi0`, `virtio1`, `sata2`; given or assigned in order on the scsi bus.
    pub slot: String,
    /// Bytes, a whole number of GiB. Disks only grow.
    pub size_bytes: u64,
    /// The storage the disk is on; default `local-lvm`.
    pub storage: String,
    /// `raw`, `qcow2` or `vmdk`; applies when the disk is made (PVE keeps no format option).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// One of [`DISK_CACHES`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    /// Whether the guest's TRIM requests reach the storage and free space there (`discard=on`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discard: Option<bool>,
    /// Whether the guest sees the disk as an SSD (scsi and sata only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssd: Option<bool>,
    /// Whether the disk has an I/O thread of its own (scsi and virtio only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iothread: Option<bool>,
    /// Whether backups (vzdump) include the disk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<bool>,
    /// Whether storage replication includes the disk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicate: Option<bool>,
    /// The boot disk: it receives the image.
    pub boot: bool,
}

impl Disk {
    /// The bus of the slot (`scsi`, `virtio`, `sata`).
    pub(crate) fn bus(&self) -> &str {
        self.slot.trim_end_matches(|c: char| c.is_ascii_digit())
    }
}

/// `disks`, or `None` when absent. Mixing it with `disk`/`storage` is an error.
pub(super) fn disks_field(ctx: &mut Ctx, fp: &Obj) -> Option<Option<Vec<Disk>>> {
    let Some(n) = fp.get("disks") else {
        return Some(None);
    };
    let short: Vec<&str> = ["disk", "storage"]
        .into_iter()
        .filter(|k| fp.get(k).is_some())
        .collect();
    if !short.is_empty() {
        ctx.error(
            n.pos,
            format!(
                "{PATH} and spec.forProvider.{} are two forms of the same thing; write the \
                 boot disk as the first entry of disks (disk: 100Gi, storage: S is \
                 disks: [{{size: 100Gi, storage: S}}])",
                short.join("/")
            ),
        );
        return None;
    }
    let Value::Seq(items) = &n.value else {
        ctx.error(
            n.pos,
            format!(
                "{PATH} must be a list of disks, e.g. [{{size: 32Gi}}, {{size: 100Gi, storage: data}}]; found {}",
                n.value.describe()
            ),
        );
        return None;
    };
    if items.is_empty() || items.len() > MAX_DISKS {
        ctx.error(
            n.pos,
            format!(
                "{PATH} has {} disks; a VM has 1 to {MAX_DISKS} (scsi0-30, virtio0-15, sata0-5)",
                items.len()
            ),
        );
        return None;
    }
    let errors = ctx.error_count();
    let parsed: Vec<Option<(Disk, Option<&Node>)>> = items
        .iter()
        .enumerate()
        .map(|(i, item)| disk(ctx, item, &format!("{PATH}[{i}]"), i == 0))
        .collect();
    let parsed: Option<Vec<(Disk, Option<&Node>)>> = parsed.into_iter().collect();
    let parsed = parsed.filter(|_| ctx.error_count() == errors)?;
    finish(ctx, n, parsed)
}

/// Slots (given ones checked for duplicates, missing ones assigned in order on the scsi bus)
/// and the boot disk (the first unless one says `boot: true`; at most one does).
fn finish(
    ctx: &mut Ctx,
    n: &Node,
    parsed: Vec<(Disk, Option<&Node>)>,
) -> Option<Option<Vec<Disk>>> {
    let mut taken: Vec<String> = Vec::new();
    for (d, slot_node) in &parsed {
        if let Some(s) = slot_node {
            if taken.contains(&d.slot) {
                ctx.error(
                    s.pos,
                    format!("{PATH}: slot {} is given to two disks", d.slot),
                );
                return None;
            }
            taken.push(d.slot.clone());
        }
    }
    let mut disks = Vec::with_capacity(parsed.len());
    for (mut d, slot_node) in parsed {
        if slot_node.is_none() {
            let Some(free) = (0..=30)
                .map(|i| format!("scsi{i}"))
                .find(|s| !taken.contains(s))
            else {
                ctx.error(n.pos, format!("{PATH}: no free scsi slot left (scsi0-30)"));
                return None;
            };
            taken.push(free.clone());
            d.slot = free;
        }
        disks.push(d);
    }
    match disks.iter().filter(|d| d.boot).count() {
        0 => disks[0].boot = true,
        1 => {}
        _ => {
            ctx.error(
                n.pos,
                format!("{PATH}: more than one disk says boot: true; one disk is the boot disk"),
            );
            return None;
        }
    }
    Some(Some(disks))
}

/// One entry; `first`: the boot disk unless another says `boot: true` (its size defaults as
/// `disk` does). Returns the disk and the node of its `slot`, when written.
fn disk<'n>(
    ctx: &mut Ctx,
    node: &'n Node,
    path: &str,
    first: bool,
) -> Option<(Disk, Option<&'n Node>)> {
    let obj = object(ctx, node, path, Some(DISK_FIELDS))?;
    let errors = ctx.error_count();
    let slot_node = obj.get("slot");
    let slot = slot_node.and_then(|s| slot(ctx, s, path));
    let boot = obj
        .get("boot")
        .and_then(|v| bool_field_at(ctx, v, path, "boot"))
        .unwrap_or(false);
    let size_bytes = match obj.get("size") {
        None if first || boot => Some(DEFAULT_DISK_BYTES),
        None => {
            ctx.error(
                obj.pos,
                format!("missing required field {path}.size: e.g. 100Gi"),
            );
            None
        }
        Some(s) => disk_size(ctx, s, path),
    };
    let storage = match obj.get("storage") {
        None => Some(DEFAULT_STORAGE.to_string()),
        Some(s) => storage(ctx, s, path),
    };
    let choice = |ctx: &mut Ctx, key: &str, values: &[&str]| {
        obj.get(key).and_then(|v| {
            let pairs: Vec<(&str, &str)> = values.iter().map(|c| (*c, *c)).collect();
            enum_field(ctx, v, &format!("{path}.{key}"), &pairs).map(str::to_string)
        })
    };
    let format = choice(ctx, "format", &DISK_FORMATS);
    let cache = choice(ctx, "cache", &DISK_CACHES);
    let mut flag = |key: &str| obj.get(key).and_then(|v| bool_field_at(ctx, v, path, key));
    let (discard, ssd, iothread) = (flag("discard"), flag("ssd"), flag("iothread"));
    let (backup, replicate) = (flag("backup"), flag("replicate"));
    if ctx.error_count() != errors {
        return None;
    }
    let d = Disk {
        slot: slot.unwrap_or_default(),
        size_bytes: size_bytes?,
        storage: storage?,
        format,
        cache,
        discard,
        ssd,
        iothread,
        backup,
        replicate,
        boot,
    };
    if slot_node.is_none() {
        // Assigned later on the scsi bus, where both options exist.
        return Some((d, None));
    }
    ctx.check(obj.pos, check_bus_options(&d, path))?;
    Some((d, slot_node))
}

/// `ssd` and `iothread` exist only on some buses.
fn check_bus_options(d: &Disk, path: &str) -> Result<(), String> {
    let bus = d.bus();
    for (key, set, buses) in [
        ("ssd", d.ssd.is_some(), ["scsi", "sata"]),
        ("iothread", d.iothread.is_some(), ["scsi", "virtio"]),
    ] {
        if set && !buses.contains(&bus) {
            return Err(format!(
                "{path}.{key}: a {bus} disk has no {key} option in PVE (only {} disks do)",
                buses.join(" and ")
            ));
        }
    }
    Ok(())
}

fn slot(ctx: &mut Ctx, s: &Node, path: &str) -> Option<String> {
    let text = string(ctx, s, &format!("{path}.slot"), "scsi1")?;
    ctx.check(
        s.pos,
        check_slot(text).map_err(|e| format!("{path}.slot: {e}")),
    )?;
    Some(text.to_string())
}

fn storage(ctx: &mut Ctx, s: &Node, path: &str) -> Option<String> {
    let text = string(ctx, s, &format!("{path}.storage"), DEFAULT_STORAGE)?;
    ctx.check(s.pos, check_storage(text))?;
    Some(text.to_string())
}

fn bool_field_at(ctx: &mut Ctx, v: &Node, path: &str, key: &str) -> Option<bool> {
    let short = path.trim_start_matches("spec.forProvider.");
    bool_field(ctx, v, &format!("{short}.{key}"))
}

/// A disk size: 1 GiB ..= 100 TiB, a whole number of GiB (PVE allocates `S:N` in GiB).
fn disk_size(ctx: &mut Ctx, n: &Node, path: &str) -> Option<u64> {
    let field = format!("{path}.size");
    let bytes = size_field(ctx, n, &field, GIB, "GiB", MIN_DISK_BYTES, MAX_DISK_BYTES)?;
    if !bytes.is_multiple_of(GIB) {
        ctx.error(
            n.pos,
            format!(
                "{field} is {}, not a whole number of GiB; PVE allocates disks in GiB (write e.g. {}Gi)",
                format_bytes(bytes),
                bytes.div_ceil(GIB)
            ),
        );
        return None;
    }
    Some(bytes)
}

/// A drive slot proxsync manages: `scsi0`..`scsi30`, `virtio0`..`virtio15`, `sata0`..`sata5`.
pub fn check_slot(s: &str) -> Result<(), String> {
    let valid = "valid slots are scsi0-30, virtio0-15 and sata0-5";
    if s.starts_with("ide") {
        return Err(format!(
            "{s:?} is on the ide bus, which proxsync leaves to the CD-ROM (ide2) and the \
             cloud-init drive; {valid}"
        ));
    }
    let ok = DISK_BUSES.iter().any(|(bus, max)| {
        s.strip_prefix(bus).is_some_and(|n| {
            !n.is_empty()
                && n.len() <= 2
                && n.bytes().all(|b| b.is_ascii_digit())
                && !(n.len() == 2 && n.starts_with('0'))
                && n.parse::<u8>().is_ok_and(|i| i <= *max)
        })
    });
    if ok {
        Ok(())
    } else {
        Err(format!("{s:?} is not a disk slot; {valid}"))
    }
}

/// `destroyDisks`: slots whose disk (still attached) is destroyed with its data. Removing a
/// disk from `disks` only detaches it; destroying data takes this explicit list. Each entry is
/// a slot proxsync manages and not one of `disks`.
pub(super) fn destroy_disks_field(
    ctx: &mut Ctx,
    fp: &Obj,
    disks: Option<&[Disk]>,
) -> Option<Vec<String>> {
    let path = "spec.forProvider.destroyDisks";
    let Some(n) = fp.get("destroyDisks") else {
        return Some(Vec::new());
    };
    let Value::Seq(items) = &n.value else {
        ctx.error(
            n.pos,
            format!(
                "{path} must be a list of slots, e.g. [scsi1]; found {}",
                n.value.describe()
            ),
        );
        return None;
    };
    let errors = ctx.error_count();
    let mut slots: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some(text) = string(ctx, item, &format!("{path}[{i}]"), "scsi1") else {
            continue;
        };
        if ctx
            .check(
                item.pos,
                check_slot(text).map_err(|e| format!("{path}[{i}]: {e}")),
            )
            .is_none()
        {
            continue;
        }
        if slots.iter().any(|s| s == text) {
            ctx.error(item.pos, format!("{path}: slot {text} is listed twice"));
        } else if disks.is_some_and(|d| d.iter().any(|d| d.slot == text)) {
            ctx.error(
                item.pos,
                format!(
                    "{path}: slot {text} is also a disk of spec.forProvider.disks; a disk is either \
                     kept or destroyed (remove it from disks to destroy it)"
                ),
            );
        } else {
            slots.push(text.to_string());
        }
    }
    (ctx.error_count() == errors).then_some(slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_pves() {
        for ok in ["scsi0", "scsi30", "virtio15", "sata5"] {
            assert!(check_slot(ok).is_ok(), "{ok}");
        }
        for bad in [
            "scsi31",
            "virtio16",
            "sata6",
            "ide0",
            "ide2",
            "scsi",
            "scsi01",
            "SCSI0",
            "net0",
            "scsi0,cache=unsafe",
            "scsi-1",
            "efidisk0",
        ] {
            assert!(check_slot(bad).is_err(), "{bad}");
        }
    }
}
