//! The HA manager's resources (pve-ha-manager `PVE/API2/HA/Resources.pm`): reading, adding,
//! changing and removing `vm:<vmid>` and `ct:<vmid>`. Reading needs Sys.Audit on `/`, the others Sys.Console
//! on `/`. Each answers at once (the CRM acts on the new state afterwards).

use serde::Deserialize;

#[cfg(feature = "client")]
use super::Client;
use super::Error;
use super::texts::Meaning;
use super::types::opt_u64;
use crate::guest::GuestKind;

/// One HA resource as `GET /cluster/ha/resources/{sid}` answers it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HaResource {
    /// `vm:N` or `ct:N`.
    pub sid: String,
    /// The requested state (`started`, `stopped`, `disabled`, `ignored`, ...); absent: `started`.
    #[serde(default)]
    pub state: Option<String>,
    /// The HA group (PVE 8; PVE 9 has node-affinity rules instead).
    #[serde(default)]
    pub group: Option<String>,
    /// Restarts on its node after a failed start, before it is relocated; absent: 1.
    #[serde(default, deserialize_with = "opt_u64")]
    pub max_restart: Option<u64>,
    /// Relocations to another node after a failed start; absent: 1.
    #[serde(default, deserialize_with = "opt_u64")]
    pub max_relocate: Option<u64>,
    /// The resource's comment.
    #[serde(default)]
    pub comment: Option<String>,
    /// The HA resources config's digest, to pass back on a change.
    #[serde(default)]
    pub digest: Option<String>,
}

/// What proxsync sets on a guest's HA resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaParams {
    /// The requested state (`started`, `stopped`, ...).
    pub state: String,
    /// The HA group (PVE 8); `None` removes it on an update.
    pub group: Option<String>,
    /// Restarts on its node after a failed start, before it is relocated.
    pub max_restart: u32,
    /// Relocations to another node after a failed start.
    pub max_relocate: u32,
    /// The resource's comment (proxsync writes `proxsync <install>: spec <name>`).
    pub comment: String,
}

impl HaParams {
    fn form(&self) -> Vec<(&'static str, String)> {
        let mut form = vec![
            ("state", self.state.clone()),
            ("max_restart", self.max_restart.to_string()),
            ("max_relocate", self.max_relocate.to_string()),
            ("comment", self.comment.clone()),
        ];
        if let Some(g) = &self.group {
            form.push(("group", g.clone()));
        }
        form
    }

    /// The fields of `current` that differ from these (PVE's defaults filled in: state
    /// `started`, one restart and one relocation).
    pub fn differs_from(&self, current: &HaResource) -> bool {
        current.state.as_deref().unwrap_or("started") != self.state
            || current.group != self.group
            || current.max_restart.unwrap_or(1) != u64::from(self.max_restart)
            || current.max_relocate.unwrap_or(1) != u64::from(self.max_relocate)
    }
}

#[cfg(feature = "client")]
impl Client {
    /// `GET /cluster/ha/resources/{vm|ct}:N`; `None` when the guest is not an HA resource (PVE
    /// answers 500 `no such resource 'vm:N'`).
    pub async fn ha_resource(
        &self,
        kind: GuestKind,
        vmid: u32,
    ) -> Result<Option<HaResource>, Error> {
        let path = format!("/cluster/ha/resources/{}", kind.ha_sid(vmid));
        match self.get(&path, &[]).await {
            Ok(r) => Ok(Some(r)),
            Err(e) if e.meaning() == Some(Meaning::HaMissing) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /cluster/ha/resources`: makes the guest an HA resource.
    pub async fn add_ha_resource(
        &self,
        kind: GuestKind,
        vmid: u32,
        params: &HaParams,
    ) -> Result<(), Error> {
        let mut form = params.form();
        form.push(("sid", kind.ha_sid(vmid)));
        let _: serde_json::Value = self.post("/cluster/ha/resources", &form).await?;
        Ok(())
    }

    /// `PUT /cluster/ha/resources/{vm|ct}:N` (+`digest`: refused if someone changed it
    /// meanwhile).
    pub(crate) async fn update_ha_resource(
        &self,
        kind: GuestKind,
        vmid: u32,
        params: &HaParams,
        digest: Option<&str>,
    ) -> Result<(), Error> {
        let path = format!("/cluster/ha/resources/{}", kind.ha_sid(vmid));
        let mut form = params.form();
        if params.group.is_none() {
            form.push(("delete", "group".to_string()));
        }
        if let Some(d) = digest {
            form.push(("digest", d.to_string()));
        }
        let _: serde_json::Value = self.put(&path, &form).await?;
        Ok(())
    }

    /// `DELETE /cluster/ha/resources/{vm|ct}:N`: the guest is no longer HA-managed (it keeps
    /// running).
    /// With `keep_rules` (PVE 9), `purge=0`: pve-ha-manager 5.0.7+ otherwise removes the
    /// resource from every rule and deletes a rule it was the only resource of (`purge`
    /// defaults to 1), an admin's included. A release before 5.0.7 has no `purge` (and purges
    /// nothing): its 400 naming `purge` executed nothing, so the plain DELETE follows. Only
    /// with the gate's permit for it (`gate::ha::may_remove_resource`); refused before sending
    /// otherwise.
    pub async fn remove_ha_resource(
        &self,
        kind: GuestKind,
        vmid: u32,
        keep_rules: bool,
        permit: &crate::pve::permit::Permit,
    ) -> Result<(), Error> {
        let sid = kind.ha_sid(vmid);
        crate::pve::permit::check_remove_ha_resource(&sid, permit).map_err(Error::NotPermitted)?;
        let path = format!("/cluster/ha/resources/{sid}");
        if keep_rules {
            match self
                .delete::<serde_json::Value>(&path, &[("purge", "0".to_string())])
                .await
            {
                Err(e) if e.rejects_parameter("purge") => {}
                other => return other.map(|_| ()),
            }
        }
        let _: serde_json::Value = self.delete(&path, &[]).await?;
        Ok(())
    }

    /// `GET /cluster/ha/groups/{id}` (PVE 8) or `GET /cluster/ha/rules/{id}` (PVE 9); `None`
    /// when there is none (`no such ha group` / `no such ha rule`).
    pub async fn ha_affinity(
        &self,
        kind: AffinityKind,
        id: &str,
    ) -> Result<Option<HaAffinity>, Error> {
        let path = format!("{}/{}", kind.path(), super::api::seg(id)?);
        match self.get(&path, &[]).await {
            Ok(a) => Ok(Some(a)),
            Err(e) if e.meaning() == Some(Meaning::HaMissing) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /cluster/ha/groups` or `POST /cluster/ha/rules` (a node-affinity rule).
    pub async fn add_ha_affinity(
        &self,
        kind: AffinityKind,
        id: &str,
        params: &AffinityParams,
    ) -> Result<(), Error> {
        let mut form = params.form(kind);
        form.push((kind.id_key(), id.to_string()));
        let _: serde_json::Value = self.post(kind.path(), &form).await?;
        Ok(())
    }

    /// `PUT /cluster/ha/groups/{id}` or `PUT /cluster/ha/rules/{id}` (+`digest`).
    pub(crate) async fn update_ha_affinity(
        &self,
        kind: AffinityKind,
        id: &str,
        params: &AffinityParams,
        digest: Option<&str>,
    ) -> Result<(), Error> {
        let path = format!("{}/{}", kind.path(), super::api::seg(id)?);
        let mut form = params.form(kind);
        if let Some(d) = digest {
            form.push(("digest", d.to_string()));
        }
        let _: serde_json::Value = self.put(&path, &form).await?;
        Ok(())
    }

    /// `DELETE /cluster/ha/groups/{id}` (refused while a resource is in the group) or
    /// `DELETE /cluster/ha/rules/{id}`: only with the gate's permit for it
    /// (`gate::ha::may_remove`); refused before sending otherwise.
    pub async fn remove_ha_affinity(
        &self,
        kind: AffinityKind,
        id: &str,
        permit: &crate::pve::permit::Permit,
    ) -> Result<(), Error> {
        crate::pve::permit::check_remove_affinity(id, permit).map_err(Error::NotPermitted)?;
        let path = format!("{}/{}", kind.path(), super::api::seg(id)?);
        let _: serde_json::Value = self.delete(&path, &[]).await?;
        Ok(())
    }
}

/// Where a resource's node affinity lives: PVE 8's HA groups (pve-ha-manager 4.x
/// `API2/HA/Groups.pm`; the resource names its group) or PVE 9's node-affinity rules
/// (pve-ha-manager 5.x `API2/HA/Rules.pm`; the rule names its resources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AffinityKind {
    /// PVE 8's HA groups (`/cluster/ha/groups`).
    Group,
    /// PVE 9's node-affinity rules (`/cluster/ha/rules`).
    Rule,
}

impl AffinityKind {
    /// The kind a site of this PVE major release has.
    pub fn for_major(major: u32) -> AffinityKind {
        if major >= 9 {
            AffinityKind::Rule
        } else {
            AffinityKind::Group
        }
    }

    fn path(self) -> &'static str {
        match self {
            AffinityKind::Group => "/cluster/ha/groups",
            AffinityKind::Rule => "/cluster/ha/rules",
        }
    }

    fn id_key(self) -> &'static str {
        match self {
            AffinityKind::Group => "group",
            AffinityKind::Rule => "rule",
        }
    }

    /// The word for messages.
    pub fn word(self) -> &'static str {
        match self {
            AffinityKind::Group => "HA group",
            AffinityKind::Rule => "HA node-affinity rule",
        }
    }
}

/// A group or node-affinity rule as PVE answers it (`nodes` as `node[:priority],...`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HaAffinity {
    /// The nodes and their priorities.
    #[serde(default)]
    pub nodes: Option<String>,
    /// A rule's `strict`.
    #[serde(default, deserialize_with = "super::types::opt_bool")]
    pub strict: Option<bool>,
    /// A group's `restricted`.
    #[serde(default, deserialize_with = "super::types::opt_bool")]
    pub restricted: Option<bool>,
    /// A rule's resources (`vm:100,vm:101`).
    #[serde(default)]
    pub resources: Option<String>,
    /// The group's or rule's comment.
    #[serde(default)]
    pub comment: Option<String>,
    /// The groups' or rules' config digest, to pass back on a change.
    #[serde(default)]
    pub digest: Option<String>,
}

/// What proxsync sets on the group or rule it makes for one VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityParams {
    /// (node, priority), sorted by node.
    pub nodes: Vec<(String, u32)>,
    /// Only these nodes may run the VM: a rule's `strict`, a group's `restricted`.
    pub strict: bool,
    /// The VM's resource (`vm:N`): a rule names it; a group is named by the resource instead.
    pub sid: String,
    /// proxsync's mark (`gate::ha::affinity_mark`).
    pub comment: String,
}

impl AffinityParams {
    /// `node[:priority]` joined as PVE writes them (a priority of 0 left out).
    pub fn nodes_text(&self) -> String {
        join_nodes(self.nodes.iter().map(|(n, p)| (n.as_str(), *p)))
    }

    fn form(&self, kind: AffinityKind) -> Vec<(&'static str, String)> {
        let flag = if self.strict { "1" } else { "0" }.to_string();
        let mut form = vec![
            ("nodes", self.nodes_text()),
            ("comment", self.comment.clone()),
        ];
        match kind {
            AffinityKind::Group => form.push(("restricted", flag)),
            AffinityKind::Rule => {
                form.push(("type", "node-affinity".into()));
                form.push(("resources", self.sid.clone()));
                form.push(("strict", flag));
            }
        }
        form
    }

    /// Whether `current` differs in what proxsync sets (nodes and priorities, strictness, the
    /// rule's resources, the mark).
    pub fn differs_from(&self, kind: AffinityKind, current: &HaAffinity) -> bool {
        let nodes = normalize_nodes(current.nodes.as_deref().unwrap_or(""));
        let strict = match kind {
            AffinityKind::Group => current.restricted,
            AffinityKind::Rule => current.strict,
        }
        .unwrap_or(false);
        let resources_differ = kind == AffinityKind::Rule
            && current
                .resources
                .as_deref()
                .unwrap_or("")
                .split(',')
                .collect::<Vec<_>>()
                != [self.sid.as_str()];
        nodes != self.nodes_text()
            || strict != self.strict
            || resources_differ
            || current.comment.as_deref() != Some(self.comment.as_str())
    }
}

fn join_nodes<'a>(nodes: impl Iterator<Item = (&'a str, u32)>) -> String {
    let mut v: Vec<(&str, u32)> = nodes.collect();
    v.sort();
    v.iter()
        .map(|(n, p)| {
            if *p == 0 {
                n.to_string()
            } else {
                format!("{n}:{p}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// PVE's node list (`pve1:2,pve2`, any order, `pve2:0` as `pve2`) in [`join_nodes`]' form.
fn normalize_nodes(text: &str) -> String {
    join_nodes(text.split([',', ';', ' ']).filter(|p| !p.is_empty()).map(
        |p| match p.split_once(':') {
            Some((n, prio)) => (n, prio.trim().parse().unwrap_or(0)),
            None => (p, 0),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_affinity_compares_as_pve_writes_it() {
        let want = AffinityParams {
            nodes: vec![("pve1".into(), 2), ("pve2".into(), 0)],
            strict: false,
            sid: "vm:100".into(),
            comment: "proxsync main: spec web-01".into(),
        };
        let rule: HaAffinity = serde_json::from_str(
            r#"{"rule":"r","nodes":"pve2,pve1:2","strict":0,"resources":"vm:100","comment":"proxsync main: spec web-01","digest":"d"}"#,
        )
        .unwrap();
        assert!(!want.differs_from(AffinityKind::Rule, &rule));
        let moved: HaAffinity = serde_json::from_str(
            r#"{"nodes":"pve1:2,pve2:1","resources":"vm:100","comment":"proxsync main: spec web-01"}"#,
        )
        .unwrap();
        assert!(want.differs_from(AffinityKind::Rule, &moved));
        let shared: HaAffinity = serde_json::from_str(
            r#"{"nodes":"pve1:2,pve2","resources":"vm:100,vm:101","comment":"proxsync main: spec web-01"}"#,
        )
        .unwrap();
        assert!(want.differs_from(AffinityKind::Rule, &shared));
        // A group has no resources; `restricted` is its strictness.
        let group: HaAffinity = serde_json::from_str(
            r#"{"group":"g","nodes":"pve1:2,pve2","restricted":1,"comment":"proxsync main: spec web-01"}"#,
        )
        .unwrap();
        assert!(want.differs_from(AffinityKind::Group, &group));
        assert!(
            !AffinityParams {
                strict: true,
                ..want.clone()
            }
            .differs_from(AffinityKind::Group, &group)
        );
        let form = want.form(AffinityKind::Rule);
        assert!(
            form.contains(&("nodes", "pve1:2,pve2".to_string())),
            "{form:?}"
        );
        assert!(
            form.contains(&("type", "node-affinity".to_string())),
            "{form:?}"
        );
        assert!(
            form.contains(&("resources", "vm:100".to_string())),
            "{form:?}"
        );
    }

    #[test]
    fn differences_count_pve_defaults() {
        let want = HaParams {
            state: "started".into(),
            group: None,
            max_restart: 1,
            max_relocate: 1,
            comment: "c".into(),
        };
        let read: HaResource =
            serde_json::from_str(r#"{"sid":"vm:100","type":"vm","digest":"d"}"#).unwrap();
        assert!(!want.differs_from(&read), "PVE omits its defaults");
        let read: HaResource = serde_json::from_str(
            r#"{"sid":"vm:100","state":"stopped","max_restart":"1","max_relocate":1}"#,
        )
        .unwrap();
        assert!(want.differs_from(&read));
    }
}
