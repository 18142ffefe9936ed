//! Credentials in URLs. A remote `[source] url` may carry a user and password
//! (`https://alice:PASSWORD@git.example/vms.git`), and git quotes the URL in its errors. Every
//! text proxsync prints or writes that may hold a URL (logs, systemd `STATUS=`, status files,
//! `proxsync status`, `doctor`, notifications, the state directory's files) passes through
//! [`urls`], which replaces the userinfo of every URL in it with `***`.

use std::borrow::Cow;

/// What the userinfo of a URL is replaced with.
pub(crate) const MASK: &str = "***";

/// `text` with the userinfo (`user:password@`, or a token as the user) of every URL in it
/// replaced by [`MASK`]: `https://***@git.example/vms.git`. Whatever follows `://` up to `/`,
/// `?`, `#`, whitespace or a quote is taken for an authority (so a `@` in a path is kept, and
/// anything that merely looks like a URL is masked too). Text without such userinfo is
/// returned as it is.
pub fn urls(text: &str) -> Cow<'_, str> {
    let mut out = String::new();
    // Up to where `text` was copied into `out`.
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let authority = from + found + 3;
        from = authority;
        let rest = &text[authority..];
        let end = rest.find(|c: char| ends_authority(c)).unwrap_or(rest.len());
        let Some(at) = rest[..end].rfind('@') else {
            continue;
        };
        out.push_str(&text[copied..authority]);
        out.push_str(MASK);
        copied = authority + at;
        from = copied;
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Whether the URL carries a credential: a password (`user:password@`), or any userinfo in an
/// `http(s)://` URL (where the user part is often an access token). A login name alone in an
/// `ssh://` URL (`ssh://git@host/...`) is not one.
pub(crate) fn has_credentials(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    let end = rest.find(|c: char| ends_authority(c)).unwrap_or(rest.len());
    let Some(at) = rest[..end].rfind('@') else {
        return false;
    };
    let web = matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https");
    web || rest[..at].contains(':')
}

fn ends_authority(c: char) -> bool {
    matches!(c, '/' | '?' | '#' | '\'' | '"' | '`' | '<' | '>' | '\\') || c.is_whitespace()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_userinfo_of_a_url_is_masked() {
        assert_eq!(
            urls("https://alice:PASSWORD@git.example/vms.git"),
            "https://***@git.example/vms.git"
        );
        // A token as the user, a port, no path.
        assert_eq!(
            urls("https://ghp_token@git.example:8443"),
            "https://***@git.example:8443"
        );
        assert_eq!(
            urls("ssh://git@git.example/vms.git"),
            "ssh://***@git.example/vms.git"
        );
        // A password holding `@` (as typed, not percent-encoded): everything up to the last.
        assert_eq!(
            urls("https://alice:p@ss@git.example/x"),
            "https://***@git.example/x"
        );
    }

    #[test]
    fn every_url_in_a_text_is_masked_and_the_rest_kept() {
        let git = "fatal: unable to access 'https://alice:PASSWORD@127.0.0.1:9/x.git/': \
                   Failed to connect; also see http://bob:pw@mirror.example/y and \
                   https://plain.example/z@tag";
        assert_eq!(
            urls(git),
            "fatal: unable to access 'https://***@127.0.0.1:9/x.git/': Failed to connect; \
             also see http://***@mirror.example/y and https://plain.example/z@tag"
        );
        let text = "source https://a:b@h/x: git fetch failed";
        assert_eq!(urls(text), "source https://***@h/x: git fetch failed");
        assert!(!urls(text).contains("a:b"));
    }

    #[test]
    fn text_without_credentials_is_not_copied() {
        for text in [
            "",
            "no url here",
            "https://git.example/vms.git",
            "git@git.example:vms.git",
            "mail alice@example.org about ://x",
        ] {
            assert!(matches!(urls(text), Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn odd_text_never_panics() {
        for text in [
            "https://@",
            "https://a@",
            "x://é@ü/ö",
            "é://a:b@c",
            "https://a:b@c https://d:e@f",
            "https://a@b@c@d/e",
            ":// ://a@b",
        ] {
            let out = urls(text);
            assert!(!out.contains("a:b@"), "{text} -> {out}");
        }
        assert_eq!(
            urls("https://a:b@c https://d:e@f"),
            "https://***@c https://***@f"
        );
    }

    #[test]
    fn credentials_are_a_password_or_a_web_user() {
        assert!(has_credentials("https://alice:PASSWORD@git.example/x.git"));
        assert!(has_credentials("https://ghp_token@github.com/o/r.git"));
        assert!(has_credentials("ssh://git:secret@git.example/x.git"));
        assert!(!has_credentials("ssh://git@git.example/x.git"));
        assert!(!has_credentials("https://git.example/x@y.git"));
        assert!(!has_credentials("git@git.example:x.git"));
        assert!(!has_credentials("file:///srv/git/vms.git"));
    }
}
