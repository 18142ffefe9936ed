//! The VM's hardware and options beyond cores, memory, one disk and one NIC: CPU type,
//! sockets, NUMA, ballooning, firmware, machine, controllers, TPM, console, agent, OS type,
//! start at boot, protection, pool, a pinned VMID and a free description.
//!
//! Every field is optional: an absent field is not managed (a VM created by proxsync gets
//! PVE's or proxsync's default at create, and converge leaves it alone), so a spec written
//! before these fields existed means exactly what it meant. Enumerations and formats follow
//! PVE's schema (`/nodes/{node}/qemu` of PVE 8.4 and 9.x).

use serde::Serialize;

use super::fields::{Ctx, Obj, enum_field, object, string};
use super::names::check_property_chars;
use super::units::{MIB, format_bytes, parse_size, plain_number};
use super::yaml::{Node, Value};
use super::{MAX_CPU, MAX_VMID, MIN_VMID};
use crate::ownership::MARKER_PREFIX;

/// PVE's `scsihw` values.
pub const SCSI_HARDWARE: [&str; 6] = [
    "lsi",
    "lsi53c810",
    "virtio-scsi-pci",
    "virtio-scsi-single",
    "megasas",
    "pvscsi",
];
/// proxsync's `scsihw` for a VM it creates when the spec names none.
pub const DEFAULT_SCSI_HARDWARE: &str = "virtio-scsi-single";
/// PVE's `ostype` values.
pub const OS_TYPES: [&str; 13] = [
    "other", "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11", "l24",
    "l26", "solaris",
];
/// proxsync's `ostype` for a VM it creates when the spec names none.
pub const DEFAULT_OS_TYPE: &str = "l26";
/// PVE's `vga` types.
pub const VGA_TYPES: [&str; 14] = [
    "cirrus",
    "qxl",
    "qxl2",
    "qxl3",
    "qxl4",
    "none",
    "serial0",
    "serial1",
    "serial2",
    "serial3",
    "std",
    "virtio",
    "virtio-gl",
    "vmware",
];
/// PVE's TPM versions (`tpmstate0` `version=`).
pub const TPM_VERSIONS: [&str; 2] = ["v1.2", "v2.0"];
/// The longest `description` (PVE's limit is 8192; the marker line needs the rest).
pub(crate) const MAX_DESCRIPTION: usize = 7680;
/// Largest `sockets`.
pub(crate) const MAX_SOCKETS: u32 = 64;
/// Largest `startup` order or delay (seconds).
pub(crate) const MAX_STARTUP: u64 = 1_000_000;

/// The CPU models qemu-server knows (`PVE/QemuServer/CPUConfig.pm`, x86_64 and aarch64, as
/// of 9.x; 8.4 knows a subset), besides `host` and `custom-<name>` models.
pub const CPU_MODELS: &[&str] = &[
    "486",
    "Broadwell",
    "Broadwell-IBRS",
    "Broadwell-noTSX",
    "Broadwell-noTSX-IBRS",
    "Cascadelake-Server",
    "Cascadelake-Server-noTSX",
    "Cascadelake-Server-v2",
    "Cascadelake-Server-v4",
    "Cascadelake-Server-v5",
    "ClearwaterForest",
    "Conroe",
    "Cooperlake",
    "Cooperlake-v2",
    "EPYC",
    "EPYC-Genoa",
    "EPYC-Genoa-v2",
    "EPYC-IBPB",
    "EPYC-Milan",
    "EPYC-Milan-v2",
    "EPYC-Milan-v3",
    "EPYC-Rome",
    "EPYC-Rome-v2",
    "EPYC-Rome-v3",
    "EPYC-Rome-v4",
    "EPYC-Rome-v5",
    "EPYC-Turin",
    "EPYC-v3",
    "EPYC-v4",
    "EPYC-v5",
    "GraniteRapids",
    "GraniteRapids-v2",
    "GraniteRapids-v3",
    "Haswell",
    "Haswell-IBRS",
    "Haswell-noTSX",
    "Haswell-noTSX-IBRS",
    "Icelake-Client",
    "Icelake-Client-noTSX",
    "Icelake-Server",
    "Icelake-Server-noTSX",
    "Icelake-Server-v3",
    "Icelake-Server-v4",
    "Icelake-Server-v5",
    "Icelake-Server-v6",
    "Icelake-Server-v7",
    "IvyBridge",
    "IvyBridge-IBRS",
    "KnightsMill",
    "Nehalem",
    "Nehalem-IBRS",
    "Opteron_G1",
    "Opteron_G2",
    "Opteron_G3",
    "Opteron_G4",
    "Opteron_G5",
    "Penryn",
    "SandyBridge",
    "SandyBridge-IBRS",
    "SapphireRapids",
    "SapphireRapids-v2",
    "SapphireRapids-v3",
    "SapphireRapids-v4",
    "SierraForest",
    "SierraForest-v2",
    "SierraForest-v3",
    "Skylake-Client",
    "Skylake-Client-IBRS",
    "Skylake-Client-noTSX-IBRS",
    "Skylake-Client-v4",
    "Skylake-Server",
    "Skylake-Server-IBRS",
    "Skylake-Server-noTSX-IBRS",
    "Skylake-Server-v4",
    "Skylake-Server-v5",
    "Westmere",
    "Westmere-IBRS",
    "a64fx",
    "athlon",
    "core2duo",
    "coreduo",
    "cortex-a35",
    "cortex-a53",
    "cortex-a55",
    "cortex-a57",
    "cortex-a710",
    "cortex-a72",
    "cortex-a76",
    "host",
    "kvm32",
    "kvm64",
    "max",
    "neoverse-n1",
    "neoverse-n2",
    "neoverse-v1",
    "pentium",
    "pentium2",
    "pentium3",
    "phenom",
    "qemu32",
    "qemu64",
    "x86-64-v2",
    "x86-64-v2-AES",
    "x86-64-v3",
    "x86-64-v4",
];

/// Firmware (`bios`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bios {
    /// SeaBIOS, PVE's default.
    Seabios,
    /// OVMF (UEFI): the VM gets an `efidisk0` on the boot disk's storage.
    Ovmf,
}

impl Bios {
    /// PVE's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Bios::Seabios => "seabios",
            Bios::Ovmf => "ovmf",
        }
    }
}

/// `startup`: PVE's `order=N,up=N,down=N`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Startup {
    /// `order`: the guest's place in the node's start order (shut down in reverse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<u64>,
    /// `upDelay`: seconds PVE waits after starting the guest before it starts the next (`up`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up_delay: Option<u64>,
    /// `downDelay`: seconds PVE waits for the guest to shut down when the node stops its
    /// guests in order (`down`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub down_delay: Option<u64>,
}

impl Startup {
    /// PVE's `startup` value: `order=1,up=30,down=60` (the parts set, in PVE's order).
    pub fn to_pve(&self) -> String {
        [
            ("order", self.order),
            ("up", self.up_delay),
            ("down", self.down_delay),
        ]
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(",")
    }
}

/// The optional hardware and options of a VM. `None`: not managed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hardware {
    /// `cpuType`: PVE's `cpu` model (`host`, `x86-64-v2-AES`, `custom-<name>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_type: Option<String>,
    /// `sockets`: CPU sockets; `cpu` is then the cores per socket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sockets: Option<u32>,
    /// `numa`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa: Option<bool>,
    /// `balloon`: the minimum memory in MiB the balloon may take the VM down to; 0 switches
    /// the balloon device off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balloon_mib: Option<u64>,
    /// `bios`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bios: Option<Bios>,
    /// `preEnrolledKeys`: the EFI disk is made with distribution and Microsoft keys enrolled
    /// (Secure Boot on). Only with `bios: ovmf`; applies when the EFI disk is made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_enrolled_keys: Option<bool>,
    /// `machine`: `q35`, `pc`, or a versioned type (`pc-q35-9.2+pve1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// `scsiHardware`: PVE's `scsihw`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scsi_hardware: Option<String>,
    /// `tpm`: a `tpmstate0` of this version on the boot disk's storage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpm: Option<String>,
    /// `serialConsole`: `serial0: socket` and `vga: serial0`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial_console: Option<bool>,
    /// `vga`: the display type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vga: Option<String>,
    /// `agent`: the QEMU guest agent (proxsync's default at create: on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<bool>,
    /// `osType`: PVE's `ostype` (proxsync's default at create: `l26`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os_type: Option<String>,
    /// `onBoot`: started when its node boots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_boot: Option<bool>,
    /// `startup`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup: Option<Startup>,
    /// `protection`: PVE refuses to remove the VM or its disks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protection: Option<bool>,
    /// `pool`: the resource pool the VM is a member of (it must exist).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// `vmId`: the VMID to create the VM with (refused if another VM holds it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm_id: Option<u32>,
    /// `description`: free text kept above proxsync's marker line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl Hardware {
    /// True when no field is set: the spec is what it was before these fields existed.
    pub(crate) fn is_empty(&self) -> bool {
        *self == Hardware::default()
    }

    /// `self` as a spec holds it: an empty value is the one every spec without hardware
    /// fields shares.
    pub(crate) fn shared(self) -> std::sync::Arc<Hardware> {
        static EMPTY: std::sync::LazyLock<std::sync::Arc<Hardware>> =
            std::sync::LazyLock::new(Default::default);
        if self.is_empty() {
            EMPTY.clone()
        } else {
            std::sync::Arc::new(self)
        }
    }

    /// Virtual CPUs the VM gets for `cores` per socket.
    pub fn vcpus(&self, cores: u32) -> u64 {
        u64::from(cores) * u64::from(self.sockets.unwrap_or(1))
    }
}

/// The `forProvider` fields this file reads.
pub(crate) const FIELDS: &[&str] = &[
    "cpuType",
    "sockets",
    "numa",
    "balloon",
    "bios",
    "preEnrolledKeys",
    "machine",
    "scsiHardware",
    "tpm",
    "serialConsole",
    "vga",
    "agent",
    "osType",
    "onBoot",
    "startup",
    "protection",
    "pool",
    "vmId",
    "description",
];

const FP: &str = "spec.forProvider";

/// Reads the hardware fields of `forProvider`; `cpu` and `memory_mib` are the spec's (for the
/// checks that relate them). `None` when any is invalid (each error is reported).
pub(super) fn hardware(
    ctx: &mut Ctx,
    fp: &Obj,
    cpu: Option<u32>,
    memory_mib: Option<u64>,
) -> Option<Hardware> {
    let errors = ctx.error_count();
    let mut hw = Hardware {
        cpu_type: opt(fp, "cpuType").and_then(|n| cpu_type(ctx, n)),
        sockets: opt(fp, "sockets")
            .and_then(|n| int_field(ctx, n, "sockets", 1, u64::from(MAX_SOCKETS)))
            .map(|v| v as u32),
        numa: opt(fp, "numa").and_then(|n| bool_field(ctx, n, "numa")),
        balloon_mib: opt(fp, "balloon").and_then(|n| balloon(ctx, n)),
        bios: opt(fp, "bios").and_then(|n| {
            enum_field(
                ctx,
                n,
                &format!("{FP}.bios"),
                &[("seabios", Bios::Seabios), ("ovmf", Bios::Ovmf)],
            )
        }),
        pre_enrolled_keys: opt(fp, "preEnrolledKeys")
            .and_then(|n| bool_field(ctx, n, "preEnrolledKeys")),
        machine: opt(fp, "machine").and_then(|n| machine(ctx, n)),
        scsi_hardware: opt(fp, "scsiHardware")
            .and_then(|n| str_enum(ctx, n, "scsiHardware", &SCSI_HARDWARE)),
        tpm: opt(fp, "tpm").and_then(|n| str_enum(ctx, n, "tpm", &TPM_VERSIONS)),
        serial_console: opt(fp, "serialConsole").and_then(|n| bool_field(ctx, n, "serialConsole")),
        vga: opt(fp, "vga").and_then(|n| str_enum(ctx, n, "vga", &VGA_TYPES)),
        agent: opt(fp, "agent").and_then(|n| bool_field(ctx, n, "agent")),
        os_type: opt(fp, "osType").and_then(|n| str_enum(ctx, n, "osType", &OS_TYPES)),
        on_boot: opt(fp, "onBoot").and_then(|n| bool_field(ctx, n, "onBoot")),
        startup: opt(fp, "startup").and_then(|n| startup(ctx, n)),
        protection: opt(fp, "protection").and_then(|n| bool_field(ctx, n, "protection")),
        pool: opt(fp, "pool").and_then(|n| pool(ctx, n)),
        vm_id: opt(fp, "vmId")
            .and_then(|n| int_field(ctx, n, "vmId", MIN_VMID, MAX_VMID))
            .map(|v| v as u32),
        description: opt(fp, "description").and_then(|n| description(ctx, n)),
    };
    relations(ctx, fp, &mut hw, cpu, memory_mib);
    (ctx.error_count() == errors).then_some(hw)
}

fn opt<'n>(fp: &Obj<'n>, key: &str) -> Option<&'n Node> {
    fp.get(key)
}

/// The checks between fields: balloon within memory, keys only with OVMF, the serial
/// console's display, the vCPU total.
fn relations(
    ctx: &mut Ctx,
    fp: &Obj,
    hw: &mut Hardware,
    cpu: Option<u32>,
    memory_mib: Option<u64>,
) {
    if let (Some(b), Some(m), Some(n)) = (hw.balloon_mib, memory_mib, fp.get("balloon"))
        && b > m
    {
        ctx.error(
            n.pos,
            format!(
                "{FP}.balloon is {}, more than memory ({}); PVE refuses a balloon target above the \
                 assigned memory: write at most {m}Mi, or 0 to switch the balloon device off",
                format_bytes(b * MIB),
                format_bytes(m * MIB)
            ),
        );
    }
    if let Some(n) = fp.get("preEnrolledKeys")
        && hw.bios != Some(Bios::Ovmf)
    {
        ctx.error(
            n.pos,
            format!("{FP}.preEnrolledKeys needs bios: ovmf (the keys live in the EFI disk)"),
        );
    }
    if let (Some(true), Some(vga), Some(n)) = (hw.serial_console, &hw.vga, fp.get("vga"))
        && vga != "serial0"
    {
        ctx.error(
            n.pos,
            format!(
                "{FP}.vga {vga:?} contradicts serialConsole: true, which sets vga: serial0; \
                 remove one of them"
            ),
        );
    }
    if let (Some(s), Some(c), Some(n)) = (hw.sockets, cpu, fp.get("sockets"))
        && u64::from(s) * u64::from(c) > u64::from(MAX_CPU)
    {
        ctx.error(
            n.pos,
            format!(
                "{FP}.sockets {s} times cpu {c} is {} virtual CPUs, more than {MAX_CPU}",
                u64::from(s) * u64::from(c)
            ),
        );
    }
}

/// A YAML boolean.
pub(super) fn bool_field(ctx: &mut Ctx, n: &Node, field: &str) -> Option<bool> {
    if let Value::Bool(b) = n.value {
        return Some(b);
    }
    let hint = match &n.value {
        Value::Str(s)
            if ["yes", "on", "1", "no", "off", "0"].contains(&s.to_lowercase().as_str()) =>
        {
            " (YAML 1.2: write true or false)"
        }
        Value::Int(0 | 1) => " (write true or false)",
        _ => "",
    };
    ctx.error(
        n.pos,
        format!(
            "{FP}.{field} must be true or false; found {}{hint}",
            n.value.describe()
        ),
    );
    None
}

/// A whole number in `min..=max` (a quoted number is accepted, as for `cpu`).
pub(super) fn int_field(ctx: &mut Ctx, n: &Node, field: &str, min: u64, max: u64) -> Option<u64> {
    // A container's fields name their whole path.
    let field = field.strip_prefix("spec.forProvider.").unwrap_or(field);
    let value = match &n.value {
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::Str(s) if !s.is_empty() && s.len() < 20 && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        _ => None,
    };
    match value {
        Some(v) if (min..=max).contains(&v) => Some(v),
        _ => {
            ctx.error(
                n.pos,
                format!(
                    "{FP}.{field} must be a whole number from {min} to {max}; found {}",
                    n.value.describe()
                ),
            );
            None
        }
    }
}

/// A string out of PVE's enumeration `choices`, with a "did you mean" for a case slip.
fn str_enum(ctx: &mut Ctx, n: &Node, field: &str, choices: &[&str]) -> Option<String> {
    let pairs: Vec<(&str, &str)> = choices.iter().map(|c| (*c, *c)).collect();
    enum_field(ctx, n, &format!("{FP}.{field}"), &pairs).map(str::to_string)
}

/// `cpuType`: a model qemu-server knows, or `custom-<name>`.
fn cpu_type(ctx: &mut Ctx, n: &Node) -> Option<String> {
    let s = string(ctx, n, &format!("{FP}.cpuType"), "x86-64-v2-AES")?;
    ctx.check(n.pos, check_cpu_type(s)).map(|()| s.to_string())
}

/// PVE's `validate_vm_cpu_conf`: a built-in model, or `custom-` and a model name.
pub fn check_cpu_type(s: &str) -> Result<(), String> {
    check_property_chars("cpuType", s)?;
    if CPU_MODELS.contains(&s) {
        return Ok(());
    }
    if let Some(name) = s.strip_prefix("custom-")
        && !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Ok(());
    }
    let hint = super::closest(s, CPU_MODELS.iter().copied())
        .map_or(String::new(), |m| format!(" (did you mean {m:?}?)"));
    Err(format!(
        "{FP}.cpuType {s:?} is not a CPU model Proxmox VE knows{hint}; use host, a built-in \
         model such as x86-64-v2-AES, x86-64-v3, EPYC-Rome or Skylake-Server, or custom-<name> \
         for a model defined in cpu-models.conf"
    ))
}

/// `machine`: PVE's machine type pattern
/// `pc|pc(-i440fx)?-N(.N)+(+pveN)?(.pxe)?|q35|pc-q35-N(.N)+(+pveN)?(.pxe)?|virt(-N(.N)+)?(+pveN)?`.
fn machine(ctx: &mut Ctx, n: &Node) -> Option<String> {
    let s = string(ctx, n, &format!("{FP}.machine"), "q35")?;
    ctx.check(n.pos, check_machine(s)).map(|()| s.to_string())
}

/// PVE's machine type (at most 40 characters).
pub fn check_machine(s: &str) -> Result<(), String> {
    check_property_chars("machine", s)?;
    let ok = s.len() <= 40
        && (matches!(s, "pc" | "q35" | "virt")
            || s.strip_prefix("pc-q35-")
                .or_else(|| s.strip_prefix("pc-i440fx-"))
                .or_else(|| s.strip_prefix("pc-"))
                .is_some_and(|v| versioned(v, true))
            || s.strip_prefix("virt-").is_some_and(|v| versioned(v, false))
            || s.strip_prefix("virt+pve")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{FP}.machine {s:?} is not a QEMU machine type Proxmox VE accepts; use q35, pc, or a \
             versioned type such as pc-q35-9.2+pve1 or pc-i440fx-8.1"
        ))
    }
}

/// `N(.N)+(+pveN)?(.pxe)?` (`.pxe` only for x86 types).
fn versioned(v: &str, pxe: bool) -> bool {
    let v = if pxe {
        v.strip_suffix(".pxe").unwrap_or(v)
    } else {
        v
    };
    let (version, pve) = match v.split_once("+pve") {
        Some((version, n)) => (version, Some(n)),
        None => (v, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = version.split('.').collect();
    parts.len() >= 2 && parts.iter().all(|p| digits(p)) && pve.is_none_or(digits)
}

/// `balloon`: a size (plain number = MiB), 0 (off) or at least 16 MiB.
fn balloon(ctx: &mut Ctx, n: &Node) -> Option<u64> {
    let bytes = match &n.value {
        Value::Int(i) => plain_number(*i, MIB, "MiB"),
        Value::Str(s) => parse_size(s, MIB, "MiB"),
        other => Err(format!(
            "expected a size such as 1Gi or a number of MiB; found {}",
            other.describe()
        )),
    };
    let bytes = ctx.check(n.pos, bytes.map_err(|e| format!("{FP}.balloon: {e}")))?;
    let mib = bytes / MIB;
    if mib != 0 && mib < 16 {
        ctx.error(
            n.pos,
            format!(
                "{FP}.balloon is {}; PVE's minimum is 16 MiB (or 0 to switch ballooning off)",
                format_bytes(bytes)
            ),
        );
        return None;
    }
    Some(mib)
}

/// `startup: {order, upDelay, downDelay}`.
fn startup(ctx: &mut Ctx, n: &Node) -> Option<Startup> {
    let path = format!("{FP}.startup");
    let obj = object(ctx, n, &path, Some(&["order", "upDelay", "downDelay"]))?;
    let mut out = Startup::default();
    let mut ok = true;
    for (key, slot) in [
        ("order", &mut out.order),
        ("upDelay", &mut out.up_delay),
        ("downDelay", &mut out.down_delay),
    ] {
        if let Some(v) = obj.get(key) {
            match int_field(ctx, v, &format!("startup.{key}"), 0, MAX_STARTUP) {
                Some(v) => *slot = Some(v),
                None => ok = false,
            }
        }
    }
    if ok && out == Startup::default() {
        ctx.error(
            n.pos,
            format!("{path} is empty; set order, upDelay or downDelay (or remove it)"),
        );
        return None;
    }
    ok.then_some(out)
}

/// `pool`: PVE's `pve-poolid`, up to three `/`-separated levels of `[A-Za-z0-9._-]`.
fn pool(ctx: &mut Ctx, n: &Node) -> Option<String> {
    let s = string(ctx, n, &format!("{FP}.pool"), "production")?;
    ctx.check(n.pos, check_pool(s)).map(|()| s.to_string())
}

/// PVE's pool id rule (`PVE::AccessControl::verify_poolname`).
pub fn check_pool(s: &str) -> Result<(), String> {
    check_property_chars("pool", s)?;
    let levels: Vec<&str> = s.split('/').collect();
    let ok = levels.len() <= 3
        && levels.iter().all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{FP}.pool {s:?} is not a valid pool id: letters, digits, '.', '-' and '_', in at most \
             three '/'-separated levels (e.g. production or production/web)"
        ))
    }
}

/// `description`: text, at most [`MAX_DESCRIPTION`] bytes, without proxsync's marker.
fn description(ctx: &mut Ctx, n: &Node) -> Option<String> {
    let s = string(ctx, n, &format!("{FP}.description"), "\"Web server\"")?;
    let err = if s.len() > MAX_DESCRIPTION {
        Some(format!(
            "{FP}.description is {} bytes; the limit is {MAX_DESCRIPTION} (PVE keeps 8192, and \
             proxsync's marker line needs the rest)",
            s.len()
        ))
    } else if s.contains(MARKER_PREFIX) {
        Some(format!(
            "{FP}.description contains {MARKER_PREFIX:?}, which marks the VMs proxsync owns; \
             proxsync writes that line itself"
        ))
    } else if s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        Some(format!(
            "{FP}.description contains a control character; only text, tabs and newlines"
        ))
    } else {
        None
    };
    match err {
        Some(e) => {
            ctx.error(n.pos, e);
            None
        }
        None => Some(s.trim_end().to_string()),
    }
}

/// Serialises a spec's shared [`Hardware`] as the value itself (as `Box<T>` would be).
pub(super) fn serialize_shared<S: serde::Serializer>(
    hw: &std::sync::Arc<Hardware>,
    s: S,
) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&**hw, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_types_follow_pve_pattern() {
        for ok in [
            "q35",
            "pc",
            "pc-q35-9.2+pve1",
            "pc-i440fx-8.1",
            "pc-8.1",
            "pc-q35-8.0.pxe",
            "virt",
            "virt-9.0",
            "virt+pve1",
        ] {
            assert!(check_machine(ok).is_ok(), "{ok}");
        }
        for bad in [
            "q36",
            "pc-q35",
            "pc-q35-9",
            "pc-q35-9.x",
            "q35,viommu=intel",
            "",
            "virt-9.0.pxe",
        ] {
            assert!(check_machine(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cpu_types_are_pve_models() {
        for ok in ["host", "x86-64-v2-AES", "EPYC-Rome", "custom-mine", "kvm64"] {
            assert!(check_cpu_type(ok).is_ok(), "{ok}");
        }
        let e = check_cpu_type("X86-64-V2-AES").unwrap_err();
        assert!(e.contains("did you mean \"x86-64-v2-AES\""), "{e}");
        for bad in ["host,flags=+aes", "custom-", "pentium9", "custom-a b"] {
            assert!(check_cpu_type(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pools_follow_pve_rule() {
        for ok in ["prod", "prod/web", "a.b-c_d/e/f"] {
            assert!(check_pool(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b/c/d", "a//b", "a b", "a,b", "a=b"] {
            assert!(check_pool(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn startup_is_written_in_pve_order() {
        let s = Startup {
            order: Some(2),
            up_delay: None,
            down_delay: Some(60),
        };
        assert_eq!(s.to_pve(), "order=2,down=60");
    }
}
