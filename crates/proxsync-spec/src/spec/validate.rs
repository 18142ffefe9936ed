//! From a located YAML tree to a typed [`Spec`], collecting every problem on the way.

use super::diag::Pos;
use super::fields::{Ctx, Obj, TOP, enum_field, object, size_field, string};
use super::image::{image_from_int, parse_image};
use super::names::{
    check_bridge, check_node, check_site, check_spec_name, check_storage, check_tag, check_tenant,
    check_vm_name,
};
use super::templates::TEMPLATE_KIND;
use super::units::{GIB, MIB};
use super::yaml::{Node, Value};
use super::{
    API_VERSIONS, DEFAULT_CPU, DEFAULT_DISK_BYTES, DEFAULT_MEMORY_MIB, DEFAULT_NETWORK,
    DEFAULT_STORAGE, DeletionPolicy, GuestKind, KIND, LXC_KIND, MAX_CPU, MAX_DISK_BYTES,
    MAX_MEMORY_BYTES, MAX_USER_DATA_BYTES, MIN_DISK_BYTES, MIN_MEMORY_BYTES, PowerState, Spec,
    TENANT_LABELS,
};
use super::{CloudInit, Guest, Image, VmSpec};

/// The document's `metadata.name` when it is a plain string, read without validating (to
/// attribute a SOPS refusal to its spec).
pub(super) fn document_name(root: &Node) -> Option<String> {
    let find = |n: &Node, key: &str| match &n.value {
        Value::Map(entries) => entries
            .iter()
            .find_map(|(k, v)| matches!(&k.value, Value::Str(s) if s == key).then(|| v.clone())),
        _ => None,
    };
    if !is_vm_kind(root) {
        return None;
    }
    match find(&find(root, "metadata")?, "name")?.value {
        Value::Str(s) if super::names::check_spec_name(&s).is_ok() => Some(s),
        _ => None,
    }
}

/// Whether the document says `kind: ProxmoxVM` or `ProxmoxLXC`, or says no kind (then it is
/// read as a VM).
fn is_vm_kind(root: &Node) -> bool {
    let Value::Map(entries) = &root.value else {
        return false;
    };
    match entries
        .iter()
        .find(|(k, _)| matches!(&k.value, Value::Str(s) if s == "kind"))
    {
        None => true,
        Some((_, v)) => {
            matches!(&v.value, Value::Str(s) if s == KIND || s == LXC_KIND || s == TEMPLATE_KIND)
        }
    }
}

/// How the document's top-level mapping is named in messages.
const TOP_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "spec"];
const METADATA_FIELDS: &[&str] = &["name", "labels", "annotations"];
const SPEC_FIELDS: &[&str] = &[
    "forProvider",
    "deletionPolicy",
    "imagePolicy",
    "managementPolicy",
    "suspend",
    "dependsOn",
    "providerConfigRef",
];
pub(super) const FOR_PROVIDER_FIELDS: &[&str] = &[
    "site",
    "node",
    "name",
    "cpu",
    "memory",
    "disk",
    "storage",
    "network",
    "networks",
    "disks",
    "destroyDisks",
    "image",
    "userData",
    "cloudInit",
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

/// Validates one document. Returns the spec if the document has no error; diagnostics go to
/// `ctx` (attributed to the spec's name when it is known).
pub(crate) fn validate_document(ctx: &mut Ctx, root: &Node) -> Option<Spec> {
    let first_diag = ctx.diags.len();
    let errors_before = ctx.error_count();
    let (spec, name) = document(ctx, root);
    // A document of another kind (a misspelt `ProxmoxVMSet`) is not the spec its
    // `metadata.name` names: its errors are tied to no name, so the set reads as incomplete
    // and nothing is taken as removed (not the members a set of that name has).
    let name = name.filter(|_| is_vm_kind(root));
    for d in &mut ctx.diags[first_diag..] {
        d.spec = name.clone();
    }
    if ctx.error_count() > errors_before {
        None
    } else {
        spec
    }
}

/// The document's checks; returns the spec when all parts were readable, and the spec's name
/// when it is known (to attribute diagnostics). Every part is checked even when an earlier
/// one failed, in the order written, so all problems are reported at once.
fn document(ctx: &mut Ctx, root: &Node) -> (Option<Spec>, Option<String>) {
    if !matches!(root.value, Value::Map(_)) {
        ctx.error(
            root.pos,
            format!(
                "a spec document must be a mapping with apiVersion, kind, metadata and spec; found {}",
                root.value.describe()
            ),
        );
        return (None, None);
    }
    let Some(top) = object(ctx, root, TOP, Some(TOP_FIELDS)) else {
        return (None, None);
    };
    let (api_version, kind, template) = api_version_and_kind(ctx, &top);
    let meta = metadata(ctx, &top, root.pos, kind);
    let name = meta.name.clone();
    let Some((policies, fp)) = spec_section(ctx, &top, kind, template) else {
        return (None, name);
    };
    let parts = match kind {
        GuestKind::Qemu => for_provider(ctx, &fp, name.as_deref(), meta.adopt.is_some()),
        GuestKind::Lxc => container_for_provider(ctx, &fp, name.as_deref(), meta.adopt.is_some()),
    };
    let spec = match (api_version, policies, parts.complete()) {
        (Some(api_version), Some(policies), Some(parts)) => {
            let at = policies.image_at;
            assemble(ctx.file(), api_version, meta, policies, parts)
                .filter(|spec| image_policy_fits(ctx, spec, at))
                .and_then(|spec| match template {
                    true => super::templates::restrict(ctx, &top, &fp, spec),
                    false => Some(spec),
                })
        }
        _ => None,
    };
    (spec, name)
}

/// `spec.forProvider`, each part checked on its own (`None`: it had errors, reported).
struct ForProvider {
    placement: Option<Placement>,
    hardware: Option<super::Hardware>,
    /// The kind's own fields.
    guest: Option<Guest>,
    workload: Option<Workload>,
    reboot: Option<super::RebootPolicy>,
    allow_recreate_on_site_change: Option<bool>,
    ha: Option<Option<super::Ha>>,
    health: Option<Option<super::health::Health>>,
    change_policy: Option<Option<super::health::ChangePolicy>>,
}

/// `spec.forProvider` of a container: its own fields, the hardware fields it shares with a
/// VM, and the lifecycle fields read as a VM's.
fn container_for_provider(
    ctx: &mut Ctx,
    fp: &Obj,
    name: Option<&str>,
    adopting: bool,
) -> ForProvider {
    let placement = placement(ctx, fp);
    let own = super::container::container(ctx, fp, name, adopting);
    let shared = super::container::shared_hardware(fp);
    let hardware = super::hardware::hardware(ctx, &shared, None, None);
    let workload = workload(ctx, fp);
    let reboot = super::lifecycle::reboot_policy(ctx, fp);
    let allow_recreate_on_site_change = super::lifecycle::allow_recreate_on_site_change(ctx, fp);
    let ha = ha_field(ctx, fp, workload.as_ref());
    let health = super::health::health_field(ctx, fp, GuestKind::Lxc);
    let change_policy = super::health::change_policy_field(ctx, fp);
    ForProvider {
        placement,
        hardware,
        guest: own.map(|ct| Guest::Container(Box::new(ct))),
        workload,
        reboot,
        allow_recreate_on_site_change,
        ha,
        health,
        change_policy,
    }
}

/// `adopting`: the spec consents to take over an existing VM, so `image` may be absent.
fn for_provider(ctx: &mut Ctx, fp: &Obj, name: Option<&str>, adopting: bool) -> ForProvider {
    let placement = placement(ctx, fp);
    let vm_name = vm_name(ctx, fp, name);
    let resources = resources(ctx, fp);
    let hardware = super::hardware::hardware(
        ctx,
        fp,
        resources.as_ref().map(|r| r.cpu),
        resources.as_ref().map(|r| r.memory_mib),
    );
    let networks = super::networks::networks_field(ctx, fp);
    let disks = super::disks::disks_field(ctx, fp);
    let destroy_disks = match &disks {
        Some(d) => super::disks::destroy_disks_field(ctx, fp, d.as_deref()),
        None => None,
    };
    let image = image_field(ctx, fp, adopting);
    let first_boot = first_boot(ctx, fp);
    let workload = workload(ctx, fp);
    let reboot = super::lifecycle::reboot_policy(ctx, fp);
    let allow_recreate_on_site_change = super::lifecycle::allow_recreate_on_site_change(ctx, fp);
    let ha = ha_field(ctx, fp, workload.as_ref());
    let health = super::health::health_field(ctx, fp, GuestKind::Qemu);
    let change_policy = super::health::change_policy_field(ctx, fp);
    let vm = VmParts {
        vm_name,
        resources,
        networks,
        disks,
        destroy_disks,
        image,
        first_boot,
    };
    ForProvider {
        placement,
        hardware,
        guest: vm.complete().map(Guest::Vm),
        workload,
        reboot,
        allow_recreate_on_site_change,
        ha,
        health,
        change_policy,
    }
}

/// A VM's own fields, each checked on its own (`None`: it had errors, reported).
struct VmParts {
    vm_name: Option<String>,
    resources: Option<Resources>,
    networks: Option<Option<Vec<super::Nic>>>,
    disks: Option<Option<Vec<super::Disk>>>,
    destroy_disks: Option<Vec<String>>,
    image: Option<(Image, Pos)>,
    first_boot: Option<(Option<String>, Option<CloudInit>)>,
}

impl VmParts {
    /// The VM's fields when every part was readable. With `networks`, `network` is the first
    /// NIC's bridge; with `disks`, `disk` and `storage` are the boot disk's (the image's disk,
    /// EFI and TPM).
    fn complete(self) -> Option<VmSpec> {
        let mut resources = self.resources?;
        let (networks, disks) = (self.networks?, self.disks?);
        let ((image, image_pos), (user_data, cloud_init)) = (self.image?, self.first_boot?);
        if let Some(first) = networks.as_ref().and_then(|n| n.first()) {
            resources.network = first.bridge.clone();
        }
        if let Some(boot) = disks.as_ref().and_then(|d| d.iter().find(|d| d.boot)) {
            resources.disk_bytes = boot.size_bytes;
            resources.storage = boot.storage.clone();
        }
        Some(VmSpec {
            vm_name: self.vm_name?.into(),
            cpu: resources.cpu,
            memory_mib: resources.memory_mib,
            disk_bytes: resources.disk_bytes,
            storage: resources.storage.into(),
            network: resources.network.into(),
            image,
            image_pos,
            user_data,
            cloud_init: cloud_init.map(Box::new),
            networks,
            disks,
            destroy_disks: self.destroy_disks?,
        })
    }
}

/// `ha`, read against the power state (`None` when it or the power state has an error).
fn ha_field(ctx: &mut Ctx, fp: &Obj, workload: Option<&Workload>) -> Option<Option<super::Ha>> {
    match (fp.get("ha"), workload) {
        (None, _) => Some(None),
        (Some(n), Some(w)) => super::ha::ha_field(ctx, n, w.power_state).map(Some),
        (Some(_), None) => None,
    }
}

/// `spec.forProvider` with every part readable.
struct Parts {
    placement: Placement,
    hardware: super::Hardware,
    guest: Guest,
    workload: Workload,
    reboot: super::RebootPolicy,
    allow_recreate_on_site_change: bool,
    ha: Option<super::Ha>,
    health: Option<super::health::Health>,
    change_policy: Option<super::health::ChangePolicy>,
}

impl ForProvider {
    fn complete(self) -> Option<Parts> {
        Some(Parts {
            placement: self.placement?,
            hardware: self.hardware?,
            guest: self.guest?,
            workload: self.workload?,
            reboot: self.reboot?,
            allow_recreate_on_site_change: self.allow_recreate_on_site_change?,
            ha: self.ha?,
            health: self.health?,
            change_policy: self.change_policy?,
        })
    }
}

/// The spec from its checked parts; `None` without a name (reported by `metadata`).
fn assemble(
    file: &str,
    api_version: String,
    meta: Metadata,
    policies: Policies,
    parts: Parts,
) -> Option<Spec> {
    let Policies {
        deletion: deletion_policy,
        image: image_policy,
        image_at: _,
        management: management_policy,
        suspend,
        depends_on,
    } = policies;
    let Parts {
        placement,
        hardware,
        guest,
        mut workload,
        reboot,
        allow_recreate_on_site_change,
        ha,
        health,
        change_policy,
    } = parts;
    if let Some(t) = &meta.tenant {
        workload.tags.push(format!("tenant_{t}"));
    }
    workload.tags.sort();
    workload.tags.dedup();
    Some(Spec {
        name: meta.name?.into(),
        file: file.into(),
        pos: meta.name_pos,
        api_version: api_version.into(),
        tenant: meta.tenant,
        labels: meta.labels,
        site: placement.site.into(),
        site_pos: placement.site_pos,
        node: placement.node.into(),
        node_pos: placement.node_pos,
        guest,
        sealed: None,
        power_state: workload.power_state,
        tags: workload.tags,
        deletion_policy,
        image_policy,
        management_policy,
        suspend,
        depends_on: depends_on.into_boxed_slice(),
        reboot,
        allow_recreate_on_site_change,
        ha: ha.map(Box::new),
        health: health.map(Box::new),
        change_policy: change_policy.map(Box::new),
        renamed_from: meta.renamed_from,
        adopt: meta.adopt,
        hardware: hardware.shared(),
        defaults: None,
        set: None,
        template: None,
        hashes: Default::default(),
    })
}

/// `imagePolicy: Recreate` rebuilds the guest from a new version of its `ProxmoxImage`: only a
/// VM made from one (`image: {image: NAME}`) has a version to follow, and the rebuild deletes
/// the guest, which only `deletionPolicy: Delete` allows. Reported at `at`; false: refused.
fn image_policy_fits(ctx: &mut Ctx, spec: &Spec, at: Option<Pos>) -> bool {
    if spec.image_policy != super::ImagePolicy::Recreate {
        return true;
    }
    let at = at.unwrap_or(spec.pos);
    if !matches!(
        spec.image(),
        super::Image::Managed(_) | super::Image::Built { .. }
    ) {
        ctx.error(
            at,
            "spec.imagePolicy: Recreate rebuilds a VM from a new version of its ProxmoxImage or \
             ProxmoxTemplate; this guest is not made from one: set forProvider.image to \
             {image: NAME} or {template: NAME}, or remove imagePolicy (Keep, the default, \
             never rebuilds)",
        );
        return false;
    }
    if spec.deletion_policy != DeletionPolicy::Delete {
        ctx.error(
            at,
            "spec.imagePolicy: Recreate deletes the VM to rebuild it, which \
             deletionPolicy: Orphan forbids; set deletionPolicy: Delete, or imagePolicy: Keep",
        );
        return false;
    }
    true
}

/// `apiVersion`, checked to be supported, what `kind` makes (a VM when it is missing or
/// wrong: the wrong kind is reported), and whether it is a `ProxmoxTemplate` (a VM made into a
/// template).
fn api_version_and_kind(ctx: &mut Ctx, top: &Obj) -> (Option<String>, GuestKind, bool) {
    let api_version = top
        .required(
            ctx,
            "apiVersion",
            &format!("one of {}", API_VERSIONS.join(", ")),
        )
        .and_then(|n| {
            let s = string(ctx, n, "apiVersion", API_VERSIONS[0])?;
            if API_VERSIONS.contains(&s) {
                Some(s.to_string())
            } else {
                ctx.error(
                    n.pos,
                    format!(
                        "apiVersion {s:?} is not supported; use {}",
                        API_VERSIONS.join(" or ")
                    ),
                );
                None
            }
        });
    let mut kind = GuestKind::Qemu;
    let mut template = false;
    if let Some(n) = top.required(ctx, "kind", KIND)
        && let Some(s) = string(ctx, n, "kind", KIND)
    {
        if s == LXC_KIND {
            kind = GuestKind::Lxc;
        } else if s == TEMPLATE_KIND {
            template = true;
        } else if s != KIND {
            let kinds = [
                KIND,
                LXC_KIND,
                super::sets::SET_KIND,
                super::defaults::DEFAULTS_KIND,
                super::images::IMAGE_KIND,
                TEMPLATE_KIND,
            ];
            let hint = super::closest(s, kinds.iter().copied())
                .map_or(String::new(), |k| format!(" (did you mean {k:?}?)"));
            ctx.error(
                n.pos,
                format!(
                    "kind {s:?} is not supported{hint}; a spec is a {KIND} or a {LXC_KIND} (a \
                     {} groups alike VMs; {} belongs in a _defaults.yaml)",
                    super::sets::SET_KIND,
                    super::defaults::DEFAULTS_KIND
                ),
            );
        }
    }
    (api_version, kind, template)
}

/// What `metadata` says, each part `None` when absent or invalid.
struct Metadata {
    name: Option<String>,
    /// Where the name is written (the document's start when it is not).
    name_pos: Pos,
    tenant: Option<String>,
    /// Every label whose value is a string (what `[source] selector` matches).
    labels: std::collections::BTreeMap<String, String>,
    renamed_from: Option<String>,
    /// `proxsync.io/adopt` with `proxsync.io/adopt-uuid`: consent to take over one VM.
    adopt: Option<Box<super::AdoptConsent>>,
}

/// `metadata`: the name, the tenant label and the `proxsync.io/renamed-from` annotation, and
/// a consent to adopt (its proof the `kind`'s).
fn metadata(ctx: &mut Ctx, top: &Obj, root_pos: Pos, kind: GuestKind) -> Metadata {
    let mut out = Metadata {
        name: None,
        name_pos: root_pos,
        tenant: None,
        labels: Default::default(),
        renamed_from: None,
        adopt: None,
    };
    let meta = top.required(ctx, "metadata", "a mapping with name (and optional labels)");
    let Some(meta) = meta.and_then(|n| object(ctx, n, "metadata", Some(METADATA_FIELDS))) else {
        return out;
    };
    if let Some(n) = meta.required(ctx, "name", "the spec's unique name, e.g. web-01")
        && let Some(s) = string(ctx, n, "metadata.name", "web-01")
    {
        out.name_pos = n.pos;
        out.name = ctx.check(n.pos, check_spec_name(s).map(|()| s.to_string()));
    }
    if let Some(labels) = meta.get("labels") {
        out.tenant = labels_tenant(ctx, labels, &mut out.labels);
    }
    if let Some(annotations) = meta.get("annotations")
        && let Some(obj) = object(ctx, annotations, "metadata.annotations", None)
    {
        let mut adopt = super::adopt::Written::default();
        for (k, k_pos, v) in &obj.entries {
            let text = string(ctx, v, &obj.path(k), "\"text\"");
            let Some(text) = text else { continue };
            match *k {
                crate::spec::RENAMED_FROM => {
                    out.renamed_from =
                        ctx.check(v.pos, check_spec_name(text).map(|()| text.to_string()));
                }
                crate::spec::ADOPT => {
                    adopt.vmid = Some((ctx.check(v.pos, super::adopt::check_vmid(text)), v.pos))
                }
                crate::spec::ADOPT_UUID => {
                    adopt.uuid = Some((ctx.check(v.pos, super::adopt::check_uuid(text)), v.pos))
                }
                crate::spec::ADOPT_HWADDR => {
                    adopt.hwaddr = Some((ctx.check(v.pos, super::adopt::check_hwaddr(text)), v.pos))
                }
                other => unknown_annotation(ctx, other, *k_pos),
            }
        }
        out.adopt = super::adopt::consent(ctx, kind, adopt);
    }
    out
}

/// The annotations proxsync reads; any other key under `proxsync.io/` is a mistake.
const ANNOTATIONS: [&str; 4] = [
    crate::spec::RENAMED_FROM,
    crate::spec::ADOPT,
    crate::spec::ADOPT_UUID,
    crate::spec::ADOPT_HWADDR,
];

/// An annotation under `proxsync.io/` that proxsync does not know is an error: a typo would
/// otherwise be a silent no-op (`proxsync.io/renamed-form` confirming no rename). Other
/// annotations are the user's.
fn unknown_annotation(ctx: &mut Ctx, key: &str, at: Pos) {
    if !key.starts_with("proxsync.io/") {
        return;
    }
    let hint = match key {
        "proxsync.io/suspend" => "; to suspend the spec write spec.suspend: true".to_string(),
        "proxsync.io/depends-on" | "proxsync.io/dependsOn" => {
            "; write spec.dependsOn: [NAME, ...]".to_string()
        }
        _ => match super::closest(key, ANNOTATIONS) {
            Some(c) => format!("; did you mean {c}?"),
            None => String::new(),
        },
    };
    ctx.error(
        at,
        format!(
            "metadata.annotations: unknown proxsync annotation {key:?}; the known ones are {}{hint}",
            ANNOTATIONS.join(", ")
        ),
    );
}

/// `spec`: the deletion policy (`None` when invalid) and the `forProvider` mapping, or `None`
/// when either mapping is missing or not a mapping.
/// `spec.dependsOn`: spec names, each once; whether they exist and form no cycle is checked
/// over the whole set (`load::check_dependencies`).
fn depends_on(ctx: &mut Ctx, n: &Node) -> Option<Vec<String>> {
    let items = super::fields::string_list(ctx, n, "spec.dependsOn", "db-01", MAX_DEPENDS_ON)?;
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    let mut ok = true;
    for (name, pos) in items {
        if let Err(e) = check_spec_name(&name) {
            let e = e.replacen("metadata.name", "the name", 1);
            ctx.error(pos, format!("spec.dependsOn: {e}"));
            ok = false;
        } else if out.contains(&name) {
            ctx.error(pos, format!("spec.dependsOn names {name} twice"));
            ok = false;
        } else {
            out.push(name);
        }
    }
    ok.then_some(out)
}

/// The most specs one spec may depend on.
pub(crate) const MAX_DEPENDS_ON: usize = 64;

/// `spec.deletionPolicy`, `spec.managementPolicy`, `spec.suspend` and `spec.dependsOn`.
struct Policies {
    deletion: DeletionPolicy,
    /// `spec.imagePolicy`, and where it is written (checked against the guest's image and
    /// `deletionPolicy` once the spec is whole: [`image_policy_fits`]).
    image: super::ImagePolicy,
    image_at: Option<Pos>,
    /// `None`: the config's `[reconcile] management_policy`.
    management: Option<super::ManagementPolicy>,
    /// `spec.suspend`.
    suspend: bool,
    /// `spec.dependsOn`: names of specs, each once.
    depends_on: Vec<String>,
}

/// `spec.deletionPolicy`, `imagePolicy`, `managementPolicy`, `suspend` and `dependsOn`, each
/// checked (`None`: one had errors, reported).
fn policies(ctx: &mut Ctx, spec: &Obj) -> Option<Policies> {
    let deletion_policy = match spec.get("deletionPolicy") {
        None => Some(DeletionPolicy::Delete),
        Some(n) => enum_field(
            ctx,
            n,
            "spec.deletionPolicy",
            &[
                ("Delete", DeletionPolicy::Delete),
                ("Orphan", DeletionPolicy::Orphan),
            ],
        ),
    };
    let image_policy = match spec.get("imagePolicy") {
        None => Some(super::ImagePolicy::Keep),
        Some(n) => enum_field(
            ctx,
            n,
            "spec.imagePolicy",
            &[
                ("Keep", super::ImagePolicy::Keep),
                ("Recreate", super::ImagePolicy::Recreate),
            ],
        ),
    };
    let management_policy = match spec.get("managementPolicy") {
        None => Some(None),
        Some(n) => enum_field(
            ctx,
            n,
            "spec.managementPolicy",
            &[
                ("Full", super::ManagementPolicy::Full),
                ("Observe", super::ManagementPolicy::Observe),
            ],
        )
        .map(Some),
    };
    let suspend = match spec.get("suspend") {
        None => Some(false),
        Some(n) => super::hardware::bool_field(ctx, n, "spec.suspend"),
    };
    let depends_on = match spec.get("dependsOn") {
        None => Some(Vec::new()),
        Some(n) => depends_on(ctx, n),
    };
    match (
        deletion_policy,
        image_policy,
        management_policy,
        suspend,
        depends_on,
    ) {
        (Some(deletion), Some(image), Some(management), Some(suspend), Some(depends_on)) => {
            Some(Policies {
                deletion,
                image,
                image_at: spec.get("imagePolicy").map(|n| n.pos),
                management,
                suspend,
                depends_on,
            })
        }
        _ => None,
    }
}

fn spec_section<'n>(
    ctx: &mut Ctx,
    top: &Obj<'n>,
    kind: GuestKind,
    template: bool,
) -> Option<(Option<Policies>, Obj<'n>)> {
    let spec_node = top.required(ctx, "spec", "a mapping with forProvider");
    let spec = spec_node.and_then(|n| object(ctx, n, "spec", Some(SPEC_FIELDS)))?;
    if let Some(at) = spec.key_pos("providerConfigRef") {
        ctx.warning(
            at,
            "spec.providerConfigRef is ignored: proxsync takes the Proxmox endpoint and credentials \
             from the [[site]] named by spec.forProvider.site in its own config; remove this field",
        );
    }
    let policies = policies(ctx, &spec);
    let fp = spec.required(
        ctx,
        "forProvider",
        match kind {
            GuestKind::Qemu => "a mapping with at least site, node and image",
            GuestKind::Lxc => "a mapping with at least site, node and template",
        },
    );
    let fields: Vec<&str> = match kind {
        GuestKind::Qemu => FOR_PROVIDER_FIELDS
            .iter()
            .chain(super::hardware::FIELDS)
            .chain(template.then_some(&"nodes"))
            .copied()
            .collect(),
        GuestKind::Lxc => super::container::FIELDS
            .iter()
            .chain(super::container::SHARED_HARDWARE)
            .copied()
            .collect(),
    };
    let fp = fp.and_then(|n| object(ctx, n, "spec.forProvider", Some(&fields)))?;
    Some((policies, fp))
}

/// Where the guest goes.
struct Placement {
    site: String,
    site_pos: Pos,
    node: String,
    node_pos: Pos,
}

/// `forProvider.site` and `.node`.
fn placement(ctx: &mut Ctx, fp: &Obj) -> Option<Placement> {
    let site = fp.required(
        ctx,
        "site",
        "the name of a [[site]] in the proxsync config, e.g. us-sfvalley",
    );
    let site = site.and_then(|n| {
        let s = string(ctx, n, "spec.forProvider.site", "us-sfvalley")?;
        ctx.check(n.pos, check_site(s))
            .map(|()| (s.to_string(), n.pos))
    });
    // A `ProxmoxTemplate` may name `nodes` instead (its first is the spec's node; the list is
    // read by `templates::restrict`): only a template's forProvider admits the field.
    let first_of_nodes = match (fp.get("node"), fp.get("nodes")) {
        (None, Some(n)) => match &n.value {
            Value::Seq(items) => items.first(),
            _ => None,
        },
        _ => None,
    };
    let node = first_of_nodes.or_else(|| {
        fp.required(
            ctx,
            "node",
            "the Proxmox node to place the VM on, e.g. pve1",
        )
    });
    let node = node.and_then(|n| {
        let s = string(ctx, n, "spec.forProvider.node", "pve1")?;
        ctx.check(n.pos, check_node(s))
            .map(|()| (s.to_string(), n.pos))
    });
    let ((site, site_pos), (node, node_pos)) = (site?, node?);
    Some(Placement {
        site,
        site_pos,
        node,
        node_pos,
    })
}

/// `forProvider.name`: the VM's name in PVE (the spec's `name` by default).
fn vm_name(ctx: &mut Ctx, fp: &Obj, name: Option<&str>) -> Option<String> {
    match fp.get("name") {
        Some(n) => string(ctx, n, "spec.forProvider.name", "web-01")
            .and_then(|s| ctx.check(n.pos, check_vm_name(s)).map(|()| s.to_string())),
        None => name.map(str::to_string),
    }
}

/// What the VM gets.
struct Resources {
    cpu: u32,
    memory_mib: u64,
    disk_bytes: u64,
    storage: String,
    network: String,
}

/// `forProvider.cpu`, `.memory`, `.disk`, `.storage` and `.network`, with their defaults.
fn resources(ctx: &mut Ctx, fp: &Obj) -> Option<Resources> {
    let cpu = match fp.get("cpu") {
        None => Some(DEFAULT_CPU),
        Some(n) => cpu_field(ctx, n),
    };
    let memory_mib = match fp.get("memory") {
        None => Some(DEFAULT_MEMORY_MIB),
        Some(n) => size_field(
            ctx,
            n,
            "spec.forProvider.memory",
            MIB,
            "MiB",
            MIN_MEMORY_BYTES,
            MAX_MEMORY_BYTES,
        )
        .map(|bytes| bytes / MIB),
    };
    let disk_bytes = match fp.get("disk") {
        None => Some(DEFAULT_DISK_BYTES),
        Some(n) => size_field(
            ctx,
            n,
            "spec.forProvider.disk",
            GIB,
            "GiB",
            MIN_DISK_BYTES,
            MAX_DISK_BYTES,
        ),
    };
    let storage = match fp.get("storage") {
        None => Some(DEFAULT_STORAGE.to_string()),
        Some(n) => string(ctx, n, "spec.forProvider.storage", DEFAULT_STORAGE)
            .and_then(|s| ctx.check(n.pos, check_storage(s)).map(|()| s.to_string())),
    };
    let network = match fp.get("network") {
        None => Some(DEFAULT_NETWORK.to_string()),
        Some(n) => string(ctx, n, "spec.forProvider.network", DEFAULT_NETWORK)
            .and_then(|s| ctx.check(n.pos, check_bridge(s)).map(|()| s.to_string())),
    };
    Some(Resources {
        cpu: cpu?,
        memory_mib: memory_mib?,
        disk_bytes: disk_bytes?,
        storage: storage?,
        network: network?,
    })
}

/// `forProvider.image`: a template VMID, a volume ID or an image name, and where it is written.
/// A spec that adopts an existing VM may have none ([`Image::Existing`]).
fn image_field(ctx: &mut Ctx, fp: &Obj, adopting: bool) -> Option<(Image, Pos)> {
    if adopting && fp.get("image").is_none() {
        return Some((Image::Existing, fp.pos));
    }
    fp.required(
        ctx,
        "image",
        "a template VMID, a volume ID or an image name",
    )
    .and_then(|n| {
        let image = match &n.value {
            Value::Int(i) => image_from_int(*i),
            Value::Str(s) => parse_image(s),
            Value::Map(_) => managed_image(n),
            other => Err(format!(
                "spec.forProvider.image must be a template VMID (e.g. 9000), a volume ID, a \
                     name, {{image: NAME}} (a ProxmoxImage) or {{template: NAME}} (a \
                     ProxmoxTemplate); found {}",
                other.describe()
            )),
        };
        ctx.check(n.pos, image).map(|i| (i, n.pos))
    })
}

/// `image: {image: NAME}`: the repository's `ProxmoxImage` NAME (checked to exist once every
/// file is read: `images::check_references`); `{template: NAME}`: its `ProxmoxTemplate` NAME
/// (`templates::version_all`).
fn managed_image(n: &Node) -> Result<Image, String> {
    let Value::Map(entries) = &n.value else {
        return Err("expected a mapping".into());
    };
    match entries.as_slice() {
        [(k, v)] if matches!(&k.value, Value::Str(s) if s == "template") => match &v.value {
            Value::Str(name) => check_spec_name(name)
                .map(|()| Image::Built {
                    name: name.clone(),
                    vm_name: String::new(),
                })
                .map_err(|e| format!("spec.forProvider.image.template: {e}")),
            other => Err(format!(
                "spec.forProvider.image.template must be the name of a ProxmoxTemplate (e.g. \
                 noble); found {}",
                other.describe()
            )),
        },
        [(k, v)] if matches!(&k.value, Value::Str(s) if s == "image") => match &v.value {
            Value::Str(name) => check_spec_name(name)
                .map(|()| Image::Managed(name.clone()))
                .map_err(|e| format!("spec.forProvider.image.image: {e}")),
            other => Err(format!(
                "spec.forProvider.image.image must be the name of a ProxmoxImage (e.g. \
                 noble-cloud); found {}",
                other.describe()
            )),
        },
        _ => Err(
            "spec.forProvider.image as a mapping is {image: NAME}, NAME a ProxmoxImage of the \
             repository (e.g. {image: noble-cloud}), or {template: NAME}, NAME a \
             ProxmoxTemplate of the repository (e.g. {template: noble})"
                .into(),
        ),
    }
}

/// Whether the guest runs and how it is labelled.
struct Workload {
    power_state: PowerState,
    /// The spec's own tags (the tenant's is added by `assemble`).
    tags: Vec<String>,
}

/// A VM's `forProvider.userData` and `.cloudInit`.
fn first_boot(ctx: &mut Ctx, fp: &Obj) -> Option<(Option<String>, Option<CloudInit>)> {
    let user_data = match fp.get("userData") {
        None => Some(None),
        Some(n) => user_data_field(ctx, n).map(Some),
    };
    let cloud_init = match fp.get("cloudInit") {
        None => Some(None),
        Some(n) => super::cloudinit::cloud_init_field(ctx, n).map(Some),
    };
    Some((user_data?, cloud_init?))
}

/// `forProvider.powerState` and `.tags`.
fn workload(ctx: &mut Ctx, fp: &Obj) -> Option<Workload> {
    let power_state = match fp.get("powerState") {
        None => Some(PowerState::Running),
        Some(n) => enum_field(
            ctx,
            n,
            "spec.forProvider.powerState",
            &[
                ("running", PowerState::Running),
                ("stopped", PowerState::Stopped),
            ],
        ),
    };
    let tags = match fp.get("tags") {
        None => Some(Vec::new()),
        Some(n) => tags_field(ctx, n),
    };
    Some(Workload {
        power_state: power_state?,
        tags: tags?,
    })
}

/// The tenant from `metadata.labels` (either key), checked to make a valid tag. Every label
/// (all values are strings) is collected into `all`.
fn labels_tenant(
    ctx: &mut Ctx,
    labels: &Node,
    all: &mut std::collections::BTreeMap<String, String>,
) -> Option<String> {
    let obj = object(ctx, labels, "metadata.labels", None)?;
    let mut tenant: Option<(String, &str)> = None;
    for (key, _, value) in &obj.entries {
        let Some(v) = string(ctx, value, &obj.path(key), "\"customer-123\"") else {
            continue;
        };
        all.insert(key.to_string(), v.to_string());
        if !TENANT_LABELS.contains(key) {
            continue; // other labels are the user's business
        }
        if ctx.check(value.pos, check_tenant(v)).is_none() {
            continue;
        }
        match &tenant {
            Some((first, first_key)) if first != v => ctx.error(
                value.pos,
                format!("label {key} = {v:?} disagrees with {first_key} = {first:?}; set one tenant label (or both to the same value)"),
            ),
            Some(_) => {}
            None => tenant = Some((v.to_string(), key)),
        }
    }
    tenant.map(|(t, _)| t)
}

fn cpu_field(ctx: &mut Ctx, n: &Node) -> Option<u32> {
    let path = "spec.forProvider.cpu";
    let value = match &n.value {
        Value::Int(i) => Some(*i),
        // "4" is unambiguous; accept it as Kubernetes tooling often quotes numbers.
        Value::Str(s) if !s.is_empty() && s.len() < 20 && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        _ => None,
    };
    match value.and_then(|v| u32::try_from(v).ok()) {
        Some(v) if (1..=MAX_CPU).contains(&v) => Some(v),
        _ => {
            ctx.error(
                n.pos,
                format!(
                    "{path} must be a whole number of CPU cores from 1 to {MAX_CPU}; found {}",
                    n.value.describe()
                ),
            );
            None
        }
    }
}

fn user_data_field(ctx: &mut Ctx, n: &Node) -> Option<String> {
    let s = string(ctx, n, "spec.forProvider.userData", "a #cloud-config block")?;
    if ctx.sealed == Some(n.pos) {
        // Decrypted from SOPS: its errors would quote the secret; say what, not where.
        let ok = s.len() <= MAX_USER_DATA_BYTES
            && !s.contains('\0')
            && super::cloudinit::check_user_data(s).is_ok();
        if !ok {
            ctx.error(
                n.pos,
                format!(
                    "spec.forProvider.userData (decrypted from SOPS) is not valid user-data: \
                     #cloud-config YAML or a #! script of at most {MAX_USER_DATA_BYTES} bytes; \
                     the details are not shown as the value is secret (check it with sops -d)"
                ),
            );
            return None;
        }
        return Some(s.to_string());
    }
    if s.len() > MAX_USER_DATA_BYTES {
        ctx.error(
            n.pos,
            format!("spec.forProvider.userData is {} bytes; the limit is {MAX_USER_DATA_BYTES} bytes (64 KiB)", s.len()),
        );
        return None;
    }
    if s.contains('\0') {
        ctx.error(
            n.pos,
            "spec.forProvider.userData contains a NUL character; cloud-init user-data is text",
        );
        return None;
    }
    ctx.check(n.pos, super::cloudinit::check_user_data(s))?;
    Some(s.to_string())
}

fn tags_field(ctx: &mut Ctx, n: &Node) -> Option<Vec<String>> {
    let path = "spec.forProvider.tags";
    let Value::Seq(items) = &n.value else {
        let hint = match &n.value {
            Value::Str(s) => format!(" (write [{s}])"),
            _ => String::new(),
        };
        ctx.error(
            n.pos,
            format!(
                "{path} must be a list of tags, e.g. [web, db]; found {}{hint}",
                n.value.describe()
            ),
        );
        return None;
    };
    let mut tags = Vec::new();
    let mut ok = true;
    for item in items {
        let Some(tag) = string(ctx, item, "a tag", "web") else {
            ok = false;
            continue;
        };
        let reserved = if tag == "proxsync" || tag.starts_with("proxsync.") {
            Some("proxsync.* tags mark the VMs proxsync owns and are set by proxsync itself")
        } else if tag.starts_with("tenant_") {
            Some(
                "tenant_* tags come from the tenant-id label: set metadata.labels.tenant-id instead",
            )
        } else {
            None
        };
        let checked = match reserved {
            Some(why) => Err(format!("tag {tag:?} is reserved: {why}")),
            None => check_tag(tag),
        };
        match ctx.check(item.pos, checked) {
            Some(()) => tags.push(tag.to_string()),
            None => ok = false,
        }
    }
    ok.then_some(tags)
}
