//! A new VM's create parameters as its spec asks for them, pure (`POST /nodes/{node}/qemu`):
//! the hardware and NICs converge would set on an empty config, proxsync's defaults where the
//! spec says nothing, and the boot disk imported from a disk image or left empty beside an
//! installer ISO. A clone takes its template's hardware and is converged afterwards.

use crate::pve::{Error as PveError, VmParams};
use crate::spec::{Spec, VmSpec};

/// What a created VM boots from.
#[derive(Debug, Clone, Copy)]
pub enum Boot<'a> {
    /// Its boot disk imported from this volume (`import-from=`).
    Import(&'a str),
    /// An empty boot disk, and this ISO as an installer CD-ROM on `ide2`.
    Installer(&'a str),
}

/// The parameters of a new VM: its hardware, NICs and disks, its name, `description` (the
/// marker, signed, under the spec's own text) and `tags`, in one request so a finished create
/// is recognisable without a second one.
pub fn create_params(
    spec: &Spec,
    vm: &VmSpec,
    description: String,
    tags: &[String],
    boot: Boot<'_>,
) -> Result<VmParams, PveError> {
    let mut params = hardware(spec, vm)?
        .set("name", &vm.vm_name)
        .set("description", description)
        .tags(tags)?
        .set("memory", vm.memory_mib);
    if let Some(pool) = &spec.hardware.pool {
        params = params.checked("pool", pool)?;
    }
    // The boot disk (scsi0 in the short form) and, with `disks`, every other disk.
    Ok(match boot {
        Boot::Installer(iso) => {
            let (params, slot) = super::disks::create_drives(vm, params, None)?;
            params
                .cdrom("ide2", iso)?
                .set("boot", format!("order={slot};ide2"))
        }
        Boot::Import(volume) => {
            let (params, slot) = super::disks::create_drives(vm, params, Some(volume))?;
            let params = params.set("boot", format!("order={slot}"));
            // Cloud images expect a serial port; kept unless the spec says otherwise.
            if spec.hardware.serial_console.is_none() {
                params.set("serial0", "socket")
            } else {
                params
            }
        }
    })
}

/// The hardware of a new VM: the spec's fields (as converge would set them on an empty
/// config), else proxsync's defaults (`virtio-scsi-single`, `l26`, the agent on).
fn hardware(spec: &Spec, vm: &VmSpec) -> Result<VmParams, PveError> {
    let hw = &spec.hardware;
    let changes = super::hardware::hardware_changes(spec, &|_| None, &vm.storage)?;
    let nics = super::network::network_changes(vm, &|_| None)?;
    let mut params = changes.params.merge(nics.params);
    if hw.scsi_hardware.is_none() {
        params = params.set("scsihw", crate::spec::DEFAULT_SCSI_HARDWARE);
    }
    if hw.os_type.is_none() {
        params = params.set("ostype", crate::spec::DEFAULT_OS_TYPE);
    }
    if hw.agent.is_none() {
        params = params.set("agent", "1");
    }
    Ok(params)
}
