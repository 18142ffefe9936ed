//! `proxsync inventory [--list | --host NAME | --yaml]`: the status files as an Ansible
//! inventory, to hand the VMs proxsync made over to configuration management.
//!
//! Built from the spec status files only (`docs/status.md`, parsed by
//! [`status_view::spec_files`], the reader `proxsync status --json` uses): no Proxmox API call,
//! so it is cheap and works while the daemon runs. Ansible's script protocol:
//!
//! - `--list` (the default): the dynamic-inventory JSON, `{"_meta": {"hostvars": {HOST:
//!   {...}}}, "all": {"children": [GROUP, ...]}, GROUP: {"hosts": [HOST, ...]}, ...}`;
//! - `--host NAME`: that host's variables as a JSON object, `{}` for a host it does not know;
//! - `--yaml`: the same inventory in the format of Ansible's YAML inventory plugin:
//!   `all: {hosts: {HOST: {vars}}, children: {GROUP: {hosts: {HOST: {}}}}}`.
//!
//! Hosts are spec names (`metadata.name`, lowercase DNS labels: valid Ansible host names).
//! `ansible_host` is the guest agent's first usable address ([`ansible_host`]); a host
//! without one has no `ansible_host`, so Ansible connects to the host name. Groups
//! ([`group_name`]): `site_<site>`, `node_<node>`, `tag_<tag>`, `label_<key>_<value>`, each
//! part with every character other than an ASCII letter, digit or `_` replaced by `_`; a host
//! in none of them is in `ungrouped`. Host variables ([`host_vars`]) are `proxsync_*` copies of
//! what the status file holds; a status file holds nothing secret (`status` module).
//!
//! Ansible evaluates Jinja in every string of an inventory it has not been told is unsafe, and
//! these strings come from specs (a committer chooses a file's path, labels) and from guests
//! (root inside a VM chooses what its agent reports). So every string value the inventory hands
//! Ansible is marked unsafe ([`mark_unsafe`]: `{"__ansible_unsafe": ...}` in the JSON, `!unsafe`
//! in the YAML), and Ansible keeps it as text. Keys cannot be marked: host names are spec
//! names (DNS labels), group names are sanitised, variable names are ours, and a label whose
//! key Ansible could read as a template (`{{`, `{%`, `{#`) is left out of `proxsync_labels`
//! with a note. Addresses are kept only when they parse as IP addresses.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::shell::status_view::{self, ViewError};
use crate::status::{ConditionStatus, SpecFile, kinds};

/// What to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Output {
    /// `--list`: the dynamic-inventory JSON.
    List,
    /// `--host NAME`: one host's variables as JSON.
    Host(String),
    /// `--yaml`: the YAML inventory.
    Yaml,
}

/// An inventory: host -> variables, group -> hosts. The variables are plain values here;
/// [`Inventory::list_json`], [`Inventory::host_json`] and [`Inventory::yaml`] mark every string
/// unsafe for Ansible.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Inventory {
    pub hosts: BTreeMap<String, Map<String, Value>>,
    pub groups: BTreeMap<String, BTreeSet<String>>,
    /// What was left out, and why (for stderr).
    pub notes: Vec<String>,
}

/// Why the inventory could not be printed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InventoryError {
    /// The status directory or a file in it could not be read.
    #[error(transparent)]
    Status(#[from] ViewError),
    /// Rendering JSON failed (not expected).
    #[error("could not render JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Reads the spec status files of `status_dir` and renders the inventory as `output` asks
/// (ending with a newline). Also returns the notes on files left out, for stderr.
pub(crate) fn render(
    status_dir: &Path,
    output: &Output,
) -> Result<(String, Vec<String>), InventoryError> {
    let (specs, mut notes) = status_view::spec_files(status_dir)?;
    let inventory = build(&specs);
    notes.extend(inventory.notes.iter().cloned());
    let text = match output {
        Output::List => {
            status_view::json_for_terminal(serde_json::to_string_pretty(&inventory.list_json())?)
        }
        Output::Host(name) => status_view::json_for_terminal(serde_json::to_string_pretty(
            &inventory.host_json(name),
        )?),
        Output::Yaml => inventory.yaml()?,
    };
    Ok((text, notes))
}

/// The inventory of these spec status files.
pub(crate) fn build(specs: &[SpecFile]) -> Inventory {
    let mut inv = Inventory::default();
    // A template is no host: nothing runs in it to configure.
    let guests = specs
        .iter()
        .filter(|f| f.kind.as_deref() != Some(crate::spec::templates::TEMPLATE_KIND));
    for f in guests {
        let mut groups = Vec::new();
        if !f.site.is_empty() {
            groups.push(group_name("site", &[&f.site]));
        }
        if !f.node.is_empty() {
            groups.push(group_name("node", &[&f.node]));
        }
        groups.extend(f.tags.iter().map(|t| group_name("tag", &[t])));
        groups.extend(f.labels.iter().map(|(k, v)| group_name("label", &[k, v])));
        if groups.is_empty() {
            groups.push(UNGROUPED.to_string());
        }
        for g in groups {
            inv.groups.entry(g).or_default().insert(f.name.clone());
        }
        let vars = host_vars(f);
        for key in f.labels.keys().filter(|k| is_template(k)) {
            inv.notes.push(format!(
                "{}: label {} left out of proxsync_labels: Ansible could read its key as a \
                 template, and a key cannot be marked unsafe",
                f.name,
                serde_json::to_string(key).unwrap_or_default()
            ));
        }
        inv.hosts.insert(f.name.clone(), vars);
    }
    inv
}

/// Whether Ansible could take `s` for a Jinja template: it holds a start of one.
fn is_template(s: &str) -> bool {
    ["{{", "{%", "{#"].iter().any(|start| s.contains(start))
}

/// Ansible's group of hosts in no other group.
const UNGROUPED: &str = "ungrouped";

/// A valid Ansible group name: `prefix`, then each part, joined by `_`, every character other
/// than an ASCII letter, digit or `_` replaced by `_` (`site`, `eu-fra` -> `site_eu_fra`;
/// `label`, `tenant.sankofa.nexus/id`, `c-1` -> `label_tenant_sankofa_nexus_id_c_1`). Case is
/// kept. Prefixed by `_` should it start with a digit (no prefix of ours does).
pub(crate) fn group_name(prefix: &str, parts: &[&str]) -> String {
    let mut out =
        String::with_capacity(prefix.len() + parts.iter().map(|p| p.len() + 1).sum::<usize>());
    out.push_str(prefix);
    for p in parts {
        if !out.is_empty() {
            out.push('_');
        }
        out.push_str(p);
    }
    let mut name: String = out
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// The address Ansible should connect to: the first usable IPv4 address of the guest agent's
/// list (private ones count), else its first usable IPv6 one. Loopback (127.0.0.0/8, ::1),
/// link-local (169.254.0.0/16, fe80::/10), unspecified, broadcast and multicast addresses are
/// skipped, as is text that is not an address. `None` when nothing is left: none is made up.
pub(crate) fn ansible_host(addresses: &[String]) -> Option<String> {
    let usable: Vec<IpAddr> = addresses
        .iter()
        .filter_map(|a| a.trim().parse::<IpAddr>().ok())
        .filter(|ip| match ip {
            IpAddr::V4(v4) => {
                !(v4.is_loopback()
                    || v4.is_link_local()
                    || v4.is_unspecified()
                    || v4.is_multicast()
                    || v4.is_broadcast())
            }
            IpAddr::V6(v6) => {
                !(v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || v6.is_unicast_link_local())
            }
        })
        .collect();
    usable
        .iter()
        .find(|ip| ip.is_ipv4())
        .or_else(|| usable.first())
        .map(IpAddr::to_string)
}

/// A host's variables: `ansible_host` when there is a usable address, and what the status
/// file says of the spec and its VM as `proxsync_*`.
pub(crate) fn host_vars(f: &SpecFile) -> Map<String, Value> {
    let mut vars = Map::new();
    if let Some(addr) = ansible_host(&f.ip_addresses) {
        vars.insert("ansible_host".into(), addr.into());
    }
    let ready = f.condition(kinds::READY);
    vars.insert("proxsync_site".into(), f.site.clone().into());
    vars.insert("proxsync_node".into(), f.node.clone().into());
    if let Some(id) = f.vm_id {
        vars.insert("proxsync_vmid".into(), id.into());
    }
    vars.insert("proxsync_vm_name".into(), f.vm_name.clone().into());
    vars.insert("proxsync_power_state".into(), f.state.clone().into());
    vars.insert(
        "proxsync_ready".into(),
        ready
            .is_some_and(|c| c.status == ConditionStatus::True)
            .into(),
    );
    if let Some(c) = ready.filter(|c| !c.reason.is_empty()) {
        vars.insert("proxsync_ready_reason".into(), c.reason.clone().into());
    }
    // Only addresses: a file an older release wrote may hold any text the guest sent.
    let addresses: Vec<&String> = (f.ip_addresses.iter())
        .filter(|a| a.parse::<IpAddr>().is_ok())
        .collect();
    vars.insert("proxsync_addresses".into(), json!(addresses));
    vars.insert("proxsync_tags".into(), json!(f.tags));
    let labels: BTreeMap<&String, &String> =
        f.labels.iter().filter(|(k, _)| !is_template(k)).collect();
    vars.insert("proxsync_labels".into(), json!(labels));
    if let Some(c) = &f.commit {
        vars.insert("proxsync_commit".into(), c.clone().into());
    }
    if let Some(file) = &f.spec_file {
        vars.insert("proxsync_spec_file".into(), file.clone().into());
    }
    vars
}

impl Inventory {
    /// `--list`: the dynamic-inventory JSON, every host's variables under `_meta.hostvars`
    /// (so Ansible never calls `--host`), every string among them marked unsafe.
    pub(crate) fn list_json(&self) -> Value {
        let hostvars: Map<String, Value> = (self.hosts.iter())
            .map(|(host, vars)| (host.clone(), mark_unsafe(&Value::Object(vars.clone()))))
            .collect();
        let mut top = Map::new();
        top.insert("_meta".into(), json!({ "hostvars": hostvars }));
        top.insert(
            "all".into(),
            json!({ "children": self.groups.keys().collect::<Vec<_>>() }),
        );
        for (group, hosts) in &self.groups {
            top.insert(group.clone(), json!({ "hosts": hosts }));
        }
        Value::Object(top)
    }

    /// `--host NAME`: the host's variables (strings marked unsafe), `{}` for a host the
    /// inventory does not hold.
    pub(crate) fn host_json(&self, name: &str) -> Value {
        mark_unsafe(&Value::Object(
            self.hosts.get(name).cloned().unwrap_or_default(),
        ))
    }

    /// `--yaml`: `all: {hosts: {HOST: vars}, children: {GROUP: {hosts: {HOST: {}}}}}`, every
    /// string value tagged `!unsafe`, every key and string double-quoted ([`yaml_quoted`]).
    pub(crate) fn yaml(&self) -> Result<String, InventoryError> {
        let children: Map<String, Value> = self
            .groups
            .iter()
            .map(|(group, hosts)| {
                let hosts: Map<String, Value> = hosts
                    .iter()
                    .map(|h| (h.clone(), Value::Object(Map::new())))
                    .collect();
                (group.clone(), json!({ "hosts": hosts }))
            })
            .collect();
        let doc = json!({ "all": { "hosts": self.hosts, "children": children } });
        let mut text = String::new();
        yaml_block(&mut text, &doc, 0);
        Ok(text)
    }
}

/// `v` with every string in it (not the keys) marked unsafe for Ansible,
/// `{"__ansible_unsafe": "..."}`: Ansible's JSON decoder makes it a string it never templates.
pub(crate) fn mark_unsafe(v: &Value) -> Value {
    match v {
        Value::String(s) => json!({ "__ansible_unsafe": s }),
        Value::Array(items) => Value::Array(items.iter().map(mark_unsafe).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), mark_unsafe(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// YAML in block style: a mapping's entries or a sequence's items, one per line at `indent`
/// spaces. Strings are `!unsafe "..."`, keys `"..."`, an empty mapping or sequence is
/// written `{}` or `[]`.
fn yaml_block(out: &mut String, v: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    let nested = |out: &mut String, v: &Value| match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            yaml_block(out, v, indent + 2);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            yaml_block(out, v, indent + 2);
        }
        scalar => {
            out.push(' ');
            out.push_str(&yaml_scalar(scalar));
            out.push('\n');
        }
    };
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                out.push_str(&pad);
                out.push_str(&yaml_quoted(k));
                out.push(':');
                nested(out, v);
            }
        }
        Value::Array(items) => {
            for v in items {
                out.push_str(&pad);
                out.push('-');
                nested(out, v);
            }
        }
        scalar => {
            out.push_str(&pad);
            out.push_str(&yaml_scalar(scalar));
            out.push('\n');
        }
    }
}

/// A scalar (or an empty collection) as YAML: a string `!unsafe "..."`.
fn yaml_scalar(v: &Value) -> String {
    match v {
        Value::String(s) => format!("!unsafe {}", yaml_quoted(s)),
        Value::Object(_) => "{}".to_string(),
        Value::Array(_) => "[]".to_string(),
        // null, true/false and numbers are the same words in YAML.
        other => other.to_string(),
    }
}

/// A YAML double-quoted scalar that any YAML 1.1 or 1.2 reader (Ansible's PyYAML) reads back
/// as `s`, and that holds nothing a terminal acts on: `\` and `"` escaped, and every control
/// character, line or paragraph separator, bidi control, BOM and non-character as `\xXX`,
/// `\uXXXX` or `\UXXXXXXXX` (PyYAML refuses most of them raw, and folds line breaks).
pub(crate) fn yaml_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control()
                || status_view::is_unsafe(c)
                || matches!(c, '\u{feff}' | '\u{fffe}' | '\u{ffff}') =>
            {
                let n = u32::from(c);
                let _ = match n {
                    0..=0xff => write!(out, "\\x{n:02x}"),
                    0x100..=0xffff => write!(out, "\\u{n:04x}"),
                    _ => write!(out, "\\U{n:08x}"),
                };
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{
        Condition, ConditionInput, ConditionStatus as S, Reason, SpecStatus, StatusDir,
    };
    use std::time::{Duration, UNIX_EPOCH};

    fn file(name: &str, site: &str, node: &str, addresses: &[&str]) -> SpecFile {
        SpecFile {
            name: name.into(),
            site: site.into(),
            node: node.into(),
            vm_id: Some(101),
            vm_name: name.into(),
            state: "running".into(),
            ip_addresses: addresses.iter().map(|a| a.to_string()).collect(),
            commit: Some("3f2c9a1e0b7d".into()),
            spec_file: Some(format!("{site}/{name}.yaml")),
            conditions: vec![Condition {
                kind: kinds::READY.into(),
                status: S::True,
                reason: "Available".into(),
                message: "the VM is running, a message never copied".into(),
                last_transition_time: "2025-03-01T12:00:00Z".into(),
            }],
            ..SpecFile::default()
        }
    }

    /// web-01: addresses, tags and labels; db-01: not ready, no address, no tag.
    fn two() -> Vec<SpecFile> {
        let mut web = file(
            "web-01",
            "eu-fra",
            "pve1",
            &["fe80::be24:11ff:fe4c:1", "2001:db8::5", "10.0.0.5"],
        );
        web.tags = vec!["frontend".into(), "web".into()];
        web.labels = BTreeMap::from([
            ("role".to_string(), "web".to_string()),
            ("tenant.sankofa.nexus/id".to_string(), "c-1".to_string()),
        ]);
        let mut db = file("db-01", "eu-fra", "pve2", &[]);
        db.state = "stopped".into();
        db.vm_id = None;
        db.conditions[0].status = S::False;
        db.conditions[0].reason = "NotRunning".into();
        vec![db, web]
    }

    /// `v` as Ansible reads it: each `{"__ansible_unsafe": s}` back to `s`. Panics on a string
    /// that is not marked so.
    fn read_marked(v: &Value) -> Value {
        match v {
            Value::Object(m) if m.len() == 1 && m.contains_key("__ansible_unsafe") => {
                assert!(m["__ansible_unsafe"].is_string(), "{v}");
                m["__ansible_unsafe"].clone()
            }
            Value::String(s) => panic!("{s:?} is not marked unsafe"),
            Value::Array(a) => Value::Array(a.iter().map(read_marked).collect()),
            Value::Object(m) => {
                Value::Object(m.iter().map(|(k, v)| (k.clone(), read_marked(v))).collect())
            }
            other => other.clone(),
        }
    }

    fn is_group_name(g: &str) -> bool {
        g.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && g.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    }

    #[test]
    fn group_names_are_valid_ansible_group_names() {
        assert_eq!(group_name("site", &["eu-fra"]), "site_eu_fra");
        assert_eq!(group_name("node", &["pve1"]), "node_pve1");
        assert_eq!(group_name("tag", &["web"]), "tag_web");
        assert_eq!(group_name("label", &["role", "db"]), "label_role_db");
        assert_eq!(
            group_name("label", &["tenant.sankofa.nexus/id", "c-1"]),
            "label_tenant_sankofa_nexus_id_c_1"
        );
        assert_eq!(group_name("label", &["Tier", "Gold"]), "label_Tier_Gold");
        assert_eq!(group_name("tag", &["café été"]), "tag_caf___t_");
        assert_eq!(group_name("", &["9lives"]), "_9lives");
        assert_eq!(group_name("", &[]), "_");
        for parts in [
            &["a b", "c;d"][..],
            &["", ""],
            &["1", "2"],
            &["ü", "\u{202e}x"],
            &["x.y/z", "$(rm -rf)"],
        ] {
            let g = group_name("label", parts);
            assert!(is_group_name(&g), "{parts:?} -> {g}");
            assert!(is_group_name(&group_name("", parts)), "{parts:?}");
        }
    }

    #[test]
    fn ansible_host_is_the_first_usable_ipv4_else_ipv6_never_made_up() {
        let a = |v: &[&str]| ansible_host(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            a(&["2001:db8::5", "10.0.0.5", "192.0.2.7"]).as_deref(),
            Some("10.0.0.5")
        );
        assert_eq!(
            a(&["127.0.0.1", "169.254.3.4", "::1", "fe80::1", "192.0.2.7"]).as_deref(),
            Some("192.0.2.7")
        );
        assert_eq!(
            a(&["fe80::be24:11ff:fe4c:1", "2001:db8::5"]).as_deref(),
            Some("2001:db8::5")
        );
        assert_eq!(
            a(&["not an address", " 10.1.2.3 "]).as_deref(),
            Some("10.1.2.3")
        );
        assert_eq!(
            a(&["0.0.0.0", "224.0.0.1", "255.255.255.255", "ff02::1", "::"]),
            None
        );
        assert_eq!(a(&["127.0.0.1", "::1", "fe80::1", "169.254.0.1"]), None);
        assert_eq!(a(&[]), None);
    }

    #[test]
    fn host_vars_are_the_status_without_messages() {
        let specs = two();
        let web = host_vars(&specs[1]);
        assert_eq!(
            Value::Object(web),
            json!({
                "ansible_host": "10.0.0.5",
                "proxsync_site": "eu-fra",
                "proxsync_node": "pve1",
                "proxsync_vmid": 101,
                "proxsync_vm_name": "web-01",
                "proxsync_power_state": "running",
                "proxsync_ready": true,
                "proxsync_ready_reason": "Available",
                "proxsync_addresses": ["fe80::be24:11ff:fe4c:1", "2001:db8::5", "10.0.0.5"],
                "proxsync_tags": ["frontend", "web"],
                "proxsync_labels": {"role": "web", "tenant.sankofa.nexus/id": "c-1"},
                "proxsync_commit": "3f2c9a1e0b7d",
                "proxsync_spec_file": "eu-fra/web-01.yaml",
            })
        );
        let db = host_vars(&specs[0]);
        assert!(!db.contains_key("ansible_host"), "{db:?}");
        assert!(!db.contains_key("proxsync_vmid"), "{db:?}");
        assert_eq!(db["proxsync_ready"], json!(false));
        assert_eq!(db["proxsync_ready_reason"], json!("NotRunning"));
        assert_eq!(db["proxsync_power_state"], json!("stopped"));
        // No Ready condition at all (a file an older release wrote): not ready.
        let mut bare = file("x", "lab", "pve1", &[]);
        bare.conditions.clear();
        let vars = host_vars(&bare);
        assert_eq!(vars["proxsync_ready"], json!(false));
        assert!(!vars.contains_key("proxsync_ready_reason"));
    }

    /// A `ProxmoxTemplate`'s version has a status file but is no host: nothing runs in it.
    #[test]
    fn a_template_is_no_host() {
        let mut specs = two();
        let mut template = file("noble-0123abcd", "eu-fra", "pve1", &[]);
        template.kind = Some("ProxmoxTemplate".into());
        specs.push(template);
        let inv = build(&specs);
        assert!(
            !inv.hosts.contains_key("noble-0123abcd"),
            "{:?}",
            inv.hosts.keys()
        );
        assert!(
            !inv.groups.values().any(|h| h.contains("noble-0123abcd")),
            "{:?}",
            inv.groups
        );
        assert_eq!(inv.hosts.len(), 2);
    }

    #[test]
    fn list_json_is_the_dynamic_inventory_format() {
        let mut specs = two();
        // No site or node (an invalid spec never placed): in `ungrouped`, not lost.
        let mut lost = file("lost-01", "", "", &[]);
        lost.vm_id = None;
        specs.push(lost);
        let inv = build(&specs);
        let doc = inv.list_json();
        let groups = [
            "label_role_web",
            "label_tenant_sankofa_nexus_id_c_1",
            "node_pve1",
            "node_pve2",
            "site_eu_fra",
            "tag_frontend",
            "tag_web",
            "ungrouped",
        ];
        assert_eq!(doc["all"], json!({ "children": groups }));
        assert_eq!(doc["site_eu_fra"], json!({"hosts": ["db-01", "web-01"]}));
        assert_eq!(doc["node_pve1"], json!({"hosts": ["web-01"]}));
        assert_eq!(doc["node_pve2"], json!({"hosts": ["db-01"]}));
        assert_eq!(doc["tag_web"], json!({"hosts": ["web-01"]}));
        assert_eq!(doc["label_role_web"], json!({"hosts": ["web-01"]}));
        assert_eq!(doc["ungrouped"], json!({"hosts": ["lost-01"]}));
        let hostvars = doc["_meta"]["hostvars"].as_object().unwrap();
        assert_eq!(
            hostvars.keys().collect::<Vec<_>>(),
            ["db-01", "lost-01", "web-01"]
        );
        assert_eq!(
            hostvars["web-01"]["ansible_host"],
            json!({"__ansible_unsafe": "10.0.0.5"})
        );
        for (host, vars) in hostvars {
            assert_eq!(read_marked(vars), Value::Object(inv.hosts[host].clone()));
        }
        // Every top-level key but _meta and all is a group with hosts, and a child of all.
        let top = doc.as_object().unwrap();
        assert_eq!(top.len(), groups.len() + 2);
        for g in groups {
            assert!(is_group_name(g));
            assert!(top[g]["hosts"].is_array(), "{g}");
        }

        let empty = build(&[]).list_json();
        assert_eq!(
            empty,
            json!({"_meta": {"hostvars": {}}, "all": {"children": []}})
        );
    }

    #[test]
    fn host_json_is_one_hosts_vars_or_empty() {
        let inv = build(&two());
        let list = inv.list_json();
        assert_eq!(inv.host_json("web-01"), list["_meta"]["hostvars"]["web-01"]);
        assert_eq!(
            read_marked(&inv.host_json("db-01"))["proxsync_node"],
            "pve2"
        );
        assert_eq!(inv.host_json("nope"), json!({}));
        assert_eq!(inv.host_json(""), json!({}));
    }

    #[test]
    fn yaml_is_the_yaml_inventory_format() {
        let inv = build(&two());
        let text = inv.yaml().unwrap();
        assert!(text.starts_with("\"all\":\n"), "{text}");
        assert!(
            text.contains("      \"proxsync_site\": !unsafe \"eu-fra\"\n"),
            "{text}"
        );
        assert!(
            text.contains("      \"proxsync_tags\":\n        - !unsafe \"frontend\"\n"),
            "{text}"
        );
        assert!(text.contains("      \"proxsync_vmid\": 101\n"), "{text}");
        assert!(text.contains("      \"proxsync_labels\": {}\n"), "{text}");
        // Every string value is tagged: a line holding a string value holds `!unsafe`.
        for line in text.lines() {
            let value = line.trim_start().trim_start_matches("- ");
            let value = value.split_once("\": ").map_or(value, |(_, v)| v);
            assert!(
                !value.starts_with('"') || line.trim_start().ends_with(':'),
                "{line}"
            );
        }
        // Ansible reads `!unsafe "x"` as the string x; serde_saphyr reads the tag's scalar.
        let doc: Value = serde_saphyr::from_str(&text.replace("!unsafe ", "")).unwrap();
        let all = &doc["all"];
        assert_eq!(
            all["hosts"]["web-01"],
            read_marked(&inv.list_json()["_meta"]["hostvars"]["web-01"])
        );
        assert_eq!(all["hosts"]["db-01"]["proxsync_ready"], json!(false));
        assert_eq!(
            all["children"]["site_eu_fra"],
            json!({"hosts": {"db-01": {}, "web-01": {}}})
        );
        assert_eq!(
            all["children"]["tag_frontend"],
            json!({"hosts": {"web-01": {}}})
        );
        // Values YAML 1.1 (Ansible's PyYAML) would read as something else stay strings.
        let mut odd = file("odd-01", "lab", "pve1", &[]);
        odd.labels = BTreeMap::from([
            ("a".to_string(), "yes".to_string()),
            ("b".to_string(), "0123".to_string()),
            ("c".to_string(), "null".to_string()),
        ]);
        let text = build(&[odd]).yaml().unwrap();
        for v in ["\"yes\"", "\"0123\"", "\"null\""] {
            assert!(text.contains(v), "{v}: {text}");
        }
    }

    /// A spec's committer chose the file path and the labels, root in the guest the
    /// addresses: none of it may reach Ansible as a template.
    fn hostile() -> SpecFile {
        let mut f = file("web-01", "eu-fra", "pve1", &[]);
        f.spec_file = Some("vms/{{ lookup('pipe','touch MARK') }}.yaml".into());
        f.ip_addresses = vec![
            "{{ lookup('pipe','touch MARK2') }}".into(),
            "192.0.2.10".into(),
            "10.0.0.5\n- evil".into(),
        ];
        f.vm_name = "{% raw %}".into();
        f.node = "{# x #}".into();
        f.labels = BTreeMap::from([
            ("role".to_string(), "{{ 7 * 7 }}".to_string()),
            (
                "{{ lookup('pipe','touch MARK3') }}".to_string(),
                "v".to_string(),
            ),
            ("{%x".to_string(), "v".to_string()),
        ]);
        f
    }

    #[test]
    fn every_string_is_marked_unsafe_and_addresses_are_addresses() {
        let inv = build(&[hostile()]);
        let list = inv.list_json();
        let vars = read_marked(&list["_meta"]["hostvars"]["web-01"]);
        assert_eq!(
            vars["proxsync_spec_file"],
            "vms/{{ lookup('pipe','touch MARK') }}.yaml"
        );
        assert_eq!(vars["proxsync_vm_name"], "{% raw %}");
        assert_eq!(vars["ansible_host"], "192.0.2.10");
        assert_eq!(vars["proxsync_addresses"], json!(["192.0.2.10"]));
        // A key cannot be marked: a label whose key could be a template is left out, and said.
        assert_eq!(vars["proxsync_labels"], json!({"role": "{{ 7 * 7 }}"}));
        assert_eq!(inv.notes.len(), 2, "{:?}", inv.notes);
        assert!(
            inv.notes[0].contains("web-01: label \"{%x\" left out of proxsync_labels"),
            "{:?}",
            inv.notes
        );
        // Its group is still made, from the sanitised name.
        assert!(
            inv.groups
                .contains_key("label____lookup__pipe___touch_MARK3______v"),
            "{:?}",
            inv.groups.keys()
        );
        assert_eq!(read_marked(&inv.host_json("web-01")), vars);
        assert_eq!(
            inv.host_json("web-01")["proxsync_spec_file"],
            json!({"__ansible_unsafe": "vms/{{ lookup('pipe','touch MARK') }}.yaml"})
        );
        let text = inv.yaml().unwrap();
        assert!(
            text.contains(
                "\"proxsync_spec_file\": !unsafe \"vms/{{ lookup('pipe','touch MARK') }}.yaml\"\n"
            ),
            "{text}"
        );
        assert!(
            !text.contains("MARK2") && !text.contains("'touch MARK3'"),
            "{text}"
        );
    }

    #[test]
    fn yaml_strings_read_back_as_written_and_hold_no_control_character() {
        for s in [
            "plain",
            "",
            "\"quoted\" and \\backslash\\",
            "line1\nline2\r\n\ttab",
            "\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}31m\u{7f}\u{85}",
            "\u{202e}evil\u{2066}\u{2028}\u{2029}\u{feff}\u{fffe}",
            "ünïcödé ✓ 😀",
            "!unsafe x",
            "{{ x }} #not-a-comment: - [a] {b} &c *d |e >f %g @h `i",
            "yes",
            "~",
        ] {
            let q = yaml_quoted(s);
            assert!(
                !q.chars()
                    .any(|c| c.is_control() || status_view::is_unsafe(c) || c == '\u{feff}'),
                "{q:?}"
            );
            let back: String = serde_saphyr::from_str(&q).unwrap_or_else(|e| panic!("{q}: {e}"));
            assert_eq!(back, s, "{q}");
        }
    }

    #[test]
    fn no_output_holds_anything_a_terminal_acts_on() {
        let d = tempfile::tempdir().unwrap();
        let mut sd = StatusDir::open(d.path()).unwrap();
        let nasty = "\u{1b}[2J\u{1b}]0;pwned\u{7}line1\nline2\r\u{202e}evil\u{9b}31m\u{85}\u{2028}";
        let st = SpecStatus {
            name: "web-01".into(),
            site: nasty.into(),
            node: nasty.into(),
            vm_name: nasty.into(),
            state: nasty.into(),
            spec_file: Some(nasty.into()),
            tags: vec![nasty.into()],
            labels: BTreeMap::from([(nasty.to_string(), nasty.to_string())]),
            ..SpecStatus::default()
        };
        sd.write_spec(&st, UNIX_EPOCH + Duration::from_secs(1_740_830_400))
            .unwrap();
        for output in [Output::List, Output::Host("web-01".into()), Output::Yaml] {
            let (text, _) = render(d.path(), &output).unwrap();
            assert!(text.contains("line1"), "{output:?}: {text}");
            assert!(
                !text
                    .chars()
                    .any(|c| c != '\n' && (c.is_control() || status_view::is_unsafe(c))),
                "{output:?}: {text:?}"
            );
        }
    }

    #[test]
    fn render_reads_the_files_the_status_writer_writes() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("status");
        let mut sd = StatusDir::open(&dir).unwrap();
        let st = SpecStatus {
            name: "web-01".into(),
            site: "eu-fra".into(),
            node: "pve1".into(),
            vm_id: Some(101),
            vm_name: "web-01".into(),
            state: "running".into(),
            ip_addresses: vec!["10.0.0.5".into()],
            tags: vec!["web".into()],
            labels: BTreeMap::from([("role".to_string(), "web".to_string())]),
            conditions: vec![ConditionInput::new(
                kinds::READY,
                S::True,
                Reason::Available,
                "",
            )],
            ..SpecStatus::default()
        };
        let now = UNIX_EPOCH + Duration::from_secs(1_740_830_400);
        sd.write_spec(&st, now).unwrap();
        std::fs::write(dir.join("bad-01.yaml"), "name: [unclosed").unwrap();

        let (text, notes) = render(&dir, &Output::List).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            read_marked(&doc["_meta"]["hostvars"]["web-01"]["ansible_host"]),
            "10.0.0.5"
        );
        assert_eq!(doc["_meta"]["hostvars"]["web-01"]["proxsync_ready"], true);
        assert_eq!(doc["label_role_web"]["hosts"], json!(["web-01"]));
        assert!(doc["_meta"]["hostvars"].get("bad-01").is_none());
        assert!(notes.iter().any(|n| n.contains("bad-01.yaml")), "{notes:?}");

        let (text, _) = render(&dir, &Output::Host("web-01".into())).unwrap();
        let vars: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(read_marked(&vars["proxsync_tags"]), json!(["web"]));
        let (text, _) = render(&dir, &Output::Host("bad-01".into())).unwrap();
        assert_eq!(text, "{}\n");
        let (text, _) = render(&dir, &Output::Yaml).unwrap();
        assert!(text.contains("\"site_eu_fra\":"), "{text}");

        let missing = d.path().join("nothing");
        let err = render(&missing, &Output::List).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(!missing.exists(), "never created");
    }
}
