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
    #[default]
    Qemu,
    Lxc,
}

impl GuestKind {
    /// The API path segment under `/nodes/{node}/`: `qemu` or `lxc`.
    pub fn api_path(self) -> &'static str {
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

    /// PVE's command line tool for the kind, named in advice (`qm unlock 100`).
    pub fn cli(self) -> &'static str {
        match self {
            GuestKind::Qemu => "qm",
            GuestKind::Lxc => "pct",
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
