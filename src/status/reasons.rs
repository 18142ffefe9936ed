//! Condition reasons. A reason is always set (v1beta2); `docs/status.md` explains each.
//!
//! Some reasons are shared by several condition types (`Creating`, `Deleting`,
//! `WaitingForTask`, `WaitingForLock`, `NodeUnhealthy`, `NotYetObserved`); each string is
//! defined once.

use crate::category::Category;

// ---- shared ----
/// Any standard condition: not determined yet (first visit, or the engine did not report
/// it this cycle). Status `Unknown`. Also `Ready` / `NodeHealthy` before the first
/// observation.
pub const NOT_YET_OBSERVED: &str = "NotYetObserved";
/// `Ready` False / `Reconciling` True: the VM is being created (clone, import, configure,
/// first start).
pub const CREATING: &str = "Creating";
/// `Ready` False / `Reconciling` True: the VM is being deleted (its spec was removed).
pub const DELETING: &str = "Deleting";
/// `Ready` False / `Reconciling` True: a PVE task proxsync started is still running.
pub const WAITING_FOR_TASK: &str = "WaitingForTask";
/// `Ready` False / `Reconciling` True: the VM's config is locked by a running task
/// (backup, migration, snapshot); proxsync waits for it.
pub const WAITING_FOR_LOCK: &str = "WaitingForLock";
/// `Ready` False: the VM's node is offline or the cluster lost quorum.
/// `Stalled` True: the same, for longer than the engine tolerates.
pub const NODE_UNHEALTHY: &str = "NodeUnhealthy";
/// Never expected: the engine sent an empty reason (a proxsync bug).
pub const UNSPECIFIED: &str = "Unspecified";

// ---- Ready ----
/// `Ready` True: the VM exists, matches its spec and has the requested power state.
pub const AVAILABLE: &str = "Available";
/// `Ready` False: not ready for a reason no more specific reason covers (see the message).
pub const NOT_READY: &str = "NotReady";
/// `Ready` False: the VM's config or power state is being changed to match the spec.
pub const UPDATING: &str = "Updating";
/// `Ready` False: the spec file is invalid; nothing is done to the VM.
pub const INVALID_SPEC: &str = "InvalidSpec";
/// `Ready` False: the last attempt failed (see `Stalled`, `backoff` and the message).
pub const FAILED: &str = "Failed";
/// `Ready` False: more than one VM carries this spec's marker; the message names every VMID
/// and which is the spec's. The others are listed in `_orphans.yaml`.
pub const DUPLICATE_VM: &str = "DuplicateVM";
/// `Ready` False: no VM of the spec is known and another VM claims it with a marker that does
/// not verify; nothing is created until `proxsync adopt` confirms it or it is removed.
pub const UNVERIFIED_CLAIM: &str = "UnverifiedClaim";
/// `Ready` False / `Reconciling` True: the spec's VM carries another install's marker and
/// ownership tag (the spec moved here from that install by `[source] selector`); it is adopted
/// once that install has handed it over.
pub const HELD_BY_INSTALL: &str = "HeldByInstall";
/// `Ready` False: the spec names another site than the one its VM is on; proxsync does not
/// move VMs between clusters (see the message for what to do).
pub const SITE_MOVED: &str = "SiteMoved";
/// `Ready` False: the commit removes a spec and adds this one with the same content; nothing
/// is deleted or created until the `proxsync.io/renamed-from` annotation confirms a rename.
pub const RENAME_SUSPECTED: &str = "RenameSuspected";

// ---- Reconciling ----
/// `Reconciling` False: nothing to do, the VM matches the spec.
pub const UP_TO_DATE: &str = "UpToDate";
/// `Reconciling` True: changing the VM's config (CPU, memory, network, cloud-init...).
pub const CONFIGURING: &str = "Configuring";
/// `Reconciling` True: growing a disk.
pub const RESIZING: &str = "Resizing";
/// `Reconciling` True: starting, shutting down or stopping the VM.
pub const POWER_CHANGE: &str = "PowerChange";
/// `Ready` False / `Reconciling` True: the spec names another node of the VM's cluster; the
/// VM is being migrated there (live when it runs).
pub const MIGRATING: &str = "Migrating";
/// `Reconciling` True: waiting before the next attempt after a failure (see `backoff`).
pub const BACKING_OFF: &str = "BackingOff";
/// `Reconciling` True: taking over an existing VM that matches the spec.
pub const ADOPTING: &str = "Adopting";

// ---- Stalled ----
/// `Stalled` False: proxsync is making progress or has nothing to do.
pub const NOT_STALLED: &str = "NotStalled";
/// `Stalled` True: the PVE version lacks a call or feature proxsync needs.
pub const API_NOT_SUPPORTED: &str = "APINotSupported";
/// `Stalled` True: the config or the spec does not suit the cluster (PVE said 400).
pub const CONFIGURATION_ERROR: &str = "ConfigurationError";
/// `Stalled` True: the API token was refused (401).
pub const AUTHENTICATION_ERROR: &str = "AuthenticationError";
/// `Stalled` True: the API token lacks a privilege (403).
pub const PERMISSION_DENIED: &str = "PermissionDenied";
/// `Stalled` True: storage full or a resource limit reached.
pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
/// `Stalled` True: the image, template or volume the spec names does not exist.
pub const IMAGE_NOT_FOUND: &str = "ImageNotFound";
/// `Stalled` True: the VM stays locked (see also [`STALE_LOCK`]).
pub const LOCK_ERROR: &str = "LockError";
/// `Stalled` True: the site's API cannot be reached.
pub const NETWORK_ERROR: &str = "NetworkError";
/// `Stalled` True: a PVE task keeps failing.
pub const TASK_FAILED: &str = "TaskFailed";
/// `Stalled` True: the spec is invalid.
pub const VALIDATION_FAILED: &str = "ValidationFailed";
/// `Stalled` True: an object the VM needs (or the VM itself) is gone.
pub const NOT_FOUND: &str = "NotFound";
/// `Stalled` True: the VMID or name is taken by something proxsync does not manage.
pub const ALREADY_EXISTS: &str = "AlreadyExists";
/// `Stalled` True: the VM's config keeps changing under proxsync (digest mismatch).
pub const CONFLICT: &str = "Conflict";
/// `Stalled` True: PVE answered with an error proxsync has no better name for.
pub const PROXMOX_ERROR: &str = "ProxmoxError";
/// `Stalled` True: the VM's config carries a lock no running task holds.
pub const STALE_LOCK: &str = "StaleLock";

// ---- NodeHealthy ----
/// `NodeHealthy` True: the node is online and the cluster quorate.
pub const NODE_ONLINE: &str = "NodeOnline";
/// `NodeHealthy` False: the node is offline.
pub const NODE_OFFLINE: &str = "NodeOffline";
/// `NodeHealthy` False: the cluster has lost quorum (config changes are impossible).
pub const NO_QUORUM: &str = "NoQuorum";
/// `NodeHealthy` Unknown: the site's API cannot be reached.
pub const SITE_UNREACHABLE: &str = "SiteUnreachable";

// ---- Provisioned ----
/// `Provisioned` True: proxsync created the VM.
pub const CREATED: &str = "Created";
/// `Provisioned` False: the VM has not been created yet.
pub const NOT_CREATED: &str = "NotCreated";
/// `Provisioned` True: proxsync adopted an existing VM.
pub const ADOPTED: &str = "Adopted";

// ---- RebootPending ----
/// `RebootPending` True: PVE holds config changes that apply at the next reboot.
pub const PENDING_CHANGES: &str = "PendingChanges";
/// `RebootPending` False: no pending changes.
pub const NO_PENDING_CHANGES: &str = "NoPendingChanges";

/// Reasons of `Ready`.
pub const READY: &[&str] = &[
    AVAILABLE,
    NOT_READY,
    CREATING,
    UPDATING,
    DELETING,
    WAITING_FOR_TASK,
    WAITING_FOR_LOCK,
    NODE_UNHEALTHY,
    INVALID_SPEC,
    FAILED,
    NOT_YET_OBSERVED,
    MIGRATING,
    DUPLICATE_VM,
    UNVERIFIED_CLAIM,
    SITE_MOVED,
    RENAME_SUSPECTED,
    HELD_BY_INSTALL,
];
/// Reasons of `Reconciling`.
pub const RECONCILING: &[&str] = &[
    UP_TO_DATE,
    CREATING,
    WAITING_FOR_TASK,
    CONFIGURING,
    RESIZING,
    POWER_CHANGE,
    DELETING,
    BACKING_OFF,
    WAITING_FOR_LOCK,
    ADOPTING,
    MIGRATING,
    NOT_YET_OBSERVED,
    HELD_BY_INSTALL,
];
/// Reasons of `Stalled`: True only for the categories that need a human
/// (`Category::needs_human`) and a stale lock; the other categories are retried with backoff
/// and never stall (docs/status.md, "Other error categories").
pub const STALLED: &[&str] = &[
    NOT_STALLED,
    API_NOT_SUPPORTED,
    CONFIGURATION_ERROR,
    AUTHENTICATION_ERROR,
    PERMISSION_DENIED,
    QUOTA_EXCEEDED,
    IMAGE_NOT_FOUND,
    VALIDATION_FAILED,
    STALE_LOCK,
    NOT_YET_OBSERVED,
];
/// Reasons of `NodeHealthy`.
pub const NODE_HEALTHY: &[&str] = &[
    NODE_ONLINE,
    NODE_OFFLINE,
    NO_QUORUM,
    SITE_UNREACHABLE,
    NOT_YET_OBSERVED,
];
/// Reasons of `Provisioned`.
pub const PROVISIONED: &[&str] = &[CREATED, NOT_CREATED, ADOPTED, NOT_YET_OBSERVED];
/// Reasons of `RebootPending`.
pub const REBOOT_PENDING: &[&str] = &[PENDING_CHANGES, NO_PENDING_CHANGES];

/// The `Stalled` reason for an error category (the category's own name).
pub fn stalled_for(category: Category) -> &'static str {
    match category {
        Category::ApiNotSupported => API_NOT_SUPPORTED,
        Category::ConfigurationError => CONFIGURATION_ERROR,
        Category::AuthenticationError => AUTHENTICATION_ERROR,
        Category::PermissionDenied => PERMISSION_DENIED,
        Category::QuotaExceeded => QUOTA_EXCEEDED,
        Category::NodeUnhealthy => NODE_UNHEALTHY,
        Category::ImageNotFound => IMAGE_NOT_FOUND,
        Category::LockError => LOCK_ERROR,
        Category::NetworkError => NETWORK_ERROR,
        Category::TaskFailed => TASK_FAILED,
        Category::ValidationFailed => VALIDATION_FAILED,
        Category::NotFound => NOT_FOUND,
        Category::AlreadyExists => ALREADY_EXISTS,
        Category::Conflict => CONFLICT,
        Category::ProxmoxError => PROXMOX_ERROR,
    }
}
