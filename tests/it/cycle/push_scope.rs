//! The cycle after a push, against two fakepve sites with the engine in this process: it looks
//! again only at the sites the push touched (the spec's old and new site, its record's), acts
//! only there, and leaves the other sites to the next full cycle, which looks at every site.
//! And what a push's cycle reads after acting: only the records its actions wrote.

use crate::common;

use common::engine::{Workspace, spec};
use common::{FakePve, default_scenario};
use proxsync::config::Config;
use proxsync::engine::{CycleReport, Engine, check_spec_sites};
use proxsync::plan::{Action, Verdict};
use proxsync::spec::SpecSet;

/// Two sites, `lab` and `other`, and an engine on their workspace.
struct Setup {
    lab: FakePve,
    other: FakePve,
    ws: Workspace,
    engine: Engine,
    config: Config,
}

impl Setup {
    fn new() -> Setup {
        let lab = FakePve::start(default_scenario());
        let other = FakePve::start(default_scenario());
        let ws = Workspace::two_sites(&lab, &other, "");
        let config = Config::load(&ws.config()).expect("config");
        let engine = Engine::new(config.clone()).expect("engine");
        Setup {
            lab,
            other,
            ws,
            engine,
            config,
        }
    }

    /// Commits `files` and reads the specs of that commit.
    fn commit(&self, files: &[(&str, String)]) -> (SpecSet, String) {
        self.ws.commit_specs(files);
        let read = proxsync::source::read_configured(&self.config, proxsync::source::Use::Apply)
            .expect("the specs of the commit");
        let mut specs = read.specs;
        check_spec_sites(&self.config, &mut specs);
        (specs, read.commit)
    }

    async fn full(&mut self, (specs, commit): &(SpecSet, String)) -> CycleReport {
        self.engine
            .reconcile(specs, Some(commit))
            .await
            .expect("a cycle")
    }

    async fn after_push(&mut self, (specs, commit): &(SpecSet, String)) -> CycleReport {
        self.engine
            .reconcile_after_push(specs, Some(commit))
            .await
            .expect("a cycle")
    }

    fn clear_requests(&mut self) {
        self.lab.clear_requests();
        self.other.clear_requests();
    }
}

/// A spec at site `other`.
fn other_spec(name: &str, extra: &str) -> String {
    spec(name, "pve1", "9000", extra).replace("site: lab", "site: other")
}

fn vmid(report: &CycleReport, name: &str) -> u32 {
    match report.plan.verdicts.get(name) {
        Some(Verdict::UpToDate { vmid }) => *vmid,
        other => panic!("{name}: {other:?}"),
    }
}

fn sites(names: &[&str]) -> Option<std::collections::BTreeSet<String>> {
    Some(names.iter().map(|s| s.to_string()).collect())
}

#[tokio::test]
async fn a_push_looks_again_only_at_the_site_it_touched_and_acts_only_there() {
    let mut s = Setup::new();
    let first = s.commit(&[
        ("a.yaml", spec("web-a", "pve1", "9000", "")),
        ("b.yaml", other_spec("web-b", "")),
    ]);
    // The first cycle after a start has no last look: it looks at every site.
    let created = s.after_push(&first).await;
    assert_eq!(created.scope, None);
    assert_eq!(created.results.len(), 2, "{:?}", created.results);
    let settled = s.full(&first).await;
    let b = vmid(&settled, "web-b");

    // A change at `other` that only a look there would find.
    s.other.set_vm(b, serde_json::json!({"status": "stopped"}));
    let tagged = s.commit(&[
        (
            "a.yaml",
            spec("web-a", "pve1", "9000", "    tags: [pushed]\n"),
        ),
        ("b.yaml", other_spec("web-b", "")),
    ]);
    s.clear_requests();
    let pushed = s.after_push(&tagged).await;
    assert_eq!(pushed.scope, sites(&["lab"]));
    assert!(
        s.other.requests().is_empty(),
        "site other was not touched by the push: {:?}",
        s.other.requests()
    );
    let tags_written = s
        .lab
        .requests()
        .iter()
        .any(|r| r.method != "GET" && r.body.contains("pushed"));
    assert!(tags_written, "{:?}", s.lab.requests());
    assert_eq!(s.other.vm(b)["status"], "stopped", "not acted on");

    // The next full cycle looks at every site and starts the VM.
    let full = s.full(&tagged).await;
    assert_eq!(full.scope, None);
    let started = full.results.iter().any(
        |r| matches!(&r.action, Action::Converge { site, why, .. } if site == "other" && why.iter().any(|w| w == "start")),
    );
    assert!(started, "{:?}", full.results);
    assert_eq!(s.other.vm(b)["status"], "running");
}

#[tokio::test]
async fn a_push_that_moves_or_removes_a_spec_looks_at_the_sites_it_left() {
    let mut s = Setup::new();
    let first = s.commit(&[
        ("a.yaml", spec("web-a", "pve1", "9000", "")),
        ("b.yaml", other_spec("web-b", "")),
    ]);
    s.full(&first).await;
    let settled = s.full(&first).await;
    let b = vmid(&settled, "web-b");

    // Removed from `other`: the push looks there (the record's site) and deletes its VM.
    let removed = s.commit(&[("a.yaml", spec("web-a", "pve1", "9000", ""))]);
    s.clear_requests();
    let pushed = s.after_push(&removed).await;
    assert_eq!(pushed.scope, sites(&["other"]));
    assert!(s.lab.requests().is_empty(), "{:?}", s.lab.requests());
    assert!(
        pushed
            .results
            .iter()
            .any(|r| matches!(&r.action, Action::Remove { vmid, .. } if *vmid == b)),
        "{:?}",
        pushed.results
    );

    // Moved from `lab` to `other`: both sites are looked at.
    let moved = s.commit(&[(
        "a.yaml",
        spec("web-a", "pve1", "9000", "").replace("site: lab", "site: other"),
    )]);
    let pushed = s.after_push(&moved).await;
    assert_eq!(pushed.scope, sites(&["lab", "other"]));

    // A push that changes nothing a site reads looks at none, and plans from the last views.
    let again = s.commit(&[(
        "a.yaml",
        spec("web-a", "pve1", "9000", "").replace("site: lab", "site: other"),
    )]);
    s.clear_requests();
    let pushed = s.after_push(&again).await;
    assert_eq!(pushed.scope, sites(&[]));
    assert!(s.lab.requests().is_empty() && s.other.requests().is_empty());
    assert!(pushed.plan.actions.is_empty(), "{:?}", pushed.plan);
}

#[tokio::test]
async fn an_action_due_at_a_site_the_push_did_not_touch_waits_for_a_full_cycle() {
    let mut s = Setup::new();
    // Template 9999 does not exist at `other`: the create fails, and the spec backs off.
    let first = s.commit(&[
        ("a.yaml", spec("web-a", "pve1", "9000", "")),
        ("b.yaml", other_spec("no-image", "").replace("9000", "9999")),
    ]);
    s.full(&first).await;
    s.full(&first).await;
    // A retry is due now; planned from the last view of `other`, it would be a create there.
    assert!(s.engine.clear_backoff("no-image").unwrap());

    let tagged = s.commit(&[
        (
            "a.yaml",
            spec("web-a", "pve1", "9000", "    tags: [pushed]\n"),
        ),
        ("b.yaml", other_spec("no-image", "").replace("9000", "9999")),
    ]);
    s.clear_requests();
    let pushed = s.after_push(&tagged).await;
    assert_eq!(pushed.scope, sites(&["lab"]));
    assert!(
        s.other.requests().is_empty(),
        "nothing sent to a site not looked at: {:?}",
        s.other.requests()
    );
    assert!(
        pushed
            .results
            .iter()
            .all(|r| r.action.spec() == Some("web-a")),
        "{:?}",
        pushed.results
    );

    let full = s.full(&tagged).await;
    assert!(
        full.results
            .iter()
            .any(|r| matches!(&r.action, Action::Create { spec, .. } if spec == "no-image")),
        "the full cycle retries: {:?}",
        full.results
    );
}

/// After acting, the engine reads again only the records the actions wrote (one of six here,
/// not all six): the status and the next cycle's plan see the record of the VM just made.
#[tokio::test]
async fn the_record_an_action_wrote_is_the_one_the_statuses_and_next_plan_see() {
    let mut s = Setup::new();
    let mut files: Vec<(String, String)> = (1..=5)
        .map(|i| {
            (
                format!("{i}.yaml"),
                spec(&format!("web-0{i}"), "pve1", "9000", ""),
            )
        })
        .collect();
    let five = s.commit(&borrowed(&files));
    s.full(&five).await;
    s.full(&five).await;

    files.push(("6.yaml".into(), spec("web-06", "pve1", "9000", "")));
    let six = s.commit(&borrowed(&files));
    let created = s.full(&six).await;
    assert!(
        matches!(created.results.as_slice(), [r] if matches!(&r.action, Action::Create { spec, .. } if spec == "web-06")),
        "{:?}",
        created.results
    );
    let after = created.after.expect("a plan after acting");
    assert!(
        matches!(after.verdicts.get("web-06"), Some(Verdict::UpToDate { .. })),
        "{:?}",
        after.verdicts.get("web-06")
    );
    assert!(s.ws.status("web-06")["vmId"].as_u64().is_some());
    let next = s.full(&six).await;
    assert!(next.plan.actions.is_empty(), "{:?}", next.plan.actions);
}

fn borrowed(files: &[(String, String)]) -> Vec<(&str, String)> {
    files.iter().map(|(f, t)| (f.as_str(), t.clone())).collect()
}
