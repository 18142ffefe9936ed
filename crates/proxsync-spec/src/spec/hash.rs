//! A spec's hashes (FNV-1a of the JSON of what it asks for): the spec hash, which the state
//! database and the status files keep as `appliedHash`, and the content hash, equal for a spec
//! and its rename.

use serde::Serialize;

use super::{Hashes, PowerState, Spec};
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
    (hash_named(spec, spec.guest_name()), hash_named(spec, ""))
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
        image: &'a super::Image,
        user_data: Option<&'a str>,
        // Absent without cloudInit, so the hashes of specs without it stay as they were.
        #[serde(skip_serializing_if = "Option::is_none")]
        cloud_init: Option<&'a super::CloudInit>,
        power: PowerState,
        tags: &'a [String],
        // Absent without `ha`, so the hashes of specs without it stay as they were.
        #[serde(skip_serializing_if = "Option::is_none")]
        ha: Option<&'a super::Ha>,
        // Absent without any hardware field, so the hashes of older specs stay as they were
        // (an unchanged spec is not "changed" by an upgrade).
        #[serde(skip_serializing_if = "super::Hardware::is_empty")]
        hardware: &'a super::Hardware,
        #[serde(skip_serializing_if = "Option::is_none")]
        networks: Option<&'a Vec<super::Nic>>,
        // Absent without `disks`, so the hashes of specs with `disk`/`storage` stay as they were.
        #[serde(skip_serializing_if = "Option::is_none")]
        disks: Option<&'a Vec<super::Disk>>,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        destroy_disks: &'a [String],
        // Absent for a VM, so the hashes of VM specs stay as they were.
        #[serde(skip_serializing_if = "Option::is_none")]
        container: Option<&'a super::ContainerSpec>,
        // A `ProxmoxTemplate`'s version: two versions are never one spec renamed (their content
        // hashes differ). Absent for a guest.
        #[serde(skip_serializing_if = "Option::is_none")]
        template: Option<&'a super::templates::TemplateVersion>,
        /// Bumped when what converge writes changes for every VM: 2 = signed markers, so a
        /// VM with a marker from before signing is converged (and its marker signed) once.
        identity: u32,
    }
    // A value decrypted from SOPS is hashed as its ciphertext: the hash, kept in the state
    // database and status files, then says nothing about the secret.
    let vm = spec.vm();
    let user_data = (spec.sealed.as_deref()).or(vm.and_then(|v| v.user_data.as_deref()));
    let h = Hashed {
        vm_name,
        node: &spec.node,
        cpu: spec.cores(),
        memory_mib: spec.memory_mib(),
        disk_bytes: spec.root_disk_bytes(),
        storage: spec.root_storage(),
        network: spec.bridge(),
        image: spec.image(),
        user_data,
        cloud_init: vm.and_then(|v| v.cloud_init.as_deref()),
        power: spec.power_state,
        tags: &spec.tags,
        ha: spec.ha.as_deref(),
        hardware: &spec.hardware,
        networks: vm.and_then(|v| v.networks.as_ref()),
        disks: vm.and_then(|v| v.disks.as_ref()),
        destroy_disks: vm.map_or(&[], |v| &v.destroy_disks),
        container: spec.container(),
        template: spec.template.as_deref(),
        identity: 2,
    };
    let mut out = FnvHasher::default();
    // Writing to FnvHasher cannot fail, and these types always serialise.
    let _ = serde_json::to_writer(&mut out, &h);
    std::hash::Hasher::finish(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fnv::fnv_hex;

    #[test]
    fn kept_hashes_are_the_hashes_earlier_releases_stored() {
        let mut spec = super::super::test_spec("    tags: [web]\n    cpu: 4\n");
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
}
