//! The commit a spec's status file names: the commit at which the spec's current version was
//! first applied, not the commit of the last cycle. A push that changes one spec of 50,000
//! then rewrites one status file, not 50,000; `_summary.yaml` names the last cycle's commit.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{SpecFile, clip, kinds};
use crate::plan::fnv_from;

/// What a spec's commit follows: when it changes, the spec's status names the cycle's commit.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Version<'a> {
    /// A valid spec: its spec hash (the `observedGeneration` once applied).
    Valid(&'a str),
    /// An invalid spec: the message of its `Ready` condition, which lists its errors.
    Invalid(&'a str),
}

impl Version<'_> {
    /// A fingerprint, kept per spec (the two kinds never compare equal to each other).
    fn fingerprint(self) -> u64 {
        let (kind, text) = match self {
            Version::Valid(hash) => (0u8, hash),
            Version::Invalid(message) => (1u8, message),
        };
        fnv_from(crate::plan::fnv([kind]), text.bytes())
    }

    /// Whether a status file written before this process started describes this version: a
    /// valid spec's file observed its current hash, an invalid spec's file shows the same
    /// errors.
    fn described_by(self, file: &SpecFile) -> bool {
        match self {
            Version::Valid(hash) => file.observed_generation.as_deref() == Some(hash),
            Version::Invalid(message) => file
                .condition(kinds::READY)
                .is_some_and(|c| c.message == clip(message)),
        }
    }
}

/// Each spec's version and the commit it was first applied at, by spec name.
#[derive(Debug, Default)]
pub(crate) struct SpecCommits {
    by_name: HashMap<compact_str::CompactString, (u64, Arc<str>)>,
    /// The commits `by_name` names, each held once: a fleet names a few commits, and 50,000
    /// copies of one 40-hex id were 3 MiB.
    interned: HashSet<Arc<str>>,
}

/// Past this many interned commits, those no spec names any more are dropped.
const INTERNED_MAX: usize = 64;

impl SpecCommits {
    /// The commit spec `name` at `version` names, this cycle's commit being `commit`. The same
    /// version keeps the commit it was first seen at; a new version takes `commit`. A spec not
    /// seen since the start takes the commit of its status file (`previous`, read only then)
    /// when that file describes the same version, else `commit`.
    pub(crate) fn commit_of(
        &mut self,
        name: &str,
        version: Version<'_>,
        commit: &str,
        previous: impl FnOnce() -> Option<SpecFile>,
    ) -> String {
        let fingerprint = version.fingerprint();
        if let Some((seen, at)) = self.by_name.get_mut(name) {
            if *seen != fingerprint {
                *seen = fingerprint;
                *at = intern(&mut self.interned, commit);
            }
            return at.to_string();
        }
        let file_commit = previous()
            .filter(|file| version.described_by(file))
            .and_then(|file| file.commit);
        let at = intern(&mut self.interned, file_commit.as_deref().unwrap_or(commit));
        let out = at.to_string();
        self.by_name.insert(name.into(), (fingerprint, at));
        out
    }

    /// Forgets the specs no longer in the source: once more are remembered than `count`
    /// (the number of specs this cycle), all but `names` (read only then, so a cycle that
    /// removed nothing walks nothing).
    pub(crate) fn forget_others<'a>(
        &mut self,
        count: usize,
        names: impl IntoIterator<Item = &'a str>,
    ) {
        if self.by_name.len() > count {
            let keep: HashSet<&str> = names.into_iter().collect();
            self.by_name.retain(|name, _| keep.contains(name.as_str()));
        }
    }
}

/// The one `Arc` of `commit` in `interned`, made on its first use.
fn intern(interned: &mut HashSet<Arc<str>>, commit: &str) -> Arc<str> {
    if let Some(at) = interned.get(commit) {
        return at.clone();
    }
    if interned.len() >= INTERNED_MAX {
        interned.retain(|at| Arc::strong_count(at) > 1);
    }
    let at: Arc<str> = Arc::from(commit);
    interned.insert(at.clone());
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{Condition, ConditionStatus};

    fn file(commit: &str, generation: Option<&str>, ready: &str) -> SpecFile {
        SpecFile {
            name: "web-01".into(),
            commit: Some(commit.into()),
            observed_generation: generation.map(str::to_string),
            conditions: vec![Condition {
                kind: kinds::READY.into(),
                status: ConditionStatus::False,
                reason: "InvalidSpec".into(),
                message: ready.into(),
                last_transition_time: String::new(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_spec_keeps_the_commit_of_its_version() {
        let mut c = SpecCommits::default();
        let none = || None;
        assert_eq!(c.commit_of("a", Version::Valid("h1"), "c1", none), "c1");
        assert_eq!(c.commit_of("b", Version::Valid("h1"), "c1", none), "c1");
        // c2 changes a only.
        assert_eq!(c.commit_of("a", Version::Valid("h2"), "c2", none), "c2");
        assert_eq!(c.commit_of("b", Version::Valid("h1"), "c2", none), "c1");
        // c3 changes nothing: a keeps c2.
        assert_eq!(c.commit_of("a", Version::Valid("h2"), "c3", none), "c2");
        // b becomes invalid at c4, and stays so with the same errors at c5.
        let broken = Version::Invalid("unknown field cpus");
        assert_eq!(c.commit_of("b", broken, "c4", none), "c4");
        assert_eq!(c.commit_of("b", broken, "c5", none), "c4");
        let other = Version::Invalid("unknown field mem");
        assert_eq!(c.commit_of("b", other, "c6", none), "c6");
    }

    #[test]
    fn after_a_start_the_file_names_the_commit_when_it_describes_the_version() {
        let mut c = SpecCommits::default();
        let f = || Some(file("c1", Some("h1"), ""));
        assert_eq!(c.commit_of("a", Version::Valid("h1"), "c9", f), "c1");
        // Read once: later cycles do not look at the file.
        let unread = || -> Option<SpecFile> { panic!("read again") };
        assert_eq!(c.commit_of("a", Version::Valid("h1"), "c9", unread), "c1");
        // Not applied yet (another generation), or never: this cycle's commit.
        assert_eq!(c.commit_of("b", Version::Valid("h2"), "c9", f), "c9");
        let g = || Some(file("c1", None, ""));
        assert_eq!(c.commit_of("d", Version::Valid("h1"), "c9", g), "c9");
        // An invalid spec's file with the same errors (as clipped in the file) keeps its commit.
        let long = "x".repeat(3000);
        let h = || Some(file("c1", None, &clip(&long)));
        assert_eq!(c.commit_of("e", Version::Invalid(&long), "c9", h), "c1");
        let h = || Some(file("c1", None, "another error"));
        assert_eq!(c.commit_of("f", Version::Invalid(&long), "c9", h), "c9");
    }

    #[test]
    fn specs_at_one_commit_share_its_string() {
        let mut c = SpecCommits::default();
        let f = || Some(file("c1", Some("h1"), ""));
        c.commit_of("a", Version::Valid("h1"), "c9", f);
        c.commit_of("b", Version::Valid("h1"), "c9", f);
        c.commit_of("c", Version::Valid("h2"), "c9", || None);
        c.commit_of("d", Version::Valid("h2"), "c9", || None);
        let at = |n: &str| c.by_name[n].1.clone();
        assert!(
            Arc::ptr_eq(&at("a"), &at("b")),
            "both name c1 from their files"
        );
        assert!(Arc::ptr_eq(&at("c"), &at("d")), "both name this cycle's c9");
        // Commits no spec names any more are dropped once there are many.
        for i in 0..2 * INTERNED_MAX {
            c.commit_of(
                "a",
                Version::Valid(&format!("h{i}")),
                &format!("x{i}"),
                || None,
            );
        }
        assert!(c.interned.len() <= INTERNED_MAX, "{}", c.interned.len());
        assert!(c.interned.contains("c9"), "still named by c and d");
    }

    #[test]
    fn removed_specs_are_forgotten() {
        let mut c = SpecCommits::default();
        c.commit_of("a", Version::Valid("h1"), "c1", || None);
        c.commit_of("b", Version::Valid("h1"), "c1", || None);
        c.forget_others(2, []);
        assert_eq!(
            c.by_name.len(),
            2,
            "as many as the specs: nothing to forget"
        );
        c.forget_others(1, ["a"]);
        assert_eq!(c.by_name.len(), 1);
        // b comes back: not remembered, so its file decides (here none: this commit).
        assert_eq!(c.commit_of("b", Version::Valid("h1"), "c2", || None), "c2");
    }
}
