//! The book under `docs/` (mdBook, `docs/SUMMARY.md`) against the code and against itself:
//! - the command-line reference (`docs/cli-reference.md`) is what the clap definitions of
//!   `src/shell/cli.rs` say, and the spec field reference (`docs/spec-fields.md`) what the JSON
//!   schemas of `proxsync schema --kind ...` say: both are generated here and must equal the
//!   committed pages (`PROXSYNC_BLESS=1 cargo test --test docs` rewrites them);
//! - every relative link of a committed Markdown file resolves, `#anchor`s included (GitHub's
//!   heading slugs, which mdBook's match for these pages), and every page of `docs/` is in the
//!   book's table of contents.
//!
//! No build of the binary, no network: the generators read the library's definitions.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use serde_json::Value;

/// The command that rewrites the generated pages, named by every failure about them.
const REGENERATE: &str = "PROXSYNC_BLESS=1 cargo test --test docs";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Compares a generated page with the committed one, or writes it with `PROXSYNC_BLESS=1`.
fn check_generated(rel: &str, generated: &str) {
    let path = root().join(rel);
    if std::env::var("PROXSYNC_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == generated {
        return;
    }
    let first = committed
        .lines()
        .zip(generated.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
    panic!(
        "{rel} is not what the code generates (first difference at line {}: committed {:?}, \
         generated {:?}); regenerate it with `{REGENERATE}` and commit it",
        first + 1,
        committed.lines().nth(first).unwrap_or("<end>"),
        generated.lines().nth(first).unwrap_or("<end>"),
    );
}

/// The banner of a generated page.
fn generated_by(source: &str) -> String {
    format!(
        "<!-- Generated from {source} by tests/docs.rs: do not edit. Regenerate with \
         `{REGENERATE}`. -->\n\n"
    )
}

/// Escapes what Markdown would read as markup in prose (outside `code spans`).
fn escape(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        if i % 2 == 1 {
            out.push_str(part);
            continue;
        }
        for c in part.chars() {
            if matches!(c, '<' | '>' | '*' | '[' | ']' | '|' | '_') {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out
}

/// A code span holding `text`, however many backticks it holds.
fn code(text: &str) -> String {
    let ticks = if text.contains('`') { "``" } else { "`" };
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

// ------------------------------------------------------------------------ the command line

fn visible_subcommands(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

/// Every command, depth first: `proxsync`, `proxsync validate`, ..., `proxsync accept site`.
fn commands(cmd: &clap::Command, out: &mut Vec<clap::Command>) {
    out.push(cmd.clone());
    for sub in visible_subcommands(cmd) {
        commands(sub, out);
    }
}

fn bin_name(cmd: &clap::Command) -> String {
    cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string()
}

/// GitHub's (and mdBook's) anchor for a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// How an argument is written in a usage line: `--specs <PATH>...`, `<NAME>`.
fn arg_form(arg: &clap::Arg) -> String {
    let values: Vec<String> = arg
        .get_value_names()
        .map(|names| names.iter().map(|n| format!("<{n}>")).collect())
        .unwrap_or_else(|| vec![format!("<{}>", arg.get_id().as_str().to_uppercase())]);
    let many = arg
        .get_num_args()
        .is_some_and(|n| n.max_values() > 1 && values.len() == 1);
    let dots = if many { "..." } else { "" };
    if arg.is_positional() {
        return format!("{}{dots}", values.join(" "));
    }
    let mut names = Vec::new();
    if let Some(s) = arg.get_short() {
        names.push(format!("-{s}"));
    }
    if let Some(l) = arg.get_long() {
        names.push(format!("--{l}"));
    }
    let mut form = names.join(", ");
    if arg.get_action().takes_values() {
        write!(form, " {}{dots}", values.join(" ")).unwrap();
    }
    form
}

/// One argument as a list item: its form, its help, and its default, values and variable.
fn arg_item(arg: &clap::Arg) -> String {
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let mut item = format!("- {}", code(&arg_form(arg)));
    let help = help.trim();
    if !help.is_empty() {
        write!(item, ": {}", escape(help).replace('\n', "\n  ")).unwrap();
    }
    let mut notes = Vec::new();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| code(&v.to_string_lossy()))
        .collect();
    if !defaults.is_empty() && arg.get_action().takes_values() {
        notes.push(format!("default {}", defaults.join(", ")));
    }
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| code(v.get_name()))
        .collect();
    if !possible.is_empty() && arg.get_action().takes_values() {
        notes.push(format!("one of {}", possible.join(", ")));
    }
    if let Some(env) = arg.get_env() {
        notes.push(format!("environment {}", code(&env.to_string_lossy())));
    }
    if arg.is_required_set() {
        notes.push("required".into());
    }
    if !notes.is_empty() {
        write!(item, " ({})", notes.join("; ")).unwrap();
    }
    item.push('\n');
    item
}

/// `docs/cli-reference.md`: every visible command as its `--help` describes it.
fn cli_reference() -> String {
    let mut root_cmd = proxsync::shell::cli::Cli::command();
    root_cmd.build();
    let mut all = Vec::new();
    commands(&root_cmd, &mut all);

    let mut out = String::from("# Command-line reference\n\n");
    out.push_str(&generated_by("the clap definitions in `src/shell/cli.rs`"));
    out.push_str(
        "Every command as `proxsync <command> --help` describes it. [The command line](cli.md) \
         says what each one does at more length, with its exit codes.\n\n",
    );
    for cmd in &all {
        let name = bin_name(cmd);
        writeln!(out, "- [`{name}`](#{})", slug(&name)).unwrap();
    }
    for cmd in &all {
        let name = bin_name(cmd);
        write!(out, "\n## `{name}`\n\n").unwrap();
        let about = cmd
            .get_long_about()
            .or(cmd.get_about())
            .map(|a| a.to_string())
            .unwrap_or_default();
        if !about.trim().is_empty() {
            write!(out, "{}\n\n", escape(about.trim())).unwrap();
        }
        let usage = cmd.clone().render_usage().to_string();
        let usage = usage.trim().trim_start_matches("Usage:").trim();
        write!(out, "**Usage:** {}\n\n", code(usage)).unwrap();

        let subs: Vec<&clap::Command> = visible_subcommands(cmd).collect();
        if !subs.is_empty() {
            out.push_str("**Commands:**\n\n");
            for sub in subs {
                let sub_name = bin_name(sub);
                let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
                writeln!(
                    out,
                    "- [`{}`](#{}): {}",
                    sub.get_name(),
                    slug(&sub_name),
                    escape(about.trim())
                )
                .unwrap();
            }
            out.push('\n');
        }
        let args: Vec<&clap::Arg> = cmd
            .get_arguments()
            .filter(|a| !a.is_hide_set() && a.get_id() != "help")
            .collect();
        for (title, positional) in [("Arguments", true), ("Options", false)] {
            let these: Vec<&&clap::Arg> = args
                .iter()
                .filter(|a| a.is_positional() == positional)
                .collect();
            if these.is_empty() {
                continue;
            }
            write!(out, "**{title}:**\n\n").unwrap();
            for arg in these {
                out.push_str(&arg_item(arg));
            }
            out.push('\n');
        }
        let after = cmd
            .get_after_long_help()
            .or(cmd.get_after_help())
            .map(|a| a.to_string())
            .unwrap_or_default();
        if !after.trim().is_empty() {
            write!(out, "```text\n{}\n```\n", after.trim_end()).unwrap();
        }
    }
    out
}

#[test]
fn the_cli_reference_is_what_clap_says() {
    let page = cli_reference();
    for command in [
        "`proxsync plan`",
        "`proxsync accept site`",
        "--config <FILE>",
    ] {
        assert!(page.contains(command), "{command} in {page}");
    }
    assert!(!page.contains("proxsync manpages"), "a hidden command");
    check_generated("docs/cli-reference.md", &page);
}

// ---------------------------------------------------------------------- the spec's fields

/// A schema's type in words: `string`, `integer 1-512`, `one of running, stopped`, `a or b`.
fn type_of(schema: &Value, defs: &Value) -> String {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or_default();
        return type_of(&defs[name], defs);
    }
    if let Some(c) = schema.get("const") {
        return format!("exactly {}", code(&literal(c)));
    }
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| code(&literal(v))).collect();
        return format!("one of {}", values.join(", "));
    }
    if let Some(options) = schema["oneOf"].as_array() {
        let options: Vec<String> = options.iter().map(|o| type_of(o, defs)).collect();
        return options.join("; or ");
    }
    if schema == &Value::Bool(false) {
        return "not allowed".into();
    }
    let kind = schema["type"].as_str().unwrap_or("any");
    let mut words = vec![kind.to_string()];
    if kind == "array" && schema["items"].is_object() {
        let items = &schema["items"];
        if items["properties"].is_object() {
            words = vec!["list of objects".into()];
        } else {
            words = vec![format!("list of ({})", type_of(items, defs))];
        }
    }
    if kind == "object"
        && schema["properties"]
            .as_object()
            .is_none_or(|p| p.is_empty())
        && schema["additionalProperties"].is_object()
    {
        words = vec![format!(
            "map of {}",
            type_of(&schema["additionalProperties"], defs)
        )];
    }
    let bound = |lo: &str, hi: &str| -> Option<String> {
        match (schema.get(lo), schema.get(hi)) {
            (Some(a), Some(b)) => Some(format!("{}-{}", literal(a), literal(b))),
            (Some(a), None) => Some(format!("at least {}", literal(a))),
            (None, Some(b)) => Some(format!("at most {}", literal(b))),
            (None, None) => None,
        }
    };
    if let Some(range) = bound("minimum", "maximum") {
        words.push(range);
    }
    if let Some(range) = bound("minLength", "maxLength") {
        words.push(format!("of {range} characters"));
    }
    if let Some(range) = bound("minItems", "maxItems") {
        words.push(format!("of {range} entries"));
    }
    if schema["uniqueItems"] == Value::Bool(true) {
        words.push("(unique)".into());
    }
    if let Some(p) = schema["pattern"].as_str() {
        words.push(format!("matching {}", code(p)));
    }
    if let Some(f) = schema["format"].as_str() {
        words.push(format!("({f})"));
    }
    words.join(" ")
}

fn literal(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One row per field, depth first in the schema's order: `spec.forProvider.networks[].vlan`.
fn field_rows(path: &str, schema: &Value, defs: &Value, required: bool, out: &mut String) {
    let schema = match schema["$ref"].as_str() {
        Some(r) => &defs[r.rsplit('/').next().unwrap_or_default()],
        None => schema,
    };
    if !path.is_empty() {
        let description = schema["description"].as_str().unwrap_or_default();
        let mut kind = type_of(schema, defs);
        if required {
            kind.push_str(", required");
        }
        writeln!(
            out,
            "| {} | {} | {} |",
            code(path),
            kind.replace('|', "\\|"),
            escape(description)
        )
        .unwrap();
    }
    let (object, prefix) = if schema["type"] == "array" && schema["items"]["properties"].is_object()
    {
        (&schema["items"], format!("{path}[]."))
    } else if path.is_empty() {
        (schema, String::new())
    } else {
        (schema, format!("{path}."))
    };
    let needed: BTreeSet<&str> = object["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = object["properties"].as_object() {
        for (name, sub) in props {
            if sub == &Value::Bool(false) {
                continue;
            }
            field_rows(
                &format!("{prefix}{name}"),
                sub,
                defs,
                needed.contains(name.as_str()),
                out,
            );
        }
    }
}

/// `docs/spec-fields.md`: every field of every kind's schema.
fn spec_fields() -> String {
    let mut out = String::from("# Spec field reference\n\n");
    out.push_str(&generated_by(
        "the JSON schemas of `proxsync schema --kind KIND` (`crates/proxsync-spec/src/spec/schema.rs`)",
    ));
    out.push_str(
        "Every field of each kind, with its type and limits as the JSON Schema an editor uses \
         states them. The validator (`proxsync validate`) is the authority: some rules, such as \
         the image forms or the size ranges, the schema can only partly express. \
         [The spec reference](spec.md) explains the fields and how proxsync acts on them.\n",
    );
    for schema in [
        proxsync::spec::json_schema(),
        proxsync::spec::lxc_schema(),
        proxsync::spec::set_schema(),
        proxsync::spec::image_schema(),
        proxsync::spec::template_schema(),
        proxsync::spec::defaults_schema(),
    ] {
        let title = schema["title"].as_str().unwrap_or_default();
        write!(
            out,
            "\n## {title}\n\n{}\n\n`proxsync schema --kind {title}`\n\n",
            escape(schema["description"].as_str().unwrap_or_default())
        )
        .unwrap();
        out.push_str("| field | type | description |\n| --- | --- | --- |\n");
        field_rows("", &schema, &schema["$defs"], false, &mut out);
    }
    out
}

#[test]
fn the_spec_field_reference_is_what_the_schemas_say() {
    let page = spec_fields();
    for field in [
        "## ProxmoxVM\n",
        "## ProxmoxLXC\n",
        "## ProxmoxVMSet\n",
        "`spec.forProvider.cpu`",
    ] {
        assert!(page.contains(field), "{field} in {page}");
    }
    check_generated("docs/spec-fields.md", &page);
}

// ------------------------------------------------------------------------------- links

/// The committed Markdown files: the repository's own, not the build's or a tool's.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                let skip = name.starts_with('.')
                    || ["target", "mutants.out", "node_modules", "book"].contains(&name.as_str());
                if !skip {
                    walk(&path, out);
                }
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(root(), &mut out);
    out.sort();
    out
}

/// The text outside fenced code blocks and code spans, where a link can be.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced {
            out.push('\n');
            continue;
        }
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                out.push_str(part);
            }
        }
        out.push('\n');
    }
    out
}

/// The anchors of a Markdown file's headings (GitHub's slugs, `-1`, `-2` for repeats).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The targets of a text's inline links, `[text](target)`, with their lines.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose(text).lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            out.push((n + 1, target.to_string()));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let files = markdown_files();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(root()).unwrap().display().to_string();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            checked += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !dest.exists() {
                broken.push(format!("{shown}:{line}: {target}: no such file"));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if dest.extension().is_some_and(|e| e == "md") {
                let there = std::fs::read_to_string(&dest).unwrap();
                if !anchors(&there).contains(fragment) {
                    broken.push(format!(
                        "{shown}:{line}: {target}: no heading with that anchor"
                    ));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: the reader is broken"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    let missing: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".md") && n != "SUMMARY.md" && !listed.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "pages of docs/ that docs/SUMMARY.md does not list: {missing:?}"
    );
}

#[test]
fn the_link_reader_sees_what_it_checks() {
    let text = "# A `b` c\n## Signed commits\n## Signed commits\n```\n[x](nowhere.md)\n```\n\
                see [y](a.md#b) and `[z](c.md)` and [w](https://e.org)\n";
    let found: Vec<String> = links(text).into_iter().map(|(_, t)| t).collect();
    assert_eq!(found, ["a.md#b", "https://e.org"]);
    let a = anchors(text);
    assert!(a.contains("a-b-c") && a.contains("signed-commits") && a.contains("signed-commits-1"));
    assert_eq!(
        slug("Secrets in git: SOPS-encrypted `userData`"),
        "secrets-in-git-sops-encrypted-userdata"
    );
}

/// Where `Cargo.toml`'s `[package.metadata.deb]` installs a file of the repository, if it does.
fn installed(file: &str) -> Option<String> {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let manifest: toml::Value = toml::from_str(&text).unwrap();
    let assets = manifest["package"]["metadata"]["deb"]["assets"].as_array()?;
    assets.iter().find_map(|a| {
        let (src, dest) = (a[0].as_str()?, a[1].as_str()?);
        if src == file {
            return Some(dest.to_string());
        }
        let name = file.strip_prefix(src.strip_suffix('*')?)?;
        (!name.contains('/') && dest.ends_with('/')).then(|| format!("{dest}{name}"))
    })
}

#[test]
fn the_package_ships_the_book_where_the_readme_links_it() {
    let readme_at = installed("README.md").expect("the README is installed");
    let doc_dir = readme_at.trim_end_matches("README.md");
    let mut pages: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".md") || n == "book.toml")
        .collect();
    pages.sort();
    assert!(pages.len() > 20, "{pages:?}");
    for page in pages {
        let file = format!("docs/{page}");
        assert_eq!(
            installed(&file),
            Some(format!("{doc_dir}{file}")),
            "{file} is not installed beside the README as docs/ (Cargo.toml, \
             [package.metadata.deb] assets)"
        );
    }
}
