//! A spec from a VM's config, pure: what `proxsync import` writes for one VM.
//!
//! Each field proxsync manages is written as the VM has it now, read the way converge reads it
//! (`render`), so the first cycle after the import finds nothing to change but the marker and
//! the tag. What the format cannot say is not written; it is listed in the header as left
//! alone, and converge never touches a key the spec does not declare. Where writing a list
//! would make converge remove something (a disk on an IDE slot, a gap between NICs), the short
//! form is written instead, which manages only the boot disk or `net0`'s bridge.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::pve::types::VmConfig;
use crate::pve::values::{DriveValue, NetValue, percent_decode, prop_value, pve_bool};
use crate::render::cloud_init::cloudinit_drive_slot;
use crate::render::current::boot_disk;
use crate::spec::{
    DISK_CACHES, GIB, MAX_NICS, MIB, NET_MODELS, OS_TYPES, SCSI_HARDWARE, TPM_VERSIONS, VGA_TYPES,
    check_cpu_type, check_mac, check_machine, check_pool, check_slot, check_spec_name, check_tag,
};

/// What the import knows of one guest: its listing entry and its config.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VmFacts<'a> {
    pub kind: crate::guest::GuestKind,
    pub site: &'a str,
    pub vmid: u32,
    pub node: &'a str,
    pub running: bool,
    pub pool: Option<&'a str>,
    /// The HA manager's state, when the VM is an HA resource.
    pub ha_state: Option<&'a str>,
    /// Its HA resource, when it is one and it could be read.
    pub ha: Option<&'a crate::pve::ha::HaResource>,
    pub config: &'a VmConfig,
}

/// One spec written from a VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Imported {
    pub name: String,
    pub vmid: u32,
    /// The YAML document, with its header of comments.
    pub text: String,
    /// The config keys the spec does not express, which proxsync leaves as they are.
    pub left_alone: Vec<String>,
}

/// Config keys that are PVE's own bookkeeping, never a setting a spec would hold.
const BOOKKEEPING: [&str; 8] = [
    "digest", "meta", "vmgenid", "smbios1", "boot", "bootdisk", "lock", "pending",
];

/// The spec of `vm`, named after the VM (made a valid spec name, unique among `taken`, which
/// gets it). Refused (`Err`, saying what to do) for a VM that a spec cannot adopt: one with
/// no name, no smbios1 uuid, or a claim of some proxsync install on it.
/// `observe`: the spec is observe-only (`managementPolicy: Observe`), to watch the VM before
/// letting proxsync act on it.
pub(crate) fn spec_text(
    vm: &VmFacts<'_>,
    taken: &mut BTreeSet<String>,
    observe: bool,
) -> Result<Imported, String> {
    let cfg = vm.config;
    let (vm_name, uuid) = adoptable(vm)?;
    let name = spec_name(vm_name, vm.vmid, taken);
    let mut w = Writer::default();
    let mut known: BTreeSet<String> = ["name", "cores", "sockets", "memory", "tags", "description"]
        .into_iter()
        .map(String::from)
        .collect();
    let mut notes: Vec<String> = Vec::new();
    let (tags, tenant) = tags_and_tenant(cfg, &mut notes);
    let head = Head {
        name: &name,
        guest_name: vm_name,
        tenant: tenant.as_deref(),
        proof: (crate::spec::ADOPT_UUID, &uuid),
    };
    let ha = head_lines(&mut w, vm, &head, observe, &mut notes);
    cpu_and_memory(&mut w, cfg, &mut known, &mut notes);
    firmware(&mut w, cfg, &mut known, &mut notes);
    options(&mut w, vm, &mut known, &mut notes);
    if !tags.is_empty() {
        w.list(4, "tags", &tags);
    }
    if let Some(text) = description(cfg, &mut notes) {
        w.line(4, "description", Some(&text));
    }
    disks(&mut w, cfg, &mut known, &mut notes);
    networks(&mut w, cfg, &mut known, &mut notes);
    cloud_init(&mut w, cfg, &mut known, &mut notes);
    ha_line(&mut w, ha);
    let left_alone = left_alone(cfg, &known);
    let mut text = header(vm, vm_name, &left_alone, &notes);
    text.push_str(&w.out);
    Ok(Imported {
        name,
        vmid: vm.vmid,
        text,
        left_alone,
    })
}

/// What names the spec and its guest: the spec's name, the guest's (a VM's `name`, a
/// container's `hostname`), the tenant, and the consent's proof (its annotation and value).
pub(super) struct Head<'a> {
    pub name: &'a str,
    pub guest_name: &'a str,
    pub tenant: Option<&'a str>,
    pub proof: (&'static str, &'a str),
}

/// An HA resource's fields as a spec holds them: state, restarts, relocations, PVE 8 group.
pub(super) type HaFields<'a> = (&'a str, u64, u64, Option<&'a str>);

/// The document up to the guest's own fields: apiVersion and kind, metadata with the tenant
/// label and the consent, the orphan deletion policy (and observe-only when asked), site,
/// node, the guest's name and its power state, which the HA manager decides for an HA
/// resource. Returns the HA fields, for [`ha_line`].
pub(super) fn head_lines<'a>(
    w: &mut Writer,
    vm: &VmFacts<'a>,
    head: &Head<'_>,
    observe: bool,
    notes: &mut Vec<String>,
) -> Option<HaFields<'a>> {
    let noun = vm.kind.noun();
    w.line(0, "apiVersion", Some("proxsync.io/v1"));
    w.line(0, "kind", Some(vm.kind.spec_kind()));
    w.line(0, "metadata", None);
    w.line(2, "name", Some(head.name));
    if let Some(t) = head.tenant {
        w.line(2, "labels", None);
        w.line(4, "tenant-id", Some(t));
    }
    w.line(2, "annotations", None);
    w.line(4, crate::spec::ADOPT, Some(&vm.vmid.to_string()));
    w.line(4, head.proof.0, Some(head.proof.1));
    w.line(0, "spec", None);
    w.comment(
        2,
        &format!(
            "Orphan: removing this spec releases the {noun}, never deletes it. Delete once you trust it."
        ),
    );
    w.line(2, "deletionPolicy", Some("Orphan"));
    if observe {
        w.comment(
            2,
            &format!(
                "Observe: proxsync only reports how the {noun} differs (no adoption, no change). Remove it to let go."
            ),
        );
        w.line(2, "managementPolicy", Some("Observe"));
    }
    w.line(2, "forProvider", None);
    w.line(4, "site", Some(vm.site));
    w.line(4, "node", Some(vm.node));
    let name_field = match vm.kind {
        crate::guest::GuestKind::Qemu => "name",
        crate::guest::GuestKind::Lxc => "hostname",
    };
    w.line(4, name_field, Some(head.guest_name));
    let ha = ha_fields(vm, notes);
    // The HA manager decides an HA resource's power: the spec says what it keeps.
    let running = match ha.as_ref().map(|h| h.0) {
        Some("started") => true,
        Some("stopped") => false,
        _ => vm.running,
    };
    if !running {
        w.line(4, "powerState", Some("stopped"));
    }
    ha
}

/// `ha:` with the fields [`head_lines`] returned, when the guest is an HA resource.
pub(super) fn ha_line(w: &mut Writer, ha: Option<HaFields<'_>>) {
    if let Some((state, max_restart, max_relocate, group)) = ha {
        let group = group
            .map(|g| format!(", group: {}", quoted(g)))
            .unwrap_or_default();
        w.raw(
            4,
            &format!(
                "ha: {{state: {state}, maxRestart: {max_restart}, maxRelocate: {max_relocate}{group}}}"
            ),
        );
    }
}

/// The VM's name and smbios1 uuid (lower-case), unless a spec cannot adopt it: no name, no
/// uuid, or a claim of some proxsync install on it (a tag or a marker line).
fn adoptable<'c>(vm: &VmFacts<'c>) -> Result<(&'c str, String), String> {
    let cfg = vm.config;
    let vmid = vm.vmid;
    let vm_name = cfg.get("name").ok_or_else(|| {
        format!("VM {vmid} has no name; give it one (qm set {vmid} --name NAME) and import again")
    })?;
    if crate::spec::check_vm_name(vm_name).is_err() {
        return Err(format!(
            "VM {vmid} has no valid name ({vm_name:?} is not a DNS name); give it one (qm set \
             {vmid} --name NAME) and import again"
        ));
    }
    let uuid = cfg
        .get("smbios1")
        .and_then(|s| prop_value(s, "uuid", None))
        .ok_or_else(|| {
            format!(
                "VM {vmid} has no smbios1 uuid, which pins the adoption to this VM; set one \
                 (qm set {vmid} --smbios1 uuid=$(cat /proc/sys/kernel/random/uuid)) and import \
                 again"
            )
        })?;
    if let Some(tag) = cfg.tags().into_iter().find(|t| t.starts_with("proxsync")) {
        return Err(format!(
            "VM {vmid} carries the tag {tag}: an install of proxsync manages it (proxsync adopt \
             confirms a VM of this install's)"
        ));
    }
    if cfg
        .description()
        .is_some_and(|d| d.contains(crate::ownership::MARKER_PREFIX))
    {
        return Err(format!(
            "VM {vmid} carries a proxsync marker line: some install of proxsync made it"
        ));
    }
    Ok((vm_name, uuid.to_ascii_lowercase()))
}

/// The VM's HA resource as a spec holds it: state, restarts, relocations and its PVE 8 group
/// (a PVE 9 rule is left as it is: a spec without `ha.nodes` never touches one).
fn ha_fields<'a>(vm: &VmFacts<'a>, notes: &mut Vec<String>) -> Option<HaFields<'a>> {
    let state = vm.ha_state?;
    let Some(res) = vm.ha else {
        notes.push(format!(
            "the {} is an HA resource (state {state}) whose settings could not be read: it stays \
             as PVE's HA manager has it (add ha: to manage it)",
            vm.kind.noun()
        ));
        return None;
    };
    let state = res.state.as_deref().unwrap_or("started");
    if !matches!(state, "started" | "stopped" | "ignored") {
        notes.push(format!(
            "the {}'s HA state is {state}, which a spec cannot hold: HA is left as it is",
            vm.kind.noun()
        ));
        return None;
    }
    let tries = |n: Option<u64>| n.unwrap_or(1);
    Some((
        state,
        tries(res.max_restart),
        tries(res.max_relocate),
        res.group.as_deref(),
    ))
}

/// The config keys no field of the spec declares (PVE's bookkeeping aside).
pub(super) fn left_alone(cfg: &VmConfig, known: &BTreeSet<String>) -> Vec<String> {
    let mut out: Vec<String> = cfg
        .values
        .iter()
        .filter(|(k, _)| !known.contains(k.as_str()) && !BOOKKEEPING.contains(&k.as_str()))
        .filter(|(k, _)| k.as_str() != "parent")
        .map(|(k, v)| left_alone_entry(k, v))
        .collect();
    if cfg.get("parent").is_some() {
        out.push("snapshots".into());
    }
    out
}

/// The comments above the document: where it came from, what adopting does, what is left
/// alone, and the notes.
pub(super) fn header(
    vm: &VmFacts<'_>,
    vm_name: &str,
    left_alone: &[String],
    notes: &[String],
) -> String {
    let mut text = String::new();
    let noun = vm.kind.noun();
    let _ = writeln!(
        text,
        "# Written by `proxsync import` from {noun} {} ({vm_name}) on site {}, node {}.",
        vm.vmid, vm.site, vm.node
    );
    let _ = writeln!(
        text,
        "# Its first cycle adopts the {noun}: proxsync's marker line and tag are written, nothing \
         else\n# (`proxsync plan` shows it). Fields left out are not managed.",
    );
    if !left_alone.is_empty() {
        text.push_str(
            "# Left alone (the spec format cannot express them; proxsync never touches them):\n",
        );
        for chunk in wrap(&left_alone.join(", "), 88) {
            let _ = writeln!(text, "#   {chunk}");
        }
    }
    for n in notes {
        for (i, chunk) in wrap(n, 88).iter().enumerate() {
            let lead = if i == 0 { "Note: " } else { "  " };
            let _ = writeln!(text, "# {lead}{chunk}");
        }
    }
    text
}

/// A valid, unique spec name from a VM name: lower-cased, other characters made `-`, at most
/// 63 characters; `-<vmid>` appended when taken.
pub(crate) fn spec_name(vm_name: &str, vmid: u32, taken: &mut BTreeSet<String>) -> String {
    let mut base = String::new();
    for c in vm_name.to_ascii_lowercase().chars() {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if !(c == '-' && (base.is_empty() || base.ends_with('-'))) {
            base.push(c);
        }
    }
    let trim = |s: &str, max: usize| s[..s.len().min(max)].trim_end_matches('-').to_string();
    let mut name = trim(&base, 63);
    if name.is_empty() || check_spec_name(&name).is_err() {
        name = format!("vm-{vmid}");
    }
    if taken.contains(&name) {
        let suffix = format!("-{vmid}");
        name = format!("{}{suffix}", trim(&name, 63 - suffix.len()));
    }
    taken.insert(name.clone());
    name
}

/// The VM's tags a spec can hold, and the tenant of a `tenant_<id>` tag (a label in a spec).
pub(super) fn tags_and_tenant(
    cfg: &VmConfig,
    notes: &mut Vec<String>,
) -> (Vec<String>, Option<String>) {
    let mut tags = Vec::new();
    let mut tenant = None;
    for t in cfg.tags() {
        if let Some(id) = t.strip_prefix("tenant_")
            && tenant.is_none()
            && check_spec_name(id).is_ok()
        {
            tenant = Some(id.to_string());
        } else if check_tag(&t).is_ok() && !t.starts_with("tenant_") {
            tags.push(t);
        } else {
            notes.push(format!(
                "tag {t} is kept on the VM but not written in the spec"
            ));
        }
    }
    tags.sort();
    tags.dedup();
    (tags, tenant)
}

fn cpu_and_memory(
    w: &mut Writer,
    cfg: &VmConfig,
    known: &mut BTreeSet<String>,
    notes: &mut Vec<String>,
) {
    let number = |k: &str| cfg.get(k).and_then(|v| v.parse::<u32>().ok());
    let cores = number("cores").unwrap_or(1);
    w.num(4, "cpu", cores);
    if let Some(s) = number("sockets") {
        w.num(4, "sockets", s);
    }
    // PVE 9 may write `memory: current=N`.
    let memory = cfg
        .get("memory")
        .and_then(|m| m.trim_start_matches("current=").split(',').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(512);
    w.line(4, "memory", Some(&format!("{memory}Mi")));
    if let Some(b) = cfg.get("balloon").and_then(|v| v.parse::<u64>().ok()) {
        if b == 0 || (16..=memory).contains(&b) {
            w.line(4, "balloon", Some(&format!("{b}Mi")));
            known.insert("balloon".into());
        } else {
            notes.push(format!(
                "balloon {b} MiB is outside what a spec holds (0, or 16 MiB to the memory)"
            ));
        }
    }
    if let Some(cpu) = cfg.get("cpu") {
        match prop_value(cpu, "cputype", Some("cputype")) {
            Some(model) if check_cpu_type(model).is_ok() => {
                w.line(4, "cpuType", Some(model));
                known.insert("cpu".into());
            }
            _ => {}
        }
    }
    if let Some(v) = cfg.get("numa") {
        w.flag(4, "numa", pve_bool(v));
        known.insert("numa".into());
    }
}

/// BIOS and its EFI disk, machine, SCSI controller, TPM, serial console and display.
fn firmware(w: &mut Writer, cfg: &VmConfig, known: &mut BTreeSet<String>, notes: &mut Vec<String>) {
    if let Some(bios) = cfg.get("bios").filter(|b| matches!(*b, "seabios" | "ovmf")) {
        w.line(4, "bios", Some(bios));
        known.insert("bios".into());
        if bios == "ovmf"
            && let Some(efi) = cfg.get("efidisk0")
        {
            let keys = DriveValue::parse(efi)
                .get("pre-enrolled-keys")
                .is_some_and(pve_bool);
            w.flag(4, "preEnrolledKeys", keys);
            known.insert("efidisk0".into());
        }
    }
    if let Some(m) = cfg.get("machine")
        && let Some(t) = prop_value(m, "type", Some("type"))
        && check_machine(t).is_ok()
    {
        w.line(4, "machine", Some(t));
        known.insert("machine".into());
    }
    if let Some(s) = cfg.get("scsihw").filter(|s| SCSI_HARDWARE.contains(s)) {
        w.line(4, "scsiHardware", Some(s));
        known.insert("scsihw".into());
    }
    if let Some(tpm) = cfg.get("tpmstate0")
        && let Some(v) = DriveValue::parse(tpm)
            .get("version")
            .filter(|v| TPM_VERSIONS.contains(v))
    {
        w.line(4, "tpm", Some(v));
        known.insert("tpmstate0".into());
    }
    let vga = cfg
        .get("vga")
        .and_then(|v| prop_value(v, "type", Some("type")));
    if cfg.get("serial0") == Some("socket") && vga == Some("serial0") {
        w.flag(4, "serialConsole", true);
        known.extend(["serial0".to_string(), "vga".to_string()]);
    } else if let Some(v) = vga {
        if VGA_TYPES.contains(&v) {
            w.line(4, "vga", Some(v));
            known.insert("vga".into());
        } else {
            notes.push(format!("display {v} is not one a spec holds"));
        }
    }
}

/// The agent, OS type, start at boot, startup order, protection and pool.
fn options(
    w: &mut Writer,
    vm: &VmFacts<'_>,
    known: &mut BTreeSet<String>,
    notes: &mut Vec<String>,
) {
    let cfg = vm.config;
    if let Some(a) = cfg.get("agent") {
        let on = prop_value(a, "enabled", Some("enabled")).is_some_and(pve_bool);
        w.flag(4, "agent", on);
        known.insert("agent".into());
    }
    if let Some(os) = cfg.get("ostype").filter(|o| OS_TYPES.contains(o)) {
        w.line(4, "osType", Some(os));
        known.insert("ostype".into());
    }
    shared_options(w, vm, known, notes);
}

/// `onBoot`, `protection`, `startup`, `pool` and `vmId`: a VM's and a container's alike.
pub(super) fn shared_options(
    w: &mut Writer,
    vm: &VmFacts<'_>,
    known: &mut BTreeSet<String>,
    notes: &mut Vec<String>,
) {
    let cfg = vm.config;
    for (field, key) in [("onBoot", "onboot"), ("protection", "protection")] {
        if let Some(v) = cfg.get(key) {
            w.flag(4, field, pve_bool(v));
            known.insert(key.into());
        }
    }
    if let Some(s) = cfg.get("startup") {
        let number =
            |key: &str| prop_value(s, key, Some("order")).and_then(|v| v.parse::<u64>().ok());
        let parts = [
            ("order", number("order")),
            ("upDelay", number("up")),
            ("downDelay", number("down")),
        ];
        let set: Vec<String> = parts
            .iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k}: {v}")))
            .collect();
        if set.is_empty() {
            notes.push(format!("startup {s:?} is not one a spec holds"));
        } else {
            w.raw(4, &format!("startup: {{{}}}", set.join(", ")));
            known.insert("startup".into());
        }
    }
    if let Some(pool) = vm.pool {
        if check_pool(pool).is_ok() {
            w.line(4, "pool", Some(pool));
        } else {
            notes.push(format!("pool {pool} is not one a spec holds"));
        }
    }
    w.num(4, "vmId", vm.vmid);
}

/// The description above any marker, when a spec can hold it.
pub(super) fn description(cfg: &VmConfig, notes: &mut Vec<String>) -> Option<String> {
    let text = cfg.description()?.trim_end().to_string();
    if text.is_empty() {
        return None;
    }
    let control = text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t');
    if text.len() > 7680 || control {
        notes.push(
            "the description is longer than 7680 bytes or holds control characters: kept, not \
             written in the spec"
                .into(),
        );
        return None;
    }
    Some(text)
}

/// Every disk as `disks:` (the boot disk first), or the short form when a list would lose one.
fn disks(w: &mut Writer, cfg: &VmConfig, known: &mut BTreeSet<String>, notes: &mut Vec<String>) {
    let boot = boot_disk(cfg).map(|(slot, _)| slot);
    let mut list: Vec<(String, DriveValue)> = Vec::new();
    let mut inexpressible: Vec<String> = Vec::new();
    for (key, value) in &cfg.values {
        if !crate::pve::values::is_drive_key(key) {
            continue;
        }
        let drive = DriveValue::parse(value);
        if drive.is_cdrom_or_cloudinit() {
            continue;
        }
        let storage = drive.volume.split_once(':').map(|(s, _)| s);
        let whole_gib = drive.size().is_some_and(|s| s >= GIB);
        // `check_slot` refuses IDE (the CD-ROM's and cloud-init's bus) and slots PVE lacks.
        if storage.is_none() || !whole_gib || check_slot(key).is_err() {
            inexpressible.push(key.clone());
        }
        list.push((key.clone(), drive));
    }
    // The boot disk first: the image's disk.
    list.sort_by_key(|(k, _)| Some(k) != boot.as_ref());
    if list.is_empty() {
        notes.push(
            "the VM has no disk; the spec's default disk would be made at a create only".into(),
        );
        return;
    }
    if !inexpressible.is_empty() {
        // The short form manages the boot disk's size only; the rest is left alone.
        let (slot, drive) = &list[0];
        notes.push(format!(
            "disks {} cannot be written as a list (an IDE slot, a size under 1 GiB or a path): \
             only the boot disk {slot} is managed, by size",
            inexpressible.join(", ")
        ));
        if let Some(size) = drive.size().filter(|s| *s >= GIB) {
            w.line(4, "disk", Some(&format!("{}Gi", size / GIB)));
            if let Some((storage, _)) = drive.volume.split_once(':') {
                w.line(4, "storage", Some(storage));
            }
        }
        return;
    }
    w.line(4, "disks", None);
    for (slot, drive) in &list {
        known.insert(slot.clone());
        let storage = drive.volume.split_once(':').map_or("", |(s, _)| s);
        let size = drive.size().unwrap_or(GIB) / GIB;
        if drive.size().is_some_and(|s| s % GIB != 0) {
            notes.push(format!(
                "disk {slot} is {} MiB, written as {size}Gi: disks only grow, so it stays as it is",
                drive.size().unwrap_or(0) / MIB
            ));
        }
        w.raw(4, &format!("- slot: {slot}"));
        w.line(6, "size", Some(&format!("{size}Gi")));
        w.line(6, "storage", Some(storage));
        if let Some(c) = drive.get("cache").filter(|c| DISK_CACHES.contains(c)) {
            w.line(6, "cache", Some(c));
        }
        if let Some(d) = drive.get("discard") {
            w.flag(6, "discard", d == "on");
        }
        let bus = slot.trim_end_matches(|c: char| c.is_ascii_digit());
        let flags = [
            ("ssd", matches!(bus, "scsi" | "sata")),
            ("iothread", matches!(bus, "scsi" | "virtio")),
            ("backup", true),
            ("replicate", true),
        ];
        for (key, allowed) in flags {
            if let Some(v) = drive.get(key).filter(|_| allowed) {
                w.flag(6, key, pve_bool(v));
            }
        }
    }
}

/// Every NIC as `networks:`, or the short form when the NICs are not `net0..netN` in a row.
fn networks(w: &mut Writer, cfg: &VmConfig, known: &mut BTreeSet<String>, notes: &mut Vec<String>) {
    let nic_keys: Vec<&String> = cfg
        .values
        .keys()
        .filter(|k| {
            k.strip_prefix("net")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    let Some(net0) = cfg.get("net0").map(NetValue::parse) else {
        notes.push(
            "the VM has no net0: adopting it adds one on vmbr0 (add the NIC first, or edit network)"
                .into(),
        );
        return;
    };
    let in_a_row = (0..nic_keys.len()).all(|i| cfg.get(&format!("net{i}")).is_some());
    let nics: Vec<NetValue> = (0..nic_keys.len().min(MAX_NICS))
        .filter_map(|i| cfg.get(&format!("net{i}")).map(NetValue::parse))
        .collect();
    let expressible = |n: &NetValue| {
        n.get("bridge").is_some()
            && n.model.as_deref().is_some_and(|m| NET_MODELS.contains(&m))
            && n.mac.as_deref().is_none_or(|m| check_mac(m).is_ok())
    };
    if !in_a_row || !nics.iter().all(expressible) {
        notes.push(
            "the NICs cannot be written as a list (not net0..netN in a row, or one without a \
             bridge): only net0's bridge is managed"
                .into(),
        );
        if let Some(b) = net0.get("bridge") {
            w.line(4, "network", Some(b));
            known.insert("net0".into());
        }
        return;
    }
    w.line(4, "networks", None);
    for (i, n) in nics.iter().enumerate() {
        known.insert(format!("net{i}"));
        w.raw(
            4,
            &format!("- bridge: {}", quoted(n.get("bridge").unwrap_or_default())),
        );
        w.line(6, "model", n.model.as_deref());
        if let Some(mac) = n.mac.as_deref().and_then(|m| check_mac(m).ok()) {
            w.line(6, "mac", Some(&mac));
        }
        for (key, field) in [("tag", "vlan"), ("mtu", "mtu"), ("queues", "queues")] {
            if let Some(v) = n.get(key).and_then(|v| v.parse::<u32>().ok()) {
                w.num(6, field, v);
            }
        }
        if let Some(t) = n.get("trunks") {
            w.line(6, "trunks", Some(t));
        }
        if let Some(r) = n.get("rate").filter(|r| r.parse::<f64>().is_ok()) {
            w.raw(6, &format!("rate: {r}"));
        }
        if let Some(f) = n.get("firewall") {
            w.flag(6, "firewall", pve_bool(f));
        }
    }
}

/// PVE's cloud-init options, when the VM has a cloud-init drive.
fn cloud_init(
    w: &mut Writer,
    cfg: &VmConfig,
    known: &mut BTreeSet<String>,
    notes: &mut Vec<String>,
) {
    if cloudinit_drive_slot(cfg).is_none() {
        return;
    }
    let mut lines = Writer::default();
    if let Some(u) = cfg.get("ciuser") {
        lines.line(6, "user", Some(u));
        known.insert("ciuser".into());
    }
    if let Some(k) = cfg.get("sshkeys") {
        let decoded = percent_decode(k);
        let keys: Vec<String> = decoded
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
        if !keys.is_empty() {
            lines.list(6, "sshKeys", &keys);
            known.insert("sshkeys".into());
        }
    }
    let mut ips = Vec::new();
    for i in 0..32 {
        let key = format!("ipconfig{i}");
        let Some(v) = cfg.get(&key) else { break };
        let part = |k: &str| prop_value(v, k, None);
        let fields = [
            ("ip", part("ip")),
            ("gateway", part("gw")),
            ("ip6", part("ip6")),
            ("gateway6", part("gw6")),
        ];
        let set: Vec<String> = fields
            .iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k}: {}", quoted(v))))
            .collect();
        if set.is_empty() {
            break;
        }
        ips.push(format!("{{{}}}", set.join(", ")));
        known.insert(key);
    }
    if !ips.is_empty() {
        lines.raw(6, &format!("ipConfig: [{}]", ips.join(", ")));
    }
    if let Some(ns) = cfg.get("nameserver") {
        let list: Vec<String> = ns
            .split([' ', ',', ';'])
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if !list.is_empty() {
            lines.list(6, "nameservers", &list);
            known.insert("nameserver".into());
        }
    }
    if let Some(d) = cfg.get("searchdomain") {
        lines.line(6, "searchDomain", Some(d));
        known.insert("searchdomain".into());
    }
    if let Some(u) = cfg.get("ciupgrade") {
        lines.flag(6, "upgradePackages", pve_bool(u) || u == "true");
        known.insert("ciupgrade".into());
    }
    if cfg.get("cipassword").is_some() {
        notes.push("cipassword is kept on the VM; specs hold no passwords".into());
    }
    if !lines.out.is_empty() {
        w.line(4, "cloudInit", None);
        w.out.push_str(&lines.out);
    }
}

/// A left-alone key, with what it is when that helps (a CD-ROM's image).
fn left_alone_entry(key: &str, value: &str) -> String {
    if crate::pve::values::is_drive_key(key) {
        let d = DriveValue::parse(value);
        if d.is_cdrom_or_cloudinit() {
            return format!("{key} (CD-ROM {})", d.volume);
        }
    }
    key.to_string()
}

/// `text` in lines of at most `width` characters (a longer word gets a line of its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.len() + word.len() + 1 > width {
            out.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push(line);
    }
    out
}

/// A YAML scalar: plain when it cannot be read as anything but a string, else double-quoted
/// (JSON's quoting is valid YAML).
fn quoted(s: &str) -> String {
    let plain = s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'))
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
        );
    if plain {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_default()
    }
}

/// Builds the document line by line.
#[derive(Default)]
pub(super) struct Writer {
    pub(super) out: String,
}

impl Writer {
    /// `key: value` with a string value (quoted when YAML would read it as anything else), or
    /// `key:` opening a mapping.
    pub(super) fn line(&mut self, indent: usize, key: &str, value: Option<&str>) {
        let key = quoted(key);
        match value {
            Some(v) => {
                let _ = writeln!(self.out, "{:indent$}{key}: {}", "", quoted(v));
            }
            None => {
                let _ = writeln!(self.out, "{:indent$}{key}:", "");
            }
        }
    }

    pub(super) fn num(&mut self, indent: usize, key: &str, n: impl std::fmt::Display) {
        let _ = writeln!(self.out, "{:indent$}{key}: {n}", "");
    }

    pub(super) fn flag(&mut self, indent: usize, key: &str, b: bool) {
        let _ = writeln!(self.out, "{:indent$}{key}: {b}", "");
    }

    pub(super) fn raw(&mut self, indent: usize, text: &str) {
        let _ = writeln!(self.out, "{:indent$}{text}", "");
    }

    pub(super) fn list(&mut self, indent: usize, key: &str, items: &[String]) {
        let items: Vec<String> = items.iter().map(|i| quoted(i)).collect();
        let _ = writeln!(self.out, "{:indent$}{key}: [{}]", "", items.join(", "));
    }

    pub(super) fn comment(&mut self, indent: usize, text: &str) {
        let _ = writeln!(self.out, "{:indent$}# {text}", "");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Image, parse_file};

    fn config(pairs: &[(&str, &str)]) -> VmConfig {
        VmConfig {
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    const UUID: &str = "uuid=3F2504E0-4F89-11D3-9A0C-0305E82C3301";

    fn import(cfg: &VmConfig) -> Result<Imported, String> {
        let vm = VmFacts {
            kind: crate::guest::GuestKind::Qemu,
            site: "lab",
            vmid: 105,
            node: "pve1",
            running: true,
            pool: None,
            ha_state: None,
            ha: None,
            config: cfg,
        };
        spec_text(&vm, &mut BTreeSet::new(), false)
    }

    fn parsed(imported: &Imported) -> crate::spec::Spec {
        let (specs, diags) = parse_file("imported.yaml", imported.text.as_bytes());
        assert!(diags.is_empty(), "{diags:?}\n{}", imported.text);
        specs.into_iter().next().expect("one spec")
    }

    #[test]
    fn spec_names_are_valid_and_unique() {
        let mut taken = BTreeSet::new();
        assert_eq!(
            spec_name("DB_Primary.example.com", 105, &mut taken),
            "db-primary-example-com"
        );
        assert_eq!(
            spec_name("db-primary.example.com", 106, &mut taken),
            "db-primary-example-com-106"
        );
        assert_eq!(spec_name("---", 107, &mut taken), "vm-107");
        let long = "a".repeat(80);
        let name = spec_name(&long, 108, &mut taken);
        assert_eq!(name.len(), 63);
        assert_eq!(
            spec_name(&long, 109, &mut taken),
            format!("{}-109", "a".repeat(59))
        );
    }

    #[test]
    fn every_managed_field_is_written_as_the_vm_has_it() {
        let cfg = config(&[
            ("name", "db-01"),
            ("smbios1", UUID),
            ("cores", "2"),
            ("sockets", "2"),
            ("memory", "4096"),
            ("balloon", "1024"),
            ("cpu", "host,flags=+aes"),
            ("bios", "ovmf"),
            (
                "efidisk0",
                "local-lvm:vm-105-disk-1,efitype=4m,pre-enrolled-keys=1,size=4M",
            ),
            ("tpmstate0", "local-lvm:vm-105-disk-2,size=4M,version=v2.0"),
            ("boot", "order=virtio1;net0"),
            ("scsi0", "data:vm-105-disk-0,cache=writeback,size=100G"),
            ("virtio1", "local-lvm:vm-105-disk-3,discard=on,size=32G"),
            (
                "net0",
                "virtio=bc:24:11:00:00:01,bridge=vmbr0,tag=20,firewall=1",
            ),
            (
                "net1",
                "e1000=BC:24:11:00:00:02,bridge=vmbr1,trunks=10;20-30,rate=12.5",
            ),
            ("ide0", "local-lvm:vm-105-cloudinit,media=cdrom"),
            ("ciuser", "ops"),
            ("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1"),
            ("tags", "web;tenant_acme"),
            ("description", "Billing\nowner: ops\n"),
            ("startup", "order=2,up=30"),
            ("hostpci0", "0000:01:00.0"),
        ]);
        let imported = import(&cfg).unwrap();
        let spec = parsed(&imported);
        assert_eq!(spec.name, "db-01");
        assert_eq!(*spec.image(), Image::Existing);
        assert_eq!(spec.adopt.as_ref().map(|c| c.vmid), Some(105));
        assert_eq!((spec.cores(), spec.hardware.sockets), (2, Some(2)));
        assert_eq!(
            (spec.memory_mib(), spec.hardware.balloon_mib),
            (4096, Some(1024))
        );
        assert_eq!(spec.hardware.cpu_type.as_deref(), Some("host"));
        assert_eq!(spec.hardware.pre_enrolled_keys, Some(true));
        assert_eq!(spec.hardware.tpm.as_deref(), Some("v2.0"));
        assert_eq!(
            spec.hardware.description.as_deref(),
            Some("Billing\nowner: ops")
        );
        assert_eq!(spec.tenant.as_deref(), Some("acme"));
        assert_eq!(spec.tags, ["tenant_acme", "web"]);
        let disks = spec.vm().unwrap().disks.as_ref().unwrap();
        assert_eq!(
            disks
                .iter()
                .map(|d| (d.slot.as_str(), d.size_bytes / GIB, d.boot))
                .collect::<Vec<_>>(),
            [("virtio1", 32, true), ("scsi0", 100, false)],
            "the boot order's disk first"
        );
        assert_eq!(disks[0].discard, Some(true));
        assert_eq!(disks[1].cache.as_deref(), Some("writeback"));
        let nics = spec.vm().unwrap().networks.as_ref().unwrap();
        assert_eq!(nics[0].mac.as_deref(), Some("BC:24:11:00:00:01"));
        assert_eq!((nics[0].vlan, nics[0].firewall), (Some(20), Some(true)));
        assert_eq!(nics[1].trunks.as_deref(), Some("10;20-30"));
        assert_eq!(nics[1].model, "e1000");
        let ci = spec.vm().unwrap().cloud_init.as_ref().unwrap();
        assert_eq!(ci.user.as_deref(), Some("ops"));
        assert_eq!(ci.ip_config[0].to_pve(), "ip=10.0.0.5/24,gw=10.0.0.1");
        assert_eq!(
            imported.left_alone,
            ["hostpci0", "ide0 (CD-ROM local-lvm:vm-105-cloudinit)"]
        );
        assert!(
            imported.text.contains("#   hostpci0, ide0"),
            "{}",
            imported.text
        );
    }

    #[test]
    fn a_list_that_would_lose_a_disk_or_a_nic_is_the_short_form() {
        let cfg = config(&[
            ("name", "old"),
            ("smbios1", UUID),
            ("boot", "order=scsi0"),
            ("scsi0", "local-lvm:vm-105-disk-0,size=20G"),
            ("ide1", "local-lvm:vm-105-disk-1,size=8G"),
            ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
            ("net2", "virtio=BC:24:11:00:00:03,bridge=vmbr1"),
        ]);
        let imported = import(&cfg).unwrap();
        let spec = parsed(&imported);
        assert!(
            spec.vm().unwrap().disks.is_none() && spec.vm().unwrap().networks.is_none(),
            "{}",
            imported.text
        );
        assert_eq!(
            (spec.root_disk_bytes(), spec.root_storage()),
            (20 * GIB, "local-lvm")
        );
        assert_eq!(spec.bridge(), "vmbr0");
        assert!(
            imported
                .text
                .contains("disks ide1 cannot be written as a list")
        );
        assert!(imported.text.contains("only net0's bridge is managed"));
        assert!(imported.left_alone.contains(&"ide1".to_string()));
        assert!(imported.left_alone.contains(&"net2".to_string()));
    }

    #[test]
    fn an_ha_resource_is_written_and_decides_the_power() {
        let cfg = config(&[("name", "db-01"), ("smbios1", UUID)]);
        let res = |state: &str| crate::pve::ha::HaResource {
            sid: "vm:105".into(),
            state: Some(state.into()),
            group: Some("prod".into()),
            max_restart: Some(3),
            max_relocate: None,
            comment: None,
            digest: None,
        };
        let import_ha = |r: &crate::pve::ha::HaResource, running: bool| {
            let vm = VmFacts {
                kind: crate::guest::GuestKind::Qemu,
                site: "lab",
                vmid: 105,
                node: "pve1",
                running,
                pool: None,
                ha_state: Some("started"),
                ha: Some(r),
                config: &cfg,
            };
            spec_text(&vm, &mut BTreeSet::new(), false).unwrap()
        };
        // Listed stopped, kept started by the HA manager: the spec says running.
        let started = import_ha(&res("started"), false);
        let spec = parsed(&started);
        assert_eq!(spec.power_state, crate::spec::PowerState::Running);
        let ha = spec.ha.as_deref().expect("ha");
        assert_eq!((ha.max_restart, ha.max_relocate), (3, 1));
        assert_eq!(ha.group.as_deref(), Some("prod"));
        let error = import_ha(&res("error"), true);
        assert!(parsed(&error).ha.is_none());
        assert!(error.text.contains("HA state is error"), "{}", error.text);
    }

    #[test]
    fn a_vm_some_install_claims_or_without_identity_is_refused() {
        let base = [("name", "db-01"), ("smbios1", UUID)];
        let with = |extra: (&str, &str)| {
            let mut pairs = base.to_vec();
            pairs.push(extra);
            import(&config(&pairs)).unwrap_err()
        };
        assert!(with(("tags", "proxsync.main")).contains("tag proxsync.main"));
        assert!(
            with(("description", "x\nproxsync-id: install=a spec=b uid=c")).contains("marker line")
        );
        let e = import(&config(&[("name", "db-01")])).unwrap_err();
        assert!(e.contains("no smbios1 uuid"), "{e}");
        let e = import(&config(&[("smbios1", UUID)])).unwrap_err();
        assert!(e.contains("has no name"), "{e}");
    }
}
