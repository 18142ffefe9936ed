//! Label selectors (`[source] selector`): which specs of the repository this install manages,
//! in Kubernetes' label-selector syntax over `metadata.labels`.
//!
//! A selector is comma-separated requirements, all of which must hold:
//! `key=value` (or `key==value`), `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key`
//! (the label exists) and `!key` (it does not). As in Kubernetes, `!=` and `notin` also hold
//! when the label is absent. Keys are `[prefix/]name` (a DNS subdomain prefix, a name of at
//! most 63 characters); values at most 63 characters of `A-Z a-z 0-9 - _ .`, starting and
//! ending with a letter or digit (or empty).
//!
//! Parsing and matching are pure; `config` names the key in errors.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// What a valid selector looks like, for error messages.
pub(crate) const VALID: &str = "comma-separated requirements, all of which must hold: key=value, \
    key!=value, key in (a,b), key notin (a,b), key (exists) or !key (does not exist); for \
    example \"tenant-id in (a,b)\"";

/// A parsed selector; `Display` gives the text it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    text: String,
    requirements: Vec<Requirement>,
}

/// One requirement on one label.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Equals(String),
    NotEquals(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
}

impl Selector {
    /// Parses a selector. The error says what is wrong, not where it was written (the caller
    /// names the key).
    pub(crate) fn parse(text: &str) -> Result<Selector, String> {
        if text.trim().is_empty() {
            return Err("empty selector; remove the key to manage every spec".into());
        }
        let requirements = split_top_level(text)?
            .into_iter()
            .map(requirement)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Selector {
            text: text.trim().to_string(),
            requirements,
        })
    }

    /// Whether a spec with these labels is selected: every requirement holds.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.get(&r.key);
            match &r.op {
                Op::Equals(v) => value == Some(v),
                Op::NotEquals(v) => value != Some(v),
                Op::In(set) => value.is_some_and(|v| set.contains(v)),
                Op::NotIn(set) => value.is_none_or(|v| !set.contains(v)),
                Op::Exists => value.is_some(),
                Op::DoesNotExist => value.is_none(),
            }
        })
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The requirements' texts: split at commas outside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0u32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("nested parentheses; write a set as (a,b)".into()),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("a ')' without its '('".into()),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("a '(' without its ')'".into());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

/// One requirement's text.
fn requirement(part: &str) -> Result<Requirement, String> {
    let part = part.trim();
    if part.is_empty() {
        return Err("an empty requirement (two commas in a row, or one at an end)".into());
    }
    if let Some(key) = part.strip_prefix('!')
        && !key.starts_with('=')
    {
        return Ok(Requirement {
            key: checked_key(key.trim())?,
            op: Op::DoesNotExist,
        });
    }
    let binary = [("!=", true), ("==", false), ("=", false)];
    if let Some((op, negated)) = binary.into_iter().find(|(op, _)| part.contains(op)) {
        let (key, value) = part.split_once(op).unwrap_or_default();
        let value = checked_value(value.trim())?;
        return Ok(Requirement {
            key: checked_key(key.trim())?,
            op: if negated {
                Op::NotEquals(value)
            } else {
                Op::Equals(value)
            },
        });
    }
    if let Some(open) = part.find('(') {
        return set_requirement(&part[..open], &part[open..]);
    }
    if part.contains(char::is_whitespace) {
        return Err(format!(
            "{part:?} is not a requirement: an operator (=, !=, in, notin) is missing"
        ));
    }
    Ok(Requirement {
        key: checked_key(part)?,
        op: Op::Exists,
    })
}

/// `key in (a,b)` or `key notin (a,b)`: `head` is `key in`, `set` is `(a,b)`.
fn set_requirement(head: &str, set: &str) -> Result<Requirement, String> {
    let words: Vec<&str> = head.split_whitespace().collect();
    let [key, op] = words.as_slice() else {
        return Err(format!(
            "{:?} is not a requirement: a set needs `key in (...)` or `key notin (...)`",
            format!("{head}{set}").trim()
        ));
    };
    let inner = set
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("{set:?}: nothing may follow the set's ')'"))?;
    let values = inner
        .split(',')
        .map(|v| checked_value(v.trim()))
        .collect::<Result<BTreeSet<_>, _>>()?;
    if inner.trim().is_empty() {
        return Err(format!("`{key} {op} ()`: a set needs at least one value"));
    }
    let key = checked_key(key)?;
    let op = match *op {
        "in" => Op::In(values),
        "notin" => Op::NotIn(values),
        other => {
            return Err(format!(
                "unknown operator {other:?} before a set; use `in` or `notin`"
            ));
        }
    };
    Ok(Requirement { key, op })
}

/// A label key: `[prefix/]name`, as Kubernetes allows.
fn checked_key(key: &str) -> Result<String, String> {
    let bad = |why: &str| format!("label key {key:?} {why}");
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if name.is_empty() {
        return Err(bad("is empty"));
    }
    if name.len() > 63 || !is_name(name) {
        return Err(bad(
            "is not valid: at most 63 of A-Z a-z 0-9 - _ . starting and ending with a letter or digit",
        ));
    }
    if let Some(p) = prefix
        && (p.is_empty() || p.len() > 253 || !p.split('.').all(is_dns_label))
    {
        return Err(bad(
            "has an invalid prefix: it must be a DNS subdomain such as example.com",
        ));
    }
    Ok(key.to_string())
}

/// A label value: empty, or a name of at most 63 characters.
fn checked_value(value: &str) -> Result<String, String> {
    if value.is_empty() || (value.len() <= 63 && is_name(value)) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "label value {value:?} is not valid: at most 63 of A-Z a-z 0-9 - _ . starting and \
             ending with a letter or digit"
        ))
    }
}

fn is_name(s: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    alnum(s.chars().next())
        && alnum(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn is_dns_label(s: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    !s.is_empty()
        && s.len() <= 63
        && alnum(s.chars().next())
        && alnum(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn matches(selector: &str, pairs: &[(&str, &str)]) -> bool {
        Selector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector}: {e}"))
            .matches(&labels(pairs))
    }

    #[test]
    fn equality_and_inequality() {
        for s in ["tenant-id=a", "tenant-id==a", " tenant-id = a "] {
            assert!(matches(s, &[("tenant-id", "a")]), "{s}");
            assert!(!matches(s, &[("tenant-id", "b")]), "{s}");
            assert!(!matches(s, &[]), "{s}");
        }
        assert!(matches("tenant-id!=a", &[("tenant-id", "b")]));
        assert!(!matches("tenant-id!=a", &[("tenant-id", "a")]));
        // As in Kubernetes: an absent label is "not equal".
        assert!(matches("tenant-id!=a", &[]));
    }

    #[test]
    fn sets() {
        let s = "tenant-id in (a, b)";
        assert!(matches(s, &[("tenant-id", "a")]));
        assert!(matches(s, &[("tenant-id", "b")]));
        assert!(!matches(s, &[("tenant-id", "c")]));
        assert!(!matches(s, &[]));
        let s = "tenant-id notin (a,b)";
        assert!(!matches(s, &[("tenant-id", "a")]));
        assert!(matches(s, &[("tenant-id", "c")]));
        assert!(matches(s, &[]), "notin holds without the label");
        assert!(matches("tenant-id in(a)", &[("tenant-id", "a")]));
    }

    #[test]
    fn existence_and_conjunction() {
        assert!(matches("gpu", &[("gpu", "")]));
        assert!(!matches("gpu", &[]));
        assert!(matches("!gpu", &[]));
        assert!(!matches("!gpu", &[("gpu", "yes")]));
        let s = "tenant-id in (a,b), env=prod, !legacy";
        assert!(matches(s, &[("tenant-id", "a"), ("env", "prod")]));
        assert!(!matches(s, &[("tenant-id", "a"), ("env", "dev")]));
        assert!(!matches(
            s,
            &[("tenant-id", "a"), ("env", "prod"), ("legacy", "1")]
        ));
        assert!(matches(
            "tenant.sankofa.nexus/id=x",
            &[("tenant.sankofa.nexus/id", "x")]
        ));
        assert_eq!(
            Selector::parse(" a in (b) ").unwrap().to_string(),
            "a in (b)"
        );
    }

    #[test]
    fn bad_input_says_what_is_wrong() {
        for (text, says) in [
            ("", "empty selector"),
            ("   ", "empty selector"),
            ("a=1,,b=2", "empty requirement"),
            ("a=1,", "empty requirement"),
            ("a in (b", "without its ')'"),
            ("a in b)", "without its '('"),
            ("a in ((b))", "nested"),
            ("a in ()", "at least one value"),
            ("a in (b) c", "nothing may follow"),
            ("a is (b)", "unknown operator \"is\""),
            ("in (b)", "key in (...)"),
            ("a b", "operator"),
            ("-a=1", "label key \"-a\""),
            ("a=b c", "label value \"b c\""),
            ("a=-b", "label value"),
            ("Example.COM/a=1", "invalid prefix"),
            ("/a=1", "invalid prefix"),
            ("a/=1", "is empty"),
            ("a=1=2", "label value \"1=2\""),
            ("!", "is empty"),
        ] {
            let e = Selector::parse(text).expect_err(text);
            assert!(e.contains(says), "{text:?}: {e}");
        }
        let long = format!("a={}", "v".repeat(64));
        assert!(Selector::parse(&long).is_err());
    }
}
