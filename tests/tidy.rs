//! Keeps the structure ARCHITECTURE.md describes true where the compiler cannot, by reading
//! the crates' sources (no build, no network):
//! - the layers inside each crate: a module imports only modules of layers below its own (so
//!   no cycle between modules, and no arrow that runs back up). Between crates cargo keeps the
//!   order: a crate sees only those below it;
//! - the core's dependencies hold no async runtime, HTTP client, git or database, and its
//!   decisions no async, I/O or clock;
//! - a permit is made only by the gate (its constructor is public: the gate is a crate above
//!   the client that checks it);
//! - a function longer than 100 lines says why (`// Long because: ...`);
//! - the gate builds no prose (`format!`): its words are `words`';
//! - ARCHITECTURE.md names only files that exist.
//!
//! Reading the wall clock outside `clock` is refused by clippy (`clippy.toml`). Test code
//! (`#[cfg(test)]` items and the files they declare) is not checked: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's modules in layers, bottom up: a module may import the modules of the layers
/// below its own, never one of its own layer or above. A new module must be placed here; a
/// folder of [`GROUPS`] has its children placed one by one (`shell::cli`).
type Layers = &'static [(&'static str, &'static [&'static str])];

/// The crates, bottom up (their folders; the daemon's is the repository's root), each with
/// its layers. A path into a crate below (re-exported under its old name, `crate::spec`) is
/// the compiler's to check, not this list's.
const CRATES: &[(&str, Layers)] = &[
    (
        "crates/proxsync-spec",
        &[
            (
                "helpers that import nothing of the crate",
                &[
                    "util::clock",
                    "util::duration",
                    "util::fnv",
                    "util::par",
                    "util::state_dir",
                    "util::time",
                ],
            ),
            (
                "foundation: knows nothing of specs or Proxmox",
                &["concurrency", "guest", "redact", "selector", "sops"],
            ),
            ("the marker and its key", &["ownership"]),
            ("the daemon's configuration", &["config"]),
            ("specs: parsing and validation", &["spec"]),
        ],
    ),
    (
        "crates/proxsync-pve",
        &[
            ("error categories", &["category"]),
            ("the Proxmox VE types, texts, permits and client", &["pve"]),
        ],
    ),
    (
        "crates/proxsync-core",
        &[
            ("cloud-init seed images", &["cloudinit"]),
            (
                "the values the pure layers decide on: records, views, a rewind",
                &["model"],
            ),
            ("the gate: decisions on evidence", &["gate"]),
            ("the pure planner", &["plan"]),
            ("a spec as PVE parameters, pure", &["render"]),
            ("the decisions of the layers below, in words", &["words"]),
        ],
    ),
    (
        "",
        &[
            (
                "helpers and the foundation",
                &[
                    "util::lanes",
                    "backoff",
                    "shell::malloc",
                    "telemetry::listener",
                ],
            ),
            (
                "the state database (the store); what a cycle observed",
                &["store", "observe"],
            ),
            (
                "the conformance suite: scenarios over the client",
                &["conformance"],
            ),
            ("the git source: commits -> specs", &["source"]),
            ("specs written from existing VMs", &["import"]),
            ("acting on Proxmox VE", &["execute"]),
            (
                "images kept on the storages; the guests' health checks",
                &["image_sync", "health"],
            ),
            ("status files", &["status"]),
            (
                "what a cycle did; reading status; the control socket",
                &["report", "shell::status_view", "shell::control"],
            ),
            (
                "site identity checks; metrics",
                &["site_identity", "telemetry::metrics"],
            ),
            ("the reconcile cycle", &["engine"]),
            (
                "notifications, checks, plan reports, the instance lock, the web listener",
                &[
                    "telemetry::notify",
                    "shell::web",
                    "shell::doctor",
                    "shell::plan_report",
                    "shell::instance_lock",
                    "shell::inventory",
                    "shell::manpages",
                    "shell::completions",
                ],
            ),
            (
                "a plan made without acting (the command's and the control socket's)",
                &["shell::planning"],
            ),
            ("the daemon", &["shell::daemon"]),
            ("the commands' bodies", &["shell::cmd"]),
            ("the command line", &["shell::cli"]),
        ],
    ),
];

/// Folders whose children are placed in a crate's layers one by one: the folder only groups
/// them.
const GROUPS: &[&str] = &["shell", "telemetry", "util"];

/// Pure code: decisions on values handed in. The core's dependencies already hold no async
/// runtime or HTTP client ([`the_core_needs_no_runtime_http_client_git_or_database`]).
const PURE: &[&str] = &[
    "crates/proxsync-core/src/gate/",
    "crates/proxsync-core/src/model/",
    "crates/proxsync-core/src/plan/",
    "crates/proxsync-core/src/render/",
    "crates/proxsync-core/src/words/",
];
const IMPURE_WORDS: &[&str] = &[
    "async fn",
    ".await",
    "std::fs",
    "std::net",
    "SystemTime",
    "Instant::now",
    "crate::util::clock",
];

/// What the core may not depend on, directly or through another crate.
const NOT_IN_THE_CORE: &[&str] = &["tokio", "reqwest", "hyper", "git2", "redb"];

const LONG_FUNCTION: usize = 100;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One source file with its test code blanked out.
struct Source {
    /// The folder of its crate ([`CRATES`]).
    krate: &'static str,
    path: String,
    /// The file's lines; those of `#[cfg(test)]` items are empty.
    lines: Vec<String>,
}

/// `crate`'s `src/` folder, relative to the repository.
fn src_dir(krate: &str) -> String {
    if krate.is_empty() {
        "src/".to_string()
    } else {
        format!("{krate}/src/")
    }
}

impl Source {
    /// The module it belongs to in its crate: `crates/proxsync-core/src/plan/rename.rs` is
    /// `plan`'s, `src/shell/doctor/mod.rs` is `shell::doctor`'s; `None` for a group's own
    /// `mod.rs` and a crate's `lib.rs`.
    fn module(&self) -> Option<String> {
        let rel = self.path.strip_prefix(&src_dir(self.krate)).unwrap();
        let parts: Vec<&str> = rel.split('/').collect();
        let name = |p: &str| p.strip_suffix(".rs").unwrap_or(p).to_string();
        if GROUPS.contains(&parts[0]) {
            return match parts.get(1) {
                Some(&"mod.rs") | None => None,
                Some(child) => Some(format!("{}::{}", parts[0], name(child))),
            };
        }
        (parts[0] != "lib.rs").then(|| name(parts[0]))
    }

    /// Lines outside comments, with their numbers.
    fn code(&self) -> impl Iterator<Item = (usize, &str)> {
        self.lines
            .iter()
            .enumerate()
            .map(|(i, l)| (i + 1, l.as_str()))
            .filter(|(_, l)| !l.trim_start().starts_with("//"))
    }
}

/// Every `.rs` file of every crate's `src/` that is not test code.
fn sources() -> Vec<Source> {
    CRATES
        .iter()
        .flat_map(|(krate, _)| crate_sources(krate))
        .collect()
}

fn crate_sources(krate: &'static str) -> Vec<Source> {
    let mut files = Vec::new();
    walk(&root().join(src_dir(krate)), &mut files);
    files.sort();
    let mut test_files = BTreeSet::new();
    let mut out = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let path = file
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let (lines, declared) = without_tests(&text);
        for m in declared {
            // `#[cfg(test)] mod m;` in src/a/mod.rs or src/a.rs declares src/a/m.rs.
            let dir = file.parent().unwrap();
            let base = match file.file_stem().unwrap().to_str().unwrap() {
                "mod" | "lib" => dir.to_path_buf(),
                stem => dir.join(stem),
            };
            test_files.insert(base.join(format!("{m}.rs")));
            test_files.insert(base.join(&m).join("mod.rs"));
        }
        out.push((file.clone(), Source { krate, path, lines }));
    }
    out.into_iter()
        .filter(|(f, _)| !test_files.contains(f))
        .map(|(_, s)| s)
        .collect()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's lines with each `#[cfg(test)]` item blanked (rustfmt's layout: the item ends at
/// the first line holding its indentation and `}`), and the modules such items declare.
fn without_tests(text: &str) -> (Vec<String>, Vec<String>) {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut declared = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "#[cfg(test)]" {
            i += 1;
            continue;
        }
        let indent = &lines[i][..lines[i].len() - lines[i].trim_start().len()];
        let close = format!("{indent}}}");
        let mut j = i + 1;
        // Further attributes of the same item.
        while j < lines.len() && lines[j].trim_start().starts_with("#[") {
            j += 1;
        }
        let end = if j < lines.len() && lines[j].trim_end().ends_with(';') {
            let item = lines[j].trim();
            if let Some(name) = item
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
            {
                declared.push(name.trim_end_matches(';').to_string());
            }
            j
        } else {
            (j..lines.len()).find(|&k| lines[k] == close).unwrap_or(j)
        };
        let last = end.min(lines.len() - 1);
        for line in &mut lines[i..=last] {
            line.clear();
        }
        i = end + 1;
    }
    (lines, declared)
}

/// The modules `line` names as `crate::m` (or `crate::group::m` for [`GROUPS`]).
fn crate_paths(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        // `proxsync_crate::`, `$crate::` are not paths of this crate.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let word = |r: &str| {
            let end = r
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(r.len());
            r[..end].to_string()
        };
        let first = word(rest);
        if first.is_empty() {
            continue;
        }
        let child = rest[first.len()..].strip_prefix("::").map(word);
        match child {
            Some(child) if GROUPS.contains(&first.as_str()) && !child.is_empty() => {
                out.push(format!("{first}::{child}"))
            }
            _ => out.push(first),
        }
    }
    out
}

/// The layers of `krate`, and each module's rank among them.
fn layers(krate: &str) -> (Layers, BTreeMap<&'static str, usize>) {
    let (_, layers) = CRATES.iter().find(|(k, _)| *k == krate).unwrap();
    let mut out = BTreeMap::new();
    for (rank, (_, modules)) in layers.iter().enumerate() {
        for m in *modules {
            assert!(
                out.insert(*m, rank).is_none(),
                "{m} is in two layers of {krate:?} in CRATES"
            );
        }
    }
    (layers, out)
}

/// The modules declared in `file` (`pub mod m;`, `pub(crate) mod m;`, `mod m;`).
fn declared(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    text.lines()
        .filter_map(|l| {
            l.trim()
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .filter(|m| m.ends_with(';'))
                .map(|m| m.trim_end_matches(';').to_string())
        })
        .collect()
}

/// The modules a crate's layers place: the top-level ones of its `lib.rs`, a group's children
/// in place of the group.
fn lib_modules(krate: &str) -> Vec<String> {
    let src = src_dir(krate);
    declared(&format!("{src}lib.rs"))
        .into_iter()
        .flat_map(|m| {
            if GROUPS.contains(&m.as_str()) {
                declared(&format!("{src}{m}/mod.rs"))
                    .into_iter()
                    .map(|c| format!("{m}::{c}"))
                    .collect()
            } else {
                vec![m]
            }
        })
        .collect()
}

#[test]
fn every_module_has_a_layer() {
    for (krate, _) in CRATES {
        let (_, layers) = layers(krate);
        let modules = lib_modules(krate);
        let missing: Vec<&String> = modules
            .iter()
            .filter(|m| !layers.contains_key(m.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "modules of {krate:?} with no place in tests/tidy.rs's CRATES: {missing:?}; add \
             each to the layer whose modules it may import from below, and to \
             ARCHITECTURE.md's module table"
        );
        let gone: Vec<&str> = layers
            .keys()
            .filter(|m| !modules.iter().any(|l| l == *m))
            .copied()
            .collect();
        assert!(
            gone.is_empty(),
            "CRATES names modules {}lib.rs does not declare: {gone:?}",
            src_dir(krate)
        );
    }
}

#[test]
fn every_import_runs_down_the_layers() {
    let mut wrong = Vec::new();
    for src in sources() {
        let (names, layers) = layers(src.krate);
        let Some(from) = src.module() else {
            continue; // a group's mod.rs only declares its children
        };
        let Some(&rank) = layers.get(from.as_str()) else {
            continue; // every_module_has_a_layer says so
        };
        for (n, line) in src.code() {
            for to in crate_paths(line) {
                let to = to.as_str();
                if to == from {
                    continue;
                }
                // Not this crate's: a crate below, which cargo orders.
                let Some(&to_rank) = layers.get(to) else {
                    continue;
                };
                if to_rank >= rank {
                    wrong.push(format!(
                        "{}:{n}: {from} (layer {rank}: {}) imports {to} (layer {to_rank}: {}): \
                         an arrow that runs {}",
                        src.path,
                        names[rank].0,
                        names[to_rank].0,
                        if to_rank == rank {
                            "across a layer"
                        } else {
                            "back up"
                        }
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers (tests/tidy.rs CRATES; ARCHITECTURE.md \"Crates and \
         layers\"): move the item down to a layer both can import, or hand it in from above:\n{}",
        wrong.join("\n")
    );
}

/// The core's dependencies, resolved for it alone (`cargo tree`; in the workspace's build
/// the client's features are on): no async runtime, HTTP client, git or database.
#[test]
fn the_core_needs_no_runtime_http_client_git_or_database() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "-p",
            "proxsync-core",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--locked", "--offline"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let names: BTreeSet<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        names.contains("proxsync-pve") && names.contains("serde"),
        "{tree}"
    );
    let found: Vec<&&str> = NOT_IN_THE_CORE
        .iter()
        .filter(|n| names.contains(**n))
        .collect();
    assert!(
        found.is_empty(),
        "proxsync-core depends on {found:?} (cargo tree -p proxsync-core -e normal -i NAME \
         shows through what): take proxsync-pve without its client feature"
    );
}

#[test]
fn the_gate_and_the_planner_are_pure() {
    let mut wrong = Vec::new();
    for src in sources() {
        if !PURE.iter().any(|p| src.path.starts_with(p)) {
            continue;
        }
        for (n, line) in src.code() {
            for word in IMPURE_WORDS {
                if line.contains(word) {
                    wrong.push(format!("{}:{n}: {word}", src.path));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the model, gate, planner and render decide on values handed in: no async, I/O or \
         clock:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn only_the_gate_makes_permits() {
    let mut wrong = Vec::new();
    for src in sources() {
        if src.path.starts_with("crates/proxsync-core/src/gate/")
            || src.path == "crates/proxsync-pve/src/pve/permit.rs"
        {
            continue;
        }
        for (n, line) in src.code() {
            if line.contains("Permit::new(") {
                wrong.push(format!("{}:{n}", src.path));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "a permit is made only by the gate's decision functions (proxsync-core's gate), from \
         verified \
         evidence; ask the gate for one instead:\n{}",
        wrong.join("\n")
    );
}

/// The gate's functions that may `format!`: they build an id or a mark PVE stores, not words
/// for a person (file, function, why).
const GATE_FORMATS: &[(&str, &str, &str)] = &[
    (
        "crates/proxsync-core/src/gate/ha.rs",
        "affinity_mark",
        "the comment PVE stores on a group or rule: the mark compared, not words",
    ),
    (
        "crates/proxsync-core/src/gate/ha.rs",
        "affinity_id",
        "the id of a group or rule (pve-configid), not words",
    ),
];

/// Execute's functions that may `format!`: they build a value PVE takes, not words for a
/// person (file, function, why).
const EXECUTE_FORMATS: &[(&str, &str, &str)] = &[
    (
        "src/execute/cloud_init.rs",
        "iso_volid",
        "a volume id in a storage's iso content",
    ),
    (
        "src/execute/ha.rs",
        "resource_comment",
        "the comment PVE stores on an HA resource",
    ),
    (
        "src/execute/preflight.rs",
        "local_volumes",
        "config entries as PVE prints them (`scsi0=local-lvm:...`)",
    ),
    (
        "src/execute/remove.rs",
        "release_params",
        "the notes PVE keeps after a release",
    ),
];

/// The gate decides with values; their words are `crate::words`' (`impl Display`), so a
/// condition, `plan`, a notification and the journal say the same thing.
#[test]
fn the_gate_builds_no_prose() {
    let wrong = prose_built_in("crates/proxsync-core/src/gate/", GATE_FORMATS);
    assert!(
        wrong.is_empty(),
        "the gate builds no prose: a refusal or a note is a value (its data), and its words are \
         its `impl Display` in proxsync-core's `words`:\n{}",
        wrong.join("\n")
    );
}

/// Execute's verdicts are values too (`model::Blocked`, `Unfit`, `Wait`, `Note`), said by
/// `words`: a guest's kind is named in one place, not in each error built where it is decided.
#[test]
fn execute_builds_no_prose() {
    let wrong = prose_built_in("src/execute/", EXECUTE_FORMATS);
    assert!(
        wrong.is_empty(),
        "execute builds no prose: an error, a wait or a history note is a value of proxsync-core's \
         `model` (`Blocked`, `Unfit`, `Wait`, `Note`), and its words are its `impl Display` in \
         `words`:\n{}",
        wrong.join("\n")
    );
}

/// A spec's status conditions say the planner's verdicts, the record and the site's view in
/// `words` (`model::ConditionText`), as `plan` says the verdicts (`plan::VerdictLine`): what a
/// condition means is written once for every kind.
#[test]
fn status_conditions_build_no_prose() {
    let mut wrong = prose_built_in("src/status/conditions.rs", &[]);
    wrong.extend(prose_built_in("src/status/summary.rs", &[]));
    assert!(
        wrong.is_empty(),
        "a status condition's message is a `model::ConditionText` (or another value of \
         proxsync-core's `model`), and its words are its `impl Display` in `words`:\n{}",
        wrong.join("\n")
    );
}

/// The `format!` calls in non-test code under `prefix`, outside the functions `allowed`
/// names, as `path:line: in function`.
fn prose_built_in(prefix: &str, allowed: &[(&str, &str, &str)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for src in sources() {
        if !src.path.starts_with(prefix) || src.path.ends_with("/tests.rs") {
            continue;
        }
        let fns = functions(&src);
        for (n, line) in src.code() {
            if !line.contains("format!(") {
                continue;
            }
            let within = fns
                .iter()
                .filter(|(_, first, last)| (*first..=*last).contains(&n))
                .map(|(name, _, _)| name.as_str())
                .next_back();
            let ok = allowed
                .iter()
                .any(|(path, name, _)| *path == src.path && Some(*name) == within);
            if !ok {
                wrong.push(format!("{}:{n}: in {}", src.path, within.unwrap_or("?")));
            }
        }
    }
    wrong
}

/// Functions (with a body) of `src`, as (name, first line, last line).
fn functions(src: &Source) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    let lines = &src.lines;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(at) = trimmed.find("fn ") else {
            continue;
        };
        let head = &trimmed[..at];
        let is_fn = head.split_whitespace().all(|w| {
            ["pub", "async", "const", "unsafe", "extern"].contains(&w) || w.starts_with("pub(")
        });
        if !is_fn || trimmed.starts_with("//") {
            continue;
        }
        let name: String = trimmed[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let indent = &line[..line.len() - trimmed.len()];
        // The signature ends at `{` (a body) or `;` (a declaration).
        let Some(open) = (i..lines.len()).find(|&k| {
            let l = lines[k].trim_end();
            l.ends_with('{') || l.ends_with(';') || l.ends_with('}')
        }) else {
            continue;
        };
        let l = lines[open].trim_end();
        if l.ends_with(';') {
            continue;
        }
        if l.ends_with('}') {
            continue; // a one-line body
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&k| lines[k] == close) {
            out.push((name, i + 1, end + 1));
        }
    }
    out
}

#[test]
fn a_long_function_says_why() {
    let mut wrong = Vec::new();
    let mut stale = Vec::new();
    for src in sources() {
        for (name, first, last) in functions(&src) {
            let length = last - first + 1;
            // The line stands in the body, or among the comments and attributes just above.
            let above = (0..first - 1)
                .rev()
                .take_while(|&k| {
                    let l = src.lines[k].trim_start();
                    l.starts_with("//") || l.starts_with("#[")
                })
                .last()
                .unwrap_or(first - 1);
            let says_why = src.lines[above..last]
                .iter()
                .any(|l| l.trim_start().starts_with("// Long because:"));
            let here = format!("{}:{first}: {name} ({length} lines)", src.path);
            match (length > LONG_FUNCTION, says_why) {
                (true, false) => wrong.push(here),
                (false, true) => stale.push(here),
                _ => {}
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "functions over {LONG_FUNCTION} lines without a `// Long because: ...` line saying why \
         they are one function (or split them):\n{}",
        wrong.join("\n")
    );
    assert!(
        stale.is_empty(),
        "a `// Long because: ...` line on a function of at most {LONG_FUNCTION} lines (it was \
         split or shortened since): drop the line\n{}",
        stale.join("\n")
    );
}

/// `scripts/commit-msg` (CONTRIBUTING: the hook) takes a subject of 72 characters and refuses
/// one of 73, and a body not set off by a blank line.
#[test]
fn the_commit_message_hook_keeps_subjects_short() {
    let dir = tempfile::tempdir().unwrap();
    let verdict = |message: String| {
        let file = dir.path().join("COMMIT_EDITMSG");
        std::fs::write(&file, message).unwrap();
        let out = std::process::Command::new(root().join("scripts/commit-msg"))
            .arg(&file)
            .output()
            .expect("run scripts/commit-msg (bash)");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let subject = |n: usize| "s".repeat(n);
    assert!(verdict(format!("{}\n\nthe detail\n# a comment\n", subject(72))).0);
    let (ok, said) = verdict(format!("{}\n", subject(73)));
    assert!(!ok && said.contains("73 characters"), "{said}");
    let (ok, said) = verdict("subject\nno blank line\n".to_string());
    assert!(!ok && said.contains("blank"), "{said}");
}

#[test]
fn architecture_names_only_files_that_exist() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut missing = BTreeSet::new();
    for word in text.split(|c: char| c == '`' || c.is_whitespace() || "()[],;:".contains(c)) {
        let word = word.trim_end_matches('.');
        let is_path = [
            "src/",
            "tests/",
            "scripts/",
            "bench/",
            "docs/",
            "packaging/",
            "systemd/",
        ]
        .iter()
        .any(|p| word.starts_with(p));
        if !is_path || word.contains('*') || word.contains('{') || word.contains('<') {
            continue;
        }
        if !root().join(word).exists() {
            missing.insert(word.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names files that are not in the repository: {missing:?}"
    );
}

#[test]
fn the_checks_see_what_they_check() {
    // The reading above is by text: make sure it finds what it must, so a broken reader does
    // not pass quietly.
    let (lines, declared) = without_tests(
        "use crate::a::B;\n#[cfg(test)]\nmod tests {\n    use crate::z;\n}\n#[cfg(test)]\nmod more;\nfn f() {}\n",
    );
    assert_eq!(lines[0], "use crate::a::B;");
    assert!(lines[1..7].iter().all(String::is_empty), "{lines:?}");
    assert_eq!(lines[7], "fn f() {}");
    assert_eq!(declared, ["more"]);
    assert_eq!(
        crate_paths("use crate::plan::{A, B}; x(crate::spec::f, $crate::no, crate::shell::cli)"),
        ["plan", "spec", "shell::cli"]
    );
    let src = Source {
        krate: "",
        path: "src/x.rs".into(),
        lines: "pub async fn long(\n    a: u32,\n) -> u32 {\n    a\n}\nfn decl(&self);\nfn one() { 1 }\n"
            .lines()
            .map(str::to_string)
            .collect(),
    };
    assert_eq!(functions(&src), [("long".to_string(), 1, 5)]);
    let all = sources();
    assert!(
        all.iter()
            .any(|s| s.path == "crates/proxsync-core/src/plan/mod.rs")
    );
    assert!(all.iter().any(|s| s.path == "src/engine/mod.rs"));
    assert!(
        !all.iter().any(|s| s.path == "src/execute/tests.rs"),
        "test files are skipped"
    );
    let placed: usize = CRATES.iter().map(|(k, _)| layers(k).1.len()).sum();
    assert!(placed >= 30, "{placed}");
}

/// Licences a dependency proxsync ships with may carry (one of an `OR`, all of an `AND`).
/// Dev-dependencies are not shipped: openmetrics-parser (LGPL-3.0) only checks test output.
const SHIPPABLE_LICENCES: &[&str] = &[
    "Apache-2.0",
    "Apache-2.0 WITH LLVM-exception",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "BSL-1.0",
    "CC0-1.0",
    "ISC",
    "MIT",
    "Unicode-3.0",
    "Unlicense",
    "Zlib",
];

/// Whether an SPDX expression (as crates.io holds them: `A OR B`, `A/B`, `(A OR B) AND C`) is
/// satisfied by [`SHIPPABLE_LICENCES`].
fn shippable(expression: &str) -> bool {
    let expression = expression.replace(['(', ')'], " ");
    // AND binds tighter than OR; crates.io's `/` is an old spelling of OR.
    expression
        .split(" OR ")
        .flat_map(|a| a.split('/'))
        .any(|alternative| {
            alternative
                .split(" AND ")
                .all(|part| SHIPPABLE_LICENCES.contains(&part.trim()))
        })
}

#[test]
fn shipped_dependencies_have_licences_we_can_ship() {
    assert!(shippable("MIT OR Apache-2.0") && shippable("Apache-2.0/MIT"));
    assert!(shippable("(MIT OR Apache-2.0) AND Unicode-3.0"));
    assert!(!shippable("LGPL-3.0") && !shippable("MIT AND GPL-3.0"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let rustc = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .unwrap();
    let host = String::from_utf8_lossy(&rustc.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("rustc -vV names its host");
    // Offline: the build that ran this test fetched every crate it reads.
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let licence: BTreeMap<&str, (&str, &str)> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let id = p["id"].as_str().unwrap();
            let name = p["name"].as_str().unwrap();
            (id, (name, p["license"].as_str().unwrap_or("")))
        })
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    // The closure of proxsync's normal and build dependencies (not its dev-dependencies).
    let root_id = meta["resolve"]["root"].as_str().unwrap();
    let mut shipped = BTreeSet::new();
    let mut todo = vec![root_id];
    while let Some(id) = todo.pop() {
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].as_str() != Some("dev"));
            let dep_id = dep["pkg"].as_str().unwrap();
            if normal && shipped.insert(dep_id) {
                todo.push(dep_id);
            }
        }
    }
    assert!(shipped.len() > 100, "the dependency graph was read");
    let wrong: Vec<String> = shipped
        .iter()
        .map(|id| licence[id])
        .filter(|(_, l)| !shippable(l))
        .map(|(name, l)| format!("{name}: {l:?}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "dependencies whose licence is not on tests/tidy.rs's SHIPPABLE_LICENCES (add the \
         licence there only after reading it; README.md's dependency section says why each \
         crate is used): {wrong:?}"
    );
}
