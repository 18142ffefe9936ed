//! The set-wide rule of `proxsync.io/renamed-from`: a rename takes the VM of a spec the same
//! commit removes, into one spec.
//!
//! An annotation naming a spec that is still in the repository (itself included), or a name
//! several specs are renamed from, cannot be applied: the new spec would take over the old
//! spec's VM while the old spec still wants it, or two specs would claim one VM. Neither the
//! annotated specs nor the specs they name are applied until it is fixed: they are invalid (an
//! error tied to each name), so their VMs are left exactly as they are and nothing is counted as
//! removed. Down a chain (`b` renamed from `a`, `c` from `b`), the name a held spec is renamed
//! from is held too.

use std::collections::{BTreeMap, BTreeSet};

use super::{Diagnostic, Spec};

/// A `proxsync.io/renamed-from` that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict<'a> {
    /// `spec` is renamed from `from`, which is still in the repository (or is `spec` itself).
    Exists {
        /// The annotated spec.
        spec: &'a Spec,
        /// The name it is renamed from.
        from: &'a str,
    },
    /// Several specs are renamed from the one removed name `from`.
    Shared {
        /// The specs renamed from `from`, in the order given.
        specs: Vec<&'a Spec>,
        /// The removed name they are all renamed from.
        from: &'a str,
    },
}

/// The annotations of `specs` that cannot be applied; `exists` says whether a name is a spec
/// of the repository (valid or not).
pub fn conflicts<'a>(
    specs: impl IntoIterator<Item = &'a Spec>,
    exists: impl Fn(&str) -> bool,
) -> Vec<Conflict<'a>> {
    let mut out = Vec::new();
    let mut by_from: BTreeMap<&str, Vec<&Spec>> = BTreeMap::new();
    for spec in specs {
        let Some(from) = spec.renamed_from.as_deref() else {
            continue;
        };
        if from == spec.name || exists(from) {
            out.push(Conflict::Exists { spec, from });
        } else {
            by_from.entry(from).or_default().push(spec);
        }
    }
    for (from, specs) in by_from {
        if specs.len() > 1 {
            out.push(Conflict::Shared { specs, from });
        }
    }
    out
}

/// Every name the conflicts hold: the annotated specs, the names they are renamed from, and
/// down a chain the names a held spec of `specs` is renamed from.
pub fn held<'a>(
    conflicts: &[Conflict<'a>],
    specs: impl IntoIterator<Item = &'a Spec>,
) -> BTreeSet<&'a str> {
    let mut held = BTreeSet::new();
    for c in conflicts {
        match c {
            Conflict::Exists { spec, from } => held.extend([spec.name.as_str(), from]),
            Conflict::Shared { specs, from } => {
                held.insert(*from);
                held.extend(specs.iter().map(|s| s.name.as_str()));
            }
        }
    }
    let renamed_from: BTreeMap<&str, &str> = specs
        .into_iter()
        .filter_map(|s| Some((s.name.as_str(), s.renamed_from.as_deref()?)))
        .collect();
    let mut next: Vec<&str> = held.iter().copied().collect();
    while let Some(name) = next.pop() {
        if let Some(from) = renamed_from.get(name)
            && held.insert(from)
        {
            next.push(from);
        }
    }
    held
}

/// The errors of [`conflicts`] over a set, each tied to the name it holds: at each annotated
/// spec what is wrong and what would be valid, at each spec it names that it waits, and for a
/// held name no file defines (a removed spec whose VM stays as it is), a note at the spec
/// renamed from it. Returns them with the held names.
// Long because: one diagnostic per kind of conflict, each with its own wording and position.
pub(crate) fn check<'a>(
    specs: &[&'a Spec],
    exists: impl Fn(&str) -> bool,
) -> (Vec<Diagnostic>, BTreeSet<&'a str>) {
    let found = conflicts(specs.iter().copied(), &exists);
    if found.is_empty() {
        return (Vec::new(), BTreeSet::new());
    }
    let held = held(&found, specs.iter().copied());
    let by_name: BTreeMap<&str, &Spec> = specs.iter().map(|s| (s.name.as_str(), *s)).collect();
    let at = |s: &Spec| format!("{}:{}:{}", s.file, s.pos.line, s.pos.column);
    let annotation = super::RENAMED_FROM;
    let mut diags = Vec::new();
    for c in &found {
        match c {
            Conflict::Exists { spec, from } if *from == spec.name => diags.push(
                Diagnostic::error(
                    &spec.file,
                    spec.pos,
                    format!(
                        "metadata.annotations.{annotation}: {from} names this spec itself; remove \
                         the annotation"
                    ),
                )
                .for_spec(Some(&spec.name)),
            ),
            Conflict::Exists { spec, from } => {
                let there = by_name
                    .get(from)
                    .map(|s| format!(" ({})", at(s)))
                    .unwrap_or_default();
                diags.push(
                    Diagnostic::error(
                        &spec.file,
                        spec.pos,
                        format!(
                            "metadata.annotations.{annotation}: {from} names spec {from}, which is \
                             still in the repository{there}; a rename takes the VM of a spec the \
                             same commit removes. Neither spec is applied until this is fixed: \
                             remove spec {from} to rename it, or remove the annotation (a rename \
                             done before, or a new VM)"
                        ),
                    )
                    .for_spec(Some(&spec.name)),
                );
                if let Some(old) = by_name.get(from) {
                    diags.push(
                        Diagnostic::error(
                            &old.file,
                            old.pos,
                            format!(
                                "spec {from} is named by {annotation} of spec {} ({}): it is not \
                                 applied, and its VM is left as it is, until that is fixed",
                                spec.name,
                                at(spec)
                            ),
                        )
                        .for_spec(Some(from)),
                    );
                }
            }
            Conflict::Shared {
                specs: renamed,
                from,
            } => {
                let all: Vec<String> = renamed
                    .iter()
                    .map(|s| format!("{} ({})", s.name, at(s)))
                    .collect();
                for spec in renamed {
                    diags.push(
                        Diagnostic::error(
                            &spec.file,
                            spec.pos,
                            format!(
                                "metadata.annotations.{annotation}: {from} is on several specs: {}; \
                                 one VM is renamed into one spec only. Keep the annotation on one \
                                 of them; none is applied until then",
                                all.join(", ")
                            ),
                        )
                        .for_spec(Some(&spec.name)),
                    );
                }
            }
        }
    }
    // A held name no file defines: a removed spec whose VM a held spec would take. This error
    // keeps its VM as it is (not removed), and its status says why. (An invalid spec of that
    // name has its own error.)
    for name in &held {
        if by_name.contains_key(name) || exists(name) {
            continue;
        }
        let Some(into) = specs
            .iter()
            .find(|s| s.renamed_from.as_deref() == Some(*name))
        else {
            continue;
        };
        diags.extend(source_held(into));
    }
    (diags, held)
}

/// The error that holds the removed spec `into` is renamed from while `into` is not applied
/// (invalid): tied to that name, at `into`, so the old spec is not removed and its VM is left
/// as it is until `into`'s error is fixed. `None` when `into` is renamed from none.
pub fn source_held(into: &Spec) -> Option<Diagnostic> {
    let name = into.renamed_from.as_deref()?;
    Some(
        Diagnostic::error(
            &into.file,
            into.pos,
            format!(
                "spec {name}, which spec {} is renamed from, is not removed while spec {} is \
                 not applied: its VM is left as it is until the error above is fixed",
                into.name, into.name
            ),
        )
        .for_spec(Some(name)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_file;

    fn spec(name: &str, from: Option<&str>, file: &str) -> Spec {
        let annotation = from
            .map(|f| format!("  annotations:\n    proxsync.io/renamed-from: {f}\n"))
            .unwrap_or_default();
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\n{annotation}\
             spec:\n  forProvider:\n    site: lab\n    node: pve1\n    image: \"9000\"\n"
        );
        let (mut specs, diags) = parse_file(file, yaml.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        specs.remove(0)
    }

    fn run(specs: &[Spec], invalid: &[&str]) -> (Vec<String>, BTreeSet<String>) {
        let refs: Vec<&Spec> = specs.iter().collect();
        let names: BTreeSet<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        let (diags, held) = check(&refs, |n| names.contains(n) || invalid.contains(&n));
        (
            diags
                .iter()
                .map(|d| format!("[{:?}] {d}", d.spec))
                .collect(),
            held.into_iter().map(str::to_string).collect(),
        )
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_rename_of_a_removed_spec_is_fine() {
        let (diags, held) = run(&[spec("new", Some("old"), "a.yaml")], &[]);
        assert!(diags.is_empty() && held.is_empty(), "{diags:?}");
    }

    #[test]
    fn renamed_from_a_spec_that_exists_holds_both_with_file_and_line() {
        let specs = [
            spec("app-legacy", Some("app"), "legacy.yaml"),
            spec("app", None, "app.yaml"),
        ];
        let (diags, held) = run(&specs, &[]);
        assert_eq!(held, set(&["app", "app-legacy"]));
        assert_eq!(diags.len(), 2, "{diags:#?}");
        assert!(
            diags[0].starts_with("[Some(\"app-legacy\")] legacy.yaml:4:9: error:")
                && diags[0].contains("still in the repository (app.yaml:4:9)")
                && diags[0].contains("remove spec app to rename it"),
            "{diags:#?}"
        );
        assert!(
            diags[1].starts_with("[Some(\"app\")] app.yaml:4:9: error:")
                && diags[1].contains("legacy.yaml:4:9"),
            "{diags:#?}"
        );
        // An invalid spec of that name exists too: both held, the annotated one reported.
        let (diags, held) = run(&specs[..1], &["app"]);
        assert_eq!(held, set(&["app", "app-legacy"]));
        assert_eq!(diags.len(), 1, "{diags:#?}");
    }

    #[test]
    fn renamed_from_itself_is_an_error() {
        let (diags, held) = run(&[spec("app", Some("app"), "a.yaml")], &[]);
        assert_eq!(held, set(&["app"]));
        assert_eq!(diags.len(), 1, "{diags:#?}");
        assert!(diags[0].contains("names this spec itself"), "{diags:#?}");
    }

    #[test]
    fn two_specs_renamed_from_one_name_hold_both_and_the_old_name() {
        let specs = [
            spec("b", Some("a"), "b.yaml"),
            spec("c", Some("a"), "c.yaml"),
        ];
        let (diags, held) = run(&specs, &[]);
        assert_eq!(held, set(&["a", "b", "c"]));
        assert_eq!(diags.len(), 3, "{diags:#?}");
        assert!(
            diags[..2]
                .iter()
                .all(|d| d.contains("b (b.yaml:4:9), c (c.yaml:4:9)")),
            "{diags:#?}"
        );
        assert!(
            diags[2].starts_with("[Some(\"a\")] b.yaml:4:9: error: spec a"),
            "the removed name is held, its VM left as it is: {diags:#?}"
        );
    }

    #[test]
    fn a_chain_holds_every_name_down_it() {
        // b renamed from a, while c is renamed from b: c names a spec that exists.
        let specs = [
            spec("b", Some("a"), "b.yaml"),
            spec("c", Some("b"), "c.yaml"),
        ];
        let (diags, held) = run(&specs, &[]);
        assert_eq!(held, set(&["a", "b", "c"]));
        assert_eq!(diags.len(), 3, "{diags:#?}");
        assert!(diags[0].starts_with("[Some(\"c\")] c.yaml"), "{diags:#?}");
        assert!(diags[1].starts_with("[Some(\"b\")] b.yaml"), "{diags:#?}");
        assert!(diags[2].starts_with("[Some(\"a\")] b.yaml"), "{diags:#?}");
    }

    /// The loader leaves the held specs out of the valid ones and ties an error to every held
    /// name, so the engine treats them all as invalid (their VMs left as they are).
    #[test]
    fn a_set_holds_them_as_invalid() {
        let specs = vec![
            spec("b", Some("a"), "b.yaml"),
            spec("c", Some("a"), "c.yaml"),
            spec("d", None, "d.yaml"),
        ];
        let set = crate::spec::assemble(specs.into(), Vec::new());
        let valid: Vec<&str> = set.specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(valid, ["d"]);
        assert_eq!(set.invalid_names(), ["a", "b", "c"].into());
        assert!(set.is_complete());
    }
}
