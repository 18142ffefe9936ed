//! The embedded state database (redb, one file under `state_dir`): per spec the VM it maps
//! to and where that VM is in its life ([`VmState`]: the create intent and its task, the
//! delete task), what was last applied, and the backoff; per site the VMIDs being allocated;
//! first sightings of orphans.
//!
//! Every write is one durable transaction (redb's default `Durability::Immediate`: fsync
//! before `commit` returns). The engine relies on that for its central invariant: the intent
//! to create is on disk before the create request is sent, and the task's UPID right after
//! the answer. An adoption's writes are the exception (`transition_lazily`,
//! `put_adopted_lazily`): they wait in memory, are committed together ([`LAZY_BATCH`] at a
//! time, or first in the next other write's transaction, or before a read of every record;
//! at 50,000 adoptions, a commit each was most of their CPU), and are durable at the next
//! durable commit or [`Store::flush`]. A record's [`VmState`] changes only through
//! [`Store::transition`] (an adoption's outcome: [`Store::put_adopted_lazily`]), which writes
//! the VMID reservation that goes with it in the same transaction. The database is a cache:
//! deleting it is safe, because ownership is rebuilt from the tags and description markers in
//! Proxmox. Records of the previous release (a `phase` beside `vmid` and `node`) are read into
//! a [`VmState`] (`stored_state`), so an upgrade keeps every create in flight.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

const SPECS: TableDefinition<&str, &[u8]> = TableDefinition::new("specs");
/// `site/vmid` -> spec name, for VMIDs reserved by a create or delete in flight: exactly the
/// records in [`VmState::Creating`] and [`VmState::Deleting`] (kept so by the writes of states
/// and [`Store::remove`]).
const ALLOCATIONS: TableDefinition<&str, &str> = TableDefinition::new("allocations");
/// `site/vmid` -> unix ms when the orphan was first seen.
const ORPHANS: TableDefinition<&str, u64> = TableDefinition::new("orphans");

/// Spec name (or [`SUSPEND_ALL`]) -> JSON [`Suspension`]: what takes no action until resumed.
const SUSPENSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("suspensions");
/// The image volumes this install asked PVE to download: `site/node/volid` -> JSON
/// [`ImageVolume`]. Written before the download is asked for: the evidence that lets an
/// unused version be deleted (`gate::volume::image_unused`).
const IMAGE_VOLUMES: TableDefinition<&str, &[u8]> = TableDefinition::new("image_volumes");

/// An image volume this install had PVE download ([`Store::image_volumes`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageVolume {
    /// The `ProxmoxImage` it is a version of.
    pub image: String,
    /// When the download was recorded (unix ms).
    pub recorded_ms: u64,
    /// Since when no image names it (unix ms); `None` while one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unused_since_ms: Option<u64>,
}

/// Where an image volume is: (site, node, volid).
pub type ImageVolumeKey = (String, String, String);

/// The file name of the database inside `state_dir`.
pub(crate) const DB_FILE: &str = "proxsync.redb";

/// redb's page cache (its default is 1 GiB). It kept every page read, the whole database
/// (8 MiB at 10,000 specs), although the engine keeps the decoded records itself and reads
/// them all only at start and after an acting cycle; the OS page cache serves those reads.
const CACHE_BYTES: usize = 2 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
#[error("state database {path}: {message}")]
pub struct StateError {
    pub path: PathBuf,
    pub message: String,
}

pub use crate::model::record::*;

/// Whether `path` holds no database yet: absent, empty, or begun but never finished. redb
/// writes its magic number (the file's first 9 bytes) last, once the new database and its
/// header are on disk; a file whose first 9 bytes are still zero was never finished, so
/// nothing was ever committed to it (an earlier release made the database in place, and a process killed in that
/// moment left such a file, which redb refuses for good: "invalid data").
fn needs_new_database(path: &Path) -> std::io::Result<bool> {
    use std::io::Read;
    let mut head = Vec::new();
    match std::fs::File::open(path) {
        // 9: the length of redb's magic number (redb 4 `MAGICNUMBER`).
        Ok(file) => file.take(9).read_to_end(&mut head)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(e),
    };
    Ok(head.iter().all(|b| *b == 0))
}

/// Makes a new database at `path`: made complete under a temporary name (0600 from the
/// start, as redb would follow the umask), then renamed into place, so a process killed
/// meanwhile leaves either nothing or a whole database. One process per state directory
/// (`instance_lock`) means no other is making it at the same time.
fn create_database(state_dir: &Path, path: &Path) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = state_dir.join(format!("{DB_FILE}.new"));
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot remove {}: {e}", tmp.display()));
        }
        _ => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("cannot create the database file: {e}"))?;
    {
        let db = redb::Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(&tmp)
            .map_err(|e| e.to_string())?;
        let tx = db.begin_write().map_err(|e| e.to_string())?;
        create_tables(&tx).map_err(|e| e.to_string())?;
        tx.commit().map_err(|e| e.to_string())?;
    }
    std::fs::rename(&tmp, path)
        .map_err(|e| format!("cannot move the new database into place: {e}"))?;
    std::fs::File::open(state_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("cannot sync the directory: {e}"))
}

/// The tables, so reads never meet a missing one.
fn create_tables(tx: &redb::WriteTransaction) -> Result<(), redb::Error> {
    tx.open_table(SPECS)?;
    tx.open_table(ALLOCATIONS)?;
    tx.open_table(ORPHANS)?;
    tx.open_table(SUSPENSIONS)?;
    tx.open_table(IMAGE_VOLUMES)?;
    Ok(())
}

/// At most this many lazy writes wait in memory for their commit ([`Store::pending`]).
const LAZY_BATCH: usize = 256;

/// A lazy write not yet committed ([`Store::pending`]).
struct LazyRecord {
    /// The record, encoded.
    bytes: Vec<u8>,
    /// Its site and state.
    site: String,
    vm: VmState,
    /// The site and state the database holds under its name: a VMID reservation moves from
    /// these to the record's when it is committed (as [`Store::transition`] moves it).
    stored_site: compact_str::CompactString,
    stored_vm: VmState,
}

/// The database. Cheap to share by reference; each call is its own transaction.
pub struct Store {
    db: redb::Database,
    path: PathBuf,
    /// The names of the spec records written or removed since [`Store::take_written`]: the
    /// engine reads those again after acting, not every record.
    written: std::sync::Mutex<BTreeSet<String>>,
    /// A suspension was set or lifted since [`Store::take_suspensions_changed`].
    suspensions_changed: std::sync::atomic::AtomicBool,
    /// A write without its fsync ([`Store::transition_lazily`]) was made since the last durable
    /// one.
    unsynced: std::sync::atomic::AtomicBool,
    /// The lazy writes not yet committed, by spec name, the last one of each. Every write
    /// commits them first, in its own transaction, so they reach the database in their
    /// order; the reads of records see them ([`Store::record`]) or commit them first. Each
    /// stays here until its commit has returned: a read finds it here or in the database.
    pending: std::sync::Mutex<BTreeMap<String, LazyRecord>>,
    /// Held by each write from its judgement to its commit (before `pending`): while a name
    /// waits in `pending`, the database under it does not change. A read of one record
    /// never takes it, so it never waits for another write's fsync.
    committing: std::sync::Mutex<()>,
    /// Transactions committed, for the tests of the batching.
    commits: std::sync::atomic::AtomicU64,
}

/// Whether a write waits for the disk (redb's `Durability::Immediate`) or not (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sync {
    Durable,
    Lazy,
}

impl Drop for Store {
    /// Lazy writes are made durable when the store is closed (a stop, the end of `run --once`).
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!(error = %e, "cannot make the last records durable");
        }
    }
}

fn key(site: &str, vmid: u32) -> String {
    format!("{site}/{vmid}")
}

/// Writes the lazy writes waiting in memory ([`Store::pending`]) in `tx`, each with the VMID
/// reservations of its change from the stored state.
fn write_lazy_records(
    tx: &redb::WriteTransaction,
    pending: &BTreeMap<String, LazyRecord>,
) -> Result<(), redb::Error> {
    if pending.is_empty() {
        return Ok(());
    }
    let mut specs = tx.open_table(SPECS)?;
    let mut allocations = tx.open_table(ALLOCATIONS)?;
    for (name, p) in pending {
        specs.insert(name.as_str(), p.bytes.as_slice())?;
        let (was, now) = (p.stored_vm.reserved(), p.vm.reserved());
        if let Some(id) = was.filter(|id| now != Some(*id)) {
            allocations.remove(key(&p.stored_site, id).as_str())?;
        }
        if let Some(id) = now.filter(|id| was != Some(*id)) {
            allocations.insert(key(&p.site, id).as_str(), name.as_str())?;
        }
    }
    Ok(())
}

/// The record stored under `name`, if there is one that can be read.
fn stored_record(
    specs: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &str,
) -> Result<Option<SpecRecord>, redb::Error> {
    Ok(specs
        .get(name)?
        .and_then(|v| serde_json::from_slice(v.value()).ok()))
}

impl Store {
    /// Opens (or creates) `<state_dir>/proxsync.redb`. Fails if another process holds it.
    pub fn open(state_dir: &Path) -> Result<Store, StateError> {
        let path = state_dir.join(DB_FILE);
        let fail = |message: String| StateError {
            path: path.clone(),
            message,
        };
        crate::util::state_dir::create_state_dir(state_dir)
            .map_err(|e| fail(format!("cannot create the directory: {e}")))?;
        let hint =
            |e: &std::io::Error| crate::util::state_dir::permission_hint(state_dir, &path, e);
        let new = needs_new_database(&path)
            .map_err(|e| fail(format!("cannot read the file: {e}{}", hint(&e))))?;
        // redb opens it for writing: a file it may only read fails here, with the fix.
        if !new
            && let Err(e) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
        {
            return Err(fail(format!("cannot open the file: {e}{}", hint(&e))));
        }
        if new {
            create_database(state_dir, &path).map_err(fail)?;
        }
        let db = redb::Database::builder()
            .set_cache_size(CACHE_BYTES)
            .open(&path)
            .map_err(|e| fail(e.to_string()))?;
        let store = Store {
            db,
            path,
            written: Default::default(),
            suspensions_changed: Default::default(),
            unsynced: Default::default(),
            pending: Default::default(),
            committing: Default::default(),
            commits: Default::default(),
        };
        // A database made by an earlier release may lack a table.
        store.write(create_tables)?;
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
        self.write_as(Sync::Durable, f)
    }

    fn write_as(
        &self,
        sync: Sync,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StateError> {
        let _committing = self.committing();
        self.commit_with_pending(sync, f)
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, LazyRecord>> {
        // Each entry is whole after any panic (inserted or cleared at once).
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn committing(&self) -> std::sync::MutexGuard<'_, ()> {
        // Guards no data of its own.
        self.committing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One transaction: the lazy writes waiting first, then `f`'s; they leave `pending` only
    /// once it is committed. Call with [`Store::committing`] held.
    fn commit_with_pending(
        &self,
        sync: Sync,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StateError> {
        use std::sync::atomic::Ordering;
        let mut tx = self.db.begin_write().map_err(|e| self.err(e))?;
        if sync == Sync::Lazy {
            tx.set_durability(redb::Durability::None)
                .map_err(|e| self.err(e))?;
        }
        let waited = {
            let pending = self.pending();
            write_lazy_records(&tx, &pending).map_err(|e| self.err(e))?;
            !pending.is_empty()
        };
        f(&tx).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        self.commits.fetch_add(1, Ordering::Relaxed);
        if waited {
            // No lazy write came meanwhile: each takes `committing` first.
            self.pending().clear();
        }
        // Set after the commit: a flush that cleared it before has its own commit after ours.
        if sync == Sync::Lazy {
            self.unsynced.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Commits the lazy writes waiting in memory (without waiting for the disk), so that a
    /// read of the database sees them.
    fn commit_pending(&self) -> Result<(), StateError> {
        let _committing = self.committing();
        if self.pending().is_empty() {
            return Ok(());
        }
        self.commit_with_pending(Sync::Lazy, |_| Ok(()))
    }

    /// Makes the writes of [`Store::transition_lazily`] and [`Store::put_adopted_lazily`]
    /// durable: one durable commit of those still in memory, which makes every commit before
    /// it durable too (redb); nothing when there were none.
    pub(crate) fn flush(&self) -> Result<(), StateError> {
        use std::sync::atomic::Ordering;
        let _committing = self.committing();
        let waiting = !self.pending().is_empty();
        if (self.unsynced.swap(false, Ordering::AcqRel) || waiting)
            && let Err(e) = self.commit_with_pending(Sync::Durable, |_| Ok(()))
        {
            self.unsynced.store(true, Ordering::Release);
            return Err(e);
        }
        Ok(())
    }

    /// Transactions committed so far.
    #[cfg(test)]
    fn commits(&self) -> u64 {
        self.commits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every spec record.
    pub fn specs(&self) -> Result<BTreeMap<String, SpecRecord>, StateError> {
        self.commit_pending()?;
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = tx.open_table(SPECS).map_err(|e| self.err(e))?;
        // Collected first and built at once: a map built from sorted entries has full nodes,
        // one filled by inserting in order about half-empty ones. The Vec is sized at once from
        // the table's count: grown by doubling, it would hold up to twice the records' room,
        // and while it moves, the old block beside it (BENCHMARKS.md, memory).
        let count = table.len().map_err(|e| self.err(e))?;
        let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        for entry in table.iter().map_err(|e| self.err(e))? {
            let (k, v) = entry.map_err(|e| self.err(e))?;
            match serde_json::from_slice::<SpecRecord>(v.value()) {
                Ok(rec) => out.push((k.value().to_string(), rec)),
                // A record we cannot read is dropped: the database is a cache, and the VM is
                // found again by its marker.
                Err(e) => {
                    tracing::warn!(spec = k.value(), error = %e, "unreadable state record ignored")
                }
            }
        }
        Ok(BTreeMap::from_iter(out))
    }

    /// The record of spec `name`, if there is one that can be read (as [`Store::specs`]
    /// reads it).
    pub fn record(&self, name: &str) -> Result<Option<SpecRecord>, StateError> {
        if let Some(p) = self.pending().get(name) {
            return Ok(serde_json::from_slice(&p.bytes).ok());
        }
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = tx.open_table(SPECS).map_err(|e| self.err(e))?;
        stored_record(&table, name).map_err(|e| self.err(e))
    }

    /// The names of the spec records written, renamed or removed since the last call.
    pub(crate) fn take_written(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.written_names())
    }

    fn written_names(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        // A set of names is whole after any panic: poisoning says nothing here.
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `a`: spec `a.spec`'s VM is `a.vmid`, adopted. Refused (nothing written) when the
    /// spec's record maps it to another VM, or a create or delete of it is in flight.
    pub(crate) fn record_adoption(&self, a: &Adoption, now_ms: u64) -> Result<(), String> {
        let mut rec = self
            .record(&a.spec)
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        if let Some(other) = rec.vmid().filter(|v| *v != a.vmid) {
            return Err(format!(
                "spec {} already maps to VM {other}; nothing changed",
                a.spec
            ));
        }
        if matches!(rec.vm, VmState::Creating { .. } | VmState::Deleting { .. }) {
            return Err(format!(
                "spec {}'s VM {} is being created or deleted; nothing changed",
                a.spec, a.vmid
            ));
        }
        rec.uid = a.uid.as_str().into();
        rec.site = a.site.as_str().into();
        rec.adopted = true;
        rec.provisioned = true;
        rec.orphan_on_delete = a.orphan_on_delete;
        rec.remember_identity(a.vmid, a.identity.clone());
        // What needed a person (an unverified marker, a missing one) is settled: the next
        // cycle acts on the spec at once, not at the end of its backoff.
        rec.attempts = 0;
        rec.next_attempt_ms = None;
        rec.last_error = None;
        rec.note(now_ms, "adopt", "confirmed by hand (proxsync adopt)");
        let adopted = VmState::Exists {
            vmid: a.vmid,
            node: a.node.as_str().into(),
        };
        self.transition(&a.spec, &mut rec, adopted)
            .map_err(|e| e.to_string())
    }

    /// Writes one spec's record durably, its [`VmState`] unchanged: a record whose `vm` is not
    /// the stored one is refused (states change only through [`Store::transition`]).
    pub fn put(&self, name: &str, rec: &SpecRecord) -> Result<(), StateError> {
        self.write_record(name, &rec.vm, rec, Sync::Durable)
    }

    /// [`Store::transition`] without waiting for the disk: durable at the next durable write
    /// or [`Store::flush`], lost with a crash before either. Only for a record that a lost
    /// write leaves safe to rebuild: an adoption, which changed nothing on the guest, is found
    /// again by its marker (one request), as with a lost database. Never for a state that
    /// reserves a VMID (a create intent must be on disk before its request).
    pub(crate) fn transition_lazily(
        &self,
        name: &str,
        rec: &mut SpecRecord,
        to: VmState,
    ) -> Result<(), StateError> {
        let sync = match to.reserved() {
            Some(_) => Sync::Durable,
            None => Sync::Lazy,
        };
        self.transition_as(name, rec, to, sync)
    }

    /// An adoption's record when the adoption is done, in one write without waiting for the
    /// disk (as [`Store::transition_lazily`]), its state changed from `stored` to `rec.vm`
    /// with the VMID reservations that go with it. `stored`: the state the store holds as the
    /// adoption left it, the one it started from when it wrote nothing (a guest already as its
    /// spec says), else `rec.vm`. A record that holds another was changed meanwhile: refused.
    pub(crate) fn put_adopted_lazily(
        &self,
        name: &str,
        stored: &VmState,
        rec: &SpecRecord,
    ) -> Result<(), StateError> {
        let sync = match rec.vm.reserved() {
            Some(_) => Sync::Durable,
            None => Sync::Lazy,
        };
        self.write_record(name, stored, rec, sync)
    }

    /// Moves spec `name`'s VM from `rec.vm` to `to`, writing the rest of `rec` with it, in one
    /// durable transaction; `rec` then holds `to`. Refused (nothing written) when the stored
    /// state is not `rec.vm`: the record changed under the caller. The VMID reservations follow
    /// the states in the same transaction: entering [`VmState::Creating`] reserves its VMID on
    /// `rec.site` (the create intent: call this BEFORE sending the create request), leaving it
    /// releases the VMID.
    pub(crate) fn transition(
        &self,
        name: &str,
        rec: &mut SpecRecord,
        to: VmState,
    ) -> Result<(), StateError> {
        self.transition_as(name, rec, to, Sync::Durable)
    }

    fn transition_as(
        &self,
        name: &str,
        rec: &mut SpecRecord,
        to: VmState,
        sync: Sync,
    ) -> Result<(), StateError> {
        if rec.vm == to {
            return self.write_record(name, &rec.vm, rec, sync);
        }
        let next = SpecRecord {
            vm: to,
            ..rec.clone()
        };
        self.write_record(name, &rec.vm, &next, sync)?;
        *rec = next;
        Ok(())
    }

    /// Writes `rec` as spec `name`'s record if the stored state is `expected` (no record, or
    /// one that cannot be read, is `Absent`, as [`Store::specs`] reads it), with the VMID
    /// reservations of the change from `expected` to `rec.vm`.
    fn write_record(
        &self,
        name: &str,
        expected: &VmState,
        rec: &SpecRecord,
        sync: Sync,
    ) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(rec).map_err(|e| self.err(e))?;
        if sync == Sync::Lazy {
            return self.write_lazily(name, expected, rec, bytes);
        }
        let mut refused = None;
        self.write_as(sync, |tx| {
            let mut specs = tx.open_table(SPECS)?;
            let stored = stored_record(&specs, name)?;
            let (stored_site, stored_vm) = stored.map(|r| (r.site, r.vm)).unwrap_or_default();
            if stored_vm != *expected {
                refused = Some(format!(
                    "the record of spec {name} is {stored_vm:?}, not {expected:?}: not written"
                ));
                return Ok(());
            }
            specs.insert(name, bytes.as_slice())?;
            let mut allocations = tx.open_table(ALLOCATIONS)?;
            let (was, now) = (expected.reserved(), rec.vm.reserved());
            if let Some(id) = was.filter(|id| now != Some(*id)) {
                allocations.remove(key(&stored_site, id).as_str())?;
            }
            if let Some(id) = now.filter(|id| was != Some(*id)) {
                allocations.insert(key(&rec.site, id).as_str(), name)?;
            }
            Ok(())
        })?;
        self.written_names().insert(name.to_string());
        match refused {
            Some(why) => Err(self.err(why)),
            None => Ok(()),
        }
    }

    /// [`Store::write_record`] without a transaction of its own: `rec` waits in memory for the
    /// next commit (the [`LAZY_BATCH`]th lazy write, or any other write, or a read of all
    /// records). Refused, as there, when the state it would replace (the one waiting, else
    /// the stored one) is not `expected`.
    fn write_lazily(
        &self,
        name: &str,
        expected: &VmState,
        rec: &SpecRecord,
        bytes: Vec<u8>,
    ) -> Result<(), StateError> {
        let _committing = self.committing();
        if self.pending().len() >= LAZY_BATCH {
            self.commit_with_pending(Sync::Lazy, |_| Ok(()))?;
        }
        let mut pending = self.pending();
        let (stored_site, stored_vm, current) = match pending.get(name) {
            Some(p) => (p.stored_site.clone(), p.stored_vm.clone(), p.vm.clone()),
            None => {
                let tx = self.db.begin_read().map_err(|e| self.err(e))?;
                let specs = tx.open_table(SPECS).map_err(|e| self.err(e))?;
                let stored = stored_record(&specs, name).map_err(|e| self.err(e))?;
                let (site, vm) = stored.map(|r| (r.site, r.vm)).unwrap_or_default();
                (site, vm.clone(), vm)
            }
        };
        if current != *expected {
            return Err(self.err(format!(
                "the record of spec {name} is {current:?}, not {expected:?}: not written"
            )));
        }
        let waiting = LazyRecord {
            bytes,
            site: rec.site.to_string(),
            vm: rec.vm.clone(),
            stored_site,
            stored_vm,
        };
        pending.insert(name.to_string(), waiting);
        self.written_names().insert(name.to_string());
        Ok(())
    }

    /// Moves a spec's record to a new name (a rename of `metadata.name`), in one transaction.
    /// Its state goes with it unchanged.
    pub(crate) fn rename(&self, from: &str, to: &str, rec: &SpecRecord) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(rec).map_err(|e| self.err(e))?;
        let mut refused = None;
        self.write(|tx| {
            let mut specs = tx.open_table(SPECS)?;
            let stored_vm = stored_record(&specs, from)?
                .map(|r| r.vm)
                .unwrap_or_default();
            if stored_vm != rec.vm || rec.vm.reserved().is_some() {
                refused = Some(format!(
                    "the record of spec {from} is {stored_vm:?}, not {:?}: not renamed",
                    rec.vm
                ));
                return Ok(());
            }
            specs.remove(from)?;
            specs.insert(to, bytes.as_slice())?;
            Ok(())
        })?;
        self.written_names()
            .extend([from.to_string(), to.to_string()]);
        match refused {
            Some(why) => Err(self.err(why)),
            None => Ok(()),
        }
    }

    /// Forgets a spec (its VM was deleted or released, or never made), with the VMID its
    /// create intent reserved, in one transaction.
    pub(crate) fn remove(&self, name: &str) -> Result<(), StateError> {
        self.write(|tx| {
            let mut specs = tx.open_table(SPECS)?;
            if let Some(rec) = stored_record(&specs, name)?
                && let Some(id) = rec.vm.reserved()
            {
                tx.open_table(ALLOCATIONS)?
                    .remove(key(&rec.site, id).as_str())?;
            }
            specs.remove(name)?;
            Ok(())
        })?;
        self.written_names().insert(name.to_string());
        Ok(())
    }

    /// The VMIDs reserved on a site, with the spec each is for.
    pub(crate) fn allocations(&self, site: &str) -> Result<BTreeMap<u32, String>, StateError> {
        self.commit_pending()?;
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
    pub(crate) fn orphans(&self) -> Result<BTreeMap<(String, u32), u64>, StateError> {
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

    /// Every suspension: spec name (or [`SUSPEND_ALL`]) -> who, why and since when. An entry
    /// that cannot be read is kept as a suspension by an unknown hand: leaving a VM alone is
    /// the safe reading.
    pub(crate) fn suspensions(&self) -> Result<BTreeMap<String, Suspension>, StateError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = tx.open_table(SUSPENSIONS).map_err(|e| self.err(e))?;
        let mut out = BTreeMap::new();
        for entry in table.iter().map_err(|e| self.err(e))? {
            let (k, v) = entry.map_err(|e| self.err(e))?;
            let s = serde_json::from_slice(v.value()).unwrap_or_else(|_| Suspension {
                by: "unknown (an unreadable entry)".into(),
                reason: None,
                at_ms: 0,
                from_git: false,
            });
            out.insert(k.value().to_string(), s);
        }
        Ok(out)
    }

    /// Suspends `name` (or every spec: [`SUSPEND_ALL`]) with `s`, replacing its suspension.
    pub(crate) fn suspend(&self, name: &str, s: &Suspension) -> Result<(), StateError> {
        let json = serde_json::to_vec(s).map_err(|e| self.err(e))?;
        self.write(|tx| {
            tx.open_table(SUSPENSIONS)?.insert(name, json.as_slice())?;
            Ok(())
        })?;
        self.mark_suspensions_changed();
        Ok(())
    }

    /// Lifts the suspension of `name` (every suspension when `name` is [`SUSPEND_ALL`]);
    /// returns those lifted.
    pub(crate) fn resume(&self, name: &str) -> Result<Vec<(String, Suspension)>, StateError> {
        let mut lifted: Vec<(String, Suspension)> = Vec::new();
        self.write(|tx| {
            let mut table = tx.open_table(SUSPENSIONS)?;
            let names: Vec<String> = match name {
                SUSPEND_ALL => table
                    .iter()?
                    .filter_map(|e| e.ok().map(|(k, _)| k.value().to_string()))
                    .collect(),
                _ => vec![name.to_string()],
            };
            for k in names {
                if let Some(v) = table.remove(k.as_str())? {
                    let s = serde_json::from_slice(v.value()).unwrap_or(Suspension {
                        by: "unknown".into(),
                        reason: None,
                        at_ms: 0,
                        from_git: false,
                    });
                    lifted.push((k, s));
                }
            }
            Ok(())
        })?;
        if !lifted.is_empty() {
            self.mark_suspensions_changed();
        }
        Ok(lifted)
    }

    /// Brings the suspensions of `spec.suspend` in line, in one transaction: each of `lift` is
    /// removed only while it is still from git, each of `add` written only where there is no
    /// suspension of that name (one made by `proxsync suspend` stays as it is).
    pub(crate) fn sync_git_suspensions(
        &self,
        lift: &[String],
        add: &[(String, Suspension)],
    ) -> Result<(), StateError> {
        let mut added = Vec::with_capacity(add.len());
        for (name, s) in add {
            added.push((name, serde_json::to_vec(s).map_err(|e| self.err(e))?));
        }
        self.write(|tx| {
            let mut table = tx.open_table(SUSPENSIONS)?;
            for name in lift {
                let from_git = (table.get(name.as_str())?)
                    .and_then(|v| serde_json::from_slice::<Suspension>(v.value()).ok())
                    .is_some_and(|s| s.from_git);
                if from_git {
                    table.remove(name.as_str())?;
                }
            }
            for (name, json) in &added {
                if table.get(name.as_str())?.is_none() {
                    table.insert(name.as_str(), json.as_slice())?;
                }
            }
            Ok(())
        })
    }

    /// Whether a suspension was set or lifted since the last
    /// [`Store::take_suspensions_changed`], leaving the mark.
    pub(crate) fn suspensions_changed(&self) -> bool {
        (self.suspensions_changed).load(std::sync::atomic::Ordering::SeqCst)
    }

    fn mark_suspensions_changed(&self) {
        (self.suspensions_changed).store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether a suspension was set or lifted since the last call.
    pub(crate) fn take_suspensions_changed(&self) -> bool {
        (self.suspensions_changed).swap(false, std::sync::atomic::Ordering::SeqCst)
    }

    /// The image volumes this install asked PVE to download. An entry that cannot be read is
    /// left out: without its record a volume is never deleted, the safe reading.
    pub(crate) fn image_volumes(
        &self,
    ) -> Result<BTreeMap<ImageVolumeKey, ImageVolume>, StateError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = tx.open_table(IMAGE_VOLUMES).map_err(|e| self.err(e))?;
        let mut out = BTreeMap::new();
        for entry in table.iter().map_err(|e| self.err(e))? {
            let (k, v) = entry.map_err(|e| self.err(e))?;
            let mut parts = k.value().splitn(3, '/');
            let (Some(site), Some(node), Some(volid)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if let Ok(rec) = serde_json::from_slice(v.value()) {
                let key = (site.to_string(), node.to_string(), volid.to_string());
                out.insert(key, rec);
            }
        }
        Ok(out)
    }

    /// Records (or updates) image volume `key`, durably.
    pub(crate) fn put_image_volume(
        &self,
        key: &ImageVolumeKey,
        rec: &ImageVolume,
    ) -> Result<(), StateError> {
        let json = serde_json::to_vec(rec).map_err(|e| self.err(e))?;
        let k = format!("{}/{}/{}", key.0, key.1, key.2);
        self.write(|tx| {
            tx.open_table(IMAGE_VOLUMES)?
                .insert(k.as_str(), json.as_slice())?;
            Ok(())
        })
    }

    /// Forgets image volume `key` (deleted, or found gone).
    pub(crate) fn remove_image_volume(&self, key: &ImageVolumeKey) -> Result<(), StateError> {
        let k = format!("{}/{}/{}", key.0, key.1, key.2);
        self.write(|tx| {
            tx.open_table(IMAGE_VOLUMES)?.remove(k.as_str())?;
            Ok(())
        })
    }

    /// Replaces the orphan sightings with `current` in one transaction.
    pub(crate) fn set_orphans(
        &self,
        current: &BTreeMap<(String, u32), u64>,
    ) -> Result<(), StateError> {
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
pub(crate) fn read_specs_snapshot(state_dir: &Path) -> Option<BTreeMap<String, SpecRecord>> {
    read_snapshot(state_dir, SPECS, false)
}

/// The suspensions, read as [`read_specs_snapshot`] reads the records (a database of a release
/// without suspensions has none).
pub(crate) fn read_suspensions_snapshot(state_dir: &Path) -> Option<BTreeMap<String, Suspension>> {
    read_snapshot(state_dir, SUSPENSIONS, true)
}

/// The readable entries of one JSON-valued table of a database another process may hold
/// open; `None` when there is no database or it is locked. `missing_is_empty`: a table an
/// older release did not make reads as empty.
fn read_snapshot<T: serde::de::DeserializeOwned>(
    state_dir: &Path,
    table: TableDefinition<&str, &[u8]>,
    missing_is_empty: bool,
) -> Option<BTreeMap<String, T>> {
    let path = state_dir.join(DB_FILE);
    if !path.exists() {
        return None;
    }
    let db = redb::ReadOnlyDatabase::open(&path).ok()?;
    let tx = db.begin_read().ok()?;
    let table = match tx.open_table(table) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) if missing_is_empty => {
            return Some(BTreeMap::new());
        }
        Err(_) => return None,
    };
    let mut out = BTreeMap::new();
    for entry in table.iter().ok()? {
        let (k, v) = entry.ok()?;
        if let Ok(value) = serde_json::from_slice(v.value()) {
            out.insert(k.value().to_string(), value);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::category::Category;

    const UPID: &str = "UPID:pve1:000A1B2C:0123ABCD:65F0A1B2:qmclone:9000:proxsync@pve!gitops:";

    fn creating(vmid: u32) -> VmState {
        VmState::Creating {
            vmid,
            node: "pve1".into(),
            task: None,
            started_ms: 1,
            clone_of: None,
        }
    }

    fn exists(vmid: u32) -> VmState {
        VmState::Exists {
            vmid,
            node: "pve1".into(),
        }
    }

    #[test]
    fn records_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            let mut rec = SpecRecord {
                uid: "u1".into(),
                site: "lab".into(),
                ..Default::default()
            };
            store.transition("web-01", &mut rec, creating(101)).unwrap();
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
        let store = crate::util::once_free(|| Store::open(dir.path()));
        let specs = store.specs().unwrap();
        assert_eq!(specs["web-01"].vm, creating(101));
        store.remove("web-01").unwrap();
        assert!(store.specs().unwrap().is_empty());
        assert!(
            store.allocations("lab").unwrap().is_empty(),
            "forgetting a create intent releases its VMID"
        );
    }

    /// The database file as a crash would leave it now: a copy, opened on its own.
    fn as_after_a_crash(dir: &Path) -> BTreeMap<String, SpecRecord> {
        let copy = tempfile::tempdir().unwrap();
        std::fs::copy(dir.join(DB_FILE), copy.path().join(DB_FILE)).unwrap();
        Store::open(copy.path()).unwrap().specs().unwrap()
    }

    #[test]
    fn a_lazy_record_reaches_the_disk_with_the_flush_and_a_create_intent_never_waits() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut rec = SpecRecord {
            uid: "u1".into(),
            site: "lab".into(),
            ..Default::default()
        };
        store
            .transition_lazily("web-01", &mut rec, exists(101))
            .unwrap();
        assert_eq!(
            store.specs().unwrap()["web-01"].vm,
            exists(101),
            "read at once"
        );
        assert!(
            !as_after_a_crash(dir.path()).contains_key("web-01"),
            "not on disk before the flush"
        );
        store.flush().unwrap();
        assert_eq!(as_after_a_crash(dir.path())["web-01"].vm, exists(101));

        // A create intent is durable when written, whatever it is asked.
        let mut rec = SpecRecord {
            uid: "u2".into(),
            site: "lab".into(),
            ..Default::default()
        };
        store
            .transition_lazily("db-01", &mut rec, creating(102))
            .unwrap();
        let after = as_after_a_crash(dir.path());
        assert_eq!(after["db-01"].vm, creating(102));

        // Closing the store flushes.
        let mut rec = store.specs().unwrap().remove("web-01").unwrap();
        rec.uid = "u3".into();
        store
            .put_adopted_lazily("web-01", &rec.vm.clone(), &rec)
            .unwrap();
        drop(store);
        let reopened = crate::util::once_free(|| Store::open(dir.path()));
        assert_eq!(reopened.specs().unwrap()["web-01"].uid, "u3");
    }

    #[test]
    fn an_adoption_is_written_once_from_the_state_the_store_holds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let adopted = SpecRecord {
            uid: "u1".into(),
            site: "lab".into(),
            vm: exists(101),
            ..Default::default()
        };
        // Nothing written before (a guest already as its spec says): from `Absent`.
        (store.put_adopted_lazily("web-01", &VmState::Absent, &adopted)).unwrap();
        assert_eq!(store.record("web-01").unwrap().unwrap().vm, exists(101));
        assert!(
            !as_after_a_crash(dir.path()).contains_key("web-01"),
            "not waited for"
        );
        // Written meanwhile, even to the very state the adoption meant: refused.
        let refused = store.put_adopted_lazily("web-01", &VmState::Absent, &adopted);
        assert!(refused.is_err(), "{refused:?}");
        // Its own transition written first (a converge followed): from `rec.vm`.
        let mut rec = SpecRecord {
            uid: "u2".into(),
            site: "lab".into(),
            ..Default::default()
        };
        store
            .transition_lazily("db-01", &mut rec, exists(102))
            .unwrap();
        (store.put_adopted_lazily("db-01", &rec.vm.clone(), &rec)).unwrap();
        // A create intent found: its reservation goes with it.
        let mut other = SpecRecord {
            uid: "u3".into(),
            site: "lab".into(),
            ..Default::default()
        };
        store
            .transition("app-01", &mut other, creating(103))
            .unwrap();
        let found = other.vm.clone();
        let adopted = SpecRecord {
            vm: exists(103),
            ..other.clone()
        };
        (store.put_adopted_lazily("app-01", &found, &adopted)).unwrap();
        assert_eq!(store.allocations("lab").unwrap().get(&103), None);
    }

    #[test]
    fn lazy_writes_wait_in_memory_and_are_committed_together() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let adopted = |uid: &str, vmid| SpecRecord {
            uid: uid.into(),
            site: "lab".into(),
            vm: exists(vmid),
            ..Default::default()
        };
        let before = store.commits();
        for i in 0..10 {
            let name = format!("web-{i:02}");
            let rec = adopted(&name, 100 + i);
            (store.put_adopted_lazily(&name, &VmState::Absent, &rec)).unwrap();
        }
        assert_eq!(store.commits(), before, "no commit for each");
        // Read where they wait, and judged on the state waiting, not the one stored.
        assert_eq!(store.record("web-03").unwrap().unwrap().vm, exists(103));
        let again = store.put_adopted_lazily("web-03", &VmState::Absent, &adopted("x", 103));
        assert!(again.is_err(), "{again:?}");
        let mut rec = store.record("web-04").unwrap().unwrap();
        rec.uid = "u4".into();
        (store.put_adopted_lazily("web-04", &exists(104), &rec)).unwrap();
        // A durable write commits them first, and judges its own on them.
        let mut rec = store.record("web-05").unwrap().unwrap();
        store.transition("web-05", &mut rec, creating(105)).unwrap();
        assert_eq!(store.commits(), before + 1);
        let after = as_after_a_crash(dir.path());
        assert_eq!(after.len(), 10, "all on disk with the durable write");
        assert_eq!(
            (after["web-04"].uid.as_str(), &after["web-05"].vm),
            ("u4", &creating(105))
        );
        // The batch: one commit for LAZY_BATCH writes.
        let before = store.commits();
        for i in 0..=LAZY_BATCH as u32 {
            let name = format!("db-{i:03}");
            let rec = adopted(&name, 1000 + i);
            (store.put_adopted_lazily(&name, &VmState::Absent, &rec)).unwrap();
        }
        assert_eq!(
            store.commits(),
            before + 1,
            "the full batch committed with the next write"
        );
        assert!(
            !as_after_a_crash(dir.path()).contains_key("db-000"),
            "committed lazily"
        );
        // Reading every record commits those waiting; the flush makes them durable.
        assert_eq!(store.specs().unwrap().len(), 11 + LAZY_BATCH);
        store.flush().unwrap();
        assert_eq!(as_after_a_crash(dir.path()).len(), 11 + LAZY_BATCH);
    }

    fn deleting(vmid: u32) -> VmState {
        VmState::Deleting {
            vmid,
            node: "pve1".into(),
            task: None,
        }
    }

    /// The reservations are exactly the records' Creating and Deleting states.
    fn assert_allocations_follow_records(store: &Store) {
        let specs = store.specs().unwrap();
        let want: BTreeMap<u32, String> = (specs.iter())
            .filter_map(|(n, r)| r.vm.reserved().map(|id| (id, n.clone())))
            .collect();
        assert_eq!(store.allocations("lab").unwrap(), want, "{specs:?}");
    }

    #[test]
    fn a_lazy_write_from_a_create_intent_moves_its_reservation_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let lab = || SpecRecord {
            site: "lab".into(),
            ..Default::default()
        };
        // Waiting, then a durable write of the same record: judged on the one waiting.
        let mut a = lab();
        store.transition("a", &mut a, creating(105)).unwrap();
        store.transition_lazily("a", &mut a, exists(105)).unwrap();
        store.transition("a", &mut a, deleting(105)).unwrap();
        assert_allocations_follow_records(&store);
        let mut stale = SpecRecord {
            vm: creating(105),
            ..lab()
        };
        assert!(store.transition("a", &mut stale, exists(105)).is_err());
        // Waiting, then removed, or renamed.
        let mut b = lab();
        store.transition("b", &mut b, creating(106)).unwrap();
        store.transition_lazily("b", &mut b, exists(106)).unwrap();
        store.remove("b").unwrap();
        assert_allocations_follow_records(&store);
        let mut c = lab();
        store.transition("c", &mut c, creating(107)).unwrap();
        store.transition_lazily("c", &mut c, exists(107)).unwrap();
        store.rename("c", "d", &c).unwrap();
        assert_allocations_follow_records(&store);
        assert!(store.record("c").unwrap().is_none());
        // Waiting when the store is closed: made durable.
        store.transition_lazily("e", &mut lab(), exists(9)).unwrap();
        drop(store);
        assert_eq!(as_after_a_crash(dir.path())["e"].vm, exists(9));
    }

    #[test]
    fn lazy_durable_and_reads_side_by_side_keep_the_reservations_exact() {
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for i in 0..400u32 {
                        let k = (i * 7 + t) % 50;
                        let (name, vmid) = (format!("s{k}"), 100 + k);
                        let mut rec = store.record(&name).unwrap().unwrap_or(SpecRecord {
                            site: "lab".into(),
                            ..Default::default()
                        });
                        let to = match (&rec.vm, i % 3) {
                            (VmState::Absent, _) => creating(vmid),
                            (VmState::Creating { .. } | VmState::Exists { .. }, 0) => {
                                deleting(vmid)
                            }
                            _ => exists(vmid),
                        };
                        // Refusals (another thread changed the record) are expected.
                        let _ = match i {
                            i if i % 5 == 0 => store.specs().map(drop),
                            i if i % 11 == 0 => store.remove(&name),
                            i if i % 13 == 0 => store.flush(),
                            _ => store.transition_lazily(&name, &mut rec, to),
                        };
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_allocations_follow_records(&store);
        let live = store.specs().unwrap();
        drop(store);
        assert_eq!(as_after_a_crash(dir.path()), live);
    }

    #[test]
    fn the_names_written_are_told_once_and_read_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut rec = SpecRecord {
            uid: "u1".into(),
            site: "lab".into(),
            ..Default::default()
        };
        store.put("a", &rec).unwrap();
        store.transition("b", &mut rec, creating(120)).unwrap();
        assert_eq!(
            store.take_written(),
            BTreeSet::from(["a".into(), "b".into()])
        );
        assert!(store.take_written().is_empty(), "told once");

        store.transition("b", &mut rec, exists(120)).unwrap();
        store.rename("b", "c", &rec).unwrap();
        store.remove("a").unwrap();
        let names: Vec<String> = store.take_written().into_iter().collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(store.record("c").unwrap().map(|r| r.vm), Some(exists(120)));
        assert_eq!(store.record("a").unwrap(), None);
        assert_eq!(store.record("b").unwrap(), None);
    }

    #[test]
    fn transitions_carry_the_vmid_reservation() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let reserved = |store: &Store| {
            store
                .allocations("lab")
                .unwrap()
                .into_keys()
                .collect::<Vec<_>>()
        };
        let mut rec = SpecRecord {
            site: "lab".into(),
            ..Default::default()
        };
        store.transition("a", &mut rec, creating(101)).unwrap();
        assert_eq!(reserved(&store), [101]);
        // Another VMID for the same intent (the first was taken): one reservation, the new one.
        store.transition("a", &mut rec, creating(102)).unwrap();
        assert_eq!(reserved(&store), [102]);
        let with_task = VmState::Creating {
            vmid: 102,
            node: "pve1".into(),
            task: Some(Box::new(UPID.parse().unwrap())),
            started_ms: 1,
            clone_of: None,
        };
        store.transition("a", &mut rec, with_task).unwrap();
        assert_eq!(reserved(&store), [102]);
        store.transition("a", &mut rec, exists(102)).unwrap();
        assert!(
            reserved(&store).is_empty(),
            "PVE keeps the VMID of a made VM"
        );
        assert_eq!(store.specs().unwrap()["a"].vm, exists(102));
        assert_eq!(rec.vm, exists(102));
        store
            .transition(
                "b",
                &mut SpecRecord {
                    site: "lab".into(),
                    ..Default::default()
                },
                creating(103),
            )
            .unwrap();
        let mut b = store.specs().unwrap().remove("b").unwrap();
        store.transition("b", &mut b, VmState::Absent).unwrap();
        assert!(
            reserved(&store).is_empty(),
            "an abandoned intent releases its VMID"
        );
    }

    #[test]
    fn a_state_changes_only_from_the_state_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut rec = SpecRecord {
            site: "lab".into(),
            ..Default::default()
        };
        store.transition("a", &mut rec, exists(100)).unwrap();
        // A copy from before that write believes the spec has no VM: refused, nothing written.
        let mut stale = SpecRecord {
            site: "lab".into(),
            ..Default::default()
        };
        assert!(store.transition("a", &mut stale, creating(101)).is_err());
        assert_eq!(stale.vm, VmState::Absent);
        assert!(store.allocations("lab").unwrap().is_empty());
        // `put` never changes a state.
        assert!(store.put("a", &stale).is_err());
        let changed = SpecRecord {
            vm: exists(105),
            ..rec.clone()
        };
        assert!(store.put("a", &changed).is_err());
        assert_eq!(store.specs().unwrap()["a"].vm, exists(100));
        rec.attempts = 3;
        store.put("a", &rec).unwrap();
        assert_eq!(store.specs().unwrap()["a"].attempts, 3);
    }

    #[test]
    fn records_of_the_previous_release_keep_their_state() {
        // As the previous release wrote them: `phase` (its own tag), `vmid` and `node` beside it.
        let old = |phase: &str, vmid: &str| -> SpecRecord {
            let json = format!(
                r#"{{"uid":"u1","site":"lab","node":"pve2","vmid":{vmid},"phase":{phase},
                "applied_hash":"h1","applied_content":null,"applied_tags":["web"],
                "applied_disk_bytes":null,"reboot_pending":[],"last_reboot_ms":null,
                "ha_applied":false,"attempts":0,"next_attempt_ms":null,"last_error":null,
                "provisioned":true,"adopted":false,"orphan_on_delete":false,"ip_addresses":[],
                "last_task":null,"history":[]}}"#
            );
            serde_json::from_str(&json).unwrap()
        };
        let creating = old(
            &format!(
                r#"{{"phase":"creating","vmid":101,"node":"pve2","upid":"{UPID}",
                "started_ms":1700000000000,"clone_of":{{"node":"pve1","vmid":9000}}}}"#
            ),
            "null",
        );
        // The create in flight survives intact: its VMID, node, task, time and template.
        assert_eq!(
            creating.vm,
            VmState::Creating {
                vmid: 101,
                node: "pve2".into(),
                task: Some(Box::new(UPID.parse().unwrap())),
                started_ms: 1_700_000_000_000,
                clone_of: Some(CloneSource {
                    node: "pve1".into(),
                    vmid: 9000
                }),
            }
        );
        assert_eq!(creating.uid, "u1");
        assert_eq!(creating.applied_tags, ["web"]);
        assert!(creating.provisioned);
        // An intent written before the task was answered, by a release before `started_ms`.
        let unanswered = old(
            r#"{"phase":"creating","vmid":101,"node":"pve2","upid":null}"#,
            "null",
        );
        assert!(matches!(
            unanswered.vm,
            VmState::Creating {
                vmid: 101,
                task: None,
                started_ms: 0,
                clone_of: None,
                ..
            }
        ));
        // A task id that does not parse is no task: the create is resumed by looking.
        let garbled = old(
            r#"{"phase":"creating","vmid":101,"node":"pve2","upid":"UPID:x"}"#,
            "null",
        );
        assert!(matches!(
            garbled.vm,
            VmState::Creating {
                vmid: 101,
                task: None,
                ..
            }
        ));
        assert_eq!(
            old(r#"{"phase":"exists"}"#, "100").vm,
            VmState::Exists {
                vmid: 100,
                node: "pve2".into()
            }
        );
        assert_eq!(
            old(&format!(r#"{{"phase":"deleting","upid":"{UPID}"}}"#), "100").vm,
            VmState::Deleting {
                vmid: 100,
                node: "pve2".into(),
                task: Some(Box::new(UPID.parse().unwrap()))
            }
        );
        assert_eq!(old(r#"{"phase":"pending"}"#, "null").vm, VmState::Absent);
        assert_eq!(old(r#"{"phase":"exists"}"#, "null").vm, VmState::Absent);
        // Written back in this release's shape, and read back the same.
        let json = serde_json::to_string(&creating).unwrap();
        assert!(json.contains(r#""vm":{"state":"creating""#), "{json}");
        assert!(!json.contains("phase"), "{json}");
        assert_eq!(serde_json::from_str::<SpecRecord>(&json).unwrap(), creating);
    }

    #[test]
    fn an_upgraded_database_resumes_its_creates() {
        // An old record in the database file itself, then read through the store.
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let old = format!(
            r#"{{"uid":"u1","site":"lab","node":"pve1","vmid":null,"provisioned":false,
            "phase":{{"phase":"creating","vmid":101,"node":"pve1","upid":"{UPID}","started_ms":5,"clone_of":null}}}}"#
        );
        store
            .write(|tx| {
                tx.open_table(SPECS)?.insert("web-01", old.as_bytes())?;
                tx.open_table(ALLOCATIONS)?.insert("lab/101", "web-01")?;
                Ok(())
            })
            .unwrap();
        let mut rec = store.specs().unwrap().remove("web-01").unwrap();
        assert!(matches!(
            rec.vm,
            VmState::Creating {
                vmid: 101,
                task: Some(_),
                ..
            }
        ));
        store.transition("web-01", &mut rec, exists(101)).unwrap();
        assert!(store.allocations("lab").unwrap().is_empty());
    }

    #[test]
    fn error_records_of_older_releases_keep_their_verdict() {
        let read = |json: &str| serde_json::from_str::<ErrorRecord>(json).unwrap();
        let stale = read(
            r#"{"category":"LockError","message":"VM 100 is locked (create); qm unlock 100",
            "at_ms":1,"inputs":"i","needs_human":true}"#,
        );
        assert_eq!(stale.category, Category::LockError);
        assert_eq!(stale.kind, ErrorKind::StaleLock);
        assert!(stale.needs_human());
        // Before `needs_human` was kept: the text told to `qm unlock`.
        let older = read(
            r#"{"category":"LockError","message":"... with: qm unlock 100","at_ms":1,"inputs":"i"}"#,
        );
        assert_eq!(older.kind, ErrorKind::StaleLock);
        let busy =
            read(r#"{"category":"LockError","message":"can't lock file","at_ms":1,"inputs":"i"}"#);
        assert_eq!(busy.kind, ErrorKind::Plain);
        assert!(!busy.needs_human());
        let denied = read(
            r#"{"category":"PermissionDenied","message":"403","at_ms":1,"inputs":"i","needs_human":true}"#,
        );
        assert_eq!(denied.kind, ErrorKind::Plain);
        assert!(denied.needs_human());
        // This release's shape round-trips, its category by name.
        let json = serde_json::to_string(&stale).unwrap();
        assert!(
            json.contains(r#""category":"LockError""#) && json.contains(r#""kind":"staleLock""#),
            "{json}"
        );
        assert_eq!(read(&json), stale);
    }

    #[test]
    fn a_database_whose_making_was_interrupted_is_made_again() {
        // redb writes its magic number last: a process killed while an earlier release made
        // the database in place left a file of zeros, which redb never opens ("invalid data").
        let dir = tempfile::tempdir().unwrap();
        // The header written, its magic number not yet.
        let mut unfinished = vec![0u8; 1 << 16];
        unfinished[9..16].copy_from_slice(&[1, 0, 0, 0, 16, 0, 0]);
        std::fs::write(dir.path().join(DB_FILE), unfinished).unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.put("a", &SpecRecord::default()).unwrap();
        assert!(store.specs().unwrap().contains_key("a"));
        assert!(!dir.path().join(format!("{DB_FILE}.new")).exists());
        // A leftover of a new database killed before its rename is replaced too.
        drop(store);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(format!("{DB_FILE}.new")), b"half").unwrap();
        Store::open(dir.path()).unwrap();
        assert!(!dir.path().join(format!("{DB_FILE}.new")).exists());
    }

    #[test]
    fn a_file_that_is_not_a_database_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        std::fs::write(&path, b"not a database").unwrap();
        assert!(Store::open(dir.path()).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"not a database");
    }

    #[test]
    fn a_new_database_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        Store::open(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(DB_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
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
        let snap = crate::util::once_free(|| read_specs_snapshot(dir.path()).ok_or("locked"));
        assert!(snap.contains_key("a"));
    }

    /// `spec.suspend` is brought in line without touching a `proxsync suspend` of the same
    /// name: one made between the engine's read and its write is neither lifted nor
    /// overwritten.
    #[test]
    fn git_suspensions_never_lift_or_overwrite_one_made_by_hand() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let git = |at_ms| Suspension {
            by: "git".into(),
            reason: None,
            at_ms,
            from_git: true,
        };
        let hand = Suspension {
            by: "alice".into(),
            reason: Some("backup".into()),
            at_ms: 5,
            from_git: false,
        };
        store.suspend("a", &git(1)).unwrap();
        store.suspend("b", &hand).unwrap();
        store.suspend("c", &hand).unwrap();
        store
            .sync_git_suspensions(
                &["a".to_string(), "b".to_string()],
                &[("c".to_string(), git(9)), ("d".to_string(), git(9))],
            )
            .unwrap();
        let held = store.suspensions().unwrap();
        assert!(!held.contains_key("a"), "a git suspension is lifted");
        assert_eq!(held["b"], hand, "one by hand is not lifted");
        assert_eq!(held["c"], hand, "nor overwritten");
        assert_eq!(held["d"], git(9));
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

    /// The engine keeps every record (10,000 and more): the rare large parts (a create's
    /// UPID, the last error and task) are boxed so they do not size every record.
    #[test]
    fn records_stay_small() {
        let sizes = (
            std::mem::size_of::<VmState>(),
            std::mem::size_of::<SpecRecord>(),
        );
        eprintln!("VmState, SpecRecord: {sizes:?} bytes");
        assert!(sizes.0 <= 96, "{sizes:?}");
        // 408: `depends_on`, a boxed slice (16 bytes; most records hold none). 416: the guest's
        // identity, boxed (a pointer, where a uuid string inline would take 40 bytes). 424: the
        // image file the guest was made from, boxed (a pointer; a `Box<str>` took 16). 432: the
        // changes `changePolicy` guards, boxed.
        assert!(sizes.1 <= 432, "{sizes:?}");
    }
}
