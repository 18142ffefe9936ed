//! PVE's version and the features proxsync uses (import-from, import content, resize as a task).

use super::{Check, Level, check};
use crate::config::SiteConfig;
use crate::pve::types::Version;
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
    let level = if !f.import_from || (uses_import && !f.import_content) {
        Level::Fail
    } else {
        Level::Ok
    };
    check(
        level,
        format!("{} version", site.name),
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
    )
}
