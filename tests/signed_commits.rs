//! `[source] verify`: only a branch tip signed by a trusted key is applied. Commits signed
//! by a trusted key, unsigned, and signed by an untrusted key are pushed to a repository
//! (local `path` with ssh signatures, remote `url` with OpenPGP ones); `run --once`, `plan`,
//! `doctor` and the daemon apply the last verified commit while the tip is refused, and
//! `_summary.yaml` and `proxsync status` say which commit was refused and why.
//!
//! Needs git, ssh-keygen and gpg (as CI's Debian image has); a missing tool fails the test
//! naming it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::engine::{Workspace, owned_vms, spec, text};
use common::{FakePve, default_scenario};

/// Fails (never skips) when a tool the test needs is missing.
fn require(tool: &str) {
    if let Err(e) = Command::new(tool).arg("--help").output() {
        panic!("{tool} is needed for this test and cannot be run: {e}");
    }
}

/// Turns on `[source] verify` with its key file (and makes the source a remote `url` when
/// asked).
fn enable_verify(ws: &Workspace, keys: &str) {
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let config = config.replace(
        "branch = \"main\"\n",
        &format!("branch = \"main\"\n{keys}\n"),
    );
    std::fs::write(ws.config(), config).unwrap();
}

/// Writes `files` as the repository's only specs and stages them.
fn stage(ws: &Workspace, files: &[(&str, String)]) {
    let repo = ws.path("repo");
    for entry in std::fs::read_dir(&repo).unwrap().flatten() {
        if entry.file_name().to_string_lossy().ends_with(".yaml") {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    for (name, body) in files {
        std::fs::write(repo.join(name), body).unwrap();
    }
    ws.git(&["add", "-A"]);
}

/// The id of the work repository's HEAD.
fn head(ws: &Workspace) -> String {
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(ws.path("repo"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// An ed25519 key pair without a passphrase; returns the private key's path.
fn ssh_key(ws: &Workspace, name: &str) -> PathBuf {
    let key = ws.path(name);
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .output()
        .expect("ssh-keygen runs");
    assert!(out.status.success(), "{}", text(&out));
    key
}

/// Commits the staged specs (or nothing: a commit of its own), signed with the ssh key `key` (unsigned when `None`).
fn commit_ssh(ws: &Workspace, message: &str, key: Option<&Path>) -> String {
    match key {
        Some(key) => {
            let signing = format!("user.signingkey={}", key.display());
            ws.git(&[
                "-c",
                "gpg.format=ssh",
                "-c",
                &signing,
                "commit",
                "-q",
                "--allow-empty",
                "-S",
                "-m",
                message,
            ]);
        }
        None => ws.git(&[
            "commit",
            "-q",
            "--allow-empty",
            "--no-gpg-sign",
            "-m",
            message,
        ]),
    }
    head(ws)
}

/// `_summary.yaml` as JSON values.
fn summary(ws: &Workspace) -> serde_json::Value {
    let text = std::fs::read_to_string(ws.path("status/_summary.yaml")).unwrap_or_default();
    serde_saphyr::from_str(&text).unwrap_or(serde_json::Value::Null)
}

fn names(pve: &mut FakePve) -> Vec<String> {
    let mut names: Vec<String> = owned_vms(pve).into_iter().map(|(_, n)| n).collect();
    names.sort();
    names
}

/// Two specs that stay and a third; the third's tag differs by name, so replacing one third
/// with another is not taken for a rename.
fn three_specs(third: &str) -> Vec<(&'static str, String)> {
    vec![
        ("a.yaml", spec("stay-01", "pve1", "9000", "")),
        ("b.yaml", spec("stay-02", "pve1", "9000", "")),
        (
            "c.yaml",
            spec(third, "pve1", "9000", &format!("    tags: [{third}]\n")),
        ),
    ]
}

#[test]
fn only_tips_signed_by_an_allowed_ssh_signer_are_applied() {
    require("git");
    require("ssh-keygen");
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let trusted = ssh_key(&ws, "trusted");
    let stranger = ssh_key(&ws, "stranger");
    let public = std::fs::read_to_string(trusted.with_extension("pub")).unwrap();
    let public: Vec<&str> = public.split_whitespace().take(2).collect();
    std::fs::write(
        ws.path("allowed_signers"),
        format!(
            "# who may change the VMs\nci@example.org {}\n",
            public.join(" ")
        ),
    )
    .unwrap();
    enable_verify(
        &ws,
        &format!(
            "verify = \"ssh\"\nallowed_signers = \"{}\"",
            ws.path("allowed_signers").display()
        ),
    );

    // Signed by the trusted key: applied.
    stage(&ws, &three_specs("gone-01"));
    let signed = commit_ssh(&ws, "three VMs", Some(&trusted));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(names(&mut pve), ["gone-01", "stay-01", "stay-02"], "{out}");
    assert_eq!(summary(&ws)["commit"], signed.as_str());

    // Unsigned, removing gone-01 and adding new-01: refused; the signed commit's specs stay
    // in use, so nothing is created or deleted.
    stage(&ws, &three_specs("new-01"));
    let unsigned = commit_ssh(&ws, "unsigned change", None);
    let (ok, out) = ws.run_once();
    assert!(!ok, "a refused tip is a failed run: {out}");
    assert!(
        out.contains(&format!(
            "refused commit {unsigned}: the commit is not signed"
        )),
        "{out}"
    );
    assert_eq!(names(&mut pve), ["gone-01", "stay-01", "stay-02"], "{out}");
    let s = summary(&ws);
    assert_eq!(
        s["commit"],
        signed.as_str(),
        "the verified commit is applied"
    );
    assert_eq!(s["refusedCommit"]["commit"], unsigned.as_str(), "{s}");
    assert_eq!(s["refusedCommit"]["reason"], "the commit is not signed");
    let status = text(&ws.proxsync(&["status"]));
    assert!(
        status.contains(&format!(
            "Tip refused: {}: the commit is not signed (not applied",
            &unsigned[..7]
        )),
        "{status}"
    );

    // plan never plans from the refused tip, and a refused tip is an error (exit 1): CI must
    // not pass a commit nobody could verify.
    let out = ws.proxsync(&["plan"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "error: commit {unsigned} was refused (the commit is not signed)"
        )),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("new-01"), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("warning: commit {unsigned} refused")),
        "{}",
        text(&out)
    );

    // doctor checks the key material and reports the refused tip.
    let doctor = text(&ws.proxsync(&["doctor"]));
    assert!(
        doctor.contains("ok   signed commits: verify = \"ssh\":")
            && doctor.contains("holds 1 trusted key(s)"),
        "{doctor}"
    );
    assert!(
        doctor.contains(&format!(
            "FAIL signed commits: the branch tip {} is refused: the commit is not signed",
            &unsigned[..12]
        )),
        "{doctor}"
    );

    // Signed, but by a key that is not allowed: refused too.
    let wrong = commit_ssh(&ws, "signed by a stranger", Some(&stranger));
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert_eq!(names(&mut pve), ["gone-01", "stay-01", "stay-02"], "{out}");
    let s = summary(&ws);
    assert_eq!(s["commit"], signed.as_str());
    assert_eq!(s["refusedCommit"]["commit"], wrong.as_str(), "{s}");
    assert!(
        s["refusedCommit"]["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("signed by a key that is not in the allowed signers file (SHA256:"),
        "{s}"
    );

    // A new tip signed by the trusted key: applied, the refusal cleared.
    let fixed = commit_ssh(&ws, "signed again", Some(&trusted));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(names(&mut pve), ["new-01", "stay-01", "stay-02"], "{out}");
    let s = summary(&ws);
    assert_eq!(s["commit"], fixed.as_str());
    assert!(s.get("refusedCommit").is_none(), "{s}");
}

/// A throwaway GnuPG home with two keys; the agent it starts is stopped on drop.
struct Gpg {
    home: tempfile::TempDir,
}

impl Gpg {
    fn new() -> Gpg {
        let home = tempfile::tempdir().unwrap();
        let gpg = Gpg { home };
        for uid in [
            "Trusted <trusted@example.org>",
            "Stranger <stranger@example.org>",
        ] {
            gpg.run(&[
                "--batch",
                "--passphrase",
                "",
                "--quick-gen-key",
                uid,
                "ed25519",
                "sign",
                "never",
            ]);
        }
        gpg
    }

    fn run(&self, args: &[&str]) -> Vec<u8> {
        let out = Command::new("gpg")
            .arg("--homedir")
            .arg(self.home.path())
            .args(args)
            .output()
            .expect("gpg runs");
        assert!(out.status.success(), "gpg {args:?}: {}", text(&out));
        out.stdout
    }
}

impl Drop for Gpg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .arg("--homedir")
            .arg(self.home.path())
            .args(["--kill", "all"])
            .output();
    }
}

/// Commits the staged specs signed by the OpenPGP key of `email`, then pushes.
fn commit_openpgp(ws: &Workspace, gpg: &Gpg, message: &str, email: &str) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=test", "-c", "user.email=test@example"])
        .args(["-c", "gpg.format=openpgp", "-c"])
        .arg(format!("user.signingkey={email}"))
        .args(["commit", "-q", "--allow-empty", "-S", "-m", message])
        .env("GNUPGHOME", gpg.home.path())
        .current_dir(ws.path("repo"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    ws.push();
    head(ws)
}

#[test]
fn a_remote_source_applies_only_tips_signed_by_a_keyring_key() {
    require("git");
    require("gpg");
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.use_bare_source();
    let gpg = Gpg::new();
    let keyring = gpg.run(&["--export", "--armor", "trusted@example.org"]);
    std::fs::write(ws.path("keyring.asc"), keyring).unwrap();
    // A remote `url`, fetched into the mirror, instead of the bare repository's path.
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let bare = ws.path("vms.git");
    let config = config.replace(
        &format!("path = \"{}\"", bare.display()),
        &format!("url = \"file://{}\"", bare.display()),
    );
    std::fs::write(ws.config(), config).unwrap();
    enable_verify(
        &ws,
        &format!(
            "verify = \"openpgp\"\nkeyring = \"{}\"",
            ws.path("keyring.asc").display()
        ),
    );

    stage(&ws, &[("web.yaml", spec("web-01", "pve1", "9000", ""))]);
    let signed = commit_openpgp(&ws, &gpg, "web", "trusted@example.org");
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(names(&mut pve), ["web-01"], "{out}");

    // Signed by a key outside the keyring: not applied.
    stage(
        &ws,
        &[
            ("web.yaml", spec("web-01", "pve1", "9000", "")),
            ("db.yaml", spec("db-01", "pve1", "9000", "    tags: [db]\n")),
        ],
    );
    let wrong = commit_openpgp(&ws, &gpg, "db", "stranger@example.org");
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert_eq!(names(&mut pve), ["web-01"], "{out}");
    let s = summary(&ws);
    assert_eq!(s["commit"], signed.as_str());
    assert_eq!(s["refusedCommit"]["commit"], wrong.as_str(), "{s}");
    let reason = s["refusedCommit"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("signed by key ") && reason.ends_with(", which is not in the keyring"),
        "{s}"
    );

    // The same change signed by the keyring's key: applied.
    let fixed = commit_openpgp(&ws, &gpg, "db, signed", "trusted@example.org");
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(names(&mut pve), ["db-01", "web-01"], "{out}");
    assert_eq!(summary(&ws)["commit"], fixed.as_str());
}

/// `proxsync run` with its log in a file; SIGTERM on drop.
struct Daemon {
    child: Child,
}

impl Daemon {
    fn start(ws: &Workspace) -> Daemon {
        let child = Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(["run", "--config"])
            .arg(ws.config())
            .env("PROXSYNC_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(ws.path("daemon.log")).unwrap())
            .spawn()
            .expect("start proxsync run");
        Daemon { child }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// Waits until `_summary.yaml` satisfies `pred`.
fn wait_summary(ws: &Workspace, what: &str, pred: impl Fn(&serde_json::Value) -> bool) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if pred(&summary(ws)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "no {what} within 60s; summary: {}\nlog:\n{}",
        summary(ws),
        std::fs::read_to_string(ws.path("daemon.log")).unwrap_or_default()
    );
}

#[test]
fn the_daemon_applies_nothing_unverified_and_keeps_the_last_verified_commit_across_a_restart() {
    require("git");
    require("ssh-keygen");
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let trusted = ssh_key(&ws, "trusted");
    let public = std::fs::read_to_string(trusted.with_extension("pub")).unwrap();
    std::fs::write(
        ws.path("allowed_signers"),
        format!("ci@example.org {public}"),
    )
    .unwrap();
    enable_verify(
        &ws,
        &format!(
            "verify = \"ssh\"\nallowed_signers = \"{}\"",
            ws.path("allowed_signers").display()
        ),
    );
    // An unsigned first commit: nothing to apply, and the summary says why.
    stage(&ws, &[("web.yaml", spec("web-01", "pve1", "9000", ""))]);
    let first = commit_ssh(&ws, "web, unsigned", None);
    let daemon = Daemon::start(&ws);
    wait_summary(&ws, "the first refusal", |s| {
        s["refusedCommit"]["commit"] == first.as_str()
            && s["refusedCommit"]["reason"] == "the commit is not signed"
            && s.get("commit").is_none()
    });
    assert!(
        text(&ws.proxsync(&["status"])).contains("Commit:      none yet"),
        "nothing applied"
    );
    assert_eq!(names(&mut pve), Vec::<String>::new());

    let signed = commit_ssh(&ws, "web, signed", Some(&trusted));
    wait_summary(&ws, "the signed commit applied", |s| {
        s["commit"] == signed.as_str() && s["ready"] == 1
    });

    // An unsigned push is noticed and refused; its new spec is not created.
    stage(
        &ws,
        &[
            ("web.yaml", spec("web-01", "pve1", "9000", "")),
            ("db.yaml", spec("db-01", "pve1", "9000", "")),
        ],
    );
    let unsigned = commit_ssh(&ws, "db, unsigned", None);
    wait_summary(&ws, "the refusal", |s| {
        s["refusedCommit"]["commit"] == unsigned.as_str()
    });
    assert_eq!(names(&mut pve), ["web-01"]);

    // After a restart the remembered verified commit is still the one applied.
    drop(daemon);
    std::fs::remove_file(ws.path("status/_summary.yaml")).unwrap();
    let daemon = Daemon::start(&ws);
    wait_summary(&ws, "the refusal after a restart", |s| {
        s["refusedCommit"]["commit"] == unsigned.as_str() && s["commit"] == signed.as_str()
    });
    assert_eq!(names(&mut pve), ["web-01"]);

    // Signed again: the daemon applies it.
    let fixed = commit_ssh(&ws, "db, signed", Some(&trusted));
    wait_summary(&ws, "the signed tip applied", |s| {
        s["commit"] == fixed.as_str() && s.get("refusedCommit").is_none() && s["ready"] == 2
    });
    assert_eq!(names(&mut pve), ["db-01", "web-01"]);
    drop(daemon);
}
