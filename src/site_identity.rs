//! Each site's recorded cluster identity (the evidence of `gate::site`): the files that hold it,
//! and the check every observation of a site goes through before anything on it is judged.
//!
//! `<state_dir>/sites/<site>.json` holds the identity recorded at the site's first contact (or
//! accepted since); `<state_dir>/sites/<site>.refused.json` the identity last seen and refused,
//! which `proxsync accept site <site>` makes the recorded one. They are files beside the state
//! database, not in it: deleting `proxsync.redb` (a cache the next cycle rebuilds) must not
//! make the next contact record whatever cluster the endpoint reaches by then. Deleting the
//! whole state directory is a fresh install, and records anew.
//!
//! Costs: the root CA is read once per site and process (a new engine after a reload too),
//! and again only when `/cluster/status` shows another shape or the site was unreachable; an
//! idle cycle reads no file and sends no request beyond the observation's two.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::gate::site::{ClusterShape, SiteIdentity, SitePermit, needs_root_ca};
use crate::observe::SiteView;
use crate::pve::Pve;
use crate::pve::types::{ClusterHealth, ClusterStatusEntry};

/// The directory of the identity files inside `state_dir`.
pub(crate) const DIR: &str = "sites";

/// The identity recorded for `site`.
pub(crate) fn recorded_path(state_dir: &Path, site: &str) -> PathBuf {
    state_dir.join(DIR).join(format!("{site}.json"))
}

/// The identity last seen for `site` and refused.
pub(crate) fn refused_path(state_dir: &Path, site: &str) -> PathBuf {
    state_dir.join(DIR).join(format!("{site}.refused.json"))
}

/// An identity file: the identity, and for a person which site, when and how.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdentityFile {
    site: String,
    #[serde(flatten)]
    identity: SiteIdentity,
    /// RFC 3339.
    #[serde(default)]
    at: String,
    /// `first contact`, `accepted`, or `refused`.
    #[serde(default)]
    how: String,
}

/// The identity recorded for `site`, if any. An unreadable or broken file is an error (nothing
/// on the site is done until it is fixed), never "nothing recorded".
pub(crate) fn read_recorded(state_dir: &Path, site: &str) -> Result<Option<SiteIdentity>, String> {
    read(&recorded_path(state_dir, site))
}

/// The identity last refused for `site`, if any.
pub(crate) fn read_refused(state_dir: &Path, site: &str) -> Result<Option<SiteIdentity>, String> {
    read(&refused_path(state_dir, site))
}

fn read(path: &Path) -> Result<Option<SiteIdentity>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let file: IdentityFile = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a site identity file: {e}", path.display()))?;
    let root_ca = crate::pve::values::normalize_fingerprint(&file.identity.root_ca)
        .ok_or_else(|| format!("{}: rootCa is not a SHA-256 fingerprint", path.display()))?;
    Ok(Some(SiteIdentity {
        root_ca,
        ..file.identity
    }))
}

/// Writes an identity file atomically and durably (temp file, fsync, rename), 0640, owned
/// like the state directory (`proxsync accept` may run as root; the daemon must read it).
fn write(path: &Path, site: &str, identity: &SiteIdentity, how: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let dir = path.parent().unwrap_or(Path::new("."));
    let state_dir = dir.parent().unwrap_or(Path::new("."));
    crate::util::state_dir::create_state_dir(state_dir).map_err(fail)?;
    match std::fs::DirBuilder::new().mode(0o750).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(fail(e)),
        _ => {}
    }
    let owner = std::fs::metadata(state_dir).map_err(fail)?;
    let file = IdentityFile {
        site: site.to_string(),
        identity: identity.clone(),
        at: crate::status::rfc3339(crate::util::clock::system_now()),
        how: how.to_string(),
    };
    let mut text = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())?;
    text.push('\n');
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let result = (|| -> std::io::Result<()> {
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        let mine = std::fs::metadata(&tmp)?;
        if (mine.uid(), mine.gid()) != (owner.uid(), owner.gid()) {
            // Only root may give a file away; anyone else writes it as themselves.
            let _ = std::os::unix::fs::chown(&tmp, Some(owner.uid()), Some(owner.gid()));
        }
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(fail)
}

/// `proxsync accept site <site>`: the identity last refused becomes the recorded one.
pub(crate) fn accept(state_dir: &Path, site: &str) -> Result<SiteIdentity, String> {
    let refused = read_refused(state_dir, site)?.ok_or_else(|| {
        format!(
            "nothing to accept: no cluster was refused for site {site} ({} does not exist). A \
             refusal is recorded when a cycle (the daemon, run --once) finds the site reaching \
             another cluster than the recorded one",
            refused_path(state_dir, site).display()
        )
    })?;
    write(&recorded_path(state_dir, site), site, &refused, "accepted")?;
    let _ = std::fs::remove_file(refused_path(state_dir, site));
    Ok(refused)
}

/// What was seen of a site: its shape, and the identity read while it had that shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub shape: ClusterShape,
    pub identity: SiteIdentity,
}

/// Reads what must be read to know who `view`'s cluster is: the root CA, unless `last` was
/// read at the same shape. `None` for an unreachable view (nothing to check); `Some(Err)` when
/// the root CA could not be read.
pub(crate) async fn see(
    client: &impl Pve,
    view: &SiteView,
    answering: Option<&str>,
    last: Option<Seen>,
) -> Option<Result<Seen, String>> {
    if !view.reachable() {
        return None;
    }
    if let Some(last) = last.filter(|l| !needs_root_ca(Some(&l.shape), &view.cluster)) {
        return Some(Ok(last));
    }
    let node = answering.map(str::to_string).or_else(|| {
        view.health
            .nodes
            .iter()
            .find(|(_, online)| **online)
            .map(|(n, _)| n.clone())
    });
    let Some(node) = node else {
        return Some(Err("no node online to read the root CA from".into()));
    };
    Some(
        client
            .root_ca_fingerprint(&node)
            .await
            .map(|root_ca| Seen {
                identity: SiteIdentity {
                    root_ca,
                    cluster: view.cluster.cluster.clone(),
                    nodes: view.cluster.node_names(),
                },
                shape: view.cluster.clone(),
            })
            .map_err(|e| e.to_string()),
    )
}

/// What the checks remember of one site.
#[derive(Debug, Default)]
struct SiteState {
    /// The last identity seen, at the shape it was read at.
    seen: Option<Seen>,
    /// The recorded identity as last read (`None`: not read in this process yet).
    recorded: Option<Option<SiteIdentity>>,
    /// The identity last refused and written as such.
    refused: Option<SiteIdentity>,
}

/// The site identity checks of one engine (or one `plan`, `doctor`, `adopt`): what was seen
/// and read per site, so an idle cycle reads nothing again.
#[derive(Debug)]
pub(crate) struct SiteChecks {
    state_dir: PathBuf,
    /// Records identities (first contact, refusals). `plan` and `doctor` only read.
    write: bool,
    sites: HashMap<String, SiteState>,
}

impl SiteChecks {
    pub(crate) fn new(state_dir: &Path, write: bool) -> SiteChecks {
        SiteChecks {
            state_dir: state_dir.to_path_buf(),
            write,
            sites: HashMap::new(),
        }
    }

    /// What was last seen of `site` (to hand to [`see`]).
    pub(crate) fn last_seen(&self, site: &str) -> Option<Seen> {
        self.sites.get(site).and_then(|s| s.seen.clone())
    }

    /// Judges `view` by what [`see`] found: a first contact is recorded, the recorded cluster
    /// passes, and another cluster (or a root CA that could not be read) leaves the view
    /// unreachable, with the reason, so nothing on the site is judged or touched.
    pub(crate) fn judge(&mut self, view: &mut SiteView, seen: Option<Result<Seen, String>>) {
        let name = view.name.clone();
        let state = self.sites.entry(name.clone()).or_default();
        let seen = match seen {
            // Unreachable: read the root CA again once it is back (an endpoint moved by DNS
            // often shows as an outage first).
            None => {
                state.seen = None;
                return;
            }
            Some(Err(e)) => {
                state.seen = None;
                *view = SiteView::unreachable(
                    &name,
                    format!(
                        "cannot check that site {name} is the recorded cluster (its root CA \
                         could not be read): {e}"
                    ),
                );
                return;
            }
            Some(Ok(seen)) => seen,
        };
        let first_read = state.recorded.is_none();
        let refused_before = state.refused.is_some();
        // Read again while refused: `proxsync accept` changes the file meanwhile.
        if first_read || refused_before {
            match read_recorded(&self.state_dir, &name) {
                Ok(recorded) => state.recorded = Some(recorded),
                Err(e) => {
                    state.recorded = None;
                    *view = SiteView::identity_refused(
                        &name,
                        format!(
                            "{e}. Nothing is done on site {name} until it can be read: fix the \
                             file, or remove it to record the cluster the site reaches now"
                        ),
                    );
                    return;
                }
            }
        }
        let recorded = state.recorded.clone().flatten();
        state.seen = Some(seen.clone());
        match crate::gate::site::check(&name, recorded.as_ref(), &seen.identity) {
            Ok(SitePermit::FirstContact) => {
                if !self.write {
                    return;
                }
                let path = recorded_path(&self.state_dir, &name);
                if let Err(e) = write(&path, &name, &seen.identity, "first contact") {
                    state.recorded = None;
                    *view = SiteView::unreachable(
                        &name,
                        format!("cannot record site {name}'s cluster identity: {e}"),
                    );
                    return;
                }
                tracing::info!(site = %name, identity = %seen.identity, "recorded the site's cluster identity at first contact");
                state.recorded = Some(Some(seen.identity));
                remove_refused(&self.state_dir, &name, self.write);
            }
            Ok(SitePermit::Recorded) => {
                if refused_before {
                    tracing::info!(site = %name, "the site reaches its recorded cluster again");
                }
                // A refusal left from before (the endpoint was fixed, not accepted) must not be
                // accepted later.
                if first_read || refused_before {
                    remove_refused(&self.state_dir, &name, self.write);
                }
                state.refused = None;
            }
            Err(refusal) => {
                if state.refused.as_ref() != Some(&seen.identity) {
                    tracing::error!(site = %name, "{refusal}");
                    if self.write {
                        let path = refused_path(&self.state_dir, &name);
                        if let Err(e) = write(&path, &name, &seen.identity, "refused") {
                            tracing::error!(site = %name, error = %e, "cannot record the refused identity");
                        }
                    }
                    state.refused = Some(seen.identity);
                }
                *view = SiteView::identity_refused(&name, refusal.to_string());
            }
        }
    }

    /// One check of `site` outside a cycle (`proxsync adopt`): its status read, its root CA,
    /// the verdict (the gate's evidence that the site is its recorded cluster). `Err` says why
    /// nothing may be done there.
    pub(crate) async fn check_now(
        &mut self,
        site: &str,
        client: &impl Pve,
    ) -> Result<crate::gate::site::SiteChecked, String> {
        let entries = client.cluster_status().await.map_err(|e| e.to_string())?;
        let mut view = SiteView::unreachable(site, String::new());
        view.error = None;
        view.health = ClusterHealth::from_entries(&entries);
        view.cluster = ClusterShape::from_entries(&entries);
        let answering = ClusterStatusEntry::answering_node(&entries);
        let seen = see(client, &view, answering.as_deref(), self.last_seen(site)).await;
        self.judge(&mut view, seen);
        match view.error {
            Some(e) => Err(e),
            None => crate::gate::site::checked(&view).map_err(String::from),
        }
    }
}

fn remove_refused(state_dir: &Path, site: &str, write: bool) {
    if write {
        let _ = std::fs::remove_file(refused_path(state_dir, site));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::observe_site_answered;
    use crate::pve::fake::FakePve;

    fn fp(byte: &str) -> String {
        vec![byte; 32].join(":")
    }

    /// One observation of `pve` as site `lab`, judged.
    async fn cycle(checks: &mut SiteChecks, pve: &FakePve) -> SiteView {
        let (mut view, answering) = observe_site_answered("lab", pve).await;
        let seen = see(pve, &view, answering.as_deref(), checks.last_seen("lab")).await;
        checks.judge(&mut view, seen);
        view
    }

    #[tokio::test]
    async fn the_first_contact_is_recorded_and_an_idle_cycle_reads_nothing_again() {
        let dir = tempfile::tempdir().unwrap();
        let pve = FakePve::new(&["pve1", "pve2"]);
        let mut checks = SiteChecks::new(dir.path(), true);
        let view = cycle(&mut checks, &pve).await;
        assert!(view.reachable(), "{:?}", view.error);
        assert_eq!(pve.count("root_ca_fingerprint"), 1);
        assert_eq!(
            pve.calls()
                .iter()
                .find(|c| c.starts_with("root_ca"))
                .cloned(),
            Some("root_ca_fingerprint pve1".to_string()),
            "read from the node that answered"
        );
        let recorded = read_recorded(dir.path(), "lab").unwrap().unwrap();
        assert_eq!(recorded.root_ca, fp("FA"));
        assert_eq!(recorded.cluster.as_deref(), Some("fake"));
        assert_eq!(recorded.nodes, vec!["pve1", "pve2"]);

        // The same shape: no root CA read, the recorded file not read again (removed here).
        std::fs::remove_file(recorded_path(dir.path(), "lab")).unwrap();
        for _ in 0..3 {
            assert!(cycle(&mut checks, &pve).await.reachable());
        }
        assert_eq!(pve.count("root_ca_fingerprint"), 1, "{:?}", pve.calls());
        assert!(!recorded_path(dir.path(), "lab").exists());
    }

    #[tokio::test]
    async fn a_node_joining_reads_the_root_ca_again_and_passes() {
        let dir = tempfile::tempdir().unwrap();
        let pve = FakePve::new(&["pve1"]);
        let mut checks = SiteChecks::new(dir.path(), true);
        assert!(cycle(&mut checks, &pve).await.reachable());
        pve.add_node("pve2");
        let view = cycle(&mut checks, &pve).await;
        assert!(view.reachable(), "{:?}", view.error);
        assert_eq!(pve.count("root_ca_fingerprint"), 2);
        assert!(!refused_path(dir.path(), "lab").exists());
    }

    #[tokio::test]
    async fn another_cluster_is_refused_until_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let pve = FakePve::new(&["pve1"]);
        let mut checks = SiteChecks::new(dir.path(), true);
        assert!(cycle(&mut checks, &pve).await.reachable());

        // The endpoint now reaches another cluster with the same names: a new process (the
        // shape is the same, so only a first read in a process sees it).
        pve.set_root_ca(&fp("0B"));
        let mut checks = SiteChecks::new(dir.path(), true);
        let view = cycle(&mut checks, &pve).await;
        assert!(view.identity_changed && !view.reachable());
        assert!(view.vms.is_empty(), "nothing of it is judged");
        let message = view.error.unwrap();
        assert!(
            message.contains(&fp("FA")) && message.contains(&fp("0B")),
            "{message}"
        );
        assert_eq!(
            read_refused(dir.path(), "lab").unwrap().unwrap().root_ca,
            fp("0B")
        );
        // Still refused, and the recorded identity untouched.
        assert!(cycle(&mut checks, &pve).await.identity_changed);
        assert_eq!(
            read_recorded(dir.path(), "lab").unwrap().unwrap().root_ca,
            fp("FA")
        );

        let accepted = accept(dir.path(), "lab").unwrap();
        assert_eq!(accepted.root_ca, fp("0B"));
        assert!(!refused_path(dir.path(), "lab").exists());
        let view = cycle(&mut checks, &pve).await;
        assert!(view.reachable(), "accepted: {:?}", view.error);
        let err = accept(dir.path(), "lab").unwrap_err();
        assert!(err.contains("nothing to accept"), "{err}");
    }

    #[tokio::test]
    async fn a_refusal_left_from_a_fixed_endpoint_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let pve = FakePve::new(&["pve1"]);
        let mut checks = SiteChecks::new(dir.path(), true);
        assert!(cycle(&mut checks, &pve).await.reachable());
        pve.set_root_ca(&fp("0B"));
        let mut checks = SiteChecks::new(dir.path(), true);
        assert!(cycle(&mut checks, &pve).await.identity_changed);
        // The endpoint is fixed (the restart after a config change): the refusal goes, so a
        // later `accept` cannot take the wrong cluster.
        pve.set_root_ca(&fp("FA"));
        let mut checks = SiteChecks::new(dir.path(), true);
        assert!(cycle(&mut checks, &pve).await.reachable());
        assert!(!refused_path(dir.path(), "lab").exists());
        assert!(accept(dir.path(), "lab").is_err());
    }

    #[tokio::test]
    async fn reading_only_records_nothing_and_a_failed_read_acts_on_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let pve = FakePve::new(&["pve1"]);
        let mut checks = SiteChecks::new(dir.path(), false);
        assert!(cycle(&mut checks, &pve).await.reachable());
        assert!(!dir.path().join(DIR).exists(), "plan writes nothing");

        let mut checks = SiteChecks::new(dir.path(), true);
        pve.fault(
            "root_ca_fingerprint",
            crate::pve::fake::Fault::Refuse(crate::pve::Error::Setup("boom".into())),
        );
        let view = cycle(&mut checks, &pve).await;
        assert!(!view.reachable() && !view.identity_changed);
        assert!(view.error.unwrap().contains("root CA could not be read"));
        assert!(!recorded_path(dir.path(), "lab").exists());
        // Read again at the next cycle.
        assert!(cycle(&mut checks, &pve).await.reachable());
        assert!(recorded_path(dir.path(), "lab").exists());
    }

    #[test]
    fn a_broken_record_is_an_error_not_a_first_contact() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(DIR)).unwrap();
        std::fs::write(recorded_path(dir.path(), "lab"), "{").unwrap();
        let err = read_recorded(dir.path(), "lab").unwrap_err();
        assert!(err.contains("not a site identity file"), "{err}");
        std::fs::write(
            recorded_path(dir.path(), "lab"),
            r#"{"site":"lab","rootCa":"nope"}"#,
        )
        .unwrap();
        assert!(read_recorded(dir.path(), "lab").is_err());
        assert_eq!(read_recorded(dir.path(), "other").unwrap(), None);
    }
}
