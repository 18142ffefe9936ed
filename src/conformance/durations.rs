//! The task durations an exercise measured, kept in `<state_dir>/exercise-durations.json` (per
//! site, per task type, seconds): `doctor --exercise` writes them, and each site's client takes
//! them as its adaptive concurrency's first estimates (`concurrency::NodeLimits::seed`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Report;

/// The file the durations are written to.
pub(crate) fn durations_path(state_dir: &Path) -> PathBuf {
    state_dir.join("exercise-durations.json")
}

/// The most a durations file may hold: a few task types per site.
const MAX_BYTES: u64 = 64 * 1024;

/// The file's bytes, if it is a regular file (not followed through a link, not waited for
/// like a FIFO) of at most [`MAX_BYTES`]; anything else is no file of durations.
fn read_capped(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_BYTES + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= MAX_BYTES).then_some(bytes)
}

/// Writes `bytes` to `path` through a new file beside it, renamed into place. A stale temporary
/// file is removed first only if it is a regular file of the state directory's owner; anything
/// else there (a link planted to redirect the write) is refused.
fn write_replacing(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let tmp = path.with_extension("json.tmp");
    // This user: the owner of the state directory, which it made.
    let owner = path
        .parent()
        .and_then(|d| std::fs::symlink_metadata(d).ok())
        .map(|m| m.uid());
    match std::fs::symlink_metadata(&tmp) {
        Ok(m) if m.file_type().is_file() && Some(m.uid()) == owner => {
            std::fs::remove_file(&tmp)?;
        }
        Ok(_) => {
            return Err(std::io::Error::other(format!(
                "{} exists and is not a file of this user's: remove it",
                tmp.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Writes the run's durations for `site` into [`durations_path`], keeping other sites'.
pub(crate) fn write_durations(
    state_dir: &Path,
    site: &str,
    report: &Report,
) -> std::io::Result<()> {
    let path = durations_path(state_dir);
    let mut all: BTreeMap<String, BTreeMap<String, f64>> = read_capped(&path)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let mine: BTreeMap<String, f64> = report
        .durations()
        .into_iter()
        .map(|(task, took)| (task, took.as_secs_f64()))
        .collect();
    if mine.is_empty() {
        return Ok(());
    }
    all.insert(site.to_string(), mine);
    crate::util::state_dir::create_state_dir(state_dir)?;
    write_replacing(&path, &serde_json::to_vec_pretty(&all)?)
}

/// The durations `doctor --exercise` last wrote for `site`, per task type (none: no file, or
/// one that cannot be read).
pub fn read_durations(state_dir: &Path, site: &str) -> BTreeMap<String, Duration> {
    let all: BTreeMap<String, BTreeMap<String, f64>> = read_capped(&durations_path(state_dir))
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    all.get(site)
        .into_iter()
        .flatten()
        .filter(|(_, secs)| secs.is_finite() && **secs >= 0.0 && **secs < 86_400.0)
        .map(|(task, secs)| (task.clone(), Duration::from_secs_f64(*secs)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{Expect, Outcome, Step};

    fn report(task: &str, secs: u64) -> Report {
        Report {
            steps: vec![Step {
                name: "x".into(),
                expected: Expect::Done,
                task: Some(task.into()),
                took: Duration::from_secs(secs),
                outcome: Outcome::AsExpected,
                text: None,
            }],
        }
    }

    #[test]
    fn each_sites_durations_are_kept_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        assert!(read_durations(&state, "lab").is_empty(), "no file yet");
        write_durations(&state, "lab", &report("qmclone", 4)).unwrap();
        write_durations(&state, "dr", &report("vzcreate", 7)).unwrap();
        // A run that measured nothing keeps what the last one did.
        write_durations(&state, "lab", &Report::default()).unwrap();
        let lab = read_durations(&state, "lab");
        assert_eq!(lab.len(), 1);
        assert_eq!(lab["qmclone"], Duration::from_secs(4));
        assert_eq!(
            read_durations(&state, "dr")["vzcreate"],
            Duration::from_secs(7)
        );
        assert!(read_durations(&state, "other").is_empty());
        // A damaged file, or values no task takes, are no estimates.
        std::fs::write(
            durations_path(&state),
            b"{\"lab\": {\"qmclone\": -1, \"x\": 1e12}}",
        )
        .unwrap();
        assert!(read_durations(&state, "lab").is_empty());
        std::fs::write(durations_path(&state), b"not json").unwrap();
        assert!(read_durations(&state, "lab").is_empty());
    }

    #[test]
    fn a_link_a_fifo_or_a_huge_file_is_no_durations_file() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        write_durations(&state, "lab", &report("qmclone", 4)).unwrap();
        let path = durations_path(&state);
        let good = std::fs::read(&path).unwrap();
        // A link, even to good durations, is not followed; nor to /dev/zero (no end).
        let real = dir.path().join("real.json");
        std::fs::write(&real, &good).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        assert!(read_durations(&state, "lab").is_empty());
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        assert!(read_durations(&state, "lab").is_empty());
        // A FIFO nobody writes: no wait.
        std::fs::remove_file(&path).unwrap();
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        assert!(made.unwrap().success());
        assert!(read_durations(&state, "lab").is_empty());
        // More than 64 KiB: not read.
        std::fs::remove_file(&path).unwrap();
        let mut big = good.clone();
        big.truncate(big.len() - 1);
        big.extend(std::iter::repeat_n(b' ', 70 * 1024));
        big.push(b'}');
        std::fs::write(&path, &big).unwrap();
        assert!(serde_json::from_slice::<serde_json::Value>(&big).is_ok());
        assert!(read_durations(&state, "lab").is_empty());
        std::fs::write(&path, &good).unwrap();
        assert_eq!(read_durations(&state, "lab").len(), 1);
    }

    #[test]
    fn a_link_planted_at_the_temporary_file_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let tmp = durations_path(&state).with_extension("json.tmp");
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        assert!(write_durations(&state, "lab", &report("qmclone", 4)).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // A stale temporary file of a killed write is replaced.
        std::fs::remove_file(&tmp).unwrap();
        std::fs::write(&tmp, b"half").unwrap();
        write_durations(&state, "lab", &report("qmclone", 4)).unwrap();
        assert_eq!(read_durations(&state, "lab").len(), 1);
        assert!(!tmp.exists());
    }
}
