//! The suite against the in-memory fake (`pve::fake`), which must answer as PVE does.

use std::collections::BTreeSet;
use std::time::Duration;

use super::coverage::{COVERAGE, Cover, unmet};
use super::*;
use crate::guest::GuestKind;
use crate::pve::fake::{FakePve, Fault};

const TEMPLATE: &str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";

fn setup(scope: Scope) -> Setup {
    Setup {
        site: "lab".into(),
        node: "pve1".into(),
        other_node: Some("pve2".into()),
        vm_storage: "local-lvm".into(),
        ct_storage: "local-lvm".into(),
        bridge: "vmbr0".into(),
        ct_template: Some(TEMPLATE.into()),
        pool: CONFORMANCE_POOL.into(),
        task_timeout: Duration::from_secs(60),
        scope,
        key: crate::ownership::MarkerKey::from_bytes([5; 32]),
        run: Run::new(vec![]),
    }
}

const UUID_A: &str = "uuid=3f2504e0-4f89-11d3-9a0c-0305e82c3301";
const UUID_B: &str = "uuid=3f2504e0-4f89-11d3-9a0c-0305e82c3302";

/// The line of guest `vmid` (smbios1 `smbios1`) made by run `run`, begun `age` seconds ago.
fn line_of(
    s: &Setup,
    vmid: u32,
    kind: GuestKind,
    identity: &str,
    (run, age): (&str, u64),
) -> String {
    let config = crate::pve::types::VmConfig {
        values: [(
            match kind {
                GuestKind::Qemu => "smbios1",
                GuestKind::Lxc => "net0",
            }
            .to_string(),
            identity.to_string(),
        )]
        .into(),
    };
    let id = config.guest_id(kind).expect("an identity");
    let started = now_secs() - age;
    crate::ownership::ExerciseLine::signed(&s.key, &s.pool, (run, started), vmid, Some(&id))
        .line(&s.marker())
}

/// Two nodes; a clone copies for 2 s (tokio's paused time), so its lock can be met.
fn fake() -> FakePve {
    let pve = FakePve::new(&["pve1", "pve2"]);
    pve.set_task_duration("qmclone", Duration::from_secs(2));
    pve.set_task_duration("vzclone", Duration::from_secs(2));
    pve
}

fn listing(report: &Report) -> String {
    report.steps.iter().map(|s| format!("{s}\n")).collect()
}

#[tokio::test(start_paused = true)]
async fn the_whole_suite_meets_every_expectation_of_the_in_memory_fake() {
    let pve = fake();
    let report = run(&pve, &setup(Scope::Full)).await;
    let all = listing(&report);
    assert!(report.differences().is_empty(), "{all}");
    let not_run: Vec<&Step> = report
        .steps
        .iter()
        .filter(|s| matches!(s.outcome, Outcome::NotRun(_)))
        .collect();
    assert!(not_run.is_empty(), "{all}");
    // Every text the suite means to provoke was met, in words the table and classifier read.
    assert_eq!(unmet(&report), Vec::<String>::new(), "{all}");
    for name in [
        "vm create",
        "vm clone",
        "vm resize",
        "vm start",
        "vm reboot",
        "vm stop",
        "vm migrate",
        "vm migrate back",
        "ct create",
        "ct clone",
        "ct resize",
        "ct reboot",
        "ct migrate",
    ] {
        assert_eq!(
            report.step(name).map(|s| &s.outcome),
            Some(&Outcome::AsExpected),
            "{name}: {all}"
        );
    }
    for (kind, deletes) in [("vm delete ", 2), ("ct delete ", 2)] {
        let done = report
            .steps
            .iter()
            .filter(|s| s.name.starts_with(kind) && s.outcome == Outcome::AsExpected)
            .count();
        assert_eq!(done, deletes, "{kind}: {all}");
    }
    // Nothing left: the pool is empty, no guest remains.
    assert_eq!(pve.pool(CONFORMANCE_POOL), Some(vec![]));
    for vmid in 100..110 {
        assert!(pve.vm(vmid).is_none(), "guest {vmid} left: {all}");
    }
    let durations = report.durations();
    for task in [
        "qmcreate",
        "qmclone",
        "vzcreate",
        "vzclone",
        "resize",
        "qmdestroy",
    ] {
        assert!(durations.contains_key(task), "{task}: {durations:?}");
    }
    assert!(
        durations["qmclone"] >= Duration::from_secs(2),
        "{durations:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_exercise_creates_clones_resizes_starts_stops_and_deletes() {
    let pve = fake();
    let report = run(&pve, &setup(Scope::Exercise)).await;
    let names: Vec<&str> = report.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "pool create",
            "vm create",
            "vm joins its pool",
            "vm clone",
            "vm resize",
            "vm size after the resize",
            "vm start",
            "vm stop",
            "vm delete VM 101",
            "vm delete VM 100",
            "ct create",
            "ct joins its pool",
            "ct clone",
            "ct resize",
            "ct size after the resize",
            "ct start",
            "ct stop",
            "ct delete container 101",
            "ct delete container 100",
        ],
        "{}",
        listing(&report)
    );
    assert!(report.differences().is_empty(), "{}", listing(&report));
    assert_eq!(pve.pool(CONFORMANCE_POOL), Some(vec![]));
    assert!(pve.vm(100).is_none() && pve.vm(101).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_differing_answer_is_reported_with_pves_words() {
    let pve = fake();
    // A PVE that answers the digest's edit in words the table does not know.
    pve.fault(
        "set_config",
        Fault::Refuse(crate::pve::Error::Api {
            method: "PUT".into(),
            path: String::new(),
            status: 500,
            message: "something new".into(),
            errors: Default::default(),
        }),
    );
    let report = run(&pve, &setup(Scope::Full)).await;
    let differs = report.differences();
    assert_eq!(differs.len(), 1, "{}", listing(&report));
    assert_eq!(differs[0].name, "vm write with its digest");
    assert!(
        matches!(&differs[0].outcome, Outcome::Differs(got) if got.contains("something new")),
        "{:?}",
        differs[0]
    );
    assert!(
        differs[0]
            .to_string()
            .starts_with("DIFF vm write with its digest")
    );
}

#[tokio::test(start_paused = true)]
async fn a_text_in_other_words_is_a_difference() {
    let pve = fake();
    // `VM is locked` where the client expects a digest's conflict: known words, another meaning.
    pve.fault("set_config", Fault::Pass);
    pve.fault(
        "set_config",
        Fault::Refuse(crate::pve::Error::Api {
            method: "PUT".into(),
            path: String::new(),
            status: 500,
            message: "VM is locked (backup)".into(),
            errors: Default::default(),
        }),
    );
    let report = run(&pve, &setup(Scope::Full)).await;
    let step = report.step("vm write with a stale digest").unwrap();
    assert!(
        matches!(&step.outcome, Outcome::Differs(got) if got.contains("reads as LockHeld")),
        "{step:?}"
    );
}

/// A killed run's guests (in the pool, named and carrying its signed line) are deleted by the
/// next run's sweep; a guest in the pool that lacks a mark, one whose line is forged or copied,
/// a live run's, and a marked guest outside the pool are left alone.
#[tokio::test(start_paused = true)]
async fn the_sweep_deletes_a_killed_runs_guests_and_nothing_else() {
    let pve = fake();
    let s = setup(Scope::Full);
    let old = ("0a0a", 3 * 3600);
    pve.add_pool(CONFORMANCE_POOL);
    let name = "proxsync-conformance-vm";
    let vm = |vmid: u32, name: &str, line: &str, smbios1: &str| {
        pve.add_vm(
            vmid,
            "pve1",
            &[("name", name), ("description", line), ("smbios1", smbios1)],
        );
    };
    vm(
        200,
        name,
        &line_of(&s, 200, GuestKind::Qemu, UUID_A, old),
        UUID_A,
    );
    let ct_net = "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01";
    pve.add_guest(
        GuestKind::Lxc,
        201,
        "pve2",
        &[
            ("hostname", "proxsync-conformance-ct"),
            (
                "description",
                &line_of(&s, 201, GuestKind::Lxc, ct_net, old),
            ),
            ("net0", ct_net),
        ],
    );
    pve.edit_vm(201, |vm| vm.running = true);
    vm(
        202,
        "web-01",
        &line_of(&s, 202, GuestKind::Qemu, UUID_A, old),
        UUID_A,
    );
    vm(
        203,
        name,
        &line_of(&s, 203, GuestKind::Qemu, UUID_A, old),
        UUID_A,
    );
    // The public sentence alone; a line copied from another guest; another VMID's line.
    vm(204, name, &s.marker(), UUID_A);
    vm(
        205,
        name,
        &line_of(&s, 205, GuestKind::Qemu, UUID_A, old),
        UUID_B,
    );
    vm(
        206,
        name,
        &line_of(&s, 200, GuestKind::Qemu, UUID_A, old),
        UUID_A,
    );
    // A live run's (an hour old), and an ended one's as young (the lock's last holder).
    vm(
        207,
        name,
        &line_of(&s, 207, GuestKind::Qemu, UUID_A, ("0b0b", 3600)),
        UUID_A,
    );
    for vmid in [200, 201, 202, 204, 205, 206, 207] {
        pve.move_to_pool(CONFORMANCE_POOL, vmid).await.unwrap();
    }
    let mut report = Report::default();
    sweep(&pve, &s, &mut report).await;
    let all = listing(&report);
    assert!(pve.vm(200).is_none() && pve.vm(201).is_none(), "{all}");
    for vmid in 202..=207 {
        assert!(pve.vm(vmid).is_some(), "{vmid}: {all}");
    }
    assert_eq!(
        pve.pool(CONFORMANCE_POOL),
        Some(vec![202, 204, 205, 206, 207])
    );
    for (vmid, why) in [
        (202, "not the exercise's"),
        (204, "lacks the exercise's line"),
        (205, "does not verify"),
        (206, "does not verify"),
        (207, "run 0b0b, begun 3600s ago, which may still run"),
    ] {
        let left = report
            .step(&format!("sweep delete VM {vmid}"))
            .expect("reported");
        assert!(
            matches!(&left.outcome, Outcome::NotRun(w) if w.contains(why)),
            "{vmid}: {all}"
        );
    }
    assert!(
        report
            .step("sweep stop container 201 before its delete")
            .is_some(),
        "{all}"
    );
    assert!(report.differences().is_empty(), "{all}");
    // The run whose lock was free (it has ended): its young guest is swept.
    let ended = Setup {
        run: Run::new(vec!["0b0b".into()]),
        ..s.clone()
    };
    let mut report = Report::default();
    sweep(&pve, &ended, &mut report).await;
    assert!(pve.vm(207).is_none(), "{}", listing(&report));
}

/// A guest the sweep waits for (locked) is proven again after the wait: another guest at its
/// VMID by then (another identity), and it is left alone.
#[tokio::test(start_paused = true)]
async fn the_sweep_proves_a_guest_again_after_its_wait() {
    let pve = fake();
    let s = setup(Scope::Full);
    pve.add_pool(CONFORMANCE_POOL);
    let name = "proxsync-conformance-vm";
    for vmid in [200, 201] {
        let line = line_of(&s, vmid, GuestKind::Qemu, UUID_A, ("0a0a", 3 * 3600));
        let config = [
            ("name", name),
            ("description", &line),
            ("smbios1", UUID_A),
            ("lock", "backup"),
        ];
        pve.add_vm(vmid, "pve1", &config);
        pve.move_to_pool(CONFORMANCE_POOL, vmid).await.unwrap();
    }
    let swap = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        // 200: its backup ends, and meanwhile another guest took its VMID, its line copied.
        pve.edit_vm(200, |vm| {
            vm.config.remove("lock");
            vm.config.insert("smbios1".into(), UUID_B.into());
        });
        pve.edit_vm(201, |vm| {
            vm.config.remove("lock");
        });
    };
    let mut report = Report::default();
    tokio::join!(sweep(&pve, &s, &mut report), swap);
    let all = listing(&report);
    assert!(pve.vm(200).is_some(), "{all}");
    let left = report.step("sweep delete VM 200").expect("reported");
    assert!(
        matches!(&left.outcome, Outcome::NotRun(w) if w.contains("does not verify") || w.contains("changed while it waited")),
        "{all}"
    );
    assert!(
        pve.vm(201).is_none(),
        "the same guest, unlocked: deleted. {all}"
    );
}

/// A step of a scenario is not sent once the guest at its VMID is no longer the run's.
#[tokio::test(start_paused = true)]
async fn a_scenario_changes_nothing_once_its_vmid_holds_another_guest() {
    let pve = fake();
    let s = setup(Scope::Exercise);
    let mut report = Report::default();
    let vm = async { scenarios::vm(&pve, &s, &mut report).await };
    let swap = async {
        // Once the VM is made (its create takes no time): another guest at VMID 100.
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if pve.vm(101).is_some() {
                break;
            }
        }
        pve.edit_vm(100, |vm| {
            vm.config.insert("smbios1".into(), UUID_B.into());
        });
    };
    tokio::join!(vm, swap);
    let all = listing(&report);
    assert!(report.step("vm stop").is_none(), "never started: {all}");
    for name in ["vm resize", "vm start", "vm delete VM 100"] {
        let step = report.step(name).unwrap_or_else(|| panic!("{name}: {all}"));
        assert!(
            matches!(&step.outcome, Outcome::NotRun(w) if w.contains("does not verify")),
            "{name}: {all}"
        );
    }
    assert!(pve.vm(100).is_some(), "not deleted: {all}");
    assert!(!pve.vm(100).unwrap().running, "{all}");
}

#[test]
fn coverage_names_every_row_of_the_table_once() {
    let table: BTreeSet<&str> = crate::pve::texts::TEXTS.iter().map(|t| t.pattern).collect();
    let covered: Vec<&str> = COVERAGE.iter().map(|(p, _)| *p).collect();
    let unique: BTreeSet<&str> = covered.iter().copied().collect();
    assert_eq!(unique.len(), covered.len(), "a row is covered once");
    assert_eq!(unique, table);
    for (pattern, cover) in COVERAGE {
        if let Cover::OrOther(_, other) = cover {
            assert!(table.contains(other), "{pattern}: {other}");
        }
        if let Cover::Not(why) = cover {
            assert!(!why.is_empty(), "{pattern}");
        }
    }
}

#[test]
fn durations_keep_each_task_types_shortest_good_run() {
    let step = |task: &str, secs: u64, outcome: Outcome| Step {
        name: "x".into(),
        expected: Expect::Done,
        task: Some(task.into()),
        took: Duration::from_secs(secs),
        outcome,
        text: None,
    };
    let report = Report {
        steps: vec![
            step("qmclone", 9, Outcome::AsExpected),
            step("qmclone", 4, Outcome::AsExpected),
            step("qmclone", 1, Outcome::Differs("failed".into())),
            step("vzcreate", 3, Outcome::AsExpected),
        ],
    };
    let d = report.durations();
    assert_eq!(d["qmclone"], Duration::from_secs(4));
    assert_eq!(d["vzcreate"], Duration::from_secs(3));
    assert_eq!(d.len(), 2);
}
