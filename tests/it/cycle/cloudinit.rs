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
