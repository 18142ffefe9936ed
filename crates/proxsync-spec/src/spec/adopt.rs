//! `proxsync.io/adopt` with `proxsync.io/adopt-uuid` (a VM) or `proxsync.io/adopt-hwaddr` (a
//! container): a spec's consent to take over one guest that proxsync did not make (written by
//! `proxsync import`). The consent names the VMID and pins a random value PVE wrote at the
//! guest's create (a VM's `smbios1` uuid; a container, which has none, its first NIC's MAC),
//! so a VMID freed and reused by another guest is never taken.

use super::fields::Ctx;
use super::{AdoptConsent, GuestKind, MAX_VMID, MIN_VMID, Pos};
use crate::guest::GuestId;

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

/// The MAC of `proxsync.io/adopt-hwaddr`: as PVE writes a NIC's `hwaddr`, kept upper-case.
pub(super) fn check_hwaddr(text: &str) -> Result<String, String> {
    super::check_mac(text).map_err(|_| {
        format!(
            "metadata.annotations.{}: {text:?} is not a MAC address; write the container's first \
             NIC's hwaddr as `pct config VMID | grep net` shows it (e.g. BC:24:11:5E:0A:01)",
            super::ADOPT_HWADDR
        )
    })
}

/// The annotations of a consent as written: the VMID, a VM's uuid and a container's MAC,
/// each with where it is written (`None` inside: written but invalid, already reported).
#[derive(Default)]
pub(super) struct Written {
    pub vmid: Option<(Option<u32>, Pos)>,
    pub uuid: Option<(Option<String>, Pos)>,
    pub hwaddr: Option<(Option<String>, Pos)>,
}

/// The consent when the VMID and the proof of the spec's kind (a VM's uuid, a container's
/// MAC) are written and valid; one without the other, or the other kind's proof, is an error
/// (the proof is what keeps a reused VMID from being taken).
pub(super) fn consent(ctx: &mut Ctx, kind: GuestKind, w: Written) -> Option<Box<AdoptConsent>> {
    let (proof_key, what, wrong) = match kind {
        GuestKind::Qemu => (super::ADOPT_UUID, "the VM's smbios1 uuid", &w.hwaddr),
        GuestKind::Lxc => (
            super::ADOPT_HWADDR,
            "the MAC of the container's first NIC",
            &w.uuid,
        ),
    };
    if let Some((_, pos)) = wrong {
        let wrong_key = match kind {
            GuestKind::Qemu => super::ADOPT_HWADDR,
            GuestKind::Lxc => super::ADOPT_UUID,
        };
        ctx.error(
            *pos,
            format!(
                "metadata.annotations.{wrong_key} is not a {}'s: a {} is adopted with {proof_key} \
                 ({what}); proxsync import writes the right one",
                kind.noun(),
                kind.noun()
            ),
        );
        return None;
    }
    let proof = match kind {
        GuestKind::Qemu => w.uuid.map(|(u, pos)| (u.map(GuestId::Uuid), pos)),
        GuestKind::Lxc => w.hwaddr.map(|(m, pos)| (m.map(GuestId::Hwaddr), pos)),
    };
    match (w.vmid, proof) {
        (Some((Some(vmid), _)), Some((Some(proof), _))) => {
            Some(Box::new(AdoptConsent { vmid, proof }))
        }
        (Some((_, pos)), None) => {
            ctx.error(
                pos,
                format!(
                    "metadata.annotations.{} needs {proof_key} beside it: {what}, so a VMID \
                     reused by another guest is never taken (proxsync import writes both)",
                    super::ADOPT,
                ),
            );
            None
        }
        (None, Some((_, pos))) => {
            ctx.error(
                pos,
                format!(
                    "metadata.annotations.{proof_key} without {}: write the VMID to adopt too, \
                     or remove it",
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
        assert_eq!(
            check_hwaddr("bc:24:11:5e:0a:01").as_deref(),
            Ok("BC:24:11:5E:0A:01")
        );
        assert!(check_hwaddr("BC:24:11:5E:0A").is_err());
        assert!(check_hwaddr("01:24:11:5E:0A:01").is_err(), "multicast");
    }
}
