//! The typed calls proxsync makes. See the table in [`crate::pve`] for which answer at once
//! and which start a task.

use std::collections::BTreeMap;
use std::time::Duration;

#[cfg(feature = "client")]
use super::client::Client;
use super::error::Error;
use super::task::{TaskOutcome, Upid};
use super::texts::{self, Meaning};
use super::types::*;
use crate::guest::GuestKind;
use crate::ownership::Marker;
use crate::pve::permit::{Act, Grant, Permit, check_write};

/// The cluster's root CA among a node's certificates (pve-cluster `src/PVE/Cluster/Setup.pm`:
/// `$pveca_cert_fn = "$pmxcfs_base_dir/pve-root-ca.pem"`).
const ROOT_CA_FILE: &str = "pve-root-ca.pem";

/// Parameters of a create, clone or config change: PVE property name -> value.
///
/// Values that end up inside PVE property strings are built by the helpers below from
/// validated parts, and every part is checked again here, so nothing can smuggle an extra
/// `,key=value` option into a drive or NIC definition.
///
/// A config change that detaches or destroys a drive, writes or removes a marker, removes the
/// ownership tag or attaches an image carries the gate's permit for it (the builders `detach`,
/// `destroy_drive`, `marker`, `drop_marker`, `drop_ownership`, `attach_seed`); the client
/// refuses to send one without ([`VmParams::permitted`], `gate::permit::check_write`).
#[derive(Clone, Default, PartialEq)]
pub struct VmParams {
    values: BTreeMap<String, String>,
    /// The permits of the guarded edits among `values`.
    grants: Vec<Grant>,
}

/// Keys whose values are secrets: never shown, not even in a debug print.
const SECRET_KEYS: [&str; 1] = ["password"];

impl std::fmt::Debug for VmParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: BTreeMap<&str, &str> = self
            .values
            .iter()
            .map(|(k, v)| {
                let v = if SECRET_KEYS.contains(&k.as_str()) {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (k.as_str(), v)
            })
            .collect();
        f.debug_struct("VmParams")
            .field("values", &shown)
            .field("grants", &self.grants)
            .finish()
    }
}

/// What `download-url` is asked to fetch ([`Client::download_url`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    /// `url`: where PVE downloads from.
    pub url: String,
    /// `content`: `import`, `iso` or `vztmpl`.
    pub content: String,
    /// `filename`: the file's name on the storage (PVE normalises it; ours already is).
    pub filename: String,
    /// `checksum-algorithm`: `sha256` or `sha512`.
    pub checksum_algorithm: String,
    /// `checksum`: lower-case hex.
    pub checksum: String,
}

/// A part of a property string (`bridge=X`, `S:0,import-from=V`) may not hold these.
fn check_part(what: &str, value: &str) -> Result<(), Error> {
    if value.is_empty()
        || value
            .chars()
            .any(|c| matches!(c, ',' | '=' | ';') || c.is_whitespace() || c.is_control())
    {
        return Err(Error::Setup(format!(
            "{what} {value:?} is empty or holds ',', '=', ';', whitespace or a control character, \
             which would change the PVE property string"
        )));
    }
    Ok(())
}

impl VmParams {
    /// No properties and no permits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a plain property (`name`, `cores`, `memory`, `description`, `tags`, ...).
    pub fn set(mut self, key: &str, value: impl ToString) -> Self {
        self.values.insert(key.to_string(), value.to_string());
        self
    }

    /// Tags, `;`-separated as PVE stores them.
    pub fn tags<S: AsRef<str>>(self, tags: &[S]) -> Result<Self, Error> {
        for t in tags {
            check_part("tag", t.as_ref())?;
        }
        let joined = tags
            .iter()
            .map(|t| t.as_ref())
            .collect::<Vec<_>>()
            .join(";");
        Ok(self.set("tags", joined))
    }

    /// A virtio NIC on a bridge: `net0=virtio,bridge=vmbr0`.
    pub fn nic(self, slot: &str, bridge: &str) -> Result<Self, Error> {
        check_part("bridge", bridge)?;
        Ok(self.set(slot, format!("virtio,bridge={bridge}")))
    }

    /// A NIC with its options: `net1=e1000=BC:24:11:00:00:01,bridge=vmbr0,tag=5` (without a
    /// MAC, PVE generates one). Every part is checked so it cannot add an option.
    pub fn nic_with(
        self,
        slot: &str,
        model: &str,
        mac: Option<&str>,
        options: &[(String, String)],
    ) -> Result<Self, Error> {
        check_part("NIC model", model)?;
        let mut parts = vec![match mac {
            Some(mac) => {
                check_part("MAC", mac)?;
                format!("{model}={mac}")
            }
            None => model.to_string(),
        }];
        for (key, value) in options {
            check_part("NIC option", key)?;
            if key == "trunks" {
                // VLAN ids and ranges, `;`-separated inside the option (PVE's own syntax).
                if value.is_empty()
                    || !value
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == ';' || c == '-')
                {
                    return Err(Error::Setup(format!(
                        "trunks {value:?} is not VLAN ids and ranges (10;20-30)"
                    )));
                }
            } else {
                check_part(key, value)?;
            }
            parts.push(format!("{key}={value}"));
        }
        Ok(self.set(slot, parts.join(",")))
    }

    /// NIC `current` on another bridge, its model, MAC and other options kept.
    pub fn nic_bridge(self, slot: &str, current: &str, bridge: &str) -> Result<Self, Error> {
        check_part("bridge", bridge)?;
        Ok(self.set(slot, super::values::with_bridge(current, bridge)))
    }

    /// Adds every value of `other`; the `delete` lists and the permits of both are kept.
    pub fn merge(mut self, mut other: VmParams) -> Self {
        if let Some(delete) = other.values.remove("delete") {
            self = self.add_deletes(&delete.split(',').collect::<Vec<_>>());
        }
        self.values.extend(other.values);
        self.grants.extend(other.grants);
        self
    }

    /// A new empty disk: `scsi0=local-lvm:32` (size in GiB).
    pub fn new_disk(self, slot: &str, storage: &str, size_gib: u64) -> Result<Self, Error> {
        self.new_disk_with(slot, storage, size_gib, &[])
    }

    /// A new empty disk with drive options: `scsi1=data:100,cache=writeback,format=qcow2`.
    pub fn new_disk_with(
        self,
        slot: &str,
        storage: &str,
        size_gib: u64,
        options: &[(String, String)],
    ) -> Result<Self, Error> {
        check_part("storage", storage)?;
        self.drive(slot, &format!("{storage}:{size_gib}"), options)
    }

    /// A disk imported from an existing volume: `scsi0=local-lvm:0,import-from=local:import/x.qcow2`.
    pub fn import_disk(self, slot: &str, storage: &str, volume: &str) -> Result<Self, Error> {
        self.import_disk_with(slot, storage, volume, &[])
    }

    /// An imported disk with drive options: `scsi0=S:0,import-from=V,discard=on`.
    pub fn import_disk_with(
        self,
        slot: &str,
        storage: &str,
        volume: &str,
        options: &[(String, String)],
    ) -> Result<Self, Error> {
        check_part("storage", storage)?;
        check_part("volume", volume)?;
        self.drive(slot, &format!("{storage}:0,import-from={volume}"), options)
    }

    /// An existing drive with its options (`scsi1=data:vm-100-disk-1,cache=none,size=8G`):
    /// the volume and every option are checked so none can add another option.
    pub fn existing_drive(
        self,
        slot: &str,
        volume: &str,
        options: &[(String, String)],
    ) -> Result<Self, Error> {
        check_part("volume", volume)?;
        self.drive(slot, volume, options)
    }

    /// `slot=base,key=value,...`, `base` built by the callers above from checked parts.
    fn drive(self, slot: &str, base: &str, options: &[(String, String)]) -> Result<Self, Error> {
        if !super::values::is_drive_key(slot) {
            return Err(Error::Setup(format!("{slot:?} is not a drive slot")));
        }
        let mut value = base.to_string();
        for (key, v) in options {
            check_part("drive option", key)?;
            check_part(key, v)?;
            value.push_str(&format!(",{key}={v}"));
        }
        Ok(self.set(slot, value))
    }

    /// An ISO as a CD-ROM: `ide2=local:iso/debian.iso,media=cdrom`.
    pub fn cdrom(self, slot: &str, volume: &str) -> Result<Self, Error> {
        check_part("volume", volume)?;
        Ok(self.set(slot, format!("{volume},media=cdrom")))
    }

    /// A cloud-init drive: `ide2=local-lvm:cloudinit`.
    pub fn cloudinit_drive(self, slot: &str, storage: &str) -> Result<Self, Error> {
        check_part("storage", storage)?;
        Ok(self.set(slot, format!("{storage}:cloudinit")))
    }

    /// SSH public keys for cloud-init, encoded as PVE requires: the `sshkeys` value is
    /// URL-encoded (PVE's `urlencoded` format, decoded with uri_unescape), spaces as `%20`.
    pub fn sshkeys<S: AsRef<str>>(self, keys: &[S]) -> Self {
        let joined = keys
            .iter()
            .map(|k| k.as_ref().trim())
            .collect::<Vec<_>>()
            .join("\n");
        self.set("sshkeys", percent_encode(&joined))
    }

    /// cloud-init IP settings of `netN`: `ipconfigN=ip=10.0.0.5/24,gw=10.0.0.1,ip6=auto`. Each
    /// part is checked so it cannot add an option.
    pub fn ipconfig(
        self,
        slot: &str,
        ip: Option<&str>,
        gw: Option<&str>,
        ip6: Option<&str>,
        gw6: Option<&str>,
    ) -> Result<Self, Error> {
        let mut parts = Vec::new();
        for (key, value) in [("ip", ip), ("gw", gw), ("ip6", ip6), ("gw6", gw6)] {
            if let Some(v) = value {
                check_part(key, v)?;
                parts.push(format!("{key}={v}"));
            }
        }
        Ok(self.set(slot, parts.join(",")))
    }

    /// cloud-init DNS servers (`nameserver`, PVE's `address-list`: space-separated).
    pub fn nameservers<S: AsRef<str>>(self, servers: &[S]) -> Result<Self, Error> {
        for s in servers {
            check_part("nameserver", s.as_ref())?;
        }
        let joined = servers
            .iter()
            .map(|s| s.as_ref())
            .collect::<Vec<_>>()
            .join(" ");
        Ok(self.set("nameserver", joined))
    }

    /// A plain value that comes from a spec (`scsihw`, `ostype`, `bios`, `vga`, `machine`,
    /// `cpu`, ...), checked so it cannot add an option to a property string.
    pub fn checked(self, key: &str, value: &str) -> Result<Self, Error> {
        check_part(key, value)?;
        Ok(self.set(key, value))
    }

    /// A property string made of a spec's values: `first` written bare (a volume, `S:8`),
    /// then `key=value` parts, each value checked so it cannot add an option
    /// (`net0=name=eth0,bridge=vmbr0,ip=dhcp`, `mp0=local-lvm:10,mp=/srv/data`).
    pub fn property(
        self,
        key: &str,
        first: Option<&str>,
        parts: &[(&str, String)],
    ) -> Result<Self, Error> {
        let mut out: Vec<String> = Vec::new();
        if let Some(f) = first {
            check_part(key, f)?;
            out.push(f.to_string());
        }
        for (k, v) in parts {
            check_part(k, v)?;
            out.push(format!("{k}={v}"));
        }
        Ok(self.set(key, out.join(",")))
    }

    /// [`VmParams::property`] keeping `kept`: parts of the current value PVE wrote (each one
    /// `key=value` part of it, split at its commas), passed on as they are; the spec's `parts`
    /// are checked.
    pub fn property_keeping(
        self,
        key: &str,
        parts: &[(&str, String)],
        kept: &[String],
    ) -> Result<Self, Error> {
        let mut out: Vec<String> = Vec::new();
        for (k, v) in parts {
            check_part(k, v)?;
            out.push(format!("{k}={v}"));
        }
        for part in kept {
            if part.contains(',') {
                return Err(Error::Setup(format!(
                    "{key}: {part:?} is more than one part of a property string"
                )));
            }
            out.push(part.clone());
        }
        Ok(self.set(key, out.join(",")))
    }

    /// A secret value (a container's root `password`): sent as given, never shown by `Debug`.
    pub fn secret(self, key: &str, value: &str) -> Self {
        self.set(key, value)
    }

    /// A property string whose default key `sub` (written bare, first) becomes `value`,
    /// keeping the other options of `current` (`cpu=host,flags=+aes`, `vga=serial0,memory=32`).
    pub fn default_key(
        self,
        key: &str,
        sub: &str,
        current: Option<&str>,
        value: &str,
    ) -> Result<Self, Error> {
        check_part(key, value)?;
        Ok(self.set(key, super::values::with_default_part(current, sub, value)))
    }

    /// A new EFI vars disk: `efidisk0=S:1,efitype=4m,pre-enrolled-keys=0` (PVE copies the
    /// OVMF template into it; the size is ignored).
    pub fn efidisk(self, storage: &str, pre_enrolled_keys: bool) -> Result<Self, Error> {
        check_part("storage", storage)?;
        Ok(self.set(
            "efidisk0",
            format!(
                "{storage}:1,efitype=4m,pre-enrolled-keys={}",
                u8::from(pre_enrolled_keys)
            ),
        ))
    }

    /// A new TPM state volume: `tpmstate0=S:1,version=v2.0` (PVE makes it 4 MiB).
    pub fn tpmstate(self, storage: &str, version: &str) -> Result<Self, Error> {
        check_part("storage", storage)?;
        check_part("TPM version", version)?;
        Ok(self.set("tpmstate0", format!("{storage}:1,version={version}")))
    }

    /// Removes properties (the `delete` parameter of a config change), added to those already
    /// listed. A drive, `description` or `tags` among them needs the gate's permit: see
    /// [`VmParams::detach`], [`VmParams::drop_marker`], [`VmParams::drop_ownership`].
    pub fn delete_keys<S: AsRef<str>>(self, keys: &[S]) -> Self {
        self.add_deletes(keys)
    }

    fn add_deletes<S: AsRef<str>>(self, keys: &[S]) -> Self {
        let mut all: Vec<String> = self
            .get("delete")
            .into_iter()
            .flat_map(|d| d.split(','))
            .map(str::to_string)
            .collect();
        for k in keys.iter().map(|k| k.as_ref().trim()) {
            if !k.is_empty() && !all.iter().any(|a| a == k) {
                all.push(k.to_string());
            }
        }
        if all.is_empty() {
            return self;
        }
        self.set("delete", all.join(","))
    }

    fn granted(mut self, permit: &Permit) -> Self {
        self.grants.push(permit.grant());
        self
    }

    /// Detaches the drives `permit` allows (`gate::volume::detach`,
    /// `gate::volume::cloudinit_drive_removal`): `delete=<slots>`; PVE keeps their volumes as
    /// `unusedN`.
    pub fn detach(self, permit: &Permit) -> Result<Self, Error> {
        let Act::Detach { slots } = permit.act() else {
            return Err(not_allowed("a detach", permit));
        };
        Ok(self.add_deletes(slots).granted(permit))
    }

    /// Destroys the drive `permit` allows with its volume (`gate::volume::destroy_drive`):
    /// `delete=<slot>` with `force=1` (qemu-server `vmconfig_delete_or_detach_drive` with
    /// `$force`: the volume is deallocated, not kept as `unusedN`).
    pub fn destroy_drive(self, permit: &Permit) -> Result<Self, Error> {
        let Act::Destroy { slot, .. } = permit.act() else {
            return Err(not_allowed("a destroy", permit));
        };
        Ok(self.add_deletes(&[slot]).set("force", "1").granted(permit))
    }

    /// Frees the volume of an `unusedN` entry `permit` allows (`gate::volume::destroy_unused`):
    /// `delete=unusedN`, which destroys the volume.
    pub fn destroy_unused(self, permit: &Permit) -> Result<Self, Error> {
        let Act::Destroy { slot, .. } = permit.act() else {
            return Err(not_allowed("a destroy", permit));
        };
        if !slot.starts_with("unused") {
            return Err(not_allowed("freeing an unused volume", permit));
        }
        Ok(self.add_deletes(&[slot]).granted(permit))
    }

    /// Writes `description`, whose marker line is the one `permit` allows (a re-signing, a
    /// re-label, a hand-over or a take-over).
    pub fn marker(self, permit: &Permit, description: String) -> Result<Self, Error> {
        let found = Marker::parse(&description);
        let allowed = match permit.act() {
            Act::Sign { marker }
            | Act::Relabel { marker }
            | Act::HandOver { marker }
            | Act::TakeOver { marker }
            | Act::Adopt { marker } => found.is_some_and(|m| {
                m.install == marker.install && m.spec == marker.spec && m.uid == marker.uid
            }),
            _ => false,
        };
        if !allowed {
            return Err(not_allowed("this marker", permit));
        }
        Ok(self.set("description", description).granted(permit))
    }

    /// Writes `description` without a marker line: the marker goes (a release).
    pub fn drop_marker(self, permit: &Permit, description: String) -> Result<Self, Error> {
        if permit.act() != &Act::Release || Marker::parse(&description).is_some() {
            return Err(not_allowed("removing the marker", permit));
        }
        Ok(self.set("description", description).granted(permit))
    }

    /// Writes the VM's `tags` without the ownership tag (`delete=tags` when none is left): a
    /// release or a hand-over.
    pub fn drop_ownership<S: AsRef<str>>(self, permit: &Permit, tags: &[S]) -> Result<Self, Error> {
        if !matches!(permit.act(), Act::Release | Act::HandOver { .. }) {
            return Err(not_allowed("removing the ownership tag", permit));
        }
        let params = if tags.is_empty() {
            self.add_deletes(&["tags"])
        } else {
            self.tags(tags)?
        };
        Ok(params.granted(permit))
    }

    /// Attaches the seed image `permit` allows as a CD-ROM (`gate::volume::seed_attach`):
    /// `<slot>=<volume>,media=cdrom`.
    pub fn attach_seed(self, permit: &Permit) -> Result<Self, Error> {
        let Act::AttachSeed { slot, volume } = permit.act() else {
            return Err(not_allowed("a seed attach", permit));
        };
        let (slot, volume) = (slot.clone(), volume.clone());
        Ok(self.cdrom(&slot, &volume)?.granted(permit))
    }

    /// Whether this write may be sent to VM `vmid`: every guarded edit carries the gate's
    /// permit for it (`gate::permit::check_write`). The client asks before every config write.
    pub(crate) fn permitted(&self, vmid: u32) -> Result<(), Error> {
        let values = self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        check_write(vmid, values, &self.grants).map_err(Error::NotPermitted)
    }

    /// The value set for property `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// Every property and its value, in key order (`delete` among them).
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub(super) fn form(&self) -> Vec<(&str, String)> {
        self.values
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect()
    }
}

fn not_allowed(what: &str, permit: &Permit) -> Error {
    Error::NotPermitted(format!(
        "{what} is not what the permit for VM {} allows ({:?})",
        permit.vmid(),
        permit.act()
    ))
}
/// Everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - _ . ~`).
const NOT_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn percent_encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, NOT_UNRESERVED).to_string()
}

/// A clone of a template.
#[derive(Debug, Clone, PartialEq)]
pub struct CloneRequest {
    /// The clone's VMID.
    pub newid: u32,
    /// The clone's name (a container's `hostname`).
    pub name: String,
    /// The clone's description, which carries proxsync's marker.
    pub description: String,
    /// A full copy (default) rather than a linked clone.
    pub full: bool,
    /// Target storage for a full clone.
    pub storage: Option<String>,
    /// Target node, when it differs from the template's (needs shared storage).
    pub target: Option<String>,
    /// The resource pool the clone joins.
    pub pool: Option<String>,
}

pub(super) fn seg(s: &str) -> Result<&str, Error> {
    // Path segments come from validated specs and PVE listings; refuse anything that could
    // change the path rather than percent-encode it.
    if s.is_empty()
        || s.contains(['/', '?', '#', '%'])
        || s.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(Error::Setup(format!(
            "{s:?} is not a valid node or storage name"
        )));
    }
    Ok(s)
}

/// `name` if PVE takes it as a snapshot name (`pve-configid`: a letter, then letters, digits,
/// `-` and `_`; at most 40; not `current`, which names the guest's own state).
pub fn snapshot_name(name: &str) -> Result<&str, Error> {
    let mut bytes = name.bytes();
    let first = bytes.next().is_some_and(|b| b.is_ascii_alphabetic());
    let rest = bytes.all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if first && rest && (2..=40).contains(&name.len()) && name != "current" {
        return Ok(name);
    }
    Err(Error::Setup(format!(
        "{name:?} is no snapshot name PVE takes (a letter, then letters, digits, '-' or '_'; 2 \
         to 40 characters)"
    )))
}

pub(super) fn flag(b: bool) -> String {
    if b { "1" } else { "0" }.to_string()
}

pub(super) fn upid_from(method: &str, path: &str, value: String) -> Result<Upid, Error> {
    value.parse().map_err(|e: String| Error::Decode {
        method: method.into(),
        path: path.into(),
        message: e,
    })
}

#[cfg(feature = "client")]
impl Client {
    /// The UPID of a task a call started, counted in the metrics by type.
    pub(super) fn task_started(
        &self,
        method: &str,
        path: &str,
        value: String,
    ) -> Result<Upid, Error> {
        let upid = upid_from(method, path, value)?;
        self.metrics.task_started(&upid.kind);
        Ok(upid)
    }

    /// `GET /version`: at once.
    pub async fn version(&self) -> Result<Version, Error> {
        self.get("/version", &[]).await
    }

    /// `GET /cluster/status`: at once; quorum and which nodes are online.
    pub async fn cluster_status(&self) -> Result<Vec<ClusterStatusEntry>, Error> {
        self.get("/cluster/status", &[]).await
    }

    /// Quorum and node health from one `GET /cluster/status`.
    pub async fn cluster_health(&self) -> Result<ClusterHealth, Error> {
        Ok(ClusterHealth::from_entries(&self.cluster_status().await?))
    }

    /// `GET /nodes/{node}/certificates/info`: at once; the fingerprint of the cluster's root
    /// CA, `/etc/pve/pve-root-ca.pem` (pve-manager `PVE/API2/Certificates.pm` `info`, which any
    /// user may call), upper-case colon hex. It identifies the cluster (`gate::site`).
    pub async fn root_ca_fingerprint(&self, node: &str) -> Result<String, Error> {
        let path = format!("/nodes/{}/certificates/info", seg(node)?);
        let certs: Vec<CertificateInfo> = self.get(&path, &[]).await?;
        let decode = |message: String| Error::Decode {
            method: "GET".into(),
            path: path.clone(),
            message,
        };
        let root = certs
            .iter()
            .find(|c| c.filename.as_deref() == Some(ROOT_CA_FILE))
            .ok_or_else(|| {
                decode(format!(
                    "no {ROOT_CA_FILE} among the node's certificates (is /etc/pve/{ROOT_CA_FILE} \
                     readable on node {node}?)"
                ))
            })?;
        let fingerprint = root.fingerprint.as_deref().unwrap_or("");
        crate::pve::values::normalize_fingerprint(fingerprint).ok_or_else(|| {
            decode(format!(
                "{ROOT_CA_FILE}'s fingerprint {fingerprint:?} is not a SHA-256 fingerprint"
            ))
        })
    }

    /// `GET /cluster/resources?type=vm`: at once; every guest of the cluster (QEMU and LXC),
    /// and the entries that could not be read.
    pub async fn vm_resources(&self) -> Result<Listing, Error> {
        self.get("/cluster/resources", &[("type", "vm".into())])
            .await
    }

    /// `GET /cluster/resources?type=node`: at once; every node with its memory (`maxmem`,
    /// `mem`), the entries that decode. Read only when a set's member is to be placed by free
    /// memory (`engine::placement`).
    pub(crate) async fn node_resources(&self) -> Result<NodeResources, Error> {
        self.get("/cluster/resources", &[("type", "node".into())])
            .await
    }

    /// `GET /pools?poolid=P`: at once; the VMIDs of the pool's guests, VMs and containers (a
    /// member's `type` is `qemu` or `lxc`, pve-manager `PVE/API2/Pool.pm` `index`; its storages
    /// are `storage` and have no VMID). A pool that does not exist is an error (PVE: 500 `pool
    /// 'P' does not exist`).
    pub async fn pool_vmids(&self, poolid: &str) -> Result<Vec<u32>, Error> {
        check_part("pool", poolid)?;
        let pools: Vec<PoolEntry> = self
            .get("/pools", &[("poolid", poolid.to_string())])
            .await?;
        Ok(guests_of_pool(pools, poolid))
    }

    /// `PUT /pools` (`poolid`, `vms`, `allow-move=1`): at once; moves VM `vmid` into the pool
    /// (out of the one it was in).
    pub(crate) async fn move_to_pool(&self, poolid: &str, vmid: u32) -> Result<(), Error> {
        check_part("pool", poolid)?;
        let form = [
            ("poolid", poolid.to_string()),
            ("vms", vmid.to_string()),
            ("allow-move", "1".to_string()),
        ];
        let _: serde_json::Value = self.put("/pools", &form).await?;
        Ok(())
    }

    /// `POST /pools` (`poolid`, `comment`): at once; a new, empty pool (pve-manager
    /// `PVE/API2/Pool.pm` create_pool: `pool 'P' already exists` for one that does; the
    /// token needs `Pool.Allocate` on `/pool/P`).
    pub(crate) async fn create_pool(&self, poolid: &str, comment: &str) -> Result<(), Error> {
        check_part("pool", poolid)?;
        let form = [
            ("poolid", poolid.to_string()),
            ("comment", comment.to_string()),
        ];
        let _: serde_json::Value = self.post("/pools", &form).await?;
        Ok(())
    }

    /// `GET /cluster/nextid`: at once; the lowest VMID of the datacenter's `next-id` range no
    /// guest has (PVE sends it as a string). It reserves nothing (see `execute::vmid`).
    pub async fn next_id(&self) -> Result<u32, Error> {
        let v: serde_json::Value = self.get("/cluster/nextid", &[]).await?;
        lenient_vmid("/cluster/nextid", v)
    }

    /// `GET /cluster/nextid?vmid=N`: whether N is free. PVE answers 400 `VM N already exists`
    /// when it is taken.
    pub async fn vmid_is_free(&self, vmid: u32) -> Result<bool, Error> {
        match self
            .get::<serde_json::Value>("/cluster/nextid", &[("vmid", vmid.to_string())])
            .await
        {
            // PVE answers the VMID asked for: anything else is no answer to trust (a free VMID
            // lets a guest be made, or a record be forgotten).
            Ok(v) => match lenient_vmid("/cluster/nextid", v)? {
                answered if answered == vmid => Ok(true),
                answered => Err(Error::Decode {
                    method: "GET".into(),
                    path: "/cluster/nextid".into(),
                    message: format!("asked whether VMID {vmid} is free, PVE answered {answered}"),
                }),
            },
            Err(Error::Api {
                status: 400,
                errors,
                message,
                ..
            }) if errors
                .values()
                .chain([&message])
                .any(|m| texts::meaning(m) == Some(Meaning::AlreadyExists)) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// `GET /nodes/{node}/storage`: at once; optionally only those with a content type.
    pub async fn node_storages(
        &self,
        node: &str,
        content: Option<&str>,
    ) -> Result<Vec<NodeStorage>, Error> {
        let path = format!("/nodes/{}/storage", seg(node)?);
        let query: Vec<(&str, String)> = content
            .map(|c| ("content", c.to_string()))
            .into_iter()
            .collect();
        self.get(&path, &query).await
    }

    /// `GET /nodes/{node}/storage/{storage}/content`: at once; the volumes of a storage.
    pub async fn storage_content(
        &self,
        node: &str,
        storage: &str,
        content: Option<&str>,
    ) -> Result<Vec<StorageVolume>, Error> {
        let path = format!("/nodes/{}/storage/{}/content", seg(node)?, seg(storage)?);
        let query: Vec<(&str, String)> = content
            .map(|c| ("content", c.to_string()))
            .into_iter()
            .collect();
        self.get(&path, &query).await
    }

    /// `POST /nodes/{node}/storage/{storage}/upload` with `content=iso`: an `imgcopy` task
    /// that moves the uploaded file into place. Multipart; the file is named `file_name` (PVE
    /// normalises names to `[A-Za-z0-9_.-]`; proxsync's seed names already are). With
    /// `checksum-algorithm=sha256`, PVE verifies the file before keeping it. Needs
    /// `Datastore.AllocateTemplate` on `/storage/{storage}`.
    pub(crate) async fn upload_iso(
        &self,
        node: &str,
        storage: &str,
        file_name: &str,
        bytes: &[u8],
        sha256: &str,
    ) -> Result<Upid, Error> {
        check_part("file name", file_name)?;
        if file_name.contains(['/', '\\', '"']) {
            return Err(Error::Setup(format!(
                "{file_name:?} is not a plain file name"
            )));
        }
        let path = format!("/nodes/{}/storage/{}/upload", seg(node)?, seg(storage)?);
        let fields = [
            ("content", "iso".to_string()),
            ("checksum-algorithm", "sha256".to_string()),
            ("checksum", sha256.to_string()),
        ];
        let upid: String = self
            .post_multipart(&path, &fields, "filename", file_name, bytes)
            .await?;
        self.task_started("POST", &path, upid)
    }

    /// `POST /nodes/{node}/storage/{storage}/download-url`: a `download` task whose id is the
    /// file name (pve-storage `API2/Storage/Status.pm` `download_url`: `fork_worker('download',
    /// encode_text($filename), ...)`). PVE downloads the URL itself and keeps the file only when
    /// its checksum matches; a file already there with that checksum ends the task at once
    /// ("OK, got correct file already", pve-common `download_file_from_url`). File-based
    /// storages only. Needs `Datastore.AllocateTemplate` on the storage and `Sys.Audit` with
    /// `Sys.Modify` on `/` or `Sys.AccessNetwork` on the node.
    pub async fn download_url(
        &self,
        node: &str,
        storage: &str,
        download: &Download,
    ) -> Result<Upid, Error> {
        check_part("file name", &download.filename)?;
        if download.filename.contains(['/', '\\', '"']) {
            return Err(Error::Setup(format!(
                "{:?} is not a plain file name",
                download.filename
            )));
        }
        if !(download.url.starts_with("https://") || download.url.starts_with("http://"))
            || download
                .url
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(Error::Setup(format!(
                "{:?} is not an http(s) URL",
                download.url
            )));
        }
        let path = format!(
            "/nodes/{}/storage/{}/download-url",
            seg(node)?,
            seg(storage)?
        );
        let form = [
            ("url", download.url.clone()),
            ("content", download.content.clone()),
            ("filename", download.filename.clone()),
            ("checksum-algorithm", download.checksum_algorithm.clone()),
            ("checksum", download.checksum.clone()),
        ];
        let upid: String = self.post(&path, &form).await?;
        self.task_started("POST", &path, upid)
    }

    /// `POST /nodes/{node}/storage/{storage}/oci-registry-pull` (PVE 9.1): an `ociregistrypull`
    /// task whose id is the file name (pve-storage `API2/Storage/Status.pm` `oci_registry_pull`:
    /// `skopeo copy docker://REFERENCE oci-archive:PATH`, the file `filename` normalised with
    /// `.tar` added). Refused at once (500) on a storage that is not file based or holds no
    /// `vztmpl` content, without `skopeo`, and over an existing file (`refusing to override
    /// existing file`). Needs `Datastore.AllocateTemplate` on the storage and
    /// `Sys.AccessNetwork` on the node.
    pub async fn oci_registry_pull(
        &self,
        node: &str,
        storage: &str,
        reference: &str,
        filename: &str,
    ) -> Result<Upid, Error> {
        check_part("OCI reference", reference)?;
        check_part("file name", filename)?;
        if filename.contains(['/', '\\', '"']) {
            return Err(Error::Setup(format!(
                "{filename:?} is not a plain file name"
            )));
        }
        if reference
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(Error::Setup(format!(
                "{reference:?} is not an OCI reference"
            )));
        }
        let path = format!(
            "/nodes/{}/storage/{}/oci-registry-pull",
            seg(node)?,
            seg(storage)?
        );
        let form = [
            ("reference", reference.to_string()),
            ("filename", filename.to_string()),
        ];
        let upid: String = self.post(&path, &form).await?;
        self.task_started("POST", &path, upid)
    }

    /// `DELETE /nodes/{node}/storage/{storage}/content/{volume}`: an `imgdel` task (`Some`), or
    /// done at once on releases that answer without one (`None`). Needs `Datastore.Allocate`.
    /// PVE does not check whether a VM still uses an ISO: the gate's permit says it does not
    /// (`gate::volume::seed_delete`); refused before sending without one for `volume`.
    pub async fn delete_volume(
        &self,
        node: &str,
        storage: &str,
        volume: &str,
        permit: &Permit,
    ) -> Result<Option<Upid>, Error> {
        crate::pve::permit::check_delete_volume(volume, permit).map_err(Error::NotPermitted)?;
        check_part("volume", volume)?;
        let path = format!(
            "/nodes/{}/storage/{}/content/{}",
            seg(node)?,
            seg(storage)?,
            percent_encode(volume)
        );
        let v: Option<String> = self.delete(&path, &[]).await?;
        v.filter(|s| !s.is_empty())
            .map(|s| self.task_started("DELETE", &path, s))
            .transpose()
    }

    /// `GET /nodes/{node}/network?type=any_bridge`: at once; the node's bridges.
    pub async fn node_bridges(&self, node: &str) -> Result<Vec<NetworkInterface>, Error> {
        let path = format!("/nodes/{}/network", seg(node)?);
        self.get(&path, &[("type", "any_bridge".into())]).await
    }

    /// `GET /nodes/{node}/qemu/{vmid}/config`: at once; includes `digest` and `lock`.
    /// Fails with NotFound (`Configuration file ... does not exist`) for a VM that is gone.
    pub async fn vm_config(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
    ) -> Result<VmConfig, Error> {
        let path = format!("/nodes/{}/{kind}/{vmid}/config", seg(node)?);
        self.get(&path, &[]).await
    }

    /// `GET /nodes/{node}/qemu/{vmid}/pending`: at once; each config key with its current
    /// value and the value that waits for a reboot (`pending`), or a pending `delete`.
    pub async fn vm_pending(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
    ) -> Result<Vec<PendingEntry>, Error> {
        let path = format!("/nodes/{}/{kind}/{vmid}/pending", seg(node)?);
        self.get(&path, &[]).await
    }

    /// `PUT /nodes/{node}/qemu/{vmid}/config`: synchronous; with `digest`, refused when the
    /// config changed since it was read (Conflict). Locked VMs fail with LockError. A guarded
    /// edit without its permit is refused before sending ([`VmParams::permitted`]).
    pub async fn set_config(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        params: &VmParams,
        digest: Option<&str>,
    ) -> Result<(), Error> {
        params.permitted(vmid)?;
        let path = format!("/nodes/{}/{kind}/{vmid}/config", seg(node)?);
        let mut form = params.form();
        if let Some(d) = digest {
            form.push(("digest", d.to_string()));
        }
        let _: serde_json::Value = self.put(&path, &form).await?;
        Ok(())
    }

    /// `POST /nodes/{node}/qemu/{vmid}/config`: asynchronous; a task when PVE needs one (for
    /// example a disk import), else done at once (`None`). A guarded edit without its permit is
    /// refused before sending ([`VmParams::permitted`]).
    pub async fn set_config_async(
        &self,
        node: &str,
        vmid: u32,
        params: &VmParams,
        digest: Option<&str>,
    ) -> Result<Option<Upid>, Error> {
        params.permitted(vmid)?;
        let path = format!("/nodes/{}/qemu/{vmid}/config", seg(node)?);
        let mut form = params.form();
        if let Some(d) = digest {
            form.push(("digest", d.to_string()));
        }
        let v: Option<String> = self.post(&path, &form).await?;
        v.filter(|s| !s.is_empty())
            .map(|s| self.task_started("POST", &path, s))
            .transpose()
    }

    /// `POST /nodes/{node}/qemu`: a `qmcreate` task. `vmid` must be set in `params` by the
    /// caller's allocator; `already exists` (AlreadyExists) means take another id.
    pub async fn create_vm(&self, node: &str, vmid: u32, params: &VmParams) -> Result<Upid, Error> {
        self.create_guest(node, GuestKind::Qemu, vmid, params).await
    }

    /// `POST /nodes/{node}/qemu/{template}/clone`: a `qmclone` task. A clone cannot set tags;
    /// set them with a config change after the task.
    pub async fn clone_vm(
        &self,
        node: &str,
        template: u32,
        req: &CloneRequest,
    ) -> Result<Upid, Error> {
        self.clone_guest(node, GuestKind::Qemu, template, req).await
    }

    /// `POST /nodes/{node}/qemu/{vmid}/template`: a `qmtemplate` task that converts the VM to
    /// a template (`template: 1`, its disks renamed to base volumes: qemu-server
    /// `PVE/API2/Qemu.pm` `template`, `PVE/QemuServer.pm` `template_create`). Every disk; PVE's
    /// optional `disk` is not sent. Needs `VM.Allocate` on `/vms/{vmid}`. PVE refuses before
    /// the task (and again in it, under the config's lock) a locked VM, one with snapshots, a
    /// template (`you can't convert a template to a template`) and a running VM.
    pub async fn template_vm(&self, node: &str, vmid: u32) -> Result<Upid, Error> {
        let path = format!("/nodes/{}/qemu/{vmid}/template", seg(node)?);
        let upid: String = self.post(&path, &[]).await?;
        self.task_started("POST", &path, upid)
    }

    /// `POST /nodes/{node}/lxc`: a `vzcreate` task (`lock: create` on the new config until
    /// pve-container has detected the template's OS: `API2/LXC.pm` `create_vm`). `vmid` is the
    /// caller's allocation; `already exists` (AlreadyExists) means take another id.
    pub(crate) async fn create_ct(
        &self,
        node: &str,
        vmid: u32,
        params: &VmParams,
    ) -> Result<Upid, Error> {
        self.create_guest(node, GuestKind::Lxc, vmid, params).await
    }

    /// `POST /nodes/{node}/lxc/{template}/clone`: a `vzclone` task. The container's name is
    /// its `hostname`; a clone takes no tags (set with a config change after the task).
    pub async fn clone_ct(
        &self,
        node: &str,
        template: u32,
        req: &CloneRequest,
    ) -> Result<Upid, Error> {
        self.clone_guest(node, GuestKind::Lxc, template, req).await
    }

    async fn create_guest(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        params: &VmParams,
    ) -> Result<Upid, Error> {
        let path = format!("/nodes/{}/{kind}", seg(node)?);
        let mut form = params.form();
        form.push(("vmid", vmid.to_string()));
        let upid: String = self.post(&path, &form).await?;
        self.task_started("POST", &path, upid)
    }

    async fn clone_guest(
        &self,
        node: &str,
        kind: GuestKind,
        template: u32,
        req: &CloneRequest,
    ) -> Result<Upid, Error> {
        let path = format!("/nodes/{}/{kind}/{template}/clone", seg(node)?);
        // A container's name is its hostname.
        let name_key = match kind {
            GuestKind::Qemu => "name",
            GuestKind::Lxc => "hostname",
        };
        let mut form = vec![
            ("newid", req.newid.to_string()),
            (name_key, req.name.clone()),
            ("description", req.description.clone()),
            ("full", flag(req.full)),
        ];
        if let Some(s) = &req.storage {
            form.push(("storage", seg(s)?.to_string()));
        }
        if let Some(t) = &req.target {
            form.push(("target", seg(t)?.to_string()));
        }
        if let Some(p) = &req.pool {
            // A form value, not a path: nested pools (`prod/web`) carry '/'.
            check_part("pool", p)?;
            form.push(("pool", p.clone()));
        }
        let upid: String = self.post(&path, &form).await?;
        self.task_started("POST", &path, upid)
    }

    /// `PUT /nodes/{node}/qemu/{vmid}/resize`: a `resize` task on PVE 8+ (`Some`; qemu-server
    /// `PVE/API2/Qemu.pm` `resize_vm`: `fork_worker('resize', ...)`), done at once on PVE 7
    /// (`None`). `size` is absolute (`100G`) or relative (`+10G`); PVE refuses
    /// to shrink.
    pub async fn resize_disk(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        disk: &str,
        size: &str,
        digest: Option<&str>,
    ) -> Result<Option<Upid>, Error> {
        let path = format!("/nodes/{}/{kind}/{vmid}/resize", seg(node)?);
        let mut form = vec![("disk", disk.to_string()), ("size", size.to_string())];
        if let Some(d) = digest {
            form.push(("digest", d.to_string()));
        }
        let v: Option<String> = self.put(&path, &form).await?;
        v.filter(|s| !s.is_empty())
            .map(|s| self.task_started("PUT", &path, s))
            .transpose()
    }

    /// `GET .../status/current`: at once; whether the VM runs now (`status`: `running` or
    /// `stopped`).
    pub(crate) async fn vm_running(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
    ) -> Result<bool, Error> {
        #[derive(serde::Deserialize)]
        struct Current {
            status: String,
        }
        let path = format!("/nodes/{}/{kind}/{vmid}/status/current", seg(node)?);
        let c: Current = self.get(&path, &[]).await?;
        Ok(c.status == "running")
    }

    /// `POST .../status/start`: a `qmstart` task.
    pub async fn start_vm(&self, node: &str, kind: GuestKind, vmid: u32) -> Result<Upid, Error> {
        self.power(node, kind, vmid, "start", &[]).await
    }

    /// `POST .../status/shutdown`: a `qmshutdown` task (ACPI); `timeout` seconds, and with
    /// `force_stop` PVE stops the VM when the guest does not power off in time.
    pub async fn shutdown_vm(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        timeout_secs: u32,
        force_stop: bool,
    ) -> Result<Upid, Error> {
        self.power(
            node,
            kind,
            vmid,
            "shutdown",
            &[
                ("timeout", timeout_secs.to_string()),
                ("forceStop", flag(force_stop)),
            ],
        )
        .await
    }

    /// `POST .../status/reboot`: a `qmreboot` task: a clean shutdown within `timeout` seconds
    /// (never a hard stop: the task fails when the guest does not power off), after which PVE
    /// starts the VM again, applying what was pending (qemu-server `vm_reboot`). It is no HA
    /// request: PVE does not hand it to the HA manager.
    pub(crate) async fn reboot_vm(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        timeout_secs: u32,
    ) -> Result<Upid, Error> {
        self.power(
            node,
            kind,
            vmid,
            "reboot",
            &[("timeout", timeout_secs.to_string())],
        )
        .await
    }

    /// `POST .../status/stop`: a `qmstop` task (hard stop). `overrule_shutdown` aborts a
    /// running `qmshutdown` task of the VM instead of queueing behind its config lock (PVE 8.1+,
    /// in the 8.4 and 9.1 schemas); PVE refuses it (400) for an HA-managed VM, whose stop is an
    /// `hastop` request to the HA manager.
    pub async fn stop_vm(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        overrule_shutdown: bool,
    ) -> Result<Upid, Error> {
        let form: Vec<(&str, String)> = if overrule_shutdown {
            vec![("overrule-shutdown", flag(true))]
        } else {
            Vec::new()
        };
        self.power(node, kind, vmid, "stop", &form).await
    }

    async fn power(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        action: &str,
        form: &[(&str, String)],
    ) -> Result<Upid, Error> {
        let path = format!("/nodes/{}/{kind}/{vmid}/status/{action}", seg(node)?);
        let upid: String = self.post(&path, form).await?;
        self.task_started("POST", &path, upid)
    }

    /// `DELETE /nodes/{node}/qemu/{vmid}`: a `qmdestroy` task. `purge` removes the VMID from
    /// backup jobs, replication and HA; `destroy_unreferenced` also removes disks not in the
    /// config. PVE refuses a running VM and a protected one. Only with the gate's permit to
    /// delete VM `vmid` (`gate::permit::remove`, `delete_orphan`); refused before sending
    /// otherwise.
    pub async fn delete_vm(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        purge: bool,
        destroy_unreferenced: bool,
        permit: &Permit,
    ) -> Result<Upid, Error> {
        crate::pve::permit::check_delete_vm(vmid, permit).map_err(Error::NotPermitted)?;
        let path = format!("/nodes/{}/{kind}/{vmid}", seg(node)?);
        let query = [
            ("purge", flag(purge)),
            ("destroy-unreferenced-disks", flag(destroy_unreferenced)),
        ];
        let upid: String = self.delete(&path, &query).await?;
        self.task_started("DELETE", &path, upid)
    }

    /// `GET /nodes/{node}/tasks?vmid=N&source=active`: at once; the running tasks of a VM
    /// (who holds its lock). A clone's task is not among them: it names the source VM.
    pub async fn active_vm_tasks(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<Vec<TaskListEntry>, Error> {
        self.active_tasks_where(node, Some(vmid)).await
    }

    /// `GET /nodes/{node}/tasks?source=active`: at once; every running task of the node.
    pub(crate) async fn active_tasks(&self, node: &str) -> Result<Vec<TaskListEntry>, Error> {
        self.active_tasks_where(node, None).await
    }

    async fn active_tasks_where(
        &self,
        node: &str,
        vmid: Option<u32>,
    ) -> Result<Vec<TaskListEntry>, Error> {
        let path = format!("/nodes/{}/tasks", seg(node)?);
        let mut query = vec![("source", "active".to_string()), ("limit", "1000".into())];
        if let Some(vmid) = vmid {
            query.push(("vmid", vmid.to_string()));
        }
        let tasks: Vec<TaskListEntry> = self.get(&path, &query).await?;
        // PVE marks running tasks `RUNNING`; older releases ignore `source`, and a task that
        // just ended still carries its exit status there.
        Ok(tasks
            .into_iter()
            .filter(TaskListEntry::is_running)
            .collect())
    }

    /// `GET .../agent/network-get-interfaces`: at once; fails (500, `QEMU guest agent is not
    /// running`) when there is no agent.
    pub async fn agent_interfaces(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<Vec<AgentInterface>, Error> {
        self.guest_interfaces(node, crate::guest::GuestKind::Qemu, vmid)
            .await
    }

    /// `GET .../{qemu,lxc}/{vmid}/snapshot`: at once; the guest's snapshots, without the entry
    /// `current` (the guest's own state). Needs `VM.Audit`.
    pub async fn snapshots(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
    ) -> Result<Vec<Snapshot>, Error> {
        let path = format!("/nodes/{}/{kind}/{vmid}/snapshot", seg(node)?);
        let listed: Vec<Snapshot> = self.get(&path, &[]).await?;
        Ok(listed.into_iter().filter(|s| s.name != "current").collect())
    }

    /// `GET .../snapshot/{name}/config`: at once; the config snapshot `name` holds. Needs
    /// `VM.Audit` (or `VM.Snapshot`, `VM.Snapshot.Rollback`).
    pub async fn snapshot_config(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        name: &str,
    ) -> Result<VmConfig, Error> {
        let path = format!(
            "/nodes/{}/{kind}/{vmid}/snapshot/{}/config",
            seg(node)?,
            snapshot_name(name)?
        );
        self.get(&path, &[]).await
    }

    /// `POST .../{qemu,lxc}/{vmid}/snapshot`: a `qmsnapshot`/`vzsnapshot` task, taken without
    /// the RAM state (`vmstate` off: a rollback boots the guest afresh). Needs `VM.Snapshot`.
    /// PVE refuses it on a storage that cannot snapshot (`snapshot feature is not available`,
    /// `Meaning::SnapshotUnsupported`) and a name taken (`Meaning::SnapshotExists`).
    pub async fn snapshot(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        name: &str,
        description: &str,
    ) -> Result<Upid, Error> {
        let path = format!("/nodes/{}/{kind}/{vmid}/snapshot", seg(node)?);
        let form = [
            ("snapname", snapshot_name(name)?.to_string()),
            ("description", description.to_string()),
        ];
        let upid: String = self.post(&path, &form).await?;
        self.task_started("POST", &path, upid)
    }

    /// `POST .../snapshot/{name}/rollback` with `start=1`: a `qmrollback`/`vzrollback` task
    /// that stops the guest, puts back the snapshot's disks and config (PVE keeps the
    /// description, so the marker stays) and starts it. Needs `VM.Snapshot` and
    /// `VM.Snapshot.Rollback`; refused before sending without the gate's permit for it.
    pub async fn rollback(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        name: &str,
        permit: &Permit,
    ) -> Result<Upid, Error> {
        crate::pve::permit::check_rollback(vmid, name, permit).map_err(Error::NotPermitted)?;
        let path = format!(
            "/nodes/{}/{kind}/{vmid}/snapshot/{}/rollback",
            seg(node)?,
            snapshot_name(name)?
        );
        let upid: String = self.post(&path, &[("start", flag(true))]).await?;
        self.task_started("POST", &path, upid)
    }

    /// `DELETE .../snapshot/{name}`: a `qmdelsnapshot`/`vzdelsnapshot` task. Needs
    /// `VM.Snapshot`; refused before sending without the gate's permit for it.
    pub async fn delete_snapshot(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        name: &str,
        permit: &Permit,
    ) -> Result<Upid, Error> {
        crate::pve::permit::check_delete_snapshot(vmid, name, permit)
            .map_err(Error::NotPermitted)?;
        let path = format!(
            "/nodes/{}/{kind}/{vmid}/snapshot/{}",
            seg(node)?,
            snapshot_name(name)?
        );
        let upid: String = self.delete(&path, &[]).await?;
        self.task_started("DELETE", &path, upid)
    }

    /// `POST .../agent/ping`: at once; `Ok` when the VM's guest agent answers. Fails (500) with
    /// `No QEMU guest agent configured`, `VM N is not running`, `QEMU guest agent is not
    /// running` (PVE's own 3 s ping went unanswered) or `... qmp command 'guest-ping' failed -
    /// got timeout` (`pve::texts`: `Meaning::NoAgent`, `AgentDown`, `NotRunning`).
    pub async fn agent_ping(&self, node: &str, vmid: u32) -> Result<(), Error> {
        let path = format!("/nodes/{}/qemu/{vmid}/agent/ping", seg(node)?);
        let _: serde_json::Value = self.post(&path, &[]).await?;
        Ok(())
    }

    /// A guest's interfaces and addresses: a VM's from its guest agent
    /// (`.../agent/network-get-interfaces`, `{result: [...]}`), a container's from
    /// `.../lxc/{vmid}/interfaces` (the same `name` and `ip-addresses` per interface, a list;
    /// `null` for a stopped container).
    pub(crate) async fn guest_interfaces(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
    ) -> Result<Vec<AgentInterface>, Error> {
        if kind == GuestKind::Lxc {
            let path = format!("/nodes/{}/lxc/{vmid}/interfaces", seg(node)?);
            let listed: Option<Vec<AgentInterface>> = self.get(&path, &[]).await?;
            return Ok(listed.unwrap_or_default());
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            #[serde(default)]
            result: Vec<AgentInterface>,
        }
        let path = format!(
            "/nodes/{}/qemu/{vmid}/agent/network-get-interfaces",
            seg(node)?
        );
        let a: Answer = self.get(&path, &[]).await?;
        Ok(a.result)
    }

    /// `GET /cluster/options`: at once; the datacenter options (all of them only with Sys.Audit
    /// on `/`: pve-manager `PVE/API2/Cluster.pm` `get_options`): tags, and the `next-id` range.
    pub async fn cluster_options(&self) -> Result<DatacenterOptions, Error> {
        self.get("/cluster/options", &[]).await
    }

    /// `GET /access/permissions`: at once; the caller's (the token's) effective privileges.
    pub async fn permissions(&self, path: Option<&str>) -> Result<Permissions, Error> {
        let query: Vec<(&str, String)> =
            path.map(|p| ("path", p.to_string())).into_iter().collect();
        self.get("/access/permissions", &query).await
    }

    /// `GET /nodes/{node}/tasks/{upid}/status`: at once.
    pub(crate) async fn task_status(&self, upid: &Upid) -> Result<TaskStatus, Error> {
        let path = format!(
            "/nodes/{}/tasks/{}/status",
            seg(&upid.node)?,
            percent_encode(upid.as_str())
        );
        self.get(&path, &[]).await
    }

    /// The last `lines` lines of a task's log (where its `TASK ERROR:` line is). PVE answers a
    /// page of lines and the log's `total` (pve-manager `PVE/API2/Tasks.pm` `read_task_log`:
    /// `set_result_attrib('total', $count)`): a log longer than one page is read again from
    /// `total - lines`. Without a `total` (an old fake), up to 5000 lines from the start.
    pub(crate) async fn task_log_tail(
        &self,
        upid: &Upid,
        lines: usize,
    ) -> Result<Vec<String>, Error> {
        let path = format!(
            "/nodes/{}/tasks/{}/log",
            seg(&upid.node)?,
            percent_encode(upid.as_str())
        );
        let page = |start: u64, limit: usize| {
            let path = path.clone();
            async move {
                self.get_with_total::<Vec<TaskLogLine>>(
                    &path,
                    &[("start", start.to_string()), ("limit", limit.to_string())],
                )
                .await
            }
        };
        let lines = lines.max(1);
        let (mut log, total) = page(0, lines).await?;
        match total {
            Some(total) if total > lines as u64 => {
                log = page(total - lines as u64, lines).await?.0;
            }
            Some(_) => {}
            None if log.len() >= lines => log = page(0, 5000).await?.0,
            None => {}
        }
        let skip = log.len().saturating_sub(lines);
        Ok(log.into_iter().skip(skip).map(|l| l.t).collect())
    }

    /// Polls a task until it stops or `timeout` passes. `OK` and `WARNINGS: n` succeed; any
    /// other exit status is [`Error::TaskFailed`] with the log's last lines. Running out of
    /// time is [`TaskOutcome::StillRunning`], never a failure. A failed poll (network) is an
    /// error of the poll, not of the task. The site's waits are paced and share reads: see
    /// [`super::tasks`].
    pub async fn wait_task(&self, upid: &Upid, timeout: Duration) -> Result<TaskOutcome, Error> {
        self.tasks.wait(self, upid, timeout).await
    }
}

/// The VMIDs of pool `poolid`'s guests in a `GET /pools?poolid=P` answer: its VMs (`qemu`) and
/// containers (`lxc`); its storages have none.
fn guests_of_pool(pools: Vec<PoolEntry>, poolid: &str) -> Vec<u32> {
    pools
        .into_iter()
        .filter(|p| p.poolid == poolid)
        .flat_map(|p| p.members)
        .filter(|m| matches!(m.kind.as_deref(), Some("qemu" | "lxc")))
        .filter_map(|m| m.vmid)
        .collect()
}

fn lenient_vmid(path: &str, v: serde_json::Value) -> Result<u32, Error> {
    let n = match &v {
        serde_json::Value::String(s) => s.trim().parse::<u32>().ok(),
        serde_json::Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        _ => None,
    };
    n.ok_or_else(|| Error::Decode {
        method: "GET".into(),
        path: path.into(),
        message: format!("expected a VMID, got {v}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool's containers are its guests as much as its VMs (found in review: only `qemu`
    /// members were kept, so a container already in its spec's pool was moved into it again at
    /// every converge).
    #[test]
    fn a_pools_guests_are_its_vms_and_its_containers() {
        // As pve-manager's Pool.pm `index` answers `GET /pools?poolid=web`.
        let pools: Vec<PoolEntry> = serde_json::from_str(
            r#"[{"poolid": "web", "members": [
                {"id": "qemu/100", "type": "qemu", "vmid": 100, "node": "pve1"},
                {"id": "lxc/101", "type": "lxc", "vmid": 101, "node": "pve1"},
                {"id": "storage/pve1/local", "type": "storage", "node": "pve1", "storage": "local"}
            ]}]"#,
        )
        .unwrap();
        assert_eq!(guests_of_pool(pools.clone(), "web"), vec![100, 101]);
        assert!(guests_of_pool(pools, "db").is_empty());
    }

    #[test]
    fn property_strings_cannot_be_smuggled_into() {
        assert!(VmParams::new().nic("net0", "vmbr0").is_ok());
        for bad in [
            "vmbr0,firewall=1",
            "vmbr0=x",
            "vmbr0;",
            "vmbr0\nx",
            "vm br0",
            "",
        ] {
            assert!(VmParams::new().nic("net0", bad).is_err(), "{bad:?}");
        }
        assert!(
            VmParams::new()
                .import_disk("scsi0", "local-lvm", "local:import/x.qcow2,size=1")
                .is_err()
        );
        let p = VmParams::new()
            .import_disk("scsi0", "local-lvm", "local:import/debian.qcow2")
            .unwrap();
        assert_eq!(
            p.get("scsi0"),
            Some("local-lvm:0,import-from=local:import/debian.qcow2")
        );
        let p = VmParams::new()
            .cdrom("ide2", "local:iso/debian.iso")
            .unwrap();
        assert_eq!(p.get("ide2"), Some("local:iso/debian.iso,media=cdrom"));
    }

    #[test]
    fn hardware_values_are_checked_again() {
        for bad in ["host,flags=+aes", "q35=x", "a;b", "x y", ""] {
            assert!(VmParams::new().checked("scsihw", bad).is_err(), "{bad:?}");
            assert!(
                VmParams::new()
                    .default_key("cpu", "cputype", None, bad)
                    .is_err(),
                "{bad:?}"
            );
            assert!(VmParams::new().efidisk(bad, false).is_err(), "{bad:?}");
            assert!(
                VmParams::new().tpmstate("local-lvm", bad).is_err(),
                "{bad:?}"
            );
        }
        let trunks = |t: &str| {
            VmParams::new().nic_with("net0", "virtio", None, &[("trunks".into(), t.into())])
        };
        assert!(trunks("10;20-30").is_ok());
        for bad in ["10,tag=5", "10;x", ""] {
            assert!(trunks(bad).is_err(), "{bad:?}");
        }
        assert!(
            VmParams::new()
                .nic_with("net0", "virtio", Some("BC:24:11:00:00:01,x=1"), &[])
                .is_err()
        );
        let p = VmParams::new()
            .default_key("cpu", "cputype", Some("kvm64,flags=+aes"), "host")
            .unwrap()
            .efidisk("local-lvm", true)
            .unwrap()
            .tpmstate("local-lvm", "v2.0")
            .unwrap();
        assert_eq!(p.get("cpu"), Some("host,flags=+aes"));
        assert_eq!(
            p.get("efidisk0"),
            Some("local-lvm:1,efitype=4m,pre-enrolled-keys=1")
        );
        assert_eq!(p.get("tpmstate0"), Some("local-lvm:1,version=v2.0"));
    }

    #[test]
    fn sshkeys_are_url_encoded_as_pve_wants() {
        let p = VmParams::new().sshkeys(&["ssh-ed25519 AAAAC3Nz+a/b= me@host", "ssh-rsa AAAB x"]);
        assert_eq!(
            p.get("sshkeys"),
            Some("ssh-ed25519%20AAAAC3Nz%2Ba%2Fb%3D%20me%40host%0Assh-rsa%20AAAB%20x")
        );
    }

    #[test]
    fn cloud_init_options_are_checked() {
        let p = VmParams::new()
            .ipconfig(
                "ipconfig0",
                Some("10.0.0.5/24"),
                Some("10.0.0.1"),
                Some("auto"),
                None,
            )
            .unwrap();
        assert_eq!(
            p.get("ipconfig0"),
            Some("ip=10.0.0.5/24,gw=10.0.0.1,ip6=auto")
        );
        assert!(
            VmParams::new()
                .ipconfig("ipconfig0", Some("dhcp,gw=1.2.3.4"), None, None, None)
                .is_err()
        );
        let p = VmParams::new().nameservers(&["10.0.0.53", "::1"]).unwrap();
        assert_eq!(p.get("nameserver"), Some("10.0.0.53 ::1"));
        assert!(VmParams::new().nameservers(&["1.1.1.1 8.8.8.8"]).is_err());
    }

    #[test]
    fn tags_are_joined_with_semicolons() {
        let p = VmParams::new().tags(&["proxsync.main", "web"]).unwrap();
        assert_eq!(p.get("tags"), Some("proxsync.main;web"));
        assert!(VmParams::new().tags(&["a;b"]).is_err());
    }

    #[test]
    fn nextid_arrives_as_a_string() {
        assert_eq!(
            lenient_vmid("/cluster/nextid", serde_json::json!("100")).unwrap(),
            100
        );
        assert_eq!(
            lenient_vmid("/cluster/nextid", serde_json::json!(101)).unwrap(),
            101
        );
        assert!(lenient_vmid("/cluster/nextid", serde_json::json!("x")).is_err());
    }

    /// The key the test markers are signed with.
    fn key() -> crate::ownership::MarkerKey {
        crate::ownership::MarkerKey::from_bytes([7; 32])
    }

    /// The permits the gate gives for VM 100 of spec `web` on site lab (the gate's own tests
    /// check that it gives them; these check what a write built from them may carry).
    #[test]
    fn a_guarded_edit_is_built_only_from_its_permit_and_carries_it() {
        let own_marker = Marker::signed(&key(), "main", "web", "u1", 100);
        let permit = |act| Permit::new("lab", 100, act);
        let slots = ["scsi1".to_string(), "scsi2".to_string()];
        let detach = permit(Act::Detach {
            slots: slots.to_vec(),
        });
        let sign = permit(Act::Sign {
            marker: crate::pve::permit::MarkerId::of(&own_marker),
        });
        let release = permit(Act::Release);
        // The delete list grows, whoever adds to it.
        let p = VmParams::new()
            .delete_keys(&["vga"])
            .detach(&detach)
            .unwrap()
            .merge(VmParams::new().delete_keys(&["net2"]));
        assert_eq!(p.get("delete"), Some("vga,scsi1,scsi2,net2"));
        assert_eq!(p.permitted(100), Ok(()));
        assert!(p.permitted(101).is_err(), "the permit is VM 100's");
        // A write carries the permits of what it merges.
        let merged = VmParams::new().set("cores", 2).merge(p);
        assert_eq!(merged.permitted(100), Ok(()));
        // The builders refuse a permit of another act, or a marker it does not allow.
        assert!(VmParams::new().detach(&sign).is_err());
        assert!(VmParams::new().destroy_drive(&detach).is_err());
        assert!(VmParams::new().attach_seed(&detach).is_err());
        assert!(VmParams::new().drop_ownership(&sign, &["web"]).is_err());
        let key = key();
        let other = Marker::signed(&key, "main", "db", "u1", 100).description();
        assert!(VmParams::new().marker(&sign, other).is_err());
        assert!(VmParams::new().marker(&release, "x".into()).is_err());
        let own = Marker::signed(&key, "main", "web", "u1", 100).description();
        assert!(VmParams::new().drop_marker(&release, own.clone()).is_err());
        let p = VmParams::new().marker(&sign, own).unwrap();
        assert_eq!(p.permitted(100), Ok(()));
        let p = VmParams::new()
            .drop_marker(&release, "notes".into())
            .unwrap()
            .drop_ownership(&release, &Vec::<String>::new())
            .unwrap();
        assert_eq!(
            (p.get("description"), p.get("delete")),
            (Some("notes"), Some("tags"))
        );
        assert_eq!(p.permitted(100), Ok(()));
    }

    #[test]
    fn path_segments_are_checked() {
        assert!(seg("pve1").is_ok());
        for bad in ["", "pve1/../x", "a?b", "a b", "a%2f"] {
            assert!(seg(bad).is_err(), "{bad:?}");
        }
    }
}
