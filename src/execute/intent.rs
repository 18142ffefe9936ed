//! What an intent's VMID holds now: the VM the create made (found, recorded as created), a
//! create still in flight (its task, its lock, the request window), or nothing. Create, resume,
//! hand-over and remove all judge an intent by it.

use crate::guest::GuestKind;
use crate::model::Wait;
use crate::pve::{LockHolder, Pve, Upid};
use crate::store::{CloneSource, SpecRecord, VmState};

use super::identity::{checked_site, verified};
use super::{ActionError, ExecCtx, SiteCtx};
use crate::gate::site::SiteChecked;
use crate::pve::types::VmConfig;

/// The VM of an intent exists on `node`: the record maps the spec to it, and the VMID
/// reservation goes in the same transaction (PVE itself now keeps the id taken).
pub(super) fn record_created(
    ctx: &ExecCtx<impl Pve>,
    spec_name: &str,
    rec: &mut SpecRecord,
    vmid: u32,
    node: &str,
) -> Result<(), ActionError> {
    rec.provisioned = true;
    let made = VmState::Exists {
        vmid,
        node: node.into(),
    };
    ctx.store.transition(spec_name, rec, made)?;
    Ok(())
}

/// What a read of the VMID reserved by a create intent shows.
#[derive(Debug)]
pub(super) enum Found {
    /// Our VM, complete: unlocked by a create or clone, carrying this spec's marker; on this
    /// node.
    Ours(String),
    /// Something that may still become our VM: a config locked by a create or clone, a
    /// running task that could be ours, or a request that may still arrive (`wait`). `upid`:
    /// the one task that can be making it, when there is exactly one.
    Busy { wait: Wait, upid: Option<Upid> },
    /// A config locked by a create or clone that no running task can hold: an interrupted
    /// create. Never judged foreign: a human decides.
    Stale { lock: String, node: String },
    /// A complete VM without this spec's marker, as three reads agree (and named otherwise than
    /// the spec's guest): someone else's; ours was never made.
    Foreign,
    /// Nothing at the VMID and nothing that could still make it.
    Free,
}

/// What is known of a create intent's request when its VMID is inspected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Known {
    /// Nothing: the request may still be on its way (a create resumed after a restart).
    Nothing,
    /// The task recorded for the intent ended, so no request is on its way. The UPID may have
    /// been found after a restart (the one running clone of the template), not answered.
    TaskEnded,
    /// The task PVE answered this action's own request with ended: the intent's only request.
    /// Another running clone of the template makes another VMID (each intent sends one
    /// request, and every earlier intent for this VMID was settled before it was freed), so
    /// when the VMID holds nothing, nothing of ours can still appear there. PVE removes a
    /// failed clone's config before its task ends (qemu-server `PVE/API2/Qemu.pm` `clone_vm`:
    /// `unlink $conffile; # avoid races -> last thing before die`).
    OwnTaskEnded,
}

/// Reads what became of a create intent (the invariant: a VM at a VMID reserved by an intent
/// is never judged foreign while it may still be ours). `settled`: the request's task is
/// known to have ended, so no request can still be on its way.
pub(super) async fn inspect(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec_name: &str,
    rec: &SpecRecord,
    kind: GuestKind,
    vmid: u32,
    settled: bool,
) -> Result<Found, ActionError> {
    let known = if settled {
        Known::TaskEnded
    } else {
        Known::Nothing
    };
    inspect_known(ctx, site, spec_name, rec, kind, vmid, known).await
}

/// [`inspect`], with what is known of the intent's request.
pub(super) async fn inspect_known(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec_name: &str,
    rec: &SpecRecord,
    kind: GuestKind,
    vmid: u32,
    known: Known,
) -> Result<Found, ActionError> {
    let settled = known != Known::Nothing;
    let VmState::Creating {
        node: intent_node,
        started_ms,
        clone_of,
        ..
    } = &rec.vm
    else {
        return Ok(Found::Free);
    };
    let checked = checked_site(ctx, &site.name)?;
    let nodes = candidate_nodes(ctx, site, vmid, intent_node, clone_of.as_ref());
    let found = first_config(site, &nodes, kind, vmid).await?;
    let creating_lock = |lock: &str| lock == "create" || lock == "clone";
    match found {
        Some((node, cfg)) => match cfg.lock() {
            Some(lock) if creating_lock(lock) => {
                let tasks =
                    creator_tasks(site, vmid, &node, clone_of.as_ref(), *started_ms).await?;
                if !tasks.is_empty() {
                    return Ok(busy(kind, vmid, lock, tasks));
                }
                if !settled && within_request_window(ctx, site, *started_ms) {
                    // The task listing may lag behind the config it wrote.
                    return Ok(Found::Busy {
                        wait: Wait::JustLocked {
                            kind,
                            vmid,
                            lock: lock.to_string(),
                        },
                        upid: None,
                    });
                }
                Ok(Found::Stale {
                    lock: lock.to_string(),
                    node,
                })
            }
            _ if verified(
                ctx,
                &checked,
                &cfg,
                kind,
                vmid,
                Some(spec_name),
                Some(&rec.uid),
            )
            .is_ok() =>
            {
                // pve-container writes a new container's whole config, without the lock,
                // partway through its `vzcreate` (after the OS detection): its task, not the
                // lock, says when it is made.
                if kind == GuestKind::Lxc && !settled {
                    let tasks =
                        creator_tasks(site, vmid, &node, clone_of.as_ref(), *started_ms).await?;
                    if !tasks.is_empty() {
                        return Ok(busy(kind, vmid, "create", tasks));
                    }
                }
                Ok(Found::Ours(node))
            }
            _ => corroborated(ctx, site, &checked, spec_name, rec, kind, vmid, node, &cfg).await,
        },
        None => {
            // After this action's own task ended, the template's other clones make other VMs.
            let clone_of = clone_of.as_ref().filter(|_| known != Known::OwnTaskEnded);
            let tasks = creator_tasks(site, vmid, intent_node, clone_of, *started_ms).await?;
            if !tasks.is_empty() {
                return Ok(busy(kind, vmid, "create", tasks));
            }
            if !settled && within_request_window(ctx, site, *started_ms) {
                let ago_secs = ctx.clock.now_ms().saturating_sub(*started_ms) / 1000;
                return Ok(Found::Busy {
                    wait: Wait::RequestInFlight {
                        kind,
                        vmid,
                        ago_secs,
                    },
                    upid: None,
                });
            }
            Ok(Found::Free)
        }
    }
}

/// A complete guest at the intent's VMID whose config (`first`) does not carry the spec's
/// marker. It is someone else's (`Foreign`: the intent's VMID is released) only on evidence
/// that no garbled answer gives: three reads agree that it is unlocked and unmarked and, for a
/// spec still in the set, named otherwise than the spec's guest (a create or clone names its
/// guest in the request itself). A guest of the spec's name is the intent's: the converge that
/// follows reads its marker again, and never changes a guest without it (`vm::read_own_config`).
// Many arguments because: the intent (site, spec, record, guest) and the read it is judged on.
#[allow(clippy::too_many_arguments)]
async fn corroborated(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    checked: &SiteChecked,
    spec_name: &str,
    rec: &SpecRecord,
    kind: GuestKind,
    vmid: u32,
    node: String,
    first: &VmConfig,
) -> Result<Found, ActionError> {
    let vm_name = ctx.specs.get(spec_name).map(|s| s.guest_name());
    let name_key = match kind {
        GuestKind::Qemu => "name",
        GuestKind::Lxc => "hostname",
    };
    if vm_name.is_some() && first.get(name_key) == vm_name {
        return Ok(Found::Ours(node));
    }
    let unmarked = |cfg: &VmConfig| {
        !matches!(cfg.lock(), Some("create" | "clone"))
            && verified(
                ctx,
                checked,
                cfg,
                kind,
                vmid,
                Some(spec_name),
                Some(&rec.uid),
            )
            .is_err()
            && (vm_name.is_none() || cfg.get(name_key) != vm_name)
    };
    for _ in 0..2 {
        match site.client.vm_config(&node, kind, vmid).await {
            Ok(cfg) if unmarked(&cfg) => {}
            Ok(_) => {
                return Ok(Found::Busy {
                    wait: Wait::ReadsDiffer { kind, vmid },
                    upid: None,
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Found::Foreign)
}

/// Where an intent's VM can be, each node once, in this order: where this cycle's listing saw
/// it, the intent's node, and for a clone the template's node (a clone to another node stays
/// there until its end).
fn candidate_nodes<'a>(
    ctx: &'a ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    vmid: u32,
    intent_node: &'a str,
    clone_of: Option<&'a CloneSource>,
) -> Vec<&'a str> {
    let listed = ctx
        .views
        .get(&site.name)
        .and_then(|v| v.vms.get(&vmid))
        .map(|vm| vm.node.as_str());
    let mut nodes: Vec<&str> = Vec::new();
    for node in [listed, Some(intent_node), clone_of.map(|c| c.node.as_str())]
        .into_iter()
        .flatten()
    {
        if !nodes.contains(&node) {
            nodes.push(node);
        }
    }
    nodes
}

/// The VM's config on the first of `nodes` that has it.
async fn first_config(
    site: &SiteCtx<impl Pve>,
    nodes: &[&str],
    kind: GuestKind,
    vmid: u32,
) -> Result<Option<(String, crate::pve::types::VmConfig)>, ActionError> {
    for node in nodes {
        match site.client.vm_config(node, kind, vmid).await {
            Ok(cfg) => return Ok(Some((node.to_string(), cfg))),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

fn busy(kind: GuestKind, vmid: u32, lock: &str, tasks: Vec<Upid>) -> Found {
    let wait = Wait::BeingMade {
        kind,
        vmid,
        lock: lock.to_string(),
        task: tasks[0].to_string(),
    };
    let upid = (tasks.len() == 1).then(|| tasks[0].clone());
    Found::Busy { wait, upid }
}

/// Whether a request sent when the intent was written may still be on its way: its answer
/// could take the client's request timeout, and pveproxy forwards for up to 30 s.
fn within_request_window(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    started_ms: u64,
) -> bool {
    let window = site.request_window.as_millis() as u64;
    ctx.clock.now_ms() < started_ms.saturating_add(window)
}

/// The running tasks that can be making guest `vmid`: a `qmcreate` (`vzcreate`) naming it on
/// its node, or a `qmclone` (`vzclone`) of its template on the template's node started after the intent (less a minute
/// for clock skew).
async fn creator_tasks(
    site: &SiteCtx<impl Pve>,
    vmid: u32,
    node: &str,
    clone_of: Option<&CloneSource>,
    started_ms: u64,
) -> Result<Vec<Upid>, ActionError> {
    let mut out = Vec::new();
    for t in site.client.active_vm_tasks(node, vmid).await? {
        if LockHolder::of("create").may_be(&t.task_type().unwrap_or_default(), &t.task_id(), vmid)
            && let Ok(u) = t.upid.parse::<Upid>()
        {
            out.push(u);
        }
    }
    if let Some(c) = clone_of {
        let since = (started_ms / 1000).saturating_sub(60);
        for t in site.client.active_tasks(&c.node).await? {
            if matches!(t.task_type().as_deref(), Some("qmclone" | "vzclone"))
                && t.task_id() == c.vmid.to_string()
                && t.starttime.is_none_or(|s| s >= since)
                && let Ok(u) = t.upid.parse::<Upid>()
            {
                out.push(u);
            }
        }
    }
    Ok(out)
}
