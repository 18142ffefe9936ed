//! The NICs of a spec as PVE parameters. The short form (`network: vmbr0`) manages `net0`'s
//! bridge only, as it always did. With `networks`, every NIC is declared: `netN` is rewritten
//! when it differs (compared the way PVE reads it: MAC case, `firewall=0` or `queues=0` as
//! absent, `rate` as a number) and a NIC beyond the list is removed (a NIC holds no data).
//!
//! A MAC is never regenerated: PVE gives a NIC sent without a MAC a fresh one (qemu-server
//! `parse_net` in `update_vm_api`), so an update always carries the NIC's current MAC unless
//! the spec sets one.

use crate::pve::values::{NetValue, current_bridge, pve_bool};
use crate::pve::{Error as PveError, VmParams};
use crate::spec::{MAX_NICS, Nic, VmSpec};

use super::hardware::{Changes, Current};

/// `net0`..`net31`, for the names of what changed.
const NIC_KEYS: [&str; MAX_NICS] = [
    "net0", "net1", "net2", "net3", "net4", "net5", "net6", "net7", "net8", "net9", "net10",
    "net11", "net12", "net13", "net14", "net15", "net16", "net17", "net18", "net19", "net20",
    "net21", "net22", "net23", "net24", "net25", "net26", "net27", "net28", "net29", "net30",
    "net31",
];

/// The options of a NIC proxsync manages; the others (`link_down`) are kept as they are.
const MANAGED: [&str; 7] = [
    "bridge", "tag", "trunks", "mtu", "rate", "firewall", "queues",
];

/// The NIC changes that bring `current` to `spec`.
pub fn network_changes(vm: &VmSpec, current: Current) -> Result<Changes, PveError> {
    let mut out = Changes::default();
    let Some(nics) = &vm.networks else {
        let net = current("net0").unwrap_or_else(|| "virtio".to_string());
        if current_bridge(&net) != Some(vm.network.as_str()) {
            out.params = VmParams::new().nic_bridge("net0", &net, &vm.network)?;
            out.changed.push("net0");
        }
        return Ok(out);
    };
    for (nic, key) in nics.iter().zip(NIC_KEYS) {
        let now = current(key).map(|v| NetValue::parse(&v));
        if now.as_ref().is_some_and(|n| matches(nic, n)) {
            continue;
        }
        let mac = nic
            .mac
            .clone()
            .or_else(|| now.as_ref().and_then(|n| n.mac.clone()));
        let mut options = desired_options(nic);
        if let Some(n) = &now {
            options.extend(
                n.options
                    .iter()
                    .filter(|(k, _)| !MANAGED.contains(&k.as_str()))
                    .cloned(),
            );
        }
        out.params =
            std::mem::take(&mut out.params).nic_with(key, &nic.model, mac.as_deref(), &options)?;
        out.changed.push(key);
    }
    for &key in NIC_KEYS.iter().skip(nics.len()) {
        if current(key).is_some() {
            out.delete.push(key);
            out.changed.push(key);
        }
    }
    Ok(out)
}

/// The options `nic` declares, in PVE's order.
fn desired_options(nic: &Nic) -> Vec<(String, String)> {
    let mut out = vec![("bridge".to_string(), nic.bridge.clone())];
    let mut push = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            out.push((k.to_string(), v));
        }
    };
    push(
        "firewall",
        nic.firewall.filter(|f| *f).map(|_| "1".to_string()),
    );
    push("mtu", nic.mtu.map(|m| m.to_string()));
    push(
        "queues",
        nic.queues.filter(|q| *q > 0).map(|q| q.to_string()),
    );
    push("rate", nic.rate.clone());
    push("tag", nic.vlan.map(|v| v.to_string()));
    push("trunks", nic.trunks.clone());
    out
}

/// Whether PVE's NIC `now` is what `nic` declares.
fn matches(nic: &Nic, now: &NetValue) -> bool {
    let number = |k: &str| now.get(k).and_then(|v| v.parse::<f64>().ok());
    let mac_ok = match (&nic.mac, &now.mac) {
        (Some(want), Some(have)) => want.eq_ignore_ascii_case(have),
        (Some(_), None) => false,
        (None, _) => true,
    };
    mac_ok
        && now.model.as_deref() == Some(nic.model.as_str())
        && now.get("bridge") == Some(nic.bridge.as_str())
        && now.get("tag").and_then(|v| v.parse::<u16>().ok()) == nic.vlan
        && now.get("trunks") == nic.trunks.as_deref()
        && now.get("mtu").and_then(|v| v.parse::<u32>().ok()) == nic.mtu
        && number("rate") == nic.rate.as_deref().and_then(|r| r.parse::<f64>().ok())
        && now.get("firewall").is_some_and(pve_bool) == nic.firewall.unwrap_or(false)
        && number("queues").unwrap_or(0.0) == f64::from(nic.queues.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::spec::Spec;

    fn spec(networks: &str) -> Spec {
        crate::spec::test_spec(networks)
    }

    fn changes(spec: &Spec, cfg: &[(&str, &str)]) -> Changes {
        let map: BTreeMap<String, String> = cfg
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        network_changes(spec.vm().unwrap(), &|k| map.get(k).cloned()).unwrap()
    }

    #[test]
    fn the_short_form_manages_the_bridge_only() {
        let s = spec("    network: vmbr1\n");
        let c = changes(
            &s,
            &[(
                "net0",
                "e1000=BC:24:11:00:00:01,bridge=vmbr0,tag=5,firewall=1",
            )],
        );
        assert_eq!(
            c.params.get("net0"),
            Some("e1000=BC:24:11:00:00:01,bridge=vmbr1,tag=5,firewall=1")
        );
        assert!(
            changes(
                &s,
                &[
                    ("net0", "virtio=X,bridge=vmbr1,tag=7"),
                    ("net1", "virtio=Y,bridge=vmbr0")
                ]
            )
            .changed
            .is_empty()
        );
    }

    #[test]
    fn a_changed_nic_keeps_its_mac_and_unknown_options() {
        let s = spec("    networks:\n      - {bridge: vmbr0, vlan: 20}\n");
        let c = changes(
            &s,
            &[("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0,link_down=1")],
        );
        assert_eq!(
            c.params.get("net0"),
            Some("virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=20,link_down=1")
        );
    }

    #[test]
    fn extra_nics_are_removed_and_new_ones_get_no_mac() {
        let s = spec(
            "    networks:\n      - {bridge: vmbr0}\n      - {bridge: vmbr1, model: e1000, firewall: true}\n",
        );
        let c = changes(
            &s,
            &[
                ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
                ("net2", "virtio=BC:24:11:00:00:03,bridge=vmbr0"),
            ],
        );
        assert_eq!(c.params.get("net1"), Some("e1000,bridge=vmbr1,firewall=1"));
        assert_eq!(c.delete, ["net2"]);
    }

    #[test]
    fn pve_spellings_are_no_change() {
        let s = spec(
            "    networks:\n      - {bridge: vmbr0, mac: bc:24:11:0a:0b:0c, firewall: false, queues: 0, rate: 12.50, trunks: [10, \"20-30\"]}\n",
        );
        let c = changes(
            &s,
            &[(
                "net0",
                "virtio=bc:24:11:0A:0B:0C,bridge=vmbr0,rate=12.5,trunks=10;20-30",
            )],
        );
        assert!(c.changed.is_empty(), "{:?}", c.params);
    }
}
