//! `changePolicy` attacked against fakepve: a person's snapshots beside proxsync's (one named
//! like proxsync's own), a snapshot of proxsync's a person deleted before its rollback, a
//! delete of an older snapshot that failed half-way through a change's end, a state database
//! lost while a change is guarded, and `rollback: Never` with a guest that fails its checks.
//! An in-process daemon runs against a clock the test moves, as in `change_policy.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use crate::common;
use common::Scenario;
use common::engine::{InProcess, Workspace, spec};
use common::http::Http;

const OK: &str = "HTTP/1.1 200 OK";
const FAILING: &str = "HTTP/1.1 503 Service Unavailable";

/// The spec `web-01` with `memory`, a health check on `port`, a restart when a change needs
/// one, and a snapshot before such a change (`rollback`, `keep`).
fn web(memory: &str, port: u16, rollback: &str, keep: u32) -> String {
    let extra = format!(
        "    rebootPolicy: IfNeeded\n    health:\n      http: {{port: {port}, path: /healthz}}\n      \
         address: 127.0.0.1\n      timeout: 1m\n    changePolicy:\n      snapshot: BeforeRestart\n      \
         rollback: {rollback}\n      keep: {keep}\n"
    );
    spec("web-01", "pve1", "9000", &extra)
        .replace("memory: 2Gi", &format!("memory: {memory}"))
        .replace("disk: 8Gi", &format!("disk: 8Gi\n    storage: {STORAGE}"))
}

/// The storage of the guest's disks: Ceph RBD, whose operations fakepve can slow down.
const STORAGE: &str = "ceph-vm";

/// A fakepve, a workspace whose `web-01` runs, an in-process daemon over it with a clock the
/// test moves (the guest's uptime moving with it).
struct Rig {
    pve: common::FakePve,
    ws: Workspace,
    http: Http,
    rt: tokio::runtime::Runtime,
    d: Option<InProcess>,
    vmid: u32,
    offset: Arc<AtomicU64>,
    boot: u64,
}

impl Rig {
    fn new(rollback: &str, keep: u32) -> Rig {
        let mut pve = Scenario::default().start();
        pve.call("add_ceph_storage", json!({"name": STORAGE}))
            .unwrap();
        Self::with(pve, rollback, keep)
    }

    fn with(mut pve: common::FakePve, rollback: &str, keep: u32) -> Rig {
        let ws = Workspace::new(&pve);
        let http = Http::start(OK);
        ws.commit_specs(&[("web.yaml", web("2Gi", http.port, rollback, keep))]);
        ws.run_once();
        let owned = common::engine::owned_vms(&mut pve);
        assert_eq!(owned.len(), 1, "{owned:?}");
        let vmid = owned[0].0 as u32;
        pve.set_vm(vmid, json!({"uptime": 600}));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let offset = Arc::new(AtomicU64::new(0));
        let d = Self::daemon(&ws, &offset);
        let mut rig = Rig {
            pve,
            ws,
            http,
            rt,
            d: Some(d),
            vmid,
            offset,
            boot: 0,
        };
        rig.cycle();
        assert_eq!(rig.ws.condition("web-01", "Healthy").1, "Passing");
        rig
    }

    fn daemon(ws: &Workspace, offset: &Arc<AtomicU64>) -> InProcess {
        let mut d = common::engine::in_process(ws);
        let clock_offset = offset.clone();
        d.engine
            .set_clock(proxsync::util::clock::Clock::from_fn(move || {
                proxsync::util::clock::now_ms() + clock_offset.load(Ordering::SeqCst)
            }));
        d
    }

    /// A new commit of `web-01`, read into the daemon.
    fn commit(&mut self, memory: &str, rollback: &str, keep: u32) {
        let text = web(memory, self.http.port, rollback, keep);
        self.ws.commit_specs(&[("web.yaml", text)]);
        let config = proxsync::config::Config::load(&self.ws.config()).expect("config");
        let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply)
            .expect("the specs of the commit");
        let d = self.d.as_mut().expect("a daemon");
        d.specs = read.specs;
        proxsync::engine::check_spec_sites(&config, &mut d.specs);
        d.commit = read.commit;
    }

    /// The engine's clock and the guest's uptime move on `secs`.
    fn later(&mut self, secs: u64) {
        let now = self.offset.fetch_add(secs * 1000, Ordering::SeqCst) / 1000 + secs;
        let up = 600 + now - self.boot.min(600 + now);
        self.pve.set_vm(self.vmid, json!({"uptime": up}));
    }

    /// The guest started just now (a restart proxsync asked for, or a rollback's start).
    fn restarted(&mut self) {
        self.boot = 600 + self.offset.load(Ordering::SeqCst) / 1000;
        self.pve.set_vm(self.vmid, json!({"uptime": 0}));
    }

    fn cycle(&mut self) {
        let d = self.d.as_mut().expect("a daemon");
        self.rt
            .block_on(d.engine.reconcile(&d.specs, Some(&d.commit)))
            .expect("a cycle");
    }

    /// The names of the VM's snapshots, as fakepve holds them, sorted.
    fn snapshots(&mut self) -> Vec<String> {
        let vm = self.pve.vm(self.vmid);
        let mut names: Vec<String> = (vm["snapshots"].as_array().into_iter().flatten())
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect();
        names.sort();
        names
    }

    /// A request to the fake as a person would send it: its HTTP status.
    fn person(&self, method: &str, path: &str, form: &[(&str, &str)]) -> u16 {
        let ca = self.pve.ca_pem();
        let url = self.pve.api_url(path);
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let form: Vec<(String, String)> = (form.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let client = common::fakepve::verified_client(&ca);
            rt.block_on(async {
                let r = client
                    .request(method, url)
                    .header(
                        "Authorization",
                        common::fakepve::token_header(
                            common::fakepve::TOKEN_ID,
                            common::fakepve::TOKEN_SECRET,
                        ),
                    )
                    .form(&form)
                    .send()
                    .await
                    .expect("the fake answers");
                r.status().as_u16()
            })
        })
        .join()
        .unwrap()
    }

    /// A person's snapshot `name` of the guest.
    fn person_snapshot(&self, name: &str) {
        let path = format!("/nodes/pve1/qemu/{}/snapshot", self.vmid);
        let status = self.person("POST", &path, &[("snapname", name)]);
        assert_eq!(status, 200, "a person's snapshot {name}");
    }

    /// A person deletes snapshot `name` of the guest.
    fn person_deletes(&self, name: &str) {
        let path = format!("/nodes/pve1/qemu/{}/snapshot/{name}", self.vmid);
        let status = self.person("DELETE", &path, &[]);
        assert_eq!(status, 200, "a person's delete of {name}");
    }

    /// The types of the tasks fakepve ran of type `kind`.
    fn tasks(&mut self, kind: &str) -> usize {
        (self.pve.tasks().into_iter())
            .filter(|t| t["type"] == kind)
            .count()
    }

    /// The change to `memory` committed, applied and the guest restarted to take it: the
    /// snapshot proxsync took before it.
    fn change(&mut self, memory: &str, rollback: &str, keep: u32) -> String {
        let before = self.snapshots();
        self.commit(memory, rollback, keep);
        self.later(10);
        self.cycle();
        self.restarted();
        let taken: Vec<String> = (self.snapshots().into_iter())
            .filter(|s| !before.contains(s))
            .collect();
        assert_eq!(taken.len(), 1, "one snapshot taken: {taken:?}");
        taken[0].clone()
    }
}

/// A person's snapshots (one named `proxsync-123`, like proxsync's own) are never deleted,
/// however many changes end. A delete of proxsync's older snapshot that failed (a kill or an
/// error during a change's end) is finished by a later cycle, without a new change: the guest
/// ends with exactly the snapshots the record names and the person's.
#[test]
fn a_persons_snapshots_are_kept_and_a_failed_delete_is_finished_later() {
    let mut r = Rig::new("OnUnhealthy", 1);
    r.person_snapshot("proxsync-123");
    r.person_snapshot("before-upgrade");

    let first = r.change("4Gi", "OnUnhealthy", 1);
    r.later(6);
    r.cycle();
    assert_eq!(r.ws.condition("web-01", "Healthy").1, "Passing");
    let mut want = vec![
        "before-upgrade".to_string(),
        first.clone(),
        "proxsync-123".to_string(),
    ];
    want.sort();
    assert_eq!(r.snapshots(), want, "keep: 1 keeps proxsync's one");

    // A new change; the delete of the older snapshot fails once as the change ends.
    r.later(3600);
    let second = r.change("3Gi", "OnUnhealthy", 1);
    r.pve.fail_times(
        "DELETE",
        &format!("/snapshot/{first}"),
        500,
        "connection reset",
        1,
    );
    r.later(6);
    r.cycle();
    assert!(r.snapshots().contains(&first), "the delete failed");
    // Later cycles finish it, with no change in flight.
    for _ in 0..3 {
        r.later(600);
        r.cycle();
    }
    let mut want = vec![
        "before-upgrade".to_string(),
        second,
        "proxsync-123".to_string(),
    ];
    want.sort();
    assert_eq!(r.snapshots(), want, "{}", r.ws.status("web-01"));
    assert_eq!(r.tasks("qmrollback"), 0);
}

/// A person deletes the snapshot proxsync took before a change; the guest then fails its
/// checks. No rollback is asked (to a snapshot that is not there, or to any other), nothing is
/// deleted, the status says why, and later cycles do not ask again.
#[test]
fn a_snapshot_a_person_deleted_is_not_rolled_back_to() {
    let mut r = Rig::new("OnUnhealthy", 1);
    r.person_snapshot("proxsync-123");
    r.http.answer(FAILING);
    let taken = r.change("4Gi", "OnUnhealthy", 1);
    r.person_deletes(&taken);
    r.later(20);
    r.cycle();
    let seq = common::engine::next_seq(&mut r.pve);
    for _ in 0..4 {
        r.later(120);
        r.cycle();
    }
    let rollbacks: Vec<_> = (r.pve.requests_since(seq).into_iter())
        .filter(|q| q.path.contains("rollback"))
        .map(|q| format!("{} {}", q.method, q.path))
        .collect();
    assert!(rollbacks.is_empty(), "{rollbacks:?}");
    assert_eq!(r.snapshots(), vec!["proxsync-123".to_string()]);
    let status = r.ws.status("web-01").to_string();
    assert!(
        status.contains(&taken) && status.contains("not rolled back"),
        "{status}"
    );
    assert_eq!(r.pve.vm(r.vmid)["config"]["memory"], "4096");
}

/// The state database is lost while a change is guarded and the guest fails its checks: the
/// daemon that starts on an empty one rolls nothing back and deletes nothing.
#[test]
fn a_lost_state_database_rolls_nothing_back_and_deletes_nothing() {
    let mut r = Rig::new("OnUnhealthy", 0);
    r.http.answer(FAILING);
    let taken = r.change("4Gi", "OnUnhealthy", 0);
    r.later(20);
    r.cycle();
    // The daemon stops, its state is lost, a new one starts.
    drop(r.d.take());
    r.ws.remove_state();
    r.d = Some(Rig::daemon(&r.ws, &r.offset));
    for _ in 0..4 {
        r.later(120);
        r.cycle();
    }
    assert_eq!(r.tasks("qmrollback"), 0);
    assert_eq!(r.tasks("qmdelsnapshot"), 0);
    assert_eq!(r.snapshots(), vec![taken]);
    assert_eq!(r.pve.vm(r.vmid)["config"]["memory"], "4096");
}

/// `rollback: Never` with a guest that fails its checks: reported, never rolled back, the
/// snapshot kept while it fails; once it passes the change ends (`keep: 0`: the snapshot
/// deleted).
#[test]
fn rollback_never_keeps_the_guard_until_the_guest_passes() {
    let mut r = Rig::new("Never", 0);
    r.http.answer(FAILING);
    let taken = r.change("4Gi", "Never", 0);
    for _ in 0..4 {
        r.later(60);
        r.cycle();
    }
    assert_eq!(r.tasks("qmrollback"), 0);
    assert_eq!(r.snapshots(), vec![taken]);
    assert_eq!(r.ws.condition("web-01", "Healthy").1, "Unhealthy");
    r.http.answer(OK);
    for _ in 0..3 {
        r.later(60);
        r.cycle();
    }
    assert_eq!(r.ws.condition("web-01", "Healthy").1, "Passing");
    assert!(r.snapshots().is_empty(), "keep: 0: {:?}", r.snapshots());
    assert_eq!(r.tasks("qmrollback"), 0);
}

/// A snapshot task outlives the action's wait, and a person clears the guest's `lock:
/// snapshot` meanwhile (as after a task that died): the snapshot listed `snapstate: prepare`
/// is not taken, so the change is not applied guarded by it, and no second snapshot is asked
/// for. Once the snapshot is whole, the change goes on, guarded by it.
#[test]
fn an_incomplete_snapshot_is_no_guard_and_is_not_taken_twice() {
    let mut r = Rig::new("OnUnhealthy", 1);
    r.d.as_mut().unwrap().engine.task_wait = std::time::Duration::from_millis(500);
    r.pve.set_time_scale(1.0);
    r.pve.call("ceph_slow", json!({"secs": 4})).unwrap();
    r.commit("4Gi", "OnUnhealthy", 1);
    r.later(10);
    r.cycle();
    assert_eq!(r.tasks("qmsnapshot"), 1);
    let taken = r.snapshots();
    assert_eq!(taken.len(), 1, "{taken:?}");
    // A person's `qm unlock` while the snapshot is still being taken.
    r.pve.unlock(r.vmid);
    r.later(60);
    r.cycle();
    let vm = r.pve.vm(r.vmid);
    assert!(
        vm["config"]["memory"] == "2048" && vm["pending"].get("memory").is_none(),
        "not applied, not even pending, unguarded: {vm}"
    );
    // The snapshot's task ends: the change goes on, guarded by it, with no second snapshot.
    std::thread::sleep(std::time::Duration::from_secs(5));
    r.pve.call("ceph_slow", json!({"secs": 0})).unwrap();
    for _ in 0..3 {
        r.later(600);
        r.cycle();
    }
    assert_eq!(r.tasks("qmsnapshot"), 1, "{}", r.ws.status("web-01"));
    assert_eq!(r.snapshots(), taken);
    assert_eq!(r.pve.vm(r.vmid)["config"]["memory"], "4096");
}

/// A change the guest failed is rolled back; the spec is then reverted to the content it had
/// before (the guest already is so), and later the change is committed again, a person's new
/// attempt: it is tried (a new snapshot, the change applied), not held as rolled back by a
/// record of the commit before the revert.
#[test]
fn a_change_committed_again_after_a_revert_is_tried_again() {
    let mut r = Rig::new("OnUnhealthy", 2);
    r.http.answer(FAILING);
    let first = r.change("4Gi", "OnUnhealthy", 2);
    r.later(20);
    r.cycle();
    r.later(45);
    r.cycle();
    assert_eq!(r.tasks("qmrollback"), 1);
    assert_eq!(r.ws.condition("web-01", "Stalled").1, "RolledBack");
    r.restarted();
    r.http.answer(OK);

    // Reverted: the guest is as the spec says.
    r.commit("2Gi", "OnUnhealthy", 2);
    for _ in 0..2 {
        r.later(60);
        r.cycle();
    }
    assert_eq!(r.ws.condition("web-01", "Stalled").0, "False");
    assert_eq!(r.ws.condition("web-01", "Ready").0, "True");

    // The change again, an hour after the last restart.
    r.later(3600);
    let second = r.change("4Gi", "OnUnhealthy", 2);
    assert_ne!(second, first);
    r.later(6);
    r.cycle();
    let vm = r.pve.vm(r.vmid);
    assert_eq!(vm["config"]["memory"], "4096", "{vm}");
    assert_eq!(r.ws.condition("web-01", "Healthy").1, "Passing");
    assert_eq!(r.ws.condition("web-01", "Ready").0, "True");
    assert_eq!(r.tasks("qmrollback"), 1);
}

/// `proxsync reconcile NAME --retry` after a rollback: the same change is tried again with a
/// snapshot of its own; once it passes, `keep: 1` leaves only that one (the one the guest was
/// rolled back to deleted), and no rollback is asked again.
#[test]
fn a_retry_after_a_rollback_takes_a_new_snapshot_and_ends_with_keep() {
    let mut r = Rig::new("OnUnhealthy", 1);
    r.http.answer(FAILING);
    let first = r.change("4Gi", "OnUnhealthy", 1);
    r.later(20);
    r.cycle();
    r.later(45);
    r.cycle();
    assert_eq!(r.ws.condition("web-01", "Stalled").1, "RolledBack");
    r.restarted();
    r.http.answer(OK);
    r.later(3600);
    let retried = (r.d.as_mut().unwrap().engine)
        .retry_rolled_back("web-01")
        .expect("retry");
    assert!(retried);
    r.cycle();
    r.restarted();
    let listed = r.snapshots();
    assert_eq!(listed.len(), 2, "a new snapshot for the retry: {listed:?}");
    assert_eq!(r.pve.vm(r.vmid)["config"]["memory"], "4096");
    for _ in 0..2 {
        r.later(6);
        r.cycle();
    }
    let kept = r.snapshots();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_ne!(kept[0], first);
    assert_eq!(r.ws.condition("web-01", "Healthy").1, "Passing");
    assert_eq!(r.ws.condition("web-01", "Stalled").0, "False");
    assert_eq!(r.tasks("qmrollback"), 1);
}

/// The update after the snapshot fails (as a kill between the two would leave it: the
/// snapshot recorded, the change not sent): the next attempt sends the change guarded by that
/// snapshot, and takes no second one.
#[test]
fn an_update_that_failed_after_its_snapshot_takes_no_second_snapshot() {
    let mut r = Rig::new("OnUnhealthy", 1);
    r.pve
        .fail_times("PUT", &format!("/qemu/{}/config", r.vmid), 500, "boom", 1);
    r.pve
        .fail_times("POST", &format!("/qemu/{}/config", r.vmid), 500, "boom", 1);
    r.commit("4Gi", "OnUnhealthy", 1);
    r.later(10);
    r.cycle();
    let taken = r.snapshots();
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(r.pve.vm(r.vmid)["config"]["memory"], "2048");
    r.pve.clear_failures();
    for _ in 0..3 {
        r.later(120);
        r.cycle();
        if r.pve.vm(r.vmid)["config"]["memory"] == "4096" {
            r.restarted();
        }
    }
    assert_eq!(r.pve.vm(r.vmid)["config"]["memory"], "4096");
    assert_eq!(r.tasks("qmsnapshot"), 1);
    assert_eq!(r.snapshots(), taken, "kept: 1, the change's");
    assert_eq!(r.ws.condition("web-01", "Healthy").1, "Passing");
}

/// The answer to the rollback's request is lost (596: PVE ran it, proxsync does not know its
/// UPID), as a kill between the request and its answer would leave it: the next cycle asks for
/// the rollback again, a second stop and start of the guest. Found, not fixed: nothing proxsync
/// reads tells a rollback that ended from one that never ran (the config's `parent` is the
/// snapshot's already after the snapshot; only `source=active` task listings are read).
#[test]
fn a_rollback_whose_answer_was_lost_is_not_asked_twice() {
    let mut r = Rig::new("OnUnhealthy", 1);
    r.http.answer(FAILING);
    let taken = r.change("4Gi", "OnUnhealthy", 1);
    r.later(20);
    r.cycle();
    r.pve.lose_answer("POST", "/rollback", 1);
    r.later(45);
    r.cycle();
    assert_eq!(r.tasks("qmrollback"), 1);
    r.restarted();
    for _ in 0..3 {
        r.later(120);
        r.cycle();
    }
    assert_eq!(r.tasks("qmrollback"), 1, "{}", r.ws.status("web-01"));
    let (status, reason, message) = r.ws.condition("web-01", "Stalled");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "RolledBack"));
    assert!(message.contains(&taken), "{message}");
}
