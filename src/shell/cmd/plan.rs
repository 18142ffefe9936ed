//! `proxsync plan`: what a cycle would do, in words or JSON. Asked of the running daemon when
//! one serves this config (it holds the specs parsed: at 50,000 specs parsing was most of a
//! plan), else made here.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use super::*;

pub(crate) fn plan_cmd(
    config_path: Option<PathBuf>,
    names: Vec<String>,
    spec_paths: Vec<PathBuf>,
    format: Option<&str>,
) -> ExitCode {
    let config_path = config_path.unwrap_or_else(default_config_path);
    let config = match load_config(Some(config_path.clone())) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    if spec_paths.is_empty() {
        let request = PlanRequest {
            config: std::path::absolute(&config_path).unwrap_or(config_path),
            names: names.clone(),
            format: format.map(str::to_string),
        };
        let asked = rt.block_on(crate::shell::control::plan_through_daemon(
            &config.state_dir,
            &request,
        ));
        match asked {
            Ok(planned) => return planned.print(),
            Err(why) => tracing::debug!(%why, "the daemon did not plan: planning here"),
        }
    }
    let planned = rt.block_on(plan(config, &names, &spec_paths, format, Held::Here));
    let code = planned.print();
    // The process ends here: the system takes the memory back at once, where freeing 50,000
    // specs, records and views one by one took a quarter of a second.
    std::mem::forget(planned.leftovers);
    code
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
    fn failed(before: String) -> Planned {
        Planned {
            before,
            code: 1,
            ..Planned::default()
        }
    }

    /// Prints it (stderr, stdout, stderr) and returns its exit code.
    pub(crate) fn print(&self) -> ExitCode {
        let _ = std::io::stderr().lock().write_all(self.before.as_bytes());
        let _ = std::io::stdout().lock().write_all(self.stdout.as_bytes());
        let _ = std::io::stderr().lock().write_all(self.after.as_bytes());
        ExitCode::from(self.code)
    }
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
