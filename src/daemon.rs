//! `proxsync run`: the event loop (PRODUCT.md §4 and §7).
//!
//! Triggers: a push that moves the branch (filesystem notifications on the repository's
//! refs, no polling), a remote fetched every `interval` (with jitter), the resync interval, the
//! earliest backoff deadline, `proxsync reconcile` requests on the control socket, and SIGHUP
//! (reload the config; a broken one is refused and the old one kept). Cycles run one at a
//! time, so no spec is ever reconciled twice at once. systemd hears `READY=1` after the first
//! full observation, a one-line `STATUS=` after every cycle, `WATCHDOG=1` from the loop itself
//! (also while a long cycle waits for tasks), and `RELOADING=1` + `MONOTONIC_USEC` on SIGHUP.
//! SIGTERM stops gracefully: no new action starts, task waits end (their UPIDs are recorded),
//! and the cycle returns before the process exits.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use sd_notify::NotifyState;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::config::Config;
use crate::control;
use crate::engine::{CycleReport, Engine, EngineError};
use crate::execute::now_ms;
use crate::source::Source;
use crate::status::RequestSummary;

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
}

/// Why a cycle runs (besides timers, requests and signals).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Trigger {
    SourceChanged,
}

fn notify(states: &[NotifyState]) {
    // Outside systemd there is no NOTIFY_SOCKET and this does nothing.
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

/// Runs the daemon until SIGTERM or SIGINT.
pub async fn run(config_path: PathBuf) -> Result<(), DaemonError> {
    let mut config = Config::load(&config_path)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut engine = Engine::new(config.clone())?;
    engine.set_shutdown(stop_rx.clone());
    let mut source = Source::new(&config);

    let (trigger_tx, mut triggers) = mpsc::channel::<Trigger>(64);
    let mut watcher = watch_source(&source, trigger_tx.clone())?;
    let (request_tx, mut requests) = mpsc::channel::<control::Request>(16);
    let mut control = control::serve(&config.state_dir, request_tx, Some(engine.store()))?;

    let mut hangup = signal(SignalKind::hangup())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let watchdog = sd_notify::watchdog_enabled().map(|d| d / 2);
    let mut watchdog_tick = tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
    watchdog_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    // The last good commit and its checked specs.
    let mut desired: Option<(String, crate::spec::SpecSet)> = None;
    let mut force_read = false;
    let mut next_fetch = Instant::now();
    let mut ready_sent = false;
    let mut pending_request: Option<control::Request> = None;
    tracing::info!(config = %config_path.display(), "proxsync daemon starting");

    loop {
        // Read the source (fetching a remote when due); keep the last good commit on failure.
        if source.is_remote() && Instant::now() >= next_fetch {
            let fetched = tokio::task::spawn_blocking({
                let cfg = config.clone();
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
            engine.source_error = fetched.err().map(|e| e.to_string());
            next_fetch = Instant::now() + jittered(source.interval);
        }
        // Walk the tree only when the branch moved (or the config changed).
        let moved = match (source.tip(), &desired) {
            (Ok(tip), Some((commit, _))) => tip != *commit,
            _ => true,
        };
        if moved || force_read {
            force_read = false;
            match source.read() {
                Ok(read) => {
                    if engine
                        .source_error
                        .as_deref()
                        .is_some_and(|e| e.contains("cannot read"))
                    {
                        engine.source_error = None;
                    }
                    let mut specs = read.specs;
                    crate::engine::check_spec_sites(&config, &mut specs);
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
                    desired = Some((read.commit, specs));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the source; using the last good commit");
                    engine.source_error = Some(format!("cannot read the source: {e}"));
                }
            }
        }
        if let Some(req) = pending_request.take() {
            if let Some(name) = &req.spec {
                engine.clear_backoff(name)?;
            }
            engine.last_request = Some(RequestSummary {
                spec: req.spec,
                handled_at: SystemTime::now(),
            });
        }

        // One cycle, with the watchdog fed and SIGTERM heard while it runs.
        let report = match &desired {
            Some((commit, specs)) => {
                let cycle = engine.reconcile(specs, Some(commit));
                tokio::pin!(cycle);
                let mut stopping = false;
                let result = loop {
                    tokio::select! {
                        r = &mut cycle => break r,
                        _ = watchdog_tick.tick(), if watchdog.is_some() => notify(&[NotifyState::Watchdog]),
                        _ = terminate.recv(), if !stopping => { stopping = true; let _ = stop_tx.send(true); }
                        _ = interrupt.recv(), if !stopping => { stopping = true; let _ = stop_tx.send(true); }
                    }
                };
                if stopping {
                    tracing::info!("stopping after the current cycle (task UPIDs are recorded)");
                    notify(&[NotifyState::Stopping]);
                    break;
                }
                match result {
                    Ok(report) => Some((report, commit.clone())),
                    Err(e) => {
                        tracing::error!(error = %e, "reconcile cycle failed");
                        None
                    }
                }
            }
            None => None,
        };
        if !ready_sent {
            // After the first full observation (or the first attempt at one).
            notify(&[NotifyState::Ready]);
            ready_sent = true;
        }
        let line = status_line(report.as_ref(), engine.source_error.as_deref());
        notify(&[NotifyState::Status(&line)]);
        if let Some((report, _)) = &report {
            tracing::info!(
                ready = report.ready,
                specs = report.specs,
                stalled = report.stalled,
                cycle_ms = report.cycle_ms,
                "cycle done"
            );
        }

        // Wait for the next trigger.
        let mut wake = Instant::now() + config.reconcile.resync_interval;
        if let Some(next) = report.as_ref().and_then(|(r, _)| r.next_attempt_ms) {
            let now = now_ms();
            let until = Instant::now() + Duration::from_millis(next.saturating_sub(now));
            wake = wake.min(until.max(Instant::now() + Duration::from_secs(1)));
        }
        if source.is_remote() {
            wake = wake.min(next_fetch);
        }
        let mut reload = false;
        let mut stop = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(wake.into()) => break,
                Some(t) = triggers.recv() => {
                    // Let a burst of ref updates settle (a push writes several files).
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    while triggers.try_recv().is_ok() {}
                    tracing::info!(trigger = ?t, "source changed");
                    break;
                }
                Some(req) = requests.recv() => {
                    tracing::info!(spec = ?req.spec, "reconcile requested");
                    if source.is_remote() {
                        next_fetch = Instant::now();
                    }
                    pending_request = Some(req);
                    break;
                }
                _ = hangup.recv() => { reload = true; break; }
                _ = terminate.recv() => { stop = true; break; }
                _ = interrupt.recv() => { stop = true; break; }
                _ = watchdog_tick.tick(), if watchdog.is_some() => notify(&[NotifyState::Watchdog]),
            }
        }
        if stop {
            notify(&[NotifyState::Stopping]);
            break;
        }
        if reload {
            let mut states = vec![NotifyState::Reloading];
            if let Ok(m) = NotifyState::monotonic_usec_now() {
                states.push(m);
            }
            notify(&states);
            match reload_config(&config_path, &config) {
                Ok(new) => {
                    // The control server holds a handle on the database: wait until it is
                    // gone, then close the database, so the new engine can open it.
                    control.abort();
                    let _ = control.await;
                    drop(engine);
                    engine = match open_engine(&new).await {
                        Ok(e) => {
                            tracing::info!("config reloaded");
                            config = new;
                            e
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "config reload failed; back on the previous config");
                            notify(&[NotifyState::Status(&format!("config reload failed: {e}"))]);
                            open_engine(&config).await?
                        }
                    };
                    engine.set_shutdown(stop_rx.clone());
                    source = Source::new(&config);
                    watcher = watch_source(&source, trigger_tx.clone())?;
                    let (request_tx, new_requests) = mpsc::channel::<control::Request>(16);
                    requests = new_requests;
                    control = control::serve(&config.state_dir, request_tx, Some(engine.store()))?;
                    next_fetch = Instant::now();
                    // Sites may have changed: read and check the specs again.
                    force_read = true;
                }
                Err(e) => {
                    // Loudly, and keep going on the old config.
                    tracing::error!(error = %e, "config reload refused; still running on the previous config");
                    notify(&[NotifyState::Status(&format!("config reload refused: {e}"))]);
                }
            }
            notify(&[NotifyState::Ready]);
        }
    }
    drop(watcher);
    control.abort();
    let _ = std::fs::remove_file(control::socket_path(&config.state_dir));
    tracing::info!("proxsync daemon stopped");
    Ok(())
}

/// Opens the engine, waiting up to 10 s for the database: a control-socket connection still
/// being answered may hold the old engine's handle for a moment.
async fn open_engine(config: &Config) -> Result<Engine, EngineError> {
    let mut tries = 0;
    loop {
        match Engine::new(config.clone()) {
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
    if new.state_dir != old.state_dir {
        return Err(format!(
            "state_dir changed ({} -> {}): restart the service to move the state",
            old.state_dir.display(),
            new.state_dir.display()
        ));
    }
    Ok(new)
}

/// The interval with ±10% jitter, so daemons fetching one remote spread out.
fn jittered(d: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    let permille = i64::from(nanos % 201) - 100;
    let ms = d.as_millis() as i64;
    Duration::from_millis((ms + ms * permille / 1000).max(1000) as u64)
}

/// `STATUS=` for systemd: specs, Ready, Stalled, sites, commit.
fn status_line(report: Option<&(CycleReport, String)>, source_error: Option<&str>) -> String {
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
    if let Some(e) = source_error {
        line.push_str(&format!(
            "; source: {}",
            e.chars().take(120).collect::<String>()
        ));
    }
    line
}

/// Watches the repository's refs: a push that moves a branch writes there.
fn watch_source(
    source: &Source,
    tx: mpsc::Sender<Trigger>,
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
            let _ = tx.try_send(Trigger::SourceChanged);
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
