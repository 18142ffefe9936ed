//! The commit chain: whether the branch tip may be applied.
//!
//! A signature proves who wrote a commit, not that it is current: force-pushing the branch
//! back to an older signed commit would delete the VMs created since and re-create the ones
//! deleted since. So the tip is applied only when
//! - its signature verified (`[source] verify`; without it there is no signature to check),
//! - and it is the last applied commit or descends from it (a fast-forward, a merge of it),
//!   or nothing was applied yet, or an operator accepted it over the last applied commit
//!   (`proxsync accept commit`).
//!
//! Without `[source] verify`, a tip that does not descend from the last applied commit is a
//! rewind: applied, but reported, and its deletes are judged by the valves as one batch (see
//! `plan`). `source` reads git and the state directory and hands the evidence in here.

use std::fmt;

/// What the signature check said of the tip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature<'a> {
    /// `[source] verify` is off.
    Off,
    /// It verified, signed by this principal or key.
    Verified(&'a str),
    /// It did not verify, and why.
    Refused(&'a str),
}

/// An operator's acceptance of a commit that does not descend from the last applied one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acceptance {
    /// The commit accepted.
    pub commit: String,
    /// The last applied commit when it was accepted: the acceptance holds over that one only
    /// (once anything else was applied, a rewind to the same commit needs a new one).
    pub over: String,
}

/// What is known of the branch tip, from git and the state directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evidence<'a> {
    /// The branch tip's commit id.
    pub tip: &'a str,
    /// What the signature check said of the tip.
    pub signature: Signature<'a>,
    /// The last commit applied from this source and branch, if one is recorded.
    pub last_applied: Option<&'a str>,
    /// The tip is `last_applied` or has it among its ancestors, by the commits' own parent
    /// lines (no grafts, no `shallow` file, no commit-graph).
    pub descends: bool,
    /// The operator's acceptance on record (`proxsync accept commit`), if any.
    pub acceptance: Option<&'a Acceptance>,
}

/// Why the tip may be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permit {
    /// Nothing was applied before (a first start, or a lost state directory).
    First,
    /// It is the last applied commit.
    Same,
    /// It descends from the last applied commit.
    Descends,
    /// It does not descend from `from`, the last applied commit, and `[source] verify` is
    /// off: applied, and reported as a rewind.
    Rewind {
        /// The last applied commit.
        from: String,
    },
    /// It does not descend from `from`, and an operator accepted it over that commit.
    Accepted {
        /// The last applied commit, the one the acceptance holds over.
        from: String,
    },
}

impl Permit {
    /// The last applied commit this tip rewinds from, when it does not descend from it.
    pub fn rewound_from(&self) -> Option<&str> {
        match self {
            Permit::Rewind { from } | Permit::Accepted { from } => Some(from),
            Permit::First | Permit::Same | Permit::Descends => None,
        }
    }
}

/// Why a tip is not applied: the `reason` of `refusedCommit` in `_summary.yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalKind {
    /// Its signature did not verify (unsigned, unknown key, bad or expired signature).
    UnverifiedSignature,
    /// It does not descend from the last applied commit, and no operator accepted it.
    NotDescendant,
}

impl RefusalKind {
    /// The name written to `_summary.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalKind::UnverifiedSignature => "UnverifiedSignature",
            RefusalKind::NotDescendant => "NotDescendant",
        }
    }
}

impl fmt::Display for RefusalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused tip: why, with what its words need (`crate::words` says them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Its signature did not verify: the verifier's reason.
    UnverifiedSignature {
        /// What the verifier said (unsigned, unknown key, bad or expired signature).
        why: String,
    },
    /// It does not descend from the last applied commit `last`, and no operator accepted `tip`.
    NotDescendant {
        /// The last applied commit.
        last: String,
        /// The refused tip.
        tip: String,
    },
}

impl Refused {
    /// Why, by the name `_summary.yaml` shows.
    pub fn kind(&self) -> RefusalKind {
        match self {
            Refused::UnverifiedSignature { .. } => RefusalKind::UnverifiedSignature,
            Refused::NotDescendant { .. } => RefusalKind::NotDescendant,
        }
    }
}

/// Whether the tip may be applied (see the module's doc).
pub fn judge(e: &Evidence<'_>) -> Result<Permit, Refused> {
    if let Signature::Refused(why) = e.signature {
        return Err(Refused::UnverifiedSignature {
            why: why.to_string(),
        });
    }
    let Some(last) = e.last_applied else {
        return Ok(Permit::First);
    };
    if e.tip == last {
        return Ok(Permit::Same);
    }
    if e.descends {
        return Ok(Permit::Descends);
    }
    let from = last.to_string();
    if e.signature == Signature::Off {
        return Ok(Permit::Rewind { from });
    }
    if e.acceptance
        .is_some_and(|a| a.commit == e.tip && a.over == last)
    {
        return Ok(Permit::Accepted { from });
    }
    Err(Refused::NotDescendant {
        last: last.to_string(),
        tip: e.tip.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccccccccccccccccccccccccccc";

    fn evidence(signature: Signature<'static>, last: Option<&'static str>) -> Evidence<'static> {
        Evidence {
            tip: B,
            signature,
            last_applied: last,
            descends: false,
            acceptance: None,
        }
    }

    #[test]
    fn an_unverified_signature_is_refused_whatever_the_chain() {
        for last in [None, Some(A), Some(B)] {
            let e = Evidence {
                descends: true,
                ..evidence(Signature::Refused("the commit is not signed"), last)
            };
            assert_eq!(
                judge(&e),
                Err(Refused::UnverifiedSignature {
                    why: "the commit is not signed".into()
                })
            );
        }
    }

    #[test]
    fn the_first_the_same_and_a_descendant_are_applied() {
        for signature in [Signature::Off, Signature::Verified("ci@example.org")] {
            assert_eq!(judge(&evidence(signature, None)), Ok(Permit::First));
            assert_eq!(judge(&evidence(signature, Some(B))), Ok(Permit::Same));
            let e = Evidence {
                descends: true,
                ..evidence(signature, Some(A))
            };
            assert_eq!(judge(&e), Ok(Permit::Descends));
            assert_eq!(judge(&e).unwrap().rewound_from(), None);
        }
    }

    #[test]
    fn without_verify_a_rewind_is_applied_and_named() {
        let permit = judge(&evidence(Signature::Off, Some(A))).unwrap();
        assert_eq!(permit, Permit::Rewind { from: A.into() });
        assert_eq!(permit.rewound_from(), Some(A));
    }

    #[test]
    fn with_verify_a_rewind_waits_for_an_acceptance_over_the_last_applied_commit() {
        let signed = Signature::Verified("ci@example.org");
        let refused = judge(&evidence(signed, Some(A))).unwrap_err();
        assert_eq!(refused.kind(), RefusalKind::NotDescendant);
        assert_eq!(
            refused.to_string(),
            format!(
                "it does not descend from the last applied commit aaaaaaaaaaaa: the branch was \
                 rewound (a force-push to an older commit, or another history); none of it is \
                 applied until an operator accepts it: `proxsync accept commit {B}`"
            )
        );
        let accept = |commit: &str, over: &str| Acceptance {
            commit: commit.into(),
            over: over.into(),
        };
        let ok = accept(B, A);
        let e = Evidence {
            acceptance: Some(&ok),
            ..evidence(signed, Some(A))
        };
        assert_eq!(judge(&e), Ok(Permit::Accepted { from: A.into() }));
        // Another commit accepted, or this one accepted over another last applied commit
        // (it was applied since, and the branch rewound to it again): refused.
        for other in [accept(C, A), accept(B, C)] {
            let e = Evidence {
                acceptance: Some(&other),
                ..evidence(signed, Some(A))
            };
            assert_eq!(judge(&e).unwrap_err().kind(), RefusalKind::NotDescendant);
        }
    }

    #[test]
    fn kinds_are_written_by_name() {
        assert_eq!(RefusalKind::NotDescendant.to_string(), "NotDescendant");
        assert_eq!(
            RefusalKind::UnverifiedSignature.as_str(),
            "UnverifiedSignature"
        );
    }
}
