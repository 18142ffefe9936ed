//! Each site's client, built from the config, counting into the meter the caller gives.

use super::*;

/// A site's meter, by site name: where its client counts requests and tasks (the daemon's
/// metrics; [`no_meter`] elsewhere).
pub type MeterFor<'a> = &'a dyn Fn(&str) -> Arc<dyn Meter>;

/// Counts nothing.
pub fn no_meter(_site: &str) -> Arc<dyn Meter> {
    Arc::new(NoMeter)
}

/// Builds the per-site clients (reads the token secrets).
pub fn site_clients(config: &Config) -> Result<BTreeMap<String, Arc<SiteCtx>>, EngineError> {
    site_clients_metered(config, &no_meter)
}

/// As [`site_clients`], each client counting its requests and tasks in `meter_for(site)`.
pub fn site_clients_metered(
    config: &Config,
    meter_for: MeterFor<'_>,
) -> Result<BTreeMap<String, Arc<SiteCtx>>, EngineError> {
    config
        .sites
        .iter()
        .map(|site| {
            let client = ClientOptions::for_site(site)
                .and_then(Client::new)
                .map(|c| c.with_metrics(meter_for(&site.name)))
                .map(|c| {
                    c.with_parallelism(
                        config.reconcile.concurrency == crate::config::ConcurrencyMode::Adaptive,
                        config.reconcile.max_parallel_per_node,
                    )
                    .with_task_estimates(
                        crate::conformance::durations::read_durations(
                            &config.state_dir,
                            &site.name,
                        )
                        .into_iter()
                        .collect(),
                    )
                })
                .map_err(|e| EngineError::Site {
                    site: site.name.clone(),
                    message: e.to_string(),
                })?;
            Ok((
                site.name.clone(),
                Arc::new(SiteCtx::new(&site.name, client, site.request_timeout)),
            ))
        })
        .collect()
}
