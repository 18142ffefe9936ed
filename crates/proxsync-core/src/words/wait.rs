//! What an action waits for ([`Wait`]): the guest named by its kind, the lock and the task
//! PVE shows, and what follows, for the spec's history, its status and the journal.

use std::fmt;

use crate::model::{After, Wait};

/// The HA manager's shutdown timeout of a container it relocates: pve-ha-manager
/// `src/PVE/HA/Resources/PVECT.pm` `migrate` calls `shutdown` without one, which takes
/// `$timeout // 60`.
const HA_CT_SHUTDOWN_SECS: u32 = 60;

impl fmt::Display for Wait {
    // Long because: one arm per wait, execute's words for them in one place.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Hibernated { vmid, lock } => write!(
                f,
                "VM {vmid} is hibernated (lock: {lock}); proxsync changes nothing on it until it \
                 is resumed (qm start {vmid}, or powerState: running in the spec)"
            ),
            Wait::OciPulling {
                reference,
                node,
                upid,
            } => write!(
                f,
                "PVE pulls OCI image {reference} on {node} (task {upid}); the container is made \
                 once it ends"
            ),
            Wait::Resumed { vmid } => write!(
                f,
                "VM {vmid} was resumed from hibernation; converging it next"
            ),
            Wait::CommandLock {
                kind,
                vmid,
                node,
                lock,
            } => command_lock(f, *kind, *vmid, node, lock),
            Wait::TaskLock {
                kind,
                vmid,
                lock,
                task,
            } => write!(
                f,
                "{} is locked ({lock}) by task {task}; waiting for it",
                kind.named(*vmid)
            ),
            Wait::BeingMade {
                kind,
                vmid,
                lock,
                task,
            } => write!(
                f,
                "{} is being made ({lock}) by task {task}; waiting for it",
                kind.named(*vmid)
            ),
            Wait::JustLocked { kind, vmid, lock } => write!(
                f,
                "{} is locked ({lock}) by a create or clone that started moments ago",
                kind.named(*vmid)
            ),
            Wait::RequestInFlight {
                kind,
                vmid,
                ago_secs,
            } => write!(
                f,
                "{} does not exist yet; the create request sent {ago_secs}s ago may still \
                 arrive, so it is not sent again before its request timeout has passed",
                kind.named(*vmid)
            ),
            Wait::ReadsDiffer { kind, vmid } => write!(
                f,
                "{} answered reads of its config differently; read again",
                kind.named(*vmid)
            ),
            Wait::TemplateCommandLock {
                kind,
                vmid,
                node,
                lock,
            } => {
                f.write_str("template: ")?;
                command_lock(f, *kind, *vmid, node, lock)
            }
            Wait::TemplateLocked {
                kind,
                vmid,
                lock,
                task,
            } => write!(
                f,
                "{} template {vmid} is locked ({lock}) by task {task}; the clone is sent once \
                 it ends",
                kind.noun()
            ),
            Wait::NotReleased { kind, vmid, tag } => write!(
                f,
                "{} carries the ownership tag {tag}: not released yet",
                kind.named(*vmid)
            ),
            Wait::MarkerWrittenBack { kind, vmid } => write!(
                f,
                "{} carried no marker line (its notes were edited): written back below the \
                 notes; removed at the next cycle",
                kind.named(*vmid)
            ),
            Wait::OrphanLocked { vmid } => write!(f, "orphan {vmid} is locked"),
            Wait::HaMigrating { kind, vmid, target } => {
                let how = match kind {
                    crate::guest::GuestKind::Qemu => String::new(),
                    crate::guest::GuestKind::Lxc => format!(
                        " (it shuts the container down within its own {HA_CT_SHUTDOWN_SECS} s, \
                         not shutdownTimeout; one still up then stays on its node)"
                    ),
                };
                write!(
                    f,
                    "the HA manager was asked to migrate {} {vmid} to node {target}{how}; \
                     waiting for it",
                    kind.noun()
                )
            }
            Wait::HaSettling {
                kind,
                vmid,
                start,
                task,
            } => write!(
                f,
                "{} is HA-managed: the HA manager has the request to {} it (task {task}) but \
                 has not done it yet; checking again",
                kind.named(*vmid),
                if *start { "start" } else { "stop" }
            ),
            Wait::Stopping => f.write_str("proxsync is stopping; not started"),
            Wait::Then { wait, after } => match after {
                After::HandOver => write!(
                    f,
                    "{wait}; handing it over after (its spec left the selector)"
                ),
                After::Delete => write!(f, "{wait}; deleting it after (its spec was removed)"),
            },
        }
    }
}

/// A lock a command holds while it runs, not a task (`fstrim`): waited for; if no such command
/// runs, a person clears it.
fn command_lock(
    f: &mut fmt::Formatter<'_>,
    kind: crate::guest::GuestKind,
    vmid: u32,
    node: &str,
    lock: &str,
) -> fmt::Result {
    let cli = kind.cli();
    write!(
        f,
        "{} is locked ({lock}) by `{cli} {lock}`, a command on node {node} that runs no task; \
         waiting for it to end (if none runs there, clear the lock with: {cli} unlock {vmid})",
        kind.named(vmid)
    )
}
