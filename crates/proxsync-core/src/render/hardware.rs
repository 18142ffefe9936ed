//! The hardware fields of a spec (`cpuType`, `sockets`, `bios`, `tpm`, `onBoot`, ...) as PVE
//! parameters: what differs between the spec and a VM's config, compared the way PVE reads
//! its config (an absent key is PVE's default). A create sends the same changes against an
//! empty config, so a new VM and a converged one get the same values.
//!
//! Only declared fields are compared: an absent field is left as the VM has it.

use crate::pve::values::{prop_value, pve_bool};
use crate::pve::{Error as PveError, VmParams};
use crate::spec::{Bios, Spec, Startup};

/// A VM's current value of a config key (a pending value counts as set), `None` when absent.
pub(crate) type Current<'a> = &'a dyn Fn(&str) -> Option<String>;

/// What converge (or a create) sends for the hardware fields.
#[derive(Debug, Default)]
pub struct Changes {
    /// The values to set.
    pub params: VmParams,
    /// The keys to remove (`delete=`).
    pub delete: Vec<&'static str>,
    /// What changes, by name, for the log and status.
    pub changed: Vec<&'static str>,
}

impl Changes {
    pub(super) fn set(
        &mut self,
        what: &'static str,
        f: impl FnOnce(VmParams) -> Result<VmParams, PveError>,
    ) -> Result<(), PveError> {
        self.params = f(std::mem::take(&mut self.params))?;
        if !self.changed.contains(&what) {
            self.changed.push(what);
        }
        Ok(())
    }
}

/// The hardware changes that bring `current` to `spec`. `storage`: where a new EFI or TPM
/// volume goes (the boot disk's storage).
pub fn hardware_changes(spec: &Spec, current: Current, storage: &str) -> Result<Changes, PveError> {
    let mut out = Changes::default();
    cpu(spec, current, &mut out)?;
    firmware(spec, current, storage, &mut out)?;
    console(spec, current, &mut out)?;
    options(spec, current, &mut out)?;
    Ok(out)
}

fn flag(current: Current, key: &str) -> bool {
    current(key).is_some_and(|v| pve_bool(&v))
}

/// Cores, sockets, CPU type, NUMA and the balloon. Without `sockets`, `cpu` is the total of
/// cores times sockets (as before `sockets` existed); with it, `cpu` is cores per socket.
fn cpu(spec: &Spec, current: Current, out: &mut Changes) -> Result<(), PveError> {
    let hw = &spec.hardware;
    let number = |key: &str| {
        current(key)
            .and_then(|c| c.parse::<u32>().ok())
            .unwrap_or(1)
    };
    let (cores, sockets) = (number("cores"), number("sockets"));
    let wrong = match hw.sockets {
        None => cores * sockets != spec.cores(),
        Some(s) => cores != spec.cores() || sockets != s,
    };
    if wrong {
        out.set("cores", |p| {
            Ok(p.set("cores", spec.cores())
                .set("sockets", hw.sockets.unwrap_or(1)))
        })?;
    }
    if let Some(model) = &hw.cpu_type {
        let cur = current("cpu");
        // PVE's default CPU type when `cpu` is absent is kvm64.
        let now = cur
            .as_deref()
            .map_or(Some("kvm64"), |c| prop_value(c, "cputype", Some("cputype")));
        if now != Some(model.as_str()) {
            out.set("cpuType", |p| {
                p.default_key("cpu", "cputype", cur.as_deref(), model)
            })?;
        }
    }
    if let Some(numa) = hw.numa
        && flag(current, "numa") != numa
    {
        out.set("numa", |p| Ok(p.set("numa", u8::from(numa))))?;
    }
    if let Some(b) = hw.balloon_mib {
        // Absent: the balloon device is on with the full memory as its target.
        let now = current("balloon")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(spec.memory_mib());
        if now != b {
            out.set("balloon", |p| Ok(p.set("balloon", b)))?;
        }
    }
    Ok(())
}

/// BIOS, its EFI disk, the machine type, the SCSI controller and the TPM. An EFI or TPM
/// volume is added when missing and never removed (it holds the VM's keys and state).
fn firmware(
    spec: &Spec,
    current: Current,
    storage: &str,
    out: &mut Changes,
) -> Result<(), PveError> {
    let hw = &spec.hardware;
    if let Some(bios) = hw.bios {
        if current("bios").as_deref().unwrap_or("seabios") != bios.as_str() {
            out.set("bios", |p| p.checked("bios", bios.as_str()))?;
        }
        if bios == Bios::Ovmf && current("efidisk0").is_none() {
            let keys = hw.pre_enrolled_keys.unwrap_or(false);
            out.set("efidisk0", |p| p.efidisk(storage, keys))?;
        }
    }
    if let Some(machine) = &hw.machine {
        let cur = current("machine");
        // Absent: PVE's i440fx default, `pc`.
        let now = cur
            .as_deref()
            .map_or(Some("pc"), |m| prop_value(m, "type", Some("type")));
        if !now.is_some_and(|now| same_machine(machine, now)) {
            out.set("machine", |p| {
                p.default_key("machine", "type", cur.as_deref(), machine)
            })?;
        }
    }
    if let Some(hw_scsi) = &hw.scsi_hardware
        && current("scsihw").as_deref().unwrap_or("lsi") != hw_scsi
    {
        out.set("scsiHardware", |p| p.checked("scsihw", hw_scsi))?;
    }
    // The TPM version cannot change once the state exists (PVE: "cannot be changed later on").
    if let Some(version) = &hw.tpm
        && current("tpmstate0").is_none()
    {
        out.set("tpm", |p| p.tpmstate(storage, version))?;
    }
    Ok(())
}

/// Whether the VM's machine type `have` is the spec's `want`. PVE pins a Windows guest's
/// unversioned machine to the installed QEMU's versioned type at create and on an `ostype`
/// change (qemu-server `PVE/QemuServer/Machine.pm` `check_and_pin_machine_string`:
/// `pc-q35-10.0+pve1`, `pc-i440fx-9.2+pve1`), so a versioned type of the same base is the
/// spec's `q35`, `pc` or `virt`: writing the bare name back would let the machine version
/// change at each start. A `.pxe` variant is another machine (PVE never pins to one).
fn same_machine(want: &str, have: &str) -> bool {
    if want == have {
        return true;
    }
    let bases: &[&str] = match want {
        "q35" => &["pc-q35-"],
        "pc" => &["pc-i440fx-", "pc-"],
        "virt" => &["virt-"],
        _ => return false,
    };
    bases.iter().any(|b| {
        have.strip_prefix(b).is_some_and(|version| {
            let (number, pve) = match version.split_once("+pve") {
                Some((n, p)) => (n, Some(p)),
                None => (version, None),
            };
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
            number.split('.').count() >= 2
                && number.split('.').all(digits)
                && pve.is_none_or(digits)
        })
    })
}

/// The serial console and the display.
fn console(spec: &Spec, current: Current, out: &mut Changes) -> Result<(), PveError> {
    let hw = &spec.hardware;
    let vga_now = current("vga");
    let vga_type = vga_now
        .as_deref()
        .map_or(Some("std"), |v| prop_value(v, "type", Some("type")));
    let want_vga = match (hw.serial_console, &hw.vga) {
        (Some(true), _) => Some("serial0"),
        (_, Some(v)) => Some(v.as_str()),
        _ => None,
    };
    if hw.serial_console == Some(true) && current("serial0").as_deref() != Some("socket") {
        out.set("serialConsole", |p| Ok(p.set("serial0", "socket")))?;
    }
    match want_vga {
        Some(v) if vga_type != Some(v) => {
            out.set("vga", |p| {
                p.default_key("vga", "type", vga_now.as_deref(), v)
            })?;
        }
        // serialConsole: false without a vga: back to PVE's default display.
        None if hw.serial_console == Some(false)
            && vga_type.is_some_and(|t| t.starts_with("serial")) =>
        {
            out.delete.push("vga");
            out.changed.push("serialConsole");
        }
        _ => {}
    }
    Ok(())
}

/// The agent, OS type, start at boot, startup order and protection.
pub(super) fn options(spec: &Spec, current: Current, out: &mut Changes) -> Result<(), PveError> {
    let hw = &spec.hardware;
    if let Some(agent) = hw.agent {
        let cur = current("agent");
        let now = cur
            .as_deref()
            .and_then(|a| prop_value(a, "enabled", Some("enabled")))
            .is_some_and(pve_bool);
        if now != agent {
            let v = if agent { "1" } else { "0" };
            out.set("agent", |p| {
                p.default_key("agent", "enabled", cur.as_deref(), v)
            })?;
        }
    }
    if let Some(os) = &hw.os_type
        && current("ostype").as_deref().unwrap_or("other") != os
    {
        out.set("osType", |p| p.checked("ostype", os))?;
    }
    for (field, key, want) in [
        ("onBoot", "onboot", hw.on_boot),
        ("protection", "protection", hw.protection),
    ] {
        if let Some(want) = want
            && flag(current, key) != want
        {
            out.set(field, |p| Ok(p.set(key, u8::from(want))))?;
        }
    }
    if let Some(startup) = hw.startup
        && current("startup").map(|s| parse_startup(&s)) != Some(startup)
    {
        out.set("startup", |p| Ok(p.set("startup", startup.to_pve())))?;
    }
    Ok(())
}

/// PVE's `startup` value (`[order=]N,up=N,down=N`).
fn parse_startup(s: &str) -> Startup {
    let number = |key: &str| prop_value(s, key, Some("order")).and_then(|v| v.parse::<u64>().ok());
    Startup {
        order: number("order"),
        up_delay: number("up"),
        down_delay: number("down"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec(yaml_extra: &str) -> Spec {
        crate::spec::test_spec(&format!("    cpu: 2\n    memory: 2Gi\n{yaml_extra}"))
    }

    fn changes(spec: &Spec, cfg: &[(&str, &str)]) -> Changes {
        let map: BTreeMap<String, String> = cfg
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        hardware_changes(spec, &|k| map.get(k).cloned(), "local-lvm").unwrap()
    }

    #[test]
    fn an_old_spec_changes_nothing_but_cores() {
        let s = spec("");
        assert!(changes(&s, &[("cores", "2")]).changed.is_empty());
        assert!(
            changes(&s, &[("cores", "1"), ("sockets", "2")])
                .changed
                .is_empty()
        );
        assert_eq!(changes(&s, &[("cores", "4")]).changed, ["cores"]);
    }

    #[test]
    fn pve_defaults_and_spellings_are_no_change() {
        let s = spec(
            "    cpuType: kvm64\n    machine: pc\n    vga: std\n    numa: false\n    onBoot: false\n    osType: other\n    scsiHardware: lsi\n    agent: true\n    startup: {order: 2, upDelay: 30}\n    balloon: 2Gi\n",
        );
        let c = changes(
            &s,
            &[
                ("cores", "2"),
                ("agent", "enabled=1,fstrim_cloned_disks=1"),
                ("startup", "2,up=30"),
            ],
        );
        assert!(c.changed.is_empty(), "{:?}", c.changed);
    }

    #[test]
    fn declared_fields_are_set_keeping_other_options() {
        let s = spec(
            "    cpuType: host\n    serialConsole: true\n    bios: ovmf\n    preEnrolledKeys: true\n    tpm: v2.0\n    sockets: 2\n",
        );
        let c = changes(
            &s,
            &[
                ("cores", "2"),
                ("cpu", "kvm64,flags=+aes"),
                ("vga", "std,memory=32"),
            ],
        );
        assert_eq!(c.params.get("cpu"), Some("host,flags=+aes"));
        assert_eq!(c.params.get("vga"), Some("serial0,memory=32"));
        assert_eq!(c.params.get("serial0"), Some("socket"));
        assert_eq!(c.params.get("sockets"), Some("2"));
        assert_eq!(
            c.params.get("efidisk0"),
            Some("local-lvm:1,efitype=4m,pre-enrolled-keys=1")
        );
        assert_eq!(c.params.get("tpmstate0"), Some("local-lvm:1,version=v2.0"));
        // An existing EFI disk or TPM state is never replaced.
        let c = changes(
            &s,
            &[
                ("cores", "2"),
                ("sockets", "2"),
                ("cpu", "host"),
                ("vga", "serial0"),
                ("serial0", "socket"),
                ("bios", "ovmf"),
                ("efidisk0", "local-lvm:vm-1-disk-1,size=528K"),
                ("tpmstate0", "local-lvm:vm-1-disk-2,version=v1.2"),
            ],
        );
        assert!(c.changed.is_empty(), "{:?}", c.changed);
    }

    #[test]
    fn serial_console_off_restores_the_default_display() {
        let s = spec("    serialConsole: false\n");
        let c = changes(
            &s,
            &[("cores", "2"), ("vga", "serial0"), ("serial0", "socket")],
        );
        assert_eq!(c.delete, ["vga"]);
    }

    #[test]
    fn a_machine_pve_pinned_is_the_spec_s_base_type() {
        let q35 = spec("    machine: q35\n    osType: win11\n");
        for (have, same) in [
            ("pc-q35-10.0+pve1", true),
            ("pc-q35-9.2", true),
            ("type=pc-q35-10.0+pve1,viommu=virtio", true),
            ("q35", true),
            ("pc-i440fx-10.0+pve1", false),
            ("pc-q35-10.0+pve1.pxe", false),
            ("pc", false),
        ] {
            let c = changes(
                &q35,
                &[("cores", "2"), ("ostype", "win11"), ("machine", have)],
            );
            assert_eq!(c.changed.is_empty(), same, "{have}: {:?}", c.changed);
        }
        let pc = spec("    machine: pc\n");
        assert!(
            changes(&pc, &[("cores", "2"), ("machine", "pc-i440fx-9.2+pve1")])
                .changed
                .is_empty()
        );
        assert!(
            changes(&pc, &[("cores", "2"), ("machine", "pc-8.1")])
                .changed
                .is_empty()
        );
        assert!(
            changes(&pc, &[("cores", "2")]).changed.is_empty(),
            "absent is pc"
        );
        let pinned = spec("    machine: pc-q35-9.2+pve1\n");
        let c = changes(&pinned, &[("cores", "2"), ("machine", "pc-q35-10.0+pve1")]);
        assert_eq!(c.changed, ["machine"], "a versioned spec is exact");
    }
}
