//! The crash-resume branches of a create, and a resumed delete, against the in-memory fake
//! (`pve::fake`): each test leaves the state an interrupted action leaves (by losing an answer
//! or holding a task), then runs the next action and checks the fake's call log. Time is
//! tokio's, paused: the request window and task waits pass without real sleeping.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::observe::observe_site;
use crate::ownership::MarkerKey;
use crate::pve::fake::{FakePve, Fault, TaskEnd};
use crate::spec::test_spec;
use crate::store::VmState;
use crate::util::clock::Clock;

/// Unix ms when each test starts (the clock follows tokio's paused time from there).
const START_MS: u64 = 1_800_000_000_000;
/// The site's request timeout: a create request may still arrive this long (plus
/// `REQUEST_WINDOW_MARGIN`) after its intent was written.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const TEMPLATE: u32 = 9000;

struct World {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    site: Arc<SiteCtx<FakePve>>,
    spec: Spec,
    /// More specs of the cycle, beside `spec`.
    others: Vec<Spec>,
    key: Arc<MarkerKey>,
    clock: Clock,
    task_wait: Duration,
}

impl World {
    /// The spec `web-01` cloned from template 9000 on pve1, on a two-node cluster.
    fn new(extra: &str) -> World {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(Store::open(dir.path()).expect("store"));
        let fake = FakePve::new(&["pve1", "pve2"]);
        fake.add_vm(
            TEMPLATE,
            "pve1",
            &[
                ("name", "debian-12"),
                ("template", "1"),
                ("scsi0", "local-lvm:base-9000-disk-0,size=32G"),
                ("boot", "order=scsi0"),
            ],
        );
        let clock = crate::util::clock_following_tokio(START_MS);
        fake.set_clock(clock.clone());
        World {
            _dir: dir,
            store,
            site: Arc::new(SiteCtx::new("lab", fake, REQUEST_TIMEOUT)),
            spec: test_spec(extra),
            others: Vec::new(),
            key: Arc::new(MarkerKey::from_bytes([7; 32])),
            clock,
            task_wait: Duration::from_secs(5),
        }
    }

    fn pve(&self) -> &FakePve {
        &self.site.client
    }

    fn record(&self) -> SpecRecord {
        self.store
            .specs()
            .expect("records")
            .remove(self.spec.name.as_str())
            .unwrap_or_default()
    }

    /// Runs one action as `execute` does (the record read from the store, the outcome
    /// recorded), after observing the site as a cycle does; once, even where `execute` would
    /// try a create again.
    async fn run(&self, action: Action) -> Outcome {
        self.run_changed(action, |_| {}).await
    }

    /// [`World::run`], with the cluster changed by `change` between the cycle's observation
    /// and the action (someone acting meanwhile).
    async fn run_changed(&self, action: Action, change: impl FnOnce(&FakePve)) -> Outcome {
        let ctx = self.ctx().await;
        change(self.pve());
        let rec = self
            .store
            .specs()
            .expect("records")
            .remove(self.spec.name.as_str());
        run_action(&ctx, &action, rec, CREATE_TRIES)
            .await
            .expect("a last attempt is recorded")
    }

    /// Runs `actions` through `execute` (the node's limit, tries again), after observing the
    /// site as a cycle does.
    async fn execute(&self, actions: Vec<Action>) -> Vec<ActionResult> {
        let ctx = Arc::new(self.ctx().await);
        let records = self.store.specs().expect("records");
        execute(ctx, actions, &records).await
    }

    /// The context of a cycle that has just observed the site.
    async fn ctx(&self) -> ExecCtx<FakePve> {
        let mut view = observe_site("lab", &self.site.client).await;
        // The markers the engine would read, without a logged call.
        for vm in view.vms.values_mut() {
            let marker = self.pve().vm(vm.vmid).and_then(|v| {
                v.config
                    .get("description")
                    .and_then(|d| crate::ownership::Marker::parse(d))
            });
            vm.marker_verified = marker
                .as_ref()
                .is_some_and(|m| m.verifies(&self.key, vm.vmid));
            vm.marker = marker.map(Arc::new);
            vm.marker_read = true;
        }
        self.ctx_of(view)
    }

    /// The context of a cycle whose observation of the site left `view`.
    fn ctx_of(&self, view: SiteView) -> ExecCtx<FakePve> {
        ExecCtx {
            store: self.store.clone(),
            install_id: "main".into(),
            sites: [("lab".to_string(), self.site.clone())].into(),
            specs: std::iter::once(&self.spec)
                .chain(&self.others)
                .map(|s| (s.name.to_string(), Arc::new(s.clone())))
                .collect(),
            views: [("lab".to_string(), view)].into(),
            config_hash: String::new(),
            task_wait: self.task_wait,
            max_parallel_per_node: 2,
            max_parallel_reboots: 1,
            reboot_slots: Default::default(),
            shutdown: tokio::sync::watch::channel(false).1,
            node_facts: Default::default(),
            marker_key: self.key.clone(),
            fresh_configs: Default::default(),
            clock: self.clock.clone(),
            vmid_cursors: Default::default(),
            password_files: Default::default(),
            images: Default::default(),
        }
    }

    fn create(&self) -> Action {
        Action::Create {
            spec: self.spec.name.to_string(),
            site: "lab".into(),
            node: self.spec.node.to_string(),
        }
    }

    fn adopt(&self, vmid: u32) -> Action {
        Action::Adopt {
            spec: self.spec.name.to_string(),
            site: "lab".into(),
            vmid,
        }
    }

    fn remove(&self, vmid: u32, release: bool) -> Action {
        Action::Remove {
            spec: self.spec.name.to_string(),
            site: "lab".into(),
            node: "pve1".into(),
            vmid,
            release,
        }
    }

    fn hand_over(&self, vmid: u32) -> Action {
        Action::HandOver {
            spec: self.spec.name.to_string(),
            site: "lab".into(),
            node: "pve1".into(),
            vmid,
        }
    }

    /// The VM's tags, as PVE lists them.
    fn tags(&self, vmid: u32) -> Vec<String> {
        let vm = self.pve().vm(vmid).expect("the VM");
        crate::pve::types::split_tags(vm.config.get("tags").map_or("", String::as_str))
    }

    /// The marker in the VM's description.
    fn marker_of(&self, vmid: u32) -> Option<crate::ownership::Marker> {
        let vm = self.pve().vm(vmid)?;
        crate::ownership::Marker::parse(vm.config.get("description")?)
    }

    /// A made VM of the spec, converged: its VMID.
    async fn made(&self) -> u32 {
        assert_eq!(self.run(self.create()).await, Outcome::Done);
        self.record().vmid().expect("created")
    }

    /// The action the planner makes of a record in `Creating`.
    fn resume(&self) -> Action {
        let rec = self.record();
        let VmState::Creating {
            vmid, node, task, ..
        } = rec.vm
        else {
            panic!("not creating: {:?}", rec.vm);
        };
        Action::ResumeCreate {
            spec: self.spec.name.to_string(),
            site: "lab".into(),
            node: node.to_string(),
            vmid,
            upid: task,
        }
    }

    /// The intent's VMID and UPID.
    fn intent(&self) -> (u32, Option<String>) {
        match self.record().vm {
            VmState::Creating { vmid, task, .. } => (vmid, task.map(|t| t.to_string())),
            other => panic!("not creating: {other:?}"),
        }
    }

    /// A create whose request reached PVE (or not: `executed`) but whose answer was lost: the
    /// intent is durable, no UPID.
    async fn create_answer_lost(&self, executed: bool) -> u32 {
        let fault = if executed {
            Fault::LoseAnswer
        } else {
            Fault::Refuse(crate::pve::Error::Api {
                method: "POST".into(),
                path: "/nodes/pve1/qemu/9000/clone".into(),
                status: 596,
                message: "Connection timed out".into(),
                errors: Default::default(),
            })
        };
        self.pve().fault("clone_vm", fault);
        let outcome = self.run(self.create()).await;
        assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
        let (vmid, upid) = self.intent();
        assert_eq!(upid, None, "the answer was lost: no UPID");
        assert_eq!(self.pve().count("clone_vm"), 1);
        vmid
    }

    fn assert_exists(&self, vmid: u32) {
        let rec = self.record();
        assert!(
            matches!(rec.vm, VmState::Exists { vmid: v, .. } if v == vmid),
            "{rec:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn create_clones_once_and_records_the_vm() {
    let w = World::new("");
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    assert_eq!(w.pve().count("clone_vm"), 1);
    w.assert_exists(100);
    let vm = w.pve().vm(100).expect("the clone");
    assert!(
        vm.config
            .get("description")
            .is_some_and(|d| d.contains("web-01"))
    );
    assert!(vm.running, "powerState defaults to running");
}

#[tokio::test(start_paused = true)]
async fn no_upid_and_no_vm_is_created_again_only_after_the_request_window() {
    let w = World::new("");
    let vmid = w.create_answer_lost(false).await;
    w.pve().clear_calls();
    // Within the window the request may still arrive: wait, send nothing.
    let outcome = w.run(w.resume()).await;
    assert!(matches!(outcome, Outcome::Waiting(_)), "{outcome:?}");
    assert_eq!(w.pve().count("clone_vm"), 0, "{:?}", w.pve().calls());
    assert_eq!(w.intent().0, vmid, "the intent stays");
    // Past it, nothing can still make the VM: the create is sent again.
    tokio::time::advance(REQUEST_TIMEOUT + REQUEST_WINDOW_MARGIN).await;
    assert_eq!(w.run(w.resume()).await, Outcome::Done);
    assert_eq!(w.pve().count("clone_vm"), 1, "{:?}", w.pve().calls());
    w.assert_exists(vmid);
}

/// The same branch within one action: the resume waits (paused time: no real sleep) until the
/// window has passed, then creates.
#[tokio::test(start_paused = true)]
async fn the_request_window_is_waited_out_on_paused_time() {
    let mut w = World::new("");
    w.create_answer_lost(false).await;
    w.task_wait = Duration::from_secs(120);
    w.pve().clear_calls();
    let before = tokio::time::Instant::now();
    assert_eq!(w.run(w.resume()).await, Outcome::Done);
    let waited = before.elapsed();
    assert!(
        waited >= REQUEST_TIMEOUT + REQUEST_WINDOW_MARGIN,
        "waited {waited:?}"
    );
    assert!(waited < Duration::from_secs(120), "waited {waited:?}");
    assert_eq!(w.pve().count("clone_vm"), 1);
}

#[tokio::test(start_paused = true)]
async fn no_upid_and_our_vm_is_adopted_without_a_second_create() {
    let w = World::new("");
    let vmid = w.create_answer_lost(true).await;
    w.pve().clear_calls();
    assert_eq!(w.run(w.resume()).await, Outcome::Done);
    assert_eq!(w.pve().count("clone_vm"), 0, "{:?}", w.pve().calls());
    assert_eq!(w.pve().count("create_vm"), 0);
    w.assert_exists(vmid);
}

#[tokio::test(start_paused = true)]
async fn no_upid_and_a_vm_without_our_marker_is_not_touched() {
    let w = World::new("");
    let vmid = w.create_answer_lost(false).await;
    // Someone else's VM took the VMID meanwhile.
    w.pve()
        .add_vm(vmid, "pve1", &[("name", "theirs"), ("description", "mine")]);
    let theirs = w.pve().vm(vmid);
    w.pve().clear_calls();
    assert_eq!(w.run(w.resume()).await, Outcome::Done);
    assert_eq!(w.pve().vm(vmid), theirs, "their VM is unchanged");
    let touched: Vec<String> = w
        .pve()
        .calls()
        .into_iter()
        .filter(|c| c.ends_with(&format!(" {vmid}")) && !c.starts_with("vm_config"))
        .filter(|c| !c.starts_with("active_vm_tasks"))
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
    // Ours is made at another VMID.
    assert_eq!(w.pve().count("clone_vm"), 1);
    let rec = w.record();
    assert_ne!(rec.vmid(), Some(vmid));
    assert!(rec.vmid().is_some(), "{rec:?}");
}

#[tokio::test(start_paused = true)]
async fn no_upid_and_a_running_clone_is_waited_for_by_its_upid() {
    let w = World::new("");
    w.pve().set_task_end(TaskEnd::Held);
    let vmid = w.create_answer_lost(true).await;
    let running = w.pve().running_tasks();
    assert_eq!(running.len(), 1);
    let upid = &running[0];
    assert!(
        upid.contains(&format!(":qmclone:{TEMPLATE}:")),
        "a clone's UPID names the template: {upid}"
    );
    w.pve().clear_calls();
    // The VM is locked (clone) by the template's task: found, recorded, waited for.
    let outcome = w.run(w.resume()).await;
    assert_eq!(outcome, Outcome::StillRunning { upid: upid.clone() });
    assert_eq!(w.intent(), (vmid, Some(upid.clone())));
    w.pve().set_task_end(TaskEnd::AtOnce);
    w.pve().end_task(upid, "OK");
    assert_eq!(w.run(w.resume()).await, Outcome::Done);
    assert_eq!(w.pve().count("clone_vm"), 0, "{:?}", w.pve().calls());
    w.assert_exists(vmid);
}

/// A create whose UPID is recorded and whose task is still running when the action stops.
async fn create_left_running(w: &World) -> (u32, String) {
    w.pve().set_task_end(TaskEnd::Held);
    let outcome = w.run(w.create()).await;
    let (vmid, upid) = w.intent();
    let upid = upid.expect("the UPID is recorded");
    assert_eq!(outcome, Outcome::StillRunning { upid: upid.clone() });
    assert!(upid.contains(&format!(":qmclone:{TEMPLATE}:")), "{upid}");
    w.pve().set_task_end(TaskEnd::AtOnce);
    w.pve().clear_calls();
    (vmid, upid)
}

#[tokio::test(start_paused = true)]
async fn upid_and_a_running_task_is_waited_for_again() {
    let w = World::new("");
    let (vmid, upid) = create_left_running(&w).await;
    let outcome = w.run(w.resume()).await;
    assert_eq!(outcome, Outcome::StillRunning { upid: upid.clone() });
    assert_eq!(w.pve().count("clone_vm"), 0);
    assert_eq!(w.intent(), (vmid, Some(upid)));
}

#[tokio::test(start_paused = true)]
async fn upid_and_a_task_that_ended_well_is_finished() {
    let w = World::new("");
    let (vmid, upid) = create_left_running(&w).await;
    w.pve().end_task(&upid, "OK");
    assert_eq!(w.run(w.resume()).await, Outcome::Done);
    assert_eq!(w.pve().count("clone_vm"), 0, "{:?}", w.pve().calls());
    assert_eq!(
        w.pve().count("wait_task"),
        2,
        "the clone's, then the start's"
    );
    w.assert_exists(vmid);
}

#[tokio::test(start_paused = true)]
async fn upid_and_a_failed_task_releases_the_intent() {
    let w = World::new("");
    let (vmid, upid) = create_left_running(&w).await;
    w.pve().end_task(&upid, "clone failed: out of space");
    let outcome = w.run(w.resume()).await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(e.message.contains("out of space"), "{e:?}");
    assert_eq!(w.pve().count("clone_vm"), 0, "no create in the same action");
    let rec = w.record();
    assert_eq!(rec.vm, VmState::Absent, "{rec:?}");
    assert!(w.store.allocations("lab").expect("allocations").is_empty());
    assert!(w.pve().vm(vmid).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_failed_poll_keeps_the_intent_and_its_upid() {
    let w = World::new("");
    let (vmid, upid) = create_left_running(&w).await;
    w.pve().fault(
        "wait_task",
        Fault::Refuse(crate::pve::Error::Api {
            method: "GET".into(),
            path: "/nodes/pve1/tasks".into(),
            status: 503,
            message: "Service Unavailable".into(),
            errors: Default::default(),
        }),
    );
    assert!(matches!(w.run(w.resume()).await, Outcome::Failed(_)));
    assert_eq!(w.intent(), (vmid, Some(upid)));
    assert_eq!(w.store.allocations("lab").expect("allocations").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_resumed_delete_waits_for_its_task_and_deletes_once() {
    let w = World::new("    powerState: stopped\n");
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    let vmid = w.record().vmid().expect("created");
    let remove = Action::Remove {
        spec: w.spec.name.to_string(),
        site: "lab".into(),
        node: "pve1".into(),
        vmid,
        release: false,
    };
    w.pve().set_task_end(TaskEnd::Held);
    let outcome = w.run(remove.clone()).await;
    let Outcome::StillRunning { upid } = outcome else {
        panic!("{outcome:?}");
    };
    let VmState::Deleting { task, .. } = w.record().vm else {
        panic!("not deleting: {:?}", w.record());
    };
    assert_eq!(task.map(|t| t.to_string()), Some(upid.clone()));
    // Resumed while the task runs: waited for, never sent again.
    assert_eq!(
        w.run(remove.clone()).await,
        Outcome::StillRunning { upid: upid.clone() }
    );
    assert_eq!(w.pve().count("delete_vm"), 1, "{:?}", w.pve().calls());
    w.pve().end_task(&upid, "OK");
    w.pve().clear_calls();
    assert_eq!(w.run(remove).await, Outcome::Done);
    assert_eq!(w.pve().count("delete_vm"), 0, "{:?}", w.pve().calls());
    assert!(w.store.specs().expect("records").is_empty());
    assert!(w.pve().vm(vmid).is_none());
}

#[tokio::test(start_paused = true)]
async fn the_upid_is_durable_while_the_task_is_waited_for() {
    let w = World::new("");
    w.pve().set_task_end(TaskEnd::Held);
    let look = async {
        while w.pve().running_tasks().is_empty() {
            tokio::task::yield_now().await;
        }
        // The action is now in its wait: a crash here must find the UPID in the database.
        w.intent()
    };
    let (outcome, (vmid, upid)) = tokio::join!(w.run(w.create()), look);
    assert_eq!(vmid, 100);
    let running = w.pve().running_tasks();
    assert_eq!(upid.as_ref(), running.first(), "{outcome:?}");
}

fn converge_action(w: &World, vmid: u32) -> Action {
    Action::Converge {
        spec: w.spec.name.to_string(),
        site: "lab".into(),
        node: "pve1".into(),
        vmid,
        why: vec!["spec changed".into()],
    }
}

fn history(w: &World) -> String {
    w.record()
        .history
        .iter()
        .map(|h| format!("{}: {}", h.action, h.outcome))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A destroy whose answer is lost (as a crash between the destroy and its record leaves it):
/// the binding written before the request names the volume; the next converge finds the slot
/// empty, records the destroy done and sends nothing; a disk put in the slot later (PVE may
/// give it the same volume id) is never destroyed.
#[tokio::test(start_paused = true)]
async fn a_destroy_with_a_lost_answer_is_never_sent_again() {
    let mut w = World::new("    disks:\n      - {size: 32Gi}\n");
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    let vmid = w.record().vmid().expect("created");
    let volume = "local-lvm:vm-100-disk-1";
    w.pve()
        .set_config_value(vmid, "scsi1", Some(&format!("{volume},size=2G")));
    w.spec = test_spec("    disks:\n      - {size: 32Gi}\n    destroyDisks: [scsi1]\n");

    w.pve().fault("set_config_async", Fault::LoseAnswer);
    let outcome = w.run(converge_action(&w, vmid)).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    assert!(!w.pve().vm(vmid).expect("vm").config.contains_key("scsi1"));
    let bound = w.record().disk_destroy("scsi1").cloned().expect("bound");
    assert_eq!(bound.state, crate::store::DestroyState::Bound);
    assert_eq!(bound.volume.as_deref(), Some(volume));

    w.pve().clear_calls();
    assert_eq!(w.run(converge_action(&w, vmid)).await, Outcome::Done);
    assert_eq!(
        w.pve().count("set_config_async"),
        0,
        "{:?}",
        w.pve().calls()
    );
    let done = w.record().disk_destroy("scsi1").cloned().expect("kept");
    assert_eq!(done.state, crate::store::DestroyState::Destroyed);
    assert!(
        history(&w).contains("no longer attached"),
        "{}",
        history(&w)
    );

    // Later, a person's disk in the slot, with the same volume id: kept, and said so.
    w.pve()
        .set_config_value(vmid, "scsi1", Some(&format!("{volume},size=5G")));
    w.pve().clear_calls();
    assert_eq!(w.run(converge_action(&w, vmid)).await, Outcome::Done);
    assert_eq!(
        w.pve().count("set_config_async"),
        0,
        "{:?}",
        w.pve().calls()
    );
    assert!(w.pve().vm(vmid).expect("vm").config.contains_key("scsi1"));
    assert!(
        history(&w).contains("destroyDisks no longer applies to scsi1"),
        "{}",
        history(&w)
    );
}

/// A disk swapped into a `destroyDisks` slot after this converge read the config and before its
/// destroy: the destroy is checked against a read of its own and sent with that read's digest,
/// so the swapped-in disk is never destroyed (PVE refuses the stale digest), and the next
/// converge keeps it (the destroy was bound to the volume that left).
#[tokio::test(start_paused = true)]
async fn a_disk_swapped_into_the_slot_during_a_converge_is_not_destroyed() {
    let mut w = World::new("    disks:\n      - {size: 32Gi}\n");
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    let vmid = w.record().vmid().expect("created");
    w.pve()
        .set_config_value(vmid, "scsi1", Some("local-lvm:vm-100-disk-1,size=2G"));
    w.spec = test_spec("    disks:\n      - {size: 32Gi}\n    destroyDisks: [scsi1]\n");

    // The converge's own read, then the destroy's read, right after which a person swaps the
    // disk in scsi1 (a digest PVE then refuses).
    let person = "local-lvm:vm-100-disk-7,size=50G";
    w.pve().fault("vm_config", Fault::Pass);
    w.pve().fault(
        "vm_config",
        Fault::ThenSet {
            vmid,
            key: "scsi1".into(),
            value: Some(person.into()),
        },
    );
    w.pve().clear_calls();
    let outcome = w.run(converge_action(&w, vmid)).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    assert_eq!(
        w.pve().count("vm_config"),
        2,
        "the swap lands after the destroy's own read: {:?}",
        w.pve().calls()
    );
    assert_eq!(
        w.pve()
            .vm(vmid)
            .expect("vm")
            .config
            .get("scsi1")
            .map(String::as_str),
        Some(person),
        "{:?}",
        w.pve().calls()
    );

    // The next converge finds another volume than the one the destroy was bound to: kept.
    assert_eq!(w.run(converge_action(&w, vmid)).await, Outcome::Done);
    assert_eq!(
        w.pve()
            .vm(vmid)
            .expect("vm")
            .config
            .get("scsi1")
            .map(String::as_str),
        Some(person)
    );
    assert!(
        history(&w).contains("destroyDisks no longer applies to local-lvm:vm-100-disk-7"),
        "{}",
        history(&w)
    );
}

/// The old name of the renames below.
const OLD: &str = "web-00";

/// A VM of spec `OLD`, as a rename from `OLD` to `web-01` finds it: made as `web-01`'s, then
/// given a marker naming `OLD` with `uid`, and no record (the test writes `OLD`'s, or none as
/// after a lost database).
async fn old_specs_vm(w: &World, uid: &str) -> u32 {
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    let vmid = w.record().vmid().expect("created");
    let mut vm = w.pve().vm(vmid).expect("the VM");
    let old = crate::ownership::Marker::signed(&w.key, "main", OLD, uid, vmid);
    vm.config.insert("description".into(), old.description());
    let config: Vec<(&str, &str)> = vm
        .config
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    w.pve().add_vm(vmid, &vm.node, &config);
    w.store.remove(&w.spec.name).expect("forget web-01");
    w.pve().clear_calls();
    vmid
}

/// `OLD`'s record: its VM `vmid` with `uid`.
fn record_old(w: &World, vmid: u32, uid: &str) {
    let mut rec = SpecRecord {
        uid: uid.into(),
        site: "lab".into(),
        ..Default::default()
    };
    let exists = VmState::Exists {
        vmid,
        node: "pve1".into(),
    };
    w.store.transition(OLD, &mut rec, exists).expect("record");
}

fn relabel_action(w: &World, vmid: u32) -> Action {
    Action::Relabel {
        spec: w.spec.name.to_string(),
        from: OLD.into(),
        site: "lab".into(),
        node: "pve1".into(),
        vmid,
    }
}

/// The marker VM `vmid` carries.
fn marker_of(w: &World, vmid: u32) -> crate::ownership::Marker {
    let vm = w.pve().vm(vmid).expect("the VM");
    crate::ownership::Marker::parse(&vm.config["description"]).expect("a marker")
}

/// The marker is written, its answer lost: the rename failed with the old record standing.
/// The next attempt finds the marker naming `web-01` with the recorded uid, verifying, and
/// completes the rename: the record moves, nothing is written twice, the same VM throughout.
#[tokio::test(start_paused = true)]
async fn a_relabel_whose_answer_was_lost_is_completed_by_the_next_attempt() {
    let w = World::new("");
    let vmid = old_specs_vm(&w, "u1").await;
    record_old(&w, vmid, "u1");

    w.pve().fault("set_config", Fault::LoseAnswer);
    let outcome = w.run(relabel_action(&w, vmid)).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    let m = marker_of(&w, vmid);
    assert_eq!(
        (m.spec.as_str(), m.uid.as_str()),
        ("web-01", "u1"),
        "written"
    );
    assert!(
        w.store.record(OLD).unwrap().is_some(),
        "the old record stands"
    );
    assert!(w.store.record("web-01").unwrap().is_none());

    w.pve().clear_calls();
    let outcome = w.run(relabel_action(&w, vmid)).await;
    assert_eq!(outcome, Outcome::Done, "{:?}", w.pve().calls());
    assert!(w.store.record(OLD).unwrap().is_none());
    w.assert_exists(vmid);
    assert_eq!(w.record().uid, "u1");
    let m = marker_of(&w, vmid);
    assert!(m.verifies(&w.key, vmid) && m.spec == "web-01" && m.uid == "u1");
    assert_eq!(w.pve().count("clone_vm"), 0);
    assert_eq!(w.pve().count("delete_vm"), 0);
}

/// After a lost database there is no record of the old spec: the VM's verifying marker is the
/// evidence, and the new record carries the marker's uid and the VM.
#[tokio::test(start_paused = true)]
async fn a_relabel_after_a_lost_database_keeps_the_markers_uid() {
    let w = World::new("");
    let vmid = old_specs_vm(&w, "u7").await;
    assert_eq!(w.run(relabel_action(&w, vmid)).await, Outcome::Done);
    w.assert_exists(vmid);
    let rec = w.record();
    assert_eq!(rec.uid, "u7", "{rec:?}");
    assert!(rec.provisioned && rec.adopted, "{rec:?}");
    let m = marker_of(&w, vmid);
    assert!(m.verifies(&w.key, vmid) && m.spec == "web-01" && m.uid == "u7");
}

/// The gate is asked again before the write: a VM whose marker carries another uid than the
/// old spec's record (another VM now, whatever the plan saw) is not re-labelled.
#[tokio::test(start_paused = true)]
async fn a_relabel_of_a_vm_with_another_uid_is_refused_before_any_write() {
    let w = World::new("");
    let vmid = old_specs_vm(&w, "u2").await;
    record_old(&w, vmid, "u1");
    let before = w.pve().vm(vmid);
    let outcome = w.run(relabel_action(&w, vmid)).await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(e.category, Category::Conflict, "{e:?}");
    assert!(e.message.contains("uid u2"), "{e:?}");
    assert_eq!(w.pve().count("set_config"), 0, "{:?}", w.pve().calls());
    assert_eq!(w.pve().vm(vmid), before);
    assert!(w.store.record(OLD).unwrap().is_some());
}

// ---- the gate: nothing destructive without its permit ----------------------------------------

/// [`World::run`] with the cycle's view of the site given (`view`), as the observation left it.
impl World {
    async fn run_seen(&self, action: Action, view: SiteView) -> Outcome {
        let ctx = self.ctx_of(view);
        let rec = self
            .store
            .specs()
            .expect("records")
            .remove(self.spec.name.as_str());
        run_action(&ctx, &action, rec, CREATE_TRIES)
            .await
            .expect("a last attempt is recorded")
    }
}

/// The spec's VM made, stopped, then its spec removed: the `Remove` the planner makes of it.
async fn made_and_removed(w: &World) -> (u32, Action) {
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    let vmid = w.record().vmid().expect("created");
    w.pve().clear_calls();
    let remove = Action::Remove {
        spec: w.spec.name.to_string(),
        site: "lab".into(),
        node: "pve1".into(),
        vmid,
        release: false,
    };
    (vmid, remove)
}

/// A site whose endpoint reaches another cluster (or whose cluster could not be checked) is
/// left unreachable by the observation: no permit can be made there, and nothing is sent, even
/// when an action for it arrives.
#[tokio::test(start_paused = true)]
async fn nothing_is_deleted_on_a_site_not_shown_to_be_its_cluster() {
    let w = World::new("    powerState: stopped\n");
    let (vmid, remove) = made_and_removed(&w).await;
    let refused = SiteView::identity_refused("lab", "site lab reaches another cluster".into());
    let outcome = w.run_seen(remove.clone(), refused).await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(e.message.contains("another cluster"), "{e:?}");
    let orphan = Action::DeleteOrphan {
        site: "lab".into(),
        node: "pve1".into(),
        vmid,
    };
    let down = SiteView::unreachable("lab", "connection refused".into());
    assert!(matches!(w.run_seen(orphan, down).await, Outcome::Failed(_)));
    assert_eq!(w.pve().calls(), Vec::<String>::new(), "nothing sent");
    w.assert_exists(vmid);
    // The same delete on the checked site goes through.
    assert_eq!(w.run(remove).await, Outcome::Done);
    assert!(w.pve().vm(vmid).is_none());
}

/// A VM cloned in the web UI carries a copy of the original's marker and tags: its marker was
/// signed for the original's VMID, so it is no orphan of this install to delete, whatever the
/// plan said. The original, once its spec is gone, is.
#[tokio::test(start_paused = true)]
async fn a_clone_carrying_a_copied_marker_is_never_deleted_as_an_orphan() {
    let w = World::new("    powerState: stopped\n");
    let (vmid, _) = made_and_removed(&w).await;
    let original = w.pve().vm(vmid).expect("the VM");
    let copied: Vec<(&str, &str)> = original
        .config
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    w.pve().add_vm(300, "pve1", &copied);
    w.store.remove(&w.spec.name).expect("the spec is gone");
    let orphan = |vmid| Action::DeleteOrphan {
        site: "lab".into(),
        node: "pve1".into(),
        vmid,
    };
    let outcome = w.run(orphan(300)).await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        e.message.contains("not ours any more") && e.message.contains("does not verify"),
        "{e:?}"
    );
    assert_eq!(w.pve().count("delete_vm"), 0, "{:?}", w.pve().calls());
    assert!(w.pve().vm(300).is_some());
    assert_eq!(w.run(orphan(vmid)).await, Outcome::Done);
    assert!(w.pve().vm(vmid).is_none() && w.pve().vm(300).is_some());
}

/// The marker typed into a VM (another spec's, or none) between the plan and the delete: the
/// identity read right before the delete refuses it, and no permit is made.
#[tokio::test(start_paused = true)]
async fn a_delete_whose_vm_changed_identity_is_refused_before_it_is_sent() {
    let w = World::new("    powerState: stopped\n");
    let (vmid, remove) = made_and_removed(&w).await;
    let theirs = crate::ownership::Marker::signed(&w.key, "main", "db-01", "u9", vmid);
    w.pve()
        .set_config_value(vmid, "description", Some(&theirs.description()));
    assert_eq!(w.run(remove).await, Outcome::Done, "forgotten, not deleted");
    assert_eq!(w.pve().count("delete_vm"), 0, "{:?}", w.pve().calls());
    assert!(w.pve().vm(vmid).is_some());
    assert!(w.store.record(&w.spec.name).unwrap().is_none());
}

/// A 503 from pveproxy: a read that tells nothing.
fn unavailable(path: &str) -> crate::pve::Error {
    crate::pve::Error::Api {
        method: "GET".into(),
        path: path.into(),
        status: 503,
        message: "Service Unavailable".into(),
        errors: Default::default(),
    }
}

/// The config a clone holds while its task runs, or after it was killed: the lock and
/// qemu-server's temporary comment, nothing else.
const CLONE_LEFTOVER: &[(&str, &str)] = &[
    ("lock", "clone"),
    ("description", " qmclone temporary file"),
];

fn stale_lock_error(outcome: Outcome) -> ActionError {
    match outcome {
        Outcome::Failed(e) if e.kind == crate::store::ErrorKind::StaleLock => e,
        other => panic!("not a stale lock: {other:?}"),
    }
}

/// A VM locked by a clone that no running task holds, at the VMID of an intent whose answer
/// was lost: within the request window the clone may just have started (its task not listed
/// yet) and is waited for; after it, only a human can tell, and the VMID stays reserved.
#[tokio::test(start_paused = true)]
async fn a_clone_lock_no_task_holds_is_waited_for_within_the_window_then_needs_a_human() {
    let w = World::new("");
    let vmid = w.create_answer_lost(false).await;
    w.pve().add_vm(vmid, "pve1", CLONE_LEFTOVER);
    w.pve().clear_calls();
    let outcome = w.run(w.resume()).await;
    let Outcome::Waiting(wait) = outcome else {
        panic!("{outcome:?}");
    };
    let reason = wait.to_string();
    assert!(reason.contains("started moments ago"), "{reason}");
    tokio::time::advance(w.site.request_window).await;
    let e = stale_lock_error(w.run(w.resume()).await);
    assert!(e.message.contains(&format!("qm unlock {vmid}")), "{e:?}");
    assert_eq!(w.intent(), (vmid, None), "the VMID stays reserved");
    assert_eq!(w.pve().count("clone_vm"), 0, "{:?}", w.pve().calls());
    assert_eq!(
        w.pve().vm(vmid).map(|vm| vm.config.len()),
        Some(2),
        "untouched"
    );
}

/// A VM of ours at the intent's VMID, locked by a backup that started right after the clone
/// ended: it is the create's VM (recorded), and the backup only holds up its converge. A
/// backup's lock is never taken for a create's, even past the request window.
#[tokio::test(start_paused = true)]
async fn a_vm_of_ours_locked_by_a_backup_is_recorded_not_taken_for_a_create() {
    let w = World::new("");
    let vmid = w.create_answer_lost(true).await;
    let backup = w.pve().start_task("pve1", "vzdump", "");
    w.pve().edit_vm(vmid, |vm| {
        vm.config.insert("lock".into(), "backup".into());
    });
    tokio::time::advance(w.site.request_window).await;
    let outcome = w.run(w.resume()).await;
    let Outcome::Waiting(wait) = outcome else {
        panic!("{outcome:?}");
    };
    let reason = wait.to_string();
    assert!(reason.contains(&backup), "{reason}");
    w.assert_exists(vmid);
    assert_eq!(w.pve().count("clone_vm"), 1, "{:?}", w.pve().calls());
}

/// The status says how long ago the request that may still arrive was sent, in seconds.
#[tokio::test(start_paused = true)]
async fn a_request_that_may_still_arrive_is_reported_with_its_age() {
    let mut w = World::new("");
    w.create_answer_lost(false).await;
    w.task_wait = Duration::ZERO;
    tokio::time::advance(Duration::from_millis(12_500)).await;
    let outcome = w.run(w.resume()).await;
    let Outcome::Waiting(wait) = outcome else {
        panic!("{outcome:?}");
    };
    let reason = wait.to_string();
    assert!(reason.contains("sent 12s ago"), "{reason}");
}

/// The request window is the site's: one millisecond before its end the request may still
/// arrive; at its end it cannot, and the create is sent again.
#[tokio::test(start_paused = true)]
async fn the_request_window_ends_exactly_at_its_length() {
    let mut w = World::new("");
    let vmid = w.create_answer_lost(false).await;
    // One look per resume: nothing is waited for within an action.
    w.task_wait = Duration::ZERO;
    w.pve().clear_calls();
    tokio::time::advance(w.site.request_window - Duration::from_millis(1)).await;
    let outcome = w.run(w.resume()).await;
    assert!(matches!(outcome, Outcome::Waiting(_)), "{outcome:?}");
    assert_eq!(w.pve().count("clone_vm"), 0);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(w.run(w.resume()).await, Outcome::Done);
    assert_eq!(w.pve().count("clone_vm"), 1, "{:?}", w.pve().calls());
    w.assert_exists(vmid);
}

/// The lost request arrives while the resume waits: the VM it makes is found and recorded, and
/// nothing is sent again. The resume waits as long as `task_wait` allows, its last pause
/// ending exactly at the deadline (pauses of 0.5 s, then 1 s).
#[tokio::test(start_paused = true)]
async fn a_late_request_is_found_while_the_resume_waits_up_to_task_wait() {
    let mut w = World::new("");
    let vmid = w.create_answer_lost(false).await;
    w.task_wait = Duration::from_millis(1500);
    w.pve().clear_calls();
    let uid = w.record().uid;
    let late = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let req = crate::pve::CloneRequest {
            newid: vmid,
            name: w.spec.guest_name().to_string(),
            description: crate::ownership::Marker::signed(&w.key, "main", "web-01", &uid, vmid)
                .description(),
            full: true,
            storage: Some("local-lvm".into()),
            target: None,
            pool: None,
        };
        w.pve()
            .clone_vm("pve1", TEMPLATE, &req)
            .await
            .expect("the late clone");
    };
    let (outcome, ()) = tokio::join!(w.run(w.resume()), late);
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(w.pve().count("clone_vm"), 1, "the late one only");
    w.assert_exists(vmid);
}

/// A clone of the template that started well before the intent (someone else's, to another
/// VMID) cannot be making the intent's VM: only a clone started after the intent (less a
/// minute for clock skew) is waited for.
#[tokio::test(start_paused = true)]
async fn a_clone_of_the_template_older_than_the_intent_is_not_taken_for_ours() {
    let w = World::new("");
    let theirs = w.pve().start_task("pve1", "qmclone", &TEMPLATE.to_string());
    tokio::time::advance(Duration::from_secs(600)).await;
    let vmid = w.create_answer_lost(false).await;
    w.pve().add_vm(vmid, "pve1", CLONE_LEFTOVER);
    tokio::time::advance(w.site.request_window).await;
    stale_lock_error(w.run(w.resume()).await);
    assert_eq!(w.intent(), (vmid, None), "not waiting for {theirs}");
}

/// A failed poll tells nothing, even when the task has in fact failed: the intent and its
/// UPID stay, and the next cycle reads how the task ended.
#[tokio::test(start_paused = true)]
async fn a_failed_poll_decides_nothing_even_after_the_task_failed() {
    let w = World::new("");
    let (vmid, upid) = create_left_running(&w).await;
    w.pve().end_task(&upid, "clone failed: out of space");
    w.pve()
        .fault("wait_task", Fault::Refuse(unavailable("/nodes/pve1/tasks")));
    assert!(matches!(w.run(w.resume()).await, Outcome::Failed(_)));
    assert_eq!(w.intent(), (vmid, Some(upid)));
    assert_eq!(w.store.allocations("lab").expect("allocations").len(), 1);
}

/// A VM this action's clone just made is stopped with nothing pending (PVE made it so): its
/// power state and pending values are not read.
#[tokio::test(start_paused = true)]
async fn a_new_vm_is_converged_without_reading_what_pve_just_made() {
    let w = World::new("");
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    assert_eq!(w.pve().count("vm_pending"), 0, "{:?}", w.pve().calls());
    assert_eq!(w.pve().count("vm_running"), 0, "{:?}", w.pve().calls());
    assert_eq!(w.pve().count("start_vm"), 1);
}

/// A resumed create's VM may have been started (by a person, HA) since its task ended: its
/// power state is read, and a running VM is not started again.
#[tokio::test(start_paused = true)]
async fn a_resumed_create_reads_the_power_state_the_vm_has_now() {
    let w = World::new("");
    let (vmid, upid) = create_left_running(&w).await;
    w.pve().end_task(&upid, "OK");
    w.pve().edit_vm(vmid, |vm| vm.running = true);
    assert_eq!(w.run(w.resume()).await, Outcome::Done);
    assert_eq!(w.pve().count("vm_running"), 1, "{:?}", w.pve().calls());
    assert_eq!(w.pve().count("start_vm"), 0, "{:?}", w.pve().calls());
    w.assert_exists(vmid);
}

/// A clone to another node than the template's names that node as its target (on shared
/// storage, as PVE requires), and the VM is recorded there.
#[tokio::test(start_paused = true)]
async fn a_clone_to_another_node_names_its_target() {
    let mut w = World::new("    storage: ceph\n");
    w.spec.node = "pve2".into();
    w.pve().add_shared_storage("ceph");
    w.pve().edit_vm(TEMPLATE, |vm| {
        vm.config
            .insert("scsi0".into(), "ceph:base-9000-disk-0,size=32G".into());
    });
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    let vmid = w.record().vmid().expect("created");
    assert_eq!(w.pve().vm(vmid).expect("the clone").node, "pve2");
    assert_eq!(w.record().vm.node(), Some("pve2"));
    assert!(
        w.pve()
            .calls()
            .contains(&format!("clone_vm pve1 {TEMPLATE} newid={vmid}")),
        "{:?}",
        w.pve().calls()
    );
}

/// A VM made from an installer ISO boots from an empty disk with the ISO in a CD-ROM drive
/// after it (never `import-from` the ISO), and gets no serial console a cloud image needs.
#[tokio::test(start_paused = true)]
async fn an_iso_is_attached_as_a_cdrom_beside_an_empty_disk() {
    let mut w = World::new("");
    let iso = "local:iso/debian-12-netinst.iso";
    w.pve().add_volume("local", iso, "iso");
    w.spec.vm_mut().unwrap().image = crate::spec::Image::Volume {
        storage: "local".into(),
        volume: iso.into(),
        kind: crate::spec::VolumeKind::Iso,
    };
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    assert_eq!(w.pve().count("create_vm"), 1, "{:?}", w.pve().calls());
    let vmid = w.record().vmid().expect("created");
    let config = w.pve().vm(vmid).expect("the VM").config;
    assert_eq!(
        config.get("ide2").map(String::as_str),
        Some("local:iso/debian-12-netinst.iso,media=cdrom"),
        "{config:?}"
    );
    assert_eq!(
        config.get("boot").map(String::as_str),
        Some("order=scsi0;ide2")
    );
    let scsi0 = config.get("scsi0").expect("a boot disk");
    assert!(!scsi0.contains("import-from"), "{scsi0}");
    assert!(!config.contains_key("serial0"), "{config:?}");
    // proxsync's defaults for what the spec leaves out, and the spec's NIC.
    for (key, value) in [
        ("scsihw", "virtio-scsi-single"),
        ("ostype", "l26"),
        ("agent", "1"),
    ] {
        assert_eq!(
            config.get(key).map(String::as_str),
            Some(value),
            "{config:?}"
        );
    }
    assert!(
        config
            .get("net0")
            .is_some_and(|n| n.contains("bridge=vmbr0")),
        "{config:?}"
    );
}

/// Without the `next-id` range (a token without Sys.Audit on `/`), the VMID comes from
/// `/cluster/nextid`, past the ids this install's other intents reserve and those PVE calls
/// taken, in one create request.
#[tokio::test(start_paused = true)]
async fn without_the_range_nextid_is_asked_past_our_reservations() {
    let w = World::new("");
    // Another spec's create in flight holds 100 (not on PVE yet); someone's VM holds 101.
    let mut other = SpecRecord {
        site: "lab".into(),
        ..Default::default()
    };
    let intent = VmState::Creating {
        vmid: 100,
        node: "pve1".into(),
        task: None,
        started_ms: START_MS,
        clone_of: None,
    };
    w.store
        .transition("db-01", &mut other, intent)
        .expect("intent");
    w.pve().add_vm(101, "pve1", &[("name", "theirs")]);
    w.pve().fault(
        "cluster_options",
        Fault::Refuse(crate::pve::Error::Api {
            method: "GET".into(),
            path: "/cluster/options".into(),
            status: 403,
            message: "Permission check failed (/, Sys.Audit)".into(),
            errors: Default::default(),
        }),
    );
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    w.assert_exists(102);
    assert_eq!(w.pve().count("next_id"), 1, "{:?}", w.pve().calls());
    assert_eq!(w.pve().count("clone_vm"), 1, "{:?}", w.pve().calls());
}

/// With the range, the VMID is the lowest the listing and our intents leave free, in one
/// create request: a VM listed at an id (or an intent holding it) is never asked to be made
/// there.
#[tokio::test(start_paused = true)]
async fn the_lowest_id_the_listing_leaves_free_is_taken_in_one_request() {
    let w = World::new("");
    w.pve().add_vm(100, "pve1", &[("name", "theirs")]);
    let mut other = SpecRecord {
        site: "lab".into(),
        ..Default::default()
    };
    let intent = VmState::Creating {
        vmid: 101,
        node: "pve1".into(),
        task: None,
        started_ms: START_MS,
        clone_of: None,
    };
    w.store
        .transition("db-01", &mut other, intent)
        .expect("intent");
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    w.assert_exists(102);
    assert_eq!(w.pve().count("clone_vm"), 1, "{:?}", w.pve().calls());
    assert_eq!(w.pve().count("next_id"), 0);
}

/// A VM carrying this spec's marker that no record knows (the database lost) is adopted:
/// recorded with its marker's uid, `Provisioned` as Adopted, and the spec's deletion policy
/// remembered for when the spec is removed, as a create remembers it.
#[tokio::test(start_paused = true)]
async fn a_vm_no_record_knows_is_adopted_with_the_specs_deletion_policy() {
    for (extra, orphan) in [("", false), ("  deletionPolicy: Orphan\n", true)] {
        let w = World::new(extra);
        assert_eq!(w.run(w.create()).await, Outcome::Done);
        let made = w.record();
        assert_eq!(made.orphan_on_delete, orphan, "{extra}");
        assert!(made.provisioned && !made.adopted, "{made:?}");
        let vmid = made.vmid().expect("created");
        w.store.remove(&w.spec.name).expect("the database lost");
        assert_eq!(w.run(w.adopt(vmid)).await, Outcome::Done);
        let rec = w.record();
        assert!(rec.provisioned && rec.adopted, "{rec:?}");
        assert_eq!(rec.uid, made.uid);
        assert_eq!(rec.orphan_on_delete, orphan, "{extra}");
        w.assert_exists(vmid);
    }
}

/// A record that saw its VM made keeps `Provisioned` as Created when it adopts the VM again
/// (lost from one cycle's listing, found by its marker the next).
#[tokio::test(start_paused = true)]
async fn a_record_that_made_its_vm_adopts_it_again_as_created() {
    let w = World::new("");
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    let mut rec = w.record();
    let vmid = rec.vmid().expect("created");
    w.store
        .transition(&w.spec.name, &mut rec, VmState::Absent)
        .expect("back to Absent");
    assert_eq!(w.run(w.adopt(vmid)).await, Outcome::Done);
    let rec = w.record();
    assert!(rec.provisioned && !rec.adopted, "{rec:?}");
    w.assert_exists(vmid);
}

/// PVE's refusal of a create at a taken id (the listing leaves out guests the token may not
/// audit): qemu-server's `unable to create VM N - VM N already exists on node 'X'`.
fn already_exists(vmid: u32) -> crate::pve::Error {
    crate::pve::Error::Api {
        method: "POST".into(),
        path: format!("/nodes/pve1/qemu/{TEMPLATE}/clone"),
        status: 500,
        message: format!("unable to create VM {vmid} - VM {vmid} already exists on node 'pve2'"),
        errors: Default::default(),
    }
}

/// A VMID someone else holds is never taken: the next id is tried, five ids at most in one
/// action, each intent released with its refusal.
#[tokio::test(start_paused = true)]
async fn a_taken_vmid_is_skipped_five_times_at_most() {
    let w = World::new("");
    for vmid in 100..105 {
        w.pve()
            .fault("clone_vm", Fault::Refuse(already_exists(vmid)));
    }
    let outcome = w.run(w.create()).await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(e.message.contains("already exists"), "{e:?}");
    let tried: Vec<String> = w
        .pve()
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("clone_vm"))
        .collect();
    let expected: Vec<String> = (100..105)
        .map(|id| format!("clone_vm pve1 {TEMPLATE} newid={id}"))
        .collect();
    assert_eq!(tried, expected);
    assert_eq!(w.record().vm, VmState::Absent);
    assert!(w.store.allocations("lab").expect("allocations").is_empty());
}

/// A create PVE refused before doing anything (a parameter it rejects) is not sent again with
/// another id, and its intent is released: nothing was made.
#[tokio::test(start_paused = true)]
async fn a_refused_create_is_not_retried_and_releases_its_intent() {
    let w = World::new("");
    w.pve().fault(
        "clone_vm",
        Fault::Refuse(crate::pve::Error::Api {
            method: "POST".into(),
            path: format!("/nodes/pve1/qemu/{TEMPLATE}/clone"),
            status: 400,
            message: "Parameter verification failed.".into(),
            errors: [("storage".to_string(), "no such storage 'x'".to_string())].into(),
        }),
    );
    let outcome = w.run(w.create()).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    assert_eq!(w.pve().count("clone_vm"), 1, "{:?}", w.pve().calls());
    assert_eq!(w.record().vm, VmState::Absent);
    assert!(w.store.allocations("lab").expect("allocations").is_empty());
}

/// A VM that is gone when its spec's removal comes (deleted by hand) leaves nothing to delete:
/// the spec is forgotten. A fresh read that fails tells nothing: the record stays.
#[tokio::test(start_paused = true)]
async fn a_removal_forgets_only_a_vm_that_is_gone() {
    let w = World::new("    powerState: stopped\n");
    let vmid = w.made().await;
    w.pve().fault(
        "vm_config",
        Fault::Refuse(unavailable("/nodes/pve1/qemu/100/config")),
    );
    let outcome = w.run(w.remove(vmid, false)).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    w.assert_exists(vmid);
    assert_eq!(w.pve().count("delete_vm"), 0);
    let gone = w.run_changed(w.remove(vmid, false), |pve| pve.remove_vm(vmid));
    assert_eq!(gone.await, Outcome::Done);
    assert!(w.store.specs().expect("records").is_empty());
    assert_eq!(w.pve().count("delete_vm"), 0);
}

/// `deletionPolicy: Orphan`: the VM stays as it is, without this install's tag and marker; the
/// tags others put on it stay, and a VM left with no tag has none.
#[tokio::test(start_paused = true)]
async fn a_release_drops_only_this_installs_tag_and_marker() {
    for hand_tag in [true, false] {
        let w = World::new("  deletionPolicy: Orphan\n");
        let vmid = w.made().await;
        if hand_tag {
            w.pve().edit_vm(vmid, |vm| {
                vm.config
                    .insert("tags".into(), "keep-me;proxsync.main".into());
            });
        }
        assert!(w.tags(vmid).contains(&"proxsync.main".to_string()));
        assert_eq!(w.run(w.remove(vmid, true)).await, Outcome::Done);
        let vm = w.pve().vm(vmid).expect("the VM stays");
        if hand_tag {
            assert_eq!(w.tags(vmid), ["keep-me"]);
        } else {
            assert!(!vm.config.contains_key("tags"), "{:?}", vm.config);
        }
        assert_eq!(w.marker_of(vmid), None);
        assert!(
            vm.config["description"].ends_with("Released by proxsync."),
            "{:?}",
            vm.config
        );
        assert!(w.store.specs().expect("records").is_empty());
        assert_eq!(w.pve().count("delete_vm"), 0);
    }
}

/// An orphan of this install: its tag and a marker of this install that verifies.
fn add_orphan(w: &World, vmid: u32, tags: &str, signed: bool) {
    let marker = crate::ownership::Marker::signed(&w.key, "main", "old", "00aa00aa00aa00aa", vmid);
    let marker = if signed {
        marker
    } else {
        crate::ownership::Marker {
            mac: None,
            ..marker
        }
    };
    w.pve().add_vm(
        vmid,
        "pve1",
        &[
            ("name", "old"),
            ("tags", tags),
            ("description", &marker.description()),
        ],
    );
}

fn delete_orphan(vmid: u32) -> Action {
    Action::DeleteOrphan {
        site: "lab".into(),
        node: "pve1".into(),
        vmid,
    }
}

/// A stopped orphan past its grace period is deleted once it is verifiably this install's
/// (tag and verifying marker, read again); its delete task is waited for like any other.
#[tokio::test(start_paused = true)]
async fn an_orphan_is_deleted_when_tag_and_marker_say_it_is_ours() {
    let w = World::new("");
    add_orphan(&w, 200, "proxsync.main", true);
    w.pve().set_task_end(TaskEnd::Held);
    let outcome = w.run(delete_orphan(200)).await;
    let Outcome::StillRunning { upid } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(w.pve().vm(200).is_some(), "its task still runs");
    w.pve().end_task(&upid, "OK");
    assert!(w.pve().vm(200).is_none());
    add_orphan(&w, 201, "proxsync.main", true);
    w.pve().set_task_end(TaskEnd::AtOnce);
    assert_eq!(w.run(delete_orphan(201)).await, Outcome::Done);
    assert!(w.pve().vm(201).is_none());
}

/// An orphan is not deleted on half the evidence: the tag without a marker that verifies (a
/// typed one), or the marker without the tag (removed by a person).
#[tokio::test(start_paused = true)]
async fn an_orphan_missing_its_tag_or_its_signed_marker_is_not_deleted() {
    let w = World::new("");
    add_orphan(&w, 200, "proxsync.main", false);
    add_orphan(&w, 201, "web", true);
    for vmid in [200, 201] {
        let outcome = w.run(delete_orphan(vmid)).await;
        let Outcome::Failed(e) = outcome else {
            panic!("{vmid}: {outcome:?}");
        };
        assert_eq!(e.category, crate::category::Category::Conflict, "{e:?}");
        assert!(w.pve().vm(vmid).is_some());
    }
    assert_eq!(w.pve().count("delete_vm"), 0);
}

/// The old owner's side of a hand-over: only this install's tag goes (tags others added
/// stay), the marker stays for the next owner to verify, and the spec is forgotten.
#[tokio::test(start_paused = true)]
async fn a_hand_over_drops_only_this_installs_tag_and_keeps_the_marker() {
    let w = World::new("");
    let vmid = w.made().await;
    w.pve().edit_vm(vmid, |vm| {
        vm.config
            .insert("tags".into(), "keep-me;proxsync.main".into());
    });
    let before = w.marker_of(vmid).expect("a marker");
    assert_eq!(w.run(w.hand_over(vmid)).await, Outcome::Done);
    assert_eq!(w.tags(vmid), ["keep-me"]);
    assert_eq!(w.marker_of(vmid), Some(before));
    assert!(w.store.specs().expect("records").is_empty());
    assert!(w.pve().vm(vmid).is_some());
}

/// A marker from before signing (vouched for by the record's uid) is handed over signed for
/// this VMID, so the next owner can verify it.
#[tokio::test(start_paused = true)]
async fn a_hand_over_signs_an_unsigned_marker_for_the_next_owner() {
    let w = World::new("");
    let vmid = w.made().await;
    let uid = w.record().uid;
    let unsigned = crate::ownership::Marker {
        mac: None,
        ..w.marker_of(vmid).expect("a marker")
    };
    w.pve().edit_vm(vmid, |vm| {
        vm.config
            .insert("description".into(), unsigned.description());
    });
    assert_eq!(w.run(w.hand_over(vmid)).await, Outcome::Done);
    let m = w.marker_of(vmid).expect("a marker");
    assert!(m.verifies(&w.key, vmid), "{m:?}");
    assert_eq!(m.uid, uid);
}

/// A hand-over finds its VM gone (deleted by hand): the spec is forgotten. A fresh read that
/// fails tells nothing: the record stays.
#[tokio::test(start_paused = true)]
async fn a_hand_over_forgets_only_a_vm_that_is_gone() {
    let w = World::new("");
    let vmid = w.made().await;
    w.pve().fault(
        "vm_config",
        Fault::Refuse(unavailable("/nodes/pve1/qemu/100/config")),
    );
    let outcome = w.run(w.hand_over(vmid)).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    w.assert_exists(vmid);
    let gone = w.run_changed(w.hand_over(vmid), |pve| pve.remove_vm(vmid));
    assert_eq!(gone.await, Outcome::Done);
    assert!(w.store.specs().expect("records").is_empty());
}

/// A spec leaves the selector while its clone's answer was lost and the clone made the VM:
/// the VM is found, and handed over (its tags written, the record forgotten), not forgotten
/// with it.
#[tokio::test(start_paused = true)]
async fn a_create_in_flight_of_a_spec_leaving_is_handed_over_once_found() {
    let w = World::new("");
    let vmid = w.create_answer_lost(true).await;
    w.pve().clear_calls();
    assert_eq!(w.run(w.hand_over(vmid)).await, Outcome::Done);
    assert_eq!(w.pve().count("set_config"), 1, "{:?}", w.pve().calls());
    assert!(w.marker_of(vmid).is_some_and(|m| m.verifies(&w.key, vmid)));
    assert!(w.store.specs().expect("records").is_empty());
}

/// The new owner's side: a released VM whose marker names this spec for another install and
/// verifies with the shared key is taken over: its marker re-signed for this install (same
/// uid) and this install's tag added.
#[tokio::test(start_paused = true)]
async fn a_released_vm_of_another_install_is_taken_over() {
    let w = World::new("");
    let theirs =
        crate::ownership::Marker::signed(&w.key, "other", "web-01", "00bb00bb00bb00bb", 300);
    w.pve().add_vm(
        300,
        "pve1",
        &[("name", "web-01"), ("description", &theirs.description())],
    );
    let outcome = w.run(w.adopt(300)).await;
    assert!(
        matches!(outcome, Outcome::Done | Outcome::StillRunning { .. }),
        "{outcome:?}"
    );
    let m = w.marker_of(300).expect("a marker");
    assert_eq!(
        (m.install.as_str(), m.uid.as_str()),
        ("main", "00bb00bb00bb00bb")
    );
    assert!(m.verifies(&w.key, 300));
    assert!(w.tags(300).contains(&"proxsync.main".to_string()));
    assert_eq!(w.record().uid, "00bb00bb00bb00bb");
}

/// The take-over reads the VM again: a marker changed since the cycle's read (here typed over
/// by hand, its MAC gone) is refused, and the VM is not touched.
#[tokio::test(start_paused = true)]
async fn a_take_over_refuses_a_marker_that_no_longer_verifies() {
    let w = World::new("");
    let theirs =
        crate::ownership::Marker::signed(&w.key, "other", "web-01", "00bb00bb00bb00bb", 300);
    w.pve().add_vm(
        300,
        "pve1",
        &[("name", "web-01"), ("description", &theirs.description())],
    );
    let typed = crate::ownership::Marker {
        mac: None,
        ..theirs
    };
    let outcome = w
        .run_changed(w.adopt(300), |pve| {
            pve.edit_vm(300, |vm| {
                vm.config.insert("description".into(), typed.description());
            });
        })
        .await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(e.category, crate::category::Category::Conflict, "{e:?}");
    assert_eq!(w.pve().count("set_config"), 0, "{:?}", w.pve().calls());
    assert_eq!(w.marker_of(300).map(|m| m.install), Some("other".into()));
}

/// The spec of [`World::new`] made from an installer ISO (a `qmcreate`, locking the new VM
/// with `create`), the ISO on `local`.
fn iso_world() -> World {
    let mut w = World::new("");
    let iso = "local:iso/debian-12-netinst.iso";
    w.pve().add_volume("local", iso, "iso");
    w.spec.vm_mut().unwrap().image = crate::spec::Image::Volume {
        storage: "local".into(),
        volume: iso.into(),
        kind: crate::spec::VolumeKind::Iso,
    };
    w
}

/// A create whose answer was lost while its `qmcreate` runs: the VM locked `create` by its own
/// task is waited for by that task, never judged foreign and made again.
#[tokio::test(start_paused = true)]
async fn a_vm_locked_create_by_its_running_task_is_waited_for() {
    let w = iso_world();
    w.pve().set_task_end(TaskEnd::Held);
    w.pve().fault("create_vm", Fault::LoseAnswer);
    assert!(matches!(w.run(w.create()).await, Outcome::Failed(_)));
    let (vmid, upid) = w.intent();
    assert_eq!(upid, None);
    let running = w.pve().running_tasks();
    assert!(
        running[0].contains(&format!(":qmcreate:{vmid}:")),
        "{running:?}"
    );
    tokio::time::advance(w.site.request_window).await;
    let outcome = w.run(w.resume()).await;
    assert_eq!(
        outcome,
        Outcome::StillRunning {
            upid: running[0].clone()
        }
    );
    assert_eq!(w.intent(), (vmid, Some(running[0].clone())));
    assert_eq!(w.pve().count("create_vm"), 1, "{:?}", w.pve().calls());
}

/// A read of the intent's VMID that fails tells nothing: the intent stays and nothing is
/// created, even past the request window.
#[tokio::test(start_paused = true)]
async fn a_failed_read_of_the_intents_vmid_creates_nothing() {
    let w = World::new("");
    let vmid = w.create_answer_lost(false).await;
    tokio::time::advance(w.site.request_window).await;
    w.pve().fault(
        "vm_config",
        Fault::Refuse(unavailable(&format!("/nodes/pve1/qemu/{vmid}/config"))),
    );
    let outcome = w.run(w.resume()).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    assert_eq!(w.intent(), (vmid, None));
    assert_eq!(w.pve().count("clone_vm"), 1, "the first only");
}

/// A confirmed rename: the VM of spec `old` (its marker verified) is re-labelled for the new
/// spec, keeping its uid, and the record moves to the new name; a VM that does not carry the
/// old spec's marker is not touched.
#[tokio::test(start_paused = true)]
async fn a_rename_relabels_only_the_old_specs_vm() {
    let w = World::new("");
    let vmid = w.made().await;
    let rec = w.record();
    w.store
        .rename(&w.spec.name, "old", &rec)
        .expect("the old name");
    let old = crate::ownership::Marker::signed(&w.key, "main", "old", &rec.uid, vmid);
    let relabel = Action::Relabel {
        spec: w.spec.name.to_string(),
        from: "old".into(),
        site: "lab".into(),
        node: "pve1".into(),
        vmid,
    };
    // Another spec's marker: not the old spec's VM. (The new spec's own marker is a re-label
    // already done, whose answer was lost: see `tests/it/cycle/renames.rs`.)
    let other = crate::ownership::Marker::signed(&w.key, "main", "db-01", &rec.uid, vmid);
    w.pve().edit_vm(vmid, |vm| {
        vm.config.insert("description".into(), other.description());
    });
    w.pve().clear_calls();
    let outcome = w.run(relabel.clone()).await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(e.category, crate::category::Category::Conflict, "{e:?}");
    assert_eq!(w.pve().count("set_config"), 0, "{:?}", w.pve().calls());
    w.pve().edit_vm(vmid, |vm| {
        vm.config.insert("description".into(), old.description());
    });
    assert_eq!(w.run(relabel).await, Outcome::Done);
    let m = w.marker_of(vmid).expect("a marker");
    assert_eq!(
        (m.spec.as_str(), m.uid.as_str()),
        ("web-01", rec.uid.as_str())
    );
    assert!(m.verifies(&w.key, vmid));
    let names: Vec<String> = w.store.specs().expect("records").into_keys().collect();
    assert_eq!(names, ["web-01"]);
}

/// An old spec's record that holds no VM (its VM was never recorded, or the record was
/// rebuilt empty): the VM whose marker names the old spec is taken as an adoption would, its
/// record `Exists` under the new name with the spec's deletion policy, and the empty record
/// goes.
#[tokio::test(start_paused = true)]
async fn a_rename_from_an_empty_record_takes_the_vm_as_an_adoption() {
    let w = World::new("");
    let vmid = w.made().await;
    let rec = w.record();
    let empty = SpecRecord {
        uid: rec.uid.clone(),
        orphan_on_delete: true,
        ..SpecRecord::default()
    };
    w.store.remove(&w.spec.name).expect("dropped");
    w.store
        .put("old", &empty)
        .expect("the old name's empty record");
    let old = crate::ownership::Marker::signed(&w.key, "main", "old", &rec.uid, vmid);
    w.pve().edit_vm(vmid, |vm| {
        vm.config.insert("description".into(), old.description());
    });
    let relabel = Action::Relabel {
        spec: w.spec.name.to_string(),
        from: "old".into(),
        site: "lab".into(),
        node: "pve1".into(),
        vmid,
    };
    assert_eq!(w.run(relabel).await, Outcome::Done);
    let now = w.record();
    assert_eq!(now.vmid(), Some(vmid), "{now:?}");
    assert!(now.provisioned && now.adopted, "{now:?}");
    assert!(
        !now.orphan_on_delete,
        "the spec's deletionPolicy (Delete), not the old record's"
    );
    let names: Vec<String> = w.store.specs().expect("records").into_keys().collect();
    assert_eq!(names, ["web-01"]);
}

/// A removed spec that managed `protection`: the flag is cleared in an update of its own, then
/// the VM is deleted (PVE refuses to delete a protected VM).
#[tokio::test(start_paused = true)]
async fn a_removed_spec_clears_the_protection_it_set_then_deletes() {
    let w = World::new("    protection: true\n");
    let (vmid, remove) = made_and_removed(&w).await;
    assert_eq!(
        w.pve()
            .vm(vmid)
            .expect("vm")
            .config
            .get("protection")
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(w.run(remove).await, Outcome::Done);
    assert!(w.pve().vm(vmid).is_none(), "{:?}", w.pve().calls());
}

/// A protection flag the removed spec did not set stops the delete before the VM is powered
/// off: it keeps running, and the error names the flag.
#[tokio::test(start_paused = true)]
async fn a_protection_set_by_hand_stops_the_delete_before_the_shutdown() {
    let w = World::new("");
    let (vmid, remove) = made_and_removed(&w).await;
    w.pve().edit_vm(vmid, |vm| {
        vm.config.insert("protection".into(), "1".into());
    });
    let outcome = w.run(remove).await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(e.message.contains("protection"), "{e:?}");
    let vm = w.pve().vm(vmid).expect("kept");
    assert!(vm.running, "not powered off: {:?}", w.pve().calls());
    assert_eq!(w.pve().count("delete_vm"), 0, "{:?}", w.pve().calls());
}

/// PVE's words when a clone finds its node's storage too busy (qemu-server `clone_vm` dies with
/// `clone failed: $err`, pve-common `lock_file_full`'s `can't lock file '...' - got timeout`).
const STORAGE_LOCK_TIMEOUT: &str =
    "clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout";

/// Someone else's clone of the template, still running on pve1 (its task names the template,
/// as every clone's does).
async fn another_clone_running(w: &World) -> String {
    w.pve().set_task_end(TaskEnd::Held);
    let req = crate::pve::CloneRequest {
        newid: 500,
        name: "other".into(),
        description: String::new(),
        full: true,
        storage: None,
        target: None,
        pool: None,
    };
    let upid = w
        .pve()
        .clone_vm("pve1", TEMPLATE, &req)
        .await
        .expect("a clone");
    w.pve().set_task_end(TaskEnd::AtOnce);
    w.pve().clear_calls();
    upid.to_string()
}

/// A clone that died on the storage's lock timeout left nothing, while other clones of the
/// template still run: its own task's end settles the intent (the others make other VMIDs),
/// so the intent is released and the create is tried again in the same cycle: one VM, the
/// failure in the history, no backoff.
#[tokio::test(start_paused = true)]
async fn a_clone_that_died_on_a_lock_timeout_is_tried_again_in_the_same_cycle() {
    let w = World::new("");
    let other = another_clone_running(&w).await;
    w.pve().next_task_ends("qmclone", STORAGE_LOCK_TIMEOUT);
    let results = w.execute(vec![w.create()]).await;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].outcome, Outcome::Done, "{results:?}");
    assert_eq!(w.pve().count("clone_vm"), 2, "{:?}", w.pve().calls());
    let rec = w.record();
    let VmState::Exists { vmid, .. } = rec.vm else {
        panic!("{rec:?}");
    };
    assert_eq!(vmid, 101, "the next free VMID: 100 was the failed clone's");
    assert!(w.pve().vm(100).is_none(), "the failed clone left nothing");
    assert_eq!((rec.attempts, rec.next_attempt_ms), (0, None), "{rec:?}");
    assert!(rec.last_error.is_none(), "{rec:?}");
    let history = history(&w);
    assert!(
        history.contains("create: trying again after LockError: task ")
            && history.contains("got timeout"),
        "{history}"
    );
    assert!(w.store.allocations("lab").expect("allocations").len() <= 1);
    // The other clone was never touched.
    assert!(w.pve().running_tasks().contains(&other));
}

/// The same failure of a clone found after a restart (its UPID recorded, perhaps found as the
/// template's one running clone, not answered to this action): the other clones of the
/// template may still be making the VM, so the intent is kept, as before.
#[tokio::test(start_paused = true)]
async fn a_resumed_clone_that_died_keeps_its_intent_while_other_clones_run() {
    let w = World::new("");
    let (vmid, upid) = create_left_running(&w).await;
    another_clone_running(&w).await;
    w.pve().end_task(&upid, STORAGE_LOCK_TIMEOUT);
    let results = w.execute(vec![w.resume()]).await;
    let Outcome::Failed(e) = &results[0].outcome else {
        panic!("{results:?}");
    };
    assert_eq!(e.category, Category::LockError);
    assert_eq!(w.pve().count("clone_vm"), 0, "{:?}", w.pve().calls());
    assert_eq!(
        w.intent(),
        (vmid, Some(upid)),
        "the intent and its UPID stay"
    );
}

/// A lock timeout every time: tried `CREATE_TRIES` times in the cycle, then recorded with a
/// backoff, retried later and never Stalled (a busy node needs no human).
#[tokio::test(start_paused = true)]
async fn a_create_is_tried_a_few_times_per_cycle_then_backs_off_without_stalling() {
    let w = World::new("");
    for _ in 0..CREATE_TRIES + 1 {
        w.pve().next_task_ends("qmclone", STORAGE_LOCK_TIMEOUT);
    }
    let results = w.execute(vec![w.create()]).await;
    let Outcome::Failed(e) = &results[0].outcome else {
        panic!("{results:?}");
    };
    assert_eq!(e.category, Category::LockError);
    assert!(!e.needs_human(), "retried, never Stalled: {e:?}");
    assert_eq!(
        w.pve().count("clone_vm"),
        CREATE_TRIES as usize,
        "{:?}",
        w.pve().calls()
    );
    let rec = w.record();
    assert_eq!(rec.vm, VmState::Absent);
    assert_eq!(rec.attempts, 1, "one failed action, however many tries");
    assert!(rec.next_attempt_ms.is_some(), "{rec:?}");
    assert!(w.store.allocations("lab").expect("allocations").is_empty());
}

/// Only a lock timeout is tried again at once: a clone that failed for another reason waits
/// for its backoff.
#[tokio::test(start_paused = true)]
async fn a_clone_that_failed_otherwise_is_not_tried_again_in_the_cycle() {
    let w = World::new("");
    w.pve().next_task_ends(
        "qmclone",
        "clone failed: lvcreate 'pve/vm-100-disk-0' error: out of space",
    );
    let results = w.execute(vec![w.create()]).await;
    assert!(
        matches!(results[0].outcome, Outcome::Failed(_)),
        "{results:?}"
    );
    assert_eq!(w.pve().count("clone_vm"), 1, "{:?}", w.pve().calls());
    assert_eq!(w.record().attempts, 1);
}

/// `execute` runs at most the node's limit as the client says it now, not the configured
/// `max_parallel_per_node` (2 here).
#[tokio::test(start_paused = true)]
async fn execute_keeps_to_the_limit_the_client_gives_for_the_node() {
    let w = World::new("");
    w.pve().set_parallel_limit(Some(1));
    w.pve().set_task_end(TaskEnd::Held);
    let specs = ["web-01", "web-02", "web-03"];
    let mut ctx = w.ctx().await;
    ctx.specs = specs
        .iter()
        .map(|n| {
            let mut spec = w.spec.clone();
            spec.name = n.to_string().into();
            spec.vm_mut().unwrap().vm_name = (*n).into();
            (n.to_string(), Arc::new(spec))
        })
        .collect();
    let actions: Vec<Action> = specs
        .iter()
        .map(|n| Action::Create {
            spec: n.to_string(),
            site: "lab".into(),
            node: "pve1".into(),
        })
        .collect();
    let ctx = Arc::new(ctx);
    let run = tokio::spawn({
        let ctx = ctx.clone();
        async move { execute(ctx, actions, &BTreeMap::new()).await }
    });
    // End each task as it comes; never more than one running.
    let mut most = 0;
    while !run.is_finished() {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let running = w.pve().running_tasks();
        most = most.max(running.len());
        for upid in running {
            w.pve().end_task(&upid, "OK");
        }
    }
    let results = run.await.expect("joined");
    assert!(
        results.iter().all(|r| r.outcome == Outcome::Done),
        "{results:?}"
    );
    assert_eq!(most, 1, "one action at a time on pve1");
    assert_eq!(w.pve().count("clone_vm"), 3);
}

// ---- adoption by consent (`proxsync.io/adopt`) ----------------------------------------------

const CONSENT_UUID: &str = "3f2504e0-4f89-11d3-9a0c-0305e82c3301";

/// A world whose spec consents to take over VM 300, a bare VM (made by hand) named as the spec
/// says, with the uuid the consent records.
fn consenting() -> World {
    let mut w = World::new("");
    w.spec.vm_mut().unwrap().image = crate::spec::Image::Existing;
    w.spec.adopt = Some(Box::new(crate::spec::AdoptConsent {
        vmid: 300,
        proof: crate::guest::GuestId::Uuid(CONSENT_UUID.into()),
    }));
    let name = w.spec.guest_name().to_string();
    w.pve().add_vm(
        300,
        "pve1",
        &[
            ("name", &name),
            ("smbios1", "uuid=3F2504E0-4F89-11D3-9A0C-0305E82C3301"),
            ("scsi0", "local-lvm:vm-300-disk-0,size=32G"),
            ("boot", "order=scsi0"),
            ("description", "made by hand"),
            ("tags", "web"),
        ],
    );
    w
}

fn adopt_by_consent(w: &World) -> Action {
    Action::AdoptByConsent {
        spec: w.spec.name.to_string(),
        site: "lab".into(),
        node: "pve1".into(),
        vmid: 300,
    }
}

/// The consented VM gets this install's signed marker (the description above it kept) and tag
/// in one write, and the record maps the spec to it, adopted.
#[tokio::test(start_paused = true)]
async fn a_consented_bare_vm_is_signed_tagged_and_recorded() {
    let w = consenting();
    assert_eq!(w.run(adopt_by_consent(&w)).await, Outcome::Done);
    let m = w.marker_of(300).expect("a marker");
    assert_eq!((m.install.as_str(), m.spec.as_str()), ("main", "web-01"));
    assert!(m.verifies(&w.key, 300));
    let description = w.pve().vm(300).unwrap().config["description"].clone();
    assert!(description.starts_with("made by hand\n"), "{description}");
    assert_eq!(w.tags(300), ["proxsync.main", "web"]);
    let rec = w.record();
    assert_eq!(rec.vmid(), Some(300));
    assert!(rec.adopted && rec.provisioned, "{rec:?}");
    assert_eq!(rec.uid, m.uid);
    assert!(!rec.orphan_on_delete, "the spec's deletionPolicy is Delete");
    assert!(
        rec.history.iter().any(|h| h.action == "adopt"),
        "{:?}",
        rec.history
    );
    assert_eq!(w.pve().count("create_vm") + w.pve().count("clone_vm"), 0);
}

/// Read right before the write, the VM must still be the one consented to: another uuid (a
/// reused VMID), a marker line, an install's tag, or a VM gone: nothing is written, nothing
/// recorded.
#[tokio::test(start_paused = true)]
async fn a_consent_is_checked_against_the_config_read_right_before_the_write() {
    let cases: [(&str, Option<&str>, &str); 4] = [
        (
            "smbios1",
            Some("uuid=00000000-0000-0000-0000-000000000000"),
            "another guest holds the VMID",
        ),
        (
            "description",
            Some("x\nproxsync-id: install=other spec=web-01 uid=u9"),
            "marker line",
        ),
        (
            "tags",
            Some("proxsync.other"),
            "ownership tag proxsync.other",
        ),
        ("name", Some("someone-else"), "is named someone-else"),
    ];
    for (key, value, why) in cases {
        let w = consenting();
        let outcome = w
            .run_changed(adopt_by_consent(&w), |pve| {
                pve.set_config_value(300, key, value)
            })
            .await;
        let Outcome::Failed(e) = outcome else {
            panic!("{key}: {outcome:?}");
        };
        assert_eq!(e.category, Category::Conflict, "{key}");
        assert!(e.message.contains(why), "{key}: {}", e.message);
        assert_eq!(
            w.pve().count("set_config"),
            0,
            "{key}: {:?}",
            w.pve().calls()
        );
        assert_eq!(w.record().vmid(), None, "{key}");
    }
    let w = consenting();
    let outcome = w
        .run_changed(adopt_by_consent(&w), |pve| pve.remove_vm(300))
        .await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(e.category, Category::NotFound, "{}", e.message);
    assert!(
        e.message.contains("VM 300 is gone from node pve1"),
        "{}",
        e.message
    );
    // Another error of the read is that error, not a VM gone.
    let w = consenting();
    let outcome = w
        .run_changed(adopt_by_consent(&w), |pve| {
            pve.fault(
                "vm_config",
                Fault::Refuse(crate::pve::Error::Api {
                    method: "GET".into(),
                    path: "/nodes/pve1/qemu/300/config".into(),
                    status: 403,
                    message: "Permission check failed (/vms/300, VM.Audit)".into(),
                    errors: Default::default(),
                }),
            )
        })
        .await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(e.category, Category::PermissionDenied, "{}", e.message);
}

/// The container spec `web-01` made from a `vztmpl` archive on pve1 (a `vzcreate`).
fn ct_world() -> World {
    let mut w = World::new("");
    let archive = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";
    w.pve().add_volume("local", archive, "vztmpl");
    let yaml = format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: web-01\nspec:\n  \
         forProvider:\n    site: lab\n    node: pve1\n    template: {archive}\n"
    );
    let (mut specs, diags) = crate::spec::parse_file("web.yaml", yaml.as_bytes());
    assert!(diags.is_empty(), "{diags:?}");
    w.spec = specs.remove(0);
    w
}

/// pve-container writes a new container's whole config, marker included and without its
/// `create` lock, partway through the `vzcreate`: a create whose answer was lost, found that
/// way while its task still runs, is waited for by that task, never taken as made (and
/// converged, or started, half made) and never made again.
#[tokio::test(start_paused = true)]
async fn a_container_written_unlocked_by_its_running_create_is_waited_for() {
    let w = ct_world();
    w.pve().set_task_end(TaskEnd::Held);
    w.pve().fault("create_ct", Fault::LoseAnswer);
    assert!(matches!(w.run(w.create()).await, Outcome::Failed(_)));
    let (vmid, upid) = w.intent();
    assert_eq!(upid, None);
    let running = w.pve().running_tasks();
    assert!(
        running[0].contains(&format!(":vzcreate:{vmid}:")),
        "{running:?}"
    );
    // The config as pve-container writes it mid-task: the marker the request carried, no lock.
    let marker = crate::ownership::Marker::signed(&w.key, "main", "web-01", &w.record().uid, vmid);
    w.pve().edit_vm(vmid, |vm| {
        vm.config.remove("lock");
        vm.config.insert("description".into(), marker.description());
        vm.config.insert("hostname".into(), "web-01".into());
    });
    let outcome = w.run(w.resume()).await;
    assert_eq!(
        outcome,
        Outcome::StillRunning {
            upid: running[0].clone()
        }
    );
    assert_eq!(w.intent(), (vmid, Some(running[0].clone())));
    assert_eq!(w.pve().count("create_ct"), 1, "{:?}", w.pve().calls());
    assert_eq!(w.pve().count("start_vm"), 0, "{:?}", w.pve().calls());
    // Once the task ended, the container is the spec's: recorded, converged and started.
    w.pve().end_task(&running[0], "OK");
    w.pve().set_task_end(TaskEnd::AtOnce);
    let outcome = w.run(w.resume()).await;
    assert_eq!(outcome, Outcome::Done, "{:?}", w.pve().calls());
    assert!(w.pve().vm(vmid).is_some_and(|vm| vm.running));
    assert_eq!(w.pve().count("create_ct"), 1);
}

/// qemu-server holds a new VM's `clone` (or `create`) lock until its config is whole: a VM
/// found unlocked and carrying the spec's marker is made, and taken as the spec's whatever a
/// lagging task listing still shows (only a container's create is judged by its task: above).
#[tokio::test(start_paused = true)]
async fn a_vm_found_unlocked_and_marked_is_the_specs_whatever_the_listing_shows() {
    let w = World::new("");
    w.pve().set_task_end(TaskEnd::Held);
    let vmid = w.create_answer_lost(true).await;
    let running = w.pve().running_tasks();
    assert!(
        running.iter().any(|t| t.contains(":qmclone:9000:")),
        "{running:?}"
    );
    let marker = crate::ownership::Marker::signed(&w.key, "main", "web-01", &w.record().uid, vmid);
    w.pve().edit_vm(vmid, |vm| {
        vm.config.remove("lock");
        vm.config.insert("description".into(), marker.description());
    });
    w.pve().set_task_end(TaskEnd::AtOnce);
    w.pve().clear_calls();
    let outcome = w.run(w.resume()).await;
    assert_eq!(outcome, Outcome::Done, "{:?}", w.pve().calls());
    w.assert_exists(vmid);
    assert_eq!(w.pve().count("clone_vm"), 0);
}

/// A VM's create whose answer was lost, then the spec turned into a container of the same
/// name: the create in flight is neither taken as the container's nor answered with a
/// container beside the VM (found in review: `inspect` read only the container's path, saw
/// nothing, and made a second guest).
#[tokio::test(start_paused = true)]
async fn a_kind_changed_while_its_create_is_in_flight_makes_no_second_guest() {
    let mut w = World::new("");
    let vmid = w.create_answer_lost(true).await;
    assert!(w.pve().vm(vmid).is_some(), "the VM was made");
    let archive = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";
    w.pve().add_volume("local", archive, "vztmpl");
    let yaml = format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: web-01\nspec:\n  \
         forProvider:\n    site: lab\n    node: pve1\n    template: {archive}\n"
    );
    let (mut specs, diags) = crate::spec::parse_file("web.yaml", yaml.as_bytes());
    assert!(diags.is_empty(), "{diags:?}");
    w.spec = specs.remove(0);
    tokio::time::advance(w.site.request_window).await;
    w.pve().clear_calls();
    let outcome = w.run(w.resume()).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    assert_eq!(w.pve().count("create_ct"), 0, "{:?}", w.pve().calls());
    assert_eq!(w.pve().count("set_config"), 0, "{:?}", w.pve().calls());
    assert_eq!(w.intent().0, vmid, "the intent stays");
}

/// A container's messages name it a container, not a VM: a create request that may still
/// arrive (the intent), and a marker changed between the plan and a converge (its config read).
#[tokio::test(start_paused = true)]
async fn a_containers_messages_name_it_a_container() {
    let mut w = ct_world();
    w.pve().fault(
        "create_ct",
        Fault::Refuse(crate::pve::Error::Api {
            method: "POST".into(),
            path: "/nodes/pve1/lxc".into(),
            status: 596,
            message: "Connection timed out".into(),
            errors: Default::default(),
        }),
    );
    assert!(matches!(w.run(w.create()).await, Outcome::Failed(_)));
    let (vmid, _) = w.intent();
    w.task_wait = Duration::ZERO;
    let outcome = w.run(w.resume()).await;
    let Outcome::Waiting(wait) = outcome else {
        panic!("{outcome:?}");
    };
    let reason = wait.to_string();
    assert!(
        reason.starts_with(&format!("container {vmid} does not exist yet;")),
        "{reason}"
    );

    let w = ct_world();
    let vmid = w.made().await;
    let theirs = crate::ownership::Marker::signed(&w.key, "main", "db-01", "u9", vmid);
    let outcome = w
        .run_changed(converge_action(&w, vmid), |pve| {
            pve.set_config_value(vmid, "description", Some(&theirs.description()));
        })
        .await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        e.message.starts_with(&format!(
            "container {vmid} carries the marker of spec db-01 of install main"
        )) && e.message.contains("the spec's container is gone"),
        "{}",
        e.message
    );
}

/// The plan creates for a spec whose record names a guest this cycle's listing lost: PVE says
/// the VMID is taken, so nothing is created and the record stays; once PVE says it is free
/// (the guest destroyed), the spec gets a new guest.
#[tokio::test(start_paused = true)]
async fn no_create_for_a_record_whose_guest_only_the_listing_lost() {
    let w = World::new("");
    let vmid = w.made().await;
    w.pve().clear_calls();
    let mut view = observe_site("lab", &w.site.client).await;
    view.vms.remove(&vmid);
    let outcome = w.run_seen(w.create(), view).await;
    let Outcome::Failed(e) = outcome else {
        panic!("{outcome:?}");
    };
    assert!(
        e.message
            .contains(&format!("PVE says VMID {vmid} is taken")),
        "{}",
        e.message
    );
    assert_eq!(w.pve().count("clone_vm"), 0, "{:?}", w.pve().calls());
    assert_eq!(w.record().vm.made_vmid(), Some(vmid));

    w.pve().remove_vm(vmid);
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    assert_eq!(w.pve().count("clone_vm"), 1, "{:?}", w.pve().calls());
    assert!(w.record().vm.made_vmid().is_some());
    assert!(
        w.record()
            .history
            .iter()
            .any(|h| h.outcome.contains("is gone (PVE says VMID")),
        "{:?}",
        w.record().history
    );
}

/// Forgetting a record whose guest the listing did not show waits for PVE's word that its
/// VMID is free: a listing that lost the guest never makes it unmanaged.
#[tokio::test(start_paused = true)]
async fn a_record_is_forgotten_only_when_pve_says_its_vmid_is_free() {
    let w = World::new("");
    let vmid = w.made().await;
    let forget = Action::Forget {
        spec: w.spec.name.to_string(),
    };
    let mut view = observe_site("lab", &w.site.client).await;
    view.vms.remove(&vmid);
    let outcome = w.run_seen(forget.clone(), view).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    assert_eq!(w.record().vm.made_vmid(), Some(vmid), "the record is kept");
    w.pve().remove_vm(vmid);
    assert_eq!(w.run(forget).await, Outcome::Done);
    assert!(w.store.record(&w.spec.name).unwrap().is_none());
}

/// A container template to clone (on pve1).
const CT_TEMPLATE: u32 = 9100;

/// The container spec `web-01` cloned from CT template 9100 on pve1 (a `vzclone`).
fn ct_clone_world() -> World {
    let mut w = World::new("");
    w.pve().add_guest(
        crate::guest::GuestKind::Lxc,
        CT_TEMPLATE,
        "pve1",
        &[
            ("hostname", "alpine-ct"),
            ("template", "1"),
            ("unprivileged", "1"),
            ("ostype", "alpine"),
            ("rootfs", "local-lvm:base-9100-disk-0,size=4G"),
        ],
    );
    let yaml = format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: web-01\nspec:\n  \
         forProvider:\n    site: lab\n    node: pve1\n    template: {CT_TEMPLATE}\n"
    );
    let (mut specs, diags) = crate::spec::parse_file("web.yaml", yaml.as_bytes());
    assert!(diags.is_empty(), "{diags:?}");
    w.spec = specs.remove(0);
    w
}

/// Another spec's clone of the CT template, copying on pve1: the template locked `disk`, its
/// `vzclone` task (naming the template) running. The fake refuses a clone of it meanwhile as
/// pve-container does: 500 `CT is locked (disk)`.
fn ct_template_cloning(w: &World) -> String {
    let upid = w
        .pve()
        .start_task("pve1", "vzclone", &CT_TEMPLATE.to_string());
    w.pve().set_config_value(CT_TEMPLATE, "lock", Some("disk"));
    upid
}

/// A second clone of a CT template while a first one copies it is refused `CT is locked
/// (disk)`: nothing was made (the intent is released), the node is not overloaded, and once
/// the clone holding the lock ends the create is tried again in the same cycle: one
/// container, the refusal in the history, no backoff.
#[tokio::test(start_paused = true)]
async fn a_clone_refused_while_its_ct_template_is_cloned_waits_and_is_tried_again() {
    let w = ct_clone_world();
    let other = ct_template_cloning(&w);
    let end_other = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        w.pve().set_config_value(CT_TEMPLATE, "lock", None);
        w.pve().end_task(&other, "OK");
    };
    let (results, ()) = tokio::join!(w.execute(vec![w.create()]), end_other);
    assert_eq!(results[0].outcome, Outcome::Done, "{results:?}");
    assert_eq!(w.pve().count("clone_ct"), 2, "{:?}", w.pve().calls());
    let rec = w.record();
    let VmState::Exists { vmid, .. } = rec.vm else {
        panic!("{rec:?}");
    };
    assert!(w.pve().vm(vmid).is_some_and(|ct| ct.running));
    assert_eq!((rec.attempts, rec.next_attempt_ms), (0, None), "{rec:?}");
    let history = history(&w);
    assert!(
        history.contains("create: trying again after LockError: ")
            && history.contains("CT is locked (disk)"),
        "{history}"
    );
}

/// The clone holding the template's lock outlives the task wait: the spec waits (no error,
/// no backoff, nothing reserved), and the next cycle creates it.
#[tokio::test(start_paused = true)]
async fn a_clone_whose_ct_template_stays_locked_by_a_running_clone_waits() {
    let w = ct_clone_world();
    let other = ct_template_cloning(&w);
    let results = w.execute(vec![w.create()]).await;
    let Outcome::Waiting(wait) = &results[0].outcome else {
        panic!("{results:?}");
    };
    let reason = wait.to_string();
    assert!(
        reason.contains("container template 9100 is locked (disk) by task ")
            && reason.contains(&other),
        "{reason}"
    );
    let rec = w.record();
    assert_eq!(rec.vm, VmState::Absent, "{rec:?}");
    assert!(rec.last_error.is_none(), "{rec:?}");
    assert_eq!(w.pve().count("clone_ct"), 1, "{:?}", w.pve().calls());
    assert!(w.store.allocations("lab").expect("allocations").is_empty());
}

/// A CT template left locked `disk` with no task holding it (an interrupted clone): nothing
/// can be cloned from it until a person clears it, which the error says how to do.
#[tokio::test(start_paused = true)]
async fn a_ct_template_locked_with_no_task_holding_it_is_a_stale_lock() {
    let w = ct_clone_world();
    w.pve().set_config_value(CT_TEMPLATE, "lock", Some("disk"));
    let results = w.execute(vec![w.create()]).await;
    let Outcome::Failed(e) = &results[0].outcome else {
        panic!("{results:?}");
    };
    assert_eq!(e.category, Category::LockError, "{e:?}");
    assert_eq!(e.kind, crate::store::ErrorKind::StaleLock, "{e:?}");
    assert!(
        e.message
            .starts_with("container template 9100 on node pve1 is locked (disk) and no task")
            && e.message.contains("pct unlock 9100"),
        "{}",
        e.message
    );
    assert_eq!(w.record().vm, VmState::Absent);
    assert_eq!(
        w.pve().count("clone_ct"),
        1,
        "tried once: {:?}",
        w.pve().calls()
    );
}

/// Two container specs cloned from one CT template in one cycle: the fake, as pve-container,
/// locks the template `disk` while the first clone copies, refuses the second `CT is locked
/// (disk)`; the second waits for the first clone's task and is cloned when it ends. Both are
/// made in the cycle, one container each.
#[tokio::test(start_paused = true)]
async fn two_containers_cloned_from_one_ct_template_are_both_made_in_one_cycle() {
    let mut w = ct_clone_world();
    let mut second = w.spec.clone();
    second.name = "web-02".into();
    second.container_mut().unwrap().hostname = "web-02".into();
    w.others.push(second);
    w.pve().set_task_end(TaskEnd::Held);
    let first_clone_ends = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let running = w.pve().running_tasks();
        assert_eq!(running.len(), 1, "one clone copies at a time: {running:?}");
        let locked = w.pve().vm(CT_TEMPLATE).expect("template").config;
        assert_eq!(locked.get("lock").map(String::as_str), Some("disk"));
        w.pve().set_task_end(TaskEnd::AtOnce);
        w.pve().end_task(&running[0], "OK");
    };
    let create = |spec: &Spec| Action::Create {
        spec: spec.name.to_string(),
        site: "lab".into(),
        node: spec.node.to_string(),
    };
    let actions = vec![create(&w.spec), create(&w.others[0])];
    let (results, ()) = tokio::join!(w.execute(actions), first_clone_ends);
    for r in &results {
        assert_eq!(r.outcome, Outcome::Done, "{results:?}");
    }
    let calls = w.pve().calls();
    assert_eq!(w.pve().count("clone_ct"), 3, "{calls:?}");
    let records = w.store.specs().expect("records");
    let vmids: Vec<u32> = ["web-01", "web-02"]
        .iter()
        .map(|n| records[*n].vmid().expect("made"))
        .collect();
    assert_ne!(vmids[0], vmids[1]);
    let retried: Vec<&String> = records
        .iter()
        .filter(|(_, r)| {
            r.history
                .iter()
                .any(|h| h.outcome.contains("CT is locked (disk)"))
        })
        .map(|(name, _)| name)
        .collect();
    assert_eq!(retried.len(), 1, "{records:?}");
    assert!(records.values().all(|r| r.last_error.is_none()));
    let template = w.pve().vm(CT_TEMPLATE).expect("template");
    assert_eq!(
        template.config.get("lock"),
        None,
        "unlocked when the clone ended"
    );
}

/// pve-container resizes by the volume's real size, not the config's `size=`: a rootfs whose
/// config says less than its volume has is refused `disk is already at specified size` (a plain
/// `die`, HTTP 500). The volume is at the spec's size: the converge is done, the size recorded,
/// no error and no overload.
#[tokio::test(start_paused = true)]
async fn a_container_volume_already_at_the_specs_size_counts_as_grown() {
    let w = ct_world();
    let vmid = w.made().await;
    let rootfs = w.pve().vm(vmid).expect("made").config["rootfs"].clone();
    let volume = rootfs.split(',').next().unwrap_or_default().to_string();
    w.pve()
        .set_config_value(vmid, "rootfs", Some(&format!("{volume},size=4G")));
    w.pve().fault(
        "resize_disk",
        Fault::Refuse(crate::pve::Error::Api {
            method: "PUT".into(),
            path: format!("/nodes/pve1/lxc/{vmid}/resize"),
            status: 500,
            message: "disk is already at specified size".into(),
            errors: Default::default(),
        }),
    );
    let mut rec = w.record();
    rec.applied_disk_bytes = None;
    w.store.put(&w.spec.name, &rec).expect("record");
    let outcome = w.run(converge_action(&w, vmid)).await;
    assert_eq!(outcome, Outcome::Done, "{:?}", w.pve().calls());
    assert_eq!(w.pve().count("resize_disk"), 1, "{:?}", w.pve().calls());
    assert_eq!(
        w.record().applied_disk_bytes,
        Some(w.spec.root_disk_bytes())
    );
}

/// A container spec of `web-01` from the archive `ct_world` adds, with `extra` fields.
fn ct_spec_with(extra: &str) -> Spec {
    let yaml = format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: web-01\nspec:\n  \
         forProvider:\n    site: lab\n    node: pve1\n    \
         template: local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\n{extra}"
    );
    let (mut specs, diags) = crate::spec::parse_file("web.yaml", yaml.as_bytes());
    assert!(diags.is_empty(), "{diags:?}");
    specs.remove(0)
}

/// A new container's volumes are stored at the spec's sizes (the fake allocates them as
/// pve-container does, `int($size_gb * 1024)` MiB), so a later converge grows nothing (found
/// in review: `1100Mi` was sent as `1.074`, stored as 1099M, and grown at every converge).
#[tokio::test(start_paused = true)]
async fn a_new_containers_volumes_are_stored_at_the_specs_sizes_and_never_grown() {
    let mut w = ct_world();
    w.spec = ct_spec_with(
        "    rootfs: {storage: local-lvm, size: 1100Mi}\n    mountPoints:\n      \
         - {slot: mp0, path: /srv, storage: local-lvm, size: 1100Mi}\n",
    );
    let vmid = w.made().await;
    let config = w.pve().vm(vmid).expect("made").config;
    for key in ["rootfs", "mp0"] {
        assert!(
            config[key].ends_with(",size=1100M"),
            "{key}: {}",
            config[key]
        );
    }
    w.pve().clear_calls();
    assert_eq!(w.run(converge_action(&w, vmid)).await, Outcome::Done);
    assert_eq!(w.pve().count("resize_disk"), 0, "{:?}", w.pve().calls());
    // The fake resizes as pve-container does: by the volume's real size, whatever the config
    // says.
    let rootfs = config["rootfs"].replace("size=1100M", "size=1G");
    w.pve().set_config_value(vmid, "rootfs", Some(&rootfs));
    let mut rec = w.record();
    rec.applied_disk_bytes = None;
    w.store.put(&w.spec.name, &rec).expect("record");
    assert_eq!(w.run(converge_action(&w, vmid)).await, Outcome::Done);
    let calls = w.pve().calls();
    assert!(
        calls
            .iter()
            .any(|c| c == &format!("resize_disk pve1 lxc/{vmid} rootfs 1100M")),
        "{calls:?}"
    );
    assert_eq!(w.record().applied_disk_bytes, Some(1100 << 20));
}

/// A hostname changed on a running container reaches the guest only at its next start
/// (pve-container takes it into the config at once and lists nothing pending): it is
/// `RebootPending` while the container runs, and the reboot `rebootPolicy` allows is a
/// shutdown and a start, never PVE's container reboot (which kills after its timeout), an
/// HA-managed container's too.
#[tokio::test(start_paused = true)]
async fn a_running_containers_new_hostname_waits_for_a_start_and_is_never_a_killing_reboot() {
    let mut w = ct_world();
    w.spec = ct_spec_with("    ha: {}\n");
    let vmid = w.made().await;
    assert!(w.pve().vm(vmid).expect("made").running);
    w.spec = ct_spec_with("    hostname: web-renamed\n    ha: {}\n");
    w.pve().clear_calls();
    assert_eq!(w.run(converge_action(&w, vmid)).await, Outcome::Done);
    assert_eq!(
        w.pve().vm(vmid).expect("made").config["hostname"],
        "web-renamed"
    );
    assert_eq!(w.record().reboot_pending, vec!["hostname".to_string()]);
    assert_eq!(w.pve().count("shutdown_vm"), 0, "{:?}", w.pve().calls());
    // Another converge while it runs: still waiting for a start.
    assert_eq!(w.run(converge_action(&w, vmid)).await, Outcome::Done);
    assert_eq!(w.record().reboot_pending, vec!["hostname".to_string()]);

    // The policy allows a reboot: a shutdown and a start.
    w.spec = ct_spec_with("    hostname: web-renamed\n    ha: {}\n    rebootPolicy: IfNeeded\n");
    w.pve().clear_calls();
    assert_eq!(w.run(converge_action(&w, vmid)).await, Outcome::Done);
    let calls = w.pve().calls();
    assert_eq!(w.pve().count("reboot_vm"), 0, "{calls:?}");
    assert_eq!(
        (w.pve().count("shutdown_vm"), w.pve().count("start_vm")),
        (1, 1),
        "{calls:?}"
    );
    assert!(w.record().reboot_pending.is_empty(), "{:?}", w.record());
    assert!(w.pve().vm(vmid).expect("made").running);
}

/// pve-container's own locks that no task holds each get their own advice: `mounted` is
/// cleared by `pct unmount`, `destroyed` by destroying again, and `fstrim` (held by the `pct
/// fstrim` command, not a task) is waited for, never called stale.
#[tokio::test(start_paused = true)]
async fn a_containers_own_locks_get_pve_containers_advice() {
    let w = ct_world();
    let vmid = w.made().await;
    w.pve().clear_calls();
    for (lock, advice) in [("mounted", "pct unmount"), ("destroyed", "pct destroy")] {
        w.pve().set_config_value(vmid, "lock", Some(lock));
        let outcome = w.run(converge_action(&w, vmid)).await;
        let Outcome::Failed(e) = &outcome else {
            panic!("{lock}: {outcome:?}");
        };
        assert_eq!(e.kind, crate::store::ErrorKind::StaleLock, "{lock}: {e:?}");
        assert!(
            e.message.contains(&format!("{advice} {vmid}")) && !e.message.contains("unlock"),
            "{lock}: {}",
            e.message
        );
    }
    w.pve().set_config_value(vmid, "lock", Some("fstrim"));
    let outcome = w.run(converge_action(&w, vmid)).await;
    let Outcome::Waiting(wait) = &outcome else {
        panic!("{outcome:?}");
    };
    let reason = wait.to_string();
    assert!(
        reason.contains("`pct fstrim`") && reason.contains("runs no task"),
        "{reason}"
    );
    assert_eq!(w.pve().count("set_config"), 0, "{:?}", w.pve().calls());
}

/// A consent over a privileged container compares `unprivileged` before it writes anything: a
/// spec that says unprivileged (the default) would have the converge ask for its `features`,
/// which only root@pam may set on a privileged container. With `unprivileged: false` it is
/// taken over.
#[tokio::test(start_paused = true)]
async fn a_consent_over_a_privileged_container_compares_unprivileged_first() {
    let consent = "  annotations:\n    proxsync.io/adopt: \"300\"\n    \
                   proxsync.io/adopt-hwaddr: \"BC:24:11:5E:0A:01\"\n";
    let spec_with = |fp: &str| {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: web-01\n{consent}\
             spec:\n  forProvider:\n    site: lab\n    node: pve1\n{fp}"
        );
        let (mut specs, diags) = crate::spec::parse_file("web.yaml", yaml.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        specs.remove(0)
    };
    let world = |fp: &str| {
        let mut w = World::new("");
        w.spec = spec_with(fp);
        w.pve().add_guest(
            crate::guest::GuestKind::Lxc,
            300,
            "pve1",
            &[
                ("hostname", "web-01"),
                ("cores", "1"),
                ("rootfs", "local-lvm:vm-300-disk-0,size=8G"),
                (
                    "net0",
                    "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:5E:0A:01,ip=dhcp,type=veth",
                ),
            ],
        );
        w
    };
    let action = |w: &World| Action::AdoptByConsent {
        spec: w.spec.name.to_string(),
        site: "lab".into(),
        node: "pve1".into(),
        vmid: 300,
    };
    let w = world("    cores: 1\n    features: {nesting: true}\n");
    let outcome = w.run(action(&w)).await;
    let Outcome::Failed(e) = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(e.category, Category::ConfigurationError, "{}", e.message);
    assert!(
        e.message.contains("is privileged") && e.message.contains("nothing adopted"),
        "{}",
        e.message
    );
    assert_eq!(w.pve().count("set_config"), 0, "{:?}", w.pve().calls());
    assert_eq!(w.record().vmid(), None);

    let w = world("    cores: 1\n    unprivileged: false\n");
    assert_eq!(
        w.run(action(&w)).await,
        Outcome::Done,
        "{:?}",
        w.pve().calls()
    );
    assert_eq!(w.record().vmid(), Some(300));
}

/// An adoption of a guest already as its spec says writes its record once, expecting the state
/// the action found; a record written meanwhile (here `proxsync adopt` of the same VM, the very
/// state the adoption meant) is not written over, and the adoption is not reported done.
#[tokio::test(start_paused = true)]
async fn an_adoption_whose_record_changed_meanwhile_is_failed_not_written_over() {
    let w = World::new("");
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    let made = w.record();
    let vmid = made.vmid().expect("a VM");
    // A lost database, and a cycle that read the guest's config (the adoption's evidence).
    w.store.remove(&w.spec.name).unwrap();
    let mut ctx = w.ctx().await;
    let cfg = (w.pve().vm_config("pve1", GuestKind::Qemu, vmid).await).unwrap();
    ctx.fresh_configs.insert(("lab".into(), vmid), cfg);
    // Someone records the adoption by hand after the cycle read the records (none).
    let mut by_hand = SpecRecord {
        uid: "by-hand".into(),
        site: "lab".into(),
        ..made.clone()
    };
    by_hand.vm = VmState::Absent;
    w.store
        .transition(&w.spec.name, &mut by_hand, made.vm.clone())
        .unwrap();
    w.pve().clear_calls();
    let outcome = run_action(&ctx, &w.adopt(vmid), None, CREATE_TRIES).await;
    assert!(
        matches!(outcome, Some(Outcome::Failed(_))),
        "{outcome:?}; calls {:?}",
        w.pve().calls()
    );
    assert_eq!(w.record().uid, "by-hand", "the hand's record stands");
    // The guest already as its spec says: nothing was sent to change it.
    assert_eq!(
        w.pve().count("update_vm_config"),
        0,
        "{:?}",
        w.pve().calls()
    );
}
