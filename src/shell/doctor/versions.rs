//! PVE's version and the features proxsync uses (import-from, import content, resize as a task).

use super::{Check, Level, check};
use crate::config::SiteConfig;
use crate::pve::types::{
    IMPORT_CONTENT_SINCE, IMPORT_FROM_SINCE, IMPORT_UPLOAD_SINCE, Version, release_name,
};
use crate::spec::{Image, Spec, VolumeKind};

/// The version line: fails without import-from, or without import content when a spec imports.
pub(super) fn check_version(site: &SiteConfig, version: &Version, specs: &[&Spec]) -> Check {
    let f = version.features();
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let uses_import = specs.iter().any(|s| {
        matches!(
            s.image(),
            Image::Volume {
                kind: VolumeKind::Import,
                ..
            }
        )
    });
    let mut needs = Vec::new();
    if !f.import_from {
        needs.push(format!(
            "Proxmox VE {} or later for the import-from disk option",
            release_name(IMPORT_FROM_SINCE)
        ));
    }
    if uses_import && !f.import_content {
        needs.push(format!(
            "Proxmox VE {} or later for import-from of `import` content (qemu-server 8.2.7, \
             pve-storage 8.2.8), which specs of this site use",
            release_name(IMPORT_CONTENT_SINCE)
        ));
    }
    let level = if needs.is_empty() {
        Level::Ok
    } else {
        Level::Fail
    };
    check(
        level,
        format!("{} version", site.name),
        format!(
            "Proxmox VE {}: import-from {}, import content {} (since {}), uploads into import \
             content {} (since {}), resize as a task {}",
            version.version,
            yes_no(f.import_from),
            yes_no(f.import_content),
            release_name(IMPORT_CONTENT_SINCE),
            yes_no(f.import_upload),
            release_name(IMPORT_UPLOAD_SINCE),
            yes_no(f.resize_is_task)
        ),
        (level == Level::Fail).then(|| format!("upgrade: {}", needs.join("; "))),
    )
}

/// A line per spec whose `ha` this site's PVE release refuses (`ha.group` on PVE 9).
pub(super) fn ha_checks(site: &SiteConfig, version: &Version, specs: &[&Spec]) -> Vec<Check> {
    specs
        .iter()
        .filter_map(|s| {
            let why =
                s.ha.as_ref()?
                    .refusal_on(&site.name, &version.version, version.triple().0)?;
            Some(check(
                Level::Fail,
                format!("{} spec {} ha", site.name, s.name),
                format!("{}: {why}", s.file),
                Some("replace ha.group with ha.nodes (the group's nodes and priorities)".into()),
            ))
        })
        .collect()
}

/// A line per container spec whose template archive this site's pve-storage does not take
/// (`.tar.bz2` before PVE 8.3, a bare `.tar` before 9.1).
pub(super) fn archive_checks(site: &SiteConfig, version: &Version, specs: &[&Spec]) -> Vec<Check> {
    specs
        .iter()
        .filter_map(|s| {
            let why = crate::spec::container::archive_refusal(
                s.image(),
                version.triple(),
                &version.version,
            )?;
            Some(check(
                Level::Fail,
                format!("{} spec {} template", site.name, s.name),
                format!("{}: {why}", s.file),
                None,
            ))
        })
        .collect()
}

/// A line per container spec that names PVE 9.1's options (`entrypoint`, `env`, a NIC's
/// `hostManaged`) on an older site, which refuses them (`spec::ct_init::refusal`).
pub(super) fn init_checks(site: &SiteConfig, version: &Version, specs: &[&Spec]) -> Vec<Check> {
    specs
        .iter()
        .filter_map(|s| {
            let named = crate::spec::ct_init::named(s.container()?);
            let why = crate::spec::ct_init::refusal(&named, version.triple(), &version.version)?;
            Some(check(
                Level::Fail,
                format!("{} spec {} {}", site.name, s.name, named.join(", ")),
                format!("{}: {why}", s.file),
                None,
            ))
        })
        .collect()
}

/// `validate --config`: what the sites' PVE releases refuse in the specs (`ha.group` on PVE
/// 9; before 9.1 an OCI image and a container's `entrypoint`, `env` and `hostManaged`; an
/// archive format an older pve-storage does not take), as `file:line:col` errors. Only sites
/// whose specs hold such a field are asked for their version (`GET /version`); a site that
/// cannot be asked gets a warning saying so.
pub(crate) async fn version_diagnostics(
    config: &crate::config::Config,
    specs: &crate::spec::Specs,
) -> Vec<crate::spec::Diagnostic> {
    use crate::spec::Diagnostic;
    let mut out = Vec::new();
    for site in &config.sites {
        let asking: Vec<(&Spec, crate::spec::Pos)> = specs
            .iter()
            .filter(|s| s.site == site.name)
            .filter_map(|s| Some((s, release_dependent(s)?)))
            .collect();
        let Some((first, pos)) = asking.first() else {
            continue;
        };
        let version = match site_version(site).await {
            Ok(v) => v,
            Err(e) => {
                out.push(
                    Diagnostic::warning(
                        &first.file,
                        *pos,
                        format!(
                            "cannot read site {}'s Proxmox VE version to check the fields its \
                             release may refuse (ha.group on PVE 9; OCI images, entrypoint, env \
                             and hostManaged before 9.1): {e}; proxsync doctor checks them",
                            site.name
                        ),
                    )
                    .for_spec(Some(&first.name)),
                );
                continue;
            }
        };
        for (s, _) in asking {
            for (pos, why) in release_refusals(s, &site.name, &version) {
                out.push(Diagnostic::error(&s.file, pos, why).for_spec(Some(&s.name)));
            }
        }
    }
    out
}

/// Where spec `s` first holds a field that some PVE release refuses, if it does.
fn release_dependent(s: &Spec) -> Option<crate::spec::Pos> {
    if let Some(ha) = s.ha.as_ref().filter(|h| h.group.is_some()) {
        return Some(ha.group_pos.unwrap_or_default());
    }
    let ct = s.container()?;
    // Refused by the oldest release, so by some.
    if crate::spec::container::archive_refusal(&ct.template, (0, 0, 0), "").is_some() {
        return Some(ct.template_pos);
    }
    (!crate::spec::ct_init::named(ct).is_empty()).then_some(ct.init_pos)
}

/// What a site running `version` refuses in spec `s`: where each is written, and why.
fn release_refusals(s: &Spec, site: &str, version: &Version) -> Vec<(crate::spec::Pos, String)> {
    let (release, said) = (version.triple(), version.version.as_str());
    let mut out = Vec::new();
    if let Some(ha) = &s.ha
        && let Some(why) = ha.refusal_on(site, said, release.0)
    {
        out.push((ha.group_pos.unwrap_or_default(), why));
    }
    if let Some(ct) = s.container() {
        if let Some(why) = crate::spec::container::archive_refusal(&ct.template, release, said) {
            out.push((ct.template_pos, why));
        }
        let named = crate::spec::ct_init::named(ct);
        if let Some(why) = crate::spec::ct_init::refusal(&named, release, said) {
            out.push((ct.init_pos, why));
        }
    }
    out
}

/// The site's PVE version: its token, TLS trust and `GET /version`.
async fn site_version(site: &SiteConfig) -> Result<Version, String> {
    let options = crate::pve::ClientOptions::for_site(site).map_err(|e| e.to_string())?;
    let client = crate::pve::Client::new(options).map_err(|e| e.to_string())?;
    client.version().await.map_err(|e| e.to_string())
}
