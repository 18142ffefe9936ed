//! `proxsync import`: specs written from the VMs and containers a site already has.
//!
//! One listing of the site selects the guests; each selected guest's config is read once, one
//! after another (an import never storms the API), and [`spec_text`] (a VM) or
//! [`container_text`] (a container) writes its spec. Nothing is written to any guest: the
//! specs carry the consent to adopt (`proxsync.io/adopt` with the VM's smbios1 uuid or the
//! container's first NIC's MAC), which the daemon acts on once they are committed.

pub(crate) mod container_text;
pub(crate) mod spec_text;

use std::collections::BTreeSet;

use crate::guest::GuestKind;
use crate::pve::Pve;
use crate::pve::types::ListedStatus;

pub(crate) use spec_text::{Imported, VmFacts};

/// Which VMs of the site to import: those matching every filter given.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selection {
    pub vmids: Vec<u32>,
    pub pool: Option<String>,
    pub tag: Option<String>,
    pub node: Option<String>,
    /// Only VMs no install of proxsync manages (no `proxsync.*` tag).
    pub unmanaged: bool,
}

impl Selection {
    /// True when no filter is given (an import of every VM must be asked for explicitly,
    /// with `unmanaged`).
    pub(crate) fn is_empty(&self) -> bool {
        self.vmids.is_empty()
            && self.pool.is_none()
            && self.tag.is_none()
            && self.node.is_none()
            && !self.unmanaged
    }
}

/// What an import found: a spec per VM it could write, and the VMs it could not, with why.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub specs: Vec<Imported>,
    pub skipped: Vec<(u32, String)>,
}

/// Writes a spec for each VM of `site` that `selection` selects. `taken`: spec names already
/// in use (the repository's), which the new specs do not reuse; `observe`: the specs are
/// observe-only (`managementPolicy: Observe`).
pub(crate) async fn import(
    client: &impl Pve,
    site: &str,
    selection: &Selection,
    mut taken: BTreeSet<String>,
    observe: bool,
) -> Result<Report, crate::pve::Error> {
    let mut report = Report::default();
    let listed = client.vm_resources().await?;
    for entry in &listed.unreadable {
        report.skipped.push((
            entry.vmid.unwrap_or(0),
            format!("site {site}'s listing has an entry proxsync cannot read: {entry}"),
        ));
    }
    let listing = &listed.guests;
    for &vmid in &selection.vmids {
        if !listing
            .iter()
            .any(|r| r.vmid == vmid && r.guest_kind().is_some())
        {
            report
                .skipped
                .push((vmid, format!("no VM or container {vmid} on site {site}")));
        }
    }
    let selected = listing.iter().filter(|r| {
        r.guest_kind().is_some()
            && (selection.vmids.is_empty() || selection.vmids.contains(&r.vmid))
            && selection
                .pool
                .as_ref()
                .is_none_or(|p| r.pool.as_ref() == Some(p))
            && selection
                .tag
                .as_ref()
                .is_none_or(|t| r.tags.iter().any(|rt| rt == t))
            && selection.node.as_ref().is_none_or(|n| r.node == *n)
            && !(selection.unmanaged && r.tags.iter().any(|t| t.starts_with("proxsync")))
    });
    for r in selected {
        let Some(kind) = r.guest_kind() else { continue };
        if r.template == Some(true) {
            report.skipped.push((
                r.vmid,
                "a template: proxsync clones templates, never adopts them".into(),
            ));
            continue;
        }
        if r.status == Some(ListedStatus::Unknown) {
            report.skipped.push((
                r.vmid,
                format!(
                    "its state is unknown (node {} offline?); import it later",
                    r.node
                ),
            ));
            continue;
        }
        let config = match client.vm_config(&r.node, kind, r.vmid).await {
            Ok(c) => c,
            Err(e) if e.is_not_found() => {
                report.skipped.push((r.vmid, "gone while importing".into()));
                continue;
            }
            Err(e) => return Err(e),
        };
        // An HA-managed VM's resource: one more read, only for those.
        let ha = match r.hastate {
            Some(_) => client.ha_resource(kind, r.vmid).await?,
            None => None,
        };
        let facts = VmFacts {
            kind,
            site,
            vmid: r.vmid,
            node: &r.node,
            running: r.status == Some(ListedStatus::Running),
            pool: r.pool.as_deref(),
            ha_state: r.hastate.as_deref(),
            ha: ha.as_ref(),
            config: &config,
        };
        let written = match kind {
            GuestKind::Qemu => spec_text::spec_text(&facts, &mut taken, observe),
            GuestKind::Lxc => container_text::container_text(&facts, &mut taken, observe),
        };
        match written {
            Ok(spec) => report.specs.push(spec),
            Err(why) => report.skipped.push((r.vmid, why)),
        }
    }
    Ok(report)
}
