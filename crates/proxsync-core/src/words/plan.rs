//! What the planner held back as a whole ([`Refused`]): the safety valves' refusals of a
//! cycle's deletes ([`Valve`]), the adoptions by consent over the limit, the removals of a site
//! whose listing is incomplete, and hands-off actions (`words::hands_off`). `_summary.yaml`,
//! `proxsync plan`, notifications and the journal say them in these words. And the verdicts'
//! reasons the planner decides: a site not read ([`Unreadable`]), a consent to adopt refused
//! ([`AdoptRefusal`]). And what happens to an orphan ([`OrphanDisposition`]).

use std::fmt;

use crate::guest::GuestKind;
use crate::plan::{AdoptRefusal, OrphanDisposition, Refused, Unreadable, Valve};

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::ListingIncomplete {
                removals,
                site,
                why,
            } => write!(f, "{removals} removal(s) on site {site} not done: {why}"),
            Refused::Deletes { valve, hand_overs } => {
                write!(f, "refused to delete or release {valve}")?;
                if *hand_overs > 0 {
                    write!(
                        f,
                        " ({hand_overs} of them hand-overs to another install: specs now outside \
                         [source] selector)"
                    )?;
                }
                Ok(())
            }
            Refused::AdoptionsHeld { count, max } => write!(
                f,
                "{count} VMs would be taken over by consent (proxsync.io/adopt), more than \
                 [reconcile] max_adopt_per_cycle = {max}: none is taken; raise the limit or \
                 commit the imported specs in smaller parts"
            ),
            Refused::HandsOff(held) => held.fmt(f),
        }
    }
}

/// After "refused to delete or release ": how many, and why.
impl fmt::Display for Valve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Valve::SpecSetIncomplete { removing } => write!(
                f,
                "{removing} VM(s): the spec set could not be read completely (see the errors \
                 above); nothing is removed until it can"
            ),
            Valve::DesiredSetEmpty { removing } => write!(
                f,
                "{removing} VM(s): the desired set is empty (an empty commit or a wrong `dir` or \
                 `selector` in [source]?); restore the specs, or delete the VMs by hand"
            ),
            Valve::TooMany {
                removing,
                managed,
                max,
            } => write!(
                f,
                "{removing} of {managed} managed VM(s): more than max_delete_fraction = {} in \
                 one commit; if intended, raise max_delete_fraction in [reconcile] for this \
                 change",
                max.0
            ),
            Valve::RewindUnreadable { batch, to, from } => write!(
                f,
                "{batch} VM(s): commit {} rewinds the branch from {}, which can no longer be \
                 read, so its deletes cannot be judged as one batch; push a new commit (its \
                 deletes are judged as usual), or delete the VMs by hand",
                short(to),
                short(from)
            ),
            Valve::RewindTooMany {
                batch,
                managed,
                to,
                from,
                max,
            } => write!(
                f,
                "{batch} of {managed} managed VM(s): commit {} rewinds the branch from {}, and \
                 a rewind's deletes count as one batch, more than max_delete_fraction = {}; if \
                 intended, raise max_delete_fraction in [reconcile] for this change",
                short(to),
                short(from),
                max.0
            ),
        }
    }
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreadable::Observed(error) => f.write_str(error),
            Unreadable::NotInConfig { site } => write!(f, "site {site:?} is not in the config"),
            Unreadable::RenameUndecided { from, vmid } => write!(
                f,
                "the spec set could not be read completely, so whether spec {from}, which this \
                 spec is renamed from, is gone cannot be told: its VM {vmid} is kept and nothing \
                 is created for this spec until the set reads completely"
            ),
            Unreadable::RenameInFlight { from, vmid } => write!(
                f,
                "spec {from}, which this spec is renamed from, has a create or a delete of \
                 guest {vmid} in flight: nothing is created for this spec until it ends and the \
                 rename can be judged"
            ),
            Unreadable::RenamedMayBeThere { site, from } => write!(
                f,
                "site {site} cannot be read, and the VM of spec {from}, which this spec is \
                 renamed from, may be there: nothing is created until it can be read"
            ),
            Unreadable::RenameSite { site } => write!(f, "site {site} cannot be read"),
        }
    }
}

impl fmt::Display for AdoptRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdoptRefusal::Gone { kind, vmid, site } => {
                let (made_from, field) = match kind {
                    GuestKind::Qemu => ("an image", "image"),
                    GuestKind::Lxc => ("a template", "template"),
                };
                write!(
                    f,
                    "{} does not exist on site {site} (or is not a {noun}); remove the \
                     proxsync.io/adopt annotations and name {made_from} ({field}) to create a new \
                     {noun}",
                    kind.named(*vmid),
                    noun = kind.noun()
                )
            }
            AdoptRefusal::Template { kind, vmid } => write!(
                f,
                "{} is a template; proxsync adopts only guests that run, and makes no second \
                 guest beside one carrying the spec's marker: delete the template, or remove the \
                 proxsync-id line from its notes",
                kind.named(*vmid)
            ),
            AdoptRefusal::Renamed {
                kind,
                vmid,
                found,
                want,
            } => write!(
                f,
                "{} is named {}, not {want} as when the spec was written: it may be another \
                 guest at a reused VMID; import it again to adopt it",
                kind.named(*vmid),
                found.as_deref().unwrap_or("(no name)")
            ),
            AdoptRefusal::Managed { kind, vmid, tag } => write!(
                f,
                "{} carries the ownership tag {tag}: an install of proxsync manages it; it is \
                 never taken by consent",
                kind.named(*vmid)
            ),
            AdoptRefusal::Marked {
                kind,
                vmid,
                spec,
                install,
            } => write!(
                f,
                "{} carries the proxsync marker of spec {spec} of install {install}: it is never \
                 taken by consent (proxsync adopt confirms a guest of this install's)",
                kind.named(*vmid)
            ),
        }
    }
}

impl fmt::Display for crate::plan::TemplateKept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            crate::plan::TemplateKept::Cloning { guest } => write!(
                f,
                "old template version kept: spec {guest}'s guest is being cloned from it"
            ),
            crate::plan::TemplateKept::UnexplainedClone => f.write_str(
                "old template version kept: a clone no record explains runs on the site (it may \
                 be from this template)",
            ),
            crate::plan::TemplateKept::Successor { current, template } => write!(
                f,
                "old template version kept until {current}, the current version of {template}, \
                 is built (see its status)"
            ),
        }
    }
}

/// The text `proxsync plan` shows (and the plan's JSON holds); the status files render it with
/// a time (`status::orphan_entries`).
impl fmt::Display for OrphanDisposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrphanDisposition::Reported => f.write_str("reported"),
            OrphanDisposition::ForeignClaim { spec } => write!(
                f,
                "reported: foreign VM claiming spec {spec} (its marker does not verify); never \
                 adopted or deleted"
            ),
            OrphanDisposition::Template { spec } => {
                match crate::spec::templates::template_of_name(spec) {
                    Some(t) => write!(
                        f,
                        "reported: {spec}, an old version of ProxmoxTemplate {t} whose record \
                         was lost"
                    )?,
                    None => write!(
                        f,
                        "reported: a template carrying this install's marker of spec {spec}, \
                         which no record explains (a guest made a template by hand?)"
                    )?,
                }
                f.write_str(
                    "; never deleted by proxsync: delete it by hand (qm destroy) once nothing \
                     clones from it",
                )
            }
            OrphanDisposition::Deleting => f.write_str("deleting"),
            OrphanDisposition::DeleteAfter { at_ms } => write!(
                f,
                "will delete after {}",
                crate::util::time::rfc3339(
                    std::time::UNIX_EPOCH + std::time::Duration::from_millis(*at_ms)
                )
            ),
            OrphanDisposition::Refused => {
                f.write_str("reported (delete refused: see _summary.yaml)")
            }
            OrphanDisposition::SiteMoved { spec, to } => write!(
                f,
                "reported: spec {spec} now names site {to}; kept until you delete it"
            ),
        }
    }
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphan_dispositions_in_words() {
        let cases = [
            (OrphanDisposition::Reported, "reported"),
            (OrphanDisposition::Deleting, "deleting"),
            (
                OrphanDisposition::DeleteAfter {
                    at_ms: 1_740_827_400_000,
                },
                "will delete after 2025-03-01T11:10:00Z",
            ),
            (
                OrphanDisposition::Refused,
                "reported (delete refused: see _summary.yaml)",
            ),
            (
                OrphanDisposition::ForeignClaim { spec: "web".into() },
                "reported: foreign VM claiming spec web (its marker does not verify); never \
                 adopted or deleted",
            ),
        ];
        for (disposition, text) in cases {
            assert_eq!(disposition.to_string(), text);
        }
    }
}
