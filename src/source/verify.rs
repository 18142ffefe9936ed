//! Signed commits (`[source] verify`): whether a commit carries a valid signature by a trusted
//! key, and the last commit that did, remembered in the state directory.
//!
//! The signature is checked by the system `git verify-commit` (as Flux's `spec.verify` checks
//! a GitRepository), which runs `ssh-keygen -Y verify` or `gpg --verify`; proxsync only reads
//! their verdict. git runs with a clean environment (`HOME` an empty temporary directory, no
//! system or global config) and every setting that decides trust is given on its command line,
//! which overrides the repository's own config: neither the daemon user's config nor the
//! repository's can change what is trusted. An OpenPGP keyring is imported into a throwaway
//! `GNUPGHOME`, so only its keys count. The key files are never logged beyond their path.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::CommitVerification;

/// How long one `git verify-commit` (or the keyring import) may take before it is killed and
/// the commit refused.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(30);

/// The file in `state_dir` naming the last verified commit.
pub(crate) const VERIFIED_FILE: &str = "verified-commit";

/// A branch tip that was not applied: its commit id, the kind of refusal, and why (the
/// message saying what to do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub commit: String,
    pub kind: crate::gate::commit::RefusalKind,
    pub reason: String,
}

/// The kind of signature a commit carries (from its armour header, to say why one of the
/// wrong kind is refused; the signature itself is checked by git).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ssh,
    OpenPgp,
    X509,
    Unknown,
}

impl Kind {
    fn of(signature: &[u8]) -> Kind {
        let text = String::from_utf8_lossy(signature);
        let text = text.trim_start();
        if text.starts_with("-----BEGIN SSH SIGNATURE-----") {
            Kind::Ssh
        } else if text.starts_with("-----BEGIN PGP SIGNATURE-----") {
            Kind::OpenPgp
        } else if text.starts_with("-----BEGIN SIGNED MESSAGE-----") {
            Kind::X509
        } else {
            Kind::Unknown
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Ssh => "an ssh",
            Kind::OpenPgp => "an OpenPGP",
            Kind::X509 => "an X.509",
            Kind::Unknown => "an unknown kind of",
        }
    }
}

/// Checks that `commit` in the repository at `repo` (bare or not) is signed by a key `how`
/// trusts. Ok: who signed (the allowed signer's principal, or the OpenPGP key fingerprint).
/// Err: why the commit is refused, for status and logs (never key material).
pub(crate) fn verify_commit(
    repo: &Path,
    commit: &str,
    how: &CommitVerification,
) -> Result<String, String> {
    let want = match how {
        CommitVerification::Ssh { .. } => Kind::Ssh,
        CommitVerification::OpenPgp { .. } => Kind::OpenPgp,
    };
    match signature_kind(repo, commit)? {
        None => return Err("the commit is not signed".into()),
        Some(kind) if kind != want => {
            return Err(format!(
                "the commit carries {} signature, but [source] verify = {:?} accepts only {} signatures",
                kind.name(),
                verify_word(how),
                want.name().trim_start_matches("an ")
            ));
        }
        Some(_) => {}
    }
    let home = tempfile::Builder::new()
        .prefix("proxsync-verify.")
        .tempdir()
        .map_err(|e| format!("cannot verify: no temporary directory: {e}"))?;
    let mut cmd = clean_git(home.path());
    cmd.arg("--git-dir").arg(git_dir(repo));
    match how {
        CommitVerification::Ssh { allowed_signers } => {
            cmd.args(["-c", "gpg.format=ssh"])
                .arg("-c")
                .arg(config_path("gpg.ssh.allowedSignersFile", allowed_signers)?);
        }
        CommitVerification::OpenPgp { keyring } => {
            let gnupg = import_keyring(home.path(), keyring)?;
            cmd.env("GNUPGHOME", gnupg)
                .args(["-c", "gpg.format=openpgp"]);
        }
    }
    cmd.args(["verify-commit", "--raw", commit]);
    let out = run(cmd, home.path(), "git verify-commit")?;
    match how {
        CommitVerification::Ssh { .. } => ssh_verdict(out.success, &out.output),
        CommitVerification::OpenPgp { .. } => openpgp_verdict(out.success, &out.output),
    }
}

/// `"ssh"` or `"openpgp"`, as the config spells it.
pub(crate) fn verify_word(how: &CommitVerification) -> &'static str {
    match how {
        CommitVerification::Ssh { .. } => "ssh",
        CommitVerification::OpenPgp { .. } => "openpgp",
    }
}

/// The kind of the commit's signature, `None` when it has none.
fn signature_kind(repo: &Path, commit: &str) -> Result<Option<Kind>, String> {
    let cannot = |e: git2::Error| format!("cannot read commit {commit}: {}", e.message());
    super::allow_foreign_owner();
    let repo = git2::Repository::open(repo).map_err(cannot)?;
    let oid = git2::Oid::from_str(commit).map_err(cannot)?;
    match repo.extract_signature(&oid, None) {
        Ok((signature, _signed)) => Ok(Some(Kind::of(&signature))),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(cannot(e)),
    }
}

/// `git` with nothing of the user's environment or config: an empty `HOME`, no system or
/// global config, C locale (the verdict lines are read), and every program and setting that
/// decides trust pinned on the command line (which wins over the repository's config).
/// Replace objects are off: with `refs/replace/<tip>` naming another commit, git would check
/// that commit's signature while the specs are read (by libgit2, which knows no replace
/// refs) from the tip itself. The signature covers the commit's raw bytes, tree id
/// included, which grafts and a `shallow` file do not change.
fn clean_git(home: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("--no-replace-objects");
    cmd.env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("HOME", home)
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_NO_REPLACE_OBJECTS", "1");
    // The repository of a git server belongs to another user; proxsync only reads it (see
    // `super::allow_foreign_owner`), and the settings below override its config.
    for setting in [
        "safe.directory=*",
        "gpg.program=gpg",
        "gpg.openpgp.program=gpg",
        "gpg.x509.program=gpgsm",
        "gpg.ssh.program=ssh-keygen",
        "gpg.ssh.allowedSignersFile=/dev/null",
        "gpg.ssh.revocationFile=/dev/null",
        "gpg.minTrustLevel=undefined",
    ] {
        cmd.args(["-c", setting]);
    }
    cmd
}

/// `key=path`, refusing a path git could not take as one value.
fn config_path(key: &str, path: &Path) -> Result<String, String> {
    match path.to_str() {
        Some(p) if !p.contains('\n') => Ok(format!("{key}={p}")),
        _ => Err(format!(
            "cannot verify: the path {} is not valid UTF-8 on one line",
            path.display()
        )),
    }
}

/// The git directory of a repository: `.git` inside a work tree, else the repository itself.
fn git_dir(repo: &Path) -> PathBuf {
    if repo.join(".git").is_dir() {
        repo.join(".git")
    } else {
        repo.to_path_buf()
    }
}

/// Imports the keyring into `<home>/gnupg` (which never starts an agent) and returns it.
fn import_keyring(home: &Path, keyring: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let gnupg = home.join("gnupg");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&gnupg)
        .and_then(|()| std::fs::write(gnupg.join("gpg.conf"), "no-autostart\n"))
        .map_err(|e| format!("cannot verify: cannot prepare a GnuPG home: {e}"))?;
    if let Err(e) = std::fs::File::open(keyring) {
        return Err(format!(
            "cannot read the keyring {}: {e}",
            keyring.display()
        ));
    }
    let mut cmd = Command::new("gpg");
    cmd.env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("HOME", home)
        .env("LC_ALL", "C")
        .arg("--homedir")
        .arg(&gnupg)
        .args(["--batch", "--no-autostart", "--quiet", "--import"])
        .arg(keyring);
    let out = run(cmd, home, "gpg --import")?;
    if !out.success {
        return Err(format!(
            "cannot import the keyring {}: {}",
            keyring.display(),
            first_line(&out.output)
        ));
    }
    Ok(gnupg)
}

/// What a finished subprocess said.
struct Finished {
    success: bool,
    output: String,
}

/// Runs `cmd` with its output in files under `scratch`, killed after [`TIMEOUT`]. stdout and
/// stderr are read together (git's `--raw` verdict is on stderr; gpg's status lines share it).
fn run(mut cmd: Command, scratch: &Path, what: &str) -> Result<Finished, String> {
    let out_path = scratch.join("output");
    let file = std::fs::File::create(&out_path)
        .map_err(|e| format!("cannot verify: cannot create {}: {e}", out_path.display()))?;
    let file2 = file
        .try_clone()
        .map_err(|e| format!("cannot verify: {e}"))?;
    cmd.stdin(Stdio::null()).stdout(file).stderr(file2);
    let mut child = cmd.spawn().map_err(|e| {
        format!(
            "cannot verify: cannot run {} ({e}); install it",
            what.split(' ').next().unwrap_or(what)
        )
    })?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "cannot verify: {what} did not finish within {}s",
                    TIMEOUT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("cannot verify: waiting for {what}: {e}")),
        }
    };
    let bytes = std::fs::read(&out_path).unwrap_or_default();
    Ok(Finished {
        success: status.success(),
        output: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// The first non-empty line of a tool's output, cut to 200 characters.
fn first_line(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty());
    let line = line.unwrap_or("no message");
    line.chars().take(200).collect()
}

/// git's verdict on an ssh signature: exit status 0 and `Good "git" signature for PRINCIPAL`.
fn ssh_verdict(success: bool, output: &str) -> Result<String, String> {
    const GOOD_FOR: &str = "Good \"git\" signature for ";
    let principal = output.lines().find_map(|l| {
        let rest = l.trim().strip_prefix(GOOD_FOR)?;
        Some(rest.split(" with ").next().unwrap_or(rest).to_string())
    });
    if success && let Some(principal) = principal {
        return Ok(principal);
    }
    if output.contains("No principal matched") {
        // The signature is sound, but its key is not trusted: name the key's fingerprint.
        let key = output
            .split_whitespace()
            .find(|w| w.starts_with("SHA256:"))
            .map(|k| format!(" ({k})"))
            .unwrap_or_default();
        return Err(format!(
            "signed by a key that is not in the allowed signers file{key}"
        ));
    }
    Err(format!(
        "the ssh signature does not verify: {}",
        first_line(output)
    ))
}

/// git's verdict on an OpenPGP signature from gpg's status lines (`--raw`): exit status 0,
/// `GOODSIG` and `VALIDSIG`, and none of the lines that refuse.
fn openpgp_verdict(success: bool, output: &str) -> Result<String, String> {
    let mut valid = None;
    let mut good = false;
    for line in output.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("[GNUPG:]") {
            continue;
        }
        let status = words.next().unwrap_or("");
        let key = words.next().unwrap_or("?");
        let refused = match status {
            "GOODSIG" => {
                good = true;
                None
            }
            "VALIDSIG" => {
                valid = Some(key.to_string());
                None
            }
            "BADSIG" => Some(format!(
                "bad signature by key {key}: the commit does not match it"
            )),
            "EXPKEYSIG" => Some(format!("signed by key {key}, which has expired")),
            "REVKEYSIG" => Some(format!("signed by key {key}, which is revoked")),
            "EXPSIG" => Some("the signature has expired".to_string()),
            "NO_PUBKEY" => Some(format!("signed by key {key}, which is not in the keyring")),
            "ERRSIG" => Some(format!("the signature by key {key} cannot be checked")),
            _ => None,
        };
        // NO_PUBKEY follows ERRSIG and says more: the later, more precise reason wins.
        if let Some(reason) = refused
            && !(status == "ERRSIG" && output.contains("[GNUPG:] NO_PUBKEY"))
        {
            return Err(reason);
        }
    }
    match (success, good, valid) {
        (true, true, Some(fingerprint)) => Ok(fingerprint),
        _ => Err(format!(
            "the OpenPGP signature does not verify: {}",
            first_line(output)
        )),
    }
}

/// The size over which a key file is refused unread (a keyring of many keys is a few MiB).
const MAX_KEY_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Checks that a key file can be read by the daemon: a regular file, not huge.
fn readable_key_file(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if meta.len() > MAX_KEY_FILE_BYTES {
        return Err(format!(
            "{} is {} bytes; a key file may be at most {MAX_KEY_FILE_BYTES}",
            path.display(),
            meta.len()
        ));
    }
    std::fs::File::open(path)
        .map(drop)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Checks an allowed signers file (for `doctor`): every line but blanks and `#` comments is
/// `PRINCIPALS [OPTIONS] KEYTYPE BASE64KEY`, and ssh-keygen reads each key. Ok: the number
/// of keys. Errors name the line, never its key.
pub(crate) fn check_allowed_signers(path: &Path) -> Result<usize, String> {
    readable_key_file(path)?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let scratch = tempfile::Builder::new()
        .prefix("proxsync-verify.")
        .tempdir()
        .map_err(|e| format!("no temporary directory: {e}"))?;
    let mut keys = 0;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |why: &str| format!("{} line {}: {why}", path.display(), n + 1);
        let words: Vec<&str> = line.split_whitespace().collect();
        let key_at = words.iter().skip(1).position(|w| is_ssh_key_type(w));
        let (Some(i), Some(_)) = (key_at, key_at.and_then(|i| words.get(i + 2))) else {
            return Err(at(
                "expected `PRINCIPALS [OPTIONS] KEYTYPE BASE64KEY`, such as \
                 `ci@example.org ssh-ed25519 AAAAC3...` (see ssh-keygen(1) ALLOWED SIGNERS)",
            ));
        };
        let key = scratch.path().join("key.pub");
        std::fs::write(&key, format!("{} {}\n", words[i + 1], words[i + 2]))
            .map_err(|e| format!("cannot write {}: {e}", key.display()))?;
        let mut cmd = Command::new("ssh-keygen");
        cmd.arg("-l").arg("-f").arg(&key);
        let out = run(cmd, scratch.path(), "ssh-keygen -l")?;
        if !out.success {
            return Err(at(
                "ssh-keygen cannot read the key (a damaged or truncated key?)",
            ));
        }
        keys += 1;
    }
    if keys == 0 {
        return Err(format!(
            "{} holds no key: no commit can verify",
            path.display()
        ));
    }
    Ok(keys)
}

fn is_ssh_key_type(word: &str) -> bool {
    word.starts_with("ssh-") || word.starts_with("ecdsa-sha2-") || word.starts_with("sk-")
}

/// The keys of an OpenPGP keyring, as gpg reads them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct KeyringKeys {
    /// Key ids of the usable primary keys.
    pub usable: Vec<String>,
    /// Key ids of expired or revoked primary keys: their signatures are refused.
    pub unusable: Vec<String>,
}

/// Reads an OpenPGP keyring as verification will (imported into a throwaway home), for
/// `doctor`.
pub(crate) fn keyring_keys(keyring: &Path) -> Result<KeyringKeys, String> {
    readable_key_file(keyring)?;
    let home = tempfile::Builder::new()
        .prefix("proxsync-verify.")
        .tempdir()
        .map_err(|e| format!("no temporary directory: {e}"))?;
    let gnupg = import_keyring(home.path(), keyring)?;
    let mut cmd = Command::new("gpg");
    cmd.env_clear()
        .env("HOME", home.path())
        .env("LC_ALL", "C")
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .arg("--homedir")
        .arg(&gnupg)
        .args(["--batch", "--no-autostart", "--with-colons", "--list-keys"]);
    let out = run(cmd, home.path(), "gpg --list-keys")?;
    let keys = listed_keys(&out.output);
    if keys.usable.is_empty() && keys.unusable.is_empty() {
        return Err(format!(
            "{} holds no public key: no commit can verify",
            keyring.display()
        ));
    }
    Ok(keys)
}

/// The `pub` records of `gpg --with-colons` output: validity `e` (expired) or `r` (revoked)
/// is unusable.
fn listed_keys(output: &str) -> KeyringKeys {
    let mut keys = KeyringKeys::default();
    for line in output.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.first() != Some(&"pub") {
            continue;
        }
        let id = fields.get(4).copied().unwrap_or("?").to_string();
        match fields.get(1).copied() {
            Some("e" | "r") => keys.unusable.push(id),
            _ => keys.usable.push(id),
        }
    }
    keys
}

/// Remembers `commit` as the last verified tip of `branch` of `location` (atomically; only
/// when it changed).
pub(crate) fn remember(
    state_dir: &Path,
    location: &str,
    branch: &str,
    commit: &str,
) -> Result<(), String> {
    if last_verified(state_dir, location, branch).as_deref() == Some(commit) {
        return Ok(());
    }
    let path = state_dir.join(VERIFIED_FILE);
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    crate::util::state_dir::create_state_dir(state_dir).map_err(fail)?;
    let text = format!(
        "# The last commit whose signature proxsync verified ([source] verify); it is applied\n\
         # while the branch tip is refused. Written by proxsync.\n\
         source {location}\nbranch {branch}\ncommit {commit}\n"
    );
    let tmp = state_dir.join(format!(".{VERIFIED_FILE}.tmp"));
    std::fs::write(&tmp, text).map_err(fail)?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(fail)?;
    std::fs::rename(&tmp, &path).map_err(fail)
}

/// The last verified commit of `branch` of `location`, if one was remembered for them.
pub(crate) fn last_verified(state_dir: &Path, location: &str, branch: &str) -> Option<String> {
    let text = std::fs::read_to_string(state_dir.join(VERIFIED_FILE)).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map(str::to_string)
    };
    let commit = field("commit")?;
    let is_id = commit.len() >= 40 && commit.chars().all(|c| c.is_ascii_hexdigit());
    // Compared masked: a release before the masking wrote a URL's userinfo here.
    let source = field("source")?;
    (crate::redact::urls(&source) == crate::redact::urls(location)
        && field("branch")?.as_str() == branch
        && is_id)
        .then_some(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_good_signature_by_an_allowed_signer() {
        let out = "Good \"git\" signature for ci@example.org with ED25519 key SHA256:Hyt\n";
        assert_eq!(ssh_verdict(true, out), Ok("ci@example.org".into()));
        // A good line without a success exit, or a success without the line, is refused.
        assert!(ssh_verdict(false, out).is_err());
        assert!(ssh_verdict(true, "").is_err());
    }

    #[test]
    fn ssh_key_not_allowed_names_its_fingerprint() {
        let out = "Good \"git\" signature with ED25519 key SHA256:r1GU9G\nNo principal matched.\n";
        let why = ssh_verdict(false, out).unwrap_err();
        assert_eq!(
            why,
            "signed by a key that is not in the allowed signers file (SHA256:r1GU9G)"
        );
    }

    #[test]
    fn ssh_other_failures_quote_the_tool() {
        let why = ssh_verdict(false, "\nCould not verify signature.\n").unwrap_err();
        assert_eq!(
            why,
            "the ssh signature does not verify: Could not verify signature."
        );
    }

    #[test]
    fn openpgp_good_and_valid() {
        let out = "[GNUPG:] NEWSIG t@e\n[GNUPG:] GOODSIG BB80 Trusted <t@e>\n\
                   [GNUPG:] VALIDSIG 3A97 2026-11-23 1795399408 0 4 0 22 8 00 3A97\n\
                   [GNUPG:] TRUST_UNDEFINED 0 pgp\n";
        assert_eq!(openpgp_verdict(true, out), Ok("3A97".into()));
        assert!(openpgp_verdict(false, out).is_err());
        let only_good = "[GNUPG:] GOODSIG BB80 Trusted <t@e>\n";
        assert!(openpgp_verdict(true, only_good).is_err(), "VALIDSIG needed");
    }

    #[test]
    fn openpgp_refusals_say_why() {
        let cases = [
            (
                "[GNUPG:] ERRSIG 4B6D 22 8 00 1795399408 9 40B3\n[GNUPG:] NO_PUBKEY 4B6D\n",
                "signed by key 4B6D, which is not in the keyring",
            ),
            (
                "[GNUPG:] ERRSIG 4B6D 22 8 00 1795399408 4 40B3\n",
                "the signature by key 4B6D cannot be checked",
            ),
            (
                "[GNUPG:] BADSIG BB80 Trusted <t@e>\n",
                "bad signature by key BB80: the commit does not match it",
            ),
            (
                "[GNUPG:] EXPKEYSIG BB80 Trusted <t@e>\n[GNUPG:] VALIDSIG 3A97\n",
                "signed by key BB80, which has expired",
            ),
            (
                "[GNUPG:] REVKEYSIG BB80 Trusted <t@e>\n[GNUPG:] VALIDSIG 3A97\n",
                "signed by key BB80, which is revoked",
            ),
        ];
        for (out, want) in cases {
            // Even were git to exit 0, these lines refuse.
            assert_eq!(openpgp_verdict(true, out), Err(want.to_string()), "{out}");
        }
    }

    #[test]
    fn keyring_listing_sorts_usable_keys_from_expired_and_revoked() {
        let out = "tru::0:1:3:1:5\npub:u:255:22:BB8005B8064F6D6D:1795399408:::u:::scSC::::::23::0:\n\
                   fpr:::::::::3A97:\npub:e:255:22:1111222233334444:1:2::u:::sc::::::23::0:\n\
                   pub:r:255:22:5555666677778888:1:::u:::sc::::::23::0:\n";
        assert_eq!(
            listed_keys(out),
            KeyringKeys {
                usable: vec!["BB8005B8064F6D6D".into()],
                unusable: vec!["1111222233334444".into(), "5555666677778888".into()],
            }
        );
    }

    #[test]
    fn allowed_signers_lines_are_checked_without_showing_keys() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("allowed_signers");
        std::fs::write(&file, "# trusted\n\nnot a key line\n").unwrap();
        let err = check_allowed_signers(&file).unwrap_err();
        assert!(
            err.contains("allowed_signers line 3: expected `PRINCIPALS"),
            "{err}"
        );
        std::fs::write(&file, "ci@example.org ssh-ed25519 AAAAsecretish\n").unwrap();
        let err = check_allowed_signers(&file).unwrap_err();
        assert!(
            err.contains("line 1: ssh-keygen cannot read the key"),
            "{err}"
        );
        assert!(!err.contains("AAAAsecretish"), "{err}");
        std::fs::write(&file, "# nothing\n").unwrap();
        assert!(
            check_allowed_signers(&file)
                .unwrap_err()
                .contains("holds no key")
        );
        let missing = dir.path().join("missing");
        assert!(
            check_allowed_signers(&missing)
                .unwrap_err()
                .contains("missing")
        );
    }

    fn run_ok(cmd: &mut Command) -> String {
        let out = cmd.output().expect("the tool is installed");
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Commits in `repo`, signed with the ssh key `key`; returns the commit id.
    fn signed_commit(repo: &Path, key: &Path) -> String {
        run_ok(
            Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@e", "-c"])
                .args(["gpg.format=ssh", "-c"])
                .arg(format!("user.signingkey={}", key.display()))
                .args(["commit", "-q", "--allow-empty", "-S", "-m", "signed"])
                .current_dir(repo),
        );
        run_ok(
            Command::new("git")
                .args(["rev-parse", "HEAD"])
                .current_dir(repo),
        )
    }

    /// An ed25519 key and an allowed signers file trusting it.
    fn key_and_signers(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let key = dir.join(name);
        run_ok(
            Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(&key),
        );
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let signers = dir.join(format!("{name}.allowed"));
        std::fs::write(&signers, format!("{name}@example.org {public}")).unwrap();
        (key, signers)
    }

    #[test]
    fn the_repository_config_cannot_change_what_is_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let repo = d.join("repo");
        run_ok(Command::new("git").args(["init", "-q"]).arg(&repo));
        let (trusted, allowed) = key_and_signers(d, "trusted");
        let (stranger, stranger_allowed) = key_and_signers(d, "stranger");
        let how = CommitVerification::Ssh {
            allowed_signers: allowed,
        };
        let good = signed_commit(&repo, &trusted);
        assert_eq!(
            verify_commit(&repo, &good, &how),
            Ok("trusted@example.org".into())
        );
        let bad = signed_commit(&repo, &stranger);

        // The repository's own config names another allowed signers file and a verifier that
        // approves everything: the settings on git's command line win.
        let fake = d.join("approve-all");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho 'Good \"git\" signature for trusted@example.org with ED25519 key SHA256:x'\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = repo.join(".git/config");
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(&format!(
            "[gpg \"ssh\"]\n\tallowedSignersFile = {}\n\tprogram = {}\n",
            stranger_allowed.display(),
            fake.display()
        ));
        std::fs::write(&config, text).unwrap();
        let why = verify_commit(&repo, &bad, &how).unwrap_err();
        assert!(
            why.starts_with("signed by a key that is not in the allowed signers file (SHA256:"),
            "{why}"
        );
        // The trusted commit still verifies, with the real ssh-keygen.
        assert_eq!(
            verify_commit(&repo, &good, &how),
            Ok("trusted@example.org".into())
        );
    }

    #[test]
    fn a_replace_ref_is_not_followed() {
        // `refs/replace/<stranger's commit>` names the trusted commit: git would check the
        // trusted signature, while the stranger's tree is what proxsync reads.
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        run_ok(Command::new("git").args(["init", "-q"]).arg(&repo));
        let (trusted, allowed) = key_and_signers(dir.path(), "trusted");
        let (stranger, _) = key_and_signers(dir.path(), "stranger");
        let how = CommitVerification::Ssh {
            allowed_signers: allowed,
        };
        let good = signed_commit(&repo, &trusted);
        let bad = signed_commit(&repo, &stranger);
        run_ok(
            Command::new("git")
                .args(["replace", &bad, &good])
                .current_dir(&repo),
        );
        let why = verify_commit(&repo, &bad, &how).unwrap_err();
        assert!(
            why.starts_with("signed by a key that is not in the allowed signers file"),
            "{why}"
        );
        assert_eq!(
            verify_commit(&repo, &good, &how),
            Ok("trusted@example.org".into())
        );
    }

    #[test]
    fn a_signature_of_the_other_kind_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        run_ok(Command::new("git").args(["init", "-q"]).arg(&repo));
        let (key, _) = key_and_signers(dir.path(), "trusted");
        let commit = signed_commit(&repo, &key);
        let how = CommitVerification::OpenPgp {
            keyring: dir.path().join("keyring.gpg"),
        };
        assert_eq!(
            verify_commit(&repo, &commit, &how),
            Err(
                "the commit carries an ssh signature, but [source] verify = \"openpgp\" \
                 accepts only OpenPGP signatures"
                    .into()
            )
        );
    }

    /// An expired signature is refused as expired (gpg says EXPSIG in place of GOODSIG).
    #[test]
    fn an_expired_openpgp_signature_says_so() {
        let out = "[GNUPG:] NEWSIG\n[GNUPG:] KEY_CONSIDERED ABCD 0\n\
                   [GNUPG:] EXPSIG 0123456789ABCDEF ci <ci@example.org>\n\
                   [GNUPG:] VALIDSIG ABCDEF0123456789 2026-01-01\n";
        assert_eq!(
            openpgp_verdict(true, out),
            Err("the signature has expired".to_string())
        );
    }

    /// A key file is a regular file the daemon can read, at most 16 MiB (a keyring of many
    /// keys is a few MiB): a directory, a missing file or a larger file is refused unread.
    #[test]
    fn a_key_file_is_a_readable_regular_file_of_at_most_16_mib() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys.asc");
        let file = std::fs::File::create(&keys).unwrap();
        // Sparse: no 16 MiB written.
        file.set_len(2 * 1024 * 1024).unwrap();
        assert_eq!(readable_key_file(&keys), Ok(()));
        file.set_len(MAX_KEY_FILE_BYTES).unwrap();
        assert_eq!(readable_key_file(&keys), Ok(()));
        file.set_len(MAX_KEY_FILE_BYTES + 1).unwrap();
        let why = readable_key_file(&keys).unwrap_err();
        assert!(why.contains("a key file may be at most 16777216"), "{why}");
        let why = readable_key_file(dir.path()).unwrap_err();
        assert!(why.ends_with("is not a regular file"), "{why}");
        assert!(readable_key_file(&dir.path().join("missing")).is_err());
    }

    /// A path goes into git's `-c key=value` only on one line: a newline would start another
    /// setting.
    #[test]
    fn a_config_path_is_one_line() {
        assert_eq!(
            config_path(
                "gpg.ssh.allowedSignersFile",
                Path::new("/etc/proxsync/signers")
            ),
            Ok("gpg.ssh.allowedSignersFile=/etc/proxsync/signers".to_string())
        );
        let why = config_path("k", Path::new("/tmp/a\ngpg.program=/bin/sh")).unwrap_err();
        assert!(why.contains("not valid UTF-8 on one line"), "{why}");
    }

    /// An OpenPGP keyring gpg cannot import is an error, never an empty trust list. Needs gpg
    /// (Debian: apt install gpg), as `[source] verify` with OpenPGP keys does.
    #[test]
    fn a_keyring_gpg_cannot_import_is_an_error() {
        let home = tempfile::tempdir().unwrap();
        let keyring = home.path().join("keys.asc");
        std::fs::write(&keyring, "not an OpenPGP key\n").unwrap();
        let why = import_keyring(home.path(), &keyring).unwrap_err();
        assert!(
            why.starts_with(&format!("cannot import the keyring {}", keyring.display())),
            "{why}"
        );
        let missing = home.path().join("missing.asc");
        let home = tempfile::tempdir().unwrap();
        let why = import_keyring(home.path(), &missing).unwrap_err();
        assert!(why.starts_with("cannot read the keyring"), "{why}");
    }

    /// A commit with no signature reads as unsigned; a commit object that cannot be read (here
    /// a corrupt loose object) is an error, never taken for an unsigned commit.
    #[test]
    fn an_unreadable_commit_is_an_error_not_unsigned() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let tree = repo.treebuilder(None).unwrap().write().unwrap();
        let tree = repo.find_tree(tree).unwrap();
        let who = git2::Signature::now("t", "t@example.org").unwrap();
        let commit = repo
            .commit(None, &who, &who, "unsigned", &tree, &[])
            .unwrap()
            .to_string();
        assert_eq!(signature_kind(dir.path(), &commit), Ok(None));
        let corrupt = "ab".repeat(20);
        let objects = dir.path().join(".git/objects").join(&corrupt[..2]);
        std::fs::create_dir_all(&objects).unwrap();
        std::fs::write(objects.join(&corrupt[2..]), b"not a zlib stream").unwrap();
        let err = signature_kind(dir.path(), &corrupt).unwrap_err();
        assert!(
            err.starts_with(&format!("cannot read commit {corrupt}")),
            "{err}"
        );
    }

    #[test]
    fn signature_kinds_from_the_armour() {
        assert_eq!(Kind::of(b"-----BEGIN SSH SIGNATURE-----\nU1N"), Kind::Ssh);
        assert_eq!(Kind::of(b"-----BEGIN PGP SIGNATURE-----\n"), Kind::OpenPgp);
        assert_eq!(Kind::of(b"-----BEGIN SIGNED MESSAGE-----"), Kind::X509);
        assert_eq!(Kind::of(b"junk"), Kind::Unknown);
    }

    /// Only a commit id (40 or more hex digits) is read back: neither a short hex string nor a
    /// long word.
    #[test]
    fn a_remembered_commit_must_be_a_commit_id() {
        let dir = tempfile::tempdir().unwrap();
        for commit in ["abc123".to_string(), "z".repeat(40)] {
            std::fs::write(
                dir.path().join(VERIFIED_FILE),
                format!("source /srv/vms.git\nbranch main\ncommit {commit}\n"),
            )
            .unwrap();
            assert_eq!(
                last_verified(dir.path(), "/srv/vms.git", "main"),
                None,
                "{commit}"
            );
        }
    }

    /// `doctor`'s check of an allowed signers file: each key line read by ssh-keygen (ed25519
    /// and ECDSA types), comments and blanks skipped, the count of keys; a bad line named by
    /// its number. Needs ssh-keygen (Debian: openssh-client), as `[source] verify` does.
    #[test]
    fn allowed_signers_are_counted_and_a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut lines = vec!["# ci keys".to_string(), String::new()];
        for (kind, name) in [("ed25519", "a"), ("ecdsa", "b")] {
            let key = dir.path().join(name);
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", kind, "-N", "", "-C", "", "-f"])
                .arg(&key)
                .output()
                .expect("ssh-keygen runs (Debian: apt install openssh-client)");
            assert!(out.status.success(), "{out:?}");
            let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
            lines.push(format!("{name}@example.org {}", public.trim()));
        }
        let signers = dir.path().join("allowed_signers");
        std::fs::write(&signers, lines.join("\n") + "\n").unwrap();
        assert_eq!(check_allowed_signers(&signers), Ok(2));
        for bad in ["c@example.org not-a-key", "c@example.org ssh-ed25519"] {
            let mut with_bad = lines.clone();
            with_bad.push(bad.to_string());
            std::fs::write(&signers, with_bad.join("\n") + "\n").unwrap();
            let why = check_allowed_signers(&signers).unwrap_err();
            assert!(
                why.contains("allowed_signers line 5: expected"),
                "{bad}: {why}"
            );
        }
    }

    /// `doctor`'s reading of an OpenPGP keyring: a usable key is listed as usable. Needs gpg
    /// (Debian: apt install gpg).
    #[test]
    fn a_keyring_lists_its_usable_key() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("gnupg");
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&home)
                .unwrap();
        }
        // Key generation needs gpg's agent (started here, stopped at the end).
        let gpg = |args: &[&str]| {
            let out = Command::new("gpg")
                .arg("--homedir")
                .arg(&home)
                .args(["--batch", "--quiet", "--pinentry-mode", "loopback"])
                .args(args)
                .output()
                .expect("gpg runs (Debian: apt install gpg)");
            assert!(out.status.success(), "gpg {args:?}: {out:?}");
            out.stdout
        };
        gpg(&[
            "--passphrase",
            "",
            "--quick-gen-key",
            "ci@example.org",
            "ed25519",
            "sign",
            "1d",
        ]);
        let keyring = dir.path().join("keys.asc");
        std::fs::write(&keyring, gpg(&["--armor", "--export"])).unwrap();
        let keys = keyring_keys(&keyring).unwrap();
        assert_eq!((keys.usable.len(), keys.unusable.len()), (1, 0), "{keys:?}");
        let _ = Command::new("gpgconf")
            .arg("--homedir")
            .arg(&home)
            .args(["--kill", "all"])
            .output();
    }

    #[test]
    fn the_verified_commit_is_remembered_per_source_and_branch() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        assert_eq!(last_verified(&state, "/srv/vms.git", "main"), None);
        remember(&state, "/srv/vms.git", "main", &a).unwrap();
        assert_eq!(last_verified(&state, "/srv/vms.git", "main"), Some(a));
        remember(&state, "/srv/vms.git", "main", &b).unwrap();
        assert_eq!(
            last_verified(&state, "/srv/vms.git", "main"),
            Some(b.clone())
        );
        // Another branch or repository has no verified commit yet.
        assert_eq!(last_verified(&state, "/srv/vms.git", "staging"), None);
        assert_eq!(last_verified(&state, "/srv/other.git", "main"), None);
        std::fs::write(
            state.join(VERIFIED_FILE),
            "source /srv/vms.git\nbranch main\ncommit HEAD\n",
        )
        .unwrap();
        assert_eq!(
            last_verified(&state, "/srv/vms.git", "main"),
            None,
            "not an id"
        );
    }
}
