//! `proxsync plan`: a plan made without acting, with what it was made from.

use super::*;

/// A plan with what it was made from: `proxsync plan` reads the converged VMs' configs with
/// the sites' clients to show each change field by field, and names the sites it could not read.
pub(crate) struct PlanView {
    pub plan: Plan,
    pub views: BTreeMap<String, SiteView>,
    pub records: Arc<BTreeMap<String, SpecRecord>>,
    pub sites: BTreeMap<String, Arc<SiteCtx>>,
    /// The marker key, when it exists (a plan never makes one).
    pub marker_key: Option<MarkerKey>,
    pub install_id: String,
    /// The errors of the specs that name a node their site's cluster does not have
    /// ([`check_spec_nodes`]): those specs were planned as invalid ones.
    pub node_errors: Vec<crate::spec::Diagnostic>,
    /// The spec set's `ProxmoxImage`s.
    pub images: crate::spec::images::ImagesByName,
}

/// A plan's look at its sites, started before the specs are read (it needs none of them):
/// the sites' clients, their recorded identities, and their listings under way.
pub(crate) struct Looking {
    sites: BTreeMap<String, Arc<SiteCtx>>,
    identities: SiteChecks,
    listing: super::look::Listing,
}

/// Starts listing every site of `config` for a plan. Call within the runtime.
pub(crate) fn start_looking(config: &Config) -> Result<Looking, EngineError> {
    let sites = site_clients(config)?;
    // Read-only: a first contact is recorded by a cycle, not by a plan.
    let identities = SiteChecks::new(&config.state_dir, false);
    let listing = super::look::list_sites(&sites, &identities);
    Ok(Looking {
        sites,
        identities,
        listing,
    })
}

/// Plans without acting (for `proxsync plan`), keeping what the plan was made from; writes
/// nothing. `records` and `suspensions`: the state database's (`control::plan_records` and
/// `control::plan_suspensions` read them, from the daemon while it holds the database). `rewind`: the specs are of a commit that rewinds the
/// branch, whose deletes are judged as one batch, as a cycle would.
/// `looking`: the sites' listings, started by [`start_looking`] before the specs were read.
pub(crate) async fn plan_view(
    config: &Config,
    specs: &SpecSet,
    records: Arc<BTreeMap<String, SpecRecord>>,
    suspensions: Suspensions,
    rewind: Option<&crate::source::chain::RewindBatch>,
    looking: Looking,
) -> Result<PlanView, EngineError> {
    let Looking {
        sites,
        mut identities,
        listing,
    } = looking;
    let (specs, theirs) = shard(config, specs);
    let specs = specs.as_ref();
    let elsewhere = names(&theirs);
    let mut cache = HashMap::new();
    // Read-only: a missing key is not made here (then no marker verifies).
    let key = MarkerKey::load_file(&config.marker_key_path())
        .ok()
        .flatten();
    let views = super::look::observe_listed(
        listing,
        &sites,
        config,
        specs,
        &records,
        &mut cache,
        &mut identities,
        key.as_ref(),
        None,
    )
    .await;
    // A spec naming a node its site's cluster does not have is invalid, as in a cycle.
    let checked = check_spec_nodes(specs, &views);
    let node_errors = checked.diagnostics[specs.diagnostics.len()..].to_vec();
    let specs = checked.as_ref();
    // A set's FreeMemory members placed as a cycle would place them.
    let free = super::placement::free_memory(specs, &records, &views, &sites).await;
    let placed = super::placement::place(specs, &views, &records, &free);
    let specs = placed.as_ref();
    let invalid: BTreeSet<String> = specs
        .invalid_names()
        .into_iter()
        .map(str::to_string)
        .collect();
    let chash = config_hash(config);
    let orphans_seen = BTreeMap::new();
    let basis = PlanBasis {
        config,
        specs,
        invalid: &invalid,
        elsewhere: &elsewhere,
        config_hash: &chash,
        retry_transient_now: false,
        rewind,
        suspensions: &suspensions,
        // A plan downloads nothing: a guest whose image is not there is refused by its
        // create's pre-flight, which names the volume.
        images_waiting: &BTreeMap::new(),
        // A plan checks no guest's health: every guest counts as healthy.
        health: None,
    };
    let plan = basis.plan(&views, &records, &orphans_seen, now_ms());
    Ok(PlanView {
        plan,
        views,
        records,
        sites,
        marker_key: key,
        install_id: config.install_id.clone(),
        node_errors,
        images: specs.images_by_name(),
    })
}
