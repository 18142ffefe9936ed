//! Pre-flight: everything a create needs (node, storage, bridge, image, PVE version),
//! checked before anything is created.

use std::sync::Arc;

use crate::category::Category;
use crate::guest::GuestKind;
use crate::pve::types::{
    IMPORT_CONTENT_SINCE, IMPORT_FROM_SINCE, NodeStorage, Version, VmConfig, check_import_extension,
};
use crate::pve::values::is_drive_key;
use crate::pve::{Error as PveError, Pve};
use crate::spec::{Guest, Image, Spec, VmSpec, VolumeKind};

use super::{ActionError, NodeFacts, SiteCtx, fail};
use crate::model::SiteView;
use crate::model::Unfit;

/// The error of a create refused before anything exists.
fn unfit(why: Unfit) -> ActionError {
    fail(why.category(), why.to_string())
}

/// What pre-flight reads from: the cycle's views of the sites, and what it read once per cycle
/// of nodes and templates. A cycle's creates share it; `proxsync plan` makes its own.
pub(crate) struct Reads<'a> {
    pub views: &'a std::collections::BTreeMap<String, SiteView>,
    pub facts: &'a NodeFacts,
    /// The spec set's `ProxmoxImage`s: what `image: {image: NAME}` names.
    pub images: &'a crate::spec::images::ImagesByName,
    /// This install: a `ProxmoxTemplate`'s VM is its own.
    pub install_id: &'a str,
}

impl<P: Pve> super::ExecCtx<P> {
    /// What this cycle's pre-flights read from.
    pub(super) fn reads(&self) -> Reads<'_> {
        Reads {
            views: &self.views,
            facts: &self.node_facts,
            images: &self.images,
            install_id: &self.install_id,
        }
    }
}

/// What a create starts from, once resolved and checked.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Source {
    Clone {
        template: u32,
        template_node: String,
    },
    Import {
        volume: String,
    },
    Iso {
        volume: String,
    },
    /// A container made from a `vztmpl` archive (`ostemplate`).
    OsTemplate {
        volume: String,
    },
    /// A container made from an OCI image not yet on its node: PVE pulls it to `volume` first
    /// (`execute::oci::pull`), then it is an [`Source::OsTemplate`].
    OciPull {
        /// The storage is shared (storage.cfg): one pull serves every node.
        shared: bool,
        reference: String,
        storage: String,
        volume: String,
    },
}

/// A node's storages and bridges, read once per cycle and node however many creates need
/// them.
async fn node_facts(
    reads: &Reads<'_>,
    site: &SiteCtx<impl Pve>,
    node: &str,
) -> Result<Arc<(Vec<NodeStorage>, Vec<crate::pve::types::NetworkInterface>)>, ActionError> {
    let key = (site.name.clone(), node.to_string());
    let cell = reads
        .facts
        .nodes
        .lock()
        .await
        .entry(key)
        .or_default()
        .clone();
    let facts = cell
        .get_or_try_init(|| async {
            let storages = site.client.node_storages(node, None).await?;
            let bridges = site.client.node_bridges(node).await?;
            Ok::<_, PveError>(Arc::new((storages, bridges)))
        })
        .await?;
    Ok(facts.clone())
}

/// A template's config, read once per cycle and template however many clones need it.
async fn template_config(
    reads: &Reads<'_>,
    site: &SiteCtx<impl Pve>,
    node: &str,
    kind: GuestKind,
    vmid: u32,
) -> Result<Arc<VmConfig>, ActionError> {
    let key = (site.name.clone(), vmid);
    let cell = reads
        .facts
        .templates
        .lock()
        .await
        .entry(key)
        .or_default()
        .clone();
    let cfg = cell
        .get_or_try_init(|| async {
            Ok::<_, PveError>(Arc::new(site.client.vm_config(node, kind, vmid).await?))
        })
        .await?;
    Ok(cfg.clone())
}

/// Checks everything a create needs before anything is created.
// Long because: every check a create needs (site, node, disk formats, the seed's storage, the
// template or image), each failing with its own category and message before anything exists.
pub(super) async fn preflight(
    reads: &Reads<'_>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
) -> Result<Source, ActionError> {
    let view = reads.views.get(&site.name).ok_or_else(|| {
        unfit(Unfit::SiteNotObserved {
            site: site.name.clone(),
        })
    })?;
    if !view.node_healthy(&spec.node) {
        return Err(unfit(Unfit::NodeUnhealthy {
            node: spec.node.to_string(),
        }));
    }
    let client = &site.client;
    let facts = node_facts(reads, site, &spec.node).await?;
    let (storages, bridges) = (facts.0.as_slice(), facts.1.as_slice());
    // A container's volumes are `rootdir` content, a VM's `images`.
    match &spec.guest {
        Guest::Vm(vm) => {
            check_storage(storages, &vm.storage, "images", &spec.node)?;
            for disk in vm.disks.iter().flatten() {
                check_storage(storages, &disk.storage, "images", &spec.node)?;
                if let Some(why) = crate::render::disks::format_refusal(disk, storages) {
                    return Err(fail(Category::ConfigurationError, why));
                }
            }
        }
        Guest::Container(ct) => {
            check_storage(storages, &ct.storage, "rootdir", &spec.node)?;
            for mp in ct.mount_points.iter().flatten() {
                check_storage(storages, &mp.storage, "rootdir", &spec.node)?;
            }
        }
    }
    check_bridge(bridges, spec)?;
    if let Some(why) = crate::render::container::mtu_refusals(spec, bridges)
        .into_iter()
        .next()
    {
        return Err(fail(Category::ConfigurationError, why));
    }
    if let Some(vm) = spec.vm().filter(|vm| vm.user_data.is_some()) {
        // The seed image needs an `iso` storage: known now, not after the VM exists.
        pick_seed_storage(storages, &spec.node, vm)?;
    }
    let version = site.version().await?;
    if let Some(why) = spec
        .ha
        .as_ref()
        .and_then(|ha| ha.refusal_on(&site.name, &version.version, version.triple().0))
    {
        return Err(fail(Category::ConfigurationError, why));
    }
    if let Some(ct) = spec.container() {
        super::container::check_init_options(site, ct).await?;
    }
    // A VM is cloned from a VM template, a container from a container template.
    let template_in_view = |vmid: u32| {
        view.vms
            .get(&vmid)
            .filter(|vm| vm.template && vm.kind == spec.kind())
    };
    match spec.image() {
        // The planner never creates for a spec that adopts; this is the last line.
        Image::Existing => Err(unfit(Unfit::AdoptsOnly {
            spec: spec.name.to_string(),
            kind: spec.kind(),
        })),
        Image::Template { vmid } => match template_in_view(*vmid) {
            Some(t) => clone_source(reads, site, spec, storages, *vmid, &t.node).await,
            None => Err(unfit(Unfit::NoTemplate {
                vmid: *vmid,
                site: site.name.clone(),
                kind: spec.kind(),
            })),
        },
        Image::Volume {
            storage,
            volume,
            kind,
        } => {
            check_volume(
                client, storages, &spec.node, storage, volume, *kind, version,
            )
            .await
        }
        Image::Managed(name) => {
            // Checked when the specs were read: the image exists, on this site, for a VM.
            let Some(image) = reads.images.get(name) else {
                return Err(unfit(Unfit::NoImage {
                    name: name.clone(),
                    site: site.name.clone(),
                    node: spec.node.to_string(),
                }));
            };
            let kind = match image.content {
                crate::spec::images::ImageContent::Iso => VolumeKind::Iso,
                crate::spec::images::ImageContent::Import => VolumeKind::Import,
                crate::spec::images::ImageContent::Vztmpl => VolumeKind::Vztmpl,
            };
            let volume = image.volume_id();
            check_volume(
                client,
                storages,
                &spec.node,
                &image.storage,
                &volume,
                kind,
                version,
            )
            .await
        }
        Image::Oci { reference, storage } => {
            oci_source(
                client, storages, &site.name, spec, reference, storage, version,
            )
            .await
        }
        Image::Built { name, vm_name } => {
            // One VM per version, made by this install: its record names it, and its marker.
            let built = (view.vms.values())
                .filter(|vm| {
                    vm.template
                        && vm.kind == spec.kind()
                        && vm.name.as_deref() == Some(vm_name.as_str())
                        && vm.owned_by(reads.install_id)
                })
                .min_by_key(|vm| (vm.node != spec.node, vm.vmid));
            match built {
                Some(t) => clone_source(reads, site, spec, storages, t.vmid, &t.node).await,
                None => Err(unfit(Unfit::TemplateNotBuilt {
                    name: name.clone(),
                    vm_name: vm_name.clone(),
                    site: site.name.clone(),
                })),
            }
        }
        Image::Name(name) => {
            let templates: Vec<_> = view
                .vms
                .values()
                .filter(|vm| {
                    vm.template
                        && vm.kind == spec.kind()
                        && vm.name.as_deref() == Some(name.as_str())
                })
                .collect();
            match templates.as_slice() {
                [t] => return clone_source(reads, site, spec, storages, t.vmid, &t.node).await,
                [] => {}
                many => {
                    return Err(unfit(Unfit::AmbiguousTemplates {
                        name: name.clone(),
                        vmids: many.iter().map(|t| t.vmid).collect(),
                    }));
                }
            }
            if spec.kind() == GuestKind::Lxc {
                return Err(unfit(Unfit::NoContainerTemplate {
                    name: name.clone(),
                    site: site.name.clone(),
                }));
            }
            volume_by_name(site, storages, spec, name, version).await
        }
    }
}

/// A container from OCI image `reference`: only on PVE 9.1 (refused before anything is sent,
/// naming the release), to a storage of the node with `vztmpl` content; the archive is used when
/// the storage lists it, else pulled first ([`Source::OciPull`]).
async fn oci_source(
    client: &impl Pve,
    storages: &[NodeStorage],
    site: &str,
    spec: &Spec,
    reference: &str,
    storage: &str,
    version: &Version,
) -> Result<Source, ActionError> {
    if version.triple() < crate::spec::oci::OCI_SINCE {
        return Err(unfit(Unfit::OciTooOld {
            site: site.to_string(),
            version: version.version.clone(),
            reference: reference.to_string(),
        }));
    }
    check_storage(storages, storage, "vztmpl", &spec.node)?;
    let volume = crate::spec::oci::volume(storage, reference);
    let listed = client
        .storage_content(&spec.node, storage, Some("vztmpl"))
        .await?;
    if listed.iter().any(|v| v.volid == volume) {
        return Ok(Source::OsTemplate { volume });
    }
    let shared =
        (storages.iter().find(|s| s.storage == storage)).is_some_and(|s| s.shared == Some(true));
    Ok(Source::OciPull {
        shared,
        reference: reference.to_string(),
        storage: storage.to_string(),
        volume,
    })
}

/// Every bridge the spec's NICs name exists on its node. PVE does not check a bridge at
/// create (qemu-server `create_vm` only checks `SDN.Use` on it), so a missing one would fail
/// only at the VM's first start.
fn check_bridge(
    bridges: &[crate::pve::types::NetworkInterface],
    spec: &Spec,
) -> Result<(), ActionError> {
    let wanted: Option<Vec<&str>> = match &spec.guest {
        Guest::Vm(vm) => {
            (vm.networks.as_ref()).map(|nics| nics.iter().map(|n| n.bridge.as_str()).collect())
        }
        Guest::Container(ct) => {
            (ct.networks.as_ref()).map(|nics| nics.iter().map(|n| n.bridge.as_str()).collect())
        }
    };
    let field = match wanted {
        Some(_) => "spec.forProvider.networks",
        None => "spec.forProvider.network",
    };
    let wanted = wanted.unwrap_or_else(|| vec![spec.bridge()]);
    if let Some(missing) = wanted
        .into_iter()
        .find(|w| !bridges.iter().any(|b| b.iface == *w))
    {
        return Err(unfit(Unfit::NoBridge {
            bridge: missing.to_string(),
            node: spec.node.to_string(),
            lists: bridges.iter().map(|b| b.iface.clone()).collect(),
            field: field.to_string(),
        }));
    }
    Ok(())
}

/// A clone of `template`. To another node than the template's, PVE wants the target storage
/// shared (both kinds: `can't clone to non-shared storage '$storage'`), and a VM template's
/// every volume (disks, an ISO in a CD-ROM drive, the cloud-init drive) on shared storage too:
/// qemu-server `PVE/API2/Qemu.pm` `clone_vm`'s `$check_storage_access_clone` sets `$sharedvm =
/// 0` for any volume (CD-ROM or not, only `none` and `cdrom` skipped) whose storage is not
/// `shared`, and `die "can't clone VM to node '$target' (VM uses local storage)\n" if $target
/// && !$sharedvm`. pve-container's `clone_vm` asks it of the storage each volume is copied to
/// (`$sid = $storage if defined($storage)`), and proxsync always names that storage (the
/// spec's `rootfs` one): a CT template on local storage clones to any node onto shared storage.
/// The template's config is read once per cycle.
async fn clone_source(
    reads: &Reads<'_>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
    storages: &[NodeStorage],
    template: u32,
    template_node: &str,
) -> Result<Source, ActionError> {
    // A clone is as privileged as its template: pve-container copies `unprivileged`.
    if let Some(ct) = &spec.container() {
        let cfg = template_config(reads, site, template_node, spec.kind(), template).await?;
        let privileged = !cfg
            .get("unprivileged")
            .is_some_and(crate::pve::values::pve_bool);
        if privileged == ct.unprivileged {
            return Err(unfit(Unfit::OtherPrivilege {
                template,
                spec_unprivileged: ct.unprivileged,
            }));
        }
    }
    if template_node != spec.node {
        if !storages
            .iter()
            .any(|s| s.storage == spec.root_storage() && s.shared == Some(true))
        {
            return Err(unfit(Unfit::NotShared {
                template,
                template_node: template_node.to_string(),
                node: spec.node.to_string(),
                storage: spec.root_storage().to_string(),
            }));
        }
        if spec.kind() == GuestKind::Lxc {
            // Copied onto the spec's (shared) storage, wherever the template's volumes are.
            return Ok(Source::Clone {
                template,
                template_node: template_node.to_string(),
            });
        }
        let cfg = template_config(reads, site, template_node, spec.kind(), template).await?;
        let source_storages = node_facts(reads, site, template_node).await?;
        let local = local_volumes(&cfg, &source_storages.0);
        if !local.is_empty() {
            return Err(unfit(Unfit::LocalVolumes {
                template,
                template_node: template_node.to_string(),
                node: spec.node.to_string(),
                volumes: local,
            }));
        }
    }
    Ok(Source::Clone {
        template,
        template_node: template_node.to_string(),
    })
}

/// The volumes of a config (as `key=volume`) that are not on a storage `shared` among the
/// given ones: drives whose volume is `none` or `cdrom` (the host's drive) have none; a path
/// or an unknown storage counts as local.
fn local_volumes(cfg: &VmConfig, storages: &[NodeStorage]) -> Vec<String> {
    cfg.values
        .iter()
        .filter(|(k, _)| is_volume_key(k))
        .filter_map(|(k, v)| {
            let volume = v.split(',').next().unwrap_or("");
            if volume.is_empty() || volume == "none" || volume == "cdrom" {
                return None;
            }
            let shared = volume.split_once(':').is_some_and(|(sid, _)| {
                storages
                    .iter()
                    .any(|s| s.storage == sid && s.shared == Some(true))
            });
            (!shared).then(|| format!("{k}={volume}"))
        })
        .collect()
}

/// A key PVE's `foreach_volume` visits: the drives, `efidisk0` and `tpmstate0` (not
/// `unused*`).
pub(super) fn is_volume_key(k: &str) -> bool {
    let mount_point = k
        .strip_prefix("mp")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    is_drive_key(k) || k == "efidisk0" || k == "tpmstate0" || k == "rootfs" || mount_point
}

/// An image named by file stem (no template has the name): the one unowned volume with that
/// stem among the node's `import`, `iso` and `images` contents.
async fn volume_by_name(
    site: &SiteCtx<impl Pve>,
    storages: &[NodeStorage],
    spec: &Spec,
    name: &str,
    version: &Version,
) -> Result<Source, ActionError> {
    let client = &site.client;
    let features = version.features();
    let mut found = Vec::new();
    for s in storages {
        for (content, kind) in [
            ("import", VolumeKind::Import),
            ("iso", VolumeKind::Iso),
            ("images", VolumeKind::Images),
        ] {
            if !s.has_content(content) || (kind == VolumeKind::Import && !features.import_content) {
                continue;
            }
            for v in client
                .storage_content(&spec.node, &s.storage, Some(content))
                .await?
            {
                if crate::pve::types::volume_stem(&v.volid) == Some(name) && v.vmid.is_none() {
                    found.push((v.volid, kind));
                }
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found.dedup_by(|a, b| a.0 == b.0);
    match found.as_slice() {
        [(volume, VolumeKind::Iso)] => Ok(Source::Iso {
            volume: volume.clone(),
        }),
        [(volume, kind)] => {
            if !features.import_from {
                return Err(too_old(
                    version,
                    "the import-from disk option",
                    IMPORT_FROM_SINCE,
                ));
            }
            if *kind == VolumeKind::Import {
                check_import_extension(volume).map_err(|why| {
                    unfit(Unfit::ImportName {
                        name: Some(name.to_string()),
                        why,
                    })
                })?;
            }
            Ok(Source::Import {
                volume: volume.clone(),
            })
        }
        [] => Err(unfit(Unfit::NoImage {
            name: name.to_string(),
            site: site.name.clone(),
            node: spec.node.to_string(),
        })),
        many => Err(unfit(Unfit::AmbiguousVolumes {
            name: name.to_string(),
            volumes: many.iter().map(|(v, _)| v.clone()).collect(),
        })),
    }
}

/// The cluster's release lacks a feature: say which release brought it.
fn too_old(version: &Version, what: &str, needed: (u32, u32, u32)) -> ActionError {
    unfit(Unfit::TooOld {
        version: version.version.clone(),
        what: what.to_string(),
        needed: crate::pve::types::release_name(needed),
    })
}

pub(super) fn check_storage(
    storages: &[NodeStorage],
    storage: &str,
    content: &str,
    node: &str,
) -> Result<(), ActionError> {
    let (storage, node) = (storage.to_string(), node.to_string());
    match storages.iter().find(|s| s.storage == storage) {
        None => Err(unfit(Unfit::NoStorage {
            storage,
            node,
            has: storages.iter().map(|s| s.storage.clone()).collect(),
        })),
        Some(s) if !s.has_content(content) => Err(unfit(Unfit::NoContent {
            storage,
            node,
            content: content.to_string(),
            holds: s.content.clone(),
        })),
        Some(s) if s.active == Some(false) => Err(unfit(Unfit::StorageInactive { storage, node })),
        Some(_) => Ok(()),
    }
}

async fn check_volume(
    client: &impl Pve,
    storages: &[NodeStorage],
    node: &str,
    storage: &str,
    volume: &str,
    kind: VolumeKind,
    version: &Version,
) -> Result<Source, ActionError> {
    let features = version.features();
    let content = match kind {
        VolumeKind::Import => {
            if !features.import_content {
                return Err(too_old(
                    version,
                    "import-from of `import` content (qemu-server 8.2.7, pve-storage 8.2.8)",
                    IMPORT_CONTENT_SINCE,
                ));
            }
            check_import_extension(volume)
                .map_err(|why| unfit(Unfit::ImportName { name: None, why }))?;
            "import"
        }
        VolumeKind::Images => "images",
        VolumeKind::Iso => "iso",
        VolumeKind::Vztmpl => {
            let image = Image::Volume {
                storage: storage.to_string(),
                volume: volume.to_string(),
                kind,
            };
            if let Some(why) =
                crate::spec::container::archive_refusal(&image, version.triple(), &version.version)
            {
                return Err(fail(Category::ApiNotSupported, why));
            }
            "vztmpl"
        }
    };
    if matches!(kind, VolumeKind::Images | VolumeKind::Import) && !features.import_from {
        return Err(too_old(
            version,
            "the import-from disk option",
            IMPORT_FROM_SINCE,
        ));
    }
    check_storage(storages, storage, content, node)
        .map_err(|e| fail(Category::ImageNotFound, e.message))?;
    let volumes = client.storage_content(node, storage, Some(content)).await?;
    if !volumes.iter().any(|v| v.volid == volume) {
        return Err(unfit(Unfit::NoVolume {
            volume: volume.to_string(),
            node: node.to_string(),
            storage: storage.to_string(),
            content: content.to_string(),
        }));
    }
    Ok(match kind {
        VolumeKind::Iso => Source::Iso {
            volume: volume.to_string(),
        },
        VolumeKind::Vztmpl => Source::OsTemplate {
            volume: volume.to_string(),
        },
        _ => Source::Import {
            volume: volume.to_string(),
        },
    })
}

/// The storage a spec's cloud-init seed image goes to, from the node's storage listing: its
/// `seedStorage` (checked), else the first active storage with iso content.
pub(super) fn pick_seed_storage(
    storages: &[NodeStorage],
    node: &str,
    vm: &VmSpec,
) -> Result<String, ActionError> {
    if let Some(s) = (vm.cloud_init.as_ref()).and_then(|c| c.seed_storage.as_ref()) {
        check_storage(storages, s, "iso", node)?;
        return Ok(s.clone());
    }
    storages
        .iter()
        .filter(|s| s.has_content("iso") && s.active != Some(false) && s.enabled != Some(false))
        .map(|s| s.storage.clone())
        .min()
        .ok_or_else(|| {
            unfit(Unfit::NoSeedStorage {
                node: node.to_string(),
            })
        })
}
