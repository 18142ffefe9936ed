//! The tag merge, drift detection, reboot timing and the inputs' hash (a spec's own hashes are
//! `spec::hash`).

use std::collections::BTreeSet;

use crate::model::SpecRecord;
use crate::model::{ObservedVm, Power};
use crate::ownership::ownership_tag;
use crate::spec::{PowerState, RebootMode, Spec, spec_hash};

/// The inputs whose change resets a spec's backoff: the spec's hash, the config's, and its
/// `changePolicy` (not in the spec's hash, as it changes nothing of the guest; a change held
/// for want of a snapshot goes ahead at once when it says `IfPossible`).
pub fn inputs_hash(spec: &Spec, config_hash: &str) -> String {
    let mut inputs = format!("{}-{config_hash}", spec_hash(spec));
    if let Some(c) = spec.change_policy.as_deref() {
        inputs.push_str(&format!("-{:?}-{:?}-{}", c.snapshot, c.rollback, c.keep));
    }
    inputs
}

/// The three-way tag merge: keep tags added by hand (on the VM but never applied by us),
/// drop tags we applied earlier that the spec no longer has, add the spec's tags and the
/// ownership tag. Sorted and deduplicated, as PVE stores them.
pub fn merge_tags(
    current: &[impl AsRef<str>],
    last_applied: &[String],
    desired: &[String],
    ownership: &str,
) -> Vec<String> {
    let removed: BTreeSet<&str> = last_applied
        .iter()
        .filter(|t| !desired.contains(t))
        .map(String::as_str)
        .collect();
    // A tag PVE could not hold (a garbled answer's) is nobody's to keep: writing it back
    // would only be refused.
    let mut out: BTreeSet<String> = current
        .iter()
        .map(AsRef::as_ref)
        .filter(|t| !removed.contains(t) && crate::spec::check_tag(t).is_ok())
        .map(str::to_string)
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
    if vm.name.as_deref() != Some(spec.guest_name()) {
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
    // A `ProxmoxTemplate`'s VM, made stopped, is turned into a template last.
    if spec.template.is_some() && !vm.template {
        why.push("template".into());
    }
    match (spec.power_state, vm.power) {
        (PowerState::Running, Power::Stopped) => why.push("start".into()),
        (PowerState::Stopped, Power::Running) => why.push("shutdown".into()),
        _ => {}
    }
    // Changes PVE keeps pending until a reboot are not re-applied each cycle.
    let pending = |key: &str| rec.reboot_pending.iter().any(|k| k == key);
    if vm
        .cpus
        .is_some_and(|c| c != spec.hardware.vcpus(spec.cores()))
        && !pending("cores")
    {
        why.push("cpu".into());
    }
    if vm
        .memory_bytes
        .is_some_and(|m| m != spec.memory_mib() * 1024 * 1024)
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
    // A running container lists its root filesystem's `df` total (pve-container `vmstatus`),
    // always a little below the volume's size: its growth is the converge's, from the config.
    if listed_disk_is_the_volume(spec, vm)
        && vm.disk_bytes.is_some_and(|d| d < spec.root_disk_bytes())
        && rec
            .applied_disk_bytes
            .is_none_or(|a| a < spec.root_disk_bytes())
    {
        why.push("disk".into());
    }
    why
}

/// Whether the listing's `maxdisk` is the boot volume's size: a VM's, and a stopped
/// container's (a running container's is its file system's `df` total).
fn listed_disk_is_the_volume(spec: &Spec, vm: &ObservedVm) -> bool {
    spec.kind() == crate::guest::GuestKind::Qemu || vm.power != Power::Running
}

/// One field in which an observed VM (`managementPolicy: Observe`) differs from its spec, with
/// the spec's value and the VM's, as the cluster listing shows them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldDrift {
    /// The field (`node`, `name`, `cpu`, `memory`, `disk`, `power`, `tags`, `ha`).
    pub field: &'static str,
    /// The spec's value.
    pub spec: String,
    /// The VM's value, as listed.
    pub vm: String,
}

impl FieldDrift {
    /// Whether PVE holds this difference pending until the guest's next start: `pending` (a
    /// record's `reboot_pending`, PVE's keys) names a key of the field. Only a VM's CPUs and
    /// memory can be: the listing's other fields are not held pending, and a container's
    /// CPUs and memory apply at once.
    pub fn waits_for_start(&self, pending: &[String]) -> bool {
        let keys: &[&str] = match self.field {
            "cpu" => &["cores", "sockets", "vcpus"],
            "memory" => &["memory"],
            _ => &[],
        };
        pending.iter().any(|p| keys.contains(&p.as_str()))
    }
}

impl std::fmt::Display for FieldDrift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: spec {}, VM {}", self.field, self.spec, self.vm)
    }
}

/// How `vm` differs from `spec` in what the listing shows (node, name, CPUs, memory, the boot
/// disk's size, power, tags, HA), field by field: what an observe-only spec reports. No
/// request: the listing is read once per cycle anyway.
pub fn observed_drift(spec: &Spec, vm: &ObservedVm) -> Vec<FieldDrift> {
    let mut out = Vec::new();
    let mut push =
        |field: &'static str, spec: String, vm: String| out.push(FieldDrift { field, spec, vm });
    if vm.node != spec.node {
        push("node", spec.node.to_string(), vm.node.to_string());
    }
    if vm.name.as_deref() != Some(spec.guest_name()) {
        push(
            "name",
            spec.guest_name().to_string(),
            vm.name.as_deref().unwrap_or_default().to_string(),
        );
    }
    let vcpus = spec.hardware.vcpus(spec.cores());
    if let Some(c) = vm.cpus.filter(|c| *c != vcpus) {
        push("cpu", vcpus.to_string(), c.to_string());
    }
    let mib = |b: u64| format!("{} MiB", b / (1024 * 1024));
    if let Some(m) = vm
        .memory_bytes
        .filter(|m| *m != spec.memory_mib() * 1024 * 1024)
    {
        push("memory", format!("{} MiB", spec.memory_mib()), mib(m));
    }
    if let Some(d) = vm
        .disk_bytes
        .filter(|d| *d < spec.root_disk_bytes() && listed_disk_is_the_volume(spec, vm))
    {
        push("disk", mib(spec.root_disk_bytes()), mib(d));
    }
    let power = match (spec.power_state, vm.power) {
        (PowerState::Running, Power::Stopped) => Some(("running", "stopped")),
        (PowerState::Stopped, Power::Running) => Some(("stopped", "running")),
        _ => None,
    };
    if let Some((want, have)) = power {
        push("power", want.into(), have.into());
    }
    if spec.tags.iter().any(|t| !vm.tags.iter().any(|v| v == t)) {
        push("tags", spec.tags.join(";"), vm.tags.join(";"));
    }
    if spec
        .ha
        .as_ref()
        .is_some_and(|ha| ha.state != crate::spec::HaState::Ignored && vm.ha_state.is_none())
    {
        push("ha", "managed".into(), "not managed".into());
    }
    out
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
pub(crate) fn reboot_due_changes_at(spec: &Spec, rec: &SpecRecord, now_ms: u64) -> Option<u64> {
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

    /// The guest as the listing shows it once `spec` was applied: nothing differs.
    fn applied(spec: &Spec) -> (ObservedVm, SpecRecord) {
        let vm = ObservedVm {
            kind: spec.kind(),
            vmid: 100,
            node: spec.node.clone(),
            name: Some(spec.guest_name().into()),
            power: Power::Running,
            tags: vec![ownership_tag("main").into()],
            cpus: Some(spec.hardware.vcpus(spec.cores())),
            memory_bytes: Some(spec.memory_mib() << 20),
            disk_bytes: Some(spec.root_disk_bytes()),
            lock: None,
            ha_state: None,
            template: false,
            marker: None,
            marker_read: true,
            marker_verified: true,
            making: None,
            uptime_secs: Default::default(),
        };
        let rec = SpecRecord {
            applied_hash: Some(spec_hash(spec).into()),
            ..Default::default()
        };
        (vm, rec)
    }

    fn container(extra: &str) -> Spec {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata: {{name: dns-01}}\nspec:\n  \
             forProvider:\n    site: lab\n    node: pve1\n    template: \"9100\"\n{extra}"
        );
        let (mut specs, diags) = crate::spec::parse_file("ct.yaml", yaml.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        specs.remove(0)
    }

    /// A change PVE keeps pending is not re-applied each cycle, but only that one.
    #[test]
    fn only_the_pending_key_is_spared_from_drift() {
        let spec = crate::spec::test_spec("");
        let (mut vm, mut rec) = applied(&spec);
        assert!(drift(&spec, &rec, &vm, "main").is_empty());
        vm.cpus = Some(7);
        assert_eq!(drift(&spec, &rec, &vm, "main"), ["cpu"]);
        rec.reboot_pending = vec!["memory".into()];
        assert_eq!(drift(&spec, &rec, &vm, "main"), ["cpu"]);
        rec.reboot_pending = vec!["cores".into()];
        assert!(drift(&spec, &rec, &vm, "main").is_empty());
    }

    /// A spec that wants its guest HA-managed drifts when the listing shows no HA state (a
    /// person removed the resource); `ignored` is not listed with one.
    #[test]
    fn a_missing_ha_resource_is_drift_unless_ignored() {
        for (ha, listed, drifts) in [
            ("    ha: {}\n", None, true),
            ("    ha: {}\n", Some("started"), false),
            ("    ha: {state: ignored}\n", None, false),
            ("", None, false),
        ] {
            let spec = crate::spec::test_spec(ha);
            let (mut vm, rec) = applied(&spec);
            vm.ha_state = listed.map(str::to_string);
            let why = drift(&spec, &rec, &vm, "main");
            assert_eq!(
                why.contains(&"ha".to_string()),
                drifts,
                "{ha} {listed:?}: {why:?}"
            );
        }
    }

    /// The three-way merge keeps a tag added by hand and drops one the spec no longer has; a
    /// tag PVE could not hold (a garbled answer's) is not written back.
    #[test]
    fn merged_tags_keep_hand_tags_but_never_garbage() {
        let s = |v: &[&str]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        let merged = merge_tags(
            &s(&["old", "by-hand", "\u{1f4a5}", "-1", "proxsync.main"]),
            &s(&["old"]),
            &s(&["web"]),
            "proxsync.main",
        );
        assert_eq!(merged, s(&["by-hand", "proxsync.main", "web"]));
    }

    /// What an observe-only spec reports, field by field: the power state either way, a tag
    /// the spec has and the guest lacks, an HA resource it wants and the guest has not.
    #[test]
    fn a_vms_cpus_and_memory_wait_for_its_start_when_pve_holds_them_pending() {
        let d = |field| FieldDrift {
            field,
            spec: "4".into(),
            vm: "2".into(),
        };
        let pending = vec!["memory".to_string(), "sockets".to_string()];
        assert!(d("memory").waits_for_start(&pending));
        assert!(d("cpu").waits_for_start(&pending));
        assert!(!d("tags").waits_for_start(&pending));
        assert!(!d("memory").waits_for_start(&["cores".to_string()]));
        assert!(!d("cpu").waits_for_start(&[]));
    }

    #[test]
    fn observed_drift_names_power_tags_and_ha() {
        let fields = |spec: &Spec, vm: &ObservedVm| -> Vec<&'static str> {
            observed_drift(spec, vm).iter().map(|d| d.field).collect()
        };
        let spec = crate::spec::test_spec("    tags: [web]\n    ha: {}\n");
        let (mut vm, _) = applied(&spec);
        vm.tags.push("web".into());
        vm.ha_state = Some("started".into());
        assert!(fields(&spec, &vm).is_empty(), "{:?}", fields(&spec, &vm));
        vm.power = Power::Stopped;
        assert_eq!(fields(&spec, &vm), ["power"]);
        let stopped = crate::spec::test_spec("    powerState: stopped\n    tags: [web]\n");
        let (mut off, _) = applied(&stopped);
        off.tags.push("web".into());
        assert_eq!(fields(&stopped, &off), ["power"]);
        off.power = Power::Stopped;
        assert!(fields(&stopped, &off).is_empty());
        vm.power = Power::Running;
        vm.tags.retain(|t| t != "web");
        assert_eq!(fields(&spec, &vm), ["tags"]);
        vm.tags.push("web".into());
        vm.ha_state = None;
        assert_eq!(fields(&spec, &vm), ["ha"]);
        let ignored = crate::spec::test_spec("    tags: [web]\n    ha: {state: ignored}\n");
        assert!(fields(&ignored, &vm).is_empty());
    }

    /// A listed disk below the spec's is drift for a VM and a stopped container; a running
    /// container lists its file system's `df` total, always below, so it is not; nor is a
    /// disk already grown to the spec's size.
    #[test]
    fn a_small_listed_disk_is_drift_only_where_it_is_the_volume() {
        for (spec, power, drifts) in [
            (crate::spec::test_spec(""), Power::Running, true),
            (container(""), Power::Stopped, true),
            (container(""), Power::Running, false),
        ] {
            let (mut vm, mut rec) = applied(&spec);
            vm.power = power;
            let stopped = spec.power_state == PowerState::Running && power == Power::Stopped;
            vm.disk_bytes = Some(spec.root_disk_bytes());
            assert!(
                !drift(&spec, &rec, &vm, "main").contains(&"disk".to_string()),
                "the same size"
            );
            assert!(observed_drift(&spec, &vm).iter().all(|d| d.field != "disk"));
            vm.disk_bytes = Some(spec.root_disk_bytes() - (1 << 20));
            let why = drift(&spec, &rec, &vm, "main");
            assert_eq!(
                why.contains(&"disk".to_string()),
                drifts,
                "{power:?}: {why:?}"
            );
            assert_eq!(why.contains(&"start".to_string()), stopped);
            let observed = observed_drift(&spec, &vm);
            assert_eq!(
                observed.iter().any(|d| d.field == "disk"),
                drifts,
                "{observed:?}"
            );
            rec.applied_disk_bytes = Some(spec.root_disk_bytes());
            assert!(!drift(&spec, &rec, &vm, "main").contains(&"disk".to_string()));
            rec.applied_disk_bytes = Some(spec.root_disk_bytes() - (2 << 20));
            assert_eq!(
                drift(&spec, &rec, &vm, "main").contains(&"disk".to_string()),
                drifts
            );
        }
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
