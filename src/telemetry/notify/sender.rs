//! One background task per target: a bounded queue (the oldest batch dropped and counted when
//! full), at most one message per `min_interval` (what queued meanwhile goes in it), and each
//! request retried with growing pauses on transport errors, 408, 429 and 5xx. Nothing here
//! ever waits on the reconcile loop or makes it wait: the loop only pushes onto the queue.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::events::Event;
use super::payload::{self, Message, Request};
use crate::config::{NotifyConfig, NotifyKind, Secret, Trust};

/// Batches a target's queue holds; one more drops the oldest.
pub const QUEUE_CAPACITY: usize = 64;

/// Pauses between attempts of one request: 1 s, doubling, at most 60 s; 7 attempts in all
/// (about two minutes), then the message is given up and counted as a failure.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_CAP: Duration = Duration::from_secs(60);
const ATTEMPTS: u32 = 7;

/// A response body is read up to this many bytes, for the error message.
const MAX_ERROR_BODY: usize = 2048;

pub use crate::report::TargetStats;

/// A configured target, ready to send: its secrets read and its HTTP client built.
pub struct Target {
    name: String,
    kind: NotifyKind,
    /// The URL is a secret for Slack (and may be for a webhook): never logged.
    url: Secret,
    /// The webhook's HMAC key or the forge's token.
    secret: Option<Secret>,
    repo: String,
    install_id: String,
    min_interval: Duration,
    http: reqwest::Client,
}

impl Target {
    /// Reads the target's secrets and builds its client; makes no request.
    pub(crate) fn build(cfg: &NotifyConfig, install_id: &str) -> Result<Target, String> {
        let url = cfg.load_url().map_err(|e| e.to_string())?;
        let secret = cfg.load_secret().map_err(|e| e.to_string())?;
        let fail = |m: String| format!("[[notify]] {:?}: {m}", cfg.name);
        let trust = match &cfg.ca_file {
            Some(p) => Trust::CaFile(p.clone()),
            None => Trust::SystemRoots,
        };
        let tls = crate::pve::tls::client_config(&trust).map_err(fail)?;
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .connect_timeout(cfg.timeout)
            .timeout(cfg.timeout)
            // A redirect could carry a token or a signed body elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("proxsync/", env!("CARGO_PKG_VERSION")));
        builder = match &cfg.proxy {
            Some(p) => builder
                .proxy(reqwest::Proxy::all(p).map_err(|e| fail(format!("proxy {p:?}: {e}")))?),
            None => builder.no_proxy(),
        };
        let http = builder
            .build()
            .map_err(|e| fail(format!("HTTP client: {e}")))?;
        Ok(Target {
            name: cfg.name.clone(),
            kind: cfg.kind,
            url,
            secret,
            repo: cfg.repo.clone().unwrap_or_default(),
            install_id: install_id.to_string(),
            min_interval: cfg.min_interval,
            http,
        })
    }

    /// The requests of one message.
    fn requests(&self, msg: &Message) -> Vec<Request> {
        let url = self.url.expose().trim_end_matches('/');
        let no_secret = Secret::new("");
        let secret = self.secret.as_ref().unwrap_or(&no_secret);
        match self.kind {
            NotifyKind::Webhook => {
                let now = crate::util::clock::system_now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                vec![payload::webhook(
                    url,
                    secret,
                    &self.install_id,
                    msg,
                    &message_id(),
                    now,
                )]
            }
            NotifyKind::Slack => vec![payload::slack(url, &self.install_id, msg)],
            NotifyKind::Gitea | NotifyKind::Github | NotifyKind::Gitlab => {
                payload::commit_statuses(self.kind, url, &self.repo, secret, &self.install_id, msg)
            }
        }
    }
}

/// 16 random bytes, hex (a fallback of the time if the system's randomness fails).
fn message_id() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        let nanos = crate::util::clock::system_now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes = nanos.to_be_bytes();
    }
    payload::hex(&bytes)
}

/// A target's queue, shared by the loop (which pushes) and the target's task.
#[derive(Default)]
struct Queue {
    batches: Mutex<(VecDeque<Vec<Event>>, u64)>,
    wake: Notify,
    stats: Mutex<TargetStats>,
}

/// A running target: its queue and its task (aborted when dropped).
pub struct TargetHandle {
    kind: NotifyKind,
    queue: Arc<Queue>,
    task: JoinHandle<()>,
}

impl TargetHandle {
    /// Starts the target's task (inside a tokio runtime).
    pub(crate) fn spawn(target: Target) -> TargetHandle {
        let queue = Arc::new(Queue::default());
        {
            let mut stats = lock(&queue.stats);
            stats.name = target.name.clone();
            stats.kind = target.kind.as_str();
        }
        let kind = target.kind;
        let task = tokio::spawn(run(target, queue.clone()));
        TargetHandle { kind, queue, task }
    }

    /// Queues the events this target takes (forges: commit states only); never waits. A full
    /// queue drops its oldest batch.
    pub(crate) fn push(&self, events: &[Event]) {
        let batch: Vec<Event> = events
            .iter()
            .filter(|e| !self.kind.is_forge() || e.commit_status().is_some())
            .cloned()
            .collect();
        if batch.is_empty() {
            return;
        }
        {
            let mut q = lock(&self.queue.batches);
            q.0.push_back(batch);
            if q.0.len() > QUEUE_CAPACITY {
                q.0.pop_front();
                q.1 += 1;
                lock(&self.queue.stats).dropped += 1;
            }
        }
        self.queue.wake.notify_one();
    }

    pub(crate) fn stats(&self) -> TargetStats {
        lock(&self.queue.stats).clone()
    }
}

impl Drop for TargetHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A poisoned lock only means another thread panicked holding it; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The target's loop: wait for a batch, keep to `min_interval`, send everything queued as
/// one message.
async fn run(target: Target, queue: Arc<Queue>) {
    let mut last_send: Option<Instant> = None;
    loop {
        let empty = lock(&queue.batches).0.is_empty();
        if empty {
            queue.wake.notified().await;
            continue;
        }
        if let Some(at) = last_send {
            tokio::time::sleep_until(at + target.min_interval).await;
        }
        let (batches, dropped) = {
            let mut q = lock(&queue.batches);
            (std::mem::take(&mut q.0), std::mem::take(&mut q.1))
        };
        let msg = coalesce(batches.into(), dropped);
        last_send = Some(Instant::now());
        let result = send_message(&target, &msg).await;
        let mut stats = lock(&queue.stats);
        match result {
            Ok(()) => {
                stats.sent += 1;
                stats.failing_since = None;
            }
            Err(error) => {
                tracing::warn!(target = %target.name, %error, "notification not delivered");
                stats.failures += 1;
                stats.last_error = Some(error);
                stats
                    .failing_since
                    .get_or_insert_with(crate::util::clock::system_now);
            }
        }
    }
}

/// The batches as one message: events in order, a commit's earlier states dropped for its
/// latest (a forge shows only the latest anyway).
pub fn coalesce(batches: Vec<Vec<Event>>, dropped: u64) -> Message {
    let mut events: Vec<Event> = batches.into_iter().flatten().collect();
    let mut seen = std::collections::HashSet::new();
    let mut keep = vec![true; events.len()];
    for (i, e) in events.iter().enumerate().rev() {
        if let Event::CommitState { commit, .. } = e
            && !seen.insert(commit.clone())
        {
            keep[i] = false;
        }
    }
    let mut flags = keep.into_iter();
    events.retain(|_| flags.next().unwrap_or(true));
    Message { events, dropped }
}

/// Sends each request of a message; the first that cannot be delivered fails the message.
async fn send_message(target: &Target, msg: &Message) -> Result<(), String> {
    for request in target.requests(msg) {
        deliver(target, &request).await?;
    }
    Ok(())
}

/// Why an attempt failed, and whether another attempt may succeed.
enum Failure {
    Transient(String),
    Permanent(String),
}

/// One request, with retries.
async fn deliver(target: &Target, request: &Request) -> Result<(), String> {
    let mut pause = RETRY_FIRST;
    for attempt in 1..=ATTEMPTS {
        match send_once(target, request).await {
            Ok(()) => return Ok(()),
            Err(Failure::Permanent(e)) => return Err(e),
            Err(Failure::Transient(e)) if attempt == ATTEMPTS => {
                return Err(format!("{e} (after {ATTEMPTS} attempts)"));
            }
            Err(Failure::Transient(e)) => {
                tracing::debug!(target = %target.name, attempt, error = %e, "notification failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_CAP);
            }
        }
    }
    Ok(())
}

async fn send_once(target: &Target, request: &Request) -> Result<(), Failure> {
    let mut builder = target.http.post(&request.url).body(request.body.clone());
    for h in &request.headers {
        let mut value = reqwest::header::HeaderValue::from_str(&h.value).map_err(|_| {
            Failure::Permanent(format!("header {}: characters not allowed in HTTP", h.name))
        })?;
        value.set_sensitive(h.sensitive);
        builder = builder.header(h.name, value);
    }
    // The URL may be the secret (Slack): errors are reported without it.
    let mut response = builder
        .send()
        .await
        .map_err(|e| Failure::Transient(e.without_url().to_string()))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    let text: String = String::from_utf8_lossy(&body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let text = super::clip_chars(text.trim(), 200);
    // GitLab refuses to post the state a status already has; that state is what we wanted.
    if target.kind == NotifyKind::Gitlab
        && status.as_u16() == 400
        && text.contains("Cannot transition status")
    {
        return Ok(());
    }
    let error = format!("HTTP {status}: {text}");
    let s = status.as_u16();
    if s == 408 || s == 429 || status.is_server_error() {
        Err(Failure::Transient(error))
    } else {
        Err(Failure::Permanent(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::notify::events::CommitState;

    fn state(commit: &str, state: CommitState) -> Event {
        Event::CommitState {
            commit: commit.into(),
            state,
            description: String::new(),
            stalled: vec![],
        }
    }

    #[test]
    fn coalescing_keeps_every_event_but_only_a_commits_last_state() {
        let msg = coalesce(
            vec![
                vec![
                    state("a", CommitState::Pending),
                    Event::SpecReady { spec: "x".into() },
                ],
                vec![state("b", CommitState::Pending)],
                vec![
                    state("a", CommitState::Success),
                    Event::SpecReady { spec: "x".into() },
                ],
            ],
            2,
        );
        assert_eq!(
            msg.events,
            vec![
                Event::SpecReady { spec: "x".into() },
                state("b", CommitState::Pending),
                state("a", CommitState::Success),
                Event::SpecReady { spec: "x".into() },
            ]
        );
        assert_eq!(msg.dropped, 2);
    }
}
