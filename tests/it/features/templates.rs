//! `kind: ProxmoxTemplate` against fakepve: from one commit holding an image, a template and a
//! set of guests, PVE downloads the image, the template is built from it (`import-from`, then
//! `POST .../template`) and the guests are cloned from it; a new image version builds a new
//! template beside the old one, which goes once it is no longer the current one, and leaves
//! the guests alone unless they say `imagePolicy: Recreate`.

use crate::common;

use super::images::{Setup, image_doc, setup};
use common::fakepve::RecordedRequest;
use serde_json::Value;

/// A `ProxmoxTemplate` `name` built from image `noble-cloud` on pve1, `extra` lines in
/// forProvider.
pub(crate) fn template_doc_named(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxTemplate\nmetadata: {{name: {name}}}\nspec:\n  \
         forProvider:\n    site: lab\n    node: pve1\n    image: {{image: noble-cloud}}\n    \
         memory: 1Gi\n    disk: 8Gi\n    cloudInit: {{user: ops}}\n{extra}"
    )
}

/// Template `noble`.
pub(crate) fn template_doc(extra: &str) -> String {
    template_doc_named("noble", extra)
}

/// A set `web` of `replicas` on pve1 cloned from template `noble` under `policy`.
pub(crate) fn template_set(replicas: u32, policy: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata: {{name: web}}\nspec:\n  \
         replicas: {replicas}\n  placement: {{nodes: [pve1]}}\n  maxUnavailable: 2\n  \
         template:\n    imagePolicy: {policy}\n    forProvider:\n      site: lab\n      \
         image: {{template: noble}}\n      memory: 1Gi\n      disk: 8Gi\n"
    )
}

/// A lone guest `name` on `node` cloned from template `noble`, `extra` lines in forProvider.
pub(crate) fn template_guest(name: &str, node: &str, extra: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata: {{name: {name}}}\nspec:\n  \
         forProvider:\n    site: lab\n    node: {node}\n    image: {{template: noble}}\n    \
         memory: 1Gi\n    disk: 8Gi\n{extra}"
    )
}

/// The template spec's name (`noble-VERSION`) in the current commit.
pub(crate) fn version_name(s: &Setup) -> String {
    let t = s.specs.specs.iter().find(|s| s.template.is_some());
    t.expect("a template spec").name.to_string()
}

/// The VM PVE lists under `name`, if any.
pub(crate) fn vm_named(s: &mut Setup, name: &str) -> Option<Value> {
    s.pve.vms().into_iter().find(|v| v["name"] == name)
}

/// The POSTs whose path ends in `suffix`.
pub(crate) fn posts<'a>(requests: &'a [RecordedRequest], suffix: &str) -> Vec<&'a RecordedRequest> {
    (requests.iter())
        .filter(|r| r.method == "POST" && r.path.ends_with(suffix))
        .collect()
}

/// The paths of the VM deletes.
pub(crate) fn qemu_deletes(requests: &[RecordedRequest]) -> Vec<String> {
    (requests.iter())
        .filter(|r| r.method == "DELETE" && r.path.contains("/qemu/"))
        .map(|r| r.path.clone())
        .collect()
}

pub(crate) async fn cycles(s: &mut Setup, n: usize) {
    for _ in 0..n {
        s.cycle().await;
    }
}

/// The image, the template and a set of `members` guests cloned from it under `policy`,
/// committed at once and built over two cycles.
pub(crate) async fn built_with_set(members: u32, policy: &str) -> Setup {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web.yaml", template_set(members, policy)),
    ]);
    cycles(&mut s, 2).await;
    s
}

/// The first image's document (the checksum the harness serves).
pub(crate) fn first_image(s: &Setup) -> String {
    image_doc(&s.specs.images[0].checksum.hex)
}

/// The case: one commit, no file placed by hand. The image is downloaded, the
/// template built from it and made a template, and the 20 guests cloned from it; a new image
/// version builds a new template, deletes the old one, and leaves the guests alone (Keep);
/// under Recreate they are rebuilt two at a time from the new template.
#[tokio::test]
async fn one_commit_builds_the_template_and_its_guests_and_a_new_image_rolls_them() {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web.yaml", template_set(20, "Keep")),
    ]);
    let old = version_name(&s);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 2).await;
    let requests = s.pve.requests_since(before);
    assert_eq!(s.downloads().len(), 1, "the image downloaded once");
    let template = vm_named(&mut s, &old).expect("the template is built");
    assert_eq!(template["template"], true, "{template}");
    let tvmid = template["vmid"].as_u64().unwrap();
    let creates = posts(&requests, "/qemu");
    assert_eq!(creates.len(), 1, "one create: the template's");
    assert!(
        creates[0].body.contains("import-from"),
        "{}",
        creates[0].body
    );
    assert_eq!(posts(&requests, "/template").len(), 1);
    let clones = posts(&requests, &format!("/qemu/{tvmid}/clone"));
    assert_eq!(clones.len(), 20, "every guest cloned from it");
    // The template is made a template before the first clone.
    assert!(posts(&requests, "/template")[0].seq < clones[0].seq);
    let version = old.rsplit_once('-').unwrap().1;
    let message = s.ready_message("web-01");
    assert!(
        message.starts_with("True")
            && message.contains(&format!("made from template noble version {version}")),
        "{message}"
    );
    assert!(s.ready_message(&old).starts_with("True"));
    // Its status file says what it is (and `proxsync inventory` leaves it out).
    let text = std::fs::read_to_string(s.ws.path(&format!("status/{old}.yaml"))).unwrap();
    assert!(text.contains("kind: ProxmoxTemplate"), "{text}");

    // An idle cycle sends nothing.
    let before = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    let writes = common::engine::writes_since(&mut s.pve, before);
    assert!(writes.is_empty(), "{writes:?}");

    // A new image version: a new template beside the old, the guests kept as they are.
    let doc = s.new_version();
    s.recommit(&[
        ("images.yaml", doc.clone()),
        ("template.yaml", template_doc("")),
        ("web.yaml", template_set(20, "Keep")),
    ]);
    let new = version_name(&s);
    assert_ne!(new, old);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 2).await;
    let requests = s.pve.requests_since(before);
    let Some(new_template) = vm_named(&mut s, &new) else {
        panic!(
            "the new template is built: {} {:?}",
            s.ready_message(&new),
            requests
                .iter()
                .map(|r| format!("{} {}", r.method, r.path))
                .collect::<Vec<_>>()
        );
    };
    assert_eq!(new_template["template"], true);
    let new_tvmid = new_template["vmid"].as_u64().unwrap();
    assert!(
        posts(&requests, "/clone").is_empty(),
        "Keep clones nothing: {requests:?}"
    );
    let deletes: Vec<&RecordedRequest> = (requests.iter())
        .filter(|r| r.method == "DELETE" && r.path.contains("/qemu/"))
        .collect();
    assert_eq!(deletes.len(), 1, "the old template only: {deletes:?}");
    assert!(deletes[0].path.contains(&format!("/qemu/{tvmid}")));
    assert!(vm_named(&mut s, &old).is_none());
    let message = s.ready_message("web-01");
    assert!(
        message.starts_with("True")
            && message.contains(&format!("version {version}, an older version"))
            && message.contains("imagePolicy: Keep"),
        "{message}"
    );

    // Recreate: rolled two at a time from the new template.
    s.recommit(&[
        ("images.yaml", doc),
        ("template.yaml", template_doc("")),
        ("web.yaml", template_set(20, "Recreate")),
    ]);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 3).await;
    let requests = s.pve.requests_since(before);
    let deletes: Vec<u64> = (requests.iter())
        .filter(|r| r.method == "DELETE" && r.path.contains("/qemu/"))
        .map(|r| r.seq)
        .collect();
    let clones = posts(&requests, &format!("/qemu/{new_tvmid}/clone"));
    assert_eq!(deletes.len(), 20, "every member rebuilt once");
    assert_eq!(clones.len(), 20, "from the new template");
    assert!(deletes[2] > clones[1].seq, "two at a time");
    let new_version = new.rsplit_once('-').unwrap().1;
    for i in [1, 20] {
        let message = s.ready_message(&format!("web-{i:02}"));
        assert!(
            message.starts_with("True")
                && message.contains(&format!("version {new_version}"))
                && !message.contains("older"),
            "{message}"
        );
    }
}

/// `plan` on the first commit: the template's create, the guests waiting for it.
#[tokio::test]
async fn plan_shows_the_template_built_and_its_guests_waiting_for_it() {
    let mut s = setup(None, &[]);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web.yaml", template_set(2, "Keep")),
    ]);
    let name = version_name(&s);
    // The in-process engine holds the state database: `plan` reads it.
    let Setup {
        pve, ws, engine, ..
    } = s;
    drop(engine);
    let out = ws.proxsync(&["plan"]);
    drop(pve);
    let text = common::engine::text(&out);
    let version = name.rsplit_once('-').unwrap().1;
    assert!(
        text.contains(&format!(
            "+ create  {name}: new template noble (version {version}) on lab/pve1 from image \
             noble-cloud"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "! web-01: waits for {name} to be Ready (dependsOn)"
        )),
        "{text}"
    );
}

/// `nodes: [pve1, pve2]`: a template (and version) built on each node, from the image
/// downloaded to each; every guest cloned from its own node's template (local storage).
#[tokio::test]
async fn a_template_on_two_nodes_is_built_on_each_and_guests_clone_their_node_s() {
    let mut s = setup(None, &[]);
    let set = template_set(4, "Keep").replace("[pve1]", "[pve1, pve2]");
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        (
            "template.yaml",
            template_doc("").replace("node: pve1", "nodes: [pve1, pve2]"),
        ),
        ("web.yaml", set),
    ]);
    let before = common::engine::next_seq(&mut s.pve);
    cycles(&mut s, 2).await;
    let requests = s.pve.requests_since(before);
    let templates: Vec<Value> = (s.pve.vms().into_iter())
        .filter(|v| {
            v["template"] == true && v["name"].as_str().is_some_and(|n| n.starts_with("noble-"))
        })
        .collect();
    let on = |node: &str| {
        (templates.iter())
            .find(|t| t["node"] == node)
            .and_then(|t| t["vmid"].as_u64())
            .unwrap_or_else(|| panic!("a template on {node}: {templates:?}"))
    };
    let (t1, t2) = (on("pve1"), on("pve2"));
    assert_eq!(templates.len(), 2);
    for (vmid, clones) in [(t1, 2), (t2, 2)] {
        let made = posts(&requests, &format!("/qemu/{vmid}/clone"));
        assert_eq!(made.len(), clones, "from template {vmid}: {made:?}");
        assert!(made.iter().all(|r| !r.body.contains("target")), "{made:?}");
    }
    for i in 1..=4 {
        assert!(s.ready_message(&format!("web-{i:02}")).starts_with("True"));
    }
}

/// The image a template is built from is removed from the repository while the template (and
/// a guest cloned from it) still name it: the template and the guest are held with the error,
/// nothing is deleted, and the image's version is kept past the grace period (a spec with
/// errors may name it), the summary saying why.
#[tokio::test]
async fn a_removed_image_a_template_still_names_is_kept_and_said() {
    let mut s = setup(None, &[]);
    let now = super::images::manual_clock(&mut s.engine);
    s.recommit(&[
        ("images.yaml", first_image(&s)),
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
    ]);
    let volume = s.specs.images[0].volume_id();
    let name = version_name(&s);
    cycles(&mut s, 2).await;
    assert!(s.ready_message("web-1").starts_with("True"));
    // Another spec stays valid: the set is not empty (an empty one prunes nothing anyway).
    let other = common::engine::spec("other-1", "pve1", "debian-12-template", "");
    s.recommit(&[
        ("template.yaml", template_doc("")),
        ("web-1.yaml", template_guest("web-1", "pve1", "")),
        ("other-1.yaml", other),
    ]);
    let messages: Vec<String> = (s.specs.diagnostics.iter())
        .map(ToString::to_string)
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("no ProxmoxImage is named \"noble-cloud\"")),
        "{messages:?}"
    );
    let before = common::engine::next_seq(&mut s.pve);
    s.cycle().await;
    super::images::advance(&now, std::time::Duration::from_secs(3600));
    s.cycle().await;
    let requests = s.pve.requests_since(before);
    assert!(
        !requests.iter().any(|r| r.method == "DELETE"),
        "nothing deleted: {requests:?}"
    );
    assert!(vm_named(&mut s, &name).is_some() && vm_named(&mut s, "web-1").is_some());
    let listed = (s.pve.client())
        .storage_content("pve1", "local", Some("import"))
        .await
        .expect("the listing");
    assert!(
        listed.iter().any(|v| v.volid == volume),
        "the image's file is kept"
    );
    let text = std::fs::read_to_string(s.ws.path("status/_summary.yaml")).unwrap();
    assert!(
        text.contains("has errors (a spec with errors may name this image)"),
        "{text}"
    );
}

/// A request to the fake as a person would send it (the test token): `method path` with a
/// form body; the HTTP status and body.
pub(crate) fn api(s: &Setup, method: &str, path: &str, form: &[(&str, &str)]) -> (u16, String) {
    let ca = s.pve.ca_pem();
    let url = s.pve.api_url(path);
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let form: Vec<(String, String)> = (form.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = common::fakepve::verified_client(&ca);
        rt.block_on(async {
            let r = client
                .request(method, url)
                .header(
                    "Authorization",
                    common::fakepve::token_header(
                        common::fakepve::TOKEN_ID,
                        common::fakepve::TOKEN_SECRET,
                    ),
                )
                .form(&form)
                .send()
                .await
                .expect("the fake answers");
            let status = r.status().as_u16();
            (status, r.text().await.unwrap_or_default())
        })
    })
    .join()
    .unwrap()
}
