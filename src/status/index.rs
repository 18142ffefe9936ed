//! `_index.jsonl`: one line per spec status file with the fields `proxsync status` lists, so
//! that its table reads one file instead of one per spec (at 50,000 specs, reading the files
//! alone took over a second, and parsing them three more).
//!
//! The writer appends a spec's row when it writes the spec's file, and a removal when it
//! removes one; the last line of a name wins. It rebuilds the index in its first cycle (every
//! spec's file is read then anyway, and a crash may have left the old index behind its files)
//! and compacts it when more lines were appended than it held.
//!
//! A reader trusts the index only when it says that no write is under way and it is at least
//! as new as the directory; else it reads the files:
//! - before a cycle's first spec file is written or removed, the writer appends a `writing`
//!   line, and after the cycle's rows a `written` one (a crash between leaves `writing` last);
//!   the first cycle of a process removes the old index before its first write;
//! - every status file is written by a rename and removed by an unlink, both of which change
//!   the directory's modification time, and the writer sets the index's time after each
//!   cycle's writes: files written by anything else later (a daemon of an older release, a
//!   person) make the directory newer. The kernel's clock for the directory is coarse (a few
//!   milliseconds), so this second check holds for writes apart in time, as those are.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{BackoffRecord, Condition, SpecFile};

/// The index's file name (not a `.yaml` name: never taken for a spec's file).
pub(crate) const INDEX_FILE: &str = "_index.jsonl";

/// What one line holds of a spec's file: the fields the status table prints and filters on.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Row<'a> {
    name: &'a str,
    site: &'a str,
    node: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    vm_id: Option<u32>,
    state: &'a str,
    conditions: &'a [Condition],
    #[serde(skip_serializing_if = "Option::is_none")]
    backoff: Option<&'a BackoffRecord>,
}

/// A removal's line starts with this; a row's with `{"name":`.
const REMOVED_PREFIX: &str = "{\"removed\":";
/// The line before a cycle's first spec file is written or removed.
const WRITING: &str = "{\"writing\":true}";
/// The line after a cycle's rows.
const WRITTEN: &str = "{\"written\":true}";

#[derive(Serialize)]
struct Removed<'a> {
    removed: &'a str,
}

/// The writer's side: the index being rebuilt (the process's first cycle) or appended to.
#[derive(Debug)]
pub(super) struct IndexWriter {
    dir: PathBuf,
    state: State,
}

#[derive(Debug)]
enum State {
    /// Writing a new index to a temp file: the names written so far; whether the old index
    /// was removed yet (before the first write).
    Rebuilding {
        out: BufWriter<File>,
        seen: HashSet<String>,
        old_removed: bool,
    },
    /// Appending to the index, which held `held` lines after its rebuild or last compaction;
    /// `writing` once this cycle's `writing` line is out.
    Appending {
        out: BufWriter<File>,
        held: usize,
        appended: usize,
        writing: bool,
    },
    /// A write failed: the index is removed and not written again by this process (readers
    /// read the files).
    Off,
}

/// Fewer appended lines than this never compact the index.
const COMPACT_MIN: usize = 1000;

impl IndexWriter {
    /// Starts rebuilding the index of `dir`.
    pub(super) fn rebuild(dir: &Path) -> IndexWriter {
        let mut w = IndexWriter {
            dir: dir.to_path_buf(),
            state: State::Off,
        };
        match w.create_temp() {
            Ok(out) => {
                w.state = State::Rebuilding {
                    out,
                    seen: HashSet::new(),
                    old_removed: false,
                }
            }
            Err(e) => w.fail(&e),
        }
        w
    }

    fn temp_path(&self) -> PathBuf {
        self.dir.join(format!(".{INDEX_FILE}.tmp"))
    }

    /// A new temp file (one left behind is removed first; never a file a link points to).
    fn create_temp(&self) -> io::Result<BufWriter<File>> {
        match fs::remove_file(self.temp_path()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(self.temp_path())?;
        f.set_permissions(Permissions::from_mode(0o644))?;
        Ok(BufWriter::new(f))
    }

    /// A spec's file is about to be written or removed: readers stop trusting the index until
    /// the cycle's rows are in it.
    pub(super) fn will_write(&mut self) {
        let result = match &mut self.state {
            State::Rebuilding { old_removed, .. } if !*old_removed => {
                *old_removed = true;
                match fs::remove_file(self.dir.join(INDEX_FILE)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                }
            }
            State::Appending { out, writing, .. } if !*writing => {
                *writing = true;
                out.write_all(WRITING.as_bytes())
                    .and_then(|()| out.write_all(b"\n"))
                    .and_then(|()| out.flush())
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            self.fail(&e);
        }
    }

    /// The row of a spec's file as it now is (written, or found unchanged while rebuilding).
    pub(super) fn row(&mut self, file: &SpecFile, written: bool) {
        let result = match &mut self.state {
            State::Rebuilding { out, seen, .. } => {
                seen.insert(file.name.clone());
                write_row(out, file)
            }
            State::Appending { out, appended, .. } if written => {
                *appended += 1;
                write_row(out, file)
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            self.fail(&e);
        }
    }

    /// A spec's file was removed.
    pub(super) fn removed(&mut self, name: &str) {
        let result = match &mut self.state {
            State::Rebuilding { out, seen, .. } => {
                seen.remove(name);
                write_line(out, &Removed { removed: name })
            }
            State::Appending { out, appended, .. } => {
                *appended += 1;
                write_line(out, &Removed { removed: name })
            }
            State::Off => Ok(()),
        };
        if let Err(e) = result {
            self.fail(&e);
        }
    }

    /// Ends a cycle's writes to the directory: a rebuilt index takes the rows of the files the
    /// cycle did not visit and is put in place; an index appended to more than it held is
    /// compacted; either way its time is set to now, after every file of the cycle.
    pub(super) fn finish(&mut self, read_row: impl Fn(&str) -> Option<SpecFile>) {
        if let Err(e) = self.try_finish(read_row) {
            self.fail(&e);
        }
    }

    fn try_finish(&mut self, read_row: impl Fn(&str) -> Option<SpecFile>) -> io::Result<()> {
        let state = std::mem::replace(&mut self.state, State::Off);
        let held = match state {
            State::Off => return Ok(()),
            State::Rebuilding { mut out, seen, .. } => {
                let mut held = seen.len();
                for name in super::spec_names_of(&self.dir).map_err(io::Error::other)? {
                    if !seen.contains(&name)
                        && let Some(mut f) = read_row(&name)
                    {
                        // Listed under its file's name, as `status` lists a file naming another.
                        f.name = name;
                        write_row(&mut out, &f)?;
                        held += 1;
                    }
                }
                self.put_in_place(out)?;
                held
            }
            State::Appending {
                mut out,
                held,
                appended,
                writing,
            } => {
                if writing {
                    out.write_all(WRITTEN.as_bytes())?;
                    out.write_all(b"\n")?;
                }
                out.flush()?;
                if appended > held.max(COMPACT_MIN) {
                    drop(out);
                    self.compact()?
                } else {
                    self.touch()?;
                    self.state = State::Appending {
                        out,
                        held,
                        appended,
                        writing: false,
                    };
                    return Ok(());
                }
            }
        };
        self.state = State::Appending {
            out: BufWriter::new(self.open_append()?),
            held,
            appended: 0,
            writing: false,
        };
        Ok(())
    }

    /// Writes the index again with only each name's last line; returns how many it holds.
    fn compact(&mut self) -> io::Result<usize> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.dir.join(INDEX_FILE))?;
        let mut last: HashMap<String, Option<String>> = HashMap::new();
        for line in BufReader::new(file).lines() {
            let line = line?;
            if line == WRITING || line == WRITTEN {
                continue;
            }
            match line_name(&line) {
                Some((name, false)) => last.insert(name, Some(line)),
                Some((name, true)) => last.insert(name, None),
                None => return Err(io::Error::other("a line of the index is damaged")),
            };
        }
        let mut out = self.create_temp()?;
        let mut held = 0;
        for line in last.into_values().flatten() {
            out.write_all(line.as_bytes())?;
            out.write_all(b"\n")?;
            held += 1;
        }
        self.put_in_place(out)?;
        Ok(held)
    }

    fn put_in_place(&self, out: BufWriter<File>) -> io::Result<()> {
        let f = out.into_inner().map_err(io::IntoInnerError::into_error)?;
        drop(f);
        fs::rename(self.temp_path(), self.dir.join(INDEX_FILE))?;
        self.touch()
    }

    /// The index, to append to: never through a symbolic link.
    fn open_append(&self) -> io::Result<File> {
        OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.dir.join(INDEX_FILE))
    }

    /// Sets the index's time to now: at least the directory's, whose time the kernel takes
    /// from a coarser clock.
    fn touch(&self) -> io::Result<()> {
        self.open_append()?
            .set_modified(crate::util::clock::system_now())
    }

    /// Removes the index so that no reader trusts it, and writes no more of it.
    fn fail(&mut self, e: &io::Error) {
        tracing::warn!(
            dir = %self.dir.display(),
            error = %e,
            "cannot write the status index; `proxsync status` reads every file instead"
        );
        self.state = State::Off;
        let _ = fs::remove_file(self.temp_path());
        let _ = fs::remove_file(self.dir.join(INDEX_FILE));
    }
}

fn write_row(out: &mut impl Write, f: &SpecFile) -> io::Result<()> {
    write_line(
        out,
        &Row {
            name: &f.name,
            site: &f.site,
            node: &f.node,
            vm_id: f.vm_id,
            state: &f.state,
            conditions: &f.conditions,
            backoff: f.backoff.as_ref(),
        },
    )
}

fn write_line(out: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n")
}

/// The name a line is of, and whether it is a removal; `None` for a damaged line.
fn line_name(line: &str) -> Option<(String, bool)> {
    #[derive(serde::Deserialize)]
    struct Named {
        name: String,
    }
    #[derive(serde::Deserialize)]
    struct Gone {
        removed: String,
    }
    if line.starts_with(REMOVED_PREFIX) {
        Some((serde_json::from_str::<Gone>(line).ok()?.removed, true))
    } else {
        Some((serde_json::from_str::<Named>(line).ok()?.name, false))
    }
}

/// Index files larger than this are not read (a row is well under 2 KiB).
const MAX_INDEX_BYTES: u64 = 512 * 1024 * 1024;

/// The rows of `dir`'s index, by name, when the index can be trusted (see the module's
/// documentation); `None` to read the files instead. `name_of` gives a parsed row's name.
pub(crate) fn read_rows<T: DeserializeOwned>(
    dir: &Path,
    name_of: impl Fn(&T) -> &str,
) -> Option<BTreeMap<String, T>> {
    let path = dir.join(INDEX_FILE);
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .ok()?;
    let meta = file.metadata().ok()?;
    let dir_time = fs::metadata(dir).and_then(|m| m.modified()).ok()?;
    if !meta.is_file() || meta.len() > MAX_INDEX_BYTES || meta.modified().ok()? < dir_time {
        return None;
    }
    // Line by line: at 50,000 specs the index is 40 MiB.
    let mut rows = BTreeMap::new();
    let mut writing = false;
    for line in BufReader::new(file.take(MAX_INDEX_BYTES)).lines() {
        let line = line.ok()?;
        let line = line.as_str();
        if line == WRITING || line == WRITTEN {
            writing = line == WRITING;
        } else if line.starts_with(REMOVED_PREFIX) {
            rows.remove(&line_name(line)?.0);
        } else {
            let row: T = serde_json::from_str(line).ok()?;
            let name = name_of(&row);
            if !super::valid_name(name) {
                return None;
            }
            rows.insert(name.to_string(), row);
        }
    }
    (!writing).then_some(rows)
}

/// Whether the index of `dir` would be trusted now (for tests).
#[cfg(test)]
pub(crate) fn is_current(dir: &Path) -> bool {
    let newer = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!(
        (newer(&dir.join(INDEX_FILE)), newer(dir)),
        (Some(i), Some(d)) if i >= d
    )
}
