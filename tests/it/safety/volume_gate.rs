//! The volume gate end to end against fakepve: a cloud-init seed is attached only when its file
//! is the one proxsync uploaded, a `destroyDisks` destroy is bound to the volume it was written
//! for and happens once, and a protected VM is neither powered off for a delete PVE would
//! refuse nor sent a drive removal PVE would refuse.

use crate::common;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, default_scenario};
use serde_json::{Value, json};

/// A request to the fake's API as a person (or another tool) would send it; `(status, data)`.
fn api(pve: &FakePve, method: reqwest::Method, path: &str, form: &[(&str, &str)]) -> (u16, Value) {
    let client = common::verified_client(&pve.ca_pem());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut req = client.request(method, pve.api_url(path)).header(
            "Authorization",
            common::token_header(common::TOKEN_ID, common::TOKEN_SECRET),
        );
        if !form.is_empty() {
            req = req.form(form);
        }
        let r = req.send().await.expect("an answer");
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or_default();
        (status, body["data"].clone())
    })
}

fn get(pve: &FakePve, path: &str) -> Value {
    let (status, data) = api(pve, reqwest::Method::GET, path, &[]);
    assert_eq!(status, 200, "GET {path}");
    data
}

/// A config value as a string, whether the fake stored it as a number or a string.
fn value(v: &Value) -> String {
    v.to_string().trim_matches('"').to_string()
}

fn writes(pve: &mut FakePve) -> Vec<String> {
    pve.requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

// ------------------------------------------------------------------------- seeds

const USER_DATA_1: &str = "    userData: |\n      #cloud-config\n      runcmd: [\"echo FIRST\"]\n";
const USER_DATA_2: &str = "    userData: |\n      #cloud-config\n      runcmd: [\"echo SECOND\"]\n";

/// This spec's seed images on storage `local` of pve1: volid -> listing entry.
fn seeds(pve: &FakePve) -> Vec<Value> {
    get(pve, "/nodes/pve1/storage/local/content?content=iso")
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|v| {
            v["volid"]
                .as_str()
                .is_some_and(|id| id.starts_with("local:iso/proxsync.test.web-01."))
        })
        .collect()
}

/// The attack: after a `userData` change deletes the old seed, a storage user uploads a file
/// under the old seed's name (the same size; only PVE sets its ctime); reverting `userData`
/// must upload the seed again, never attach the file found there.
#[test]
fn a_file_planted_under_an_old_seeds_name_is_replaced_before_it_is_attached() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", USER_DATA_1))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    let first = seeds(&pve);
    assert_eq!(first.len(), 1, "{first:?}");
    let old = first[0]["volid"].as_str().unwrap().to_string();
    let old_file = old.trim_start_matches("local:iso/").to_string();
    let size = first[0]["size"].as_u64().unwrap();
    let ctime = first[0]["ctime"].as_u64().unwrap();

    // userData changes: a new seed is attached and the old one deleted.
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", USER_DATA_2))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(
        seeds(&pve).iter().all(|s| s["volid"] != old.as_str()),
        "the old seed is gone"
    );

    // Someone with upload rights on the storage puts a file under the old seed's name.
    pve.store_file_at("local", &old_file, size, ctime + 3600);

    // userData reverted: the seed is uploaded again (PVE overwrites the file) before the
    // config update that attaches it.
    pve.clear_requests();
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", USER_DATA_1))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let requests = pve.requests();
    let upload = requests.iter().position(|r| {
        r.method == "POST"
            && r.path.ends_with("/storage/local/upload")
            && r.body.contains(&old_file)
    });
    let attach = requests
        .iter()
        .rposition(|r| r.method == "POST" && r.path.ends_with(&format!("/qemu/{vmid}/config")));
    assert!(
        upload.is_some() && attach.is_some() && upload < attach,
        "uploaded again before the attach: {:?}\n{out}",
        writes(&mut pve)
    );
    let cfg = pve.vm(vmid)["config"].clone();
    assert_eq!(value(&cfg["ide3"]), format!("{old},media=cdrom"), "{cfg}");
    let now = seeds(&pve);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(
        now[0]["ctime"].as_u64(),
        Some(ctime + 3600),
        "the planted file was overwritten: {now:?}"
    );
    let history = ws.status("web-01")["history"].to_string();
    assert!(
        history.contains("not the file proxsync uploaded") && history.contains(&old_file),
        "{history}"
    );

    // The seed proxsync uploaded is trusted from then on: an unrelated change uploads nothing.
    pve.clear_requests();
    ws.commit_specs(&[(
        "web.yaml",
        spec(
            "web-01",
            "pve1",
            "9000",
            &format!("{USER_DATA_1}    tags: [web]\n"),
        ),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(
        !writes(&mut pve).iter().any(|w| w.ends_with("/upload")),
        "{:?}",
        writes(&mut pve)
    );
}

// ------------------------------------------------------------------------- destroyDisks

fn disks_spec(cpu: u32, disks: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: web-01\nspec:\n  forProvider:\n    \
         site: lab\n    node: pve1\n    image: \"9000\"\n    cpu: {cpu}\n    memory: 2Gi\n    disks:\n{disks}"
    )
}

fn scenario_with_data_storage() -> Value {
    let mut sc = default_scenario();
    sc["storages"]["data"] = json!({"type": "dir", "path": "/srv/data", "content": "images"});
    sc
}

const BOOT_AND_DATA: &str =
    "      - {size: 8Gi}\n      - {slot: scsi1, size: 2Gi, storage: data}\n";
const DESTROY_DATA: &str = "      - {size: 8Gi}\n    destroyDisks: [scsi1]\n";

/// A person attaches a new disk at `slot` (PVE allocates it; its volume id may well be the
/// one a destroyed disk had, as PVE takes the first free `vm-N-disk-M`).
fn attach_by_hand(pve: &FakePve, vmid: u32, slot: &str, storage_gib: &str) -> String {
    let (status, _) = api(
        pve,
        reqwest::Method::PUT,
        &format!("/nodes/pve1/qemu/{vmid}/config"),
        &[(slot, storage_gib)],
    );
    assert_eq!(status, 200);
    let cfg = get(pve, &format!("/nodes/pve1/qemu/{vmid}/config"));
    let drive = value(&cfg[slot]);
    drive.split(',').next().unwrap().to_string()
}

/// The reproduction: `destroyDisks: [scsi1]` converged long ago; a disk attached by hand at
/// scsi1 later is kept through an unrelated change (CPU 2 -> 4), and the history says why.
#[test]
fn a_destroy_happens_once_and_never_to_a_later_disk_in_its_slot() {
    let mut pve = FakePve::start(scenario_with_data_storage());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", disks_spec(2, BOOT_AND_DATA))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    let scsi1 = value(&pve.vm(vmid)["config"]["scsi1"]);
    let destroyed = scsi1.split(',').next().unwrap().to_string();

    ws.commit_specs(&[("web.yaml", disks_spec(2, DESTROY_DATA))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(pve.vm(vmid)["config"]["scsi1"].is_null());
    let history = ws.status("web-01")["history"].to_string();
    assert!(
        history.contains("disk destroyed") && history.contains(&destroyed),
        "{history}"
    );

    // Later, by hand: a 3 GiB disk at scsi1.
    let by_hand = attach_by_hand(&pve, vmid, "scsi1", "data:3");

    // An unrelated change converges the VM: the disk at scsi1 stays, with its volume.
    ws.commit_specs(&[("web.yaml", disks_spec(4, DESTROY_DATA))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    assert_eq!(
        value(&vm["pending"]["cores"]),
        "4",
        "converged (CPU waits for a reboot): {vm}"
    );
    let cfg = vm["config"].clone();
    assert!(
        value(&cfg["scsi1"]).starts_with(&by_hand),
        "the disk attached by hand is kept: {cfg}\n{out}"
    );
    let volumes = pve.call("storages", json!({})).unwrap()["data"]["volumes"].clone();
    assert!(
        volumes.get(by_hand.trim_start_matches("data:")).is_some(),
        "its volume exists: {volumes}"
    );
    let history = ws.status("web-01")["history"].to_string();
    assert!(
        history.contains("destroyDisks no longer applies") && history.contains(&by_hand),
        "{history}"
    );
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{out}");
}

/// With the state database deleted (the README says that is safe), a `destroyDisks` slot has
/// no recorded binding: whatever sits there is not destroyed, and the history says what to do.
#[test]
fn a_lost_database_never_binds_a_destroy_to_what_the_slot_holds_now() {
    let mut pve = FakePve::start(scenario_with_data_storage());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", disks_spec(2, BOOT_AND_DATA))]);
    assert!(ws.run_once().0);
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    ws.commit_specs(&[("web.yaml", disks_spec(2, DESTROY_DATA))]);
    assert!(ws.run_once().0);
    assert!(pve.vm(vmid)["config"]["scsi1"].is_null());

    let by_hand = attach_by_hand(&pve, vmid, "scsi1", "data:3");
    ws.remove_state();
    ws.commit_specs(&[("web.yaml", disks_spec(4, DESTROY_DATA))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(owned_vms(&mut pve).len(), 1, "adopted, not created: {out}");
    let vm = pve.vm(vmid);
    assert_eq!(
        value(&vm["pending"]["cores"]),
        "4",
        "converged (CPU waits for a reboot): {vm}"
    );
    let cfg = vm["config"].clone();
    assert!(
        value(&cfg["scsi1"]).starts_with(&by_hand),
        "kept: {cfg}\n{out}"
    );
    let history = ws.status("web-01")["history"].to_string();
    assert!(
        history.contains("no record of the volume") && history.contains(&by_hand),
        "{history}"
    );
}

// ------------------------------------------------------------------------- protection

fn vm_exists(pve: &mut FakePve, vmid: u32) -> bool {
    pve.vms().iter().any(|vm| vm["vmid"] == json!(vmid))
}

/// A spec with `protection: true` is removed: proxsync set the flag, so it clears it before
/// it powers the VM off, and the VM is deleted (PVE refuses to delete a protected VM).
#[test]
fn a_removed_spec_that_protected_its_vm_clears_the_flag_and_deletes_it() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(&pve, "[reconcile]\nmax_delete_fraction = 1.0\n");
    let keep = ("keep.yaml", spec("keep-01", "pve1", "9000", ""));
    ws.commit_specs(&[
        keep.clone(),
        (
            "web.yaml",
            spec("web-01", "pve1", "9000", "    protection: true\n"),
        ),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)
        .into_iter()
        .find(|(_, name)| name == "web-01")
        .unwrap()
        .0 as u32;
    assert_eq!(value(&pve.vm(vmid)["config"]["protection"]), "1");

    ws.commit_specs(&[keep]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(!vm_exists(&mut pve, vmid), "deleted: {out}");
}

/// A VM protected by hand (its spec never said `protection`): its spec's removal neither
/// powers it off nor deletes it, and says which flag stops it and what to do.
#[test]
fn a_vm_protected_by_hand_is_neither_powered_off_nor_deleted() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(&pve, "[reconcile]\nmax_delete_fraction = 1.0\n");
    let keep = ("keep.yaml", spec("keep-01", "pve1", "9000", ""));
    ws.commit_specs(&[
        keep.clone(),
        ("web.yaml", spec("web-01", "pve1", "9000", "")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)
        .into_iter()
        .find(|(_, name)| name == "web-01")
        .unwrap()
        .0 as u32;
    let (status, _) = api(
        &pve,
        reqwest::Method::PUT,
        &format!("/nodes/pve1/qemu/{vmid}/config"),
        &[("protection", "1")],
    );
    assert_eq!(status, 200);

    ws.commit_specs(&[keep]);
    pve.clear_requests();
    let (_ok, out) = ws.run_once();
    let vm = pve.vm(vmid);
    assert_eq!(vm["status"], "running", "not powered off: {out}");
    assert!(
        !writes(&mut pve)
            .iter()
            .any(|w| w.contains(&format!("/qemu/{vmid}"))),
        "nothing sent to VM {vmid}: {:?}",
        writes(&mut pve)
    );
    assert!(
        out.contains("protection") && out.contains(&format!("qm set {vmid} --protection 0")),
        "{out}"
    );
    let (status, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Protected"),
        "{message}"
    );
}

/// On a protected VM the disks the spec adds are added, and the ones it removes are kept and
/// reported (PVE refuses removing any drive of a protected VM, and would fail the whole update
/// with it); with `protection: false` the same spec removes them.
#[test]
fn a_protected_vm_gets_its_new_disks_and_keeps_the_removed_ones_until_unprotected() {
    let mut pve = FakePve::start(scenario_with_data_storage());
    let ws = Workspace::new(&pve);
    let protected = "    protection: true\n";
    let first = format!("{BOOT_AND_DATA}      - {{slot: scsi2, size: 1Gi, storage: data}}\n");
    ws.commit_specs(&[("web.yaml", disks_spec(2, &first) + protected)]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;

    // scsi1 leaves `disks` (detach), scsi2 is destroyed, scsi3 is new.
    let second = "      - {size: 8Gi}\n      - {slot: scsi3, size: 1Gi, storage: data}\n    destroyDisks: [scsi2]\n";
    ws.commit_specs(&[("web.yaml", disks_spec(2, second) + protected)]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let cfg = pve.vm(vmid)["config"].clone();
    assert!(
        cfg["scsi3"].is_string(),
        "the new disk is added: {cfg}\n{out}"
    );
    assert!(
        cfg["scsi1"].is_string() && cfg["scsi2"].is_string(),
        "nothing removed: {cfg}"
    );
    let (status, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Protected"),
        "{message}"
    );
    assert!(
        message.contains("protection") && message.contains("scsi1") && message.contains("scsi2"),
        "{message}"
    );

    // protection: false: cleared first, then scsi1 detached and scsi2 destroyed.
    ws.commit_specs(&[(
        "web.yaml",
        disks_spec(2, second) + "    protection: false\n",
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let cfg = pve.vm(vmid)["config"].clone();
    assert!(
        cfg["scsi1"].is_null() && cfg["scsi2"].is_null() && cfg["scsi3"].is_string(),
        "{cfg}"
    );
    assert_eq!(ws.condition("web-01", "Ready").0, "True");
}

/// A protected VM with PVE's cloud-init drive that the spec gives `userData`: the drive would
/// have to go in the update attaching the seed, which PVE refuses; nothing of `userData` is
/// sent (no upload, no failing update) and the spec says which flag stops it.
#[test]
fn user_data_on_a_protected_vm_with_pves_cloud_init_drive_is_held_not_half_sent() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let native = "    protection: true\n    cloudInit:\n      user: ops\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", native))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    assert!(
        value(&pve.vm(vmid)["config"]["ide0"]).contains("cloudinit"),
        "{}",
        pve.vm(vmid)
    );

    ws.commit_specs(&[(
        "web.yaml",
        spec("web-01", "pve1", "9000", &format!("{native}{USER_DATA_1}")),
    )]);
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert!(
        !writes(&mut pve)
            .iter()
            .any(|w| w.ends_with("/upload") || w.ends_with(&format!("/qemu/{vmid}/config"))),
        "{:?}",
        writes(&mut pve)
    );
    let (status, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Protected"),
        "{message}"
    );
    assert!(
        message.contains("ide0") && message.contains("userData"),
        "{message}"
    );
}
