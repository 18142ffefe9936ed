//! cloud-init NoCloud seed images: the files (`user-data`, `meta-data`, `network-config`), a
//! small ISO 9660 writer (with Joliet names), and the seed volume's name.
//!
//! Proxmox VE cannot take arbitrary user-data through its API (`cicustom` needs a `snippets`
//! file, which cannot be uploaded), so proxsync builds the NoCloud seed itself, uploads it as an
//! ISO (`POST /nodes/{node}/storage/{storage}/upload`) and attaches it as a CD-ROM. See
//! docs/cloud-init.md.
//!
//! The image is deterministic: the same inputs give the same bytes, hence the same volume name
//! (`proxsync.<install>.<spec>.<hash12>.iso`), so an unchanged spec never uploads again and a
//! change produces a new volume.

use crate::spec::{CloudInit, Spec};

/// Sector size of ISO 9660.
const SECTOR: usize = 2048;
/// The volume label cloud-init's NoCloud datasource looks for.
pub(crate) const SEED_LABEL: &str = "cidata";
/// Prefix of every seed volume file proxsync uploads.
pub(crate) const SEED_PREFIX: &str = "proxsync.";

/// One file of the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsoFile {
    /// The file name (lower case, `[a-z0-9._-]`), as Joliet shows it.
    pub name: String,
    /// Its contents.
    pub data: Vec<u8>,
}

/// A NoCloud seed: its files and the ISO image holding them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    /// `meta-data`, `user-data` and, when the spec sets networking, `network-config`.
    pub files: Vec<IsoFile>,
    /// The ISO 9660 image (volume label `cidata`), as uploaded.
    pub image: Vec<u8>,
    /// `sha256` of the image, hex.
    pub sha256: String,
    /// The file name on the storage: `proxsync.<install>.<spec>.<hash12>.iso`.
    pub file_name: String,
}

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A YAML double-quoted scalar (JSON strings are valid YAML).
fn q(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// The part of user-data proxsync writes from the native fields (`user`, `sshKeys`,
/// `upgradePackages`), as PVE's own generator would; `None` when none is set.
fn native_user_data(ci: &CloudInit) -> Option<String> {
    if ci.user.is_none() && ci.ssh_keys.is_empty() && ci.upgrade_packages.is_none() {
        return None;
    }
    let mut out = String::from("#cloud-config\n");
    if let Some(user) = &ci.user {
        out.push_str(&format!("user: {}\n", q(user)));
    }
    if !ci.ssh_keys.is_empty() {
        out.push_str("ssh_authorized_keys:\n");
        for k in &ci.ssh_keys {
            out.push_str(&format!("  - {}\n", q(k)));
        }
    }
    if let Some(up) = ci.upgrade_packages {
        out.push_str(&format!("package_upgrade: {up}\n"));
    }
    Some(out)
}

/// The `user-data` file: the spec's `userData` as written, or, when native fields are set too,
/// a MIME multi-part with the native part first and the spec's part second (cloud-init merges
/// cloud-config parts in order, so keys the spec's `userData` sets win).
pub(crate) fn user_data(user_data: &str, ci: Option<&CloudInit>) -> String {
    let Some(native) = ci.and_then(native_user_data) else {
        return user_data.to_string();
    };
    let boundary = format!("proxsync-{}", &sha256_hex(user_data.as_bytes())[..16]);
    let second_type = if user_data.starts_with("#!") {
        "text/x-shellscript"
    } else {
        "text/cloud-config"
    };
    let mut out =
        format!("Content-Type: multipart/mixed; boundary=\"{boundary}\"\nMIME-Version: 1.0\n\n");
    for (kind, name, body) in [
        ("text/cloud-config", "proxsync.cfg", native.as_str()),
        (second_type, "user-data", user_data),
    ] {
        out.push_str(&format!(
            "--{boundary}\nContent-Type: {kind}; charset=\"utf-8\"\nMIME-Version: 1.0\n\
             Content-Transfer-Encoding: 8bit\nContent-Disposition: attachment; filename=\"{name}\"\n\n{body}"
        ));
        if !body.ends_with('\n') {
            out.push('\n');
        }
    }
    out.push_str(&format!("--{boundary}--\n"));
    out
}

/// The `network-config` file (version 1), when the spec sets networking. `macs[i]` is the MAC
/// address of `net<i>` (from the VM's config); NICs without a MAC are left out.
pub(crate) fn network_config(ci: &CloudInit, macs: &[Option<String>]) -> Option<String> {
    if ci.ip_config.is_empty() && ci.nameservers.is_empty() && ci.search_domain.is_none() {
        return None;
    }
    let mut out = String::from("version: 1\nconfig:\n");
    for (i, ip) in ci.ip_config.iter().enumerate() {
        let Some(Some(mac)) = macs.get(i) else {
            continue;
        };
        out.push_str(&format!(
            "  - type: physical\n    name: eth{i}\n    mac_address: {}\n    subnets:\n",
            q(&mac.to_ascii_lowercase())
        ));
        let mut any = false;
        match ip.ip.as_deref() {
            Some("dhcp") => {
                out.push_str("      - type: dhcp4\n");
                any = true;
            }
            Some(cidr) => {
                out.push_str(&format!(
                    "      - type: static\n        address: {}\n",
                    q(cidr)
                ));
                if let Some(gw) = &ip.gateway {
                    out.push_str(&format!("        gateway: {}\n", q(gw)));
                }
                any = true;
            }
            None => {}
        }
        match ip.ip6.as_deref() {
            Some("dhcp") => {
                out.push_str("      - type: dhcp6\n");
                any = true;
            }
            Some("auto") => {
                out.push_str("      - type: ipv6_slaac\n");
                any = true;
            }
            Some(cidr) => {
                out.push_str(&format!(
                    "      - type: static6\n        address: {}\n",
                    q(cidr)
                ));
                if let Some(gw) = &ip.gateway6 {
                    out.push_str(&format!("        gateway: {}\n", q(gw)));
                }
                any = true;
            }
            None => {}
        }
        if !any {
            // PVE's rule: neither address set means DHCP on IPv4.
            out.push_str("      - type: dhcp4\n");
        }
    }
    if !ci.nameservers.is_empty() || ci.search_domain.is_some() {
        out.push_str("  - type: nameserver\n");
        if !ci.nameservers.is_empty() {
            out.push_str("    address:\n");
            for n in &ci.nameservers {
                out.push_str(&format!("      - {}\n", q(n)));
            }
        }
        if let Some(d) = &ci.search_domain {
            out.push_str(&format!("    search:\n      - {}\n", q(d)));
        }
    }
    Some(out)
}

/// Builds the seed of a spec that has `userData`; `None` without. `uid` is the spec's unique
/// id (from its VM's marker); `macs` as for [`network_config`].
pub fn build_seed(
    install_id: &str,
    spec: &Spec,
    uid: &str,
    macs: &[Option<String>],
) -> Option<Seed> {
    let vm = spec.vm()?;
    let ud = vm.user_data.as_deref()?;
    let ci = vm.cloud_init.as_deref();
    let user_data = user_data(ud, ci);
    let network = ci.and_then(|c| network_config(c, macs));
    // The instance-id is stable for the same inputs and changes with them, as PVE's own
    // (cloud-init runs its once-per-instance modules again when it changes).
    // A value decrypted from SOPS enters the instance-id and the file name as its ciphertext,
    // so neither, both kept outside the VM (state database, logs), derives from the secret.
    let shown = match spec.sealed.as_deref() {
        Some(ciphertext) => self::user_data(ciphertext, ci),
        None => user_data.clone(),
    };
    let inputs = format!("{uid}\n{shown}\n{}", network.as_deref().unwrap_or_default());
    let iid = format!("iid-{uid}-{}", &sha256_hex(inputs.as_bytes())[..12]);
    let meta = format!(
        "instance-id: {}\nlocal-hostname: {}\n",
        q(&iid),
        q(spec.guest_name())
    );
    let mut files = vec![
        IsoFile {
            name: "meta-data".into(),
            data: meta.into_bytes(),
        },
        IsoFile {
            name: "user-data".into(),
            data: user_data.into_bytes(),
        },
    ];
    if let Some(n) = network {
        files.push(IsoFile {
            name: "network-config".into(),
            data: n.into_bytes(),
        });
    }
    let image = iso9660(SEED_LABEL, &files);
    let sha256 = sha256_hex(&image);
    let named_by = match &spec.sealed {
        Some(_) => sha256_hex(inputs.as_bytes()),
        None => sha256.clone(),
    };
    let file_name = seed_file_name(install_id, &spec.name, &named_by);
    Some(Seed {
        files,
        image,
        sha256,
        file_name,
    })
}

/// `proxsync.<install>.<spec>.<hash12>.iso`. Install ids and spec names hold no `.`, so the
/// name parses back unambiguously ([`parse_seed_file_name`]).
pub fn seed_file_name(install_id: &str, spec: &str, sha256: &str) -> String {
    format!(
        "{SEED_PREFIX}{install_id}.{spec}.{}.iso",
        &sha256[..12.min(sha256.len())]
    )
}

/// `(install, spec, hash12)` of a seed file name or volume ID (`local:iso/proxsync....iso`).
pub fn parse_seed_file_name(name: &str) -> Option<(&str, &str, &str)> {
    let file = name.rsplit('/').next()?;
    let rest = file.strip_prefix(SEED_PREFIX)?.strip_suffix(".iso")?;
    let mut parts = rest.split('.');
    let (install, spec, hash) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || install.is_empty()
        || spec.is_empty()
        || hash.len() != 12
        || !hash.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    Some((install, spec, hash))
}

/// True if `volume` (a volume ID or a drive value) is a seed of this install and spec.
pub fn is_seed_of(volume: &str, install_id: &str, spec: &str) -> bool {
    let volid = volume.split(',').next().unwrap_or_default();
    parse_seed_file_name(volid).is_some_and(|(i, s, _)| i == install_id && s == spec)
}

// ---- ISO 9660 --------------------------------------------------------------------------------

fn both16(v: u16) -> [u8; 4] {
    let (l, b) = (v.to_le_bytes(), v.to_be_bytes());
    [l[0], l[1], b[0], b[1]]
}

fn both32(v: u32) -> [u8; 8] {
    let (l, b) = (v.to_le_bytes(), v.to_be_bytes());
    [l[0], l[1], l[2], l[3], b[0], b[1], b[2], b[3]]
}

/// Fixed recording date (2024-01-01 00:00:00 UTC): the image depends on its inputs only.
const DIR_DATE: [u8; 7] = [124, 1, 1, 0, 0, 0, 0];
const VOL_DATE: &[u8; 16] = b"2024010100000000";

/// One directory record. `id` is the raw file identifier.
fn dir_record(id: &[u8], extent: u32, size: u32, is_dir: bool) -> Vec<u8> {
    let len = 33 + id.len() + usize::from(id.len().is_multiple_of(2));
    let mut r = vec![0u8; len];
    r[0] = len as u8;
    r[2..10].copy_from_slice(&both32(extent));
    r[10..18].copy_from_slice(&both32(size));
    r[18..25].copy_from_slice(&DIR_DATE);
    r[25] = if is_dir { 2 } else { 0 };
    r[28..32].copy_from_slice(&both16(1));
    r[32] = id.len() as u8;
    r[33..33 + id.len()].copy_from_slice(id);
    r
}

/// The ISO 9660 identifier of a file (`USER-DATA.;1`: upper case, as Linux maps back to lower
/// case; readers that use Joliet see the exact name).
fn primary_id(name: &str) -> Vec<u8> {
    let upper = name.to_ascii_uppercase();
    if upper.contains('.') {
        format!("{upper};1").into_bytes()
    } else {
        format!("{upper}.;1").into_bytes()
    }
}

/// A Joliet identifier: UCS-2 big-endian.
fn joliet_id(name: &str) -> Vec<u8> {
    name.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

/// Text padded with spaces, `a`/`d`-characters (primary) or UCS-2 (Joliet).
fn text_field(buf: &mut [u8], text: &str, joliet: bool) {
    if joliet {
        let mut units: Vec<u8> = joliet_id(text);
        while units.len() + 1 < buf.len() {
            units.extend_from_slice(&[0, b' ']);
        }
        units.resize(buf.len(), 0);
        buf.copy_from_slice(&units);
    } else {
        buf.fill(b' ');
        let n = text.len().min(buf.len());
        buf[..n].copy_from_slice(&text.as_bytes()[..n]);
    }
}

/// A primary (1) or Joliet supplementary (2) volume descriptor.
#[allow(clippy::too_many_arguments)]
fn volume_descriptor(
    joliet: bool,
    label: &str,
    total_sectors: u32,
    path_table_l: u32,
    path_table_m: u32,
    root_extent: u32,
) -> Vec<u8> {
    let mut d = vec![0u8; SECTOR];
    d[0] = if joliet { 2 } else { 1 };
    d[1..6].copy_from_slice(b"CD001");
    d[6] = 1;
    text_field(&mut d[8..40], "LINUX", joliet);
    text_field(&mut d[40..72], label, joliet);
    d[80..88].copy_from_slice(&both32(total_sectors));
    if joliet {
        d[88..91].copy_from_slice(b"%/E"); // UCS-2 level 3
    }
    d[120..124].copy_from_slice(&both16(1));
    d[124..128].copy_from_slice(&both16(1));
    d[128..132].copy_from_slice(&both16(SECTOR as u16));
    d[132..140].copy_from_slice(&both32(10));
    d[140..144].copy_from_slice(&path_table_l.to_le_bytes());
    d[148..152].copy_from_slice(&path_table_m.to_be_bytes());
    d[156..190].copy_from_slice(&dir_record(&[0], root_extent, SECTOR as u32, true));
    text_field(&mut d[190..318], "", joliet);
    text_field(&mut d[318..446], "", joliet);
    text_field(&mut d[446..574], "PROXSYNC", joliet);
    text_field(&mut d[574..702], "PROXSYNC", joliet);
    text_field(&mut d[702..739], "", joliet);
    text_field(&mut d[739..776], "", joliet);
    text_field(&mut d[776..813], "", joliet);
    for at in [813, 830, 864] {
        d[at..at + 16].copy_from_slice(VOL_DATE);
    }
    d[847..863].fill(b'0');
    d[881] = 1;
    d
}

/// A path table with only the root directory.
fn path_table(root_extent: u32, big_endian: bool) -> Vec<u8> {
    let mut t = vec![0u8; SECTOR];
    t[0] = 1;
    let (extent, parent) = if big_endian {
        (root_extent.to_be_bytes(), 1u16.to_be_bytes())
    } else {
        (root_extent.to_le_bytes(), 1u16.to_le_bytes())
    };
    t[2..6].copy_from_slice(&extent);
    t[6..8].copy_from_slice(&parent);
    t
}

/// An ISO 9660 image holding `files` in its root directory, with Joliet names, labelled
/// `label`. Enough for a cloud-init seed: a handful of small files (the root directory is one
/// sector; names up to 30 characters). Files are sorted by name as ISO 9660 requires.
pub(crate) fn iso9660(label: &str, files: &[IsoFile]) -> Vec<u8> {
    // Layout (sectors): 0-15 system area, 16 primary, 17 Joliet, 18 terminator, 19/20 primary
    // path tables (L/M), 21/22 Joliet path tables, 23 primary root, 24 Joliet root, 25.. data.
    const PRIMARY_ROOT: u32 = 23;
    const JOLIET_ROOT: u32 = 24;
    const DATA: u32 = 25;
    let mut files: Vec<&IsoFile> = files.iter().collect();
    files.sort_by(|a, b| a.name.cmp(&b.name));
    let mut extents = Vec::new();
    let mut next = DATA;
    for f in &files {
        extents.push(next);
        next += f.data.len().div_ceil(SECTOR) as u32;
    }
    let total = next;

    let mut image = vec![0u8; 16 * SECTOR];
    image.extend(volume_descriptor(false, label, total, 19, 20, PRIMARY_ROOT));
    image.extend(volume_descriptor(true, label, total, 21, 22, JOLIET_ROOT));
    let mut term = vec![0u8; SECTOR];
    term[0] = 255;
    term[1..6].copy_from_slice(b"CD001");
    term[6] = 1;
    image.extend(term);
    image.extend(path_table(PRIMARY_ROOT, false));
    image.extend(path_table(PRIMARY_ROOT, true));
    image.extend(path_table(JOLIET_ROOT, false));
    image.extend(path_table(JOLIET_ROOT, true));
    for (root, joliet) in [(PRIMARY_ROOT, false), (JOLIET_ROOT, true)] {
        let mut dir = Vec::new();
        dir.extend(dir_record(&[0], root, SECTOR as u32, true));
        dir.extend(dir_record(&[1], root, SECTOR as u32, true));
        for (f, extent) in files.iter().zip(&extents) {
            let id = if joliet {
                joliet_id(&f.name)
            } else {
                primary_id(&f.name)
            };
            dir.extend(dir_record(&id, *extent, f.data.len() as u32, false));
        }
        dir.resize(SECTOR, 0);
        image.extend(dir);
    }
    for f in &files {
        image.extend_from_slice(&f.data);
        let pad = f.data.len().div_ceil(SECTOR) * SECTOR - f.data.len();
        image.extend(std::iter::repeat_n(0u8, pad));
    }
    debug_assert_eq!(image.len(), total as usize * SECTOR);
    image
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ISO 9660 reader, independent of the writer: the label of the primary and
    /// Joliet descriptors and the root directory's (name, content) of each.
    type Files = Vec<(String, Vec<u8>)>;

    fn read_iso(img: &[u8]) -> (String, Files, Files) {
        let sector = |n: usize| &img[n * 2048..(n + 1) * 2048];
        let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let mut label = String::new();
        let mut trees = Vec::new();
        for n in 16.. {
            let d = sector(n);
            assert_eq!(&d[1..6], b"CD001", "descriptor {n}");
            if d[0] == 255 {
                break;
            }
            let joliet = d[0] == 2 && &d[88..91] == b"%/E";
            assert!(d[0] == 1 || joliet);
            if d[0] == 1 {
                label = String::from_utf8_lossy(&d[40..72]).trim_end().to_string();
                assert_eq!(le32(&d[80..84]) * 2048, img.len(), "volume size");
            }
            let root = &d[156..190];
            let (extent, size) = (le32(&root[2..6]), le32(&root[10..14]));
            let dir = &img[extent * 2048..extent * 2048 + size];
            let mut files = Vec::new();
            let mut at = 0;
            while at < dir.len() && dir[at] != 0 {
                let r = &dir[at..at + dir[at] as usize];
                let id = &r[33..33 + r[32] as usize];
                if r[25] & 2 == 0 {
                    let name = if joliet {
                        let units: Vec<u16> = id
                            .chunks(2)
                            .map(|c| u16::from_be_bytes([c[0], c[1]]))
                            .collect();
                        String::from_utf16(&units).unwrap()
                    } else {
                        String::from_utf8(id.to_vec()).unwrap()
                    };
                    let (e, s) = (le32(&r[2..6]), le32(&r[10..14]));
                    files.push((name, img[e * 2048..e * 2048 + s].to_vec()));
                }
                at += r[0] as usize;
            }
            trees.push(files);
        }
        let joliet = trees.pop().unwrap();
        let primary = trees.pop().unwrap();
        (label, primary, joliet)
    }

    /// A seed of user-data decrypted from SOPS is named, and its instance-id made, from the
    /// ciphertext: two secrets under one ciphertext give one name, so the name (kept in the
    /// state database and logs) says nothing about the secret.
    #[test]
    fn a_sealed_seed_is_named_by_its_ciphertext() {
        let sealed = |ud: &str| {
            let mut s = spec(ud, None);
            s.sealed = Some("ENC[AES256_GCM,data:x,iv:y,tag:z,type:str]".into());
            build_seed("main", &s, "0123456789abcdef", &[]).unwrap()
        };
        let (a, b) = (
            sealed("#cloud-config\na: 1\n"),
            sealed("#cloud-config\na: 2\n"),
        );
        assert_eq!(a.file_name, b.file_name);
        assert_eq!(
            a.files[0].data, b.files[0].data,
            "meta-data, with the instance-id"
        );
        assert_ne!(
            a.files[1].data, b.files[1].data,
            "the user-data itself is the secret"
        );
        let plain = build_seed(
            "main",
            &spec("#cloud-config\na: 1\n", None),
            "0123456789abcdef",
            &[],
        )
        .unwrap();
        assert_ne!(plain.file_name, a.file_name);
    }

    fn spec(user_data: &str, ci: Option<CloudInit>) -> Spec {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata: {{name: web-01}}\nspec:\n  forProvider:\n    \
             site: lab\n    node: pve1\n    image: \"9000\"\n    userData: {}\n",
            serde_json::Value::String(user_data.into())
        );
        let (mut specs, diags) = crate::spec::parse_file("x.yaml", yaml.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        let mut s = specs.remove(0);
        s.vm_mut().unwrap().cloud_init = ci.map(Box::new);
        s
    }

    #[test]
    fn the_seed_image_reads_back_with_label_and_files() {
        let ud = "#cloud-config\npackages: [nginx]\n";
        let ci = CloudInit {
            ip_config: vec![crate::spec::IpConfig {
                ip: Some("10.0.0.5/24".into()),
                gateway: Some("10.0.0.1".into()),
                ..Default::default()
            }],
            nameservers: vec!["10.0.0.53".into()],
            ..Default::default()
        };
        let macs = [Some("BC:24:11:00:00:01".to_string())];
        let seed = build_seed("main", &spec(ud, Some(ci)), "0123456789abcdef", &macs).unwrap();
        let (label, primary, joliet) = read_iso(&seed.image);
        assert_eq!(label, "cidata");
        let names: Vec<&str> = joliet.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["meta-data", "network-config", "user-data"]);
        let primary: Vec<&str> = primary.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            primary,
            ["META-DATA.;1", "NETWORK-CONFIG.;1", "USER-DATA.;1"]
        );
        let file = |n: &str| {
            String::from_utf8(joliet.iter().find(|(f, _)| f == n).unwrap().1.clone()).unwrap()
        };
        assert_eq!(file("user-data"), ud);
        let meta = file("meta-data");
        assert!(
            meta.starts_with("instance-id: \"iid-0123456789abcdef-"),
            "{meta}"
        );
        assert!(meta.contains("local-hostname: \"web-01\""), "{meta}");
        let net = file("network-config");
        assert!(net.contains("mac_address: \"bc:24:11:00:00:01\""), "{net}");
        assert!(net.contains("address: \"10.0.0.5/24\""), "{net}");
        assert!(net.contains("gateway: \"10.0.0.1\""), "{net}");
        assert!(net.contains("- \"10.0.0.53\""), "{net}");
        // Valid YAML, as cloud-init reads it.
        for f in ["meta-data", "network-config"] {
            let v: serde_json::Value = serde_saphyr::from_str(&file(f)).unwrap();
            assert!(v.is_object(), "{f}");
        }
        assert!(seed.file_name.starts_with("proxsync.main.web-01."));
        assert_eq!(
            parse_seed_file_name(&format!("local:iso/{}", seed.file_name)).map(|p| p.1),
            Some("web-01")
        );
    }

    /// Writes a sample seed for a check by hand: `PROXSYNC_WRITE_SEED=/tmp/seed.iso cargo test
    /// --lib write_sample_seed`, then `xorriso -indev /tmp/seed.iso -ls` or `isoinfo -J -l -i`.
    #[test]
    fn write_sample_seed() {
        let Ok(path) = std::env::var("PROXSYNC_WRITE_SEED") else {
            return;
        };
        let ci = CloudInit {
            ip_config: vec![crate::spec::IpConfig {
                ip: Some("dhcp".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let macs = [Some("BC:24:11:00:00:01".to_string())];
        let seed = build_seed(
            "main",
            &spec("#cloud-config\npackages: [nginx]\n", Some(ci)),
            "0123456789abcdef",
            &macs,
        )
        .unwrap();
        std::fs::write(path, &seed.image).unwrap();
    }

    #[test]
    fn seeds_are_deterministic_and_follow_their_inputs() {
        let a = build_seed("main", &spec("#cloud-config\n", None), "u1", &[]).unwrap();
        let b = build_seed("main", &spec("#cloud-config\n", None), "u1", &[]).unwrap();
        assert_eq!(a, b);
        let c = build_seed("main", &spec("#cloud-config\na: 1\n", None), "u1", &[]).unwrap();
        assert_ne!(a.file_name, c.file_name);
        let (_, _, files) = read_iso(&a.image);
        assert_eq!(files.len(), 2, "no network-config without networking");
        let mut s = spec("#cloud-config\n", None);
        s.vm_mut().unwrap().user_data = None;
        assert!(build_seed("main", &s, "u1", &[]).is_none());
    }

    #[test]
    fn native_fields_merge_before_the_users_part() {
        let ci = CloudInit {
            user: Some("alice".into()),
            ssh_keys: vec!["ssh-ed25519 AAAA x".into()],
            upgrade_packages: Some(false),
            ..Default::default()
        };
        let ud = user_data("#!/bin/sh\necho hi\n", Some(&ci));
        assert!(ud.starts_with("Content-Type: multipart/mixed;"), "{ud}");
        let native = ud.find("user: \"alice\"").unwrap();
        let script = ud.find("text/x-shellscript").unwrap();
        assert!(native < script, "{ud}");
        assert!(ud.contains("package_upgrade: false"));
        assert_eq!(user_data("#cloud-config\n", None), "#cloud-config\n");
    }

    #[test]
    fn seed_names_parse_back_exactly() {
        assert_eq!(
            parse_seed_file_name("local:iso/proxsync.main.web-01.0123456789ab.iso"),
            Some(("main", "web-01", "0123456789ab"))
        );
        for bad in [
            "local:iso/proxsync.main.web-01.iso",
            "local:iso/proxsync.main.web-01.0123456789xz.iso",
            "local:iso/proxsync.main.web.01.0123456789ab.iso",
            "local:iso/debian.iso",
        ] {
            assert_eq!(parse_seed_file_name(bad), None, "{bad}");
        }
        assert!(is_seed_of(
            "local:iso/proxsync.main.web-01.0123456789ab.iso,media=cdrom",
            "main",
            "web-01"
        ));
        assert!(!is_seed_of(
            "local:iso/proxsync.main.web-01.0123456789ab.iso",
            "main",
            "web"
        ));
        assert!(!is_seed_of(
            "local:iso/proxsync.other.web-01.0123456789ab.iso",
            "main",
            "web-01"
        ));
    }
}
