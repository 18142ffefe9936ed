//! `proxsync status`: the fleet or one spec from the status files.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::*;

pub(crate) fn status_cmd(
    config_path: Option<PathBuf>,
    name: Option<String>,
    json: bool,
) -> ExitCode {
    let config = match load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let opts = crate::shell::status_view::ViewOptions {
        name,
        json,
        // Colour on a terminal, unless NO_COLOR (no-color.org), CLICOLOR=0 or TERM=dumb says
        // otherwise; CLICOLOR_FORCE forces it (anstream's rules, as clap's help follows them).
        color: anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never,
        now: crate::util::clock::system_now(),
    };
    // The daemon's state first (not in JSON, whose shape scripts rely on).
    let daemon = (!opts.json && opts.name.is_none()).then(|| daemon_line(&config));
    match crate::shell::status_view::render(&config.status_dir, &opts) {
        Ok(text) => {
            if let Some(line) = daemon {
                println!("{line}");
            }
            // A reader that stops early (`| head`) is no error, and no panic.
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
