//! The list view: the summary, one row per spec, the orphans, the files skipped.

use super::*;

/// The version of the `--json` list's shape (its `version`): 3 since it holds the daemon's
/// state (`daemon`); 2 since `orphans` entries name their `kind` (as `_orphans.yaml` of
/// version 2 does); 1 had no `version` field. docs/output.md.
pub(crate) const LIST_JSON_VERSION: u32 = 3;

#[derive(Serialize)]
pub(super) struct ListJson<'a> {
    version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    daemon: Option<&'a DaemonState>,
    summary: Option<&'a SummaryFile>,
    specs: &'a [SpecFile],
    orphans: &'a [OrphanRecord],
    skipped: &'a [Skipped],
}

pub(super) fn render_list(dir: &Path, opts: &ViewOptions) -> Result<String, ViewError> {
    if opts.json {
        let listing = load_listing::<SpecFile>(dir, &opts.only)?;
        let out = serde_json::to_string_pretty(&ListJson {
            version: LIST_JSON_VERSION,
            daemon: opts.daemon.as_ref(),
            summary: listing.summary.as_ref(),
            specs: &listing.specs,
            orphans: &listing.orphans,
            skipped: &listing.skipped,
        })?;
        return Ok(json_for_terminal(out));
    }

    let listing = load_listing::<SpecRow>(dir, &opts.only)?;
    let p = Paint(opts.color);
    let mut out = String::new();
    if let Some(s) = &listing.summary {
        let suspended = (listing.specs.iter())
            .filter(|f| {
                f.condition(kinds::SUSPENDED)
                    .is_some_and(|c| c.status == ConditionStatus::True)
            })
            .count();
        // Counted of the specs shown: a filtered list's count is of what it shows.
        let suspended = opts.only.is_all().then_some(suspended);
        summary_text(&mut out, s, suspended, opts, p);
        out.push('\n');
    }

    if listing.specs.is_empty() && !opts.only.is_all() {
        let _ = writeln!(out, "No spec matches the filter.");
    } else if listing.specs.is_empty() {
        let _ = writeln!(
            out,
            "No spec status files in {}.",
            clean(&dir.display().to_string())
        );
    } else {
        let rows: Vec<Vec<Cell>> = listing
            .specs
            .iter()
            .map(|f| spec_row(f, opts.now))
            .collect();
        out.push_str(&table(
            "",
            &[
                "NAME",
                "SITE/NODE",
                "VMID",
                "STATE",
                "READY",
                "REASON",
                "AGE",
                "MESSAGE",
            ],
            &rows,
            opts.width,
            p,
        ));
    }

    if !listing.orphans.is_empty() {
        out.push_str(&orphans_text(&listing.orphans, opts.now, p));
    }

    if !listing.notes.is_empty() {
        out.push('\n');
        for n in &listing.notes {
            let _ = writeln!(out, "note: {n}");
        }
    }
    Ok(out)
}

/// The orphans' table, under its heading.
fn orphans_text(orphans: &[OrphanRecord], now: SystemTime, p: Paint) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nOrphans ({}): VMs carrying this install's tag that no spec describes (or a second VM of a spec)",
        orphans.len()
    );
    let rows: Vec<Vec<Cell>> = orphans
        .iter()
        .map(|o| {
            vec![
                Cell::plain(site_node(&o.site, &o.node)),
                Cell::plain(o.vm_id.to_string()),
                Cell::plain(match &o.duplicate_of {
                    Some(spec) => format!(
                        "{} (duplicate of {spec})",
                        or_dash(o.name.as_deref().unwrap_or(""))
                    ),
                    None => or_dash(o.name.as_deref().unwrap_or("")),
                }),
                Cell::plain(or_dash(&o.state)),
                Cell::plain(age(now, &o.first_seen)),
                Cell {
                    text: or_dash(&o.action),
                    color: (o.action.starts_with("will delete") || o.action == "deleted")
                        .then_some(Color::Yellow),
                },
            ]
        })
        .collect();
    out.push_str(&table(
        "",
        &["SITE/NODE", "VMID", "NAME", "STATE", "AGE", "ACTION"],
        &rows,
        None,
        p,
    ));
    out
}

// Long because: one line per summary field, in display order, each only when it says
// something.
pub(super) fn summary_text(
    out: &mut String,
    s: &SummaryFile,
    suspended: Option<usize>,
    opts: &ViewOptions,
    p: Paint,
) {
    let now = opts.now;
    let commit = match s.commit.as_deref() {
        Some(c) if !c.is_empty() => clean(&short_commit(c)),
        _ => "none yet".to_string(),
    };
    let _ = writeln!(out, "Commit:      {commit}");
    if let Some(e) = &s.source_error {
        // Masked here too: an older release wrote the URL of a source error as it was.
        let _ = writeln!(
            out,
            "Source:      {} (the last good commit is kept)",
            p.paint(Color::Red, &clean(&crate::redact::urls(e)))
        );
    }
    if let Some(r) = &s.refused_commit {
        // An older release wrote the message as the reason.
        let why = if r.message.is_empty() {
            &r.reason
        } else {
            &r.message
        };
        let _ = writeln!(
            out,
            "Tip refused: {} (not applied; the last verified commit is kept)",
            p.paint(
                Color::Red,
                &format!("{}: {}", clean(&short_commit(&r.commit)), clean(why))
            )
        );
    }
    if let Some(r) = &s.rewind {
        let since = match parse_rfc3339(&r.since) {
            Some(t) => format!(", applied {}", ago(now, t)),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "Rewound:     {} (does not descend from {}, the commit applied before it{since}; its \
             deletes count as one batch)",
            p.paint(Color::Yellow, &clean(&short_commit(&r.commit))),
            clean(&short_commit(&r.from))
        );
    }
    let count = |n: u64, label: &str, color: Color| {
        let text = format!("{n} {label}");
        if n > 0 { p.paint(color, &text) } else { text }
    };
    let suspended = match suspended {
        Some(n) if n > 0 => format!(", {}", count(n as u64, "suspended", Color::Yellow)),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "Specs:       {} ({}, {}, {}, {}{suspended})",
        s.specs,
        if s.ready == s.specs {
            p.paint(Color::Green, &format!("{} Ready", s.ready))
        } else {
            format!("{} Ready", s.ready)
        },
        count(s.stalled, "Stalled", Color::Red),
        count(s.backing_off, "backing off", Color::Yellow),
        count(s.invalid, "invalid", Color::Red),
    );
    if !s.sets.is_empty() {
        let sets: Vec<String> = (s.sets.iter())
            .map(|set| {
                let waiting = match set.not_ready.as_slice() {
                    [] => String::new(),
                    names => format!(
                        " (not Ready: {})",
                        names
                            .iter()
                            .map(|n| clean(n))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                format!(
                    "{} {}/{} Ready{waiting}",
                    clean(&set.name),
                    set.ready,
                    set.desired
                )
            })
            .collect();
        let _ = writeln!(out, "Sets:        {}", sets.join("; "));
    }
    if !s.images.is_empty() {
        let images: Vec<String> = (s.images.iter())
            .map(|i| {
                let state = match i.state.as_str() {
                    "Ready" => p.paint(Color::Green, "Ready"),
                    "Failed" => p.paint(Color::Red, "Failed"),
                    other => clean(other),
                };
                format!("{} {} {state}", clean(&i.name), clean(&i.version))
            })
            .collect();
        let _ = writeln!(out, "Images:      {}", images.join("; "));
        for i in s.images.iter().filter(|i| i.state == "Failed") {
            let _ = writeln!(out, "  {}: {}", clean(&i.name), clean(&i.message));
        }
    }
    let healthy = s
        .sites
        .iter()
        .filter(|site| site_problem(site).is_none())
        .count();
    let sites = format!("{healthy}/{} healthy", s.sites.len());
    let problems: Vec<String> = s
        .sites
        .iter()
        .filter_map(|site| site_problem(site).map(|why| format!("{}: {why}", clean(&site.name))))
        .collect();
    if problems.is_empty() {
        let _ = writeln!(out, "Sites:       {}", p.paint(Color::Green, &sites));
    } else {
        let _ = writeln!(
            out,
            "Sites:       {} ({})",
            p.paint(Color::Red, &sites),
            cut_to(&problems.join("; "), opts.width)
        );
    }
    if let Some(line) = parallel_line(&s.sites, opts.width) {
        let _ = writeln!(out, "At once:     {line}");
    }
    let last = match parse_rfc3339(&s.last_cycle) {
        Some(t) => ago(now, t),
        None => "unknown".to_string(),
    };
    let _ = writeln!(out, "Last cycle:  {last} (took {} ms)", s.cycle_ms);
    for r in &s.refused {
        let _ = writeln!(out, "Refused:     {}", p.paint(Color::Red, &clean(r)));
    }
    for f in &s.notify_failures {
        let since = match parse_rfc3339(&f.since) {
            Some(t) => format!("failing since {}", ago(now, t)),
            None => "failing".to_string(),
        };
        let _ = writeln!(
            out,
            "Notify:      {} ({}) {since}, {} message(s) given up: {}",
            clean(&f.target),
            clean(&f.kind),
            f.failures,
            p.paint(Color::Red, &clean(&f.last_error))
        );
    }
    if let Some(r) = &s.last_request {
        let what = match r.spec.as_deref() {
            Some(spec) => format!("reconcile {}", clean(spec)),
            None => "reconcile (all specs)".to_string(),
        };
        let handled = match parse_rfc3339(&r.handled_at) {
            Some(t) => ago(now, t),
            None => "at an unknown time".to_string(),
        };
        let _ = writeln!(out, "Request:     {what}, handled {handled}");
    }
}

/// The actions proxsync may run at once per node, `site/node N, ...`; `None` before any.
pub(super) fn parallel_line(
    sites: &[crate::status::SiteRecord],
    width: Option<usize>,
) -> Option<String> {
    let nodes: Vec<String> = sites
        .iter()
        .flat_map(|site| {
            site.parallel_per_node
                .iter()
                .map(move |(node, n)| format!("{}/{} {n}", clean(&site.name), clean(node)))
        })
        .collect();
    (!nodes.is_empty()).then(|| cut_to(&format!("{} (actions per node)", nodes.join(", ")), width))
}

/// Why a site is not healthy, or `None` when it is.
pub(super) fn site_problem(site: &crate::status::SiteRecord) -> Option<String> {
    let mut why = Vec::new();
    if !site.reachable {
        why.push("unreachable".to_string());
    } else if !site.quorate {
        why.push("no quorum".to_string());
    }
    if !site.nodes_offline.is_empty() {
        let nodes: Vec<String> = site.nodes_offline.iter().map(|n| clean(n)).collect();
        why.push(format!("offline: {}", nodes.join(", ")));
    }
    if let Some(e) = &site.error {
        why.push(clean(e));
    }
    (!why.is_empty()).then(|| why.join(", "))
}

/// The reason and message a spec is summed up by, in the list's row and atop its detail: a
/// Stalled one's (what a person must do), else a pending restart's while Ready (what is not
/// applied yet), else Ready's.
pub(super) fn headline(conditions: &[Condition]) -> (String, Option<Color>, &str) {
    let find = |kind: &str| {
        (conditions.iter()).find(|c| c.kind == kind && c.status == ConditionStatus::True)
    };
    let ready = conditions.iter().find(|c| c.kind == kinds::READY);
    match (find(kinds::STALLED), ready, find(kinds::REBOOT_PENDING)) {
        (Some(s), _, _) => (or_dash(&s.reason), Some(Color::Red), s.message.as_str()),
        (None, Some(r), Some(pending)) if r.status == ConditionStatus::True => (
            kinds::REBOOT_PENDING.to_string(),
            Some(Color::Yellow),
            pending.message.as_str(),
        ),
        (None, Some(r), _) => (or_dash(&r.reason), None, r.message.as_str()),
        (None, None, _) => ("-".to_string(), None, ""),
    }
}

pub(super) fn spec_row(f: &SpecRow, now: SystemTime) -> Vec<Cell> {
    let ready = f.condition(kinds::READY);
    let ready_status = ready.map_or(ConditionStatus::Unknown, |c| c.status);
    let (reason, reason_color, message) = headline(&f.conditions);
    let mut message = clean(message);
    if let Some(b) = &f.backoff {
        let when = match parse_rfc3339(&b.next_attempt) {
            Some(t) => until(now, t),
            None => "later".to_string(),
        };
        message = if message.is_empty() {
            format!("retry {when}: {}", clean(&b.message))
        } else {
            format!("retry {when}: {message}")
        };
    }
    vec![
        Cell::plain(clean(&f.name)),
        Cell::plain(site_node(&f.site, &f.node)),
        Cell::plain(f.vm_id.map_or("-".to_string(), |v| v.to_string())),
        Cell::plain(or_dash(&f.state)),
        Cell {
            text: ready_status.as_str().to_string(),
            color: Some(positive(ready_status)),
        },
        Cell {
            text: reason,
            color: reason_color,
        },
        Cell::plain(ready.map_or("-".to_string(), |c| age(now, &c.last_transition_time))),
        Cell::plain(message.trim().to_string()),
    ]
}
