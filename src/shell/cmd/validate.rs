//! `proxsync validate`: the specs checked, alone or against a config.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::Config;
use crate::spec;

/// `validate --config`'s checks of the specs against the config: each spec's site is a
/// configured one, a container's password file is where the config allows it, each spec's
/// node is a node of its site's cluster (when the site can be read: [`node_diagnostics`]),
/// and what a site's PVE release refuses. A spec failing one is not counted as valid.
pub(crate) fn check_against_config(config: &Config, set: &mut spec::SpecSet) {
    let sites: Vec<&str> = config.sites.iter().map(|s| s.name.as_str()).collect();
    let unknown_site = spec::check_sites(&set.specs, &sites);
    // A spec naming no configured site is not valid for this config: not counted as such.
    let names: std::collections::BTreeSet<&str> = unknown_site
        .iter()
        .filter_map(|d| d.spec.as_deref())
        .collect();
    let names: std::collections::BTreeSet<String> = names.into_iter().map(str::to_string).collect();
    set.specs.retain(|s| !names.contains(s.name.as_str()));
    set.diagnostics.extend(unknown_site);
    // A container's root password only from where the config allows it.
    let passwords = config.password_files();
    let refused =
        crate::spec::check_password_files(&set.specs, |path| passwords.check(path, false));
    let names: std::collections::BTreeSet<String> =
        (refused.iter()).filter_map(|d| d.spec.clone()).collect();
    set.specs.retain(|s| !names.contains(s.name.as_str()));
    set.diagnostics.extend(refused);
    // What a site's PVE release refuses (ha.group on PVE 9): asks only sites whose specs
    // hold such a field.
    if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        let strangers = rt.block_on(node_diagnostics(config, &set.specs));
        crate::engine::hold_invalid(set, strangers);
        set.diagnostics
            .extend(rt.block_on(crate::shell::doctor::version_diagnostics(
                config, &set.specs,
            )));
    }
}

/// Each spec naming a node its site's cluster does not have, as an error at its `node`
/// field (`plan::UnknownNode`, with the nodes the cluster has). Read-only: one
/// `GET /cluster/status` per configured site that has specs, all at once. A site that cannot
/// be read, or whose membership is not read whole (no quorum, a partial answer), is a warning:
/// its specs' nodes are not checked, as the daemon judges none on such an answer.
async fn node_diagnostics(config: &Config, specs: &spec::Specs) -> Vec<spec::Diagnostic> {
    let mut reads = tokio::task::JoinSet::new();
    for site in &config.sites {
        if !specs.iter().any(|s| s.site == site.name) {
            continue;
        }
        let site = site.clone();
        reads.spawn(async move {
            let options = crate::pve::ClientOptions::for_site(&site);
            let client = options.and_then(crate::pve::Client::new);
            let entries = match client {
                Ok(client) => client.cluster_status().await,
                Err(e) => Err(e),
            };
            (site.name, entries.map_err(|e| e.to_string()))
        });
    }
    let mut out = Vec::new();
    let mut answers = Vec::new();
    while let Some(joined) = reads.join_next().await {
        answers.extend(joined.ok());
    }
    answers.sort_by(|a, b| a.0.cmp(&b.0));
    for (site, entries) in answers {
        let first = specs.iter().find(|s| s.site == site);
        let Some(first) = first else { continue };
        let entries = match entries {
            Ok(entries) => entries,
            Err(e) => {
                out.push(node_warning(
                    first,
                    format!("cannot read site {site}'s nodes to check spec.node: {e}"),
                ));
                continue;
            }
        };
        let health = crate::pve::types::ClusterHealth::from_entries(&entries);
        let shape = crate::pve::types::ClusterShape::from_entries(&entries);
        if shape.cluster.is_none() {
            // A standalone host: its answer is no membership to judge by (`cluster_members`).
            continue;
        }
        let Some(members) = crate::model::cluster_members(&health, &shape) else {
            out.push(node_warning(
                first,
                format!(
                    "site {site}'s cluster has no quorum or did not list all its nodes: \
                     spec.node is not checked"
                ),
            ));
            continue;
        };
        for spec in specs.iter().filter(|s| s.site == site) {
            for unknown in crate::plan::unknown_nodes(spec, &members) {
                out.push(spec::node_error(spec, unknown.to_string()));
            }
        }
    }
    out
}

/// A warning at `spec`'s `node` field (the spec stays valid).
fn node_warning(spec: &spec::Spec, message: String) -> spec::Diagnostic {
    spec::Diagnostic {
        severity: spec::Severity::Warning,
        ..spec::node_error(spec, message)
    }
}

pub(crate) fn validate(config_path: Option<PathBuf>, paths: Vec<PathBuf>) -> ExitCode {
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
    // Files named alone (a pre-commit hook's staged files) are judged within their repository.
    let mut set = spec::load_paths_in_repository(&paths, secrets, max_specs);
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
pub(crate) fn once_each(diags: &[spec::Diagnostic]) -> Vec<&spec::Diagnostic> {
    let mut told = std::collections::HashSet::new();
    (diags.iter())
        .filter(|d| told.insert((d.file.as_str(), d.pos, d.message.as_str())))
        .collect()
}
