//! A fake Proxmox VE API for the integration tests: fakepve (PyPI `fakepve[crypto]`, 0.5.0) in a
//! child process, driven over JSON lines by `tests/harness/fakepve_harness.py`.
//!
//! ```ignore
//! let pve = FakePve::start(default_scenario());
//! let client = verified_client(&pve.ca_pem());          // trusts only the fake's certificate
//! pve.fail("GET", "/cluster/resources", 500, "boom");   // fault injection
//! let seen = pve.requests();                            // what the client sent
//! ```
//!
//! The fake serves HTTPS on 127.0.0.1 with a fresh self-signed certificate and a free port, so
//! tests run in parallel. Python comes from `$PROXSYNC_FAKEPVE_PYTHON`, else
//! `$PROXSYNC_VENV/bin/python`, else `<crate>/.venv/bin/python`; `scripts/setup-fakepve` makes
//! that venv (and `scripts/test` runs it first). A missing fake fails the test: never a skip.
//!
//! The control calls are synchronous (a line out, a line back, within a few milliseconds); they
//! are fine inside `#[tokio::test]`s because the fake lives in another process. Dropping the
//! `FakePve` closes the child's stdin, which stops it; a test that crashes closes it too.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

/// The API token of the default scenario.
pub const TOKEN_ID: &str = "proxsync@pve!gitops";
/// Its secret (a fixed test value; fakepve compares it literally).
pub const TOKEN_SECRET: &str = "5f1c7a3e-proxsync-test-0000-000000000001";
/// The template VM of the default scenario (on pve1).
pub const TEMPLATE_VMID: u32 = 9000;
pub const TEMPLATE_NAME: &str = "debian-12-template";

const START_TIMEOUT: Duration = Duration::from_secs(30);
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_GRACE: Duration = Duration::from_secs(5);
const SETUP_HINT: &str = "run scripts/setup-fakepve, or use scripts/test which does it";

/// The `Authorization` header value for an API token: `PVEAPIToken=<id>=<secret>`.
pub fn token_header(id: &str, secret: &str) -> String {
    format!("PVEAPIToken={id}={secret}")
}

/// The scenario most tests start from:
/// - nodes `pve1` and `pve2` (online), bridges `vmbr0` and `vmbr1` on each;
/// - storages `local` (dir; iso, import, vztmpl, snippets) and `local-lvm` (lvmthin; images, rootdir);
/// - template VM 9000 `debian-12-template` on pve1 with scsi0 `local-lvm:base-9000-disk-0,size=2G`
///   and net0 `virtio=BC:24:11:00:90:00,bridge=vmbr0`;
/// - on `local`: `iso/debian-12.7.0-amd64-netinst.iso` and `import/debian-12-genericcloud-amd64.qcow2`;
/// - API token [`TOKEN_ID`] / [`TOKEN_SECRET`] (no ACLs: fakepve lets everyone do everything until
///   the first `grant`);
/// - `time_scale` 0: every task finishes before its request returns.
pub fn default_scenario() -> Value {
    json!({
        "nodes": [{"name": "pve1", "online": true}, {"name": "pve2", "online": true}],
        "bridges": ["vmbr0", "vmbr1"],
        "storages": {
            "local": {"type": "dir", "path": "/var/lib/vz", "content": "iso,import,vztmpl,snippets"},
            "local-lvm": {"type": "lvmthin", "vgname": "pve", "thinpool": "data",
                          "content": "images,rootdir"},
        },
        "vms": [{
            "vmid": TEMPLATE_VMID,
            "name": TEMPLATE_NAME,
            "node": "pve1",
            "status": "stopped",
            "template": true,
            "config": {
                "name": TEMPLATE_NAME,
                "scsi0": "local-lvm:base-9000-disk-0,size=2G",
                "scsihw": "virtio-scsi-single",
                "net0": "virtio=BC:24:11:00:90:00,bridge=vmbr0",
                "memory": "2048",
                "cores": 2,
                "ostype": "l26",
                "boot": "order=scsi0",
                "template": 1,
            },
        }],
        "files": [
            {"storage": "local", "name": "debian-12.7.0-amd64-netinst.iso",
             "size": 661_651_456_u64, "content": "iso"},
            {"storage": "local", "name": "debian-12-genericcloud-amd64.qcow2",
             "size": 352_649_216_u64, "content": "import"},
        ],
        "tokens": [{"id": TOKEN_ID, "secret": TOKEN_SECRET}],
        "time_scale": 0,
    })
}

/// A builder over a JSON scenario (see the harness's docstring for the keys).
#[derive(Clone, Debug)]
pub struct Scenario(Value);

impl Default for Scenario {
    /// The [`default_scenario`].
    fn default() -> Self {
        Scenario(default_scenario())
    }
}

impl Scenario {
    /// An empty scenario: fakepve's own defaults (node pve1, storages local and local-lvm, no VMs,
    /// no tokens; root@pam / secret can log in).
    pub fn empty() -> Self {
        Scenario(json!({}))
    }

    /// Set a top-level key (`version`, `quorate`, `time_scale`, `bridges`, `users`, ...).
    pub fn set(mut self, key: &str, value: Value) -> Self {
        self.0[key] = value;
        self
    }

    fn push(mut self, key: &str, item: Value) -> Self {
        match self.0.get_mut(key).and_then(Value::as_array_mut) {
            Some(list) => list.push(item),
            None => self.0[key] = json!([item]),
        }
        self
    }

    /// Add a VM: `{"vmid", "name", "node", "status", "template", "config", "tags", ...}`.
    pub fn vm(self, vm: Value) -> Self {
        self.push("vms", vm)
    }

    /// Add a container: `{"vmid", "name", "node", "status", "template", "config", "lock",
    /// "pool"}` (`"template": true`: a CT template to clone).
    pub fn ct(self, ct: Value) -> Self {
        self.push("cts", ct)
    }

    pub fn node(self, name: &str, online: bool) -> Self {
        self.push("nodes", json!({"name": name, "online": online}))
    }

    pub fn file(self, storage: &str, name: &str, size: u64, content: &str) -> Self {
        self.push(
            "files",
            json!({"storage": storage, "name": name, "size": size, "content": content}),
        )
    }

    pub fn token(self, id: &str, secret: &str) -> Self {
        self.push("tokens", json!({"id": id, "secret": secret}))
    }

    /// Give `user` (a user or a token id) `privs` on `path`. The first grant turns permission checks on.
    pub fn grant(self, user: &str, path: &str, privs: &[&str]) -> Self {
        self.push(
            "grants",
            json!({"user": user, "path": path, "privs": privs}),
        )
    }

    /// Merge storage options over fakepve's defaults for `name` (made if new).
    pub fn storage(mut self, name: &str, options: Value) -> Self {
        if !self.0["storages"].is_object() {
            self.0["storages"] = json!({});
        }
        self.0["storages"][name] = options;
        self
    }

    pub fn start(self) -> FakePve {
        FakePve::start(self.0)
    }

    pub fn into_value(self) -> Value {
        self.0
    }
}

impl From<Scenario> for Value {
    fn from(s: Scenario) -> Value {
        s.0
    }
}

/// One request fakepve received (secrets in bodies and queries are `***`; headers are not kept).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct RecordedRequest {
    /// Position in the log since the fake started (survives `clear_requests`).
    pub seq: u64,
    pub method: String,
    /// The full path, e.g. `/api2/json/cluster/resources`.
    pub path: String,
    /// The raw query string, without `?` (`type=vm`).
    pub query: String,
    /// The raw body (form-encoded or JSON), cut at 64 KiB.
    pub body: String,
}

/// A running fakepve. Dropping it stops the child process.
pub struct FakePve {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    next_id: u64,
    url: String,
    host: String,
    port: u16,
    ca_file: PathBuf,
}

/// Kills the child unless disarmed: start() panics must not leave it running.
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("PROXSYNC_FAKEPVE_PYTHON").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "PROXSYNC_FAKEPVE_PYTHON={} does not exist; {SETUP_HINT}",
            p.display()
        );
        return p;
    }
    let venv = std::env::var_os("PROXSYNC_VENV")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv"));
    let p = venv.join("bin").join("python");
    assert!(
        p.exists(),
        "fakepve's Python venv is missing ({} not found): the integration tests need fakepve \
         (PyPI fakepve[crypto]==0.5.0); {SETUP_HINT}",
        p.display()
    );
    p
}

/// A program of the test venv beside its Python (`ansible-playbook`: `scripts/setup-fakepve`
/// installs ansible-core, pinned, beside fakepve). A missing one fails the test, saying how to
/// get it: never a skip.
pub fn venv_program(name: &str) -> PathBuf {
    let p = python().with_file_name(name);
    assert!(
        p.exists(),
        "{} not found: this test runs a real ansible-core (PyPI ansible-core==2.19.14) from the \
         test venv; {SETUP_HINT}",
        p.display()
    );
    p
}

fn harness_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/harness/fakepve_harness.py")
}

fn stderr_of(buf: &Arc<Mutex<String>>) -> String {
    buf.lock().map(|s| s.clone()).unwrap_or_default()
}

impl FakePve {
    /// Start fakepve with this scenario (see [`default_scenario`]); panics with the harness's
    /// stderr if it is not ready within 30 s.
    pub fn start(scenario: impl Into<Value>) -> FakePve {
        let scenario: Value = scenario.into();
        let python = python();
        let mut child = Command::new(&python)
            .arg("-u")
            .arg(harness_script())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}; {SETUP_HINT}", python.display()));
        let mut stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr_pipe = child.stderr.take().expect("piped stderr");
        let guard = KillOnDrop(Some(child));

        let stderr = Arc::new(Mutex::new(String::new()));
        {
            let stderr = Arc::clone(&stderr);
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stderr_pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut s) = stderr.lock() {
                        s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
            });
        }
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });

        let fail = |why: String, stderr: &Arc<Mutex<String>>| -> ! {
            // Give the child a moment to finish writing its traceback.
            thread::sleep(Duration::from_millis(200));
            panic!(
                "fakepve harness did not start: {why}\n--- harness stderr ---\n{}\n--- end ---\n\
                 (if fakepve is missing or outdated: {SETUP_HINT})",
                stderr_of(stderr)
            )
        };
        if let Err(e) = writeln!(stdin, "{scenario}").and_then(|()| stdin.flush()) {
            fail(format!("cannot send the scenario: {e}"), &stderr);
        }
        let ready = match lines.recv_timeout(START_TIMEOUT) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                fail(format!("no ready line within {START_TIMEOUT:?}"), &stderr)
            }
            Err(RecvTimeoutError::Disconnected) => fail("it exited".into(), &stderr),
        };
        let ready: Value = serde_json::from_str(&ready)
            .unwrap_or_else(|e| fail(format!("bad ready line {ready:?}: {e}"), &stderr));
        if ready["ready"] != json!(true) {
            fail(format!("{}", ready["error"]), &stderr);
        }
        let field = |k: &str| -> String {
            ready[k]
                .as_str()
                .unwrap_or_else(|| fail(format!("ready line lacks {k}: {ready}"), &stderr))
                .to_owned()
        };
        let (url, host, ca_file) = (field("url"), field("host"), PathBuf::from(field("ca_file")));
        let port = ready["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or_else(|| fail(format!("ready line lacks port: {ready}"), &stderr));

        let mut guard = guard;
        FakePve {
            child: guard.0.take().expect("child"),
            stdin: Some(stdin),
            lines,
            stderr,
            next_id: 1,
            url,
            host,
            port,
            ca_file,
        }
    }

    /// `https://127.0.0.1:PORT` (no trailing slash, no `/api2/json`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `https://127.0.0.1:PORT/api2/json` + `path` (which starts with `/`).
    pub fn api_url(&self, path: &str) -> String {
        format!("{}/api2/json{path}", self.url)
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The fake's self-signed certificate (PEM): the only CA a client needs to verify it.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// proxsync's client for this fake: its CA trusted, the test token, short timeouts.
    pub fn client(&self) -> proxsync::pve::Client {
        use proxsync::config::{Secret, Trust};
        use proxsync::pve::{Client, ClientOptions, Credentials};
        Client::new(ClientOptions {
            endpoint: self.url().to_string(),
            trust: Trust::CaFile(self.ca_file().to_path_buf()),
            credentials: Credentials::Token {
                id: TOKEN_ID.into(),
                secret: Secret::new(TOKEN_SECRET),
            },
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            proxy: None,
            read_attempts: 3,
            read_retry_budget: Duration::from_secs(5),
        })
        .expect("client")
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(&self.ca_file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", self.ca_file.display()))
    }

    /// What the harness wrote to stderr so far (tracebacks, warnings).
    pub fn stderr(&self) -> String {
        stderr_of(&self.stderr)
    }

    /// Send one command; `Err` carries the harness's message (unknown command, bad args, ...).
    /// Panics if the harness died or did not answer within 30 s.
    pub fn call(&mut self, cmd: &str, args: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"id": id, "cmd": cmd, "args": args}).to_string();
        let stdin = self.stdin.as_mut().expect("harness stdin is open");
        if let Err(e) = writeln!(stdin, "{line}").and_then(|()| stdin.flush()) {
            panic!(
                "fakepve harness is gone ({e}) while sending {cmd}; stderr:\n{}",
                self.stderr()
            );
        }
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = match self.lines.recv_timeout(left) {
                Ok(answer) => answer,
                Err(e) => panic!(
                    "fakepve harness did not answer {cmd} ({e:?}); stderr:\n{}",
                    self.stderr()
                ),
            };
            let answer: Value = serde_json::from_str(&answer)
                .unwrap_or_else(|e| panic!("fakepve harness sent {answer:?}: {e}"));
            if answer["id"] != json!(id) {
                continue; // an answer to an earlier call that timed out
            }
            return if answer["ok"] == json!(true) {
                Ok(answer["result"].clone())
            } else {
                Err(answer["error"]
                    .as_str()
                    .unwrap_or("unknown error")
                    .to_owned())
            };
        }
    }

    /// `call`, panicking on an error: for the typed wrappers.
    fn must(&mut self, cmd: &str, args: Value) -> Value {
        match self.call(cmd, args.clone()) {
            Ok(v) => v,
            Err(e) => panic!("fakepve {cmd} {args} failed: {e}"),
        }
    }

    // ------------------------------------------------------------- faults

    /// Answer `method` requests whose path ends with `suffix` (e.g. `/cluster/resources`, or a
    /// schema template like `/nodes/{node}/qemu/{vmid}/status/start`) with `status` and `message`
    /// (PVE's JSON error body: `{"data": null, "message": "<message>\n"}`), until cleared.
    pub fn fail(&mut self, method: &str, suffix: &str, status: u16, message: &str) {
        self.must(
            "fail",
            json!({"method": method, "suffix": suffix, "status": status, "message": message}),
        );
    }

    /// Like [`fail`](Self::fail), for the next `times` matching requests only.
    pub fn fail_times(
        &mut self,
        method: &str,
        suffix: &str,
        status: u16,
        message: &str,
        times: u32,
    ) {
        self.must(
            "fail",
            json!({"method": method, "suffix": suffix, "status": status, "message": message,
                   "times": times}),
        );
    }

    /// Fail with one of PVE's real errors by name (see [`errors_for`](Self::errors_for)); errors
    /// PVE raises inside a worker answer with a UPID whose task ends in `TASK ERROR: ...`.
    pub fn fail_error(&mut self, method: &str, suffix: &str, error: &str, times: Option<u32>) {
        self.must(
            "fail",
            json!({"method": method, "suffix": suffix, "error": error, "times": times}),
        );
    }

    pub fn clear_failures(&mut self) {
        self.must("clear_failures", json!({}));
    }

    /// The catalogue of PVE's errors for a concrete path: `[{name, status, message, in_task, ...}]`.
    pub fn errors_for(&mut self, method: &str, path: &str) -> Vec<Value> {
        let v = self.must("errors_for", json!({"method": method, "path": path}));
        serde_json::from_value(v).expect("a list")
    }

    /// Drop (connection reset) or hang (no answer for `hang_secs` PVE seconds) a share of requests.
    pub fn flaky_network(
        &mut self,
        drop_rate: f64,
        hang_rate: f64,
        hang_secs: f64,
        seed: Option<u64>,
    ) {
        self.must(
            "flaky_network",
            json!({"drop_rate": drop_rate, "hang_rate": hang_rate, "hang_secs": hang_secs,
                   "seed": seed}),
        );
    }

    /// Add `latency` (+ up to `jitter`) PVE seconds to every response, or to one node's.
    pub fn slow_network(&mut self, latency: f64, jitter: f64, node: Option<&str>) {
        self.must(
            "slow_network",
            json!({"latency": latency, "jitter": jitter, "node": node}),
        );
    }

    /// Requests naming the node get 595 `No route to host`; /nodes and /cluster/status show it offline.
    pub fn set_node_offline(&mut self, node: &str, offline: bool) {
        self.must(
            "set_node_offline",
            json!({"node": node, "offline": offline}),
        );
    }

    /// Config writes and VM actions fail with 500 `cluster not ready - no quorum?`; reads work.
    pub fn lose_quorum(&mut self) {
        self.must("lose_quorum", json!({}));
    }

    pub fn regain_quorum(&mut self) {
        self.must("regain_quorum", json!({}));
    }

    /// Another task holds the VM's config lock for `secs` PVE seconds (`None`: until
    /// [`release_config_lock`](Self::release_config_lock)); writes and tasks wait up to
    /// `lock_wait` (10 PVE s) then fail with `can't lock file ... got timeout`.
    pub fn hold_config_lock(&mut self, vmid: u32, secs: Option<f64>) {
        self.must("hold_config_lock", json!({"vmid": vmid, "secs": secs}));
    }

    pub fn release_config_lock(&mut self, vmid: u32) {
        self.must("release_config_lock", json!({"vmid": vmid}));
    }

    /// Leave the VM with `lock: <lock>` in its config, as an interrupted snapshot/clone/backup does.
    pub fn snapshot_lock(&mut self, vmid: u32, lock: &str) {
        self.must("snapshot_lock", json!({"vmid": vmid, "lock": lock}));
    }

    pub fn unlock(&mut self, vmid: u32) {
        self.must("unlock", json!({"vmid": vmid}));
    }

    /// Make `qmcreate` and `qmclone` tasks last `create_secs` / `clone_secs` PVE seconds (needs a
    /// time scale > 0) with PVE's lock window: meanwhile a created VM's config holds only
    /// `lock: create`, a clone's only `lock: clone` and the description ` qmclone temporary file`
    /// (its `#` comment line), `/cluster/resources` lists it without a `name`, and a clone with
    /// `target` stays on the source node. The POST's answer (the UPID) comes `answer_delay` PVE
    /// seconds after the locked VM exists. All 0 turns it off.
    pub fn create_timing(&mut self, create_secs: f64, clone_secs: f64, answer_delay: f64) {
        self.create_timing_listed(create_secs, clone_secs, answer_delay, false);
    }

    /// As [`create_timing`](Self::create_timing); with `listed_name` the listing names a VM in
    /// its window `VM <vmid>`, as PVE does once pvestatd has reported it (a long clone).
    pub fn create_timing_listed(
        &mut self,
        create_secs: f64,
        clone_secs: f64,
        answer_delay: f64,
        listed_name: bool,
    ) {
        self.must(
            "create_timing",
            json!({"create_secs": create_secs, "clone_secs": clone_secs,
                   "answer_delay": answer_delay, "listed_name": listed_name}),
        );
    }

    /// A VM's `qmdestroy` takes `secs` PVE seconds before it removes the VM.
    pub fn destroy_timing(&mut self, secs: f64) {
        self.must("destroy_timing", json!({"secs": secs}));
    }

    /// A container's `vzcreate`, `vzclone`, `vzdestroy` and `vzmigrate` take these PVE seconds;
    /// a `vzcreate` writes the container's whole config without its `create` lock `tail` seconds
    /// before it ends (as pve-container does, after the OS detection).
    pub fn ct_timing(
        &mut self,
        create_secs: f64,
        clone_secs: f64,
        destroy_secs: f64,
        migrate_secs: f64,
        tail: f64,
    ) {
        self.must(
            "ct_timing",
            json!({"create_secs": create_secs, "clone_secs": clone_secs,
                   "destroy_secs": destroy_secs, "migrate_secs": migrate_secs,
                   "create_tail_secs": tail}),
        );
    }

    /// VMs made by a create or clone from now on take `start_secs` PVE seconds to start (as a
    /// real guest's start takes about a second).
    pub fn new_vm_timing(&mut self, start_secs: f64) {
        self.must("new_vm_timing", json!({"start_secs": start_secs}));
    }

    /// At most `max_clones` clones at once per node (`None`: no limit): a `qmclone` task started
    /// while that many clone on its node waits `wait_secs` PVE seconds and fails with PVE's
    /// storage-lock timeout, leaving nothing at its VMID. Needs `create_timing`'s `clone_secs`.
    pub fn clone_contention(&mut self, max_clones: Option<u32>, wait_secs: f64) {
        self.must(
            "clone_contention",
            json!({"max_clones": max_clones, "wait_secs": wait_secs}),
        );
    }

    /// Carry out the next `times` `method` requests whose path ends with `suffix` (or match a
    /// schema template), then answer `596 Connection timed out` with no body instead, as pveproxy
    /// does when its forward to the node fails after the node got the request.
    pub fn lose_answer(&mut self, method: &str, suffix: &str, times: u32) {
        self.must(
            "lose_answer",
            json!({"method": method, "suffix": suffix, "times": times}),
        );
    }

    /// Like [`lose_answer`](Self::lose_answer) with another status and reason phrase.
    pub fn lose_answer_with(
        &mut self,
        method: &str,
        suffix: &str,
        status: u16,
        message: &str,
        times: u32,
    ) {
        self.must(
            "lose_answer",
            json!({"method": method, "suffix": suffix, "status": status, "message": message,
                   "times": times}),
        );
    }

    /// The answers [`lose_answer`](Self::lose_answer) threw away, oldest first:
    /// `[{method, path, status, body}]` (`body` is the JSON text, e.g. holding the UPID).
    pub fn lost_answers(&mut self) -> Vec<Value> {
        serde_json::from_value(self.must("lost_answers", json!({}))).expect("a list")
    }

    /// A broken server or proxy: garble a share `rate` (0 turns it off) of the successful answers
    /// (2xx with `{"data": ...}`), of every path or of those containing one of `paths` (e.g.
    /// `["/cluster/resources", "/config"]`). A garbled answer gets 1 to 3 mutations at random
    /// places inside `data`: a value replaced by `null`, a huge or negative number or an odd
    /// string (empty, NUL, emoji, `"NaN"`, 10 KiB), or a key or list item dropped; a scalar `data`
    /// (a UPID) is replaced whole. The request itself is carried out as sent, and error answers
    /// and the login ticket are never garbled. The harness draws from its own RNG seeded with
    /// `seed`, so a run repeats given the same request order.
    pub fn garble(&mut self, rate: f64, seed: u64, paths: Option<&[&str]>) {
        self.must(
            "garble",
            json!({"rate": rate, "seed": seed, "paths": paths}),
        );
    }

    /// What [`garble`](Self::garble) did so far: `{"answers": N, "garbled": M, "by_path":
    /// {"/cluster/resources": count, ...}}`, `answers` being those it could have garbled while on
    /// and `by_path` keyed by the API path without `/api2/json`.
    pub fn garbled(&mut self) -> Value {
        self.must("garbled", json!({}))
    }

    /// A person's edit of a guest's notes (its description) in the web UI: `PUT
    /// /nodes/{node}/{kind}/{vmid}/config` with `description`, over the API as any client
    /// sends it (`kind`: `qemu` or `lxc`). Whether PVE took it (a locked guest refuses it).
    pub fn edit_notes(&self, node: &str, kind: &str, vmid: u64, text: &str) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let client = verified_client(&self.ca_pem());
        let url = self.api_url(&format!("/nodes/{node}/{kind}/{vmid}/config"));
        rt.block_on(async {
            client
                .put(url)
                .header("Authorization", token_header(TOKEN_ID, TOKEN_SECRET))
                .form(&[("description", text)])
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
    }

    /// A backup job over the VM for `secs` PVE seconds: a running `vzdump` task with an EMPTY id
    /// (a job over several guests, so `?vmid=` does not find it; `single`: the id is the vmid)
    /// and `lock: backup` on the VM meanwhile. Returns the task's UPID. Needs a time scale > 0.
    pub fn backup(&mut self, vmid: u32, secs: f64, single: bool) -> String {
        let v = self.must(
            "backup",
            json!({"vmid": vmid, "secs": secs, "single": single}),
        );
        v.as_str().expect("a UPID").to_owned()
    }

    /// Leave the VM hibernated (`qm suspend --todisk`): stopped, `lock: suspended`, no task.
    /// Returns its dump.
    pub fn hibernate(&mut self, vmid: u32) -> Value {
        self.must("hibernate", json!({"vmid": vmid}))
    }

    /// A qemu migration holds `lock: migrate` for `secs` PVE seconds before the VM is on its
    /// target (with a `time_scale` above 0).
    pub fn migrate_timing(&mut self, secs: f64) {
        self.must("migrate_timing", json!({"secs": secs}));
    }

    /// Real seconds per PVE second; 0 finishes every task before its request returns.
    pub fn set_time_scale(&mut self, scale: f64) {
        self.must("time_scale", json!({"value": scale}));
    }

    /// Forget every login ticket: the next ticket-authenticated request gets 401.
    pub fn revoke_tickets(&mut self) {
        self.must("revoke_tickets", json!({}));
    }

    // -------------------------------------------------------------- state

    /// Set VM attributes: `shutdown_secs`, `start_secs`, `stop_secs`, `start_error`, `agent`,
    /// `agent_hangs`, `acpi`, `status`, `qmpstatus`, `ha_state`, `stats`. Returns the VM's dump.
    pub fn set_vm(&mut self, vmid: u32, attrs: Value) -> Value {
        let mut args = attrs;
        args["vmid"] = json!(vmid);
        self.must("set_vm", args)
    }

    /// Add a VM (same keys as a scenario's `vms` entries). Returns its dump.
    pub fn add_vm(&mut self, vm: Value) -> Value {
        self.must("add_vm", vm)
    }

    /// Removes a VM at once, as a person's `qm destroy` on the node would.
    pub fn remove_vm(&mut self, vmid: u32) {
        self.must("remove_vm", json!({"vmid": vmid}));
    }

    pub fn add_node(&mut self, name: &str, online: bool) {
        self.must("add_node", json!({"name": name, "online": online}));
    }

    /// The bridges GET /nodes/{node}/network lists: for one node, or (`None`) for all.
    pub fn set_bridges(&mut self, node: Option<&str>, bridges: &[&str]) {
        self.must("set_bridges", json!({"node": node, "bridges": bridges}));
    }

    /// Put a file on a storage: `content` is `iso`, `import`, `vztmpl`, `snippets`, ...
    pub fn store_file(&mut self, storage: &str, name: &str, size: u64, content: &str) {
        self.must(
            "store_file",
            json!({"storage": storage, "name": name, "size": size, "content": content}),
        );
    }

    /// [`store_file`](Self::store_file) with the `ctime` the storage's listing shows for it.
    pub fn store_file_at(&mut self, storage: &str, name: &str, size: u64, ctime: u64) {
        self.must(
            "store_file",
            json!({"storage": storage, "name": name, "size": size, "content": "iso", "ctime": ctime}),
        );
    }

    pub fn add_token(&mut self, id: &str, secret: &str) {
        self.must("add_token", json!({"id": id, "secret": secret}));
    }

    /// Give a user or token `privs` on `path`. The first grant turns permission checks on for
    /// everyone but root@pam; a token holds its own grants plus its user's.
    pub fn grant(&mut self, user: &str, path: &str, privs: &[&str]) {
        self.must("grant", json!({"user": user, "path": path, "privs": privs}));
    }

    /// One VM: `{vmid, name, node, status, qmpstatus, template, lock, pool, config, pending,
    /// snapshots, ha_state, config_lock_held, attrs}`; `pending` maps keys to new values, `null`
    /// for a pending delete.
    pub fn vm(&mut self, vmid: u32) -> Value {
        self.must("vm", json!({"vmid": vmid}))
    }

    /// Every VM's dump, like [`vm`](Self::vm).
    pub fn vms(&mut self) -> Vec<Value> {
        serde_json::from_value(self.must("vms", json!({}))).expect("a list")
    }

    /// Every storage with its options and volumes, as the harness's `storages` shows them.
    pub fn storages(&mut self) -> Value {
        self.must("storages", json!({}))
    }

    /// One container: `{vmid, name (its hostname), node, status, template, lock, pool, config,
    /// pending, ha_state}`.
    pub fn ct(&mut self, vmid: u32) -> Value {
        self.must("ct", json!({"vmid": vmid}))
    }

    /// Every container's dump, like [`ct`](Self::ct).
    pub fn cts(&mut self) -> Vec<Value> {
        serde_json::from_value(self.must("cts", json!({}))).expect("a list")
    }

    /// A person's change of a container: config keys (`null` removes one), status, lock.
    pub fn set_ct(&mut self, vmid: u32, change: Value) -> Value {
        let mut args = change;
        args["vmid"] = json!(vmid);
        self.must("set_ct", args)
    }

    /// Every request fakepve received (those that failed authentication too), oldest first.
    pub fn requests(&mut self) -> Vec<RecordedRequest> {
        self.requests_since(0)
    }

    /// Requests with `seq >= since`.
    pub fn requests_since(&mut self, since: u64) -> Vec<RecordedRequest> {
        let v = self.must("requests", json!({"since": since}));
        serde_json::from_value(v).expect("a list of requests")
    }

    pub fn clear_requests(&mut self) {
        self.must("clear_requests", json!({}));
    }

    /// The tasks started so far: `{upid, node, type, id, user, status, exitstatus?, log, ...}`.
    pub fn tasks(&mut self) -> Vec<Value> {
        serde_json::from_value(self.must("tasks", json!({}))).expect("a list")
    }
}

impl Drop for FakePve {
    fn drop(&mut self) {
        // EOF on stdin stops the harness (server, temp dir); kill it if it lingers.
        drop(self.stdin.take());
        let deadline = Instant::now() + STOP_GRACE;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                _ => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A reqwest client that trusts only `ca_pem` (no built-in or system roots) and verifies the
/// certificate and host name, on rustls with the ring provider.
pub fn verified_client(ca_pem: &[u8]) -> reqwest::Client {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots
            .add(cert.expect("a PEM certificate"))
            .expect("a usable CA certificate");
    }
    assert!(!roots.is_empty(), "no certificate in the CA PEM");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("reqwest client")
}
