//! `POST /nodes/{node}/storage/{storage}/download-url` on the harness as PVE 9.1 does it (pve-storage
//! API2/Storage/Status.pm download_url, pve-common Tools.pm download_file_from_url): the bytes come from
//! the harness's fake internet (`remote_file`), the checksum is checked on them, an existing file is
//! kept or refused, and a bad file name is a 400 before any task.

use crate::common;

use common::{FakePve, TOKEN_ID, TOKEN_SECRET, default_scenario, token_header, verified_client};
use serde_json::{Value, json};

const URL: &str = "https://images.example.org/cloud/noble-server-cloudimg-amd64.qcow2";
const FILENAME: &str = "noble-server-cloudimg-amd64.qcow2";

/// A request as a person (or another tool) would send it: `(status, body)`.
async fn api(
    client: &reqwest::Client,
    pve: &FakePve,
    method: reqwest::Method,
    path: &str,
    form: &[(&str, &str)],
) -> (u16, Value) {
    let mut req = client
        .request(method, pve.api_url(path))
        .header("Authorization", token_header(TOKEN_ID, TOKEN_SECRET));
    if !form.is_empty() {
        req = req.form(form);
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("{path}: {e:?}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

/// download-url to `local` on pve1 as an import; `(status, body)`.
async fn download(
    client: &reqwest::Client,
    pve: &FakePve,
    filename: &str,
    checksum: Option<&str>,
) -> (u16, Value) {
    let mut form = vec![("url", URL), ("content", "import"), ("filename", filename)];
    if let Some(sum) = checksum {
        form.extend([("checksum", sum), ("checksum-algorithm", "sha256")]);
    }
    api(
        client,
        pve,
        reqwest::Method::POST,
        "/nodes/pve1/storage/local/download-url",
        &form,
    )
    .await
}

/// The finished task of a download-url answer (time_scale 0: it ends before the answer).
async fn task_of(client: &reqwest::Client, pve: &FakePve, answer: &Value) -> Value {
    let upid = answer["data"].as_str().expect("a UPID");
    let (status, body) = api(
        client,
        pve,
        reqwest::Method::GET,
        &format!("/nodes/pve1/tasks/{upid}/status"),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["status"], "stopped", "{body}");
    body["data"].clone()
}

/// The import volumes on `local` of pve1: volid -> size.
async fn imports(client: &reqwest::Client, pve: &FakePve) -> Vec<(String, u64)> {
    let (status, body) = api(
        client,
        pve,
        reqwest::Method::GET,
        "/nodes/pve1/storage/local/content?content=import",
        &[],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["data"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| {
            (
                v["volid"].as_str().unwrap_or_default().to_owned(),
                v["size"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_download_with_the_right_checksum_lands_and_a_second_one_keeps_it() {
    let mut pve = FakePve::start(default_scenario());
    let client = verified_client(&pve.ca_pem());
    let remote = pve
        .call("remote_file", json!({"url": URL, "size": 65536}))
        .expect("remote_file");
    let sha256 = remote["sha256"].as_str().expect("sha256").to_owned();
    assert_eq!(remote["size"], 65536);

    let (status, body) = download(&client, &pve, FILENAME, Some(&sha256)).await;
    assert_eq!(status, 200, "{body}");
    let task = task_of(&client, &pve, &body).await;
    assert_eq!(task["exitstatus"], "OK", "{task}");
    assert_eq!(task["type"], "download", "{task}");
    assert_eq!(
        task["id"], FILENAME,
        "the worker id is the file name: {task}"
    );
    let volid = format!("local:import/{FILENAME}");
    let listed = imports(&client, &pve).await;
    assert!(listed.contains(&(volid.clone(), 65536)), "{listed:?}");

    // The same file again, checksum upper-case: PVE compares lower-cased and keeps the file.
    let (status, body) = download(&client, &pve, FILENAME, Some(&sha256.to_uppercase())).await;
    assert_eq!(status, 200, "{body}");
    let task = task_of(&client, &pve, &body).await;
    assert_eq!(task["exitstatus"], "OK", "{task}");
    let upid = body["data"].as_str().unwrap();
    let (_, log) = api(
        &client,
        &pve,
        reqwest::Method::GET,
        &format!("/nodes/pve1/tasks/{upid}/log"),
        &[],
    )
    .await;
    assert!(
        log.to_string()
            .contains("OK, got correct file already, no need to download"),
        "{log}"
    );
    assert_eq!(imports(&client, &pve).await, listed, "no new file");

    // Without a checksum an existing file is refused.
    let (status, body) = download(&client, &pve, FILENAME, None).await;
    assert_eq!(status, 200, "{body}");
    let task = task_of(&client, &pve, &body).await;
    assert_eq!(
        task["exitstatus"],
        format!("refusing to override existing file '/var/lib/vz/import/{FILENAME}'"),
        "{task}"
    );

    let downloads = pve.call("downloads", json!({})).expect("downloads");
    assert_eq!(downloads.as_array().map(Vec::len), Some(3), "{downloads}");
    assert_eq!(downloads[0]["checksum_algorithm"], "sha256", "{downloads}");
    assert_eq!(downloads[0]["filename"], FILENAME, "{downloads}");
}

#[tokio::test]
async fn a_wrong_checksum_fails_the_task_and_stores_nothing() {
    let mut pve = FakePve::start(default_scenario());
    let client = verified_client(&pve.ca_pem());
    let remote = pve
        .call(
            "remote_file",
            json!({"url": URL, "data": "not really a disk"}),
        )
        .expect("remote_file");
    let got = remote["sha256"].as_str().expect("sha256");
    let wrong = "0".repeat(64);

    let (status, body) = download(&client, &pve, FILENAME, Some(&wrong)).await;
    assert_eq!(status, 200, "{body}");
    let task = task_of(&client, &pve, &body).await;
    assert_eq!(
        task["exitstatus"],
        format!("checksum mismatch: got '{got}' != expect '{wrong}'"),
        "{task}"
    );
    let volid = format!("local:import/{FILENAME}");
    assert!(
        !imports(&client, &pve)
            .await
            .iter()
            .any(|(v, _)| *v == volid),
        "nothing stored"
    );
}

#[tokio::test]
async fn bad_names_and_unreachable_urls() {
    let mut pve = FakePve::start(default_scenario());
    let client = verified_client(&pve.ca_pem());
    pve.call("remote_file", json!({"url": URL}))
        .expect("remote_file");

    // Not an importable extension: a parameter error before any task.
    let (status, body) = download(&client, &pve, "noble.img", None).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["errors"]["filename"], "invalid filename or wrong extension",
        "{body}"
    );
    let (status, body) = api(
        &client,
        &pve,
        reqwest::Method::POST,
        "/nodes/pve1/storage/local/download-url",
        &[
            ("url", URL),
            ("content", "iso"),
            ("filename", "noble.qcow2"),
        ],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["errors"]["filename"], "wrong file extension", "{body}");

    // A URL the fake internet does not know is a network failure (wget exits 4).
    let (status, body) = api(
        &client,
        &pve,
        reqwest::Method::POST,
        "/nodes/pve1/storage/local/download-url",
        &[
            ("url", "https://nowhere.example/x.iso"),
            ("content", "iso"),
            ("filename", "x.iso"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let task = task_of(&client, &pve, &body).await;
    assert_eq!(task["exitstatus"], "download failed: exit code 4", "{task}");
}
