//! `kind: ProxmoxLXC`: an LXC container's own fields, checked against pve-container's schema
//! (`/nodes/{node}/lxc` of PVE 8.4 and 9.x). What a container shares with a VM (placement,
//! power, tags, `onBoot`, `startup`, `protection`, `pool`, `vmId`, `description`, the reboot
//! policy, `deletionPolicy`, `dependsOn`) goes through the same code as a VM's; what the
//! planner compares goes into the spec's common fields: `cores` is `cpu`, `rootfs` is `disk`
//! and `storage`, the first network's bridge is `network`, `hostname` is the VM name and
//! `template` is the image.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::Serialize;

use super::fields::{Ctx, Obj, enum_field, object, size_field, string, string_list};
use super::hardware::{bool_field, int_field};
use super::image::{MAX_VMID, MIN_VMID};
use super::names::{check_bridge, check_property_chars, check_storage};
use super::units::{GIB, MIB, TIB};
use super::yaml::{Node, Value};
use super::{Image, VolumeKind};

/// The `forProvider` fields of a container, besides the hardware fields it shares with a VM
/// (`onBoot`, `startup`, `protection`, `pool`, `vmId`, `description`).
pub(crate) const FIELDS: &[&str] = &[
    "site",
    "node",
    "hostname",
    "template",
    "unprivileged",
    "features",
    "cores",
    "cpuLimit",
    "cpuUnits",
    "memory",
    "swap",
    "rootfs",
    "mountPoints",
    "destroyVolumes",
    "networks",
    "nameserver",
    "searchdomain",
    "timezone",
    "console",
    "tty",
    "arch",
    "osType",
    "entrypoint",
    "env",
    "sshPublicKeys",
    "password",
    "powerState",
    "tags",
    "rebootPolicy",
    "maintenanceWindow",
    "shutdownTimeout",
    "forceStopAfter",
    "allowRecreateOnSiteChange",
    "ha",
    "health",
    "changePolicy",
];

/// The hardware fields a container shares with a VM.
pub(crate) const SHARED_HARDWARE: &[&str] = &[
    "onBoot",
    "startup",
    "protection",
    "pool",
    "vmId",
    "description",
];

/// Default `cores` of a container.
pub(crate) const DEFAULT_CORES: u32 = 1;
/// Default `memory` of a container: 512 MiB (pve-container's default).
pub(crate) const DEFAULT_MEMORY_MIB: u64 = 512;
/// Default root filesystem size: 8 GiB.
pub(crate) const DEFAULT_ROOTFS_BYTES: u64 = 8 * GIB;
/// Smallest `memory`: 16 MiB (pve-container's minimum).
const MIN_MEMORY_BYTES: u64 = 16 * MIB;
/// Largest `cores` (pve-container: 1..8192).
const MAX_CORES: u64 = 8192;
/// At most this many NICs (`net0`..`net31`).
pub const MAX_CT_NICS: usize = 32;
/// At most this many mount points (`mp0`..`mp255`).
pub(crate) const MAX_MOUNT_POINTS: usize = 256;
/// pve-container's `arch` values.
pub(crate) const ARCHES: [&str; 6] = ["amd64", "i386", "arm64", "armhf", "riscv32", "riscv64"];
/// pve-container's `ostype` values.
pub const OS_TYPES: [&str; 11] = [
    "debian",
    "devuan",
    "ubuntu",
    "centos",
    "fedora",
    "opensuse",
    "archlinux",
    "alpine",
    "gentoo",
    "nixos",
    "unmanaged",
];

/// A container's own fields (`kind: ProxmoxLXC`). Optional fields are managed only when set:
/// an absent one is left as PVE has it. The fields a VM has by other names (`hostname`,
/// `cores`, `memory`, `rootfs`, the first bridge, `template`) are hashed beside a VM's
/// (`spec::hash`), so they are not serialised here: a container's hash stays what earlier
/// releases stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    /// `hostname`, else `metadata.name`. A DNS name.
    #[serde(skip)]
    pub hostname: String,
    /// `cores`; default `DEFAULT_CORES`.
    #[serde(skip)]
    pub cores: u32,
    /// `memory` in MiB; default `DEFAULT_MEMORY_MIB`.
    #[serde(skip)]
    pub memory_mib: u64,
    /// The size of `rootfs` in bytes; default `DEFAULT_ROOTFS_BYTES`. It only grows.
    #[serde(skip)]
    pub rootfs_bytes: u64,
    /// The storage of `rootfs`.
    #[serde(skip)]
    pub storage: String,
    /// The first NIC's bridge (default `vmbr0`).
    #[serde(skip)]
    pub network: String,
    /// `template`: what the container is made from (a `vztmpl` archive or a CT template).
    #[serde(skip)]
    pub template: Image,
    /// Where `template` is written.
    #[serde(skip)]
    pub template_pos: super::Pos,
    /// `unprivileged` (default true): set at create only; PVE cannot change it afterwards.
    pub unprivileged: bool,
    /// `features`: `nesting` only (an API token may set no other flag).
    pub features: Option<Features>,
    /// `cpulimit`, as PVE writes it (`1.5`; `0` is no limit).
    pub cpu_limit: Option<String>,
    /// `cpuUnits`: the CPU weight (PVE's `cpuunits`), 0..=[`MAX_CPU_UNITS`].
    pub cpu_units: Option<u32>,
    /// `swap` in MiB.
    pub swap_mib: Option<u64>,
    /// `None`: one NIC `eth0` on `network` with DHCP at create, not managed after.
    pub networks: Option<Vec<CtNic>>,
    /// `None`: mount points are not managed.
    pub mount_points: Option<Vec<MountPoint>>,
    /// Mount point slots (`mp1`) whose volume is destroyed when it leaves `mountPoints`.
    pub destroy_volumes: Vec<String>,
    /// `nameserver`: up to 3 DNS server addresses.
    pub nameserver: Option<Vec<String>>,
    /// `searchdomain`: the DNS search domain.
    pub searchdomain: Option<String>,
    /// `timezone`: `host`, or a zone name such as `Europe/Berlin`.
    pub timezone: Option<String>,
    /// `console`: whether the container has a console device (`/dev/console`).
    pub console: Option<bool>,
    /// `tty`: how many ttys the container has, 0..=6.
    pub tty: Option<u32>,
    /// Set at create only (from the template when absent).
    pub arch: Option<String>,
    /// `osType`: one of [`OS_TYPES`] (PVE's `ostype`).
    pub os_type: Option<String>,
    /// `entrypoint`: the command run as the container's init (PVE 9.1, `spec::ct_init`).
    /// Not serialised when absent, so the hashes of specs without it stay as they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    /// `env`: variables of the container's runtime environment, in the order written (PVE
    /// 9.1); each set, the container's others kept ([`super::ct_init::merged_env`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<(String, String)>,
    /// Where the first of `entrypoint`, `env` and `networks` is written: what `validate
    /// --config` points at when the site's release refuses them.
    #[serde(skip)]
    pub init_pos: super::Pos,
    /// Given to PVE at create only, as it takes them (`ssh-public-keys`).
    pub ssh_public_keys: Vec<String>,
    /// Where the root password is read from at create (never the password itself).
    pub password: Option<PasswordSource>,
}

/// `features`: what the container may do (pve-container's `features` property string). Only
/// `nesting` can be set by an API token: pve-container leaves every other flag to root@pam
/// itself (`check_ct_modify_config_perm`), so the spec refuses them with that reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Features {
    /// `nesting`: whether the container may nest namespaces (containers of its own, systemd's
    /// sandboxing).
    pub nesting: Option<bool>,
}

/// One of `networks`: the container's `netN`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CtNic {
    /// The interface's name inside the container (`eth0`).
    pub name: String,
    /// The bridge the interface is on (`vmbr0`).
    pub bridge: String,
    /// The VLAN tag, 1-4094 (PVE's `tag`).
    pub vlan: Option<u16>,
    /// Whether PVE's firewall filters the interface.
    pub firewall: Option<bool>,
    /// `dhcp`, `manual` or an address with its prefix (`10.0.0.5/24`).
    pub ip: Option<String>,
    /// The IPv4 gateway (PVE's `gw`); only with a static `ip`.
    pub gateway: Option<String>,
    /// `dhcp`, `auto`, `manual` or an address with its prefix.
    pub ip6: Option<String>,
    /// The IPv6 gateway (PVE's `gw6`); only with a static `ip6`.
    pub gateway6: Option<String>,
    /// The interface's MTU, 64-65535; at most its bridge's.
    pub mtu: Option<u32>,
    /// MB/s, as PVE writes it.
    pub rate: Option<String>,
    /// Kept once PVE generated one (`hwaddr`); set only when the spec names it.
    pub mac: Option<String>,
    /// `hostManaged` (PVE 9.1's `host-managed`): the host, not the container, configures the
    /// interface's addresses. Not serialised when absent (the hashes of older specs stay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_managed: Option<bool>,
}

/// One of `mountPoints`: a volume the container mounts (`mpN`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MountPoint {
    /// `mp0`..`mp255`.
    pub slot: String,
    /// Where it is mounted in the container (`/srv/data`).
    pub path: String,
    /// The storage the volume is allocated on.
    pub storage: String,
    /// The volume's size in bytes, 1 GiB to 100 TiB.
    pub size_bytes: u64,
    /// `backup`: whether backups (vzdump) include the volume.
    pub backup: Option<bool>,
    /// `acl`: POSIX ACLs on the volume's file system.
    pub acl: Option<bool>,
    /// `quota`: user quotas inside the container on the volume.
    pub quota: Option<bool>,
    /// `readOnly`: mounted read-only (PVE's `ro`).
    pub read_only: Option<bool>,
}

/// Where a container's root password comes from: a file, or a systemd credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PasswordSource {
    /// `{file: PATH}`: an absolute path, in the config's `container_password_dir`.
    File(String),
    /// `{credential: NAME}`: a systemd credential passed to proxsync (`LoadCredential=`).
    Credential(String),
}

// Long because: every field of a container read in the order written, each error reported,
// then the parts the spec's common fields take.
/// Reads a container's own fields. `name`: the spec's (the default hostname); `adopting`:
/// a consent to take over an existing container, so `template` may be absent.
pub(super) fn container(
    ctx: &mut Ctx,
    fp: &Obj,
    name: Option<&str>,
    adopting: bool,
) -> Option<ContainerSpec> {
    let errors = ctx.error_count();
    let hostname = match fp.get("hostname") {
        Some(n) => string(ctx, n, "spec.forProvider.hostname", "dns-01").and_then(|s| {
            ctx.check(n.pos, super::names::check_vm_name(s))
                .map(|()| s.to_string())
        }),
        None => name.map(str::to_string),
    };
    let image = template(ctx, fp, adopting);
    let cores = fp
        .get("cores")
        .map(|n| int_field(ctx, n, "spec.forProvider.cores", 1, MAX_CORES).map(|v| v as u32));
    let memory = fp.get("memory").map(|n| {
        size_field(
            ctx,
            n,
            "spec.forProvider.memory",
            MIB,
            "MiB",
            MIN_MEMORY_BYTES,
            2 * TIB,
        )
        .map(|b| b / MIB)
    });
    let swap = fp.get("swap").map(|n| {
        size_field(ctx, n, "spec.forProvider.swap", MIB, "MiB", 0, 2 * TIB).map(|b| b / MIB)
    });
    let rootfs = rootfs(ctx, fp);
    let networks = fp.get("networks").map(|n| networks(ctx, n));
    let mount_points = fp.get("mountPoints").map(|n| mount_points(ctx, n));
    let destroy_volumes = destroy_volumes(ctx, fp, mount_points.as_ref().and_then(|m| m.as_ref()));
    let unprivileged = fp
        .get("unprivileged")
        .and_then(|n| bool_field(ctx, n, "unprivileged"))
        .unwrap_or(true);
    let mut ct = ContainerSpec {
        hostname: String::new(),
        cores: DEFAULT_CORES,
        memory_mib: DEFAULT_MEMORY_MIB,
        rootfs_bytes: DEFAULT_ROOTFS_BYTES,
        storage: String::new(),
        network: String::new(),
        template: Image::Existing,
        template_pos: fp.pos,
        unprivileged,
        features: fp
            .get("features")
            .and_then(|n| features(ctx, n, unprivileged)),
        cpu_limit: fp.get("cpuLimit").and_then(|n| cpu_limit(ctx, n)),
        cpu_units: fp.get("cpuUnits").and_then(|n| cpu_units(ctx, n)),
        swap_mib: swap.flatten(),
        networks: networks.flatten(),
        mount_points: mount_points.flatten(),
        destroy_volumes: destroy_volumes.unwrap_or_default(),
        nameserver: fp.get("nameserver").and_then(|n| nameservers(ctx, n)),
        searchdomain: fp.get("searchdomain").and_then(|n| {
            let s = string(ctx, n, "spec.forProvider.searchdomain", "example.org")?;
            ctx.check(n.pos, check_domain(s)).map(|()| s.to_string())
        }),
        timezone: fp.get("timezone").and_then(|n| timezone(ctx, n)),
        console: fp
            .get("console")
            .and_then(|n| bool_field(ctx, n, "console")),
        tty: fp
            .get("tty")
            .and_then(|n| int_field(ctx, n, "spec.forProvider.tty", 0, 6))
            .map(|v| v as u32),
        arch: fp.get("arch").and_then(|n| one_of(ctx, n, "arch", &ARCHES)),
        os_type: fp
            .get("osType")
            .and_then(|n| one_of(ctx, n, "osType", &OS_TYPES)),
        entrypoint: fp
            .get("entrypoint")
            .and_then(|n| super::ct_init::entrypoint(ctx, n)),
        env: fp
            .get("env")
            .and_then(|n| super::ct_init::env(ctx, n))
            .unwrap_or_default(),
        init_pos: ["entrypoint", "env", "networks"]
            .iter()
            .find_map(|k| fp.key_pos(k))
            .unwrap_or(fp.pos),
        ssh_public_keys: fp
            .get("sshPublicKeys")
            .and_then(|n| ssh_keys(ctx, n))
            .unwrap_or_default(),
        password: fp.get("password").and_then(|n| password(ctx, n)),
    };
    // A clone takes its template's root password, keys and architecture: pve-container's
    // clone has no such parameters, so the spec cannot say them for one.
    let cloned = matches!(image, Some((Image::Template { .. } | Image::Name(_), _)));
    for (field, set) in [
        ("password", ct.password.is_some()),
        ("sshPublicKeys", !ct.ssh_public_keys.is_empty()),
        ("arch", ct.arch.is_some()),
    ] {
        if cloned && set {
            ctx.error(
                fp.key_pos(field).unwrap_or(fp.pos),
                format!(
                    "spec.forProvider.{field} is given at a create from a vztmpl archive only; a \
                     clone of a CT template takes its template's (pve-container's clone has no \
                     such parameter): remove it, or name a vztmpl archive in template"
                ),
            );
        }
    }
    // pve-container's create from an OCI image whose command is not /sbin/init turns on
    // `host-managed` on every NIC that does not say otherwise (`src/PVE/LXC/Create.pm`
    // `restore_oci_archive`), and a host-managed NIC with SLAAC is refused at every start
    // (`src/PVE/LXC.pm` `update_lxc_config`: "SLAAC is not supported for host-managed network
    // configuration") and at every write of the NIC: the container would never start.
    if matches!(image, Some((Image::Oci { .. }, _))) {
        for (i, nic) in ct.networks.iter().flatten().enumerate() {
            if nic.ip6.as_deref() == Some("auto") && nic.host_managed.is_none() {
                ctx.error(
                    fp.key_pos("networks").unwrap_or(fp.pos),
                    format!(
                        "spec.forProvider.networks[{i}] has ip6 auto (SLAAC) on a container \
                         from an OCI image, whose NICs PVE makes host-managed when the image \
                         runs its own command, and a host-managed NIC with SLAAC never starts \
                         (\"SLAAC is not supported for host-managed network configuration\"): \
                         add hostManaged: false to the NIC, or write ip6: dhcp or an address"
                    ),
                );
            }
        }
    }
    if ctx.error_count() != errors {
        return None;
    }
    let (storage, disk_bytes) = rootfs?;
    let network = ct
        .networks
        .as_ref()
        .and_then(|n| n.first())
        .map_or_else(|| super::DEFAULT_NETWORK.to_string(), |n| n.bridge.clone());
    (ct.template, ct.template_pos) = image?;
    ct.hostname = hostname?;
    ct.cores = cores.flatten().unwrap_or(DEFAULT_CORES);
    ct.memory_mib = memory.flatten().unwrap_or(DEFAULT_MEMORY_MIB);
    ct.rootfs_bytes = disk_bytes;
    ct.storage = storage;
    ct.network = network;
    Some(ct)
}

/// `template`: a `vztmpl` volume (`local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst`),
/// the VMID of a CT template to clone, or a CT template's name.
fn template(ctx: &mut Ctx, fp: &Obj, adopting: bool) -> Option<(Image, super::Pos)> {
    if adopting && fp.get("template").is_none() {
        return Some((Image::Existing, fp.pos));
    }
    let forms = "a vztmpl volume (local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst), the \
                 VMID of a CT template (e.g. 9100) or a CT template's name";
    let n = fp.required(ctx, "template", forms)?;
    let parsed = match &n.value {
        Value::Int(i) => match u32::try_from(*i) {
            Ok(vmid) if (MIN_VMID..=MAX_VMID).contains(&u64::from(vmid)) => {
                Ok(Image::Template { vmid })
            }
            _ => Err(format!(
                "template {i} is not a valid VMID: Proxmox VMIDs are 100..999999999"
            )),
        },
        Value::Str(s) => parse_template(s, forms),
        Value::Map(_) => oci_template(n),
        other => Err(format!(
            "spec.forProvider.template must be {forms}; found {}",
            other.describe()
        )),
    };
    ctx.check(n.pos, parsed).map(|i| (i, n.pos))
}

/// `template: {oci: REFERENCE, storage: STORAGE}` (`storage` optional): an OCI image PVE 9.1
/// pulls (`spec::oci`).
fn oci_template(n: &super::yaml::Node) -> Result<Image, String> {
    let form = "{oci: REFERENCE} (e.g. {oci: docker.io/library/nginx:1.27}), with an optional \
                storage: the vztmpl storage it is pulled to (default local)";
    let Value::Map(entries) = &n.value else {
        return Err(format!("spec.forProvider.template as a mapping is {form}"));
    };
    let (mut reference, mut storage) = (None, None);
    for (k, v) in entries {
        let Value::Str(text) = &v.value else {
            return Err(format!(
                "spec.forProvider.template.{} must be a string; found {}",
                k.value.describe(),
                v.value.describe()
            ));
        };
        match &k.value {
            Value::Str(key) if key == "oci" => reference = Some(text.clone()),
            Value::Str(key) if key == "storage" => storage = Some(text.clone()),
            _ => return Err(format!("spec.forProvider.template as a mapping is {form}")),
        }
    }
    let Some(reference) = reference else {
        return Err(format!("spec.forProvider.template as a mapping is {form}"));
    };
    super::oci::check_reference(&reference)
        .map_err(|e| format!("spec.forProvider.template.oci: {e}"))?;
    let storage = storage.unwrap_or_else(|| super::oci::DEFAULT_OCI_STORAGE.to_string());
    check_storage(&storage).map_err(|e| format!("spec.forProvider.template.storage: {e}"))?;
    Ok(Image::Oci { reference, storage })
}

fn parse_template(text: &str, forms: &str) -> Result<Image, String> {
    match super::image::parse_image(text) {
        Ok(Image::Volume { .. }) => Err(format!(
            "template {text:?} is not in `vztmpl` content; a container is made from {forms}"
        )),
        Ok(other) => Ok(other),
        Err(e) => {
            // `parse_image` refuses vztmpl volumes (they hold no VM disk): they are exactly
            // what a container is made from.
            let Some((storage, volname)) = text.split_once(':') else {
                return Err(e);
            };
            let archive = volname.strip_prefix("vztmpl/").ok_or_else(|| {
                format!(
                    "template {text:?} is not in `vztmpl` content; a container is made from {forms}"
                )
            })?;
            check_storage(storage)?;
            check_property_chars("template", text)?;
            if VztmplFormat::of(archive).is_none()
                || archive.contains('/')
                || archive.starts_with('.')
            {
                return Err(format!(
                    "template {text:?} is not a container template archive: pve-storage takes \
                     storage:vztmpl/NAME.tar.zst (or .tar.gz, .tar.xz, .tar.bz2 from PVE 8.3, a \
                     bare .tar from PVE 9.1; never .tgz), as `pveam list {storage}` shows them"
                ));
            }
            Ok(Image::Volume {
                storage: storage.to_string(),
                volume: text.to_string(),
                kind: VolumeKind::Vztmpl,
            })
        }
    }
}

/// A container template archive's format, as pve-storage names it by its extension
/// (`src/PVE/Storage.pm` `$VZTMPL_EXT_RE_1 = qr/\.(?|(tar)(?!\.)|tar\.(gz|xz|zst|bz2))/i`,
/// matched by `Plugin.pm` `parse_volname` as `vztmpl/([^/]+$VZTMPL_EXT_RE_1)$`), any case;
/// `.tgz` never was one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VztmplFormat {
    Gz,
    Xz,
    Zst,
    /// From pve-storage 8.2.6 (commit 2627da2 `fix #5267: storage: add bzip2 support`), first
    /// in PVE 8.3.
    Bz2,
    /// A bare tar, as OCI images are unpacked: from pve-storage 9.0.15 (commit 0d392b2 `allow
    /// .tar container templates`), first in PVE 9.1.
    Tar,
}

impl VztmplFormat {
    /// The format of an archive's file name (`debian-12.tar.zst`), if pve-storage takes it:
    /// something before its extension.
    pub(crate) fn of(archive: &str) -> Option<VztmplFormat> {
        let lower = archive.to_ascii_lowercase();
        [
            (".tar.gz", VztmplFormat::Gz),
            (".tar.xz", VztmplFormat::Xz),
            (".tar.zst", VztmplFormat::Zst),
            (".tar.bz2", VztmplFormat::Bz2),
            (".tar", VztmplFormat::Tar),
        ]
        .into_iter()
        .find(|(ext, _)| lower.ends_with(ext) && lower.len() > ext.len())
        .map(|(_, f)| f)
    }

    /// The format of a `vztmpl` volume (`local:vztmpl/debian-12.tar.zst`).
    pub(crate) fn of_volume(volume: &str) -> Option<VztmplFormat> {
        let archive = volume.split_once(':')?.1.strip_prefix("vztmpl/")?;
        VztmplFormat::of(archive)
    }

    /// The first PVE release whose pve-storage takes the format (`None`: every 8.x and 9.x), and
    /// the extension's name.
    pub(crate) fn since(self) -> Option<((u32, u32, u32), &'static str)> {
        match self {
            VztmplFormat::Bz2 => Some(((8, 3, 0), ".tar.bz2")),
            VztmplFormat::Tar => Some(((9, 1, 0), "bare .tar")),
            VztmplFormat::Gz | VztmplFormat::Xz | VztmplFormat::Zst => None,
        }
    }
}

/// Why a site whose Proxmox VE release is `release` (`version`, as the site says it) refuses
/// the spec's template archive, if it does: pve-storage takes `.tar.bz2` archives from PVE 8.3
/// and bare `.tar` ones from PVE 9.1 ([`VztmplFormat::since`]); an older one's `parse_volname`
/// dies `unable to parse directory volume name 'vztmpl/...'`. The spec cannot know the site's
/// release: the create's pre-flight and `doctor` ask this.
pub fn archive_refusal(image: &Image, release: (u32, u32, u32), version: &str) -> Option<String> {
    if let Image::Oci { reference, .. } = image {
        let since = super::oci::OCI_SINCE;
        return (release < since).then(|| {
            format!(
                "template {{oci: {reference}}} is an OCI image, which PVE pulls \
                 (oci-registry-pull) from Proxmox VE {}.{} on; this site runs {version}: \
                 upgrade the cluster, or name a vztmpl archive as template",
                since.0, since.1
            )
        });
    }
    let Image::Volume {
        volume,
        kind: VolumeKind::Vztmpl,
        ..
    } = image
    else {
        return None;
    };
    let (since, name) = VztmplFormat::of_volume(volume)?.since()?;
    (release < since).then(|| {
        format!(
            "template {volume} is a {name} archive, which pve-storage takes from Proxmox VE \
             {}.{} on; this site runs {version}, whose pve-storage refuses its name (\"unable to \
             parse directory volume name\"): use a .tar.zst, .tar.xz or .tar.gz archive (pveam \
             download), or upgrade the cluster",
            since.0, since.1
        )
    })
}

/// `rootfs`: `{storage, size}` (defaults: `local-lvm`, 8Gi). Grow-only, like a VM's disk.
fn rootfs(ctx: &mut Ctx, fp: &Obj) -> Option<(String, u64)> {
    let Some(n) = fp.get("rootfs") else {
        return Some((super::DEFAULT_STORAGE.to_string(), DEFAULT_ROOTFS_BYTES));
    };
    let obj = object(
        ctx,
        n,
        "spec.forProvider.rootfs",
        Some(&["storage", "size"]),
    )?;
    let storage = match obj.get("storage") {
        None => Some(super::DEFAULT_STORAGE.to_string()),
        Some(s) => string(ctx, s, "spec.forProvider.rootfs.storage", "local-lvm")
            .and_then(|v| ctx.check(s.pos, check_storage(v)).map(|()| v.to_string())),
    };
    let size = match obj.get("size") {
        None => Some(DEFAULT_ROOTFS_BYTES),
        Some(s) => size_field(
            ctx,
            s,
            "spec.forProvider.rootfs.size",
            GIB,
            "GiB",
            GIB,
            super::MAX_DISK_BYTES,
        ),
    };
    Some((storage?, size?))
}

fn features(ctx: &mut Ctx, n: &Node, unprivileged: bool) -> Option<Features> {
    let path = "spec.forProvider.features";
    let obj = object(
        ctx,
        n,
        path,
        Some(&[
            "nesting",
            "keyctl",
            "fuse",
            "mount",
            "mknod",
            "force_rw_sys",
        ]),
    )?;
    let mut ok = true;
    for flag in ["keyctl", "fuse", "mount", "mknod", "force_rw_sys"] {
        if let Some(at) = obj.key_pos(flag) {
            ctx.error(
                at,
                format!(
                    "{path}.{flag}: PVE lets only root@pam itself change feature flags other than \
                     nesting (pve-container: \"changing feature flags (except nesting) is only \
                     allowed for root@pam\"), and proxsync signs in with an API token, which is \
                     never root@pam. Set it by hand (pct set VMID --features ...) and leave \
                     features out of the spec, or use nesting alone"
                ),
            );
            ok = false;
        }
    }
    if !unprivileged {
        ctx.error(
            n.pos,
            format!(
                "{path} on a privileged container (unprivileged: false) can only be set by \
                 root@pam itself (pve-container: \"changing feature flags for privileged \
                 container is only allowed for root@pam\"); proxsync's API token cannot"
            ),
        );
        ok = false;
    }
    let nesting = obj
        .get("nesting")
        .and_then(|v| bool_field(ctx, v, "features.nesting"));
    ok.then_some(Features { nesting })
}

/// `cpuLimit`: 0..8192 CPUs, fractions allowed (pve-container `cpulimit`).
fn cpu_limit(ctx: &mut Ctx, n: &Node) -> Option<String> {
    let path = "spec.forProvider.cpuLimit";
    let value = match &n.value {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        Value::Str(s) => s.parse::<f64>().ok(),
        _ => None,
    };
    match value {
        Some(v) if (0.0..=8192.0).contains(&v) && v.is_finite() => {
            // PVE keeps it as written; two decimals are as fine as a scheduler shares.
            let text = format!("{:.2}", v);
            let text = text.trim_end_matches('0').trim_end_matches('.').to_string();
            Some(if text.is_empty() { "0".into() } else { text })
        }
        _ => {
            ctx.error(
                n.pos,
                format!(
                    "{path} must be a number of CPUs from 0 (no limit) to 8192, e.g. 1.5; found {}",
                    n.value.describe()
                ),
            );
            None
        }
    }
}

/// The largest `cpuUnits` PVE keeps: pve-container's create and update clamp the weight with
/// pve-common `PVE::CGroup::clamp_cpu_shares` (`$shares = 10000 if $shares >= 10000`) on cgroup
/// v2, the only mode of PVE 9 and the default of PVE 8. Its schema's 500000 is cgroup v1's.
pub const MAX_CPU_UNITS: u32 = 10_000;

/// `cpuUnits`: 0..[`MAX_CPU_UNITS`], the weights PVE keeps as written (a larger one would be
/// stored as 10000 and written again at every cycle).
fn cpu_units(ctx: &mut Ctx, n: &Node) -> Option<u32> {
    let value = match &n.value {
        Value::Int(i) => u32::try_from(*i).ok(),
        Value::Str(s) if !s.is_empty() && s.len() < 10 && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        _ => None,
    };
    match value {
        Some(v) if v <= MAX_CPU_UNITS => Some(v),
        _ => {
            ctx.error(
                n.pos,
                format!(
                    "spec.forProvider.cpuUnits must be a whole number from 0 to {MAX_CPU_UNITS}, \
                     the CPU weights PVE keeps (on cgroup v2, the only mode of PVE 9 and the \
                     default of PVE 8, pve-container stores a larger one as {MAX_CPU_UNITS}: \
                     pve-common CGroup::clamp_cpu_shares); found {}",
                    n.value.describe()
                ),
            );
            None
        }
    }
}

fn one_of(ctx: &mut Ctx, n: &Node, field: &str, choices: &[&str]) -> Option<String> {
    let pairs: Vec<(&str, &str)> = choices.iter().map(|c| (*c, *c)).collect();
    enum_field(ctx, n, &format!("spec.forProvider.{field}"), &pairs).map(str::to_string)
}

fn networks(ctx: &mut Ctx, n: &Node) -> Option<Vec<CtNic>> {
    let path = "spec.forProvider.networks";
    let Value::Seq(items) = &n.value else {
        ctx.error(
            n.pos,
            format!(
                "{path} must be a list of NICs, e.g. [{{name: eth0, bridge: vmbr0, ip: dhcp}}]; found {}",
                n.value.describe()
            ),
        );
        return None;
    };
    if items.is_empty() || items.len() > MAX_CT_NICS {
        ctx.error(
            n.pos,
            format!("{path} has {} NICs; 1 to {MAX_CT_NICS}", items.len()),
        );
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match nic(ctx, item, &format!("{path}[{i}]")) {
            Some(nic) => {
                if let Some(first) = out.iter().position(|o: &CtNic| o.name == nic.name) {
                    ctx.error(
                        item.pos,
                        format!(
                            "{path}[{i}].name {:?} is also the name of networks[{first}]; each \
                             interface in the container needs its own name",
                            nic.name
                        ),
                    );
                    ok = false;
                }
                out.push(nic);
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

pub(super) const NIC_FIELDS: &[&str] = &[
    "name",
    "bridge",
    "vlan",
    "firewall",
    "ip",
    "gateway",
    "ip6",
    "gateway6",
    "mtu",
    "rate",
    "mac",
    "hostManaged",
];

fn nic(ctx: &mut Ctx, n: &Node, path: &str) -> Option<CtNic> {
    let obj = object(ctx, n, path, Some(NIC_FIELDS))?;
    let errors = ctx.error_count();
    let name = obj.required(
        ctx,
        "name",
        "the interface's name in the container, e.g. eth0",
    );
    let name = name.and_then(|v| {
        let s = string(ctx, v, &format!("{path}.name"), "eth0")?;
        ctx.check(v.pos, check_ifname(s)).map(|()| s.to_string())
    });
    let bridge = obj.required(ctx, "bridge", "e.g. vmbr0").and_then(|v| {
        let s = string(ctx, v, &format!("{path}.bridge"), "vmbr0")?;
        ctx.check(v.pos, check_bridge(s)).map(|()| s.to_string())
    });
    let text = |ctx: &mut Ctx, key: &str, check: fn(&str) -> Result<(), String>| {
        obj.get(key).and_then(|v| {
            let s = string(ctx, v, &format!("{path}.{key}"), "dhcp")?;
            ctx.check(v.pos, check(s).map_err(|e| format!("{path}.{key}: {e}")))
                .map(|()| s.to_string())
        })
    };
    let mut nic = CtNic {
        name: String::new(),
        bridge: String::new(),
        vlan: obj
            .get("vlan")
            .and_then(|v| int_field(ctx, v, &format!("{path}.vlan"), 1, 4094))
            .map(|v| v as u16),
        firewall: obj
            .get("firewall")
            .and_then(|v| bool_field(ctx, v, &format!("{path}.firewall"))),
        ip: text(ctx, "ip", check_ip4),
        gateway: text(ctx, "gateway", |s| {
            s.parse::<Ipv4Addr>()
                .map(|_| ())
                .map_err(|_| format!("{s:?} is not an IPv4 address"))
        }),
        ip6: text(ctx, "ip6", check_ip6),
        gateway6: text(ctx, "gateway6", |s| {
            s.parse::<Ipv6Addr>()
                .map(|_| ())
                .map_err(|_| format!("{s:?} is not an IPv6 address"))
        }),
        mtu: obj
            .get("mtu")
            .and_then(|v| int_field(ctx, v, &format!("{path}.mtu"), 64, 65535))
            .map(|v| v as u32),
        rate: obj.get("rate").and_then(|v| {
            let r = match &v.value {
                Value::Int(i) if *i >= 0 => Some(i.to_string()),
                Value::Float(f) if *f >= 0.0 && f.is_finite() => Some(f.to_string()),
                _ => None,
            };
            if r.is_none() {
                ctx.error(
                    v.pos,
                    format!(
                        "{path}.rate must be a rate in MB/s, e.g. 12.5; found {}",
                        v.value.describe()
                    ),
                );
            }
            r
        }),
        mac: obj.get("mac").and_then(|v| {
            let s = string(ctx, v, &format!("{path}.mac"), "BC:24:11:00:00:01")?;
            ctx.check(v.pos, super::networks::check_mac(s))
        }),
        host_managed: obj
            .get("hostManaged")
            .and_then(|v| bool_field(ctx, v, &format!("{path}.hostManaged"))),
    };
    check_nic_addresses(ctx, &obj, path, &nic);
    if ctx.error_count() != errors {
        return None;
    }
    nic.name = name?;
    nic.bridge = bridge?;
    Some(nic)
}

/// What a NIC's addresses must say together: a gateway only with a static address, and no
/// SLAAC on a host-managed NIC.
fn check_nic_addresses(ctx: &mut Ctx, obj: &Obj, path: &str, nic: &CtNic) {
    // pve-container refuses SLAAC on a host-managed NIC (`update_pct_config`: "SLAAC is not
    // supported for host-managed network configuration").
    if nic.host_managed == Some(true) && nic.ip6.as_deref() == Some("auto") {
        ctx.error(
            obj.get("ip6").map_or(obj.pos, |g| g.pos),
            format!(
                "{path}.ip6 auto (SLAAC) on a NIC with hostManaged: true is refused by PVE \
                 (\"SLAAC is not supported for host-managed network configuration\"): write \
                 ip6: dhcp or an address, or hostManaged: false"
            ),
        );
    }
    if nic.gateway.is_some() && !nic.ip.as_deref().is_some_and(|ip| ip.contains('/')) {
        ctx.error(
            obj.get("gateway").map_or(obj.pos, |g| g.pos),
            format!(
                "{path}.gateway needs a static ip (an address with its prefix, e.g. 10.0.0.5/24)"
            ),
        );
    }
    if nic.gateway6.is_some() && !nic.ip6.as_deref().is_some_and(|ip| ip.contains('/')) {
        ctx.error(
            obj.get("gateway6").map_or(obj.pos, |g| g.pos),
            format!("{path}.gateway6 needs a static ip6 (an address with its prefix)"),
        );
    }
}

/// A network interface name as pve-container takes it (`[a-zA-Z0-9_.-]`, at most 15).
fn check_ifname(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "interface name {s:?} is not valid: 1 to 15 letters, digits, '_', '.' or '-' (e.g. eth0)"
        ))
    }
}

fn check_ip4(s: &str) -> Result<(), String> {
    if s == "dhcp" || s == "manual" {
        return Ok(());
    }
    let ok = s.split_once('/').is_some_and(|(a, p)| {
        a.parse::<Ipv4Addr>().is_ok() && p.parse::<u8>().is_ok_and(|p| p <= 32)
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not dhcp, manual or an IPv4 address with its prefix (10.0.0.5/24)"
        ))
    }
}

fn check_ip6(s: &str) -> Result<(), String> {
    if matches!(s, "dhcp" | "auto" | "manual") {
        return Ok(());
    }
    let ok = s.split_once('/').is_some_and(|(a, p)| {
        a.parse::<Ipv6Addr>().is_ok() && p.parse::<u8>().is_ok_and(|p| p <= 128)
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not dhcp, auto, manual or an IPv6 address with its prefix (fd00::5/64)"
        ))
    }
}

fn nameservers(ctx: &mut Ctx, n: &Node) -> Option<Vec<String>> {
    let list = string_list(ctx, n, "spec.forProvider.nameserver", "1.1.1.1", 3)?;
    let mut out = Vec::new();
    for (s, pos) in list {
        if let Err(why) = check_nameserver(&s) {
            ctx.error(pos, format!("spec.forProvider.nameserver {why}"));
            return None;
        }
        out.push(s);
    }
    Some(out)
}

/// A nameserver as pve-container takes it (`src/PVE/LXC/Config.pm` `verify_ip_with_ll_iface`):
/// an IP address, or a link-local IPv6 one with the container's interface after `%`
/// (`fe80::1%eth0`, the interface as pve-common `pve_verify_iface` takes it).
pub fn check_nameserver(s: &str) -> Result<(), String> {
    if s.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let scoped = s.split_once('%').is_some_and(|(addr, iface)| {
        addr.starts_with("fe80:")
            && addr.parse::<Ipv6Addr>().is_ok()
            && iface.len() <= 30
            && is_pve_iface(iface)
    });
    if scoped {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not an IP address (or a link-local IPv6 address with its interface, \
             fe80::1%eth0)"
        ))
    }
}

/// pve-common `pve_verify_iface`: `^[a-z][a-z0-9_]{1,20}([:\.]\d+)?$`, any case.
fn is_pve_iface(s: &str) -> bool {
    let (name, suffix) = match s.find([':', '.']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && (2..=21).contains(&name.len())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && suffix.is_none_or(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

fn check_domain(s: &str) -> Result<(), String> {
    super::names::check_vm_name(s).map_err(|_| {
        format!("spec.forProvider.searchdomain {s:?} is not a DNS domain (e.g. example.org)")
    })
}

/// `timezone`: `host`, or a zone name such as `Europe/Berlin` (pve-container takes the names
/// of the zone database; the container's template must know it).
fn timezone(ctx: &mut Ctx, n: &Node) -> Option<String> {
    let s = string(ctx, n, "spec.forProvider.timezone", "Europe/Berlin")?;
    let ok = s == "host"
        || (!s.is_empty()
            && s.len() <= 64
            && !s.starts_with('/')
            && !s.contains("..")
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '+')));
    if ok {
        Some(s.to_string())
    } else {
        ctx.error(
            n.pos,
            format!("spec.forProvider.timezone {s:?} is not a time zone: host, or a name such as Europe/Berlin"),
        );
        None
    }
}

fn ssh_keys(ctx: &mut Ctx, n: &Node) -> Option<Vec<String>> {
    let list = string_list(
        ctx,
        n,
        "spec.forProvider.sshPublicKeys",
        "ssh-ed25519 AAAA... ops@example",
        super::MAX_SSH_KEYS,
    )?;
    let mut out = Vec::new();
    for (key, pos) in list {
        let ok = key.starts_with("ssh-") || key.starts_with("ecdsa-") || key.starts_with("sk-");
        if !ok || key.contains('\n') || key.split_whitespace().count() < 2 {
            ctx.error(
                pos,
                "spec.forProvider.sshPublicKeys holds an entry that is not one OpenSSH public key \
                 line (type, key and an optional comment, e.g. ssh-ed25519 AAAA... ops@example)",
            );
            return None;
        }
        out.push(key);
    }
    Some(out)
}

/// `password`: `{file: /etc/proxsync/ct-root}` or `{credential: ct-root}` (a systemd
/// credential); never the password itself.
fn password(ctx: &mut Ctx, n: &Node) -> Option<PasswordSource> {
    let path = "spec.forProvider.password";
    if let Value::Str(_) = n.value {
        ctx.error(
            n.pos,
            format!(
                "{path} must not hold the password: a spec lives in git. Write {{file: \
                 /etc/proxsync/ct-root-password}} or {{credential: ct-root-password}} (a systemd \
                 credential)"
            ),
        );
        return None;
    }
    let obj = object(ctx, n, path, Some(&["file", "credential"]))?;
    match (obj.get("file"), obj.get("credential")) {
        (Some(f), None) => {
            let s = string(
                ctx,
                f,
                &format!("{path}.file"),
                "/etc/proxsync/ct-root-password",
            )?;
            if !s.starts_with('/') {
                ctx.error(
                    f.pos,
                    format!("{path}.file must be an absolute path; found {s:?}"),
                );
                return None;
            }
            let name = s.rsplit('/').next().unwrap_or_default();
            if let Some(why) = proxsyncs_own_secret(name) {
                ctx.error(f.pos, format!("{path}.file {s:?} {why}"));
                return None;
            }
            Some(PasswordSource::File(s.to_string()))
        }
        (None, Some(c)) => {
            let s = string(ctx, c, &format!("{path}.credential"), "ct-root-password")?;
            let ok = !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                && !s.starts_with('.');
            if !ok {
                ctx.error(
                    c.pos,
                    format!("{path}.credential {s:?} is not a credential name (letters, digits, '_', '-', '.')"),
                );
                return None;
            }
            if let Some(why) = proxsyncs_own_secret(s) {
                ctx.error(c.pos, format!("{path}.credential {s:?} {why}"));
                return None;
            }
            Some(PasswordSource::Credential(s.to_string()))
        }
        _ => {
            ctx.error(
                n.pos,
                format!("{path} needs exactly one of file or credential"),
            );
            None
        }
    }
}

/// Why a file or credential `name` may not be a container's root password: it is named as
/// one of proxsync's own secrets (a site's API token, the marker key, the SOPS identity, a
/// notification target's URL or secret), which a spec would otherwise hand to a guest's root.
fn proxsyncs_own_secret(name: &str) -> Option<&'static str> {
    let own = name == crate::ownership::KEY_FILE
        || name == "sops-age-identity"
        || name.ends_with(".token")
        || name.starts_with("notify-");
    own.then_some(
        "is named as one of proxsync's own secrets (a site's token, the marker key, the SOPS \
         identity, a notification's URL or secret): a spec may not give it to a container as its \
         root password; keep the password in a file or credential of its own",
    )
}

fn mount_points(ctx: &mut Ctx, n: &Node) -> Option<Vec<MountPoint>> {
    let path = "spec.forProvider.mountPoints";
    let Value::Seq(items) = &n.value else {
        ctx.error(
            n.pos,
            format!(
                "{path} must be a list, e.g. [{{slot: mp0, path: /srv/data, storage: local-lvm, size: 10Gi}}]; found {}",
                n.value.describe()
            ),
        );
        return None;
    };
    if items.len() > MAX_MOUNT_POINTS {
        ctx.error(
            n.pos,
            format!(
                "{path} has {} entries; at most {MAX_MOUNT_POINTS}",
                items.len()
            ),
        );
        return None;
    }
    let mut out: Vec<MountPoint> = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let Some(mp) = mount_point(ctx, item, &format!("{path}[{i}]")) else {
            ok = false;
            continue;
        };
        if out.iter().any(|o| o.slot == mp.slot) {
            ctx.error(
                item.pos,
                format!("{path}[{i}].slot {} is listed twice", mp.slot),
            );
            ok = false;
        }
        if out.iter().any(|o| o.path == mp.path) {
            ctx.error(
                item.pos,
                format!("{path}[{i}].path {} is mounted twice", mp.path),
            );
            ok = false;
        }
        out.push(mp);
    }
    ok.then_some(out)
}

pub(super) const MOUNT_FIELDS: &[&str] = &[
    "slot", "path", "storage", "size", "bind", "backup", "acl", "quota", "readOnly",
];

fn mount_point(ctx: &mut Ctx, n: &Node, path: &str) -> Option<MountPoint> {
    let obj = object(ctx, n, path, Some(MOUNT_FIELDS))?;
    let errors = ctx.error_count();
    if let Some(b) = obj.get("bind") {
        ctx.error(
            b.pos,
            format!(
                "{path}.bind: a bind mount of a host path can only be set by root@pam itself; \
                 PVE refuses it to every API token, proxsync's included (pve-container: \"Only \
                 root can pass arbitrary filesystem paths.\"). Use a volume (storage and size), \
                 or add the bind mount by hand with pct set and leave it out of the spec"
            ),
        );
    }
    let slot = obj.required(ctx, "slot", "mp0 to mp255").and_then(|v| {
        let s = string(ctx, v, &format!("{path}.slot"), "mp0")?;
        ctx.check(v.pos, check_mp_slot(s)).map(|()| s.to_string())
    });
    let mount_path = obj
        .required(
            ctx,
            "path",
            "where it is mounted in the container, e.g. /srv/data",
        )
        .and_then(|v| {
            let s = string(ctx, v, &format!("{path}.path"), "/srv/data")?;
            ctx.check(v.pos, check_mount_path(s))
                .map(|()| s.to_string())
        });
    let storage = obj
        .required(ctx, "storage", "e.g. local-lvm")
        .and_then(|v| {
            let s = string(ctx, v, &format!("{path}.storage"), "local-lvm")?;
            ctx.check(v.pos, check_storage(s)).map(|()| s.to_string())
        });
    let size = obj.required(ctx, "size", "e.g. 10Gi").and_then(|v| {
        size_field(
            ctx,
            v,
            &format!("{path}.size"),
            GIB,
            "GiB",
            GIB,
            super::MAX_DISK_BYTES,
        )
    });
    let flag = |ctx: &mut Ctx, key: &str| {
        obj.get(key)
            .and_then(|v| bool_field(ctx, v, &format!("{path}.{key}")))
    };
    let backup = flag(ctx, "backup");
    let acl = flag(ctx, "acl");
    let quota = flag(ctx, "quota");
    let read_only = flag(ctx, "readOnly");
    if ctx.error_count() != errors {
        return None;
    }
    Some(MountPoint {
        slot: slot?,
        path: mount_path?,
        storage: storage?,
        size_bytes: size?,
        backup,
        acl,
        quota,
        read_only,
    })
}

/// `mp0`..`mp255`.
pub(crate) fn check_mp_slot(s: &str) -> Result<(), String> {
    let ok = s.strip_prefix("mp").is_some_and(|n| {
        !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
            && (n == "0" || !n.starts_with('0'))
            && n.parse::<usize>().is_ok_and(|n| n < MAX_MOUNT_POINTS)
    });
    if ok {
        Ok(())
    } else {
        Err(format!("mount point slot {s:?} is not mp0 to mp255"))
    }
}

/// An absolute path without `..`, `,` or `=` (it goes into the property string as `mp=`).
fn check_mount_path(s: &str) -> Result<(), String> {
    let ok = s.starts_with('/')
        && s != "/"
        && s.len() <= 255
        && !s.split('/').any(|part| part == "..")
        && !s
            .chars()
            .any(|c| matches!(c, ',' | '=' | ';') || c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "mount path {s:?} must be an absolute path other than / without '..', ',', '=', ';' \
             or white space (e.g. /srv/data)"
        ))
    }
}

/// `destroyVolumes`: slots (`mp1`) whose volume is destroyed, not kept as `unusedN`, once
/// they leave `mountPoints`. A slot still listed there is refused (it would be both).
fn destroy_volumes(
    ctx: &mut Ctx,
    fp: &Obj,
    mounts: Option<&Vec<MountPoint>>,
) -> Option<Vec<String>> {
    let n = fp.get("destroyVolumes")?;
    let path = "spec.forProvider.destroyVolumes";
    if mounts.is_none() {
        ctx.error(
            n.pos,
            format!(
                "{path} needs mountPoints: a slot leaves mountPoints to be destroyed, and without \
                 mountPoints proxsync does not manage the container's mount points at all"
            ),
        );
        return None;
    }
    let list = string_list(ctx, n, path, "mp1", MAX_MOUNT_POINTS)?;
    let mut out = Vec::new();
    for (s, pos) in list {
        if s == "rootfs" {
            ctx.error(pos, format!("{path}: rootfs is never destroyed; delete the container instead (deletionPolicy: Delete)"));
            return None;
        }
        ctx.check(pos, check_mp_slot(&s))?;
        if mounts.is_some_and(|m| m.iter().any(|mp| mp.slot == s)) {
            ctx.error(
                pos,
                format!("{path} lists {s}, which mountPoints still mounts; remove it from mountPoints to destroy its volume"),
            );
            return None;
        }
        out.push(s);
    }
    Some(out)
}

/// The mapping `forProvider` of a container restricted to the hardware fields it shares with
/// a VM, for `hardware::hardware`.
pub(super) fn shared_hardware<'n>(fp: &Obj<'n>) -> Obj<'n> {
    Obj {
        path: fp.path.clone(),
        pos: fp.pos,
        entries: fp
            .entries
            .iter()
            .filter(|(k, _, _)| SHARED_HARDWARE.contains(k))
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::Image;

    fn parse(extra: &str, template: &str) -> Vec<String> {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: ct-01\nspec:\n  \
             forProvider:\n    site: lab\n    node: pve1\n    template: \"{template}\"\n{extra}"
        );
        let (_, diags) = crate::spec::parse_file("ct.yaml", yaml.as_bytes());
        diags.into_iter().map(|d| d.to_string()).collect()
    }

    const ARCHIVE: &str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";

    /// `template: {oci: REFERENCE}`: the reference checked as PVE's pattern does, the storage
    /// local unless named; a digest, an untagged reference, another key or a bad storage is
    /// refused at the template's line with what would be valid.
    #[test]
    fn an_oci_template_is_a_tagged_reference_and_a_storage() {
        let parse_raw = |template: &str| {
            let yaml = format!(
                "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: ct-01\nspec:\n  \
                 forProvider:\n    site: lab\n    node: pve1\n    template: {template}\n"
            );
            let (specs, diags) = crate::spec::parse_file("ct.yaml", yaml.as_bytes());
            let diags: Vec<String> = diags.into_iter().map(|d| d.to_string()).collect();
            (specs, diags)
        };
        let (specs, diags) = parse_raw("{oci: docker.io/library/nginx:1.27}");
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(
            *specs[0].image(),
            Image::Oci {
                reference: "docker.io/library/nginx:1.27".into(),
                storage: "local".into()
            }
        );
        let (specs, diags) = parse_raw("{oci: \"nginx:1.27\", storage: templates}");
        assert!(diags.is_empty(), "{diags:?}");
        assert!(matches!(specs[0].image(), Image::Oci { storage, .. } if storage == "templates"));
        for (bad, says) in [
            ("{oci: docker.io/library/nginx}", "has no tag"),
            ("{oci: \"nginx@sha256:abc\"}", "digest"),
            ("{oci: \"Nginx:1\"}", "lowercase"),
            ("{oci: \"nginx:1\", storage: \"a b\"}", "template.storage"),
            ("{image: noble}", "{oci: REFERENCE}"),
            ("{oci: 5}", "must be a string"),
        ] {
            let (specs, diags) = parse_raw(bad);
            assert!(specs.is_empty(), "{bad}");
            assert!(
                diags
                    .iter()
                    .any(|d| d.starts_with("ct.yaml:9:15: error:") && d.contains(says)),
                "{bad}: {diags:?}"
            );
        }
    }

    #[test]
    fn what_pve_refuses_a_token_or_a_clone_is_refused_with_the_reason() {
        assert!(parse("", ARCHIVE).is_empty());
        let keys = "    sshPublicKeys: [\"ssh-ed25519 AAAAC3Nza ops@x\"]\n";
        assert!(parse(keys, ARCHIVE).is_empty());
        let errs = parse(keys, "9100");
        assert!(
            errs.iter()
                .any(|e| e.contains("sshPublicKeys") && e.contains("clone")),
            "{errs:?}"
        );
        let errs = parse("    features: {nesting: true, keyctl: true}\n", ARCHIVE);
        assert!(
            errs.iter()
                .any(|e| e.contains("keyctl") && e.contains("root@pam")),
            "{errs:?}"
        );
        let errs = parse(
            "    unprivileged: false\n    features: {nesting: true}\n",
            ARCHIVE,
        );
        assert!(
            errs.iter().any(|e| e.contains("privileged container")),
            "{errs:?}"
        );
        let errs = parse(
            "    mountPoints: [{slot: mp0, path: /srv, storage: local-lvm, size: 1Gi, bind: /srv}]\n",
            ARCHIVE,
        );
        assert!(
            errs.iter()
                .any(|e| e.contains("bind") && e.contains("root@pam")),
            "{errs:?}"
        );
        let errs = parse("    password: hunter2\n", ARCHIVE);
        assert!(
            errs.iter()
                .any(|e| e.contains("must not hold the password")),
            "{errs:?}"
        );
        assert!(errs.iter().all(|e| !e.contains("hunter2")), "{errs:?}");
        for own in [
            "{credential: lab.token}",
            "{file: /var/lib/proxsync/marker.key}",
            "{credential: sops-age-identity}",
        ] {
            let errs = parse(&format!("    password: {own}\n"), ARCHIVE);
            assert!(
                errs.iter().any(|e| e.contains("proxsync's own secrets")),
                "{own}: {errs:?}"
            );
        }
        assert!(parse("    password: {credential: ct-root}\n", ARCHIVE).is_empty());
        let errs = parse("    destroyVolumes: [mp1]\n", ARCHIVE);
        assert!(
            errs.iter().any(|e| e.contains("needs mountPoints")),
            "{errs:?}"
        );
        let errs = parse("    template: local:iso/x.iso\n", ARCHIVE);
        assert!(!errs.is_empty(), "a duplicate key at least");
        let errs = parse("", "local:iso/debian.iso");
        assert!(errs.iter().any(|e| e.contains("vztmpl")), "{errs:?}");
    }

    /// The archives pve-storage takes (`$VZTMPL_EXT_RE_1`, any case), and never `.tgz`.
    #[test]
    fn a_template_archive_is_named_as_pve_storage_takes_it() {
        for ok in [
            "local:vztmpl/debian-12.tar.zst",
            "local:vztmpl/debian-12.tar.gz",
            "local:vztmpl/debian-12.tar.xz",
            "local:vztmpl/debian-12.tar.bz2",
            "local:vztmpl/alpine-oci.tar",
            "local:vztmpl/DEBIAN-12.TAR.ZST",
        ] {
            assert!(parse("", ok).is_empty(), "{ok}: {:?}", parse("", ok));
        }
        for bad in [
            "local:vztmpl/debian-12.tgz",
            "local:vztmpl/debian-12.tar.lz4",
            "local:vztmpl/debian-12.zip",
            "local:vztmpl/.tar.zst",
        ] {
            let errs = parse("", bad);
            assert!(
                errs.iter().any(|e| e.contains("never .tgz")),
                "{bad}: {errs:?}"
            );
        }
        use super::VztmplFormat as F;
        assert_eq!(F::of("x.TAR.BZ2"), Some(F::Bz2));
        assert_eq!(F::of_volume("local:vztmpl/x.tar"), Some(F::Tar));
        assert_eq!(F::of("x.tar.gz.part"), None);
        assert_eq!(F::Bz2.since().map(|s| s.0), Some((8, 3, 0)));
        assert_eq!(F::Tar.since().map(|s| s.0), Some((9, 1, 0)));
        assert_eq!(F::Zst.since(), None);
        let image = |v: &str| super::Image::Volume {
            storage: "local".into(),
            volume: v.into(),
            kind: super::VolumeKind::Vztmpl,
        };
        let bz2 = image("local:vztmpl/debian-12.tar.bz2");
        let why = super::archive_refusal(&bz2, (8, 2, 7), "8.2.7").expect("refused");
        assert!(
            why.contains("from Proxmox VE 8.3") && why.contains("8.2.7"),
            "{why}"
        );
        assert_eq!(super::archive_refusal(&bz2, (8, 3, 0), "8.3.0"), None);
        let tar = image("local:vztmpl/alpine-oci.tar");
        assert!(super::archive_refusal(&tar, (9, 0, 11), "9.0.11").is_some());
        assert_eq!(super::archive_refusal(&tar, (9, 1, 1), "9.1.1"), None);
        let zst = image("local:vztmpl/debian-12.tar.zst");
        assert_eq!(super::archive_refusal(&zst, (8, 0, 0), "8.0.0"), None);
    }

    /// `cpuUnits` beyond what PVE keeps (10000 on cgroup v2) is refused naming the field and
    /// the range; a nameserver may carry a link-local address's interface.
    #[test]
    fn cpu_units_and_nameservers_as_pve_keeps_them() {
        assert!(parse("    cpuUnits: 10000\n", ARCHIVE).is_empty());
        let errs = parse("    cpuUnits: 20000\n", ARCHIVE);
        assert!(
            errs.iter().any(|e| e.contains(
                "spec.forProvider.cpuUnits must be a whole number \
                                             from 0 to 10000"
            ) && e.contains("clamp_cpu_shares")),
            "{errs:?}"
        );
        assert!(
            parse("    nameserver: [\"fe80::1%eth0\", 9.9.9.9]\n", ARCHIVE).is_empty(),
            "{:?}",
            parse("    nameserver: [\"fe80::1%eth0\"]\n", ARCHIVE)
        );
        for bad in [
            "2001:db8::1%eth0",
            "fe80::1%",
            "fe80::1%0eth",
            "10.0.0.1%eth0",
        ] {
            let errs = parse(&format!("    nameserver: [\"{bad}\"]\n"), ARCHIVE);
            assert!(
                errs.iter().any(|e| e.contains("is not an IP address")),
                "{bad}: {errs:?}"
            );
        }
        // The field's path once, not twice.
        let errs = parse("    cores: 0\n", ARCHIVE);
        assert!(
            errs.iter()
                .any(|e| e.contains("spec.forProvider.cores must")
                    && !e.contains("spec.forProvider.spec")),
            "{errs:?}"
        );
    }

    /// A container's consent to adopt is pinned by its NIC's MAC, a VM's by its smbios1 uuid:
    /// the other kind's proof, or none, is refused with the annotation to write.
    #[test]
    fn a_containers_consent_needs_its_mac_not_a_uuid() {
        let doc = |kind: &str, annotations: &str, fp: &str| {
            let yaml = format!(
                "apiVersion: proxsync.io/v1\nkind: {kind}\nmetadata:\n  name: ct-01\n  \
                 annotations:\n{annotations}spec:\n  forProvider:\n    site: lab\n    node: pve1\n{fp}"
            );
            let (specs, diags) = crate::spec::parse_file("ct.yaml", yaml.as_bytes());
            let errs: Vec<String> = diags.into_iter().map(|d| d.to_string()).collect();
            (specs, errs)
        };
        let mac =
            "    proxsync.io/adopt: \"120\"\n    proxsync.io/adopt-hwaddr: \"bc:24:11:5e:0a:01\"\n";
        let (specs, errs) = doc("ProxmoxLXC", mac, "");
        assert!(
            errs.is_empty(),
            "no template needed when adopting: {errs:?}"
        );
        assert_eq!(
            specs[0].adopt.as_deref().map(|c| c.proof.clone()),
            Some(crate::guest::GuestId::Hwaddr("BC:24:11:5E:0A:01".into()))
        );
        let uuid = "    proxsync.io/adopt: \"120\"\n    proxsync.io/adopt-uuid: \"3f2504e0-4f89-11d3-9a0c-0305e82c3301\"\n";
        let (_, errs) = doc("ProxmoxLXC", uuid, "");
        assert!(
            errs.iter()
                .any(|e| e.contains("adopt-uuid is not a container's")
                    && e.contains("proxsync.io/adopt-hwaddr")),
            "{errs:?}"
        );
        let (_, errs) = doc("ProxmoxVM", mac, "");
        assert!(
            errs.iter()
                .any(|e| e.contains("adopt-hwaddr is not a VM's")),
            "{errs:?}"
        );
        let (_, errs) = doc("ProxmoxLXC", "    proxsync.io/adopt: \"120\"\n", "");
        assert!(
            errs.iter()
                .any(|e| e.contains("needs proxsync.io/adopt-hwaddr")),
            "{errs:?}"
        );
    }

    /// `ha` is read as a VM's: checked against the power state, its nodes parsed.
    #[test]
    fn ha_is_read_as_a_vms_is() {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: ct-01\nspec:\n  \
             forProvider:\n    site: lab\n    node: pve1\n    template: \"{ARCHIVE}\"\n    \
             ha: {{maxRestart: 2, nodes: [pve1:2, pve2]}}\n"
        );
        let (spec, diags) = crate::spec::parse_file("ct.yaml", yaml.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        let ha = spec[0].ha.as_deref().expect("ha");
        assert_eq!((ha.max_restart, ha.nodes.len()), (2, 2));
        let errs = parse(
            "    powerState: stopped\n    ha: {state: started}\n",
            ARCHIVE,
        );
        assert!(errs.iter().any(|e| e.contains("ha.state")), "{errs:?}");
    }
}
