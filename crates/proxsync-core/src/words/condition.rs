//! A status condition's message ([`ConditionText`]): the verdicts of the planner at length,
//! with what to do (`plan` says them in one line, `words::verdict`), and what the record and
//! the site's view say of the guest.

use std::fmt;

use crate::guest::GuestKind;
use crate::model::Suspension;
use crate::plan::{ConditionText, Duplicate, FieldDrift, HandsOff, Verdict};
use crate::spec::Spec;

/// The version a made-from value names: a template VM's suffix (`noble-0123abcd`), an image
/// file's checksum digits.
fn version_in<'f>(image: &crate::spec::Image, file: &'f str) -> &'f str {
    match image {
        crate::spec::Image::Built { .. } => file.rsplit_once('-').map_or(file, |(_, v)| v),
        _ => crate::spec::images::version_of_file(file).unwrap_or(file),
    }
}

impl fmt::Display for ConditionText<'_> {
    // Long because: one arm per condition message, each its words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConditionText::Health {
                kind,
                guest,
                verdict,
                health,
            } => super::health::say(f, kind, guest, verdict, health),
            ConditionText::HealthNotChecked {
                kind,
                made,
                running,
            } => match (made, running) {
                (true, true) => write!(f, "the {} runs; not checked yet", kind.noun()),
                (true, false) => write!(f, "not checked: the {} is not running", kind.noun()),
                (false, _) => write!(f, "not checked: there is no {} yet", kind.noun()),
            },
            ConditionText::NotHealthy {
                kind,
                vmid,
                verdict,
            } => super::health::not_ready(f, kind, vmid, verdict),
            ConditionText::NoGuestWhile { kind, held } => write!(
                f,
                "no {} of the spec was found; nothing is created while it is {}",
                kind.noun(),
                match held {
                    HandsOff::ObserveOnly => "observe-only",
                    HandsOff::Suspended => "suspended",
                }
            ),
            ConditionText::Differs { kind, vmid, drift } => write!(
                f,
                "{} differs from the spec: {}",
                kind.named(vmid),
                fields(drift)
            ),
            ConditionText::MatchesListing { kind, vmid } => write!(
                f,
                "{} matches the spec in what the cluster listing shows",
                kind.named(vmid)
            ),
            ConditionText::SuspendedThrough { kind, from, by } => {
                write!(
                    f,
                    "suspended through spec {from}, which this spec is renamed from ({by}): its \
                     {} is neither re-labelled nor changed; `proxsync resume {from}` resumes it",
                    kind.noun()
                )?;
                if by.from_git {
                    write!(
                        f,
                        " (spec.suspend in git, kept since spec {from} was removed)"
                    )?;
                }
                Ok(())
            }
            ConditionText::Suspended { spec, by } => suspended(f, spec, by),
            ConditionText::Duplicate { kind, duplicate } => duplicated(f, kind, duplicate),
            ConditionText::Failure { category, message } => write!(f, "{category}: {message}"),
            ConditionText::NextAttempt { at_ms } => write!(
                f,
                "next attempt at {}",
                crate::util::time::rfc3339(
                    std::time::UNIX_EPOCH + std::time::Duration::from_millis(at_ms)
                )
            ),
            ConditionText::WaitingForNode { node } => write!(f, "waiting for node {node}"),
            ConditionText::SiteUnsettled => {
                f.write_str("nothing is done on the site until a person settles its cluster")
            }
            ConditionText::WaitingForSite => f.write_str("waiting for the site"),
            ConditionText::WaitingForWholeListing => {
                f.write_str("waiting for a listing of the site that reads whole")
            }
            ConditionText::UnknownState { kind, vmid } => {
                write!(f, "{} is listed with an unknown state", kind.named(vmid))
            }
            ConditionText::WaitingForState { kind } => {
                write!(f, "waiting for the {}'s state", kind.noun())
            }
            ConditionText::BeingMade { kind, vmid } => write!(
                f,
                "{} is being made by a create or clone of this install's token that no record \
                 names (the state database was lost while it ran): it may be this spec's {}, \
                 judged by its marker once the task ends; nothing is created meanwhile",
                kind.named(vmid),
                kind.noun()
            ),
            ConditionText::WaitingForTaskMaking { kind, vmid } => {
                write!(f, "waiting for the task making {}", kind.named(vmid))
            }
            ConditionText::HeldByInstall {
                kind,
                vmid,
                install,
            } => write!(
                f,
                "{} carries this spec's marker for install {install} and that install's \
                 ownership tag: the spec moved here from install {install} ([source] selector), \
                 which hands the {noun} over at its next cycle (its tag removed); this install \
                 then adopts it. Nothing is created meanwhile. If install {install} is unrelated \
                 and only uses the same spec and {noun} name, rename one of them",
                kind.named(vmid),
                noun = kind.noun()
            ),
            ConditionText::WaitingForHandOver {
                kind,
                vmid,
                install,
            } => write!(
                f,
                "waiting for install {install} to hand {} over",
                kind.named(vmid)
            ),
            ConditionText::ForAPerson { spec, verdict } => for_a_person(f, spec, verdict),
            ConditionText::ObservedRename { kind, vmid, from } => {
                let vm = match vmid {
                    Some(id) => kind.named(id),
                    None => format!("its {}", kind.noun()),
                };
                write!(
                    f,
                    "spec {from}, which this spec is renamed from, was observe-only when last \
                     seen: {vm} is not re-labelled, and nothing is done for this spec; put spec \
                     {from} back with managementPolicy: Full for one cycle to let the rename \
                     proceed"
                )
            }
            ConditionText::ObserveOnly { kind } => write!(
                f,
                "managementPolicy: Observe: proxsync never creates, changes, powers or deletes \
                 this {}; set Full to apply the spec",
                kind.noun()
            ),
            ConditionText::RollingOut {
                set: Some(set),
                stopped_by: Some(member),
                ..
            } => write!(
                f,
                "a change needs a reboot or a rebuild, and set {set}'s roll stopped at member \
                 {member}, whose guest did not pass its health checks after its change (see its \
                 Healthy): no other member goes down until it passes or a person acts"
            ),
            ConditionText::RollingOut {
                set: Some(set),
                max_unavailable,
                ..
            } => write!(
                f,
                "a change needs a reboot or a rebuild, and set {set} takes down at most \
                 {max_unavailable} member(s) at a time (maxUnavailable): this one waits its turn"
            ),
            ConditionText::RollingOut { set: None, .. } => f.write_str(
                "a new version of its image rebuilds it (imagePolicy: Recreate), and the specs \
                 of their own of its site are rebuilt one at a time, each once the one before is \
                 Ready: this one waits its turn",
            ),
            ConditionText::WaitingForImage { kind, image, why } => write!(
                f,
                "waiting for image {image}: {why}; the {} is created once the image is on its \
                 node's storage",
                kind.noun()
            ),
            ConditionText::WaitingForDependencies {
                kind,
                on,
                elsewhere,
                not_healthy,
            } => {
                let why = match not_healthy {
                    true => ", and its guest has not passed its health checks yet",
                    false => "",
                };
                write!(
                    f,
                    "waiting for {on} to be Ready (dependsOn){why}: the {} is not created, \
                     started or rebooted until then",
                    kind.noun()
                )?;
                if elsewhere {
                    write!(
                        f,
                        "; {on} is another install's spec (outside [source] selector), which \
                         this install never sees Ready: depend only on this install's specs"
                    )?;
                }
                Ok(())
            }
            ConditionText::SuspendedNoAction { kind, by } => write!(
                f,
                "suspended {by}: proxsync takes no action for this {}",
                kind.noun()
            ),
            ConditionText::Migrating {
                kind,
                vmid,
                from,
                to,
            } => match kind {
                GuestKind::Qemu => write!(f, "migrating VM {vmid} from node {from} to node {to}"),
                // A container cannot move live: PVE stops it, moves it and starts it again.
                GuestKind::Lxc => write!(
                    f,
                    "migrating container {vmid} from node {from} to node {to} with a restart \
                     migration: it is shut down, moved and started again there"
                ),
            },
            ConditionText::TaskRunning { upid } => write!(f, "task {upid} still running"),
            ConditionText::Creating { kind } => write!(f, "creating the {}", kind.noun()),
            ConditionText::Deleting { kind } => write!(f, "deleting the {}", kind.noun()),
            ConditionText::WillCreate { kind } => write!(f, "the {} will be created", kind.noun()),
            ConditionText::WillUpdate { kind } => write!(f, "the {} will be updated", kind.noun()),
            ConditionText::TakingOver {
                kind,
                vmid,
                by_consent: false,
            } => write!(
                f,
                "taking over {}, which carries this spec's marker",
                kind.named(vmid)
            ),
            ConditionText::TakingOver {
                kind,
                vmid,
                by_consent: true,
            } => write!(
                f,
                "taking over {}, as the spec consents ({})",
                kind.named(vmid),
                crate::spec::ADOPT
            ),
            ConditionText::WillUpdateParts { kind, vmid, why } => write!(
                f,
                "{} will be updated: {}",
                kind.named(vmid),
                why.join(", ")
            ),
            ConditionText::SiteNotObserved => f.write_str("site not observed"),
            ConditionText::OtherCluster { site } => write!(
                f,
                "site {site} reaches another cluster than the recorded one: its nodes are not \
                 judged"
            ),
            ConditionText::SiteUnreachable { site, error } => {
                write!(f, "site {site} unreachable: {error}")
            }
            ConditionText::NoQuorum => f.write_str(
                "the cluster has no quorum: nothing is created, changed or deleted until it \
                 returns",
            ),
            ConditionText::NodeOnline { node } => write!(f, "node {node} online"),
            ConditionText::NodeOffline { node } => write!(
                f,
                "node {node} is offline or unknown: nothing is created, changed or deleted there"
            ),
            ConditionText::Provisioned {
                kind,
                vmid,
                adopted,
            } => write!(
                f,
                "{} ({})",
                kind.named(vmid),
                if adopted { "taken over" } else { "created" }
            ),
            ConditionText::NotProvisioned { kind } => write!(f, "no {} yet", kind.noun()),
            ConditionText::ObservedOnly { kind, vmid } => write!(
                f,
                "{} exists and is observed only: neither made nor adopted",
                kind.named(vmid)
            ),
            ConditionText::RebootPending { kind, fields } => write!(
                f,
                "{} take effect at the next start of the {}{} (proxsync does not reboot it)",
                fields.join(", "),
                kind.noun(),
                if fields.iter().any(|k| k == "cloudinit") {
                    "; cloud-init reads its new settings then"
                } else if fields.iter().any(|k| k == "hostname") {
                    "; its guest gets the new hostname (and /etc/hosts) then"
                } else {
                    ""
                }
            ),
            ConditionText::UpToDate {
                spec,
                vm,
                vmid,
                made,
            } => {
                let noun = spec.kind().noun();
                write!(f, "{noun} {vmid} matches the spec")?;
                // What the repository versions the guest from: an image or a template.
                let source = match spec.image() {
                    crate::spec::Image::Managed(image) => Some(("image", image.as_str())),
                    crate::spec::Image::Built { name, .. } => Some(("template", name.as_str())),
                    _ => None,
                };
                let version = |file| version_in(spec.image(), file);
                if let (Some((None, now)), Some((what, name))) = (made, source) {
                    write!(
                        f,
                        "; made from {what} {name}, its version not recorded (adopted, or made \
                         before proxsync recorded versions): a new version never rebuilds it; \
                         delete the {noun} to have it made from version {}",
                        version(now)
                    )?;
                }
                if let (Some((Some(made), now)), Some((what, name))) = (made, source) {
                    write!(f, "; made from {what} {name} version {}", version(made))?;
                    if made != now {
                        write!(
                            f,
                            ", an older version: the {what} is now at {} (imagePolicy: {})",
                            version(now),
                            match spec.image_policy {
                                crate::spec::ImagePolicy::Keep => {
                                    "Keep leaves the guest as it was made; Recreate rebuilds it"
                                }
                                crate::spec::ImagePolicy::Recreate if what == "template" => {
                                    "Recreate rebuilds it once the new version is built"
                                }
                                crate::spec::ImagePolicy::Recreate => {
                                    "Recreate rebuilds it once the new version is on its node"
                                }
                            }
                        )?;
                    }
                }
                if spec.adopt.as_ref().is_some_and(|c| c.vmid == vmid) {
                    write!(
                        f,
                        "; the {} annotations did their work (the {noun} is this spec's): \
                         remove them",
                        crate::spec::ADOPT
                    )?;
                }
                if let Some(disk) = vm
                    .and_then(|vm| vm.disk_bytes)
                    .filter(|d| *d > spec.root_disk_bytes())
                {
                    write!(
                        f,
                        "; its disk ({disk} bytes) is larger than the spec's {} bytes: disks \
                         only grow, not applied",
                        spec.root_disk_bytes()
                    )?;
                }
                Ok(())
            }
            ConditionText::DecryptionFailed { noun, messages } => write!(
                f,
                "the spec's encrypted userData does not open; its {noun} (if any) is left \
                 exactly as it is until it does: {}",
                messages.join("; ")
            ),
            ConditionText::Invalid { noun, messages } => write!(
                f,
                "the spec is invalid; its {noun} (if any) is left exactly as it is until the \
                 spec is fixed: {}",
                messages.join("; ")
            ),
            ConditionText::TemplateKept { why } => write!(f, "the spec was removed; {why}"),
            ConditionText::RemovedKept { kind, error } => write!(
                f,
                "the spec was removed; its {} is not deleted: {}",
                kind.noun(),
                error.map(|e| e.message.as_str()).unwrap_or_default()
            ),
        }
    }
}

/// Each differing field, `; ` between them.
fn fields(drift: &[FieldDrift]) -> String {
    let fields: Vec<String> = drift.iter().map(ToString::to_string).collect();
    fields.join("; ")
}

/// Several guests named in one message: `VMs` for a VM's spec; `guests` for a container's, as
/// the others that claim it may be of either kind.
fn several(kind: GuestKind) -> &'static str {
    match kind {
        GuestKind::Qemu => "VMs",
        GuestKind::Lxc => "guests",
    }
}

/// `Suspended` True: who suspended the spec, since when and why, and how to resume it.
fn suspended(f: &mut fmt::Formatter<'_>, spec: &Spec, by: &Suspension) -> fmt::Result {
    write!(
        f,
        "suspended {by}; no action is taken for its {}; ",
        spec.kind().noun()
    )?;
    match (by.from_git, spec.suspend) {
        (true, _) => f.write_str("remove spec.suspend to resume it"),
        (false, true) => write!(
            f,
            "`proxsync resume {}` and removing spec.suspend resume it",
            spec.name
        ),
        (false, false) => write!(f, "`proxsync resume {}` resumes it", spec.name),
    }
}

/// `Ready` False while other guests claim the spec: a second guest is never silently ignored.
fn duplicated(f: &mut fmt::Formatter<'_>, kind: GuestKind, d: &Duplicate) -> fmt::Result {
    let extras: Vec<String> = d.extras.iter().map(u32::to_string).collect();
    let (kept, noun, many) = (kind.named(d.kept), kind.noun(), several(kind));
    match &d.renamed_from {
        Some(from) => write!(
            f,
            "{kept} is this spec's, and {many} {} on site {} claim it too, among them the \
             {noun} of spec {from}, which this spec is renamed from ({}): the spec had a \
             {noun} of its own already. proxsync never deletes spec {from}'s {noun} while the \
             annotation names it: check them and delete what you do not need by hand, or \
             remove the annotation (spec {from}'s {noun} is then an orphan of this install)",
            extras.join(", "),
            d.site,
            crate::spec::RENAMED_FROM,
        ),
        None => write!(
            f,
            "{many} {} and {} on site {} all carry this spec's marker; {kept} is the spec's, the \
             others are listed in _orphans.yaml (deleted when tagged, stopped and past the orphan \
             grace period; otherwise delete them by hand after checking them)",
            d.kept,
            extras.join(", "),
            d.site,
        ),
    }
}

/// The verdicts that hold a spec until a person decides, and what to do.
fn for_a_person(f: &mut fmt::Formatter<'_>, spec: &Spec, verdict: &Verdict) -> fmt::Result {
    let (kind, noun) = (spec.kind(), spec.kind().noun());
    match verdict {
        Verdict::RenameSuspected { from, vmid } => write!(
            f,
            "this commit removes spec {from} and adds this one with the same content: a rename of \
             metadata.name? Neither is {named} deleted nor a new {noun} created. To keep {named} \
             under this name, add the annotation {}: {from} to this spec's metadata; to replace \
             it, change the content or remove the specs in separate commits",
            crate::spec::RENAMED_FROM,
            named = kind.named(*vmid)
        ),
        Verdict::SiteMoved { from, vmid } => write!(
            f,
            "{named} of this spec is on site {from}, and the spec now names site {}. proxsync \
             never moves a {noun} between clusters by itself (a create here and a delete there). \
             Move the spec back to site {from}, or move what you need off {named}, delete it \
             on {from}, and the {noun} is then created on site {}",
            spec.site,
            spec.site,
            named = kind.named(*vmid)
        ),
        Verdict::RolledBack {
            vmid,
            snapshot,
            why,
        } => write!(
            f,
            "the spec's change was rolled back: {named} was not healthy after it \
             ({why}), so it was put back to snapshot {snapshot} and started. The change is not \
             tried again until the spec changes; to try it once more as it is, run proxsync \
             reconcile {} --retry",
            spec.name,
            named = kind.named(*vmid)
        ),
        Verdict::KindChanged { vmid, found } => write!(
            f,
            "this spec asks for a {noun} ({}), and its guest {vmid} is a {}. proxsync never \
             replaces a guest by one of the other kind by itself (a delete and a create). \
             Change kind back, or move what you need off {vmid} and delete it ({} destroy \
             {vmid}): the {noun} is then created",
            kind.spec_kind(),
            found.noun(),
            found.cli(),
        ),
        Verdict::RenameUnproven { from, vmid, why } => write!(
            f,
            "this spec is renamed from {from} ({}), whose record names {named}, but {named} \
             is not shown to be {from}'s: {why}. Neither is it re-labelled nor deleted, and no \
             {noun} is created for this spec. If {named} is the one to keep, check its \
             proxsync-id line; otherwise remove the annotation (then {from} is removed as any \
             removed spec)",
            crate::spec::RENAMED_FROM,
            named = kind.named(*vmid)
        ),
        Verdict::Unmarked { vmid } => write!(
            f,
            "{named} carries this install's tag and this spec's {noun} name but no \
             proxsync-id line (its notes were replaced?), and no record names it: nothing is \
             created while it may be this spec's {noun}. If it is: proxsync adopt {} --vmid \
             {vmid} (the line is written back below its notes); otherwise remove the tag \
             proxsync.<install_id> from it, or delete it",
            spec.name,
            named = kind.named(*vmid)
        ),
        Verdict::UnverifiedClaim { vmid } => write!(
            f,
            "{} claims this spec but its marker does not verify (copied from another {noun}, \
             typed by hand, or signed with a lost marker key); nothing is created while it does. \
             If it is this spec's {noun}: proxsync adopt {} --vmid {vmid}; otherwise delete it or \
             remove the proxsync-id line from its description",
            kind.named(*vmid),
            spec.name
        ),
        // Without a consent: its own guest, made a template by a person (`plan::spec`).
        Verdict::AdoptRefused { why, .. } if spec.adopt.is_none() => write!(
            f,
            "this spec's {noun} carries its marker but is not taken: {why}"
        ),
        Verdict::AdoptRefused { vmid, why } => write!(
            f,
            "this spec consents to take over {} ({}), and it is not taken: {why}",
            kind.named(*vmid),
            crate::spec::ADOPT
        ),
        Verdict::AdoptionsHeld { count, max } => write!(
            f,
            "{count} {} would be taken over by consent this cycle, more than [reconcile] \
             max_adopt_per_cycle = {max}: none is taken. Raise the limit, or commit the \
             imported specs in smaller parts",
            several(kind)
        ),
        // The other verdicts do not wait for a person; status gives them no such message.
        _ => Ok(()),
    }
}
