//! `proxsync manpages` and `proxsync schema`: the man pages and the specs' JSON Schemas.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::{self, Config};
use crate::spec;

use super::*;

/// `proxsync.1` and one page per subcommand (`proxsync-plan.1`, `proxsync-accept-site.1`),
/// from the clap definitions; returns how many.
pub(crate) fn manpages(dir: &std::path::Path) -> std::io::Result<usize> {
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

pub(crate) fn schema(kind: &str) -> ExitCode {
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
