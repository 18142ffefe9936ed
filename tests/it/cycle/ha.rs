//! `forProvider.ha`: the VM as a resource of PVE's HA manager, kept as the spec says, against
//! the harness's model of pve-ha-manager's `/cluster/ha/resources` (fakepve 0.5.0 has none).

use crate::common;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, default_scenario};
use serde_json::{Value, json};

fn ha_of(pve: &mut FakePve, vmid: u32) -> Value {
    pve.call("ha_resources", json!({})).unwrap()[vmid.to_string()].clone()
}

#[test]
fn ha_makes_the_vm_an_ha_resource_and_keeps_it_one() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let ha = "    ha: {maxRestart: 2}\n";
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", ha))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    let res = ha_of(&mut pve, vmid);
    assert_eq!(res["state"], "started", "{res}");
    assert_eq!(res["max_restart"], 2, "{res}");
    assert_eq!(res["max_relocate"], 1, "{res}");
    assert!(
        res["comment"]
            .as_str()
            .unwrap_or("")
            .contains("spec web-01"),
        "{res}"
    );
    assert_eq!(pve.vm(vmid)["status"], "running");
    assert_eq!(ws.condition("web-01", "Ready").0, "True", "{out}");

    // A person removes it: the next cycle sees it in the listing and adds it again.
    pve.call("remove_ha", json!({"vmid": vmid})).unwrap();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(ha_of(&mut pve, vmid)["state"], "started", "{out}");

    // A change of the spec's ha is applied in place.
    ws.commit_specs(&[(
        "web.yaml",
        spec("web-01", "pve1", "9000", "    ha: {maxRestart: 3}\n"),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(ha_of(&mut pve, vmid)["max_restart"], 3, "{out}");
}

#[test]
fn a_stopped_ha_vm_is_stopped_through_the_ha_manager() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web-01", "pve1", "9000", "    ha: {}\n"))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = owned_vms(&mut pve)[0].0 as u32;
    ws.commit_specs(&[(
        "web.yaml",
        spec(
            "web-01",
            "pve1",
            "9000",
            "    powerState: stopped\n    ha: {}\n",
        ),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(ha_of(&mut pve, vmid)["state"], "stopped", "{out}");
    assert_eq!(pve.vm(vmid)["status"], "stopped", "{out}");
    // PVE's own stop/shutdown of the VM never ran: the HA manager stopped it.
    let direct: Vec<Value> = pve
        .tasks()
        .into_iter()
        .filter(|t| t["type"] == "qmshutdown" || t["type"] == "qmstop")
        .collect();
    assert!(direct.is_empty(), "{direct:?}");
}

#[test]
fn only_the_ha_resource_proxsync_added_is_removed_when_the_spec_drops_ha() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("a-01", "pve1", "9000", "    ha: {}\n"))]);
    ws.commit_specs(&[
        ("a.yaml", spec("a-01", "pve1", "9000", "    ha: {}\n")),
        ("b.yaml", spec("b-01", "pve1", "9000", "")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let by_name: std::collections::BTreeMap<String, u32> = owned_vms(&mut pve)
        .into_iter()
        .map(|(id, name)| (name, id as u32))
        .collect();
    let (a, b) = (by_name["a-01"], by_name["b-01"]);
    // A person puts b-01 under HA by hand.
    pve.set_vm(b, json!({"ha_state": "started"}));

    ws.commit_specs(&[
        ("a.yaml", spec("a-01", "pve1", "9000", "")),
        ("b.yaml", spec("b-01", "pve1", "9000", "")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert!(
        ha_of(&mut pve, a).is_null(),
        "proxsync's resource removed: {out}"
    );
    assert_eq!(pve.vm(a)["ha_state"], Value::Null);
    assert_eq!(
        pve.vm(a)["status"],
        "running",
        "removing HA does not stop the VM"
    );
    assert_eq!(
        pve.vm(b)["ha_state"],
        "started",
        "the person's HA resource stays: {out}"
    );
}
