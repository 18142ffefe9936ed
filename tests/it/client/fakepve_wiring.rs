//! The test harness itself, end to end: fakepve over verified TLS, token auth, fault controls
//! and the request log. If these fail, every other integration test is suspect.

use crate::common;

use common::{
    FakePve, Scenario, TEMPLATE_NAME, TEMPLATE_VMID, TOKEN_ID, TOKEN_SECRET, default_scenario,
    token_header, verified_client,
};
use serde_json::{Value, json};

async fn get(
    client: &reqwest::Client,
    pve: &FakePve,
    path: &str,
    secret: &str,
) -> (reqwest::StatusCode, Value) {
    let resp = client
        .get(pve.api_url(path))
        .header("Authorization", token_header(TOKEN_ID, secret))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e:?}"));
    let status = resp.status();
    let body = resp.json::<Value>().await.expect("a JSON body");
    (status, body)
}

#[tokio::test]
async fn token_lists_the_template_over_verified_tls() {
    let pve = FakePve::start(default_scenario());
    assert!(pve.url().starts_with("https://127.0.0.1:"), "{}", pve.url());
    let client = verified_client(&pve.ca_pem());

    let (status, body) = get(&client, &pve, "/cluster/resources?type=vm", TOKEN_SECRET).await;
    assert_eq!(status, 200, "{body}");
    let vms = body["data"].as_array().expect("data is a list");
    let template = vms
        .iter()
        .find(|vm| vm["vmid"] == json!(TEMPLATE_VMID))
        .unwrap_or_else(|| panic!("template {TEMPLATE_VMID} not listed: {body}"));
    assert_eq!(template["name"], TEMPLATE_NAME);
    assert_eq!(template["template"], 1);
    assert_eq!(template["node"], "pve1");
    assert_eq!(template["type"], "qemu");
    // type=vm is honoured: no nodes or storages in the answer.
    assert!(vms.iter().all(|r| r["type"] == "qemu"), "{body}");
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_certificate_fails_the_handshake() {
    let pve = FakePve::start(default_scenario());
    // A valid certificate, but not the fake's: a second fake's self-signed one.
    let other = FakePve::start(Scenario::empty());
    let stranger = verified_client(&other.ca_pem());
    let err = stranger
        .get(pve.api_url("/version"))
        .header("Authorization", token_header(TOKEN_ID, TOKEN_SECRET))
        .send()
        .await
        .expect_err("a client trusting another CA must not connect");
    assert!(err.is_connect(), "expected a connect (TLS) error: {err:?}");
    let chain = format!("{err:?}");
    assert!(
        chain.contains("InvalidCertificate"),
        "expected rustls to reject the certificate: {chain}"
    );
    // The same request with the right CA works, so the failure above is the trust check.
    let (status, body) = get(
        &verified_client(&pve.ca_pem()),
        &pve,
        "/version",
        TOKEN_SECRET,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["data"]["version"].is_string(), "{body}");
    // The handshake failed before any HTTP request reached the fake.
    let mut pve = pve;
    assert_eq!(pve.requests().len(), 1, "only the trusted request arrives");
}

#[tokio::test]
async fn a_wrong_token_secret_gets_401() {
    let mut pve = FakePve::start(default_scenario());
    let client = verified_client(&pve.ca_pem());
    let (status, body) = get(
        &client,
        &pve,
        "/cluster/resources?type=vm",
        "not-the-secret",
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        body["data"],
        Value::Null,
        "no data for a refused token: {body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("authentication failure"),
        "{body}"
    );
    // The refused request is logged, and the secret never appears in the log.
    let seen = pve.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, "/api2/json/cluster/resources");
    assert!(!format!("{seen:?}").contains(TOKEN_SECRET));
}

#[tokio::test]
async fn fault_controls_round_trip_and_the_request_log() {
    let mut pve = FakePve::start(default_scenario());
    let client = verified_client(&pve.ca_pem());

    // An injected 500 on a GET path, with its message.
    pve.fail_times("GET", "/cluster/resources", 500, "injected boom", 1);
    let (status, body) = get(&client, &pve, "/cluster/resources?type=vm", TOKEN_SECRET).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["message"], "injected boom\n");
    // times=1: the next one is answered normally.
    let (status, body) = get(&client, &pve, "/cluster/resources?type=vm", TOKEN_SECRET).await;
    assert_eq!(status, 200, "{body}");

    // An offline node shows in /nodes and /cluster/status, and requests for it get 595.
    let online = |body: &Value, node: &str| -> Value {
        body["data"]
            .as_array()
            .expect("a list")
            .iter()
            .find(|n| n["node"] == node || (n["type"] == "node" && n["name"] == node))
            .unwrap_or_else(|| panic!("{node} not in {body}"))
            .clone()
    };
    let (_, nodes) = get(&client, &pve, "/nodes", TOKEN_SECRET).await;
    assert_eq!(online(&nodes, "pve2")["status"], "online");
    pve.set_node_offline("pve2", true);
    let (_, nodes) = get(&client, &pve, "/nodes", TOKEN_SECRET).await;
    assert_eq!(online(&nodes, "pve2")["status"], "offline", "{nodes}");
    assert_eq!(online(&nodes, "pve1")["status"], "online", "{nodes}");
    let (_, cluster) = get(&client, &pve, "/cluster/status", TOKEN_SECRET).await;
    assert_eq!(online(&cluster, "pve2")["online"], 0, "{cluster}");
    let (status, body) = get(&client, &pve, "/nodes/pve2/qemu", TOKEN_SECRET).await;
    assert_eq!(status, 595, "{body}");

    // Bridges come from the scenario: vmbr0 and vmbr1.
    let (status, net) = get(
        &client,
        &pve,
        "/nodes/pve1/network?type=bridge",
        TOKEN_SECRET,
    )
    .await;
    assert_eq!(status, 200, "{net}");
    let bridges: Vec<&str> = net["data"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|i| i["iface"].as_str().expect("iface"))
        .collect();
    assert_eq!(bridges, ["vmbr0", "vmbr1"]);

    // The log has every request in order, with query strings.
    let seen = pve.requests();
    let lines: Vec<String> = seen
        .iter()
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect();
    assert_eq!(
        lines,
        [
            "GET /api2/json/cluster/resources?type=vm",
            "GET /api2/json/cluster/resources?type=vm",
            "GET /api2/json/nodes?",
            "GET /api2/json/nodes?",
            "GET /api2/json/cluster/status?",
            "GET /api2/json/nodes/pve2/qemu?",
            "GET /api2/json/nodes/pve1/network?type=bridge",
        ]
    );
    let last = seen.last().expect("a request").seq;
    pve.clear_requests();
    assert!(pve.requests().is_empty());
    get(&client, &pve, "/version", TOKEN_SECRET).await;
    let after = pve.requests_since(last + 1);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].path, "/api2/json/version");
}

#[test]
fn the_harness_reports_bad_commands_without_dying() {
    let mut pve = FakePve::start(default_scenario());
    let err = pve.call("no_such_command", json!({})).unwrap_err();
    assert!(err.contains("unknown command"), "{err}");
    let err = pve
        .call("set_vm", json!({"vmid": 9000, "bogus": 1}))
        .unwrap_err();
    assert!(err.contains("bogus"), "{err}");
    let err = pve.call("fail", json!({"method": "GET"})).unwrap_err();
    assert!(err.contains("suffix"), "{err}");
    let err = pve.call("vm", json!({"vmid": 4242})).unwrap_err();
    assert!(err.contains("4242"), "{err}");

    // Still alive, and the state controls work.
    let vm = pve.vm(TEMPLATE_VMID);
    assert_eq!(vm["name"], TEMPLATE_NAME);
    assert_eq!(vm["template"], true);
    assert_eq!(vm["config"]["scsi0"], "local-lvm:base-9000-disk-0,size=2G");
    assert_eq!(vm["config_lock_held"], false);
    pve.hold_config_lock(TEMPLATE_VMID, None);
    assert_eq!(pve.vm(TEMPLATE_VMID)["config_lock_held"], true);
    let err = pve
        .call("hold_config_lock", json!({"vmid": TEMPLATE_VMID}))
        .unwrap_err();
    assert!(err.contains("already held"), "{err}");
    pve.release_config_lock(TEMPLATE_VMID);
    assert_eq!(pve.vm(TEMPLATE_VMID)["config_lock_held"], false);

    pve.snapshot_lock(TEMPLATE_VMID, "backup");
    assert_eq!(pve.vm(TEMPLATE_VMID)["lock"], "backup");
    pve.unlock(TEMPLATE_VMID);
    assert_eq!(pve.vm(TEMPLATE_VMID)["lock"], Value::Null);

    let added = pve.add_vm(
        json!({"vmid": 101, "name": "web", "node": "pve2", "status": "running",
                                  "tags": ["proxsync"], "shutdown_secs": 30}),
    );
    assert_eq!(added["status"], "running");
    assert_eq!(added["config"]["tags"], "proxsync");
    assert_eq!(added["attrs"]["shutdown_secs"], 30);
    assert_eq!(pve.vms().len(), 2);
}

#[test]
fn a_bad_scenario_fails_the_start_with_the_reason() {
    let err = std::panic::catch_unwind(|| {
        FakePve::start(json!({"vms": [{"vmid": 100, "colour": "blue"}]}));
    })
    .expect_err("an unknown VM attribute must fail the start");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("colour"), "{msg}");
}
