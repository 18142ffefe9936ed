//! The age identity that opens SOPS-encrypted specs (`sops_age_identity_file`, or the systemd
//! credential `sops-age-identity`): readable, private, its recipients named (what a
//! repository's `.sops.yaml` lists), and each encrypted spec opening with it. Never shows the
//! identity.

use super::{Check, Level, check};
use crate::config::Config;
use crate::spec::SpecSet;

pub(crate) fn check_sops(config: &Config, set: &SpecSet) -> Vec<Check> {
    let subject = "sops identity";
    let encrypted = set.specs.iter().filter(|s| s.sealed.is_some()).count();
    let undecryptable: Vec<&str> = set
        .diagnostics
        .iter()
        .filter(|d| d.decryption)
        .filter_map(|d| d.spec.as_deref())
        .collect();
    let Some(path) = config.sops_identity_path() else {
        if undecryptable.is_empty() {
            return Vec::new();
        }
        return vec![check(
            Level::Fail,
            subject,
            format!(
                "{} spec(s) are encrypted with SOPS and no age identity is configured",
                undecryptable.len()
            ),
            Some(
                "age-keygen -o /etc/proxsync/age.key; chown root:proxsync and chmod 640 it; set \
                 sops_age_identity_file = \"/etc/proxsync/age.key\" and add its recipient to \
                 the repository's .sops.yaml"
                    .into(),
            ),
        )];
    };
    let mut out = Vec::new();
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(&path) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o007 != 0 {
                out.push(check(
                    Level::Fail,
                    subject,
                    format!(
                        "{} has mode {mode:04o}: everyone can read it",
                        path.display()
                    ),
                    Some(format!(
                        "chmod 640 {0}; chown root:proxsync {0}",
                        path.display()
                    )),
                ));
            }
        }
    }
    let keyring = match crate::sops::Keyring::load(&path) {
        Ok(k) => k,
        Err(e) => {
            out.push(check(
                Level::Fail,
                subject,
                e,
                Some(format!(
                    "make it with age-keygen -o {}, readable by the proxsync group",
                    path.display()
                )),
            ));
            return out;
        }
    };
    out.push(check(
        Level::Ok,
        subject,
        format!(
            "{} holds the identities of {}; {encrypted} encrypted spec(s) open with it",
            path.display(),
            keyring.recipients().join(", ")
        ),
        None,
    ));
    if !undecryptable.is_empty() {
        out.push(check(
            Level::Fail,
            subject,
            format!(
                "these encrypted specs do not open with it: {}",
                undecryptable.join(", ")
            ),
            Some(format!(
                "add {} to their recipients (sops updatekeys), or install their identity",
                keyring.recipients().join(", ")
            )),
        ));
    }
    out
}
