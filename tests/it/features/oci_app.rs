//! What an application container runs (`entrypoint`, `env`, a NIC's `hostManaged`: PVE 9.1)
//! against fakepve, whose harness models pve-container's `restore_oci_archive`: a container made
//! from an OCI image gets the image's entrypoint, environment and host-managed NICs over what
//! the create asked for. The converge after the create writes the spec's before the first
//! start; a site older than 9.1 is refused before anything is sent.

use serde_json::{Value, json};

use crate::common;

use common::engine::{Workspace, next_seq, writes_since};
use common::{FakePve, Scenario};

const NGINX: &str = "docker.io/library/nginx:1.27";
/// The image's environment, as its config says it.
const IMAGE_ENV: [&str; 2] = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
    "NGINX_VERSION=1.27.0",
];

/// A container spec made from OCI image `image`, with `extra` under `forProvider`.
pub(crate) fn app_spec_from(name: &str, image: &str, extra: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: {name}\nspec:\n  \
         forProvider:\n    site: lab\n    node: pve1\n    template: {{oci: \"{image}\"}}\n{extra}"
    )
}

fn app_spec(name: &str, extra: &str) -> String {
    app_spec_from(name, NGINX, extra)
}

/// A site of PVE `version` whose registry holds `images` (the harness's `oci_image`).
pub(crate) fn pve_with(version: &str, images: &[Value]) -> FakePve {
    let mut pve = Scenario::default().set("version", json!(version)).start();
    for image in images {
        pve.call("oci_image", image.clone()).expect("oci_image");
    }
    pve
}

/// A cycle that succeeds and writes nothing (`why` says what makes it so).
pub(crate) fn idle_run(pve: &mut FakePve, ws: &Workspace, why: &str) {
    let before = next_seq(pve);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(writes_since(pve, before), Vec::<String>::new(), "{why}");
}

/// A cycle that must send nothing: the message of the spec's condition `kind` after it.
pub(crate) fn nothing_sent(pve: &mut FakePve, ws: &Workspace, name: &str, kind: &str) -> String {
    let before = next_seq(pve);
    let (_, out) = ws.run_once();
    assert_eq!(writes_since(pve, before), Vec::<String>::new(), "{out}");
    ws.condition(name, kind).2
}

fn pve_at(version: &str) -> FakePve {
    let image = json!({
        "reference": NGINX,
        "entrypoint": ["/docker-entrypoint.sh"],
        "cmd": ["nginx", "-g", "daemon off;"],
        "env": IMAGE_ENV,
    });
    pve_with(version, &[image])
}

/// The container whose hostname is `name`.
pub(crate) fn ct_named(pve: &mut FakePve, name: &str) -> Value {
    (pve.cts().into_iter())
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// The spec's entrypoint and variables replace the image's before the container first starts;
/// the image's other variables and its host-managed NIC are kept; a spec that names none
/// keeps all of the image's; the next cycle writes nothing.
#[test]
fn the_spec_s_entrypoint_and_environment_are_the_container_s_from_its_first_start() {
    let mut pve = pve_at("9.1.2");
    let ws = Workspace::new(&pve);
    let extra = "    entrypoint: \"/usr/sbin/nginx -g 'daemon off;'\"\n    env: {NGINX_PORT: \
                 \"8080\", NGINX_VERSION: \"1.27.1\"}\n    networks:\n      - {name: eth0, \
                 bridge: vmbr0, ip: dhcp}\n";
    ws.commit_specs(&[
        ("app.yaml", app_spec("web-app", extra)),
        ("plain.yaml", app_spec("web-plain", "")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let app = ct_named(&mut pve, "web-app");
    let cfg = &app["config"];
    assert_eq!(cfg["entrypoint"], "/usr/sbin/nginx -g 'daemon off;'");
    assert_eq!(
        cfg["env"],
        format!("{}\0NGINX_VERSION=1.27.1\0NGINX_PORT=8080", IMAGE_ENV[0]),
        "the image's PATH kept, its NGINX_VERSION replaced, NGINX_PORT added"
    );
    let net0 = cfg["net0"].as_str().unwrap_or_default();
    assert!(
        net0.contains("host-managed=1"),
        "PVE's default kept: {net0}"
    );
    assert_eq!(app["status"], "running");
    assert_eq!(app["pending"], json!({}), "applied before the first start");
    // The image's, untouched, where the spec names none.
    let plain = ct_named(&mut pve, "web-plain");
    assert_eq!(
        plain["config"]["entrypoint"],
        "/docker-entrypoint.sh nginx -g 'daemon off;'"
    );
    assert_eq!(plain["config"]["env"], IMAGE_ENV.join("\0"));
    let (status, _, message) = ws.condition("web-app", "Ready");
    assert_eq!(status, "True", "{message}");
    idle_run(&mut pve, &ws, "idle");
}

/// `hostManaged: false` is the container's though PVE turns it on for an application image; a
/// changed variable on a running container waits for its next start, which rebootPolicy
/// IfNeeded gives it; `plan` shows the environment as variables, whatever the guest's config
/// holds.
#[test]
fn host_managed_false_and_a_changed_variable_are_applied() {
    let mut pve = pve_at("9.1.2");
    let ws = Workspace::new(&pve);
    let spec = |port: &str| {
        app_spec(
            "web-app",
            &format!(
                "    rebootPolicy: IfNeeded\n    env: {{NGINX_PORT: \"{port}\"}}\n    \
                 networks:\n      - {{name: eth0, bridge: vmbr0, ip: dhcp, hostManaged: false}}\n"
            ),
        )
    };
    ws.commit_specs(&[("app.yaml", spec("8080"))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let app = ct_named(&mut pve, "web-app");
    let vmid = app["vmid"].as_u64().expect("vmid") as u32;
    let net0 = app["config"]["net0"].as_str().unwrap_or_default();
    assert!(net0.contains("host-managed=0"), "{net0}");

    // A hostile variable PVE's API takes (a bidi override, a line separator) in the guest's
    // config: `plan` shows it escaped, on one line.
    let hostile = format!("{}\0EVIL=\u{202e}red\u{2028}forged line", IMAGE_ENV[0]);
    pve.set_ct(vmid, json!({"config": {"env": hostile}}));
    ws.commit_specs(&[("app.yaml", spec("9090"))]);
    let plan = ws.proxsync(&["plan"]);
    let text = common::engine::text(&plan);
    let line = (text.lines())
        .find(|l| l.contains("web-app") && l.contains("env"))
        .unwrap_or_else(|| panic!("no env change: {text}"));
    assert!(
        line.contains(&format!("{}, EVIL=?red forged line", IMAGE_ENV[0]))
            && line.contains("NGINX_PORT=9090"),
        "{line}"
    );
    assert!(
        !text.contains('\u{202e}') && !text.contains('\u{2028}') && !text.contains('\0'),
        "{text:?}"
    );
    assert!(!text.lines().any(|l| l.starts_with("forged")), "{text}");

    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let app = pve.ct(vmid);
    assert_eq!(
        app["config"]["env"],
        format!("{hostile}\0NGINX_PORT=9090"),
        "the spec's variable set, the others kept"
    );
    assert_eq!(app["pending"], json!({}), "restarted to apply it");
    assert_eq!(app["status"], "running");

    // A variable PVE's API refuses (an escape sequence, a line break: a hand-edited config):
    // sending the env back would be a 400 every cycle. Nothing is sent; the status names the
    // variable, not its value.
    let refused = format!("{}\0EVIL=\u{1b}[31mred\nforged", IMAGE_ENV[0]);
    pve.set_ct(vmid, json!({"config": {"env": refused}}));
    ws.commit_specs(&[("app.yaml", spec("7070"))]);
    let message = nothing_sent(&mut pve, &ws, "web-app", "Stalled");
    assert!(
        message.contains("env holds variable \"EVIL\", which PVE's API refuses")
            && !message.contains("[31m"),
        "{message}"
    );
}

/// On PVE 9.0 a spec naming the options is refused before anything is sent: its create, and
/// the converge of a container it already has.
#[test]
fn a_site_older_than_9_1_refuses_them_before_anything_is_sent() {
    let mut pve = Scenario::default()
        .set("version", json!("9.0.10"))
        .file(
            "local",
            "debian-12-standard_12.7-1_amd64.tar.zst",
            126_000_000,
            "vztmpl",
        )
        .start();
    let archive = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";
    let ws = Workspace::new(&pve);
    let ct_spec = |extra: &str| {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: ct-01\nspec:\n  \
             forProvider:\n    site: lab\n    node: pve1\n    template: \"{archive}\"\n{extra}"
        )
    };
    ws.commit_specs(&[("a.yaml", ct_spec("    entrypoint: /sbin/init\n"))]);
    let message = nothing_sent(&mut pve, &ws, "ct-01", "Stalled");
    assert!(
        message.contains("entrypoint is an option of Proxmox VE 9.1")
            && message.contains("this site runs 9.0.10"),
        "{message}"
    );

    ws.commit_specs(&[("a.yaml", ct_spec(""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    ws.commit_specs(&[("a.yaml", ct_spec("    env: {A: b}\n"))]);
    let message = nothing_sent(&mut pve, &ws, "ct-01", "Stalled");
    assert!(
        message.contains("env is an option of Proxmox VE 9.1"),
        "{message}"
    );
}

/// `validate` asks a 9.0 site's release and refuses, each at its line, an OCI image and the
/// container options it does not have; a 9.1 site takes both.
#[test]
fn validate_says_where_a_9_0_site_refuses_them() {
    let env_spec = "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: ct-env\n\
                    spec:\n  forProvider:\n    site: lab\n    node: pve1\n    template: \
                    \"local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\"\n    env: {A: b}\n";
    for (version, refused) in [("9.0.10", true), ("9.1.2", false)] {
        let pve = Scenario::default().set("version", json!(version)).start();
        let ws = Workspace::new(&pve);
        ws.commit_specs(&[
            ("oci.yaml", app_spec("web-oci", "")),
            ("env.yaml", env_spec.to_string()),
        ]);
        let out = ws.proxsync(&["validate", ws.path("repo").to_str().unwrap()]);
        let text = common::engine::text(&out);
        assert_eq!(out.status.success(), !refused, "{version}: {text}");
        if refused {
            assert!(
                text.contains(
                    "oci.yaml:9:15: error: template {oci: docker.io/library/nginx:1.27} is an \
                     OCI image"
                ) && text.contains("env.yaml:10:5: error: env is an option of Proxmox VE 9.1"),
                "{text}"
            );
        }
    }
}
