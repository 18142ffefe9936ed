//! `proxsync doctor --exercise`: the conformance suite (`crate::conformance`) on one site of
//! the operator's cluster. It makes a throwaway VM and container in the pool
//! `proxsync-exercise` (made when missing), clones, resizes, starts, stops and deletes them
//! (`--conformance`: every scenario of the suite), reports each step's duration and every
//! answer that differs from what proxsync expects, and writes the task durations to
//! `<state_dir>/exercise-durations.json` (`conformance::durations`), where the daemon's adaptive concurrency takes its
//! first estimates from. It deletes only the guests `gate::permit::exercise_delete` proves it
//! made; each run first deletes what a killed run left in the pool.
//!
//! The only `doctor` code that changes a cluster, and only the guests of its own pool.

use std::time::Duration;

use crate::config::{Config, SiteConfig};
use crate::conformance::{self, Report, Scope, Setup};
use crate::pve::{Client, ClientOptions, Pve};

/// What `doctor --exercise` was asked.
#[derive(Debug, Clone)]
pub struct ExerciseOptions {
    /// The site (may be left out with one site configured).
    pub site: Option<String>,
    /// The node (default: the first online node).
    pub node: Option<String>,
    /// A container template volume (default: the first `vztmpl` the node's storages hold).
    pub ct_template: Option<String>,
    /// Every scenario of the conformance suite, not only the exercise's.
    pub conformance: bool,
    pub task_timeout: Duration,
}

/// Runs the exercise; the site's name and the report, or why it could not begin.
pub async fn exercise(config: &Config, opts: &ExerciseOptions) -> Result<(String, Report), String> {
    let site = pick_site(config, opts.site.as_deref())?;
    let client = ClientOptions::for_site(site)
        .and_then(Client::new)
        .map_err(|e| format!("site {}: {e}", site.name))?;
    let setup = discover(&client, site, opts).await?;
    println!(
        "exercise on site {} node {} (pool {}; VM disk on {}, container on {}, bridge {}{})",
        site.name,
        setup.node,
        setup.pool,
        setup.vm_storage,
        setup.ct_storage,
        setup.bridge,
        setup
            .ct_template
            .as_deref()
            .map(|t| format!(", template {t}"))
            .unwrap_or_default()
    );
    let report = conformance::run(&client, &setup).await;
    Ok((site.name.clone(), report))
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

/// The node, storages, bridge and container template to use, read from the site.
async fn discover(
    pve: &impl Pve,
    site: &SiteConfig,
    opts: &ExerciseOptions,
) -> Result<Setup, String> {
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
    let ct_template = match &opts.ct_template {
        Some(t) => Some(t.clone()),
        None => first_template(pve, &node).await,
    };
    Ok(Setup {
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
    })
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

/// The first container template on the node's `vztmpl` storages.
async fn first_template(pve: &impl Pve, node: &str) -> Option<String> {
    let storages = pve.node_storages(node, Some("vztmpl")).await.ok()?;
    for s in storages.iter().filter(|s| s.has_content("vztmpl")) {
        let Ok(content) = pve.storage_content(node, &s.storage, Some("vztmpl")).await else {
            continue;
        };
        if let Some(v) = content.into_iter().next() {
            return Some(v.volid);
        }
    }
    None
}
