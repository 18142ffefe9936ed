//! Condition types.

/// The VM as a whole, over its whole life: True when it exists, matches its spec and has
/// the requested power state; False (with the reason) otherwise.
pub(crate) const READY: &str = "Ready";
/// True while proxsync is working towards the spec (the reason names the current step).
pub(crate) const RECONCILING: &str = "Reconciling";
/// True when proxsync cannot make progress until a human acts (the reason names why).
pub(crate) const STALLED: &str = "Stalled";
/// Whether the VM's node (and its cluster) is online and quorate.
pub(crate) const NODE_HEALTHY: &str = "NodeHealthy";
/// Whether the VM has been created (or adopted) once; never goes back to False.
pub(crate) const PROVISIONED: &str = "Provisioned";
/// Whether PVE holds config changes that take effect only after a reboot. Present only
/// while the engine reports it.
pub(crate) const REBOOT_PENDING: &str = "RebootPending";

/// Whether an observe-only spec's VM (`managementPolicy: Observe`) matches it. Present only
/// for such specs.
pub(crate) const SYNCED: &str = "Synced";

/// That the spec is suspended (`spec.suspend`, `proxsync suspend`): who, since when and why.
/// Present only while it is.
pub(crate) const SUSPENDED: &str = "Suspended";

/// Whether the guest passes its health checks (`spec.health`). Present only for specs with
/// `health`.
pub(crate) const HEALTHY: &str = "Healthy";

/// The condition types every spec file always carries, in file order.
pub(crate) const STANDARD: [&str; 5] = [READY, RECONCILING, STALLED, NODE_HEALTHY, PROVISIONED];

/// The order conditions are written in; types not listed here follow, sorted by name.
pub(crate) const ORDER: [&str; 9] = [
    READY,
    RECONCILING,
    STALLED,
    NODE_HEALTHY,
    PROVISIONED,
    HEALTHY,
    REBOOT_PENDING,
    SYNCED,
    SUSPENDED,
];
