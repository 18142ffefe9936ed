//! `proxsync run`: the event loop (docs/cli.md and docs/concepts.md).
//!
//! Triggers: a push that moves the branch (filesystem notifications on the repository's
//! refs, no polling), a remote fetched every `interval` (with jitter), the resync interval, the
//! earliest backoff deadline, `proxsync reconcile` requests on the control socket, a verified
//! webhook (`shell::web`: a push to a remote, fetched at once rather than at the next
//! interval), and SIGHUP
//! (reload the config; a broken one is refused and the old one kept). Cycles run one at a
//! time, so no spec is ever reconciled twice at once. systemd hears `READY=1` after the first
//! full observation, a one-line `STATUS=` after every cycle, `WATCHDOG=1` from the loop itself
//! (also while a long cycle waits for tasks), and `RELOADING=1` + `MONOTONIC_USEC` on SIGHUP.
//! SIGTERM stops gracefully: no new action starts, task waits end (their UPIDs are recorded),
//! and the cycle returns before the process exits.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use sd_notify::NotifyState;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::config::Config;
use crate::engine::{CycleReport, Engine, EngineError};
use crate::execute::now_ms;
use crate::shell::control;
use crate::shell::instance_lock::InstanceLock;
use crate::source::Source;
use crate::status::RequestSummary;
use crate::telemetry::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Engine(#[from] EngineError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Source(#[from] crate::source::SourceError),
    #[error("{0}")]
    Notify(#[from] crate::telemetry::notify::NotifyError),
    /// The metrics listener could not bind (the message names `[metrics] listen`).
    #[error("{0}")]
    Metrics(String),
    /// The web listener could not bind, or a receiver's secret cannot be read (the message
    /// names the key).
    #[error("{0}")]
    Web(String),
    /// Another process holds the state directory (`instance_lock`).
    #[error("{0}")]
    InUse(String),
}

/// How long after a cycle the memory freed since is given back again: by then the sites'
/// connections idle since the cycle are closed (`pve::POOL_IDLE`, checked as often), and their
/// read buffers (a listing's each, 8 MiB at 50,000 specs) are free.
const TRIM_AFTER: Duration = Duration::from_secs(crate::pve::POOL_IDLE.as_secs() * 2 + 2);

/// What the daemon reacts to; every event but `Watchdog`, `TrimDue` and `Shutdown` runs one
/// cycle.
#[derive(Debug)]
enum Event {
    /// A ref of the repository moved (a push; a burst of updates settled into one event), or a
    /// verified webhook said a push came (a remote source is then fetched at once).
    RefChanged,
    /// A remote source is due to be fetched (`interval`, jittered).
    FetchDue,
    /// The resync interval ran out with nothing else happening.
    ResyncDue,
    /// The earliest backoff deadline still ahead came.
    BackoffDue,
    /// A cycle that could not do all its work is tried again ([`FollowUp`]).
    FollowUpDue,
    /// `proxsync reconcile [NAME]` on the control socket.
    Request(control::Request),
    /// SIGHUP: reload the config.
    Reload,
    /// Time to tell systemd's watchdog that the loop is alive.
    Watchdog,
    /// The sites' connections idle since the last cycle are closed: their buffers go back to
    /// the system ([`TRIM_AFTER`]).
    TrimDue,
    /// The shutdown future completed (SIGTERM or SIGINT, from `cli`).
    Shutdown,
}

/// Whether the loop goes on after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

/// The pauses before the cycles that follow a push whose cycle could not do all its work:
/// the source could not be read, the cycle failed, or a site could not be reached (a flood of
/// connections taking every descriptor, a network blip). Then the resync takes over.
const FOLLOW_UP_PAUSES: [Duration; 5] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
];

/// The next follow-up cycle: when, and which of [`FOLLOW_UP_PAUSES`] it waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FollowUp {
    at: Instant,
    attempt: usize,
}

impl FollowUp {
    /// The follow-up after a cycle: `incomplete` says it could not do all its work; `fresh`
    /// that a push (or a failed read of the source) started a new series; `last` is the
    /// follow-up this cycle was, if any. A series ends with a complete cycle or after the
    /// last pause.
    fn after(
        last: Option<FollowUp>,
        incomplete: bool,
        fresh: bool,
        now: Instant,
    ) -> Option<FollowUp> {
        if !incomplete {
            return None;
        }
        let attempt = match last {
            _ if fresh => 0,
            Some(l) => l.attempt + 1,
            None => return None,
        };
        FOLLOW_UP_PAUSES.get(attempt).map(|pause| FollowUp {
            at: now + *pause,
            attempt,
        })
    }
}

/// `Daemon::engine` is `None` only inside `Daemon::reopen`, which never returns leaving it so
/// (a failure there ends the daemon).
const ENGINE_OPEN: &str = "the engine is open outside Daemon::reopen";

/// The running daemon: what the loop keeps between events.
struct Daemon {
    /// One daemon per state directory, held from start to exit (across reloads).
    _lock: InstanceLock,
    config_path: PathBuf,
    config: Config,
    /// Closed (`None`) only while a reload swaps the database handle.
    engine: Option<Engine>,
    source: Source,
    /// The last good commit and its checked specs.
    desired: Option<(String, crate::spec::SpecSet)>,
    /// Read the specs at the next cycle even if the branch did not move (the config changed).
    force_read: bool,
    /// When a remote source is fetched next.
    next_fetch: Instant,
    /// When a cycle runs with no other trigger: the resync, and the earliest backoff deadline
    /// still ahead (never sooner than 1 s after a cycle).
    resync_at: Instant,
    backoff_at: Option<Instant>,
    /// A cycle after a push could not do all its work: the next try.
    follow_up: Option<FollowUp>,
    /// When to give the memory of the last cycle's connections back ([`TRIM_AFTER`]).
    trim_at: Option<Instant>,
    ready_sent: bool,
    /// Raised once the shutdown future completed; the engine watches it too, so a running
    /// cycle starts no new action and its task waits end.
    stop: watch::Receiver<bool>,
    /// Ref notifications from `watcher` and the webhooks (the sender is kept for the watcher
    /// of a reload).
    refs_tx: mpsc::Sender<()>,
    refs: mpsc::Receiver<()>,
    watcher: Option<notify::RecommendedWatcher>,
    requests: mpsc::Receiver<control::Request>,
    control: tokio::task::JoinHandle<()>,
    hangup: Signal,
    /// Half of systemd's `WATCHDOG_USEC`, when it asks for one.
    watchdog: Option<Duration>,
    watchdog_tick: tokio::time::Interval,
    /// The `[[notify]]` targets, when any: each cycle's transitions are queued for them.
    notifier: Option<crate::telemetry::notify::Notifier>,
    /// The refused tip last notified (`[source] verify`): a refusal is sent once per commit.
    refusal_notified: Option<String>,
    /// Counted across reloads; off without `[metrics] listen`.
    metrics: Metrics,
    metrics_server: Option<crate::telemetry::metrics::Server>,
    /// The web listener (`[web]`): the webhook receivers.
    web: Option<crate::shell::web::Web>,
}

fn notify(states: &[NotifyState]) {
    // Outside systemd there is no NOTIFY_SOCKET and this does nothing.
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

/// A future that completes on SIGTERM or SIGINT, to hand to [`run`]. The handlers are
/// installed here (call it inside the runtime), so a signal that comes early is not lost.
pub(crate) fn shutdown_signals() -> std::io::Result<impl Future<Output = ()>> {
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

/// Runs the daemon until `shutdown` completes, then stops gracefully: a running cycle starts
/// no new action, records its task UPIDs and returns before this does.
pub async fn run(
    config_path: PathBuf,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut daemon = Daemon::start(config_path, stop_rx)?;
    // The one place shutdown is heard: it raises the flag that both the wait for the next
    // event and the running cycle watch. This future never completes, so `serve` ends the
    // select.
    let raise = async move {
        shutdown.await;
        let _ = stop_tx.send(true);
        std::future::pending::<()>().await
    };
    let result = tokio::select! {
        r = daemon.serve() => r,
        () = raise => Ok(()),
    };
    daemon.finish(result.is_ok());
    result
}

impl Daemon {
    /// Loads the config, opens the engine, and starts the ref watch, the control socket, the
    /// SIGHUP handler and the watchdog timer.
    fn start(config_path: PathBuf, stop: watch::Receiver<bool>) -> Result<Daemon, DaemonError> {
        let config = Config::load(&config_path)?;
        let lock = InstanceLock::acquire(&config.state_dir)
            .map_err(|e| DaemonError::InUse(e.to_string()))?;
        let (metrics, metrics_server) = match &config.metrics {
            Some(listen) => {
                let metrics = Metrics::new(&config.install_id);
                let server = crate::telemetry::metrics::serve(listen, metrics.clone())
                    .map_err(DaemonError::Metrics)?;
                tracing::info!(listen = %listen, "serving metrics at /metrics");
                (metrics, Some(server))
            }
            None => (Metrics::off(), None),
        };
        let mut engine = Engine::with_meters(config.clone(), &|site| metrics.meter(site))?;
        engine.set_shutdown(stop.clone());
        let source = Source::new(&config);
        let (refs_tx, refs) = mpsc::channel(64);
        let watcher = watch_source(&source, refs_tx.clone())?;
        let web = match &config.web {
            Some(web) => {
                let routes = crate::shell::web::Routes::load(&config).map_err(DaemonError::Web)?;
                let server =
                    crate::shell::web::serve(web, routes, refs_tx.clone(), metrics.clone())
                        .map_err(DaemonError::Web)?;
                tracing::info!(
                    listen = %web.listen,
                    receivers = config.receivers.len(),
                    "serving webhooks at /hooks/<receiver>"
                );
                Some(server)
            }
            None => None,
        };
        let (request_tx, requests) = mpsc::channel(16);
        let planner = planner(&config_path, &config, &source, &engine);
        let control = control::serve(
            &config.state_dir,
            request_tx,
            Some(engine.store()),
            Some(planner),
        )?;
        let hangup = signal(SignalKind::hangup())?;
        let notifier = crate::telemetry::notify::Notifier::start(&config)?;
        let watchdog = sd_notify::watchdog_enabled().map(|d| d / 2);
        let mut watchdog_tick =
            tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
        watchdog_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tracing::info!(config = %config_path.display(), "proxsync daemon starting");
        for warning in config.warnings() {
            tracing::warn!("{warning}");
        }
        let now = Instant::now();
        Ok(Daemon {
            _lock: lock,
            config_path,
            config,
            engine: Some(engine),
            source,
            desired: None,
            force_read: false,
            next_fetch: now,
            resync_at: now,
            backoff_at: None,
            follow_up: None,
            trim_at: None,
            ready_sent: false,
            stop,
            refs_tx,
            refs,
            watcher,
            requests,
            control,
            hangup,
            watchdog,
            watchdog_tick,
            notifier,
            refusal_notified: None,
            metrics,
            metrics_server,
            web,
        })
    }

    /// The loop: a first cycle at once, then one event at a time until one says stop.
    async fn serve(&mut self) -> Result<(), DaemonError> {
        let mut flow = self.cycle(None, false).await?;
        while flow == Flow::Continue {
            let event = self.next_event().await;
            flow = self.handle(event).await?;
        }
        Ok(())
    }

    /// Waits for the next event; the only place the loop waits between cycles.
    async fn next_event(&mut self) -> Event {
        let (wake, due) = self.next_deadline();
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => due,
            Some(()) = self.refs.recv() => {
                // Let a burst of ref updates settle: a push creates `<ref>.lock` and renames
                // it over the ref within milliseconds. An event that comes later brings one
                // more cycle, which finds nothing new.
                tokio::time::sleep(Duration::from_millis(25)).await;
                while self.refs.try_recv().is_ok() {}
                Event::RefChanged
            }
            Some(req) = self.requests.recv() => Event::Request(req),
            _ = self.hangup.recv() => Event::Reload,
            _ = self.stop.wait_for(|stop| *stop) => Event::Shutdown,
            _ = self.watchdog_tick.tick(), if self.watchdog.is_some() => Event::Watchdog,
        }
    }

    /// The earliest timer and the event it brings: resync, backoff deadline, remote fetch.
    fn next_deadline(&self) -> (Instant, Event) {
        let mut next = (self.resync_at, Event::ResyncDue);
        if let Some(at) = self.backoff_at
            && at < next.0
        {
            next = (at, Event::BackoffDue);
        }
        if self.source.is_remote() && self.next_fetch < next.0 {
            next = (self.next_fetch, Event::FetchDue);
        }
        if let Some(f) = self.follow_up
            && f.at < next.0
        {
            next = (f.at, Event::FollowUpDue);
        }
        if let Some(at) = self.trim_at
            && at < next.0
        {
            next = (at, Event::TrimDue);
        }
        next
    }

    async fn handle(&mut self, event: Event) -> Result<Flow, DaemonError> {
        match event {
            Event::Watchdog => {
                notify(&[NotifyState::Watchdog]);
                Ok(Flow::Continue)
            }
            Event::TrimDue => {
                self.trim_at = None;
                crate::shell::malloc::release_free_memory();
                Ok(Flow::Continue)
            }
            Event::Shutdown => {
                notify(&[NotifyState::Stopping]);
                Ok(Flow::Stop)
            }
            Event::RefChanged => {
                tracing::info!("source changed");
                // A remote's only ref notifications are webhooks: fetch now, not at the
                // interval (a local source's refs are read anyway).
                if self.source.is_remote() {
                    self.next_fetch = Instant::now();
                }
                self.cycle(None, true).await
            }
            // A due fetch happens at the start of the cycle.
            Event::FetchDue | Event::ResyncDue | Event::BackoffDue => self.cycle(None, false).await,
            // A full cycle: the one it follows may have taken the push's specs already.
            Event::FollowUpDue => self.cycle(None, false).await,
            Event::Request(req) => {
                tracing::info!(
                    spec = req.spec.as_deref().unwrap_or("(all)"),
                    "reconcile requested"
                );
                if self.source.is_remote() {
                    self.next_fetch = Instant::now();
                }
                self.cycle(Some(req), false).await
            }
            Event::Reload => {
                self.reload().await?;
                self.cycle(None, false).await
            }
        }
    }

    fn engine(&mut self) -> &mut Engine {
        self.engine.as_mut().expect(ENGINE_OPEN)
    }

    /// One cycle: the source brought up to date, a request applied, `Engine::reconcile` with
    /// the watchdog fed, then READY (the first time) and STATUS. Stops after a cycle during
    /// which shutdown came. A cycle after a push looks again only at the sites the push
    /// touched (`Engine::reconcile_after_push`).
    async fn cycle(
        &mut self,
        request: Option<control::Request>,
        after_push: bool,
    ) -> Result<Flow, DaemonError> {
        self.fetch_if_due().await;
        let read = self.read_source();
        if let Some(n) = &self.notifier {
            let failing = n.failing();
            self.engine().notify_failures = failing;
        }
        if let Some(req) = request {
            let engine = self.engine();
            if let Some(name) = &req.spec {
                engine.clear_backoff(name)?;
                if req.retry {
                    engine.retry_rolled_back(name)?;
                }
            }
            engine.last_request = Some(RequestSummary {
                spec: req.spec,
                handled_at: crate::util::clock::system_now(),
            });
        }
        let report = match &self.desired {
            Some((commit, specs)) => {
                let engine = self.engine.as_mut().expect(ENGINE_OPEN);
                let cycle = async {
                    if after_push {
                        engine.reconcile_after_push(specs, Some(commit)).await
                    } else {
                        engine.reconcile(specs, Some(commit)).await
                    }
                };
                tokio::pin!(cycle);
                let started = Instant::now();
                let result = loop {
                    tokio::select! {
                        r = &mut cycle => break r,
                        _ = self.watchdog_tick.tick(), if self.watchdog.is_some() => notify(&[NotifyState::Watchdog]),
                    }
                };
                let applied = result.as_ref().ok().map(|r| (r, commit.as_str()));
                self.metrics.cycle_finished(applied, started.elapsed());
                if *self.stop.borrow() {
                    tracing::info!("stopping after the current cycle (task UPIDs are recorded)");
                    notify(&[NotifyState::Stopping]);
                    return Ok(Flow::Stop);
                }
                match result {
                    Ok(report) => Some((report, commit.clone())),
                    Err(e) => {
                        tracing::error!(error = %e, "reconcile cycle failed");
                        None
                    }
                }
            }
            None => {
                // No commit to apply: every one refused by `[source] verify` says so, and a
                // source that could not be fetched or read says why.
                let engine = self.engine();
                if (engine.source_refusal.is_some() || engine.source_error.is_some())
                    && let Err(e) = self.engine().write_unapplied_summary()
                {
                    tracing::error!(error = %e, "cannot write the summary");
                }
                None
            }
        };
        let incomplete = !read
            || report.is_none()
            || report
                .as_ref()
                .is_some_and(|(r, _)| r.site_health.iter().any(|site| !site.reachable));
        self.follow_up = FollowUp::after(
            self.follow_up,
            incomplete,
            after_push || !read,
            Instant::now(),
        );
        if let Some(f) = self.follow_up {
            tracing::info!(
                attempt = f.attempt + 1,
                "the cycle could not do all its work: trying again soon"
            );
        }
        self.cycle_done(report.as_ref());
        Ok(Flow::Continue)
    }

    /// Tells systemd (READY after the first cycle, STATUS) and sets the timers of the next
    /// cycle: the resync, and a backoff deadline still ahead, at least 1 s away.
    fn cycle_done(&mut self, report: Option<&(CycleReport, String)>) {
        // Before STATUS: a reader of the RSS after a cycle sees it without the freed memory.
        crate::shell::malloc::release_free_memory();
        self.trim_at = Some(Instant::now() + TRIM_AFTER);
        if !self.ready_sent {
            // After the first full observation (or the first attempt at one).
            notify(&[NotifyState::Ready]);
            self.ready_sent = true;
        }
        let source_error = self.engine().source_error.as_ref().map(ToString::to_string);
        let rewound_from = (self.engine().source_rewind.as_ref()).map(|r| r.batch.from.clone());
        let line = status_line(report, source_error.as_deref(), rewound_from.as_deref());
        notify(&[NotifyState::Status(&line)]);
        if let (Some(n), Some((report, commit)), Some((_, specs)), Some(engine)) =
            (&mut self.notifier, report, &self.desired, &self.engine)
        {
            n.after_cycle(commit, specs, report, engine.statuses());
        }
        if let Some(n) = &self.notifier {
            self.metrics.notify_targets(&n.stats());
        }
        if let Some((report, _)) = report {
            tracing::info!(
                ready = report.ready,
                specs = report.specs,
                stalled = report.stalled,
                cycle_ms = report.cycle_ms,
                "cycle done"
            );
        }
        // A cycle that looked at some sites only does not put off the full one.
        if report.is_none_or(|(r, _)| r.scope.is_none()) {
            self.resync_at = Instant::now() + self.config.reconcile.resync_interval;
        }
        self.backoff_at = report.and_then(|(r, _)| r.next_attempt_ms).map(|next| {
            let until = Instant::now() + Duration::from_millis(next.saturating_sub(now_ms()));
            until.max(Instant::now() + Duration::from_secs(1))
        });
    }

    /// Fetches a remote source when due; on failure the last good commit stays in use.
    async fn fetch_if_due(&mut self) {
        if !self.source.is_remote() || Instant::now() < self.next_fetch {
            return;
        }
        let fetched = tokio::task::spawn_blocking({
            let cfg = self.config.clone();
            move || Source::new(&cfg).fetch_blocking()
        })
        .await
        .unwrap_or_else(|e| {
            Err(crate::source::SourceError {
                location: "git".into(),
                message: e.to_string(),
            })
        });
        if let Err(e) = &fetched {
            tracing::warn!(error = %e, "fetch failed; using the last good commit");
        }
        self.engine().source_error = fetched
            .err()
            .map(|e| crate::engine::SourceTrouble::Fetch(e.to_string()));
        self.next_fetch = Instant::now() + jittered(self.source.interval);
    }

    /// Walks the tree only when the branch moved (or the config changed); on failure, or when
    /// `[source] verify` refuses the tip, the last good (verified) commit stays in use. A
    /// refused tip is read again at each cycle (the keys may have changed). False when the
    /// read failed (a follow-up cycle reads again soon).
    fn read_source(&mut self) -> bool {
        // A refused tip is read again at each cycle, also once the branch is back at the
        // commit in use (the refusal then ends).
        let moved = match (self.source.tip(), &self.desired) {
            (Ok(tip), Some((commit, _))) => tip != *commit || self.source.refusal().is_some(),
            _ => true,
        };
        if !moved && !self.force_read {
            return true;
        }
        self.force_read = false;
        let started = Instant::now();
        let read = self.source.read();
        tracing::debug!(ms = started.elapsed().as_millis() as u64, "source read");
        let refusal = self.source.refusal().cloned();
        if let Some(r) = &refusal
            && self.refusal_notified.as_deref() != Some(r.commit.as_str())
        {
            if let Some(n) = &self.notifier {
                n.commit_refused(&r.commit, &r.reason);
            }
            self.refusal_notified = Some(r.commit.clone());
        }
        self.engine().source_refusal = refusal;
        if let Ok(r) = &read {
            if let (Some(rewind), Some(n)) = (&r.rewound, &self.notifier)
                && rewind.detected
            {
                n.commit_rewound(&rewind.batch.commit, &rewind.batch.from);
            }
            self.engine().source_rewind = r.rewound.clone();
        }
        let read = match read {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the source; using the last good commit");
                // A failed fetch is the cause to show (an empty mirror cannot be read either).
                let engine = self.engine();
                if !matches!(
                    engine.source_error,
                    Some(crate::engine::SourceTrouble::Fetch(_))
                ) {
                    engine.source_error = Some(crate::engine::SourceTrouble::Read(e.to_string()));
                }
                // Read again next time even if the branch has not moved (a reload's read).
                self.force_read = true;
                return false;
            }
        };
        let engine = self.engine();
        if matches!(
            engine.source_error,
            Some(crate::engine::SourceTrouble::Read(_))
        ) {
            engine.source_error = None;
        }
        let mut specs = read.specs;
        crate::engine::check_spec_sites(&self.config, &mut specs);
        // Once per commit read: what keeps the set incomplete, by path.
        for d in specs.errors().filter(|d| d.spec.is_none()) {
            tracing::warn!(file = %d.file, "{d}");
        }
        if !specs.is_complete() {
            tracing::warn!(
                commit = %read.commit,
                "the specs could not all be read: no spec counts as removed, so nothing is deleted until the errors above are fixed"
            );
        }
        self.desired = Some((read.commit, specs));
        true
    }

    /// SIGHUP: `RELOADING=1`, then the new config if it loads and checks, else the old one
    /// kept (loudly), then `READY=1`.
    async fn reload(&mut self) -> Result<(), DaemonError> {
        let mut states = vec![NotifyState::Reloading];
        if let Ok(m) = NotifyState::monotonic_usec_now() {
            states.push(m);
        }
        notify(&states);
        match reload_config(&self.config_path, &self.config) {
            Ok(new) => self.reopen(new).await?,
            Err(e) => {
                // Loudly, and keep going on the old config.
                tracing::error!(error = %e, "config reload refused; still running on the previous config");
                notify(&[NotifyState::Status(&format!("config reload refused: {e}"))]);
            }
        }
        notify(&[NotifyState::Ready]);
        Ok(())
    }

    /// Swaps in a checked config: the database closed and opened again on it (or back on the
    /// old config if that fails), the ref watch and the control socket restarted, and the
    /// source fetched and read at the next cycle (sites may have changed).
    async fn reopen(&mut self, new: Config) -> Result<(), DaemonError> {
        // The control server holds a handle on the database: wait until it is gone, then
        // close the database, so the new engine can open it.
        self.control.abort();
        let _ = (&mut self.control).await;
        self.engine = None;
        let mut engine = match open_engine(&new, &self.metrics).await {
            Ok(e) => {
                tracing::info!("config reloaded");
                self.config = new;
                e
            }
            Err(e) => {
                tracing::error!(error = %e, "config reload failed; back on the previous config");
                notify(&[NotifyState::Status(&format!("config reload failed: {e}"))]);
                open_engine(&self.config, &self.metrics).await?
            }
        };
        engine.set_shutdown(self.stop.clone());
        self.source = Source::new(&self.config);
        self.watcher = watch_source(&self.source, self.refs_tx.clone())?;
        let (request_tx, requests) = mpsc::channel(16);
        self.requests = requests;
        let planner = planner(&self.config_path, &self.config, &self.source, &engine);
        self.control = control::serve(
            &self.config.state_dir,
            request_tx,
            Some(engine.store()),
            Some(planner),
        )?;
        self.engine = Some(engine);
        // Checked by `reload_config`; on a failure now (a secret file removed since), the
        // daemon goes on without notifications rather than stop.
        self.notifier =
            crate::telemetry::notify::Notifier::reload(self.notifier.take(), &self.config)
                .unwrap_or_else(|e| {
                    tracing::error!(error = %e, "notifications stopped");
                    None
                });
        // Checked by `reload_config`; on a failure now (a secret file removed since), the
        // receivers keep their previous secrets.
        if let Some(web) = &self.web {
            match crate::shell::web::Routes::load(&self.config) {
                Ok(routes) => web.update(routes),
                Err(e) => tracing::error!(error = %e, "webhook receivers not reloaded"),
            }
        }
        self.next_fetch = Instant::now();
        self.force_read = true;
        Ok(())
    }

    /// Stops the ref watch and the control socket (removing its file); `stopped` logs a
    /// clean stop.
    fn finish(self, stopped: bool) {
        drop(self.watcher);
        // Stops the senders: what is still queued is not sent.
        drop(self.notifier);
        self.control.abort();
        let _ = std::fs::remove_file(control::socket_path(&self.config.state_dir));
        if let Some(server) = self.metrics_server {
            server.stop();
        }
        if let Some(web) = self.web {
            web.stop();
        }
        if stopped {
            tracing::info!("proxsync daemon stopped");
        }
    }
}

/// Opens the engine, waiting up to 10 s for the database: a control-socket connection still
/// being answered may hold the old engine's handle for a moment.
/// What the control socket plans with: this config, the source's parse cache and the
/// engine's records, handed down to the socket as the function that answers `plan <json>`.
fn planner(
    config_path: &std::path::Path,
    config: &Config,
    source: &Source,
    engine: &Engine,
) -> control::PlanFn {
    let planner = std::sync::Arc::new(crate::shell::planning::Planner {
        config_path: config_path.to_path_buf(),
        config: config.clone(),
        cache: source.shared_cache(),
        records: engine.records_handle(),
        // As the source just loaded them.
        identities: crate::shell::planning::identities(config),
        one_at_a_time: tokio::sync::Mutex::new(()),
    });
    std::sync::Arc::new(move |json, store| {
        Box::pin(crate::shell::planning::answer(planner.clone(), json, store))
    })
}

async fn open_engine(config: &Config, metrics: &Metrics) -> Result<Engine, EngineError> {
    let mut tries = 0;
    loop {
        match Engine::with_meters(config.clone(), &|site| metrics.meter(site)) {
            Err(EngineError::State(e)) if tries < 50 => {
                tries += 1;
                tracing::debug!(error = %e, "state database still held; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

/// Loads and checks a new config, including that every site's secret can be read and its
/// client built; nothing of the running daemon is touched.
fn reload_config(path: &std::path::Path, old: &Config) -> Result<Config, String> {
    let new = Config::load(path).map_err(|e| e.to_string())?;
    crate::engine::site_clients(&new).map_err(|e| e.to_string())?;
    crate::telemetry::notify::Notifier::check(&new).map_err(|e| e.to_string())?;
    if new.state_dir != old.state_dir {
        return Err(format!(
            "state_dir changed ({} -> {}): restart the service to move the state",
            old.state_dir.display(),
            new.state_dir.display()
        ));
    }
    if new.metrics != old.metrics {
        return Err(
            "[metrics] changed: restart the service to move or switch the metrics listener".into(),
        );
    }
    if new.web.as_ref().map(|w| &w.listen) != old.web.as_ref().map(|w| &w.listen) {
        return Err(
            "[web] listen changed: restart the service to move or switch the web listener".into(),
        );
    }
    crate::shell::web::Routes::load(&new)?;
    Ok(new)
}

/// The interval with ±10% jitter, so daemons fetching one remote spread out.
fn jittered(d: Duration) -> Duration {
    let nanos = crate::util::clock::system_now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    let permille = i64::from(nanos % 201) - 100;
    let ms = d.as_millis() as i64;
    Duration::from_millis((ms + ms * permille / 1000).max(1000) as u64)
}

/// `STATUS=` for systemd: specs, Ready, Stalled, sites, commit.
fn status_line(
    report: Option<&(CycleReport, String)>,
    source_error: Option<&str>,
    rewound_from: Option<&str>,
) -> String {
    let mut line = match report {
        Some((r, commit)) => format!(
            "{} specs: {} Ready, {} Stalled, {} backing off; sites {}/{} healthy; commit {}",
            r.specs,
            r.ready,
            r.stalled,
            r.backing_off,
            r.sites_healthy,
            r.sites,
            &commit[..commit.len().min(12)]
        ),
        None => "no specs read yet".to_string(),
    };
    if let Some(r) = report.and_then(|(r, _)| r.source_refusal.as_ref()) {
        line.push_str(&format!(
            "; refused commit {}: {}",
            &r.commit[..r.commit.len().min(12)],
            r.reason.chars().take(120).collect::<String>()
        ));
    }
    if let Some(from) = rewound_from {
        line.push_str(&format!("; rewound from {}", &from[..from.len().min(12)]));
    }
    if let Some(e) = source_error {
        line.push_str(&format!(
            "; source: {}",
            e.chars().take(120).collect::<String>()
        ));
    }
    // `systemctl status` shows this line to every user: no URL's userinfo in it.
    crate::redact::urls(&line).into_owned()
}

/// Watches the repository's refs: a push that moves a branch writes there.
fn watch_source(
    source: &Source,
    tx: mpsc::Sender<()>,
) -> Result<Option<notify::RecommendedWatcher>, DaemonError> {
    use notify::{RecursiveMode, Watcher};
    if source.is_remote() {
        return Ok(None);
    }
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(e) = event else { return };
        if matches!(e.kind, notify::EventKind::Access(_)) {
            return;
        }
        // A ref update (written as `<ref>.lock`, renamed over the ref) or a repack.
        let moves_a_ref = e.paths.iter().any(|p| {
            let s = p.to_string_lossy();
            s.contains("/refs/heads/") || s.ends_with("/packed-refs")
        });
        if moves_a_ref {
            let _ = tx.try_send(());
        }
    })
    .map_err(|e| std::io::Error::other(e.to_string()))?;
    for path in source.watch_paths() {
        let mode = if path.ends_with("heads") {
            RecursiveMode::Recursive
        } else {
            RecursiveMode::NonRecursive
        };
        if path.exists() {
            watcher.watch(&path, mode).map_err(|e| {
                std::io::Error::other(format!("cannot watch {}: {e}", path.display()))
            })?;
        }
    }
    Ok(Some(watcher))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incomplete_push_is_followed_up_a_few_times_with_growing_pauses() {
        let now = Instant::now();
        assert_eq!(FollowUp::after(None, false, true, now), None, "complete");
        assert_eq!(
            FollowUp::after(None, true, false, now),
            None,
            "a resync that could not reach a site waits for the next resync"
        );
        let mut f = FollowUp::after(None, true, true, now);
        let mut pauses = Vec::new();
        while let Some(next) = f {
            pauses.push(next.at - now);
            f = FollowUp::after(f, true, false, now);
        }
        assert_eq!(
            pauses,
            FOLLOW_UP_PAUSES.to_vec(),
            "then the resync takes over"
        );
        // A complete cycle ends the series; a new push starts one again.
        let first = FollowUp::after(None, true, true, now);
        let second = FollowUp::after(first, true, false, now);
        assert_eq!(second.map(|f| f.attempt), Some(1));
        assert_eq!(FollowUp::after(second, false, false, now), None);
        assert_eq!(
            FollowUp::after(second, true, true, now).map(|f| f.attempt),
            Some(0)
        );
    }

    #[test]
    fn the_status_line_never_shows_a_url_password() {
        let line = status_line(
            None,
            Some("source https://alice:PASSWORD@git.example/x.git: git fetch failed"),
            Some("0123456789abcdef0123456789abcdef01234567"),
        );
        assert_eq!(
            line,
            "no specs read yet; rewound from 0123456789ab; source: source \
             https://***@git.example/x.git: git fetch failed"
        );
    }

    #[test]
    fn a_reload_that_changes_metrics_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lab.token"), "secret").unwrap();
        let base = "[source]\npath = \"/srv/git/vms.git\"\n\n[[site]]\nname = \"lab\"\n\
                    endpoint = \"https://pve.example:8006\"\ntoken_id = \"proxsync@pve!gitops\"\n\
                    token_secret_file = \"lab.token\"\n";
        let path = dir.path().join("proxsync.toml");
        std::fs::write(&path, base).unwrap();
        let old = Config::load(&path).unwrap();
        assert!(
            reload_config(&path, &old).is_ok(),
            "the same config reloads"
        );
        std::fs::write(
            &path,
            format!("{base}\n[metrics]\nlisten = \"127.0.0.1:9847\"\n"),
        )
        .unwrap();
        let err = reload_config(&path, &old).unwrap_err();
        assert!(
            err.contains("[metrics]") && err.contains("restart"),
            "{err}"
        );
    }

    #[test]
    fn a_reload_may_change_receivers_but_not_the_web_listener() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lab.token"), "secret").unwrap();
        std::fs::write(dir.path().join("gh.secret"), "hook-key-0123456789").unwrap();
        let base = "[source]\npath = \"/srv/git/vms.git\"\n\n[[site]]\nname = \"lab\"\n\
                    endpoint = \"https://pve.example:8006\"\ntoken_id = \"proxsync@pve!gitops\"\n\
                    token_secret_file = \"lab.token\"\n[web]\nlisten = \"127.0.0.1:8787\"\n";
        let path = dir.path().join("proxsync.toml");
        std::fs::write(&path, base).unwrap();
        let old = Config::load(&path).unwrap();
        let receiver =
            "[[receiver]]\nname = \"gh\"\ntype = \"github\"\nsecret_file = \"gh.secret\"\n";
        std::fs::write(&path, format!("{base}{receiver}")).unwrap();
        assert!(reload_config(&path, &old).is_ok(), "a receiver added");
        std::fs::remove_file(dir.path().join("gh.secret")).unwrap();
        let err = reload_config(&path, &old).unwrap_err();
        assert!(err.contains("\"gh\"") && err.contains("gh.secret"), "{err}");
        std::fs::write(&path, base.replace("8787", "8788")).unwrap();
        let err = reload_config(&path, &old).unwrap_err();
        assert!(
            err.contains("[web] listen") && err.contains("restart"),
            "{err}"
        );
    }
}
