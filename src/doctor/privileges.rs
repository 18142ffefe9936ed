//! The token's privileges: every one proxsync needs, on the ACL path it is checked on.

use std::collections::BTreeSet;

use super::{Check, Level, check};
use crate::config::SiteConfig;
use crate::pve::Client;

/// Privileges proxsync needs, and the ACL path each is checked on.
pub const REQUIRED_PRIVILEGES: &[(&str, &str)] = &[
    ("/vms", "VM.Allocate"),
    ("/vms", "VM.Clone"),
    ("/vms", "VM.Audit"),
    ("/vms", "VM.Config.CPU"),
    ("/vms", "VM.Config.Memory"),
    ("/vms", "VM.Config.Disk"),
    ("/vms", "VM.Config.Network"),
    ("/vms", "VM.Config.Options"),
    ("/vms", "VM.Config.CDROM"),
    ("/vms", "VM.Config.Cloudinit"),
    ("/vms", "VM.Config.HWType"),
    ("/vms", "VM.PowerMgmt"),
    ("/storage", "Datastore.AllocateSpace"),
    ("/storage", "Datastore.Audit"),
    ("/nodes", "Sys.Audit"),
    ("/sdn/zones", "SDN.Use"),
];

/// Privileges needed on top when specs carry `userData` (seed images are uploaded and removed).
pub const SEED_PRIVILEGES: &[(&str, &str)] = &[
    ("/storage", "Datastore.AllocateTemplate"),
    ("/storage", "Datastore.Allocate"),
];

pub(super) async fn check_privileges(
    client: &Client,
    site: &SiteConfig,
    uploads_seeds: bool,
) -> Check {
    let subject = format!("{} privileges", site.name);
    let perms = match client.permissions(None).await {
        Ok(p) => p,
        Err(e) => return check(Level::Fail, subject, e.to_string(), None),
    };
    let held = |path: &str, privilege: &str| {
        // A privilege counts if granted on the path or any parent, as PVE's ACLs propagate.
        let mut p = path.to_string();
        loop {
            if perms.get(&p).is_some_and(|m| m.contains_key(privilege)) {
                return true;
            }
            if p == "/" {
                return false;
            }
            p = match p.rfind('/') {
                Some(0) | None => "/".to_string(),
                Some(i) => p[..i].to_string(),
            };
        }
    };
    // Specs with userData upload and delete seed images (docs/cloud-init.md).
    let seed_privileges: &[(&str, &str)] = if uploads_seeds { SEED_PRIVILEGES } else { &[] };
    let required = || REQUIRED_PRIVILEGES.iter().chain(seed_privileges);
    let missing: Vec<String> = required()
        .filter(|(path, privilege)| !held(path, privilege))
        .map(|(path, privilege)| format!("{privilege} on {path}"))
        .collect();
    if missing.is_empty() {
        return check(
            Level::Ok,
            subject,
            format!(
                "token {} holds every privilege proxsync needs",
                site.token_id
            ),
            None,
        );
    }
    let names: BTreeSet<&str> = required().map(|(_, p)| *p).collect();
    check(
        Level::Fail,
        subject,
        format!("token {} lacks {}", site.token_id, missing.join(", ")),
        Some(format!(
            "pveum role add Proxsync --privs \"{}\" && pveum acl modify / --tokens '{}' --roles Proxsync \
             (and the same for its user, unless the token has privsep=0)",
            names.into_iter().collect::<Vec<_>>().join(","),
            site.token_id
        )),
    )
}
