//! What a create lacks ([`Unfit`]), and what to do about it.

use std::fmt;

use crate::guest::GuestKind;
use crate::model::Unfit;
use crate::spec::container::PasswordSource;

impl fmt::Display for Unfit {
    // Long because: one arm per thing a create can lack, each with what to do.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::SiteNotObserved { site } => write!(f, "site {site} was not observed"),
            Unfit::NodeUnhealthy { node } => write!(
                f,
                "node {node} is offline, unknown, or the cluster has no quorum"
            ),
            Unfit::NoStorage { storage, node, has } => write!(
                f,
                "storage {storage} does not exist on node {node} (it has: {})",
                has.join(", ")
            ),
            Unfit::NoContent {
                storage,
                node,
                content,
                holds,
            } => write!(
                f,
                "storage {storage} on node {node} does not hold {content} content (it holds {}); \
                 add {content} to its content types or use another storage",
                holds.as_deref().unwrap_or("nothing")
            ),
            Unfit::StorageInactive { storage, node } => write!(
                f,
                "storage {storage} on node {node} is not active; check it with `pvesm status`"
            ),
            Unfit::NoBridge {
                bridge,
                node,
                lists,
                field,
            } => write!(
                f,
                "bridge {bridge} is not listed on node {node} (it lists: {}): it does not exist, \
                 or the token may not use it (PVE lists a bridge only to a token with SDN.Use or \
                 SDN.Audit on /sdn/zones/localnetwork/{bridge}); create it, grant that, or change \
                 {field}",
                lists.join(", ")
            ),
            Unfit::AdoptsOnly { spec, kind } => {
                let (noun, field) = (kind.noun(), kind.image_field());
                write!(
                    f,
                    "spec {spec} has no {field}: it adopts an existing {noun} ({}), so proxsync \
                     cannot make one; name one in spec.forProvider.{field} to let it create a \
                     {noun}",
                    crate::spec::ADOPT
                )
            }
            Unfit::NoTemplate { vmid, site, kind } => write!(
                f,
                "template {vmid} does not exist on site {site} (or is not a {} template); create \
                 it or name an existing template in spec.forProvider.{}",
                kind.noun(),
                kind.image_field(),
            ),
            Unfit::AmbiguousTemplates { name, vmids } => write!(
                f,
                "image {name:?} is ambiguous: templates {} share that name; use the VMID",
                (vmids.iter().map(ToString::to_string))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Unfit::TemplateNotBuilt {
                name,
                vm_name,
                site,
            } => write!(
                f,
                "template {name}: its current version {vm_name} is not built on site {site} yet; \
                 the guest is cloned once the ProxmoxTemplate is Ready (see its status)"
            ),
            Unfit::NoContainerTemplate { name, site } => write!(
                f,
                "template {name:?}: no container template of that name on site {site}; name a \
                 vztmpl volume (local:vztmpl/NAME.tar.zst) or a CT template's VMID"
            ),
            Unfit::OtherPrivilege {
                template,
                spec_unprivileged,
            } => {
                let (spec_says, template_is) = match spec_unprivileged {
                    true => ("unprivileged", "privileged"),
                    false => ("privileged", "unprivileged"),
                };
                write!(
                    f,
                    "CT template {template} is {template_is}, and the spec asks for an \
                     {spec_says} container: a clone takes its template's (pve-container copies \
                     `unprivileged`). Clone an {spec_says} template, or make the container from \
                     a vztmpl archive"
                )
            }
            Unfit::NotShared {
                template,
                template_node,
                node,
                storage,
            } => write!(
                f,
                "template {template} is on node {template_node}, and a clone to node {node} \
                 needs shared storage, but {storage} is local to each node; put a copy of the \
                 template on {node} or use a shared storage"
            ),
            Unfit::LocalVolumes {
                template,
                template_node,
                node,
                volumes,
            } => write!(
                f,
                "template {template} is on node {template_node}, and PVE clones to another node \
                 (node {node}) only a VM whose volumes are all on shared storage; these are not: \
                 {}. Move them to shared storage (or detach the ISO), or put a copy of the \
                 template on node {node}",
                volumes.join(", ")
            ),
            Unfit::ImportName {
                name: Some(name),
                why,
            } => write!(f, "image {name:?}: {why}"),
            Unfit::ImportName { name: None, why } => f.write_str(why),
            Unfit::NoImage { name, site, node } => write!(
                f,
                "image {name:?}: no template of that name on site {site} and no volume with that \
                 file stem on node {node}'s storages; upload it (e.g. to local:import/{name}.qcow2) \
                 or fix the spec"
            ),
            Unfit::AmbiguousVolumes { name, volumes } => write!(
                f,
                "image {name:?} is ambiguous: {}; use the full volume ID",
                volumes.join(", ")
            ),
            Unfit::TooOld {
                version,
                what,
                needed,
            } => write!(
                f,
                "Proxmox VE {version} lacks {what} (needs Proxmox VE {needed} or later); upgrade \
                 the cluster or use a template image (a VMID) instead"
            ),
            Unfit::OciTooOld {
                site,
                version,
                reference,
            } => write!(
                f,
                "site {site} runs PVE {version}; a container from an OCI image (template: {{oci: \
                 {reference}}}) needs PVE 9.1, whose oci-registry-pull fetches it: upgrade the \
                 site, or name a vztmpl archive as template"
            ),
            Unfit::OciPullFailed {
                reference,
                storage,
                node,
                why,
            } => write!(
                f,
                "PVE's pull of OCI image {reference} to {storage} on {node} failed: {why}; check \
                 the reference (its registry, repository and tag) and that the node reaches the \
                 registry and has skopeo"
            ),
            Unfit::NoVolume {
                volume,
                node,
                storage,
                content,
            } => write!(
                f,
                "{volume} does not exist on node {node}; upload it to {storage} ({content} \
                 content) or fix the spec"
            ),
            Unfit::NoSeedStorage { node } => write!(
                f,
                "userData needs a storage with iso content on node {node} for its seed image, and \
                 there is none; add iso to a storage's content types or set \
                 spec.forProvider.cloudInit.seedStorage"
            ),
            Unfit::WrongSource { spec, kind } => match kind {
                GuestKind::Qemu => {
                    write!(f, "spec {spec}: a VM is not made from a container template")
                }
                GuestKind::Lxc => write!(
                    f,
                    "spec {spec}: a container is made from a vztmpl archive or a CT template, not \
                     a disk image"
                ),
            },
            Unfit::PasswordUnreadable { spec, why } => {
                write!(f, "spec {spec}: spec.forProvider.password: {why}")
            }
            Unfit::PasswordShort {
                spec,
                from,
                chars,
                min,
            } => {
                let from = match from {
                    PasswordSource::File(path) => ("file", path),
                    PasswordSource::Credential(name) => ("credential", name),
                };
                write!(
                    f,
                    "spec {spec}: spec.forProvider.password: the root password in {} {} has \
                     {chars} characters, and PVE takes one of at least {min} (pve-container's \
                     create: `password` minLength {min}); write a longer one there",
                    from.0, from.1
                )
            }
        }
    }
}
