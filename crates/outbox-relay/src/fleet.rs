//! Several databases in one process (`[source.<name>]`, docs/configuration.md): one
//! [`run_source`] per source, each with its own [`Shared`], slot monitor, heartbeat, slot
//! keeper, supervisor, replication connection and Kafka producers, inside its
//! [`source_scope`](crate::source_scope) so that its metrics and logs carry its name.
//!
//! Invariant: a source's failure is its own. A definite error (a lost slot, a poison event
//! with `on_poison = "halt"`, a missing grant) stops that source alone: it is logged
//! (`source_stopped`), shown by `/readyz` and `outbox_relay_source_stopped`, and every other
//! source keeps streaming and confirming. Nothing is shared between sources that one source's
//! fatal error could break: producers (and their `enable.gapless.guarantee`), the WAL-at-risk
//! flag and the checkpoint reader are per source; what they share is the runtime, the HTTP
//! endpoint and the metrics recorder. The process ends when every source has ended: with an
//! error if the last ones ended on errors and no stop was asked.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;

use crate::{
    config::Config,
    error::RelayError,
    events::{SOURCE_STARTED, SOURCE_STOPPED},
    health::Shared,
    http::Readiness,
    metrics as m,
    run::{endpoint, run_source},
    source_scope::within,
};

/// Installs the Prometheus recorder behind [`Labelled`](crate::source_scope::Labelled), for a multi-source process. The
/// series of known label values are given their zero per source by `metrics::init`, called
/// within each source.
pub fn install_labelled() -> Result<metrics_exporter_prometheus::PrometheusHandle, String> {
    let recorder = crate::metrics::builder()
        .map_err(|e| e.to_string())?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(crate::source_scope::Labelled(recorder))
        .map_err(|e| e.to_string())?;
    crate::metrics::describe();
    Ok(handle)
}

/// The sources' health, for `/readyz`.
struct Fleet {
    members: Vec<(String, Arc<Shared>)>,
}

impl Readiness for Fleet {
    /// Ready when every source is; else one reason per line, each naming its source.
    fn readiness(&self, passive_ok: bool) -> Result<(), Vec<String>> {
        let reasons: Vec<String> = self
            .members
            .iter()
            .filter_map(|(name, shared)| shared.readiness(passive_ok).err().map(|r| (name, r)))
            .flat_map(|(name, r)| {
                r.into_iter()
                    .map(move |why| format!("source {name}: {why}"))
            })
            .collect();
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons)
        }
    }
}

/// Runs every source of `cfg` until `shutdown` flips or each has ended.
pub async fn run(
    cfg: &Config,
    shutdown: watch::Receiver<bool>,
    prom: Option<PrometheusHandle>,
) -> Result<(), RelayError> {
    let members: Vec<(String, Arc<Shared>)> = cfg
        .sources
        .iter()
        .map(|s| (name(s), Arc::new(Shared::new())))
        .collect();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut helpers = tokio::task::JoinSet::new();
    if let Some(prom) = prom {
        let fleet = Arc::new(Fleet {
            members: members.clone(),
        });
        endpoint(&mut helpers, &cfg.http, prom, fleet, &stop_rx);
    }
    let mut sources = tokio::task::JoinSet::new();
    for (source, (name, shared)) in cfg.sources.iter().zip(members) {
        let source = Arc::new(source.clone());
        let shutdown = shutdown.clone();
        let scope_name = name.clone();
        sources.spawn(within(&scope_name, async move {
            m::init(crate::alert::LABELS);
            metrics::gauge!(m::SOURCE_STOPPED).set(0.0);
            tracing::info!(
                database = %source.postgres.database, slot = %source.postgres.slot,
                "{SOURCE_STARTED}"
            );
            let result = run_source(source, shared.clone(), shutdown).await;
            if let Err(e) = &result {
                tracing::error!(reason = e.reason(), error = %e, "{SOURCE_STOPPED}: the other sources go on");
                shared.set_stopped(Some(e.to_string()));
                metrics::gauge!(m::SOURCE_STOPPED).set(1.0);
                metrics::gauge!(m::READY).set(0.0);
            }
            (name, result)
        }));
    }
    let mut last_error = None;
    while let Some(joined) = sources.join_next().await {
        match joined {
            Ok((_, Ok(()))) => {}
            Ok((_, Err(e))) => last_error = Some(e),
            // A source's task panicked: the others go on; the panic was printed.
            Err(e) => tracing::error!(error = %e, "{SOURCE_STOPPED}: the source's task failed"),
        }
    }
    let _ = stop_tx.send(true);
    helpers.shutdown().await;
    match last_error {
        Some(e) if !*shutdown.borrow() => Err(e),
        _ => Ok(()),
    }
}

fn name(source: &Config) -> String {
    source.source.clone().unwrap_or_default()
}
