//! The `image` field: a template VMID, a volume ID, or a plain name.

use super::names::{MAX_IMAGE_NAME, check_property_chars, check_storage};
use super::{Image, VolumeKind};

/// Smallest VMID Proxmox allows.
pub const MIN_VMID: u64 = 100;
/// Largest VMID Proxmox allows.
pub const MAX_VMID: u64 = 999_999_999;

/// Disk formats PVE accepts in `import` content (pve-storage `IMPORT_EXT_RE_1` minus the
/// whole-VM formats `.ova`/`.ovf`, whose disks are named as `X.ova/disk.vmdk`).
const IMPORT_DISK_EXTS: [&str; 3] = ["qcow2", "raw", "vmdk"];

/// What the three forms look like, for messages.
const FORMS: &str = "a template VMID (100..999999999, e.g. 9000), a volume ID \
                     (storage:import/disk.qcow2, storage:iso/installer.iso, storage:vm-9000-disk-0) \
                     or a template/image name (e.g. debian-12-template)";

/// A template VMID written as a YAML integer.
pub(crate) fn image_from_int(n: i128) -> Result<Image, String> {
    match u32::try_from(n) {
        Ok(vmid) if (MIN_VMID..=MAX_VMID).contains(&u64::from(vmid)) => {
            Ok(Image::Template { vmid })
        }
        _ => Err(format!(
            "image {n} is not a valid template VMID: Proxmox VMIDs are 100..999999999"
        )),
    }
}

/// Parses the string form of `image`.
pub(crate) fn parse_image(text: &str) -> Result<Image, String> {
    if text.is_empty() {
        return Err(format!("image is empty; expected {FORMS}"));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return match text.parse::<i128>() {
            Ok(n) => image_from_int(n),
            Err(_) => Err(format!(
                "image {text:?} is not a valid template VMID: Proxmox VMIDs are 100..999999999"
            )),
        };
    }
    check_property_chars("image", text)?;
    match text.split_once(':') {
        Some((storage, volname)) => parse_volume(text, storage, volname),
        None => parse_name(text),
    }
}

/// A template name or a file stem: `[A-Za-z0-9][A-Za-z0-9._-]*`.
fn parse_name(text: &str) -> Result<Image, String> {
    let ok = text.len() <= MAX_IMAGE_NAME
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(Image::Name(text.to_string()))
    } else {
        Err(format!(
            "image {text:?} is not valid: a name is up to 255 characters of letters, digits, '.', \
             '_' and '-', starting with a letter or digit; expected {FORMS}"
        ))
    }
}

/// `storage:volname`, classified by content type.
fn parse_volume(text: &str, storage: &str, volname: &str) -> Result<Image, String> {
    check_storage(storage).map_err(|e| format!("image {text:?}: {e}"))?;
    check_volname(text, volname)?;
    let volume = |kind| {
        Ok(Image::Volume {
            storage: storage.to_string(),
            volume: text.to_string(),
            kind,
        })
    };
    if let Some(file) = volname.strip_prefix("iso/") {
        let lower = file.to_ascii_lowercase();
        if lower.ends_with(".iso") && !file.contains('/') {
            return volume(VolumeKind::Iso);
        }
        let stem = file.rsplit('/').next().unwrap_or(file);
        let stem = stem.rsplit_once('.').map_or(stem, |(s, _)| s);
        return Err(format!(
            "image {text:?} is a disk image kept in `iso` content, and Proxmox cannot import a disk \
             from `iso` content (only an .iso installer can be used from there). Put the file in a \
             storage with `import` content and name it {storage}:import/{stem}.qcow2 (a cloud \
             `.img` is a qcow2 file: rename it to .qcow2), or use an .iso installer"
        ));
    }
    if let Some(file) = volname.strip_prefix("import/") {
        return match classify_import(file) {
            Ok(()) => volume(VolumeKind::Import),
            Err(why) => Err(format!("image {text:?}: {why}")),
        };
    }
    for content in ["vztmpl", "backup", "snippets"] {
        if volname.starts_with(&format!("{content}/")) {
            return Err(format!(
                "image {text:?} is in `{content}` content, which holds no VM disk; expected {FORMS}"
            ));
        }
    }
    volume(VolumeKind::Images)
}

/// The file of an `import/` volume: `X.qcow2|raw|vmdk`, or a disk inside an OVA.
fn classify_import(file: &str) -> Result<(), String> {
    let ext_of = |f: &str| f.rsplit_once('.').map(|(_, e)| e.to_string());
    let (outer, inner) = match file.split_once('/') {
        Some((outer, inner)) => (outer, Some(inner)),
        None => (file, None),
    };
    let valid = "import content holds .qcow2, .raw and .vmdk disks (pve-storage IMPORT_EXT_RE_1; \
                 extensions are case-sensitive), or a disk inside an OVA as X.ova/disk.vmdk";
    match (ext_of(outer).as_deref(), inner) {
        (Some(e), None) if IMPORT_DISK_EXTS.contains(&e) => Ok(()),
        (Some("ova"), Some(member)) => match ext_of(member) {
            Some(e) if IMPORT_DISK_EXTS.contains(&e.as_str()) && !member.contains('/') => Ok(()),
            _ => Err(format!("{member:?} is not a disk inside the OVA; {valid}")),
        },
        (Some("ova" | "ovf"), None) => Err(format!(
            "an .ova/.ovf describes a whole VM, not one disk; name one of its disks (e.g. {outer}/disk1.vmdk); {valid}"
        )),
        (Some(e), None) if IMPORT_DISK_EXTS.contains(&e.to_ascii_lowercase().as_str()) => {
            Err(format!("extension .{e} must be lower case ({valid})"))
        }
        (Some("img"), None) => Err(format!(
            "Proxmox does not list .img files in import content; rename it to .qcow2 (a cloud \
             .img is qcow2 inside) or .raw; {valid}"
        )),
        _ => Err(format!("{file:?} is not an importable disk; {valid}")),
    }
}

/// The part after `storage:`: PVE's safe file characters plus `/`, no empty, `.` or `..`
/// components, no absolute paths.
fn check_volname(text: &str, volname: &str) -> Result<(), String> {
    if volname.is_empty() {
        return Err(format!(
            "image {text:?} has nothing after the storage; expected {FORMS}"
        ));
    }
    if let Some(c) = volname
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '+' | '_' | '/')))
    {
        return Err(format!(
            "image {text:?} contains {c:?}; a volume name is made of letters, digits, '-', '.', \
             '+', '_' and '/'"
        ));
    }
    if volname
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(format!(
            "image {text:?}: the volume path may not be absolute, contain '//', or '.'/'..' components"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vol(s: &str, kind: VolumeKind) -> Image {
        Image::Volume {
            storage: s
                .split_once(':')
                .map(|(a, _)| a.to_string())
                .unwrap_or_default(),
            volume: s.to_string(),
            kind,
        }
    }

    #[test]
    fn template_vmids() {
        assert_eq!(parse_image("9000"), Ok(Image::Template { vmid: 9000 }));
        assert_eq!(parse_image("100"), Ok(Image::Template { vmid: 100 }));
        assert_eq!(
            parse_image("999999999"),
            Ok(Image::Template { vmid: 999_999_999 })
        );
        assert!(parse_image("99").is_err());
        assert!(parse_image("1000000000").is_err());
        assert!(parse_image("99999999999999999999999999999999999999999").is_err());
        assert_eq!(image_from_int(9001), Ok(Image::Template { vmid: 9001 }));
        assert!(image_from_int(-1).is_err());
        assert!(image_from_int(i128::MAX).is_err());
    }

    #[test]
    fn volumes() {
        let cases = [
            ("local:iso/debian-12.7.0-amd64-netinst.iso", VolumeKind::Iso),
            ("local:iso/WIN.ISO", VolumeKind::Iso),
            (
                "local:import/debian-12-genericcloud-amd64.qcow2",
                VolumeKind::Import,
            ),
            ("nfs1:import/disk.raw", VolumeKind::Import),
            ("local:import/appliance.ova/disk1.vmdk", VolumeKind::Import),
            ("local-lvm:vm-9000-disk-0", VolumeKind::Images),
            ("local:9000/base-9000-disk-0.qcow2", VolumeKind::Images),
        ];
        for (s, kind) in cases {
            assert_eq!(parse_image(s), Ok(vol(s, kind)), "{s}");
        }
    }

    #[test]
    fn cloud_image_in_iso_content_is_refused_with_the_fix() {
        let e = parse_image("local:iso/ubuntu-22.04-cloud.img").unwrap_err();
        assert!(e.contains("cannot import"), "{e}");
        assert!(e.contains("local:import/ubuntu-22.04-cloud.qcow2"), "{e}");
        assert!(parse_image("local:iso/x.qcow2").is_err());
    }

    #[test]
    fn bad_volumes() {
        for bad in [
            "local:import/x.img",
            "local:import/x.QCOW2",
            "local:import/x.ova",
            "local:import/x.ovf",
            "local:import/x",
            "local:vztmpl/debian.tar.zst",
            "local:",
            "l:x",
            "local:/etc/passwd",
            "local:import/../x.qcow2",
            "local:a//b",
            "local:import/x.qcow2,cache=none",
            "local:import/a b.qcow2",
            "local:import/x.qcow2;rm",
            "local:import/x$.qcow2",
        ] {
            assert!(parse_image(bad).is_err(), "{bad}");
        }
        assert!(
            parse_image("local:import/x.qcow2,cache=none")
                .unwrap_err()
                .contains("comma")
        );
        assert!(
            parse_image("local:import/x.img")
                .unwrap_err()
                .contains(".qcow2")
        );
    }

    #[test]
    fn names() {
        assert_eq!(
            parse_image("debian-12-template"),
            Ok(Image::Name("debian-12-template".into()))
        );
        assert_eq!(
            parse_image("ubuntu-22.04-cloud"),
            Ok(Image::Name("ubuntu-22.04-cloud".into()))
        );
        for bad in ["", "-x", ".x", "a b", "a/b", "a*", &"a".repeat(256)] {
            assert!(parse_image(bad).is_err(), "{bad:?}");
        }
    }
}
