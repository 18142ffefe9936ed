//! Containers from OCI images (`template: {oci: REFERENCE}`) against fakepve, whose harness
//! models PVE 9.1's `oci-registry-pull` (a fake registry, the task `ociregistrypull`, its
//! refusals): PVE pulls each image once per node before the first container of it there, a
//! site older than 9.1 is refused before anything is sent, and a pull that fails says PVE's
//! words and backs off.

use serde_json::{Value, json};

use crate::common;

use common::engine::{Workspace, next_seq, writes_since};
use common::{FakePve, Scenario};

const NGINX: &str = "docker.io/library/nginx:1.27";

fn oci_spec(name: &str, node: &str, reference: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: {name}\nspec:\n  \
         forProvider:\n    site: lab\n    node: {node}\n    template: {{oci: \"{reference}\"}}\n"
    )
}

fn pve_at(version: &str) -> FakePve {
    let mut pve = Scenario::default().set("version", json!(version)).start();
    pve.call("oci_image", json!({"reference": NGINX, "size": 4096}))
        .expect("oci_image");
    pve
}

fn pulls(pve: &mut FakePve) -> Vec<Value> {
    let v = pve.call("oci_pulls", json!({})).expect("oci_pulls");
    v.as_array().cloned().unwrap_or_default()
}

/// Each image is pulled once per node that needs it, the containers made from the archive it
/// became (its name proxsync's: the reference normalised, and a hash), and an idle cycle pulls
/// nothing.
#[test]
fn an_oci_image_is_pulled_once_per_node_and_its_containers_made_from_it() {
    let mut pve = pve_at("9.1.2");
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", oci_spec("web-a", "pve1", NGINX)),
        ("b.yaml", oci_spec("web-b", "pve1", NGINX)),
        ("c.yaml", oci_spec("web-c", "pve2", NGINX)),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let done = pulls(&mut pve);
    let mut nodes: Vec<&str> = done.iter().filter_map(|p| p["node"].as_str()).collect();
    nodes.sort();
    assert_eq!(nodes, ["pve1", "pve2"], "one pull per node: {done:?}");
    let volume = proxsync::spec::oci::volume("local", NGINX);
    for p in &done {
        assert_eq!(p["reference"], NGINX);
        assert_eq!(p["storage"], "local");
    }
    let creates: Vec<_> = (pve.requests().into_iter())
        .filter(|r| r.method == "POST" && r.path.ends_with("/lxc"))
        .collect();
    assert_eq!(creates.len(), 3, "{creates:?}");
    let encoded = volume.replace(':', "%3A").replace('/', "%2F");
    for c in &creates {
        assert!(
            c.body.contains(&volume) || c.body.contains(&encoded),
            "made from the pulled archive {volume}: {}",
            c.body
        );
    }
    for name in ["web-a", "web-b", "web-c"] {
        let (status, _, message) = ws.condition(name, "Ready");
        assert_eq!(status, "True", "{name}: {message}");
    }
    let before = pulls(&mut pve).len();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(pulls(&mut pve).len(), before, "no pull again");
}

/// On PVE 9.0 (no `oci-registry-pull`) the create is refused before anything is sent, and the
/// status names the release and what to do.
#[test]
fn a_site_older_than_9_1_is_refused_before_anything_is_sent() {
    let mut pve = pve_at("9.0.10");
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", oci_spec("web-a", "pve1", NGINX))]);
    let before = next_seq(&mut pve);
    let (_, out) = ws.run_once();
    let writes = writes_since(&mut pve, before);
    assert!(writes.is_empty(), "nothing sent: {writes:?} {out}");
    let (status, _, message) = ws.condition("web-a", "Ready");
    assert_eq!(status, "False", "{message}");
    assert!(
        message.contains("runs PVE 9.0.10") && message.contains("needs PVE 9.1"),
        "{message}"
    );
}

/// A reference the registry does not have: the pull's task fails with skopeo's words, the
/// container is not made, and the daemon's next cycle does not pull again at once (the create
/// backs off; `run --once` tries a transient failure again each time, so the engine is driven
/// here as the daemon drives it).
#[tokio::test]
async fn a_failed_pull_says_pve_s_words_and_is_not_sent_each_cycle() {
    let mut pve = pve_at("9.1.2");
    let ws = Workspace::new(&pve);
    let missing = "docker.io/library/nosuch:1";
    ws.commit_specs(&[("a.yaml", oci_spec("web-a", "pve1", missing))]);
    let mut daemon = common::engine::in_process(&ws);
    daemon.cycle().await;
    assert_eq!(pulls(&mut pve).len(), 1);
    let (status, _, message) = ws.condition("web-a", "Ready");
    assert_eq!(status, "False", "{message}");
    assert!(
        message.contains(&format!("PVE's pull of OCI image {missing}"))
            && message.contains("skopeo copy")
            && message.contains("exit code 1"),
        "{message}"
    );
    assert!(
        (pve.cts().iter()).all(|ct| ct["template"] == json!(true)),
        "no container: {:?}",
        pve.cts()
    );
    daemon.cycle().await;
    assert_eq!(pulls(&mut pve).len(), 1, "backed off, not pulled again");
}

/// A pull that outlasts the create's wait: the spec waits (its status says PVE pulls the
/// image), the next cycle waits for the same task instead of pulling again, and the container
/// is made once the archive is there.
#[tokio::test]
async fn a_pull_that_outlasts_the_wait_is_waited_for_not_sent_again() {
    let mut pve = pve_at("9.1.2");
    pve.call("download_timing", json!({"secs": 3}))
        .expect("timing");
    pve.set_time_scale(1.0);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", oci_spec("web-a", "pve1", NGINX))]);
    let mut daemon = common::engine::in_process(&ws);
    daemon.engine.task_wait = std::time::Duration::from_millis(200);
    daemon.cycle().await;
    let (_, _, message) = ws.condition("web-a", "Ready");
    assert!(
        message.contains(&format!("PVE pulls OCI image {NGINX}")),
        "{message}"
    );
    daemon.cycle().await;
    assert_eq!(pulls(&mut pve).len(), 1, "the running pull is waited for");
    std::thread::sleep(std::time::Duration::from_secs(4));
    daemon.cycle().await;
    assert_eq!(pulls(&mut pve).len(), 1);
    let (status, _, message) = ws.condition("web-a", "Ready");
    assert_eq!(status, "True", "{message}");
}
