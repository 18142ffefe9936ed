//! What a cycle observed of a site: its guests as listed ([`ObservedVm`]: kind, power, name,
//! tags, the marker when read, health), any VMID in use, and the cluster's health
//! ([`SiteView`]). `observe` makes it from the site's listings; the gate, the planner and
//! render decide on it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::guest::GuestKind;
use crate::ownership::Marker;
use crate::pve::types::{ClusterHealth, ClusterShape, ListedStatus, VmResource};

/// A VM's power state as listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Power {
    /// Listed as `running`.
    Running,
    /// Listed as `stopped`.
    Stopped,
    /// Listed, but the state is not known (node offline, VM created seconds ago, paused...).
    Unknown,
}

impl Power {
    /// The state as the listing spells it (`running`, `stopped`), or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Power::Running => "running",
            Power::Stopped => "stopped",
            Power::Unknown => "unknown",
        }
    }
}

/// One VM of the listing, normalised. Only what a plan or a status may read, none of the
/// listing's usage counters (CPU load, memory used...) but its uptime, which a cycle does not
/// compare ([`Uncompared`]): an idle cluster observes the same from cycle to cycle
/// (`observe::fingerprint`, in `proxsync`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObservedVm {
    /// The guest's VMID, unique in its cluster.
    pub vmid: u32,
    /// A QEMU VM or an LXC container (both share the VMID space and the same rules).
    pub kind: GuestKind,
    /// The node it is listed on.
    pub node: compact_str::CompactString,
    /// A VM's `name`, a container's hostname; `None` when the listing has none.
    pub name: Option<compact_str::CompactString>,
    /// Its power state as listed.
    pub power: Power,
    /// Lower-cased, sorted, deduplicated.
    pub tags: Vec<compact_str::CompactString>,
    /// Its CPUs as listed (`maxcpu`).
    pub cpus: Option<u64>,
    /// Its memory in bytes as listed (`maxmem`).
    pub memory_bytes: Option<u64>,
    /// Its boot disk's size in bytes as listed (`maxdisk`; for a running container, its root
    /// file system's total as `df` sees it).
    pub disk_bytes: Option<u64>,
    /// The lock PVE holds on its config (`backup`, `migrate`, `clone`, ...), if any.
    pub lock: Option<String>,
    /// The HA manager's state when the VM is HA-managed (the listing's `hastate`).
    pub ha_state: Option<String>,
    /// It is a template.
    pub template: bool,
    /// The description marker, once read (`None`: not read, or read and absent; see
    /// `marker_read`). Shared with the marker cache: a cycle clones a pointer, not strings.
    pub marker: Option<Arc<Marker>>,
    /// The marker was looked for (in its config, or the marker cache): with `marker` `None`,
    /// the guest carries none.
    pub marker_read: bool,
    /// The marker's MAC verifies for this VMID with this install's key (or the state
    /// database vouches for the VM). Only a verified marker makes a VM this install's.
    pub marker_verified: bool,
    /// Being made by a create or clone this install's token started, which no record explains
    /// (see `observe::mark_in_making`): it may be a spec's guest, judged by its marker once its task
    /// ends; never a second one meanwhile.
    pub making: Option<Making>,
    /// Seconds since it started as listed (0: not running, or not listed): when a health
    /// check's `timeout` began. Changes every cycle, so left out of `==` and the hash.
    pub uptime_secs: Uncompared<u32>,
}

/// A value of the listing that changes every cycle (a guest's uptime): carried for the health
/// checks, left out of what a cycle compares (`==` and `Hash` ignore it), so an idle cluster
/// still observes the same from cycle to cycle.
#[derive(Debug, Clone, Copy, Default)]
pub struct Uncompared<T>(pub T);

impl<T> PartialEq for Uncompared<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for Uncompared<T> {}

impl<T> std::hash::Hash for Uncompared<T> {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// How a listed guest is being made by this install's token (`observe::mark_in_making`, in `proxsync`).
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
    /// Taken by value: the node, name and tags move over (read inline from the listing, see
    /// [`VmResource`]), nothing is copied.
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
        // Kept between cycles: a duplicate dropped leaves no spare room.
        tags.shrink_to_fit();
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
            uptime_secs: Uncompared(
                r.uptime
                    .filter(|_| power == Power::Running)
                    .map_or(0, |u| u.min(u64::from(u32::MAX)) as u32),
            ),
        }
    }

    /// Listed with status `unknown` or without a name: present, but not to be judged.
    pub fn is_unknown(&self) -> bool {
        self.power == Power::Unknown
    }

    /// Whether `tag` is among its tags (which are lower-cased).
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// Owned by this install: the ownership tag and a marker of this install.
    pub fn owned_by(&self, install_id: &str) -> bool {
        // Compared in place: asked of every guest listed, several times a plan.
        (self.tags.iter()).any(|t| crate::ownership::is_ownership_tag_of(t, install_id))
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
    /// The site's name in the config (`[[sites]]`).
    pub name: String,
    /// Why the site could not be observed, if it could not.
    pub error: Option<String>,
    /// Quorum and which nodes are online (`GET /cluster/status`).
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

    /// The site was read and reaches its recorded cluster: no `error`.
    pub fn reachable(&self) -> bool {
        self.error.is_none()
    }

    /// The listing had entries that could not be read: a guest may be missing from `vms`, so
    /// nothing may be created or deleted on the strength of this view.
    pub fn incomplete(&self) -> bool {
        !self.unreadable.is_empty()
    }

    /// Why the view is incomplete, in a sentence for a status: which entries, and what holds.
    pub(crate) fn incomplete_why(&self) -> String {
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

    /// The names of the nodes of the site's cluster (sorted), when this view holds them all:
    /// the site was read and reaches its recorded cluster, the cluster is quorate, and
    /// `/cluster/status` named every member it counts ([`ClusterShape::complete`]). `None`:
    /// the membership is not known, and no node may be judged a stranger to the cluster.
    pub fn members(&self) -> Option<Vec<&str>> {
        cluster_members(&self.health, &self.cluster).filter(|_| self.reachable())
    }
}

/// The members of a cluster whose `/cluster/status` gave `health` and `shape`, when it named
/// them all and is quorate (a node out of quorum may hold an old list); `None` otherwise. What
/// [`SiteView::members`] asks of a site that was read. An answer without a cluster entry is
/// never a membership: a standalone host answers so, and so does a cluster's node whose
/// corosync is not running (pmxcfs then lists only itself: pve-cluster's
/// `cfs_create_memberlist_msg`), which would make every other node a stranger.
pub fn cluster_members<'a>(
    health: &ClusterHealth,
    shape: &'a ClusterShape,
) -> Option<Vec<&'a str>> {
    (health.quorate && shape.complete && shape.cluster.is_some())
        .then(|| shape.nodes.iter().map(|n| n.name.as_str()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_guests_tags_are_held_at_their_exact_size() {
        let listed = |tags: &str| {
            let json = format!(r#"{{"id":"qemu/100","vmid":100,"node":"n","tags":"{tags}"}}"#);
            let r: VmResource = serde_json::from_str(&json).unwrap();
            ObservedVm::from_resource(r, GuestKind::Qemu).tags
        };
        let one = listed("proxsync.main");
        assert_eq!((one.len(), one.capacity()), (1, 1));
        // A tag listed twice is dropped, and so is its room.
        let deduplicated = listed("web;proxsync.main;Web");
        assert_eq!(deduplicated, ["proxsync.main", "web"]);
        assert_eq!(deduplicated.capacity(), 2);
    }

    /// The last look keeps every guest's view between cycles: its node, name and tags are
    /// held inline (issue 47), where each `String` took a heap block.
    #[test]
    fn a_listed_guests_short_strings_are_held_inline() {
        let json = r#"{"id":"qemu/100","vmid":100,"node":"pve-s03-n2","name":"web-01","tags":"proxsync.main;web"}"#;
        let r: VmResource = serde_json::from_str(json).unwrap();
        let vm = ObservedVm::from_resource(r, GuestKind::Qemu);
        let name = vm.name.as_ref().unwrap();
        let strings = [
            ("node", &vm.node),
            ("name", name),
            ("tag", &vm.tags[0]),
            ("tag", &vm.tags[1]),
        ];
        for (what, text) in strings {
            assert!(!text.is_heap_allocated(), "{what} {text:?} is on the heap");
        }
    }
}
