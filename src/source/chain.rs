//! The commit chain's records in the state directory: the last commit applied from the
//! source (`applied-commit`, with the commit it rewound from while a rewind is applied), and
//! the commit an operator accepted over it (`accepted-commit`, `proxsync accept commit`).
//! Small line-based files, each naming its source and branch (a config that points elsewhere
//! starts afresh), written atomically with mode 0600. What they mean is decided in
//! [`crate::gate::commit`]; the last verified commit is [`crate::source::verify`]'s.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::gate::commit::Acceptance;

/// The file naming the last commit applied.
pub(crate) const APPLIED_FILE: &str = "applied-commit";
/// The file naming the commit an operator accepted.
pub(crate) const ACCEPTED_FILE: &str = "accepted-commit";

/// The last commit applied from a source's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Applied {
    pub commit: String,
    /// The commit applied before it, when it does not descend from that one (a rewind), and
    /// when it was first applied (unix ms). Kept while this commit is the one applied.
    pub rewound: Option<(String, u64)>,
}

/// The last commit applied from `branch` of `location`, if one is recorded for them.
pub(crate) fn applied(state_dir: &Path, location: &str, branch: &str) -> Option<Applied> {
    let fields = read_fields(&state_dir.join(APPLIED_FILE), location, branch)?;
    let commit = commit_id(field(&fields, "commit")?)?;
    let rewound = field(&fields, "rewound-from")
        .and_then(commit_id)
        .map(|from| {
            let at = field(&fields, "rewound-at")
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            (from, at)
        });
    Some(Applied { commit, rewound })
}

/// Records `applied` as the last commit applied from `branch` of `location` (only when it
/// changed).
pub(crate) fn record_applied(
    state_dir: &Path,
    location: &str,
    branch: &str,
    applied_now: &Applied,
) -> Result<(), String> {
    if applied(state_dir, location, branch).as_ref() == Some(applied_now) {
        return Ok(());
    }
    let mut text = format!(
        "# The last commit proxsync applied from this source and branch (a tip that does not\n\
         # descend from it is a rewind). Written by proxsync.\n\
         source {location}\nbranch {branch}\ncommit {}\n",
        applied_now.commit
    );
    if let Some((from, at)) = &applied_now.rewound {
        text.push_str(&format!("rewound-from {from}\nrewound-at {at}\n"));
    }
    write_private(state_dir, APPLIED_FILE, &text)
}

/// The commit an operator accepted for `branch` of `location`, if any.
pub(crate) fn acceptance(state_dir: &Path, location: &str, branch: &str) -> Option<Acceptance> {
    let fields = read_fields(&state_dir.join(ACCEPTED_FILE), location, branch)?;
    Some(Acceptance {
        commit: commit_id(field(&fields, "commit")?)?,
        over: commit_id(field(&fields, "over")?)?,
    })
}

/// Records an operator's acceptance (what, over which commit, when and by whom); returns the
/// file written.
pub(crate) fn record_acceptance(
    state_dir: &Path,
    location: &str,
    branch: &str,
    accepted: &Acceptance,
    at: SystemTime,
    by: &str,
) -> Result<PathBuf, String> {
    let text = format!(
        "# A commit an operator accepted although it does not descend from the last applied\n\
         # commit (`proxsync accept commit`). Written by proxsync.\n\
         source {location}\nbranch {branch}\ncommit {}\nover {}\naccepted-at {}\nby {}\n",
        accepted.commit,
        accepted.over,
        crate::util::time::rfc3339(at),
        by.replace(['\n', '\r'], " ")
    );
    write_private(state_dir, ACCEPTED_FILE, &text)?;
    Ok(state_dir.join(ACCEPTED_FILE))
}

/// The `key value` lines of a record, when it names `location` and `branch`.
fn read_fields(path: &Path, location: &str, branch: &str) -> Option<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path).ok()?;
    let fields: Vec<(String, String)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect();
    (field(&fields, "source")? == location && field(&fields, "branch")? == branch).then_some(fields)
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A full commit id (SHA-1 or SHA-256, hex), or nothing.
fn commit_id(text: &str) -> Option<String> {
    ((text.len() == 40 || text.len() == 64) && text.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| text.to_ascii_lowercase())
}

/// Writes `state_dir/name` atomically: a 0600 temporary file, synced, renamed over it.
fn write_private(state_dir: &Path, name: &str, text: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = state_dir.join(name);
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    crate::util::state_dir::create_state_dir(state_dir).map_err(fail)?;
    let tmp = state_dir.join(format!(".{name}.tmp"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(fail)?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(fail)?;
    std::fs::rename(&tmp, &path).map_err(fail)?;
    std::fs::File::open(state_dir)
        .and_then(|d| d.sync_all())
        .map_err(fail)
}

pub(crate) use crate::model::RewindBatch;

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn the_applied_commit_is_kept_per_source_and_branch_with_its_rewind() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        assert_eq!(applied(&state, "/srv/vms.git", "main"), None);
        let first = Applied {
            commit: A.into(),
            rewound: None,
        };
        record_applied(&state, "/srv/vms.git", "main", &first).unwrap();
        assert_eq!(applied(&state, "/srv/vms.git", "main"), Some(first));
        let rewind = Applied {
            commit: B.into(),
            rewound: Some((A.into(), 1_700_000_000_000)),
        };
        record_applied(&state, "/srv/vms.git", "main", &rewind).unwrap();
        assert_eq!(applied(&state, "/srv/vms.git", "main"), Some(rewind));
        assert_eq!(applied(&state, "/srv/vms.git", "staging"), None);
        assert_eq!(applied(&state, "/srv/other.git", "main"), None);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state.join(APPLIED_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Not an id: nothing is recorded.
        std::fs::write(
            state.join(APPLIED_FILE),
            "source /srv/vms.git\nbranch main\ncommit HEAD~1\n",
        )
        .unwrap();
        assert_eq!(applied(&state, "/srv/vms.git", "main"), None);
    }

    #[test]
    fn an_acceptance_names_what_over_which_commit_when_and_by_whom() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let accepted = Acceptance {
            commit: B.into(),
            over: A.into(),
        };
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_740_830_400);
        let path = record_acceptance(
            state,
            "/srv/vms.git",
            "main",
            &accepted,
            at,
            "alice (uid 1000)",
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(&format!(
                "commit {B}\nover {A}\naccepted-at 2025-03-01T12:00:00Z\nby alice (uid 1000)\n"
            )),
            "{text}"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(acceptance(state, "/srv/vms.git", "main"), Some(accepted));
        assert_eq!(acceptance(state, "/srv/vms.git", "other"), None);
    }
}
