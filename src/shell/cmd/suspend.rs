//! `proxsync suspend` and `proxsync resume`: hands off a spec's VM (or every spec's) at
//! runtime, kept in the state database, as `flux suspend` does. Written directly when no
//! daemon runs, else through the daemon's control socket (it holds the database).

use std::process::ExitCode;

use crate::config::Config;
use crate::shell::control::{self, SuspendRequest};
use crate::store::{SUSPEND_ALL, Store, Suspension};

/// The longest `--reason`: it goes into every status file of the spec, and through the socket
/// in one short line.
pub(crate) const MAX_REASON: usize = 200;

/// Whether a name is a spec of the configured source (the command line's check, handed in).
pub(crate) type KnownSpec = fn(&Config, &str) -> Result<(), String>;

/// `proxsync suspend NAME|--all [--reason TEXT]` (`name` `None`: every spec).
pub(crate) fn suspend(
    config: &Config,
    name: Option<String>,
    reason: Option<String>,
    known_spec: KnownSpec,
) -> ExitCode {
    let name = name.unwrap_or_else(|| SUSPEND_ALL.to_string());
    if let Err(e) = check(config, &name, reason.as_deref(), known_spec) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let reason = reason.filter(|r| !r.trim().is_empty());
    let req = SuspendRequest {
        name: name.clone(),
        reason: reason.clone(),
    };
    // Written here, the command says who and when; through the daemon, the daemon does
    // (the socket's peer uid, its own clock).
    let direct = Suspension {
        by: who(),
        reason,
        at_ms: crate::util::clock::now_ms(),
        from_git: false,
    };
    let done = with_store(
        config,
        |store| store.suspend(&name, &direct).map(|()| String::new()),
        |rt| rt.block_on(control::suspend_through_daemon(&config.state_dir, &req)),
    );
    match done {
        Ok(_) => {
            println!(
                "{} suspended: no action is taken for {} until `proxsync resume {}`; still \
                 observed and reported",
                control::shown(&name),
                match name.as_str() {
                    SUSPEND_ALL => "any VM",
                    _ => "its VM",
                },
                match name.as_str() {
                    SUSPEND_ALL => "--all",
                    other => other,
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `proxsync resume NAME|--all`.
pub(crate) fn resume(config: &Config, name: Option<String>) -> ExitCode {
    let name = name.unwrap_or_else(|| SUSPEND_ALL.to_string());
    if !control::suspendable(&name) {
        eprintln!("error: {name:?} is not a spec name");
        return ExitCode::FAILURE;
    }
    let done = with_store(
        config,
        |store| (store.resume(&name)).map(|lifted| control::resumed_words(&name, &lifted)),
        |rt| rt.block_on(control::resume_through_daemon(&config.state_dir, &name)),
    );
    match done {
        Ok(words) => {
            println!("{words}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A suspension of `name` may be recorded: a spec of the source (or a removed spec whose
/// record remains: its removal is held), or every spec; a reason that fits a status line.
fn check(
    config: &Config,
    name: &str,
    reason: Option<&str>,
    known_spec: KnownSpec,
) -> Result<(), String> {
    if let Some(r) = reason {
        if r.chars().count() > MAX_REASON {
            return Err(format!(
                "--reason is {} characters; at most {MAX_REASON}",
                r.chars().count()
            ));
        }
        if r.chars().any(char::is_control) {
            return Err("--reason must be one line without control characters".into());
        }
    }
    // The request goes to the daemon in one line of at most 1024 bytes.
    let line = name.len() + reason.map_or(0, str::len) + 200;
    if line > 1000 {
        return Err("--reason is too long for the daemon's request line; shorten it".into());
    }
    if name == SUSPEND_ALL {
        return Ok(());
    }
    if !control::suspendable(name) {
        return Err(format!("{name:?} is not a spec name"));
    }
    match known_spec(config, name) {
        Ok(()) => Ok(()),
        Err(e) => {
            let recorded = crate::store::read_specs_snapshot(&config.state_dir)
                .is_some_and(|records| records.contains_key(name));
            if recorded { Ok(()) } else { Err(e) }
        }
    }
}

/// Writes in the state database when no daemon holds it (`direct`), else asks the daemon
/// (`through_daemon`).
fn with_store(
    config: &Config,
    direct: impl FnOnce(&Store) -> Result<String, crate::store::StateError>,
    through_daemon: impl FnOnce(&tokio::runtime::Runtime) -> Result<String, String>,
) -> Result<String, String> {
    use crate::shell::instance_lock::NotLocked;
    match crate::shell::instance_lock::InstanceLock::acquire(&config.state_dir) {
        Ok(_lock) => {
            let store = Store::open(&config.state_dir).map_err(|e| e.to_string())?;
            direct(&store).map_err(|e| e.to_string())
        }
        Err(NotLocked::Failed(why)) => Err(why),
        Err(NotLocked::Held(_)) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the async runtime: {e}"))?;
            through_daemon(&rt)
        }
    }
}

/// Who runs the command, when it writes the database itself (it can open it, so it is trusted
/// as far as the database is): the user behind `sudo`, else the login name. Through the
/// daemon this is not sent: the daemon names the socket's peer uid.
fn who() -> String {
    ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
        .map(|u| u.chars().filter(|c| !c.is_control()).take(64).collect())
        .unwrap_or_else(|| "unknown".to_string())
}
