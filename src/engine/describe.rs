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
        Action::Recreate { vmid, .. } => ("recreate", Some(*vmid)),
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
pub(crate) fn specs_by_name(specs: &SpecSet) -> FnvHashMap<&str, &crate::spec::Spec> {
    specs.specs.iter().map(|s| (s.name.as_str(), s)).collect()
}

/// The kinds of the guests `actions` remove (deletes, releases, hand-overs, orphans' deletes),
/// as `views` list them, else as their spec's record made or took them: what the words about a
/// removal name once the guest and its record are gone.
pub(crate) fn removed_kinds(
    actions: &[Action],
    views: &BTreeMap<String, SiteView>,
    records: &BTreeMap<String, SpecRecord>,
) -> GuestKinds {
    (actions.iter().filter(|a| a.removes()))
        .filter_map(|a| {
            let (site, vmid) = a.guest()?;
            let listed = views.get(site).and_then(|v| v.vms.get(&vmid));
            let kind = listed
                .map(|vm| vm.kind)
                .or_else(|| records.get(a.spec()?).map(|r| r.kind))?;
            Some(((site.to_string(), vmid), kind))
        })
        .collect()
}

/// A short line per action, for `proxsync plan` and logs; `specs` from [`specs_by_name`],
/// `kinds` from [`removed_kinds`] (the guests of removals, whose spec is gone).
// Long because: one arm per action kind, each its one line of text.
pub(crate) fn describe(
    action: &Action,
    specs: &FnvHashMap<&str, &crate::spec::Spec>,
    kinds: &GuestKinds,
) -> String {
    let spec = |name: &str| specs.get(name).copied();
    // `VM` or `container`, as the spec's kind says.
    let noun = |name: &str| spec(name).map_or("VM", |s| s.kind().noun());
    let spec_kind = |name: &str| spec(name).map(|s| s.kind());
    // A removal's guest: as the cycle saw it, else as its spec says, else a VM.
    let removed = |site: &str, vmid: u32, name: Option<&str>| {
        (kinds.get(&(site.to_string(), vmid)).copied())
            .or_else(|| spec_kind(name?))
            .unwrap_or_default()
    };
    match action {
        Action::Create {
            spec: name,
            site,
            node,
        } => {
            let from = spec(name)
                .map(|s| format!(" from {}", image_text(s.image())))
                .unwrap_or_default();
            // A `ProxmoxTemplate`'s version: made a template once it is created.
            let what = match spec(name).and_then(|s| s.template.as_deref()) {
                Some(t) => format!("template {} (version {})", t.name, t.version),
                None => noun(name).to_string(),
            };
            format!("+ create  {name}: new {what} on {site}/{node}{from}")
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
            "~ adopt   {spec}: {} {vmid} on {site}/{node}, by the spec's consent ({}): its \
             marker and tag are written",
            noun(spec),
            crate::spec::ADOPT
        ),
        Action::Recreate {
            spec: name,
            site,
            node,
            vmid,
        } => {
            let from = spec(name)
                .map(|s| format!(" from {}", image_text(s.image())))
                .unwrap_or_default();
            format!(
                "~ recreate {name}: {} {vmid} on {site}/{node} is deleted and made anew{from} \
                 (imagePolicy: Recreate)",
                noun(name)
            )
        }
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
            let guest = removed(site, *vmid, Some(spec)).named(*vmid);
            format!("- delete  {spec}: {guest} on {site}/{node} (spec removed)")
        }
        Action::Remove {
            spec,
            site,
            vmid,
            release: true,
            ..
        } => {
            let guest = removed(site, *vmid, Some(spec)).named(*vmid);
            format!(
                "- release {spec}: {guest} on {site} stays, no longer managed (deletionPolicy: Orphan)"
            )
        }
        Action::Forget { spec } => format!("- forget  {spec}: spec removed and its VM is gone"),
        Action::HandOver {
            spec,
            site,
            node,
            vmid,
        } => {
            let kind = removed(site, *vmid, Some(spec));
            format!(
                "- handover {spec}: {} on {site}/{node} stays; the spec is outside [source] \
                 selector, so the install it now matches takes the {} over",
                kind.named(*vmid),
                kind.noun()
            )
        }
        Action::DeleteOrphan { site, node, vmid } => {
            let guest = removed(site, *vmid, None).named(*vmid);
            format!("- delete  orphan {guest} on {site}/{node} (stopped, past its grace period)")
        }
    }
}

pub(super) fn image_text(image: &crate::spec::Image) -> String {
    match image {
        crate::spec::Image::Template { vmid } => format!("template {vmid}"),
        crate::spec::Image::Volume { volume, .. } => volume.clone(),
        crate::spec::Image::Name(n) => n.clone(),
        crate::spec::Image::Managed(n) => format!("image {n}"),
        crate::spec::Image::Built { name, vm_name } => format!("template {name} ({vm_name})"),
        crate::spec::Image::Oci { reference, .. } => format!("OCI image {reference}"),
        crate::spec::Image::Existing => "nothing (adopts an existing guest)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::GuestKind;

    fn remove(release: bool) -> Action {
        Action::Remove {
            spec: "dns".into(),
            site: "lab".into(),
            node: "pve1".into(),
            vmid: 101,
            release,
        }
    }

    fn delete_orphan() -> Action {
        Action::DeleteOrphan {
            site: "lab".into(),
            node: "pve1".into(),
            vmid: 120,
        }
    }

    /// A removal's spec is gone: its line names the guest as the cycle saw it.
    #[test]
    fn a_removals_line_names_the_guests_kind() {
        let handover = Action::HandOver {
            spec: "dns".into(),
            site: "lab".into(),
            node: "pve1".into(),
            vmid: 101,
        };
        let actions = [remove(false), remove(true), handover, delete_orphan()];
        let lines = |kinds: &GuestKinds| -> Vec<String> {
            let specs = FnvHashMap::default();
            actions.iter().map(|a| describe(a, &specs, kinds)).collect()
        };
        let containers: GuestKinds = [
            (("lab".to_string(), 101), GuestKind::Lxc),
            (("lab".to_string(), 120), GuestKind::Lxc),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            lines(&containers),
            [
                "- delete  dns: container 101 on lab/pve1 (spec removed)",
                "- release dns: container 101 on lab stays, no longer managed (deletionPolicy: \
                 Orphan)",
                "- handover dns: container 101 on lab/pve1 stays; the spec is outside [source] \
                 selector, so the install it now matches takes the container over",
                "- delete  orphan container 120 on lab/pve1 (stopped, past its grace period)",
            ]
        );
        // A guest the cycle did not see is taken for a VM, as the executor takes it.
        assert_eq!(
            lines(&GuestKinds::new())[3],
            "- delete  orphan VM 120 on lab/pve1 (stopped, past its grace period)"
        );
    }

    /// The kinds kept are those of the removals only, from the record when the guest is not
    /// listed.
    #[test]
    fn removed_kinds_are_the_removals_by_their_record() {
        let records = BTreeMap::from([(
            "dns".to_string(),
            SpecRecord {
                site: "lab".into(),
                kind: GuestKind::Lxc,
                ..Default::default()
            },
        )]);
        let converge = Action::Converge {
            spec: "dns".into(),
            site: "lab".into(),
            node: "pve1".into(),
            vmid: 101,
            why: vec![],
        };
        let kinds = removed_kinds(
            &[remove(false), converge, delete_orphan()],
            &BTreeMap::new(),
            &records,
        );
        assert_eq!(
            kinds,
            GuestKinds::from([(("lab".to_string(), 101), GuestKind::Lxc)])
        );
    }
}
