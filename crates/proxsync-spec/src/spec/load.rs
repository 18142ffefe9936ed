//! Reading spec files from the filesystem, and the checks that span several specs.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::yaml::{Node, Value};
use super::{Diagnostic, MAX_FILE_BYTES, Pos, Spec, SpecSet, Specs};

/// Loads spec files and directories. A directory is walked recursively in sorted order for
/// `*.yaml` and `*.yml` files, skipping hidden entries (names starting with `.`, e.g. `.git`);
/// a `*.YAML`/`*.Yml` (any other case) is an error, as it is for the git source;
/// a symlink inside it may point anywhere inside the directory but not outside it. A file
/// named directly is read whatever its extension. Every file is parsed, then names are checked
/// for duplicates; specs whose name is duplicated are left out of [`SpecSet::specs`].
pub fn load_paths(paths: &[PathBuf]) -> SpecSet {
    let none = crate::sops::Keyring::unavailable(crate::config::NO_SOPS_IDENTITY);
    load_paths_with(paths, super::Secrets::Decrypt(&none))
}

/// [`load_paths`], opening SOPS-encrypted specs as `secrets` says.
pub fn load_paths_with(paths: &[PathBuf], secrets: super::Secrets) -> SpecSet {
    load_paths_capped(paths, secrets, crate::config::DEFAULT_MAX_SPECS)
}

/// [`load_paths_with`], holding at most `max_specs` specs (`[source] max_specs`, each set
/// member counted before it is expanded: [`super::sets::SpecBudget`]): past it, no spec is
/// read and the set holds one error saying so (nothing removed on its strength).
pub fn load_paths_capped(paths: &[PathBuf], secrets: super::Secrets, max_specs: u64) -> SpecSet {
    let mut files = Vec::new();
    let mut diags = Vec::new();
    for path in paths {
        let shown = path.display().to_string();
        match fs::metadata(path) {
            Err(e) => diags.push(Diagnostic::error(
                &shown,
                Pos::START,
                format!("cannot read {shown}: {e}"),
            )),
            Ok(meta) if meta.is_dir() => match fs::canonicalize(path) {
                Ok(root) => {
                    let mut visited = HashSet::new();
                    walk(&root, path, &mut visited, &mut files, &mut diags);
                }
                Err(e) => diags.push(Diagnostic::error(
                    &shown,
                    Pos::START,
                    format!("cannot read {shown}: {e}"),
                )),
            },
            Ok(_) => files.push(path.clone()),
        }
    }

    let (defaults, files): (Vec<PathBuf>, Vec<PathBuf>) = files
        .into_iter()
        .partition(|f| super::defaults::is_meant_as_defaults(&f.display().to_string()));
    let (defaults, misnamed): (Vec<PathBuf>, Vec<PathBuf>) = defaults
        .into_iter()
        .partition(|f| super::defaults::is_defaults_file(&f.display().to_string()));
    let mut defaults = read_defaults(paths, defaults, &mut diags);
    let broken_dir = |shown: &str| {
        let dir = Path::new(shown).parent().unwrap_or(Path::new("."));
        canonical(dir).display().to_string()
    };
    for path in misnamed {
        let shown = path.display().to_string();
        defaults.add_broken_keyed(
            &shown,
            &broken_dir(&shown),
            "its name is not _defaults.yaml",
        );
    }
    // Meant as defaults, refused unread (a symlink out of the tree, a pipe, a .YAML).
    let refused: Vec<String> = (diags.iter())
        .map(|d| d.file.clone())
        .filter(|f| super::defaults::is_meant_as_defaults(f))
        .collect();
    for file in refused {
        defaults.add_broken_keyed(
            &file,
            &broken_dir(&file),
            "it is not a plain file of that name",
        );
    }
    diags.extend(defaults.diagnostics.iter().cloned());
    let mut specs = Specs::default();
    let mut images = Vec::new();
    let budget = super::sets::SpecBudget::new(max_specs);
    for file in &files {
        let parsed = load_file(file, secrets, &defaults, &budget);
        let (file_specs, file_diags) = (parsed.specs, parsed.diagnostics);
        images.extend(parsed.images);
        if budget.spent() {
            // Refused as a whole: what was read goes, nothing more is.
            let shown = paths
                .first()
                .map_or_else(|| ".".into(), |p| p.display().to_string());
            let why = budget.refusal().unwrap_or_default();
            return SpecSet {
                diagnostics: vec![Diagnostic::error(&shown, Pos::START, why)],
                ..SpecSet::default()
            };
        }
        file_specs.into_iter().for_each(|s| specs.push(s));
        diags.extend(file_diags);
    }
    assemble_with_images(specs, images, diags)
}

/// [`load_paths_capped`] for files of a repository: the named paths are judged with the whole
/// repository around them (the first directory above holding `.git`), so a `dependsOn`, a
/// set's name, a duplicate name or a rename that involves a file not named is judged as the
/// daemon judges the repository; what is reported, and the specs returned, are those of the
/// named paths, of the `_defaults.yaml` files above them, and the problems elsewhere that name
/// a spec the named paths define. A pre-commit hook names only
/// the staged files. Paths in no repository or in two, and directories (a tree the caller
/// chose), are loaded as [`load_paths_capped`] loads them.
pub fn load_paths_in_repository(
    paths: &[PathBuf],
    secrets: super::Secrets,
    max_specs: u64,
) -> SpecSet {
    let named: Vec<(PathBuf, String)> = (paths.iter())
        .map(|p| (canonical(p), p.display().to_string()))
        .collect();
    let roots: Option<HashSet<PathBuf>> = named.iter().map(|(c, _)| repository_of(c)).collect();
    let root = match roots {
        Some(roots) if roots.len() == 1 => roots.into_iter().next().unwrap_or_default(),
        _ => return load_paths_capped(paths, secrets, max_specs),
    };
    // A directory named is a tree the caller chose (`validate specs/`, a tree inside a bigger
    // repository): judged alone, as before.
    if named.iter().any(|(c, _)| c.is_dir()) {
        return load_paths_capped(paths, secrets, max_specs);
    }
    // The names the named files define: a problem found elsewhere that names one (a duplicate
    // reported at the other file) is theirs too.
    let alone = load_paths_capped(paths, secrets, max_specs);
    let defined: HashSet<&str> = (alone.specs.iter().map(|s| s.name.as_str()))
        .chain(alone.diagnostics.iter().filter_map(|d| d.spec.as_deref()))
        .collect();
    let mut set = load_paths_capped(&[shown_root(&root)], secrets, max_specs);
    // The named path a file is (`Some(Some(shown))`) or lies under (`Some(None)`).
    let named_as = |file: &str| -> Option<Option<String>> {
        let c = canonical(Path::new(file));
        (named.iter())
            .find(|(n, _)| c.starts_with(n))
            .map(|(n, shown)| (c == *n).then(|| shown.clone()))
    };
    let above_named = |file: &str| {
        let dir = canonical(Path::new(file).parent().unwrap_or(Path::new(".")));
        named.iter().any(|(n, _)| n.starts_with(&dir))
    };
    set.specs.retain(|s| named_as(&s.file).is_some());
    for spec in set.specs.iter_mut() {
        if let Some(Some(shown)) = named_as(&spec.file) {
            spec.file = shown.into();
        }
    }
    set.diagnostics.retain_mut(|d| match named_as(&d.file) {
        Some(shown) => {
            if let Some(shown) = shown {
                d.file = shown;
            }
            true
        }
        None => {
            d.spec.as_deref().is_some_and(|n| defined.contains(n))
                || canonical(Path::new(&d.file)) == root
                || super::defaults::is_meant_as_defaults(&d.file) && above_named(&d.file)
        }
    });
    set
}

/// The repository `path` is in: the first directory at or above it holding `.git`.
fn repository_of(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
}

/// `root` as the walk should show it: relative to the working directory when that is inside
/// it (`.`, `..`, ...), else as it is.
fn shown_root(root: &Path) -> PathBuf {
    let cwd = std::env::current_dir().map(|c| canonical(&c));
    match cwd.as_deref().map(|c| c.strip_prefix(root)) {
        Ok(Ok(below)) => match below.components().count() {
            0 => PathBuf::from("."),
            n => (0..n).map(|_| "..").collect(),
        },
        _ => root.to_path_buf(),
    }
}

/// The effective spec documents of spec file `path`: its `_defaults.yaml` chain merged in,
/// as YAML, each value a defaults file gave followed by a comment naming that file and line.
/// SOPS-encrypted values are shown as written (never decrypted here).
pub fn effective_yaml(path: &Path) -> Result<String, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let defaults = read_defaults(&[path.to_path_buf()], Vec::new(), &mut diags);
    let shown = path.display().to_string();
    let chain = match defaults.chain(&canonical(path).display().to_string()) {
        Ok(chain) => chain,
        Err(_) => {
            diags.extend(defaults.diagnostics.iter().cloned());
            return Err(diags);
        }
    };
    let bytes = fs::read(path).map_err(|e| {
        vec![Diagnostic::error(
            &shown,
            Pos::START,
            format!("cannot read {shown}: {e}"),
        )]
    })?;
    let members = effective_members(&chain, &shown, &bytes)?;
    let texts: Vec<String> = (members.iter())
        .map(|doc| super::defaults::to_yaml(doc, &chain))
        .collect();
    Ok(texts.join("---\n"))
}

/// The spec documents of file `shown` (its `bytes`), a set's as its members, with `chain`
/// merged into each.
fn effective_members(
    chain: &[std::sync::Arc<super::defaults::Defaults>],
    shown: &str,
    bytes: &[u8],
) -> Result<Vec<Node>, Vec<Diagnostic>> {
    let text = String::from_utf8_lossy(bytes);
    let (docs, parsed) = super::yaml::parse_documents(shown, &text);
    if parsed.iter().any(Diagnostic::is_error) {
        return Err(parsed);
    }
    // A set shows as its members.
    let mut members = Vec::new();
    for doc in docs {
        if !super::sets::is_set(&doc) {
            members.push(doc);
            continue;
        }
        let (expanded, problems) = super::sets::expand(shown, &doc);
        if problems.iter().any(Diagnostic::is_error) {
            return Err(problems);
        }
        members.extend(expanded.into_iter().map(|(m, _)| m));
    }
    Ok((members.iter())
        .map(|doc| super::defaults::apply(chain, doc))
        .collect())
}

/// What stands for a `userData` value in [`effective_document`]: its size only.
fn user_data_withheld(bytes: usize) -> String {
    format!("({bytes} bytes of user-data, not shown)")
}

/// The effective document of spec `name` in spec file `shown` (its `bytes`, read from git by
/// the caller, as `defaults` were): as [`effective_yaml`] shows it, but for what a page must
/// not show: the `sops` metadata is left out and `userData` (encrypted or not, it may hold
/// secrets) is replaced by its size. `Ok(None)` when no document of the file is that spec.
pub fn effective_document(
    defaults: &super::defaults::DefaultsSet,
    shown: &str,
    bytes: &[u8],
    name: &str,
) -> Result<Option<String>, String> {
    let chain = defaults.chain(shown).map_err(|broken| {
        format!("{broken} is not read as defaults, so the spec is held (see its status)")
    })?;
    let members = effective_members(&chain, shown, bytes).map_err(|diags| {
        diags
            .first()
            .map_or_else(|| "the file does not parse".into(), |d| d.message.clone())
    })?;
    let Some(mut doc) = members
        .into_iter()
        .find(|doc| str_at(doc, &["metadata", "name"]) == Some(name))
    else {
        return Ok(None);
    };
    if let Value::Map(entries) = &mut doc.value {
        entries.retain(|(k, _)| !matches!(&k.value, Value::Str(s) if s == "sops"));
    }
    if let Some(user_data) = node_at_mut(&mut doc, &["spec", "forProvider", "userData"]) {
        let size = match &user_data.value {
            Value::Str(s) => s.len(),
            _ => 0,
        };
        user_data.value = Value::Str(user_data_withheld(size));
    }
    Ok(Some(super::defaults::to_yaml(&doc, &chain)))
}

/// The string at `path` of mappings in `n`.
fn str_at<'n>(n: &'n Node, path: &[&str]) -> Option<&'n str> {
    let mut n = n;
    for key in path {
        let Value::Map(entries) = &n.value else {
            return None;
        };
        n = &entries
            .iter()
            .find(|(k, _)| matches!(&k.value, Value::Str(s) if s == key))?
            .1;
    }
    match &n.value {
        Value::Str(s) => Some(s),
        _ => None,
    }
}

/// The node at `path` of mappings in `n`.
fn node_at_mut<'n>(n: &'n mut Node, path: &[&str]) -> Option<&'n mut Node> {
    let mut n = n;
    for key in path {
        let Value::Map(entries) = &mut n.value else {
            return None;
        };
        n = &mut entries
            .iter_mut()
            .find(|(k, _)| matches!(&k.value, Value::Str(s) if s == key))?
            .1;
    }
    Some(n)
}

/// The `_defaults.yaml` files that apply to what `paths` name: `found` (in the directories
/// walked), and those of each named path's directory and the directories above it, up to the
/// repository's top (the first holding `.git`).
fn read_defaults(
    paths: &[PathBuf],
    found: Vec<PathBuf>,
    diags: &mut Vec<Diagnostic>,
) -> super::defaults::DefaultsSet {
    // (as shown, canonical path)
    let mut all: Vec<(String, PathBuf)> = (found.iter())
        .map(|p| (p.display().to_string(), canonical(p)))
        .collect();
    for path in paths {
        let start = canonical(path);
        let mut dir = match start.is_dir() {
            true => Some(start.as_path()),
            false => start.parent(),
        };
        while let Some(d) = dir {
            let candidate = d.join(super::defaults::DEFAULTS_FILE);
            if candidate.is_file() {
                all.push((candidate.display().to_string(), candidate.clone()));
            }
            if d.join(".git").exists() {
                break;
            }
            dir = d.parent();
        }
    }
    // One file named two ways (`./x` and `/abs/x`) is read once, as first named.
    let mut seen = HashSet::new();
    all.retain(|(_, c)| seen.insert(c.clone()));
    let mut read = Vec::new();
    for (shown, path) in all {
        let dir = path
            .parent()
            .map_or_else(String::new, |d| d.display().to_string());
        match fs::read(&path) {
            Ok(bytes) => read.push((shown, dir, bytes)),
            Err(e) => {
                diags.push(Diagnostic::error(
                    &shown,
                    Pos::START,
                    format!("cannot read {shown}: {e}"),
                ));
                // Unread, it holds every spec below it (as a broken one does).
                read.push((shown, dir, Vec::new()));
            }
        }
    }
    super::defaults::DefaultsSet::parse_keyed(read)
}

/// `path` made absolute and canonical (symlinks resolved): what defaults are matched by. A
/// path that cannot be resolved is made absolute as written.
fn canonical(path: &Path) -> PathBuf {
    fs::canonicalize(path).unwrap_or_else(|_| {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    })
}

/// Makes a [`SpecSet`] from every file's specs and diagnostics: checks for duplicate names
/// across files (duplicated specs are left out) and `proxsync.io/renamed-from` annotations that
/// cannot be applied (`renames`: the specs they hold are left out), and sorts the diagnostics.
/// Shared by the filesystem loader and the git source.
pub fn assemble(specs: Specs, diags: Vec<Diagnostic>) -> SpecSet {
    assemble_with_images(specs, Vec::new(), diags)
}

/// [`assemble`] with the files' `ProxmoxImage`s: their names checked unique (among images and
/// guests) and every guest's reference to one checked ([`super::images::check_references`]).
pub fn assemble_with_images(
    mut specs: Specs,
    mut images: Vec<Arc<super::images::ImageSpec>>,
    mut diags: Vec<Diagnostic>,
) -> SpecSet {
    super::images::check_references(&mut specs, &mut images, &mut diags);
    super::templates::version_all(&mut specs, &images, &mut diags);
    let duplicates = check_duplicates(&specs);
    let dup_names: HashSet<String> = duplicates.iter().filter_map(|d| d.spec.clone()).collect();
    specs.retain(|s| !dup_names.contains(s.name.as_str()));
    diags.extend(duplicates);
    let shared = check_consents(&specs);
    let sharing: HashSet<String> = shared.iter().filter_map(|d| d.spec.clone()).collect();
    specs.retain(|s| !sharing.contains(s.name.as_str()));
    diags.extend(shared);
    let named: HashSet<String> = diags.iter().filter_map(|d| d.spec.clone()).collect();
    let tangled = check_dependencies(&specs, |n| named.contains(n));
    let held: HashSet<String> = tangled.iter().filter_map(|d| d.spec.clone()).collect();
    specs.retain(|s| !held.contains(s.name.as_str()));
    diags.extend(tangled);

    let annotated = specs.iter().any(|s| s.renamed_from.is_some());
    let (renames, held) = if !annotated {
        (Vec::new(), HashSet::new())
    } else {
        let valid: Vec<&Spec> = specs.iter().collect();
        let invalid: HashSet<&str> = diags
            .iter()
            .filter(|d| d.is_error())
            .filter_map(|d| d.spec.as_deref())
            .collect();
        let names: HashSet<&str> = valid.iter().map(|s| s.name.as_str()).collect();
        let (found, held) =
            super::renames::check(&valid, |n| names.contains(n) || invalid.contains(n));
        let held: HashSet<String> = held.into_iter().map(str::to_string).collect();
        (found, held)
    };
    if !held.is_empty() {
        specs.retain(|s| !held.contains(s.name.as_str()));
    }
    diags.extend(renames);

    // Report by file, then by position, so output reads like the files.
    diags.sort_by(|a, b| (&a.file, a.pos).cmp(&(&b.file, b.pos)));
    SpecSet {
        specs,
        images,
        diagnostics: diags,
    }
}

/// True for `*.yaml` and `*.yml`.
fn is_spec_file(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml")
}

/// True for `*.YAML`, `*.Yml` and the like: meant as a spec, but not read as one (the git
/// source treats them as making the set incomplete, so they are errors here too).
fn is_miscased_spec_file(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    !is_spec_file(name) && (lower.ends_with(".yaml") || lower.ends_with(".yml"))
}

/// Collects spec files under `dir` (shown as the user named it), refusing symlinks that
/// resolve outside `root` (canonical). `visited` stops symlink loops.
fn walk(
    root: &Path,
    dir: &Path,
    visited: &mut HashSet<PathBuf>,
    files: &mut Vec<PathBuf>,
    diags: &mut Vec<Diagnostic>,
) {
    let shown = dir.display().to_string();
    let error = |diags: &mut Vec<Diagnostic>, shown: &str, msg: String| {
        diags.push(Diagnostic::error(shown, Pos::START, msg))
    };
    match fs::canonicalize(dir) {
        Ok(canonical) if !visited.insert(canonical.clone()) => return,
        Ok(_) => {}
        Err(e) => return error(diags, &shown, format!("cannot read directory {shown}: {e}")),
    }
    let mut entries = match fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(Result::ok).collect::<Vec<_>>(),
        Err(e) => return error(diags, &shown, format!("cannot read directory {shown}: {e}")),
    };
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = dir.join(entry.file_name());
        let shown = path.display().to_string();
        let Ok(ftype) = entry.file_type() else {
            continue;
        };
        if ftype.is_symlink()
            && let Err(problem) = check_symlink(root, &path, &name)
        {
            if let Some(msg) = problem {
                error(diags, &shown, msg);
            }
            continue;
        }
        // Follows the (checked) symlink.
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            walk(root, &path, visited, files, diags);
        } else if is_miscased_spec_file(&name) {
            error(
                diags,
                &shown,
                format!(
                    "{shown} is not read: spec files end in .yaml or .yml, in lower case; rename it"
                ),
            );
        } else if is_spec_file(&name) {
            if meta.is_file() {
                files.push(path);
            } else {
                error(
                    diags,
                    &shown,
                    format!(
                        "{shown} is not a regular file (a pipe or device?); spec files must be plain files"
                    ),
                );
            }
        }
    }
}

/// Whether a symlink may be followed: its target must exist and lie under `root` (canonical).
/// `Err(Some(_))` is reported; a broken link that is no spec file is skipped quietly.
fn check_symlink(root: &Path, path: &Path, name: &str) -> Result<(), Option<String>> {
    let shown = path.display();
    let target = match fs::canonicalize(path) {
        Ok(t) => t,
        Err(e) if is_spec_file(name) => {
            return Err(Some(format!(
                "broken symlink {shown}: {e}; fix or remove it"
            )));
        }
        Err(_) => return Err(None),
    };
    if !target.starts_with(root) {
        return Err(Some(format!(
            "symlink {shown} points to {}, outside {}; only symlinks within the spec directory are followed",
            target.display(),
            root.display()
        )));
    }
    Ok(())
}

/// Reads and parses one file, refusing oversized and non-regular files before reading them.
fn load_file(
    path: &Path,
    secrets: super::Secrets,
    defaults: &super::defaults::DefaultsSet,
    budget: &super::sets::SpecBudget,
) -> super::FileParse {
    let shown = path.display().to_string();
    let fail = |msg: String| super::FileParse::refused(Diagnostic::error(&shown, Pos::START, msg));
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return fail(format!("cannot read {shown}: {e}")),
    };
    if !meta.is_file() {
        return fail(format!(
            "{shown} is not a regular file; spec files must be plain files"
        ));
    }
    if meta.len() > MAX_FILE_BYTES as u64 {
        return fail(format!(
            "file is {} bytes, larger than the {MAX_FILE_BYTES} byte (1 MiB) limit for a spec file; split it",
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    // Bounded even if the file grows after the size check.
    let read = fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes));
    if let Err(e) = read {
        return fail(format!("cannot read {shown}: {e}"));
    }
    let key = canonical(path).display().to_string();
    defaults.parse_file_keyed(&shown, &key, &bytes, secrets, budget)
}

/// Reports every spec whose `metadata.name` was already used by an earlier spec (in another
/// file or another document), at the later one, naming where the first is.
pub fn check_duplicates<'a>(specs: impl IntoIterator<Item = &'a Spec>) -> Vec<Diagnostic> {
    let mut first: HashMap<&str, &Spec> = HashMap::new();
    let mut diags = Vec::new();
    for spec in specs {
        match first.get(spec.name.as_str()) {
            Some(f) => diags.push(
                Diagnostic::error(
                    &spec.file,
                    spec.pos,
                    format!(
                        "duplicate metadata.name {:?}: first defined at {}:{}:{}; every spec needs a unique name",
                        spec.name, f.file, f.pos.line, f.pos.column
                    ),
                )
                .for_spec(Some(&spec.name)),
            ),
            None => {
                first.insert(&spec.name, spec);
            }
        }
    }
    diags
}

/// Reports every spec that consents to take over a VM (`proxsync.io/adopt`) another spec of the
/// same site consents to as well: a VM is one spec's, so none of them takes it (each is held as
/// invalid, its VM left alone) until one consent is left.
pub(crate) fn check_consents<'a>(specs: impl IntoIterator<Item = &'a Spec>) -> Vec<Diagnostic> {
    let mut by_vm: HashMap<(&str, u32), Vec<&Spec>> = HashMap::new();
    for spec in specs {
        if let Some(c) = &spec.adopt {
            by_vm.entry((&spec.site, c.vmid)).or_default().push(spec);
        }
    }
    let mut diags = Vec::new();
    for ((site, vmid), claimants) in by_vm.into_iter().filter(|(_, v)| v.len() > 1) {
        for spec in &claimants {
            let others: Vec<String> = (claimants.iter())
                .filter(|o| o.name != spec.name)
                .map(|o| format!("{} ({}:{})", o.name, o.file, o.pos.line))
                .collect();
            diags.push(
                Diagnostic::error(
                    &spec.file,
                    spec.pos,
                    format!(
                        "metadata.annotations.{}: {} on site {site} is also taken over by spec \
                         {}; a {} is one spec's: keep the annotations on one of them",
                        super::ADOPT,
                        spec.kind().named(vmid),
                        others.join(", "),
                        spec.kind().noun()
                    ),
                )
                .for_spec(Some(&spec.name)),
            );
        }
    }
    diags
}

/// Reports every spec whose `dependsOn` names a spec that does not exist (neither in `specs`
/// nor `invalid`: a spec with errors whose name was read), and every spec on a dependency
/// cycle, naming the cycle. Such specs are held as invalid: their VMs are left alone.
pub(crate) fn check_dependencies(specs: &Specs, invalid: impl Fn(&str) -> bool) -> Vec<Diagnostic> {
    // FNV: 50,000 names hashed at every read of the specs.
    let by_name: crate::util::fnv::FnvHashMap<&str, &Spec> =
        specs.iter().map(|s| (s.name.as_str(), s)).collect();
    let sets = set_members(specs);
    let mut diags = Vec::new();
    for spec in specs.iter().filter(|s| !s.depends_on.is_empty()) {
        for dep in &spec.depends_on {
            if by_name.contains_key(dep.as_str()) || sets.contains_key(dep.as_str()) || invalid(dep)
            {
                continue;
            }
            let hint = super::closest(dep, by_name.keys().copied())
                .map(|c| format!("; did you mean {c}?"))
                .unwrap_or_default();
            diags.push(
                Diagnostic::error(
                    &spec.file,
                    spec.pos,
                    format!("spec.dependsOn names {dep}, which is no spec of the repository{hint}"),
                )
                .for_spec(Some(&spec.name)),
            );
        }
    }
    for cycle in dependency_cycles(&by_name, &sets) {
        let shown = cycle.join(" -> ") + " -> " + cycle[0];
        for name in &cycle {
            let spec = by_name[name];
            diags.push(
                Diagnostic::error(
                    &spec.file,
                    spec.pos,
                    format!(
                        "spec.dependsOn makes a cycle: {shown}; nothing on it can start first. \
                         Remove one of these dependencies"
                    ),
                )
                .for_spec(Some(&spec.name)),
            );
        }
    }
    diags
}

/// The dependency cycles among `specs`, each once, as the names along it from the first name
/// in order (a spec that depends on itself is a cycle of one). Depth-first with an explicit stack: a chain of thousands of
/// specs cannot overflow the thread's stack.
fn dependency_cycles<'a>(
    specs: &crate::util::fnv::FnvHashMap<&'a str, &'a Spec>,
    sets: &HashMap<&'a str, Vec<&'a str>>,
) -> Vec<Vec<&'a str>> {
    // No dependency, no cycle: most spec sets (at 50,000 specs the walk below took 30 ms of
    // every read).
    if specs.values().all(|s| s.depends_on.is_empty()) {
        return Vec::new();
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut names: Vec<&str> = specs.keys().copied().collect();
    names.sort_unstable();
    let mut mark: HashMap<&str, Mark> = names.iter().map(|n| (*n, Mark::New)).collect();
    let deps = |n: &str| -> Vec<&'a str> {
        // A set stands for its members.
        let mut d: Vec<&str> = (specs[n].depends_on.iter())
            .flat_map(|d| match specs.get_key_value(d.as_str()) {
                Some((k, _)) => vec![*k],
                None => sets.get(d.as_str()).cloned().unwrap_or_default(),
            })
            .collect();
        d.sort_unstable();
        d
    };
    let mut cycles = Vec::new();
    for start in names {
        if mark[start] != Mark::New {
            continue;
        }
        // The path from `start`, each with the dependencies still to visit.
        let mut path: Vec<(&str, Vec<&str>)> = vec![(start, deps(start))];
        mark.insert(start, Mark::OnPath);
        while let Some((_, todo)) = path.last_mut() {
            let Some(next) = todo.pop() else {
                let (done, _) = path.pop().expect("not empty");
                mark.insert(done, Mark::Done);
                continue;
            };
            match mark[next] {
                Mark::New => {
                    mark.insert(next, Mark::OnPath);
                    path.push((next, deps(next)));
                }
                Mark::OnPath => {
                    let from = path.iter().position(|(n, _)| *n == next).expect("on path");
                    let mut cycle: Vec<&str> = path[from..].iter().map(|(n, _)| *n).collect();
                    // Told from its first name, as the same cycle always reads.
                    let first = (0..cycle.len()).min_by_key(|i| cycle[*i]).unwrap_or(0);
                    cycle.rotate_left(first);
                    cycles.push(cycle);
                }
                Mark::Done => {}
            }
        }
    }
    cycles
}

/// The members of each `ProxmoxVMSet`, by set name.
fn set_members(specs: &Specs) -> HashMap<&str, Vec<&str>> {
    let mut sets: HashMap<&str, Vec<&str>> = HashMap::new();
    for spec in specs.iter() {
        if let Some(m) = spec.set.as_deref() {
            sets.entry(m.set.as_str())
                .or_default()
                .push(spec.name.as_str());
        }
    }
    sets
}

/// The specs whose container root password file `check` refuses (the config's rules: `config::
/// PasswordFiles`), each as an error at the spec; the check itself is the caller's (the spec
/// reads no file).
pub fn check_password_files<'a>(
    specs: impl IntoIterator<Item = &'a Spec>,
    check: impl Fn(&str) -> Result<(), String>,
) -> Vec<Diagnostic> {
    specs
        .into_iter()
        .filter_map(|s| {
            let password = s.container()?.password.as_ref()?;
            let super::container::PasswordSource::File(path) = password else {
                return None;
            };
            let why = check(path).err()?;
            Some(
                Diagnostic::error(
                    s.file.as_str(),
                    Pos { source: 0, ..s.pos },
                    format!("spec.forProvider.password.file: {why}"),
                )
                .for_spec(Some(&s.name)),
            )
        })
        .collect()
}

/// Reports every spec whose site is not one of `sites` (the `[[site]]` names of the config),
/// at the `site` field, listing the valid names.
pub fn check_sites<'a>(
    specs: impl IntoIterator<Item = &'a Spec>,
    sites: &[&str],
) -> Vec<Diagnostic> {
    let valid = if sites.is_empty() {
        "the config defines no [[site]]".to_string()
    } else {
        format!("valid sites are: {}", sites.join(", "))
    };
    specs
        .into_iter()
        .filter(|s| !sites.contains(&s.site.as_str()))
        .map(|s| {
            Diagnostic::error(
                s.file_of(s.site_pos),
                Pos {
                    source: 0,
                    ..s.site_pos
                },
                format!(
                    "site {:?} is not a [[site]] of the proxsync config; {valid}",
                    s.site
                ),
            )
            .for_spec(Some(&s.name))
        })
        .collect()
}

/// An error of `spec` at its `node` field, tied to its name: what a check against its site
/// finds there (a node its cluster does not have). The spec is invalid for it.
pub fn node_error(spec: &Spec, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(
        spec.file_of(spec.node_pos),
        Pos {
            source: 0,
            ..spec.node_pos
        },
        message,
    )
    .for_spec(Some(&spec.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn symlinks_are_followed_only_within_the_spec_directory() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.yaml"), "not: a spec\n").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let specs = dir.path().join("specs");
        std::fs::create_dir_all(specs.join("real")).unwrap();
        symlink(
            outside.path().join("secret.yaml"),
            specs.join("escape.yaml"),
        )
        .unwrap();
        symlink(specs.join("missing.yaml"), specs.join("broken.yaml")).unwrap();
        symlink(specs.join("missing.txt"), specs.join("broken-notes.txt")).unwrap();
        symlink(specs.join("real"), specs.join("inside")).unwrap();

        let set = load_paths(std::slice::from_ref(&specs));
        let shown: Vec<String> = set.diagnostics.iter().map(|d| d.to_string()).collect();
        assert!(
            shown
                .iter()
                .any(|d| d.contains("escape.yaml") && d.contains("outside")),
            "{shown:#?}"
        );
        assert!(
            shown
                .iter()
                .any(|d| d.contains("broken symlink") && d.contains("broken.yaml")),
            "{shown:#?}"
        );
        // A broken link that is no spec file, and a link within the directory, are fine.
        assert_eq!(shown.len(), 2, "{shown:#?}");
        assert!(!set.is_complete());
    }
}
