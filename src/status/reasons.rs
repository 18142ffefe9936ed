//! Condition reasons. A reason is always set (v1beta2); `docs/status.md` explains each.
//!
//! Some reasons are shared by several condition types (`Creating`, `Deleting`,
//! `WaitingForTask`, `WaitingForLock`, `NodeUnhealthy`, `NotYetObserved`); each is one
//! [`Reason`]. A reason is written as its name ([`Reason::as_str`]); status files read back
//! keep it as text, so a reason an older or newer release wrote never fails a read.

use std::fmt;

use serde::Serialize;

use crate::category::Category;

/// Why a condition has its status: a CamelCase word, the same in every release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    // ---- shared ----
    /// Any standard condition: not determined yet (first visit, or the engine did not report
    /// it this cycle). Status `Unknown`. Also `Ready` / `NodeHealthy` before the first
    /// observation.
    NotYetObserved,
    /// `Ready` False / `Reconciling` True: the VM is being created (clone, import, configure,
    /// first start).
    Creating,
    /// `Ready` False / `Reconciling` True: the VM is being deleted (its spec was removed).
    Deleting,
    /// `Ready` False / `Reconciling` True: a PVE task proxsync started is still running.
    WaitingForTask,
    /// `Ready` False / `Reconciling` True: the VM's config is locked by a running task
    /// (backup, migration, snapshot); proxsync waits for it.
    WaitingForLock,
    /// `Ready` False / `Reconciling` True: the VM's node is offline or the cluster lost quorum.
    /// Also the error category of such a failure (`backoff.category`); it never stalls.
    NodeUnhealthy,
    // ---- Ready ----
    /// `Ready` True: the VM exists, matches its spec and has the requested power state.
    Available,
    /// `Ready` False or Unknown / `Reconciling` True: not ready for a reason no more specific
    /// reason covers (see the message).
    NotReady,
    /// `Ready` False / `Reconciling` True: the VM's config or power state is being changed to match
    /// the spec.
    Updating,
    /// `Ready` False / `Reconciling` False: the spec file is invalid; nothing is done to the VM.
    InvalidSpec,
    /// `Ready` False / `Reconciling` True: the last attempt failed (see `Stalled`, `backoff` and
    /// the message).
    Failed,
    /// `Ready` False: more than one VM carries this spec's marker; the message names every VMID
    /// and which is the spec's. The others are listed in `_orphans.yaml`.
    DuplicateVm,
    /// `Ready` False / `Reconciling` False: no VM of the spec is known and another VM claims it
    /// with a marker that does not verify; nothing is created until `proxsync adopt` confirms it or
    /// it is removed.
    UnverifiedClaim,
    /// `Ready` False / `Reconciling` True: the spec's VM carries another install's marker and
    /// ownership tag (the spec moved here from that install by `[source] selector`); it is adopted
    /// once that install has handed it over.
    HeldByInstall,
    /// `Ready` False / `Stalled` True: the spec's change was rolled back (`changePolicy`): the guest
    /// was unhealthy after it; it is not tried again until the spec changes or `proxsync
    /// reconcile NAME --retry`.
    RolledBack,
    /// `Ready` False / `Reconciling` False: the spec names another site than the one its VM is on;
    /// proxsync does not move VMs between clusters (see the message for what to do).
    SiteMoved,
    /// `Ready` False / `Reconciling` False: the spec's guest is of the other kind (a VM for a
    /// `ProxmoxLXC` spec, or a container for a `ProxmoxVM`); proxsync never replaces one kind
    /// by the other by itself.
    KindChanged,
    /// `Ready` False / `Reconciling` False: the commit removes a spec and adds this one with the
    /// same content; nothing is deleted or created until the `proxsync.io/renamed-from` annotation
    /// confirms a rename.
    RenameSuspected,
    /// `Ready` False / `Reconciling` False: the spec is renamed from a spec whose record names a
    /// VM that is not shown to be that spec's; nothing is re-labelled, deleted or created until
    /// a person settles it.
    RenameUnproven,
    /// `Ready` False / `Reconciling` False / `Stalled` True / `NodeHealthy` Unknown: the
    /// site's endpoint reaches another cluster than the one recorded for it; nothing on the
    /// site is created, changed or deleted until the endpoint is fixed or the cluster accepted
    /// (`proxsync accept site`).
    SiteIdentityChanged,
    // ---- Reconciling ----
    /// `Reconciling` False: nothing to do, the VM matches the spec.
    UpToDate,
    /// `Reconciling` True: changing the VM's config (CPU, memory, network, cloud-init...).
    Configuring,
    /// `Reconciling` True: growing a disk.
    Resizing,
    /// `Reconciling` True: starting, shutting down or stopping the VM.
    PowerChange,
    /// `Ready` False / `Reconciling` True: the spec names another node of the VM's cluster; the
    /// VM is being migrated there (live when it runs).
    Migrating,
    /// `Reconciling` True: waiting before the next attempt after a failure (see `backoff`).
    BackingOff,
    /// `Reconciling` True: taking over an existing VM that matches the spec.
    Adopting,
    /// `Ready` False / `Reconciling` False: the spec consents to take over a VM
    /// (`proxsync.io/adopt`) that is not, or no longer, the one consented to, or more VMs
    /// would be taken over at once than `max_adopt_per_cycle` allows.
    AdoptRefused,
    /// `Ready` True: the spec is observe-only (`managementPolicy: Observe`) and its VM matches
    /// it in what the listing shows.
    Observed,
    /// `Ready` False and `Synced` False: the observe-only spec's VM differs from it (each field
    /// with both values), or there is no VM; nothing is done about it.
    Drifted,
    /// `Reconciling` False: the spec is observe-only; proxsync takes no action for it. Also
    /// `Ready` False: the spec is renamed from a removed spec that was observe-only when last
    /// seen, whose VM is not re-labelled.
    Observing,
    /// `Synced` True: the observe-only spec's VM matches it in what the listing shows.
    InSync,
    /// `Ready`, `Reconciling` False and `Suspended` True: the spec is suspended (`spec.suspend`,
    /// `proxsync suspend`); no action of any kind is taken for it.
    Suspended,
    /// `Reconciling` True: the spec waits for a spec it depends on (`dependsOn`) to be Ready
    /// before its VM is created, started or rebooted.
    WaitingForDependencies,
    /// `Ready` False / `Reconciling` True: the guest is made from a `ProxmoxImage` that is not
    /// on its node's storage yet (downloading, or its download failed).
    WaitingForImage,
    /// `Ready` False / `Reconciling` True: a set member waits its turn to be rebooted for a
    /// change (`maxUnavailable`).
    RollingOut,
    // ---- Stalled ----
    /// `Stalled` False: proxsync is making progress or has nothing to do.
    NotStalled,
    /// `Stalled` True: the PVE version lacks a call or feature proxsync needs.
    ApiNotSupported,
    /// `Stalled` True: the config or the spec does not suit the cluster (PVE said 400).
    ConfigurationError,
    /// `Stalled` True: the API token was refused (401).
    AuthenticationError,
    /// `Stalled` True: the API token lacks a privilege (403).
    PermissionDenied,
    /// `Stalled` True: storage full or a resource limit reached.
    QuotaExceeded,
    /// `Stalled` True: the image, template or volume the spec names does not exist.
    ImageNotFound,
    /// `Stalled` True: the VM stays locked (see also [`Reason::StaleLock`]).
    LockError,
    /// `Stalled` True: the site's API cannot be reached.
    NetworkError,
    /// `Stalled` True: a PVE task keeps failing.
    TaskFailed,
    /// `Stalled` True: the spec is invalid.
    ValidationFailed,
    /// `Stalled` True: the spec's SOPS-encrypted `userData` does not open (no matching age
    /// identity, or the file changed after it was encrypted).
    DecryptionFailed,
    /// `Stalled` True: an object the VM needs (or the VM itself) is gone.
    NotFound,
    /// `Stalled` True: the VMID or name is taken by something proxsync does not manage.
    AlreadyExists,
    /// `Stalled` True: the VM's config keeps changing under proxsync (digest mismatch).
    Conflict,
    /// `Stalled` True: PVE answered with an error proxsync has no better name for.
    ProxmoxError,
    /// `Stalled` True: the VM's config carries a lock no running task holds.
    StaleLock,
    /// `Stalled` True: the VM's `protection` flag stops a delete or a drive removal, and the
    /// spec does not let proxsync clear it.
    Protected,
    /// `Stalled` True: the guest the spec's record names carries no marker of the spec (a
    /// person edited its notes) and nothing else shows it is the spec's; nothing is created
    /// until a person confirms it (`proxsync adopt`) or removes it. `Ready` False /
    /// `Reconciling` False: no record names a guest of the spec, and a guest with this
    /// install's tag and the spec's guest's name carries no marker line.
    MarkerMissing,
    // ---- NodeHealthy ----
    /// `NodeHealthy` True: the node is online and the cluster quorate.
    NodeOnline,
    /// `NodeHealthy` False: the node is offline.
    NodeOffline,
    /// `NodeHealthy` False: the cluster has lost quorum (config changes are impossible).
    NoQuorum,
    /// `NodeHealthy` Unknown: the site's API cannot be reached.
    SiteUnreachable,
    // ---- Provisioned ----
    /// `Provisioned` True: proxsync created the VM.
    Created,
    /// `Provisioned` False: the VM has not been created yet.
    NotCreated,
    /// `Provisioned` True: proxsync adopted an existing VM.
    Adopted,
    // ---- Healthy ----
    /// `Healthy` True: the guest's last round of health checks passed.
    Passing,
    /// `Healthy` True: the guest passed before and failed its last rounds, fewer than
    /// `health.failures`.
    Failing,
    /// `Healthy` Unknown / `Ready` False: the guest started (was created, restarted) within
    /// `health.timeout` and has not passed its checks yet, or is not checked yet.
    HealthPending,
    /// `Healthy` Unknown: the guest is not checked (it is not running, or not made yet).
    NotChecked,
    /// `Healthy` False / `Ready` False: the guest failed `health.failures` rounds in a row, or
    /// did not pass within `health.timeout`; proxsync reports it and does not restart it.
    Unhealthy,
    // ---- RebootPending ----
    /// `RebootPending` True: PVE holds config changes that apply at the next reboot.
    PendingChanges,
    /// `RebootPending` False: no pending changes.
    NoPendingChanges,
}

impl Reason {
    /// Every reason.
    #[cfg(test)]
    pub(crate) const ALL: [Reason; 69] = [
        Reason::NotYetObserved,
        Reason::Creating,
        Reason::Deleting,
        Reason::WaitingForTask,
        Reason::WaitingForLock,
        Reason::NodeUnhealthy,
        Reason::Available,
        Reason::NotReady,
        Reason::Updating,
        Reason::InvalidSpec,
        Reason::Failed,
        Reason::DuplicateVm,
        Reason::UnverifiedClaim,
        Reason::AdoptRefused,
        Reason::Observed,
        Reason::Drifted,
        Reason::Observing,
        Reason::InSync,
        Reason::Suspended,
        Reason::WaitingForDependencies,
        Reason::WaitingForImage,
        Reason::RollingOut,
        Reason::HeldByInstall,
        Reason::SiteMoved,
        Reason::RolledBack,
        Reason::KindChanged,
        Reason::RenameSuspected,
        Reason::RenameUnproven,
        Reason::SiteIdentityChanged,
        Reason::UpToDate,
        Reason::Configuring,
        Reason::Resizing,
        Reason::PowerChange,
        Reason::Migrating,
        Reason::BackingOff,
        Reason::Adopting,
        Reason::NotStalled,
        Reason::ApiNotSupported,
        Reason::ConfigurationError,
        Reason::AuthenticationError,
        Reason::PermissionDenied,
        Reason::QuotaExceeded,
        Reason::ImageNotFound,
        Reason::LockError,
        Reason::NetworkError,
        Reason::TaskFailed,
        Reason::ValidationFailed,
        Reason::DecryptionFailed,
        Reason::NotFound,
        Reason::AlreadyExists,
        Reason::Conflict,
        Reason::ProxmoxError,
        Reason::StaleLock,
        Reason::Protected,
        Reason::MarkerMissing,
        Reason::NodeOnline,
        Reason::NodeOffline,
        Reason::NoQuorum,
        Reason::SiteUnreachable,
        Reason::Created,
        Reason::NotCreated,
        Reason::Adopted,
        Reason::Passing,
        Reason::Failing,
        Reason::HealthPending,
        Reason::NotChecked,
        Reason::Unhealthy,
        Reason::PendingChanges,
        Reason::NoPendingChanges,
    ];

    /// The word written in status files, metrics and notifications.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::NotYetObserved => "NotYetObserved",
            Reason::Creating => "Creating",
            Reason::Deleting => "Deleting",
            Reason::WaitingForTask => "WaitingForTask",
            Reason::WaitingForLock => "WaitingForLock",
            Reason::NodeUnhealthy => "NodeUnhealthy",
            Reason::Available => "Available",
            Reason::NotReady => "NotReady",
            Reason::Updating => "Updating",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::Failed => "Failed",
            Reason::DuplicateVm => "DuplicateVM",
            Reason::UnverifiedClaim => "UnverifiedClaim",
            Reason::AdoptRefused => "AdoptRefused",
            Reason::Observed => "Observed",
            Reason::Drifted => "Drifted",
            Reason::Observing => "Observing",
            Reason::InSync => "InSync",
            Reason::Suspended => "Suspended",
            Reason::WaitingForDependencies => "WaitingForDependencies",
            Reason::WaitingForImage => "WaitingForImage",
            Reason::RollingOut => "RollingOut",
            Reason::HeldByInstall => "HeldByInstall",
            Reason::SiteMoved => "SiteMoved",
            Reason::RolledBack => "RolledBack",
            Reason::KindChanged => "KindChanged",
            Reason::RenameSuspected => "RenameSuspected",
            Reason::RenameUnproven => "RenameUnproven",
            Reason::SiteIdentityChanged => "SiteIdentityChanged",
            Reason::UpToDate => "UpToDate",
            Reason::Configuring => "Configuring",
            Reason::Resizing => "Resizing",
            Reason::PowerChange => "PowerChange",
            Reason::Migrating => "Migrating",
            Reason::BackingOff => "BackingOff",
            Reason::Adopting => "Adopting",
            Reason::NotStalled => "NotStalled",
            Reason::ApiNotSupported => "APINotSupported",
            Reason::ConfigurationError => "ConfigurationError",
            Reason::AuthenticationError => "AuthenticationError",
            Reason::PermissionDenied => "PermissionDenied",
            Reason::QuotaExceeded => "QuotaExceeded",
            Reason::ImageNotFound => "ImageNotFound",
            Reason::LockError => "LockError",
            Reason::NetworkError => "NetworkError",
            Reason::TaskFailed => "TaskFailed",
            Reason::ValidationFailed => "ValidationFailed",
            Reason::DecryptionFailed => "DecryptionFailed",
            Reason::NotFound => "NotFound",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Conflict => "Conflict",
            Reason::ProxmoxError => "ProxmoxError",
            Reason::StaleLock => "StaleLock",
            Reason::Protected => "Protected",
            Reason::MarkerMissing => "MarkerMissing",
            Reason::NodeOnline => "NodeOnline",
            Reason::NodeOffline => "NodeOffline",
            Reason::NoQuorum => "NoQuorum",
            Reason::SiteUnreachable => "SiteUnreachable",
            Reason::Created => "Created",
            Reason::NotCreated => "NotCreated",
            Reason::Adopted => "Adopted",
            Reason::Passing => "Passing",
            Reason::Failing => "Failing",
            Reason::HealthPending => "HealthPending",
            Reason::NotChecked => "NotChecked",
            Reason::Unhealthy => "Unhealthy",
            Reason::PendingChanges => "PendingChanges",
            Reason::NoPendingChanges => "NoPendingChanges",
        }
    }

    /// The reason named after an error category (its own name): `Stalled`'s reason for the
    /// categories that need a human.
    pub(crate) fn for_category(category: Category) -> Reason {
        match category {
            Category::ApiNotSupported => Reason::ApiNotSupported,
            Category::ConfigurationError => Reason::ConfigurationError,
            Category::AuthenticationError => Reason::AuthenticationError,
            Category::PermissionDenied => Reason::PermissionDenied,
            Category::QuotaExceeded => Reason::QuotaExceeded,
            Category::NodeUnhealthy => Reason::NodeUnhealthy,
            Category::ImageNotFound => Reason::ImageNotFound,
            Category::LockError => Reason::LockError,
            Category::NetworkError => Reason::NetworkError,
            Category::TaskFailed => Reason::TaskFailed,
            Category::ValidationFailed => Reason::ValidationFailed,
            Category::NotFound => Reason::NotFound,
            Category::AlreadyExists => Reason::AlreadyExists,
            Category::Conflict => Reason::Conflict,
            Category::ProxmoxError => Reason::ProxmoxError,
        }
    }
}

impl From<Category> for Reason {
    fn from(category: Category) -> Reason {
        Reason::for_category(category)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Ordered by name, as the words were (the engine's condition counts are kept sorted).
impl Ord for Reason {
    fn cmp(&self, other: &Reason) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Reason {
    fn partial_cmp(&self, other: &Reason) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Reasons of `Ready`.
#[cfg(test)]
pub(crate) const READY: &[Reason] = &[
    Reason::Available,
    Reason::NotReady,
    Reason::Creating,
    Reason::Updating,
    Reason::Deleting,
    Reason::WaitingForTask,
    Reason::WaitingForLock,
    Reason::NodeUnhealthy,
    Reason::InvalidSpec,
    Reason::Failed,
    Reason::NotYetObserved,
    Reason::Migrating,
    Reason::DuplicateVm,
    Reason::UnverifiedClaim,
    Reason::MarkerMissing,
    Reason::AdoptRefused,
    Reason::Observed,
    Reason::Drifted,
    Reason::Observing,
    Reason::SiteMoved,
    Reason::RolledBack,
    Reason::KindChanged,
    Reason::RenameSuspected,
    Reason::RenameUnproven,
    Reason::HeldByInstall,
    Reason::SiteIdentityChanged,
    Reason::Suspended,
    Reason::WaitingForDependencies,
    Reason::WaitingForImage,
    Reason::RollingOut,
    Reason::HealthPending,
    Reason::Unhealthy,
];
/// Reasons of `Reconciling`.
#[cfg(test)]
pub(crate) const RECONCILING: &[Reason] = &[
    Reason::UpToDate,
    Reason::Creating,
    Reason::WaitingForTask,
    Reason::Configuring,
    Reason::Resizing,
    Reason::PowerChange,
    Reason::Deleting,
    Reason::BackingOff,
    Reason::WaitingForLock,
    Reason::Adopting,
    Reason::Migrating,
    Reason::NotYetObserved,
    Reason::HeldByInstall,
    Reason::Updating,
    Reason::Failed,
    Reason::NodeUnhealthy,
    Reason::NotReady,
    Reason::InvalidSpec,
    Reason::RenameSuspected,
    Reason::RenameUnproven,
    Reason::SiteMoved,
    Reason::RolledBack,
    Reason::KindChanged,
    Reason::UnverifiedClaim,
    Reason::MarkerMissing,
    Reason::AdoptRefused,
    Reason::Observing,
    Reason::SiteIdentityChanged,
    Reason::Suspended,
    Reason::WaitingForDependencies,
    Reason::WaitingForImage,
    Reason::RollingOut,
];
/// Reasons of `Stalled`: True only for the categories that need a human
/// (`Category::needs_human`) and a stale lock; the other categories are retried with backoff
/// and never stall (docs/status.md, "Other error categories").
#[cfg(test)]
pub(crate) const STALLED: &[Reason] = &[
    Reason::NotStalled,
    Reason::ApiNotSupported,
    Reason::ConfigurationError,
    Reason::AuthenticationError,
    Reason::PermissionDenied,
    Reason::QuotaExceeded,
    Reason::ImageNotFound,
    Reason::ValidationFailed,
    Reason::DecryptionFailed,
    Reason::StaleLock,
    Reason::Protected,
    Reason::MarkerMissing,
    Reason::SiteIdentityChanged,
    Reason::RolledBack,
    Reason::NotYetObserved,
];
/// Reasons of `NodeHealthy`.
#[cfg(test)]
pub(crate) const NODE_HEALTHY: &[Reason] = &[
    Reason::NodeOnline,
    Reason::NodeOffline,
    Reason::NoQuorum,
    Reason::SiteUnreachable,
    Reason::SiteIdentityChanged,
    Reason::NotYetObserved,
];
/// Reasons of `Provisioned`.
#[cfg(test)]
pub(crate) const PROVISIONED: &[Reason] = &[
    Reason::Created,
    Reason::NotCreated,
    Reason::Adopted,
    Reason::NotYetObserved,
];
/// Reasons of `Synced`.
#[cfg(test)]
pub(crate) const SYNCED: &[Reason] = &[Reason::InSync, Reason::Drifted];
/// Reasons of `Suspended`.
#[cfg(test)]
pub(crate) const SUSPENDED: &[Reason] = &[Reason::Suspended];
/// Reasons of `Healthy`.
#[cfg(test)]
pub(crate) const HEALTHY: &[Reason] = &[
    Reason::Passing,
    Reason::Failing,
    Reason::HealthPending,
    Reason::NotChecked,
    Reason::Unhealthy,
];
/// Reasons of `RebootPending`.
#[cfg(test)]
pub(crate) const REBOOT_PENDING: &[Reason] = &[Reason::PendingChanges, Reason::NoPendingChanges];
