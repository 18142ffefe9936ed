//! Reading specs from a git commit (never from a work tree, which may be dirty): the tip of
//! `[source] branch` in the local repository `[source] path` (bare or not), or in a mirror of
//! the remote `[source] url` that the daemon owns under `state_dir` and fetches with the
//! system `git` (ssh agent, known_hosts and credential helpers come for free, as in Argo CD).
//! Parsed files are cached by path and blob id, so an unchanged file is not parsed again.
//! With `[source] verify`, the tip is read only when its signature verifies
//! ([`crate::verify`]); a refused tip leaves the last verified commit in use.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{CommitVerification, Config, SourceLocation};
use crate::spec::{self, Diagnostic, MAX_FILE_BYTES, Pos, SpecSet, Specs};
use crate::verify::{self, Refusal};

/// Specs read from a commit.
#[derive(Debug, Clone)]
pub struct ReadSpecs {
    pub specs: SpecSet,
    /// The full commit id.
    pub commit: String,
    /// The branch tip that was not applied (`[source] verify`): then `commit` is the last
    /// verified one.
    pub refused: Option<Refusal>,
}

#[derive(Debug, thiserror::Error)]
#[error("source {location}: {message}")]
pub struct SourceError {
    pub location: String,
    pub message: String,
}

/// What a reader does with the specs it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Applies them (`run`): a verified tip is remembered as the one to fall back on.
    Apply,
    /// Only looks (`plan`, `doctor`, `adopt`): nothing is remembered.
    Inspect,
}

/// Reads the configured source once (for `run --once` and `plan`): a local repository as
/// it is, a remote after fetching it into the mirror.
pub fn read_configured(config: &Config, purpose: Use) -> Result<ReadSpecs, SourceError> {
    let mut source = Source::new(config);
    source.remember = purpose == Use::Apply;
    if source.is_remote() {
        source.fetch_blocking()?;
    }
    source.read()
}

/// The daemon's view of its source: where to read, what to watch, and the parse cache.
pub struct Source {
    location: SourceLocation,
    branch: String,
    dir: PathBuf,
    /// The repository read: the local path, or the mirror of a remote.
    repo: PathBuf,
    cache: ParseCache,
    /// Opens SOPS-encrypted specs (the config's age identities).
    keyring: Arc<crate::sops::Keyring>,
    pub interval: Duration,
    /// `[source] verify`: the signatures a tip needs before it is read.
    verify: Option<CommitVerification>,
    /// Where the last verified commit is remembered.
    state_dir: PathBuf,
    /// Whether a verified tip is remembered (`Use::Apply`).
    remember: bool,
    /// The last tip refused, to log a refusal once rather than at every read.
    refusal: Option<Refusal>,
}

impl Source {
    pub fn new(config: &Config) -> Source {
        let repo = match &config.source.location {
            SourceLocation::Path(p) => p.clone(),
            SourceLocation::Url { .. } => config.state_dir.join("mirror.git"),
        };
        Source {
            location: config.source.location.clone(),
            branch: config.source.branch.clone(),
            dir: config.source.dir.clone(),
            repo,
            cache: ParseCache::new(),
            interval: config.source.interval,
            verify: config.source.verify.clone(),
            state_dir: config.state_dir.clone(),
            remember: true,
            refusal: None,
            keyring: Arc::new(config.sops_keyring()),
        }
    }

    /// The repository as configured (path or URL), naming the remembered verified commit's
    /// source.
    fn location_label(&self) -> String {
        match &self.location {
            SourceLocation::Path(p) => p.display().to_string(),
            SourceLocation::Url { url, .. } => url.clone(),
        }
    }

    fn error(&self, message: String) -> SourceError {
        SourceError {
            location: self.repo.display().to_string(),
            message,
        }
    }

    /// The branch tip refused at the last read, if it was.
    pub fn refusal(&self) -> Option<&Refusal> {
        self.refusal.as_ref()
    }

    pub fn is_remote(&self) -> bool {
        matches!(self.location, SourceLocation::Url { .. })
    }

    /// The specs at the tip of the branch; with `[source] verify`, only if its signature
    /// verifies, else those of the last verified commit (with the refusal), else an error.
    pub fn read(&mut self) -> Result<ReadSpecs, SourceError> {
        let Some(how) = self.verify.clone() else {
            return read_at(
                &self.repo,
                Rev::Branch(&self.branch),
                &self.dir,
                &mut self.cache,
                &self.keyring,
            );
        };
        let tip = self.tip()?;
        match verify::verify_commit(&self.repo, &tip, &how) {
            Ok(signer) => {
                if self.refusal.take().is_some() || self.remember {
                    tracing::info!(commit = %tip, %signer, "the branch tip's signature verifies");
                }
                if self.remember
                    && let Err(e) = verify::remember(
                        &self.state_dir,
                        &self.location_label(),
                        &self.branch,
                        &tip,
                    )
                {
                    tracing::warn!(error = %e, "cannot remember the verified commit");
                }
                read_at(
                    &self.repo,
                    Rev::Commit(&tip),
                    &self.dir,
                    &mut self.cache,
                    &self.keyring,
                )
            }
            Err(reason) => {
                let refusal = Refusal {
                    commit: tip,
                    reason,
                };
                if self.refusal.as_ref() != Some(&refusal) {
                    tracing::warn!(commit = %refusal.commit, reason = %refusal.reason, "the branch tip is refused: its specs are not applied");
                }
                self.refusal = Some(refusal.clone());
                self.read_last_verified(&how, refusal)
            }
        }
    }

    /// The specs of the last verified commit, checked again (the keys may have changed since),
    /// when the tip is refused.
    fn read_last_verified(
        &mut self,
        how: &CommitVerification,
        refusal: Refusal,
    ) -> Result<ReadSpecs, SourceError> {
        let refused = format!("commit {} refused: {}", refusal.commit, refusal.reason);
        let last = verify::last_verified(&self.state_dir, &self.location_label(), &self.branch)
            .filter(|c| *c != refusal.commit);
        let Some(last) = last else {
            return Err(self.error(format!(
                "{refused}; no earlier verified commit, so nothing is applied"
            )));
        };
        if let Err(why) = verify::verify_commit(&self.repo, &last, how) {
            return Err(self.error(format!(
                "{refused}; the last verified commit {last} does not verify now either ({why}), \
                 so nothing is applied"
            )));
        }
        let mut read = read_at(
            &self.repo,
            Rev::Commit(&last),
            &self.dir,
            &mut self.cache,
            &self.keyring,
        )?;
        read.refused = Some(refusal);
        Ok(read)
    }

    /// The commit id at the tip of the branch: cheap, so the daemon walks the tree again only
    /// when the branch moved.
    pub fn tip(&self) -> Result<String, SourceError> {
        allow_foreign_owner();
        let err = |message: String| SourceError {
            location: self.repo.display().to_string(),
            message,
        };
        let repo = git2::Repository::open(&self.repo)
            .map_err(|e| err(format!("not a git repository: {}", e.message())))?;
        let commit = repo
            .find_reference(&format!("refs/heads/{}", self.branch))
            .and_then(|r| r.peel_to_commit())
            .map_err(|e| err(format!("branch {:?}: {}", self.branch, e.message())))?;
        Ok(commit.id().to_string())
    }

    /// The paths whose change means "the branch may have moved": the refs directory and
    /// `packed-refs` of the repository (bare or not). The work tree is never watched.
    pub fn watch_paths(&self) -> Vec<PathBuf> {
        let git_dir = if self.repo.join(".git").is_dir() {
            self.repo.join(".git")
        } else {
            self.repo.clone()
        };
        vec![git_dir.join("refs").join("heads"), git_dir.clone()]
    }

    /// Fetches the remote into the mirror (clone on first use). Blocking; run it off the
    /// async runtime's threads.
    pub fn fetch_blocking(&self) -> Result<(), SourceError> {
        let SourceLocation::Url {
            url,
            ssh_key_file,
            token_file,
        } = &self.location
        else {
            return Ok(());
        };
        let err = |message: String| SourceError {
            location: url.clone(),
            message,
        };
        let mut cmd = std::process::Command::new("git");
        // Never ask on a terminal; never read the user's global config.
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1");
        if let Some(key) = ssh_key_file {
            cmd.env(
                "GIT_SSH_COMMAND",
                format!(
                    "ssh -i '{}' -o IdentitiesOnly=yes -o BatchMode=yes",
                    key.display()
                ),
            );
        }
        if let Some(token) = token_file {
            // The helper reads the file itself: the token never appears in an argument list.
            cmd.args([
                "-c",
                &format!(
                    "credential.helper=!f() {{ echo username=proxsync; printf 'password=%s\\n' \"$(cat '{}')\"; }}; f",
                    token.display()
                ),
            ]);
        }
        if self.repo.join("HEAD").exists() {
            cmd.arg("--git-dir")
                .arg(&self.repo)
                .args(["fetch", "--prune", "--quiet", "origin"]);
        } else {
            // The mirror's parent is state_dir: created 0700, as the database does.
            if let Some(parent) = self.repo.parent() {
                crate::state::create_state_dir(parent)
                    .map_err(|e| err(format!("cannot create {}: {e}", parent.display())))?;
            }
            cmd.args(["clone", "--mirror", "--quiet", url])
                .arg(&self.repo);
        }
        let out = cmd
            .output()
            .map_err(|e| err(format!("cannot run git: {e}")))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            return Err(err(format!("git fetch failed: {}", text.trim())));
        }
        Ok(())
    }
}

/// The spec repository on a git server belongs to the server's user (`git`), not to the
/// daemon's: libgit2 would refuse to open it ("not owned by current user"). That check guards
/// against git running programs named in a foreign repository's config (CVE-2022-24765);
/// proxsync only reads objects and refs through libgit2, which runs no hooks, filters or
/// helpers, so the check is turned off, once, for this process.
pub(crate) fn allow_foreign_owner() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a process-wide libgit2 setting, written once before any repository is
        // opened by this process (`call_once` orders it before every later open).
        if let Err(e) = unsafe { git2::opts::set_verify_owner_validation(false) } {
            tracing::warn!(error = %e, "cannot relax libgit2's ownership check");
        }
    });
}

/// Parsed files by (path, blob id): their specs, shared with the spec sets read (an unchanged
/// spec is held once however many commits are read), and their diagnostics.
pub type ParseCache = HashMap<(String, git2::Oid), (Vec<Arc<spec::Spec>>, Vec<Diagnostic>)>;

/// What an entry of the spec directory's tree is to the reader.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    /// A directory: walked.
    Directory,
    /// A `*.yaml`/`*.yml` file: read and parsed.
    Spec,
    /// Documentation (`*.md`): not read, and harmless.
    Ignored,
    /// Anything else (a submodule, a symlink, a `.YAML` file, a file of another kind): it may
    /// hold specs the reader cannot see, so the set is incomplete and nothing counts as
    /// removed. The reason, for the diagnostic.
    Unreadable(String),
}

/// Sorts one tree entry (names starting with `.` are skipped before this). Anything that is
/// neither a spec file, a directory nor documentation makes the set incomplete: a spec the
/// reader cannot see would otherwise look removed, and its VM would be deleted.
fn classify(kind: Option<git2::ObjectType>, mode: i32, name: &str) -> Entry {
    let lower = name.to_ascii_lowercase();
    let yaml_like = lower.ends_with(".yaml") || lower.ends_with(".yml");
    match kind {
        Some(git2::ObjectType::Tree) => Entry::Directory,
        Some(git2::ObjectType::Commit) => Entry::Unreadable(
            "a git submodule (gitlink): its files live in another repository and are not read; \
             commit the spec files themselves"
                .into(),
        ),
        Some(git2::ObjectType::Blob) if mode == 0o120000 => Entry::Unreadable(
            "a symlink: spec files in git are read as committed, and links are not followed; \
             commit the file itself"
                .into(),
        ),
        Some(git2::ObjectType::Blob) if name.ends_with(".yaml") || name.ends_with(".yml") => {
            Entry::Spec
        }
        Some(git2::ObjectType::Blob) if yaml_like => Entry::Unreadable(
            "not read: spec files end in .yaml or .yml, in lower case; rename it".into(),
        ),
        Some(git2::ObjectType::Blob) if lower.ends_with(".md") => Entry::Ignored,
        Some(git2::ObjectType::Blob) => Entry::Unreadable(
            "not a spec file (only *.yaml and *.yml are read; *.md and names starting with '.' \
             are ignored); move it out of the spec directory ([source] dir)"
                .into(),
        ),
        other => Entry::Unreadable(format!(
            "an unexpected git object ({}) in the tree",
            other.map_or("unknown".to_string(), |k| k.to_string())
        )),
    }
}

/// Reads every `*.yaml`/`*.yml` blob under `dir` at the tip of `branch`. Anything else in
/// the directory but `*.md` files and names starting with `.` makes the set incomplete (see
/// [`classify`]).
pub fn read_commit(repo_path: &Path, branch: &str, dir: &Path) -> Result<ReadSpecs, SourceError> {
    read_commit_cached(repo_path, branch, dir, &mut ParseCache::new())
}

/// [`read_commit`], reusing the parse of files whose blob did not change.
pub fn read_commit_cached(
    repo_path: &Path,
    branch: &str,
    dir: &Path,
    cache: &mut ParseCache,
) -> Result<ReadSpecs, SourceError> {
    let none = crate::sops::Keyring::unavailable(crate::config::NO_SOPS_IDENTITY);
    read_at(repo_path, Rev::Branch(branch), dir, cache, &none)
}

/// Which commit to read: a branch's tip, or one commit by id (a verified one).
#[derive(Clone, Copy)]
enum Rev<'a> {
    Branch(&'a str),
    Commit(&'a str),
}

/// The commit `rev` names, and how to name it in messages.
fn find_commit<'r>(
    repo: &'r git2::Repository,
    rev: Rev<'_>,
) -> Result<(git2::Commit<'r>, String), String> {
    match rev {
        Rev::Branch(branch) => {
            let reference = repo
                .find_reference(&format!("refs/heads/{branch}"))
                .map_err(|e| format!("branch {branch:?}: {}", e.message()))?;
            let commit = reference.peel_to_commit().map_err(|e| {
                format!(
                    "branch {branch:?} does not point at a commit: {}",
                    e.message()
                )
            })?;
            Ok((commit, branch.to_string()))
        }
        Rev::Commit(id) => {
            let commit = git2::Oid::from_str(id)
                .and_then(|oid| repo.find_commit(oid))
                .map_err(|e| format!("commit {id}: {}", e.message()))?;
            Ok((commit, format!("commit {id}")))
        }
    }
}

/// Reads every spec file under `dir` at `rev` (see [`read_commit`]).
fn read_at(
    repo_path: &Path,
    rev: Rev<'_>,
    dir: &Path,
    cache: &mut ParseCache,
    keyring: &crate::sops::Keyring,
) -> Result<ReadSpecs, SourceError> {
    let err = |message: String| SourceError {
        location: repo_path.display().to_string(),
        message,
    };
    allow_foreign_owner();
    let repo = git2::Repository::open(repo_path)
        .map_err(|e| err(format!("not a git repository: {}", e.message())))?;
    let (commit, branch) = find_commit(&repo, rev).map_err(err)?;
    let rel = dir.to_string_lossy();
    let rel = rel.trim_start_matches("./").trim_end_matches('/');
    let rel = if rel == "." { "" } else { rel };
    let tree = spec_tree(&repo, &commit, &branch, rel).map_err(err)?;
    let (entries, mut diags) = spec_files(&tree, rel).map_err(err)?;
    let odb = repo
        .odb()
        .map_err(|e| err(format!("cannot open the object database: {}", e.message())))?;
    // Each file, in order: parsed before (taken from the cache), refused unread, or its bytes
    // to parse.
    enum File {
        Parsed(SpecFile, Parsed),
        Refused(Diagnostic),
        Parse(SpecFile, Vec<u8>),
    }
    let mut files = Vec::with_capacity(entries.len());
    for (shown, oid) in entries {
        let key = (shown, oid);
        if let Some(parsed) = cache.remove(&key) {
            files.push(File::Parsed(key, parsed));
            continue;
        }
        match read_blob(&repo, &odb, oid) {
            Ok(blob) => files.push(File::Parse(key, blob.content().to_vec())),
            Err(message) => files.push(File::Refused(Diagnostic::error(
                &key.0,
                Pos::START,
                message,
            ))),
        }
    }
    // The new files are parsed side by side (10,000 specs: most of `proxsync plan`'s time),
    // each spec's hashes worked out once here.
    let files = crate::par::map(files, |file| match file {
        File::Parse(key, bytes) => {
            let (file_specs, file_diags) =
                spec::parse_file_with(&key.0, &bytes, spec::Secrets::Decrypt(keyring));
            // Into a Vec of their own size: collected in place, the `Arc`s would keep the
            // parse's buffer (room for 4 `Spec`s) for every file the cache holds.
            let mut shared = Vec::with_capacity(file_specs.len());
            shared.extend(file_specs.into_iter().map(|mut s| {
                crate::plan::remember_hashes(&mut s);
                Arc::new(s)
            }));
            let file_specs = shared;
            File::Parsed(key, (file_specs, file_diags))
        }
        other => other,
    });
    // The cache is rebuilt from this tree's files: those gone from it leave.
    cache.clear();
    let mut specs = Specs::default();
    for file in files {
        match file {
            File::Parsed(key, parsed) => {
                parsed.0.iter().for_each(|s| specs.push(s.clone()));
                diags.extend(parsed.1.iter().cloned());
                cache.insert(key, parsed);
            }
            File::Refused(d) => diags.push(d),
            File::Parse(..) => {}
        }
    }
    Ok(ReadSpecs {
        specs: spec::assemble(specs, diags),
        commit: commit.id().to_string(),
        refused: None,
    })
}

/// The tree of the spec directory `rel` (`""`: the repository's root) at `commit`.
fn spec_tree<'r>(
    repo: &'r git2::Repository,
    commit: &git2::Commit<'r>,
    branch: &str,
    rel: &str,
) -> Result<git2::Tree<'r>, String> {
    let root = commit.tree().map_err(|e| e.message().to_string())?;
    if rel.is_empty() {
        return Ok(root);
    }
    let entry = root.get_path(Path::new(rel)).map_err(|_| {
        format!(
            "directory {rel:?} does not exist at {branch} ({})",
            commit.id()
        )
    })?;
    entry
        .to_object(repo)
        .and_then(|o| o.peel_to_tree())
        .map_err(|_| format!("{rel:?} is not a directory at {branch}"))
}

/// A spec file: its path as shown, and its blob.
type SpecFile = (String, git2::Oid);

/// A spec file's specs and diagnostics.
type Parsed = (Vec<Arc<spec::Spec>>, Vec<Diagnostic>);

/// The spec files under `tree` (shown with `rel` in front, sorted), and an error for each
/// entry that cannot be a spec file but looks like one.
fn spec_files(
    tree: &git2::Tree<'_>,
    rel: &str,
) -> Result<(Vec<SpecFile>, Vec<Diagnostic>), String> {
    let mut entries: Vec<SpecFile> = Vec::new();
    let mut problems: Vec<(String, String)> = Vec::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |parent, entry| {
        let name = entry.name().unwrap_or("");
        if name.starts_with('.') {
            return git2::TreeWalkResult::Skip;
        }
        let shown = if rel.is_empty() {
            format!("{parent}{name}")
        } else {
            format!("{rel}/{parent}{name}")
        };
        match classify(entry.kind(), entry.filemode(), name) {
            Entry::Directory => {}
            Entry::Spec => entries.push((shown, entry.id())),
            Entry::Ignored => {}
            Entry::Unreadable(why) => problems.push((shown, why)),
        }
        git2::TreeWalkResult::Ok
    })
    .map_err(|e| e.message().to_string())?;
    entries.sort();
    let diags = problems
        .into_iter()
        .map(|(shown, why)| {
            Diagnostic::error(
                &shown,
                Pos::START,
                format!("{why}; until then no spec counts as removed (nothing is deleted)"),
            )
        })
        .collect();
    Ok((entries, diags))
}

/// A spec file's content, or why it cannot be read.
fn read_blob<'r>(
    repo: &'r git2::Repository,
    odb: &git2::Odb<'_>,
    oid: git2::Oid,
) -> Result<git2::Blob<'r>, String> {
    // The size from the object's header, before anything is loaded: a committed 1.5 GiB
    // file must not be read into memory to be refused.
    match odb.read_header(oid) {
        Ok((size, _)) if size > MAX_FILE_BYTES => {
            return Err(format!(
                "file is {size} bytes, over the {MAX_FILE_BYTES} byte limit for a spec file, so it was not read; split it"
            ));
        }
        Ok((_, git2::ObjectType::Blob)) => {}
        Ok((_, kind)) => return Err(format!("not a file but a git {kind}")),
        Err(e) => return Err(format!("cannot read the blob: {}", e.message())),
    }
    repo.find_blob(oid)
        .map_err(|e| format!("cannot read the blob: {}", e.message()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git is installed");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    const SPEC: &str = "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: web-01\nspec:\n  forProvider:\n    site: lab\n    node: pve1\n    image: \"9000\"\n";

    /// A config reading the repository `repo` with `verify = "ssh"` and an allowed signers
    /// file holding one fresh key (never used to sign here).
    fn verifying_config(d: &Path, repo: &Path) -> Config {
        let key = d.join("trusted");
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key)
            .output()
            .expect("ssh-keygen is installed");
        assert!(out.status.success());
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        std::fs::write(d.join("allowed"), format!("ci@example.org {public}")).unwrap();
        let text = format!(
            "state_dir = \"{}\"\n[source]\npath = \"{}\"\nverify = \"ssh\"\n\
             allowed_signers = \"{}\"\n[[site]]\nname = \"lab\"\n\
             endpoint = \"https://pve:8006\"\ntoken_id = \"a@pve!b\"\n",
            d.join("state").display(),
            repo.display(),
            d.join("allowed").display()
        );
        Config::parse(&d.join("proxsync.toml"), &text).unwrap()
    }

    #[test]
    fn an_unsigned_tip_is_never_read_and_an_unverifiable_fallback_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join("web.yaml"), SPEC).unwrap();
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-q", "-m", "unsigned"]);
        let config = verifying_config(dir.path(), &repo);
        let mut source = Source::new(&config);

        let e = source.read().unwrap_err();
        assert!(
            e.message.ends_with(
                "refused: the commit is not signed; no earlier verified commit, so nothing is applied"
            ),
            "{e}"
        );
        let tip = source
            .refusal()
            .expect("the refusal is kept")
            .commit
            .clone();
        assert_eq!(tip.len(), 40);

        // A remembered commit is checked again before use: an unsigned one named in the state
        // file (edited by hand, or trusted by keys since removed) is not applied either.
        let first = tip;
        git(
            &repo,
            &["commit", "-q", "--allow-empty", "-m", "unsigned too"],
        );
        verify::remember(
            &config.state_dir,
            &repo.display().to_string(),
            "main",
            &first,
        )
        .unwrap();
        let e = source.read().unwrap_err();
        assert!(
            e.message.contains(&format!(
                "the last verified commit {first} does not verify now either (the commit is not signed)"
            )),
            "{e}"
        );
    }

    #[test]
    fn reads_the_committed_tree_not_the_work_tree() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"]);
        std::fs::create_dir(d.join("vms")).unwrap();
        std::fs::write(d.join("vms/web.yaml"), SPEC).unwrap();
        std::fs::write(d.join("README.md"), "not a spec").unwrap();
        git(d, &["add", "."]);
        git(d, &["commit", "-q", "-m", "one"]);
        // An uncommitted change is not seen.
        std::fs::write(d.join("vms/db.yaml"), SPEC.replace("web-01", "db-01")).unwrap();
        let read = read_commit(d, "main", Path::new("vms")).unwrap();
        assert_eq!(read.specs.specs.len(), 1);
        assert_eq!(read.specs.specs[0].name, "web-01");
        assert_eq!(read.specs.specs[0].file, "vms/web.yaml");
        assert_eq!(read.commit.len(), 40);
        assert!(read.specs.is_complete());

        let e = read_commit(d, "nope", Path::new(".")).unwrap_err();
        assert!(e.message.contains("branch \"nope\""), "{e}");
        let e = read_commit(d, "main", Path::new("missing")).unwrap_err();
        assert!(e.message.contains("does not exist"), "{e}");
    }

    #[test]
    fn an_unchanged_spec_is_shared_between_reads_with_its_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"]);
        std::fs::write(d.join("web.yaml"), SPEC).unwrap();
        std::fs::write(d.join("db.yaml"), SPEC.replace("web-01", "db-01")).unwrap();
        git(d, &["add", "."]);
        git(d, &["commit", "-q", "-m", "one"]);
        let mut cache = ParseCache::new();
        let first = read_commit_cached(d, "main", Path::new("."), &mut cache).unwrap();
        std::fs::write(
            d.join("db.yaml"),
            SPEC.replace("web-01", "db-01") + "    cpu: 4\n",
        )
        .unwrap();
        git(d, &["commit", "-q", "-am", "two"]);
        let second = read_commit_cached(d, "main", Path::new("."), &mut cache).unwrap();
        let by_name = |read: &ReadSpecs, name: &str| {
            read.specs
                .specs
                .shared()
                .iter()
                .find(|s| s.name == name)
                .cloned()
                .unwrap()
        };
        // web.yaml did not change: the same spec, held once, its hashes worked out when parsed.
        let web = by_name(&second, "web-01");
        assert!(Arc::ptr_eq(&by_name(&first, "web-01"), &web));
        assert!(web.hashes.0.is_some());
        assert_eq!(by_name(&second, "db-01").cpu, 4);
        assert_eq!(cache.len(), 2, "the old db.yaml left the cache");
        // Each file's specs are held in a Vec of their own size, not in the parse's buffer.
        for (specs, _) in cache.values() {
            assert_eq!(specs.capacity(), specs.len());
        }
    }

    #[test]
    fn a_repository_owned_by_another_user_is_read() {
        // The git server's user owns the repository, not the daemon's.
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"]);
        std::fs::write(d.join("web.yaml"), SPEC).unwrap();
        git(d, &["add", "."]);
        git(d, &["commit", "-q", "-m", "one"]);
        let me = std::fs::metadata(d)
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap();
        let other = if me == 65534 { 65533 } else { 65534 };
        let status = Command::new("chown")
            .args(["-R", &format!("{other}:{other}")])
            .arg(d)
            .status();
        if !status.is_ok_and(|s| s.success()) {
            panic!(
                "this test changes a directory's owner: run it as root (CI does) or with CAP_CHOWN"
            );
        }
        let read = read_commit(d, "main", Path::new(".")).unwrap();
        assert_eq!(read.specs.specs.len(), 1);
    }

    #[test]
    fn errors_carry_the_file_and_symlinks_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"]);
        std::fs::write(d.join("bad.yaml"), SPEC.replace("web-01", "Bad Name")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("link.yaml")).unwrap();
        git(d, &["add", "."]);
        git(d, &["commit", "-q", "-m", "one"]);
        let read = read_commit(d, "main", Path::new(".")).unwrap();
        let text: Vec<String> = read
            .specs
            .diagnostics
            .iter()
            .map(|d| d.to_string())
            .collect();
        assert!(
            text.iter().any(|t| t.starts_with("bad.yaml:4:")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.starts_with("link.yaml:1:1") && t.contains("symlink")),
            "{text:?}"
        );
        assert!(
            !read.specs.is_complete(),
            "a symlink error is tied to no spec: nothing may be treated as removed"
        );
    }
}

#[cfg(test)]
mod unseen_specs {
    //! Specs the reader cannot see must not look removed (issue 11).
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example",
                "-c",
                "init.defaultBranch=main",
                "-c",
                "protocol.file.allow=always",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git is installed");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn spec(name: &str) -> String {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n    site: lab\n    node: pve1\n    image: \"9000\"\n"
        )
    }

    /// A repository with `web.yaml` committed, plus `files` (path -> content).
    fn repo_with(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"]);
        std::fs::write(d.join("web.yaml"), spec("web-01")).unwrap();
        for (path, content) in files {
            let p = d.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "one"]);
        dir
    }

    fn errors(read: &ReadSpecs) -> Vec<String> {
        read.specs.errors().map(|d| d.to_string()).collect()
    }

    #[test]
    fn documentation_and_dotfiles_are_ignored() {
        let dir = repo_with(&[
            ("README.md", b"# specs"),
            ("team/NOTES.MD", b"notes"),
            (".gitkeep", b""),
            (".ci/build.sh", b"#!/bin/sh"),
        ]);
        let read = read_commit(dir.path(), "main", Path::new(".")).unwrap();
        assert!(read.specs.is_complete(), "{:?}", errors(&read));
        assert_eq!(read.specs.specs.len(), 1);
    }

    #[test]
    fn a_spec_renamed_to_upper_case_yaml_makes_the_set_incomplete() {
        for name in ["db.YAML", "db.Yml", "sub/db.yAmL"] {
            let dir = repo_with(&[(name, spec("db-01").as_bytes())]);
            let read = read_commit(dir.path(), "main", Path::new(".")).unwrap();
            let errs = errors(&read);
            assert!(!read.specs.is_complete(), "{name}: {errs:?}");
            assert!(
                errs.iter()
                    .any(|e| e.starts_with(&format!("{name}:1:1: error:"))
                        && e.contains("lower case")),
                "{name}: {errs:?}"
            );
            // web.yaml is still read.
            assert_eq!(read.specs.specs.len(), 1);
        }
    }

    #[test]
    fn any_other_file_makes_the_set_incomplete() {
        let dir = repo_with(&[
            ("prod/db.yaml.bak", spec("db-01").as_bytes()),
            ("Makefile", b"all:"),
        ]);
        let read = read_commit(dir.path(), "main", Path::new(".")).unwrap();
        let errs = errors(&read);
        assert!(!read.specs.is_complete(), "{errs:?}");
        for path in ["Makefile", "prod/db.yaml.bak"] {
            assert!(
                errs.iter().any(
                    |e| e.starts_with(&format!("{path}:1:1:")) && e.contains("not a spec file")
                ),
                "{path}: {errs:?}"
            );
        }
    }

    #[test]
    fn a_symlinked_directory_makes_the_set_incomplete() {
        let dir = repo_with(&[("shared/db.yaml", spec("db-01").as_bytes())]);
        let d = dir.path();
        std::os::unix::fs::symlink("../shared", d.join("prod-link")).unwrap();
        std::fs::create_dir(d.join("prod")).unwrap();
        std::os::unix::fs::symlink("../shared", d.join("prod/all")).unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "links"]);
        let read = read_commit(d, "main", Path::new("prod")).unwrap();
        let errs = errors(&read);
        assert!(!read.specs.is_complete(), "{errs:?}");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("prod/all:1:1:") && e.contains("symlink")),
            "{errs:?}"
        );
    }

    #[test]
    fn a_submodule_makes_the_set_incomplete() {
        let inner = repo_with(&[]);
        let dir = repo_with(&[]);
        let d = dir.path();
        // A gitlink, as `git submodule add` leaves it, without needing the network.
        let head = git(inner.path(), &["rev-parse", "HEAD"]);
        git(
            d,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{head},team-b"),
            ],
        );
        git(d, &["commit", "-q", "-m", "submodule"]);
        let read = read_commit(d, "main", Path::new(".")).unwrap();
        let errs = errors(&read);
        assert!(!read.specs.is_complete(), "{errs:?}");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("team-b:1:1:") && e.contains("submodule")),
            "{errs:?}"
        );
        assert_eq!(read.specs.specs.len(), 1, "web.yaml is still read");
    }

    #[test]
    fn an_oversized_file_is_refused() {
        let big = vec![b'#'; MAX_FILE_BYTES + 3 * 1024 * 1024];
        let dir = repo_with(&[("big.yaml", &big)]);
        let read = read_commit(dir.path(), "main", Path::new(".")).unwrap();
        let errs = errors(&read);
        assert!(!read.specs.is_complete(), "{errs:?}");
        let want = format!(
            "big.yaml:1:1: error: file is {} bytes, over the {MAX_FILE_BYTES} byte limit",
            big.len()
        );
        assert!(errs.iter().any(|e| e.starts_with(&want)), "{errs:?}");
    }

    /// A zlib stream of `data` in stored (uncompressed) deflate blocks.
    fn zlib_stored(data: &[u8]) -> Vec<u8> {
        let mut out = vec![0x78, 0x01];
        let chunks: Vec<&[u8]> = data.chunks(65535).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            out.push(u8::from(i + 1 == chunks.len()));
            let len = chunk.len() as u16;
            out.extend(len.to_le_bytes());
            out.extend((!len).to_le_bytes());
            out.extend(*chunk);
        }
        let (mut a, mut b) = (1u32, 0u32);
        for &byte in data {
            a = (a + u32::from(byte)) % 65521;
            b = (b + a) % 65521;
        }
        out.extend(((b << 16) | a).to_be_bytes());
        out
    }

    #[test]
    fn the_size_is_checked_from_the_object_header_before_anything_is_read() {
        // A loose object whose header says 2 GiB but whose content is a few bytes: reading it
        // fails, reading its header does not. Refused by size means the header was checked
        // first and the object never loaded.
        let dir = repo_with(&[]);
        let d = dir.path();
        let claimed: u64 = 2 * 1024 * 1024 * 1024;
        let hex = "ab".to_string() + &"cd".repeat(19);
        let objects = d.join(".git/objects/ab");
        std::fs::create_dir_all(&objects).unwrap();
        let mut raw = format!("blob {claimed}\0").into_bytes();
        raw.extend_from_slice(b"apiVersion: proxsync.io/v1\n");
        std::fs::write(objects.join(&hex[2..]), zlib_stored(&raw)).unwrap();
        let repo = git2::Repository::open(d).unwrap();
        let oid = git2::Oid::from_str(&hex).unwrap();
        let head = repo.head().unwrap().peel_to_commit().unwrap();
        let mut builder = repo.treebuilder(Some(&head.tree().unwrap())).unwrap();
        builder.insert("huge.yaml", oid, 0o100644).unwrap();
        let tree = repo.find_tree(builder.write().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example").unwrap();
        repo.commit(Some("refs/heads/main"), &sig, &sig, "huge", &tree, &[&head])
            .unwrap();

        let read = read_commit(d, "main", Path::new(".")).unwrap();
        let errs = errors(&read);
        assert!(!read.specs.is_complete(), "{errs:?}");
        let want = format!(
            "huge.yaml:1:1: error: file is {claimed} bytes, over the {MAX_FILE_BYTES} byte limit for a spec file, so it was not read"
        );
        assert!(errs.iter().any(|e| e.starts_with(&want)), "{errs:?}");
        assert_eq!(read.specs.specs.len(), 1, "web.yaml is still read");
    }
}
