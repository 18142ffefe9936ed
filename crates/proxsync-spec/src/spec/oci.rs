//! `template: {oci: REFERENCE}`: a container made from an OCI image, which PVE 9.1 pulls from its
//! registry into a `vztmpl` storage as a `.tar` (`POST /nodes/{node}/storage/{storage}/
//! oci-registry-pull`: pve-storage `src/PVE/API2/Storage/Status.pm` `oci_registry_pull`, which
//! runs `skopeo copy docker://REFERENCE oci-archive:PATH` in a task of type `ociregistrypull`).
//!
//! PVE takes a reference with a tag and no digest (its schema's pattern), stores it under the
//! file name it is given, normalised (`normalize_content_filename`: everything up to the last
//! `/` dropped, every character but `A-Za-z0-9_.-` made `_`) with `.tar` added, and refuses to
//! pull over a file of that name. proxsync names the file itself ([`file_stem`]), so two
//! references never share one: `docker.io/library/nginx:1.27` is
//! `local:vztmpl/docker.io_library_nginx_1.27-<16 hex digits>.tar`.

use crate::util::fnv::FnvHasher;

/// The first PVE release with `oci-registry-pull` (and bare `.tar` container templates).
pub const OCI_SINCE: (u32, u32, u32) = (9, 1, 0);
/// The storage an OCI image is pulled to when the spec names none.
pub const DEFAULT_OCI_STORAGE: &str = "local";
/// The longest reference proxsync takes: its file name (with the hash and `.tar`) stays well
/// inside PVE's 255.
pub const MAX_REFERENCE: usize = 200;

/// Checks `reference` as PVE's schema does (`oci-registry-pull`'s `reference` pattern), in
/// ASCII: an optional registry (`host[.host...][:port]/`), a repository of lowercase path
/// components, and a tag (`:` then `\w[\w.-]{0,127}`). A digest (`@sha256:...`) is refused:
/// PVE takes none.
pub fn check_reference(reference: &str) -> Result<(), String> {
    let example = "docker.io/library/nginx:1.27";
    if reference.len() > MAX_REFERENCE {
        return Err(format!(
            "the OCI reference is {} characters; at most {MAX_REFERENCE}",
            reference.len()
        ));
    }
    if reference.contains('@') {
        return Err(format!(
            "OCI reference {reference:?} names a digest; PVE's oci-registry-pull takes a tag \
             (e.g. {example})"
        ));
    }
    let Some((name, tag)) = reference.rsplit_once(':').filter(|(_, t)| !t.contains('/')) else {
        return Err(format!(
            "OCI reference {reference:?} has no tag; PVE pulls a tagged image (e.g. {example})"
        ));
    };
    if !tag_ok(tag) {
        return Err(format!(
            "OCI reference {reference:?}: the tag {tag:?} must start with a letter, digit or _ \
             and hold only those, . and -, at most 128 characters (e.g. {example})"
        ));
    }
    let parts: Vec<&str> = name.split('/').collect();
    let path_only = parts.iter().all(|p| path_component_ok(p));
    let with_registry =
        parts.len() > 1 && registry_ok(parts[0]) && parts[1..].iter().all(|p| path_component_ok(p));
    if !(path_only || with_registry) {
        return Err(format!(
            "OCI reference {reference:?} is not one PVE takes: [registry[:port]/]repository:tag, \
             the repository lowercase letters and digits joined by ., _, __ or dashes (e.g. \
             {example})"
        ));
    }
    Ok(())
}

/// `\w[\w.-]{0,127}`, ASCII.
fn tag_ok(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && word(bytes[0])
        && bytes.iter().all(|b| word(*b) || *b == b'.' || *b == b'-')
}

/// `[a-z\d]+(?:(?:[._]|__|[-]*)[a-z\d]+)*`: runs of lowercase letters and digits, joined by
/// `.`, `_`, `__` or any number of `-`.
fn path_component_ok(part: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let mut runs = part.split(|c: char| !alnum(c));
    let mut seps = part.split(alnum).filter(|s| !s.is_empty());
    let first_last =
        part.chars().next().is_some_and(alnum) && part.chars().last().is_some_and(alnum);
    first_last
        && runs.all(|r| r.is_empty() || r.chars().all(alnum))
        && seps.all(|s| matches!(s, "." | "_" | "__") || s.chars().all(|c| c == '-'))
}

/// `host(.host)*(:port)?`, each host label `[a-zA-Z\d]` or `[a-zA-Z\d][a-zA-Z\d-]*[a-zA-Z\d]`.
fn registry_ok(part: &str) -> bool {
    let (host, port) = match part.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (part, None),
    };
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
    };
    host.split('.').all(label_ok)
        && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The file name (without the `.tar` PVE adds) proxsync has PVE store `reference` as: the
/// reference's first [`MAX_NORMAL`] characters normalised as pve-storage does, and 16 hex
/// digits of the whole reference's 64-bit FNV-1a hash.
pub fn file_stem(reference: &str) -> String {
    use std::hash::Hasher;
    let normal: String = reference
        .chars()
        .take(MAX_NORMAL)
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '.' | '-' => c,
            _ => '_',
        })
        .collect();
    let mut h = FnvHasher::default();
    h.write(reference.as_bytes());
    format!("{normal}-{:016x}", h.finish())
}

/// The most of the normalised reference a file name keeps (the hash keeps it unique): the
/// file name is the id of the pull's task, and PVE names the task's log file after the whole
/// UPID (`/var/log/pve/tasks/X/UPID:node:pid:pstart:start:ociregistrypull:ID:user:`, pve-common
/// `PVE::UPID`), which must stay within NAME_MAX (255 bytes) with the node and user in it.
pub const MAX_NORMAL: usize = 96;

/// The archive PVE stores `reference` as (the [`file_stem`] and `.tar`): also the id of its
/// pull's task (`encode_text` leaves these characters as they are).
pub fn archive(reference: &str) -> String {
    format!("{}.tar", file_stem(reference))
}

/// The `vztmpl` volume `reference` is pulled to on `storage`.
pub fn volume(storage: &str, reference: &str) -> String {
    format!("{storage}:vztmpl/{}", archive(reference))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_pve_takes_and_refuses() {
        for ok in [
            "nginx:1.27",
            "library/nginx:latest",
            "docker.io/library/nginx:1.27",
            "ghcr.io/org/app_x/sub:v1.2.3-rc1",
            "registry.local:5000/team/app:2026_11",
            "a--b__c.d/e:_",
        ] {
            assert_eq!(check_reference(ok), Ok(()), "{ok}");
        }
        for bad in [
            "nginx",
            "nginx:",
            "Nginx:1",
            "docker.io/library/nginx@sha256:abc",
            "docker.io/library/nginx:1.27 --x",
            "nginx:1.27\n",
            "nginx:.1",
            "a/b/:1",
            "-a:1",
            "a___b:1",
            "a._b:1",
            "reg:x/a:1",
            "https://docker.io/nginx:1",
        ] {
            assert!(check_reference(bad).is_err(), "{bad}");
        }
        assert!(check_reference(&format!("a:{}", "b".repeat(MAX_REFERENCE))).is_err());
    }

    #[test]
    fn two_references_never_share_a_file() {
        let a = volume("local", "a/b_c:1");
        let b = volume("local", "a_b/c:1");
        assert_ne!(a, b);
        assert!(
            a.starts_with("local:vztmpl/a_b_c_1-") && a.ends_with(".tar"),
            "{a}"
        );
        assert_eq!(volume("local", "a/b_c:1"), a, "stable");
    }
}
