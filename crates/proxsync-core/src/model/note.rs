//! What a spec's history says happened ([`Note`]), beyond a task's end: a guest made anew, a
//! drive detached or destroyed, a marker line written back. Execute decides it; `words` says
//! it, and the record keeps the words.

use crate::category::Category;
use crate::guest::{GuestId, GuestKind};

/// One fact for a spec's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// The spec's guest is gone and PVE says its VMID is free: the spec is made anew.
    MadeAnew {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
    },
    /// A guest taken over by the spec's consent.
    TakenByConsent {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
    },
    /// A VM's drive left the spec: detached, its volume kept.
    DriveDetached {
        /// The VM's VMID.
        vmid: u32,
        /// The slot.
        slot: String,
        /// The volume PVE keeps.
        volume: String,
    },
    /// A volume destroyed as `destroyDisks` (`destroyVolumes`) asks.
    VolumeDestroyed {
        /// The guest's kind.
        kind: GuestKind,
        /// The slot.
        slot: String,
        /// The volume destroyed.
        volume: String,
    },
    /// The protection a removed spec managed, cleared to delete its guest.
    ProtectionCleared {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
    },
    /// A guest's notes lost the marker line and its identity is the recorded one: the line
    /// is written back.
    MarkerWrittenBack {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// Its identity, as read.
        identity: Option<GuestId>,
    },
    /// An action failed.
    Failed {
        /// Its category.
        category: Category,
        /// Its message.
        message: String,
    },
    /// An action failed and is tried again.
    Retrying {
        /// Its category.
        category: Category,
        /// Its message.
        message: String,
    },
    /// A task outlived the wait for it.
    StillRunning {
        /// The task's UPID.
        upid: String,
    },
}
