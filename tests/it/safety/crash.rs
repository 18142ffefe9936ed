//! The crash test: proxsync is killed with SIGKILL at arbitrary moments while it creates,
//! updates and deletes VMs, and restarted each time, against a fakepve that keeps a real
//! cluster's timing: create and clone tasks take time, during which the new VM is listed
//! without a name and its config holds only `lock: create` (or `lock: clone` and the
//! `# qmclone temporary file` line), and the answer to a create or clone arrives after the VM
//! exists. Kills land in every window: before the intent, between intent and request, request
//! and answer, answer and UPID record, mid-task, mid-converge, mid-start, mid-delete.
//!
//! At no point does a spec have two VMs (counted by VMID, named or not), and at the end every
//! spec has exactly one VM, nothing is orphaned or left locked, and every status is Ready.
//! This is the seed's failure (66 orphaned VMs from a create loop) made impossible by
//! construction: the intent is durable before each create, and a VM at a reserved VMID is
//! never judged foreign while it may still be ours.
//!
//! Two of the six specs are containers (`kind: ProxmoxLXC`: one from a `vztmpl` archive, one
//! cloned from a CT template), whose `vzcreate` takes seconds, holding only `lock: create`
//! until it writes the config without its lock shortly before the task ends: the same
//! guarantees hold for them, counted over VMs and containers together.
//!
//! In the create phases the state database is deleted after some kills (a cache loss): a
//! guest in its create window then has neither a record nor a config that says whose it is,
//! and its running task, started by this install's token, is what holds the next create.
//!
//! Between kills of the update phase a person edits the notes of managed guests (the marker
//! line dropped, or kept below new text): no second guest, and the line comes back below the
//! person's text.
//!
//! `PROXSYNC_CRASH_SEEDS=N` runs N seeds in each of the five tests (default 2, 10 in all);
//! `PROXSYNC_CRASH_SEED=S` replays one seed.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::engine::{Workspace, marker_claims, spec};
use common::{FakePve, default_scenario};
use serde_json::json;

/// A small deterministic generator, so a failure can be replayed.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

const KILLS: usize = 25;
/// The second node's template.
const TEMPLATE2: u32 = 9001;

/// The CT template on the first node.
const CT_TEMPLATE: u32 = 9100;
const VZTMPL: &str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";

/// Two nodes, a VM template on each, a CT template and a container archive, real task
/// durations and late answers.
fn real_timing_pve() -> FakePve {
    let mut scenario = default_scenario();
    scenario["files"].as_array_mut().unwrap().push(json!({
        "storage": "local", "name": "debian-12-standard_12.7-1_amd64.tar.zst",
        "size": 126_000_000_u64, "content": "vztmpl"}));
    scenario["cts"] = json!([{
        "vmid": CT_TEMPLATE, "name": "alpine-ct", "node": "pve1", "template": true,
        "config": {"hostname": "alpine-ct", "rootfs": "local-lvm:base-9100-disk-0,size=4G",
                   "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:91:00,ip=dhcp,type=veth"}}]);
    let mut t2 = scenario["vms"][0].clone();
    t2["vmid"] = json!(TEMPLATE2);
    t2["node"] = json!("pve2");
    t2["name"] = json!("debian-12-pve2");
    t2["config"]["name"] = json!("debian-12-pve2");
    t2["config"]["scsi0"] = json!("local-lvm:base-9001-disk-0,size=2G");
    scenario["vms"].as_array_mut().unwrap().push(t2);
    let mut pve = FakePve::start(scenario);
    pve.set_time_scale(1.0);
    // Every answer takes 20 ms; create and clone tasks 0.4 s; their answer comes 0.15 s after
    // the locked VM exists.
    pve.slow_network(0.02, 0.01, None);
    pve.create_timing_listed(0.4, 0.4, 0.15, true);
    // A container's create, clone, delete and move take time too, a create as long as on a
    // real node (pve-container unpacks the archive: seconds), holding only `lock: create`
    // until it writes the config, marker included, 0.3 s before it ends.
    pve.ct_timing(2.5, 1.5, 0.2, 0.3, 0.3);
    pve
}

/// The specs that are containers: index 1 (made from a vztmpl archive, on pve2, the head of
/// the chain) and 4 (a clone of the CT template, on pve1, removed in the second phase).
const CONTAINERS: [usize; 2] = [1, 4];

/// A container spec on `node`, from `template`.
fn ct_spec(name: &str, node: &str, template: &str, extra: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n    \
         site: lab\n    node: {node}\n    template: \"{template}\"\n    cores: 2\n    memory: 2Gi\n{extra}"
    )
}

/// The chain of three (`dependsOn`): index 3 depends on 1, and 5 on 3.
const CHAIN: [(usize, usize); 2] = [(3, 1), (5, 3)];

/// Six specs over two nodes: clones of each node's template, `import-from` creates and two
/// containers ([`CONTAINERS`]), three of them a chain ([`CHAIN`]).
fn specs(names: &[String], extra: &str) -> Vec<(String, String)> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let node = if i % 2 == 0 { "pve1" } else { "pve2" };
            let image = match (i % 3, node) {
                (2, _) => "local:import/debian-12-genericcloud-amd64.qcow2".to_string(),
                (_, "pve1") => "9000".to_string(),
                _ => TEMPLATE2.to_string(),
            };
            let mut text = match CONTAINERS.iter().position(|c| *c == i) {
                Some(0) => ct_spec(n, node, VZTMPL, extra),
                Some(_) => ct_spec(n, node, &CT_TEMPLATE.to_string(), extra),
                None => spec(n, node, &image, extra),
            };
            if let Some((_, on)) = CHAIN.iter().find(|(d, _)| *d == i) {
                let deps = format!("spec:\n  dependsOn: [{}]\n", names[*on]);
                text = text.replacen("spec:\n", &deps, 1);
            }
            (format!("{n}.yaml"), text)
        })
        .collect()
}

fn commit(ws: &Workspace, files: &[(String, String)]) {
    let refs: Vec<(&str, String)> = files.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    ws.commit_specs(&refs);
}

/// VMs and containers other than the templates.
fn vm_count(pve: &mut FakePve) -> usize {
    guests(pve).len()
}

/// Every VM and container but the templates.
fn guests(pve: &mut FakePve) -> Vec<serde_json::Value> {
    let mut all = pve.vms();
    all.extend(pve.cts());
    all.into_iter()
        .filter(|v| v["template"] != json!(true))
        .collect()
}

/// Runs `proxsync run --once` `KILLS` times, each killed after a random delay, checking after
/// each kill that no spec has two VMs and that the number of VMs is within `vms` (more is a
/// second guest; fewer, a rebuild that took down more than it may). With
/// `lose_cache`, the state database (a cache: the README says deleting it is safe) is deleted
/// after some kills, a create's intent with it: a guest in its create window then holds only
/// its lock, and nothing names it.
// Many arguments because: the fake, the workspace and the seed's generator, and what the phase
// adds between kills.
#[allow(clippy::too_many_arguments)]
fn kill_rounds(
    pve: &mut FakePve,
    ws: &Workspace,
    rng: &mut Lcg,
    seed: u64,
    phase: &str,
    vms: std::ops::RangeInclusive<usize>,
    mut notes: Option<&mut Notes>,
    lose_cache: bool,
) {
    for round in 0..KILLS {
        if let Some(notes) = notes.as_deref_mut()
            && round % 4 == 2
        {
            edit_some_notes(pve, rng, notes, round);
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(["run", "--once", "--config"])
            .arg(ws.config())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start proxsync");
        let delay = 5 + rng.next(1200);
        std::thread::sleep(Duration::from_millis(delay));
        // SIGKILL: no cleanup, no flush, nothing.
        let _ = child.kill();
        let _ = child.wait();
        let lost = lose_cache && round % 5 == 3;
        if lost {
            let _ = std::fs::remove_file(ws.path("state/proxsync.redb"));
        }
        let where_ = format!(
            "{phase} round {round} (seed {seed}, kill after {delay} ms{})",
            if lost { ", state database deleted" } else { "" }
        );
        let claims = marker_claims(pve);
        for (spec, vmids) in &claims {
            assert!(vmids.len() <= 1, "{where_}: VMs {vmids:?} claim {spec}");
        }
        // A dependant's VM is made only once its dependency's is Ready.
        for (dependant, on) in CHAIN {
            let name = |i: usize| format!("crash-{i}");
            if claims.contains_key(&name(dependant)) && phase == "create" {
                assert!(
                    claims.contains_key(&name(on)),
                    "{where_}: crash-{dependant} has a VM before crash-{on}: {claims:?}"
                );
            }
        }
        // Counted by VMID: a VM in its create window has no name and no marker yet.
        let n = vm_count(pve);
        assert!(
            vms.contains(&n),
            "{where_}: {n} VMs, {vms:?} may exist: {:?}",
            pve.vms()
        );
    }
}

/// The notes edits of a phase: VMID -> the person's first line, as last written.
type Notes = std::collections::BTreeMap<u64, String>;

/// A person edits the notes of one managed guest, chosen by `rng`, between two kills: the
/// marker line dropped, or kept below the new text. A guest locked by a task refuses it.
fn edit_some_notes(pve: &mut FakePve, rng: &mut Lcg, notes: &mut Notes, round: usize) {
    let mut marked: Vec<(serde_json::Value, &str)> = pve
        .vms()
        .into_iter()
        .map(|g| (g, "qemu"))
        .chain(pve.cts().into_iter().map(|g| (g, "lxc")))
        .filter(|(g, _)| {
            let text = g["config"]["description"].as_str().unwrap_or("");
            proxsync::ownership::Marker::parse(text).is_some()
        })
        .collect();
    if marked.is_empty() {
        return;
    }
    let (guest, kind) = marked.swap_remove(rng.next(marked.len() as u64) as usize);
    let vmid = guest["vmid"].as_u64().unwrap_or(0);
    let line = (guest["config"]["description"].as_str().unwrap_or(""))
        .lines()
        .find(|l| l.contains("proxsync-id:"))
        .unwrap_or("")
        .to_string();
    let owner = format!("Owner: ops (edit in round {round})");
    let text = match rng.next(2) {
        0 => owner.clone(),
        _ => format!("{owner}\n{line}"),
    };
    let node = guest["node"].as_str().unwrap_or("pve1");
    if pve.edit_notes(node, kind, vmid, &text) {
        notes.insert(vmid, owner);
    }
}

/// Every guest whose notes a person edited still has them, first, and carries its marker line
/// again below them.
fn check_notes(pve: &mut FakePve, notes: &Notes, seed: u64) {
    let mut guests = pve.vms();
    guests.extend(pve.cts());
    for (vmid, owner) in notes {
        let Some(g) = guests.iter().find(|g| g["vmid"].as_u64() == Some(*vmid)) else {
            continue; // its spec was removed, and it with it
        };
        let text = g["config"]["description"].as_str().unwrap_or("");
        assert!(
            text.starts_with(owner.as_str()),
            "the person's notes of {vmid} stay (seed {seed}): {text:?}"
        );
        assert!(
            proxsync::ownership::Marker::parse(text).is_some(),
            "{vmid} carries its marker line again (seed {seed}): {text:?}"
        );
    }
}

/// Runs `run --once` until it exits 0 (a create whose request may still arrive is waited
/// out, so this may take a request timeout), then checks one VM per spec, all Ready.
fn converge_and_check(pve: &mut FakePve, ws: &Workspace, names: &[String], seed: u64, phase: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = String::new();
    let mut ok = false;
    while Instant::now() < deadline {
        let (done, out) = ws.run_once();
        last = out;
        if done {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        ok,
        "{phase}: converges after the crashes (seed {seed}): {last}"
    );
    let claims = marker_claims(pve);
    for n in names {
        assert_eq!(
            claims.get(n).map(Vec::len),
            Some(1),
            "{phase}: exactly one VM for {n} (seed {seed}): {claims:?}"
        );
        let (s, _, m) = ws.condition(n, "Ready");
        assert_eq!(s, "True", "{phase}: {n} (seed {seed}): {m}");
    }
    let vms = guests(pve);
    assert_eq!(
        vms.len(),
        names.len(),
        "{phase}: no stray VMs or containers (seed {seed}): {vms:?}"
    );
    for vm in &vms {
        assert!(
            vm["lock"].is_null(),
            "{phase}: lock left on {vm} (seed {seed})"
        );
    }
    let orphans = std::fs::read_to_string(ws.path("status/_orphans.yaml")).unwrap_or_default();
    assert!(
        !orphans.contains("vmId"),
        "{phase}: no orphans (seed {seed}): {orphans}"
    );
}

/// One seed: creates under kills; then updates (CPU, memory, power) and deletes under kills.
fn crash_seed(seed: u64) {
    let mut pve = real_timing_pve();
    let ws = Workspace::new(&pve);
    let names: Vec<String> = (0..6).map(|i| format!("crash-{i}")).collect();
    commit(&ws, &specs(&names, ""));
    let mut rng = Lcg(seed);

    kill_rounds(
        &mut pve,
        &ws,
        &mut rng,
        seed,
        "create",
        0..=names.len(),
        None,
        true,
    );
    converge_and_check(&mut pve, &ws, &names, seed, "create");

    // Updates for four specs (more CPU and memory, one stopped) and two specs removed.
    let kept: Vec<String> = names[..4].to_vec();
    let mut files = specs(&kept, "");
    for (i, (_, text)) in files.iter_mut().enumerate() {
        *text = text
            .replace("cpu: 2", "cpu: 3")
            .replace("cores: 2", "cores: 3")
            .replace("memory: 2Gi", "memory: 3Gi");
        if i == 0 {
            text.push_str("    powerState: stopped\n");
        }
    }
    commit(&ws, &files);
    // A person edits the notes of managed guests between kills (the marker line dropped or
    // kept): never a second guest, and the line comes back below the notes.
    let mut notes = Notes::new();
    kill_rounds(
        &mut pve,
        &ws,
        &mut rng,
        seed,
        "update+delete",
        0..=names.len(),
        Some(&mut notes),
        false,
    );
    // The next change of each spec writes the marker line back below the edited notes (an
    // idle guest's notes are not read: the listing does not show them).
    for (_, text) in files.iter_mut() {
        *text = text
            .replace("cpu: 3", "cpu: 4")
            .replace("cores: 3", "cores: 4");
    }
    commit(&ws, &files);
    converge_and_check(&mut pve, &ws, &kept, seed, "update+delete");
    check_notes(&mut pve, &notes, seed);
    // The update reached every VM (pending until the next start on a running one).
    for vm in guests(&mut pve).iter() {
        let cores = if vm["pending"]["cores"].is_null() {
            &vm["config"]["cores"]
        } else {
            &vm["pending"]["cores"]
        };
        assert_eq!(cores.to_string().trim_matches('"'), "4", "{vm}");
    }
}

/// The seeds of test `part` (of [`PARTS`]): every `PARTS`-th seed from `part`, so the parts
/// together run `PARTS` x N seeds, side by side (each mostly waits on task timing).
fn seeds(part: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("PROXSYNC_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return if part == 0 { vec![seed] } else { vec![] };
    }
    let n: u64 = std::env::var("PROXSYNC_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    (0..n).map(|i| 20261122 + part + PARTS * i).collect()
}

/// How many tests the seeds are spread over.
const PARTS: u64 = 5;

fn crash_part(part: u64) {
    for seed in seeds(part) {
        crash_seed(seed);
    }
}

#[test]
fn sigkill_during_creates_updates_and_deletes_never_duplicates_or_orphans_a() {
    crash_part(0);
}

#[test]
fn sigkill_during_creates_updates_and_deletes_never_duplicates_or_orphans_b() {
    crash_part(1);
}

#[test]
fn sigkill_during_creates_updates_and_deletes_never_duplicates_or_orphans_c() {
    crash_part(2);
}

#[test]
fn sigkill_during_creates_updates_and_deletes_never_duplicates_or_orphans_d() {
    crash_part(3);
}

#[test]
fn sigkill_during_creates_updates_and_deletes_never_duplicates_or_orphans_e() {
    crash_part(4);
}

/// A `ProxmoxVMSet` of 10 members over both nodes, from both nodes' templates by name
/// pattern: created under random kills, then scaled down to 7 under kills. One VM per member,
/// none left of the removed ones.
fn crash_set(seed: u64) {
    let mut pve = real_timing_pve();
    let ws = Workspace::new(&pve);
    let set = |replicas: u32| {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata:\n  name: crew\nspec:\n  \
             replicas: {replicas}\n  placement: {{nodes: [pve1, pve2]}}\n  template:\n    \
             forProvider:\n      site: lab\n      image: \"local:import/debian-12-genericcloud-amd64.qcow2\"\n      \
             cpu: 1\n      memory: 1Gi\n      disk: 8Gi\n"
        )
    };
    let names = |n: usize| (1..=n).map(|i| format!("crew-{i:02}")).collect::<Vec<_>>();
    let mut rng = Lcg(seed);
    commit(&ws, &[("crew.yaml".to_string(), set(10))]);
    kill_rounds(
        &mut pve,
        &ws,
        &mut rng,
        seed,
        "set create",
        0..=10,
        None,
        true,
    );
    converge_and_check(&mut pve, &ws, &names(10), seed, "set create");
    commit(&ws, &[("crew.yaml".to_string(), set(7))]);
    kill_rounds(
        &mut pve,
        &ws,
        &mut rng,
        seed,
        "set scale-down",
        0..=10,
        None,
        false,
    );
    converge_and_check(&mut pve, &ws, &names(7), seed, "set scale-down");
}

#[test]
fn sigkill_during_a_sets_creates_and_scale_down_never_duplicates_or_orphans() {
    for seed in seeds(0) {
        crash_set(seed);
    }
}

const IMAGE_URL: &str =
    "https://cloud-images.example/noble/20261115/noble-server-cloudimg-amd64.img";

/// A `ProxmoxImage` of the file the harness serves at `url` (with its sha256).
fn image_doc(url: &str, sha256: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {{name: noble-cloud}}\nspec:\n  \
         forProvider:\n    site: lab\n    url: {url}\n    checksum: sha256:{sha256}\n    \
         format: qcow2\n    storage: local\n"
    )
}

/// A set of `replicas` over both nodes made from image `noble-cloud`, rebuilt from a new version
/// two at a time (`imagePolicy: Recreate`, `maxUnavailable: 2`).
fn rolled_set(replicas: u32) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata:\n  name: roll\nspec:\n  \
         replicas: {replicas}\n  placement: {{nodes: [pve1, pve2]}}\n  maxUnavailable: 2\n  \
         template:\n    imagePolicy: Recreate\n    forProvider:\n      site: lab\n      \
         image: {{image: noble-cloud}}\n      cpu: 1\n      memory: 1Gi\n      disk: 8Gi\n"
    )
}

/// The harness serves a file at `url` (downloads of it take PVE time); its sha256.
fn serve(pve: &mut FakePve, url: &str, size: u64) -> String {
    let served = pve
        .call("remote_file", json!({"url": url, "size": size}))
        .expect("the harness serves the URL");
    served["sha256"].as_str().expect("its sha256").to_string()
}

/// A set of six made from a `ProxmoxImage`, rolled to a new version of the image under random
/// kills (`imagePolicy: Recreate`, `maxUnavailable: 2`): a kill lands between a member's delete
/// and its create, mid-delete, mid-create, mid-download. Never a second guest for a member,
/// never more than two members down at once, and at the end each member is one guest made from
/// the new version.
fn crash_roll(seed: u64) {
    let mut pve = real_timing_pve();
    pve.call("download_timing", json!({"secs": 0.5}))
        .expect("download_timing");
    let ws = Workspace::new(&pve);
    let names: Vec<String> = (1..=6).map(|i| format!("roll-{i:02}")).collect();
    let sum = serve(&mut pve, IMAGE_URL, 4096);
    commit(
        &ws,
        &[
            ("images.yaml".to_string(), image_doc(IMAGE_URL, &sum)),
            ("roll.yaml".to_string(), rolled_set(6)),
        ],
    );
    converge_and_check(&mut pve, &ws, &names, seed, "roll create");

    let url2 = IMAGE_URL.replace("20261115", "20261201");
    let sum2 = serve(&mut pve, &url2, 2048);
    commit(
        &ws,
        &[
            ("images.yaml".to_string(), image_doc(&url2, &sum2)),
            ("roll.yaml".to_string(), rolled_set(6)),
        ],
    );
    let mut rng = Lcg(seed);
    kill_rounds(&mut pve, &ws, &mut rng, seed, "roll", 4..=6, None, false);
    converge_and_check(&mut pve, &ws, &names, seed, "roll");
    for n in &names {
        let (_, _, message) = ws.condition(n, "Ready");
        assert!(
            message.contains(&format!("version {}", &sum2[..12])) && !message.contains("older"),
            "roll: {n} is made from the new version (seed {seed}): {message}"
        );
    }
}

#[test]
fn sigkill_during_an_image_roll_never_duplicates_or_takes_down_more_than_it_may() {
    for seed in seeds(0) {
        crash_roll(seed);
    }
}

/// A `ProxmoxTemplate` built from the image, and a set of four cloned from it, rebuilt from a
/// new template version two at a time (`imagePolicy: Recreate`).
fn template_docs(url: &str, sha256: &str) -> Vec<(String, String)> {
    let template = "apiVersion: proxsync.io/v1\nkind: ProxmoxTemplate\nmetadata: {name: noble}\n\
         spec:\n  forProvider:\n    site: lab\n    node: pve1\n    image: {image: noble-cloud}\n    \
         memory: 1Gi\n    disk: 8Gi\n";
    let set = rolled_set(4)
        .replace("name: roll", "name: tpl")
        .replace("[pve1, pve2]", "[pve1]")
        .replace("{image: noble-cloud}", "{template: noble}");
    vec![
        ("images.yaml".to_string(), image_doc(url, sha256)),
        ("template.yaml".to_string(), template.to_string()),
        ("tpl.yaml".to_string(), set),
    ]
}

/// Exactly one template of this install's, for a version of `noble`, made a template, and no
/// other VM claims a version: its spec name.
fn one_template(pve: &mut FakePve, seed: u64, phase: &str) -> String {
    let claims = marker_claims(pve);
    let versions: Vec<(&String, &Vec<u64>)> = claims
        .iter()
        .filter(|(s, _)| s.starts_with("noble-"))
        .collect();
    assert_eq!(
        versions.len(),
        1,
        "{phase}: one template version (seed {seed}): {claims:?}"
    );
    let (name, vmids) = versions[0];
    assert_eq!(
        vmids.len(),
        1,
        "{phase}: one template (seed {seed}): {claims:?}"
    );
    let vm = pve.vm(vmids[0] as u32);
    assert_eq!(
        vm["template"],
        json!(true),
        "{phase}: made a template (seed {seed}): {vm}"
    );
    name.clone()
}

/// Kills while the template is built and its guests cloned (the state database lost now and
/// then), then while a new image version builds a new template and the set is rolled onto
/// it: never a second template or guest, never more than two members down, and at the end one
/// template, of the new version, and every member cloned from it.
fn crash_template(seed: u64) {
    let mut pve = real_timing_pve();
    pve.call("download_timing", json!({"secs": 0.5}))
        .expect("download_timing");
    // A qmtemplate task takes time too, the config saying `template: 1` from its start.
    pve.call("template_timing", json!({"secs": 0.6}))
        .expect("template_timing");
    let ws = Workspace::new(&pve);
    let names: Vec<String> = (1..=4).map(|i| format!("tpl-{i:02}")).collect();
    let sum = serve(&mut pve, IMAGE_URL, 4096);
    commit(&ws, &template_docs(IMAGE_URL, &sum));
    let mut rng = Lcg(seed);
    // Four members and the template's VM before it is made a template.
    kill_rounds(&mut pve, &ws, &mut rng, seed, "template", 0..=5, None, true);
    converge_and_check(&mut pve, &ws, &names, seed, "template create");
    let first = one_template(&mut pve, seed, "template create");

    let url2 = IMAGE_URL.replace("20261115", "20261201");
    let sum2 = serve(&mut pve, &url2, 2048);
    commit(&ws, &template_docs(&url2, &sum2));
    // Two members may be down; the new template's VM counts until it is a template.
    kill_rounds(
        &mut pve,
        &ws,
        &mut rng,
        seed,
        "template roll",
        2..=5,
        None,
        false,
    );
    converge_and_check(&mut pve, &ws, &names, seed, "template roll");
    // The old version goes in the cycle after the one that built its successor (make before
    // break: the plan that built it held the old one), which may be the cycle after every spec
    // was Ready: a few more cycles, never a second template meanwhile.
    for _ in 0..3 {
        let versions = marker_claims(&mut pve)
            .keys()
            .filter(|k| k.starts_with("noble-"))
            .count();
        if versions == 1 {
            break;
        }
        let (ok, out) = ws.run_once();
        assert!(
            ok,
            "template roll: the old version's removal (seed {seed}): {out}"
        );
    }
    let second = one_template(&mut pve, seed, "template roll");
    assert_ne!(first, second, "a new version (seed {seed})");
    let version = second.rsplit_once('-').unwrap().1;
    // A member adopted after the lost database has no version recorded (never rebuilt, and
    // says so); every other one is cloned from the new version.
    for n in &names {
        let (_, _, message) = ws.condition(n, "Ready");
        assert!(
            !message.contains("older")
                && (message.contains(&format!("template noble version {version}"))
                    || message.contains("its version not recorded")),
            "template roll: {n} is cloned from the new version (seed {seed}): {message}"
        );
    }
}

#[test]
fn sigkill_while_a_template_is_built_and_its_guests_rolled_never_duplicates() {
    for seed in seeds(0) {
        crash_template(seed);
    }
}

/// A server on 127.0.0.1 that answers every HTTP request `503`: the guests' service after a
/// change that broke them (`200` before it, while `ok` holds).
fn service(ok: std::sync::Arc<std::sync::atomic::AtomicBool>) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let line = if ok.load(std::sync::atomic::Ordering::SeqCst) {
                "HTTP/1.1 200 OK"
            } else {
                "HTTP/1.1 503 Service Unavailable"
            };
            let _ = stream.write_all(format!("{line}\r\nContent-Length: 0\r\n\r\n").as_bytes());
        }
    });
    port
}

/// The snapshots of every guest, by VMID, as PVE's API lists them.
fn snapshots_by_guest(pve: &mut FakePve) -> std::collections::BTreeMap<u64, Vec<String>> {
    use proxsync::guest::GuestKind;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = pve.client();
    let mut all: Vec<(u64, GuestKind, String)> = Vec::new();
    for (list, kind) in [(pve.vms(), GuestKind::Qemu), (pve.cts(), GuestKind::Lxc)] {
        for g in list.iter().filter(|g| g["template"] != json!(true)) {
            let node = g["node"].as_str().unwrap_or("pve1").to_string();
            all.push((g["vmid"].as_u64().unwrap_or(0), kind, node));
        }
    }
    all.into_iter()
        .map(|(vmid, kind, node)| {
            let listed = rt
                .block_on(client.snapshots(&node, kind, vmid as u32))
                .unwrap_or_else(|e| panic!("snapshots of {vmid}: {e}"));
            (vmid, listed.into_iter().map(|s| s.name).collect())
        })
        .collect()
}

/// One seed of a guarded change (`changePolicy`) under kills: a VM and a container, each with
/// a health check and a snapshot before any change, get a change after which their service
/// fails. `run --once` is killed at random instants from the snapshot to the end of the
/// rollback, against a fakepve whose container snapshots and rollbacks take a second and whose
/// answers come late. At every kill: one guest per spec and at most two snapshots on it (the
/// guard's, and one a kill's retake may not add: never more). At the end each guest is as it
/// was (its memory back, running, unlocked), holds exactly one snapshot, proxsync's, and its
/// spec is Stalled `RolledBack`.
fn crash_change(seed: u64) {
    let mut pve = real_timing_pve();
    pve.call("snapshot_timing", json!({"secs": 1.0}))
        .expect("snapshot_timing");
    let ws = Workspace::new(&pve);
    let ok = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let port = service(ok.clone());
    let names = ["guard-vm".to_string(), "guard-ct".to_string()];
    let guarded = |memory: &str| -> Vec<(String, String)> {
        let extra = format!(
            "    rebootPolicy: IfNeeded\n    health:\n      http: {{port: {port}}}\n      \
             address: 127.0.0.1\n      timeout: 10s\n    changePolicy:\n      snapshot: \
             BeforeAnyChange\n      keep: 1\n"
        );
        vec![
            (
                "guard-vm.yaml".to_string(),
                spec(&names[0], "pve1", "9000", &extra).replace("memory: 2Gi", memory),
            ),
            (
                "guard-ct.yaml".to_string(),
                ct_spec(&names[1], "pve1", VZTMPL, &extra).replace("memory: 2Gi", memory),
            ),
        ]
    };
    commit(&ws, &guarded("memory: 2Gi"));
    converge_and_check(&mut pve, &ws, &names, seed, "create");
    let before: Vec<(u64, String)> = (guests(&mut pve).iter())
        .map(|g| {
            let memory = g["config"]["memory"]
                .to_string()
                .trim_matches('"')
                .to_string();
            (g["vmid"].as_u64().unwrap_or(0), memory)
        })
        .collect();

    // The change, after which the service fails.
    ok.store(false, std::sync::atomic::Ordering::SeqCst);
    commit(&ws, &guarded("memory: 3Gi"));
    let mut rng = Lcg(seed);
    for round in 0..KILLS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(["run", "--once", "--config"])
            .arg(ws.config())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start proxsync");
        let delay = 5 + rng.next(1500);
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        let where_ = format!("change round {round} (seed {seed}, kill after {delay} ms)");
        let claims = marker_claims(&mut pve);
        for (spec, vmids) in &claims {
            assert!(vmids.len() <= 1, "{where_}: guests {vmids:?} claim {spec}");
        }
        assert_eq!(vm_count(&mut pve), 2, "{where_}");
        for (vmid, snaps) in snapshots_by_guest(&mut pve) {
            assert!(
                snaps.len() <= 2 && snaps.iter().all(|s| s.starts_with("proxsync-")),
                "{where_}: guest {vmid} holds {snaps:?}"
            );
        }
    }
    // Then without kills until each spec says its change was rolled back.
    let deadline = Instant::now() + Duration::from_secs(90);
    let rolled_back = |ws: &Workspace| {
        names
            .iter()
            .all(|n| ws.condition(n, "Stalled").1 == "RolledBack")
    };
    while Instant::now() < deadline && !rolled_back(&ws) {
        ws.run_once();
        std::thread::sleep(Duration::from_millis(500));
    }
    for n in &names {
        let (status, reason, message) = ws.condition(n, "Stalled");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "RolledBack"),
            "{n} (seed {seed}): {message}"
        );
    }
    let after = guests(&mut pve);
    for (vmid, memory) in &before {
        let g = (after.iter())
            .find(|g| g["vmid"].as_u64() == Some(*vmid))
            .unwrap_or_else(|| panic!("guest {vmid} kept (seed {seed})"));
        let now = g["config"]["memory"]
            .to_string()
            .trim_matches('"')
            .to_string();
        assert_eq!(&now, memory, "guest {vmid} as it was (seed {seed}): {g}");
        assert_eq!(g["status"], "running", "guest {vmid} (seed {seed}): {g}");
        assert!(g["lock"].is_null(), "guest {vmid} (seed {seed}): {g}");
    }
    for (vmid, snaps) in snapshots_by_guest(&mut pve) {
        assert_eq!(
            snaps.len(),
            1,
            "guest {vmid} holds the one snapshot it was rolled back to (seed {seed}): {snaps:?}"
        );
    }
}

#[test]
fn sigkill_between_a_snapshot_and_the_end_of_its_rollback_leaves_the_guest_as_it_was() {
    for seed in seeds(0) {
        crash_change(seed);
    }
}
