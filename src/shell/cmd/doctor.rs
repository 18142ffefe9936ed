//! `proxsync doctor`: the config, the specs, signing and each site checked, each with a fix.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::Config;
use crate::spec;

use super::*;

/// `doctor --exercise`: the report on stdout, the durations into the state directory; exit 1
/// when an answer differs or the exercise could not begin.
pub(crate) fn doctor_exercise(
    config_path: Option<PathBuf>,
    opts: &crate::shell::doctor::exercise::ExerciseOptions,
) -> ExitCode {
    let (config, runtime) = match config_and_runtime(config_path) {
        Ok(x) => x,
        Err(code) => return code,
    };
    // One exercise at a time: two could each take the other's guests for a killed run's.
    let run = crate::conformance::Run::new(vec![]);
    let lock = match crate::shell::instance_lock::ExerciseLock::acquire(&config.state_dir, &run.id)
    {
        Ok(l) => l,
        Err(e) => {
            println!("FAIL exercise: {}", crate::shell::status_view::clean(&e));
            return ExitCode::FAILURE;
        }
    };
    let run = crate::conformance::Run {
        ended: lock.previous_run.iter().cloned().collect(),
        ..run
    };
    let exercise = crate::shell::doctor::exercise::exercise(&config, opts, run);
    let (site, report) = match runtime.block_on(exercise) {
        Ok(r) => r,
        Err(e) => {
            println!("FAIL exercise: {}", crate::shell::status_view::clean(&e));
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    for line in crate::shell::doctor::exercise::report_lines(&report) {
        let _ = writeln!(out, "{line}");
    }
    let durations = report.durations();
    let durations = durations
        .iter()
        .map(|(task, took)| format!("{task} {:.1}s", took.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "durations: {}",
        crate::shell::status_view::clean(&durations)
    );
    if let Err(e) =
        crate::conformance::durations::write_durations(&config.state_dir, &site, &report)
    {
        let e = crate::shell::status_view::clean(&e.to_string());
        let _ = writeln!(out, "warn durations not kept: {e}");
    }
    let differs = report.differences().len();
    let not_run = report
        .steps
        .iter()
        .filter(|s| matches!(s.outcome, crate::conformance::Outcome::NotRun(_)))
        .count();
    let _ = writeln!(
        out,
        "{} step(s): {differs} differ from what proxsync expects, {not_run} not run",
        report.steps.len()
    );
    if differs > 0 {
        let _ = writeln!(
            out,
            "send this output to the proxsync maintainers (CONTRIBUTING.md: a real cluster's answers)"
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

pub(crate) fn doctor(config_path: Option<PathBuf>, spec_paths: Vec<PathBuf>) -> ExitCode {
    let (config, runtime) = match config_and_runtime(config_path) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let mut spec_checks = Vec::new();
    // The specs of `--specs`, else those of the configured source, as `plan` and `run` read.
    let set = if spec_paths.is_empty() {
        match crate::source::read_configured(&config, crate::source::Use::Inspect) {
            Ok(read) => {
                spec_checks.extend(crate::shell::doctor::check_tip(&config, &read));
                spec_checks.extend(crate::shell::doctor::check_rewind(&read));
                spec_checks.push(crate::shell::doctor::Check {
                    level: crate::shell::doctor::Level::Ok,
                    subject: "source".into(),
                    message: format!(
                        "{} spec(s) at commit {}",
                        read.specs.specs.len(),
                        &read.commit[..read.commit.len().min(12)]
                    ),
                    fix: None,
                });
                read.specs
            }
            Err(e) => {
                spec_checks.push(crate::shell::doctor::Check {
                    level: crate::shell::doctor::Level::Fail,
                    subject: "source".into(),
                    message: e.to_string(),
                    fix: Some(
                        "check [source] in the config, or name spec files with --specs".into(),
                    ),
                });
                spec::SpecSet::default()
            }
        }
    } else {
        let keyring = config.sops_keyring();
        let secrets = spec::Secrets::Decrypt(&keyring);
        spec::load_paths_capped(&spec_paths, secrets, config.source.max_specs)
    };
    spec_checks.extend(crate::shell::doctor::check_sops(&config, &set));
    spec_checks.extend(set.errors().map(|d| crate::shell::doctor::Check {
        level: crate::shell::doctor::Level::Fail,
        subject: "spec".into(),
        message: d.to_string(),
        fix: Some("correct the spec (`proxsync validate` lists every error)".into()),
    }));
    let mut checks = runtime.block_on(crate::shell::doctor::run(&config, &set));
    checks.extend(spec_checks);
    let mut out = std::io::stdout().lock();
    for c in &checks {
        let _ = writeln!(out, "{c}");
    }
    let fails = checks
        .iter()
        .filter(|c| c.level == crate::shell::doctor::Level::Fail)
        .count();
    let warns = checks
        .iter()
        .filter(|c| c.level == crate::shell::doctor::Level::Warn)
        .count();
    let _ = writeln!(
        out,
        "{} check(s): {fails} failed, {warns} warning(s)",
        checks.len()
    );
    if crate::shell::doctor::failed(&checks) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The config (a failure to load it is doctor's first `FAIL`) and a runtime for the checks.
fn config_and_runtime(
    config_path: Option<PathBuf>,
) -> Result<(Config, tokio::runtime::Runtime), ExitCode> {
    let path = config_path.unwrap_or_else(default_config_path);
    let config = Config::load(&path).map_err(|e| {
        println!("FAIL config: {e}");
        ExitCode::FAILURE
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        })?;
    Ok((config, runtime))
}
