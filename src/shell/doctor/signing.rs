//! Signed commits (`[source] verify`): the tools verification runs, the key material (the
//! allowed signers file or the keyring: readable, not writable by others, every key readable;
//! shown by path and key id only), and whether the branch tip verifies.

use std::path::Path;
use std::process::Command;

use super::{Check, Level, check};
use crate::config::{CommitVerification, Config};
use crate::gate::commit::RefusalKind;
use crate::source::ReadSpecs;
use crate::source::verify;

const SUBJECT: &str = "signed commits";

/// The checks of `[source] verify`; none when it is off.
pub(super) fn check_signing(config: &Config) -> Vec<Check> {
    let Some(how) = &config.source.verify else {
        return Vec::new();
    };
    let mut out = vec![check_git()];
    let (path, content) = match how {
        CommitVerification::Ssh { allowed_signers } => (
            allowed_signers,
            verify::check_allowed_signers(allowed_signers).map(|n| {
                check(
                    Level::Ok,
                    SUBJECT,
                    format!(
                        "verify = \"ssh\": {} holds {n} trusted key(s)",
                        allowed_signers.display()
                    ),
                    None,
                )
            }),
        ),
        CommitVerification::OpenPgp { keyring } => (keyring, keyring_check(keyring)),
    };
    out.push(content.unwrap_or_else(|e| {
        check(
            Level::Fail,
            SUBJECT,
            e,
            Some(match how {
                CommitVerification::Ssh { .. } => format!(
                    "write one line per trusted key into {}: `PRINCIPAL KEYTYPE BASE64KEY` \
                     (docs/signing.md)",
                    path.display()
                ),
                CommitVerification::OpenPgp { .. } => format!(
                    "export the trusted public keys into {}: `gpg --export KEYID > {}`",
                    path.display(),
                    path.display()
                ),
            }),
        )
    }));
    out.extend(writable_by_others(path));
    out
}

/// The keyring's keys: usable ones counted, expired or revoked ones named.
fn keyring_check(keyring: &Path) -> Result<Check, String> {
    let keys = verify::keyring_keys(keyring)?;
    if keys.usable.is_empty() {
        return Err(format!(
            "{}: every key is expired or revoked ({}): no commit can verify",
            keyring.display(),
            keys.unusable.join(", ")
        ));
    }
    let message = format!(
        "verify = \"openpgp\": {} holds {} usable key(s)",
        keyring.display(),
        keys.usable.len()
    );
    if keys.unusable.is_empty() {
        return Ok(check(Level::Ok, SUBJECT, message, None));
    }
    Ok(check(
        Level::Warn,
        SUBJECT,
        format!(
            "{message}; expired or revoked, so their signatures are refused: {}",
            keys.unusable.join(", ")
        ),
        Some(format!(
            "export the renewed keys into {}, or remove those keys",
            keyring.display()
        )),
    ))
}

/// `git` runs and is new enough to verify ssh signatures (2.34).
fn check_git() -> Check {
    let version = Command::new("git")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let Some(version) = version else {
        return check(
            Level::Fail,
            SUBJECT,
            "cannot run `git`: commits cannot be verified, so none is applied",
            Some("install git (apt install git)".into()),
        );
    };
    let numbers: Vec<u32> = version
        .trim_start_matches("git version ")
        .split(|c: char| !c.is_ascii_digit())
        .take(2)
        .filter_map(|n| n.parse().ok())
        .collect();
    if numbers.as_slice() < [2, 34].as_slice() {
        return check(
            Level::Fail,
            SUBJECT,
            format!("{version}: verifying ssh signatures needs git 2.34 or later"),
            Some("install a newer git".into()),
        );
    }
    check(Level::Ok, SUBJECT, format!("{version} verifies"), None)
}

/// Whoever can write the key file decides which commits are applied.
fn writable_by_others(path: &Path) -> Option<Check> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o022 != 0).then(|| {
        check(
            Level::Warn,
            SUBJECT,
            format!(
                "{} has mode {mode:04o}: group or others can write it, and so choose which \
                 commits are trusted",
                path.display()
            ),
            Some(format!("chmod go-w {}", path.display())),
        )
    })
}

/// Whether the branch tip verified, from the source read of `doctor` (none when verify is
/// off).
pub(crate) fn check_tip(config: &Config, read: &ReadSpecs) -> Option<Check> {
    config.source.verify.as_ref()?;
    let short = |c: &str| c[..c.len().min(12)].to_string();
    Some(match &read.refused {
        None => check(
            Level::Ok,
            SUBJECT,
            format!("the branch tip {} verifies", short(&read.commit)),
            None,
        ),
        Some(r) => check(
            Level::Fail,
            SUBJECT,
            format!(
                "the branch tip {} is refused: {}; the last verified commit {} is applied instead",
                short(&r.commit),
                r.reason,
                short(&read.commit)
            ),
            Some(match r.kind {
                RefusalKind::UnverifiedSignature => {
                    "sign the commit with a trusted key (`git commit -S`, docs/signing.md) and push \
                     it, or add the signer's key to the key file and reload"
                        .into()
                }
                RefusalKind::NotDescendant => format!(
                    "if the rewind is intended, accept it: `proxsync accept commit {}`; if not, \
                     push the newer history back",
                    r.commit
                ),
            }),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::verify::Refusal;

    fn config(verify: &str) -> Config {
        let text = format!(
            "[source]\npath = \"/srv/vms.git\"\n{verify}\n[[site]]\nname = \"lab\"\n\
             endpoint = \"https://pve:8006\"\ntoken_id = \"a@pve!b\"\n"
        );
        Config::parse(Path::new("/etc/proxsync/proxsync.toml"), &text).unwrap()
    }

    fn read(refused: Option<Refusal>) -> ReadSpecs {
        ReadSpecs {
            specs: Default::default(),
            commit: "a".repeat(40),
            refused,
            rewound: None,
        }
    }

    #[test]
    fn nothing_to_check_when_verify_is_off() {
        assert!(check_signing(&config("")).is_empty());
        assert_eq!(check_tip(&config(""), &read(None)), None);
    }

    #[test]
    fn a_missing_key_file_fails_naming_it() {
        let checks = check_signing(&config(
            "verify = \"ssh\"\nallowed_signers = \"/nonexistent/allowed_signers\"",
        ));
        let fail = checks.iter().find(|c| c.level == Level::Fail).unwrap();
        assert!(
            fail.message.contains("/nonexistent/allowed_signers"),
            "{fail}"
        );
        let checks = check_signing(&config(
            "verify = \"openpgp\"\nkeyring = \"/nonexistent/keys.gpg\"",
        ));
        let fail = checks.iter().find(|c| c.level == Level::Fail).unwrap();
        assert!(fail.message.contains("/nonexistent/keys.gpg"), "{fail}");
    }

    #[test]
    fn a_refused_tip_fails_and_names_both_commits() {
        let c = config("verify = \"ssh\"\nallowed_signers = \"/etc/proxsync/allowed_signers\"");
        let refusal = Refusal {
            commit: "b".repeat(40),
            kind: RefusalKind::UnverifiedSignature,
            reason: "the commit is not signed".into(),
        };
        let tip = check_tip(&c, &read(Some(refusal))).unwrap();
        assert_eq!(tip.level, Level::Fail);
        assert_eq!(
            tip.message,
            "the branch tip bbbbbbbbbbbb is refused: the commit is not signed; the last \
             verified commit aaaaaaaaaaaa is applied instead"
        );
        assert_eq!(check_tip(&c, &read(None)).unwrap().level, Level::Ok);
    }
}
