//! One spec in detail: its fields, conditions, last task, backoff and history.

use super::*;

pub(super) fn render_one(dir: &Path, name: &str, opts: &ViewOptions) -> Result<String, ViewError> {
    if !is_spec_name(name) {
        return Err(ViewError::InvalidName {
            name: cut(&clean(name), 80),
        });
    }
    let path = dir.join(format!("{name}.yaml"));
    let f: SpecFile = match load(&path)? {
        Loaded::Parsed(f) => f,
        Loaded::Missing => {
            return Err(ViewError::NoSuchSpec {
                name: name.to_string(),
                path,
            });
        }
        Loaded::Corrupt(reason) => {
            return Err(ViewError::Corrupt {
                name: name.to_string(),
                path,
                reason,
            });
        }
    };
    if opts.json {
        let out = serde_json::to_string_pretty(&f)?;
        return Ok(json_for_terminal(out));
    }
    Ok(spec_detail(&f, name, opts.now, Paint(opts.color)))
}

pub(super) fn spec_detail(f: &SpecFile, name: &str, now: SystemTime, p: Paint) -> String {
    let mut out = String::new();
    detail_fields(&mut out, f, name, now);
    detail_conditions(&mut out, f, now, p);
    detail_last_task(&mut out, f, now, p);
    detail_backoff(&mut out, f, now, p);
    detail_history(&mut out, f, now, p);
    detail_drift(&mut out, f, p);
    out
}

/// The fields at the top of the detail view, one `Label:  value` line each.
pub(super) fn detail_fields(out: &mut String, f: &SpecFile, name: &str, now: SystemTime) {
    let mut field = |label: &str, value: String| {
        let _ = writeln!(out, "{:<14}{value}", format!("{label}:"));
    };
    field("Name", clean(name));
    if f.name != name {
        field(
            "Names spec",
            format!("{} (the file says so)", clean(&f.name)),
        );
    }
    field("Site/Node", site_node(&f.site, &f.node));
    field("VMID", f.vm_id.map_or("-".to_string(), |v| v.to_string()));
    field("VM name", or_dash(&f.vm_name));
    field("State", or_dash(&f.state));
    // The reason the list's row shows, named the same way (its condition is listed below).
    field("Reason", headline(&f.conditions).0);
    let ips: Vec<String> = f.ip_addresses.iter().map(|a| clean(a)).collect();
    field(
        "IP addresses",
        if ips.is_empty() {
            "- (none reported by the guest agent)".to_string()
        } else {
            ips.join(", ")
        },
    );
    field("Commit", or_dash(f.commit.as_deref().unwrap_or("")));
    field("Spec file", or_dash(f.spec_file.as_deref().unwrap_or("")));
    field(
        "Generation",
        or_dash(f.observed_generation.as_deref().unwrap_or("")),
    );
    field(
        "Provisioned",
        if f.initialization.provisioned {
            "yes".to_string()
        } else {
            "no".to_string()
        },
    );
    field("Updated", when(now, f.updated_at.as_deref().unwrap_or("")));
}

/// The detail view's conditions table.
pub(super) fn detail_conditions(out: &mut String, f: &SpecFile, now: SystemTime, p: Paint) {
    out.push_str("\nConditions:\n");
    if f.conditions.is_empty() {
        out.push_str("  (none: read every condition as Unknown)\n");
    } else {
        let rows: Vec<Vec<Cell>> = f
            .conditions
            .iter()
            .map(|c| {
                vec![
                    Cell::plain(clean(&c.kind)),
                    Cell {
                        text: c.status.as_str().to_string(),
                        color: Some(condition_color(&c.kind, c.status)),
                    },
                    Cell::plain(or_dash(&c.reason)),
                    Cell::plain(age(now, &c.last_transition_time)),
                    Cell::plain(clean(&c.message).trim().to_string()),
                ]
            })
            .collect();
        out.push_str(&table(
            "  ",
            &["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"],
            &rows,
            None,
            p,
        ));
    }
}

/// The detail view's last task.
pub(super) fn detail_last_task(out: &mut String, f: &SpecFile, now: SystemTime, p: Paint) {
    out.push_str("\nLast task:");
    match &f.last_task {
        None => out.push_str(" none\n"),
        Some(t) => {
            out.push('\n');
            let _ = writeln!(out, "  UPID:         {}", or_dash(&t.upid));
            let _ = writeln!(out, "  Type:         {}", or_dash(&t.kind));
            let status = or_dash(&t.status);
            let status = match t.status.as_str() {
                "OK" => p.paint(Color::Green, &status),
                "running" => p.paint(Color::Yellow, &status),
                s if s.starts_with("WARNINGS") => p.paint(Color::Yellow, &status),
                _ => p.paint(Color::Red, &status),
            };
            let _ = writeln!(out, "  Status:       {status}");
            let _ = writeln!(out, "  Started:      {}", when(now, &t.at));
        }
    }
}

/// The detail view's backoff.
pub(super) fn detail_backoff(out: &mut String, f: &SpecFile, now: SystemTime, p: Paint) {
    out.push_str("\nBackoff:");
    match &f.backoff {
        None => out.push_str(" none\n"),
        Some(b) => {
            out.push('\n');
            let _ = writeln!(out, "  Attempts:     {}", b.attempts);
            let next = match parse_rfc3339(&b.next_attempt) {
                Some(t) => format!(
                    "{} (next attempt {})",
                    clean(&b.next_attempt),
                    until(now, t)
                ),
                None => or_dash(&b.next_attempt),
            };
            let _ = writeln!(out, "  Next attempt: {}", p.paint(Color::Yellow, &next));
            let _ = writeln!(out, "  Category:     {}", or_dash(&b.category));
            let _ = writeln!(out, "  Message:      {}", or_dash(&b.message));
        }
    }
}

/// The detail view's history table.
pub(super) fn detail_history(out: &mut String, f: &SpecFile, now: SystemTime, p: Paint) {
    out.push_str("\nHistory");
    if f.history.is_empty() {
        out.push_str(": none\n");
    } else {
        out.push_str(" (most recent first):\n");
        let rows: Vec<Vec<Cell>> = f
            .history
            .iter()
            .map(|h| {
                vec![
                    Cell::plain(or_dash(&h.at)),
                    Cell::plain(age(now, &h.at)),
                    Cell::plain(or_dash(&h.action)),
                    Cell {
                        text: or_dash(&h.outcome),
                        color: Some(if h.outcome == "OK" {
                            Color::Green
                        } else {
                            Color::Red
                        }),
                    },
                ]
            })
            .collect();
        out.push_str(&table(
            "  ",
            &["AT", "AGE", "ACTION", "OUTCOME"],
            &rows,
            None,
            p,
        ));
    }
}

/// The detail view's drift, when the guest differs from the spec in what the listing shows.
pub(super) fn detail_drift(out: &mut String, f: &SpecFile, p: Paint) {
    if f.drift.is_empty() {
        return;
    }
    out.push_str("\nDrift (the spec against the guest as the cluster lists it):\n");
    let rows: Vec<Vec<Cell>> = (f.drift.iter())
        .map(|d| {
            vec![
                Cell::plain(or_dash(&d.field)),
                Cell::plain(or_dash(&d.spec)),
                Cell {
                    text: or_dash(&d.guest),
                    color: Some(Color::Yellow),
                },
                Cell::plain(
                    if d.at_next_start {
                        "at the next start"
                    } else {
                        "until converged or changed"
                    }
                    .to_string(),
                ),
            ]
        })
        .collect();
    out.push_str(&table(
        "  ",
        &["FIELD", "SPEC", "GUEST", "WHEN"],
        &rows,
        None,
        p,
    ));
}
