//! SOPS-encrypted `userData` end to end: the spec's VM gets the decrypted user-data in its seed
//! (uploaded to PVE), and neither the secret nor a hash of it shows in the status files, the
//! state directory, the logs or `plan`/`status` output; a wrong key stalls that spec alone
//! (`DecryptionFailed`); `validate` checks the structure without a key; `doctor` checks the
//! identity file.

use crate::common;

use std::os::unix::fs::PermissionsExt;

use assert_cmd::Command;
use common::engine::{Workspace, owned_vms, spec, text};
use common::{FakePve, default_scenario};

const SECRET: &str = "k8s-join-token-c0ffee-4711";
const LINE: &str = "    userData: \"#cloud-config\\nruncmd: [\\\"kubeadm join --token k8s-join-token-c0ffee-4711\\\"]\\n\"";

/// A new age identity written to `path` (mode `mode`); its recipient.
fn identity(path: &std::path::Path, mode: u32) -> String {
    let id = age::x25519::Identity::generate();
    let secret = age::secrecy::ExposeSecret::expose_secret(&id.to_string()).to_string();
    std::fs::write(path, format!("# created by the test\n{secret}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    id.to_public().to_string()
}

/// Puts `sops_age_identity_file` first in the workspace's config (a top-level key).
fn use_identity(ws: &Workspace, path: &std::path::Path) {
    let config = std::fs::read_to_string(ws.config()).unwrap();
    std::fs::write(
        ws.config(),
        format!("sops_age_identity_file = \"{}\"\n{config}", path.display()),
    )
    .unwrap();
}

fn sealed_spec(name: &str, recipient: &str) -> String {
    let plain = spec(name, "pve1", "9000", &format!("{LINE}\n"));
    proxsync::spec::seal_for_tests(&plain, LINE, recipient)
}

fn proxsync(ws: &Workspace, args: &[&str]) -> std::process::Output {
    Command::cargo_bin("proxsync")
        .unwrap()
        .args(args)
        .arg("--config")
        .arg(ws.config())
        .env("PROXSYNC_LOG", "debug")
        .env_remove("SOPS_AGE_KEY_FILE")
        .output()
        .unwrap()
}

fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every file under `dir`, as bytes.
fn all_files(dir: &std::path::Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            all_files(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path.display().to_string(), bytes));
        }
    }
}

#[test]
fn the_secret_reaches_the_vm_and_nothing_else() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let key = ws.path("age.key");
    let recipient = identity(&key, 0o640);
    use_identity(&ws, &key);
    let sealed = sealed_spec("web-01", &recipient);
    assert!(!sealed.contains(SECRET));
    ws.commit_specs(&[("web.yaml", sealed)]);

    let validate = proxsync(&ws, &["validate", ws.path("repo").to_str().unwrap()]);
    assert_eq!(validate.status.code(), Some(0), "{}", text(&validate));

    let plan = proxsync(&ws, &["plan", "--json"]);
    let run = proxsync(&ws, &["run", "--once"]);
    assert!(run.status.success(), "{}", text(&run));
    assert_eq!(owned_vms(&mut pve).len(), 1);
    assert_eq!(ws.condition("web-01", "Ready").0, "True");

    // The decrypted user-data went to PVE, in the seed image's upload.
    let upload = pve
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path.ends_with("/storage/local/upload"))
        .expect("the seed was uploaded");
    assert!(upload.body.contains(SECRET), "the VM gets the secret");

    // ... and nowhere else.
    let user_data = format!("#cloud-config\nruncmd: [\"kubeadm join --token {SECRET}\"]\n");
    let forbidden = [
        SECRET.to_string(),
        sha256_hex(SECRET.as_bytes()),
        sha256_hex(user_data.as_bytes()),
        sha256_hex(user_data.as_bytes())[..12].to_string(),
    ];
    let plan_again = proxsync(&ws, &["plan", "--json"]);
    let status = proxsync(&ws, &["status", "--json"]);
    let detail = proxsync(&ws, &["status", "web-01"]);
    let mut outputs: Vec<(String, Vec<u8>)> = [
        ("plan", &plan),
        ("run --once", &run),
        ("plan after", &plan_again),
        ("status --json", &status),
        ("status web-01", &detail),
    ]
    .into_iter()
    .map(|(what, o)| (what.to_string(), text(o).into_bytes()))
    .collect();
    all_files(&ws.path("state"), &mut outputs);
    all_files(&ws.path("status"), &mut outputs);
    assert!(
        outputs.len() > 8,
        "{:?}",
        outputs.iter().map(|o| &o.0).collect::<Vec<_>>()
    );
    for (what, bytes) in &outputs {
        let haystack = String::from_utf8_lossy(bytes).to_lowercase();
        for f in &forbidden {
            assert!(!haystack.contains(&f.to_lowercase()), "{f} found in {what}");
        }
    }
}

#[test]
fn a_wrong_key_stalls_that_spec_alone() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let key = ws.path("age.key");
    identity(&key, 0o600);
    use_identity(&ws, &key);
    let other = identity(&ws.path("other.key"), 0o600);
    ws.commit_specs(&[
        ("web.yaml", sealed_spec("web-01", &other)),
        ("db.yaml", spec("db-01", "pve1", "9000", "")),
    ]);
    let run = proxsync(&ws, &["run", "--once"]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let names: Vec<String> = owned_vms(&mut pve).into_iter().map(|v| v.1).collect();
    assert_eq!(names, ["db-01"], "{}", text(&run));
    assert_eq!(ws.condition("db-01", "Ready").0, "True");
    let (status, reason, message) = ws.condition("web-01", "Stalled");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "DecryptionFailed"),
        "{message}"
    );
    assert!(
        message.contains(&other),
        "names the file's recipient: {message}"
    );

    // Once the identity is the file's, the spec goes on.
    std::fs::copy(ws.path("other.key"), &key).unwrap();
    let run = proxsync(&ws, &["run", "--once"]);
    assert!(run.status.success(), "{}", text(&run));
    assert_eq!(owned_vms(&mut pve).len(), 2);

    // doctor: the identity is too open.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let doctor = text(&proxsync(&ws, &["doctor"]));
    assert!(
        doctor.contains("FAIL sops identity:") && doctor.contains("everyone can read it"),
        "{doctor}"
    );
    assert!(doctor.contains(&other), "names its recipient: {doctor}");
}

#[test]
fn validate_checks_the_structure_without_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let id = age::x25519::Identity::generate().to_public().to_string();
    std::fs::write(dir.path().join("web.yaml"), sealed_spec("web-01", &id)).unwrap();
    let validate = |env: Option<&std::path::Path>| {
        let mut c = Command::cargo_bin("proxsync").unwrap();
        c.arg("validate")
            .arg(dir.path())
            .env_remove("SOPS_AGE_KEY_FILE");
        if let Some(k) = env {
            c.env("SOPS_AGE_KEY_FILE", k);
        }
        c.output().unwrap()
    };
    let o = validate(None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("structure is checked, not its content"),
        "{}",
        text(&o)
    );
    // A broken value is an error, key or not.
    let broken = std::fs::read_to_string(dir.path().join("web.yaml"))
        .unwrap()
        .replacen(",tag:", ",tag:%%", 1);
    std::fs::write(dir.path().join("web.yaml"), broken).unwrap();
    let o = validate(None);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("tag"), "{}", text(&o));

    // With SOPS_AGE_KEY_FILE, as sops reads it: decrypted, and a wrong key is an error.
    let key = dir.path().join("k.txt");
    let recipient = identity(&key, 0o600);
    std::fs::write(
        dir.path().join("web.yaml"),
        sealed_spec("web-01", &recipient),
    )
    .unwrap();
    let o = validate(Some(&key));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("ok: 1 spec(s)"), "{}", text(&o));
    identity(&key, 0o600);
    let o = validate(Some(&key));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("SOPS: cannot decrypt the data key"),
        "{}",
        text(&o)
    );
}

/// A `_defaults.yaml` beside a SOPS-encrypted spec adds nothing to it: the SOPS MAC covers the
/// spec's own file only, and anyone who may commit, without the key, could otherwise add what
/// the file keeps out (here a tag; an SSH key into the guest that holds the secret alike). A
/// plain spec beside it takes the default; `validate` says why the sealed one does not.
#[test]
fn a_sealed_spec_takes_no_defaults() {
    let mut pve = FakePve::start(default_scenario());
    let ws = Workspace::new(&pve);
    let key = ws.path("age.key");
    let recipient = identity(&key, 0o640);
    use_identity(&ws, &key);
    let defaults = "apiVersion: proxsync.io/v1\nkind: ProxmoxDefaults\nspec:\n  forProvider:\n    \
                    tags: [from-defaults]\n";
    ws.commit_specs(&[
        ("_defaults.yaml", defaults.to_string()),
        ("web.yaml", sealed_spec("web", &recipient)),
        ("plain.yaml", spec("plain", "pve1", "9000", "")),
    ]);
    let (ok, out) = ws.run_once();
    assert!(ok, "{out}");
    let mut tags = |name: &str| -> String {
        let vmid = ws.status(name)["vmId"].as_u64().expect("a VMID") as u32;
        pve.vm(vmid)["config"]["tags"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let (plain, web) = (tags("plain"), tags("web"));
    assert!(plain.contains("from-defaults"), "{plain}");
    assert!(!web.contains("from-defaults"), "{web}");
    let out = proxsync(&ws, &["validate", ws.path("repo").to_str().unwrap()]);
    let shown = text(&out);
    assert!(
        shown.contains("this SOPS-encrypted spec takes no values from")
            && shown.contains("_defaults.yaml (its MAC covers only this file)"),
        "{shown}"
    );
}
