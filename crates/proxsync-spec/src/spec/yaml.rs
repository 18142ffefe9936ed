//! Reading YAML into a small located tree, safely.
//!
//! serde-saphyr parses each document into [`Node`]s that carry their line and column, with
//! budgets that bound nesting, node counts and alias expansion (billion laughs). Validation then
//! walks the tree, so it can report every bad field of a document rather than stopping at the
//! first one, and so unknown fields, duplicate keys and wrong types all get a position.
//!
//! serde-saphyr silently skips empty documents (a stray `---`), which a spec repository should
//! hear about; a cheap event-level pre-pass with its parser finds them.
//!
//! Most spec files are one plain document; those are read in one pass over the parser's
//! events into the same tree ([`plain_document`]), about three times as fast.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle};
use serde_saphyr::{DuplicateKeyPolicy, Spanned};

use super::diag::{Diagnostic, Pos};

/// Deepest nesting accepted; a spec needs five levels.
pub(crate) const MAX_DEPTH: usize = 32;
/// Most YAML nodes per document after alias expansion.
pub(crate) const MAX_NODES: usize = 100_000;
/// Most events replayed through aliases per document (bounds alias bombs).
pub(crate) const MAX_ALIAS_REPLAY: usize = 10_000;
/// Most documents per file.
pub(crate) const MAX_DOCUMENTS: usize = 1_000;

/// A YAML node and where it starts (for an alias: where the alias is used).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    /// Position of the node.
    pub pos: Pos,
    /// The value.
    pub value: Value,
}

/// A YAML value. Mappings keep every entry in order, duplicates included, so that validation
/// can report duplicate keys with both positions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// `~`, `null` or nothing.
    Null,
    /// `true` / `false` (YAML 1.2 core schema only: `yes`/`no` stay strings).
    Bool(bool),
    /// An integer.
    Int(i128),
    /// A floating point number (also what very large integers become).
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in source order.
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// What kind of value this is, with the value for scalars, for "found ..." messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Value::Null => "nothing (null)".to_string(),
            Value::Bool(b) => format!("the boolean {b}"),
            Value::Int(i) => format!("the integer {i}"),
            Value::Float(f) => format!("the number {f}"),
            Value::Str(s) => format!("the string {s:?}"),
            Value::Seq(_) => "a list".to_string(),
            Value::Map(_) => "a mapping".to_string(),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Spanned::<Value>::deserialize(d)?;
        let pos = Pos::new(
            to_usize(s.referenced.line()),
            to_usize(s.referenced.column()),
        );
        Ok(Node {
            pos,
            value: s.value,
        })
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Int(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Int(n.into()))
    }
    fn visit_i128<E>(self, n: i128) -> Result<Value, E> {
        Ok(Value::Int(n))
    }
    fn visit_u128<E: de::Error>(self, n: u128) -> Result<Value, E> {
        // Beyond i128 an integer is only "too large" for every field; keep it as a float.
        Ok(i128::try_from(n).map_or(Value::Float(n as f64), Value::Int))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Value, E> {
        Ok(Value::Float(f))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::Str(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::Str(s))
    }
    fn visit_bytes<E>(self, b: &[u8]) -> Result<Value, E> {
        Ok(Value::Str(String::from_utf8_lossy(b).into_owned()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

/// serde-saphyr options: strict booleans (`no` is a string, the "Norway problem"), duplicate
/// keys passed through to us (reported with both positions), and tight budgets.
fn options() -> serde_saphyr::Options {
    let mut opts = serde_saphyr::options! {
        duplicate_keys: DuplicateKeyPolicy::PassThrough,
        strict_booleans: true,
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_depth: MAX_DEPTH,
            max_nodes: MAX_NODES,
            max_events: 4 * MAX_NODES,
            max_documents: MAX_DOCUMENTS,
            max_aliases: 1_000,
            max_anchors: 1_000,
            max_reader_input_bytes: Some(super::MAX_FILE_BYTES + 1),
        },
    };
    opts.alias_limits.max_total_replayed_events = MAX_ALIAS_REPLAY;
    opts.alias_limits.max_replay_stack_depth = MAX_DEPTH;
    opts.alias_limits.max_alias_expansions_per_anchor = 1_000;
    opts
}

/// Turns a serde-saphyr error into a diagnostic with a plain message (its own text repeats the
/// position, which the diagnostic already carries).
fn yaml_error(file: &str, err: &serde_saphyr::Error) -> Diagnostic {
    let pos = err
        .location()
        .filter(|l| l.line() > 0)
        .map_or(Pos::START, |l| {
            Pos::new(to_usize(l.line()), to_usize(l.column().max(1)))
        });
    let text = err.to_string();
    let text = text
        .split(" at line ")
        .next()
        .unwrap_or(&text)
        .trim()
        .to_string();
    let message = if text.contains("alias replay") || text.contains("Alias") {
        format!(
            "YAML aliases expand to too much data ({text}); at most {MAX_ALIAS_REPLAY} nodes may \
             be produced through aliases: write the values out instead"
        )
    } else if text.contains("Depth") || text.contains("recursion limit") {
        format!("YAML nested too deeply ({text}); a spec needs at most {MAX_DEPTH} levels")
    } else if text.contains("budget breached") {
        format!("YAML document too large or complex ({text}); a spec is a few dozen lines")
    } else {
        format!("invalid YAML: {text}")
    };
    Diagnostic::error(file, pos, message)
}

/// Parses all documents of a file. Returns the non-empty documents' root nodes and the
/// diagnostics found (syntax errors, limits, empty documents).
pub(crate) fn parse_documents(file: &str, text: &str) -> (Vec<Node>, Vec<Diagnostic>) {
    // Nearly every spec file: one plain document, read in one pass (see `plain_document`).
    match plain_document(text) {
        Some(node) => (vec![node], Vec::new()),
        None => general_documents(file, text),
    }
}

/// [`parse_documents`] for any file: the event pre-pass, then serde-saphyr.
fn general_documents(file: &str, text: &str) -> (Vec<Node>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let prepass = scan_documents(text);
    if let Some(pos) = prepass.too_many {
        let d = Diagnostic::error(
            file,
            pos,
            format!("more than {MAX_DOCUMENTS} YAML documents in one file; split the file"),
        );
        return (Vec::new(), vec![d]);
    }
    for pos in &prepass.empty {
        diags.push(Diagnostic::error(
            file,
            *pos,
            "empty YAML document (a stray `---` or a document of only comments); every document \
             must be a ProxmoxVM spec: remove the extra `---`",
        ));
    }
    if prepass.count == 0 && prepass.ok {
        diags.push(Diagnostic::error(
            file,
            Pos::START,
            "the file holds no YAML document (it is empty or only comments); a spec file holds \
             one or more ProxmoxVM documents separated by `---`",
        ));
        return (Vec::new(), diags);
    }

    let mut docs = Vec::new();
    if prepass.count == 1 && prepass.ok {
        // One document (nearly every spec file): parsed from the string, not through a reader.
        match serde_saphyr::from_str_with_options::<Node>(text, options()) {
            Ok(node) => docs.push(node),
            Err(err) => diags.push(yaml_error(file, &err)),
        }
        return (docs, diags);
    }
    let mut cursor = std::io::Cursor::new(text.as_bytes());
    for result in serde_saphyr::read_with_options::<_, Node>(&mut cursor, options()) {
        match result {
            Ok(node) => docs.push(node),
            Err(err) => diags.push(yaml_error(file, &err)),
        }
    }
    (docs, diags)
}

/// Deepest nesting [`plain_document`] reads; deeper goes the general way, which reports past
/// [`MAX_DEPTH`].
const PLAIN_MAX_DEPTH: usize = 16;
/// Most nodes [`plain_document`] reads; more go the general way, which reports past
/// [`MAX_NODES`].
const PLAIN_MAX_NODES: usize = 10_000;

/// One document built straight from the parser's events, when it is plain: no anchor, alias,
/// tag or merge key (`<<`), only scalar keys, one document that is not empty, no syntax error,
/// well within the budgets, and every plain scalar one whose type [`plain_scalar`] knows.
/// `None` otherwise, and the file goes the general way (the pre-pass, then serde-saphyr),
/// which gives the same tree for what this reads (`plain_documents_read_as_serde_saphyr_does`)
/// at about a third of the cost: serde-saphyr's generic deserializer was most of a spec's
/// parse, and the pre-pass a second pass over the same events.
fn plain_document(text: &str) -> Option<Node> {
    /// A collection being read: where it starts, its items so far, and a mapping's key
    /// waiting for its value.
    enum Open {
        Seq(Pos, Vec<Node>),
        Map(Pos, Vec<(Node, Node)>, Option<Node>),
    }
    let mut parser = Parser::new_from_str(text);
    let mut open: Vec<Open> = Vec::new();
    let mut root: Option<Node> = None;
    let (mut documents, mut nodes) = (0usize, 0usize);
    while let Some(item) = parser.next_event() {
        let (event, span) = item.ok()?;
        let pos = Pos::new(span.start.line(), span.start.col() + 1);
        let node = match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => continue,
            Event::DocumentStart(..) => {
                documents += 1;
                if documents > 1 {
                    return None;
                }
                continue;
            }
            Event::Scalar(value, style, 0, None) => Node {
                pos,
                value: match style {
                    ScalarStyle::Plain => plain_scalar(&value)?,
                    _ => Value::Str(value.into_owned()),
                },
            },
            Event::SequenceStart(_, 0, None) | Event::MappingStart(_, 0, None)
                if open.len() < PLAIN_MAX_DEPTH =>
            {
                open.push(match event {
                    Event::SequenceStart(..) => Open::Seq(pos, Vec::new()),
                    _ => Open::Map(pos, Vec::new(), None),
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match open.pop()? {
                Open::Seq(pos, items) => Node {
                    pos,
                    value: Value::Seq(items),
                },
                Open::Map(pos, entries, None) => Node {
                    pos,
                    value: Value::Map(entries),
                },
                Open::Map(_, _, Some(_)) => return None,
            },
            // Anchors, aliases, tags, deeper nesting, comments as events.
            _ => return None,
        };
        nodes += 1;
        if nodes > PLAIN_MAX_NODES {
            return None;
        }
        match open.last_mut() {
            None if root.is_none() => root = Some(node),
            None => return None,
            Some(Open::Seq(_, items)) => items.push(node),
            Some(Open::Map(_, entries, key)) => match key.take() {
                Some(key) => entries.push((key, node)),
                None => match &node.value {
                    Value::Seq(_) | Value::Map(_) => return None,
                    Value::Str(s) if s == "<<" => return None,
                    _ => *key = Some(node),
                },
            },
        }
    }
    // An empty or null document is reported by the general way.
    root.filter(|r| open.is_empty() && documents == 1 && r.value != Value::Null)
}

/// A plain (unquoted) scalar's value as serde-saphyr resolves it with this module's
/// [`options`] (YAML 1.2 core schema, strict booleans): null, a boolean, a decimal integer of
/// at most 18 digits, or a string that cannot be read as a number. `None` for anything else
/// that may be a number (`0x1F`, `1e3`, `.inf`, `010`, `1_000`, `10.0.0.1`, ...): left to
/// serde-saphyr.
fn plain_scalar(s: &str) -> Option<Value> {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Some(Value::Null),
        "true" | "True" | "TRUE" => return Some(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Value::Bool(false)),
        _ => {}
    }
    let digits = s.strip_prefix('-').unwrap_or(s);
    let decimal = !digits.is_empty()
        && digits.len() <= 18
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if decimal {
        return s.parse().ok().map(Value::Int);
    }
    let first = s.as_bytes().first().copied().unwrap_or(b' ');
    let numberish = |c: char| c.is_ascii_hexdigit() || "+-._:xXoOiInNtTyY \t\r\n".contains(c);
    let may_be_number = if first.is_ascii_digit() || b"+-. \t".contains(&first) {
        s.chars().all(numberish)
    } else {
        ["inf", "infinity", "nan"].contains(&s.to_ascii_lowercase().as_str())
    };
    (!may_be_number).then(|| Value::Str(s.to_string()))
}

/// What the event pre-pass learned.
struct Prepass {
    /// Number of documents seen before the end or the first syntax error.
    count: usize,
    /// Where each empty (or null) document starts.
    empty: Vec<Pos>,
    /// False when a syntax error stopped the scan (serde-saphyr reports it).
    ok: bool,
    /// Where the document past [`MAX_DOCUMENTS`] starts, if there is one.
    too_many: Option<Pos>,
}

/// Walks parser events (no alias expansion, no tree) to count documents and find empty ones.
fn scan_documents(text: &str) -> Prepass {
    let mut out = Prepass {
        count: 0,
        empty: Vec::new(),
        ok: true,
        too_many: None,
    };
    let mut parser = Parser::new_from_str(text);
    // Start of the current document, while its root node has not been seen yet.
    let mut pending: Option<Pos> = None;
    let mut depth = 0usize;
    while let Some(item) = parser.next_event() {
        let Ok((event, span)) = item else {
            out.ok = false;
            break;
        };
        let at = Pos::new(span.start.line(), span.start.col() + 1);
        match event {
            Event::DocumentStart(explicit, _) => {
                out.count += 1;
                if out.count > MAX_DOCUMENTS {
                    out.too_many = Some(at);
                    break;
                }
                pending = Some(if explicit { at } else { Pos::START });
                depth = 0;
            }
            Event::Scalar(ref value, style, _, ref tag) if depth == 0 => {
                if let Some(start) = pending.take() {
                    let nullish = matches!(value.as_ref(), "" | "~" | "null" | "Null" | "NULL");
                    if style == ScalarStyle::Plain && tag.is_none() && nullish {
                        out.empty.push(if start == Pos::START { at } else { start });
                    }
                }
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                pending = None;
                depth += 1;
            }
            Event::MappingEnd | Event::SequenceEnd => depth = depth.saturating_sub(1),
            Event::Alias(_) => pending = None,
            Event::DocumentEnd => {
                if let Some(start) = pending.take() {
                    out.empty.push(start);
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Vec<Node>, Vec<String>) {
        let (docs, diags) = parse_documents("t.yaml", text);
        (docs, diags.iter().map(ToString::to_string).collect())
    }

    /// serde-saphyr's tree of a one-document text, the general way's.
    fn serde_saphyr_tree(text: &str) -> Result<Node, String> {
        serde_saphyr::from_str_with_options::<Node>(text, options()).map_err(|e| e.to_string())
    }

    /// What `plain_document` reads, it reads as serde-saphyr does: the same values, the same
    /// positions. `None` (the general way) is always allowed; returns whether it read `text`.
    fn reads_as_serde_saphyr_does(text: &str) -> bool {
        let Some(node) = plain_document(text) else {
            return false;
        };
        assert_eq!(Ok(&node), serde_saphyr_tree(text).as_ref(), "{text:?}");
        true
    }

    /// Scalars whose type a YAML reader decides: nulls, booleans of YAML 1.1 and 1.2, integers
    /// of every radix and size, floats, and strings that look like numbers.
    const TRICKY: &[&str] = &[
        "",
        "~",
        "null",
        "Null",
        "NULL",
        "nULL",
        "true",
        "True",
        "TRUE",
        "tRUE",
        "false",
        "False",
        "FALSE",
        "yes",
        "no",
        "on",
        "off",
        "y",
        "n",
        "0",
        "-0",
        "+0",
        "00",
        "010",
        "-010",
        "0o17",
        "0x1F",
        "0b101",
        "1_000",
        "123456789012345678",
        "-123456789012345678",
        "1234567890123456789",
        "99999999999999999999999999999999999999999",
        "-5",
        "+5",
        "1.5",
        "1.",
        ".5",
        "1e3",
        "1E-3",
        "-1e999",
        "1e999",
        ".inf",
        "-.Inf",
        "+.INF",
        ".NaN",
        "inf",
        "Infinity",
        "-inf",
        "nan",
        "NaN",
        "2Gi",
        "512Mi",
        "1.5Gi",
        "10.0.0.1",
        "10.0.0.1/24",
        "1:30",
        "190:20:30",
        "2024-01-01",
        "2024-01-01T00:00:00Z",
        "-",
        "--",
        "-foo",
        "foo",
        "bad",
        "fade",
        "deadbeef",
        "0xZZ",
        "local-lvm",
        "a b",
        "x:y",
        "${HOME}",
        "\u{65e5}\u{672c}",
        "\u{fc}",
        "- x",
        "#x",
        "@x",
        "%x",
        "!x",
        "&x",
        "*x",
        "|",
        ">",
        "<<",
        "? x",
        "a #b",
    ];

    #[test]
    fn plain_documents_read_as_serde_saphyr_does() {
        let mut read = 0;
        for value in TRICKY {
            for style in [
                value.to_string(),
                format!("'{value}'"),
                format!("\"{value}\""),
            ] {
                for doc in [
                    format!("k: {style}\n"),
                    format!("{style}: v\n"),
                    format!("- {style}\n- [{style}, x]\n"),
                    format!("a:\n  b: {style}\n  c: [1, {style}]\n  d: {{e: {style}}}\n"),
                    format!("k: |\n  {style}\n  more\nj: >-\n  {style}\n\n  x\n"),
                    format!("k: {style}\n  continued\n"),
                    format!("--- \n{style}\n...\n"),
                    format!("k: {style}\nk: {style}\n"),
                    format!("# c\nk: {style} # c\n"),
                ] {
                    read += usize::from(reads_as_serde_saphyr_does(&doc));
                }
            }
        }
        assert!(read > 1_000, "{read} documents read the plain way");
        // A spec and every YAML file of the repository's examples and docs.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = 0;
        for dir in ["examples", "docs", "tests", "packaging", "bench"] {
            let mut stack = vec![root.join(dir)];
            while let Some(dir) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                        let text = std::fs::read_to_string(&path).unwrap_or_default();
                        for doc in text.split("\n---\n") {
                            files += usize::from(reads_as_serde_saphyr_does(doc));
                        }
                    }
                }
            }
        }
        assert!(files > 10, "{files} example documents read the plain way");
    }

    #[test]
    fn what_is_not_plain_goes_the_general_way() {
        for text in [
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "<<: {a: 1}\nb: 2\n",
            "? [a]\n: 1\n",
            "a: 1\n---\nb: 2\n",
            "~\n",
            "# only a comment\n",
            "a: 0x1F\n",
            "a: [\n",
        ] {
            assert_eq!(plain_document(text), None, "{text:?}");
        }
        let deep = format!(
            "{}1{}",
            "[".repeat(PLAIN_MAX_DEPTH + 1),
            "]".repeat(PLAIN_MAX_DEPTH + 1)
        );
        assert_eq!(plain_document(&deep), None);
        // The bench's and the examples' specs are plain.
        assert!(plain_document("apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: vm-1\nspec:\n  forProvider:\n    node: pve1\n    image: \"9000\"\n    memory: 2Gi\n").is_some());
    }

    proptest::proptest! {
        /// Random YAML-ish text: whatever the plain way reads, serde-saphyr reads the same.
        #[test]
        fn random_text_reads_as_serde_saphyr_does(
            text in "([a-z0-9]{1,3}|[-:,\\[\\]{}'\"#&*!|>?%@. ~]|\n {0,4}){0,40}"
        ) {
            reads_as_serde_saphyr_does(&text);
        }
    }

    #[test]
    fn located_tree() {
        let (docs, diags) = parse("a: 1\nb:\n  - x\n  - 'y'\n");
        assert!(diags.is_empty(), "{diags:?}");
        let Some(Node {
            value: Value::Map(entries),
            pos,
        }) = docs.first()
        else {
            panic!("expected a map: {docs:?}")
        };
        assert_eq!(*pos, Pos::new(1, 1));
        assert_eq!(
            entries[0].1,
            Node {
                pos: Pos::new(1, 4),
                value: Value::Int(1)
            }
        );
        let Value::Seq(items) = &entries[1].1.value else {
            panic!()
        };
        assert_eq!(
            items[1],
            Node {
                pos: Pos::new(4, 5),
                value: Value::Str("y".into())
            }
        );
    }

    #[test]
    fn empty_documents_are_reported() {
        let (docs, diags) = parse("a: 1\n---\n---\n# only a comment\n---\nb: 2\n");
        assert_eq!(docs.len(), 2);
        assert_eq!(diags.len(), 2, "{diags:?}");
        assert!(
            diags[0].starts_with("t.yaml:2:1: error: empty YAML document"),
            "{diags:?}"
        );
        assert!(
            diags[1].starts_with("t.yaml:3:1: error: empty YAML document"),
            "{diags:?}"
        );
        let (_, diags) = parse("# nothing here\n");
        assert!(diags[0].contains("no YAML document"), "{diags:?}");
        let (_, diags) = parse("");
        assert!(diags[0].contains("no YAML document"), "{diags:?}");
        let (_, diags) = parse("a: 1\n--- ~\n");
        assert!(
            diags[0].starts_with("t.yaml:2:1: error: empty"),
            "{diags:?}"
        );
    }

    #[test]
    fn norway_stays_a_string() {
        let (docs, _) = parse("a: no\n");
        let Some(Node {
            value: Value::Map(e),
            ..
        }) = docs.first()
        else {
            panic!()
        };
        assert_eq!(e[0].1.value, Value::Str("no".into()));
    }

    #[test]
    fn alias_bomb_is_bounded() {
        let mut text = String::from("a: &a [x,x,x,x,x,x,x,x,x,x]\n");
        for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h", "i"]
            .iter()
            .zip(["b", "c", "d", "e", "f", "g", "h", "i", "j"])
        {
            text.push_str(&format!("{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
        }
        // Refused by the alias budget before expanding (how long it takes is not asserted).
        let (_, diags) = parse(&text);
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert!(diags[0].contains("aliases expand"), "{diags:?}");
    }

    #[test]
    fn deep_nesting_is_bounded() {
        let text = format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let (_, diags) = parse(&text);
        assert!(
            diags.iter().any(|d| d.contains("nested too deeply")),
            "{diags:?}"
        );
        let mut text = String::new();
        for i in 0..200 {
            text.push_str(&" ".repeat(i));
            text.push_str("k:\n");
        }
        let (_, diags) = parse(&text);
        assert!(
            diags.iter().any(|d| d.contains("nested too deeply")),
            "{diags:?}"
        );
    }

    // The attack on `plain_document` (stop 63): whatever it reads, it reads as the general way.
    use proptest::strategy::Strategy as _;

    /// `None` when both ways agree (or the fast path declines), else a description.
    fn disagreement(text: &str) -> Option<String> {
        let fast = plain_document(text)?;
        let general = general_documents("t.yaml", text);
        let tree = serde_saphyr_tree(text);
        if tree.as_ref() != Ok(&fast) {
            return Some(format!(
                "{text:?}\n  fast:    {fast:?}\n  serde:   {tree:?}"
            ));
        }
        let (docs, diags) = parse_documents("t.yaml", text);
        if (docs.clone(), diags.clone()) != general {
            return Some(format!(
                "{text:?}\n  parse_documents: {:?}\n  general: {general:?}",
                (docs, diags)
            ));
        }
        None
    }

    fn report(failures: &[String]) {
        if !failures.is_empty() {
            let shown: Vec<&String> = failures.iter().take(40).collect();
            panic!(
                "{} disagreements:\n{}",
                failures.len(),
                shown
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }

    const TEMPLATES: &[&str] = &[
        "k: S\n",
        "- S\n",
        "S: v\n",
        "[S]\n",
        "{S: v}\n",
        "{k: S}\n",
        "S\n",
        "--- S\n",
        "k: [a, S]\n",
        "- k: S\n  j: S\n",
        "? S\n: S\n",
    ];

    #[test]
    fn attack_short_scalars_exhaustive() {
        let alphabet: Vec<char> =
            "019.-+_eExXoObBaAfFiInNtTyYlLuUsS~:, \t#'\"!&*|>%@?[]{}`\u{a0}\u{660}\u{ff11}"
                .chars()
                .collect();
        let mut failures = Vec::new();
        let mut read = 0usize;
        let mut scalars: Vec<String> = vec![String::new()];
        let max_len = if std::env::var_os("YAML_ATTACK_LONG").is_some() {
            3
        } else {
            2
        };
        for len in 1..=max_len {
            let mut next = Vec::new();
            for s in scalars.iter().filter(|s| s.chars().count() == len - 1) {
                for c in &alphabet {
                    next.push(format!("{s}{c}"));
                }
            }
            scalars.extend(next);
        }
        for s in &scalars {
            for t in TEMPLATES {
                let text = t.replace('S', s);
                if plain_document(&text).is_some() {
                    read += 1;
                }
                if let Some(f) = disagreement(&text) {
                    failures.push(f);
                }
            }
        }
        eprintln!(
            "exhaustive: {} scalars, {read} docs read the plain way",
            scalars.len()
        );
        report(&failures);
    }

    #[test]
    fn attack_number_spellings() {
        let mut vals: Vec<String> = Vec::new();
        for base in [
            "1",
            "12",
            "123456789012345678",
            "999999999999999999",
            "1000000000000000000",
            "9223372036854775807",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "170141183460469231731687303715884105727",
            "340282366920938463463374607431768211456",
            "0",
            "00",
            "01",
            "0.0",
            "1.0",
            "1e1",
            "1E+1",
            "1e-1",
            ".1",
            "1.",
            "1_0",
            "0x10",
            "0o10",
            "0b10",
            "0X1",
            "0O1",
            "0B1",
            "inf",
            "Inf",
            "INF",
            "infinity",
            "Infinity",
            "INFINITY",
            "nan",
            "NaN",
            "NAN",
            ".inf",
            ".nan",
            ".Inf",
            ".NaN",
            ".NAN",
            ".INF",
            "iNf",
            "nAn",
            "InFiNiTy",
            "1:2",
            "1:2:3",
            "1__0",
            "_1",
            "1_",
            "0x",
            "0o",
            "0b",
            "0x_1",
            "e1",
            "E1",
            "1e",
            "1e+",
            "--1",
            "+-1",
            "-+1",
            "1-",
            "1+",
            "1.2.3",
            "1..2",
            "..",
            ".",
            "1 2",
            "1\t2",
            "0001",
            "1e400",
            "1e-400",
            "4.9e-324",
            "1.7976931348623157e308",
            "١",
            "１",
            "1\u{200b}",
            "\u{feff}1",
            "1\u{a0}",
            "٣٤",
            "true",
            "True",
            "TRUE",
            "false",
            "False",
            "FALSE",
            "null",
            "Null",
            "NULL",
            "~",
            "yes",
            "no",
            "on",
            "off",
            "y",
            "n",
            "Y",
            "N",
        ] {
            for sign in ["", "-", "+"] {
                vals.push(format!("{sign}{base}"));
            }
        }
        for n in 1..=40 {
            vals.push("9".repeat(n));
            vals.push(format!("-{}", "9".repeat(n)));
            vals.push(format!("1{}", "0".repeat(n)));
            vals.push(format!("-1{}", "0".repeat(n)));
        }
        vals.push("1".repeat(5000));
        vals.push(format!("-{}", "1".repeat(5000)));
        let mut failures = Vec::new();
        for v in &vals {
            for t in TEMPLATES {
                if let Some(f) = disagreement(&t.replace('S', v)) {
                    failures.push(f);
                }
            }
        }
        report(&failures);
    }

    #[test]
    fn attack_structures() {
        let mut cases: Vec<String> = [
            // empty values in every container kind
            "k:\n",
            "k:\nj:\n",
            "- \n",
            "-\n-\n",
            "[a, ]\n",
            "[a,]\n",
            "{a, }\n",
            "{a: }\n",
            "{a:}\n",
            "{a: , b: }\n",
            "{a, b}\n",
            "[a: b]\n",
            "[a: ]\n",
            "[: b]\n",
            "[? a]\n",
            "[? a : b]\n",
            "{? a}\n",
            "{? : b}\n",
            "{: b}\n",
            "? a\n",
            "? a\n: \n",
            "?\n: b\n",
            ": b\n",
            "? \n",
            "k: \n  \n",
            "- - - a\n",
            "- - \n",
            "- []\n- {}\n",
            "[]\n",
            "{}\n",
            "[[]]\n",
            "[{}]\n",
            "k: []\nj: {}\n",
            "- ? a\n  : b\n",
            "- a: \n  b:\n",
            "k: [\n  a,\n  b,\n]\n",
            "k: {\n  a: 1,\n  b: 2,\n}\n",
            "k: [a, b\n  , c]\n",
            "[a\n, b]\n",
            "{a\n: b}\n",
            "k: [a,\n b]\n",
            "[\"a\": b]\n",
            "{\"a\":b}\n",
            "{'a':b}\n",
            "[a, [b, [c, [d]]]]\n",
            // keys of every scalar type
            "1: a\n2: b\n",
            "true: a\n",
            "null: a\n",
            "~: a\n",
            "'': a\n",
            "\"\": a\n",
            "? \n: a\n",
            "1: a\n'1': b\n",
            "-1: a\n",
            "0: a\n",
            "123456789012345678: a\n",
            // multi-line plain and quoted scalars
            "k: a\n  b\n",
            "k: a\n\n  b\n",
            "k: a\n  \n  b\n",
            "k: 1\n  2\n",
            "k: true\n  x\n",
            "k: 'a\n  b'\n",
            "k: \"a\\\n  b\"\n",
            "k: \"a\n\n  b\"\n",
            "- a\n  b\n",
            "a\nb\n",
            "a\n\nb\n",
            "1\n2\n",
            "k: - a\n",
            "k: a - b\n",
            "k: a: b\n",
            "k: a #b\n",
            "k: a# b\n",
            "k: a\t#b\n",
            "k: a\n  #b\n  c\n",
            "k:\n  a\n  b\n",
            // block scalars
            "k: |\n  a\n",
            "k: |-\n  a\n",
            "k: |+\n  a\n\n",
            "k: >\n  a\n  b\n",
            "k: >-\n  a\n\n  b\n",
            "k: |2\n   a\n",
            "k: |1\n  a\n",
            "k: >2-\n   a\n  \n",
            "k: |\n\n  a\n",
            "k: |\n  \n  a\n",
            "k: |\n",
            "k: >\n",
            "k: |-\n",
            "k: |+\n",
            "- |\n  a\n- >\n  b\n",
            "|\n  a\n",
            ">\n a\n",
            "k: |\n  true\n",
            "k: |-\n  1\n",
            "k: >-\n  null\n",
            "k: | # c\n  a\n",
            "k: |\n \ta\n",
            "k: |\n  a\n # c\n",
            "k: |\n\ta\n",
            "k: >\n\n\n",
            "k: |+\n\n",
            "k: |-\n  a\n  \n",
            // document markers and directives
            "---\na: 1\n",
            "--- \na: 1\n...\n",
            "%YAML 1.2\n---\na: 1\n",
            "%YAML 1.1\n---\na: yes\n",
            "%YAML 1.1\n---\na: 010\n",
            "%TAG ! tag:x,2000:\n---\na: 1\n",
            "%FOO bar\n---\na: 1\n",
            "a: 1\n...\n",
            "a: 1\n...\n# c\n",
            "a: 1\n...\n...\n",
            "--- a\n",
            "--- [a]\n",
            "--- {a: 1}\n",
            "--- |\n  a\n",
            "--- >\n a\n",
            "a: 1\n--- \n",
            "a: 1\n---\n",
            "...\na: 1\n",
            "---\n...\n",
            "a: ---\n",
            "a: ...\n",
            "- ---\n",
            "k: v\n ...\n",
            "k: v\n---x\n",
            "---x: 1\n",
            "%YAML 1.2\n--- a\n",
            "%YAML 1.2\na: 1\n",
            "a: 1\n%YAML 1.2\n",
            "%YAML 1.3\n---\na: 1\n",
            "%YAML 2.0\n---\na: 1\n",
            // BOM, tabs, CRLF, CR
            "\u{feff}a: 1\n",
            "\u{feff}\u{feff}a: 1\n",
            "a: 1\n\u{feff}",
            "a: \u{feff}1\n",
            "\u{feff}---\na: 1\n",
            "\u{feff}\n\na: 1\n",
            "\u{feff}# c\na: [1, 2]\n",
            "a:\t1\n",
            "a: \t1\n",
            "a:\t\n",
            "\ta: 1\n",
            "a:\n\t- 1\n",
            "a: [\t1\t,\t2\t]\n",
            "- \t1\n",
            "-\t1\n",
            "a: 1\t\n",
            "a: 1 \t # c\n",
            "a\t: 1\n",
            "{a\t:\t1}\n",
            "a: 1\r\nb: 2\r\n",
            "a: 1\rb: 2\r",
            "a: |\r\n  x\r\n  y\r\n",
            "a: x\r\n  y\r\n",
            "a: 1\r\n",
            "a: \"x\r\n y\"\r\n",
            "- 1\r- 2\r",
            "a: tru\re\n",
            "a: 1\r",
            "a: b\r\n\r\n",
            "a: |\r  x\r",
            "a: 1\u{85}b: 2\n",
            "a: 1\u{2028}b: 2\n",
            "a: x\u{85}y\n",
            "a: x\u{2028}y\n",
            "a: 1\u{85}",
            "a: 1\u{2029}",
            "a: true\u{85}",
            "a: x\u{0}y\n",
            "a: \u{1}\n",
            "a: x\u{7f}\n",
            "a: \u{fffe}\n",
            "a: \"\\0\"\n",
            "a: \"\\x41\\u00e9\\U0001F600\"\n",
            "a: \"\\ud800\"\n",
            "a: \"\\q\"\n",
            // comments in odd places
            "# c\n",
            "a: 1 # c\n",
            "a: # c\n  1\n",
            "a: # c\n",
            "- # c\n  1\n",
            "[1, # c\n 2]\n",
            "{a: 1, # c\n b: 2}\n",
            "a: 1#c\n",
            "a: '1'#c\n",
            "a: '1' #c\n",
            "? a # c\n: b # c\n",
            "a:\n  # c\n  b: 1\n",
            "a:\n# c\n  b: 1\n",
            "#c\n---\n#c\na: 1\n#c\n...\n#c\n",
            // duplicate keys
            "a: 1\na: 2\n",
            "a: 1\na: 1\n",
            "{a: 1, a: 2}\n",
            "1: a\n1: b\n",
            "~: a\nnull: b\n",
            "a: 1\n'a': 2\n",
            "true: 1\nTrue: 2\n",
            // positions of odd node kinds
            "a:\n- 1\n- 2\n",
            "a:\n  - 1\n",
            "- a: 1\n  b: 2\n",
            "- - 1\n  - 2\n",
            "-   a\n",
            "a:   \n  b\n",
            "? a\n: b\n",
            "?\n  a\n:\n  b\n",
            "a: !!str\n",
            "a: &x\n",
            "   a: 1\n   b: 2\n",
            "\n\n\na: 1\n",
            "a :  1\n",
            "'a' : 1\n",
            "\"a\"   :   \"b\"\n",
            "a: 'b'\n",
            "a: \"b\"\n",
            "a: 'it''s'\n",
            "a: ''\n",
            "a: \"\"\n",
            "[a, 'b', \"c\", |]\n",
            "k: \u{e9}\u{e9}: \u{e9}\n",
            "\u{1f600}: \u{1f600}\n",
            "- \u{65e5}\u{672c}\n- x\n",
            // interpolation-looking text
            "a: ${VAR}\n",
            "a: ${VAR:-1}\n",
            "a: $VAR\n",
            "a: '${VAR}'\n",
            "${VAR}: 1\n",
            "a: ${VAR:?err}\n",
            "a: $${VAR}\n",
            "a: ${}\n",
            "a: ${1}\n",
            "a: x${VAR}y\n",
            // merge-ish keys
            "<<: 1\n",
            "'<<': 1\n",
            "\"<<\": 1\n",
            "<< : 1\n",
            "{<<: 1}\n",
            "? <<\n: 1\n",
            "<<<: 1\n",
            "a: <<\n",
            "- <<\n",
            "<<\n",
            "<< x: 1\n",
            "x<<: 1\n",
            // misc syntax
            "a: b: c\n",
            "a: 'b' c\n",
            "- a\nb: c\n",
            "a: 1\n b: 2\n",
            "a:\n  b: 1\n c: 2\n",
            "a: [1, 2\n",
            "a: {b: 1\n",
            "a: ]\n",
            "a: }\n",
            "a: ,\n",
            "a: x,y\n",
            "[a]b\n",
            "{a: 1}b\n",
            "a: @x\n",
            "a: `x\n",
            "a: %x\n",
            "a: !x\n",
            "a: |x\n",
            "a: >x\n",
            "a: -1-\n",
            "a: \"x\"y\n",
            "a: 'x\n",
            "a: \"x\n",
            "- [a, b]: c\n",
            "[a, b]: c\n",
            "{a: b}: c\n",
            "a: b\n...\nc\n",
            "- a\n-b\n",
            "-a\n",
            "--a\n",
            "- -a\n",
            "a:b\n",
            "a:b: c\n",
            "http://x: 1\n",
            "a: http://x\n",
            "a: ::\n",
            "::: 1\n",
            "a: -\n",
            "a: - \n",
            "- -\n",
            "a: ?\n",
            "a: ? b\n",
            "?a: 1\n",
            "a: :x\n",
            ":x: 1\n",
            "[:x]\n",
            "[a:x]\n",
            "{a:x}\n",
            "[a :x]\n",
            "{a :x}\n",
            "['a':x]\n",
            "{'a':x}\n",
            "[x: ]\n",
            "{x: , }\n",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // very deep / very wide near the limits
        for d in [14, 15, 16, 17, 31, 32, 33] {
            cases.push(format!("{}1{}\n", "[".repeat(d), "]".repeat(d)));
            cases.push(format!("{}1{}\n", "{a: ".repeat(d), "}".repeat(d)));
            let mut t = String::new();
            for i in 0..d {
                t.push_str(&"  ".repeat(i));
                t.push_str("k:\n");
            }
            cases.push(t.clone());
            t.push_str(&"  ".repeat(d));
            t.push_str("v\n");
            cases.push(t);
            let mut t = String::new();
            for i in 0..d {
                t.push_str(&"  ".repeat(i));
                t.push_str("-\n");
            }
            cases.push(t);
        }
        for n in [4_998, 4_999, 5_000, 9_998, 9_999, 10_000, 10_001] {
            cases.push(format!("[{}]\n", vec!["1"; n].join(",")));
            cases.push(format!("[{}]\n", vec!["[]"; n].join(",")));
            let mut t = String::new();
            for i in 0..n / 2 {
                t.push_str(&format!("k{i}: v\n"));
            }
            cases.push(t);
        }
        // long scalars and keys
        for n in [1000, 1023, 1024, 1025, 1030, 2000, 70_000] {
            cases.push(format!("{}: v\n", "k".repeat(n)));
            cases.push(format!("{{{}: v}}\n", "k".repeat(n)));
            cases.push(format!("[{}: v]\n", "k".repeat(n)));
            cases.push(format!("k: {}\n", "v".repeat(n)));
            cases.push(format!("'{}': v\n", "k".repeat(n)));
            cases.push(format!("? {}\n: v\n", "k".repeat(n)));
        }
        let mut failures = Vec::new();
        let mut read = 0;
        for c in &cases {
            read += usize::from(plain_document(c).is_some());
            if let Some(f) = disagreement(c) {
                failures.push(f);
            }
            // The same text with CRLF line ends, with a BOM, and between `---` and `...`.
            let crlf = c.replace('\n', "\r\n");
            let bom = format!("\u{feff}{c}");
            let doc = format!("---\n{c}...\n");
            for v in [crlf, bom, doc] {
                if let Some(f) = disagreement(&v) {
                    failures.push(f);
                }
            }
        }
        eprintln!(
            "structures: {} cases, {read} read the plain way",
            cases.len()
        );
        report(&failures);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]
        /// Random token soup with the characters that matter to YAML.
        #[test]
        fn attack_random_tokens(
            parts in proptest::collection::vec(proptest::prop_oneof![
                proptest::string::string_regex("[a-z]{1,3}").unwrap(),
                proptest::string::string_regex("[-+]?[0-9]{1,3}([._][0-9]{0,2})?([eE][-+]?[0-9])?").unwrap(),
                proptest::sample::select(vec![
                    "- ", ": ", ":", "? ", ",", "[", "]", "{", "}", "'", "\"", "#", " #c", "|", ">",
                    "|-", ">+", "|2", "\n", "\n  ", "\n    ", "\r\n", "\r", "\t", " ", "  ", "---",
                    "...", "\n---\n", "\n...\n", "%YAML 1.2\n", "\u{feff}", "~", "null", "true",
                    "False", "<<", "${X}", "0x1", ".inf", "nan", "\u{e9}", "\u{85}", "\u{2028}",
                    "\\", "\\n", "''", "\"\"", "-", "--", ".",
                ]).prop_map(String::from),
            ], 0..30)
        ) {
            let text: String = parts.concat();
            if let Some(f) = disagreement(&text) {
                panic!("{f}");
            }
        }

        /// Number-like scalars longer than the exhaustive test's, in every position.
        #[test]
        fn attack_random_numberish_scalars(
            s in proptest::prop_oneof![
                "[-+0-9._eExXoObBaAfFiInNtTyY:~ ]{1,12}",
                "[-+]?(0[xXoObB])?[0-9_]{0,4}[.]?[0-9a-fA-F_]{0,4}([eE][-+]?[0-9]{0,3})?",
                "[-+]?[.]?([iI][nN][fF]|[nN][aA][nN]|[iI]nfinity)",
            ],
            t in 0usize..11,
        ) {
            let text = TEMPLATES[t].replace('S', &s);
            if let Some(f) = disagreement(&text) {
                panic!("{f}");
            }
        }

        /// Random block mappings/sequences of random scalars.
        #[test]
        fn attack_random_block_docs(
            lines in proptest::collection::vec((0usize..4, proptest::sample::select(vec!["k: ", "- ", "? ", ": ", "- k: ", "", "k:", "-", "- - "]),
                proptest::string::string_regex("([a-z0-9 ._:+-]|'|\"|\\[|\\]|\\{|\\}|,|#|\\|){0,8}").unwrap()), 1..12)
        ) {
            let mut text = String::new();
            for (indent, lead, val) in &lines {
                text.push_str(&"  ".repeat(*indent));
                text.push_str(lead);
                text.push_str(val);
                text.push('\n');
            }
            if let Some(f) = disagreement(&text) {
                panic!("{f}");
            }
        }
    }
}
