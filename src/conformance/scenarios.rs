//! The scenarios, one guest kind at a time. Each step names PVE's source for what it expects
//! where `pve::texts` does not already (the texts' rows name theirs).

use std::time::Duration;

use super::sweep::{Whose, delete_own, prove};
use super::{Expect, Outcome, Report, Scope, Setup, step, step_from};
use crate::guest::{GuestId, GuestKind};
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
    let own = Own::new(kind, vmid);
    let params = match vm_params(setup, "vm", &own) {
        Ok(p) => p,
        Err(e) => return report.not_run("vm create", Expect::Done, e.to_string()),
    };
    let create = pve.create_vm(&setup.node, vmid, &params);
    if !step(pve, setup, report, "vm create", Expect::Done, create).await {
        return;
    }
    joined_pool(pve, setup, report, kind, vmid).await;
    if full {
        stale_digest(pve, setup, report, &own).await;
    }
    let clone = clone(pve, setup, report, &own).await;
    if let (true, Some(taken)) = (full, clone.as_ref().map(|c| c.vmid)) {
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
    life(pve, setup, report, &own, "scsi0", clone).await;
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
    let own = Own::new(kind, vmid);
    let params = match ct_params(setup, &template, ("ct", &own), None) {
        Ok(p) => p,
        Err(e) => return report.not_run("ct create", Expect::Done, e.to_string()),
    };
    let create = pve.create_ct(&setup.node, vmid, &params);
    if !step(pve, setup, report, "ct create", Expect::Done, create).await {
        return;
    }
    joined_pool(pve, setup, report, kind, vmid).await;
    if full {
        stale_digest(pve, setup, report, &own).await;
    }
    let clone = clone(pve, setup, report, &own).await;
    if let (true, Some(taken)) = (full, clone.as_ref().map(|c| c.vmid)) {
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
    life(pve, setup, report, &own, "rootfs", clone).await;
}

/// What both kinds go through once made: `disk` grown, power, migration, then the clone and
/// the guest deleted.
async fn life(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    own: &Own,
    disk: &str,
    clone: Option<Own>,
) {
    resize(pve, setup, report, own, disk).await;
    power(pve, setup, report, own).await;
    migrate(pve, setup, report, own).await;
    if let Some(clone) = clone {
        let word = kind_word(own.kind);
        delete_own(
            pve,
            setup,
            report,
            (own.kind, clone.vmid),
            word,
            clone.whose(),
        )
        .await;
    }
    delete_and_look(pve, setup, report, own).await;
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

/// A guest this run made: its identity, chosen before its create (a VM's smbios1 uuid, a
/// container's first NIC's MAC) or read right after its clone, which every changing step
/// checks again first ([`ours`]).
#[derive(Debug, Clone)]
struct Own {
    kind: GuestKind,
    vmid: u32,
    id: Option<GuestId>,
}

impl Own {
    /// Guest `vmid` to be made, with a new random identity.
    fn new(kind: GuestKind, vmid: u32) -> Own {
        Own {
            kind,
            vmid,
            id: Some(new_identity(kind)),
        }
    }

    fn whose(&self) -> Whose<'_> {
        Whose::Ours(self.id.as_ref())
    }

    /// The identity's value as a config writes it.
    fn value(&self) -> Option<&str> {
        self.id.as_ref().map(|id| match id {
            GuestId::Uuid(v) | GuestId::Hwaddr(v) => v.as_str(),
        })
    }
}

/// A random identity: a version-4 uuid for a VM, a MAC of PVE's prefix for a container.
fn new_identity(kind: GuestKind) -> GuestId {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        // Near impossible; then the uid's fallback (time and PID) is random enough.
        let u = crate::ownership::new_uid();
        b[..8].copy_from_slice(&u64::from_str_radix(&u, 16).unwrap_or(1).to_be_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    let id = match kind {
        GuestKind::Qemu => {
            let uuid = format!(
                "{}-{}-{}-{}-{}",
                hex(0..4),
                hex(4..6),
                hex(6..8),
                hex(8..10),
                hex(10..16)
            );
            GuestId::uuid(&uuid)
        }
        GuestKind::Lxc => {
            let mac = format!("BC:24:11:{:02X}:{:02X}:{:02X}", b[0], b[1], b[2] | 1);
            GuestId::hwaddr(&mac)
        }
    };
    id.expect("a well-formed identity")
}

/// Whether guest `own` is still this run's, read now (its identity, this run's signed line),
/// before a step named `name` changes it; not: the step is not run, and said why.
async fn ours(pve: &impl Pve, setup: &Setup, report: &mut Report, own: &Own, name: &str) -> bool {
    let why = match prove(pve, setup, own.kind, own.vmid).await {
        Ok(p) if p.line.run != setup.run.id => format!("it carries run {}'s line", p.line.run),
        Ok(p) if own.id.is_some() && p.identity != own.id => {
            "its identity changed: another guest holds the VMID".to_string()
        }
        Ok(_) => return true,
        Err(super::sweep::Unproven::Read(e) | super::sweep::Unproven::NotOurs(e)) => e,
    };
    let why = format!(
        "{} is not this run's guest now: {why}",
        own.kind.named(own.vmid)
    );
    report.not_run(name, Expect::Done, why);
    false
}

/// A small VM: 1 GiB disk, one NIC (its link down), in the pool, named and marked.
fn vm_params(setup: &Setup, suffix: &str, own: &Own) -> Result<VmParams, Error> {
    let off = [
        ("bridge".to_string(), setup.bridge.clone()),
        ("link_down".to_string(), "1".to_string()),
    ];
    let mut params = VmParams::new()
        .set("name", format!("{}{suffix}", setup.prefix()))
        .set("description", setup.marker_line(own.vmid, own.id.as_ref()))
        .set("memory", 128)
        .set("cores", 1);
    if let Some(uuid) = own.value() {
        params = params.property("smbios1", None, &[("uuid", uuid.to_string())])?;
    }
    params
        .checked("pool", &setup.pool)?
        .new_disk("scsi0", &setup.vm_storage, 1)?
        .nic_with("net0", "virtio", None, &off)
}

/// A small unprivileged container: 1 GiB root file system, one NIC (its link down, its MAC
/// the identity; `mtu`, if given).
fn ct_params(
    setup: &Setup,
    template: &str,
    (suffix, own): (&str, &Own),
    mtu: Option<u32>,
) -> Result<VmParams, Error> {
    let mut net = vec![
        ("name", "eth0".to_string()),
        ("bridge", setup.bridge.clone()),
    ];
    net.extend(own.value().map(|m| ("hwaddr", m.to_string())));
    net.push(("link_down", "1".to_string()));
    net.extend(mtu.map(|m| ("mtu", m.to_string())));
    VmParams::new()
        .set("hostname", format!("{}{suffix}", setup.prefix()))
        .set("description", setup.marker_line(own.vmid, own.id.as_ref()))
        .set("memory", 128)
        .set("cores", 1)
        .set("unprivileged", 1)
        .checked("ostemplate", template)?
        .checked("pool", &setup.pool)?
        .checked("rootfs", &format!("{}:1", setup.ct_storage))?
        .property("net0", None, &net)?
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
async fn stale_digest(pve: &impl Pve, setup: &Setup, report: &mut Report, own: &Own) {
    let (kind, vmid) = (own.kind, own.vmid);
    let name = format!("{} write with a stale digest", kind_word(kind));
    let what = format!("{} write with its digest", kind_word(kind));
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
    if !ours(pve, setup, report, own, &what).await {
        return;
    }
    let edit = pve.set_config(node, kind, vmid, &edited, Some(&digest));
    if !step(pve, setup, report, &what, Expect::Done, edit).await {
        return;
    }
    let back = VmParams::new().set("cores", 1);
    if !ours(pve, setup, report, own, &name).await {
        return;
    }
    let stale = pve.set_config(node, kind, vmid, &back, Some(&digest));
    let refused = Expect::Refused(Meaning::DigestConflict);
    step(pve, setup, report, &name, refused, stale).await;
}

/// A clone's request: its line signed for VMID `newid` alone (PVE picks its identity).
fn clone_request(setup: &Setup, newid: u32, suffix: &str) -> CloneRequest {
    CloneRequest {
        newid,
        name: format!("{}{suffix}", setup.prefix()),
        description: setup.marker_line(newid, None),
        full: true,
        storage: None,
        target: None,
        pool: Some(setup.pool.clone()),
    }
}

/// A full clone of the stopped guest `own`; in the full suite, a write meeting the clone's
/// lock while it copies (qemu-server clone_vm `create_and_lock_config($newid, 0, 'clone')` on
/// the new VM; pve-container clone_vm `set_lock($vmid, 'disk')` on the source). The clone,
/// with the identity PVE gave it, once it is done.
async fn clone(pve: &impl Pve, setup: &Setup, report: &mut Report, own: &Own) -> Option<Own> {
    let (kind, vmid) = (own.kind, own.vmid);
    let word = kind_word(kind);
    let name = format!("{word} clone");
    let newid = next_id(pve, report, &name).await?;
    let req = clone_request(setup, newid, &format!("{word}-clone"));
    if !ours(pve, setup, report, own, &name).await {
        return None;
    }
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
    if !done {
        return None;
    }
    let id = prove(pve, setup, kind, newid)
        .await
        .ok()
        .and_then(|p| p.identity);
    Some(Own {
        kind,
        vmid: newid,
        id,
    })
}

/// A write to guest `vmid` while a clone holds its lock: `VM is locked (clone)`, `CT is locked
/// (disk)`. Only ever sent to a locked guest, which refuses it whoever's it is: a guest found
/// unlocked (the clone ended) is not written, and the step not run.
async fn probe_lock(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    kind: GuestKind,
    vmid: u32,
) {
    let name = format!("{} write while a clone holds its lock", kind_word(kind));
    let refused = Expect::Refused(Meaning::LockHeld);
    // The new VM's config is written by the clone's worker, a moment after the answer.
    for _ in 0..PROBE_TRIES {
        match pve.vm_config(&setup.node, kind, vmid).await {
            Err(e) if e.meaning() == Some(Meaning::NotFound) => {
                tokio::time::sleep(PROBE_PAUSE).await;
            }
            Ok(c) if c.lock().is_some() => {
                let params = VmParams::new().set("cores", 1);
                let write = pve.set_config(&setup.node, kind, vmid, &params, None);
                match write.await {
                    Ok(()) => break,
                    Err(e) => {
                        step(pve, setup, report, &name, refused, async {
                            Err::<(), _>(e)
                        })
                        .await;
                        return;
                    }
                }
            }
            _ => break,
        }
    }
    report.not_run(
        &name,
        refused,
        "the clone ended before the write: no lock met",
    );
}

/// Grows `disk` by 1 GiB and reads the size back; in the full suite, a resize to the size it
/// has and a shrink.
async fn resize(pve: &impl Pve, setup: &Setup, report: &mut Report, own: &Own, disk: &str) {
    let (kind, vmid) = (own.kind, own.vmid);
    let word = kind_word(kind);
    let node = &setup.node;
    let name = format!("{word} resize");
    if !ours(pve, setup, report, own, &name).await {
        return;
    }
    let grow = pve.resize_disk(node, kind, vmid, disk, "+1G", None);
    if !step(pve, setup, report, &name, Expect::Done, grow).await {
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
        let name = "ct resize to the size it has";
        let refused = Expect::Refused(Meaning::AlreadyAtSize);
        if ours(pve, setup, report, own, name).await {
            let same = pve.resize_disk(node, kind, vmid, disk, "2G", None);
            step(pve, setup, report, name, refused, same).await;
        }
    }
    let name = format!("{word} shrink");
    if !ours(pve, setup, report, own, &name).await {
        return;
    }
    let shrink = pve.resize_disk(node, kind, vmid, disk, "1G", None);
    let refused = Expect::Refused(Meaning::Refused);
    step(pve, setup, report, &name, refused, shrink).await;
}

/// One power request to guest `own`, once [`ours`] says it is still this run's.
async fn power_step<A: super::Answer>(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    (own, name, expected): (&Own, &str, Expect),
    request: impl std::future::Future<Output = Result<A, Error>>,
) -> bool {
    if !ours(pve, setup, report, own, name).await {
        return false;
    }
    step(pve, setup, report, name, expected, request).await
}

/// Start and stop; in the full suite, the refusals of a power request in the wrong state, a
/// reboot, and (a container) a full clone while it runs.
async fn power(pve: &impl Pve, setup: &Setup, report: &mut Report, own: &Own) {
    let (kind, vmid) = (own.kind, own.vmid);
    let word = kind_word(kind);
    let (node, full) = (&setup.node, setup.scope == Scope::Full);
    let not_running = Expect::Refused(Meaning::NotRunning);
    if full {
        let name = format!("{word} reboot while stopped");
        let reboot = pve.reboot_vm(node, kind, vmid, REBOOT_TIMEOUT_SECS);
        power_step(pve, setup, report, (own, &name, not_running), reboot).await;
        if kind == GuestKind::Lxc {
            let stop = pve.stop_vm(node, kind, vmid, false);
            let what = (own, "ct stop while stopped", not_running);
            power_step(pve, setup, report, what, stop).await;
        }
    }
    let name = format!("{word} start");
    let start = pve.start_vm(node, kind, vmid);
    if !power_step(pve, setup, report, (own, &name, Expect::Done), start).await {
        return;
    }
    if full {
        let name = format!("{word} start while running");
        let again = pve.start_vm(node, kind, vmid);
        let running = Expect::Refused(Meaning::AlreadyRunning);
        power_step(pve, setup, report, (own, &name, running), again).await;
        if kind == GuestKind::Lxc {
            running_clone(pve, setup, report, own).await;
        }
        reboot(pve, setup, report, own).await;
    }
    let name = format!("{word} stop");
    let stop = pve.stop_vm(node, kind, vmid, false);
    power_step(pve, setup, report, (own, &name, Expect::Done), stop).await;
}

/// A full clone of a running container: refused before anything is made.
async fn running_clone(pve: &impl Pve, setup: &Setup, report: &mut Report, own: &Own) {
    let name = "ct full clone while running";
    let Some(newid) = next_id(pve, report, name).await else {
        return;
    };
    let req = clone_request(setup, newid, "ct-running-clone");
    let clone = pve.clone_ct(&setup.node, own.vmid, &req);
    let refused = Expect::Refused(Meaning::Refused);
    power_step(pve, setup, report, (own, name, refused), clone).await;
}

/// A reboot: done. A VM without an OS never answers the shutdown a reboot begins with, so its
/// reboot failing with qemu-server's `VM quit/powerdown failed` is noted, not a difference.
async fn reboot(pve: &impl Pve, setup: &Setup, report: &mut Report, own: &Own) {
    let kind = own.kind;
    let name = format!("{} reboot", kind_word(kind));
    let reboot = pve.reboot_vm(&setup.node, kind, own.vmid, REBOOT_TIMEOUT_SECS);
    if !power_step(pve, setup, report, (own, &name, Expect::Done), reboot).await {
        return;
    }
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
async fn migrate(pve: &impl Pve, setup: &Setup, report: &mut Report, own: &Own) {
    let (kind, vmid) = (own.kind, own.vmid);
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
        if !power_step(pve, setup, report, (own, &name, Expect::Done), request).await {
            return;
        }
    }
}

/// Deletes guest `own` (the gate's exercise permit), then reads its config: gone, in PVE's
/// words for a missing config.
async fn delete_and_look(pve: &impl Pve, setup: &Setup, report: &mut Report, own: &Own) {
    let (kind, vmid) = (own.kind, own.vmid);
    let word = kind_word(kind);
    let deleted = delete_own(pve, setup, report, (kind, vmid), word, own.whose()).await;
    if !deleted || setup.scope != Scope::Full {
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
    let own = Own::new(GuestKind::Lxc, vmid);
    if let Ok(params) = ct_params(setup, template, ("ct-mtu", &own), Some(65520)) {
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
    if let Ok(params) = ct_params(setup, &tgz, ("ct-tgz", &own), None) {
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
