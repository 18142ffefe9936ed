//! `proxsync doctor`: checks that the config, each site and the specs fit together, one line
//! per check with ok/warn/fail and, for anything not ok, the fix.

use std::fmt;

use crate::config::{Config, SiteConfig};
use crate::spec::Spec;
use crate::spec::images::ImageSpec;

mod connection;
pub(crate) mod exercise;
mod health;
mod identity;
mod marker_key;
mod privileges;
mod resources;
mod same_install;
mod secrets;
mod signing;
mod sops;
mod source;
mod versions;

use health::check_health;
use privileges::check_privileges;
use resources::check_spec_needs;
pub(crate) use signing::check_tip;
pub(crate) use sops::check_sops;
pub(crate) use source::check_rewind;
pub(crate) use versions::version_diagnostics;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
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
pub(crate) struct Check {
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
pub(crate) async fn run(config: &Config, set: &crate::spec::SpecSet) -> Vec<Check> {
    let specs = &set.specs;
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
    out.push(marker_key::check_marker_key(&config.marker_key_path()));
    out.extend(source::check_config_warnings(config));
    out.extend(signing::check_signing(config));
    out.extend(secrets::check_secrets(config));
    // Read-only: a missing or broken key is the line above; markers are then not checked.
    let key = crate::ownership::MarkerKey::load_file(&config.marker_key_path())
        .ok()
        .flatten();
    // Another install's specs (outside `[source] selector`) are its business.
    let specs: Vec<&Spec> = specs.iter().filter(|s| config.selects(&s.labels)).collect();
    for spec in &specs {
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
        let site_specs: Vec<&Spec> = specs
            .iter()
            .copied()
            .filter(|s| s.site == site.name)
            .collect();
        let needed = crate::image_sync::needed_on(&set.images, site_specs.iter().copied());
        let images: Vec<(&ImageSpec, Vec<&str>)> = (set.images.iter())
            .filter(|i| i.site == site.name)
            .map(|i| {
                let nodes = needed.get(i.name.as_str()).into_iter().flatten();
                (i.as_ref(), nodes.copied().collect())
            })
            .collect();
        out.extend(check_site(site, config, key.as_ref(), &site_specs, &images).await);
    }
    out
}

/// True when the report has a failure (exit code 1).
pub(crate) fn failed(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.level == Level::Fail)
}

async fn check_site(
    site: &SiteConfig,
    config: &Config,
    key: Option<&crate::ownership::MarkerKey>,
    specs: &[&Spec],
    images: &[(&ImageSpec, Vec<&str>)],
) -> Vec<Check> {
    let ownership_tag = config.ownership_tag();
    let ownership_tag = ownership_tag.as_str();
    let name = site.name.as_str();
    let subject = |what: &str| format!("{name} {what}");
    let mut out = Vec::new();

    // DNS and TCP first, so a failure says which layer is wrong.
    let Some(addr) = connection::endpoint_addr(site, &mut out) else {
        return out;
    };
    let Some(first) = connection::resolve(site, &addr, &mut out).await else {
        return out;
    };
    if !connection::connect(site, first, &mut out).await {
        return out;
    }

    // The secret, then TLS and authentication with the first real request.
    let Some(client) = connection::client(site, &mut out) else {
        return out;
    };
    let Some(version) = connection::authenticate(site, &client, &mut out).await else {
        return out;
    };

    out.push(versions::check_version(site, &version, specs));
    out.extend(versions::ha_checks(site, &version, specs));
    out.extend(versions::archive_checks(site, &version, specs));
    out.extend(versions::init_checks(site, &version, specs));

    // The tags proxsync writes on this site's VMs.
    let tags: std::collections::BTreeSet<String> = std::iter::once(ownership_tag.to_string())
        .chain(specs.iter().flat_map(|s| s.tags.iter().cloned()))
        .collect();
    out.extend(check_privileges(&client, site, &version, specs, images, &tags).await);

    let status = match client.cluster_status().await {
        Ok(s) => s,
        Err(e) => {
            out.push(check(Level::Fail, subject("cluster"), e.to_string(), None));
            return out;
        }
    };
    let health = crate::pve::types::ClusterHealth::from_entries(&status);
    out.extend(check_health(site, &health, specs));
    out.push(identity::check_identity(&client, site, &config.state_dir, &status).await);

    let resources = match client.vm_resources().await {
        Ok(r) => r.guests,
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
    out.push(
        same_install::check_same_install(&client, site, &config.install_id, key, &resources).await,
    );
    if specs.is_empty() {
        out.push(check(
            Level::Skip,
            subject("specs"),
            "no specs for this site; storages, bridges and templates not checked",
            None,
        ));
        return out;
    }
    out.extend(check_spec_needs(&client, site, &health, &resources, specs, ownership_tag).await);
    out
}
