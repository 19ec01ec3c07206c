//! The applier (`outbox-relay apply`): the consumer half as a process. It reads the configured
//! topics in a consumer group (`read_committed`) and applies each record to the consumer's own
//! PostgreSQL in one transaction with its claim in the inbox and its partition's next position,
//! through a SQL handler per event type. Exactly once in the database, whatever Kafka
//! redelivers: a redelivered event meets its claim, a record below the stored position is
//! passed over, and positions come from the database, not from Kafka.
//!
//! ```text
//! Kafka ──reader (thread, rebalance: positions from the table)──▶ partition tasks (one per
//! partition, in order) ──txn: claim + handler + position, one COMMIT──▶ the consumer's database
//! ```
//!
//! The rules (batching around failures, positions, transient or definite) are in
//! `relay_core::apply`; docs/inbox.md is the operator's guide. The `outbox-relay` binary mounts
//! the subcommands of [`cli`]; this crate does not depend on the relay's (what both programs
//! use is `outbox_service`'s: the PostgreSQL connection section, the config loader, the HTTP
//! endpoint and console, `Backoff`).
//!
//! The map, from the bottom; a folder uses only those above it (`scripts/modcycles.py`):
//!
//! | module | what it holds |
//! |---|---|
//! | [`telemetry`] | every log event name and every metric, in one place |
//! | `config`, `error`, `record` | the config sections, `ApplyError`, a Kafka record as kept |
//! | `postgres` | the consumer's database: bookkeeping, handlers, the transaction, the pool |
//! | `partition` | one task per partition, in order; the assignment (what this instance applies) |
//! | `kafka` | the consumer on its own thread, its rebalance, the brokers' reachability |
//! | `retention` | the inbox cleanup |
//! | `operate` | `apply status`, `apply redrive`, the console's view and its document |
//! | [`cli`] | the `apply …` subcommands, on top |

pub mod cli;
mod config;
mod error;
mod kafka;
mod operate;
mod partition;
mod postgres;
mod record;
mod retention;
pub mod telemetry;

use std::sync::{Arc, atomic::AtomicBool};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;

use error::ApplyError;

use crate::{
    config::ApplyConfig,
    kafka::reader,
    operate::{console, redrive::redrive},
    partition::assignment,
    postgres::{pool, store},
    telemetry::events::{
        APPLY_INBOX_RETENTION_REFUSED, APPLY_SETUP_DONE, APPLY_STARTED, APPLY_STOPPED,
    },
};

/// Runs the applier until `shutdown` flips to true.
pub(crate) async fn run(
    cfg: ApplyConfig,
    mut shutdown: watch::Receiver<bool>,
    prom: Option<PrometheusHandle>,
) -> Result<(), ApplyError> {
    // Fail fast on missing tables and handlers that do not prepare, and on an inbox retention
    // the topics refuse (a broker that cannot be asked now is checked again later).
    drop(store::Conn::open(&cfg, "check").await?);
    match retention::once(&cfg).await {
        Ok(retention::Verdict::Refused(r)) => {
            return Err(ApplyError::Precondition(format!(
                "retention.inbox_ms is refused: {r}"
            )));
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, "{APPLY_INBOX_RETENTION_REFUSED}: not checked at start; checked again later")
        }
    }
    let cfg = Arc::new(cfg);
    let assignment = Arc::new(assignment::Assignment::default());
    let pool = Arc::new(pool::Pool::new(cfg.clone()));
    let stopping = Arc::new(AtomicBool::new(false));
    let (http_stop_tx, http_stop) = watch::channel(false);
    if let (true, Some(prom)) = (cfg.http.enabled, prom) {
        let view = console::ApplierView::new(cfg.clone(), assignment.clone());
        tokio::spawn(view.clone().refresh(http_stop.clone()));
        let console = outbox_service::console::Console::new(view);
        tokio::spawn(console.clone().sample(prom.clone(), http_stop.clone()));
        tokio::spawn(outbox_service::http::serve(
            cfg.http.listen,
            prom,
            console,
            http_stop,
        ));
    }
    let (cleanup_stop_tx, cleanup_stop) = watch::channel(false);
    tokio::spawn(retention::run(cfg.clone(), cleanup_stop));
    let reader = reader::Reader::new(cfg.clone(), pool, assignment, stopping.clone())?;
    let thread = std::thread::Builder::new()
        .name("apply-kafka".into())
        .spawn(move || reader.run())
        .map_err(|e| ApplyError::Precondition(format!("cannot start the consumer thread: {e}")))?;
    tracing::info!(group = %cfg.kafka.group_id, consumer = %cfg.apply.consumer, "{APPLY_STARTED}");
    let _ = shutdown.wait_for(|s| *s).await;
    stopping.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    let _ = http_stop_tx.send(true);
    let _ = cleanup_stop_tx.send(true);
    tracing::info!("{APPLY_STOPPED}");
    Ok(())
}

/// `apply setup`: creates the inbox, positions and dead-letter tables if missing, and prepares
/// every handler (a mistake in one fails here, naming it).
pub(crate) async fn setup(cfg: &ApplyConfig) -> Result<(), ApplyError> {
    let client = store::connect(cfg, "setup").await?;
    client
        .batch_execute(&store::ddl(cfg))
        .await
        .map_err(ApplyError::pg("creating the applier's tables"))?;
    let conn = store::Conn::prepare(cfg, client).await?;
    drop(conn);
    tracing::info!(
        inbox = %cfg.apply.inbox_table,
        offsets = %cfg.apply.offsets_table,
        dead_letter = %cfg.apply.dead_letter_table,
        handlers = cfg.handler.len(),
        "{APPLY_SETUP_DONE}"
    );
    Ok(())
}

/// `apply reset`: sets the stored position of `topic[partition]` to `to`, backwards too. Stop
/// the applier instances of this consumer first (a running one would move it forward again).
/// Records read again are absorbed by their claims; delete claims to apply them again.
pub(crate) async fn reset(
    cfg: &ApplyConfig,
    topic: &str,
    partition: i32,
    to: i64,
) -> Result<Option<i64>, ApplyError> {
    let conn = store::Conn::open(cfg, "reset").await?;
    let before = conn
        .position(topic, partition, false)
        .await
        .map_err(ApplyError::pg("reading the position"))?;
    conn.reset_position(topic, partition, to)
        .await
        .map_err(ApplyError::pg("storing the position"))?;
    Ok(before)
}
