//! The crash-resume branches of a create, and a resumed delete, against the in-memory fake
//! (`pve::fake`): each test leaves the state an interrupted action leaves (by losing an answer
//! or holding a task), then runs the next action and checks the fake's call log. Time is
//! tokio's, paused: the request window and task waits pass without real sleeping.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::Clock;
use crate::observe::observe_site;
use crate::ownership::MarkerKey;
use crate::pve::fake::{FakePve, Fault, TaskEnd};
use crate::spec::test_spec;
use crate::state::VmState;

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
        World {
            _dir: dir,
            store,
            site: Arc::new(SiteCtx::new("lab", fake, REQUEST_TIMEOUT)),
            spec: test_spec(extra),
            key: Arc::new(MarkerKey::from_bytes([7; 32])),
            clock: Clock::following_tokio(START_MS),
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
            .remove(&self.spec.name)
            .unwrap_or_default()
    }

    /// Runs one action as `execute` does (the record read from the store, the outcome
    /// recorded), after observing the site as a cycle does; once, even where `execute` would
    /// try a create again.
    async fn run(&self, action: Action) -> Outcome {
        let ctx = self.ctx().await;
        let rec = self.store.specs().expect("records").remove(&self.spec.name);
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

    async fn ctx(&self) -> ExecCtx<FakePve> {
        let view = observe_site("lab", &self.site.client).await;
        ExecCtx {
            store: self.store.clone(),
            install_id: "main".into(),
            sites: [("lab".to_string(), self.site.clone())].into(),
            specs: [(self.spec.name.clone(), Arc::new(self.spec.clone()))].into(),
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
        }
    }

    fn create(&self) -> Action {
        Action::Create {
            spec: self.spec.name.clone(),
            site: "lab".into(),
            node: "pve1".into(),
        }
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
            spec: self.spec.name.clone(),
            site: "lab".into(),
            node,
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
    assert!(matches!(outcome, Outcome::Waiting { .. }), "{outcome:?}");
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
        spec: w.spec.name.clone(),
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
        spec: w.spec.name.clone(),
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
    assert_eq!(bound.state, crate::state::DestroyState::Bound);
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
    assert_eq!(done.state, crate::state::DestroyState::Destroyed);
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
        spec: w.spec.name.clone(),
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
    let upid = w.pve().clone_vm("pve1", TEMPLATE, &req).await.expect("a clone");
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
    assert_eq!(w.intent(), (vmid, Some(upid)), "the intent and its UPID stay");
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
    w.pve()
        .next_task_ends("qmclone", "clone failed: lvcreate 'pve/vm-100-disk-0' error: out of space");
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
            spec.name = n.to_string();
            spec.vm_name = n.to_string();
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
