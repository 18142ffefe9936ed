//! A refused branch tip ([`Refused`]): what is wrong and what to do, for `refusedCommit` in
//! `_summary.yaml`, the journal and `doctor`.

use std::fmt;

use crate::gate::commit::Refused;

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::UnverifiedSignature { why } => f.write_str(why),
            Refused::NotDescendant { last, tip } => write!(
                f,
                "it does not descend from the last applied commit {}: the branch was rewound (a \
                 force-push to an older commit, or another history); none of it is applied until \
                 an operator accepts it: `proxsync accept commit {tip}`",
                short(last),
            ),
        }
    }
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}
