//! PVE tasks: the UPID a call returns, parsed back from its string after a restart, and the
//! outcome of waiting for it.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A task's unique id, e.g.
/// `UPID:pve1:000A1B2C:0123ABCD:65F0A1B2:qmclone:9000:proxsync@pve!gitops:`.
///
/// Layout (PVE::Tools::upid_encode): node, pid, pstart, starttime (hex), type, id, user.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Upid {
    raw: String,
    /// The node the task runs on.
    pub node: String,
    /// The worker's process id on that node.
    pub pid: u32,
    /// The worker's start time in clock ticks since the node booted (`/proc/PID/stat`): a
    /// reused pid has another.
    pub pstart: u64,
    /// When the task started (unix seconds, the node's clock).
    pub starttime: u64,
    /// `qmcreate`, `qmclone`, `qmstart`, `qmshutdown`, `qmstop`, `qmdestroy`, `resize`, ...
    pub kind: String,
    /// Usually the VMID; may be empty.
    pub id: String,
    /// Who started it: `user@realm`, or `user@realm!tokenid` for an API token.
    pub user: String,
}

impl Upid {
    /// The UPID exactly as PVE wrote it (what the API takes back).
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// How long ago the task started by the clock `now`, at least: the UPID holds the start in
    /// whole seconds of the node's clock, so one second less than the difference, and zero when
    /// the node's clock is ahead of ours.
    pub(crate) fn age_at_least(&self, now: SystemTime) -> Duration {
        UNIX_EPOCH
            .checked_add(Duration::from_secs(self.starttime.saturating_add(1)))
            .and_then(|started| now.duration_since(started).ok())
            .unwrap_or_default()
    }
}

impl fmt::Display for Upid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// Ordered by its text (plans sort their actions, some of which name a task).
impl Ord for Upid {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.raw.cmp(&other.raw)
    }
}

impl PartialOrd for Upid {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Written as PVE's string (the state database, `proxsync plan --json`).
impl serde::Serialize for Upid {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.raw)
    }
}

/// Read back from PVE's string; one that does not parse is an error.
impl<'de> serde::Deserialize<'de> for Upid {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for Upid {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| format!("not a PVE task id ({why}): {s:?}");
        if s.len() > 512 || s.chars().any(|c| c.is_control()) {
            return Err(bad("too long or has control characters"));
        }
        let rest = s
            .strip_prefix("UPID:")
            .ok_or_else(|| bad("no UPID: prefix"))?;
        let fields: Vec<&str> = rest.split(':').collect();
        // Seven fields and the trailing empty one after the final ':'.
        if fields.len() != 8 || !fields[7].is_empty() {
            return Err(bad("expected node:pid:pstart:starttime:type:id:user:"));
        }
        let hex = |f: &str, what: &str| u64::from_str_radix(f, 16).map_err(|_| bad(what));
        let node = fields[0];
        if node.is_empty()
            || !node
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        {
            return Err(bad("bad node name"));
        }
        let pid = u32::try_from(hex(fields[1], "bad pid")?).map_err(|_| bad("bad pid"))?;
        if fields[4].is_empty() || fields[6].is_empty() {
            return Err(bad("missing type or user"));
        }
        Ok(Upid {
            raw: s.to_string(),
            node: node.to_string(),
            pid,
            pstart: hex(fields[2], "bad pstart")?,
            starttime: hex(fields[3], "bad starttime")?,
            kind: fields[4].to_string(),
            id: fields[5].to_string(),
            user: fields[6].to_string(),
        })
    }
}

/// How a task ended, or that it has not yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOutcome {
    /// Exit status `OK`.
    Ok,
    /// Exit status `WARNINGS: n`: the work was done.
    Warnings(u32),
    /// Our wait ran out while PVE still runs it. Not a failure: wait again later.
    StillRunning,
}

impl TaskOutcome {
    /// The task's status as PVE says it (`OK`, `WARNINGS: n`), or `running`.
    pub fn status(&self) -> String {
        match self {
            TaskOutcome::Ok => "OK".to_string(),
            TaskOutcome::Warnings(n) => format!("WARNINGS: {n}"),
            TaskOutcome::StillRunning => "running".to_string(),
        }
    }
}

/// Classifies a stopped task's exit status: `Ok(outcome)` for success, `Err(text)` otherwise.
pub(crate) fn classify_exit(exitstatus: &str) -> Result<TaskOutcome, String> {
    let s = exitstatus.trim();
    if s == "OK" {
        return Ok(TaskOutcome::Ok);
    }
    if let Some(n) = s.strip_prefix("WARNINGS:") {
        return Ok(TaskOutcome::Warnings(n.trim().parse().unwrap_or(0)));
    }
    Err(s.to_string())
}

/// Which running tasks can hold a VM's `lock` config property, as qemu-server, pve-container
/// and vzdump set it. Used to tell a lock that resolves by itself (wait) from one nothing holds
/// any more (stale: only then may a human be told how to clear it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockHolder {
    /// Nothing runs while the lock stands and it is not stale: `suspended` (hibernated; a
    /// start resumes it).
    NoTask,
    /// A command on the node holds it while it runs, not a task, so no task listing shows it:
    /// `fstrim` (pve-container `src/PVE/CLI/pct.pm` `fstrim`: `set_lock($vmid, 'fstrim')`, and
    /// `remove_lock` when it is done). Waited for, never called stale.
    Command,
    /// A person's, left on purpose and held by nothing: `mounted` (`pct mount` sets it and
    /// leaves it until `pct unmount`, `src/PVE/CLI/pct.pm` `mount`/`unmount`).
    Person,
    /// Tasks of these types whose id is the VM's VMID.
    OfVm(&'static [&'static str]),
    /// Tasks of these types with any id: a clone's task names its source VM (and runs on the
    /// source's node), a backup job's task names no VM or another one.
    AnyId(&'static [&'static str]),
    /// A lock this table does not know: any task naming the VM.
    AnyTaskOfVm,
    /// A new container's `create`: a `vzcreate`/`vzrestore` (or a VM's `qmcreate`/
    /// `qmrestore`) naming it, or a `vzclone` with any id (it names the source container:
    /// pve-container locks the new one `create`, not `clone`).
    Create,
}

impl LockHolder {
    /// What can hold the lock `lock` (a guest config's `lock` value).
    pub fn of(lock: &str) -> LockHolder {
        match lock {
            "suspended" => LockHolder::NoTask,
            "fstrim" => LockHolder::Command,
            "mounted" => LockHolder::Person,
            // qemu-server's task types, then pve-container's (`pct`): one VMID is one guest, so
            // a task of either kind naming it can only be that guest's.
            "create" => LockHolder::Create,
            "clone" => LockHolder::AnyId(&["qmclone", "vzclone"]),
            "backup" => LockHolder::AnyId(&["vzdump"]),
            "migrate" => LockHolder::OfVm(&["qmigrate", "hamigrate", "vzmigrate"]),
            "snapshot" => LockHolder::OfVm(&["qmsnapshot", "vzsnapshot"]),
            "snapshot-delete" => LockHolder::OfVm(&["qmdelsnapshot", "vzdelsnapshot"]),
            "rollback" => LockHolder::OfVm(&["qmrollback", "vzrollback"]),
            // A container cloned from (the clone's task names it) or a volume moved.
            "disk" => LockHolder::OfVm(&["vzclone", "move_volume"]),
            "suspending" => LockHolder::OfVm(&["qmsuspend"]),
            _ => LockHolder::AnyTaskOfVm,
        }
    }

    /// Whether a running task of `kind` naming `id` can hold the lock of VM `vmid`.
    pub fn may_be(&self, kind: &str, id: &str, vmid: u32) -> bool {
        let of_vm = id == vmid.to_string();
        match self {
            LockHolder::NoTask | LockHolder::Command | LockHolder::Person => false,
            LockHolder::OfVm(kinds) => of_vm && kinds.contains(&kind),
            LockHolder::AnyId(kinds) => kinds.contains(&kind),
            LockHolder::AnyTaskOfVm => of_vm,
            LockHolder::Create => {
                (of_vm && ["qmcreate", "qmrestore", "vzcreate", "vzrestore"].contains(&kind))
                    || kind == "vzclone"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_holders_as_pve_sets_them() {
        let create = LockHolder::of("create");
        assert!(create.may_be("qmcreate", "105", 105));
        assert!(!create.may_be("qmcreate", "106", 105));
        assert!(!create.may_be("qmstart", "105", 105));
        // A clone's task names the template, not the new VM.
        assert!(LockHolder::of("clone").may_be("qmclone", "9000", 105));
        // A backup job over several guests names none.
        assert!(LockHolder::of("backup").may_be("vzdump", "", 105));
        assert!(!LockHolder::of("backup").may_be("qmstart", "105", 105));
        // Hibernated: no task, and not stale either.
        assert_eq!(LockHolder::of("suspended"), LockHolder::NoTask);
        assert!(!LockHolder::of("suspended").may_be("qmstart", "105", 105));
        assert!(LockHolder::of("something-new").may_be("qmfoo", "105", 105));
        // pve-container's tasks hold a container's locks.
        assert!(create.may_be("vzcreate", "105", 105));
        assert!(LockHolder::of("clone").may_be("vzclone", "9100", 105));
        // pve-container locks a clone `create`, and its task names the source.
        assert!(create.may_be("vzclone", "9100", 105));
        assert!(!create.may_be("vzstart", "105", 105));
        assert!(LockHolder::of("disk").may_be("vzclone", "9100", 9100));
        assert!(LockHolder::of("migrate").may_be("vzmigrate", "105", 105));
        // pve-container's own: `pct fstrim` holds its lock as a command, `pct mount` leaves
        // one for `pct unmount`; a destroy holds `destroyed` as its task.
        assert_eq!(LockHolder::of("fstrim"), LockHolder::Command);
        assert_eq!(LockHolder::of("mounted"), LockHolder::Person);
        assert!(!LockHolder::of("mounted").may_be("vzstart", "105", 105));
        assert!(LockHolder::of("destroyed").may_be("vzdestroy", "105", 105));
    }

    #[test]
    fn a_task_is_never_older_than_its_upid_can_prove() {
        // Started at 0x3E8 = 1000 s of the node's clock, in whole seconds.
        let upid: Upid = "UPID:pve1:00000001:00000007:000003E8:qmstart:100:root@pam:"
            .parse()
            .unwrap();
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
        assert_eq!(upid.age_at_least(at(1_000_900)), Duration::ZERO);
        assert_eq!(
            upid.age_at_least(at(1_002_300)),
            Duration::from_millis(1300)
        );
        // The node's clock ahead of ours: no age, not a panic.
        assert_eq!(upid.age_at_least(at(900_000)), Duration::ZERO);
        let far: Upid = "UPID:pve1:00000001:00000007:FFFFFFFFFFFFFFFF:qmstart:100:root@pam:"
            .parse()
            .unwrap();
        assert_eq!(far.age_at_least(at(1_000_000)), Duration::ZERO);
    }

    #[test]
    fn parses_real_upids() {
        let raw = "UPID:pve1:000A1B2C:0123ABCD:65F0A1B2:qmclone:9000:proxsync@pve!gitops:";
        let u: Upid = raw.parse().unwrap();
        assert_eq!(u.node, "pve1");
        assert_eq!(u.pid, 0x000A1B2C);
        assert_eq!(u.kind, "qmclone");
        assert_eq!(u.id, "9000");
        assert_eq!(u.user, "proxsync@pve!gitops");
        assert_eq!(u.to_string(), raw);
        // Round trip: what we store is what we parse back after a restart.
        assert_eq!(u.as_str().parse::<Upid>().unwrap(), u);

        // A task without an id (e.g. aptupdate).
        let u: Upid = "UPID:pve-2:00001234:00ABCDEF:65F0A1B2:aptupdate::root@pam:"
            .parse()
            .unwrap();
        assert_eq!(u.id, "");
    }

    #[test]
    fn refuses_garbage() {
        for bad in [
            "",
            "UPID:",
            "upid:pve1:1:2:3:qmstart:100:root@pam:",
            "UPID:pve1:XYZ:2:3:qmstart:100:root@pam:",
            "UPID:pve1:1:2:3:qmstart:100:root@pam",
            "UPID:pve1:1:2:3::100:root@pam:",
            "UPID:pve/1:1:2:3:qmstart:100:root@pam:",
            "UPID:pve1:1:2:3:qmstart:100:root@pam:extra:",
        ] {
            assert!(bad.parse::<Upid>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn exit_statuses() {
        assert_eq!(classify_exit("OK"), Ok(TaskOutcome::Ok));
        assert_eq!(classify_exit("WARNINGS: 3"), Ok(TaskOutcome::Warnings(3)));
        assert_eq!(
            classify_exit("unable to create VM 100 - VM 100 already exists on node 'pve1'"),
            Err("unable to create VM 100 - VM 100 already exists on node 'pve1'".into())
        );
        assert!(classify_exit("job errors").is_err());
    }
}
