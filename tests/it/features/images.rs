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

struct Setup {
    pve: FakePve,
    ws: Workspace,
    engine: Engine,
    specs: SpecSet,
    commit: String,
}

fn image_doc(checksum: &str) -> String {
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
fn setup(checksum: Option<&str>, guests: &[(&str, &str)]) -> Setup {
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
    async fn cycle(&mut self) {
        self.engine
            .reconcile(&self.specs, Some(&self.commit))
            .await
            .expect("a cycle");
    }

    fn downloads(&mut self) -> Vec<Value> {
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
