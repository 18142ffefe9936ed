//! The two kinds of guest a Proxmox VE cluster runs: QEMU VMs and LXC containers. One VMID
//! space holds both; the kind decides the API path (`/nodes/{node}/qemu` or `/lxc`), the HA
//! resource's id (`vm:N` or `ct:N`) and the spec's `kind`. Everything else about a guest
//! (its marker, record, intent, the valves) is the same for both, so the planner and the
//! executor carry the kind as a value rather than a copy of their code per kind.

use serde::{Deserialize, Serialize};

/// What a VMID holds: a QEMU VM or an LXC container.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum GuestKind {
    /// A QEMU VM (`/nodes/{node}/qemu`, `kind: ProxmoxVM`); the default.
    #[default]
    Qemu,
    /// An LXC container (`/nodes/{node}/lxc`, `kind: ProxmoxLXC`).
    Lxc,
}

impl GuestKind {
    /// The API path segment under `/nodes/{node}/`: `qemu` or `lxc`.
    pub(crate) fn api_path(self) -> &'static str {
        match self {
            GuestKind::Qemu => "qemu",
            GuestKind::Lxc => "lxc",
        }
    }

    /// The HA resource id of `vmid`: `vm:N` or `ct:N` (pve-ha-manager's service ids).
    pub fn ha_sid(self, vmid: u32) -> String {
        match self {
            GuestKind::Qemu => format!("vm:{vmid}"),
            GuestKind::Lxc => format!("ct:{vmid}"),
        }
    }

    /// The spec `kind` that makes this guest.
    pub fn spec_kind(self) -> &'static str {
        match self {
            GuestKind::Qemu => "ProxmoxVM",
            GuestKind::Lxc => "ProxmoxLXC",
        }
    }

    /// The word for one guest of this kind in messages: `VM` or `container`.
    pub fn noun(self) -> &'static str {
        match self {
            GuestKind::Qemu => "VM",
            GuestKind::Lxc => "container",
        }
    }

    /// One guest of this kind named in a message: `VM 101` or `container 101`.
    pub fn named(self, vmid: u32) -> String {
        format!("{} {vmid}", self.noun())
    }

    /// The spec field naming what a guest of this kind is made from: `image` or `template`.
    pub fn image_field(self) -> &'static str {
        match self {
            GuestKind::Qemu => "image",
            GuestKind::Lxc => "template",
        }
    }

    /// The spec field listing the kind's drives: `disks` or `mountPoints`.
    pub fn drives_field(self) -> &'static str {
        match self {
            GuestKind::Qemu => "disks",
            GuestKind::Lxc => "mountPoints",
        }
    }

    /// The spec field naming the drives whose volumes are destroyed when they leave the spec:
    /// `destroyDisks` or `destroyVolumes`.
    pub fn destroy_field(self) -> &'static str {
        match self {
            GuestKind::Qemu => "destroyDisks",
            GuestKind::Lxc => "destroyVolumes",
        }
    }

    /// PVE's command line tool for the kind, named in advice (`qm unlock 100`).
    pub fn cli(self) -> &'static str {
        match self {
            GuestKind::Qemu => "qm",
            GuestKind::Lxc => "pct",
        }
    }
}

/// What tells one guest from another at the same VMID: a random value PVE wrote when it made
/// the guest. A VM's smbios1 uuid (qemu-server makes one at every create and clone), a
/// container's first NIC's MAC (pve-container makes one per NIC). A spec's consent to adopt pins
/// it (`proxsync.io/adopt-uuid`, `adopt-hwaddr`), and a record keeps the one of the guest
/// proxsync made or adopted, so a guest whose marker line a person removed is still known.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GuestId {
    /// A VM's smbios1 uuid, lower-case.
    Uuid(String),
    /// A container's first NIC's MAC, upper-case.
    Hwaddr(String),
}

impl GuestId {
    /// A VM's id from its smbios1 uuid, when it is one (8-4-4-4-12 hex digits): anything else
    /// (a value typed by hand, a garbled answer) proves nothing.
    pub fn uuid(uuid: &str) -> Option<GuestId> {
        let groups: Vec<&str> = uuid.split('-').collect();
        let shape = groups.len() == 5
            && groups
                .iter()
                .zip([8, 4, 4, 4, 12])
                .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
        // An all-zero uuid is no guest's own.
        let zero = uuid.bytes().all(|b| b == b'0' || b == b'-');
        (shape && !zero).then(|| GuestId::Uuid(uuid.to_ascii_lowercase()))
    }

    /// A container's id from its first NIC's MAC, when it is a unicast MAC (six pairs of hex
    /// digits): anything else proves nothing.
    pub fn hwaddr(mac: &str) -> Option<GuestId> {
        let pairs: Vec<&str> = mac.split(':').collect();
        let shape = pairs.len() == 6
            && pairs
                .iter()
                .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
        let unicast = u8::from_str_radix(pairs.first().copied().unwrap_or("01"), 16)
            .is_ok_and(|b| b & 1 == 0);
        (shape && unicast).then(|| GuestId::Hwaddr(mac.to_ascii_uppercase()))
    }

    /// The kind of guest such an id belongs to.
    pub fn kind(&self) -> GuestKind {
        match self {
            GuestId::Uuid(_) => GuestKind::Qemu,
            GuestId::Hwaddr(_) => GuestKind::Lxc,
        }
    }

    /// The value alone.
    pub fn value(&self) -> &str {
        match self {
            GuestId::Uuid(v) | GuestId::Hwaddr(v) => v,
        }
    }
}

impl std::fmt::Display for GuestId {
    /// As a message names it: `smbios1 uuid 3f25...` or `first NIC's MAC BC:24:...`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GuestId::Uuid(v) => write!(f, "smbios1 uuid {v}"),
            GuestId::Hwaddr(v) => write!(f, "first NIC's MAC {v}"),
        }
    }
}

impl std::fmt::Display for GuestKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.api_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_id_is_only_a_well_formed_value() {
        assert_eq!(
            GuestId::uuid("3F2504E0-4F89-11D3-9A0C-0305E82C3301"),
            Some(GuestId::Uuid("3f2504e0-4f89-11d3-9a0c-0305e82c3301".into()))
        );
        for bad in [
            "",
            "garbage",
            "3f2504e0-4f89-11d3-9a0c",
            "00000000-0000-0000-0000-000000000000",
            "3f2504e0-4f89-11d3-9a0c-0305e82c330g",
        ] {
            assert_eq!(GuestId::uuid(bad), None, "{bad:?}");
        }
        assert_eq!(
            GuestId::hwaddr("bc:24:11:5e:0a:01"),
            Some(GuestId::Hwaddr("BC:24:11:5E:0A:01".into()))
        );
        for bad in [
            "",
            "BC:24:11:5E:0A",
            "01:00:5E:00:00:01",
            "BC:24:11:5E:0A:0Z",
        ] {
            assert_eq!(GuestId::hwaddr(bad), None, "{bad:?}");
        }
        assert_eq!(GuestId::Uuid("u".into()).kind(), GuestKind::Qemu);
        assert_eq!(GuestId::Hwaddr("m".into()).to_string(), "first NIC's MAC m");
    }

    #[test]
    fn paths_and_ids_follow_pve() {
        assert_eq!(GuestKind::Qemu.api_path(), "qemu");
        assert_eq!(GuestKind::Lxc.api_path(), "lxc");
        assert_eq!(GuestKind::Qemu.ha_sid(100), "vm:100");
        assert_eq!(GuestKind::Lxc.ha_sid(101), "ct:101");
        assert_eq!(GuestKind::Lxc.spec_kind(), "ProxmoxLXC");
    }

    #[test]
    fn named_says_the_kind_and_the_vmid() {
        assert_eq!(GuestKind::Qemu.named(101), "VM 101");
        assert_eq!(GuestKind::Lxc.named(101), "container 101");
    }
}
