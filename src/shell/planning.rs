//! Making a plan without acting, for `proxsync plan` and for the daemon's control socket
//! (`plan <json>`): the specs read (through the daemon's parse cache when it makes the plan),
//! the records and suspensions, the sites listed, the plan rendered. Changes nothing: no
//! commit is remembered, no first contact recorded, no marker key made.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::shell::control::{PlanRequest, Planned, one_line};
use crate::spec;

/// What a command works on: the config, the specs, and the commit they come from.
pub(crate) struct Inputs {
    pub config: Config,
    pub specs: spec::SpecSet,
    pub commit: Option<String>,
    /// The branch tip `[source] verify` refused (the specs are the last verified commit's).
    pub refused: Option<crate::source::verify::Refusal>,
    /// The commit does not descend from the commit applied before it.
    pub rewound: Option<crate::source::Rewind>,
}

/// `shell::cmd::read_inputs`, its warnings and diagnostics (one per line) added to `said` rather than
/// printed, the source read through `cache` when one is given (the daemon's, for a plan it
/// answers). `Err` when the specs could not be read (`said` says why).
pub(crate) fn read_inputs_saying(
    config: Config,
    spec_paths: &[PathBuf],
    purpose: crate::source::Use,
    cache: Option<std::sync::Arc<std::sync::Mutex<crate::source::ParseCache>>>,
    said: &mut String,
) -> Result<Inputs, ()> {
    use std::fmt::Write;
    let (mut specs, commit, refused, rewound) = if spec_paths.is_empty() {
        let read = match cache {
            Some(cache) => crate::source::inspect_with(&config, cache),
            None => crate::source::read_configured(&config, purpose),
        };
        match read {
            Ok(read) => (read.specs, Some(read.commit), read.refused, read.rewound),
            Err(e) => {
                let _ = writeln!(said, "error: {e}");
                return Err(());
            }
        }
    } else {
        let keyring = config.sops_keyring();
        let secrets = spec::Secrets::Decrypt(&keyring);
        (
            spec::load_paths_capped(spec_paths, secrets, config.source.max_specs),
            None,
            None,
            None,
        )
    };
    if let (Some(r), Some(commit)) = (&refused, &commit) {
        let _ = writeln!(
            said,
            "warning: commit {} refused: {}; using the last verified commit {commit}",
            r.commit, r.reason
        );
    }
    if let Some(r) = &rewound {
        let _ = writeln!(
            said,
            "warning: commit {} does not descend from {}, the commit applied before it: a \
             rewind; its deletes count as one batch against max_delete_fraction",
            r.batch.commit, r.batch.from
        );
    }
    crate::engine::check_spec_sites(&config, &mut specs);
    for d in &specs.diagnostics {
        let _ = writeln!(said, "{d}");
    }
    Ok(Inputs {
        config,
        specs,
        commit,
        refused,
        rewound,
    })
}

/// What the daemon plans with when asked (`plan <json>`): its config as loaded, the file it
/// was loaded from, and its source's parse cache.
pub(crate) struct Planner {
    pub config_path: PathBuf,
    pub config: crate::config::Config,
    pub cache: Arc<std::sync::Mutex<crate::source::ParseCache>>,
    /// The records the engine holds between cycles (none during a cycle: read from `store`).
    pub records: crate::engine::HeldRecords,
    /// What the age identity file held when the daemon's source loaded it ([`identities`]):
    /// a plan reads through the source's parse cache only while it holds the same.
    pub identities: Result<Vec<u8>, String>,
    /// One plan at a time: each holds a fleet's specs, records and views while it runs.
    pub one_at_a_time: tokio::sync::Mutex<()>,
}

/// What the age identity file the config names holds (a digest, or why it cannot be read):
/// the keyring read from it opens the same specs while this stays the same.
pub(crate) fn identities(config: &crate::config::Config) -> Result<Vec<u8>, String> {
    let Some(path) = config.sops_identity_path() else {
        return Ok(Vec::new());
    };
    let text = std::fs::read(&path).map_err(|e| e.to_string())?;
    Ok(ring::digest::digest(&ring::digest::SHA256, &text)
        .as_ref()
        .to_vec())
}

/// `plan <json>` ([`PlanRequest`]): the plan made here, with the
/// specs parsed already, for the config this daemon runs with; `error ...` for any other
/// config (or this one changed since it was loaded), which the asker then plans itself.
pub(crate) async fn answer(
    planner: Arc<Planner>,
    json: String,
    store: Arc<crate::store::Store>,
) -> String {
    let request: PlanRequest = match serde_json::from_str(&json) {
        Ok(r) => r,
        Err(e) => {
            return format!(
                "error unreadable plan request: {}\n",
                one_line(&e.to_string())
            );
        }
    };
    // One plan at a time, and none waits its turn: a waiting plan would hold a control
    // connection (a flood of them, every one: `reconcile` and `state` refused) while the one
    // under way lists slow sites. The asker plans itself meanwhile.
    let Ok(_one) = planner.one_at_a_time.try_lock() else {
        return "error the daemon is making another plan\n".to_string();
    };
    // The config as the daemon loaded it, if the asker's is that file and it is unchanged.
    let mine = planner.clone();
    let same = tokio::task::spawn_blocking(move || {
        let same_file = match (
            std::fs::canonicalize(&request.config),
            std::fs::canonicalize(&mine.config_path),
        ) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        let unchanged = same_file
            && crate::config::Config::load(&mine.config_path).is_ok_and(|c| c == mine.config);
        // The identity file rewritten since (a new key, not reloaded yet): the plan would
        // parse with other keys than the daemon, and leave what it parsed in its cache.
        let same_keys = unchanged && identities(&mine.config) == mine.identities;
        (unchanged, same_keys, request)
    })
    .await;
    let request = match same {
        Ok((true, true, request)) => request,
        Ok((false, _, _)) => {
            return "error not the config this daemon runs with, as it loaded it\n".to_string();
        }
        Ok((true, false, _)) => {
            return "error the age identity file changed since this daemon read it\n".to_string();
        }
        Err(e) => return format!("error {}\n", one_line(&e.to_string())),
    };
    let started = std::time::Instant::now();
    let logged = Logged::default();
    let held = Held::Daemon {
        cache: planner.cache.clone(),
        records: planner.records.clone(),
        store,
        logged: logged.clone(),
    };
    // What the plan logs is counted, not written to the daemon's log (see `Logged`).
    let mut planned = tracing::instrument::WithSubscriber::with_subscriber(
        plan(
            planner.config.clone(),
            &request.names,
            &[],
            request.format.as_deref(),
            held,
        ),
        logged.dispatch(),
    )
    .await;
    let logged = planned.logged.max(logged.count());
    let reply = if logged > 0 {
        tracing::debug!(
            lines = logged,
            "a plan left to its asker: it logs what the asker's plan prints"
        );
        format!(
            "error the plan logs {logged} line(s) a plan made by the asker prints: planned by \
             the asker\n"
        )
    } else {
        match serde_json::to_string(&planned) {
            Ok(json) => format!("ok {json}\n"),
            Err(e) => format!("error {}\n", one_line(&e.to_string())),
        }
    };
    if logged == 0 {
        tracing::info!(
            exit = planned.code,
            ms = started.elapsed().as_millis() as u64,
            "a plan made for the control socket"
        );
    }
    // The plan's fleet-sized temporaries, freed off the async threads and given back.
    let leftovers = planned.leftovers.take();
    tokio::task::spawn_blocking(move || {
        drop(leftovers);
        crate::shell::malloc::release_free_memory();
    });
    reply
}

/// Where a plan reads what is not in the config.
pub(crate) enum Held {
    /// This process: the source parsed here, the records read from the database (or asked of
    /// the daemon that holds it).
    Here,
    /// The daemon's: its parse cache (the caller checked that the plan parses as the daemon
    /// does: its config and age identities), its store (read at once, and let go before the
    /// specs are read), and what counts the plan's log lines ([`Logged`], also set on the
    /// plan's future by the caller).
    Daemon {
        cache: Arc<Mutex<crate::source::ParseCache>>,
        records: crate::engine::HeldRecords,
        store: Arc<crate::store::Store>,
        logged: Logged,
    },
}

/// Counts the events at INFO and above (what `proxsync plan` shows on its stderr by default)
/// of a plan the daemon makes, in place of the daemon's log: a plan made by the asker would
/// have printed them, so such a plan is left to the asker (and a plan's warnings, such as a
/// refused tip at each plan, do not fill the daemon's log).
#[derive(Clone, Default)]
pub(crate) struct Logged(Arc<std::sync::atomic::AtomicUsize>);

impl Logged {
    pub(crate) fn count(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn dispatch(&self) -> tracing::Dispatch {
        tracing::Dispatch::new(self.clone())
    }
}

impl tracing::Subscriber for Logged {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.is_event() && *metadata.level() <= tracing::Level::INFO
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::INFO)
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, _: &tracing::Event<'_>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// Makes the plan of `config`'s specs (or of `spec_paths`), scoped to `names`, rendered as
/// `format` says. Changes nothing: no commit is remembered, no first contact recorded.
// Long because: the steps of one plan in their order (listings started, records and specs
// read side by side, planned, reported), each with its early answer.
pub(crate) async fn plan(
    config: Config,
    names: &[String],
    spec_paths: &[PathBuf],
    format: Option<&str>,
    held: Held,
) -> Planned {
    // The sites are listed and the records read from the database while the specs are parsed:
    // none needs a spec (at 50,000 specs each took about as long as the parse).
    let looking = match crate::engine::start_looking(&config) {
        Ok(l) => l,
        Err(e) => return Planned::failed(format!("error: {e}\n")),
    };
    let (records, cache, logged) = match held {
        Held::Here => {
            let state_dir = config.state_dir.clone();
            let snapshot =
                tokio::task::spawn_blocking(move || crate::store::read_specs_snapshot(&state_dir));
            (Records::Snapshot(snapshot), None, None)
        }
        Held::Daemon {
            cache,
            records,
            store,
            logged,
        } => {
            // The records the engine holds between cycles (none during one: decoded from the
            // store); the suspensions from the store (never asked of the daemon's socket,
            // whose connections a flood of plans may all hold); the store let go at once: a
            // reload waits for every handle on it to be gone.
            let held = records
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            let read = tokio::task::spawn_blocking(move || {
                let records = match held {
                    Some(records) => Ok(records),
                    None => store.specs().map(Arc::new),
                };
                (records, store.suspensions())
            });
            (Records::Daemon(read), Some(cache), Some(logged))
        }
    };
    let reading = {
        let spec_paths = spec_paths.to_vec();
        let logged = logged.clone();
        tokio::task::spawn_blocking(move || {
            let read = || {
                let mut said = String::new();
                // A remote is fetched first, as a plan made without the daemon fetches it.
                if cache.is_some()
                    && let Err(e) = crate::source::Source::new(&config).fetch_blocking()
                {
                    said.push_str(&format!("error: {e}\n"));
                    return (Err(()), said);
                }
                let read = read_inputs_saying(
                    config,
                    &spec_paths,
                    crate::source::Use::Inspect,
                    cache,
                    &mut said,
                );
                (read, said)
            };
            match logged {
                Some(logged) => tracing::dispatcher::with_default(&logged.dispatch(), read),
                None => read(),
            }
        })
    };
    let (read, mut before) = match reading.await {
        Ok(r) => r,
        Err(e) => return Planned::failed(format!("error: the specs' read failed: {e}\n")),
    };
    if let Some(n) = logged.as_ref().map(Logged::count).filter(|n| *n > 0) {
        // Left to the asker, which prints these lines too.
        return Planned {
            logged: n,
            ..Planned::failed(before)
        };
    }
    let Ok(Inputs {
        config,
        specs,
        refused,
        rewound,
        ..
    }) = read
    else {
        return Planned::failed(before);
    };
    let names = crate::shell::plan_report::names(names);
    if let Some(r) = &rewound {
        before.push_str(&format!(
            "warning: commit {} does not descend from {}, the commit applied before it: a \
             rewind, whose deletes are judged as one batch\n",
            r.batch.commit, r.batch.from
        ));
    }
    let rewind = rewound.as_ref().map(|r| &r.batch);
    let (records, suspensions) = match records.get(&config.state_dir).await {
        Ok(r) => r,
        Err(e) => {
            before.push_str(&format!("error: {}: {e}\n", config.state_dir.display()));
            return Planned::failed(before);
        }
    };
    let planned =
        crate::engine::plan_view(&config, &specs, records, suspensions, rewind, looking).await;
    let view = match planned {
        Ok(p) => p,
        Err(e) => {
            before.push_str(&format!("error: {e}\n"));
            return Planned::failed(before);
        }
    };
    // A spec naming a node its site's cluster does not have is invalid: said with the others.
    let mut specs = specs;
    for d in &view.node_errors {
        before.push_str(&format!("{d}\n"));
    }
    crate::engine::hold_invalid(&mut specs, view.node_errors.clone());
    let scope = crate::shell::plan_report::Scope {
        names: names.as_ref(),
        from_files: !spec_paths.is_empty(),
    };
    let mut report = crate::shell::plan_report::build(&view, &specs, &scope).await;
    report.errors.splice(
        0..0,
        crate::shell::plan_report::input_errors(&specs, names.as_ref(), refused.as_ref()),
    );
    let mut planned = render(&report, format, before);
    planned.leftovers = Some(Box::new((report, view, specs)));
    planned
}

type RecordMap = std::collections::BTreeMap<String, crate::store::SpecRecord>;

type SuspensionMap = std::collections::BTreeMap<String, crate::store::Suspension>;

type StoreRead<T> = Result<T, crate::store::StateError>;

/// Where a plan's state records and suspensions come from.
enum Records {
    /// Read beside this process (`None`: no database, or it is held: asked of the daemon).
    Snapshot(tokio::task::JoinHandle<Option<RecordMap>>),
    /// The daemon's own store.
    Daemon(tokio::task::JoinHandle<(StoreRead<Arc<RecordMap>>, StoreRead<SuspensionMap>)>),
}

impl Records {
    async fn get(self, state_dir: &Path) -> Result<(Arc<RecordMap>, SuspensionMap), String> {
        match self {
            Records::Snapshot(read) => {
                let records = match read.await.ok().flatten() {
                    Some(records) => records,
                    None => crate::shell::control::plan_records(state_dir).await?,
                };
                let suspensions = crate::shell::control::plan_suspensions(state_dir).await?;
                Ok((Arc::new(records), suspensions))
            }
            Records::Daemon(read) => match read.await {
                Ok((records, suspensions)) => Ok((
                    records.map_err(|e| e.to_string())?,
                    suspensions.map_err(|e| e.to_string())?,
                )),
                Err(e) => Err(e.to_string()),
            },
        }
    }
}

/// `report` as `format` says (words by default), then its errors.
fn render(
    report: &crate::shell::plan_report::Report,
    format: Option<&str>,
    before: String,
) -> Planned {
    let stdout = match format {
        Some("markdown") => report.markdown(),
        Some("json") => match serde_json::to_string_pretty(report) {
            // DEL, C1 and bidi controls a guest's config may hold, escaped as JSON allows.
            Ok(text) => crate::shell::status_view::json_for_terminal(text),
            Err(e) => return Planned::failed(format!("{before}error: {e}\n")),
        },
        _ => report.render(),
    };
    let mut after = String::new();
    for e in &report.errors {
        after.push_str(&format!("error: {e}\n"));
    }
    if !report.errors.is_empty() {
        after.push_str(&format!(
            "error: this plan is incomplete ({} error(s) above): exit 1\n",
            report.errors.len()
        ));
    }
    Planned {
        before,
        stdout,
        after,
        code: report.exit_code(),
        logged: 0,
        leftovers: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a plan made by the daemon logs at INFO and above is counted (and kept from the
    /// daemon's log); DEBUG, which `proxsync plan` does not print by default, is not.
    #[test]
    fn a_plans_log_lines_are_counted() {
        let logged = Logged::default();
        tracing::dispatcher::with_default(&logged.dispatch(), || {
            tracing::debug!("not shown by plan");
            tracing::info!("shown");
            tracing::warn!(commit = "abc", "the branch tip is refused");
            tracing::error!("shown too");
        });
        assert_eq!(logged.count(), 3);
        tracing::warn!("outside the plan");
        assert_eq!(logged.count(), 3);
    }
}
