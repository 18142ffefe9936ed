//! The token's privileges: every one proxsync needs, read on the exact ACL path PVE checks it
//! on (`GET /access/permissions?path=P`: the token's effective privileges on P, as PVE
//! evaluates them: propagation, roles, `NoAccess`, the token/user intersection), and whether
//! PVE lets it set the tags it writes.

use std::collections::{BTreeMap, BTreeSet};

use super::{Check, Level, check};
use crate::config::SiteConfig;
use crate::pve::Client;
use crate::pve::types::Version;

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
    // A spec's node change is a migration (`GET`/`POST .../migrate`).
    ("/vms", "VM.Migrate"),
    ("/storage", "Datastore.AllocateSpace"),
    ("/storage", "Datastore.Audit"),
    // `GET /cluster/status`: pve-manager `PVE/API2/Cluster.pm` `get_status`,
    // `check => ['perm', '/', ['Sys.Audit']]`: on `/` itself, not `/nodes`.
    ("/", "Sys.Audit"),
    // Other users' tasks on a node (`GET /nodes/{node}/tasks`, a task's status).
    ("/nodes", "Sys.Audit"),
    ("/sdn/zones", "SDN.Use"),
];

/// Privileges needed on top when specs carry `userData` (seed images are uploaded and removed).
pub const SEED_PRIVILEGES: &[(&str, &str)] = &[
    ("/storage", "Datastore.AllocateTemplate"),
    ("/storage", "Datastore.Allocate"),
];

/// Privileges needed on top when specs carry `ha` (pve-ha-manager `API2/HA/Resources.pm`:
/// create, update and delete check Sys.Console on `/`).
pub const HA_PRIVILEGES: &[(&str, &str)] = &[("/", "Sys.Console")];

/// What `GET .../agent/network-get-interfaces` needs on `/vms/{vmid}` (any one of them):
/// `VM.Monitor` on 8.x (qemu-server 8 `PVE/API2/Qemu/Agent.pm`); 9.x checks
/// `VM.GuestAgent.Audit` or `VM.GuestAgent.Unrestricted` (pve-access-control 9.0.2: "drop
/// VM.Monitor in favor of more granular VM.GuestAgent.* privileges").
pub fn agent_privileges(version: &Version) -> &'static [&'static str] {
    if version.triple().0 >= 9 {
        &["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"]
    } else {
        &["VM.Monitor"]
    }
}

pub(super) async fn check_privileges(
    client: &Client,
    site: &SiteConfig,
    version: &Version,
    uploads_seeds: bool,
    uses_ha: bool,
    tags: &BTreeSet<String>,
) -> Vec<Check> {
    let subject = format!("{} privileges", site.name);
    // Each requirement: a path and the privileges of which one is needed.
    let mut required: Vec<(&str, Vec<&str>)> = REQUIRED_PRIVILEGES
        .iter()
        .map(|(path, p)| (*path, vec![*p]))
        .collect();
    if uploads_seeds {
        // Specs with userData upload and delete seed images (docs/cloud-init.md).
        required.extend(SEED_PRIVILEGES.iter().map(|(path, p)| (*path, vec![*p])));
    }
    if uses_ha {
        required.extend(HA_PRIVILEGES.iter().map(|(path, p)| (*path, vec![*p])));
    }
    required.push(("/vms", agent_privileges(version).to_vec()));

    // The effective privileges on each exact path, plus `/` for tags.
    let paths: BTreeSet<&str> = required
        .iter()
        .map(|(path, _)| *path)
        .chain(["/"])
        .collect();
    let mut held: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for path in paths {
        match client.permissions(Some(path)).await {
            // PVE answers `{path: {privilege: propagate}}`, or `{}` when nothing is held.
            Ok(mut perms) => {
                let privs = perms.remove(path).unwrap_or_default();
                held.insert(path, privs.into_keys().collect());
            }
            Err(e) => return vec![check(Level::Fail, subject, e.to_string(), None)],
        }
    }
    let has = |path: &str, p: &str| held.get(path).is_some_and(|s| s.contains(p));

    let missing: Vec<String> = required
        .iter()
        .filter(|(path, any)| !any.iter().any(|p| has(path, p)))
        .map(|(path, any)| format!("{} on {path}", any.join(" or ")))
        .collect();
    let mut out = Vec::new();
    if missing.is_empty() {
        out.push(check(
            Level::Ok,
            subject,
            format!(
                "token {} holds every privilege proxsync needs",
                site.token_id
            ),
            None,
        ));
    } else {
        let names: BTreeSet<&str> = required.iter().map(|(_, any)| any[0]).collect();
        out.push(check(
            Level::Fail,
            subject,
            format!("token {} lacks {}", site.token_id, missing.join(", ")),
            Some(format!(
                "pveum role add Proxsync --privs \"{}\" && pveum acl modify / --tokens '{}' --roles Proxsync \
                 (and the same for its user, unless the token has privsep=0)",
                names.into_iter().collect::<Vec<_>>().join(","),
                site.token_id
            )),
        ));
    }
    out.push(tag_check(client, site, has("/", "Sys.Modify"), tags).await);
    out
}

/// Setting tags needs Sys.Modify on `/` unless the datacenter's `user-tag-access` lets users
/// set them (pve-guest-common `PVE/GuestHelpers.pm` `assert_tag_permissions`).
async fn tag_check(
    client: &Client,
    site: &SiteConfig,
    sys_modify_on_root: bool,
    tags: &BTreeSet<String>,
) -> Check {
    let subject = format!("{} tags", site.name);
    if sys_modify_on_root {
        return check(
            Level::Ok,
            subject,
            "the token holds Sys.Modify on /: PVE lets it set any tag",
            None,
        );
    }
    let options = match client.cluster_options().await {
        Ok(o) => o,
        Err(e) => {
            return check(
                Level::Warn,
                subject,
                format!(
                    "cannot read the datacenter options to see which tags the token may set: {e}"
                ),
                Some("grant Sys.Audit on / so doctor can read them".into()),
            );
        }
    };
    let refused: Vec<&str> = tags
        .iter()
        .filter(|t| !options.user_may_set(t))
        .map(String::as_str)
        .collect();
    let mode = options.user_allow();
    if refused.is_empty() {
        return check(
            Level::Ok,
            subject,
            format!(
                "user-tag-access is {mode}: PVE lets the token set {}",
                tags.iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None,
        );
    }
    let registered = options.registered_tags();
    check(
        Level::Warn,
        subject,
        format!(
            "the token lacks Sys.Modify on /, and the datacenter option user-tag-access is {mode}{}: \
             PVE will refuse to set {} on its VMs",
            if registered.is_empty() {
                String::new()
            } else {
                format!(" (registered tags: {})", registered.join(", "))
            },
            refused.join(", ")
        ),
        Some(format!(
            "pvesh set /cluster/options --user-tag-access user-allow=free (or add the tags to \
             user-allow-list), or grant Sys.Modify on / to token '{}' and its user",
            site.token_id
        )),
    )
}
