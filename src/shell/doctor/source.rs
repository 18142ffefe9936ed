//! The source: what the config allows but is unwise (a credential in `[source] url`), and a
//! branch tip that rewinds the last applied commit.

use super::{Check, Level, check};
use crate::config::Config;
use crate::source::ReadSpecs;

/// A warning for each of [`Config::warnings`].
pub(super) fn check_config_warnings(config: &Config) -> Vec<Check> {
    config
        .warnings()
        .into_iter()
        .map(|w| {
            check(
                Level::Warn,
                "source",
                w,
                Some("[source] token_file (docs/config.md), or git's credential helper".into()),
            )
        })
        .collect()
}

/// A warning when the commit read does not descend from the one applied before it (a rewind:
/// applied without `[source] verify`, or accepted by an operator).
pub(crate) fn check_rewind(read: &ReadSpecs) -> Option<Check> {
    let r = read.rewound.as_ref()?;
    let short = |c: &str| c.get(..12).unwrap_or(c).to_string();
    Some(check(
        Level::Warn,
        "source",
        format!(
            "commit {} does not descend from {}, the commit applied before it: a rewind (VMs \
             created since may be deleted, deleted ones re-created); its deletes count as one \
             batch against max_delete_fraction",
            short(&r.batch.commit),
            short(&r.batch.from)
        ),
        Some(
            "if the branch was force-pushed by mistake, push the newer history back; with \
             [source] verify a rewind waits for `proxsync accept commit`"
                .into(),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Rewind;
    use crate::source::chain::RewindBatch;

    #[test]
    fn a_rewind_is_a_warning_naming_both_commits() {
        let mut read = ReadSpecs {
            specs: Default::default(),
            commit: "b".repeat(40),
            refused: None,
            rewound: None,
        };
        assert_eq!(check_rewind(&read), None);
        read.rewound = Some(Rewind {
            batch: RewindBatch {
                commit: "b".repeat(40),
                from: "a".repeat(40),
                from_specs: None,
            },
            at_ms: 0,
            detected: true,
        });
        let c = check_rewind(&read).unwrap();
        assert_eq!(c.level, Level::Warn);
        assert!(
            c.message
                .starts_with("commit bbbbbbbbbbbb does not descend from aaaaaaaaaaaa"),
            "{c}"
        );
    }
}
