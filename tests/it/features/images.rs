//! `kind: ProxmoxImage` against fakepve, whose harness models PVE's `download-url` (the file
//! fetched from a URL the harness serves, its checksum checked, the task's words PVE's): the
//! engine, in this process, has PVE download an image once per node that needs it, creates the
//! guests made from it only once it is there, and does not send a failed download again each
//! cycle.

use crate::common;

use common::engine::Workspace;
use common::{FakePve, default_scenario};
use proxsync::config::Config;
use proxsync::engine::{Engine, check_spec_sites};
use proxsync::spec::SpecSet;
use serde_json::{Value, json};

const URL: &str = "https://cloud-images.example/noble/20261115/noble-server-cloudimg-amd64.img";

pub(crate) struct Setup {
    pub(crate) pve: FakePve,
    pub(crate) ws: Workspace,
    pub(crate) engine: Engine,
    pub(crate) specs: SpecSet,
    pub(crate) commit: String,
}

pub(crate) fn image_doc(checksum: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {{name: noble-cloud}}\nspec:\n  \
         forProvider:\n    site: lab\n    url: {URL}\n    checksum: sha256:{checksum}\n    \
         format: qcow2\n    storage: local\n"
    )
}

fn guest(name: &str, node: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata: {{name: {name}}}\nspec:\n  \
         forProvider:\n    site: lab\n    node: {node}\n    image: {{image: noble-cloud}}\n    \
         memory: 1Gi\n    disk: 8Gi\n"
    )
}

/// A workspace whose repository holds the image (with `checksum`) and `guests` made from it;
/// the harness serves the image's URL.
pub(crate) fn setup(checksum: Option<&str>, guests: &[(&str, &str)]) -> Setup {
    let mut pve = FakePve::start(default_scenario());
    let served = pve
        .call("remote_file", json!({"url": URL, "size": 4096}))
        .expect("the harness serves the URL");
    let sum = served["sha256"].as_str().expect("its sha256").to_string();
    let checksum = checksum.map_or(sum, str::to_string);
    let ws = Workspace::new(&pve);
    let mut files = vec![("images.yaml".to_string(), image_doc(&checksum))];
    for (name, node) in guests {
        files.push((format!("{name}.yaml"), guest(name, node)));
    }
    let files: Vec<(&str, String)> = files.iter().map(|(f, t)| (f.as_str(), t.clone())).collect();
    ws.commit_specs(&files);
    let config = Config::load(&ws.config()).expect("config");
    let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply)
        .expect("the specs of the commit");
    let mut specs = read.specs;
    check_spec_sites(&config, &mut specs);
    assert!(!specs.has_errors(), "{:?}", specs.diagnostics);
    let engine = Engine::new(config).expect("engine");
    Setup {
        pve,
        ws,
        engine,
        specs,
        commit: read.commit,
    }
}

impl Setup {
    pub(crate) async fn cycle(&mut self) {
        self.engine
            .reconcile(&self.specs, Some(&self.commit))
            .await
            .expect("a cycle");
    }

    pub(crate) fn downloads(&mut self) -> Vec<Value> {
        let v = self.pve.call("downloads", json!({})).expect("downloads");
        v.as_array().cloned().unwrap_or_default()
    }

    fn summary_image(&self) -> Value {
        let text = std::fs::read_to_string(self.ws.path("status/_summary.yaml")).unwrap();
        let summary: Value = serde_saphyr::from_str(&text).unwrap();
        summary["images"][0].clone()
    }
}

#[tokio::test]
async fn an_image_is_downloaded_once_per_node_and_its_guests_made_from_it() {
    let mut s = setup(
        None,
        &[("web-1", "pve1"), ("web-2", "pve1"), ("db-1", "pve2")],
    );
    s.cycle().await;
    let downloads = s.downloads();
    let mut nodes: Vec<&str> = downloads
        .iter()
        .filter_map(|d| d["node"].as_str())
        .collect();
    nodes.sort();
    assert_eq!(
        nodes,
        ["pve1", "pve2"],
        "one download per node: {downloads:?}"
    );
    let version = &s.specs.images[0].version().to_string();
    let file = format!("noble-cloud-{version}.qcow2");
    for d in &downloads {
        assert_eq!(d["filename"], file.as_str(), "{d}");
        assert_eq!(d["url"], URL);
        assert_eq!(d["checksum_algorithm"], "sha256");
        assert_eq!(d["content"], "import");
    }
    // Every guest was created from the volume the image made.
    let volume = format!("local:import/{file}");
    let creates: Vec<_> = (s.pve.requests().into_iter())
        .filter(|r| r.method == "POST" && r.path.ends_with("/qemu"))
        .collect();
    assert_eq!(creates.len(), 3, "{creates:?}");
    let encoded = volume.replace(':', "%3A").replace('/', "%2F");
    for c in &creates {
        assert!(
            c.body.contains(&volume) || c.body.contains(&encoded),
            "a create imports the image's volume: {}",
            c.body
        );
    }
    let image = s.summary_image();
    assert_eq!(image["state"], "Ready", "{image}");
    assert_eq!(image["volume"], volume.as_str());

    // An idle cycle asks for nothing more.
    let before = s.downloads().len();
    s.cycle().await;
    assert_eq!(s.downloads().len(), before, "no download again");
}

#[tokio::test]
async fn a_wrong_checksum_stalls_the_image_its_guests_wait_and_it_is_not_sent_each_cycle() {
    let wrong = "0".repeat(64);
    let mut s = setup(Some(&wrong), &[("web-1", "pve1")]);
    s.cycle().await;
    assert_eq!(s.downloads().len(), 1);
    let image = s.summary_image();
    assert_eq!(image["state"], "Failed", "{image}");
    let message = image["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("checksum mismatch: got '") && message.contains(&wrong),
        "PVE's words: {message}"
    );
    assert!(image["retryAt"].is_string(), "{image}");
    let (status, reason, why) = s.ws.condition("web-1", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "WaitingForImage"),
        "{why}"
    );
    assert!(why.contains("checksum mismatch"), "{why}");
    assert!(
        !(s.pve.requests().iter()).any(|r| r.method == "POST" && r.path.ends_with("/qemu")),
        "no guest is made without its image"
    );
    // The next cycles do not send it again before the backoff ends.
    s.cycle().await;
    s.cycle().await;
    assert_eq!(s.downloads().len(), 1, "not one download per cycle");
}

#[tokio::test]
async fn a_guest_naming_an_image_the_repository_lacks_is_held_with_the_names_there_are() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("images.yaml", image_doc(&"a".repeat(64))),
        (
            "web.yaml",
            guest("web-1", "pve1").replace("noble-cloud}", "noble-clod}"),
        ),
    ]);
    let out = ws.proxsync(&["validate", &ws.path("repo").display().to_string()]);
    let text = common::engine::text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("no ProxmoxImage is named \"noble-clod\" (did you mean \"noble-cloud\"?)"),
        "{text}"
    );
}

/// The engine's clock, set by the test.
pub(crate) fn manual_clock(engine: &mut Engine) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    let now = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(
        proxsync::util::clock::now_ms(),
    ));
    let read = now.clone();
    engine.set_clock(proxsync::util::clock::Clock::from_fn(move || {
        read.load(std::sync::atomic::Ordering::SeqCst)
    }));
    now
}

pub(crate) fn advance(now: &std::sync::atomic::AtomicU64, by: std::time::Duration) {
    now.fetch_add(by.as_millis() as u64, std::sync::atomic::Ordering::SeqCst);
}

#[tokio::test]
async fn a_failed_download_keeps_its_backoff_while_its_site_cannot_be_reached() {
    let wrong = "0".repeat(64);
    let mut s = setup(Some(&wrong), &[("web-1", "pve1")]);
    s.cycle().await;
    assert_eq!(s.downloads().len(), 1);
    s.pve
        .fail("GET", "/cluster/resources", 500, "something broke");
    s.cycle().await;
    s.pve.clear_failures();
    s.cycle().await;
    assert_eq!(
        s.downloads().len(),
        1,
        "the backoff outlives a cycle whose site could not be read"
    );
}

#[tokio::test]
async fn a_failed_download_that_outlived_the_wait_still_backs_off_longer_each_time() {
    let wrong = "0".repeat(64);
    let mut s = setup(Some(&wrong), &[]);
    let now = manual_clock(&mut s.engine);
    s.engine.task_wait = std::time::Duration::from_millis(100);
    s.pve.set_time_scale(1.0);
    s.pve
        .call("download_timing", json!({"secs": 1}))
        .expect("download_timing");
    let settle = std::time::Duration::from_millis(1500);
    s.cycle().await; // sent, still running
    assert_eq!(s.summary_image()["state"], "Downloading");
    tokio::time::sleep(settle).await;
    s.cycle().await; // failed: 5 minutes
    assert_eq!(s.summary_image()["state"], "Failed");
    advance(&now, std::time::Duration::from_secs(301));
    s.cycle().await; // sent again, still running
    assert_eq!(s.downloads().len(), 2);
    tokio::time::sleep(settle).await;
    s.cycle().await; // failed a second time: 10 minutes
    assert_eq!(s.summary_image()["state"], "Failed");
    advance(&now, std::time::Duration::from_secs(301));
    s.cycle().await;
    assert_eq!(
        s.downloads().len(),
        2,
        "the second failure waits 10 minutes, not 5"
    );
}

#[tokio::test]
async fn a_file_of_the_image_s_name_not_downloaded_by_proxsync_is_checked_before_use() {
    let mut s = setup(None, &[("web-1", "pve1")]);
    let file = s.specs.images[0].filename.clone();
    // Someone's file of that name, not the image's bytes.
    s.pve.store_file("local", &file, 4096, "import");
    s.cycle().await;
    assert!(
        !(s.pve.requests().iter()).any(|r| r.method == "POST" && r.path.ends_with("/qemu")),
        "no guest is made from a volume whose checksum was not checked"
    );
    let image = s.summary_image();
    assert_eq!(image["state"], "Failed", "{image}");
    assert!(
        image["message"]
            .as_str()
            .unwrap_or_default()
            .contains("checksum mismatch"),
        "{image}"
    );
}

#[tokio::test]
async fn a_restart_while_the_image_downloads_makes_each_guest_once() {
    let mut s = setup(None, &[("web-1", "pve1")]);
    s.engine.task_wait = std::time::Duration::from_millis(100);
    s.pve.set_time_scale(1.0);
    s.pve
        .call("download_timing", json!({"secs": 1}))
        .expect("download_timing");
    s.cycle().await;
    assert_eq!(s.summary_image()["state"], "Downloading");
    // The daemon restarts: what it knew of the running download is lost.
    let Setup {
        pve,
        ws,
        engine,
        specs,
        commit,
    } = s;
    drop(engine);
    let config = Config::load(&ws.config()).expect("config");
    let engine = Engine::new(config).expect("engine");
    let mut s = Setup {
        pve,
        ws,
        engine,
        specs,
        commit,
    };
    s.engine.task_wait = std::time::Duration::from_millis(100);
    s.cycle().await;
    assert_eq!(s.downloads().len(), 2, "sent again after the restart");
    for _ in 0..20 {
        if s.summary_image()["state"] == "Ready" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        s.cycle().await;
    }
    assert_eq!(s.summary_image()["state"], "Ready");
    for _ in 0..3 {
        s.cycle().await;
    }
    let creates = (s.pve.requests().iter())
        .filter(|r| r.method == "POST" && r.path.ends_with("/qemu"))
        .count();
    assert_eq!(creates, 1, "one guest");
}

#[tokio::test]
async fn many_images_cost_one_listing_per_node_and_none_once_ready() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let mut files = Vec::new();
    for i in 0..60 {
        let url = format!("https://cloud-images.example/many/{i}.qcow2");
        let served = pve
            .call("remote_file", json!({"url": url, "size": 64}))
            .expect("served");
        let sum = served["sha256"].as_str().unwrap().to_string();
        files.push((
            format!("image-{i}.yaml"),
            format!(
                "apiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {{name: img-{i}}}\n\
                 spec:\n  forProvider:\n    site: lab\n    url: {url}\n    \
                 checksum: sha256:{sum}\n    nodes: [pve1, pve2]\n"
            ),
        ));
    }
    let files: Vec<(&str, String)> = files.iter().map(|(f, t)| (f.as_str(), t.clone())).collect();
    ws.commit_specs(&files);
    let config = Config::load(&ws.config()).expect("config");
    let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply)
        .expect("the specs");
    let mut specs = read.specs;
    check_spec_sites(&config, &mut specs);
    assert!(!specs.has_errors(), "{:?}", specs.diagnostics);
    assert_eq!(specs.images.len(), 60);
    let mut engine = Engine::new(config).expect("engine");
    engine.reconcile(&specs, Some(&read.commit)).await.unwrap();
    let downloads = pve.call("downloads", json!({})).unwrap();
    assert_eq!(
        downloads.as_array().unwrap().len(),
        120,
        "one per image and node"
    );
    let listings = (pve.requests().iter())
        .filter(|r| r.method == "GET" && r.path.contains("/storage"))
        .count();
    assert!(
        listings <= 10,
        "a node's storages are listed once a cycle, not once per image: {listings}"
    );
    let storage_reads = |pve: &mut FakePve| {
        (pve.requests().iter())
            .filter(|r| r.path.contains("/storage"))
            .count()
    };
    let before = storage_reads(&mut pve);
    engine.reconcile(&specs, Some(&read.commit)).await.unwrap();
    engine.reconcile(&specs, Some(&read.commit)).await.unwrap();
    let summary = std::fs::read_to_string(ws.path("status/_summary.yaml")).unwrap();
    let summary: Value = serde_saphyr::from_str(&summary).unwrap();
    let images = summary["images"].as_array().unwrap();
    assert!(images.iter().all(|i| i["state"] == "Ready"), "{images:?}");
    assert_eq!(
        storage_reads(&mut pve),
        before,
        "Ready images cost no storage request in the next cycles"
    );
}

#[tokio::test]
async fn a_node_offline_does_not_hold_the_guests_of_another_node() {
    let pve_doc = image_doc("X").replace(
        "storage: local\n",
        "storage: local\n    nodes: [pve1, pve2]\n",
    );
    let mut s = setup(None, &[("web-1", "pve1")]);
    let sum = s.specs.images[0].checksum.hex.clone();
    let doc = pve_doc.replace("sha256:X", &format!("sha256:{sum}"));
    s.ws.commit_specs(&[("images.yaml", doc), ("web-1.yaml", guest("web-1", "pve1"))]);
    let config = Config::load(&s.ws.config()).expect("config");
    let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply).unwrap();
    s.specs = read.specs;
    s.commit = read.commit;
    check_spec_sites(&config, &mut s.specs);
    assert_eq!(s.specs.images[0].nodes, ["pve1", "pve2"]);
    s.pve.set_node_offline("pve2", true);
    s.cycle().await;
    assert!(
        (s.pve.requests().iter()).any(|r| r.method == "POST" && r.path.ends_with("/qemu")),
        "web-1 on pve1 is made though pve2, which only the image names, is offline: {}",
        s.summary_image()
    );
}

#[tokio::test]
async fn garbled_storage_answers_make_no_guest_before_its_image_is_checked() {
    let mut s = setup(None, &[("web-1", "pve1")]);
    s.pve
        .call(
            "garble",
            json!({"rate": 0.8, "seed": 7, "paths": ["/storage"], "max_mutations": 3}),
        )
        .expect("garble");
    for _ in 0..4 {
        s.cycle().await;
    }
    let garbled = s.pve.call("garbled", json!({})).expect("garbled");
    assert!(garbled["garbled"].as_u64() > Some(0), "{garbled}");
    s.pve
        .call("garble", json!({"rate": 0}))
        .expect("garble off");
    for _ in 0..3 {
        s.cycle().await;
    }
    let creates = (s.pve.requests().iter())
        .filter(|r| r.method == "POST" && r.path.ends_with("/qemu"))
        .count();
    assert!(creates <= 1, "never a second guest: {creates}");
    assert!(s.downloads().len() <= 2, "{:?}", s.downloads());
}

#[tokio::test]
async fn an_image_on_a_storage_without_import_content_fails_once_per_backoff() {
    let mut s = setup(None, &[("web-1", "pve1")]);
    // local-lvm: block storage, no import content.
    let mut image = (*s.specs.images[0]).clone();
    image.storage = "local-lvm".into();
    s.specs.images[0] = std::sync::Arc::new(image);
    s.cycle().await;
    let summary = s.summary_image();
    assert_eq!(summary["state"], "Failed", "{summary}");
    assert!(
        summary["message"]
            .as_str()
            .unwrap_or_default()
            .contains("does not hold `import` content"),
        "{summary}"
    );
    let reads = |s: &mut Setup| {
        (s.pve.requests().iter())
            .filter(|r| r.path.contains("/storage"))
            .count()
    };
    let before = reads(&mut s);
    s.cycle().await;
    s.cycle().await;
    assert_eq!(
        reads(&mut s),
        before,
        "not asked again before the backoff ends"
    );
    assert!(s.downloads().is_empty());
}

impl Setup {
    /// Commits `files` and reads the specs of the new commit.
    pub(crate) fn recommit(&mut self, files: &[(&str, String)]) {
        self.ws.commit_specs(files);
        let config = Config::load(&self.ws.config()).expect("config");
        let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply)
            .expect("the specs of the commit");
        self.specs = read.specs;
        self.commit = read.commit;
        check_spec_sites(&config, &mut self.specs);
    }

    fn summary_images(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.ws.path("status/_summary.yaml")).unwrap();
        let summary: Value = serde_saphyr::from_str(&text).unwrap();
        summary["images"].as_array().cloned().unwrap_or_default()
    }

    async fn import_files(&self) -> Vec<String> {
        let listed = (self.pve.client())
            .storage_content("pve1", "local", Some("import"))
            .await
            .expect("the listing");
        listed.into_iter().map(|v| v.volid).collect()
    }
}

/// A new image version: the old one is kept through `orphan_grace` (reported `Unused`, with
/// when it may go), then deleted through the gate, and only the version this install
/// recorded downloading: a file of the same pattern someone else put there stays, and so
/// does an old version while a guest of the site is being created (an import may read it).
#[tokio::test]
async fn an_old_version_goes_after_the_grace_and_only_what_this_install_downloaded() {
    let mut s = setup(None, &[("web-1", "pve1")]);
    let now = manual_clock(&mut s.engine);
    s.cycle().await;
    let old = s.specs.images[0].volume_id();
    assert!(
        s.import_files().await.contains(&old),
        "{:?}",
        s.import_files().await
    );
    // Someone's file of the image's naming pattern, never downloaded by this install.
    s.pve
        .call(
            "store_file",
            json!({"storage": "local", "name": "noble-cloud-222222222222.qcow2", "size": 10,
                   "content": "import"}),
        )
        .expect("store_file");
    let url2 = URL.replace("20261115", "20261201");
    let served = s
        .pve
        .call("remote_file", json!({"url": url2, "size": 2048}))
        .expect("remote_file");
    let doc = image_doc(served["sha256"].as_str().unwrap()).replace(URL, &url2);
    s.recommit(&[("images.yaml", doc), ("web-1.yaml", guest("web-1", "pve1"))]);
    let new = s.specs.images[0].volume_id();
    s.cycle().await;
    let files = s.import_files().await;
    assert!(files.contains(&new) && files.contains(&old), "{files:?}");
    let unused = s.summary_images();
    let kept = unused
        .iter()
        .find(|i| i["volume"] == old.as_str())
        .unwrap_or_else(|| panic!("the old version is reported: {unused:?}"));
    assert_eq!(kept["state"], "Unused", "{kept}");
    assert!(
        kept["message"]
            .as_str()
            .unwrap()
            .contains("unused and kept until"),
        "{kept}"
    );

    // A guest being created on the site: nothing is deleted while an import may read it.
    advance(&now, std::time::Duration::from_secs(601));
    s.pve.snapshot_lock(9000, "clone");
    s.cycle().await;
    let still = s.import_files().await;
    assert!(
        still.contains(&old),
        "kept while a guest is being made: {still:?}"
    );
    s.pve.unlock(9000);

    let before = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    let files = s.import_files().await;
    assert!(!files.contains(&old), "deleted past the grace: {files:?}");
    assert!(files.contains(&new), "{files:?}");
    assert!(
        files.contains(&"local:import/noble-cloud-222222222222.qcow2".to_string()),
        "a file this install never downloaded stays: {files:?}"
    );
    let deletes = common::engine::writes_since(&mut s.pve, before);
    assert_eq!(
        deletes.iter().filter(|w| w.starts_with("DELETE")).count(),
        1,
        "{deletes:?}"
    );
    let images = s.summary_images();
    assert!(
        images
            .iter()
            .any(|i| i["volume"] == old.as_str() && i["state"] == "Deleted"),
        "{images:?}"
    );
}

/// A push that changes only an image (a new version) looks at the image's site: the daemon's
/// cycle after a push looks only at the sites the push touched, and an image touches its own.
/// An image of a site the push did not touch keeps what it was, not "not looked at".
#[tokio::test]
async fn a_push_of_a_new_image_version_alone_downloads_it_at_once() {
    let mut s = setup(None, &[("web-1", "pve1")]);
    s.cycle().await;
    assert_eq!(s.downloads().len(), 1);
    let url2 = URL.replace("20261115", "20261201");
    let served = s
        .pve
        .call("remote_file", json!({"url": url2, "size": 2048}))
        .expect("remote_file");
    let doc = image_doc(served["sha256"].as_str().unwrap()).replace(URL, &url2);
    s.recommit(&[("images.yaml", doc), ("web-1.yaml", guest("web-1", "pve1"))]);
    s.engine
        .reconcile_after_push(&s.specs, Some(&s.commit))
        .await
        .expect("a cycle after the push");
    let downloads = s.downloads();
    assert!(
        downloads.iter().any(|d| d["url"] == url2.as_str()),
        "the new version is downloaded by the push's cycle: {downloads:?}"
    );
    assert_eq!(s.summary_image()["state"], "Ready", "{}", s.summary_image());
    // A push touching nothing of the image's site keeps its state.
    s.recommit(&[
        (
            "images.yaml",
            std::fs::read_to_string(s.ws.path("repo/images.yaml")).unwrap(),
        ),
        (
            "web-1.yaml",
            guest("web-1", "pve1").replace("memory: 1Gi", "memory: 2Gi"),
        ),
    ]);
    s.engine
        .reconcile_after_push(&s.specs, Some(&s.commit))
        .await
        .expect("a cycle after the push");
    assert_eq!(s.summary_image()["state"], "Ready", "{}", s.summary_image());
}

/// The downloads of one cycle run side by side: every node's is asked for before any is
/// waited for (the second download task starts before the first ends), not one node after the
/// other.
#[tokio::test]
async fn the_downloads_to_several_nodes_run_side_by_side() {
    let mut s = setup(None, &[("web-1", "pve1"), ("db-1", "pve2")]);
    s.pve
        .call("time_scale", json!({"value": 1.0}))
        .expect("a time scale");
    s.pve
        .call("download_timing", json!({"secs": 3}))
        .expect("download_timing");
    s.cycle().await;
    let tasks: Vec<Value> = (s.pve.tasks().into_iter())
        .filter(|t| t["type"] == "download")
        .collect();
    assert_eq!(tasks.len(), 2, "{tasks:?}");
    let (first, second) = (&tasks[0], &tasks[1]);
    assert!(
        second["starttime"].as_u64() < first["endtime"].as_u64(),
        "the second download started before the first ended: {tasks:?}"
    );
    assert_eq!(s.summary_image()["state"], "Ready", "{}", s.summary_image());
}

/// Set `web` of `replicas` members made from `noble-cloud` on pve1, `maxUnavailable: 2`,
/// under `imagePolicy` `policy`.
fn image_set(replicas: u32, policy: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata: {{name: web}}\nspec:\n  \
         replicas: {replicas}\n  placement: {{nodes: [pve1]}}\n  maxUnavailable: 2\n  \
         template:\n    imagePolicy: {policy}\n    forProvider:\n      site: lab\n      \
         image: {{image: noble-cloud}}\n      memory: 1Gi\n      disk: 8Gi\n"
    )
}

impl Setup {
    /// The set's members' VMIDs by name, from their status files.
    fn member_vmids(&self, replicas: u32) -> Vec<u64> {
        (1..=replicas)
            .map(|i| {
                let path = self.ws.path(&format!("status/web-{i:02}.yaml"));
                let text = std::fs::read_to_string(&path).unwrap();
                let status: Value = serde_saphyr::from_str(&text).unwrap();
                status["vmId"].as_u64().unwrap_or_else(|| panic!("{text}"))
            })
            .collect()
    }

    pub(crate) fn ready_message(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.ws.path(&format!("status/{name}.yaml"))).unwrap();
        let status: Value = serde_saphyr::from_str(&text).unwrap();
        let conditions = status["conditions"].as_array().unwrap();
        let ready = conditions.iter().find(|c| c["type"] == "Ready").unwrap();
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        format!("{} {}", text(&ready["status"]), text(&ready["message"]))
    }

    /// A new version of the image (another URL, another file): its document.
    pub(crate) fn new_version(&mut self) -> String {
        let url2 = URL.replace("20261115", "20261201");
        let served = (self.pve)
            .call("remote_file", json!({"url": url2, "size": 2048}))
            .expect("remote_file");
        image_doc(served["sha256"].as_str().unwrap()).replace(URL, &url2)
    }
}

/// By default a new image version leaves the guests made from the old one alone, and each says
/// which version it runs and that the image moved on; with `imagePolicy: Recreate` the set is
/// rebuilt from the new version two members at a time (`maxUnavailable: 2`), a wave deleted
/// only once the one before is made again, each new guest imported from the new volume.
#[tokio::test]
async fn a_new_image_version_is_kept_by_default_and_rolled_two_at_a_time_under_recreate() {
    let mut s = setup(None, &[]);
    let old = s.specs.images[0].version().to_string();
    let first_doc = image_doc(&s.specs.images[0].checksum.hex);
    s.recommit(&[
        ("images.yaml", first_doc),
        ("web.yaml", image_set(4, "Keep")),
    ]);
    s.cycle().await;
    let first = s.member_vmids(4);
    assert!(
        s.ready_message("web-01")
            .contains(&format!("made from image noble-cloud version {old}")),
        "{}",
        s.ready_message("web-01")
    );

    let doc = s.new_version();
    s.recommit(&[
        ("images.yaml", doc.clone()),
        ("web.yaml", image_set(4, "Keep")),
    ]);
    let volume = s.specs.images[0].volume_id();
    let new = s.specs.images[0].version().to_string();
    let before = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    let writes = common::engine::writes_since(&mut s.pve, before);
    assert!(
        !writes.iter().any(|w| w.starts_with("DELETE")),
        "Keep deletes nothing: {writes:?}"
    );
    assert_eq!(s.member_vmids(4), first);
    let message = s.ready_message("web-01");
    assert!(
        message.starts_with("True")
            && message.contains(&format!("version {old}, an older version"))
            && message.contains(&format!("now at {new}"))
            && message.contains("imagePolicy: Keep"),
        "{message}"
    );

    s.recommit(&[("images.yaml", doc), ("web.yaml", image_set(4, "Recreate"))]);
    let before = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    let requests = s.pve.requests_since(before);
    let deletes: Vec<u64> = (requests.iter())
        .filter(|r| r.method == "DELETE" && r.path.contains("/qemu/"))
        .map(|r| r.seq)
        .collect();
    let creates: Vec<&common::fakepve::RecordedRequest> = (requests.iter())
        .filter(|r| r.method == "POST" && r.path.ends_with("/qemu"))
        .collect();
    assert_eq!(deletes.len(), 4, "every member deleted once: {requests:?}");
    assert_eq!(creates.len(), 4, "and made again once");
    // Two at a time: the third delete comes after the first two members were made again.
    assert!(
        deletes[2] > creates[1].seq && deletes[3] > creates[1].seq,
        "the second wave waits for the first: deletes {deletes:?}, creates {:?}",
        creates.iter().map(|c| c.seq).collect::<Vec<_>>()
    );
    assert!(deletes[1] < creates[0].seq || deletes[1] < creates[1].seq);
    let encoded = volume.replace(':', "%3A").replace('/', "%2F");
    for c in &creates {
        assert!(
            c.body.contains(&volume) || c.body.contains(&encoded),
            "made from the new version: {}",
            c.body
        );
    }
    let now = s.member_vmids(4);
    // Each member is a new guest (a freed VMID may go to another member).
    assert!(
        now.iter().zip(&first).all(|(n, f)| n != f),
        "{first:?} -> {now:?}"
    );
    for i in 1..=4 {
        let message = s.ready_message(&format!("web-{i:02}"));
        assert!(
            message.starts_with("True")
                && message.contains(&format!("version {new}"))
                && !message.contains("older"),
            "{message}"
        );
    }
    // Rolled: the next cycle deletes nothing.
    let before = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    let writes = common::engine::writes_since(&mut s.pve, before);
    assert!(
        !writes.iter().any(|w| w.starts_with("DELETE")),
        "{writes:?}"
    );
}

/// A roll longer than a cycle's waves (20 members two at a time: ten waves, a cycle runs nine)
/// asks for the next cycle at once (the daemon wakes for `next_attempt_ms`), not at the resync
/// minutes later; that cycle finishes it.
#[tokio::test]
async fn a_roll_longer_than_a_cycle_asks_for_the_next_cycle_at_once() {
    let mut s = setup(None, &[]);
    let first_doc = image_doc(&s.specs.images[0].checksum.hex);
    s.recommit(&[
        ("images.yaml", first_doc),
        ("web.yaml", image_set(20, "Recreate")),
    ]);
    s.cycle().await;
    let first = s.member_vmids(20);
    let doc = s.new_version();
    s.recommit(&[
        ("images.yaml", doc),
        ("web.yaml", image_set(20, "Recreate")),
    ]);
    let before = common::engine::next_seq(&mut s.pve);
    let started = proxsync::util::clock::now_ms();
    let report = (s.engine)
        .reconcile(&s.specs, Some(&s.commit))
        .await
        .expect("a cycle");
    let deletes = |s: &mut Setup, since| {
        (common::engine::writes_since(&mut s.pve, since).iter())
            .filter(|w| w.starts_with("DELETE") && w.contains("/qemu/"))
            .count()
    };
    assert_eq!(deletes(&mut s, before), 18, "nine waves of two");
    let next = report.next_attempt_ms.expect("a next cycle is asked for");
    assert!(next <= started + 1_000, "at once: {next} vs {started}");
    let before = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    assert_eq!(deletes(&mut s, before), 2, "the last wave");
    let now = s.member_vmids(20);
    assert!(
        now.iter().zip(&first).all(|(n, f)| n != f),
        "{first:?} -> {now:?}"
    );
}
// ---- rebuilds from a new image, attacked (imagePolicy: Recreate) ----------------------------

/// A VM of its own made from `noble-cloud` on pve1 under `imagePolicy: Recreate`, `extra`
/// lines in its forProvider.
fn rebuilt_guest(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata: {{name: {name}}}\nspec:\n  \
         imagePolicy: Recreate\n  forProvider:\n    site: lab\n    node: pve1\n    \
         image: {{image: noble-cloud}}\n    memory: 1Gi\n    disk: 8Gi\n{extra}"
    )
}

impl Setup {
    fn status_vmid(&self, name: &str) -> Option<u64> {
        let text = std::fs::read_to_string(self.ws.path(&format!("status/{name}.yaml"))).ok()?;
        let status: Value = serde_saphyr::from_str(&text).ok()?;
        status["vmId"].as_u64()
    }

    /// Every guest whose notes carry install test's marker, by spec.
    fn claims(&mut self) -> std::collections::BTreeMap<String, Vec<u64>> {
        common::engine::marker_claims(&mut self.pve)
    }

    fn listed(&mut self) -> Vec<u64> {
        self.pve
            .vms()
            .iter()
            .filter_map(|v| v["vmid"].as_u64())
            .collect()
    }

    /// PUTs `key=value` on VM `vmid`'s config as a person would.
    fn put_config(&self, vmid: u64, key: &str, value: &str) -> bool {
        let ca = self.pve.ca_pem();
        let url = self.pve.api_url(&format!("/nodes/pve1/qemu/{vmid}/config"));
        let (key, value) = (key.to_string(), value.to_string());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let client = common::fakepve::verified_client(&ca);
            rt.block_on(async {
                client
                    .put(url)
                    .header(
                        "Authorization",
                        common::fakepve::token_header(
                            common::fakepve::TOKEN_ID,
                            common::fakepve::TOKEN_SECRET,
                        ),
                    )
                    .form(&[(key.as_str(), value.as_str())])
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            })
        })
        .join()
        .unwrap()
    }
}

/// One lone guest `web-1` under Recreate with `extra`, made from the first version; then the
/// new version committed (not yet cycled). Returns the setup and the first guest's VMID.
async fn lone_rebuild(extra: &str) -> (Setup, u64, String) {
    let mut s = setup(None, &[]);
    let first = image_doc(&s.specs.images[0].checksum.hex);
    s.recommit(&[
        ("images.yaml", first),
        ("web-1.yaml", rebuilt_guest("web-1", extra)),
    ]);
    assert!(!s.specs.has_errors(), "{:?}", s.specs.diagnostics);
    s.cycle().await;
    let vmid = s.status_vmid("web-1").expect("made");
    let doc = s.new_version();
    s.recommit(&[
        ("images.yaml", doc.clone()),
        ("web-1.yaml", rebuilt_guest("web-1", extra)),
    ]);
    let new = s.specs.images[0].version().to_string();
    (s, vmid, new)
}

/// `vmId` pinned, `protection: true`, `ha`: each rebuilt, one guest throughout, from the
/// new version, and nothing deleted at the next cycle.
#[tokio::test]
async fn a_pinned_protected_ha_guest_is_rebuilt_once() {
    for extra in [
        "    vmId: 321\n",
        "    protection: true\n",
        "    ha: {}\n",
        "    vmId: 321\n    protection: true\n    ha: {}\n",
    ] {
        let (mut s, first, new) = lone_rebuild(extra).await;
        for _ in 0..3 {
            s.cycle().await;
            let claims = s.claims();
            assert!(
                claims.get("web-1").is_none_or(|v| v.len() <= 1),
                "{extra}: two guests {claims:?}"
            );
        }
        let msg = s.ready_message("web-1");
        assert!(
            msg.starts_with("True")
                && msg.contains(&format!("version {new}"))
                && !msg.contains("older"),
            "{extra:?}: first {first}, now {:?}: {msg}",
            s.status_vmid("web-1")
        );
        if extra.contains("vmId") {
            assert_eq!(s.status_vmid("web-1"), Some(321), "{extra}");
        }
        let before = common::engine::next_seq(&mut s.pve);
        s.cycle().await;
        let writes = common::engine::writes_since(&mut s.pve, before);
        assert!(
            !writes.iter().any(|w| w.starts_with("DELETE")),
            "{extra}: {writes:?}"
        );
    }
}

/// A backup holds the guest's lock when its rebuild is due: nothing deleted meanwhile; once
/// it ends, rebuilt.
#[tokio::test]
async fn a_rebuild_waits_for_a_backup_lock() {
    let (mut s, vmid, new) = lone_rebuild("").await;
    let now = manual_clock(&mut s.engine);
    s.pve.snapshot_lock(vmid as u32, "backup");
    s.cycle().await;
    assert!(s.listed().contains(&vmid), "deleted under a backup lock");
    let msg = s.ready_message("web-1");
    assert!(msg.contains("backup"), "the lock is named: {msg}");
    s.pve.unlock(vmid as u32);
    for _ in 0..4 {
        advance(&now, std::time::Duration::from_secs(3600));
        s.cycle().await;
    }
    let msg = s.ready_message("web-1");
    assert!(
        msg.contains(&format!("version {new}")) && !msg.contains("older"),
        "{msg}"
    );
    assert_eq!(s.claims().get("web-1").map(Vec::len), Some(1));
}

/// A person replaced the guest's notes (the marker line gone) before its rebuild: it is not
/// deleted on its identity alone; the marker line is written back first, then the rebuild
/// follows; never two guests.
#[tokio::test]
async fn a_rebuild_after_the_notes_lost_the_marker_makes_no_second_guest() {
    let (mut s, vmid, new) = lone_rebuild("").await;
    assert!(s.put_config(vmid, "description", "my notes"));
    let before = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    let writes = common::engine::writes_since(&mut s.pve, before);
    assert!(
        !writes.iter().any(|w| w.starts_with("DELETE")),
        "not deleted on its identity alone: {writes:?}"
    );
    for _ in 0..3 {
        s.cycle().await;
    }
    assert_eq!(s.claims().get("web-1").map(Vec::len), Some(1));
    let msg = s.ready_message("web-1");
    assert!(msg.contains(&format!("version {new}")), "{msg}");
}

/// A second guest carrying the spec's marker (a restored copy) when the rebuild is due.
#[tokio::test]
async fn a_rebuild_deletes_only_the_recorded_guest_of_a_duplicate() {
    let (mut s, vmid, _new) = lone_rebuild("").await;
    let vm = s.pve.vm(vmid as u32);
    let cfg = &vm["config"];
    s.pve.add_vm(
        json!({"vmid": 990, "name": vm["name"], "node": "pve1", "status": "stopped",
        "config": {"description": cfg["description"], "tags": cfg["tags"], "name": vm["name"]}}),
    );
    let before = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    s.cycle().await;
    let writes = common::engine::writes_since(&mut s.pve, before);
    assert!(
        !writes.iter().any(|w| w.contains("/qemu/990")),
        "the copy is left alone: {writes:?}"
    );
    let claims = s.claims();
    let guests = claims.get("web-1").cloned().unwrap_or_default();
    assert!(
        guests.len() == 2 && guests.contains(&990) && !guests.contains(&vmid),
        "the recorded guest rebuilt, the copy kept: {claims:?}"
    );
}

/// The create after the delete fails (PVE 500 on the create, then a refusal: storage
/// missing): at most maxUnavailable (2) members down at any time; all back once it works.
#[tokio::test]
async fn a_roll_whose_creates_fail_keeps_max_unavailable_and_comes_back() {
    for (status, message) in [
        (500, "internal error"),
        (400, "storage 'local-lvm' does not exist"),
    ] {
        let mut s = setup(None, &[]);
        let now = manual_clock(&mut s.engine);
        let first = image_doc(&s.specs.images[0].checksum.hex);
        s.recommit(&[
            ("images.yaml", first),
            ("web.yaml", image_set(4, "Recreate")),
        ]);
        s.cycle().await;
        let doc = s.new_version();
        s.recommit(&[("images.yaml", doc), ("web.yaml", image_set(4, "Recreate"))]);
        let new = s.specs.images[0].version().to_string();
        s.pve.fail("POST", "/qemu", status, message);
        for round in 0..6 {
            s.cycle().await;
            advance(&now, std::time::Duration::from_secs(600));
            let claims = s.claims();
            let up = (1..=4)
                .filter(|i| {
                    claims
                        .get(&format!("web-{i:02}"))
                        .is_some_and(|v| !v.is_empty())
                })
                .count();
            assert!(
                up >= 2,
                "{status} round {round}: only {up} of 4 members have a guest: {claims:?}"
            );
        }
        s.pve.clear_failures();
        for _ in 0..8 {
            s.cycle().await;
            advance(&now, std::time::Duration::from_secs(600));
        }
        let claims = s.claims();
        for i in 1..=4 {
            let name = format!("web-{i:02}");
            assert_eq!(
                claims.get(&name).map(Vec::len),
                Some(1),
                "{status}: {claims:?}"
            );
            let msg = s.ready_message(&name);
            assert!(
                msg.contains(&format!("version {new}")) && !msg.contains("older"),
                "{status}: {name}: {msg}"
            );
        }
    }
}

/// The database lost mid-roll (the first wave deleted, its creates failing): never a second
/// guest; the members without a guest are made again (from the new version), the others are
/// adopted with their version unknown, which Ready says, and are not rebuilt.
#[tokio::test]
async fn a_database_lost_mid_roll_makes_no_second_guest() {
    let mut s = setup(None, &[]);
    let first = image_doc(&s.specs.images[0].checksum.hex);
    s.recommit(&[
        ("images.yaml", first),
        ("web.yaml", image_set(4, "Recreate")),
    ]);
    s.cycle().await;
    let doc = s.new_version();
    s.recommit(&[("images.yaml", doc), ("web.yaml", image_set(4, "Recreate"))]);
    // The create fails after the first wave's deletes: the roll stops mid-way.
    s.pve.fail("POST", "/qemu", 500, "internal error");
    s.cycle().await;
    let mid = s.claims();
    assert_eq!(mid.len(), 2, "the first wave is deleted: {mid:?}");
    s.ws.remove_state();
    let config = Config::load(&s.ws.config()).expect("config");
    s.engine = Engine::new(config).expect("engine");
    s.pve.clear_failures();
    let new = s.specs.images[0].version().to_string();
    for _ in 0..6 {
        s.cycle().await;
        let claims = s.claims();
        for (spec, v) in &claims {
            assert!(v.len() <= 1, "two guests of {spec}: {claims:?}");
        }
    }
    for i in 1..=4 {
        let name = format!("web-{i:02}");
        let msg = s.ready_message(&name);
        let kept = mid.contains_key(&name);
        assert!(
            msg.starts_with("True")
                && (!kept || msg.contains("version not recorded"))
                && (kept || msg.contains(&format!("version {new}"))),
            "{name}: {msg}"
        );
    }
}

/// The commit that brings the new version also names a storage the node lacks (a typo): the
/// create's pre-flight refuses it before the delete, so no guest of the 12 is deleted.
#[tokio::test]
async fn a_rebuild_the_create_would_refuse_deletes_nothing() {
    let names: Vec<String> = (1..=12).map(|i| format!("lone-{i:02}")).collect();
    let mut s = setup(None, &[]);
    let first = image_doc(&s.specs.images[0].checksum.hex);
    let mut files = vec![("images.yaml".to_string(), first)];
    for n in &names {
        files.push((format!("{n}.yaml"), rebuilt_guest(n, "")));
    }
    let f: Vec<(&str, String)> = files.iter().map(|(a, b)| (a.as_str(), b.clone())).collect();
    s.recommit(&f);
    s.cycle().await;
    assert_eq!(s.claims().len(), 12);
    let doc = s.new_version();
    let mut files = vec![("images.yaml".to_string(), doc)];
    for n in &names {
        files.push((
            format!("{n}.yaml"),
            rebuilt_guest(n, "    storage: local-typo\n"),
        ));
    }
    let f: Vec<(&str, String)> = files.iter().map(|(a, b)| (a.as_str(), b.clone())).collect();
    s.recommit(&f);
    assert!(!s.specs.has_errors(), "{:?}", s.specs.diagnostics);
    let seq = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    let writes = common::engine::writes_since(&mut s.pve, seq);
    let deletes = writes.iter().filter(|w| w.starts_with("DELETE")).count();
    let claims = s.claims();
    assert_eq!(deletes, 0, "{writes:?}");
    assert_eq!(claims.len(), 12, "{claims:?}");
    let message = s.ready_message("lone-01");
    assert!(message.contains("local-typo"), "{message}");
}

/// A flood: 30 specs of their own, a new version, the create failing (PVE 500) after each
/// delete: they roll one at a time, and the first that does not come back holds the rest.
#[tokio::test]
async fn lone_rebuilds_whose_creates_fail_take_down_one_guest() {
    let names: Vec<String> = (1..=30).map(|i| format!("lone-{i:02}")).collect();
    let mut s = setup(None, &[]);
    let first = image_doc(&s.specs.images[0].checksum.hex);
    let mut files = vec![("images.yaml".to_string(), first)];
    for n in &names {
        files.push((format!("{n}.yaml"), rebuilt_guest(n, "")));
    }
    let f: Vec<(&str, String)> = files.iter().map(|(a, b)| (a.as_str(), b.clone())).collect();
    s.recommit(&f);
    s.cycle().await;
    assert_eq!(s.claims().len(), 30);
    let doc = s.new_version();
    let mut files = vec![("images.yaml".to_string(), doc)];
    for n in &names {
        files.push((format!("{n}.yaml"), rebuilt_guest(n, "")));
    }
    let f: Vec<(&str, String)> = files.iter().map(|(a, b)| (a.as_str(), b.clone())).collect();
    s.recommit(&f);
    s.pve.fail("POST", "/qemu", 500, "internal error");
    let seq = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    let writes = common::engine::writes_since(&mut s.pve, seq);
    let deletes = writes.iter().filter(|w| w.starts_with("DELETE")).count();
    let claims = s.claims();
    assert_eq!(deletes, 1, "{writes:?}");
    assert_eq!(claims.len(), 29);
    let seq = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    let writes = common::engine::writes_since(&mut s.pve, seq);
    assert!(
        !writes.iter().any(|w| w.starts_with("DELETE")),
        "held: {writes:?}"
    );
}

/// A set over two nodes, `maxUnavailable: 1`: the new version reaches pve2 late (its download
/// fails first), and deletes take a while (each waited for across cycles). A member whose delete
/// is recorded goes on and counts as down, so a lower-indexed member whose version arrives
/// meanwhile waits; and the freed VMID stays the member's, so every member comes back.
#[tokio::test]
async fn a_roll_over_two_nodes_keeps_max_unavailable_and_every_member_comes_back() {
    let set = |policy: &str| {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata: {{name: web}}\nspec:\n  \
             replicas: 4\n  placement: {{nodes: [pve1, pve2]}}\n  maxUnavailable: 1\n  \
             template:\n    imagePolicy: {policy}\n    forProvider:\n      site: lab\n      \
             image: {{image: noble-cloud}}\n      memory: 1Gi\n      disk: 8Gi\n"
        )
    };
    let mut s = setup(None, &[]);
    let now = manual_clock(&mut s.engine);
    let first = image_doc(&s.specs.images[0].checksum.hex);
    s.recommit(&[("images.yaml", first), ("web.yaml", set("Recreate"))]);
    s.cycle().await;
    s.cycle().await;
    let doc = s.new_version();
    s.recommit(&[("images.yaml", doc), ("web.yaml", set("Recreate"))]);
    s.pve
        .fail("POST", "pve2/storage/local/download-url", 500, "pve2 busy");
    s.pve.set_time_scale(1.0);
    s.pve.destroy_timing(5.0);
    s.engine.task_wait = std::time::Duration::from_millis(100);
    let new = s.specs.images[0].version().to_string();
    let rebuilt = |s: &Setup| {
        (1..=4).all(|i| {
            let message = s.ready_message(&format!("web-{i:02}"));
            message.starts_with("True") && message.contains(&format!("version {new},"))
                || message.starts_with("True") && message.ends_with(&format!("version {new}"))
        })
    };
    let mut worst = 0;
    // Rounds of a cycle a PVE second apart, until every member is back made from the new version
    // (a delete takes 5 s, so the roll takes a while), at most 60.
    for round in 0..60 {
        if round == 6 {
            s.pve.clear_failures();
            advance(&now, std::time::Duration::from_secs(7200));
        }
        s.cycle().await;
        let claims = s.claims();
        let down = (1..=4)
            .map(|i| format!("web-{i:02}"))
            .filter(|name| {
                let listed = s.ws.status(name)["vmId"]
                    .as_u64()
                    .is_some_and(|v| claims.get(name).is_some_and(|c| c.contains(&v)));
                let msg = s.ready_message(name);
                msg.contains("qmdestroy") || msg.contains("delet") || !listed
            })
            .count();
        worst = worst.max(down);
        if round > 6 && rebuilt(&s) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1000));
        advance(&now, std::time::Duration::from_secs(1));
    }
    assert!(
        worst <= 1,
        "maxUnavailable 1, yet {worst} members down at once"
    );
    for i in 1..=4 {
        let message = s.ready_message(&format!("web-{i:02}"));
        assert!(
            message.starts_with("True") && message.contains(&format!("version {new}")),
            "web-{i:02} is back, made from the new version: {message}"
        );
    }
}
