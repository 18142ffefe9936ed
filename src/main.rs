//! The `proxsync` binary: parses arguments and hands them to the library.

use clap::Parser;

fn main() -> std::process::ExitCode {
    proxsync::shell::cli::run(proxsync::shell::cli::Cli::parse())
}
