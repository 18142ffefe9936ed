//! `proxsync plan`: what a cycle would do, in words or JSON.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::*;

pub(crate) fn plan_cmd(
    config_path: Option<PathBuf>,
    names: Vec<String>,
    spec_paths: Vec<PathBuf>,
    format: Option<&str>,
) -> ExitCode {
    let config = match load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    // The sites are listed and the records read from the database while the specs are parsed:
    // none needs a spec (at 50,000 specs each took about as long as the parse).
    let looking = {
        let _runtime = rt.enter();
        crate::engine::start_looking(&config)
    };
    let looking = match looking {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let state_dir = config.state_dir.clone();
    let snapshot = std::thread::spawn(move || crate::store::read_specs_snapshot(&state_dir));
    let Inputs {
        config,
        specs,
        refused,
        rewound,
        ..
    } = match read_inputs(config, &spec_paths, crate::source::Use::Inspect) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let names = crate::shell::plan_report::names(&names);
    if let Some(r) = &rewound {
        eprintln!(
            "warning: commit {} does not descend from {}, the commit applied before it: a \
             rewind, whose deletes are judged as one batch",
            r.batch.commit, r.batch.from
        );
    }
    let rewind = rewound.as_ref().map(|r| &r.batch);
    let snapshot = snapshot.join().ok().flatten();
    let records = snapshot.map_or_else(
        || rt.block_on(crate::shell::control::plan_records(&config.state_dir)),
        Ok,
    );
    let records = match records {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}: {e}", config.state_dir.display());
            return ExitCode::FAILURE;
        }
    };
    let suspensions = match rt.block_on(crate::shell::control::plan_suspensions(&config.state_dir))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}: {e}", config.state_dir.display());
            return ExitCode::FAILURE;
        }
    };
    let planned = crate::engine::plan_view(&config, &specs, records, suspensions, rewind, looking);
    let view = match rt.block_on(planned) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A spec naming a node its site's cluster does not have is invalid: said with the others.
    let mut specs = specs;
    for d in &view.node_errors {
        eprintln!("{d}");
    }
    crate::engine::hold_invalid(&mut specs, view.node_errors.clone());
    let scope = crate::shell::plan_report::Scope {
        names: names.as_ref(),
        from_files: !spec_paths.is_empty(),
    };
    let mut report = rt.block_on(crate::shell::plan_report::build(&view, &specs, &scope));
    report.errors.splice(
        0..0,
        crate::shell::plan_report::input_errors(&specs, names.as_ref(), refused.as_ref()),
    );
    if let Err(code) = print(&report, format) {
        return code;
    }
    let code = ExitCode::from(report.exit_code());
    // The process ends here: the system takes the memory back at once, where freeing 50,000
    // specs, records and views one by one took a quarter of a second.
    std::mem::forget((report, view, specs));
    code
}

/// Prints `report` as `format` says (words by default), then its errors.
fn print(report: &crate::shell::plan_report::Report, format: Option<&str>) -> Result<(), ExitCode> {
    if format == Some("markdown") {
        let _ = std::io::stdout()
            .lock()
            .write_all(report.markdown().as_bytes());
    } else if format == Some("json") {
        match serde_json::to_string_pretty(report) {
            Ok(text) => {
                // DEL, C1 and bidi controls a guest's config may hold, escaped as JSON allows.
                let text = crate::shell::status_view::json_for_terminal(text);
                let _ = std::io::stdout().lock().write_all(text.as_bytes());
            }
            Err(e) => {
                eprintln!("error: {e}");
                return Err(ExitCode::FAILURE);
            }
        }
    } else {
        let _ = std::io::stdout()
            .lock()
            .write_all(report.render().as_bytes());
    }
    for e in &report.errors {
        eprintln!("error: {e}");
    }
    if !report.errors.is_empty() {
        eprintln!(
            "error: this plan is incomplete ({} error(s) above): exit 1",
            report.errors.len()
        );
    }
    Ok(())
}
