//! A container's config as its spec asks for it, pure: the parameters of its create
//! (`POST /nodes/{node}/lxc`), and the update a converge sends to an existing one, compared
//! with PVE's values the way pve-container writes them (an absent key is PVE's default). A
//! create renders the same options against an empty config, so a new container and a
//! converged one get the same values. Only declared fields are compared: an absent optional
//! field is left as the container has it.

use crate::gate::identity::VerifiedMarker;
use crate::model::SpecRecord;
use crate::ownership::MarkerKey;
use crate::pve::types::{NetworkInterface, PendingEntry, VmConfig};
use crate::pve::values::{parse_pve_size, pve_bool};
use crate::pve::{Error as PveError, VmParams};
use crate::spec::container::{CtNic, MountPoint};
use crate::spec::ct_init::{DEFAULT_ENTRYPOINT, env_refusal, merged_env};
use crate::spec::{ContainerSpec, MIB, Spec};

use super::config::{ConfigError, description_change, tags_change};
use super::current::effective_value;
use super::hardware::{Changes, Current};

/// A new volume's size as pve-container's `storage:size` takes it: GiB, written exactly
/// (`8`, `0.5`, `1.07421875`). pve-container allocates `int($size_gb * 1024) * 1024` KiB
/// (`src/PVE/LXC.pm` `create_disks`, `$NEW_DISK_RE` `^([^:\s]+):(\d+(\.\d+)?)$`): whole MiB,
/// the rest cut off. So the size is rounded up to a whole MiB and written with every decimal
/// it needs (a MiB is 1/1024 GiB, at most ten decimals, each exact in a double), and the
/// config then says `size=` the spec's size (or the MiB above it), never the MiB below: three
/// decimals made `1100Mi` `1.074`, stored as `size=1099M`, and every later cycle asked to
/// grow it to `1100M` (found in review).
fn gib(bytes: u64) -> String {
    let mib = bytes.div_ceil(MIB);
    let (whole, part) = (mib / 1024, mib % 1024);
    if part == 0 {
        return whole.to_string();
    }
    // part / 1024 = part * 5^10 / 10^10: ten decimals, exact.
    let decimals = format!("{:010}", part * 9_765_625);
    format!("{whole}.{}", decimals.trim_end_matches('0'))
}

/// The options of a new container besides its template, storage and secrets: hostname,
/// resources, root filesystem, NICs, mount points, DNS, features and the shared hardware
/// fields, as converge would set them on an empty config.
pub fn create_params(
    spec: &Spec,
    ct: &ContainerSpec,
    description: String,
    tags: &[String],
) -> Result<VmParams, PveError> {
    let empty = |_: &str| None;
    let mut out = own_changes(ct, &empty)?;
    super::hardware::options(spec, &empty, &mut out)?;
    let mut params = out
        .params
        .checked("hostname", &ct.hostname)?
        .property(
            "rootfs",
            Some(&format!("{}:{}", ct.storage, gib(ct.rootfs_bytes))),
            &[],
        )?
        .set("memory", ct.memory_mib)
        .set("unprivileged", u8::from(ct.unprivileged))
        .set("description", description)
        .tags(tags)?;
    if ct.networks.is_none() {
        // No `networks`: one NIC on the spec's bridge, DHCP, left alone afterwards.
        params = params.property(
            "net0",
            None,
            &[
                ("name", "eth0".into()),
                ("bridge", ct.network.clone()),
                ("ip", "dhcp".into()),
            ],
        )?;
    }
    for mp in ct.mount_points.iter().flatten() {
        params = mount_point(params, mp)?;
    }
    if let Some(arch) = &ct.arch {
        params = params.checked("arch", arch)?;
    }
    if let Some(pool) = &spec.hardware.pool {
        params = params.checked("pool", pool)?;
    }
    if !ct.ssh_public_keys.is_empty() {
        params = params.set("ssh-public-keys", ct.ssh_public_keys.join("\n"));
    }
    Ok(params)
}

/// A new mount point: `mp0=STORAGE:SIZE,mp=/srv/data,backup=1`.
pub fn mount_point(params: VmParams, mp: &MountPoint) -> Result<VmParams, PveError> {
    let mut parts = vec![("mp", mp.path.clone())];
    for (key, v) in [
        ("backup", mp.backup),
        ("acl", mp.acl),
        ("quota", mp.quota),
        ("ro", mp.read_only),
    ] {
        if let Some(v) = v {
            parts.push((key, u8::from(v).to_string()));
        }
    }
    params.property(
        &mp.slot,
        Some(&format!("{}:{}", mp.storage, gib(mp.size_bytes))),
        &parts,
    )
}

/// The update that brings an existing container to its spec: the changes of its own fields
/// and the shared hardware fields, its hostname, the description and marker, the tags (its
/// mount points are an update of their own: [`mount_point_additions`],
/// [`mount_points_removed`]). A value waiting for the next start counts as set. The marker is
/// written only under the gate's permit.
#[allow(clippy::too_many_arguments)]
pub fn container_changes(
    key: &MarkerKey,
    install_id: &str,
    spec: &Spec,
    ct: &ContainerSpec,
    rec: &SpecRecord,
    ours: &VerifiedMarker,
    cfg: &VmConfig,
    pending: &[PendingEntry],
) -> Result<(VmParams, Vec<&'static str>), ConfigError> {
    // `features` on a privileged container are root@pam's alone: never asked for.
    if ct.features.is_some()
        && let Some(why) = privilege_mismatch(spec, cfg)
    {
        return Err(PveError::Setup(why).into());
    }
    let effective = |key: &str| effective_value(cfg, pending, key);
    let mut out = own_changes(ct, &effective)?;
    super::hardware::options(spec, &effective, &mut out)?;
    if effective("hostname").as_deref() != Some(ct.hostname.as_str()) {
        out.set("hostname", |p| p.checked("hostname", &ct.hostname))?;
    }
    let Changes {
        mut params,
        mut changed,
        delete,
    } = out;
    let nics_gone = nics_removed(ct, &effective);
    if !nics_gone.is_empty() {
        params = params.delete_keys(&nics_gone);
        if !changed.contains(&"networks") {
            changed.push("networks");
        }
    }
    if let Some((description, what)) = description_change(key, install_id, spec, rec, ours, cfg) {
        let permit = crate::gate::permit::sign(ours).map_err(|r| ConfigError::Refused(r.into()))?;
        params = params.marker(&permit, description)?;
        changed.push(what);
    }
    if let Some(tags) = tags_change(install_id, spec, rec, cfg) {
        params = params.tags(&tags)?;
        changed.push("tags");
    }
    if !delete.is_empty() {
        params = params.delete_keys(&delete);
    }
    Ok((params, changed))
}

/// Why the spec's `unprivileged` is not the container's, if it is not: PVE sets it at create
/// only (pve-container `update_pct_config`: `unable to modify read-only option:
/// 'unprivileged'`), and a config without `unprivileged: 1` is a privileged container, whose
/// `features` only root@pam may change (`check_ct_modify_config_perm`: "changing feature flags
/// for privileged container is only allowed for root@pam"). A spec that says otherwise than its
/// container would ask for what PVE refuses an API token: an adoption by consent checks it
/// before it writes anything, and a converge before it sends `features`.
pub fn privilege_mismatch(spec: &Spec, cfg: &VmConfig) -> Option<String> {
    let ct = spec.container()?;
    let unprivileged = cfg.get("unprivileged").is_some_and(pve_bool);
    if unprivileged == ct.unprivileged {
        return None;
    }
    let is = if unprivileged {
        "unprivileged"
    } else {
        "privileged"
    };
    let fix = if unprivileged {
        "remove unprivileged: false from the spec"
    } else {
        "write unprivileged: false in the spec (and no features: on a privileged container only \
         root@pam may set them)"
    };
    Some(format!(
        "spec {} says unprivileged: {}, and its container is {is}; PVE sets that at create only, \
         and proxsync's token could not apply the spec as written: {fix}",
        spec.name, ct.unprivileged
    ))
}

/// A number a config holds (`cores: 2`, `cpulimit: 1.5`), as text PVE would write back.
fn number(current: Current, key: &str) -> Option<String> {
    current(key).map(|v| {
        let v = v.trim();
        match v.parse::<f64>() {
            Ok(n) if n.fract() == 0.0 => format!("{}", n as i64),
            Ok(n) => {
                let t = format!("{n:.3}");
                t.trim_end_matches('0').trim_end_matches('.').to_string()
            }
            Err(_) => v.to_string(),
        }
    })
}

/// Whether the config's `cpuunits` is what PVE stores for the spec's `want`: pve-common
/// `CGroup::clamp_cpu_shares` keeps 0..10000 on cgroup v2 (the spec allows no more) and raises
/// a weight below 2 to 2 on cgroup v1 (a PVE 8 node booted with the legacy hierarchy).
fn cpu_units_kept(want: u32, now: Option<&str>) -> bool {
    let Some(now) = now.and_then(|n| n.parse::<u32>().ok()) else {
        return false;
    };
    now == want || (want < 2 && now == 2)
}

/// Cores, memory, swap, CPU limit and units, NICs, DNS, time zone, console and OS type.
fn own_changes(ct: &ContainerSpec, current: Current) -> Result<Changes, PveError> {
    let mut out = Changes::default();
    // pve-container: no `cores` is every host CPU; the spec always says how many.
    if number(current, "cores") != Some(ct.cores.to_string()) {
        out.set("cores", |p| Ok(p.set("cores", ct.cores)))?;
    }
    // pve-container's defaults: memory 512, swap 512.
    let memory = number(current, "memory").unwrap_or_else(|| "512".into());
    if memory != ct.memory_mib.to_string() {
        out.set("memory", |p| Ok(p.set("memory", ct.memory_mib)))?;
    }
    if let Some(swap) = ct.swap_mib
        && number(current, "swap").unwrap_or_else(|| "512".into()) != swap.to_string()
    {
        out.set("swap", |p| Ok(p.set("swap", swap)))?;
    }
    if let Some(limit) = &ct.cpu_limit
        && number(current, "cpulimit").unwrap_or_else(|| "0".into()) != *limit
    {
        out.set("cpuLimit", |p| p.checked("cpulimit", limit))?;
    }
    if let Some(units) = ct.cpu_units
        && !cpu_units_kept(units, number(current, "cpuunits").as_deref())
    {
        out.set("cpuUnits", |p| Ok(p.set("cpuunits", units)))?;
    }
    if let Some(nics) = &ct.networks {
        networks(nics, current, &mut out)?;
    }
    dns_and_console(ct, current, &mut out)?;
    init(ct, current, &mut out)?;
    // Only `nesting` is the spec's (the other flags are root@pam's): the others are kept as
    // they are, so PVE sees only nesting change.
    if let Some(nesting) = ct.features.as_ref().and_then(|f| f.nesting) {
        let now = current("features").unwrap_or_default();
        let now_nesting = now
            .split(',')
            .find_map(|p| p.strip_prefix("nesting="))
            .is_some_and(pve_bool);
        if now_nesting != nesting {
            let kept: Vec<String> = now
                .split(',')
                .filter(|p| !p.is_empty() && !p.starts_with("nesting="))
                .map(str::to_string)
                .collect();
            let parts = [("nesting", u8::from(nesting).to_string())];
            out.set("features", |p| {
                p.property_keeping("features", &parts, &kept)
            })?;
        }
    }
    Ok(out)
}

/// `nameserver`, `searchdomain`, `timezone`, `console`, `tty` and `ostype`.
fn dns_and_console(
    ct: &ContainerSpec,
    current: Current,
    out: &mut Changes,
) -> Result<(), PveError> {
    if let Some(servers) = &ct.nameserver {
        let now: Vec<String> = current("nameserver")
            .map(|v| v.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        if &now != servers {
            let joined = servers.join(" ");
            out.set("nameserver", |p| Ok(p.set("nameserver", joined)))?;
        }
    }
    for (field, key, want) in [
        ("searchdomain", "searchdomain", ct.searchdomain.as_deref()),
        ("timezone", "timezone", ct.timezone.as_deref()),
        ("osType", "ostype", ct.os_type.as_deref()),
    ] {
        if let Some(want) = want
            && current(key).as_deref() != Some(want)
        {
            out.set(field, |p| p.checked(key, want))?;
        }
    }
    if let Some(console) = ct.console
        && current("console").is_none_or(|v| pve_bool(&v)) != console
    {
        out.set("console", |p| Ok(p.set("console", u8::from(console))))?;
    }
    if let Some(tty) = ct.tty
        && number(current, "tty").unwrap_or_else(|| "2".into()) != tty.to_string()
    {
        out.set("tty", |p| Ok(p.set("tty", tty)))?;
    }
    Ok(())
}

/// `entrypoint` and `env` (PVE 9.1), when the spec names them: an absent `entrypoint` is
/// pve-container's `/sbin/init`; `env` is the container's with the spec's variables set
/// ([`merged_env`]), sent only when that differs from what the container has. A container made
/// from an OCI image has the image's at its create (`spec::ct_init`): the converge right after
/// the create writes the spec's.
fn init(ct: &ContainerSpec, current: Current, out: &mut Changes) -> Result<(), PveError> {
    if let Some(want) = &ct.entrypoint
        && current("entrypoint")
            .as_deref()
            .unwrap_or(DEFAULT_ENTRYPOINT)
            != want
    {
        // A command line, not a property string: spaces and `,` are its own. The spec refused
        // every control character but a tab, so it stays one config line.
        out.set("entrypoint", |p| Ok(p.set("entrypoint", want)))?;
    }
    if !ct.env.is_empty() {
        let now = current("env");
        let merged = merged_env(now.as_deref(), &ct.env);
        let same = now.as_deref().is_some_and(|n| {
            n.split('\0')
                .filter(|e| !e.is_empty())
                .eq(merged.iter().map(String::as_str))
        });
        if !same {
            if let Some(why) = env_refusal(&merged) {
                return Err(PveError::Setup(why));
            }
            out.set("env", |p| Ok(p.set("env", merged.join("\0"))))?;
        }
    }
    Ok(())
}

/// Whether two property strings hold the same `key=value` parts, in any order.
fn same_props(a: &str, b: &str) -> bool {
    let parts = |s: &str| {
        let mut v: Vec<String> = s
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    parts(a) == parts(b)
}

/// The NICs: each `netN` rewritten when a declared option differs, keeping the MAC PVE
/// generated (`hwaddr`) unless the spec names one; a NIC beyond the list is removed.
fn networks(nics: &[CtNic], current: Current, out: &mut Changes) -> Result<(), PveError> {
    for (i, nic) in nics.iter().enumerate() {
        let slot = format!("net{i}");
        let now = current(&slot);
        let (declared, kept) = nic_parts(nic, now.as_deref());
        let mut want: Vec<String> = declared.iter().map(|(k, v)| format!("{k}={v}")).collect();
        want.extend(kept.iter().cloned());
        if !now
            .as_deref()
            .is_some_and(|n| same_props(n, &want.join(",")))
        {
            out.set("networks", |p| p.property_keeping(&slot, &declared, &kept))?;
        }
    }
    Ok(())
}

/// The NICs beyond `networks` (only when it is managed): removed.
fn nics_removed(ct: &ContainerSpec, current: Current) -> Vec<String> {
    let Some(nics) = &ct.networks else {
        return Vec::new();
    };
    (nics.len()..crate::spec::container::MAX_CT_NICS)
        .map(|i| format!("net{i}"))
        .filter(|slot| current(slot).is_some())
        .collect()
}

/// A NIC's options: the spec's (`name`, `bridge`, and `hwaddr`, `ip`, `gw`, `ip6`, `gw6`, `tag`,
/// `firewall`, `mtu`, `rate`, `host-managed` when declared), and the parts of the NIC as it is that the spec
/// does not declare, kept as PVE wrote them (the MAC PVE generated, `type`, `link_down`,
/// `trunks`, an address the spec leaves alone). A new NIC gets `type=veth`.
fn nic_parts(nic: &CtNic, now: Option<&str>) -> (Vec<(&'static str, String)>, Vec<String>) {
    let mut declared: Vec<(&'static str, String)> =
        vec![("name", nic.name.clone()), ("bridge", nic.bridge.clone())];
    for (key, v) in [
        ("hwaddr", nic.mac.clone()),
        ("ip", nic.ip.clone()),
        ("gw", nic.gateway.clone()),
        ("ip6", nic.ip6.clone()),
        ("gw6", nic.gateway6.clone()),
        ("tag", nic.vlan.map(|v| v.to_string())),
        ("firewall", nic.firewall.map(|f| u8::from(f).to_string())),
        ("mtu", nic.mtu.map(|m| m.to_string())),
        ("rate", nic.rate.clone()),
        (
            "host-managed",
            nic.host_managed.map(|h| u8::from(h).to_string()),
        ),
    ] {
        if let Some(v) = v {
            declared.push((key, v));
        }
    }
    let kept: Vec<String> = match now {
        Some(now) => now
            .split(',')
            .filter(|p| !p.is_empty())
            .filter(|p| {
                let key = p.split_once('=').map_or(*p, |(k, _)| k);
                !declared.iter().any(|(k, _)| *k == key)
            })
            .map(str::to_string)
            .collect(),
        None => vec!["type=veth".to_string()],
    };
    (declared, kept)
}

/// A container's NICs whose `mtu` is above their bridge's (its listed `mtu`, else Linux's
/// 1500), each said as PVE would refuse it: pve-container's create and config update die
/// `netN: MTU size 'X' is bigger than bridge MTU 'Y'` before any task (`src/PVE/LXC/Config.pm`
/// `update_pct_config`, `read_bridge_mtu`), so the create would fail as a whole. A VM's NIC is
/// refused only at its start (qemu-server). The create's pre-flight and `doctor` ask it.
pub fn mtu_refusals(spec: &Spec, bridges: &[NetworkInterface]) -> Vec<String> {
    let nics = spec
        .container()
        .and_then(|c| c.networks.as_ref())
        .map_or(&[][..], Vec::as_slice);
    nics.iter()
        .enumerate()
        .filter_map(|(i, nic)| {
            let mtu = nic.mtu?;
            let bridge = bridges.iter().find(|b| b.iface == nic.bridge)?;
            let bridge_mtu = bridge.mtu.unwrap_or(1500);
            (u64::from(mtu) > bridge_mtu).then(|| {
                format!(
                    "networks[{i}] (net{i}) has mtu {mtu}, above the MTU of bridge {} on node {} \
                     ({bridge_mtu}): PVE refuses the container's NIC (pve-container: \"net{i}: \
                     MTU size '{mtu}' is bigger than bridge MTU '{bridge_mtu}'\"); set its mtu to \
                     at most {bridge_mtu}, or raise the bridge's MTU on the node",
                    nic.bridge, spec.node
                )
            })
        })
        .collect()
}

/// The root filesystem's size now, when it is smaller than the spec's and not grown to it
/// before (`rootfs` only grows, with `PUT .../resize`). An unlimited subvolume (`size=0`, ZFS
/// or a directory) is never "grown": that would put a quota on it.
pub fn rootfs_to_grow(ct: &ContainerSpec, rec: &SpecRecord, cfg: &VmConfig) -> Option<u64> {
    let size = cfg
        .get("rootfs")?
        .split(',')
        .find_map(|p| p.strip_prefix("size="))
        .and_then(parse_pve_size)
        .filter(|s| *s > 0)?;
    (size < ct.rootfs_bytes && rec.applied_disk_bytes.is_none_or(|a| a < ct.rootfs_bytes))
        .then_some(size)
}

/// The mount points smaller than the spec's size: (slot, size now); an unlimited subvolume
/// (`size=0`) never is.
pub fn mount_points_to_grow(ct: &ContainerSpec, cfg: &VmConfig) -> Vec<(String, u64)> {
    let Some(mps) = &ct.mount_points else {
        return Vec::new();
    };
    mps.iter()
        .filter_map(|mp| {
            let size = cfg
                .get(&mp.slot)?
                .split(',')
                .find_map(|p| p.strip_prefix("size="))
                .and_then(parse_pve_size)
                .filter(|s| *s > 0)?;
            (size < mp.size_bytes).then(|| (mp.slot.clone(), size))
        })
        .collect()
}

/// The mount points `mountPoints` lists that the config has not (by slot), to add.
pub fn mount_point_additions<'s>(
    ct: &'s ContainerSpec,
    cfg: &VmConfig,
) -> Vec<(String, &'s MountPoint)> {
    ct.mount_points
        .iter()
        .flatten()
        .filter(|mp| cfg.get(&mp.slot).is_none())
        .map(|mp| (mp.slot.clone(), mp))
        .collect()
}

/// The mount points in the config that `mountPoints` no longer lists (only when it is
/// managed): each is detached (PVE keeps its volume as `unusedN`).
pub fn mount_points_removed(ct: &ContainerSpec, cfg: &VmConfig) -> Vec<String> {
    let Some(mps) = &ct.mount_points else {
        return Vec::new();
    };
    cfg.values
        .keys()
        .map(String::as_str)
        .filter(|k| {
            k.strip_prefix("mp")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter(|k| !mps.iter().any(|mp| mp.slot == *k))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::GIB;
    use std::collections::BTreeMap;

    fn ct_spec(extra: &str) -> Spec {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: dns-01\nspec:\n  \
             forProvider:\n    site: s\n    node: pve1\n    template: local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\n{extra}"
        );
        let (specs, diags) = crate::spec::parse_file("t.yaml", yaml.as_bytes());
        assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
        specs.into_iter().next().expect("one spec")
    }

    fn cfg(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn changes(spec: &Spec, pairs: &[(&str, &str)]) -> Changes {
        let map = cfg(pairs);
        let current = |k: &str| map.get(k).cloned();
        own_changes(spec.container().unwrap(), &current).unwrap()
    }

    /// An unlimited subvolume (`size=0`) is never resized to the spec's size: that would put a
    /// quota on it. A sized volume smaller than the spec's is.
    #[test]
    fn an_unlimited_subvolume_is_never_grown() {
        let spec = ct_spec(
            "    rootfs: {storage: local-zfs, size: 8Gi}\n    \
             mountPoints:\n      - {slot: mp0, path: /srv, storage: local-zfs, size: 4Gi}\n",
        );
        let rec = SpecRecord::default();
        let config = |rootfs: &str, mp0: &str| VmConfig {
            values: cfg(&[("rootfs", rootfs), ("mp0", mp0)]),
        };
        let unlimited = config(
            "local-zfs:subvol-120-disk-0,size=0T",
            "local-zfs:subvol-120-disk-1,mp=/srv,size=0T",
        );
        assert_eq!(
            rootfs_to_grow(spec.container().unwrap(), &rec, &unlimited),
            None
        );
        assert!(mount_points_to_grow(spec.container().unwrap(), &unlimited).is_empty());
        let small = config(
            "local-zfs:subvol-120-disk-0,size=4G",
            "local-zfs:subvol-120-disk-1,mp=/srv,size=2G",
        );
        assert_eq!(
            rootfs_to_grow(spec.container().unwrap(), &rec, &small),
            Some(4 << 30)
        );
        assert_eq!(
            mount_points_to_grow(spec.container().unwrap(), &small),
            vec![("mp0".to_string(), 2 << 30)]
        );
    }

    #[test]
    fn a_create_carries_every_declared_option() {
        let spec = ct_spec(
            "    cores: 2\n    memory: 1Gi\n    swap: 256Mi\n    cpuLimit: 1.5\n    \
             rootfs: {storage: local-lvm, size: 10Gi}\n    features: {nesting: true}\n    \
             networks:\n      - {name: eth0, bridge: vmbr0, ip: 10.0.0.5/24, gateway: 10.0.0.1, vlan: 20}\n    \
             mountPoints:\n      - {slot: mp0, path: /srv/data, storage: local-lvm, size: 4Gi, backup: true}\n    \
             nameserver: [1.1.1.1, 9.9.9.9]\n    onBoot: true\n",
        );
        let p = create_params(
            &spec,
            spec.container().unwrap(),
            "d".into(),
            &["proxsync.main".into()],
        )
        .unwrap();
        assert_eq!(p.get("cores"), Some("2"));
        assert_eq!(p.get("memory"), Some("1024"));
        assert_eq!(p.get("swap"), Some("256"));
        assert_eq!(p.get("cpulimit"), Some("1.5"));
        assert_eq!(p.get("rootfs"), Some("local-lvm:10"));
        assert_eq!(p.get("features"), Some("nesting=1"));
        assert_eq!(
            p.get("net0"),
            Some("name=eth0,bridge=vmbr0,ip=10.0.0.5/24,gw=10.0.0.1,tag=20,type=veth")
        );
        assert_eq!(p.get("mp0"), Some("local-lvm:4,mp=/srv/data,backup=1"));
        assert_eq!(p.get("nameserver"), Some("1.1.1.1 9.9.9.9"));
        assert_eq!(p.get("onboot"), Some("1"));
        assert_eq!(p.get("unprivileged"), Some("1"));
        assert_eq!(p.get("hostname"), Some("dns-01"));
        assert_eq!(p.get("tags"), Some("proxsync.main"));
    }

    /// What pve-container stores for a size [`gib`] wrote: `int($size_gb * 1024) * 1024` KiB
    /// (`create_disks`), Perl's number from the text a double as here.
    fn pve_stores(text: &str) -> u64 {
        let gb: f64 = text.parse().unwrap();
        (gb * 1024.0) as u64 * 1024 * 1024
    }

    /// A new volume's size is written so that PVE stores the spec's (found in review: three
    /// decimals made `1100Mi` `1.074`, stored as 1099M, and the volume grown every cycle).
    #[test]
    fn a_new_volume_is_stored_at_the_size_the_spec_says() {
        assert_eq!(gib(8 * GIB), "8");
        assert_eq!(gib(512 * MIB), "0.5");
        assert_eq!(gib(1100 * MIB), "1.07421875");
        assert_eq!(gib(MIB), "0.0009765625");
        for mib in [
            1,
            2,
            3,
            511,
            1023,
            1025,
            1100,
            1536,
            4097,
            10_239,
            65_535,
            1 << 22,
        ] {
            let bytes = mib * MIB;
            assert_eq!(
                pve_stores(&gib(bytes)),
                bytes,
                "{mib} MiB as {}",
                gib(bytes)
            );
        }
        // Not a whole MiB (a decimal unit): the MiB above it, never below.
        let ten_g = 10_000_000_000;
        assert_eq!(pve_stores(&gib(ten_g)), 9537 * MIB);
        assert!(pve_stores(&gib(ten_g)) >= ten_g);
        assert_eq!(pve_stores(&gib(MIB + 1)), 2 * MIB);
        let spec = ct_spec(
            "    rootfs: {storage: local-lvm, size: 1100Mi}\n    \
             mountPoints:\n      - {slot: mp0, path: /srv, storage: local-lvm, size: 1100Mi}\n",
        );
        let p = create_params(&spec, spec.container().unwrap(), "d".into(), &[]).unwrap();
        assert_eq!(p.get("rootfs"), Some("local-lvm:1.07421875"));
        assert_eq!(p.get("mp0"), Some("local-lvm:1.07421875,mp=/srv"));
    }

    #[test]
    fn without_networks_a_create_gets_one_dhcp_nic() {
        let spec = ct_spec("");
        let p = create_params(&spec, spec.container().unwrap(), "d".into(), &[]).unwrap();
        assert_eq!(p.get("net0"), Some("name=eth0,bridge=vmbr0,ip=dhcp"));
        assert_eq!(p.get("cores"), Some("1"));
        assert_eq!(p.get("memory"), Some("512"));
        assert_eq!(p.get("rootfs"), Some("local-lvm:8"));
    }

    #[test]
    fn a_container_as_its_spec_says_needs_nothing() {
        let spec = ct_spec(
            "    cores: 2\n    memory: 1Gi\n    swap: 512Mi\n    networks:\n      - {name: eth0, bridge: vmbr0, ip: dhcp}\n",
        );
        let c = changes(
            &spec,
            &[
                ("cores", "2"),
                ("memory", "1024"),
                ("swap", "512"),
                (
                    "net0",
                    "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,type=veth",
                ),
            ],
        );
        assert!(c.changed.is_empty(), "{:?}", c.changed);
    }

    #[test]
    fn a_changed_nic_keeps_its_generated_mac() {
        let spec = ct_spec("    networks:\n      - {name: eth0, bridge: vmbr1, ip: dhcp}\n");
        let c = changes(
            &spec,
            &[
                ("cores", "1"),
                (
                    "net0",
                    "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,type=veth",
                ),
                ("net1", "name=eth1,bridge=vmbr0,ip=dhcp,type=veth"),
            ],
        );
        assert_eq!(
            c.params.get("net0"),
            Some("name=eth0,bridge=vmbr1,ip=dhcp,hwaddr=BC:24:11:AA:BB:CC,type=veth")
        );
        let map = cfg(&[("net1", "name=eth1,bridge=vmbr0,ip=dhcp,type=veth")]);
        let current = |k: &str| map.get(k).cloned();
        assert_eq!(
            nics_removed(spec.container().unwrap(), &current),
            vec!["net1"]
        );
    }

    /// What the spec does not declare of a NIC stays as it is (found in review: a NIC
    /// without `ip` lost the template's `ip=dhcp`, and its `link_down`), and of `features`
    /// only nesting is written (a flag root@pam set, such as keyctl, is kept: PVE refuses a
    /// token any change of it).
    #[test]
    fn undeclared_nic_options_and_feature_flags_are_kept() {
        let spec = ct_spec(
            "    networks:\n      - {name: eth0, bridge: vmbr1}\n    features: {nesting: true}\n",
        );
        let c = changes(
            &spec,
            &[
                ("cores", "1"),
                (
                    "net0",
                    "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,link_down=1,type=veth",
                ),
                ("features", "keyctl=1,nesting=0"),
            ],
        );
        assert_eq!(
            c.params.get("net0"),
            Some("name=eth0,bridge=vmbr1,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,link_down=1,type=veth")
        );
        assert_eq!(c.params.get("features"), Some("nesting=1,keyctl=1"));
        // Nesting as the spec says: nothing written, whatever else is set.
        let c = changes(
            &spec,
            &[
                ("cores", "1"),
                ("net0", "name=eth0,bridge=vmbr1,ip=dhcp,type=veth"),
                ("features", "fuse=1,nesting=1"),
            ],
        );
        assert!(c.changed.is_empty(), "{:?}", c.changed);
    }

    /// `cpuUnits` as PVE stores it: as written up to 10000 (the spec allows no more), a weight
    /// below 2 raised to 2 on a cgroup v1 node (pve-common `clamp_cpu_shares`); never written
    /// again for that.
    #[test]
    fn cpu_units_are_compared_as_pve_stores_them() {
        for (want, now, same) in [
            (100, "100", true),
            (10_000, "10000", true),
            (0, "0", true),
            (0, "2", true),
            (1, "2", true),
            (3, "2", false),
            (100, "1024", false),
        ] {
            let spec = ct_spec(&format!("    cpuUnits: {want}\n"));
            let c = changes(&spec, &[("cores", "1"), ("cpuunits", now)]);
            assert_eq!(
                c.changed.is_empty(),
                same,
                "{want} vs {now}: {:?}",
                c.changed
            );
        }
        let spec = ct_spec("    cpuUnits: 100\n");
        assert_eq!(changes(&spec, &[("cores", "1")]).changed, vec!["cpuUnits"]);
    }

    /// A spec's `unprivileged` against its container's: `features` are never sent to a
    /// privileged container (only root@pam may set them there), whatever the spec says.
    #[test]
    fn features_are_never_asked_of_a_privileged_container() {
        let spec = ct_spec("    features: {nesting: true}\n");
        let privileged = VmConfig {
            values: cfg(&[("cores", "1"), ("hostname", "dns-01")]),
        };
        let why = privilege_mismatch(&spec, &privileged).expect("a mismatch");
        assert!(
            why.contains("says unprivileged: true") && why.contains("is privileged"),
            "{why}"
        );
        let unprivileged = VmConfig {
            values: cfg(&[("cores", "1"), ("unprivileged", "1")]),
        };
        assert_eq!(privilege_mismatch(&spec, &unprivileged), None);
        let stated = ct_spec("    unprivileged: false\n");
        assert_eq!(privilege_mismatch(&stated, &privileged), None);
        assert!(privilege_mismatch(&stated, &unprivileged).is_some());
    }

    #[test]
    fn only_declared_fields_are_compared() {
        let spec = ct_spec("");
        // Swap, limits, DNS and features as someone set them: not the spec's business.
        let c = changes(
            &spec,
            &[
                ("cores", "1"),
                ("swap", "2048"),
                ("cpulimit", "2"),
                ("nameserver", "8.8.8.8"),
                ("features", "nesting=1"),
            ],
        );
        assert!(c.changed.is_empty(), "{:?}", c.changed);
        let c = changes(&spec, &[("cores", "4")]);
        assert_eq!(c.changed, vec!["cores"]);
    }

    #[test]
    fn the_root_filesystem_only_grows() {
        let spec = ct_spec("    rootfs: {size: 10Gi}\n");
        let rec = SpecRecord::default();
        let small = crate::pve::types::VmConfig {
            values: cfg(&[("rootfs", "local-lvm:vm-101-disk-0,size=8G")]),
        };
        assert_eq!(
            rootfs_to_grow(spec.container().unwrap(), &rec, &small),
            Some(8 * GIB)
        );
        let big = crate::pve::types::VmConfig {
            values: cfg(&[("rootfs", "local-lvm:vm-101-disk-0,size=12G")]),
        };
        assert_eq!(rootfs_to_grow(spec.container().unwrap(), &rec, &big), None);
    }

    #[test]
    fn a_value_that_would_add_an_option_is_refused() {
        let mut spec = ct_spec("");
        spec.container_mut().unwrap().hostname = "a,b=c".into();
        assert!(create_params(&spec, spec.container().unwrap(), "d".into(), &[]).is_err());
    }
}
