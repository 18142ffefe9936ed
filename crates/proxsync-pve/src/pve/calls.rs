//! The seam between proxsync's actions and Proxmox VE: [`Pve`], the calls `execute` and
//! `observe` make, implemented by [`Client`] (HTTP, by delegation to its own methods) and in
//! unit tests by the in-memory fake (`pve::fake`).
//!
//! Generic code takes `impl Pve` (or `P: Pve`), never `dyn`: the methods are `async` and each
//! returns a `Send` future, so actions stay spawnable on tokio's multi-threaded runtime. The
//! CLI, `doctor` and the daemon keep using [`Client`] itself.

use std::future::Future;
use std::time::Duration;

use super::ha::{AffinityKind, AffinityParams, HaAffinity, HaParams, HaResource};
use super::migrate::MigratePrecondition;
use super::types::{
    AgentInterface, ClusterHealth, ClusterStatusEntry, DatacenterOptions, Listing,
    NetworkInterface, NodeResources, NodeStorage, PendingEntry, Snapshot, StorageVolume,
    TaskListEntry, Version, VmConfig,
};
use super::{Client, CloneRequest, Download, Error, TaskOutcome, Upid, VmParams};
use crate::guest::GuestKind;
use crate::pve::permit::Permit;

/// Declares [`Pve`] from one list of calls and implements it for [`Client`] by calling the
/// inherent method of the same name: one place to add a call, and no way for the two to drift.
macro_rules! pve_calls {
    ($( $(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty; )*) => {
        /// The Proxmox VE calls of `execute` and `observe`. See [`Client`]'s methods of the same
        /// names for the endpoint, the answer and what can fail.
        pub trait Pve: Send + Sync + 'static {
            $(
                $(#[$doc])*
                fn $name(&self $(, $arg: $ty)*)
                    -> impl Future<Output = Result<$ret, Error>> + Send;
            )*

            /// How many actions may run at once on `node` now ([`Client::parallel_limit`]);
            /// `None`: `max_parallel_per_node` as configured (a PVE that keeps no limit of
            /// its own, the in-memory fake).
            fn parallel_limit(&self, _node: &str) -> Option<u32> {
                None
            }
        }

        impl Pve for Client {
            $(
                fn $name(&self $(, $arg: $ty)*)
                    -> impl Future<Output = Result<$ret, Error>> + Send {
                    Client::$name(self $(, $arg)*)
                }
            )*

            fn parallel_limit(&self, node: &str) -> Option<u32> {
                Some(Client::parallel_limit(self, node))
            }
        }
    };
}

pve_calls! {
    /// `GET /version`.
    fn version(&self) -> Version;
    /// `GET /cluster/status`: quorum and nodes.
    fn cluster_health(&self) -> ClusterHealth;
    /// `GET /cluster/status`: the cluster and its nodes.
    fn cluster_status(&self) -> Vec<ClusterStatusEntry>;
    /// `GET /nodes/{node}/certificates/info`: the root CA's fingerprint.
    fn root_ca_fingerprint(&self, node: &str) -> String;
    /// `GET /cluster/resources?type=vm`.
    fn vm_resources(&self) -> Listing;
    /// `GET /cluster/resources?type=node`: the nodes' memory.
    fn node_resources(&self) -> NodeResources;
    /// `GET /pools?poolid=P`: the pool's VMIDs.
    fn pool_vmids(&self, poolid: &str) -> Vec<u32>;
    /// `PUT /pools`: moves a VM into a pool.
    fn move_to_pool(&self, poolid: &str, vmid: u32) -> ();
    /// `POST /pools`: a new, empty resource pool.
    fn create_pool(&self, poolid: &str, comment: &str) -> ();
    /// `GET /cluster/nextid`.
    fn next_id(&self) -> u32;
    /// `GET /cluster/nextid?vmid=N`.
    fn vmid_is_free(&self, vmid: u32) -> bool;
    /// `GET /cluster/options`: the datacenter's `next-id` range.
    fn cluster_options(&self) -> DatacenterOptions;
    /// `GET /nodes/{node}/storage`.
    fn node_storages(&self, node: &str, content: Option<&str>) -> Vec<NodeStorage>;
    /// `GET /nodes/{node}/storage/{storage}/content`.
    fn storage_content(
        &self,
        node: &str,
        storage: &str,
        content: Option<&str>,
    ) -> Vec<StorageVolume>;
    /// `POST /nodes/{node}/storage/{storage}/upload`: an `imgcopy` task.
    fn upload_iso(
        &self,
        node: &str,
        storage: &str,
        file_name: &str,
        bytes: &[u8],
        sha256: &str,
    ) -> Upid;
    /// `POST /nodes/{node}/storage/{storage}/download-url`: a `download` task.
    fn download_url(&self, node: &str, storage: &str, download: &Download) -> Upid;
    /// `POST /nodes/{node}/storage/{storage}/oci-registry-pull` (PVE 9.1): an `ociregistrypull`
    /// task.
    fn oci_registry_pull(&self, node: &str, storage: &str, reference: &str, filename: &str) -> Upid;
    /// `DELETE /nodes/{node}/storage/{storage}/content/{volume}`, with the gate's permit.
    fn delete_volume(
        &self,
        node: &str,
        storage: &str,
        volume: &str,
        permit: &Permit,
    ) -> Option<Upid>;
    /// `GET /nodes/{node}/network?type=any_bridge`.
    fn node_bridges(&self, node: &str) -> Vec<NetworkInterface>;
    /// `GET .../{qemu,lxc}/{vmid}/config`.
    fn vm_config(&self, node: &str, kind: GuestKind, vmid: u32) -> VmConfig;
    /// `GET .../{qemu,lxc}/{vmid}/pending`.
    fn vm_pending(&self, node: &str, kind: GuestKind, vmid: u32) -> Vec<PendingEntry>;
    /// `PUT .../{qemu,lxc}/{vmid}/config`: synchronous. A guarded edit needs its permit in
    /// `params`.
    fn set_config(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        params: &VmParams,
        digest: Option<&str>,
    ) -> ();
    /// `POST .../qemu/{vmid}/config`: a task when PVE needs one. A guarded edit needs its
    /// permit in `params`.
    fn set_config_async(
        &self,
        node: &str,
        vmid: u32,
        params: &VmParams,
        digest: Option<&str>,
    ) -> Option<Upid>;
    /// `POST /nodes/{node}/qemu`: a `qmcreate` task.
    fn create_vm(&self, node: &str, vmid: u32, params: &VmParams) -> Upid;
    /// `POST .../qemu/{template}/clone`: a `qmclone` task.
    fn clone_vm(&self, node: &str, template: u32, req: &CloneRequest) -> Upid;
    /// `POST .../qemu/{vmid}/template`: a `qmtemplate` task.
    fn template_vm(&self, node: &str, vmid: u32) -> Upid;
    /// `POST /nodes/{node}/lxc`: a `vzcreate` task.
    fn create_ct(&self, node: &str, vmid: u32, params: &VmParams) -> Upid;
    /// `POST .../lxc/{template}/clone`: a `vzclone` task.
    fn clone_ct(&self, node: &str, template: u32, req: &CloneRequest) -> Upid;
    /// `PUT .../{qemu,lxc}/{vmid}/resize`.
    fn resize_disk(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        disk: &str,
        size: &str,
        digest: Option<&str>,
    ) -> Option<Upid>;
    /// `GET .../status/current`: whether the guest runs.
    fn vm_running(&self, node: &str, kind: GuestKind, vmid: u32) -> bool;
    /// `POST .../status/start`.
    fn start_vm(&self, node: &str, kind: GuestKind, vmid: u32) -> Upid;
    /// `POST .../status/shutdown`.
    fn shutdown_vm(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        timeout_secs: u32,
        force_stop: bool,
    ) -> Upid;
    /// `POST .../status/stop`.
    fn stop_vm(&self, node: &str, kind: GuestKind, vmid: u32, overrule_shutdown: bool) -> Upid;
    /// `POST .../status/reboot`: a `qmreboot` or `vzreboot` task.
    fn reboot_vm(&self, node: &str, kind: GuestKind, vmid: u32, timeout_secs: u32) -> Upid;
    /// `DELETE /nodes/{node}/{qemu,lxc}/{vmid}`: a `qmdestroy` or `vzdestroy` task, with the
    /// gate's permit.
    fn delete_vm(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        purge: bool,
        destroy_unreferenced: bool,
        permit: &Permit,
    ) -> Upid;
    /// `GET /nodes/{node}/tasks?vmid=N&source=active`.
    fn active_vm_tasks(&self, node: &str, vmid: u32) -> Vec<TaskListEntry>;
    /// `GET /nodes/{node}/tasks?source=active`.
    fn active_tasks(&self, node: &str) -> Vec<TaskListEntry>;
    /// `GET .../{qemu,lxc}/{vmid}/snapshot`, without `current`.
    fn snapshots(&self, node: &str, kind: GuestKind, vmid: u32) -> Vec<Snapshot>;
    /// `GET .../snapshot/{name}/config`.
    fn snapshot_config(&self, node: &str, kind: GuestKind, vmid: u32, name: &str) -> VmConfig;
    /// `POST .../{qemu,lxc}/{vmid}/snapshot`: a `qmsnapshot`/`vzsnapshot` task (no RAM state).
    fn snapshot(&self, node: &str, kind: GuestKind, vmid: u32, name: &str, description: &str) -> Upid;
    /// `POST .../snapshot/{name}/rollback` with `start=1`, with the gate's permit: a
    /// `qmrollback`/`vzrollback` task.
    fn rollback(&self, node: &str, kind: GuestKind, vmid: u32, name: &str, permit: &Permit) -> Upid;
    /// `DELETE .../snapshot/{name}`, with the gate's permit: a `qmdelsnapshot`/`vzdelsnapshot`
    /// task.
    fn delete_snapshot(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        name: &str,
        permit: &Permit,
    ) -> Upid;
    /// `POST .../agent/ping`.
    fn agent_ping(&self, node: &str, vmid: u32) -> ();
    /// `GET .../agent/network-get-interfaces`.
    fn agent_interfaces(&self, node: &str, vmid: u32) -> Vec<AgentInterface>;
    /// A VM's agent interfaces, or `GET .../lxc/{vmid}/interfaces` for a container.
    fn guest_interfaces(&self, node: &str, kind: GuestKind, vmid: u32) -> Vec<AgentInterface>;
    /// `GET .../{qemu,lxc}/{vmid}/migrate?target=T`.
    fn migrate_precondition(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        target: &str,
    ) -> MigratePrecondition;
    /// `POST .../qemu/{vmid}/migrate`: a `qmigrate` (or `hamigrate`) task.
    fn migrate_vm(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        online: bool,
        with_local_disks: bool,
    ) -> Upid;
    /// `POST .../lxc/{vmid}/migrate`: a `vzmigrate` (or `hamigrate`) task; a running
    /// container only with `restart`.
    fn migrate_ct(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        restart: bool,
        timeout_secs: u32,
    ) -> Upid;
    /// `GET /cluster/ha/resources/{vm|ct}:N`.
    fn ha_resource(&self, kind: GuestKind, vmid: u32) -> Option<HaResource>;
    /// `POST /cluster/ha/resources`.
    fn add_ha_resource(&self, kind: GuestKind, vmid: u32, params: &HaParams) -> ();
    /// `PUT /cluster/ha/resources/{vm|ct}:N`.
    fn update_ha_resource(
        &self,
        kind: GuestKind,
        vmid: u32,
        params: &HaParams,
        digest: Option<&str>,
    ) -> ();
    /// `DELETE /cluster/ha/resources/{vm|ct}:N` (`purge=0` with `keep_rules`), with the gate's
    /// permit.
    fn remove_ha_resource(
        &self,
        kind: GuestKind,
        vmid: u32,
        keep_rules: bool,
        permit: &Permit,
    ) -> ();
    /// `GET /cluster/ha/groups/{id}` or `.../rules/{id}`.
    fn ha_affinity(&self, kind: AffinityKind, id: &str) -> Option<HaAffinity>;
    /// `POST /cluster/ha/groups` or `.../rules`.
    fn add_ha_affinity(&self, kind: AffinityKind, id: &str, params: &AffinityParams) -> ();
    /// `PUT /cluster/ha/groups/{id}` or `.../rules/{id}`.
    fn update_ha_affinity(
        &self,
        kind: AffinityKind,
        id: &str,
        params: &AffinityParams,
        digest: Option<&str>,
    ) -> ();
    /// `DELETE /cluster/ha/groups/{id}` or `.../rules/{id}`, with the gate's permit.
    fn remove_ha_affinity(&self, kind: AffinityKind, id: &str, permit: &Permit) -> ();
    /// Waits for a task until it stops or `timeout` passes: `StillRunning` when our wait runs
    /// out, `Error::TaskFailed` only for a task that stopped with another exit status than
    /// `OK` or `WARNINGS: n`.
    fn wait_task(&self, upid: &Upid, timeout: Duration) -> TaskOutcome;
}
