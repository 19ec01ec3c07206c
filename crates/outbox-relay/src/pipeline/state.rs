//! The pipeline of one replication connection, as one value: what it is wired to (config,
//! session, sink, report channel, run-wide state), the progress rule (`relay_core::progress`,
//! which decides what may be read, committed, checkpointed and confirmed), the decoder, the
//! open transaction's position and the skip and checkpoint bookkeeping ([`super::ledger`],
//! which only its own file changes). Built once per connection by [`Pipeline::new`]; its
//! methods (the loop's reactions, in the sibling modules) are the only code that changes it.
//!
//! Invariant: [`Pipeline::confirm`] hands PostgreSQL only [`Progress::take_confirmation`].

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use relay_core::{
    Lsn,
    checkpoint::Trail,
    decode::Decoder,
    progress::{Limits, Progress},
    route::{MessageRoutes, Position},
    skip::Skip,
};

use super::{ack_metrics::AckMetrics, ledger::Ledger, reports::Reports};
use crate::{
    config::{Config, Delivery},
    error::RelayError,
    observe::health::Shared,
    postgres::carry::Carry,
    postgres::failover::Memory,
    postgres::session::Session,
    sink::Sink,
    sink::checkpoint_topic::Identity,
    telemetry::events::{CHECKPOINT_SKIP_DONE, LSN_CONFIRMED},
    telemetry::metrics as m,
};

/// The pipeline of one replication connection. Lives from the moment the slot is won and the
/// checkpoint read until the connection ends (a stop, an error); the supervisor builds the
/// next one from what `carry` kept.
pub(super) struct Pipeline<'a, S, K> {
    /// The relay's configuration (the whole run).
    pub(super) cfg: &'a Config,
    /// Where records go (the whole run: one producer serves every connection).
    pub(super) sink: &'a K,
    /// The replication session (this connection only).
    pub(super) client: S,
    /// The sink's delivery reports, read only through [`Reports`] (the whole run).
    pub(super) reports: &'a mut Reports,
    /// What the supervisor keeps across connections: refused events, the last published
    /// commit (the failover memory).
    pub(super) carry: &'a mut Carry,
    /// What the run's other tasks see of this pipeline (streaming, progress markers) and tell
    /// it (the slot's WAL at risk): one per relay run, outliving the pipeline.
    pub(super) health: &'a Shared,
    /// What may be read, committed, checkpointed and confirmed ([`relay_core::progress`]).
    /// This connection: the next one starts from the slot's confirmed position.
    pub(super) progress: Progress,
    /// This connection's part of the process-wide in-flight budget
    /// (`relay.max_in_flight_bytes_total`, several sources), withdrawn when it ends.
    pub(super) budget: Option<crate::sink::budget::Share>,
    /// pgoutput to records; its relation cache is this stream's (PostgreSQL sends every
    /// relation again on a new connection).
    pub(super) decoder: Decoder,
    /// The `[[message]]` sections, by prefix (from the config; rebuilt per connection).
    pub(super) messages: MessageRoutes,
    /// The open source transaction's position: from its begin to its commit.
    pub(super) txn: Option<Position>,
    /// The `[[outbox]]` table or `message:<prefix>` of every record, when there is one only
    /// ([`only_source`]; from the config).
    pub(super) only_source: Option<String>,
    /// Where `carry`'s failover memory is kept across restarts (`relay.state_file`), for the
    /// server of this connection.
    pub(super) memory: Option<Memory>,
    /// `kafka.transactional_id` is set: records go out in Kafka transactions (config).
    pub(super) transactional: bool,
    /// `relay.delivery = "exactly-once"`: a contradicted checkpoint stops the relay (config).
    exactly_once: bool,
    /// The skip and checkpoint bookkeeping: the skip, the change index, the checkpoint trail,
    /// the primer and the running Kafka commit ([`super::ledger`]; this connection).
    pub(super) ledger: Ledger,
    /// Handles of the acknowledgement metrics (looked up once per topic, this connection).
    pub(super) acks: AckMetrics,
    /// The loop's timing: commits, checkpoints, quiet moments, back-pressure (this
    /// connection).
    pub(super) pace: Pace,
    /// Outside Kafka transactions: the producer's partition heads ([`super::head`]).
    pub(super) heads: Option<relay_core::head::Heads>,
    /// The head rule's clock starts here ([`head_clock_ms`](Self::head_clock_ms)).
    born: Instant,
    /// The last position this connection handed the session as applied ([`confirm`](Self::confirm)):
    /// what a stop's last status update must carry. `None`: nothing confirmed on this
    /// connection, so a stop waits for no status update.
    pub(super) told: Option<Lsn>,
}

/// What one connection starts from: its session, what the checkpoint said, the decoder for
/// its slot's tables and the failover memory's file.
pub(super) struct Connection<S> {
    pub(super) client: S,
    pub(super) start: Start,
    pub(super) decoder: Decoder,
    pub(super) memory: Option<Memory>,
}

/// What the start found.
pub(super) struct Start {
    /// Where PostgreSQL streams from.
    pub(super) start: Lsn,
    pub(super) skip: Skip,
    pub(super) trail: Trail,
    /// `None`: no checkpoints on this connection (at-least-once, topic unusable).
    pub(super) checkpoints: Option<Identity>,
}

/// The loop's timing state (all on tokio's clock).
pub(super) struct Pace {
    /// With transactions, the last Kafka commit, and when the quiet stream commits next.
    pub(super) last_commit: Option<Instant>,
    pub(super) quiet_commit_at: Option<Instant>,
    /// Events handled since the stream last went quiet.
    pub(super) since_quiet: u32,
    pub(super) trickle: super::trickle::Trickle,
    /// What the trickle rule last said, as this source's say in the reader thread's pacing.
    pub(super) reader: crate::postgres::reader_thread::PaceVote,
    /// Since when the in-flight limits keep the loop from reading, and the acknowledged count
    /// then (progress restarts the clock).
    pub(super) paused: Option<(Instant, u64)>,
    /// The last checkpoint without records (idle progress) or outside transactions.
    pub(super) last_checkpoint: Option<Instant>,
}

impl<'a, S: Session, K: Sink> Pipeline<'a, S, K> {
    /// The one constructor: the relay's `stream` and the loop tests both build the pipeline
    /// here.
    pub(super) fn new(
        cfg: &'a Config,
        sink: &'a K,
        reports: &'a mut Reports,
        carry: &'a mut Carry,
        health: &'a Shared,
        conn: Connection<S>,
    ) -> Self {
        let limits = Limits {
            records: cfg.relay.max_in_flight_records,
            bytes: cfg.relay.max_in_flight_bytes,
        };
        let transactional = cfg.kafka.transactional_id.is_some();
        let exactly_once = cfg.relay.delivery == Delivery::ExactlyOnce;
        let Start {
            start,
            skip,
            trail,
            checkpoints,
        } = conn.start;
        let mut progress = Progress::new(start, limits, transactional);
        if checkpoints.is_some() {
            progress = progress.with_checkpoints(exactly_once);
        }
        Self {
            cfg,
            sink,
            client: conn.client,
            reports,
            carry,
            health,
            progress,
            budget: health
                .budget()
                .cloned()
                .map(crate::sink::budget::Share::new),
            decoder: conn.decoder,
            messages: MessageRoutes::new(&cfg.message, cfg.relay.relay_headers),
            txn: None,
            only_source: only_source(cfg),
            memory: conn.memory,
            transactional,
            exactly_once,
            ledger: Ledger::new(skip, trail, checkpoints),
            acks: AckMetrics::new(),
            pace: Pace {
                last_commit: None,
                quiet_commit_at: None,
                since_quiet: 0,
                trickle: super::trickle::Trickle::default(),
                reader: crate::postgres::reader_thread::PaceVote::new(
                    cfg.postgres.is_unix_socket(),
                ),
                paused: None,
                last_checkpoint: None,
            },
            heads: (!transactional).then(relay_core::head::Heads::new),
            born: Instant::now(),
            told: None,
        }
    }

    /// Milliseconds since this pipeline was built: the head rule's clock ([`super::head`]).
    pub(super) fn head_clock_ms(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    /// The stream contradicts the checkpoint: a definite stop in exactly-once mode; in
    /// at-least-once mode a restart that skips nothing.
    pub(super) fn contradicted(&self, e: relay_core::skip::HistoryChanged) -> RelayError {
        if self.exactly_once {
            crate::error::Definite::HistoryChanged(e).into()
        } else {
            crate::error::Transient::CheckpointContradicted(e).into()
        }
    }

    /// Hands the watermark to the replication client, which sends it with its next status
    /// update.
    pub(super) fn confirm(&mut self) {
        if let Some(covered) = self.progress.release_skip(self.ledger.skip_status()) {
            tracing::info!(
                skipped = self.ledger.skipped(), covered = %covered,
                "{CHECKPOINT_SKIP_DONE}: every later change is published"
            );
        }
        let w = self.progress.take_confirmation();
        let w = if super::deliberate::on(super::deliberate::Bug::ConfirmBeforeAck) {
            Some(self.progress.received()).filter(|&r| r > self.client.last_applied_lsn())
        } else {
            w
        };
        if let Some(w) = w {
            tracing::debug!(lsn = %w, "{LSN_CONFIRMED}");
            self.client.update_applied_lsn(w);
            self.told = Some(w);
            self.carry.refusals.forget_below(w);
            metrics::gauge!(m::CONFIRMED_LSN).set(w.0 as f64);
            metrics::gauge!(m::LAST_CONFIRMATION).set(now_unix_us() as f64 / 1e6);
        }
    }

    pub(super) fn report_gauges(&self) {
        let p = &self.progress;
        metrics::gauge!(m::INFLIGHT_EVENTS).set(p.outstanding_records() as f64);
        metrics::gauge!(m::INFLIGHT_TRANSACTIONS).set(p.pending_txns() as f64);
        metrics::gauge!(m::INFLIGHT_BYTES).set(p.in_flight_bytes() as f64);
        metrics::gauge!(m::RECEIVED_LSN).set(p.received().0 as f64);
        let acked = p.acked();
        self.health
            .pipeline_progress(acked + p.outstanding_records(), acked);
        let lag = p
            .oldest_pending_commit_time()
            .map_or(0.0, |t| (now_unix_us() - t).max(0) as f64 / 1e6);
        metrics::gauge!(m::TIME_LAG_SECONDS).set(lag);
    }

    /// Writes the failover memory if `relay.state_file` is set; failures are logged.
    pub(super) async fn remember(&mut self) {
        let published = self.carry.published;
        if let Some(m) = self.memory.as_mut() {
            m.save_or_warn(published).await;
        }
    }
}

/// The one `[[outbox]]` table (`schema.table`) or `message:<prefix>` the relay publishes, if
/// it publishes one only: then a delivery report, which carries a change's position and not its
/// source, names the source all the same.
fn only_source(cfg: &Config) -> Option<String> {
    match (cfg.outbox.as_slice(), cfg.message.as_slice()) {
        ([table], []) => {
            let (schema, table) = table.qualified_name();
            Some(format!("{schema}.{table}"))
        }
        ([], [message]) => Some(message.routed_name()),
        _ => None,
    }
}

pub(super) fn now_unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}
