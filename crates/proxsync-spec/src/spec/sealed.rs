//! Spec documents encrypted with SOPS (`sops --encrypt --age <recipient> --encrypted-regex
//! '^userData$'`): the document's `sops` metadata is checked, `spec.forProvider.userData` is the
//! one value that may be encrypted (everything else proxsync writes to status files, logs and
//! PVE's config), and it is opened in place with the keyring after the file's MAC verifies.
//! Without a keyring (`validate` with no identity) only the structure is checked.
//!
//! Pure: the keyring is read by the caller. No diagnostic carries a decrypted value.

use super::diag::{Diagnostic, Pos};
use super::yaml::{Node, Value};
use crate::sops::{self, Keyring, Plain};

/// How a loader treats SOPS-encrypted documents.
#[derive(Clone, Copy)]
pub enum Secrets<'a> {
    /// Check the structure of encrypted values without opening them: the spec's `userData` is
    /// left out and a warning says so (`validate` without an identity only).
    StructureOnly,
    /// Open them with these identities; a document that does not open is invalid
    /// (`DecryptionFailed`).
    Decrypt(&'a Keyring),
}

/// The encrypted key path proxsync accepts.
const USER_DATA: [&str; 3] = ["spec", "forProvider", "userData"];

/// What became of a document.
pub(crate) enum Opened {
    /// Not encrypted: validated as it is.
    Plain,
    /// Decrypted in place; the `userData` node (its position) and its ciphertext, which
    /// hashes and names use instead of the plaintext.
    Decrypted { at: Pos, ciphertext: String },
    /// Structure checked, not decrypted: `userData` was removed from the document.
    Unopened(Diagnostic),
    /// Not usable: a structure error, or (`decryption`) the key or the MAC.
    Refused(Diagnostic),
}

/// Opens `doc` when it carries SOPS metadata (a top-level `sops` key), removing that key.
pub(crate) fn open(file: &str, doc: &mut Node, secrets: Secrets) -> Opened {
    let Value::Map(entries) = &mut doc.value else {
        return Opened::Plain;
    };
    let Some(i) = entries
        .iter()
        .position(|(k, _)| matches!(&k.value, Value::Str(s) if s == "sops"))
    else {
        return Opened::Plain;
    };
    let (key, meta) = entries.remove(i);
    let refuse = |pos: Pos, message: String| {
        Opened::Refused(Diagnostic::error(file, pos, format!("SOPS: {message}")))
    };
    let meta = match Metadata::read(&meta) {
        Ok(m) => m,
        Err((pos, e)) => return refuse(pos.unwrap_or(key.pos), e),
    };
    // Every encrypted value, where it is and its key path.
    let mut found = Vec::new();
    if let Err((pos, e)) = encrypted_values(doc, &mut Vec::new(), &mut found) {
        return refuse(pos, e);
    }
    for (pos, path, _) in &found {
        if path.iter().map(String::as_str).ne(USER_DATA) {
            return refuse(
                *pos,
                format!(
                    "{} is encrypted; only spec.forProvider.userData may be (proxsync writes the \
                     other fields to status files, logs and PVE): encrypt with \
                     --encrypted-regex '^userData$'",
                    path.join(".")
                ),
            );
        }
    }
    let Some((at, _, ciphertext)) = found.first().cloned() else {
        return refuse(
            key.pos,
            "the file carries SOPS metadata but no encrypted value".into(),
        );
    };
    let keyring = match secrets {
        Secrets::Decrypt(k) => k,
        Secrets::StructureOnly => {
            remove_user_data(doc);
            return Opened::Unopened(Diagnostic::warning(
                file,
                at,
                "spec.forProvider.userData is encrypted with SOPS: its structure is checked, not \
                 its content (no age identity: give [sops] age_identity_file with --config, or \
                 SOPS_AGE_KEY_FILE)",
            ));
        }
    };
    let decryption = |pos: Pos, message: String| {
        let mut d = Diagnostic::error(file, pos, format!("SOPS: {message}"));
        d.decryption = true;
        Opened::Refused(d)
    };
    let data_key = match keyring.data_key(&meta.age) {
        Ok(k) => k,
        Err(e) => return decryption(key.pos, format!("cannot decrypt the data key: {e}")),
    };
    // Every value in document order, decrypted, for the MAC; then the MAC itself.
    let mut values = Vec::new();
    let mut opened = None;
    if let Err((pos, e)) = mac_values(doc, &mut Vec::new(), &data_key, &mut values, &mut opened) {
        return decryption(pos, e);
    }
    let expected = match sops::parse_value(&meta.mac)
        .and_then(|m| sops::decrypt_value(&data_key, &m, &meta.lastmodified))
    {
        Ok(Plain::Str(m)) => m,
        Ok(_) | Err(_) => {
            return decryption(
                key.pos,
                "the file's MAC does not decrypt: the file was changed after it was encrypted"
                    .into(),
            );
        }
    };
    if !expected.eq_ignore_ascii_case(&sops::mac(&values)) {
        return decryption(
            key.pos,
            "the file's MAC does not match its values: the file was changed after it was \
             encrypted (edit it with sops, never by hand)"
                .into(),
        );
    }
    Opened::Decrypted { at, ciphertext }
}

/// The parts of `sops:` that decryption needs.
struct Metadata {
    /// (recipient, armored age file of the data key).
    age: Vec<(String, String)>,
    lastmodified: String,
    mac: String,
}

type Located = (Option<Pos>, String);

impl Metadata {
    fn read(meta: &Node) -> Result<Metadata, Located> {
        let Value::Map(entries) = &meta.value else {
            return Err((Some(meta.pos), "sops must be a mapping".into()));
        };
        let get = |name: &str| {
            entries
                .iter()
                .find(|(k, _)| matches!(&k.value, Value::Str(s) if s == name))
                .map(|(_, v)| v)
        };
        let string = |name: &str| match get(name).map(|n| &n.value) {
            Some(Value::Str(s)) if !s.is_empty() => Ok(s.clone()),
            _ => Err((Some(meta.pos), format!("sops.{name} is missing"))),
        };
        if let Some(n) = get("mac_only_encrypted")
            && n.value == Value::Bool(true)
        {
            return Err((
                Some(n.pos),
                "mac_only_encrypted is not supported: encrypt without it".into(),
            ));
        }
        if let Some(n) = get("shamir_threshold")
            && !matches!(n.value, Value::Null | Value::Int(0) | Value::Int(1))
        {
            return Err((
                Some(n.pos),
                "key groups with a Shamir threshold are not supported".into(),
            ));
        }
        let mut age = Vec::new();
        if let Some(Node {
            value: Value::Seq(items),
            ..
        }) = get("age")
        {
            for item in items {
                let Value::Map(fields) = &item.value else {
                    return Err((Some(item.pos), "sops.age entries must be mappings".into()));
                };
                let field = |name: &str| {
                    fields.iter().find_map(|(k, v)| match (&k.value, &v.value) {
                        (Value::Str(k), Value::Str(v)) if k == name => Some(v.clone()),
                        _ => None,
                    })
                };
                match (field("recipient"), field("enc")) {
                    (Some(r), Some(e)) => age.push((r, e)),
                    _ => {
                        return Err((
                            Some(item.pos),
                            "a sops.age entry needs recipient and enc".into(),
                        ));
                    }
                }
            }
        }
        if age.is_empty() {
            return Err((
                Some(meta.pos),
                "the file has no age recipient (sops.age): proxsync decrypts with age only".into(),
            ));
        }
        let mac = string("mac")?;
        sops::parse_value(&mac).map_err(|e| (Some(meta.pos), format!("sops.mac: {e}")))?;
        // SOPS authenticates the MAC with `lastmodified` as Go's time.RFC3339 writes it: no
        // fraction of a second.
        let lastmodified = string("lastmodified")?;
        let lastmodified = match lastmodified.split_once('.') {
            Some((head, tail)) => {
                let zone = tail.trim_start_matches(|c: char| c.is_ascii_digit());
                format!("{head}{zone}")
            }
            None => lastmodified,
        };
        Ok(Metadata {
            age,
            lastmodified,
            mac,
        })
    }
}

/// Collects every `ENC[...]` string under `node` (position, key path, text), checking each
/// one's structure.
fn encrypted_values(
    node: &Node,
    path: &mut Vec<String>,
    out: &mut Vec<(Pos, Vec<String>, String)>,
) -> Result<(), (Pos, String)> {
    match &node.value {
        Value::Str(s) if sops::is_encrypted(s) => {
            sops::parse_value(s).map_err(|e| (node.pos, format!("{}: {e}", path.join("."))))?;
            out.push((node.pos, path.clone(), s.clone()));
        }
        Value::Seq(items) => {
            for item in items {
                encrypted_values(item, path, out)?;
            }
        }
        Value::Map(entries) => {
            for (k, v) in entries {
                path.push(key_text(k));
                let r = encrypted_values(v, path, out);
                path.pop();
                r?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Decrypts the encrypted values under `node` in place and collects what the MAC hashes, in
/// document order (`sops.go` `walkBranch`: map keys form the path, list items add nothing).
fn mac_values(
    node: &mut Node,
    path: &mut Vec<String>,
    key: &[u8; 32],
    out: &mut Vec<Vec<u8>>,
    opened: &mut Option<Pos>,
) -> Result<(), (Pos, String)> {
    match &mut node.value {
        Value::Null => {}
        Value::Bool(b) => out.push(Plain::Bool(*b).mac_bytes()),
        Value::Int(i) => out.push(Plain::Int(*i).mac_bytes()),
        Value::Float(f) => out.push(Plain::Float(*f).mac_bytes()),
        Value::Str(s) if sops::is_encrypted(s) => {
            let aad = format!("{}:", path.join(":"));
            let plain = sops::parse_value(s)
                .and_then(|v| sops::decrypt_value(key, &v, &aad))
                .map_err(|e| (node.pos, format!("{}: {e}", path.join("."))))?;
            out.push(plain.mac_bytes());
            node.value = match plain {
                Plain::Str(s) => Value::Str(s),
                Plain::Int(i) => Value::Int(i),
                Plain::Float(f) => Value::Float(f),
                Plain::Bool(b) => Value::Bool(b),
            };
            *opened = Some(node.pos);
        }
        Value::Str(s) => out.push(s.as_bytes().to_vec()),
        Value::Seq(items) => {
            for item in items {
                mac_values(item, path, key, out, opened)?;
            }
        }
        Value::Map(entries) => {
            for (k, v) in entries {
                path.push(key_text(k));
                let r = mac_values(v, path, key, out, opened);
                path.pop();
                r?;
            }
        }
    }
    Ok(())
}

fn key_text(k: &Node) -> String {
    match &k.value {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

/// Drops `spec.forProvider.userData` (left unopened) so the rest validates.
fn remove_user_data(doc: &mut Node) {
    let mut node = doc;
    for part in &USER_DATA[..2] {
        let Value::Map(entries) = &mut node.value else {
            return;
        };
        let Some((_, v)) = entries
            .iter_mut()
            .find(|(k, _)| matches!(&k.value, Value::Str(s) if s == part))
        else {
            return;
        };
        node = v;
    }
    if let Value::Map(entries) = &mut node.value {
        entries.retain(|(k, _)| !matches!(&k.value, Value::Str(s) if s == USER_DATA[2]));
    }
}

/// For tests: `text` (one spec document whose `spec.forProvider.userData` is written on the one
/// line `user_data_line`) encrypted as `sops --encrypt --encrypted-regex '^userData$' --age
/// <recipient>` writes it: the value, the data key wrapped for `recipient`, the MAC.
#[doc(hidden)]
pub fn seal_for_tests(text: &str, user_data_line: &str, recipient: &str) -> String {
    let key = [0x5a; 32];
    let iv = [0x3c; 32];
    let (mut docs, _) = super::yaml::parse_documents("t.yaml", text);
    let mut values = Vec::new();
    let _ = mac_values(&mut docs[0], &mut Vec::new(), &key, &mut values, &mut None);
    let (_, plain) = user_data_line
        .split_once("userData:")
        .expect("a userData line");
    let (parsed, _) = super::yaml::parse_documents("u.yaml", &format!("v:{plain}"));
    let plain = match &parsed[0].value {
        Value::Map(e) => match &e[0].1.value {
            Value::Str(s) => s.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    let enc = sops::encrypt_value(&key, &iv, &Plain::Str(plain), "spec:forProvider:userData:");
    let lastmodified = "2026-01-02T03:04:05Z";
    let mac = sops::encrypt_value(&key, &iv, &Plain::Str(sops::mac(&values)), lastmodified);
    let wrapped = sops::wrap_data_key(recipient, &key).expect("an age recipient");
    let indent = &user_data_line[..user_data_line.len() - user_data_line.trim_start().len()];
    let armored: String = wrapped
        .lines()
        .map(|l| format!("          {l}\n"))
        .collect();
    format!(
        "{}sops:\n  age:\n    - recipient: {recipient}\n      enc: |\n{armored}  lastmodified: \
         \"{lastmodified}\"\n  mac: {mac}\n  encrypted_regex: ^userData$\n  version: 3.9.0\n",
        text.replace(user_data_line, &format!("{indent}userData: {enc}"))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_file_with;

    const SECRET: &str = "join-token-7f3a9";
    const LINE: &str = "    userData: \"#cloud-config\\npassword: join-token-7f3a9\\n\"";

    fn plain() -> String {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: web-01\nspec:\n  \
             forProvider:\n    site: lab\n    node: pve1\n    image: \"9000\"\n    cpu: 2\n    \
             memory: 2Gi\n{LINE}\n"
        )
    }

    fn keyring() -> (Keyring, String) {
        let id = age::x25519::Identity::generate();
        let text = age::secrecy::ExposeSecret::expose_secret(&id.to_string()).to_string();
        (
            Keyring::parse(&text, "age.key").unwrap(),
            id.to_public().to_string(),
        )
    }

    #[test]
    fn an_encrypted_user_data_opens_with_the_identity() {
        let (ring, recipient) = keyring();
        let sealed = seal_for_tests(&plain(), LINE, &recipient);
        assert!(!sealed.contains(SECRET), "{sealed}");
        let (specs, diags) = parse_file_with("w.yaml", sealed.as_bytes(), Secrets::Decrypt(&ring));
        assert!(diags.is_empty(), "{diags:?}");
        let s = &specs[0];
        assert_eq!(
            s.vm().unwrap().user_data.as_deref(),
            Some("#cloud-config\npassword: join-token-7f3a9\n")
        );
        let ciphertext = s.sealed.as_deref().unwrap();
        assert!(ciphertext.starts_with("ENC[AES256_GCM,"));
        // The spec's hash is the ciphertext's: another secret under the same ciphertext hashes
        // the same, so the hash (state database, status files) says nothing about it.
        let mut other = s.clone();
        other.vm_mut().unwrap().user_data =
            Some("#cloud-config\npassword: something-else\n".into());
        assert_eq!(crate::spec::spec_hash(s), crate::spec::spec_hash(&other));
        assert_eq!(
            crate::spec::content_hash(s),
            crate::spec::content_hash(&other)
        );
    }

    #[test]
    fn a_wrong_key_or_a_changed_file_is_a_decryption_failure_without_the_value() {
        let (_, recipient) = keyring();
        let (other, _) = keyring();
        let sealed = seal_for_tests(&plain(), LINE, &recipient);
        let (specs, diags) = parse_file_with("w.yaml", sealed.as_bytes(), Secrets::Decrypt(&other));
        assert!(specs.is_empty());
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert!(diags[0].decryption && diags[0].is_error());
        assert_eq!(diags[0].spec.as_deref(), Some("web-01"));
        assert!(diags[0].message.contains(&recipient), "{}", diags[0]);

        // A plain value changed by hand: the MAC no longer matches.
        let (ring, recipient) = keyring();
        let sealed = seal_for_tests(&plain(), LINE, &recipient).replace("cpu: 2", "cpu: 3");
        let (specs, diags) = parse_file_with("w.yaml", sealed.as_bytes(), Secrets::Decrypt(&ring));
        assert!(specs.is_empty());
        assert!(diags[0].decryption, "{diags:?}");
        assert!(diags[0].message.contains("MAC"), "{}", diags[0]);
        assert!(!diags[0].message.contains(SECRET));

        // No identity at all.
        let (specs, diags) = crate::spec::parse_file("w.yaml", sealed.as_bytes());
        assert!(specs.is_empty());
        assert!(diags[0].message.contains("no age identity"), "{}", diags[0]);
    }

    #[test]
    fn without_a_key_the_structure_is_checked() {
        let (_, recipient) = keyring();
        let sealed = seal_for_tests(&plain(), LINE, &recipient);
        let (specs, diags) = parse_file_with("w.yaml", sealed.as_bytes(), Secrets::StructureOnly);
        assert_eq!(specs.len(), 1);
        assert!(specs[0].vm().unwrap().user_data.is_none());
        assert_eq!(diags.len(), 1);
        assert!(!diags[0].is_error(), "{}", diags[0]);

        let broken = sealed.replacen(",iv:", ",iv:!!", 1);
        let (specs, diags) = parse_file_with("w.yaml", broken.as_bytes(), Secrets::StructureOnly);
        assert!(specs.is_empty());
        assert!(diags[0].is_error() && !diags[0].decryption, "{diags:?}");
        assert!(diags[0].message.contains("iv"), "{}", diags[0]);
    }

    #[test]
    fn only_user_data_may_be_encrypted() {
        let (ring, recipient) = keyring();
        let sealed = seal_for_tests(&plain(), LINE, &recipient);
        let enc = sealed
            .lines()
            .find_map(|l| l.trim().strip_prefix("userData: "))
            .unwrap()
            .to_string();
        let moved = sealed.replace("node: pve1", &format!("node: {enc}"));
        let (_, diags) = parse_file_with("w.yaml", moved.as_bytes(), Secrets::Decrypt(&ring));
        assert!(
            diags[0]
                .message
                .contains("spec.forProvider.node is encrypted"),
            "{}",
            diags[0]
        );
    }

    #[test]
    fn invalid_decrypted_user_data_is_reported_without_it() {
        let (ring, recipient) = keyring();
        let line = "    userData: \"password: join-token-7f3a9\\n\"";
        let text = plain().replace(LINE, line);
        let sealed = seal_for_tests(&text, line, &recipient);
        let (specs, diags) = parse_file_with("w.yaml", sealed.as_bytes(), Secrets::Decrypt(&ring));
        assert!(specs.is_empty());
        assert!(
            diags[0].message.contains("decrypted from SOPS"),
            "{}",
            diags[0]
        );
        assert!(!diags[0].message.contains(SECRET), "{}", diags[0]);
    }
}
