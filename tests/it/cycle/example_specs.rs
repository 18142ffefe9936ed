//! The quick start's example holds: `specs.example` against the demo's clusters (`demo/*.json`,
//! the scenarios `scripts/demo` starts) passes `validate --config` and `doctor`, and one
//! `run --once` makes every spec Ready. A check of proxsync that the example no longer satisfies
//! (a new privilege, a new doctor check) fails here, in CI, rather than in a newcomer's first
//! command.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::fakepve::FakePve;
use serde_json::Value;

const SITES: [&str; 2] = ["us-sfvalley", "eu-fra"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A demo scenario and its token's secret.
fn scenario(site: &str) -> (Value, String) {
    let path = root().join(format!("demo/{site}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let scenario: Value = serde_json::from_str(&text).expect("a JSON scenario");
    let secret = scenario["tokens"][0]["secret"]
        .as_str()
        .expect("the scenario's token")
        .to_string();
    (scenario, secret)
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git is installed");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The demo's config (as `scripts/demo` writes it) over the example specs committed to a
/// repository in `dir`.
fn demo_config(dir: &Path, sites: &[(&str, &FakePve, String)]) -> PathBuf {
    let repo = dir.join("vms");
    copy_dir(&root().join("specs.example"), &repo);
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "Example specs"]);
    let mut config = format!(
        "install_id = \"demo\"\nstate_dir = \"{}\"\nstatus_dir = \"{}\"\n\n\
         [source]\npath = \"{}\"\nbranch = \"main\"\n",
        dir.join("state").display(),
        dir.join("status").display(),
        repo.display()
    );
    for (name, pve, secret) in sites {
        let token = dir.join(format!("{name}.token"));
        std::fs::write(&token, format!("{secret}\n")).unwrap();
        config.push_str(&format!(
            "\n[[site]]\nname = \"{name}\"\nendpoint = \"{}\"\n\
             token_id = \"proxsync@pve!gitops\"\ntoken_secret_file = \"{}\"\nca_file = \"{}\"\n",
            pve.url(),
            token.display(),
            pve.ca_file().display()
        ));
    }
    let path = dir.join("proxsync.toml");
    std::fs::write(&path, config).unwrap();
    path
}

fn proxsync(config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(args)
        .arg("--config")
        .arg(config)
        .current_dir(root())
        .env("PROXSYNC_LOG", "warn")
        .output()
        .expect("run proxsync")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_example_specs_pass_doctor_and_converge_on_the_demo_clusters() {
    let started: Vec<(&str, FakePve, String)> = SITES
        .iter()
        .map(|site| {
            let (scenario, secret) = scenario(site);
            (*site, FakePve::start(scenario), secret)
        })
        .collect();
    let sites: Vec<(&str, &FakePve, String)> = started
        .iter()
        .map(|(name, pve, secret)| (*name, pve, secret.clone()))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let config = demo_config(dir.path(), &sites);

    let out = proxsync(&config, &["validate", "specs.example"]);
    assert!(out.status.success(), "validate --config:\n{}", text(&out));

    let out = proxsync(&config, &["doctor", "--specs", "specs.example"]);
    assert!(
        out.status.success(),
        "doctor fails on the demo's clusters; fix the example or the scenario in demo/:\n{}",
        text(&out)
    );

    let out = proxsync(&config, &["run", "--once"]);
    assert!(
        out.status.success(),
        "run --once leaves specs not Ready:\n{}",
        text(&out)
    );
    let summary = std::fs::read_to_string(dir.path().join("status/_summary.yaml")).unwrap();
    let field = |key: &str| {
        summary
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}: ")))
            .map(str::to_string)
    };
    assert!(field("specs").is_some_and(|n| n != "0"), "{summary}");
    assert_eq!(field("specs"), field("ready"), "{summary}");
}
