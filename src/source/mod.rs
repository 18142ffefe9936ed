//! Reading specs from a git commit (never from a work tree, which may be dirty): the tip of
//! `[source] branch` in the local repository `[source] path` (bare or not), or in a mirror of
//! the remote `[source] url` that the daemon owns under `state_dir` and fetches with the
//! system `git` (ssh agent, known_hosts and credential helpers come for free, as in Argo CD).
//! Parsed files are cached by path and blob id, so an unchanged file is not parsed again.
//! With `[source] verify`, the tip is read only when its signature verifies
//! ([`verify`]); a refused tip leaves the last verified commit in use. The tip is
//! compared with the last commit applied ([`chain`]): one that does not descend from
//! it is a rewind, refused with `verify` until an operator accepts it, applied and reported
//! without ([`crate::gate::commit`] decides).

pub(crate) mod chain;
pub(crate) mod verify;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use self::chain::{Applied, RewindBatch};
use self::verify::Refusal;
use crate::config::{CommitVerification, Config, SourceLocation};
use crate::gate::commit::{self as gate, Evidence, Permit, Signature};
use crate::spec::{self, Diagnostic, MAX_FILE_BYTES, Pos, SpecSet, Specs};

/// Specs read from a commit.
#[derive(Debug, Clone)]
pub struct ReadSpecs {
    pub specs: SpecSet,
    /// The full commit id.
    pub commit: String,
    /// The branch tip that was not applied (`[source] verify`): then `commit` is the last
    /// verified one.
    pub refused: Option<Refusal>,
    /// `commit` does not descend from the commit applied before it: a rewind (applied
    /// without `[source] verify`, or accepted by an operator).
    pub rewound: Option<Rewind>,
}

/// A commit applied although it does not descend from the commit applied before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewind {
    /// The commit rewound to, its predecessor, and the names of that one's specs: what the
    /// valves judge the rewind's deletes by.
    pub batch: RewindBatch,
    /// When it was first applied (unix ms).
    pub at_ms: u64,
    /// Found by this read (not recorded before): the daemon tells it once.
    pub detected: bool,
}

/// Why the source could not be read. Shown with the userinfo of any URL in it masked
/// ([`crate::redact::urls`]): the location may be a `[source] url` with a password, and git's
/// messages quote it.
#[derive(Debug, thiserror::Error)]
#[error(
    "source {}: {}",
    crate::redact::urls(.location),
    crate::redact::urls(.message)
)]
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

/// Reads the configured source as `proxsync plan` does ([`Use::Inspect`], nothing
/// remembered), reusing `cache`: the running daemon's, when it answers a plan (a read of the
/// tip it last read parses nothing). The caller fetched a remote already.
pub(crate) fn inspect_with(
    config: &Config,
    cache: Arc<Mutex<ParseCache>>,
) -> Result<ReadSpecs, SourceError> {
    let mut source = Source::new(config);
    source.remember = false;
    source.cache = cache;
    source.read()
}

/// The daemon's view of its source: where to read, what to watch, and the parse cache.
pub(crate) struct Source {
    location: SourceLocation,
    branch: String,
    dir: PathBuf,
    /// The repository read: the local path, or the mirror of a remote.
    repo: PathBuf,
    /// Shared with the control socket, whose `plan` reads through it.
    cache: Arc<Mutex<ParseCache>>,
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
    /// The last answer of [`descends_from`]: (commit, ancestor, answer). A refused tip is read
    /// at every cycle, and its answer is a walk of the whole history.
    descent: Option<(String, String, bool)>,
    /// The spec names of the commit a rewind came from, by that commit's id.
    rewound_names: Option<(String, Option<BTreeSet<String>>)>,
    /// `[source] max_specs`: past it, a read holds no spec and one error.
    max_specs: u64,
}

impl Source {
    pub(crate) fn new(config: &Config) -> Source {
        let repo = match &config.source.location {
            SourceLocation::Path(p) => p.clone(),
            SourceLocation::Url { .. } => config.state_dir.join("mirror.git"),
        };
        Source {
            location: config.source.location.clone(),
            branch: config.source.branch.clone(),
            dir: config.source.dir.clone(),
            repo,
            cache: Arc::default(),
            interval: config.source.interval,
            verify: config.source.verify.clone(),
            state_dir: config.state_dir.clone(),
            remember: true,
            refusal: None,
            descent: None,
            rewound_names: None,
            keyring: Arc::new(config.sops_keyring()),
            max_specs: config.source.max_specs,
        }
    }

    /// The parse cache, for the control socket's `plan` ([`inspect_with`]).
    pub(crate) fn shared_cache(&self) -> Arc<Mutex<ParseCache>> {
        self.cache.clone()
    }

    /// The repository as configured (path, or URL with its userinfo masked), naming the
    /// source of the commits remembered in the state directory.
    fn location_label(&self) -> String {
        match &self.location {
            SourceLocation::Path(p) => p.display().to_string(),
            SourceLocation::Url { url, .. } => crate::redact::urls(url).into_owned(),
        }
    }

    fn error(&self, message: String) -> SourceError {
        SourceError {
            location: self.repo.display().to_string(),
            message,
        }
    }

    /// The branch tip refused at the last read, if it was.
    pub(crate) fn refusal(&self) -> Option<&Refusal> {
        self.refusal.as_ref()
    }

    pub(crate) fn is_remote(&self) -> bool {
        matches!(self.location, SourceLocation::Url { .. })
    }

    /// The specs at the tip of the branch, when [`gate::judge`] permits it: with `[source]
    /// verify`, only if its signature verifies and it descends from the last applied commit
    /// (or an operator accepted it), else those of the last verified commit (with the
    /// refusal), else an error. Without `verify` a rewind is read, and named in
    /// [`ReadSpecs::rewound`].
    pub(crate) fn read(&mut self) -> Result<ReadSpecs, SourceError> {
        let tip = self.tip()?;
        let location = self.location_label();
        let applied = chain::applied(&self.state_dir, &location, &self.branch);
        // An install upgraded from a release that kept only the last verified commit.
        let last = applied.as_ref().map(|a| a.commit.clone()).or_else(|| {
            self.verify
                .as_ref()
                .and_then(|_| verify::last_verified(&self.state_dir, &location, &self.branch))
        });
        let verdict = self
            .verify
            .as_ref()
            .map(|how| verify::verify_commit(&self.repo, &tip, how));
        let signature = match &verdict {
            None => Signature::Off,
            Some(Ok(signer)) => Signature::Verified(signer),
            Some(Err(why)) => Signature::Refused(why),
        };
        let descends = match &last {
            Some(last) if *last != tip && verdict.as_ref().is_none_or(Result::is_ok) => {
                self.descends(&tip, last)?
            }
            _ => false,
        };
        let acceptance = chain::acceptance(&self.state_dir, &location, &self.branch);
        let judged = gate::judge(&Evidence {
            tip: &tip,
            signature,
            last_applied: last.as_deref(),
            descends,
            acceptance: acceptance.as_ref(),
        });
        match judged {
            Ok(permit) => {
                if let Signature::Verified(signer) = signature
                    && (self.refusal.take().is_some() || self.remember)
                {
                    tracing::info!(commit = %tip, %signer, "the branch tip's signature verifies");
                }
                self.refusal = None;
                self.read_permitted(tip, &permit, applied)
            }
            Err(refused) => {
                let refusal = Refusal {
                    commit: tip,
                    kind: refused.kind(),
                    reason: refused.to_string(),
                };
                if self.refusal.as_ref() != Some(&refusal) {
                    tracing::warn!(commit = %refusal.commit, kind = %refusal.kind, reason = %refusal.reason, "the branch tip is refused: its specs are not applied");
                }
                self.refusal = Some(refusal.clone());
                let how = self.verify.clone().ok_or_else(|| {
                    self.error("a tip was refused without [source] verify".into())
                })?;
                self.read_last_verified(&how, refusal, applied)
            }
        }
    }

    /// Reads the tip `judge` permitted, remembering it (`Use::Apply`) as the last applied
    /// (and verified) commit, with the rewind it is, if it is one.
    fn read_permitted(
        &mut self,
        tip: String,
        permit: &Permit,
        applied: Option<Applied>,
    ) -> Result<ReadSpecs, SourceError> {
        let now_ms = crate::util::clock::now_ms();
        let rewound = match (permit.rewound_from(), applied) {
            (Some(from), _) => Some((from.to_string(), now_ms)),
            // Still the commit a rewind applied: it stays reported until the next commit.
            (None, Some(a)) if a.commit == tip => a.rewound,
            (None, _) => None,
        };
        let detected = permit.rewound_from().is_some();
        if *permit == Permit::First && self.remember {
            tracing::info!(commit = %tip, "no commit was applied from this source before (a first start, or a lost state directory): the tip is taken as the first");
        }
        if let (true, Some((from, _))) = (detected, &rewound) {
            tracing::warn!(commit = %tip, from = %from, accepted = matches!(permit, Permit::Accepted { .. }), "the branch tip does not descend from the last applied commit: a rewind; its deletes are judged as one batch");
        }
        if self.remember {
            let location = self.location_label();
            if self.verify.is_some()
                && let Err(e) = verify::remember(&self.state_dir, &location, &self.branch, &tip)
            {
                tracing::warn!(error = %e, "cannot remember the verified commit");
            }
            let record = Applied {
                commit: tip.clone(),
                rewound: rewound.clone(),
            };
            if let Err(e) = chain::record_applied(&self.state_dir, &location, &self.branch, &record)
            {
                tracing::warn!(error = %e, "cannot remember the applied commit");
            }
        }
        let mut read = read_at(
            &self.repo,
            Rev::Commit(&tip),
            &self.dir,
            &mut lock_cache(&self.cache),
            &self.keyring,
            self.max_specs,
        )?;
        read.rewound = rewound.map(|(from, at_ms)| self.rewind(tip, from, at_ms, detected));
        Ok(read)
    }

    /// A rewind from `from` to `commit`, with the names of `from`'s specs (read once per
    /// commit; `None` when it can no longer be read).
    fn rewind(&mut self, commit: String, from: String, at_ms: u64, detected: bool) -> Rewind {
        let cached = self.rewound_names.as_ref().filter(|(id, _)| *id == from);
        let from_specs = match cached {
            Some((_, names)) => names.clone(),
            None => {
                let names = match read_at(
                    &self.repo,
                    Rev::Commit(&from),
                    &self.dir,
                    &mut ParseCache::new(),
                    &self.keyring,
                    self.max_specs,
                ) {
                    Ok(read) => Some(
                        read.specs
                            .specs
                            .iter()
                            .map(|s| s.name.to_string())
                            .chain(read.specs.invalid_names().into_iter().map(str::to_string))
                            .collect(),
                    ),
                    Err(e) => {
                        tracing::warn!(commit = %from, error = %e, "cannot read the commit rewound from: its deletes cannot be judged as one batch, so they are refused");
                        None
                    }
                };
                self.rewound_names = Some((from.clone(), names.clone()));
                names
            }
        };
        Rewind {
            batch: RewindBatch {
                commit,
                from,
                from_specs,
            },
            at_ms,
            detected,
        }
    }

    /// Whether `commit` descends from `ancestor` (see [`descends_from`]), the last answer kept.
    fn descends(&mut self, commit: &str, ancestor: &str) -> Result<bool, SourceError> {
        if let Some((c, a, answer)) = &self.descent
            && c == commit
            && a == ancestor
        {
            return Ok(*answer);
        }
        allow_foreign_owner();
        let answer = git2::Repository::open(&self.repo)
            .map_err(|e| e.message().to_string())
            .and_then(|repo| descends_from(&repo, commit, ancestor))
            .map_err(|e| self.error(format!("cannot compare {commit} with {ancestor}: {e}")))?;
        self.descent = Some((commit.to_string(), ancestor.to_string(), answer));
        Ok(answer)
    }

    /// The specs of the last verified commit, checked again (the keys may have changed since),
    /// when the tip is refused.
    fn read_last_verified(
        &mut self,
        how: &CommitVerification,
        refusal: Refusal,
        applied: Option<Applied>,
    ) -> Result<ReadSpecs, SourceError> {
        let refused = format!("commit {} refused: {}", refusal.commit, refusal.reason);
        let last = verify::last_verified(&self.state_dir, &self.location_label(), &self.branch)
            .filter(|c| *c != refusal.commit);
        let Some(last) = last else {
            return Err(self.error(format!(
                "{refused}; no earlier verified commit, so nothing is applied"
            )));
        };
        // Both are written together while verify is on; they differ when it was off for a
        // while, and the older verified commit would then be a rewind.
        if let Some(a) = applied.as_ref().filter(|a| a.commit != last) {
            return Err(self.error(format!(
                "{refused}; the last verified commit {last} is not the last applied commit {} \
                 ([source] verify was off meanwhile?), so nothing is applied",
                a.commit
            )));
        }
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
            &mut lock_cache(&self.cache),
            &self.keyring,
            self.max_specs,
        )?;
        read.refused = Some(refusal);
        // The commit in use may itself be an accepted rewind, still reported.
        if let Some(Applied {
            commit,
            rewound: Some((from, at_ms)),
        }) = applied
            && commit == last
        {
            read.rewound = Some(self.rewind(commit, from, at_ms, false));
        }
        Ok(read)
    }

    /// `proxsync accept commit`: records that an operator accepts `commit` (a full id or a
    /// unique prefix of 7 or more hex digits) over the last applied commit, although it does
    /// not descend from it. The commit must be in the repository (a remote's: in the mirror)
    /// and verify. Ok: what was done, and whether an acceptance was recorded (nothing is
    /// recorded for a commit that needs none).
    pub(crate) fn accept(&mut self, commit: &str, by: &str) -> Result<(String, bool), SourceError> {
        let Some(how) = self.verify.clone() else {
            return Err(self.error(
                "[source] verify is off: a commit that does not descend from the last applied \
                 one is applied without acceptance (and reported as a rewind); there is nothing \
                 to accept"
                    .into(),
            ));
        };
        let id = self.resolve(commit)?;
        if let Err(why) = verify::verify_commit(&self.repo, &id, &how) {
            return Err(self.error(format!(
                "commit {id} does not verify ({why}): only a commit signed by a trusted key can \
                 be accepted"
            )));
        }
        let location = self.location_label();
        let last = chain::applied(&self.state_dir, &location, &self.branch)
            .map(|a| a.commit)
            .or_else(|| verify::last_verified(&self.state_dir, &location, &self.branch));
        let Some(last) = last else {
            return Ok((
                format!(
                    "nothing was applied from this source yet: commit {id} is applied without \
                     acceptance once it is the branch tip"
                ),
                false,
            ));
        };
        if self.descends(&id, &last)? {
            return Ok((
                format!(
                    "commit {id} descends from the last applied commit {last}: it is applied \
                     without acceptance once it is the branch tip"
                ),
                false,
            ));
        }
        let accepted = gate::Acceptance {
            commit: id.clone(),
            over: last.clone(),
        };
        let file = chain::record_acceptance(
            &self.state_dir,
            &location,
            &self.branch,
            &accepted,
            crate::util::clock::system_now(),
            by,
        )
        .map_err(|e| self.error(e))?;
        let mut message = format!(
            "accepted commit {id} over the last applied commit {last} (recorded in {})",
            file.display()
        );
        match self.tip() {
            Ok(tip) if tip != id => message.push_str(&format!(
                "; the branch tip is {tip}, not this commit: the acceptance takes effect while \
                 the tip is {id}"
            )),
            _ => {}
        }
        Ok((message, true))
    }

    /// The full id of the commit `name` (a full id or a unique prefix of 7 or more hex
    /// digits) names in the repository.
    fn resolve(&self, name: &str) -> Result<String, SourceError> {
        if name.len() < 7 || name.len() > 64 || !name.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(self.error(format!(
                "{name:?} is not a commit id: name the commit by its id (7 to 40 hex digits), as \
                 _summary.yaml's refusedCommit or `proxsync status` shows it"
            )));
        }
        allow_foreign_owner();
        let repo = git2::Repository::open(&self.repo).map_err(|e| {
            self.error(format!(
                "not a git repository ({}){}",
                e.message(),
                if self.is_remote() {
                    "; the mirror is made by the daemon or `proxsync run --once`"
                } else {
                    ""
                }
            ))
        })?;
        let found = repo.find_commit_by_prefix(name).map_err(|e| {
            self.error(format!(
                "no single commit {name} in the repository ({}){}",
                e.message(),
                if self.is_remote() {
                    "; a remote's commits are read from the mirror, which the daemon fetches \
                     every [source] interval"
                } else {
                    ""
                }
            ))
        })?;
        Ok(found.id().to_string())
    }

    /// The commit id at the tip of the branch: cheap, so the daemon walks the tree again only
    /// when the branch moved.
    pub(crate) fn tip(&self) -> Result<String, SourceError> {
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
    pub(crate) fn watch_paths(&self) -> Vec<PathBuf> {
        let git_dir = if self.repo.join(".git").is_dir() {
            self.repo.join(".git")
        } else {
            self.repo.clone()
        };
        vec![git_dir.join("refs").join("heads"), git_dir.clone()]
    }

    /// Fetches the branch of the remote into the mirror (made on first use). Only
    /// `refs/heads/<branch>` is fetched, no tags and never `refs/replace/*` (a replace ref
    /// would make `git verify-commit` check another commit than the one read); replace refs a
    /// mirror made by an older release holds are removed. Blocking; run it off the async
    /// runtime's threads.
    pub(crate) fn fetch_blocking(&self) -> Result<(), SourceError> {
        let SourceLocation::Url {
            url,
            ssh_key_file,
            token_file,
        } = &self.location
        else {
            return Ok(());
        };
        let err = |message: String| SourceError {
            location: crate::redact::urls(url).into_owned(),
            message: crate::redact::urls(&message).into_owned(),
        };
        if !self.repo.join("HEAD").exists() {
            // The mirror's parent is state_dir: created 0700, as the database does.
            if let Some(parent) = self.repo.parent() {
                crate::util::state_dir::create_state_dir(parent)
                    .map_err(|e| err(format!("cannot create {}: {e}", parent.display())))?;
            }
            let mut init = mirror_git();
            init.args(["init", "--bare", "--quiet"]).arg(&self.repo);
            run_git(init, "git init").map_err(err)?;
        }
        let mut cmd = mirror_git();
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
        let branch = format!("+refs/heads/{0}:refs/heads/{0}", self.branch);
        cmd.arg("--git-dir").arg(&self.repo).args([
            "fetch",
            "--prune",
            "--no-tags",
            "--no-write-fetch-head",
            "--quiet",
            "--end-of-options",
            url,
            &branch,
        ]);
        run_git(cmd, "git fetch").map_err(err)?;
        forget_mirror_extras(&self.repo).map_err(err)
    }
}

/// `git` for the mirror: never asking on a terminal, without the system config, and with
/// replace objects off.
fn mirror_git() -> std::process::Command {
    let mut cmd = std::process::Command::new("git");
    cmd.arg("--no-replace-objects")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_NO_REPLACE_OBJECTS", "1");
    cmd
}

/// Runs a git command; its error output on failure (the caller masks URLs in it).
fn run_git(mut cmd: std::process::Command, what: &str) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// Removes from the mirror what an older release's `git clone --mirror` left and proxsync
/// does not read: every `refs/replace/*` ref, and the `origin` remote's config (its URL may
/// hold a password).
fn forget_mirror_extras(mirror: &Path) -> Result<(), String> {
    allow_foreign_owner();
    let repo = git2::Repository::open(mirror)
        .map_err(|e| format!("the mirror is not a git repository: {}", e.message()))?;
    let replace: Vec<String> = repo
        .references_glob("refs/replace/*")
        .map_err(|e| e.message().to_string())?
        .filter_map(|r| r.ok()?.name().ok().map(str::to_string))
        .collect();
    for name in replace {
        repo.find_reference(&name)
            .and_then(|mut r| r.delete())
            .map_err(|e| format!("cannot remove {name} from the mirror: {}", e.message()))?;
    }
    let mut config = repo
        .config()
        .and_then(|c| c.open_level(git2::ConfigLevel::Local))
        .map_err(|e| format!("cannot read the mirror's config: {}", e.message()))?;
    for key in [
        "remote.origin.url",
        "remote.origin.fetch",
        "remote.origin.mirror",
    ] {
        match config.remove_multivar(key, ".*") {
            Ok(()) => {}
            Err(e) if e.code() == git2::ErrorCode::NotFound => {}
            Err(e) => return Err(format!("cannot clean the mirror's config: {}", e.message())),
        }
    }
    Ok(())
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
        #[allow(unsafe_code)]
        if let Err(e) = unsafe { git2::opts::set_verify_owner_validation(false) } {
            tracing::warn!(error = %e, "cannot relax libgit2's ownership check");
        }
    });
}

/// Parsed files by (path, blob id): their specs, shared with the spec sets read (an unchanged
/// spec is held once however many commits are read), and their diagnostics.
/// Keyed by the file, its blob and its defaults' fingerprint
/// (`spec::defaults::DefaultsSet::fingerprint`): a changed `_defaults.yaml` parses the files
/// below it again.
#[derive(Default, Clone)]
pub(crate) struct ParseCache {
    files: HashMap<CacheKey, Parsed>,
    /// The last read whole, by its commit and spec directory: read again (a plan beside the
    /// daemon, at the tip its cycle read), it is that read's set, with no walk of the tree
    /// (at 50,000 specs, a third of a second). Only a read in which every file was read.
    last: Option<(git2::Oid, PathBuf, spec::SpecSet)>,
}

impl ParseCache {
    pub(crate) fn new() -> ParseCache {
        ParseCache::default()
    }
}

/// The cache, for one read. A read that panicked left it as whole as any read leaves it: its
/// entries are parses of files, each complete, so poisoning says nothing here.
fn lock_cache(cache: &Mutex<ParseCache>) -> MutexGuard<'_, ParseCache> {
    cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One file's parse as the cache keeps it: its guests' specs, its diagnostics, its images.
/// One spec and nothing else (most files) is held as its `Arc` alone: 16 bytes in the cache's
/// table where three `Vec`s took 72, and no block of its own (at 50,000 files, 5.5 MiB).
#[derive(Clone)]
pub(crate) enum Parsed {
    One(Arc<spec::Spec>),
    Other(Box<ParsedFile>),
}

/// A [`Parsed`] file with other than exactly one spec, or with diagnostics or images.
#[derive(Clone)]
pub(crate) struct ParsedFile {
    specs: Box<[Arc<spec::Spec>]>,
    diagnostics: Box<[Diagnostic]>,
    images: Box<[Arc<spec::images::ImageSpec>]>,
}

impl Parsed {
    fn new(
        specs: Vec<Arc<spec::Spec>>,
        diagnostics: Vec<Diagnostic>,
        images: Vec<Arc<spec::images::ImageSpec>>,
    ) -> Parsed {
        match <[Arc<spec::Spec>; 1]>::try_from(specs) {
            Ok([one]) if diagnostics.is_empty() && images.is_empty() => Parsed::One(one),
            Ok([one]) => Parsed::other(vec![one], diagnostics, images),
            Err(specs) => Parsed::other(specs, diagnostics, images),
        }
    }

    fn other(
        specs: Vec<Arc<spec::Spec>>,
        diagnostics: Vec<Diagnostic>,
        images: Vec<Arc<spec::images::ImageSpec>>,
    ) -> Parsed {
        Parsed::Other(Box::new(ParsedFile {
            specs: specs.into_boxed_slice(),
            diagnostics: diagnostics.into_boxed_slice(),
            images: images.into_boxed_slice(),
        }))
    }

    fn specs(&self) -> &[Arc<spec::Spec>] {
        match self {
            Parsed::One(spec) => std::slice::from_ref(spec),
            Parsed::Other(file) => &file.specs,
        }
    }

    fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            Parsed::One(_) => &[],
            Parsed::Other(file) => &file.diagnostics,
        }
    }

    fn images(&self) -> &[Arc<spec::images::ImageSpec>] {
        match self {
            Parsed::One(_) => &[],
            Parsed::Other(file) => &file.images,
        }
    }
}

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
#[cfg(test)]
pub(crate) fn read_commit(
    repo_path: &Path,
    branch: &str,
    dir: &Path,
) -> Result<ReadSpecs, SourceError> {
    read_commit_cached(repo_path, branch, dir, &mut ParseCache::new())
}

/// [`read_commit`], reusing the parse of files whose blob did not change.
#[cfg(test)]
pub(crate) fn read_commit_cached(
    repo_path: &Path,
    branch: &str,
    dir: &Path,
    cache: &mut ParseCache,
) -> Result<ReadSpecs, SourceError> {
    let none = crate::sops::Keyring::unavailable(crate::config::NO_SOPS_IDENTITY);
    let max_specs = crate::config::DEFAULT_MAX_SPECS;
    read_at(repo_path, Rev::Branch(branch), dir, cache, &none, max_specs)
}

/// Which commit to read: a branch's tip, or one commit by id (a verified one).
#[derive(Clone, Copy)]
enum Rev<'a> {
    #[cfg(test)]
    Branch(&'a str),
    Commit(&'a str),
}

/// The commit `rev` names, and how to name it in messages.
fn find_commit<'r>(
    repo: &'r git2::Repository,
    rev: Rev<'_>,
) -> Result<(git2::Commit<'r>, String), String> {
    match rev {
        #[cfg(test)]
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

/// Reads every spec file under `dir` at `rev` (see [`read_commit`]), holding at most
/// `max_specs` specs (each set member counted before it is expanded, `spec::sets::SpecBudget`):
/// past it, the read holds no spec and one error (an incomplete set: nothing removed).
// Long because: the tree and its defaults, each file from the cache or parsed side by side
// within the read's budget, then the cache rebuilt, or the read refused as a whole.
fn read_at(
    repo_path: &Path,
    rev: Rev<'_>,
    dir: &Path,
    cache: &mut ParseCache,
    keyring: &crate::sops::Keyring,
    max_specs: u64,
) -> Result<ReadSpecs, SourceError> {
    let err = |message: String| SourceError {
        location: repo_path.display().to_string(),
        message,
    };
    allow_foreign_owner();
    let repo = git2::Repository::open(repo_path)
        .map_err(|e| err(format!("not a git repository: {}", e.message())))?;
    let (commit, branch) = find_commit(&repo, rev).map_err(err)?;
    if let Some((id, last_dir, set)) = &cache.last
        && *id == commit.id()
        && last_dir == dir
    {
        return Ok(ReadSpecs {
            specs: set.clone(),
            commit: commit.id().to_string(),
            refused: None,
            rewound: None,
        });
    }
    let rel = spec_dir(dir);
    let rel = rel.as_str();
    let tree = spec_tree(&repo, &commit, &branch, rel).map_err(err)?;
    let (entries, mut diags) = spec_files(&tree, rel).map_err(err)?;
    // One that cannot be opened fails the read as a whole, not file by file.
    repo.odb()
        .map_err(|e| err(format!("cannot open the object database: {}", e.message())))?;
    let (defaults, entries) = tree_defaults(&repo, entries, &diags);
    diags.extend(defaults.diagnostics.iter().cloned());
    // Each file, in order: parsed before (taken from the cache), refused unread, or to read
    // and parse.
    enum File {
        Parsed(CacheKey, Parsed),
        Refused(Diagnostic),
        Parse(CacheKey),
    }
    let budget = spec::sets::SpecBudget::new(max_specs);
    let mut files = Vec::with_capacity(entries.len());
    for (shown, oid) in entries {
        let fingerprint = if defaults.is_empty() {
            0
        } else {
            defaults.fingerprint(&shown)
        };
        let key = (shown.into_boxed_str(), oid, fingerprint);
        if let Some(parsed) = cache.files.remove(&key) {
            // Parsed before, within an earlier read's budget: counted in this one's.
            budget.take(parsed.specs().len() as u64);
            budget.file_counted(&key.0, parsed.specs().len() as u64);
            files.push(File::Parsed(key, parsed));
            continue;
        }
        files.push(File::Parse(key));
    }
    // The new files are read and parsed side by side, each thread with a handle of its own on
    // the repository (at 50,000 specs the reads alone were a second of `proxsync plan` on one
    // thread), each spec's hashes worked out once here.
    // Opened at a thread's first file to read: most reads find every file in the cache.
    let files = crate::util::par::map_init(
        files,
        || None,
        |repo, file| match file {
            File::Parse(key) => {
                let repo = repo.get_or_insert_with(|| {
                    git2::Repository::open(repo_path)
                        .map_err(|e| format!("cannot open the repository: {}", e.message()))
                });
                let blob = (repo.as_ref().map_err(Clone::clone)).and_then(|r| read_blob(r, key.1));
                let blob = match blob {
                    Ok(blob) => blob,
                    Err(message) => {
                        return File::Refused(Diagnostic::error(&key.0, Pos::START, message));
                    }
                };
                let secrets = spec::Secrets::Decrypt(keyring);
                let parsed = defaults.parse_file(&key.0, blob.content(), secrets, &budget);
                let (file_specs, file_diags, images) =
                    (parsed.specs, parsed.diagnostics, parsed.images);
                // Into a Vec of their own size: collected in place, the `Arc`s would keep the
                // parse's buffer (room for 4 `Spec`s) for every file the cache holds.
                let mut shared = Vec::with_capacity(file_specs.len());
                shared.extend(file_specs.into_iter().map(|mut s| {
                    crate::spec::remember_hashes(&mut s);
                    Arc::new(s)
                }));
                File::Parsed(key, Parsed::new(shared, file_diags, images))
            }
            other => other,
        },
    );
    // The cache is rebuilt from this tree's files: those gone from it leave.
    cache.files.clear();
    cache.last = None;
    if let Some(why) = budget.refusal() {
        // Refused as a whole (and nothing cached: past the cap, sets were left unexpanded).
        let shown = if rel.is_empty() { "." } else { rel };
        return Ok(ReadSpecs {
            specs: spec::SpecSet {
                diagnostics: vec![Diagnostic::error(shown, Pos::START, why)],
                ..spec::SpecSet::default()
            },
            commit: commit.id().to_string(),
            refused: None,
            rewound: None,
        });
    }
    let mut specs = Specs::default();
    let mut images = Vec::new();
    let mut every_file_read = true;
    for file in files {
        match file {
            File::Parsed(key, parsed) => {
                parsed.specs().iter().for_each(|s| specs.push(s.clone()));
                diags.extend(parsed.diagnostics().iter().cloned());
                images.extend(parsed.images().iter().cloned());
                cache.files.insert(key, parsed);
            }
            File::Refused(d) => {
                diags.push(d);
                every_file_read = false;
            }
            File::Parse(..) => {}
        }
    }
    let specs = spec::assemble_with_images(specs, images, diags);
    if every_file_read {
        cache.last = Some((commit.id(), dir.to_path_buf(), specs.clone()));
    }
    Ok(ReadSpecs {
        specs,
        commit: commit.id().to_string(),
        refused: None,
        rewound: None,
    })
}

/// The `_defaults.yaml` files among `entries` (parsed; one that cannot be read, is named
/// otherwise, or was refused unread in `diags` held as broken), and the spec files left.
fn tree_defaults(
    repo: &git2::Repository,
    entries: Vec<SpecFile>,
    diags: &[Diagnostic],
) -> (spec::defaults::DefaultsSet, Vec<SpecFile>) {
    let (defaults, entries): (Vec<SpecFile>, Vec<SpecFile>) = entries
        .into_iter()
        .partition(|(shown, _)| spec::defaults::is_meant_as_defaults(shown));
    let (defaults, misnamed): (Vec<SpecFile>, Vec<SpecFile>) = defaults
        .into_iter()
        .partition(|(shown, _)| spec::defaults::is_defaults_file(shown));
    // Small and few: read every time. One that cannot be read holds the specs below it.
    let mut defaults =
        spec::defaults::DefaultsSet::parse(defaults.into_iter().map(|(shown, oid)| {
            let bytes = read_blob(repo, oid).map_or_else(|_| Vec::new(), |b| b.content().to_vec());
            (shown, bytes)
        }));
    for (shown, _) in misnamed {
        defaults.add_broken(&shown, "its name is not _defaults.yaml");
    }
    // Meant as defaults, refused unread (a symlink, a .YAML): it holds the specs below it too.
    let refused: Vec<String> = (diags.iter())
        .map(|d| d.file.clone())
        .filter(|f| spec::defaults::is_meant_as_defaults(f))
        .collect();
    for file in refused {
        defaults.add_broken(&file, "it is not a plain file of that name");
    }
    (defaults, entries)
}

/// The size over which an object named as a parent is not read (a commit is a few KiB).
const MAX_COMMIT_BYTES: usize = 16 * 1024 * 1024;

/// The spec directory `[source] dir` as a path in the repository's tree: `""` for its root.
fn spec_dir(dir: &Path) -> String {
    let rel = dir.to_string_lossy();
    let rel = rel.trim_start_matches("./").trim_end_matches('/');
    if rel == "." { "" } else { rel }.to_string()
}

/// The repository the daemon reads: `[source] path`, or the mirror of `[source] url`.
fn repository(config: &Config) -> PathBuf {
    match &config.source.location {
        SourceLocation::Path(p) => p.clone(),
        SourceLocation::Url { .. } => config.state_dir.join("mirror.git"),
    }
}

/// Where a page finds a spec's effective text: the repository and its spec directory.
#[derive(Debug, Clone)]
pub(crate) struct SpecSource {
    repository: PathBuf,
    dir: String,
}

impl SpecSource {
    pub(crate) fn of(config: &Config) -> SpecSource {
        SpecSource {
            repository: repository(config),
            dir: spec_dir(&config.source.dir),
        }
    }

    /// The effective text of spec `name`, from spec file `path` at `commit` (a full id, as a
    /// status file names them), with the `_defaults.yaml` files above it in the spec
    /// directory merged in ([`spec::effective_document`]: no user-data, no `sops` block).
    /// `Ok(None)` when the file holds no such spec. Reads only.
    pub(crate) fn effective(
        &self,
        commit: &str,
        path: &str,
        name: &str,
    ) -> Result<Option<String>, String> {
        allow_foreign_owner();
        let repo = git2::Repository::open(&self.repository).map_err(|e| {
            format!(
                "{}: not a git repository ({})",
                self.repository.display(),
                e.message()
            )
        })?;
        let commit = git2::Oid::from_str(commit)
            .and_then(|oid| repo.find_commit(oid))
            .map_err(|e| format!("commit {commit}: {}", e.message()))?;
        let tree = commit.tree().map_err(|e| e.message().to_string())?;
        let read = |at: &str| -> Result<Option<Vec<u8>>, String> {
            let Ok(entry) = tree.get_path(Path::new(at)) else {
                return Ok(None);
            };
            if entry.kind() != Some(git2::ObjectType::Blob) || entry.filemode() == 0o120000 {
                return Err(format!("{at} is not a plain file"));
            }
            read_blob(&repo, entry.id()).map(|b| Some(b.content().to_vec()))
        };
        // The defaults files of the file's directory and each above it, up to the spec
        // directory, as the reader takes them.
        let under_root = |d: &str| {
            self.dir.is_empty() || d == self.dir || d.starts_with(&format!("{}/", self.dir))
        };
        let parent = |d: &str| d.rsplit_once('/').map_or("", |(up, _)| up).to_string();
        let mut dir = parent(path);
        if !under_root(&dir) {
            return Err(format!("{path} is not in the spec directory {}", self.dir));
        }
        let (mut defaults, mut broken) = (Vec::new(), Vec::new());
        while under_root(&dir) {
            let file = match dir.as_str() {
                "" => spec::defaults::DEFAULTS_FILE.to_string(),
                d => format!("{d}/{}", spec::defaults::DEFAULTS_FILE),
            };
            match read(&file) {
                Ok(Some(bytes)) => defaults.push((file, bytes)),
                Ok(None) => {}
                Err(why) => broken.push((file, why)),
            }
            if dir.is_empty() {
                break;
            }
            dir = parent(&dir);
        }
        let mut defaults = spec::defaults::DefaultsSet::parse(defaults);
        for (file, why) in broken {
            defaults.add_broken(&file, &why);
        }
        let bytes =
            read(path)?.ok_or_else(|| format!("{path} is not in commit {}", commit.id()))?;
        spec::effective_document(&defaults, path, &bytes, name)
    }
}

/// Whether the commit `applied` (a full id) is the commit `wanted` (a full id or a prefix of 7
/// or more hex digits) or descends from it, in the configured repository (a remote's mirror):
/// what `proxsync wait --commit` asks of `_summary.yaml`'s commit. `Ok(None)` while `wanted`
/// names no commit there yet (a remote's mirror is fetched by the daemon). Reads only.
pub(crate) fn applied_includes(
    config: &Config,
    applied: &str,
    wanted: &str,
) -> Result<Option<bool>, String> {
    if applied
        .get(..wanted.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(wanted))
    {
        return Ok(Some(true));
    }
    let path = repository(config);
    allow_foreign_owner();
    let repo = git2::Repository::open(&path)
        .map_err(|e| format!("{}: not a git repository ({})", path.display(), e.message()))?;
    let Ok(found) = repo.find_commit_by_prefix(wanted) else {
        return Ok(None);
    };
    descends_from(&repo, applied, &found.id().to_string()).map(Some)
}

/// Whether `commit` is `ancestor` or descends from it, by the `parent` lines of the commits'
/// own bytes. libgit2's walks (`git_graph_descendant_of`) would take parents from
/// `info/grafts` and a `shallow` file (libgit2 1.9, `commit.c` `git_commit__parse_ext`) or a
/// commit-graph file (`commit_list.c` `git_commit_list_parse`), any of which can make a
/// rewind look like a fast-forward. A parent missing from the object database (a shallow or
/// damaged repository) ends its line: descent not shown is no descent.
pub(crate) fn descends_from(
    repo: &git2::Repository,
    commit: &str,
    ancestor: &str,
) -> Result<bool, String> {
    let id = |hex: &str| git2::Oid::from_str(hex).map_err(|e| e.message().to_string());
    let (start, ancestor) = (id(commit)?, id(ancestor)?);
    let odb = repo.odb().map_err(|e| e.message().to_string())?;
    let mut seen = HashSet::new();
    let mut stack = vec![start];
    while let Some(oid) = stack.pop() {
        if oid == ancestor {
            return Ok(true);
        }
        if !seen.insert(oid) {
            continue;
        }
        match odb.read_header(oid) {
            Ok((size, git2::ObjectType::Commit)) if size <= MAX_COMMIT_BYTES => {}
            Ok(_) => continue,
            Err(e) if e.code() == git2::ErrorCode::NotFound => continue,
            Err(e) => return Err(e.message().to_string()),
        }
        let object = odb.read(oid).map_err(|e| e.message().to_string())?;
        stack.extend(raw_parents(object.data()));
    }
    Ok(false)
}

/// The `parent` lines of a commit's header (before the first empty line).
fn raw_parents(data: &[u8]) -> impl Iterator<Item = git2::Oid> + '_ {
    data.split(|b| *b == b'\n')
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.strip_prefix(b"parent "))
        .filter_map(|hex| git2::Oid::from_str(std::str::from_utf8(hex).ok()?).ok())
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

/// A spec file's key in the [`ParseCache`].
type CacheKey = (Box<str>, git2::Oid, u64);

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
fn read_blob(repo: &git2::Repository, oid: git2::Oid) -> Result<git2::Blob<'_>, String> {
    let odb = repo
        .odb()
        .map_err(|e| format!("cannot open the object database: {}", e.message()))?;
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
    use crate::gate::commit::RefusalKind;
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

    /// The output of a git command run in `dir`.
    fn git_out(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git is installed");
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn the_mirror_holds_the_branch_only_and_never_a_replace_ref() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let remote = d.join("remote");
        std::fs::create_dir(&remote).unwrap();
        git(&remote, &["init", "-q"]);
        std::fs::write(remote.join("web.yaml"), SPEC).unwrap();
        git(&remote, &["add", "."]);
        git(&remote, &["commit", "-q", "-m", "one"]);
        git(&remote, &["commit", "-q", "--allow-empty", "-m", "two"]);
        let two = git_out(&remote, &["rev-parse", "HEAD"]);
        let one = git_out(&remote, &["rev-parse", "HEAD~1"]);
        git(&remote, &["replace", &two, &one]);
        git(&remote, &["tag", "v1"]);
        git(&remote, &["branch", "other"]);
        let url = format!("file://{}", remote.display());
        let text = format!(
            "state_dir = \"{}\"\n[source]\nurl = \"{url}\"\n[[site]]\nname = \"lab\"\n\
             endpoint = \"https://pve:8006\"\ntoken_id = \"a@pve!b\"\n",
            d.join("state").display(),
        );
        let config = Config::parse(&d.join("proxsync.toml"), &text).unwrap();
        let mirror = d.join("state/mirror.git");

        // A mirror as an older release cloned it: every ref, the replace ref among them, and
        // the URL in its config.
        std::fs::create_dir(d.join("state")).unwrap();
        git(
            d,
            &["clone", "-q", "--mirror", &url, mirror.to_str().unwrap()],
        );
        let refs = |m: &Path| git_out(m, &["for-each-ref", "--format=%(refname)"]);
        assert!(refs(&mirror).contains("refs/replace/"));
        Source::new(&config).fetch_blocking().unwrap();
        let after = refs(&mirror);
        assert!(!after.contains("refs/replace/"), "{after}");
        let mirror_config = std::fs::read_to_string(mirror.join("config")).unwrap();
        assert!(!mirror_config.contains(&url), "{mirror_config}");
        assert_eq!(Source::new(&config).tip().unwrap(), two);

        // A new mirror fetches the branch alone.
        std::fs::remove_dir_all(&mirror).unwrap();
        Source::new(&config).fetch_blocking().unwrap();
        assert_eq!(refs(&mirror), "refs/heads/main");
        assert_eq!(Source::new(&config).tip().unwrap(), two);
    }

    /// A repository with `main` at B (child of A) and an unrelated root commit C; returns
    /// (A, B, C).
    fn two_histories(d: &Path) -> (String, String, String) {
        git(d, &["init", "-q"]);
        std::fs::write(d.join("web.yaml"), SPEC).unwrap();
        git(d, &["add", "."]);
        git(d, &["commit", "-q", "-m", "a"]);
        let a = git_out(d, &["rev-parse", "HEAD"]);
        git(d, &["commit", "-q", "--allow-empty", "-m", "b"]);
        let b = git_out(d, &["rev-parse", "HEAD"]);
        git(d, &["checkout", "-q", "--orphan", "other"]);
        git(d, &["commit", "-q", "-m", "c"]);
        let c = git_out(d, &["rev-parse", "HEAD"]);
        git(d, &["checkout", "-q", "main"]);
        (a, b, c)
    }

    #[test]
    fn descent_is_read_from_the_commits_themselves_not_grafts_or_shallow() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (a, b, c) = two_histories(d);
        let repo = git2::Repository::open(d).unwrap();
        let oid = |s: &str| git2::Oid::from_str(s).unwrap();
        assert_eq!(descends_from(&repo, &b, &a), Ok(true));
        assert_eq!(descends_from(&repo, &a, &a), Ok(true));
        assert_eq!(descends_from(&repo, &a, &b), Ok(false));
        assert_eq!(descends_from(&repo, &c, &a), Ok(false));

        // A graft gives C the parent A, and a `shallow` file cuts B from A: libgit2's own
        // walk believes both; the commits' bytes say otherwise.
        std::fs::create_dir_all(d.join(".git/info")).unwrap();
        std::fs::write(d.join(".git/info/grafts"), format!("{c} {a}\n")).unwrap();
        std::fs::write(d.join(".git/shallow"), format!("{b}\n")).unwrap();
        let repo = git2::Repository::open(d).unwrap();
        assert!(repo.graph_descendant_of(oid(&c), oid(&a)).unwrap());
        assert!(!repo.graph_descendant_of(oid(&b), oid(&a)).unwrap());
        assert_eq!(descends_from(&repo, &c, &a), Ok(false));
        assert_eq!(descends_from(&repo, &b, &a), Ok(true));

        // A replace ref does not count either.
        git(d, &["replace", &c, &b]);
        assert_eq!(descends_from(&repo, &c, &a), Ok(false));
    }

    /// The repository's tip signed with the key `verifying_config` trusts.
    fn sign_tip(repo: &Path, d: &Path, message: &str) -> String {
        let key = format!("user.signingkey={}", d.join("trusted").display());
        git(
            repo,
            &[
                "-c",
                "gpg.format=ssh",
                "-c",
                &key,
                "commit",
                "-q",
                "--allow-empty",
                "-S",
                "-m",
                message,
            ],
        );
        git_out(repo, &["rev-parse", "HEAD"])
    }

    #[test]
    fn an_upgraded_install_compares_the_tip_with_its_last_verified_commit() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let repo = d.join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join("web.yaml"), SPEC).unwrap();
        git(&repo, &["add", "."]);
        let config = verifying_config(d, &repo);
        let first = sign_tip(&repo, d, "first");
        let second = sign_tip(&repo, d, "second");
        // What a release before the commit chain left: the last verified commit only.
        verify::remember(
            &config.state_dir,
            &repo.display().to_string(),
            "main",
            &second,
        )
        .unwrap();
        assert_eq!(
            chain::applied(&config.state_dir, &repo.display().to_string(), "main"),
            None
        );

        // Back at the first commit: a rewind of the remembered one, refused.
        git(&repo, &["reset", "-q", "--hard", &first]);
        let mut source = Source::new(&config);
        let read = source.read().unwrap();
        assert_eq!(read.commit, second, "the last verified commit stays in use");
        let refused = read.refused.expect("refused");
        assert_eq!(
            (refused.commit.as_str(), refused.kind),
            (first.as_str(), RefusalKind::NotDescendant)
        );

        // A descendant of it: applied, and from now on the last applied commit is recorded.
        git(&repo, &["reset", "-q", "--hard", &second]);
        let third = sign_tip(&repo, d, "third");
        let read = Source::new(&config).read().unwrap();
        assert_eq!((read.commit.as_str(), read.refused), (third.as_str(), None));
        assert_eq!(read.rewound, None);
        let applied = chain::applied(&config.state_dir, &repo.display().to_string(), "main");
        assert_eq!(applied.map(|a| a.commit), Some(third));
    }

    #[test]
    fn a_verified_commit_older_than_the_applied_one_is_no_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let repo = d.join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join("web.yaml"), SPEC).unwrap();
        git(&repo, &["add", "."]);
        let config = verifying_config(d, &repo);
        let location = repo.display().to_string();
        let old = sign_tip(&repo, d, "verified, long ago");
        verify::remember(&config.state_dir, &location, "main", &old).unwrap();
        // Then verify was off for a while, and an unsigned commit was applied.
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "unsigned"]);
        let applied = git_out(&repo, &["rev-parse", "HEAD"]);
        let record = Applied {
            commit: applied.clone(),
            rewound: None,
        };
        chain::record_applied(&config.state_dir, &location, "main", &record).unwrap();
        git(
            &repo,
            &["commit", "-q", "--allow-empty", "-m", "unsigned too"],
        );
        let e = Source::new(&config).read().unwrap_err();
        assert!(
            e.message.ends_with(&format!(
                "the last verified commit {old} is not the last applied commit {applied} \
                 ([source] verify was off meanwhile?), so nothing is applied"
            )),
            "{e}"
        );
    }

    #[test]
    fn without_verify_the_first_commit_is_no_rewind_and_a_lost_record_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let repo = d.join("repo");
        std::fs::create_dir(&repo).unwrap();
        let (a, b, _) = two_histories(&repo);
        let text = format!(
            "state_dir = \"{}\"\n[source]\npath = \"{}\"\n[[site]]\nname = \"lab\"\n\
             endpoint = \"https://pve:8006\"\ntoken_id = \"a@pve!b\"\n",
            d.join("state").display(),
            repo.display()
        );
        let config = Config::parse(&d.join("proxsync.toml"), &text).unwrap();
        let read = Source::new(&config).read().unwrap();
        assert_eq!((read.commit.as_str(), &read.rewound), (b.as_str(), &None));

        git(&repo, &["reset", "-q", "--hard", &a]);
        let read = Source::new(&config).read().unwrap();
        let rewind = read.rewound.expect("a rewind");
        assert_eq!(
            (rewind.batch.commit.as_str(), rewind.batch.from.as_str()),
            (a.as_str(), b.as_str())
        );
        assert!(rewind.detected);
        assert_eq!(
            rewind.batch.from_specs,
            Some(["web-01".to_string()].into_iter().collect())
        );
        // Read again (a restart): still the rewind, told already.
        let again = Source::new(&config).read().unwrap().rewound.unwrap();
        assert_eq!((again.batch, again.at_ms), (rewind.batch, rewind.at_ms));
        assert!(!again.detected);

        // The state directory lost: whatever the tip is, it is a first commit.
        std::fs::remove_dir_all(d.join("state")).unwrap();
        git(&repo, &["reset", "-q", "--hard", &b]);
        assert_eq!(Source::new(&config).read().unwrap().rewound, None);
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

    /// A repository whose one commit holds web.yaml (web-01) and db.yaml (db-01).
    fn two_specs_committed() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"]);
        std::fs::write(d.join("web.yaml"), SPEC).unwrap();
        std::fs::write(d.join("db.yaml"), SPEC.replace("web-01", "db-01")).unwrap();
        git(d, &["add", "."]);
        git(d, &["commit", "-q", "-m", "one"]);
        dir
    }

    #[test]
    fn an_unchanged_spec_is_shared_between_reads_with_its_hashes() {
        let dir = two_specs_committed();
        let d = dir.path();
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
        assert!(web.hashes.known());
        assert_eq!(by_name(&second, "db-01").cores(), 4);
        assert_eq!(cache.files.len(), 2, "the old db.yaml left the cache");
        // A file of one spec is held as that spec alone.
        assert!(cache.files.values().all(|p| matches!(p, Parsed::One(_))));
    }

    /// Moves the loose object `id` of the repository at `d` aside; returns its path.
    fn hide_object(d: &Path, id: &str) -> PathBuf {
        let path = d.join(".git/objects").join(&id[..2]).join(&id[2..]);
        std::fs::rename(&path, path.with_extension("hidden")).unwrap();
        path
    }

    fn rev_parse(d: &Path, what: &str) -> String {
        let out = Command::new("git")
            .args(["rev-parse", what])
            .current_dir(d)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    #[test]
    fn a_commit_read_whole_is_read_again_without_its_tree_but_a_failed_file_is_read_again() {
        let dir = two_specs_committed();
        let d = dir.path();
        // db.yaml's blob cannot be read: said, and not remembered.
        let blob = hide_object(d, &rev_parse(d, "HEAD:db.yaml"));
        let mut cache = ParseCache::new();
        let failed = read_commit_cached(d, "main", Path::new("."), &mut cache).unwrap();
        assert!(
            failed
                .specs
                .diagnostics
                .iter()
                .any(|x| x.message.contains("cannot read the blob")),
            "{:?}",
            failed.specs.diagnostics
        );
        std::fs::rename(blob.with_extension("hidden"), &blob).unwrap();
        let whole = read_commit_cached(d, "main", Path::new("."), &mut cache).unwrap();
        assert!(
            whole.specs.diagnostics.is_empty(),
            "{:?}",
            whole.specs.diagnostics
        );
        assert_eq!(whole.specs.specs.len(), 2, "db.yaml read once it can be");
        // Read whole, the commit is read again from the cache: its tree is not walked.
        hide_object(d, &rev_parse(d, "HEAD^{tree}"));
        let again = read_commit_cached(d, "main", Path::new("."), &mut cache).unwrap();
        assert_eq!(again.specs, whole.specs);
        assert_eq!(again.commit, whole.commit);
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
    //! Specs the reader cannot see must not look removed.
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

    /// A page's effective spec: the file at the commit named, with the defaults of its
    /// directory and those above it within the spec directory, and nothing else.
    #[test]
    fn a_specs_effective_text_is_read_at_its_commit_with_the_defaults_above_it() {
        let defaults = |node: &str| {
            format!(
                "apiVersion: proxsync.io/v1\nkind: ProxmoxDefaults\nspec:\n  forProvider:\n    node: {node}\n    pool: from-{node}\n"
            )
        };
        let eu = "apiVersion: proxsync.io/v1\nkind: ProxmoxDefaults\nspec:\n  forProvider:\n    node: pve2\n";
        let web = "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: web-02\nspec:\n  forProvider:\n    site: lab\n    image: \"9000\"\n    userData: \"#cloud-config\\n\"\n";
        let dir = repo_with(&[
            ("_defaults.yaml", defaults("above").as_bytes()),
            ("specs/_defaults.yaml", defaults("pve1").as_bytes()),
            ("specs/eu/_defaults.yaml", eu.as_bytes()),
            ("specs/us/_defaults.yaml", defaults("beside").as_bytes()),
            ("specs/eu/web.yaml", web.as_bytes()),
        ]);
        let d = dir.path();
        let first = git(d, &["rev-parse", "HEAD"]);
        std::fs::write(d.join("specs/eu/web.yaml"), web.replace("9000", "9001")).unwrap();
        git(d, &["commit", "-q", "-am", "two"]);
        let text = format!(
            "state_dir = \"{}\"\n[source]\npath = \"{}\"\ndir = \"specs\"\n[[site]]\nname = \"lab\"\n\
             endpoint = \"https://pve:8006\"\ntoken_id = \"a@pve!b\"\n",
            d.join("state").display(),
            d.display(),
        );
        let config = Config::parse(&d.join("proxsync.toml"), &text).unwrap();
        let source = SpecSource::of(&config);
        let shown = source
            .effective(&first, "specs/eu/web.yaml", "web-02")
            .unwrap()
            .unwrap();
        assert!(
            shown.contains("image: \"9000\"\n"),
            "at its commit: {shown}"
        );
        assert!(
            shown.contains("node: pve2  # specs/eu/_defaults.yaml:5"),
            "{shown}"
        );
        assert!(
            shown.contains("pool: from-pve1  # specs/_defaults.yaml:6"),
            "{shown}"
        );
        assert!(
            !shown.contains("above") && !shown.contains("beside"),
            "{shown}"
        );
        assert!(!shown.contains("#cloud-config"), "{shown}");
        let head = git(d, &["rev-parse", "HEAD"]);
        let now = source
            .effective(&head, "specs/eu/web.yaml", "web-02")
            .unwrap()
            .unwrap();
        assert!(now.contains("image: \"9001\"\n"), "{now}");
        assert_eq!(
            source.effective(&head, "specs/eu/web.yaml", "db-01"),
            Ok(None)
        );
        for (commit, path, says) in [
            (head.as_str(), "web.yaml", "not in the spec directory specs"),
            (head.as_str(), "specs/eu/gone.yaml", "not in commit"),
            (
                "0000000000000000000000000000000000000000",
                "specs/eu/web.yaml",
                "commit 0000",
            ),
        ] {
            let err = source.effective(commit, path, "web-02").unwrap_err();
            assert!(err.contains(says), "{path}: {err}");
        }
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
    fn a_symlinked_defaults_file_holds_the_specs_below() {
        let dir = repo_with(&[(
            "common/defaults.txt",
            b"apiVersion: proxsync.io/v1\nkind: ProxmoxDefaults\nspec:\n  deletionPolicy: Orphan\n",
        )]);
        let d = dir.path();
        std::os::unix::fs::symlink("common/defaults.txt", d.join("_defaults.yaml")).unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "link"]);
        let read = read_commit(d, "main", Path::new(".")).unwrap();
        assert!(
            !read.specs.specs.iter().any(|s| s.name == "web-01"),
            "read without its defaults: {:?}",
            errors(&read)
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
