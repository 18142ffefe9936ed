//! The status directory: atomic writes (temp file, fsync, rename) of the spec files,
//! `_summary.yaml` and `_orphans.yaml`, only when their content changed, and reading them back.

use std::collections::hash_map::DefaultHasher;
use std::fs::{self, File, OpenOptions, Permissions};
use std::hash::{Hash, Hasher};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::index::IndexWriter;
use super::transitions::{Carried, build_spec_file};
use super::{
    CycleRecord, NotifyFailureRecord, ORPHANS_FILE, ORPHANS_VERSION, OrphanEntry, OrphanRecord,
    OrphansFile, RECENT_CYCLES, RefusedCommitRecord, RequestRecord, RewindRecord, SUMMARY_FILE,
    SiteRecord, SpecFile, SpecStatus, StatusError, SummaryFile, SummaryStatus, clip, clip_to,
    rfc3339,
};

/// Status files we read back larger than this are treated as corrupt (ours are a few KiB).
const MAX_READ_BYTES: u64 = 1024 * 1024;

/// Leftover temp files older than this are removed by [`StatusDir::open`].
const STALE_TEMP_AGE: Duration = Duration::from_secs(60);

/// The first line of every file we write.
const HEADER: &str = "# Written by proxsync; do not edit. Reference: docs/status.md\n";

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StatusError + '_ {
    move |source| StatusError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A hash of a spec file's content without `updatedAt`: equal hashes mean an unchanged file.
/// 64 bits: the chance that a change goes unwritten (until the next one) is 2^-64 per change.
/// It is kept in memory only, so the hasher may change between releases.
fn content_hash(f: &SpecFile) -> u64 {
    // Every field named, so that a new one cannot be left out by mistake.
    let SpecFile {
        name,
        kind,
        site,
        node,
        vm_id,
        vm_name,
        state,
        ip_addresses,
        tags,
        labels,
        commit,
        spec_file,
        observed_generation,
        initialization,
        conditions,
        last_task,
        backoff,
        history,
        drift,
        updated_at: _,
    } = f;
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    kind.hash(&mut h);
    site.hash(&mut h);
    node.hash(&mut h);
    vm_id.hash(&mut h);
    vm_name.hash(&mut h);
    state.hash(&mut h);
    ip_addresses.hash(&mut h);
    tags.hash(&mut h);
    labels.hash(&mut h);
    commit.hash(&mut h);
    spec_file.hash(&mut h);
    observed_generation.hash(&mut h);
    initialization.hash(&mut h);
    conditions.hash(&mut h);
    last_task.hash(&mut h);
    backoff.hash(&mut h);
    history.hash(&mut h);
    drift.hash(&mut h);
    h.finish()
}

/// The status directory and what was last written to it.
#[derive(Debug)]
pub(crate) struct StatusDir {
    dir: PathBuf,
    summary: Option<Option<SummaryFile>>,
    /// The end of the cycle the summary last written was of: written again, its entry in
    /// `recentCycles` is replaced rather than added.
    summary_cycle: Option<SystemTime>,
    orphans: Option<Option<OrphansFile>>,
    /// Files written or removed since the directory was last synced ([`Self::finish_writes`]).
    unsynced: bool,
    /// `_index.jsonl`, from the first spec file this process writes or removes (a reader
    /// never writes it).
    index: Option<IndexWriter>,
}

impl StatusDir {
    /// Opens (creating with mode 0755 if missing) the status directory and removes temp files
    /// a crashed run left behind.
    pub(crate) fn open(dir: &Path) -> io::Result<StatusDir> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
        if !fs::metadata(dir)?.is_dir() {
            return Err(io::Error::other(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        let sd = StatusDir {
            dir: dir.to_path_buf(),
            summary: None,
            summary_cycle: None,
            orphans: None,
            unsynced: false,
            index: None,
        };
        sd.remove_stale_temps();
        Ok(sd)
    }

    /// A reader of `dir` that never creates it nor removes anything in it (the web pages,
    /// which only read what the daemon writes). Its `write_*` must not be called.
    pub(crate) fn reader(dir: &Path) -> StatusDir {
        StatusDir {
            dir: dir.to_path_buf(),
            summary: None,
            summary_cycle: None,
            orphans: None,
            unsynced: false,
            index: None,
        }
    }

    /// The directory.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// [`Self::write_spec_read`], the previous file read here.
    #[cfg(test)]
    pub(crate) fn write_spec(
        &mut self,
        s: &SpecStatus,
        now: SystemTime,
    ) -> Result<bool, StatusError> {
        self.write_spec_read(s, now, None)
    }

    /// Writes `<name>.yaml` for one spec if its content changed. Returns true when the file
    /// was (re)written.
    ///
    /// The previous file is read back each time: it is what the next one carries over
    /// (transition times, a sticky `Provisioned`) and what tells an unchanged file. Nothing of
    /// it is kept in memory: the engine calls this only for a status that changed, or once
    /// per spec after a start, and a read is cheaper than holding every spec's file (at
    /// 50,000 specs that was 13 MiB and more).
    ///
    /// `read`: the previous file when the caller has read it already (`Some(None)`: there was
    /// none); `None` to read it here.
    pub(crate) fn write_spec_read(
        &mut self,
        s: &SpecStatus,
        now: SystemTime,
        read: Option<Option<SpecFile>>,
    ) -> Result<bool, StatusError> {
        check_name(&s.name)?;
        let file_name = format!("{}.yaml", s.name);
        let prev = read.unwrap_or_else(|| self.load::<SpecFile>(&file_name));
        let prev = prev.filter(|f| {
            if f.name == s.name {
                true
            } else {
                tracing::warn!(
                    file = %self.dir.join(&file_name).display(),
                    "status file names another spec; overwriting it"
                );
                false
            }
        });
        let carried = prev.as_ref().map(Carried::of);
        let mut next = build_spec_file(s, carried.as_ref(), now);
        if let Some(prev) = prev.filter(|p| content_hash(p) == content_hash(&next)) {
            self.index().row(&prev, false);
            return Ok(false);
        }
        next.updated_at = Some(rfc3339(now));
        let text = render(&next, &file_name)?;
        self.index().will_write();
        self.write_atomic(&file_name, text.as_bytes())?;
        self.index().row(&next, true);
        Ok(true)
    }

    /// The last summary's `recentCycles` (read back after a restart), with `s`'s cycle
    /// added (or put in place of its own entry, written again) and the oldest dropped past
    /// [`RECENT_CYCLES`].
    fn recent_cycles(&self, s: &SummaryStatus) -> Vec<CycleRecord> {
        let mut before = match &self.summary {
            Some(Some(p)) => &p.recent_cycles[..],
            _ => &[],
        };
        // The same cycle written again replaces its entry. Its end, to the nanosecond, is its
        // identity (the file's `at` is whole seconds, and several cycles may end in one);
        // read back after a restart, the same second and duration.
        let at = rfc3339(s.last_cycle);
        if let [rest @ .., last] = before {
            let same = match self.summary_cycle {
                Some(written) => written == s.last_cycle,
                None => last.at == at && last.ms == s.cycle_ms,
            };
            if same {
                before = rest;
            }
        }
        let keep = before.len().min(RECENT_CYCLES - 1);
        let mut cycles = before[before.len() - keep..].to_vec();
        cycles.push(CycleRecord {
            at,
            ms: s.cycle_ms,
            actions: s.cycle.actions,
            failed: s.cycle.failed,
            sites_down: s.cycle.sites_down,
        });
        cycles
    }

    /// Writes `_summary.yaml` if its content changed (it carries `lastCycle`, so it normally
    /// changes every cycle: it doubles as a heartbeat). Written last in a cycle, so it ends the
    /// cycle's writes ([`Self::finish_writes`]).
    pub(crate) fn write_summary(&mut self, s: &SummaryStatus) -> Result<bool, StatusError> {
        if self.summary.is_none() {
            self.summary = Some(self.load::<SummaryFile>(SUMMARY_FILE));
        }
        let mut next = SummaryFile {
            commit: s.commit.as_deref().map(clip),
            // Masked again here: the source's errors may quote a URL with a password.
            source_error: s
                .source_error
                .as_deref()
                .map(|e| clip(&crate::redact::urls(e))),
            refused_commit: s.refused_commit.as_ref().map(|r| RefusedCommitRecord {
                commit: clip(&r.commit),
                reason: r.kind.as_str().to_string(),
                message: clip(&r.reason),
            }),
            specs: s.specs as u64,
            ready: s.ready as u64,
            stalled: s.stalled as u64,
            backing_off: s.backing_off as u64,
            invalid: s.invalid as u64,
            sites: s
                .sites
                .iter()
                .map(|site| SiteRecord {
                    name: clip(&site.name),
                    reachable: site.reachable,
                    quorate: site.quorate,
                    nodes_online: site.nodes_online.iter().map(|n| clip(n)).collect(),
                    nodes_offline: site.nodes_offline.iter().map(|n| clip(n)).collect(),
                    error: site.error.as_deref().map(clip),
                    parallel_per_node: site
                        .parallel
                        .iter()
                        .map(|(node, n)| (clip(node), *n))
                        .collect(),
                })
                .collect(),
            refused: s.refused.iter().map(|r| clip(r)).collect(),
            last_cycle: rfc3339(s.last_cycle),
            cycle_ms: s.cycle_ms,
            last_request: s.last_request.as_ref().map(|r| RequestRecord {
                spec: r.spec.as_deref().map(clip),
                handled_at: rfc3339(r.handled_at),
            }),
            notify_failures: s
                .notify_failures
                .iter()
                .map(|f| NotifyFailureRecord {
                    target: clip(&f.target),
                    kind: clip(&f.kind),
                    failures: f.failures,
                    last_error: clip(&f.last_error),
                    since: rfc3339(f.since),
                })
                .collect(),
            rewind: s.rewind.as_ref().map(|r| RewindRecord {
                commit: clip(&r.commit),
                from: clip(&r.from),
                since: rfc3339(r.since),
            }),
            sets: s.sets.clone(),
            images: s.images.clone(),
            recent_cycles: Vec::new(),
        };
        next.recent_cycles = self.recent_cycles(s);
        self.summary_cycle = Some(s.last_cycle);
        let unchanged = matches!(&self.summary, Some(Some(p)) if *p == next);
        if unchanged && self.dir.join(SUMMARY_FILE).exists() {
            self.finish_writes();
            return Ok(false);
        }
        let text = render(&next, SUMMARY_FILE)?;
        self.write_atomic(SUMMARY_FILE, text.as_bytes())?;
        self.summary = Some(Some(next));
        self.finish_writes();
        Ok(true)
    }

    /// Writes `_orphans.yaml` (sorted by site, then VMID) if the list changed.
    pub(crate) fn write_orphans(
        &mut self,
        o: &[OrphanEntry],
        now: SystemTime,
    ) -> Result<bool, StatusError> {
        if self.orphans.is_none() {
            self.orphans = Some(self.load::<OrphansFile>(ORPHANS_FILE));
        }
        let mut orphans: Vec<OrphanRecord> = o
            .iter()
            .map(|e| OrphanRecord {
                site: clip(&e.site),
                vm_id: e.vm_id,
                kind: Some(e.kind.spec_kind().to_string()),
                node: clip(&e.node),
                name: e.name.as_deref().map(clip),
                state: clip(&e.state),
                first_seen: rfc3339(e.first_seen),
                action: clip(&e.action),
                duplicate_of: e.duplicate_of.as_deref().map(clip),
            })
            .collect();
        orphans.sort_by(|a, b| (&a.site, a.vm_id).cmp(&(&b.site, b.vm_id)));
        // A file of an older version is rewritten in this one, even with nothing else new.
        let unchanged = matches!(&self.orphans,
            Some(Some(p)) if p.orphans == orphans && p.version == ORPHANS_VERSION);
        if unchanged && self.dir.join(ORPHANS_FILE).exists() {
            return Ok(false);
        }
        let next = OrphansFile {
            version: ORPHANS_VERSION,
            orphans,
            updated_at: Some(rfc3339(now)),
        };
        let text = render(&next, ORPHANS_FILE)?;
        self.write_atomic(ORPHANS_FILE, text.as_bytes())?;
        self.orphans = Some(Some(next));
        Ok(true)
    }

    /// Removes a spec's file (its spec was removed and its VM deleted or released). Removing
    /// a file that does not exist is not an error.
    pub(crate) fn remove_spec(&mut self, name: &str) -> Result<(), StatusError> {
        check_name(name)?;
        let path = self.dir.join(format!("{name}.yaml"));
        self.index().will_write();
        match fs::remove_file(&path) {
            Ok(()) => self.unsynced = true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
        self.index().removed(name);
        Ok(())
    }

    /// The index this process writes, rebuilt from the first spec file written or removed.
    fn index(&mut self) -> &mut IndexWriter {
        let dir = &self.dir;
        self.index.get_or_insert_with(|| IndexWriter::rebuild(dir))
    }

    /// The names that have a status file (not `_summary` / `_orphans` / temp files), sorted.
    pub(crate) fn spec_names(&self) -> Result<Vec<String>, StatusError> {
        spec_names_of(&self.dir)
    }

    /// Parses a spec's file back. `Ok(None)` when there is no file; a corrupt file is an
    /// `Ok(None)` too (with a warning), as the writer treats it.
    pub(crate) fn read_spec(&self, name: &str) -> Result<Option<SpecFile>, StatusError> {
        check_name(name)?;
        self.read_file(&format!("{name}.yaml"))
    }

    /// Parses `_summary.yaml` back (`Ok(None)` when absent or corrupt).
    pub(crate) fn read_summary(&self) -> Result<Option<SummaryFile>, StatusError> {
        self.read_file(SUMMARY_FILE)
    }

    /// Parses `_orphans.yaml` back (`Ok(None)` when absent or corrupt).
    pub(crate) fn read_orphans(&self) -> Result<Option<OrphansFile>, StatusError> {
        self.read_file(ORPHANS_FILE)
    }

    // ---- internals ----

    /// Reads and parses a file: `Ok(None)` if absent or corrupt, `Err` on other I/O errors.
    /// Only a regular file is read: the writer puts nothing else there, and a symlink or a FIFO
    /// planted in the directory (the web pages read `/spec/<name>` by name) would otherwise
    /// show a file from elsewhere, or block the reader for ever. Either is ignored like a
    /// corrupt file, as [`spec_names_of`] skips it.
    fn read_file<T: for<'de> Deserialize<'de>>(
        &self,
        file_name: &str,
    ) -> Result<Option<T>, StatusError> {
        let path = self.dir.join(file_name);
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                tracing::warn!(file = %path.display(), "status file is a symlink; ignoring it");
                return Ok(None);
            }
            Err(e) => return Err(io_err(&path)(e)),
        };
        if !file.metadata().map_err(io_err(&path))?.is_file() {
            tracing::warn!(file = %path.display(), "status file is not a regular file; ignoring it");
            return Ok(None);
        }
        let mut bytes = Vec::new();
        file.take(MAX_READ_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io_err(&path))?;
        if bytes.len() as u64 > MAX_READ_BYTES {
            tracing::warn!(file = %path.display(), "status file too large; ignoring it");
            return Ok(None);
        }
        let Ok(text) = String::from_utf8(bytes) else {
            tracing::warn!(file = %path.display(), "status file is not UTF-8; ignoring it");
            return Ok(None);
        };
        match serde_saphyr::from_str::<T>(&text) {
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                let msg = clip(&e.to_string());
                tracing::warn!(file = %path.display(), error = %msg, "corrupt status file; ignoring it");
                Ok(None)
            }
        }
    }

    /// Like [`read_file`](Self::read_file) for the writer: any failure is "no previous file".
    fn load<T: for<'de> Deserialize<'de>>(&self, file_name: &str) -> Option<T> {
        match self.read_file(file_name) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read previous status file; rewriting it");
                None
            }
        }
    }

    fn write_atomic(&mut self, file_name: &str, bytes: &[u8]) -> Result<(), StatusError> {
        let path = self.dir.join(file_name);
        let tmp = self
            .dir
            .join(format!(".{file_name}.tmp-{}", std::process::id()));
        let result = (|| -> io::Result<()> {
            let create = || {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(&tmp)
            };
            // A temp file of this process is left only by a write that failed and could not
            // remove it: removed then, not looked for before each write (at 50,000 files, a
            // lookup in the directory each).
            let mut f = match create() {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    fs::remove_file(&tmp)?;
                    create()?
                }
                created => created?,
            };
            f.set_permissions(Permissions::from_mode(0o644))?;
            f.write_all(bytes)?;
            drop(f);
            fs::rename(&tmp, &path)
        })();
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&path)(e));
        }
        self.unsynced = true;
        Ok(())
    }

    /// Ends a cycle's writes: one fsync of the directory for all its renames and removals.
    ///
    /// The files themselves are not fsynced one by one: they are a view of the state database
    /// and the cluster that every cycle rewrites, and at 50,000 specs a push rewrites them all
    /// (each names the commit), which two fsyncs per file made minutes long. A crash can leave
    /// a file at its previous content or unreadable; the writer then rewrites it (an unreadable
    /// file counts as none), and readers never see a half-written one (temp file + rename).
    ///
    /// The status index ([`super::index`]) is finished first: its time must follow every
    /// file's.
    pub(crate) fn finish_writes(&mut self) {
        if let Some(mut index) = self.index.take() {
            index.finish(|name| self.read_spec(name).ok().flatten());
            self.index = Some(index);
        }
        if std::mem::take(&mut self.unsynced) {
            self.sync_dir();
        }
    }

    /// fsync the directory so a rename or removal survives a crash (best effort).
    fn sync_dir(&self) {
        if let Err(e) = File::open(&self.dir).and_then(|d| d.sync_all()) {
            tracing::debug!(dir = %self.dir.display(), error = %e, "fsync of status dir failed");
        }
    }

    fn remove_stale_temps(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let now = crate::util::clock::system_now();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !(name.starts_with('.') && name.contains(".yaml.tmp-")) {
                continue;
            }
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age >= STALE_TEMP_AGE);
            if old {
                let path = entry.path();
                match fs::remove_file(&path) {
                    Ok(()) => tracing::debug!(file = %path.display(), "removed stale temp file"),
                    Err(e) => {
                        tracing::debug!(file = %path.display(), error = %e, "cannot remove stale temp file")
                    }
                }
            }
        }
    }
}

/// True for a name that can be a status file stem (a lowercase DNS label).
pub(crate) fn valid_name(name: &str) -> bool {
    check_name(name).is_ok()
}

/// The names that have a status file in `dir` (not `_summary` / `_orphans` / temp files),
/// sorted; read without opening the directory for writing.
pub(crate) fn spec_names_of(dir: &Path) -> Result<Vec<String>, StatusError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let file_name = entry.file_name();
        let Some(stem) = file_name.to_str().and_then(|n| n.strip_suffix(".yaml")) else {
            continue;
        };
        if check_name(stem).is_ok() && entry.file_type().is_ok_and(|t| t.is_file()) {
            names.push(stem.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// A status file stem must be a lowercase DNS label of at most 63 characters.
pub(super) fn check_name(name: &str) -> Result<(), StatusError> {
    let b = name.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(inner)
        && b.last().is_some_and(inner)
        && b.iter().all(|c| inner(c) || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(StatusError::InvalidName(clip_to(name, 80)))
    }
}

fn render<T: Serialize>(value: &T, file: &str) -> Result<String, StatusError> {
    let opts = serde_saphyr::ser_options! {
        prefer_block_scalars: false,
    };
    let body =
        serde_saphyr::to_string_with_options(value, opts).map_err(|e| StatusError::Render {
            file: file.to_string(),
            message: e.to_string(),
        })?;
    let mut text = String::with_capacity(HEADER.len() + body.len() + 1);
    text.push_str(HEADER);
    text.push_str(&body);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

#[cfg(test)]
mod write_bench {
    use super::*;
    use crate::status::{ConditionInput, ConditionStatus, Reason, SpecStatus, kinds};
    use std::time::{Duration, Instant, UNIX_EPOCH};

    fn status(name: String, commit: &str) -> SpecStatus {
        SpecStatus {
            kind: Default::default(),
            template: false,
            name,
            site: "lab".into(),
            node: "pve1".into(),
            vm_id: Some(101),
            vm_name: "web-01".into(),
            state: "running".into(),
            ip_addresses: vec!["10.0.0.5".into()],
            tags: vec![],
            labels: Default::default(),
            commit: Some(commit.into()),
            spec_file: Some("vms/web-01.yaml".into()),
            provisioned: true,
            conditions: vec![ConditionInput::new(
                kinds::READY,
                ConditionStatus::True,
                Reason::Available,
                "ready".to_string(),
            )],
            last_task: None,
            backoff: None,
            history: vec![],
            observed_generation: Some("sha256:abc".into()),
            drift: vec![],
        }
    }

    #[test]
    fn a_temp_file_this_process_left_is_written_over() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = StatusDir::open(tmp.path()).unwrap();
        let left = tmp
            .path()
            .join(format!(".web-01.yaml.tmp-{}", std::process::id()));
        std::fs::write(&left, "half a file").unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1_740_830_400);
        assert!(
            dir.write_spec(&status("web-01".into(), "aaaa"), now)
                .unwrap()
        );
        assert!(!left.exists(), "the temp file was renamed into place");
        let written = dir.read_spec("web-01").unwrap().unwrap();
        assert_eq!(written.commit.as_deref(), Some("aaaa"));
    }

    /// A benchmark, not a check: `cargo test --release --lib status::files::write_bench --
    /// --ignored --nocapture`. Writes N status files, then rewrites them all as a push does
    /// (every file names the new commit). Figures in BENCHMARKS.md.
    #[test]
    #[ignore]
    fn rewriting_every_status_file() {
        let n: usize = std::env::var("BENCH_STATUS_FILES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000);
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = StatusDir::open(tmp.path()).unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1_740_830_400);
        for (round, commit) in ["aaaa", "bbbb"].into_iter().enumerate() {
            let t = Instant::now();
            for i in 0..n {
                dir.write_spec(&status(format!("vm-{i:05}"), commit), now)
                    .unwrap();
            }
            dir.finish_writes();
            let s = t.elapsed().as_secs_f64();
            println!(
                "round {round}: {n} files in {s:.2} s ({:.0} files/s)",
                n as f64 / s
            );
        }
    }
}
