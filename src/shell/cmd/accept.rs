//! `proxsync accept`: a refused commit or a site's changed identity accepted.

use std::path::PathBuf;
use std::process::ExitCode;

use super::*;

pub(crate) fn accept_site_cmd(config_path: Option<PathBuf>, site: String) -> ExitCode {
    let config = match load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if config.site(&site).is_none() {
        let names: Vec<&str> = config.sites.iter().map(|s| s.name.as_str()).collect();
        eprintln!(
            "error: no site {site:?} in {} (sites: {})",
            config.path.display(),
            names.join(", ")
        );
        return ExitCode::FAILURE;
    }
    match crate::site_identity::accept(&config.state_dir, &site) {
        Ok(identity) => {
            println!(
                "site {site} is now {}; the daemon acts on it from its next cycle                  (`proxsync reconcile` for one now)",
                identity
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `proxsync accept commit`: records the acceptance, then asks a running daemon to reconcile
/// (the next `run --once` or daemon start applies it otherwise).
pub(crate) fn accept_commit_cmd(config_path: Option<PathBuf>, commit: &str) -> ExitCode {
    let config = match load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // Who accepted, for the record: the login a `sudo` came from, else this user's.
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "?".into());
    // SAFETY: getuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    let uid = unsafe { libc::getuid() };
    let by = format!("{user} (uid {uid})");
    let (message, recorded) = match crate::source::Source::new(&config).accept(commit, &by) {
        Ok(done) => done,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{message}");
    if !recorded {
        return ExitCode::SUCCESS;
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(crate::shell::control::request(
        &config.state_dir,
        None,
        false,
    )) {
        Ok(answer) => println!("the daemon was asked to apply it: {answer}"),
        Err(_) => println!(
            "no daemon answers on {}: the next `proxsync run --once`, or the daemon when it \
             starts, applies it",
            crate::shell::control::socket_path(&config.state_dir).display()
        ),
    }
    ExitCode::SUCCESS
}
