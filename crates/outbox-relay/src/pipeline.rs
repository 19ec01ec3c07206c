//! The one loop that owns the replication connection:
//!
//! ```text
//! replication stream ─▶ decode ─▶ route ─▶ Kafka (in source order)
//!        ▲                                   │ delivery reports (any order)
//!        └── update_applied_lsn(watermark) ◀─ AckTracker
//! ```
//!
//! Progress rule: the only LSN ever confirmed is [`AckTracker::watermark`], the end of the
//! longest prefix of transactions Kafka fully acknowledged (or an idle keepalive behind it).
//! Backpressure: when too many records or bytes are in flight the loop stops reading the stream;
//! pgwire-replication then stops reading the socket but keeps sending status updates, so
//! PostgreSQL keeps the WAL and the connection stays up. A delivery error freezes the watermark
//! and ends the loop; the supervisor restarts from the last confirmed LSN.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pgwire_replication::{PgWireError, ReplicationClient, ReplicationConfig, ReplicationEvent};
use relay_core::{
    Lsn,
    deadletter::{self, Refusal, Refusals},
    decode::{Decoded, Decoder},
    route::{Position, Record},
    watermark::AckTracker,
};
use tokio::sync::{mpsc, watch};

use crate::{
    config::{Config, PoisonPolicy},
    error::RelayError,
    failover::{Memory, check_system, check_timeline, recall},
    metrics as m,
    setup::SlotInfo,
    sink::{Delivered, KafkaSink, Origin, delivery_error},
    stop::unless_stopped,
};

/// What the supervisor keeps across pipeline restarts.
#[derive(Debug, Default)]
pub struct Carry {
    /// Events Kafka refused for good (dead-letter policy).
    pub refusals: Refusals,
    /// The server's system identifier and the timeline last streamed from.
    pub identity: Option<(String, u32)>,
    /// Commit LSN of the last transaction with a record handed to Kafka (`ZERO`: none yet);
    /// a promoted server must have it in its history ([`relay_core::timeline`]).
    pub published: Lsn,
}

/// Microseconds between 1970-01-01 and 2000-01-01 (PostgreSQL's epoch).
const PG_EPOCH_UNIX_US: i64 = 946_684_800_000_000;

/// Status update interval: the configured one, else `min(1 s, wal_sender_timeout / 2)`.
pub fn status_interval(cfg: &Config, wal_sender_timeout: Duration) -> Duration {
    match cfg.relay.status_interval_ms {
        Some(ms) => Duration::from_millis(ms.max(10)),
        None if wal_sender_timeout.is_zero() => Duration::from_secs(1),
        None => (wal_sender_timeout / 2).min(Duration::from_secs(1)),
    }
}

struct State<'a> {
    tracker: AckTracker,
    decoder: Decoder,
    confirmed: Lsn,
    received: Lsn,
    in_flight_bytes: u64,
    txn: Option<Position>,
    policy: PoisonPolicy,
    dead_letter_topic: String,
    /// Events Kafka refused for good, kept by the supervisor across restarts.
    refusals: &'a mut Refusals,
    /// [`Carry::published`].
    published: &'a mut Lsn,
    /// Where [`Carry`]'s failover memory is kept across restarts (`relay.state_file`).
    memory: Option<Memory>,
    /// `kafka.transactional_id` is set: records go out in Kafka transactions.
    transactional: bool,
    /// With transactions, while the open Kafka transaction holds records: the watermark when
    /// it got its first one. Every transaction below it had its records in committed Kafka
    /// transactions; nothing beyond it may be confirmed before the next commit, because an
    /// aborted transaction's records are invisible to read-committed consumers.
    confirm_cap: Option<Lsn>,
    /// Records Kafka acknowledged so far (progress while the loop waits for Kafka).
    acked: u64,
}

/// How long the graceful close of the replication session may take at a stop.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// With `kafka.transactional_id`, when the pipeline ends on an error: aborts the open Kafka
/// transaction, so read-committed consumers do not wait behind it for up to
/// `transaction.timeout.ms` (after a definite error nobody else would end it). Its records
/// were not confirmed and are sent again after a restart. A fenced producer has nothing to
/// abort: the instance that fenced it did.
async fn abort_open_transaction(cfg: &Config, sink: &KafkaSink, cause: &RelayError) {
    if matches!(cause, RelayError::ProducerFenced(_)) {
        return;
    }
    let limit = cfg.shutdown_timeout().min(Duration::from_secs(10));
    match tokio::time::timeout(limit, sink.abort(limit)).await {
        Ok(Ok(())) => tracing::info!(
            "kafka_transaction_aborted: its records stay unconfirmed and are sent again"
        ),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "kafka_transaction_abort_failed: Kafka ends it after transaction.timeout.ms")
        }
        Err(_) => tracing::warn!(
            "kafka_transaction_abort_failed: Kafka did not answer; it ends the transaction after transaction.timeout.ms"
        ),
    }
}

/// Largest value kept in a dead-letter record (Kafka's default limit is about 1 MB).
const MAX_DEAD_LETTER_VALUE: usize = 900_000;

/// Streams until shutdown (`Ok`) or a failure (`Err`, nothing confirmed past the failure).
pub async fn stream(
    cfg: &Config,
    slot: &SlotInfo,
    sink: &KafkaSink,
    mut reports: mpsc::UnboundedReceiver<Delivered>,
    shutdown: &mut watch::Receiver<bool>,
    carry: &mut Carry,
) -> Result<(), RelayError> {
    let interval = status_interval(cfg, slot.wal_sender_timeout);
    let pg = &cfg.postgres;
    let password = cfg
        .postgres_password()?
        .map(|s| s.expose().to_string())
        .unwrap_or_default();
    let rcfg = ReplicationConfig::new(
        pg.host.clone(),
        pg.user.clone(),
        password,
        pg.database.clone(),
        pg.slot.clone(),
        pg.publication.as_str(),
    )
    .with_port(pg.port)
    .with_tls(crate::tls::replication_tls(cfg))
    .with_start_lsn(pgwire_replication::Lsn::ZERO)
    .with_status_interval(interval)
    .with_wakeup_interval(interval)
    .with_buffer_size(cfg.relay.buffer_events.max(1))
    .with_options("-c datestyle=ISO -c timezone=UTC -c extra_float_digits=3")
    .with_application_name(pg.application_name.clone());

    // A server that accepts the connection and never answers must not delay a stop.
    let opened = unless_stopped(shutdown, open(cfg, rcfg, carry)).await;
    let Some(opened) = opened else {
        tracing::info!("shutdown_complete: stopped before streaming (PostgreSQL did not answer)");
        return Ok(());
    };
    let (mut client, memory) = opened?;
    // The slot is ours: only now fence the producers of earlier holders (never the active
    // instance's while this one merely waits for the slot).
    if let Some(id) = &cfg.kafka.transactional_id {
        // This waits for Kafka's transaction coordinator; a stop must not wait for it.
        tokio::select! {
            r = sink.fence_and_begin(transaction_timeout(cfg)) => r?,
            _ = shutdown.changed() => {
                client.abort();
                tracing::info!("shutdown_complete: stopped before streaming (Kafka did not answer)");
                return Ok(());
            }
        }
        tracing::info!(transactional_id = %id, "kafka_producer_fenced_others: earlier producers with this transactional id can no longer write");
    }
    crate::health::set_streaming(true);
    tracing::info!(
        slot = %pg.slot, confirmed_flush = %slot.confirmed_flush,
        status_interval_ms = interval.as_millis() as u64, "streaming_started"
    );

    let mut st = State {
        tracker: AckTracker::new(slot.confirmed_flush),
        decoder: Decoder::new(&cfg.outbox, cfg.relay.relay_headers)
            .with_oids(slot.outbox_oids.clone()),
        confirmed: slot.confirmed_flush,
        received: slot.confirmed_flush,
        in_flight_bytes: 0,
        txn: None,
        policy: cfg.relay.on_poison,
        dead_letter_topic: cfg.relay.dead_letter_topic.clone(),
        refusals: &mut carry.refusals,
        published: &mut carry.published,
        memory,
        transactional: cfg.kafka.transactional_id.is_some(),
        confirm_cap: None,
        acked: 0,
    };
    // A state file that cannot be written is found now, not after a failover.
    let published = *st.published;
    st.memory
        .as_mut()
        .map_or(Ok(()), |m| m.save(published))
        .map_err(|e| {
            RelayError::Precondition(format!(
                "cannot write relay.state_file {}: {e}; fix its directory's permissions or space, \
             or remove the option",
                cfg.relay
                    .state_file
                    .as_deref()
                    .unwrap_or(std::path::Path::new(""))
                    .display()
            ))
        })?;
    let result = run_loop(cfg, sink, &mut client, &mut st, &mut reports, shutdown).await;
    crate::health::set_streaming(false);
    remember(&mut st);
    match result {
        Ok(()) => {
            drain(cfg, sink, &mut client, &mut st, &mut reports, interval).await?;
            // A server that stopped answering would keep the graceful close waiting.
            if tokio::time::timeout(CLOSE_TIMEOUT, client.shutdown())
                .await
                .is_err()
            {
                client.abort();
            }
            tracing::info!(confirmed = %st.confirmed, "shutdown_complete");
            Ok(())
        }
        Err(e) => {
            st.tracker.fail();
            client.abort();
            if st.transactional {
                abort_open_transaction(cfg, sink, &e).await;
            }
            Err(e)
        }
    }
}

/// Connects the replication session, checks the server's identity and timeline (gated:
/// before START_REPLICATION) and starts streaming.
async fn open(
    cfg: &Config,
    rcfg: ReplicationConfig,
    carry: &mut Carry,
) -> Result<(ReplicationClient, Option<Memory>), RelayError> {
    let mut client = ReplicationClient::connect_gated(rcfg)
        .await
        .map_err(|e| classify(e, cfg))?;
    let id = client
        .identify_system()
        .await
        .map_err(|e| classify(e, cfg))?;
    recall(cfg, carry)?;
    let seen = carry.identity.as_ref().map(|(s, t)| (s.as_str(), *t));
    check_system(cfg, seen.map(|(s, _)| s), &id.system_id)?;
    if let Some((_, streamed)) = seen {
        check_timeline(cfg, &mut client, streamed, carry.published, id.timeline).await?;
    } else {
        tracing::info!(system_id = %id.system_id, timeline = id.timeline, "server_identified");
    }
    carry.identity = Some((id.system_id.clone(), id.timeline));
    let memory = cfg
        .relay
        .state_file
        .clone()
        .map(|path| Memory::new(path, &id.system_id, id.timeline));
    client.start().await.map_err(|e| classify(e, cfg))?;
    client.wait_started().await.map_err(|e| classify(e, cfg))?;
    Ok((client, memory))
}

async fn run_loop(
    cfg: &Config,
    sink: &KafkaSink,
    client: &mut ReplicationClient,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), RelayError> {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut commit_tick =
        tokio::time::interval(Duration::from_millis(cfg.kafka.transaction_interval_ms));
    commit_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let coalesce = Duration::from_micros(cfg.relay.read_coalesce_us);
    // Events handled since the stream last went quiet.
    let mut since_quiet = 0u32;
    // Since when the in-flight limits keep the loop from reading, and the acknowledged count
    // then (progress restarts the clock).
    let mut paused: Option<(Instant, u64)> = None;
    let release_after = Duration::from_millis(cfg.relay.backpressure_release_ms);
    loop {
        let can_read = st.tracker.outstanding_records() < cfg.relay.max_in_flight_records
            && st.in_flight_bytes < cfg.relay.max_in_flight_bytes;
        paused = match paused {
            _ if can_read => None,
            Some((_, acked)) if acked != st.acked => Some((Instant::now(), st.acked)),
            None => Some((Instant::now(), st.acked)),
            p => p,
        };
        tokio::select! {
            biased;
            _ = shutdown.changed() => return Ok(()),
            // Timers before data: they are ready only when due, and during a catch-up the
            // stream and the reports are always ready, so after them the timers would starve
            // (no commit, no state-file write for as long as the backlog lasts).
            _ = commit_tick.tick(), if st.confirm_cap.is_some() => {
                // A commit waits for Kafka, which may be away: a stop must not wait for it.
                tokio::select! {
                    r = commit(cfg, sink, client, st, reports) => r?,
                    _ = shutdown.changed() => return Ok(()),
                }
            }
            _ = tick.tick() => {
                if let Some(fatal) = sink.fatal_error() {
                    return Err(fatal);
                }
                // While waiting for Kafka the loop reads nothing, so a dead replication
                // connection would go unnoticed: the slot may already be another instance's.
                // Stop now; dropping the producer purges what it still holds.
                if !can_read && !client.is_running() {
                    return Err(RelayError::Replication(
                        "the replication connection closed while the relay waited for Kafka".into(),
                    ));
                }
                if let Some((since, _)) = paused {
                    let waited = since.elapsed();
                    let at_risk = crate::health::wal_at_risk();
                    if at_risk || (!release_after.is_zero() && waited >= release_after) {
                        return Err(RelayError::BackpressureReleased {
                            waited_ms: waited.as_millis() as u64,
                            wal_at_risk: at_risk,
                        });
                    }
                }
                remember(st);
                report_gauges(st);
            }
            Some(d) = reports.recv() => {
                delivered(sink, st, reports, d).await?;
                // Drain whatever else is ready before confirming once.
                while let Ok(d) = reports.try_recv() {
                    delivered(sink, st, reports, d).await?;
                }
                confirm(client, st);
            }
            ev = client.recv(), if can_read => match ev {
                Ok(Some(ev)) => {
                    since_quiet += 1;
                    // Handling an event can wait for Kafka (a full queue, a suspect record's
                    // report): a stop must not wait for it.
                    let stop = shutdown.clone();
                    match unless_stopped(&stop, on_event(sink, client, st, reports, ev)).await {
                        Some(r) => r?,
                        None => return Ok(()),
                    }
                }
                Ok(None) => return Err(RelayError::Replication("the server closed the replication stream".into())),
                Err(e) => return Err(classify(e, cfg)),
            },
            // Nothing is ready: the stream went quiet (unless the task merely ran out of its
            // co-operative budget, which a busy catch-up does every ~128 events).
            _ = std::future::ready(()), if since_quiet > 0 => {
                if since_quiet < COALESCE_BELOW && tokio::task::coop::has_budget_remaining() {
                    coalesce_reads(coalesce);
                }
                since_quiet = 0;
            }
        }
    }
}

/// A quiet moment after fewer events than this is a trickle worth coalescing.
const COALESCE_BELOW: u32 = 64;

/// Read-side coalescing (`relay.read_coalesce_us`). At a steady rate the walsender sends every
/// transaction as it commits, and the relay would wake up for each one: on two cores those
/// wake-ups cost more CPU than the events (bench/notes.md). Blocking this thread briefly — the
/// runtime is current-thread, so the replication reader and the pipeline both pause — lets the
/// next transactions pile up in the socket and arrive in one read. Delivery reports and status
/// updates wait as long at most; librdkafka's threads are not paused.
fn coalesce_reads(pause: Duration) {
    if !pause.is_zero() {
        std::thread::sleep(pause);
    }
}

/// One delivery report. With transactions a failed transaction purges every record it held:
/// their reports all say "purged", and the one that explains the failure (a record of the topic
/// the coordinator refused) may come later. It is looked for among the rest before the
/// pipeline stops, so that the poison policy acts on the record at fault.
async fn delivered(
    sink: &KafkaSink,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    d: Delivered,
) -> Result<(), RelayError> {
    let d = sink.attribute(d);
    if !(st.transactional && d.is_purged()) {
        return on_delivery(st, d);
    }
    let consequence = on_delivery(st, d);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while sink.in_flight() > 0 || !reports.is_empty() {
        match tokio::time::timeout_at(deadline, reports.recv()).await {
            Ok(Some(d)) => {
                let d = sink.attribute(d);
                if !d.is_purged() {
                    on_delivery(st, d)?;
                }
            }
            _ => break,
        }
    }
    consequence
}

fn on_delivery(st: &mut State<'_>, d: Delivered) -> Result<(), RelayError> {
    match d.outcome {
        Ok(()) => {
            st.tracker.ack(d.origin.tx)?;
            st.acked += 1;
            st.in_flight_bytes -= d.bytes;
            metrics::counter!(m::EVENTS_PRODUCED, "topic" => d.topic.clone()).increment(1);
            metrics::counter!(m::BYTES_PRODUCED, "topic" => d.topic).increment(d.bytes);
            let lag_us = now_unix_us() - d.origin.commit_time_unix_us;
            metrics::histogram!(m::COMMIT_TO_ACK_SECONDS).record(lag_us.max(0) as f64 / 1e6);
            Ok(())
        }
        Err(e) => {
            st.tracker.fail();
            metrics::counter!(m::DELIVERY_ERRORS).increment(1);
            let err = delivery_error(&e, &d.topic);
            if st.policy == PoisonPolicy::DeadLetter
                && matches!(err, RelayError::DeliveryDefinite { .. })
                && d.topic != st.dead_letter_topic
            {
                // Restart from the confirmed LSN. The broker refuses whole batches, so this
                // event is only a suspect: when it comes round again it is sent alone, and
                // dead-lettered in its place only if refused again.
                let reason = e.to_string();
                st.refusals
                    .suspect(d.origin.commit_lsn, d.origin.seq, reason.clone());
                return Err(RelayError::DeadLetterPending {
                    commit_lsn: d.origin.commit_lsn,
                    seq: d.origin.seq,
                    reason,
                });
            }
            Err(err)
        }
    }
}

/// Counts one more record of the open transaction in the tracker and the failover memory;
/// what travels with it through the producer.
fn next_record(st: &mut State<'_>, pos: Position) -> Result<Origin, RelayError> {
    let tx = st.tracker.add_record()?;
    *st.published = pos.commit_lsn;
    Ok(Origin {
        tx,
        commit_lsn: pos.commit_lsn,
        seq: pos.seq,
        commit_time_unix_us: pos.commit_time_unix_us,
    })
}

/// Hands one record of the open transaction to Kafka. Under the dead-letter policy a record
/// Kafka refuses at once (larger than `message.max.bytes`, say) is replaced by its
/// dead-letter record.
async fn produce(
    sink: &KafkaSink,
    st: &mut State<'_>,
    rec: Record,
    pos: Position,
) -> Result<(), RelayError> {
    let origin = next_record(st, pos)?;
    let sent = match sink.send(&rec, origin).await {
        Err(e @ RelayError::DeliveryDefinite { .. })
            if st.policy == PoisonPolicy::DeadLetter && rec.topic != st.dead_letter_topic =>
        {
            let dlq = dead_letter_for(st, &rec, &e.to_string(), pos);
            sink.send(&dlq, origin).await?;
            dlq
        }
        other => {
            other?;
            rec
        }
    };
    st.in_flight_bytes += record_bytes(&sent);
    handed_over(st);
    Ok(())
}

/// A record of the open source transaction is in Kafka's hands.
fn handed_over(st: &mut State<'_>) {
    if st.transactional && st.confirm_cap.is_none() {
        st.confirm_cap = Some(st.tracker.watermark());
    }
    if let Some(p) = st.txn.as_mut() {
        p.seq += 1;
    }
}

/// With `kafka.transactional_id`: commits the open Kafka transaction, after which its
/// records' LSNs may be confirmed.
async fn commit(
    cfg: &Config,
    sink: &KafkaSink,
    client: &ReplicationClient,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
) -> Result<(), RelayError> {
    let started = Instant::now();
    let result = sink.commit_and_begin(transaction_timeout(cfg)).await;
    tracing::debug!(
        elapsed_us = started.elapsed().as_micros() as u64,
        ok = result.is_ok(),
        "kafka_transaction_ended"
    );
    let outcome = if result.is_ok() {
        "committed"
    } else {
        "failed"
    };
    metrics::counter!(m::KAFKA_TRANSACTIONS, "result" => outcome).increment(1);
    // The reports of the transaction's records first: a record Kafka refused is why a commit
    // fails, and it decides what happens next (the poison policy, a fenced producer).
    while let Ok(d) = reports.try_recv() {
        delivered(sink, st, reports, d).await?;
    }
    result?;
    st.confirm_cap = None;
    confirm(client, st);
    Ok(())
}

/// How long a transaction call may block: Kafka's own transaction timeout (60 s by default)
/// bounds how long an open transaction can live anyway.
fn transaction_timeout(cfg: &Config) -> Duration {
    Duration::from_millis(cfg.kafka.connect_timeout_ms.max(30_000))
}

/// Sends a record Kafka refused in a batch on its own: waits until nothing else is in flight,
/// sends it, and waits for its report. Accepted: it was innocent. Refused again: it goes to the
/// dead-letter topic in its place (same position, same transaction).
async fn produce_alone(
    sink: &KafkaSink,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    rec: Record,
    pos: Position,
) -> Result<(), RelayError> {
    while st.tracker.outstanding_records() > 0 {
        let d = reports.recv().await.ok_or_else(producer_gone)?;
        delivered(sink, st, reports, d).await?;
    }
    let origin = next_record(st, pos)?;
    st.in_flight_bytes += record_bytes(&rec);
    sink.send(&rec, origin).await?;
    let d = sink.attribute(reports.recv().await.ok_or_else(producer_gone)?);
    debug_assert_eq!(
        (d.origin.commit_lsn, d.origin.seq),
        (pos.commit_lsn, pos.seq)
    );
    match &d.outcome {
        Ok(()) => {
            st.refusals.clear(pos.commit_lsn, pos.seq);
            on_delivery(st, d)?;
        }
        Err(e)
            if matches!(
                delivery_error(e, &d.topic),
                RelayError::DeliveryDefinite { .. }
            ) =>
        {
            // Refused again: it is poison. The gapless guarantee made the producer's error
            // fatal, so the dead-letter record goes out after a restart, with a new producer,
            // in the refused record's place.
            let reason = e.to_string();
            st.refusals.confirm(pos.commit_lsn, pos.seq, reason.clone());
            st.tracker.fail();
            return Err(RelayError::DeadLetterPending {
                commit_lsn: pos.commit_lsn,
                seq: pos.seq,
                reason,
            });
        }
        Err(_) => on_delivery(st, d)?,
    }
    handed_over(st);
    Ok(())
}

fn producer_gone() -> RelayError {
    RelayError::KafkaSetup("the producer's delivery reports stopped".into())
}

fn record_bytes(rec: &Record) -> u64 {
    (rec.key.len() + rec.value.as_ref().map_or(0, |v| v.len())) as u64
}

/// The dead-letter record that replaces a record Kafka refused, counted and logged.
fn dead_letter_for(st: &State<'_>, rec: &Record, reason: &str, pos: Position) -> Record {
    dead_lettered(reason, pos);
    deadletter::from_refused(
        rec,
        reason,
        pos,
        &st.dead_letter_topic,
        MAX_DEAD_LETTER_VALUE,
    )
}

fn dead_lettered(reason: &str, pos: Position) {
    metrics::counter!(m::DEAD_LETTERED).increment(1);
    tracing::warn!(
        commit_lsn = %pos.commit_lsn, seq = pos.seq, reason,
        "event_dead_lettered: published to the dead-letter topic instead of its own"
    );
}

async fn on_event(
    sink: &KafkaSink,
    client: &ReplicationClient,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    ev: ReplicationEvent,
) -> Result<(), RelayError> {
    match ev {
        ReplicationEvent::Begin {
            final_lsn,
            commit_time_micros,
            ..
        } => {
            let commit_lsn = Lsn(final_lsn.as_u64());
            let commit_time_unix_us = commit_time_micros + PG_EPOCH_UNIX_US;
            st.tracker.begin(commit_lsn, commit_time_unix_us)?;
            st.txn = Some(Position {
                commit_lsn,
                commit_time_unix_us,
                seq: 0,
            });
        }
        ReplicationEvent::XLogData { data, wal_end, .. } => {
            st.received = st.received.max(Lsn(wal_end.as_u64()));
            // Relation messages may come outside a transaction; they need no position.
            let pos = st.txn.unwrap_or(Position {
                commit_lsn: Lsn::ZERO,
                commit_time_unix_us: 0,
                seq: 0,
            });
            match st.decoder.decode(data, pos)? {
                Decoded::Record(rec) => match st.refusals.get(pos.commit_lsn, pos.seq).cloned() {
                    None => produce(sink, st, rec, pos).await?,
                    Some(Refusal::Suspect(_)) => produce_alone(sink, st, reports, rec, pos).await?,
                    Some(Refusal::Confirmed(reason)) => {
                        let dlq = dead_letter_for(st, &rec, &reason, pos);
                        produce(sink, st, dlq, pos).await?;
                    }
                },
                Decoded::LogicalMessage { prefix, .. } => {
                    tracing::trace!(prefix = %prefix, "logical_message_ignored");
                }
                Decoded::Poison(p) => match st.policy {
                    PoisonPolicy::Halt => {
                        return Err(RelayError::Poison {
                            table: p.table,
                            reason: p.error.to_string(),
                        });
                    }
                    PoisonPolicy::DeadLetter => {
                        dead_lettered(&p.error.to_string(), pos);
                        let dlq = deadletter::from_poison(&p, pos, &st.dead_letter_topic);
                        produce(sink, st, dlq, pos).await?;
                    }
                },
                Decoded::OutboxRenamed { configured, now } => {
                    tracing::warn!(
                        configured = %configured, now = %now,
                        "outbox_table_renamed: the outbox table was renamed while in the \
                         publication; its rows are still published with its [[outbox]] mapping \
                         (matched by OID). Point [[outbox]] table at the new name"
                    );
                }
                Decoded::Nothing => {}
            }
        }
        ReplicationEvent::Commit { lsn, end_lsn, .. } => {
            st.received = st.received.max(Lsn(end_lsn.as_u64()));
            st.tracker
                .commit(Lsn(lsn.as_u64()), Lsn(end_lsn.as_u64()))?;
            st.txn = None;
            confirm(client, st);
        }
        ReplicationEvent::KeepAlive { wal_end, .. } => {
            st.received = st.received.max(Lsn(wal_end.as_u64()));
            st.tracker.keepalive(Lsn(wal_end.as_u64()));
            confirm(client, st);
        }
        ReplicationEvent::Message { prefix, .. } => {
            tracing::trace!(prefix = %prefix, "logical_message_ignored");
        }
        ReplicationEvent::StoppedAt { .. } => {}
    }
    Ok(())
}

/// Hands the watermark to the replication client, which sends it with its next status update.
fn confirm(client: &ReplicationClient, st: &mut State<'_>) {
    let w = match st.confirm_cap {
        Some(limit) => st.tracker.watermark().min(limit),
        None => st.tracker.watermark(),
    };
    if w > st.confirmed {
        client.update_applied_lsn(pgwire_replication::Lsn::from_u64(w.0));
        st.confirmed = w;
        st.refusals.forget_below(w);
        metrics::gauge!(m::CONFIRMED_LSN).set(w.0 as f64);
    }
}

fn report_gauges(st: &State<'_>) {
    metrics::gauge!(m::INFLIGHT_EVENTS).set(st.tracker.outstanding_records() as f64);
    metrics::gauge!(m::INFLIGHT_TRANSACTIONS).set(st.tracker.pending_txns() as f64);
    metrics::gauge!(m::RECEIVED_LSN).set(st.received.0 as f64);
    let lag = st
        .tracker
        .oldest_pending_commit_time()
        .map_or(0.0, |t| (now_unix_us() - t).max(0) as f64 / 1e6);
    metrics::gauge!(m::TIME_LAG_SECONDS).set(lag);
}

/// Graceful stop: read nothing more, wait (bounded) for in-flight acks, confirm, and make sure
/// the final status update left before closing.
async fn drain(
    cfg: &Config,
    sink: &KafkaSink,
    client: &mut ReplicationClient,
    st: &mut State<'_>,
    reports: &mut mpsc::UnboundedReceiver<Delivered>,
    interval: Duration,
) -> Result<(), RelayError> {
    let deadline = tokio::time::Instant::now() + cfg.shutdown_timeout();
    tracing::info!(
        in_flight = st.tracker.outstanding_records(),
        "shutdown_draining"
    );
    while st.tracker.outstanding_records() > 0 {
        tokio::select! {
            Some(d) = reports.recv() => on_delivery(st, d)?,
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(
                    in_flight = st.tracker.outstanding_records(),
                    "shutdown_timeout: unacknowledged events stay unconfirmed and will be sent again"
                );
                break;
            }
        }
    }
    if st.confirm_cap.is_some() {
        // Commit what was acknowledged, within the shutdown timeout; if that fails it stays
        // unconfirmed and is sent again.
        let committed =
            tokio::time::timeout_at(deadline, commit(cfg, sink, client, st, reports)).await;
        if let Err(e) = committed
            .map_err(|_| RelayError::KafkaTransaction("shutdown timeout".into()))
            .and_then(|r| r)
        {
            tracing::warn!(error = %e, "shutdown_commit_failed: the last Kafka transaction's events stay unconfirmed and will be sent again");
        }
    }
    confirm(client, st);
    let target = st.confirmed.0;
    let wait_until = Instant::now() + interval * 2 + Duration::from_secs(1);
    while client.metrics().last_applied_lsn().as_u64() < target && Instant::now() < wait_until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

fn now_unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Sorts replication errors into "wait and retry" and "tell the operator".
/// Writes the failover memory if `relay.state_file` is set; failures are logged.
fn remember(st: &mut State<'_>) {
    let published = *st.published;
    if let Some(m) = st.memory.as_mut() {
        m.save_or_warn(published);
    }
}

pub(crate) fn classify(e: PgWireError, cfg: &Config) -> RelayError {
    let pg = &cfg.postgres;
    let text = e.to_string();
    let sqlstate = text
        .rsplit_once("(SQLSTATE ")
        .and_then(|(_, s)| s.get(..5))
        .unwrap_or("");
    match sqlstate {
        "55006" => RelayError::SlotBusy {
            slot: pg.slot.clone(),
            detail: text,
        },
        "42704" => RelayError::Precondition(format!(
            "{text}: the slot or publication is missing; run `outbox-relay setup` (see \
             docs/operations.md before re-creating a slot that existed)"
        )),
        "28P01" | "28000" => RelayError::Precondition(format!(
            "PostgreSQL rejected the replication connection of user {:?}: {text}; check the \
             password and pg_hba.conf",
            pg.user
        )),
        "55000" => RelayError::ReplicationDefinite(format!(
            "{text}; the slot can no longer be used (invalidated?); outbox-relay will not \
             re-create it silently: see `outbox-relay setup --recreate-slot`"
        )),
        "42501" => RelayError::Precondition(format!(
            "{text}: grant the role REPLICATION (docs/security.md)"
        )),
        _ if e.is_auth() || e.is_tls() || e.is_message_too_large() => {
            RelayError::ReplicationDefinite(text)
        }
        _ => RelayError::Replication(text),
    }
}
