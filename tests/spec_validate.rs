//! Integration tests of the spec library API over fixture directories.

use std::path::{Path, PathBuf};

use proxsync::spec::{self, DeletionPolicy, Image, PowerState, Severity, VolumeKind};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Every hostile case: (file, line, column, message fragment).
const HOSTILE: &[(&str, u32, u32, &str)] = &[
    (
        "disks.yaml",
        11,
        15,
        "disks[0].slot: \"scsi0,cache=unsafe\" is not a disk slot; valid slots are scsi0-30, virtio0-15 and sata0-5",
    ),
    (
        "disks.yaml",
        12,
        15,
        "disks[0].size is 1536Mi, not a whole number of GiB",
    ),
    (
        "disks.yaml",
        13,
        18,
        "storage \"local-lvm,format=qcow2\" contains a comma",
    ),
    (
        "disks.yaml",
        14,
        17,
        "disks[0].format \"qcow\" is not valid (did you mean \"qcow2\"?); valid values are: raw, qcow2, vmdk",
    ),
    (
        "disks.yaml",
        15,
        16,
        "disks[0].cache \"unsafe-ish\" is not valid; valid values are: none, writethrough, writeback, unsafe, directsync",
    ),
    (
        "disks.yaml",
        16,
        18,
        "disks[0].discard must be true or false",
    ),
    ("disks.yaml", 17, 16, "\"ide2\" is on the ide bus"),
    ("disks.yaml", 18, 16, "\"virtio16\" is not a disk slot"),
    (
        "disks.yaml",
        19,
        9,
        "disks[3].ssd: a virtio disk has no ssd option",
    ),
    (
        "disks.yaml",
        20,
        9,
        "disks[4].iothread: a sata disk has no iothread option",
    ),
    (
        "disks.yaml",
        21,
        9,
        "missing required field spec.forProvider.disks[5].size",
    ),
    (
        "disks.yaml",
        22,
        16,
        "disks[6].size is 200Ti, outside the allowed range",
    ),
    (
        "disks.yaml",
        22,
        31,
        "disks[6].backup must be true or false",
    ),
    ("disks.yaml", 23, 16, "\"scsi2\\nscsi3\" is not a disk slot"),
    (
        "disks.yaml",
        35,
        12,
        "spec.forProvider.disks and spec.forProvider.disk are two forms of the same thing",
    ),
    ("disks.yaml", 46, 60, "slot scsi1 is given to two disks"),
    ("disks.yaml", 57, 12, "more than one disk says boot: true"),
    (
        "alias-bomb.yaml",
        9,
        33,
        "YAML aliases expand to too much data",
    ),
    (
        "bridge-rules.yaml",
        10,
        14,
        "network \"vmbr0\\ttag=5\" contains a tab at character 6",
    ),
    (
        "bridge-rules.yaml",
        21,
        14,
        "Linux interface names have at most 15",
    ),
    (
        "bridge-rules.yaml",
        22,
        14,
        "storage \"1local\" is not a valid Proxmox storage ID",
    ),
    ("deep-block.yaml", 36, 65, "YAML nested too deeply"),
    ("deep-flow.yaml", 5, 266, "YAML nested too deeply"),
    (
        "duplicate-keys.yaml",
        11,
        5,
        "duplicate key \"cpu\" in spec.forProvider (first at line 10, column 5)",
    ),
    (
        "duplicate-keys.yaml",
        12,
        3,
        "duplicate key \"forProvider\" in spec",
    ),
    (
        "duplicate-name-b.yaml",
        4,
        9,
        "duplicate metadata.name \"twin\": first defined at ",
    ),
    ("empty-documents.yaml", 7, 1, "empty YAML document"),
    ("empty-documents.yaml", 8, 1, "empty YAML document"),
    ("empty-documents.yaml", 10, 1, "empty YAML document"),
    (
        "enums.yaml",
        6,
        19,
        "spec.deletionPolicy \"Keep\" is not valid; valid values are: Delete, Orphan",
    ),
    (
        "enums.yaml",
        11,
        17,
        "spec.forProvider.powerState \"paused\" is not valid; valid values are: running, stopped",
    ),
    (
        "hardware.yaml",
        11,
        14,
        "cpuType \"host,flags=+aes\" contains a comma",
    ),
    (
        "hardware.yaml",
        12,
        14,
        "spec.forProvider.sockets must be a whole number from 1 to 64; found the integer 0",
    ),
    (
        "hardware.yaml",
        13,
        11,
        "spec.forProvider.numa must be true or false; found the string \"yes\" (YAML 1.2",
    ),
    (
        "hardware.yaml",
        14,
        14,
        "spec.forProvider.balloon is 4Gi, more than memory (2Gi)",
    ),
    (
        "hardware.yaml",
        15,
        11,
        "spec.forProvider.bios \"uefi\" is not valid; valid values are: seabios, ovmf",
    ),
    (
        "hardware.yaml",
        16,
        14,
        "machine \"q35,viommu=intel\" contains a comma",
    ),
    (
        "hardware.yaml",
        17,
        19,
        "scsiHardware \"virtio-scsi\" is not valid; valid values are: lsi, lsi53c810",
    ),
    (
        "hardware.yaml",
        18,
        10,
        "spec.forProvider.tpm \"v2.0,size=1\" is not valid; valid values are: v1.2, v2.0",
    ),
    (
        "hardware.yaml",
        20,
        10,
        "vga \"qxl\" contradicts serialConsole: true",
    ),
    ("hardware.yaml", 21, 13, "osType \"linux\" is not valid"),
    (
        "hardware.yaml",
        22,
        22,
        "startup.order must be a whole number from 0 to 1000000",
    ),
    (
        "hardware.yaml",
        23,
        11,
        "pool \"prod;rm\" contains a semicolon",
    ),
    (
        "hardware.yaml",
        24,
        11,
        "vmId must be a whole number from 100 to 999999999",
    ),
    (
        "hardware.yaml",
        25,
        18,
        "description contains \"proxsync-id:\"",
    ),
    ("hardware.yaml", 36, 22, "preEnrolledKeys needs bios: ovmf"),
    (
        "hardware.yaml",
        37,
        14,
        "cpuType \"X86-64-V2-AES\" is not a CPU model Proxmox VE knows (did you mean \"x86-64-v2-AES\"?)",
    ),
    (
        "networks.yaml",
        11,
        17,
        "network \"vmbr0,firewall=1\" contains a comma",
    ),
    (
        "networks.yaml",
        12,
        16,
        "spec.forProvider.networks[0].model \"virtio-net\" is not valid; valid values are: e1000",
    ),
    (
        "networks.yaml",
        13,
        15,
        "spec.forProvider.networks[0].vlan must be a whole number from 1 to 4094",
    ),
    (
        "networks.yaml",
        14,
        17,
        "networks[0].trunks: \"20-5\" is not a VLAN id",
    ),
    (
        "networks.yaml",
        15,
        14,
        "spec.forProvider.networks[0].mtu must be a whole number from 1 to 65520",
    ),
    (
        "networks.yaml",
        16,
        15,
        "networks[0].rate must be a non-negative number",
    ),
    (
        "networks.yaml",
        17,
        19,
        "spec.forProvider.networks[0].firewall must be true or false; found the integer 1",
    ),
    (
        "networks.yaml",
        18,
        17,
        "networks[0].queues must be a whole number from 0 to 64",
    ),
    ("networks.yaml", 19, 14, "is a multicast address"),
    (
        "networks.yaml",
        20,
        9,
        "missing required field spec.forProvider.networks[1].bridge",
    ),
    (
        "networks.yaml",
        32,
        15,
        "spec.forProvider.networks and spec.forProvider.network are two forms of the same thing",
    ),
    (
        "images.yaml",
        10,
        12,
        "Proxmox cannot import a disk from `iso` content",
    ),
    (
        "images.yaml",
        10,
        12,
        "local:import/ubuntu-22.04-cloud.qcow2",
    ),
    ("images.yaml", 20, 12, "rename it to .qcow2"),
    (
        "images.yaml",
        30,
        12,
        "image 99 is not a valid template VMID: Proxmox VMIDs are 100..999999999",
    ),
    (
        "images.yaml",
        40,
        12,
        "is in `vztmpl` content, which holds no VM disk",
    ),
    ("images.yaml", 50, 12, "'.'/'..' components"),
    (
        "injection.yaml",
        8,
        11,
        "node \"pve1\\nnode2\" contains a newline at character 5",
    ),
    (
        "injection.yaml",
        9,
        12,
        "contains a comma ',' at character 21",
    ),
    (
        "injection.yaml",
        10,
        14,
        "storage \"local-lvm;rm\" contains a semicolon ';' at character 10",
    ),
    (
        "injection.yaml",
        11,
        14,
        "network \"vmbr0,firewall=0\" contains a comma ',' at character 6",
    ),
    (
        "missing-required.yaml",
        4,
        3,
        "missing required field metadata.name",
    ),
    (
        "missing-required.yaml",
        7,
        5,
        "missing required field spec.forProvider.site",
    ),
    (
        "missing-required.yaml",
        7,
        5,
        "missing required field spec.forProvider.node",
    ),
    (
        "missing-required.yaml",
        7,
        5,
        "missing required field spec.forProvider.image",
    ),
    (
        "names.yaml",
        4,
        9,
        "metadata.name \"../../etc/passwd\" is not valid",
    ),
    (
        "names.yaml",
        11,
        9,
        "metadata.name \"_summary\" is not valid",
    ),
    (
        "names.yaml",
        20,
        16,
        "tenant id \"Customer-123\" has upper-case letters",
    ),
    (
        "names.yaml",
        23,
        11,
        "site \"US-SFValley\" is not a valid site name",
    ),
    (
        "names.yaml",
        24,
        11,
        "node \"pve_1\" is not a valid Proxmox node name",
    ),
    (
        "names.yaml",
        25,
        11,
        "VM name \"web server 01\" is not valid (Proxmox rejects spaces",
    ),
    (
        "names.yaml",
        27,
        12,
        "tag \"Web\" has upper-case letters; Proxmox stores tags in lower case, write \"web\"",
    ),
    ("names.yaml", 27, 17, "tag \"a,b\" contains ','"),
    ("names.yaml", 27, 24, "tag \"proxsync.main\" is reserved"),
    (
        "not-a-mapping.yaml",
        1,
        1,
        "a spec document must be a mapping",
    ),
    (
        "not-a-mapping.yaml",
        4,
        1,
        "found the string \"just a string\"",
    ),
    (
        "not-a-mapping.yaml",
        6,
        13,
        "apiVersion \"v1\" is not supported; use proxsync.io/v1 or proxmox.sankofa.nexus/v1alpha1",
    ),
    (
        "not-a-mapping.yaml",
        7,
        7,
        "kind \"ConfigMap\" is not supported",
    ),
    ("not-a-mapping.yaml", 6, 1, "missing required field spec:"),
    (
        "not-utf8.yaml",
        4,
        12,
        "invalid UTF-8 (byte 0xE9 at offset 64)",
    ),
    (
        "only-comments.yaml",
        1,
        1,
        "the file holds no YAML document",
    ),
    ("outside-link.yaml", 1, 1, "outside"),
    (
        "sizes.yaml",
        10,
        10,
        "cpu must be a whole number of CPU cores from 1 to 1024; found the integer 2048",
    ),
    (
        "sizes.yaml",
        11,
        13,
        "\"99999999999999999999Ti\" is too large",
    ),
    (
        "sizes.yaml",
        12,
        11,
        "disk is 200Ti, outside the allowed range 1Gi .. 100Ti",
    ),
    ("sizes.yaml", 23, 10, "found the integer 0"),
    (
        "sizes.yaml",
        24,
        13,
        "memory is 64Mi, outside the allowed range 128Mi .. 2Ti",
    ),
    ("sizes.yaml", 25, 11, "only whole numbers are accepted"),
    ("sizes.yaml", 36, 10, "cpu must be a whole number"),
    (
        "sizes.yaml",
        37,
        13,
        "unknown unit \"GB\" (write 8G without the B)",
    ),
    ("sizes.yaml", 38, 11, "-10 is negative"),
    ("sub/nested.yaml", 10, 13, "only whole numbers are accepted"),
    (
        "syntax-error.yaml",
        6,
        55,
        "image 99 is not a valid template VMID",
    ),
    ("syntax-error.yaml", 12, 5, "invalid YAML: "),
    (
        "unknown-fields.yaml",
        3,
        1,
        "unknown field \"status\" in the document; valid fields are: apiVersion, kind, metadata, spec",
    ),
    (
        "unknown-fields.yaml",
        6,
        3,
        "unknown field \"namespace\" in metadata",
    ),
    (
        "unknown-fields.yaml",
        12,
        5,
        "unknown field \"userdata\" in spec.forProvider (did you mean \"userData\"?)",
    ),
    (
        "unknown-fields.yaml",
        13,
        5,
        "unknown field \"cores\" in spec.forProvider",
    ),
    (
        "unknown-fields.yaml",
        14,
        3,
        "unknown field \"writeConnectionSecretToRef\" in spec",
    ),
    (
        "wrong-types.yaml",
        6,
        16,
        "metadata.labels.tenant-id must be a string; found the integer 123",
    ),
    (
        "wrong-types.yaml",
        12,
        10,
        "cpu must be a whole number of CPU cores from 1 to 1024; found the string \"four\"",
    ),
    (
        "wrong-types.yaml",
        13,
        13,
        "memory: expected a size such as 8Gi or a number of MiB; found a list",
    ),
    ("wrong-types.yaml", 14, 11, "found the boolean true"),
    (
        "wrong-types.yaml",
        15,
        11,
        "tags must be a list of tags, e.g. [web, db]; found the string \"web\"",
    ),
    ("wrong-types.yaml", 16, 15, "userData must be a string"),
    ("wrong-types.yaml", 17, 14, "storage must be a string"),
    ("zero-bytes.yaml", 1, 1, "the file holds no YAML document"),
];

#[test]
fn hostile_fixtures_report_every_error_with_a_position() {
    let dir = fixture("hostile");
    let set = spec::load_paths(std::slice::from_ref(&dir));

    let shown: Vec<String> = set.diagnostics.iter().map(ToString::to_string).collect();
    for (file, line, column, fragment) in HOSTILE {
        let want_file = dir.join(file).display().to_string();
        let found = set.diagnostics.iter().any(|d| {
            d.file == want_file
                && d.pos.line == *line
                && d.pos.column == *column
                && d.severity == Severity::Error
                && d.message.contains(fragment)
        });
        assert!(
            found,
            "missing {file}:{line}:{column}: {fragment:?}\nall diagnostics:\n{}",
            shown.join("\n")
        );
    }
    // Nothing unexpected: each diagnostic is one of the expected ones.
    for d in &set.diagnostics {
        let expected = HOSTILE.iter().any(|(file, line, column, _)| {
            d.file == dir.join(file).display().to_string()
                && d.pos.line == *line
                && d.pos.column == *column
        });
        assert!(expected, "unexpected diagnostic: {d}");
        assert!(d.pos.line >= 1 && d.pos.column >= 1, "{d}");
    }
    // Hidden files and non-YAML files are not read; the symlinked subdirectory is read once.
    assert!(
        !shown
            .iter()
            .any(|d| d.contains(".hidden") || d.contains("notes.txt") || d.contains("sub-link")),
        "{shown:#?}"
    );

    // Only the one clean document of the directory survives; the twins are both held back.
    let names: Vec<&str> = set.specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["empty-docs-ok"]);
    let invalid = set.invalid_names();
    for name in [
        "twin",
        "wrong-types",
        "injection",
        "enums",
        "sizes",
        "nested",
        "before-syntax-error",
        "hardware",
        "keys-without-ovmf",
        "networks",
        "both-forms",
        "disks",
        "disks-both-forms",
        "disks-same-slot",
        "disks-two-boots",
    ] {
        assert!(invalid.contains(name), "{name} not in {invalid:?}");
    }
    assert!(
        !set.is_complete(),
        "syntax errors and unnamed documents make the set incomplete"
    );
}

#[test]
fn valid_fixtures() {
    let set = spec::load_paths(&[fixture("valid")]);
    let shown: Vec<String> = set.diagnostics.iter().map(ToString::to_string).collect();
    assert!(!set.has_errors(), "{shown:#?}");
    assert!(set.is_complete());
    let warnings: Vec<_> = set.warnings().collect();
    assert_eq!(warnings.len(), 1, "{shown:#?}");
    assert!(
        warnings[0].file.ends_with("legacy.yml") && warnings[0].pos.line == 19,
        "{}",
        warnings[0]
    );
    assert!(warnings[0].message.contains("providerConfigRef is ignored"));

    let names: Vec<&str> = set.specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["web-server-01", "db-01", "installer-01", "web-01"]);
    let by = |n: &str| set.specs.iter().find(|s| s.name == n).unwrap();

    let legacy = by("web-server-01");
    assert_eq!(legacy.api_version, "proxmox.sankofa.nexus/v1alpha1");
    assert_eq!(*legacy.image(), Image::Name("debian-12-template".into()));
    assert_eq!(legacy.tags, ["tenant_customer-456"]);
    assert_eq!(legacy.bridge(), "vmbr1");

    let db = by("db-01");
    assert_eq!(db.memory_mib(), 4096);
    assert_eq!(db.root_disk_bytes(), 50 * spec::GIB);
    assert_eq!(db.cores(), spec::DEFAULT_CPU);
    assert!(matches!(
        db.image(),
        Image::Volume {
            kind: VolumeKind::Import,
            ..
        }
    ));

    let installer = by("installer-01");
    assert!(matches!(
        installer.image(),
        Image::Volume {
            kind: VolumeKind::Iso,
            ..
        }
    ));
    assert_eq!(installer.power_state, PowerState::Stopped);
    assert_eq!(installer.deletion_policy, DeletionPolicy::Orphan);

    let web = by("web-01");
    assert_eq!(*web.image(), Image::Template { vmid: 9000 });
    assert_eq!(web.tags, ["frontend", "tenant_customer-123", "web"]);
    assert_eq!(web.tenant.as_deref(), Some("customer-123"));
    assert_eq!(
        web.vm().unwrap().user_data.as_deref(),
        Some("#cloud-config\npackages: [nginx]\n")
    );
    assert_eq!((web.pos.line, web.pos.column), (4, 9));
    assert_eq!((web.site_pos.line, web.site_pos.column), (9, 11));
}

#[test]
fn check_sites_lists_the_valid_sites() {
    let set = spec::load_paths(&[fixture("valid")]);
    assert!(spec::check_sites(&set.specs, &["us-sfvalley", "eu-fra"]).is_empty());
    let diags = spec::check_sites(&set.specs, &["us-sfvalley", "ap-south"]);
    assert_eq!(diags.len(), 2, "{diags:?}");
    for d in &diags {
        assert!(d.file.ends_with("multi.yaml"), "{d}");
        assert!(
            d.message.contains("\"eu-fra\"")
                && d.message.contains("valid sites are: us-sfvalley, ap-south"),
            "{d}"
        );
    }
    assert_eq!((diags[0].pos.line, diags[0].pos.column), (8, 11));
    assert_eq!(diags[0].spec.as_deref(), Some("db-01"));
}

#[test]
fn duplicates_across_files_and_documents() {
    let dir = tempfile::tempdir().unwrap();
    let doc = |name: &str| {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\nspec:\n  forProvider: {{site: eu-fra, node: fra1, image: 9001}}\n"
        )
    };
    std::fs::write(
        dir.path().join("a.yaml"),
        format!("{}---\n{}", doc("one"), doc("one")),
    )
    .unwrap();
    std::fs::write(dir.path().join("b.yml"), doc("one")).unwrap();
    let set = spec::load_paths(&[dir.path().to_path_buf()]);
    let errs: Vec<String> = set.errors().map(ToString::to_string).collect();
    assert_eq!(errs.len(), 2, "{errs:#?}");
    let a = dir.path().join("a.yaml").display().to_string();
    assert!(
        errs[0].contains(&format!(
            "a.yaml:11:9: error: duplicate metadata.name \"one\": first defined at {a}:4:9"
        )),
        "{errs:#?}"
    );
    assert!(
        errs[1].contains(&format!(
            "b.yml:4:9: error: duplicate metadata.name \"one\": first defined at {a}:4:9"
        )),
        "{errs:#?}"
    );
    assert!(set.specs.is_empty());
}

#[test]
fn oversized_file_is_refused_without_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, "#".repeat(spec::MAX_FILE_BYTES + 1)).unwrap();
    let set = spec::load_paths(&[dir.path().to_path_buf()]);
    let errs: Vec<String> = set.errors().map(ToString::to_string).collect();
    assert_eq!(errs.len(), 1);
    assert!(errs[0].ends_with(&format!("big.yaml:1:1: error: file is {} bytes, larger than the 1048576 byte (1 MiB) limit for a spec file; split it", spec::MAX_FILE_BYTES + 1)), "{errs:?}");
}

#[test]
fn a_miscased_extension_is_an_error_not_skipped() {
    // The git source counts a `.YAML` file as a spec it cannot read (nothing is deleted);
    // `validate` (and so the pre-receive hook) says so before the push.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("db.YAML"), "kind: ProxmoxVM\n").unwrap();
    std::fs::write(dir.path().join("web.Yml"), "kind: ProxmoxVM\n").unwrap();
    std::fs::write(dir.path().join("README.md"), "# specs\n").unwrap();
    let set = spec::load_paths(&[dir.path().to_path_buf()]);
    let errs: Vec<String> = set.errors().map(ToString::to_string).collect();
    assert_eq!(errs.len(), 2, "{errs:?}");
    for (err, name) in errs.iter().zip(["db.YAML", "web.Yml"]) {
        assert!(
            err.contains(&format!("{name}:1:1: error:")) && err.contains("lower case"),
            "{errs:?}"
        );
    }
    assert!(!set.is_complete());
}

#[test]
fn fifo_is_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.yaml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !matches!(made, Ok(s) if s.success()) {
        eprintln!("mkfifo unavailable; skipping");
        return;
    }
    let set = spec::load_paths(&[dir.path().to_path_buf()]);
    let errs: Vec<String> = set.errors().map(ToString::to_string).collect();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].contains("pipe.yaml:1:1: error:") && errs[0].contains("not a regular file"),
        "{errs:?}"
    );
}

#[test]
fn missing_path_is_an_error() {
    let set = spec::load_paths(&[PathBuf::from("/nonexistent/specs")]);
    assert!(set.has_errors());
    assert!(
        set.diagnostics[0]
            .to_string()
            .starts_with("/nonexistent/specs:1:1: error: cannot read")
    );
}

#[test]
fn examples_are_valid_and_cover_every_form() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("specs.example");
    let set = spec::load_paths(&[dir]);
    let shown: Vec<String> = set.diagnostics.iter().map(ToString::to_string).collect();
    assert!(!set.has_errors(), "{shown:#?}");
    assert!(spec::check_sites(&set.specs, &["us-sfvalley", "eu-fra"]).is_empty());
    assert!(
        set.warnings()
            .all(|w| w.message.contains("providerConfigRef")),
        "{shown:#?}"
    );
    assert!(set.warnings().count() >= 1);
    let has = |f: &dyn Fn(&spec::Spec) -> bool| set.specs.iter().any(f);
    assert!(has(&|s| matches!(
        s.image(),
        Image::Template { vmid: 9000 }
    )));
    assert!(has(&|s| matches!(
        s.image(),
        Image::Volume {
            kind: VolumeKind::Import,
            ..
        }
    )));
    assert!(has(&|s| matches!(
        s.image(),
        Image::Volume {
            kind: VolumeKind::Iso,
            ..
        }
    )));
    assert!(has(
        &|s| matches!(s.image(), Image::Name(n) if n == "ubuntu-2404-template")
    ));
    assert!(has(&|s| s.power_state == PowerState::Stopped));
    assert!(has(&|s| s.deletion_policy == DeletionPolicy::Orphan));
    assert!(has(&|s| s.api_version == "proxmox.sankofa.nexus/v1alpha1"));
    assert!(has(&|s| s.site == "eu-fra" && s.node == "fra1"));
    assert!(has(&|s| s.node == "pve2"));
    assert!(has(&|s| s.tenant.is_some()));
    assert!(has(&|s| s.hardware.bios == Some(spec::Bios::Ovmf)
        && s.hardware.tpm.is_some()
        && s.hardware.pool.is_some()
        && s.vm()
            .and_then(|vm| vm.networks.as_ref())
            .is_some_and(|n| n.len() == 2)));
    assert!(has(&|s| s
        .vm()
        .and_then(|vm| vm.disks.as_ref())
        .is_some_and(|d| d.len() == 2
            && d[0].boot
            && d[1].slot == "scsi1")));
    // A set and a defaults file are among the examples.
    assert!(has(&|s| s
        .set
        .as_ref()
        .is_some_and(|m| m.set == "worker" && m.replicas == 3)));
    assert!(has(&|s| s.defaults.is_some() && s.site == "eu-fra"));
    assert!(has(&|s| !s.depends_on.is_empty()));
    // A template built from an image, and a VM cloned from it.
    assert!(has(&|s| s.template.is_some()));
    assert!(has(
        &|s| matches!(s.image(), Image::Built { name, .. } if name == "debian-12")
    ));
    assert!((13..=16).contains(&set.specs.len()), "{}", set.specs.len());
}

/// The hardware fields of `forProvider`.
const HARDWARE_FIELDS: [&str; 19] = [
    "cpuType",
    "sockets",
    "numa",
    "balloon",
    "bios",
    "preEnrolledKeys",
    "machine",
    "scsiHardware",
    "tpm",
    "serialConsole",
    "vga",
    "agent",
    "osType",
    "onBoot",
    "startup",
    "protection",
    "pool",
    "vmId",
    "description",
];

#[test]
fn schema_names_every_field() {
    let schema = spec::json_schema();
    let fp = &schema["properties"]["spec"]["properties"]["forProvider"]["properties"];
    for field in [
        "site",
        "node",
        "name",
        "cpu",
        "memory",
        "disk",
        "storage",
        "network",
        "image",
        "userData",
        "powerState",
        "tags",
        "networks",
        "disks",
    ]
    .into_iter()
    .chain(HARDWARE_FIELDS)
    {
        assert!(fp.get(field).is_some(), "{field}");
    }
}

/// The example specs' hashes are the ones the release before the guest kind became a type
/// stored (its demo's status files at fbbe659, `observedGeneration`): a change here would
/// converge every guest once after an upgrade. The container's pins `ContainerSpec`'s JSON.
#[test]
fn the_example_specs_keep_the_hashes_earlier_releases_stored() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("specs.example");
    let set = spec::load_paths(&[dir]);
    let hash_of = |name: &str| {
        let s = set.specs.iter().find(|s| s.name == name).expect(name);
        spec::spec_hash(s)
    };
    for (name, stored) in [
        ("dns-fra-01", "4d929d9725aaa118"),
        ("app-fra-01", "e4aca379b8f31e6a"),
        ("db-01", "a94850ec8cfda0bc"),
        ("vault-fra-01", "f9302b51c83784d7"),
        ("web-01", "3c17b1e325e5b655"),
    ] {
        assert_eq!(hash_of(name), stored, "{name}");
    }
}
