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
  proxsync validate --effective eu-fra/web-01.yaml
                                         web-01 with eu-fra's _defaults.yaml merged in
  proxsync validate --config proxsync.toml specs/
                                         also check that each spec's site is configured

In a git pre-commit hook:  proxsync validate $(git diff --cached --name-only -- '*.yaml' '*.yml')")]
    Validate {
        /// Files or directories (searched recursively for *.yaml and *.yml); default: `.`.
        paths: Vec<PathBuf>,
        /// Print each spec of the one FILE as it is with its directories' `_defaults.yaml`
        /// merged in (a default's values commented with their file and line), then validate it.
        #[arg(long, value_name = "FILE", conflicts_with = "paths")]
        effective: Option<PathBuf>,
    },
    /// Check the config, each site (DNS, TCP, TLS, token, privileges, version, quorum, nodes)
    /// and what the specs need (storages, bridges, images); exit 1 on any failure. The specs are
    /// those of `--specs`, else those of the configured source.
    #[command(after_help = "\
Examples:
  proxsync doctor --config /etc/proxsync/proxsync.toml
  proxsync doctor --config proxsync.toml --specs specs/   also check the storages, bridges
                                                          and images these specs name
  proxsync doctor --config proxsync.toml --exercise       make, clone, resize, start, stop and
                                                          delete a throwaway VM and container")]
    Doctor {
        /// Spec files or directories whose storages, bridges and images to check (default: the
        /// specs of the configured source).
        #[arg(long, value_name = "PATH")]
        specs: Vec<PathBuf>,
        /// Instead of the checks: make a throwaway VM and container in the pool
        /// proxsync-exercise, clone, resize, start, stop and delete them, and report each
        /// task's duration and every answer that differs from what proxsync expects. Deletes
        /// only what it proves it made; a run first deletes what a killed run left.
        #[arg(long, conflicts_with = "specs")]
        exercise: bool,
        /// With --exercise: every scenario of the conformance suite (reboots, migrations, a
        /// clone's lock, a stale digest, PVE's refusals), in the pool proxsync-conformance.
        #[arg(long, requires = "exercise")]
        conformance: bool,
        /// With --exercise: the site (needed when several are configured).
        #[arg(long, requires = "exercise", value_name = "NAME")]
        site: Option<String>,
        /// With --exercise: the node (default: the first online node).
        #[arg(long, requires = "exercise", value_name = "NODE")]
        node: Option<String>,
        /// With --exercise: the container template, e.g.
        /// local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst (default: the first
        /// distribution's archive, as pveam names them, the node has; never another template).
        #[arg(long, requires = "exercise", value_name = "VOLUME")]
        ct_template: Option<String>,
    },
    /// The daemon: reconcile on every push, resync, backoff deadline and request, until
    /// SIGTERM. With --once, one full cycle (observe, act, wait for the tasks it started,
    /// write status), exit 0 when every spec is Ready, 1 otherwise.
    #[command(after_help = "\
Examples:
  proxsync run --config /etc/proxsync/proxsync.toml           the daemon (systemd runs this)
  proxsync run --once --config /etc/proxsync/proxsync.toml
  proxsync run --once --config proxsync.toml --specs specs/   specs from a directory instead of git")]
    Run {
        /// One cycle, then exit.
        #[arg(long)]
        once: bool,
        /// Read specs from these files or directories instead of the configured git source.
        #[arg(long, value_name = "PATH")]
        specs: Vec<PathBuf>,
    },
    /// Show what a reconcile would do now against the live clusters, field by field, without
    /// doing it; exit 0 no changes, 2 changes, 1 error (an unreachable site, an invalid spec, a
    /// refused commit, a spec set not read completely: the reason on stderr).
    #[command(after_help = "\
Examples:
  proxsync plan --config /etc/proxsync/proxsync.toml
  proxsync plan web-01 db-01                                  these specs only, never a removal
  proxsync plan --json | jq .changes                          the same as data
  proxsync plan --config proxsync.toml --specs ./specs        what a branch's specs would do
                                                              (specs not in ./specs count as
                                                              removed, and are labelled so)")]
    Plan {
        /// Only these specs (metadata.name): their changes, never another spec's removal.
        names: Vec<String>,
        /// Read specs from these files or directories instead of the configured git source.
        #[arg(long, value_name = "PATH")]
        specs: Vec<PathBuf>,
        /// JSON instead of text (the errors still on stderr).
        #[arg(long)]
        json: bool,
    },
    /// Ask the running daemon to reconcile now (one spec: also retry it at once if it is
    /// backing off).
    #[command(after_help = "\
Examples:
  proxsync reconcile                 everything, now
  proxsync reconcile web-01          web-01 now, even while it backs off")]
    Reconcile {
        /// The spec (metadata.name); all specs when omitted.
        name: Option<String>,
    },
    /// Confirm by hand that a VM is a spec's although its marker does not verify (the marker
    /// key was lost, or the VM predates signed markers). Through the daemon when it runs.
    #[command(after_help = "\
Examples:
  proxsync adopt web-01 --vmid 105       VM 105 (carrying web-01's proxsync-id line) is web-01's
  proxsync adopt --all-unverified        list every VM whose marker names this install and a spec
                                         but does not verify (after a lost marker.key)
  proxsync adopt --all-unverified --yes  confirm each spec one guest alone claims (a spec two
                                         guests claim is listed, never confirmed)")]
    Adopt {
        /// The spec (metadata.name).
        #[arg(required_unless_present = "all_unverified", requires = "vmid")]
        name: Option<String>,
        /// The VM's VMID.
        #[arg(long, requires = "name")]
        vmid: Option<u32>,
        /// Every VM whose marker names this install and one of its specs but does not verify,
        /// and that no record maps (listed only, unless --yes).
        #[arg(long, conflicts_with_all = ["name", "vmid"])]
        all_unverified: bool,
        /// With --all-unverified: confirm each spec one guest alone claims; a spec two or more
        /// guests claim is listed with what tells them apart and never confirmed (`adopt NAME
        /// --vmid N`).
        #[arg(long, requires = "all_unverified")]
        yes: bool,
    },
    /// Hands off: no action of any kind for a spec's VM (or every spec's) until `proxsync
    /// resume`; it is still observed and its drift reported, and its removal from git waits.
    /// Kept in the state database; through the daemon when it runs.
    #[command(after_help = "\
Examples:
  proxsync suspend db-01 --reason \"restoring a backup by hand\"
  proxsync suspend --all --reason \"cluster upgrade\"    every spec, and no orphan is deleted
  proxsync resume db-01")]
    Suspend {
        /// The spec (metadata.name); a removed spec's name holds its VM's removal.
        #[arg(required_unless_present = "all")]
        name: Option<String>,
        /// Every spec (and no orphan deleted), including specs added later.
        #[arg(long, conflicts_with = "name")]
        all: bool,
        /// Why, shown in the status (at most 200 characters).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Lift a suspension made by `proxsync suspend` (or a removed spec's `spec.suspend`).
    #[command(after_help = "\
Examples:
  proxsync resume db-01
  proxsync resume --all                   every suspension made at runtime")]
    Resume {
        /// The spec (metadata.name).
        #[arg(required_unless_present = "all")]
        name: Option<String>,
        /// Every suspension.
        #[arg(long, conflicts_with = "name")]
        all: bool,
    },
    /// Write specs from a site's existing VMs, each consenting to adopt its VM at the next
    /// cycle after it is committed (`proxsync.io/adopt`). Reads only: no VM is changed.
    #[command(after_help = "\
Examples:
  proxsync import --site eu-fra --vmid 105 --vmid 106     two VMs, to stdout
  proxsync import --site eu-fra --pool prod --out specs/eu-fra/prod
  proxsync import --site eu-fra --unmanaged --out specs/eu-fra   every VM no install manages")]
    Import {
        /// The site (a [[site]] of the config).
        #[arg(long)]
        site: String,
        /// A VM to import (repeatable).
        #[arg(long = "vmid")]
        vmids: Vec<u32>,
        /// The VMs of this pool.
        #[arg(long)]
        pool: Option<String>,
        /// The VMs with this tag.
        #[arg(long)]
        tag: Option<String>,
        /// The VMs on this node.
        #[arg(long)]
        node: Option<String>,
        /// Only VMs no proxsync install manages (alone: every such VM of the site).
        #[arg(long)]
        unmanaged: bool,
        /// Write one <name>.yaml per VM into DIR (never overwriting a file) instead of stdout.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Write observe-only specs (managementPolicy: Observe): their VMs' drift is reported,
        /// nothing is adopted or changed until the line is removed.
        #[arg(long)]
        observe: bool,
    },
    /// Show the status files as a table (or one spec in detail, or JSON).
    #[command(after_help = "\
Examples:
  proxsync status                    every spec: Ready, reason, age, message
  proxsync status web-01             one spec: conditions, last task, backoff, history
  proxsync status --json | jq .      for scripts")]
    Status {
        /// One spec (metadata.name).
        name: Option<String>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the VMs of the status files as an Ansible inventory: JSON in the dynamic-inventory
    /// format (`--list`, the default; `--host NAME`), or YAML. Hosts by spec name, groups by
    /// site, node, tag and label, variables from the status; no Proxmox API call.
    #[command(after_help = "\
Examples:
  proxsync inventory | jq '._meta.hostvars'      every host's variables
  proxsync inventory --host web-01               one host's variables ({} when unknown)
  proxsync inventory --yaml > inventory.yml      a static copy (ansible-playbook -i inventory.yml)

As a dynamic inventory script, proxsync-inventory.sh:
  #!/bin/sh
  exec proxsync inventory --config /etc/proxsync/proxsync.toml \"$@\"
then: ansible-playbook -i proxsync-inventory.sh site.yml

Groups: site_<site>, node_<node>, tag_<tag>, label_<key>_<value>, every character but
letters, digits and _ made _ (site eu-fra -> site_eu_fra).")]
    Inventory {
        /// YAML (Ansible's YAML inventory format) instead of JSON.
        #[arg(long, conflicts_with = "host")]
        yaml: bool,
        /// Print one host's variables as JSON (`{}` for an unknown host).
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        /// The whole inventory (the default; Ansible's script protocol passes it).
        #[arg(long, conflicts_with = "host")]
        list: bool,
    },
    /// Accept what a safety check refused, naming it: it is recorded in the state directory,
    /// and the running daemon is asked to reconcile.
    #[command(after_help = "\
Examples:
  proxsync accept commit 3f2c9a1e0b7d   apply this commit although it does not descend from
                                        the last applied one (a rewind; [source] verify)
  proxsync accept site lab              the cluster site lab reaches now is lab's cluster")]
    Accept {
        #[command(subcommand)]
        what: Accept,
    },
    /// Print a shell completion script (bash, zsh or fish).
    #[command(after_help = "\
Examples:
  proxsync completions bash > ~/.local/share/bash-completion/completions/proxsync
  proxsync completions zsh > ~/.zfunc/_proxsync
  proxsync completions fish > ~/.config/fish/completions/proxsync.fish

The Debian package installs them for every user.")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write a man page per subcommand (proxsync.1, proxsync-plan.1, ...) into DIR: what the
    /// package ships.
    #[command(hide = true)]
    Manpages {
        /// The directory to write into (made if missing).
        dir: PathBuf,
    },
    /// Print the JSON Schema of the spec format (for editors' YAML language servers).
    #[command(after_help = "\
Example (VS Code / yaml-language-server): save it and put this first in a spec file:
  proxsync schema > .proxsync.schema.json
  # yaml-language-server: $schema=.proxsync.schema.json
  proxsync schema --kind ProxmoxLXC > .proxsync-lxc.schema.json       for container specs
  proxsync schema --kind ProxmoxVMSet > .proxsync-set.schema.json      for set files
  proxsync schema --kind ProxmoxDefaults > .proxsync-defaults.schema.json   for _defaults.yaml")]
    Schema {
        /// The kind: ProxmoxVM (default), ProxmoxLXC, ProxmoxVMSet or ProxmoxDefaults.
        #[arg(long, default_value = "ProxmoxVM", value_parser = ["ProxmoxVM", "ProxmoxLXC", "ProxmoxVMSet", "ProxmoxDefaults"])]
        kind: String,
    },
}

/// What `proxsync accept` accepts.
#[derive(Debug, Subcommand)]
pub enum Accept {
    /// The cluster SITE's endpoint now reaches, which a cycle refused because it is not the
    /// cluster recorded for the site (reason SiteIdentityChanged): it becomes the site's.
    #[command(after_help = "\
Examples:
  proxsync accept site lab        the cluster site lab reaches now is lab's cluster

Only what a cycle (the daemon, run --once) refused can be accepted: the cluster named in the
SiteIdentityChanged message. If the endpoint is wrong instead, fix it in the config.")]
    Site {
        /// The site (`[[site]] name`).
        site: String,
    },
    /// A commit that does not descend from the last applied commit (a rewind), refused with
    /// `[source] verify` as `NotDescendant`. The commit must be in the repository and verify;
    /// the acceptance holds over the commit applied now only.
    Commit {
        /// The commit's id (7 to 40 hex digits), as `refusedCommit` in _summary.yaml names it.
        commit: String,
    },
}

/// Runs a parsed command line and returns the process exit code.
// Long because: one arm per subcommand, each only unpacking its arguments into a call.
pub fn run(cli: Cli) -> ExitCode {
    init_logging();
    match cli.command {
        Command::Validate { paths, effective } => match effective {
            Some(file) => match spec::effective_yaml(&file) {
                Ok(text) => {
                    // A reader that stops early (`| head`) is no error.
                    let _ = std::io::stdout().lock().write_all(text.as_bytes());
                    validate(cli.config, vec![file])
                }
                Err(diags) => {
                    diags.iter().for_each(|d| eprintln!("{d}"));
                    ExitCode::FAILURE
                }
            },
            None => validate(cli.config, paths),
        },
        Command::Doctor {
            specs,
            exercise: true,
            conformance,
            site,
            node,
            ct_template,
        } => {
            debug_assert!(specs.is_empty(), "clap: --specs conflicts with --exercise");
            let opts = crate::shell::doctor::exercise::ExerciseOptions {
                site,
                node,
                ct_template,
                conformance,
                task_timeout: std::time::Duration::from_secs(600),
            };
            doctor_exercise(cli.config, &opts)
        }
        Command::Doctor { specs, .. } => doctor(cli.config, specs),
        Command::Run { once, specs } => {
            // Only the long-running command: `status` and `plan` parse files on every core,
            // where one arena would make the threads queue for the allocator.
            crate::shell::malloc::tune_for_daemon();
            run_cmd(cli.config, once, specs)
        }
        Command::Reconcile { name } => reconcile_cmd(cli.config, name),
        Command::Adopt {
            name,
            vmid,
            all_unverified,
            yes,
        } => {
            let one = name.zip(vmid);
            adopt_cmd(cli.config, one, all_unverified && yes)
        }
        Command::Import {
            site,
            vmids,
            pool,
            tag,
            node,
            unmanaged,
            out,
            observe,
        } => {
            let selection = crate::import::Selection {
                vmids,
                pool,
                tag,
                node,
                unmanaged,
            };
            match load_config(cli.config) {
                Ok(config) => crate::shell::import_cmd::run(
                    &config,
                    &site,
                    &selection,
                    out.as_deref(),
                    observe,
                ),
                Err(code) => code,
            }
        }
        Command::Suspend { name, all, reason } => match load_config(cli.config) {
            Ok(config) => crate::shell::suspend_cmd::suspend(
                &config,
                name.filter(|_| !all),
                reason,
                known_spec,
            ),
            Err(code) => code,
        },
        Command::Resume { name, all } => match load_config(cli.config) {
            Ok(config) => crate::shell::suspend_cmd::resume(&config, name.filter(|_| !all)),
            Err(code) => code,
        },
        Command::Status { name, json } => status_cmd(cli.config, name, json),
        // `--list` is what prints by default; Ansible's script protocol passes it.
        Command::Inventory {
            yaml,
            host,
            list: _,
        } => {
            let output = match (host, yaml) {
                (Some(name), _) => crate::shell::inventory::Output::Host(name),
                (None, true) => crate::shell::inventory::Output::Yaml,
                (None, false) => crate::shell::inventory::Output::List,
            };
            inventory_cmd(cli.config, &output)
        }
        Command::Plan { names, specs, json } => plan_cmd(cli.config, names, specs, json),
        Command::Accept { what } => match what {
            Accept::Commit { commit } => accept_commit_cmd(cli.config, &commit),
            Accept::Site { site } => accept_site_cmd(cli.config, site),
        },
        Command::Schema { kind } => schema(&kind),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            // Into memory first: clap_complete panics when its writer fails (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "proxsync", &mut script);
            match std::io::stdout().write_all(&script) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
        Command::Manpages { dir } => match manpages(&dir) {
            Ok(n) => {
                println!("{n} man page(s) written to {}", dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {}: {e}", dir.display());
                ExitCode::FAILURE
            }
        },
    }
}

/// Logs go to journald with structured fields (spec, vmid, upid) when stderr is the
/// journal (systemd sets `JOURNAL_STREAM`), to stderr otherwise. `PROXSYNC_LOG` filters.
fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env("PROXSYNC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let journal = std::env::var_os("JOURNAL_STREAM")
        .is_some()
        .then(|| tracing_journald::layer().ok())
        .flatten();
    // A second init (tests calling run twice) is harmless; ignore it.
    let _ = match journal {
        Some(layer) => tracing_subscriber::registry()
            .with(filter)
            .with(layer)
            .try_init(),
        None => tracing_subscriber::registry()
            .with(filter)
            .with(stderr_layer(
                std::io::stderr,
                std::io::IsTerminal::is_terminal(&std::io::stderr()),
            ))
            .try_init(),
    };
}

/// The log on stderr: one line per event, its fields as [`log_fields`] writes them. (The
/// journal takes each field apart, with its own length: a value cannot forge a field or an
/// entry there, and `journalctl` shows a value holding control characters as a blob.)
fn stderr_layer<S, W>(writer: W, ansi: bool) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + 'static,
{
    tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(writer)
        .fmt_fields(log_fields())
}

/// Fields as tracing's default writes them (the message, then `name=value`), every value with
/// its control characters, line and paragraph separators and bidi controls escaped (`\n`,
/// `\u{1b}`): a value holds a spec file's path, a label, PVE's or a guest's words, and the
/// default writes a `%` field's text as it is, so a line break in one started a forged log
/// line and an escape sequence reached the terminal.
fn log_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use std::fmt::Write as _;
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        let mut clean = String::with_capacity(text.len());
        for c in text.chars() {
            match c {
                '\n' => clean.push_str("\\n"),
                '\r' => clean.push_str("\\r"),
                '\t' => clean.push_str("\\t"),
                c if crate::shell::status_view::is_unsafe(c) => {
                    let _ = write!(clean, "\\u{{{:x}}}", u32::from(c));
                }
                c => clean.push(c),
            }
        }
        match field.name() {
            "message" => w.write_str(&clean),
            name => write!(w, "{}={clean}", name.trim_start_matches("r#")),
        }
    })
    .delimited(" ")
}

/// `validate --config`'s checks of the specs against the config: each spec's site is a
/// configured one, a container's password file is where the config allows it, and what a
/// site's PVE release refuses. A spec failing one is not counted as valid.
fn check_against_config(config: &Config, set: &mut spec::SpecSet) {
    let sites: Vec<&str> = config.sites.iter().map(|s| s.name.as_str()).collect();
    let unknown_site = spec::check_sites(&set.specs, &sites);
    // A spec naming no configured site is not valid for this config: not counted as such.
    let names: std::collections::BTreeSet<&str> = unknown_site
        .iter()
        .filter_map(|d| d.spec.as_deref())
        .collect();
    let names: std::collections::BTreeSet<String> = names.into_iter().map(str::to_string).collect();
    set.specs.retain(|s| !names.contains(&s.name));
    set.diagnostics.extend(unknown_site);
    // A container's root password only from where the config allows it.
    let passwords = config.password_files();
    let refused =
        crate::spec::check_password_files(&set.specs, |path| passwords.check(path, false));
    let names: std::collections::BTreeSet<String> =
        (refused.iter()).filter_map(|d| d.spec.clone()).collect();
    set.specs.retain(|s| !names.contains(&s.name));
    set.diagnostics.extend(refused);
    // What a site's PVE release refuses (ha.group on PVE 9): asks only sites whose specs
    // hold such a field.
    if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        set.diagnostics
            .extend(rt.block_on(crate::shell::doctor::version_diagnostics(
                config, &set.specs,
            )));
    }
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
    if let Some(config) = &config {
        for w in config.warnings() {
            eprintln!("warning: {w}");
        }
    }
    // SOPS-encrypted specs open with the config's identity, else SOPS_AGE_KEY_FILE (as sops
    // itself reads it); without either only their structure is checked.
    let keyring = match (&config, std::env::var_os("SOPS_AGE_KEY_FILE")) {
        (Some(c), _) if c.sops_identity_path().is_some() => Some(c.sops_keyring()),
        (_, Some(file)) => Some(
            crate::sops::Keyring::load(std::path::Path::new(&file))
                .unwrap_or_else(crate::sops::Keyring::unavailable),
        ),
        _ => None,
    };
    let secrets = match &keyring {
        Some(k) => spec::Secrets::Decrypt(k),
        None => spec::Secrets::StructureOnly,
    };
    // `[source] max_specs` of the config, else its default: never expanded past it.
    let max_specs =
        (config.as_ref()).map_or(crate::config::DEFAULT_MAX_SPECS, |c| c.source.max_specs);
    let mut set = spec::load_paths_capped(&paths, secrets, max_specs);
    if let Some(config) = &config {
        check_against_config(config, &mut set);
    }
    let mut err = std::io::stderr().lock();
    let shown = once_each(&set.diagnostics);
    for d in &shown {
        let _ = writeln!(err, "{d}");
    }
    let errors = (shown.iter())
        .filter(|d| d.severity == spec::Severity::Error)
        .count();
    let warnings = shown.len() - errors;
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
    if set.specs.is_empty() && set.diagnostics.is_empty() {
        let under: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        println!(
            "no spec files found under {} (spec files end in .yaml or .yml)",
            under.join(", ")
        );
        return ExitCode::SUCCESS;
    }
    let _ = writeln!(
        std::io::stdout().lock(),
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

/// Each diagnostic once: a value in a `_defaults.yaml` is checked in every spec below it, and
/// its problem is told once.
fn once_each(diags: &[spec::Diagnostic]) -> Vec<&spec::Diagnostic> {
    let mut told = std::collections::HashSet::new();
    (diags.iter())
        .filter(|d| told.insert((d.file.as_str(), d.pos, d.message.as_str())))
        .collect()
}

/// `doctor --exercise`: the report on stdout, the durations into the state directory; exit 1
/// when an answer differs or the exercise could not begin.
fn doctor_exercise(
    config_path: Option<PathBuf>,
    opts: &crate::shell::doctor::exercise::ExerciseOptions,
) -> ExitCode {
    let path = config_path.unwrap_or_else(default_config_path);
    let config = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            println!("FAIL config: {e}");
            return ExitCode::FAILURE;
        }
    };
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

fn doctor(config_path: Option<PathBuf>, spec_paths: Vec<PathBuf>) -> ExitCode {
    let path = config_path.unwrap_or_else(default_config_path);
    let config = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            println!("FAIL config: {e}");
            return ExitCode::FAILURE;
        }
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
    let specs = set.specs;
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
    let mut checks = runtime.block_on(crate::shell::doctor::run(&config, &specs));
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

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        })
}

/// What a command works on: the config, the specs, and the commit they come from.
struct Inputs {
    config: Config,
    specs: spec::SpecSet,
    commit: Option<String>,
    /// The branch tip `[source] verify` refused (the specs are the last verified commit's).
    refused: Option<crate::source::verify::Refusal>,
    /// The commit does not descend from the commit applied before it.
    rewound: Option<crate::source::Rewind>,
}

/// Loads the config and the specs (from `--specs`, else the configured source, verified when
/// `[source] verify` is set).
fn load_inputs(
    config_path: Option<PathBuf>,
    spec_paths: &[PathBuf],
    purpose: crate::source::Use,
) -> Result<Inputs, ExitCode> {
    let config = load_config(config_path)?;
    let (mut specs, commit, refused, rewound) = if spec_paths.is_empty() {
        match crate::source::read_configured(&config, purpose) {
            Ok(read) => (read.specs, Some(read.commit), read.refused, read.rewound),
            Err(e) => {
                eprintln!("error: {e}");
                return Err(ExitCode::FAILURE);
            }
        }
    } else {
        let keyring = config.sops_keyring();
        let secrets = spec::Secrets::Decrypt(&keyring);
        (
            spec::load_paths_capped(spec_paths, secrets, config.source.max_specs),
            None,
            None,
            None,
        )
    };
    if let (Some(r), Some(commit)) = (&refused, &commit) {
        eprintln!(
            "warning: commit {} refused: {}; using the last verified commit {commit}",
            r.commit, r.reason
        );
    }
    if let Some(r) = &rewound {
        eprintln!(
            "warning: commit {} does not descend from {}, the commit applied before it: a \
             rewind; its deletes count as one batch against max_delete_fraction",
            r.batch.commit, r.batch.from
        );
    }
    crate::engine::check_spec_sites(&config, &mut specs);
    for d in &specs.diagnostics {
        eprintln!("{d}");
    }
    Ok(Inputs {
        config,
        specs,
        commit,
        refused,
        rewound,
    })
}

/// Takes the state directory for this process (one proxsync per state directory), or says
/// who holds it.
fn hold_state_dir(config: &Config) -> Result<crate::shell::instance_lock::InstanceLock, ExitCode> {
    crate::shell::instance_lock::InstanceLock::acquire(&config.state_dir).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    })
}

/// `proxsync adopt NAME --vmid N` (`one`), or `--all-unverified` (`one` None; `yes`: confirm
/// them, else list them). Each confirmation is checked against the VM, then recorded: in the
/// state database, or through the running daemon, which holds it.
fn adopt_cmd(config_path: Option<PathBuf>, one: Option<(String, u32)>, yes: bool) -> ExitCode {
    let Inputs { config, specs, .. } =
        match load_inputs(config_path, &[], crate::source::Use::Inspect) {
            Ok(x) => x,
            Err(code) => return code,
        };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let records = match rt.block_on(crate::shell::control::plan_records(&config.state_dir)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}: {e}", config.state_dir.display());
            return ExitCode::FAILURE;
        }
    };
    // A spec two guests claim, left for a person to settle by name: not done as asked.
    let mut held = false;
    let confirm: Vec<(String, u32)> = match one {
        Some(one) => vec![one],
        None => {
            let claims =
                match rt.block_on(crate::engine::unverified_claims(&config, &specs, &records)) {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::FAILURE;
                    }
                };
            let crate::engine::ClaimsBySpec { single, contested } =
                crate::engine::claims_by_spec(claims);
            for c in &single {
                println!("{}\t{}", c.spec, claim_line(c));
            }
            for claims in contested.values() {
                for c in claims {
                    println!(
                        "{}\t{}\t{}: {}",
                        c.spec,
                        claim_line(c),
                        match c.standing {
                            crate::engine::Standing::Unverified => "marker does not verify",
                            crate::engine::Standing::Verified => "marker verifies",
                            crate::engine::Standing::Recorded => "the spec's record names it",
                        },
                        c.traits.describe()
                    );
                }
            }
            for (spec, claims) in &contested {
                let vmids: Vec<String> = claims.iter().map(|c| c.vmid.to_string()).collect();
                eprintln!(
                    "spec {spec} is claimed by {} guests ({}): anyone who may edit a guest's notes \
                     and tags can give it a spec's marker, so --yes confirms none of them. \
                     Compare them above (uuid, MACs, disks), then confirm the spec's own with: \
                     proxsync adopt {spec} --vmid N",
                    claims.len(),
                    vmids.join(", ")
                );
            }
            if !yes {
                eprintln!(
                    "{} guest(s) whose marker names this install but does not verify; nothing \
                     changed. Check them, then confirm them with --yes (a spec two guests claim \
                     only by name: proxsync adopt NAME --vmid N)",
                    single.len() + contested.values().flatten().count()
                );
                return ExitCode::SUCCESS;
            }
            held = !contested.is_empty();
            single.into_iter().map(|c| (c.spec, c.vmid)).collect()
        }
    };
    let mut failed = false;
    for (name, vmid) in confirm {
        let checked = rt.block_on(crate::engine::adopt_by_hand(
            &config, &specs, &name, vmid, &records,
        ));
        let recorded = checked
            .map_err(|e| e.to_string())
            .and_then(|adoption| record_adoption(&rt, &config, &adoption));
        match recorded {
            Ok(()) => println!(
                "VM {vmid} is now spec {name}'s; the next cycle converges it and signs its marker"
            ),
            Err(e) => {
                eprintln!("error: {name} (VM {vmid}): {e}");
                failed = true;
            }
        }
    }
    if failed || held {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// One claim as `adopt --all-unverified` lists it: `VM N (name) on SITE/NODE`.
fn claim_line(c: &crate::engine::UnverifiedClaim) -> String {
    format!(
        "{} ({}) on {}/{}",
        c.kind.named(c.vmid),
        c.name.as_deref().unwrap_or("no name"),
        c.site,
        c.node
    )
}

/// Writes `adoption` in the state database, or asks the daemon to when it holds it.
fn record_adoption(
    rt: &tokio::runtime::Runtime,
    config: &Config,
    adoption: &crate::store::Adoption,
) -> Result<(), String> {
    match crate::shell::instance_lock::InstanceLock::acquire(&config.state_dir) {
        Ok(_lock) => {
            let store = crate::store::Store::open(&config.state_dir).map_err(|e| e.to_string())?;
            store.record_adoption(adoption, crate::util::clock::now_ms())
        }
        // The daemon runs: it holds the database, and records it.
        Err(_) => rt
            .block_on(crate::shell::control::record_adoption(
                &config.state_dir,
                adoption,
            ))
            .map(|_| ()),
    }
}

fn accept_site_cmd(config_path: Option<PathBuf>, site: String) -> ExitCode {
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
                identity.describe()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn reconcile_cmd(config_path: Option<PathBuf>, name: Option<String>) -> ExitCode {
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

fn status_cmd(config_path: Option<PathBuf>, name: Option<String>, json: bool) -> ExitCode {
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

/// `proxsync inventory`: the inventory on stdout, notes on files left out on stderr.
fn inventory_cmd(
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

/// `Daemon: running since ... (pid N); last cycle ...`, or `not running` and why, from the
/// control socket and `_summary.yaml`.
fn daemon_line(config: &Config) -> String {
    let now = crate::util::clock::system_now();
    let ago = |t: std::time::SystemTime| {
        crate::shell::status_view::human(now.duration_since(t).unwrap_or_default()) + " ago"
    };
    let summary: Option<crate::status::SummaryFile> =
        std::fs::read_to_string(config.status_dir.join(crate::status::SUMMARY_FILE))
            .ok()
            .and_then(|text| serde_saphyr::from_str(&text).ok());
    let last = summary.as_ref().map(|s| {
        let when = crate::status::parse_rfc3339(&s.last_cycle)
            .map(ago)
            .unwrap_or_else(|| "at an unknown time".into());
        let outcome = match &s.source_error {
            Some(e) => format!("the source could not be read: {e}"),
            None => format!(
                "{} of {} spec(s) Ready, {} stalled",
                s.ready, s.specs, s.stalled
            ),
        };
        format!("last cycle {when}: {outcome}")
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let state = match rt {
        Ok(rt) => rt.block_on(crate::shell::control::daemon_state(&config.state_dir)),
        Err(e) => Err(e.to_string()),
    };
    match state {
        Ok(d) => {
            let since = std::time::UNIX_EPOCH + std::time::Duration::from_millis(d.since_ms);
            format!(
                "Daemon:      running since {} ({}, pid {}); {}",
                crate::status::rfc3339(since),
                ago(since),
                d.pid,
                last.unwrap_or_else(|| "no cycle finished yet".into())
            )
        }
        Err(why) => format!(
            "Daemon:      not running ({why}); {}",
            match last {
                Some(last) => format!("what follows is from its {last}"),
                None => "no cycle ever finished".into(),
            }
        ),
    }
}

/// Whether `name` is a spec of the configured source (valid or not) and this install's: a
/// reconcile of anything else would do nothing. When the source cannot be read here the
/// daemon is asked all the same.
fn known_spec(config: &Config, name: &str) -> Result<(), String> {
    let Ok(read) = crate::source::read_configured(config, crate::source::Use::Inspect) else {
        return Ok(());
    };
    let set = &read.specs;
    if let Some(spec) = set.specs.iter().find(|s| s.name == name) {
        if !config.selects(&spec.labels) {
            return Err(format!(
                "spec {name} is outside [source] selector: another install reconciles it"
            ));
        }
        return Ok(());
    }
    if set.invalid_names().contains(name) {
        return Ok(());
    }
    let names: Vec<&str> = set.specs.iter().map(|s| s.name.as_str()).collect();
    let hint = crate::spec::closest(name, names.iter().copied())
        .map(|n| format!("; did you mean {n}?"))
        .unwrap_or_default();
    Err(format!(
        "no such spec: {name} (no spec in the source at commit {} has metadata.name {name}{hint})",
        &read.commit[..read.commit.len().min(12)]
    ))
}

fn run_cmd(config_path: Option<PathBuf>, once: bool, spec_paths: Vec<PathBuf>) -> ExitCode {
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
fn run_once(config_path: Option<PathBuf>, spec_paths: &[PathBuf]) -> ExitCode {
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

fn print_run_report(
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
            crate::execute::Outcome::Waiting { reason } => format!("waiting: {reason}"),
            crate::execute::Outcome::Failed(e) => {
                format!("FAILED {}: {}", e.category, e.message)
            }
        };
        println!(
            "{}  -> {outcome}",
            crate::engine::describe(&r.action, &by_name)
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
fn print_rewind(rewound: Option<&crate::source::Rewind>) {
    if let Some(r) = rewound {
        println!(
            "rewound: commit {} does not descend from {}, the commit applied before it",
            r.batch.commit, r.batch.from
        );
    }
}

fn plan_cmd(
    config_path: Option<PathBuf>,
    names: Vec<String>,
    spec_paths: Vec<PathBuf>,
    json: bool,
) -> ExitCode {
    let Inputs {
        config,
        specs,
        refused,
        rewound,
        ..
    } = match load_inputs(config_path, &spec_paths, crate::source::Use::Inspect) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let rt = match runtime() {
        Ok(rt) => rt,
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
    let records = match rt.block_on(crate::shell::control::plan_records(&config.state_dir)) {
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
    let planned = crate::engine::plan_view(&config, &specs, records, suspensions, rewind);
    let view = match rt.block_on(planned) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let scope = crate::shell::plan_report::Scope {
        names: names.as_ref(),
        from_files: !spec_paths.is_empty(),
    };
    let mut report = rt.block_on(crate::shell::plan_report::build(&view, &specs, &scope));
    report.errors.splice(
        0..0,
        crate::shell::plan_report::input_errors(&specs, names.as_ref(), refused.as_ref()),
    );
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => {
                let _ = writeln!(std::io::stdout().lock(), "{text}");
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
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
    ExitCode::from(report.exit_code())
}

/// `proxsync.1` and one page per subcommand (`proxsync-plan.1`, `proxsync-accept-site.1`),
/// from the clap definitions; returns how many.
fn manpages(dir: &std::path::Path) -> std::io::Result<usize> {
    fn write(dir: &std::path::Path, cmd: &clap::Command) -> std::io::Result<usize> {
        // `build` names each subcommand's page `proxsync-plan`, `proxsync-accept-site`.
        let name = cmd.get_display_name().unwrap_or(cmd.get_name());
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
        std::fs::write(dir.join(format!("{name}.1")), page)?;
        let mut n = 1;
        for sub in cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            n += write(dir, sub)?;
        }
        Ok(n)
    }
    std::fs::create_dir_all(dir)?;
    let mut cmd = <Cli as clap::CommandFactory>::command();
    cmd.build();
    write(dir, &cmd)
}

/// `proxsync accept commit`: records the acceptance, then asks a running daemon to reconcile
/// (the next `run --once` or daemon start applies it otherwise).
fn accept_commit_cmd(config_path: Option<PathBuf>, commit: &str) -> ExitCode {
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
    match rt.block_on(crate::shell::control::request(&config.state_dir, None)) {
        Ok(answer) => println!("the daemon was asked to apply it: {answer}"),
        Err(_) => println!(
            "no daemon answers on {}: the next `proxsync run --once`, or the daemon when it \
             starts, applies it",
            crate::shell::control::socket_path(&config.state_dir).display()
        ),
    }
    ExitCode::SUCCESS
}

fn schema(kind: &str) -> ExitCode {
    let schema = match kind {
        "ProxmoxLXC" => spec::lxc_schema(),
        "ProxmoxVMSet" => spec::set_schema(),
        "ProxmoxDefaults" => spec::defaults_schema(),
        _ => spec::json_schema(),
    };
    match serde_json::to_string_pretty(&schema) {
        Ok(text) => {
            let _ = writeln!(std::io::stdout().lock(), "{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Loads the config (`--config`, else the default path); on error says so on stderr.
fn load_config(config_path: Option<PathBuf>) -> Result<Config, ExitCode> {
    let path = config_path.unwrap_or_else(default_config_path);
    Config::load(&path).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    })
}

/// The default config path, used by subcommands that need a config.
pub fn default_config_path() -> PathBuf {
    PathBuf::from(config::DEFAULT_PATH)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer, for a subscriber under test.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_logged_value_cannot_forge_a_line_or_drive_the_terminal() {
        use tracing_subscriber::layer::SubscriberExt;
        let buf = Buffer::default();
        let writer = buf.clone();
        let subscriber =
            tracing_subscriber::registry().with(super::stderr_layer(move || writer.clone(), false));
        // What a committer can name a spec file, and what PVE or a guest can say.
        let file = "vms/x.yaml\n2025-01-01T00:00:00Z  INFO proxsync: forged\u{1b}[2J\u{202e}";
        let message = format!("{file}: error: bad\r\u{9b}31m");
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(file = %file, spec = "web\n01", "{message}");
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(out.matches('\n').count(), 1, "{out}");
        assert!(out.ends_with('\n'), "{out}");
        assert!(
            !out.trim_end()
                .chars()
                .any(|c| c.is_control() || crate::shell::status_view::is_unsafe(c)),
            "{out:?}"
        );
        assert!(
            out.contains(
                "vms/x.yaml\\n2025-01-01T00:00:00Z  INFO proxsync: forged\\u{1b}[2J\\u{202e}: \
                 error: bad\\r\\u{9b}31m file=vms/x.yaml\\n2025"
            ),
            "{out}"
        );
        assert!(out.contains(r#"spec="web\n01""#), "{out}");
    }
}
