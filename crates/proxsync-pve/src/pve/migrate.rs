//! Live and offline migration of a VM between the nodes of one cluster (qemu-server
//! `PVE/API2/Qemu.pm`: `migrate_vm_precondition`, `migrate_vm`).

use std::collections::BTreeMap;

use serde::Deserialize;

#[cfg(feature = "client")]
use super::Client;
use super::api::{flag, seg};
use super::types::opt_bool;
use super::{Error, Upid};
use crate::guest::GuestKind;

/// `GET /nodes/{node}/qemu/{vmid}/migrate?target=T`: what would block a migration. PVE checks
/// the lock first (a locked VM is an error), then lists the nodes the VM's storages reach, the
/// disks on storage that is not shared (CD-ROMs and the cloud-init drive among them) and the
/// local devices (`hostpci0`, `usb1`, a serial device) that keep it where it is.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MigratePrecondition {
    #[serde(default, deserialize_with = "opt_bool")]
    pub running: Option<bool>,
    #[serde(default)]
    pub allowed_nodes: Vec<String>,
    /// Node -> why not (`unavailable_storages`, `unavailable-resources`,
    /// `blocking-ha-resources`), kept as PVE sent it.
    #[serde(default)]
    pub not_allowed_nodes: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub local_disks: Vec<LocalDisk>,
    #[serde(default)]
    pub local_resources: Vec<String>,
}

/// One entry of `local_disks`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct LocalDisk {
    #[serde(default)]
    pub volid: String,
    #[serde(default, deserialize_with = "opt_bool")]
    pub cdrom: Option<bool>,
    #[serde(default, deserialize_with = "opt_bool")]
    pub is_unused: Option<bool>,
}

impl LocalDisk {
    /// PVE's generated cloud-init drive (`vm-N-cloudinit`): migrated by regenerating it.
    pub(crate) fn is_cloudinit(&self) -> bool {
        self.volid.contains("-cloudinit")
    }

    /// A CD-ROM image on local storage: `QemuMigrate` dies with `local cdrom image`.
    pub(crate) fn blocks_migration(&self) -> bool {
        self.cdrom == Some(true) && !self.is_cloudinit()
    }
}

impl MigratePrecondition {
    /// Why the VM cannot move to `target`, in PVE's terms; `None` when nothing is in the way.
    pub fn blocker(&self, target: &str) -> Option<String> {
        if !self.local_resources.is_empty() {
            return Some(format!(
                "it uses local devices: {}",
                self.local_resources.join(", ")
            ));
        }
        let cdroms: Vec<&str> = self
            .local_disks
            .iter()
            .filter(|d| d.blocks_migration())
            .map(|d| d.volid.as_str())
            .collect();
        if !cdroms.is_empty() {
            return Some(format!(
                "a CD-ROM image is on storage local to its node ({}): PVE cannot migrate a local cdrom image",
                cdroms.join(", ")
            ));
        }
        if let Some(why) = self.not_allowed_nodes.get(target) {
            return Some(format!("node {target} is not allowed: {}", compact(why)));
        }
        if !self.allowed_nodes.iter().any(|n| n == target) {
            return Some(format!(
                "node {target} is not among the nodes it may move to ({})",
                self.allowed_nodes.join(", ")
            ));
        }
        None
    }

    /// Whether the migration must carry disks along (`with-local-disks`): a disk in use on
    /// storage that is not shared. Required by PVE for a running VM; harmless for a stopped one.
    pub fn needs_local_disks(&self) -> bool {
        self.local_disks
            .iter()
            .any(|d| d.cdrom != Some(true) && d.is_unused != Some(true))
    }
}

/// A JSON value on one line, without the quotes of plain strings.
fn compact(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(feature = "client")]
impl Client {
    /// `GET /nodes/{node}/qemu/{vmid}/migrate?target=T`: at once.
    pub(crate) async fn migrate_precondition(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        target: &str,
    ) -> Result<MigratePrecondition, Error> {
        let path = format!("/nodes/{}/{kind}/{vmid}/migrate", seg(node)?);
        self.get(&path, &[("target", seg(target)?.to_string())])
            .await
    }

    /// `POST /nodes/{node}/qemu/{vmid}/migrate`: a `qmigrate` task, or `hamigrate` for an
    /// HA-managed VM (PVE hands the move to the HA manager, which migrates after the task ends).
    /// `online` for a running VM (PVE refuses a running VM without it, and ignores it for a
    /// stopped one); `with_local_disks` copies disks on storage the target does not share.
    pub(crate) async fn migrate_vm(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        online: bool,
        with_local_disks: bool,
    ) -> Result<Upid, Error> {
        let path = format!("/nodes/{}/qemu/{vmid}/migrate", seg(node)?);
        let mut form = vec![("target", seg(target)?.to_string())];
        if online {
            form.push(("online", flag(true)));
        }
        if with_local_disks {
            form.push(("with-local-disks", flag(true)));
        }
        let upid: String = self.post(&path, &form).await?;
        self.task_started("POST", &path, upid)
    }

    /// `POST /nodes/{node}/lxc/{vmid}/migrate`: a `vzmigrate` task (or `hamigrate`). A running
    /// container cannot move live: with `restart` PVE shuts it down within `timeout_secs`
    /// (`lxc-stop --nokill`: never hard; a container still up then fails the task with
    /// "container did not stop"), moves it with its local volumes and starts it on the target;
    /// a failure after the shutdown starts it again where it was (pve-container `Migrate.pm`).
    /// Without `restart`, a running container is refused ("can't migrate running container
    /// without --online or --restart").
    pub(crate) async fn migrate_ct(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        restart: bool,
        timeout_secs: u32,
    ) -> Result<Upid, Error> {
        let path = format!("/nodes/{}/lxc/{vmid}/migrate", seg(node)?);
        let mut form = vec![("target", seg(target)?.to_string())];
        if restart {
            form.push(("restart", flag(true)));
            form.push(("timeout", timeout_secs.to_string()));
        }
        let upid: String = self.post(&path, &form).await?;
        self.task_started("POST", &path, upid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pre(json: &str) -> MigratePrecondition {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn blockers_in_pve_terms() {
        // As PVE 9 answers for a running VM with a local disk and its cloud-init drive.
        let ok = pre(
            r#"{"running":1,"allowed_nodes":["pve2"],"not_allowed_nodes":{},
                "local_disks":[{"volid":"local-lvm:vm-100-disk-0","size":1,"is_unused":0},
                               {"volid":"local-lvm:vm-100-cloudinit","cdrom":1}],
                "local_resources":[],"mapped-resources":[],"has-dbus-vmstate":1}"#,
        );
        assert_eq!(ok.blocker("pve2"), None);
        assert!(ok.needs_local_disks());
        assert_eq!(ok.running, Some(true));

        let iso = pre(
            r#"{"running":0,"allowed_nodes":["pve2"],"local_disks":[{"volid":"local:iso/d.iso","cdrom":1}],"local_resources":[]}"#,
        );
        assert!(iso.blocker("pve2").unwrap().contains("local cdrom image"));
        assert!(!iso.needs_local_disks());

        let dev = pre(r#"{"running":1,"allowed_nodes":["pve2"],"local_resources":["hostpci0"]}"#);
        assert!(dev.blocker("pve2").unwrap().contains("hostpci0"));

        let storage = pre(
            r#"{"running":0,"allowed_nodes":[],"not_allowed_nodes":{"pve2":{"unavailable_storages":["fast"]}}}"#,
        );
        let why = storage.blocker("pve2").unwrap();
        assert!(
            why.contains("unavailable_storages") && why.contains("fast"),
            "{why}"
        );
        assert!(storage.blocker("pve3").unwrap().contains("not among"));
    }
}
