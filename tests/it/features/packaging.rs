//! The Debian package as `Cargo.toml`'s `[package.metadata.deb]` and `packaging/` make it:
//! every document the README links is installed where the link points, the completions and
//! man pages the binary generates are what the package ships, the control fields, and `dpkg
//! --purge` keeping the keys.

use std::path::Path;
use std::process::Command;

fn manifest() -> toml::Value {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    toml::from_str(&text).unwrap()
}

/// (source, destination) of every asset.
fn assets() -> Vec<(String, String)> {
    manifest()["package"]["metadata"]["deb"]["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a[0].as_str().unwrap().to_string(),
                a[1].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Where an asset source lands: `docs/*` → `usr/share/doc/proxsync/docs/<file>`.
fn installed(file: &str) -> Option<String> {
    assets().into_iter().find_map(|(src, dest)| {
        if src == file {
            return Some(dest);
        }
        let dir = src.strip_suffix('*')?;
        let name = file.strip_prefix(dir)?;
        (!name.contains('/') && dest.ends_with('/')).then(|| format!("{dest}{name}"))
    })
}

#[test]
fn every_document_the_readme_links_is_installed_where_the_link_points() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let readme_at = installed("README.md").expect("README installed");
    let doc_dir = readme_at.trim_end_matches("README.md");
    let mut links = 0;
    for part in readme.split("](").skip(1) {
        let target = part.split([')', '#']).next().unwrap_or_default();
        let path_like = target.contains('.')
            && target
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-'));
        if !path_like || target.starts_with('/') {
            continue;
        }
        links += 1;
        assert!(
            root.join(target).exists(),
            "the README links {target}, which is not in the repository"
        );
        assert_eq!(
            installed(target).as_deref(),
            Some(format!("{doc_dir}{target}").as_str()),
            "the README links {target}: installed elsewhere or not at all"
        );
    }
    assert!(links >= 8, "{links} relative links");
    assert!(installed("docs/cloud-init.md").is_some());
    assert!(
        installed("packaging/proxsync.toml")
            .iter()
            .any(|d| d.contains("examples"))
            || assets().iter().any(|(s, d)| s == "packaging/proxsync.toml"
                && d == "usr/share/doc/proxsync/examples/proxsync.toml"),
        "the example config the errors point to is installed"
    );
}

#[test]
fn control_fields_and_the_changelog() {
    let deb = &manifest()["package"]["metadata"]["deb"];
    let suggests = deb["suggests"].as_str().unwrap_or_default();
    assert!(
        suggests.contains("openssh-client") && suggests.contains("gnupg"),
        "{suggests}"
    );
    let changelog = deb["changelog"].as_str().expect("a changelog");
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(changelog)).unwrap();
    let version = manifest()["package"]["version"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.starts_with(&format!("proxsync ({version}-1) ")),
        "the changelog's first entry is this version: {text}"
    );
}

#[test]
fn the_file_list_in_packaging_md_names_every_installed_file() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/packaging.md"))
            .unwrap();
    for (_, dest) in assets() {
        let shown = format!("/{}", dest.trim_end_matches('/'));
        assert!(
            doc.contains(&shown),
            "docs/packaging.md does not name {shown}"
        );
    }
}

#[test]
fn the_completions_and_man_pages_the_package_ships_are_generated() {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_proxsync");
    let out = Command::new(bin)
        .args(["manpages"])
        .arg(dir.path().join("man"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut pages: Vec<String> = std::fs::read_dir(dir.path().join("man"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    pages.sort();
    for page in [
        "proxsync.1",
        "proxsync-plan.1",
        "proxsync-accept-site.1",
        "proxsync-completions.1",
    ] {
        assert!(pages.contains(&page.to_string()), "{pages:?}");
    }
    let plan = std::fs::read_to_string(dir.path().join("man/proxsync-plan.1")).unwrap();
    assert!(
        plan.contains("\\-\\-json") || plan.contains("--json"),
        "{plan}"
    );
    for (shell, marker) in [
        ("bash", "_proxsync()"),
        ("zsh", "#compdef proxsync"),
        ("fish", "complete -c proxsync"),
    ] {
        let out = Command::new(bin)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(
            script.contains("reconcile") && script.contains("plan"),
            "{shell}"
        );
    }
    // What scripts/build-deb generates is what the assets name.
    let build =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-deb"))
            .unwrap();
    for (src, _) in assets()
        .iter()
        .filter(|(s, _)| s.starts_with("target/assets/"))
    {
        let generated = src.trim_end_matches("/*.1").trim_end_matches("/*.5");
        assert!(
            build.contains(generated),
            "scripts/build-deb does not make {src}"
        );
    }
}

#[test]
fn purge_keeps_the_keys_and_says_where() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    std::fs::create_dir_all(r.join("var/lib/proxsync/status")).unwrap();
    std::fs::create_dir_all(r.join("etc/proxsync")).unwrap();
    std::fs::create_dir_all(r.join("var/backups")).unwrap();
    std::fs::write(r.join("var/lib/proxsync/marker.key"), "ab".repeat(32)).unwrap();
    std::fs::write(r.join("var/lib/proxsync/proxsync.redb"), "db").unwrap();
    std::fs::write(r.join("etc/proxsync/age.key"), "AGE-SECRET-KEY-1X").unwrap();
    std::fs::write(r.join("etc/proxsync/lab.token"), "secret").unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/postrm");
    let out = Command::new("sh")
        .arg(&script)
        .arg("purge")
        .env("DPKG_ROOT", r)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!r.join("var/lib/proxsync").exists(), "the state goes");
    assert!(!r.join("etc/proxsync").exists(), "the token goes");
    let kept: Vec<_> = std::fs::read_dir(r.join("var/backups"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        std::fs::read_to_string(kept[0].join("marker.key")).unwrap(),
        "ab".repeat(32)
    );
    assert!(kept[0].join("age.key").exists());
    let shown = kept[0].strip_prefix(r).unwrap().display().to_string();
    assert!(
        said.contains(&format!("kept marker.key in /{shown}/")),
        "{said}"
    );
}

/// The bash completion offers the specs that have a status file and the config's sites, read
/// by `proxsync complete-names` through the `--config` on the command line being completed.
#[test]
fn bash_completes_spec_and_site_names() {
    let pve = crate::common::FakePve::start(crate::common::default_scenario());
    let ws = crate::common::engine::Workspace::new(&pve);
    let status = ws.path("status");
    std::fs::create_dir_all(&status).unwrap();
    for file in ["web-01.yaml", "web-02.yaml", "db-01.yaml", "_summary.yaml"] {
        std::fs::write(status.join(file), "name: x\n").unwrap();
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_proxsync"));
    let complete = |words: &str| {
        let script = format!(
            "source <(proxsync completions bash)\nCOMP_WORDS=({words})\n\
             COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))\n\
             _proxsync_names proxsync \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
             printf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        let path = format!(
            "{}:{}",
            bin.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new("bash")
            .args(["-c", &script])
            .env("PATH", path)
            .env_remove("PROXSYNC_CONFIG")
            .output()
            .expect("bash");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let config = ws.config().display().to_string();
    assert_eq!(
        complete(&format!("proxsync --config {config} status web")),
        "web-01\nweb-02\n"
    );
    assert_eq!(
        complete(&format!("proxsync --config {config} suspend ''")),
        "db-01\nweb-01\nweb-02\n"
    );
    assert_eq!(
        complete(&format!("proxsync --config {config} events --spec d")),
        "db-01\n"
    );
    assert_eq!(
        complete(&format!("proxsync --config {config} status --site ''")),
        "lab\n"
    );
    assert_eq!(
        complete(&format!("proxsync --config {config} accept site ''")),
        "lab\n"
    );
    // Elsewhere, clap's own completion: the subcommands.
    assert!(
        complete(&format!("proxsync --config {config} pla")).contains("plan"),
        "subcommands"
    );
}
