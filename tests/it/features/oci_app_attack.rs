//! Attacks on application containers' `entrypoint`, `env` and `hostManaged` (PVE 9.1) against
//! fakepve's model of pve-container's `restore_oci_archive`: hostile images, idempotence of
//! every cycle after the create, and a spec that gains or loses the fields.

use serde_json::{Value, json};

use crate::common;

use super::oci_app::{app_spec_from, ct_named, idle_run, nothing_sent};
use common::engine::{Workspace, next_seq, writes_since};
use common::{FakePve, Scenario};

const NGINX: &str = "docker.io/library/nginx:1.27";

fn pve_with(images: &[Value]) -> FakePve {
    super::oci_app::pve_with("9.1.2", images)
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
        app_spec_from("web-app", NGINX, "    env: {PORT: \"8080\"}\n"),
    )]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let app = ct_named(&mut pve, "web-app");
    assert_eq!(
        app["config"]["env"], "PORT=8080\0PATH=/usr/bin",
        "the image's second PORT would win over the spec's"
    );
    idle_run(&mut pve, &ws, "idle");
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
            ("a.yaml", app_spec_from("init-plain", INIT, "")),
            (
                "b.yaml",
                app_spec_from(
                    "init-ep",
                    INIT,
                    &format!("{}{}", ep("/sbin/init"), nic(", hostManaged: true")),
                ),
            ),
            ("c.yaml", app_spec_from("cmd-plain", CMD, &nic(""))),
            (
                "d.yaml",
                app_spec_from(
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
    idle_run(&mut pve, &ws, "idle");

    // Dropping entrypoint from the spec leaves the container's as it is.
    ws.commit_specs(&specs(true));
    idle_run(&mut pve, &ws, "kept");
    let cmd_ep = ct_named(&mut pve, "cmd-ep");
    assert_eq!(cmd_ep["config"]["entrypoint"], "redis-server --port 7000");
    let (status, _, message) = ws.condition("cmd-ep", "Ready");
    assert_eq!(status, "True", "{message}");
}

/// What a hostile image puts in the container's environment and entrypoint (PVE's
/// `restore_oci_archive` refuses `\x00`-`\x08` and `\x10`-`\x1f` only, so a CR passes; a bidi
/// override and a line separator are no control characters, and PVE's API takes them back in
/// `env`) shows nowhere raw: not in the log, the status files, `proxsync status` or `plan`; and
/// the cycles after the spec's variable is written are idle. (A variable with a control
/// character is not sent back: `oci_app`'s `host_managed_false_and_a_changed_variable...`.)
#[test]
fn a_hostile_image_s_environment_shows_nowhere_raw() {
    let mut pve = pve_with(&[json!({
        "reference": NGINX,
        "entrypoint": ["/bin/sh", "-c", "echo 'a b' \"$X\"\r\u{202e}"],
        "env": ["EVIL=a\u{2028}b\u{202e}c", "PATH=/usr/bin"],
    })]);
    let ws = Workspace::new(&pve);
    let spec = |port: &str| {
        app_spec_from(
            "web-app",
            NGINX,
            &format!("    rebootPolicy: IfNeeded\n    env: {{PORT: \"{port}\"}}\n"),
        )
    };
    ws.commit_specs(&[("app.yaml", spec("8080"))]);
    let mut seen = String::new();
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    seen.push_str(&out);
    let app = ct_named(&mut pve, "web-app");
    assert_eq!(
        app["config"]["env"],
        "EVIL=a\u{2028}b\u{202e}c\0PATH=/usr/bin\0PORT=8080"
    );
    let before = next_seq(&mut pve);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    seen.push_str(&out);
    assert_eq!(writes_since(&mut pve, before), Vec::<String>::new(), "idle");

    ws.commit_specs(&[("app.yaml", spec("9090"))]);
    for args in [
        &["plan"][..],
        &["plan", "--format", "json"],
        &["plan", "--format", "markdown"],
        &["status"],
        &["status", "web-app"],
        &["status", "--json"],
    ] {
        seen.push_str(&common::engine::text(&ws.proxsync(args)));
    }
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    seen.push_str(&out);
    assert!(
        seen.contains("PORT=9090") && seen.contains("EVIL=a"),
        "{seen}"
    );
    for entry in std::fs::read_dir(ws.path("status")).expect("status dir") {
        seen.push_str(&std::fs::read_to_string(entry.expect("entry").path()).unwrap_or_default());
    }
    for c in ['\r', '\u{202e}', '\u{2028}', '\0'] {
        assert!(!seen.contains(c), "{c:?} raw in {seen:?}");
    }
}

/// Killed between the create and the converge that writes the spec's entrypoint, with the state
/// database lost: the next cycle finds the container by its marker and writes the spec's
/// entrypoint and variable; one that was started meanwhile (running the image's entrypoint)
/// has them pending, and rebootPolicy IfNeeded restarts it into them.
#[test]
fn a_lost_converge_after_the_create_is_made_good() {
    let mut pve = pve_with(&[json!({
        "reference": NGINX,
        "entrypoint": ["/docker-entrypoint.sh"],
        "env": ["PORT=80"],
    })]);
    let ws = Workspace::new(&pve);
    let extra = "    rebootPolicy: IfNeeded\n    entrypoint: \"/usr/sbin/nginx\"\n    env: \
                 {PORT: \"8080\"}\n";
    ws.commit_specs(&[("app.yaml", app_spec_from("web-app", NGINX, extra))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let vmid = ct_named(&mut pve, "web-app")["vmid"]
        .as_u64()
        .expect("vmid") as u32;
    for status in ["stopped", "running"] {
        // As the create left it: the image's entrypoint and environment.
        pve.set_ct(
            vmid,
            json!({"status": status, "config": {"entrypoint": "/docker-entrypoint.sh", "env": "PORT=80"}}),
        );
        ws.remove_state();
        let (ok, out) = ws.run_once();
        assert!(ok, "{status}: {out}");
        let app = pve.ct(vmid);
        assert_eq!(app["config"]["entrypoint"], "/usr/sbin/nginx", "{status}");
        assert_eq!(app["config"]["env"], "PORT=8080", "{status}");
        assert_eq!(app["pending"], json!({}), "{status}");
        assert_eq!(app["status"], "running", "{status}");
        let (ready, _, message) = ws.condition("web-app", "Ready");
        assert_eq!(ready, "True", "{status}: {message}");
    }
}

/// A spec that names only a NIC's hostManaged, on PVE 8.4: `doctor` fails it, and neither the
/// create nor the converge of a container the site has sends anything.
#[test]
fn host_managed_alone_is_refused_on_8_4() {
    let mut pve = Scenario::default()
        .set("version", json!("8.4.1"))
        .file(
            "local",
            "debian-12-standard_12.7-1_amd64.tar.zst",
            126_000_000,
            "vztmpl",
        )
        .start();
    let ws = Workspace::new(&pve);
    let ct_spec = |nic: &str| {
        format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: ct-01\nspec:\n  \
             forProvider:\n    site: lab\n    node: pve1\n    template: \
             \"local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\"\n    networks:\n      - \
             {{name: eth0, bridge: vmbr0, ip: dhcp{nic}}}\n"
        )
    };
    ws.commit_specs(&[("a.yaml", ct_spec(", hostManaged: false"))]);
    let doctor = common::engine::text(&ws.proxsync(&["doctor"]));
    assert!(
        doctor.lines().any(|l| l.to_lowercase().contains("fail")
            && l.contains("ct-01")
            && l.contains("networks[0].hostManaged")),
        "{doctor}"
    );
    let message = nothing_sent(&mut pve, &ws, "ct-01", "Ready");
    assert!(
        message.contains("networks[0].hostManaged is an option of Proxmox VE 9.1")
            && message.contains("8.4.1"),
        "{message}"
    );

    ws.commit_specs(&[("a.yaml", ct_spec(""))]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    ws.commit_specs(&[("a.yaml", ct_spec(", hostManaged: true"))]);
    let before = next_seq(&mut pve);
    let (_, out) = ws.run_once();
    assert_eq!(
        writes_since(&mut pve, before),
        Vec::<String>::new(),
        "{out}"
    );
}
