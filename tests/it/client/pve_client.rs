//! The PVE client against fakepve: every call, and the failures fakepve can produce.

use crate::common;

use std::time::Duration;

use common::{
    FakePve, Scenario, TEMPLATE_NAME, TEMPLATE_VMID, TOKEN_ID, TOKEN_SECRET, default_scenario,
};
use proxsync::category::Category;
use proxsync::config::{Secret, Trust};
use proxsync::gate;
use proxsync::ownership::{Marker, MarkerKey};
use proxsync::pve::{
    self, Client, ClientOptions, CloneRequest, Credentials, Error, TaskOutcome, TransportKind,
    VmParams,
};
use rustls::pki_types::pem::PemObject;
use serde_json::json;

fn options(pve: &FakePve, trust: Trust, credentials: Credentials) -> ClientOptions {
    ClientOptions {
        endpoint: pve.url().to_string(),
        trust,
        credentials,
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        proxy: None,
        read_attempts: 3,
        read_retry_budget: std::time::Duration::from_secs(5),
    }
}

fn token() -> Credentials {
    Credentials::Token {
        id: TOKEN_ID.into(),
        secret: Secret::new(TOKEN_SECRET),
    }
}

fn client(pve: &FakePve) -> Client {
    Client::new(options(
        pve,
        Trust::CaFile(pve.ca_file().to_path_buf()),
        token(),
    ))
    .expect("client")
}

const WAIT: Duration = Duration::from_secs(30);

async fn wait_ok(c: &Client, upid: &pve::Upid) {
    let outcome = c.wait_task(upid, WAIT).await.expect("task succeeds");
    assert!(
        matches!(outcome, TaskOutcome::Ok | TaskOutcome::Warnings(_)),
        "{outcome:?}"
    );
}

/// Clones the template to `vmid` and waits for it.
/// The marker key of the tests' install `main`.
fn key() -> MarkerKey {
    MarkerKey::from_bytes([7; 32])
}

/// The signed marker proxsync writes on VM `vmid` of spec `spec`.
fn marker(spec: &str, vmid: u32) -> Marker {
    Marker::signed(&key(), "main", spec, &format!("test-{vmid}"), vmid)
}

async fn clone_template(c: &Client, vmid: u32, name: &str) {
    let upid = c
        .clone_vm(
            "pve1",
            TEMPLATE_VMID,
            &CloneRequest {
                newid: vmid,
                name: name.into(),
                description: marker(name, vmid).description(),
                full: true,
                storage: Some("local-lvm".into()),
                target: None,
                pool: None,
            },
        )
        .await
        .expect("clone accepted");
    assert_eq!(upid.kind, "qmclone");
    assert_eq!(upid.user, TOKEN_ID, "tasks run as the token");
    wait_ok(c, &upid).await;
}

/// pveproxy closes a connection kept alive and idle for 5 s, and so does the harness. The
/// client lets one go after 4 s idle: it never sends a request on a connection the server is
/// closing, and an idle daemon holds no connection between cycles.
#[tokio::test]
async fn an_idle_connection_is_let_go_before_pveproxy_closes_it() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);
    c.version().await.unwrap();
    c.version().await.unwrap();
    let seen = |pve: &mut FakePve| pve.call("connections", json!({})).unwrap().as_u64();
    assert_eq!(
        seen(&mut pve),
        Some(1),
        "one connection kept alive for requests close together"
    );
    tokio::time::sleep(Duration::from_millis(4500)).await;
    c.version().await.unwrap();
    assert_eq!(seen(&mut pve), Some(2), "a new connection after 4.5 s idle");
}

#[tokio::test]
async fn reads_version_health_resources_storage_and_bridges() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);

    let v = c.version().await.unwrap();
    assert!(v.triple().0 >= 8, "{v:?}");
    assert!(v.features().import_from);

    let health = c.cluster_health().await.unwrap();
    assert!(health.quorate);
    assert!(
        health.node_healthy("pve1") && health.node_healthy("pve2"),
        "{health:?}"
    );

    let vms = c.vm_resources().await.unwrap();
    let t = vms
        .guests
        .iter()
        .find(|v| v.vmid == TEMPLATE_VMID)
        .expect("template listed");
    assert_eq!(t.name.as_deref(), Some(TEMPLATE_NAME));
    assert_eq!(t.template, Some(true));
    assert!(t.is_qemu());

    let next = c.next_id().await.unwrap();
    assert!(next >= 100);
    assert!(c.vmid_is_free(next).await.unwrap());
    assert!(
        !c.vmid_is_free(TEMPLATE_VMID).await.unwrap(),
        "9000 is taken"
    );

    let storages = c.node_storages("pve1", None).await.unwrap();
    let local = storages
        .iter()
        .find(|s| s.storage == "local")
        .expect("local");
    assert!(
        local.has_content("iso") && local.has_content("import"),
        "{local:?}"
    );
    let images = c.node_storages("pve1", Some("images")).await.unwrap();
    assert!(
        images.iter().all(|s| s.has_content("images")) && !images.is_empty(),
        "{images:?}"
    );

    let isos = c
        .storage_content("pve1", "local", Some("iso"))
        .await
        .unwrap();
    assert!(
        isos.iter()
            .any(|v| v.volid == "local:iso/debian-12.7.0-amd64-netinst.iso"),
        "{isos:?}"
    );
    let imports = c
        .storage_content("pve1", "local", Some("import"))
        .await
        .unwrap();
    assert!(
        imports
            .iter()
            .any(|v| v.volid == "local:import/debian-12-genericcloud-amd64.qcow2"),
        "{imports:?}"
    );

    let bridges = c.node_bridges("pve1").await.unwrap();
    let names: Vec<&str> = bridges.iter().map(|b| b.iface.as_str()).collect();
    assert!(
        names.contains(&"vmbr0") && names.contains(&"vmbr1"),
        "{names:?}"
    );

    let perms = c.permissions(None).await.unwrap();
    assert!(!perms.is_empty());

    // The token only ever travels in the header: no request recorded it.
    for r in pve.requests() {
        assert!(!format!("{r:?}").contains(TOKEN_SECRET), "{r:?}");
    }
}

#[tokio::test]
async fn clone_configure_resize_power_and_delete() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);
    clone_template(&c, 120, "web-01").await;

    let cfg = c
        .vm_config("pve1", proxsync::guest::GuestKind::Qemu, 120)
        .await
        .unwrap();
    assert_eq!(cfg.get("name"), Some("web-01"));
    assert_eq!(
        cfg.description(),
        Some(marker("web-01", 120).description().as_str())
    );
    let digest = cfg.digest().expect("a digest").to_string();

    // A config change with the digest just read goes through...
    let params = VmParams::new()
        .set("cores", 4)
        .set("memory", 4096)
        .tags(&["proxsync.main", "web"])
        .unwrap()
        .nic("net0", "vmbr1")
        .unwrap();
    c.set_config(
        "pve1",
        proxsync::guest::GuestKind::Qemu,
        120,
        &params,
        Some(&digest),
    )
    .await
    .unwrap();
    let cfg = c
        .vm_config("pve1", proxsync::guest::GuestKind::Qemu, 120)
        .await
        .unwrap();
    assert_eq!(cfg.get("cores"), Some("4"));
    assert_eq!(cfg.tags(), vec!["proxsync.main", "web"]);
    assert!(cfg.get("net0").unwrap().contains("bridge=vmbr1"), "{cfg:?}");
    // ... and one with the stale digest is refused as a conflict.
    let err = c
        .set_config(
            "pve1",
            proxsync::guest::GuestKind::Qemu,
            120,
            &VmParams::new().set("cores", 2),
            Some(&digest),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), Category::Conflict, "{err}");

    // The tags now show in the one listing the daemon reads per cycle.
    let listed = c.vm_resources().await.unwrap();
    let vm = listed.guests.iter().find(|v| v.vmid == 120).unwrap();
    assert_eq!(vm.tag_list(), vec!["proxsync.main", "web"]);

    // Resize is a task on PVE 8+.
    let upid = c
        .resize_disk(
            "pve1",
            proxsync::guest::GuestKind::Qemu,
            120,
            "scsi0",
            "20G",
            None,
        )
        .await
        .unwrap();
    let upid = upid.expect("PVE 9 answers resize with a task");
    wait_ok(&c, &upid).await;

    let upid = c
        .start_vm("pve1", proxsync::guest::GuestKind::Qemu, 120)
        .await
        .unwrap();
    wait_ok(&c, &upid).await;
    assert_eq!(pve.vm(120)["status"], "running");
    let upid = c
        .shutdown_vm("pve1", proxsync::guest::GuestKind::Qemu, 120, 60, true)
        .await
        .unwrap();
    wait_ok(&c, &upid).await;
    assert_eq!(pve.vm(120)["status"], "stopped");
    let upid = c
        .start_vm("pve1", proxsync::guest::GuestKind::Qemu, 120)
        .await
        .unwrap();
    wait_ok(&c, &upid).await;
    let upid = c
        .stop_vm("pve1", proxsync::guest::GuestKind::Qemu, 120, false)
        .await
        .unwrap();
    wait_ok(&c, &upid).await;

    // A delete needs the gate's permit: the VM's marker verified on a checked site.
    let view = proxsync::observe::observe_site("lab", &c).await;
    let site = gate::site::checked(&view).unwrap();
    let cfg = c
        .vm_config("pve1", proxsync::guest::GuestKind::Qemu, 120)
        .await
        .unwrap();
    let ours = gate::identity::verify(
        &site,
        &key(),
        "main",
        proxsync::guest::GuestKind::Qemu,
        120,
        cfg.description(),
        Some("web-01"),
        None,
    )
    .unwrap();
    let permit = gate::permit::remove(&ours, "web-01", false).unwrap();
    // Used on another VM, or a permit of another act: refused, and nothing is sent.
    let sent = pve.requests().len();
    let err = c
        .delete_vm(
            "pve1",
            proxsync::guest::GuestKind::Qemu,
            121,
            true,
            true,
            &permit,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotPermitted(_)), "{err}");
    let release = gate::permit::remove(&ours, "web-01", true).unwrap();
    let err = c
        .delete_vm(
            "pve1",
            proxsync::guest::GuestKind::Qemu,
            120,
            true,
            true,
            &release,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("nothing was sent"), "{err}");
    assert_eq!(pve.requests().len(), sent, "no request left");

    let upid = c
        .delete_vm(
            "pve1",
            proxsync::guest::GuestKind::Qemu,
            120,
            true,
            true,
            &permit,
        )
        .await
        .unwrap();
    assert_eq!(upid.kind, "qmdestroy");
    wait_ok(&c, &upid).await;
    let err = c
        .vm_config("pve1", proxsync::guest::GuestKind::Qemu, 120)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(err.pve_message().contains("does not exist"), "{err}");
    let req = pve
        .requests()
        .into_iter()
        .find(|r| r.method == "DELETE")
        .expect("the delete was sent");
    let query = format!("{req:?}");
    assert!(
        query.contains("purge") && query.contains("destroy-unreferenced-disks"),
        "{query}"
    );
}

#[tokio::test]
async fn create_with_import_cdrom_cloudinit_and_sshkeys() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);
    let params = VmParams::new()
        .set("name", "db-01")
        .set("description", "proxsync: spec=db-01 uid=abc")
        .tags(&["proxsync.main", "tenant_customer-123"])
        .unwrap()
        .set("cores", 2)
        .set("memory", 2048)
        .set("scsihw", "virtio-scsi-single")
        .import_disk(
            "scsi0",
            "local-lvm",
            "local:import/debian-12-genericcloud-amd64.qcow2",
        )
        .unwrap()
        .cloudinit_drive("ide2", "local-lvm")
        .unwrap()
        .cdrom("ide0", "local:iso/debian-12.7.0-amd64-netinst.iso")
        .unwrap()
        .nic("net0", "vmbr0")
        .unwrap()
        .set("ciuser", "ops")
        .sshkeys(&["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ+test ops@example"]);
    let upid = c.create_vm("pve1", 130, &params).await.unwrap();
    assert_eq!(upid.kind, "qmcreate");
    wait_ok(&c, &upid).await;

    let cfg = c
        .vm_config("pve1", proxsync::guest::GuestKind::Qemu, 130)
        .await
        .unwrap();
    assert_eq!(cfg.get("name"), Some("db-01"));
    assert_eq!(cfg.tags(), vec!["proxsync.main", "tenant_customer-123"]);
    assert!(cfg.get("ide0").unwrap().contains("media=cdrom"), "{cfg:?}");
    assert_eq!(cfg.get("ciuser"), Some("ops"));
    // PVE keeps sshkeys URL-encoded in the config, as it was sent.
    assert_eq!(
        cfg.get("sshkeys"),
        Some("ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIJ%2Btest%20ops%40example")
    );
    // The create request carried the import-from option exactly as built.
    let create = pve
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path.ends_with("/nodes/pve1/qemu"))
        .expect("create sent");
    assert!(format!("{create:?}").contains("import-from"), "{create:?}");

    // The same VMID again: "already exists", which the allocator reads as "take another".
    let err = c
        .create_vm("pve1", 130, &VmParams::new().set("name", "dup"))
        .await
        .unwrap_err();
    assert!(err.is_already_exists(), "{err}");
}

#[tokio::test]
async fn parameter_errors_come_back_per_field() {
    let pve = FakePve::start(default_scenario());
    let c = client(&pve);
    let err = c
        .create_vm("pve1", 140, &VmParams::new().set("name", "bad name"))
        .await
        .unwrap_err();
    match &err {
        Error::Api { status, errors, .. } => {
            assert_eq!(*status, 400);
            assert!(errors.contains_key("name"), "{errors:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.category(), Category::ConfigurationError);
    assert!(err.to_string().contains("name:"), "{err}");
}

#[tokio::test]
async fn locks_are_reported_with_the_task_that_holds_them() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);
    clone_template(&c, 150, "locked").await;

    pve.hold_config_lock(150, None);
    let err = c
        .set_config(
            "pve1",
            proxsync::guest::GuestKind::Qemu,
            150,
            &VmParams::new().set("cores", 2),
            None,
        )
        .await
        .unwrap_err();
    assert!(err.is_lock(), "{err}");
    assert!(err.pve_message().contains("can't lock file"), "{err}");
    pve.release_config_lock(150);

    // A leftover lock (an interrupted clone) shows in the config, and no task holds it.
    pve.snapshot_lock(150, "clone");
    let cfg = c
        .vm_config("pve1", proxsync::guest::GuestKind::Qemu, 150)
        .await
        .unwrap();
    assert_eq!(cfg.lock(), Some("clone"));
    assert!(c.active_vm_tasks("pve1", 150).await.unwrap().is_empty());
    // PVE checks the lock inside the start worker: the task fails with the lock's words.
    let upid = c
        .start_vm("pve1", proxsync::guest::GuestKind::Qemu, 150)
        .await
        .unwrap();
    let err = c.wait_task(&upid, WAIT).await.unwrap_err();
    assert!(err.is_lock(), "{err}");
    assert!(err.pve_message().contains("VM is locked (clone)"), "{err}");
}

#[tokio::test]
async fn a_task_slower_than_our_wait_is_still_running_not_failed() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);
    clone_template(&c, 160, "slow").await;
    pve.set_time_scale(1.0);
    pve.set_vm(160, json!({"start_secs": 3}));
    let upid = c
        .start_vm("pve1", proxsync::guest::GuestKind::Qemu, 160)
        .await
        .unwrap();
    let outcome = c
        .wait_task(&upid, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(outcome, TaskOutcome::StillRunning);
    // The same UPID, parsed back from its string as after a restart, is waited for to the end.
    let resumed: pve::Upid = upid.to_string().parse().unwrap();
    let outcome = c
        .wait_task(&resumed, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(outcome, TaskOutcome::Ok);
    assert!(
        !c.active_vm_tasks("pve1", 160)
            .await
            .unwrap()
            .iter()
            .any(|t| t.upid == upid.to_string())
    );
}

#[tokio::test]
async fn a_failed_task_carries_its_exit_status_and_log() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);
    clone_template(&c, 170, "broken").await;
    pve.set_vm(
        170,
        json!({"start_error": "volume 'local-lvm:vm-170-disk-0' does not exist"}),
    );
    let upid = c
        .start_vm("pve1", proxsync::guest::GuestKind::Qemu, 170)
        .await
        .unwrap();
    let err = c.wait_task(&upid, WAIT).await.unwrap_err();
    match &err {
        Error::TaskFailed {
            exitstatus,
            log_tail,
            ..
        } => {
            assert!(exitstatus.contains("does not exist"), "{exitstatus}");
            assert!(
                log_tail.iter().any(|l| l.contains("TASK ERROR")),
                "{log_tail:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn server_errors_keep_pves_text_and_map_to_categories() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);
    let cases: [(u16, &str, Category); 4] = [
        (
            500,
            "cluster not ready - no quorum?",
            Category::NodeUnhealthy,
        ),
        (
            501,
            "Method 'POST /nodes/pve1/qemu/9000/importdisk' not implemented",
            Category::ApiNotSupported,
        ),
        (595, "No route to host", Category::NodeUnhealthy),
        (596, "Connection timed out", Category::NodeUnhealthy),
    ];
    for (status, message, category) in cases {
        pve.fail("GET", "/nodes/pve1/qemu/9000/config", status, message);
        let err = c
            .vm_config("pve1", proxsync::guest::GuestKind::Qemu, 9000)
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(status), "{err}");
        assert_eq!(err.pve_message(), message);
        assert_eq!(err.category(), category, "{err}");
        pve.clear_failures();
    }
}

#[tokio::test]
async fn reads_are_retried_and_writes_are_not() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);
    // Two gateway errors, then success: a read gets through on its third attempt.
    pve.fail_times("GET", "/version", 502, "Bad Gateway", 2);
    c.version().await.expect("third attempt succeeds");
    let gets = pve
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/version"))
        .count();
    assert_eq!(gets, 3);

    // The same failure on a create is returned at once: sent exactly once, outcome unknown.
    pve.clear_requests();
    pve.fail_times("POST", "/nodes/pve1/qemu", 502, "Bad Gateway", 1);
    let err = c
        .create_vm("pve1", 180, &VmParams::new().set("name", "once"))
        .await
        .unwrap_err();
    assert!(err.outcome_unknown(), "{err}");
    let posts = pve
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/nodes/pve1/qemu"))
        .count();
    assert_eq!(posts, 1, "a create is never resent blindly");
}

#[tokio::test]
async fn a_dropping_network_is_a_network_error() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);
    pve.flaky_network(1.0, 0.0, 0.0, Some(7));
    let err = c.version().await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err:?}");
    assert_eq!(err.category(), Category::NetworkError);
    pve.flaky_network(0.0, 0.0, 0.0, None);
    c.version().await.expect("recovers once the network does");
}

#[tokio::test]
async fn offline_nodes_and_lost_quorum_show_in_health() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);
    clone_template(&c, 190, "on-pve1").await;
    pve.set_node_offline("pve1", true);
    let health = c.cluster_health().await.unwrap();
    assert!(
        !health.node_healthy("pve1") && health.node_healthy("pve2"),
        "{health:?}"
    );
    // A VM of an offline node is listed as unknown, not missing.
    let vm = c
        .vm_resources()
        .await
        .unwrap()
        .guests
        .into_iter()
        .find(|v| v.vmid == 190)
        .expect("still listed");
    assert_eq!(vm.status, Some(proxsync::pve::types::ListedStatus::Unknown));
    let err = c
        .vm_config("pve1", proxsync::guest::GuestKind::Qemu, 190)
        .await
        .unwrap_err();
    assert_eq!(err.category(), Category::NodeUnhealthy, "{err}");
    pve.set_node_offline("pve1", false);

    pve.lose_quorum();
    let health = c.cluster_health().await.unwrap();
    assert!(!health.quorate && !health.node_healthy("pve2"));
    let err = c
        .start_vm("pve1", proxsync::guest::GuestKind::Qemu, 190)
        .await
        .unwrap_err();
    assert_eq!(err.category(), Category::NodeUnhealthy, "{err}");
}

#[tokio::test]
async fn guest_agent_interfaces() {
    let mut pve = FakePve::start(default_scenario());
    let c = client(&pve);
    clone_template(&c, 200, "agent").await;
    // The clone's config enables no agent: qemu-server says so before anything else.
    let err = c.agent_interfaces("pve1", 200).await.unwrap_err();
    assert_eq!(
        err.meaning(),
        Some(proxsync::pve::texts::Meaning::NoAgent),
        "{err}"
    );
    assert!(
        !err.is_overload(),
        "a guest's state, not the node's load: {err}"
    );
    pve.set_vm(200, json!({"agent": {}, "status": "running"}));
    let ifaces = c.agent_interfaces("pve1", 200).await.unwrap();
    assert!(
        ifaces
            .iter()
            .flat_map(|i| &i.ip_addresses)
            .any(|a| a.ip_address == "192.0.2.10"),
        "{ifaces:?}"
    );
}

#[tokio::test]
async fn permission_denied_names_the_privilege() {
    let pve = Scenario::default()
        .grant(TOKEN_ID, "/", &["Sys.Audit"])
        .start();
    let c = client(&pve);
    c.version().await.unwrap();
    let err = c
        .clone_vm(
            "pve1",
            TEMPLATE_VMID,
            &CloneRequest {
                newid: 210,
                name: "nope".into(),
                description: String::new(),
                full: true,
                storage: None,
                target: None,
                pool: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    assert_eq!(err.category(), Category::PermissionDenied);
    assert!(
        err.pve_message().contains("Permission check failed"),
        "{err}"
    );
    // The token's effective privileges, as doctor reads them.
    let perms = c.permissions(None).await.unwrap();
    assert!(
        perms.get("/").is_some_and(|p| p.contains_key("Sys.Audit")),
        "{perms:?}"
    );
    assert!(
        !perms.values().any(|p| p.contains_key("VM.Clone")),
        "{perms:?}"
    );
}

#[tokio::test]
async fn a_wrong_token_is_an_authentication_error() {
    let pve = FakePve::start(default_scenario());
    let opts = options(
        &pve,
        Trust::CaFile(pve.ca_file().to_path_buf()),
        Credentials::Token {
            id: TOKEN_ID.into(),
            secret: Secret::new("00000000-wrong"),
        },
    );
    let err = Client::new(opts).unwrap().version().await.unwrap_err();
    assert_eq!(err.status(), Some(401));
    assert_eq!(err.category(), Category::AuthenticationError);
    assert!(
        !err.to_string().contains("00000000-wrong"),
        "the secret never shows: {err}"
    );
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused() {
    let pve = FakePve::start(default_scenario());
    let other = FakePve::start(Scenario::empty());
    // Trusting another server's certificate: the handshake fails, verification is on.
    let c = Client::new(options(
        &pve,
        Trust::CaFile(other.ca_file().to_path_buf()),
        token(),
    ))
    .unwrap();
    let err = c.version().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Transport {
                kind: TransportKind::Tls,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.category(), Category::ConfigurationError);
    assert!(
        err.to_string().contains("ca_file"),
        "the message says what to fix: {err}"
    );

    // The system roots do not know a self-signed PVE certificate either.
    let c = Client::new(options(&pve, Trust::SystemRoots, token())).unwrap();
    assert!(c.version().await.is_err());
}

#[tokio::test]
async fn a_pinned_fingerprint_is_trusted_and_a_wrong_one_is_not() {
    let pve = FakePve::start(default_scenario());
    let der = rustls::pki_types::CertificateDer::from_pem_slice(&pve.ca_pem()).expect("PEM");
    let pin = pve::tls::fingerprint(der.as_ref());
    let c = Client::new(options(&pve, Trust::Fingerprint(pin), token())).unwrap();
    c.version()
        .await
        .expect("the pinned certificate is accepted");

    let mut wrong = pin;
    wrong[0] ^= 0xff;
    let c = Client::new(options(&pve, Trust::Fingerprint(wrong), token())).unwrap();
    let err = c.version().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Transport {
                kind: TransportKind::Tls,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn ticket_login_is_the_fallback_and_renews_itself() {
    let mut pve = FakePve::start(default_scenario());
    let opts = options(
        &pve,
        Trust::CaFile(pve.ca_file().to_path_buf()),
        Credentials::Password {
            user: "root@pam".into(),
            password: Secret::new("secret"),
        },
    );
    let c = Client::new(opts).unwrap();
    c.version().await.unwrap();
    // A write needs the CSRF token as well as the cookie.
    clone_template_as(&c, 220).await;
    // Tickets revoked (expired): the next call logs in again by itself.
    pve.revoke_tickets();
    c.vm_config("pve1", proxsync::guest::GuestKind::Qemu, 220)
        .await
        .expect("re-login after 401");
    let logins = pve
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/access/ticket"))
        .count();
    assert_eq!(logins, 2);
}

async fn clone_template_as(c: &Client, vmid: u32) {
    let upid = c
        .clone_vm(
            "pve1",
            TEMPLATE_VMID,
            &CloneRequest {
                newid: vmid,
                name: format!("vm-{vmid}"),
                description: String::new(),
                full: false,
                storage: None,
                target: None,
                pool: None,
            },
        )
        .await
        .unwrap();
    wait_ok(c, &upid).await;
}
