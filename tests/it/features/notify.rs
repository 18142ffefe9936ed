//! `[[notify]]` targets against a local HTTP receiver that checks what arrives: the webhook's
//! HMAC-SHA256 signature over the exact body, Slack's text, the commit statuses of
//! Gitea/Forgejo, GitHub and GitLab in their own dialects, retries, the bounded queue, a
//! failing target; and the daemon end to end against fakepve (a commit's status follows its
//! specs, a failing target shows in `_summary.yaml`).

use crate::common;

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::engine::{Workspace, spec};
use common::{FakePve, Scenario, default_scenario};
use proxsync::config::Config;
use proxsync::telemetry::notify::{CommitState, Event, Notifier, SIGNATURE_HEADER};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const KEY: &str = "test-hmac-key";

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Received {
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
            .unwrap_or("")
    }
}

/// A plain HTTP/1.1 receiver on a loopback port: records each POST and answers with the next
/// scripted status (else 200), or 401 for paths under `/fail`.
struct Receiver {
    port: u16,
    got: Mutex<mpsc::Receiver<Received>>,
    script: Arc<Mutex<VecDeque<u16>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        let script: Arc<Mutex<VecDeque<u16>>> = Arc::default();
        let answers = script.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let Some(req) = read_request(&stream) else {
                    continue;
                };
                let status = if req.path.starts_with("/fail") {
                    401
                } else {
                    answers.lock().unwrap().pop_front().unwrap_or(200)
                };
                let body = if status == 401 { "bad token" } else { "" };
                let _ = (&stream).write_all(
                    format!(
                        "HTTP/1.1 {status} Status\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
                if tx.send(req).is_err() {
                    return;
                }
            }
        });
        Receiver {
            port,
            got: Mutex::new(rx),
            script,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The next request, waiting without blocking the runtime the senders run on.
    async fn next(&self) -> Received {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = self.got.lock().unwrap().try_recv() {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "no notification arrived within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Everything received so far (for the daemon test, which runs in another process).
    fn drain(&self) -> Vec<Received> {
        self.got.lock().unwrap().try_iter().collect()
    }
}

fn read_request(stream: &std::net::TcpStream) -> Option<Received> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    assert_eq!(method, "POST", "notifications are POSTs");
    let mut headers = BTreeMap::new();
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let len: usize = headers.get("content-length")?.parse().ok()?;
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        path,
        headers,
        body,
    })
}

/// Checks the signature header as a receiver would: HMAC-SHA256 of the raw body.
fn signature_verifies(r: &Received, key: &str) -> bool {
    let Some(hex) = r.header(SIGNATURE_HEADER).strip_prefix("sha256=") else {
        return false;
    };
    let Some(tag) = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
    else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_bytes());
    ring::hmac::verify(&key, &r.body, &tag).is_ok()
}

/// A config with one site (never contacted) and `targets` as `[[notify]]` TOML.
fn config(dir: &Path, targets: &str) -> Config {
    std::fs::write(dir.join("hook.secret"), format!("{KEY}\n")).unwrap();
    std::fs::write(dir.join("forge.token"), "forge-token\n").unwrap();
    let text = format!(
        "status_dir = \"status\"\nstate_dir = \"state\"\n[source]\npath = \"repo\"\n\
         [[site]]\nname = \"lab\"\nendpoint = \"https://pve.invalid:8006\"\n\
         token_id = \"p@pve!t\"\n{targets}"
    );
    Config::parse(&dir.join("proxsync.toml"), &text).unwrap()
}

fn stalled(spec: &str) -> Event {
    Event::SpecStalled {
        spec: spec.into(),
        reason: "ImageNotFound".into(),
        message: "template 9999 does not exist".into(),
    }
}

fn commit_state(state: CommitState) -> Event {
    Event::CommitState {
        commit: SHA.into(),
        state,
        description: "applied".into(),
        stalled: vec![],
    }
}

#[tokio::test]
async fn a_webhook_message_is_signed_over_its_exact_body() {
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start();
    let cfg = config(
        dir.path(),
        &format!(
            "[[notify]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\nsecret_file = \"hook.secret\"\n",
            rx.url("/hook")
        ),
    );
    let notifier = Notifier::start(&cfg).unwrap().expect("one target");
    notifier.send(&[stalled("web-01"), commit_state(CommitState::Failure)]);
    let r = rx.next().await;
    assert_eq!(r.path, "/hook");
    assert_eq!(r.header("content-type"), "application/json");
    assert!(signature_verifies(&r, KEY), "signature: {:?}", r.headers);
    assert!(!signature_verifies(&r, "another key"));
    let v = r.json();
    assert_eq!(v["install_id"], "main");
    assert_eq!(v["id"].as_str().unwrap().len(), 32);
    assert_eq!(r.header("x-proxsync-delivery"), v["id"].as_str().unwrap());
    assert!(v["timestamp"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(v["events"][0]["type"], "spec_stalled");
    assert_eq!(v["events"][0]["spec"], "web-01");
    assert_eq!(v["events"][0]["reason"], "ImageNotFound");
    assert_eq!(v["events"][1]["type"], "commit_state");
    assert_eq!(v["events"][1]["state"], "failure");
    // The stats are updated once the answer is read, after the receiver has the message.
    let deadline = Instant::now() + Duration::from_secs(30);
    while notifier.stats()[0].sent == 0 {
        assert!(Instant::now() < deadline, "{:?}", notifier.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(notifier.stats()[0].sent, 1);
}

#[tokio::test]
async fn slack_gets_one_line_per_event_at_its_secret_url() {
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start();
    std::fs::write(
        dir.path().join("slack.url"),
        rx.url("/services/T0/B0/SECRET"),
    )
    .unwrap();
    let cfg = config(
        dir.path(),
        "[[notify]]\nname = \"chat\"\ntype = \"slack\"\nurl_file = \"slack.url\"\n",
    );
    let notifier = Notifier::start(&cfg).unwrap().unwrap();
    notifier.send(&[
        stalled("web-01"),
        Event::SpecReady {
            spec: "db-01".into(),
        },
    ]);
    let r = rx.next().await;
    assert_eq!(r.path, "/services/T0/B0/SECRET");
    let text = r.json()["text"].as_str().unwrap().to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].contains("2 changes"), "{text}");
    assert!(
        lines[1].contains("`web-01` Stalled: ImageNotFound"),
        "{text}"
    );
    assert!(lines[2].contains("`db-01` Ready"), "{text}");
}

#[tokio::test]
async fn forges_get_the_commit_status_in_their_own_dialect() {
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start();
    let target = |name: &str, kind: &str, base: &str, repo: &str| {
        format!(
            "[[notify]]\nname = \"{name}\"\ntype = \"{kind}\"\nurl = \"{}\"\nrepo = \"{repo}\"\n\
             secret_file = \"forge.token\"\n",
            rx.url(base)
        )
    };
    let cfg = config(
        dir.path(),
        &[
            target("gitea", "gitea", "/gitea", "ops/vms"),
            target("github", "github", "/github", "ops/vms"),
            target("gitlab", "gitlab", "/gitlab", "ops/infra/vms"),
        ]
        .concat(),
    );
    let notifier = Notifier::start(&cfg).unwrap().unwrap();
    // Forges take commit states only: the spec event is not theirs.
    notifier.send(&[stalled("web-01"), commit_state(CommitState::Pending)]);
    let mut got: BTreeMap<String, Received> = BTreeMap::new();
    for _ in 0..3 {
        let r = rx.next().await;
        got.insert(r.path.split('/').nth(1).unwrap().to_string(), r);
    }
    let gitea = &got["gitea"];
    assert_eq!(
        gitea.path,
        format!("/gitea/api/v1/repos/ops/vms/statuses/{SHA}")
    );
    assert_eq!(gitea.header("authorization"), "token forge-token");
    assert_eq!(gitea.json()["state"], "pending");
    assert_eq!(gitea.json()["context"], "proxsync/main");
    assert_eq!(gitea.json()["description"], "applied");

    let github = &got["github"];
    assert_eq!(github.path, format!("/github/repos/ops/vms/statuses/{SHA}"));
    assert_eq!(github.header("authorization"), "Bearer forge-token");
    assert_eq!(github.header("accept"), "application/vnd.github+json");
    assert_eq!(github.json()["state"], "pending");
    assert_eq!(github.json()["context"], "proxsync/main");

    let gitlab = &got["gitlab"];
    assert_eq!(
        gitlab.path,
        format!("/gitlab/api/v4/projects/ops%2Finfra%2Fvms/statuses/{SHA}")
    );
    assert_eq!(gitlab.header("private-token"), "forge-token");
    assert_eq!(gitlab.header("authorization"), "");
    assert_eq!(gitlab.json()["state"], "running");
    assert_eq!(gitlab.json()["name"], "proxsync/main");

    // A refused commit is an error (GitLab: failed).
    notifier.commit_refused(SHA, "not signed by a trusted key");
    for _ in 0..3 {
        let r = rx.next().await;
        let want = if r.path.starts_with("/gitlab") {
            "failed"
        } else {
            "error"
        };
        assert_eq!(r.json()["state"], want, "{}", r.path);
        assert_eq!(r.json()["description"], "not signed by a trusted key");
    }
}

#[tokio::test]
async fn a_failed_attempt_is_retried_with_the_same_body() {
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start();
    rx.script.lock().unwrap().extend([503]);
    let cfg = config(
        dir.path(),
        &format!(
            "[[notify]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\nsecret_file = \"hook.secret\"\n",
            rx.url("/hook")
        ),
    );
    let notifier = Notifier::start(&cfg).unwrap().unwrap();
    notifier.send(&[stalled("web-01")]);
    let first = rx.next().await;
    let second = rx.next().await;
    assert_eq!(first.body, second.body, "a retry resends the same message");
    assert_eq!(first.json()["id"], second.json()["id"]);
    // The stats are updated once the answer is read.
    let deadline = Instant::now() + Duration::from_secs(30);
    while notifier.stats()[0].sent == 0 {
        assert!(Instant::now() < deadline, "{:?}", notifier.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stats = &notifier.stats()[0];
    assert_eq!((stats.sent, stats.failures), (1, 0));
    assert!(notifier.failing().is_empty());
}

#[tokio::test]
async fn a_permanent_error_is_reported_without_the_secret_url() {
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start();
    std::fs::write(dir.path().join("slack.url"), rx.url("/fail/T0/B0/SECRET")).unwrap();
    let cfg = config(
        dir.path(),
        "[[notify]]\nname = \"chat\"\ntype = \"slack\"\nurl_file = \"slack.url\"\n",
    );
    let notifier = Notifier::start(&cfg).unwrap().unwrap();
    notifier.send(&[stalled("web-01")]);
    rx.next().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while notifier.failing().is_empty() {
        assert!(Instant::now() < deadline, "{:?}", notifier.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A 401 is not retried.
    assert!(rx.drain().is_empty(), "no retry of a 401");
    let failing = notifier.failing();
    assert_eq!(failing[0].target, "chat");
    assert_eq!(failing[0].kind, "slack");
    assert_eq!(failing[0].failures, 1);
    assert!(failing[0].last_error.contains("401"), "{failing:?}");
    assert!(failing[0].last_error.contains("bad token"), "{failing:?}");
    assert!(!format!("{failing:?}").contains("SECRET"), "{failing:?}");
}

#[tokio::test]
async fn a_full_queue_drops_its_oldest_batches_and_says_how_many() {
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start();
    let cfg = config(
        dir.path(),
        &format!(
            "[[notify]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\nsecret_file = \"hook.secret\"\n",
            rx.url("/hook")
        ),
    );
    let notifier = Notifier::start(&cfg).unwrap().unwrap();
    // The test runtime has one thread: the sender runs only once this test awaits, so all
    // of these batches are queued first.
    let batches = proxsync::telemetry::notify::QUEUE_CAPACITY + 6;
    for i in 0..batches {
        notifier.send(&[Event::SpecReady {
            spec: format!("s{i}"),
        }]);
    }
    let v = rx.next().await.json();
    assert_eq!(v["dropped"], 6);
    let events = v["events"].as_array().unwrap();
    assert_eq!(events.len(), proxsync::telemetry::notify::QUEUE_CAPACITY);
    assert_eq!(events[0]["spec"], "s6", "the oldest were dropped");
    assert_eq!(notifier.stats()[0].dropped, 6);
}

#[tokio::test]
async fn what_comes_within_min_interval_goes_out_together() {
    let dir = tempfile::tempdir().unwrap();
    let rx = Receiver::start();
    let cfg = config(
        dir.path(),
        &format!(
            "[[notify]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\nsecret_file = \"hook.secret\"\nmin_interval = \"1s\"\n",
            rx.url("/hook")
        ),
    );
    let notifier = Notifier::start(&cfg).unwrap().unwrap();
    notifier.send(&[commit_state(CommitState::Pending)]);
    let first = rx.next().await.json();
    assert_eq!(first["events"].as_array().unwrap().len(), 1);
    // Sent right after the first message: held until min_interval has passed, then sent
    // as one message, the commit's pending state replaced by its latest.
    notifier.send(&[stalled("web-01"), commit_state(CommitState::Pending)]);
    notifier.send(&[commit_state(CommitState::Failure)]);
    let second = rx.next().await.json();
    let types: Vec<&str> = second["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["spec_stalled", "commit_state"]);
    assert_eq!(second["events"][1]["state"], "failure");
}

// ---- the daemon end to end ------------------------------------------------------------------

fn head(ws: &Workspace) -> String {
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(ws.path("repo"))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Collects what the receiver gets until `done` holds for everything so far.
fn wait_for(
    rx: &Receiver,
    all: &mut Vec<Received>,
    what: &str,
    done: impl Fn(&[Received]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !done(all) {
        assert!(
            Instant::now() < deadline,
            "{what}: not within 90 s; got {all:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
        all.extend(rx.drain());
    }
}

/// Every event of every webhook message received.
fn webhook_events(all: &[Received]) -> Vec<serde_json::Value> {
    all.iter()
        .filter(|r| r.path == "/hook")
        .flat_map(|r| r.json()["events"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn has_commit_state(all: &[Received], sha: &str, state: &str) -> bool {
    webhook_events(all)
        .iter()
        .any(|e| e["type"] == "commit_state" && e["commit"] == sha && e["state"] == state)
}

fn has_forge_status(all: &[Received], sha: &str, state: &str) -> bool {
    all.iter().any(|r| {
        r.path == format!("/api/v1/repos/ops/vms/statuses/{sha}") && r.json()["state"] == state
    })
}

/// A container spec on site `lab`, made from the archive of [`with_containers`].
fn ct_spec(name: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: {name}\nspec:\n  \
         forProvider:\n    site: lab\n    node: pve1\n    \
         template: local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\n"
    )
}

/// The default scenario with a container archive, and container 777: this install's tag and a
/// typed marker that does not verify, an orphan from the first cycle (reported, never deleted).
fn with_containers() -> Scenario {
    Scenario::default()
        .file(
            "local",
            "debian-12-standard_12.7-1_amd64.tar.zst",
            126_000_000,
            "vztmpl",
        )
        .ct(serde_json::json!({
            "vmid": 777, "name": "typed", "node": "pve1",
            "config": {"hostname": "typed", "tags": "proxsync.test",
                       "rootfs": "local-lvm:vm-777-disk-0,size=1G",
                       "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:07:77,type=veth",
                       "description": "proxsync-id: install=test spec=gone uid=0000000000000000 \
                                       mac=00000000000000000000000000000000"}
        }))
}

/// The text of every Slack message received at `path`.
fn slack_texts(all: &[Received], path: &str) -> String {
    all.iter()
        .filter(|r| r.path == path)
        .map(|r| r.json()["text"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_daemon_tells_each_commits_state_and_reports_a_failing_target() {
    let pve = with_containers().start();
    let rx = Receiver::start();
    let extra = format!(
        "[[notify]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{hook}\"\nsecret_file = \"hook.secret\"\n\
         min_interval = \"1s\"\n\n\
         [[notify]]\nname = \"forge\"\ntype = \"gitea\"\nurl = \"{base}\"\nrepo = \"ops/vms\"\n\
         secret_file = \"forge.token\"\nmin_interval = \"1s\"\n\n\
         [[notify]]\nname = \"chat\"\ntype = \"slack\"\nurl_file = \"slack.url\"\nmin_interval = \"1s\"\n",
        hook = rx.url("/hook"),
        base = rx.url(""),
    );
    let ws = Workspace::with_extra(&pve, &extra);
    std::fs::write(ws.path("hook.secret"), KEY).unwrap();
    std::fs::write(ws.path("forge.token"), "forge-token").unwrap();
    std::fs::write(ws.path("slack.url"), rx.url("/fail/T0/B0/SECRET")).unwrap();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    let first = head(&ws);

    let mut daemon = Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(["run", "--config"])
        .arg(ws.config())
        .env("PROXSYNC_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(ws.path("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let mut all = Vec::new();
    wait_for(&rx, &mut all, "the first commit applied", |all| {
        has_commit_state(all, &first, "success") && has_forge_status(all, &first, "success")
    });
    let events = webhook_events(&all);
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "spec_ready" && e["spec"] == "web-01"),
        "{events:#?}"
    );
    for r in all.iter().filter(|r| r.path == "/hook") {
        assert!(signature_verifies(r, KEY), "{r:?}");
    }

    // A second commit adds a spec whose template does not exist: Stalled, the commit fails
    // naming it, and the forge shows the failure.
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9999", "")),
    ]);
    let second = head(&ws);
    wait_for(&rx, &mut all, "the second commit failed", |all| {
        has_commit_state(all, &second, "failure") && has_forge_status(all, &second, "failure")
    });
    let events = webhook_events(&all);
    let failure = events
        .iter()
        .find(|e| {
            e["type"] == "commit_state" && e["commit"] == second.as_str() && e["state"] == "failure"
        })
        .unwrap();
    assert_eq!(failure["stalled"][0]["spec"], "web-02", "{failure}");
    assert_eq!(
        failure["stalled"][0]["reason"], "ImageNotFound",
        "{failure}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "spec_stalled" && e["spec"] == "web-02"),
        "{events:#?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "spec_ready" && e["spec"] == "web-02"),
        "{events:#?}"
    );

    // A container is made, then its spec removed: the webhook and Slack name the container
    // deleted, and the orphan container listed since the first cycle; every body is version 2.
    let with_ct = [
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9999", "")),
        ("c.yaml", ct_spec("dns-01")),
    ];
    ws.commit_specs(&with_ct);
    let third = head(&ws);
    wait_for(&rx, &mut all, "the container made", |all| {
        has_commit_state(all, &third, "success")
    });
    ws.commit_specs(&with_ct[..2]);
    let deleted = |all: &[Received]| {
        webhook_events(all)
            .into_iter()
            .find(|e| e["type"] == "spec_deleted" && e["spec"] == "dns-01")
    };
    wait_for(&rx, &mut all, "the container deleted", |all| {
        deleted(all).is_some()
            && slack_texts(all, "/fail/T0/B0/SECRET").contains(":wastebasket: `dns-01`")
    });
    let event = deleted(&all).unwrap();
    assert_eq!(event["kind"], "lxc", "{event}");
    let vmid = event["vmid"].as_u64().expect("a VMID");
    let orphan = webhook_events(&all)
        .into_iter()
        .find(|e| e["type"] == "orphan_found")
        .expect("the orphan told");
    assert_eq!(
        orphan,
        serde_json::json!({"type": "orphan_found", "site": "lab", "vmid": 777, "kind": "lxc",
                           "name": "typed"})
    );
    for r in all.iter().filter(|r| r.path == "/hook") {
        assert_eq!(r.json()["version"], 2, "{r:?}");
    }
    let slack = slack_texts(&all, "/fail/T0/B0/SECRET");
    assert!(
        slack.contains(&format!(
            ":wastebasket: `dns-01` removed: container {vmid} on lab deleted"
        )),
        "{slack}"
    );
    assert!(
        slack.contains(":grey_question: orphan container 777 (typed) on lab"),
        "{slack}"
    );

    // The Slack target answers 401: `_summary.yaml` says so at a later cycle (a reconcile
    // request starts one), without its URL.
    let summary = ws.path("status/_summary.yaml");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&summary).unwrap_or_default();
        if text.contains("notifyFailures") {
            assert!(text.contains("target: chat"), "{text}");
            assert!(text.contains("401"), "{text}");
            assert!(!text.contains("SECRET"), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "no notifyFailures in {text}");
        let out = ws.proxsync(&["reconcile"]);
        assert!(out.status.success(), "{}", common::engine::text(&out));
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    let status = daemon.wait().unwrap();
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(ws.path("daemon.log")).unwrap()
    );
    let log = std::fs::read_to_string(ws.path("daemon.log")).unwrap();
    assert!(
        !log.contains("SECRET"),
        "the Slack URL never reaches the log"
    );
}

/// Without `[source] verify`, a force-push back to an older commit is applied and told once,
/// as `commit_rewound` naming both commits.
#[test]
fn the_daemon_tells_a_rewind_once() {
    let pve = FakePve::start(default_scenario());
    let rx = Receiver::start();
    let extra = format!(
        "[[notify]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{hook}\"\n\
         secret_file = \"hook.secret\"\nmin_interval = \"1s\"\n",
        hook = rx.url("/hook"),
    );
    let ws = Workspace::with_extra(&pve, &extra);
    std::fs::write(ws.path("hook.secret"), KEY).unwrap();
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    let first = head(&ws);
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(["run", "--config"])
        .arg(ws.config())
        .env("PROXSYNC_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(ws.path("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let mut all = Vec::new();
    wait_for(&rx, &mut all, "the first commit applied", |all| {
        has_commit_state(all, &first, "success")
    });
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    let second = head(&ws);
    wait_for(&rx, &mut all, "the second commit applied", |all| {
        has_commit_state(all, &second, "success")
    });

    ws.git(&["reset", "-q", "--hard", &first]);
    let rewound = |all: &[Received]| {
        webhook_events(all)
            .into_iter()
            .filter(|e| e["type"] == "commit_rewound")
            .collect::<Vec<_>>()
    };
    wait_for(&rx, &mut all, "the rewind told", |all| {
        !rewound(all).is_empty() && has_commit_state(all, &first, "success")
    });
    assert_eq!(
        rewound(&all),
        [serde_json::json!({"type": "commit_rewound", "commit": first, "from": second})]
    );
    // Later cycles (a reconcile request) do not tell it again.
    let out = ws.proxsync(&["reconcile"]);
    assert!(out.status.success(), "{}", common::engine::text(&out));
    std::thread::sleep(Duration::from_secs(2));
    all.extend(rx.drain());
    assert_eq!(rewound(&all).len(), 1, "{all:#?}");
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    assert!(daemon.wait().unwrap().success());
}
