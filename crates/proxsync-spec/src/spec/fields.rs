//! The toolkit every field's validation uses: the diagnostics of one file (`Ctx`), a mapping's
//! fields with duplicate and unknown keys reported (`Obj`, `object`), and strings, sizes and
//! enumerations read with errors that name the path and what would be valid.

use std::collections::HashMap;

use super::diag::{Diagnostic, Pos};
use super::units::{format_bytes, parse_size, plain_number};
use super::yaml::{Node, Value};

/// The path of the document's top level in messages.
pub(super) const TOP: &str = "the document";

/// Collects the diagnostics of one file.
pub(crate) struct Ctx<'a> {
    file: &'a str,
    /// The `_defaults.yaml` files the document's values may come from ([`Pos::source`] N is
    /// `defaults[N - 1]`).
    pub(super) defaults: &'a [std::sync::Arc<super::defaults::Defaults>],
    /// Everything found so far, in the order found.
    pub diags: Vec<Diagnostic>,
    errors: usize,
    /// Where the document's `userData` decrypted from SOPS is: its errors do not show it.
    pub(super) sealed: Option<Pos>,
}

impl<'a> Ctx<'a> {
    /// A context for `file`.
    pub(crate) fn new(file: &'a str) -> Self {
        Ctx {
            file,
            defaults: &[],
            diags: Vec::new(),
            errors: 0,
            sealed: None,
        }
    }

    /// Records a diagnostic made elsewhere (a SOPS document that does not open) as an error.
    pub(super) fn refuse(&mut self, d: Diagnostic) {
        self.errors += 1;
        self.diags.push(d);
    }

    /// Records diagnostics made elsewhere (a set's own problems), counting the errors.
    pub(super) fn refuse_all(&mut self, diags: Vec<Diagnostic>) {
        self.errors += diags.iter().filter(|d| d.is_error()).count();
        self.diags.extend(diags);
    }

    pub(super) fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.errors += 1;
        let (file, pos) = self.locate(pos);
        self.diags.push(Diagnostic::error(file, pos, message));
    }

    pub(super) fn warning(&mut self, pos: Pos, message: impl Into<String>) {
        let (file, pos) = self.locate(pos);
        self.diags.push(Diagnostic::warning(file, pos, message));
    }

    /// The file `pos` is in, and `pos` in it.
    fn locate(&self, pos: Pos) -> (&'a str, Pos) {
        let defaults: &'a [std::sync::Arc<super::defaults::Defaults>] = self.defaults;
        match (pos.source as usize)
            .checked_sub(1)
            .and_then(|i| defaults.get(i))
        {
            Some(d) => (d.file.as_str(), Pos { source: 0, ..pos }),
            None => (self.file, pos),
        }
    }

    /// Errors recorded so far.
    pub(super) fn error_count(&self) -> usize {
        self.errors
    }

    /// The file the diagnostics are of.
    pub(super) fn file(&self) -> &'a str {
        self.file
    }

    /// Records `Err` as an error at `pos`; passes `Ok` through.
    pub(super) fn check<T>(&mut self, pos: Pos, result: Result<T, String>) -> Option<T> {
        result.map_err(|e| self.error(pos, e)).ok()
    }
}

/// The fields of one mapping, after duplicate and unknown keys were reported.
pub(super) struct Obj<'n> {
    pub(super) path: String,
    pub(super) pos: Pos,
    pub(super) entries: Vec<(&'n str, Pos, &'n Node)>,
}

impl<'n> Obj<'n> {
    /// The value of `key`, unless absent or null (YAML `key:` with nothing means "not set").
    pub(super) fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, _, v)| *v)
            .filter(|v| v.value != Value::Null)
    }

    pub(super) fn path(&self, key: &str) -> String {
        if self.path == TOP {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Where `key` is written, if present (even with a null value).
    pub(super) fn key_pos(&self, key: &str) -> Option<Pos> {
        self.entries
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, p, _)| *p)
    }

    /// The value of a required `key`; reports it missing (at the mapping) otherwise.
    pub(super) fn required(&self, ctx: &mut Ctx, key: &str, what: &str) -> Option<&'n Node> {
        let node = self.get(key);
        if node.is_none() {
            ctx.error(
                self.pos,
                format!("missing required field {}: {what}", self.path(key)),
            );
        }
        node
    }
}

/// Reads a mapping. `allowed: None` accepts any (string) key, as for labels.
pub(super) fn object<'n>(
    ctx: &mut Ctx,
    node: &'n Node,
    path: &str,
    allowed: Option<&[&str]>,
) -> Option<Obj<'n>> {
    let Value::Map(map) = &node.value else {
        let fields = allowed.map_or(String::new(), |a| {
            format!(" with the fields {}", a.join(", "))
        });
        ctx.error(
            node.pos,
            format!(
                "{path} must be a mapping{fields}; found {}",
                node.value.describe()
            ),
        );
        return None;
    };
    let mut obj = Obj {
        path: path.to_string(),
        pos: node.pos,
        entries: Vec::new(),
    };
    let mut seen: HashMap<&str, Pos> = HashMap::new();
    for (key, value) in map {
        let Value::Str(k) = &key.value else {
            ctx.error(
                key.pos,
                format!(
                    "keys in {path} must be strings; found {}",
                    key.value.describe()
                ),
            );
            continue;
        };
        if let Some(first) = seen.get(k.as_str()) {
            ctx.error(
                key.pos,
                format!("duplicate key {k:?} in {path} (first at line {}, column {}); each key may appear once", first.line, first.column),
            );
            continue;
        }
        seen.insert(k, key.pos);
        if let Some(allowed) = allowed
            && !allowed.contains(&k.as_str())
        {
            let hint = super::closest(k, allowed.iter().copied())
                .map_or(String::new(), |a| format!(" (did you mean {a:?}?)"));
            ctx.error(
                key.pos,
                format!(
                    "unknown field {k:?} in {path}{hint}; valid fields are: {}",
                    allowed.join(", ")
                ),
            );
            continue;
        }
        obj.entries.push((k, key.pos, value));
    }
    Some(obj)
}

/// A string value, or an error naming what was found instead.
pub(super) fn string<'n>(
    ctx: &mut Ctx,
    node: &'n Node,
    path: &str,
    example: &str,
) -> Option<&'n str> {
    match &node.value {
        Value::Str(s) => Some(s),
        Value::Int(i) => {
            ctx.error(
                node.pos,
                format!(
                    "{path} must be a string; found the integer {i} (write it quoted: \"{i}\")"
                ),
            );
            None
        }
        other => {
            ctx.error(
                node.pos,
                format!(
                    "{path} must be a string (e.g. {example}); found {}",
                    other.describe()
                ),
            );
            None
        }
    }
}

/// A size in bytes within `[min, max]`.
pub(super) fn size_field(
    ctx: &mut Ctx,
    n: &Node,
    path: &str,
    unit: u64,
    unit_name: &str,
    min: u64,
    max: u64,
) -> Option<u64> {
    let bytes = match &n.value {
        Value::Int(i) => plain_number(*i, unit, unit_name),
        Value::Str(s) => parse_size(s, unit, unit_name),
        Value::Float(f) => Err(format!(
            "{f} is not a whole number; write a whole number with a unit, e.g. 1536Mi rather than 1.5Gi"
        )),
        other => Err(format!(
            "expected a size such as 8Gi or a number of {unit_name}; found {}",
            other.describe()
        )),
    };
    let bytes = ctx.check(n.pos, bytes.map_err(|e| format!("{path}: {e}")))?;
    if !(min..=max).contains(&bytes) {
        ctx.error(
            n.pos,
            format!(
                "{path} is {}, outside the allowed range {} .. {}",
                format_bytes(bytes),
                format_bytes(min),
                format_bytes(max)
            ),
        );
        return None;
    }
    Some(bytes)
}

/// One of `choices`, by name; an error lists the valid names (and the closest one).
pub(super) fn enum_field<T: Copy>(
    ctx: &mut Ctx,
    n: &Node,
    path: &str,
    choices: &[(&str, T)],
) -> Option<T> {
    let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
    let s = string(ctx, n, path, names.first().copied().unwrap_or_default())?;
    if let Some((_, v)) = choices.iter().find(|(name, _)| *name == s) {
        return Some(*v);
    }
    let hint = super::closest(s, names.iter().copied())
        .map_or(String::new(), |name| format!(" (did you mean {name:?}?)"));
    ctx.error(
        n.pos,
        format!(
            "{path} {s:?} is not valid{hint}; valid values are: {}",
            names.join(", ")
        ),
    );
    None
}

/// A list of strings, at most `max`, each with where it is written.
pub(super) fn string_list(
    ctx: &mut Ctx,
    n: &Node,
    path: &str,
    example: &str,
    max: usize,
) -> Option<Vec<(String, Pos)>> {
    let Value::Seq(items) = &n.value else {
        ctx.error(
            n.pos,
            format!(
                "{path} must be a list, e.g. [{example}]; found {}",
                n.value.describe()
            ),
        );
        return None;
    };
    if items.len() > max {
        ctx.error(
            n.pos,
            format!("{path} has {} entries; at most {max}", items.len()),
        );
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    for item in items {
        match string(ctx, item, path, example) {
            Some(s) => out.push((s.to_string(), item.pos)),
            None => ok = false,
        }
    }
    ok.then_some(out)
}
