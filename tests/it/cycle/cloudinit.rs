//! cloud-init against fakepve: PVE's options for each native field, PVE's cloud-init drive, the
//! NoCloud seed image uploaded and attached for `userData`, swapped (not the VM) when
//! `userData` changes, the old seed removed, and no user-data or key in status or logs.

use crate::common;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, default_scenario};

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop";

fn get(pve: &FakePve, path: &str) -> serde_json::Value {
    let client = common::verified_client(&pve.ca_pem());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = client
            .get(pve.api_url(path))
            .header(
                "Authorization",
                common::token_header(common::TOKEN_ID, common::TOKEN_SECRET),
            )
            .send()
            .await
            .expect("GET");
        r.json::<serde_json::Value>().await.expect("JSON")["data"].clone()
    })
}

/// The iso volumes of storage `local` on pve1.
fn isos(pve: &FakePve) -> Vec<String> {
    let mut v: Vec<String> = get(pve, "/nodes/pve1/storage/local/content?content=iso")
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v["volid"].as_str().map(str::to_string))
        .collect();
    v.sort();
    v
}

fn seeds(pve: &FakePve) -> Vec<String> {
    isos(pve)
        .into_iter()
        .filter(|v| v.starts_with("local:iso/proxsync.test.web-01."))
        .collect()
}

fn config(pve: &mut FakePve, vmid: u64) -> serde_json::Value {
    pve.vm(vmid as u32)["config"].clone()
}

const NATIVE: &str = "    cloudInit:\n      user: alice\n      sshKeys:\n        - \"KEY\"\n      \
ipConfig:\n        - {ip: 10.0.0.5/24, gateway: 10.0.0.1, ip6: auto}\n      nameservers: [10.0.0.53, 10.0.0.54]\n      \
searchDomain: example.net\n      upgradePackages: false\n";

#[test]
fn native_fields_become_pve_options_and_a_cloud_init_drive() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[(
        "web.yaml",
        spec("web-01", "pve1", "9000", &NATIVE.replace("KEY", KEY)),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms = owned_vms(&mut pve);
    assert_eq!(vms.len(), 1, "{out}");
    let cfg = config(&mut pve, vms[0].0);
    assert_eq!(cfg["ciuser"], "alice", "{cfg}");
    assert_eq!(
        cfg["sshkeys"]
            .as_str()
            .map(|k| k.replace("%20", " ").replace("%40", "@")),
        Some(KEY.to_string()),
        "{cfg}"
    );
    assert_eq!(
        cfg["ipconfig0"], "ip=10.0.0.5/24,gw=10.0.0.1,ip6=auto",
        "{cfg}"
    );
    assert_eq!(cfg["nameserver"], "10.0.0.53 10.0.0.54", "{cfg}");
    assert_eq!(cfg["searchdomain"], "example.net", "{cfg}");
    assert!(
        matches!(cfg["ciupgrade"].to_string().as_str(), "0" | "\"0\""),
        "{cfg}"
    );
    let drive = cfg["ide0"].as_str().unwrap_or_default();
    assert!(
        drive.starts_with("local-lvm:") && drive.contains("cloudinit"),
        "{cfg}"
    );
    assert!(seeds(&pve).is_empty(), "no userData, no seed");
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{out}");

    // Nothing more to do the next time.
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(pve.requests().iter().all(|r| r.method == "GET"), "{out}");

    // A changed key is updated in place and waits for a reboot (the VM runs).
    let other = KEY.replace("alice@laptop", "bob@desk");
    ws.commit_specs(&[(
        "web.yaml",
        spec("web-01", "pve1", "9000", &NATIVE.replace("KEY", &other)),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let after = owned_vms(&mut pve);
    assert_eq!(after, vms, "same VM");
    let pending = get(&pve, &format!("/nodes/pve1/qemu/{}/pending", vms[0].0));
    let keys = pending
        .as_array()
        .and_then(|a| a.iter().find(|p| p["key"] == "sshkeys"))
        .cloned()
        .unwrap_or_default();
    assert!(
        format!("{}{}", keys["value"], keys["pending"]).contains("bob"),
        "{pending}\n{out}"
    );
    // Sent once: the pending value counts as set.
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(pve.requests().iter().all(|r| r.method == "GET"), "{out}");
    let (status, _, message) = ws.condition("web-01", "RebootPending");
    assert_eq!(status, "True", "{message}\n{out}");
    assert!(message.contains("cloudinit"), "{message}");
    // Keys never show in status or logs.
    let status = std::fs::read_to_string(ws.path("status/web-01.yaml")).unwrap();
    assert!(
        !status.contains("AAAAC3Nz") && !out.contains("AAAAC3Nz"),
        "{status}\n{out}"
    );
}

const USER_DATA_1: &str = "    userData: |\n      #cloud-config\n      packages: [nginx]\n      runcmd: [\"echo SECRET-ONE\"]\n";
const USER_DATA_2: &str = "    userData: |\n      #cloud-config\n      packages: [nginx, curl]\n      runcmd: [\"echo SECRET-TWO\"]\n";

#[test]
fn user_data_is_uploaded_as_a_seed_attached_and_swapped_in_place() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(&pve, "[reconcile]\nmax_delete_fraction = 1.0\n");
    let net = "    cloudInit:\n      ipConfig: [{ip: dhcp}]\n";
    ws.commit_specs(&[(
        "web.yaml",
        spec("web-01", "pve1", "9000", &format!("{USER_DATA_1}{net}")),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vms = owned_vms(&mut pve);
    assert_eq!(vms.len(), 1, "{out}");
    let vmid = vms[0].0;

    // The upload reached PVE, and the seed is on the storage and attached as a CD-ROM.
    let uploads: Vec<_> = pve
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/nodes/pve1/storage/local/upload"))
        .collect();
    assert_eq!(uploads.len(), 1, "{out}");
    assert!(uploads[0].body.contains("name=\"content\"") && uploads[0].body.contains("iso"));
    let first = seeds(&pve);
    assert_eq!(first.len(), 1, "{:?}", isos(&pve));
    let cfg = config(&mut pve, vmid);
    assert_eq!(cfg["ide3"], format!("{},media=cdrom", first[0]), "{cfg}");
    assert_eq!(cfg["ipconfig0"], "ip=dhcp", "{cfg}");
    assert!(
        !cfg.as_object()
            .unwrap()
            .values()
            .any(|v| v.as_str().is_some_and(|s| s.contains("cloudinit"))),
        "no second cidata volume next to the seed: {cfg}"
    );
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{out}");

    // Unchanged: no new upload.
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(pve.requests().iter().all(|r| r.method == "GET"), "{out}");

    // Changed userData: a new seed, attached to the same VM; the old one is removed.
    ws.commit_specs(&[(
        "web.yaml",
        spec("web-01", "pve1", "9000", &format!("{USER_DATA_2}{net}")),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(owned_vms(&mut pve), vms, "the VM stays: {out}");
    let second = seeds(&pve);
    assert_eq!(second.len(), 1, "old seed removed: {second:?}");
    assert_ne!(second, first);
    let cfg = config(&mut pve, vmid);
    assert_eq!(cfg["ide3"], format!("{},media=cdrom", second[0]), "{cfg}");
    let (status, _, message) = ws.condition("web-01", "RebootPending");
    assert_eq!(status, "True", "{message}");
    assert!(message.contains("cloudinit"), "{message}");
    let status = std::fs::read_to_string(ws.path("status/web-01.yaml")).unwrap();
    for secret in ["SECRET-ONE", "SECRET-TWO", "packages"] {
        assert!(!status.contains(secret), "{status}");
        assert!(!out.contains(secret), "{out}");
    }

    // userData removed: the seed is detached and deleted; PVE's drive takes over.
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", net))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(seeds(&pve).is_empty(), "{out}");
    let cfg = config(&mut pve, vmid);
    assert_eq!(cfg["ide3"], "none,media=cdrom", "ejected: {cfg}");
    // The VM runs: PVE adds its cloud-init drive at the next start.
    let pending = get(&pve, &format!("/nodes/pve1/qemu/{vmid}/pending"));
    let ide0 = pending
        .as_array()
        .and_then(|a| a.iter().find(|p| p["key"] == "ide0"))
        .cloned()
        .unwrap_or_default();
    let ide0 = format!("{}{}", ide0["value"], ide0["pending"]);
    assert!(ide0.contains("cloudinit"), "{pending}");
    assert_eq!(ws.condition("web-01", "RebootPending").0, "True");

    // The VM's removal takes its seed with it.
    ws.commit_specs(&[(
        "web.yaml",
        spec("web-01", "pve1", "9000", &format!("{USER_DATA_1}{net}")),
    )]);
    assert!(ws.run_once().0);
    assert_eq!(seeds(&pve).len(), 1);
    ws.commit_specs(&[("other.yaml", spec("other-01", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(seeds(&pve).is_empty(), "{out}");
}

#[test]
fn invalid_cloud_init_fields_are_refused_before_anything_is_done() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[(
        "web.yaml",
        spec(
            "web-01",
            "pve1",
            "9000",
            "    userData: \"packages: [x]\"\n    cloudInit:\n      ipConfig: [{ip: \"10.0.0.5/24,gw=1.1.1.1\"}]\n",
        ),
    )]);
    let (_, out) = ws.run_once();
    assert!(owned_vms(&mut pve).is_empty(), "{out}");
    let (status, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "ValidationFailed"),
        "{message}"
    );
}

#[test]
fn user_data_without_an_iso_storage_creates_nothing() {
    let mut scenario = default_scenario();
    scenario["storages"]["local"]["content"] = serde_json::json!("import,vztmpl,snippets");
    let mut pve = FakePve::start(scenario);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[(
        "a.yaml",
        spec(
            "seeded",
            "pve1",
            "9000",
            "    userData: |\n      #cloud-config\n      packages: [nginx]\n",
        ),
    )]);
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let writes: Vec<_> = pve
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(
        writes.is_empty(),
        "pre-flight stops it before anything is created: {writes:?}"
    );
    assert!(owned_vms(&mut pve).is_empty());
    let (s, reason, message) = ws.condition("seeded", "Stalled");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "ConfigurationError"),
        "{message}"
    );
    assert!(message.contains("iso content"), "{message}");
}

/// A seed image holds its VM's user data (with SOPS, the decrypted secret): it goes with the
/// VM. A spec removed and the daemon stopped while its `qmdestroy` runs: the record keeps the
/// delete's task, the next run finds it ended and removes the VM's seed with it.
#[test]
fn a_delete_finished_after_a_restart_takes_the_seed_with_it() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(&pve, "[reconcile]\nmax_delete_fraction = 1.0\n");
    let net = "    cloudInit:\n      ipConfig: [{ip: dhcp}]\n";
    let keep = ("other.yaml", spec("other-01", "pve1", "9000", ""));
    ws.commit_specs(&[
        (
            "web.yaml",
            spec("web-01", "pve1", "9000", &format!("{USER_DATA_1}{net}")),
        ),
        keep.clone(),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(seeds(&pve).len(), 1, "{out}");
    let vmid = owned_vms(&mut pve)
        .into_iter()
        .find(|(_, n)| n == "web-01")
        .expect("web-01's VM")
        .0;

    pve.set_time_scale(1.0);
    pve.destroy_timing(3.0);
    ws.commit_specs(&[keep]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(["run", "--once", "--config"])
        .arg(ws.config())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start proxsync");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let destroying = |pve: &mut FakePve| {
        pve.tasks()
            .iter()
            .any(|t| t["type"] == "qmdestroy" && t["status"] == "running")
    };
    while !destroying(&mut pve) {
        assert!(std::time::Instant::now() < deadline, "a qmdestroy starts");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Stopped mid-delete (SIGTERM): the delete's task is recorded, not waited for.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(stopped.success());
    let _ = child.wait();
    assert_eq!(seeds(&pve).len(), 1, "the seed stays while its VM does");
    while pve.vms().iter().any(|v| v["vmid"].as_u64() == Some(vmid)) {
        assert!(std::time::Instant::now() < deadline, "the qmdestroy ends");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(
        seeds(&pve).is_empty(),
        "the seed went with its VM: {:?}\n{out}",
        isos(&pve)
    );
}

/// The database lost and a spec removed: its VM is an orphan, deleted once stopped past the
/// grace period, and its seed image goes with it; a hand clone of the VM (its CD-ROM copied)
/// keeps the seed it names. Once the clone is gone too, the sweep of the next full cycle
/// removes the seed: no spec or record names its spec, and no guest names it.
#[test]
fn an_orphan_deleted_after_a_lost_database_takes_its_seed_and_a_copy_keeps_it() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::with_extra(
        &pve,
        "[reconcile]\norphans = \"delete-stopped\"\norphan_grace = \"1s\"\nmax_delete_fraction = 1.0\n",
    );
    let net = "    cloudInit:\n      ipConfig: [{ip: dhcp}]\n";
    let keep = (
        "other.yaml",
        spec("other-01", "pve1", "9000", &format!("{USER_DATA_2}{net}")),
    );
    ws.commit_specs(&[
        (
            "web.yaml",
            spec("web-01", "pve1", "9000", &format!("{USER_DATA_1}{net}")),
        ),
        keep.clone(),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let seed = seeds(&pve);
    assert_eq!(seed.len(), 1, "{out}");
    let vmid = owned_vms(&mut pve)
        .into_iter()
        .find(|(_, n)| n == "web-01")
        .expect("web-01's VM")
        .0 as u32;

    // A person's clone in the web UI: the config copied, seed CD-ROM and marker included.
    let mut copy = pve.vm(vmid)["config"].clone();
    copy["name"] = serde_json::json!("web-copy");
    pve.add_vm(serde_json::json!({
        "vmid": 301, "name": "web-copy", "node": "pve1", "status": "running", "config": copy,
    }));

    ws.remove_state();
    ws.commit_specs(&[keep]);
    pve.set_vm(vmid, serde_json::json!({"status": "stopped"}));
    let (_, out) = ws.run_once();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let (_, more) = ws.run_once();
    assert!(
        !pve.vms()
            .iter()
            .any(|v| v["vmid"].as_u64() == Some(vmid as u64)),
        "the orphan is deleted\n{out}\n{more}"
    );
    assert_eq!(
        seeds(&pve),
        seed,
        "the copy names the seed: kept\n{out}\n{more}"
    );

    // The copy is deleted by hand: nothing names the seed, and its spec is gone.
    pve.remove_vm(301);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(seeds(&pve).is_empty(), "swept: {:?}\n{out}", isos(&pve));
}

/// The sweep of a full cycle: this install's seed images of a spec no source spec or record
/// names are removed, unless a guest's config names one; another install's are not; each
/// storage is listed once. A file of a gone spec that a person attached to their own VM stays.
#[test]
fn the_sweep_removes_only_unnamed_seeds_of_gone_specs() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let net = "    cloudInit:\n      ipConfig: [{ip: dhcp}]\n";
    ws.commit_specs(&[(
        "web.yaml",
        spec("web-01", "pve1", "9000", &format!("{USER_DATA_1}{net}")),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let ours = seeds(&pve);
    assert_eq!(ours.len(), 1, "{out}");
    let gone = "proxsync.test.gone-01.0123456789ab.iso";
    let named = "proxsync.test.gone-02.0123456789ab.iso";
    let theirs = "proxsync.other.gone-03.0123456789ab.iso";
    for file in [gone, named, theirs] {
        pve.store_file("local", file, 51200, "iso");
    }
    pve.add_vm(serde_json::json!({
        "vmid": 500, "name": "someone", "node": "pve1", "status": "stopped",
        "config": {"name": "someone", "ide2": format!("local:iso/{named},media=cdrom")},
    }));

    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    // What the run sent (before this test's own reads of the storage).
    let reqs = pve.requests();
    let left = isos(&pve);
    assert!(
        !left.contains(&format!("local:iso/{gone}")),
        "{left:?}\n{out}"
    );
    for kept in [named, theirs] {
        assert!(
            left.contains(&format!("local:iso/{kept}")),
            "{left:?}\n{out}"
        );
    }
    assert!(
        left.contains(&ours[0]),
        "the live spec's seed stays: {left:?}"
    );
    let listings = reqs
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/nodes/pve1/storage/local/content"))
        .count();
    assert_eq!(
        listings, 1,
        "one listing of the storage per full cycle: {reqs:#?}"
    );
    let deletes: Vec<&str> = reqs
        .iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| r.path.as_str())
        .collect();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert!(deletes[0].contains("gone-01"), "{deletes:?}");
}
