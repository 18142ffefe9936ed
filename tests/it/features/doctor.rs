//! `proxsync doctor` against a healthy fakepve (passes) and against broken ones (names each
//! problem, exits 1).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{FakePve, Scenario, TOKEN_ID, TOKEN_SECRET, default_scenario};

fn site_block(name: &str, endpoint: &str, ca_file: &Path, secret_file: &Path) -> String {
    format!(
        "[[site]]\nname = \"{name}\"\nendpoint = \"{endpoint}\"\ntoken_id = \"{TOKEN_ID}\"\n\
         token_secret_file = \"{}\"\nca_file = \"{}\"\nrequest_timeout = \"10s\"\nconnect_timeout = \"3s\"\n\n",
        secret_file.display(),
        ca_file.display()
    )
}

fn write_config(dir: &Path, sites: &str) -> std::path::PathBuf {
    let path = dir.join("proxsync.toml");
    let text = format!(
        "state_dir = \"{}\"\n\n[source]\npath = \"{}\"\n\n{sites}",
        dir.join("state").display(),
        dir.join("repo").display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn spec(name: &str, site: &str, node: &str, image: &str, storage: &str, network: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n    \
         site: {site}\n    node: {node}\n    image: \"{image}\"\n    storage: {storage}\n    network: {network}\n"
    )
}

fn doctor(config: &Path, specs: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_proxsync"))
        .args(["doctor", "--config"])
        .arg(config)
        .arg("--specs")
        .arg(specs)
        .output()
        .expect("run proxsync");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_healthy_site_passes_every_check() {
    let pve = FakePve::start(default_scenario());
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("lab.token");
    std::fs::write(&secret, format!("{TOKEN_SECRET}\n")).unwrap();
    let config = write_config(
        dir.path(),
        &site_block("lab", pve.url(), pve.ca_file(), &secret),
    );
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    for (i, (image, network)) in [
        ("9000", "vmbr0"),
        ("local:import/debian-12-genericcloud-amd64.qcow2", "vmbr1"),
        ("local:iso/debian-12.7.0-amd64-netinst.iso", "vmbr0"),
        ("debian-12-template", "vmbr0"),
    ]
    .iter()
    .enumerate()
    {
        let text = spec(
            &format!("vm-{i}"),
            "lab",
            "pve1",
            image,
            "local-lvm",
            network,
        );
        std::fs::write(specs.join(format!("vm-{i}.yaml")), text).unwrap();
    }

    let (ok, out) = doctor(&config, &specs);
    assert!(ok, "doctor should pass:\n{out}");
    assert!(!out.contains("FAIL"), "{out}");
    for expected in [
        "ok   config",
        "ok   lab dns",
        "ok   lab tcp",
        "ok   lab tls: certificate verified",
        "ok   lab auth",
        "ok   lab version",
        "ok   lab privileges",
        "ok   lab quorum",
        "ok   lab node pve1: online",
        "ok   lab storage pve1/local-lvm",
        "ok   lab bridge pve1/vmbr1",
        "ok   lab image of vm-0: template 9000",
        "ok   lab image of vm-1: local:import/debian-12-genericcloud-amd64.qcow2 exists",
        "ok   lab image of vm-3: template debian-12-template is VMID 9000",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}

#[test]
fn a_broken_setup_names_each_problem() {
    // A cluster with a node down, a token without the privileges, and specs naming things
    // that do not exist.
    let mut broken = Scenario::default()
        .grant(TOKEN_ID, "/", &["Sys.Audit", "VM.Audit", "Datastore.Audit"])
        .start();
    broken.set_node_offline("pve2", true);
    // A second fake whose certificate the config does not trust, and one whose token is wrong.
    let untrusted = FakePve::start(default_scenario());
    let wrong_token = FakePve::start(default_scenario());

    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("good.token");
    std::fs::write(&secret, TOKEN_SECRET).unwrap();
    let bad_secret = dir.path().join("bad.token");
    std::fs::write(&bad_secret, "00000000-0000-0000-0000-000000000000").unwrap();
    // A port nothing listens on: bind one, note it, close it.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let sites = [
        site_block("broken", broken.url(), broken.ca_file(), &secret),
        // Trusts the broken fake's certificate, talks to another fake: untrusted.
        site_block("badtls", untrusted.url(), broken.ca_file(), &secret),
        site_block(
            "badtoken",
            wrong_token.url(),
            wrong_token.ca_file(),
            &bad_secret,
        ),
        site_block(
            "down",
            &format!("https://127.0.0.1:{closed}"),
            broken.ca_file(),
            &secret,
        ),
    ]
    .concat();
    let config = write_config(dir.path(), &sites);
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    let files = [
        spec(
            "no-template",
            "broken",
            "pve1",
            "9999",
            "local-lvm",
            "vmbr0",
        ),
        spec("no-bridge", "broken", "pve1", "9000", "local-lvm", "vmbr9"),
        spec("no-storage", "broken", "pve1", "9000", "fast-ssd", "vmbr0"),
        spec("wrong-content", "broken", "pve1", "9000", "local", "vmbr0"),
        spec(
            "no-iso",
            "broken",
            "pve1",
            "local:iso/missing.iso",
            "local-lvm",
            "vmbr0",
        ),
        spec(
            "on-offline-node",
            "broken",
            "pve2",
            "9000",
            "local-lvm",
            "vmbr0",
        ),
        spec(
            "no-such-site",
            "elsewhere",
            "pve1",
            "9000",
            "local-lvm",
            "vmbr0",
        ),
        spec("seeded", "broken", "pve1", "9000", "local-lvm", "vmbr0")
            + "    userData: |\n      #cloud-config\n      packages: [nginx]\n",
    ];
    for (i, text) in files.iter().enumerate() {
        std::fs::write(specs.join(format!("{i}.yaml")), text).unwrap();
    }

    let (ok, out) = doctor(&config, &specs);
    assert!(!ok, "doctor must fail:\n{out}");
    for expected in [
        "FAIL broken privileges: token proxsync@pve!gitops lacks VM.Allocate on /vms",
        "pveum role add",
        // userData means seed images to upload and remove.
        "Datastore.AllocateTemplate on /storage",
        "FAIL broken node pve2: offline",
        "FAIL broken image of no-template: no template with VMID 9999",
        "FAIL broken bridge pve1/vmbr9: no such bridge",
        "FAIL broken storage pve1/fast-ssd: no such storage",
        "FAIL broken storage pve1/local: holds content",
        "FAIL broken image of no-iso: local:iso/missing.iso not found",
        "FAIL spec no-such-site",
        "FAIL badtls tls",
        "ca_file",
        "FAIL badtoken auth: token proxsync@pve!gitops refused",
        "FAIL down tcp: cannot connect",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert!(!out.contains(TOKEN_SECRET), "no secret in the report");
    assert!(!out.contains("00000000-0000"), "no secret in the report");
}

#[test]
fn lost_quorum_fails() {
    let mut pve = FakePve::start(default_scenario());
    pve.lose_quorum();
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("lab.token");
    std::fs::write(&secret, TOKEN_SECRET).unwrap();
    let config = write_config(
        dir.path(),
        &site_block("lab", pve.url(), pve.ca_file(), &secret),
    );
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    let (ok, out) = doctor(&config, &specs);
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL lab quorum: the cluster has no quorum"),
        "{out}"
    );
    assert!(out.contains("pvecm status"), "{out}");
}

/// A site with one spec file `vm.yaml` (image `image`); doctor's output.
fn doctor_one(pve: &FakePve, image: &str) -> (bool, String) {
    doctor_one_with(pve, image, "")
}

/// As [`doctor_one`], with `extra` lines appended to the spec's `forProvider`.
fn doctor_one_with(pve: &FakePve, image: &str, extra: &str) -> (bool, String) {
    doctor_spec_file(
        pve,
        &(spec("vm", "lab", "pve1", image, "local-lvm", "vmbr0") + extra),
    )
}

/// `doctor` on site `lab` (pve) with one spec file holding `text`.
fn doctor_spec_file(pve: &FakePve, text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("lab.token");
    std::fs::write(&secret, TOKEN_SECRET).unwrap();
    let config = write_config(
        dir.path(),
        &site_block("lab", pve.url(), pve.ca_file(), &secret),
    );
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    std::fs::write(specs.join("vm.yaml"), text).unwrap();
    doctor(&config, &specs)
}

#[test]
fn import_content_needs_pve_8_3() {
    // qemu-server 8.2.7 / pve-storage 8.2.8 (PVE 8.3) brought `import` content to import-from:
    // an 8.2 cluster cannot import local:import/X.qcow2.
    let pve = Scenario::default().set("version", "8.2.4".into()).start();
    let (ok, out) = doctor_one(&pve, "local:import/debian-12-genericcloud-amd64.qcow2");
    assert!(!ok, "{out}");
    assert!(out.contains("FAIL lab version: Proxmox VE 8.2.4"), "{out}");
    assert!(out.contains("Proxmox VE 8.3 or later"), "{out}");

    let pve = Scenario::default().set("version", "8.3.2".into()).start();
    let (ok, out) = doctor_one(&pve, "local:import/debian-12-genericcloud-amd64.qcow2");
    assert!(ok, "{out}");
    assert!(out.contains("ok   lab version: Proxmox VE 8.3.2"), "{out}");
    assert!(
        out.contains("uploads into import content no (since 8.4)"),
        "{out}"
    );
}

#[test]
fn an_import_volume_pve_does_not_take_is_refused() {
    // pve-storage's import content takes .ova .ovf .qcow2 .raw .vmdk only; a `.img` found by
    // its stem is refused, saying what would be valid.
    let pve = Scenario::default()
        .file("local", "noble.img", 1024, "import")
        .start();
    let (ok, out) = doctor_one(&pve, "noble");
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL lab image of vm: local:import/noble.img: Proxmox VE's import content takes only .ova, .ovf, .qcow2, .raw, .vmdk"),
        "{out}"
    );
}

/// Everything proxsync needs on a PVE 8 or 9 cluster but the privileges of `/`, granted to
/// the token on the paths the README names.
fn grants_but_root(scenario: Scenario, agent: &str) -> Scenario {
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
                agent,
            ],
        )
        .grant(
            TOKEN_ID,
            "/storage",
            &["Datastore.AllocateSpace", "Datastore.Audit"],
        )
        .grant(TOKEN_ID, "/sdn/zones", &["SDN.Use"])
}

/// A read-only token, as a CI job's plan uses: doctor says it is enough for `proxsync plan`
/// and not for the daemon.
#[test]
fn a_read_only_token_is_enough_for_plan_and_doctor_says_so() {
    let pve = Scenario::default()
        .grant(TOKEN_ID, "/vms", &["VM.Audit"])
        .grant(TOKEN_ID, "/storage", &["Datastore.Audit"])
        .grant(TOKEN_ID, "/", &["Sys.Audit"])
        .start();
    let (ok, out) = doctor_one(&pve, "9000");
    assert!(!ok, "{out}");
    assert!(
        out.contains(
            "ok   lab plan privileges: proxsync plan reads with VM.Audit on /vms, \
             Datastore.Audit on /storage and Sys.Audit on / (the role PVEAuditor): token \
             proxsync@pve!gitops holds them"
        ),
        "{out}"
    );
    assert!(
        out.contains("FAIL lab privileges: token proxsync@pve!gitops lacks VM.Allocate on /vms"),
        "{out}"
    );
}

#[test]
fn cluster_status_needs_sys_audit_on_root_not_nodes() {
    // pve-manager get_status: `check => ['perm', '/', ['Sys.Audit']]`. A grant on /nodes
    // passed doctor, and then every cycle got a 403.
    let pve = grants_but_root(Scenario::default(), "VM.GuestAgent.Audit")
        .grant(TOKEN_ID, "/nodes", &["Sys.Audit"])
        .start();
    let (ok, out) = doctor_one(&pve, "9000");
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL lab privileges: token proxsync@pve!gitops lacks Sys.Audit on /"),
        "{out}"
    );
    assert!(
        out.contains(
            "FAIL lab plan privileges: proxsync plan reads with VM.Audit on /vms, \
             Datastore.Audit on /storage and Sys.Audit on / (the role PVEAuditor): token \
             proxsync@pve!gitops lacks Sys.Audit on /\n"
        ),
        "{out}"
    );

    // With Sys.Audit on / (it propagates to /nodes) the privileges are complete.
    let pve = grants_but_root(Scenario::default(), "VM.GuestAgent.Audit")
        .grant(TOKEN_ID, "/", &["Sys.Audit"])
        .start();
    let (_, out) = doctor_one(&pve, "9000");
    assert!(out.contains("ok   lab privileges"), "{out}");
    assert!(out.contains("ok   lab quorum"), "{out}");
}

#[test]
fn guest_agent_privileges_follow_the_version() {
    // 8.x: VM.Monitor; 9.x: VM.GuestAgent.Audit or .Unrestricted (VM.Monitor dropped in
    // pve-access-control 9.0.2).
    let pve = grants_but_root(
        Scenario::default().set("version", "8.4.1".into()),
        "VM.GuestAgent.Audit",
    )
    .grant(TOKEN_ID, "/", &["Sys.Audit", "Sys.Modify"])
    .start();
    let (ok, out) = doctor_one(&pve, "9000");
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL lab privileges: token proxsync@pve!gitops lacks VM.Monitor on /vms"),
        "{out}"
    );

    let pve = grants_but_root(
        Scenario::default().set("version", "9.1.2".into()),
        "VM.Monitor",
    )
    .grant(TOKEN_ID, "/", &["Sys.Audit", "Sys.Modify"])
    .start();
    let (ok, out) = doctor_one(&pve, "9000");
    assert!(!ok, "{out}");
    assert!(
        out.contains("lacks VM.GuestAgent.Audit or VM.GuestAgent.Unrestricted on /vms"),
        "{out}"
    );

    let pve = grants_but_root(
        Scenario::default().set("version", "9.1.2".into()),
        "VM.GuestAgent.Unrestricted",
    )
    .grant(TOKEN_ID, "/", &["Sys.Audit", "Sys.Modify"])
    .start();
    let (ok, out) = doctor_one(&pve, "9000");
    assert!(ok, "{out}");
    assert!(out.contains("ok   lab privileges"), "{out}");
}

#[test]
fn tags_need_sys_modify_unless_user_tag_access_is_free() {
    // Without Sys.Modify on /, PVE lets the token set a tag only as user-tag-access allows.
    let restricted = grants_but_root(Scenario::default(), "VM.GuestAgent.Audit")
        .grant(TOKEN_ID, "/", &["Sys.Audit"])
        .set(
            "datacenter",
            serde_json::json!({"user-tag-access": {"user-allow": "list", "user-allow-list": ["web"]}}),
        )
        .start();
    let (ok, out) = doctor_one(&restricted, "9000");
    assert!(ok, "a warning, not a failure:\n{out}");
    assert!(
        out.contains("warn lab tags: the token lacks Sys.Modify on /, and the datacenter option user-tag-access is list"),
        "{out}"
    );
    assert!(out.contains("proxsync."), "names the tag:\n{out}");
    assert!(out.contains("user-allow=free"), "{out}");

    // `free` (PVE's default) lets anyone set tags that are not registered.
    let free = grants_but_root(Scenario::default(), "VM.GuestAgent.Audit")
        .grant(TOKEN_ID, "/", &["Sys.Audit"])
        .start();
    let (ok, out) = doctor_one(&free, "9000");
    assert!(ok, "{out}");
    assert!(
        out.contains("ok   lab tags: user-tag-access is free"),
        "{out}"
    );
}

#[test]
fn without_specs_doctor_checks_the_configured_sources_specs() {
    // As a new user runs it: a config whose git source holds a spec naming a bridge that does
    // not exist, and `proxsync doctor` with no --specs (as `plan` and `run --once` read the
    // configured source by default).
    let pve = FakePve::start(default_scenario());
    let ws = common::engine::Workspace::new(&pve);
    ws.commit_specs(&[(
        "web.yaml",
        common::engine::spec("web", "pve1", "9000", "    network: vmbr9\n"),
    )]);
    let out = ws.proxsync(&["doctor"]);
    let text = common::engine::text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("ok   source: 1 spec(s) at commit"), "{text}");
    assert!(
        text.contains("FAIL lab bridge pve1/vmbr9: no such bridge"),
        "{text}"
    );
    assert!(!text.contains("no specs for this site"), "{text}");
}

#[test]
fn the_marker_key_is_checked_and_never_shown() {
    use std::os::unix::fs::PermissionsExt;
    let pve = FakePve::start(default_scenario());
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("lab.token");
    std::fs::write(&secret, TOKEN_SECRET).unwrap();
    let config = write_config(
        dir.path(),
        &site_block("lab", pve.url(), pve.ca_file(), &secret),
    );
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    let key = dir.path().join("state").join("marker.key");

    // Absent: made at the first start; say what losing it means.
    let (ok, out) = doctor(&config, &specs);
    assert!(ok, "{out}");
    assert!(out.contains("warn marker key:"), "{out}");
    assert!(out.contains("will be made at the first start"), "{out}");
    assert!(out.contains("proxsync adopt"), "{out}");

    // Present and private.
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    let hex = "0123456789abcdef".repeat(4);
    std::fs::write(&key, format!("{hex}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (ok, out) = doctor(&config, &specs);
    assert!(ok, "{out}");
    assert!(out.contains("ok   marker key:"), "{out}");
    assert!(!out.contains(&hex), "never its content:\n{out}");

    // Readable by others.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (_, out) = doctor(&config, &specs);
    assert!(
        out.contains("warn marker key:") && out.contains("mode 0644"),
        "{out}"
    );
    assert!(out.contains("chmod 600"), "{out}");
    assert!(!out.contains(&hex), "never its content:\n{out}");

    // Not a key: a failure, without echoing what is there.
    std::fs::write(&key, "not-a-key-but-a-secret-looking-thing\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (ok, out) = doctor(&config, &specs);
    assert!(!ok, "{out}");
    assert!(out.contains("FAIL marker key:"), "{out}");
    assert!(!out.contains("secret-looking"), "never its content:\n{out}");
}

#[test]
fn specs_with_ha_need_sys_console_on_root() {
    // pve-ha-manager API2/HA/Resources.pm: create, update and delete check Sys.Console on `/`.
    let pve = grants_but_root(Scenario::default(), "VM.GuestAgent.Audit")
        .grant(TOKEN_ID, "/", &["Sys.Audit", "Sys.Modify"])
        .start();
    let (_, out) = doctor_one(&pve, "9000");
    assert!(out.contains("ok   lab privileges"), "without ha: {out}");
    let (ok, out) = doctor_one_with(&pve, "9000", "    ha: {}\n");
    assert!(!ok, "{out}");
    assert!(out.contains("lacks Sys.Console on /"), "{out}");
}

/// A spec made from a `ProxmoxImage`: PVE's `download-url` wants Datastore.AllocateTemplate
/// on the image's storage and Sys.AccessNetwork on each node it downloads to (or Sys.Audit
/// and Sys.Modify on `/`), as its schema's `permissions` say in 8.4 and 9.1.
#[test]
fn an_image_needs_allocate_template_and_network_access() {
    let image = format!(
        "---\napiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {{name: noble-cloud}}\n\
         spec:\n  forProvider:\n    site: lab\n    url: https://images.example/noble.qcow2\n    \
         checksum: sha256:{}\n",
        "ab".repeat(32)
    );
    let base = || {
        grants_but_root(Scenario::default(), "VM.GuestAgent.Audit").grant(
            TOKEN_ID,
            "/",
            &["Sys.Audit"],
        )
    };
    let with_image = |pve: &FakePve| {
        let vm = spec("vm", "lab", "pve1", "IMAGE", "local-lvm", "vmbr0")
            .replace("\"IMAGE\"", "{image: noble-cloud}");
        doctor_spec_file(pve, &(vm + &image))
    };
    let (ok, out) = with_image(&base().start());
    assert!(!ok, "{out}");
    assert!(
        out.contains(
            "Datastore.AllocateTemplate on /storage/local (ProxmoxImage noble-cloud: PVE \
             downloads it)"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "Sys.AccessNetwork on /nodes/pve1, or Sys.Audit and Sys.Modify on / (ProxmoxImage \
             noble-cloud: PVE downloads it on pve1)"
        ),
        "{out}"
    );
    // Granted on the node (or Sys.Modify on /), the image asks for nothing more.
    assert!(
        out.contains("Datastore.Allocate on /storage/local (ProxmoxImage noble-cloud: its old versions are deleted)"),
        "{out}"
    );
    let pve = base()
        .grant(
            TOKEN_ID,
            "/storage/local",
            &["Datastore.AllocateTemplate", "Datastore.Allocate"],
        )
        .grant(TOKEN_ID, "/nodes/pve1", &["Sys.AccessNetwork"])
        .start();
    let (_, out) = with_image(&pve);
    assert!(out.contains("ok   lab privileges"), "{out}");
}

/// A spec whose `changePolicy` takes snapshots: doctor says whether its disks' storage can
/// (LVM-thin: yes) and warns where it cannot (thick LVM: its changes would be held), naming
/// `IfPossible`; with `IfPossible` it only says so.
#[test]
fn doctor_says_where_a_change_policy_s_snapshot_cannot_be_taken() {
    let pve = FakePve::start(
        Scenario::default()
            .storage(
                "thick",
                serde_json::json!({"type": "lvm", "vgname": "pve", "content": "images,rootdir"}),
            )
            .into_value(),
    );
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("lab.token");
    std::fs::write(&secret, format!("{TOKEN_SECRET}\n")).unwrap();
    let config = write_config(
        dir.path(),
        &site_block("lab", pve.url(), pve.ca_file(), &secret),
    );
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    let guarded = |name: &str, storage: &str, when: &str| {
        spec(name, "lab", "pve1", "9000", storage, "vmbr0")
            + &format!(
                "    health: {{tcp: {{port: 22}}}}\n    changePolicy: {{snapshot: {when}}}\n"
            )
    };
    std::fs::write(
        specs.join("a.yaml"),
        guarded("thin-01", "local-lvm", "BeforeRestart"),
    )
    .unwrap();
    std::fs::write(
        specs.join("b.yaml"),
        guarded("thick-01", "thick", "BeforeRestart"),
    )
    .unwrap();
    std::fs::write(
        specs.join("c.yaml"),
        guarded("thick-02", "thick", "IfPossible"),
    )
    .unwrap();
    let (_, out) = doctor(&config, &specs);
    assert!(
        out.contains("ok   lab spec thin-01 snapshots: its storages on pve1 can snapshot"),
        "{out}"
    );
    let thick = (out.lines())
        .find(|l| l.contains("lab spec thick-01 snapshots"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        thick.starts_with("warn") && thick.contains("LVM thick cannot snapshot"),
        "{thick}"
    );
    assert!(out.contains("changePolicy.snapshot: IfPossible"), "{out}");
    let if_possible = (out.lines())
        .find(|l| l.contains("lab spec thick-02 snapshots"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        if_possible.starts_with("ok") && if_possible.contains("without one (IfPossible)"),
        "{if_possible}"
    );
}
