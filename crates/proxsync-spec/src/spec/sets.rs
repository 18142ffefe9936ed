//! `kind: ProxmoxVMSet`: N alike VMs from one template, each member an ordinary spec.
//!
//! ```yaml
//! apiVersion: proxsync.io/v1
//! kind: ProxmoxVMSet
//! metadata:
//!   name: web
//! spec:
//!   replicas: 3                     # or names: [web-a, web-b]
//!   namePattern: "web-{index:02}"   # default "<set name>-{index:02}"; index from 1
//!   placement: {nodes: [pve1, pve2], maxPerNode: 2}   # round-robin by index
//!   maxUnavailable: 1               # reboots a template change needs, this many at a time
//!   template:                       # a ProxmoxVM's spec
//!     forProvider:
//!       site: lab
//!       image: "9000"
//!       cloudInit: {ipConfig: [{ip: "10.0.1.{index+10}/24", gateway: 10.0.1.1}]}
//!   overrides:
//!     web-02: {forProvider: {memory: 8Gi}}
//! ```
//!
//! The set is expanded into `ProxmoxVM` documents before validation, from the set's own YAML
//! nodes (so every error points at the set file's line), and each member is validated, hashed,
//! planned, created and reported as any spec: markers, intents, valves and status files hold
//! for it unchanged. In the template's strings `{index}`, `{index:02}` and `{index+N}`
//! (`{index-N}`) become the member's index, and `{name}` its name. A problem of the set itself
//! (replicas, names, placement) makes every member it could name invalid; when it cannot name
//! them, the spec set is incomplete and nothing is removed.

use std::collections::BTreeMap;

use super::diag::{Diagnostic, Pos};
use super::yaml::{Node, Value};

/// The kind of a set document.
pub(crate) const SET_KIND: &str = "ProxmoxVMSet";
/// The most members of one set.
pub(crate) const MAX_REPLICAS: u64 = 1000;
/// The most YAML nodes a set's members may hold together (the template's times the members):
/// a set cannot make one file's parse take gigabytes.
pub(crate) const MAX_EXPANDED_NODES: usize = 2_000_000;

/// The install-wide cap on specs (`[source] max_specs`), shared by every file of one read of
/// the source (parsed side by side): each document takes one spec from it and each set its
/// members, counted from the set's own `replicas` or `names` before it is expanded
/// ([`member_count`]). Once the count passes the cap nothing more is expanded or validated
/// (the rest is only counted), so the memory a read takes stays bounded by the cap, and the
/// reader refuses the whole read with one error ([`SpecBudget::refusal`]).
#[derive(Debug)]
pub struct SpecBudget {
    cap: u64,
    counted: std::sync::atomic::AtomicU64,
    /// The file holding the most specs, with their count, for the error.
    largest: std::sync::Mutex<(u64, String)>,
}

impl SpecBudget {
    /// A budget of `cap` specs (`[source] max_specs`), none taken yet.
    pub fn new(cap: u64) -> SpecBudget {
        SpecBudget {
            cap,
            counted: Default::default(),
            largest: Default::default(),
        }
    }

    /// No cap: for parsing one file on its own (tests, `validate --effective`).
    pub(crate) fn unlimited() -> SpecBudget {
        SpecBudget::new(u64::MAX)
    }

    /// Counts `n` specs; whether they are still within the cap (then expand and validate
    /// them).
    pub fn take(&self, n: u64) -> bool {
        use std::sync::atomic::Ordering;
        let before = self.counted.fetch_add(n, Ordering::Relaxed);
        before.saturating_add(n) <= self.cap
    }

    /// Whether the count already passed the cap (nothing more is expanded).
    pub(crate) fn spent(&self) -> bool {
        self.counted.load(std::sync::atomic::Ordering::Relaxed) > self.cap
    }

    /// Notes that `file` holds `n` specs.
    pub fn file_counted(&self, file: &str, n: u64) {
        if let Ok(mut largest) = self.largest.lock()
            && n > largest.0
        {
            *largest = (n, file.to_string());
        }
    }

    /// The one error of a read past the cap, `None` within it.
    pub fn refusal(&self) -> Option<String> {
        let counted = self.counted.load(std::sync::atomic::Ordering::Relaxed);
        if counted <= self.cap {
            return None;
        }
        let largest = self.largest.lock().map(|l| l.clone()).unwrap_or_default();
        let most = match largest {
            (n, file) if n > 0 => format!(" (the most in one file: {file}, {n})"),
            _ => String::new(),
        };
        Some(format!(
            "the spec files hold at least {counted} specs, each set member counted{most}: more \
             than [source] max_specs = {}. No spec is read, nothing is created, changed or \
             removed; split the specs between installs ([source] selector), or raise max_specs",
            self.cap
        ))
    }
}

/// How many members set document `doc` names, from its own `spec.replicas` or `spec.names`
/// alone (nothing expanded): what a [`SpecBudget`] counts for it. A set whose count cannot be
/// read counts as none (its expansion reports why).
pub(crate) fn member_count(doc: &Node) -> u64 {
    let Some(spec) = entry(doc, "spec") else {
        return 0;
    };
    match (entry(spec, "names"), entry(spec, "replicas")) {
        (
            Some(Node {
                value: Value::Seq(items),
                ..
            }),
            _,
        ) => items.len() as u64,
        (
            None,
            Some(Node {
                value: Value::Int(i),
                ..
            }),
        ) => u64::try_from(*i).unwrap_or(0),
        _ => 0,
    }
}

/// Which set a member spec belongs to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetMember {
    /// The set's `metadata.name`.
    pub set: String,
    /// 1-based.
    pub index: u32,
    /// How many of the set's members may be unavailable at once for a reboot a change needs.
    pub max_unavailable: u32,
    /// The set's desired members.
    pub replicas: u32,
    /// `placement.strategy: FreeMemory`: the nodes the member may be placed on; the engine
    /// picks the one with the least memory given to VMs in the listing when the member has no
    /// VM yet, and keeps it where its VM is after (`None`: the spec's node is the member's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidates: Option<Box<[String]>>,
    /// `placement.maxPerNode`, which a FreeMemory placement keeps to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_per_node: Option<u32>,
}

/// `spec.placement`: the nodes by index, and how the members are spread.
struct Placement {
    /// The node of each member by index (round-robin).
    nodes: Vec<(String, Pos)>,
    /// `placement.nodes`, as written.
    all: Box<[String]>,
    /// `strategy: FreeMemory`: the engine places each member when it has no VM yet.
    free_memory: bool,
    max_per_node: Option<u32>,
}

/// Whether `doc` is a set document.
pub(crate) fn is_set(doc: &Node) -> bool {
    entry(doc, "kind").is_some_and(|k| matches!(&k.value, Value::Str(s) if s == SET_KIND))
}

/// The value of `key` in mapping `n`.
fn entry<'n>(n: &'n Node, key: &str) -> Option<&'n Node> {
    match &n.value {
        Value::Map(entries) => entries
            .iter()
            .find(|(k, _)| matches!(&k.value, Value::Str(s) if s == key))
            .map(|(_, v)| v)
            .filter(|v| v.value != Value::Null),
        _ => None,
    }
}

fn str_node(s: &str, pos: Pos) -> Node {
    Node {
        pos,
        value: Value::Str(s.to_string()),
    }
}

/// A set document as member documents, each with its membership; or the set's problems, each
/// for the member names it could read.
pub(crate) fn expand(file: &str, doc: &Node) -> (Vec<(Node, SetMember)>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let mut err = |pos: Pos, message: String| diags.push(Diagnostic::error(file, pos, message));
    let meta = entry(doc, "metadata");
    let name_node = meta.and_then(|m| entry(m, "name"));
    let set_name = match name_node.map(|n| &n.value) {
        Some(Value::Str(s)) if super::check_spec_name(s).is_ok() => s.clone(),
        _ => {
            err(
                doc.pos,
                "a ProxmoxVMSet needs metadata.name, a valid name (e.g. web)".into(),
            );
            return (Vec::new(), diags);
        }
    };
    let name_pos = name_node.map_or(doc.pos, |n| n.pos);
    let Some(spec) = entry(doc, "spec").filter(|s| matches!(s.value, Value::Map(_))) else {
        err(
            doc.pos,
            "a ProxmoxVMSet needs spec, a mapping with replicas (or names) and template".into(),
        );
        return (Vec::new(), diags);
    };
    unknown_fields(doc, meta, spec, &mut err);
    let names = member_names(&set_name, spec, &mut err);
    let template = entry(spec, "template").filter(|t| matches!(t.value, Value::Map(_)));
    if template.is_none() {
        err(
            spec.pos,
            "spec.template is required: a mapping holding a ProxmoxVM's spec (forProvider, ...)"
                .into(),
        );
    }
    let max_unavailable = match entry(spec, "maxUnavailable").map(|n| (&n.value, n.pos)) {
        None => 1,
        Some((Value::Int(i), _)) if (1..=MAX_REPLICAS as i128).contains(i) => *i as u32,
        Some((_, pos)) => {
            err(
                pos,
                format!("spec.maxUnavailable must be a whole number from 1 to {MAX_REPLICAS}"),
            );
            1
        }
    };
    let nodes = placement(spec, names.as_ref().map_or(0, Vec::len), &mut err);
    let overrides = overrides(spec, names.as_deref().unwrap_or(&[]), &mut err);
    let Some(names) = names else {
        return (Vec::new(), diags);
    };
    if !diags.is_empty() || template.is_none() {
        // The set cannot be read as meant: each member it names is held.
        let held = names.iter().map(|(n, _)| {
            Diagnostic::error(
                file,
                name_pos,
                format!("member {n} of set {set_name} is not read: the set has errors"),
            )
            .for_spec(Some(n))
        });
        let mut out: Vec<Diagnostic> = diags
            .into_iter()
            .map(|d| d.for_spec(names.first().map(|(n, _)| n.as_str())))
            .collect();
        out.extend(held);
        return (Vec::new(), out);
    }
    let template = template.expect("checked");
    let replicas = names.len() as u32;
    if let Some(held) = too_large(file, &set_name, name_pos, &names, template, &overrides) {
        return (Vec::new(), held);
    }
    let mut members = Vec::with_capacity(names.len());
    for (i, (member, pos)) in names.iter().enumerate() {
        let index = i as u32 + 1;
        let mut body = substitute(template, index, member);
        for key in ["suspend", "dependsOn"] {
            if let Some(v) = entry(spec, key) {
                set_key(&mut body, key, v.clone());
            }
        }
        let over = overrides
            .get(member.as_str())
            .map(|o| substitute(o, index, member));
        let (body, candidates) = place_member(body, nodes.as_ref(), i, over.as_ref());
        let member_doc = member_doc(doc, meta, (member, *pos), name_pos, body, template.pos);
        members.push((
            member_doc,
            SetMember {
                set: set_name.clone(),
                index,
                max_unavailable,
                replicas,
                candidates,
                max_per_node: nodes.as_ref().and_then(|p| p.max_per_node),
            },
        ));
    }
    (members, diags)
}

/// When the members would hold more than [`MAX_EXPANDED_NODES`] YAML nodes together: the
/// error, and each member held by name.
fn too_large(
    file: &str,
    set_name: &str,
    name_pos: Pos,
    names: &[(String, Pos)],
    template: &Node,
    overrides: &BTreeMap<String, &Node>,
) -> Option<Vec<Diagnostic>> {
    let size = node_count(template) + overrides.values().map(|o| node_count(o)).sum::<usize>();
    if size.saturating_mul(names.len()) <= MAX_EXPANDED_NODES {
        return None;
    }
    let message = format!(
        "the set's {} members of {size} YAML nodes each are more than {MAX_EXPANDED_NODES} \
         nodes together; split the set or make its template smaller",
        names.len()
    );
    let first = names.first().map(|(n, _)| n.as_str());
    let mut out = vec![Diagnostic::error(file, name_pos, message).for_spec(first)];
    out.extend(names.iter().skip(1).map(|(n, _)| {
        Diagnostic::error(
            file,
            name_pos,
            format!("member {n} of set {set_name} is not read: the set is too large"),
        )
        .for_spec(Some(n))
    }));
    Some(out)
}

/// `body` with member `i`'s node by index (unless the template names one) and its override
/// merged over it; and, with `strategy: FreeMemory` and no node written for it, the nodes the
/// engine chooses among (the node by index then only stands in).
fn place_member(
    mut body: Node,
    nodes: Option<&Placement>,
    i: usize,
    over: Option<&Node>,
) -> (Node, Option<Box<[String]>>) {
    let mut placed = false;
    if let Some((node, node_pos)) = nodes.and_then(|p| p.nodes.get(i)) {
        let fp = forprovider(&mut body);
        if entry(fp, "node").is_none() {
            set_key(fp, "node", str_node(node, *node_pos));
            placed = true;
        }
    }
    if let Some(over) = over {
        let names_node = entry(over, "forProvider").and_then(|fp| entry(fp, "node"));
        placed &= names_node.is_none();
        body = super::defaults::merge_nodes(&body, over);
    }
    let candidates = nodes
        .filter(|p| placed && p.free_memory)
        .map(|p| p.all.clone());
    (body, candidates)
}

/// Reports the fields a set does not have, at each level.
fn unknown_fields(doc: &Node, meta: Option<&Node>, spec: &Node, err: &mut impl FnMut(Pos, String)) {
    if let Some(Value::Map(entries)) = meta.map(|m| &m.value) {
        for (k, _) in entries {
            if !matches!(&k.value, Value::Str(s) if s == "name" || s == "labels") {
                err(k.pos, "a ProxmoxVMSet's metadata holds name and labels (its members carry the labels)".into());
            }
        }
    }
    if let Value::Map(entries) = &doc.value {
        for (k, _) in entries {
            let known = matches!(&k.value, Value::Str(s) if ["apiVersion", "kind", "metadata", "spec"].contains(&s.as_str()));
            if !known {
                err(
                    k.pos,
                    "unknown field; a ProxmoxVMSet has apiVersion, kind, metadata and spec".into(),
                );
            }
        }
    }
    const FIELDS: [&str; 9] = [
        "replicas",
        "names",
        "namePattern",
        "template",
        "overrides",
        "placement",
        "maxUnavailable",
        "suspend",
        "dependsOn",
    ];
    if let Value::Map(entries) = &spec.value {
        for (k, _) in entries {
            let known = matches!(&k.value, Value::Str(s) if FIELDS.contains(&s.as_str()));
            if !known {
                err(
                    k.pos,
                    format!(
                        "unknown field of a ProxmoxVMSet's spec; valid: {}",
                        FIELDS.join(", ")
                    ),
                );
            }
        }
    }
}

/// A member's `ProxmoxVM` document: the set's apiVersion and labels, the member's name, and
/// `body` as its spec.
fn member_doc(
    doc: &Node,
    meta: Option<&Node>,
    (member, pos): (&str, Pos),
    name_pos: Pos,
    body: Node,
    spec_pos: Pos,
) -> Node {
    let mut meta_entries = vec![(str_node("name", name_pos), str_node(member, pos))];
    if let Some(labels) = meta.and_then(|m| entry(m, "labels")) {
        meta_entries.push((str_node("labels", labels.pos), labels.clone()));
    }
    let api = entry(doc, "apiVersion")
        .cloned()
        .unwrap_or_else(|| str_node("", doc.pos));
    Node {
        pos: doc.pos,
        value: Value::Map(vec![
            (str_node("apiVersion", api.pos), api),
            (str_node("kind", doc.pos), str_node(super::KIND, doc.pos)),
            (
                str_node("metadata", name_pos),
                Node {
                    pos: name_pos,
                    value: Value::Map(meta_entries),
                },
            ),
            (str_node("spec", spec_pos), body),
        ]),
    }
}

/// `spec.names`, or `replicas` names from `namePattern`, each with where it is written.
fn member_names(
    set: &str,
    spec: &Node,
    err: &mut impl FnMut(Pos, String),
) -> Option<Vec<(String, Pos)>> {
    let mut out = Vec::new();
    match (entry(spec, "names"), entry(spec, "replicas")) {
        (Some(_), Some(r)) => {
            err(
                r.pos,
                "spec.names and spec.replicas: name the members or count them, not both".into(),
            );
            return None;
        }
        (Some(list), None) => {
            let Value::Seq(items) = &list.value else {
                err(list.pos, "spec.names must be a list of spec names".into());
                return None;
            };
            if items.len() as u64 > MAX_REPLICAS {
                err(
                    list.pos,
                    format!(
                        "spec.names has {} names; a set has at most {MAX_REPLICAS}",
                        items.len()
                    ),
                );
                return None;
            }
            for item in items {
                match &item.value {
                    Value::Str(s) => out.push((s.clone(), item.pos)),
                    other => {
                        err(
                            item.pos,
                            format!("spec.names: a name is a string; found {}", other.describe()),
                        );
                        return None;
                    }
                }
            }
        }
        (None, Some(r)) => {
            let count = match &r.value {
                Value::Int(i) if (0..=MAX_REPLICAS as i128).contains(i) => *i as u32,
                other => {
                    err(
                        r.pos,
                        format!(
                            "spec.replicas must be a whole number from 0 to {MAX_REPLICAS}; found {}",
                            other.describe()
                        ),
                    );
                    return None;
                }
            };
            let pattern_node = entry(spec, "namePattern");
            let pattern = match pattern_node.map(|n| &n.value) {
                None => format!("{set}-{{index:02}}"),
                Some(Value::Str(p)) if p.contains("{index") => p.clone(),
                Some(_) => {
                    err(pattern_node.map_or(spec.pos, |n| n.pos), "spec.namePattern must be a string holding {index} (e.g. \"web-{index:02}\")".into());
                    return None;
                }
            };
            let pos = pattern_node.or(Some(r)).map_or(spec.pos, |n| n.pos);
            for index in 1..=count {
                out.push((fill(&pattern, index, ""), pos));
            }
        }
        (None, None) => {
            err(
                spec.pos,
                "a ProxmoxVMSet needs spec.replicas (with namePattern) or spec.names".into(),
            );
            return None;
        }
    }
    let mut seen = std::collections::HashSet::new();
    for (n, pos) in &out {
        if let Err(e) = super::check_spec_name(n) {
            err(*pos, format!("member name {n:?}: {e}"));
            return None;
        }
        if !seen.insert(n.clone()) {
            err(*pos, format!("member name {n} is given twice"));
            return None;
        }
    }
    Some(out)
}

/// `placement.nodes` spread round-robin over the members (`None` without placement), checked
/// against `maxPerNode`.
fn placement(spec: &Node, members: usize, err: &mut impl FnMut(Pos, String)) -> Option<Placement> {
    let p = entry(spec, "placement")?;
    let Some(nodes) = entry(p, "nodes") else {
        err(
            p.pos,
            "spec.placement needs nodes: a list of node names".into(),
        );
        return None;
    };
    let Value::Seq(items) = &nodes.value else {
        err(
            nodes.pos,
            "spec.placement.nodes must be a list of node names".into(),
        );
        return None;
    };
    let mut names = Vec::new();
    for item in items {
        match &item.value {
            Value::Str(s) => names.push((s.clone(), item.pos)),
            other => {
                err(
                    item.pos,
                    format!("a node name is a string; found {}", other.describe()),
                );
                return None;
            }
        }
    }
    if names.is_empty() {
        err(
            nodes.pos,
            "spec.placement.nodes is empty: name at least one node".into(),
        );
        return None;
    }
    let free_memory = match entry(p, "strategy").map(|n| (&n.value, n.pos)) {
        None => false,
        Some((Value::Str(s), _)) if s == "RoundRobin" => false,
        Some((Value::Str(s), _)) if s == "FreeMemory" => true,
        Some((_, pos)) => {
            err(
                pos,
                "spec.placement.strategy is RoundRobin (by index, the default) or FreeMemory (the \
                 node with the least memory given to VMs, when a member is made)"
                    .into(),
            );
            return None;
        }
    };
    let mut max_per_node = None;
    if let Some(m) = entry(p, "maxPerNode") {
        match &m.value {
            Value::Int(i) if (1..=i128::from(u32::MAX)).contains(i) => {
                max_per_node = Some(*i as u32);
                let room = names.len() as i128 * i;
                if (members as i128) > room {
                    err(
                        m.pos,
                        format!(
                            "{members} members on {} node(s) at most {i} per node: room for {room}; add nodes or raise maxPerNode",
                            names.len()
                        ),
                    );
                    return None;
                }
            }
            _ => {
                err(
                    m.pos,
                    "spec.placement.maxPerNode must be a whole number of at least 1".into(),
                );
                return None;
            }
        }
    }
    Some(Placement {
        nodes: (0..members)
            .map(|i| names[i % names.len()].clone())
            .collect(),
        all: names.iter().map(|(n, _)| n.clone()).collect(),
        free_memory,
        max_per_node,
    })
}

/// `overrides`, by member name; a name that is no member is an error.
fn overrides<'n>(
    spec: &'n Node,
    names: &[(String, Pos)],
    err: &mut impl FnMut(Pos, String),
) -> BTreeMap<String, &'n Node> {
    let mut out = BTreeMap::new();
    let Some(o) = entry(spec, "overrides") else {
        return out;
    };
    let Value::Map(entries) = &o.value else {
        err(
            o.pos,
            "spec.overrides must be a mapping of member name -> spec fields".into(),
        );
        return out;
    };
    for (k, v) in entries {
        match &k.value {
            Value::Str(s) if names.iter().any(|(n, _)| n == s) => {
                out.insert(s.clone(), v);
            }
            _ => err(
                k.pos,
                format!(
                    "spec.overrides: {} is no member of the set",
                    k.value.describe()
                ),
            ),
        }
    }
    out
}

/// The `forProvider` mapping of a spec body, made when absent.
fn forprovider(body: &mut Node) -> &mut Node {
    if entry(body, "forProvider").is_none() {
        set_key(
            body,
            "forProvider",
            Node {
                pos: body.pos,
                value: Value::Map(Vec::new()),
            },
        );
    }
    let Value::Map(entries) = &mut body.value else {
        unreachable!("a spec body is a mapping")
    };
    let (_, v) = entries
        .iter_mut()
        .find(|(k, _)| matches!(&k.value, Value::Str(s) if s == "forProvider"))
        .expect("just set");
    v
}

/// Sets `key` of mapping `n` to `value` (replacing it).
fn set_key(n: &mut Node, key: &str, value: Node) {
    if let Value::Map(entries) = &mut n.value {
        entries.retain(|(k, _)| !matches!(&k.value, Value::Str(s) if s == key));
        entries.push((str_node(key, value.pos), value));
    }
}

/// How many YAML nodes `n` holds, itself included; a long string counts by its length too
/// (each member holds its own copy).
fn node_count(n: &Node) -> usize {
    match &n.value {
        Value::Seq(items) => 1 + items.iter().map(node_count).sum::<usize>(),
        Value::Map(entries) => {
            1 + entries
                .iter()
                .map(|(k, v)| node_count(k) + node_count(v))
                .sum::<usize>()
        }
        Value::Str(s) => 1 + s.len() / 64,
        _ => 1,
    }
}

/// `n` with `{index...}` and `{name}` filled in every string.
fn substitute(n: &Node, index: u32, name: &str) -> Node {
    let value = match &n.value {
        Value::Str(s) if s.contains('{') => Value::Str(fill(s, index, name)),
        Value::Seq(items) => Value::Seq(items.iter().map(|i| substitute(i, index, name)).collect()),
        Value::Map(entries) => Value::Map(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), substitute(v, index, name)))
                .collect(),
        ),
        other => other.clone(),
    };
    Node { pos: n.pos, value }
}

/// `{index}`, `{index:0W}`, `{index+N}`, `{index-N}` (with `:0W` too) and `{name}` in `s`.
/// Anything else in braces is left as written (validation says what is wrong with it).
pub(crate) fn fill(s: &str, index: u32, name: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let Some(len) = rest[start..].find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &rest[start + 1..start + len];
        match placeholder(inner, index, name) {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[start..=start + len]),
        }
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out
}

fn placeholder(inner: &str, index: u32, name: &str) -> Option<String> {
    if inner == "name" {
        return Some(name.to_string());
    }
    let (expr, width) = match inner.split_once(':') {
        // A width of 1 to 9 digits; anything else is left as written.
        Some((e, w)) => (
            e,
            Some(
                w.strip_prefix('0')?
                    .parse::<usize>()
                    .ok()
                    .filter(|w| (1..=9).contains(w))?,
            ),
        ),
        None => (inner, None),
    };
    let rest = expr.strip_prefix("index")?;
    let offset = |n: &str| n.trim().parse::<i64>().ok();
    let value = match rest.chars().next() {
        None => i64::from(index),
        Some('+') => i64::from(index).checked_add(offset(&rest[1..])?)?,
        Some('-') => i64::from(index).checked_sub(offset(&rest[1..])?)?,
        _ => return None,
    };
    Some(match width {
        Some(w) => format!("{value:0w$}"),
        None => value.to_string(),
    })
}

/// The addresses given to more than one member of a set (`cloudInit.ipConfig`'s `ip` and
/// `ip6`, without the prefix length): each told at the later member.
pub(crate) fn address_overlaps(members: &[super::Spec]) -> Vec<Diagnostic> {
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    let mut out = Vec::new();
    for spec in members {
        let Some(ci) = spec.vm().and_then(|vm| vm.cloud_init.as_deref()) else {
            continue;
        };
        for ip in ci
            .ip_config
            .iter()
            .flat_map(|c| [c.ip.as_deref(), c.ip6.as_deref()])
            .flatten()
        {
            if matches!(ip, "dhcp" | "auto") {
                continue;
            }
            let addr = ip.split('/').next().unwrap_or(ip).to_string();
            match seen.get(&addr) {
                Some(first) => out.push(
                    Diagnostic::error(
                        &spec.file,
                        spec.pos,
                        format!("address {addr} is given to {first} too; each member needs its own (a pattern such as 10.0.1.{{index+10}})"),
                    )
                    .for_spec(Some(&spec.name)),
                ),
                None => {
                    seen.insert(addr, spec.name.as_str());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Vec<crate::spec::Spec>, Vec<String>) {
        let (specs, diags) = crate::spec::parse_file("web.yaml", text.as_bytes());
        (specs, diags.iter().map(ToString::to_string).collect())
    }

    const SET: &str = "apiVersion: proxsync.io/v1
kind: ProxmoxVMSet
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 3
  maxUnavailable: 2
  suspend: true
  placement: {nodes: [pve1, pve2, pve3]}
  template:
    forProvider:
      site: lab
      image: \"9000\"
      name: \"{name}.example.org\"
      cloudInit: {ipConfig: [{ip: \"10.0.1.{index+10}/24\"}]}
  overrides:
    web-03: {forProvider: {node: pve9}}
";

    #[test]
    fn members_are_counted_before_they_are_expanded_and_a_read_past_the_cap_holds_nothing() {
        let doc = |text: &str| {
            let (docs, diags) = crate::spec::yaml::parse_documents("web.yaml", text);
            assert!(diags.is_empty(), "{diags:?}");
            docs.into_iter().next().unwrap()
        };
        assert_eq!(member_count(&doc(SET)), 3);
        assert_eq!(
            member_count(&doc(&SET.replace("replicas: 3", "names: [a-1, a-2]"))),
            2
        );
        // Unreadable counts (expand says why): none.
        assert_eq!(
            member_count(&doc(&SET.replace("replicas: 3", "replicas: -4"))),
            0
        );
        assert_eq!(
            member_count(&doc(&SET.replace("replicas: 3", "replicas: x"))),
            0
        );

        // Three files of a set of 3 and one plain spec under a cap of 7: the third is not read.
        let budget = SpecBudget::new(7);
        let plain = "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata: {name: NAME-solo}\n\
                     spec: {forProvider: {site: lab, node: pve1, image: \"9000\"}}\n";
        let mut made = 0;
        for file in ["a.yaml", "b.yaml", "c.yaml"] {
            let name = &file[..1];
            let set = SET.replace("name: web", &format!("name: {name}"));
            let set = set.replace("web-03", &format!("{name}-03"));
            let text = format!("{set}---\n{}", plain.replace("NAME", name));
            let specs = crate::spec::parse_file_defaulted(
                file,
                text.as_bytes(),
                crate::spec::Secrets::StructureOnly,
                &[],
                &budget,
            )
            .specs;
            made += specs.len();
        }
        assert!(budget.spent());
        assert!(made <= 7, "never more expanded than the cap: {made}");
        let why = budget.refusal().unwrap();
        assert!(
            why.contains("at least 8 specs") && why.contains("max_specs = 7"),
            "{why}"
        );
        assert!(SpecBudget::new(8).refusal().is_none());
    }

    #[test]
    fn patterns_fill_the_index_and_the_name() {
        assert_eq!(fill("web-{index:02}", 7, "x"), "web-07");
        assert_eq!(fill("10.0.{index+10}.{index-1}", 3, "x"), "10.0.13.2");
        assert_eq!(fill("{name}.lab", 1, "db-01"), "db-01.lab");
        assert_eq!(fill("{other} {index", 1, "x"), "{other} {index");
        assert_eq!(
            fill("{index:3}", 1, "x"),
            "{index:3}",
            "a width is written 0N"
        );
    }

    #[test]
    fn members_are_specs_of_their_own_with_the_sets_fields() {
        let (specs, diags) = parse(SET);
        assert!(diags.is_empty(), "{diags:?}");
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["web-01", "web-02", "web-03"]);
        let nodes: Vec<&str> = specs.iter().map(|s| s.node.as_str()).collect();
        assert_eq!(
            nodes,
            ["pve1", "pve2", "pve9"],
            "round-robin, an override wins"
        );
        assert_eq!(specs[1].guest_name(), "web-02.example.org");
        let ip = |s: &crate::spec::Spec| {
            s.vm().unwrap().cloud_init.as_ref().unwrap().ip_config[0]
                .ip
                .clone()
        };
        assert_eq!(ip(&specs[2]).as_deref(), Some("10.0.1.13/24"));
        assert!(specs.iter().all(|s| s.suspend && s.labels["app"] == "web"));
        let m = specs[1].set.as_deref().unwrap();
        assert_eq!(
            (m.set.as_str(), m.index, m.max_unavailable, m.replicas),
            ("web", 2, 2, 3)
        );
        // Each member hashes as itself: no two alike.
        assert_ne!(
            crate::spec::spec_hash(&specs[0]),
            crate::spec::spec_hash(&specs[1])
        );
    }

    #[test]
    fn a_set_with_errors_holds_every_member_it_names() {
        let (specs, diags) = parse(&SET.replace("maxUnavailable: 2", "maxUnavailable: 0"));
        assert!(specs.is_empty());
        let all = diags.join("\n");
        assert!(
            all.contains("web.yaml:8:19: error: spec.maxUnavailable"),
            "{all}"
        );
        for n in ["web-01", "web-02", "web-03"] {
            assert!(
                all.contains(&format!("member {n} of set web is not read")),
                "{all}"
            );
        }
        let (_, d) = crate::spec::parse_file(
            "web.yaml",
            SET.replace("replicas: 3", "replicas: many").as_bytes(),
        );
        assert!(
            d.iter().any(|d| d.is_error() && d.spec.is_none()),
            "unnamed: the set is incomplete"
        );
    }

    #[test]
    fn names_placement_and_overrides_are_checked() {
        let bad = |from: &str, to: &str| parse(&SET.replace(from, to)).1.join("\n");
        assert!(bad("replicas: 3", "names: [a-1, a-1]").contains("given twice"));
        assert!(bad("replicas: 3", "replicas: 3\n  names: [a]").contains("not both"));
        assert!(bad("[pve1, pve2, pve3]}", "[pve1], maxPerNode: 2}").contains("room for 2"));
        assert!(bad("web-03: {", "web-04: {").contains("no member of the set"));
        assert!(bad("  labels: {app: web}", "  annotations: {a: b}").contains("name and labels"));
    }

    #[test]
    fn odd_patterns_neither_panic_nor_overflow() {
        assert_eq!(fill("w{index:070000}", 1, "x"), "w{index:070000}");
        assert_eq!(
            fill("{index+9223372036854775807}", 5, "x"),
            "{index+9223372036854775807}"
        );
        assert_eq!(
            fill("{index-9223372036854775807}", 5, "x"),
            "-9223372036854775802"
        );
        let text = SET.replace(
            "      name: \"{name}.example.org\"",
            "      name: \"w{index:070000}\"",
        );
        let r = std::panic::catch_unwind(|| parse(&text));
        assert!(r.is_ok(), "panicked");
    }

    #[test]
    fn a_set_too_large_to_expand_is_held_not_built() {
        let big = "x".repeat(900_000);
        let text = SET
            .replace("replicas: 3", "replicas: 1000")
            .replace(
                "      site: lab\n",
                &format!("      site: lab\n      userData: \"{big}\"\n"),
            )
            .replace(
                "  overrides:\n    web-03: {forProvider: {node: pve9}}\n",
                "",
            )
            .replace("  placement: {nodes: [pve1, pve2, pve3]}\n", "");
        let (specs, diags) = parse(&text);
        assert!(specs.is_empty());
        assert!(diags[0].contains("more than 2000000"), "{:?}", &diags[..2]);
        // Every member held by name, or (past the file's diagnostics cap) the set incomplete:
        // either way none is taken as removed.
        let (specs, d) = crate::spec::parse_file("web.yaml", text.as_bytes());
        let set = crate::spec::assemble(specs.into(), d);
        let invalid = set.invalid_names();
        assert!(
            !set.is_complete()
                || (1..=1000).all(|i| invalid.contains(format!("web-{i:02}").as_str()))
        );
    }

    /// A set document that fails before it is expanded (a misspelt kind, a SOPS refusal) is
    /// not taken for a spec named like the set: nothing is read as removed.
    #[test]
    fn a_set_that_cannot_be_read_is_never_a_spec_of_its_name() {
        for text in [
            SET.replace("ProxmoxVMSet", "ProxmoxVmSet"),
            format!("{SET}sops:\n  mac: x\n"),
        ] {
            let (specs, diags) = crate::spec::parse_file("web.yaml", text.as_bytes());
            let set = crate::spec::assemble(specs.into(), diags);
            assert!(!set.is_complete(), "{:?}", set.diagnostics);
            assert!(!set.invalid_names().contains("web"));
        }
    }
}
