//! `_defaults.yaml` (`kind: ProxmoxDefaults`): values every spec in its directory and below
//! takes unless it sets them itself.
//!
//! ```yaml
//! apiVersion: proxsync.io/v1
//! kind: ProxmoxDefaults
//! metadata:
//!   labels: {team: web}          # merged into each spec's labels
//! spec:
//!   deletionPolicy: Orphan
//!   forProvider:
//!     site: eu-fra
//!     cloudInit: {user: ops, sshKeys: ["ssh-ed25519 AAAA... ops"]}
//! ```
//!
//! The merge is of the YAML trees, before validation: mappings are merged key by key at every
//! depth and the spec wins; a list or a scalar the spec sets replaces the default's whole (a
//! spec's `tags: [db]` is its tags, not added to the default's); a key the spec sets to
//! nothing (`pool:`) unsets the default. Defaults deeper in the tree apply over those above
//! them. Each merged value keeps its position in the file it came from, so an error points at
//! the defaults file and line when the value is the default's. What validation makes of the
//! result is the spec: its hash, and so its update, is of the effective spec.

use std::sync::Arc;

use super::diag::{Diagnostic, Pos};
use super::yaml::{Node, Value};

/// The file name of a defaults file, in any directory of the spec tree.
pub const DEFAULTS_FILE: &str = "_defaults.yaml";
/// The `kind` of a defaults file.
pub(crate) const DEFAULTS_KIND: &str = "ProxmoxDefaults";

/// One parsed `_defaults.yaml`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Defaults {
    /// The file, as shown in diagnostics.
    pub file: String,
    /// The directory it applies to, `/`-separated, no trailing `/` (`""`: the top).
    pub dir: String,
    /// `metadata` (labels and annotations) and `spec`, as a document's top-level mapping.
    tree: Node,
    /// A hash of the file's bytes (what a parse cache keys on).
    hash: u64,
}

/// Whether a path (as the loaders show it) is a defaults file.
pub fn is_defaults_file(path: &str) -> bool {
    path.rsplit('/').next() == Some(DEFAULTS_FILE)
}

/// Whether a path names what is meant as a defaults file but is not read as one:
/// `_defaults.yml`, another case (`_Defaults.yaml`), or, when the loader could not read it as
/// a plain file (a symlink, a pipe), `_defaults.yaml` itself. The specs below it are held.
pub fn is_meant_as_defaults(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    name == DEFAULTS_FILE || name == "_defaults.yml"
}

/// The directory of `path`, `/`-separated (`""` for a file at the top).
pub(crate) fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// The defaults that apply to the spec file `path`, outermost first: those whose directory is
/// the file's or one above it.
pub(crate) fn chain_for(all: &[Arc<Defaults>], path: &str) -> Vec<Arc<Defaults>> {
    let dir = dir_of(path);
    let mut chain: Vec<Arc<Defaults>> = (all.iter())
        .filter(|d| {
            d.dir.is_empty()
                || dir == d.dir
                || dir
                    .strip_prefix(d.dir.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
        .cloned()
        .collect();
    chain.sort_by_key(|d| d.dir.len());
    chain
}

/// Parses a defaults file's bytes: one document, `kind: ProxmoxDefaults`, a supported
/// `apiVersion`, `spec` a mapping, `metadata` only `labels` and `annotations`. Its values are
/// checked where they are used: in each spec they are merged into.
pub(crate) fn parse_defaults(file: &str, bytes: &[u8]) -> Result<Defaults, Vec<Diagnostic>> {
    let error = |pos: Pos, message: String| vec![Diagnostic::error(file, pos, message)];
    if bytes.len() > super::MAX_FILE_BYTES {
        return Err(error(Pos::START, "file is larger than 1 MiB".into()));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|_| error(Pos::START, "file is not UTF-8 text".into()))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (mut docs, diags) = super::yaml::parse_documents(file, text);
    if diags.iter().any(Diagnostic::is_error) {
        return Err(diags);
    }
    if docs.len() != 1 {
        return Err(error(
            Pos::START,
            format!(
                "{DEFAULTS_FILE} holds {} documents; it holds exactly one, of kind {DEFAULTS_KIND}",
                docs.len()
            ),
        ));
    }
    let doc = docs.remove(0);
    let Value::Map(entries) = &doc.value else {
        return Err(error(
            doc.pos,
            format!(
                "a {DEFAULTS_KIND} document is a mapping with apiVersion, kind, metadata and spec"
            ),
        ));
    };
    let (tree, problems) = top_level(file, entries);
    let mut problems = problems;
    let found = |name: &str| tree.iter().any(|(k, _)| key(k) == Some(name));
    if !found("apiVersion") || !found("kind") {
        problems.push(Diagnostic::error(
            file,
            doc.pos,
            format!(
                "a {DEFAULTS_FILE} needs apiVersion: {} and kind: {DEFAULTS_KIND}",
                super::API_VERSIONS[0]
            ),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Defaults {
        hash: crate::util::fnv::fnv(bytes.iter().copied()),
        file: file.to_string(),
        dir: dir_of(file).to_string(),
        tree: Node {
            pos: doc.pos,
            // apiVersion and kind are the defaults file's own, never a spec's.
            value: Value::Map(
                (tree.into_iter())
                    .filter(|(k, _)| matches!(key(k), Some("metadata" | "spec")))
                    .collect(),
            ),
        },
    })
}

/// The checked top-level entries of a defaults document: `apiVersion` and `kind` (kept to
/// say they were found), `metadata` and `spec`; and the problems found.
fn top_level(file: &str, entries: &[(Node, Node)]) -> (Vec<(Node, Node)>, Vec<Diagnostic>) {
    let mut problems = Vec::new();
    let mut tree = Vec::new();
    for (k, v) in entries {
        match (key(k), &v.value) {
            (Some("apiVersion"), Value::Str(s)) if super::API_VERSIONS.contains(&s.as_str()) => {
                tree.push((k.clone(), v.clone()))
            }
            (Some("apiVersion"), _) => problems.push(Diagnostic::error(
                file,
                v.pos,
                format!(
                    "apiVersion must be one of {}",
                    super::API_VERSIONS.join(", ")
                ),
            )),
            (Some("kind"), Value::Str(s)) if s == DEFAULTS_KIND => {
                tree.push((k.clone(), v.clone()))
            }
            (Some("kind"), _) => problems.push(Diagnostic::error(
                file,
                v.pos,
                format!("the kind of {DEFAULTS_FILE} is {DEFAULTS_KIND}"),
            )),
            (Some("spec"), Value::Map(_)) => tree.push((k.clone(), v.clone())),
            (Some("metadata"), Value::Map(m)) => {
                for (mk, _) in m {
                    if !matches!(key(mk), Some("labels" | "annotations")) {
                        problems.push(Diagnostic::error(
                            file,
                            mk.pos,
                            format!(
                                "metadata of {DEFAULTS_FILE} may hold labels and annotations; \
                                 each spec names itself"
                            ),
                        ));
                    }
                }
                tree.push((k.clone(), v.clone()));
            }
            (Some(name @ ("spec" | "metadata")), _) => problems.push(Diagnostic::error(
                file,
                v.pos,
                format!("{name} must be a mapping; found {}", v.value.describe()),
            )),
            _ => problems.push(Diagnostic::error(
                file,
                k.pos,
                format!("unknown field; a {DEFAULTS_KIND} has apiVersion, kind, metadata and spec"),
            )),
        }
    }
    (tree, problems)
}

/// The string of a mapping key, if it is one.
fn key(n: &Node) -> Option<&str> {
    match &n.value {
        Value::Str(s) => Some(s),
        _ => None,
    }
}

/// `doc` (a spec document) with `chain`'s values merged under it, each default's nodes at
/// their position in its file (`Pos::source` N: `chain[N - 1]`).
pub(crate) fn apply(chain: &[Arc<Defaults>], doc: &Node) -> Node {
    let mut base: Option<Node> = None;
    for (i, d) in chain.iter().enumerate() {
        let mut tree = d.tree.clone();
        tag(&mut tree, i as u32 + 1);
        base = Some(match base {
            None => tree,
            Some(b) => merge(&b, &tree),
        });
    }
    match base {
        None => doc.clone(),
        Some(b) => merge(&b, doc),
    }
}

/// Marks every node of `n` as from source `source`.
fn tag(n: &mut Node, source: u32) {
    n.pos.source = source;
    match &mut n.value {
        Value::Seq(items) => items.iter_mut().for_each(|i| tag(i, source)),
        Value::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
            tag(k, source);
            tag(v, source);
        }),
        _ => {}
    }
}

/// [`merge`], for a set's per-member overrides.
pub(super) fn merge_nodes(base: &Node, over: &Node) -> Node {
    merge(base, over)
}

/// `over` merged over `base`: two mappings key by key (recursively, `over`'s keys in its
/// order, then `base`'s others); anything else is `over`'s.
fn merge(base: &Node, over: &Node) -> Node {
    let (Value::Map(b), Value::Map(o)) = (&base.value, &over.value) else {
        return over.clone();
    };
    let mut entries: Vec<(Node, Node)> = Vec::with_capacity(b.len() + o.len());
    for (k, v) in o {
        let under = (b.iter()).find(|(bk, _)| bk.value == k.value && key(bk).is_some());
        let first = !entries.iter().any(|(ek, _)| ek.value == k.value);
        match under {
            Some((_, bv)) if first => entries.push((k.clone(), merge(bv, v))),
            _ => entries.push((k.clone(), v.clone())),
        }
    }
    for (k, v) in b {
        if !o.iter().any(|(ok, _)| ok.value == k.value) {
            entries.push((k.clone(), v.clone()));
        }
    }
    Node {
        pos: over.pos,
        value: Value::Map(entries),
    }
}

/// The YAML text of `n` (the effective spec `validate --effective` prints), each value the
/// defaults gave followed by a comment naming the file and line it came from.
pub(crate) fn to_yaml(n: &Node, chain: &[Arc<Defaults>]) -> String {
    let mut out = String::new();
    write_node(&mut out, n, 0, chain);
    out
}

/// Where a node came from, as a trailing comment (nothing for the spec's own values).
fn origin(n: &Node, chain: &[Arc<Defaults>]) -> String {
    match (n.pos.source as usize)
        .checked_sub(1)
        .and_then(|i| chain.get(i))
    {
        Some(d) => format!("  # {}:{}", d.file, n.pos.line),
        None => String::new(),
    }
}

fn write_node(out: &mut String, n: &Node, indent: usize, chain: &[Arc<Defaults>]) {
    let pad = " ".repeat(indent);
    match &n.value {
        Value::Map(entries) if !entries.is_empty() => {
            for (k, v) in entries {
                let name = scalar(&k.value);
                match &v.value {
                    Value::Map(m) if !m.is_empty() => {
                        out.push_str(&format!("{pad}{name}:{}\n", origin(k, chain)));
                        write_node(out, v, indent + 2, chain);
                    }
                    Value::Seq(s) if !s.is_empty() => {
                        out.push_str(&format!("{pad}{name}:{}\n", origin(v, chain)));
                        write_node(out, v, indent, chain);
                    }
                    other => out.push_str(&format!(
                        "{pad}{name}: {}{}\n",
                        inline(other),
                        origin(v, chain)
                    )),
                }
            }
        }
        Value::Seq(items) if !items.is_empty() => {
            for item in items {
                match &item.value {
                    Value::Map(m) if !m.is_empty() => {
                        // The first entry on the dash's line, the rest under it.
                        let mut text = String::new();
                        write_node(&mut text, item, indent + 2, chain);
                        let body = text.trim_start();
                        out.push_str(&format!("{pad}- {body}"));
                    }
                    other => out.push_str(&format!(
                        "{pad}- {}{}\n",
                        inline(other),
                        origin(item, chain)
                    )),
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", inline(other))),
    }
}

/// A value on one line: scalars as YAML reads them back; an empty mapping or list as `{}`/`[]`;
/// a nested one as flow JSON (valid YAML).
fn inline(v: &Value) -> String {
    match v {
        Value::Map(m) if m.is_empty() => "{}".into(),
        Value::Seq(s) if s.is_empty() => "[]".into(),
        Value::Map(_) | Value::Seq(_) => serde_json::to_string(&to_json(v)).unwrap_or_default(),
        other => scalar(other),
    }
}

fn to_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => (*b).into(),
        Value::Int(i) => i64::try_from(*i).map_or_else(|_| i.to_string().into(), Into::into),
        Value::Float(f) => {
            serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into)
        }
        Value::Str(s) => s.clone().into(),
        Value::Seq(items) => items.iter().map(|i| to_json(&i.value)).collect(),
        Value::Map(entries) => (entries.iter())
            .map(|(k, v)| {
                (
                    scalar(&k.value).trim_matches('"').to_string(),
                    to_json(&v.value),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into(),
    }
}

/// A scalar as YAML reads it back: a string is quoted (JSON style) unless it is plain text
/// YAML would read as the same string.
fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Str(s) if plain(s) => s.clone(),
        Value::Str(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Seq(_) | Value::Map(_) => inline(v),
    }
}

/// Whether `s` can be written unquoted and read back as the same string.
fn plain(s: &str) -> bool {
    let reserved = ["true", "false", "null", "yes", "no", "on", "off", "~", ""];
    // A leading digit could read back as a number (`0x1f`, `1_000`, `0o17`): quoted.
    !reserved.contains(&s.to_ascii_lowercase().as_str())
        && s.parse::<f64>().is_err()
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '/')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./@+=".contains(c))
}

/// The `_defaults.yaml` files of a spec tree: those that parse, and those that do not (every
/// spec below one of those is held: read without it, it could mean another VM, or delete one
/// the defaults said to orphan).
#[derive(Debug, Default)]
pub struct DefaultsSet {
    good: Vec<Arc<Defaults>>,
    /// (file, directory) of each defaults file that does not parse.
    broken: Vec<(String, String)>,
    /// The broken files' errors.
    pub diagnostics: Vec<Diagnostic>,
}

impl DefaultsSet {
    /// Parses each `(file, bytes)`.
    pub fn parse(files: impl IntoIterator<Item = (String, Vec<u8>)>) -> DefaultsSet {
        DefaultsSet::parse_keyed(files.into_iter().map(|(file, bytes)| {
            let dir = dir_of(&file).to_string();
            (file, dir, bytes)
        }))
    }

    /// Parses each `(file as shown, directory it applies to, bytes)`: the filesystem loader
    /// keys them by canonical directory, so a path named `.` or `../eu` finds the defaults
    /// above it, and only those.
    pub(crate) fn parse_keyed(
        files: impl IntoIterator<Item = (String, String, Vec<u8>)>,
    ) -> DefaultsSet {
        let mut set = DefaultsSet::default();
        for (file, dir, bytes) in files {
            match parse_defaults(&file, &bytes) {
                Ok(d) => set.good.push(Arc::new(Defaults { dir, ..d })),
                Err(diags) => {
                    set.broken.push((file.clone(), dir));
                    set.diagnostics.extend(diags);
                }
            }
        }
        set
    }

    /// Holds every spec below `file`, a defaults file that could not be read as one (`why`).
    pub fn add_broken(&mut self, file: &str, why: &str) {
        self.add_broken_keyed(file, dir_of(file), why);
    }

    /// [`DefaultsSet::add_broken`], applying to directory `dir` (see `parse_keyed`).
    pub(crate) fn add_broken_keyed(&mut self, file: &str, dir: &str, why: &str) {
        if self.broken.iter().any(|(f, _)| f == file) {
            return;
        }
        self.broken.push((file.to_string(), dir.to_string()));
        self.diagnostics.push(Diagnostic::error(
            file,
            Pos::START,
            format!(
                "{file} is not read as the directory's defaults ({why}); the specs below it are \
                 held until it is a plain file named {DEFAULTS_FILE}"
            ),
        ));
    }

    /// Whether there is no defaults file at all.
    pub fn is_empty(&self) -> bool {
        self.good.is_empty() && self.broken.is_empty()
    }

    /// The chain of spec file `path` (see [`chain_for`]), or the broken defaults file that
    /// holds it.
    pub(crate) fn chain(&self, path: &str) -> Result<Vec<Arc<Defaults>>, &str> {
        let dir = dir_of(path);
        let under = |d: &str| {
            d.is_empty() || dir == d || dir.strip_prefix(d).is_some_and(|r| r.starts_with('/'))
        };
        if let Some((file, _)) = self.broken.iter().find(|(_, d)| under(d)) {
            return Err(file);
        }
        Ok(chain_for(&self.good, path))
    }

    /// A hash of the chain of `path` (the files and what they say), for a parse cache: a spec
    /// file is parsed again when its defaults change.
    pub fn fingerprint(&self, path: &str) -> u64 {
        let mut h = crate::util::fnv::FnvHasher::default();
        match self.chain(path) {
            Ok(chain) => chain.iter().for_each(|d| {
                std::hash::Hasher::write(&mut h, d.file.as_bytes());
                std::hash::Hasher::write_u64(&mut h, d.hash);
            }),
            Err(broken) => std::hash::Hasher::write(&mut h, broken.as_bytes()),
        }
        std::hash::Hasher::finish(&h)
    }

    /// Parses spec file `file` with its chain; a file under a broken defaults file gives no
    /// spec, only an error per document naming its spec (so its VM is left alone, not taken
    /// as removed).
    pub fn parse_file(
        &self,
        file: &str,
        bytes: &[u8],
        secrets: super::Secrets,
        budget: &super::sets::SpecBudget,
    ) -> super::FileParse {
        self.parse_file_keyed(file, file, bytes, secrets, budget)
    }

    /// [`DefaultsSet::parse_file`], the chain found by `key` (the file's canonical path for
    /// the filesystem loader; see `parse_keyed`).
    pub(crate) fn parse_file_keyed(
        &self,
        file: &str,
        key: &str,
        bytes: &[u8],
        secrets: super::Secrets,
        budget: &super::sets::SpecBudget,
    ) -> super::FileParse {
        match self.chain(key) {
            Ok(chain) => super::parse_file_defaulted(file, bytes, secrets, &chain, budget),
            Err(broken) => super::FileParse {
                diagnostics: held(file, bytes, broken),
                ..Default::default()
            },
        }
    }
}

/// An error per document of spec file `file`, named for its spec when the name can be read:
/// the defaults file `broken` above it has errors.
fn held(file: &str, bytes: &[u8], broken: &str) -> Vec<Diagnostic> {
    let message = format!(
        "not read: {broken}, which applies to this file, has errors; fix it first (its specs' \
         VMs are left as they are meanwhile)"
    );
    let text = String::from_utf8_lossy(bytes);
    let (docs, _) = super::yaml::parse_documents(file, &text);
    if docs.is_empty() {
        return vec![Diagnostic::error(file, Pos::START, message)];
    }
    (docs.iter())
        .map(|doc| {
            let name = super::validate::document_name(doc);
            Diagnostic::error(file, doc.pos, message.clone()).for_spec(name.as_deref())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults(file: &str, text: &str) -> Arc<Defaults> {
        Arc::new(parse_defaults(file, text.as_bytes()).expect("parses"))
    }

    const TOP: &str = "apiVersion: proxsync.io/v1
kind: ProxmoxDefaults
metadata:
  labels: {team: web}
spec:
  deletionPolicy: Orphan
  forProvider:
    site: eu-fra
    node: pve1
    image: \"9000\"
    tags: [web, prod]
    pool: shared
    cloudInit: {user: ops, nameservers: [192.0.2.53]}
";

    const DEEPER: &str = "apiVersion: proxsync.io/v1
kind: ProxmoxDefaults
spec:
  forProvider:
    node: pve2
";

    const SPEC: &str = "apiVersion: proxsync.io/v1
kind: ProxmoxVM
metadata:
  name: web-01
  labels: {role: frontend}
spec:
  forProvider:
    tags: [db]
    pool:
    cloudInit: {ipConfig: [{ip: dhcp}]}
";

    fn parse_with(
        chain: &[Arc<Defaults>],
        file: &str,
        text: &str,
    ) -> (Vec<super::super::Spec>, Vec<String>) {
        let none = crate::sops::Keyring::unavailable(crate::config::NO_SOPS_IDENTITY);
        let parsed = super::super::parse_file_defaulted(
            file,
            text.as_bytes(),
            super::super::Secrets::Decrypt(&none),
            chain,
            &super::super::sets::SpecBudget::unlimited(),
        );
        let (specs, diags) = (parsed.specs, parsed.diagnostics);
        (specs, diags.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn maps_merge_deeply_the_spec_wins_lists_are_replaced_and_nothing_unsets() {
        let chain = [
            defaults("_defaults.yaml", TOP),
            defaults("eu/_defaults.yaml", DEEPER),
        ];
        let (specs, diags) = parse_with(&chain, "eu/web.yaml", SPEC);
        assert!(diags.is_empty(), "{diags:?}");
        let s = &specs[0];
        assert_eq!(s.site, "eu-fra");
        assert_eq!(
            s.node, "pve2",
            "the deeper defaults file wins over the outer one"
        );
        assert_eq!(s.tags, ["db"], "a list is replaced, not added to");
        assert_eq!(
            s.hardware.pool, None,
            "`pool:` with nothing unsets the default"
        );
        assert_eq!(s.deletion_policy, super::super::DeletionPolicy::Orphan);
        let ci = s.vm().unwrap().cloud_init.as_deref().expect("cloudInit");
        assert_eq!(ci.user.as_deref(), Some("ops"), "merged key by key");
        assert_eq!(ci.nameservers, ["192.0.2.53"]);
        assert_eq!(ci.ip_config.len(), 1);
        assert_eq!(s.labels.get("team").map(String::as_str), Some("web"));
        assert_eq!(s.labels.get("role").map(String::as_str), Some("frontend"));
        assert_eq!(s.file_of(s.site_pos), "_defaults.yaml");
        assert_eq!(s.site_pos.line, 8);
        assert_eq!(s.file_of(s.pos), "eu/web.yaml");
    }

    #[test]
    fn the_hash_is_of_the_effective_spec() {
        let chain = [defaults("_defaults.yaml", TOP)];
        let (a, _) = parse_with(&chain, "web.yaml", SPEC);
        let changed = [defaults(
            "_defaults.yaml",
            &TOP.replace("node: pve1", "node: pve3"),
        )];
        let (b, _) = parse_with(&changed, "web.yaml", SPEC);
        assert_ne!(
            super::super::spec_hash(&a[0]),
            super::super::spec_hash(&b[0])
        );
    }

    #[test]
    fn an_error_in_a_default_points_at_the_defaults_file_and_line() {
        let chain = [defaults(
            "eu/_defaults.yaml",
            &DEEPER.replace("node: pve2", "cpu: four"),
        )];
        let (specs, diags) = parse_with(
            &chain,
            "eu/web.yaml",
            &SPEC.replace(
                "    tags: [db]\n",
                "    tags: [db]\n    site: x\n    node: n\n    image: \"9000\"\n",
            ),
        );
        assert!(specs.is_empty());
        assert!(
            diags
                .iter()
                .any(|d| d.starts_with("eu/_defaults.yaml:5:10: error: spec.forProvider.cpu")),
            "{diags:?}"
        );
    }

    #[test]
    fn a_defaults_file_applies_to_its_directory_and_below_only() {
        let all = [
            defaults("eu/_defaults.yaml", DEEPER),
            defaults("_defaults.yaml", TOP),
            defaults("eu-fra/_defaults.yaml", DEEPER),
        ];
        let files = |path: &str| -> Vec<String> {
            chain_for(&all, path)
                .iter()
                .map(|d| d.file.clone())
                .collect()
        };
        assert_eq!(
            files("eu/a/web.yaml"),
            ["_defaults.yaml", "eu/_defaults.yaml"]
        );
        assert_eq!(
            files("eu/web.yaml"),
            ["_defaults.yaml", "eu/_defaults.yaml"]
        );
        assert_eq!(
            files("eu-fra/web.yaml"),
            ["_defaults.yaml", "eu-fra/_defaults.yaml"]
        );
        assert_eq!(files("web.yaml"), ["_defaults.yaml"]);
    }

    #[test]
    fn a_defaults_file_is_refused_unless_it_is_one_proxmox_defaults() {
        let refused = |text: &str| {
            parse_defaults("_defaults.yaml", text.as_bytes()).unwrap_err()[0].to_string()
        };
        assert!(
            refused(&TOP.replace("ProxmoxDefaults", "ProxmoxVM"))
                .contains("the kind of _defaults.yaml is ProxmoxDefaults")
        );
        assert!(
            refused(&TOP.replace("  labels: {team: web}", "  name: web-01"))
                .contains("each spec names itself")
        );
        assert!(refused(&format!("{TOP}---\n{DEEPER}")).contains("holds 2 documents"));
        assert!(
            refused("apiVersion: proxsync.io/v1\nkind: ProxmoxDefaults\nspec: 3\n")
                .contains("spec must be a mapping")
        );
    }

    #[test]
    fn specs_below_a_broken_defaults_file_are_held_by_name() {
        let set = DefaultsSet::parse([
            ("eu/_defaults.yaml".to_string(), b"kind: [".to_vec()),
            ("_defaults.yaml".to_string(), TOP.as_bytes().to_vec()),
        ]);
        assert!(!set.diagnostics.is_empty());
        let none = crate::sops::Keyring::unavailable(crate::config::NO_SOPS_IDENTITY);
        let parsed = set.parse_file(
            "eu/web.yaml",
            SPEC.as_bytes(),
            super::super::Secrets::Decrypt(&none),
            &super::super::sets::SpecBudget::unlimited(),
        );
        let (specs, diags) = (parsed.specs, parsed.diagnostics);
        assert!(specs.is_empty());
        assert_eq!(
            diags[0].spec.as_deref(),
            Some("web-01"),
            "held, not taken as removed"
        );
        assert!(diags[0].message.contains("eu/_defaults.yaml"), "{diags:?}");
        let specs = set
            .parse_file(
                "web.yaml",
                SPEC.as_bytes(),
                super::super::Secrets::Decrypt(&none),
                &super::super::sets::SpecBudget::unlimited(),
            )
            .specs;
        assert_eq!(
            specs.len(),
            1,
            "a spec outside the broken file's directory is read"
        );
    }

    #[test]
    fn the_effective_yaml_reads_back_as_the_same_spec() {
        let chain = [
            defaults("_defaults.yaml", TOP),
            defaults("eu/_defaults.yaml", DEEPER),
        ];
        let (docs, _) = super::super::yaml::parse_documents("eu/web.yaml", SPEC);
        let text = to_yaml(&apply(&chain, &docs[0]), &chain);
        assert!(text.contains("node: pve2  # eu/_defaults.yaml:5"), "{text}");
        let (direct, _) = parse_with(&chain, "eu/web.yaml", SPEC);
        let (back, diags) = parse_with(&[], "eu/web.yaml", &text);
        assert!(diags.is_empty(), "{diags:?}\n{text}");
        assert_eq!(
            super::super::spec_hash(&direct[0]),
            super::super::spec_hash(&back[0]),
            "{text}"
        );
    }

    /// What a page shows of one spec read from git: its document (a set's member) with the
    /// defaults above it merged in, no `sops` block, and user-data replaced by its size.
    #[test]
    fn the_effective_document_of_one_spec_withholds_user_data() {
        let defaults = DefaultsSet::parse([
            ("specs/_defaults.yaml".to_string(), TOP.as_bytes().to_vec()),
            (
                "specs/eu/_defaults.yaml".to_string(),
                DEEPER.as_bytes().to_vec(),
            ),
        ]);
        let file = format!(
            "{SPEC}    userData: \"ENC[AES256_GCM,data:c2VjcmV0,type:str]\"\n\
             sops: {{mac: \"ENC[AES256_GCM,data:abc]\", version: 3.9.0}}\n\
             ---\napiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata: {{name: api}}\n\
             spec:\n  replicas: 2\n  template:\n    forProvider:\n      memory: 4Gi\n      \
             userData: \"#cloud-config\\npassword: hunter2\\n\"\n"
        );
        let effective = |name| {
            super::super::effective_document(&defaults, "specs/eu/web.yaml", file.as_bytes(), name)
        };
        let web = effective("web-01").unwrap().unwrap();
        assert!(
            web.contains("node: pve2  # specs/eu/_defaults.yaml:5"),
            "{web}"
        );
        assert!(web.contains("name: web-01"), "{web}");
        assert!(!web.contains("api-"), "one document only: {web}");
        assert!(!web.contains("sops") && !web.contains("ENC["), "{web}");
        assert!(web.contains("bytes of user-data, not shown"), "{web}");
        let member = effective("api-02").unwrap().unwrap();
        assert!(member.contains("name: api-02"), "{member}");
        assert!(member.contains("memory: \"4Gi\""), "{member}");
        assert!(
            member.contains("site: eu-fra  # specs/_defaults.yaml:"),
            "{member}"
        );
        assert!(!member.contains("hunter2"), "{member}");
        assert!(member.contains("bytes of user-data, not shown"), "{member}");
        assert!(
            !member.contains("sops") && !member.contains("ENC["),
            "{member}"
        );
        assert_eq!(effective("db-01"), Ok(None));
        // Held by a broken defaults file: said, not shown without it.
        let mut broken = DefaultsSet::parse([]);
        broken.add_broken("specs/_defaults.yaml", "a symlink");
        let held = super::super::effective_document(
            &broken,
            "specs/eu/web.yaml",
            SPEC.as_bytes(),
            "web-01",
        );
        assert!(held.unwrap_err().contains("specs/_defaults.yaml"));
    }

    #[test]
    fn the_effective_yaml_quotes_what_would_read_back_as_a_number() {
        let text = "a: \"0x1f\"\nb: \"1_000\"\nc: \"0o17\"\nd: \"10.0.1.11/24\"\ne: web-01\n";
        let (docs, _) = super::super::yaml::parse_documents("a.yaml", text);
        let written = to_yaml(&docs[0], &[]);
        let (back, _) = super::super::yaml::parse_documents("a.yaml", &written);
        assert_eq!(docs[0].value, back[0].value, "{written}");
    }

    #[test]
    fn a_defaults_file_named_otherwise_holds_the_specs_beside_it() {
        for name in ["_defaults.yml", "_Defaults.yaml"] {
            let dir = tempfile::tempdir().unwrap();
            let defaults = "apiVersion: proxsync.io/v1\nkind: ProxmoxDefaults\nspec:\n  deletionPolicy: Orphan\n";
            std::fs::write(dir.path().join(name), defaults).unwrap();
            let spec = SPEC.replace(
                "    pool:\n",
                "    site: s\n    node: n\n    image: \"9000\"\n",
            );
            std::fs::write(dir.path().join("web.yaml"), spec).unwrap();
            let set = super::super::load_paths(&[dir.path().to_path_buf()]);
            assert!(set.specs.is_empty(), "{name}: read without its defaults");
            assert!(
                set.invalid_names().contains("web-01"),
                "{name}: held by name"
            );
        }
    }
}
