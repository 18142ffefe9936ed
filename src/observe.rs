//! What a site looks like this cycle: one `GET /cluster/status` and one
//! `GET /cluster/resources?type=vm`, turned into a normalised view. Per-VM config reads
//! happen only to learn the ownership marker of a VM the state does not explain (see
//! [`needs_marker`]); their answers are cached across cycles.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use crate::guest::GuestKind;
use crate::ownership::Marker;
use crate::pve::types::{ClusterHealth, ClusterShape, ClusterStatusEntry, VmConfig};
use crate::pve::{Error, Pve};

pub(crate) use crate::model::view::*;

/// A hash of everything observed (FNV-1a, quicker than std's SipHash on a whole cycle's views;
/// stable within a process, which is all that comparing two cycles needs).
pub(crate) fn fingerprint(views: &BTreeMap<String, SiteView>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = crate::util::fnv::FnvHasher::default();
    views.hash(&mut h);
    h.finish()
}

/// Each node's free memory (`maxmem - mem`, bytes) as `/cluster/resources?type=node` lists it:
/// one request, made only when a set's member is to be placed by free memory
/// (`engine::placement`), never by an idle cycle. A node listed without both is left out.
pub(crate) async fn node_free_memory(client: &impl Pve) -> Result<BTreeMap<String, u64>, Error> {
    Ok(client
        .node_resources()
        .await?
        .0
        .into_iter()
        .filter_map(|n| Some((n.node.clone(), n.free_memory()?)))
        .collect())
}

/// Reads one site: two requests, in parallel.
pub async fn observe_site(name: &str, client: &impl Pve) -> SiteView {
    observe_site_answered(name, client).await.0
}

/// [`observe_site`], and the node that answered (`/cluster/status`'s `local`), kept out of the
/// view: behind a load balancer it changes from cycle to cycle.
pub(crate) async fn observe_site_answered(
    name: &str,
    client: &impl Pve,
) -> (SiteView, Option<String>) {
    let (status, resources) = tokio::join!(client.cluster_status(), client.vm_resources());
    match (status, resources) {
        (Ok(status), Ok(resources)) => {
            let health = ClusterHealth::from_entries(&status);
            let cluster = ClusterShape::from_entries(&status);
            let answering = ClusterStatusEntry::answering_node(&status);
            // One pass, each guest moved once: a listing holds every guest of the site. VMs and
            // containers are observed alike; any other type only takes its VMID.
            let mut other_vmids = BTreeSet::new();
            let mut guests = Vec::with_capacity(resources.guests.len());
            let mut unreadable = Vec::with_capacity(resources.unreadable.len());
            for entry in resources.unreadable {
                other_vmids.extend(entry.vmid);
                unreadable.push(entry.to_string());
            }
            for r in resources.guests {
                match r.guest_kind() {
                    Some(kind) => guests.push((r.vmid, ObservedVm::from_resource(r, kind))),
                    None => {
                        other_vmids.insert(r.vmid);
                    }
                }
            }
            let view = SiteView {
                name: name.to_string(),
                error: None,
                health,
                other_vmids,
                unreadable,
                vms: BTreeMap::from_iter(guests),
                cluster,
                identity_changed: false,
            };
            (view, answering)
        }
        (Err(e), _) | (_, Err(e)) => (SiteView::unreachable(name, e.to_string()), None),
    }
}

/// The VMs whose marker must be read before planning: those carrying this install's tag
/// that no record explains, and those named like a spec that has no VM yet (a create that
/// crashed before its tags were set, or a lost database). A template is one too: a
/// `ProxmoxTemplate`'s VM is found by its marker after a lost database (and only such a spec
/// takes a template: `plan::spec::by_marker`).
/// `is_spec_vm_name` is asked only for untagged VMs no record explains (none in a steady
/// fleet), so the caller may build its set of names lazily.
pub(crate) fn needs_marker<S: BuildHasher>(
    view: &SiteView,
    install_id: &str,
    known_vmids: &HashSet<u32, S>,
    is_spec_vm_name: impl Fn(&str) -> bool,
) -> Vec<u32> {
    let tag = crate::ownership::ownership_tag(install_id);
    view.vms
        .values()
        .filter(|vm| !vm.marker_read && !known_vmids.contains(&vm.vmid))
        .filter(|vm| {
            vm.has_tag(&tag)
                || vm.name.as_deref().is_some_and(&is_spec_vm_name)
                || made_since_listed(vm)
        })
        .map(|vm| vm.vmid)
        .collect()
}

/// A guest listed locked `create` or `clone` (nameless and untagged until its task ends) that
/// no running task of this install's token was making when the tasks were read after the
/// listing ([`mark_in_making`]): its task may have ended between the two reads, its config now
/// whole and its marker readable. Unread, it would look like nobody's, and a spec whose record
/// was lost would be created a second time (found by the crash test under load). Another
/// user's create is read too (`NotYet` while it runs), only while it is locked.
fn made_since_listed(vm: &ObservedVm) -> bool {
    vm.making.is_none() && matches!(vm.lock.as_deref(), Some("create" | "clone"))
}

/// Marks the guests of `view` that a create or clone of API token `token_id`
/// (`user@realm!tokenid`) is making ([`ObservedVm::making`]): listed locked `create` or
/// `clone`, not a template, no record explaining them (`known_vmids`), with a running task on
/// their node that can hold the lock (`LockHolder`: a create naming the VMID, or a clone) and
/// that the token started. Such a guest holds only its lock until the task ends (pve-container
/// writes a new container's config, marker included, only then; qemu-server a VM's), so it
/// looks like nobody's: after a lost state database it is the only trace of a create in
/// flight. One `GET /nodes/{node}/tasks?source=active` per node holding such a guest, none
/// otherwise; a listing that cannot be read leaves its guests `Making::Unread` (held all
/// the same).
pub(crate) async fn mark_in_making<S: BuildHasher>(
    view: &mut SiteView,
    client: &impl Pve,
    known_vmids: &HashSet<u32, S>,
    token_id: &str,
) {
    let locked = |vm: &ObservedVm| {
        !vm.template
            && !known_vmids.contains(&vm.vmid)
            && matches!(vm.lock.as_deref(), Some("create" | "clone"))
    };
    let nodes: BTreeSet<String> = (view.vms.values())
        .filter(|vm| locked(vm))
        .map(|vm| vm.node.to_string())
        .collect();
    for node in nodes {
        let tasks = client.active_tasks(&node).await;
        for vm in view.vms.values_mut() {
            if !locked(vm) || vm.node != node {
                continue;
            }
            let holder = crate::pve::LockHolder::of(vm.lock.as_deref().unwrap_or_default());
            vm.making = match &tasks {
                Err(_) => Some(Making::Unread),
                Ok(tasks) => tasks
                    .iter()
                    .filter(|t| t.is_running() && t.started_by(token_id))
                    .filter_map(|t| {
                        let kind = t.task_type().unwrap_or_default();
                        let id = t.task_id();
                        holder.may_be(&kind, &id, vm.vmid).then(|| {
                            if id == vm.vmid.to_string() {
                                Making::Create
                            } else {
                                Making::Clone
                            }
                        })
                    })
                    .max_by_key(|m| *m == Making::Create),
            };
        }
    }
}

/// Reads a VM's description marker. A VM that vanished reads as "no marker".
pub(crate) async fn read_marker(
    client: &impl Pve,
    node: &str,
    kind: GuestKind,
    vmid: u32,
) -> Result<MarkerRead, Error> {
    match client.vm_config(node, kind, vmid).await {
        // A create or clone still running has not written its description yet.
        Ok(cfg) if matches!(cfg.lock(), Some("create" | "clone")) => Ok(MarkerRead::NotYet),
        Ok(cfg) => Ok(MarkerRead::Read {
            marker: cfg.description().and_then(Marker::parse),
            config: Some(cfg),
        }),
        Err(e) if e.is_not_found() => Ok(MarkerRead::Read {
            marker: None,
            config: None,
        }),
        Err(e) => Err(e),
    }
}

/// What a marker read found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MarkerRead {
    /// The config's marker, or none, and the config it was read from (`None`: the VM is gone).
    Read {
        marker: Option<Marker>,
        config: Option<VmConfig>,
    },
    /// The VM is still being created or cloned: its marker cannot be known yet (not cached).
    NotYet,
}

/// Reads the markers of `vms` (VMID, node, kind) of one site side by side, at most the node's limit
/// at once (the same limit actions keep: the client's, else `per_node`), answers in the order
/// of `vms`.
pub(crate) async fn read_markers<P: Pve, C: AsRef<P> + Send + Sync + 'static>(
    client: &Arc<C>,
    vms: Vec<(u32, String, GuestKind)>,
    per_node: u32,
) -> Vec<(u32, Result<MarkerRead, Error>)> {
    // Only the reads under way are tasks (10,000 VMs to read with an empty database).
    let jobs = vms
        .into_iter()
        .enumerate()
        .map(|(i, (vmid, node, kind))| (node.clone(), (i, vmid, node, kind)));
    // Within each node's limit of work at once, as its actions are.
    let mut out = crate::util::lanes::run(
        jobs,
        |node: &String| {
            AsRef::<P>::as_ref(&**client)
                .parallel_limit(node)
                .unwrap_or(per_node)
                .max(1) as usize
        },
        |(i, vmid, node, kind): (usize, u32, String, GuestKind)| {
            let client = client.clone();
            async move {
                let read = read_marker((*client).as_ref(), &node, kind, vmid).await;
                (i, vmid, read)
            }
        },
    )
    .await;
    out.sort_by_key(|(i, _, _)| *i);
    out.into_iter().map(|(_, vmid, r)| (vmid, r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pve::types::VmResource;

    fn res(json: &str) -> VmResource {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn unknown_is_never_absent() {
        let fresh = ObservedVm::from_resource(
            res(r#"{"id":"qemu/101","vmid":101,"node":"pve1","status":"unknown"}"#),
            GuestKind::Qemu,
        );
        assert!(fresh.is_unknown());
        let nameless = ObservedVm::from_resource(
            res(r#"{"id":"qemu/102","vmid":102,"node":"pve1","status":"running"}"#),
            GuestKind::Qemu,
        );
        assert!(
            nameless.is_unknown(),
            "a VM without a name is not judged yet"
        );
        let ok = ObservedVm::from_resource(
            res(
                r#"{"id":"qemu/103","vmid":103,"node":"pve1","name":"a","status":"stopped","tags":"Web;proxsync.main"}"#,
            ),
            GuestKind::Qemu,
        );
        assert_eq!(ok.power, Power::Stopped);
        assert_eq!(ok.tags, vec!["proxsync.main", "web"]);
    }

    #[test]
    fn ownership_needs_tag_and_marker() {
        let mut vm = ObservedVm::from_resource(
            res(
                r#"{"id":"qemu/103","vmid":103,"node":"pve1","name":"a","status":"stopped","tags":"proxsync.main"}"#,
            ),
            GuestKind::Qemu,
        );
        assert!(!vm.owned_by("main"), "no marker read yet");
        let marker = |install: &str| {
            Some(Arc::new(Marker {
                install: install.into(),
                spec: "a".into(),
                uid: "1".into(),
                mac: None,
            }))
        };
        vm.marker = marker("other");
        vm.marker_verified = true;
        assert!(!vm.owned_by("main"), "another install's marker");
        vm.marker = marker("main");
        assert!(vm.owned_by("main"));
        vm.marker_verified = false;
        assert!(!vm.owned_by("main"), "a marker that does not verify");
        assert_eq!(vm.unverified_claim("main"), Some("a"));
        vm.marker_verified = true;
        vm.tags.clear();
        assert!(!vm.owned_by("main"), "marker without the tag");
    }

    #[test]
    fn marker_reads_only_where_needed() {
        let mut vms = BTreeMap::new();
        for (id, name, tags, template) in [
            (100, "web-01", "proxsync.main", false), // known from state
            (101, "stray", "proxsync.main", false),  // tagged, unknown: read
            (102, "db-01", "", false),               // named like an unmapped spec: read
            (103, "other", "", false),               // not ours: no read
            (9000, "db-01", "proxsync.main", true),  // a template of ours: read
            (9001, "golden", "", true),              // a template of nobody's: no read
        ] {
            let r = res(&format!(
                r#"{{"id":"qemu/{id}","vmid":{id},"node":"pve1","name":"{name}","status":"stopped","tags":"{tags}","template":{}}}"#,
                u8::from(template)
            ));
            vms.insert(id, ObservedVm::from_resource(r, GuestKind::Qemu));
        }
        // Listed in a create's window, nameless and untagged: read when no running task of
        // ours was making it when the tasks were read (it may have ended since the listing);
        // not read while one is (held as being made).
        for (id, making) in [(104, None), (105, Some(Making::Create))] {
            let r = res(&format!(
                r#"{{"id":"qemu/{id}","vmid":{id},"node":"pve1","status":"stopped","lock":"create"}}"#
            ));
            let mut vm = ObservedVm::from_resource(r, GuestKind::Qemu);
            assert_eq!(vm.lock.as_deref(), Some("create"));
            vm.making = making;
            vms.insert(id, vm);
        }
        let view = SiteView {
            name: "lab".into(),
            error: None,
            health: ClusterHealth {
                quorate: true,
                nodes: BTreeMap::new(),
            },
            vms,
            other_vmids: BTreeSet::new(),
            unreadable: Vec::new(),
            cluster: ClusterShape::default(),
            identity_changed: false,
        };
        let known: HashSet<u32> = [100].into();
        let unmapped: HashSet<&str> = ["db-01"].into();
        assert_eq!(
            needs_marker(&view, "main", &known, |n| unmapped.contains(n)),
            vec![101, 102, 104, 9000]
        );
    }
}
