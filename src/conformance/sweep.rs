//! The suite's pool: made when missing, and emptied of the guests it proves it made (a killed
//! run's too). Every delete goes through `gate::permit::exercise_delete`.

use super::{Expect, Outcome, Report, Setup, Step, marks, step};
use crate::gate::permit::{Made, exercise_delete};
use crate::guest::GuestKind;
use crate::pve::texts::Meaning;
use crate::pve::{Pve, TaskOutcome};

/// How long the sweep waits for a task that still holds a guest of the pool (a killed run's
/// clone, still copying).
const LOCK_WAIT_POLLS: u32 = 60;

/// Makes the pool if it is missing, then deletes every guest in it that
/// [`exercise_delete`] proves the suite's own, stopping it first if it runs. A guest it cannot
/// prove its own is left alone, and said so.
pub async fn sweep(pve: &impl Pve, setup: &Setup, report: &mut Report) {
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
        delete_own(pve, setup, report, kind, guest.vmid, "sweep").await;
    }
}

/// The delete of guest `vmid` of `kind`, on the evidence read now (its listing entry and
/// config): stopped first if it runs, waited for while a task holds it locked. `Ok(true)`:
/// deleted. `what`: the step's name prefix (`sweep`, `vm`, `ct`).
pub(crate) async fn delete_own(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    kind: GuestKind,
    vmid: u32,
    what: &str,
) -> bool {
    let name = format!("{what} delete {}", kind.named(vmid));
    let (node, pool, config, template) = match evidence(pve, kind, vmid).await {
        Ok(e) => e,
        Err(e) => {
            report.push(differs(&name, e));
            return false;
        }
    };
    let (prefix, marker) = (setup.prefix(), setup.marker());
    let made = Made {
        vmid,
        kind,
        pool: pool.as_deref(),
        name: config.get(match kind {
            GuestKind::Qemu => "name",
            GuestKind::Lxc => "hostname",
        }),
        description: config.description(),
        template,
    };
    let permit = match exercise_delete(&setup.site, marks(setup, &prefix, &marker), made) {
        Ok(p) => p,
        Err(why) => {
            report.not_run(&name, Expect::Done, format!("left alone: {why}"));
            return false;
        }
    };
    if config.lock().is_some() && !wait_unlocked(pve, &node, kind, vmid).await {
        let why = format!(
            "left alone: it stays locked ({}); `{} unlock {vmid}` once no task holds it",
            config.lock().unwrap_or_default(),
            kind.cli()
        );
        report.not_run(&name, Expect::Done, why);
        return false;
    }
    if pve.vm_running(&node, kind, vmid).await.unwrap_or(false) {
        let stop = format!("{what} stop {} before its delete", kind.named(vmid));
        let request = pve.stop_vm(&node, kind, vmid, true);
        step(pve, setup, report, &stop, Expect::Done, request).await;
    }
    let request = pve.delete_vm(&node, kind, vmid, true, true, &permit);
    step(pve, setup, report, &name, Expect::Done, request).await
}

/// Where guest `vmid` is, its pool, config and whether it is a template, read now.
async fn evidence(
    pve: &impl Pve,
    kind: GuestKind,
    vmid: u32,
) -> Result<(String, Option<String>, crate::pve::types::VmConfig, bool), String> {
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
    Ok((entry.node, entry.pool, config, template))
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
