//! `forProvider.ha`: the VM as a resource of Proxmox VE's HA manager (`/cluster/ha/resources`,
//! `vm:<vmid>`). While a VM is HA-managed, PVE itself turns its power changes and migrations
//! into requests to the HA manager (`hastart`, `hastop`, `hamigrate`), so proxsync never acts
//! around it.

use serde::Serialize;

use super::PowerState;
use super::validate::{Ctx, enum_field, object, string};
use super::yaml::{Node, Value};

const FIELDS: &[&str] = &["state", "group", "maxRestart", "maxRelocate"];
const PATH: &str = "spec.forProvider.ha";
/// The largest `maxRestart` / `maxRelocate` accepted (PVE has no upper bound; more than this
/// only delays an error state for a VM that cannot start).
pub const MAX_HA_TRIES: u32 = 10;

/// `ha`: the HA resource proxsync keeps for the VM.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ha {
    pub state: HaState,
    /// A PVE 8 HA group (PVE 9 replaced groups by rules and refuses it, in its own words).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub max_restart: u32,
    pub max_relocate: u32,
}

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
    let max_restart = tries(ctx, obj.get("maxRestart"), "maxRestart")?;
    let max_relocate = tries(ctx, obj.get("maxRelocate"), "maxRelocate")?;
    Some(Ha {
        state,
        group,
        max_restart,
        max_relocate,
    })
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
}
