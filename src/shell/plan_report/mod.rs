//! What `proxsync plan` shows and how it exits: each action with what it changes field by
//! field, the specs that get no action and why, in words, and what makes the plan unfit to be
//! trusted (an unreachable site, an invalid spec, a refused commit, a spec set not read
//! completely, a VM whose config cannot be read).
//!
//! A converge's field changes are the update the run would send: `render::preview_config`
//! and `render::preview_disk` are the functions the converge itself calls, applied to the
//! VM's config and pending values read now. Nothing here decides what to do.

use std::collections::BTreeSet;

mod images;

use serde::Serialize;

use crate::category::Category;
use crate::engine::PlanView;
use crate::observe::Power;
use crate::plan::{Action, Verdict, VerdictLine};
use crate::render::ConfigChange;
use crate::spec::{PowerState, RebootMode, Spec, SpecSet};
use crate::store::SpecRecord;

/// Which specs the report is about.
pub(crate) struct Scope<'a> {
    /// `plan NAME...`: only these specs' actions and verdicts, never a removal nor an orphan.
    pub names: Option<&'a BTreeSet<String>>,
    /// The specs come from `--specs` files, not the source: a removal may only mean a spec is
    /// not among those files, and is labelled so.
    pub from_files: bool,
}

/// The version of `plan --json`'s shape (its `version`): 3 since it lists the `images` PVE
/// would download; 2 since each orphan names its `kind`; 1 had no `version` field.
/// docs/output.md.
pub(crate) const JSON_VERSION: u32 = 3;

/// The plan as `proxsync plan` prints it (`--json`: as data).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Report {
    /// [`JSON_VERSION`].
    pub version: u32,
    /// The `ProxmoxImage`s PVE would download first.
    pub images: Vec<images::ImageLine>,
    pub changes: Vec<Change>,
    /// Specs that get no action this cycle, and why (up-to-date specs are left out).
    pub held: Vec<Held>,
    /// Removed specs whose guest is kept this cycle, and why (old template versions).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<Kept>,
    pub orphans: Vec<crate::plan::Orphan>,
    /// Safety valves that refused deletes.
    pub refused: Vec<String>,
    /// Why this plan cannot be trusted as complete; any makes `plan` exit 1.
    pub errors: Vec<String>,
}

/// One action.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Change {
    #[serde(flatten)]
    pub action: Action,
    /// For an update: each field it changes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<Field>,
    /// For an update: what else it brings in line, by name (compared only when applied).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
    /// For a removal: why the spec counts as removed (`specRemoved`, or `notInSpecFiles` when
    /// the specs come from `--specs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removal: Option<&'static str>,
    /// The line `plan` prints.
    pub text: String,
}

/// A field an update changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Field {
    pub field: String,
    /// `None`: not set now.
    pub old: Option<String>,
    /// `None`: removed.
    pub new: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<&'static str>,
    /// The change waits for the guest's next start: PVE keeps it pending on a running guest
    /// (`render::current::reported_pending`).
    #[serde(rename = "needsRestart", skip_serializing_if = "std::ops::Not::not")]
    pub needs_restart: bool,
    /// `destroyDisks`: the converge destroys `old`, the volume in the slot, with its data.
    #[serde(rename = "destroysData", skip_serializing_if = "std::ops::Not::not")]
    pub destroys_data: bool,
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.field.as_str() {
            "marker" => return f.write_str("marker re-signed"),
            "description" if self.old.is_none() && self.new.is_none() => {
                return f.write_str("description");
            }
            _ => {}
        }
        let old = self
            .old
            .as_deref()
            .map_or_else(|| "unset".to_string(), |v| value_text(&self.field, v));
        if self.destroys_data {
            return write!(
                f,
                "{} {old} destroyed with its data (destroyDisks)",
                self.field
            );
        }
        let new = self
            .new
            .as_deref()
            .map_or_else(|| "removed".to_string(), |v| value_text(&self.field, v));
        write!(f, "{} {old} -> {new}", self.field)?;
        if let Some(unit) = self.unit {
            write!(f, " {unit}")?;
        }
        if self.needs_restart {
            f.write_str(" (at the next start)")?;
        }
        Ok(())
    }
}

/// A config value as a line of `plan` shows it: a container's `env` (PVE separates its
/// variables with NULs) as `NAME=value, NAME=value`, and no control character, line break or
/// bidi control, whatever the guest's config holds (`status_view::clean`).
fn value_text(key: &str, value: &str) -> String {
    if key == "env" {
        let vars: Vec<&str> = value.split('\0').filter(|e| !e.is_empty()).collect();
        return crate::shell::status_view::clean(&vars.join(", "));
    }
    crate::shell::status_view::clean(value)
}

/// A removed spec whose guest is kept this cycle, and why (an old template version).
#[derive(Debug, Serialize)]
pub(crate) struct Kept {
    pub spec: String,
    pub text: String,
}

/// A spec that gets no action, and why.
#[derive(Debug, Serialize)]
pub(crate) struct Held {
    pub spec: String,
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The verdict in words.
    pub text: String,
}

impl Default for Report {
    fn default() -> Report {
        Report {
            version: JSON_VERSION,
            images: Vec::new(),
            changes: Vec::new(),
            held: Vec::new(),
            kept: Vec::new(),
            orphans: Vec::new(),
            refused: Vec::new(),
            errors: Vec::new(),
        }
    }
}

impl Report {
    /// The exit code `plan` promises: 1 when anything kept the plan from being complete, else
    /// 2 when there are changes or a spec is not satisfied (held: backing off, waiting, its
    /// node offline), 0 when every spec is as it says or held by a person's choice.
    pub(crate) fn exit_code(&self) -> u8 {
        if !self.errors.is_empty() {
            1
        } else if self.changes.is_empty() && self.images.is_empty() && self.unsatisfied() == 0 {
            0
        } else {
            2
        }
    }

    /// How many held specs are not as they say, and not by a person's choice (observe-only,
    /// suspended): the daemon is still at work on them, or stalled.
    fn unsatisfied(&self) -> usize {
        let by_choice =
            |v: &Verdict| matches!(v, Verdict::Observed { .. } | Verdict::Suspended { .. });
        self.held.iter().filter(|h| !by_choice(&h.verdict)).count()
    }

    /// The text `plan` prints on stdout (the errors go to stderr).
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for i in &self.images {
            out.push_str(&i.text);
            out.push('\n');
        }
        for c in &self.changes {
            out.push_str(&c.text);
            out.push('\n');
        }
        for h in &self.held {
            out.push_str(&format!("! {}: {}\n", h.spec, h.text));
        }
        for k in &self.kept {
            out.push_str(&format!("! {}: {}\n", k.spec, k.text));
        }
        for o in &self.orphans {
            out.push_str(&format!(
                "! orphan {} on {}/{} ({}): {}\n",
                o.kind.named(o.vmid),
                o.site,
                o.node,
                o.power,
                o.disposition
            ));
        }
        for r in &self.refused {
            out.push_str(&format!("refused: {r}\n"));
        }
        if let Some(last) = self.last_line() {
            out.push_str(&last);
            out.push('\n');
        }
        out
    }

    /// The line that ends the plan; `None` when it has no change and errors (on stderr): then
    /// it is not "no changes".
    fn last_line(&self) -> Option<String> {
        let downloads = match self.images.len() {
            0 => None,
            1 => Some("1 image to download".to_string()),
            n => Some(format!("{n} images to download")),
        };
        if let Some(downloads) = downloads {
            return Some(match self.changes.is_empty() {
                true => downloads,
                false => format!(
                    "{downloads}, then {} change(s): {}",
                    self.changes.len(),
                    self.summary()
                ),
            });
        }
        if self.changes.is_empty() && !self.errors.is_empty() {
            None
        } else if self.changes.is_empty() && self.unsatisfied() > 0 {
            // Not "no changes": the daemon is not done with these specs.
            Some(format!(
                "nothing to send now; {} spec(s) not satisfied (above)",
                self.unsatisfied()
            ))
        } else if self.changes.is_empty() && !self.held.is_empty() {
            Some(format!(
                "no changes; {} spec(s) held by hand (above)",
                self.held.len()
            ))
        } else if self.changes.is_empty() {
            Some("no changes".into())
        } else {
            Some(format!(
                "{} change(s): {}",
                self.changes.len(),
                self.summary()
            ))
        }
    }

    /// The changes counted by what they do: `3 to create, 1 to change, 1 to delete`.
    pub(crate) fn summary(&self) -> String {
        const ORDER: [&str; 8] = [
            "create", "adopt", "change", "move", "recreate", "delete", "release", "forget",
        ];
        let mut counts = [0usize; ORDER.len()];
        for c in &self.changes {
            let what = match &c.action {
                Action::Create { .. } | Action::ResumeCreate { .. } => "create",
                Action::Adopt { .. } | Action::AdoptByConsent { .. } | Action::HandOver { .. } => {
                    "adopt"
                }
                Action::Converge { .. } | Action::Relabel { .. } => "change",
                Action::Migrate { .. } => "move",
                Action::Recreate { .. } => "recreate",
                Action::Remove { release: true, .. } => "release",
                Action::Remove { .. } | Action::DeleteOrphan { .. } => "delete",
                Action::Forget { .. } => "forget",
            };
            if let Some(i) = ORDER.iter().position(|o| *o == what) {
                counts[i] += 1;
            }
        }
        let restarts = self
            .changes
            .iter()
            .filter(|c| c.fields.iter().any(|f| f.needs_restart))
            .count();
        let destroying = self
            .changes
            .iter()
            .filter(|c| c.fields.iter().any(|f| f.destroys_data))
            .count();
        let parts: Vec<String> = ORDER
            .iter()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .map(|(what, n)| {
                if *what != "change" {
                    return format!("{n} to {what}");
                }
                let mut notes = Vec::new();
                match restarts {
                    0 => {}
                    1 => notes.push("1 needs a restart".to_string()),
                    r => notes.push(format!("{r} need a restart")),
                }
                match destroying {
                    0 => {}
                    1 => notes.push("1 destroys disks".to_string()),
                    d => notes.push(format!("{d} destroy disks")),
                }
                match notes.is_empty() {
                    true => format!("{n} to change"),
                    false => format!("{n} to change ({})", notes.join("; ")),
                }
            })
            .collect();
        parts.join(", ")
    }

    /// The plan as Markdown for a pull request's comment: the summary as a heading, the lines
    /// as a `diff` block, and the errors. Every line is a spec's or a guest's words, so they
    /// stay inside a fence longer than any run of backticks they hold.
    pub(crate) fn markdown(&self) -> String {
        let text = self.render();
        let last = self.last_line();
        let mut lines: Vec<&str> = text.lines().collect();
        if last.is_some() {
            lines.pop();
        }
        let heading = last.unwrap_or_else(|| "incomplete".into());
        let fence = "`".repeat(3.max(longest_backtick_run(&text) + 1));
        let mut out = format!("### proxsync plan: {}\n\n", markdown_text(&heading));
        if !lines.is_empty() {
            out.push_str(&format!("{fence}diff\n"));
            for line in lines {
                out.extend(line.chars().filter(|c| !c.is_control()));
                out.push('\n');
            }
            out.push_str(&format!("{fence}\n"));
        }
        if !self.errors.is_empty() {
            out.push_str("\n**This plan is incomplete (exit 1):**\n\n");
            for e in &self.errors {
                out.push_str(&format!("- {}\n", markdown_text(e)));
            }
        }
        out
    }
}

/// The longest run of backticks in `text`.
fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// `text` as plain Markdown text: every character Markdown or HTML could read as markup is
/// escaped, and a line break is a space, so a spec's or a guest's words stay words.
fn markdown_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '(' | ')' | '#' | '|' | '!' | '~' | '{' | '}'
            | '+' | '-' | '.' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\n' | '\r' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// One planned action as `plan` shows it: an update's fields and an adoption's, read from the
/// VM's config; a removal labelled. What cannot be read goes to `errors`.
/// What a plan's create checks read once: the nodes' facts, and the images the run downloads
/// before it creates (per image, the nodes).
struct CreateReads {
    facts: crate::execute::NodeFacts,
    coming: BTreeSet<(String, String)>,
}

async fn change_of(
    view: &PlanView,
    by_name: &crate::util::fnv::FnvHashMap<&str, &Spec>,
    kinds: &crate::engine::GuestKinds,
    scope: &Scope<'_>,
    action: &Action,
    reads: &CreateReads,
    errors: &mut Vec<String>,
) -> Change {
    let mut change = Change {
        action: action.clone(),
        fields: Vec::new(),
        also: Vec::new(),
        removal: None,
        text: crate::engine::describe(action, by_name, kinds),
    };
    match action {
        Action::Converge {
            spec,
            site,
            node,
            vmid,
            why,
        } => {
            if let Some(s) = by_name.get(spec.as_str()) {
                match vm_changes(view, s, site, node, *vmid, why).await {
                    Ok((fields, also)) => {
                        let at = (s.kind().noun(), site.as_str(), node.as_str(), *vmid);
                        change.text = update_line(spec, at, &fields, &also);
                        if fields.iter().any(|f| f.needs_restart) {
                            change.text.push_str(&restart_clause(s));
                        }
                        change.fields = fields;
                        change.also = also;
                    }
                    Err(e) => errors.push(format!(
                        "{spec}: cannot read {}'s config on {site}/{node} to say what its \
                         update changes: {e}",
                        s.kind().named(*vmid)
                    )),
                }
            }
        }
        Action::AdoptByConsent {
            spec,
            site,
            node,
            vmid,
        } => {
            if let Some(s) = by_name.get(spec.as_str()) {
                match adoption_changes(view, s, site, node, *vmid).await {
                    Ok(fields) => {
                        let then: Vec<String> = fields.iter().map(Field::to_string).collect();
                        change.text.push_str(&if then.is_empty() {
                            "; nothing else differs".to_string()
                        } else {
                            format!("; then: {}", then.join(", "))
                        });
                        change.fields = fields;
                    }
                    Err(e) => errors.push(format!(
                        "{spec}: cannot read {}'s config on {site}/{node} to say what its \
                         adoption changes: {e}",
                        s.kind().named(*vmid)
                    )),
                }
            }
        }
        // The run checks a create before it sends anything: what it would refuse, so does
        // the plan.
        Action::Create { spec, site, node } => {
            create_change(
                view,
                by_name,
                reads,
                (spec, site, node),
                &mut change,
                errors,
            )
            .await;
        }
        Action::Remove { .. } | Action::Forget { .. } => {
            change.removal = Some(if scope.from_files {
                change.text.push_str(
                    " [not among the --specs files: the source may still hold this spec; \
                     name specs instead (proxsync plan NAME...) to leave the others out]",
                );
                "notInSpecFiles"
            } else {
                "specRemoved"
            });
        }
        _ => {}
    }
    change
}

/// A create's line: the values it sets, then the run's own pre-flight on the node the run
/// makes it on (a FreeMemory member's placed one, not the stand-in its index gives the spec).
async fn create_change(
    view: &PlanView,
    by_name: &crate::util::fnv::FnvHashMap<&str, &Spec>,
    reads: &CreateReads,
    (spec, site, node): (&String, &String, &String),
    change: &mut Change,
    errors: &mut Vec<String>,
) {
    let (Some(s), Some(ctx)) = (by_name.get(spec.as_str()), view.sites.get(site)) else {
        return;
    };
    let placed = (s.node != *node).then(|| Spec {
        node: node.clone().into(),
        ..Spec::clone(s)
    });
    let s = placed.as_ref().unwrap_or(s);
    match create_values(s) {
        Ok(fields) if !fields.is_empty() => {
            let sets: Vec<String> = fields
                .iter()
                .map(|f| {
                    let unit = f.unit.map(|u| format!(" {u}")).unwrap_or_default();
                    let value = value_text(&f.field, f.new.as_deref().unwrap_or_default());
                    format!("{}={}{unit}", f.field, quoted_if_needed(&value))
                })
                .collect();
            change.text.push_str(&format!("; sets {}", sets.join(", ")));
            change.fields = fields;
        }
        Ok(_) => {}
        Err(e) => errors.push(format!("{spec}: {e}")),
    }
    preflight(view, reads, ctx, s, change, errors).await;
}

/// The run's pre-flight of a create of `spec`, for the plan: a refusal marks the create's line
/// and is an error; a read the plan's token cannot make is an error only.
async fn preflight(
    view: &PlanView,
    reads: &CreateReads,
    site: &crate::execute::SiteCtx,
    spec: &Spec,
    change: &mut Change,
    errors: &mut Vec<String>,
) {
    let Some(e) = crate::execute::create_refusal(
        &view.views,
        &reads.facts,
        &view.images,
        &view.install_id,
        site,
        spec,
    )
    .await
    else {
        return;
    };
    let name = &spec.name;
    // Its image is downloaded first (the `+ image` line): its volume's absence is no refusal.
    if let crate::spec::Image::Managed(image) = spec.image()
        && e.category == Category::ImageNotFound
        && reads
            .coming
            .contains(&(image.clone(), spec.node.to_string()))
    {
        change
            .text
            .push_str(&format!(" (once PVE has downloaded image {image})"));
        return;
    }
    // A read the plan's token may not make (a read-only token, a site gone quiet) is no
    // refusal of the run's: the plan is incomplete all the same.
    let unread = [
        Category::AuthenticationError,
        Category::PermissionDenied,
        Category::NetworkError,
    ];
    if unread.contains(&e.category) {
        errors.push(format!(
            "{name}: cannot check the create before it is made: {}: {}",
            e.category, e.message
        ));
    } else {
        change.text.push_str(&format!(
            " [refused before anything is made: {}]",
            e.category
        ));
        errors.push(format!(
            "{name}: the create would be refused before anything is made: {}: {}",
            e.category, e.message
        ));
    }
}

/// Builds the report of `view` for `specs` (the set the plan was made of): reads the config of
/// every VM an update or adoption would change (two GETs each), nothing else.
pub(crate) async fn build(view: &PlanView, specs: &SpecSet, scope: &Scope<'_>) -> Report {
    let by_name = crate::engine::specs_by_name(specs);
    let in_scope = |name: Option<&str>| match (scope.names, name) {
        (None, _) => true,
        (Some(names), Some(n)) => names.contains(n),
        (Some(_), None) => false,
    };
    let kinds = crate::engine::removed_kinds(&view.plan.actions, &view.views, &view.records);
    let mut report = Report::default();
    let (images, coming) = match scope.names {
        None => images::image_lines(view, specs, &mut report.errors).await,
        // `plan NAME...` shows the named specs alone; their creates still know what comes.
        Some(_) => {
            let (_, coming) = images::image_lines(view, specs, &mut Vec::new()).await;
            (Vec::new(), coming)
        }
    };
    report.images = images;
    let reads = CreateReads {
        facts: crate::execute::NodeFacts::default(),
        coming,
    };
    for action in view.plan.actions.iter().filter(|a| in_scope(a.spec())) {
        let errors = &mut report.errors;
        let change = change_of(view, &by_name, &kinds, scope, action, &reads, errors).await;
        report.changes.push(change);
    }
    let now = crate::util::clock::now_ms();
    // A spec's guest is of its kind; a spec not at hand, of its record's.
    let kind_of = |name: &str| {
        by_name
            .get(name)
            .map(|s| s.kind())
            .or_else(|| view.records.get(name).map(|r| r.kind))
            .unwrap_or_default()
    };
    for (name, verdict) in view.plan.verdicts.iter() {
        if !in_scope(Some(name)) || matches!(verdict, Verdict::UpToDate { .. } | Verdict::Acting) {
            continue;
        }
        report.held.push(Held {
            spec: name.to_string(),
            verdict: verdict.clone(),
            text: VerdictLine {
                verdict,
                kind: kind_of(name),
                rec: view.records.get(name.as_str()),
                now_ms: now,
            }
            .to_string(),
        });
    }
    // Old template versions kept (no verdict: their specs are gone).
    for (name, why) in &view.plan.templates_kept {
        if in_scope(Some(name)) {
            report.kept.push(Kept {
                spec: name.clone(),
                text: why.to_string(),
            });
        }
    }
    if scope.names.is_none() {
        report.orphans = view.plan.orphans.clone();
        report.refused = view.plan.refused.iter().map(ToString::to_string).collect();
        // What the daemon would refuse is no plan to merge on: a valve's refusal fails it.
        report
            .errors
            .extend(view.plan.refused.iter().filter_map(refusal_error));
    }
    // The sites this plan depends on: every configured one, or the named specs' sites.
    let wanted: Option<BTreeSet<&str>> = scope.names.map(|names| {
        names
            .iter()
            .filter_map(|n| by_name.get(n.as_str()))
            .map(|s| s.site.as_str())
            .chain(
                names
                    .iter()
                    .filter_map(|n| view.records.get(n))
                    .map(|r| r.site.as_str()),
            )
            .collect()
    });
    for (site, v) in &view.views {
        if let Some(error) = &v.error
            && wanted.as_ref().is_none_or(|w| w.contains(site.as_str()))
        {
            report
                .errors
                .push(format!("site {site} could not be read: {error}"));
        }
    }
    report
}

/// The error a refusal of the plan's makes, when the daemon would refuse what the plan shows:
/// a safety valve holding the cycle's removals or adoptions back, or a site's listing that
/// could not be read completely. What is held back by hand (suspended, observed) is none.
fn refusal_error(refused: &crate::plan::Refused) -> Option<String> {
    use crate::plan::Refused;
    match refused {
        Refused::Deletes { .. } => Some(
            "a safety valve refuses this plan's removals (the `refused:` line above): the daemon \
             applies none of them until a person settles it"
                .to_string(),
        ),
        Refused::AdoptionsHeld { .. } => Some(
            "more adoptions by consent than [reconcile] max_adopt_per_cycle (the `refused:` line \
             above): the daemon takes none of them"
                .to_string(),
        ),
        Refused::ListingIncomplete { site, .. } => Some(format!(
            "site {site}'s listing could not be read completely (the `refused:` line above): \
             its removals wait"
        )),
        Refused::HandsOff(_) => None,
    }
}

/// The errors of the inputs themselves, which make `plan` exit 1 whatever it finds: invalid
/// specs (named, or all when no names), a spec set not read completely, a name that is no
/// spec, a refused commit.
pub(crate) fn input_errors(
    specs: &SpecSet,
    names: Option<&BTreeSet<String>>,
    refused: Option<&crate::source::verify::Refusal>,
) -> Vec<String> {
    let mut errors = Vec::new();
    if let Some(r) = refused {
        errors.push(format!(
            "commit {} was refused ({}): this plan is of the last verified commit, not of the \
             branch tip",
            r.commit, r.reason
        ));
    }
    if !specs.is_complete() {
        errors.push(
            "the spec set could not be read completely (see the errors above): no removal is \
             planned, and what is unreadable is not planned at all"
                .to_string(),
        );
    }
    let invalid = specs.invalid_names();
    let invalid: Vec<&str> = match names {
        None => invalid.into_iter().collect(),
        Some(names) => invalid.into_iter().filter(|n| names.contains(*n)).collect(),
    };
    if !invalid.is_empty() {
        errors.push(format!(
            "invalid spec(s): {} (see the errors above; proxsync validate lists them); their \
             VMs are left as they are",
            invalid.join(", ")
        ));
    }
    if let Some(names) = names {
        let known: BTreeSet<&str> = specs
            .specs
            .iter()
            .map(|s| s.name.as_str())
            .chain(specs.invalid_names())
            .collect();
        for n in names.iter().filter(|n| !known.contains(n.as_str())) {
            errors.push(format!(
                "no such spec: {n} (no spec has metadata.name {n}; proxsync status lists them)"
            ));
        }
    }
    errors
}

/// What an update of VM `vmid` changes: its config field by field (as the converge computes
/// it from the config and pending values read now), its boot disk, its power, and the parts
/// compared only when applied.
async fn vm_changes(
    view: &PlanView,
    spec: &Spec,
    site: &str,
    node: &str,
    vmid: u32,
    why: &[String],
) -> Result<(Vec<Field>, Vec<String>), String> {
    let ctx = view
        .sites
        .get(site)
        .ok_or_else(|| format!("site {site} is not configured"))?;
    let cfg = ctx
        .client
        .vm_config(node, spec.kind(), vmid)
        .await
        .map_err(|e| e.to_string())?;
    let pending = ctx
        .client
        .vm_pending(node, spec.kind(), vmid)
        .await
        .map_err(|e| e.to_string())?;
    let rec = view
        .records
        .get(spec.name.as_str())
        .cloned()
        .unwrap_or_default();
    // Without a key file (a plan never makes one) no marker verifies: the run makes the key
    // and re-signs, so a throwaway key shows the same.
    let key = view
        .marker_key
        .clone()
        .unwrap_or_else(|| crate::ownership::MarkerKey::from_bytes([0; 32]));
    // As a converge does first: the site as observed, the VM's marker verified (the record
    // vouching for it when the key is not there).
    let fields = compared(view, spec, site, vmid, &key, &rec, &cfg, &pending)?;
    Ok((fields, also(spec, why)))
}

/// What the converge right after an adoption by consent would change, besides the marker and
/// the tag the adoption writes: the VM's config as it will be then (a throwaway uid in the
/// marker), compared as a converge compares it.
async fn adoption_changes(
    view: &PlanView,
    spec: &Spec,
    site: &str,
    node: &str,
    vmid: u32,
) -> Result<Vec<Field>, String> {
    let ctx = view
        .sites
        .get(site)
        .ok_or_else(|| format!("site {site} is not configured"))?;
    let mut cfg =
        (ctx.client.vm_config(node, spec.kind(), vmid).await).map_err(|e| e.to_string())?;
    let pending =
        (ctx.client.vm_pending(node, spec.kind(), vmid).await).map_err(|e| e.to_string())?;
    let key = view
        .marker_key
        .clone()
        .unwrap_or_else(|| crate::ownership::MarkerKey::from_bytes([0; 32]));
    let rec = SpecRecord {
        uid: "preview".into(),
        ..Default::default()
    };
    let marker =
        crate::ownership::Marker::signed(&key, &view.install_id, &spec.name, &rec.uid, vmid);
    let description = marker.replace_in(cfg.description().unwrap_or(""));
    let mut tags = cfg.tags();
    tags.push(crate::ownership::ownership_tag(&view.install_id));
    cfg.values.insert("description".into(), description);
    cfg.values.insert("tags".into(), tags.join(";"));
    compared(view, spec, site, vmid, &key, &rec, &cfg, &pending)
}

/// What a converge of VM `vmid` would change from `cfg` and `pending`, field by field, its
/// marker verified first as a converge verifies it (the record `rec` vouching for it).
// Many arguments because: what one read of the VM gave, and the record and key it is judged with.
#[allow(clippy::too_many_arguments)]
fn compared(
    view: &PlanView,
    spec: &Spec,
    site: &str,
    vmid: u32,
    key: &crate::ownership::MarkerKey,
    rec: &SpecRecord,
    cfg: &crate::pve::types::VmConfig,
    pending: &[crate::pve::types::PendingEntry],
) -> Result<Vec<Field>, String> {
    let checked = view
        .views
        .get(site)
        .ok_or_else(|| format!("site {site} was not observed"))
        .and_then(|v| crate::gate::site::checked(v).map_err(String::from))?;
    let ours = crate::gate::identity::verify(
        &checked,
        key,
        &view.install_id,
        spec.kind(),
        vmid,
        cfg.description(),
        Some(&spec.name),
        Some(&rec.uid),
    )
    .map_err(|why| why.to_string())?;
    let mut changes =
        crate::render::preview_config(key, &view.install_id, spec, rec, &ours, cfg, pending)?;
    changes.extend(crate::render::preview_disk(spec, rec, cfg));
    let power = view
        .views
        .get(site)
        .and_then(|v| v.vms.get(&vmid))
        .map(|vm| vm.power);
    // A stopped guest takes every change at once; a running one keeps some for its next start.
    let running = power == Some(Power::Running);
    let mut fields: Vec<Field> = changes
        .into_iter()
        .map(|c| {
            let waits = running
                && spec.power_state != PowerState::Stopped
                && crate::render::current::reported_pending(&c.key);
            let f = field(c);
            // A disk's size grows live (`resize`); its other options wait.
            let needs_restart = waits && f.unit != Some("GiB");
            Field { needs_restart, ..f }
        })
        .collect();
    fields.extend(destroyed(spec, vmid, rec, cfg, pending));
    match (spec.power_state, power) {
        (PowerState::Running, Some(Power::Stopped)) => {
            fields.push(power_field("stopped", "running"))
        }
        (PowerState::Stopped, Some(Power::Running)) => {
            fields.push(power_field("running", "stopped"))
        }
        _ => {}
    }
    Ok(fields)
}

/// The disks a converge destroys for `destroyDisks`, each with its volume, by the run's own
/// decision (`execute::disks::destroy_steps`); none on a protected VM, which holds them.
fn destroyed(
    spec: &Spec,
    vmid: u32,
    rec: &SpecRecord,
    cfg: &crate::pve::types::VmConfig,
    pending: &[crate::pve::types::PendingEntry],
) -> Vec<Field> {
    let Some(vm_spec) = spec.vm() else {
        return Vec::new();
    };
    let now = crate::util::clock::now_ms();
    let steps =
        crate::execute::disks::destroy_steps(spec.kind(), vmid, vm_spec, rec, cfg, pending, now);
    let destroys: Vec<(String, String)> = (steps.into_iter())
        .filter_map(|(slot, volume, step)| step.ok()?.destroy.and(Some((slot, volume?))))
        .collect();
    let slots: Vec<String> = destroys.iter().map(|(slot, _)| slot.clone()).collect();
    let protection = crate::execute::protection_of(spec, cfg);
    if crate::gate::volume::drive_removal(spec.kind(), vmid, protection, &[], &slots).is_err() {
        return Vec::new();
    }
    (destroys.into_iter())
        .map(|(slot, volume)| Field {
            field: slot,
            old: Some(volume),
            new: None,
            unit: None,
            needs_restart: false,
            destroys_data: true,
        })
        .collect()
}

fn power_field(old: &str, new: &str) -> Field {
    Field {
        field: "power".into(),
        old: Some(old.into()),
        new: Some(new.into()),
        unit: None,
        needs_restart: false,
        destroys_data: false,
    }
}

/// A config change as the plan shows it: memory in MiB, a disk's size in GiB.
fn field(c: ConfigChange) -> Field {
    let disk = crate::pve::values::is_drive_key(&c.key)
        && c.old.as_deref().is_some_and(|v| v.parse::<u64>().is_ok());
    if disk {
        let gib = |v: Option<String>| {
            v.and_then(|v| v.parse::<u64>().ok())
                .map(|b| format!("{}", b as f64 / (1u64 << 30) as f64))
        };
        return Field {
            field: format!("disk {}", c.key),
            old: gib(c.old),
            new: gib(c.new),
            unit: Some("GiB"),
            needs_restart: false,
            destroys_data: false,
        };
    }
    let unit = (c.key == "memory").then_some("MiB");
    let old = if c.key == "memory" {
        // `current=1024,...` in newer releases: the size is the first part.
        c.old.map(|m| {
            m.trim_start_matches("current=")
                .split(',')
                .next()
                .unwrap_or_default()
                .to_string()
        })
    } else {
        c.old
    };
    Field {
        needs_restart: false,
        destroys_data: false,
        field: c.key,
        old,
        new: c.new,
        unit,
    }
}

/// What an update brings in line beyond the config, disk and power: named only, as the run
/// compares these when it applies the spec (cloud-init, HA, pool, `disks`, a reboot).
fn also(spec: &Spec, why: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if why.iter().any(|w| w == "spec changed") {
        let vm = spec.vm();
        if vm.is_some_and(|vm| vm.cloud_init.is_some() || vm.user_data.is_some()) {
            out.push("cloud-init".to_string());
        }
        if spec.ha.is_some() {
            out.push("ha".to_string());
        }
        if spec.hardware.pool.is_some() {
            out.push("pool".to_string());
        }
        if vm.is_some_and(|vm| vm.disks.is_some() || !vm.destroy_disks.is_empty()) {
            out.push("disks".to_string());
        }
    }
    for w in why {
        match w.as_str() {
            "ha" if !out.iter().any(|o| o == "ha") => out.push("ha".into()),
            "reboot" => out.push("reboot to apply what waits for the next start".into()),
            _ => {}
        }
    }
    out
}

/// `~ update  web-01: VM 100 on lab/pve1: memory 1024 -> 2048 MiB, cores 1 -> 2, ...` (a
/// container's: `container 100`).
fn update_line(
    spec: &str,
    (noun, site, node, vmid): (&str, &str, &str, u32),
    fields: &[Field],
    also: &[String],
) -> String {
    let mut parts: Vec<String> = fields.iter().map(Field::to_string).collect();
    if !also.is_empty() {
        parts.push(format!("checks {}", also.join(", ")));
    }
    if parts.is_empty() {
        parts.push(format!(
            "records the new spec (nothing on the {noun} differs)"
        ));
    }
    format!(
        "~ update  {spec}: {noun} {vmid} on {site}/{node}: {}",
        parts.join(", ")
    )
}

/// The values a create of `spec` sets, as the run renders them (`render::vm::create_params`,
/// `render::container::create_params`), but its marker and tags. A clone takes its template's
/// disks, then the spec's hardware; a name resolved at create time may be either, so only the
/// hardware and the disk's size are shown for both.
fn create_values(spec: &Spec) -> Result<Vec<Field>, String> {
    use crate::render::vm::Boot;
    use crate::spec::{Guest, Image, VolumeKind};
    let params = match &spec.guest {
        Guest::Container(ct) => {
            crate::render::container::create_params(spec, ct, String::new(), &[])
        }
        Guest::Vm(vm) => {
            let boot = match &vm.image {
                Image::Volume {
                    volume,
                    kind: VolumeKind::Iso,
                    ..
                } => Boot::Installer(volume),
                Image::Volume { volume, .. } => Boot::Import(volume),
                // Its drives are left out below: any valid volume renders the rest.
                Image::Template { .. }
                | Image::Name(_)
                | Image::Managed(_)
                | Image::Built { .. }
                | Image::Oci { .. }
                | Image::Existing => Boot::Import("template:clone"),
            };
            crate::render::vm::create_params(spec, vm, String::new(), &[], boot)
        }
    }
    .map_err(|e| e.to_string())?;
    // A managed image's volume is resolved when the guest is made: its drives are left out too.
    let cloned = matches!(
        spec.image(),
        Image::Template { .. } | Image::Name(_) | Image::Managed(_) | Image::Built { .. }
    );
    let mut out = Vec::new();
    for (key, value) in params.entries() {
        let drive = crate::pve::values::is_drive_key(key) || key == "boot" || key == "serial0";
        if matches!(key, "description" | "tags") || (cloned && drive) {
            continue;
        }
        let value = match key {
            // Public keys, but a line's worth each: counted.
            "ssh-public-keys" => format!("{} key(s)", value.lines().count()),
            _ => value.to_string(),
        };
        out.push(Field {
            unit: (key == "memory").then_some("MiB"),
            field: key.to_string(),
            old: None,
            new: Some(value),
            needs_restart: false,
            destroys_data: false,
        });
    }
    if cloned && let Some(vm) = spec.vm() {
        out.push(Field {
            field: "disk".into(),
            old: None,
            new: Some(format!("{}", vm.disk_bytes as f64 / (1u64 << 30) as f64)),
            unit: Some("GiB"),
            needs_restart: false,
            destroys_data: false,
        });
    }
    Ok(out)
}

/// `value`, in double quotes when it holds a comma, a space or a quote (a NIC's
/// `virtio,bridge=vmbr0`), so a create's `sets` list reads one value per comma.
fn quoted_if_needed(value: &str) -> String {
    if value.contains([',', ' ', '"']) {
        format!("\"{}\"", value.replace('"', "\\\""))
    } else {
        value.to_string()
    }
}

/// What follows an update that waits for the guest's next start, by the spec's
/// `rebootPolicy`: who restarts it, and when.
fn restart_clause(spec: &Spec) -> String {
    let noun = spec.kind().noun();
    let restart = match spec.reboot.mode {
        RebootMode::Never => format!(
            "; needs a restart: rebootPolicy Never leaves it to you (RebootPending until the \
             {noun} is restarted)"
        ),
        RebootMode::IfNeeded => {
            format!("; needs a restart: proxsync restarts the {noun} (rebootPolicy IfNeeded)")
        }
        RebootMode::Window => format!(
            "; needs a restart: proxsync restarts the {noun} in its maintenance window ({})",
            spec.reboot
                .window
                .as_ref()
                .map_or("none set", |w| w.text.as_str())
        ),
    };
    restart + &health_clause(spec)
}

/// What guards a restart of a guest with `health`: the checks that must pass after it.
fn health_clause(spec: &Spec) -> String {
    use crate::spec::health::{RollbackWhen, SnapshotWhen};
    let guard = spec
        .change_policy
        .as_deref()
        .filter(|c| c.snapshot != SnapshotWhen::Never);
    let snapshot = match guard {
        Some(c) if c.snapshot == SnapshotWhen::IfPossible => {
            "; a snapshot first (changePolicy; none where the storage cannot take one)"
        }
        Some(_) => "; a snapshot first (changePolicy; held where the storage cannot take one)",
        None => "",
    };
    let Some(h) = spec.health.as_deref() else {
        return snapshot.to_string();
    };
    let after = match guard {
        Some(c) if c.rollback == RollbackWhen::OnUnhealthy => {
            ", or it is rolled back to the snapshot"
        }
        _ => ", or it is Unhealthy",
    };
    format!(
        "{snapshot}; then its health checks ({}) must pass within {}s of its start{after}",
        proxsync_core::words::health::check_list(h),
        h.timeout_secs
    )
}

/// The specs of a report's scope that its names select, for `plan NAME...`.
pub(crate) fn names(list: &[String]) -> Option<BTreeSet<String>> {
    (!list.is_empty()).then(|| list.iter().cloned().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::GuestKind;

    /// A container's create lists what its create sends, its keys counted and never its
    /// password (set from a file, outside the rendered values); a VM's clone, its hardware and
    /// disk size but not the drives the template brings.
    #[test]
    fn a_create_lists_what_it_sets_and_no_secret() {
        let yaml = "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: dns-01\n\
                    spec:\n  forProvider:\n    site: s\n    node: pve1\n    template: \
                    local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\n    password: {file: \
                    /nonexistent/ct-root}\n    sshPublicKeys: [\"ssh-ed25519 AAAA a@b\", \
                    \"ssh-ed25519 BBBB c@d\"]\n";
        let (specs, diags) = crate::spec::parse_file("t.yaml", yaml.as_bytes());
        assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
        let fields = create_values(&specs[0]).unwrap();
        let shown: Vec<String> = fields
            .iter()
            .map(|f| format!("{}={}", f.field, f.new.as_deref().unwrap_or_default()))
            .collect();
        assert!(shown.contains(&"hostname=dns-01".to_string()), "{shown:?}");
        assert!(
            shown.contains(&"ssh-public-keys=2 key(s)".to_string()),
            "{shown:?}"
        );
        assert!(
            !shown
                .iter()
                .any(|s| s.starts_with("password") || s.starts_with("description")),
            "{shown:?}"
        );
        let vm = crate::spec::test_spec("");
        let fields = create_values(&vm).unwrap();
        assert!(
            fields
                .iter()
                .all(|f| !crate::pve::values::is_drive_key(&f.field) && f.field != "boot"),
            "{fields:?}"
        );
        assert!(fields.iter().any(|f| f.field == "disk"), "{fields:?}");
        assert_eq!(
            quoted_if_needed("virtio,bridge=vmbr0"),
            "\"virtio,bridge=vmbr0\""
        );
        assert_eq!(quoted_if_needed("a\"b c"), "\"a\\\"b c\"");
    }

    #[test]
    fn an_update_without_differences_names_the_container() {
        assert_eq!(
            update_line("dns", ("container", "lab", "pve1", 105), &[], &[]),
            "~ update  dns: container 105 on lab/pve1: records the new spec (nothing on the \
             container differs)"
        );
    }

    #[test]
    fn fields_read_as_old_to_new_with_units() {
        let f = field(ConfigChange {
            key: "memory".into(),
            old: Some("1024".into()),
            new: Some("2048".into()),
        });
        assert_eq!(f.to_string(), "memory 1024 -> 2048 MiB");
        let f = field(ConfigChange {
            key: "cores".into(),
            old: None,
            new: Some("2".into()),
        });
        assert_eq!(f.to_string(), "cores unset -> 2");
        let f = field(ConfigChange {
            key: "scsi0".into(),
            old: Some((8u64 << 30).to_string()),
            new: Some((20u64 << 30).to_string()),
        });
        assert_eq!(f.to_string(), "disk scsi0 8 -> 20 GiB");
        let f = field(ConfigChange {
            key: "net1".into(),
            old: Some("virtio=BC:24:11:00:00:01,bridge=vmbr0".into()),
            new: None,
        });
        assert_eq!(
            f.to_string(),
            "net1 virtio=BC:24:11:00:00:01,bridge=vmbr0 -> removed"
        );
        assert_eq!(
            power_field("stopped", "running").to_string(),
            "power stopped -> running"
        );
    }

    /// Each orphan line names its guest's kind; the JSON says its version and each orphan's
    /// `kind` (the words of a `KindChanged` verdict's `found`).
    #[test]
    fn orphans_are_named_by_kind_and_the_json_says_its_version() {
        let orphan = |vmid, kind| crate::plan::Orphan {
            site: "lab".into(),
            vmid,
            kind,
            node: "pve1".into(),
            name: None,
            power: "stopped".into(),
            first_seen_ms: 0,
            disposition: crate::plan::OrphanDisposition::Reported,
            duplicate_of: None,
        };
        let r = Report {
            orphans: vec![orphan(105, GuestKind::Qemu), orphan(120, GuestKind::Lxc)],
            ..Default::default()
        };
        assert_eq!(
            r.render(),
            "! orphan VM 105 on lab/pve1 (stopped): reported\n\
             ! orphan container 120 on lab/pve1 (stopped): reported\n\
             no changes\n"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["version"], 3);
        assert_eq!(v["orphans"][0]["kind"], "qemu");
        assert_eq!(v["orphans"][1]["kind"], "lxc");
        let found = serde_json::to_value(Verdict::KindChanged {
            vmid: 120,
            found: GuestKind::Lxc,
        })
        .unwrap();
        assert_eq!(found["found"], v["orphans"][1]["kind"]);
    }

    #[test]
    fn exit_codes() {
        let mut r = Report::default();
        assert_eq!(r.exit_code(), 0);
        r.changes.push(Change {
            action: Action::Forget { spec: "a".into() },
            fields: vec![],
            also: vec![],
            removal: None,
            text: String::new(),
        });
        assert_eq!(r.exit_code(), 2);
        r.errors.push("site lab could not be read".into());
        assert_eq!(r.exit_code(), 1);
    }

    #[test]
    fn the_summary_counts_changes_by_what_they_do() {
        let change = |action| Change {
            action,
            fields: vec![],
            also: vec![],
            removal: None,
            text: String::new(),
        };
        let remove = |release| Action::Remove {
            spec: "a".into(),
            site: "lab".into(),
            node: "pve1".into(),
            vmid: 100,
            release,
        };
        let create = Action::Create {
            spec: "b".into(),
            site: "lab".into(),
            node: "pve1".into(),
        };
        let r = Report {
            changes: vec![
                change(remove(false)),
                change(create.clone()),
                change(create),
                change(remove(true)),
            ],
            ..Default::default()
        };
        assert_eq!(r.summary(), "2 to create, 1 to delete, 1 to release");
        assert!(
            r.render()
                .ends_with("4 change(s): 2 to create, 1 to delete, 1 to release\n")
        );
    }

    /// What a spec or PVE says cannot leave the diff block or become markup in the comment:
    /// the fence outgrows any run of backticks, and the heading and errors are escaped.
    #[test]
    fn markdown_keeps_hostile_words_as_text() {
        let r = Report {
            changes: vec![Change {
                action: Action::Forget { spec: "a".into() },
                fields: vec![],
                also: vec![],
                removal: None,
                text: "~ update  a: ````\n# owned <script>alert(1)</script>\u{1b}[2J".into(),
            }],
            errors: vec![
                "site lab: <img src=x onerror=alert(1)> [x](javascript:alert(1)) `".into(),
            ],
            ..Default::default()
        };
        let md = r.markdown();
        assert!(
            md.starts_with("### proxsync plan: 1 change\\(s\\): 1 to forget\n\n`````diff\n"),
            "{md}"
        );
        assert!(md.contains("\n`````\n"), "{md}");
        assert!(!md.contains('\u{1b}'), "{md}");
        assert!(
            md.contains(
                "- site lab: &lt;img src=x onerror=alert\\(1\\)&gt; \\[x\\]\\(javascript:alert\\(1\\)\\) \\`"
            ),
            "{md}"
        );
        assert!(md.contains("**This plan is incomplete (exit 1):**"), "{md}");
    }

    /// With no change and errors the plan has no last line: the heading says it is
    /// incomplete, and a held spec's line stays in the block.
    #[test]
    fn markdown_heading_of_an_incomplete_plan_without_changes() {
        let r = Report {
            held: vec![Held {
                spec: "web-01".into(),
                verdict: Verdict::BackingOff { until_ms: 5 },
                text: "backing off".into(),
            }],
            errors: vec!["site lab could not be read".into()],
            ..Default::default()
        };
        let md = r.markdown();
        assert!(
            md.starts_with(
                "### proxsync plan: incomplete\n\n```diff\n! web-01: backing off\n```\n"
            ),
            "{md}"
        );
    }

    /// A spec the daemon is not done with is never "no changes": held by a person's choice
    /// it is (exit 0); backing off, it is not (exit 2).
    #[test]
    fn an_unsatisfied_spec_is_never_no_changes() {
        let held = |verdict| Held {
            spec: "web-01".into(),
            verdict,
            text: "why".into(),
        };
        let mut r = Report::default();
        r.held.push(held(Verdict::Observed {
            vmid: None,
            drift: vec![],
            renamed_from: None,
        }));
        assert_eq!(r.exit_code(), 0);
        assert!(
            r.render()
                .ends_with("no changes; 1 spec(s) held by hand (above)\n")
        );
        r.held.push(held(Verdict::BackingOff { until_ms: 5 }));
        assert_eq!(r.exit_code(), 2);
        let text = r.render();
        assert!(
            text.ends_with("nothing to send now; 1 spec(s) not satisfied (above)\n"),
            "{text}"
        );
        assert!(!text.contains("no changes"), "{text}");
    }
}
