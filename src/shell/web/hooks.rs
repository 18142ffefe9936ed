//! The webhook receivers (`[[receiver]]`): whether a hook is signed with the receiver's
//! secret, and whether it is a push to the configured branch. Pure: headers, body and secret
//! in, a [`Verdict`] out; `mod.rs` reads the request and acts on it.
//!
//! Each forge's own scheme, every comparison in constant time (`ring::hmac::verify`):
//! - GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, `X-GitHub-Event`
//!   (`push`; `ping` on a new hook);
//! - Gitea: `X-Gitea-Signature: <hex HMAC-SHA256>`, `X-Gitea-Event: push`;
//! - Forgejo: `X-Forgejo-Signature` (else Gitea's, which it sends too), `X-Forgejo-Event`
//!   (else `X-Gitea-Event`);
//! - GitLab: `X-Gitlab-Token` is the secret itself, `X-Gitlab-Event: Push Hook`;
//! - generic: `X-Proxsync-Signature: sha256=<hex HMAC-SHA256>`, every body a push.
//!
//! The signature is checked over the bytes received before anything of the body is parsed; a
//! push names its branch in the JSON body's `ref` (`refs/heads/<branch>`).

use hyper::HeaderMap;
use ring::hmac;

use crate::config::{ReceiverKind, Secret};

/// A configured receiver, with its secret read.
#[derive(Clone)]
pub(crate) struct Receiver {
    pub(crate) name: String,
    pub(crate) kind: ReceiverKind,
    pub(crate) secret: Secret,
}

/// What a hook amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A verified push to the configured branch: fetch now.
    Push,
    /// GitHub's `ping` when a hook is made: verified, nothing to fetch.
    Ping,
    /// A verified event that is no push (an issue, a tag's release, ...).
    OtherEvent,
    /// A verified push to another branch, or of a tag.
    OtherBranch,
    /// The signature (GitLab: the token) is missing or wrong.
    Unauthorized,
    /// Verified, but the body is no JSON object with a string `ref`.
    BadBody,
}

impl Verdict {
    /// The `outcome` label of `proxsync_webhook_requests_total`.
    pub(crate) fn outcome(self) -> &'static str {
        match self {
            Verdict::Push => "accepted",
            Verdict::Ping => "ping",
            Verdict::OtherEvent => "ignored_event",
            Verdict::OtherBranch => "ignored_branch",
            Verdict::Unauthorized => "unauthorized",
            Verdict::BadBody => "bad_request",
        }
    }
}

/// Judges a hook sent to `receiver`: its signature first, then its event and branch.
pub(crate) fn judge(
    receiver: &Receiver,
    headers: &HeaderMap,
    body: &[u8],
    branch: &str,
) -> Verdict {
    let secret = receiver.secret.expose().as_bytes();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (verified, event, push_event) = match receiver.kind {
        ReceiverKind::Github => (
            header("x-hub-signature-256")
                .and_then(|s| s.strip_prefix("sha256="))
                .is_some_and(|s| hmac_matches(secret, body, s)),
            header("x-github-event"),
            "push",
        ),
        ReceiverKind::Gitea => (
            header("x-gitea-signature").is_some_and(|s| hmac_matches(secret, body, s)),
            header("x-gitea-event"),
            "push",
        ),
        ReceiverKind::Forgejo => (
            // Forgejo sends both; its own, when there, is the one checked.
            header("x-forgejo-signature")
                .or_else(|| header("x-gitea-signature"))
                .is_some_and(|s| hmac_matches(secret, body, s)),
            header("x-forgejo-event").or_else(|| header("x-gitea-event")),
            "push",
        ),
        ReceiverKind::Gitlab => (
            header("x-gitlab-token").is_some_and(|t| same_secret(secret, t.as_bytes())),
            header("x-gitlab-event"),
            "Push Hook",
        ),
        ReceiverKind::Generic => (
            header("x-proxsync-signature")
                .and_then(|s| s.strip_prefix("sha256="))
                .is_some_and(|s| hmac_matches(secret, body, s)),
            Some("push"),
            "push",
        ),
    };
    if !verified {
        return Verdict::Unauthorized;
    }
    match event {
        Some("ping") if receiver.kind == ReceiverKind::Github => return Verdict::Ping,
        Some(e) if e == push_event => {}
        _ => return Verdict::OtherEvent,
    }
    #[derive(serde::Deserialize)]
    struct Push {
        #[serde(rename = "ref")]
        reference: String,
    }
    match serde_json::from_slice::<Push>(body) {
        Ok(p) if p.reference.strip_prefix("refs/heads/") == Some(branch) => Verdict::Push,
        Ok(_) => Verdict::OtherBranch,
        Err(_) => Verdict::BadBody,
    }
}

/// Whether `hex` is the HMAC-SHA256 of `body` under `key`, compared in constant time.
fn hmac_matches(key: &[u8], body: &[u8], hex: &str) -> bool {
    let Some(tag) = from_hex(hex.trim()) else {
        return false;
    };
    hmac::verify(&hmac::Key::new(hmac::HMAC_SHA256, key), body, &tag).is_ok()
}

/// Whether `given` is `secret`, in time independent of where they differ: both are MACed
/// under the secret and the tags compared by `hmac::verify` (constant time).
fn same_secret(secret: &[u8], given: &[u8]) -> bool {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let expected = hmac::sign(&key, secret);
    hmac::verify(&key, given, expected.as_ref()).is_ok()
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.as_bytes()
        .chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// The hex HMAC-SHA256 of `body` under `key`, as the forges send it (tests, the benchmark).
#[cfg(test)]
pub(crate) fn sign(key: &[u8], body: &[u8]) -> String {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), body)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUSH_MAIN: &[u8] = br#"{"ref":"refs/heads/main","after":"0123"}"#;
    const PUSH_DEV: &[u8] = br#"{"ref":"refs/heads/dev"}"#;

    fn receiver(kind: ReceiverKind, secret: &str) -> Receiver {
        Receiver {
            name: "r".into(),
            kind,
            secret: Secret::new(secret),
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn githubs_documented_example_verifies() {
        // docs.github.com, "Validating webhook deliveries": secret "It's a Secret to
        // Everybody", payload "Hello, World!".
        let documented = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(
            sign(b"It's a Secret to Everybody", b"Hello, World!"),
            documented
        );
        assert!(hmac_matches(
            b"It's a Secret to Everybody",
            b"Hello, World!",
            documented
        ));
        assert!(!hmac_matches(
            b"It's a Secret to Everybody",
            b"Hello, World?",
            documented
        ));
        assert!(!hmac_matches(
            b"another secret",
            b"Hello, World!",
            documented
        ));
        assert!(!hmac_matches(
            b"It's a Secret to Everybody",
            b"Hello, World!",
            &documented[..62]
        ));
        assert!(!hmac_matches(b"k", b"", "zz"));
    }

    /// A kind, its signature headers from a hex signature, its event header and push event.
    type Case = (
        ReceiverKind,
        fn(&str) -> Vec<(&'static str, String)>,
        &'static str,
        &'static str,
    );

    /// Each kind: a good hook, a bad and a missing signature, another event, another branch,
    /// a body without `ref`.
    #[test]
    fn each_kind_verifies_its_own_scheme() {
        let good = |body: &[u8]| sign(b"s3cret", body);
        let cases: [Case; 5] = [
            (
                ReceiverKind::Github,
                |sig| vec![("x-hub-signature-256", format!("sha256={sig}"))],
                "x-github-event",
                "push",
            ),
            (
                ReceiverKind::Gitea,
                |sig| vec![("x-gitea-signature", sig.to_string())],
                "x-gitea-event",
                "push",
            ),
            (
                ReceiverKind::Forgejo,
                |sig| {
                    vec![
                        ("x-forgejo-signature", sig.to_string()),
                        ("x-gitea-signature", sig.to_string()),
                    ]
                },
                "x-forgejo-event",
                "push",
            ),
            (
                ReceiverKind::Gitlab,
                |_| vec![("x-gitlab-token", "s3cret".to_string())],
                "x-gitlab-event",
                "Push Hook",
            ),
            (
                ReceiverKind::Generic,
                |sig| vec![("x-proxsync-signature", format!("sha256={sig}"))],
                "x-proxsync-event",
                "push",
            ),
        ];
        for (kind, auth, event_header, push) in cases {
            let r = receiver(kind, "s3cret");
            let request = |body: &[u8], sig: &str, event: &str| {
                let mut pairs: Vec<(&str, String)> = auth(sig);
                pairs.push((event_header, event.to_string()));
                let pairs: Vec<(&str, &str)> =
                    pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
                judge(&r, &headers(&pairs), body, "main")
            };
            assert_eq!(
                request(PUSH_MAIN, &good(PUSH_MAIN), push),
                Verdict::Push,
                "{kind:?}"
            );
            assert_eq!(
                request(PUSH_DEV, &good(PUSH_DEV), push),
                Verdict::OtherBranch,
                "{kind:?}"
            );
            let tag = br#"{"ref":"refs/tags/main"}"#;
            assert_eq!(
                request(tag, &good(tag), push),
                Verdict::OtherBranch,
                "{kind:?}"
            );
            assert_eq!(
                request(b"[1]", &good(b"[1]"), push),
                Verdict::BadBody,
                "{kind:?}"
            );
            if kind != ReceiverKind::Generic {
                assert_eq!(
                    request(PUSH_MAIN, &good(PUSH_MAIN), "issues"),
                    Verdict::OtherEvent,
                    "{kind:?}"
                );
                assert_eq!(
                    judge(&r, &headers(&[]), PUSH_MAIN, "main"),
                    Verdict::Unauthorized,
                    "{kind:?}: missing"
                );
            }
            // Signed with another key; GitLab: another token.
            let other = sign(b"other", PUSH_MAIN);
            let bad = if kind == ReceiverKind::Gitlab {
                let h = headers(&[
                    ("x-gitlab-token", "s3cre7"),
                    ("x-gitlab-event", "Push Hook"),
                ]);
                judge(&r, &h, PUSH_MAIN, "main")
            } else {
                request(PUSH_MAIN, &other, push)
            };
            assert_eq!(bad, Verdict::Unauthorized, "{kind:?}: bad");
            // A signature of another body (a replayed signature on a forged body).
            if kind != ReceiverKind::Gitlab {
                assert_eq!(
                    request(PUSH_MAIN, &good(PUSH_DEV), push),
                    Verdict::Unauthorized,
                    "{kind:?}: another body"
                );
            }
        }
    }

    #[test]
    fn github_ping_and_a_missing_event() {
        let r = receiver(ReceiverKind::Github, "s3cret");
        let body = br#"{"zen":"Design for failure.","hook_id":1}"#;
        let sig = format!("sha256={}", sign(b"s3cret", body));
        let h = headers(&[("x-hub-signature-256", &sig), ("x-github-event", "ping")]);
        assert_eq!(judge(&r, &h, body, "main"), Verdict::Ping);
        let h = headers(&[("x-hub-signature-256", &sig)]);
        assert_eq!(judge(&r, &h, body, "main"), Verdict::OtherEvent);
        // Unsigned, a ping is refused like anything else.
        let h = headers(&[("x-github-event", "ping")]);
        assert_eq!(judge(&r, &h, body, "main"), Verdict::Unauthorized);
        // The legacy SHA-1 header alone is not enough.
        let h = headers(&[("x-hub-signature", &sig), ("x-github-event", "push")]);
        assert_eq!(judge(&r, &h, PUSH_MAIN, "main"), Verdict::Unauthorized);
    }

    #[test]
    fn forgejo_checks_its_own_signature_first_and_takes_giteas_headers() {
        let r = receiver(ReceiverKind::Forgejo, "s3cret");
        let sig = sign(b"s3cret", PUSH_MAIN);
        let h = headers(&[("x-gitea-signature", &sig), ("x-gitea-event", "push")]);
        assert_eq!(
            judge(&r, &h, PUSH_MAIN, "main"),
            Verdict::Push,
            "Gitea's headers"
        );
        let bad = sign(b"other", PUSH_MAIN);
        let h = headers(&[
            ("x-forgejo-signature", &bad),
            ("x-gitea-signature", &sig),
            ("x-forgejo-event", "push"),
        ]);
        assert_eq!(
            judge(&r, &h, PUSH_MAIN, "main"),
            Verdict::Unauthorized,
            "a bad Forgejo signature is not rescued by Gitea's"
        );
        // A Gitea receiver does not read Forgejo's header.
        let gitea = receiver(ReceiverKind::Gitea, "s3cret");
        let h = headers(&[("x-forgejo-signature", &sig), ("x-gitea-event", "push")]);
        assert_eq!(judge(&gitea, &h, PUSH_MAIN, "main"), Verdict::Unauthorized);
    }

    #[test]
    fn a_gitlab_token_must_be_the_whole_secret() {
        let r = receiver(ReceiverKind::Gitlab, "s3cret");
        for token in ["s3cre", "s3crett", "", "S3CRET"] {
            let h = headers(&[("x-gitlab-token", token), ("x-gitlab-event", "Push Hook")]);
            assert_eq!(
                judge(&r, &h, PUSH_MAIN, "main"),
                Verdict::Unauthorized,
                "{token:?}"
            );
        }
        let h = headers(&[
            ("x-gitlab-token", "s3cret"),
            ("x-gitlab-event", "Tag Push Hook"),
        ]);
        assert_eq!(judge(&r, &h, PUSH_MAIN, "main"), Verdict::OtherEvent);
    }

    #[test]
    fn hex_decoding() {
        assert_eq!(from_hex("00ff10Ab"), Some(vec![0, 255, 16, 171]));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("gg"), None);
        assert_eq!(from_hex("+1"), None);
        assert_eq!(from_hex(""), Some(vec![]));
    }
}
