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
    /// recorded), after observing the site as a cycle does.
    async fn run(&self, action: Action) -> Outcome {
        let view = observe_site("lab", &self.site.client).await;
        let ctx = ExecCtx {
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
        };
        let rec = self.store.specs().expect("records").remove(&self.spec.name);
        run_action(&ctx, &action, rec).await
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

// ---- the gate: nothing destructive without its permit ----------------------------------------

/// [`World::run`] with the cycle's view of the site given (`view`), as the observation left it.
impl World {
    async fn run_seen(&self, action: Action, view: SiteView) -> Outcome {
        let ctx = ExecCtx {
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
        };
        let rec = self.store.specs().expect("records").remove(&self.spec.name);
        run_action(&ctx, &action, rec).await
    }
}

/// The spec's VM made, stopped, then its spec removed: the `Remove` the planner makes of it.
async fn made_and_removed(w: &World) -> (u32, Action) {
    assert_eq!(w.run(w.create()).await, Outcome::Done);
    let vmid = w.record().vmid().expect("created");
    w.pve().clear_calls();
    let remove = Action::Remove {
        spec: w.spec.name.clone(),
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
