//! Attacks on application containers' `entrypoint`, `env` and `hostManaged` (PVE 9.1) against
//! fakepve's model of pve-container's `restore_oci_archive`: hostile images, idempotence of
//! every cycle after the create, and a spec that gains or loses the fields.

use serde_json::{Value, json};

use crate::common;

use common::engine::{Workspace, next_seq, writes_since};
use common::{FakePve, Scenario};

const NGINX: &str = "docker.io/library/nginx:1.27";

fn app_spec(name: &str, image: &str, extra: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: {name}\nspec:\n  \
         forProvider:\n    site: lab\n    node: pve1\n    template: {{oci: \"{image}\"}}\n{extra}"
    )
}

fn pve_with(images: &[Value]) -> FakePve {
    let mut pve = Scenario::default().set("version", json!("9.1.2")).start();
    for image in images {
        pve.call("oci_image", image.clone()).expect("oci_image");
    }
    pve
}

fn ct_named(pve: &mut FakePve, name: &str) -> Value {
    (pve.cts().into_iter())
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// An image whose `Env` names a variable twice (PVE writes both; LXC sets them in order, so the
/// later wins): the spec's value is the container's only one, not shadowed by the image's
/// second, and the next cycle writes nothing.
#[test]
fn a_variable_the_image_names_twice_takes_the_spec_s_value() {
    let mut pve = pve_with(&[json!({
        "reference": NGINX,
        "entrypoint": ["/docker-entrypoint.sh"],
        "env": ["PORT=80", "PATH=/usr/bin", "PORT=81"],
    })]);
    let ws = Workspace::new(&pve);
    ws.commit_specs(&[(
        "app.yaml",
        app_spec("web-app", NGINX, "    env: {PORT: \"8080\"}\n"),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let app = ct_named(&mut pve, "web-app");
    assert_eq!(
        app["config"]["env"], "PORT=8080\0PATH=/usr/bin",
        "the image's second PORT would win over the spec's"
    );
    let before = next_seq(&mut pve);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(writes_since(&mut pve, before), Vec::<String>::new(), "idle");
}

/// Every cycle after the create is write-free, whatever the image and the spec say: an image
/// whose entrypoint is /sbin/init (PVE sets none of its own), one with a Cmd only, a spec with
/// hostManaged true, false or absent; a spec that then drops entrypoint leaves it as it is.
#[test]
fn every_cycle_after_the_create_is_idle() {
    const INIT: &str = "docker.io/library/debian-init:12";
    const CMD: &str = "docker.io/library/redis:7";
    let mut pve = pve_with(&[
        json!({"reference": INIT, "entrypoint": ["/sbin/init"], "env": ["container=lxc"]}),
        json!({"reference": CMD, "cmd": ["redis-server", "--save", ""]}),
    ]);
    let ws = Workspace::new(&pve);
    let nic =
        |hm: &str| format!("    networks:\n      - {{name: eth0, bridge: vmbr0, ip: dhcp{hm}}}\n");
    let specs = |drop_entrypoint: bool| {
        let ep = |e: &str| {
            if drop_entrypoint {
                String::new()
            } else {
                format!("    entrypoint: \"{e}\"\n")
            }
        };
        vec![
            ("a.yaml", app_spec("init-plain", INIT, "")),
            (
                "b.yaml",
                app_spec(
                    "init-ep",
                    INIT,
                    &format!("{}{}", ep("/sbin/init"), nic(", hostManaged: true")),
                ),
            ),
            ("c.yaml", app_spec("cmd-plain", CMD, &nic(""))),
            (
                "d.yaml",
                app_spec(
                    "cmd-ep",
                    CMD,
                    &format!(
                        "{}    env: {{A: \"\"}}\n{}",
                        ep("redis-server --port 7000"),
                        nic(", hostManaged: false")
                    ),
                ),
            ),
        ]
    };
    ws.commit_specs(&specs(false));
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let cmd_ep = ct_named(&mut pve, "cmd-ep");
    assert_eq!(cmd_ep["config"]["entrypoint"], "redis-server --port 7000");
    assert_eq!(cmd_ep["config"]["env"], "A=");
    let before = next_seq(&mut pve);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(writes_since(&mut pve, before), Vec::<String>::new(), "idle");

    // Dropping entrypoint from the spec leaves the container's as it is.
    ws.commit_specs(&specs(true));
    let before = next_seq(&mut pve);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    assert_eq!(writes_since(&mut pve, before), Vec::<String>::new(), "kept");
    let cmd_ep = ct_named(&mut pve, "cmd-ep");
    assert_eq!(cmd_ep["config"]["entrypoint"], "redis-server --port 7000");
    let (status, _, message) = ws.condition("cmd-ep", "Ready");
    assert_eq!(status, "True", "{message}");
}
