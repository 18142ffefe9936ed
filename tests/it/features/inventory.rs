//! `proxsync inventory` after a real cycle against fakepve: the status files the run wrote, as
//! the Ansible inventory a playbook reads (`--list`, the default; `--host`; `--yaml`), through a
//! wrapper script as `ansible-playbook -i proxsync-inventory.sh` runs it. fakepve reports the
//! guest agent as not running, so no host has an address here: `ansible_host` is left out (the
//! unit tests of `shell::inventory` choose among addresses).

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::engine::{Workspace, text};
use common::{FakePve, default_scenario};
use serde_json::{Value, json};

fn spec(name: &str, node: &str, labels: &str, tags: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\n{labels}spec:\n  \
         forProvider:\n    site: lab\n    node: {node}\n    image: \"9000\"\n    cpu: 2\n    \
         memory: 2Gi\n    disk: 8Gi\n{tags}"
    )
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

#[test]
fn the_inventory_holds_the_specs_vms_grouped_by_site_node_tag_and_label() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        (
            "web.yaml",
            spec(
                "web-01",
                "pve1",
                "  labels:\n    role: web\n    tenant-id: customer-123\n",
                "    tags: [web, frontend]\n",
            ),
        ),
        ("db.yaml", spec("db-01", "pve2", "", "")),
    ]);
    let (_, out) = ws.run_once();
    assert!(ws.path("status/web-01.yaml").exists(), "{out}");

    let doc = json_of(&ws.proxsync(&["inventory"]));
    assert_eq!(
        doc["all"],
        json!({"children": [
            "label_role_web",
            "label_tenant_id_customer_123",
            "node_pve1",
            "node_pve2",
            "site_lab",
            "tag_frontend",
            "tag_tenant_customer_123",
            "tag_web",
        ]}),
        "{doc:#}"
    );
    assert_eq!(doc["site_lab"], json!({"hosts": ["db-01", "web-01"]}));
    assert_eq!(doc["node_pve2"], json!({"hosts": ["db-01"]}));
    for g in [
        "node_pve1",
        "tag_web",
        "tag_frontend",
        "tag_tenant_customer_123",
        "label_role_web",
        "label_tenant_id_customer_123",
    ] {
        assert_eq!(doc[g], json!({"hosts": ["web-01"]}), "{g}: {doc:#}");
    }

    let web = &doc["_meta"]["hostvars"]["web-01"];
    let status = ws.status("web-01");
    assert_eq!(web["proxsync_site"], "lab");
    assert_eq!(web["proxsync_node"], "pve1");
    assert_eq!(web["proxsync_vmid"], status["vmId"], "{web:#}");
    assert!(web["proxsync_vmid"].as_u64().is_some(), "{web:#}");
    assert_eq!(web["proxsync_vm_name"], "web-01");
    assert_eq!(web["proxsync_power_state"], status["state"]);
    assert_eq!(
        web["proxsync_ready"],
        json!(ws.condition("web-01", "Ready").0 == "True")
    );
    assert_eq!(
        web["proxsync_tags"],
        json!(["frontend", "tenant_customer-123", "web"])
    );
    assert_eq!(
        web["proxsync_labels"],
        json!({"role": "web", "tenant-id": "customer-123"})
    );
    assert_eq!(web["proxsync_addresses"], json!([]));
    assert!(
        web.get("ansible_host").is_none(),
        "no address, none made up: {web:#}"
    );
    assert_eq!(web["proxsync_spec_file"], "web.yaml");
    let db = &doc["_meta"]["hostvars"]["db-01"];
    assert_eq!(db["proxsync_tags"], json!([]));
    assert_eq!(db["proxsync_labels"], json!({}));

    // --list is the default; --host is one host's variables, {} for one it does not know.
    assert_eq!(json_of(&ws.proxsync(&["inventory", "--list"])), doc);
    assert_eq!(
        &json_of(&ws.proxsync(&["inventory", "--host", "web-01"])),
        web
    );
    assert_eq!(
        json_of(&ws.proxsync(&["inventory", "--host", "nope"])),
        json!({})
    );

    // --yaml: Ansible's YAML inventory format, the same hosts and variables.
    let out = ws.proxsync(&["inventory", "--yaml"]);
    assert!(out.status.success(), "{}", text(&out));
    let yaml: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(&yaml["all"]["hosts"]["web-01"], web);
    assert_eq!(
        yaml["all"]["children"]["site_lab"],
        json!({"hosts": {"db-01": {}, "web-01": {}}})
    );

    // The wrapper script of the README, as ansible-playbook -i proxsync-inventory.sh runs it.
    let script = ws.path("proxsync-inventory.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec {} inventory --config {} \"$@\"\n",
            env!("CARGO_BIN_EXE_proxsync"),
            ws.config().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(&script)
            .args(args)
            .env("PROXSYNC_LOG", "warn")
            .output()
            .unwrap()
    };
    assert_eq!(json_of(&run(&["--list"])), doc);
    assert_eq!(&json_of(&run(&["--host", "db-01"])), db);
}

#[test]
fn without_status_files_the_inventory_says_so_and_fails() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let out = ws.proxsync(&["inventory"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not exist"),
        "{}",
        text(&out)
    );
    assert!(!ws.path("status").exists(), "never created");
}
