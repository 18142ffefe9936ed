//! Second attack on `kind: ProxmoxTemplate`: a `qmtemplate` task that takes time (the harness's
//! `template_timing`: `template: 1` in the config from the task's start, the disks renamed and
//! the config lock released at its end, as qemu-server's `template` does), kills mid-task, and
//! the holds of `template_still_needed` and `made_a_template`.

use crate::common;

use super::images::{Setup, image_doc, setup};
use super::templates::{api, first_image, posts, template_doc, template_guest, vm_named};
use proxsync::config::Config;
use proxsync::engine::Engine;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn templating(s: &mut Setup) -> Vec<u64> {
    let v = s.pve.call("templating", json!({})).expect("templating");
    (v.as_array().cloned().unwrap_or_default().iter())
        .filter_map(Value::as_u64)
        .collect()
}

/// A new engine over the workspace's state directory (the old one dropped first, freeing the
/// database: a restart).
fn new_engine(s: &mut Setup) {
    let scratch = common::engine::Workspace::new(&s.pve);
    let config = Config::load(&scratch.config()).expect("config");
    s.engine = Engine::new(config).expect("a scratch engine");
    let config = Config::load(&s.ws.config()).expect("config");
    s.engine = Engine::new(config).expect("a second engine");
    s.engine.task_wait = Duration::from_millis(100);
}

// ---------------------------------------------------------------- the harness itself

/// The harness's `template_timing`: the listing says template=1 from the task's start, the
/// disks are renamed at its end, and a clone of the VM meanwhile fails on the config lock.
#[tokio::test]
async fn the_harness_s_qmtemplate_takes_time_with_template_1_from_its_start() {
    let mut s = setup(None, &[]);
    s.pve.set_time_scale(1.0);
    s.pve
        .call("template_timing", json!({"secs": 3}))
        .expect("template_timing");
    s.pve
        .call("add_vm", json!({"vmid": 950, "name": "tpl", "config": {"scsi0": "local-lvm:vm-950-disk-0,size=1G"}}))
        .expect("add_vm");
    let (st, body) = api(&s, "POST", "/nodes/pve1/qemu/950/template", &[]);
    assert_eq!(st, 200, "{body}");
    let vm = s.pve.vm(950);
    assert_eq!(vm["template"], true, "{vm}");
    assert_eq!(vm["config"]["template"], 1, "{vm}");
    assert!(
        vm["config"]["scsi0"]
            .as_str()
            .unwrap()
            .contains("vm-950-disk-0"),
        "{vm}"
    );
    assert_eq!(templating(&mut s), vec![950]);
    let (st, body) = api(
        &s,
        "POST",
        "/nodes/pve1/qemu/950/clone",
        &[("newid", "951"), ("full", "1")],
    );
    assert_eq!(st, 500, "a clone waits for the template's flock: {body}");
    assert!(body.contains("can't lock file"), "{body}");
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(templating(&mut s).is_empty());
    let vm = s.pve.vm(950);
    assert!(
        vm["config"]["scsi0"]
            .as_str()
            .unwrap()
            .contains("base-950-disk-0"),
        "{vm}"
    );
    let (st, body) = api(
        &s,
        "POST",
        "/nodes/pve1/qemu/950/clone",
        &[("newid", "951"), ("full", "1")],
    );
    assert_eq!(st, 200, "{body}");
}

// ---------------------------------------------------------------- a slow qmtemplate

/// A template, its guests, and a `qmtemplate` task of `secs` PVE seconds (time_scale 1).
fn slow_template_setup(secs: f64, guests: &[&str]) -> Setup {
    let mut s = setup(None, &[]);
    s.engine.task_wait = Duration::from_millis(100);
    s.pve.set_time_scale(1.0);
    s.pve
        .call("template_timing", json!({"secs": secs}))
        .expect("template_timing");
    let mut files = vec![
        ("images.yaml".to_string(), first_image(&s)),
        ("template.yaml".to_string(), template_doc("")),
    ];
    for g in guests {
        files.push((format!("{g}.yaml"), template_guest(g, "pve1", "")));
    }
    let files: Vec<(&str, String)> = files.iter().map(|(f, t)| (f.as_str(), t.clone())).collect();
    s.recommit(&files);
    s
}

/// Clone requests that came while the source's `qmtemplate` task ran.
fn clones_while_templating(s: &mut Setup) -> Vec<Value> {
    let v = s.pve.call("clones_while_templating", json!({})).unwrap();
    v.as_array().cloned().unwrap_or_default()
}

/// Cycles every 300 ms for `secs`.
async fn cycle_for(s: &mut Setup, secs: f64) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs_f64(secs) {
        s.cycle().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The listing says template=1 from the `qmtemplate` task's start (qemu-server writes it
/// before the worker converts the disks). A guest must be cloned only once the version is
/// built: no clone POST while the task still runs (PVE's clone waits 1 s for the template's
/// config lock, then fails `can't lock file`).
#[tokio::test]
async fn a_guest_is_not_cloned_from_a_template_whose_qmtemplate_task_still_runs() {
    let mut s = slow_template_setup(6.0, &["web-1"]);
    cycle_for(&mut s, 12.0).await;
    let during = clones_while_templating(&mut s);
    assert!(
        during.is_empty(),
        "web-1 cloned from the template while its qmtemplate task ran: {during:?}; web-1 \
         says: {}",
        s.ready_message("web-1")
    );
    assert!(
        s.ready_message("web-1").starts_with("True"),
        "{}",
        s.ready_message("web-1")
    );
}
// ---------------------------------------------------------------- made_a_template

/// A plain guest web-1 (from the image) stopped and made a template by a person, then the
/// state database lost: web-1 is held (`AdoptRefused`, "delete the template, or remove the
/// proxsync-id line from its notes"). The person removes the line from the template's notes,
/// as told: the hold must clear (web-1 is made anew) in the running engine, not only after a
/// restart.
#[tokio::test]
async fn removing_the_marker_from_a_hand_made_template_s_notes_clears_the_hold() {
    let mut s = setup(None, &[("web-1", "pve1")]);
    s.cycle().await;
    s.cycle().await;
    let vmid = vm_named(&mut s, "web-1").expect("web-1 made")["vmid"]
        .as_u64()
        .unwrap();
    api(
        &s,
        "POST",
        &format!("/nodes/pve1/qemu/{vmid}/status/stop"),
        &[],
    );
    let (st, body) = api(
        &s,
        "POST",
        &format!("/nodes/pve1/qemu/{vmid}/template"),
        &[],
    );
    assert_eq!(st, 200, "{body}");
    s.ws.remove_state();
    new_engine(&mut s);
    s.cycle().await;
    s.cycle().await;
    let held = s.ready_message("web-1");
    assert!(
        held.contains("proxsync-id"),
        "held, saying what to do: {held}"
    );
    // What the status says to do: remove the proxsync-id line from the template's notes.
    let (st, body) = api(
        &s,
        "PUT",
        &format!("/nodes/pve1/qemu/{vmid}/config"),
        &[("description", "golden image, made by hand")],
    );
    assert_eq!(st, 200, "{body}");
    let cfg = s.pve.vm(vmid as u32);
    assert!(!cfg.to_string().contains("proxsync-id"), "{cfg}");
    let before = common::engine::next_seq(&mut s.pve);
    for _ in 0..3 {
        s.cycle().await;
    }
    let requests = s.pve.requests_since(before);
    let ready = s.ready_message("web-1");
    assert!(
        !posts(&requests, "/qemu").is_empty() && ready.starts_with("True"),
        "the marker is gone from VM {vmid}'s notes, as the status asked, yet web-1 is still \
         held: {ready}"
    );
}

/// The same with a restart after the notes are changed: the hold clears (the stale marker was
/// the engine's cache, look.rs `SiteMarkers::read`, kept while the VMID is listed).
#[tokio::test]
async fn removing_the_marker_from_a_hand_made_template_s_notes_clears_after_a_restart() {
    let mut s = setup(None, &[("web-1", "pve1")]);
    s.cycle().await;
    s.cycle().await;
    let vmid = vm_named(&mut s, "web-1").expect("web-1 made")["vmid"]
        .as_u64()
        .unwrap();
    api(
        &s,
        "POST",
        &format!("/nodes/pve1/qemu/{vmid}/status/stop"),
        &[],
    );
    api(
        &s,
        "POST",
        &format!("/nodes/pve1/qemu/{vmid}/template"),
        &[],
    );
    s.ws.remove_state();
    new_engine(&mut s);
    s.cycle().await;
    s.cycle().await;
    let (st, body) = api(
        &s,
        "PUT",
        &format!("/nodes/pve1/qemu/{vmid}/config"),
        &[("description", "golden image, made by hand")],
    );
    assert_eq!(st, 200, "{body}");
    new_engine(&mut s);
    for _ in 0..3 {
        s.cycle().await;
    }
    let ready = s.ready_message("web-1");
    assert!(ready.starts_with("True"), "{ready}");
}

/// The hold's words: web-1 has no `proxsync.io/adopt` annotation, so its status must not say
/// that it consents to take over the template.
#[tokio::test]
async fn a_hand_made_template_s_hold_does_not_claim_an_adopt_consent_never_written() {
    let mut s = setup(None, &[("web-1", "pve1")]);
    s.cycle().await;
    s.cycle().await;
    let vmid = vm_named(&mut s, "web-1").expect("web-1 made")["vmid"]
        .as_u64()
        .unwrap();
    api(
        &s,
        "POST",
        &format!("/nodes/pve1/qemu/{vmid}/status/stop"),
        &[],
    );
    api(
        &s,
        "POST",
        &format!("/nodes/pve1/qemu/{vmid}/template"),
        &[],
    );
    s.ws.remove_state();
    new_engine(&mut s);
    s.cycle().await;
    s.cycle().await;
    let held = s.ready_message("web-1");
    assert!(held.contains("template"), "{held}");
    assert!(
        !held.contains("proxsync.io/adopt") && !held.contains("consents"),
        "web-1 has no adopt annotation, yet its status says: {held}"
    );
}

/// The database lost, then a new version: the old version's template (ours by its verified
/// marker, no record) is listed in `_orphans.yaml`. The entry must say what it is (an old
/// version of template noble) and what a person does about it.
#[tokio::test]
async fn a_lost_old_version_s_orphan_entry_says_what_it_is_and_what_to_do() {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
    ]);
    s.cycle().await;
    s.cycle().await;
    let old = s
        .specs
        .specs
        .iter()
        .find(|t| t.template.is_some())
        .unwrap()
        .name
        .clone();
    s.ws.remove_state();
    new_engine(&mut s);
    let doc = s.new_version();
    s.recommit(&[("images.yaml", doc), ("template.yaml", template_doc(""))]);
    for _ in 0..4 {
        s.cycle().await;
    }
    let orphans = std::fs::read_to_string(s.ws.path("status/_orphans.yaml")).unwrap_or_default();
    eprintln!("{orphans}");
    assert!(orphans.contains(&*old), "{orphans}");
    assert!(
        orphans.contains("template noble") || orphans.contains("old version"),
        "the entry does not say that {old} is an old version of template noble:\n{orphans}"
    );
    assert!(
        orphans.contains("delete") || orphans.contains("qm destroy"),
        "the entry does not say what to do with it:\n{orphans}"
    );
}

// ---------------------------------------------------------------- holds as plan shows them

mod cli {
    use super::*;
    use common::engine::{Workspace, text};
    use common::{FakePve, default_scenario};

    const URL: &str = "https://cloud-images.example/noble/20261115/noble-server-cloudimg-amd64.img";

    fn plan(ws: &Workspace) -> std::process::Output {
        assert_cmd::Command::cargo_bin("proxsync")
            .unwrap()
            .arg("plan")
            .arg("--config")
            .arg(ws.config())
            .env("PROXSYNC_LOG", "warn")
            .output()
            .unwrap()
    }

    /// A plain guest from the image, so that no commit below is an empty set.
    pub(super) fn db_1() -> String {
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata: {name: db-1}\nspec:\n  \
         forProvider:\n    site: lab\n    node: pve1\n    image: {image: noble-cloud}\n    \
         memory: 1Gi\n    disk: 8Gi\n"
            .to_string()
    }

    fn image(url: &str, sum: &str) -> String {
        image_doc(sum).replace(URL, url)
    }

    /// A template built by `run --once` subprocesses; returns the fake, the workspace, the
    /// image's document and the built version's name.
    pub(super) fn built() -> (FakePve, Workspace, String, String) {
        let mut pve = FakePve::start(default_scenario());
        let served = pve
            .call("remote_file", json!({"url": URL, "size": 4096}))
            .unwrap();
        let img = image(URL, served["sha256"].as_str().unwrap());
        let ws = Workspace::new(&pve);
        ws.commit_specs(&[
            ("images.yaml", img.clone()),
            ("template.yaml", template_doc("")),
            ("db-1.yaml", db_1()),
        ]);
        for _ in 0..3 {
            let (ok, out) = ws.run_once();
            assert!(ok, "{out}");
        }
        let vms = pve.vms();
        let t = (vms.iter())
            .find(|v| {
                v["template"] == true && v["name"].as_str().unwrap_or("").starts_with("noble-")
            })
            .unwrap_or_else(|| panic!("{vms:?}"));
        let name = t["name"].as_str().unwrap().to_string();
        (pve, ws, img, name)
    }

    /// The old version is held while the new one cannot be built (its image's URL answers
    /// 404): right. But `plan` and the status must say that it is kept and why, not nothing.
    #[test]
    fn an_old_version_held_for_a_new_one_that_cannot_be_built_is_said() {
        let (mut pve, ws, _img, old) = built();
        let url2 = URL.replace("20261115", "20261201");
        let served = pve
            .call(
                "remote_file",
                json!({"url": url2, "size": 2048, "status": 404}),
            )
            .unwrap();
        let img2 = image(&url2, served["sha256"].as_str().unwrap());
        ws.commit_specs(&[
            ("images.yaml", img2),
            ("template.yaml", template_doc("")),
            ("db-1.yaml", db_1()),
        ]);
        for _ in 0..3 {
            ws.run_once();
        }
        assert!(
            pve.vms().iter().any(|v| v["name"] == old.as_str()),
            "make before break: the old version stays"
        );
        let out = plan(&ws);
        let shown = text(&out);
        let status =
            std::fs::read_to_string(ws.path(&format!("status/{old}.yaml"))).unwrap_or_default();
        eprintln!("PLAN:\n{shown}\nSTATUS {old}:\n{status}");
        assert!(
            shown.contains(&old),
            "plan says nothing of old version {old}, kept until the new one is built:\n{shown}"
        );
    }

    /// The template document deleted entirely: no current version, so the old one goes (no
    /// guest clones from it) or plan says why not.
    #[test]
    fn a_deleted_template_document_removes_its_version_or_plan_says_why() {
        let (mut pve, ws, img, old) = built();
        ws.commit_specs(&[("images.yaml", img), ("db-1.yaml", db_1())]);
        let out = plan(&ws);
        let shown = text(&out);
        eprintln!("PLAN:\n{shown}");
        for _ in 0..3 {
            ws.run_once();
        }
        let left = pve.vms().iter().any(|v| v["name"] == old.as_str());
        let status =
            std::fs::read_to_string(ws.path(&format!("status/{old}.yaml"))).unwrap_or_default();
        assert!(
            !left,
            "old version {old} left after its document was deleted; plan said:\n{shown}\n\
             status:\n{status}"
        );
    }

    /// `deletionPolicy: Orphan` on the template, then a new image version: once the new
    /// version is built the old one is released (left on PVE, no longer this install's), not
    /// held for ever.
    #[test]
    fn an_orphan_policy_template_s_old_version_is_released_not_held() {
        let (mut pve, ws, img, old) = built();
        let old_vmid = (pve.vms().iter())
            .find(|v| v["name"] == old.as_str())
            .unwrap()["vmid"]
            .as_u64()
            .unwrap();
        ws.commit_specs(&[
            ("images.yaml", img.clone()),
            ("template.yaml", template_doc("  deletionPolicy: Orphan\n")),
            ("db-1.yaml", db_1()),
        ]);
        for _ in 0..2 {
            ws.run_once();
        }
        let url2 = URL.replace("20261115", "20261201");
        let served = pve
            .call("remote_file", json!({"url": url2, "size": 2048}))
            .unwrap();
        let img2 = image(&url2, served["sha256"].as_str().unwrap());
        ws.commit_specs(&[
            ("images.yaml", img2),
            ("template.yaml", template_doc("  deletionPolicy: Orphan\n")),
            ("db-1.yaml", db_1()),
        ]);
        let shown_before = text(&plan(&ws));
        for _ in 0..4 {
            ws.run_once();
        }
        let vm = pve.vm(old_vmid as u32);
        let shown = text(&plan(&ws));
        let status =
            std::fs::read_to_string(ws.path(&format!("status/{old}.yaml"))).unwrap_or_default();
        eprintln!("PLAN BEFORE:\n{shown_before}\nPLAN AFTER:\n{shown}\nSTATUS:\n{status}\nVM {vm}");
        let new_built = (pve.vms().iter()).any(|v| {
            v["template"] == true
                && v["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("noble-") && n != old)
        });
        assert!(new_built, "the new version is built");
        assert_eq!(vm["template"], true, "released, never deleted: {vm}");
        let released = !vm["config"]["tags"]
            .as_str()
            .unwrap_or("")
            .contains("proxsync.");
        assert!(
            released,
            "old version {old} (VMID {old_vmid}) not released: {vm}\nplan:\n{shown}"
        );
    }

    /// The template and `guests` committed, the `qmtemplate` task taking 6 PVE seconds (time
    /// scale 1); `proxsync run --once` is SIGKILLed once the task runs (the state database
    /// removed too when `lose_db`), then `run --once` again for 12 s.
    fn kill_mid_qmtemplate(guests: &[&str], lose_db: bool) -> (FakePve, Workspace, u64) {
        let mut pve = FakePve::start(default_scenario());
        let served = pve
            .call("remote_file", json!({"url": URL, "size": 4096}))
            .unwrap();
        let img = image(URL, served["sha256"].as_str().unwrap());
        pve.set_time_scale(1.0);
        pve.call("template_timing", json!({"secs": 6})).unwrap();
        let ws = Workspace::new(&pve);
        let mut files = vec![
            ("images.yaml".to_string(), img),
            ("template.yaml".to_string(), template_doc("")),
        ];
        for g in guests {
            files.push((format!("{g}.yaml"), template_guest(g, "pve1", "")));
        }
        let files: Vec<(&str, String)> =
            files.iter().map(|(f, t)| (f.as_str(), t.clone())).collect();
        ws.commit_specs(&files);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(["run", "--once", "--config"])
            .arg(ws.config())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start proxsync");
        let start = Instant::now();
        let tvmid = loop {
            let running = pve.call("templating", json!({})).unwrap();
            if let Some(v) = running
                .as_array()
                .and_then(|a| a.first())
                .and_then(Value::as_u64)
            {
                break v;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "no qmtemplate task started"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_millis(300));
        let _ = child.kill();
        let _ = child.wait();
        if lose_db {
            let _ = std::fs::remove_file(ws.path("state/proxsync.redb"));
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(12) {
            ws.run_once();
            std::thread::sleep(Duration::from_millis(300));
        }
        (pve, ws, tvmid)
    }

    fn ready(ws: &Workspace, name: &str) -> String {
        let st =
            std::fs::read_to_string(ws.path(&format!("status/{name}.yaml"))).unwrap_or_default();
        let v: Value = serde_saphyr::from_str(&st).unwrap_or(Value::Null);
        let c = (v["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter())
        .find(|c| c["type"] == "Ready")
        .unwrap_or(Value::Null);
        format!(
            "{} {}",
            c["status"].as_str().unwrap_or(""),
            c["message"].as_str().unwrap_or("")
        )
    }

    fn check_after_kill(pve: &mut FakePve, ws: &Workspace, tvmid: u64, guests: &[&str]) {
        let claims = common::engine::marker_claims(pve);
        for (spec, v) in &claims {
            assert!(v.len() <= 1, "two guests of {spec}: {claims:?}");
        }
        let requests = pve.requests();
        assert_eq!(
            posts(&requests, "/qemu").len(),
            1,
            "one template VM created"
        );
        assert_eq!(
            posts(&requests, "/template").len(),
            1,
            "made a template once"
        );
        let vms = pve.vms();
        let templates: Vec<&Value> = (vms.iter())
            .filter(|v| {
                v["template"] == true && v["name"].as_str().unwrap_or("").starts_with("noble-")
            })
            .collect();
        assert_eq!(templates.len(), 1, "{templates:?}");
        let name = templates[0]["name"].as_str().unwrap().to_string();
        assert!(ready(ws, &name).starts_with("True"), "{}", ready(ws, &name));
        let during = pve.call("clones_while_templating", json!({})).unwrap();
        assert_eq!(
            during,
            json!([]),
            "cloned from template VM {tvmid} while its qmtemplate task ran; the guests then say: {:?}",
            guests.iter().map(|g| ready(ws, g)).collect::<Vec<_>>()
        );
        let clones = posts(&requests, &format!("/qemu/{tvmid}/clone")).len();
        assert_eq!(clones, guests.len(), "each guest cloned once");
        for g in guests {
            assert!(vms.iter().any(|v| v["name"] == *g), "{g} made");
            assert!(ready(ws, g).starts_with("True"), "{}", ready(ws, g));
        }
    }

    /// `run --once` SIGKILLed while the `qmtemplate` task runs; the next runs (same state
    /// database): one template VM, made a template once, each guest cloned once, and no clone
    /// sent before the task ends.
    #[test]
    fn a_kill_mid_qmtemplate_makes_one_template_and_clones_each_guest_once() {
        let guests = ["web-1", "web-2"];
        let (mut pve, ws, tvmid) = kill_mid_qmtemplate(&guests, false);
        check_after_kill(&mut pve, &ws, tvmid, &guests);
    }

    /// As above with the state database lost too: the template VM is found by its marker
    /// (listed template=1 already), never made twice, no guest cloned before its task ends.
    #[test]
    fn a_kill_mid_qmtemplate_with_the_database_lost_makes_one_template() {
        let guests = ["web-1"];
        let (mut pve, ws, tvmid) = kill_mid_qmtemplate(&guests, true);
        check_after_kill(&mut pve, &ws, tvmid, &guests);
    }
}
