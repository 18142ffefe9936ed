//! An in-memory Proxmox VE behind [`Pve`], for fast unit tests of `execute` (no network, no
//! Python). Small on purpose: VMs (node, config, power), tasks that end at once, when the test
//! says, or fail, faults on the next call of a method, and a log of every call.
//!
//! Where proxsync depends on it, it behaves as PVE does:
//! - a create's config holds only `lock: create`, a clone's only `lock: clone` and the
//!   `# qmclone temporary file` comment, until the task ends; name, description and tags come
//!   with the task's end. A clone's task is `qmclone` naming the **template**, on the
//!   template's node, and a clone to another node stays on the template's node until its end;
//! - a failed create or clone task leaves no VM (qemu-server removes what it made);
//! - running tasks are listed with `RUNNING` and their start time (the UPID's, in whole seconds
//!   of the fake's clock, [`FakePve::set_clock`]); `?vmid=N` lists only tasks naming N (so not
//!   a clone's);
//! - PVE's words, each kind's own (`pve::texts` has them all): a VMID taken is `unable to
//!   create VM N - VM N already exists on node 'X'` (`CT` for containers), a missing guest
//!   `Configuration file 'nodes/X/qemu-server/N.conf' does not exist` (`lxc/N.conf`), a locked
//!   VM `VM is locked (L)` and a container `CT is locked (L)` (pve-guest-common check_lock and
//!   each kind's guest_type), a stale digest `checksum mismatch (file change by other user?)`
//!   for a VM (qemu-server update_vm_api) and `detected modified configuration - file changed
//!   by other user? Try again.` for a container (pve-common assert_if_modified);
//! - a clone refuses a locked source (clone_vm's check_lock, both kinds); a container's clone
//!   locks its source `disk` until its `vzclone` task ends (pve-container clone_vm's
//!   `set_lock($vmid, 'disk')`), so a second clone of one CT template meanwhile is refused
//!   `CT is locked (disk)`;
//! - a container's new volume (`STORAGE:GB` in a create or update) is allocated as pve-container
//!   does: `int($size_gb * 1024)` MiB written into its config, thin LVM's (`local-lvm`) volume
//!   in whole 4 MiB extents; a container's resize compares the volume's real size (`unable to
//!   shrink disk size`, `disk is already at specified size`);
//! - a snapshot, a rollback and a snapshot's delete are tasks (`qmsnapshot`/`vzsnapshot`,
//!   `qmrollback`/`vzrollback`, `qmdelsnapshot`/`vzdelsnapshot`) whose worker makes PVE's
//!   checks, so a locked guest, a name taken or missing and a storage that cannot snapshot
//!   ([`FakePve::storage_cannot_snapshot`]) fail the task, not the request (pve-guest-common
//!   `AbstractConfig.pm`); while one runs the guest holds `lock: snapshot`, `rollback` or
//!   `snapshot-delete`, so a write meanwhile meets `VM is locked (snapshot)` / `CT is locked
//!   (snapshot)`. A snapshot that ends well sets the config's `parent`; one that fails leaves
//!   nothing; a failed rollback or delete keeps its lock, as PVE's does;
//! - [`Fault::LoseAnswer`]: the call is carried out and the answer lost (pveproxy's 596, as
//!   when forwarding fails after the node received the request).
//!
//! A destructive or identity-changing call meets the client's own check of the gate's permit
//! (`gate::permit`): refused without one, logged as `refused <method> <args>`, nothing changed.
//!
//! Not modelled: pending values of a running VM (nothing is ever pending), hotplug, the guest
//! agent (always "not running"), permissions, storages beyond `local-lvm`, `local` and those
//! [`FakePve::add_shared_storage`] adds.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::ha::{AffinityKind, AffinityParams, HaAffinity, HaParams, HaResource};
use super::migrate::MigratePrecondition;
use super::task::classify_exit;
use super::types::{
    AgentInterface, ClusterHealth, ClusterStatusEntry, DatacenterOptions, GuestType, ListedStatus,
    Listing, NetworkInterface, NodeResource, NodeResources, NodeStorage, PendingEntry, Snapshot,
    StorageVolume, TaskListEntry, Version, VmConfig, VmResource, split_tags,
};
use super::{CloneRequest, Error, Pve, TaskOutcome, Upid, VmParams};
use crate::guest::GuestKind;
use crate::pve::permit::{
    Permit, check_delete_snapshot, check_delete_vm, check_delete_volume, check_remove_affinity,
    check_remove_ha_resource, check_rollback,
};
use crate::util::clock::Clock;

/// A VM as the fake holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeVm {
    /// The node the VM is on.
    pub node: String,
    /// A QEMU VM or an LXC container: a call on the other kind's path does not find it.
    pub kind: GuestKind,
    /// The config file's keys (no `digest`: the fake adds it when read).
    pub config: BTreeMap<String, String>,
    /// The VM is running.
    pub running: bool,
}

/// How the tasks started from now on end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEnd {
    /// Already stopped with `OK` when the call answers.
    AtOnce,
    /// Running until [`FakePve::end_task`].
    Held,
}

/// What the next call of a method meets.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Refused with this error; nothing is done.
    Refuse(Error),
    /// Carried out, then the answer is lost (596 `Connection timed out`): the outcome is
    /// unknown to the caller.
    LoseAnswer,
    /// Carried out as usual: lets a fault queued after it reach a later call.
    Pass,
    /// Carried out, then someone else sets `key` of VM `vmid` (`None`: removes it): a change
    /// between this answer and proxsync's next request.
    ThenSet {
        /// The VM changed.
        vmid: u32,
        /// The config key set.
        key: String,
        /// Its new value; `None` removes it.
        value: Option<String>,
    },
}

type Effect = Box<dyn FnOnce(&mut State) + Send>;

struct Task {
    upid: Upid,
    /// `None` while running, else the exit status.
    exit: Option<String>,
    on_ok: Option<Effect>,
    on_fail: Option<Effect>,
    /// When a task of a type with a duration ([`FakePve::set_task_duration`]) ends `OK`, in
    /// tokio's time.
    ends_at: Option<tokio::time::Instant>,
}

struct State {
    nodes: BTreeMap<String, bool>,
    vms: BTreeMap<u32, FakeVm>,
    /// Bumped on every config write: the `digest`.
    generation: HashMap<u32, u64>,
    tasks: Vec<Task>,
    task_end: TaskEnd,
    faults: HashMap<&'static str, Vec<Fault>>,
    calls: Vec<String>,
    volumes: BTreeMap<String, Vec<StorageVolume>>,
    pools: BTreeMap<String, Vec<u32>>,
    ha: BTreeMap<u32, HaParams>,
    /// HA groups and rules by kind and id.
    affinities: BTreeMap<(bool, String), AffinityParams>,
    pid: u32,
    /// The root CA's fingerprint `root_ca_fingerprint` answers.
    root_ca: String,
    /// Storages shared by every node (`images` content), beside `local-lvm` and `local`.
    shared_storages: Vec<String>,
    /// The nodes' clock: a task's start time.
    clock: Clock,
    /// (task type, exit status): the next task of that type ends at once with it.
    task_exits: Vec<(String, String)>,
    /// What `parallel_limit` answers for every node (`None`: as configured).
    parallel_limit: Option<u32>,
    /// The real size of each container volume the fake allocated (bytes), which its config's
    /// `size=` may no longer say (a person's edit, `pct rescan` not run).
    ct_volumes: BTreeMap<String, u64>,
    /// Each node's (`maxmem`, `mem`) as `/cluster/resources?type=node` lists them; a node not
    /// here is listed without them.
    node_memory: BTreeMap<String, (u64, u64)>,
    /// How long tasks of a type run before they end `OK` by themselves (tokio's time).
    task_durations: HashMap<String, Duration>,
    /// Each guest's snapshots, oldest first.
    snapshots: BTreeMap<u32, Vec<FakeSnapshot>>,
    /// Storages whose volumes cannot be snapshotted ([`FakePve::storage_cannot_snapshot`]).
    no_snapshot_storages: Vec<String>,
}

/// One snapshot of a guest, as the fake holds it.
struct FakeSnapshot {
    name: String,
    /// The guest's config when it was taken, but its lock, description and `unusedN`
    /// (pve-guest-common `__snapshot_copy_config`); a rollback keeps the guest's own
    /// description and unused volumes (`__snapshot_apply_config`).
    config: BTreeMap<String, String>,
    /// The description it was taken with.
    description: String,
    /// When it was taken (unix seconds of the fake's clock), set at once
    /// (`__snapshot_prepare`).
    snaptime: u64,
    /// `prepare` while its snapshot task runs, `delete` while a delete's does; `None` once
    /// whole. A rollback to one with a state is refused.
    snapstate: Option<&'static str>,
}

/// The fake cluster. Interior mutability: tests hold it inside a `SiteCtx` and still change
/// it between actions.
pub struct FakePve {
    state: Mutex<State>,
    /// Woken on every change, for [`Pve::wait_task`].
    changed: tokio::sync::Notify,
}

fn api(status: u16, message: impl Into<String>) -> Error {
    Error::Api {
        method: "FAKE".into(),
        path: String::new(),
        status,
        message: message.into(),
        errors: BTreeMap::new(),
    }
}

fn not_found(node: &str, kind: GuestKind, vmid: u32) -> Error {
    let dir = match kind {
        GuestKind::Qemu => "qemu-server",
        GuestKind::Lxc => "lxc",
    };
    api(
        500,
        format!("Configuration file 'nodes/{node}/{dir}/{vmid}.conf' does not exist"),
    )
}

/// A call's arguments in the log: `node vmid` for a VM, `node lxc/vmid` for a container.
fn at(node: &str, kind: GuestKind, vmid: u32) -> String {
    match kind {
        GuestKind::Qemu => format!("{node} {vmid}"),
        GuestKind::Lxc => format!("{node} lxc/{vmid}"),
    }
}

impl FakePve {
    /// A quorate cluster of online `nodes`, each with storages `local-lvm` (images) and
    /// `local` (iso, import) and bridge `vmbr0`; tasks end at once.
    pub fn new(nodes: &[&str]) -> FakePve {
        FakePve {
            state: Mutex::new(State {
                nodes: nodes.iter().map(|n| (n.to_string(), true)).collect(),
                vms: BTreeMap::new(),
                generation: HashMap::new(),
                tasks: Vec::new(),
                task_end: TaskEnd::AtOnce,
                faults: HashMap::new(),
                calls: Vec::new(),
                volumes: BTreeMap::new(),
                pools: BTreeMap::new(),
                ha: BTreeMap::new(),
                affinities: BTreeMap::new(),
                pid: 0x1000,
                root_ca: vec!["FA"; 32].join(":"),
                shared_storages: Vec::new(),
                clock: Clock::system(),
                task_exits: Vec::new(),
                parallel_limit: None,
                ct_volumes: BTreeMap::new(),
                node_memory: BTreeMap::new(),
                task_durations: HashMap::new(),
                snapshots: BTreeMap::new(),
                no_snapshot_storages: Vec::new(),
            }),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding it has failed already.
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.finish_due();
        s
    }

    /// The cluster's root CA is now `fingerprint` (as if the endpoint reached another cluster).
    pub fn set_root_ca(&self, fingerprint: &str) {
        self.lock().root_ca = fingerprint.to_string();
    }

    /// A node joins the cluster (online).
    pub fn add_node(&self, name: &str) {
        self.lock().nodes.insert(name.to_string(), true);
    }

    /// A stopped VM with `config` (`template=1` makes a template).
    pub fn add_vm(&self, vmid: u32, node: &str, config: &[(&str, &str)]) {
        self.add_guest(GuestKind::Qemu, vmid, node, config);
    }

    /// A stopped guest of `kind` with `config`.
    pub fn add_guest(&self, kind: GuestKind, vmid: u32, node: &str, config: &[(&str, &str)]) {
        let mut s = self.lock();
        s.vms.insert(
            vmid,
            FakeVm {
                node: node.into(),
                kind,
                config: config
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                running: false,
            },
        );
        *s.generation.entry(vmid).or_default() += 1;
    }

    /// VM `vmid` as the fake holds it now, if it exists.
    pub fn vm(&self, vmid: u32) -> Option<FakeVm> {
        self.lock().vms.get(&vmid).cloned()
    }

    /// Sets (or with `None` removes) a key of VM `vmid`'s config, as a person would.
    pub fn set_config_value(&self, vmid: u32, key: &str, value: Option<&str>) {
        self.lock().set_value(vmid, key, value);
    }

    /// Destroys VM `vmid` as a human would (`qm destroy`), outside proxsync.
    pub fn remove_vm(&self, vmid: u32) {
        let mut s = self.lock();
        s.vms.remove(&vmid);
        s.snapshots.remove(&vmid);
        drop(s);
        self.changed.notify_waiters();
    }

    /// Changes VM `vmid` as a human or another program would (a lock, a config key, its power).
    pub fn edit_vm(&self, vmid: u32, edit: impl FnOnce(&mut FakeVm)) {
        {
            let mut s = self.lock();
            let vm = s.vms.get_mut(&vmid).expect("edit_vm: no such VM");
            edit(vm);
            *s.generation.entry(vmid).or_default() += 1;
        }
        self.changed.notify_waiters();
    }

    /// A storage for disk images shared by every node (as Ceph RBD or NFS would be).
    pub fn add_shared_storage(&self, storage: &str) {
        self.lock().shared_storages.push(storage.to_string());
    }

    /// Volumes on `storage` cannot be snapshotted (a `dir` storage's raw images, thick LVM): a
    /// snapshot of a guest with any volume there (`scsiN`, `virtioN`, `sataN`, `ideN` but a
    /// CD-ROM, `efidisk0`, `tpmstate0`, `rootfs`, `mpN` whose value starts `storage:`) fails
    /// its task `snapshot feature is not available` (pve-guest-common `__snapshot_prepare`'s
    /// `has_feature('snapshot', ...)`), taking nothing and leaving no lock.
    pub fn storage_cannot_snapshot(&self, storage: &str) {
        self.lock().no_snapshot_storages.push(storage.to_string());
    }

    /// A volume on `storage` (`content`: `iso`, `import`, `images`), as an upload leaves it.
    pub fn add_volume(&self, storage: &str, volid: &str, content: &str) {
        self.lock()
            .volumes
            .entry(storage.to_string())
            .or_default()
            .push(StorageVolume {
                volid: volid.to_string(),
                content: Some(content.to_string()),
                format: volid.rsplit_once('.').map(|(_, ext)| ext.to_string()),
                size: Some(1 << 30),
                vmid: None,
                ctime: None,
            });
    }

    /// The clock the nodes stamp their tasks with (the system's by default); tests with paused
    /// time pass the one their actions read.
    pub fn set_clock(&self, clock: Clock) {
        self.lock().clock = clock;
    }

    /// Starts a task of someone else's (`vzdump` of a backup job, a `qmclone` of a template
    /// to another VMID), running until [`FakePve::end_task`] and changing nothing. Its UPID.
    pub fn start_task(&self, node: &str, kind: &str, id: &str) -> String {
        let upid = {
            let mut s = self.lock();
            let end = std::mem::replace(&mut s.task_end, TaskEnd::Held);
            let upid = s.task(node, kind, id, None, None);
            s.task_end = end;
            upid
        };
        self.changed.notify_waiters();
        upid.to_string()
    }

    /// How tasks started from now on end ([`TaskEnd::AtOnce`] until set).
    pub fn set_task_end(&self, end: TaskEnd) {
        self.lock().task_end = end;
    }

    /// Tasks of type `kind` (`qmclone`, `vzclone`, ...) started from now on run for `took` of
    /// tokio's time, then end `OK` by themselves (a clone copying its disks: the window in
    /// which its locks hold), however tasks end otherwise.
    pub fn set_task_duration(&self, kind: &str, took: Duration) {
        self.lock().task_durations.insert(kind.to_string(), took);
    }

    /// A resource pool (`POST /pools`), empty.
    pub fn add_pool(&self, poolid: &str) {
        self.lock().pools.entry(poolid.to_string()).or_default();
    }

    /// The members of pool `poolid`, if it exists.
    pub fn pool(&self, poolid: &str) -> Option<Vec<u32>> {
        self.lock().pools.get(poolid).cloned()
    }

    /// The next task of type `kind` (`qmclone`, ...) ends at once with `exit`, however tasks
    /// end otherwise (a failed clone leaves no VM).
    pub fn next_task_ends(&self, kind: &str, exit: &str) {
        self.lock()
            .task_exits
            .push((kind.to_string(), exit.to_string()));
    }

    /// What [`Pve::parallel_limit`] answers for every node (`None`: the configured limit).
    pub fn set_parallel_limit(&self, limit: Option<u32>) {
        self.lock().parallel_limit = limit;
    }

    /// The next call of `method` (a [`Pve`] method's name) meets `fault`.
    pub fn fault(&self, method: &'static str, fault: Fault) {
        self.lock().faults.entry(method).or_default().push(fault);
    }

    /// Ends a running task with `exit` (`OK`, `WARNINGS: 1`, or an error text).
    pub fn end_task(&self, upid: &str, exit: &str) {
        {
            let mut s = self.lock();
            let Some(i) = s
                .tasks
                .iter()
                .position(|t| t.upid.as_str() == upid && t.exit.is_none())
            else {
                panic!("no running task {upid}");
            };
            finish(&mut s, i, exit);
        }
        self.changed.notify_waiters();
    }

    /// The UPIDs of the running tasks.
    pub fn running_tasks(&self) -> Vec<String> {
        self.lock()
            .tasks
            .iter()
            .filter(|t| t.exit.is_none())
            .map(|t| t.upid.to_string())
            .collect()
    }

    /// Every call so far, oldest first: the method's name and its main arguments.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// How many calls of `method` were made.
    pub fn count(&self, method: &str) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.split(' ').next() == Some(method))
            .count()
    }

    /// Forgets the calls so far.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// The gate's check of a destructive or identity-changing call (the client's own, shared):
    /// a refused call is logged as `refused <method> <args>` and reaches nothing, as the client
    /// sends nothing.
    fn permitted(
        &self,
        method: &'static str,
        args: &str,
        check: Result<(), Error>,
    ) -> Result<(), Error> {
        if check.is_err() {
            self.lock().calls.push(format!("refused {method} {args}"));
        }
        check
    }

    /// Logs a call, applies its fault if any, and runs it.
    fn call<T>(
        &self,
        method: &'static str,
        args: String,
        run: impl FnOnce(&mut State) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let result = {
            let mut s = self.lock();
            s.calls
                .push(format!("{method} {args}").trim_end().to_string());
            let fault = s.faults.get_mut(method).and_then(|f| {
                if f.is_empty() {
                    None
                } else {
                    Some(f.remove(0))
                }
            });
            match fault {
                Some(Fault::Refuse(e)) => Err(e),
                Some(Fault::LoseAnswer) => {
                    let _ = run(&mut s);
                    Err(api(596, "Connection timed out"))
                }
                Some(Fault::ThenSet { vmid, key, value }) => {
                    let result = run(&mut s);
                    s.set_value(vmid, &key, value.as_deref());
                    result
                }
                Some(Fault::Pass) | None => run(&mut s),
            }
        };
        self.changed.notify_waiters();
        result
    }
}

impl State {
    fn vm(&self, node: &str, kind: GuestKind, vmid: u32) -> Result<&FakeVm, Error> {
        self.vms
            .get(&vmid)
            .filter(|vm| vm.node == node && vm.kind == kind)
            .ok_or_else(|| not_found(node, kind, vmid))
    }

    /// pve-guest-common `AbstractConfig::check_lock`: `die $class->guest_type() . " is locked
    /// ($conf->{lock})\n"`, the guest type `VM` (qemu-server) or `CT` (pve-container).
    fn unlocked(&self, node: &str, kind: GuestKind, vmid: u32) -> Result<(), Error> {
        match self.vm(node, kind, vmid)?.config.get("lock") {
            Some(lock) => Err(api(500, format!("{} is locked ({lock})", guest_type(kind)))),
            None => Ok(()),
        }
    }

    /// Someone's write of one config key (a new digest).
    fn set_value(&mut self, vmid: u32, key: &str, value: Option<&str>) {
        if let Some(vm) = self.vms.get_mut(&vmid) {
            match value {
                Some(v) => vm.config.insert(key.to_string(), v.to_string()),
                None => vm.config.remove(key),
            };
        }
        *self.generation.entry(vmid).or_default() += 1;
    }

    fn digest(&self, vmid: u32) -> String {
        format!("{:040x}", self.generation.get(&vmid).copied().unwrap_or(0))
    }

    fn write_config(&mut self, vmid: u32, params: &VmParams) {
        let is_ct = self
            .vms
            .get(&vmid)
            .is_some_and(|vm| vm.kind == GuestKind::Lxc);
        let mut form = params.form();
        if is_ct {
            for (key, value) in form.iter_mut() {
                *value = self.allocate_ct_volume(vmid, key, value);
            }
        }
        let Some(vm) = self.vms.get_mut(&vmid) else {
            return;
        };
        for (key, value) in form {
            if key == "delete" {
                for k in value.split(',') {
                    vm.config.remove(k.trim());
                }
            } else if key == "force" {
                // A parameter of the update (deallocate deleted disks), not a config key.
            } else {
                vm.config.insert(key.to_string(), value);
            }
        }
        *self.generation.entry(vmid).or_default() += 1;
    }

    /// A container's mount point (`rootfs`, `mpN`) written as a new volume, `STORAGE:GB`,
    /// allocated as pve-container does (`src/PVE/LXC.pm` `create_disks`: `$size_kb =
    /// int(${size_gb} * 1024) * 1024`, whole MiB, and that size written into the config). On
    /// `local-lvm` (thin LVM) the volume itself is made in whole extents, 4 MiB by default
    /// (pve-storage `LvmThinPlugin.pm` `alloc_image`: `lvcreate -V ${size}k`, which LVM rounds
    /// up), so its real size may be above the config's. Any other value is returned as it is.
    fn allocate_ct_volume(&mut self, vmid: u32, key: &str, value: &str) -> String {
        let mount_point = key == "rootfs"
            || key
                .strip_prefix("mp")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        let (volume, rest) = value.split_once(',').unwrap_or((value, ""));
        let new_disk = volume.split_once(':').and_then(|(storage, gb)| {
            let digits = gb.replace('.', "");
            (!digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && gb.matches('.').count() <= 1)
                .then(|| (storage, gb.parse::<f64>().ok()))
        });
        let (true, Some((storage, Some(gb)))) = (mount_point, new_disk) else {
            return value.to_string();
        };
        let bytes = (gb * 1024.0).floor() as u64 * 1024 * 1024;
        let n = (0..)
            .find(|n| {
                !self
                    .ct_volumes
                    .contains_key(&format!("{storage}:vm-{vmid}-disk-{n}"))
            })
            .unwrap_or(0);
        let volid = format!("{storage}:vm-{vmid}-disk-{n}");
        let extent = 4 << 20;
        let real = if storage == "local-lvm" {
            bytes.div_ceil(extent) * extent
        } else {
            bytes
        };
        self.ct_volumes.insert(volid.clone(), real);
        let mut parts = vec![volid];
        parts.extend(
            rest.split(',')
                .filter(|p| !p.is_empty() && !p.starts_with("size="))
                .map(str::to_string),
        );
        parts.push(format!("size={}", super::values::pve_size(bytes)));
        parts.join(",")
    }

    /// The real size of guest `vmid`'s volume in `disk` (`volume_size_info`, not the config's
    /// `size=`, for a container volume the fake allocated); any other volume is at its
    /// config's size.
    fn volume_size(&self, vmid: u32, disk: &str) -> Option<u64> {
        let value = self.vms.get(&vmid).and_then(|vm| vm.config.get(disk))?;
        let volume = value.split(',').next().unwrap_or_default();
        self.ct_volumes.get(volume).copied().or_else(|| {
            value
                .split(',')
                .find_map(|p| p.strip_prefix("size="))
                .and_then(crate::pve::values::parse_pve_size)
        })
    }

    /// pve-container `LXC/Config.pm` update_pct_config (a create's and an update's): a NIC's
    /// `mtu` above its bridge's is refused, `netN: MTU size 'X' is bigger than bridge MTU 'Y'`
    /// (the fake's bridges have the default MTU, 1500).
    fn check_ct_mtus<'a>(
        &self,
        values: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(), Error> {
        for (key, value) in values {
            if key
                .strip_prefix("net")
                .is_none_or(|n| n.parse::<u8>().is_err())
            {
                continue;
            }
            let mtu = value
                .split(',')
                .find_map(|p| p.strip_prefix("mtu="))
                .and_then(|m| m.parse::<u32>().ok());
            if let Some(mtu) = mtu.filter(|m| *m > 1500) {
                return Err(api(
                    500,
                    format!("{key}: MTU size '{mtu}' is bigger than bridge MTU '1500'"),
                ));
            }
        }
        Ok(())
    }

    /// A stale digest: qemu-server's `update_vm_api` dies `checksum mismatch (file change by
    /// other user?)`; pve-container's `update_vm` calls pve-common `assert_if_modified`.
    fn check_digest(&self, kind: GuestKind, vmid: u32, digest: Option<&str>) -> Result<(), Error> {
        match digest {
            Some(d) if d != self.digest(vmid) => Err(api(
                500,
                match kind {
                    GuestKind::Qemu => "checksum mismatch (file change by other user?)",
                    GuestKind::Lxc => {
                        "detected modified configuration - file changed by other user? Try again."
                    }
                },
            )),
            _ => Ok(()),
        }
    }

    /// A new guest of `kind` at `vmid`: pve-cluster `check_vmid_unused` names the guest there
    /// (`VM` or `CT`), after the create's `unable to create VM|CT N - `.
    fn taken(&self, kind: GuestKind, vmid: u32) -> Result<(), Error> {
        match self.vms.get(&vmid) {
            Some(vm) => Err(api(
                500,
                format!(
                    "unable to create {} {vmid} - {} {vmid} already exists on node '{}'",
                    guest_type(kind),
                    guest_type(vm.kind),
                    vm.node
                ),
            )),
            None => Ok(()),
        }
    }

    /// Starts a task; with [`TaskEnd::AtOnce`] it has ended (`OK`) before the answer.
    fn task(
        &mut self,
        node: &str,
        kind: &str,
        id: &str,
        on_ok: Option<Effect>,
        on_fail: Option<Effect>,
    ) -> Upid {
        self.pid += 1;
        let starttime = self.clock.now_ms() / 1000;
        let upid: Upid = format!(
            "UPID:{node}:{:08X}:00000001:{starttime:08X}:{kind}:{id}:fake@pve:",
            self.pid
        )
        .parse()
        .expect("the fake writes valid UPIDs");
        let ends_at = self
            .task_durations
            .get(kind)
            .map(|took| tokio::time::Instant::now() + *took);
        self.tasks.push(Task {
            upid: upid.clone(),
            exit: None,
            on_ok,
            on_fail,
            ends_at,
        });
        let i = self.tasks.len() - 1;
        if let Some(at) = self.task_exits.iter().position(|(k, _)| k == kind) {
            let (_, exit) = self.task_exits.remove(at);
            finish(self, i, &exit);
        } else if self.task_end == TaskEnd::AtOnce && ends_at.is_none() {
            finish(self, i, "OK");
        }
        upid
    }

    /// Ends `OK` every running task whose duration has passed.
    fn finish_due(&mut self) {
        let now = tokio::time::Instant::now();
        while let Some(i) = self
            .tasks
            .iter()
            .position(|t| t.exit.is_none() && t.ends_at.is_some_and(|at| at <= now))
        {
            finish(self, i, "OK");
        }
    }

    /// A create or clone: the VM exists at once holding only the lock (and, for a clone, the
    /// temporary file's comment); `config` is written when the task ends, and the VM goes if
    /// it fails. `locked_source`: the guest a container's clone locked `disk`, unlocked when
    /// the task ends either way. `pool`: joined when the task ends well (qemu-server's and
    /// pve-container's create and clone call `add_vm_to_pool` last in their workers).
    #[allow(clippy::too_many_arguments)]
    fn make_vm(
        &mut self,
        task_node: &str,
        kind: &str,
        id: &str,
        vmid: u32,
        config: BTreeMap<String, String>,
        final_node: String,
        locked_source: Option<u32>,
        pool: Option<String>,
    ) -> Upid {
        // pve-container's tasks (`vz*`) make containers.
        let guest = if kind.starts_with("vz") {
            GuestKind::Lxc
        } else {
            GuestKind::Qemu
        };
        // qemu-server locks a clone `clone` (with a temporary description); pve-container
        // locks a new container `create`, a clone's too.
        let early = if kind == "qmclone" {
            [
                ("description", " qmclone temporary file"),
                ("lock", "clone"),
            ]
            .as_slice()
        } else {
            [("lock", "create")].as_slice()
        };
        self.vms.insert(
            vmid,
            FakeVm {
                node: task_node.to_string(),
                kind: guest,
                config: early
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                running: false,
            },
        );
        *self.generation.entry(vmid).or_default() += 1;
        self.snapshots.remove(&vmid);
        let on_ok: Effect = Box::new(move |s: &mut State| {
            if let Some(vm) = s.vms.get_mut(&vmid) {
                vm.config = config;
                vm.node = final_node;
            }
            *s.generation.entry(vmid).or_default() += 1;
            s.unlock_source(locked_source);
            if let Some(pool) = pool {
                s.join_pool(&pool, vmid);
            }
        });
        let on_fail: Effect = Box::new(move |s: &mut State| {
            s.vms.remove(&vmid);
            s.unlock_source(locked_source);
        });
        self.task(task_node, kind, id, Some(on_ok), Some(on_fail))
    }

    /// Guest `vmid` into pool `pool`, out of any other (a guest is in one pool at most).
    fn join_pool(&mut self, pool: &str, vmid: u32) {
        self.leave_pools(vmid);
        self.pools.entry(pool.to_string()).or_default().push(vmid);
    }

    /// Guest `vmid` out of every pool (its destroy: `PVE::AccessControl::remove_vm_access`,
    /// qemu-server's and pve-container's `destroy_vm`, purge or not).
    fn leave_pools(&mut self, vmid: u32) {
        for members in self.pools.values_mut() {
            members.retain(|v| *v != vmid);
        }
    }

    /// The pool guest `vmid` is in, as `/cluster/resources` lists it.
    fn pool_of(&self, vmid: u32) -> Option<String> {
        self.pools
            .iter()
            .find(|(_, members)| members.contains(&vmid))
            .map(|(pool, _)| pool.clone())
    }

    /// pve-container clone_vm's end, well or not: `remove_lock($vmid, 'disk')` on the source.
    fn unlock_source(&mut self, source: Option<u32>) {
        let Some(vmid) = source else {
            return;
        };
        if self
            .vms
            .get(&vmid)
            .is_some_and(|vm| vm.config.get("lock").is_some_and(|l| l == "disk"))
        {
            self.set_value(vmid, "lock", None);
        }
    }

    /// Removes guest `vmid`'s lock if it is `lock` (pve-guest-common's `delete $conf->{lock}`
    /// at a snapshot task's end).
    fn release(&mut self, vmid: u32, lock: &str) {
        if self
            .vms
            .get(&vmid)
            .is_some_and(|vm| vm.config.get("lock").is_some_and(|l| l == lock))
        {
            self.set_value(vmid, "lock", None);
        }
    }

    /// A power task: `qm<action>` for a VM, `vz<action>` for a container.
    fn power(
        &mut self,
        node: &str,
        guest: GuestKind,
        vmid: u32,
        action: &str,
        running: bool,
    ) -> Result<Upid, Error> {
        self.unlocked(node, guest, vmid)?;
        let now = self.vm(node, guest, vmid)?.running;
        // The API handlers' checks, before any task: pve-container `API2/LXC/Status.pm`
        // vm_start (`CT N already running`), vm_stop and vm_shutdown (`CT N not running`),
        // vm_reboot (`VM N not running`, a VM's words); qemu-server `API2/Qemu.pm` vm_reboot
        // (`VM N not running`).
        let refused = match (guest, action, now) {
            (GuestKind::Lxc, "start", true) => Some(format!("CT {vmid} already running")),
            (GuestKind::Lxc, "stop" | "shutdown", false) => Some(format!("CT {vmid} not running")),
            (_, "reboot", false) => Some(format!("VM {vmid} not running")),
            _ => None,
        };
        if let Some(text) = refused {
            return Err(api(500, text));
        }
        let kind = match guest {
            GuestKind::Qemu => format!("qm{action}"),
            GuestKind::Lxc => format!("vz{action}"),
        };
        let kind = kind.as_str();
        // qemu-server `QemuServer.pm` vm_start dies in its `qmstart` task.
        if (guest, action, now) == (GuestKind::Qemu, "start", true) {
            let exit = format!("VM {vmid} already running");
            return Ok(self.failed_task(node, kind, &vmid.to_string(), &exit));
        }
        let on_ok: Effect = Box::new(move |s: &mut State| {
            if let Some(vm) = s.vms.get_mut(&vmid) {
                vm.running = running;
            }
        });
        Ok(self.task(node, kind, &vmid.to_string(), Some(on_ok), None))
    }

    /// Guest `vmid`'s snapshot `name`, if it has one.
    fn snapshot_of(&self, vmid: u32, name: &str) -> Option<&FakeSnapshot> {
        self.snapshots.get(&vmid)?.iter().find(|n| n.name == name)
    }

    /// What a snapshot task's worker dies of before it changes anything, in PVE's order
    /// (pve-guest-common `AbstractConfig.pm`): a snapshot (`__snapshot_prepare`) checks the
    /// lock, then the name, then the storages; a rollback (`snapshot_rollback`) the name, the
    /// snapshot's state, then the lock; a delete (`snapshot_delete`) the name, then the lock
    /// (its `set_lock`'s `check_lock`). Each kind in its words (`VM`/`CT is locked`).
    fn snapshot_refusal(&self, kind: GuestKind, vmid: u32, name: &str, op: &str) -> Option<String> {
        let vm = self.vms.get(&vmid)?;
        let locked = vm
            .config
            .get("lock")
            .map(|lock| format!("{} is locked ({lock})", guest_type(kind)));
        let snap = self.snapshot_of(vmid, name);
        let missing = || format!("snapshot '{name}' does not exist");
        match op {
            "snapshot" => locked
                .or_else(|| snap.map(|_| format!("snapshot name '{name}' already used")))
                .or_else(|| {
                    self.cannot_snapshot(vmid)
                        .then(|| "snapshot feature is not available".to_string())
                }),
            "rollback" => match snap {
                None => Some(missing()),
                Some(FakeSnapshot {
                    snapstate: Some(state),
                    ..
                }) => Some(format!(
                    "unable to rollback to incomplete snapshot (snapstate = {state})"
                )),
                Some(_) => locked,
            },
            _ => match snap {
                None => Some(missing()),
                Some(_) => locked,
            },
        }
    }

    /// Guest `vmid` has a volume on a storage that cannot snapshot (qemu-server's and
    /// pve-container's `has_feature`: every volume but a CD-ROM must).
    fn cannot_snapshot(&self, vmid: u32) -> bool {
        let Some(vm) = self.vms.get(&vmid) else {
            return false;
        };
        vm.config.iter().any(|(key, value)| {
            is_volume_key(key)
                && !value.split(',').any(|p| p == "media=cdrom")
                && self.no_snapshot_storages.iter().any(|st| {
                    value
                        .strip_prefix(st.as_str())
                        .is_some_and(|r| r.starts_with(':'))
                })
        })
    }

    /// A task that fails at once with `exit`, changing nothing (a check in PVE's worker).
    fn failed_task(&mut self, node: &str, kind: &str, id: &str, exit: &str) -> Upid {
        let end = std::mem::replace(&mut self.task_end, TaskEnd::Held);
        let upid = self.task(node, kind, id, None, None);
        self.task_end = end;
        let i = self.tasks.len() - 1;
        self.tasks[i].ends_at = None;
        finish(self, i, exit);
        upid
    }

    fn active(&self, node: &str, vmid: Option<u32>) -> Vec<TaskListEntry> {
        self.tasks
            .iter()
            .filter(|t| t.exit.is_none() && t.upid.node == node)
            .filter(|t| vmid.is_none_or(|v| t.upid.id == v.to_string()))
            .map(|t| TaskListEntry {
                upid: t.upid.to_string(),
                kind: Some(t.upid.kind.clone()),
                id: Some(t.upid.id.clone()),
                user: Some(t.upid.user.clone()),
                tokenid: None,
                status: Some("RUNNING".into()),
                // pve-manager `PVE/API2/Tasks.pm` `node_tasks`: each entry is the decoded UPID
                // (`PVE::Tools::upid_decode`), its `starttime` the UPID's.
                starttime: Some(t.upid.starttime),
                endtime: None,
            })
            .collect()
    }
}

/// A VM's new disk (`scsi0=STORAGE:N[,options]`, N GiB) as qemu-server's create_disks
/// allocates it: `STORAGE:vm-VMID-disk-K,options,size=NG` (every storage named as thin LVM
/// names its volumes); any other value is returned as it is.
fn allocate_vm_volume(
    vmid: u32,
    key: &str,
    value: &str,
    config: &BTreeMap<String, String>,
) -> String {
    let (volume, rest) = value.split_once(',').unwrap_or((value, ""));
    let new = volume
        .split_once(':')
        .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && *n != "0");
    let Some((storage, gib)) = new.filter(|_| super::values::is_drive_key(key)) else {
        return value.to_string();
    };
    let n = (0..)
        .find(|n| {
            let name = format!("{storage}:vm-{vmid}-disk-{n}");
            !config.values().any(|v| v.split(',').next() == Some(&name))
        })
        .unwrap_or(0);
    let mut parts = vec![format!("{storage}:vm-{vmid}-disk-{n}")];
    parts.extend(
        rest.split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_string),
    );
    parts.push(format!("size={gib}G"));
    parts.join(",")
}

/// A VM's disk `key` (`value`: `STORAGE:VOLNAME[,options]`) as template_create turns it into
/// a base volume (pve-storage `vdisk_create_base`: `vm-VMID-disk-N` becomes
/// `base-VMID-disk-N`, a file's directory kept): `(old, new)` volume ids, `None` for a CD-ROM,
/// a key that is no disk, or a volume already a base or not the VM's own.
fn base_volume(vmid: u32, key: &str, value: &str) -> Option<(String, String)> {
    let disk = super::values::is_drive_key(key) || key == "efidisk0" || key == "tpmstate0";
    if !disk || value.split(',').any(|p| p == "media=cdrom") {
        return None;
    }
    let volume = value.split(',').next()?;
    let (storage, volname) = volume.split_once(':')?;
    let (dir, name) = volname.rsplit_once('/').unwrap_or(("", volname));
    let rest = name.strip_prefix(&format!("vm-{vmid}-"))?;
    let dir = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    Some((
        volume.to_string(),
        format!("{storage}:{dir}base-{vmid}-{rest}"),
    ))
}

/// pve-storage `Plugin.pm` parse_volname of a `vztmpl` archive (`$VZTMPL_EXT_RE_1` of
/// `Storage.pm`, pve-storage 9.1: `.tar`, `.tar.gz`, `.tar.xz`, `.tar.zst`, `.tar.bz2`, any
/// case), from pve-container create_vm's check_volume_access, before anything is made.
/// A clone's own identity, as PVE gives it: a new smbios1 uuid (kept options), a new MAC for
/// each NIC, made of the clone's VMID.
fn new_identity(config: &mut BTreeMap<String, String>, newid: u32) {
    for (key, value) in config.iter_mut() {
        let parts: Vec<String> = value
            .split(',')
            .enumerate()
            .map(|(i, part)| match part.split_once('=') {
                Some(("uuid", _)) if key == "smbios1" => {
                    format!("uuid=00000000-0000-4000-8000-{newid:012x}")
                }
                Some(("hwaddr", _)) if key.starts_with("net") => {
                    format!(
                        "hwaddr=BC:24:11:{:02X}:{:02X}:{i:02X}",
                        newid >> 8 & 0xff,
                        newid & 0xff
                    )
                }
                _ => part.to_string(),
            })
            .collect();
        *value = parts.join(",");
    }
}

fn check_vztmpl_name(archive: &str) -> Result<(), Error> {
    let volname = archive.split_once(':').map_or(archive, |(_, v)| v);
    let Some(name) = volname.strip_prefix("vztmpl/") else {
        return Ok(());
    };
    let lower = name.to_ascii_lowercase();
    let ok = !name.contains('/')
        && [".tar", ".tar.gz", ".tar.xz", ".tar.zst", ".tar.bz2"]
            .iter()
            .any(|ext| lower.len() > ext.len() && lower.ends_with(ext));
    if ok {
        return Ok(());
    }
    Err(api(
        500,
        format!("unable to parse directory volume name '{volname}'"),
    ))
}

/// The size a resize asks for, in bytes: `+N` added to the volume's size `now` (both kinds'
/// `resize_vm`: `$newsize += $size if $ext`), else `N` itself.
fn requested_size(now: Option<u64>, size: &str) -> Option<u64> {
    match size.strip_prefix('+') {
        Some(more) => now?.checked_add(crate::pve::values::parse_pve_size(more)?),
        None => crate::pve::values::parse_pve_size(size),
    }
}

/// pve-container `resize_vm`'s checks before its task: the volume's real size against the
/// request, `unable to shrink disk size` and `disk is already at specified size`.
fn ct_resize_checks(now: Option<u64>, want: Option<u64>) -> Result<(), Error> {
    let (Some(now), Some(want)) = (now, want) else {
        return Ok(());
    };
    if want < now {
        return Err(api(500, "unable to shrink disk size"));
    }
    if want == now {
        return Err(api(500, "disk is already at specified size"));
    }
    Ok(())
}

/// PVE's word for a guest of `kind` in its messages (`guest_type` of qemu-server's
/// `QemuConfig` and pve-container's `LXC::Config`).
fn guest_type(kind: GuestKind) -> &'static str {
    match kind {
        GuestKind::Qemu => "VM",
        GuestKind::Lxc => "CT",
    }
}

/// A snapshot task's type: `qm` + `op` for a VM, `vz` + `op` for a container.
fn snapshot_task(kind: GuestKind, op: &str) -> &'static str {
    match (kind, op) {
        (GuestKind::Qemu, "snapshot") => "qmsnapshot",
        (GuestKind::Qemu, "rollback") => "qmrollback",
        (GuestKind::Qemu, _) => "qmdelsnapshot",
        (GuestKind::Lxc, "snapshot") => "vzsnapshot",
        (GuestKind::Lxc, "rollback") => "vzrollback",
        (GuestKind::Lxc, _) => "vzdelsnapshot",
    }
}

/// A config key that names a volume of the guest: a VM's disk (`scsiN`, `virtioN`, `sataN`,
/// `ideN`, `efidisk0`, `tpmstate0`) or a container's (`rootfs`, `mpN`).
fn is_volume_key(key: &str) -> bool {
    if matches!(key, "efidisk0" | "tpmstate0" | "rootfs") {
        return true;
    }
    ["scsi", "virtio", "sata", "ide", "mp"]
        .iter()
        .any(|prefix| {
            key.strip_prefix(prefix)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// pve-guest-common snapshot_delete's `$unlink_parent`: a config whose `parent` is the deleted
/// snapshot takes that snapshot's parent, or none.
fn relink(config: &mut BTreeMap<String, String>, deleted: &str, parent: Option<&str>) {
    if config.get("parent").is_some_and(|p| p == deleted) {
        match parent {
            Some(p) => config.insert("parent".into(), p.to_string()),
            None => config.remove("parent"),
        };
    }
}

fn finish(s: &mut State, i: usize, exit: &str) {
    let ok = classify_exit(exit).is_ok();
    let task = &mut s.tasks[i];
    task.exit = Some(exit.to_string());
    let effect = if ok {
        task.on_ok.take()
    } else {
        task.on_fail.take()
    };
    if let Some(effect) = effect {
        effect(s);
    }
}

fn storages(shared: &[String]) -> Vec<NodeStorage> {
    let storage = |name: &str, kind: &str, content: &str, shared: bool| NodeStorage {
        storage: name.into(),
        kind: Some(kind.into()),
        content: Some(content.into()),
        active: Some(true),
        enabled: Some(true),
        shared: Some(shared),
        avail: Some(1 << 40),
        total: Some(1 << 41),
    };
    let mut all = vec![
        storage("local-lvm", "lvmthin", "images,rootdir", false),
        storage("local", "dir", "iso,import,vztmpl,backup", false),
    ];
    all.extend(
        shared
            .iter()
            .map(|name| storage(name, "rbd", "images,rootdir", true)),
    );
    all
}

impl Pve for FakePve {
    async fn version(&self) -> Result<Version, Error> {
        self.call("version", String::new(), |_| {
            Ok(Version {
                version: "9.1.2".into(),
                release: Some("9.1".into()),
                repoid: None,
            })
        })
    }

    async fn cluster_health(&self) -> Result<ClusterHealth, Error> {
        self.call("cluster_health", String::new(), |s| {
            Ok(ClusterHealth {
                quorate: true,
                nodes: s.nodes.clone(),
            })
        })
    }

    async fn cluster_status(&self) -> Result<Vec<ClusterStatusEntry>, Error> {
        self.call("cluster_status", String::new(), |s| {
            let cluster = ClusterStatusEntry {
                kind: "cluster".into(),
                name: Some("fake".into()),
                quorate: Some(true),
                online: None,
                nodes: Some(s.nodes.len() as u64),
                nodeid: None,
                ip: None,
                local: None,
            };
            let nodes = s.nodes.iter().enumerate().map(|(i, (name, online))| {
                let id = i as u64 + 1;
                ClusterStatusEntry {
                    kind: "node".into(),
                    name: Some(name.clone()),
                    quorate: None,
                    online: Some(*online),
                    nodes: None,
                    nodeid: Some(id),
                    ip: Some(format!("192.0.2.{id}")),
                    local: Some(i == 0),
                }
            });
            Ok(std::iter::once(cluster).chain(nodes).collect())
        })
    }

    async fn root_ca_fingerprint(&self, node: &str) -> Result<String, Error> {
        self.call("root_ca_fingerprint", node.to_string(), |s| {
            Ok(s.root_ca.clone())
        })
    }

    async fn vm_resources(&self) -> Result<Listing, Error> {
        self.call("vm_resources", String::new(), |s| {
            let guests = s
                .vms
                .iter()
                .map(|(vmid, vm)| VmResource {
                    qemu_id: vm.kind == GuestKind::Qemu,
                    kind: Some(match vm.kind {
                        GuestKind::Qemu => GuestType::Qemu,
                        GuestKind::Lxc => GuestType::Lxc,
                    }),
                    vmid: *vmid,
                    node: vm.node.clone().into(),
                    // A VM in its create window has no name yet; a container's is its hostname.
                    name: vm
                        .config
                        .get(match vm.kind {
                            GuestKind::Qemu => "name",
                            GuestKind::Lxc => "hostname",
                        })
                        .map(|n| n.as_str().into()),
                    status: Some(if vm.running {
                        ListedStatus::Running
                    } else {
                        ListedStatus::Stopped
                    }),
                    tags: split_tags(vm.config.get("tags").map_or("", String::as_str)),
                    template: Some(vm.config.get("template").is_some_and(|t| t == "1")),
                    lock: vm.config.get("lock").cloned(),
                    pool: s.pool_of(*vmid),
                    hastate: None,
                    maxcpu: None,
                    maxmem: None,
                    maxdisk: None,
                    uptime: None,
                })
                .collect();
            Ok(Listing {
                guests,
                unreadable: Vec::new(),
            })
        })
    }

    async fn node_resources(&self) -> Result<NodeResources, Error> {
        self.call("node_resources", String::new(), |s| {
            Ok(NodeResources(
                s.nodes
                    .iter()
                    .map(|(node, online)| {
                        let memory = s.node_memory.get(node).filter(|_| *online);
                        NodeResource {
                            node: node.clone(),
                            status: Some(if *online { "online" } else { "offline" }.into()),
                            maxmem: memory.map(|m| m.0),
                            mem: memory.map(|m| m.1),
                        }
                    })
                    .collect(),
            ))
        })
    }

    async fn pool_vmids(&self, poolid: &str) -> Result<Vec<u32>, Error> {
        self.call("pool_vmids", poolid.to_string(), |s| {
            s.pools
                .get(poolid)
                .cloned()
                .ok_or_else(|| api(500, format!("pool '{poolid}' does not exist")))
        })
    }

    async fn move_to_pool(&self, poolid: &str, vmid: u32) -> Result<(), Error> {
        self.call("move_to_pool", format!("{poolid} {vmid}"), |s| {
            s.join_pool(poolid, vmid);
            Ok(())
        })
    }

    async fn create_pool(&self, poolid: &str, _comment: &str) -> Result<(), Error> {
        self.call("create_pool", poolid.to_string(), |s| {
            // pve-manager PVE/API2/Pool.pm create_pool.
            if s.pools.contains_key(poolid) {
                return Err(api(
                    500,
                    format!("create pool failed: pool '{poolid}' already exists"),
                ));
            }
            s.pools.insert(poolid.to_string(), Vec::new());
            Ok(())
        })
    }

    async fn next_id(&self) -> Result<u32, Error> {
        self.call("next_id", String::new(), |s| {
            Ok((100..).find(|id| !s.vms.contains_key(id)).unwrap_or(100))
        })
    }

    async fn vmid_is_free(&self, vmid: u32) -> Result<bool, Error> {
        self.call("vmid_is_free", vmid.to_string(), |s| {
            Ok(!s.vms.contains_key(&vmid))
        })
    }

    async fn cluster_options(&self) -> Result<DatacenterOptions, Error> {
        // A token with Sys.Audit on `/`: all of datacenter.cfg, here PVE's defaults.
        self.call("cluster_options", String::new(), |_| {
            Ok(DatacenterOptions {
                mac_prefix: Some("BC:24:11".into()),
                ..Default::default()
            })
        })
    }

    async fn node_storages(
        &self,
        node: &str,
        content: Option<&str>,
    ) -> Result<Vec<NodeStorage>, Error> {
        self.call("node_storages", node.to_string(), |s| {
            Ok(storages(&s.shared_storages)
                .into_iter()
                .filter(|st| content.is_none_or(|c| st.has_content(c)))
                .collect())
        })
    }

    async fn storage_content(
        &self,
        node: &str,
        storage: &str,
        content: Option<&str>,
    ) -> Result<Vec<StorageVolume>, Error> {
        self.call("storage_content", format!("{node} {storage}"), |s| {
            Ok(s.volumes
                .get(storage)
                .into_iter()
                .flatten()
                .filter(|v| content.is_none_or(|c| v.content.as_deref() == Some(c)))
                .cloned()
                .collect())
        })
    }

    async fn upload_iso(
        &self,
        node: &str,
        storage: &str,
        file_name: &str,
        bytes: &[u8],
        _sha256: &str,
    ) -> Result<Upid, Error> {
        self.call("upload_iso", format!("{node} {storage} {file_name}"), |s| {
            let volume = StorageVolume {
                volid: format!("{storage}:iso/{file_name}"),
                content: Some("iso".into()),
                format: Some("iso".into()),
                size: Some(bytes.len() as u64),
                vmid: None,
                // A file's ctime moves with every write; the task counter does too.
                ctime: Some(1_700_000_000 + u64::from(s.pid)),
            };
            let storage = storage.to_string();
            // PVE overwrites a file of the same name (pve-storage `API2/Storage/Status.pm`).
            let on_ok: Effect = Box::new(move |s: &mut State| {
                let list = s.volumes.entry(storage).or_default();
                list.retain(|v| v.volid != volume.volid);
                list.push(volume);
            });
            Ok(s.task(node, "imgcopy", "", Some(on_ok), None))
        })
    }

    async fn download_url(
        &self,
        node: &str,
        storage: &str,
        download: &crate::pve::Download,
    ) -> Result<Upid, Error> {
        let what = format!("{node} {storage} {}", download.filename);
        self.call("download_url", what, |s| {
            let volume = StorageVolume {
                volid: format!("{storage}:{}/{}", download.content, download.filename),
                content: Some(download.content.clone()),
                format: download.filename.rsplit('.').next().map(str::to_string),
                size: Some(1 << 20),
                vmid: None,
                ctime: Some(1_700_000_000 + u64::from(s.pid)),
            };
            let storage = storage.to_string();
            // PVE never overwrites: the same checksum finds the file there and ends at once.
            let on_ok: Effect = Box::new(move |s: &mut State| {
                let list = s.volumes.entry(storage).or_default();
                if !list.iter().any(|v| v.volid == volume.volid) {
                    list.push(volume);
                }
            });
            Ok(s.task(node, "download", &download.filename, Some(on_ok), None))
        })
    }

    async fn oci_registry_pull(
        &self,
        node: &str,
        storage: &str,
        reference: &str,
        filename: &str,
    ) -> Result<Upid, Error> {
        let what = format!("{node} {storage} {reference}");
        self.call("oci_registry_pull", what, |s| {
            let volid = format!("{storage}:vztmpl/{filename}.tar");
            if s.volumes
                .get(storage)
                .is_some_and(|l| l.iter().any(|v| v.volid == volid))
            {
                let message = format!("refusing to override existing file '{filename}.tar'");
                return Err(api(500, message));
            }
            let volume = StorageVolume {
                volid,
                content: Some("vztmpl".into()),
                format: Some("tar".into()),
                size: Some(1 << 20),
                vmid: None,
                ctime: Some(1_700_000_000 + u64::from(s.pid)),
            };
            let storage = storage.to_string();
            let on_ok: Effect = Box::new(move |s: &mut State| {
                s.volumes.entry(storage).or_default().push(volume);
            });
            Ok(s.task(
                node,
                "ociregistrypull",
                &format!("{filename}.tar"),
                Some(on_ok),
                None,
            ))
        })
    }

    async fn delete_volume(
        &self,
        node: &str,
        storage: &str,
        volume: &str,
        permit: &Permit,
    ) -> Result<Option<Upid>, Error> {
        let check = check_delete_volume(volume, permit).map_err(Error::NotPermitted);
        self.permitted("delete_volume", &format!("{node} {volume}"), check)?;
        self.call("delete_volume", format!("{node} {volume}"), |s| {
            if let Some(list) = s.volumes.get_mut(storage) {
                list.retain(|v| v.volid != volume);
            }
            Ok(None)
        })
    }

    async fn node_bridges(&self, node: &str) -> Result<Vec<NetworkInterface>, Error> {
        self.call("node_bridges", node.to_string(), |_| {
            Ok(vec![NetworkInterface {
                iface: "vmbr0".into(),
                kind: Some("bridge".into()),
                active: Some(true),
                mtu: None,
            }])
        })
    }

    async fn vm_config(&self, node: &str, kind: GuestKind, vmid: u32) -> Result<VmConfig, Error> {
        self.call("vm_config", at(node, kind, vmid), |s| {
            let mut values = s.vm(node, kind, vmid)?.config.clone();
            values.insert("digest".into(), s.digest(vmid));
            Ok(VmConfig { values })
        })
    }

    async fn vm_pending(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
    ) -> Result<Vec<PendingEntry>, Error> {
        self.call("vm_pending", at(node, kind, vmid), |s| {
            Ok(s.vm(node, kind, vmid)?
                .config
                .iter()
                .map(|(k, v)| PendingEntry {
                    key: k.clone(),
                    value: Some(serde_json::Value::String(v.clone())),
                    pending: None,
                    delete: None,
                })
                .collect())
        })
    }

    async fn set_config(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        params: &VmParams,
        digest: Option<&str>,
    ) -> Result<(), Error> {
        self.permitted("set_config", &at(node, kind, vmid), params.permitted(vmid))?;
        self.call("set_config", at(node, kind, vmid), |s| {
            s.unlocked(node, kind, vmid)?;
            s.check_digest(kind, vmid, digest)?;
            if kind == GuestKind::Lxc {
                s.check_ct_mtus(params.entries())?;
            }
            s.write_config(vmid, params);
            Ok(())
        })
    }

    async fn set_config_async(
        &self,
        node: &str,
        vmid: u32,
        params: &VmParams,
        digest: Option<&str>,
    ) -> Result<Option<Upid>, Error> {
        let args = format!("{node} {vmid}");
        self.permitted("set_config_async", &args, params.permitted(vmid))?;
        self.call("set_config_async", args, |s| {
            s.unlocked(node, GuestKind::Qemu, vmid)?;
            s.check_digest(GuestKind::Qemu, vmid, digest)?;
            s.write_config(vmid, params);
            Ok(None)
        })
    }

    async fn create_vm(&self, node: &str, vmid: u32, params: &VmParams) -> Result<Upid, Error> {
        self.call("create_vm", format!("{node} {vmid}"), |s| {
            s.vm_node_ok(node)?;
            s.taken(GuestKind::Qemu, vmid)?;
            let form = params.form();
            let pool = form
                .iter()
                .find(|(k, _)| *k == "pool")
                .map(|(_, v)| v.clone());
            // `pool` is a parameter of the create, not a config key; a new disk `S:N` is
            // allocated.
            let mut config = BTreeMap::new();
            for (k, v) in form.into_iter().filter(|(k, _)| *k != "pool") {
                let v = allocate_vm_volume(vmid, k, &v, &config);
                config.insert(k.to_string(), v);
            }
            Ok(s.make_vm(
                node,
                "qmcreate",
                &vmid.to_string(),
                vmid,
                config,
                node.into(),
                None,
                pool,
            ))
        })
    }

    async fn clone_vm(&self, node: &str, template: u32, req: &CloneRequest) -> Result<Upid, Error> {
        let args = format!("{node} {template} newid={}", req.newid);
        self.call("clone_vm", args, |s| {
            let mut config = s.vm(node, GuestKind::Qemu, template)?.config.clone();
            // qemu-server clone_vm: `PVE::QemuConfig->check_lock($conf)` on the source, then
            // (its `$load_and_check`, before the task) `unable to create VM N: config file
            // already exists` for a config at the new VMID on this node. One on another node
            // fails the task's write of its temporary config, here at once.
            s.unlocked(node, GuestKind::Qemu, template)?;
            if s.vms.get(&req.newid).is_some_and(|vm| vm.node == node) {
                return Err(api(
                    500,
                    format!(
                        "unable to create VM {}: config file already exists",
                        req.newid
                    ),
                ));
            }
            s.taken(GuestKind::Qemu, req.newid)?;
            // A clone copies the config (not `template`) and takes name and description;
            // qemu-server gives it a new smbios1 uuid.
            config.remove("template");
            new_identity(&mut config, req.newid);
            config.insert("name".into(), req.name.clone());
            config.insert("description".into(), req.description.clone());
            let target = req.target.clone().unwrap_or_else(|| node.to_string());
            Ok(s.make_vm(
                node,
                "qmclone",
                &template.to_string(),
                req.newid,
                config,
                target,
                None,
                req.pool.clone(),
            ))
        })
    }

    async fn template_vm(&self, node: &str, vmid: u32) -> Result<Upid, Error> {
        self.call("template_vm", format!("{node} {vmid}"), |s| {
            // qemu-server `API2/Qemu.pm` template's `$load_and_check`, before the `qmtemplate`
            // task: check_lock, snapshots (the fake keeps none), a template already, a running
            // VM, each a plain `die`.
            s.unlocked(node, GuestKind::Qemu, vmid)?;
            let vm = s.vm(node, GuestKind::Qemu, vmid)?;
            if vm.config.get("template").is_some_and(|v| v == "1") {
                return Err(api(500, "you can't convert a template to a template"));
            }
            if vm.running {
                return Err(api(
                    500,
                    "you can't convert a VM to template if VM is running",
                ));
            }
            // The task: `template: 1` written, then `QemuServer.pm` template_create renames each
            // disk but a CD-ROM to its base volume (`vdisk_create_base`).
            let on_ok: Effect = Box::new(move |s: &mut State| {
                let mut renamed = Vec::new();
                if let Some(vm) = s.vms.get_mut(&vmid) {
                    vm.config.insert("template".into(), "1".into());
                    for (key, value) in vm.config.iter_mut() {
                        if let Some((old, new)) = base_volume(vmid, key, value) {
                            *value = value.replacen(&old, &new, 1);
                            renamed.push((old, new));
                        }
                    }
                }
                for volume in s.volumes.values_mut().flatten() {
                    if let Some((_, new)) = renamed.iter().find(|(old, _)| *old == volume.volid) {
                        volume.volid = new.clone();
                    }
                }
                *s.generation.entry(vmid).or_default() += 1;
            });
            Ok(s.task(node, "qmtemplate", &vmid.to_string(), Some(on_ok), None))
        })
    }

    async fn create_ct(&self, node: &str, vmid: u32, params: &VmParams) -> Result<Upid, Error> {
        self.call("create_ct", at(node, GuestKind::Lxc, vmid), |s| {
            s.vm_node_ok(node)?;
            s.taken(GuestKind::Lxc, vmid)?;
            let form = params.form();
            let value = |key: &str| form.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
            if let Some(archive) = value("ostemplate") {
                check_vztmpl_name(archive)?;
            }
            s.check_ct_mtus(form.iter().map(|(k, v)| (*k, v.as_str())))?;
            let pool = value("pool").cloned();
            // What pve-container keeps of the create's parameters: the config, not the
            // template, storage, keys or pool.
            let config = form
                .into_iter()
                .filter(|(k, _)| {
                    ![
                        "ostemplate",
                        "storage",
                        "ssh-public-keys",
                        "password",
                        "pool",
                    ]
                    .contains(k)
                })
                .map(|(k, v)| {
                    let v = s.allocate_ct_volume(vmid, k, &v);
                    (k.to_string(), v)
                })
                .collect();
            Ok(s.make_vm(
                node,
                "vzcreate",
                &vmid.to_string(),
                vmid,
                config,
                node.into(),
                None,
                pool,
            ))
        })
    }

    async fn clone_ct(&self, node: &str, template: u32, req: &CloneRequest) -> Result<Upid, Error> {
        let args = format!("{node} lxc/{template} newid={}", req.newid);
        self.call("clone_ct", args, |s| {
            let mut config = s.vm(node, GuestKind::Lxc, template)?.config.clone();
            // pve-container clone_vm: `set_lock($vmid, 'disk')` on the source first (its
            // check_lock refuses a locked one), then create_and_lock_config for the new one.
            s.unlocked(node, GuestKind::Lxc, template)?;
            s.taken(GuestKind::Lxc, req.newid)?;
            // Then, lock and new config undone again: a full clone of a running container
            // (pve-container 6.0.19 on, PVE 9.1; the fake is 9.1).
            if req.full && s.vm(node, GuestKind::Lxc, template)?.running {
                return Err(api(
                    500,
                    "Full clone of a running container is only possible from a snapshot",
                ));
            }
            s.set_value(template, "lock", Some("disk"));
            config.remove("template");
            // pve-container gives each NIC of the clone a new MAC.
            new_identity(&mut config, req.newid);
            config.insert("hostname".into(), req.name.clone());
            config.insert("description".into(), req.description.clone());
            let target = req.target.clone().unwrap_or_else(|| node.to_string());
            Ok(s.make_vm(
                node,
                "vzclone",
                &template.to_string(),
                req.newid,
                config,
                target,
                Some(template),
                req.pool.clone(),
            ))
        })
    }

    async fn resize_disk(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        disk: &str,
        size: &str,
        digest: Option<&str>,
    ) -> Result<Option<Upid>, Error> {
        let args = format!("{} {disk} {size}", at(node, kind, vmid));
        self.call("resize_disk", args, |s| {
            s.unlocked(node, kind, vmid)?;
            let now = s.volume_size(vmid, disk);
            let want = requested_size(now, size);
            let id = vmid.to_string();
            match kind {
                // pve-container `API2/LXC.pm` resize_vm: its digest (assert_if_modified) and
                // sizes checked before the task.
                GuestKind::Lxc => {
                    s.check_digest(kind, vmid, digest)?;
                    ct_resize_checks(now, want)?;
                }
                // qemu-server `API2/Qemu.pm` resize_vm: every check in its `resize` task.
                GuestKind::Qemu => {
                    let stale = s.check_digest(kind, vmid, digest).err();
                    let shrink = matches!((now, want), (Some(n), Some(w)) if w < n);
                    if let Some(e) = stale {
                        return Ok(Some(s.failed_task(node, "resize", &id, e.pve_message())));
                    }
                    if shrink {
                        let text = "shrinking disks is not supported";
                        return Ok(Some(s.failed_task(node, "resize", &id, text)));
                    }
                }
            }
            let disk = disk.to_string();
            let on_ok: Effect = Box::new(move |s: &mut State| {
                let Some(bytes) = want.filter(|w| Some(*w) != now) else {
                    return; // qemu-server: `return if $size == $newsize`
                };
                if let Some(value) = s.vms.get_mut(&vmid).and_then(|vm| vm.config.get_mut(&disk)) {
                    let rest: Vec<&str> = value
                        .split(',')
                        .filter(|p| !p.starts_with("size="))
                        .collect();
                    let volume = rest.first().map(|v| v.to_string()).unwrap_or_default();
                    *value = format!(
                        "{},size={}",
                        rest.join(","),
                        crate::pve::values::pve_size(bytes)
                    );
                    s.ct_volumes.entry(volume).and_modify(|b| *b = bytes);
                }
                *s.generation.entry(vmid).or_default() += 1;
            });
            Ok(Some(s.task(node, "resize", &id, Some(on_ok), None)))
        })
    }

    async fn vm_running(&self, node: &str, kind: GuestKind, vmid: u32) -> Result<bool, Error> {
        self.call("vm_running", at(node, kind, vmid), |s| {
            Ok(s.vm(node, kind, vmid)?.running)
        })
    }

    async fn start_vm(&self, node: &str, kind: GuestKind, vmid: u32) -> Result<Upid, Error> {
        self.call("start_vm", at(node, kind, vmid), |s| {
            s.power(node, kind, vmid, "start", true)
        })
    }

    async fn shutdown_vm(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        _timeout_secs: u32,
        _force_stop: bool,
    ) -> Result<Upid, Error> {
        self.call("shutdown_vm", at(node, kind, vmid), |s| {
            s.power(node, kind, vmid, "shutdown", false)
        })
    }

    async fn reboot_vm(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        _timeout_secs: u32,
    ) -> Result<Upid, Error> {
        self.call("reboot_vm", at(node, kind, vmid), |s| {
            s.power(node, kind, vmid, "reboot", true)
        })
    }

    async fn stop_vm(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        _overrule: bool,
    ) -> Result<Upid, Error> {
        self.call("stop_vm", at(node, kind, vmid), |s| {
            s.power(node, kind, vmid, "stop", false)
        })
    }

    async fn delete_vm(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        _purge: bool,
        _destroy_unreferenced: bool,
        permit: &Permit,
    ) -> Result<Upid, Error> {
        let check = check_delete_vm(vmid, permit).map_err(Error::NotPermitted);
        self.permitted("delete_vm", &at(node, kind, vmid), check)?;
        self.call("delete_vm", at(node, kind, vmid), |s| {
            s.unlocked(node, kind, vmid)?;
            // destroy_vm checks the flag first (`check_protection`), each kind in its words
            // (qemu-server `can't remove VM N`, pve-container `can't remove CT N`).
            if s.vm(node, kind, vmid)?
                .config
                .get("protection")
                .is_some_and(|v| v == "1")
            {
                return Err(api(
                    500,
                    format!(
                        "can't remove {} {vmid} - protection mode enabled",
                        guest_type(kind)
                    ),
                ));
            }
            if s.vm(node, kind, vmid)?.running {
                return Err(api(
                    500,
                    match kind {
                        GuestKind::Qemu => format!("VM {vmid} is running - destroy failed"),
                        GuestKind::Lxc => {
                            format!("unable to destroy CT {vmid} - container is running")
                        }
                    },
                ));
            }
            // qemu-server's destroy_vm leaves `lock: destroyed` until the config goes.
            if let Some(vm) = s.vms.get_mut(&vmid) {
                vm.config.insert("lock".into(), "destroyed".into());
            }
            let on_ok: Effect = Box::new(move |s: &mut State| {
                s.vms.remove(&vmid);
                s.snapshots.remove(&vmid);
                s.leave_pools(vmid);
            });
            let on_fail: Effect = Box::new(move |s: &mut State| {
                if let Some(vm) = s.vms.get_mut(&vmid) {
                    vm.config.remove("lock");
                }
            });
            Ok(s.task(
                node,
                match kind {
                    GuestKind::Qemu => "qmdestroy",
                    GuestKind::Lxc => "vzdestroy",
                },
                &vmid.to_string(),
                Some(on_ok),
                Some(on_fail),
            ))
        })
    }

    async fn active_vm_tasks(&self, node: &str, vmid: u32) -> Result<Vec<TaskListEntry>, Error> {
        self.call("active_vm_tasks", format!("{node} {vmid}"), |s| {
            Ok(s.active(node, Some(vmid)))
        })
    }

    async fn active_tasks(&self, node: &str) -> Result<Vec<TaskListEntry>, Error> {
        self.call("active_tasks", node.to_string(), |s| {
            Ok(s.active(node, None))
        })
    }

    async fn snapshots(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
    ) -> Result<Vec<Snapshot>, Error> {
        self.call("snapshots", at(node, kind, vmid), |s| {
            s.vm(node, kind, vmid)?;
            let listed = s
                .snapshots
                .get(&vmid)
                .map(Vec::as_slice)
                .unwrap_or_default();
            Ok(listed
                .iter()
                .map(|snap| Snapshot {
                    name: snap.name.clone(),
                    snaptime: Some(snap.snaptime),
                    description: snap.description.clone(),
                    snapstate: snap.snapstate.map(str::to_string),
                })
                .collect())
        })
    }

    // pve-guest-common snapshot_create: `__snapshot_prepare` writes `lock: snapshot` and the
    // snapshot (`snapstate: prepare`) before the volumes are snapshotted; `__snapshot_commit`
    // drops both and sets the config's `parent`; a failure deletes the snapshot and the lock.
    async fn snapshot_config(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        name: &str,
    ) -> Result<VmConfig, Error> {
        self.call(
            "snapshot_config",
            format!("{} {name}", at(node, kind, vmid)),
            |s| {
                s.vm(node, kind, vmid)?;
                let values = (s.snapshot_of(vmid, name))
                    .map(|snap| snap.config.clone())
                    .ok_or_else(|| api(500, format!("snapshot '{name}' does not exist")))?;
                Ok(VmConfig { values })
            },
        )
    }

    async fn snapshot(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        name: &str,
        description: &str,
    ) -> Result<Upid, Error> {
        self.call(
            "snapshot",
            format!("{} {name}", at(node, kind, vmid)),
            |s| {
                let mut config = s.vm(node, kind, vmid)?.config.clone();
                let task = snapshot_task(kind, "snapshot");
                let id = vmid.to_string();
                if let Some(exit) = s.snapshot_refusal(kind, vmid, name, "snapshot") {
                    return Ok(s.failed_task(node, task, &id, &exit));
                }
                config.retain(|k, _| k != "lock" && k != "description" && !k.starts_with("unused"));
                let snaptime = s.clock.now_ms() / 1000;
                s.snapshots.entry(vmid).or_default().push(FakeSnapshot {
                    name: name.to_string(),
                    config,
                    description: description.to_string(),
                    snaptime,
                    snapstate: Some("prepare"),
                });
                s.set_value(vmid, "lock", Some("snapshot"));
                let done = name.to_string();
                let on_ok: Effect = Box::new(move |s: &mut State| {
                    if let Some(snap) = s
                        .snapshots
                        .get_mut(&vmid)
                        .and_then(|l| l.iter_mut().find(|n| n.name == done))
                    {
                        snap.snapstate = None;
                    }
                    s.release(vmid, "snapshot");
                    s.set_value(vmid, "parent", Some(&done));
                });
                let failed = name.to_string();
                let on_fail: Effect = Box::new(move |s: &mut State| {
                    if let Some(list) = s.snapshots.get_mut(&vmid) {
                        list.retain(|n| n.name != failed);
                    }
                    s.release(vmid, "snapshot");
                });
                Ok(s.task(node, task, &id, Some(on_ok), Some(on_fail)))
            },
        )
    }

    // pve-guest-common snapshot_rollback: the guest is stopped and locked `rollback` first;
    // at the end the snapshot's config replaces the guest's, but its description and unused
    // volumes (`__snapshot_apply_config`), with `parent` the snapshot, and `start=1` starts
    // it. A task that fails keeps the lock (PVE removes it only in its last step).
    async fn rollback(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        name: &str,
        permit: &Permit,
    ) -> Result<Upid, Error> {
        let args = format!("{} {name}", at(node, kind, vmid));
        let check = check_rollback(vmid, name, permit).map_err(Error::NotPermitted);
        self.permitted("rollback", &args, check)?;
        self.call("rollback", args, |s| {
            s.vm(node, kind, vmid)?;
            let task = snapshot_task(kind, "rollback");
            let id = vmid.to_string();
            if let Some(exit) = s.snapshot_refusal(kind, vmid, name, "rollback") {
                return Ok(s.failed_task(node, task, &id, &exit));
            }
            let Some(config) = s.snapshot_of(vmid, name).map(|n| n.config.clone()) else {
                unreachable!("a rollback to a missing snapshot is refused above");
            };
            if let Some(vm) = s.vms.get_mut(&vmid) {
                vm.running = false;
            }
            s.set_value(vmid, "lock", Some("rollback"));
            let name = name.to_string();
            let on_ok: Effect = Box::new(move |s: &mut State| {
                let Some(vm) = s.vms.get_mut(&vmid) else {
                    return;
                };
                let kept: Vec<(String, String)> = vm
                    .config
                    .iter()
                    .filter(|(k, _)| *k == "description" || k.starts_with("unused"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                vm.config = config;
                vm.config.extend(kept);
                vm.config.insert("parent".into(), name);
                vm.running = true;
                *s.generation.entry(vmid).or_default() += 1;
            });
            Ok(s.task(node, task, &id, Some(on_ok), None))
        })
    }

    // pve-guest-common snapshot_delete: `set_lock($vmid, 'snapshot-delete')` and `snapstate:
    // delete` first; at the end the snapshot goes, its children and the config take its
    // parent, and the lock goes. A task that fails keeps both (without `force`).
    async fn delete_snapshot(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        name: &str,
        permit: &Permit,
    ) -> Result<Upid, Error> {
        let args = format!("{} {name}", at(node, kind, vmid));
        let check = check_delete_snapshot(vmid, name, permit).map_err(Error::NotPermitted);
        self.permitted("delete_snapshot", &args, check)?;
        self.call("delete_snapshot", args, |s| {
            s.vm(node, kind, vmid)?;
            let task = snapshot_task(kind, "delsnapshot");
            let id = vmid.to_string();
            if let Some(exit) = s.snapshot_refusal(kind, vmid, name, "delete") {
                return Ok(s.failed_task(node, task, &id, &exit));
            }
            if let Some(snap) = s
                .snapshots
                .get_mut(&vmid)
                .and_then(|l| l.iter_mut().find(|n| n.name == name))
            {
                snap.snapstate = Some("delete");
            }
            s.set_value(vmid, "lock", Some("snapshot-delete"));
            let name = name.to_string();
            let on_ok: Effect = Box::new(move |s: &mut State| {
                let list = s.snapshots.entry(vmid).or_default();
                let parent = list
                    .iter()
                    .find(|n| n.name == name)
                    .and_then(|n| n.config.get("parent").cloned());
                list.retain(|n| n.name != name);
                for other in list.iter_mut() {
                    relink(&mut other.config, &name, parent.as_deref());
                }
                if let Some(vm) = s.vms.get_mut(&vmid) {
                    relink(&mut vm.config, &name, parent.as_deref());
                }
                s.release(vmid, "snapshot-delete");
            });
            Ok(s.task(node, task, &id, Some(on_ok), None))
        })
    }

    async fn agent_ping(&self, node: &str, vmid: u32) -> Result<(), Error> {
        self.call("agent_ping", format!("{node} {vmid}"), |_| {
            Err(api(500, "QEMU guest agent is not running"))
        })
    }

    async fn agent_interfaces(&self, node: &str, vmid: u32) -> Result<Vec<AgentInterface>, Error> {
        self.call("agent_interfaces", format!("{node} {vmid}"), |_| {
            Err(api(500, "QEMU guest agent is not running"))
        })
    }

    async fn guest_interfaces(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
    ) -> Result<Vec<AgentInterface>, Error> {
        match kind {
            GuestKind::Qemu => self.agent_interfaces(node, vmid).await,
            GuestKind::Lxc => {
                self.call("guest_interfaces", at(node, kind, vmid), |_| Ok(Vec::new()))
            }
        }
    }

    async fn migrate_precondition(
        &self,
        node: &str,
        kind: GuestKind,
        vmid: u32,
        target: &str,
    ) -> Result<MigratePrecondition, Error> {
        let args = format!("{} {target}", at(node, kind, vmid));
        self.call("migrate_precondition", args, |s| {
            let running = s.vm(node, kind, vmid)?.running;
            let others: Vec<&String> = s.nodes.keys().filter(|n| *n != node).collect();
            serde_json::from_value(serde_json::json!({
                "running": running, "allowed_nodes": others, "local_disks": [], "local_resources": [],
            }))
            .map_err(|e| api(500, e.to_string()))
        })
    }

    async fn migrate_vm(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        _online: bool,
        _with_local_disks: bool,
    ) -> Result<Upid, Error> {
        self.call("migrate_vm", format!("{node} {vmid} {target}"), |s| {
            s.unlocked(node, GuestKind::Qemu, vmid)?;
            let target = target.to_string();
            let on_ok: Effect = Box::new(move |s: &mut State| {
                if let Some(vm) = s.vms.get_mut(&vmid) {
                    vm.node = target;
                }
            });
            Ok(s.task(node, "qmigrate", &vmid.to_string(), Some(on_ok), None))
        })
    }

    async fn migrate_ct(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        restart: bool,
        _timeout_secs: u32,
    ) -> Result<Upid, Error> {
        let args = format!(
            "{} {target} restart={restart}",
            at(node, GuestKind::Lxc, vmid)
        );
        self.call("migrate_ct", args, |s| {
            s.unlocked(node, GuestKind::Lxc, vmid)?;
            if s.vm(node, GuestKind::Lxc, vmid)?.running && !restart {
                return Err(api(500, "CT is running - use online or restart"));
            }
            let target = target.to_string();
            let on_ok: Effect = Box::new(move |s: &mut State| {
                if let Some(vm) = s.vms.get_mut(&vmid) {
                    vm.node = target;
                }
            });
            Ok(s.task(node, "vzmigrate", &vmid.to_string(), Some(on_ok), None))
        })
    }

    async fn ha_resource(&self, kind: GuestKind, vmid: u32) -> Result<Option<HaResource>, Error> {
        self.call("ha_resource", kind.ha_sid(vmid), |s| {
            Ok(s.ha.get(&vmid).map(|p| HaResource {
                sid: kind.ha_sid(vmid),
                state: Some(p.state.clone()),
                group: p.group.clone(),
                max_restart: Some(u64::from(p.max_restart)),
                max_relocate: Some(u64::from(p.max_relocate)),
                comment: Some(p.comment.clone()),
                digest: None,
            }))
        })
    }

    async fn add_ha_resource(
        &self,
        kind: GuestKind,
        vmid: u32,
        params: &HaParams,
    ) -> Result<(), Error> {
        self.call("add_ha_resource", kind.ha_sid(vmid), |s| {
            s.ha.insert(vmid, params.clone());
            Ok(())
        })
    }

    async fn update_ha_resource(
        &self,
        kind: GuestKind,
        vmid: u32,
        params: &HaParams,
        _digest: Option<&str>,
    ) -> Result<(), Error> {
        self.call("update_ha_resource", kind.ha_sid(vmid), |s| {
            s.ha.insert(vmid, params.clone());
            Ok(())
        })
    }

    async fn remove_ha_resource(
        &self,
        kind: GuestKind,
        vmid: u32,
        keep_rules: bool,
        permit: &Permit,
    ) -> Result<(), Error> {
        let what = format!("{} {keep_rules}", kind.ha_sid(vmid));
        let check =
            check_remove_ha_resource(&kind.ha_sid(vmid), permit).map_err(Error::NotPermitted);
        self.permitted("remove_ha_resource", &what, check)?;
        self.call("remove_ha_resource", what, |s| {
            s.ha.remove(&vmid);
            Ok(())
        })
    }

    async fn ha_affinity(&self, kind: AffinityKind, id: &str) -> Result<Option<HaAffinity>, Error> {
        self.call("ha_affinity", id.to_string(), |s| {
            let rule = kind == AffinityKind::Rule;
            Ok(s.affinities.get(&(rule, id.to_string())).map(|p| {
                let nodes: Vec<String> = p
                    .nodes
                    .iter()
                    .map(|(n, prio)| format!("{n}:{prio}"))
                    .collect();
                HaAffinity {
                    nodes: Some(nodes.join(",")),
                    strict: rule.then_some(p.strict),
                    restricted: (!rule).then_some(p.strict),
                    resources: rule.then(|| p.sid.clone()),
                    comment: Some(p.comment.clone()),
                    digest: None,
                }
            }))
        })
    }

    async fn add_ha_affinity(
        &self,
        kind: AffinityKind,
        id: &str,
        params: &AffinityParams,
    ) -> Result<(), Error> {
        self.call("add_ha_affinity", id.to_string(), |s| {
            s.affinities
                .insert((kind == AffinityKind::Rule, id.to_string()), params.clone());
            Ok(())
        })
    }

    async fn update_ha_affinity(
        &self,
        kind: AffinityKind,
        id: &str,
        params: &AffinityParams,
        _digest: Option<&str>,
    ) -> Result<(), Error> {
        self.call("update_ha_affinity", id.to_string(), |s| {
            s.affinities
                .insert((kind == AffinityKind::Rule, id.to_string()), params.clone());
            Ok(())
        })
    }

    async fn remove_ha_affinity(
        &self,
        kind: AffinityKind,
        id: &str,
        permit: &Permit,
    ) -> Result<(), Error> {
        let check = check_remove_affinity(id, permit).map_err(Error::NotPermitted);
        self.permitted("remove_ha_affinity", id, check)?;
        self.call("remove_ha_affinity", id.to_string(), |s| {
            s.affinities
                .remove(&(kind == AffinityKind::Rule, id.to_string()));
            Ok(())
        })
    }

    /// Waits on the fake's changes (no polling), within `timeout` of tokio's time.
    fn parallel_limit(&self, _node: &str) -> Option<u32> {
        self.lock().parallel_limit
    }

    async fn wait_task(&self, upid: &Upid, timeout: Duration) -> Result<TaskOutcome, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut first = true;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            // Logged once per wait; a fault on `wait_task` is a failed poll.
            let exit = if first {
                first = false;
                self.call("wait_task", upid.to_string(), |s| task_exit(s, upid))?
            } else {
                task_exit(&self.lock(), upid)?
            };
            if let Some(exit) = exit {
                return classify_exit(&exit).map_err(|text| Error::TaskFailed {
                    upid: upid.to_string(),
                    exitstatus: text,
                    log_tail: vec![format!("TASK ERROR: {exit}")],
                });
            }
            // A task with a duration ends by itself: woken then, if nothing else came first.
            let ends_at = self
                .lock()
                .tasks
                .iter()
                .find(|t| &t.upid == upid)
                .and_then(|t| t.ends_at);
            let wake = ends_at.map_or(deadline, |at| at.min(deadline));
            let timed_out = tokio::time::timeout_at(wake, changed).await.is_err();
            if timed_out && wake == deadline && task_exit(&self.lock(), upid)?.is_none() {
                return Ok(TaskOutcome::StillRunning);
            }
        }
    }
}

fn task_exit(s: &State, upid: &Upid) -> Result<Option<String>, Error> {
    s.tasks
        .iter()
        .find(|t| &t.upid == upid)
        .map(|t| t.exit.clone())
        .ok_or_else(|| api(500, format!("no such task '{upid}'")))
}

impl State {
    fn vm_node_ok(&self, node: &str) -> Result<(), Error> {
        match self.nodes.get(node) {
            Some(true) => Ok(()),
            Some(false) => Err(api(
                595,
                format!("no route to host (node '{node}' offline)"),
            )),
            None => Err(api(500, format!("no such cluster node '{node}'"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pve::permit::Act;

    /// The key the test markers are signed with.
    fn key() -> crate::ownership::MarkerKey {
        crate::ownership::MarkerKey::from_bytes([7; 32])
    }
    use crate::ownership::Marker;

    /// VM 100 of spec `web` with its signed marker, a second disk and a seed attached.
    fn fake() -> FakePve {
        let pve = FakePve::new(&["pve1"]);
        let marker = Marker::signed(&key(), "main", "web", "u1", 100).description();
        pve.add_vm(
            100,
            "pve1",
            &[
                ("description", &marker),
                ("tags", "proxsync.main"),
                ("scsi1", "local-lvm:vm-100-disk-1,size=8G"),
            ],
        );
        pve
    }

    /// The fake refuses what the client refuses (`gate::permit`), and changes nothing: unit
    /// tests of `execute` meet the same check as the daemon.
    #[tokio::test]
    async fn a_guarded_edit_without_its_permit_changes_nothing() {
        let pve = fake();
        let before = pve.vm(100);
        for params in [
            VmParams::new().delete_keys(&["scsi1"]),
            VmParams::new().set("description", "typed by hand"),
            VmParams::new().tags(&["web"]).unwrap(),
        ] {
            let err = pve
                .set_config("pve1", crate::guest::GuestKind::Qemu, 100, &params, None)
                .await
                .unwrap_err();
            assert!(matches!(err, Error::NotPermitted(_)), "{err}");
            let err = pve
                .set_config_async("pve1", 100, &params, None)
                .await
                .unwrap_err();
            assert!(matches!(err, Error::NotPermitted(_)), "{err}");
        }
        assert_eq!(pve.vm(100), before);
        assert_eq!(pve.count("set_config") + pve.count("set_config_async"), 0);
        assert_eq!(pve.count("refused"), 6, "{:?}", pve.calls());

        // A permit of another act, or for another VM: refused as well.
        // (The gate's own tests check that it gives these for VM 100 of spec `web`.)
        let release = Permit::new("lab", 100, Act::Release);
        let err = pve
            .delete_vm(
                "pve1",
                crate::guest::GuestKind::Qemu,
                100,
                true,
                true,
                &release,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NotPermitted(_)), "{err}");
        let delete = Permit::new("lab", 100, Act::DeleteVm);
        assert!(
            pve.delete_vm(
                "pve1",
                crate::guest::GuestKind::Qemu,
                101,
                true,
                true,
                &delete
            )
            .await
            .is_err()
        );
        assert!(
            pve.delete_volume("pve1", "local", "local:iso/x.iso", &delete)
                .await
                .is_err()
        );
        assert!(
            pve.remove_ha_affinity(AffinityKind::Rule, "proxsync-vm100", &delete)
                .await
                .is_err()
        );
        assert_eq!(pve.vm(100), before);
        // With its permit, the delete is carried out.
        pve.delete_vm(
            "pve1",
            crate::guest::GuestKind::Qemu,
            100,
            true,
            true,
            &delete,
        )
        .await
        .unwrap();
        assert_eq!(pve.vm(100), None);
    }

    /// A failure's text as the fake wrote it, and what `pve::texts` makes of it.
    fn words(e: Error) -> (String, Option<crate::pve::texts::Meaning>) {
        (e.pve_message().to_string(), e.meaning())
    }

    /// Each kind in its own words (pve-guest-common check_lock with qemu-server's `VM` and
    /// pve-container's `CT`; qemu-server's digest text and pve-common assert_if_modified's),
    /// each a text of the table with the meaning of its row.
    #[tokio::test]
    async fn a_container_is_locked_and_conflicts_in_pve_containers_words() {
        use crate::guest::GuestKind::{Lxc, Qemu};
        use crate::pve::texts::Meaning;
        let pve = FakePve::new(&["pve1"]);
        pve.add_vm(100, "pve1", &[("lock", "backup")]);
        pve.add_guest(Lxc, 101, "pve1", &[("lock", "backup")]);
        let params = VmParams::new().set("memory", "512");
        let vm = pve.set_config("pve1", Qemu, 100, &params, None).await;
        let ct = pve.set_config("pve1", Lxc, 101, &params, None).await;
        assert_eq!(
            words(vm.unwrap_err()),
            ("VM is locked (backup)".into(), Some(Meaning::LockHeld))
        );
        assert_eq!(
            words(ct.unwrap_err()),
            ("CT is locked (backup)".into(), Some(Meaning::LockHeld))
        );
        for vmid in [100, 101] {
            pve.set_config_value(vmid, "lock", None);
        }
        let stale = Some("0000000000000000000000000000000000000000");
        let vm = pve.set_config("pve1", Qemu, 100, &params, stale).await;
        let ct = pve.set_config("pve1", Lxc, 101, &params, stale).await;
        let (text, meaning) = words(vm.unwrap_err());
        assert_eq!(text, "checksum mismatch (file change by other user?)");
        assert_eq!(meaning, Some(Meaning::DigestConflict));
        let ct = ct.unwrap_err();
        assert_eq!(ct.category(), crate::category::Category::Conflict);
        assert_eq!(
            words(ct),
            (
                "detected modified configuration - file changed by other user? Try again.".into(),
                Some(Meaning::DigestConflict)
            )
        );
        let taken = pve.create_ct("pve1", 100, &params).await.unwrap_err();
        assert_eq!(
            words(taken),
            (
                "unable to create CT 100 - VM 100 already exists on node 'pve1'".into(),
                Some(Meaning::AlreadyExists)
            )
        );
    }

    /// pve-container's clone locks its source `disk` for the whole copy: a second clone of
    /// the template meanwhile is refused `CT is locked (disk)` (nothing made), and the lock
    /// goes when the clone's task ends, well or not.
    #[tokio::test]
    async fn a_container_clone_locks_its_template_while_it_copies() {
        use crate::guest::GuestKind::Lxc;
        use crate::pve::texts::Meaning;
        let pve = FakePve::new(&["pve1"]);
        pve.add_guest(Lxc, 9100, "pve1", &[("template", "1"), ("hostname", "t")]);
        pve.set_task_end(TaskEnd::Held);
        let clone = |newid: u32| CloneRequest {
            newid,
            name: format!("c{newid}"),
            description: String::new(),
            full: true,
            storage: None,
            target: None,
            pool: None,
        };
        let lock = |pve: &FakePve| pve.vm(9100).unwrap().config.get("lock").cloned();
        let first = pve.clone_ct("pve1", 9100, &clone(200)).await.unwrap();
        assert_eq!(lock(&pve).as_deref(), Some("disk"));
        let second = pve.clone_ct("pve1", 9100, &clone(201)).await.unwrap_err();
        assert_eq!(second.status(), Some(500));
        assert_eq!(
            words(second.clone()),
            ("CT is locked (disk)".into(), Some(Meaning::LockHeld))
        );
        assert!(second.surely_not_executed() && !second.is_overload());
        assert!(pve.vm(201).is_none(), "nothing made");
        pve.end_task(first.as_str(), "OK");
        assert_eq!(lock(&pve), None);
        // A clone that fails unlocks its template too (pve-container removes the lock first).
        let failed = pve.clone_ct("pve1", 9100, &clone(202)).await.unwrap();
        assert_eq!(lock(&pve).as_deref(), Some("disk"));
        pve.end_task(failed.as_str(), "clone failed: storage error");
        assert_eq!(lock(&pve), None);
        assert!(pve.vm(202).is_none());
    }
    /// qemu-server `API2/Qemu.pm` template: a `qmtemplate` task naming the VM sets its
    /// `template: 1` and renames its disks (not a CD-ROM) to base volumes (`QemuServer.pm`
    /// template_create); PVE's `$load_and_check` refuses a locked VM, a template and a running
    /// VM before any task, in its words.
    #[tokio::test]
    async fn a_vm_converts_to_a_template_and_a_running_vm_or_a_template_is_refused() {
        use crate::guest::GuestKind::Qemu;
        use crate::pve::texts::Meaning;
        let pve = FakePve::new(&["pve1"]);
        pve.add_vm(
            100,
            "pve1",
            &[
                ("scsi0", "local-lvm:vm-100-disk-0,size=8G"),
                ("efidisk0", "local:100/vm-100-disk-1.qcow2,size=4M"),
                ("ide2", "local-lvm:vm-100-cloudinit,media=cdrom"),
                ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
            ],
        );
        pve.add_volume("local-lvm", "local-lvm:vm-100-disk-0", "images");
        let upid = pve.template_vm("pve1", 100).await.unwrap();
        assert_eq!(
            (upid.kind.as_str(), upid.id.as_str()),
            ("qmtemplate", "100")
        );
        assert!(matches!(
            pve.wait_task(&upid, Duration::from_secs(1)).await,
            Ok(TaskOutcome::Ok)
        ));
        let config = pve.vm(100).unwrap().config;
        assert_eq!(config.get("template").map(String::as_str), Some("1"));
        assert_eq!(config["scsi0"], "local-lvm:base-100-disk-0,size=8G");
        assert_eq!(
            config["efidisk0"],
            "local:100/base-100-disk-1.qcow2,size=4M"
        );
        assert_eq!(config["ide2"], "local-lvm:vm-100-cloudinit,media=cdrom");
        let listed = pve
            .storage_content("pve1", "local-lvm", None)
            .await
            .unwrap();
        assert_eq!(listed[0].volid, "local-lvm:base-100-disk-0");

        // A template again: refused before any task.
        let refused = pve.template_vm("pve1", 100).await.unwrap_err();
        assert_eq!(refused.status(), Some(500));
        assert_eq!(
            words(refused.clone()),
            (
                "you can't convert a template to a template".into(),
                Some(Meaning::AlreadyTemplate)
            )
        );
        assert!(refused.surely_not_executed());

        // A running VM: refused, nothing changed.
        pve.add_vm(101, "pve1", &[("scsi0", "local-lvm:vm-101-disk-0,size=8G")]);
        let start = pve.start_vm("pve1", Qemu, 101).await.unwrap();
        pve.wait_task(&start, Duration::from_secs(1)).await.unwrap();
        let before = pve.vm(101);
        let refused = pve.template_vm("pve1", 101).await.unwrap_err();
        assert_eq!(
            words(refused),
            (
                "you can't convert a VM to template if VM is running".into(),
                Some(Meaning::Refused)
            )
        );
        assert_eq!(pve.vm(101), before);

        // A locked VM: check_lock's words.
        pve.add_vm(102, "pve1", &[("lock", "backup")]);
        assert_eq!(
            words(pve.template_vm("pve1", 102).await.unwrap_err()),
            ("VM is locked (backup)".into(), Some(Meaning::LockHeld))
        );
        assert_eq!(pve.vm(102).unwrap().config.get("template"), None);
        assert_eq!(pve.running_tasks(), Vec::<String>::new());
    }

    /// The power calls' answers, each kind in its words (pve-container `API2/LXC/Status.pm`
    /// vm_start, vm_stop, vm_shutdown, vm_reboot; qemu-server `API2/Qemu.pm` vm_reboot and
    /// `QemuServer.pm` vm_start, whose `already running` ends the `qmstart` task).
    #[tokio::test]
    async fn power_calls_are_refused_in_each_kinds_words() {
        use crate::guest::GuestKind::{Lxc, Qemu};
        use crate::pve::texts::Meaning;
        let pve = FakePve::new(&["pve1"]);
        pve.add_vm(100, "pve1", &[]);
        pve.add_guest(Lxc, 101, "pve1", &[]);
        let refused = |r: Result<Upid, Error>| words(r.unwrap_err());
        for (vmid, kind) in [(100, Qemu), (101, Lxc)] {
            assert_eq!(
                refused(pve.reboot_vm("pve1", kind, vmid, 60).await),
                (format!("VM {vmid} not running"), Some(Meaning::NotRunning))
            );
        }
        assert_eq!(
            refused(pve.stop_vm("pve1", Lxc, 101, false).await),
            ("CT 101 not running".into(), Some(Meaning::NotRunning))
        );
        assert_eq!(
            refused(pve.shutdown_vm("pve1", Lxc, 101, 60, false).await),
            ("CT 101 not running".into(), Some(Meaning::NotRunning))
        );
        for (vmid, kind) in [(100, Qemu), (101, Lxc)] {
            let task = pve.start_vm("pve1", kind, vmid).await.unwrap();
            pve.wait_task(&task, Duration::from_secs(1)).await.unwrap();
        }
        assert_eq!(
            refused(pve.start_vm("pve1", Lxc, 101).await),
            (
                "CT 101 already running".into(),
                Some(Meaning::AlreadyRunning)
            )
        );
        let again = pve
            .start_vm("pve1", Qemu, 100)
            .await
            .expect("a qmstart task");
        let failed = pve.wait_task(&again, Duration::from_secs(1)).await;
        assert_eq!(
            words(failed.unwrap_err()),
            (
                "VM 100 already running".into(),
                Some(Meaning::AlreadyRunning)
            )
        );
        assert!(pve.vm(100).unwrap().running && pve.vm(101).unwrap().running);
    }

    /// A VM's new disk is allocated and sized in its config (qemu-server create_disks); a
    /// resize takes `+N` as more than the volume's size, and a shrink fails its `resize` task
    /// (qemu-server resize_vm) or is refused before it (pve-container resize_vm).
    #[tokio::test]
    async fn disks_are_allocated_and_resized_as_pve_does() {
        use crate::guest::GuestKind::{Lxc, Qemu};
        use crate::pve::texts::Meaning;
        let pve = FakePve::new(&["pve1"]);
        let params = VmParams::new()
            .new_disk("scsi0", "local-lvm", 1)
            .unwrap()
            .set("name", "a");
        let task = pve.create_vm("pve1", 100, &params).await.unwrap();
        pve.wait_task(&task, Duration::from_secs(1)).await.unwrap();
        let disk = |pve: &FakePve, vmid: u32, key: &str| pve.vm(vmid).unwrap().config[key].clone();
        assert_eq!(disk(&pve, 100, "scsi0"), "local-lvm:vm-100-disk-0,size=1G");
        let grow = pve
            .resize_disk("pve1", Qemu, 100, "scsi0", "+1G", None)
            .await
            .unwrap()
            .unwrap();
        pve.wait_task(&grow, Duration::from_secs(1)).await.unwrap();
        assert_eq!(disk(&pve, 100, "scsi0"), "local-lvm:vm-100-disk-0,size=2G");
        let shrink = pve
            .resize_disk("pve1", Qemu, 100, "scsi0", "1G", None)
            .await
            .expect("a resize task")
            .unwrap();
        let failed = pve.wait_task(&shrink, Duration::from_secs(1)).await;
        assert_eq!(
            words(failed.unwrap_err()),
            (
                "shrinking disks is not supported".into(),
                Some(Meaning::Refused)
            )
        );
        assert_eq!(disk(&pve, 100, "scsi0"), "local-lvm:vm-100-disk-0,size=2G");

        let ct = VmParams::new()
            .set("rootfs", "local-lvm:2")
            .set("hostname", "c");
        let task = pve.create_ct("pve1", 101, &ct).await.unwrap();
        pve.wait_task(&task, Duration::from_secs(1)).await.unwrap();
        assert_eq!(
            pve.resize_disk("pve1", Lxc, 101, "rootfs", "2G", None)
                .await
                .map(|_| ())
                .map_err(words),
            Err((
                "disk is already at specified size".into(),
                Some(Meaning::AlreadyAtSize)
            ))
        );
        let grow = pve
            .resize_disk("pve1", Lxc, 101, "rootfs", "+1G", None)
            .await
            .unwrap()
            .unwrap();
        pve.wait_task(&grow, Duration::from_secs(1)).await.unwrap();
        assert_eq!(disk(&pve, 101, "rootfs"), "local-lvm:vm-101-disk-0,size=3G");
    }

    /// A create or clone joins its pool when its task ends well, not before (qemu-server and
    /// pve-container call `add_vm_to_pool` last in their workers); the listing names the pool;
    /// a destroy leaves it (`remove_vm_access`).
    #[tokio::test]
    async fn pools_are_joined_at_a_tasks_end_and_left_by_a_destroy() {
        use crate::guest::GuestKind::Qemu;
        let pve = FakePve::new(&["pve1"]);
        pve.add_pool("scratch");
        pve.set_task_end(TaskEnd::Held);
        let params = VmParams::new().set("name", "a").set("pool", "scratch");
        let task = pve.create_vm("pve1", 100, &params).await.unwrap();
        assert_eq!(pve.pool("scratch"), Some(vec![]), "not before its end");
        pve.end_task(task.as_str(), "OK");
        assert_eq!(pve.pool("scratch"), Some(vec![100]));
        assert!(
            !pve.vm(100).unwrap().config.contains_key("pool"),
            "no config key"
        );
        let listed = pve.vm_resources().await.unwrap().guests;
        assert_eq!(listed[0].pool.as_deref(), Some("scratch"));
        pve.set_task_end(TaskEnd::AtOnce);
        let permit = Permit::new("lab", 100, Act::DeleteVm);
        pve.delete_vm("pve1", Qemu, 100, true, true, &permit)
            .await
            .unwrap();
        assert_eq!(pve.pool("scratch"), Some(vec![]));
        assert_eq!(
            words(pve.pool_vmids("missing").await.unwrap_err()),
            (
                "pool 'missing' does not exist".into(),
                Some(crate::pve::texts::Meaning::PoolMissing)
            )
        );
    }

    /// qemu-server clone_vm refuses a new VMID whose config is on the node before its task:
    /// `unable to create VM N: config file already exists`.
    #[tokio::test]
    async fn a_clone_onto_a_vmid_taken_on_its_node_is_refused_in_qemu_servers_words() {
        use crate::pve::texts::Meaning;
        let pve = FakePve::new(&["pve1"]);
        pve.add_vm(9000, "pve1", &[("template", "1")]);
        pve.add_vm(100, "pve1", &[("name", "there")]);
        let req = CloneRequest {
            newid: 100,
            name: "c".into(),
            description: String::new(),
            full: true,
            storage: None,
            target: None,
            pool: None,
        };
        let err = pve.clone_vm("pve1", 9000, &req).await.unwrap_err();
        assert_eq!(
            words(err),
            (
                "unable to create VM 100: config file already exists".into(),
                Some(Meaning::AlreadyExists)
            )
        );
        assert_eq!(pve.vm(100).unwrap().config["name"], "there");
    }

    /// pve-container's checks before anything is made: an archive name pve-storage's
    /// parse_volname does not take, a NIC above its bridge's MTU (update_pct_config, at a
    /// create and an update), a full clone of a running container (clone_vm).
    #[tokio::test]
    async fn a_container_is_refused_before_anything_is_made() {
        use crate::guest::GuestKind::Lxc;
        use crate::pve::texts::Meaning;
        let pve = FakePve::new(&["pve1"]);
        let archive = |name: &str| {
            VmParams::new()
                .set("ostemplate", format!("local:vztmpl/{name}"))
                .set("hostname", "c")
        };
        let err = pve
            .create_ct("pve1", 101, &archive("debian-12.tgz"))
            .await
            .unwrap_err();
        assert_eq!(
            words(err),
            (
                "unable to parse directory volume name 'vztmpl/debian-12.tgz'".into(),
                Some(Meaning::Refused)
            )
        );
        for ok in ["d.tar", "d.TAR.ZST", "d.tar.bz2", "d.tar.gz", "d.tar.xz"] {
            let task = pve.create_ct("pve1", 102, &archive(ok)).await;
            assert!(task.is_ok(), "{ok}");
            pve.remove_vm(102);
        }
        let mtu = archive("d.tar.zst").set("net0", "name=eth0,bridge=vmbr0,mtu=9000");
        let err = pve.create_ct("pve1", 103, &mtu).await.unwrap_err();
        assert_eq!(
            words(err),
            (
                "net0: MTU size '9000' is bigger than bridge MTU '1500'".into(),
                Some(Meaning::Refused)
            )
        );
        assert!(pve.vm(101).is_none() && pve.vm(103).is_none());
        pve.add_guest(Lxc, 104, "pve1", &[("hostname", "r")]);
        let nic = VmParams::new().set("net0", "name=eth0,bridge=vmbr0,mtu=1501");
        assert_eq!(
            pve.set_config("pve1", Lxc, 104, &nic, None)
                .await
                .unwrap_err()
                .meaning(),
            Some(Meaning::Refused)
        );
        pve.edit_vm(104, |vm| vm.running = true);
        let req = CloneRequest {
            newid: 105,
            name: "c".into(),
            description: String::new(),
            full: true,
            storage: None,
            target: None,
            pool: None,
        };
        let err = pve.clone_ct("pve1", 104, &req).await.unwrap_err();
        assert_eq!(
            words(err),
            (
                "Full clone of a running container is only possible from a snapshot".into(),
                Some(Meaning::Refused)
            )
        );
        assert!(pve.vm(105).is_none());
        assert_eq!(pve.vm(104).unwrap().config.get("lock"), None);
    }

    /// A task type given a duration runs for it, then ends `OK` by itself: its locks hold
    /// meanwhile, and a wait sees its end.
    #[tokio::test(start_paused = true)]
    async fn a_task_with_a_duration_ends_by_itself() {
        let pve = FakePve::new(&["pve1"]);
        pve.add_vm(9000, "pve1", &[("template", "1")]);
        pve.set_task_duration("qmclone", Duration::from_secs(5));
        let req = CloneRequest {
            newid: 100,
            name: "c".into(),
            description: String::new(),
            full: true,
            storage: None,
            target: None,
            pool: None,
        };
        let task = pve.clone_vm("pve1", 9000, &req).await.unwrap();
        assert_eq!(pve.vm(100).unwrap().config["lock"], "clone");
        let short = pve.wait_task(&task, Duration::from_secs(1)).await.unwrap();
        assert_eq!(short, TaskOutcome::StillRunning);
        let done = pve.wait_task(&task, Duration::from_secs(10)).await.unwrap();
        assert_eq!(done, TaskOutcome::Ok);
        assert_eq!(pve.vm(100).unwrap().config.get("lock"), None);
        assert_eq!(pve.vm(100).unwrap().config["name"], "c");
    }

    /// A guest of `kind` with a disk on `local-lvm`, a description (the marker's place) and 1
    /// GiB of memory.
    fn snapshot_guest(kind: GuestKind, vmid: u32) -> FakePve {
        let pve = FakePve::new(&["pve1"]);
        let disk = match kind {
            GuestKind::Qemu => ("scsi0", "local-lvm:vm-100-disk-0,size=8G"),
            GuestKind::Lxc => ("rootfs", "local-lvm:vm-101-disk-0,size=8G"),
        };
        pve.add_guest(
            kind,
            vmid,
            "pve1",
            &[disk, ("memory", "1024"), ("description", "the marker")],
        );
        pve
    }

    /// The lock a guest's config holds now.
    fn lock_of(pve: &FakePve, vmid: u32) -> Option<String> {
        pve.vm(vmid).unwrap().config.get("lock").cloned()
    }

    /// A held snapshot, rollback and delete task each lock the guest (`snapshot`, `rollback`,
    /// `snapshot-delete`, pve-guest-common AbstractConfig.pm) until it ends: a write meanwhile
    /// meets `VM is locked (snapshot)` / `CT is locked (snapshot)`. The snapshot is listed at
    /// once; a rollback puts back the config but the description and starts the guest; a
    /// delete removes it.
    #[tokio::test]
    async fn held_snapshot_tasks_lock_the_guest_until_they_end() {
        use crate::pve::texts::Meaning;
        for (kind, vmid, who) in [(GuestKind::Qemu, 100, "VM"), (GuestKind::Lxc, 101, "CT")] {
            let pve = snapshot_guest(kind, vmid);
            pve.set_task_end(TaskEnd::Held);
            let write = VmParams::new().set("memory", "2048");

            let take = pve
                .snapshot("pve1", kind, vmid, "before", "taken by proxsync")
                .await
                .unwrap();
            assert_eq!(take.kind, snapshot_task(kind, "snapshot"));
            assert_eq!(lock_of(&pve, vmid).as_deref(), Some("snapshot"));
            let listed = pve.snapshots("pve1", kind, vmid).await.unwrap();
            assert_eq!(listed.len(), 1, "{listed:?}");
            assert_eq!(listed[0].description, "taken by proxsync");
            let err = pve
                .set_config("pve1", kind, vmid, &write, None)
                .await
                .unwrap_err();
            assert_eq!(
                words(err),
                (
                    format!("{who} is locked (snapshot)"),
                    Some(Meaning::LockHeld)
                )
            );
            pve.end_task(take.as_str(), "OK");
            assert_eq!(lock_of(&pve, vmid), None);
            assert_eq!(pve.vm(vmid).unwrap().config["parent"], "before");

            pve.set_task_end(TaskEnd::AtOnce);
            pve.set_config("pve1", kind, vmid, &write, None)
                .await
                .unwrap();
            pve.set_config_value(vmid, "description", Some("the marker, edited"));
            pve.set_task_end(TaskEnd::Held);

            let permit = Permit::new(
                "lab",
                vmid,
                Act::Rollback {
                    snapshot: "before".into(),
                },
            );
            let back = pve
                .rollback("pve1", kind, vmid, "before", &permit)
                .await
                .unwrap();
            assert_eq!(back.kind, snapshot_task(kind, "rollback"));
            assert_eq!(lock_of(&pve, vmid).as_deref(), Some("rollback"));
            assert!(!pve.vm(vmid).unwrap().running, "stopped first");
            let err = pve
                .set_config("pve1", kind, vmid, &write, None)
                .await
                .unwrap_err();
            assert_eq!(words(err).0, format!("{who} is locked (rollback)"));
            pve.end_task(back.as_str(), "OK");
            let vm = pve.vm(vmid).unwrap();
            assert_eq!(vm.config.get("lock"), None);
            assert_eq!(vm.config["memory"], "1024", "the snapshot's value");
            assert_eq!(vm.config["description"], "the marker, edited", "kept");
            assert!(vm.running, "start=1");

            let permit = Permit::new(
                "lab",
                vmid,
                Act::DeleteSnapshot {
                    snapshot: "before".into(),
                },
            );
            let gone = pve
                .delete_snapshot("pve1", kind, vmid, "before", &permit)
                .await
                .unwrap();
            assert_eq!(gone.kind, snapshot_task(kind, "delsnapshot"));
            assert_eq!(lock_of(&pve, vmid).as_deref(), Some("snapshot-delete"));
            let err = pve
                .set_config("pve1", kind, vmid, &write, None)
                .await
                .unwrap_err();
            assert_eq!(words(err).0, format!("{who} is locked (snapshot-delete)"));
            pve.end_task(gone.as_str(), "OK");
            assert_eq!(lock_of(&pve, vmid), None);
            assert!(pve.snapshots("pve1", kind, vmid).await.unwrap().is_empty());
            assert_eq!(pve.vm(vmid).unwrap().config.get("parent"), None);
        }
    }

    /// A snapshot task with a duration holds its lock for it, then ends by itself and releases
    /// it; one that fails leaves no snapshot and no lock (snapshot_create's cleanup).
    #[tokio::test(start_paused = true)]
    async fn a_snapshot_task_with_a_duration_holds_its_lock_meanwhile() {
        let pve = snapshot_guest(GuestKind::Lxc, 101);
        pve.set_task_duration("vzsnapshot", Duration::from_secs(5));
        let task = pve
            .snapshot("pve1", GuestKind::Lxc, 101, "before", "")
            .await
            .unwrap();
        assert_eq!(lock_of(&pve, 101).as_deref(), Some("snapshot"));
        let short = pve.wait_task(&task, Duration::from_secs(1)).await.unwrap();
        assert_eq!(short, TaskOutcome::StillRunning);
        assert_eq!(lock_of(&pve, 101).as_deref(), Some("snapshot"));
        let done = pve.wait_task(&task, Duration::from_secs(10)).await.unwrap();
        assert_eq!(done, TaskOutcome::Ok);
        assert_eq!(lock_of(&pve, 101), None);

        pve.set_task_end(TaskEnd::Held);
        let task = pve
            .snapshot("pve1", GuestKind::Lxc, 101, "again", "")
            .await
            .unwrap();
        pve.end_task(task.as_str(), "zfs error: out of space");
        assert_eq!(lock_of(&pve, 101), None);
        let names: Vec<String> = pve
            .snapshots("pve1", GuestKind::Lxc, 101)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["before"]);
    }

    /// A guest with a volume on a storage that cannot snapshot: the snapshot task fails
    /// `snapshot feature is not available` (pve-guest-common `__snapshot_prepare`), taking
    /// nothing and leaving no lock. A CD-ROM there does not count (qemu-server has_feature
    /// skips CD-ROMs), nor a guest whose volumes are all elsewhere.
    #[tokio::test]
    async fn a_snapshot_on_a_storage_that_cannot_snapshot_fails_its_task() {
        use crate::pve::texts::Meaning;
        let pve = FakePve::new(&["pve1"]);
        pve.storage_cannot_snapshot("local");
        pve.add_vm(100, "pve1", &[("scsi0", "local-lvm:vm-100-disk-0,size=8G")]);
        pve.add_vm(
            102,
            "pve1",
            &[
                ("scsi0", "local-lvm:vm-102-disk-0,size=8G"),
                ("virtio1", "local:102/vm-102-disk-1.raw,size=1G"),
            ],
        );
        pve.add_guest(
            GuestKind::Lxc,
            103,
            "pve1",
            &[
                ("rootfs", "local-lvm:vm-103-disk-0,size=8G"),
                ("mp0", "local:103/vm-103-disk-1.raw,mp=/data,size=1G"),
            ],
        );
        pve.add_vm(
            104,
            "pve1",
            &[
                ("scsi0", "local-lvm:vm-104-disk-0,size=8G"),
                ("ide2", "local:iso/debian.iso,media=cdrom"),
                ("unused0", "local:104/vm-104-disk-9.raw"),
                ("net0", "virtio,bridge=local"),
            ],
        );
        for (kind, vmid) in [(GuestKind::Qemu, 102), (GuestKind::Lxc, 103)] {
            let task = pve
                .snapshot("pve1", kind, vmid, "before", "")
                .await
                .unwrap();
            let err = pve
                .wait_task(&task, Duration::from_secs(1))
                .await
                .unwrap_err();
            assert_eq!(
                words(err),
                (
                    "snapshot feature is not available".into(),
                    Some(Meaning::SnapshotUnsupported)
                )
            );
            assert_eq!(lock_of(&pve, vmid), None);
            assert!(pve.snapshots("pve1", kind, vmid).await.unwrap().is_empty());
        }
        for vmid in [100, 104] {
            let task = pve
                .snapshot("pve1", GuestKind::Qemu, vmid, "before", "")
                .await
                .unwrap();
            let done = pve.wait_task(&task, Duration::from_secs(1)).await;
            assert_eq!(done.unwrap(), TaskOutcome::Ok, "{vmid}");
        }
    }

    /// How a task a call started failed (the call itself must answer a task).
    async fn failed(
        pve: &FakePve,
        task: Result<Upid, Error>,
    ) -> (String, Option<crate::pve::texts::Meaning>) {
        let task = task.expect("a task, not a refused request");
        words(
            pve.wait_task(&task, Duration::from_secs(1))
                .await
                .unwrap_err(),
        )
    }

    /// PVE's checks run in the snapshot tasks' workers, so they fail the task, not the request:
    /// a locked guest (each kind in its words), a name taken, a snapshot missing on a rollback
    /// and a delete, a rollback to a snapshot still being taken.
    #[tokio::test]
    async fn snapshot_refusals_fail_the_task_in_pves_words() {
        use crate::pve::texts::Meaning;
        let rollback = |vmid| {
            Permit::new(
                "lab",
                vmid,
                Act::Rollback {
                    snapshot: "nope".into(),
                },
            )
        };
        let delete = |vmid| {
            Permit::new(
                "lab",
                vmid,
                Act::DeleteSnapshot {
                    snapshot: "nope".into(),
                },
            )
        };
        for (kind, vmid, who) in [(GuestKind::Qemu, 100, "VM"), (GuestKind::Lxc, 101, "CT")] {
            let pve = snapshot_guest(kind, vmid);
            pve.set_config_value(vmid, "lock", Some("backup"));
            assert_eq!(
                failed(&pve, pve.snapshot("pve1", kind, vmid, "a1", "").await).await,
                (format!("{who} is locked (backup)"), Some(Meaning::LockHeld))
            );
            pve.set_config_value(vmid, "lock", None);
            pve.snapshot("pve1", kind, vmid, "a1", "").await.unwrap();
            assert_eq!(
                failed(&pve, pve.snapshot("pve1", kind, vmid, "a1", "").await).await,
                (
                    "snapshot name 'a1' already used".into(),
                    Some(Meaning::SnapshotExists)
                )
            );
            let missing = (
                "snapshot 'nope' does not exist".to_string(),
                Some(Meaning::SnapshotMissing),
            );
            let r = pve
                .rollback("pve1", kind, vmid, "nope", &rollback(vmid))
                .await;
            assert_eq!(failed(&pve, r).await, missing);
            let d = pve
                .delete_snapshot("pve1", kind, vmid, "nope", &delete(vmid))
                .await;
            assert_eq!(failed(&pve, d).await, missing);
            assert_eq!(lock_of(&pve, vmid), None, "nothing changed");

            pve.set_task_end(TaskEnd::Held);
            let task = pve.snapshot("pve1", kind, vmid, "nope", "").await.unwrap();
            let r = pve
                .rollback("pve1", kind, vmid, "nope", &rollback(vmid))
                .await;
            assert_eq!(
                failed(&pve, r).await.0,
                "unable to rollback to incomplete snapshot (snapstate = prepare)"
            );
            pve.end_task(task.as_str(), "OK");
        }
    }
}
