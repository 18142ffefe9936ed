//! `proxsync run`: the daemon, or one cycle (`--once`) and its report.

use std::path::PathBuf;
use std::process::ExitCode;

use super::*;

pub(crate) fn run_cmd(
    config_path: Option<PathBuf>,
    once: bool,
    spec_paths: Vec<PathBuf>,
) -> ExitCode {
    if once {
        return run_once(config_path, &spec_paths);
    }
    if !spec_paths.is_empty() {
        eprintln!("error: --specs is for --once; the daemon reads the configured git source");
        return ExitCode::from(2);
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let path = config_path.unwrap_or_else(default_config_path);
    let daemon = async {
        let shutdown = crate::shell::daemon::shutdown_signals()?;
        crate::shell::daemon::run(path, shutdown).await
    };
    match rt.block_on(daemon) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "proxsync stopped");
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `run --once`: one cycle, each action's outcome printed, then a summary line.
pub(crate) fn run_once(config_path: Option<PathBuf>, spec_paths: &[PathBuf]) -> ExitCode {
    let Inputs {
        config,
        specs,
        commit,
        refused,
        rewound,
    } = match load_inputs(config_path, spec_paths, crate::source::Use::Apply) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let _lock = match hold_state_dir(&config) {
        Ok(lock) => lock,
        Err(code) => return code,
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async {
        let mut engine = match crate::engine::Engine::new(config) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        // Someone asked for a reconcile now: a transient failure's backoff does not hold it.
        engine.retry_transient_now = true;
        engine.source_refusal = refused;
        engine.source_rewind = rewound;
        let report = match engine.reconcile(&specs, commit.as_deref()).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        print_run_report(&report, &specs, &engine.config().status_dir);
        print_rewind(engine.source_rewind.as_ref());
        if report.all_ready() && report.source_refusal.is_none() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    })
}

pub(crate) fn print_run_report(
    report: &crate::engine::CycleReport,
    specs: &crate::spec::SpecSet,
    status_dir: &std::path::Path,
) {
    let by_name = crate::engine::specs_by_name(specs);
    for r in &report.results {
        let outcome = match &r.outcome {
            crate::execute::Outcome::Done => "done".to_string(),
            crate::execute::Outcome::StillRunning { upid } => {
                format!("task {upid} still running")
            }
            crate::execute::Outcome::Waiting(wait) => format!("waiting: {wait}"),
            crate::execute::Outcome::Failed(e) => {
                format!("FAILED {}: {}", e.category, e.message)
            }
        };
        println!(
            "{}  -> {outcome}",
            crate::engine::describe(&r.action, &by_name, &report.guest_kinds)
        );
    }
    for refusal in &report.plan.refused {
        println!("refused: {refusal}");
    }
    // Specs held back by a backoff are counted, with the first next attempt: a run that
    // did nothing for them says why.
    let backing_off = match (report.backing_off, report.next_attempt_ms) {
        (0, _) => String::new(),
        (n, Some(at)) => format!(
            ", {n} backing off (next attempt in {})",
            crate::shell::status_view::human(std::time::Duration::from_millis(
                at.saturating_sub(crate::execute::now_ms())
            ))
        ),
        (n, None) => format!(", {n} backing off"),
    };
    println!(
        "{} of {} spec(s) Ready, {} stalled{backing_off}; {} action(s) in {} ms; status in {}",
        report.ready,
        report.specs,
        report.stalled,
        report.results.len(),
        report.cycle_ms,
        status_dir.display()
    );
    // A refused tip was not applied: the run did not do what was pushed.
    if let Some(r) = &report.source_refusal {
        println!("refused commit {}: {}", r.commit, r.reason);
    }
}

/// Says that the commit applied rewinds the branch (after `run --once`'s report).
pub(crate) fn print_rewind(rewound: Option<&crate::source::Rewind>) {
    if let Some(r) = rewound {
        println!(
            "rewound: commit {} does not descend from {}, the commit applied before it",
            r.batch.commit, r.batch.from
        );
    }
}
