//! The commands' bodies, one module each (`proxsync <command>`); what they share: loading
//! the config and the specs, the runtime, the state directory's lock, the daemon's line.

pub(crate) mod accept;
pub(crate) mod adopt;
pub(crate) mod doctor;
pub(crate) mod events;
pub(crate) mod import;
pub(crate) mod inventory;
pub(crate) mod plan;
pub(crate) mod reconcile;
pub(crate) mod run;
pub(crate) mod schema;
pub(crate) mod status;
pub(crate) mod suspend;
pub(crate) mod validate;
pub(crate) mod wait;

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::{self, Config};

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        })
}

pub(crate) use crate::shell::planning::{Inputs, read_inputs_saying};

/// Loads the config and the specs (from `--specs`, else the configured source, verified when
/// `[source] verify` is set).
pub(crate) fn load_inputs(
    config_path: Option<PathBuf>,
    spec_paths: &[PathBuf],
    purpose: crate::source::Use,
) -> Result<Inputs, ExitCode> {
    read_inputs(load_config(config_path)?, spec_paths, purpose)
}

/// [`load_inputs`] with the config loaded already.
pub(crate) fn read_inputs(
    config: Config,
    spec_paths: &[PathBuf],
    purpose: crate::source::Use,
) -> Result<Inputs, ExitCode> {
    let mut said = String::new();
    let read = read_inputs_saying(config, spec_paths, purpose, None, &mut said);
    eprint!("{said}");
    read.map_err(|()| ExitCode::FAILURE)
}

/// Takes the state directory for this process (one proxsync per state directory), or says
/// who holds it.
pub(crate) fn hold_state_dir(
    config: &Config,
) -> Result<crate::shell::instance_lock::InstanceLock, ExitCode> {
    crate::shell::instance_lock::InstanceLock::acquire(&config.state_dir).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    })
}

/// The daemon's state as its control socket answers (or not).
pub(crate) fn daemon_state(config: &Config) -> crate::shell::status_view::DaemonState {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let state = match rt {
        Ok(rt) => rt.block_on(crate::shell::control::daemon_state(&config.state_dir)),
        Err(e) => Err(e.to_string()),
    };
    match state {
        Ok(d) => crate::shell::status_view::DaemonState {
            running: true,
            pid: Some(d.pid),
            since: Some(crate::status::rfc3339(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(d.since_ms),
            )),
            reason: None,
        },
        Err(why) => crate::shell::status_view::DaemonState {
            running: false,
            pid: None,
            since: None,
            reason: Some(why),
        },
    }
}

/// `Daemon: running since ... (pid N); last cycle ...`, or `not running` and why, from the
/// control socket and `_summary.yaml`.
pub(crate) fn daemon_line_of(
    config: &Config,
    state: &crate::shell::status_view::DaemonState,
) -> String {
    let now = crate::util::clock::system_now();
    let ago = |t: std::time::SystemTime| {
        crate::shell::status_view::human(now.duration_since(t).unwrap_or_default()) + " ago"
    };
    let summary: Option<crate::status::SummaryFile> =
        std::fs::read_to_string(config.status_dir.join(crate::status::SUMMARY_FILE))
            .ok()
            .and_then(|text| serde_saphyr::from_str(&text).ok());
    let last = summary.as_ref().map(|s| {
        let when = crate::status::parse_rfc3339(&s.last_cycle)
            .map(ago)
            .unwrap_or_else(|| "at an unknown time".into());
        let outcome = match &s.source_error {
            Some(e) => format!("the source could not be read: {e}"),
            None => format!(
                "{} of {} spec(s) Ready, {} stalled",
                s.ready, s.specs, s.stalled
            ),
        };
        format!("last cycle {when}: {outcome}")
    });
    let since = state
        .since
        .as_deref()
        .and_then(crate::status::parse_rfc3339);
    match (state.running, since, state.pid) {
        (true, Some(since), Some(pid)) => format!(
            "Daemon:      running since {} ({}, pid {pid}); {}",
            crate::status::rfc3339(since),
            ago(since),
            last.unwrap_or_else(|| "no cycle finished yet".into())
        ),
        _ => format!(
            "Daemon:      not running ({}); {}",
            state.reason.as_deref().unwrap_or("it did not answer"),
            match last {
                Some(last) => format!("what follows is from its {last}"),
                None => "no cycle ever finished".into(),
            }
        ),
    }
}

/// Whether `name` is a spec of the configured source (valid or not) and this install's: a
/// reconcile of anything else would do nothing. When the source cannot be read here the
/// daemon is asked all the same.
pub(crate) fn known_spec(config: &Config, name: &str) -> Result<(), String> {
    let Ok(read) = crate::source::read_configured(config, crate::source::Use::Inspect) else {
        return Ok(());
    };
    spec_of(config, &read, name)
}

/// [`known_spec`] in specs already read.
pub(crate) fn spec_of(
    config: &Config,
    read: &crate::source::ReadSpecs,
    name: &str,
) -> Result<(), String> {
    let set = &read.specs;
    if let Some(spec) = set.specs.iter().find(|s| s.name == name) {
        if !config.selects(&spec.labels) {
            return Err(format!(
                "spec {name} is outside [source] selector: another install reconciles it"
            ));
        }
        return Ok(());
    }
    if set.invalid_names().contains(name) {
        return Ok(());
    }
    let names: Vec<&str> = set.specs.iter().map(|s| s.name.as_str()).collect();
    let hint = crate::spec::closest(name, names.iter().copied())
        .map(|n| format!("; did you mean {n}?"))
        .unwrap_or_default();
    Err(format!(
        "no such spec: {name} (no spec in the source at commit {} has metadata.name {name}{hint})",
        &read.commit[..read.commit.len().min(12)]
    ))
}

/// Loads the config (`--config`, else the default path); on error says so on stderr.
pub(crate) fn load_config(config_path: Option<PathBuf>) -> Result<Config, ExitCode> {
    let path = config_path.unwrap_or_else(default_config_path);
    Config::load(&path).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    })
}

/// The default config path, used by subcommands that need a config.
pub(crate) fn default_config_path() -> PathBuf {
    PathBuf::from(config::DEFAULT_PATH)
}
