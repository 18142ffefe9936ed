//! The HTTP transport: TLS trust, authentication, the `{"data": ...}` envelope, PVE's errors,
//! bounded retries for reads, and a debug log line per request (never with a secret).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use super::error::{Error, TransportKind};
use crate::config::{Secret, SiteConfig, Trust};

/// Largest response body accepted (a `/cluster/resources` of 10,000 VMs is a few MiB).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// How a client proves who it is.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// An API token: `user@realm!tokenid` and its secret (the primary way).
    Token {
        /// `user@realm!tokenid`.
        id: String,
        /// The token's secret.
        secret: Secret,
    },
    /// A user and password, for a ticket and CSRF token (the fallback).
    Password {
        /// `user@realm`.
        user: String,
        /// The user's password.
        password: Secret,
    },
}

/// Everything needed to talk to one PVE cluster.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// `https://host:8006`.
    pub endpoint: String,
    /// Which certificates are trusted: the system's roots, a CA file or a pinned
    /// fingerprint.
    pub trust: Trust,
    /// How the client authenticates.
    pub credentials: Credentials,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// How long one request may take, from connecting to the end of the answer.
    pub request_timeout: Duration,
    /// Used only when configured; the environment's proxy variables are ignored.
    pub proxy: Option<String>,
    /// Attempts for an idempotent read (GET) that fails in transport; writes get one.
    pub read_attempts: u32,
    /// How long the retries of one read may take in all: a flaky network gets jittered,
    /// growing pauses within this budget rather than three quick tries.
    pub read_retry_budget: Duration,
}

impl ClientOptions {
    /// Options for a configured site; reads its token secret.
    pub fn for_site(site: &SiteConfig) -> Result<ClientOptions, Error> {
        let secret = site
            .load_token_secret()
            .map_err(|e| Error::Setup(e.to_string()))?;
        Ok(ClientOptions {
            endpoint: site.endpoint.clone(),
            trust: site.trust.clone(),
            credentials: Credentials::Token {
                id: site.token_id.clone(),
                secret,
            },
            connect_timeout: site.connect_timeout,
            request_timeout: site.request_timeout,
            proxy: site.proxy.clone(),
            read_attempts: READ_ATTEMPTS,
            read_retry_budget: READ_RETRY_BUDGET,
        })
    }
}

/// Attempts and time budget of a read that fails in transport (see `retry_pause`).
pub(crate) const READ_ATTEMPTS: u32 = 6;
pub(crate) const READ_RETRY_BUDGET: Duration = Duration::from_secs(6);

enum Auth {
    /// The prepared `Authorization` header (marked sensitive).
    Token(HeaderValue),
    Ticket {
        user: String,
        password: Secret,
        session: tokio::sync::Mutex<Option<Session>>,
    },
}

#[derive(Clone)]
struct Session {
    cookie: HeaderValue,
    csrf: HeaderValue,
    obtained: Instant,
}

/// PVE tickets live two hours; renew well before.
const TICKET_RENEW_AFTER: Duration = Duration::from_secs(3600);

/// A client for one PVE cluster. Cheap to share behind an `Arc`; calls may run concurrently.
pub struct Client {
    http: reqwest::Client,
    api_base: String,
    auth: Auth,
    read_attempts: u32,
    read_retry_budget: Duration,
    /// The longest pause between two polls of a task ([`super::tasks::poll_interval`]'s cap).
    pub(crate) task_poll_max: Duration,
    /// The site's task waits: their pace, shared listings and the limit on task reads.
    pub(crate) tasks: super::tasks::TaskWatcher,
    /// Where requests and tasks are counted (nowhere unless [`Client::with_metrics`]).
    pub(crate) metrics: std::sync::Arc<dyn super::Meter>,
    /// How many actions may run at once per node, fed by this client's requests and task
    /// waits (adaptive up to the default `max_parallel_per_node` unless
    /// [`Client::with_parallelism`]).
    limits: crate::concurrency::NodeLimits,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("api_base", &self.api_base)
            .finish_non_exhaustive()
    }
}

/// How long a kept-alive connection may idle in the pool. pveproxy closes one idle for 5 s
/// (pve-http-server src/PVE/APIServer/AnyEvent.pm: each client's handle has `timeout =>
/// $self->{timeout}`, 5 by default, set again after each response; its `on_error`
/// disconnects). Let go sooner, a connection is never given a request while the server closes
/// it (a POST sent so would get no answer), and an idle daemon holds no connection's buffers
/// (at 50,000 specs 9.7 MiB: a listing's read buffer per site) between cycles.
pub const POOL_IDLE: Duration = Duration::from_secs(4);

impl Client {
    /// Builds a client. Fails on an unusable CA file or endpoint; makes no request.
    pub fn new(opts: ClientOptions) -> Result<Client, Error> {
        let tls = super::tls::client_config(&opts.trust).map_err(Error::Setup)?;
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .connect_timeout(opts.connect_timeout)
            .timeout(opts.request_timeout)
            // PVE never redirects; following one could carry the token elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(POOL_IDLE)
            .user_agent(concat!("proxsync/", env!("CARGO_PKG_VERSION")));
        builder = match &opts.proxy {
            Some(url) => builder.proxy(
                reqwest::Proxy::all(url)
                    .map_err(|e| Error::Setup(format!("proxy {url:?}: {e}")))?,
            ),
            None => builder.no_proxy(),
        };
        let http = builder
            .build()
            .map_err(|e| Error::Setup(format!("HTTP client: {e}")))?;
        let auth = match opts.credentials {
            Credentials::Token { id, secret } => {
                let mut value =
                    HeaderValue::from_str(&format!("PVEAPIToken={id}={}", secret.expose()))
                        .map_err(|_| {
                            Error::Setup(format!(
                                "token {id:?}: the id or secret holds characters not allowed in an HTTP header"
                            ))
                        })?;
                value.set_sensitive(true);
                Auth::Token(value)
            }
            Credentials::Password { user, password } => Auth::Ticket {
                user,
                password,
                session: tokio::sync::Mutex::new(None),
            },
        };
        Ok(Client {
            http,
            api_base: format!("{}/api2/json", opts.endpoint.trim_end_matches('/')),
            auth,
            read_attempts: opts.read_attempts.max(1),
            read_retry_budget: opts.read_retry_budget,
            task_poll_max: Duration::from_secs(2),
            tasks: super::tasks::TaskWatcher::new(),
            metrics: std::sync::Arc::new(super::NoMeter),
            limits: crate::concurrency::NodeLimits::new(
                true,
                crate::config::ReconcileConfig::default().max_parallel_per_node,
            ),
        })
    }

    /// Runs at most `cap` actions at once per node: each node's own limit up to it when
    /// `adaptive` (`crate::concurrency`), else always `cap`.
    pub fn with_parallelism(mut self, adaptive: bool, cap: u32) -> Client {
        self.limits = crate::concurrency::NodeLimits::new(adaptive, cap);
        self
    }

    /// Each node's adaptive limit starts from these estimates of how long each task type
    /// takes (`doctor --exercise`'s durations, `conformance::durations`); after
    /// [`Client::with_parallelism`].
    pub fn with_task_estimates(
        mut self,
        estimates: std::collections::HashMap<String, Duration>,
    ) -> Client {
        let limits = std::mem::replace(
            &mut self.limits,
            crate::concurrency::NodeLimits::new(false, 1),
        );
        self.limits = limits.seeded(estimates);
        self
    }

    /// How many actions may run at once on `node` now.
    pub fn parallel_limit(&self, node: &str) -> u32 {
        self.limits.limit(node)
    }

    /// Each node something was learnt about, with its limit now (for the status summary).
    pub fn parallel_limits(&self) -> Vec<(String, u32)> {
        self.limits.limits()
    }

    /// A task of `kind` on `node`, begun at `began`, ended well after `took`.
    pub fn task_took(&self, node: &str, kind: &str, began: Instant, took: Duration) {
        let limit = self
            .limits
            .task_ended(node, kind, began, took, Instant::now());
        self.metrics.parallel_limit(node, limit);
    }

    /// `node` said it is overloaded about work begun at `began`.
    pub(crate) fn overloaded(&self, node: &str, began: Instant) {
        let limit = self.limits.overloaded(node, began, Instant::now());
        tracing::debug!(
            node,
            limit,
            "PVE is overloaded; actions at once on the node"
        );
        self.metrics.parallel_limit(node, limit);
    }

    /// Counts this client's requests and tasks in `metrics` (the daemon's: a site's handle).
    pub fn with_metrics(mut self, metrics: std::sync::Arc<dyn super::Meter>) -> Client {
        self.metrics = metrics;
        self
    }

    /// GET; retried on transport failures and gateway errors (a read is idempotent).
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, Error> {
        Ok(self.call(Method::GET, path, query).await?.data)
    }

    /// GET, as [`get`](Self::get), with the envelope's `total` beside `data` (task logs and
    /// task lists count their lines there). `None` when PVE sent no `total`.
    pub(crate) async fn get_with_total<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<(T, Option<u64>), Error> {
        let answer = self.call(Method::GET, path, query).await?;
        Ok((answer.data, answer.total))
    }

    /// POST form parameters. Never retried: a create or clone must not be sent twice blindly.
    pub(crate) async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        form: &[(&str, String)],
    ) -> Result<T, Error> {
        Ok(self.call(Method::POST, path, form).await?.data)
    }

    /// PUT form parameters. Never retried.
    pub(crate) async fn put<T: DeserializeOwned>(
        &self,
        path: &str,
        form: &[(&str, String)],
    ) -> Result<T, Error> {
        Ok(self.call(Method::PUT, path, form).await?.data)
    }

    /// DELETE with query parameters. Never retried.
    pub(crate) async fn delete<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, Error> {
        Ok(self.call(Method::DELETE, path, query).await?.data)
    }

    /// Sends one call and returns its `data`, with retries for reads and one re-login when a
    /// ticket expired.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        params: &[(&str, String)],
    ) -> Result<Answer<T>, Error> {
        let attempts = if method == Method::GET {
            self.read_attempts
        } else {
            1
        };
        let mut relogged = false;
        let mut attempt = 1;
        let started = Instant::now();
        loop {
            match self.send_once(&method, path, params).await {
                Err(Error::Api { status: 401, .. }) if !relogged && self.uses_ticket() => {
                    // 401 means the request was not executed: safe to log in again and resend.
                    relogged = true;
                    self.drop_session().await;
                }
                Err(e) if attempt < attempts && retryable_read(&e) => {
                    let pause = retry_pause(attempt);
                    // Every failed read gets one retry, even when its first attempt alone
                    // outlasted the budget (a connect timeout); more only within the budget.
                    if attempt > 1 && started.elapsed() + pause > self.read_retry_budget {
                        return Err(e);
                    }
                    tracing::debug!(%method, path, attempt, error = %e, "retrying read");
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn uses_ticket(&self) -> bool {
        matches!(self.auth, Auth::Ticket { .. })
    }

    async fn drop_session(&self) {
        if let Auth::Ticket { session, .. } = &self.auth {
            *session.lock().await = None;
        }
    }

    async fn auth_headers(&self, method: &Method) -> Result<HeaderMap, Error> {
        let mut headers = HeaderMap::new();
        match &self.auth {
            Auth::Token(value) => {
                headers.insert(reqwest::header::AUTHORIZATION, value.clone());
            }
            Auth::Ticket {
                user,
                password,
                session,
            } => {
                let mut guard = session.lock().await;
                let fresh = guard
                    .as_ref()
                    .is_some_and(|s| s.obtained.elapsed() < TICKET_RENEW_AFTER);
                if !fresh {
                    *guard = Some(self.login(user, password).await?);
                }
                if let Some(s) = guard.as_ref() {
                    headers.insert(reqwest::header::COOKIE, s.cookie.clone());
                    if method != Method::GET {
                        headers.insert("CSRFPreventionToken", s.csrf.clone());
                    }
                }
            }
        }
        Ok(headers)
    }

    async fn login(&self, user: &str, password: &Secret) -> Result<Session, Error> {
        #[derive(serde::Deserialize)]
        struct Ticket {
            ticket: String,
            #[serde(rename = "CSRFPreventionToken")]
            csrf: String,
        }
        let path = "/access/ticket";
        let form = [
            ("username", user.to_string()),
            ("password", password.expose().to_string()),
        ];
        let t: Ticket = self
            .exchange(&Method::POST, path, &form, HeaderMap::new())
            .await?
            .data;
        let bad = |_| Error::Decode {
            method: "POST".into(),
            path: path.into(),
            message: "the ticket holds characters not allowed in a header".into(),
        };
        let mut cookie =
            HeaderValue::from_str(&format!("PVEAuthCookie={}", t.ticket)).map_err(bad)?;
        cookie.set_sensitive(true);
        let mut csrf = HeaderValue::from_str(&t.csrf).map_err(bad)?;
        csrf.set_sensitive(true);
        Ok(Session {
            cookie,
            csrf,
            obtained: Instant::now(),
        })
    }

    async fn send_once<T: DeserializeOwned>(
        &self,
        method: &Method,
        path: &str,
        params: &[(&str, String)],
    ) -> Result<Answer<T>, Error> {
        let headers = self.auth_headers(method).await?;
        self.exchange(method, path, params, headers).await
    }

    /// One HTTP exchange: request, status, envelope.
    async fn exchange<T: DeserializeOwned>(
        &self,
        method: &Method,
        path: &str,
        params: &[(&str, String)],
        headers: HeaderMap,
    ) -> Result<Answer<T>, Error> {
        let url = format!("{}{}", self.api_base, path);
        let mut request = self.http.request(method.clone(), &url).headers(headers);
        request = if *method == Method::GET || *method == Method::DELETE {
            request.query(params)
        } else {
            request.form(params)
        };
        self.finish(method, path, request).await
    }

    /// POST a `multipart/form-data` upload: the `fields` first, then one file part (PVE reads
    /// the file last). Never retried; a 401 of an expired ticket is sent again once (the request
    /// was not executed).
    pub(crate) async fn post_multipart<T: DeserializeOwned>(
        &self,
        path: &str,
        fields: &[(&str, String)],
        file_field: &str,
        file_name: &str,
        bytes: &[u8],
    ) -> Result<T, Error> {
        let method = Method::POST;
        let mut relogged = false;
        loop {
            let headers = self.auth_headers(&method).await?;
            let mut form = reqwest::multipart::Form::new();
            for (k, v) in fields {
                form = form.text(k.to_string(), v.clone());
            }
            let part = reqwest::multipart::Part::bytes(bytes.to_vec())
                .file_name(file_name.to_string())
                .mime_str("application/octet-stream")
                .map_err(|e| transport_error(&method, path, &e))?;
            form = form.part(file_field.to_string(), part);
            let url = format!("{}{}", self.api_base, path);
            let request = self
                .http
                .request(method.clone(), &url)
                .headers(headers)
                .multipart(form);
            match self.finish(&method, path, request).await {
                Err(Error::Api { status: 401, .. }) if !relogged && self.uses_ticket() => {
                    relogged = true;
                    self.drop_session().await;
                }
                other => return Ok(other?.data),
            }
        }
    }

    /// Sends a built request; status, envelope.
    async fn finish<T: DeserializeOwned>(
        &self,
        method: &Method,
        path: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<Answer<T>, Error> {
        let started = Instant::now();
        let result = request.send().await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let response = match result {
            Ok(r) => r,
            Err(e) => {
                let err = transport_error(method, path, &e);
                tracing::debug!(%method, path, elapsed_ms, error = %err, "PVE request failed");
                self.metrics
                    .request(method.as_str(), path, None, started.elapsed());
                if err.is_overload() {
                    self.overloaded(node_of(path), started);
                }
                return Err(err);
            }
        };
        let status = response.status();
        tracing::debug!(%method, path, status = status.as_u16(), elapsed_ms, "PVE request");
        self.metrics.request(
            method.as_str(),
            path,
            Some(status.as_u16()),
            started.elapsed(),
        );
        let reason = response
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .and_then(|r| std::str::from_utf8(r.as_bytes()).ok())
            .map(str::to_string);
        let answer = match read_body(method, path, response).await {
            Ok(body) => envelope(method, path, status, reason, &body),
            Err(e) => Err(e),
        };
        if let Err(e) = &answer
            && e.is_overload()
        {
            self.overloaded(node_of(path), started);
        }
        answer
    }
}

/// The node a request's path names (`/nodes/{node}/...`), or "" for a cluster-wide one.
fn node_of(path: &str) -> &str {
    path.strip_prefix("/nodes/")
        .map(|rest| rest.split('/').next().unwrap_or_default())
        .unwrap_or_default()
}

/// The pause before retry `attempt` (1-based) of a read: exponential from 200 ms, capped at
/// 3 s, with "equal jitter" (half fixed, half random) so many readers that failed together
/// do not retry together.
fn retry_pause(attempt: u32) -> Duration {
    use ring::rand::SecureRandom;
    let ceiling = (200u64 << attempt.saturating_sub(1).min(10)).min(3000);
    let mut byte = [0u8; 2];
    let random = match ring::rand::SystemRandom::new().fill(&mut byte) {
        Ok(()) => u64::from(u16::from_le_bytes(byte)),
        Err(_) => u64::from(std::process::id()),
    };
    let half = ceiling / 2;
    Duration::from_millis(half + random % (half + 1))
}

fn retryable_read(e: &Error) -> bool {
    match e {
        Error::Transport { kind, .. } => *kind != TransportKind::Tls,
        Error::Api { status, .. } => matches!(status, 502..=504),
        _ => false,
    }
}

async fn read_body(
    method: &Method,
    path: &str,
    mut response: reqwest::Response,
) -> Result<Vec<u8>, Error> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(Error::Decode {
                        method: method.to_string(),
                        path: path.to_string(),
                        message: format!("the answer is larger than {MAX_BODY_BYTES} bytes"),
                    });
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(transport_error(method, path, &e)),
        }
    }
}

/// A successful answer: its `data`, decoded into the caller's type, and the envelope's
/// `total`, which listings with `start`/`limit` send beside `data`.
#[derive(Debug)]
pub(crate) struct Answer<T> {
    pub data: T,
    pub total: Option<u64>,
}

/// Unwraps PVE's envelope: `data` (and `total`) on success; `message` (else the status line's reason
/// phrase, as older PVE sends no body) and per-parameter `errors` on failure.
pub(crate) fn envelope<T: DeserializeOwned>(
    method: &Method,
    path: &str,
    status: StatusCode,
    reason: Option<String>,
    body: &[u8],
) -> Result<Answer<T>, Error> {
    if status.is_success() {
        // One pass: `data` is decoded from the body straight into the caller's type (a listing
        // of 10,000 VMs is neither built as a tree nor scanned twice).
        #[derive(serde::Deserialize)]
        struct Envelope<T> {
            // Absent or null: the caller's type is decoded from `null` below.
            data: Option<T>,
            // A number, or a number in a string (PVE's Perl sends either); anything else is
            // no total.
            #[serde(default)]
            total: Option<serde_json::Value>,
        }
        let decode_error = |message: String| Error::Decode {
            method: method.to_string(),
            path: path.to_string(),
            message,
        };
        // UTF-8 checked once for the whole body (quick on ASCII), not string by string.
        let decoded = match std::str::from_utf8(body) {
            Ok(text) => serde_json::from_str::<Envelope<T>>(text),
            Err(_) => serde_json::from_slice::<Envelope<T>>(body),
        };
        let env = match decoded {
            Ok(env) => env,
            // An object whose `data` is not what the caller expects: serde's words.
            Err(e) if serde_json::from_slice::<Envelope<serde::de::IgnoredAny>>(body).is_ok() => {
                return Err(decode_error(e.to_string()));
            }
            Err(_) => {
                return Err(decode_error(format!(
                    "HTTP {} without a JSON object body: {:?}",
                    status.as_u16(),
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                )));
            }
        };
        let data = match env.data {
            Some(data) => data,
            None => serde_json::from_str("null").map_err(|e| decode_error(e.to_string()))?,
        };
        return Ok(Answer {
            data,
            total: env.total.and_then(|t| match t {
                serde_json::Value::Number(n) => n.as_u64(),
                serde_json::Value::String(s) => s.trim().parse().ok(),
                _ => None,
            }),
        });
    }
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let object = parsed.as_ref().and_then(|v| v.as_object());
    let message = object
        .and_then(|o| o.get("message"))
        .and_then(|m| m.as_str())
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .or_else(|| {
            reason
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty())
        })
        .or_else(|| status.canonical_reason().map(str::to_string))
        .unwrap_or_else(|| "(no message)".to_string());
    let errors: BTreeMap<String, String> = object
        .and_then(|o| o.get("errors"))
        .and_then(|e| e.as_object())
        .map(|e| {
            e.iter()
                .map(|(k, v)| {
                    let text = v
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string());
                    (k.clone(), text.trim_end().to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    Err(Error::Api {
        method: method.to_string(),
        path: path.to_string(),
        status: status.as_u16(),
        message,
        errors,
    })
}

/// Classifies a reqwest failure, keeping the whole cause chain as text.
fn transport_error(method: &Method, path: &str, e: &reqwest::Error) -> Error {
    let mut text = e.to_string();
    let mut tls = false;
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if s.downcast_ref::<rustls::Error>().is_some()
            || s_text.contains("certificate")
            || s_text.contains("InvalidCertificate")
            || s_text.contains("handshake")
        {
            tls = true;
        }
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    let kind = if e.is_timeout() {
        TransportKind::Timeout
    } else if tls {
        TransportKind::Tls
    } else {
        TransportKind::Connect
    };
    if kind == TransportKind::Tls {
        text.push_str(
            " (TLS: the server's certificate is not trusted; set the site's ca_file to PVE's \
             pve-root-ca.pem or pin its fingerprint)",
        );
    }
    Error::Transport {
        method: method.to_string(),
        path: path.to_string(),
        kind,
        message: text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_retries_pause_longer_each_time_with_jitter() {
        for attempt in 1..=8 {
            let ceiling = (200u64 << (attempt - 1)).min(3000);
            for _ in 0..50 {
                let p = retry_pause(attempt).as_millis() as u64;
                assert!(
                    p >= ceiling / 2 && p <= ceiling,
                    "attempt {attempt}: {p} ms"
                );
            }
        }
        let pauses: std::collections::BTreeSet<_> = (0..50).map(|_| retry_pause(4)).collect();
        assert!(pauses.len() > 1, "jittered: {pauses:?}");
    }

    #[test]
    fn success_unwraps_data() {
        let v: Answer<String> = envelope(
            &Method::GET,
            "/cluster/nextid",
            StatusCode::OK,
            None,
            br#"{"data":"100"}"#,
        )
        .unwrap();
        assert_eq!(v.data, "100");
        let v: Answer<serde_json::Value> = envelope(
            &Method::PUT,
            "/x",
            StatusCode::OK,
            None,
            br#"{"data":null}"#,
        )
        .unwrap();
        assert_eq!(v.data, serde_json::Value::Null);
        // No `data` at all is null too.
        let v: Answer<Option<u32>> =
            envelope(&Method::PUT, "/x", StatusCode::OK, None, b"{}").unwrap();
        assert_eq!(v.data, None);
        assert_eq!(v.total, None);
        // A task log's `total` (a number, or a number in a string).
        for body in [
            &br#"{"data":[],"total":6012}"#[..],
            br#"{"data":[],"total":"6012"}"#,
        ] {
            let v: Answer<Vec<u8>> =
                envelope(&Method::GET, "/log", StatusCode::OK, None, body).unwrap();
            assert_eq!(v.total, Some(6012));
        }
    }

    #[test]
    fn errors_keep_pves_words() {
        // PVE 8: message in the body and per-parameter errors.
        let e = envelope::<()>(
            &Method::POST,
            "/nodes/pve1/qemu",
            StatusCode::BAD_REQUEST,
            Some("Parameter verification failed.".into()),
            br#"{"data":null,"message":"Parameter verification failed.\n","errors":{"name":"invalid format - value does not look like a valid DNS name\n"}}"#,
        )
        .unwrap_err();
        match &e {
            Error::Api {
                status,
                message,
                errors,
                ..
            } => {
                assert_eq!(*status, 400);
                assert_eq!(message, "Parameter verification failed.");
                assert_eq!(
                    errors["name"],
                    "invalid format - value does not look like a valid DNS name"
                );
            }
            other => panic!("{other:?}"),
        }
        // Older PVE: no body at all, the text only in the status line.
        let e = envelope::<()>(
            &Method::POST,
            "/nodes/pve1/qemu/100/status/start",
            StatusCode::INTERNAL_SERVER_ERROR,
            Some("VM is locked (clone)".into()),
            b"",
        )
        .unwrap_err();
        assert_eq!(e.pve_message(), "VM is locked (clone)");
        assert!(e.is_lock());
        // A 401 without a body or a useful reason.
        let e = envelope::<()>(
            &Method::GET,
            "/version",
            StatusCode::UNAUTHORIZED,
            None,
            b"",
        )
        .unwrap_err();
        assert_eq!(e.pve_message(), "Unauthorized");
        assert_eq!(e.category(), crate::category::Category::AuthenticationError);
        // A proxy's HTML page on 596.
        let e = envelope::<()>(
            &Method::GET,
            "/nodes/pve2/qemu/100/config",
            StatusCode::from_u16(596).unwrap(),
            Some("Connection timed out".into()),
            b"<html>timeout</html>",
        )
        .unwrap_err();
        assert_eq!(e.category(), crate::category::Category::NodeUnhealthy);
        assert_eq!(e.pve_message(), "Connection timed out");
    }

    #[test]
    fn a_success_without_json_is_a_decode_error() {
        let e =
            envelope::<()>(&Method::GET, "/version", StatusCode::OK, None, b"<html>").unwrap_err();
        assert!(matches!(e, Error::Decode { .. }));
        assert!(e.to_string().contains("without a JSON object body"), "{e}");
        // A JSON object whose `data` is not of the expected shape.
        let e = envelope::<Vec<u32>>(
            &Method::GET,
            "/cluster/resources",
            StatusCode::OK,
            None,
            br#"{"data":{"vmid":1}}"#,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Decode { .. }));
        assert!(e.to_string().contains("invalid type: map"), "{e}");
        // Without data, the caller's type must take `null`.
        let e = envelope::<Vec<u32>>(&Method::GET, "/x", StatusCode::OK, None, b"{}").unwrap_err();
        assert!(e.to_string().contains("invalid type: null"), "{e}");
    }
}
