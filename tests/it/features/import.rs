//! `proxsync import` and adoption by consent, end to end: 30 varied VMs made by hand (UEFI and
//! TPM, several disks on several storages, NICs with VLANs and trunks, HA, pools, cloud-init,
//! an ISO in the CD-ROM, unused disks, PCI passthrough), imported, committed, planned, and
//! adopted. The round trip is the test: the plan holds adoptions only, the first cycle writes
//! each VM's marker and tag and nothing else, every spec is Ready, and a second cycle sends
//! nothing.

use crate::common;

use common::engine::{Workspace, text};
use common::{FakePve, Scenario};
use serde_json::{Value, json};

const VMS: u32 = 30;

fn uuid(i: u32) -> String {
    format!(
        "3f2504e0-4f89-11d3-9a0c-{:012x}",
        0x0305_e82c_0000_u64 + u64::from(i)
    )
}

/// VM `500 + i`, made by hand: each of ten kinds of VM, three times.
fn varied_vm(i: u32) -> Value {
    let vmid = 500 + i;
    let mac = |n: u32| format!("BC:24:11:{:02X}:{:02X}:{:02X}", i, n, 0x10 + n);
    let mut config = json!({
        "name": format!("app-{i:02}.example.com"),
        "smbios1": format!("uuid={}", uuid(i)),
        "cores": 1 + i % 4,
        "memory": (1024 * (1 + i % 3)).to_string(),
        "scsihw": "virtio-scsi-single",
        "boot": "order=scsi0;net0",
        "scsi0": format!("local-lvm:vm-{vmid}-disk-0,iothread=1,size={}G", 8 + i),
        "net0": format!("virtio={},bridge=vmbr0", mac(0)),
        "ostype": "l26",
    });
    let mut vm = json!({"vmid": vmid, "node": if i.is_multiple_of(2) { "pve1" } else { "pve2" },
                        "status": "running"});
    let c = config.as_object_mut().unwrap();
    match i % 10 {
        0 => {
            c.insert("bios".into(), json!("ovmf"));
            c.insert("machine".into(), json!("pc-q35-9.2+pve1"));
            c.insert(
                "efidisk0".into(),
                json!(format!(
                    "local-lvm:vm-{vmid}-disk-1,efitype=4m,pre-enrolled-keys=1,size=4M"
                )),
            );
            c.insert(
                "tpmstate0".into(),
                json!(format!("local-lvm:vm-{vmid}-disk-2,size=4M,version=v2.0")),
            );
            c.insert("ostype".into(), json!("win11"));
        }
        1 => {
            c.insert(
                "scsi1".into(),
                json!(format!(
                    "data:vm-{vmid}-disk-1,cache=writeback,iothread=1,size=100G"
                )),
            );
            c.insert(
                "virtio2".into(),
                json!(format!(
                    "local-lvm:vm-{vmid}-disk-2,backup=0,discard=on,size=20G"
                )),
            );
            c.insert(
                "sata0".into(),
                json!(format!(
                    "local-lvm:vm-{vmid}-disk-3,replicate=0,size=10G,ssd=1"
                )),
            );
        }
        2 => {
            c.insert(
                "net1".into(),
                json!(format!("e1000={},bridge=vmbr1,firewall=1,tag=20", mac(1))),
            );
            c.insert(
                "net2".into(),
                json!(format!(
                    "virtio={},bridge=vmbr0,mtu=1,queues=4,rate=12.5,trunks=10;20-30",
                    mac(2)
                )),
            );
        }
        3 => {
            // Made an HA resource by hand once the fake runs (`make_ha`).
        }
        4 => {
            vm["pool"] = json!("prod");
        }
        5 => {
            c.insert(
                "ide0".into(),
                json!(format!("local-lvm:vm-{vmid}-cloudinit,media=cdrom")),
            );
            c.insert("ciuser".into(), json!("ops"));
            c.insert(
                "sshkeys".into(),
                json!("ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIOps%20ops%40example%0A"),
            );
            c.insert("ipconfig0".into(), json!("ip=10.0.0.5/24,gw=10.0.0.1"));
            c.insert("nameserver".into(), json!("10.0.0.53 10.0.0.54"));
            c.insert("searchdomain".into(), json!("example.org"));
            c.insert("ciupgrade".into(), json!("0"));
        }
        6 => {
            c.insert(
                "ide2".into(),
                json!("local:iso/debian-12.7.0-amd64-netinst.iso,media=cdrom"),
            );
            c.insert(
                "unused0".into(),
                json!(format!("local-lvm:vm-{vmid}-disk-9")),
            );
            c.insert("boot".into(), json!("order=ide2;scsi0;net0"));
        }
        7 => {
            c.insert("hostpci0".into(), json!("0000:01:00.0,pcie=1"));
            c.insert("machine".into(), json!("q35"));
            c.insert("args".into(), json!("-no-reboot"));
            c.insert("onboot".into(), json!(1));
            c.insert("startup".into(), json!("order=2,up=30"));
            c.insert("protection".into(), json!(1));
            c.insert("agent".into(), json!("1,fstrim_cloned_disks=1"));
            c.insert("balloon".into(), json!(512));
            c.insert("numa".into(), json!(1));
            c.insert("cpu".into(), json!("host,flags=+aes"));
            c.insert("sockets".into(), json!(2));
        }
        8 => {
            vm["status"] = json!("stopped");
            c.insert("tags".into(), json!("web;tenant_acme;team-a"));
            c.insert("description".into(), json!("Billing DB\nowner: ops"));
            c.insert("vga".into(), json!("qxl"));
        }
        _ => {
            c.insert("serial0".into(), json!("socket"));
            c.insert("vga".into(), json!("serial0"));
            c.insert("name".into(), json!(format!("DB-Primary-{i:02}")));
        }
    }
    vm["name"] = config["name"].clone();
    vm["config"] = config;
    vm
}

fn scenario() -> Scenario {
    let mut s = Scenario::default()
        .storage(
            "data",
            json!({"type": "dir", "path": "/srv/data", "content": "images"}),
        )
        .set("pools", json!(["prod"]));
    for i in 0..VMS {
        s = s.vm(varied_vm(i));
    }
    // Two VMs no spec can adopt: one without a name, one another install manages.
    s.vm(json!({"vmid": 600, "node": "pve1", "status": "running",
                "config": {"smbios1": format!("uuid={}", uuid(99)), "scsi0": "local-lvm:vm-600-disk-0,size=8G"}}))
        .vm(json!({"vmid": 601, "name": "theirs", "node": "pve1", "status": "running",
                   "config": {"name": "theirs", "smbios1": format!("uuid={}", uuid(98)),
                              "tags": "proxsync.other", "scsi0": "local-lvm:vm-601-disk-0,size=8G"}}))
}

fn writes(pve: &mut FakePve, since: u64) -> Vec<common::RecordedRequest> {
    pve.requests_since(since)
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect()
}

/// VMs 503, 513 and 523 made HA resources by hand (restarted twice at most).
fn make_ha(pve: &FakePve) {
    let client = pve.client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for vmid in [503, 513, 523] {
        let params = proxsync::pve::ha::HaParams {
            state: "started".into(),
            group: None,
            max_restart: 2,
            max_relocate: 1,
            comment: "by hand".into(),
        };
        rt.block_on(client.add_ha_resource(proxsync::guest::GuestKind::Qemu, vmid, &params))
            .unwrap();
    }
}

#[test]
fn thirty_varied_vms_round_trip_through_import_with_only_their_marker_and_tag_written() {
    let mut pve = scenario().start();
    make_ha(&pve);
    let made = pve.requests().last().map_or(0, |r| r.seq + 1);
    let ws = Workspace::new(&pve);
    let dir = ws.path("repo/imported");
    let out = ws.proxsync(&[
        "import",
        "--site",
        "lab",
        "--unmanaged",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("30 spec(s) written"), "{said}");
    // One listing, one config read per VM that could be a spec, one HA read per HA VM.
    let reads: Vec<String> = pve
        .requests_since(made)
        .into_iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    let count = |part: &str| reads.iter().filter(|r| r.contains(part)).count();
    assert_eq!(count("/cluster/resources"), 1, "{reads:#?}");
    assert_eq!(
        count("/config"),
        31,
        "VMs 500-529 and the nameless 600: {reads:#?}"
    );
    assert_eq!(count("/cluster/ha/resources/vm:"), 3, "{reads:#?}");
    assert_eq!(reads.len(), 35, "{reads:#?}");
    assert!(
        said.contains("skipped VM 600: VM 600 has no valid name"),
        "{said}"
    );
    assert!(
        !said.contains("VM 601"),
        "--unmanaged leaves out a managed VM: {said}"
    );
    assert!(said.contains("skipped VM 9000: a template"), "{said}");
    let theirs = ws.proxsync(&["import", "--site", "lab", "--vmid", "601"]);
    assert_eq!(theirs.status.code(), Some(1));
    assert!(
        text(&theirs).contains("skipped VM 601: VM 601 carries the tag proxsync.other"),
        "{}",
        text(&theirs)
    );
    assert!(writes(&mut pve, made).is_empty(), "import only reads");

    // What cannot be expressed is listed as left alone.
    let pci = std::fs::read_to_string(dir.join("app-07-example-com.yaml")).unwrap();
    assert!(pci.contains("#   args, hostpci0"), "{pci}");
    let iso = std::fs::read_to_string(dir.join("app-06-example-com.yaml")).unwrap();
    assert!(
        iso.contains("ide2 (CD-ROM local:iso/debian-12.7.0-amd64-netinst.iso), unused0"),
        "{iso}"
    );
    assert!(dir.join("db-primary-09.yaml").exists());
    let ha = std::fs::read_to_string(dir.join("app-03-example-com.yaml")).unwrap();
    assert!(
        ha.contains("ha: {state: started, maxRestart: 2, maxRelocate: 1}"),
        "{ha}"
    );

    ws.git(&["add", "-A"]);
    ws.git(&["commit", "-q", "-m", "imported"]);
    let validate = ws.proxsync(&["validate", ws.path("repo").to_str().unwrap()]);
    assert!(validate.status.success(), "{}", text(&validate));

    let plan = ws.proxsync(&["plan", "--json"]);
    assert_eq!(plan.status.code(), Some(2), "{}", text(&plan));
    let doc: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let changes = doc["changes"].as_array().unwrap();
    assert_eq!(changes.len(), VMS as usize, "{doc}");
    assert!(
        changes.iter().all(|c| c["action"] == "adoptByConsent"),
        "only adoptions: {doc}"
    );
    for c in changes {
        assert!(c.get("fields").is_none(), "nothing else differs: {c}");
        let text = c["text"].as_str().unwrap();
        assert!(text.ends_with("; nothing else differs"), "{text}");
    }
    let human = ws.proxsync(&["plan"]);
    assert!(
        text(&human).contains("~ adopt   app-07-example-com: VM 507 on lab/pve2"),
        "{}",
        text(&human)
    );

    let since = pve.requests().last().map_or(0, |r| r.seq + 1);
    let (ok, out) = ws.run_once();
    let not_ready: Vec<String> = std::fs::read_dir(ws.path("status"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".yaml")
                .map(String::from)
        })
        .filter(|n| !n.starts_with('_'))
        .map(|n| (n.clone(), ws.condition(&n, "Ready")))
        .filter(|(_, (s, _, _))| s != "True")
        .map(|(n, c)| format!("{n}: {c:?}"))
        .collect();
    assert!(ok && not_ready.is_empty(), "{not_ready:#?}\n{out}");
    let sent = writes(&mut pve, since);
    assert_eq!(sent.len(), VMS as usize, "one write per VM: {sent:#?}");
    for r in &sent {
        assert_eq!(r.method, "PUT", "{r:?}");
        assert!(r.path.ends_with("/config"), "{r:?}");
        let keys: Vec<&str> = r
            .body
            .split('&')
            .filter_map(|kv| kv.split('=').next())
            .collect();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(keys, ["description", "digest", "tags"], "{r:?}");
    }
    for i in 0..VMS {
        let name = if i % 10 == 9 {
            format!("db-primary-{i:02}")
        } else {
            format!("app-{i:02}-example-com")
        };
        let (ready, reason, message) = ws.condition(&name, "Ready");
        assert_eq!(ready, "True", "{name}: {reason} {message}");
        let (_, provisioned, _) = ws.condition(&name, "Provisioned");
        assert_eq!(provisioned, "Adopted", "{name}");
        let vm = pve.vm(500 + i);
        let tags = vm["config"]["tags"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(tags.contains("proxsync.test"), "{name}: {tags}");
    }

    let since = pve.requests().last().map_or(0, |r| r.seq + 1);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let sent = writes(&mut pve, since);
    assert!(sent.is_empty(), "a second cycle sends nothing: {sent:#?}");
    let (_, _, message) = ws.condition("app-00-example-com", "Ready");
    assert!(
        message.contains("proxsync.io/adopt annotations did their work"),
        "{message}"
    );
}

#[test]
fn a_vmid_reused_by_another_vm_is_never_taken() {
    let mut pve = Scenario::default().vm(varied_vm(1)).start();
    let ws = Workspace::new(&pve);
    let out = ws.proxsync(&["import", "--site", "lab", "--vmid", "501"]);
    assert!(out.status.success(), "{}", text(&out));
    let spec = String::from_utf8(out.stdout).unwrap();
    // The VM is deleted and another made at its VMID, with its name but its own uuid.
    pve.remove_vm(501);
    let mut other = varied_vm(1);
    other["config"]["smbios1"] = json!(format!("uuid={}", uuid(77)));
    pve.add_vm(other);
    ws.commit_specs(&[("app.yaml", spec)]);
    let since = pve.requests().last().map_or(0, |r| r.seq + 1);
    let (_, out) = ws.run_once();
    let sent = writes(&mut pve, since);
    assert!(sent.is_empty(), "{sent:#?}\n{out}");
    let (ready, reason, message) = ws.condition("app-01-example-com", "Ready");
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("False", "Failed"),
        "{message}"
    );
    assert!(message.contains("not 3f2504e0"), "{message}");
    assert!(
        message.contains("another guest holds the VMID"),
        "{message}"
    );
}

#[test]
fn imported_to_observe_nothing_is_written_until_the_observe_line_goes() {
    let mut pve = Scenario::default()
        .vm(varied_vm(1))
        .vm(varied_vm(8))
        .start();
    let ws = Workspace::new(&pve);
    let out = ws.proxsync(&[
        "import",
        "--site",
        "lab",
        "--vmid",
        "501",
        "--vmid",
        "508",
        "--observe",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stream = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stream.matches("managementPolicy: Observe").count(),
        2,
        "{stream}"
    );
    ws.commit_specs(&[("imported.yaml", stream.clone())]);
    let since = pve.requests().last().map_or(0, |r| r.seq + 1);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let sent = writes(&mut pve, since);
    assert!(sent.is_empty(), "observing sends nothing: {sent:#?}");
    for name in ["app-01-example-com", "app-08-example-com"] {
        let (synced, reason, message) = ws.condition(name, "Synced");
        assert_eq!(
            (synced.as_str(), reason.as_str()),
            ("True", "InSync"),
            "{name}: {message}"
        );
        let (_, provisioned, _) = ws.condition(name, "Provisioned");
        assert_eq!(
            provisioned, "NotCreated",
            "{name}: not adopted while observed"
        );
    }

    // Let go: the consent takes the VMs over.
    ws.commit_specs(&[(
        "imported.yaml",
        stream.replace("  managementPolicy: Observe\n", ""),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    for name in ["app-01-example-com", "app-08-example-com"] {
        let (_, provisioned, _) = ws.condition(name, "Provisioned");
        assert_eq!(provisioned, "Adopted", "{name}");
    }
}

/// `plan` shows what the converge right after an adoption changes besides the marker and the
/// tag: here the memory a person raised in the imported spec.
#[test]
fn plan_shows_what_an_adoption_changes_beyond_the_marker() {
    let pve = Scenario::default().vm(varied_vm(1)).start();
    let ws = Workspace::new(&pve);
    let out = ws.proxsync(&["import", "--site", "lab", "--vmid", "501"]);
    assert!(out.status.success(), "{}", text(&out));
    let spec = String::from_utf8(out.stdout).unwrap();
    assert!(spec.contains("memory: \"2048Mi\""), "{spec}");
    ws.commit_specs(&[(
        "app.yaml",
        spec.replace("memory: \"2048Mi\"", "memory: 4Gi"),
    )]);
    let plan = ws.proxsync(&["plan"]);
    assert_eq!(plan.status.code(), Some(2), "{}", text(&plan));
    assert!(
        text(&plan).contains("its marker and tag are written; then: memory 2048 -> 4096 MiB"),
        "{}",
        text(&plan)
    );
}
