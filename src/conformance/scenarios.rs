//! The scenarios, one guest kind at a time. Each step names PVE's source for what it expects
//! where `pve::texts` does not already (the texts' rows name theirs).

use std::time::Duration;

use super::sweep::delete_own;
use super::{Expect, Outcome, Report, Scope, Setup, step, step_from};
use crate::guest::GuestKind;
use crate::pve::texts::Meaning;
use crate::pve::{CloneRequest, Error, Pve, VmParams};

/// How long a reboot's clean shutdown may take (a VM without an OS never answers it).
const REBOOT_TIMEOUT_SECS: u32 = 10;
/// How often, and how far apart, a probe of a clone's lock asks while the clone's new config is
/// not written yet.
const PROBE_TRIES: u32 = 20;
const PROBE_PAUSE: Duration = Duration::from_millis(100);

/// The VM's scenarios: create, (stale digest), clone (and its lock), (refusals of a taken
/// VMID), resize, (shrink), power, (migrate), delete.
pub(super) async fn vm(pve: &impl Pve, setup: &Setup, report: &mut Report) {
    let full = setup.scope == Scope::Full;
    let kind = GuestKind::Qemu;
    let Some(vmid) = next_id(pve, report, "vm create").await else {
        return;
    };
    let params = match vm_params(setup, "vm") {
        Ok(p) => p,
        Err(e) => return report.not_run("vm create", Expect::Done, e.to_string()),
    };
    let create = pve.create_vm(&setup.node, vmid, &params);
    if !step(pve, setup, report, "vm create", Expect::Done, create).await {
        return;
    }
    joined_pool(pve, setup, report, kind, vmid).await;
    if full {
        stale_digest(pve, setup, report, kind, vmid).await;
    }
    let clone = clone(pve, setup, report, kind, vmid).await;
    if let (true, Some(taken)) = (full, clone) {
        let req = clone_request(setup, taken, "vm-again");
        let again = pve.clone_vm(&setup.node, vmid, &req);
        let refused = Expect::Refused(Meaning::AlreadyExists);
        step(
            pve,
            setup,
            report,
            "vm clone onto a taken VMID",
            refused,
            again,
        )
        .await;
        let create = pve.create_vm(&setup.node, taken, &params);
        step(
            pve,
            setup,
            report,
            "vm create onto a taken VMID",
            refused,
            create,
        )
        .await;
    }
    resize(pve, setup, report, kind, vmid, "scsi0").await;
    power(pve, setup, report, kind, vmid).await;
    migrate(pve, setup, report, kind, vmid).await;
    if let Some(clone) = clone {
        delete_own(pve, setup, report, kind, clone, "vm").await;
    }
    delete_and_look(pve, setup, report, kind, vmid).await;
    if full {
        let missing = format!("{}-none", setup.pool);
        let read = async { pve.pool_vmids(&missing).await.map(|_| ()) };
        let refused = Expect::Refused(Meaning::PoolMissing);
        step(
            pve,
            setup,
            report,
            "pool read of a missing pool",
            refused,
            read,
        )
        .await;
    }
}

/// The container's scenarios: as the VM's, and the refusals pve-container makes of its own.
pub(super) async fn ct(pve: &impl Pve, setup: &Setup, report: &mut Report) {
    let full = setup.scope == Scope::Full;
    let kind = GuestKind::Lxc;
    let Some(template) = setup.ct_template.clone() else {
        let why = "no container template given (a vztmpl volume: `pveam download`)";
        return report.not_run("ct create", Expect::Done, why);
    };
    if full {
        refused_creates(pve, setup, report, &template).await;
    }
    let Some(vmid) = next_id(pve, report, "ct create").await else {
        return;
    };
    let params = match ct_params(setup, &template, "ct", None) {
        Ok(p) => p,
        Err(e) => return report.not_run("ct create", Expect::Done, e.to_string()),
    };
    let create = pve.create_ct(&setup.node, vmid, &params);
    if !step(pve, setup, report, "ct create", Expect::Done, create).await {
        return;
    }
    joined_pool(pve, setup, report, kind, vmid).await;
    if full {
        stale_digest(pve, setup, report, kind, vmid).await;
    }
    let clone = clone(pve, setup, report, kind, vmid).await;
    if let (true, Some(taken)) = (full, clone) {
        let create = pve.create_ct(&setup.node, taken, &params);
        let refused = Expect::Refused(Meaning::AlreadyExists);
        step(
            pve,
            setup,
            report,
            "ct create onto a taken VMID",
            refused,
            create,
        )
        .await;
    }
    resize(pve, setup, report, kind, vmid, "rootfs").await;
    power(pve, setup, report, kind, vmid).await;
    migrate(pve, setup, report, kind, vmid).await;
    if let Some(clone) = clone {
        delete_own(pve, setup, report, kind, clone, "ct").await;
    }
    delete_and_look(pve, setup, report, kind, vmid).await;
}

/// A free VMID (`/cluster/nextid`), or the step `what` not run.
async fn next_id(pve: &impl Pve, report: &mut Report, what: &str) -> Option<u32> {
    match pve.next_id().await {
        Ok(id) => Some(id),
        Err(e) => {
            report.not_run(what, Expect::Done, format!("no free VMID: {e}"));
            None
        }
    }
}

/// A small VM: 1 GiB disk, one NIC, in the pool, named and marked.
fn vm_params(setup: &Setup, suffix: &str) -> Result<VmParams, Error> {
    VmParams::new()
        .set("name", format!("{}{suffix}", setup.prefix()))
        .set("description", setup.marker())
        .set("memory", 128)
        .set("cores", 1)
        .checked("pool", &setup.pool)?
        .new_disk("scsi0", &setup.vm_storage, 1)?
        .nic("net0", &setup.bridge)
}

/// A small unprivileged container: 1 GiB root file system, one NIC (`mtu`, if given).
fn ct_params(
    setup: &Setup,
    template: &str,
    suffix: &str,
    mtu: Option<u32>,
) -> Result<VmParams, Error> {
    let mtu = mtu.map(|m| format!(",mtu={m}")).unwrap_or_default();
    VmParams::new()
        .set("hostname", format!("{}{suffix}", setup.prefix()))
        .set("description", setup.marker())
        .set("memory", 128)
        .set("cores", 1)
        .set("unprivileged", 1)
        .checked("ostemplate", template)?
        .checked("pool", &setup.pool)?
        .checked("rootfs", &format!("{}:1", setup.ct_storage))?
        .set("net0", format!("name=eth0,bridge={}{mtu}", setup.bridge))
        .checked("storage", &setup.ct_storage)
}

/// qemu-server's and pve-container's create and clone add the guest to the pool last in their
/// workers (`add_vm_to_pool`): the listing names it once the task ended.
async fn joined_pool(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    kind: GuestKind,
    vmid: u32,
) {
    let name = format!("{} joins its pool", kind_word(kind));
    let pool = pve.vm_resources().await.map(|l| {
        l.guests
            .into_iter()
            .find(|g| g.vmid == vmid)
            .and_then(|g| g.pool)
    });
    let got = match pool {
        Ok(Some(p)) if p == setup.pool => return check(report, &name, Ok(())),
        Ok(p) => format!("listed in pool {p:?}"),
        Err(e) => e.to_string(),
    };
    check(report, &name, Err(got));
}

/// A write with the digest read before an edit: refused, in each kind's words.
async fn stale_digest(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    kind: GuestKind,
    vmid: u32,
) {
    let name = format!("{} write with a stale digest", kind_word(kind));
    let node = &setup.node;
    let Ok(Some(digest)) = pve
        .vm_config(node, kind, vmid)
        .await
        .map(|c| c.digest().map(str::to_string))
    else {
        return report.not_run(&name, Expect::Done, "its config has no digest");
    };
    // Not the description: a write of it is the gate's (the marker's place).
    let edited = VmParams::new().set("cores", 2);
    let edit = pve.set_config(node, kind, vmid, &edited, Some(&digest));
    let what = format!("{} write with its digest", kind_word(kind));
    if !step(pve, setup, report, &what, Expect::Done, edit).await {
        return;
    }
    let back = VmParams::new().set("cores", 1);
    let stale = pve.set_config(node, kind, vmid, &back, Some(&digest));
    let refused = Expect::Refused(Meaning::DigestConflict);
    step(pve, setup, report, &name, refused, stale).await;
}

fn clone_request(setup: &Setup, newid: u32, suffix: &str) -> CloneRequest {
    CloneRequest {
        newid,
        name: format!("{}{suffix}", setup.prefix()),
        description: setup.marker(),
        full: true,
        storage: None,
        target: None,
        pool: Some(setup.pool.clone()),
    }
}

/// A full clone of the stopped guest `vmid`; in the full suite, a write meeting the clone's
/// lock while it copies (qemu-server clone_vm `create_and_lock_config($newid, 0, 'clone')` on
/// the new VM; pve-container clone_vm `set_lock($vmid, 'disk')` on the source). The clone's
/// VMID once it is done.
async fn clone(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    kind: GuestKind,
    vmid: u32,
) -> Option<u32> {
    let word = kind_word(kind);
    let name = format!("{word} clone");
    let newid = next_id(pve, report, &name).await?;
    let req = clone_request(setup, newid, &format!("{word}-clone"));
    let began = tokio::time::Instant::now();
    let started = match kind {
        GuestKind::Qemu => pve.clone_vm(&setup.node, vmid, &req).await,
        GuestKind::Lxc => pve.clone_ct(&setup.node, vmid, &req).await,
    };
    if let (Ok(_), Scope::Full) = (&started, setup.scope) {
        let locked = match kind {
            GuestKind::Qemu => newid,
            GuestKind::Lxc => vmid,
        };
        probe_lock(pve, setup, report, kind, locked).await;
    }
    let done = step_from(pve, setup, report, (&name, Expect::Done, began), async {
        started
    })
    .await;
    done.then_some(newid)
}

/// A write to guest `vmid` while a clone holds its lock: `VM is locked (clone)`, `CT is locked
/// (disk)`. A clone that ended before the write met no lock: not run.
async fn probe_lock(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    kind: GuestKind,
    vmid: u32,
) {
    let name = format!("{} write while a clone holds its lock", kind_word(kind));
    let params = VmParams::new().set("cores", 1);
    let mut answer = pve.set_config(&setup.node, kind, vmid, &params, None).await;
    // The new VM's config is written by the clone's worker, a moment after the answer.
    for _ in 0..PROBE_TRIES {
        match &answer {
            Err(e) if e.meaning() == Some(Meaning::NotFound) => {
                tokio::time::sleep(PROBE_PAUSE).await;
                answer = pve.set_config(&setup.node, kind, vmid, &params, None).await;
            }
            _ => break,
        }
    }
    let refused = Expect::Refused(Meaning::LockHeld);
    match answer {
        Ok(()) => report.not_run(
            &name,
            refused,
            "the clone ended before the write: no lock met",
        ),
        Err(e) => {
            step(pve, setup, report, &name, refused, async {
                Err::<(), _>(e)
            })
            .await;
        }
    }
}

/// Grows `disk` by 1 GiB and reads the size back; in the full suite, a resize to the size it
/// has and a shrink.
async fn resize(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    kind: GuestKind,
    vmid: u32,
    disk: &str,
) {
    let word = kind_word(kind);
    let node = &setup.node;
    let grow = pve.resize_disk(node, kind, vmid, disk, "+1G", None);
    if !step(
        pve,
        setup,
        report,
        &format!("{word} resize"),
        Expect::Done,
        grow,
    )
    .await
    {
        return;
    }
    let size = pve.vm_config(node, kind, vmid).await.ok().and_then(|c| {
        c.get(disk)
            .and_then(|v| v.split(',').find_map(|p| p.strip_prefix("size=")))
            .map(str::to_string)
    });
    let name = format!("{word} size after the resize");
    match size.as_deref() {
        Some("2G") => check(report, &name, Ok(())),
        other => check(report, &name, Err(format!("{disk} size={other:?}, not 2G"))),
    }
    if setup.scope != Scope::Full {
        return;
    }
    if kind == GuestKind::Lxc {
        let same = pve.resize_disk(node, kind, vmid, disk, "2G", None);
        let refused = Expect::Refused(Meaning::AlreadyAtSize);
        step(
            pve,
            setup,
            report,
            "ct resize to the size it has",
            refused,
            same,
        )
        .await;
    }
    let shrink = pve.resize_disk(node, kind, vmid, disk, "1G", None);
    let refused = Expect::Refused(Meaning::Refused);
    step(
        pve,
        setup,
        report,
        &format!("{word} shrink"),
        refused,
        shrink,
    )
    .await;
}

/// Start and stop; in the full suite, the refusals of a power request in the wrong state, a
/// reboot, and (a container) a full clone while it runs.
async fn power(pve: &impl Pve, setup: &Setup, report: &mut Report, kind: GuestKind, vmid: u32) {
    let word = kind_word(kind);
    let (node, full) = (&setup.node, setup.scope == Scope::Full);
    let not_running = Expect::Refused(Meaning::NotRunning);
    if full {
        let reboot = pve.reboot_vm(node, kind, vmid, REBOOT_TIMEOUT_SECS);
        step(
            pve,
            setup,
            report,
            &format!("{word} reboot while stopped"),
            not_running,
            reboot,
        )
        .await;
        if kind == GuestKind::Lxc {
            let stop = pve.stop_vm(node, kind, vmid, false);
            step(
                pve,
                setup,
                report,
                "ct stop while stopped",
                not_running,
                stop,
            )
            .await;
        }
    }
    let start = pve.start_vm(node, kind, vmid);
    if !step(
        pve,
        setup,
        report,
        &format!("{word} start"),
        Expect::Done,
        start,
    )
    .await
    {
        return;
    }
    if full {
        let again = pve.start_vm(node, kind, vmid);
        let running = Expect::Refused(Meaning::AlreadyRunning);
        step(
            pve,
            setup,
            report,
            &format!("{word} start while running"),
            running,
            again,
        )
        .await;
        if kind == GuestKind::Lxc {
            running_clone(pve, setup, report, vmid).await;
        }
        reboot(pve, setup, report, kind, vmid).await;
    }
    let stop = pve.stop_vm(node, kind, vmid, false);
    step(
        pve,
        setup,
        report,
        &format!("{word} stop"),
        Expect::Done,
        stop,
    )
    .await;
}

/// A full clone of a running container: refused before anything is made.
async fn running_clone(pve: &impl Pve, setup: &Setup, report: &mut Report, vmid: u32) {
    let Some(newid) = next_id(pve, report, "ct full clone while running").await else {
        return;
    };
    let req = clone_request(setup, newid, "ct-running-clone");
    let clone = pve.clone_ct(&setup.node, vmid, &req);
    let refused = Expect::Refused(Meaning::Refused);
    step(
        pve,
        setup,
        report,
        "ct full clone while running",
        refused,
        clone,
    )
    .await;
}

/// A reboot: done. A VM without an OS never answers the shutdown a reboot begins with, so its
/// reboot failing with qemu-server's `VM quit/powerdown failed` is noted, not a difference.
async fn reboot(pve: &impl Pve, setup: &Setup, report: &mut Report, kind: GuestKind, vmid: u32) {
    let name = format!("{} reboot", kind_word(kind));
    let reboot = pve.reboot_vm(&setup.node, kind, vmid, REBOOT_TIMEOUT_SECS);
    step(pve, setup, report, &name, Expect::Done, reboot).await;
    let Some(last) = report.steps.last_mut() else {
        return;
    };
    if let (GuestKind::Qemu, Outcome::Differs(got)) = (kind, &last.outcome)
        && got.contains("powerdown failed")
    {
        last.outcome = Outcome::Noted(format!("a VM without an OS ignores ACPI: {got}"));
    }
}

/// An offline migration to the other node and back.
async fn migrate(pve: &impl Pve, setup: &Setup, report: &mut Report, kind: GuestKind, vmid: u32) {
    let word = kind_word(kind);
    if setup.scope != Scope::Full {
        return;
    }
    let Some(other) = setup.other_node.as_deref() else {
        return report.not_run(
            &format!("{word} migrate"),
            Expect::Done,
            "one node: nowhere to go",
        );
    };
    for (from, to, name) in [
        (setup.node.as_str(), other, format!("{word} migrate")),
        (other, setup.node.as_str(), format!("{word} migrate back")),
    ] {
        let request = async {
            match kind {
                GuestKind::Qemu => pve.migrate_vm(from, vmid, to, false, true).await,
                GuestKind::Lxc => pve.migrate_ct(from, vmid, to, false, 60).await,
            }
        };
        if !step(pve, setup, report, &name, Expect::Done, request).await {
            return;
        }
    }
}

/// Deletes guest `vmid` (the gate's exercise permit), then reads its config: gone, in PVE's
/// words for a missing config.
async fn delete_and_look(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    kind: GuestKind,
    vmid: u32,
) {
    let word = kind_word(kind);
    if !delete_own(pve, setup, report, kind, vmid, word).await || setup.scope != Scope::Full {
        return;
    }
    let read = pve.vm_config(&setup.node, kind, vmid);
    let gone = Expect::Refused(Meaning::NotFound);
    step(
        pve,
        setup,
        report,
        &format!("{word} config after its delete"),
        gone,
        async { read.await.map(|_| ()) },
    )
    .await;
}

/// Creates pve-container refuses before making anything (`LXC/Config.pm` update_pct_config's
/// MTU check, pve-storage parse_volname's archive names).
async fn refused_creates(pve: &impl Pve, setup: &Setup, report: &mut Report, template: &str) {
    let Some(vmid) = next_id(pve, report, "ct create refused").await else {
        return;
    };
    let refused = Expect::Refused(Meaning::Refused);
    if let Ok(params) = ct_params(setup, template, "ct-mtu", Some(65520)) {
        let create = pve.create_ct(&setup.node, vmid, &params);
        step(
            pve,
            setup,
            report,
            "ct create with an MTU above its bridge's",
            refused,
            create,
        )
        .await;
    }
    let storage = template.split_once(':').map_or("local", |(s, _)| s);
    let tgz = format!("{storage}:vztmpl/{}archive.tgz", setup.prefix());
    if let Ok(params) = ct_params(setup, &tgz, "ct-tgz", None) {
        let create = pve.create_ct(&setup.node, vmid, &params);
        step(
            pve,
            setup,
            report,
            "ct create from a .tgz archive",
            refused,
            create,
        )
        .await;
    }
}

fn kind_word(kind: GuestKind) -> &'static str {
    match kind {
        GuestKind::Qemu => "vm",
        GuestKind::Lxc => "ct",
    }
}

/// A check of what a read shows (no request of its own): as expected, or what it shows.
fn check(report: &mut Report, name: &str, result: Result<(), String>) {
    report.push(super::Step {
        name: name.to_string(),
        expected: Expect::Done,
        task: None,
        took: Duration::ZERO,
        outcome: match result {
            Ok(()) => Outcome::AsExpected,
            Err(got) => Outcome::Differs(got),
        },
        text: None,
    });
}
