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
