//! The harness behaves like a real PVE cluster where proxsync's crash safety depends on it: the
//! task listing's `source`, the lock window of a slow create or clone, an answer lost after the
//! request was carried out, a backup job's lock and empty task id, a hibernated VM, and a protected
//! VM refusing the removal of its drives. Each test talks to the fake over HTTP, as PVE's clients
//! do.

use crate::common;

use std::time::{Duration, Instant};

use common::{
    FakePve, Scenario, TEMPLATE_NAME, TEMPLATE_VMID, TOKEN_ID, TOKEN_SECRET, token_header,
    verified_client,
};
use serde_json::{Value, json};

/// 1 PVE second = 10 ms: a 100 s task lasts 1 s.
const SCALE: f64 = 0.01;

struct Api {
    client: reqwest::Client,
    base: String,
}

struct Answer {
    status: u16,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {:?}", self.text))
    }
}

impl Api {
    fn new(pve: &FakePve) -> Api {
        Api {
            client: verified_client(&pve.ca_pem()),
            base: pve.api_url(""),
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Answer {
        let resp = req
            .header("Authorization", token_header(TOKEN_ID, TOKEN_SECRET))
            .send()
            .await
            .expect("an answer");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("a body");
        Answer { status, text }
    }

    /// `data` of a GET that must succeed.
    async fn get(&self, path: &str) -> Value {
        let a = self
            .send(self.client.get(format!("{}{path}", self.base)))
            .await;
        assert_eq!(a.status, 200, "GET {path}: {}", a.text);
        a.json()["data"].clone()
    }

    async fn get_raw(&self, path: &str) -> Answer {
        self.send(self.client.get(format!("{}{path}", self.base)))
            .await
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.send(self.client.post(format!("{}{path}", self.base)).json(&body))
            .await
    }

    /// The UPID of a POST that must start a task.
    async fn start_task(&self, path: &str, body: Value) -> String {
        let a = self.post(path, body).await;
        assert_eq!(a.status, 200, "POST {path}: {}", a.text);
        a.json()["data"].as_str().expect("a UPID").to_owned()
    }

    /// Wait (up to 5 s) for the task to stop; its exit status.
    async fn wait(&self, node: &str, upid: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let st = self
                .get(&format!("/nodes/{node}/tasks/{upid}/status"))
                .await;
            if st["status"] == "stopped" {
                return st["exitstatus"].as_str().unwrap_or_default().to_owned();
            }
            assert!(Instant::now() < deadline, "task {upid} still running: {st}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn resource(&self, vmid: u32) -> Option<Value> {
        let list = self.get("/cluster/resources?type=vm").await;
        list.as_array()
            .expect("a list")
            .iter()
            .find(|r| r["vmid"] == json!(vmid))
            .cloned()
    }

    async fn tasks(&self, node: &str, query: &str) -> Vec<Value> {
        let list = self.get(&format!("/nodes/{node}/tasks{query}")).await;
        serde_json::from_value(list).expect("a list")
    }
}

fn with_vm(vmid: u32) -> Scenario {
    Scenario::default().vm(json!({
        "vmid": vmid, "name": format!("vm{vmid}"), "node": "pve1", "status": "stopped",
        "config": {"name": format!("vm{vmid}"), "memory": "1024", "cores": 1,
                   "scsi0": format!("local-lvm:vm-{vmid}-disk-0,size=4G")},
    }))
}

// ------------------------------------------------------------------- (1) task listing

#[tokio::test]
async fn the_task_listing_honours_source_as_pve_does() {
    let mut pve = with_vm(300).start();
    let api = Api::new(&pve);
    // A finished clone (time scale 0: done before its answer).
    let clone = api
        .start_task(
            &format!("/nodes/pve1/qemu/{TEMPLATE_VMID}/clone"),
            json!({"newid": 301, "name": "done"}),
        )
        .await;
    // A start that runs for 1 s.
    pve.set_time_scale(SCALE);
    pve.set_vm(300, json!({"start_secs": 100}));
    let start = api
        .start_task("/nodes/pve1/qemu/300/status/start", json!({}))
        .await;

    // archive (the default): finished tasks only, with their exit status and end time.
    let archive = api.tasks("pve1", "").await;
    assert!(archive.iter().all(|t| t["upid"] != start), "{archive:?}");
    let done = archive
        .iter()
        .find(|t| t["upid"] == clone)
        .expect("the clone is archived");
    assert_eq!(done["status"], "OK");
    assert_eq!(done["type"], "qmclone");
    assert_eq!(
        done["id"],
        TEMPLATE_VMID.to_string(),
        "qmclone's id is the source"
    );
    assert!(done["endtime"].is_u64(), "{done}");
    // Archived tasks split a token's id into user and tokenid.
    assert_eq!(done["user"], "proxsync@pve");
    assert_eq!(done["tokenid"], "gitops");

    // active: the running tasks only, status RUNNING (upper case), no end time.
    let active = api.tasks("pve1", "?source=active").await;
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0]["upid"], start);
    assert_eq!(active[0]["status"], "RUNNING");
    assert_eq!(active[0]["type"], "qmstart");
    assert!(active[0].get("endtime").is_none(), "{}", active[0]);
    // PVE reads the active file as is: the user stays the full token id.
    assert_eq!(active[0]["user"], TOKEN_ID);
    assert_eq!(api.tasks("pve1", "?source=active&vmid=300").await.len(), 1);
    assert!(
        api.tasks("pve1", "?source=active&vmid=301")
            .await
            .is_empty()
    );
    assert!(
        api.tasks("pve1", "?source=active&typefilter=qmclone")
            .await
            .is_empty()
    );

    // all: the active ones first, then the archive.
    let all = api.tasks("pve1", "?source=all").await;
    assert_eq!(all[0]["upid"], start);
    assert!(all.iter().any(|t| t["upid"] == clone));
    // limit and total count over both.
    let a = api.get_raw("/nodes/pve1/tasks?source=all&limit=1").await;
    let body = a.json();
    assert_eq!(body["data"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["total"], json!(all.len()), "{body}");
    let errors = api.tasks("pve1", "?source=all&errors=1").await;
    assert!(errors.iter().all(|t| t["status"] != "OK"), "{errors:?}");

    // Once it ends, the start moves to the archive.
    assert_eq!(api.wait("pve1", &start).await, "OK");
    assert!(api.tasks("pve1", "?source=active").await.is_empty());
    let archive = api.tasks("pve1", "?vmid=300").await;
    assert_eq!(archive.len(), 1, "{archive:?}");
    assert_eq!(archive[0]["status"], "OK");
}

// ------------------------------------------------------- (2) the create and clone lock window

#[tokio::test]
async fn a_slow_create_holds_only_lock_create_until_its_task_ends() {
    let mut pve = FakePve::start(Scenario::default());
    let api = Api::new(&pve);
    pve.set_time_scale(SCALE);
    pve.create_timing(100.0, 0.0, 0.0);
    let upid = api
        .start_task(
            "/nodes/pve1/qemu",
            json!({"vmid": 310, "name": "db", "description": "managed", "tags": "a;b",
                   "memory": 1024, "scsi0": "local-lvm:4"}),
        )
        .await;

    let cfg = api.get("/nodes/pve1/qemu/310/config").await;
    let mut keys: Vec<&str> = cfg
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["digest", "lock"], "{cfg}");
    assert_eq!(cfg["lock"], "create");
    let res = api.resource(310).await.expect("listed while created");
    assert!(res.get("name").is_none(), "no name yet: {res}");
    assert!(res.get("tags").is_none(), "no tags yet: {res}");
    assert_eq!(res["lock"], "create");
    let active = api.tasks("pve1", "?source=active&vmid=310").await;
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0]["upid"], upid);
    assert_eq!(active[0]["type"], "qmcreate");
    assert_eq!(active[0]["status"], "RUNNING");

    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let cfg = api.get("/nodes/pve1/qemu/310/config").await;
    assert_eq!(cfg["name"], "db");
    assert_eq!(cfg["description"], "managed");
    assert_eq!(cfg["tags"], "a;b");
    assert!(cfg.get("lock").is_none(), "{cfg}");
    let res = api.resource(310).await.unwrap();
    assert_eq!(res["name"], "db");
    assert!(res.get("lock").is_none(), "{res}");
}

/// pve-container's vmstatus lists a running container's `maxdisk` as its root file system's
/// `df` total, below the volume's size; a stopped one's as the size in its config.
#[tokio::test]
async fn a_running_containers_listed_disk_is_its_file_systems_size() {
    let mut pve = Scenario::default()
        .ct(json!({"vmid": 330, "name": "ct", "config": {"rootfs": "local-lvm:vm-330-disk-0,size=8G"}}))
        .start();
    let api = Api::new(&pve);
    let listed = |v: &Value| v["maxdisk"].as_u64().unwrap_or(0);
    let stopped = api.resource(330).await.expect("listed");
    assert_eq!(listed(&stopped), 8 << 30, "{stopped}");
    pve.set_ct(330, json!({"status": "running"}));
    let running = api.resource(330).await.expect("listed");
    assert!(
        listed(&running) < 8 << 30 && listed(&running) > 7 << 30,
        "{running}"
    );
}

/// pve-container's `vzcreate` holds `lock: create` only until it has detected the template's
/// OS; then it writes the container's whole config, without the lock, and goes on setting the
/// container up (API2/LXC.pm `create_vm`): the config says nothing of the running task.
#[tokio::test]
async fn a_slow_container_create_writes_its_config_unlocked_before_its_task_ends() {
    let mut pve = Scenario::default()
        .file(
            "local",
            "debian-12-standard_12.7-1_amd64.tar.zst",
            126_000_000,
            "vztmpl",
        )
        .start();
    let api = Api::new(&pve);
    pve.set_time_scale(SCALE);
    pve.ct_timing(50.0, 0.0, 0.0, 0.0, 100.0);
    let upid = api
        .start_task(
            "/nodes/pve1/lxc",
            json!({"vmid": 320, "hostname": "dns", "description": "managed",
                   "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                   "rootfs": "local-lvm:4"}),
        )
        .await;
    let cfg = api.get("/nodes/pve1/lxc/320/config").await;
    assert_eq!(cfg["lock"], "create", "locked at first: {cfg}");
    // Past the OS detection (0.5 s), before the end (1.5 s): written whole, unlocked, running.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let cfg = api.get("/nodes/pve1/lxc/320/config").await;
    assert!(cfg.get("lock").is_none(), "{cfg}");
    assert_eq!(cfg["hostname"], "dns");
    assert_eq!(cfg["description"], "managed");
    let active = api.tasks("pve1", "?source=active&vmid=320").await;
    assert_eq!(active.len(), 1, "the vzcreate still runs: {active:?}");
    assert_eq!(active[0]["type"], "vzcreate");
    assert_eq!(api.wait("pve1", &upid).await, "OK");
}

#[tokio::test]
async fn a_slow_clone_to_another_node_shows_the_temporary_config_on_the_source_node() {
    // PVE clones to another node only from shared storage.
    let mut pve = Scenario::default()
        .storage(
            "shared",
            json!({"type": "dir", "path": "/mnt/pve/shared", "shared": 1, "content": "images"}),
        )
        .vm(json!({
            "vmid": 9100, "name": "shared-template", "node": "pve1", "template": true,
            "config": {"name": "shared-template", "memory": "2048", "tags": "base",
                       "description": "the template",
                       "scsi0": "shared:9100/base-9100-disk-0.qcow2,size=2G"},
        }))
        .start();
    let api = Api::new(&pve);
    pve.set_time_scale(SCALE);
    pve.create_timing(0.0, 100.0, 0.0);
    let upid = api
        .start_task(
            "/nodes/pve1/qemu/9100/clone",
            json!({"newid": 320, "name": "web", "description": "managed", "target": "pve2"}),
        )
        .await;
    // qmclone runs on the source node, its id the source VM.
    assert!(upid.starts_with("UPID:pve1:"), "{upid}");
    assert!(upid.contains(":qmclone:9100:"), "{upid}");

    // The temporary config, on the source node: the `#` comment is GET config's description.
    let cfg = api.get("/nodes/pve1/qemu/320/config").await;
    let mut keys: Vec<&str> = cfg
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["description", "digest", "lock"], "{cfg}");
    assert_eq!(cfg["lock"], "clone");
    assert_eq!(cfg["description"], " qmclone temporary file");
    let missing = api.get_raw("/nodes/pve2/qemu/320/config").await;
    assert_eq!(
        missing.status, 500,
        "not on the target yet: {}",
        missing.text
    );
    let res = api.resource(320).await.expect("listed while cloned");
    assert_eq!(res["node"], "pve1");
    assert_eq!(res["lock"], "clone");
    assert!(res.get("name").is_none(), "no name yet: {res}");
    assert!(res.get("tags").is_none(), "no tags yet: {res}");
    let active = api
        .tasks("pve1", "?source=active&vmid=9100&typefilter=qmclone")
        .await;
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0]["status"], "RUNNING");
    assert!(
        api.tasks("pve1", "?source=active&vmid=320")
            .await
            .is_empty()
    );

    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let cfg = api.get("/nodes/pve2/qemu/320/config").await;
    assert_eq!(cfg["name"], "web");
    assert_eq!(cfg["description"], "managed");
    assert_eq!(cfg["tags"], "base");
    assert!(cfg.get("lock").is_none(), "{cfg}");
    let res = api.resource(320).await.unwrap();
    assert_eq!(res["node"], "pve2");
    assert_eq!(res["name"], "web");
}

#[tokio::test]
async fn a_delayed_answer_comes_after_the_locked_vm_exists() {
    let mut pve = FakePve::start(Scenario::default());
    let api = Api::new(&pve);
    pve.set_time_scale(SCALE);
    pve.create_timing(0.0, 150.0, 50.0);
    let sent = Instant::now();
    let post = tokio::spawn({
        let client = api.client.clone();
        let url = format!("{}/nodes/pve1/qemu/{TEMPLATE_VMID}/clone", api.base);
        async move {
            let a = client
                .post(url)
                .header("Authorization", token_header(TOKEN_ID, TOKEN_SECRET))
                .json(&json!({"newid": 330, "name": "late"}))
                .send()
                .await
                .expect("an answer");
            let status = a.status();
            (
                status,
                a.json::<Value>().await.expect("JSON"),
                Instant::now(),
            )
        }
    });
    // The locked clone appears before the POST is answered.
    let seen = loop {
        if let Some(res) = api.resource(330).await {
            break res;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(2),
            "the clone never appeared"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let seen_at = Instant::now();
    assert_eq!(seen["lock"], "clone");
    assert!(!post.is_finished(), "answered before the VM could be seen");
    let (status, body, answered_at) = post.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        answered_at.duration_since(sent) >= Duration::from_millis(450),
        "the answer took {:?}",
        answered_at.duration_since(sent)
    );
    assert!(answered_at > seen_at);
    let upid = body["data"].as_str().unwrap().to_owned();
    // The task is still copying when the answer comes.
    let st = api.get(&format!("/nodes/pve1/tasks/{upid}/status")).await;
    assert_eq!(st["status"], "running", "{st}");
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    assert_eq!(api.resource(330).await.unwrap()["name"], "late");
}

// ------------------------------------------------------------------- (3) a lost answer

#[tokio::test]
async fn a_lost_answer_still_created_the_vm() {
    let mut pve = FakePve::start(Scenario::default());
    let api = Api::new(&pve);
    pve.lose_answer("POST", &format!("/qemu/{TEMPLATE_VMID}/clone"), 1);
    let a = api
        .post(
            &format!("/nodes/pve1/qemu/{TEMPLATE_VMID}/clone"),
            json!({"newid": 340, "name": "lost"}),
        )
        .await;
    assert_eq!(a.status, 596);
    assert_eq!(a.text, "", "pveproxy sends no body");
    // The VM was made all the same.
    let res = api.resource(340).await.expect("the clone exists");
    assert_eq!(res["name"], "lost");
    assert_eq!(res["node"], "pve1");
    let lost = pve.lost_answers();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0]["status"], 200);
    let upid = serde_json::from_str::<Value>(lost[0]["body"].as_str().unwrap()).unwrap()["data"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(upid.contains(":qmclone:"), "{upid}");
    let done = api.tasks("pve1", "?typefilter=qmclone").await;
    assert!(done.iter().any(|t| t["upid"] == upid.as_str()), "{done:?}");
    // Only `times` answers are lost: the retry gets PVE's own answer.
    let again = api
        .post(
            &format!("/nodes/pve1/qemu/{TEMPLATE_VMID}/clone"),
            json!({"newid": 340, "name": "lost"}),
        )
        .await;
    assert_eq!(again.status, 500, "{}", again.text);
    assert!(
        again.text.contains("config file already exists"),
        "{}",
        again.text
    );
}

#[tokio::test]
async fn a_lost_create_answer_still_made_the_vm() {
    let mut pve = FakePve::start(Scenario::default());
    // A schema template matches too; the status and reason phrase are the caller's.
    pve.lose_answer_with(
        "POST",
        "/nodes/{node}/qemu",
        597,
        "Connection reset by peer",
        1,
    );
    let api = Api::new(&pve);
    let a = api
        .post(
            "/nodes/pve1/qemu",
            json!({"vmid": 341, "name": "made", "memory": 512}),
        )
        .await;
    assert_eq!(a.status, 597, "{}", a.text);
    let cfg = api.get("/nodes/pve1/qemu/341/config").await;
    assert_eq!(cfg["name"], "made");
    let template = api
        .get(&format!("/nodes/pve1/qemu/{TEMPLATE_VMID}/config"))
        .await;
    assert_eq!(
        template["name"], TEMPLATE_NAME,
        "other requests are answered"
    );
}

// ---------------------------------------------------------------------- (4) a backup job

#[tokio::test]
async fn a_backup_job_locks_the_vm_under_a_task_with_an_empty_id() {
    let mut pve = with_vm(350).start();
    let api = Api::new(&pve);
    pve.set_time_scale(SCALE);
    let upid = pve.backup(350, 100.0, false);
    assert!(upid.contains(":vzdump::root@pam:"), "{upid}");

    let cfg = api.get("/nodes/pve1/qemu/350/config").await;
    assert_eq!(cfg["lock"], "backup");
    assert_eq!(api.resource(350).await.unwrap()["lock"], "backup");
    let active = api.tasks("pve1", "?source=active").await;
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0]["upid"], upid);
    assert_eq!(active[0]["type"], "vzdump");
    assert_eq!(active[0]["id"], "");
    assert_eq!(active[0]["status"], "RUNNING");
    // A job's task names no guest: asking for the VM's tasks does not find it.
    assert!(
        api.tasks("pve1", "?source=active&vmid=350")
            .await
            .is_empty()
    );
    // PVE refuses changes while the backup lock is held.
    let a = api
        .send(
            api.client
                .put(format!("{}/nodes/pve1/qemu/350/config", api.base))
                .json(&json!({"cores": 2})),
        )
        .await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(a.text.contains("VM is locked (backup)"), "{}", a.text);

    assert_eq!(api.wait("pve1", &upid).await, "OK");
    assert!(
        api.get("/nodes/pve1/qemu/350/config")
            .await
            .get("lock")
            .is_none()
    );
}

#[tokio::test]
async fn a_one_guest_backup_names_the_vm() {
    let mut pve = with_vm(351).start();
    let api = Api::new(&pve);
    pve.set_time_scale(SCALE);
    let upid = pve.backup(351, 50.0, true);
    assert!(upid.contains(":vzdump:351:root@pam:"), "{upid}");
    let active = api.tasks("pve1", "?source=active&vmid=351").await;
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(api.wait("pve1", &upid).await, "OK");
}

// ------------------------------------------------------------------ (5) a hibernated VM

#[tokio::test]
async fn a_hibernated_vm_is_locked_suspended_with_no_task() {
    let mut pve = with_vm(360).start();
    let api = Api::new(&pve);
    pve.set_vm(360, json!({"status": "running"}));
    let dump = pve.hibernate(360);
    assert_eq!(dump["lock"], "suspended");

    let cfg = api.get("/nodes/pve1/qemu/360/config").await;
    assert_eq!(cfg["lock"], "suspended");
    let st = api.get("/nodes/pve1/qemu/360/status/current").await;
    assert_eq!(st["status"], "stopped", "{st}");
    assert_eq!(st["lock"], "suspended", "{st}");
    assert!(api.tasks("pve1", "?source=active").await.is_empty());
    assert!(api.tasks("pve1", "?source=all&vmid=360").await.is_empty());
    // start resumes it and clears the lock.
    let upid = api
        .start_task("/nodes/pve1/qemu/360/status/start", json!({}))
        .await;
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let cfg = api.get("/nodes/pve1/qemu/360/config").await;
    assert!(cfg.get("lock").is_none(), "{cfg}");
    let st = api.get("/nodes/pve1/qemu/360/status/current").await;
    assert_eq!(st["status"], "running", "{st}");
}

// ------------------------------------------------------------------- power, clone, resize, logs

#[tokio::test]
async fn a_paused_vm_refuses_a_shutdown_without_force_stop() {
    let mut pve = with_vm(310).start();
    let api = Api::new(&pve);
    pve.set_vm(310, json!({"status": "running", "qmpstatus": "paused"}));
    let cur = api.get("/nodes/pve1/qemu/310/status/current").await;
    assert_eq!(
        (cur["status"].as_str(), cur["qmpstatus"].as_str()),
        (Some("running"), Some("paused"))
    );
    let a = api
        .post(
            "/nodes/pve1/qemu/310/status/shutdown",
            json!({"timeout": 30}),
        )
        .await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(
        a.text.contains("VM is paused - cannot shutdown"),
        "{}",
        a.text
    );
    assert_eq!(pve.vm(310)["status"], "running");
    // With forceStop PVE stops it instead.
    let upid = api
        .start_task(
            "/nodes/pve1/qemu/310/status/shutdown",
            json!({"timeout": 30, "forceStop": 1}),
        )
        .await;
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    assert_eq!(pve.vm(310)["status"], "stopped");
}

#[tokio::test]
async fn a_stop_with_overrule_shutdown_aborts_the_running_shutdown() {
    let mut pve = with_vm(311).start();
    let api = Api::new(&pve);
    pve.set_vm(311, json!({"status": "running", "acpi": false}));
    pve.set_time_scale(SCALE);
    // The guest ignores ACPI: the shutdown would hold the config lock for 300 s (3 s here).
    let shutdown = api
        .start_task(
            "/nodes/pve1/qemu/311/status/shutdown",
            json!({"timeout": 300}),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let stop = api
        .start_task(
            "/nodes/pve1/qemu/311/status/stop",
            json!({"overrule-shutdown": 1}),
        )
        .await;
    assert_eq!(api.wait("pve1", &stop).await, "OK");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the stop waited behind the shutdown: {:?}",
        started.elapsed()
    );
    assert_ne!(api.wait("pve1", &shutdown).await, "OK");
    assert_eq!(pve.vm(311)["status"], "stopped");

    // An HA-managed VM refuses the option.
    pve.set_vm(311, json!({"status": "running", "ha_state": "started"}));
    let a = api
        .post(
            "/nodes/pve1/qemu/311/status/stop",
            json!({"overrule-shutdown": 1}),
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.text);
    assert!(
        a.text.contains("Not applicable for HA resources"),
        "{}",
        a.text
    );
}

#[tokio::test]
async fn a_clone_to_another_node_needs_every_source_volume_shared() {
    let mut pve = Scenario::default()
        .storage(
            "ceph",
            json!({"type": "rbd", "content": "images", "shared": 1, "pool": "rbd"}),
        )
        .vm(json!({
            "vmid": 9100, "name": "shared-tpl", "node": "pve1", "status": "stopped", "template": true,
            "config": {"name": "shared-tpl", "scsi0": "ceph:base-9100-disk-0,size=2G",
                       "ide2": "local:iso/debian-12.7.0-amd64-netinst.iso,media=cdrom"},
        }))
        .start();
    let api = Api::new(&pve);
    // The template's disk is local (local-lvm): refused even to a shared target storage.
    let a = api
        .post(
            &format!("/nodes/pve1/qemu/{TEMPLATE_VMID}/clone"),
            json!({"newid": 320, "target": "pve2", "storage": "ceph", "full": 1}),
        )
        .await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(
        a.text
            .contains("can't clone VM to node 'pve2' (VM uses local storage)"),
        "{}",
        a.text
    );
    // A shared disk but an ISO on local storage in its CD-ROM drive: refused too.
    let a = api
        .post(
            "/nodes/pve1/qemu/9100/clone",
            json!({"newid": 321, "target": "pve2", "storage": "ceph", "full": 1}),
        )
        .await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(a.text.contains("VM uses local storage"), "{}", a.text);
    // On the same node, local volumes are fine.
    let upid = api
        .start_task(
            "/nodes/pve1/qemu/9100/clone",
            json!({"newid": 322, "storage": "ceph", "full": 1}),
        )
        .await;
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    assert_eq!(pve.vm(322)["node"], "pve1");
}

#[tokio::test]
async fn resize_is_a_task_that_grows_the_disk_only() {
    let mut pve = with_vm(330).start();
    let api = Api::new(&pve);
    let put = |body: Value| {
        api.send(
            api.client
                .put(format!("{}/nodes/pve1/qemu/330/resize", api.base))
                .json(&body),
        )
    };
    let a = put(json!({"disk": "scsi0", "size": "+2G"})).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let upid = a.json()["data"].as_str().expect("a UPID").to_owned();
    assert!(upid.contains(":resize:330:"), "{upid}");
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    assert!(
        pve.vm(330)["config"]["scsi0"]
            .as_str()
            .unwrap()
            .contains("size=6G"),
        "{}",
        pve.vm(330)["config"]
    );
    let a = put(json!({"disk": "scsi0", "size": "10G"})).await;
    assert_eq!(
        api.wait("pve1", a.json()["data"].as_str().unwrap()).await,
        "OK"
    );
    assert!(
        pve.vm(330)["config"]["scsi0"]
            .as_str()
            .unwrap()
            .contains("size=10G")
    );
    // Shrinking fails in the task.
    let a = put(json!({"disk": "scsi0", "size": "5G"})).await;
    let exit = api.wait("pve1", a.json()["data"].as_str().unwrap()).await;
    assert_eq!(exit, "shrinking disks is not supported");
    // A NIC is no disk: the schema refuses it.
    let a = put(json!({"disk": "net0", "size": "+1G"})).await;
    assert_eq!(a.status, 400, "{}", a.text);
}

#[tokio::test]
async fn a_task_log_answers_its_total() {
    let mut pve = Scenario::default().start();
    let api = Api::new(&pve);
    let upid = pve
        .call(
            "task_with_log",
            json!({"node": "pve1", "lines": 6000, "error": "boom"}),
        )
        .expect("a task");
    let upid = upid.as_str().unwrap().to_owned();
    let a = api
        .get_raw(&format!("/nodes/pve1/tasks/{upid}/log?start=5995&limit=10"))
        .await;
    let body = a.json();
    assert_eq!(body["total"], 6002, "{body}");
    let last = body["data"].as_array().unwrap().last().cloned().unwrap();
    assert_eq!(last["t"], "TASK ERROR: boom");
    assert_eq!(last["n"], 6002);
}

// ------------------------------------------------------------------- the VMID range

/// datacenter.cfg's `next-id` as pve-manager (`PVE/API2/Cluster.pm` `set_options`, `nextid`)
/// and pve-cluster (`src/PVE/DataCenterConfig.pm` `next_id_format`) keep it: set with
/// `PUT /cluster/options`, answered parsed by `GET /cluster/options`, honoured by
/// `GET /cluster/nextid` (lower inclusive, upper exclusive).
#[tokio::test]
async fn the_next_id_range_is_kept_and_honoured_as_pve_does() {
    let pve = with_vm(5000).start();
    let api = Api::new(&pve);
    let put = |form: Vec<(&'static str, &'static str)>| {
        api.send(
            api.client
                .put(format!("{}/cluster/options", api.base))
                .form(&form),
        )
    };
    assert_eq!(api.get("/cluster/nextid").await, json!("100"));
    let options = api.get("/cluster/options").await;
    assert!(options.get("next-id").is_none(), "{options}");
    assert_eq!(options["mac_prefix"], "BC:24:11", "PVE's default OUI");

    let a = put(vec![("next-id", "lower=5000,upper=5003")]).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let options = api.get("/cluster/options").await;
    assert_eq!(
        options["next-id"],
        json!({"lower": "5000", "upper": "5003"})
    );
    assert_eq!(api.get("/cluster/nextid").await, json!("5001"));

    // The schema's bounds, and the boundary rule datacenter.cfg's writer checks.
    let a = put(vec![("next-id", "lower=50")]).await;
    assert_eq!(a.status, 400, "{}", a.text);
    let a = put(vec![("next-id", "lower=6000,upper=5000")]).await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(a.text.contains("boundary rule broken"), "{}", a.text);

    // A full range: PVE's error; `delete` restores the defaults.
    let a = put(vec![("next-id", "lower=5000,upper=5001")]).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let a = api.get_raw("/cluster/nextid").await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(
        a.text
            .contains("unable to get any free VMID in range [5000, 5001]"),
        "{}",
        a.text
    );
    let a = put(vec![("delete", "next-id")]).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(api.get("/cluster/nextid").await, json!("100"));
}

// ------------------------------------------------------------------- protection

/// A protected VM's drives cannot be removed, and the refusal comes before any change of the
/// same update: qemu-server `PVE/API2/Qemu.pm` `update_vm_api` runs its `delete` loop first and
/// calls `PVE::QemuConfig->check_protection($conf, "can't remove drive '$opt'")` (for
/// `unusedN`: `"can't remove unused disk '$drive->{file}'"`) on the config as it is, and
/// pve-guest-common `PVE/AbstractConfig.pm` `check_protection` dies `"$err_msg - protection
/// mode enabled"`. A `protection=0` in the same update is written only after that loop, so it
/// does not help; a separate update first does. A key that is not set is skipped (PVE warns
/// "cannot delete ... not set"). The VM's destroy is refused too (`destroy_vm`'s early checks:
/// `can't remove VM N - protection mode enabled`), as fakepve 0.5.0 already does.
#[tokio::test]
async fn a_protected_vm_refuses_removing_its_drives_and_itself() {
    let mut pve = Scenario::default()
        .vm(json!({
            "vmid": 340, "name": "vm340", "node": "pve1", "status": "stopped",
            "config": {"name": "vm340", "memory": "1024", "cores": 1, "protection": 1,
                       "scsi0": "local-lvm:vm-340-disk-0,size=4G",
                       "scsi1": "local-lvm:vm-340-disk-1,size=2G",
                       "unused0": "local-lvm:vm-340-disk-2"},
        }))
        .start();
    let api = Api::new(&pve);
    let put = |body: Value| {
        api.send(
            api.client
                .put(format!("{}/nodes/pve1/qemu/340/config", api.base))
                .json(&body),
        )
    };
    let refused = "can't remove drive 'scsi1' - protection mode enabled";
    let a = put(json!({"delete": "scsi1"})).await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(a.text.contains(refused), "{}", a.text);
    let a = put(json!({"delete": "unused0"})).await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(
        a.text.contains(
            "can't remove unused disk 'local-lvm:vm-340-disk-2' - protection mode enabled"
        ),
        "{}",
        a.text
    );
    // Clearing protection in the same update does not help: the delete loop runs first.
    let a = put(json!({"protection": 0, "delete": "scsi1"})).await;
    assert_eq!(a.status, 500, "{}", a.text);
    // The asynchronous form fails in its task, and the new disk of the same update is not made.
    let upid = api
        .start_task(
            "/nodes/pve1/qemu/340/config",
            json!({"scsi2": "local-lvm:1", "delete": "scsi1"}),
        )
        .await;
    assert_eq!(api.wait("pve1", &upid).await, refused);
    let cfg = pve.vm(340)["config"].clone();
    assert!(cfg["scsi1"].is_string() && cfg["scsi2"].is_null(), "{cfg}");
    // A key that is not set is no removal; other changes go through.
    let a = put(json!({"delete": "scsi5", "onboot": 1})).await;
    assert_eq!(a.status, 200, "{}", a.text);
    // The VM itself.
    let a = api
        .send(
            api.client
                .delete(format!("{}/nodes/pve1/qemu/340", api.base)),
        )
        .await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(
        a.text
            .contains("can't remove VM 340 - protection mode enabled"),
        "{}",
        a.text
    );
    // Cleared by an update of its own first, the drive is removed (detached to unusedN).
    assert_eq!(put(json!({"protection": 0})).await.status, 200);
    let a = put(json!({"delete": "scsi1"})).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let cfg = pve.vm(340)["config"].clone();
    assert!(cfg["scsi1"].is_null(), "{cfg}");
    assert_eq!(cfg["unused1"], "local-lvm:vm-340-disk-1", "{cfg}");
}

/// The cluster's root CA as pve-manager `PVE/API2/Certificates.pm` `info` lists it
/// (`permissions => { user => 'all' }`, so a token with no privilege at all reads it): file name
/// `pve-root-ca.pem`, the SHA-256 fingerprint of pve-common `PVE/Certificate.pm`
/// `get_certificate_info` (upper-case colon hex), the same from every node (pve-cluster
/// `src/PVE/Cluster/Setup.pm` keeps it on the cluster file system).
#[tokio::test]
async fn every_node_lists_the_clusters_root_ca_for_any_user() {
    let mut pve = FakePve::start(Scenario::default());
    // ACLs now apply: the token holds nothing.
    pve.grant("someone@pve", "/vms", &["VM.Audit"]);
    let api = Api::new(&pve);
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(&pve.ca_pem()).expect("PEM");
    let want =
        proxsync::pve::tls::format_fingerprint(&proxsync::pve::tls::fingerprint(der.as_ref()));
    let mut seen = Vec::new();
    for node in ["pve1", "pve2"] {
        let certs = api.get(&format!("/nodes/{node}/certificates/info")).await;
        let root = certs
            .as_array()
            .expect("a list")
            .iter()
            .find(|c| c["filename"] == "pve-root-ca.pem")
            .unwrap_or_else(|| panic!("{certs}"))
            .clone();
        let fp = root["fingerprint"]
            .as_str()
            .expect("a fingerprint")
            .to_string();
        assert_eq!(
            fp, want,
            "the fingerprint of the certificate the tests trust"
        );
        assert_eq!(fp, fp.to_uppercase());
        assert!(
            root["pem"]
                .as_str()
                .is_some_and(|p| p.contains("BEGIN CERTIFICATE"))
        );
        seen.push(fp);
    }
    assert_eq!(seen[0], seen[1], "one root CA per cluster");
}

/// A node that is not in a cluster: pve-manager `PVE/API2/Cluster.pm` `get_status` answers
/// "fake entry for local node if no cluster defined": no `cluster` entry, the node with
/// `nodeid` 0, `local` and `online`. After `pvecm create`, a `cluster` entry with its name.
#[tokio::test]
async fn a_standalone_node_answers_no_cluster_entry() {
    let mut pve = FakePve::start(
        Scenario::default()
            .set("nodes", json!([{"name": "pve1", "online": true}]))
            .set("standalone", json!(true)),
    );
    let api = Api::new(&pve);
    let status = api.get("/cluster/status").await;
    assert_eq!(
        status,
        json!([{"type": "node", "id": "node/pve1", "name": "pve1", "ip": "192.0.2.11",
                "local": 1, "nodeid": 0, "online": 1, "level": ""}])
    );
    pve.call("set_standalone", json!({"on": false}))
        .expect("a cluster made");
    let status = api.get("/cluster/status").await;
    let entries = status.as_array().expect("a list");
    assert_eq!(entries[0]["type"], "cluster", "{status}");
    assert!(entries[0]["name"].is_string(), "{status}");
    assert_eq!(entries.len(), 2, "{status}");
    pve.add_node("pve2", true);
    let err = pve.call("set_standalone", json!({"on": true})).unwrap_err();
    assert!(err.contains("a standalone node is one node"), "{err}");
}

// ------------------------------------------------------------------- a qemu migration

/// qemu-server `PVE/QemuMigrate.pm` `phase1`: `$conf->{lock} = 'migrate'` written before the
/// volumes move, so the VM's config shows the lock for the whole migration (fakepve 0.5.0 sets
/// none). `PVE/API2/Qemu.pm` `migrate_vm`: a running VM without `online` is refused, a stopped
/// one with `online` is migrated offline (`warn "VM isn't running. Doing offline migration
/// instead.\n" if $param->{online}; $param->{online} = 0;`, 8.4 and 9.x alike).
#[tokio::test]
async fn a_migration_holds_the_migrate_lock_and_online_is_ignored_for_a_stopped_vm() {
    let mut pve = with_vm(300).start();
    let api = Api::new(&pve);
    pve.set_time_scale(SCALE);
    pve.migrate_timing(100.0);
    let upid = api
        .start_task(
            "/nodes/pve1/qemu/300/migrate",
            json!({"target": "pve2", "online": 1}),
        )
        .await;
    // While the task runs the config carries the lock.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let cfg = api.get("/nodes/pve1/qemu/300/config").await;
        if cfg["lock"] == "migrate" {
            break;
        }
        assert!(Instant::now() < deadline, "no migrate lock: {cfg}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let moved = api.resource(300).await.expect("listed");
    assert_eq!(moved["node"], "pve2", "{moved}");
    let cfg = api.get("/nodes/pve2/qemu/300/config").await;
    assert!(cfg.get("lock").is_none(), "{cfg}");

    // A running VM without `online`: refused before any task.
    pve.set_time_scale(0.0);
    pve.set_vm(300, json!({"status": "running"}));
    let a = api
        .post("/nodes/pve2/qemu/300/migrate", json!({"target": "pve1"}))
        .await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(
        a.text.contains("can't migrate running VM without --online"),
        "{}",
        a.text
    );
}

// ------------------------------------------------------------------- machine pinning

/// qemu-server `PVE/QemuServer/Machine.pm` `check_and_pin_machine_string`, called by
/// `PVE/API2/Qemu.pm` `create_vm` ("always pin Windows' machine version on create") and by
/// `update_vm_api` on an `ostype` change unless `machine` is set in the same request: a Windows
/// ostype (`PVE/QemuServer/Helpers.pm` `windows_version`) turns `q35`/`pc`/no machine into
/// the installed QEMU's versioned type with its highest `+pveN` (`$PVE_MACHINE_VERSION`):
/// `pc-q35-10.0+pve1` on PVE 9.x (QEMU 10.0), `pc-q35-9.2+pve1` on 8.4 (QEMU 9.2).
#[tokio::test]
async fn a_windows_vm_gets_a_pinned_machine_as_pve_pins_it() {
    for (version, pinned) in [("9.1.2", "10.0+pve1"), ("8.4.1", "9.2+pve1")] {
        let pve = Scenario::default().set("version", version.into()).start();
        let api = Api::new(&pve);
        let create = |vmid: u32, extra: Value| {
            let mut body = json!({"vmid": vmid, "name": format!("vm{vmid}"), "memory": 512});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            api.start_task("/nodes/pve1/qemu", body)
        };
        let machine = |vmid: u32| {
            let api = &api;
            async move {
                api.get(&format!("/nodes/pve1/qemu/{vmid}/config"))
                    .await
                    .get("machine")
                    .cloned()
                    .unwrap_or(Value::Null)
            }
        };
        create(401, json!({"ostype": "win11", "machine": "q35"})).await;
        assert_eq!(machine(401).await, json!(format!("pc-q35-{pinned}")));
        create(402, json!({"ostype": "win10"})).await;
        assert_eq!(machine(402).await, json!(format!("pc-i440fx-{pinned}")));
        create(403, json!({"ostype": "win11", "machine": "pc-q35-8.1"})).await;
        assert_eq!(
            machine(403).await,
            json!("pc-q35-8.1"),
            "a versioned type stays"
        );
        create(404, json!({"ostype": "l26", "machine": "q35"})).await;
        assert_eq!(machine(404).await, json!("q35"), "only Windows is pinned");

        // An ostype change pins too, unless the same request sets the machine.
        let put = |vmid: u32, form: Vec<(&'static str, &'static str)>| {
            api.send(
                api.client
                    .put(format!("{}/nodes/pve1/qemu/{vmid}/config", api.base))
                    .form(&form),
            )
        };
        assert_eq!(put(404, vec![("ostype", "win11")]).await.status, 200);
        assert_eq!(machine(404).await, json!(format!("pc-q35-{pinned}")));
        create(405, json!({"ostype": "l26", "machine": "q35"})).await;
        let a = put(405, vec![("ostype", "win11"), ("machine", "q35")]).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert_eq!(machine(405).await, json!("q35"));
    }
}

// ------------------------------------------------------- permissions on a VM's options

/// Everything a token needs to create and change VMs, but `/`, the SDN paths and mappings.
fn vm_grants(scenario: Scenario) -> Scenario {
    scenario
        .grant(
            TOKEN_ID,
            "/vms",
            &[
                "VM.Allocate",
                "VM.Audit",
                "VM.Config.CPU",
                "VM.Config.Memory",
                "VM.Config.Disk",
                "VM.Config.Network",
                "VM.Config.Options",
                "VM.Config.HWType",
                "VM.PowerMgmt",
                "VM.Clone",
            ],
        )
        .grant(
            TOKEN_ID,
            "/storage",
            &["Datastore.AllocateSpace", "Datastore.Audit"],
        )
        .grant(TOKEN_ID, "/nodes", &["Sys.Audit"])
}

impl Api {
    async fn put_form(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        self.send(self.client.put(format!("{}{path}", self.base)).form(form))
            .await
    }

    async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        self.send(self.client.post(format!("{}{path}", self.base)).form(form))
            .await
    }
}

/// qemu-server `PVE/API2/Qemu.pm` `$check_vm_modify_config_perm`: "special case for startup
/// since it changes host behaviour", `$rpcenv->check_full($authuser, "/", ['Sys.Modify'])`,
/// for create_vm and update_vm_api (a deleted `startup` too); in qemu-server since 2016, the
/// same in 8.4 (stable-bookworm) and 9.x.
#[tokio::test]
async fn startup_needs_sys_modify_on_root_at_create_and_update() {
    let pve = vm_grants(Scenario::default()).start();
    let api = Api::new(&pve);
    let a = api
        .post_form(
            "/nodes/pve1/qemu",
            &[("vmid", "410"), ("memory", "512"), ("startup", "order=1")],
        )
        .await;
    assert_eq!(a.status, 403, "{}", a.text);
    assert!(
        api.resource(410).await.is_none(),
        "refused before anything exists"
    );
    let a = api
        .post_form("/nodes/pve1/qemu", &[("vmid", "410"), ("memory", "512")])
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let a = api
        .put_form("/nodes/pve1/qemu/410/config", &[("startup", "order=2")])
        .await;
    assert_eq!(a.status, 403, "{}", a.text);
    assert!(
        a.text.contains("Sys.Modify") || a.text.is_empty(),
        "{}",
        a.text
    );

    let pve = vm_grants(Scenario::default())
        .grant(TOKEN_ID, "/", &["Sys.Modify"])
        .start();
    let api = Api::new(&pve);
    let a = api
        .post_form(
            "/nodes/pve1/qemu",
            &[("vmid", "410"), ("memory", "512"), ("startup", "order=1")],
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let a = api
        .put_form("/nodes/pve1/qemu/410/config", &[("delete", "startup")])
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
}

/// qemu-server `PVE/API2/Qemu.pm` `$check_cpu_model_access`: a custom model (`custom-NAME`)
/// needs Mapping.Use on /mapping/cpu/NAME from qemu-server 9.1.13 (commit 229a32ed "api: gate
/// VM custom CPU model assignment with Mapping.Use"; pve-manager 9.1.15 is the first to depend
/// on it), and Sys.Audit on /nodes before (8.4: stable-bookworm). Keeping the VM's current model
/// needs nothing.
#[tokio::test]
async fn a_custom_cpu_model_needs_mapping_use_from_9_1_15() {
    async fn create(api: &Api) -> Answer {
        api.post_form(
            "/nodes/pve1/qemu",
            &[("vmid", "420"), ("memory", "512"), ("cpu", "custom-fast")],
        )
        .await
    }
    // 9.1.15: Sys.Audit on /nodes (vm_grants) is not enough.
    let pve = vm_grants(Scenario::default().set("version", "9.1.15".into())).start();
    let api = Api::new(&pve);
    let a = create(&api).await;
    assert_eq!(a.status, 403, "{}", a.text);
    let pve = vm_grants(Scenario::default().set("version", "9.1.15".into()))
        .grant(TOKEN_ID, "/mapping/cpu/fast", &["Mapping.Use"])
        .start();
    let api = Api::new(&pve);
    assert_eq!(create(&api).await.status, 200);
    // Another option of the same model: no check.
    let a = api
        .put_form(
            "/nodes/pve1/qemu/420/config",
            &[("cpu", "custom-fast,flags=+aes")],
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);

    // Before: Sys.Audit on /nodes.
    let pve = vm_grants(Scenario::default().set("version", "8.4.1".into())).start();
    let api = Api::new(&pve);
    assert_eq!(create(&api).await.status, 200);
}

/// pve-guest-common `PVE/GuestHelpers.pm` `check_vnet_access` (through qemu-server
/// `check_bridge_access` at create, update and for a clone's source): SDN.Use on
/// /sdn/zones/localnetwork/BRIDGE for an untagged NIC, on .../BRIDGE/TAG for its `tag`, and on
/// each VLAN of `trunks` (not the bridge). pve-manager `PVE/API2/Network.pm` lists a bridge only
/// to a caller with SDN.Audit or SDN.Use on it or on a VLAN below it (`check_sdn_bridge`).
#[tokio::test]
async fn a_nic_needs_sdn_use_on_its_bridge_or_vlan_path() {
    async fn bridges(api: &Api) -> Vec<String> {
        let list = api.get("/nodes/pve1/network?type=any_bridge").await;
        list.as_array()
            .unwrap()
            .iter()
            .map(|i| i["iface"].as_str().unwrap().to_string())
            .collect()
    }
    async fn create(api: &Api, vmid: &str, net: &str) -> u16 {
        api.post_form(
            "/nodes/pve1/qemu",
            &[("vmid", vmid), ("memory", "512"), ("net0", net)],
        )
        .await
        .status
    }
    // A grant on /sdn/zones (doctor's old path) reaches every bridge and VLAN below it.
    let pve = vm_grants(Scenario::default())
        .grant(TOKEN_ID, "/sdn/zones/localnetwork", &["SDN.Use"])
        .start();
    let api = Api::new(&pve);
    assert_eq!(bridges(&api).await, ["vmbr0", "vmbr1"]);
    assert_eq!(create(&api, "430", "virtio,bridge=vmbr1,tag=20").await, 200);

    // A VLAN's grant: that tag only, and the bridge is listed.
    let pve = vm_grants(Scenario::default())
        .grant(TOKEN_ID, "/sdn/zones/localnetwork/vmbr0/20", &["SDN.Use"])
        .start();
    let api = Api::new(&pve);
    assert_eq!(bridges(&api).await, ["vmbr0"]);
    assert_eq!(create(&api, "431", "virtio,bridge=vmbr0,tag=20").await, 200);
    assert_eq!(create(&api, "432", "virtio,bridge=vmbr0").await, 403);
    assert_eq!(create(&api, "433", "virtio,bridge=vmbr0,tag=21").await, 403);
    assert_eq!(
        create(&api, "434", "virtio,bridge=vmbr0,trunks=20;21").await,
        403,
        "every trunk VLAN"
    );
    let a = api
        .put_form(
            "/nodes/pve1/qemu/431/config",
            &[("net0", "virtio,bridge=vmbr1")],
        )
        .await;
    assert_eq!(a.status, 403, "an update too: {}", a.text);

    // No SDN grant: no bridge is listed at all.
    let pve = vm_grants(Scenario::default()).start();
    let api = Api::new(&pve);
    assert!(bridges(&api).await.is_empty());
}

/// qemu-server `PVE/QemuServer.pm` `print_netdevice_full` at start, for a virtio NIC on a
/// bridge: `mtu` 1 (or none) is the bridge's; below 576 or above the bridge's MTU
/// (`read_bridge_mtu`, 1500 unless /etc/network/interfaces sets one) the start dies.
#[tokio::test]
async fn a_virtio_mtu_above_the_bridge_s_fails_the_start() {
    let mut pve = with_vm(440).start();
    let api = Api::new(&pve);
    async fn start(api: &Api) -> String {
        let upid = api
            .start_task("/nodes/pve1/qemu/440/status/start", json!({}))
            .await;
        api.wait("pve1", &upid).await
    }
    async fn set_net(api: &Api, net: &str) {
        let a = api
            .put_form("/nodes/pve1/qemu/440/config", &[("net0", net)])
            .await;
        assert_eq!(a.status, 200, "{}", a.text);
    }
    set_net(&api, "virtio,bridge=vmbr0,mtu=9000").await;
    let status = start(&api).await;
    assert!(
        status.contains("MTU '9000' is bigger than the bridge MTU '1500'"),
        "{status}"
    );
    set_net(&api, "virtio,bridge=vmbr0,mtu=500").await;
    assert!(
        start(&api)
            .await
            .contains("MTU '500' is smaller than the IP minimum MTU '576'")
    );
    // The listing shows a configured MTU; then 9000 fits.
    pve.call("set_bridge_mtu", json!({"bridge": "vmbr0", "mtu": 9000}))
        .unwrap();
    let list = api.get("/nodes/pve1/network?type=any_bridge").await;
    assert_eq!(list[0]["mtu"], 9000, "{list}");
    set_net(&api, "virtio,bridge=vmbr0,mtu=9000").await;
    assert_eq!(start(&api).await, "OK");
}

// ------------------------------------------------------------------- slow volume allocation

/// Proxy answers: pveproxy forwards with a 30 s timeout (pve-http-server
/// `PVE/APIServer/AnyEvent.pm` `proxy_request`, `timeout => 30`) and answers 596 without a body
/// when it passes, though the node carried the request out. qemu-server's synchronous
/// `PUT .../config` makes a new volume (an EFI disk, a TPM state) before it answers; the
/// asynchronous `POST` does it in a `qmconfig` task.
#[tokio::test]
async fn a_slow_allocation_under_a_synchronous_put_loses_its_answer() {
    let pve = with_vm(450)
        .storage("local-lvm", json!({"alloc_secs": 60}))
        .start();
    let api = Api::new(&pve);
    let a = api
        .put_form(
            "/nodes/pve1/qemu/450/config",
            &[("efidisk0", "local-lvm:1,efitype=4m")],
        )
        .await;
    assert_eq!(a.status, 596, "{}", a.text);
    assert!(a.text.is_empty(), "no body: {}", a.text);
    let cfg = api.get("/nodes/pve1/qemu/450/config").await;
    assert!(
        cfg["efidisk0"]
            .as_str()
            .is_some_and(|v| v.starts_with("local-lvm:vm-450-disk-")),
        "carried out all the same: {cfg}"
    );
    let a = api
        .post_form(
            "/nodes/pve1/qemu/450/config",
            &[("tpmstate0", "local-lvm:1,version=v2.0")],
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let upid = a.json()["data"].as_str().expect("a task").to_owned();
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let cfg = api.get("/nodes/pve1/qemu/450/config").await;
    assert!(cfg["tpmstate0"].is_string(), "{cfg}");
}

// ------------------------------------------------------------------- HA groups and rules

/// pve-ha-manager 5.x (PVE 9) `src/PVE/API2/HA/Resources.pm`: with no HA group left
/// (`PVE::HA::Config::have_groups_been_migrated`, also a new 9.x cluster) create and update
/// die "invalid parameter 'group': ha groups have been migrated to rules", and reads leave
/// `group` out (`$api_copy_config`); `API2/HA/Rules.pm` keeps node-affinity rules, whose
/// resources must be HA resources. PVE 8 (pve-ha-manager 4.x, stable-4) has groups
/// (`API2/HA/Groups.pm`) and no rules.
#[tokio::test]
async fn pve_9_replaced_ha_groups_with_rules() {
    let pve = with_vm(460).start(); // fakepve's default version: 9.0.10
    let api = Api::new(&pve);
    let a = api
        .post_form(
            "/cluster/ha/resources",
            &[("sid", "vm:460"), ("group", "prod")],
        )
        .await;
    assert_eq!(a.status, 500, "{}", a.text);
    let a = api.get_raw("/cluster/ha/groups").await;
    assert_eq!(a.status, 500, "{}", a.text);
    // A rule needs the resource first.
    let rule = [
        ("rule", "web"),
        ("type", "node-affinity"),
        ("resources", "vm:460"),
        ("nodes", "pve1:2,pve2"),
        ("comment", "made by hand"),
    ];
    let a = api.post_form("/cluster/ha/rules", &rule).await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert_eq!(
        api.post_form("/cluster/ha/resources", &[("sid", "vm:460")])
            .await
            .status,
        200
    );
    assert_eq!(api.post_form("/cluster/ha/rules", &rule).await.status, 200);
    let read = api.get("/cluster/ha/rules/web").await;
    assert_eq!(read["nodes"], "pve1:2,pve2", "{read}");
    assert_eq!(read["resources"], "vm:460", "{read}");
    assert_eq!(read["strict"], 0, "{read}");
    assert!(read["digest"].is_string(), "{read}");
    let res = api.get("/cluster/ha/resources/vm:460").await;
    assert!(res.get("group").is_none(), "{res}");

    // PVE 8: groups, a resource in one, no rules.
    let pve = with_vm(461).set("version", "8.4.1".into()).start();
    let api = Api::new(&pve);
    let a = api
        .post_form(
            "/cluster/ha/groups",
            &[("group", "prod"), ("nodes", "pve1:2,pve2")],
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let a = api
        .post_form(
            "/cluster/ha/resources",
            &[("sid", "vm:461"), ("group", "prod")],
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(
        api.get("/cluster/ha/resources/vm:461").await["group"],
        "prod"
    );
    assert_eq!(
        api.get("/cluster/ha/groups/prod").await["nodes"],
        "pve1:2,pve2"
    );
    let a = api
        .send(
            api.client
                .delete(format!("{}/cluster/ha/groups/prod", api.base)),
        )
        .await;
    assert_eq!(a.status, 500, "in use: {}", a.text);
    assert_eq!(api.get_raw("/cluster/ha/rules").await.status, 501);
}

/// pve-ha-manager 5.0.7+ (PVE 9.1) `API2/HA/Resources.pm` `delete`: `purge` defaults to 1 and
/// `PVE::HA::Config::delete_service_from_config` then removes the resource from every rule,
/// deleting a rule left without resources; `purge=0` leaves the rules (commits c952c63 "api:
/// add purge parameter for resource deletion", 8102199 "fix #6613"). Before (9.0, and 8.x)
/// the DELETE has no `purge` (refused by the schema) and touches no rule.
#[tokio::test]
async fn removing_an_ha_resource_purges_rules_unless_told_not_to() {
    let mut pve = with_vm(470)
        .vm(json!({"vmid": 471, "name": "vm471", "node": "pve1", "status": "stopped"}))
        .set("version", "9.1.2".into())
        .start();
    let api = Api::new(&pve);
    for sid in ["vm:470", "vm:471"] {
        assert_eq!(
            api.post_form("/cluster/ha/resources", &[("sid", sid)])
                .await
                .status,
            200
        );
    }
    pve.call(
        "set_ha_rule",
        json!({"rule": "alone", "resources": "vm:470", "nodes": "pve1"}),
    )
    .unwrap();
    pve.call(
        "set_ha_rule",
        json!({"rule": "shared", "resources": "vm:470,vm:471", "nodes": "pve2"}),
    )
    .unwrap();
    let delete = |sid: &str, query: &str| {
        api.send(
            api.client
                .delete(format!("{}/cluster/ha/resources/{sid}{query}", api.base)),
        )
    };
    assert_eq!(delete("vm:470", "?purge=0").await.status, 200);
    let rules = pve.call("ha_rules", json!({})).unwrap();
    assert_eq!(rules["alone"]["resources"], json!(["vm:470"]), "{rules}");

    assert_eq!(
        api.post_form("/cluster/ha/resources", &[("sid", "vm:470")])
            .await
            .status,
        200
    );
    assert_eq!(delete("vm:470", "").await.status, 200);
    let rules = pve.call("ha_rules", json!({})).unwrap();
    assert!(
        rules.get("alone").is_none(),
        "deleted with its only resource: {rules}"
    );
    assert_eq!(rules["shared"]["resources"], json!(["vm:471"]), "{rules}");

    for version in ["9.0.10", "8.4.1"] {
        let pve = with_vm(472).set("version", version.into()).start();
        let api = Api::new(&pve);
        assert_eq!(
            api.post_form("/cluster/ha/resources", &[("sid", "vm:472")])
                .await
                .status,
            200
        );
        let a = api
            .send(
                api.client
                    .delete(format!("{}/cluster/ha/resources/vm:472?purge=0", api.base)),
            )
            .await;
        assert_eq!(a.status, 400, "{version}: {}", a.text);
        assert!(a.text.contains("purge"), "{}", a.text);
    }
}

/// pve-ha-manager `API2/HA/Resources.pm` `check_service_state`: a service in `error` takes
/// no change but `state=disabled` ("service 'vm:N' in error state, must be disabled and fixed
/// first"); qemu-server's `hastart` task runs `ha-manager set vm:N --state started`, which
/// fails the same way. Disabled, it is `stopped` and may be started again.
#[tokio::test]
async fn an_ha_resource_in_error_state_must_be_disabled_first() {
    let mut pve = with_vm(480).start();
    let api = Api::new(&pve);
    assert_eq!(
        api.post_form(
            "/cluster/ha/resources",
            &[("sid", "vm:480"), ("state", "stopped")]
        )
        .await
        .status,
        200
    );
    pve.set_vm(480, json!({"ha_state": "error"}));
    let put = |form: Vec<(&'static str, &'static str)>| {
        api.send(
            api.client
                .put(format!("{}/cluster/ha/resources/vm:480", api.base))
                .form(&form),
        )
    };
    let a = put(vec![("state", "started")]).await;
    assert_eq!(a.status, 500, "{}", a.text);
    let a = put(vec![("max_restart", "2")]).await;
    assert_eq!(a.status, 500, "any change: {}", a.text);
    let upid = api
        .start_task("/nodes/pve1/qemu/480/status/start", json!({}))
        .await;
    let status = api.wait("pve1", &upid).await;
    assert!(
        status.contains("ha-manager set vm:480 --state started"),
        "{status}"
    );
    let log = api
        .get(&format!("/nodes/pve1/tasks/{upid}/log"))
        .await
        .to_string();
    assert!(
        log.contains("in error state, must be disabled and fixed first"),
        "{log}"
    );

    assert_eq!(put(vec![("state", "disabled")]).await.status, 200);
    assert_eq!(api.resource(480).await.unwrap()["hastate"], "stopped");
    assert_eq!(put(vec![("state", "started")]).await.status, 200);
    assert_eq!(api.resource(480).await.unwrap()["status"], "running");
}

/// qemu-server `vm_shutdown` of an HA-managed VM: an `hastop` task running `ha-manager
/// crm-command stop vm:N <timeout>` (`$param->{timeout} // 60`; `vm_stop`: 0); the CRM sets the
/// resource's state to `stopped` (`Manager.pm`) and the LRM stops it with
/// `PVE/HA/Resources/PVEVM.pm` `shutdown`: `timeout` and `forceStop => 1`, so a guest that
/// does not power off is stopped hard. `POST .../status/reboot` is not an HA request
/// (`vm_reboot`): a clean shutdown that fails at its timeout, never a hard stop.
#[tokio::test]
async fn the_ha_stack_stops_a_guest_hard_after_the_timeout() {
    let mut pve = with_vm(490).start();
    let api = Api::new(&pve);
    assert_eq!(
        api.post_form("/cluster/ha/resources", &[("sid", "vm:490")])
            .await
            .status,
        200
    );
    assert_eq!(api.resource(490).await.unwrap()["status"], "running");
    // A guest that ignores ACPI: the reboot gives up, the VM keeps running.
    pve.set_vm(490, json!({"acpi": false}));
    let upid = api
        .start_task("/nodes/pve1/qemu/490/status/reboot", json!({"timeout": 30}))
        .await;
    assert_ne!(api.wait("pve1", &upid).await, "OK");
    assert_eq!(api.resource(490).await.unwrap()["status"], "running");
    assert_eq!(pve.call("hard_stops", json!({})).unwrap(), json!({}));

    // The shutdown hands it to the HA stack, which stops it hard.
    let upid = api
        .start_task(
            "/nodes/pve1/qemu/490/status/shutdown",
            json!({"timeout": 30}),
        )
        .await;
    assert!(upid.contains(":hastop:"), "{upid}");
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    assert_eq!(api.resource(490).await.unwrap()["status"], "stopped");
    assert_eq!(
        pve.call("hard_stops", json!({})).unwrap(),
        json!({"490": 1})
    );
    assert_eq!(
        pve.call("ha_resources", json!({})).unwrap()["490"]["state"],
        "stopped"
    );
}

/// pve-ha-manager's service ids: a container is `ct:N` (`PVE/HA/Resources/PVECT.pm`
/// `exists`: "resource 'ct:N' - guest with ID N is not a container" for a VM, and the other way
/// round), listed with `type: ct`; adding it with state `started` makes the CRM start it.
/// pve-container's `vm_stop` / `vm_start` of an HA-managed container are the `hastop` and
/// `hastart` requests a VM's are, and set the resource's state.
#[tokio::test]
async fn a_container_is_an_ha_resource_as_ct_n() {
    let mut pve = with_vm(500)
        .ct(json!({"vmid": 501, "name": "ct501", "config": {"rootfs": "local-lvm:vm-501-disk-0,size=8G"}}))
        .start();
    let api = Api::new(&pve);
    let api = &api;
    let add = |sid: &'static str| async move {
        api.post_form("/cluster/ha/resources", &[("sid", sid)])
            .await
    };
    let a = add("vm:501").await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(
        a.text.contains("guest with ID 501 is not a VM"),
        "{}",
        a.text
    );
    let a = add("ct:500").await;
    assert!(
        a.text
            .contains("resource 'ct:500' - guest with ID 500 is not a container"),
        "{}",
        a.text
    );
    assert_eq!(add("ct:501").await.status, 200);
    assert_eq!(api.resource(501).await.unwrap()["status"], "running");
    let read = api.get("/cluster/ha/resources/ct:501").await;
    assert_eq!(
        (&read["sid"], &read["type"]),
        (&json!("ct:501"), &json!("ct"))
    );
    let missing = api.get_raw("/cluster/ha/resources/vm:501").await;
    assert!(
        missing.text.contains("no such resource 'vm:501'"),
        "{}",
        missing.text
    );
    let listed = api.get("/cluster/ha/resources").await;
    assert_eq!(listed[0]["sid"], "ct:501", "{listed}");

    let upid = api
        .start_task(
            "/nodes/pve1/lxc/501/status/shutdown",
            json!({"timeout": 30}),
        )
        .await;
    assert!(upid.contains(":hastop:"), "{upid}");
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    assert_eq!(api.resource(501).await.unwrap()["status"], "stopped");
    assert_eq!(
        pve.call("ha_resources", json!({})).unwrap()["501"]["state"],
        "stopped"
    );
    let upid = api
        .start_task("/nodes/pve1/lxc/501/status/start", json!({}))
        .await;
    assert!(upid.contains(":hastart:"), "{upid}");
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    assert_eq!(api.resource(501).await.unwrap()["status"], "running");
    assert_eq!(
        pve.call("ha_resources", json!({})).unwrap()["501"]["state"],
        "started"
    );

    // In `error`, the hastart is refused as a VM's is.
    pve.set_ct(501, json!({"status": "stopped", "ha_state": "error"}));
    let upid = api
        .start_task("/nodes/pve1/lxc/501/status/start", json!({}))
        .await;
    let status = api.wait("pve1", &upid).await;
    assert!(
        status.contains("ha-manager set ct:501 --state started"),
        "{status}"
    );
}

/// pve-container `migrate_vm` of an HA-managed container: an `hamigrate` task that hands the
/// move to the HA manager and ends; the LRM then relocates it (`PVECT.pm` `migrate`: shut
/// down, moved offline, started on the target while its state is `started`).
#[tokio::test]
async fn an_ha_managed_container_is_relocated_by_the_ha_manager() {
    let mut pve = Scenario::default()
        .ct(json!({"vmid": 510, "name": "ct510", "status": "running", "config": {"rootfs": "local-lvm:vm-510-disk-0,size=8G"}}))
        .start();
    pve.set_time_scale(SCALE);
    pve.call("set_model", json!({"ha_delay": 100})).unwrap();
    let api = Api::new(&pve);
    assert_eq!(
        api.post_form("/cluster/ha/resources", &[("sid", "ct:510")])
            .await
            .status,
        200
    );
    let refused = api
        .post("/nodes/pve1/lxc/510/migrate", json!({"target": "pve2"}))
        .await;
    assert!(
        refused
            .text
            .contains("can't migrate running container without --online or --restart"),
        "{}",
        refused.text
    );
    let upid = api
        .start_task(
            "/nodes/pve1/lxc/510/migrate",
            json!({"target": "pve2", "restart": 1}),
        )
        .await;
    assert!(upid.contains(":hamigrate:"), "{upid}");
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    // The task ended before the move: still on pve1.
    assert_eq!(api.resource(510).await.unwrap()["node"], "pve1");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = api.resource(510).await.unwrap();
        if r["node"] == "pve2" && r["status"] == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "not relocated: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ------------------------------------------------------------------------------ pools

/// pve-manager `PVE/API2/Pool.pm`: `GET /pools` lists only the pools the caller has
/// Pool.Audit on, while `GET /pools?poolid=P` answers without it (its `check` is `noerr` and
/// its answer unused) and says `pool 'P' does not exist` for a missing one; `PUT /pools`
/// (`update_pool`) needs Pool.Allocate on `/pool/{poolid}`, and with `allow-move` on the pool
/// the VM leaves too (8.4 and 9.x alike). fakepve 0.5.0 models all of it; this pins it.
#[tokio::test]
async fn pools_are_listed_by_audit_read_by_id_and_changed_with_allocate() {
    /// VM 500 in `in_pool` (or none), pools prod and lab, `Pool.Allocate` on `allocate`.
    fn start(in_pool: Option<&str>, allocate: &[&str]) -> FakePve {
        let mut sc = Scenario::default()
            .vm(json!({"vmid": 500, "name": "vm500", "node": "pve1", "pool": in_pool}))
            .set("pools", json!(["prod", "lab"]));
        for pool in allocate {
            sc = sc.grant(TOKEN_ID, &format!("/pool/{pool}"), &["Pool.Allocate"]);
        }
        vm_grants(sc).start()
    }
    async fn move_to(api: &Api, pool: &str) -> u16 {
        api.put_form(
            "/pools",
            &[("poolid", pool), ("vms", "500"), ("allow-move", "1")],
        )
        .await
        .status
    }

    let pve = start(None, &["prod"]);
    let api = Api::new(&pve);
    assert_eq!(api.get("/pools").await, json!([]), "nothing audited");
    let prod = api.get("/pools?poolid=prod").await;
    assert_eq!(prod[0]["poolid"], "prod", "{prod}");
    let a = api.get_raw("/pools?poolid=nope").await;
    assert_eq!(a.status, 500, "{}", a.text);
    assert!(
        a.text.contains("does not exist") || a.text.is_empty(),
        "{}",
        a.text
    );
    assert_eq!(move_to(&api, "lab").await, 403, "no Pool.Allocate on lab");
    assert_eq!(move_to(&api, "prod").await, 200);

    // Out of prod into lab: Pool.Allocate on prod (the pool it leaves) too, checked inside
    // `lock_user_config`, whose `die "$errmsg: $err"` makes it a 500 "update pools failed:
    // Permission check failed (/pool/prod, Pool.Allocate)".
    let pve = start(Some("prod"), &["lab"]);
    let api = Api::new(&pve);
    let a = api
        .put_form(
            "/pools",
            &[("poolid", "lab"), ("vms", "500"), ("allow-move", "1")],
        )
        .await;
    assert_eq!(a.status, 500, "{}", a.text);
    let pve = start(Some("prod"), &["lab", "prod"]);
    assert_eq!(move_to(&Api::new(&pve), "lab").await, 200);
}

// ------------------------------------------------------------------- storage contention

/// More clones at once than a node's storage takes (the harness's `clone_contention`): a clone
/// started while `max_clones` others clone on its node waits the storage lock's timeout and
/// fails with PVE's words, and nothing is left at its VMID, as PVE does:
/// - pve-storage `src/PVE/Storage/Plugin.pm` (at 0c56bad) `cluster_lock_storage`: a local
///   storage is locked with `PVE::Tools::lock_file("/var/lock/pve-manager/pve-storage-$storeid",
///   $timeout, ...)`;
/// - pve-common `src/PVE/Tools.pm` (at f665029) `lock_file_full`: `$timeout = 10 if
///   !$timeout`, and on the alarm `$@ = "can't lock file '$filename' - got timeout\n"`;
/// - qemu-server `src/PVE/API2/Qemu.pm` (at e6352be6) `clone_vm`: the worker's error path frees
///   the new volumes, removes the firewall config, `unlink $conffile` ("last thing before die")
///   and dies `"clone failed: $err"`, which `fork_worker` writes as the task's `TASK ERROR:` line
///   (pve-common `src/PVE/RESTEnvironment.pm`), the exit status `PVE::UPID::read_status` answers.
#[tokio::test]
async fn a_clone_beyond_the_storage_s_capacity_fails_on_the_storage_lock_and_leaves_nothing() {
    let mut pve = FakePve::start(common::default_scenario());
    let api = Api::new(&pve);
    // 1 PVE s = 50 ms: a clone takes 0.5 s, the lock's timeout 10 PVE s (0.5 s).
    pve.set_time_scale(0.05);
    pve.create_timing(0.0, 10.0, 0.0);
    pve.clone_contention(Some(1), 10.0);
    let clone = |newid: u32| json!({"newid": newid, "name": format!("web-{newid}"), "full": 1, "storage": "local-lvm"});
    let path = format!("/nodes/pve1/qemu/{TEMPLATE_VMID}/clone");
    let first = api.start_task(&path, clone(301)).await;
    let second = api.start_task(&path, clone(302)).await;
    // While it waits for the lock, the second clone's VM holds only the temporary config.
    let cfg = api.get("/nodes/pve1/qemu/302/config").await;
    assert_eq!(cfg["lock"], "clone", "{cfg}");

    assert_eq!(api.wait("pve1", &first).await, "OK");
    assert_eq!(
        api.wait("pve1", &second).await,
        "clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout"
    );
    let log = api
        .get(&format!("/nodes/pve1/tasks/{second}/log?limit=0"))
        .await;
    let last = log.as_array().and_then(|l| l.last()).cloned().unwrap();
    assert_eq!(
        last["t"],
        "TASK ERROR: clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout"
    );
    // Nothing at its VMID: no config, not listed, no volume; the first clone is whole.
    let gone = api.get_raw("/nodes/pve1/qemu/302/config").await;
    assert_eq!(gone.status, 500, "{}", gone.text);
    assert!(gone.text.contains("does not exist"), "{}", gone.text);
    assert!(api.resource(302).await.is_none());
    let volumes = api.get("/nodes/pve1/storage/local-lvm/content").await;
    assert!(
        !volumes.to_string().contains("vm-302-"),
        "the failed clone's volumes are freed: {volumes}"
    );
    assert!(volumes.to_string().contains("vm-301-disk"), "{volumes}");
    assert_eq!(api.resource(301).await.unwrap()["name"], "web-301");

    // Once the storage is free again, the next clone goes through; without the model any
    // number clone at once.
    assert_eq!(
        api.wait("pve1", &api.start_task(&path, clone(303)).await)
            .await,
        "OK"
    );
    pve.clone_contention(None, 10.0);
    let a = api.start_task(&path, clone(304)).await;
    let b = api.start_task(&path, clone(305)).await;
    assert_eq!(api.wait("pve1", &a).await, "OK");
    assert_eq!(api.wait("pve1", &b).await, "OK");
}

/// `new_vm_timing`: a cloned VM's start is a task that runs for its PVE seconds, then the VM
/// runs (the bench's real-timing scenario: a start takes about a second, as on PVE).
#[tokio::test]
async fn a_new_vm_s_start_takes_its_time() {
    let mut pve = FakePve::start(common::default_scenario());
    let api = Api::new(&pve);
    pve.set_time_scale(0.05);
    pve.new_vm_timing(20.0);
    let path = format!("/nodes/pve1/qemu/{TEMPLATE_VMID}/clone");
    let upid = api
        .start_task(&path, json!({"newid": 310, "name": "web-310", "full": 1}))
        .await;
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let start = api
        .start_task("/nodes/pve1/qemu/310/status/start", json!({}))
        .await;
    let st = api.get(&format!("/nodes/pve1/tasks/{start}/status")).await;
    assert_eq!(st["status"], "running", "{st}");
    assert_eq!(api.wait("pve1", &start).await, "OK");
    let cur = api.get("/nodes/pve1/qemu/310/status/current").await;
    assert_eq!(cur["status"], "running", "{cur}");
}

/// The listing's `maxdisk` is the size of the first disk of the VM's boot order that is not a
/// CD-ROM (qemu-server `bootdisk_size`, which `vmstatus` reports), not of the drive whose name
/// sorts first: an `efidisk0` or a `sata0` beside an `scsi0` boot disk is not the boot disk.
/// Without a boot order or a legacy `bootdisk`, PVE lists 0.
#[tokio::test]
async fn the_listed_maxdisk_is_the_boot_order_s_first_disk() {
    let vm = |vmid: u32, config: Value| json!({"vmid": vmid, "name": format!("vm{vmid}"), "node": "pve1", "config": config});
    let pve = Scenario::default()
        .vm(vm(
            701,
            json!({"boot": "order=ide2;scsi0;net0", "efidisk0": "local-lvm:vm-701-disk-1,size=4M",
                   "ide2": "local:iso/x.iso,media=cdrom", "sata0": "local-lvm:vm-701-disk-2,size=10G",
                   "scsi0": "local-lvm:vm-701-disk-0,size=32G"}),
        ))
        .vm(vm(
            702,
            json!({"boot": "cdn", "bootdisk": "virtio1", "scsi0": "local-lvm:vm-702-disk-0,size=8G",
                   "virtio1": "local-lvm:vm-702-disk-1,size=16G"}),
        ))
        .vm(vm(703, json!({"scsi0": "local-lvm:vm-703-disk-0,size=8G"})))
        .start();
    let api = Api::new(&pve);
    let listed = api.get("/cluster/resources?type=vm").await;
    let maxdisk = |vmid: u64| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["vmid"] == vmid)
            .map(|r| r["maxdisk"].as_u64().unwrap())
            .unwrap()
    };
    assert_eq!(maxdisk(701), 32 << 30, "{listed}");
    assert_eq!(maxdisk(702), 16 << 30, "{listed}");
    assert_eq!(maxdisk(703), 0, "{listed}");
}

// ------------------------------------------------ containers in pve-container's words

/// A container of the default scenario with a disk, and CT template 9100 to clone (on pve1).
fn with_containers() -> Scenario {
    Scenario::default()
        .ct(json!({"vmid": 330, "name": "ct", "node": "pve1",
                   "config": {"hostname": "ct", "rootfs": "local-lvm:vm-330-disk-0,size=8G"}}))
        .ct(
            json!({"vmid": 9100, "name": "alpine-ct", "node": "pve1", "template": true,
                   "config": {"hostname": "alpine-ct", "template": 1, "ostype": "alpine",
                              "rootfs": "local-lvm:base-9100-disk-0,size=4G"}}),
        )
}

/// The text of a refused request, and what proxsync's table of PVE's texts makes of it.
fn refusal(a: &Answer) -> (u16, String, Option<proxsync::pve::texts::Meaning>) {
    let message = a.json()["message"]
        .as_str()
        .unwrap_or_default()
        .trim_end()
        .to_string();
    let meaning = proxsync::pve::texts::meaning(&message);
    (a.status, message, meaning)
}

/// A container answers in pve-container's words, not qemu-server's, each a text of
/// `proxsync::pve::texts` with its row's meaning: a container locked by its backup (pve-container
/// VZDump/LXC.pm lock_vm) is refused `CT is locked (backup)` (pve-guest-common check_lock with
/// guest_type `CT`), a stale digest `detected modified configuration - file changed by other
/// user? Try again.` (pve-common assert_if_modified, from update_vm), a config lock another
/// process holds `can't lock file '/run/lock/lxc/pve-config-N.lock' - got timeout` (pve-container
/// config_file_lock). proxsync's client classifies them as qemu-server's equivalents.
#[tokio::test]
async fn a_container_is_locked_and_conflicts_in_pve_containers_words() {
    use proxsync::guest::GuestKind::Lxc;
    use proxsync::pve::texts::Meaning;
    let mut pve = with_containers().start();
    let api = Api::new(&pve);
    let client = pve.client();
    let params = proxsync::pve::VmParams::new().set("memory", "1024");
    let path = "/nodes/pve1/lxc/330/config";
    pve.set_time_scale(SCALE);
    let backup = pve.backup(330, 100.0, true);
    let cfg = api.get(path).await;
    assert_eq!(cfg["lock"], "backup", "{cfg}");
    assert_eq!(
        refusal(&api.put_form(path, &[("memory", "1024")]).await),
        (500, "CT is locked (backup)".into(), Some(Meaning::LockHeld))
    );
    let e = client
        .set_config("pve1", Lxc, 330, &params, None)
        .await
        .unwrap_err();
    assert_eq!(e.category(), proxsync::category::Category::LockError, "{e}");
    assert!(!e.is_overload() && e.surely_not_executed(), "{e}");
    assert_eq!(api.wait("pve1", &backup).await, "OK");

    let stale = "0000000000000000000000000000000000000000";
    let a = api
        .put_form(path, &[("memory", "1024"), ("digest", stale)])
        .await;
    assert_eq!(
        refusal(&a),
        (
            500,
            "detected modified configuration - file changed by other user? Try again.".into(),
            Some(Meaning::DigestConflict)
        )
    );
    let e = client
        .set_config("pve1", Lxc, 330, &params, Some(stale))
        .await
        .unwrap_err();
    assert_eq!(e.category(), proxsync::category::Category::Conflict, "{e}");
    assert!(!e.is_overload(), "{e}");

    pve.hold_config_lock(330, None);
    assert_eq!(
        refusal(&api.put_form(path, &[("memory", "1024")]).await),
        (
            500,
            "can't lock file '/run/lock/lxc/pve-config-330.lock' - got timeout".into(),
            Some(Meaning::LockTimeout)
        )
    );
    pve.release_config_lock(330);
    let a = api.put_form(path, &[("memory", "1024")]).await;
    assert_eq!(a.status, 200, "{}", a.text);
}

/// pve-container's clone (API2/LXC.pm clone_vm) puts `lock: disk` on its SOURCE for the whole
/// copy (`set_lock($vmid, 'disk')`, then `remove_lock` when the worker ends): a second clone of
/// one CT template meanwhile is refused at once, 500 `CT is locked (disk)`, with nothing made;
/// its `vzclone` task names the template, so proxsync finds who holds the lock; once it ends the
/// template is free again.
#[tokio::test]
async fn a_container_clone_locks_its_template_disk_until_its_task_ends() {
    use proxsync::pve::LockHolder;
    use proxsync::pve::texts::{self, Meaning};
    let mut pve = with_containers().start();
    let api = Api::new(&pve);
    // A clone takes 50 PVE s: 0.5 s.
    pve.set_time_scale(SCALE);
    pve.ct_timing(0.0, 50.0, 0.0, 0.0, 0.0);
    let path = "/nodes/pve1/lxc/9100/clone";
    let clone = |newid: u32| json!({"newid": newid, "hostname": format!("c{newid}"), "full": 1, "storage": "local-lvm"});
    let first = api.start_task(path, clone(301)).await;
    let template = api.get("/nodes/pve1/lxc/9100/config").await;
    assert_eq!(template["lock"], "disk", "{template}");
    assert_eq!(api.resource(9100).await.expect("listed")["lock"], "disk");
    let running = api.tasks("pve1", "?source=active").await;
    let holder = LockHolder::of("disk");
    assert!(
        running.iter().any(|t| {
            holder.may_be(
                t["type"].as_str().unwrap_or_default(),
                t["id"].as_str().unwrap_or_default(),
                9100,
            )
        }),
        "the vzclone naming the template holds its lock: {running:?}"
    );

    let second = api.post(path, clone(302)).await;
    let (status, message, meaning) = refusal(&second);
    assert_eq!(
        (status, message.as_str(), meaning),
        (500, "CT is locked (disk)", Some(Meaning::LockHeld))
    );
    assert_eq!(texts::held_lock(&message), Some("disk"));
    assert!(api.resource(302).await.is_none(), "nothing made");
    let e = pve
        .client()
        .clone_ct(
            "pve1",
            9100,
            &proxsync::pve::CloneRequest {
                newid: 303,
                name: "c303".into(),
                description: String::new(),
                full: true,
                storage: Some("local-lvm".into()),
                target: None,
                pool: None,
            },
        )
        .await
        .unwrap_err();
    assert!(
        e.is_lock() && !e.is_overload() && e.surely_not_executed(),
        "{e}"
    );

    assert_eq!(api.wait("pve1", &first).await, "OK");
    let template = api.get("/nodes/pve1/lxc/9100/config").await;
    assert!(template.get("lock").is_none(), "{template}");
    let again = api.start_task(path, clone(302)).await;
    assert_eq!(api.wait("pve1", &again).await, "OK");
}

// ---------------------- containers' volumes, weights, NICs and templates, and their HA power

/// A container's create from the default scenario's archive on pve1 (`extra`: more options).
fn ct_create(vmid: u32, extra: Value) -> Value {
    let mut body = json!({
        "vmid": vmid, "hostname": format!("ct{vmid}"),
        "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
        "rootfs": "local-lvm:8",
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    body
}

fn with_archive() -> Scenario {
    Scenario::default().file(
        "local",
        "debian-12-standard_12.7-1_amd64.tar.zst",
        126_000_000,
        "vztmpl",
    )
}

/// pve-container `create_disks` allocates a new volume `STORAGE:GB` as `int($size_gb * 1024) *
/// 1024` KiB and writes that size into the config; thin LVM makes the volume in whole 4 MiB
/// extents. `resize_vm` compares the volume's real size (`volume_size_info`), not the config's
/// `size=`: a grow to the size the volume has is refused `disk is already at specified size`
/// (fakepve 0.5.0 allocated `GB * 1024**3` bytes and compared the config's size).
#[tokio::test]
async fn a_container_volume_is_allocated_and_resized_as_pve_container_does() {
    use proxsync::pve::texts::Meaning;
    let mut pve = with_archive().start();
    let api = Api::new(&pve);
    let upid = api
        .start_task(
            "/nodes/pve1/lxc",
            ct_create(
                340,
                json!({"rootfs": "local-lvm:1.074", "mp0": "local-lvm:1.07421875,mp=/srv"}),
            ),
        )
        .await;
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let cfg = api.get("/nodes/pve1/lxc/340/config").await;
    let rootfs = cfg["rootfs"].as_str().unwrap().to_string();
    assert!(rootfs.ends_with(",size=1099M"), "{cfg}");
    assert!(
        cfg["mp0"].as_str().unwrap().ends_with(",size=1100M"),
        "{cfg}"
    );
    let volume = rootfs.split(',').next().unwrap();
    // 1099 MiB asked for: LVM's volume is 1100 MiB (275 extents).
    assert_eq!(
        pve.call("volume_size", json!({"volume": volume})).unwrap(),
        json!(1100u64 << 20)
    );
    let resize = |size: &'static str| {
        let api = &api;
        async move {
            api.put_form(
                "/nodes/pve1/lxc/340/resize",
                &[("disk", "rootfs"), ("size", size)],
            )
            .await
        }
    };
    assert_eq!(
        refusal(&resize("1100M").await),
        (
            500,
            "disk is already at specified size".into(),
            Some(Meaning::AlreadyAtSize)
        )
    );
    assert_eq!(refusal(&resize("1G").await).1, "unable to shrink disk size");
    let a = resize("1101M").await;
    assert_eq!(a.status, 200, "{}", a.text);
    let upid = a.json()["data"].as_str().unwrap().to_string();
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let cfg = api.get("/nodes/pve1/lxc/340/config").await;
    assert!(
        cfg["rootfs"].as_str().unwrap().ends_with(",size=1101M"),
        "{cfg}"
    );
    assert_eq!(
        pve.call("volume_size", json!({"volume": volume})).unwrap(),
        json!(1104u64 << 20)
    );
}

/// pve-container's create and update clamp `cpuunits` with pve-common
/// `CGroup::clamp_cpu_shares`: at most 10000 on cgroup v2, PVE 9's only mode and PVE 8's
/// default (fakepve 0.5.0 keeps any value its schema takes, up to 500000).
#[tokio::test]
async fn a_containers_cpuunits_are_stored_at_most_10000() {
    let pve = with_archive().start();
    let api = Api::new(&pve);
    let upid = api
        .start_task(
            "/nodes/pve1/lxc",
            ct_create(341, json!({"cpuunits": 20000})),
        )
        .await;
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let cfg = api.get("/nodes/pve1/lxc/341/config").await;
    assert_eq!(
        cfg["cpuunits"].to_string().trim_matches('"'),
        "10000",
        "{cfg}"
    );
    let a = api
        .put_form("/nodes/pve1/lxc/341/config", &[("cpuunits", "500000")])
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let cfg = api.get("/nodes/pve1/lxc/341/config").await;
    assert_eq!(
        cfg["cpuunits"].to_string().trim_matches('"'),
        "10000",
        "{cfg}"
    );
    let a = api
        .put_form("/nodes/pve1/lxc/341/config", &[("cpuunits", "512")])
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let cfg = api.get("/nodes/pve1/lxc/341/config").await;
    assert_eq!(
        cfg["cpuunits"].to_string().trim_matches('"'),
        "512",
        "{cfg}"
    );
}

/// pve-container `update_pct_config` refuses a NIC whose `mtu` is above its bridge's before
/// anything is done, at a create (nothing made, no task) and an update: `netN: MTU size 'X' is
/// bigger than bridge MTU 'Y'`, a text proxsync reads as a refusal of the request as sent.
#[tokio::test]
async fn a_container_nic_above_its_bridges_mtu_is_refused_before_anything() {
    use proxsync::pve::texts::Meaning;
    let mut pve = with_archive().start();
    let api = Api::new(&pve);
    let jumbo = json!({"net0": "name=eth0,bridge=vmbr0,ip=dhcp,mtu=9000"});
    let refused = api
        .post("/nodes/pve1/lxc", ct_create(342, jumbo.clone()))
        .await;
    assert_eq!(
        refusal(&refused),
        (
            500,
            "net0: MTU size '9000' is bigger than bridge MTU '1500'".into(),
            Some(Meaning::Refused)
        )
    );
    assert!(api.resource(342).await.is_none(), "nothing made");
    pve.call("set_bridge_mtu", json!({"bridge": "vmbr0", "mtu": 9000}))
        .unwrap();
    let upid = api
        .start_task("/nodes/pve1/lxc", ct_create(342, jumbo))
        .await;
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let a = api
        .put_form(
            "/nodes/pve1/lxc/342/config",
            &[("net0", "name=eth0,bridge=vmbr1,ip=dhcp,mtu=9000")],
        )
        .await;
    assert_eq!(
        refusal(&a),
        (
            500,
            "net0: MTU size '9000' is bigger than bridge MTU '1500'".into(),
            Some(Meaning::Refused)
        )
    );
}

/// pve-storage `parse_volname` names a vztmpl archive by `$VZTMPL_EXT_RE_1`, any case:
/// `.tar.gz`, `.tar.xz`, `.tar.zst`, `.tar.bz2` from PVE 8.3 (pve-storage 8.2.6), a bare `.tar`
/// from PVE 9.1 (pve-storage 9.0.15), never `.tgz`; a create from another name dies `unable to
/// parse directory volume name 'vztmpl/NAME'` before anything is made.
#[tokio::test]
async fn a_template_archive_is_named_as_pve_storage_parses_it() {
    for (version, name, ok) in [
        ("9.1.1", "debian-12.tgz", false),
        ("9.1.1", "DEBIAN-12.TAR.ZST", true),
        ("9.1.1", "alpine-oci.tar", true),
        ("9.0.11", "alpine-oci.tar", false),
        ("8.3.0", "debian-12.tar.bz2", true),
        ("8.2.7", "debian-12.tar.bz2", false),
        ("8.2.7", "debian-12.tar.xz", true),
    ] {
        let pve = Scenario::default()
            .set("version", json!(version))
            .file("local", name, 1_000_000, "vztmpl")
            .start();
        let api = Api::new(&pve);
        let body = ct_create(343, json!({"ostemplate": format!("local:vztmpl/{name}")}));
        let a = api.post("/nodes/pve1/lxc", body).await;
        if ok {
            assert_eq!(a.status, 200, "{version} {name}: {}", a.text);
        } else {
            assert_eq!(
                refusal(&a),
                (
                    500,
                    format!("unable to parse directory volume name 'vztmpl/{name}'"),
                    Some(proxsync::pve::texts::Meaning::Refused)
                ),
                "{version} {name}"
            );
            assert!(api.resource(343).await.is_none(), "{version} {name}");
        }
    }
}

/// A container's reboot kills it once its timeout passes (pve-container `vm_reboot`:
/// `vm_stop($vmid, 0, $timeout, 1); # kill if timeout exceeds`), counted in `hard_stops`. The HA
/// manager's stop of a container is clean (pve-ha-manager `PVECT.pm` `shutdown` passes no
/// `forceStop`): one that does not stop within the timeout keeps running and its service goes to
/// `error` (LRM: "unable to stop service", Manager.pm `next_state_request_stop`).
#[tokio::test]
async fn a_containers_reboot_kills_and_the_ha_managers_stop_does_not() {
    let mut pve = Scenario::default()
        .ct(json!({"vmid": 344, "name": "ct344", "status": "running",
                   "config": {"rootfs": "local-lvm:vm-344-disk-0,size=8G"}}))
        .start();
    let api = Api::new(&pve);
    pve.set_ct(344, json!({"shutdown_secs": 120}));
    let upid = api
        .start_task("/nodes/pve1/lxc/344/status/reboot", json!({"timeout": 30}))
        .await;
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    assert_eq!(
        pve.call("hard_stops", json!({})).unwrap(),
        json!({"344": 1})
    );

    assert_eq!(
        api.post_form("/cluster/ha/resources", &[("sid", "ct:344")])
            .await
            .status,
        200
    );
    let upid = api
        .start_task(
            "/nodes/pve1/lxc/344/status/shutdown",
            json!({"timeout": 60, "forceStop": 1}),
        )
        .await;
    assert!(upid.contains(":hastop:"), "{upid}");
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let r = api.resource(344).await.unwrap();
    assert_eq!(
        (&r["status"], &r["hastate"]),
        (&json!("running"), &json!("error")),
        "{r}"
    );
    assert_eq!(
        pve.call("hard_stops", json!({})).unwrap(),
        json!({"344": 1})
    );

    // One that shuts down in time is stopped.
    pve.set_ct(344, json!({"ha_state": "started", "shutdown_secs": 10}));
    let upid = api
        .start_task(
            "/nodes/pve1/lxc/344/status/shutdown",
            json!({"timeout": 60}),
        )
        .await;
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    assert_eq!(api.resource(344).await.unwrap()["status"], "stopped");
}

/// The HA manager's relocation of a container takes no timeout from the migrate request: its
/// LRM shuts the container down within HA's own 60 s (`PVECT.pm` `migrate` -> `shutdown`,
/// `$timeout // 60`), and one still up then stays where it is, running (migrate_vm refuses a
/// running container without `restart`; the CRM puts the service back to `started`).
#[tokio::test]
async fn the_ha_managers_relocation_of_a_container_waits_its_own_60_s() {
    let mut pve = Scenario::default()
        .ct(json!({"vmid": 345, "name": "ct345", "status": "running",
                   "config": {"rootfs": "local-lvm:vm-345-disk-0,size=8G"}}))
        .start();
    let api = Api::new(&pve);
    assert_eq!(
        api.post_form("/cluster/ha/resources", &[("sid", "ct:345")])
            .await
            .status,
        200
    );
    pve.set_ct(345, json!({"shutdown_secs": 120}));
    let move_it = json!({"target": "pve2", "restart": 1, "timeout": 300});
    let upid = api
        .start_task("/nodes/pve1/lxc/345/migrate", move_it.clone())
        .await;
    assert!(upid.contains(":hamigrate:"), "{upid}");
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    // The LRM's relocation has run (time scale 0: at the next turn of the fake's loop).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = api.resource(345).await.unwrap();
    assert_eq!(
        (&r["node"], &r["status"]),
        (&json!("pve1"), &json!("running")),
        "{r}"
    );
    pve.set_ct(345, json!({"shutdown_secs": 30}));
    let upid = api.start_task("/nodes/pve1/lxc/345/migrate", move_it).await;
    assert_eq!(api.wait("pve1", &upid).await, "OK");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = api.resource(345).await.unwrap();
        if r["node"] == "pve2" && r["status"] == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "not relocated: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `/cluster/resources?type=node` lists each node's memory as pvestatd reports it: the host's
/// `maxmem`, and in `mem` what its running guests hold besides its own use (fakepve 0.5.0 lists
/// 2 of 8 GiB for every node, whatever runs there).
#[tokio::test]
async fn a_nodes_memory_counts_its_running_guests() {
    let mut pve = Scenario::default()
        .set(
            "node_memory",
            json!({"pve2": {"maxmem": 32u64 << 30, "mem": 1u64 << 30}}),
        )
        .ct(
            json!({"vmid": 346, "name": "ct346", "node": "pve2", "status": "running",
                   "config": {"memory": 2048, "rootfs": "local-lvm:vm-346-disk-0,size=8G"}}),
        )
        .start();
    let api = Api::new(&pve);
    let nodes = api.get("/cluster/resources?type=node").await;
    let node = |name: &str| {
        nodes
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(
        (
            node("pve2")["maxmem"].as_u64(),
            node("pve2")["mem"].as_u64()
        ),
        (Some(32 << 30), Some(3 << 30))
    );
    assert_eq!(
        (
            node("pve1")["maxmem"].as_u64(),
            node("pve1")["mem"].as_u64()
        ),
        (Some(8 << 30), Some(2 << 30))
    );
    pve.set_ct(346, json!({"status": "stopped"}));
    let nodes = api.get("/cluster/resources?type=node").await;
    let pve2 = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "pve2")
        .unwrap();
    assert_eq!(pve2["mem"].as_u64(), Some(1 << 30), "{pve2}");
}

// ------------------------------------------------------------------- guest agent

/// An agent call is answered after qemu-server's `assert_agent_available`, in its words and
/// order: no `agent` in the config first, then a VM not running, then an agent that does not
/// answer; each text is the `pve::texts` row its meaning says (a guest's state, never load).
#[tokio::test]
async fn an_agent_ping_is_refused_as_qemu_server_refuses_it() {
    use proxsync::pve::texts::{Meaning, recognise};
    let mut pve = FakePve::start(with_vm(100));
    let api = Api::new(&pve);
    let ping = "/nodes/pve1/qemu/100/agent/ping";
    let refused = |a: &Answer| {
        assert_eq!(a.status, 500, "{}", a.text);
        let message = a.json()["message"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string();
        (recognise(&message).map(|t| t.meaning), message)
    };
    let (meaning, message) = refused(&api.post(ping, json!({})).await);
    assert_eq!(meaning, Some(Meaning::NoAgent), "{message}");
    pve.set_vm(100, json!({"agent": {}}));
    let (meaning, message) = refused(&api.post(ping, json!({})).await);
    assert_eq!(
        meaning,
        Some(Meaning::NotRunning),
        "a stopped VM: {message}"
    );
    assert_eq!(message, "VM 100 is not running");
    pve.set_vm(100, json!({"status": "running", "agent": null}));
    let (meaning, message) = refused(&api.post(ping, json!({})).await);
    assert_eq!(meaning, Some(Meaning::AgentDown), "{message}");
    pve.set_vm(100, json!({"agent": {}}));
    let a = api.post(ping, json!({})).await;
    assert_eq!(a.status, 200, "{}", a.text);
}
