//! Planning: a pure function from (desired specs, observed sites, state records, now) to the
//! actions of this cycle and a verdict per spec. No I/O, no clock: time is passed in, so the
//! same inputs always give the same plan, and the planner is tested without any network.
//!
//! Rules (PRODUCT.md §3-4):
//! - A VM is touched only if it is owned: this install's tag and marker, or known by VMID
//!   from the state (whose marker is re-verified by `execute` before anything destructive).
//! - A spec whose VM is missing gets a create, unless a VM with its marker exists (adopt) or a
//!   create is already in flight (resume: never a second create).
//! - Nothing is created, changed or deleted on an unhealthy node or an unreachable site; a VM
//!   listed as `unknown` is not judged.
//! - An invalid spec leaves its VM exactly as it is: it is neither updated nor treated as
//!   removed. When the spec set could not be read completely, nothing is treated as removed.
//! - Deletes are refused as a whole when the desired set is empty, or when they would remove
//!   more than `max_delete_fraction` of the managed VMs.
//! - A spec in backoff is left alone until its next attempt, unless its inputs changed (or,
//!   in an explicit `run --once`, its last failure was transient).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::config::{OrphanPolicy, ReconcileConfig};
use crate::observe::{ObservedVm, Power, SiteView};
use crate::ownership::ownership_tag;
use crate::spec::{PowerState, Spec};
use crate::state::{Phase, SpecRecord};

/// Everything the planner looks at.
pub struct PlanInput<'a> {
    pub install_id: &'a str,
    /// Valid specs.
    pub desired: &'a [Spec],
    /// Names of specs that exist but failed validation.
    pub invalid: &'a BTreeSet<String>,
    /// False when some file could not be read or an error is tied to no spec name: then no
    /// spec is treated as removed.
    pub complete: bool,
    pub sites: &'a BTreeMap<String, SiteView>,
    pub records: &'a BTreeMap<String, SpecRecord>,
    /// Orphans first seen: `(site, vmid) -> unix ms`.
    pub orphans_seen: &'a BTreeMap<(String, u32), u64>,
    pub reconcile: &'a ReconcileConfig,
    /// A hash of the config parts that affect specs (sites, install id): a change resets backoff.
    pub config_hash: &'a str,
    pub now_ms: u64,
    /// An explicit `run --once` (a person or a CI job asking for a reconcile now): specs whose
    /// last failure was transient are attempted despite their backoff. The daemon keeps its
    /// schedule (false).
    pub retry_transient_now: bool,
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Action {
    /// Create or clone a new VM for the spec.
    Create {
        spec: String,
        site: String,
        node: String,
    },
    /// A create was in flight (intent recorded): finish it, never start another.
    ResumeCreate {
        spec: String,
        site: String,
        node: String,
        vmid: u32,
        upid: Option<String>,
    },
    /// A VM carrying the spec's marker exists but the state did not know it.
    Adopt {
        spec: String,
        site: String,
        vmid: u32,
    },
    /// Bring an existing VM to the spec (declared fields only).
    Converge {
        spec: String,
        site: String,
        node: String,
        vmid: u32,
        why: Vec<String>,
    },
    /// The spec is gone: delete its VM, or release it (`deletionPolicy: Orphan`).
    Remove {
        spec: String,
        site: String,
        node: String,
        vmid: u32,
        release: bool,
    },
    /// The spec is gone and so is its VM: forget the record.
    Forget { spec: String },
    /// `metadata.name` was renamed (confirmed by the `proxsync.io/renamed-from` annotation):
    /// the VM of spec `from` becomes spec `spec`'s, its marker re-signed; nothing is deleted.
    Relabel {
        spec: String,
        from: String,
        site: String,
        node: String,
        vmid: u32,
    },
    /// A stopped orphan past its grace period.
    DeleteOrphan {
        site: String,
        node: String,
        vmid: u32,
    },
}

impl Action {
    /// The node the action runs on (for per-node limits), if any.
    pub fn node(&self) -> Option<(&str, &str)> {
        match self {
            Action::Create { site, node, .. }
            | Action::ResumeCreate { site, node, .. }
            | Action::Converge { site, node, .. }
            | Action::Remove { site, node, .. }
            | Action::Relabel { site, node, .. }
            | Action::DeleteOrphan { site, node, .. } => Some((site, node)),
            Action::Adopt { .. } | Action::Forget { .. } => None,
        }
    }

    /// The spec the action is for, if any.
    pub fn spec(&self) -> Option<&str> {
        match self {
            Action::Create { spec, .. }
            | Action::ResumeCreate { spec, .. }
            | Action::Adopt { spec, .. }
            | Action::Converge { spec, .. }
            | Action::Remove { spec, .. }
            | Action::Relabel { spec, .. }
            | Action::Forget { spec } => Some(spec),
            Action::DeleteOrphan { .. } => None,
        }
    }
}

/// Why a spec gets no action, or that it gets one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "camelCase")]
pub enum Verdict {
    /// The VM matches the spec.
    UpToDate { vmid: u32 },
    /// An action was planned.
    Acting,
    /// A previous attempt failed; the next is not due yet.
    BackingOff { until_ms: u64 },
    /// The VM's node (or the spec's node, for a create) is offline, or the cluster lost quorum.
    NodeUnhealthy { node: String, quorate: bool },
    /// The site could not be read.
    SiteUnreachable { error: String },
    /// The VM is listed but its state is unknown (node offline, just created): not judged.
    Unknown { vmid: u32 },
    /// The spec failed validation: its VM is left as it is.
    Invalid,
    /// The commit removes spec `from` and adds this one with the same content: probably a
    /// rename of `metadata.name`. Neither the delete nor the create happens until the
    /// `proxsync.io/renamed-from: <from>` annotation confirms it (or the content differs).
    RenameSuspected { from: String, vmid: u32 },
    /// The spec moved to another site, and its VM `vmid` is still on site `from`: proxsync
    /// never moves a VM between clusters by itself (a create here plus a delete there). It is
    /// reported until a person removes it there (then the spec is created on its new site) or
    /// moves the spec back.
    SiteMoved { from: String, vmid: u32 },
    /// No VM of the spec is known, and VM `vmid` claims it with a marker that does not verify
    /// (a copy, a typed marker, or a lost marker key): nothing is created until a human
    /// confirms it (`proxsync adopt`) or removes it.
    UnverifiedClaim { vmid: u32 },
}

/// An orphan: owned by this install, matching no spec and no record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Orphan {
    pub site: String,
    pub vmid: u32,
    pub node: String,
    pub name: Option<String>,
    pub power: String,
    pub first_seen_ms: u64,
    /// `reported`, `deleting`, or `delete after <ms>`.
    pub disposition: String,
    /// A second VM claiming this spec (its marker names it; another VM is the spec's).
    pub duplicate_of: Option<String>,
}

/// The plan of one cycle.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub verdicts: BTreeMap<String, Verdict>,
    pub orphans: Vec<Orphan>,
    /// Orphan sightings to remember (seen now; forgotten when gone).
    #[serde(skip)]
    pub orphans_seen: BTreeMap<(String, u32), u64>,
    /// Safety valves that refused deletes, with the reason.
    pub refused: Vec<String>,
    /// Specs claimed by more than one VM (this install's marker naming the spec): the VM
    /// kept and the extras. The extras are never converged; they are reported, and handled
    /// by the orphan policy when they carry the ownership tag.
    pub duplicates: BTreeMap<String, Duplicate>,
}

/// Two or more VMs carry the marker of one spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Duplicate {
    pub site: String,
    /// The VM the spec maps to: the record's, else the one with the recorded uid, else the
    /// lowest VMID.
    pub kept: u32,
    pub extras: Vec<u32>,
}

impl Plan {
    /// True when there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}

/// A stable hash of what a spec asks for (not where it is written), hex.
pub fn spec_hash(spec: &Spec) -> String {
    #[derive(Serialize)]
    struct Hashed<'a> {
        vm_name: &'a str,
        node: &'a str,
        cpu: u32,
        memory_mib: u64,
        disk_bytes: u64,
        storage: &'a str,
        network: &'a str,
        image: &'a crate::spec::Image,
        user_data: &'a Option<String>,
        // Absent without cloudInit, so the hashes of specs without it stay as they were.
        #[serde(skip_serializing_if = "Option::is_none")]
        cloud_init: Option<&'a crate::spec::CloudInit>,
        power: PowerState,
        tags: &'a [String],
        /// Bumped when what converge writes changes for every VM: 2 = signed markers, so a
        /// VM with a marker from before signing is converged (and its marker signed) once.
        identity: u32,
    }
    let h = Hashed {
        vm_name: &spec.vm_name,
        node: &spec.node,
        cpu: spec.cpu,
        memory_mib: spec.memory_mib,
        disk_bytes: spec.disk_bytes,
        storage: &spec.storage,
        network: &spec.network,
        image: &spec.image,
        user_data: &spec.user_data,
        cloud_init: spec.cloud_init.as_ref(),
        power: spec.power_state,
        tags: &spec.tags,
        identity: 2,
    };
    fnv_hex(serde_json::to_string(&h).unwrap_or_default().as_bytes())
}

/// What a spec asks for without its names (`metadata.name` and the VM name): equal for a spec
/// and its rename.
pub fn content_hash(spec: &Spec) -> String {
    let mut unnamed = spec.clone();
    unnamed.vm_name = String::new();
    spec_hash(&unnamed)
}

/// FNV-1a 64, hex: stable across builds and platforms.
pub fn fnv_hex(bytes: &[u8]) -> String {
    format!("{:016x}", fnv(bytes.iter().copied()))
}

/// FNV-1a 64 over bytes.
pub fn fnv(bytes: impl IntoIterator<Item = u8>) -> u64 {
    fnv_from(0xcbf2_9ce4_8422_2325, bytes)
}

/// FNV-1a 64, continuing from an earlier state `h`.
pub fn fnv_from(h: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes
        .into_iter()
        .fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The inputs whose change resets a spec's backoff.
pub fn inputs_hash(spec: &Spec, config_hash: &str) -> String {
    format!("{}-{config_hash}", spec_hash(spec))
}

/// The three-way tag merge: keep tags added by hand (on the VM but never applied by us),
/// drop tags we applied earlier that the spec no longer has, add the spec's tags and the
/// ownership tag. Sorted and deduplicated, as PVE stores them.
pub fn merge_tags(
    current: &[String],
    last_applied: &[String],
    desired: &[String],
    ownership: &str,
) -> Vec<String> {
    let removed: BTreeSet<&String> = last_applied
        .iter()
        .filter(|t| !desired.contains(t))
        .collect();
    let mut out: BTreeSet<String> = current
        .iter()
        .filter(|t| !removed.contains(t))
        .cloned()
        .collect();
    out.extend(desired.iter().cloned());
    out.insert(ownership.to_string());
    out.into_iter().collect()
}

/// What differs between the VM as listed and the spec, in the declared fields the listing
/// shows. Empty: nothing to do.
pub fn drift(spec: &Spec, rec: &SpecRecord, vm: &ObservedVm, install_id: &str) -> Vec<String> {
    let mut why = Vec::new();
    let hash = spec_hash(spec);
    if rec.applied_hash.as_deref() != Some(hash.as_str()) {
        why.push("spec changed".to_string());
    }
    if vm.name.as_deref() != Some(spec.vm_name.as_str()) {
        why.push("name".into());
    }
    let tags = merge_tags(
        &vm.tags,
        &rec.applied_tags,
        &spec.tags,
        &ownership_tag(install_id),
    );
    if tags != vm.tags {
        why.push("tags".into());
    }
    match (spec.power_state, vm.power) {
        (PowerState::Running, Power::Stopped) => why.push("start".into()),
        (PowerState::Stopped, Power::Running) => why.push("shutdown".into()),
        _ => {}
    }
    // Changes PVE keeps pending until a reboot are not re-applied each cycle.
    let pending = |key: &str| rec.reboot_pending.iter().any(|k| k == key);
    if vm.cpus.is_some_and(|c| c != u64::from(spec.cpu)) && !pending("cores") {
        why.push("cpu".into());
    }
    if vm
        .memory_bytes
        .is_some_and(|m| m != spec.memory_mib * 1024 * 1024)
        && !pending("memory")
    {
        why.push("memory".into());
    }
    if vm.disk_bytes.is_some_and(|d| d < spec.disk_bytes)
        && rec.applied_disk_bytes.is_none_or(|a| a < spec.disk_bytes)
    {
        why.push("disk".into());
    }
    why
}

/// What `plan_spec` looks up per spec, built once per site so a plan stays linear in the
/// number of specs and VMs.
struct SiteIndex<'a> {
    /// VMs carrying this install's marker, by the spec the marker names.
    by_marker: BTreeMap<&'a str, Vec<&'a ObservedVm>>,
    /// VMs whose marker could not be read and that no record explains: by name; and tagged
    /// ones listed without a name, by node. The uncertainty stays with what such a VM can be:
    /// the spec of its name, or (nameless) the specs of its node; other specs of the site are
    /// created as usual.
    unread_by_name: BTreeMap<&'a str, u32>,
    unread_tagged_nameless: BTreeMap<&'a str, u32>,
    /// VMs whose marker names this install but does not verify, by the spec it claims (the
    /// lowest VMID): a copy, a typed marker, or a lost marker key.
    unverified_by_spec: BTreeMap<&'a str, u32>,
}

impl<'a> SiteIndex<'a> {
    fn new(
        view: &'a SiteView,
        install_id: &str,
        known: &BTreeSet<u32>,
        tag: &str,
    ) -> SiteIndex<'a> {
        let mut index = SiteIndex {
            by_marker: BTreeMap::new(),
            unread_by_name: BTreeMap::new(),
            unread_tagged_nameless: BTreeMap::new(),
            unverified_by_spec: BTreeMap::new(),
        };
        for vm in view.vms.values().filter(|vm| !vm.template) {
            // Only a marker that verifies (or that the state vouches for) claims a spec.
            if let Some(m) = vm.marker.as_ref().filter(|m| m.install == install_id)
                && vm.marker_verified
            {
                index.by_marker.entry(m.spec.as_str()).or_default().push(vm);
            }
            if let Some(spec) = vm.unverified_claim(install_id) {
                index.unverified_by_spec.entry(spec).or_insert(vm.vmid);
            }
            if !vm.marker_read && !known.contains(&vm.vmid) {
                match vm.name.as_deref() {
                    Some(name) => {
                        index.unread_by_name.entry(name).or_insert(vm.vmid);
                    }
                    None if vm.has_tag(tag) => {
                        index
                            .unread_tagged_nameless
                            .entry(vm.node.as_str())
                            .or_insert(vm.vmid);
                    }
                    None => {}
                }
            }
        }
        index
    }
}

/// Plans one cycle.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let mut out = Plan::default();
    let tag = ownership_tag(input.install_id);
    let desired_names: BTreeSet<&str> = input.desired.iter().map(|s| s.name.as_str()).collect();
    let reserved: BTreeMap<(&str, u32), &str> = input
        .records
        .iter()
        .filter_map(|(name, r)| Some(((r.site.as_str(), record_vmid(r)?), name.as_str())))
        .collect();

    let mut known: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for r in input.records.values() {
        if let Some(id) = record_vmid(r) {
            known.entry(r.site.as_str()).or_default().insert(id);
        }
    }
    let no_vmids = BTreeSet::new();
    let indexes: BTreeMap<&str, SiteIndex> = input
        .sites
        .iter()
        .map(|(name, view)| {
            let known = known.get(name.as_str()).unwrap_or(&no_vmids);
            (
                name.as_str(),
                SiteIndex::new(view, input.install_id, known, &tag),
            )
        })
        .collect();
    let renames = renames(input, &desired_names);
    for spec in input.desired {
        let rec = input.records.get(&spec.name);
        let index = indexes.get(spec.site.as_str());
        let verdict = match renames.get(spec.name.as_str()) {
            Some(r) => plan_rename(input, spec, r, &mut out.actions),
            None => plan_spec(input, spec, rec, &tag, index, &mut out.actions),
        };
        if let Some(d) = duplicate(spec, rec, index, &verdict) {
            out.duplicates.insert(spec.name.clone(), d);
        }
        out.verdicts.insert(spec.name.clone(), verdict);
    }
    let extras: BTreeSet<(&str, u32)> = out
        .duplicates
        .values()
        .flat_map(|d| d.extras.iter().map(|id| (d.site.as_str(), *id)))
        .collect();
    for name in input.invalid {
        out.verdicts.insert(name.clone(), Verdict::Invalid);
    }

    // Specs that are gone.
    let mut removals = Vec::new();
    if input.complete {
        for (name, rec) in input.records {
            if desired_names.contains(name.as_str())
                || input.invalid.contains(name)
                || renames.values().any(|r| r.from == name.as_str())
            {
                continue;
            }
            let Some(view) = input.sites.get(&rec.site) else {
                // The site left the config: nothing can be done there; keep the record.
                continue;
            };
            if !view.reachable() {
                continue;
            }
            match record_vmid(rec).and_then(|id| view.vms.get(&id)) {
                // A create in flight whose VM is not listed yet: execute finds out (it waits
                // for the task, then deletes; or forgets an intent that never reached PVE).
                // Forgetting it here would leak the VM the task is making.
                None if matches!(rec.phase, Phase::Creating { .. }) => {
                    if let Phase::Creating { vmid, node, .. } = &rec.phase
                        && view.node_healthy(node)
                    {
                        removals.push(Action::Remove {
                            spec: name.clone(),
                            site: rec.site.clone(),
                            node: node.clone(),
                            vmid: *vmid,
                            release: rec.orphan_on_delete,
                        });
                    }
                }
                None => removals.push(Action::Forget { spec: name.clone() }),
                Some(vm) if vm.is_unknown() || !view.node_healthy(&vm.node) => {}
                Some(vm) => removals.push(Action::Remove {
                    spec: name.clone(),
                    site: rec.site.clone(),
                    node: vm.node.clone(),
                    vmid: vm.vmid,
                    release: rec.orphan_on_delete,
                }),
            }
        }
    }
    // Orphans: owned VMs that no record and no spec explains.
    for view in input.sites.values().filter(|v| v.reachable()) {
        for vm in view.vms.values() {
            // A second VM claiming a spec is listed even without the ownership tag (a clone
            // gets the tag only when converged), but deleted only with it.
            let extra = extras.contains(&(view.name.as_str(), vm.vmid));
            let owned = vm.owned_by(input.install_id);
            let forged = vm.unverified_claim(input.install_id);
            if vm.template
                || !(owned || extra || forged.is_some())
                || reserved.contains_key(&(view.name.as_str(), vm.vmid))
            {
                continue;
            }
            let marker_spec = vm.marker.as_ref().map(|m| m.spec.as_str()).unwrap_or("");
            if !extra
                && forged.is_none()
                && (desired_names.contains(marker_spec) || input.invalid.contains(marker_spec))
            {
                continue; // adopted above, or an invalid spec's VM left alone
            }
            let key = (view.name.clone(), vm.vmid);
            let first_seen = input
                .orphans_seen
                .get(&key)
                .copied()
                .unwrap_or(input.now_ms);
            out.orphans_seen.insert(key, first_seen);
            let grace_end = first_seen + input.reconcile.orphan_grace.as_millis() as u64;
            let deletable = input.reconcile.orphans == OrphanPolicy::DeleteStopped
                && owned
                && vm.power == Power::Stopped
                && vm.lock.is_none()
                && view.node_healthy(&vm.node);
            let disposition = if let Some(spec) = forged {
                // Typed by hand or copied from another VM: never adopted, changed or deleted.
                format!(
                    "reported: foreign VM claiming spec {spec} (its marker does not verify); never \
                     adopted or deleted"
                )
            } else if deletable && input.now_ms >= grace_end {
                removals.push(Action::DeleteOrphan {
                    site: view.name.clone(),
                    node: vm.node.clone(),
                    vmid: vm.vmid,
                });
                "deleting".to_string()
            } else if deletable {
                format!("delete after {grace_end}")
            } else {
                "reported".to_string()
            };
            out.orphans.push(Orphan {
                site: view.name.clone(),
                vmid: vm.vmid,
                node: vm.node.clone(),
                name: vm.name.clone(),
                power: vm.power.as_str().to_string(),
                first_seen_ms: first_seen,
                disposition,
                duplicate_of: extra.then(|| marker_spec.to_string()),
            });
        }
    }
    // The valves, over every delete and release of this cycle (spec removals and orphans
    // alike): a spec set not read completely, an empty desired set, or more than
    // `max_delete_fraction` of the managed VMs refuse them all.
    let removing = removals
        .iter()
        .filter(|a| matches!(a, Action::Remove { .. } | Action::DeleteOrphan { .. }))
        .count();
    // Managed: the VMs the records know and the owned VMs listed (after a lost database the
    // records are empty, but the VMs are still there).
    let mut managed_set: BTreeSet<(&str, u32)> = input
        .records
        .values()
        .filter_map(|r| Some((r.site.as_str(), record_vmid(r)?)))
        .collect();
    for view in input.sites.values() {
        for vm in view.vms.values() {
            if !vm.template && vm.owned_by(input.install_id) {
                managed_set.insert((view.name.as_str(), vm.vmid));
            }
        }
    }
    let managed = managed_set.len();
    let refusal = if removing == 0 {
        None
    } else if !input.complete {
        Some(format!(
            "refused to delete or release {removing} VM(s): the spec set could not be read completely \
             (see the errors above); nothing is removed until it can"
        ))
    } else if input.desired.is_empty() && input.invalid.is_empty() {
        Some(format!(
            "refused to delete or release {removing} VM(s): the desired set is empty (an empty commit or \
             a wrong `dir` in [source]?); restore the specs, or delete the VMs by hand"
        ))
    } else if removing as f64 > input.reconcile.max_delete_fraction * managed as f64 {
        Some(format!(
            "refused to delete or release {removing} of {managed} managed VM(s): more than \
             max_delete_fraction = {} in one commit; if intended, raise max_delete_fraction in \
             [reconcile] for this change",
            input.reconcile.max_delete_fraction
        ))
    } else {
        None
    };
    match refusal {
        Some(reason) => {
            out.refused.push(reason);
            out.actions.extend(
                removals
                    .into_iter()
                    .filter(|a| !matches!(a, Action::Remove { .. } | Action::DeleteOrphan { .. })),
            );
            for o in out
                .orphans
                .iter_mut()
                .filter(|o| o.disposition == "deleting")
            {
                o.disposition = "reported (delete refused: see _summary.yaml)".into();
            }
        }
        None => out.actions.extend(removals),
    }
    out.actions.sort();
    out
}

/// A removed spec whose VM a new spec of the same commit takes over.
struct Rename<'a> {
    from: &'a str,
    site: &'a str,
    node: &'a str,
    vmid: u32,
    /// The new spec's `proxsync.io/renamed-from` annotation names `from`.
    confirmed: bool,
}

/// Renames of `metadata.name` in this commit: a new spec (no VM recorded) that either names a
/// removed spec in its `proxsync.io/renamed-from` annotation (confirmed), or has exactly the
/// content a removed spec's VM was last converged to (suspected). Only removed specs whose VM
/// exists are considered.
fn renames<'a>(
    input: &'a PlanInput<'a>,
    desired: &BTreeSet<&str>,
) -> BTreeMap<&'a str, Rename<'a>> {
    let mut out = BTreeMap::new();
    if !input.complete {
        return out;
    }
    let removed: Vec<(&str, &SpecRecord)> = input
        .records
        .iter()
        .filter(|(name, r)| {
            !desired.contains(name.as_str())
                && !input.invalid.contains(*name)
                && r.vmid.is_some()
                && r.phase == Phase::Exists
        })
        .map(|(n, r)| (n.as_str(), r))
        .collect();
    if removed.is_empty() {
        return out;
    }
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    for spec in input.desired {
        if input
            .records
            .get(&spec.name)
            .and_then(record_vmid)
            .is_some()
        {
            continue;
        }
        let by_annotation = spec
            .renamed_from
            .as_deref()
            .and_then(|old| removed.iter().find(|(n, _)| *n == old));
        let found = by_annotation.or_else(|| {
            let hash = content_hash(spec);
            removed.iter().find(|(_, r)| {
                r.site == spec.site && r.applied_content.as_deref() == Some(hash.as_str())
            })
        });
        if let Some((from, r)) = found
            && r.site == spec.site
            && taken.insert(from)
        {
            out.insert(
                spec.name.as_str(),
                Rename {
                    from,
                    site: r.site.as_str(),
                    node: r.node.as_str(),
                    vmid: r.vmid.unwrap_or_default(),
                    confirmed: by_annotation.is_some(),
                },
            );
        }
    }
    out
}

/// A rename: re-label the VM when confirmed and the node is healthy; otherwise hold both
/// the delete and the create and say so.
fn plan_rename(
    input: &PlanInput<'_>,
    spec: &Spec,
    r: &Rename<'_>,
    actions: &mut Vec<Action>,
) -> Verdict {
    if !r.confirmed {
        return Verdict::RenameSuspected {
            from: r.from.to_string(),
            vmid: r.vmid,
        };
    }
    let Some(view) = input.sites.get(r.site).filter(|v| v.reachable()) else {
        return Verdict::SiteUnreachable {
            error: format!("site {} cannot be read", r.site),
        };
    };
    let node = view
        .vms
        .get(&r.vmid)
        .map(|vm| vm.node.as_str())
        .unwrap_or(r.node);
    if !view.node_healthy(node) {
        return Verdict::NodeUnhealthy {
            node: node.to_string(),
            quorate: view.health.quorate,
        };
    }
    actions.push(Action::Relabel {
        spec: spec.name.clone(),
        from: r.from.to_string(),
        site: r.site.to_string(),
        node: node.to_string(),
        vmid: r.vmid,
    });
    Verdict::Acting
}

/// The VMs beyond the first that carry the marker of `spec`, if any. The kept one is the VM
/// the plan acts on (record, recorded uid, lowest VMID); a create in flight keeps its VMID.
fn duplicate(
    spec: &Spec,
    rec: Option<&SpecRecord>,
    index: Option<&SiteIndex<'_>>,
    verdict: &Verdict,
) -> Option<Duplicate> {
    let claimants = index?.by_marker.get(spec.name.as_str())?;
    let mut ids: Vec<u32> = claimants.iter().map(|vm| vm.vmid).collect();
    ids.sort_unstable();
    let recorded = rec.and_then(record_vmid);
    let kept = match (verdict, recorded) {
        (Verdict::UpToDate { vmid }, _) => *vmid,
        (_, Some(id)) => id,
        _ => {
            // Adopting: the same choice plan_spec made (recorded uid first, then lowest).
            let uid = rec.map(|r| r.uid.as_str()).unwrap_or("");
            claimants
                .iter()
                .filter(|vm| !uid.is_empty() && vm.marker.as_ref().is_some_and(|m| m.uid == uid))
                .map(|vm| vm.vmid)
                .min()
                .unwrap_or(ids[0])
        }
    };
    let extras: Vec<u32> = ids.into_iter().filter(|id| *id != kept).collect();
    (!extras.is_empty()).then(|| Duplicate {
        site: spec.site.clone(),
        kept,
        extras,
    })
}

/// The VMID a record stands for: the VM, or the one being created.
pub fn record_vmid(rec: &SpecRecord) -> Option<u32> {
    match &rec.phase {
        Phase::Creating { vmid, .. } => Some(*vmid),
        _ => rec.vmid,
    }
}

fn plan_spec(
    input: &PlanInput<'_>,
    spec: &Spec,
    rec: Option<&SpecRecord>,
    tag: &str,
    index: Option<&SiteIndex<'_>>,
    actions: &mut Vec<Action>,
) -> Verdict {
    let Some(view) = input.sites.get(&spec.site) else {
        return Verdict::SiteUnreachable {
            error: format!("site {:?} is not in the config", spec.site),
        };
    };
    if let Some(error) = &view.error {
        return Verdict::SiteUnreachable {
            error: error.clone(),
        };
    }
    let unhealthy = |node: &str| Verdict::NodeUnhealthy {
        node: node.to_string(),
        quorate: view.health.quorate,
    };

    // The spec moved to another site while its VM (or its create) is on the old one. The old
    // site's VMID means nothing on the new site: nothing is looked up there.
    if let Some(r) = rec
        && !r.site.is_empty()
        && r.site != spec.site
        && let Some(vmid) = record_vmid(r)
    {
        let gone = input.sites.get(&r.site).is_some_and(|old| {
            old.reachable()
                && !old.vms.contains_key(&vmid)
                && !matches!(r.phase, Phase::Creating { .. })
        });
        if gone {
            // Its VM was removed on the old site: forget it; the next cycle creates the VM on
            // the new site.
            actions.push(Action::Forget {
                spec: spec.name.clone(),
            });
            return Verdict::Acting;
        }
        return Verdict::SiteMoved {
            from: r.site.clone(),
            vmid,
        };
    }

    // A create in flight is finished, whatever else is true: never a second create.
    if let Some(r) = rec
        && let Phase::Creating {
            vmid, node, upid, ..
        } = &r.phase
    {
        if !view.node_healthy(node) {
            return unhealthy(node);
        }
        if let Some(vm) = view.vms.get(vmid)
            && vm.is_unknown()
        {
            return Verdict::Unknown { vmid: *vmid };
        }
        actions.push(Action::ResumeCreate {
            spec: spec.name.clone(),
            site: spec.site.clone(),
            node: node.clone(),
            vmid: *vmid,
            upid: upid.clone(),
        });
        return Verdict::Acting;
    }

    // Find the VM: by the record's VMID, else by the spec's marker.
    let by_record = rec
        .and_then(|r| r.vmid)
        .and_then(|id| view.vms.get(&id))
        // The VMID is ours only while the VM carries our tag, or our marker; a VMID reused
        // by someone else after a hand delete is not ours.
        .filter(|vm| {
            vm.is_unknown()
                || vm.has_tag(tag)
                || vm
                    .marker
                    .as_ref()
                    .is_some_and(|m| m.install == input.install_id && m.spec == spec.name)
                || !vm.marker_read
        });
    let by_marker = || {
        let mut found: Vec<&ObservedVm> = index
            .and_then(|i| i.by_marker.get(spec.name.as_str()))
            .cloned()
            .unwrap_or_default();
        // Prefer the one with the recorded uid, then the lowest VMID: deterministic.
        found.sort_by_key(|vm| {
            let uid_match = rec.is_some_and(|r| vm.marker.as_ref().is_some_and(|m| m.uid == r.uid));
            (!uid_match, vm.vmid)
        });
        found.first().copied()
    };

    let backoff = rec.and_then(|r| {
        let until = r.next_attempt_ms?;
        let error = r.last_error.as_ref()?;
        if input.retry_transient_now && !error.needs_human {
            return None;
        }
        let same_inputs = error.inputs == inputs_hash(spec, input.config_hash);
        (until > input.now_ms && same_inputs).then_some(until)
    });

    let vm = match by_record {
        Some(vm) => vm,
        None => match by_marker() {
            Some(vm) => {
                if vm.is_unknown() {
                    return Verdict::Unknown { vmid: vm.vmid };
                }
                if !view.node_healthy(&vm.node) {
                    return unhealthy(&vm.node);
                }
                actions.push(Action::Adopt {
                    spec: spec.name.clone(),
                    site: spec.site.clone(),
                    vmid: vm.vmid,
                });
                return Verdict::Acting;
            }
            None => {
                // A VM that may be this spec's (its name, or tagged and nameless on its node)
                // whose marker could not be read: creating now could make a second one. Wait
                // until it is read.
                let unread = index.and_then(|i| {
                    i.unread_by_name
                        .get(spec.vm_name.as_str())
                        .or_else(|| i.unread_tagged_nameless.get(spec.node.as_str()))
                        .copied()
                });
                if let Some(vmid) = unread {
                    return Verdict::Unknown { vmid };
                }
                // A VM claims this spec with a marker that does not verify. It may be the
                // spec's own VM after the marker key was lost: creating now could make a
                // second one, so a human decides (`proxsync adopt`, or delete the VM).
                if let Some(vmid) = index.and_then(|i| i.unverified_by_spec.get(spec.name.as_str()))
                {
                    return Verdict::UnverifiedClaim { vmid: *vmid };
                }
                if let Some(until_ms) = backoff {
                    return Verdict::BackingOff { until_ms };
                }
                if !view.node_healthy(&spec.node) {
                    return unhealthy(&spec.node);
                }
                actions.push(Action::Create {
                    spec: spec.name.clone(),
                    site: spec.site.clone(),
                    node: spec.node.clone(),
                });
                return Verdict::Acting;
            }
        },
    };

    if vm.is_unknown() {
        return Verdict::Unknown { vmid: vm.vmid };
    }
    if !view.node_healthy(&vm.node) {
        return unhealthy(&vm.node);
    }
    let default_rec = SpecRecord::default();
    let why = drift(spec, rec.unwrap_or(&default_rec), vm, input.install_id);
    if why.is_empty() {
        return Verdict::UpToDate { vmid: vm.vmid };
    }
    // A lock is not judged here: execute looks at who holds it (a running task is waited
    // for; a lock no task holds is reported with the command to clear it).
    if let Some(until_ms) = backoff {
        return Verdict::BackingOff { until_ms };
    }
    actions.push(Action::Converge {
        spec: spec.name.clone(),
        site: spec.site.clone(),
        node: vm.node.clone(),
        vmid: vm.vmid,
        why,
    });
    Verdict::Acting
}
