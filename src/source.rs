//! Reading specs from a git commit (never from a work tree, which may be dirty): the tip of
//! `[source] branch` in the local repository `[source] path` (bare or not), under
//! `[source] dir`. Watching for pushes and fetching remotes arrive with the daemon.

use std::path::Path;

use crate::config::{Config, SourceLocation};
use crate::spec::{self, Diagnostic, MAX_FILE_BYTES, Pos, SpecSet};

/// Specs read from a commit.
#[derive(Debug, Clone)]
pub struct ReadSpecs {
    pub specs: SpecSet,
    /// The full commit id.
    pub commit: String,
}

#[derive(Debug, thiserror::Error)]
#[error("source {location}: {message}")]
pub struct SourceError {
    pub location: String,
    pub message: String,
}

/// Reads the configured source.
pub fn read_configured(config: &Config) -> Result<ReadSpecs, SourceError> {
    match &config.source.location {
        SourceLocation::Path(path) => read_commit(path, &config.source.branch, &config.source.dir),
        SourceLocation::Url { url, .. } => Err(SourceError {
            location: url.clone(),
            message: "remote sources (url) are fetched by the daemon, which is not built yet; use a local \
                      `path`, or `--specs DIR`"
                .into(),
        }),
    }
}

/// Reads every `*.yaml`/`*.yml` blob under `dir` at the tip of `branch`.
pub fn read_commit(repo_path: &Path, branch: &str, dir: &Path) -> Result<ReadSpecs, SourceError> {
    let err = |message: String| SourceError {
        location: repo_path.display().to_string(),
        message,
    };
    let repo = git2::Repository::open(repo_path)
        .map_err(|e| err(format!("not a git repository: {}", e.message())))?;
    let reference = repo
        .find_reference(&format!("refs/heads/{branch}"))
        .map_err(|e| err(format!("branch {branch:?}: {}", e.message())))?;
    let commit = reference.peel_to_commit().map_err(|e| {
        err(format!(
            "branch {branch:?} does not point at a commit: {}",
            e.message()
        ))
    })?;
    let root = commit.tree().map_err(|e| err(e.message().to_string()))?;
    let rel = dir.to_string_lossy();
    let rel = rel.trim_start_matches("./").trim_end_matches('/');
    let tree = if rel.is_empty() || rel == "." {
        root
    } else {
        let entry = root.get_path(Path::new(rel)).map_err(|_| {
            err(format!(
                "directory {rel:?} does not exist at {branch} ({})",
                commit.id()
            ))
        })?;
        entry
            .to_object(&repo)
            .and_then(|o| o.peel_to_tree())
            .map_err(|_| err(format!("{rel:?} is not a directory at {branch}")))?
    };

    let mut specs = Vec::new();
    let mut diags = Vec::new();
    let mut entries: Vec<(String, git2::Oid, i32)> = Vec::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |parent, entry| {
        let name = entry.name().unwrap_or("");
        if name.starts_with('.') {
            return git2::TreeWalkResult::Skip;
        }
        if entry.kind() == Some(git2::ObjectType::Blob)
            && (name.ends_with(".yaml") || name.ends_with(".yml"))
        {
            let shown = if rel.is_empty() || rel == "." {
                format!("{parent}{name}")
            } else {
                format!("{rel}/{parent}{name}")
            };
            entries.push((shown, entry.id(), entry.filemode()));
        }
        git2::TreeWalkResult::Ok
    })
    .map_err(|e| err(e.message().to_string()))?;
    entries.sort();
    for (shown, oid, mode) in entries {
        if mode == 0o120000 {
            diags.push(Diagnostic::error(
                &shown,
                Pos::START,
                "a symlink: spec files in git are read as committed, and links are not followed; commit the file itself",
            ));
            continue;
        }
        let blob = match repo.find_blob(oid) {
            Ok(b) => b,
            Err(e) => {
                diags.push(Diagnostic::error(
                    &shown,
                    Pos::START,
                    format!("cannot read the blob: {}", e.message()),
                ));
                continue;
            }
        };
        if blob.size() > MAX_FILE_BYTES {
            diags.push(Diagnostic::error(
                &shown,
                Pos::START,
                format!("file is {} bytes, over the {MAX_FILE_BYTES} byte limit for a spec file; split it", blob.size()),
            ));
            continue;
        }
        let (file_specs, file_diags) = spec::parse_file(&shown, blob.content());
        specs.extend(file_specs);
        diags.extend(file_diags);
    }
    Ok(ReadSpecs {
        specs: spec::assemble(specs, diags),
        commit: commit.id().to_string(),
    })
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
