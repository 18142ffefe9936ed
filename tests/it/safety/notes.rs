//! A person edits the notes of a managed guest in the web UI (its description, which holds
//! proxsync's marker line): the guest stays the spec's, and never gets a second one beside it.
//!
//! - The marker line kept among the person's notes: the notes stay, the converge goes on.
//! - The marker line dropped: the guest is still the one the record names. Its own identity
//!   (a VM's smbios1 uuid, a container's first NIC's MAC, recorded when proxsync made it)
//!   agrees with the record, so the marker line is written back below the person's text and
//!   the spec's change is applied. Without that evidence (a record of a release that did not
//!   keep it) the spec is `Stalled` (`MarkerMissing`) naming the guest and `proxsync adopt`,
//!   nothing is created, and the confirmation writes the line back.

use serde_json::{Value, json};

use crate::common;

use common::engine::{Workspace, marker_claims, spec};
use common::{FakePve, Scenario};

const VZTMPL: &str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";

fn scenario() -> Scenario {
    Scenario::default().file(
        "local",
        "debian-12-standard_12.7-1_amd64.tar.zst",
        126_000_000,
        "vztmpl",
    )
}

fn ct_spec(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: {name}\nspec:\n  \
         forProvider:\n    site: lab\n    node: pve1\n    template: {VZTMPL}\n    \
         networks:\n      - {{name: eth0, bridge: vmbr0, ip: dhcp}}\n{extra}"
    )
}

/// A person's edit in the web UI's Notes panel, which PVE takes.
fn edit_notes(pve: &FakePve, kind: &str, vmid: u64, text: &str) {
    assert!(
        pve.edit_notes("pve1", kind, vmid, text),
        "PVE took the edit"
    );
}

/// The memory a guest is to have (MiB): a pending value (a running VM takes memory at its next
/// start) or its config's.
fn memory(guest: &Value) -> Option<u64> {
    let value = |v: &Value| v.as_u64().or_else(|| v.as_str()?.parse().ok());
    value(&guest["pending"]["memory"]).or_else(|| value(&guest["config"]["memory"]))
}

fn description(guest: &Value) -> String {
    guest["config"]["description"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Every guest of the fake, VMs and containers, by VMID (the template and CT template aside).
fn guests(pve: &mut FakePve) -> Vec<u64> {
    let mut all = pve.vms();
    all.extend(pve.cts());
    let mut ids: Vec<u64> = all
        .iter()
        .filter(|g| g["config"]["template"].as_u64().unwrap_or(0) == 0)
        .filter(|g| g["template"] != json!(true) && g["template"] != json!(1))
        .filter_map(|g| g["vmid"].as_u64())
        .collect();
    ids.sort_unstable();
    ids
}

/// The notes edit of the issue, for a VM: the marker line dropped, the tag kept, then a commit
/// that raises the memory. Without the fix the first cycle fails and the second creates a
/// second VM for the spec.
#[test]
fn a_vm_whose_notes_lost_the_marker_line_is_marked_again_and_converged() {
    let mut pve = FakePve::start(scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("notes-vm.yaml", spec("notes-vm", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("notes-vm")["vmId"].as_u64().expect("a VMID");
    let before = guests(&mut pve);

    edit_notes(&pve, "qemu", vmid, "Owner: team-db, ticket OPS-1234");
    ws.commit_specs(&[(
        "notes-vm.yaml",
        spec("notes-vm", "pve1", "9000", "").replace("memory: 2Gi", "memory: 3Gi"),
    )]);
    for round in 0..3 {
        let (ok, out) = ws.run_once();
        assert!(ok, "round {round}: {out}");
    }
    assert_eq!(guests(&mut pve), before, "no second guest");
    let vm = pve.vm(vmid as u32);
    assert_eq!(memory(&vm), Some(3072), "{vm}");
    let text = description(&vm);
    assert!(
        text.starts_with("Owner: team-db, ticket OPS-1234\n"),
        "the person's notes stay, first: {text}"
    );
    let m = proxsync::ownership::Marker::parse(&text).expect("the marker line is back");
    assert_eq!((m.install.as_str(), m.spec.as_str()), ("test", "notes-vm"));
    assert_eq!(marker_claims(&mut pve)["notes-vm"], vec![vmid]);
    let history = ws.status("notes-vm").to_string();
    assert!(
        history.contains("the marker line is written back below the notes"),
        "the history says what happened: {history}"
    );
}

/// The marker line kept among new notes: nothing of the person's text is lost, and the spec's
/// change is applied with no description write at all.
#[test]
fn notes_edited_around_the_marker_line_are_kept() {
    let mut pve = FakePve::start(scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("notes-vm.yaml", spec("notes-vm", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("notes-vm")["vmId"].as_u64().expect("a VMID");
    let marker_line = description(&pve.vm(vmid as u32))
        .lines()
        .find(|l| l.contains("proxsync-id:"))
        .expect("a marker line")
        .to_string();
    let notes = format!("Owner: team-db\n{marker_line}\nRunbook: https://wiki/db");
    edit_notes(&pve, "qemu", vmid, &notes);
    ws.commit_specs(&[(
        "notes-vm.yaml",
        spec("notes-vm", "pve1", "9000", "").replace("memory: 2Gi", "memory: 3Gi"),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid as u32);
    assert_eq!(memory(&vm), Some(3072), "{vm}");
    assert_eq!(
        description(&vm),
        notes,
        "the notes are the person's, as written"
    );
}

/// The same edit on a container: its first NIC's MAC is its identity.
#[test]
fn a_container_whose_notes_lost_the_marker_line_is_marked_again_and_converged() {
    let mut pve = FakePve::start(scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("notes-ct.yaml", ct_spec("notes-ct", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("notes-ct")["vmId"].as_u64().expect("a VMID");
    let before = guests(&mut pve);

    edit_notes(&pve, "lxc", vmid, "DNS for the lab; ask #infra");
    ws.commit_specs(&[("notes-ct.yaml", ct_spec("notes-ct", "    memory: 1Gi\n"))]);
    for round in 0..3 {
        let (ok, out) = ws.run_once();
        assert!(ok, "round {round}: {out}");
    }
    assert_eq!(guests(&mut pve), before, "no second guest");
    let ct = pve.ct(vmid as u32);
    assert_eq!(memory(&ct), Some(1024), "{ct}");
    let text = description(&ct);
    assert!(text.starts_with("DNS for the lab; ask #infra\n"), "{text}");
    assert!(
        proxsync::ownership::Marker::parse(&text).is_some(),
        "the marker line is back: {text}"
    );
}

/// The record of a release that did not keep a guest's identity (it is recorded at the next
/// converge, which this edit comes before): the guest cannot be shown to be the spec's, so the
/// spec is `Stalled` (`MarkerMissing`) naming it and the command, nothing is created through
/// several cycles, and `proxsync adopt` writes the line back, after which the change is applied.
#[test]
fn without_a_recorded_identity_the_spec_stalls_until_a_person_confirms_it() {
    let mut pve = FakePve::start(scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("notes-vm.yaml", spec("notes-vm", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("notes-vm")["vmId"].as_u64().expect("a VMID");
    {
        let store = proxsync::store::Store::open(&ws.path("state")).unwrap();
        let mut rec = store.record("notes-vm").unwrap().expect("a record");
        assert!(rec.identity.is_some(), "the create recorded the identity");
        rec.identity = None;
        store.put("notes-vm", &rec).unwrap();
    }
    let before = guests(&mut pve);

    edit_notes(&pve, "qemu", vmid, "Owner: team-db, ticket OPS-1234");
    ws.commit_specs(&[(
        "notes-vm.yaml",
        spec("notes-vm", "pve1", "9000", "").replace("memory: 2Gi", "memory: 3Gi"),
    )]);
    for round in 0..3 {
        let (ok, out) = ws.run_once();
        assert!(
            !ok,
            "round {round}: not Ready while the guest is unconfirmed: {out}"
        );
        assert_eq!(guests(&mut pve), before, "round {round}: no second guest");
    }
    let (status, reason, message) = ws.condition("notes-vm", "Stalled");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "MarkerMissing"),
        "{message}"
    );
    assert!(
        message.contains(&format!("VM {vmid}"))
            && message.contains(&format!("proxsync adopt notes-vm --vmid {vmid}")),
        "names the guest and the command: {message}"
    );
    assert_eq!(
        description(&pve.vm(vmid as u32)),
        "Owner: team-db, ticket OPS-1234",
        "nothing was written while unconfirmed"
    );

    let out = ws.proxsync(&["adopt", "notes-vm", "--vmid", &vmid.to_string()]);
    assert!(out.status.success(), "{}", common::engine::text(&out));
    let text = description(&pve.vm(vmid as u32));
    assert!(
        text.starts_with("Owner: team-db, ticket OPS-1234\n"),
        "{text}"
    );
    assert!(
        proxsync::ownership::Marker::parse(&text).is_some(),
        "{text}"
    );
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(guests(&mut pve), before);
    assert_eq!(memory(&pve.vm(vmid as u32)), Some(3072));
}

/// A guest at the record's VMID that is not the spec's at all (the spec's guest was destroyed
/// by hand and someone's new VM took the VMID: no tag, no marker, another smbios1 uuid): the
/// VMID is released after two reads agree, and the spec gets a new guest; the stranger is
/// never touched.
#[test]
fn a_stranger_at_the_records_vmid_is_left_alone_and_the_spec_made_anew() {
    let mut pve = FakePve::start(scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("notes-vm.yaml", spec("notes-vm", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("notes-vm")["vmId"].as_u64().expect("a VMID") as u32;
    pve.remove_vm(vmid);
    pve.add_vm(json!({
        "vmid": vmid, "name": "notes-vm", "node": "pve1", "status": "running",
        "config": {"smbios1": "uuid=0b4a5d3e-1111-4222-8333-944455556666", "memory": "1024"}
    }));
    ws.commit_specs(&[(
        "notes-vm.yaml",
        spec("notes-vm", "pve1", "9000", "").replace("memory: 2Gi", "memory: 3Gi"),
    )]);
    let _ = ws.run_once();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let new = ws.status("notes-vm")["vmId"].as_u64().expect("a VMID") as u32;
    assert_ne!(new, vmid, "a new guest for the spec");
    let stranger = pve.vm(vmid);
    assert_eq!(
        stranger["config"]["memory"].as_str(),
        Some("1024"),
        "{stranger}"
    );
    assert!(stranger["config"]["description"].is_null(), "{stranger}");
}

/// A person lets a guest go the README's way, its tag and marker line removed (the same guest:
/// its smbios1 uuid is the recorded one), then its spec is removed: it is neither deleted nor
/// taken back; the record lets it go.
#[test]
fn a_guest_let_go_by_hand_is_never_deleted_with_its_removed_spec() {
    let mut pve = FakePve::start(scenario());
    let ws = Workspace::new(&pve);
    let keep = [
        ("a.yaml", spec("a", "pve1", "9000", "")),
        ("b.yaml", spec("b", "pve1", "9000", "")),
    ];
    let mut files = keep.to_vec();
    files.push(("web.yaml", spec("web", "pve1", "9000", "")));
    ws.commit_specs(&files);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("web")["vmId"].as_u64().expect("a VMID") as u32;
    let smbios = pve.vm(vmid)["config"]["smbios1"]
        .as_str()
        .unwrap()
        .to_string();
    pve.remove_vm(vmid);
    pve.add_vm(json!({
        "vmid": vmid, "name": "kept-by-ops", "node": "pve1", "status": "stopped",
        "config": {"smbios1": smbios, "memory": "1024", "description": "kept; do not touch"}
    }));
    ws.commit_specs(&keep);
    let (_, out1) = ws.run_once();
    let (_, out2) = ws.run_once();
    let vm = pve.vm(vmid);
    assert_eq!(vm["name"], "kept-by-ops", "not deleted:\n{out1}\n{out2}");
    assert_eq!(
        description(&vm),
        "kept; do not touch",
        "not taken back: {vm}"
    );
    assert!(vm["config"]["tags"].is_null(), "not tagged again: {vm}");
}

/// Someone with only Options rights pastes an old marker of another spec, signed for this VMID
/// (markers never expire, and PVE reuses the lowest free VMID). The guest keeps the tag and its
/// recorded identity: it is still the spec's, so no second guest is made for the spec; the spec
/// waits for a person.
#[test]
fn a_pasted_marker_of_another_spec_makes_no_second_guest() {
    let mut pve = FakePve::start(scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("web")["vmId"].as_u64().expect("a VMID");
    let before = guests(&mut pve);
    let key = proxsync::ownership::MarkerKey::load(&ws.path("state"))
        .unwrap()
        .expect("the install's key");
    let old = proxsync::ownership::Marker::signed(&key, "test", "old-spec", "u-old", vmid as u32);
    edit_notes(&pve, "qemu", vmid, &old.description());
    ws.commit_specs(&[(
        "web.yaml",
        spec("web", "pve1", "9000", "").replace("memory: 2Gi", "memory: 3Gi"),
    )]);
    let (_, out1) = ws.run_once();
    let (_, out2) = ws.run_once();
    assert_eq!(guests(&mut pve), before, "no second guest:\n{out1}\n{out2}");
    let (status, reason, message) = ws.condition("web", "Stalled");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "MarkerMissing"),
        "{message}"
    );
}

/// A record of an earlier release (no identity) whose guest a person let go as the status
/// says: tag and marker line removed, and renamed (it had the spec's guest's name). The record
/// lets it go, and the spec gets a new guest; the old one is not touched.
#[test]
fn a_legacy_records_guest_let_go_as_the_status_says_is_left_alone() {
    let mut pve = FakePve::start(scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("web")["vmId"].as_u64().expect("a VMID") as u32;
    {
        let store = proxsync::store::Store::open(&ws.path("state")).unwrap();
        let mut rec = store.record("web").unwrap().expect("a record");
        rec.identity = None;
        store.put("web", &rec).unwrap();
    }
    let smbios = pve.vm(vmid)["config"]["smbios1"]
        .as_str()
        .unwrap()
        .to_string();
    pve.remove_vm(vmid);
    pve.add_vm(json!({
        "vmid": vmid, "name": "web-old", "node": "pve1", "status": "running",
        "config": {"smbios1": smbios, "memory": "2048", "description": "ops notes"}
    }));
    ws.commit_specs(&[(
        "web.yaml",
        spec("web", "pve1", "9000", "").replace("memory: 2Gi", "memory: 3Gi"),
    )]);
    let _ = ws.run_once();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let new = ws.status("web")["vmId"].as_u64().expect("a VMID") as u32;
    assert_ne!(new, vmid, "a new guest for the spec");
    assert_eq!(
        description(&pve.vm(vmid)),
        "ops notes",
        "the old one untouched"
    );
}

/// The notes edit, then the state database lost: no record names the guest, which carries the
/// tag and the spec's guest's name but no marker line. Nothing is created beside it (`Ready`
/// False, `MarkerMissing`), and `proxsync adopt` confirms it.
#[test]
fn after_a_lost_database_an_unmarked_guest_of_the_specs_name_holds_the_create() {
    let mut pve = FakePve::start(scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("web.yaml", spec("web", "pve1", "9000", ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("web")["vmId"].as_u64().expect("a VMID");
    let before = guests(&mut pve);
    edit_notes(&pve, "qemu", vmid, "Owner: team-web");
    ws.remove_state();
    for round in 0..2 {
        let (ok, out) = ws.run_once();
        assert!(!ok, "round {round}: {out}");
        assert_eq!(
            guests(&mut pve),
            before,
            "round {round}: no second guest\n{out}"
        );
    }
    let (status, reason, message) = ws.condition("web", "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "MarkerMissing"),
        "{message}"
    );
    assert!(
        message.contains(&format!("proxsync adopt web --vmid {vmid}")),
        "{message}"
    );
    let out = ws.proxsync(&["adopt", "web", "--vmid", &vmid.to_string()]);
    assert!(out.status.success(), "{}", common::engine::text(&out));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(guests(&mut pve), before);
    let text = description(&pve.vm(vmid as u32));
    assert!(text.starts_with("Owner: team-web\n"), "{text}");
}
