//! What a create lacks before anything is made ([`Unfit`]): the node, a storage, a bridge, the
//! template or image, the PVE release. Execute's pre-flight decides it; `words` says it, with
//! what to do.

use crate::category::Category;
use crate::guest::GuestKind;
use crate::spec::container::PasswordSource;

/// Why a create is refused before anything exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    /// The site was not observed this cycle.
    SiteNotObserved {
        /// The site.
        site: String,
    },
    /// The node is offline, unknown, or the cluster has no quorum.
    NodeUnhealthy {
        /// The node.
        node: String,
    },
    /// The storage does not exist on the node.
    NoStorage {
        /// The storage.
        storage: String,
        /// The node.
        node: String,
        /// The storages the node has.
        has: Vec<String>,
    },
    /// The storage does not hold the content the guest needs.
    NoContent {
        /// The storage.
        storage: String,
        /// The node.
        node: String,
        /// The content needed (`images`, `rootdir`, `iso`, ...).
        content: String,
        /// What it holds, as PVE lists it.
        holds: Option<String>,
    },
    /// The storage is not active.
    StorageInactive {
        /// The storage.
        storage: String,
        /// The node.
        node: String,
    },
    /// A bridge the spec names is not listed on the node.
    NoBridge {
        /// The bridge.
        bridge: String,
        /// The node.
        node: String,
        /// The bridges the node lists.
        lists: Vec<String>,
        /// The spec field naming it (`spec.forProvider.networks` or `.network`).
        field: String,
    },
    /// The spec adopts an existing guest and names no image: nothing to create from.
    AdoptsOnly {
        /// The spec.
        spec: String,
        /// Its kind.
        kind: GuestKind,
    },
    /// No template of the spec's kind at that VMID.
    NoTemplate {
        /// The VMID named.
        vmid: u32,
        /// The site.
        site: String,
        /// The spec's kind.
        kind: GuestKind,
    },
    /// Several templates share the image's name.
    AmbiguousTemplates {
        /// The name.
        name: String,
        /// Their VMIDs.
        vmids: Vec<u32>,
    },
    /// The repository's `ProxmoxTemplate` has no VM of its current version on the site yet
    /// (it is being built; the guest waits for it through its implicit `dependsOn`).
    TemplateNotBuilt {
        /// The template's name.
        name: String,
        /// The name of its current version's VM.
        vm_name: String,
        /// The site.
        site: String,
    },
    /// No container template of that name (a container is never made from a VM image).
    NoContainerTemplate {
        /// The name.
        name: String,
        /// The site.
        site: String,
    },
    /// The CT template's privilege is not the one the spec asks for: a clone takes its
    /// template's.
    OtherPrivilege {
        /// The template.
        template: u32,
        /// Whether the spec asks for an unprivileged container.
        spec_unprivileged: bool,
    },
    /// A clone to another node needs shared target storage.
    NotShared {
        /// The template.
        template: u32,
        /// The template's node.
        template_node: String,
        /// The spec's node.
        node: String,
        /// The spec's storage.
        storage: String,
    },
    /// A VM template with volumes on local storage clones to its own node only.
    LocalVolumes {
        /// The template.
        template: u32,
        /// The template's node.
        template_node: String,
        /// The spec's node.
        node: String,
        /// Its volumes on local storage (`key=volume`).
        volumes: Vec<String>,
    },
    /// The image's file name is not one PVE imports (PVE's reason).
    ImportName {
        /// The image's name, when named by name.
        name: Option<String>,
        /// Why, as `pve::types::check_import_extension` says.
        why: String,
    },
    /// No template and no volume of that name.
    NoImage {
        /// The name.
        name: String,
        /// The site.
        site: String,
        /// The node whose storages were listed.
        node: String,
    },
    /// Several volumes share the image's name.
    AmbiguousVolumes {
        /// The name.
        name: String,
        /// The volumes.
        volumes: Vec<String>,
    },
    /// The cluster's release lacks a feature the create needs.
    TooOld {
        /// The release found.
        version: String,
        /// The feature.
        what: String,
        /// The first release that has it.
        needed: String,
    },
    /// A container from an OCI image on a site older than PVE 9.1 (no `oci-registry-pull`).
    OciTooOld {
        /// The site.
        site: String,
        /// The release it runs.
        version: String,
        /// The image's reference.
        reference: String,
    },
    /// PVE's pull of the OCI image failed (refused, or its task failed): PVE's words.
    OciPullFailed {
        /// The image's reference.
        reference: String,
        /// The storage it was pulled to.
        storage: String,
        /// The node.
        node: String,
        /// PVE's message.
        why: String,
    },
    /// The volume is not on the storage.
    NoVolume {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
        /// The storage.
        storage: String,
        /// Its content type.
        content: String,
    },
    /// A cloud-init seed needs a storage with iso content, and the node has none.
    NoSeedStorage {
        /// The node.
        node: String,
    },
    /// The spec's source cannot make a guest of its kind (a VM from a container template).
    WrongSource {
        /// The spec.
        spec: String,
        /// The kind the spec makes.
        kind: GuestKind,
    },
    /// A container's root password cannot be read where the spec says.
    PasswordUnreadable {
        /// The spec.
        spec: String,
        /// Why, in the config's words.
        why: String,
    },
    /// A container's root password is shorter than PVE takes.
    PasswordShort {
        /// The spec.
        spec: String,
        /// Where it was read from.
        from: PasswordSource,
        /// How many characters it has.
        chars: usize,
        /// How many PVE takes at least.
        min: usize,
    },
}

impl Unfit {
    /// The error category a spec's status shows for it.
    pub fn category(&self) -> Category {
        match self {
            Unfit::SiteNotObserved { .. } => Category::NetworkError,
            Unfit::NodeUnhealthy { .. } => Category::NodeUnhealthy,
            Unfit::NoTemplate { .. }
            | Unfit::NoContainerTemplate { .. }
            | Unfit::TemplateNotBuilt { .. }
            | Unfit::NoImage { .. }
            | Unfit::NoVolume { .. } => Category::ImageNotFound,
            Unfit::TooOld { .. } | Unfit::OciTooOld { .. } => Category::ApiNotSupported,
            Unfit::OciPullFailed { .. } => Category::ProxmoxError,
            _ => Category::ConfigurationError,
        }
    }
}
