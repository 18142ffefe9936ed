//! Attacks on containers from OCI images (`template: {oci: REFERENCE}`): hostile references,
//! PVE's behaviour relied upon (task id, shared storages, races), failures, a kill mid-pull,
//! `plan`.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::common;

use common::engine::{Workspace, next_seq, writes_since};
use common::{FakePve, Scenario};

const NGINX: &str = "docker.io/library/nginx:1.27";

fn yaml_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn oci_spec_on(name: &str, node: &str, reference: &str, storage: Option<&str>) -> String {
    let storage = storage
        .map(|s| format!(", storage: {}", yaml_quote(s)))
        .unwrap_or_default();
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: {name}\nspec:\n  \
         forProvider:\n    site: lab\n    node: {node}\n    template: {{oci: {}{storage}}}\n",
        yaml_quote(reference)
    )
}

fn oci_spec(name: &str, node: &str, reference: &str) -> String {
    oci_spec_on(name, node, reference, None)
}

fn pve_with(images: &[&str]) -> FakePve {
    let mut pve = Scenario::default().set("version", json!("9.1.2")).start();
    for (i, r) in images.iter().enumerate() {
        pve.call("oci_image", json!({"reference": r, "size": 4096 + i}))
            .expect("oci_image");
    }
    pve
}

fn pulls(pve: &mut FakePve) -> Vec<Value> {
    let v = pve.call("oci_pulls", json!({})).expect("oci_pulls");
    v.as_array().cloned().unwrap_or_default()
}

fn pull_posts(pve: &mut FakePve) -> Vec<common::fakepve::RecordedRequest> {
    (pve.requests().into_iter())
        .filter(|r| r.method == "POST" && r.path.ends_with("/oci-registry-pull"))
        .collect()
}

fn ct_creates(pve: &mut FakePve) -> Vec<common::fakepve::RecordedRequest> {
    (pve.requests().into_iter())
        .filter(|r| r.method == "POST" && r.path.ends_with("/lxc"))
        .collect()
}

fn form(body: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(body.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

// ---------------------------------------------------------------- 1. hostile references

/// Every hostile reference or storage is refused when the specs are read: nothing reaches
/// PVE (no pull, no create), and the one well-formed spec's form body holds exactly
/// `reference` and `filename`, the file name a plain `[A-Za-z0-9_.-]` name.
#[test]
fn hostile_references_never_reach_pve() {
    let mut pve = pve_with(&[NGINX]);
    let ws = Workspace::new(&pve);
    let long = format!("a:{}", "b".repeat(199)); // 201 characters
    let hostile: Vec<(String, Option<&str>)> = vec![
        (format!("{NGINX}&filename=../../../etc/x"), None),
        (format!("{NGINX},storage=evil"), None),
        ("nginx:1.27 --src-creds=a:b".into(), None),
        ("nginx:1.27\nx".into(), None),
        ("nginx:1.27\r".into(), None),
        ("../../etc/passwd:1".into(), None),
        ("./nginx:1".into(), None),
        ("nginx:../../x".into(), None),
        ("docker.io/library/ng\u{0456}nx:1".into(), None), // Cyrillic i
        ("docker.io/library/nginx:1\u{0662}".into(), None), // Arabic-Indic digit in the tag
        ("d\u{00f6}cker.io/library/nginx:1".into(), None),
        ("docker.io/library/Nginx:1".into(), None),
        ("NGINX:1".into(), None),
        (long, None),
        ("docker.io/library/nginx:1.27%0a".into(), None),
        ("docker://docker.io/library/nginx:1.27".into(), None),
        ("docker.io/library/nginx:latest@sha256:abc".into(), None),
        (NGINX.into(), Some("local,shared=1")),
        (NGINX.into(), Some("../local")),
        (NGINX.into(), Some("loc al")),
        (NGINX.into(), Some("local\n")),
        (NGINX.into(), Some("l\u{00f6}cal")),
    ];
    let mut files: Vec<(String, String)> = hostile
        .iter()
        .enumerate()
        .map(|(i, (r, s))| {
            (
                format!("h{i}.yaml"),
                oci_spec_on(&format!("h{i}"), "pve1", r, *s),
            )
        })
        .collect();
    files.push(("ok.yaml".into(), oci_spec("ok", "pve1", NGINX)));
    ws.commit_specs(
        &files
            .iter()
            .map(|(a, b)| (a.as_str(), b.clone()))
            .collect::<Vec<_>>(),
    );
    let (_, out) = ws.run_once();
    let posts = pull_posts(&mut pve);
    assert_eq!(
        posts.len(),
        1,
        "only the good spec's pull: {posts:?}\n{out}"
    );
    let f = form(&posts[0].body);
    let keys: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["reference", "filename"], "{f:?}");
    assert_eq!(f[0].1, NGINX);
    assert!(
        f[1].1
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)),
        "{f:?}"
    );
    assert!(
        posts[0]
            .path
            .ends_with("/nodes/pve1/storage/local/oci-registry-pull")
    );
    let creates = ct_creates(&mut pve);
    assert_eq!(
        creates.len(),
        1,
        "only the good spec's container: {creates:?}"
    );
    for (i, (r, s)) in hostile.iter().enumerate() {
        let name = format!("h{i}");
        assert!(
            out.contains(&name)
                || std::fs::metadata(ws.path(&format!("status/{name}.yaml"))).is_ok(),
            "spec {name} ({r:?}, {s:?}) is said to be refused: {out}"
        );
    }
}

/// Two references that normalise to the same name (`a/b_c:1`, `a_b/c:1`) are two files, each
/// container made from its own image.
#[test]
fn references_normalising_alike_are_two_files() {
    let (a, b) = ("a/b_c:1", "a_b/c:1");
    let mut pve = pve_with(&[a, b]);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", oci_spec("ct-a", "pve1", a)),
        ("b.yaml", oci_spec("ct-b", "pve1", b)),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(pulls(&mut pve).len(), 2);
    let creates = ct_creates(&mut pve);
    let templates: Vec<String> = creates
        .iter()
        .filter_map(|c| form(&c.body).into_iter().find(|(k, _)| k == "ostemplate"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(templates.len(), 2);
    assert_ne!(templates[0], templates[1]);
}

/// Two well-formed references, for two different images, that get the same file: the
/// normalised name is equal (`/` and `_` both become `_`) and the 32-bit FNV-1a hash collides
/// (found by a birthday search over 2^20 such references). The second container is made from
/// the first's image, silently, with no pull of its own.
/// References crafted to normalise to one name (`a`, `_` and `/` only): 2^20 of them get 2^20
/// file names. With a 32-bit hash two of them shared a file (a birthday pair), and a container
/// was made from the other's image.
#[test]
fn references_crafted_alike_never_share_a_file() {
    let mut seen: HashMap<String, String> = HashMap::new();
    for bits in 0u32..(1 << 20) {
        let mut r = String::from("a");
        for i in 0..20 {
            r.push(if bits >> i & 1 == 1 { '/' } else { '_' });
            r.push('a');
        }
        r.push_str(":1");
        assert_eq!(proxsync::spec::oci::check_reference(&r), Ok(()), "{r}");
        let stem = proxsync::spec::oci::file_stem(&r);
        if let Some(other) = seen.insert(stem.clone(), r.clone()) {
            panic!("{other} and {r} share file {stem}");
        }
    }
}

/// PVE's task log is a file named after the whole UPID (pve-common `PVE::UPID::decode`:
/// `/var/log/pve/tasks/X/$upid`), so a UPID longer than NAME_MAX (255) cannot start: the
/// fork_worker's child fails `open_log` and the POST dies `starting worker failed: ... File
/// name too long`. The pull's UPID holds the file name as its id; a reference proxsync takes
/// (<= MAX_REFERENCE, 200) must give a UPID PVE can start.
#[test]
fn the_longest_reference_taken_gives_a_upid_pve_can_log() {
    let reference = format!(
        "registry.example.com/{}/app:{}",
        "team".repeat(30),
        "v".repeat(200 - 21 - 120 - 5)
    );
    assert_eq!(reference.len(), 200);
    assert_eq!(proxsync::spec::oci::check_reference(&reference), Ok(()));
    let mut pve = pve_with(&[&reference]);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", oci_spec("ct-a", "pve1", &reference))]);
    let _ = ws.run_once();
    let tasks = pve.tasks();
    let pull = tasks
        .iter()
        .find(|t| t.to_string().contains("ociregistrypull"))
        .unwrap_or_else(|| panic!("a pull task: {tasks:?}"));
    let upid = pull["upid"].as_str().unwrap_or_default().to_string();
    // The fake's node name is short and its pid 8 hex digits; PVE's would be the same or longer.
    assert!(
        upid.len() <= 255,
        "UPID of {} bytes: PVE could not create its task log: {upid}",
        upid.len()
    );
}

// ---------------------------------------------------------------- 2. PVE's behaviour

/// A storage shared by two nodes: one image, needed on both, is pulled once (the file then
/// is on both); a second pull on the other node is refused by PVE (`refusing to override
/// existing file`) once the first is done, and must not fail the second container.
#[test]
fn a_shared_storage_is_pulled_to_once() {
    let mut pve = pve_with(&[NGINX]);
    pve.call(
        "set_storage",
        json!({"name": "tmpl", "type": "dir", "shared": 1, "content": "vztmpl,rootdir",
               "path": "/mnt/pve/tmpl"}),
    )
    .expect("set_storage");
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", oci_spec_on("ct-a", "pve1", NGINX, Some("tmpl"))),
        ("b.yaml", oci_spec_on("ct-b", "pve2", NGINX, Some("tmpl"))),
    ]);
    let (ok, out) = ws.run_once();
    let posts = pull_posts(&mut pve);
    let msgs: Vec<_> = ["ct-a", "ct-b"]
        .iter()
        .map(|n| ws.condition(n, "Ready"))
        .collect();
    assert!(ok, "{out}\n{msgs:?}");
    for (status, _, message) in &msgs {
        assert_eq!(status, "True", "{message}");
    }
    assert_eq!(posts.len(), 1, "one pull to a shared storage: {posts:?}");
}

/// The archive appears between preflight's listing and the POST (a pull that ended in that
/// gap, another daemon's, a person's `pvesh`): PVE refuses `refusing to override existing
/// file`; proxsync should take the file that is now there rather than fail the create.
/// Modelled with a second node on a shared storage, the first pull finished before.
#[test]
fn an_archive_that_appears_before_the_pull_is_used() {
    // Same as above, but in two runs, so only the listing is stale.
    let mut pve = pve_with(&[NGINX]);
    pve.call(
        "set_storage",
        json!({"name": "tmpl", "type": "dir", "shared": 1, "content": "vztmpl,rootdir",
               "path": "/mnt/pve/tmpl"}),
    )
    .expect("set_storage");
    pve.call("download_timing", json!({"secs": 2}))
        .expect("timing");
    pve.set_time_scale(1.0);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", oci_spec_on("ct-a", "pve1", NGINX, Some("tmpl"))),
        ("b.yaml", oci_spec_on("ct-b", "pve2", NGINX, Some("tmpl"))),
    ]);
    let (_, out) = ws.run_once();
    let (status, _, message) = ws.condition("ct-b", "Ready");
    assert_eq!(status, "True", "{message}\n{out}");
}

/// A file of the archive's name put there by hand (or left by an older pull of a tag that has
/// moved since) is used as it is: no pull, no check. Recorded as behaviour, not asserted as a
/// bug.
#[test]
fn a_file_of_the_name_put_there_by_hand_is_used_without_a_pull() {
    let mut pve = pve_with(&[NGINX]);
    let name = proxsync::spec::oci::archive(NGINX);
    pve.store_file("local", &name, 10, "vztmpl");
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", oci_spec("ct-a", "pve1", NGINX))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(pulls(&mut pve).len(), 0);
    assert_eq!(ct_creates(&mut pve).len(), 1);
}

// ---------------------------------------------------------------- 3. failures

fn pull_posts_after_two_cycles(pve: &mut FakePve, ws: &Workspace) -> (usize, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut d = common::engine::in_process(ws);
    rt.block_on(d.cycle());
    rt.block_on(d.cycle());
    let (_, _, message) = ws.condition("ct-a", "Ready");
    (pull_posts(pve).len(), message)
}

#[test]
fn without_skopeo_the_status_says_so_and_the_daemon_backs_off() {
    let mut pve = pve_with(&[NGINX]);
    pve.call("skopeo", json!({"installed": false}))
        .expect("skopeo");
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", oci_spec("ct-a", "pve1", NGINX))]);
    let (n, message) = pull_posts_after_two_cycles(&mut pve, &ws);
    assert!(message.contains("skopeo"), "{message}");
    assert_eq!(n, 1, "backed off: {message}");
    assert!(ct_creates(&mut pve).is_empty());
}

#[test]
fn a_storage_without_vztmpl_is_refused_before_anything_is_sent() {
    let mut pve = pve_with(&[NGINX]);
    pve.call(
        "set_storage",
        json!({"name": "data", "type": "dir", "content": "images,rootdir", "path": "/d"}),
    )
    .expect("set_storage");
    pve.call(
        "set_storage",
        json!({"name": "thin", "type": "lvmthin", "content": "images,rootdir"}),
    )
    .expect("set_storage");
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", oci_spec_on("ct-a", "pve1", NGINX, Some("data"))),
        ("b.yaml", oci_spec_on("ct-b", "pve1", NGINX, Some("thin"))),
        ("c.yaml", oci_spec_on("ct-c", "pve1", NGINX, Some("nosuch"))),
    ]);
    let before = next_seq(&mut pve);
    let (_, out) = ws.run_once();
    let writes = writes_since(&mut pve, before);
    assert!(writes.is_empty(), "{writes:?}\n{out}");
    for n in ["ct-a", "ct-b", "ct-c"] {
        let (status, _, message) = ws.condition(n, "Ready");
        assert_eq!(status, "False", "{n}: {message}");
        assert!(
            message.contains("vztmpl") || message.contains("nosuch"),
            "{n}: {message}"
        );
    }
}

#[test]
fn a_node_offline_sends_no_pull_and_says_so() {
    let mut pve = pve_with(&[NGINX]);
    pve.set_node_offline("pve2", true);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", oci_spec("ct-a", "pve2", NGINX))]);
    let (n, message) = pull_posts_after_two_cycles(&mut pve, &ws);
    assert_eq!(n, 0, "{message}");
    assert!(message.contains("pve2"), "{message}");
}

// ---------------------------------------------------------------- 4. a kill mid-pull

/// The daemon is killed while PVE pulls (its engine dropped, the task still running), a new
/// one starts: it waits for that task (no second POST), reserves no VMID while it runs, and
/// makes exactly one container.
#[test]
fn a_kill_mid_pull_waits_for_the_running_task() {
    let mut pve = pve_with(&[NGINX]);
    pve.call("download_timing", json!({"secs": 3}))
        .expect("timing");
    pve.set_time_scale(1.0);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", oci_spec("ct-a", "pve1", NGINX))]);
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut d = common::engine::in_process(&ws);
        d.engine.task_wait = std::time::Duration::from_millis(200);
        // Killed mid-cycle: the cycle's future dropped while it waits for the pull.
        let _ = rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_millis(600), d.cycle()).await
        });
    }
    assert_eq!(pull_posts(&mut pve).len(), 1);
    // A new process.
    let (ok, out) = ws.run_once();
    assert_eq!(pull_posts(&mut pve).len(), 1, "no second pull: {out}");
    assert!(ct_creates(&mut pve).is_empty() || ok, "{out}");
    std::thread::sleep(std::time::Duration::from_secs(3));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(pull_posts(&mut pve).len(), 1);
    assert_eq!(ct_creates(&mut pve).len(), 1, "one container");
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(ct_creates(&mut pve).len(), 1, "never a second container");
}

// ---------------------------------------------------------------- 5. plan

#[test]
fn plan_with_an_image_not_pulled_sends_nothing() {
    let mut pve = pve_with(&[NGINX]);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", oci_spec("ct-a", "pve1", NGINX))]);
    let before = next_seq(&mut pve);
    let out = ws.proxsync(&["plan"]);
    let text = common::engine::text(&out);
    let writes = writes_since(&mut pve, before);
    assert!(writes.is_empty(), "{writes:?}\n{text}");
    println!("{text}");
    // And on 9.0 the plan must not promise a create the run refuses.
    let mut old = Scenario::default().set("version", json!("9.0.10")).start();
    let ws = Workspace::new(&old);
    ws.commit_specs(&[("a.yaml", oci_spec("ct-a", "pve1", NGINX))]);
    let before = next_seq(&mut old);
    let out = ws.proxsync(&["plan"]);
    let text = common::engine::text(&out);
    assert!(writes_since(&mut old, before).is_empty());
    println!("---- 9.0 ----\n{text}");
    assert!(
        text.contains("9.1") || !text.to_lowercase().contains("create"),
        "plan on 9.0 promises a create the run refuses: {text}"
    );
}

/// Three containers of one image the registry does not have, on one node: a failed pull is
/// not remembered for the cycle (`get_or_try_init` leaves the cell empty on an error), so
/// each create of the cycle POSTs the pull again: one skopeo run per spec per cycle.
#[test]
fn a_failed_pull_is_sent_once_per_cycle_not_once_per_spec() {
    let mut pve = pve_with(&[]);
    let ws = Workspace::new(&pve);
    let missing = "docker.io/library/nosuch:1";
    ws.commit_specs(&[
        ("a.yaml", oci_spec("ct-a", "pve1", missing)),
        ("b.yaml", oci_spec("ct-b", "pve1", missing)),
        ("c.yaml", oci_spec("ct-c", "pve1", missing)),
    ]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut d = common::engine::in_process(&ws);
    rt.block_on(d.cycle());
    let done = pulls(&mut pve);
    assert_eq!(
        done.len(),
        1,
        "one failed pull per node and cycle: {done:?}"
    );
}

/// pve-container's OCI create (`PVE::LXC::Create::restore_oci_archive`) writes `entrypoint`,
/// `cmode: console`, `env`, `lxc.init.*`/`lxc.signal.halt` and `host-managed=1` on each NIC.
/// The next cycle must leave all of it alone.
#[test]
fn what_pct_create_writes_for_an_oci_image_is_left_alone() {
    let mut pve = pve_with(&[NGINX]);
    let ws = Workspace::new(&pve);
    let spec = oci_spec("ct-a", "pve1", NGINX)
        + "    networks:\n      - {name: eth0, bridge: vmbr0, ip: dhcp}\n    console: true\n";
    ws.commit_specs(&[("a.yaml", spec)]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let ct = pve
        .cts()
        .into_iter()
        .find(|c| c["template"] != json!(true))
        .expect("a container");
    let vmid = ct["vmid"].as_u64().unwrap() as u32;
    let net0 = ct["config"]["net0"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    pve.set_ct(
        vmid,
        json!({"config": {
            "entrypoint": "/docker-entrypoint.sh nginx -g 'daemon off;'",
            "cmode": "console",
            "env": "PATH=/usr/local/sbin:/usr/bin\u{0}NGINX_VERSION=1.27.5",
            "net0": format!("{net0},host-managed=1"),
        }}),
    );
    let before = next_seq(&mut pve);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let writes = writes_since(&mut pve, before);
    assert!(writes.is_empty(), "{writes:?}\n{out}");
}

/// `doctor` on a 9.0 site with an OCI spec: it should say the site cannot pull (the run
/// refuses), not that the image is fine.
#[test]
fn doctor_on_9_0_says_the_oci_spec_cannot_be_made() {
    let pve = Scenario::default().set("version", json!("9.0.10")).start();
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", oci_spec("ct-a", "pve1", NGINX))]);
    let out = ws.proxsync(&["doctor"]);
    let text = common::engine::text(&out);
    println!("{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().to_lowercase().starts_with("fail")
                && l.contains("ct-a")
                && l.contains("9.1")),
        "doctor does not say the OCI spec cannot be made on PVE 9.0: {text}"
    );
}
