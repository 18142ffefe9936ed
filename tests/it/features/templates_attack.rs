//! Attacks on `kind: ProxmoxTemplate` against fakepve: hostile specs, a person's hands on the
//! templates, lost databases, kills mid-build, the old version's delete, a flood. Each test
//! states what the product promises (never a second guest or template, never touch what it
//! does not own, never delete on a broken commit, say precisely what is wrong).

use crate::common;

use super::images::{Setup, image_doc, setup};
use super::templates::{
    api, built_with_set, cycles, first_image, posts, qemu_deletes, template_doc,
    template_doc_named, template_guest, template_set, version_name, vm_named,
};
use common::engine::Workspace;
use common::{FakePve, default_scenario};
use proxsync::config::Config;
use proxsync::engine::{Engine, check_spec_sites};
use serde_json::{Value, json};

const URL: &str = "https://cloud-images.example/noble/20261115/noble-server-cloudimg-amd64.img";

/// A setup as [`setup`], over `scenario` instead of the default one.
fn setup_on(scenario: Value) -> Setup {
    let mut pve = FakePve::start(scenario);
    let served = pve
        .call("remote_file", json!({"url": URL, "size": 4096}))
        .expect("the harness serves the URL");
    let sum = served["sha256"].as_str().expect("its sha256").to_string();
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("images.yaml", image_doc(&sum))]);
    let config = Config::load(&ws.config()).expect("config");
    let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply)
        .expect("the specs of the commit");
    let mut specs = read.specs;
    check_spec_sites(&config, &mut specs);
    let engine = Engine::new(config).expect("engine");
    Setup {
        pve,
        ws,
        engine,
        specs,
        commit: read.commit,
    }
}

/// The engine restarted over a lost state database (the marker key kept).
fn lose_database(s: &mut Setup) {
    s.ws.remove_state();
    let config = Config::load(&s.ws.config()).expect("config");
    s.engine = Engine::new(config).expect("engine");
}

fn status_of(s: &Setup, name: &str) -> String {
    std::fs::read_to_string(s.ws.path(&format!("status/{name}.yaml"))).unwrap_or_default()
}

fn summary(s: &Setup) -> String {
    std::fs::read_to_string(s.ws.path("status/_summary.yaml")).unwrap_or_default()
}

fn orphans_file(s: &Setup) -> String {
    std::fs::read_to_string(s.ws.path("status/_orphans.yaml")).unwrap_or_default()
}

fn claims_ok(s: &mut Setup) {
    let claims = common::engine::marker_claims(&mut s.pve);
    for (spec, v) in &claims {
        assert!(v.len() <= 1, "two guests of {spec}: {claims:?}");
    }
}

// ---------------------------------------------------------------- ownership

/// A person stops a proxsync-managed guest (cloned from the template) and turns it into a
/// template by hand. proxsync must not make a second guest for the spec, not delete the
/// template, and say what happened.
#[tokio::test]
async fn a_managed_guest_turned_into_a_template_by_hand_is_neither_replaced_nor_deleted() {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    cycles(&mut s, 2).await;
    let guest = vm_named(&mut s, "web-1").expect("web-1 cloned");
    let vmid = guest["vmid"].as_u64().unwrap();
    let (st, body) = api(
        &s,
        "POST",
        &format!("/nodes/pve1/qemu/{vmid}/status/stop"),
        &[],
    );
    assert_eq!(st, 200, "{body}");
    let (st, body) = api(
        &s,
        "POST",
        &format!("/nodes/pve1/qemu/{vmid}/template"),
        &[],
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(s.pve.vm(vmid as u32)["template"], true);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 3).await;
    let requests = s.pve.requests_since(before);
    claims_ok(&mut s);
    let claims = common::engine::marker_claims(&mut s.pve);
    assert_eq!(claims.get("web-1"), Some(&vec![vmid]), "{claims:?}");
    assert!(qemu_deletes(&requests).is_empty(), "{requests:?}");
    assert!(posts(&requests, "/clone").is_empty(), "no second web-1");
    assert!(posts(&requests, "/qemu").is_empty(), "no second web-1");
    let ready = s.ready_message("web-1");
    assert!(
        !ready.starts_with("True") && ready.contains("template"),
        "the status says the guest is a template now: {ready}"
    );
}

/// As above, then the database is lost: the hand-made template (web-1's marker, verified) is
/// neither adopted as the template spec's nor replaced by a second web-1 clone.
#[tokio::test]
async fn a_managed_clone_turned_into_a_template_by_hand_is_not_replaced_after_a_lost_database() {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    cycles(&mut s, 2).await;
    let vmid = vm_named(&mut s, "web-1").expect("web-1 cloned")["vmid"]
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
    cycles(&mut s, 1).await;
    lose_database(&mut s);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 3).await;
    let requests = s.pve.requests_since(before);
    let claims = common::engine::marker_claims(&mut s.pve);
    assert!(qemu_deletes(&requests).is_empty(), "{requests:?}");
    assert_eq!(
        claims.get("web-1"),
        Some(&vec![vmid]),
        "a second web-1 cloned beside the hand-made template; web-1 says: {}",
        s.ready_message("web-1")
    );
}

/// A plain guest (a `ProxmoxVM` made from a `ProxmoxImage`) stopped and turned into a
/// template by hand: with its record, it is not replaced (the status says it is a template).
async fn hand_made_template_of_web_1() -> (Setup, u64) {
    let mut s = setup(None, &[("web-1", "pve1")]);
    cycles(&mut s, 2).await;
    let guest = vm_named(&mut s, "web-1").expect("web-1 made");
    let vmid = guest["vmid"].as_u64().unwrap();
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
    (s, vmid)
}

#[tokio::test]
async fn a_plain_guest_turned_into_a_template_by_hand_is_not_replaced() {
    let (mut s, _) = hand_made_template_of_web_1().await;
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 3).await;
    let requests = s.pve.requests_since(before);
    claims_ok(&mut s);
    assert!(qemu_deletes(&requests).is_empty(), "{requests:?}");
    assert!(
        posts(&requests, "/qemu").is_empty(),
        "no second web-1: {requests:?}"
    );
    let ready = s.ready_message("web-1");
    assert!(
        !ready.starts_with("True") && ready.contains("template"),
        "{ready}"
    );
}

/// The same after a lost database: the template carries web-1's verified marker, so web-1's
/// guest is known to exist (a template now). It must not be created a second time.
#[tokio::test]
async fn a_guest_turned_into_a_template_by_hand_is_not_replaced_after_a_lost_database() {
    let (mut s, vmid) = hand_made_template_of_web_1().await;
    cycles(&mut s, 1).await;
    lose_database(&mut s);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 3).await;
    let requests = s.pve.requests_since(before);
    let claims = common::engine::marker_claims(&mut s.pve);
    assert!(qemu_deletes(&requests).is_empty(), "{requests:?}");
    assert_eq!(
        claims.get("web-1"),
        Some(&vec![vmid]),
        "a second web-1 made beside the template that carries its marker; web-1 says: {}",
        s.ready_message("web-1")
    );
}

/// The spec removed while its guest is a template a person made: proxsync did not build
/// that template; it is not deleted as the spec's guest (or, if it is, never after a lost
/// database, when nothing says it was ever a guest).
#[tokio::test]
async fn a_guest_turned_into_a_template_by_hand_is_not_deleted_when_its_spec_goes() {
    let (mut s, vmid) = hand_made_template_of_web_1().await;
    cycles(&mut s, 1).await;
    s.recommit(&[("images.yaml", first_image(&s))]);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 3).await;
    let requests = s.pve.requests_since(before);
    assert!(
        qemu_deletes(&requests).is_empty(),
        "a template proxsync did not build is deleted: {requests:?}; VM {vmid} now {}",
        s.pve.vm(vmid as u32)
    );
}

/// After the template and its guests are built, the state database is lost: no second
/// template, no guest cloned twice, nothing deleted; everything Ready again.
#[tokio::test]
async fn a_lost_database_after_the_build_makes_no_second_template_nor_guest() {
    let mut s = built_with_set(3, "Recreate").await;
    let old = version_name(&s);
    assert!(s.ready_message(&old).starts_with("True"));
    lose_database(&mut s);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 3).await;
    let requests = s.pve.requests_since(before);
    claims_ok(&mut s);
    assert!(posts(&requests, "/qemu").is_empty(), "{requests:?}");
    assert!(posts(&requests, "/clone").is_empty(), "{requests:?}");
    assert!(posts(&requests, "/template").is_empty(), "{requests:?}");
    assert!(qemu_deletes(&requests).is_empty(), "{requests:?}");
    assert!(
        s.ready_message(&old).starts_with("True"),
        "{}",
        s.ready_message(&old)
    );
    let msg = s.ready_message("web-01");
    assert!(msg.starts_with("True"), "{msg}");
}

/// The database lost, then a new image version: the new template is built, and the old
/// version (ours by its verified marker, no longer in the repository) must be deleted, or at
/// least reported as an orphan. Never left silently.
#[tokio::test]
async fn a_lost_database_then_a_new_version_does_not_leak_the_old_template_silently() {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
    ]);
    cycles(&mut s, 2).await;
    let old = version_name(&s);
    let old_vmid = vm_named(&mut s, &old).expect("built")["vmid"]
        .as_u64()
        .unwrap();
    lose_database(&mut s);
    let doc = s.new_version();
    s.recommit(&[("images.yaml", doc), ("template.yaml", template_doc(""))]);
    let new = version_name(&s);
    cycles(&mut s, 4).await;
    assert!(
        vm_named(&mut s, &new).is_some(),
        "the new template is built"
    );
    let old_left = vm_named(&mut s, &old).is_some();
    let orphans = orphans_file(&s);
    let summary = summary(&s);
    assert!(
        !old_left || orphans.contains(&old_vmid.to_string()),
        "old template {old} (VMID {old_vmid}) is neither deleted nor reported:\n\
         _orphans.yaml:\n{orphans}\n_summary.yaml:\n{summary}"
    );
}

// ---------------------------------------------------------------- kills mid-build

/// The template's VM is created, then the `POST .../template` fails (a kill before the step),
/// and the database is lost too: the VM is found by its marker, made a template, and the
/// guests cloned once; never a second template VM.
#[tokio::test]
async fn a_kill_between_the_create_and_the_template_step_makes_one_template() {
    let mut s = setup(None, &[]);
    s.pve.fail("POST", "/template", 500, "killed");
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web.yaml", template_set(2, "Keep")),
    ]);
    cycles(&mut s, 2).await;
    let name = version_name(&s);
    let vm = vm_named(&mut s, &name).expect("the VM is created");
    assert_ne!(vm["template"], true);
    assert!(
        vm_named(&mut s, "web-01").is_none(),
        "no guest before the template"
    );
    lose_database(&mut s);
    s.pve.clear_failures();
    cycles(&mut s, 3).await;
    claims_ok(&mut s);
    let creates = posts(&s.pve.requests(), "/qemu").len();
    assert_eq!(creates, 1, "one template VM");
    let vm = vm_named(&mut s, &name).expect("still there");
    assert_eq!(vm["template"], true, "{vm}");
    assert!(
        s.ready_message(&name).starts_with("True"),
        "{}",
        s.ready_message(&name)
    );
    assert!(vm_named(&mut s, "web-01").is_some());
    assert!(vm_named(&mut s, "web-02").is_some());
}

/// The `POST .../template` is carried out but its answer lost (a kill while the qmtemplate
/// task runs): the next cycle finds a template and finishes, no error held.
#[tokio::test]
async fn a_lost_answer_to_the_template_step_finishes_next_cycle() {
    let mut s = setup(None, &[]);
    s.pve.lose_answer("POST", "/template", 1);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    cycles(&mut s, 4).await;
    claims_ok(&mut s);
    let name = version_name(&s);
    assert_eq!(vm_named(&mut s, &name).unwrap()["template"], true);
    assert!(
        s.ready_message(&name).starts_with("True"),
        "{}",
        s.ready_message(&name)
    );
    assert!(
        s.ready_message("web-1").starts_with("True"),
        "{}",
        s.ready_message("web-1")
    );
    assert_eq!(posts(&s.pve.requests(), "/qemu").len(), 1);
}

// ---------------------------------------------------------------- hostile specs

/// A `ProxmoxVM` named exactly as the template's current version (`noble-VERSION`): the
/// collision is refused, said, and nothing is deleted (the template's VM, built before, stays).
#[tokio::test]
async fn a_guest_named_as_the_template_s_version_deletes_nothing_and_is_said() {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    cycles(&mut s, 2).await;
    let name = version_name(&s);
    let squatter = common::engine::spec(&name, "pve1", "debian-12-template", "");
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
        ("squat.yaml", squatter),
    ]);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 2).await;
    let requests = s.pve.requests_since(before);
    assert!(qemu_deletes(&requests).is_empty(), "{requests:?}");
    assert!(common::engine::writes_since(&mut s.pve, before).is_empty());
    assert!(vm_named(&mut s, &name).is_some() && vm_named(&mut s, "web-1").is_some());
    // The words: no document has metadata.name noble-VERSION; the error must say that it is
    // the ProxmoxTemplate noble's current version the other spec's name collides with.
    let diags: Vec<String> = (s.specs.diagnostics.iter())
        .map(ToString::to_string)
        .collect();
    assert!(
        diags
            .iter()
            .any(|d| d.contains(&name) && d.contains("ProxmoxTemplate")),
        "the error names the template's version: {diags:?}"
    );
}

/// A template not made by proxsync, named as the version's VM (`noble-VERSION`), on the
/// guest's node: never cloned from, never deleted (also when the version goes).
#[tokio::test]
async fn a_foreign_template_of_the_version_s_name_is_never_cloned_nor_deleted() {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
    ]);
    let name = version_name(&s);
    // A person's template of that name, on pve2, before proxsync builds its own on pve1.
    s.pve.add_vm(json!({
        "vmid": 8000, "name": name, "node": "pve2", "status": "stopped", "template": true,
        "config": {"name": name, "scsi0": "local-lvm:base-8000-disk-0,size=2G",
                   "memory": "1024", "template": 1},
    }));
    cycles(&mut s, 2).await;
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        (
            "web-2.yaml",
            template_guest("web-2", "pve2", "    storage: local-lvm\n"),
        ),
    ]);
    cycles(&mut s, 2).await;
    let requests = s.pve.requests();
    assert!(
        posts(&requests, "/qemu/8000/clone").is_empty(),
        "{requests:?}"
    );
    let doc = s.new_version();
    s.recommit(&[("images.yaml", doc), ("template.yaml", template_doc(""))]);
    cycles(&mut s, 3).await;
    let requests = s.pve.requests();
    assert!(
        !qemu_deletes(&requests).iter().any(|p| p.contains("/8000")),
        "{requests:?}"
    );
    assert_eq!(s.pve.vm(8000)["name"], name);
}

/// A guest on pve2 cloned from a template built on pve1's local (non-shared) storage: PVE
/// cannot clone it across nodes. The guest's status must say so precisely (the template's
/// node and storage), and nothing is sent each cycle.
#[tokio::test]
async fn a_guest_on_another_node_than_a_local_template_is_told_why() {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("    storage: local-lvm\n")),
        ("web-2.yaml", template_guest("web-2", "pve2", "")),
    ]);
    cycles(&mut s, 3).await;
    let msg = s.ready_message("web-2");
    let before = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    let writes = common::engine::writes_since(&mut s.pve, before);
    assert!(writes.is_empty(), "nothing sent each cycle: {writes:?}");
    assert!(
        msg.starts_with("False") && msg.contains("pve1") && msg.contains("local-lvm"),
        "the guest says the template is on local storage of another node: {msg}"
    );
}

// ---------------------------------------------------------------- the old version's delete

/// The default scenario plus `local-dir`, a dir storage holding VM images, where PVE keeps
/// the link of a linked clone in the volume's name.
/// The template without cloudInit: fakepve 0.5.0 keeps a new cloud-init drive as written
/// (`local-dir:cloudinit`, not PVE's `vm-N-cloudinit`), which its linked clone refuses.
fn no_ci(doc: String) -> String {
    doc.replace("    cloudInit: {user: ops}\n", "")
}

fn dir_scenario() -> Value {
    let mut scenario = default_scenario();
    scenario["storages"]["local-dir"] =
        json!({"type": "dir", "path": "/var/lib/vz-images", "content": "images,rootdir"});
    scenario
}

/// A person makes a linked clone of the template (`full=0`, on a dir storage); a new image
/// version comes: the old template is kept (PVE would refuse; fakepve would free the clone's
/// base), its status says why, and the clone is untouched.
#[tokio::test]
async fn an_old_version_with_a_linked_clone_made_by_hand_is_kept_and_said() {
    let mut s = setup_on(dir_scenario());
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        (
            "template.yaml",
            no_ci(template_doc("    storage: local-dir\n")),
        ),
    ]);
    cycles(&mut s, 2).await;
    let old = version_name(&s);
    let tvmid = vm_named(&mut s, &old).expect("built")["vmid"]
        .as_u64()
        .unwrap();
    let (st, body) = api(
        &s,
        "POST",
        &format!("/nodes/pve1/qemu/{tvmid}/clone"),
        &[("newid", "700"), ("full", "0"), ("name", "mine")],
    );
    assert_eq!(st, 200, "{body}");
    let clone = s.pve.vm(700);
    let disk = clone["config"]["scsi0"].as_str().unwrap_or("").to_string();
    assert!(
        disk.contains(&format!("base-{tvmid}-")),
        "a linked clone: {clone}"
    );
    let doc = s.new_version();
    s.recommit(&[
        ("images.yaml", doc),
        (
            "template.yaml",
            no_ci(template_doc("    storage: local-dir\n")),
        ),
    ]);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 3).await;
    let requests = s.pve.requests_since(before);
    assert!(
        !qemu_deletes(&requests)
            .iter()
            .any(|p| p.contains(&format!("/{tvmid}"))),
        "{requests:?}"
    );
    assert!(vm_named(&mut s, &old).is_some());
    assert_eq!(s.pve.vm(700)["config"]["scsi0"], disk.as_str());
    let said = status_of(&s, &old);
    // The clone deleted by its person: the old version goes.
    let (st, body) = api(&s, "DELETE", "/nodes/pve1/qemu/700", &[]);
    assert_eq!(st, 200, "{body}");
    cycles(&mut s, 2).await;
    assert!(
        vm_named(&mut s, &old).is_none(),
        "deleted once the clone is gone"
    );
    // While it was kept, the old version's status file (the file a person looks at) said
    // why, as a removed spec kept by its protection flag does; not "Ready: matches the spec".
    let ready = said
        .split("- type: Ready")
        .nth(1)
        .and_then(|r| r.split("- type:").next())
        .unwrap_or("");
    assert!(
        ready.contains("linked clone") && !ready.contains("status: \"True\""),
        "the kept old version's status says why: {ready}"
    );
}

/// The old version is locked (a backup) when it is to go: it is kept, and deleted once the
/// lock is gone; the new version's guests are unaffected.
#[tokio::test]
async fn an_old_version_locked_is_deleted_once_unlocked() {
    let mut s = built_with_set(2, "Keep").await;
    let old = version_name(&s);
    let tvmid = vm_named(&mut s, &old).unwrap()["vmid"].as_u64().unwrap() as u32;
    s.pve.snapshot_lock(tvmid, "backup");
    let doc = s.new_version();
    s.recommit(&[
        ("images.yaml", doc),
        ("template.yaml", template_doc("")),
        ("web.yaml", template_set(2, "Keep")),
    ]);
    cycles(&mut s, 3).await;
    assert!(vm_named(&mut s, &old).is_some(), "kept while locked");
    s.pve.unlock(tvmid);
    cycles(&mut s, 2).await;
    assert!(vm_named(&mut s, &old).is_none(), "{}", status_of(&s, &old));
    claims_ok(&mut s);
}

/// A new version while a guest is being cloned from the old one (a slow clone): the old
/// template must not be deleted under the running clone (qemu-server holds the template's
/// config lock shared for the whole clone; the delete would wait then fail, or, here, free
/// the base the clone reads).
#[tokio::test]
async fn an_old_version_is_not_deleted_while_a_guest_is_cloned_from_it() {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
    ]);
    cycles(&mut s, 2).await;
    let old = version_name(&s);
    let tvmid = vm_named(&mut s, &old).unwrap()["vmid"].as_u64().unwrap();
    s.engine.task_wait = std::time::Duration::from_millis(100);
    s.pve.set_time_scale(1.0);
    s.pve.create_timing(0.0, 6.0, 0.0);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    s.cycle().await;
    let clones = posts(&s.pve.requests(), &format!("/qemu/{tvmid}/clone")).len();
    assert_eq!(clones, 1, "the clone runs");
    let clone_started = std::time::Instant::now();
    let doc = s.new_version();
    s.recommit(&[
        ("images.yaml", doc),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    let before = common::engine::next_seq(&mut s.pve);
    while clone_started.elapsed() < std::time::Duration::from_secs(5) {
        s.cycle().await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let requests = s.pve.requests_since(before);
    let deleted: Vec<String> = qemu_deletes(&requests)
        .into_iter()
        .filter(|p| p.ends_with(&format!("/{tvmid}")) || p.contains(&format!("/{tvmid}?")))
        .collect();
    assert!(
        deleted.is_empty(),
        "the old template deleted while web-1 was being cloned from it: {deleted:?}"
    );
}

/// Three templates from one image; a new image version makes three new versions and three
/// old ones to delete at once. Routine: the old versions go (the valves count what is
/// replaced, not lost); or, if a valve holds them, the status says which valve.
#[tokio::test]
async fn a_new_image_version_for_many_templates_deletes_the_old_ones_or_says_why() {
    new_image_version_for_templates(&["alpha", "beta", "gamma"]).await;
}

/// One template alone (no guest yet): a new image version deletes the old version.
#[tokio::test]
async fn a_new_image_version_for_a_lone_template_deletes_the_old_one_or_says_why() {
    new_image_version_for_templates(&["alpha"]).await;
}

async fn new_image_version_for_templates(names: &[&str]) {
    let mut s = setup(None, &[]);
    let docs = |image: String| -> Vec<(String, String)> {
        let mut v = vec![("images.yaml".to_string(), image)];
        for t in names {
            v.push((format!("{t}.yaml"), template_doc_named(t, "")));
        }
        v
    };
    let first = docs(first_image(&s));
    let files: Vec<(&str, String)> = first.iter().map(|(a, b)| (a.as_str(), b.clone())).collect();
    s.recommit(&files);
    cycles(&mut s, 2).await;
    let olds: Vec<String> = (s.specs.specs.iter())
        .filter(|t| t.template.is_some())
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(olds.len(), names.len());
    let second = docs(s.new_version());
    let files: Vec<(&str, String)> = second
        .iter()
        .map(|(a, b)| (a.as_str(), b.clone()))
        .collect();
    s.recommit(&files);
    cycles(&mut s, 4).await;
    let left: Vec<&String> = olds.iter().filter(|o| vm_named_ro(&mut s, o)).collect();
    let summary = summary(&s);
    assert!(
        left.is_empty() || summary.to_lowercase().contains("valve"),
        "old versions {left:?} neither deleted nor held by a valve that is said:\n{summary}\n{}",
        status_of(&s, &olds[0])
    );
}

fn vm_named_ro(s: &mut Setup, name: &str) -> bool {
    vm_named(s, name).is_some()
}

// ---------------------------------------------------------------- a flood

/// 200 guests from one template: an idle cycle costs the same requests as with 2 guests
/// (O(1) per site, not per guest).
#[tokio::test]
async fn two_hundred_guests_of_one_template_cost_an_idle_cycle_what_two_do() {
    async fn idle_reads(replicas: u32) -> (usize, Vec<String>) {
        let mut s = setup(None, &[]);
        s.recommit(&[
            ("images.yaml", first_image(&s)),
            ("template.yaml", template_doc("")),
            ("web.yaml", template_set(replicas, "Keep")),
        ]);
        cycles(&mut s, 3).await;
        let ready = (1..=replicas)
            .filter(|i| {
                [format!("web-{i:03}"), format!("web-{i:02}")]
                    .iter()
                    .any(|n| {
                        std::path::Path::new(&s.ws.path(&format!("status/{n}.yaml"))).exists()
                            && s.ready_message(n).starts_with("True")
                    })
            })
            .count();
        assert_eq!(ready as u32, replicas, "all Ready");
        s.cycle().await;
        let before = common::engine::next_seq(&mut s.pve);
        s.cycle().await;
        let requests = s.pve.requests_since(before);
        let paths: Vec<String> = requests
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        (requests.len(), paths)
    }
    let (two, two_paths) = idle_reads(2).await;
    let (many, many_paths) = idle_reads(200).await;
    assert!(
        many <= two,
        "an idle cycle: {two} requests for 2 guests, {many} for 200\n2: {two_paths:?}\n200: {:?}",
        &many_paths[..many_paths.len().min(60)]
    );
}

// ---------------------------------------------------------------- broken commits

/// The template built and a guest cloned; then a commit breaks the template's document in
/// each way a person might. Nothing is deleted, the guest is not touched.
async fn a_broken_template_document_deletes_nothing(broken: String) {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    cycles(&mut s, 2).await;
    let name = version_name(&s);
    assert!(vm_named(&mut s, &name).is_some());
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", broken),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    assert!(s.specs.has_errors(), "the commit is broken");
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 2).await;
    let writes = common::engine::writes_since(&mut s.pve, before);
    assert!(
        writes.is_empty(),
        "a broken commit changes nothing: {writes:?}"
    );
    assert!(vm_named(&mut s, &name).is_some());
    assert!(vm_named(&mut s, "web-1").is_some());
}

#[tokio::test]
async fn a_template_given_a_refused_field_deletes_nothing() {
    a_broken_template_document_deletes_nothing(template_doc("    powerState: running\n")).await;
}

#[tokio::test]
async fn a_template_given_a_refused_policy_deletes_nothing() {
    a_broken_template_document_deletes_nothing(
        template_doc("").replace("spec:\n", "spec:\n  dependsOn: [db]\n"),
    )
    .await;
}

#[tokio::test]
async fn a_template_made_from_a_vmid_deletes_nothing() {
    a_broken_template_document_deletes_nothing(
        template_doc("").replace("{image: noble-cloud}", "\"9000\""),
    )
    .await;
}

#[tokio::test]
async fn a_template_with_a_yaml_error_deletes_nothing() {
    a_broken_template_document_deletes_nothing(template_doc("    cpu: [2\n")).await;
}

#[tokio::test]
async fn a_template_with_an_unknown_field_deletes_nothing() {
    a_broken_template_document_deletes_nothing(template_doc("    colour: blue\n")).await;
}

#[tokio::test]
async fn a_template_named_too_long_deletes_nothing() {
    // The name itself changes: this is a new template, the old one is removed, unless the
    // error holds it. A person fixing a typo would otherwise lose nothing but a rebuild; the
    // guest must still not be deleted.
    let long = "n".repeat(60);
    let doc = template_doc_named(&long, "");
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    cycles(&mut s, 2).await;
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", doc),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 2).await;
    let requests = s.pve.requests_since(before);
    assert!(vm_named(&mut s, "web-1").is_some(), "{requests:?}");
}

/// A guest written `dependsOn: [noble]` (the template's name, as a person would) with
/// `image: {template: noble}`: accepted (it already waits for the template), or refused with
/// words that name the ProxmoxTemplate and its versioned spec.
#[tokio::test]
async fn depends_on_the_template_s_own_name_is_understood_or_said_precisely() {
    let mut s = setup(None, &[]);
    let guest =
        template_guest("web-1", "pve1", "").replace("spec:\n", "spec:\n  dependsOn: [noble]\n");
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", guest),
    ]);
    let diags: Vec<String> = (s.specs.diagnostics.iter())
        .map(ToString::to_string)
        .collect();
    let ok = s.specs.specs.iter().any(|g| g.name == "web-1");
    assert!(
        ok || diags.iter().any(|d| d.contains("ProxmoxTemplate")),
        "a dependsOn on the template's name: {diags:?}"
    );
}

/// A template made from an ISO image (content iso) or a container template (vztmpl): the
/// template would be an empty disk booting an installer, or nothing a VM can use; refused
/// where it is written.
#[tokio::test]
async fn a_template_from_an_iso_or_vztmpl_image_is_refused() {
    let mut s = setup(None, &[]);
    for (content, ext) in [("vztmpl", "tar.zst"), ("iso", "iso")] {
        let url = format!("https://h.example/x/img.{ext}");
        let served = (s.pve)
            .call("remote_file", json!({"url": url, "size": 1024}))
            .unwrap();
        let doc = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {{name: noble-cloud}}\n\
             spec:\n  forProvider:\n    site: lab\n    url: {url}\n    checksum: sha256:{}\n    \
             content: {content}\n    storage: local\n",
            served["sha256"].as_str().unwrap()
        );
        s.recommit(&[("images.yaml", doc), ("template.yaml", template_doc(""))]);
        let diags: Vec<String> = (s.specs.diagnostics.iter())
            .map(ToString::to_string)
            .collect();
        assert!(
            s.specs.specs.iter().all(|t| t.template.is_none())
                && diags
                    .iter()
                    .any(|d| d.contains(content) || d.contains("import")),
            "a template from a {content} image: accepted, diagnostics {diags:?}"
        );
    }
}

// ---------------------------------------------------------------- a site move

/// The image and the template move from site `lab` to site `other` (nothing else changes, so
/// the version, a hash without the site, is the same: `noble-VERSION` names the old site's
/// template and the new one). The refusal of `allowRecreateOnSiteChange` says "a template of
/// another site is a new template": it must be built on `other`, not held forever asking a
/// person to delete the old one by hand (or to set a field a template refuses).
#[tokio::test]
async fn a_template_moved_to_another_site_is_built_there() {
    let lab = FakePve::start(default_scenario());
    let mut other = FakePve::start(default_scenario());
    let mut pve = lab;
    let served = pve
        .call("remote_file", json!({"url": URL, "size": 4096}))
        .unwrap();
    let sum = served["sha256"].as_str().unwrap().to_string();
    let there = other
        .call("remote_file", json!({"url": URL, "size": 4096}))
        .unwrap();
    assert_eq!(there["sha256"].as_str(), Some(sum.as_str()));
    let ws = Workspace::two_sites(&pve, &other, "");
    ws.commit_specs(&[
        ("images.yaml", image_doc(&sum)),
        ("template.yaml", template_doc("")),
    ]);
    let config = Config::load(&ws.config()).expect("config");
    let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply).unwrap();
    let mut specs = read.specs;
    check_spec_sites(&config, &mut specs);
    assert!(!specs.has_errors(), "{:?}", specs.diagnostics);
    let engine = Engine::new(config).expect("engine");
    let mut s = Setup {
        pve,
        ws,
        engine,
        specs,
        commit: read.commit,
    };
    cycles(&mut s, 2).await;
    let name = version_name(&s);
    assert!(vm_named(&mut s, &name).is_some(), "built on lab");
    let moved = |t: String| t.replace("site: lab", "site: other");
    s.recommit(&[
        ("images.yaml", moved(image_doc(&sum))),
        ("template.yaml", moved(template_doc(""))),
    ]);
    assert!(!s.specs.has_errors(), "{:?}", s.specs.diagnostics);
    cycles(&mut s, 4).await;
    let moved_name = version_name(&s);
    let built = other
        .vms()
        .into_iter()
        .any(|v| v["name"] == moved_name.as_str());
    assert!(
        built,
        "no template {moved_name} on site other: {}",
        s.ready_message(&moved_name)
    );
}

/// A person copies the template's notes (its marker) and tags into a template of their own
/// with the version's name: the copy's marker does not verify (another VMID). It is never
/// cloned from, never deleted, never adopted after a lost database (the real one is), and
/// no second template is built.
#[tokio::test]
async fn a_template_carrying_a_copied_marker_is_never_used_nor_adopted() {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
    ]);
    cycles(&mut s, 2).await;
    let name = version_name(&s);
    let real = vm_named(&mut s, &name).unwrap();
    let real_vmid = real["vmid"].as_u64().unwrap();
    let mut config = json!({"name": name, "scsi0": "local-lvm:base-99-disk-0,size=2G",
                            "memory": "1024", "template": 1});
    for key in ["description", "tags"] {
        config[key] = real["config"][key].clone();
    }
    // A lower VMID than the real one, on the same node: first in any "lowest VMID" choice.
    s.pve.add_vm(
        json!({"vmid": 99, "name": name, "node": "pve1", "status": "stopped",
                        "template": true, "config": config}),
    );
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    cycles(&mut s, 2).await;
    lose_database(&mut s);
    cycles(&mut s, 2).await;
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
        ("web-2.yaml", template_guest("web-2", "pve1", "")),
    ]);
    cycles(&mut s, 2).await;
    let requests = s.pve.requests();
    assert!(
        posts(&requests, "/qemu/99/clone").is_empty(),
        "cloned from the copy"
    );
    assert_eq!(
        posts(&requests, &format!("/qemu/{real_vmid}/clone")).len(),
        2
    );
    assert_eq!(posts(&requests, "/qemu").len(), 1, "one template built");
    assert!(!qemu_deletes(&requests).iter().any(|p| p.ends_with("/99")));
    assert!(
        s.ready_message(&name).starts_with("True"),
        "{}",
        s.ready_message(&name)
    );
}

/// A guest whose own name reads as a version of template `web` (`web-0123abcd`), removed in
/// the commit that breaks template `web`: its VM is held (acceptable: which version a broken
/// template makes is not known), never deleted on the broken commit, and deleted once the
/// template is fixed (the guest really is gone from the repository).
#[tokio::test]
async fn a_guest_named_like_a_version_of_a_broken_template_is_held_not_lost() {
    let mut s = setup(None, &[]);
    let guest = common::engine::spec("web-0123abcd", "pve1", "debian-12-template", "");
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc_named("web", "")),
        ("g.yaml", guest),
    ]);
    cycles(&mut s, 2).await;
    let vmid = vm_named(&mut s, "web-0123abcd").expect("made")["vmid"]
        .as_u64()
        .unwrap();
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        (
            "template.yaml",
            template_doc_named("web", "    powerState: running\n"),
        ),
    ]);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 2).await;
    let requests = s.pve.requests_since(before);
    assert!(qemu_deletes(&requests).is_empty(), "{requests:?}");
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc_named("web", "")),
    ]);
    cycles(&mut s, 2).await;
    assert!(
        !s.pve.vms().iter().any(|v| v["vmid"] == vmid),
        "the removed guest goes once the template is fixed"
    );
}

/// A new image version whose download fails (a wrong checksum: the commit's image can never
/// be had): the new template version cannot be built. The old version, which the guests
/// were cloned from and a revert would want back, is kept until the new one is Ready (make
/// before break), not deleted at once leaving the site with no template at all.
#[tokio::test]
async fn the_old_version_stays_until_the_new_one_is_built() {
    let mut s = built_with_set(2, "Keep").await;
    let old = version_name(&s);
    let doc = s.new_version();
    let wrong = {
        let i = doc.find("sha256:").unwrap() + "sha256:".len();
        format!("{}{}{}", &doc[..i], "0".repeat(64), &doc[i + 64..])
    };
    s.recommit(&[
        ("images.yaml", wrong),
        ("template.yaml", template_doc("")),
        ("web.yaml", template_set(2, "Keep")),
    ]);
    assert!(!s.specs.has_errors(), "{:?}", s.specs.diagnostics);
    let new = version_name(&s);
    cycles(&mut s, 3).await;
    assert!(
        vm_named(&mut s, &new).is_none(),
        "the new version cannot be built"
    );
    assert!(
        vm_named(&mut s, &old).is_some(),
        "the old template {old} deleted while its replacement {new} cannot be built: {}",
        s.ready_message(&new)
    );
}
