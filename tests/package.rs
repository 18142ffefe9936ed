//! The Debian package as the one documented command builds it (`scripts/build-deb`, the
//! README's and docs/packaging.md's): it builds, and the package holds the binary, the unit,
//! the completions and man pages it names, depends on what the service runs, and its binary
//! runs. A release build: its own test binary, in its own target directory (`target/package`),
//! so it never waits on the tests' build. `scripts/test` installs cargo-deb for it.

use std::path::Path;
use std::process::Command;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_documented_command_builds_a_package_that_holds_what_it_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let has_cargo_deb = Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has_cargo_deb,
        "cargo-deb is missing: `cargo install cargo-deb --locked` (scripts/test installs it)"
    );
    let out = tempfile::tempdir().unwrap();
    run(Command::new(root.join("scripts/build-deb"))
        .arg("--output")
        .arg(out.path())
        .current_dir(root)
        .env("CARGO_TARGET_DIR", root.join("target/package")));
    let debs: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    assert_eq!(debs.len(), 1, "{debs:?}");
    let deb = &debs[0];

    let contents = run(Command::new("dpkg-deb").arg("--contents").arg(deb));
    for path in [
        "./usr/bin/proxsync",
        "./usr/lib/systemd/system/proxsync.service",
        "./usr/lib/sysusers.d/proxsync.conf",
        "./etc/proxsync/proxsync.toml",
        "./usr/share/bash-completion/completions/proxsync",
        "./usr/share/zsh/vendor-completions/_proxsync",
        "./usr/share/fish/vendor_completions.d/proxsync.fish",
        "./usr/share/man/man1/proxsync.1",
        "./usr/share/man/man1/proxsync-plan.1",
        "./usr/share/man/man5/proxsync.toml.5",
        "./usr/share/man/man5/proxsync-spec.5",
        "./usr/share/doc/proxsync/docs/packaging.md",
    ] {
        assert!(
            contents.lines().any(|l| l
                .split_whitespace()
                .last()
                .is_some_and(|p| p == path || p.strip_suffix(".gz") == Some(path))),
            "{path} is not in the package:\n{contents}"
        );
    }
    let depends = run(Command::new("dpkg-deb")
        .arg("--field")
        .arg(deb)
        .arg("Depends"));
    for dep in ["git", "adduser"] {
        assert!(depends.split([',', ' ']).any(|d| d == dep), "{depends}");
    }

    // The packaged binary runs, and is this version.
    let unpacked = tempfile::tempdir().unwrap();
    run(Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb)
        .arg(unpacked.path()));
    let version = run(Command::new(unpacked.path().join("usr/bin/proxsync")).arg("--version"));
    assert_eq!(
        version.trim(),
        format!("proxsync {}", env!("CARGO_PKG_VERSION"))
    );
    // Its completions complete names: the script the package ships is the binary's own.
    let shipped = std::fs::read_to_string(
        unpacked
            .path()
            .join("usr/share/bash-completion/completions/proxsync"),
    )
    .unwrap();
    assert!(shipped.contains("_proxsync_names"), "{shipped}");
}
