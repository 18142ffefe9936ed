//! `proxsync adopt`: a spec's guest confirmed by hand, one or every unverified claim.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::Config;

use super::*;

/// `proxsync adopt NAME --vmid N` (`one`), or `--all-unverified` (`one` None; `yes`: confirm
/// them, else list them). Each confirmation is checked against the VM, then recorded: in the
/// state database, or through the running daemon, which holds it.
pub(crate) fn adopt_cmd(
    config_path: Option<PathBuf>,
    one: Option<(String, u32)>,
    yes: bool,
) -> ExitCode {
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
            print_claims(&single, &contested);
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

/// `adopt --all-unverified`'s listing: each claim on stdout, and on stderr why a spec two
/// guests claim is confirmed by none of them.
fn print_claims(
    single: &[crate::engine::UnverifiedClaim],
    contested: &std::collections::BTreeMap<String, Vec<crate::engine::UnverifiedClaim>>,
) {
    for c in single {
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
    for (spec, claims) in contested {
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
}

/// One claim as `adopt --all-unverified` lists it: `VM N (name) on SITE/NODE`.
pub(crate) fn claim_line(c: &crate::engine::UnverifiedClaim) -> String {
    format!(
        "{} ({}) on {}/{}",
        c.kind.named(c.vmid),
        c.name.as_deref().unwrap_or("no name"),
        c.site,
        c.node
    )
}

/// Writes `adoption` in the state database, or asks the daemon to when it holds it.
pub(crate) fn record_adoption(
    rt: &tokio::runtime::Runtime,
    config: &Config,
    adoption: &crate::store::Adoption,
) -> Result<(), String> {
    use crate::shell::instance_lock::NotLocked;
    match crate::shell::instance_lock::InstanceLock::acquire(&config.state_dir) {
        Ok(_lock) => {
            let store = crate::store::Store::open(&config.state_dir).map_err(|e| e.to_string())?;
            store.record_adoption(adoption, crate::util::clock::now_ms())
        }
        // The daemon runs: it holds the database, and records it.
        Err(NotLocked::Failed(why)) => Err(why),
        Err(NotLocked::Held(_)) => rt
            .block_on(crate::shell::control::record_adoption(
                &config.state_dir,
                adoption,
            ))
            .map(|_| ()),
    }
}
