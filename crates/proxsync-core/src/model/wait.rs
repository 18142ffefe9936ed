//! What an action waits for ([`Wait`]): something that resolves by itself (a lock a task or a
//! command holds, a create whose request may still arrive, the HA manager's move), so the spec
//! is looked at again soon and no error is recorded. Execute decides it; `words` says it.

use crate::guest::GuestKind;

/// Why an action waits, with the guest it waits on named by its kind. A task's UPID and a
/// lock's name are PVE's words, kept as they came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// A VM hibernated (its lock `lock`, `suspended`): nothing is changed on it until it is
    /// resumed.
    Hibernated {
        /// The VM's VMID.
        vmid: u32,
        /// The lock PVE set on it.
        lock: String,
    },
    /// A hibernated VM was started (resumed); the converge follows.
    Resumed {
        /// The VM's VMID.
        vmid: u32,
    },
    /// PVE still pulls the OCI image a container is made from (its task `upid`): the create
    /// goes on once it ends.
    OciPulling {
        /// The image's reference.
        reference: String,
        /// The node it is pulled to.
        node: String,
        /// The pull's task.
        upid: String,
    },
    /// The guest is locked by a command that runs no task (`fstrim`).
    CommandLock {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The node the command runs on.
        node: String,
        /// The lock, which is the command's name.
        lock: String,
    },
    /// The guest is locked by a running task.
    TaskLock {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The lock.
        lock: String,
        /// The task that can hold it (its UPID).
        task: String,
    },
    /// The guest of a create intent is being made by a running create or clone task.
    BeingMade {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The lock it carries, or `create` when none shows yet.
        lock: String,
        /// The (first) task that can be making it (its UPID).
        task: String,
    },
    /// The guest of a create intent is locked by a create or clone that started moments ago
    /// (the task listing may lag behind the config it wrote).
    JustLocked {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The lock (`create`, `clone`).
        lock: String,
    },
    /// The guest of a create intent does not exist yet, and the create request may still
    /// arrive: it is not sent again before its request timeout has passed.
    RequestInFlight {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// How long ago the request was sent, in whole seconds.
        ago_secs: u64,
    },
    /// Reads of the guest's config answered differently: it is read again.
    ReadsDiffer {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
    },
    /// The template to clone from is locked by a command that runs no task.
    TemplateCommandLock {
        /// The template's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// Its node.
        node: String,
        /// The lock, which is the command's name.
        lock: String,
    },
    /// The template to clone from is locked by a running task: the clone is sent once it ends.
    TemplateLocked {
        /// The template's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The lock.
        lock: String,
        /// The task that holds it (its UPID).
        task: String,
    },
    /// A handed-over guest still carries an install's ownership tag: not released yet.
    NotReleased {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The ownership tag it carries.
        tag: String,
    },
    /// A removed spec's guest carried no marker line: it was written back, and the guest is
    /// removed at the next cycle.
    MarkerWrittenBack {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
    },
    /// An orphan to delete is locked.
    OrphanLocked {
        /// The orphan's VMID.
        vmid: u32,
    },
    /// The HA manager was asked to migrate the guest (`hamigrate`); the listing shows when it
    /// has moved.
    HaMigrating {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The node it moves to.
        target: String,
    },
    /// An HA-managed guest's power task ended, but the HA manager has not started (stopped)
    /// it yet.
    HaSettling {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// True for a start, false for a stop.
        start: bool,
        /// The `hastart` or `hastop` task (its UPID).
        task: String,
    },
    /// proxsync is stopping: the action was not started.
    Stopping,
    /// A create in flight is waited for, and the act follows it.
    Then {
        /// What is waited for.
        wait: Box<Wait>,
        /// What follows.
        after: After,
    },
}

/// What follows a create in flight that a spec's leaving or removal waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// The guest is handed over: its spec left the install's selector.
    HandOver,
    /// The guest is deleted: its spec was removed.
    Delete,
}

impl Wait {
    /// `self`, then `after`.
    pub fn then(self, after: After) -> Wait {
        Wait::Then {
            wait: Box::new(self),
            after,
        }
    }
}
