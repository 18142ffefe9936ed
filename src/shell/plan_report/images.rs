//! What `plan` says of the `ProxmoxImage`s: each image whose volume a node that needs it lacks
//! (`+ image`: PVE will download it), or whose older version is there (`~ image A -> B`: the
//! guests made from it keep what they were made from). One storage listing per node that
//! needs an image; an image that is there on every such node says nothing.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::engine::PlanView;
use crate::spec::images::{ImageSpec, VERSION_DIGITS};
use crate::spec::{Image, SpecSet};

/// One image the run would download.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ImageLine {
    pub image: String,
    /// The version it would download (the checksum's first 12 hex digits).
    pub version: String,
    /// The version found on the storage, when another one is there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub volume: String,
    /// The nodes it would be downloaded to.
    pub nodes: Vec<String>,
    /// The guests made from it: those without a guest are created from this version; the
    /// others keep what they were made from.
    pub guests: Vec<String>,
    /// The line `plan` prints.
    pub text: String,
}

/// The versions of `image` other than its own in a storage listing: the file names
/// `NAME-<12 hex>.EXT` of its content type.
fn other_versions(image: &ImageSpec, volids: &[String]) -> BTreeSet<String> {
    let prefix = format!(
        "{}:{}/{}-",
        image.storage,
        image.content.as_str(),
        image.name
    );
    (volids.iter())
        .filter_map(|v| v.strip_prefix(&prefix))
        .filter_map(|rest| {
            rest.get(..VERSION_DIGITS)
                .filter(|_| rest.len() > VERSION_DIGITS)
        })
        .filter(|hex| {
            hex.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        })
        .filter(|hex| *hex != image.version())
        .map(str::to_string)
        .collect()
}

/// The images the run would download, and the (image, node) pairs it would download to (a
/// create of a guest made from one is then no refusal: the volume comes first). A listing
/// that cannot be read is an error.
// Long because: per image, its nodes' listings read once, then the line with the nodes that
// lack it, the guests made from it and those a new version rebuilds, in the order printed.
pub(crate) async fn image_lines(
    view: &PlanView,
    specs: &SpecSet,
    errors: &mut Vec<String>,
) -> (Vec<ImageLine>, BTreeSet<(String, String)>) {
    let needed = crate::image_sync::needed_on(&specs.images, specs.specs.iter());
    let mut lines = Vec::new();
    let mut coming = BTreeSet::new();
    // Per (site, node, storage, content): the volume IDs listed, read once.
    let mut listed: BTreeMap<(String, String, String, String), Vec<String>> = BTreeMap::new();
    for image in &specs.images {
        let Some(site) = view.sites.get(&image.site) else {
            continue;
        };
        let nodes = needed.get(image.name.as_str()).cloned().unwrap_or_default();
        let volume = image.volume_id();
        let mut missing = Vec::new();
        let mut older = BTreeSet::new();
        for node in nodes {
            let key = (
                image.site.clone(),
                node.to_string(),
                image.storage.clone(),
                image.content.as_str().to_string(),
            );
            if !listed.contains_key(&key) {
                match (site.client)
                    .storage_content(node, &image.storage, Some(image.content.as_str()))
                    .await
                {
                    Ok(v) => {
                        listed.insert(key.clone(), v.into_iter().map(|v| v.volid).collect());
                    }
                    Err(e) => {
                        errors.push(format!(
                            "image {}: cannot list {} on {node}: {e}",
                            image.name, image.storage
                        ));
                        continue;
                    }
                }
            }
            let volids = listed.get(&key).map(Vec::as_slice).unwrap_or_default();
            if !volids.contains(&volume) {
                missing.push(node.to_string());
                older.extend(other_versions(image, volids));
                coming.insert((image.name.clone(), node.to_string()));
            }
        }
        if missing.is_empty() {
            continue;
        }
        let guests: Vec<String> = (specs.specs.iter())
            .filter(|s| matches!(s.image(), Image::Managed(n) if *n == image.name))
            .map(|s| s.name.to_string())
            .collect();
        let from = older.iter().next_back().cloned();
        let head = match &from {
            Some(old) => format!("~ image {}: {old} -> {}", image.name, image.version()),
            None => format!("+ image {} {}", image.name, image.version()),
        };
        let made = match (guests.is_empty(), &from) {
            (true, _) => String::new(),
            (false, Some(_)) => {
                let rebuilt: Vec<&str> = (specs.specs.iter())
                    .filter(|s| guests.iter().any(|g| g == s.name.as_str()))
                    .filter(|s| s.image_policy == crate::spec::ImagePolicy::Recreate)
                    .map(|s| s.name.as_str())
                    .collect();
                let mut text = format!(
                    "; new guests made from it: {} (a guest that exists keeps its version",
                    guests.join(", ")
                );
                if !rebuilt.is_empty() {
                    text.push_str(&format!(
                        ", but for those rebuilt once it is there under imagePolicy: \
                         Recreate: {}",
                        rebuilt.join(", ")
                    ));
                }
                text.push(')');
                text
            }
            (false, None) => format!("; guests made from it: {}", guests.join(", ")),
        };
        let text = format!(
            "{head}: PVE downloads {volume} on {} and checks its {}{made}",
            missing.join(", "),
            image.checksum.algorithm.as_str()
        );
        lines.push(ImageLine {
            image: image.name.clone(),
            version: image.version().to_string(),
            from,
            volume,
            nodes: missing,
            guests,
            text,
        });
    }
    (lines, coming)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_version_is_a_file_of_the_same_name_and_another_checksum() {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {{name: noble}}\nspec:\n  \
             forProvider:\n    site: lab\n    url: https://h/x.qcow2\n    checksum: sha256:{}\n",
            "a".repeat(64)
        );
        let (_, diags) = crate::spec::parse_file("i.yaml", yaml.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        let set = crate::spec::load_paths(&[]);
        assert!(set.images.is_empty());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("i.yaml"), &yaml).unwrap();
        let set = crate::spec::load_paths(&[dir.path().to_path_buf()]);
        let image = &set.images[0];
        let listed: Vec<String> = [
            "local:import/noble-bbbbbbbbbbbb.qcow2",
            "local:import/noble-aaaaaaaaaaaa.qcow2",
            "local:import/noble-cloud-cccccccccccc.qcow2",
            "local:import/noble-DDDDDDDDDDDD.qcow2",
            "local:iso/noble-eeeeeeeeeeee.iso",
            "local:import/noble-ffff.qcow2",
        ]
        .map(str::to_string)
        .into();
        assert_eq!(
            other_versions(image, &listed)
                .into_iter()
                .collect::<Vec<_>>(),
            ["bbbbbbbbbbbb"]
        );
    }
}
