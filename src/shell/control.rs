//! The daemon's control socket: `proxsync reconcile [NAME]` asks the running daemon to
//! reconcile now, and `proxsync plan` reads the daemon's state records through it (redb lets
//! one process hold the database), and `proxsync status` asks whether it runs. One line per
//! request (`reconcile`, `reconcile NAME`, `records` or `state`), one line back (`ok ...` or `error ...`). The socket lives in `state_dir`
//! (`control.sock`, mode 0660 from the moment it appears there), so the daemon's group can
//! use it and nobody else.
//!
//! A flood of connections cannot stall the daemon: at most [`MAX_CONNECTIONS`] are served at
//! once (more are told so and closed at once), each has [`READ_TIMEOUT`] to send its line, and
//! an accept that fails (out of descriptors: EMFILE, ENFILE) is retried after a pause that
//! grows while it keeps failing, never in a busy loop.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// The socket's file name inside `state_dir`.
pub(crate) const SOCKET: &str = "control.sock";

/// Control connections served at once. A request is one short line answered at once, so a
/// few are plenty; a flood holds no more of the daemon's descriptors than this.
pub(crate) const MAX_CONNECTIONS: usize = 8;

/// How long a client has to send its request line: a silent connection gives its slot back
/// this soon.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest request line read.
const REQUEST_MAX: usize = 1024;

/// How long a client has to take its answer (`records` of a large fleet is megabytes).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The pause after a failed accept, doubled while accepts keep failing, up to
/// [`ACCEPT_PAUSE_MAX`]; the first accept that works resets it.
const ACCEPT_PAUSE_MIN: Duration = Duration::from_millis(10);
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

/// The answer to a connection over [`MAX_CONNECTIONS`], before it is closed.
const BUSY: &[u8] = b"error the daemon is answering too many control connections; try again\n";

/// A request the daemon received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    /// The spec to reconcile now, or `None` for every spec.
    pub spec: Option<String>,
    /// `--retry`: the spec's change that was rolled back (`changePolicy`) is tried again.
    pub retry: bool,
}

pub(crate) fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET)
}

/// When this process began serving the socket, for the `state` request.
static SERVING_SINCE: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();

/// The running daemon as the `state` request tells it: its process and since when it serves.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct DaemonState {
    pub pid: u32,
    /// Unix ms.
    pub since_ms: u64,
}

/// Listens on the socket and forwards each valid reconcile request; answers `records` from
/// `store`, and `plan` with `planner`. Replaces a stale socket file.
pub(crate) fn serve(
    state_dir: &Path,
    requests: mpsc::Sender<Request>,
    store: Option<std::sync::Arc<crate::store::Store>>,
    planner: Option<PlanFn>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let path = socket_path(state_dir);
    crate::util::state_dir::create_state_dir(state_dir)?;
    let listener = Arc::new(bind_private(state_dir, &path)?);
    SERVING_SINCE.get_or_init(crate::util::clock::system_now);
    let accept = move || {
        let listener = listener.clone();
        async move { listener.accept().await.map(|(stream, _)| stream) }
    };
    let handle_one = move |stream: UnixStream, slot: OwnedSemaphorePermit| {
        let requests = requests.clone();
        let store = store.clone();
        let planner = planner.clone();
        tokio::spawn(async move {
            let _ = handle(stream, requests, store, planner).await;
            drop(slot);
        });
    };
    let refuse = |stream: UnixStream| {
        // Best effort and never waiting: the client learns why, then the line is closed.
        let _ = stream.try_write(BUSY);
        tracing::debug!("control socket: too many connections; one refused");
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    Ok(tokio::spawn(accept_loop(accept, slots, handle_one, refuse)))
}

/// Accepts connections until the task is aborted: each one that gets one of `slots` goes to
/// `handle` with it (the slot is free again when the permit is dropped), the others to
/// `refuse`. A failed accept (EMFILE, ENFILE, ENOBUFS...) waits before the next try, longer
/// while it keeps failing: the loop never spins while the process is out of descriptors.
async fn accept_loop<S, Fut>(
    mut accept: impl FnMut() -> Fut,
    slots: Arc<Semaphore>,
    mut handle: impl FnMut(S, OwnedSemaphorePermit),
    mut refuse: impl FnMut(S),
) where
    Fut: Future<Output = std::io::Result<S>>,
{
    let mut pause: Option<Duration> = None;
    loop {
        match accept().await {
            Ok(conn) => {
                pause = None;
                match slots.clone().try_acquire_owned() {
                    Ok(slot) => handle(conn, slot),
                    Err(_) => refuse(conn),
                }
            }
            Err(e) => {
                if pause.is_none() {
                    tracing::warn!(error = %e, "control socket: cannot accept a connection; retrying with growing pauses while it lasts");
                }
                let next = pause.map_or(ACCEPT_PAUSE_MIN, |p| (p * 2).min(ACCEPT_PAUSE_MAX));
                pause = Some(next);
                tokio::time::sleep(next).await;
            }
        }
    }
}

/// Binds the socket so that it never exists at `path` with the umask's mode: bound in a fresh
/// 0700 directory inside `state_dir`, set to 0660 there, then renamed over `path` (which also
/// replaces a stale socket in one step). The umask is process-wide, so it is not touched.
fn bind_private(state_dir: &Path, path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let staging = state_dir.join(format!(".ctl-{}", std::process::id()));
    if staging.symlink_metadata().is_ok() {
        // Left by a process that had this pid and died before cleaning up.
        std::fs::remove_dir_all(&staging)?;
    }
    std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    let result = (|| {
        let tmp = staging.join(SOCKET);
        let listener = UnixListener::bind(&tmp)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o660))?;
        std::fs::rename(&tmp, path)?;
        Ok(listener)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    result
}

async fn handle(
    stream: UnixStream,
    requests: mpsc::Sender<Request>,
    store: Option<std::sync::Arc<crate::store::Store>>,
    planner: Option<PlanFn>,
) -> std::io::Result<()> {
    // Who asks, as the kernel says: recorded with a suspension.
    let uid = stream.peer_cred().ok().map(|c| c.uid());
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    // A request is one short line; a client that sends nothing is dropped.
    let mut reader = BufReader::new(read.take(REQUEST_MAX as u64));
    let n = tokio::time::timeout(READ_TIMEOUT, reader.read_line(&mut line))
        .await
        .unwrap_or(Ok(0))?;
    let line = &line[..n.min(line.len())];
    let reply = match line.trim().strip_prefix("plan ") {
        Some(json) => match (planner, store) {
            (Some(plan), Some(store)) => plan(json.to_string(), store).await,
            _ => "error this daemon does not plan\n".to_string(),
        },
        None => answer(line, requests, store, uid).await,
    };
    // A client that does not read its answer gives its slot back too.
    tokio::time::timeout(WRITE_TIMEOUT, write.write_all(reply.as_bytes()))
        .await
        .unwrap_or(Ok(()))
}

/// The answer to one request line.
async fn answer(
    line: &str,
    requests: mpsc::Sender<Request>,
    store: Option<std::sync::Arc<crate::store::Store>>,
    uid: Option<u32>,
) -> String {
    if let Some(json) = line.trim().strip_prefix("suspend ") {
        // Who asks is the socket's peer, as the kernel says, named by this host's user
        // database (which may ask a directory service: off the async threads).
        let by = tokio::task::spawn_blocking(move || peer_words(uid))
            .await
            .unwrap_or_else(|_| peer_words(None));
        return changed(suspend(json, store.as_deref(), by), requests).await;
    }
    if let Some(name) = line.trim().strip_prefix("resume ") {
        return changed(resume(name, store.as_deref()), requests).await;
    }
    if line.trim() == "suspensions" {
        return match store.as_ref().map(|s| s.suspensions()) {
            Some(Ok(held)) => match serde_json::to_string(&held) {
                Ok(json) => format!("ok {json}\n"),
                Err(e) => format!("error {e}\n"),
            },
            Some(Err(e)) => format!("error {e}\n"),
            None => "error no state database\n".to_string(),
        };
    }
    if line.trim() == "records" {
        let reply = match store.as_ref().map(|s| s.specs()) {
            Some(Ok(records)) => match serde_json::to_string(&records) {
                Ok(json) => format!("ok {json}\n"),
                Err(e) => format!("error {e}\n"),
            },
            Some(Err(e)) => format!("error {e}\n"),
            None => "error no state database\n".to_string(),
        };
        return reply;
    }
    if let Some(json) = line.trim().strip_prefix("adopt ") {
        return adopt(json, store.as_deref());
    }
    if line.trim() == "state" {
        let since_ms = SERVING_SINCE
            .get()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64);
        let state = DaemonState {
            pid: std::process::id(),
            since_ms,
        };
        return match serde_json::to_string(&state) {
            Ok(json) => format!("ok {json}\n"),
            Err(e) => format!("error {e}\n"),
        };
    }
    match parse(line) {
        Ok(req) => {
            let what = req.spec.clone().unwrap_or_else(|| "every spec".into());
            match requests.send(req).await {
                Ok(()) => format!("ok reconcile of {what} queued\n"),
                Err(_) => "error the daemon is stopping\n".to_string(),
            }
        }
        Err(e) => format!("error {e}\n"),
    }
}

/// A plan asked of the running daemon (`plan <json>` on its control socket).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PlanRequest {
    /// The config the asker loaded (absolute): the daemon plans only for its own, unchanged
    /// since it loaded it.
    pub config: PathBuf,
    /// `plan NAME...`.
    pub names: Vec<String>,
    /// `--format`.
    pub format: Option<String>,
}

/// A plan made: what to print, and the exit code.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Planned {
    /// Printed on stderr before the plan: warnings and the specs' diagnostics.
    pub before: String,
    pub stdout: String,
    /// Printed on stderr after the plan: its errors.
    pub after: String,
    pub code: u8,
    /// Log lines (INFO and above) the plan's work wrote while the daemon made it
    /// ([`Held::Daemon`]): a plan made by the asker prints them on its stderr, so the daemon
    /// does not answer with this plan (the asker plans itself).
    #[serde(skip)]
    pub logged: usize,
    /// What the plan was made from, kept so that its owner decides how it goes: the CLI lets
    /// the process end take it, the daemon frees it.
    #[serde(skip)]
    pub leftovers: Option<Box<dyn std::any::Any + Send>>,
}

impl Planned {
    pub(crate) fn failed(before: String) -> Planned {
        Planned {
            before,
            code: 1,
            ..Planned::default()
        }
    }

    /// Prints it (stderr, stdout, stderr) and returns its exit code.
    pub(crate) fn print(&self) -> std::process::ExitCode {
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), self.before.as_bytes());
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), self.stdout.as_bytes());
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), self.after.as_bytes());
        std::process::ExitCode::from(self.code)
    }
}

/// How the daemon answers `plan <json>` (made above this layer, by `shell::planning`): the
/// request's JSON and the daemon's store in, the answer line out.
pub(crate) type PlanFn = Arc<
    dyn Fn(
            String,
            Arc<crate::store::Store>,
        ) -> std::pin::Pin<Box<dyn Future<Output = String> + Send>>
        + Send
        + Sync,
>;

/// The plan made by the running daemon for the config `request` names; `Err` (why not) when
/// no daemon answers, it runs with another config, or it does not plan.
pub(crate) async fn plan_through_daemon(
    state_dir: &Path,
    request: &PlanRequest,
) -> Result<Planned, String> {
    let json = serde_json::to_string(request).map_err(|e| e.to_string())?;
    let line = format!("plan {json}\n");
    if line.len() > REQUEST_MAX {
        return Err(format!("the request is over {REQUEST_MAX} bytes"));
    }
    // A plan of a large fleet with a slow site takes as long as its listings.
    let answer = ask(state_dir, &line, Duration::from_secs(300)).await?;
    serde_json::from_str(&answer).map_err(|e| format!("unreadable plan from the daemon: {e}"))
}

/// `adopt <json>`: records a person's confirmation (`proxsync adopt`, whose checks the command
/// made) in the daemon's state database, which the command cannot open while the daemon runs.
fn adopt(json: &str, store: Option<&crate::store::Store>) -> String {
    let adoption: crate::store::Adoption = match serde_json::from_str(json) {
        Ok(a) => a,
        Err(e) => return format!("error not an adoption: {e}\n"),
    };
    if !crate::status::valid_name(&adoption.spec) {
        return format!("error {:?} is not a spec name\n", adoption.spec);
    }
    let Some(store) = store else {
        return "error no state database\n".to_string();
    };
    match store.record_adoption(&adoption, crate::util::clock::now_ms()) {
        Ok(()) => {
            tracing::info!(spec = %adoption.spec, vmid = adoption.vmid, "adoption confirmed by hand (proxsync adopt)");
            format!("ok VM {} is now spec {}'s\n", adoption.vmid, adoption.spec)
        }
        Err(e) => format!("error {e}\n"),
    }
}

/// A suspension asked for through the socket (`proxsync suspend` while the daemon runs): the
/// name and why. Who and when are the daemon's to say (the socket's peer uid, its own clock):
/// whatever else a client sends (an earlier release sent its own `by` and `at_ms`) is ignored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SuspendRequest {
    /// A spec name, or [`crate::store::SUSPEND_ALL`].
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Whether `name` may be suspended or resumed: a spec name, or [`crate::store::SUSPEND_ALL`].
pub(crate) fn suspendable(name: &str) -> bool {
    name == crate::store::SUSPEND_ALL || crate::status::valid_name(name)
}

/// `suspend <json>`: records a suspension by `by` (the socket's peer, [`peer_words`]) at the
/// daemon's own clock; of the request only the name and the reason are taken.
fn suspend(json: &str, store: Option<&crate::store::Store>, by: String) -> String {
    let req: SuspendRequest = match serde_json::from_str(json) {
        Ok(r) => r,
        Err(e) => return format!("error not a suspension: {e}\n"),
    };
    if !suspendable(&req.name) {
        return format!("error {:?} is not a spec name\n", req.name);
    }
    let Some(store) = store else {
        return "error no state database\n".to_string();
    };
    let suspension = crate::store::Suspension {
        by,
        reason: (req.reason.as_deref().map(one_line)).filter(|r| !r.trim().is_empty()),
        at_ms: crate::util::clock::now_ms(),
        from_git: false,
    };
    match store.suspend(&req.name, &suspension) {
        Ok(()) => {
            tracing::info!(spec = %req.name, by = %suspension.by, "suspended (proxsync suspend)");
            format!("ok {} suspended\n", shown(&req.name))
        }
        Err(e) => format!("error {e}\n"),
    }
}

/// Who is behind the socket's peer uid, in words: the user's name in this host's user
/// database and the uid (`alice (uid 1000)`), the uid alone when it names no user.
fn peer_words(uid: Option<u32>) -> String {
    match uid {
        Some(uid) => match user_name(uid) {
            Some(name) => format!("{name} (uid {uid})"),
            None => format!("uid {uid}"),
        },
        None => "an unknown user (the socket gave no peer credentials)".to_string(),
    }
}

/// The name of user `uid` in this host's user database (`getpwuid_r`), if it has one.
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: `passwd` is plain old data (integers and pointers), valid all zero.
    #[allow(unsafe_code)]
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to a live local of the size passed; getpwuid_r writes the
    // entry's strings into `buf` only and sets `found` to `&pwd` or null.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success `pw_name` points at a NUL-terminated string inside `buf`, alive here.
    #[allow(unsafe_code)]
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    let name: String = one_line(&name.to_string_lossy()).chars().take(64).collect();
    (!name.is_empty()).then_some(name)
}

/// `t` without control characters, at most 200 characters: what a status line shows of it.
pub(crate) fn one_line(t: &str) -> String {
    t.chars().filter(|c| !c.is_control()).take(200).collect()
}

/// `resume NAME`: lifts a suspension (`*`: all of them).
fn resume(name: &str, store: Option<&crate::store::Store>) -> String {
    let name = name.trim();
    if !suspendable(name) {
        return format!("error {name:?} is not a spec name\n");
    }
    let Some(store) = store else {
        return "error no state database\n".to_string();
    };
    match store.resume(name) {
        Ok(lifted) => {
            tracing::info!(spec = %name, lifted = lifted.len(), "resumed (proxsync resume)");
            format!("ok {}\n", resumed_words(name, &lifted))
        }
        Err(e) => format!("error {e}\n"),
    }
}

/// What a resume did, in words. A recorded `spec.suspend` comes back at the next cycle while
/// the spec still says it: the words say so.
pub(crate) fn resumed_words(name: &str, lifted: &[(String, crate::store::Suspension)]) -> String {
    let from_git = lifted.iter().any(|(_, s)| s.from_git);
    let git = match from_git {
        true => {
            "; a spec that still says spec.suspend: true is suspended again at the next \
                 cycle: remove it from the spec"
        }
        false => "",
    };
    match (name, lifted.len()) {
        (crate::store::SUSPEND_ALL, 0) => "nothing was suspended".to_string(),
        (crate::store::SUSPEND_ALL, n) => format!("{n} suspension(s) lifted{git}"),
        (_, 0) => {
            format!("{name} was not suspended at runtime (spec.suspend in git is lifted in git)")
        }
        _ => format!("{name} resumed{git}"),
    }
}

/// A spec name, or `every spec` for [`crate::store::SUSPEND_ALL`].
pub(crate) fn shown(name: &str) -> &str {
    match name {
        crate::store::SUSPEND_ALL => "every spec",
        other => other,
    }
}

/// After a suspension changed, a cycle is queued so statuses say so at once.
async fn changed(reply: String, requests: mpsc::Sender<Request>) -> String {
    if reply.starts_with("ok ") {
        let _ = requests
            .send(Request {
                spec: None,
                retry: false,
            })
            .await;
    }
    reply
}

/// Asks the running daemon to record a suspension (`proxsync suspend` while the daemon holds
/// the state database).
pub(crate) async fn suspend_through_daemon(
    state_dir: &Path,
    req: &SuspendRequest,
) -> Result<String, String> {
    let json = serde_json::to_string(req).map_err(|e| e.to_string())?;
    ask(
        state_dir,
        &format!("suspend {json}\n"),
        Duration::from_secs(30),
    )
    .await
}

/// Asks the running daemon to lift a suspension (`*`: all).
pub(crate) async fn resume_through_daemon(state_dir: &Path, name: &str) -> Result<String, String> {
    ask(
        state_dir,
        &format!("resume {name}\n"),
        Duration::from_secs(30),
    )
    .await
}

/// The suspensions for `proxsync plan`: read beside a running daemon, or asked of it.
pub(crate) async fn plan_suspensions(
    state_dir: &Path,
) -> Result<std::collections::BTreeMap<String, crate::store::Suspension>, String> {
    if let Some(held) = crate::store::read_suspensions_snapshot(state_dir) {
        return Ok(held);
    }
    if !state_dir.join(crate::store::DB_FILE).exists() {
        return Ok(Default::default());
    }
    let json = ask(state_dir, "suspensions\n", Duration::from_secs(30))
        .await
        .map_err(|e| format!("the state database is in use and the daemon did not answer: {e}"))?;
    serde_json::from_str(&json).map_err(|e| format!("unreadable suspensions from the daemon: {e}"))
}

/// Asks the running daemon to record `adoption` (`proxsync adopt` while the daemon holds the
/// state database).
pub(crate) async fn record_adoption(
    state_dir: &Path,
    adoption: &crate::store::Adoption,
) -> Result<String, String> {
    let json = serde_json::to_string(adoption).map_err(|e| e.to_string())?;
    ask(
        state_dir,
        &format!("adopt {json}\n"),
        Duration::from_secs(30),
    )
    .await
}

/// Sends one request line to the running daemon and returns its `ok` answer, or its `error`
/// answer as the error.
async fn ask(state_dir: &Path, line: &str, wait: Duration) -> Result<String, String> {
    let path = socket_path(state_dir);
    let mut stream = UnixStream::connect(&path)
        .await
        .map_err(|e| format!("cannot reach the daemon at {}: {e}", path.display()))?;
    stream
        .write_all(line.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    tokio::time::timeout(wait, BufReader::new(stream).read_line(&mut reply))
        .await
        .map_err(|_| format!("the daemon did not answer within {} s", wait.as_secs()))?
        .map_err(|e| e.to_string())?;
    match reply.trim_end().strip_prefix("ok ") {
        Some(ok) => Ok(ok.to_string()),
        None => Err(reply.trim_end().trim_start_matches("error ").to_string()),
    }
}

use tokio::io::AsyncReadExt;

fn parse(line: &str) -> Result<Request, String> {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("reconcile"), None, None) => Ok(Request {
            spec: None,
            retry: false,
        }),
        (Some("reconcile"), Some(name), retry @ (None | Some("--retry")))
            if crate::status::valid_name(name) =>
        {
            Ok(Request {
                spec: Some(name.to_string()),
                retry: retry.is_some(),
            })
        }
        (Some("reconcile"), Some(name), None) => Err(format!("{name:?} is not a spec name")),
        _ => Err("expected `reconcile`, `reconcile NAME` or `reconcile NAME --retry`".into()),
    }
}

/// Sends a request to the running daemon and returns its answer.
pub(crate) async fn request(
    state_dir: &Path,
    spec: Option<&str>,
    retry: bool,
) -> Result<String, String> {
    let path = socket_path(state_dir);
    let mut stream = UnixStream::connect(&path).await.map_err(|e| {
        format!(
            "cannot reach the daemon at {}: {e} (is `proxsync run` running, with this config's state_dir? \
             `systemctl status proxsync`)",
            path.display()
        )
    })?;
    let line = match spec {
        Some(name) if retry => format!("reconcile {name} --retry\n"),
        Some(name) => format!("reconcile {name}\n"),
        None => "reconcile\n".to_string(),
    };
    stream
        .write_all(line.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        BufReader::new(stream).read_line(&mut reply),
    )
    .await
    .map_err(|_| "the daemon did not answer within 10 s".to_string())?
    .map_err(|e| e.to_string())?;
    match reply.trim_end().strip_prefix("ok ") {
        Some(ok) => Ok(ok.to_string()),
        None => Err(reply.trim_end().trim_start_matches("error ").to_string()),
    }
}

/// Whether a daemon serves `state_dir`'s socket, and since when (`proxsync status`). `Err`
/// says why not (nothing listens: not running).
pub(crate) async fn daemon_state(state_dir: &Path) -> Result<DaemonState, String> {
    let path = socket_path(state_dir);
    let mut stream = UnixStream::connect(&path)
        .await
        .map_err(|e| format!("nothing answers on {}: {e}", path.display()))?;
    stream
        .write_all(b"state\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    tokio::time::timeout(
        Duration::from_secs(5),
        BufReader::new(stream).read_line(&mut reply),
    )
    .await
    .map_err(|_| "the daemon did not answer within 5 s".to_string())?
    .map_err(|e| e.to_string())?;
    match reply.trim_end().strip_prefix("ok ") {
        Some(json) => {
            serde_json::from_str(json).map_err(|e| format!("unreadable state from the daemon: {e}"))
        }
        None => Err(reply.trim_end().trim_start_matches("error ").to_string()),
    }
}

/// The state records `proxsync plan` plans with: read from the database, or, while the
/// daemon holds it, asked of the daemon (none before the first cycle made the database).
pub(crate) async fn plan_records(
    state_dir: &Path,
) -> Result<std::collections::BTreeMap<String, crate::store::SpecRecord>, String> {
    if let Some(records) = crate::store::read_specs_snapshot(state_dir) {
        return Ok(records);
    }
    if !state_dir.join(crate::store::DB_FILE).exists() {
        return Ok(Default::default());
    }
    records(state_dir)
        .await
        .map_err(|e| format!("the state database is in use and the daemon did not answer: {e}"))
}

/// The running daemon's state records (for `proxsync plan` while the daemon holds the
/// database).
pub(crate) async fn records(
    state_dir: &Path,
) -> Result<std::collections::BTreeMap<String, crate::store::SpecRecord>, String> {
    let json = ask(state_dir, "records\n", Duration::from_secs(30)).await?;
    serde_json::from_str(&json).map_err(|e| format!("unreadable records from the daemon: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!(
            parse("reconcile\n"),
            Ok(Request {
                spec: None,
                retry: false
            })
        );
        assert_eq!(
            parse("reconcile web-01\n"),
            Ok(Request {
                spec: Some("web-01".into()),
                retry: false,
            })
        );
        assert_eq!(
            parse("reconcile web-01 --retry\n"),
            Ok(Request {
                spec: Some("web-01".into()),
                retry: true,
            })
        );
        assert!(parse("reconcile web-01 --force\n").is_err());
        assert!(parse("reconcile ../etc\n").is_err());
        assert!(parse("delete everything\n").is_err());
        assert!(parse("").is_err());
    }

    /// While accepts fail (the process out of descriptors), the loop pauses longer and longer
    /// between tries instead of spinning: counted on paused time, no clock read.
    #[tokio::test(start_paused = true)]
    async fn the_accept_loop_pauses_while_accepts_fail() {
        let tries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = tries.clone();
        let accept = move || {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                if n >= 10_000 {
                    // A spinning loop ends up here; the test then fails on the count.
                    std::future::pending::<()>().await;
                }
                Err::<(), _>(std::io::Error::from_raw_os_error(libc::EMFILE))
            }
        };
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let run = accept_loop(accept, slots, |_, _| {}, |_| {});
        let _ = tokio::time::timeout(Duration::from_secs(60), run).await;
        let tries = tries.load(std::sync::atomic::Ordering::SeqCst);
        // 10 ms doubling to 1 s: 8 tries in the first 1.3 s, then one a second.
        assert!((50..=70).contains(&tries), "{tries} accepts in 60 s");
    }

    /// Past [`MAX_CONNECTIONS`] held at once, a connection is refused at once; a slot given
    /// back serves the next one, and a working accept ends the pauses.
    #[tokio::test(start_paused = true)]
    async fn connections_over_the_bound_are_refused_until_a_slot_is_free() {
        let (tx, rx) = mpsc::unbounded_channel::<std::io::Result<u32>>();
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let accept = move || {
            let rx = rx.clone();
            async move {
                match rx.lock().await.recv().await {
                    Some(conn) => conn,
                    None => std::future::pending().await,
                }
            }
        };
        let held = Arc::new(std::sync::Mutex::new(Vec::new()));
        let refused = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (h, r) = (held.clone(), refused.clone());
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let task = tokio::spawn(accept_loop(
            accept,
            slots,
            move |conn, slot| h.lock().unwrap().push((conn, slot)),
            move |conn| r.lock().unwrap().push(conn),
        ));
        let settle = || tokio::time::sleep(Duration::from_millis(1));
        for n in 0..MAX_CONNECTIONS as u32 + 3 {
            tx.send(Ok(n)).unwrap();
        }
        settle().await;
        assert_eq!(held.lock().unwrap().len(), MAX_CONNECTIONS);
        assert_eq!(*refused.lock().unwrap(), vec![8, 9, 10]);
        // A failed accept in between, then a slot given back: the next one is served.
        tx.send(Err(std::io::Error::from_raw_os_error(libc::ENFILE)))
            .unwrap();
        drop(held.lock().unwrap().remove(0));
        tx.send(Ok(11)).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let served: Vec<u32> = held.lock().unwrap().iter().map(|(c, _)| *c).collect();
        assert_eq!(served.last(), Some(&11), "{served:?}");
        assert_eq!(refused.lock().unwrap().len(), 3);
        task.abort();
    }

    /// On the real socket: with every slot held by a request the daemon has not taken yet,
    /// one more client is told the daemon is busy; once the daemon takes them, it is served.
    #[tokio::test]
    async fn a_busy_daemon_says_so_and_serves_again_when_free() {
        let dir = tempfile::tempdir().unwrap();
        // The daemon's queue is full and it takes nothing until the end: each handler waits
        // to queue its request, holding its slot.
        let (tx, mut rx) = mpsc::channel(1);
        tx.try_send(Request {
            spec: None,
            retry: false,
        })
        .unwrap();
        let server = serve(dir.path(), tx, None, None).unwrap();
        let path = socket_path(dir.path());
        let mut holders = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            let mut c = UnixStream::connect(&path).await.unwrap();
            c.write_all(b"reconcile\n").await.unwrap();
            holders.push(c);
        }
        // Accepted after every holder (in order of connection): no slot is left.
        let busy = request(dir.path(), Some("web-01"), false)
            .await
            .unwrap_err();
        assert!(busy.contains("too many control connections"), "{busy}");
        // The daemon takes the requests: every holder is answered and its slot comes back.
        for _ in 0..=MAX_CONNECTIONS {
            rx.recv().await.expect("a request");
        }
        for c in holders {
            let mut reply = String::new();
            BufReader::new(c).read_line(&mut reply).await.unwrap();
            assert!(reply.starts_with("ok reconcile"), "{reply}");
        }
        let next = tokio::spawn({
            let dir = dir.path().to_path_buf();
            async move { request(&dir, Some("web-02"), false).await }
        });
        assert_eq!(
            rx.recv().await,
            Some(Request {
                spec: Some("web-02".into()),
                retry: false,
            })
        );
        assert!(next.await.unwrap().is_ok());
        server.abort();
    }

    /// A suspension through the socket is recorded as the daemon sees it: who from the
    /// socket's peer uid, when from its own clock. What the client says of either (here a
    /// forged `by`, an old `at_ms` and `from_git`) is not taken; its reason is.
    #[tokio::test]
    async fn a_suspension_through_the_socket_records_the_peer_uid_and_the_daemons_clock() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, _rx) = mpsc::channel(4);
        let store =
            std::sync::Arc::new(crate::store::Store::open(&dir.path().join("state")).unwrap());
        let server = serve(dir.path(), tx, Some(store.clone()), None).unwrap();
        let forged = r#"suspend {"name":"web-01","reason":"restoring a backup","suspension":{"by":"mallory","reason":"restoring a backup","at_ms":1,"from_git":true}}"#;
        let before = crate::util::clock::now_ms();
        let answer = ask(dir.path(), &format!("{forged}\n"), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(answer.contains("web-01 suspended"), "{answer}");
        let held = store.suspensions().unwrap();
        let s = &held["web-01"];
        // SAFETY: getuid has no preconditions and cannot fail.
        #[allow(unsafe_code)]
        let uid = unsafe { libc::getuid() };
        assert!(s.by.contains(&format!("uid {uid}")), "{s:?}");
        assert!(!s.by.contains("mallory"), "{s:?}");
        assert!(s.at_ms >= before, "{s:?}");
        assert!(!s.from_git, "{s:?}");
        assert_eq!(s.reason.as_deref(), Some("restoring a backup"), "{s:?}");
        server.abort();
    }

    #[tokio::test]
    async fn a_request_reaches_the_daemon_and_is_answered() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::channel(4);
        let store =
            std::sync::Arc::new(crate::store::Store::open(&dir.path().join("state")).unwrap());
        store
            .put("web-01", &crate::store::SpecRecord::default())
            .unwrap();
        // A stale socket file from an earlier run is replaced.
        std::fs::write(socket_path(dir.path()), "stale").unwrap();
        let server = serve(dir.path(), tx, Some(store), None).unwrap();
        {
            use std::os::unix::fs::{FileTypeExt, PermissionsExt};
            let meta = std::fs::symlink_metadata(socket_path(dir.path())).unwrap();
            assert!(meta.file_type().is_socket());
            assert_eq!(meta.permissions().mode() & 0o777, 0o660);
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .filter(|n| n.to_string_lossy().starts_with(".ctl-"))
                .collect();
            assert!(
                left.is_empty(),
                "the staging directory is removed: {left:?}"
            );
        }
        let recs = records(dir.path()).await.unwrap();
        assert!(recs.contains_key("web-01"), "{recs:?}");
        let answer = request(dir.path(), Some("web-01"), false).await.unwrap();
        assert!(answer.contains("web-01"), "{answer}");
        assert_eq!(
            rx.recv().await,
            Some(Request {
                spec: Some("web-01".into()),
                retry: false,
            })
        );
        let err = request(dir.path(), Some("Not/A/Name"), false)
            .await
            .unwrap_err();
        assert!(err.contains("not a spec name"), "{err}");
        server.abort();
        let gone = tempfile::tempdir().unwrap();
        let err = request(gone.path(), None, false).await.unwrap_err();
        assert!(err.contains("is `proxsync run` running"), "{err}");
    }
}
