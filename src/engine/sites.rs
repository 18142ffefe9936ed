//! Each site's client, built from the config, counting into the meter the caller gives.

use super::*;

/// A site's meter, by site name: where its client counts requests and tasks (the daemon's
/// metrics; [`no_meter`] elsewhere).
pub(crate) type MeterFor<'a> = &'a dyn Fn(&str) -> Arc<dyn Meter>;

/// Counts nothing.
pub(crate) fn no_meter(_site: &str) -> Arc<dyn Meter> {
    Arc::new(NoMeter)
}

/// Builds the per-site clients (reads the token secrets).
pub(crate) fn site_clients(config: &Config) -> Result<BTreeMap<String, Arc<SiteCtx>>, EngineError> {
    site_clients_metered(config, &no_meter)
}

/// As [`site_clients`], each client counting its requests and tasks in `meter_for(site)`.
pub(crate) fn site_clients_metered(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A site's client takes `doctor --exercise`'s durations as each node's first estimates:
    /// a first clone far slower than the exercise's cuts the node's limit, where without them
    /// it only sets the baseline and raises it.
    #[test]
    fn each_sites_client_starts_from_the_exercises_durations() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lab.token"), "secret\n").unwrap();
        let state = dir.path().join("state");
        let text = format!(
            "state_dir = \"{}\"\n\n[reconcile]\nconcurrency = \"adaptive\"\n\n[source]\n\
             path = \"{}\"\n\n[[site]]\nname = \"lab\"\nendpoint = \"https://pve.example:8006\"\n\
             token_id = \"proxsync@pve!gitops\"\ntoken_secret_file = \"lab.token\"\n",
            state.display(),
            dir.path().join("repo").display()
        );
        let config = Config::parse(&dir.path().join("proxsync.toml"), &text).unwrap();
        let first_clone = |config: &Config| {
            let clients = site_clients(config).unwrap();
            let client = &clients["lab"].client;
            client.task_took("pve1", "qmclone", Instant::now(), Duration::from_secs(10));
            client.parallel_limit("pve1")
        };
        assert_eq!(first_clone(&config), 3, "no estimates: the baseline is set");
        let mut measured = crate::conformance::Report::default();
        measured.steps.push(crate::conformance::Step {
            name: "vm clone".into(),
            expected: crate::conformance::Expect::Done,
            task: Some("qmclone".into()),
            took: Duration::from_secs(2),
            outcome: crate::conformance::Outcome::AsExpected,
            text: None,
        });
        crate::conformance::durations::write_durations(&state, "lab", &measured).unwrap();
        assert_eq!(first_clone(&config), 1, "5 times the exercise's 2 s: a cut");
    }
}
