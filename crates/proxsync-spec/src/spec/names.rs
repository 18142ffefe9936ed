//! Identifier rules, taken from what Proxmox VE itself accepts (pve-common `PVE::JSONSchema`).
//!
//! Each check returns `Err(message)` where the message names the offending value, says what is
//! wrong and what would be valid; the caller adds file, line and column.

/// The longest `metadata.name`: a DNS label, as Kubernetes object names in the seed.
pub(crate) const MAX_SPEC_NAME: usize = 63;
/// The longest VM name we accept (a DNS name is at most 253 characters).
pub(crate) const MAX_VM_NAME: usize = 253;
/// The longest tenant id (a Kubernetes label value is at most 63 characters).
pub(crate) const MAX_TENANT: usize = 63;
/// The longest bridge name: Linux interface names are at most 15 bytes (IFNAMSIZ - 1).
pub(crate) const MAX_BRIDGE: usize = 15;
/// The longest image name (template name or file stem), as in the seed.
pub(crate) const MAX_IMAGE_NAME: usize = 255;

/// Describes a character that must not appear inside a PVE property string value.
fn forbidden_char(c: char) -> Option<String> {
    let what = match c {
        ',' => "a comma ','".to_string(),
        '=' => "an equals sign '='".to_string(),
        ';' => "a semicolon ';'".to_string(),
        ' ' => "a space".to_string(),
        '\n' => "a newline".to_string(),
        '\r' => "a carriage return".to_string(),
        '\t' => "a tab".to_string(),
        c if c.is_control() => format!("the control character U+{:04X}", c as u32),
        c if c.is_whitespace() => format!("the whitespace character U+{:04X}", c as u32),
        _ => return None,
    };
    Some(what)
}

/// Refuses values that would smuggle extra `,key=value` options into a PVE property string
/// such as `net0=virtio,bridge=X` or `scsi0=S:0,import-from=V`.
pub(crate) fn check_property_chars(what: &str, value: &str) -> Result<(), String> {
    for (i, c) in value.chars().enumerate() {
        if let Some(desc) = forbidden_char(c) {
            return Err(format!(
                "{what} {value:?} contains {desc} at character {}: {what} values go into a Proxmox \
                 property string (key=value,key=value) and may not contain ',', '=', ';', \
                 whitespace or control characters",
                i + 1
            ));
        }
    }
    Ok(())
}

/// `[a-z0-9]([a-z0-9-]*[a-z0-9])?`: an RFC 1123 label, case as given.
fn is_label(s: &str, allow_upper: bool) -> bool {
    let ok_char = |c: char| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || (allow_upper && c.is_ascii_uppercase())
    };
    !s.is_empty()
        && s.starts_with(ok_char)
        && s.ends_with(ok_char)
        && s.chars().all(|c| ok_char(c) || c == '-')
}

/// `metadata.name`: a lowercase DNS label, at most 63 characters. It is the identity of the
/// spec and the stem of its status file, so it can never contain `/`, `..`, or start with `.`
/// or `_` (which the status directory reserves for `_summary.yaml` and `_orphans.yaml`).
pub fn check_spec_name(name: &str) -> Result<(), String> {
    let rule = "a name is 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter \
                or digit (e.g. web-01)";
    if name.is_empty() {
        return Err(format!("metadata.name is empty; {rule}"));
    }
    if name.len() > MAX_SPEC_NAME {
        return Err(format!(
            "metadata.name {name:?} is {} characters long; {rule}",
            name.chars().count()
        ));
    }
    if !is_label(name, false) {
        let hint = if is_label(name, true) {
            format!(" (write {:?})", name.to_ascii_lowercase())
        } else if name.contains('_') && is_label(&name.replace('_', "-"), false) {
            format!(" (write {:?})", name.replace('_', "-"))
        } else {
            String::new()
        };
        return Err(format!("metadata.name {name:?} is not valid{hint}; {rule}"));
    }
    Ok(())
}

/// PVE `dns-name`: labels `[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?` joined by dots.
pub fn check_vm_name(name: &str) -> Result<(), String> {
    let rule = "a VM name must be a DNS name: letters, digits and '-', in dot-separated labels that \
                start and end with a letter or digit (e.g. web-01 or web-01.example.com)";
    if name.len() > MAX_VM_NAME {
        return Err(format!(
            "VM name is longer than {MAX_VM_NAME} characters; {rule}"
        ));
    }
    if name.split('.').all(|l| is_label(l, true)) {
        return Ok(());
    }
    let hint = if name.contains(' ') || name.contains('_') {
        format!(
            " (Proxmox rejects spaces and '_' in VM names; e.g. {:?})",
            name.replace([' ', '_'], "-")
        )
    } else {
        String::new()
    };
    Err(format!("VM name {name:?} is not valid{hint}; {rule}"))
}

/// PVE `pve-node`: `[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?`.
pub(crate) fn check_node(node: &str) -> Result<(), String> {
    check_property_chars("node", node)?;
    if is_label(node, true) {
        Ok(())
    } else {
        Err(format!(
            "node {node:?} is not a valid Proxmox node name: letters, digits and '-', starting and \
             ending with a letter or digit (e.g. pve1)"
        ))
    }
}

/// A site name, with the same rule as `[[site]] name` in the config.
pub(crate) fn check_site(site: &str) -> Result<(), String> {
    let ok = (1..=63).contains(&site.len())
        && site.starts_with(|c: char| c.is_ascii_lowercase())
        && site
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "site {site:?} is not a valid site name: 1-63 characters of a-z, 0-9 and '-', starting \
             with a letter (the name of a [[site]] in the proxsync config, e.g. us-sfvalley)"
        ))
    }
}

/// PVE `pve-storage-id`: `[a-z][a-z0-9\-_.]*[a-z0-9]`, case-insensitive.
pub fn check_storage(id: &str) -> Result<(), String> {
    check_property_chars("storage", id)?;
    let ok = id.len() >= 2
        && id.starts_with(|c: char| c.is_ascii_alphabetic())
        && id.ends_with(|c: char| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "storage {id:?} is not a valid Proxmox storage ID: a letter, then letters, digits, '-', \
             '_' or '.', ending with a letter or digit (e.g. local-lvm)"
        ))
    }
}

/// PVE `pve-bridge-id` (`[-_.\w\d]+`) within Linux interface name rules (at most 15 bytes,
/// not `.` or `..`).
pub(crate) fn check_bridge(bridge: &str) -> Result<(), String> {
    check_property_chars("network", bridge)?;
    let rule = "a bridge name is 1-15 characters of letters, digits, '-', '_' and '.' (e.g. vmbr0)";
    if bridge.is_empty() || bridge == "." || bridge == ".." {
        return Err(format!(
            "network {bridge:?} is not a valid bridge name; {rule}"
        ));
    }
    if bridge.len() > MAX_BRIDGE {
        return Err(format!(
            "network {bridge:?} is {} characters long, Linux interface names have at most 15; {rule}",
            bridge.chars().count()
        ));
    }
    if let Some(c) = bridge
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!("network {bridge:?} contains {c:?}; {rule}"));
    }
    Ok(())
}

/// PVE tag grammar `[a-z0-9_][a-z0-9_\-+.]*`. PVE itself lower-cases tags, so an upper-case
/// tag would never compare equal to what PVE returns: it is refused with the lower-case hint.
pub fn check_tag(tag: &str) -> Result<(), String> {
    let rule =
        "a tag is a-z, 0-9, '_' to start, then a-z, 0-9, '_', '-', '+' or '.' (e.g. web or team_a)";
    let first_ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    let rest_ok = |c: char| first_ok(c) || matches!(c, '-' | '+' | '.');
    if tag.is_empty() {
        return Err(format!("empty tag; {rule}"));
    }
    if tag.starts_with(first_ok) && tag.chars().all(rest_ok) {
        return Ok(());
    }
    let lower = tag.to_ascii_lowercase();
    if lower != tag && lower.starts_with(first_ok) && lower.chars().all(rest_ok) {
        return Err(format!(
            "tag {tag:?} has upper-case letters; Proxmox stores tags in lower case, write {lower:?}"
        ));
    }
    match tag
        .chars()
        .find(|&c| !rest_ok(c) && !c.is_ascii_uppercase())
    {
        Some(c) => Err(format!("tag {tag:?} contains {c:?}; {rule}")),
        None => Err(format!(
            "tag {tag:?} may not start with {:?}; {rule}",
            tag.chars().next().unwrap_or(' ')
        )),
    }
}

/// A tenant id from the `tenant-id` / `tenant.sankofa.nexus/id` label; it becomes the PVE tag
/// `tenant_<id>`, so it must fit the tag grammar.
pub(crate) fn check_tenant(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_TENANT {
        return Err(format!(
            "tenant id {id:?} must be 1-63 characters of a-z, 0-9, '_', '-', '+' or '.' (e.g. customer-123)"
        ));
    }
    let lower = id.to_ascii_lowercase();
    if lower != id && check_tag(&format!("tenant_{lower}")).is_ok() {
        return Err(format!(
            "tenant id {id:?} has upper-case letters; it becomes the Proxmox tag tenant_<id> and \
             Proxmox stores tags in lower case: write {lower:?}"
        ));
    }
    check_tag(&format!("tenant_{id}"))
        .map_err(|e| format!("tenant id {id:?} does not make a valid Proxmox tag tenant_{id}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_names() {
        for ok in ["web-01", "a", "0", "db1", &"a".repeat(63)] {
            assert!(check_spec_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Web",
            "-a",
            "a-",
            "a_b",
            "a.b",
            "../x",
            "a/b",
            ".x",
            "_summary",
            "a b",
            &"a".repeat(64),
        ] {
            assert!(check_spec_name(bad).is_err(), "{bad}");
        }
        assert!(
            check_spec_name("Web-01")
                .unwrap_err()
                .contains("\"web-01\"")
        );
    }

    #[test]
    fn vm_names() {
        for ok in ["web-01", "Web01", "web.example.com", "a"] {
            assert!(check_vm_name(ok).is_ok(), "{ok}");
        }
        for bad in ["my vm", "a_b", "", ".a", "a.", "a..b", "-a", "web-"] {
            assert!(check_vm_name(bad).is_err(), "{bad}");
        }
        assert!(check_vm_name("my vm").unwrap_err().contains("\"my-vm\""));
    }

    #[test]
    fn tags() {
        for ok in ["web", "_x", "9", "a-b+c.d_e", "tenant_customer-123"] {
            assert!(check_tag(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", ".a", "+a", "a b", "a,b", "a;b", "a=b", "é"] {
            assert!(check_tag(bad).is_err(), "{bad}");
        }
        let e = check_tag("Web").unwrap_err();
        assert!(e.contains("lower case") && e.contains("\"web\""), "{e}");
    }

    #[test]
    fn tenants() {
        assert!(check_tenant("customer-123").is_ok());
        assert!(check_tenant("Customer").unwrap_err().contains("lower case"));
        assert!(check_tenant("a b").is_err());
        assert!(check_tenant("").is_err());
    }

    #[test]
    fn identifiers() {
        assert!(check_storage("local-lvm").is_ok());
        assert!(check_storage("Local.Store_1").is_ok());
        for bad in ["l", "1local", "local-", "local,x", "loc al", ""] {
            assert!(check_storage(bad).is_err(), "{bad}");
        }
        assert!(
            check_storage("local,cache=none")
                .unwrap_err()
                .contains("comma")
        );
        assert!(check_bridge("vmbr0").is_ok());
        assert!(check_bridge("br_lan.100").is_ok());
        for bad in [
            "",
            ".",
            "..",
            "vmbr0,tag=5",
            "vmbr 0",
            "averyveryverylongbridge",
            "br/0",
            "br:0",
        ] {
            assert!(check_bridge(bad).is_err(), "{bad}");
        }
        assert!(
            check_bridge("vmbr0,firewall=0")
                .unwrap_err()
                .contains("comma ',' at character 6")
        );
        assert!(check_bridge("vmbr0\n").unwrap_err().contains("newline"));
        assert!(check_node("pve1").is_ok());
        assert!(check_node("pve_1").is_err());
        assert!(check_node("pve1;x").unwrap_err().contains("semicolon"));
        assert!(check_site("us-sfvalley").is_ok());
        assert!(check_site("US").is_err());
    }
}
