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
            s.image,
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
