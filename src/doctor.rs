//! `proxsync doctor`: checks that the config, each site and the specs fit together, one line
//! per check with ok/warn/fail and, for anything not ok, the fix.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::config::{Config, SiteConfig, Trust};
use crate::pve::types::{ClusterHealth, NodeStorage, VmResource};
use crate::pve::{Client, ClientOptions, Error, TransportKind};
use crate::spec::{Image, Spec, VolumeKind};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    /// Not checked, and why (a check it depends on failed, or there was nothing to check).
    Skip,
    Warn,
    Fail,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // pad, not write_str, so `{:<4}` aligns the report.
        f.pad(match self {
            Level::Ok => "ok",
            Level::Skip => "skip",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        })
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub level: Level,
    /// What was checked: `config`, `us-sfvalley tls`, `us-sfvalley storage pve1/local-lvm`, ...
    pub subject: String,
    pub message: String,
    /// What to do about it (for warn and fail).
    pub fix: Option<String>,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<4} {}: {}", self.level, self.subject, self.message)?;
        if let Some(fix) = &self.fix {
            write!(f, "\n     fix: {fix}")?;
        }
        Ok(())
    }
}

fn check(
    level: Level,
    subject: impl Into<String>,
    message: impl Into<String>,
    fix: Option<String>,
) -> Check {
    Check {
        level,
        subject: subject.into(),
        message: message.into(),
        fix,
    }
}

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

/// Runs every check. `specs` are the specs to check against the sites (may be empty).
pub async fn run(config: &Config, specs: &[Spec]) -> Vec<Check> {
    let mut out = vec![check(
        Level::Ok,
        "config",
        format!(
            "{} ({} site(s), install_id {:?}, ownership tag {})",
            config.path.display(),
            config.sites.len(),
            config.install_id,
            config.ownership_tag()
        ),
        None,
    )];
    for spec in specs {
        if config.site(&spec.site).is_none() {
            out.push(check(
                Level::Fail,
                format!("spec {}", spec.name),
                format!("{}: site {:?} is not configured", spec.file, spec.site),
                Some(format!(
                    "add a [[site]] named {:?} to {} or change the spec's site",
                    spec.site,
                    config.path.display()
                )),
            ));
        }
    }
    for site in &config.sites {
        let site_specs: Vec<&Spec> = specs.iter().filter(|s| s.site == site.name).collect();
        out.extend(check_site(site, &site_specs).await);
    }
    out
}

/// True when the report has a failure (exit code 1).
pub fn failed(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.level == Level::Fail)
}

async fn check_site(site: &SiteConfig, specs: &[&Spec]) -> Vec<Check> {
    let name = site.name.as_str();
    let subject = |what: &str| format!("{name} {what}");
    let mut out = Vec::new();

    // DNS and TCP first, so a failure says which layer is wrong.
    let Some(authority) = site
        .endpoint
        .strip_prefix("https://")
        .map(|a| a.split('/').next().unwrap_or(a))
    else {
        out.push(check(
            Level::Fail,
            subject("endpoint"),
            format!("{:?} is not https://", site.endpoint),
            None,
        ));
        return out;
    };
    let addr = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !authority.ends_with(']')
    {
        authority.to_string()
    } else {
        format!("{authority}:443")
    };
    let resolved: Vec<std::net::SocketAddr> =
        match tokio::time::timeout(site.connect_timeout, tokio::net::lookup_host(addr.clone()))
            .await
        {
            Ok(Ok(addrs)) => addrs.collect(),
            Ok(Err(e)) => {
                out.push(check(
                    Level::Fail,
                    subject("dns"),
                    format!("cannot resolve {addr}: {e}"),
                    Some("check the site's endpoint and this host's DNS".into()),
                ));
                return out;
            }
            Err(_) => {
                out.push(check(
                    Level::Fail,
                    subject("dns"),
                    format!("resolving {addr} timed out"),
                    Some("check this host's DNS resolver".into()),
                ));
                return out;
            }
        };
    let Some(first) = resolved.first().copied() else {
        out.push(check(
            Level::Fail,
            subject("dns"),
            format!("{addr} resolves to nothing"),
            None,
        ));
        return out;
    };
    out.push(check(
        Level::Ok,
        subject("dns"),
        format!("{addr} -> {first}"),
        None,
    ));
    match tokio::time::timeout(site.connect_timeout, tokio::net::TcpStream::connect(first)).await {
        Ok(Ok(_)) => out.push(check(
            Level::Ok,
            subject("tcp"),
            format!("connected to {first}"),
            None,
        )),
        Ok(Err(e)) => {
            out.push(check(
                Level::Fail,
                subject("tcp"),
                format!("cannot connect to {first}: {e}"),
                Some(
                    "check that pveproxy runs on the node and port 8006 is open from this host"
                        .into(),
                ),
            ));
            return out;
        }
        Err(_) => {
            out.push(check(
                Level::Fail,
                subject("tcp"),
                format!(
                    "connecting to {first} timed out after {:?}",
                    site.connect_timeout
                ),
                Some("check firewalls between this host and the node (port 8006)".into()),
            ));
            return out;
        }
    }

    // The secret, then TLS and authentication with the first real request.
    let options = match ClientOptions::for_site(site) {
        Ok(o) => o,
        Err(e) => {
            out.push(check(
                Level::Fail,
                subject("token"),
                e.to_string(),
                Some(
                    "create the token (pveum user token add) and store its secret in the file"
                        .into(),
                ),
            ));
            return out;
        }
    };
    let client = match Client::new(options) {
        Ok(c) => c,
        Err(e) => {
            out.push(check(
                Level::Fail,
                subject("tls"),
                e.to_string(),
                Some(trust_fix(site)),
            ));
            return out;
        }
    };
    // Any HTTP answer, even a 401, means the handshake verified the certificate.
    let tls_ok = || {
        check(
            Level::Ok,
            subject("tls"),
            format!("certificate verified ({})", trust_text(&site.trust)),
            None,
        )
    };
    let version = match client.version().await {
        Ok(v) => {
            out.push(tls_ok());
            out.push(check(
                Level::Ok,
                subject("auth"),
                format!("token {} accepted", site.token_id),
                None,
            ));
            v
        }
        Err(
            e @ Error::Transport {
                kind: TransportKind::Tls,
                ..
            },
        ) => {
            out.push(check(
                Level::Fail,
                subject("tls"),
                e.to_string(),
                Some(trust_fix(site)),
            ));
            return out;
        }
        Err(e) if e.status() == Some(401) => {
            out.push(tls_ok());
            out.push(check(
                Level::Fail,
                subject("auth"),
                format!("token {} refused: {}", site.token_id, e.pve_message()),
                Some(format!(
                    "check token_id and the secret file; list tokens with `pveum user token list {}`",
                    site.token_id.split('!').next().unwrap_or("")
                )),
            ));
            return out;
        }
        Err(e) => {
            out.push(check(Level::Fail, subject("api"), e.to_string(), None));
            return out;
        }
    };

    let f = version.features();
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let uses_import = specs.iter().any(|s| {
        matches!(
            s.image,
            Image::Volume {
                kind: VolumeKind::Import,
                ..
            }
        )
    });
    let level = if !f.import_from || (uses_import && !f.import_content) {
        Level::Fail
    } else {
        Level::Ok
    };
    out.push(check(
        level,
        subject("version"),
        format!(
            "Proxmox VE {}: import-from {}, import content {}, resize as a task {}",
            version.version,
            yes_no(f.import_from),
            yes_no(f.import_content),
            yes_no(f.resize_is_task)
        ),
        (level == Level::Fail).then(|| {
            "upgrade to Proxmox VE 8.2 or later (import content), at least 7.2 (import-from)"
                .to_string()
        }),
    ));

    let uploads_seeds = specs.iter().any(|s| s.user_data.is_some());
    out.push(check_privileges(&client, site, uploads_seeds).await);

    let health = match client.cluster_health().await {
        Ok(h) => h,
        Err(e) => {
            out.push(check(Level::Fail, subject("cluster"), e.to_string(), None));
            return out;
        }
    };
    out.extend(check_health(site, &health, specs));

    if specs.is_empty() {
        out.push(check(
            Level::Skip,
            subject("specs"),
            "no specs for this site; storages, bridges and templates not checked",
            None,
        ));
        return out;
    }
    let resources = match client.vm_resources().await {
        Ok(r) => r,
        Err(e) => {
            out.push(check(
                Level::Fail,
                subject("resources"),
                e.to_string(),
                None,
            ));
            return out;
        }
    };
    out.extend(check_spec_needs(&client, site, &health, &resources, specs).await);
    out
}

fn trust_text(trust: &Trust) -> String {
    match trust {
        Trust::SystemRoots => "system roots".into(),
        Trust::CaFile(p) => format!("ca_file {}", p.display()),
        Trust::Fingerprint(fp) => format!(
            "pinned fingerprint {}",
            crate::pve::tls::format_fingerprint(fp)
        ),
    }
}

fn trust_fix(site: &SiteConfig) -> String {
    format!(
        "copy /etc/pve/pve-root-ca.pem from a node of {} and set ca_file to it, or set fingerprint \
         to the SHA-256 that `pvenode cert info` shows for pveproxy-ssl.pem",
        site.name
    )
}

async fn check_privileges(client: &Client, site: &SiteConfig, uploads_seeds: bool) -> Check {
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

fn check_health(site: &SiteConfig, health: &ClusterHealth, specs: &[&Spec]) -> Vec<Check> {
    let mut out = Vec::new();
    let subject = format!("{} quorum", site.name);
    if health.quorate {
        out.push(check(
            Level::Ok,
            subject,
            format!("quorate, {} node(s)", health.nodes.len()),
            None,
        ));
    } else {
        out.push(check(
            Level::Fail,
            subject,
            "the cluster has no quorum: proxsync creates and deletes nothing until it returns",
            Some("check corosync (`pvecm status`) on the nodes".into()),
        ));
    }
    let wanted: BTreeSet<&str> = specs.iter().map(|s| s.node.as_str()).collect();
    for (node, online) in &health.nodes {
        let subject = format!("{} node {node}", site.name);
        if *online {
            out.push(check(Level::Ok, subject, "online", None));
        } else {
            let level = if wanted.contains(node.as_str()) {
                Level::Fail
            } else {
                Level::Warn
            };
            out.push(check(
                level,
                subject,
                "offline: its VMs get no changes until it is back",
                Some("bring the node back, or move its specs to another node".into()),
            ));
        }
    }
    for node in wanted {
        if !health.nodes.contains_key(node) {
            out.push(check(
                Level::Fail,
                format!("{} node {node}", site.name),
                "named by a spec but not a node of this cluster",
                Some(format!(
                    "known nodes: {}",
                    health.nodes.keys().cloned().collect::<Vec<_>>().join(", ")
                )),
            ));
        }
    }
    out
}

async fn check_spec_needs(
    client: &Client,
    site: &SiteConfig,
    health: &ClusterHealth,
    resources: &[VmResource],
    specs: &[&Spec],
) -> Vec<Check> {
    let mut out = Vec::new();
    let nodes: BTreeSet<&str> = specs
        .iter()
        .map(|s| s.node.as_str())
        .filter(|n| health.node_healthy(n))
        .collect();
    let mut storages: BTreeMap<&str, Vec<NodeStorage>> = BTreeMap::new();
    let mut bridges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for node in &nodes {
        match client.node_storages(node, None).await {
            Ok(s) => {
                storages.insert(node, s);
            }
            Err(e) => out.push(check(
                Level::Fail,
                format!("{} node {node} storages", site.name),
                e.to_string(),
                None,
            )),
        }
        match client.node_bridges(node).await {
            Ok(b) => {
                bridges.insert(node, b.into_iter().map(|i| i.iface).collect());
            }
            Err(e) => out.push(check(
                Level::Fail,
                format!("{} node {node} bridges", site.name),
                e.to_string(),
                None,
            )),
        }
    }

    let mut seen = BTreeSet::new();
    for spec in specs {
        let node = spec.node.as_str();
        let (Some(node_storages), Some(node_bridges)) = (storages.get(node), bridges.get(node))
        else {
            continue;
        };
        if seen.insert(("storage", node.to_string(), spec.storage.clone())) {
            out.push(storage_check(
                site,
                node,
                node_storages,
                &spec.storage,
                "images",
                &spec.name,
            ));
        }
        if seen.insert(("bridge", node.to_string(), spec.network.clone())) {
            let subject = format!("{} bridge {node}/{}", site.name, spec.network);
            out.push(if node_bridges.contains(&spec.network) {
                check(Level::Ok, subject, "exists", None)
            } else {
                check(
                    Level::Fail,
                    subject,
                    format!(
                        "no such bridge (spec {}); the node has: {}",
                        spec.name,
                        join(node_bridges)
                    ),
                    Some("create the bridge on the node or change the spec's network".into()),
                )
            });
        }
        let image_key = format!("{:?}", spec.image);
        if seen.insert(("image", node.to_string(), image_key)) {
            out.push(image_check(client, site, node, node_storages, resources, spec).await);
        }
    }
    out
}

fn join<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    let v: Vec<&str> = items.into_iter().map(String::as_str).collect();
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

fn storage_check(
    site: &SiteConfig,
    node: &str,
    storages: &[NodeStorage],
    storage: &str,
    content: &str,
    spec: &str,
) -> Check {
    let subject = format!("{} storage {node}/{storage}", site.name);
    match storages.iter().find(|s| s.storage == storage) {
        None => check(
            Level::Fail,
            subject,
            format!(
                "no such storage on the node (spec {spec}); it has: {}",
                join(storages.iter().map(|s| &s.storage))
            ),
            Some(
                "add the storage to the node (Datacenter > Storage) or change the spec's storage"
                    .into(),
            ),
        ),
        Some(s) if !s.has_content(content) => check(
            Level::Fail,
            subject,
            format!(
                "holds content {:?}, not {content:?} (spec {spec})",
                s.content.as_deref().unwrap_or("")
            ),
            Some(format!(
                "add {content:?} to the storage's content types, or use another storage"
            )),
        ),
        Some(s) if s.active == Some(false) => check(
            Level::Fail,
            subject,
            "inactive",
            Some("check the storage on the node (`pvesm status`)".into()),
        ),
        Some(_) => check(
            Level::Ok,
            subject,
            format!("exists with {content} content"),
            None,
        ),
    }
}

async fn image_check(
    client: &Client,
    site: &SiteConfig,
    node: &str,
    storages: &[NodeStorage],
    resources: &[VmResource],
    spec: &Spec,
) -> Check {
    let subject = format!("{} image of {}", site.name, spec.name);
    let templates: Vec<&VmResource> = resources
        .iter()
        .filter(|r| r.is_qemu() && r.template == Some(true))
        .collect();
    match &spec.image {
        Image::Template { vmid } => match resources.iter().find(|r| r.vmid == *vmid) {
            Some(r) if r.template == Some(true) => check(
                Level::Ok,
                subject,
                format!(
                    "template {vmid} ({}) on {}",
                    r.name.as_deref().unwrap_or("?"),
                    r.node
                ),
                None,
            ),
            Some(_) => check(
                Level::Fail,
                subject,
                format!("VM {vmid} exists but is not a template"),
                Some(format!(
                    "convert it with `qm template {vmid}` or name a template"
                )),
            ),
            None => check(
                Level::Fail,
                subject,
                format!("no template with VMID {vmid} on this site"),
                Some(format!(
                    "templates here: {}",
                    join(
                        &templates
                            .iter()
                            .map(|t| format!("{} ({})", t.vmid, t.name.as_deref().unwrap_or("?")))
                            .collect::<Vec<_>>()
                    )
                )),
            ),
        },
        Image::Volume {
            storage,
            volume,
            kind,
        } => {
            let content = match kind {
                VolumeKind::Images => "images",
                VolumeKind::Import => "import",
                VolumeKind::Iso => "iso",
            };
            let store_check = storage_check(site, node, storages, storage, content, &spec.name);
            if store_check.level != Level::Ok {
                return Check {
                    subject,
                    ..store_check
                };
            }
            match client.storage_content(node, storage, Some(content)).await {
                Ok(volumes) if volumes.iter().any(|v| &v.volid == volume) => check(
                    Level::Ok,
                    subject,
                    format!("{volume} exists on {node}"),
                    None,
                ),
                Ok(_) => check(
                    Level::Fail,
                    subject,
                    format!("{volume} not found on {node}"),
                    Some(format!(
                        "upload it to {storage} ({content} content) on {node}, or fix the spec's image"
                    )),
                ),
                Err(e) => check(Level::Fail, subject, e.to_string(), None),
            }
        }
        Image::Name(name) => {
            let by_name: Vec<&&VmResource> = templates
                .iter()
                .filter(|t| t.name.as_deref() == Some(name))
                .collect();
            match by_name.len() {
                1 => check(
                    Level::Ok,
                    subject,
                    format!("template {name} is VMID {}", by_name[0].vmid),
                    None,
                ),
                0 => match volumes_with_stem(client, node, storages, name).await {
                    Ok(found) if found.len() == 1 => check(
                        Level::Ok,
                        subject,
                        format!("{name} is the volume {} on {node}", found[0]),
                        None,
                    ),
                    Ok(found) if found.is_empty() => check(
                        Level::Fail,
                        subject,
                        format!(
                            "no template named {name:?} on this site and no volume with that file stem on {node}"
                        ),
                        Some("name an existing template or volume, or upload the image".into()),
                    ),
                    Ok(found) => check(
                        Level::Fail,
                        subject,
                        format!("{name:?} is ambiguous: {}", found.join(", ")),
                        Some("use the full volume ID in the spec".into()),
                    ),
                    Err(e) => check(Level::Fail, subject, e.to_string(), None),
                },
                n => check(
                    Level::Fail,
                    subject,
                    format!("{n} templates are named {name:?}: ambiguous"),
                    Some("rename all but one, or use the template's VMID".into()),
                ),
            }
        }
    }
}

/// Volumes on the node's image-bearing storages whose file stem is `name`.
async fn volumes_with_stem(
    client: &Client,
    node: &str,
    storages: &[NodeStorage],
    name: &str,
) -> Result<Vec<String>, Error> {
    let mut found = Vec::new();
    for s in storages {
        for content in ["import", "iso", "images"] {
            if !s.has_content(content) {
                continue;
            }
            for v in client
                .storage_content(node, &s.storage, Some(content))
                .await?
            {
                if crate::pve::types::volume_stem(&v.volid) == Some(name) {
                    found.push(v.volid);
                }
            }
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}
