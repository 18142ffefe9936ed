//! `kind: ProxmoxImage`: a cloud image, an ISO or a container template that PVE downloads
//! itself by URL (`POST /nodes/{node}/storage/{storage}/download-url`) and verifies by its
//! checksum. proxsync never downloads it.
//!
//! ```yaml
//! apiVersion: proxsync.io/v1
//! kind: ProxmoxImage
//! metadata: {name: noble-cloud}
//! spec:
//!   forProvider:
//!     site: lab
//!     url: https://cloud-images.ubuntu.com/noble/20261115/noble-server-cloudimg-amd64.img
//!     checksum: sha256:5f0c...e1
//!     content: import        # import (a disk, the default) | iso | vztmpl
//!     format: qcow2          # import only; else from the URL's extension
//!     storage: local         # a file-based storage with that content; default local
//!     nodes: [pve1, pve2]    # a storage not shared: where it is needed besides the nodes of
//!                            # the guests that use it
//! ```
//!
//! The volume's file name is the image's name and the first 12 hex digits of its checksum
//! (`noble-cloud-5f0c1a2b3c4d.qcow2`): a new version is a new volume, so nothing in use is ever
//! overwritten, and PVE's own check of an existing file (the same checksum: nothing to
//! download) makes sending the same download twice harmless.
//!
//! A guest uses it by name: `image: {image: noble-cloud}` ([`super::Image::Managed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::diag::{Diagnostic, Pos};
use super::fields::{Ctx, Obj, TOP, enum_field, object, string, string_list};
use super::names::{check_node, check_site, check_spec_name, check_storage};
use super::yaml::{Node, Value};
use super::{API_VERSIONS, Image, Spec, Specs};

/// The `kind` of an image document.
pub const IMAGE_KIND: &str = "ProxmoxImage";

/// How many hex digits of the checksum the volume's file name carries: its version.
pub const VERSION_DIGITS: usize = 12;

/// The longest `url`, in bytes.
const MAX_URL: usize = 2048;

/// Most `nodes`.
const MAX_NODES: usize = 64;

const TOP_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "spec"];
const FOR_PROVIDER_FIELDS: &[&str] = &[
    "site", "url", "checksum", "content", "format", "storage", "nodes",
];

/// The images of a spec set by name ([`super::SpecSet::images_by_name`]).
pub type ImagesByName = BTreeMap<String, Arc<ImageSpec>>;

/// One validated `ProxmoxImage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    /// `metadata.name`: what guests refer to.
    pub name: String,
    /// The file it is defined in, as shown in diagnostics.
    pub file: String,
    /// Where its `metadata.name` is written.
    pub pos: Pos,
    /// The site whose storages hold it.
    pub site: String,
    /// Where PVE downloads it from (`http://` or `https://`).
    pub url: String,
    /// The expected checksum.
    pub checksum: Checksum,
    /// What the storage holds it as.
    pub content: ImageContent,
    /// The storage it is downloaded to (file based, with `content`).
    pub storage: String,
    /// Nodes it is needed on besides those of the guests that use it (a storage not shared).
    pub nodes: Vec<String>,
    /// The volume's file name: `NAME-VERSION.EXT`.
    pub filename: String,
}

impl ImageSpec {
    /// The volume ID PVE lists it as: `local:import/noble-cloud-5f0c1a2b3c4d.qcow2`.
    pub fn volume_id(&self) -> String {
        format!(
            "{}:{}/{}",
            self.storage,
            self.content.as_str(),
            self.filename
        )
    }

    /// The version: the first [`VERSION_DIGITS`] hex digits of the checksum.
    pub fn version(&self) -> &str {
        &self.checksum.hex[..VERSION_DIGITS]
    }
}

/// The version a file name made by [`ImageSpec`] carries: `noble-cloud-5f0c1a2b3c4d.qcow2`
/// gives `5f0c1a2b3c4d`.
pub fn version_of_file(file: &str) -> Option<&str> {
    let stem = file.split_once('.').map_or(file, |(stem, _)| stem);
    let (_, version) = stem.rsplit_once('-')?;
    (version.len() == VERSION_DIGITS && version.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(version)
}

/// A checksum PVE verifies (`checksum-algorithm` and `checksum`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Checksum {
    /// `sha256` or `sha512`.
    pub algorithm: ChecksumAlgorithm,
    /// Lower-case hex digits.
    pub hex: String,
}

/// The checksum algorithms a `ProxmoxImage` may name: those with no known collisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumAlgorithm {
    /// SHA-256: 64 hex digits.
    Sha256,
    /// SHA-512: 128 hex digits.
    Sha512,
}

impl ChecksumAlgorithm {
    /// PVE's name for it (`checksum-algorithm`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Sha256 => "sha256",
            ChecksumAlgorithm::Sha512 => "sha512",
        }
    }

    fn hex_len(self) -> usize {
        match self {
            ChecksumAlgorithm::Sha256 => 64,
            ChecksumAlgorithm::Sha512 => 128,
        }
    }
}

/// The content types `download-url` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageContent {
    /// A disk image a VM imports (`import-from`).
    Import,
    /// An installer a VM boots from a CD-ROM.
    Iso,
    /// A container's OS template.
    Vztmpl,
}

impl ImageContent {
    /// PVE's name for it, which is also the volume's directory.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageContent::Import => "import",
            ImageContent::Iso => "iso",
            ImageContent::Vztmpl => "vztmpl",
        }
    }
}

/// Whether `doc` is an image document.
pub(crate) fn is_image(doc: &Node) -> bool {
    match &doc.value {
        Value::Map(entries) => entries.iter().any(|(k, v)| {
            matches!(&k.value, Value::Str(s) if s == "kind")
                && matches!(&v.value, Value::Str(s) if s == IMAGE_KIND)
        }),
        _ => false,
    }
}

/// Validates an image document; its diagnostics are the image's (named for it when its name
/// can be read).
pub(crate) fn validate_image(ctx: &mut Ctx, doc: &Node) -> Option<ImageSpec> {
    let first = ctx.diags.len();
    let errors = ctx.error_count();
    let (image, name) = document(ctx, doc);
    for d in &mut ctx.diags[first..] {
        d.spec = name.clone();
    }
    image.filter(|_| ctx.error_count() == errors)
}

fn document(ctx: &mut Ctx, doc: &Node) -> (Option<ImageSpec>, Option<String>) {
    let Some(top) = object(ctx, doc, TOP, Some(TOP_FIELDS)) else {
        return (None, None);
    };
    if let Some(n) = top.required(ctx, "apiVersion", API_VERSIONS[0])
        && let Some(s) = string(ctx, n, "apiVersion", API_VERSIONS[0])
        && s != API_VERSIONS[0]
    {
        ctx.error(
            n.pos,
            format!(
                "apiVersion {s:?} is not supported for a {IMAGE_KIND}; use {}",
                API_VERSIONS[0]
            ),
        );
    }
    let mut name = None;
    let mut pos = doc.pos;
    if let Some(meta) = top.required(ctx, "metadata", "a mapping with name")
        && let Some(meta) = object(ctx, meta, "metadata", Some(&["name"]))
        && let Some(n) = meta.required(ctx, "name", "the image's unique name, e.g. noble-cloud")
        && let Some(s) = string(ctx, n, "metadata.name", "noble-cloud")
    {
        pos = n.pos;
        name = ctx.check(n.pos, check_spec_name(s).map(|()| s.to_string()));
    }
    let fp = top
        .required(ctx, "spec", "a mapping with forProvider")
        .and_then(|n| object(ctx, n, "spec", Some(&["forProvider"])))
        .and_then(|spec| spec.required(ctx, "forProvider", "the image's site, url and checksum"))
        .and_then(|n| object(ctx, n, "spec.forProvider", Some(FOR_PROVIDER_FIELDS)));
    let Some(fp) = fp else {
        return (None, name);
    };
    let image = for_provider(ctx, &fp, name.as_deref(), pos);
    (image, name)
}

fn for_provider(ctx: &mut Ctx, fp: &Obj, name: Option<&str>, pos: Pos) -> Option<ImageSpec> {
    let site = text(ctx, fp, "site", "lab", true)
        .and_then(|(s, p)| ctx.check(p, check_site(&s).map(|()| s)));
    let url = text(ctx, fp, "url", "https://example.org/disk.qcow2", true)
        .and_then(|(s, p)| ctx.check(p, check_url(&s).map(|()| s)));
    let checksum = text(ctx, fp, "checksum", "sha256:<64 hex digits>", true)
        .and_then(|(s, p)| ctx.check(p, parse_checksum(&s)));
    let content = match fp.get("content") {
        None => Some(ImageContent::Import),
        Some(n) => enum_field(
            ctx,
            n,
            "spec.forProvider.content",
            &[
                ("import", ImageContent::Import),
                ("iso", ImageContent::Iso),
                ("vztmpl", ImageContent::Vztmpl),
            ],
        ),
    };
    let storage = match text(ctx, fp, "storage", "local", false) {
        None if fp.get("storage").is_none() => Some("local".to_string()),
        None => None,
        Some((s, p)) => ctx.check(p, check_storage(&s).map(|()| s)),
    };
    let nodes = match fp.get("nodes") {
        None => Some(Vec::new()),
        Some(n) => {
            string_list(ctx, n, "spec.forProvider.nodes", "pve1", MAX_NODES).and_then(|nodes| {
                let mut out = Vec::new();
                let mut ok = true;
                for (node, p) in nodes {
                    match check_node(&node) {
                        Ok(()) if !out.contains(&node) => out.push(node),
                        Ok(()) => {}
                        Err(e) => {
                            ctx.error(p, e);
                            ok = false;
                        }
                    }
                }
                ok.then_some(out)
            })
        }
    };
    let format = text(ctx, fp, "format", "qcow2", false);
    let (url, content, checksum) = (url?, content?, checksum?);
    let ext = match (content, &format) {
        (ImageContent::Import, Some((f, p))) => ctx.check(*p, import_format(f)),
        (ImageContent::Import, None) => ctx.check(
            fp.key_pos("url").unwrap_or(fp.pos),
            import_format_of_url(&url),
        ),
        (_, Some((_, p))) => {
            ctx.error(
                *p,
                "spec.forProvider.format is for content import (a disk image); an iso or vztmpl \
                 is named by its URL's extension",
            );
            None
        }
        (ImageContent::Iso, None) => Some("iso".to_string()),
        (ImageContent::Vztmpl, None) => {
            ctx.check(fp.key_pos("url").unwrap_or(fp.pos), vztmpl_extension(&url))
        }
    };
    let name = name?.to_string();
    let filename = format!("{name}-{}.{}", &checksum.hex[..VERSION_DIGITS], ext?);
    Some(ImageSpec {
        name,
        file: ctx.file().to_string(),
        pos,
        site: site?,
        url,
        checksum,
        content,
        storage: storage?,
        nodes: nodes?,
        filename,
    })
}

/// A string field with where it is written; `required` reports it missing.
fn text(
    ctx: &mut Ctx,
    fp: &Obj,
    key: &str,
    example: &str,
    required: bool,
) -> Option<(String, Pos)> {
    let n = match required {
        true => fp.required(ctx, key, example)?,
        false => fp.get(key)?,
    };
    let s = string(ctx, n, &fp.path(key), example)?;
    Some((s.to_string(), n.pos))
}

/// PVE's `download-url` takes `https?://.*`; proxsync also refuses what would not be one URL
/// (whitespace, control characters) and credentials in it (they would be shown in PVE's task
/// log and in status).
fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| {
            format!("url {url:?} must start with https:// or http:// (what PVE downloads from)")
        })?;
    if url.len() > MAX_URL {
        return Err(format!(
            "url is {} bytes long; at most {MAX_URL}",
            url.len()
        ));
    }
    if let Some(c) = url
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || !c.is_ascii())
    {
        return Err(format!(
            "url holds {c:?}; write it %-encoded (only printable ASCII without spaces)"
        ));
    }
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() {
        return Err(format!("url {url:?} has no host"));
    }
    if host.contains('@') {
        return Err(
            "url holds credentials (user@host): PVE shows the URL in its task log; use a URL \
             without them"
                .into(),
        );
    }
    Ok(())
}

/// `sha256:HEX` or `sha512:HEX`.
fn parse_checksum(text: &str) -> Result<Checksum, String> {
    let valid = "write sha256:<64 hex digits> or sha512:<128 hex digits> (from the publisher's \
                 SHA256SUMS or SHA512SUMS)";
    let (algorithm, hex) = match text.split_once(':') {
        Some(("sha256", hex)) => (ChecksumAlgorithm::Sha256, hex),
        Some(("sha512", hex)) => (ChecksumAlgorithm::Sha512, hex),
        Some((other, _)) => {
            return Err(format!(
                "checksum algorithm {other:?} is not accepted; {valid}"
            ));
        }
        None => return Err(format!("checksum {text:?} names no algorithm; {valid}")),
    };
    if hex.len() != algorithm.hex_len() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "checksum is not {} hex digits of {}; {valid}",
            algorithm.hex_len(),
            algorithm.as_str()
        ));
    }
    Ok(Checksum {
        algorithm,
        hex: hex.to_ascii_lowercase(),
    })
}

/// The disk formats PVE's `download-url` accepts for `import` (pve-storage
/// `UPLOAD_IMPORT_EXT_RE_1` is `ova|qcow2|raw|vmdk`; an `.ova` is a whole VM, not a disk).
const IMPORT_FORMATS: [&str; 3] = ["qcow2", "raw", "vmdk"];

fn import_format(format: &str) -> Result<String, String> {
    match IMPORT_FORMATS.contains(&format) {
        true => Ok(format.to_string()),
        false => Err(format!(
            "format {format:?} is not valid; valid values are: {}",
            IMPORT_FORMATS.join(", ")
        )),
    }
}

/// The last path segment of `url`, without query or fragment.
fn url_file(url: &str) -> &str {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    path.rsplit('/').next().unwrap_or(path)
}

fn import_format_of_url(url: &str) -> Result<String, String> {
    let file = url_file(url);
    let ext = file.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some(e) if IMPORT_FORMATS.contains(&e) => Ok(e.to_string()),
        Some("img") => Err(format!(
            "the URL's file {file:?} does not say its disk format; add format: qcow2 (a cloud \
             .img, such as Ubuntu's, is a qcow2 file) or format: raw"
        )),
        _ => Err(format!(
            "the URL's file {file:?} does not end in .qcow2, .raw or .vmdk; add format: (one of \
             {})",
            IMPORT_FORMATS.join(", ")
        )),
    }
}

/// pve-storage `VZTMPL_EXT_RE_1`: `.tar.gz`, `.tar.xz`, `.tar.zst` or `.tar.bz2`.
fn vztmpl_extension(url: &str) -> Result<String, String> {
    let file = url_file(url);
    ["tar.gz", "tar.xz", "tar.zst", "tar.bz2"]
        .into_iter()
        .find(|e| file.ends_with(&format!(".{e}")))
        .map(str::to_string)
        .ok_or_else(|| {
            format!(
                "the URL's file {file:?} is not a container template: PVE accepts .tar.gz, \
                 .tar.xz, .tar.zst and .tar.bz2"
            )
        })
}

/// The checks across documents: image names unique and not a guest's, each guest's
/// `image: {image: NAME}` naming a valid image of its site with content a VM can use. Guests
/// whose reference fails are held (their diagnostics name them), and so are the images of a
/// duplicated name.
pub(crate) fn check_references(
    specs: &mut Specs,
    images: &mut Vec<Arc<ImageSpec>>,
    diags: &mut Vec<Diagnostic>,
) {
    let mut seen: BTreeMap<String, (String, Pos)> = BTreeMap::new();
    let mut twice: BTreeSet<String> = BTreeSet::new();
    for image in images.iter() {
        if let Some((file, pos)) = seen.get(&image.name) {
            twice.insert(image.name.clone());
            diags.push(
                Diagnostic::error(
                    &image.file,
                    image.pos,
                    format!(
                        "{IMAGE_KIND} {} is defined twice (first at {file}:{}); names are unique",
                        image.name, pos.line
                    ),
                )
                .for_spec(Some(&image.name)),
            );
        } else {
            seen.insert(image.name.clone(), (image.file.clone(), image.pos));
        }
    }
    for spec in specs.iter() {
        if let Some((file, pos)) = seen.get(spec.name.as_str()) {
            twice.insert(spec.name.to_string());
            diags.push(
                Diagnostic::error(
                    &spec.file,
                    spec.pos,
                    format!(
                        "{} is also the name of the {IMAGE_KIND} at {file}:{}; a name is one \
                         guest's or one image's",
                        spec.name, pos.line
                    ),
                )
                .for_spec(Some(&spec.name)),
            );
        }
    }
    images.retain(|i| !twice.contains(&i.name));
    let invalid: BTreeSet<String> = diags
        .iter()
        .filter(|d| d.is_error())
        .filter_map(|d| d.spec.clone())
        .collect();
    let by_name: BTreeMap<&str, &ImageSpec> = images
        .iter()
        .map(|i| (i.name.as_str(), i.as_ref()))
        .collect();
    let mut held = BTreeSet::new();
    for spec in specs.iter() {
        if twice.contains(spec.name.as_str()) {
            held.insert(spec.name.clone());
            continue;
        }
        let Image::Managed(name) = spec.image() else {
            continue;
        };
        let problem = match by_name.get(name.as_str()) {
            Some(image) => reference_problem(spec, image),
            None if invalid.contains(name) => Some(format!(
                "image {name} is not read: its {IMAGE_KIND} has errors (this guest is left as \
                 it is meanwhile)"
            )),
            None => {
                let names: Vec<&str> = by_name.keys().copied().collect();
                let hint = super::closest(name, names.iter().copied())
                    .map_or(String::new(), |n| format!(" (did you mean {n:?}?)"));
                Some(format!(
                    "no {IMAGE_KIND} is named {name:?}{hint}; the repository's images: {}",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ))
            }
        };
        if let Some(why) = problem {
            let at = spec.vm().map_or(spec.pos, |vm| vm.image_pos);
            diags.push(Diagnostic::error(&spec.file, at, why).for_spec(Some(&spec.name)));
            held.insert(spec.name.clone());
        }
    }
    if !held.is_empty() {
        specs.retain(|s| !held.contains(&s.name));
    }
}

/// Why guest `spec` cannot use `image`, if it cannot.
fn reference_problem(spec: &Spec, image: &ImageSpec) -> Option<String> {
    if image.site != spec.site {
        return Some(format!(
            "image {} is on site {}, and this guest is on site {}: an image serves the guests \
             of its own site",
            image.name, image.site, spec.site
        ));
    }
    match (spec.kind(), image.content) {
        (super::GuestKind::Qemu, ImageContent::Import | ImageContent::Iso) => None,
        (super::GuestKind::Qemu, ImageContent::Vztmpl) => Some(format!(
            "image {} is a container template (content vztmpl); a VM is made from content import \
             (a disk) or iso (an installer)",
            image.name
        )),
        (super::GuestKind::Lxc, _) => Some(format!(
            "a container cannot use image {} yet: write its template as a volume ID ({})",
            image.name,
            image.volume_id()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> (Option<ImageSpec>, Vec<Diagnostic>) {
        let (docs, diags) = super::super::yaml::parse_documents("images.yaml", yaml);
        assert!(diags.is_empty(), "{diags:?}");
        let mut ctx = Ctx::new("images.yaml");
        let image = validate_image(&mut ctx, &docs[0]);
        (image, ctx.diags)
    }

    const SUM: &str = "5f0c1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7";

    fn doc(fp: &str) -> String {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {{name: noble-cloud}}\n\
             spec:\n  forProvider:\n    site: lab\n{fp}"
        )
    }

    #[test]
    fn the_volume_name_carries_the_checksum() {
        let (image, diags) = parse(&doc(&format!(
            "    url: https://cloud-images.ubuntu.com/noble/x/noble.img\n    checksum: \
             sha256:{}\n    format: qcow2\n",
            SUM.to_uppercase()
        )));
        assert!(diags.is_empty(), "{diags:?}");
        let image = image.expect("valid");
        assert_eq!(
            image.volume_id(),
            "local:import/noble-cloud-5f0c1a2b3c4d.qcow2"
        );
        assert_eq!(image.version(), "5f0c1a2b3c4d");
        assert_eq!(image.checksum.hex, SUM);
    }

    #[test]
    fn an_img_url_needs_its_format_said() {
        let (image, diags) = parse(&doc(&format!(
            "    url: https://example.org/noble.img\n    checksum: sha256:{SUM}\n"
        )));
        assert!(image.is_none());
        assert!(diags[0].message.contains("add format: qcow2"), "{diags:?}");
        assert_eq!(diags[0].spec.as_deref(), Some("noble-cloud"));
    }

    #[test]
    fn bad_values_are_each_reported_with_what_is_valid() {
        let (image, diags) = parse(&doc(
            "    url: ftp://x/y.qcow2\n    checksum: md5:abc\n    content: disk\n    nodes: [\"pve 1\"]\n",
        ));
        assert!(image.is_none());
        let all: Vec<&str> = diags.iter().map(|d| d.message.as_str()).collect();
        assert!(
            all.iter().any(|m| m.contains("https:// or http://")),
            "{all:?}"
        );
        assert!(all.iter().any(|m| m.contains("md5")), "{all:?}");
        assert!(
            all.iter().any(|m| m.contains("import, iso, vztmpl")),
            "{all:?}"
        );
        assert!(all.iter().any(|m| m.contains("pve 1")), "{all:?}");
    }

    #[test]
    fn a_url_with_credentials_or_spaces_is_refused() {
        for url in [
            "https://u:p@h/x.qcow2",
            "https://h/x y.qcow2",
            "https:///x.qcow2",
        ] {
            assert!(check_url(url).is_err(), "{url}");
        }
        assert!(check_url("https://h:8443/a/x.qcow2?v=1").is_ok());
    }

    #[test]
    fn a_hostile_url_is_refused_before_it_reaches_pve() {
        let long = format!("https://h/{}.qcow2", "a".repeat(MAX_URL));
        for url in [
            "https://h/x.qcow2\r\nX-Injected: 1",
            "https://h/x.qcow2\n",
            "https://h/x\u{0}.qcow2",
            "https://h/x\u{7f}.qcow2",
            "https://h/\u{e9}.qcow2",
            "https://h\\@evil.example/x.qcow2",
            "https://@evil.example/x.qcow2",
            "https://u@h",
            "HTTPS://h/x.qcow2",
            "file:///etc/shadow",
            long.as_str(),
        ] {
            assert!(check_url(url).is_err(), "{url:?}");
        }
        // An @ after the host is part of the path, not credentials.
        assert!(check_url("https://h/a@b/x.qcow2").is_ok());
    }

    #[test]
    fn hostile_names_storages_and_nodes_are_refused() {
        for (field, value) in [
            ("storage", "\"local,shared=1\""),
            ("storage", "\"local;x\""),
            ("nodes", "[\"pve1,pve2\"]"),
            ("nodes", "[\"../pve1\"]"),
        ] {
            let (image, diags) = parse(&doc(&format!(
                "    url: https://h/x.qcow2\n    checksum: sha256:{SUM}\n    {field}: {value}\n"
            )));
            assert!(image.is_none(), "{field}: {value}");
            assert!(!diags.is_empty(), "{field}: {value}");
        }
        let (image, diags) = parse(
            &doc(&format!(
                "    url: https://h/x.qcow2\n    checksum: sha256:{SUM}\n"
            ))
            .replace("noble-cloud", "\"a,b=c\""),
        );
        assert!(image.is_none() && !diags.is_empty(), "{diags:?}");
    }

    #[test]
    fn a_container_template_keeps_its_archive_extension() {
        let (image, diags) = parse(&doc(&format!(
            "    url: https://h/debian-12-standard_12.7-1_amd64.tar.zst\n    checksum: \
             sha256:{SUM}\n    content: vztmpl\n"
        )));
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(
            image.expect("valid").volume_id(),
            "local:vztmpl/noble-cloud-5f0c1a2b3c4d.tar.zst"
        );
    }
}
