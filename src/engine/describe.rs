//! Actions in words: the log line of each planned action, and `plan`'s description of it.

use super::*;

/// Logs a planned action as plain fields (journald's structured fields): its kind, spec, site,
/// node, VMID and, for an update, what differs.
pub(super) fn log_planned(action: &Action) {
    let (kind, vmid) = match action {
        Action::Create { .. } => ("create", None),
        Action::ResumeCreate { vmid, .. } => ("resume", Some(*vmid)),
        Action::Adopt { vmid, .. } => ("adopt", Some(*vmid)),
        Action::AdoptByConsent { vmid, .. } => ("adopt-consent", Some(*vmid)),
        Action::Converge { vmid, .. } => ("update", Some(*vmid)),
        Action::Migrate { vmid, .. } => ("migrate", Some(*vmid)),
        Action::Remove {
            vmid,
            release: false,
            ..
        } => ("delete", Some(*vmid)),
        Action::Remove { vmid, .. } => ("release", Some(*vmid)),
        Action::Forget { .. } => ("forget", None),
        Action::Relabel { vmid, .. } => ("rename", Some(*vmid)),
        Action::HandOver { vmid, .. } => ("handover", Some(*vmid)),
        Action::DeleteOrphan { vmid, .. } => ("delete-orphan", Some(*vmid)),
    };
    let (site, node) = action.node().unwrap_or_default();
    let why = match action {
        Action::Converge { why, .. } => why.join(", "),
        _ => String::new(),
    };
    tracing::info!(
        action = kind,
        spec = action.spec().unwrap_or(""),
        site,
        node,
        vmid = vmid.map(|v| v.to_string()).unwrap_or_default(),
        why,
        "planned"
    );
}

/// The valid specs of `specs` by name, for [`describe`]: built once for a list of actions (a
/// search per action was quadratic in `plan`'s output of 10,000 creates).
pub fn specs_by_name(specs: &SpecSet) -> FnvHashMap<&str, &crate::spec::Spec> {
    specs.specs.iter().map(|s| (s.name.as_str(), s)).collect()
}

/// A short line per action, for `proxsync plan` and logs; `specs` from [`specs_by_name`].
// Long because: one arm per action kind, each its one line of text.
pub fn describe(action: &Action, specs: &FnvHashMap<&str, &crate::spec::Spec>) -> String {
    let spec = |name: &str| specs.get(name).copied();
    // `VM` or `container`, as the spec's kind says (a removed spec's guest: `VM`).
    let noun = |name: &str| spec(name).map_or("VM", |s| s.kind().noun());
    let spec_kind = |name: &str| spec(name).map(|s| s.kind());
    match action {
        Action::Create {
            spec: name,
            site,
            node,
        } => {
            let from = spec(name)
                .map(|s| format!(" from {}", image_text(s.image())))
                .unwrap_or_default();
            format!(
                "+ create  {name}: new {} on {site}/{node}{from}",
                noun(name)
            )
        }
        Action::ResumeCreate {
            spec,
            site,
            node,
            vmid,
            upid,
        } => format!(
            "~ resume  {spec}: finish the create of {} {vmid} on {site}/{node}{}",
            noun(spec),
            upid.as_ref()
                .map(|u| format!(" (task {u})"))
                .unwrap_or_default()
        ),
        Action::Adopt { spec, site, vmid } => {
            format!(
                "~ adopt   {spec}: {} {vmid} on {site} carries its marker",
                noun(spec)
            )
        }
        Action::AdoptByConsent {
            spec,
            site,
            node,
            vmid,
        } => format!(
            "~ adopt   {spec}: VM {vmid} on {site}/{node}, by the spec's consent ({}): its \
             marker and tag are written",
            crate::spec::ADOPT
        ),
        Action::Relabel {
            spec,
            from,
            site,
            node,
            vmid,
        } => format!(
            "~ rename  {from} -> {spec}: {} {vmid} on {site}/{node} is re-labelled",
            noun(spec)
        ),
        Action::Converge {
            spec,
            site,
            node,
            vmid,
            why,
        } => {
            format!(
                "~ update  {spec}: {} {vmid} on {site}/{node}: {}",
                noun(spec),
                why.join(", ")
            )
        }
        Action::Migrate {
            spec,
            site,
            node,
            vmid,
            target,
        } => {
            let restart = match spec_kind(spec) {
                Some(crate::guest::GuestKind::Lxc) => " (a restart migration)",
                _ => "",
            };
            format!(
                "~ migrate {spec}: {} {vmid} on {site} from node {node} to node {target}{restart}",
                noun(spec)
            )
        }
        Action::Remove {
            spec,
            site,
            node,
            vmid,
            release: false,
        } => {
            format!("- delete  {spec}: VM {vmid} on {site}/{node} (spec removed)")
        }
        Action::Remove {
            spec,
            site,
            vmid,
            release: true,
            ..
        } => {
            format!(
                "- release {spec}: VM {vmid} on {site} stays, no longer managed (deletionPolicy: Orphan)"
            )
        }
        Action::Forget { spec } => format!("- forget  {spec}: spec removed and its VM is gone"),
        Action::HandOver {
            spec,
            site,
            node,
            vmid,
        } => format!(
            "- handover {spec}: VM {vmid} on {site}/{node} stays; the spec is outside [source] \
             selector, so the install it now matches takes the VM over"
        ),
        Action::DeleteOrphan { site, node, vmid } => {
            format!("- delete  orphan VM {vmid} on {site}/{node} (stopped, past its grace period)")
        }
    }
}

pub(super) fn image_text(image: &crate::spec::Image) -> String {
    match image {
        crate::spec::Image::Template { vmid } => format!("template {vmid}"),
        crate::spec::Image::Volume { volume, .. } => volume.clone(),
        crate::spec::Image::Name(n) => n.clone(),
        crate::spec::Image::Existing => "nothing (adopts an existing guest)".to_string(),
    }
}
