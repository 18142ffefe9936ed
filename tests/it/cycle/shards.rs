//! Beyond one daemon: two installs splitting one repository by `[source] selector` on one
//! fakepve (different install ids and state directories, one shared marker key file), and one
//! proxsync per state directory.
//!
//! - Each install creates only the VMs of its own specs and never changes or deletes the
//!   other's.
//! - A spec moved from one shard to the other (its label changed in one commit) keeps its VM:
//!   the old owner hands it over (its tag removed, the signed marker kept), the new owner
//!   adopts it only after that, whichever runs first; never a delete, never a second VM.
//! - A second daemon (or `run --once`) on a state directory in use refuses to start, naming the
//!   PID that holds it.
//! - `doctor` warns about VMs carrying this install's tag whose marker another key signed.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::engine::{Workspace, text};
use common::{FakePve, default_scenario};
use proxsync::ownership::{Marker, MarkerKey};

/// A workspace of install `install` with `selector`, signing with the key file `key`; its
/// specs come from `repo` (another workspace's repository) when given.
fn install(
    pve: &FakePve,
    install: &str,
    selector: &str,
    key: &Path,
    repo: Option<&Path>,
) -> Workspace {
    let ws = Workspace::new(pve);
    let mut config = std::fs::read_to_string(ws.config()).unwrap();
    config = config.replace(
        "install_id = \"test\"",
        &format!(
            "install_id = \"{install}\"\nmarker_key_file = \"{}\"",
            key.display()
        ),
    );
    config = config.replace(
        "[source]\n",
        &format!("[source]\nselector = \"{selector}\"\n"),
    );
    if let Some(repo) = repo {
        config = config.replace(
            &format!("path = \"{}\"", ws.path("repo").display()),
            &format!("path = \"{}\"", repo.display()),
        );
    }
    std::fs::write(ws.config(), config).unwrap();
    ws
}

/// A spec on site `lab` (cloned from template 9000) with the label `tenant-id: <tenant>`.
fn tenant_spec(name: &str, tenant: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\n  labels:\n    \
         tenant-id: {tenant}\nspec:\n  forProvider:\n    site: lab\n    node: pve1\n    \
         image: \"9000\"\n    cpu: 2\n    memory: 2Gi\n    disk: 8Gi\n"
    )
}

/// [`tenant_spec`] as a container (`kind: ProxmoxLXC` from Debian's container template).
fn tenant_ct(name: &str, tenant: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: {name}\n  labels:\n    \
         tenant-id: {tenant}\nspec:\n  forProvider:\n    site: lab\n    node: pve1\n    \
         template: local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\n"
    )
}

/// One VM of the fake, as this test looks at it.
#[derive(Debug, Clone, PartialEq)]
struct Vm {
    vmid: u32,
    name: String,
    tags: Vec<String>,
    marker: Option<Marker>,
    config: serde_json::Value,
}

/// Every VM and container of the fake but the template.
fn vms(pve: &mut FakePve) -> Vec<Vm> {
    let mut guests = pve.vms();
    guests.extend(pve.cts());
    guests
        .into_iter()
        .filter(|v| v["vmid"].as_u64() != Some(9000))
        .map(|v| {
            let config = v["config"].clone();
            let tags = config["tags"]
                .as_str()
                .unwrap_or("")
                .split([';', ',', ' '])
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect();
            Vm {
                vmid: v["vmid"].as_u64().unwrap_or(0) as u32,
                name: v["name"].as_str().unwrap_or("").to_string(),
                tags,
                marker: Marker::parse(config["description"].as_str().unwrap_or("")),
                config,
            }
        })
        .collect()
}

/// The VMs whose marker names `spec` (any install): never more than one.
fn claims(pve: &mut FakePve, spec: &str) -> Vec<Vm> {
    vms(pve)
        .into_iter()
        .filter(|v| v.marker.as_ref().is_some_and(|m| m.spec == spec))
        .collect()
}

/// The names of the VMs tagged `proxsync.<install>`.
fn tagged(pve: &mut FakePve, install: &str) -> Vec<String> {
    let tag = format!("proxsync.{install}");
    let mut names: Vec<String> = vms(pve)
        .into_iter()
        .filter(|v| v.tags.contains(&tag))
        .map(|v| v.name)
        .collect();
    names.sort();
    names
}

/// Two installs on one repository: A manages tenant a, B tenant b, one shared key file.
fn two_installs(pve: &FakePve, key_dir: &Path) -> (Workspace, Workspace) {
    let key = key_dir.join("shared-marker.key");
    let a = install(pve, "shard-a", "tenant-id in (a)", &key, None);
    let b = install(
        pve,
        "shard-b",
        "tenant-id in (b)",
        &key,
        Some(&a.path("repo")),
    );
    (a, b)
}

#[test]
fn two_installs_split_one_repository_and_never_touch_each_others_vms() {
    let mut pve = FakePve::start(default_scenario());
    let keys = tempfile::tempdir().unwrap();
    let (a, b) = two_installs(&pve, keys.path());
    a.commit_specs(&[
        ("a1.yaml", tenant_spec("web-a1", "a")),
        ("a2.yaml", tenant_spec("web-a2", "a")),
        ("b1.yaml", tenant_spec("web-b1", "b")),
    ]);

    let (ok, out) = a.run_once();
    assert!(ok, "{out}");
    assert_eq!(tagged(&mut pve, "shard-a"), ["web-a1", "web-a2"], "{out}");
    assert!(tagged(&mut pve, "shard-b").is_empty());
    assert!(
        !a.path("status/web-b1.yaml").exists(),
        "install A writes no status for B's spec"
    );

    let (ok, out) = b.run_once();
    assert!(ok, "{out}");
    assert_eq!(tagged(&mut pve, "shard-b"), ["web-b1"], "{out}");
    assert_eq!(tagged(&mut pve, "shard-a"), ["web-a1", "web-a2"], "{out}");
    assert_eq!(vms(&mut pve).len(), 3);
    assert_eq!(b.condition("web-b1", "Ready").0, "True");

    // Each again: nothing to do, and nothing written to the other's VMs (nor any VM).
    let before = vms(&mut pve);
    pve.clear_requests();
    for ws in [&a, &b] {
        let (ok, out) = ws.run_once();
        assert!(ok, "{out}");
    }
    let writes: Vec<_> = pve
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    assert_eq!(vms(&mut pve), before);

    // A spec removed from the repository is deleted by its own install only.
    a.commit_specs(&[
        ("a1.yaml", tenant_spec("web-a1", "a")),
        ("b1.yaml", tenant_spec("web-b1", "b")),
    ]);
    let (ok, out) = b.run_once();
    assert!(ok, "{out}");
    assert_eq!(
        tagged(&mut pve, "shard-a"),
        ["web-a1", "web-a2"],
        "B leaves A's VMs: {out}"
    );
    let (ok, out) = a.run_once();
    assert!(ok, "{out}");
    assert_eq!(tagged(&mut pve, "shard-a"), ["web-a1"], "{out}");
    assert_eq!(tagged(&mut pve, "shard-b"), ["web-b1"]);
}

/// Checks the moved spec's VM after each step: exactly one VM claims the spec, at `vmid`.
fn one_vm(pve: &mut FakePve, vmid: u32, step: &str) -> Vm {
    let claims = claims(pve, "web-x");
    assert_eq!(claims.len(), 1, "{step}: {claims:?}");
    assert_eq!(claims[0].vmid, vmid, "{step}: the VM keeps its VMID");
    claims[0].clone()
}

/// Moves spec `web-x` from A's shard to B's (one commit changing its label) and runs the
/// installs in `order`; the VM must keep its VMID, never be deleted or doubled, and end B's.
fn move_spec(b_first: bool) {
    move_spec_of(b_first, tenant_spec);
}

/// [`move_spec`] with `web-x` made by `make` (a VM's spec or a container's).
fn move_spec_of(b_first: bool, make: fn(&str, &str) -> String) {
    let mut scenario = default_scenario();
    scenario["files"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
        "storage": "local", "name": "debian-12-standard_12.7-1_amd64.tar.zst",
        "size": 126_000_000_u64, "content": "vztmpl"}));
    let mut pve = FakePve::start(scenario);
    let keys = tempfile::tempdir().unwrap();
    let (a, b) = two_installs(&pve, keys.path());
    // web-a1 stays A's: the move is one of A's two VMs, within max_delete_fraction.
    a.commit_specs(&[
        ("a1.yaml", tenant_spec("web-a1", "a")),
        ("x.yaml", make("web-x", "a")),
        ("b1.yaml", tenant_spec("web-b1", "b")),
    ]);
    for ws in [&a, &b] {
        let (ok, out) = ws.run_once();
        assert!(ok, "{out}");
    }
    let vmid = a.status("web-x")["vmId"].as_u64().expect("a VMID") as u32;
    let vm = one_vm(&mut pve, vmid, "created by A");
    assert_eq!(vm.marker.as_ref().unwrap().install, "shard-a");

    a.commit_specs(&[
        ("a1.yaml", tenant_spec("web-a1", "a")),
        ("x.yaml", make("web-x", "b")),
        ("b1.yaml", tenant_spec("web-b1", "b")),
    ]);
    if b_first {
        // A has not handed it over yet: B waits, creates nothing.
        let (ok, out) = b.run_once();
        assert!(!ok, "web-x is not Ready for B yet: {out}");
        let (status, reason, message) = b.condition("web-x", "Ready");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "HeldByInstall"),
            "{message}"
        );
        assert!(
            message.contains("shard-a") && message.contains(&vmid.to_string()),
            "{message}"
        );
        let vm = one_vm(&mut pve, vmid, "B before A's hand-over");
        assert!(vm.tags.contains(&"proxsync.shard-a".to_string()), "{vm:?}");
    }

    let (ok, out) = a.run_once();
    assert!(ok, "{out}");
    assert!(out.contains("handover web-x"), "{out}");
    let vm = one_vm(&mut pve, vmid, "handed over by A");
    assert!(
        !vm.tags.iter().any(|t| t.starts_with("proxsync.")),
        "A's tag is gone: {vm:?}"
    );
    assert_eq!(
        vm.tags,
        ["tenant_b"],
        "its tags follow the spec as it now reads"
    );
    assert_eq!(
        vm.marker.as_ref().unwrap().install,
        "shard-a",
        "the marker stays"
    );
    assert!(
        !a.path("status/web-x.yaml").exists(),
        "A's status file of the spec is removed"
    );

    let (ok, out) = b.run_once();
    assert!(ok, "{out}");
    let vm = one_vm(&mut pve, vmid, "adopted by B");
    assert!(vm.tags.contains(&"proxsync.shard-b".to_string()), "{vm:?}");
    let marker = vm.marker.clone().unwrap();
    assert_eq!(
        (marker.install.as_str(), marker.spec.as_str()),
        ("shard-b", "web-x")
    );
    let key = MarkerKey::load_file(&keys.path().join("shared-marker.key"))
        .unwrap()
        .expect("the shared key");
    assert!(
        marker.verifies(&key, vmid),
        "B's marker verifies: {marker:?}"
    );
    assert_eq!(b.condition("web-x", "Ready").0, "True");

    // Settled: both again change nothing.
    for ws in [&a, &b, &a] {
        let (ok, out) = ws.run_once();
        assert!(ok, "{out}");
    }
    let end = one_vm(&mut pve, vmid, "settled");
    assert_eq!(end.config, vm.config, "nothing changed after the adoption");
    assert_eq!(tagged(&mut pve, "shard-a"), ["web-a1"]);
    assert_eq!(tagged(&mut pve, "shard-b"), ["web-b1", "web-x"]);
    assert_eq!(end.tags, ["proxsync.shard-b", "tenant_b"]);
}

#[test]
fn a_spec_moved_between_shards_keeps_its_vm_old_owner_first() {
    move_spec(false);
}

#[test]
fn a_spec_moved_between_shards_keeps_its_vm_new_owner_first() {
    move_spec(true);
}

/// A container spec moved between shards: handed over and taken over the same way, on the
/// container's path, never recreated.
#[test]
fn a_container_moved_between_shards_keeps_its_container() {
    move_spec_of(true, tenant_ct);
}

/// A selector that suddenly matches nothing (a typo) hands nothing over: the valve refuses.
#[test]
fn a_selector_typo_hands_nothing_over() {
    let mut pve = FakePve::start(default_scenario());
    let keys = tempfile::tempdir().unwrap();
    let (a, _b) = two_installs(&pve, keys.path());
    a.commit_specs(&[
        ("a1.yaml", tenant_spec("web-a1", "a")),
        ("a2.yaml", tenant_spec("web-a2", "a")),
    ]);
    let (ok, out) = a.run_once();
    assert!(ok, "{out}");
    let config = std::fs::read_to_string(a.config()).unwrap();
    std::fs::write(
        a.config(),
        config.replace("tenant-id in (a)", "tenant-id in (aa)"),
    )
    .unwrap();
    let (_, out) = a.run_once();
    assert_eq!(tagged(&mut pve, "shard-a"), ["web-a1", "web-a2"], "{out}");
    let summary = std::fs::read_to_string(a.path("status/_summary.yaml")).unwrap();
    assert!(
        summary.contains("refused to delete or release 2 VM(s)")
            && summary.contains("hand-overs to another install"),
        "{summary}"
    );
}

/// A bad selector is a config error naming the key and what would be valid.
#[test]
fn a_bad_selector_is_refused_with_what_would_be_valid() {
    let pve = FakePve::start(default_scenario());
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("k");
    let a = install(&pve, "shard-a", "tenant-id in (a", &key, None);
    a.commit_specs(&[("a1.yaml", tenant_spec("web-a1", "a"))]);
    let out = a.proxsync(&["run", "--once"]);
    assert!(!out.status.success());
    let out = text(&out);
    assert!(
        out.contains("[source] selector = \"tenant-id in (a\"")
            && out.contains("without its ')'")
            && out.contains("key in (a,b)"),
        "{out}"
    );
}

/// Waits until the lock file of `ws` names a PID, and returns it.
fn lock_holder(ws: &Workspace, timeout: Duration) -> u32 {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(pid) = std::fs::read_to_string(ws.path("state/lock"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "no PID in {} within {timeout:?}",
        ws.path("state/lock").display()
    );
}

#[test]
fn a_second_proxsync_on_one_state_directory_refuses_naming_the_first() {
    let pve = FakePve::start(default_scenario());
    let keys = tempfile::tempdir().unwrap();
    let (a, _b) = two_installs(&pve, keys.path());
    a.commit_specs(&[("a1.yaml", tenant_spec("web-a1", "a"))]);
    let log = std::fs::File::create(a.path("first.log")).unwrap();
    let mut first = Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(["run", "--config"])
        .arg(a.config())
        .env("PROXSYNC_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the first daemon");
    let pid = lock_holder(&a, Duration::from_secs(30));
    assert_eq!(pid, first.id(), "the lock names the daemon's PID");

    let state = a.path("state").display().to_string();
    // `proxsync adopt` no longer needs the lock: it records through the running daemon
    // (`features::daemon::a_lost_marker_key_is_confirmed_in_bulk_through_the_running_daemon`).
    for args in [&["run"][..], &["run", "--once"]] {
        let out = a.proxsync(args);
        let said = text(&out);
        assert!(!out.status.success(), "{args:?}: {said}");
        assert!(
            said.contains(&format!("PID {pid}"))
                && said.contains(&state)
                && said.contains("only one proxsync may run per state directory"),
            "{args:?}: {said}"
        );
    }
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first daemon runs on"
    );

    let stopped = Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let status = first.wait().unwrap();
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(a.path("first.log")).unwrap_or_default()
    );
    // Released with its holder: the next one runs.
    let (ok, out) = a.run_once();
    assert!(ok, "{out}");
}

/// Another instance with this install id but another marker key (the mistake docs/ha.md warns
/// about): `doctor` names its VMs.
#[test]
fn doctor_warns_about_this_install_signed_with_another_key() {
    let mut pve = FakePve::start(default_scenario());
    let keys = tempfile::tempdir().unwrap();
    let (a, _b) = two_installs(&pve, keys.path());
    // B's spec names a site only B would know: not A's business, not an error for A.
    let far = tenant_spec("web-b9", "b").replace("site: lab", "site: far");
    a.commit_specs(&[("a1.yaml", tenant_spec("web-a1", "a")), ("b9.yaml", far)]);
    let (ok, out) = a.run_once();
    assert!(ok, "{out}");
    let out = text(&a.proxsync(&["doctor"]));
    assert!(
        out.contains("ok   lab install shard-a: 1 VM(s) tagged proxsync.shard-a"),
        "{out}"
    );
    assert!(!out.contains("FAIL"), "{out}");

    // A second instance `shard-a` with its own key (and its own repository): its VM carries
    // the tag of shard-a and a marker A's key does not verify.
    let twin = install(
        &pve,
        "shard-a",
        "tenant-id in (a)",
        &keys.path().join("twin.key"),
        None,
    );
    twin.commit_specs(&[("t1.yaml", tenant_spec("web-t1", "a"))]);
    let (ok, out) = twin.run_once();
    assert!(ok, "{out}");
    let twin_vm = vms(&mut pve)
        .into_iter()
        .find(|v| v.name == "web-t1")
        .expect("the twin's VM")
        .vmid;
    let out = text(&a.proxsync(&["doctor"]));
    assert!(
        out.contains(&format!(
            "warn lab install shard-a: VM(s) {twin_vm} carry the tag proxsync.shard-a"
        )) && out.contains("two instances with one install_id must never run at once"),
        "{out}"
    );
}

/// Without a shared marker key, the new owner cannot verify the handed-over VM: it waits as
/// an unverified claim (never creating a second VM) until a person confirms it with
/// `proxsync adopt`, which is refused while the old owner's tag is still on the VM.
#[test]
fn without_a_shared_key_a_handed_over_vm_is_adopted_by_hand() {
    let mut pve = FakePve::start(default_scenario());
    let keys = tempfile::tempdir().unwrap();
    let a = install(
        &pve,
        "shard-a",
        "tenant-id in (a)",
        &keys.path().join("a.key"),
        None,
    );
    let b = install(
        &pve,
        "shard-b",
        "tenant-id in (b)",
        &keys.path().join("b.key"),
        Some(&a.path("repo")),
    );
    a.commit_specs(&[
        ("a1.yaml", tenant_spec("web-a1", "a")),
        ("x.yaml", tenant_spec("web-x", "a")),
    ]);
    let (ok, out) = a.run_once();
    assert!(ok, "{out}");
    let vmid = a.status("web-x")["vmId"].as_u64().expect("a VMID") as u32;
    a.commit_specs(&[
        ("a1.yaml", tenant_spec("web-a1", "a")),
        ("x.yaml", tenant_spec("web-x", "b")),
    ]);

    // Still A's: held, and adopting by hand is refused.
    let (ok, _) = b.run_once();
    assert!(!ok);
    assert_eq!(b.condition("web-x", "Ready").1, "HeldByInstall");
    let early = b.proxsync(&["adopt", "web-x", "--vmid", &vmid.to_string()]);
    let said = text(&early);
    assert!(!early.status.success(), "{said}");
    assert!(
        said.contains("proxsync.shard-a") && said.contains("not handed it over yet"),
        "{said}"
    );

    let (ok, out) = a.run_once();
    assert!(ok, "{out}");
    let (ok, out) = b.run_once();
    assert!(!ok, "{out}");
    let (status, reason, message) = b.condition("web-x", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UnverifiedClaim"),
        "{message}"
    );
    one_vm(&mut pve, vmid, "released, not verifiable by B");

    let adopt = b.proxsync(&["adopt", "web-x", "--vmid", &vmid.to_string()]);
    assert!(adopt.status.success(), "{}", text(&adopt));
    let (ok, out) = b.run_once();
    assert!(ok, "{out}");
    let vm = one_vm(&mut pve, vmid, "adopted by hand");
    assert!(vm.tags.contains(&"proxsync.shard-b".to_string()), "{vm:?}");
    let key = MarkerKey::load_file(&keys.path().join("b.key"))
        .unwrap()
        .expect("B's key");
    let marker = vm.marker.unwrap();
    assert_eq!(marker.install, "shard-b");
    assert!(marker.verifies(&key, vmid), "signed over with B's key");
}
