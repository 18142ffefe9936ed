//! Response shapes of the calls proxsync makes, read leniently the way PVE writes them:
//! integers that arrive as strings (`/cluster/nextid` gives `"100"`), booleans as `0`/`1`,
//! and fields that are simply absent (a VM created seconds ago shows in `/cluster/resources`
//! with no name, no tags and status `unknown`).

use compact_str::CompactString;
use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// `GET /version`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Version {
    /// `9.1.2`, `8.4.1`, ...
    pub version: String,
    /// The point release, `x.y` (`9.1`).
    #[serde(default)]
    pub release: Option<String>,
    /// The short git revision pve-manager was built from.
    #[serde(default)]
    pub repoid: Option<String>,
}

impl Version {
    /// (major, minor, patch); missing parts are 0, garbage is 0.
    pub fn triple(&self) -> (u32, u32, u32) {
        let mut parts = self
            .version
            .split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse().unwrap_or(0));
        (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        )
    }

    /// What this release can do that proxsync relies on.
    pub fn features(&self) -> Features {
        let v = self.triple();
        Features {
            // The `import-from` disk option arrived in qemu-server with PVE 7.2.
            import_from: v >= IMPORT_FROM_SINCE,
            // `import-from` takes volumes of the `import` content type from qemu-server 8.2.7,
            // and directory storages hold `import` content from pve-storage 8.2.8 ("directory
            // backed storage: implement import content type"): both shipped with PVE 8.3.
            import_content: v >= IMPORT_CONTENT_SINCE,
            // Uploading qcow2/raw/vmdk into `import` content came with pve-storage 8.3.6
            // ("import: allow upload of guest images files into import storage"): PVE 8.4.
            import_upload: v >= IMPORT_UPLOAD_SINCE,
            // `PUT .../resize` answers with a task UPID since PVE 8.0 (null before).
            resize_is_task: v >= (8, 0, 0),
        }
    }
}

/// The first PVE release whose `import-from` takes `import` content (qemu-server 8.2.7,
/// pve-storage 8.2.8).
pub const IMPORT_CONTENT_SINCE: (u32, u32, u32) = (8, 3, 0);
/// The first PVE release that uploads qcow2/raw/vmdk files into `import` content
/// (pve-storage 8.3.6).
pub const IMPORT_UPLOAD_SINCE: (u32, u32, u32) = (8, 4, 0);
/// The first PVE release with the `import-from` disk option.
pub const IMPORT_FROM_SINCE: (u32, u32, u32) = (7, 2, 0);

/// `8.3` for `(8, 3, 0)`: a release as people name it.
pub fn release_name(v: (u32, u32, u32)) -> String {
    format!("{}.{}", v.0, v.1)
}

/// The file extensions PVE's `import` content takes (pve-storage `PVE/Storage.pm`
/// `$IMPORT_EXT_RE_1 = qr/\.(ova|ovf|qcow2|raw|vmdk)/`), case-sensitive: no `.img`.
pub(crate) const IMPORT_EXTENSIONS: [&str; 5] = ["ova", "ovf", "qcow2", "raw", "vmdk"];

/// Whether `volid` (`storage:import/FILE`, or `FILE/member` inside an OVA) names a file
/// PVE's `import` content takes; otherwise why not, saying what would be valid.
pub fn check_import_extension(volid: &str) -> Result<(), String> {
    let volname = volid.split_once(':').map_or(volid, |(_, v)| v);
    let file = volname.strip_prefix("import/").unwrap_or(volname);
    let outer = file.split('/').next().unwrap_or(file);
    let ext = outer.rsplit_once('.').map(|(_, e)| e);
    match ext {
        Some(e) if IMPORT_EXTENSIONS.contains(&e) => Ok(()),
        _ => Err(format!(
            "{volid}: Proxmox VE's import content takes only .{} files (case-sensitive; no .img: \
             a cloud .img is qcow2 inside, rename it to .qcow2)",
            IMPORT_EXTENSIONS.join(", .")
        )),
    }
}

/// Features implied by a PVE version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// The release has the `import-from` disk option (PVE 7.2 and later).
    pub import_from: bool,
    /// `import-from` takes volumes of `import` content (PVE 8.3 and later).
    pub import_content: bool,
    /// qcow2/raw/vmdk can be uploaded into `import` content.
    pub import_upload: bool,
    /// `PUT .../resize` answers with a task's UPID rather than at once (PVE 8.0 and later).
    pub resize_is_task: bool,
}

/// `GET /cluster/options`, the parts about tags. PVE answers `user-tag-access` as an object
/// (`{"user-allow": "list", "user-allow-list": [...]}`, parsed from datacenter.cfg); a property
/// string is read too.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct DatacenterOptions {
    /// `user-tag-access`: which tags users without Sys.Modify on `/` may set (see
    /// [`DatacenterOptions::user_allow`]).
    #[serde(default, rename = "user-tag-access")]
    pub user_tag_access: Option<serde_json::Value>,
    /// `registered-tags`: tags only users with Sys.Modify on `/` may set, a list or a
    /// `;`-separated string.
    #[serde(default, rename = "registered-tags")]
    pub registered_tags: Option<serde_json::Value>,
    /// The tags the caller may set now (PVE computes it for every caller).
    #[serde(default, rename = "allowed-tags")]
    pub allowed_tags: Option<Vec<String>>,
    /// The range `GET /cluster/nextid` searches, as parsed from datacenter.cfg (`{lower,
    /// upper}`); absent: PVE's defaults (see `execute::vmid`).
    #[serde(default, rename = "next-id")]
    pub next_id: Option<serde_json::Value>,
    /// Always in an answer that holds all of datacenter.cfg (pve-cluster 8.0.5 and later set
    /// its default when parsing): it tells that answer from the few options any user gets.
    #[serde(default)]
    pub mac_prefix: Option<serde_json::Value>,
}

/// A list PVE sends as an array or as a `;`/`,`/space separated string.
fn tag_list(v: &serde_json::Value) -> Vec<String> {
    match v {
        serde_json::Value::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        serde_json::Value::String(s) => s
            .split([';', ',', ' '])
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

impl DatacenterOptions {
    /// `user-allow` of `user-tag-access`: `none`, `list`, `existing` or `free` (PVE's default,
    /// pve-guest-common `PVE/GuestHelpers.pm` `get_allowed_tags`: `// 'free'`).
    pub fn user_allow(&self) -> String {
        match &self.user_tag_access {
            Some(serde_json::Value::Object(m)) => m
                .get("user-allow")
                .and_then(|v| v.as_str())
                .unwrap_or("free")
                .to_string(),
            Some(serde_json::Value::String(s)) => s
                .split(',')
                .find_map(|kv| kv.strip_prefix("user-allow="))
                .unwrap_or("free")
                .to_string(),
            _ => "free".to_string(),
        }
    }

    /// `user-allow-list` of `user-tag-access`.
    pub(crate) fn user_allow_list(&self) -> Vec<String> {
        match &self.user_tag_access {
            Some(serde_json::Value::Object(m)) => {
                m.get("user-allow-list").map(tag_list).unwrap_or_default()
            }
            Some(serde_json::Value::String(s)) => s
                .split(',')
                .find_map(|kv| kv.strip_prefix("user-allow-list="))
                .map(|l| tag_list(&serde_json::Value::String(l.to_string())))
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// `registered-tags`: only users with Sys.Modify on `/` may set them.
    pub fn registered_tags(&self) -> Vec<String> {
        self.registered_tags
            .as_ref()
            .map(tag_list)
            .unwrap_or_default()
    }

    /// Whether a caller without Sys.Modify on `/` may set `tag` (pve-guest-common
    /// `assert_tag_permissions`: `(!$allowed_tags->{$tag} && !$freeform) ||
    /// $privileged_tags->{$tag}` is refused). `existing` counts only the list: a tag that
    /// merely exists now may not later.
    pub fn user_may_set(&self, tag: &str) -> bool {
        if self.registered_tags().iter().any(|t| t == tag) {
            return false;
        }
        match self.user_allow().as_str() {
            "free" => true,
            "list" | "existing" => self.user_allow_list().iter().any(|t| t == tag),
            _ => false,
        }
    }
}

/// One entry of `GET /cluster/status`: the cluster itself or a node.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ClusterStatusEntry {
    /// `type`: `cluster` (only on a clustered node) or `node`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The cluster's name, or the node's.
    #[serde(default)]
    pub name: Option<String>,
    /// `[cluster]` a majority of the nodes is online: the cluster may make decisions.
    #[serde(default, deserialize_with = "opt_bool")]
    pub quorate: Option<bool>,
    /// `[node]` the node is online.
    #[serde(default, deserialize_with = "opt_bool")]
    pub online: Option<bool>,
    /// `[cluster]` how many nodes it has, offline ones included.
    #[serde(default, deserialize_with = "opt_u64")]
    pub nodes: Option<u64>,
    /// `[node]` corosync's node id (0 for a standalone node).
    #[serde(default, deserialize_with = "opt_u64")]
    pub nodeid: Option<u64>,
    /// `[node]` the address the node name resolves to.
    #[serde(default)]
    pub ip: Option<String>,
    /// `[node]` the node that answered the request.
    #[serde(default, deserialize_with = "opt_bool")]
    pub local: Option<bool>,
}

impl ClusterStatusEntry {
    /// The node that answered (`local`), else the first online node by name: where a
    /// per-node read is best sent (not proxied to another node).
    pub fn answering_node(entries: &[ClusterStatusEntry]) -> Option<String> {
        let nodes = || entries.iter().filter(|e| e.kind == "node");
        nodes()
            .find(|e| e.local == Some(true) && e.online != Some(false))
            .or_else(|| {
                nodes()
                    .filter(|e| e.online == Some(true))
                    .min_by(|a, b| a.name.cmp(&b.name))
            })
            .and_then(|e| e.name.clone())
    }
}

/// One certificate of `GET /nodes/{node}/certificates/info` (pve-common `PVE/Certificate.pm`
/// `get_certificate_info`); only what is read.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct CertificateInfo {
    /// The file's base name: `pve-root-ca.pem`, `pve-ssl.pem`, `pveproxy-ssl.pem`.
    #[serde(default)]
    pub filename: Option<String>,
    /// SHA-256, colon-separated hex.
    #[serde(default)]
    pub fingerprint: Option<String>,
}

/// The health of a cluster, derived from `GET /cluster/status`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClusterHealth {
    /// A standalone node (no `cluster` entry) is quorate by definition.
    pub quorate: bool,
    /// Node name -> online.
    pub nodes: BTreeMap<String, bool>,
}

impl ClusterHealth {
    /// The health `GET /cluster/status`'s entries show; a node without `online` counts as
    /// offline.
    pub fn from_entries(entries: &[ClusterStatusEntry]) -> ClusterHealth {
        let quorate = entries
            .iter()
            .find(|e| e.kind == "cluster")
            .map(|e| e.quorate.unwrap_or(false))
            .unwrap_or(true);
        let nodes = entries
            .iter()
            .filter(|e| e.kind == "node")
            .filter_map(|e| Some((e.name.clone()?, e.online.unwrap_or(false))))
            .collect();
        ClusterHealth { quorate, nodes }
    }

    /// True if the node exists, is online, and the cluster is quorate.
    pub fn node_healthy(&self, node: &str) -> bool {
        self.quorate && self.nodes.get(node).copied().unwrap_or(false)
    }
}

/// One pool of `GET /pools?poolid=P`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PoolEntry {
    pub poolid: String,
    #[serde(default)]
    pub members: Vec<PoolMember>,
}

/// A guest or storage in a pool.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PoolMember {
    /// `qemu`, `lxc` or `storage`.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "opt_u32")]
    pub vmid: Option<u32>,
}

/// One VM of `GET /cluster/resources?type=vm`. Everything but id/vmid/node may be missing.
/// Decoded every cycle for every guest of a site, so only what is read is kept, and the
/// strings only compared (`id`, `type`, `status`) are not copied out of the answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VmResource {
    /// `id` is `qemu/100` or `lxc/101`: true for the first.
    #[serde(rename = "id", deserialize_with = "id_is_qemu")]
    pub qemu_id: bool,
    /// `type`: `qemu`, `lxc` or another; when absent, `id` tells ([`VmResource::is_qemu`]).
    #[serde(rename = "type", default)]
    pub kind: Option<GuestType>,
    /// The VMID, sent as a number or a string.
    #[serde(deserialize_with = "u32_lenient")]
    pub vmid: u32,
    /// The node the guest is on.
    pub node: compact_str::CompactString,
    /// The guest's name; absent for a VM created seconds ago.
    #[serde(default)]
    pub name: Option<compact_str::CompactString>,
    /// `running`, `stopped`, or `unknown` (node offline, or the VM just appeared).
    #[serde(default)]
    pub status: Option<ListedStatus>,
    /// Lower-cased as PVE compares them, in the listing's order. PVE stores them
    /// `;`-separated (older releases also used `,` or spaces).
    #[serde(default, deserialize_with = "tag_string")]
    pub tags: Vec<compact_str::CompactString>,
    /// The guest is a template.
    #[serde(default, deserialize_with = "opt_bool")]
    pub template: Option<bool>,
    /// The guest's config lock (`clone`, `backup`, `migrate`, ...), if any.
    #[serde(default)]
    pub lock: Option<String>,
    /// The resource pool the guest is in, if any.
    #[serde(default)]
    pub pool: Option<String>,
    /// The HA manager's state of an HA-managed VM (`started`, `stopped`, `error`, ...).
    #[serde(default)]
    pub hastate: Option<String>,
    /// The guest's CPU count; `None` when absent or not a whole number.
    #[serde(default, deserialize_with = "opt_u64")]
    pub maxcpu: Option<u64>,
    /// The guest's memory (bytes).
    #[serde(default, deserialize_with = "opt_u64")]
    pub maxmem: Option<u64>,
    /// The size of the guest's root image (bytes).
    #[serde(default, deserialize_with = "opt_u64")]
    pub maxdisk: Option<u64>,
    /// Seconds since the guest started (0 or absent when it is not running).
    #[serde(default, deserialize_with = "opt_u64")]
    pub uptime: Option<u64>,
}

/// `GET /cluster/resources?type=vm` as read: the entries that decode, and what is known of
/// those that do not. Each entry is decoded alone, so a garbled one (a field of the wrong
/// type, no `vmid` or `node`) costs only itself, and is counted: a site whose listing has one
/// is observed incomplete (nothing created or deleted there that cycle).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// The entries that decode, in the listing's order.
    pub guests: Vec<VmResource>,
    /// The entries that do not, one each.
    pub unreadable: Vec<UnreadableEntry>,
}

/// A listing entry that could not be read: its VMID when that much could, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableEntry {
    /// The entry's VMID, when that much reads.
    pub vmid: Option<u32>,
    /// Why the entry does not decode (serde's message, cut after 160 bytes).
    pub error: String,
}

impl std::fmt::Display for UnreadableEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.vmid {
            Some(vmid) => write!(f, "the entry of VMID {vmid}: {}", self.error),
            None => write!(f, "an entry without a readable VMID: {}", self.error),
        }
    }
}

impl<'de> Deserialize<'de> for Listing {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Borrowed: each entry is a slice of the answer, decoded once.
        let entries: Vec<&'de serde_json::value::RawValue> = Vec::deserialize(d)?;
        let mut listing = Listing {
            guests: Vec::with_capacity(entries.len()),
            unreadable: Vec::new(),
        };
        for raw in entries {
            match serde_json::from_str::<VmResource>(raw.get()) {
                Ok(r) => listing.guests.push(r),
                Err(e) => {
                    #[derive(Deserialize)]
                    struct JustVmid {
                        #[serde(default, deserialize_with = "opt_u32")]
                        vmid: Option<u32>,
                    }
                    let vmid = serde_json::from_str::<JustVmid>(raw.get())
                        .ok()
                        .and_then(|j| j.vmid);
                    // What the answer held may be anything (10 KiB of it): the start says
                    // enough.
                    let mut error = e.to_string();
                    if error.len() > 160 {
                        let mut end = 160;
                        while !error.is_char_boundary(end) {
                            end -= 1;
                        }
                        error.truncate(end);
                        error.push_str("...");
                    }
                    listing.unreadable.push(UnreadableEntry { vmid, error });
                }
            }
        }
        Ok(listing)
    }
}

/// The nodes of `GET /cluster/resources?type=node`, as far as each entry reads: a node's
/// memory as pvestatd last reported it (`maxmem`, `mem` in bytes; an offline node has
/// neither). An entry that does not decode is left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeResources(pub Vec<NodeResource>);

/// One node of [`NodeResources`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NodeResource {
    /// The node's name.
    pub node: String,
    /// The node's status as the cluster sees it (`online`, `offline`, ...).
    #[serde(default)]
    pub status: Option<String>,
    /// The node's memory (bytes).
    #[serde(default, deserialize_with = "opt_u64")]
    pub maxmem: Option<u64>,
    /// The node's memory in use (bytes).
    #[serde(default, deserialize_with = "opt_u64")]
    pub mem: Option<u64>,
}

impl NodeResource {
    /// The node's memory not in use (`maxmem - mem`), when both are known.
    pub fn free_memory(&self) -> Option<u64> {
        Some(self.maxmem?.saturating_sub(self.mem?))
    }
}

impl<'de> Deserialize<'de> for NodeResources {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let entries: Vec<&'de serde_json::value::RawValue> = Vec::deserialize(d)?;
        Ok(NodeResources(
            entries
                .into_iter()
                .filter_map(|raw| serde_json::from_str::<NodeResource>(raw.get()).ok())
                .collect(),
        ))
    }
}

/// A listed guest's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuestType {
    /// A QEMU VM.
    Qemu,
    /// An LXC container.
    Lxc,
    /// Any other type.
    #[serde(other)]
    Other,
}

/// A listed guest's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListedStatus {
    /// The guest is running.
    Running,
    /// The guest is stopped.
    Stopped,
    /// The node is offline, or the VM appeared seconds ago.
    Unknown,
    /// Any other status.
    #[serde(other)]
    Other,
}

impl VmResource {
    /// True for QEMU VMs (the listing also holds containers).
    pub fn is_qemu(&self) -> bool {
        self.kind == Some(GuestType::Qemu) || self.qemu_id
    }

    /// The guest's kind: a QEMU VM, an LXC container, or neither (`None`: another type).
    pub fn guest_kind(&self) -> Option<crate::guest::GuestKind> {
        if self.is_qemu() {
            Some(crate::guest::GuestKind::Qemu)
        } else if self.kind == Some(GuestType::Lxc) {
            Some(crate::guest::GuestKind::Lxc)
        } else {
            None
        }
    }

    /// Tags as a list, lower-cased as PVE compares them.
    pub fn tag_list(&self) -> &[CompactString] {
        &self.tags
    }
}

/// A string read where it lies in the answer (no copy), for fields only compared.
fn with_str<'de, D: Deserializer<'de>, T>(
    d: D,
    expecting: &'static str,
    f: fn(&str) -> T,
) -> Result<T, D::Error> {
    struct Visit<T> {
        expecting: &'static str,
        f: fn(&str) -> T,
    }
    impl<T> serde::de::Visitor<'_> for Visit<T> {
        type Value = T;
        fn expecting(&self, out: &mut std::fmt::Formatter) -> std::fmt::Result {
            out.write_str(self.expecting)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
            Ok((self.f)(v))
        }
    }
    d.deserialize_str(Visit { expecting, f })
}

fn id_is_qemu<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    with_str(d, "a guest id such as qemu/100", |id| {
        id.starts_with("qemu/")
    })
}

/// A tag string split and lower-cased as it is read; `null` is no tags.
fn tag_string<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<CompactString>, D::Error> {
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = Vec<CompactString>;
        fn expecting(&self, out: &mut std::fmt::Formatter) -> std::fmt::Result {
            out.write_str("a tag string such as \"proxsync.main;web\"")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Vec<CompactString>, E> {
            Ok(split_tags(v))
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Vec<CompactString>, E> {
            Ok(Vec::new())
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<CompactString>, E> {
            Ok(Vec::new())
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Vec<CompactString>, D::Error> {
            d.deserialize_str(Visit)
        }
    }
    d.deserialize_option(Visit)
}

/// Splits a PVE tag string (`;`, `,` or whitespace separated) into lower-cased tags, held at
/// their exact size: `String`s, or the `CompactString`s a listed guest's view keeps between
/// cycles, each made from the text without a `String` between.
pub fn split_tags<T: for<'a> From<&'a str>>(tags: &str) -> Vec<T> {
    let mut out: Vec<T> = tags
        .split([';', ',', ' '])
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| match t.bytes().any(|b| b.is_ascii_uppercase()) {
            true => T::from(&t.to_ascii_lowercase()),
            false => T::from(t),
        })
        .collect();
    // Collected from a filter, a vector grows by doubling from room for 4; each guest's tags
    // are kept in its view between cycles (issue 47).
    out.shrink_to_fit();
    out
}

/// One storage of `GET /nodes/{node}/storage`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NodeStorage {
    /// The storage's id (`local`, `local-lvm`, ...).
    pub storage: String,
    /// `type`: the storage plugin (`dir`, `lvmthin`, `zfspool`, `rbd`, `nfs`, ...).
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// Comma-separated content types: `images,rootdir`, `iso,import,vztmpl`, ...
    #[serde(default)]
    pub content: Option<String>,
    /// The storage is accessible from this node.
    #[serde(default, deserialize_with = "opt_bool")]
    pub active: Option<bool>,
    /// The storage is enabled (not `disable`d in storage.cfg).
    #[serde(default, deserialize_with = "opt_bool")]
    pub enabled: Option<bool>,
    /// storage.cfg marks the storage shared: every node sees the same volumes.
    #[serde(default, deserialize_with = "opt_bool")]
    pub shared: Option<bool>,
    /// Free space (bytes).
    #[serde(default, deserialize_with = "opt_u64")]
    pub avail: Option<u64>,
    /// Total space (bytes).
    #[serde(default, deserialize_with = "opt_u64")]
    pub total: Option<u64>,
}

impl NodeStorage {
    /// Whether the storage takes content type `content` (`images`, `iso`, `import`, ...).
    pub fn has_content(&self, content: &str) -> bool {
        self.content
            .as_deref()
            .unwrap_or("")
            .split(',')
            .any(|c| c.trim() == content)
    }
}

/// One volume of `GET /nodes/{node}/storage/{storage}/content`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StorageVolume {
    /// `local:iso/debian.iso`, `local-lvm:base-9000-disk-0`, ...
    pub volid: String,
    /// The content type: `images`, `rootdir`, `iso`, `import`, `vztmpl`, `backup`, ...
    #[serde(default)]
    pub content: Option<String>,
    /// The format: `raw`, `qcow2`, `subvol`, `iso`, `tgz`, ...
    #[serde(default)]
    pub format: Option<String>,
    /// The volume's size (bytes).
    #[serde(default, deserialize_with = "opt_u64")]
    pub size: Option<u64>,
    /// The VMID of the guest that owns the volume, if any.
    #[serde(default, deserialize_with = "opt_u32")]
    pub vmid: Option<u32>,
    /// Creation time (unix seconds); for a file, its inode's change time (pve-storage
    /// `PVE/Storage/Plugin.pm` `get_subdir_files`: `$st->ctime`), which no uploader sets.
    #[serde(default, deserialize_with = "opt_u64")]
    pub ctime: Option<u64>,
}

/// The file stem of a volume ID: `local:iso/debian-12.iso` -> `debian-12`,
/// `local-lvm:vm-100-disk-0` -> `vm-100-disk-0`.
pub fn volume_stem(volid: &str) -> Option<&str> {
    let (_, volname) = volid.split_once(':')?;
    let file = volname.rsplit('/').next()?;
    let stem = file.rsplit_once('.').map_or(file, |(stem, _)| stem);
    (!stem.is_empty()).then_some(stem)
}

/// One interface of `GET /nodes/{node}/network`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NetworkInterface {
    /// The interface's name (`vmbr0`, `eno1`, `bond0`, ...).
    pub iface: String,
    /// `type`: `bridge`, `OVSBridge`, `eth`, `bond`, `vlan`, ...
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// The interface is active.
    #[serde(default, deserialize_with = "opt_bool")]
    pub active: Option<bool>,
    /// The MTU `/etc/network/interfaces` sets; absent: the kernel's default, 1500.
    #[serde(default, deserialize_with = "opt_u64")]
    pub mtu: Option<u64>,
}

/// A VM config as `GET .../config` returns it: property name -> value. Values keep PVE's
/// string form; numbers and booleans are turned into strings so comparisons are uniform.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VmConfig {
    /// Property name -> value, `digest` included.
    pub values: BTreeMap<String, String>,
}

impl VmConfig {
    /// The value of property `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }
    /// The config digest to pass back on a change, so a concurrent change is detected.
    pub fn digest(&self) -> Option<&str> {
        self.get("digest")
    }
    /// The VM's lock, if any (`clone`, `backup`, `migrate`, ...).
    pub fn lock(&self) -> Option<&str> {
        self.get("lock")
    }
    /// Whether it is a template's (`template: 1`).
    pub fn is_template(&self) -> bool {
        self.get("template").is_some_and(super::values::pve_bool)
    }
    /// The `description`, where proxsync keeps its marker line.
    pub fn description(&self) -> Option<&str> {
        self.get("description")
    }
    /// The `tags`, split and lower-cased ([`split_tags`]).
    pub fn tags(&self) -> Vec<String> {
        split_tags(self.get("tags").unwrap_or(""))
    }
    /// The guest's own identity as this config shows it (`guest::GuestId`): a VM's smbios1
    /// uuid, a container's first NIC's MAC; `None` when it has none or not a well-formed one.
    pub fn guest_id(&self, kind: crate::guest::GuestKind) -> Option<crate::guest::GuestId> {
        match kind {
            crate::guest::GuestKind::Qemu => self
                .get("smbios1")
                .and_then(|s| super::values::prop_value(s, "uuid", None))
                .and_then(crate::guest::GuestId::uuid),
            crate::guest::GuestKind::Lxc => self
                .first_hwaddr()
                .and_then(|mac| crate::guest::GuestId::hwaddr(&mac)),
        }
    }
    /// The MAC of a container's first NIC: the lowest `netN` (net0..net31) with a `hwaddr`,
    /// upper-case. What a container's consent to adopt pins.
    pub fn first_hwaddr(&self) -> Option<String> {
        (0..32).find_map(|i| {
            let net = self.get(&format!("net{i}"))?;
            super::values::prop_value(net, "hwaddr", None).map(str::to_ascii_uppercase)
        })
    }
}

impl<'de> Deserialize<'de> for VmConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw: BTreeMap<String, serde_json::Value> = BTreeMap::deserialize(d)?;
        let values = raw
            .into_iter()
            .filter_map(|(k, v)| {
                let s = match v {
                    serde_json::Value::String(s) => s,
                    serde_json::Value::Number(n) => n.to_string(),
                    serde_json::Value::Bool(b) => if b { "1" } else { "0" }.to_string(),
                    serde_json::Value::Null => return None,
                    other => other.to_string(),
                };
                Some((k, s))
            })
            .collect();
        Ok(VmConfig { values })
    }
}

/// One snapshot of a guest, as `GET .../{qemu,lxc}/{vmid}/snapshot` lists it (the entry
/// `current`, the guest's own state, is left out).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Snapshot {
    /// The snapshot's name.
    pub name: String,
    /// When it was taken (unix seconds); absent while it is being taken.
    #[serde(default)]
    pub snaptime: Option<u64>,
    /// Its description (the `Notes` a person wrote, or proxsync's line).
    #[serde(default)]
    pub description: String,
    /// `prepare` while it is being taken, `delete` while it is being deleted (or what a task
    /// that died left): such a snapshot is not whole, and PVE refuses a rollback to it
    /// (pve-guest-common `snapshot_rollback`: `unable to rollback to incomplete snapshot`).
    #[serde(default)]
    pub snapstate: Option<String>,
}

/// One key of `GET /nodes/{node}/qemu/{vmid}/pending`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PendingEntry {
    /// The config property.
    pub key: String,
    /// Its current value.
    #[serde(default)]
    pub value: Option<serde_json::Value>,
    /// The value that applies at the next start, when it differs.
    #[serde(default)]
    pub pending: Option<serde_json::Value>,
    /// A delete of the key is pending (PVE's `1`, or `2` for a forced delete).
    #[serde(default, deserialize_with = "opt_bool")]
    pub delete: Option<bool>,
}

impl PendingEntry {
    /// True when this key changes at the next reboot.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some() || self.delete == Some(true)
    }
}

/// `GET /nodes/{node}/tasks/{upid}/status`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct TaskStatus {
    /// `running` or `stopped`.
    pub status: String,
    /// Set once stopped: `OK`, `WARNINGS: 2`, or the error text.
    #[serde(default)]
    pub exitstatus: Option<String>,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
}

/// One line of `GET /nodes/{node}/tasks/{upid}/log`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct TaskLogLine {
    #[serde(deserialize_with = "u64_lenient")]
    pub n: u64,
    #[serde(default)]
    pub t: String,
}

/// One task of `GET /nodes/{node}/tasks`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TaskListEntry {
    /// The task's UPID.
    pub upid: String,
    /// `type`: `qmcreate`, `qmclone`, `vzdump`, ... ([`TaskListEntry::task_type`]).
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// The id the task names, usually a VMID ([`TaskListEntry::task_id`]).
    #[serde(default)]
    pub id: Option<String>,
    /// Who started it: `user@realm!tokenid` for a token's running task in PVE's active
    /// listing, `user@realm` with the token in `tokenid` in its archive.
    #[serde(default)]
    pub user: Option<String>,
    /// The API token's name (after `!`) when a token started the task, in PVE's archive.
    #[serde(default)]
    pub tokenid: Option<String>,
    /// `RUNNING` in PVE's active listing (absent in some fakes and old releases); the exit
    /// status once stopped.
    #[serde(default)]
    pub status: Option<String>,
    /// When the task started (unix seconds).
    #[serde(default, deserialize_with = "opt_u64")]
    pub starttime: Option<u64>,
    /// When the task ended (unix seconds); absent while it runs.
    #[serde(default, deserialize_with = "opt_u64")]
    pub endtime: Option<u64>,
}

impl TaskListEntry {
    /// Still running: no exit status yet, or PVE's `RUNNING` (any case).
    pub fn is_running(&self) -> bool {
        self.endtime.is_none()
            && self
                .status
                .as_deref()
                .is_none_or(|s| s.eq_ignore_ascii_case("running"))
    }

    /// The task's type (`qmcreate`, `qmclone`, `vzdump`, ...), from the listing or its UPID.
    pub fn task_type(&self) -> Option<String> {
        self.kind.clone().or_else(|| {
            self.upid
                .parse::<crate::pve::Upid>()
                .ok()
                .map(|u| u.kind.clone())
        })
    }

    /// Whether API token `token_id` (`user@realm!tokenid`) started the task: as the listing
    /// says (either of PVE's shapes), else as its UPID says.
    pub fn started_by(&self, token_id: &str) -> bool {
        let user = match (&self.user, &self.tokenid) {
            (Some(u), Some(t)) if !t.is_empty() && !u.contains('!') => format!("{u}!{t}"),
            (Some(u), _) => u.clone(),
            (None, _) => match self.upid.parse::<crate::pve::Upid>() {
                Ok(u) => u.user,
                Err(_) => return false,
            },
        };
        user == token_id
    }

    /// The id the task names (a VMID, empty for a multi-guest backup), from the listing or
    /// its UPID.
    pub fn task_id(&self) -> String {
        self.id.clone().unwrap_or_else(|| {
            self.upid
                .parse::<crate::pve::Upid>()
                .map(|u| u.id.clone())
                .unwrap_or_default()
        })
    }
}

/// A guest agent interface (`network-get-interfaces`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AgentInterface {
    /// The interface's name in the guest (`eth0`, `lo`, ...).
    pub name: String,
    /// Its MAC address.
    #[serde(rename = "hardware-address", default)]
    pub hardware_address: Option<String>,
    /// Its addresses.
    #[serde(rename = "ip-addresses", default)]
    pub ip_addresses: Vec<AgentIpAddress>,
}

/// One address of an [`AgentInterface`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AgentIpAddress {
    /// The address, without its prefix length.
    #[serde(rename = "ip-address")]
    pub ip_address: String,
    /// `ipv4` or `ipv6`.
    #[serde(rename = "ip-address-type", default)]
    pub ip_address_type: Option<String>,
    /// The prefix length (`24`, `64`, ...).
    #[serde(default, deserialize_with = "opt_u32")]
    pub prefix: Option<u32>,
}

/// `GET /access/permissions`: path -> privilege -> propagate.
pub(crate) type Permissions = BTreeMap<String, BTreeMap<String, serde_json::Value>>;

// ---- lenient scalar readers -----------------------------------------------------------------

fn value_to_u64(v: &serde_json::Value) -> Option<u64> {
    match v {
        serde_json::Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < u64::MAX as f64)
                .map(|f| f as u64)
        }),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        serde_json::Value::Bool(b) => Some(u64::from(*b)),
        _ => None,
    }
}

fn value_to_bool(v: &serde_json::Value) -> Option<bool> {
    match v {
        serde_json::Value::Bool(b) => Some(*b),
        serde_json::Value::Number(n) => n.as_f64().map(|f| f != 0.0),
        serde_json::Value::String(s) => match s.trim() {
            "1" | "true" | "yes" | "on" => Some(true),
            "0" | "false" | "no" | "off" | "" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// A u64 written as a number or a string.
pub(crate) fn u64_lenient<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    value_to_u64(&v)
        .ok_or_else(|| serde::de::Error::custom(format!("expected an integer, got {v}")))
}

/// A u32 written as a number or a string.
pub(crate) fn u32_lenient<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u64_lenient(d)?;
    u32::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} is out of range")))
}

pub(crate) fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(v.as_ref().and_then(value_to_u64))
}

fn opt_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Ok(opt_u64(d)?.and_then(|n| u32::try_from(n).ok()))
}

pub(crate) fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(v.as_ref().and_then(value_to_bool))
}

#[cfg(test)]
mod tests {
    /// PVE lists a snapshot being taken or deleted with its `snapstate`; a whole one without.
    #[test]
    fn a_snapshot_listing_says_its_state() {
        let listed: Vec<super::Snapshot> = serde_json::from_value(serde_json::json!([
            {"name": "a", "snaptime": 1, "description": "", "snapstate": "prepare"},
            {"name": "b", "snaptime": 2, "description": "x", "snapstate": "delete"},
            {"name": "c", "snaptime": 3, "description": "y", "parent": "b", "vmstate": 0},
        ]))
        .unwrap();
        let states: Vec<_> = listed.iter().map(|s| s.snapstate.as_deref()).collect();
        assert_eq!(states, [Some("prepare"), Some("delete"), None]);
    }

    #[test]
    fn a_task_is_a_tokens_in_either_of_pves_shapes() {
        let entry = |user: Option<&str>, tokenid: Option<&str>| TaskListEntry {
            upid: "UPID:pve1:0000A1B2:00000001:65000000:vzcreate:100:ops@pve!proxsync:".into(),
            kind: None,
            id: None,
            user: user.map(str::to_string),
            tokenid: tokenid.map(str::to_string),
            status: None,
            starttime: None,
            endtime: None,
        };
        let token = "ops@pve!proxsync";
        // The active listing keeps the UPID's user; the archive splits off the token.
        assert!(entry(Some(token), None).started_by(token));
        assert!(entry(Some("ops@pve"), Some("proxsync")).started_by(token));
        assert!(entry(None, None).started_by(token));
        assert!(!entry(Some("ops@pve"), None).started_by(token));
        assert!(!entry(Some("ops@pve!other"), None).started_by(token));
        assert!(!entry(Some("root@pam"), Some("proxsync")).started_by(token));
    }

    use super::*;

    #[test]
    fn resources_as_pve_sends_them() {
        // A real PVE 8 listing: a running VM, a template, a VM created seconds ago (no name,
        // no tags, status unknown) and a container.
        let json = r#"[
          {"id":"qemu/100","type":"qemu","vmid":100,"node":"pve1","name":"web-01","status":"running",
           "tags":"proxsync.main;web","template":0,"maxcpu":4,"maxmem":8589934592,"maxdisk":107374182400,
           "cpu":0.01,"mem":1234,"uptime":55,"netin":1,"netout":2,"diskread":0,"diskwrite":0,"disk":0},
          {"id":"qemu/9000","type":"qemu","vmid":"9000","node":"pve1","name":"debian-12-template",
           "status":"stopped","template":1},
          {"id":"qemu/101","type":"qemu","vmid":101,"node":"pve2","status":"unknown"},
          {"id":"lxc/200","type":"lxc","vmid":200,"node":"pve1","name":"ct","status":"running"}
        ]"#;
        let vms: Vec<VmResource> = serde_json::from_str(json).unwrap();
        assert_eq!(vms[0].tag_list(), vec!["proxsync.main", "web"]);
        assert_eq!(vms[0].maxmem, Some(8 << 30));
        assert_eq!(vms[1].vmid, 9000);
        assert_eq!(vms[1].template, Some(true));
        assert_eq!(vms[2].name, None);
        assert_eq!(vms[2].status, Some(ListedStatus::Unknown));
        assert!(vms[2].tag_list().is_empty());
        assert!(!vms[3].is_qemu());
    }

    #[test]
    fn listing_tags_ids_and_statuses_decode_without_copies() {
        let json = r#"[
          {"id":"qemu/1","vmid":1,"node":"n","tags":"Web;proxsync.MAIN","status":"paused"},
          {"id":"qemu/2","type":"qemu","vmid":2,"node":"n","tags":null,"status":"stopped"},
          {"id":"lxc/3","type":"lxc","vmid":3,"node":"n","tags":"a\u003bb"},
          {"id":"qemu/4","type":"openvz","vmid":4,"node":"n"}
        ]"#;
        let vms: Vec<VmResource> = serde_json::from_str(json).unwrap();
        assert_eq!(vms[0].tags, vec!["web", "proxsync.main"]);
        assert_eq!(vms[0].status, Some(ListedStatus::Other));
        assert!(vms[0].is_qemu(), "no type: the id says qemu");
        assert!(vms[1].tags.is_empty());
        assert_eq!(vms[1].status, Some(ListedStatus::Stopped));
        // An escaped string is decoded, not compared raw.
        assert_eq!(vms[2].tags, vec!["a", "b"]);
        assert!(!vms[2].is_qemu());
        assert_eq!(vms[3].kind, Some(GuestType::Other));
        let err = serde_json::from_str::<Vec<VmResource>>(
            r#"[{"id":"qemu/5","vmid":5,"node":"n","tags":7}]"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("tag string"), "{err}");
    }

    #[test]
    fn split_tags_are_exactly_their_size() {
        for (text, n) in [
            ("web", 1),
            ("proxsync.main;web", 2),
            ("a, b c;d;e", 5),
            ("", 0),
        ] {
            let tags: Vec<String> = split_tags(text);
            assert_eq!((tags.len(), tags.capacity()), (n, n), "{text:?}");
        }
        let vms: Vec<VmResource> =
            serde_json::from_str(r#"[{"id":"qemu/1","vmid":1,"node":"n","tags":"proxsync.main"}]"#)
                .unwrap();
        assert_eq!(vms[0].tags.capacity(), 1, "a listing's tags as split");
    }

    #[test]
    fn a_garbled_listing_entry_costs_only_itself_and_is_counted() {
        let json = r#"[
          {"id":"qemu/100","type":"qemu","vmid":100,"node":"pve1","name":"a","status":"running"},
          {"id":"qemu/101","type":"qemu","vmid":101,"node":"pve1","tags":7},
          {"id":"qemu/102","type":"qemu","vmid":102},
          {"id":"qemu/103","type":"qemu","vmid":-1,"node":"pve1"},
          {"id":null,"vmid":"104","node":"pve1"},
          "garbage"
        ]"#;
        let listing: Listing = serde_json::from_str(json).unwrap();
        assert_eq!(listing.guests.len(), 1);
        assert_eq!(listing.guests[0].vmid, 100);
        let vmids: Vec<Option<u32>> = listing.unreadable.iter().map(|u| u.vmid).collect();
        assert_eq!(vmids, [Some(101), Some(102), None, Some(104), None]);
        assert!(
            listing.unreadable[1]
                .to_string()
                .contains("the entry of VMID 102"),
            "{}",
            listing.unreadable[1]
        );
        // Not a list at all: the listing itself is unreadable.
        assert!(serde_json::from_str::<Listing>(r#"{"a":1}"#).is_err());
    }

    #[test]
    fn cluster_status_standalone_and_clustered() {
        let clustered: Vec<ClusterStatusEntry> = serde_json::from_str(
            r#"[{"type":"cluster","id":"cluster","name":"c","nodes":2,"quorate":1,"version":3},
                {"type":"node","id":"node/pve1","name":"pve1","online":1,"local":1,"nodeid":1,"ip":"10.0.0.1","level":""},
                {"type":"node","id":"node/pve2","name":"pve2","online":0,"nodeid":2,"ip":"10.0.0.2","level":""}]"#,
        )
        .unwrap();
        let h = ClusterHealth::from_entries(&clustered);
        assert!(h.quorate);
        assert!(h.node_healthy("pve1"));
        assert!(!h.node_healthy("pve2"));
        assert!(!h.node_healthy("pve9"));

        let lost: Vec<ClusterStatusEntry> = serde_json::from_str(
            r#"[{"type":"cluster","quorate":0},{"type":"node","name":"pve1","online":1}]"#,
        )
        .unwrap();
        assert!(!ClusterHealth::from_entries(&lost).node_healthy("pve1"));

        // A standalone node has no cluster entry.
        let single: Vec<ClusterStatusEntry> =
            serde_json::from_str(r#"[{"type":"node","name":"pve","online":1,"local":1}]"#).unwrap();
        assert!(ClusterHealth::from_entries(&single).node_healthy("pve"));

        // Per-node reads go to the node that answered, else (none said so, or it is shown
        // offline) to the first online node.
        assert_eq!(
            ClusterStatusEntry::answering_node(&clustered).as_deref(),
            Some("pve1")
        );
        let elsewhere: Vec<ClusterStatusEntry> = serde_json::from_str(
            r#"[{"type":"node","name":"a","online":0,"local":1},{"type":"node","name":"c","online":1},
                {"type":"node","name":"b","online":1}]"#,
        )
        .unwrap();
        assert_eq!(
            ClusterStatusEntry::answering_node(&elsewhere).as_deref(),
            Some("b")
        );
        assert_eq!(
            ClusterStatusEntry::answering_node(&lost[..1]),
            None,
            "no node at all"
        );
    }

    #[test]
    fn the_membership_is_complete_only_when_every_member_is_named_and_counted() {
        let shape = |json: &str| {
            ClusterShape::from_entries(
                &serde_json::from_str::<Vec<ClusterStatusEntry>>(json).unwrap(),
            )
        };
        // As get_status answers: the cluster entry counts every member, offline ones included.
        let whole = shape(
            r#"[{"type":"cluster","name":"c","nodes":2,"quorate":1},
                {"type":"node","name":"pve1","online":1},{"type":"node","name":"pve2","online":0}]"#,
        );
        assert!(whole.complete);
        assert_eq!(whole.node_names(), vec!["pve1", "pve2"]);
        // A standalone node: no cluster entry, one node entry.
        assert!(shape(r#"[{"type":"node","name":"pve","online":1}]"#).complete);
        for partial in [
            // A member fewer than counted.
            r#"[{"type":"cluster","name":"c","nodes":3,"quorate":1},
                {"type":"node","name":"pve1"},{"type":"node","name":"pve2"}]"#,
            // No count to check against.
            r#"[{"type":"cluster","name":"c","quorate":1},{"type":"node","name":"pve1"}]"#,
            // A node entry without a name, or with an empty one.
            r#"[{"type":"cluster","name":"c","nodes":2,"quorate":1},
                {"type":"node","name":"pve1"},{"type":"node","online":1}]"#,
            r#"[{"type":"cluster","name":"c","nodes":2,"quorate":1},
                {"type":"node","name":"pve1"},{"type":"node","name":""}]"#,
            // No node at all.
            r#"[]"#,
            r#"[{"type":"cluster","name":"c","nodes":0,"quorate":1}]"#,
        ] {
            assert!(!shape(partial).complete, "{partial}");
        }
        assert!(!ClusterShape::default().complete, "nothing read");
    }

    #[test]
    fn config_values_become_strings() {
        let cfg: VmConfig = serde_json::from_str(
            r#"{"cores":4,"memory":"8192","name":"web-01","agent":true,"balloon":null,
                "digest":"abc123","tags":"proxsync.main;Web","net0":"virtio=BC:24:11:00:00:01,bridge=vmbr0"}"#,
        )
        .unwrap();
        assert_eq!(cfg.get("cores"), Some("4"));
        assert_eq!(cfg.get("memory"), Some("8192"));
        assert_eq!(cfg.get("agent"), Some("1"));
        assert_eq!(cfg.get("balloon"), None);
        assert_eq!(cfg.digest(), Some("abc123"));
        assert_eq!(cfg.tags(), vec!["proxsync.main", "web"]);
    }

    #[test]
    fn versions_and_features() {
        let v = |s: &str| Version {
            version: s.into(),
            release: None,
            repoid: None,
        };
        assert_eq!(v("9.1.2").triple(), (9, 1, 2));
        assert_eq!(v("8.4").triple(), (8, 4, 0));
        let f = v("7.1.10").features();
        assert!(!f.import_from && !f.import_content && !f.resize_is_task);
        let f = v("8.1.4").features();
        assert!(f.import_from && !f.import_content && f.resize_is_task);
        // `import` content for import-from came with 8.3 (qemu-server 8.2.7), uploads into it
        // with 8.4 (pve-storage 8.3.6).
        let f = v("8.2.4").features();
        assert!(!f.import_content && !f.import_upload, "{f:?}");
        let f = v("8.3.0").features();
        assert!(f.import_content && !f.import_upload, "{f:?}");
        let f = v("8.4.1").features();
        assert!(f.import_content && f.import_upload, "{f:?}");
        assert!(v("9.1.2").features().import_upload);
        assert_eq!(v("garbage").triple(), (0, 0, 0));
    }

    #[test]
    fn import_extensions() {
        for ok in [
            "local:import/noble.qcow2",
            "local:import/disk.raw",
            "local:import/a.vmdk",
            "local:import/vm.ova/disk1.vmdk",
        ] {
            assert_eq!(check_import_extension(ok), Ok(()), "{ok}");
        }
        for bad in [
            "local:import/noble.img",
            "local:import/noble.QCOW2",
            "local:import/noble",
        ] {
            let e = check_import_extension(bad).unwrap_err();
            assert!(e.contains(".ova, .ovf, .qcow2, .raw, .vmdk"), "{e}");
        }
    }

    #[test]
    fn volume_stems() {
        assert_eq!(
            volume_stem("local:iso/debian-12.7.0-amd64-netinst.iso"),
            Some("debian-12.7.0-amd64-netinst")
        );
        assert_eq!(volume_stem("local:import/noble.qcow2"), Some("noble"));
        assert_eq!(
            volume_stem("local-lvm:vm-100-disk-0"),
            Some("vm-100-disk-0")
        );
        assert_eq!(
            volume_stem("local:100/vm-100-disk-0.qcow2"),
            Some("vm-100-disk-0")
        );
        assert_eq!(volume_stem("nocolon"), None);
    }

    #[test]
    fn storages_and_tasks() {
        let s: Vec<NodeStorage> = serde_json::from_str(
            r#"[{"storage":"local","type":"dir","content":"iso,import,vztmpl","active":1,"enabled":1,"shared":0,"avail":"1000","total":2000}]"#,
        )
        .unwrap();
        assert!(s[0].has_content("import"));
        assert!(!s[0].has_content("images"));
        assert_eq!(s[0].avail, Some(1000));
        let t: TaskStatus = serde_json::from_str(
            r#"{"status":"stopped","exitstatus":"WARNINGS: 2","type":"qmclone","id":"9000","user":"proxsync@pve!gitops","pid":5,"pstart":6,"starttime":7,"upid":"u","node":"pve1"}"#,
        )
        .unwrap();
        assert_eq!(t.exitstatus.as_deref(), Some("WARNINGS: 2"));
        let log: Vec<TaskLogLine> =
            serde_json::from_str(r#"[{"n":1,"t":"create full clone"},{"n":"2","t":"TASK OK"}]"#)
                .unwrap();
        assert_eq!(log[1].n, 2);
    }
}

/// Who the cluster says it is in `GET /cluster/status` (not how it is: no `online`, `quorate`,
/// `local` or `version`, which change without the cluster changing). A change of it is what
/// makes the root CA be read again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ClusterShape {
    /// The corosync cluster name; `None` on a standalone node (no `cluster` entry).
    pub cluster: Option<String>,
    /// Every node, sorted by name.
    pub nodes: Vec<ShapeNode>,
    /// `nodes` is the whole membership: every node entry has a name, and there are as many as
    /// the cluster entry counts (offline nodes included), or, on a standalone node, one. A
    /// garbled or partial answer is not: no node is judged a stranger to the cluster on it.
    pub complete: bool,
}

/// One node entry of `GET /cluster/status`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShapeNode {
    /// The node's name.
    pub name: String,
    /// corosync's node id (0 for a standalone node).
    pub nodeid: Option<u64>,
    /// The address the node name resolves to on the cluster.
    pub ip: Option<String>,
}

impl ClusterShape {
    /// The shape of `GET /cluster/status`'s entries (pve-manager `PVE/API2/Cluster.pm`
    /// `get_status`: a `cluster` entry only on a clustered node, then one `node` entry per
    /// member).
    pub fn from_entries(entries: &[ClusterStatusEntry]) -> ClusterShape {
        let cluster = entries
            .iter()
            .find(|e| e.kind == "cluster")
            .map(|e| e.name.clone().unwrap_or_default());
        let listed = entries.iter().filter(|e| e.kind == "node").count();
        let mut nodes: Vec<ShapeNode> = entries
            .iter()
            .filter(|e| e.kind == "node")
            .filter_map(|e| {
                Some(ShapeNode {
                    name: e.name.clone()?,
                    nodeid: e.nodeid,
                    ip: e.ip.clone(),
                })
            })
            .collect();
        nodes.sort();
        let counted = match entries.iter().find(|e| e.kind == "cluster") {
            Some(c) => c.nodes.is_some_and(|n| n == listed as u64),
            None => listed == 1,
        };
        let complete = counted
            && listed > 0
            && nodes.len() == listed
            && nodes.iter().all(|n| !n.name.is_empty());
        ClusterShape {
            cluster,
            nodes,
            complete,
        }
    }

    /// The node names, sorted.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }
}
