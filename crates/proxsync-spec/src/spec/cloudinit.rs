//! Validation of `forProvider.cloudInit` and `forProvider.userData`, following what Proxmox VE
//! accepts (`ciuser`, `sshkeys`, `pve-qm-ipconfig`, `address-list`) and what cloud-init reads.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::fields::{Ctx, Obj, object, string, string_list};
use super::yaml::{Node, Value, parse_documents};
use super::{CloudInit, IpConfig, MAX_IP_CONFIGS, MAX_NAMESERVERS, MAX_SSH_KEYS};

const FIELDS: &[&str] = &[
    "user",
    "sshKeys",
    "ipConfig",
    "nameservers",
    "searchDomain",
    "upgradePackages",
    "seedStorage",
];
const IP_FIELDS: &[&str] = &["ip", "gateway", "ip6", "gateway6"];
const PATH: &str = "spec.forProvider.cloudInit";

/// The SSH public key types OpenSSH and cloud-init accept.
pub(crate) const SSH_KEY_TYPES: &[&str] = &[
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

/// `userData`: YAML starting with `#cloud-config`, or a script starting with `#!`.
pub(crate) fn check_user_data(s: &str) -> Result<(), String> {
    let path = "spec.forProvider.userData";
    if s.starts_with("#!") {
        return Ok(());
    }
    let first = s.lines().next().unwrap_or_default().trim_end();
    if first != "#cloud-config" {
        return Err(format!(
            "{path} must start with the line #cloud-config (cloud-config YAML) or with #! (a script); \
             it starts with {:?}",
            first.chars().take(40).collect::<String>()
        ));
    }
    if s.lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Ok(()); // only comments: an empty cloud-config
    }
    let (docs, diags) = parse_documents("userData", s);
    if let Some(d) = diags.first() {
        return Err(format!(
            "{path} is not valid YAML: line {} column {} of the userData: {}",
            d.pos.line, d.pos.column, d.message
        ));
    }
    if docs.len() > 1 {
        return Err(format!(
            "{path} holds {} YAML documents; cloud-config is one mapping",
            docs.len()
        ));
    }
    match docs.first().map(|d| &d.value) {
        None | Some(Value::Null | Value::Map(_)) => Ok(()),
        Some(other) => Err(format!(
            "{path}: cloud-config must be a mapping of modules (e.g. packages: [nginx]); found {}",
            other.describe()
        )),
    }
}

/// `cloudInit.user`: a Linux user name.
pub(crate) fn check_user(user: &str) -> Result<(), String> {
    let ok = !user.is_empty()
        && user.len() <= 32
        && user.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && user
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{PATH}.user {user:?} is not a valid user name: 1-32 characters of a-z, 0-9, '_' and '-', \
             starting with a letter or '_' (e.g. debian)"
        ))
    }
}

/// Standard base64 with padding, as OpenSSH writes a key's blob.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// One `sshKeys` entry: `<type> <base64 blob> [comment]` on one line, the blob naming the same
/// type (what `ssh-keygen` writes in `id_ed25519.pub`). Options (`command="..."`) are refused.
pub(crate) fn check_ssh_key(key: &str) -> Result<(), String> {
    let shown: String = key.chars().take(24).collect();
    let rule = "an OpenSSH public key on one line: <type> <base64> [comment], e.g. \
                \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... me@laptop\"";
    if key.contains(['\n', '\r']) || key.chars().any(|c| c.is_control()) {
        return Err(format!(
            "{PATH}.sshKeys: the key starting {shown:?} holds a line break or control character; \
             write one key per list entry ({rule})"
        ));
    }
    let mut parts = key.split_whitespace();
    let (Some(kind), Some(blob)) = (parts.next(), parts.next()) else {
        return Err(format!("{PATH}.sshKeys: {shown:?}... is not {rule}"));
    };
    if !SSH_KEY_TYPES.contains(&kind) {
        return Err(format!(
            "{PATH}.sshKeys: key type {kind:?} is not one of {}; key options are not accepted",
            SSH_KEY_TYPES.join(", ")
        ));
    }
    let decoded = base64_decode(blob).ok_or_else(|| {
        format!("{PATH}.sshKeys: the {kind} key's data is not valid base64; {rule}")
    })?;
    let inner = decoded
        .get(..4)
        .map(|l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize)
        .and_then(|len| decoded.get(4..4 + len));
    if inner != Some(kind.as_bytes()) {
        return Err(format!(
            "{PATH}.sshKeys: the key data does not hold a {kind} key (copied incompletely?); {rule}"
        ));
    }
    Ok(())
}

fn cidr(s: &str, v6: bool) -> Result<(), String> {
    let (addr, prefix) = s.split_once('/').ok_or("no /prefix")?;
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|_| !prefix.starts_with('+'))
        .ok_or("the prefix is not a number")?;
    if v6 {
        addr.parse::<Ipv6Addr>()
            .map_err(|_| "not an IPv6 address")?;
        if !(1..=128).contains(&prefix) {
            return Err("the prefix must be 1..128".into());
        }
    } else {
        addr.parse::<Ipv4Addr>()
            .map_err(|_| "not an IPv4 address")?;
        if !(1..=32).contains(&prefix) {
            return Err("the prefix must be 1..32".into());
        }
    }
    Ok(())
}

/// One `ipConfig` entry's rules, as PVE's `pve-qm-ipconfig`: `ip` is `dhcp` or IPv4 CIDR, `ip6`
/// is `dhcp`, `auto` or IPv6 CIDR; a gateway needs a static address of its family.
pub(crate) fn check_ip_config(i: usize, c: &IpConfig) -> Result<(), String> {
    let at = format!("{PATH}.ipConfig[{i}]");
    if let Some(ip) = &c.ip
        && ip != "dhcp"
    {
        cidr(ip, false).map_err(|e| {
            format!(
                "{at}.ip {ip:?} must be dhcp or an IPv4 address with prefix, e.g. 10.0.0.5/24 ({e})"
            )
        })?;
    }
    if let Some(ip6) = &c.ip6
        && ip6 != "dhcp"
        && ip6 != "auto"
    {
        cidr(ip6, true).map_err(|e| {
            format!(
                "{at}.ip6 {ip6:?} must be dhcp, auto or an IPv6 address with prefix, e.g. 2001:db8::5/64 ({e})"
            )
        })?;
    }
    if let Some(gw) = &c.gateway {
        gw.parse::<Ipv4Addr>()
            .map_err(|_| format!("{at}.gateway {gw:?} is not an IPv4 address"))?;
        if c.ip.as_deref().is_none_or(|ip| ip == "dhcp") {
            return Err(format!(
                "{at}.gateway needs a static ip (CIDR); with dhcp or no ip, DHCP provides the gateway"
            ));
        }
    }
    if let Some(gw) = &c.gateway6 {
        gw.parse::<Ipv6Addr>()
            .map_err(|_| format!("{at}.gateway6 {gw:?} is not an IPv6 address"))?;
        if c.ip6
            .as_deref()
            .is_none_or(|ip| ip == "dhcp" || ip == "auto")
        {
            return Err(format!("{at}.gateway6 needs a static ip6 (CIDR)"));
        }
    }
    Ok(())
}

/// `nameservers` entry: an IPv4 or IPv6 address.
pub(crate) fn check_nameserver(s: &str) -> Result<(), String> {
    s.parse::<IpAddr>().map(|_| ()).map_err(|_| {
        format!("{PATH}.nameservers: {s:?} is not an IP address (e.g. 10.0.0.53 or 2001:db8::53)")
    })
}

/// `searchDomain`: a DNS name.
pub(crate) fn check_search_domain(s: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.starts_with(|c: char| c.is_ascii_alphanumeric())
            && l.ends_with(|c: char| c.is_ascii_alphanumeric())
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if s.len() <= 253 && s.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(format!(
            "{PATH}.searchDomain {s:?} is not a DNS name (e.g. example.net)"
        ))
    }
}

fn opt_string(
    ctx: &mut Ctx,
    obj_node: Option<&Node>,
    path: &str,
    example: &str,
) -> Option<Option<String>> {
    match obj_node {
        None => Some(None),
        Some(n) => string(ctx, n, path, example).map(|s| Some(s.to_string())),
    }
}

fn ip_config_entry(ctx: &mut Ctx, i: usize, n: &Node) -> Option<IpConfig> {
    let path = format!("{PATH}.ipConfig[{i}]");
    let obj = object(ctx, n, &path, Some(IP_FIELDS))?;
    let ip = opt_string(ctx, obj.get("ip"), &obj.path("ip"), "dhcp");
    let gateway = opt_string(ctx, obj.get("gateway"), &obj.path("gateway"), "10.0.0.1");
    let ip6 = opt_string(ctx, obj.get("ip6"), &obj.path("ip6"), "auto");
    let gateway6 = opt_string(
        ctx,
        obj.get("gateway6"),
        &obj.path("gateway6"),
        "2001:db8::1",
    );
    let (Some(ip), Some(gateway), Some(ip6), Some(gateway6)) = (ip, gateway, ip6, gateway6) else {
        return None;
    };
    let c = IpConfig {
        ip,
        gateway,
        ip6,
        gateway6,
    };
    ctx.check(n.pos, check_ip_config(i, &c))?;
    Some(c)
}

/// Reads and checks `forProvider.cloudInit`.
pub(crate) fn cloud_init_field(ctx: &mut Ctx, n: &Node) -> Option<CloudInit> {
    let obj = object(ctx, n, PATH, Some(FIELDS))?;
    // Every field is checked even after an error, so all problems are reported at once.
    let user = checked_string(ctx, &obj, "user", "debian", check_user);
    let ssh_keys = checked_list(
        ctx,
        &obj,
        "sshKeys",
        "\"ssh-ed25519 AAAA... me@laptop\"",
        MAX_SSH_KEYS,
        str::trim,
        check_ssh_key,
    );
    let ip_config = match obj.get("ipConfig") {
        Some(list) => ip_configs(ctx, list),
        None => Some(Vec::new()),
    };
    let nameservers = checked_list(
        ctx,
        &obj,
        "nameservers",
        "10.0.0.53",
        MAX_NAMESERVERS,
        |s| s,
        check_nameserver,
    );
    let search_domain = checked_string(
        ctx,
        &obj,
        "searchDomain",
        "example.net",
        check_search_domain,
    );
    let upgrade_packages = match obj.get("upgradePackages") {
        Some(u) => upgrade_packages(ctx, u).map(Some),
        None => Some(None),
    };
    let seed_storage = checked_string(
        ctx,
        &obj,
        "seedStorage",
        "local",
        super::names::check_storage,
    );
    Some(CloudInit {
        user: user?,
        ssh_keys: ssh_keys?,
        ip_config: ip_config?,
        nameservers: nameservers?,
        search_domain: search_domain?,
        upgrade_packages: upgrade_packages?,
        seed_storage: seed_storage?,
    })
}

/// An optional string field that passes `check`: `Some(None)` when absent, `None` after an
/// error (reported).
fn checked_string(
    ctx: &mut Ctx,
    obj: &Obj,
    key: &str,
    example: &str,
    check: fn(&str) -> Result<(), String>,
) -> Option<Option<String>> {
    let Some(n) = obj.get(key) else {
        return Some(None);
    };
    let s = string(ctx, n, &obj.path(key), example)?;
    ctx.check(n.pos, check(s))?;
    Some(Some(s.to_string()))
}

/// An optional list of strings, each `normalize`d and passing `check`; every entry is checked
/// so all errors are reported. `None` after an error.
fn checked_list(
    ctx: &mut Ctx,
    obj: &Obj,
    key: &str,
    example: &str,
    max: usize,
    normalize: fn(&str) -> &str,
    check: fn(&str) -> Result<(), String>,
) -> Option<Vec<String>> {
    let Some(n) = obj.get(key) else {
        return Some(Vec::new());
    };
    let mut ok = true;
    let mut out = Vec::new();
    for (s, pos) in string_list(ctx, n, &obj.path(key), example, max)? {
        let s = normalize(&s).to_string();
        if ctx.check(pos, check(&s)).is_some() {
            out.push(s);
        } else {
            ok = false;
        }
    }
    ok.then_some(out)
}

/// `ipConfig`: entry N configures netN.
fn ip_configs(ctx: &mut Ctx, list: &Node) -> Option<Vec<IpConfig>> {
    match &list.value {
        Value::Seq(items) if items.len() <= MAX_IP_CONFIGS => {
            let mut ok = true;
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match ip_config_entry(ctx, i, item) {
                    Some(c) => out.push(c),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        }
        other => {
            ctx.error(
                list.pos,
                format!(
                    "{PATH}.ipConfig must be a list of at most {MAX_IP_CONFIGS} entries (entry N configures netN), \
                     e.g. [{{ip: dhcp}}]; found {}",
                    other.describe()
                ),
            );
            None
        }
    }
}

fn upgrade_packages(ctx: &mut Ctx, u: &Node) -> Option<bool> {
    match u.value {
        Value::Bool(b) => Some(b),
        ref other => {
            ctx.error(
                u.pos,
                format!(
                    "{PATH}.upgradePackages must be true or false; found {}",
                    other.describe()
                ),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@laptop";

    #[test]
    fn ssh_keys() {
        assert!(check_ssh_key(ED).is_ok());
        assert!(
            check_ssh_key(
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
            )
            .is_ok()
        );
        for bad in [
            "",
            "ssh-ed25519",
            "ssh-dss AAAAB3NzaC1kc3M=",
            "command=\"x\" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
            "ssh-ed25519 AAAA!!!!",
            "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl a\nssh-rsa x",
        ] {
            assert!(check_ssh_key(bad).is_err(), "{bad:?}");
        }
        assert_eq!(base64_decode("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("aGk="), Some(b"hi".to_vec()));
        assert_eq!(base64_decode("aGVsbG8h"), Some(b"hello!".to_vec()));
        assert_eq!(base64_decode("aG=s"), None);
        assert_eq!(base64_decode(""), Some(Vec::new()));
        assert_eq!(base64_decode("aGk"), None, "unpadded");
    }

    #[test]
    fn users() {
        assert!(check_user("debian").is_ok());
        assert!(check_user("_svc-1").is_ok());
        for bad in [
            "",
            "Debian",
            "1abc",
            "a,b",
            "a=b",
            "a b",
            "a\nb",
            &"a".repeat(33),
        ] {
            assert!(check_user(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ip_configs() {
        let ok = |ip: Option<&str>, gw: Option<&str>, ip6: Option<&str>, gw6: Option<&str>| {
            check_ip_config(
                0,
                &IpConfig {
                    ip: ip.map(Into::into),
                    gateway: gw.map(Into::into),
                    ip6: ip6.map(Into::into),
                    gateway6: gw6.map(Into::into),
                },
            )
        };
        assert!(ok(Some("dhcp"), None, None, None).is_ok());
        assert!(ok(Some("10.0.0.5/24"), Some("10.0.0.1"), Some("auto"), None).is_ok());
        assert!(ok(None, None, Some("2001:db8::5/64"), Some("2001:db8::1")).is_ok());
        assert!(ok(None, None, Some("dhcp"), None).is_ok());
        for (ip, gw, ip6, gw6) in [
            (Some("10.0.0.5"), None, None, None),
            (Some("10.0.0.5/33"), None, None, None),
            (Some("10.0.0.5/24,gw=1.2.3.4"), None, None, None),
            (Some("10.0.0.300/24"), None, None, None),
            (Some("dhcp"), Some("10.0.0.1"), None, None),
            (Some("10.0.0.5/24"), Some("2001:db8::1"), None, None),
            (Some("10.0.0.5/24"), Some("10.0.0.1,x=1"), None, None),
            (None, None, Some("slaac"), None),
            (None, None, Some("10.0.0.5/24"), None),
            (None, None, Some("auto"), Some("2001:db8::1")),
            (None, None, Some("2001:db8::5/129"), None),
        ] {
            assert!(
                ok(ip, gw, ip6, gw6).is_err(),
                "{ip:?} {gw:?} {ip6:?} {gw6:?}"
            );
        }
    }

    #[test]
    fn dns() {
        assert!(check_nameserver("10.0.0.53").is_ok());
        assert!(check_nameserver("2001:db8::53").is_ok());
        assert!(check_nameserver("10.0.0.53 10.0.0.54").is_err());
        assert!(check_nameserver("dns.example").is_err());
        assert!(check_search_domain("example.net").is_ok());
        assert!(check_search_domain("corp").is_ok());
        for bad in ["", "a..b", "-a.b", "a b", "a,b", "a=b", "ex_ample.net"] {
            assert!(check_search_domain(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn user_data() {
        assert!(check_user_data("#cloud-config\n").is_ok());
        assert!(check_user_data("#cloud-config\npackages: [nginx]\n").is_ok());
        assert!(check_user_data("#!/bin/sh\necho hi\n").is_ok());
        assert!(check_user_data("packages: [nginx]\n").is_err());
        assert!(check_user_data("#cloud-config\npackages: [nginx\n").is_err());
        assert!(check_user_data("#cloud-config\n- a\n- b\n").is_err());
        assert!(check_user_data("#cloud-config\na: 1\n---\nb: 2\n").is_err());
        assert!(check_user_data(" #cloud-config\n").is_err());
    }
}
