//! Hashes of what a spec asks for (FNV-1a), the tag merge and drift detection.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::observe::{ObservedVm, Power};
use crate::ownership::ownership_tag;
use crate::spec::{Hashes, PowerState, RebootMode, Spec};
use crate::state::SpecRecord;
use crate::util::fnv::FnvHasher;

/// A stable hash of what a spec asks for (not where it is written), hex. Kept with a spec the
/// source parsed ([`remember_hashes`]), else worked out.
pub fn spec_hash(spec: &Spec) -> String {
    format!("{:016x}", hashes(spec).0)
}

/// What a spec asks for without its names (`metadata.name` and the VM name): equal for a spec
/// and its rename.
pub fn content_hash(spec: &Spec) -> String {
    format!("{:016x}", hashes(spec).1)
}

/// Works out a spec's hashes once, when it is parsed, and keeps them with it: a cycle then
/// reads them instead of serialising each spec again. A spec changed afterwards must be
/// given them again.
pub fn remember_hashes(spec: &mut Spec) {
    spec.hashes = Hashes(Some(work_out(spec)));
}

/// The spec's (hash, content hash): kept, or worked out.
fn hashes(spec: &Spec) -> (u64, u64) {
    match spec.hashes.0 {
        Some(kept) => {
            debug_assert_eq!(
                kept,
                work_out(spec),
                "spec {} changed after its hashes were kept",
                spec.name
            );
            kept
        }
        None => work_out(spec),
    }
}

/// The spec's hash and content hash (the hash with an empty VM name).
fn work_out(spec: &Spec) -> (u64, u64) {
    (hash_named(spec, &spec.vm_name), hash_named(spec, ""))
}

/// FNV-1a of the JSON of what the spec asks for, its VM name being `vm_name`. The JSON is
/// hashed as it is written, never held.
fn hash_named(spec: &Spec, vm_name: &str) -> u64 {
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
        user_data: Option<&'a str>,
        // Absent without cloudInit, so the hashes of specs without it stay as they were.
        #[serde(skip_serializing_if = "Option::is_none")]
        cloud_init: Option<&'a crate::spec::CloudInit>,
        power: PowerState,
        tags: &'a [String],
        // Absent without `ha`, so the hashes of specs without it stay as they were.
        #[serde(skip_serializing_if = "Option::is_none")]
        ha: Option<&'a crate::spec::Ha>,
        // Absent without any hardware field, so the hashes of older specs stay as they were
        // (an unchanged spec is not "changed" by an upgrade).
        #[serde(skip_serializing_if = "crate::spec::Hardware::is_empty")]
        hardware: &'a crate::spec::Hardware,
        #[serde(skip_serializing_if = "Option::is_none")]
        networks: Option<&'a Vec<crate::spec::Nic>>,
        // Absent without `disks`, so the hashes of specs with `disk`/`storage` stay as they were.
        #[serde(skip_serializing_if = "Option::is_none")]
        disks: Option<&'a Vec<crate::spec::Disk>>,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        destroy_disks: &'a [String],
        /// Bumped when what converge writes changes for every VM: 2 = signed markers, so a
        /// VM with a marker from before signing is converged (and its marker signed) once.
        identity: u32,
    }
    // A value decrypted from SOPS is hashed as its ciphertext: the hash, kept in the state
    // database and status files, then says nothing about the secret.
    let user_data = spec
        .user_data_sealed
        .as_deref()
        .or(spec.user_data.as_deref());
    let h = Hashed {
        vm_name,
        node: &spec.node,
        cpu: spec.cpu,
        memory_mib: spec.memory_mib,
        disk_bytes: spec.disk_bytes,
        storage: &spec.storage,
        network: &spec.network,
        image: &spec.image,
        user_data,
        cloud_init: spec.cloud_init.as_deref(),
        power: spec.power_state,
        tags: &spec.tags,
        ha: spec.ha.as_deref(),
        hardware: &spec.hardware,
        networks: spec.networks.as_ref(),
        disks: spec.disks.as_ref(),
        destroy_disks: &spec.destroy_disks,
        identity: 2,
    };
    let mut out = FnvHasher::default();
    // Writing to FnvHasher cannot fail, and these types always serialise.
    let _ = serde_json::to_writer(&mut out, &h);
    std::hash::Hasher::finish(&out)
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
    if vm.cpus.is_some_and(|c| c != spec.hardware.vcpus(spec.cpu)) && !pending("cores") {
        why.push("cpu".into());
    }
    if vm
        .memory_bytes
        .is_some_and(|m| m != spec.memory_mib * 1024 * 1024)
        && !pending("memory")
    {
        why.push("memory".into());
    }
    // A VM the spec wants HA-managed that the HA manager does not manage (someone removed
    // the resource); `ignored` resources are not listed with a state.
    if spec
        .ha
        .as_ref()
        .is_some_and(|ha| ha.state != crate::spec::HaState::Ignored && vm.ha_state.is_none())
    {
        why.push("ha".into());
    }
    if vm.disk_bytes.is_some_and(|d| d < spec.disk_bytes)
        && rec.applied_disk_bytes.is_none_or(|a| a < spec.disk_bytes)
    {
        why.push("disk".into());
    }
    why
}

/// The least time between two reboots of one VM by proxsync (`rebootPolicy`).
pub const MIN_REBOOT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(3600);

/// Whether the spec's `rebootPolicy` wants its running VM rebooted at `now_ms` to apply what
/// PVE keeps pending: something is pending, the spec wants it running, the policy allows this
/// instant, and the last reboot by proxsync is at least [`MIN_REBOOT_INTERVAL`] ago (a change PVE
/// never applies cannot make a reboot loop).
pub fn reboot_due(spec: &Spec, rec: &SpecRecord, now_ms: u64) -> bool {
    !rec.reboot_pending.is_empty()
        && spec.power_state == PowerState::Running
        && spec.reboot.allows_at(now_ms)
        && rec
            .last_reboot_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= MIN_REBOOT_INTERVAL.as_millis() as u64)
}

/// The first instant after `now_ms` at which [`reboot_due`] may answer otherwise: the end of
/// [`MIN_REBOOT_INTERVAL`] after the last reboot, or an edge of the `maintenanceWindow`. `None`
/// when no passing of time changes it (nothing pending, a stopped spec, `Never`, `IfNeeded`
/// past the interval).
pub fn reboot_due_changes_at(spec: &Spec, rec: &SpecRecord, now_ms: u64) -> Option<u64> {
    if rec.reboot_pending.is_empty() || spec.power_state != PowerState::Running {
        return None;
    }
    let interval_ends = rec
        .last_reboot_ms
        .map(|t| t.saturating_add(MIN_REBOOT_INTERVAL.as_millis() as u64))
        .filter(|at| *at > now_ms);
    let window_edge = match spec.reboot.mode {
        RebootMode::Window => spec.reboot.window.as_ref()?.next_edge(now_ms),
        RebootMode::Never | RebootMode::IfNeeded => None,
    };
    interval_ends.into_iter().chain(window_edge).min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::RebootPolicy;
    use crate::util::fnv::fnv_hex;

    #[test]
    fn kept_hashes_are_the_hashes_earlier_releases_stored() {
        let mut spec = crate::spec::test_spec("    tags: [web]\n    cpu: 4\n");
        // `applied_hash` values written by earlier releases (FNV-1a of the JSON string): a
        // change here would converge every VM once after an upgrade.
        let json = |vm_name: &str| {
            format!(
                r#"{{"vm_name":"{vm_name}","node":"pve1","cpu":4,"memory_mib":2048,"disk_bytes":34359738368,"storage":"local-lvm","network":"vmbr0","image":{{"template":{{"vmid":9000}}}},"user_data":null,"power":"running","tags":["web"],"identity":2}}"#
            )
        };
        let (hash, content) = (spec_hash(&spec), content_hash(&spec));
        assert_eq!(hash, fnv_hex(json("web-01").as_bytes()));
        assert_eq!(hash, "4bd0f6f084d8bebb");
        assert_eq!(content, fnv_hex(json("").as_bytes()));
        remember_hashes(&mut spec);
        assert!(spec.hashes.0.is_some());
        assert_eq!((spec_hash(&spec), content_hash(&spec)), (hash, content));
    }

    #[test]
    fn a_reboot_is_due_only_when_pending_allowed_and_not_too_soon() {
        let mut spec = crate::spec::test_spec("");
        let mut rec = SpecRecord {
            reboot_pending: vec!["cores".into()],
            ..Default::default()
        };
        let now = 10 * 3_600_000;
        assert!(!reboot_due(&spec, &rec, now), "Never is the default");
        spec.reboot = RebootPolicy {
            mode: RebootMode::IfNeeded,
            ..Default::default()
        };
        assert!(reboot_due(&spec, &rec, now));
        rec.last_reboot_ms = Some(now - 60_000);
        assert!(!reboot_due(&spec, &rec, now), "rebooted a minute ago");
        rec.last_reboot_ms = Some(now - MIN_REBOOT_INTERVAL.as_millis() as u64);
        assert!(reboot_due(&spec, &rec, now));
        spec.power_state = PowerState::Stopped;
        assert!(
            !reboot_due(&spec, &rec, now),
            "a stopped VM is started, not rebooted"
        );
        spec.power_state = PowerState::Running;
        rec.reboot_pending.clear();
        assert!(!reboot_due(&spec, &rec, now));
    }
}
