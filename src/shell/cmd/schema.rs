//! `proxsync schema`: the specs' JSON Schemas, for editors' YAML plugins.

use std::io::Write;
use std::process::ExitCode;

use crate::spec;

pub(crate) fn schema(kind: &str) -> ExitCode {
    let schema = match kind {
        "ProxmoxLXC" => spec::lxc_schema(),
        "ProxmoxVMSet" => spec::set_schema(),
        "ProxmoxImage" => spec::image_schema(),
        "ProxmoxTemplate" => spec::template_schema(),
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
