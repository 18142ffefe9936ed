//! Another proxsync writing under this install's name: VMs that carry this install's
//! ownership tag and a marker naming this install, signed with a key that is not this
//! install's. Two instances with one `install_id` (a copied config, a second host, a failover
//! that left the old instance running) each act on the other's VMs as on their own; proxsync
//! refuses a second start on one state directory, but cannot see another host's.

use super::{Check, Level, check};
use crate::config::SiteConfig;
use crate::ownership::{Marker, MarkerKey, ownership_tag};
use crate::pve::Client;
use crate::pve::types::VmResource;

/// Reads the config of every VM tagged with this install's tag (one read each) and warns
/// about the signed markers naming this install that its key does not verify. Markers without
/// a signature (written before signing) are vouched for by the state database, not judged
/// here.
pub(super) async fn check_same_install(
    client: &Client,
    site: &SiteConfig,
    install_id: &str,
    key: Option<&MarkerKey>,
    resources: &[VmResource],
) -> Check {
    let subject = format!("{} install {install_id}", site.name);
    let Some(key) = key else {
        return check(
            Level::Skip,
            subject,
            "no marker key yet: markers not checked",
            None,
        );
    };
    let tag = ownership_tag(install_id);
    let tagged: Vec<&VmResource> = resources
        .iter()
        .filter(|r| r.guest_kind().is_some() && !r.template.unwrap_or(false))
        .filter(|r| r.tag_list().iter().any(|t| t.eq_ignore_ascii_case(&tag)))
        .collect();
    let mut foreign = Vec::new();
    for r in &tagged {
        let kind = r.guest_kind().unwrap_or_default();
        let cfg = match client.vm_config(&r.node, kind, r.vmid).await {
            Ok(cfg) => cfg,
            // Gone since the listing, or unreadable: not judged.
            Err(_) => continue,
        };
        let signed_elsewhere = cfg.description().and_then(Marker::parse).is_some_and(|m| {
            m.install == install_id && m.mac.is_some() && !m.verifies(key, r.vmid)
        });
        if signed_elsewhere {
            foreign.push(r.vmid.to_string());
        }
    }
    if foreign.is_empty() {
        return check(
            Level::Ok,
            subject,
            format!(
                "{} VM(s) tagged {tag}; no marker signed with another key",
                tagged.len()
            ),
            None,
        );
    }
    check(
        Level::Warn,
        subject,
        format!(
            "VM(s) {} carry the tag {tag} and a marker naming install {install_id} that this \
             install's marker key does not verify: another proxsync instance with install_id \
             {install_id} and another marker key writes to this cluster (two instances with one \
             install_id must never run at once: each takes the other's VMs for its own), or they \
             are copies of managed VMs made in the web UI, or this install's marker key was \
             replaced",
            foreign.join(", ")
        ),
        Some(
            "find and stop the other instance, or give it its own install_id (see docs/ha.md); \
             delete copies or remove their proxsync-id line; after a replaced key, restore the old \
             one or confirm each VM with `proxsync adopt NAME --vmid N`"
                .into(),
        ),
    )
}
