//! `proxsync reconcile`: asks the daemon for a cycle now, for one spec or all.

use std::path::PathBuf;
use std::process::ExitCode;

use super::*;

pub(crate) fn reconcile_cmd(
    config_path: Option<PathBuf>,
    name: Option<String>,
    retry: bool,
) -> ExitCode {
    let config = match load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    if let Some(name) = &name
        && let Err(e) = known_spec(&config, name)
    {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    match rt.block_on(crate::shell::control::request(
        &config.state_dir,
        name.as_deref(),
        retry,
    )) {
        Ok(answer) => {
            println!(
                "{answer}; the time it was handled shows as lastRequest in {}",
                config.status_dir.join("_summary.yaml").display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
