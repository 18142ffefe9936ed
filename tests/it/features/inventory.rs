//! `proxsync inventory` after a real cycle against fakepve: the status files the run wrote, as
//! the Ansible inventory a playbook reads (`--list`, the default; `--host`; `--yaml`), through a
//! wrapper script as `ansible-playbook -i proxsync-inventory.sh` runs it. fakepve reports the
//! guest agent as not running unless told otherwise, so the first test's hosts have no
//! address: `ansible_host` is left out (the unit tests of `shell::inventory` choose among
//! addresses). The last runs a real ansible-core (the test venv's, `scripts/setup-fakepve`)
//! over an inventory holding a committer's and a guest's hostile strings.

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::engine::{Workspace, text};
use common::{FakePve, default_scenario, venv_program};
use serde_json::{Value, json};

/// `v` as Ansible reads it: each `{"__ansible_unsafe": s}` back to `s`; a string not marked so
/// fails the test.
fn read_marked(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.len() == 1 && m.contains_key("__ansible_unsafe") => {
            m["__ansible_unsafe"].clone()
        }
        Value::String(s) => panic!("{s:?} is not marked unsafe"),
        Value::Array(a) => Value::Array(a.iter().map(read_marked).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), read_marked(v))).collect())
        }
        other => other.clone(),
    }
}

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
    let marked = web.clone();
    let web = &read_marked(web);
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
    let db = &read_marked(db);
    assert_eq!(db["proxsync_labels"], json!({}));

    // --list is the default; --host is one host's variables, {} for one it does not know.
    assert_eq!(json_of(&ws.proxsync(&["inventory", "--list"])), doc);
    assert_eq!(
        json_of(&ws.proxsync(&["inventory", "--host", "web-01"])),
        marked
    );
    assert_eq!(
        json_of(&ws.proxsync(&["inventory", "--host", "nope"])),
        json!({})
    );

    // --yaml: Ansible's YAML inventory format, the same hosts and variables.
    let out = ws.proxsync(&["inventory", "--yaml"]);
    assert!(out.status.success(), "{}", text(&out));
    // Ansible reads `!unsafe "x"` as the string x; serde_saphyr reads the tag's scalar.
    let yaml = String::from_utf8_lossy(&out.stdout).replace("!unsafe ", "");
    let yaml: Value = serde_saphyr::from_str(&yaml).unwrap();
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
    assert_eq!(&read_marked(&json_of(&run(&["--host", "db-01"]))), db);
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

/// Issue 41, item 4: Ansible evaluates Jinja in every inventory string not marked unsafe. A
/// committer names a spec file and a label so, and root in the guest makes its agent report
/// such an address; a real ansible-core runs a playbook that prints them, from the dynamic
/// inventory script and from `--yaml`'s static copy. No command runs (no MARK file appears),
/// the committer's strings come out as text, and the guest's is no address, so it is dropped.
#[test]
fn hostile_strings_from_a_spec_or_a_guest_reach_ansible_as_text() {
    let playbook = venv_program("ansible-playbook");
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let file = "vms/{{ lookup('pipe','touch MARK') }}.yaml";
    let labels = "  labels:\n    role: \"{{ lookup('pipe','touch MARK3') }}\"\n    \
                  \"{{ lookup('pipe','touch MARK4') }}\": x\n";
    ws.commit_specs(&[(file, spec("web-01", "pve1", labels, ""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ws.status("web-01")["vmId"].as_u64().expect("created") as u32;

    // Root in the guest: its agent reports a template beside its real address. A change to the
    // spec makes the next cycle converge the VM, which reads the agent.
    pve.set_vm(
        vmid,
        json!({"agent": {"interfaces": [
            {"name": "lo", "ip-addresses": [{"ip-address": "127.0.0.1", "prefix": 8}]},
            {"name": "{{ lookup('pipe','touch MARK5') }}", "hardware-address": "bc:24:11:00:00:01",
             "ip-addresses": [
                {"ip-address": "{{ lookup('pipe','touch MARK2') }}", "ip-address-type": "ipv4"},
                {"ip-address": "192.0.2.10", "ip-address-type": "ipv4", "prefix": 24}]}]}}),
    );
    ws.commit_specs(&[(file, spec("web-01", "pve1", labels, "    tags: [web]\n"))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let status = ws.status("web-01");
    assert_eq!(status["ipAddresses"], json!(["192.0.2.10"]), "{status:#}");
    assert_eq!(status["specFile"], file, "{status:#}");

    let inventory = ws.proxsync(&["inventory"]);
    let doc = json_of(&inventory);
    let web = read_marked(&doc["_meta"]["hostvars"]["web-01"]);
    assert_eq!(web["ansible_host"], "192.0.2.10", "{doc:#}");
    assert_eq!(web["proxsync_spec_file"], file);
    assert_eq!(
        web["proxsync_labels"],
        json!({"role": "{{ lookup('pipe','touch MARK3') }}"})
    );
    assert!(
        String::from_utf8_lossy(&inventory.stderr).contains("left out of proxsync_labels"),
        "{}",
        text(&inventory)
    );

    // A playbook as anyone would write one, run where a relative `touch` would land.
    let play = ws.path("play");
    std::fs::create_dir(&play).unwrap();
    std::fs::write(
        play.join("site.yml"),
        "- hosts: all\n  gather_facts: false\n  connection: local\n  tasks:\n\
         \x20   - debug: {msg: \"{{ proxsync_spec_file }}\"}\n\
         \x20   - debug: {msg: \"{{ proxsync_labels.role }}\"}\n\
         \x20   - debug: {msg: \"{{ proxsync_addresses | join(',') }} {{ ansible_host }}\"}\n\
         \x20   - debug: {var: proxsync_labels}\n\
         \x20   - debug: {msg: \"{{ item.key }}={{ item.value }}\"}\n\
         \x20     loop: \"{{ proxsync_labels | dict2items }}\"\n",
    )
    .unwrap();
    let script = play.join("proxsync-inventory.sh");
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
    let yaml = ws.proxsync(&["inventory", "--yaml"]);
    assert!(yaml.status.success(), "{}", text(&yaml));
    std::fs::write(play.join("inventory.yml"), &yaml.stdout).unwrap();

    let printed = format!("{file}\n{{{{ lookup('pipe','touch MARK3') }}}}\n192.0.2.10 192.0.2.10");
    for inventory in ["proxsync-inventory.sh", "inventory.yml"] {
        let out = std::process::Command::new(&playbook)
            .args(["-i", inventory, "site.yml"])
            .current_dir(&play)
            .env("HOME", &play)
            .env("ANSIBLE_HOME", play.join(".ansible"))
            .env("ANSIBLE_LOCAL_TEMP", play.join(".ansible/tmp"))
            .env("ANSIBLE_CALLBACK_RESULT_FORMAT", "json")
            .env("ANSIBLE_INVENTORY_UNPARSED_FAILED", "true")
            .env("ANSIBLE_NOCOLOR", "1")
            .env("LC_ALL", "C.UTF-8")
            .env("PROXSYNC_LOG", "warn")
            .output()
            .unwrap();
        assert!(out.status.success(), "{inventory}: {}", text(&out));
        let results = results_of(&String::from_utf8_lossy(&out.stdout));
        let msgs: Vec<&str> = results[..3]
            .iter()
            .map(|r| r["msg"].as_str().unwrap_or("(none)"))
            .collect();
        assert_eq!(msgs.join("\n"), printed, "{inventory}: {}", text(&out));
        assert_eq!(
            results[3]["proxsync_labels"],
            json!({"role": "{{ lookup('pipe','touch MARK3') }}"}),
            "{inventory}: {}",
            text(&out)
        );
        assert_eq!(
            results[4]["msg"],
            "role={{ lookup('pipe','touch MARK3') }}",
            "{inventory}: {}",
            text(&out)
        );
        assert_eq!(results.len(), 5, "{inventory}: {}", text(&out));
        let marks: Vec<String> = std::fs::read_dir(&play)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("MARK"))
            .collect();
        assert!(marks.is_empty(), "{inventory}: commands ran: {marks:?}");
    }
}

/// The results the default callback prints for host web-01 (`ok: [web-01] ... => {json}`, in
/// `ANSIBLE_CALLBACK_RESULT_FORMAT=json`), in order.
fn results_of(stdout: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut rest = stdout;
    while let Some(at) = rest.find("ok: [web-01]") {
        rest = &rest[at..];
        let line = rest.lines().next().unwrap_or("");
        let open = line.rfind("=> {").expect("a result") + 3;
        let mut values = serde_json::Deserializer::from_str(&rest[open..]).into_iter::<Value>();
        out.push(values.next().expect("a result").expect("JSON"));
        rest = &rest[open + values.byte_offset()..];
    }
    out
}
