//! The VM surface of a spec against fakepve, end to end: the hardware fields (`cpuType`,
//! `bios`, `tpm`, `pool`, `vmId`, ...) on a create and on a change, what PVE applies at once
//! and what waits for the next start, and that nothing loops once converged.

use crate::common;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, default_scenario};
use serde_json::{Value, json};

const IMPORT: &str = "local:import/debian-12-genericcloud-amd64.qcow2";

fn scenario_with_pools() -> Value {
    let mut sc = default_scenario();
    sc["pools"] = json!(["prod", "lab"]);
    sc
}

/// A config value as a string, whether PVE (or the fake) stored it as a number or a string.
fn value(v: &Value) -> String {
    v.to_string().trim_matches('"').to_string()
}

/// The writes (anything but GET) of the requests since the last `clear_requests`.
fn writes(pve: &mut FakePve) -> Vec<String> {
    pve.requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

const HARDWARE: &str = "    cpuType: host
    sockets: 2
    numa: true
    balloon: 1Gi
    bios: ovmf
    preEnrolledKeys: true
    machine: q35
    scsiHardware: virtio-scsi-pci
    tpm: v2.0
    serialConsole: true
    agent: false
    osType: win11
    onBoot: true
    startup: {order: 3, upDelay: 30}
    pool: prod
    vmId: 4242
    description: |
      Billing database.
      Owner: team-db
";

#[test]
fn a_create_sets_every_hardware_field_and_a_second_run_writes_nothing() {
    let mut pve = FakePve::start(scenario_with_pools());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("db.yaml", spec("db-01", "pve1", IMPORT, HARDWARE))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(4242);
    assert_eq!(vm["vmid"], 4242, "created at the pinned vmId: {vm}");
    let cfg = &vm["config"];
    for (key, want) in [
        ("cpu", "host"),
        ("cores", "2"),
        ("sockets", "2"),
        ("numa", "1"),
        ("balloon", "1024"),
        ("bios", "ovmf"),
        // PVE pins a Windows guest's machine at create (qemu-server Machine.pm
        // check_and_pin_machine_string): the spec's q35, kept as PVE wrote it.
        ("machine", "pc-q35-10.0+pve1"),
        ("scsihw", "virtio-scsi-pci"),
        ("serial0", "socket"),
        ("vga", "serial0"),
        ("ostype", "win11"),
        ("onboot", "1"),
        ("startup", "order=3,up=30"),
    ] {
        assert_eq!(value(&cfg[key]), want, "{key} in {cfg}");
    }
    // agent: false is PVE's default (no `agent` key): proxsync's own default (on) is not sent.
    assert!(cfg["agent"].is_null(), "{cfg}");
    let efi = value(&cfg["efidisk0"]);
    assert!(
        efi.starts_with("local-lvm:vm-4242-disk-") && efi.contains("pre-enrolled-keys=1"),
        "the EFI disk is allocated on the boot disk's storage: {efi}"
    );
    let tpm = value(&cfg["tpmstate0"]);
    assert!(
        tpm.starts_with("local-lvm:") && tpm.contains("version=v2.0"),
        "{tpm}"
    );
    let description = value(&cfg["description"]);
    assert!(
        description.starts_with("Billing database.\\nOwner: team-db\\nproxsync-id:"),
        "the text above the marker: {description}"
    );
    assert_eq!(vm["pool"], "prod", "{vm}");

    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(writes(&mut pve).is_empty(), "{:?}", writes(&mut pve));
    let plan = common::engine::text(&ws.proxsync(&["plan"]));
    assert!(plan.contains("no changes"), "{plan}");
}

#[test]
fn a_running_clone_takes_options_at_once_and_hardware_at_its_next_start() {
    let mut pve = FakePve::start(scenario_with_pools());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let (vmid, _) = owned_vms(&mut pve)[0].clone();
    let vmid = vmid as u32;
    assert_eq!(pve.vm(vmid)["status"], "running");

    let extra = "    cpuType: x86-64-v2-AES\n    machine: q35\n    onBoot: true\n    protection: true\n    pool: lab\n    description: Front end\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", extra))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    // PVE's fast-plug options (qemu-server $fast_plug_option) apply at once...
    assert_eq!(value(&vm["config"]["onboot"]), "1", "{vm}");
    assert_eq!(value(&vm["config"]["protection"]), "1", "{vm}");
    assert!(
        value(&vm["config"]["description"]).starts_with("Front end\\nproxsync-id:"),
        "{vm}"
    );
    assert_eq!(vm["pool"], "lab", "{vm}");
    // ...the CPU type and machine wait for the next start (vmconfig_hotplug_pending skips them).
    assert_eq!(value(&vm["pending"]["cpu"]), "x86-64-v2-AES", "{vm}");
    assert_eq!(value(&vm["pending"]["machine"]), "q35", "{vm}");
    let (s, reason, message) = ws.condition("web-01", "RebootPending");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "PendingChanges"),
        "{message}"
    );
    assert!(
        message.contains("cpu") && message.contains("machine"),
        "{message}"
    );

    // A pending value counts as set: nothing is sent again.
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(writes(&mut pve).is_empty(), "{:?}", writes(&mut pve));
}

#[test]
fn a_pinned_vmid_held_by_another_vm_is_refused() {
    let mut sc = scenario_with_pools();
    sc["vms"]
        .as_array_mut()
        .unwrap()
        .push(json!({"vmid": 4242, "name": "someone-else", "node": "pve2"}));
    let mut pve = FakePve::start(sc);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("db.yaml", spec("db-01", "pve1", IMPORT, "    vmId: 4242\n"))]);
    let (_, out) = ws.run_once();
    assert!(owned_vms(&mut pve).is_empty(), "{out}");
    assert_eq!(pve.vm(4242)["name"], "someone-else");
    let (s, _, message) = ws.condition("db-01", "Ready");
    assert_eq!(s, "False", "{message}");
    assert!(
        message.contains("vmId 4242 is held by another VM"),
        "{message}"
    );
}

#[test]
fn doctor_checks_that_a_specs_pool_exists() {
    let pve = FakePve::start(scenario_with_pools());
    let ws = Workspace::new(&pve);
    let specs = tempfile::tempdir().unwrap();
    std::fs::write(
        specs.path().join("a.yaml"),
        spec("web-01", "pve1", "9000", "    pool: prod\n"),
    )
    .unwrap();
    std::fs::write(
        specs.path().join("b.yaml"),
        spec("web-02", "pve1", "9000", "    pool: staging\n"),
    )
    .unwrap();
    let out = ws.proxsync(&["doctor", "--specs", specs.path().to_str().unwrap()]);
    let text = common::engine::text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("pool prod") && text.contains("exists"),
        "{text}"
    );
    assert!(
        text.contains("pool staging") && text.contains("no such pool (spec web-02)"),
        "{text}"
    );
}

/// `netN`'s value: from the config, or pending when PVE queued it.
fn nic(vm: &Value, key: &str) -> String {
    let v = if vm["pending"][key].is_null() {
        &vm["config"][key]
    } else {
        &vm["pending"][key]
    };
    value(v)
}

fn mac_of(net: &str) -> String {
    net.split(',')
        .next()
        .and_then(|p| p.split_once('='))
        .map(|(_, mac)| mac.to_string())
        .unwrap_or_default()
}

#[test]
fn networks_are_created_changed_and_removed_and_the_mac_is_kept() {
    let mut pve = FakePve::start(scenario_with_pools());
    let ws = Workspace::new(&pve);
    let two = "    networks:\n      - {bridge: vmbr0, vlan: 10}\n      - {bridge: vmbr1, model: e1000, firewall: true, mac: bc:24:11:aa:bb:02}\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", two))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let (vmid, _) = owned_vms(&mut pve)[0].clone();
    let vmid = vmid as u32;
    let vm = pve.vm(vmid);
    assert_eq!(vm["status"], "running", "{vm}");
    let net0 = nic(&vm, "net0");
    let mac0 = mac_of(&net0);
    assert!(
        net0.contains("bridge=vmbr0") && net0.contains("tag=10"),
        "{net0}"
    );
    assert_ne!(mac0, "BC:24:11:00:90:00", "a clone has its own MAC: {net0}");
    assert_eq!(
        value(&vm["config"]["net1"]),
        "e1000=BC:24:11:AA:BB:02,bridge=vmbr1,firewall=1",
        "a new NIC is hot-plugged (network hotplug is on by default): {vm}"
    );

    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(writes(&mut pve).is_empty(), "{:?}", writes(&mut pve));

    // The VLAN changes and the second NIC goes: both apply at once on the running VM
    // (vmconfig_update_net re-plugs the tap for a tag; a NIC unplugs with network hotplug).
    let one = "    networks:\n      - {bridge: vmbr0, vlan: 20}\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", one))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    let net0 = value(&vm["config"]["net0"]);
    assert!(net0.contains("tag=20"), "{vm}");
    assert_eq!(
        mac_of(&net0),
        mac0,
        "an update never regenerates the MAC: {net0}"
    );
    assert!(
        vm["config"]["net1"].is_null() && vm["pending"]["net1"].is_null(),
        "{vm}"
    );
    let (s, _, message) = ws.condition("web-01", "RebootPending");
    assert_eq!(s, "False", "{message}");

    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(writes(&mut pve).is_empty(), "{:?}", writes(&mut pve));
}

/// A spec with `disks` instead of `disk`/`storage`.
fn disks_spec(name: &str, image: &str, disks: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n    \
         site: lab\n    node: pve1\n    image: \"{image}\"\n    cpu: 2\n    memory: 2Gi\n    disks:\n{disks}"
    )
}

fn scenario_with_data_storage() -> Value {
    let mut sc = default_scenario();
    sc["storages"]["data"] = json!({"type": "dir", "path": "/srv/data", "content": "images"});
    sc
}

#[test]
fn a_create_makes_every_disk_on_its_storage_and_a_second_run_writes_nothing() {
    let mut pve = FakePve::start(scenario_with_data_storage());
    let ws = Workspace::new(&pve);
    let disks = "      - {size: 8Gi, discard: true, ssd: true}\n      - {slot: scsi1, size: 4Gi, storage: data, format: qcow2, cache: writeback, backup: false}\n";
    ws.commit_specs(&[("db.yaml", disks_spec("db-01", IMPORT, disks))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let (vmid, _) = owned_vms(&mut pve)[0].clone();
    let cfg = pve.vm(vmid as u32)["config"].clone();
    let boot = value(&cfg["scsi0"]);
    assert!(
        boot.starts_with("local-lvm:vm-") && boot.contains("discard=on") && boot.contains("ssd=1"),
        "the boot disk is the imported image on local-lvm: {boot}"
    );
    let data = value(&cfg["scsi1"]);
    assert!(
        data.starts_with("data:") && data.contains(".qcow2"),
        "the data disk is a qcow2 volume on data: {data}"
    );
    for part in ["cache=writeback", "backup=0", "size=4G"] {
        assert!(data.contains(part), "{part} in {data}");
    }
    assert_eq!(value(&cfg["boot"]), "order=scsi0", "{cfg}");

    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(writes(&mut pve).is_empty(), "{:?}", writes(&mut pve));
}

#[test]
fn disks_are_added_to_a_running_vm_grown_and_detached_never_destroyed() {
    let mut pve = FakePve::start(scenario_with_data_storage());
    let ws = Workspace::new(&pve);
    let first = "      - {size: 8Gi}\n      - {slot: scsi1, size: 2Gi, storage: data}\n";
    ws.commit_specs(&[("web.yaml", disks_spec("web-01", "9000", first))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let (vmid, _) = owned_vms(&mut pve)[0].clone();
    let vmid = vmid as u32;
    let vm = pve.vm(vmid);
    assert_eq!(vm["status"], "running");
    let scsi1 = value(&vm["config"]["scsi1"]);
    assert!(
        scsi1.starts_with("data:") && scsi1.contains("size=2G"),
        "the clone got its data disk: {vm}"
    );

    // Running: a new virtio disk is hot-plugged (PVE's default hotplug has `disk`), the data
    // disk grows at once.
    let second = "      - {size: 8Gi}\n      - {slot: scsi1, size: 5Gi, storage: data}\n      - {slot: virtio2, size: 1Gi, cache: none, iothread: true}\n";
    ws.commit_specs(&[("web.yaml", disks_spec("web-01", "9000", second))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    assert!(
        value(&vm["config"]["scsi1"]).contains("size=5G"),
        "grown: {vm}"
    );
    let virtio2 = value(&vm["config"]["virtio2"]);
    assert!(
        virtio2.starts_with("local-lvm:vm-") && virtio2.contains("iothread=1"),
        "hot-plugged, not pending: {vm}"
    );
    assert!(vm["pending"]["virtio2"].is_null(), "{vm}");

    // scsi1 leaves the spec: detached, its volume kept as unused0, reported in the history.
    let volume = scsi1.split(',').next().unwrap().to_string();
    let third =
        "      - {size: 8Gi}\n      - {slot: virtio2, size: 1Gi, cache: none, iothread: true}\n";
    ws.commit_specs(&[("web.yaml", disks_spec("web-01", "9000", third))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    assert!(vm["config"]["scsi1"].is_null(), "{vm}");
    assert_eq!(value(&vm["config"]["unused0"]), volume, "{vm}");
    assert!(vm["config"]["virtio2"].is_string(), "{vm}");
    let status = ws.status("web-01");
    let history = status["history"].to_string();
    assert!(
        history.contains("disk detached") && history.contains(&volume),
        "{history}"
    );

    // Converged: the next run writes nothing (the unused volume is left alone).
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(writes(&mut pve).is_empty(), "{:?}", writes(&mut pve));
    assert_eq!(value(&pve.vm(vmid)["config"]["unused0"]), volume);
}

/// `destroyDisks` destroys a disk still attached, with its data (`force`), and only the slots
/// it names; the boot disk is refused.
#[test]
fn destroy_disks_destroys_only_the_slots_it_names_and_never_the_boot_disk() {
    let mut pve = FakePve::start(scenario_with_data_storage());
    let ws = Workspace::new(&pve);
    let first = "      - {size: 8Gi}\n      - {slot: scsi1, size: 2Gi, storage: data}\n      - {slot: scsi2, size: 1Gi, storage: data}\n";
    ws.commit_specs(&[("web.yaml", disks_spec("web-01", "9000", first))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    let vm = pve.vm(vmid);
    let volume_of = |key: &str| {
        value(&vm["config"][key])
            .split(',')
            .next()
            .unwrap()
            .to_string()
    };
    let (scsi1, scsi2) = (volume_of("scsi1"), volume_of("scsi2"));
    let on_data = |pve: &mut FakePve, volume: &str| {
        let name = volume.trim_start_matches("data:");
        pve.call("storages", json!({})).unwrap()["data"]["volumes"]
            .get(name)
            .is_some()
    };
    assert!(on_data(&mut pve, &scsi1) && on_data(&mut pve, &scsi2));

    // scsi1 is destroyed; scsi2 only leaves the spec (detached, kept).
    let second = "      - {size: 8Gi}\n    destroyDisks: [scsi1]\n";
    ws.commit_specs(&[("web.yaml", disks_spec("web-01", "9000", second))]);
    // The plan says which disk goes with its data, by the run's own decision, and counts it.
    let plan = ws.proxsync(&["plan"]);
    let plan = String::from_utf8_lossy(&plan.stdout).to_string();
    assert!(
        plan.contains(&format!(
            "scsi1 {scsi1} destroyed with its data (destroyDisks)"
        )),
        "{plan}"
    );
    assert!(!plan.contains(&format!("{scsi2} destroyed")), "{plan}");
    assert!(plan.contains("1 to change (1 destroys disks)"), "{plan}");
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    assert!(
        vm["config"]["scsi1"].is_null() && vm["config"]["scsi2"].is_null(),
        "{vm}"
    );
    let unused: Vec<String> = ["unused0", "unused1"]
        .iter()
        .filter_map(|k| vm["config"][k].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        unused,
        std::slice::from_ref(&scsi2),
        "only scsi2 is kept: {vm}"
    );
    assert!(!on_data(&mut pve, &scsi1), "scsi1's volume is gone");
    assert!(on_data(&mut pve, &scsi2), "scsi2's volume stays");
    let history = ws.status("web-01")["history"].to_string();
    assert!(
        history.contains("disk destroyed") && history.contains(&scsi1),
        "{history}"
    );

    // Nothing left to destroy: the next run writes nothing, and the plan shows none.
    let plan = ws.proxsync(&["plan"]);
    let plan = String::from_utf8_lossy(&plan.stdout).to_string();
    assert!(!plan.contains("destroyed"), "{plan}");
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(writes(&mut pve).is_empty(), "{:?}", writes(&mut pve));

    // The boot disk is never destroyed.
    let boot = "      - {slot: scsi1, size: 8Gi, storage: data}\n    destroyDisks: [scsi0]\n";
    ws.commit_specs(&[("web.yaml", disks_spec("web-01", "9000", boot))]);
    let (_ok, out) = ws.run_once();
    assert!(pve.vm(vmid)["config"]["scsi0"].is_string(), "{out}");
    let (_, _, message) = ws.condition("web-01", "Ready");
    assert!(message.contains("boot disk: refused"), "{message}");
}
