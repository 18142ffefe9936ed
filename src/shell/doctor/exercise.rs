//! `proxsync doctor --exercise`: the conformance suite (`crate::conformance`) on one site of
//! the operator's cluster. It makes a throwaway VM and container in the pool
//! `proxsync-exercise` (made when missing), clones, resizes, starts, stops and deletes them
//! (`--conformance`: every scenario of the suite), reports each step's duration and every
//! answer that differs from what proxsync expects, and writes the task durations to
//! `<state_dir>/exercise-durations.json` (`conformance::durations`), where the daemon's adaptive concurrency takes its
//! first estimates from. It deletes only the guests `gate::permit::exercise_delete` proves it
//! made (its line signed with the install's marker key); each run first deletes what a killed
//! run left in the pool. The guests' NICs are link-down; without `--ct-template`, only a
//! distribution's archive is taken for the container.
//!
//! The only `doctor` code that changes a cluster, and only the guests of its own pool.

use std::time::Duration;

use crate::config::{Config, SiteConfig};
use crate::conformance::{self, Report, Run, Scope, Setup};
use crate::ownership::MarkerKey;
use crate::pve::{Client, ClientOptions, Pve};
use crate::shell::status_view::clean;

/// What `doctor --exercise` was asked.
#[derive(Debug, Clone)]
pub(crate) struct ExerciseOptions {
    /// The site (may be left out with one site configured).
    pub site: Option<String>,
    /// The node (default: the first online node).
    pub node: Option<String>,
    /// A container template volume (default: the first distribution's archive, as `pveam`
    /// names them, the node's `vztmpl` storages hold).
    pub ct_template: Option<String>,
    /// Every scenario of the conformance suite, not only the exercise's.
    pub conformance: bool,
    pub task_timeout: Duration,
}

/// Runs the exercise as run `run`; the site's name and the report, or why it could not begin.
/// The caller holds `<state_dir>/exercise.lock` (`shell::instance_lock::ExerciseLock`) while it
/// runs: one exercise at a time per state directory.
pub(crate) async fn exercise(
    config: &Config,
    opts: &ExerciseOptions,
    run: Run,
) -> Result<(String, Report), String> {
    let site = pick_site(config, opts.site.as_deref())?;
    let key = MarkerKey::load_or_create_file(&config.marker_key_path())?;
    let client = ClientOptions::for_site(site)
        .and_then(Client::new)
        .map_err(|e| format!("site {}: {e}", site.name))?;
    let (setup, chosen) = discover(&client, site, opts, (key, run)).await?;
    let template = match (&setup.ct_template, chosen) {
        (Some(t), true) => format!(", template {t} (found on the node: --ct-template to pick)"),
        (Some(t), false) => format!(", template {t}"),
        (None, _) => String::new(),
    };
    println!(
        "{}",
        clean(&format!(
            "exercise on site {} node {} (pool {}, run {}; VM disk on {}, container on {}, \
             bridge {}{template})",
            site.name,
            setup.node,
            setup.pool,
            setup.run.id,
            setup.vm_storage,
            setup.ct_storage,
            setup.bridge,
        ))
    );
    let report = conformance::run(&client, &setup).await;
    Ok((site.name.clone(), report))
}

/// The report's lines as the terminal shows them: PVE's words, names and volume ids escaped
/// (`status_view::clean`), so an answer cannot drive the terminal.
pub(crate) fn report_lines(report: &Report) -> Vec<String> {
    report.steps.iter().map(|s| clean(&s.to_string())).collect()
}

fn pick_site<'a>(config: &'a Config, name: Option<&str>) -> Result<&'a SiteConfig, String> {
    match (name, config.sites.as_slice()) {
        (Some(n), _) => config
            .site(n)
            .ok_or_else(|| format!("site {n:?} is not configured")),
        (None, [only]) => Ok(only),
        (None, _) => Err("several sites are configured: name one with --site".into()),
    }
}

/// The node, storages, bridge and container template to use, read from the site; whether
/// the template was found rather than given.
async fn discover(
    pve: &impl Pve,
    site: &SiteConfig,
    opts: &ExerciseOptions,
    (key, run): (MarkerKey, Run),
) -> Result<(Setup, bool), String> {
    let status = pve.cluster_status().await.map_err(|e| e.to_string())?;
    let online: Vec<String> = status
        .iter()
        .filter(|e| e.kind == "node" && e.online != Some(false))
        .filter_map(|e| e.name.clone())
        .collect();
    let node = match &opts.node {
        Some(n) => n.clone(),
        None => online.first().cloned().ok_or("no node is online")?,
    };
    let other_node = online.iter().find(|n| **n != node).cloned();
    let vm_storage = first_storage(pve, &node, "images").await?;
    let ct_storage = first_storage(pve, &node, "rootdir").await?;
    let bridge = pve
        .node_bridges(&node)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|b| b.iface)
        .next()
        .ok_or_else(|| format!("node {node} has no bridge"))?;
    let (ct_template, chosen) = match &opts.ct_template {
        Some(t) => (Some(t.clone()), false),
        None => (first_template(pve, &node).await, true),
    };
    let setup = Setup {
        site: site.name.clone(),
        node,
        other_node,
        vm_storage,
        ct_storage,
        bridge,
        ct_template,
        pool: match opts.conformance {
            true => conformance::CONFORMANCE_POOL.into(),
            false => conformance::EXERCISE_POOL.into(),
        },
        task_timeout: opts.task_timeout,
        scope: match opts.conformance {
            true => Scope::Full,
            false => Scope::Exercise,
        },
        key,
        run,
    };
    Ok((setup, chosen))
}

/// The first active storage of `node` for `content`.
async fn first_storage(pve: &impl Pve, node: &str, content: &str) -> Result<String, String> {
    let list = pve.node_storages(node, Some(content)).await;
    list.map_err(|e| e.to_string())?
        .into_iter()
        .find(|s| s.has_content(content) && s.active != Some(false) && s.enabled != Some(false))
        .map(|s| s.storage)
        .ok_or_else(|| format!("node {node} has no active storage for {content}"))
}

/// The first container template on the node's `vztmpl` storages that is a distribution's
/// own archive ([`known_archive`]): never an operator's own template, which may start
/// services or join a network.
async fn first_template(pve: &impl Pve, node: &str) -> Option<String> {
    let storages = pve.node_storages(node, Some("vztmpl")).await.ok()?;
    for s in storages.iter().filter(|s| s.has_content("vztmpl")) {
        let Ok(content) = pve.storage_content(node, &s.storage, Some("vztmpl")).await else {
            continue;
        };
        if let Some(v) = content.into_iter().find(|v| known_archive(&v.volid)) {
            return Some(v.volid);
        }
    }
    None
}

/// The distributions whose archives `pveam` offers (`<name>-<version>-..._<arch>.tar.<c>`).
const DISTRIBUTIONS: &[&str] = &[
    "almalinux",
    "alpine",
    "archlinux",
    "centos",
    "debian",
    "devuan",
    "fedora",
    "gentoo",
    "opensuse",
    "rockylinux",
    "ubuntu",
];

/// Whether volume `volid` (`local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst`) is a
/// distribution's archive as `pveam` names them: a known distribution, a dash and a version
/// digit, an architecture after the last `_`, a `.tar.{zst,xz,gz}` end.
fn known_archive(volid: &str) -> bool {
    let Some(file) = volid.split_once(":vztmpl/").map(|(_, f)| f) else {
        return false;
    };
    let Some(stem) = [".tar.zst", ".tar.xz", ".tar.gz"]
        .iter()
        .find_map(|e| file.strip_suffix(e))
    else {
        return false;
    };
    let arch = stem.rsplit_once('_').map(|(_, a)| a);
    let distribution = DISTRIBUTIONS.iter().any(|d| {
        stem.strip_prefix(d)
            .and_then(|r| r.strip_prefix('-'))
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    });
    distribution
        && matches!(
            arch,
            Some("amd64" | "arm64" | "i386" | "x86_64" | "aarch64")
        )
        && file
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{Expect, Outcome, Step};

    #[test]
    fn only_a_distributions_archive_is_chosen_as_the_template() {
        for good in [
            "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            "nas:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst",
            "local:vztmpl/alpine-3.20-default_20240908_amd64.tar.xz",
        ] {
            assert!(known_archive(good), "{good}");
        }
        for bad in [
            "local:vztmpl/my-webserver.tar.zst",
            "local:vztmpl/debian-custom_amd64.tar.zst",
            "local:vztmpl/debianx-12-standard_12.7-1_amd64.tar.zst",
            "local:vztmpl/debian-12-standard_12.7-1_amd64.tgz",
            "local:iso/debian-12-standard_12.7-1_amd64.tar.zst",
            "local:vztmpl/debian-12-standard_12.7-1_amd64\u{1b}[2J.tar.zst",
        ] {
            assert!(!known_archive(bad), "{bad}");
        }
    }

    #[test]
    fn pves_words_reach_the_terminal_escaped() {
        let report = Report {
            steps: vec![Step {
                name: "vm create".into(),
                expected: Expect::Done,
                task: Some("qmcreate".into()),
                took: Duration::ZERO,
                outcome: Outcome::Differs("bad \u{1b}]0;owned\u{7}\nDIFF fake".into()),
                text: None,
            }],
        };
        let lines = report_lines(&report);
        assert_eq!(lines.len(), 1);
        assert!(
            !lines[0].chars().any(crate::shell::status_view::is_unsafe),
            "{:?}",
            lines[0]
        );
        assert!(
            lines[0].contains("bad ?]0;owned? DIFF fake"),
            "{:?}",
            lines[0]
        );
    }
}
