//! The HA manager's resources (pve-ha-manager `PVE/API2/HA/Resources.pm`): reading, adding,
//! changing and removing `vm:<vmid>`. Reading needs Sys.Audit on `/`, the others Sys.Console
//! on `/`. Each answers at once (the CRM acts on the new state afterwards).

use serde::Deserialize;

use super::types::opt_u64;
use super::{Client, Error};

/// One HA resource as `GET /cluster/ha/resources/{sid}` answers it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HaResource {
    pub sid: String,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default, deserialize_with = "opt_u64")]
    pub max_restart: Option<u64>,
    #[serde(default, deserialize_with = "opt_u64")]
    pub max_relocate: Option<u64>,
    #[serde(default)]
    pub comment: Option<String>,
    #[serde(default)]
    pub digest: Option<String>,
}

/// What proxsync sets on a VM's HA resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaParams {
    pub state: String,
    pub group: Option<String>,
    pub max_restart: u32,
    pub max_relocate: u32,
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

fn sid(vmid: u32) -> String {
    format!("vm:{vmid}")
}

impl Client {
    /// `GET /cluster/ha/resources/vm:N`; `None` when the VM is not an HA resource (PVE answers
    /// 500 `no such resource 'vm:N'`).
    pub async fn ha_resource(&self, vmid: u32) -> Result<Option<HaResource>, Error> {
        let path = format!("/cluster/ha/resources/{}", sid(vmid));
        match self.get(&path, &[]).await {
            Ok(r) => Ok(Some(r)),
            Err(e) if e.pve_message().contains("no such resource") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /cluster/ha/resources`: makes the VM an HA resource.
    pub async fn add_ha_resource(&self, vmid: u32, params: &HaParams) -> Result<(), Error> {
        let mut form = params.form();
        form.push(("sid", sid(vmid)));
        let _: serde_json::Value = self.post("/cluster/ha/resources", &form).await?;
        Ok(())
    }

    /// `PUT /cluster/ha/resources/vm:N` (+`digest`: refused if someone changed it meanwhile).
    pub async fn update_ha_resource(
        &self,
        vmid: u32,
        params: &HaParams,
        digest: Option<&str>,
    ) -> Result<(), Error> {
        let path = format!("/cluster/ha/resources/{}", sid(vmid));
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

    /// `DELETE /cluster/ha/resources/vm:N`: the VM is no longer HA-managed (it keeps running).
    pub async fn remove_ha_resource(&self, vmid: u32) -> Result<(), Error> {
        let path = format!("/cluster/ha/resources/{}", sid(vmid));
        let _: serde_json::Value = self.delete(&path, &[]).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
