//! The command line: subcommands and their output. Business rules live in the other modules.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use super::cmd;
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
                                         also check that each spec's site is configured,
                                         and its node one of the site's cluster (read-only)

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
    /// doing it; exit 0 no changes, 2 changes or a spec not yet satisfied, 1 error (an
    /// unreachable site, an invalid spec, a refused commit, a spec set not read completely, a
    /// safety valve's refusal, a create the run's pre-flight refuses: the reason on stderr).
    #[command(after_help = "\
Examples:
  proxsync plan --config /etc/proxsync/proxsync.toml
  proxsync plan web-01 db-01                                  these specs only, never a removal
  proxsync plan --json | jq .changes                          the same as data
  proxsync plan --specs ./specs --format markdown > plan.md   for a pull request's comment
  proxsync plan --config proxsync.toml --specs ./specs        what a branch's specs would do
                                                              (specs not in ./specs count as
                                                              removed, and are labelled so)")]
    Plan {
        /// Only these specs (metadata.name): their changes, never another spec's removal.
        names: Vec<String>,
        /// Read specs from these files or directories instead of the configured git source.
        #[arg(long, value_name = "PATH")]
        specs: Vec<PathBuf>,
        /// JSON instead of text (the errors still on stderr); the same as --format json.
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// text, json, or markdown (for a pull request's comment: the plan as a diff block
        /// under its summary, then the errors).
        #[arg(long, value_name = "FORMAT", value_parser = ["text", "json", "markdown"])]
        format: Option<String>,
    },
    /// Ask the running daemon to reconcile now (one spec: also retry it at once if it is
    /// backing off).
    #[command(after_help = "\
Examples:
  proxsync reconcile                 everything, now
  proxsync reconcile web-01          web-01 now, even while it backs off
  proxsync reconcile web-01 --retry  web-01's change that was rolled back, tried again")]
    Reconcile {
        /// The spec (metadata.name); all specs when omitted.
        name: Option<String>,
        /// Try the spec's change again although it was rolled back (changePolicy: RolledBack).
        #[arg(long, requires = "name")]
        retry: bool,
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
        /// Only the specs of this site.
        #[arg(long, conflicts_with = "name")]
        site: Option<String>,
        /// Only the specs on this node.
        #[arg(long, conflicts_with = "name")]
        node: Option<String>,
        /// Only the specs that are not Ready.
        #[arg(long, conflicts_with = "name")]
        not_ready: bool,
    },
    /// Wait until the given specs (or every spec of the commit the daemon applied) are Ready,
    /// from the status files: exit 0 when they are, 3 as soon as one is Stalled, invalid or
    /// suspended (its reason on stderr), 124 when the timeout runs out first, 1 on an error (an
    /// unknown spec). No Proxmox VE call.
    #[command(after_help = "\
Examples:
  proxsync wait web-01 db-01 --timeout 5m         until both are Ready
  proxsync wait --commit \"$(git rev-parse HEAD)\"  after a push: until the daemon applied it
                                                  (or a later commit) and all specs are Ready
  proxsync wait web-02 --for deleted              until web-02's guest is gone, after its spec
                                                  left git

Progress lines are printed when something changes, then a summary.")]
    Wait {
        /// The specs (metadata.name); default: every spec of the commit the daemon applied.
        names: Vec<String>,
        /// What to wait for.
        #[arg(long = "for", value_enum, default_value = "ready")]
        until: WaitFor,
        /// Give up after this long (`30s`, `10m`, `1h`): exit 124.
        #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_timeout)]
        timeout: std::time::Duration,
        /// First wait until the daemon has applied this commit (7 to 40 hex digits) or one
        /// descending from it.
        #[arg(long, value_name = "SHA")]
        commit: Option<String>,
    },
    /// Print the daemon's actions (each with the PVE task it ran) and the specs' condition
    /// changes, one line each, from the status files; with --follow, what happens next too.
    #[command(after_help = "\
Examples:
  proxsync events                        every spec's recent attempts, tasks and conditions
  proxsync events --follow --since 10m   the last 10 minutes, then as it happens (Ctrl-C ends)
  proxsync events --spec web-01 --json   one spec, one JSON object per line

A line: time, spec, kind (action, task, condition, removed), message, and the task's UPID.
The status files keep each spec's last 10 attempts, its last task and each condition's last
transition; --follow reads them every second and tells what changed.")]
    Events {
        /// Keep printing what happens until interrupted.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Only what happened this recently (`30s`, `10m`, `1h`).
        #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
        since: Option<std::time::Duration>,
        /// Only this spec (metadata.name; repeatable).
        #[arg(long = "spec", value_name = "NAME")]
        specs: Vec<String>,
        /// One JSON object per line instead of text.
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

They complete spec names (those with a status file) and site names (the config's, the
--config on the line being completed or PROXSYNC_CONFIG), read without a lock or a Proxmox VE
call. The Debian package installs them for every user.")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the spec names (with a status file) or the site names, one per line: what the
    /// completion scripts offer. Reads the config and the status directory only.
    #[command(hide = true)]
    CompleteNames {
        /// Which names.
        what: crate::shell::completions::Names,
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
        /// The kind: ProxmoxVM (default), ProxmoxLXC, ProxmoxVMSet, ProxmoxImage, ProxmoxTemplate
        /// or ProxmoxDefaults.
        #[arg(long, default_value = "ProxmoxVM", value_parser = ["ProxmoxVM", "ProxmoxLXC", "ProxmoxVMSet", "ProxmoxImage", "ProxmoxTemplate", "ProxmoxDefaults"])]
        kind: String,
    },
}

/// What `proxsync wait` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WaitFor {
    /// `Ready` is True.
    Ready,
    /// The spec's status file is gone: its guest deleted (or released) after its spec left git.
    Deleted,
}

/// What `proxsync accept` accepts.
#[derive(Debug, Subcommand)]
pub enum Accept {
    /// Make the cluster SITE's endpoint now reaches the site's: a cycle refused it because it
    /// is not the cluster recorded for the site (reason SiteIdentityChanged).
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
                    cmd::validate::validate(cli.config, vec![file])
                }
                Err(diags) => {
                    diags.iter().for_each(|d| eprintln!("{d}"));
                    ExitCode::FAILURE
                }
            },
            None => cmd::validate::validate(cli.config, paths),
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
            cmd::doctor::doctor_exercise(cli.config, &opts)
        }
        Command::Doctor { specs, .. } => cmd::doctor::doctor(cli.config, specs),
        Command::Run { once, specs } => {
            // Only the long-running command: `status` and `plan` parse files on every core,
            // where one arena would make the threads queue for the allocator.
            crate::shell::malloc::tune_for_daemon();
            cmd::run::run_cmd(cli.config, once, specs)
        }
        Command::Reconcile { name, retry } => {
            cmd::reconcile::reconcile_cmd(cli.config, name, retry)
        }
        Command::Adopt {
            name,
            vmid,
            all_unverified,
            yes,
        } => {
            let one = name.zip(vmid);
            cmd::adopt::adopt_cmd(cli.config, one, all_unverified && yes)
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
            match cmd::load_config(cli.config) {
                Ok(config) => cmd::import::run(&config, &site, &selection, out.as_deref(), observe),
                Err(code) => code,
            }
        }
        Command::Suspend { name, all, reason } => match cmd::load_config(cli.config) {
            Ok(config) => {
                cmd::suspend::suspend(&config, name.filter(|_| !all), reason, cmd::known_spec)
            }
            Err(code) => code,
        },
        Command::Resume { name, all } => match cmd::load_config(cli.config) {
            Ok(config) => cmd::suspend::resume(&config, name.filter(|_| !all)),
            Err(code) => code,
        },
        Command::Status {
            name,
            json,
            site,
            node,
            not_ready,
        } => {
            let only = crate::shell::status_view::Only {
                site,
                node,
                not_ready,
            };
            cmd::status::status_cmd(cli.config, name, json, only)
        }
        Command::Events {
            follow,
            since,
            specs,
            json,
        } => cmd::events::events_cmd(
            cli.config,
            cmd::events::Args {
                follow,
                since,
                specs,
                json,
            },
        ),
        Command::Wait {
            names,
            until,
            timeout,
            commit,
        } => cmd::wait::wait_cmd(
            cli.config,
            cmd::wait::Args {
                names,
                until: match until {
                    WaitFor::Ready => cmd::wait::For::Ready,
                    WaitFor::Deleted => cmd::wait::For::Deleted,
                },
                timeout,
                commit,
            },
        ),
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
            cmd::inventory::inventory_cmd(cli.config, &output)
        }
        Command::Plan {
            names,
            specs,
            json,
            format,
        } => {
            let format = if json { Some("json".into()) } else { format };
            cmd::plan::plan_cmd(cli.config, names, specs, format.as_deref())
        }
        Command::Accept { what } => match what {
            Accept::Commit { commit } => cmd::accept::accept_commit_cmd(cli.config, &commit),
            Accept::Site { site } => cmd::accept::accept_site_cmd(cli.config, site),
        },
        Command::Schema { kind } => cmd::schema::schema(&kind),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            // Into memory first: clap_complete panics when its writer fails (a closed pipe).
            let script = crate::shell::completions::script(shell, &mut cmd);
            match std::io::stdout().write_all(&script) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
        Command::CompleteNames { what } => {
            // Quiet on any error: a tab press shows no noise.
            let path = cli.config.unwrap_or_else(cmd::default_config_path);
            let Ok(config) = crate::config::Config::load(&path) else {
                return ExitCode::FAILURE;
            };
            let mut out = String::new();
            for name in crate::shell::completions::names(what, &config) {
                out.push_str(&name);
                out.push('\n');
            }
            match std::io::stdout().write_all(out.as_bytes()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
        Command::Manpages { dir } => {
            match crate::shell::manpages::write(&dir, <Cli as clap::CommandFactory>::command()) {
                Ok(n) => {
                    println!("{n} man page(s) written to {}", dir.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {}: {e}", dir.display());
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// A `--timeout` or `--since` as the config writes durations (`30s`, `10m`, `1h30m`).
fn parse_timeout(text: &str) -> Result<std::time::Duration, String> {
    crate::util::duration::parse_duration(text)
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
