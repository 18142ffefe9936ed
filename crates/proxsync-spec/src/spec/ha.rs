//! `forProvider.ha`: the VM as a resource of Proxmox VE's HA manager (`/cluster/ha/resources`,
//! `vm:<vmid>`). While a VM is HA-managed, PVE itself turns its power changes and migrations
//! into requests to the HA manager (`hastart`, `hastop`, `hamigrate`), so proxsync never acts
//! around it.

use serde::Serialize;

use super::PowerState;
use super::diag::Pos;
use super::fields::{Ctx, enum_field, object, string};
use super::hardware::bool_field;
use super::names::check_node;
use super::yaml::{Node, Value};

pub(super) const FIELDS: &[&str] = &[
    "state",
    "group",
    "nodes",
    "strict",
    "maxRestart",
    "maxRelocate",
];
/// The highest node priority accepted (PVE takes any whole number; only their order counts).
pub(crate) const MAX_HA_PRIORITY: u32 = 1000;
const PATH: &str = "spec.forProvider.ha";
/// The largest `maxRestart` / `maxRelocate` accepted (PVE has no upper bound; more than this
/// only delays an error state for a VM that cannot start).
pub const MAX_HA_TRIES: u32 = 10;

/// `ha`: the HA resource proxsync keeps for the VM.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ha {
    /// `state`; default the one `powerState` implies (`started` or `stopped`).
    pub state: HaState,
    /// A PVE 8 HA group (PVE 9 replaced groups by rules and refuses it, in its own words).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Where `group` is written, for the refusals that depend on the site's PVE version.
    #[serde(skip)]
    pub group_pos: Option<Pos>,
    /// `nodes`: where the VM should run, by priority: a group (PVE 8) or a node-affinity rule
    /// (PVE 9) that proxsync makes for this VM alone, and removes when the spec drops it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<HaNode>,
    /// `strict`: only on `nodes` (PVE 8's `restricted` group, PVE 9's `strict` rule); with
    /// `nodes` only.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
    /// `maxRestart`: how often the HA manager restarts the VM on its node after a failed start,
    /// 0..=[`MAX_HA_TRIES`]; default 1 (PVE's).
    pub max_restart: u32,
    /// `maxRelocate`: how often it moves the VM to another node after a failed start,
    /// 0..=[`MAX_HA_TRIES`]; default 1 (PVE's).
    pub max_relocate: u32,
}

/// One entry of `ha.nodes`: `pve1:2` (node `pve1`, priority 2) or `pve1` (priority 0). The HA
/// manager runs the VM on the online node of the highest priority.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct HaNode {
    /// The PVE node's name.
    pub node: String,
    /// Its priority: higher runs the VM first; 0 when not written.
    pub priority: u32,
}

impl Ha {
    /// Why a site of this PVE release refuses the spec's `ha`, if it does: PVE 9 replaced HA
    /// groups by rules (pve-ha-manager 5.x `API2/HA/Resources.pm`: "invalid parameter 'group':
    /// ha groups have been migrated to rules", on a new 9.x cluster too).
    pub fn refusal_on(&self, site: &str, pve_version: &str, pve_major: u32) -> Option<String> {
        let group = self.group.as_deref()?;
        (pve_major >= 9).then(|| {
            format!(
                "{PATH}.group {group:?}: site {site} runs Proxmox VE {pve_version}, which replaced HA \
                 groups with rules and refuses a resource's group (\"ha groups have been migrated to \
                 rules\"); write the group's nodes as {PATH}.nodes (e.g. nodes: [pve1:2, pve2:1], \
                 strict: true for a restricted group): proxsync makes a node-affinity rule of them"
            )
        })
    }
}

/// `ha.state`: the state the HA manager keeps the VM in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HaState {
    /// The HA manager keeps the VM running (and recovers it on node failure).
    Started,
    /// The HA manager keeps it stopped (still relocated on node failure).
    Stopped,
    /// HA lets it be: API calls act on it directly.
    Ignored,
}

impl HaState {
    /// PVE's word.
    pub fn as_str(self) -> &'static str {
        match self {
            HaState::Started => "started",
            HaState::Stopped => "stopped",
            HaState::Ignored => "ignored",
        }
    }
}

/// `forProvider.ha`, checked against `powerState` (the HA state decides the power of an
/// HA-managed VM, so the two must agree).
pub(super) fn ha_field(ctx: &mut Ctx, n: &Node, power: PowerState) -> Option<Ha> {
    let obj = object(ctx, n, PATH, Some(FIELDS))?;
    let default_state = match power {
        PowerState::Running => HaState::Started,
        PowerState::Stopped => HaState::Stopped,
    };
    let state = match obj.get("state") {
        None => Some(default_state),
        Some(s) => enum_field(
            ctx,
            s,
            &format!("{PATH}.state"),
            &[
                ("started", HaState::Started),
                ("stopped", HaState::Stopped),
                ("ignored", HaState::Ignored),
            ],
        ),
    }?;
    let clash = match (state, power) {
        (HaState::Started, PowerState::Stopped) => Some("stopped"),
        (HaState::Stopped, PowerState::Running) => Some("running"),
        _ => None,
    };
    if let Some(power) = clash {
        let pos = obj.get("state").map_or(n.pos, |s| s.pos);
        ctx.error(
            pos,
            format!(
                "{PATH}.state {} disagrees with powerState {power}: the HA manager decides the power of \
                 an HA-managed VM; set both the same way (or ha.state: ignored)",
                state.as_str()
            ),
        );
        return None;
    }
    let group = match obj.get("group") {
        None => None,
        Some(g) => {
            let s = string(ctx, g, &format!("{PATH}.group"), "\"prod\"")?;
            Some(ctx.check(g.pos, check_group(s))?)
        }
    };
    let nodes = match obj.get("nodes") {
        None => Vec::new(),
        Some(n) => ha_nodes(ctx, n)?,
    };
    if let (Some(g), false) = (obj.get("group"), nodes.is_empty()) {
        ctx.error(
            g.pos,
            format!(
                "{PATH}.group and {PATH}.nodes: write one of them (nodes makes a group of its own on \
                 PVE 8, a node-affinity rule on PVE 9)"
            ),
        );
        return None;
    }
    let strict = match obj.get("strict") {
        None => false,
        Some(n) => {
            let strict = bool_field(ctx, n, "ha.strict")?;
            if nodes.is_empty() {
                ctx.error(
                    n.pos,
                    format!("{PATH}.strict needs {PATH}.nodes: the nodes the VM is kept on"),
                );
                return None;
            }
            strict
        }
    };
    let max_restart = tries(ctx, obj.get("maxRestart"), "maxRestart")?;
    let max_relocate = tries(ctx, obj.get("maxRelocate"), "maxRelocate")?;
    Some(Ha {
        state,
        group,
        group_pos: obj.get("group").map(|g| g.pos),
        nodes,
        strict,
        max_restart,
        max_relocate,
    })
}

/// `nodes`: a list of `node` or `node:priority`, each node once (sorted by node).
fn ha_nodes(ctx: &mut Ctx, n: &Node) -> Option<Vec<HaNode>> {
    let path = format!("{PATH}.nodes");
    let Value::Seq(items) = &n.value else {
        ctx.error(
            n.pos,
            format!(
                "{path} must be a list of nodes with an optional priority, e.g. [pve1:2, pve2:1]; \
                 found {}",
                n.value.describe()
            ),
        );
        return None;
    };
    if items.is_empty() {
        ctx.error(n.pos, format!("{path} is empty: name at least one node"));
        return None;
    }
    let mut out: Vec<HaNode> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let s = string(ctx, item, &format!("{path}[{i}]"), "pve1:2")?;
        let (node, priority) = match s.split_once(':') {
            None => (s, Some(0)),
            Some((node, p)) => (
                node,
                p.parse::<u32>().ok().filter(|p| *p <= MAX_HA_PRIORITY),
            ),
        };
        let Some(priority) = priority else {
            ctx.error(
                item.pos,
                format!(
                    "{path}[{i}] {s:?}: the priority after ':' must be a whole number from 0 to \
                     {MAX_HA_PRIORITY} (a higher one is preferred), e.g. pve1:2"
                ),
            );
            return None;
        };
        ctx.check(
            item.pos,
            check_node(node).map_err(|e| format!("{path}[{i}]: {e}")),
        )?;
        if out.iter().any(|n| n.node == node) {
            ctx.error(
                item.pos,
                format!("{path}[{i}]: node {node} is listed twice"),
            );
            return None;
        }
        out.push(HaNode {
            node: node.to_string(),
            priority,
        });
    }
    out.sort();
    Some(out)
}

/// PVE's `pve-configid`: a letter, then letters, digits, `-` and `_` (2-64 characters).
fn check_group(s: &str) -> Result<String, String> {
    let ok = (2..=64).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{PATH}.group {s:?} is not a valid HA group id: a letter, then letters, digits, - and _ \
             (2-64 characters)"
        ))
    }
}

/// `maxRestart` / `maxRelocate`: 0..=[`MAX_HA_TRIES`], default 1 (PVE's).
fn tries(ctx: &mut Ctx, n: Option<&Node>, field: &str) -> Option<u32> {
    let Some(n) = n else { return Some(1) };
    match n.value {
        Value::Int(i) if (0..=i128::from(MAX_HA_TRIES)).contains(&i) => Some(i as u32),
        ref other => {
            ctx.error(
                n.pos,
                format!(
                    "{PATH}.{field} must be a whole number from 0 to {MAX_HA_TRIES}; found {}",
                    other.describe()
                ),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ha_follows_power_and_refuses_what_pve_would() {
        use super::*;
        let (specs, diags) =
            crate::spec::parse_test_spec("    ha: {maxRestart: 2, group: prod-1}\n");
        assert!(diags.is_empty(), "{diags:?}");
        let ha = specs[0].ha.clone().unwrap();
        assert_eq!(ha.state, HaState::Started);
        assert_eq!((ha.max_restart, ha.max_relocate), (2, 1));
        assert_eq!(ha.group.as_deref(), Some("prod-1"));
        let (specs, _) = crate::spec::parse_test_spec("    powerState: stopped\n    ha: {}\n");
        assert_eq!(specs[0].ha.as_ref().unwrap().state, HaState::Stopped);
        assert!(crate::spec::parse_test_spec("").0[0].ha.is_none());

        for (extra, want) in [
            (
                "    powerState: stopped\n    ha: {state: started}\n",
                "web.yaml:10:17: error: spec.forProvider.ha.state started disagrees with powerState stopped",
            ),
            (
                "    ha: {state: enabled}\n",
                "spec.forProvider.ha.state \"enabled\" is not valid",
            ),
            (
                "    ha: {group: \"prod,x=1\"}\n",
                "is not a valid HA group id",
            ),
            (
                "    ha: {maxRelocate: 11}\n",
                "spec.forProvider.ha.maxRelocate must be a whole number from 0 to 10",
            ),
            ("    ha: {nodes: pve1}\n", "nodes"),
            ("    ha: true\n", "spec.forProvider.ha must be a mapping"),
        ] {
            let (specs, diags) = crate::spec::parse_test_spec(extra);
            assert!(specs.is_empty(), "{extra}");
            assert!(diags.iter().any(|d| d.contains(want)), "{extra}: {diags:?}");
        }
    }

    #[test]
    fn nodes_are_a_priority_list_and_exclude_group() {
        let (specs, diags) =
            crate::spec::parse_test_spec("    ha: {nodes: [pve2:1, pve1:2, pve3], strict: true}\n");
        assert!(diags.is_empty(), "{diags:?}");
        let ha = specs[0].ha.clone().unwrap();
        let nodes: Vec<(&str, u32)> = ha
            .nodes
            .iter()
            .map(|n| (n.node.as_str(), n.priority))
            .collect();
        assert_eq!(nodes, [("pve1", 2), ("pve2", 1), ("pve3", 0)]);
        assert!(ha.strict);
        assert!(ha.group.is_none());
        // Block style, the way most specs are written.
        let (specs, diags) = crate::spec::parse_test_spec(
            "    ha:\n      nodes:\n        - pve1:2\n        - pve2\n",
        );
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(specs[0].ha.as_ref().unwrap().nodes.len(), 2);

        for (extra, want) in [
            (
                "    ha: {group: prod, nodes: [pve1]}\n",
                "web.yaml:9:17: error: spec.forProvider.ha.group and spec.forProvider.ha.nodes: write one of them",
            ),
            (
                "    ha: {strict: true}\n",
                "spec.forProvider.ha.strict needs spec.forProvider.ha.nodes",
            ),
            (
                "    ha: {nodes: []}\n",
                "spec.forProvider.ha.nodes is empty",
            ),
            (
                "    ha: {nodes: [pve1, pve1:2]}\n",
                "node pve1 is listed twice",
            ),
            (
                "    ha: {nodes: [\"pve1:x\"]}\n",
                "the priority after ':' must be a whole number from 0 to 1000",
            ),
            ("    ha: {nodes: [\"pve1:1001\"]}\n", "from 0 to 1000"),
            (
                "    ha: {nodes: [\"pve_1\"]}\n",
                "spec.forProvider.ha.nodes[0]: node \"pve_1\" is not a valid Proxmox node name",
            ),
            (
                "    ha: {nodes: pve1}\n",
                "spec.forProvider.ha.nodes must be a list",
            ),
        ] {
            let (specs, diags) = crate::spec::parse_test_spec(extra);
            assert!(specs.is_empty(), "{extra}");
            assert!(diags.iter().any(|d| d.contains(want)), "{extra}: {diags:?}");
        }
    }

    #[test]
    fn a_group_is_refused_on_pve_9() {
        let (specs, _) = crate::spec::parse_test_spec("    ha: {group: prod}\n");
        let ha = specs[0].ha.clone().unwrap();
        assert!(ha.refusal_on("lab", "8.4.1", 8).is_none());
        let why = ha.refusal_on("lab", "9.1.2", 9).unwrap();
        assert!(
            why.contains("ha groups have been migrated to rules"),
            "{why}"
        );
        assert!(why.contains("spec.forProvider.ha.nodes"), "{why}");
        assert_eq!(ha.group_pos.map(|p| (p.line, p.column)), Some((9, 17)));
        let (specs, _) = crate::spec::parse_test_spec("    ha: {nodes: [pve1]}\n");
        assert!(
            specs[0]
                .ha
                .as_ref()
                .unwrap()
                .refusal_on("lab", "9.1.2", 9)
                .is_none()
        );
    }
}
