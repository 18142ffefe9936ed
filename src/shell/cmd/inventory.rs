//! `proxsync inventory`: the Ansible inventory of the guests.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::*;

/// `proxsync inventory`: the inventory on stdout, notes on files left out on stderr.
pub(crate) fn inventory_cmd(
    config_path: Option<PathBuf>,
    output: &crate::shell::inventory::Output,
) -> ExitCode {
    let config = match load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match crate::shell::inventory::render(&config.status_dir, output) {
        Ok((text, notes)) => {
            for n in notes {
                eprintln!("note: {n}");
            }
            match std::io::stdout().write_all(text.as_bytes()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
