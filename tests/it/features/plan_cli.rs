//! `proxsync plan` as CI gates a merge on it: exit 0 only when the plan is complete and empty,
//! 2 with changes, 1 when anything kept it from being complete (an unreachable site, an invalid
//! spec, a refused commit in `tests/signed_commits.rs`), each reason on stderr; every change
//! field by field (the update the run then sends), `--json`, `plan NAME...`, `--specs`'
//! removals labelled, verdicts in words.

use crate::common;

use assert_cmd::Command;
use common::engine::{Workspace, owned_vms, spec, text};
use common::{FakePve, default_scenario};

/// `proxsync plan <args>` through assert_cmd.
fn plan(ws: &Workspace, args: &[&str]) -> std::process::Output {
    Command::cargo_bin("proxsync")
        .unwrap()
        .arg("plan")
        .args(args)
        .arg("--config")
        .arg(ws.config())
        .env("PROXSYNC_LOG", "warn")
        .output()
        .unwrap()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// Points site `lab` at a port nothing listens on.
fn break_endpoint(ws: &Workspace, pve: &FakePve) {
    let config = std::fs::read_to_string(ws.config()).unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let config = config.replace(pve.url(), &format!("https://127.0.0.1:{port}"));
    std::fs::write(ws.config(), config).unwrap();
}

#[test]
fn an_unreachable_site_is_exit_1_not_no_changes() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    assert!(ws.run_once().0);
    assert_eq!(owned_vms(&mut pve).len(), 1);
    assert_eq!(plan(&ws, &[]).status.code(), Some(0));

    break_endpoint(&ws, &pve);
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("error: site lab could not be read:"),
        "{}",
        text(&out)
    );
    let json = plan(&ws, &["--json"]);
    assert_eq!(json.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(
        doc["errors"][0]
            .as_str()
            .unwrap()
            .starts_with("site lab could not be read"),
        "{doc}"
    );
}

#[test]
fn an_invalid_spec_is_exit_1_with_its_reason() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "    cpus: 8\n")),
    ]);
    assert!(!ws.run_once().0);
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains("b.yaml:"), "{}", text(&out));
    assert!(
        stderr(&out).contains("error: invalid spec(s): web-02"),
        "{}",
        text(&out)
    );
    // Naming only the valid spec plans it alone: complete, no changes.
    let out = plan(&ws, &["web-01"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn an_update_is_shown_field_by_field_as_the_run_applies_it() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    assert!(ws.run_once().0);
    let (vmid, _) = owned_vms(&mut pve)[0].clone();
    let vmid = vmid as u32;

    // Stopped by hand and shrunk to 1 core and 1 GiB.
    pve.set_vm(vmid, serde_json::json!({"status": "stopped"}));
    let client = pve.client();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(
        client.set_config(
            "pve1",
            proxsync::guest::GuestKind::Qemu,
            vmid,
            &proxsync::pve::VmParams::new()
                .set("cores", 1)
                .set("memory", 1024),
            None,
        ),
    )
    .unwrap();

    pve.clear_requests();
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let line = stdout(&out)
        .lines()
        .find(|l| l.starts_with("~ update  web-01"))
        .unwrap_or_else(|| panic!("no update line: {}", text(&out)))
        .to_string();
    for part in [
        "memory 1024 -> 2048 MiB",
        "cores 1 -> 2",
        "power stopped -> running",
    ] {
        assert!(line.contains(part), "{part:?} missing from {line:?}");
    }
    // A stopped VM takes every change at once.
    assert!(
        !line.contains("at the next start") && !line.contains("needs a restart"),
        "{line}"
    );
    assert!(
        pve.requests().iter().all(|r| r.method == "GET"),
        "plan only reads"
    );

    let json = plan(&ws, &["--json"]);
    assert_eq!(json.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let change = &doc["changes"][0];
    assert_eq!(change["action"], "converge", "{doc}");
    assert_eq!(change["spec"], "web-01");
    let fields = change["fields"].as_array().unwrap();
    let field = |name: &str| {
        fields
            .iter()
            .find(|f| f["field"] == name)
            .unwrap_or_else(|| panic!("no field {name} in {doc}"))
            .clone()
    };
    assert_eq!(field("memory")["old"], "1024");
    assert_eq!(field("memory")["new"], "2048");
    assert_eq!(field("memory")["unit"], "MiB");
    assert_eq!(field("cores")["old"], "1");
    assert_eq!(field("power")["new"], "running");

    // The run then does exactly that.
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vm = pve.vm(vmid);
    assert_eq!(
        vm["config"]["memory"].to_string().trim_matches('"'),
        field("memory")["new"].as_str().unwrap()
    );
    assert_eq!(
        vm["config"]["cores"].to_string().trim_matches('"'),
        field("cores")["new"].as_str().unwrap()
    );
    assert_eq!(vm["status"], "running");
    assert_eq!(plan(&ws, &[]).status.code(), Some(0));
}

/// A running guest keeps some changes for its next start: the plan marks each, says what the
/// spec's `rebootPolicy` does about it, and counts the updates that need a restart.
#[test]
fn an_update_says_what_waits_for_a_restart_and_who_restarts() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    assert!(ws.run_once().0);
    // Running, as made: more memory waits for the next start, a tag applies at once.
    let bigger =
        spec("web-01", "pve1", "9000", "    tags: [new]\n").replace("memory: 2Gi", "memory: 4Gi");
    ws.commit_specs(&[("a.yaml", bigger.clone())]);
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let o = stdout(&out);
    let line = o
        .lines()
        .find(|l| l.starts_with("~ update  web-01"))
        .unwrap_or_else(|| panic!("no update line: {o}"));
    assert!(
        line.contains("memory 2048 -> 4096 MiB (at the next start)"),
        "{line}"
    );
    let tags = line.split(", ").find(|p| p.starts_with("tags ")).unwrap();
    assert!(!tags.contains("next start"), "{line}");
    assert!(
        line.ends_with(
            "; needs a restart: rebootPolicy Never leaves it to you (RebootPending until the VM \
             is restarted)"
        ),
        "{line}"
    );
    assert!(
        o.trim_end()
            .ends_with("1 change(s): 1 to change (1 needs a restart)"),
        "{o}"
    );
    let json = plan(&ws, &["--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let fields = doc["changes"][0]["fields"].as_array().unwrap().clone();
    let field = |name: &str| fields.iter().find(|f| f["field"] == name).unwrap().clone();
    assert_eq!(field("memory")["needsRestart"], true, "{doc}");
    assert_eq!(field("tags").get("needsRestart"), None, "{doc}");

    // With rebootPolicy IfNeeded, proxsync restarts it.
    ws.commit_specs(&[("a.yaml", bigger.clone() + "    rebootPolicy: IfNeeded\n")]);
    let o = stdout(&plan(&ws, &[]));
    let line = o
        .lines()
        .find(|l| l.starts_with("~ update  web-01"))
        .unwrap_or_else(|| panic!("no update line: {o}"));
    assert!(
        line.ends_with("; needs a restart: proxsync restarts the VM (rebootPolicy IfNeeded)"),
        "{line}"
    );

    // With health checks, the plan says what guards the restart.
    ws.commit_specs(&[(
        "a.yaml",
        bigger
            + "    rebootPolicy: IfNeeded\n    health: {agent: true, tcp: {port: 22}, http: {port: \
               8080, path: /healthz}, timeout: 2m}\n",
    )]);
    let o = stdout(&plan(&ws, &[]));
    let line = o
        .lines()
        .find(|l| l.starts_with("~ update  web-01"))
        .unwrap_or_else(|| panic!("no update line: {o}"));
    assert!(
        line.ends_with(
            "(rebootPolicy IfNeeded); then its health checks (agent ping, tcp 22, http GET \
             :8080/healthz) must pass within 120s of its start, or it is Unhealthy"
        ),
        "{line}"
    );

    // With a change policy, the snapshot that guards it and the rollback.
    ws.commit_specs(&[(
        "a.yaml",
        spec("web-01", "pve1", "9000", "").replace("memory: 2Gi", "memory: 4Gi")
            + "    rebootPolicy: IfNeeded\n    health: {tcp: {port: 22}, timeout: 2m}\n    \
               changePolicy: {snapshot: BeforeRestart}\n",
    )]);
    let o = stdout(&plan(&ws, &[]));
    let line = o
        .lines()
        .find(|l| l.starts_with("~ update  web-01"))
        .unwrap_or_else(|| panic!("no update line: {o}"));
    assert!(
        line.ends_with(
            "(rebootPolicy IfNeeded); a snapshot first (changePolicy; held where the storage \
             cannot take one); then its health checks (tcp 22) must pass within 120s of its \
             start, or it is rolled back to the snapshot"
        ),
        "{line}"
    );
}

#[test]
fn naming_specs_plans_them_alone_and_spec_files_label_removals() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[
        ("a.yaml", spec("web-01", "pve1", "9000", "")),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
    ]);
    assert!(ws.run_once().0);
    assert_eq!(owned_vms(&mut pve).len(), 2);
    ws.commit_specs(&[
        (
            "a.yaml",
            spec("web-01", "pve1", "9000", "    tags: [new]\n"),
        ),
        ("b.yaml", spec("web-02", "pve1", "9000", "")),
        ("c.yaml", spec("web-03", "pve1", "9000", "")),
    ]);

    // One spec by name: its update only; nothing about the others, never a removal.
    let out = plan(&ws, &["web-01"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let o = stdout(&out);
    assert!(o.contains("~ update  web-01"), "{o}");
    assert!(o.contains("tags "), "{o}");
    assert!(!o.contains("web-02") && !o.contains("web-03"), "{o}");
    assert!(o.contains("1 change(s)"), "{o}");
    let out = plan(&ws, &["web-02"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // A name that is no spec.
    let out = plan(&ws, &["nosuch"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("no such spec: nosuch"),
        "{}",
        text(&out)
    );
    // Not "no changes" above the error: nothing was planned for a name that is no spec.
    assert!(!stdout(&out).contains("no changes"), "{}", text(&out));

    // --specs: the specs not among the files count as removed, and say so.
    let dir = ws.path("branch");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("a.yaml"),
        spec("web-01", "pve1", "9000", "    tags: [new]\n"),
    )
    .unwrap();
    let out = plan(&ws, &["--specs", dir.to_str().unwrap()]);
    let o = stdout(&out);
    let removal = o
        .lines()
        .find(|l| l.contains("web-02"))
        .unwrap_or_else(|| panic!("{}", text(&out)));
    assert!(removal.starts_with("- delete  web-02"), "{removal}");
    assert!(removal.contains("not among the --specs files"), "{removal}");
    let json = plan(&ws, &["--specs", dir.to_str().unwrap(), "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let removal = doc["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["spec"] == "web-02")
        .unwrap();
    assert_eq!(removal["removal"], "notInSpecFiles", "{doc}");
}

#[test]
fn a_backoff_is_said_in_words() {
    let pve_scenario = default_scenario();
    let mut pve = FakePve::start(pve_scenario);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    pve.fail("POST", "/clone", 400, "storage is on fire");
    assert!(!ws.run_once().0);
    let out = plan(&ws, &[]);
    let o = stdout(&out);
    let line = o
        .lines()
        .find(|l| l.starts_with("! web-01: "))
        .unwrap_or_else(|| panic!("{}", text(&out)));
    assert!(line.starts_with("! web-01: backing off until "), "{line}");
    assert!(line.contains("UTC"), "{line}");
    assert!(line.contains("1st attempt: "), "{line}");
    assert!(line.contains("storage is on fire"), "{line}");
    assert!(!line.contains('{'), "no JSON: {line}");
}

/// The run's pre-flight is the plan's: `ha.group` on a PVE 9 site is refused before anything
/// is sent, so `plan` says so and exits 1 instead of promising a create; after the run, the
/// spec has no VM and `plan` never says "no changes" (exit 2).
#[test]
fn a_create_the_run_would_refuse_fails_the_plan_and_an_unsatisfied_spec_is_never_no_changes() {
    let mut pve = FakePve::start(default_scenario()); // fakepve's version: 9.0.10
    let ws = Workspace::new(&pve);
    let group = "    ha: {group: prod}\n";
    ws.commit_specs(&[("a.yaml", spec("ha-01", "pve1", "9000", group))]);
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout(&out).contains("+ create  ha-01: new VM")
            && stdout(&out).contains("[refused before anything is made: ConfigurationError]"),
        "{}",
        text(&out)
    );
    assert!(
        stderr(&out).contains(
            "error: ha-01: the create would be refused before anything is made: \
             ConfigurationError: spec.forProvider.ha.group \"prod\""
        ) && stderr(&out).contains("ha groups have been migrated to rules"),
        "{}",
        text(&out)
    );

    assert!(!ws.run_once().0);
    assert!(owned_vms(&mut pve).is_empty());
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let o = stdout(&out);
    assert!(o.contains("! ha-01: backing off until "), "{}", text(&out));
    assert!(
        o.ends_with("nothing to send now; 1 spec(s) not satisfied (above)\n")
            && !o.contains("no changes"),
        "{}",
        text(&out)
    );
}

/// A pre-flight read the plan's token cannot make (a read-only token without Sys.Audit) is no
/// refusal of the run's: the create is not marked refused, and the plan is incomplete (exit 1).
#[test]
fn a_preflight_read_the_plan_cannot_make_is_said_as_such() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    pve.fail(
        "GET",
        "/nodes/{node}/network",
        403,
        "Permission check failed (/nodes/pve1, Sys.Audit)",
    );
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains(
            "error: web-01: cannot check the create before it is made: PermissionDenied:"
        ),
        "{}",
        text(&out)
    );
    assert!(!stdout(&out).contains("[refused"), "{}", text(&out));
}

/// `--format markdown` is the plan for a pull request's comment, with the same exit status.
#[test]
fn the_markdown_plan_is_the_text_plan_in_a_diff_block() {
    let pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    let out = plan(&ws, &["--format", "markdown"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(
        stdout(&out),
        "### proxsync plan: 1 change\\(s\\): 1 to create\n\n```diff\n+ create  web-01: new VM on \
         lab/pve1 from template 9000; sets agent=1, cores=2, memory=2048 MiB, name=web-01, \
         net0=\"virtio,bridge=vmbr0\", ostype=l26, scsihw=virtio-scsi-single, sockets=1, \
         disk=8 GiB\n```\n"
    );
}

/// A `FreeMemory` set member is checked on the node the placement gives it, as the run makes
/// it there, not on the stand-in node its index gives it. Here web-01 stands in on pve1 and
/// goes to pve2 (30 GiB free against 6): with pve1 offline, the create on pve2 is no refusal;
/// cloned from template 9000, on pve1's local-lvm, the run refuses the create on pve2 (a clone
/// to another node needs shared storage), and so must the plan.
#[test]
fn a_free_memory_member_is_checked_on_the_node_it_is_placed_on() {
    let mut scenario = default_scenario();
    scenario["node_memory"] = serde_json::json!({"pve2": {"maxmem": 32u64 << 30}});
    let mut pve = FakePve::start(scenario);
    let ws = Workspace::new(&pve);
    let set = |image: &str| {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata:\n  name: web\nspec:\n  \
             replicas: 1\n  namePattern: \"web-{{index:02}}\"\n  placement: {{nodes: [pve1, \
             pve2], strategy: FreeMemory}}\n  template:\n    forProvider:\n      site: lab\n      \
             image: \"{image}\"\n      cpu: 1\n      memory: 1Gi\n      disk: 8Gi\n"
        )
    };
    let create = "+ create  web-01: new VM on lab/pve2";
    let refused = "[refused before anything is made: ";

    let image = "local:import/debian-12-genericcloud-amd64.qcow2";
    ws.commit_specs(&[("web.yaml", set(image))]);
    pve.set_node_offline("pve1", true);
    pve.clear_requests();
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stdout(&out).contains(create), "{}", text(&out));
    assert!(!stdout(&out).contains(refused), "{}", text(&out));

    pve.set_node_offline("pve1", false);
    ws.commit_specs(&[("web.yaml", set("9000"))]);
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with(&format!("{create} from template 9000"))
                && l.contains(&format!("disk=8 GiB {refused}")))
            && stderr(&out).contains("needs shared storage"),
        "{}",
        text(&out)
    );
    let sent: Vec<String> = (pve.requests().into_iter())
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(sent.is_empty(), "the pre-flight only reads: {sent:?}");
    // What the run does with it: refused on pve2, nothing made.
    let (ok, run) = ws.run_once();
    assert!(!ok && run.contains("needs shared storage"), "{run}");
    assert!(owned_vms(&mut pve).is_empty(), "{run}");
}

/// A `ProxmoxImage` whose new version is not on the node yet: `plan` says PVE downloads it
/// first (naming the version found there) and which guests are made from it, the guest's
/// create is no refusal, and `plan` exits 2; after `run --once` the image is there and the
/// plan is empty.
#[test]
fn plan_shows_an_image_download_and_its_version_change() {
    let url = "https://images.example/noble/noble-server-cloudimg-amd64.qcow2";
    let mut scenario = default_scenario();
    scenario["files"].as_array_mut().unwrap().push(
        serde_json::json!({"storage": "local", "name": "noble-cloud-111111111111.qcow2",
                                 "size": 1024, "content": "import"}),
    );
    let mut pve = FakePve::start(scenario);
    let served = pve
        .call("remote_file", serde_json::json!({"url": url, "size": 2048}))
        .unwrap();
    let sum = served["sha256"].as_str().unwrap().to_string();
    let version = &sum[..12];
    let ws = Workspace::new(&pve);
    let image = format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {{name: noble-cloud}}\nspec:\n  \
         forProvider:\n    site: lab\n    url: {url}\n    checksum: sha256:{sum}\n"
    );
    let web = spec("web-01", "pve1", "IMAGE", "").replace("\"IMAGE\"", "{image: noble-cloud}");
    ws.commit_specs(&[("image.yaml", image), ("web.yaml", web)]);
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains(&format!(
            "~ image noble-cloud: 111111111111 -> {version}: PVE downloads \
             local:import/noble-cloud-{version}.qcow2 on pve1 and checks its sha256; new guests \
             made from it: web-01 (a guest that exists keeps its version)"
        )),
        "{shown}"
    );
    assert!(
        shown.contains("(once PVE has downloaded image noble-cloud)"),
        "{shown}"
    );
    assert!(!shown.contains("refused"), "{shown}");
    assert!(
        shown.contains("1 image to download, then 1 change(s): 1 to create"),
        "{shown}"
    );
    let json: serde_json::Value = serde_json::from_slice(&plan(&ws, &["--json"]).stdout).unwrap();
    assert_eq!(json["images"][0]["from"], "111111111111", "{json}");
    assert_eq!(json["images"][0]["guests"][0], "web-01", "{json}");

    assert!(ws.run_once().0);
    assert_eq!(owned_vms(&mut pve).len(), 1);
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!stdout(&out).contains("image"), "{}", text(&out));
}

/// `plan` after a new image version under `imagePolicy: Recreate`: the image line names the
/// guests rebuilt once it is there, and each rebuild of the first wave is a `~ recreate` line
/// (`maxUnavailable: 2`), counted as such; nothing is sent.
#[test]
fn plan_shows_the_rebuilds_of_a_new_image_version() {
    let url = "https://images.example/noble/1/noble-server-cloudimg-amd64.qcow2";
    let mut pve = FakePve::start(default_scenario());
    let image = |pve: &mut FakePve, url: &str| {
        let served = pve
            .call("remote_file", serde_json::json!({"url": url, "size": 2048}))
            .unwrap();
        let sum = served["sha256"].as_str().unwrap().to_string();
        let doc = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {{name: noble-cloud}}\n\
             spec:\n  forProvider:\n    site: lab\n    url: {url}\n    checksum: sha256:{sum}\n"
        );
        (doc, sum[..12].to_string())
    };
    let set = "apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata: {name: web}\nspec:\n  \
               replicas: 3\n  placement: {nodes: [pve1]}\n  maxUnavailable: 2\n  template:\n    \
               imagePolicy: Recreate\n    forProvider:\n      site: lab\n      \
               image: {image: noble-cloud}\n      memory: 1Gi\n      disk: 8Gi\n";
    let ws = Workspace::new(&pve);
    let (doc, old) = image(&mut pve, url);
    ws.commit_specs(&[("image.yaml", doc), ("web.yaml", set.to_string())]);
    assert!(ws.run_once().0);
    let (doc, new) = image(&mut pve, &url.replace("/1/", "/2/"));
    ws.commit_specs(&[("image.yaml", doc), ("web.yaml", set.to_string())]);
    let before = pve.requests().len();
    let out = plan(&ws, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let shown = stdout(&out);
    assert!(
        shown.contains(&format!("~ image noble-cloud: {old} -> {new}"))
            && shown.contains(
                "but for those rebuilt once it is there under imagePolicy: Recreate: web-01, \
                 web-02, web-03"
            ),
        "{shown}"
    );
    for member in ["web-01", "web-02"] {
        assert!(
            shown.contains(&format!("~ recreate {member}: VM ")),
            "{member}: {shown}"
        );
    }
    assert!(!shown.contains("~ recreate web-03"), "{shown}");
    assert!(shown.contains("2 to recreate"), "{shown}");
    let sent = pve.requests()[before..]
        .iter()
        .filter(|r| r.method != "GET")
        .count();
    assert_eq!(sent, 0, "plan sends nothing");
}
