//! The daemon's web listener (`[web] listen`, TCP or a unix socket): the webhook receivers at
//! `POST /hooks/<name>` (`hooks`), served by hyper in tasks of its own, so a hook never waits
//! for the reconcile loop nor the loop for a hook. A verified push to the configured branch is
//! a message on the daemon's ref channel, which makes the daemon fetch at once, or at most
//! once per [`FETCH_SPACING`] ([`Fetches`]): a flood of hooks, even validly signed ones, costs
//! one fetch per 5 s. Bounded: a few connections at once (a new one ending the oldest), each closed
//! after a short while, a body of at most [`MAX_BODY`] read within [`BODY_TIMEOUT`] (a larger
//! one refused by its length before it is read). [`route`] maps a path to what serves it; a page is one more [`Route`].

pub(crate) mod hooks;
pub(crate) mod ui;

use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::mpsc;

use crate::config::{Config, MetricsListen, WebConfig};
use crate::telemetry::listener;
use crate::telemetry::metrics::Metrics;
use hooks::{Receiver, Verdict};

/// Connections served at once; a new one beyond ends another (`telemetry::listener::Slots`).
const MAX_CONNECTIONS: usize = 16;
/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a hook's body.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection may stay open (keep-alive included).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// The largest hook body read: a push's `ref` is all proxsync needs, and a push's payload
/// is some KiB (GitHub caps its own at 25 MB).
pub(crate) const MAX_BODY: usize = 1024 * 1024;

/// What the listener serves, replaced as a whole by a reload.
pub(crate) struct Routes {
    receivers: Vec<Receiver>,
    /// `[source] branch`: the only branch whose push makes a fetch.
    branch: String,
    /// The read-only pages (`ui`).
    pages: ui::Pages,
}

impl Routes {
    /// The routes of `config`, every receiver's secret (and the web token) read: at start,
    /// and to check a reload before it is applied. The error names the receiver and file.
    pub(crate) fn load(config: &Config) -> Result<Routes, String> {
        if let Some(web) = &config.web {
            web.load_token().map_err(|e| e.to_string())?;
        }
        let receivers = config
            .receivers
            .iter()
            .map(|r| {
                Ok(Receiver {
                    name: r.name.clone(),
                    kind: r.kind,
                    secret: r.load_secret().map_err(|e| e.to_string())?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Routes {
            receivers,
            branch: config.source.branch.clone(),
            pages: ui::Pages::load(config)?,
        })
    }
}

/// What every connection shares.
struct Shared {
    routes: RwLock<Arc<Routes>>,
    fetches: Arc<Fetches>,
    metrics: Metrics,
    refusals: std::sync::Mutex<Refusals>,
}

/// How often a refused hook is logged at most: anyone who reaches the listener can send
/// them, and a line for each would flood the journal (whose rate limit then drops the
/// daemon's own lines). The metric counts every one.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Refusals {
    last_logged: Option<tokio::time::Instant>,
    unlogged: u64,
}

impl Shared {
    fn log_refusal(&self, receiver: &str) {
        let mut r = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        let now = tokio::time::Instant::now();
        if r.last_logged.is_some_and(|t| now < t + REFUSAL_LOG_EVERY) {
            r.unlogged += 1;
            return;
        }
        tracing::info!(
            receiver,
            unlogged_before = r.unlogged,
            "webhook refused: a missing or wrong signature (more refused hooks are counted in \
             proxsync_webhook_requests_total and logged once a minute at most)"
        );
        r.last_logged = Some(now);
        r.unlogged = 0;
    }
}

/// The least time between two fetches the hooks ask for. A forge's signature covers the body
/// alone and holds forever, so one captured delivery replayed in a loop would otherwise make
/// one fetch and cycle after the other (54 in 3 s against fakepve).
const FETCH_SPACING: Duration = Duration::from_secs(5);

/// The hooks' way to the daemon's ref channel, paced by [`FETCH_SPACING`]: a push within it
/// of the last fetch asked is deferred to its end (one deferred fetch at most), never lost.
struct Fetches {
    refs: mpsc::Sender<()>,
    pace: std::sync::Mutex<Pace>,
}

#[derive(Default)]
struct Pace {
    /// When a fetch was last asked for.
    last: Option<tokio::time::Instant>,
    /// A deferred fetch is waiting for the end of the spacing.
    deferred: bool,
}

/// What asking for a fetch did.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    Now,
    /// Within [`FETCH_SPACING`] of the last: asked for at its end.
    Deferred,
    /// One was pending already (deferred, or in the channel).
    Pending,
    /// The daemon is stopping.
    Closed,
}

impl Fetches {
    fn new(refs: mpsc::Sender<()>) -> Fetches {
        Fetches {
            refs,
            pace: Default::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pace> {
        self.pace.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ask(self: &Arc<Self>) -> Asked {
        if self.refs.is_closed() {
            return Asked::Closed;
        }
        let mut pace = self.lock();
        if pace.deferred {
            return Asked::Pending;
        }
        let now = tokio::time::Instant::now();
        match pace.last.map(|last| last + FETCH_SPACING) {
            Some(at) if at > now => {
                pace.deferred = true;
                let fetches = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(at).await;
                    let mut pace = fetches.lock();
                    pace.deferred = false;
                    pace.last = Some(tokio::time::Instant::now());
                    drop(pace);
                    let _ = fetches.refs.try_send(());
                });
                Asked::Deferred
            }
            _ => {
                pace.last = Some(now);
                match self.refs.try_send(()) {
                    Ok(()) => Asked::Now,
                    Err(mpsc::error::TrySendError::Full(())) => Asked::Pending,
                    Err(mpsc::error::TrySendError::Closed(())) => Asked::Closed,
                }
            }
        }
    }
}

/// The running listener. [`Web::stop`] ends it (and removes a unix socket's file).
pub(crate) struct Web {
    running: listener::Running,
    shared: Arc<Shared>,
}

impl Web {
    /// Serves `routes` from now on (a reload: receivers' secrets, the branch).
    pub(crate) fn update(&self, routes: Routes) {
        *self
            .shared
            .routes
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(routes);
    }

    pub(crate) fn stop(self) {
        self.running.stop();
    }

    /// The TCP address bound (port 0 in the config: the one the system chose).
    #[cfg(test)]
    pub(crate) fn local(&self) -> std::net::SocketAddr {
        self.running.local.expect("a TCP listener")
    }
}

/// Binds `[web] listen` and serves `routes` there until [`Web::stop`]; a verified push sends
/// on `refs`. Call inside the tokio runtime. The error names the key and the address.
pub(crate) fn serve(
    web: &WebConfig,
    routes: Routes,
    refs: mpsc::Sender<()>,
    metrics: Metrics,
) -> Result<Web, String> {
    let listen = &web.listen;
    let shared = Arc::new(Shared {
        routes: RwLock::new(Arc::new(routes)),
        fetches: Arc::new(Fetches::new(refs)),
        metrics,
        refusals: Default::default(),
    });
    let serving = shared.clone();
    let running = listener::serve(
        listen,
        listener::Slots::new(MAX_CONNECTIONS),
        move |stream| serve_connection(stream, serving.clone()),
    )
    .map_err(|e| format!("[web] listen = \"{}\": cannot listen: {e}", shown(listen)))?;
    Ok(Web { running, shared })
}

/// `listen` as the config writes it.
fn shown(listen: &MetricsListen) -> String {
    match listen {
        MetricsListen::Tcp(addr) => addr.to_string(),
        MetricsListen::Unix(path) => format!("unix:{}", path.display()),
    }
}

/// Serves one connection until it ends or [`CONNECTION_LIFETIME`] passes.
async fn serve_connection(stream: listener::Stream, shared: Arc<Shared>) {
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(respond(req, &shared).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
}

/// What serves a path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route<'a> {
    /// `/hooks/<name>`: a receiver (the name not yet looked up).
    Hook(&'a str),
    /// A read-only page (`ui`).
    Page(ui::Page<'a>),
    NotFound,
}

pub(crate) fn route(path: &str) -> Route<'_> {
    match path.strip_prefix("/hooks/") {
        Some(name) if !name.is_empty() && !name.contains('/') => Route::Hook(name),
        _ => ui::route(path).map_or(Route::NotFound, Route::Page),
    }
}

async fn respond(req: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    match route(req.uri().path()) {
        Route::Hook(name) => {
            let name = name.to_string();
            let routes = shared
                .routes
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let Some(receiver) = routes.receivers.iter().find(|r| r.name == name) else {
                // An unknown name is the sender's text: counted without it.
                shared.metrics.webhook("", "not_found");
                return plain(StatusCode::NOT_FOUND, "no such receiver\n");
            };
            let (outcome, response) = hook(req, receiver, &routes.branch, &shared.fetches).await;
            shared.metrics.webhook(&receiver.name, outcome);
            if outcome == Verdict::Unauthorized.outcome() {
                shared.log_refusal(&receiver.name);
            }
            response
        }
        Route::Page(page) => {
            let routes = shared
                .routes
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            ui::respond(req.method(), req.headers(), page, &routes.pages).await
        }
        Route::NotFound => plain(
            StatusCode::NOT_FOUND,
            "not found: webhooks are at /hooks/<receiver>\n",
        ),
    }
}

/// One hook to `receiver`: its outcome (the metric's label) and the answer.
async fn hook(
    req: Request<Incoming>,
    receiver: &Receiver,
    branch: &str,
    fetches: &Arc<Fetches>,
) -> (&'static str, Response<Full<Bytes>>) {
    if req.method() != Method::POST {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "use POST\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return ("method_not_allowed", response);
    }
    let (parts, body) = req.into_parts();
    let too_large = || {
        (
            "too_large",
            plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the body is larger than 1 MiB; send push events only\n",
            ),
        )
    };
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large();
    }
    let body =
        match tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, MAX_BODY).collect()).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
            Ok(Err(_)) => {
                return (
                    "bad_request",
                    plain(StatusCode::BAD_REQUEST, "the body could not be read\n"),
                );
            }
            Err(_) => {
                return (
                    "timeout",
                    plain(StatusCode::REQUEST_TIMEOUT, "the body took too long\n"),
                );
            }
        };
    let verdict = hooks::judge(receiver, &parts.headers, &body, branch);
    let (status, text) = match verdict {
        Verdict::Push => match fetches.ask() {
            Asked::Now => {
                tracing::info!(receiver = %receiver.name, "webhook: a push to {branch}: fetching now");
                (StatusCode::ACCEPTED, "accepted: fetching now\n")
            }
            Asked::Deferred => {
                return (
                    "coalesced",
                    plain(
                        StatusCode::ACCEPTED,
                        "accepted: fetching within 5 s (hooks are paced)\n",
                    ),
                );
            }
            Asked::Pending => {
                return (
                    "coalesced",
                    plain(
                        StatusCode::ACCEPTED,
                        "accepted: a fetch is already pending\n",
                    ),
                );
            }
            Asked::Closed => {
                return (
                    "unavailable",
                    plain(StatusCode::SERVICE_UNAVAILABLE, "the daemon is stopping\n"),
                );
            }
        },
        Verdict::Ping => (StatusCode::OK, "pong: the signature holds\n"),
        Verdict::OtherEvent => (StatusCode::OK, "ignored: not a push event\n"),
        Verdict::OtherBranch => (
            StatusCode::OK,
            "ignored: a push to another branch than [source] branch\n",
        ),
        Verdict::Unauthorized => (
            StatusCode::UNAUTHORIZED,
            "the signature is missing or wrong\n",
        ),
        Verdict::BadBody => (
            StatusCode::BAD_REQUEST,
            "the body is not a JSON push event with a \"ref\" (send application/json)\n",
        ),
    };
    (verdict.outcome(), plain(status, text))
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ReceiverKind;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const PUSH: &str = r#"{"ref":"refs/heads/main"}"#;

    /// A listener on a free loopback port with one GitHub receiver `gh` (secret `s3cret`),
    /// branch `main`, and the ref channel's receiving end (capacity 1).
    fn start() -> (Web, mpsc::Receiver<()>, Metrics) {
        let (tx, rx) = mpsc::channel(1);
        let metrics = Metrics::new("main");
        let routes = Routes {
            receivers: vec![Receiver {
                name: "gh".into(),
                kind: ReceiverKind::Github,
                secret: crate::config::Secret::new("s3cret"),
            }],
            branch: "main".into(),
            pages: ui::Pages::none(),
        };
        let web = WebConfig {
            listen: MetricsListen::Tcp("127.0.0.1:0".parse().unwrap()),
            token_file: None,
            file_url: None,
        };
        (
            serve(&web, routes, tx, metrics.clone()).unwrap(),
            rx,
            metrics,
        )
    }

    /// Sends `head` (the request line and headers, without the blank line) and `body`; the
    /// answer's status code and text.
    async fn send(web: &Web, head: &str, body: &[u8]) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(web.local()).await.unwrap();
        s.write_all(format!("{head}\r\nconnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        // The server may answer and close before the body is all sent (413).
        let _ = s.write_all(body).await;
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer).to_string();
        let code = answer.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
        (code, answer)
    }

    fn signed_push(body: &str, event: &str, key: &[u8]) -> String {
        format!(
            "POST /hooks/gh HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nx-github-event: {event}\r\n\
             x-hub-signature-256: sha256={}",
            body.len(),
            hooks::sign(key, body.as_bytes())
        )
    }

    #[tokio::test]
    async fn a_verified_push_sends_one_ref_notification_and_a_flood_coalesces() {
        let (web, mut rx, metrics) = start();
        let (code, text) = send(&web, &signed_push(PUSH, "push", b"s3cret"), PUSH.as_bytes()).await;
        assert_eq!(code, 202, "{text}");
        assert!(text.contains("fetching now"), "{text}");
        // Within FETCH_SPACING: the next one is deferred, the ones after find it pending.
        for i in 0..3 {
            let (code, text) =
                send(&web, &signed_push(PUSH, "push", b"s3cret"), PUSH.as_bytes()).await;
            assert_eq!(code, 202, "{text}");
            let said = if i == 0 {
                "within 5 s"
            } else {
                "already pending"
            };
            assert!(text.contains(said), "{text}");
        }
        assert_eq!(rx.try_recv(), Ok(()));
        assert!(
            rx.try_recv().is_err(),
            "one notification now for four hooks"
        );
        let text = metrics.encode();
        assert!(
            text.contains(r#"proxsync_webhook_requests_total{receiver="gh",outcome="accepted"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"proxsync_webhook_requests_total{receiver="gh",outcome="coalesced"} 3"#
            ),
            "{text}"
        );
        web.stop();
    }

    #[tokio::test]
    async fn refusals_and_ignored_hooks_send_nothing() {
        let (web, mut rx, metrics) = start();
        let dev = r#"{"ref":"refs/heads/dev"}"#;
        let cases: Vec<(String, &str, u16, &str)> = vec![
            (
                signed_push(PUSH, "push", b"wrong"),
                PUSH,
                401,
                "unauthorized",
            ),
            (
                signed_push(PUSH, "push", b"s3cret").replace("x-hub-signature-256", "x-other"),
                PUSH,
                401,
                "unauthorized",
            ),
            (
                signed_push(dev, "push", b"s3cret"),
                dev,
                200,
                "ignored_branch",
            ),
            (
                signed_push(PUSH, "issues", b"s3cret"),
                PUSH,
                200,
                "ignored_event",
            ),
            (signed_push(PUSH, "ping", b"s3cret"), PUSH, 200, "ping"),
            (
                signed_push("{}", "push", b"s3cret"),
                "{}",
                400,
                "bad_request",
            ),
            (
                "POST /hooks/nobody HTTP/1.1\r\nhost: x\r\ncontent-length: 2".into(),
                "{}",
                404,
                "not_found",
            ),
            (
                "GET /hooks/gh HTTP/1.1\r\nhost: x".into(),
                "",
                405,
                "method_not_allowed",
            ),
            ("GET / HTTP/1.1\r\nhost: x".into(), "", 404, ""),
        ];
        let mut seen: std::collections::BTreeMap<&str, u32> = Default::default();
        for (head, body, code, outcome) in cases {
            let (got, text) = send(&web, &head, body.as_bytes()).await;
            assert_eq!(got, code, "{outcome}: {text}");
            if code == 405 {
                assert!(text.to_lowercase().contains("allow: post"), "{text}");
            }
            if !outcome.is_empty() {
                let n = seen.entry(outcome).or_default();
                *n += 1;
                let receiver = if outcome == "not_found" { "" } else { "gh" };
                let sample = format!(
                    r#"proxsync_webhook_requests_total{{receiver="{receiver}",outcome="{outcome}"}} {n}"#
                );
                assert!(metrics.encode().contains(&sample), "{sample}");
            }
        }
        assert!(rx.try_recv().is_err(), "no fetch");
        web.stop();
    }

    /// A body that does not come within `BODY_TIMEOUT` (tokio's paused clock runs ahead while
    /// the server waits for it).
    #[tokio::test(start_paused = true)]
    async fn a_body_that_does_not_come_times_out() {
        let (web, mut rx, metrics) = start();
        let mut s = tokio::net::TcpStream::connect(web.local()).await.unwrap();
        s.write_all(
            b"POST /hooks/gh HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\
              x-github-event: push\r\n\r\n{\"ref\"",
        )
        .await
        .unwrap();
        let started = tokio::time::Instant::now();
        let mut answer = vec![0u8; 512];
        let n = s.read(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]).to_string();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(started.elapsed() >= BODY_TIMEOUT);
        assert!(
            metrics
                .encode()
                .contains(r#"proxsync_webhook_requests_total{receiver="gh",outcome="timeout"} 1"#)
        );
        assert!(rx.try_recv().is_err(), "no fetch");
        web.stop();
    }

    #[tokio::test]
    async fn an_oversized_body_is_refused_without_being_read() {
        let (web, mut rx, metrics) = start();
        // Declared too large: refused on the length alone (no body sent at all).
        let head = format!(
            "POST /hooks/gh HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nx-github-event: push",
            MAX_BODY + 1
        );
        let (code, text) = send(&web, &head, b"").await;
        assert_eq!(code, 413, "{text}");
        // Chunked, no length: refused once past the limit.
        let chunk = vec![b'a'; 64 * 1024];
        let mut body = Vec::new();
        for _ in 0..(MAX_BODY / chunk.len() + 2) {
            body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            body.extend_from_slice(&chunk);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"0\r\n\r\n");
        let head = "POST /hooks/gh HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\
                    x-github-event: push";
        let (code, text) = send(&web, head, &body).await;
        assert_eq!(code, 413, "{text}");
        assert!(
            metrics.encode().contains(
                r#"proxsync_webhook_requests_total{receiver="gh",outcome="too_large"} 2"#
            )
        );
        assert!(rx.try_recv().is_err(), "no fetch");
        web.stop();
    }

    /// Slowloris: every slot held by a connection that never finishes its headers. A hook
    /// that comes then is served at once, the oldest idle connection closed for it.
    #[tokio::test]
    async fn slow_connections_holding_every_slot_do_not_keep_a_hook_out() {
        let (web, mut rx, _) = start();
        let mut slow = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            let mut s = tokio::net::TcpStream::connect(web.local()).await.unwrap();
            s.write_all(b"POST /hooks/gh HTTP/1.1\r\nhost: x\r\n")
                .await
                .unwrap();
            slow.push(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        let (code, text) = send(&web, &signed_push(PUSH, "push", b"s3cret"), PUSH.as_bytes()).await;
        assert_eq!(code, 202, "{text}");
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(rx.try_recv(), Ok(()));
        // The oldest slow connection made room: it is closed.
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(2), slow[0].read(&mut buf))
            .await
            .expect("the oldest slow connection is closed")
            .unwrap_or(0);
        assert_eq!(n, 0);
        web.stop();
    }

    /// Hooks come at most once per FETCH_SPACING to the daemon; one within it is deferred
    /// to its end, never lost, and the ones after it coalesce into it.
    #[tokio::test(start_paused = true)]
    async fn fetches_are_paced_and_a_deferred_one_comes() {
        let (tx, mut rx) = mpsc::channel(64);
        let fetches = Arc::new(Fetches::new(tx));
        assert_eq!(fetches.ask(), Asked::Now);
        assert_eq!(rx.try_recv(), Ok(()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(fetches.ask(), Asked::Deferred);
        for _ in 0..100 {
            assert_eq!(fetches.ask(), Asked::Pending);
        }
        assert!(rx.try_recv().is_err(), "nothing before the spacing ends");
        tokio::time::sleep(FETCH_SPACING - Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert_eq!(rx.try_recv(), Ok(()), "the deferred fetch");
        assert!(rx.try_recv().is_err(), "one for 101 hooks");
        assert_eq!(
            fetches.ask(),
            Asked::Deferred,
            "spaced from the deferred one"
        );
        tokio::time::sleep(FETCH_SPACING * 2).await;
        assert_eq!(rx.try_recv(), Ok(()));
        assert_eq!(fetches.ask(), Asked::Now, "long after: at once again");
        drop(rx);
        tokio::time::sleep(FETCH_SPACING * 2).await;
        assert_eq!(fetches.ask(), Asked::Closed);
    }

    fn routes_gh() -> Routes {
        Routes {
            receivers: vec![Receiver {
                name: "gh".into(),
                kind: ReceiverKind::Github,
                secret: crate::config::Secret::new("s3cret"),
            }],
            branch: "main".into(),
            pages: ui::Pages::none(),
        }
    }

    /// A unix socket: a stale file is replaced, a socket another listener serves is not
    /// taken from it (a second daemon on the same path), nor is any other file.
    #[tokio::test]
    async fn a_unix_socket_replaces_a_stale_file_but_not_a_live_listener() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("web.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists(), "a stale socket file");
        let web = WebConfig {
            listen: MetricsListen::Unix(path.clone()),
            token_file: None,
            file_url: None,
        };
        let (tx, _rx) = mpsc::channel(1);
        let first = serve(&web, routes_gh(), tx.clone(), Metrics::off()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o660);
        let beside: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(beside.len(), 1, "the socket alone: {beside:?}");
        let err = serve(&web, routes_gh(), tx.clone(), Metrics::off())
            .err()
            .expect("a live listener's socket is not taken");
        assert!(
            err.contains("[web] listen") && err.contains("in use"),
            "{err}"
        );
        // The first still serves.
        let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
        first.stop();
        assert!(!path.exists(), "stop removes the socket");
        std::fs::write(&path, "not a socket").unwrap();
        assert!(serve(&web, routes_gh(), tx, Metrics::off()).is_err());
        assert!(path.exists());
    }

    /// A TCP address another process holds: an error naming the key, not a panic nor a
    /// listener quietly elsewhere.
    #[tokio::test]
    async fn a_taken_tcp_address_is_an_error_naming_the_key() {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let web = WebConfig {
            listen: MetricsListen::Tcp(holder.local_addr().unwrap()),
            token_file: None,
            file_url: None,
        };
        let (tx, _rx) = mpsc::channel(1);
        let err = serve(&web, routes_gh(), tx, Metrics::off())
            .err()
            .expect("the address is taken");
        assert!(err.starts_with("[web] listen = \"127.0.0.1:"), "{err}");
        assert!(err.contains("cannot listen"), "{err}");
    }

    /// A connection flood from one address (a new connection every few milliseconds) ends
    /// that address's own connections, not the one a hook from elsewhere came on while its
    /// headers were still on their way.
    #[tokio::test]
    async fn a_flood_of_connections_from_one_peer_does_not_end_anothers() {
        let (web, mut rx, _) = start();
        let addr = web.local();
        let mut flood = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            flood.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        // The hook's connection, from another loopback address, its request not sent yet.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut hook = socket.connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        for _ in 0..2 * MAX_CONNECTIONS {
            flood.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let head = signed_push(PUSH, "push", b"s3cret");
        let _ = hook
            .write_all(format!("{head}\r\nconnection: close\r\n\r\n{PUSH}").as_bytes())
            .await;
        let mut answer = Vec::new();
        let _ = hook.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 202"), "{answer:?}");
        assert_eq!(rx.try_recv(), Ok(()));
        web.stop();
    }

    /// hyper's header timeout runs from the connection's start (a client that sends nothing)
    /// and again while a kept-alive connection waits for its next request: neither holds a
    /// slot beyond HEADER_TIMEOUT.
    #[tokio::test(start_paused = true)]
    async fn silent_and_idle_kept_alive_connections_are_closed_after_the_header_timeout() {
        let (web, _rx, _) = start();
        let closed_after = |mut s: tokio::net::TcpStream| async move {
            let started = tokio::time::Instant::now();
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
            (
                started.elapsed(),
                String::from_utf8_lossy(&rest).to_string(),
            )
        };
        let silent = tokio::net::TcpStream::connect(web.local()).await.unwrap();
        let (after, _) = closed_after(silent).await;
        assert!(
            after >= HEADER_TIMEOUT && after < HEADER_TIMEOUT + Duration::from_secs(1),
            "{after:?}"
        );
        let mut kept = tokio::net::TcpStream::connect(web.local()).await.unwrap();
        kept.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut first = [0u8; 12];
        kept.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"HTTP/1.1 404");
        let (after, _) = closed_after(kept).await;
        assert!(
            after >= HEADER_TIMEOUT - Duration::from_millis(10)
                && after < HEADER_TIMEOUT + Duration::from_secs(1),
            "{after:?}"
        );
        web.stop();
    }

    #[test]
    fn routes() {
        assert_eq!(route("/hooks/github"), Route::Hook("github"));
        assert_eq!(route("/hooks/"), Route::NotFound);
        assert_eq!(route("/hooks/a/b"), Route::NotFound);
        assert_eq!(route("/hooks"), Route::NotFound);
        assert_eq!(route("/"), Route::Page(ui::Page::Fleet));
        assert_eq!(route("/spec/a"), Route::Page(ui::Page::Spec("a")));
        assert_eq!(route("/metrics"), Route::NotFound);
    }
}
