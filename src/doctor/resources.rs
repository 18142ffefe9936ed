//! What the specs need on their nodes: storages, bridges and images (templates, volumes).

use std::collections::{BTreeMap, BTreeSet};

use super::{Check, Level, check};
use crate::config::SiteConfig;
use crate::pve::types::{ClusterHealth, NodeStorage, VmResource, check_import_extension};
use crate::pve::{Client, Error};
use crate::spec::{Image, Spec, VolumeKind};

// Long because: each healthy node's storages and bridges are read once, then every spec is
// checked against them, one `Check` per missing thing.
pub(super) async fn check_spec_needs(
    client: &Client,
    site: &SiteConfig,
    health: &ClusterHealth,
    resources: &[VmResource],
    specs: &[&Spec],
) -> Vec<Check> {
    let mut out = Vec::new();
    let nodes: BTreeSet<&str> = specs
        .iter()
        .map(|s| s.node.as_str())
        .filter(|n| health.node_healthy(n))
        .collect();
    let mut storages: BTreeMap<&str, Vec<NodeStorage>> = BTreeMap::new();
    let mut bridges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
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
                bridges.insert(node, b.into_iter().map(|i| i.iface).collect());
            }
            Err(e) => out.push(check(
                Level::Fail,
                format!("{} node {node} bridges", site.name),
                e.to_string(),
                None,
            )),
        }
    }

    out.extend(pool_checks(client, site, specs).await);
    let mut seen = BTreeSet::new();
    for spec in specs {
        let node = spec.node.as_str();
        let (Some(node_storages), Some(node_bridges)) = (storages.get(node), bridges.get(node))
        else {
            continue;
        };
        let disk_storages = spec.disks.iter().flatten().map(|d| &d.storage);
        for storage in std::iter::once(&spec.storage).chain(disk_storages) {
            if seen.insert(("storage", node.to_string(), storage.clone())) {
                out.push(storage_check(
                    site,
                    node,
                    node_storages,
                    storage,
                    "images",
                    &spec.name,
                ));
            }
        }
        for why in spec
            .disks
            .iter()
            .flatten()
            .filter_map(|d| crate::execute::disks::format_refusal(d, node_storages))
        {
            out.push(check(
                Level::Fail,
                format!("{} spec {} disks", site.name, spec.name),
                why,
                None,
            ));
        }
        let bridges: Vec<&str> = match &spec.networks {
            Some(nics) => nics.iter().map(|n| n.bridge.as_str()).collect(),
            None => vec![spec.network.as_str()],
        };
        for bridge in bridges {
            if seen.insert(("bridge", node.to_string(), bridge.to_string())) {
                out.push(bridge_check(site, node, node_bridges, spec, bridge));
            }
        }
        let image_key = format!("{:?}", spec.image);
        if seen.insert(("image", node.to_string(), image_key)) {
            out.push(image_check(client, site, node, node_storages, resources, spec).await);
        }
    }
    out
}

/// Whether the pools the specs name exist (PVE refuses a create into a missing pool).
async fn pool_checks(client: &Client, site: &SiteConfig, specs: &[&Spec]) -> Vec<Check> {
    let wanted: BTreeMap<&str, &str> = specs
        .iter()
        .filter_map(|s| s.hardware.pool.as_deref().map(|p| (p, s.name.as_str())))
        .collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let pools = match client.pools().await {
        Ok(p) => p,
        Err(e) => {
            return vec![check(
                Level::Fail,
                format!("{} pools", site.name),
                e.to_string(),
                None,
            )];
        }
    };
    let have: BTreeSet<String> = pools.into_iter().map(|p| p.poolid).collect();
    wanted
        .into_iter()
        .map(|(pool, spec)| {
            let subject = format!("{} pool {pool}", site.name);
            if have.contains(pool) {
                check(Level::Ok, subject, "exists", None)
            } else {
                check(
                    Level::Fail,
                    subject,
                    format!("no such pool (spec {spec}); the site has: {}", join(&have)),
                    Some(format!(
                        "create it (pveum pool add {pool}) or change the spec's pool"
                    )),
                )
            }
        })
        .collect()
}

/// Whether the node has the bridge the spec's network names.
fn bridge_check(
    site: &SiteConfig,
    node: &str,
    node_bridges: &BTreeSet<String>,
    spec: &Spec,
    bridge: &str,
) -> Check {
    let subject = format!("{} bridge {node}/{bridge}", site.name);
    if node_bridges.contains(bridge) {
        check(Level::Ok, subject, "exists", None)
    } else {
        check(
            Level::Fail,
            subject,
            format!(
                "no such bridge (spec {}); the node has: {}",
                spec.name,
                join(node_bridges)
            ),
            Some("create the bridge on the node or change the spec's network".into()),
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

async fn image_check(
    client: &Client,
    site: &SiteConfig,
    node: &str,
    storages: &[NodeStorage],
    resources: &[VmResource],
    spec: &Spec,
) -> Check {
    let subject = format!("{} image of {}", site.name, spec.name);
    let templates: Vec<&VmResource> = resources
        .iter()
        .filter(|r| r.is_qemu() && r.template == Some(true))
        .collect();
    match &spec.image {
        Image::Template { vmid } => template_check(subject, resources, &templates, *vmid),
        Image::Volume {
            storage,
            volume,
            kind,
        } => {
            let content = match kind {
                VolumeKind::Images => "images",
                VolumeKind::Import => "import",
                VolumeKind::Iso => "iso",
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
) -> Check {
    match resources.iter().find(|r| r.vmid == vmid) {
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
