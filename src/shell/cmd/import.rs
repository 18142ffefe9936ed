//! `proxsync import`: writes specs from a site's existing VMs, to stdout or a directory.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::Config;
use crate::import::{Imported, Selection};
use crate::pve::{Client, ClientOptions};

/// Imports the VMs of `site` that `selection` selects; `out`: a directory to write one
/// `<name>.yaml` per VM into (never overwriting a file), else stdout as one YAML stream.
/// `observe`: write observe-only specs.
pub(crate) fn run(
    config: &Config,
    site: &str,
    selection: &Selection,
    out: Option<&Path>,
    observe: bool,
) -> ExitCode {
    let Some(site_config) = config.site(site) else {
        let names: Vec<&str> = config.sites.iter().map(|s| s.name.as_str()).collect();
        eprintln!(
            "error: no site {site:?} in {} (sites: {})",
            config.path.display(),
            names.join(", ")
        );
        return ExitCode::FAILURE;
    };
    if selection.is_empty() {
        eprintln!(
            "error: name the VMs to import: --vmid N (repeatable), --pool P, --tag T, --node N, \
             or --unmanaged for every VM no proxsync install manages"
        );
        return ExitCode::FAILURE;
    }
    let taken = match out {
        Some(dir) => match existing_names(dir) {
            Ok(names) => names,
            Err(e) => {
                eprintln!("error: {}: {e}", dir.display());
                return ExitCode::FAILURE;
            }
        },
        None => BTreeSet::new(),
    };
    let client = match ClientOptions::for_site(site_config).and_then(Client::new) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: site {site}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = match rt.block_on(crate::import::import(
        &client, site, selection, taken, observe,
    )) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: site {site}: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (vmid, why) in &report.skipped {
        eprintln!("skipped VM {vmid}: {why}");
    }
    let written = match out {
        Some(dir) => write_files(dir, &report.specs),
        None => {
            let docs: Vec<&str> = report.specs.iter().map(|s| s.text.as_str()).collect();
            // A reader that stops early (`| head`) is no error, and no panic.
            let _ = std::io::Write::write_all(
                &mut std::io::stdout().lock(),
                docs.join("---\n").as_bytes(),
            );
            Ok(())
        }
    };
    if let Err(e) = written {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    eprintln!(
        "{} spec(s) written, {} VM(s) skipped. {}",
        report.specs.len(),
        report.skipped.len(),
        if observe {
            "Commit them: each VM is observed (its drift reported, nothing changed) until you \
             remove managementPolicy: Observe; then it is adopted."
        } else {
            "Commit them: each VM is adopted at the next cycle (its marker line and tag written, \
             nothing else); `proxsync plan` shows it first."
        }
    );
    if report.specs.is_empty() && !report.skipped.is_empty() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The spec names the YAML files of `dir` already use (their stems), so no file is
/// overwritten and no name reused. A missing directory has none.
fn existing_names(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(names),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
            names.insert(stem.to_string());
        }
    }
    Ok(names)
}

/// One `<name>.yaml` per spec, created new (an existing file is an error, never overwritten).
fn write_files(dir: &Path, specs: &[Imported]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for spec in specs {
        let path: PathBuf = dir.join(format!("{}.yaml", spec.name));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        std::io::Write::write_all(&mut file, spec.text.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("wrote {} (VM {})", path.display(), spec.vmid);
    }
    Ok(())
}
