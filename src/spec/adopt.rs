//! `proxsync.io/adopt` and `proxsync.io/adopt-uuid`: a spec's consent to take over one VM that
//! proxsync did not make (written by `proxsync import`). The consent names the VMID and pins
//! the VM's `smbios1` uuid, so a VMID freed and reused by another VM is never taken.

use super::fields::Ctx;
use super::{AdoptConsent, MAX_VMID, MIN_VMID, Pos};

/// The VMID of `proxsync.io/adopt`: a string holding a VMID.
pub(super) fn check_vmid(text: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .ok()
        .filter(|v| (MIN_VMID..=MAX_VMID).contains(&u64::from(*v)))
        .ok_or_else(|| {
            format!(
                "metadata.annotations.{}: {text:?} is not a VMID; write the VMID of the VM to \
                 adopt, {MIN_VMID}..{MAX_VMID}, as a string (\"105\")",
                super::ADOPT
            )
        })
}

/// The uuid of `proxsync.io/adopt-uuid`: as PVE writes `smbios1`'s `uuid` (8-4-4-4-12 hex
/// digits), kept lower-case for comparison.
pub(super) fn check_uuid(text: &str) -> Result<String, String> {
    let groups: Vec<&str> = text.split('-').collect();
    let lengths = [8, 4, 4, 4, 12];
    let valid = groups.len() == lengths.len()
        && groups
            .iter()
            .zip(lengths)
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
    if valid {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(format!(
            "metadata.annotations.{}: {text:?} is not a uuid; write the VM's smbios1 uuid as \
             `qm config VMID | grep smbios1` shows it (8-4-4-4-12 hex digits)",
            super::ADOPT_UUID
        ))
    }
}

/// The consent when both annotations are written and valid; one without the other is an
/// error (the uuid is what keeps a reused VMID from being taken).
pub(super) fn consent(
    ctx: &mut Ctx,
    vmid: Option<(Option<u32>, Pos)>,
    uuid: Option<(Option<String>, Pos)>,
) -> Option<Box<AdoptConsent>> {
    match (vmid, uuid) {
        (Some((Some(vmid), _)), Some((Some(uuid), _))) => {
            Some(Box::new(AdoptConsent { vmid, uuid }))
        }
        (Some((_, pos)), None) => {
            ctx.error(
                pos,
                format!(
                    "metadata.annotations.{} needs {} beside it: the VM's smbios1 uuid, so a \
                     VMID reused by another VM is never taken (proxsync import writes both)",
                    super::ADOPT,
                    super::ADOPT_UUID
                ),
            );
            None
        }
        (None, Some((_, pos))) => {
            ctx.error(
                pos,
                format!(
                    "metadata.annotations.{} without {}: write the VMID to adopt too, or \
                     remove it",
                    super::ADOPT_UUID,
                    super::ADOPT
                ),
            );
            None
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmids_and_uuids_are_checked_as_pve_writes_them() {
        assert_eq!(check_vmid("105"), Ok(105));
        assert!(check_vmid("99").is_err());
        assert!(check_vmid("1000000000").is_err());
        assert!(check_vmid("10 5").is_err());
        assert_eq!(
            check_uuid("3F2504E0-4F89-11D3-9A0C-0305E82C3301").as_deref(),
            Ok("3f2504e0-4f89-11d3-9a0c-0305e82c3301")
        );
        assert!(check_uuid("3f2504e0-4f89-11d3-9a0c-0305e82c330").is_err());
        assert!(check_uuid("3f2504e0-4f89-11d3-9a0c-0305e82c330g").is_err());
        assert!(check_uuid("3f2504e04f8911d39a0c0305e82c3301").is_err());
    }
}
