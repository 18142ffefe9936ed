//! `proxsync status`: the fleet or one spec from the status files.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::*;

pub(crate) fn status_cmd(
    config_path: Option<PathBuf>,
    name: Option<String>,
    json: bool,
    only: crate::shell::status_view::Only,
) -> ExitCode {
    let config = match load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let list = name.is_none();
    // The daemon's state above the list, and in the JSON list.
    let daemon = list.then(|| daemon_state(&config));
    let opts = crate::shell::status_view::ViewOptions {
        name,
        json,
        // Colour on a terminal, unless NO_COLOR (no-color.org), CLICOLOR=0 or TERM=dumb says
        // otherwise; CLICOLOR_FORCE forces it (anstream's rules, as clap's help follows them).
        color: anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never,
        now: crate::util::clock::system_now(),
        only,
        width: terminal_width(),
        daemon: daemon.clone().filter(|_| json),
    };
    let line = daemon
        .filter(|_| !json)
        .map(|d| daemon_line_of(&config, &d));
    match crate::shell::status_view::render(&config.status_dir, &opts) {
        Ok(text) => {
            if let Some(line) = line {
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

/// The columns of the terminal stdout is (`COLUMNS`, else the terminal's own size, else
/// [`TARGET_WIDTH`](crate::shell::status_view::TARGET_WIDTH)); `None` when stdout is no
/// terminal: a file or a pipe gets every word.
fn terminal_width() -> Option<usize> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    Some(
        columns
            .or_else(window_columns)
            .filter(|c| *c >= 40)
            .unwrap_or(crate::shell::status_view::TARGET_WIDTH),
    )
}

/// The width of the terminal on stdout, as the kernel knows it (`TIOCGWINSZ`).
fn window_columns() -> Option<usize> {
    // SAFETY: `winsize` is plain integers, valid all zero.
    #[allow(unsafe_code)]
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the live local passed.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}
