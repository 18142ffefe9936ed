//! `proxsync doctor`: checks that the config, each site and the specs fit together, one line
//! per check with ok/warn/fail and, for anything not ok, the fix.

use std::fmt;

use crate::config::{Config, SiteConfig};
use crate::pve::{Client, ClientOptions, Error, TransportKind};
use crate::spec::{Image, Spec, VolumeKind};

mod connection;
mod health;
mod privileges;
mod resources;

use connection::{trust_fix, trust_text};
use health::check_health;
use privileges::check_privileges;
pub use privileges::{REQUIRED_PRIVILEGES, SEED_PRIVILEGES};
use resources::check_spec_needs;

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
