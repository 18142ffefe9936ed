//! `forProvider.networks`: the VM's NICs, `net0` first. The short form `network: vmbr0` stays
//! valid (one virtio NIC, only its bridge managed); writing both is an error.

use serde::Serialize;

use super::fields::{Ctx, Obj, enum_field, object, string};
use super::hardware::{bool_field, int_field};
use super::names::{check_bridge, check_property_chars};
use super::yaml::{Node, Value};

/// PVE's NIC models (`net[n]` `model`).
pub const NET_MODELS: [&str; 14] = [
    "e1000",
    "e1000-82540em",
    "e1000-82544gc",
    "e1000-82545em",
    "e1000e",
    "i82551",
    "i82557b",
    "i82559er",
    "ne2k_isa",
    "ne2k_pci",
    "pcnet",
    "rtl8139",
    "virtio",
    "vmxnet3",
];
/// The most NICs a VM has (`net0`..`net31`).
pub const MAX_NICS: usize = 32;
const NIC_FIELDS: &[&str] = &[
    "bridge", "model", "vlan", "trunks", "mtu", "rate", "firewall", "queues", "mac",
];
const PATH: &str = "spec.forProvider.networks";

/// One NIC of `networks`. Every option is declared: an absent `vlan` means no tag, an absent
/// `firewall` means off. Options proxsync does not know (`link_down`) are left as they are.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    /// The bridge the NIC is on (`vmbr0`).
    pub bridge: String,
    /// Default `virtio`.
    pub model: String,
    /// The VLAN tag, 1-4094 (PVE's `tag`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// PVE's `trunks`: `10;20-30`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trunks: Option<String>,
    /// 1-65520; `1` is the bridge's MTU. A virtio NIC's is 1 or at least 576.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// MB/s, PVE's `rate` as written (`12.5`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// Whether PVE's firewall filters the NIC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firewall: Option<bool>,
    /// Packet queues (multiqueue), 0-64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queues: Option<u8>,
    /// Upper case. Absent: the MAC PVE generated is kept for good.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

impl Nic {
    /// The short form's NIC: virtio on `bridge`.
    pub fn on_bridge(bridge: &str) -> Nic {
        Nic {
            bridge: bridge.to_string(),
            model: "virtio".to_string(),
            vlan: None,
            trunks: None,
            mtu: None,
            rate: None,
            firewall: None,
            queues: None,
            mac: None,
        }
    }
}

/// `networks`, or `None` when absent. `network_pos`: where the short form `network` is
/// written, if it is (mixing both forms is an error).
pub(super) fn networks_field(ctx: &mut Ctx, fp: &Obj) -> Option<Option<Vec<Nic>>> {
    let Some(n) = fp.get("networks") else {
        return Some(None);
    };
    if fp.get("network").is_some() {
        ctx.error(
            n.pos,
            format!(
                "{PATH} and spec.forProvider.network are two forms of the same thing; write the \
                 NICs in networks only (network: X is networks: [{{bridge: X}}])"
            ),
        );
        return None;
    }
    let Value::Seq(items) = &n.value else {
        ctx.error(
            n.pos,
            format!(
                "{PATH} must be a list of NICs, e.g. [{{bridge: vmbr0}}]; found {}",
                n.value.describe()
            ),
        );
        return None;
    };
    if items.is_empty() || items.len() > MAX_NICS {
        ctx.error(
            n.pos,
            format!(
                "{PATH} has {} NICs; a VM has 1 to {MAX_NICS} (net0..net31)",
                items.len()
            ),
        );
        return None;
    }
    let errors = ctx.error_count();
    let nics: Vec<Option<Nic>> = items
        .iter()
        .enumerate()
        .map(|(i, item)| nic(ctx, item, &format!("{PATH}[{i}]")))
        .collect();
    let nics: Option<Vec<Nic>> = nics.into_iter().collect();
    let nics = nics.filter(|_| ctx.error_count() == errors)?;
    let mut macs: Vec<&str> = nics.iter().filter_map(|n| n.mac.as_deref()).collect();
    macs.sort_unstable();
    if let Some(w) = macs.windows(2).find(|w| w[0] == w[1]) {
        ctx.error(n.pos, format!("{PATH}: MAC {} is given to two NICs", w[0]));
        return None;
    }
    Some(Some(nics))
}

fn nic(ctx: &mut Ctx, node: &Node, path: &str) -> Option<Nic> {
    let obj = object(ctx, node, path, Some(NIC_FIELDS))?;
    let errors = ctx.error_count();
    let short = path.trim_start_matches("spec.forProvider.");
    let field = |k: &str| format!("{short}.{k}");
    let bridge = match obj.get("bridge") {
        None => {
            ctx.error(
                obj.pos,
                format!("missing required field {path}.bridge: e.g. vmbr0"),
            );
            None
        }
        Some(b) => string(ctx, b, &format!("{path}.bridge"), "vmbr0")
            .and_then(|s| ctx.check(b.pos, check_bridge(s)).map(|()| s.to_string())),
    };
    let model = match obj.get("model") {
        None => Some("virtio".to_string()),
        Some(m) => {
            let pairs: Vec<(&str, &str)> = NET_MODELS.iter().map(|c| (*c, *c)).collect();
            enum_field(ctx, m, &format!("{path}.model"), &pairs).map(str::to_string)
        }
    };
    let mut out = Nic::on_bridge("");
    out.vlan = obj
        .get("vlan")
        .and_then(|v| int_field(ctx, v, &field("vlan"), 1, 4094))
        .map(|v| v as u16);
    out.trunks = obj.get("trunks").and_then(|v| trunks(ctx, v, path));
    out.mtu = obj
        .get("mtu")
        .and_then(|v| int_field(ctx, v, &field("mtu"), 1, 65520))
        .map(|v| v as u32);
    // qemu-server `print_netdevice_full` dies at the VM's start on a virtio NIC whose MTU is
    // neither 1 (the bridge's) nor at least the IP minimum, 576.
    if let (Some(mtu), Some("virtio")) = (out.mtu, model.as_deref())
        && (2..576).contains(&mtu)
    {
        ctx.error(
            obj.get("mtu").map_or(obj.pos, |v| v.pos),
            format!(
                "{path}.mtu {mtu} is below the IP minimum 576: PVE refuses to start a VM with it; \
                 write 1 for the bridge's MTU, or 576 up to the bridge's"
            ),
        );
        return None;
    }
    out.rate = obj.get("rate").and_then(|v| rate(ctx, v, path));
    out.firewall = obj
        .get("firewall")
        .and_then(|v| bool_field(ctx, v, &field("firewall")));
    out.queues = obj
        .get("queues")
        .and_then(|v| int_field(ctx, v, &field("queues"), 0, 64))
        .map(|v| v as u8);
    out.mac = obj.get("mac").and_then(|v| {
        let s = string(ctx, v, &format!("{path}.mac"), "BC:24:11:00:00:01")?;
        ctx.check(v.pos, check_mac(s))
    });
    if ctx.error_count() != errors {
        return None;
    }
    out.bridge = bridge?;
    out.model = model?;
    Some(out)
}

/// PVE's `mac-addr`: six hex pairs, unicast (the I/G bit clear); returned upper case.
pub fn check_mac(s: &str) -> Result<String, String> {
    check_property_chars("mac", s)?;
    let parts: Vec<&str> = s.split(':').collect();
    let hex = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    if !hex {
        return Err(format!(
            "mac {s:?} is not a MAC address; write six hex pairs, e.g. BC:24:11:00:00:01"
        ));
    }
    let first = u8::from_str_radix(parts[0], 16).unwrap_or(1);
    if first & 1 == 1 {
        return Err(format!(
            "mac {s:?} is a multicast address (the I/G bit of its first octet is set); PVE \
             accepts only unicast MACs (e.g. BC:24:11:00:00:01)"
        ));
    }
    Ok(s.to_ascii_uppercase())
}

/// `trunks`: VLAN ids and ranges, as a list (`[10, "20-30"]`) or PVE's `10;20-30`.
fn trunks(ctx: &mut Ctx, n: &Node, path: &str) -> Option<String> {
    let items: Vec<String> = match &n.value {
        Value::Seq(items) => items
            .iter()
            .map(|i| match &i.value {
                Value::Int(v) => v.to_string(),
                Value::Str(s) => s.clone(),
                other => other.describe(),
            })
            .collect(),
        Value::Str(s) => s.split(';').map(str::to_string).collect(),
        Value::Int(v) => vec![v.to_string()],
        other => {
            ctx.error(n.pos, format!("{path}.trunks must be a list of VLAN ids or ranges, e.g. [10, \"20-30\"]; found {}", other.describe()));
            return None;
        }
    };
    let vlan = |s: &str| s.parse::<u16>().ok().filter(|v| (1..=4094).contains(v));
    let bad = items.iter().find(|item| match item.split_once('-') {
        Some((a, b)) => !matches!((vlan(a), vlan(b)), (Some(a), Some(b)) if a <= b),
        None => vlan(item).is_none(),
    });
    if items.is_empty() || bad.is_some() {
        ctx.error(
            n.pos,
            format!(
                "{path}.trunks: {:?} is not a VLAN id (1..4094) or a range of them (20-30)",
                bad.map_or("", String::as_str)
            ),
        );
        return None;
    }
    Some(items.join(";"))
}

/// `rate`: MB/s, a non-negative number (PVE's `number`, written as given).
fn rate(ctx: &mut Ctx, n: &Node, path: &str) -> Option<String> {
    let text = match &n.value {
        Value::Int(i) if *i >= 0 => i.to_string(),
        Value::Float(f) if *f >= 0.0 && f.is_finite() => f.to_string(),
        Value::Str(s)
            if !s.is_empty()
                && s.len() < 20
                && s.split_once('.')
                    .map_or(s.bytes().all(|b| b.is_ascii_digit()), |(a, b)| {
                        !a.is_empty()
                            && !b.is_empty()
                            && (a.to_string() + b).bytes().all(|c| c.is_ascii_digit())
                    }) =>
        {
            s.clone()
        }
        other => {
            ctx.error(
                n.pos,
                format!(
                    "{path}.rate must be a non-negative number of MB/s, e.g. 12.5; found {}",
                    other.describe()
                ),
            );
            return None;
        }
    };
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_unicast_hex_and_upper_cased() {
        assert_eq!(check_mac("bc:24:11:0a:0b:0c").unwrap(), "BC:24:11:0A:0B:0C");
        for bad in [
            "BC:24:11:0A:0B",
            "01:00:5E:00:00:01",
            "BC-24-11-0A-0B-0C",
            "BC:24:11:0A:0B:0C,x=1",
            "zz:24:11:0a:0b:0c",
        ] {
            assert!(check_mac(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_virtio_mtu_is_1_or_at_least_576() {
        for (nic, ok) in [
            ("{bridge: vmbr0, mtu: 1}", true),
            ("{bridge: vmbr0, mtu: 576}", true),
            ("{bridge: vmbr0, mtu: 9000}", true),
            ("{bridge: vmbr0, mtu: 575}", false),
            ("{bridge: vmbr0, mtu: 2}", false),
            ("{bridge: vmbr0, model: e1000, mtu: 500}", true),
        ] {
            let (specs, diags) =
                crate::spec::parse_test_spec(&format!("    networks:\n      - {nic}\n"));
            assert_eq!(specs.len() == 1, ok, "{nic}: {diags:?}");
            if !ok {
                assert!(
                    diags.iter().any(|d| d
                        .contains("web.yaml:10:30: error: spec.forProvider.networks[0].mtu")
                        && d.contains("below the IP minimum 576")),
                    "{nic}: {diags:?}"
                );
            }
        }
    }
}
