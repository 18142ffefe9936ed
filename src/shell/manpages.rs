//! The man pages the package ships: `proxsync.1` and one page per subcommand
//! (`proxsync-plan.1`, `proxsync-accept-site.1`), from the clap definitions, with what clap's
//! pages lack: a NAME line of one clause (the whole text is the DESCRIPTION), the examples as
//! written (no-fill), EXIT STATUS and FILES. And the file formats' pages, `proxsync.toml.5` and
//! `proxsync-spec.5`, from the book's reference pages (the spec's is generated from the JSON
//! schema, and a test keeps it so).

use std::io::Write as _;
use std::path::Path;

/// What each page's command exits with, by page name: every visible command has a line (a
/// test checks), as docs/cli.md's table gives them.
const EXIT_STATUS: &[(&str, &str)] = &[
    (
        "proxsync",
        "0 on success; each command's page says what else it exits with.",
    ),
    ("proxsync-validate", "0 valid, 1 invalid."),
    (
        "proxsync-doctor",
        "0 no failure, 1 any failure (with --exercise: any answer differs, or the exercise could not begin).",
    ),
    (
        "proxsync-run",
        "0 stopped cleanly; with --once, 0 every spec Ready, 1 otherwise.",
    ),
    (
        "proxsync-plan",
        "0 no changes, 2 changes or a spec not satisfied (backing off, stalled, waiting), 1 when the plan cannot be trusted or the daemon would refuse it: a site that cannot be read, an invalid spec, a refused commit, a spec set not read completely, a name that is no spec, a safety valve's refusal, a create the run's pre-flight refuses.",
    ),
    (
        "proxsync-status",
        "0; 1 when the status directory cannot be read.",
    ),
    ("proxsync-inventory", "0; 1 no status directory."),
    (
        "proxsync-events",
        "0 (with --follow: until interrupted); 1 when the status directory cannot be read.",
    ),
    (
        "proxsync-wait",
        "0 every spec waited for is Ready (or deleted, with --for deleted); 3 as soon as one is Stalled, invalid or suspended, its reason on stderr; 124 the timeout ran out first; 1 an error (a name that is no spec, a bad --commit); 2 bad arguments.",
    ),
    (
        "proxsync-adopt",
        "0 recorded (or listed), 1 refused (the reason and what to do).",
    ),
    ("proxsync-import", "0 written, 1 nothing written."),
    (
        "proxsync-accept",
        "0 accepted, 1 refused or nothing to accept.",
    ),
    (
        "proxsync-accept-commit",
        "0 accepted (or none needed), 1 refused.",
    ),
    (
        "proxsync-accept-site",
        "0 accepted, 1 nothing refused to accept.",
    ),
    (
        "proxsync-reconcile",
        "0 queued, 1 no daemon or no such spec.",
    ),
    ("proxsync-suspend", "0 recorded, 1 refused."),
    ("proxsync-resume", "0."),
    ("proxsync-schema", "0."),
    ("proxsync-completions", "0."),
];

/// The files every page lists.
const FILES: &[(&str, &str)] = &[
    (
        "/etc/proxsync/proxsync.toml",
        "the configuration (--config names another)",
    ),
    (
        "/var/lib/proxsync",
        "the state directory (state_dir): the state database, the marker key, the lock, the control socket",
    ),
    (
        "/var/lib/proxsync/status",
        "the status files (status_dir): one YAML file per spec, _summary.yaml, _orphans.yaml",
    ),
    (
        "/usr/share/doc/proxsync/docs",
        "the book: the spec, the config, the status files, operations",
    ),
];

/// The file formats' pages (section 5): name, what the file is, the book's page.
const FORMAT_PAGES: &[(&str, &str, &str)] = &[
    (
        "proxsync.toml",
        "the configuration file of proxsync",
        include_str!("../../docs/config.md"),
    ),
    (
        "proxsync-spec",
        "the fields of the spec files proxsync applies",
        include_str!("../../docs/spec-fields.md"),
    ),
];

/// Writes the pages into `dir`; returns how many.
pub(crate) fn write(dir: &Path, mut cli: clap::Command) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    cli.build();
    let mut n = write_tree(dir, &cli)?;
    for (name, about, markdown) in FORMAT_PAGES {
        std::fs::write(
            dir.join(format!("{name}.5")),
            format_page(name, about, markdown),
        )?;
        n += 1;
    }
    Ok(n)
}

/// A file format's page from the book's Markdown: its headings as sections, its tables as
/// tagged paragraphs (the first cell the tag, the others its text), code blocks no-fill.
fn format_page(name: &str, about: &str, markdown: &str) -> String {
    let mut out = format!(
        ".TH {} 5\n.SH NAME\n{} \\- {}\n.SH DESCRIPTION\n",
        name.to_uppercase(),
        name.replace('-', "\\-"),
        roff_line(about)
    );
    let mut header: Option<Vec<String>> = None;
    let mut code = false;
    for line in markdown.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            out.push_str(if code { ".fi\n" } else { ".nf\n" });
            code = !code;
            continue;
        }
        if code {
            out.push_str(&roff_line(line));
            out.push('\n');
            continue;
        }
        if trimmed.starts_with('|') {
            let cells = table_cells(trimmed);
            if cells
                .iter()
                .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
            {
                continue;
            }
            match &header {
                None => header = Some(cells),
                Some(names) => out.push_str(&table_row(names, &cells)),
            }
            continue;
        }
        header = None;
        if trimmed.is_empty() {
            out.push_str(".PP\n");
        } else if trimmed.starts_with("<!--") || trimmed.starts_with("# ") {
            // The generated page's note and the page's title: the NAME line says it.
        } else if let Some(title) = trimmed.strip_prefix("## ") {
            out.push_str(&format!(".SH \"{}\"\n", inline(title).to_uppercase()));
        } else if let Some(title) = trimmed.strip_prefix("### ") {
            out.push_str(&format!(".SS \"{}\"\n", inline(title)));
        } else {
            out.push_str(&roff_line(&inline(trimmed)));
            out.push('\n');
        }
    }
    out.push_str(".SH \"SEE ALSO\"\n.BR proxsync (1)\n");
    for (other, _, _) in FORMAT_PAGES.iter().filter(|(n, _, _)| *n != name) {
        out.push_str(&format!(".BR {other} (5)\n"));
    }
    out
}

/// A table row's cells, split at unescaped `|`.
fn table_cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell)),
            c => cell.push(c),
        }
    }
    cells.push(cell);
    cells.iter().map(|c| c.trim().to_string()).collect()
}

/// A table row as a tagged paragraph: the first cell bold, the others with their column's name.
fn table_row(names: &[String], cells: &[String]) -> String {
    let tag = cells.first().map(|c| inline(c)).unwrap_or_default();
    let rest: Vec<String> = (names.iter().zip(cells).skip(1))
        .filter(|(_, cell)| !cell.is_empty())
        .map(|(name, cell)| format!("{}: {}", inline(name), inline(cell)))
        .collect();
    format!(
        ".TP\n\\fB{}\\fR\n{}\n",
        roff_line(&tag),
        roff_line(&rest.join(". "))
    )
}

/// Markdown's inline marks as plain text: `code` and [links](target) keep their text, `\` and
/// `*` escapes their character.
fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.char_indices().peekable();
    let mut in_link = false;
    while let Some((i, c)) = chars.next() {
        match c {
            '`' => {}
            '\\' => {
                if let Some((_, next)) = chars.next() {
                    out.push(next);
                }
            }
            // A link's text is kept, its target dropped: a man page cannot follow it.
            '[' if is_link(&text[i..]) => in_link = true,
            ']' if in_link => {
                in_link = false;
                if chars.peek().is_some_and(|(_, c)| *c == '(') {
                    for (_, t) in chars.by_ref() {
                        if t == ')' {
                            break;
                        }
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// `text` (from a `[`) is a Markdown link: `[text](target)`, the text holding no `[`.
fn is_link(text: &str) -> bool {
    let rest = &text[1..];
    rest.find("](")
        .is_some_and(|end| !rest[..end].contains('['))
}

fn write_tree(dir: &Path, cmd: &clap::Command) -> std::io::Result<usize> {
    // `build` names each subcommand's page `proxsync-plan`, `proxsync-accept-site`.
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
    std::fs::write(dir.join(format!("{name}.1")), page(&name, cmd)?)?;
    let mut n = 1;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        n += write_tree(dir, sub)?;
    }
    Ok(n)
}

/// One command's page.
fn page(name: &str, cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let full = cmd.get_about().map(ToString::to_string).unwrap_or_default();
    let long = (cmd.get_long_about()).map_or_else(|| full.clone(), ToString::to_string);
    let examples = (cmd.get_after_long_help().or(cmd.get_after_help())).map(ToString::to_string);
    // clap's page without its EXTRA section: the examples follow as written.
    let shown = (cmd.clone())
        .about(first_clause(&full))
        .long_about(long)
        .after_help(None::<&str>)
        .after_long_help(None::<&str>);
    let mut page = Vec::new();
    clap_mangen::Man::new(shown).render(&mut page)?;
    if let Some(text) = examples {
        writeln!(page, ".SH EXAMPLES\n.nf")?;
        for line in text.lines() {
            writeln!(page, "{}", roff_line(line))?;
        }
        writeln!(page, ".fi")?;
    }
    let status = (EXIT_STATUS.iter())
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s);
    if let Some(status) = status {
        writeln!(page, ".SH \"EXIT STATUS\"\n{}", roff_line(status))?;
    }
    writeln!(page, ".SH FILES")?;
    for (file, what) in FILES {
        writeln!(page, ".TP\n.I {}\n{}", roff_line(file), roff_line(what))?;
    }
    if name == "proxsync" {
        writeln!(
            page,
            ".SH \"SEE ALSO\"\n.BR proxsync.toml (5),\n.BR proxsync-spec (5)"
        )?;
    } else {
        writeln!(page, ".SH \"SEE ALSO\"\n.BR proxsync (1)")?;
    }
    Ok(page)
}

/// The NAME line's text: the description up to its first `;`, `:` or sentence end.
fn first_clause(about: &str) -> String {
    let end = [". ", "; ", ": "]
        .iter()
        .filter_map(|sep| about.find(sep))
        .min()
        .unwrap_or(about.len());
    about[..end].trim_end_matches('.').trim().to_string()
}

/// `text` as one roff text line: backslashes escaped, a leading `.` or `'` (a request) kept
/// as text.
fn roff_line(text: &str) -> String {
    let escaped = text.replace('\\', "\\e");
    match escaped.starts_with(['.', '\'']) {
        true => format!("\\&{escaped}"),
        false => escaped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages() -> (tempfile::TempDir, Vec<(String, String)>) {
        let dir = tempfile::tempdir().unwrap();
        let cli = <crate::shell::cli::Cli as clap::CommandFactory>::command();
        write(dir.path(), cli).unwrap();
        let mut pages: Vec<(String, String)> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e
                    .file_name()
                    .to_string_lossy()
                    .trim_end_matches(".1")
                    .to_string();
                (name, std::fs::read_to_string(e.path()).unwrap())
            })
            .collect();
        pages.sort();
        (dir, pages)
    }

    /// The file formats' pages read as man pages: the book's tables as tagged paragraphs, no
    /// Markdown marks left, `[[site]]` kept and a link's text kept without its target.
    #[test]
    fn the_format_pages_are_the_books_reference_as_roff() {
        let (_dir, pages) = pages();
        let toml = &pages
            .iter()
            .find(|(n, _)| n == "proxsync.toml.5")
            .unwrap()
            .1;
        assert!(
            toml.starts_with(
                ".TH PROXSYNC.TOML 5\n.SH NAME\nproxsync.toml \\- the configuration file"
            ),
            "{toml}"
        );
        assert!(
            toml.contains(
                ".TP\n\\fBinstall_id\\fR\ndefault: main. meaning: which proxsync instance"
            ),
            "{toml}"
        );
        assert!(toml.contains("\\fB[[site]] name\\fR"), "{toml}");
        assert!(toml.contains("(Secrets in git)"), "{toml}");
        assert!(!toml.contains("sops.md"), "{toml}");
        let spec = &pages
            .iter()
            .find(|(n, _)| n == "proxsync-spec.5")
            .unwrap()
            .1;
        assert!(spec.contains(".SH \"PROXMOXVM\"\n"), "{spec}");
        assert!(
            spec.contains(".TP\n\\fBspec.forProvider.node\\fR\ntype: string"),
            "{spec}"
        );
        for page in [toml, spec] {
            assert!(!page.contains('`') && !page.contains("| ---"), "{page}");
        }
    }

    /// Every command's page has a one-clause NAME line, its exit status and the files.
    #[test]
    fn every_page_names_its_command_in_a_clause_and_says_how_it_exits() {
        let (_dir, pages) = pages();
        assert!(pages.len() > 10, "{}", pages.len());
        for (name, page) in pages.iter().filter(|(n, _)| !n.ends_with(".5")) {
            let name_line = (page.lines())
                .skip_while(|l| *l != ".SH NAME")
                .nth(1)
                .unwrap_or_default();
            assert!(
                !name_line.contains(';') && name_line.len() < 160,
                "{name}: NAME line {name_line:?}"
            );
            assert!(
                page.contains(".SH \"EXIT STATUS\"\n"),
                "{name} has no EXIT STATUS"
            );
            assert!(page.contains(".SH FILES\n"), "{name} has no FILES");
        }
    }

    /// An example line keeps its spacing: no-fill, one roff line per line.
    #[test]
    fn examples_are_printed_as_written() {
        let (_dir, pages) = pages();
        let plan = &pages.iter().find(|(n, _)| n == "proxsync-plan").unwrap().1;
        let examples = plan
            .split(".SH EXAMPLES\n.nf\n")
            .nth(1)
            .expect("an EXAMPLES section");
        let examples = examples.split("\n.fi").next().unwrap();
        let cli = <crate::shell::cli::Cli as clap::CommandFactory>::command();
        let after = cli
            .find_subcommand("plan")
            .unwrap()
            .get_after_help()
            .unwrap()
            .to_string();
        assert_eq!(examples, after.replace('\\', "\\e"));
        assert!(!plan.contains(".SH EXTRA"), "{plan}");
    }

    #[test]
    fn the_name_line_is_the_first_clause() {
        assert_eq!(
            first_clause("Show what a reconcile would do now, field by field; exit 0 no changes"),
            "Show what a reconcile would do now, field by field"
        );
        assert_eq!(
            first_clause("Print the JSON Schema."),
            "Print the JSON Schema"
        );
        assert_eq!(roff_line(".hidden \\ text"), "\\&.hidden \\e text");
    }
}
