//! Two VMs claiming one spec are surfaced, never ignored, and a claim that does not verify is
//! never trusted.
//!
//! - Two VMs whose markers both verify (two creates for one spec): the spec turns `Ready:
//!   False / DuplicateVM` naming every VMID, `_orphans.yaml` lists the extras with
//!   `duplicateOf`, `proxsync status` shows them, and the orphan policy applies to the extras
//!   only: a tagged, stopped extra is deleted after the grace period (its marker read again),
//!   a running one is only reported, and the spec's own VM is never touched.
//! - Someone clones a managed VM in the web UI (PVE copies the description, marker included,
//!   and the tags) or types a marker into a VM's description: the marker fails on its VMID or
//!   its MAC, so the VM is reported as a foreign VM claiming the spec, never adopted, changed
//!   or deleted, even after the database is lost and the spec removed.

use crate::common;

use common::engine::{Workspace, spec};
use common::{FakePve, default_scenario};
use proxsync::ownership::{Marker, MarkerKey};
use serde_json::json;

/// A copy of VM `of` at `vmid`: same config (tags, description). With `resign`, its marker is
/// signed for the new VMID with the install's key, as a second create of the spec would be;
/// without, it is what a clone in the web UI leaves.
fn copy_vm(pve: &mut FakePve, ws: &Workspace, of: u64, vmid: u32, status: &str, resign: bool) {
    let original = pve.vm(of as u32);
    let mut config = original["config"].clone();
    config["name"] = json!("web-copy");
    if resign {
        let key = MarkerKey::load(&ws.path("state"))
            .unwrap()
            .expect("the install's key");
        let description = config["description"].as_str().unwrap().to_string();
        let m = Marker::parse(&description).expect("a marker");
        let signed = Marker::signed(&key, &m.install, &m.spec, &m.uid, vmid);
        config["description"] = json!(signed.replace_in(&description));
    }
    pve.add_vm(json!({
        "vmid": vmid,
        "name": "web-copy",
        "node": "pve1",
        "status": status,
        "config": config,
    }));
}

#[test]
fn a_second_vm_of_a_spec_is_reported_and_only_the_extra_is_handled() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(
        &pve,
        "[reconcile]\norphans = \"delete-stopped\"\norphan_grace = \"1s\"\n",
    );
    ws.commit_specs(&[("web.yaml", spec("web", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let kept = ws.status("web")["vmId"].as_u64().expect("a VMID");

    // A running and a stopped second VM, both with a verifying marker and the tag.
    copy_vm(&mut pve, &ws, kept, 201, "running", true);
    copy_vm(&mut pve, &ws, kept, 202, "stopped", true);
    let (ok, out) = ws.run_once();
    assert!(!ok, "two VMs claiming a spec is not Ready: {out}");
    let (status, reason, message) = ws.condition("web", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "DuplicateVM"),
        "{message}"
    );
    for id in [kept.to_string(), "201".into(), "202".into()] {
        assert!(message.contains(&id), "names VM {id}: {message}");
    }
    let orphans = std::fs::read_to_string(ws.path("status/_orphans.yaml")).unwrap();
    assert!(
        orphans.contains("vmId: 201") && orphans.contains("vmId: 202"),
        "{orphans}"
    );
    assert!(orphans.contains("duplicateOf: web"), "{orphans}");
    assert!(
        !orphans.contains(&format!("vmId: {kept}")),
        "the spec's VM is not an orphan: {orphans}"
    );
    let shown = ws.proxsync(&["status"]);
    let shown = common::engine::text(&shown);
    assert!(
        shown.contains("DuplicateVM") && shown.contains("duplicate of web"),
        "{shown}"
    );

    // Past the grace period: the stopped extra goes, the running one stays reported, the
    // spec's VM is untouched.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let (_, out) = ws.run_once();
    let vmids: Vec<u64> = pve
        .vms()
        .iter()
        .filter_map(|v| v["vmid"].as_u64())
        .collect();
    assert!(
        !vmids.contains(&202),
        "the stopped extra is deleted: {vmids:?}\n{out}"
    );
    assert!(
        vmids.contains(&201),
        "the running extra is only reported: {vmids:?}"
    );
    assert!(vmids.contains(&kept), "the spec's VM stays: {vmids:?}");
    let orphans = std::fs::read_to_string(ws.path("status/_orphans.yaml")).unwrap();
    assert!(
        orphans.contains("vmId: 201") && orphans.contains("action: reported"),
        "{orphans}"
    );

    // Once the running copy is gone too, the spec is Ready again.
    pve.set_vm(201, json!({"status": "stopped"}));
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let _ = ws.run_once();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let (status, reason, _) = ws.condition("web", "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Available"));
}

#[test]
fn a_copied_or_typed_marker_is_never_trusted() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(
        &pve,
        "[reconcile]\norphans = \"delete-stopped\"\norphan_grace = \"1s\"\n",
    );
    ws.commit_specs(&[
        ("web.yaml", spec("web", "pve1", "9000", "")),
        ("db.yaml", spec("db", "pve1", "9000", "")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let kept = ws.status("web")["vmId"].as_u64().expect("a VMID");
    // A clone in the web UI (stopped, tagged, the marker copied) and an untagged VM someone
    // typed a marker into.
    copy_vm(&mut pve, &ws, kept, 301, "stopped", false);
    pve.add_vm(json!({
        "vmid": 302, "name": "web", "node": "pve1", "status": "stopped",
        "config": {"name": "web", "description": "proxsync-id: install=test spec=web uid=forged"},
    }));
    let (ok, out) = ws.run_once();
    assert!(ok, "the spec's own VM is still Ready: {out}");
    let orphans = std::fs::read_to_string(ws.path("status/_orphans.yaml")).unwrap();
    for id in [301, 302] {
        assert!(orphans.contains(&format!("vmId: {id}")), "{orphans}");
    }
    assert!(
        orphans.contains("foreign VM claiming spec web"),
        "{orphans}"
    );

    // The database lost and the spec removed: nothing adopts the claims, nothing deletes them.
    ws.remove_state();
    ws.commit_specs(&[("db.yaml", spec("db", "pve1", "9000", ""))]);
    for _ in 0..2 {
        let _ = ws.run_once();
        std::thread::sleep(std::time::Duration::from_millis(1200));
    }
    let vmids: Vec<u64> = pve
        .vms()
        .iter()
        .filter_map(|v| v["vmid"].as_u64())
        .collect();
    assert!(
        vmids.contains(&301) && vmids.contains(&302),
        "claims that do not verify are never deleted: {vmids:?}"
    );
    for id in [301u32, 302] {
        let tags = pve.vm(id)["config"]["tags"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            id == 301 || !tags.contains("proxsync.test"),
            "the typed claim was not adopted (no tag added): {tags}"
        );
    }
}

/// The marker key lost with the state directory: the VMs' markers no longer verify. Nothing
/// is deleted and nothing is created twice; each spec says so, and `proxsync adopt` takes a
/// VM back (its marker is then signed with the new key).
#[test]
fn a_lost_marker_key_creates_nothing_and_adopt_takes_the_vm_back() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("web")["vmId"].as_u64().expect("a VMID") as u32;

    ws.remove_state_and_key();
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let (status, reason, message) = ws.condition("web", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UnverifiedClaim"),
        "{message}"
    );
    assert!(
        message.contains(&format!("proxsync adopt web --vmid {vmid}")),
        "{message}"
    );
    let vms: Vec<u64> = pve
        .vms()
        .iter()
        .filter_map(|v| v["vmid"].as_u64())
        .collect();
    assert_eq!(
        vms.len(),
        2,
        "the template and the VM, nothing created: {vms:?}"
    );

    let adopt = ws.proxsync(&["adopt", "web", "--vmid", &vmid.to_string()]);
    assert!(adopt.status.success(), "{}", common::engine::text(&adopt));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let key = MarkerKey::load(&ws.path("state"))
        .unwrap()
        .expect("a new key");
    let description = pve.vm(vmid)["config"]["description"]
        .as_str()
        .unwrap()
        .to_string();
    let m = Marker::parse(&description).expect("a marker");
    assert!(
        m.verifies(&key, vmid),
        "signed with the new key: {description}"
    );

    // Refused: a VM whose marker names another spec.
    let wrong = ws.proxsync(&["adopt", "web", "--vmid", "9000"]);
    assert!(!wrong.status.success());
}

/// The whole state directory lost (the marker key with it), then a person allowed to edit only
/// one VM's options types spec `db`'s marker into its notes and adds the install's tag (PVE's
/// default `user-tag-access` lets them). `adopt --all-unverified` lists both VMs claiming `db`
/// with what tells them apart; `--yes` confirms the spec one VM alone claims and none of
/// `db`'s (exit 1), so the forged VM is neither recorded nor signed; the person's `adopt db
/// --vmid N` settles it, and only the real VM is converged.
#[test]
fn adopt_all_unverified_yes_never_confirms_a_spec_two_vms_claim() {
    let mut scenario = default_scenario();
    // Someone's VM at the lowest VMID, made before proxsync's.
    scenario["vms"].as_array_mut().unwrap().push(json!({
        "vmid": 100, "name": "app", "node": "pve1", "status": "stopped",
        "config": {"name": "app", "scsi0": "local-lvm:vm-100-disk-0,size=32G",
                   "net0": "virtio=BC:24:11:AA:00:01,bridge=vmbr0",
                   "smbios1": "uuid=11111111-2222-4333-8444-555555555555",
                   "meta": "creation-qemu=8.1.5,ctime=1600000000"},
    }));
    let mut pve = FakePve::start(scenario);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("db.yaml", spec("db", "pve1", "9000", "")),
        ("web.yaml", spec("web", "pve1", "9000", "")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let db = ws.status("db")["vmId"].as_u64().expect("a VMID") as u32;
    let web = ws.status("web")["vmId"].as_u64().expect("a VMID") as u32;
    assert!(db > 100 && web > 100, "{db} {web}");

    ws.remove_state_and_key();
    let mut forged = pve.vm(100)["config"].clone();
    forged["description"] = json!("proxsync-id: install=test spec=db uid=0123456789abcdef");
    forged["tags"] = json!("proxsync.test");
    pve.remove_vm(100);
    pve.add_vm(
        json!({"vmid": 100, "name": "app", "node": "pve1", "status": "stopped",
                      "config": forged}),
    );
    let real_uuid = pve.vm(db)["config"]["smbios1"]
        .as_str()
        .unwrap()
        .trim_start_matches("uuid=")
        .to_string();

    let list = ws.proxsync(&["adopt", "--all-unverified"]);
    let listed = common::engine::text(&list);
    assert!(list.status.success(), "{listed}");
    for line in [
        format!("web\tVM {web} (web) on lab/pve1\n"),
        "db\tVM 100 (app) on lab/pve1\tmarker does not verify: smbios1 uuid 11111111".to_string(),
        format!("db\tVM {db} (db) on lab/pve1\tmarker does not verify: smbios1 uuid {real_uuid}"),
    ] {
        assert!(listed.contains(&line), "{line:?} in:\n{listed}");
    }
    assert!(
        listed.contains("MACs BC:24:11:AA:00:01")
            && listed.contains("local-lvm:vm-100-disk-0 (32G)")
            && listed.contains("config meta ctime 2020-09-13T12:26:40Z"),
        "{listed}"
    );
    assert!(
        listed.contains(&format!("spec db is claimed by 2 guests (100, {db})")),
        "{listed}"
    );

    let yes = ws.proxsync(&["adopt", "--all-unverified", "--yes"]);
    let said = common::engine::text(&yes);
    assert!(!yes.status.success(), "a spec left to a person: {said}");
    assert!(
        said.contains(&format!("VM {web} is now spec web's")) && !said.contains("is now spec db's"),
        "{said}"
    );
    assert!(said.contains("proxsync adopt db --vmid N"), "{said}");
    let (_, out) = ws.run_once();
    let (_, reason, message) = ws.condition("db", "Ready");
    assert_eq!(reason, "UnverifiedClaim", "{message}\n{out}");
    assert_eq!(ws.condition("web", "Ready").1, "Available");
    assert_eq!(
        pve.vm(100)["config"]["description"],
        json!("proxsync-id: install=test spec=db uid=0123456789abcdef"),
        "the forged VM is neither recorded nor signed"
    );

    // The person compares them and names the real one.
    let adopt = ws.proxsync(&["adopt", "db", "--vmid", &db.to_string()]);
    assert!(adopt.status.success(), "{}", common::engine::text(&adopt));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(ws.status("db")["vmId"].as_u64(), Some(db as u64));
    let key = MarkerKey::load(&ws.path("state"))
        .unwrap()
        .expect("a new key");
    let signed = pve.vm(db)["config"]["description"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        Marker::parse(&signed).unwrap().verifies(&key, db),
        "{signed}"
    );
    let forged = pve.vm(100)["config"]["description"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !Marker::parse(&forged).unwrap().verifies(&key, 100),
        "the forged marker is never signed: {forged}"
    );
}
