//! A container's spec from its config, pure: what `proxsync import` writes for one container.
//!
//! As for a VM ([`super::spec_text`]), each field proxsync manages is written as the container
//! has it now, so the first cycle after the import finds nothing to change but the marker and
//! the tag. Its NICs and mount points are left alone: a spec without `networks` or
//! `mountPoints` never touches them (converge manages them only when the spec lists them).
//! The consent pins the container by its first NIC's MAC: it has no smbios1 uuid.

use std::collections::BTreeSet;

use crate::pve::types::VmConfig;
use crate::pve::values::{parse_pve_size, prop_value, pve_bool};
use crate::spec::container::OS_TYPES;
use crate::spec::{GIB, MIB, check_vm_name};

use super::spec_text::{
    Head, Imported, VmFacts, Writer, description, ha_line, head_lines, header, left_alone,
    shared_options, spec_name, tags_and_tenant,
};

/// The spec of container `ct`, named after its hostname (made a valid spec name, unique among
/// `taken`, which gets it). Refused (`Err`, saying what to do) for a container a spec cannot
/// adopt: no valid hostname, no NIC with a MAC, or a claim of some proxsync install on it.
pub(crate) fn container_text(
    ct: &VmFacts<'_>,
    taken: &mut BTreeSet<String>,
    observe: bool,
) -> Result<Imported, String> {
    let cfg = ct.config;
    let (hostname, hwaddr) = adoptable(ct)?;
    let rootfs = rootfs(ct)?;
    let name = spec_name(hostname, ct.vmid, taken);
    let mut w = Writer::default();
    let mut known: BTreeSet<String> = ["hostname", "cores", "memory", "tags", "description"]
        .into_iter()
        .map(String::from)
        .collect();
    let mut notes: Vec<String> = Vec::new();
    let (tags, tenant) = tags_and_tenant(cfg, &mut notes);
    let head = Head {
        name: &name,
        guest_name: hostname,
        tenant: tenant.as_deref(),
        proof: (crate::spec::ADOPT_HWADDR, &hwaddr),
    };
    let ha = head_lines(&mut w, ct, &head, observe, &mut notes);
    resources(&mut w, cfg, &mut known, &mut notes);
    w.raw(4, &rootfs);
    known.insert("rootfs".into());
    own_options(&mut w, cfg, &mut known, &mut notes);
    shared_options(&mut w, ct, &mut known, &mut notes);
    if !tags.is_empty() {
        w.list(4, "tags", &tags);
    }
    if let Some(text) = description(cfg, &mut notes) {
        w.line(4, "description", Some(&text));
    }
    ha_line(&mut w, ha);
    let left_alone = left_alone(cfg, &known);
    let mut text = header(ct, hostname, &left_alone, &notes);
    text.push_str(&w.out);
    Ok(Imported {
        name,
        vmid: ct.vmid,
        text,
        left_alone,
    })
}

/// The container's hostname and first NIC's MAC, unless a spec cannot adopt it: no valid
/// hostname, no NIC with a MAC (nothing would tell it from another container at its VMID), no
/// `cores` (a spec always has some: its first cycle would cut the container to them), or a
/// claim of some proxsync install on it (a tag or a marker line).
fn adoptable<'c>(ct: &VmFacts<'c>) -> Result<(&'c str, String), String> {
    let cfg = ct.config;
    let vmid = ct.vmid;
    let hostname = cfg
        .get("hostname")
        .filter(|h| check_vm_name(h).is_ok())
        .ok_or_else(|| {
            format!(
                "container {vmid} has no valid hostname (a DNS name); give it one (pct set {vmid} \
                 --hostname NAME) and import again"
            )
        })?;
    let hwaddr = cfg.first_hwaddr().ok_or_else(|| {
        format!(
            "container {vmid} has no NIC with a MAC address, and a container has no smbios1 \
             uuid: nothing would tell it from another container at VMID {vmid}, so it cannot be \
             adopted by consent. Give it a NIC (pct set {vmid} --net0 name=eth0,bridge=vmbr0) and \
             import again"
        )
    })?;
    if cfg
        .get("cores")
        .and_then(|c| c.trim().parse::<u32>().ok())
        .is_none_or(|c| c == 0)
    {
        return Err(format!(
            "container {vmid} has no cores set (it may use every host CPU), and a spec always \
             sets cores: adopting it would cut it to the spec's. Set them (pct set {vmid} \
             --cores N) and import again"
        ));
    }
    if let Some(tag) = cfg.tags().into_iter().find(|t| t.starts_with("proxsync")) {
        return Err(format!(
            "container {vmid} carries the tag {tag}: an install of proxsync manages it (proxsync \
             adopt confirms a container of this install's)"
        ));
    }
    if cfg
        .description()
        .is_some_and(|d| d.contains(crate::ownership::MARKER_PREFIX))
    {
        return Err(format!(
            "container {vmid} carries a proxsync marker line: some install of proxsync made it"
        ));
    }
    Ok((hostname, hwaddr))
}

/// `rootfs: {storage, size}` as the container has it, unless a spec cannot hold it exactly:
/// without it the spec's default (8Gi on local-lvm) would grow the volume, and a size off by a
/// rounding would too. An unlimited subvolume (`size=0`, ZFS or a directory) has no size a spec
/// holds.
fn rootfs(ct: &VmFacts<'_>) -> Result<String, String> {
    let vmid = ct.vmid;
    let rootfs = ct.config.get("rootfs").unwrap_or_default();
    let storage = rootfs
        .split(',')
        .next()
        .and_then(|v| v.split_once(':'))
        .map(|(s, _)| s)
        .filter(|s| crate::spec::check_storage(s).is_ok());
    let size = prop_value(rootfs, "size", None).and_then(parse_pve_size);
    let text = match size {
        Some(b) if b >= GIB && b.is_multiple_of(GIB) => format!("{}Gi", b / GIB),
        Some(b) if b >= GIB && b.is_multiple_of(MIB) => format!("{}Mi", b / MIB),
        _ => String::new(),
    };
    match storage {
        Some(storage) if !text.is_empty() => {
            Ok(format!("rootfs: {{storage: {storage}, size: {text}}}"))
        }
        _ => Err(format!(
            "container {vmid}'s rootfs ({rootfs:?}) has no storage and size a spec holds (a \
             volume of 1 GiB or more in whole MiB; an unlimited subvolume, size=0, has none), \
             and without one the spec's default, 8Gi, would resize it; give it a size (pct \
             resize {vmid} rootfs SIZE) or write its spec by hand"
        )),
    }
}

/// Cores, memory, swap and CPU limits.
fn resources(
    w: &mut Writer,
    cfg: &VmConfig,
    known: &mut BTreeSet<String>,
    notes: &mut Vec<String>,
) {
    let number = |k: &str| cfg.get(k).and_then(|v| v.trim().parse::<u64>().ok());
    // Set: `adoptable` refuses a container without.
    w.num(4, "cores", number("cores").unwrap_or(1));
    let memory = number("memory").unwrap_or(512);
    w.line(4, "memory", Some(&format!("{memory}Mi")));
    if let Some(swap) = number("swap") {
        w.line(4, "swap", Some(&format!("{swap}Mi")));
        known.insert("swap".into());
    }
    match cfg.get("cpulimit").map(|l| (l, l.trim().parse::<f64>())) {
        // 0 is no limit, as is no key.
        Some((_, Ok(0.0))) => {
            known.insert("cpulimit".into());
        }
        // The spec keeps two decimals: a limit it cannot hold exactly is left alone.
        Some((limit, Ok(v))) if (v * 100.0).fract() == 0.0 && (0.0..=8192.0).contains(&v) => {
            w.raw(4, &format!("cpuLimit: {}", limit.trim()));
            known.insert("cpulimit".into());
        }
        Some((limit, _)) => notes.push(format!(
            "cpulimit {limit} is kept as it is: a spec holds a limit of at most two decimals"
        )),
        None => {}
    }
    match number("cpuunits") {
        Some(units) if units <= u64::from(crate::spec::container::MAX_CPU_UNITS) => {
            w.num(4, "cpuUnits", units);
            known.insert("cpuunits".into());
        }
        // A cgroup v1 node keeps up to 500000; a spec holds what cgroup v2 keeps.
        Some(units) => notes.push(format!(
            "cpuunits {units} is kept as it is: a spec holds at most {}, what PVE keeps on \
             cgroup v2",
            crate::spec::container::MAX_CPU_UNITS
        )),
        None => {}
    }
}

/// `unprivileged`, `features` (nesting), DNS and the OS type.
fn own_options(
    w: &mut Writer,
    cfg: &VmConfig,
    known: &mut BTreeSet<String>,
    notes: &mut Vec<String>,
) {
    let unprivileged = cfg.get("unprivileged").is_some_and(pve_bool);
    if !unprivileged {
        w.flag(4, "unprivileged", false);
    }
    known.insert("unprivileged".into());
    if let Some(features) = cfg.get("features") {
        let nesting = prop_value(features, "nesting", None).is_some_and(pve_bool);
        let others = features
            .split(',')
            .any(|p| !p.is_empty() && !p.starts_with("nesting="));
        if nesting && unprivileged {
            w.raw(4, "features: {nesting: true}");
            if !others {
                known.insert("features".into());
            }
        }
        if others || (nesting && !unprivileged) {
            notes.push(format!(
                "features {features} are kept as they are: a spec holds only nesting, and only \
                 for an unprivileged container"
            ));
        }
    }
    // What the spec's own checks accept (at most three addresses; one domain), else kept.
    if let Some(servers) = cfg.get("nameserver") {
        let list: Vec<String> = servers.split_whitespace().map(str::to_string).collect();
        if list.len() <= 3
            && list
                .iter()
                .all(|s| crate::spec::container::check_nameserver(s).is_ok())
        {
            w.list(4, "nameserver", &list);
            known.insert("nameserver".into());
        } else {
            notes.push(format!(
                "nameserver {servers:?} is kept as it is: a spec holds up to three addresses"
            ));
        }
    }
    if let Some(domain) = cfg.get("searchdomain") {
        if check_vm_name(domain).is_ok() {
            w.line(4, "searchdomain", Some(domain));
            known.insert("searchdomain".into());
        } else {
            notes.push(format!(
                "searchdomain {domain:?} is kept as it is: a spec holds one domain"
            ));
        }
    }
    if let Some(os) = cfg.get("ostype").filter(|o| OS_TYPES.contains(o)) {
        w.line(4, "osType", Some(os));
        known.insert("ostype".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_file;

    fn config(pairs: &[(&str, &str)]) -> VmConfig {
        VmConfig {
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn import(cfg: &VmConfig, running: bool) -> Result<Imported, String> {
        let ct = VmFacts {
            kind: crate::guest::GuestKind::Lxc,
            site: "lab",
            vmid: 120,
            node: "pve2",
            running,
            pool: Some("infra"),
            ha_state: None,
            ha: None,
            config: cfg,
        };
        container_text(&ct, &mut BTreeSet::new(), false)
    }

    const NET0: &str = "name=eth0,bridge=vmbr0,hwaddr=bc:24:11:5e:0a:01,ip=dhcp,type=veth";

    /// Every field a container spec holds is written as the container has it, and the result
    /// parses as a spec whose consent pins the first NIC's MAC.
    #[test]
    fn a_containers_fields_are_written_as_it_has_them() {
        let cfg = config(&[
            ("hostname", "dns-fra-02"),
            ("cores", "2"),
            ("memory", "1024"),
            ("swap", "256"),
            ("cpulimit", "1.5"),
            ("rootfs", "local-lvm:vm-120-disk-0,size=12G"),
            ("net0", NET0),
            (
                "net1",
                "name=eth1,bridge=vmbr1,hwaddr=BC:24:11:5E:0A:02,type=veth",
            ),
            ("mp0", "local-lvm:vm-120-disk-1,mp=/srv,size=4G"),
            ("unprivileged", "1"),
            ("features", "nesting=1,keyctl=1"),
            ("nameserver", "9.9.9.9 1.1.1.1"),
            ("searchdomain", "example.org"),
            ("ostype", "debian"),
            ("onboot", "1"),
            ("tags", "dns;prod"),
            ("description", "resolver\n"),
            ("arch", "amd64"),
        ]);
        let imported = import(&cfg, true).unwrap();
        let (specs, diags) = parse_file("ct.yaml", imported.text.as_bytes());
        assert!(diags.is_empty(), "{diags:?}\n{}", imported.text);
        let spec = &specs[0];
        assert_eq!(spec.kind(), crate::guest::GuestKind::Lxc);
        assert_eq!(
            spec.adopt.as_deref().map(|c| (c.vmid, c.proof.clone())),
            Some((
                120,
                crate::guest::GuestId::Hwaddr("BC:24:11:5E:0A:01".into())
            ))
        );
        assert_eq!(
            (spec.name.as_str(), spec.guest_name()),
            ("dns-fra-02", "dns-fra-02")
        );
        assert_eq!((spec.cores(), spec.memory_mib()), (2, 1024));
        assert_eq!(spec.root_disk_bytes(), 12 * GIB);
        assert_eq!(spec.root_storage(), "local-lvm");
        let ct = spec.container().unwrap();
        assert_eq!(ct.swap_mib, Some(256));
        assert_eq!(ct.cpu_limit.as_deref(), Some("1.5"));
        assert!(
            ct.networks.is_none() && ct.mount_points.is_none(),
            "left alone"
        );
        assert_eq!(ct.features.as_ref().and_then(|f| f.nesting), Some(true));
        assert_eq!(
            ct.nameserver.as_deref(),
            Some(&["9.9.9.9".to_string(), "1.1.1.1".to_string()][..])
        );
        assert_eq!(ct.os_type.as_deref(), Some("debian"));
        assert_eq!(spec.tags, vec!["dns".to_string(), "prod".to_string()]);
        for kept in ["net0", "net1", "mp0", "arch", "features"] {
            assert!(
                imported.left_alone.iter().any(|k| k == kept),
                "{kept}: {:?}",
                imported.left_alone
            );
        }
        assert!(
            imported.text.contains("keyctl"),
            "the note names the kept flags"
        );
        assert!(
            imported.text.contains("from container 120"),
            "{}",
            imported.text
        );
        // Stopped, privileged: said so.
        let mut cfg = cfg;
        cfg.values.insert("unprivileged".into(), "0".into());
        let imported = import(&cfg, false).unwrap();
        let (specs, diags) = parse_file("ct.yaml", imported.text.as_bytes());
        assert!(diags.is_empty(), "{diags:?}\n{}", imported.text);
        let ct = specs[0].container().unwrap();
        assert!(!ct.unprivileged && ct.features.is_none());
        assert_eq!(specs[0].power_state, crate::spec::PowerState::Stopped);
    }

    /// What a spec cannot hold exactly is never written so that the first cycle would change
    /// it: a container without cores or a rootfs size is skipped, a CPU limit of three
    /// decimals, four nameservers or a list of search domains are kept as they are.
    #[test]
    fn what_a_spec_cannot_hold_exactly_is_skipped_or_left_alone() {
        let base = [
            ("hostname", "x"),
            ("net0", NET0),
            ("cores", "1"),
            ("rootfs", "local-lvm:vm-120-disk-0,size=8G"),
        ];
        let with = |key: &str, value: Option<&str>| {
            let mut c = config(&base);
            match value {
                Some(v) => c.values.insert(key.into(), v.into()),
                None => c.values.remove(key),
            };
            import(&c, true)
        };
        assert!(with("cores", None).unwrap_err().contains("no cores set"));
        for rootfs in [
            "local-zfs:subvol-120-disk-0,size=0T",
            "local-lvm:vm-120-disk-0,size=512M",
            "local-lvm:vm-120-disk-0,size=1049088K",
            "local-lvm:vm-120-disk-0",
        ] {
            let why = with("rootfs", Some(rootfs)).unwrap_err();
            assert!(why.contains("rootfs"), "{rootfs}: {why}");
        }
        let odd = with("rootfs", Some("local-lvm:vm-120-disk-0,size=1536M")).unwrap();
        assert!(odd.text.contains("size: 1536Mi"), "{}", odd.text);
        for (key, value) in [
            ("cpulimit", "0.125"),
            ("nameserver", "1.1.1.1 1.0.0.1 9.9.9.9 8.8.8.8"),
            ("searchdomain", "a.example b.example"),
            // A cgroup v1 node's weight: a spec holds what cgroup v2 keeps (found in review).
            ("cpuunits", "20000"),
        ] {
            let imported = with(key, Some(value)).unwrap();
            let (_, diags) = parse_file("ct.yaml", imported.text.as_bytes());
            assert!(diags.is_empty(), "{key}: {diags:?}\n{}", imported.text);
            assert!(imported.left_alone.iter().any(|k| k == key), "{key}");
        }
        let limited = with("cpulimit", Some("1.25")).unwrap();
        assert!(limited.text.contains("cpuLimit: 1.25"), "{}", limited.text);
        // A link-local nameserver with its interface, as pve-container takes it.
        let scoped = with("nameserver", Some("fe80::1%eth0 9.9.9.9")).unwrap();
        let (specs, diags) = parse_file("ct.yaml", scoped.text.as_bytes());
        assert!(diags.is_empty(), "{diags:?}\n{}", scoped.text);
        assert_eq!(
            specs[0].container().and_then(|c| c.nameserver.clone()),
            Some(vec!["fe80::1%eth0".to_string(), "9.9.9.9".to_string()])
        );
    }

    #[test]
    fn a_container_without_a_mac_or_claimed_is_refused() {
        let bare = config(&[
            ("hostname", "x"),
            ("cores", "1"),
            ("rootfs", "local-lvm:vm-120-disk-0,size=8G"),
        ]);
        let why = import(&bare, true).unwrap_err();
        assert!(why.contains("no NIC with a MAC"), "{why}");
        let tagged = config(&[
            ("hostname", "x"),
            ("net0", NET0),
            ("cores", "1"),
            ("tags", "proxsync.main"),
        ]);
        assert!(import(&tagged, true).unwrap_err().contains("proxsync.main"));
        let unnamed = config(&[("net0", NET0)]);
        assert!(import(&unnamed, true).unwrap_err().contains("hostname"));
    }
}
