//! The token's privileges: every one proxsync needs, read on the exact ACL path PVE checks it
//! on (`GET /access/permissions?path=P`: the token's effective privileges on P, as PVE
//! evaluates them: propagation, roles, `NoAccess`, the token/user intersection), those the
//! specs' options need (`startup`, a custom CPU model, `pool`; a container's storages, its
//! template, a privileged container), and whether PVE lets it set the tags it writes. The
//! NICs' SDN paths are checked with the bridges (`resources`), a container's NICs included.

use std::collections::{BTreeMap, BTreeSet};

use super::{Check, Level, check};
use crate::config::SiteConfig;
use crate::pve::Client;
use crate::pve::types::Version;
use crate::spec::images::ImageSpec;
use crate::spec::{GuestKind, Image, Spec, VolumeKind};

/// Privileges proxsync needs, and the ACL path each is checked on.
pub(crate) const REQUIRED_PRIVILEGES: &[(&str, &str)] = &[
    ("/vms", "VM.Allocate"),
    ("/vms", "VM.Clone"),
    ("/vms", "VM.Audit"),
    ("/vms", "VM.Config.CPU"),
    ("/vms", "VM.Config.Memory"),
    ("/vms", "VM.Config.Disk"),
    ("/vms", "VM.Config.Network"),
    ("/vms", "VM.Config.Options"),
    ("/vms", "VM.Config.CDROM"),
    ("/vms", "VM.Config.Cloudinit"),
    ("/vms", "VM.Config.HWType"),
    ("/vms", "VM.PowerMgmt"),
    // A spec's node change is a migration (`GET`/`POST .../migrate`).
    ("/vms", "VM.Migrate"),
    ("/storage", "Datastore.AllocateSpace"),
    ("/storage", "Datastore.Audit"),
    // `GET /cluster/status`: pve-manager `PVE/API2/Cluster.pm` `get_status`,
    // `check => ['perm', '/', ['Sys.Audit']]`: on `/` itself, not `/nodes`.
    ("/", "Sys.Audit"),
    // Other users' tasks on a node (`GET /nodes/{node}/tasks`, a task's status).
    ("/nodes", "Sys.Audit"),
];

/// What `proxsync plan` reads with, and the path each is checked on: the listing and VM
/// configs (VM.Audit), storages and their content (Datastore.Audit), the cluster's status
/// (Sys.Audit on `/`) and the nodes' networks and tasks (Sys.Audit on `/nodes`). The role
/// PVEAuditor holds them all, and nothing that writes: a token for a CI job's plan.
pub(crate) const PLAN_PRIVILEGES: &[(&str, &str)] = &[
    ("/vms", "VM.Audit"),
    ("/storage", "Datastore.Audit"),
    ("/", "Sys.Audit"),
    ("/nodes", "Sys.Audit"),
];

/// Privileges needed on top when specs carry `userData` (seed images are uploaded and removed).
pub(crate) const SEED_PRIVILEGES: &[(&str, &str)] = &[
    ("/storage", "Datastore.AllocateTemplate"),
    ("/storage", "Datastore.Allocate"),
];

/// Privileges needed on top when specs carry `ha` (pve-ha-manager `API2/HA/Resources.pm`:
/// create, update and delete check Sys.Console on `/`).
pub(crate) const HA_PRIVILEGES: &[(&str, &str)] = &[("/", "Sys.Console")];

/// Privileges needed on top when specs carry `changePolicy` with a snapshot: taking and
/// deleting one checks VM.Snapshot, a rollback VM.Snapshot and VM.Snapshot.Rollback (qemu-server
/// `PVE/API2/Qemu.pm` and pve-container `PVE/API2/LXC/Snapshot.pm`, the same in 8.4 and 9.x);
/// its `start` is PVE's VM.PowerMgmt, required of every install already.
pub(crate) const SNAPSHOT_PRIVILEGES: &[(&str, &str)] =
    &[("/vms", "VM.Snapshot"), ("/vms", "VM.Snapshot.Rollback")];

/// What `GET .../agent/network-get-interfaces` (a guest's addresses) and `POST
/// .../agent/ping` (a health check's `agent: true`) need on `/vms/{vmid}` (any one of them):
/// `VM.Monitor` on 8.x (qemu-server 8 `PVE/API2/Qemu/Agent.pm`); 9.x checks
/// `VM.GuestAgent.Audit` or `VM.GuestAgent.Unrestricted` (pve-access-control 9.0.2: "drop
/// VM.Monitor in favor of more granular VM.GuestAgent.* privileges").
pub(crate) fn agent_privileges(version: &Version) -> &'static [&'static str] {
    if version.triple().0 >= 9 {
        &["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"]
    } else {
        &["VM.Monitor"]
    }
}

/// The PVE release from which a custom CPU model needs Mapping.Use on `/mapping/cpu/<name>`
/// rather than Sys.Audit on `/nodes`: qemu-server 9.1.13 (commit "api: gate VM custom CPU
/// model assignment with Mapping.Use"), which pve-manager 9.1.15 is the first to depend on.
pub(crate) const CPU_MAPPING_SINCE: (u32, u32, u32) = (9, 1, 15);

/// What pve-container checks on `/vms/{vmid}` (or `/pool/{pool}`, `check_vm_perm`) to create
/// and configure a container (`PVE/LXC.pm` `check_ct_modify_config_perm`, `PVE/API2/LXC.pm`
/// `create_vm`, `PVE/API2/LXC/Status.pm`): VM.Allocate for the create and for
/// `features: nesting`; CPU for cores, cpulimit, cpuunits; Memory for memory and swap; Network
/// for hostname, nameserver, searchdomain and each `netN`; Disk for rootfs and `mpN` (and
/// `resize`); Options for everything else, `resize` too (it passes `disk` through the same
/// check); PowerMgmt to start, stop and shut down. Each is in [`REQUIRED_PRIVILEGES`] already:
/// listed so a container's needs stay complete if that list ever narrows.
pub(crate) const CT_PRIVILEGES: &[(&str, &str)] = &[
    ("/vms", "VM.Allocate"),
    ("/vms", "VM.Config.CPU"),
    ("/vms", "VM.Config.Memory"),
    ("/vms", "VM.Config.Network"),
    ("/vms", "VM.Config.Disk"),
    ("/vms", "VM.Config.Options"),
    ("/vms", "VM.PowerMgmt"),
];

/// The first PVE release whose create refuses a privileged container (`unprivileged: false`)
/// without Sys.Modify on `/`: pve-container 6.0.6 (commit 4cc73b7 "create/restore: require
/// Sys.Modify for privileged containers", `PVE/API2/LXC.pm` `create_vm`), which every PVE 9
/// release has (9.0 came out with a later one). PVE 8's pve-container 5.x checks nothing.
pub(crate) const PRIVILEGED_CT_SYS_MODIFY_SINCE: (u32, u32, u32) = (9, 0, 0);

/// One requirement: any of `any` on `path`, and the spec option that needs it (for the
/// message), if not every spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Need {
    pub path: String,
    pub any: Vec<&'static str>,
    pub why: Option<String>,
}

impl Need {
    fn new(path: impl Into<String>, any: &[&'static str], why: Option<String>) -> Need {
        Need {
            path: path.into(),
            any: any.to_vec(),
            why,
        }
    }
}

/// Everything the token needs on a site of this version for these specs (pure).
// Long because: one rule per spec option that needs a privilege, in the order the doctor
// lists them.
pub(super) fn needs(version: &Version, specs: &[&Spec]) -> Vec<Need> {
    let mut out: Vec<Need> = REQUIRED_PRIVILEGES
        .iter()
        .map(|(path, p)| Need::new(*path, &[*p], None))
        .collect();
    if (specs.iter()).any(|s| s.vm().is_some_and(|vm| vm.user_data.is_some())) {
        // Specs with userData upload and delete seed images (docs/cloud-init.md).
        let why = Some("userData".to_string());
        out.extend(
            SEED_PRIVILEGES
                .iter()
                .map(|(path, p)| Need::new(*path, &[*p], why.clone())),
        );
    }
    if specs.iter().any(|s| s.ha.is_some()) {
        let why = Some("ha".to_string());
        out.extend(
            HA_PRIVILEGES
                .iter()
                .map(|(path, p)| Need::new(*path, &[*p], why.clone())),
        );
    }
    if let Some(s) = specs.iter().find(|s| {
        s.change_policy
            .as_deref()
            .is_some_and(|c| c.snapshot != crate::spec::health::SnapshotWhen::Never)
    }) {
        let why = Some(format!("changePolicy, as spec {} sets it", s.name));
        out.extend(
            SNAPSHOT_PRIVILEGES
                .iter()
                .map(|(path, p)| Need::new(*path, &[*p], why.clone())),
        );
    }
    out.push(Need::new("/vms", agent_privileges(version), None));
    // qemu-server `PVE/API2/Qemu.pm` `$check_vm_modify_config_perm`: "special case for startup
    // since it changes host behaviour", Sys.Modify on `/`, at create and on every change. Not
    // a container's: pve-container checks VM.Config.Options for it like any other option.
    if let Some(s) = specs
        .iter()
        .find(|s| s.kind() == GuestKind::Qemu && s.hardware.startup.is_some())
    {
        out.push(Need::new(
            "/",
            &["Sys.Modify"],
            Some(format!("startup, as spec {} sets it", s.name)),
        ));
    }
    // `$check_cpu_model_access`: a custom model (`custom-<name>`) at create and when it changes.
    for s in specs {
        if let Some(name) = s
            .hardware
            .cpu_type
            .as_deref()
            .and_then(|m| m.strip_prefix("custom-"))
        {
            let why = Some(format!("cpuType custom-{name} of spec {}", s.name));
            if version.triple() >= CPU_MAPPING_SINCE {
                out.push(Need::new(
                    format!("/mapping/cpu/{name}"),
                    &["Mapping.Use"],
                    why,
                ));
            } else {
                out.push(Need::new("/nodes", &["Sys.Audit"], why));
            }
        }
    }
    // pve-storage `PVE/API2/Storage/Status.pm` `oci_registry_pull` (PVE 9.1): `['and', ['perm',
    // '/storage/{storage}', ['Datastore.AllocateTemplate']], ['perm', '/nodes/{node}',
    // ['Sys.AccessNetwork']]]`, for the storage and node of each container from an OCI image.
    for s in specs {
        if let crate::spec::Image::Oci { reference, storage } = s.image() {
            let why = || {
                Some(format!(
                    "OCI image {reference} of spec {}: PVE pulls it",
                    s.name
                ))
            };
            out.push(Need::new(
                format!("/storage/{storage}"),
                &["Datastore.AllocateTemplate"],
                why(),
            ));
            out.push(Need::new(
                format!("/nodes/{}", s.node),
                &["Sys.AccessNetwork"],
                why(),
            ));
        }
    }
    // pve-manager `PVE/API2/Pool.pm` `update_pool` (`PUT /pools`): Pool.Allocate on the pool a
    // VM joins after its create (a create or clone into the pool needs only that it exists).
    for s in specs {
        if let Some(pool) = &s.hardware.pool {
            out.push(Need::new(
                format!("/pool/{pool}"),
                &["Pool.Allocate"],
                Some(format!(
                    "pool {pool} of spec {}: moving a VM into it",
                    s.name
                )),
            ));
        }
    }
    for s in specs.iter().filter(|s| s.kind() == GuestKind::Lxc) {
        out.extend(container_needs(version, s));
    }
    let mut seen = BTreeSet::new();
    out.retain(|n| seen.insert((n.path.clone(), n.any.clone())));
    out
}

/// What a container spec needs beyond a VM's, as pve-container and pve-storage check it at
/// create (`POST /nodes/{node}/lxc`), clone and on a change.
fn container_needs(version: &Version, s: &Spec) -> Vec<Need> {
    let why = |what: String| Some(format!("{what} of spec {}", s.name));
    let mut out: Vec<Need> = CT_PRIVILEGES
        .iter()
        .map(|(path, p)| Need::new(*path, &[*p], why("a container".into())))
        .collect();
    // `create_vm`'s `$check_and_activate_storage` and `check_ct_modify_config_perm` for a new
    // `STORAGE:SIZE` volume: Datastore.AllocateSpace on the storage of rootfs and of each mpN
    // (a clone checks it on its target storage, the rootfs's here).
    out.push(Need::new(
        format!("/storage/{}", s.root_storage()),
        &["Datastore.AllocateSpace"],
        why(format!("rootfs on {}", s.root_storage())),
    ));
    let mounts = (s.container().into_iter()).flat_map(|c| c.mount_points.iter().flatten());
    for mp in mounts {
        out.push(Need::new(
            format!("/storage/{}", mp.storage),
            &["Datastore.AllocateSpace"],
            why(format!("mountPoints {} on {}", mp.slot, mp.storage)),
        ));
    }
    match s.image() {
        // pve-storage `PVE/Storage.pm` `check_volume_access` for the `ostemplate`: Datastore.
        // Allocate on the storage passes; else a vztmpl volume needs AllocateSpace or Audit.
        Image::Volume {
            storage,
            volume,
            kind: VolumeKind::Vztmpl,
        } => out.push(Need::new(
            format!("/storage/{storage}"),
            &[
                "Datastore.AllocateSpace",
                "Datastore.Audit",
                "Datastore.Allocate",
            ],
            why(format!("template {volume}")),
        )),
        // The clone (`POST .../lxc/{vmid}/clone`): VM.Clone on the template itself.
        Image::Template { vmid } => out.push(Need::new(
            format!("/vms/{vmid}"),
            &["VM.Clone"],
            why(format!("template {vmid}, cloned")),
        )),
        _ => {}
    }
    // A privileged container made from an archive (a clone is checked for nothing of the kind).
    let privileged = s.container().is_some_and(|c| !c.unprivileged);
    let from_archive = matches!(s.image(), Image::Volume { .. });
    if privileged && from_archive && version.triple() >= PRIVILEGED_CT_SYS_MODIFY_SINCE {
        out.push(Need::new(
            "/",
            &["Sys.Modify"],
            why(
                "unprivileged: false (pve-container 6.0.6 and later, PVE 9, create a \
                 privileged container only for it)"
                    .into(),
            ),
        ));
    }
    out
}

/// What PVE checks for `download-url` on the storage (pve-storage `API2/Storage/Status.pm`
/// `download_url`, the same in PVE 8.4 and 9.1): Datastore.AllocateTemplate on
/// `/storage/{storage}`, and [`image_network_held`] on each node it downloads to.
/// Deleting an old version (`DELETE .../content/{volume}`, pve-storage `API2/Storage/Content.pm`
/// `delete`) needs Datastore.Allocate on the storage.
pub(super) fn image_needs(images: &[(&ImageSpec, Vec<&str>)]) -> Vec<Need> {
    (images.iter())
        .flat_map(|(image, _)| {
            let path = format!("/storage/{}", image.storage);
            [
                Need::new(
                    path.clone(),
                    &["Datastore.AllocateTemplate"],
                    Some(format!("ProxmoxImage {}: PVE downloads it", image.name)),
                ),
                Need::new(
                    path,
                    &["Datastore.Allocate"],
                    Some(format!(
                        "ProxmoxImage {}: its old versions are deleted",
                        image.name
                    )),
                ),
            ]
        })
        .collect()
}

/// The other half of `download-url`'s check: `['or', ['perm', '/', ['Sys.Audit',
/// 'Sys.Modify']], ['perm', '/nodes/{node}', ['Sys.AccessNetwork']]]` (a list of privileges
/// in one `perm` needs them all).
fn image_network_held(has: &dyn Fn(&str, &str) -> bool, node: &str) -> bool {
    has(&format!("/nodes/{node}"), "Sys.AccessNetwork")
        || (has("/", "Sys.Audit") && has("/", "Sys.Modify"))
}

pub(super) async fn check_privileges(
    client: &Client,
    site: &SiteConfig,
    version: &Version,
    specs: &[&Spec],
    images: &[(&ImageSpec, Vec<&str>)],
    tags: &BTreeSet<String>,
) -> Vec<Check> {
    let subject = format!("{} privileges", site.name);
    let mut required = needs(version, specs);
    required.extend(image_needs(images));
    // The nodes images are downloaded to, each with the first image that needs it.
    let mut image_nodes: BTreeMap<String, &str> = BTreeMap::new();
    for (image, nodes) in images {
        for node in nodes {
            image_nodes
                .entry(node.to_string())
                .or_insert(image.name.as_str());
        }
    }
    let node_paths: Vec<String> = image_nodes.keys().map(|n| format!("/nodes/{n}")).collect();

    // The effective privileges on each exact path, plus `/` for tags.
    let paths: BTreeSet<&str> = required
        .iter()
        .map(|n| n.path.as_str())
        .chain(node_paths.iter().map(String::as_str))
        .chain(["/"])
        .collect();
    let mut held: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for path in paths {
        match client.permissions(Some(path)).await {
            // PVE answers `{path: {privilege: propagate}}`, or `{}` when nothing is held.
            Ok(mut perms) => {
                let privs = perms.remove(path).unwrap_or_default();
                held.insert(path, privs.into_keys().collect());
            }
            Err(e) => return vec![check(Level::Fail, subject, e.to_string(), None)],
        }
    }
    let has = |path: &str, p: &str| held.get(path).is_some_and(|s| s.contains(p));

    let mut missing: Vec<String> = required
        .iter()
        .filter(|n| !n.any.iter().any(|p| has(&n.path, p)))
        .map(|n| match &n.why {
            Some(why) => format!("{} on {} ({why})", n.any.join(" or "), n.path),
            None => format!("{} on {}", n.any.join(" or "), n.path),
        })
        .collect();
    missing.extend(
        (image_nodes.iter())
            .filter(|(node, _)| !image_network_held(&has, node))
            .map(|(node, image)| {
                format!(
                    "Sys.AccessNetwork on /nodes/{node}, or Sys.Audit and Sys.Modify on / \
                     (ProxmoxImage {image}: PVE downloads it on {node})"
                )
            }),
    );
    let mut out = Vec::new();
    if missing.is_empty() {
        out.push(check(
            Level::Ok,
            subject,
            format!(
                "token {} holds every privilege proxsync needs",
                site.token_id
            ),
            None,
        ));
    } else {
        let names: BTreeSet<&str> = (required.iter().map(|n| n.any[0]))
            .chain((!image_nodes.is_empty()).then_some("Sys.AccessNetwork"))
            .collect();
        out.push(check(
            Level::Fail,
            subject,
            format!("token {} lacks {}", site.token_id, missing.join(", ")),
            Some(format!(
                "pveum role add Proxsync --privs \"{}\" && pveum acl modify / --tokens '{}' --roles Proxsync \
                 (and the same for its user, unless the token has privsep=0)",
                names.into_iter().collect::<Vec<_>>().join(","),
                site.token_id
            )),
        ));
    }
    out.push(plan_check(site, &has));
    out.push(tag_check(client, site, has("/", "Sys.Modify"), tags).await);
    out
}

/// Whether the token may make `proxsync plan`'s reads ([`PLAN_PRIVILEGES`]): a read-only
/// token for a CI job passes this one line and fails the others, which is as it should be.
fn plan_check(site: &SiteConfig, has: &dyn Fn(&str, &str) -> bool) -> Check {
    let subject = format!("{} plan privileges", site.name);
    let lacks: Vec<String> = PLAN_PRIVILEGES
        .iter()
        .filter(|(path, p)| !has(path, p))
        .map(|(path, p)| format!("{p} on {path}"))
        .collect();
    let needs = "proxsync plan reads with VM.Audit on /vms, Datastore.Audit on /storage and \
                 Sys.Audit on / (the role PVEAuditor)";
    if lacks.is_empty() {
        return check(
            Level::Ok,
            subject,
            format!("{needs}: token {} holds them", site.token_id),
            None,
        );
    }
    check(
        Level::Fail,
        subject,
        format!(
            "{needs}: token {} lacks {}",
            site.token_id,
            lacks.join(", ")
        ),
        Some(format!(
            "pveum acl modify / --tokens '{}' --roles PVEAuditor (and the same for its user, \
             unless the token has privsep=0)",
            site.token_id
        )),
    )
}

/// Setting tags needs Sys.Modify on `/` unless the datacenter's `user-tag-access` lets users
/// set them (pve-guest-common `PVE/GuestHelpers.pm` `assert_tag_permissions`).
async fn tag_check(
    client: &Client,
    site: &SiteConfig,
    sys_modify_on_root: bool,
    tags: &BTreeSet<String>,
) -> Check {
    let subject = format!("{} tags", site.name);
    if sys_modify_on_root {
        return check(
            Level::Ok,
            subject,
            "the token holds Sys.Modify on /: PVE lets it set any tag",
            None,
        );
    }
    let options = match client.cluster_options().await {
        Ok(o) => o,
        Err(e) => {
            return check(
                Level::Warn,
                subject,
                format!(
                    "cannot read the datacenter options to see which tags the token may set: {e}"
                ),
                Some("grant Sys.Audit on / so doctor can read them".into()),
            );
        }
    };
    let refused: Vec<&str> = tags
        .iter()
        .filter(|t| !options.user_may_set(t))
        .map(String::as_str)
        .collect();
    let mode = options.user_allow();
    if refused.is_empty() {
        return check(
            Level::Ok,
            subject,
            format!(
                "user-tag-access is {mode}: PVE lets the token set {}",
                tags.iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None,
        );
    }
    let registered = options.registered_tags();
    check(
        Level::Warn,
        subject,
        format!(
            "the token lacks Sys.Modify on /, and the datacenter option user-tag-access is {mode}{}: \
             PVE will refuse to set {} on its VMs",
            if registered.is_empty() {
                String::new()
            } else {
                format!(" (registered tags: {})", registered.join(", "))
            },
            refused.join(", ")
        ),
        Some(format!(
            "pvesh set /cluster/options --user-tag-access user-allow=free (or add the tags to \
             user-allow-list), or grant Sys.Modify on / to token '{}' and its user",
            site.token_id
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(v: &str) -> Version {
        Version {
            version: v.into(),
            release: None,
            repoid: None,
        }
    }

    fn missing_from_base(v: &str, extra: &str) -> Vec<String> {
        added(v, &crate::spec::test_spec(extra))
    }

    /// What `spec` needs beyond a site's base (`needs` of no spec), as `PRIVS PATH`.
    fn added(v: &str, spec: &Spec) -> Vec<String> {
        let base = needs(&version(v), &[]);
        needs(&version(v), &[spec])
            .into_iter()
            .filter(|n| !base.contains(n))
            .map(|n| format!("{} {}", n.any.join("|"), n.path))
            .collect()
    }

    /// Container `dns-01` (site `lab`, node `pve1`) with `extra` lines in its `forProvider`.
    fn ct_spec(extra: &str) -> Spec {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata: {{name: dns-01}}\nspec:\n  \
             forProvider:\n    site: lab\n    node: pve1\n{extra}"
        );
        let (mut specs, diags) = crate::spec::parse_file("dns.yaml", yaml.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        specs.remove(0)
    }

    const ARCHIVE: &str = "    template: local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\n";

    #[test]
    fn a_privileged_container_needs_sys_modify_on_pve_9_only() {
        let privileged = ct_spec(&format!(
            "{ARCHIVE}    unprivileged: false\n    networks: [{{name: eth0, bridge: vmbr0, ip: dhcp}}]\n"
        ));
        let on_9 = added("9.1.2", &privileged);
        assert!(on_9.contains(&"Sys.Modify /".to_string()), "{on_9:?}");
        assert!(added("9.0.3", &privileged).contains(&"Sys.Modify /".to_string()));
        assert!(
            !added("8.4.1", &privileged)
                .iter()
                .any(|n| n.starts_with("Sys.Modify"))
        );
        // Unprivileged (the default): nothing on / at all.
        let unprivileged = ct_spec(ARCHIVE);
        assert!(
            !added("9.1.2", &unprivileged)
                .iter()
                .any(|n| n.ends_with(" /"))
        );
        // A clone of a CT template is not checked for it.
        let clone = ct_spec("    template: 9100\n    unprivileged: false\n");
        assert!(
            !added("9.1.2", &clone)
                .iter()
                .any(|n| n.starts_with("Sys.Modify"))
        );
        let why = needs(&version("9.1.2"), &[&privileged])
            .into_iter()
            .find(|n| n.any == ["Sys.Modify"])
            .and_then(|n| n.why)
            .unwrap();
        assert!(
            why.contains("unprivileged: false") && why.contains("dns-01"),
            "{why}"
        );
    }

    /// A spec with `changePolicy` needs the snapshot privileges, on 8.4 and 9.x alike; one
    /// that says `snapshot: Never` or has no changePolicy does not.
    #[test]
    fn a_change_policy_needs_the_snapshot_privileges() {
        let guarded = ct_spec(&format!(
            "{ARCHIVE}    health: {{tcp: {{port: 22}}}}\n    changePolicy: {{snapshot: BeforeRestart}}\n"
        ));
        for release in ["8.4.1", "9.1.2"] {
            let added = added(release, &guarded);
            assert!(
                added.contains(&"VM.Snapshot /vms".to_string())
                    && added.contains(&"VM.Snapshot.Rollback /vms".to_string()),
                "{release}: {added:?}"
            );
        }
        let never = ct_spec(&format!(
            "{ARCHIVE}    changePolicy: {{snapshot: Never, rollback: Never}}\n"
        ));
        assert!(
            !added("9.1.2", &never)
                .iter()
                .any(|n| n.starts_with("VM.Snapshot"))
        );
        assert!(
            !added("9.1.2", &ct_spec(ARCHIVE))
                .iter()
                .any(|n| n.starts_with("VM.Snapshot"))
        );
    }

    #[test]
    fn a_container_needs_its_template_and_volume_storages() {
        let spec = ct_spec(&format!(
            "{ARCHIVE}    rootfs: {{storage: fast, size: 8Gi}}\n    mountPoints:\n      - \
             {{slot: mp0, path: /srv/data, storage: bulk, size: 10Gi}}\n"
        ));
        assert_eq!(
            added("8.4.1", &spec),
            [
                "Datastore.AllocateSpace /storage/fast",
                "Datastore.AllocateSpace /storage/bulk",
                "Datastore.AllocateSpace|Datastore.Audit|Datastore.Allocate /storage/local",
            ]
        );
        // By default the root filesystem is on local-lvm.
        assert!(
            added("9.1.2", &ct_spec(ARCHIVE))
                .contains(&"Datastore.AllocateSpace /storage/local-lvm".to_string())
        );
    }

    #[test]
    fn a_container_cloned_from_a_template_needs_vm_clone_on_it() {
        let added = added("9.1.2", &ct_spec("    template: 9100\n"));
        assert_eq!(
            added,
            [
                "Datastore.AllocateSpace /storage/local-lvm",
                "VM.Clone /vms/9100"
            ]
        );
    }

    #[test]
    fn a_container_needs_what_pve_container_checks_on_vms() {
        let spec = ct_spec(&format!("{ARCHIVE}    features: {{nesting: true}}\n"));
        let all = needs(&version("9.1.2"), &[&spec]);
        for (path, p) in CT_PRIVILEGES {
            assert!(
                all.iter().any(|n| n.path == *path && n.any == [*p]),
                "{p} on {path}"
            );
        }
        // A container's startup is VM.Config.Options to pve-container, not Sys.Modify on /.
        let startup = ct_spec(&format!("{ARCHIVE}    startup: {{order: 1}}\n"));
        assert!(
            !added("9.1.2", &startup)
                .iter()
                .any(|n| n.starts_with("Sys.Modify"))
        );
    }

    #[test]
    fn options_add_the_privileges_pve_checks_for_them() {
        assert_eq!(
            missing_from_base("9.1.2", "    startup: {order: 1}\n"),
            ["Sys.Modify /"]
        );
        assert_eq!(
            missing_from_base("9.1.15", "    cpuType: custom-fast\n"),
            ["Mapping.Use /mapping/cpu/fast"]
        );
        assert_eq!(
            missing_from_base("9.2.0", "    cpuType: custom-fast\n"),
            ["Mapping.Use /mapping/cpu/fast"]
        );
        // Before 9.1.15: Sys.Audit on /nodes, which every token needs anyway.
        assert!(missing_from_base("9.1.14", "    cpuType: custom-fast\n").is_empty());
        assert!(missing_from_base("8.4.1", "    cpuType: custom-fast\n").is_empty());
        assert!(missing_from_base("9.1.15", "    cpuType: host\n").is_empty());
        assert_eq!(
            missing_from_base("8.4.1", "    pool: prod/web\n"),
            ["Pool.Allocate /pool/prod/web"]
        );
        let why = needs(
            &version("9.1.2"),
            &[&crate::spec::test_spec("    startup: {order: 1}\n")],
        )
        .into_iter()
        .find(|n| n.any == ["Sys.Modify"])
        .and_then(|n| n.why)
        .unwrap();
        assert!(why.contains("startup") && why.contains("web-01"), "{why}");
        // No SDN path here: the bridges' checks read each NIC's.
        assert!(
            needs(&version("9.1.2"), &[])
                .iter()
                .all(|n| !n.path.starts_with("/sdn"))
        );
    }
}
