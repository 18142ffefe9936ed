//! `kind: ProxmoxTemplate`: a VM template built from a `ProxmoxImage` of the repository.
//!
//! ```yaml
//! apiVersion: proxsync.io/v1
//! kind: ProxmoxTemplate
//! metadata: {name: noble}
//! spec:
//!   forProvider:
//!     site: lab
//!     node: pve1
//!     image: {image: noble-cloud}
//!     storage: local-lvm
//!     cpu: 2
//!     memory: 2Gi
//! ```
//!
//! It reads as a `ProxmoxVM` (the same hardware and cloud-init fields) that is made once,
//! stopped, and then turned into a template (`POST .../qemu/{vmid}/template`). Its version is
//! a hash of what it asks for and of the image's file: the spec (and the VM) is named
//! `NAME-VERSION` ([`version_all`]), so a change of the definition or a new image version is a
//! new spec, built beside the old one, and the old one is a removed spec, deleted through the
//! gate like any other. A guest uses it by name, `image: {template: noble}`
//! ([`super::Image::Built`]), and waits for it (an implicit `dependsOn`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::fields::{Ctx, Obj};
use super::images::ImageSpec;
use super::yaml::{Node, Value};
use super::{Diagnostic, Image, Pos, Spec, Specs};
use crate::util::fnv::FnvHasher;

/// The kind of a template document.
pub const TEMPLATE_KIND: &str = "ProxmoxTemplate";

/// How many hex digits the version has.
pub const VERSION_DIGITS: usize = 8;

/// The longest name of a template: a DNS label (63) less `-` and the version.
pub const MAX_TEMPLATE_NAME: usize = 63 - 1 - VERSION_DIGITS;

/// Which version of which `ProxmoxTemplate` a spec builds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct TemplateVersion {
    /// The template's `metadata.name`, as guests name it (`image: {template: NAME}`).
    pub name: String,
    /// [`VERSION_DIGITS`] hex digits of the hash of its definition (its node included) and its
    /// image's file; empty until the documents are assembled ([`version_all`]).
    pub version: String,
    /// `forProvider.nodes`: the nodes it is built on, one template each (local storage); empty:
    /// the one `node`. Read once; each node's spec ([`version_all`]) has none. Not part of a
    /// version: a node added leaves the others' templates as they are.
    #[serde(skip)]
    pub nodes: Vec<String>,
}

/// Most `nodes`.
const MAX_NODES: usize = 64;

/// The template name of spec name `name` when it reads as a template's version
/// (`NAME-VERSION`, VERSION [`VERSION_DIGITS`] lowercase hex digits): a record of that name
/// is kept while a document names `NAME` with errors (the template's version cannot be
/// worked out then, and a broken document never removes what it held).
pub fn template_of_name(name: &str) -> Option<&str> {
    let (base, version) = name.rsplit_once('-')?;
    let hex = version.len() == VERSION_DIGITS
        && version
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (hex && !base.is_empty()).then_some(base)
}

/// Fields of a `ProxmoxVM` that a template refuses, with why: a template never runs, is made
/// from an image, and is never moved, rebuilt or adopted.
pub(super) const REFUSED: &[(&str, &str)] = &[
    ("powerState", "a template never runs"),
    (
        "userData",
        "a template is cloned: write cloudInit defaults instead",
    ),
    (
        "ha",
        "a template never runs, so HA has nothing to keep running",
    ),
    ("rebootPolicy", "a template never runs"),
    (
        "health",
        "a template never runs: check the guests cloned from it",
    ),
    (
        "changePolicy",
        "a template never runs: guard the changes of the guests cloned from it",
    ),
    ("startup", "a template never runs"),
    ("onboot", "a template never runs"),
    (
        "allowRecreateOnSiteChange",
        "a template of another site is a new template",
    ),
];

/// Refused in `spec`.
pub(super) const REFUSED_POLICIES: &[(&str, &str)] = &[
    (
        "imagePolicy",
        "a new image version always builds a new template beside the old one",
    ),
    (
        "dependsOn",
        "a template depends on its image only; guests depend on it",
    ),
];

/// The checks of a template's own: its name leaves room for the version, it is made from a
/// `ProxmoxImage`, and it sets none of the fields a template refuses. `spec` is then marked a
/// template (its version worked out later) and kept stopped.
pub(super) fn restrict(ctx: &mut Ctx, top: &Obj, fp: &Obj, mut spec: Spec) -> Option<Spec> {
    let mut ok = true;
    if spec.name.len() > MAX_TEMPLATE_NAME {
        ctx.error(
            spec.pos,
            format!(
                "a {TEMPLATE_KIND}'s name is at most {MAX_TEMPLATE_NAME} characters ({} here): \
                 its VMs are named NAME-VERSION, VERSION {VERSION_DIGITS} hex digits",
                spec.name.len()
            ),
        );
        ok = false;
    }
    if let Some(vm) = spec.vm()
        && vm.vm_name.len() > MAX_TEMPLATE_NAME
    {
        ctx.error(
            fp.key_pos("name").unwrap_or(spec.pos),
            format!(
                "a {TEMPLATE_KIND}'s VM name is at most {MAX_TEMPLATE_NAME} characters ({} \
                 here): PVE's name is NAME-VERSION, a DNS name of at most 63",
                vm.vm_name.len()
            ),
        );
        ok = false;
    }
    for (field, why) in REFUSED {
        if let Some(at) = fp.key_pos(field) {
            ctx.error(
                at,
                format!("spec.forProvider.{field} is not for a {TEMPLATE_KIND}: {why}; remove it"),
            );
            ok = false;
        }
    }
    if let Some(spec_node) = top.get("spec") {
        for (field, why) in REFUSED_POLICIES {
            if let Some(at) = key_pos_in(spec_node, field) {
                ctx.error(
                    at,
                    format!("spec.{field} is not for a {TEMPLATE_KIND}: {why}; remove it"),
                );
                ok = false;
            }
        }
    }
    if spec.adopt.is_some() || spec.renamed_from.is_some() {
        ctx.error(
            spec.pos,
            format!(
                "a {TEMPLATE_KIND} is built by proxsync, never adopted or renamed: remove the \
                 proxsync.io annotations"
            ),
        );
        ok = false;
    }
    if !matches!(spec.image(), Image::Managed(_)) {
        let at = spec.vm().map_or(spec.pos, |vm| vm.image_pos);
        ctx.error(
            at,
            format!(
                "a {TEMPLATE_KIND} is built from a ProxmoxImage of the repository: write \
                 spec.forProvider.image as {{image: NAME}} (e.g. {{image: noble-cloud}})"
            ),
        );
        ok = false;
    }
    let nodes = nodes_field(ctx, fp, &mut ok);
    if !ok {
        return None;
    }
    spec.power_state = super::PowerState::Stopped;
    spec.template = Some(Box::new(TemplateVersion {
        name: spec.name.to_string(),
        version: String::new(),
        nodes,
    }));
    Some(spec)
}

/// `forProvider.nodes`: every node the template is built on (instead of `node`), each a node
/// name, none twice; empty when absent. Problems clear `ok`.
fn nodes_field(ctx: &mut Ctx, fp: &Obj, ok: &mut bool) -> Vec<String> {
    let Some(n) = fp.get("nodes") else {
        return Vec::new();
    };
    let mut refuse = |ctx: &mut Ctx, at: Pos, why: String| {
        ctx.error(at, why);
        *ok = false;
    };
    if let Some(at) = fp.key_pos("node") {
        refuse(
            ctx,
            at,
            "write spec.forProvider.node (one template) or nodes (one on each), not both".into(),
        );
        return Vec::new();
    }
    let Value::Seq(items) = &n.value else {
        refuse(
            ctx,
            n.pos,
            format!(
                "spec.forProvider.nodes is a list of node names (e.g. [pve1, pve2]); found {}",
                n.value.describe()
            ),
        );
        return Vec::new();
    };
    if items.is_empty() || items.len() > MAX_NODES {
        refuse(
            ctx,
            n.pos,
            format!("spec.forProvider.nodes lists 1 to {MAX_NODES} nodes"),
        );
        return Vec::new();
    }
    let mut nodes: Vec<String> = Vec::new();
    for item in items {
        let checked = match &item.value {
            Value::Str(s) => super::names::check_node(s).map(|()| s.clone()),
            other => Err(format!(
                "a node name (e.g. pve1); found {}",
                other.describe()
            )),
        };
        match checked {
            Ok(s) if nodes.contains(&s) => {
                refuse(ctx, item.pos, format!("node {s} is listed twice"));
            }
            Ok(s) => nodes.push(s),
            Err(e) => refuse(ctx, item.pos, format!("spec.forProvider.nodes: {e}")),
        }
    }
    nodes
}

/// Where `key` is written in mapping `node`, if it is.
fn key_pos_in(node: &Node, key: &str) -> Option<Pos> {
    let Value::Map(entries) = &node.value else {
        return None;
    };
    (entries.iter())
        .find(|(k, _)| matches!(&k.value, Value::Str(s) if s == key))
        .map(|(k, _)| k.pos)
}

/// The version of template spec `spec` made from `image`: its content hash (what it asks for,
/// without names), its site (a template moved to another site is a new one, built there) and
/// the image's file name (which carries the image's checksum).
fn version_of(spec: &Spec, image: &ImageSpec) -> String {
    let mut h = FnvHasher::default();
    std::hash::Hasher::write(&mut h, super::content_hash(spec).as_bytes());
    std::hash::Hasher::write(&mut h, b"\0");
    std::hash::Hasher::write(&mut h, spec.site.as_bytes());
    std::hash::Hasher::write(&mut h, b"\0");
    std::hash::Hasher::write(&mut h, image.filename.as_bytes());
    let full = format!("{:016x}", std::hash::Hasher::finish(&h));
    full[..VERSION_DIGITS].to_string()
}

/// One version of a template, as guests find it.
struct Built {
    site: String,
    node: String,
    /// The version's spec name (`NAME-VERSION`).
    spec: String,
    /// Its VM's name.
    vm_name: String,
}

/// The version a guest on `node` is cloned from: the one built on its node, else the first
/// (a clone to another node, which PVE makes from shared storage only: pre-flight says so).
fn for_node<'b>(versions: &'b [Built], node: &str) -> Option<&'b Built> {
    versions
        .iter()
        .find(|b| b.node == node)
        .or_else(|| versions.first())
}

/// Names each template spec for its version (`NAME-VERSION`, its VM likewise), then checks
/// each guest's `image: {template: NAME}`: a template of the repository, of the guest's site,
/// for a VM. A good reference is given the template's current VM name and an implicit
/// `dependsOn` on it (the guest is cloned once the template is Ready, and removed before
/// it); a bad one holds the guest, with the closest name.
pub(crate) fn version_all(
    specs: &mut Specs,
    images: &[Arc<ImageSpec>],
    diags: &mut Vec<Diagnostic>,
) {
    let mut held = BTreeSet::new();
    let built = version_templates(specs, images, diags, &mut held);
    check_collisions(specs, &built, diags, &mut held);
    resolve_depends_on(specs, &built);
    resolve_references(specs, &built, diags, &mut held);
    if !held.is_empty() {
        specs.retain(|s| !held.contains(s.name.as_str()));
    }
}

/// Each template spec made one spec per node it is built on, named for its version; the
/// versions by template name. A template whose image is not one to import is held.
fn version_templates(
    specs: &mut Specs,
    images: &[Arc<ImageSpec>],
    diags: &mut Vec<Diagnostic>,
    held: &mut BTreeSet<String>,
) -> BTreeMap<String, Vec<Built>> {
    let by_image: BTreeMap<&str, &ImageSpec> = images
        .iter()
        .map(|i| (i.name.as_str(), i.as_ref()))
        .collect();
    // Template name -> each version's (site, node, versioned spec name, versioned VM name).
    let mut built: BTreeMap<String, Vec<Built>> = BTreeMap::new();
    let mut more: Vec<Spec> = Vec::new();
    for slot in specs.slots_mut() {
        let Some(t) = &slot.template else { continue };
        let Image::Managed(image) = slot.image() else {
            continue;
        };
        // The reference is checked before (`images::check_references`).
        let Some(image) = by_image.get(image.as_str()) else {
            held.insert(slot.name.to_string());
            continue;
        };
        // A disk to import: an ISO would make an empty disk booting an installer.
        if image.content != super::images::ImageContent::Import {
            let at = slot.vm().map_or(slot.pos, |vm| vm.image_pos);
            diags.push(
                Diagnostic::error(
                    &slot.file,
                    at,
                    format!(
                        "a {TEMPLATE_KIND} imports its image's disk: image {} is content {}, \
                         not import (a cloud image: qcow2, raw or vmdk)",
                        image.name,
                        image.content.as_str()
                    ),
                )
                .for_spec(Some(&slot.name)),
            );
            held.insert(slot.name.to_string());
            continue;
        }
        // One spec per node it is built on: each its own version (the node is in it).
        let nodes = match t.nodes.is_empty() {
            true => vec![slot.node.to_string()],
            false => t.nodes.clone(),
        };
        let name = t.name.clone();
        let mut versions: Vec<Spec> = Vec::with_capacity(nodes.len());
        for node in nodes {
            let mut spec = (**slot).clone();
            spec.node = node.into();
            spec.template = Some(Box::new(TemplateVersion {
                name: name.clone(),
                version: String::new(),
                nodes: Vec::new(),
            }));
            super::remember_hashes(&mut spec);
            let version = version_of(&spec, image);
            spec.name = format!("{name}-{version}").into();
            if let Some(vm) = spec.vm_mut() {
                vm.vm_name = format!("{}-{version}", vm.vm_name).into();
            }
            if let Some(t) = spec.template.as_mut() {
                t.version = version;
            }
            super::remember_hashes(&mut spec);
            built.entry(name.clone()).or_default().push(Built {
                site: spec.site.to_string(),
                node: spec.node.to_string(),
                spec: spec.name.to_string(),
                vm_name: spec.guest_name().to_string(),
            });
            versions.push(spec);
        }
        let mut versions = versions.into_iter();
        if let Some(first) = versions.next() {
            *slot = Arc::new(first);
        }
        more.extend(versions);
    }
    for spec in more {
        specs.push(spec);
    }
    built
}

/// A spec of the name of a template's current version: said as such (the template's VM keeps
/// the name; the other spec is held).
fn check_collisions(
    specs: &Specs,
    built: &BTreeMap<String, Vec<Built>>,
    diags: &mut Vec<Diagnostic>,
    held: &mut BTreeSet<String>,
) {
    for spec in specs.iter().filter(|s| s.template.is_none()) {
        if let Some((t, _)) = (built.iter()).find(|(_, vs)| vs.iter().any(|b| b.spec == spec.name))
        {
            diags.push(
                Diagnostic::error(
                    &spec.file,
                    spec.pos,
                    format!(
                        "{} is the name of {TEMPLATE_KIND} {t}'s current version (its spec and \
                         VM are named NAME-VERSION); rename this spec",
                        spec.name
                    ),
                )
                .for_spec(Some(&spec.name)),
            );
            held.insert(spec.name.to_string());
        }
    }
}

/// `dependsOn: [NAME]` of a template: its version on the spec's node (else the first).
fn resolve_depends_on(specs: &mut Specs, built: &BTreeMap<String, Vec<Built>>) {
    for slot in specs.slots_mut() {
        let names_a_template = slot.depends_on.iter().any(|d| built.contains_key(d));
        if !names_a_template || slot.template.is_some() {
            continue;
        }
        let mut spec = (**slot).clone();
        let mut deps: Vec<String> = Vec::new();
        for d in spec.depends_on.iter() {
            let d = built
                .get(d)
                .and_then(|vs| for_node(vs, &spec.node))
                .map_or(d, |b| &b.spec);
            if !deps.contains(d) {
                deps.push(d.clone());
            }
        }
        spec.depends_on = deps.into_boxed_slice();
        super::remember_hashes(&mut spec);
        *slot = Arc::new(spec);
    }
}

/// Each guest's `image: {template: NAME}`: a template of its site, for a VM, given the VM name
/// of the version on its node and an implicit `dependsOn` on it; else held, with why.
fn resolve_references(
    specs: &mut Specs,
    built: &BTreeMap<String, Vec<Built>>,
    diags: &mut Vec<Diagnostic>,
    held: &mut BTreeSet<String>,
) {
    for slot in specs.slots_mut() {
        let Image::Built { name, .. } = slot.image() else {
            continue;
        };
        let found = built.get(name).and_then(|vs| for_node(vs, &slot.node));
        let problem = match found.map(|b| &b.site) {
            Some(site) if *site != slot.site => Some(format!(
                "template {name} is on site {site}, and this guest is on site {}: a template \
                 serves the guests of its own site",
                slot.site
            )),
            Some(_) if slot.kind() != super::GuestKind::Qemu => Some(format!(
                "a container cannot be cloned from {TEMPLATE_KIND} {name} (a VM template)"
            )),
            Some(_) if slot.template.is_some() => Some(format!(
                "a {TEMPLATE_KIND} is built from a ProxmoxImage, not from template {name}"
            )),
            Some(_) => None,
            None => {
                let names: Vec<&str> = built.keys().map(String::as_str).collect();
                let hint = super::closest(name, names.iter().copied())
                    .map_or(String::new(), |n| format!(" (did you mean {n:?}?)"));
                Some(format!(
                    "no {TEMPLATE_KIND} is named {name:?}{hint}; the repository's templates: {}",
                    if names.is_empty() {
                        "none (a template with errors is not read)".to_string()
                    } else {
                        names.join(", ")
                    }
                ))
            }
        };
        if let Some(why) = problem {
            let at = slot.vm().map_or(slot.pos, |vm| vm.image_pos);
            diags.push(Diagnostic::error(&slot.file, at, why).for_spec(Some(&slot.name)));
            held.insert(slot.name.to_string());
            continue;
        }
        let Some(b) = found else {
            continue;
        };
        let mut spec = (**slot).clone();
        if let Some(vm) = spec.vm_mut() {
            vm.image = Image::Built {
                name: name.clone(),
                vm_name: b.vm_name.clone(),
            };
        }
        if !spec.depends_on.contains(&b.spec) {
            let mut deps = spec.depends_on.to_vec();
            deps.push(b.spec.clone());
            spec.depends_on = deps.into_boxed_slice();
        }
        super::remember_hashes(&mut spec);
        *slot = Arc::new(spec);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Image, PowerState, SpecSet, Specs, assemble_with_images};

    fn read(text: &str) -> (SpecSet, String) {
        let none = crate::sops::Keyring::unavailable(crate::config::NO_SOPS_IDENTITY);
        let parsed = super::super::parse_file_defaulted(
            "t.yaml",
            text.as_bytes(),
            super::super::Secrets::Decrypt(&none),
            &[],
            &super::super::sets::SpecBudget::unlimited(),
        );
        let mut specs = Specs::default();
        parsed.specs.into_iter().for_each(|s| specs.push(s));
        let set = assemble_with_images(specs, parsed.images, parsed.diagnostics);
        let text = (set.diagnostics.iter())
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        (set, text)
    }

    fn image(sum: char) -> String {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {{name: noble-cloud}}\n\
             spec:\n  forProvider:\n    site: lab\n    url: https://h/noble.qcow2\n    \
             checksum: sha256:{}\n",
            sum.to_string().repeat(64)
        )
    }

    fn template(extra: &str) -> String {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxTemplate\nmetadata: {{name: noble}}\n\
             spec:\n  forProvider:\n    site: lab\n    node: pve1\n    image: {{image: \
             noble-cloud}}\n    memory: 2Gi\n{extra}"
        )
    }

    const GUEST: &str = "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata: {name: web-1}\n\
         spec:\n  forProvider:\n    site: lab\n    node: pve1\n    image: {template: noble}\n";

    fn file(parts: &[&str]) -> String {
        parts.join("---\n")
    }

    #[test]
    fn a_template_is_named_for_its_version_and_its_guests_wait_for_it() {
        let (set, diags) = read(&file(&[&image('a'), &template(""), GUEST]));
        assert_eq!(diags, "");
        let t = set.specs.iter().find(|s| s.template.is_some()).unwrap();
        let version = &t.template.as_ref().unwrap().version;
        assert_eq!(version.len(), super::VERSION_DIGITS);
        assert_eq!(t.name, format!("noble-{version}"));
        assert_eq!(t.guest_name(), format!("noble-{version}"));
        assert_eq!(t.power_state, PowerState::Stopped);
        let guest = set.specs.iter().find(|s| s.name == "web-1").unwrap();
        assert_eq!(
            *guest.image(),
            Image::Built {
                name: "noble".into(),
                vm_name: t.name.to_string()
            }
        );
        assert_eq!(&*guest.depends_on, std::slice::from_ref(&t.name));
        // The guest's hash does not follow the template's version.
        let (set2, _) = read(&file(&[&image('b'), &template(""), GUEST]));
        let guest2 = set2.specs.iter().find(|s| s.name == "web-1").unwrap();
        assert_eq!(
            super::super::spec_hash(guest),
            super::super::spec_hash(guest2)
        );
        let t2 = set2.specs.iter().find(|s| s.template.is_some()).unwrap();
        assert_ne!(t2.name, t.name, "a new image version is a new template");
    }

    #[test]
    fn a_change_of_the_definition_is_a_new_version_and_the_same_one_is_the_same() {
        let (a, _) = read(&file(&[&image('a'), &template("")]));
        let (b, _) = read(&file(&[&image('a'), &template("")]));
        let (c, _) = read(&file(&[&image('a'), &template("    cpu: 4\n")]));
        let name = |s: &SpecSet| s.specs.iter().next().unwrap().name.clone();
        assert_eq!(name(&a), name(&b));
        assert_ne!(name(&a), name(&c));
    }

    #[test]
    fn what_a_template_cannot_be_is_refused_where_it_is_written() {
        let (set, diags) = read(&file(&[
            &image('a'),
            &template("    powerState: running\n    userData: \"#cloud-config\"\n"),
        ]));
        assert!(set.specs.is_empty());
        assert!(
            diags.contains("spec.forProvider.powerState is not for a ProxmoxTemplate"),
            "{diags}"
        );
        assert!(diags.contains("spec.forProvider.userData is not for a ProxmoxTemplate"));
        let from_vmid = template("").replace("{image: noble-cloud}", "\"9000\"");
        let (_, diags) = read(&file(&[&image('a'), &from_vmid]));
        assert!(
            diags.contains("is built from a ProxmoxImage of the repository"),
            "{diags}"
        );
        let policy = template("").replace("spec:\n", "spec:\n  imagePolicy: Recreate\n");
        let (_, diags) = read(&file(&[&image('a'), &policy]));
        assert!(
            diags.contains("spec.imagePolicy is not for a ProxmoxTemplate"),
            "{diags}"
        );
        let long = template("").replace("name: noble}", &format!("name: {}}}", "n".repeat(55)));
        let (_, diags) = read(&file(&[&image('a'), &long]));
        assert!(diags.contains("at most 54 characters"), "{diags}");
    }

    #[test]
    fn a_guest_naming_no_template_is_held_with_the_closest_name() {
        let (set, diags) = read(&file(&[
            &image('a'),
            &template(""),
            &GUEST.replace("{template: noble}", "{template: nobel}"),
        ]));
        assert!(set.specs.iter().all(|s| s.name != "web-1"));
        assert!(
            diags.contains("no ProxmoxTemplate is named \"nobel\" (did you mean \"noble\"?)"),
            "{diags}"
        );
        let (_, diags) = read(&file(&[
            &image('a'),
            &template(""),
            &GUEST.replace("site: lab", "site: other"),
        ]));
        assert!(
            diags.contains("a template serves the guests of its own site"),
            "{diags}"
        );
    }

    #[test]
    fn a_template_on_several_nodes_is_a_version_on_each_and_guests_take_their_node_s() {
        let on_two = template("").replace("node: pve1", "nodes: [pve1, pve2]");
        let guest2 = GUEST
            .replace("web-1", "web-2")
            .replace("node: pve1", "node: pve2");
        let (set, diags) = read(&file(&[&image('a'), &on_two, GUEST, &guest2]));
        assert_eq!(diags, "");
        let versions: Vec<(&str, &str)> = (set.specs.iter())
            .filter(|s| s.template.is_some())
            .map(|s| (s.name.as_str(), s.node.as_str()))
            .collect();
        assert_eq!(versions.len(), 2, "{versions:?}");
        assert_ne!(versions[0].0, versions[1].0);
        for (guest, node) in [("web-1", "pve1"), ("web-2", "pve2")] {
            let g = set.specs.iter().find(|s| s.name == guest).unwrap();
            let (version, _) = versions.iter().find(|(_, n)| *n == node).unwrap();
            assert_eq!(&*g.depends_on, [version.to_string()], "{guest}");
        }
        // A node added leaves the other's version as it is.
        let on_three = template("").replace("node: pve1", "nodes: [pve1, pve2, pve3]");
        let (set3, _) = read(&file(&[&image('a'), &on_three]));
        assert!(set3.specs.iter().any(|s| s.name == versions[0].0));
        assert_eq!(set3.specs.iter().count(), 3);
        // node and nodes together, a node twice: refused.
        let both = template("").replace("node: pve1", "node: pve1\n    nodes: [pve2]");
        let (_, diags) = read(&file(&[&image('a'), &both]));
        assert!(diags.contains("not both"), "{diags}");
        let twice = template("").replace("node: pve1", "nodes: [pve1, pve1]");
        let (_, diags) = read(&file(&[&image('a'), &twice]));
        assert!(diags.contains("node pve1 is listed twice"), "{diags}");
        // A guest spec cannot say nodes.
        let (_, diags) = read(&file(&[
            &image('a'),
            &template(""),
            &GUEST.replace("node: pve1", "nodes: [pve1]"),
        ]));
        assert!(diags.contains("nodes"), "{diags}");
    }

    #[test]
    fn a_version_s_name_gives_its_template() {
        assert_eq!(super::template_of_name("noble-0123abcd"), Some("noble"));
        assert_eq!(
            super::template_of_name("my-noble-0123abcd"),
            Some("my-noble")
        );
        assert_eq!(super::template_of_name("noble-0123abc"), None);
        assert_eq!(super::template_of_name("noble-0123ABCD"), None);
        assert_eq!(super::template_of_name("-0123abcd"), None);
        assert_eq!(super::template_of_name("web-1"), None);
    }

    #[test]
    fn a_template_whose_image_is_gone_is_held_and_so_are_its_guests() {
        let (set, diags) = read(&file(&[&template(""), GUEST]));
        assert!(set.specs.is_empty(), "{:?}", set.specs);
        assert!(
            diags.contains("no ProxmoxImage is named \"noble-cloud\""),
            "{diags}"
        );
        // The template's records (`noble-VERSION`) are kept: an error names the template.
        assert!(
            set.diagnostics
                .iter()
                .any(|d| d.spec.as_deref() == Some("noble"))
        );
    }
}
