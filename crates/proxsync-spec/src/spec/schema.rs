//! JSON Schema (draft 2020-12) of a spec document, for editors' YAML plugins.
//!
//! It mirrors the validator closely enough to catch typos while typing; the validator stays the
//! authority (some rules, such as the image forms or size ranges, are only partly expressible).

use serde_json::{Value, json};

use super::container::{ARCHES, MAX_CT_NICS, MAX_MOUNT_POINTS, OS_TYPES as CT_OS_TYPES};
use super::disks::{DISK_CACHES, DISK_FORMATS, MAX_DISKS};
use super::hardware::{
    MAX_DESCRIPTION, MAX_SOCKETS, MAX_STARTUP, OS_TYPES, SCSI_HARDWARE, TPM_VERSIONS, VGA_TYPES,
};
use super::networks::{MAX_NICS, NET_MODELS};
use super::{
    API_VERSIONS, KIND, LXC_KIND, MAX_CPU, MAX_IP_CONFIGS, MAX_NAMESERVERS, MAX_SSH_KEYS,
    MAX_USER_DATA_BYTES, MAX_VMID, MIN_VMID,
};

/// `spec.forProvider` (split out: one `json!` of the whole schema exceeds the macro recursion limit).
fn for_provider_schema(size: impl Fn(&str, &str) -> Value) -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["site", "node"],
        "properties": {
            "site": {"description": "A [[site]] of the proxsync config.", "type": "string", "pattern": "^[a-z][a-z0-9-]{0,62}$"},
            "node": {"description": "The Proxmox node.", "type": "string", "pattern": "^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$"},
            "name": {
                "description": "VM name (a DNS name); defaults to metadata.name.",
                "type": "string",
                "maxLength": 253,
                "pattern": "^([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\\.)*[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$"
            },
            "cpu": {
                "description": "CPU cores (default 2).",
                "oneOf": [
                    {"type": "integer", "minimum": 1, "maximum": MAX_CPU},
                    {"type": "string", "pattern": "^[0-9]+$"}
                ]
            },
            "memory": size("MiB", "8Gi; range 128Mi..2Ti, default 2Gi"),
            "disk": size("GiB", "100Gi; range 1Gi..100Ti, default 32Gi; disks only grow"),
            "storage": {"description": "Storage for the disk (default local-lvm).", "type": "string", "pattern": "^[a-zA-Z][a-zA-Z0-9._-]*[a-zA-Z0-9]$"},
            "network": {"description": "Bridge for net0 (default vmbr0).", "type": "string", "pattern": "^[a-zA-Z0-9._-]{1,15}$"},
            "image": {
                "description": "A template VMID (e.g. 9000), a volume ID (storage:import/disk.qcow2, storage:iso/installer.iso, storage:vm-9000-disk-0), a template/image name, {image: NAME}: the repository's ProxmoxImage NAME, or {template: NAME}: its ProxmoxTemplate NAME. Required, unless metadata.annotations has proxsync.io/adopt (the spec takes over an existing VM).",
                "oneOf": [
                    {"type": "integer", "minimum": MIN_VMID, "maximum": MAX_VMID},
                    {"type": "object", "additionalProperties": false, "required": ["image"], "properties": {"image": {"description": "The metadata.name of a ProxmoxImage of the repository, on the guest's site.", "type": "string", "pattern": "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"}}},
                    {"type": "object", "additionalProperties": false, "required": ["template"], "properties": {"template": {"description": "The metadata.name of a ProxmoxTemplate of the repository, on the guest's site: the VM is cloned from its current version, once it is built.", "type": "string", "pattern": "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"}}},
                    {"type": "string", "pattern": "^([0-9]{3,9}|[a-zA-Z][a-zA-Z0-9._-]*[a-zA-Z0-9]:[a-zA-Z0-9._+/-]+|[A-Za-z0-9][A-Za-z0-9._-]{0,254})$"}
                ]
            },
            "userData": {
                "description": "cloud-init user-data: YAML starting with #cloud-config, or a script starting with #!; at most 64 KiB. Delivered in a NoCloud seed ISO (docs/cloud-init.md).",
                "type": "string",
                "maxLength": MAX_USER_DATA_BYTES,
                "pattern": "^(#cloud-config|#!)"
            },
            "cloudInit": cloud_init_schema(),
            "powerState": {"enum": ["running", "stopped"]},
            "ha": {
                "description": "The VM as a resource of Proxmox VE's HA manager (vm:<vmid>). state follows powerState unless ignored.",
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "state": {"enum": ["started", "stopped", "ignored"]},
                    "group": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_-]{1,63}$", "description": "A PVE 8 HA group (PVE 9 refuses groups: use nodes)."},
                    "nodes": {
                        "description": "Where the VM runs, by priority (higher first): node or node:priority. proxsync makes a group of them on PVE 8 and a node-affinity rule on PVE 9, and removes it when the spec drops nodes. Not with group.",
                        "type": "array",
                        "minItems": 1,
                        "uniqueItems": true,
                        "items": {"type": "string", "pattern": "^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(:([0-9]|[1-9][0-9]{1,2}|1000))?$"}
                    },
                    "strict": {"type": "boolean", "description": "With nodes: only on them (PVE 8's restricted group, PVE 9's strict rule)."},
                    "maxRestart": {"type": "integer", "minimum": 0, "maximum": 10},
                    "maxRelocate": {"type": "integer", "minimum": 0, "maximum": 10}
                }
            },
            "health": health_schema(),
            "changePolicy": change_policy_schema(),
            "rebootPolicy": {
                "description": "Whether proxsync reboots a running VM to apply changes PVE keeps pending until its next start: Never (report RebootPending only), IfNeeded, or Window (inside maintenanceWindow).",
                "enum": ["Never", "IfNeeded", "Window"]
            },
            "maintenanceWindow": {
                "description": "With rebootPolicy: Window. <days> <HH:MM>-<HH:MM> <time zone>, e.g. \"Sun 02:00-04:00 Europe/Berlin\"; days Mon..Sun, ranges (Mon-Fri), lists (Sat,Sun) or *.",
                "type": "string",
                "pattern": "^\\S+ \\d{2}:\\d{2}-\\d{2}:\\d{2} \\S+$"
            },
            "shutdownTimeout": {
                "description": "How long the guest gets to shut down cleanly for a reboot (default 3m; at most a day).",
                "type": "string",
                "pattern": "^([0-9]+[smhd])+$"
            },
            "forceStopAfter": {
                "description": "When set, a guest that has not shut down after this long is stopped hard; never without it.",
                "type": "string",
                "pattern": "^([0-9]+[smhd])+$"
            },
            "tags": {
                "description": "Extra Proxmox tags (lower case). proxsync.* and tenant_* are reserved.",
                "type": "array",
                "items": {"type": "string", "pattern": "^[a-z0-9_][a-z0-9_+.-]*$"}
            },
            "allowRecreateOnSiteChange": {
                "description": "When the spec names another site than its VM's, create a VM on the new site at once; the old one stays, listed in _orphans.yaml, until a person deletes it. Default false: nothing is created while the old VM exists (SiteMoved).",
                "type": "boolean"
            }
        }
    })
}

/// The hardware fields of `spec.forProvider` (`cpuType`, `bios`, `pool`, ...).
fn hardware_schema() -> Value {
    let boolean = |d: &str| json!({"description": d, "type": "boolean"});
    let count = |d: &str, min: u64, max: u64| {
        json!({"description": d, "oneOf": [
            {"type": "integer", "minimum": min, "maximum": max},
            {"type": "string", "pattern": "^[0-9]+$"}
        ]})
    };
    let delay = |d: &str| json!({"description": d, "type": "integer", "minimum": 0, "maximum": MAX_STARTUP});
    json!({
        "cpuType": {"description": "CPU model (PVE's cpu): host, a built-in model such as x86-64-v2-AES, or custom-<name>.", "type": "string", "pattern": "^([A-Za-z0-9_.+-]+|custom-[A-Za-z][A-Za-z0-9_.-]*)$"},
        "sockets": count("CPU sockets; cpu is then the cores per socket.", 1, u64::from(MAX_SOCKETS)),
        "numa": boolean("Enable NUMA."),
        "balloon": {
            "description": "Minimum memory the balloon may take the VM down to (plain number = MiB); 0 switches ballooning off. At most memory.",
            "oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9]+([KkMmGgTt][Ii]?)?$"}]
        },
        "bios": {"description": "Firmware; ovmf adds an EFI disk on the boot disk's storage.", "enum": ["seabios", "ovmf"]},
        "preEnrolledKeys": boolean("With bios: ovmf, make the EFI disk with distribution and Microsoft keys enrolled (Secure Boot)."),
        "machine": {"description": "QEMU machine type: q35, pc, or versioned (pc-q35-9.2+pve1).", "type": "string", "maxLength": 40, "pattern": "^(pc|q35|virt|pc(-i440fx)?-[0-9]+(\\.[0-9]+)+(\\+pve[0-9]+)?(\\.pxe)?|pc-q35-[0-9]+(\\.[0-9]+)+(\\+pve[0-9]+)?(\\.pxe)?|virt(-[0-9]+(\\.[0-9]+)+)?(\\+pve[0-9]+)?)$"},
        "scsiHardware": {"description": "SCSI controller (PVE's scsihw); virtio-scsi-single when proxsync creates the VM.", "enum": SCSI_HARDWARE},
        "tpm": {"description": "A TPM state volume of this version on the boot disk's storage (cannot change later).", "enum": TPM_VERSIONS},
        "serialConsole": boolean("serial0: socket and vga: serial0."),
        "vga": {"description": "Display type.", "enum": VGA_TYPES},
        "agent": boolean("QEMU guest agent (on when proxsync creates the VM)."),
        "osType": {"description": "Guest OS type (PVE's ostype); l26 when proxsync creates the VM.", "enum": OS_TYPES},
        "onBoot": boolean("Start the VM when its node boots."),
        "startup": {
            "description": "Start and shutdown order and delays (seconds).",
            "type": "object",
            "additionalProperties": false,
            "minProperties": 1,
            "properties": {"order": delay("Start order."), "upDelay": delay("Seconds before the next VM starts."), "downDelay": delay("Seconds before the next VM stops.")}
        },
        "protection": boolean("PVE refuses to remove the VM or its disks."),
        "pool": {"description": "Resource pool (must exist).", "type": "string", "pattern": "^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+){0,2}$"},
        "vmId": {"description": "Create the VM with this VMID (refused if another VM holds it).", "type": "integer", "minimum": MIN_VMID, "maximum": MAX_VMID},
        "description": {"description": "Free text kept above proxsync's marker line.", "type": "string", "maxLength": MAX_DESCRIPTION},
        "networks": networks_schema(),
        "disks": disks_schema(),
        "destroyDisks": {
            "description": "Slots whose attached disk is destroyed with its data (removing a disk from disks only detaches it). Never the boot disk.",
            "type": "array",
            "items": {"type": "string", "pattern": "^(scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|sata[0-5])$"}
        }
    })
}

/// `spec.forProvider.networks` (not with `network`).
fn networks_schema() -> Value {
    let vlan = json!({"type": "integer", "minimum": 1, "maximum": 4094});
    json!({
        "description": "The VM's NICs, net0 first (instead of network). Every option is declared; a NIC beyond the list is removed. Without mac, the MAC PVE generated is kept.",
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_NICS,
        "items": {
            "type": "object",
            "additionalProperties": false,
            "required": ["bridge"],
            "properties": {
                "bridge": {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,15}$"},
                "model": {"description": "Default virtio.", "enum": NET_MODELS},
                "vlan": vlan,
                "trunks": {"description": "VLAN ids and ranges: [10, \"20-30\"] or \"10;20-30\".", "oneOf": [
                    {"type": "array", "items": {"oneOf": [vlan, {"type": "string", "pattern": "^[0-9]+(-[0-9]+)?$"}]}},
                    {"type": "string", "pattern": "^[0-9]+(-[0-9]+)?(;[0-9]+(-[0-9]+)?)*$"}
                ]},
                "mtu": {"type": "integer", "minimum": 1, "maximum": 65520},
                "rate": {"description": "MB/s.", "type": "number", "minimum": 0},
                "firewall": {"type": "boolean"},
                "queues": {"type": "integer", "minimum": 0, "maximum": 64},
                "mac": {"description": "Unicast MAC (XX:XX:XX:XX:XX:XX).", "type": "string", "pattern": "^[0-9A-Fa-f][02468aceACE](:[0-9A-Fa-f]{2}){5}$"}
            }
        }
    })
}

/// `spec.forProvider.disks` (not with `disk` or `storage`).
fn disks_schema() -> Value {
    let flag = json!({"type": "boolean"});
    json!({
        "description": "The VM's disks, instead of disk and storage. The first (or the one with boot: true) is the boot disk and receives the image. A disk added to the list is created; a disk removed from the list is detached (PVE keeps its volume as unusedN), never destroyed. Sizes only grow.",
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_DISKS,
        "items": {
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "slot": {"description": "scsi0-30, virtio0-15 or sata0-5; default: the next free scsi slot in list order.", "type": "string", "pattern": "^(scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|sata[0-5])$"},
                "size": {
                    "description": "A whole number of GiB, 1Gi..100Ti (Ki/Mi/Gi/Ti or K/M/G/T; a plain number is GiB); required but for the boot disk (default 32Gi); disks only grow. Example: 100Gi",
                    "oneOf": [
                        {"type": "integer", "minimum": 1},
                        {"type": "string", "pattern": "^[0-9]+([KkMmGgTt][Ii]?)?$"}
                    ]
                },
                "storage": {"description": "Default local-lvm.", "type": "string", "pattern": "^[a-zA-Z][a-zA-Z0-9._-]*[a-zA-Z0-9]$"},
                "format": {"description": "When the disk is made; file storages only (not lvm, lvmthin, zfspool, rbd).", "enum": DISK_FORMATS},
                "cache": {"description": "Default none.", "enum": DISK_CACHES},
                "discard": flag,
                "ssd": {"description": "scsi and sata only.", "type": "boolean"},
                "iothread": {"description": "scsi and virtio only.", "type": "boolean"},
                "backup": {"description": "Default true.", "type": "boolean"},
                "replicate": {"description": "Default true.", "type": "boolean"},
                "boot": {"description": "The boot disk (default: the first).", "type": "boolean"}
            }
        }
    })
}

/// `spec.forProvider.cloudInit`.
fn cloud_init_schema() -> Value {
    let ip4 = "^(dhcp|([0-9]{1,3}\\.){3}[0-9]{1,3}/[0-9]{1,2})$";
    let ip6 = "^(dhcp|auto|[0-9a-fA-F:.]+/[0-9]{1,3})$";
    json!({
        "description": "First-boot settings, mapped to Proxmox VE's cloud-init options (docs/cloud-init.md). No passwords: use sshKeys.",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "user": {"description": "User name (ciuser).", "type": "string", "pattern": "^[a-z_][a-z0-9_-]{0,31}$"},
            "sshKeys": {
                "description": "OpenSSH public keys, one per entry (sshkeys).",
                "type": "array",
                "maxItems": MAX_SSH_KEYS,
                "items": {"type": "string", "pattern": "^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\\.com|sk-ecdsa-sha2-nistp256@openssh\\.com) [A-Za-z0-9+/]+={0,2}( [^\\n\\r]*)?$"}
            },
            "ipConfig": {
                "description": "Entry N configures netN (ipconfigN).",
                "type": "array",
                "maxItems": MAX_IP_CONFIGS,
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "ip": {"description": "dhcp or IPv4 CIDR.", "type": "string", "pattern": ip4},
                        "gateway": {"description": "IPv4 gateway (static ip only).", "type": "string"},
                        "ip6": {"description": "dhcp, auto or IPv6 CIDR.", "type": "string", "pattern": ip6},
                        "gateway6": {"description": "IPv6 gateway (static ip6 only).", "type": "string"}
                    }
                }
            },
            "nameservers": {"description": "DNS servers (nameserver).", "type": "array", "maxItems": MAX_NAMESERVERS, "items": {"type": "string"}},
            "searchDomain": {"description": "DNS search domain (searchdomain).", "type": "string"},
            "upgradePackages": {"description": "Upgrade packages at first boot (ciupgrade).", "type": "boolean"},
            "seedStorage": {"description": "Storage with iso content for the userData seed image; default: the node's first.", "type": "string"}
        }
    })
}

/// A size: a number with a unit, or a plain number of `plain` units; `minimum` 0 lets a
/// plain 0 through (swap).
fn size_schema(plain: &str, example: &str, minimum: u64) -> Value {
    json!({
        "description": format!("Ki/Mi/Gi/Ti (binary) or K/M/G/T (decimal), case-insensitive; a plain number is {plain}. Example: {example}"),
        "oneOf": [
            {"type": "integer", "minimum": minimum},
            {"type": "string", "pattern": "^[0-9]+([KkMmGgTt][Ii]?)?$"}
        ]
    })
}

/// The JSON Schema of one spec document (a `ProxmoxVM`).
pub fn json_schema() -> Value {
    let mut for_provider = for_provider_schema(|plain, example| size_schema(plain, example, 1));
    if let (Some(props), Value::Object(hw)) = (
        for_provider["properties"].as_object_mut(),
        hardware_schema(),
    ) {
        props.extend(hw);
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://proxsync.io/schemas/proxmoxvm.json",
        "title": "ProxmoxVM",
        "description": "A VM that proxsync keeps in a Proxmox VE cluster.",
        "type": "object",
        "additionalProperties": false,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"enum": API_VERSIONS},
            "kind": {"const": KIND},
            "metadata": {
                "type": "object",
                "additionalProperties": false,
                "required": ["name"],
                "properties": {
                    "name": {
                        "description": "Identity of the spec, unique in the repository; also the status file name.",
                        "type": "string",
                        "pattern": "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
                    },
                    "labels": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "properties": {
                            "tenant-id": {"$ref": "#/$defs/tenant"},
                            "tenant.sankofa.nexus/id": {"$ref": "#/$defs/tenant"}
                        }
                    },
                    "annotations": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "properties": {
                            "proxsync.io/renamed-from": {"description": "The spec's previous metadata.name: its VM is re-labelled, not replaced.", "type": "string"},
                            "proxsync.io/adopt": {"description": "Take over the existing VM with this VMID (written by proxsync import).", "type": "string", "pattern": "^[1-9][0-9]{2,8}$"},
                            "proxsync.io/adopt-uuid": {"description": "The VM's smbios1 uuid when the spec was written: a reused VMID is never taken.", "type": "string", "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"}
                        }
                    }
                }
            },
            "spec": {
                "type": "object",
                "additionalProperties": false,
                "required": ["forProvider"],
                "properties": {
                    "deletionPolicy": {
                        "description": "Delete (default): delete the VM when the spec is removed. Orphan: leave it.",
                        "enum": ["Delete", "Orphan"]
                    },
                    "imagePolicy": {
                        "description": "For a VM made from a ProxmoxImage or ProxmoxTemplate (image: {image: NAME} or {template: NAME}). Keep (default): a new version of the image (or template) leaves the VM as it was made; its status says it runs an older version. Recreate: the VM is deleted and made again from the new version (a set's members at most maxUnavailable at a time); needs deletionPolicy: Delete.",
                        "enum": ["Keep", "Recreate"]
                    },
                    "managementPolicy": {
                        "description": "Full: proxsync acts on the VM. Observe: it never creates, changes, powers or deletes it, only reports how it differs. Default: the config's [reconcile] management_policy (full).",
                        "enum": ["Full", "Observe"]
                    },
                    "suspend": {
                        "description": "true: no action of any kind for the VM (create, change, power, migration, delete) until it is false again; still observed and reported. A removed spec that was suspended keeps its VM until `proxsync resume NAME`.",
                        "type": "boolean"
                    },
                    "dependsOn": {
                        "description": "Specs (metadata.name) that must be Ready before this VM is created, started or rebooted; removed after it. No cycles.",
                        "type": "array",
                        "maxItems": 64,
                        "uniqueItems": true,
                        "items": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"}
                    },
                    "providerConfigRef": {
                        "description": "Accepted for compatibility with the Crossplane provider; ignored with a warning.",
                        "type": "object"
                    },
                    "forProvider": for_provider
                }
            }
        },
        "$defs": {
            "tenant": {
                "description": "Tenant id; becomes the Proxmox tag tenant_<id>.",
                "type": "string",
                "pattern": "^[a-z0-9_+.-]{1,63}$"
            }
        }
    })
}

/// `schema` with its `description` replaced (a VM's field, said of a container).
fn described(mut schema: Value, description: &str) -> Value {
    schema["description"] = json!(description);
    schema
}

/// The `forProvider` fields of a container that are only a container's: what it is made from,
/// its resources, DNS, console and first-boot secrets.
// Long because: one JSON Schema literal, a field per entry, as the spec reads.
fn lxc_own_schema() -> Value {
    let size = |plain: &str, example: &str| size_schema(plain, example, 1);
    let count = |d: &str, min: u64, max: u64| {
        json!({"description": d, "oneOf": [
            {"type": "integer", "minimum": min, "maximum": max},
            {"type": "string", "pattern": "^[0-9]+$"}
        ]})
    };
    let storage = json!({"description": "A storage with rootdir content (default local-lvm).", "type": "string", "pattern": "^[a-zA-Z][a-zA-Z0-9._-]*[a-zA-Z0-9]$"});
    json!({
        "hostname": {
            "description": "The container's hostname (a DNS name); defaults to metadata.name.",
            "type": "string",
            "maxLength": 253,
            "pattern": "^([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\\.)*[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$"
        },
        "template": {
            "description": "What the container is made from: a vztmpl archive as `pveam list <storage>` shows it (local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst; .tar.zst, .tar.gz, .tar.xz, .tgz or .tar), the VMID of a CT template (cloned, e.g. 9100), a CT template's name, or {oci: REFERENCE} (PVE 9.1: an OCI image such as docker.io/library/nginx:1.27, which PVE pulls to the vztmpl storage `storage`, default local). Required unless the spec adopts an existing container (proxsync.io/adopt).",
            "oneOf": [
                {"type": "integer", "minimum": MIN_VMID, "maximum": MAX_VMID},
                {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["oci"],
                    "properties": {
                        "oci": {"description": "The image's reference with its tag (no digest), as PVE's oci-registry-pull takes it.", "type": "string", "maxLength": super::oci::MAX_REFERENCE, "pattern": "^([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*(:[0-9]+)?/)?[a-z0-9]+(([._]|__|-*)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-*)[a-z0-9]+)*)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"},
                        "storage": {"description": "The vztmpl storage it is pulled to (default local).", "type": "string"}
                    }
                },
                {"type": "string", "pattern": "^([0-9]{3,9}|[a-zA-Z][a-zA-Z0-9._-]*[a-zA-Z0-9]:vztmpl/[A-Za-z0-9_+-][A-Za-z0-9._+-]*\\.(tar\\.gz|tar\\.xz|tar\\.zst|tgz|tar)|[A-Za-z0-9][A-Za-z0-9._-]{0,254})$"}
            ]
        },
        "unprivileged": {
            "description": "Run the container unprivileged: its root is not root on the host (default true). Set at create only: PVE cannot change it afterwards. false (a privileged container) needs Sys.Modify on / on PVE 9, and takes no features.",
            "type": "boolean"
        },
        "features": {
            "description": "Feature flags (PVE's features). Only nesting can be set: pve-container lets only root@pam itself change the other flags (keyctl, fuse, mount, mknod, force_rw_sys), or any flag of a privileged container, and proxsync signs in with an API token, which is never root@pam. Set those by hand (pct set) and leave features out of the spec.",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "nesting": {"description": "Let the container nest namespaces (containers, Docker, systemd's sandboxing); needs VM.Allocate. Unprivileged containers only.", "type": "boolean"}
            }
        },
        "cores": count("CPU cores (PVE's cores; default 1).", 1, 8192),
        "cpuLimit": {
            "description": "CPU time limit in CPUs, fractions allowed (PVE's cpulimit, 0..8192); 0 is no limit. Example: 1.5",
            "oneOf": [
                {"type": "number", "minimum": 0, "maximum": 8192},
                {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"}
            ]
        },
        "cpuUnits": count(
            "CPU weight against other guests (PVE's cpuunits): at most 10000, what PVE keeps on cgroup v2.",
            0,
            10_000,
        ),
        "memory": size("MiB", "1Gi; range 16Mi..2Ti, default 512Mi"),
        "swap": size_schema("MiB", "512Mi; range 0..2Ti; PVE makes 512Mi when unset", 0),
        "rootfs": {
            "description": "The root filesystem (PVE's rootfs). It only grows.",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "storage": storage,
                "size": size("GiB", "8Gi; range 1Gi..100Ti, default 8Gi")
            }
        },
        "nameserver": {
            "description": "DNS servers, IP addresses (PVE's nameserver); without it the container uses the host's.",
            "type": "array",
            "maxItems": 3,
            "items": {"type": "string", "pattern": "^[0-9A-Fa-f:.]+$"}
        },
        "searchdomain": {
            "description": "DNS search domain (PVE's searchdomain); without it the host's.",
            "type": "string",
            "pattern": "^([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\\.)*[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$"
        },
        "timezone": {
            "description": "host, or a time zone name such as Europe/Berlin (PVE's timezone; the template must know it).",
            "type": "string",
            "maxLength": 64,
            "pattern": "^(host|[A-Za-z0-9_+-][A-Za-z0-9/_+-]*)$"
        },
        "console": {"description": "Attach a console device, /dev/console (PVE's console; default true).", "type": "boolean"},
        "tty": count("Number of ttys (PVE's tty; default 2).", 0, 6),
        "arch": {"description": "OS architecture (PVE's arch). Set at create only; detected from the template when absent.", "enum": ARCHES},
        "osType": {"description": "OS type (PVE's ostype): how PVE sets up the container's network, hostname and users; detected from the template when absent. unmanaged: PVE sets up nothing.", "enum": CT_OS_TYPES},
        "entrypoint": {
            "description": "PVE 9.1: the command the container runs as its init, with its arguments (PVE's entrypoint; default /sbin/init, or what an OCI image says). Refused on an older site. A change waits for the container's next start (rebootPolicy).",
            "type": "string",
            "minLength": 1,
            "maxLength": super::ct_init::MAX_ENTRYPOINT,
            "pattern": "^[^\\s\\x00-\\x08\\x0a-\\x1f\\x7f]([^\\x00-\\x08\\x0a-\\x1f\\x7f]*[^\\s\\x00-\\x08\\x0a-\\x1f\\x7f])?$"
        },
        "env": {
            "description": "PVE 9.1: variables of the container's runtime environment, NAME: value (PVE's env). Each is set; the container's other variables (an OCI image's PATH, say) are kept. At most 64 KiB in all. Refused on an older site. A change waits for the container's next start (rebootPolicy).",
            "type": "object",
            "maxProperties": super::ct_init::MAX_ENV,
            "propertyNames": {"pattern": "^[A-Za-z0-9_]+$"},
            "additionalProperties": {"type": "string", "maxLength": super::ct_init::MAX_ENV_VALUE, "pattern": "^([^\\x00-\\x08\\x0a-\\x1f\\x7f]*[^\\s\\x00-\\x08\\x0a-\\x1f\\x7f])?$"}
        },
        "sshPublicKeys": {
            "description": "OpenSSH public keys for root, one line each (PVE's ssh-public-keys). Given at create only.",
            "type": "array",
            "maxItems": MAX_SSH_KEYS,
            "items": {"type": "string", "pattern": "^(ssh-|ecdsa-|sk-)[^\\s]+\\s+[^\\s]+[^\\n\\r]*$"}
        },
        "password": {
            "description": "Where the root password is read from at create: a file or a systemd credential. Never the password itself: a spec lives in git.",
            "oneOf": [
                {"type": "object", "additionalProperties": false, "required": ["file"], "properties": {
                    "file": {"description": "An absolute path, e.g. /etc/proxsync/ct-root-password.", "type": "string", "pattern": "^/"}
                }},
                {"type": "object", "additionalProperties": false, "required": ["credential"], "properties": {
                    "credential": {"description": "A systemd credential's name (LoadCredential=), e.g. ct-root-password.", "type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"}
                }}
            ]
        }
    })
}

/// A container's `networks`, `mountPoints` and `destroyVolumes`.
fn lxc_devices_schema() -> Value {
    let slot = json!({"type": "string", "pattern": "^mp([0-9]|[1-9][0-9]|1[0-9]{2}|2[0-4][0-9]|25[0-5])$"});
    let flag = |d: &str| json!({"description": d, "type": "boolean"});
    json!({
        "networks": {
            "description": "The container's NICs (PVE's netN), net0 first. Every option is declared; a NIC beyond the list is removed. Without networks: one NIC eth0 on vmbr0 with DHCP at create, left alone after. Without mac, the MAC PVE generated is kept.",
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_CT_NICS,
            "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["name", "bridge"],
                "properties": {
                    "name": {"description": "The interface's name in the container, e.g. eth0; each NIC its own.", "type": "string", "pattern": "^[a-zA-Z0-9_.-]{1,15}$"},
                    "bridge": {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,15}$"},
                    "vlan": {"type": "integer", "minimum": 1, "maximum": 4094},
                    "firewall": {"type": "boolean"},
                    "ip": {"description": "dhcp, manual, or an IPv4 address with its prefix (10.0.0.5/24).", "type": "string", "pattern": "^(dhcp|manual|([0-9]{1,3}\\.){3}[0-9]{1,3}/[0-9]{1,2})$"},
                    "gateway": {"description": "IPv4 gateway (static ip only).", "type": "string", "pattern": "^([0-9]{1,3}\\.){3}[0-9]{1,3}$"},
                    "ip6": {"description": "dhcp, auto, manual, or an IPv6 address with its prefix (fd00::5/64).", "type": "string", "pattern": "^(dhcp|auto|manual|[0-9a-fA-F:.]+/[0-9]{1,3})$"},
                    "gateway6": {"description": "IPv6 gateway (static ip6 only).", "type": "string", "pattern": "^[0-9a-fA-F:.]+$"},
                    "mtu": {"type": "integer", "minimum": 64, "maximum": 65535},
                    "rate": {"description": "MB/s.", "type": "number", "minimum": 0},
                    "mac": {"description": "Unicast MAC (XX:XX:XX:XX:XX:XX).", "type": "string", "pattern": "^[0-9A-Fa-f][02468aceACE](:[0-9A-Fa-f]{2}){5}$"},
                    "hostManaged": {"description": "PVE 9.1: the host, not the container, configures the interface's addresses (PVE's host-managed), for an application container without a network stack. PVE turns it on for an OCI image's container with an entrypoint of its own unless the spec says false. Not with ip6: auto.", "type": "boolean"}
                }
            }
        },
        "mountPoints": {
            "description": "Volumes the container mounts (PVE's mpN). One added to the list is created; one removed is detached (PVE keeps its volume as unusedN) unless destroyVolumes lists its slot. Sizes only grow. Without mountPoints, mount points are left alone. No bind mounts of host paths: PVE lets only root@pam itself set them.",
            "type": "array",
            "maxItems": MAX_MOUNT_POINTS,
            "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["slot", "path", "storage", "size"],
                "properties": {
                    "slot": described(slot.clone(), "mp0 to mp255."),
                    "path": {"description": "Where it is mounted in the container: an absolute path other than /, without '..', ',', '=', ';' or white space (e.g. /srv/data).", "type": "string", "maxLength": 255, "pattern": "^/[^,=;\\s]+$"},
                    "storage": {"description": "A storage with rootdir content.", "type": "string", "pattern": "^[a-zA-Z][a-zA-Z0-9._-]*[a-zA-Z0-9]$"},
                    "size": size_schema("GiB", "10Gi; range 1Gi..100Ti", 1),
                    "backup": flag("Include it in backups (PVE's backup)."),
                    "acl": flag("POSIX ACLs on (PVE's acl)."),
                    "quota": flag("User quotas in the container (PVE's quota)."),
                    "readOnly": flag("Mount it read-only (PVE's ro).")
                }
            }
        },
        "destroyVolumes": {
            "description": "Mount point slots whose volume is destroyed with its data once they leave mountPoints (instead of kept as unusedN). Not a slot mountPoints still lists; never rootfs.",
            "type": "array",
            "maxItems": MAX_MOUNT_POINTS,
            "items": slot
        }
    })
}

/// `health`: the checks the daemon makes of a guest, and their limits.
fn health_schema() -> Value {
    let duration =
        |d: &str| json!({"description": d, "type": "string", "pattern": "^([0-9]+[smhd])+$"});
    let port = json!({"type": "integer", "minimum": 1, "maximum": 65535});
    json!({
        "description": "What \"working\" means for the guest, checked by the daemon after a create, after a restart and at each full cycle: Healthy is a condition, and Ready needs it. An unhealthy guest is reported (status, metrics, a spec_unhealthy notification), never restarted by proxsync. At least one check.",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "agent": {"type": "boolean", "description": "The guest agent answers a ping (a VM's only: a container has no agent)."},
            "tcp": {
                "description": "The port takes a TCP connection.",
                "type": "object", "additionalProperties": false, "required": ["port"],
                "properties": {"port": port.clone()}
            },
            "http": {
                "description": "An HTTP GET of path answers with expect (default: any 2xx). Plain HTTP; for HTTPS check the port with tcp.",
                "type": "object", "additionalProperties": false, "required": ["port"],
                "properties": {
                    "port": port,
                    "path": {"type": "string", "maxLength": super::health::MAX_PATH, "pattern": "^/[!-~]*$", "description": "Visible ASCII, starting with / (default /)."},
                    "expect": {"type": "integer", "minimum": 100, "maximum": 599}
                }
            },
            "address": {"type": "string", "description": "The IP address tcp and http connect to; default the first usable address the guest reports (its agent's, a container's interfaces)."},
            "timeout": duration("How long a guest just created, started or restarted has to pass before a failing check counts (default 5m; 10s to 1d)."),
            "checkTimeout": duration("How long one check may take (default 5s; 1s to 30s)."),
            "failures": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Failed checks in a row before a guest that passed counts as unhealthy (default 3)."}
        }
    })
}

/// `changePolicy`: the snapshot before a change, the rollback after one the guest fails.
fn change_policy_schema() -> Value {
    json!({
        "description": "What guards a change of the guest: a snapshot taken before it, and a rollback to that snapshot (then a start) when the guest is not healthy within health.timeout after it. A change rolled back is Stalled (RolledBack) and not tried again until the spec changes or `proxsync reconcile NAME --retry`. Only snapshots proxsync took are rolled back to or deleted.",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "snapshot": {
                "description": "BeforeRestart (default): before a change a running guest takes at its next start; BeforeAnyChange: before any config change; IfPossible: as BeforeRestart, and applied unprotected where the storage cannot snapshot (else the change is held); Never.",
                "enum": ["BeforeRestart", "BeforeAnyChange", "IfPossible", "Never"]
            },
            "rollback": {
                "description": "OnUnhealthy (default; needs health): roll back and start the guest when it does not pass its checks after the change; Never: report it only.",
                "enum": ["OnUnhealthy", "Never"]
            },
            "keep": {"type": "integer", "minimum": 0, "maximum": super::health::MAX_KEEP, "description": "How many snapshots of proxsync's own a guest keeps after a change that passed (default 1); older ones are deleted."}
        }
    })
}

/// `spec.forProvider` of a container: its own fields, the hardware fields it shares with a VM
/// and the VM's placement and lifecycle fields, said of a container.
fn lxc_for_provider_schema() -> Value {
    let vm = for_provider_schema(|plain, example| size_schema(plain, example, 1));
    let hardware = hardware_schema();
    let mut props = serde_json::Map::new();
    for field in super::container::FIELDS {
        if let Some(v) = vm["properties"].get(*field) {
            props.insert(field.to_string(), v.clone());
        }
    }
    for field in super::container::SHARED_HARDWARE {
        if let Some(v) = hardware.get(*field) {
            props.insert(field.to_string(), v.clone());
        }
    }
    for own in [lxc_own_schema(), lxc_devices_schema()] {
        if let Value::Object(own) = own {
            props.extend(own);
        }
    }
    let container_said = [
        ("onBoot", "Start the container when its node boots."),
        (
            "protection",
            "PVE refuses to remove the container or its volumes.",
        ),
        (
            "vmId",
            "Create the container with this VMID (refused if another guest holds it).",
        ),
        (
            "rebootPolicy",
            "Whether proxsync restarts a running container to apply changes PVE keeps pending until its next start (rootfs, a changed mount point, nameserver, features, ...): Never (report RebootPending only), IfNeeded, or Window (inside maintenanceWindow).",
        ),
        (
            "ha",
            "The container as a resource of Proxmox VE's HA manager (ct:<vmid>). state follows powerState unless ignored. A node change under HA is the HA manager's relocation: a clean shutdown, the move, a start.",
        ),
        (
            "allowRecreateOnSiteChange",
            "When the spec names another site than its container's, create a container on the new site at once; the old one stays, listed in _orphans.yaml, until a person deletes it. Default false: nothing is created while the old container exists (SiteMoved).",
        ),
    ];
    for (field, description) in container_said {
        if let Some(v) = props.get_mut(field) {
            v["description"] = json!(description);
        }
    }
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["site", "node"],
        "properties": props
    })
}

/// The JSON Schema of a `ProxmoxLXC` document: a container. Its `spec` and `metadata` are a
/// VM's but for `forProvider` and the consent to adopt (pinned by a NIC's MAC: a container
/// has no smbios1 uuid).
pub fn lxc_schema() -> Value {
    let vm = json_schema();
    let mut metadata = vm["properties"]["metadata"].clone();
    let annotations = &mut metadata["properties"]["annotations"]["properties"];
    annotations[super::ADOPT_UUID] = json!(false);
    annotations[super::ADOPT]["description"] =
        json!("Take over the existing container with this VMID (written by proxsync import).");
    annotations[super::ADOPT_HWADDR] = json!({
        "description": "The MAC (hwaddr) of the container's first NIC when the spec was written: a reused VMID is never taken.",
        "type": "string",
        "pattern": "^[0-9A-Fa-f][02468aceACE](:[0-9A-Fa-f]{2}){5}$"
    });
    let mut spec = vm["properties"]["spec"].clone();
    let policies = &mut spec["properties"];
    policies["forProvider"] = lxc_for_provider_schema();
    // A container is not made from a ProxmoxImage yet: nothing to recreate from.
    if let Some(p) = policies.as_object_mut() {
        p.remove("imagePolicy");
    }
    for (field, description) in [
        (
            "deletionPolicy",
            "Delete (default): delete the container when the spec is removed. Orphan: leave it.",
        ),
        (
            "managementPolicy",
            "Full: proxsync acts on the container. Observe: it never creates, changes, powers or deletes it, only reports how it differs. Default: the config's [reconcile] management_policy (full).",
        ),
        (
            "suspend",
            "true: no action of any kind for the container (create, change, power, migration, delete) until it is false again; still observed and reported. A removed spec that was suspended keeps its container until `proxsync resume NAME`.",
        ),
        (
            "dependsOn",
            "Specs (metadata.name) that must be Ready before this container is created, started or restarted; removed after it. No cycles.",
        ),
    ] {
        policies[field]["description"] = json!(description);
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://proxsync.io/schemas/proxmoxlxc.json",
        "title": "ProxmoxLXC",
        "description": "An LXC container that proxsync keeps in a Proxmox VE cluster.",
        "type": "object",
        "additionalProperties": false,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"enum": API_VERSIONS},
            "kind": {"const": LXC_KIND},
            "metadata": metadata,
            "spec": spec
        },
        "$defs": vm["$defs"].clone()
    })
}

/// A ProxmoxVM's `spec` with nothing required (a default or a template may leave anything to
/// the spec or the member), for the other kinds' schemas.
fn partial_vm_spec() -> Value {
    let mut spec = json_schema()["properties"]["spec"].clone();
    fn unrequire(v: &mut Value) {
        if let Value::Object(map) = v {
            map.remove("required");
            if let Some(Value::Object(props)) = map.get_mut("properties") {
                props.values_mut().for_each(unrequire);
            }
        }
    }
    unrequire(&mut spec);
    spec
}

/// The JSON Schema of a `ProxmoxDefaults` document (`_defaults.yaml`).
pub fn defaults_schema() -> Value {
    let vm = json_schema();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://proxsync.io/schemas/proxmoxdefaults.json",
        "title": "ProxmoxDefaults",
        "description": "Values every spec in this directory and below takes unless it sets them (_defaults.yaml): mappings merged, the spec wins, lists replaced.",
        "type": "object",
        "additionalProperties": false,
        "required": ["apiVersion", "kind", "spec"],
        "properties": {
            "apiVersion": {"enum": API_VERSIONS},
            "kind": {"const": super::defaults::DEFAULTS_KIND},
            "metadata": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "labels": vm["properties"]["metadata"]["properties"]["labels"].clone(),
                    "annotations": vm["properties"]["metadata"]["properties"]["annotations"].clone()
                }
            },
            "spec": partial_vm_spec()
        },
        "$defs": vm["$defs"].clone()
    })
}

/// The JSON Schema of a `ProxmoxTemplate` document: a `ProxmoxVM`'s, without what a template
/// refuses (`templates::REFUSED`), made from `{image: NAME}` only.
pub fn template_schema() -> Value {
    let mut schema = json_schema();
    schema["$id"] = json!("https://proxsync.io/schemas/proxmoxtemplate.json");
    schema["title"] = json!(super::templates::TEMPLATE_KIND);
    schema["description"] = json!(
        "A VM template proxsync builds from a ProxmoxImage (imported, then made a template), \
         named NAME-VERSION: a change of its definition or a new image version builds a new one \
         beside the old, which is deleted once nothing needs it. Guests use it as \
         image: {template: NAME}."
    );
    schema["properties"]["kind"] = json!({"const": super::templates::TEMPLATE_KIND});
    schema["properties"]["metadata"]["properties"]["name"]["pattern"] =
        json!("^[a-z0-9]([a-z0-9-]{0,52}[a-z0-9])?$");
    // Never adopted nor renamed: its annotations are refused.
    if let Some(meta) = schema["properties"]["metadata"]["properties"].as_object_mut() {
        meta.remove("annotations");
    }
    let spec = &mut schema["properties"]["spec"]["properties"];
    if let Some(spec) = spec.as_object_mut() {
        for (field, _) in super::templates::REFUSED_POLICIES {
            spec.remove(*field);
        }
    }
    // `node` or `nodes`.
    schema["properties"]["spec"]["properties"]["forProvider"]["required"] = json!(["site"]);
    let fp = &mut schema["properties"]["spec"]["properties"]["forProvider"]["properties"];
    if let Some(fp) = fp.as_object_mut() {
        for (field, _) in super::templates::REFUSED {
            fp.remove(*field);
        }
        fp.insert(
            "nodes".into(),
            json!({
                "description": "Instead of node: every node the template is built on, one template (and version) each, for guests on local storage; a guest is cloned from its node's, else from the first (which needs shared storage).",
                "type": "array", "minItems": 1, "maxItems": 64, "uniqueItems": true,
                "items": {"type": "string"}
            }),
        );
        fp.insert(
            "image".into(),
            json!({
                "description": "{image: NAME}: the repository's ProxmoxImage NAME (content import), imported as the template's disk.",
                "type": "object", "additionalProperties": false, "required": ["image"],
                "properties": {"image": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"}}
            }),
        );
    }
    schema
}

/// The JSON Schema of a `ProxmoxImage` document.
pub fn image_schema() -> Value {
    let vm = json_schema();
    let name = vm["properties"]["metadata"]["properties"]["name"].clone();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://proxsync.io/schemas/proxmoximage.json",
        "title": "ProxmoxImage",
        "description": "A cloud image, ISO or container template that PVE downloads by URL and verifies by its checksum; guests use it as image: {image: NAME}. Its volume's file name carries the checksum's first 12 hex digits, so a new version is a new volume.",
        "type": "object",
        "additionalProperties": false,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": API_VERSIONS[0]},
            "kind": {"const": super::images::IMAGE_KIND},
            "metadata": {
                "type": "object",
                "additionalProperties": false,
                "required": ["name"],
                "properties": {"name": name}
            },
            "spec": {
                "type": "object",
                "additionalProperties": false,
                "required": ["forProvider"],
                "properties": {
                    "forProvider": {
                        "type": "object",
                        "additionalProperties": false,
                        "required": ["site", "url", "checksum"],
                        "properties": {
                            "site": vm["properties"]["spec"]["properties"]["forProvider"]["properties"]["site"].clone(),
                            "url": {"description": "Where PVE downloads it from: http:// or https://, no credentials.", "type": "string", "maxLength": 2048, "pattern": "^https?://[^\\s@/]+(/\\S*)?$"},
                            "checksum": {"description": "sha256:<64 hex digits> or sha512:<128 hex digits>, as the publisher's SHA256SUMS says.", "type": "string", "pattern": "^(sha256:[0-9a-fA-F]{64}|sha512:[0-9a-fA-F]{128})$"},
                            "content": {"description": "import (a disk image a VM imports; the default), iso (an installer) or vztmpl (a container template).", "enum": ["import", "iso", "vztmpl"]},
                            "format": {"description": "The disk format of an import image: qcow2, raw or vmdk; default the URL's extension (a cloud .img is usually qcow2).", "enum": ["qcow2", "raw", "vmdk"]},
                            "storage": {"description": "A file-based storage with the content; default local.", "type": "string"},
                            "nodes": {"description": "Nodes it is needed on besides those of the guests made from it (a storage that is not shared).", "type": "array", "maxItems": 64, "items": {"type": "string"}}
                        }
                    }
                }
            }
        }
    })
}

/// The JSON Schema of a `ProxmoxVMSet` document.
pub fn set_schema() -> Value {
    let vm = json_schema();
    let name = vm["properties"]["metadata"]["properties"]["name"].clone();
    let member = partial_vm_spec();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://proxsync.io/schemas/proxmoxvmset.json",
        "title": "ProxmoxVMSet",
        "description": "N alike VMs from one template; each member is a spec of its own.",
        "type": "object",
        "additionalProperties": false,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"enum": API_VERSIONS},
            "kind": {"const": super::sets::SET_KIND},
            "metadata": {
                "type": "object",
                "additionalProperties": false,
                "required": ["name"],
                "properties": {
                    "name": name,
                    "labels": vm["properties"]["metadata"]["properties"]["labels"].clone()
                }
            },
            "spec": {
                "type": "object",
                "additionalProperties": false,
                "required": ["template"],
                "properties": {
                    "replicas": {"description": "How many members (with namePattern); or give names.", "type": "integer", "minimum": 0, "maximum": super::sets::MAX_REPLICAS},
                    "names": {"description": "The members' names, instead of replicas.", "type": "array", "maxItems": super::sets::MAX_REPLICAS, "uniqueItems": true, "items": name},
                    "namePattern": {"description": "Members' names, {index} (from 1), {index:02} zero-padded. Default <set name>-{index:02}.", "type": "string", "pattern": "\\{index"},
                    "placement": {
                        "type": "object",
                        "additionalProperties": false,
                        "required": ["nodes"],
                        "properties": {
                            "nodes": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                            "strategy": {"description": "RoundRobin (by index, default) or FreeMemory (the node with the most free memory of its own, maxmem - mem, when a member is made).", "enum": ["RoundRobin", "FreeMemory"]},
                            "maxPerNode": {"type": "integer", "minimum": 1}
                        }
                    },
                    "maxUnavailable": {"description": "Members rebooted at a time for a change (default 1).", "type": "integer", "minimum": 1},
                    "suspend": vm["properties"]["spec"]["properties"]["suspend"].clone(),
                    "dependsOn": vm["properties"]["spec"]["properties"]["dependsOn"].clone(),
                    "template": member.clone(),
                    "overrides": {"description": "Per member name: spec fields merged over the template.", "type": "object", "additionalProperties": member}
                }
            }
        },
        "$defs": vm["$defs"].clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_is_an_object_with_the_fields() {
        let s = json_schema();
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
        let fp = &s["properties"]["spec"]["properties"]["forProvider"];
        assert_eq!(fp["additionalProperties"], false);
        assert_eq!(fp["required"], json!(["site", "node"]));
        assert!(fp["properties"]["userData"].is_object());
        assert_eq!(fp["properties"]["cloudInit"]["additionalProperties"], false);
        for field in super::super::ha::FIELDS {
            assert!(
                fp["properties"]["ha"]["properties"].get(field).is_some(),
                "ha.{field}"
            );
        }
    }

    /// Every field the validator reads in a VM's `forProvider` is in the schema, which refuses
    /// any other (`additionalProperties: false`).
    #[test]
    fn the_vm_schema_has_every_for_provider_field() {
        let s = json_schema();
        let props = &s["properties"]["spec"]["properties"]["forProvider"]["properties"];
        let fields = super::super::validate::FOR_PROVIDER_FIELDS
            .iter()
            .chain(super::super::hardware::FIELDS);
        for field in fields {
            assert!(props.get(field).is_some(), "{field}");
        }
    }

    /// The container's schema names exactly the fields its validator reads (it refuses any
    /// other), with the enumerations and ranges of `container.rs`.
    #[test]
    fn the_lxc_schema_has_every_container_field_and_no_other() {
        use super::super::container::{FIELDS, MOUNT_FIELDS, NIC_FIELDS, SHARED_HARDWARE};
        let keys = |v: &Value| -> Vec<String> {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let sorted = |fields: &mut dyn Iterator<Item = &&str>| -> Vec<String> {
            let mut k: Vec<String> = fields.map(|f| f.to_string()).collect();
            k.sort();
            k
        };
        let s = lxc_schema();
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(s["properties"]["kind"]["const"], "ProxmoxLXC");
        let fp = &s["properties"]["spec"]["properties"]["forProvider"];
        assert_eq!(fp["additionalProperties"], false);
        // `template` is required unless the spec adopts (said in its description).
        assert_eq!(fp["required"], json!(["site", "node"]));
        let annotations = &s["properties"]["metadata"]["properties"]["annotations"]["properties"];
        assert_eq!(annotations[crate::spec::ADOPT_UUID], json!(false));
        assert!(annotations[crate::spec::ADOPT_HWADDR]["pattern"].is_string());
        let props = &fp["properties"];
        assert_eq!(
            keys(props),
            sorted(&mut FIELDS.iter().chain(SHARED_HARDWARE))
        );
        // Each of the container's own fields says what it is.
        let own = [lxc_own_schema(), lxc_devices_schema()];
        for field in own.iter().flat_map(|o| o.as_object().unwrap().keys()) {
            assert!(props[field]["description"].is_string(), "{field}");
        }
        assert_eq!(
            keys(&props["networks"]["items"]["properties"]),
            sorted(&mut NIC_FIELDS.iter())
        );
        assert_eq!(props["networks"]["maxItems"], 32);
        // `bind` is read only to refuse it (root@pam's own).
        assert_eq!(
            keys(&props["mountPoints"]["items"]["properties"]),
            sorted(&mut MOUNT_FIELDS.iter().filter(|f| **f != "bind"))
        );
        assert_eq!(
            keys(&props["rootfs"]["properties"]),
            ["size".to_string(), "storage".to_string()]
        );
        assert_eq!(
            keys(&props["features"]["properties"]),
            ["nesting".to_string()]
        );
        assert_eq!(
            props["arch"]["enum"],
            json!(super::super::container::ARCHES)
        );
        assert_eq!(
            props["osType"]["enum"],
            json!(super::super::container::OS_TYPES)
        );
        assert_eq!(props["memory"]["oneOf"][0]["minimum"], 1);
        assert_eq!(props["swap"]["oneOf"][0]["minimum"], 0);
        assert_eq!(props["cores"]["oneOf"][0]["maximum"], 8192);
        assert_eq!(props["tty"]["oneOf"][0]["maximum"], 6);
        let password = props["password"]["oneOf"].as_array().unwrap();
        assert_eq!(password[0]["required"], json!(["file"]));
        assert_eq!(password[1]["required"], json!(["credential"]));
        assert!(
            props["onBoot"]["description"]
                .as_str()
                .unwrap()
                .contains("container")
        );
        // A container's consent is pinned by its NIC's MAC.
        assert!(
            annotations["proxsync.io/adopt"]["description"]
                .as_str()
                .unwrap()
                .contains("container")
        );
        assert!(annotations["proxsync.io/renamed-from"].is_object());
        // The VM's schema is not changed by it.
        let vm = json_schema();
        let vm_fp = &vm["properties"]["spec"]["properties"]["forProvider"]["properties"];
        assert!(
            vm_fp["onBoot"]["description"]
                .as_str()
                .unwrap()
                .contains("VM")
        );
        assert!(vm_fp.get("template").is_none());
    }

    /// The other kinds' schemas take the VM's fields, none required, and name their own.
    #[test]
    fn the_set_and_defaults_schemas_take_the_vm_spec_with_nothing_required() {
        let set = set_schema();
        assert_eq!(set["properties"]["kind"]["const"], "ProxmoxVMSet");
        let template = &set["properties"]["spec"]["properties"]["template"];
        assert!(template.get("required").is_none());
        let fp = &template["properties"]["forProvider"];
        assert!(fp.get("required").is_none() && fp["properties"]["cpu"].is_object());
        assert!(
            set["properties"]["spec"]["properties"]["placement"]["properties"]["strategy"]
                .is_object()
        );
        let d = defaults_schema();
        assert_eq!(d["properties"]["kind"]["const"], "ProxmoxDefaults");
        assert!(
            d["properties"]["spec"]["properties"]["forProvider"]
                .get("required")
                .is_none()
        );
        assert!(
            d["properties"]["metadata"]["properties"]
                .get("name")
                .is_none()
        );
        // The VM's own schema is unchanged by them.
        assert_eq!(
            json_schema()["properties"]["spec"]["properties"]["forProvider"]["required"],
            json!(["site", "node"])
        );
    }
}
