//! Proxmox VE's value strings: disk sizes (`32G`), NIC options (`virtio=..,bridge=vmbr0`),
//! drive keys and percent-encoded options, read and written the way PVE does.

use crate::pve::types::VmConfig;

/// PVE's disk sizes: `32G`, `512M`, `2T`, `1024K`, bytes without a unit (binary units).
pub fn parse_pve_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        'T' | 't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult);
    }
    num.parse::<f64>()
        .ok()
        .filter(|f| *f >= 0.0)
        .map(|f| (f * mult as f64) as u64)
}

/// A size in PVE's notation, exact: the largest binary unit that divides it.
pub fn pve_size(bytes: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{}K", bytes.div_ceil(1024))
}

/// `net0` with its bridge replaced, keeping model, MAC and other options.
pub(crate) fn with_bridge(net: &str, bridge: &str) -> String {
    let mut parts: Vec<String> = net
        .split(',')
        .filter(|p| !p.starts_with("bridge="))
        .map(str::to_string)
        .collect();
    parts.insert(1.min(parts.len()), format!("bridge={bridge}"));
    parts.join(",")
}

/// The bridge a NIC value names (`bridge=vmbr0`), if any.
pub fn current_bridge(net: &str) -> Option<&str> {
    net.split(',').find_map(|p| p.strip_prefix("bridge="))
}

/// Whether `k` is a VM's disk or CD-ROM slot: `ide`, `sata`, `scsi` or `virtio` and a
/// number (not `efidisk0`, `tpmstate0` or `unusedN`).
pub fn is_drive_key(k: &str) -> bool {
    ["ide", "sata", "scsi", "virtio"].iter().any(|p| {
        k.strip_prefix(p)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Decodes `%XX` escapes (PVE's `sshkeys`); anything else, a stray `%` included, stays.
pub fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// The MAC address of `net0..` from their `virtio=BC:24:11:..,bridge=..` values.
pub fn nic_macs(cfg: &VmConfig, count: usize) -> Vec<Option<String>> {
    (0..count)
        .map(|i| {
            cfg.get(&format!("net{i}")).and_then(|v| {
                v.split(',')
                    .next()
                    .and_then(|m| m.split_once('='))
                    .map(|(_, mac)| mac.to_string())
            })
        })
        .collect()
}

/// A NIC value as PVE writes it (`virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1`): the
/// model and MAC, and the other options in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetValue {
    /// The NIC model (`virtio`, `e1000`, ...).
    pub model: Option<String>,
    /// The MAC address as written, if any.
    pub mac: Option<String>,
    /// The other options (`bridge`, `firewall`, `tag`, ...), in order.
    pub options: Vec<(String, String)>,
}

impl NetValue {
    /// Reads `model=MAC,...` or `model,...` (PVE's `print_net` writes the model first) or
    /// `model=virtio,macaddr=...`.
    pub fn parse(s: &str) -> NetValue {
        let mut out = NetValue::default();
        for (i, part) in s.split(',').enumerate().filter(|(_, p)| !p.is_empty()) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            if i == 0 && key != "model" && key != "macaddr" {
                out.model = Some(key.to_string());
                out.mac = Some(value.to_string()).filter(|m| !m.is_empty());
            } else if key == "model" {
                out.model = Some(value.to_string());
            } else if key == "macaddr" {
                out.mac = Some(value.to_string());
            } else {
                out.options.push((key.to_string(), value.to_string()));
            }
        }
        out
    }

    /// The value of option `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A drive value as PVE writes it (`local-lvm:vm-100-disk-1,cache=none,size=8G`): the volume
/// (the bare first part, or `file=`) and the other options in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriveValue {
    /// The volume (`local-lvm:vm-100-disk-1`), or `none`/`cdrom` for an empty CD-ROM.
    pub volume: String,
    /// The other options (`cache`, `media`, `size`, ...), in order.
    pub options: Vec<(String, String)>,
}

impl DriveValue {
    /// Reads `VOLUME,key=value,...` or `file=VOLUME,...`; a later part without `=` is an
    /// option with an empty value.
    pub fn parse(s: &str) -> DriveValue {
        let mut out = DriveValue::default();
        for (i, part) in s.split(',').enumerate().filter(|(_, p)| !p.is_empty()) {
            match part.split_once('=') {
                None if i == 0 => out.volume = part.to_string(),
                Some(("file", v)) => out.volume = v.to_string(),
                Some((k, v)) => out.options.push((k.to_string(), v.to_string())),
                None => out.options.push((part.to_string(), String::new())),
            }
        }
        out
    }

    /// The value of option `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The size PVE records (`size=8G`, `size=8192M`), in bytes.
    pub fn size(&self) -> Option<u64> {
        self.get("size").and_then(parse_pve_size)
    }

    /// A CD-ROM (`media=cdrom`, `none`, `cdrom`) or PVE's cloud-init drive: no disk of a spec.
    pub fn is_cdrom_or_cloudinit(&self) -> bool {
        self.get("media") == Some("cdrom")
            || matches!(self.volume.as_str(), "none" | "cdrom")
            || self.volume.ends_with(":cloudinit")
            || self.volume.contains("-cloudinit")
    }
}

/// The value of option `key` in a property string, where a bare first part is the value of
/// the default key `default` (`host,flags=+aes`: `cputype` is `host`).
pub fn prop_value<'a>(s: &'a str, key: &str, default: Option<&str>) -> Option<&'a str> {
    s.split(',')
        .enumerate()
        .find_map(|(i, part)| match part.split_once('=') {
            Some((k, v)) if k == key => Some(v),
            None if i == 0 && default == Some(key) && !part.is_empty() => Some(part),
            _ => None,
        })
}

/// A property string with its default key `sub` set to `value` (written bare, first), the
/// other options of `current` kept.
pub(crate) fn with_default_part(current: Option<&str>, sub: &str, value: &str) -> String {
    let mut parts = vec![value.to_string()];
    for (i, part) in current.unwrap_or("").split(',').enumerate() {
        let is_default = match part.split_once('=') {
            Some((k, _)) => k == sub,
            None => i == 0,
        };
        if !part.is_empty() && !is_default {
            parts.push(part.to_string());
        }
    }
    parts.join(",")
}

/// PVE's boolean spellings (`1`, `on`, `yes`, `true`).
pub fn pve_bool(s: &str) -> bool {
    matches!(s.to_ascii_lowercase().as_str(), "1" | "on" | "yes" | "true")
}

/// A SHA-256 fingerprint as PVE writes it, upper-cased: 32 hex bytes joined by `:` (the API
/// schema's pattern `([A-Fa-f0-9]{2}:){31}[A-Fa-f0-9]{2}`), else `None`.
pub fn normalize_fingerprint(text: &str) -> Option<String> {
    let text = text.trim();
    let ok = text.len() == 95
        && text.split(':').count() == 32
        && text
            .split(':')
            .all(|b| b.len() == 2 && b.chars().all(|c| c.is_ascii_hexdigit()));
    ok.then(|| text.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {

    #[test]
    fn percent_escapes_round_trip_as_pve_stores_sshkeys() {
        let keys = "ssh-ed25519 AAAA+/= alice@laptop\nssh-rsa BBBB~_.- bob";
        let encoded = crate::pve::percent_encode(keys);
        assert_eq!(
            encoded,
            "ssh-ed25519%20AAAA%2B%2F%3D%20alice%40laptop%0Assh-rsa%20BBBB~_.-%20bob"
        );
        assert_eq!(percent_decode(&encoded), keys);
        // PVE writes lower-case escapes too; a stray `%` stays.
        assert_eq!(percent_decode("a%2fb%zz%"), "a/b%zz%");
    }

    use super::*;

    #[test]
    fn nic_values_are_read_as_pve_writes_them() {
        let n = NetValue::parse("virtio=bc:24:11:00:00:01,bridge=vmbr0,firewall=1,tag=5");
        assert_eq!(n.model.as_deref(), Some("virtio"));
        assert_eq!(n.mac.as_deref(), Some("bc:24:11:00:00:01"));
        assert_eq!(n.get("tag"), Some("5"));
        let n = NetValue::parse("model=e1000,macaddr=BC:24:11:00:00:02,bridge=vmbr1");
        assert_eq!(n.model.as_deref(), Some("e1000"));
        assert_eq!(n.mac.as_deref(), Some("BC:24:11:00:00:02"));
        assert_eq!(n.get("bridge"), Some("vmbr1"));
    }

    #[test]
    fn property_string_parts() {
        assert_eq!(
            prop_value("host,flags=+aes", "cputype", Some("cputype")),
            Some("host")
        );
        assert_eq!(
            prop_value("cputype=host", "cputype", Some("cputype")),
            Some("host")
        );
        assert_eq!(prop_value("host", "flags", Some("cputype")), None);
        assert_eq!(
            with_default_part(Some("std,memory=32"), "type", "serial0"),
            "serial0,memory=32"
        );
        assert_eq!(
            with_default_part(Some("type=std,memory=32"), "type", "qxl"),
            "qxl,memory=32"
        );
        assert_eq!(with_default_part(None, "type", "q35"), "q35");
        assert!(pve_bool("1") && pve_bool("on") && !pve_bool("0") && !pve_bool(""));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_pve_size("32G"), Some(32 << 30));
        assert_eq!(parse_pve_size("512M"), Some(512 << 20));
        assert_eq!(parse_pve_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_pve_size("4096"), Some(4096));
        assert_eq!(parse_pve_size("x"), None);
        assert_eq!(parse_pve_size(""), None);
        assert_eq!(pve_size(32 << 30), "32G");
        assert_eq!(pve_size(1536 << 20), "1536M");
        assert_eq!(pve_size(1 << 40), "1T");
    }

    #[test]
    fn bridges_are_replaced_in_place() {
        assert_eq!(
            with_bridge("virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1", "vmbr1"),
            "virtio=BC:24:11:00:00:01,bridge=vmbr1,firewall=1"
        );
        assert_eq!(with_bridge("virtio", "vmbr1"), "virtio,bridge=vmbr1");
        assert_eq!(current_bridge("virtio=X,bridge=vmbr0"), Some("vmbr0"));
    }
}
