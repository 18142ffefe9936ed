//! A planner's [`Verdict`] in one line, as `proxsync plan` prints it under a spec that gets no
//! action ([`VerdictLine`]): the guest named by its kind, the record's attempts and last
//! error. The status conditions say the same verdicts at length (`words::status`).

use std::fmt;

use crate::guest::GuestKind;
use crate::model::SpecRecord;
use crate::plan::{Verdict, VerdictLine};

impl fmt::Display for VerdictLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let VerdictLine {
            verdict,
            kind,
            rec,
            now_ms,
        } = *self;
        f.write_str(&line(verdict, kind, rec, now_ms))
    }
}

/// [`VerdictLine`]'s words.
// Long because: one arm per verdict, each its words.
fn line(verdict: &Verdict, kind: GuestKind, rec: Option<&SpecRecord>, now_ms: u64) -> String {
    let noun = kind.noun();
    match verdict {
        Verdict::UpToDate { vmid } => format!("{} matches the spec", kind.named(*vmid)),
        Verdict::Acting => "changes planned".into(),
        Verdict::Migrating { from, to, vmid } => format!(
            "{} is moving from node {from} to node {to}; other changes wait until it is there",
            kind.named(*vmid)
        ),
        Verdict::RolledBack { vmid, snapshot, .. } => format!(
            "the change was rolled back: {} was put back to snapshot {snapshot}; held until the \
             spec changes or reconcile --retry",
            kind.named(*vmid)
        ),
        Verdict::BackingOff { until_ms } => {
            let mut text = format!(
                "backing off until {}",
                crate::util::time::clock_time(*until_ms, now_ms)
            );
            if let Some(rec) = rec.filter(|r| r.attempts > 0) {
                text.push_str(&format!(", {} attempt", ordinal(rec.attempts)));
            }
            if let Some(e) = rec.and_then(|r| r.last_error.as_ref()) {
                text.push_str(&format!(": {}: {}", e.category, e.message));
            }
            text
        }
        Verdict::NodeUnhealthy { node, quorate } => {
            if *quorate {
                format!("node {node} is offline; waiting for it")
            } else {
                "the cluster has lost quorum; waiting for it".into()
            }
        }
        Verdict::SiteUnreachable { error } => format!("its site could not be read: {error}"),
        Verdict::ListingIncomplete { why } => format!("no create: {why}"),
        Verdict::SiteIdentityChanged { message } => message.clone(),
        Verdict::Unknown { vmid } => format!(
            "{} is listed with an unknown state (its node may be offline); not judged",
            kind.named(*vmid)
        ),
        Verdict::BeingMade { vmid } => format!(
            "{} is being made by a create or clone of this install's token that no record \
             names; nothing is created until its task ends and its marker can be read",
            kind.named(*vmid)
        ),
        Verdict::Invalid => {
            format!("the spec is invalid (see its errors); its {noun} is left as it is")
        }
        Verdict::RenameSuspected { from, vmid } => format!(
            "looks like a rename of {from} ({}): add the annotation \
             proxsync.io/renamed-from: {from} to confirm it; nothing is created or deleted \
             until then",
            kind.named(*vmid)
        ),
        Verdict::SiteMoved { from, vmid } => format!(
            "moved to another site, and its {} is still on site {from}: delete it there \
             to have it created here, or move the spec back",
            kind.named(*vmid)
        ),
        Verdict::KindChanged { vmid, found } => format!(
            "its guest {vmid} is a {}, and the spec asks for the other kind: delete {vmid} to \
             have it made anew, or change kind back; nothing is created or deleted until then",
            found.noun()
        ),
        Verdict::RenameUnproven { from, vmid, why } => format!(
            "the rename from {from} is held: the record names {}, and its marker does \
             not show it is {from}'s ({why}); nothing is created or deleted until a person \
             decides",
            kind.named(*vmid)
        ),
        Verdict::Unmarked { vmid } => format!(
            "{} has this install's tag and the spec's {noun} name but no marker line: if it is \
             this spec's {noun}, proxsync adopt NAME --vmid {vmid}; else remove its tag",
            kind.named(*vmid)
        ),
        Verdict::UnverifiedClaim { vmid } => format!(
            "{} claims this spec with a marker that does not verify: if it is this \
             spec's {noun}, proxsync adopt NAME --vmid {vmid}; else remove its marker",
            kind.named(*vmid)
        ),
        Verdict::HeldByInstall { install, vmid } => format!(
            "{} is still held by install {install} (its proxsync.{install} tag); it is \
             taken over once that install has handed it over",
            kind.named(*vmid)
        ),
        Verdict::AdoptRefused { vmid, why } => {
            format!("adopting {} is refused: {why}", kind.named(*vmid))
        }
        Verdict::Observed {
            renamed_from: Some(from),
            vmid,
            ..
        } => format!(
            "held: spec {from}, which this spec is renamed from, was observe-only when last \
             seen, so its {noun}{} is not re-labelled and nothing is done for this spec; put \
             spec {from} back with managementPolicy: Full for one cycle to let the rename \
             proceed",
            vmid.map(|id| format!(" {id}")).unwrap_or_default()
        ),
        Verdict::Observed { vmid: None, .. } => {
            format!("observe-only: no {noun} of the spec found; nothing is created")
        }
        Verdict::Observed {
            vmid: Some(vmid),
            drift,
            ..
        } if drift.is_empty() => format!("observe-only: {} matches the spec", kind.named(*vmid)),
        Verdict::Observed {
            vmid: Some(vmid),
            drift,
            ..
        } => {
            let fields: Vec<String> = drift.iter().map(ToString::to_string).collect();
            format!(
                "observe-only: {} differs (not applied): {}",
                kind.named(*vmid),
                fields.join("; ")
            )
        }
        Verdict::AdoptionsHeld { count, max } => format!(
            "held: {count} adoptions by consent this cycle, more than max_adopt_per_cycle = {max}"
        ),
        Verdict::RollingOut {
            set: Some(set),
            stopped_by: Some(member),
            ..
        } => format!("waits: set {set}'s roll stopped at {member}, which is not healthy"),
        Verdict::RollingOut {
            set: Some(set),
            max_unavailable,
            ..
        } => format!(
            "waits its turn: set {set} takes down at most {max_unavailable} member(s) at a time"
        ),
        Verdict::RollingOut { set: None, .. } => {
            "waits its turn: the specs of their own of its site are rebuilt one at a time"
                .to_string()
        }
        Verdict::WaitingForImage { image, why } => {
            format!("waits for image {image} before its {noun} is created: {why}")
        }
        Verdict::WaitingForDependencies {
            on,
            elsewhere,
            not_healthy,
        } => format!(
            "waits for {on} to be Ready (dependsOn{}) before its {noun} is created, started or \
             rebooted{}",
            match not_healthy {
                true => ": it has not passed its health checks",
                false => "",
            },
            match elsewhere {
                true => "; it is another install's spec, never seen Ready here",
                false => "",
            }
        ),
        Verdict::Suspended {
            vmid,
            drift,
            by,
            renamed_from,
        } => suspended_words(kind, *vmid, drift, by, renamed_from.as_deref()),
    }
}

/// A suspended spec's verdict in words: who suspended it (through `renamed_from`, the spec
/// it is renamed from, when that one's suspension holds it), and how its guest (a `kind`)
/// compares.
fn suspended_words(
    kind: GuestKind,
    vmid: Option<u32>,
    drift: &[crate::plan::FieldDrift],
    by: &crate::model::Suspension,
    renamed_from: Option<&str>,
) -> String {
    let vm = match (vmid, drift.is_empty()) {
        (None, _) => format!("no {} of the spec found; nothing is created", kind.noun()),
        (Some(id), true) => format!("{} matches the spec", kind.named(id)),
        (Some(id), false) => {
            let fields: Vec<String> = drift.iter().map(ToString::to_string).collect();
            format!(
                "{} differs (not applied): {}",
                kind.named(id),
                fields.join("; ")
            )
        }
    };
    let words = by.to_string();
    match renamed_from {
        Some(from) => format!(
            "suspended through spec {from}, which this spec is renamed from ({words}): the \
             rename waits for `proxsync resume {from}`; {vm}"
        ),
        None => format!("suspended ({words}): {vm}"),
    }
}

/// 1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st.
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backoff_is_said_in_words_with_attempt_and_error() {
        // 2026-11-25 14:20:23 UTC.
        let until = 1_795_616_423_000;
        let rec = SpecRecord {
            attempts: 3,
            last_error: Some(Box::new(crate::model::ErrorRecord {
                category: crate::category::Category::NetworkError,
                message: "connection reset".into(),
                at_ms: 0,
                inputs: String::new(),
                kind: Default::default(),
            })),
            ..Default::default()
        };
        let text = VerdictLine {
            verdict: &Verdict::BackingOff { until_ms: until },
            kind: GuestKind::Qemu,
            rec: Some(&rec),
            now_ms: until - 300_000,
        }
        .to_string();
        assert_eq!(
            text,
            "backing off until 14:20:23 UTC (in 5m), 3rd attempt: NetworkError: connection reset"
        );
        assert!(!text.contains('{'), "no JSON: {text}");
    }

    #[test]
    fn a_containers_verdicts_name_the_container() {
        let words = |verdict: Verdict, kind| {
            VerdictLine {
                verdict: &verdict,
                kind,
                rec: None,
                now_ms: 0,
            }
            .to_string()
        };
        assert_eq!(
            words(Verdict::UpToDate { vmid: 105 }, GuestKind::Qemu),
            "VM 105 matches the spec"
        );
        assert_eq!(
            words(Verdict::UpToDate { vmid: 105 }, GuestKind::Lxc),
            "container 105 matches the spec"
        );
        let moved = Verdict::SiteMoved {
            from: "lab".into(),
            vmid: 105,
        };
        assert_eq!(
            words(moved, GuestKind::Lxc),
            "moved to another site, and its container 105 is still on site lab: delete it there \
             to have it created here, or move the spec back"
        );
        let claim = words(Verdict::UnverifiedClaim { vmid: 105 }, GuestKind::Lxc);
        assert!(
            claim.starts_with("container 105 claims this spec")
                && claim.contains("if it is this spec's container, proxsync adopt"),
            "{claim}"
        );
        let none = Verdict::Observed {
            vmid: None,
            drift: Vec::new(),
            renamed_from: None,
        };
        assert_eq!(
            words(none, GuestKind::Lxc),
            "observe-only: no container of the spec found; nothing is created"
        );
    }

    #[test]
    fn ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            got,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th"
            ]
        );
    }
}
