//! The task durations an exercise measured, kept in `<state_dir>/exercise-durations.json` (per
//! site, per task type, seconds): `doctor --exercise` writes them, and each site's client takes
//! them as its adaptive concurrency's first estimates (`concurrency::NodeLimits::seed`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Report;

/// The file the durations are written to.
pub fn durations_path(state_dir: &Path) -> PathBuf {
    state_dir.join("exercise-durations.json")
}

/// Writes the run's durations for `site` into [`durations_path`], keeping other sites'.
pub fn write_durations(state_dir: &Path, site: &str, report: &Report) -> std::io::Result<()> {
    let path = durations_path(state_dir);
    let mut all: BTreeMap<String, BTreeMap<String, f64>> = std::fs::read(&path)
        .ok()
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
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&all)?)?;
    std::fs::rename(&tmp, &path)
}

/// The durations `doctor --exercise` last wrote for `site`, per task type (none: no file, or
/// one that cannot be read).
pub fn read_durations(state_dir: &Path, site: &str) -> BTreeMap<String, Duration> {
    let all: BTreeMap<String, BTreeMap<String, f64>> = std::fs::read(durations_path(state_dir))
        .ok()
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
}
