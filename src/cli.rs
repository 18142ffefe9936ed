//! The command line: subcommands and their output. Business rules live in the other modules.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{self, Config};
use crate::spec;

const EXAMPLES: &str = "\
Examples:
  proxsync validate specs/                     check every *.yaml/*.yml under specs/
  proxsync validate --config /etc/proxsync/proxsync.toml specs/
                                               ... and check each spec's site exists
  proxsync doctor --config /etc/proxsync/proxsync.toml --specs specs/
                                               check sites, token privileges, storages, bridges
  proxsync schema > proxsync.schema.json       JSON Schema for editors' YAML plugins";

/// Keeps Proxmox VE clusters holding exactly the VMs described by YAML specs in git.
#[derive(Debug, Parser)]
#[command(name = "proxsync", version, about, after_help = EXAMPLES)]
pub struct Cli {
    /// The configuration file.
    #[arg(long, global = true, env = "PROXSYNC_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check spec files; exit 0 when all are valid, 1 with file:line:col errors otherwise.
    #[command(after_help = "\
Examples:
  proxsync validate                      every spec under the current directory
  proxsync validate web.yaml db.yaml     just these files
  proxsync validate --config proxsync.toml specs/
                                         also check that each spec's site is configured

In a git pre-commit hook:  proxsync validate $(git diff --cached --name-only -- '*.yaml' '*.yml')")]
    Validate {
        /// Files or directories (searched recursively for *.yaml and *.yml); default: `.`.
        paths: Vec<PathBuf>,
    },
    /// Check the config, each site (DNS, TCP, TLS, token, privileges, version, quorum, nodes)
    /// and what the specs need (storages, bridges, images); exit 1 on any failure.
    #[command(after_help = "\
Examples:
  proxsync doctor --config /etc/proxsync/proxsync.toml
  proxsync doctor --config proxsync.toml --specs specs/   also check the storages, bridges
                                                          and images these specs name")]
    Doctor {
        /// Spec files or directories whose storages, bridges and images to check.
        #[arg(long, value_name = "PATH")]
        specs: Vec<PathBuf>,
    },
    /// Print the JSON Schema of the spec format (for editors' YAML language servers).
    #[command(after_help = "\
Example (VS Code / yaml-language-server): save it and put this first in a spec file:
  proxsync schema > .proxsync.schema.json
  # yaml-language-server: $schema=.proxsync.schema.json")]
    Schema,
}

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    init_logging();
    match cli.command {
        Command::Validate { paths } => validate(cli.config, paths),
        Command::Doctor { specs } => doctor(cli.config, specs),
        Command::Schema => schema(),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PROXSYNC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second init (tests calling run twice) is harmless; ignore it.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn validate(config_path: Option<PathBuf>, paths: Vec<PathBuf>) -> ExitCode {
    let paths = if paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        paths
    };
    let config = match config_path.as_deref().map(Config::load).transpose() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut set = spec::load_paths(&paths);
    if let Some(config) = &config {
        let sites: Vec<&str> = config.sites.iter().map(|s| s.name.as_str()).collect();
        set.diagnostics
            .extend(spec::check_sites(&set.specs, &sites));
    }
    let mut err = std::io::stderr().lock();
    for d in &set.diagnostics {
        let _ = writeln!(err, "{d}");
    }
    let errors = set
        .diagnostics
        .iter()
        .filter(|d| d.severity == spec::Severity::Error)
        .count();
    let warnings = set.diagnostics.len() - errors;
    let files: std::collections::BTreeSet<&str> =
        set.specs.iter().map(|s| s.file.as_str()).collect();
    if errors > 0 {
        let _ = writeln!(
            err,
            "{errors} error(s), {warnings} warning(s); {} valid spec(s) in {} file(s)",
            set.specs.len(),
            files.len()
        );
        return ExitCode::FAILURE;
    }
    println!(
        "ok: {} spec(s) in {} file(s) valid{}",
        set.specs.len(),
        files.len(),
        if warnings > 0 {
            format!(", {warnings} warning(s)")
        } else {
            String::new()
        }
    );
    ExitCode::SUCCESS
}

fn doctor(config_path: Option<PathBuf>, spec_paths: Vec<PathBuf>) -> ExitCode {
    let path = config_path.unwrap_or_else(default_config_path);
    let config = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            println!("FAIL config: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut specs = Vec::new();
    let mut spec_checks = Vec::new();
    if !spec_paths.is_empty() {
        let set = spec::load_paths(&spec_paths);
        spec_checks.extend(set.errors().map(|d| crate::doctor::Check {
            level: crate::doctor::Level::Fail,
            subject: "spec".into(),
            message: d.to_string(),
            fix: Some("correct the spec (`proxsync validate` lists every error)".into()),
        }));
        specs = set.specs;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut checks = runtime.block_on(crate::doctor::run(&config, &specs));
    checks.extend(spec_checks);
    let mut out = std::io::stdout().lock();
    for c in &checks {
        let _ = writeln!(out, "{c}");
    }
    let fails = checks
        .iter()
        .filter(|c| c.level == crate::doctor::Level::Fail)
        .count();
    let warns = checks
        .iter()
        .filter(|c| c.level == crate::doctor::Level::Warn)
        .count();
    let _ = writeln!(
        out,
        "{} check(s): {fails} failed, {warns} warning(s)",
        checks.len()
    );
    if crate::doctor::failed(&checks) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn schema() -> ExitCode {
    match serde_json::to_string_pretty(&spec::json_schema()) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The default config path, used by subcommands that need a config.
pub fn default_config_path() -> PathBuf {
    PathBuf::from(config::DEFAULT_PATH)
}
