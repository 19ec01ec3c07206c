//! Several databases in one process (`[source.<name>]`, docs/configuration.md): one
//! [`run_source`] per source, each with its own [`Shared`], slot monitor, heartbeat, slot
//! keeper, supervisor, replication connection and Kafka producers, inside its
//! [`source_scope`](crate::telemetry::source_scope) so that its metrics and logs carry its name.
//!
//! Invariant: a source's failure is its own. A definite error (a lost slot, a poison event
//! with `on_poison = "halt"`, a missing grant) stops that source alone: it is logged
//! (`source_stopped`), shown by `/readyz` and `outbox_relay_source_stopped`, and every other
//! source keeps streaming and confirming. Nothing is shared between sources that one source's
//! fatal error could break: producers (and their `enable.gapless.guarantee`), the WAL-at-risk
//! flag and the checkpoint reader are per source; what they share is the runtime, the HTTP
//! endpoint and the metrics recorder. The process ends when every source has ended: with an
//! error if the last ones ended on errors and no stop was asked.
//!
//! A reload (SIGHUP, [`run`]'s `reloads`) changes sources one by one, never the others: a
//! source that is new starts, one that is gone is stopped as on SIGTERM (drained), one whose
//! settings changed (its fingerprint: file and environment) is stopped and started again, and
//! one that had stopped on an error is started again (after the operator fixed the cause).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::{sync::mpsc, sync::watch, task::JoinSet};

use outbox_service::http::Readiness;

use crate::{
    config::Config,
    error::RelayError,
    observe::health::Shared,
    supervise::run::{endpoint, run_source},
    telemetry::events::{CONFIG_RELOAD_FAILED, CONFIG_RELOADED, SOURCE_STARTED, SOURCE_STOPPED},
    telemetry::metrics as m,
    telemetry::source_scope::within,
};

/// Installs the Prometheus recorder behind [`Labelled`](crate::telemetry::source_scope::Labelled), for a multi-source process. The
/// series of known label values are given their zero per source by `metrics::init`, called
/// within each source.
pub fn install_labelled() -> Result<metrics_exporter_prometheus::PrometheusHandle, String> {
    let recorder = crate::telemetry::metrics::builder()
        .map_err(|e| e.to_string())?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(crate::telemetry::source_scope::Labelled(recorder))
        .map_err(|e| e.to_string())?;
    crate::telemetry::metrics::describe();
    Ok(handle)
}

/// The sources' health, for `/readyz`.
#[derive(Default)]
struct Fleet {
    members: Mutex<Vec<(String, Arc<Shared>)>>,
}

impl Fleet {
    fn set(&self, name: &str, shared: Option<Arc<Shared>>) {
        let mut m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|(n, _)| n != name);
        if let Some(shared) = shared {
            m.push((name.to_string(), shared));
            m.sort_by(|a, b| a.0.cmp(&b.0));
        }
    }
}

impl Readiness for Fleet {
    /// Ready when every source is; else one reason per line, each naming its source.
    fn readiness(&self, passive_ok: bool) -> Result<(), Vec<String>> {
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let reasons: Vec<String> = members
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

impl outbox_service::console::View for Fleet {
    fn status_json(
        &self,
        metrics: &str,
        history: &outbox_service::console::history::History,
    ) -> String {
        crate::observe::console::status_json(metrics, &self.health(), history)
    }

    fn readings(
        &self,
        metrics: &str,
        now: f64,
    ) -> Vec<(String, outbox_service::console::history::Reading)> {
        let names: Vec<Option<String>> = self.health().into_iter().map(|(n, _)| n).collect();
        crate::observe::console::readings(metrics, &names, now)
    }
}

impl Fleet {
    /// Every source's name and health, by name.
    fn health(&self) -> Vec<(Option<String>, crate::observe::health::SourceHealth)> {
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        members
            .iter()
            .map(|(name, shared)| (Some(name.clone()), shared.health()))
            .collect()
    }
}

/// A source as the fleet runs it.
struct Member {
    fingerprint: u64,
    /// Which start of this source the running task is (a finished task of an earlier one is
    /// ignored).
    generation: u64,
    stop: watch::Sender<bool>,
    /// The task is running (not ended).
    running: bool,
    /// Start this config once the running task has ended (a changed source).
    next: Option<Config>,
    /// Forget the source once its task has ended (a removed source).
    removed: bool,
}

type Ended = (String, u64, Result<(), RelayError>);

struct Sources {
    /// `relay.max_sources`, shared by every source of the process.
    capacity: Option<Arc<tokio::sync::Semaphore>>,
    /// `relay.max_in_flight_bytes_total`, shared likewise.
    budget: Option<Arc<crate::sink::budget::Budget>>,
    tasks: JoinSet<Ended>,
    members: HashMap<String, Member>,
    fleet: Arc<Fleet>,
    generation: u64,
}

impl Sources {
    fn start(&mut self, cfg: Config) {
        let name = name(&cfg);
        let shared = Arc::new(Shared::of_fleet(self.capacity.clone(), self.budget.clone()));
        let (stop, stop_rx) = watch::channel(false);
        self.generation += 1;
        let generation = self.generation;
        self.fleet.set(&name, Some(shared.clone()));
        self.members.insert(
            name.clone(),
            Member {
                fingerprint: cfg.fingerprint,
                generation,
                stop,
                running: true,
                next: None,
                removed: false,
            },
        );
        let cfg = Arc::new(cfg);
        self.tasks.spawn(within(&name.clone(), async move {
            m::init(crate::observe::alert::LABELS);
            metrics::gauge!(m::SOURCE_STOPPED).set(0.0);
            tracing::info!(
                database = %cfg.postgres.database, slot = %cfg.postgres.slot,
                "{SOURCE_STARTED}"
            );
            let result = run_source(cfg, shared.clone(), stop_rx).await;
            if let Err(e) = &result {
                tracing::error!(reason = e.reason(), error = %e, "{SOURCE_STOPPED}: the other sources go on");
                shared.set_stopped(Some(e.to_string()));
                metrics::gauge!(m::SOURCE_STOPPED).set(1.0);
                metrics::gauge!(m::READY).set(0.0);
            }
            (name, generation, result)
        }));
    }

    /// A task ended: start its next config, forget a removed source, or keep it stopped.
    fn ended(&mut self, name: String, generation: u64) {
        let Some(member) = self.members.get_mut(&name) else {
            return;
        };
        if member.generation != generation {
            return;
        }
        member.running = false;
        if let Some(next) = member.next.take() {
            self.start(next);
        } else if member.removed {
            self.members.remove(&name);
            self.fleet.set(&name, None);
        }
    }

    /// Applies a reloaded config; returns (added, removed, restarted).
    fn reload(&mut self, cfg: Config) -> (usize, usize, usize) {
        let (mut added, mut removed, mut restarted) = (0, 0, 0);
        let wanted: HashMap<String, Config> =
            cfg.sources.into_iter().map(|s| (name(&s), s)).collect();
        for (name, member) in &mut self.members {
            if !wanted.contains_key(name) && !member.removed {
                member.removed = true;
                member.next = None;
                let _ = member.stop.send(true);
                removed += 1;
            }
        }
        for (name, source) in wanted {
            match self.members.get_mut(&name) {
                None => {
                    self.start(source);
                    added += 1;
                }
                Some(member) if !member.running => {
                    self.start(source);
                    restarted += 1;
                }
                Some(member) if member.removed || member.fingerprint != source.fingerprint => {
                    member.removed = false;
                    member.next = Some(source);
                    let _ = member.stop.send(true);
                    restarted += 1;
                }
                Some(_) => {}
            }
        }
        (added, removed, restarted)
    }
}

/// Runs every source of `cfg` until `shutdown` flips or each has ended; `reloads` brings
/// re-read configs (SIGHUP).
pub async fn run(
    cfg: &Config,
    mut shutdown: watch::Receiver<bool>,
    prom: Option<PrometheusHandle>,
    mut reloads: mpsc::Receiver<Config>,
) -> Result<(), RelayError> {
    let fleet = Arc::new(Fleet::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut helpers = JoinSet::new();
    if let Some(prom) = prom {
        endpoint(&mut helpers, &cfg.http, prom, fleet.clone(), &stop_rx);
    }
    let limit = usize::try_from(cfg.relay.max_sources)
        .unwrap_or(usize::MAX)
        .min(tokio::sync::Semaphore::MAX_PERMITS);
    let mut sources = Sources {
        capacity: (limit > 0).then(|| Arc::new(tokio::sync::Semaphore::new(limit))),
        budget: (cfg.relay.max_in_flight_bytes_total > 0).then(|| {
            Arc::new(crate::sink::budget::Budget::new(
                cfg.relay.max_in_flight_bytes_total,
            ))
        }),
        tasks: JoinSet::new(),
        members: HashMap::new(),
        fleet,
        generation: 0,
    };
    for source in &cfg.sources {
        sources.start(source.clone());
    }
    let mut last_error = None;
    let mut stopping = false;
    loop {
        tokio::select! {
            joined = sources.tasks.join_next() => match joined {
                None => break,
                Some(Ok((name, generation, result))) => {
                    if let Err(e) = result {
                        last_error = Some(e);
                    }
                    sources.ended(name, generation);
                }
                // A source's task panicked (printed): the others go on.
                Some(Err(e)) => tracing::error!(error = %e, "{SOURCE_STOPPED}: the source's task failed"),
            },
            _ = shutdown.changed(), if !stopping => {
                stopping = true;
                for member in sources.members.values_mut() {
                    member.next = None;
                    let _ = member.stop.send(true);
                }
            }
            Some(new) = reloads.recv(), if !stopping => {
                if new.sources.is_empty() {
                    tracing::error!("{CONFIG_RELOAD_FAILED}: the file has no [source.<name>] tables any more; restart the process to relay a single database");
                    continue;
                }
                let (added, removed, restarted) = sources.reload(new);
                tracing::info!(added, removed, restarted, "{CONFIG_RELOADED}");
            }
        }
    }
    let _ = stop_tx.send(true);
    helpers.shutdown().await;
    match last_error {
        Some(e) if !stopping => Err(e),
        _ => Ok(()),
    }
}

fn name(source: &Config) -> String {
    source.source.clone().unwrap_or_default()
}
