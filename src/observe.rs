//! What a site looks like this cycle: one `GET /cluster/status` and one
//! `GET /cluster/resources?type=vm`, turned into a normalised view. Per-VM config reads
//! happen only to learn the ownership marker of a VM the state does not explain (see
//! [`needs_marker`]); their answers are cached across cycles.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use crate::guest::GuestKind;
use crate::ownership::Marker;
use crate::pve::types::{
    ClusterHealth, ClusterShape, ClusterStatusEntry, ListedStatus, VmConfig, VmResource,
};
use crate::pve::{Error, Pve};

/// A VM's power state as listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Power {
    Running,
    Stopped,
    /// Listed, but the state is not known (node offline, VM created seconds ago, paused...).
    Unknown,
}

impl Power {
    pub fn as_str(self) -> &'static str {
        match self {
            Power::Running => "running",
            Power::Stopped => "stopped",
            Power::Unknown => "unknown",
        }
    }
}

/// One VM of the listing, normalised. Only what a plan or a status may read, none of the
/// listing's usage counters (CPU load, memory used, uptime...): an idle cluster observes the
/// same from cycle to cycle ([`fingerprint`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObservedVm {
    pub vmid: u32,
    /// A QEMU VM or an LXC container (both share the VMID space and the same rules).
    pub kind: GuestKind,
    pub node: String,
    pub name: Option<String>,
    pub power: Power,
    /// Lower-cased, sorted, deduplicated.
    pub tags: Vec<String>,
    pub cpus: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub disk_bytes: Option<u64>,
    pub lock: Option<String>,
    /// The HA manager's state when the VM is HA-managed (the listing's `hastate`).
    pub ha_state: Option<String>,
    pub template: bool,
    /// The description marker, once read (`None`: not read, or read and absent; see
    /// `marker_read`). Shared with the marker cache: a cycle clones a pointer, not strings.
    pub marker: Option<Arc<Marker>>,
    pub marker_read: bool,
    /// The marker's MAC verifies for this VMID with this install's key (or the state
    /// database vouches for the VM). Only a verified marker makes a VM this install's.
    pub marker_verified: bool,
    /// Being made by a create or clone this install's token started, which no record explains
    /// (see [`mark_in_making`]): it may be a spec's guest, judged by its marker once its task
    /// ends; never a second one meanwhile.
    pub making: Option<Making>,
}

/// How a listed guest is being made by this install's token ([`mark_in_making`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Making {
    /// A create naming its VMID (`qmcreate`, `vzcreate`): the guest is made on its spec's node.
    Create,
    /// A clone (`qmclone`, `vzclone`, whose task names the template): listed on the template's
    /// node until its task ends, so it may be the guest of a spec on any node.
    Clone,
    /// Its node's running tasks could not be read: it may be either.
    Unread,
}

impl ObservedVm {
    /// Taken by value: the strings move over, nothing is copied.
    /// `kind`: the listing's (see [`VmResource::guest_kind`]).
    pub fn from_resource(r: VmResource, kind: GuestKind) -> ObservedVm {
        let power = match r.status {
            Some(ListedStatus::Running) if r.name.is_some() => Power::Running,
            Some(ListedStatus::Stopped) if r.name.is_some() => Power::Stopped,
            _ => Power::Unknown,
        };
        let mut tags = r.tags;
        tags.sort();
        tags.dedup();
        ObservedVm {
            vmid: r.vmid,
            kind,
            node: r.node,
            name: r.name,
            power,
            tags,
            cpus: r.maxcpu,
            memory_bytes: r.maxmem,
            disk_bytes: r.maxdisk,
            lock: r.lock.filter(|l| !l.is_empty()),
            ha_state: r.hastate.filter(|s| !s.is_empty()),
            template: r.template.unwrap_or(false),
            marker: None,
            marker_read: false,
            marker_verified: false,
            making: None,
        }
    }

    /// Listed with status `unknown` or without a name: present, but not to be judged.
    pub fn is_unknown(&self) -> bool {
        self.power == Power::Unknown
    }

    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// Owned by this install: the ownership tag and a marker of this install.
    pub fn owned_by(&self, install_id: &str) -> bool {
        self.has_tag(&crate::ownership::ownership_tag(install_id))
            && self.marker_verified
            && self
                .marker
                .as_ref()
                .is_some_and(|m| m.install == install_id)
    }

    /// A marker naming this install that does not verify: typed by hand, or copied with the
    /// VM from another VMID. The spec it claims, for the report; never trusted.
    pub fn unverified_claim(&self, install_id: &str) -> Option<&str> {
        self.marker
            .as_ref()
            .filter(|m| !self.marker_verified && m.install == install_id)
            .map(|m| m.spec.as_str())
    }
}

/// One site this cycle.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SiteView {
    pub name: String,
    /// Why the site could not be observed, if it could not.
    pub error: Option<String>,
    pub health: ClusterHealth,
    /// QEMU VMs and LXC containers by VMID (each with its `kind`).
    pub vms: BTreeMap<u32, ObservedVm>,
    /// The VMIDs of the listing's guests of any other type, or whose entry could not be read:
    /// taken for a new guest all the same.
    pub other_vmids: BTreeSet<u32>,
    /// The listing's entries that could not be read (a garbled answer): the view is
    /// incomplete, so nothing is created or deleted on the site this cycle.
    pub unreadable: Vec<String>,
    /// Who the cluster says it is (`GET /cluster/status`): when it changes, the site's root CA
    /// is read again to check it is still the recorded cluster (`gate::site`).
    pub cluster: ClusterShape,
    /// The site reaches another cluster than the one recorded for it (`gate::site`): `error`
    /// says so, and nothing on the site is judged or touched until a person settles it.
    pub identity_changed: bool,
}

impl SiteView {
    /// A site that could not be read: nothing on it is judged or touched.
    pub fn unreachable(name: &str, error: String) -> SiteView {
        SiteView {
            name: name.to_string(),
            error: Some(error),
            health: ClusterHealth {
                quorate: false,
                nodes: BTreeMap::new(),
            },
            vms: BTreeMap::new(),
            other_vmids: BTreeSet::new(),
            unreadable: Vec::new(),
            cluster: ClusterShape::default(),
            identity_changed: false,
        }
    }

    /// A site whose endpoint reaches another cluster than the recorded one: unreachable as far
    /// as planning goes (nothing listed, nothing judged), `message` saying why and what to do.
    pub fn identity_refused(name: &str, message: String) -> SiteView {
        SiteView {
            identity_changed: true,
            ..SiteView::unreachable(name, message)
        }
    }

    pub fn reachable(&self) -> bool {
        self.error.is_none()
    }

    /// The listing had entries that could not be read: a guest may be missing from `vms`, so
    /// nothing may be created or deleted on the strength of this view.
    pub fn incomplete(&self) -> bool {
        !self.unreadable.is_empty()
    }

    /// Why the view is incomplete, in a sentence for a status: which entries, and what holds.
    pub fn incomplete_why(&self) -> String {
        let shown: Vec<&str> = self.unreadable.iter().take(3).map(String::as_str).collect();
        let more = self.unreadable.len().saturating_sub(shown.len());
        format!(
            "site {}'s listing (/cluster/resources) has {} entr{} proxsync cannot read ({}{}): \
             nothing is created or deleted there until it reads whole",
            self.name,
            self.unreadable.len(),
            if self.unreadable.len() == 1 {
                "y"
            } else {
                "ies"
            },
            shown.join("; "),
            if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            }
        )
    }

    /// True when the site is reachable, quorate and the node online.
    pub fn node_healthy(&self, node: &str) -> bool {
        self.reachable() && self.health.node_healthy(node)
    }
}

/// A hash of everything observed (FNV-1a, quicker than std's SipHash on a whole cycle's views;
/// stable within a process, which is all that comparing two cycles needs).
pub fn fingerprint(views: &BTreeMap<String, SiteView>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = crate::util::fnv::FnvHasher::default();
    views.hash(&mut h);
    h.finish()
}

/// Each node's free memory (`maxmem - mem`, bytes) as `/cluster/resources?type=node` lists it:
/// one request, made only when a set's member is to be placed by free memory
/// (`engine::placement`), never by an idle cycle. A node listed without both is left out.
pub async fn node_free_memory(client: &impl Pve) -> Result<BTreeMap<String, u64>, Error> {
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
pub async fn observe_site_answered(name: &str, client: &impl Pve) -> (SiteView, Option<String>) {
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
/// crashed before its tags were set, or a lost database). Templates are never candidates.
/// `is_spec_vm_name` is asked only for untagged VMs no record explains (none in a steady
/// fleet), so the caller may build its set of names lazily.
pub fn needs_marker<S: BuildHasher>(
    view: &SiteView,
    install_id: &str,
    known_vmids: &HashSet<u32, S>,
    is_spec_vm_name: impl Fn(&str) -> bool,
) -> Vec<u32> {
    let tag = crate::ownership::ownership_tag(install_id);
    view.vms
        .values()
        .filter(|vm| !vm.template && !vm.marker_read && !known_vmids.contains(&vm.vmid))
        .filter(|vm| vm.has_tag(&tag) || vm.name.as_deref().is_some_and(&is_spec_vm_name))
        .map(|vm| vm.vmid)
        .collect()
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
pub async fn mark_in_making<S: BuildHasher>(
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
        .map(|vm| vm.node.clone())
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
pub async fn read_marker(
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
pub enum MarkerRead {
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
pub async fn read_markers<P: Pve, C: AsRef<P> + Send + Sync + 'static>(
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
            (9000, "db-01", "proxsync.main", true),  // a template: never
        ] {
            let r = res(&format!(
                r#"{{"id":"qemu/{id}","vmid":{id},"node":"pve1","name":"{name}","status":"stopped","tags":"{tags}","template":{}}}"#,
                u8::from(template)
            ));
            vms.insert(id, ObservedVm::from_resource(r, GuestKind::Qemu));
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
            vec![101, 102]
        );
    }
}
