//! What the specs need on their nodes: storages, bridges and images (templates, volumes).

use std::collections::{BTreeMap, BTreeSet};

use super::{Check, Level, check};
use crate::config::SiteConfig;
use crate::pve::types::{
    ClusterHealth, NetworkInterface, NodeStorage, VmResource, check_import_extension,
};
use crate::pve::{Client, Error};
use crate::spec::{Guest, Image, Nic, Spec, VolumeKind};

// Long because: each healthy node's storages and bridges are read once, then every spec is
// checked against them, one `Check` per missing thing.
pub(super) async fn check_spec_needs(
    client: &Client,
    site: &SiteConfig,
    health: &ClusterHealth,
    resources: &[VmResource],
    specs: &[&Spec],
    ownership_tag: &str,
) -> Vec<Check> {
    let mut out = Vec::new();
    let nodes: BTreeSet<&str> = specs
        .iter()
        .map(|s| s.node.as_str())
        .filter(|n| health.node_healthy(n))
        .collect();
    let mut storages: BTreeMap<&str, Vec<NodeStorage>> = BTreeMap::new();
    let mut bridges: BTreeMap<&str, Vec<NetworkInterface>> = BTreeMap::new();
    for node in &nodes {
        match client.node_storages(node, None).await {
            Ok(s) => {
                storages.insert(node, s);
            }
            Err(e) => out.push(check(
                Level::Fail,
                format!("{} node {node} storages", site.name),
                e.to_string(),
                None,
            )),
        }
        match client.node_bridges(node).await {
            Ok(b) => {
                bridges.insert(node, b);
            }
            Err(e) => out.push(check(
                Level::Fail,
                format!("{} node {node} bridges", site.name),
                e.to_string(),
                None,
            )),
        }
    }

    out.extend(pool_checks(client, site, specs, resources, ownership_tag).await);
    let mut seen = BTreeSet::new();
    for spec in specs {
        let node = spec.node.as_str();
        let (Some(node_storages), Some(node_bridges)) = (storages.get(node), bridges.get(node))
        else {
            continue;
        };
        // A VM's disks are `images` content, a container's root filesystem and mount points
        // `rootdir`.
        let (content, all): (&str, Vec<&str>) = match &spec.guest {
            Guest::Vm(vm) => (
                "images",
                std::iter::once(vm.storage.as_str())
                    .chain(vm.disks.iter().flatten().map(|d| d.storage.as_str()))
                    .collect(),
            ),
            Guest::Container(ct) => (
                "rootdir",
                std::iter::once(&ct.storage)
                    .chain(ct.mount_points.iter().flatten().map(|mp| &mp.storage))
                    .map(String::as_str)
                    .collect(),
            ),
        };
        for &storage in &all {
            if seen.insert(("storage", node.to_string(), format!("{storage} {content}"))) {
                out.push(storage_check(
                    site,
                    node,
                    node_storages,
                    storage,
                    content,
                    &spec.name,
                ));
            }
        }
        if let Some(c) = snapshot_check(site, node, node_storages, spec, &all) {
            out.push(c);
        }
        for why in (spec.vm().iter())
            .flat_map(|vm| vm.disks.iter().flatten())
            .filter_map(|d| crate::render::disks::format_refusal(d, node_storages))
        {
            out.push(check(
                Level::Fail,
                format!("{} spec {} disks", site.name, spec.name),
                why,
                None,
            ));
        }
        for bridge in spec_bridges(spec) {
            if seen.insert(("bridge", node.to_string(), bridge.clone())) {
                out.push(bridge_check(site, node, node_bridges, spec, &bridge));
            }
        }
        out.extend(mtu_checks(site, node, node_bridges, spec));
        let image_key = format!("{:?}", spec.image());
        if seen.insert(("image", node.to_string(), image_key)) {
            out.push(image_check(client, site, node, node_storages, resources, spec).await);
        }
    }
    out.extend(sdn_checks(client, site, specs, &bridges).await);
    out
}

/// The bridges a spec's NICs name, in order, each once.
fn spec_bridges(spec: &Spec) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for nic in spec_nics(spec) {
        if !out.contains(&nic.bridge) {
            out.push(nic.bridge);
        }
    }
    out
}

/// A spec's NICs as PVE checks their bridges: a VM's `networks`, a container's (pve-container
/// `check_bridge_access` checks its bridge and VLAN as qemu-server does a VM's), or the one NIC
/// on `network` of either.
fn spec_nics(spec: &Spec) -> Vec<Nic> {
    let ct_nics = spec.container().and_then(|c| c.networks.as_ref());
    match (ct_nics, spec.vm().and_then(|vm| vm.networks.as_ref())) {
        (Some(nics), _) => nics
            .iter()
            .map(|n| Nic {
                vlan: n.vlan,
                ..Nic::on_bridge(&n.bridge)
            })
            .collect(),
        (None, Some(nics)) => nics.clone(),
        (None, None) => vec![Nic::on_bridge(spec.bridge())],
    }
}

/// Whether the pools the specs name exist (PVE refuses a create into a missing pool), and
/// whether the token may take a VM out of the pool it is in now. Each pool is read by its id
/// (`GET /pools?poolid=P`), which PVE answers without Pool.Audit (pve-manager
/// `PVE/API2/Pool.pm` `index`: the check is `noerr` and its answer unused), so a pool the token
/// may not list is not called missing.
async fn pool_checks(
    client: &Client,
    site: &SiteConfig,
    specs: &[&Spec],
    resources: &[VmResource],
    ownership_tag: &str,
) -> Vec<Check> {
    let wanted: BTreeMap<&str, &str> = specs
        .iter()
        .filter_map(|s| s.hardware.pool.as_deref().map(|p| (p, s.name.as_str())))
        .collect();
    let mut out = Vec::new();
    for (pool, spec) in &wanted {
        let subject = format!("{} pool {pool}", site.name);
        out.push(match client.pool_vmids(pool).await {
            Ok(_) => check(Level::Ok, subject, "exists", None),
            Err(e) if e.meaning() == Some(crate::pve::texts::Meaning::PoolMissing) => check(
                Level::Fail,
                subject,
                format!("no such pool (spec {spec})"),
                Some(format!(
                    "create it (pveum pool add {pool}) or change the spec's pool"
                )),
            ),
            Err(e) => check(Level::Fail, subject, e.to_string(), None),
        });
    }
    // A guest of this install in another pool than its spec's is moved with `allow-move`,
    // which needs Pool.Allocate on the pool it leaves too (`update_pool`:
    // `$rpcenv->check($authuser, "/pool/$existing_pool", ['Pool.Allocate'])`), a container as
    // a VM. The guest is found by its listed name and kind.
    let mut leaving: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for r in resources
        .iter()
        .filter(|r| r.tags.iter().any(|t| t == ownership_tag))
    {
        let (Some(from), Some(name), Some(kind)) =
            (r.pool.as_deref(), r.name.as_deref(), r.guest_kind())
        else {
            continue;
        };
        if let Some(spec) = specs.iter().find(|s| {
            s.kind() == kind
                && s.guest_name() == name
                && s.hardware.pool.as_deref().is_some_and(|to| to != from)
        }) {
            leaving.entry(from).or_default().push(format!(
                "{} of spec {} (to {})",
                kind.named(r.vmid),
                spec.name,
                spec.hardware.pool.as_deref().unwrap_or_default()
            ));
        }
    }
    for (from, vms) in leaving {
        let subject = format!("{} pool {from}", site.name);
        let path = format!("/pool/{from}");
        let held = match client.permissions(Some(&path)).await {
            Ok(mut perms) => perms
                .remove(&path)
                .unwrap_or_default()
                .contains_key("Pool.Allocate"),
            Err(e) => {
                out.push(check(Level::Fail, subject, e.to_string(), None));
                continue;
            }
        };
        if !held {
            out.push(check(
                Level::Fail,
                subject,
                format!(
                    "token {} lacks Pool.Allocate on {path}, which PVE checks to move {} out of it",
                    site.token_id,
                    vms.join(", ")
                ),
                Some(format!(
                    "pveum acl modify {path} --tokens '{}' --roles PVEPoolAdmin (and the same for its \
                     user, unless the token has privsep=0)",
                    site.token_id
                )),
            ));
        }
    }
    out
}

/// Whether the token may use each bridge the specs' NICs name, as PVE checks it at create and
/// on a change (pve-guest-common `PVE/GuestHelpers.pm` `check_vnet_access`, through qemu-server
/// `check_bridge_access`): SDN.Use on `/sdn/zones/localnetwork/<bridge>` for an untagged NIC,
/// and for a tagged one on `.../<bridge>/<vlan>` for its `vlan` and each VLAN of its `trunks`
/// (not the bridge itself). A grant on the bridge that propagates covers its VLANs. An SDN
/// VNet's zone is not read: it gets a warning naming the path to grant.
// Long because: the bridges and VLANs gathered from the specs, then one permission read per
// path, as PVE checks them at create.
async fn sdn_checks(
    client: &Client,
    site: &SiteConfig,
    specs: &[&Spec],
    bridges: &BTreeMap<&str, Vec<NetworkInterface>>,
) -> Vec<Check> {
    // bridge -> (specs using it untagged, VLAN -> specs).
    type Uses = (BTreeSet<String>, BTreeMap<u16, BTreeSet<String>>);
    let mut uses: BTreeMap<String, Uses> = BTreeMap::new();
    let mut vnets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for spec in specs {
        let Some(listed) = bridges.get(spec.node.as_str()) else {
            continue;
        };
        for nic in &spec_nics(spec) {
            match listed.iter().find(|i| i.iface == nic.bridge) {
                // Not listed: the bridge check says so.
                None => {}
                Some(i) if i.kind.as_deref() == Some("vnet") => {
                    vnets
                        .entry(nic.bridge.clone())
                        .or_default()
                        .insert(spec.name.to_string());
                }
                Some(_) => {
                    let entry = uses.entry(nic.bridge.clone()).or_default();
                    let vlans = nic_vlans(nic);
                    if vlans.is_empty() {
                        entry.0.insert(spec.name.to_string());
                    }
                    for v in vlans {
                        entry.1.entry(v).or_default().insert(spec.name.to_string());
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut budget = MAX_VLAN_READS;
    for (bridge, (untagged, vlans)) in uses {
        let subject = format!("{} sdn {bridge}", site.name);
        let path = format!("/sdn/zones/localnetwork/{bridge}");
        let (on_bridge, propagates) = match sdn_use(client, &path).await {
            Ok(h) => h,
            Err(e) => {
                out.push(check(Level::Fail, subject, e.to_string(), None));
                continue;
            }
        };
        let mut missing: Vec<String> = Vec::new();
        if !untagged.is_empty() && !on_bridge {
            missing.push(format!("{path} ({})", join_names(&untagged)));
        }
        if !(on_bridge && propagates) {
            for (vlan, names) in &vlans {
                if budget == 0 {
                    missing.push(format!(
                        "{path}/<vlan> for VLANs from {vlan} on (too many to read one by one; a \
                         grant on {path} covers them all)"
                    ));
                    break;
                }
                budget -= 1;
                let vlan_path = format!("{path}/{vlan}");
                match sdn_use(client, &vlan_path).await {
                    Ok((true, _)) => {}
                    Ok((false, _)) => missing.push(format!("{vlan_path} ({})", join_names(names))),
                    Err(e) => {
                        missing.push(format!("{vlan_path} (not readable: {e})"));
                    }
                }
            }
        }
        let what = {
            let mut w = Vec::new();
            if !untagged.is_empty() {
                w.push("untagged".to_string());
            }
            if !vlans.is_empty() {
                let list: Vec<String> = vlans.keys().map(u16::to_string).collect();
                w.push(format!("VLAN {}", list.join(", ")));
            }
            w.join("; ")
        };
        out.push(if missing.is_empty() {
            check(
                Level::Ok,
                subject,
                format!("the token may use {bridge} ({what})"),
                None,
            )
        } else {
            check(
                Level::Fail,
                subject,
                format!(
                    "token {} lacks SDN.Use on {}: PVE refuses a NIC on {bridge} without it, at create \
                     and on a change",
                    site.token_id,
                    missing.join(", ")
                ),
                Some(format!(
                    "pveum acl modify {path} --tokens '{}' --roles PVESDNUser (it propagates to the \
                     bridge's VLANs; or grant {path}/<vlan> for single VLANs), and the same for its \
                     user unless the token has privsep=0",
                    site.token_id
                )),
            )
        });
    }
    for (vnet, names) in vnets {
        out.push(check(
            Level::Warn,
            format!("{} sdn {vnet}", site.name),
            format!(
                "{vnet} is an SDN VNet ({}): PVE checks SDN.Use on /sdn/zones/<its zone>/{vnet} (or \
                 .../{vnet}/<vlan> for a tagged NIC); doctor does not read the VNet's zone",
                join_names(&names)
            ),
            Some(format!(
                "make sure token '{}' holds SDN.Use on /sdn/zones/<zone>/{vnet}",
                site.token_id
            )),
        ));
    }
    out
}

/// At most this many VLAN paths are read one by one per site (a trunk `1-4094` would be 4094
/// requests); beyond, only a grant on the bridge counts.
const MAX_VLAN_READS: usize = 64;

/// Whether the token holds SDN.Use on `path`, and whether that grant propagates (PVE answers
/// `{path: {privilege: propagate}}`).
async fn sdn_use(client: &Client, path: &str) -> Result<(bool, bool), crate::pve::Error> {
    let mut perms = client.permissions(Some(path)).await?;
    let privs = perms.remove(path).unwrap_or_default();
    Ok(match privs.get("SDN.Use") {
        None => (false, false),
        Some(propagate) => (
            true,
            match propagate {
                serde_json::Value::Bool(b) => *b,
                serde_json::Value::Number(n) => n.as_u64() != Some(0),
                serde_json::Value::String(s) => s != "0",
                _ => true,
            },
        ),
    })
}

/// The VLANs PVE checks SDN.Use for on a NIC: its tag and every VLAN of its trunks
/// (pve-guest-common `get_tags_from_trunk`: `a-b` is a to b); none for an untagged NIC.
pub(super) fn nic_vlans(nic: &crate::spec::Nic) -> Vec<u16> {
    let mut out: BTreeSet<u16> = nic.vlan.into_iter().collect();
    for part in nic.trunks.as_deref().unwrap_or("").split(';') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, ""));
        let (Ok(lo), hi) = (lo.trim().parse::<u16>(), hi.trim().parse::<u16>().ok()) else {
            continue;
        };
        match hi {
            Some(hi) if hi > lo => out.extend(lo..=hi),
            _ => {
                out.insert(lo);
            }
        }
    }
    out.into_iter().collect()
}

fn join_names(names: &BTreeSet<String>) -> String {
    let v: Vec<&str> = names.iter().map(String::as_str).collect();
    format!("spec {}", v.join(", "))
}

/// A virtio NIC's `mtu` above its bridge's fails the VM's start (qemu-server
/// `PVE/QemuServer.pm` `print_netdevice_full`: `MTU '$mtu' is bigger than the bridge MTU`);
/// the bridge's is the listing's `mtu`, else Linux's default 1500. Below 576 is refused by
/// validation already. A container's NIC above its bridge's fails its create and any config
/// update (pve-container `update_pct_config`; `render::container::mtu_refusals`).
fn mtu_checks(
    site: &SiteConfig,
    node: &str,
    node_bridges: &[NetworkInterface],
    spec: &Spec,
) -> Vec<Check> {
    // A container's NIC is refused at its create and every config update.
    let mut out: Vec<Check> = crate::render::container::mtu_refusals(spec, node_bridges)
        .into_iter()
        .map(|why| {
            check(
                Level::Fail,
                format!("{} spec {} networks", site.name, spec.name),
                why,
                None,
            )
        })
        .collect();
    let vm_nics = spec.vm().and_then(|vm| vm.networks.as_ref());
    for (i, nic) in vm_nics.iter().flat_map(|n| n.iter()).enumerate() {
        let Some(mtu) = nic.mtu.filter(|m| *m != 1 && nic.model == "virtio") else {
            continue;
        };
        let Some(bridge) = node_bridges.iter().find(|b| b.iface == nic.bridge) else {
            continue;
        };
        let bridge_mtu = bridge.mtu.unwrap_or(1500);
        if u64::from(mtu) > bridge_mtu {
            out.push(check(
                Level::Fail,
                format!("{} spec {} networks", site.name, spec.name),
                format!(
                    "net{i} has mtu {mtu}, above the MTU of bridge {} on node {node} ({bridge_mtu}): \
                     PVE refuses to start the VM",
                    nic.bridge
                ),
                Some(format!(
                    "set the NIC's mtu to at most {bridge_mtu} (or 1: the bridge's), or raise the \
                     bridge's MTU on the node"
                )),
            ));
        }
    }
    out
}

/// Whether the node lists the bridge the spec's network names. PVE lists only the bridges the
/// token may use (pve-manager `PVE/API2/Network.pm` `index`: `check_sdn_bridge` with SDN.Audit
/// or SDN.Use on `/sdn/zones/localnetwork/<bridge>` or a VLAN below it), so a missing one may be
/// a missing privilege.
fn bridge_check(
    site: &SiteConfig,
    node: &str,
    node_bridges: &[NetworkInterface],
    spec: &Spec,
    bridge: &str,
) -> Check {
    let subject = format!("{} bridge {node}/{bridge}", site.name);
    if node_bridges.iter().any(|b| b.iface == bridge) {
        check(Level::Ok, subject, "exists", None)
    } else {
        check(
            Level::Fail,
            subject,
            format!(
                "no such bridge listed (spec {}): it does not exist, or token {} holds neither \
                 SDN.Use nor SDN.Audit on /sdn/zones/localnetwork/{bridge} (PVE lists only the \
                 bridges a token may use); the node lists: {}",
                spec.name,
                site.token_id,
                join(node_bridges.iter().map(|b| &b.iface))
            ),
            Some(format!(
                "create the bridge on the node or change the spec's network, or grant SDN.Use on \
                 /sdn/zones/localnetwork/{bridge}"
            )),
        )
    }
}

fn join<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    let v: Vec<&str> = items.into_iter().map(String::as_str).collect();
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

fn storage_check(
    site: &SiteConfig,
    node: &str,
    storages: &[NodeStorage],
    storage: &str,
    content: &str,
    spec: &str,
) -> Check {
    let subject = format!("{} storage {node}/{storage}", site.name);
    match storages.iter().find(|s| s.storage == storage) {
        None => check(
            Level::Fail,
            subject,
            format!(
                "no such storage on the node (spec {spec}); it has: {}",
                join(storages.iter().map(|s| &s.storage))
            ),
            Some(
                "add the storage to the node (Datacenter > Storage) or change the spec's storage"
                    .into(),
            ),
        ),
        Some(s) if !s.has_content(content) => check(
            Level::Fail,
            subject,
            format!(
                "holds content {:?}, not {content:?} (spec {spec})",
                s.content.as_deref().unwrap_or("")
            ),
            Some(format!(
                "add {content:?} to the storage's content types, or use another storage"
            )),
        ),
        Some(s) if s.active == Some(false) => check(
            Level::Fail,
            subject,
            "inactive",
            Some("check the storage on the node (`pvesm status`)".into()),
        ),
        Some(_) => check(
            Level::Ok,
            subject,
            format!("exists with {content} content"),
            None,
        ),
    }
}

/// Whether a storage of plugin type `kind` can take a guest's snapshot (PVE's
/// `has_feature('snapshot')`): `Err` says why not, or on what it depends.
fn snapshot_support(kind: Option<&str>) -> Result<(), &'static str> {
    match kind.unwrap_or_default() {
        "lvmthin" | "zfspool" | "zfs" | "rbd" | "btrfs" => Ok(()),
        "dir" | "nfs" | "cifs" | "glusterfs" | "cephfs" => {
            Err("a file storage snapshots qcow2 disks only (raw disks cannot)")
        }
        "lvm" => Err("LVM thick cannot snapshot (PVE 9 only with snapshot-as-volume-chain)"),
        _ => Err("this storage type cannot snapshot"),
    }
}

/// For a spec whose `changePolicy` takes snapshots: whether its disks' storages can (a change
/// that needs one is held where they cannot, unless `IfPossible`). `None` for other specs.
fn snapshot_check(
    site: &SiteConfig,
    node: &str,
    storages: &[NodeStorage],
    spec: &Spec,
    used: &[&str],
) -> Option<Check> {
    use crate::spec::health::SnapshotWhen;
    let policy = spec.change_policy.as_deref()?;
    if policy.snapshot == SnapshotWhen::Never {
        return None;
    }
    let subject = format!("{} spec {} snapshots", site.name, spec.name);
    let cannot: Vec<String> = (used.iter())
        .filter_map(|name| {
            let s = storages.iter().find(|s| s.storage == *name)?;
            let why = snapshot_support(s.kind.as_deref()).err()?;
            Some(format!(
                "{name} ({}): {why}",
                s.kind.as_deref().unwrap_or("?")
            ))
        })
        .collect();
    if cannot.is_empty() {
        return Some(check(
            Level::Ok,
            subject,
            format!("its storages on {node} can snapshot (changePolicy)"),
            None,
        ));
    }
    let (level, then) = if policy.snapshot == SnapshotWhen::IfPossible {
        (
            Level::Ok,
            "changes there are applied without one (IfPossible)",
        )
    } else {
        (Level::Warn, "a change that needs a snapshot is held there")
    };
    Some(check(
        level,
        subject,
        format!("on {node}, {}; {then}", cannot.join("; ")),
        (level == Level::Warn).then(|| {
            "move the disks to LVM-thin, ZFS, Ceph RBD or qcow2 on a file storage, or write \
             changePolicy.snapshot: IfPossible"
                .to_string()
        }),
    ))
}

async fn image_check(
    client: &Client,
    site: &SiteConfig,
    node: &str,
    storages: &[NodeStorage],
    resources: &[VmResource],
    spec: &Spec,
) -> Check {
    let subject = format!("{} image of {}", site.name, spec.name);
    // A VM is cloned from a VM template, a container from a container template.
    let templates: Vec<&VmResource> = resources
        .iter()
        .filter(|r| r.guest_kind() == Some(spec.kind()) && r.template == Some(true))
        .collect();
    match spec.image() {
        Image::Existing => check(
            Level::Ok,
            subject,
            "none: the spec adopts an existing VM (proxsync.io/adopt)".to_string(),
            None,
        ),
        Image::Managed(name) => check(
            Level::Ok,
            subject,
            format!("the ProxmoxImage {name}, which proxsync has PVE download"),
            None,
        ),
        Image::Built { name, vm_name } => check(
            Level::Ok,
            subject,
            format!("the ProxmoxTemplate {name}, which proxsync builds ({vm_name})"),
            None,
        ),
        Image::Oci { reference, storage } => {
            let store = storage_check(site, node, storages, storage, "vztmpl", &spec.name);
            if store.level != Level::Ok {
                return Check { subject, ..store };
            }
            check(
                Level::Ok,
                subject,
                format!("the OCI image {reference}, which PVE 9.1 pulls to {storage}"),
                None,
            )
        }
        Image::Template { vmid } => {
            template_check(subject, resources, &templates, *vmid, spec.kind())
        }
        Image::Volume {
            storage,
            volume,
            kind,
        } => {
            let content = match kind {
                VolumeKind::Images => "images",
                VolumeKind::Import => "import",
                VolumeKind::Iso => "iso",
                VolumeKind::Vztmpl => "vztmpl",
            };
            if *kind == VolumeKind::Import
                && let Err(why) = check_import_extension(volume)
            {
                return check(
                    Level::Fail,
                    subject,
                    why,
                    Some("rename the file on the storage and in the spec's image".into()),
                );
            }
            let store_check = storage_check(site, node, storages, storage, content, &spec.name);
            if store_check.level != Level::Ok {
                return Check {
                    subject,
                    ..store_check
                };
            }
            match client.storage_content(node, storage, Some(content)).await {
                Ok(volumes) if volumes.iter().any(|v| &v.volid == volume) => check(
                    Level::Ok,
                    subject,
                    format!("{volume} exists on {node}"),
                    None,
                ),
                Ok(_) => check(
                    Level::Fail,
                    subject,
                    format!("{volume} not found on {node}"),
                    Some(format!(
                        "upload it to {storage} ({content} content) on {node}, or fix the spec's image"
                    )),
                ),
                Err(e) => check(Level::Fail, subject, e.to_string(), None),
            }
        }
        Image::Name(name) => name_check(client, subject, node, storages, &templates, name).await,
    }
}

/// An image named by VMID: a template of this site.
fn template_check(
    subject: String,
    resources: &[VmResource],
    templates: &[&VmResource],
    vmid: u32,
    kind: crate::guest::GuestKind,
) -> Check {
    match resources.iter().find(|r| r.vmid == vmid) {
        Some(r) if r.guest_kind() != Some(kind) => check(
            Level::Fail,
            subject,
            format!(
                "{vmid} ({}) is not a {}: a {} is made from a {} template",
                r.name.as_deref().unwrap_or("?"),
                kind.noun(),
                kind.noun(),
                kind.noun()
            ),
            Some("name a template of the spec's kind".into()),
        ),
        Some(r) if r.template == Some(true) => check(
            Level::Ok,
            subject,
            format!(
                "template {vmid} ({}) on {}",
                r.name.as_deref().unwrap_or("?"),
                r.node
            ),
            None,
        ),
        Some(_) => check(
            Level::Fail,
            subject,
            format!("VM {vmid} exists but is not a template"),
            Some(format!(
                "convert it with `qm template {vmid}` or name a template"
            )),
        ),
        None => check(
            Level::Fail,
            subject,
            format!("no template with VMID {vmid} on this site"),
            Some(format!(
                "templates here: {}",
                join(
                    &templates
                        .iter()
                        .map(|t| format!("{} ({})", t.vmid, t.name.as_deref().unwrap_or("?")))
                        .collect::<Vec<_>>()
                )
            )),
        ),
    }
}

/// An image named by name: one template of that name, else one volume with that file stem
/// on the node.
async fn name_check(
    client: &Client,
    subject: String,
    node: &str,
    storages: &[NodeStorage],
    templates: &[&VmResource],
    name: &str,
) -> Check {
    let by_name: Vec<&&VmResource> = templates
        .iter()
        .filter(|t| t.name.as_deref() == Some(name))
        .collect();
    match by_name.len() {
        1 => check(
            Level::Ok,
            subject,
            format!("template {name} is VMID {}", by_name[0].vmid),
            None,
        ),
        0 => match volumes_with_stem(client, node, storages, name).await {
            Ok(found) if found.len() == 1 && found[0].contains(":import/") => {
                match check_import_extension(&found[0]) {
                    Ok(()) => check(
                        Level::Ok,
                        subject,
                        format!("{name} is the volume {} on {node}", found[0]),
                        None,
                    ),
                    Err(why) => check(
                        Level::Fail,
                        subject,
                        why,
                        Some("rename the file on the storage".into()),
                    ),
                }
            }
            Ok(found) if found.len() == 1 => check(
                Level::Ok,
                subject,
                format!("{name} is the volume {} on {node}", found[0]),
                None,
            ),
            Ok(found) if found.is_empty() => check(
                Level::Fail,
                subject,
                format!(
                    "no template named {name:?} on this site and no volume with that file stem on {node}"
                ),
                Some("name an existing template or volume, or upload the image".into()),
            ),
            Ok(found) => check(
                Level::Fail,
                subject,
                format!("{name:?} is ambiguous: {}", found.join(", ")),
                Some("use the full volume ID in the spec".into()),
            ),
            Err(e) => check(Level::Fail, subject, e.to_string(), None),
        },
        n => check(
            Level::Fail,
            subject,
            format!("{n} templates are named {name:?}: ambiguous"),
            Some("rename all but one, or use the template's VMID".into()),
        ),
    }
}

/// Volumes on the node's image-bearing storages whose file stem is `name`.
async fn volumes_with_stem(
    client: &Client,
    node: &str,
    storages: &[NodeStorage],
    name: &str,
) -> Result<Vec<String>, Error> {
    let mut found = Vec::new();
    for s in storages {
        for content in ["import", "iso", "images"] {
            if !s.has_content(content) {
                continue;
            }
            for v in client
                .storage_content(node, &s.storage, Some(content))
                .await?
            {
                if crate::pve::types::volume_stem(&v.volid) == Some(name) {
                    found.push(v.volid);
                }
            }
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which storage types snapshot, as PVE's plugins say (`has_feature('snapshot')`).
    #[test]
    fn snapshots_are_known_by_storage_type() {
        for kind in ["lvmthin", "zfspool", "rbd", "btrfs", "zfs"] {
            assert!(snapshot_support(Some(kind)).is_ok(), "{kind}");
        }
        assert!(
            snapshot_support(Some("lvm"))
                .unwrap_err()
                .contains("LVM thick")
        );
        assert!(snapshot_support(Some("dir")).unwrap_err().contains("qcow2"));
        assert!(snapshot_support(Some("iscsi")).is_err());
        assert!(snapshot_support(None).is_err());
    }

    #[test]
    fn a_nic_s_vlans_are_its_tag_and_every_trunk_vlan() {
        let mut nic = crate::spec::Nic::on_bridge("vmbr0");
        assert!(nic_vlans(&nic).is_empty(), "untagged");
        nic.vlan = Some(20);
        nic.trunks = Some("10;30-32;5".into());
        assert_eq!(nic_vlans(&nic), [5, 10, 20, 30, 31, 32]);
        nic.vlan = None;
        nic.trunks = Some("7-7".into());
        assert_eq!(nic_vlans(&nic), [7]);
    }

    /// A container's NICs are checked as a VM's: each bridge, on its VLAN when tagged.
    #[test]
    fn a_containers_nics_are_each_checked_with_their_vlan() {
        let yaml = "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata: {name: dns-01}\n\
                    spec:\n  forProvider:\n    site: lab\n    node: pve1\n    template: 9100\n    \
                    networks:\n      - {name: eth0, bridge: vmbr0, ip: dhcp}\n      - \
                    {name: eth1, bridge: vmbr1, vlan: 20, ip: manual}\n      - \
                    {name: eth2, bridge: vmbr0, vlan: 30, ip: manual}\n";
        let (specs, diags) = crate::spec::parse_file("dns.yaml", yaml.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        let nics: Vec<(String, Vec<u16>)> = spec_nics(&specs[0])
            .iter()
            .map(|n| (n.bridge.clone(), nic_vlans(n)))
            .collect();
        assert_eq!(
            nics,
            [
                ("vmbr0".to_string(), vec![]),
                ("vmbr1".to_string(), vec![20]),
                ("vmbr0".to_string(), vec![30]),
            ]
        );
        assert_eq!(spec_bridges(&specs[0]), ["vmbr0", "vmbr1"]);
        // Without networks: the one NIC on `network`, as a VM's short form.
        let vm = crate::spec::test_spec("    network: vmbr2\n");
        assert_eq!(spec_bridges(&vm), ["vmbr2"]);
    }
}
