//! `proxsync plan`: what a cycle would do, in words or JSON. Asked of the running daemon when
//! one serves this config (it holds the specs parsed: at 50,000 specs parsing was most of a
//! plan), else made here.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::shell::control::PlanRequest;
use crate::shell::planning::{Held, plan};

use super::*;

pub(crate) fn plan_cmd(
    config_path: Option<PathBuf>,
    names: Vec<String>,
    spec_paths: Vec<PathBuf>,
    format: Option<&str>,
) -> ExitCode {
    let config_path = config_path.unwrap_or_else(default_config_path);
    let config = match load_config(Some(config_path.clone())) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    if spec_paths.is_empty() {
        let request = PlanRequest {
            config: std::path::absolute(&config_path).unwrap_or(config_path),
            names: names.clone(),
            format: format.map(str::to_string),
        };
        let asked = rt.block_on(crate::shell::control::plan_through_daemon(
            &config.state_dir,
            &request,
        ));
        match asked {
            Ok(planned) => return planned.print(),
            Err(why) => tracing::debug!(%why, "the daemon did not plan: planning here"),
        }
    }
    let planned = rt.block_on(plan(config, &names, &spec_paths, format, Held::Here));
    let code = planned.print();
    // The process ends here: the system takes the memory back at once, where freeing 50,000
    // specs, records and views one by one took a quarter of a second.
    std::mem::forget(planned.leftovers);
    code
}
