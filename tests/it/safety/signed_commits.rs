//! `[source] verify`: only a branch tip signed by a trusted key is applied. Commits signed
//! by a trusted key, unsigned, and signed by an untrusted key are pushed to a repository
//! (local `path` with ssh signatures, remote `url` with OpenPGP ones); `run --once`, `plan`,
//! `doctor` and the daemon apply the last verified commit while the tip is refused, and
//! `_summary.yaml` and `proxsync status` say which commit was refused and why. A replace ref
//! naming a trusted commit lends an untrusted tip nothing (local and remote). A rewind to an
//! older signed commit waits for `proxsync accept commit`; without `verify` it is applied,
//! reported, and its deletes are judged as one batch.
//!
//! Needs git, ssh-keygen and gpg (as CI's Debian image has); a missing tool fails the test
//! naming it.

use crate::common;

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
    assert_eq!(s["refusedCommit"]["reason"], "UnverifiedSignature");
    assert_eq!(s["refusedCommit"]["message"], "the commit is not signed");
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
        s["refusedCommit"]["message"]
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
    let reason = s["refusedCommit"]["message"].as_str().unwrap_or("");
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
            && s["refusedCommit"]["message"] == "the commit is not signed"
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

/// Trusts one fresh ssh key (`ci@example.org`) under `verify = "ssh"`; returns it and a
/// stranger's key, which is not trusted.
fn trust_one_ssh_key(ws: &Workspace) -> (PathBuf, PathBuf) {
    let trusted = ssh_key(ws, "trusted");
    let stranger = ssh_key(ws, "stranger");
    let public = std::fs::read_to_string(trusted.with_extension("pub")).unwrap();
    std::fs::write(
        ws.path("allowed_signers"),
        format!("ci@example.org {public}"),
    )
    .unwrap();
    enable_verify(
        ws,
        &format!(
            "verify = \"ssh\"\nallowed_signers = \"{}\"",
            ws.path("allowed_signers").display()
        ),
    );
    (trusted, stranger)
}

/// Makes the source the bare repository `vms.git` as a remote `file://` URL, fetched into the
/// mirror.
fn use_remote_source(ws: &Workspace) {
    ws.use_bare_source();
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let bare = ws.path("vms.git");
    let config = config.replace(
        &format!("path = \"{}\"", bare.display()),
        &format!("url = \"file://{}\"", bare.display()),
    );
    std::fs::write(ws.config(), config).unwrap();
}

/// The attack of a replace ref: a tip signed by an untrusted key, and `refs/replace/<tip>`
/// naming an older commit signed by the trusted key. `git verify-commit` would check the
/// replacement's signature while the tree is read from the tip itself: verification and
/// reading must see the same object, so the tip is refused and its specs are not applied.
fn a_replace_ref_does_not_verify_an_untrusted_tip(remote: bool) {
    require("git");
    require("ssh-keygen");
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    if remote {
        use_remote_source(&ws);
    }
    let (trusted, stranger) = trust_one_ssh_key(&ws);
    stage(&ws, &three_specs("gone-01"));
    let signed = commit_ssh(&ws, "three VMs", Some(&trusted));
    if remote {
        ws.push();
    }
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(names(&mut pve), ["gone-01", "stay-01", "stay-02"], "{out}");

    stage(&ws, &three_specs("evil-01"));
    let evil = commit_ssh(&ws, "signed by a stranger", Some(&stranger));
    if remote {
        ws.push();
    }
    ws.git(&["replace", &evil, &signed]);
    if remote {
        ws.git(&[
            "push",
            "-q",
            ws.path("vms.git").to_str().unwrap(),
            "refs/replace/*:refs/replace/*",
        ]);
    }
    let (ok, out) = ws.run_once();
    assert!(!ok, "the stranger's tip is refused: {out}");
    assert_eq!(
        names(&mut pve),
        ["gone-01", "stay-01", "stay-02"],
        "nothing of the stranger's commit is applied: {out}"
    );
    let s = summary(&ws);
    assert_eq!(s["commit"], signed.as_str(), "{s}");
    assert_eq!(s["refusedCommit"]["commit"], evil.as_str(), "{s}");
    assert!(
        s["refusedCommit"]["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("signed by a key that is not in the allowed signers file"),
        "{s}"
    );
    if remote {
        let mirror = ws.path("state/mirror.git");
        let refs = Command::new("git")
            .arg("--git-dir")
            .arg(&mirror)
            .args(["for-each-ref", "--format=%(refname)"])
            .output()
            .unwrap();
        let refs = String::from_utf8_lossy(&refs.stdout);
        assert!(
            !refs.contains("refs/replace/"),
            "replace refs are never fetched into the mirror: {refs}"
        );
    }
}

#[test]
fn a_replace_ref_does_not_verify_an_untrusted_tip_of_a_local_repository() {
    a_replace_ref_does_not_verify_an_untrusted_tip(false);
}

#[test]
fn a_replace_ref_pushed_to_a_remote_does_not_verify_an_untrusted_tip() {
    a_replace_ref_does_not_verify_an_untrusted_tip(true);
}

/// Moves the work repository's branch back to `commit`, as a force-push to an older commit
/// leaves it.
fn rewind_to(ws: &Workspace, commit: &str) {
    ws.git(&["reset", "-q", "--hard", commit]);
}

/// With `verify`, a tip signed by a trusted key that does not descend from the last applied
/// commit (the branch force-pushed back to an older signed commit) is refused as
/// `NotDescendant` until an operator accepts it by name; an acceptance holds over the commit
/// applied when it was given, and a fast-forward afterwards needs none.
#[test]
fn a_rewind_to_an_older_signed_commit_waits_for_an_acceptance() {
    require("git");
    require("ssh-keygen");
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let (trusted, _) = trust_one_ssh_key(&ws);
    stage(&ws, &three_specs("old-01"));
    let old = commit_ssh(&ws, "old-01", Some(&trusted));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(
        summary(&ws).get("rewind").is_none(),
        "a first commit is no rewind"
    );
    stage(&ws, &three_specs("new-01"));
    let new = commit_ssh(&ws, "new-01 replaces old-01", Some(&trusted));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(names(&mut pve), ["new-01", "stay-01", "stay-02"], "{out}");

    // Force-pushed back to the older signed commit: refused, nothing of it applied.
    rewind_to(&ws, &old);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert_eq!(names(&mut pve), ["new-01", "stay-01", "stay-02"], "{out}");
    let s = summary(&ws);
    assert_eq!(s["commit"], new.as_str(), "{s}");
    assert_eq!(s["refusedCommit"]["commit"], old.as_str(), "{s}");
    assert_eq!(s["refusedCommit"]["reason"], "NotDescendant", "{s}");
    let message = s["refusedCommit"]["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with(&format!(
            "it does not descend from the last applied commit {}",
            &new[..12]
        )) && message.ends_with(&format!("`proxsync accept commit {old}`")),
        "{s}"
    );
    let status = text(&ws.proxsync(&["status"]));
    assert!(
        status.contains(&format!("Tip refused: {}: it does not descend", &old[..7])),
        "{status}"
    );
    let doctor = text(&ws.proxsync(&["doctor"]));
    assert!(
        doctor.contains(&format!(
            "fix: if the rewind is intended, accept it: `proxsync accept commit {old}`"
        )),
        "{doctor}"
    );

    // Accepted by name (a prefix will do); no daemon runs, so the next run applies it.
    let out = ws.proxsync(&["accept", "commit", &old[..10]]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "accepted commit {old} over the last applied commit {new}"
        )) && text(&out).contains("no daemon answers"),
        "{}",
        text(&out)
    );
    let record = ws.path("state/accepted-commit");
    let recorded = std::fs::read_to_string(&record).unwrap();
    assert!(
        recorded.contains(&format!("commit {old}\nover {new}\naccepted-at ")),
        "{recorded}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&record).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "rewound: commit {old} does not descend from {new}, the commit applied before it"
        )),
        "{out}"
    );
    assert_eq!(names(&mut pve), ["old-01", "stay-01", "stay-02"], "{out}");
    let s = summary(&ws);
    assert_eq!(s["commit"], old.as_str(), "{s}");
    assert!(s.get("refusedCommit").is_none(), "{s}");
    assert_eq!(s["rewind"]["commit"], old.as_str(), "{s}");
    assert_eq!(s["rewind"]["from"], new.as_str(), "{s}");
    let status = text(&ws.proxsync(&["status"]));
    assert!(
        status.contains(&format!(
            "Rewound:     {} (does not descend from {}",
            &old[..7],
            &new[..7]
        )),
        "{status}"
    );

    // A new commit on top of it: a fast-forward, no longer reported as a rewind.
    stage(&ws, &three_specs("next-01"));
    let next = commit_ssh(&ws, "next-01", Some(&trusted));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let s = summary(&ws);
    assert_eq!(s["commit"], next.as_str(), "{s}");
    assert!(s.get("rewind").is_none(), "{s}");

    // The acceptance was given over `new`: back to `old` again, it is refused anew.
    rewind_to(&ws, &old);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let s = summary(&ws);
    assert_eq!(s["commit"], next.as_str(), "{s}");
    assert_eq!(s["refusedCommit"]["reason"], "NotDescendant", "{s}");

    // Accepting needs a commit that verifies, and says when none is needed.
    let unsigned = commit_ssh(&ws, "unsigned", None);
    let out = ws.proxsync(&["accept", "commit", &unsigned]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("does not verify"), "{}", text(&out));
    rewind_to(&ws, &next);
    let out = ws.proxsync(&["accept", "commit", &next]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("it is applied without acceptance"),
        "{}",
        text(&out)
    );
}

/// Without `verify`, a rewind is applied and reported, and its deletes are judged as one
/// batch: refused at first (3 of 5 managed VMs), they are refused again at the next run,
/// when the 3 VMs the rewind re-created would make them 3 of 8.
#[test]
fn without_verify_a_rewind_is_applied_reported_and_its_deletes_judged_as_one_batch() {
    require("git");
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let set = |names: &[&str]| -> Vec<(String, String)> {
        names
            .iter()
            .map(|n| {
                (
                    format!("{n}.yaml"),
                    spec(n, "pve1", "9000", &format!("    tags: [{n}]\n")),
                )
            })
            .collect()
    };
    let commit = |names: &[&str], message: &str| {
        let files = set(names);
        let files: Vec<(&str, String)> =
            files.iter().map(|(f, b)| (f.as_str(), b.clone())).collect();
        stage(&ws, &files);
        commit_ssh(&ws, message, None)
    };
    let old = commit(&["a0", "a1", "x0", "x1", "x2"], "five");
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    // Each x replaced by an n, one per commit: one delete in five each time.
    commit(&["a0", "a1", "n0", "x1", "x2"], "x0 -> n0");
    assert!(ws.run_once().0);
    commit(&["a0", "a1", "n0", "n1", "x2"], "x1 -> n1");
    assert!(ws.run_once().0);
    let new = commit(&["a0", "a1", "n0", "n1", "n2"], "x2 -> n2");
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(names(&mut pve), ["a0", "a1", "n0", "n1", "n2"]);
    assert!(summary(&ws).get("rewind").is_none());

    // Back to the first commit: applied and reported. Its deletes (n0-n2, 3 of 5) are refused;
    // the VMs it re-creates are made.
    rewind_to(&ws, &old);
    let (_, out) = ws.run_once();
    assert!(
        out.contains(&format!(
            "rewound: commit {old} does not descend from {new}, the commit applied before it"
        )),
        "{out}"
    );
    let all = ["a0", "a1", "n0", "n1", "n2", "x0", "x1", "x2"];
    assert_eq!(names(&mut pve), all, "{out}");
    let s = summary(&ws);
    assert_eq!(s["commit"], old.as_str(), "{s}");
    assert_eq!(s["rewind"]["commit"], old.as_str(), "{s}");
    assert_eq!(s["rewind"]["from"], new.as_str(), "{s}");
    let refused = format!(
        "refused to delete or release 3 of 5 managed VM(s): commit {} rewinds the branch from \
         {}, and a rewind's deletes count as one batch",
        &old[..12],
        &new[..12]
    );
    assert!(
        s["refused"][0].as_str().unwrap_or("").starts_with(&refused),
        "{s}"
    );
    assert!(
        text(&ws.proxsync(&["status"])).contains(&format!("Rewound:     {}", &old[..7])),
        "status shows it"
    );

    // The next run: the 3 deletes are still one batch of the 5 VMs the rewind found, not 3
    // of the 8 there are now.
    let (_, out) = ws.run_once();
    assert_eq!(names(&mut pve), all, "{out}");
    assert!(
        summary(&ws)["refused"][0]
            .as_str()
            .unwrap_or("")
            .starts_with(&refused),
        "{out}"
    );

    // Intended: max_delete_fraction raised for this change, the batch goes.
    let config = std::fs::read_to_string(ws.config()).unwrap();
    std::fs::write(
        ws.config(),
        config + "\n[reconcile]\nmax_delete_fraction = 0.75\n",
    )
    .unwrap();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(names(&mut pve), ["a0", "a1", "x0", "x1", "x2"], "{out}");
}

/// With the daemon running, `proxsync accept commit` asks it to reconcile: the accepted
/// rewind is applied at once, not at the next resync.
#[test]
fn an_acceptance_makes_the_running_daemon_apply_the_rewind() {
    require("git");
    require("ssh-keygen");
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let (trusted, _) = trust_one_ssh_key(&ws);
    stage(&ws, &three_specs("old-01"));
    let old = commit_ssh(&ws, "old-01", Some(&trusted));
    let daemon = Daemon::start(&ws);
    wait_summary(&ws, "the first commit applied", |s| {
        s["commit"] == old.as_str() && s["ready"] == 3
    });
    stage(&ws, &three_specs("new-01"));
    let new = commit_ssh(&ws, "new-01", Some(&trusted));
    wait_summary(&ws, "the second commit applied", |s| {
        s["commit"] == new.as_str() && s["ready"] == 3
    });

    let refused = |s: &serde_json::Value| {
        s["refusedCommit"]["commit"] == old.as_str()
            && s["refusedCommit"]["reason"] == "NotDescendant"
    };
    rewind_to(&ws, &old);
    wait_summary(&ws, "the rewind refused", refused);
    assert_eq!(names(&mut pve), ["new-01", "stay-01", "stay-02"]);
    // Pushed back to the commit in use: the refusal ends. Then the rewind again.
    rewind_to(&ws, &new);
    wait_summary(&ws, "the refusal gone", |s| {
        s.get("refusedCommit").is_none() && s["commit"] == new.as_str()
    });
    rewind_to(&ws, &old);
    wait_summary(&ws, "the rewind refused again", refused);
    let out = ws.proxsync(&["accept", "commit", &old]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("the daemon was asked to apply it"),
        "{}",
        text(&out)
    );
    wait_summary(&ws, "the accepted rewind applied", |s| {
        s["commit"] == old.as_str()
            && s.get("refusedCommit").is_none()
            && s["rewind"]["from"] == new.as_str()
            && s["ready"] == 3
    });
    assert_eq!(names(&mut pve), ["old-01", "stay-01", "stay-02"]);
    drop(daemon);
}
