//! The VM surface as a real Proxmox VE 8.4 or 9.x cluster decides it, where proxsync once
//! differed: privileges PVE checks on paths or options doctor did not ask for, HA groups that
//! PVE 9 turned into rules, machine pinning of Windows guests, the HA manager's hard stops and
//! error state, every NIC's bridge, a migration of a VM started meanwhile. Each case runs
//! proxsync against the harness's model of PVE (`tests/fake_fidelity.rs` checks the models).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, Scenario, TOKEN_ID, TOKEN_SECRET, default_scenario};
use serde_json::{Value, json};

/// A config value as a string, whether PVE (or the fake) stored it as a number or a string.
fn value(v: &Value) -> String {
    v.to_string().trim_matches('"').to_string()
}

// ------------------------------------------------------------------------ every NIC's bridge

#[test]
fn a_create_checks_the_bridge_of_every_nic() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let nics = "    networks:\n      - {bridge: vmbr0}\n      - {bridge: vmbr9}\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", nics))]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert!(
        owned_vms(&mut pve).is_empty(),
        "no VM whose start would fail: {out}"
    );
    let (s, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "ConfigurationError")
    );
    assert!(
        message.contains("bridge vmbr9 is not listed on node pve1"),
        "{message}"
    );
}

// ------------------------------------------------------------------- a migration's `online`

#[test]
fn a_vm_started_after_the_migrate_pre_check_is_migrated_live() {
    // qemu-server `migrate_vm` refuses a running VM without `online` and migrates a stopped
    // one offline when `online` is sent: proxsync always sends it, so a VM started between
    // the pre-check and the request moves anyway.
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let stopped = "    powerState: stopped\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", stopped))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    assert_eq!(pve.vm(vmid)["status"], "stopped");

    // Someone starts it right before proxsync's migrate request.
    pve.call(
        "set_vm_before",
        json!({"method": "POST", "suffix": "/migrate", "vmid": vmid, "status": "running"}),
    )
    .unwrap();
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve2", "9000", stopped))]);
    let (_, out) = ws.run_once();
    let vm = pve.vm(vmid);
    assert_eq!(vm["node"], "pve2", "migrated: {out}");
    let migrate = pve
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path.ends_with("/migrate"))
        .expect("a migrate request");
    assert!(migrate.body.contains("online=1"), "{}", migrate.body);
}

// ------------------------------------------------------------------- machine pinning

const IMPORT: &str = "local:import/debian-12-genericcloud-amd64.qcow2";

#[test]
fn a_windows_vm_keeps_the_machine_version_pve_pinned() {
    // qemu-server pins a Windows guest's `q35` to `pc-q35-10.0+pve1` at create: that is the
    // spec's q35, and a later converge must not write bare `q35` back (the machine version
    // would then change at each start).
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let win = "    machine: q35\n    osType: win11\n";
    ws.commit_specs(&[("win.yaml", spec("win-01", "pve1", IMPORT, win))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    assert_eq!(
        value(&pve.vm(vmid)["config"]["machine"]),
        "pc-q35-10.0+pve1"
    );

    // Another change makes proxsync converge the VM's config.
    let win = format!("{win}    description: Windows 11 build host\n");
    ws.commit_specs(&[("win.yaml", spec("win-01", "pve1", IMPORT, &win))]);
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    assert_eq!(value(&vm["config"]["machine"]), "pc-q35-10.0+pve1", "{vm}");
    assert!(vm["pending"].get("machine").is_none(), "{vm}");
    assert!(
        value(&vm["config"]["description"]).starts_with("Windows 11 build host"),
        "converged: {vm}"
    );
    for r in pve.requests() {
        assert!(
            !r.body.contains("machine="),
            "{} {}: {}",
            r.method,
            r.path,
            r.body
        );
    }
}

// ------------------------------------------------------------------------------- doctor

/// Everything proxsync needs on a PVE 9 cluster but what the tests below grant or leave out:
/// Sys.Audit on `/`, no Sys.Modify, no SDN grant, no pool grant.
fn base_grants(scenario: Scenario) -> Scenario {
    scenario
        .grant(
            TOKEN_ID,
            "/vms",
            &[
                "VM.Allocate",
                "VM.Clone",
                "VM.Audit",
                "VM.Config.CPU",
                "VM.Config.Memory",
                "VM.Config.Disk",
                "VM.Config.Network",
                "VM.Config.Options",
                "VM.Config.CDROM",
                "VM.Config.Cloudinit",
                "VM.Config.HWType",
                "VM.PowerMgmt",
                "VM.Migrate",
                "VM.GuestAgent.Audit",
            ],
        )
        .grant(
            TOKEN_ID,
            "/storage",
            &["Datastore.AllocateSpace", "Datastore.Audit"],
        )
        .grant(TOKEN_ID, "/", &["Sys.Audit"])
}

/// `proxsync doctor` on one site `lab` (install `main`) with these spec files.
fn doctor(pve: &FakePve, files: &[(&str, String)]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("lab.token");
    std::fs::write(&secret, TOKEN_SECRET).unwrap();
    let config = dir.path().join("proxsync.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n\n[source]\npath = \"{}\"\n\n[[site]]\nname = \"lab\"\n\
             endpoint = \"{}\"\ntoken_id = \"{TOKEN_ID}\"\ntoken_secret_file = \"{}\"\n\
             ca_file = \"{}\"\nrequest_timeout = \"10s\"\n",
            dir.path().join("state").display(),
            dir.path().join("repo").display(),
            pve.url(),
            secret.display(),
            pve.ca_file().display()
        ),
    )
    .unwrap();
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    for (name, text) in files {
        std::fs::write(specs.join(name), text).unwrap();
    }
    run_doctor(&config, &specs)
}

fn run_doctor(config: &Path, specs: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(["doctor", "--config"])
        .arg(config)
        .arg("--specs")
        .arg(specs)
        .output()
        .expect("run proxsync");
    (out.status.success(), common::engine::text(&out))
}

#[test]
fn doctor_asks_for_sys_modify_when_a_spec_sets_startup() {
    // qemu-server checks Sys.Modify on / for `startup` at create and update (a create with it
    // is refused as a whole). The datacenter's default user-tag-access lets the token set
    // tags without Sys.Modify, so only `startup` needs it here.
    let pve = base_grants(Scenario::default())
        .grant(TOKEN_ID, "/sdn/zones/localnetwork", &["SDN.Use"])
        .start();
    let (ok, out) = doctor(&pve, &[("web.yaml", spec("web-01", "pve1", "9000", ""))]);
    assert!(ok, "{out}");
    let startup = "    startup: {order: 1, upDelay: 30}\n";
    let (ok, out) = doctor(
        &pve,
        &[("web.yaml", spec("web-01", "pve1", "9000", startup))],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL lab privileges: token proxsync@pve!gitops lacks Sys.Modify on / (startup, as spec web-01 sets it)"),
        "{out}"
    );
}

#[test]
fn doctor_checks_sdn_use_on_each_bridge_and_vlan_path() {
    // The usual grant on the local zone covers every bridge and VLAN (doctor once asked for
    // SDN.Use on /sdn/zones itself and failed it).
    let pve = base_grants(Scenario::default())
        .grant(TOKEN_ID, "/sdn/zones/localnetwork", &["SDN.Use"])
        .start();
    let nics = "    networks:\n      - {bridge: vmbr0, vlan: 20}\n      - {bridge: vmbr1}\n";
    let (ok, out) = doctor(&pve, &[("web.yaml", spec("web-01", "pve1", "9000", nics))]);
    assert!(ok, "{out}");
    assert!(out.contains("ok   lab privileges"), "{out}");
    assert!(
        out.contains("ok   lab sdn vmbr0: the token may use vmbr0 (VLAN 20)"),
        "{out}"
    );
    assert!(
        out.contains("ok   lab sdn vmbr1: the token may use vmbr1 (untagged)"),
        "{out}"
    );

    // A grant on one VLAN of vmbr0: a NIC on that VLAN may use it, an untagged one or another
    // VLAN may not.
    let pve = base_grants(Scenario::default())
        .grant(TOKEN_ID, "/sdn/zones/localnetwork/vmbr0/20", &["SDN.Use"])
        .start();
    let tagged = "    networks:\n      - {bridge: vmbr0, vlan: 20}\n";
    let (ok, out) = doctor(
        &pve,
        &[("web.yaml", spec("web-01", "pve1", "9000", tagged))],
    );
    assert!(ok, "{out}");
    let mixed = "    networks:\n      - {bridge: vmbr0, vlan: 20}\n      - {bridge: vmbr0, trunks: [20, 21]}\n";
    let (ok, out) = doctor(
        &pve,
        &[
            ("web.yaml", spec("web-01", "pve1", "9000", mixed)),
            (
                "db.yaml",
                spec("db-01", "pve1", "9000", "    network: vmbr0\n"),
            ),
        ],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL lab sdn vmbr0: token proxsync@pve!gitops lacks SDN.Use on /sdn/zones/localnetwork/vmbr0 (spec db-01), /sdn/zones/localnetwork/vmbr0/21 (spec web-01)"),
        "{out}"
    );
    assert!(out.contains("PVESDNUser"), "{out}");

    // No SDN grant: PVE does not even list the bridge; doctor says why it may be missing.
    let pve = base_grants(Scenario::default()).start();
    let (ok, out) = doctor(&pve, &[("web.yaml", spec("web-01", "pve1", "9000", ""))]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL lab bridge pve1/vmbr0: no such bridge listed (spec web-01): it does not exist, or token proxsync@pve!gitops holds neither SDN.Use nor SDN.Audit on /sdn/zones/localnetwork/vmbr0"),
        "{out}"
    );
}

#[test]
fn doctor_checks_mapping_use_for_a_custom_cpu_model_on_9_1_15() {
    let custom = "    cpuType: custom-fast\n";
    let scenario = |version: &str| {
        base_grants(Scenario::default().set("version", version.into()))
            .grant(TOKEN_ID, "/sdn/zones/localnetwork", &["SDN.Use"])
            .grant(TOKEN_ID, "/nodes", &["Sys.Audit"])
    };
    let pve = scenario("9.1.15").start();
    let (ok, out) = doctor(
        &pve,
        &[("web.yaml", spec("web-01", "pve1", "9000", custom))],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("lacks Mapping.Use on /mapping/cpu/fast (cpuType custom-fast of spec web-01)"),
        "{out}"
    );
    let pve = scenario("9.1.15")
        .grant(TOKEN_ID, "/mapping/cpu/fast", &["Mapping.Use"])
        .start();
    let (ok, out) = doctor(
        &pve,
        &[("web.yaml", spec("web-01", "pve1", "9000", custom))],
    );
    assert!(ok, "{out}");
    // Before qemu-server 9.1.13 (pve-manager 9.1.15): Sys.Audit on /nodes, held already.
    let pve = scenario("9.1.12").start();
    let (ok, out) = doctor(
        &pve,
        &[("web.yaml", spec("web-01", "pve1", "9000", custom))],
    );
    assert!(ok, "{out}");
}

#[test]
fn doctor_reads_a_pool_it_may_not_list_and_checks_pool_allocate() {
    // `GET /pools` lists only the pools the token may audit, but `GET /pools?poolid=P` answers
    // without Pool.Audit: a hidden pool is not called missing. Moving a VM into a pool needs
    // Pool.Allocate on it, and out of its old pool Pool.Allocate there too.
    let mut scenario = base_grants(Scenario::default())
        .grant(TOKEN_ID, "/sdn/zones/localnetwork", &["SDN.Use"])
        .grant(TOKEN_ID, "/pool/prod", &["Pool.Allocate"]);
    scenario = scenario.set("pools", json!(["prod", "lab"]));
    let pve = scenario.start();
    let in_prod = "    pool: prod\n";
    let (ok, out) = doctor(
        &pve,
        &[("web.yaml", spec("web-01", "pve1", "9000", in_prod))],
    );
    assert!(ok, "{out}");
    assert!(out.contains("ok   lab pool prod: exists"), "{out}");

    let (ok, out) = doctor(
        &pve,
        &[(
            "web.yaml",
            spec("web-01", "pve1", "9000", "    pool: lab\n"),
        )],
    );
    assert!(!ok, "{out}");
    assert!(out.contains("ok   lab pool lab: exists"), "{out}");
    assert!(
        out.contains(
            "lacks Pool.Allocate on /pool/lab (pool lab of spec web-01: moving a VM into it)"
        ),
        "{out}"
    );
    let (ok, out) = doctor(
        &pve,
        &[(
            "web.yaml",
            spec("web-01", "pve1", "9000", "    pool: nope\n"),
        )],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL lab pool nope: no such pool (spec web-01)"),
        "{out}"
    );

    // This install's VM is in pool lab; its spec moves it to prod.
    let mut scenario = base_grants(Scenario::default())
        .grant(TOKEN_ID, "/sdn/zones/localnetwork", &["SDN.Use"])
        .grant(TOKEN_ID, "/pool/prod", &["Pool.Allocate"])
        .vm(
            json!({"vmid": 150, "name": "web-01", "node": "pve1", "pool": "lab",
                   "tags": ["proxsync.main"], "config": {"name": "web-01"}}),
        );
    scenario = scenario.set("pools", json!(["prod", "lab"]));
    let pve = scenario.start();
    let (ok, out) = doctor(
        &pve,
        &[("web.yaml", spec("web-01", "pve1", "9000", in_prod))],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL lab pool lab: token proxsync@pve!gitops lacks Pool.Allocate on /pool/lab, which PVE checks to move VM 150 of spec web-01 (to prod) out of it"),
        "{out}"
    );
}

#[test]
fn doctor_fails_a_virtio_mtu_above_its_bridge_s() {
    let mut pve = FakePve::start(default_scenario());
    let jumbo = "    networks:\n      - {bridge: vmbr0, mtu: 9000}\n";
    let (ok, out) = doctor(&pve, &[("web.yaml", spec("web-01", "pve1", "9000", jumbo))]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL lab spec web-01 networks: net0 has mtu 9000, above the MTU of bridge vmbr0 on node pve1 (1500)"),
        "{out}"
    );
    pve.call("set_bridge_mtu", json!({"bridge": "vmbr0", "mtu": 9000}))
        .unwrap();
    let (ok, out) = doctor(&pve, &[("web.yaml", spec("web-01", "pve1", "9000", jumbo))]);
    assert!(ok, "{out}");
}

// ------------------------------------------------------------------ EFI and TPM volumes

#[test]
fn an_efi_disk_and_a_tpm_state_are_made_in_a_task() {
    // The synchronous PUT allocates before it answers: on slow storage pveproxy's 30 s pass
    // and the answer is lost (596). proxsync makes them with the asynchronous POST.
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    pve.call(
        "set_storage",
        json!({"name": "local-lvm", "alloc_secs": 60}),
    )
    .unwrap();
    let uefi = "    bios: ovmf\n    tpm: v2.0\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", uefi))]);
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    let made = |key: &str| vm["config"][key].is_string() || vm["pending"][key].is_string();
    assert!(made("efidisk0") && made("tpmstate0"), "{vm}");
    let writes: Vec<String> = pve
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/config") && r.body.contains("efidisk0"))
        .map(|r| r.method)
        .collect();
    assert_eq!(writes, ["POST"], "{out}");
}

// --------------------------------------------------------------------- HA: groups and rules

fn ha_rules(pve: &mut FakePve) -> Value {
    pve.call("ha_rules", json!({})).unwrap()
}

fn ha_resource(pve: &mut FakePve, vmid: u32) -> Value {
    pve.call("ha_resources", json!({})).unwrap()[vmid.to_string()].clone()
}

#[test]
fn ha_group_is_refused_for_a_pve_9_site_before_anything_is_sent() {
    // pve-ha-manager 5.x refuses a resource's group on a 9.x cluster (also a new one):
    // `validate --config`, doctor and the create's pre-flight say so with the fix.
    let mut pve = FakePve::start(default_scenario()); // fakepve's version: 9.0.10
    let ws = Workspace::new(&pve);
    let group = "    ha: {group: prod}\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", group))]);
    let out = ws.proxsync(&["validate", ws.path("repo").to_str().unwrap()]);
    let text = common::engine::text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("web.yaml:13:17: error: spec.forProvider.ha.group \"prod\": site lab runs Proxmox VE 9.0.10, which replaced HA groups with rules"),
        "{text}"
    );
    assert!(text.contains("spec.forProvider.ha.nodes"), "{text}");

    let out = ws.proxsync(&["doctor"]);
    let text = common::engine::text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("FAIL lab spec web-01 ha: web.yaml:"),
        "{text}"
    );

    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    assert!(owned_vms(&mut pve).is_empty(), "nothing created: {out}");
    let (s, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "ConfigurationError")
    );
    assert!(
        message.contains("ha groups have been migrated to rules"),
        "{message}"
    );

    // PVE 8 takes it.
    let pve = Scenario::default().set("version", "8.4.1".into()).start();
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", group))]);
    let out = ws.proxsync(&["validate", ws.path("repo").to_str().unwrap()]);
    assert!(out.status.success(), "{}", common::engine::text(&out));

    // A site validate cannot reach: a warning, not a failure (doctor checks it).
    drop(pve);
    let out = ws.proxsync(&["validate", ws.path("repo").to_str().unwrap()]);
    let text = common::engine::text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("warning: cannot read site lab's Proxmox VE version to check the fields its release may refuse (ha.group on PVE 9"),
        "{text}"
    );
}

#[test]
fn ha_nodes_is_a_node_affinity_rule_on_pve_9_owned_by_proxsync() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let nodes = "    ha: {nodes: [pve1:2, pve2:1]}\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", nodes))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    let id = format!("proxsync-vm{vmid}");
    let rule = ha_rules(&mut pve)[&id].clone();
    assert_eq!(rule["nodes"], json!({"pve1": 2, "pve2": 1}), "{rule}");
    assert_eq!(rule["resources"], json!([format!("vm:{vmid}")]), "{rule}");
    assert_eq!(rule["comment"], "proxsync test: spec web-01", "{rule}");
    assert_eq!(rule["strict"], 0, "{rule}");
    assert!(ha_resource(&mut pve, vmid).get("group").is_none());

    // Changed in place, then strict.
    let nodes = "    ha: {nodes: [pve2:3, pve1], strict: true}\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", nodes))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let rule = ha_rules(&mut pve)[&id].clone();
    assert_eq!(rule["nodes"], json!({"pve1": 0, "pve2": 3}), "{rule}");
    assert_eq!(rule["strict"], 1, "{rule}");

    // An idle cycle sends nothing to the rules.
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(
        pve.requests()
            .iter()
            .all(|r| r.method == "GET" || !r.path.contains("/cluster/ha/")),
        "{out}"
    );

    // `nodes` dropped: the rule goes, the resource stays.
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", "    ha: {}\n"))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(ha_rules(&mut pve).get(&id).is_none(), "{out}");
    assert_eq!(ha_resource(&mut pve, vmid)["state"], "started");
}

#[test]
fn a_rule_proxsync_did_not_make_is_never_changed_or_removed() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", "    ha: {}\n"))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    let id = format!("proxsync-vm{vmid}");
    // A person made a rule with proxsync's id.
    pve.call(
        "set_ha_rule",
        json!({"rule": id, "resources": format!("vm:{vmid}"), "nodes": "pve2", "comment": "ops"}),
    )
    .unwrap();
    let nodes = "    ha: {nodes: [pve1]}\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", nodes))]);
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let (s, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "ConfigurationError")
    );
    assert!(message.contains("proxsync did not make it"), "{message}");
    assert_eq!(ha_rules(&mut pve)[&id]["nodes"], json!({"pve2": 0}));
    assert_eq!(ha_rules(&mut pve)[&id]["comment"], "ops");
}

#[test]
fn dropping_ha_on_pve_9_keeps_an_admin_s_rule() {
    // pve-ha-manager 5.0.7+ (PVE 9.1) purges a removed resource from the rules and deletes a
    // rule left without resources, unless `purge=0`; 9.0 has no `purge` (and purges nothing).
    for version in ["9.1.2", "9.0.10"] {
        dropping_ha_keeps_an_admin_s_rule_on(version);
    }
}

fn dropping_ha_keeps_an_admin_s_rule_on(version: &str) {
    let mut pve = Scenario::default().set("version", version.into()).start();
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", "    ha: {}\n"))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    pve.call(
        "set_ha_rule",
        json!({"rule": "keep-on-pve1", "resources": format!("vm:{vmid}"), "nodes": "pve1", "comment": "ops"}),
    )
    .unwrap();
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(ha_resource(&mut pve, vmid).is_null(), "{out}");
    let rules = ha_rules(&mut pve);
    assert!(
        rules.get("keep-on-pve1").is_some(),
        "the admin's rule stays: {rules}"
    );
}

#[test]
fn ha_nodes_is_a_group_of_the_vm_s_own_on_pve_8() {
    let mut pve = Scenario::default().set("version", "8.4.1".into()).start();
    let ws = Workspace::new(&pve);
    let nodes = "    ha: {nodes: [pve1:2, pve2], strict: true}\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", nodes))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    let id = format!("proxsync-vm{vmid}");
    let groups = pve.call("ha_groups", json!({})).unwrap();
    assert_eq!(
        groups[&id]["nodes"],
        json!({"pve1": 2, "pve2": 0}),
        "{groups}"
    );
    assert_eq!(groups[&id]["restricted"], 1, "{groups}");
    assert_eq!(groups[&id]["comment"], "proxsync test: spec web-01");
    assert_eq!(ha_resource(&mut pve, vmid)["group"], id);

    // `ha` dropped: the resource, then its group, go.
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(ha_resource(&mut pve, vmid).is_null(), "{out}");
    let groups = pve.call("ha_groups", json!({})).unwrap();
    assert!(groups.get(&id).is_none(), "{groups}");
}

#[test]
fn an_ha_resource_in_error_state_is_stalled_with_the_fix() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", "    ha: {}\n"))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    // The HA manager gave up on it: stopped, in `error`.
    pve.set_vm(vmid, json!({"status": "stopped", "ha_state": "error"}));
    pve.clear_requests();
    let (ok, out) = ws.run_once();
    assert!(!ok, "{out}");
    let (s, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "ConfigurationError"),
        "{message}"
    );
    assert!(
        message.contains("in error state, must be disabled and fixed first")
            && message.contains(&format!("ha-manager set vm:{vmid} --state disabled")),
        "{message}"
    );
    // Nothing PVE refuses was sent.
    let sent: Vec<String> = pve
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(sent.is_empty(), "{sent:?}");

    // A person fixes and disables it (`ha-manager set --state disabled`: the service is
    // `stopped`); at its next attempt (here: a spec change) proxsync starts it again.
    pve.set_vm(vmid, json!({"ha_state": "stopped"}));
    let more = "    ha: {maxRestart: 2}\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", more))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(pve.vm(vmid)["status"], "running", "{out}");
}

// ---------------------------------------------------------------- HA: reboots never hard

/// An HA-managed VM with a change pending and `rebootPolicy: IfNeeded`, its guest as `acpi`
/// says; returns (pve, workspace, vmid, the run's output).
fn ha_vm_due_for_a_reboot(acpi: bool) -> (FakePve, Workspace, u32, String) {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let ha = "    ha: {}\n    rebootPolicy: IfNeeded\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", ha))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    pve.set_vm(vmid, json!({"acpi": acpi}));
    let more_cpu = spec("web-01", "pve1", "9000", ha).replace("cpu: 2", "cpu: 4");
    ws.commit_specs(&[("web.yaml", more_cpu)]);
    let (_, out) = ws.run_once();
    (pve, ws, vmid, out)
}

#[test]
fn an_ha_vm_is_rebooted_cleanly_never_hard_without_force_stop_after() {
    // The HA manager's stop ends hard after its timeout (PVEVM.pm shutdown: forceStop => 1);
    // PVE's reboot does not go through it and never stops hard.
    let (mut pve, ws, vmid, out) = ha_vm_due_for_a_reboot(false);
    assert_eq!(
        pve.call("hard_stops", json!({})).unwrap(),
        json!({}),
        "never hard without forceStopAfter: {out}"
    );
    let vm = pve.vm(vmid);
    assert_eq!(vm["status"], "running", "{out}");
    assert_eq!(value(&vm["pending"]["cores"]), "4", "still pending: {vm}");
    let (_, _, message) = ws.condition("web-01", "Ready");
    assert!(
        message.contains("did not shut down within 180 s"),
        "{message}"
    );

    // A guest that powers off: rebooted, the change applied, no HA stop.
    let (mut pve, ws, vmid, out) = ha_vm_due_for_a_reboot(true);
    let vm = pve.vm(vmid);
    assert_eq!(vm["status"], "running", "{out}");
    assert_eq!(value(&vm["config"]["cores"]), "4", "{vm}");
    assert_eq!(ws.condition("web-01", "RebootPending").0, "False", "{out}");
    let kinds: Vec<String> = pve
        .tasks()
        .into_iter()
        .map(|t| t["type"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(kinds.contains(&"qmreboot".to_string()), "{kinds:?}");
    assert!(!kinds.contains(&"hastop".to_string()), "{kinds:?}");
    assert_eq!(pve.call("hard_stops", json!({})).unwrap(), json!({}));
}
