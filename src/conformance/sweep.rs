//! The suite's pool: made when missing, and emptied of the guests it proves it made (a killed
//! run's too). Every delete goes through `gate::permit::exercise_delete`.

use super::{Expect, Outcome, Report, Setup, Step, marks, step};
use crate::gate::permit::{Made, Permit, exercise_delete, exercise_proof};
use crate::guest::{GuestId, GuestKind};
use crate::ownership::ExerciseLine;
use crate::pve::texts::Meaning;
use crate::pve::{Pve, TaskOutcome};

/// How long the sweep waits for a task that still holds a guest of the pool (a killed run's
/// clone, still copying).
const LOCK_WAIT_POLLS: u32 = 60;

/// Makes the pool if it is missing, then deletes every guest in it that
/// [`exercise_delete`] proves the suite's own, stopping it first if it runs. A guest it cannot
/// prove its own is left alone, and said so.
pub(crate) async fn sweep(pve: &impl Pve, setup: &Setup, report: &mut Report) {
    match pve.pool_vmids(&setup.pool).await {
        Ok(_) => {}
        Err(e) if e.meaning() == Some(Meaning::PoolMissing) => {
            let comment = "throwaway guests of proxsync's exercise: emptied by its next run";
            step(
                pve,
                setup,
                report,
                "pool create",
                Expect::Done,
                pve.create_pool(&setup.pool, comment),
            )
            .await;
        }
        Err(e) => {
            report.push(differs("pool read", format!("{e}")));
            return;
        }
    }
    let listing = match pve.vm_resources().await {
        Ok(l) => l,
        Err(e) => {
            report.push(differs("sweep: the listing", format!("{e}")));
            return;
        }
    };
    for guest in listing
        .guests
        .iter()
        .filter(|g| g.pool.as_deref() == Some(setup.pool.as_str()))
    {
        let Some(kind) = guest.guest_kind() else {
            continue;
        };
        delete_own(
            pve,
            setup,
            report,
            (kind, guest.vmid),
            "sweep",
            Whose::Sweep,
        )
        .await;
    }
}

/// Whose guest a delete expects.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Whose<'a> {
    /// This run's, with the identity it had when made (none: not read).
    Ours(Option<&'a GuestId>),
    /// Any run's that has ended: a sweep's. A live run's guests are left to it.
    Sweep,
}

/// What a proof found: where the guest is, the delete's permit, its identity, its lock and
/// the run that made it.
pub(crate) struct Proven {
    pub node: String,
    pub permit: Permit,
    pub identity: Option<GuestId>,
    pub lock: Option<String>,
    pub line: ExerciseLine,
}

/// Why a guest is not proven the suite's: a read failed (a difference), or it is not.
pub(crate) enum Unproven {
    Read(String),
    NotOurs(String),
}

/// The delete of guest `vmid` of `kind`, each step on evidence read right before it: proven
/// (the gate's [`exercise_delete`], and `whose`) before anything, again after a wait for its
/// lock, before its stop and before its delete, each time the same guest (identity) of the
/// same run. `Ok(true)`: deleted. `what`: the step's name prefix (`sweep`, `vm`, `ct`).
pub(crate) async fn delete_own(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    (kind, vmid): (GuestKind, u32),
    what: &str,
    whose: Whose<'_>,
) -> bool {
    let name = format!("{what} delete {}", kind.named(vmid));
    let first = match prove(pve, setup, kind, vmid).await {
        Ok(p) => p,
        Err(e) => return unproven(report, &name, e),
    };
    if let Err(why) = check_whose(setup, &first, whose) {
        report.not_run(&name, Expect::Done, format!("left alone: {why}"));
        return false;
    }
    if let Some(lock) = &first.lock
        && !wait_unlocked(pve, &first.node, kind, vmid).await
    {
        let why = format!(
            "left alone: it stays locked ({lock}); `{} unlock {vmid}` once no task holds it",
            kind.cli()
        );
        report.not_run(&name, Expect::Done, why);
        return false;
    }
    let now = match again(pve, setup, (kind, vmid), &first).await {
        Ok(p) => p,
        Err(e) => return unproven(report, &name, e),
    };
    if pve.vm_running(&now.node, kind, vmid).await.unwrap_or(false) {
        let stop = format!("{what} stop {} before its delete", kind.named(vmid));
        let request = pve.stop_vm(&now.node, kind, vmid, true);
        step(pve, setup, report, &stop, Expect::Done, request).await;
    }
    let last = match again(pve, setup, (kind, vmid), &first).await {
        Ok(p) => p,
        Err(e) => return unproven(report, &name, e),
    };
    let request = pve.delete_vm(&last.node, kind, vmid, true, true, &last.permit);
    step(pve, setup, report, &name, Expect::Done, request).await
}

fn unproven(report: &mut Report, name: &str, e: Unproven) -> bool {
    match e {
        Unproven::Read(got) => report.push(differs(name, got)),
        Unproven::NotOurs(why) => report.not_run(name, Expect::Done, format!("left alone: {why}")),
    }
    false
}

/// Whether the guest `proven` is the one `whose` expects.
fn check_whose(setup: &Setup, proven: &Proven, whose: Whose<'_>) -> Result<(), String> {
    let line = &proven.line;
    match whose {
        Whose::Ours(_) if line.run != setup.run.id => Err(format!(
            "it carries the line of run {}, not of this run {}",
            line.run, setup.run.id
        )),
        Whose::Ours(Some(want)) if proven.identity.as_ref() != Some(want) => Err(format!(
            "it is no longer the guest this run made ({want}): another guest holds the VMID"
        )),
        Whose::Ours(_) => Ok(()),
        Whose::Sweep => {
            let age = super::now_secs().saturating_sub(line.started);
            let live = line.run != setup.run.id
                && !setup.run.ended.contains(&line.run)
                && age < super::LIVE_RUN_SECS;
            match live {
                true => Err(format!(
                    "a guest of run {}, begun {age}s ago, which may still run: left to it",
                    line.run
                )),
                false => Ok(()),
            }
        }
    }
}

/// The proof redone: the same guest (identity) of the same run as `first`.
async fn again(
    pve: &impl Pve,
    setup: &Setup,
    (kind, vmid): (GuestKind, u32),
    first: &Proven,
) -> Result<Proven, Unproven> {
    let now = prove(pve, setup, kind, vmid).await?;
    if now.identity != first.identity || now.line.run != first.line.run {
        return Err(Unproven::NotOurs(format!(
            "{} changed while it waited: another guest holds the VMID",
            kind.named(vmid)
        )));
    }
    Ok(now)
}

/// The gate's proof, on evidence read now, that guest `vmid` is an exercise's.
pub(crate) async fn prove(
    pve: &impl Pve,
    setup: &Setup,
    kind: GuestKind,
    vmid: u32,
) -> Result<Proven, Unproven> {
    let e = evidence(pve, kind, vmid).await.map_err(Unproven::Read)?;
    let (prefix, marker) = (setup.prefix(), setup.marker());
    let identity = e.config.guest_id(kind);
    let mut tags = e.tags.clone();
    tags.extend(e.config.tags());
    let made = Made {
        vmid,
        kind,
        pool: e.pool.as_deref(),
        name: e.config.get(match kind {
            GuestKind::Qemu => "name",
            GuestKind::Lxc => "hostname",
        }),
        description: e.config.description(),
        template: e.template,
        identity: identity.as_ref(),
        tags: &tags,
        ha: e.ha,
    };
    let marks = marks(setup, &prefix, &marker);
    let line = exercise_proof(marks, made).map_err(|r| Unproven::NotOurs(r.into()))?;
    let permit =
        exercise_delete(&setup.site, marks, made).map_err(|r| Unproven::NotOurs(r.into()))?;
    Ok(Proven {
        node: e.node,
        permit,
        lock: e.config.lock().map(str::to_string),
        identity,
        line,
    })
}

/// What the cluster shows of a guest, read now.
struct Evidence {
    node: String,
    pool: Option<String>,
    config: crate::pve::types::VmConfig,
    template: bool,
    tags: Vec<String>,
    ha: bool,
}

/// Where guest `vmid` is, its pool, config, tags, HA state and whether it is a template,
/// read now.
async fn evidence(pve: &impl Pve, kind: GuestKind, vmid: u32) -> Result<Evidence, String> {
    let listing = pve.vm_resources().await.map_err(|e| e.to_string())?;
    let entry = listing
        .guests
        .into_iter()
        .find(|g| g.vmid == vmid && g.guest_kind() == Some(kind))
        .ok_or_else(|| format!("{} is not listed", kind.named(vmid)))?;
    let config = pve
        .vm_config(&entry.node, kind, vmid)
        .await
        .map_err(|e| e.to_string())?;
    let template = entry.template.unwrap_or(false) || config.get("template") == Some("1");
    // An HA resource the listing does not show yet still counts (a read refused proves
    // nothing either way; the listing's `hastate` is then the word).
    let ha = entry.hastate.is_some() || matches!(pve.ha_resource(kind, vmid).await, Ok(Some(_)));
    Ok(Evidence {
        tags: entry.tag_list().iter().map(ToString::to_string).collect(),
        node: entry.node.to_string(),
        pool: entry.pool,
        config,
        template,
        ha,
    })
}

/// Waits (a while) for the tasks on guest `vmid` to end and its lock to go: true once the
/// guest is unlocked.
async fn wait_unlocked(pve: &impl Pve, node: &str, kind: GuestKind, vmid: u32) -> bool {
    for _ in 0..LOCK_WAIT_POLLS {
        if let Ok(tasks) = pve.active_vm_tasks(node, vmid).await {
            for task in tasks {
                if let Ok(upid) = task.upid.parse() {
                    let _: Result<TaskOutcome, _> = pve
                        .wait_task(&upid, std::time::Duration::from_secs(30))
                        .await;
                }
            }
        }
        match pve.vm_config(node, kind, vmid).await {
            Ok(c) if c.lock().is_none() => return true,
            Ok(_) => tokio::time::sleep(std::time::Duration::from_secs(1)).await,
            Err(_) => return false,
        }
    }
    false
}

fn differs(name: &str, got: String) -> Step {
    Step {
        name: name.to_string(),
        expected: Expect::Done,
        task: None,
        took: std::time::Duration::ZERO,
        outcome: Outcome::Differs(got),
        text: None,
    }
}
