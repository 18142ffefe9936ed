//! The embedded state database (redb, one file under `state_dir`): per spec the VM it maps
//! to, the create intent and its task, what was last applied, and the backoff; per site the
//! VMIDs being allocated; first sightings of orphans.
//!
//! Every write is one durable transaction (redb's default `Durability::Immediate`: fsync
//! before `commit` returns). The engine relies on that for its central invariant: the intent
//! to create is on disk before the create request is sent, and the task's UPID right after
//! the answer. The database is a cache: deleting it is safe, because ownership is rebuilt
//! from the tags and description markers in Proxmox.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

const SPECS: TableDefinition<&str, &[u8]> = TableDefinition::new("specs");
/// `site/vmid` -> spec name, for VMIDs reserved by a create in flight.
const ALLOCATIONS: TableDefinition<&str, &str> = TableDefinition::new("allocations");
/// `site/vmid` -> unix ms when the orphan was first seen.
const ORPHANS: TableDefinition<&str, u64> = TableDefinition::new("orphans");

/// The file name of the database inside `state_dir`.
pub const DB_FILE: &str = "proxsync.redb";

#[derive(Debug, thiserror::Error)]
#[error("state database {path}: {message}")]
pub struct StateError {
    pub path: PathBuf,
    pub message: String,
}

/// Where a spec's VM is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum Phase {
    /// No VM yet and nothing in flight.
    #[default]
    Pending,
    /// A create or clone was decided with this VMID on this node. Written before the request
    /// is sent; `upid` is filled in right after PVE answers.
    Creating {
        vmid: u32,
        node: String,
        upid: Option<String>,
        /// When the intent was written (unix ms; 0 in records of older releases): a request
        /// sent then may still turn into a VM until the request timeout has passed.
        #[serde(default)]
        started_ms: u64,
        /// For a clone: the template it copies, whose node runs the `qmclone` task (its UPID
        /// names the template, not the new VM).
        #[serde(default)]
        clone_of: Option<CloneSource>,
    },
    /// The VM exists (it may still need configuring).
    Exists,
    /// A delete task is running.
    Deleting { upid: Option<String> },
}

/// The template a clone copies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloneSource {
    pub node: String,
    pub vmid: u32,
}

/// One failure, as kept for backoff and status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRecord {
    pub category: String,
    pub message: String,
    pub at_ms: u64,
    /// Hash of the spec and config the failure happened with: a change resets the backoff.
    pub inputs: String,
    /// A human must act (the spec is `Stalled`); retried only at the backoff cap.
    #[serde(default)]
    pub needs_human: bool,
}

/// A task proxsync started, for status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub upid: String,
    pub kind: String,
    pub status: String,
    pub at_ms: u64,
}

/// One attempt, for the status file's short history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub at_ms: u64,
    pub action: String,
    pub outcome: String,
}

/// What proxsync remembers about one spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct SpecRecord {
    /// Unique id of this spec's VM, written into the VM's description marker.
    pub uid: String,
    pub site: String,
    pub node: String,
    pub vmid: Option<u32>,
    pub phase: Phase,
    /// Hash of the spec as last fully applied.
    pub applied_hash: Option<String>,
    /// The same without the names (`plan::content_hash`): a new spec with this content in the
    /// commit that removes this one is a rename, not a delete plus a create.
    pub applied_content: Option<String>,
    /// The spec's own tags (user tags and tenant tag) as last applied, for the three-way merge
    /// that keeps tags added by hand.
    pub applied_tags: Vec<String>,
    /// Disk size last requested, so a resize is not repeated while PVE reports the old size.
    pub applied_disk_bytes: Option<u64>,
    /// Config keys PVE keeps pending until a reboot, with the spec hash they belong to.
    pub reboot_pending: Vec<String>,
    /// When proxsync last rebooted the VM for `rebootPolicy` (unix ms): at most one reboot
    /// per [`crate::plan::MIN_REBOOT_INTERVAL`], so a change PVE never applies cannot make
    /// a reboot loop.
    pub last_reboot_ms: Option<u64>,
    /// proxsync made the VM an HA resource (the spec's `ha`): removing `ha` from the spec
    /// removes the resource. An HA resource a person added is never removed.
    pub ha_applied: bool,
    pub attempts: u32,
    pub next_attempt_ms: Option<u64>,
    pub last_error: Option<ErrorRecord>,
    /// Set once the VM was created (or adopted); never cleared while the spec exists.
    pub provisioned: bool,
    /// The VM was taken over (adopted by its marker, or by hand), not created by this install
    /// (`Provisioned` says `Adopted`).
    pub adopted: bool,
    /// The spec's `deletionPolicy: Orphan`, remembered for when the spec is gone.
    pub orphan_on_delete: bool,
    /// The guest's addresses as its agent last reported them (read when proxsync acts on a
    /// running VM; empty without an agent).
    pub ip_addresses: Vec<String>,
    pub last_task: Option<TaskRecord>,
    pub history: Vec<HistoryEntry>,
}

impl SpecRecord {
    /// Adds a history entry, most recent first, keeping 10.
    pub fn note(&mut self, at_ms: u64, action: &str, outcome: &str) {
        self.history.insert(
            0,
            HistoryEntry {
                at_ms,
                action: action.to_string(),
                outcome: outcome.chars().take(300).collect(),
            },
        );
        self.history.truncate(10);
    }
}

/// Creates `state_dir` with mode 0700 if it is missing (its parents as the umask says); an
/// existing directory is left as it is (systemd's `StateDirectory=` makes it with
/// `StateDirectoryMode=`). Everyone creating files in `state_dir` calls this first, so the
/// directory never exists with the umask's mode.
pub fn create_state_dir(state_dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if state_dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = state_dir.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(state_dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && state_dir.is_dir() => Ok(()),
        other => other,
    }
}

/// The database. Cheap to share by reference; each call is its own transaction.
pub struct Store {
    db: redb::Database,
    path: PathBuf,
}

fn key(site: &str, vmid: u32) -> String {
    format!("{site}/{vmid}")
}

impl Store {
    /// Opens (or creates) `<state_dir>/proxsync.redb`. Fails if another process holds it.
    pub fn open(state_dir: &Path) -> Result<Store, StateError> {
        let path = state_dir.join(DB_FILE);
        let fail = |message: String| StateError {
            path: path.clone(),
            message,
        };
        create_state_dir(state_dir)
            .map_err(|e| fail(format!("cannot create the directory: {e}")))?;
        // Created 0600 from the start (redb would follow the umask); an existing file is
        // opened as it is. redb initialises an empty file as a new database.
        {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)
                .map_err(|e| fail(format!("cannot create the database file: {e}")))?;
        }
        let db = redb::Database::create(&path).map_err(|e| fail(e.to_string()))?;
        let store = Store { db, path };
        // Create the tables so reads never meet a missing one.
        store.write(|tx| {
            tx.open_table(SPECS)?;
            tx.open_table(ALLOCATIONS)?;
            tx.open_table(ORPHANS)?;
            Ok(())
        })?;
        Ok(store)
    }

    fn err(&self, e: impl std::fmt::Display) -> StateError {
        StateError {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    fn write(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StateError> {
        let tx = self.db.begin_write().map_err(|e| self.err(e))?;
        f(&tx).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    /// Every spec record.
    pub fn specs(&self) -> Result<BTreeMap<String, SpecRecord>, StateError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = tx.open_table(SPECS).map_err(|e| self.err(e))?;
        let mut out = BTreeMap::new();
        for entry in table.iter().map_err(|e| self.err(e))? {
            let (k, v) = entry.map_err(|e| self.err(e))?;
            match serde_json::from_slice::<SpecRecord>(v.value()) {
                Ok(rec) => {
                    out.insert(k.value().to_string(), rec);
                }
                // A record we cannot read is dropped: the database is a cache, and the VM is
                // found again by its marker.
                Err(e) => {
                    tracing::warn!(spec = k.value(), error = %e, "unreadable state record ignored")
                }
            }
        }
        Ok(out)
    }

    /// Writes one spec's record durably.
    pub fn put(&self, name: &str, rec: &SpecRecord) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(rec).map_err(|e| self.err(e))?;
        self.write(|tx| {
            tx.open_table(SPECS)?.insert(name, bytes.as_slice())?;
            Ok(())
        })
    }

    /// Moves a spec's record to a new name (a rename of `metadata.name`), in one transaction.
    pub fn rename(&self, from: &str, to: &str, rec: &SpecRecord) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(rec).map_err(|e| self.err(e))?;
        self.write(|tx| {
            let mut specs = tx.open_table(SPECS)?;
            specs.remove(from)?;
            specs.insert(to, bytes.as_slice())?;
            Ok(())
        })
    }

    /// Forgets a spec (its VM was deleted or released).
    pub fn remove(&self, name: &str) -> Result<(), StateError> {
        self.write(|tx| {
            tx.open_table(SPECS)?.remove(name)?;
            Ok(())
        })
    }

    /// Records the intent to create: the record (phase `Creating` with the VMID) and the VMID
    /// reservation, in one durable transaction. Call BEFORE sending the create request.
    pub fn begin_create(
        &self,
        name: &str,
        rec: &SpecRecord,
        site: &str,
        vmid: u32,
    ) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(rec).map_err(|e| self.err(e))?;
        self.write(|tx| {
            tx.open_table(SPECS)?.insert(name, bytes.as_slice())?;
            tx.open_table(ALLOCATIONS)?
                .insert(key(site, vmid).as_str(), name)?;
            Ok(())
        })
    }

    /// Drops a VMID reservation (the VM now shows in the listing, or the attempt is abandoned).
    pub fn release_vmid(&self, site: &str, vmid: u32) -> Result<(), StateError> {
        self.write(|tx| {
            tx.open_table(ALLOCATIONS)?
                .remove(key(site, vmid).as_str())?;
            Ok(())
        })
    }

    /// The VMIDs reserved on a site, with the spec each is for.
    pub fn allocations(&self, site: &str) -> Result<BTreeMap<u32, String>, StateError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = tx.open_table(ALLOCATIONS).map_err(|e| self.err(e))?;
        let prefix = format!("{site}/");
        let mut out = BTreeMap::new();
        for entry in table.iter().map_err(|e| self.err(e))? {
            let (k, v) = entry.map_err(|e| self.err(e))?;
            if let Some(id) = k.value().strip_prefix(&prefix).and_then(|n| n.parse().ok()) {
                out.insert(id, v.value().to_string());
            }
        }
        Ok(out)
    }

    /// Orphans and when each was first seen: `(site, vmid) -> unix ms`.
    pub fn orphans(&self) -> Result<BTreeMap<(String, u32), u64>, StateError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = tx.open_table(ORPHANS).map_err(|e| self.err(e))?;
        let mut out = BTreeMap::new();
        for entry in table.iter().map_err(|e| self.err(e))? {
            let (k, v) = entry.map_err(|e| self.err(e))?;
            if let Some((site, id)) = k.value().rsplit_once('/')
                && let Ok(id) = id.parse()
            {
                out.insert((site.to_string(), id), v.value());
            }
        }
        Ok(out)
    }

    /// Replaces the orphan sightings with `current` in one transaction.
    pub fn set_orphans(&self, current: &BTreeMap<(String, u32), u64>) -> Result<(), StateError> {
        self.write(|tx| {
            let mut table = tx.open_table(ORPHANS)?;
            let old: Vec<String> = table
                .iter()?
                .filter_map(|e| e.ok().map(|(k, _)| k.value().to_string()))
                .collect();
            for k in old {
                table.remove(k.as_str())?;
            }
            for ((site, vmid), first_seen) in current {
                table.insert(key(site, *vmid).as_str(), *first_seen)?;
            }
            Ok(())
        })
    }
}

/// Reads the records of a database another process may hold open (for `proxsync plan`):
/// `None` when there is no database or it is locked.
pub fn read_specs_snapshot(state_dir: &Path) -> Option<BTreeMap<String, SpecRecord>> {
    let path = state_dir.join(DB_FILE);
    if !path.exists() {
        return None;
    }
    let db = redb::ReadOnlyDatabase::open(&path).ok()?;
    let tx = db.begin_read().ok()?;
    let table = tx.open_table(SPECS).ok()?;
    let mut out = BTreeMap::new();
    for entry in table.iter().ok()? {
        let (k, v) = entry.ok()?;
        if let Ok(rec) = serde_json::from_slice(v.value()) {
            out.insert(k.value().to_string(), rec);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            let rec = SpecRecord {
                uid: "u1".into(),
                site: "lab".into(),
                phase: Phase::Creating {
                    vmid: 101,
                    node: "pve1".into(),
                    upid: None,
                    started_ms: 1,
                    clone_of: None,
                },
                ..Default::default()
            };
            store.begin_create("web-01", &rec, "lab", 101).unwrap();
            assert_eq!(
                store
                    .allocations("lab")
                    .unwrap()
                    .get(&101)
                    .map(String::as_str),
                Some("web-01")
            );
            assert!(store.allocations("other").unwrap().is_empty());
        }
        let store = Store::open(dir.path()).unwrap();
        let specs = store.specs().unwrap();
        assert!(matches!(
            specs["web-01"].phase,
            Phase::Creating { vmid: 101, .. }
        ));
        store.release_vmid("lab", 101).unwrap();
        assert!(store.allocations("lab").unwrap().is_empty());
        store.remove("web-01").unwrap();
        assert!(store.specs().unwrap().is_empty());
    }

    #[test]
    fn a_second_process_cannot_open_it_but_can_snapshot_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.put("a", &SpecRecord::default()).unwrap();
        assert!(
            Store::open(dir.path()).is_err(),
            "redb holds an exclusive lock"
        );
        // While held, a snapshot read fails (`proxsync plan` then asks the daemon).
        assert_eq!(read_specs_snapshot(dir.path()), None);
        drop(store);
        let snap = read_specs_snapshot(dir.path()).unwrap();
        assert!(snap.contains_key("a"));
    }

    #[test]
    fn orphans_are_replaced_as_a_set() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut o = BTreeMap::new();
        o.insert(("lab".to_string(), 120), 5u64);
        o.insert(("lab".to_string(), 121), 6u64);
        store.set_orphans(&o).unwrap();
        o.remove(&("lab".to_string(), 120));
        store.set_orphans(&o).unwrap();
        assert_eq!(store.orphans().unwrap(), o);
    }

    #[test]
    fn history_keeps_ten_most_recent_first() {
        let mut r = SpecRecord::default();
        for i in 0..15 {
            r.note(i, "create", "ok");
        }
        assert_eq!(r.history.len(), 10);
        assert_eq!(r.history[0].at_ms, 14);
    }
}
