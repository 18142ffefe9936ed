//! The status directory as the engine writes it each cycle: a spec's file only when its status
//! changed (of each spec's last status only a hash and what notifications read are kept),
//! the commit each file names (the one its spec's version was first applied at), and the files
//! of specs gone with their VM removed when the set of names changed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::SystemTime;

use super::{
    LastStatus, OrphanEntry, SpecCommits, SpecFile, SpecStatus, StatusDir, StatusError,
    SummaryStatus, Version,
};
use crate::store::SpecRecord;

/// The status directory and what this process last wrote to it.
pub(crate) struct Writer {
    dir: StatusDir,
    /// What is kept of the status each spec was last given, by name.
    written: HashMap<compact_str::CompactString, LastStatus>,
    /// A hash of the names the last cycle wrote: stale files are looked for only when it
    /// changes.
    written_names: Option<u64>,
    /// The commit each spec's status names.
    commits: SpecCommits,
    /// The status file [`Self::commit_of`] last read back (after a start), by name: the
    /// spec's status is written next, which reads the same file.
    read_back: Option<(String, Option<SpecFile>)>,
}

impl Writer {
    pub(crate) fn new(dir: StatusDir) -> Writer {
        Writer {
            dir,
            written: HashMap::new(),
            written_names: None,
            commits: SpecCommits::default(),
            read_back: None,
        }
    }

    /// What is kept of the status each spec was last given, by name: the specs of the commit,
    /// and removed specs whose VM is not gone yet (for notifications).
    pub(crate) fn statuses(&self) -> &HashMap<compact_str::CompactString, LastStatus> {
        &self.written
    }

    /// The commit spec `name` at `version` names, this cycle's commit being `commit` (its
    /// status file read once after a start, for the commit it names).
    pub(crate) fn commit_of(&mut self, name: &str, version: Version<'_>, commit: &str) -> String {
        let dir = &self.dir;
        let read_back = &mut self.read_back;
        self.commits.commit_of(name, version, commit, || {
            let file = dir.read_spec(name).ok().flatten();
            *read_back = Some((name.to_string(), file.clone()));
            file
        })
    }

    /// Forgets the commits of specs no longer in the source (see [`SpecCommits`]).
    pub(crate) fn forget_others<'a>(
        &mut self,
        count: usize,
        names: impl IntoIterator<Item = &'a str>,
    ) {
        self.commits.forget_others(count, names);
    }

    /// Writes a spec's status file unless the status is the one it was last given.
    pub(crate) fn write_spec_if_changed(
        &mut self,
        st: SpecStatus,
        now: SystemTime,
    ) -> Result<(), StatusError> {
        let hash = st.content_hash();
        let read_back = (self.read_back.take())
            .filter(|(name, _)| *name == st.name)
            .map(|(_, file)| file);
        if self.written.get(st.name.as_str()).map(|w| w.hash) != Some(hash) {
            self.dir.write_spec_read(&st, now, read_back)?;
            self.written
                .insert(st.name.as_str().into(), LastStatus::of(&st, hash));
        }
        Ok(())
    }

    /// Removes the status files of specs that are gone with their VM, and of the old names of
    /// renamed specs (`renamed`), when the names hash (`names`) differs from the last cycle's.
    /// `current`: the names of the source's specs, valid and invalid.
    pub(crate) fn remove_stale<'a>(
        &mut self,
        current: impl IntoIterator<Item = &'a str>,
        records: &BTreeMap<String, SpecRecord>,
        renamed: &BTreeMap<String, String>,
        names: u64,
    ) -> Result<(), StatusError> {
        if self.written_names != Some(names) {
            let written: BTreeSet<&str> = current.into_iter().collect();
            for name in self.dir.spec_names()? {
                let kept = records.contains_key(&name) && !renamed.contains_key(&name);
                if !written.contains(name.as_str()) && !kept {
                    self.dir.remove_spec(&name)?;
                    self.written.remove(name.as_str());
                }
            }
            self.written_names = Some(names);
        }
        Ok(())
    }

    pub(crate) fn write_orphans(
        &mut self,
        orphans: &[OrphanEntry],
        now: SystemTime,
    ) -> Result<(), StatusError> {
        self.dir.write_orphans(orphans, now).map(|_| ())
    }

    pub(crate) fn write_summary(&mut self, summary: &SummaryStatus) -> Result<(), StatusError> {
        self.dir.write_summary(summary).map(|_| ())
    }
}
