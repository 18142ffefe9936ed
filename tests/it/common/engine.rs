//! Helpers for engine tests: a config pointing at a fakepve, spec files in a git repository,
//! and running `proxsync` as a user would.

use std::path::PathBuf;
use std::process::{Command, Output};

use super::fakepve::{FakePve, TOKEN_ID, TOKEN_SECRET};

/// A workspace: config, state and status dirs, and a git repository of specs.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    /// A config with one site `lab` on `pve`, install id `test`, a git repo at `repo/`.
    pub fn new(pve: &FakePve) -> Workspace {
        Self::with_extra(pve, "")
    }

    /// As [`new`](Self::new), with extra TOML appended (e.g. a `[reconcile]` table).
    pub fn with_extra(pve: &FakePve, extra: &str) -> Workspace {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace { dir };
        std::fs::write(ws.path("lab.token"), TOKEN_SECRET).unwrap();
        let config = format!(
            "install_id = \"test\"\nstate_dir = \"{state}\"\nstatus_dir = \"{status}\"\n\n\
             [source]\npath = \"{repo}\"\nbranch = \"main\"\n\n\
             [[site]]\nname = \"lab\"\nendpoint = \"{url}\"\ntoken_id = \"{TOKEN_ID}\"\n\
             token_secret_file = \"{token}\"\nca_file = \"{ca}\"\nrequest_timeout = \"10s\"\n\n{extra}",
            state = ws.path("state").display(),
            status = ws.path("status").display(),
            repo = ws.path("repo").display(),
            url = pve.url(),
            token = ws.path("lab.token").display(),
            ca = pve.ca_file().display(),
        );
        std::fs::write(ws.config(), config).unwrap();
        std::fs::create_dir(ws.path("repo")).unwrap();
        ws.git(&["init", "-q"]);
        ws
    }

    /// A workspace with two sites, `lab` on `lab` and `other` on `other` (each its own
    /// fakepve, one token), `extra` TOML appended.
    pub fn two_sites(lab: &FakePve, other: &FakePve, extra: &str) -> Workspace {
        let ws = Workspace::with_extra(lab, extra);
        let second_site = format!(
            "[[site]]\nname = \"other\"\nendpoint = \"{url}\"\ntoken_id = \"{TOKEN_ID}\"\n\
             token_secret_file = \"{token}\"\nca_file = \"{ca}\"\nrequest_timeout = \"10s\"\n",
            url = other.url(),
            token = ws.path("lab.token").display(),
            ca = other.ca_file().display(),
        );
        let config = std::fs::read_to_string(ws.config()).unwrap() + &second_site;
        std::fs::write(ws.config(), config).unwrap();
        ws
    }

    /// Makes the source a bare repository `vms.git` that [`push`](Self::push) pushes to, as
    /// people push to a server.
    pub fn use_bare_source(&self) {
        let bare = self.path("vms.git");
        let out = Command::new("git")
            .args(["init", "-q", "--bare", "-b", "main"])
            .arg(&bare)
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let config = std::fs::read_to_string(self.config()).unwrap();
        let config = config.replace(
            &format!("path = \"{}\"", self.path("repo").display()),
            &format!("path = \"{}\"", bare.display()),
        );
        std::fs::write(self.config(), config).unwrap();
    }

    /// Pushes the work repository's main branch to `vms.git`.
    pub fn push(&self) {
        let bare = self.path("vms.git");
        self.git(&["push", "-q", bare.to_str().unwrap(), "main"]);
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn config(&self) -> PathBuf {
        self.path("proxsync.toml")
    }

    pub fn git(&self, args: &[&str]) {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=test",
                "-c",
                "user.email=test@example",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(self.path("repo"))
            .output()
            .expect("git is installed");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Replaces the repository's specs with `files` (name -> content) and commits.
    pub fn commit_specs(&self, files: &[(&str, String)]) {
        let repo = self.path("repo");
        for entry in std::fs::read_dir(&repo).unwrap().flatten() {
            if entry.file_name().to_string_lossy().ends_with(".yaml") {
                std::fs::remove_file(entry.path()).unwrap();
            }
        }
        for (name, text) in files {
            let path = repo.join(name);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).unwrap();
            }
            std::fs::write(path, text).unwrap();
        }
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", "specs"]);
    }

    /// Runs `proxsync <args> --config <config>`.
    pub fn proxsync(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_proxsync"))
            .args(args)
            .arg("--config")
            .arg(self.config())
            .env("PROXSYNC_LOG", "info")
            .output()
            .expect("run proxsync")
    }

    /// `proxsync run --once`, returning (success, stdout+stderr).
    pub fn run_once(&self) -> (bool, String) {
        let out = self.proxsync(&["run", "--once"]);
        (out.status.success(), text(&out))
    }

    /// A spec's status file, parsed as YAML into JSON values.
    pub fn status(&self, name: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(self.path(&format!("status/{name}.yaml")))
            .unwrap_or_else(|e| panic!("status of {name}: {e}"));
        serde_saphyr::from_str(&text)
            .unwrap_or_else(|e| panic!("status of {name} is YAML: {e}\n{text}"))
    }

    /// The status of condition `kind` of a spec: (status, reason, message).
    pub fn condition(&self, name: &str, kind: &str) -> (String, String, String) {
        let st = self.status(name);
        let c = st["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
            .unwrap_or_else(|| panic!("no {kind} condition in {st}"));
        (
            c["status"].as_str().unwrap_or("").to_string(),
            c["reason"].as_str().unwrap_or("").to_string(),
            c["message"].as_str().unwrap_or("").to_string(),
        )
    }

    /// Deletes the state database (the cache the README says is safe to lose); the marker key
    /// beside it stays, as the README tells operators to keep it.
    pub fn remove_state(&self) {
        std::fs::remove_file(self.path("state/proxsync.redb")).unwrap();
    }

    /// Loses the whole state directory, the marker key included.
    #[allow(dead_code)]
    pub fn remove_state_and_key(&self) {
        std::fs::remove_dir_all(self.path("state")).unwrap();
    }
}

pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A spec document on site `lab`.
pub fn spec(name: &str, node: &str, image: &str, extra: &str) -> String {
    format!(
        "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n    \
         site: lab\n    node: {node}\n    image: \"{image}\"\n    cpu: 2\n    memory: 2Gi\n    disk: 8Gi\n{extra}"
    )
}

/// The VMs of the fake owned by install `test` (by tag), as (vmid, name).
pub fn owned_vms(pve: &mut FakePve) -> Vec<(u64, String)> {
    pve.vms()
        .into_iter()
        .filter(|vm| {
            vm["config"]["tags"]
                .as_str()
                .is_some_and(|t| t.split([';', ',', ' ']).any(|t| t == "proxsync.test"))
        })
        .map(|vm| {
            (
                vm["vmid"].as_u64().unwrap_or(0),
                vm["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Every VM and container of the fake whose description carries a `proxsync-id:` marker of
/// install `test`, grouped by the spec the marker names: spec -> VMIDs. Counts guests whether
/// or not they are tagged or named yet, so a second guest for one spec cannot hide.
#[allow(dead_code)]
pub fn marker_claims(pve: &mut FakePve) -> std::collections::BTreeMap<String, Vec<u64>> {
    let mut out: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    let mut guests = pve.vms();
    guests.extend(pve.cts());
    for vm in guests {
        let description = vm["config"]["description"].as_str().unwrap_or("");
        if let Some(m) = proxsync::ownership::Marker::parse(description)
            && m.install == "test"
        {
            out.entry(m.spec.to_string())
                .or_default()
                .push(vm["vmid"].as_u64().unwrap_or(0));
        }
    }
    out
}

/// The non-GET requests fakepve logged from sequence number `since` on, as `METHOD path`.
pub fn writes_since(pve: &mut FakePve, since: u64) -> Vec<String> {
    pve.requests_since(since)
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// The sequence number fakepve gives its next request.
pub fn next_seq(pve: &mut FakePve) -> u64 {
    pve.requests().last().map_or(0, |r| r.seq + 1)
}

/// The engine driven in this process as the daemon drives it, over a workspace's committed
/// specs (a test that needs the daemon's backoff, which `run --once` does not keep).
pub struct InProcess {
    pub engine: proxsync::engine::Engine,
    pub specs: proxsync::spec::SpecSet,
    pub commit: String,
}

/// [`InProcess`] over `ws`'s config and its last commit.
pub fn in_process(ws: &Workspace) -> InProcess {
    let config = proxsync::config::Config::load(&ws.config()).expect("config");
    let read = proxsync::source::read_configured(&config, proxsync::source::Use::Apply)
        .expect("the specs of the commit");
    let mut specs = read.specs;
    proxsync::engine::check_spec_sites(&config, &mut specs);
    let engine = proxsync::engine::Engine::new(config).expect("engine");
    InProcess {
        engine,
        specs,
        commit: read.commit,
    }
}

impl InProcess {
    /// One cycle, as the daemon runs it.
    pub async fn cycle(&mut self) {
        self.engine
            .reconcile(&self.specs, Some(&self.commit))
            .await
            .expect("a cycle");
    }
}
