//! A site's endpoint pointed at another cluster (a copied config, a DNS change): the cluster a
//! site reaches is checked against the one recorded at first contact (its root CA), and a
//! changed one stops every action on the site until a person fixes the endpoint or accepts the
//! cluster (`proxsync accept site`). Two fakepve instances are two clusters, each with its own
//! root CA (the harness's certificate). Nodes joining a cluster, or a standalone node becoming a
//! cluster, do not trip it; and an idle cycle reads the root CA no more.

use crate::common;

use common::engine::{Workspace, owned_vms, spec, text};
use common::{FakePve, Scenario, default_scenario};
use proxsync::config::Config;
use proxsync::engine::{CycleReport, Engine, check_spec_sites};
use proxsync::plan::Verdict;
use serde_json::json;

/// A spec at site `other`, at VMID 150 (so lab's first VMID, 100, is free on both clusters).
fn other_spec(name: &str) -> String {
    spec(name, "pve1", "9000", "    vmId: 150\n").replace("site: lab", "site: other")
}

/// The requests that change something (anything but GET), as "METHOD path".
fn writes(pve: &mut FakePve) -> Vec<String> {
    pve.requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// How many times the root CA was read.
fn root_ca_reads(pve: &mut FakePve) -> usize {
    pve.requests()
        .iter()
        .filter(|r| r.path.ends_with("/certificates/info"))
        .count()
}

/// Points site `lab` (the config's first site) from fakepve `from` at fakepve `to`: its
/// endpoint and its CA file, as a copied config or a DNS change (with the other cluster's
/// trust) would.
fn point_lab(ws: &Workspace, from: &FakePve, to: &FakePve) {
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let lab_start = config.find("[[site]]").expect("a site");
    let (head, sites) = config.split_at(lab_start);
    let lab_end = sites[1..].find("[[site]]").map_or(sites.len(), |i| i + 1);
    let (lab, rest) = sites.split_at(lab_end);
    let lab = lab.replace(from.url(), to.url()).replace(
        &from.ca_file().display().to_string(),
        &to.ca_file().display().to_string(),
    );
    std::fs::write(ws.config(), format!("{head}{lab}{rest}")).unwrap();
}

#[test]
fn a_site_pointed_at_another_cluster_stops_until_accepted() {
    let mut a = FakePve::start(default_scenario());
    let mut b = FakePve::start(default_scenario());
    let ws = Workspace::two_sites(&a, &b, "");
    ws.commit_specs(&[
        ("web.yaml", spec("web", "pve1", "9000", "")),
        ("db.yaml", other_spec("db")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(owned_vms(&mut a).len(), 1, "web on lab's cluster: {out}");
    let b_before = owned_vms(&mut b);
    assert_eq!(b_before.len(), 1, "db on other's cluster: {out}");
    let recorded = std::fs::read_to_string(ws.path("state/sites/lab.json")).expect("recorded");
    assert!(
        recorded.contains("\"how\": \"first contact\""),
        "{recorded}"
    );

    // Site lab's endpoint now reaches the other cluster, which has no VM `web`; and the state
    // database was lost meanwhile (a cache, the README says): the recorded identity is not in it.
    point_lab(&ws, &a, &b);
    ws.remove_state();
    a.clear_requests();
    b.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(!ok, "a stalled spec fails the run: {out}");
    assert_eq!(
        writes(&mut b),
        Vec::<String>::new(),
        "nothing created or deleted there: {out}"
    );
    assert_eq!(writes(&mut a), Vec::<String>::new(), "{out}");
    assert_eq!(owned_vms(&mut b), b_before, "{out}");
    assert_eq!(owned_vms(&mut a).len(), 1, "{out}");
    let (status, reason, message) = ws.condition("web", "Stalled");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "SiteIdentityChanged"),
        "{message}"
    );
    assert!(message.contains("proxsync accept site lab"), "{message}");
    assert!(message.contains("fix it in the config"), "{message}");
    assert_eq!(ws.condition("web", "Ready").1, "SiteIdentityChanged");
    assert_eq!(ws.condition("web", "Reconciling").0, "False");
    assert_eq!(
        ws.condition("db", "Ready").0,
        "True",
        "the other site goes on"
    );
    let orphans = std::fs::read_to_string(ws.path("status/_orphans.yaml")).unwrap_or_default();
    assert!(
        !orphans.contains("lab"),
        "nothing of that cluster is judged: {orphans}"
    );

    let doctor = ws.proxsync(&["doctor"]);
    let report = text(&doctor);
    assert_eq!(doctor.status.code(), Some(1), "{report}");
    assert!(
        report.contains("FAIL lab cluster identity: site lab reaches another cluster"),
        "{report}"
    );
    assert!(report.contains("ok   other cluster identity"), "{report}");

    // The endpoint fixed: lab goes on, and the refusal is gone (nothing left to accept).
    point_lab(&ws, &b, &a);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(ws.condition("web", "Ready").0, "True", "{out}");
    let accept = ws.proxsync(&["accept", "site", "lab"]);
    assert!(!accept.status.success());
    assert!(
        text(&accept).contains("nothing to accept"),
        "{}",
        text(&accept)
    );

    // Pointed there again, then accepted: the other cluster is now lab's, and web is made there.
    point_lab(&ws, &a, &b);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert_eq!(owned_vms(&mut b), b_before, "{out}");
    let accept = ws.proxsync(&["accept", "site", "lab"]);
    assert!(accept.status.success(), "{}", text(&accept));
    assert!(
        text(&accept).contains("site lab is now cluster"),
        "{}",
        text(&accept)
    );
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let names: Vec<String> = owned_vms(&mut b).into_iter().map(|(_, n)| n).collect();
    assert!(names.contains(&"web".to_string()), "{names:?} {out}");
    let doctor = ws.proxsync(&["doctor"]);
    assert!(
        text(&doctor).contains("ok   lab cluster identity"),
        "{}",
        text(&doctor)
    );
}

/// An engine on a workspace, as the daemon holds one.
struct Setup {
    ws: Workspace,
    config: Config,
    engine: Engine,
}

impl Setup {
    fn new(pve: &FakePve) -> Setup {
        let ws = Workspace::new(pve);
        let config = Config::load(&ws.config()).expect("config");
        let engine = Engine::new(config.clone()).expect("engine");
        Setup { ws, config, engine }
    }

    async fn cycle(&mut self) -> CycleReport {
        let read = proxsync::source::read_configured(&self.config, proxsync::source::Use::Apply)
            .expect("the specs");
        let mut specs = read.specs;
        check_spec_sites(&self.config, &mut specs);
        self.engine
            .reconcile(&specs, Some(&read.commit))
            .await
            .expect("a cycle")
    }
}

fn verdict(report: &CycleReport, name: &str) -> Verdict {
    let plan = report.after.as_ref().unwrap_or(&report.plan);
    plan.verdicts.get(name).cloned().expect("a verdict")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_joining_do_not_trip_it_and_an_idle_cycle_reads_no_root_ca() {
    let mut pve = FakePve::start(default_scenario());
    let mut s = Setup::new(&pve);
    s.ws.commit_specs(&[("web.yaml", spec("web", "pve1", "9000", ""))]);
    let report = s.cycle().await;
    assert!(report.all_ready(), "{:?}", report.plan.verdicts);
    assert_eq!(root_ca_reads(&mut pve), 1, "read once at first contact");

    pve.clear_requests();
    s.cycle().await;
    let idle: Vec<String> = pve.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        idle.len(),
        2,
        "an idle cycle: the two listings only: {idle:?}"
    );

    // A node joins: the shape changed, the root CA is read again, and it is the same cluster.
    pve.add_node("pve3", true);
    pve.clear_requests();
    let report = s.cycle().await;
    assert!(report.all_ready(), "{:?}", verdict(&report, "web"));
    assert_eq!(root_ca_reads(&mut pve), 1);
    pve.clear_requests();
    s.cycle().await;
    assert_eq!(root_ca_reads(&mut pve), 0, "then idle again");
}

/// Two standalone nodes named alike answer the same `/cluster/status`: only the root CA tells
/// them apart. A standalone node that becomes a cluster (`pvecm create`) keeps its root CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_node_is_told_from_its_twin_by_its_root_ca() {
    let standalone = || {
        Scenario::default()
            .set("nodes", json!([{"name": "pve1", "online": true}]))
            .set("standalone", json!(true))
            .start()
    };
    let mut a = standalone();
    let mut twin = standalone();
    let mut s = Setup::new(&a);
    s.ws.commit_specs(&[("web.yaml", spec("web", "pve1", "9000", ""))]);
    assert!(s.cycle().await.all_ready());

    // `pvecm create` on it: now a cluster, same root CA.
    a.call("set_standalone", json!({"on": false})).unwrap();
    let report = s.cycle().await;
    assert!(report.all_ready(), "{:?}", verdict(&report, "web"));

    // The config now points at the twin (a reload makes a new engine, as the daemon does).
    a.call("set_standalone", json!({"on": true})).unwrap();
    let config = std::fs::read_to_string(s.ws.config()).unwrap();
    let config = config.replace(a.url(), twin.url()).replace(
        &a.ca_file().display().to_string(),
        &twin.ca_file().display().to_string(),
    );
    std::fs::write(s.ws.config(), config).unwrap();
    // The old engine holds the database: closed first, as a reload does.
    let Setup { ws, engine, .. } = s;
    drop(engine);
    let config = Config::load(&ws.config()).unwrap();
    let engine = crate::common::once_free(|| Engine::new(config.clone()));
    let mut s = Setup { ws, config, engine };
    twin.clear_requests();
    let report = s.cycle().await;
    match verdict(&report, "web") {
        Verdict::SiteIdentityChanged { message } => {
            assert!(
                message.contains("a standalone node (nodes pve1;"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(writes(&mut twin), Vec::<String>::new());
    assert_eq!(owned_vms(&mut twin).len(), 0);
}
