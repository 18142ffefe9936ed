//! SOPS-encrypted values (age recipients), decrypted in memory as Flux's SOPS decryption does:
//! the file's data key is unwrapped with an age X25519 identity, each `ENC[AES256_GCM,...]`
//! value is opened with it (AES-256-GCM, 32-byte IV, the value's key path as associated data),
//! and the file's MAC (SHA-512 over every value, encrypted with the data key under
//! `lastmodified`) must match before anything decrypted is used.
//!
//! The format follows getsops/sops: `aes/cipher.go` (`Cipher.Decrypt`, the `ENC[...]` syntax and
//! its types), `sops.go` (`Tree.Decrypt`: the path `a:b:c:` as associated data, map keys only;
//! `ToBytes`: what the MAC hashes) and `cmd/sops/common` (the MAC checked against the one
//! decrypted with `lastmodified` as associated data). Only X25519 age identities are read.
//!
//! Nothing here logs, and no error carries a decrypted value or a key.

use std::path::Path;

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::aes::Aes256;
use base64::Engine as _;

/// The AES-GCM SOPS uses: a 32-byte IV.
type SopsGcm = aes_gcm::AesGcm<Aes256, U32>;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The age identities proxsync decrypts with, and where they came from (for messages).
pub struct Keyring {
    identities: Vec<age::x25519::Identity>,
    origin: String,
    /// Why there are none (the file missing or unreadable): said by every decryption.
    problem: Option<String>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Keyring({}, {} identities)",
            self.origin,
            self.identities.len()
        )
    }
}

impl Keyring {
    /// The identities of an age identity file (`AGE-SECRET-KEY-1...` lines, `#` comments, as
    /// `age-keygen` writes it). Never shows the file's content.
    pub fn load(path: &Path) -> Result<Keyring, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read the age identity file: {e}", path.display()))?;
        Keyring::parse(&text, &path.display().to_string())
    }

    /// [`Keyring::load`] of text already read; `origin` names it in messages.
    pub(crate) fn parse(text: &str, origin: &str) -> Result<Keyring, String> {
        let mut identities = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let id = line.parse::<age::x25519::Identity>().map_err(|_| {
                format!(
                    "{origin}: line {} is not an age X25519 identity (AGE-SECRET-KEY-1...); \
                     only those are supported (age-keygen makes one); the line is not shown",
                    i + 1
                )
            })?;
            identities.push(id);
        }
        if identities.is_empty() {
            return Err(format!(
                "{origin}: holds no age identity (AGE-SECRET-KEY-1...)"
            ));
        }
        Ok(Keyring {
            identities,
            origin: origin.to_string(),
            problem: None,
        })
    }

    /// A keyring that cannot decrypt, saying why (no identity configured, an unreadable file).
    pub fn unavailable(problem: impl Into<String>) -> Keyring {
        Keyring {
            identities: Vec::new(),
            origin: String::new(),
            problem: Some(problem.into()),
        }
    }

    /// The public recipients (`age1...`) of the identities.
    pub fn recipients(&self) -> Vec<String> {
        self.identities
            .iter()
            .map(|i| i.to_public().to_string())
            .collect()
    }

    /// Unwraps the data key from the file's age stanzas (recipient, armored age file).
    pub(crate) fn data_key(&self, stanzas: &[(String, String)]) -> Result<[u8; 32], String> {
        if let Some(problem) = &self.problem {
            return Err(problem.clone());
        }
        let ours = self.recipients();
        let mut errors = Vec::new();
        for (recipient, enc) in stanzas {
            if !ours.contains(recipient) {
                continue;
            }
            match self.unwrap(enc) {
                Ok(key) => return Ok(key),
                Err(e) => errors.push(format!("{recipient}: {e}")),
            }
        }
        if errors.is_empty() {
            let theirs: Vec<&str> = stanzas.iter().map(|(r, _)| r.as_str()).collect();
            return Err(format!(
                "the file is encrypted for {} and {} holds none of their identities (it holds \
                 {}); add this install's recipient to the file (sops updatekeys) or install \
                 the matching identity",
                theirs.join(", "),
                self.origin,
                ours.join(", ")
            ));
        }
        Err(format!(
            "the data key could not be unwrapped: {}",
            errors.join("; ")
        ))
    }

    fn unwrap(&self, armored: &str) -> Result<[u8; 32], String> {
        use std::io::Read;
        let reader = age::armor::ArmoredReader::new(armored.as_bytes());
        let decryptor = age::Decryptor::new(reader).map_err(|e| format!("not an age file: {e}"))?;
        let out = decryptor
            .decrypt(self.identities.iter().map(|i| i as &dyn age::Identity))
            .map_err(|e| format!("age: {e}"))?;
        let mut key = Vec::new();
        out.take(33)
            .read_to_end(&mut key)
            .map_err(|e| format!("age: {e}"))?;
        <[u8; 32]>::try_from(key.as_slice())
            .map_err(|_| format!("the data key is {} bytes, not 32", key.len()))
    }
}

/// An encrypted value's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Encrypted {
    data: Vec<u8>,
    iv: Vec<u8>,
    tag: Vec<u8>,
    /// `str`, `int`, `float`, `bool` or `bytes`.
    pub kind: String,
}

/// A decrypted value, typed as SOPS typed it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plain {
    Str(String),
    Int(i128),
    Float(f64),
    Bool(bool),
}

impl Plain {
    /// The bytes SOPS's MAC hashes for this value (`ToBytes`: booleans as `True`/`False`).
    pub(crate) fn mac_bytes(&self) -> Vec<u8> {
        match self {
            Plain::Str(s) => s.as_bytes().to_vec(),
            Plain::Int(i) => i.to_string().into_bytes(),
            Plain::Float(f) => f.to_string().into_bytes(),
            Plain::Bool(true) => b"True".to_vec(),
            Plain::Bool(false) => b"False".to_vec(),
        }
    }
}

/// Whether `s` is a SOPS-encrypted value.
pub(crate) fn is_encrypted(s: &str) -> bool {
    s.starts_with("ENC[")
}

/// Parses `ENC[AES256_GCM,data:...,iv:...,tag:...,type:...]` (structure only, no key).
pub(crate) fn parse_value(s: &str) -> Result<Encrypted, String> {
    let inner = s
        .strip_prefix("ENC[AES256_GCM,")
        .and_then(|r| r.strip_suffix(']'))
        .ok_or("not a SOPS value: expected ENC[AES256_GCM,data:...,iv:...,tag:...,type:...]")?;
    let mut parts = inner.split(',');
    let mut field = |name: &str| {
        parts
            .next()
            .and_then(|p| p.strip_prefix(name))
            .and_then(|p| p.strip_prefix(':'))
            .ok_or_else(|| format!("the SOPS value lacks its {name}"))
    };
    let b64 = |what: &str, v: &str| {
        B64.decode(v)
            .map_err(|e| format!("the SOPS value's {what} is not base64: {e}"))
    };
    let data = b64("data", field("data")?)?;
    let iv = b64("iv", field("iv")?)?;
    let tag = b64("tag", field("tag")?)?;
    let kind = field("type")?.to_string();
    if iv.len() != 32 || tag.len() != 16 {
        return Err(format!(
            "the SOPS value's iv is {} bytes and its tag {} (SOPS writes 32 and 16)",
            iv.len(),
            tag.len()
        ));
    }
    if !matches!(
        kind.as_str(),
        "str" | "int" | "int64" | "float" | "bool" | "bytes"
    ) {
        return Err(format!(
            "the SOPS value's type {kind:?} is not one SOPS writes"
        ));
    }
    Ok(Encrypted {
        data,
        iv,
        tag,
        kind,
    })
}

/// Opens an encrypted value with the data key; `aad` is its key path (`a:b:c:`) or, for the
/// MAC, `lastmodified`.
pub(crate) fn decrypt_value(key: &[u8; 32], value: &Encrypted, aad: &str) -> Result<Plain, String> {
    let cipher = SopsGcm::new(key.into());
    let mut msg = value.data.clone();
    msg.extend_from_slice(&value.tag);
    let plain = cipher
        .decrypt(
            aes_gcm::aead::generic_array::GenericArray::from_slice(&value.iv),
            Payload {
                msg: &msg,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| {
            "does not decrypt with the file's data key (changed, or moved to another key)"
                .to_string()
        })?;
    let text = || {
        String::from_utf8(plain.clone()).map_err(|_| "the decrypted value is not UTF-8".to_string())
    };
    let bad = |t: &str| format!("the decrypted value is not a {t} as its type says");
    Ok(match value.kind.as_str() {
        "str" | "bytes" => Plain::Str(text()?),
        "int" | "int64" => Plain::Int(text()?.parse().map_err(|_| bad("integer"))?),
        "float" => Plain::Float(text()?.parse().map_err(|_| bad("number"))?),
        "bool" => Plain::Bool(match text()?.as_str() {
            "True" | "true" => true,
            "False" | "false" => false,
            _ => return Err(bad("boolean")),
        }),
        other => return Err(format!("unknown SOPS type {other:?}")),
    })
}

/// SOPS's MAC of the values in document order: SHA-512, upper-case hex.
pub(crate) fn mac(values: &[Vec<u8>]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512);
    for v in values {
        ctx.update(v);
    }
    ctx.finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// For tests: encrypts as SOPS does (`aes/cipher.go` `Cipher.Encrypt`).
#[doc(hidden)]
pub(crate) fn encrypt_value(key: &[u8; 32], iv: &[u8; 32], plain: &Plain, aad: &str) -> String {
    let (kind, bytes) = match plain {
        Plain::Str(s) => ("str", s.as_bytes().to_vec()),
        Plain::Int(i) => ("int", i.to_string().into_bytes()),
        Plain::Float(f) => ("float", f.to_string().into_bytes()),
        Plain::Bool(_) => ("bool", plain.mac_bytes()),
    };
    let cipher = SopsGcm::new(key.into());
    let out = cipher
        .encrypt(
            aes_gcm::aead::generic_array::GenericArray::from_slice(iv),
            Payload {
                msg: &bytes,
                aad: aad.as_bytes(),
            },
        )
        .unwrap_or_default();
    let (data, tag) = out.split_at(out.len().saturating_sub(16));
    format!(
        "ENC[AES256_GCM,data:{},iv:{},tag:{},type:{kind}]",
        B64.encode(data),
        B64.encode(iv),
        B64.encode(tag)
    )
}

/// For tests: wraps a data key for an age recipient, armored, as SOPS's age key source does.
#[doc(hidden)]
pub(crate) fn wrap_data_key(recipient: &str, key: &[u8; 32]) -> Result<String, String> {
    use std::io::Write;
    let r: age::x25519::Recipient = recipient.parse().map_err(|e: &str| e.to_string())?;
    let enc = age::Encryptor::with_recipients(std::iter::once(&r as &dyn age::Recipient))
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let armor = age::armor::ArmoredWriter::wrap_output(&mut out, age::armor::Format::AsciiArmor)
        .map_err(|e| e.to_string())?;
    let mut w = enc.wrap_output(armor).map_err(|e| e.to_string())?;
    w.write_all(key).map_err(|e| e.to_string())?;
    w.finish()
        .and_then(|armor| armor.finish())
        .map_err(|e| e.to_string())?;
    String::from_utf8(out).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];
    const IV: [u8; 32] = [9; 32];

    #[test]
    fn values_round_trip_with_their_path_and_type() {
        for plain in [
            Plain::Str("#cloud-config\npassword: hunter2\n".into()),
            Plain::Int(42),
            Plain::Float(1.5),
            Plain::Bool(true),
        ] {
            let enc = encrypt_value(&KEY, &IV, &plain, "spec:forProvider:userData:");
            let parsed = parse_value(&enc).unwrap();
            assert_eq!(
                decrypt_value(&KEY, &parsed, "spec:forProvider:userData:").unwrap(),
                plain
            );
            // Moved to another key path: refused (the path is authenticated).
            assert!(decrypt_value(&KEY, &parsed, "spec:forProvider:name:").is_err());
            assert!(decrypt_value(&[8; 32], &parsed, "spec:forProvider:userData:").is_err());
        }
    }

    #[test]
    fn a_known_value_decrypts_as_sops_wrote_it() {
        // AES-256-GCM with a 32-byte IV (Go's cipher.NewGCMWithNonceSize, as SOPS uses it), as
        // computed by Python's `cryptography` (AESGCM(key).encrypt(iv, b"hello", b"a:")): an
        // implementation other than the one under test.
        let enc = "ENC[AES256_GCM,data:77WLtcE=,iv:CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk=,\
                   tag:bNvzT9CjjL6WY6qYHrdzMg==,type:str]";
        let parsed = parse_value(enc).unwrap();
        assert_eq!(
            decrypt_value(&KEY, &parsed, "a:").unwrap(),
            Plain::Str("hello".into())
        );
        assert_eq!(
            encrypt_value(&KEY, &IV, &Plain::Str("hello".into()), "a:"),
            enc
        );
    }

    #[test]
    fn malformed_values_are_named_without_their_content() {
        for bad in [
            "ENC[AES256_GCM,data:xx,iv:yy]",
            "ENC[AES256_GCM,data:!!,iv:AAAA,tag:AAAA,type:str]",
            "ENC[RSA,data:AA==]",
        ] {
            let e = parse_value(bad).unwrap_err();
            assert!(!e.contains("!!"), "{e}");
        }
    }

    #[test]
    fn the_mac_is_sha512_upper_hex() {
        // SHA-512("abc"), FIPS 180-2.
        assert!(
            mac(&[b"ab".to_vec(), b"c".to_vec()]).starts_with("DDAF35A193617ABACC417349AE2041")
        );
        assert_eq!(Plain::Bool(false).mac_bytes(), b"False");
    }

    #[test]
    fn a_data_key_unwraps_only_with_a_matching_identity() {
        let id = age::x25519::Identity::generate();
        let text = format!(
            "# created: now\n# public key: x\n{}\n",
            age::secrecy::ExposeSecret::expose_secret(&id.to_string())
        );
        let ring = Keyring::parse(&text, "test.key").unwrap();
        let recipient = id.to_public().to_string();
        assert_eq!(ring.recipients(), std::slice::from_ref(&recipient));
        let wrapped = wrap_data_key(&recipient, &KEY).unwrap();
        assert_eq!(
            ring.data_key(&[(recipient.clone(), wrapped.clone())])
                .unwrap(),
            KEY
        );

        let other = age::x25519::Identity::generate().to_public().to_string();
        let e = ring.data_key(&[(other.clone(), wrapped)]).unwrap_err();
        assert!(e.contains(&other) && e.contains("test.key"), "{e}");
        let e = Keyring::unavailable("no [sops] age_identity_file")
            .data_key(&[])
            .unwrap_err();
        assert_eq!(e, "no [sops] age_identity_file");
        let e = Keyring::parse("AGE-SECRET-KEY-1NOTAKEY\n", "k").unwrap_err();
        assert!(!e.contains("NOTAKEY"), "never shows the line: {e}");
    }
}
