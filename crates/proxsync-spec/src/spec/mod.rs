//! The spec format: typed `ProxmoxVM` specs, their validation, and the JSON Schema.
//!
//! A spec file holds one or more YAML documents (`---` separated), each a `ProxmoxVM`:
//!
//! ```yaml
//! apiVersion: proxsync.io/v1            # or proxmox.sankofa.nexus/v1alpha1 (the seed's)
//! kind: ProxmoxVM
//! metadata:
//!   name: web-01                        # identity, unique in the repository
//!   labels: {tenant-id: customer-123}   # or tenant.sankofa.nexus/id -> tag tenant_customer-123
//! spec:
//!   forProvider:
//!     site: us-sfvalley                 # required
//!     node: pve1                        # required
//!     image: "9000"                     # required
//!     cpu: 4
//!     memory: 8Gi
//!     disk: 100Gi
//!   deletionPolicy: Delete
//! ```
//!
//! [`parse_file`] is pure (bytes in, specs and diagnostics out); [`load_paths`] reads files and
//! directories. Every problem is a [`Diagnostic`] with file, line and column; all problems of a
//! run are reported, not only the first. Anything that goes into a Proxmox property string is
//! checked so it cannot add options (`vmbr0,firewall=0`).
//!
//! Rules the reconcile engine relies on: a document with any error yields no [`Spec`]; its
//! errors carry the spec's name in [`Diagnostic::spec`] when the name could be read, so its VM
//! is left alone (not treated as removed); an error without a name means the run's set of specs
//! is incomplete ([`SpecSet::is_complete`]).

mod adopt;
mod cloudinit;
pub mod container;
pub mod ct_init;
pub mod defaults;
mod diag;
mod disks;
mod fields;
mod ha;
mod hardware;
mod hash;
pub mod health;
mod image;
pub mod images;
mod lifecycle;
mod load;
mod names;
mod networks;
pub mod oci;
pub mod renames;
mod schema;
mod sealed;
pub mod sets;
mod suggest;
pub mod templates;
mod units;
mod validate;
mod yaml;

use std::collections::BTreeSet;
use std::sync::Arc;

pub use compact_str::CompactString;
use serde::Serialize;

pub use crate::config::ManagementPolicy;
use crate::guest::GuestId;
pub use crate::guest::GuestKind;
pub use diag::{Diagnostic, Pos, Severity};
pub use disks::{
    DISK_BUSES, DISK_CACHES, DISK_FORMATS, Disk, MAX_DISKS, RAW_ONLY_STORAGE_TYPES, check_slot,
};
pub use ha::{Ha, HaNode, HaState, MAX_HA_TRIES};
pub use hardware::{
    Bios, CPU_MODELS, DEFAULT_OS_TYPE, DEFAULT_SCSI_HARDWARE, Hardware, OS_TYPES, SCSI_HARDWARE,
    Startup, TPM_VERSIONS, VGA_TYPES, check_cpu_type, check_machine, check_pool,
};
pub use hash::{content_hash, remember_hashes, spec_hash};
pub use image::{MAX_VMID, MIN_VMID};
pub use lifecycle::{DEFAULT_SHUTDOWN_TIMEOUT_SECS, MaintenanceWindow, RebootMode, RebootPolicy};
pub use load::{
    assemble, assemble_with_images, check_duplicates, check_password_files, check_sites,
    effective_document, effective_yaml, load_paths, load_paths_capped, load_paths_in_repository,
    load_paths_with, node_error,
};
pub use names::{check_spec_name, check_storage, check_tag, check_vm_name};
pub use networks::{MAX_NICS, NET_MODELS, Nic, check_mac};
pub use schema::{
    defaults_schema, image_schema, json_schema, lxc_schema, set_schema, template_schema,
};
pub use sealed::Secrets;
#[doc(hidden)]
pub use sealed::seal_for_tests;
pub use suggest::closest;
pub use units::{GIB, KIB, MIB, TIB};

/// The largest spec file read, in bytes (1 MiB). Larger files are refused before being read.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;
/// The largest `userData`, in bytes (64 KiB: what fits comfortably in a cloud-init snippet).
pub(crate) const MAX_USER_DATA_BYTES: usize = 64 * 1024;

/// At most this many diagnostics are reported per file; the rest are counted in one last line.
pub(crate) const MAX_DIAGNOSTICS_PER_FILE: usize = 200;

/// The accepted `apiVersion`s: proxsync's own, and the seed Crossplane provider's.
pub(crate) const API_VERSIONS: [&str; 2] = ["proxsync.io/v1", "proxmox.sankofa.nexus/v1alpha1"];
/// The `kind` of a VM spec.
pub(crate) const KIND: &str = "ProxmoxVM";
/// The `kind` of a container spec.
pub(crate) const LXC_KIND: &str = "ProxmoxLXC";
/// Label keys that set the tenant (the seed accepted both).
pub(crate) const TENANT_LABELS: [&str; 2] = ["tenant-id", "tenant.sankofa.nexus/id"];

/// Default `cpu` when absent: 2 cores (the seed's documented default).
pub const DEFAULT_CPU: u32 = 2;
/// Largest `cpu`.
pub(crate) const MAX_CPU: u32 = 1024;
/// Default `memory` when absent: 2 GiB.
pub(crate) const DEFAULT_MEMORY_MIB: u64 = 2048;
/// Smallest `memory`: 128 MiB.
pub(crate) const MIN_MEMORY_BYTES: u64 = 128 * MIB;
/// Largest `memory`: 2 TiB.
pub(crate) const MAX_MEMORY_BYTES: u64 = 2 * TIB;
/// Default `disk` when absent: 32 GiB.
pub(crate) const DEFAULT_DISK_BYTES: u64 = 32 * GIB;
/// Smallest `disk`: 1 GiB.
pub(crate) const MIN_DISK_BYTES: u64 = GIB;
/// Largest `disk`: 100 TiB.
pub(crate) const MAX_DISK_BYTES: u64 = 100 * TIB;
/// Default `storage` for the VM's disk.
pub(crate) const DEFAULT_STORAGE: &str = "local-lvm";
/// Default `network` bridge.
pub(crate) const DEFAULT_NETWORK: &str = "vmbr0";

/// One validated spec: the desired state of one guest, a VM (`kind: ProxmoxVM`) or a container
/// (`kind: ProxmoxLXC`). What every guest has (placement, power, policies, lifecycle) is here;
/// what one kind has is in [`Spec::guest`], so a function that needs a VM's fields takes a
/// [`VmSpec`] and one that needs a container's a [`ContainerSpec`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// `metadata.name`: the identity of the spec, unique in the repository; a lowercase DNS
    /// label (1-63 of `a-z0-9-`), so it is always a safe status file stem.
    pub name: CompactString,
    /// The file the spec came from.
    pub file: CompactString,
    /// Where `metadata.name` is (the document start if it was missing).
    pub pos: Pos,
    /// The `apiVersion` as written (one of `API_VERSIONS`).
    pub api_version: CompactString,
    /// The tenant, from label `tenant-id` or `tenant.sankofa.nexus/id`.
    pub tenant: Option<String>,
    /// `metadata.labels` (values are strings): what `[source] selector` matches.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The site (a `[[site]]` of the config; checked by [`check_sites`]).
    pub site: CompactString,
    /// Where `site` is written.
    pub site_pos: Pos,
    /// The Proxmox node to place the guest on.
    pub node: CompactString,
    /// Where `node` is written.
    pub node_pos: Pos,
    /// What the spec makes, with that kind's own fields.
    pub guest: Guest,
    /// The SOPS ciphertext the document's secret values were decrypted from: hashes and seed
    /// names use it in place of the plaintext, so nothing derived from a secret leaves the
    /// guest's path.
    #[serde(skip)]
    pub sealed: Option<Box<str>>,
    /// Desired power state; default running.
    pub power_state: PowerState,
    /// The user's extra tags plus `tenant_<id>` when a tenant is set; sorted, no duplicates.
    /// Never contains the ownership tag `proxsync.*` (refused in specs).
    pub tags: Vec<String>,
    /// What happens to the guest when the spec is removed; default delete.
    pub deletion_policy: DeletionPolicy,
    /// `spec.imagePolicy`: whether a guest made from a `ProxmoxImage` is rebuilt from a new
    /// version of it; default keep what it was made from.
    pub image_policy: ImagePolicy,
    /// `spec.managementPolicy`: `Observe` takes no action on the guest, only reports how it
    /// differs; `None`: the config's `[reconcile] management_policy` (default `Full`).
    pub management_policy: Option<ManagementPolicy>,
    /// `spec.suspend`: no action of any kind for the spec's guest, only observed and reported
    /// (as `proxsync suspend` does at runtime).
    pub suspend: bool,
    /// `spec.dependsOn`: specs that must be Ready before this one's guest is created or
    /// started, or rebooted for a change; removed after it. Checked to exist and form no cycle.
    /// Boxed slice: most specs have none, and a `Spec` is held per spec.
    pub depends_on: Box<[String]>,
    /// Whether and when proxsync reboots the running guest to apply changes PVE keeps pending
    /// until its next start; default never (reported as `RebootPending` only).
    pub reboot: RebootPolicy,
    /// `ha`: the guest as a resource of PVE's HA manager; `None`: proxsync leaves HA alone.
    /// Boxed: most specs have none.
    pub ha: Option<Box<Ha>>,
    /// `health`: what "working" means for the guest, checked by the daemon; `None`: not
    /// checked (Ready without it). Boxed: most specs have none.
    pub health: Option<Box<health::Health>>,
    /// `changePolicy`: a snapshot before a change, and a rollback when the guest is unhealthy
    /// after it; `None`: a change is applied as it is.
    pub change_policy: Option<Box<health::ChangePolicy>>,
    /// `allowRecreateOnSiteChange`: when the spec names another site than its guest's, create
    /// one on the new site at once; the old one stays, listed in `_orphans.yaml`, until a
    /// person deletes it. Default false: nothing is created while the old guest exists
    /// (`SiteMoved`).
    pub allow_recreate_on_site_change: bool,
    /// `metadata.annotations["proxsync.io/renamed-from"]`: the spec's previous
    /// `metadata.name`, confirming a rename (its guest is re-labelled, not deleted and recreated).
    pub renamed_from: Option<String>,
    /// `proxsync.io/adopt` with `adopt-uuid` (a VM) or `adopt-hwaddr` (a container): consent
    /// to take over the guest with this VMID and proof, which proxsync did not make
    /// (`proxsync import` writes it). Boxed: most specs have none.
    pub adopt: Option<Box<AdoptConsent>>,
    /// The optional hardware and options (`cpuType`, `bios`, `pool`, ...); each absent field
    /// is left as the guest has it. A container sets only those it shares with a VM
    /// ([`container::SHARED_HARDWARE`]). Shared: the specs without any
    /// ([`Hardware::is_empty`], most of them) hold one empty value ([`Hardware::shared`])
    /// instead of 280 bytes each.
    #[serde(serialize_with = "hardware::serialize_shared")]
    pub hardware: Arc<Hardware>,
    /// The `_defaults.yaml` files the spec took values from, outermost first (`None`: none):
    /// a position with [`Pos::source`] N is in the Nth ([`Spec::file_of`]).
    #[serde(skip)]
    pub defaults: Option<Arc<Vec<String>>>,
    /// The `ProxmoxVMSet` the spec is a member of (`None`: a spec of its own). Boxed: most
    /// specs are not.
    pub set: Option<Box<sets::SetMember>>,
    /// `kind: ProxmoxTemplate`: the template (and version) the spec builds; its guest is made
    /// stopped, then turned into a template. `None`: a guest. Boxed: most specs are guests.
    pub template: Option<Box<templates::TemplateVersion>>,
    /// The spec's hashes, worked out once when the git source parses it
    /// ([`remember_hashes`]), so a cycle does not serialise every spec again.
    /// Not part of the spec's content: ignored by `==` and never serialised.
    #[serde(skip)]
    pub hashes: Hashes,
}

/// What a spec makes, with the fields of that kind alone. Matched once at each entry that
/// differs by kind (render, create, converge, import); the code after it takes the variant's
/// fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
// A container's fields are boxed: most specs are VMs, and one spec of 50,000 held per spec.
#[allow(clippy::large_enum_variant)]
pub enum Guest {
    /// `kind: ProxmoxVM`: a QEMU VM.
    Vm(VmSpec),
    /// `kind: ProxmoxLXC`: an LXC container.
    Container(Box<ContainerSpec>),
}

/// A VM's own fields (`kind: ProxmoxVM`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VmSpec {
    /// The VM name in Proxmox: `forProvider.name`, else `metadata.name`. A DNS name.
    pub vm_name: CompactString,
    /// CPU cores, 1..=1024; default [`DEFAULT_CPU`].
    pub cpu: u32,
    /// Memory in MiB (sizes not a whole MiB are rounded down), 128 MiB ..= 2 TiB; default
    /// `DEFAULT_MEMORY_MIB`.
    pub memory_mib: u64,
    /// Size of the main disk in bytes, exactly as written, 1 GiB ..= 100 TiB; default
    /// `DEFAULT_DISK_BYTES`. Disks only grow.
    pub disk_bytes: u64,
    /// The storage for the VM's disk; default `local-lvm`.
    pub storage: CompactString,
    /// The bridge of `net0`; default `vmbr0` (with `networks`, the first NIC's).
    pub network: CompactString,
    /// What the VM is created from.
    pub image: Image,
    /// Where `image` is written.
    pub image_pos: Pos,
    /// cloud-init user-data, at most `MAX_USER_DATA_BYTES`: YAML starting with
    /// `#cloud-config`, or a script starting with `#!`. Delivered in a NoCloud seed ISO.
    pub user_data: Option<String>,
    /// The native first-boot fields (`forProvider.cloudInit`), mapped to PVE's cloud-init
    /// options. Boxed: most specs have none.
    pub cloud_init: Option<Box<CloudInit>>,
    /// `networks`: every NIC, `net0` first; `None` for the short form (`network`, one virtio
    /// NIC whose bridge alone is managed).
    pub networks: Option<Vec<Nic>>,
    /// `disks`: every disk, the boot disk (`boot`) receiving the image; `None` for the short
    /// form (`disk`/`storage`: the boot disk alone is managed). With it, `disk_bytes` and
    /// `storage` are the boot disk's.
    pub disks: Option<Vec<Disk>>,
    /// `destroyDisks`: slots whose attached disk is destroyed with its data (removing a disk
    /// from `disks` only detaches it). Never the boot disk.
    pub destroy_disks: Vec<String>,
}

pub use container::ContainerSpec;

/// What [`spec_hash`] and [`content_hash`] return for a spec, kept
/// with it. Empty (`Default`) for a spec built or changed in code: the hashes are then worked
/// out when asked for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hashes(pub(crate) Option<(u64, u64)>);

impl Hashes {
    /// Whether the hashes were worked out when the spec was parsed.
    pub fn known(&self) -> bool {
        self.0.is_some()
    }
}

impl PartialEq for Hashes {
    /// Derived from the spec's other fields, which `==` compares.
    fn eq(&self, _: &Hashes) -> bool {
        true
    }
}

impl Eq for Hashes {}

/// The annotation that confirms a rename of `metadata.name`.
pub const RENAMED_FROM: &str = "proxsync.io/renamed-from";
/// The annotation that consents to take over an existing VM: its VMID.
pub const ADOPT: &str = "proxsync.io/adopt";
/// The annotation beside [`ADOPT`]: the VM's `smbios1` uuid when the spec was written.
pub const ADOPT_UUID: &str = "proxsync.io/adopt-uuid";
/// The annotation beside [`ADOPT`] for a container, which has no smbios1 uuid: the MAC
/// (`hwaddr`) of its first NIC when the spec was written.
pub const ADOPT_HWADDR: &str = "proxsync.io/adopt-hwaddr";

/// A spec's consent to take over guest `vmid`, which proxsync did not make: only while the
/// guest still has the `proof` and the spec's name, carries no marker and no install's tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdoptConsent {
    /// The VMID `proxsync.io/adopt` names.
    pub vmid: u32,
    /// The guest's id when the spec was written: `adopt-uuid` (a VM) or `adopt-hwaddr` (a
    /// container).
    pub proof: GuestId,
}

/// Largest number of `cloudInit.sshKeys`.
pub(crate) const MAX_SSH_KEYS: usize = 64;
/// Largest number of `cloudInit.ipConfig` entries (PVE's `ipconfig0..31`).
pub(crate) const MAX_IP_CONFIGS: usize = 32;
/// Largest number of `cloudInit.nameservers`.
pub(crate) const MAX_NAMESERVERS: usize = 3;

/// `forProvider.cloudInit`: first-boot settings, mapped to PVE's own cloud-init options
/// (`ciuser`, `sshkeys`, `ipconfigN`, `nameserver`, `searchdomain`, `ciupgrade`). There is no
/// password field on purpose: specs live in git (use SSH keys).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudInit {
    /// `user`: the user to create or configure instead of the image's default (`ciuser`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `sshKeys`: OpenSSH public keys, one per entry (`sshkeys`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ssh_keys: Vec<String>,
    /// `ipConfig`: entry N configures `netN` (`ipconfigN`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ip_config: Vec<IpConfig>,
    /// `nameservers`: DNS server addresses (`nameserver`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// `searchDomain`: the DNS search domain (`searchdomain`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search_domain: Option<String>,
    /// `upgradePackages`: upgrade packages on first boot (`ciupgrade`; PVE's default is on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade_packages: Option<bool>,
    /// `seedStorage`: the storage (with `iso` content) for the `userData` seed image; default:
    /// the first active storage of the node with `iso` content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed_storage: Option<String>,
}

/// One `cloudInit.ipConfig` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IpConfig {
    /// `dhcp` or an IPv4 address in CIDR notation (`10.0.0.5/24`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// IPv4 gateway; only with a static `ip`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// `dhcp`, `auto` (SLAAC) or an IPv6 address in CIDR notation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip6: Option<String>,
    /// IPv6 gateway; only with a static `ip6`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway6: Option<String>,
}

impl IpConfig {
    /// PVE's `ipconfigN` value: `ip=10.0.0.5/24,gw=10.0.0.1,ip6=auto`.
    pub fn to_pve(&self) -> String {
        let mut parts = Vec::new();
        for (key, value) in [
            ("ip", &self.ip),
            ("gw", &self.gateway),
            ("ip6", &self.ip6),
            ("gw6", &self.gateway6),
        ] {
            if let Some(v) = value {
                parts.push(format!("{key}={v}"));
            }
        }
        parts.join(",")
    }
}

/// What a VM is created from (`forProvider.image`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Image {
    /// A template VMID (100..=999999999), cloned.
    Template {
        /// The template's VMID.
        vmid: u32,
    },
    /// A volume ID `storage:volname`.
    Volume {
        /// The storage part of the volume ID.
        storage: String,
        /// The full volume ID, e.g. `local:import/debian-12-genericcloud-amd64.qcow2`.
        volume: String,
        /// Its content type, which decides how it is used.
        kind: VolumeKind,
    },
    /// A template name, or else the file stem of a volume on the node's storages.
    Name(String),
    /// `{image: NAME}`: the volume of the repository's `ProxmoxImage` of that name
    /// ([`images::ImageSpec::volume_id`]), resolved where it is used, so a new version of
    /// the image leaves the guest's spec (and hash) as it is.
    Managed(String),
    /// `{template: NAME}`: the repository's `ProxmoxTemplate` NAME, cloned from the VM of its
    /// current version, `vm_name` (given when the documents are assembled:
    /// [`templates::version_all`]; not part of the spec's hash, so a new version of the
    /// template leaves the guest's spec as it is).
    Built {
        /// The template's `metadata.name`.
        name: String,
        /// The name of the VM of its current version (`NAME-VERSION`).
        #[serde(skip)]
        vm_name: String,
    },
    /// `{oci: REFERENCE}` (a container, PVE 9.1): the OCI image PVE pulls from its registry to
    /// `storage` as a `vztmpl` archive ([`oci::volume`]) before the container is made from it.
    Oci {
        /// `registry/repository:tag`, checked as PVE's schema does ([`oci::check_reference`]).
        reference: String,
        /// The `vztmpl` storage it is pulled to; default [`oci::DEFAULT_OCI_STORAGE`].
        storage: String,
    },
    /// None: the spec adopts an existing VM (`proxsync.io/adopt`) and cannot make one.
    Existing,
}

/// The content type of an image volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeKind {
    /// `images` content (e.g. `local-lvm:vm-9000-disk-0`): imported with `import-from=`.
    Images,
    /// `import` content (`storage:import/X.qcow2|raw|vmdk`): imported with `import-from=`
    /// (needs a PVE version with `import` content).
    Import,
    /// `iso` content (`storage:iso/X.iso`): attached as an installer CD-ROM next to an empty disk.
    Iso,
    /// `vztmpl` content (`storage:vztmpl/X.tar.zst`): a container's OS template.
    Vztmpl,
}

/// Desired power state (`forProvider.powerState`: `running` | `stopped`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PowerState {
    /// Started and kept running (the default).
    #[default]
    Running,
    /// Kept stopped.
    Stopped,
}

/// What removing the spec does (`spec.deletionPolicy`: `Delete` | `Orphan`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub enum DeletionPolicy {
    /// Delete the VM (the default).
    #[default]
    Delete,
    /// Leave the VM and drop ownership.
    Orphan,
}

/// What a new version of the `ProxmoxImage` a guest was made from does to it
/// (`spec.imagePolicy`: `Keep` | `Recreate`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub enum ImagePolicy {
    /// The guest keeps what it was made from; its status says it runs an older version.
    #[default]
    Keep,
    /// The guest is deleted and made again from the new version, a set's members at most
    /// `maxUnavailable` at a time (needs `deletionPolicy: Delete`).
    Recreate,
}

/// Valid specs, each shared (`Arc`) with the git source's parse cache: the specs are held
/// once, and a commit that changes one spec of 50,000 makes one new spec and copies none.
/// Reads like a list of [`Spec`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Specs(Vec<Arc<Spec>>);

/// The iterator over [`Specs`].
pub(crate) type SpecsIter<'a> =
    std::iter::Map<std::slice::Iter<'a, Arc<Spec>>, fn(&'a Arc<Spec>) -> &'a Spec>;

/// The valid members of set document `doc`, each validated by `validate_one`; the set's own
/// problems and overlapping addresses go to `ctx` (the members they concern held).
fn validate_set(
    ctx: &mut fields::Ctx,
    file: &str,
    doc: &yaml::Node,
    validate_one: &dyn Fn(&mut fields::Ctx, &yaml::Node) -> Option<Spec>,
) -> Vec<Spec> {
    let (members, problems) = sets::expand(file, doc);
    ctx.refuse_all(problems);
    let mut made = Vec::new();
    for (member_doc, member) in members {
        if let Some(spec) = validate_one(ctx, &member_doc) {
            made.push(Spec {
                set: Some(Box::new(member)),
                ..spec
            });
        }
    }
    let overlaps = sets::address_overlaps(&made);
    let held: std::collections::HashSet<String> =
        overlaps.iter().filter_map(|d| d.spec.clone()).collect();
    ctx.refuse_all(overlaps);
    made.retain(|s| !held.contains(s.name.as_str()));
    made
}

impl Spec {
    /// What the spec makes: a QEMU VM or an LXC container.
    pub fn kind(&self) -> GuestKind {
        match self.guest {
            Guest::Vm(_) => GuestKind::Qemu,
            Guest::Container(_) => GuestKind::Lxc,
        }
    }

    /// A VM's own fields; `None` for a container.
    pub fn vm(&self) -> Option<&VmSpec> {
        match &self.guest {
            Guest::Vm(vm) => Some(vm),
            Guest::Container(_) => None,
        }
    }

    /// A container's own fields; `None` for a VM.
    pub fn container(&self) -> Option<&ContainerSpec> {
        match &self.guest {
            Guest::Vm(_) => None,
            Guest::Container(ct) => Some(ct),
        }
    }

    /// A VM's own fields to change (in tests and defaults); `None` for a container.
    pub fn vm_mut(&mut self) -> Option<&mut VmSpec> {
        match &mut self.guest {
            Guest::Vm(vm) => Some(vm),
            Guest::Container(_) => None,
        }
    }

    /// A container's own fields to change; `None` for a VM.
    pub fn container_mut(&mut self) -> Option<&mut ContainerSpec> {
        match &mut self.guest {
            Guest::Vm(_) => None,
            Guest::Container(ct) => Some(ct),
        }
    }

    /// The version the guest would be made from now, as a record's `made_from` keeps it: the
    /// file of its `ProxmoxImage` (`image: {image: NAME}`), or the VM name of
    /// its `ProxmoxTemplate`'s current version (`image: {template: NAME}`). `None`: made from
    /// nothing the repository versions.
    pub fn made_from_now<'a>(&'a self, images: &'a images::ImagesByName) -> Option<&'a str> {
        match self.image() {
            Image::Managed(name) => images.get(name).map(|i| i.filename.as_str()),
            Image::Built { vm_name, .. } => Some(vm_name.as_str()),
            _ => None,
        }
    }

    /// The guest's name in PVE: a VM's `name`, a container's `hostname`.
    pub fn guest_name(&self) -> &str {
        match &self.guest {
            Guest::Vm(vm) => &vm.vm_name,
            Guest::Container(ct) => &ct.hostname,
        }
    }

    /// What the guest is made from: a VM's `image`, a container's `template`.
    pub fn image(&self) -> &Image {
        match &self.guest {
            Guest::Vm(vm) => &vm.image,
            Guest::Container(ct) => &ct.template,
        }
    }

    /// The guest's CPU cores: a VM's `cpu`, a container's `cores`.
    pub fn cores(&self) -> u32 {
        match &self.guest {
            Guest::Vm(vm) => vm.cpu,
            Guest::Container(ct) => ct.cores,
        }
    }

    /// The guest's memory in MiB.
    pub fn memory_mib(&self) -> u64 {
        match &self.guest {
            Guest::Vm(vm) => vm.memory_mib,
            Guest::Container(ct) => ct.memory_mib,
        }
    }

    /// The size of the disk the guest boots from, in bytes: a VM's boot disk, a container's
    /// root filesystem.
    pub fn root_disk_bytes(&self) -> u64 {
        match &self.guest {
            Guest::Vm(vm) => vm.disk_bytes,
            Guest::Container(ct) => ct.rootfs_bytes,
        }
    }

    /// The storage of the disk the guest boots from.
    pub fn root_storage(&self) -> &str {
        match &self.guest {
            Guest::Vm(vm) => &vm.storage,
            Guest::Container(ct) => &ct.storage,
        }
    }

    /// The bridge of the guest's first NIC.
    pub fn bridge(&self) -> &str {
        match &self.guest {
            Guest::Vm(vm) => &vm.network,
            Guest::Container(ct) => &ct.network,
        }
    }

    /// The spec's management policy: its own `managementPolicy`, else the config's for its
    /// file (`[reconcile] observe_paths`, then `management_policy`).
    pub fn policy(&self, reconcile: &crate::config::ReconcileConfig) -> ManagementPolicy {
        match self.management_policy {
            Some(p) => p,
            None => reconcile.default_policy(&self.file),
        }
    }

    /// The file `pos` (one of the spec's positions) is in: the spec's own, or the
    /// `_defaults.yaml` the value came from.
    pub(crate) fn file_of(&self, pos: Pos) -> &str {
        let from = (pos.source as usize).checked_sub(1);
        match from.and_then(|i| self.defaults.as_ref()?.get(i)) {
            Some(f) => f,
            None => &self.file,
        }
    }
}

impl Specs {
    /// Each spec, in order.
    pub fn iter(&self) -> SpecsIter<'_> {
        self.0.iter().map(|s| &**s)
    }

    /// The specs themselves, to keep some without copying them.
    pub fn shared(&self) -> &[Arc<Spec>] {
        &self.0
    }

    /// How many specs there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no specs.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `spec` at the end: a `Spec`, or an `Arc` it shares with others.
    pub fn push(&mut self, spec: impl Into<Arc<Spec>>) {
        self.0.push(spec.into());
    }

    /// Drops every spec.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Keeps only the specs `keep` is true for, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&Spec) -> bool) {
        self.0.retain(|s| keep(s));
    }

    /// Each spec's shared slot, to replace some specs without copying the others (their
    /// hashes then given again: [`remember_hashes`]).
    pub(crate) fn slots_mut(&mut self) -> std::slice::IterMut<'_, Arc<Spec>> {
        self.0.iter_mut()
    }

    /// Each spec to change in place (copied first when shared). Kept hashes are dropped:
    /// they would no longer be the spec's.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Spec> {
        self.0.iter_mut().map(unshared)
    }
}

/// A spec to change: its own copy when shared, without its kept hashes.
fn unshared(spec: &mut Arc<Spec>) -> &mut Spec {
    let spec = Arc::make_mut(spec);
    spec.hashes = Hashes::default();
    spec
}

impl std::ops::IndexMut<usize> for Specs {
    fn index_mut(&mut self, i: usize) -> &mut Spec {
        unshared(&mut self.0[i])
    }
}

impl std::ops::Index<usize> for Specs {
    type Output = Spec;
    fn index(&self, i: usize) -> &Spec {
        &self.0[i]
    }
}

impl<'a> IntoIterator for &'a Specs {
    type Item = &'a Spec;
    type IntoIter = SpecsIter<'a>;
    fn into_iter(self) -> SpecsIter<'a> {
        self.iter()
    }
}

impl FromIterator<Arc<Spec>> for Specs {
    fn from_iter<I: IntoIterator<Item = Arc<Spec>>>(iter: I) -> Specs {
        Specs(iter.into_iter().collect())
    }
}

impl FromIterator<Spec> for Specs {
    fn from_iter<I: IntoIterator<Item = Spec>>(iter: I) -> Specs {
        // Not collected in place: from a `Vec<Spec>`, the `Arc`s would keep its whole buffer
        // (a `Spec`'s size per spec) besides the specs they point to.
        let iter = iter.into_iter();
        let mut specs = Vec::with_capacity(iter.size_hint().0);
        specs.extend(iter.map(Arc::new));
        Specs(specs)
    }
}

impl From<Vec<Spec>> for Specs {
    fn from(specs: Vec<Spec>) -> Specs {
        specs.into_iter().collect()
    }
}

/// The result of loading a set of spec files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecSet {
    /// Every valid spec. A name that is defined twice is in none of them (see
    /// [`check_duplicates`]).
    pub specs: Specs,
    /// Every valid `ProxmoxImage` ([`images`]), in file order.
    pub images: Vec<Arc<images::ImageSpec>>,
    /// Every error and warning, in file order then position order.
    pub diagnostics: Vec<Diagnostic>,
}

impl SpecSet {
    /// The valid images by name (shared, not copied).
    pub fn images_by_name(&self) -> images::ImagesByName {
        (self.images.iter())
            .map(|i| (i.name.clone(), i.clone()))
            .collect()
    }

    /// True if any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// The errors.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }

    /// The warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| !d.is_error())
    }

    /// Names of specs that exist but are invalid: their VMs must be left as they are.
    pub fn invalid_names(&self) -> BTreeSet<&str> {
        self.errors().filter_map(|d| d.spec.as_deref()).collect()
    }

    /// False if some error could not be tied to a spec name (unreadable file, YAML syntax
    /// error, missing name): then an absent spec may just be unreadable, so nothing should be
    /// treated as removed.
    pub fn is_complete(&self) -> bool {
        self.errors().all(|d| d.spec.is_some())
    }
}

/// Parses and validates one file's bytes. Pure: no I/O. `file` is used in diagnostics. A
/// SOPS-encrypted document does not open (no identity): see [`parse_file_with`].
///
/// Returns the valid specs of every document and all diagnostics (sorted by position).
pub fn parse_file(file: &str, bytes: &[u8]) -> (Vec<Spec>, Vec<Diagnostic>) {
    let none = crate::sops::Keyring::unavailable(crate::config::NO_SOPS_IDENTITY);
    parse_file_with(file, bytes, Secrets::Decrypt(&none))
}

/// [`parse_file`], opening SOPS-encrypted documents as `secrets` says.
pub(crate) fn parse_file_with(
    file: &str,
    bytes: &[u8],
    secrets: Secrets,
) -> (Vec<Spec>, Vec<Diagnostic>) {
    let parsed = parse_file_defaulted(file, bytes, secrets, &[], &sets::SpecBudget::unlimited());
    (parsed.specs, parsed.diagnostics)
}

/// The warning that a SOPS-encrypted document in `file` takes no values from `chain`, when
/// there is one.
fn no_defaults_for_sealed(file: &str, chain: &[Arc<defaults::Defaults>]) -> Option<Diagnostic> {
    let files: Vec<&str> = chain.iter().map(|d| d.file.as_str()).collect();
    (!files.is_empty()).then(|| {
        Diagnostic::warning(
            file,
            Pos::START,
            format!(
                "this SOPS-encrypted spec takes no values from {} (its MAC covers only this file): \
                 write what it needs here",
                files.join(", ")
            ),
        )
    })
}

/// A spec file's bytes as text: within the size limit, UTF-8, without a byte order mark.
fn spec_text<'a>(file: &str, bytes: &'a [u8]) -> Result<&'a str, Diagnostic> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(Diagnostic::error(
            file,
            Pos::START,
            format!(
                "file is {} bytes, larger than the {MAX_FILE_BYTES} byte (1 MiB) limit for a spec file; split it",
                bytes.len()
            ),
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| not_utf8(file, bytes, e.valid_up_to()))?;
    // A UTF-8 byte order mark is harmless; drop it so it is not taken as content.
    Ok(text.strip_prefix('\u{feff}').unwrap_or(text))
}

/// [`parse_file_with`], each document taking the values of `chain` it does not set itself
/// (the `_defaults.yaml` files of its directory and above, outermost first; see [`defaults`]),
/// its specs counted in `budget` before any is expanded or validated: past the budget's cap,
/// nothing more is (the reader then refuses the whole read: [`sets::SpecBudget`]).
// Long because: the file's checks, then one pass over its documents (counted, opened when
// sealed, validated or expanded), then its diagnostics capped.
pub(crate) fn parse_file_defaulted(
    file: &str,
    bytes: &[u8],
    secrets: Secrets,
    chain: &[Arc<defaults::Defaults>],
    budget: &sets::SpecBudget,
) -> FileParse {
    // The read is refused already: not even parsed.
    if budget.spent() {
        return FileParse::default();
    }
    let text = match spec_text(file, bytes) {
        Ok(text) => text,
        Err(d) => return FileParse::refused(d),
    };

    let (mut docs, mut diags) = yaml::parse_documents(file, text);
    let mut ctx = fields::Ctx::new(file);
    ctx.defaults = chain;
    // The files a spec's positions may be in, shared by the file's specs.
    let files: Option<Arc<Vec<String>>> =
        (!chain.is_empty()).then(|| Arc::new(chain.iter().map(|d| d.file.clone()).collect()));
    let with_files = |s: Spec| Spec {
        defaults: files.clone(),
        ..s
    };
    // A sealed document is opened as written (its MAC covers its own values), then the
    // defaults are merged under it.
    let validate_one = |ctx: &mut fields::Ctx, doc: &yaml::Node| match chain.is_empty() {
        true => validate::validate_document(ctx, doc),
        false => validate::validate_document(ctx, &defaults::apply(chain, doc)).map(with_files),
    };
    // A set's members are validated one by one, as specs of their own.
    let validate = |ctx: &mut fields::Ctx, doc: &yaml::Node| -> Vec<Spec> {
        match sets::is_set(doc) {
            true => validate_set(ctx, file, doc, &validate_one),
            false => validate_one(ctx, doc).into_iter().collect(),
        }
    };
    // A sealed document takes no defaults: its SOPS MAC covers its own file only, and a
    // `_defaults.yaml` (which anyone who may commit can write, without the key) could add what
    // the MAC keeps out, such as an SSH key into the guest that holds the secret.
    let as_written =
        |ctx: &mut fields::Ctx, doc: &yaml::Node| validate::validate_document(ctx, doc);
    let validate_sealed = |ctx: &mut fields::Ctx, doc: &yaml::Node| -> Vec<Spec> {
        ctx.diags.extend(no_defaults_for_sealed(file, chain));
        match sets::is_set(doc) {
            true => validate_set(ctx, file, doc, &as_written),
            false => as_written(ctx, doc).into_iter().collect(),
        }
    };
    let mut counted = 0u64;
    let mut images = Vec::new();
    let specs: Vec<Spec> = docs
        .iter_mut()
        .flat_map(|doc| {
            // An image is no guest: no defaults, no secrets, counted as one.
            if images::is_image(doc) {
                counted = counted.saturating_add(1);
                if budget.take(1) {
                    images.extend(images::validate_image(&mut ctx, doc).map(Arc::new));
                }
                return Vec::new();
            }
            // Counted before anything is expanded: a set by its own replicas or names.
            let n = match sets::is_set(doc) {
                true => sets::member_count(doc),
                false => 1,
            };
            counted = counted.saturating_add(n);
            if !budget.take(n) {
                return Vec::new();
            }
            match sealed::open(file, doc, secrets) {
                sealed::Opened::Plain => validate(&mut ctx, doc),
                sealed::Opened::Decrypted { at, ciphertext } => {
                    ctx.sealed = Some(at);
                    let specs = validate_sealed(&mut ctx, doc);
                    ctx.sealed = None;
                    let sealed: Box<str> = ciphertext.into();
                    (specs.into_iter())
                        .map(|s| Spec {
                            sealed: Some(sealed.clone()),
                            ..s
                        })
                        .collect()
                }
                sealed::Opened::Unopened(warning) => {
                    let specs = validate_sealed(&mut ctx, doc);
                    ctx.diags
                        .push(warning.for_spec(specs.first().map(|s| s.name.as_str())));
                    specs
                }
                sealed::Opened::Refused(d) => {
                    ctx.refuse(d.for_spec(validate::document_name(doc).as_deref()));
                    Vec::new()
                }
            }
        })
        .collect();
    budget.file_counted(file, counted);
    diags.extend(ctx.diags);
    diags.sort_by_key(|d| d.pos);
    if diags.len() > MAX_DIAGNOSTICS_PER_FILE {
        // A machine-generated or hostile file could produce one error per line; the first ones
        // locate the problem, the rest would only flood the terminal.
        let more = diags.len() - MAX_DIAGNOSTICS_PER_FILE;
        diags.truncate(MAX_DIAGNOSTICS_PER_FILE);
        let last = diags.last().map_or(Pos::START, |d| d.pos);
        diags.push(Diagnostic::error(
            file,
            last,
            format!("{more} more problems in this file not shown"),
        ));
    }
    FileParse {
        specs,
        images,
        diagnostics: diags,
    }
}

/// What one spec file holds: its guests' specs, its images and its problems.
#[derive(Debug, Default)]
pub struct FileParse {
    /// The valid guest specs (a set's members each one).
    pub specs: Vec<Spec>,
    /// The valid `ProxmoxImage`s.
    pub images: Vec<Arc<images::ImageSpec>>,
    /// Every error and warning, by position.
    pub diagnostics: Vec<Diagnostic>,
}

impl FileParse {
    /// A file refused as a whole.
    pub(crate) fn refused(d: Diagnostic) -> FileParse {
        FileParse {
            diagnostics: vec![d],
            ..FileParse::default()
        }
    }
}

/// The error for invalid UTF-8 at byte `offset`, positioned by line and column.
fn not_utf8(file: &str, bytes: &[u8], offset: usize) -> Diagnostic {
    let valid = bytes.get(..offset).unwrap_or_default();
    // The prefix is valid UTF-8 by construction; count characters, not bytes, for the column.
    let prefix = String::from_utf8_lossy(valid);
    let line = prefix.matches('\n').count() + 1;
    let column = prefix.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let byte = bytes.get(offset).copied().unwrap_or_default();
    Diagnostic::error(
        file,
        Pos::new(line, column),
        format!(
            "invalid UTF-8 (byte 0x{byte:02X} at offset {offset}); spec files must be UTF-8 text"
        ),
    )
}

#[cfg(test)]
mod tests;

/// For unit tests: `web.yaml` holding spec `web-01` (site `lab`, node `pve1`, image 9000) with
/// `extra` lines appended to its `forProvider` (indented four spaces), parsed: the specs and
/// each diagnostic as text. The document is laid out so `extra` starts on line 9.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn parse_test_spec(extra: &str) -> (Vec<Spec>, Vec<String>) {
    let yaml = format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata: {{name: web-01}}\nspec:\n  forProvider:\n    \
         site: lab\n    node: pve1\n    image: \"9000\"\n{extra}"
    );
    let (specs, diags) = parse_file("web.yaml", yaml.as_bytes());
    (specs, diags.iter().map(|d| d.to_string()).collect())
}

/// `spec` as a container with the VM's name, sizes and image and no options of its own: for
/// tests of what only the kind changes (the words of a message). Made by parsing, so a new
/// field of `ContainerSpec` needs nothing here.
#[cfg(any(test, feature = "testing"))]
pub fn as_test_container(spec: Spec) -> Spec {
    let Guest::Vm(vm) = spec.guest else {
        return spec;
    };
    let yaml = "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: t\nspec:\n  \
                forProvider:\n    site: s\n    node: n\n    template: local:vztmpl/t.tar.zst\n";
    let (specs, diags) = parse_file("t.yaml", yaml.as_bytes());
    assert!(diags.is_empty(), "{diags:?}");
    let Some(Guest::Container(mut ct)) = specs.into_iter().next().map(|s| s.guest) else {
        unreachable!("a ProxmoxLXC document is a container")
    };
    ct.hostname = vm.vm_name.to_string();
    ct.cores = vm.cpu;
    ct.memory_mib = vm.memory_mib;
    ct.rootfs_bytes = vm.disk_bytes;
    ct.storage = vm.storage.to_string();
    ct.network = vm.network.to_string();
    ct.template = vm.image;
    ct.template_pos = vm.image_pos;
    Spec {
        guest: Guest::Container(ct),
        ..spec
    }
}

/// [`parse_test_spec`]'s spec, which must be valid.
#[cfg(any(test, feature = "testing"))]
pub fn test_spec(extra: &str) -> Spec {
    let (mut specs, diags) = parse_test_spec(extra);
    assert!(diags.is_empty(), "{diags:?}");
    specs.remove(0)
}
