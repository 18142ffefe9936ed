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
    /// The daemon's: its parse cache and its store.
    Daemon {
        cache: Arc<Mutex<crate::source::ParseCache>>,
        store: Arc<crate::store::Store>,
    },
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
    let (records, cache) = match held {
        Held::Here => {
            let state_dir = config.state_dir.clone();
            let snapshot =
                tokio::task::spawn_blocking(move || crate::store::read_specs_snapshot(&state_dir));
            (Records::Snapshot(snapshot), None)
        }
        Held::Daemon { cache, store } => {
            let held = store.clone();
            let records = tokio::task::spawn_blocking(move || held.specs());
            (Records::Daemon(records, store), Some(cache))
        }
    };
    let reading = {
        let spec_paths = spec_paths.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut said = String::new();
            let read = read_inputs_saying(
                config,
                &spec_paths,
                crate::source::Use::Inspect,
                cache,
                &mut said,
            );
            (read, said)
        })
    };
    let (read, mut before) = match reading.await {
        Ok(r) => r,
        Err(e) => return Planned::failed(format!("error: the specs' read failed: {e}\n")),
    };
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
    let records = match records.get(&config.state_dir).await {
        Ok(r) => r,
        Err(e) => {
            before.push_str(&format!("error: {}: {e}\n", config.state_dir.display()));
            return Planned::failed(before);
        }
    };
    let suspensions = match crate::shell::control::plan_suspensions(&config.state_dir).await {
        Ok(s) => s,
        Err(e) => {
            before.push_str(&format!("error: {}: {e}\n", config.state_dir.display()));
            return Planned::failed(before);
        }
    };
    let planned =
        crate::engine::plan_view(&config, &specs, Arc::new(records), suspensions, rewind, looking).await;
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

/// Where a plan's state records come from.
enum Records {
    /// Read beside this process (`None`: no database, or it is held: asked of the daemon).
    Snapshot(tokio::task::JoinHandle<Option<RecordMap>>),
    /// The daemon's own store.
    Daemon(
        tokio::task::JoinHandle<Result<RecordMap, crate::store::StateError>>,
        Arc<crate::store::Store>,
    ),
}

impl Records {
    async fn get(self, state_dir: &Path) -> Result<RecordMap, String> {
        match self {
            Records::Snapshot(read) => match read.await.ok().flatten() {
                Some(records) => Ok(records),
                None => crate::shell::control::plan_records(state_dir).await,
            },
            Records::Daemon(read, _store) => match read.await {
                Ok(records) => records.map_err(|e| e.to_string()),
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
        leftovers: None,
    }
}
