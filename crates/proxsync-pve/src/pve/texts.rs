//! Every Proxmox VE error text proxsync recognises, in one table ([`TEXTS`]): the text's
//! pattern, what it means for proxsync ([`Meaning`], and so its [`Category`], whether it says
//! the node is overloaded, whether it proves nothing was done), the PVE source that says it
//! (repository, file, function) and the PVE versions that do. Nothing else in proxsync reads
//! PVE's words: `pve::Error` and its callers ask this table ([`meaning`], [`held_lock`]).
//!
//! Most of PVE's refusals are a plain `die` in an API handler or a task's worker: HTTP 500 (or
//! a task's exit status) with the text and nothing else to tell them apart. So the text is
//! what says whether a guest is locked, its config changed, its VMID is taken, or the node is
//! too busy. qemu-server and pve-container word the same facts differently (`VM is locked`
//! and `CT is locked`; `checksum mismatch` and `detected modified configuration`): both are
//! rows, with the same meaning.
//!
//! A pattern is PVE's text with `*` for any text (none included) and `#` for a number (one or
//! more digits); it matches anywhere in the message (PVE prefixes some: `clone failed: ...`,
//! `unable to create VM 100 - ...`), ASCII case ignored. The first row that matches decides.
//! Only the first [`MAX_SCAN`] bytes of a message are read: PVE's texts are one line, and a
//! server's answer of any size costs the same.
//!
//! Not texts, and so not here: a 400's per-parameter errors are keyed by the parameter's name
//! (`Error::rejects_parameter`), and HTTP statuses (401, 403, 501, pveproxy's 595-597) speak
//! for themselves (`Error::category`).
//!
//! The table is tested against itself (each row's samples mean what the row says, and only
//! its own pattern or a row of the same meaning takes them), and both fakes against it: the
//! in-memory one's texts (`pve::fake`) and the fakepve harness's (`tests/it/client/
//! fake_fidelity.rs`) classify as PVE's do.

use crate::category::Category;

/// What a PVE text means for proxsync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning {
    /// The guest's config carries a lock a task (or a leftover) holds: `VM is locked (backup)`,
    /// `CT is locked (disk)`. An answer about the guest, not load: it resolves when the task
    /// ends ([`crate::pve::LockHolder`] names who may hold it).
    LockHeld,
    /// PVE gave up waiting for a lock (a config's flock, a storage's, a cfs lock): the node or
    /// its storage is busier than the lock's timeout allows. Load; nothing ran under the lock.
    LockTimeout,
    /// Work under a cluster (cfs) lock ran past its 60 s and was cut off: lock contention, and
    /// load; it may have done part of its work.
    LockedTooLong,
    /// The config changed since the digest the request carried was read: read again.
    DigestConflict,
    /// An upload's checksum: the file arrived damaged (not a config's digest).
    UploadDamaged,
    /// The VMID is taken.
    AlreadyExists,
    /// The guest's config does not exist (on this node).
    NotFound,
    /// The cluster lost quorum.
    NoQuorum,
    /// A storage is full, or a quota reached.
    NoSpace,
    /// The token lacks a privilege.
    PermissionDenied,
    /// The API has no such call.
    NotImplemented,
    /// A volume or image a request names does not exist.
    ImageMissing,
    /// A paused VM refuses a shutdown (a stop still works).
    VmPaused,
    /// A power request for a guest that is not running.
    NotRunning,
    /// A start of a guest that is running already.
    AlreadyRunning,
    /// A container's resize to the size its volume has (pve-container refuses; qemu-server
    /// just returns).
    AlreadyAtSize,
    /// A conversion to a template of a VM that is one already.
    AlreadyTemplate,
    /// A deterministic refusal of the request as sent (a shrink, an MTU above the bridge's, a
    /// full clone of a running container, a clone to a node the volumes cannot reach): the
    /// same request fails the same way until a person changes the spec or the cluster.
    Refused,
    /// An HA resource, group or rule that does not exist.
    HaMissing,
    /// An HA resource in the `error` state refuses every change but `state=disabled`.
    HaErrorState,
    /// A pool that does not exist.
    PoolMissing,
    /// A download or a pull refused because a file of its name is on the storage already
    /// (pve-storage never overwrites one, and puts a file in place only once it is whole).
    FileExists,
    /// A VM's guest agent does not answer: it is not running, or a command to it failed. An
    /// answer about the guest, not load: a health check fails.
    AgentDown,
    /// A VM has no guest agent configured (`agent` is off in its config): nothing to ask.
    NoAgent,
    /// A snapshot refused because a volume of the guest is on a storage (or in a format) that
    /// cannot snapshot (`has_feature('snapshot')` is false): the same until a person moves the
    /// disk or changes the spec. Said in the `qmsnapshot`/`vzsnapshot` task, before anything
    /// is written.
    SnapshotUnsupported,
    /// A snapshot of a name the guest has already: nothing taken (the task's check, before
    /// anything is written).
    SnapshotExists,
    /// A rollback to or a delete of a snapshot the guest does not have (any more): nothing
    /// done. About the snapshot, never the guest (not `NotFound`).
    SnapshotMissing,
}

impl Meaning {
    /// The category of a failure PVE described in these words; `None`: the one of its HTTP
    /// status (or `TaskFailed`), the caller deciding what it means.
    pub fn category(self) -> Option<Category> {
        match self {
            Meaning::LockHeld | Meaning::LockTimeout | Meaning::LockedTooLong => {
                Some(Category::LockError)
            }
            Meaning::DigestConflict => Some(Category::Conflict),
            Meaning::AlreadyExists => Some(Category::AlreadyExists),
            Meaning::NotFound | Meaning::HaMissing => Some(Category::NotFound),
            Meaning::NoQuorum => Some(Category::NodeUnhealthy),
            Meaning::NoSpace => Some(Category::QuotaExceeded),
            Meaning::PermissionDenied => Some(Category::PermissionDenied),
            Meaning::NotImplemented => Some(Category::ApiNotSupported),
            Meaning::ImageMissing => Some(Category::ImageNotFound),
            Meaning::Refused
            | Meaning::HaErrorState
            | Meaning::PoolMissing
            | Meaning::SnapshotUnsupported => Some(Category::ConfigurationError),
            Meaning::UploadDamaged
            | Meaning::VmPaused
            | Meaning::NotRunning
            | Meaning::AlreadyRunning
            | Meaning::AlreadyAtSize
            | Meaning::AlreadyTemplate
            | Meaning::FileExists
            | Meaning::AgentDown
            | Meaning::NoAgent
            | Meaning::SnapshotExists
            | Meaning::SnapshotMissing => None,
        }
    }

    /// Lock contention: PVE could not get (or keep) a lock in time. The only meaning that
    /// says the node is overloaded (`crate::concurrency` cuts its limit); every other text is
    /// an answer about the request or the guest.
    pub(crate) fn is_contention(self) -> bool {
        matches!(self, Meaning::LockTimeout | Meaning::LockedTooLong)
    }

    /// PVE refused before doing any of the work (its checks run before the change, the task
    /// or the allocation), so a create or clone that ends like this made nothing.
    pub(crate) fn nothing_done(self) -> bool {
        match self {
            Meaning::LockHeld
            | Meaning::LockTimeout
            | Meaning::DigestConflict
            | Meaning::AlreadyExists
            | Meaning::NotFound
            | Meaning::NoQuorum
            | Meaning::VmPaused
            | Meaning::NotRunning
            | Meaning::AlreadyRunning
            | Meaning::AlreadyAtSize
            | Meaning::AlreadyTemplate
            | Meaning::Refused
            | Meaning::HaMissing
            | Meaning::HaErrorState
            | Meaning::PoolMissing
            | Meaning::FileExists
            | Meaning::AgentDown
            | Meaning::NoAgent
            | Meaning::SnapshotUnsupported
            | Meaning::SnapshotExists
            | Meaning::SnapshotMissing => true,
            Meaning::LockedTooLong
            | Meaning::UploadDamaged
            | Meaning::NoSpace
            | Meaning::PermissionDenied
            | Meaning::NotImplemented
            | Meaning::ImageMissing => false,
        }
    }
}

/// One text of PVE's.
#[derive(Debug)]
pub struct Text {
    /// PVE's text, `*` for any text and `#` for a number (see the module's doc).
    pub pattern: &'static str,
    /// What a message that matches `pattern` means.
    pub meaning: Meaning,
    /// Where PVE says it: repository, file, function (API method names as `register_method`'s
    /// `name`).
    pub source: &'static str,
    /// The PVE releases that say it (package versions where it changed).
    pub versions: &'static str,
    /// Texts as PVE writes them, prefixes included: each means what the row says.
    pub samples: &'static [&'static str],
}

/// How much of a message is read (bytes).
pub(crate) const MAX_SCAN: usize = 4096;

/// Every PVE text proxsync recognises. Sources read at: qemu-server e6352be6 (9.2.6),
/// pve-container 94f5585 (6.1.10), pve-guest-common 4a8f6cb (6.0.2), pve-common f665029 (9.2.1),
/// pve-cluster 7091d92 (9.1.6), pve-storage 0c56bad (9.1.7), pve-manager 14a22df3 (9.2.11),
/// pve-ha-manager b71218f (5.2.0), pve-http-server 5c9e4ea (6.0.5); versions from their
/// histories (PVE 8.0 shipped qemu-server 8.0, pve-container 5.0).
pub const TEXTS: &[Text] = &[
    // Locks a task holds.
    Text {
        pattern: "VM is locked (*)",
        meaning: Meaning::LockHeld,
        source: "pve-guest-common src/PVE/AbstractConfig.pm check_lock (`die $class->guest_type() \
                 . \" is locked ($conf->{lock})\\n\"`), qemu-server src/PVE/QemuConfig.pm \
                 guest_type `VM`",
        versions: "every PVE 8.x and 9.x",
        samples: &[
            "VM is locked (backup)",
            "clone failed: VM is locked (clone)",
        ],
    },
    Text {
        pattern: "CT is locked (*)",
        meaning: Meaning::LockHeld,
        source: "pve-guest-common src/PVE/AbstractConfig.pm check_lock and set_lock, \
                 pve-container src/PVE/LXC/Config.pm guest_type `CT` (clone_vm's \
                 `set_lock($vmid, 'disk')` on the source, update_vm, resize_vm, vm_start)",
        versions: "every PVE 8.x and 9.x",
        samples: &["CT is locked (disk)", "CT is locked (backup)"],
    },
    // Lock contention: load.
    Text {
        pattern: "can't lock file '*' - got timeout",
        meaning: Meaning::LockTimeout,
        source: "pve-common src/PVE/Tools.pm lock_file_full (`$@ = \"can't lock file \
                 '$filename' - $@\"` after run_with_timeout's `got timeout`): a VM's config \
                 (qemu-server QemuConfig config_file_lock), a container's (pve-container \
                 LXC/Config.pm config_file_lock, `/run/lock/lxc/pve-config-N.lock`), a local \
                 storage's (pve-storage src/PVE/Storage/Plugin.pm cluster_lock_storage)",
        versions: "every PVE 8.x and 9.x",
        samples: &[
            "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout",
            "can't lock file '/run/lock/lxc/pve-config-101.lock' - got timeout",
            "clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got \
             timeout",
        ],
    },
    Text {
        pattern: "cfs-lock '*' error: got lock request timeout",
        meaning: Meaning::LockTimeout,
        source: "pve-cluster src/PVE/Cluster.pm $cfs_lock (cfs_lock_storage: a shared \
                 storage's lock, `storage-ID`)",
        versions: "every PVE 8.x and 9.x",
        samples: &["cfs-lock 'storage-ceph' error: got lock request timeout"],
    },
    Text {
        pattern: "'*'-locked command timed out - aborting",
        meaning: Meaning::LockedTooLong,
        source: "pve-cluster src/PVE/Cluster.pm $cfs_lock (the code under the lock past its \
                 `alarm(60)`)",
        versions: "every PVE 8.x and 9.x (pve-cluster 6.2-1 on)",
        samples: &["'storage-ceph'-locked command timed out - aborting"],
    },
    // A config changed under the request.
    Text {
        pattern: "checksum mismatch (file change by other user?)",
        meaning: Meaning::DigestConflict,
        source: "qemu-server src/PVE/API2/Qemu.pm $update_vm_api ($load_and_check_config), \
                 resize_vm",
        versions: "PVE 8.3 and later (qemu-server 8.2.5 on)",
        samples: &["checksum mismatch (file change by other user?)"],
    },
    Text {
        pattern: "checksum missmatch (file change by other user?)",
        meaning: Meaning::DigestConflict,
        source: "qemu-server src/PVE/API2/Qemu.pm $update_vm_api, resize_vm (the spelling \
                 before commit be8c868f `fix typos in user-visible strings`)",
        versions: "PVE 8.0 to 8.2 (qemu-server before 8.2.5)",
        samples: &["checksum missmatch (file change by other user?)"],
    },
    Text {
        pattern: "detected modified configuration - file changed by other user? Try again.",
        meaning: Meaning::DigestConflict,
        source: "pve-common src/PVE/Tools.pm assert_if_modified: pve-container \
                 src/PVE/API2/LXC/Config.pm update_vm and src/PVE/API2/LXC.pm resize_vm, \
                 pve-ha-manager (SectionConfig::assert_if_modified), qemu-server move_disk",
        versions: "every PVE 8.x and 9.x",
        samples: &["detected modified configuration - file changed by other user? Try again."],
    },
    Text {
        pattern: "checksum mismatch: got '*' != expect '*'",
        meaning: Meaning::UploadDamaged,
        source: "pve-storage src/PVE/API2/Storage/Status.pm upload (its worker)",
        versions: "every PVE 8.x and 9.x",
        samples: &["checksum mismatch: got 'e3b0c442' != expect '9f86d081'"],
    },
    // The VMID is taken.
    Text {
        pattern: "VM # already exists on node '*'",
        meaning: Meaning::AlreadyExists,
        source: "pve-cluster src/PVE/Cluster.pm check_vmid_unused (the guest at the VMID a VM), \
                 from qemu-server create_vm (`unable to create VM N - `) and pve-container \
                 create_vm (`unable to create CT N - `)",
        versions: "every PVE 8.x and 9.x",
        samples: &[
            "unable to create VM 100 - VM 100 already exists on node 'pve2'",
            "unable to create CT 100 - VM 100 already exists on node 'pve1'",
        ],
    },
    Text {
        pattern: "CT # already exists on node '*'",
        meaning: Meaning::AlreadyExists,
        source: "pve-cluster src/PVE/Cluster.pm check_vmid_unused (the guest at the VMID a \
                 container)",
        versions: "every PVE 8.x and 9.x",
        samples: &["unable to create CT 101 - CT 101 already exists on node 'pve1'"],
    },
    Text {
        pattern: "unable to create VM #: config file already exists",
        meaning: Meaning::AlreadyExists,
        source: "qemu-server src/PVE/API2/Qemu.pm clone_vm",
        versions: "every PVE 8.x and 9.x",
        samples: &["unable to create VM 100: config file already exists"],
    },
    Text {
        pattern: "VM # already exists",
        meaning: Meaning::AlreadyExists,
        source: "pve-manager PVE/API2/Cluster.pm nextid (`raise_param_exc({ vmid => \"VM $vmid \
                 already exists\" })`, a 400 for any guest's VMID)",
        versions: "every PVE 8.x and 9.x",
        samples: &["VM 105 already exists"],
    },
    // The guest is not there.
    Text {
        pattern: "Configuration file '*' does not exist",
        meaning: Meaning::NotFound,
        source: "pve-guest-common src/PVE/AbstractConfig.pm load_config (both kinds)",
        versions: "every PVE 8.x and 9.x",
        samples: &[
            "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist",
            "Configuration file 'nodes/pve1/lxc/101.conf' does not exist",
        ],
    },
    Text {
        pattern: "unable to find configuration file for VM # on node '*'",
        meaning: Meaning::NotFound,
        source: "qemu-server src/PVE/QemuConfig.pm assert_config_exists_on_node",
        versions: "every PVE 8.x and 9.x",
        samples: &["unable to find configuration file for VM 100 on node 'pve2'"],
    },
    // The cluster.
    Text {
        pattern: "cluster not ready - no quorum?",
        meaning: Meaning::NoQuorum,
        source: "pve-cluster src/PVE/Cluster.pm check_cfs_quorum",
        versions: "every PVE 8.x and 9.x",
        samples: &["cluster not ready - no quorum?"],
    },
    Text {
        pattern: "no quorum!",
        meaning: Meaning::NoQuorum,
        source: "pve-cluster src/PVE/Cluster.pm $cfs_lock (a lock not got without quorum)",
        versions: "every PVE 8.x and 9.x",
        samples: &["cfs-lock 'file-user_cfg' error: no quorum!"],
    },
    // Space.
    Text {
        pattern: "No space left on device",
        meaning: Meaning::NoSpace,
        source: "the kernel's ENOSPC (strerror), in the error of any storage command PVE runs \
                 (qemu-img, lvcreate, zfs, tar)",
        versions: "every PVE release",
        samples: &["qemu-img: error while writing at byte 0: No space left on device"],
    },
    Text {
        pattern: "Disk quota exceeded",
        meaning: Meaning::NoSpace,
        source: "the kernel's EDQUOT (strerror), in the error of a storage command",
        versions: "every PVE release",
        samples: &["write failed: Disk quota exceeded"],
    },
    Text {
        pattern: "not enough free space (# < #)",
        meaning: Meaning::NoSpace,
        source: "pve-storage src/PVE/Storage/LVMPlugin.pm alloc_lvm_image",
        versions: "every PVE 8.x and 9.x",
        samples: &["not enough free space (1073741824 < 34359738368)"],
    },
    // Privileges and the API.
    Text {
        pattern: "Permission check failed",
        meaning: Meaning::PermissionDenied,
        source: "pve-common src/PVE/Exception.pm raise_perm_exc (HTTP 403)",
        versions: "every PVE 8.x and 9.x",
        samples: &["Permission check failed (/vms/100, VM.Allocate)"],
    },
    Text {
        pattern: "Method '*' not implemented",
        meaning: Meaning::NotImplemented,
        source: "pve-http-server src/PVE/APIServer/AnyEvent.pm rest_handler (HTTP 501)",
        versions: "every PVE 8.x and 9.x",
        samples: &["Method 'POST /nodes/pve1/qemu/100/importdisk' not implemented"],
    },
    // Volumes and images.
    Text {
        pattern: "unable to parse volume ID '*'",
        meaning: Meaning::ImageMissing,
        source: "pve-storage src/PVE/Storage/Plugin.pm parse_volume_id",
        versions: "every PVE 8.x and 9.x",
        samples: &["unable to parse volume ID 'debian.qcow2'"],
    },
    Text {
        pattern: "unable to parse directory volume name '*'",
        meaning: Meaning::Refused,
        source: "pve-storage src/PVE/Storage/Plugin.pm parse_volname (a name its content's \
                 pattern does not take: a vztmpl archive's `$VZTMPL_EXT_RE_1` in \
                 src/PVE/Storage.pm), from pve-container src/PVE/API2/LXC.pm create_vm's \
                 check_volume_access, before anything is made",
        versions: "every PVE 8.x and 9.x (which archives it takes: .tar.bz2 from pve-storage \
                   8.2.6, PVE 8.3; a bare .tar from 9.0.15, PVE 9.1)",
        samples: &["unable to parse directory volume name 'vztmpl/debian-12.tgz'"],
    },
    Text {
        pattern: "volume '*:*' does not exist",
        meaning: Meaning::ImageMissing,
        source: "pve-storage src/PVE/Storage/Plugin.pm activate_volume",
        versions: "every PVE 8.x and 9.x",
        samples: &["volume 'local:vztmpl/debian-12.tar.zst' does not exist"],
    },
    Text {
        pattern: "volume *:* does not exist",
        meaning: Meaning::ImageMissing,
        source: "qemu-server src/PVE/API2/Qemu.pm create_disks (an `import-from` volume of no \
                 size)",
        versions: "every PVE 8.x and 9.x",
        samples: &["volume local:import/debian.qcow2 does not exist"],
    },
    // Snapshots (`POST .../snapshot`, `.../snapshot/{name}/rollback`, `DELETE
    // .../snapshot/{name}`): each said in the worker, so as the task's exit status.
    Text {
        pattern: "snapshot feature is not available",
        meaning: Meaning::SnapshotUnsupported,
        source: "pve-guest-common src/PVE/AbstractConfig.pm __snapshot_prepare (`die \"snapshot \
                 feature is not available\\n\" if !$class->has_feature('snapshot', ...)`, in \
                 snapshot_create: qemu-server src/PVE/API2/Qemu.pm snapshot's qmsnapshot task, \
                 pve-container src/PVE/API2/LXC/Snapshot.pm snapshot's vzsnapshot task)",
        versions: "every PVE 8.x and 9.x",
        samples: &["snapshot feature is not available"],
    },
    Text {
        pattern: "snapshot name '*' already used",
        meaning: Meaning::SnapshotExists,
        source: "pve-guest-common src/PVE/AbstractConfig.pm __snapshot_prepare (after check_lock, \
                 before the config is written), in the qmsnapshot/vzsnapshot task",
        versions: "every PVE 8.x and 9.x",
        samples: &["snapshot name 'proxsync-1' already used"],
    },
    Text {
        pattern: "snapshot '*' does not exist",
        meaning: Meaning::SnapshotMissing,
        source: "pve-guest-common src/PVE/AbstractConfig.pm snapshot_rollback \
                 ($get_snapshot_config, before check_lock) and snapshot_delete (before its \
                 set_lock), in the qmrollback/vzrollback and qmdelsnapshot/vzdelsnapshot tasks; \
                 load_snapshot_config",
        versions: "every PVE 8.x and 9.x",
        samples: &["snapshot 'before' does not exist"],
    },
    // A VM's guest agent (`.../agent/ping` and every agent call).
    Text {
        pattern: "No QEMU guest agent configured",
        meaning: Meaning::NoAgent,
        source: "qemu-server src/PVE/QemuServer/Agent.pm assert_agent_available (the config has \
                 no `agent`)",
        versions: "every PVE 8.x and 9.x",
        samples: &["No QEMU guest agent configured"],
    },
    Text {
        pattern: "QEMU guest agent is not running",
        meaning: Meaning::AgentDown,
        source: "qemu-server src/PVE/QemuServer/Agent.pm assert_agent_available (qga_check_running: \
                 `guest-ping` did not answer within 3 s)",
        versions: "every PVE 8.x and 9.x",
        samples: &["QEMU guest agent is not running"],
    },
    Text {
        pattern: "qmp command 'guest-*' failed - *",
        meaning: Meaning::AgentDown,
        source: "qemu-server src/PVE/QMPClient.pm (`VM $vmid qmp command '$cmd' failed - $err`, \
                 `got timeout` when the agent does not answer), from src/PVE/API2/Qemu/Agent.pm's \
                 `mon_cmd($vmid, \"guest-$cmd\")`",
        versions: "every PVE 8.x and 9.x",
        samples: &["VM 100 qmp command 'guest-ping' failed - got timeout"],
    },
    Text {
        pattern: "VM # is not running",
        meaning: Meaning::NotRunning,
        source: "qemu-server src/PVE/QemuServer/Agent.pm assert_agent_available (an agent call \
                 to a stopped VM)",
        versions: "every PVE 8.x and 9.x",
        samples: &["VM 100 is not running"],
    },
    Text {
        pattern: "refusing to override existing file '*'",
        meaning: Meaning::FileExists,
        source: "pve-storage src/PVE/API2/Storage/Status.pm oci_registry_pull (a `die` before the \
                 task, over `$path/$filename`, which skopeo's temporary file is renamed to only \
                 once whole), pve-common src/PVE/Tools.pm download_file_from_url (in the \
                 download task, when no checksum was given)",
        versions: "oci-registry-pull: PVE 9.1; download-url: every PVE 8.x and 9.x",
        samples: &[
            "refusing to override existing file 'docker.io_library_nginx_1.27-0123456789abcdef.tar'",
            "refusing to override existing file '/var/lib/vz/template/iso/x.iso'",
        ],
    },
    // Power.
    Text {
        pattern: "VM is paused - cannot shutdown",
        meaning: Meaning::VmPaused,
        source: "qemu-server src/PVE/API2/Qemu.pm vm_shutdown, vm_reboot",
        versions: "every PVE 8.x and 9.x",
        samples: &["VM is paused - cannot shutdown"],
    },
    Text {
        pattern: "CT # not running",
        meaning: Meaning::NotRunning,
        source: "pve-container src/PVE/API2/LXC/Status.pm vm_stop, vm_shutdown, vm_suspend",
        versions: "every PVE 8.x and 9.x",
        samples: &["CT 101 not running"],
    },
    Text {
        pattern: "VM # not running",
        meaning: Meaning::NotRunning,
        source: "qemu-server src/PVE/API2/Qemu.pm vm_reset, vm_reboot, vm_suspend, vm_resume; \
                 pve-container src/PVE/API2/LXC/Status.pm vm_reboot (a container's, in a VM's \
                 words)",
        versions: "every PVE 8.x and 9.x",
        samples: &["VM 100 not running"],
    },
    Text {
        pattern: "CT # already running",
        meaning: Meaning::AlreadyRunning,
        source: "pve-container src/PVE/API2/LXC/Status.pm vm_start, vm_resume",
        versions: "every PVE 8.x and 9.x",
        samples: &["CT 101 already running"],
    },
    Text {
        pattern: "VM # already running",
        meaning: Meaning::AlreadyRunning,
        source: "qemu-server src/PVE/QemuServer.pm vm_start (in the qmstart task)",
        versions: "every PVE 8.x and 9.x",
        samples: &["VM 100 already running"],
    },
    // Sizes.
    Text {
        pattern: "disk is already at specified size",
        meaning: Meaning::AlreadyAtSize,
        source: "pve-container src/PVE/API2/LXC.pm resize_vm ($load_and_check, before the task \
                 and again in it)",
        versions: "every PVE 8.x and 9.x (pve-container 3.1-12 on)",
        samples: &["disk is already at specified size"],
    },
    Text {
        pattern: "unable to shrink disk size",
        meaning: Meaning::Refused,
        source: "pve-container src/PVE/API2/LXC.pm resize_vm",
        versions: "every PVE 8.x and 9.x",
        samples: &["unable to shrink disk size"],
    },
    Text {
        pattern: "shrinking disks is not supported",
        meaning: Meaning::Refused,
        source: "qemu-server src/PVE/API2/Qemu.pm resize_vm",
        versions: "every PVE 8.x and 9.x",
        samples: &["shrinking disks is not supported"],
    },
    // Templates.
    Text {
        pattern: "you can't convert a template to a template",
        meaning: Meaning::AlreadyTemplate,
        source: "qemu-server src/PVE/API2/Qemu.pm template ($load_and_check, before the \
                 qmtemplate task and again in it; pve-container src/PVE/API2/LXC.pm template \
                 says the same of a container)",
        versions: "every PVE 8.x and 9.x",
        samples: &["you can't convert a template to a template"],
    },
    // Refusals of the request as sent.
    Text {
        pattern: "you can't convert a VM to template if VM is running",
        meaning: Meaning::Refused,
        source: "qemu-server src/PVE/API2/Qemu.pm template ($load_and_check, before the \
                 qmtemplate task and again in it)",
        versions: "every PVE 8.x and 9.x",
        samples: &["you can't convert a VM to template if VM is running"],
    },
    Text {
        pattern: "MTU size '#' is bigger than bridge MTU '#'",
        meaning: Meaning::Refused,
        source: "pve-container src/PVE/LXC/Config.pm update_pct_config (an update), \
                 src/PVE/LXC.pm update_lxc_config (a start)",
        versions: "every PVE 8.x and 9.x (pve-container 4.3-3 on)",
        samples: &["net0: MTU size '9000' is bigger than bridge MTU '1500'"],
    },
    Text {
        pattern: "Full clone of a running container is only possible from a snapshot",
        meaning: Meaning::Refused,
        source: "pve-container src/PVE/API2/LXC.pm clone_vm",
        versions: "PVE 9.1 and later (pve-container 6.0.19 on)",
        samples: &["Full clone of a running container is only possible from a snapshot"],
    },
    Text {
        pattern: "Cannot do full clones on a running container without snapshots",
        meaning: Meaning::Refused,
        source: "pve-container src/PVE/API2/LXC.pm clone_vm (the words before commit 2682d64 \
                 `api: clone: improve error message`)",
        versions: "PVE 8.0 to 9.1 (pve-container before 6.0.19)",
        samples: &["Cannot do full clones on a running container without snapshots"],
    },
    Text {
        pattern: "can't clone VM to node '*' (VM uses local storage)",
        meaning: Meaning::Refused,
        source: "qemu-server src/PVE/API2/Qemu.pm clone_vm",
        versions: "every PVE 8.x and 9.x",
        samples: &["can't clone VM to node 'pve2' (VM uses local storage)"],
    },
    Text {
        pattern: "can't clone CT to node '*' (CT uses local storage)",
        meaning: Meaning::Refused,
        source: "pve-container src/PVE/API2/LXC.pm clone_vm",
        versions: "every PVE 8.x and 9.x",
        samples: &["can't clone CT to node 'pve2' (CT uses local storage)"],
    },
    // HA.
    Text {
        pattern: "no such resource '*'",
        meaning: Meaning::HaMissing,
        source: "pve-ha-manager src/PVE/API2/HA/Resources.pm $api_copy_config, \
                 src/PVE/HA/Config.pm",
        versions: "every PVE 8.x and 9.x",
        samples: &["no such resource 'vm:100'"],
    },
    Text {
        pattern: "no such ha group '*'",
        meaning: Meaning::HaMissing,
        source: "pve-ha-manager src/PVE/API2/HA/Groups.pm $api_copy_config, update",
        versions: "PVE 8.x, and 9.x while groups are left",
        samples: &["no such ha group 'prefer-pve1'"],
    },
    Text {
        pattern: "no such ha rule '*'",
        meaning: Meaning::HaMissing,
        source: "pve-ha-manager src/PVE/API2/HA/Rules.pm $get_api_ha_rule",
        versions: "PVE 9.0 and later (pve-ha-manager 5.0.1 on)",
        samples: &["no such ha rule 'proxsync-web'"],
    },
    Text {
        pattern: "service '*' in error state, must be disabled and fixed first",
        meaning: Meaning::HaErrorState,
        source: "pve-ha-manager src/PVE/API2/HA/Resources.pm check_service_state",
        versions: "every PVE 8.x and 9.x",
        samples: &["service 'ct:101' in error state, must be disabled and fixed first"],
    },
    // Pools.
    Text {
        pattern: "pool '*' does not exist",
        meaning: Meaning::PoolMissing,
        source: "pve-manager PVE/API2/Pool.pm index (`GET /pools?poolid=P`)",
        versions: "PVE 8.1 and later (pve-manager 8.0.9 on)",
        samples: &["pool 'web' does not exist"],
    },
];

/// The row whose pattern `text` matches first, if any.
pub fn recognise(text: &str) -> Option<&'static Text> {
    TEXTS.iter().find(|t| matches(t.pattern, text))
}

/// What `text` means for proxsync, when it is one of PVE's texts this table knows.
pub fn meaning(text: &str) -> Option<Meaning> {
    recognise(text).map(|t| t.meaning)
}

/// The lock a [`Meaning::LockHeld`] text names (`VM is locked (backup)`: `backup`).
pub fn held_lock(text: &str) -> Option<&str> {
    if meaning(text) != Some(Meaning::LockHeld) {
        return None;
    }
    let (_, rest) = text.split_once(" is locked (")?;
    let (lock, _) = rest.split_once(')')?;
    Some(lock).filter(|l| !l.is_empty())
}

/// Whether `text` names guest `vmid` (`CT 101 not running`: the number as a word of its own,
/// not a part of `1101`).
pub fn names_vmid(text: &str, vmid: u32) -> bool {
    let id = vmid.to_string();
    text.split(|c: char| !c.is_ascii_digit()).any(|w| w == id)
}

/// One step of a pattern.
#[derive(Clone, Copy)]
enum Step {
    /// This byte (lower case).
    Byte(u8),
    /// Any bytes, none included (`*`).
    Any,
    /// One digit (the first of `#`).
    Digit,
    /// More digits, none included (the rest of `#`).
    MoreDigits,
}

fn steps(pattern: &str) -> Vec<Step> {
    let mut out = Vec::with_capacity(pattern.len() + 1);
    for b in pattern.bytes() {
        match b {
            b'*' => out.push(Step::Any),
            b'#' => out.extend([Step::Digit, Step::MoreDigits]),
            b => out.push(Step::Byte(b.to_ascii_lowercase())),
        }
    }
    out
}

/// Whether `pattern` occurs in `text`'s first [`MAX_SCAN`] bytes: the pattern run as a set
/// of states over the bytes (no backtracking, so any text costs at most its length times the
/// pattern's).
fn matches(pattern: &str, text: &str) -> bool {
    let steps = steps(pattern);
    let end = steps.len();
    // Through the steps that may match nothing.
    let close = |states: &mut [bool]| {
        for i in 0..end {
            if states[i] && matches!(steps[i], Step::Any | Step::MoreDigits) {
                states[i + 1] = true;
            }
        }
    };
    let mut now = vec![false; end + 1];
    let mut next = vec![false; end + 1];
    now[0] = true;
    close(&mut now);
    if now[end] {
        return true;
    }
    let bytes = text.as_bytes();
    for &b in &bytes[..bytes.len().min(MAX_SCAN)] {
        let b = b.to_ascii_lowercase();
        next.fill(false);
        // The pattern may begin at any byte.
        next[0] = true;
        for i in 0..end {
            if !now[i] {
                continue;
            }
            match steps[i] {
                Step::Byte(c) if c == b => next[i + 1] = true,
                Step::Any => next[i] = true,
                Step::Digit if b.is_ascii_digit() => next[i + 1] = true,
                Step::MoreDigits if b.is_ascii_digit() => next[i] = true,
                _ => {}
            }
        }
        close(&mut next);
        if next[end] {
            return true;
        }
        std::mem::swap(&mut now, &mut next);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repositories a row may cite (PVE's own, and the kernel's words for a full disk).
    const SOURCES: [&str; 10] = [
        "qemu-server ",
        "pve-container ",
        "pve-guest-common ",
        "pve-common ",
        "pve-cluster ",
        "pve-storage ",
        "pve-manager ",
        "pve-ha-manager ",
        "pve-http-server ",
        "the kernel's ",
    ];

    #[test]
    fn every_sample_means_what_its_row_says() {
        for row in TEXTS {
            assert!(!row.samples.is_empty(), "{row:?}");
            for sample in row.samples {
                assert!(matches(row.pattern, sample), "{sample:?} by {row:?}");
                let first = recognise(sample).expect("recognised");
                assert_eq!(
                    first.meaning, row.meaning,
                    "{sample:?} is taken by {first:?} first"
                );
                // A text with a newline (PVE's `die "...\n"`) and in another case reads the same.
                assert_eq!(meaning(&format!("{sample}\n")), Some(row.meaning));
                assert_eq!(meaning(&sample.to_uppercase()), Some(row.meaning));
            }
        }
    }

    #[test]
    fn every_row_names_its_source_and_versions() {
        for row in TEXTS {
            assert!(
                SOURCES.iter().any(|s| row.source.starts_with(s)),
                "{}: {}",
                row.pattern,
                row.source
            );
            assert!(
                row.source.contains(".pm") || row.source.starts_with("the kernel's "),
                "{}: a file",
                row.pattern
            );
            assert!(!row.versions.is_empty(), "{}", row.pattern);
        }
        let mut patterns: Vec<&str> = TEXTS.iter().map(|t| t.pattern).collect();
        patterns.sort_unstable();
        patterns.dedup();
        assert_eq!(patterns.len(), TEXTS.len(), "a pattern is one row");
    }

    #[test]
    fn look_alikes_are_not_recognised() {
        for text in [
            // A storage's words: the VMID is not taken.
            "disk image '/var/lib/vz/images/100/vm-100-disk-0.qcow2' already exists",
            "volume vm-100-disk-0 already exists",
            "target volume 'vm-100-disk-1' already exists",
            // Not the HA resource, a type of it.
            "no such resource type 'foo'",
            "unable to get PID for CT 101 (not running?)",
            // A feature, not a full disk.
            "btrfs quotas are currently not supported, use an unsized subvolume or a raw file",
            // A snapshot's reserved name (the API handler's check), not a name taken.
            "unable to use snapshot name 'current' (reserved name)",
            "got timeout",
            "something new",
            "",
        ] {
            assert_eq!(recognise(text).map(|t| t.pattern), None, "{text:?}");
        }
    }

    #[test]
    fn what_each_meaning_says() {
        assert!(Meaning::LockTimeout.is_contention() && Meaning::LockedTooLong.is_contention());
        assert!(!Meaning::LockHeld.is_contention());
        // Work under a cfs lock cut off at 60 s may have done part of it.
        assert!(!Meaning::LockedTooLong.nothing_done());
        assert!(Meaning::LockHeld.nothing_done() && Meaning::Refused.nothing_done());
        assert_eq!(Meaning::LockHeld.category(), Some(Category::LockError));
        assert_eq!(Meaning::DigestConflict.category(), Some(Category::Conflict));
        assert_eq!(Meaning::AlreadyAtSize.category(), None);
        // A snapshot's words: about the snapshot, never the guest gone or a volume missing,
        // never load, and refused before anything was written.
        for (text, want) in [
            (
                "snapshot feature is not available",
                Meaning::SnapshotUnsupported,
            ),
            (
                "snapshot name 'proxsync-1' already used",
                Meaning::SnapshotExists,
            ),
            ("snapshot 'before' does not exist", Meaning::SnapshotMissing),
        ] {
            assert_eq!(meaning(text), Some(want), "{text}");
            assert!(!want.is_contention() && want.nothing_done(), "{text}");
            assert_ne!(want.category(), Some(Category::NotFound), "{text}");
            assert_ne!(want.category(), Some(Category::ImageNotFound), "{text}");
        }
        assert_eq!(
            Meaning::SnapshotUnsupported.category(),
            Some(Category::ConfigurationError)
        );
    }

    #[test]
    fn the_lock_a_text_names() {
        assert_eq!(held_lock("CT is locked (disk)"), Some("disk"));
        assert_eq!(
            held_lock("clone failed: VM is locked (backup)\n"),
            Some("backup")
        );
        assert_eq!(held_lock("VM is locked ()"), None);
        assert_eq!(held_lock("can't lock file '/x' - got timeout"), None);
    }

    #[test]
    fn a_text_names_its_guest_by_the_whole_number() {
        assert!(names_vmid("CT 101 not running\n", 101));
        assert!(names_vmid("service 'ct:101' in error state", 101));
        assert!(!names_vmid("CT 1101 not running", 101));
        assert!(!names_vmid("CT 10 not running", 101));
    }

    #[test]
    fn patterns_match_as_documented() {
        assert!(matches(
            "VM # already exists",
            "unable to create VM 100 - VM 100 already exists"
        ));
        assert!(!matches("VM # already exists", "VM  already exists"));
        assert!(!matches("VM # already exists", "VM x100 already exists"));
        assert!(matches("a*b", "ab"));
        assert!(matches("a*b", "xxaYYbzz"));
        assert!(!matches("a*b", "ba"));
        assert!(matches("", "anything"));
        // Multi-byte text is read as bytes, never split into a panic.
        assert!(matches("CT is locked (*)", "é CT is locked (dïsk) ü"));
        assert!(!matches("é", "E"));
        // Only the first MAX_SCAN bytes are read.
        let far = format!("{}CT is locked (disk)", "x".repeat(MAX_SCAN));
        assert!(!matches("CT is locked (*)", &far));
        let huge = format!("{}{}", "CT is locked (disk)", "#*".repeat(1 << 20));
        assert!(matches("CT is locked (*)", &huge));
    }
}
