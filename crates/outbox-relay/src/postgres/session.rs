//! The replication source: pgwire-replication's session set up for the relay (connection
//! options, status interval, the gated identify → check → START_REPLICATION handshake), the
//! classification of its errors, and PostgreSQL's time epoch.

use std::time::Duration;

use bytes::Bytes;
use pgwire_replication::{PgWireError, ReplicationClient, ReplicationConfig, ReplicationEvent};
use relay_core::{Lsn, platform::Platform};

use crate::{
    config::Config,
    error::{Definite, RelayError, Transient},
    postgres::carry::Carry,
    postgres::control,
    postgres::failover::{Memory, check_system, check_timeline, recall},
    telemetry::events::SERVER_IDENTIFIED,
};

/// One message of the replication stream as the pipeline reads it: pgwire-replication's
/// event with the core's types (LSNs as `relay_core::Lsn`, commit times in Unix microseconds),
/// converted here, at the edge, once.
#[derive(Debug, Clone)]
pub(crate) enum StreamEvent {
    /// A transaction begins; it commits at `commit_lsn`.
    Begin {
        commit_lsn: Lsn,
        commit_time_unix_us: i64,
    },
    /// A pgoutput message (relation, row change, ...); the stream reached `wal_end`.
    Data { data: Bytes, wal_end: Lsn },
    /// The transaction committed at `lsn` ends at `end_lsn`.
    Commit { lsn: Lsn, end_lsn: Lsn },
    /// The server's keepalive: the stream reached `wal_end`.
    KeepAlive { wal_end: Lsn },
    /// A logical message, decoded by pgwire-replication.
    Message {
        transactional: bool,
        lsn: Lsn,
        prefix: String,
        content: Bytes,
    },
    /// The stream stopped at a requested LSN (the relay requests none).
    StoppedAt,
}

impl From<ReplicationEvent> for StreamEvent {
    fn from(ev: ReplicationEvent) -> Self {
        let lsn = |l: pgwire_replication::Lsn| Lsn(l.as_u64());
        match ev {
            ReplicationEvent::Begin {
                final_lsn,
                commit_time_micros,
                ..
            } => StreamEvent::Begin {
                commit_lsn: lsn(final_lsn),
                commit_time_unix_us: commit_time_micros + PG_EPOCH_UNIX_US,
            },
            ReplicationEvent::XLogData { data, wal_end, .. } => StreamEvent::Data {
                data,
                wal_end: lsn(wal_end),
            },
            ReplicationEvent::Commit {
                lsn: at, end_lsn, ..
            } => StreamEvent::Commit {
                lsn: lsn(at),
                end_lsn: lsn(end_lsn),
            },
            ReplicationEvent::KeepAlive { wal_end, .. } => StreamEvent::KeepAlive {
                wal_end: lsn(wal_end),
            },
            ReplicationEvent::Message {
                transactional,
                prefix,
                content,
                lsn: at,
            } => StreamEvent::Message {
                transactional,
                lsn: lsn(at),
                prefix,
                content,
            },
            ReplicationEvent::StoppedAt { .. } => StreamEvent::StoppedAt,
        }
    }
}

/// What the pipeline's loop needs of a replication session: the seam that lets tests feed the
/// loop without a server (`pipeline/tests.rs`).
pub(crate) trait Session {
    /// The next event; `Ok(None)` when the server closed the stream.
    async fn recv(&mut self) -> Result<Option<StreamEvent>, PgWireError>;
    /// The LSN to confirm with the next status update.
    fn update_applied_lsn(&self, lsn: relay_core::Lsn);
    /// The LSN the last status update sent.
    fn last_applied_lsn(&self) -> relay_core::Lsn;
    /// The session's connection is still up.
    fn is_running(&self) -> bool;
}

impl Session for ReplicationClient {
    async fn recv(&mut self) -> Result<Option<StreamEvent>, PgWireError> {
        Ok(ReplicationClient::recv(self).await?.map(StreamEvent::from))
    }
    fn update_applied_lsn(&self, lsn: relay_core::Lsn) {
        ReplicationClient::update_applied_lsn(self, pgwire_replication::Lsn::from_u64(lsn.0));
    }
    fn last_applied_lsn(&self) -> relay_core::Lsn {
        relay_core::Lsn(self.metrics().last_applied_lsn().as_u64())
    }
    fn is_running(&self) -> bool {
        ReplicationClient::is_running(self)
    }
}

/// Microseconds between 1970-01-01 and 2000-01-01 (PostgreSQL's epoch).
pub(crate) const PG_EPOCH_UNIX_US: i64 = 946_684_800_000_000;

/// Status update interval: the configured one, else `min(1 s, wal_sender_timeout / 2)`.
pub(crate) fn status_interval(cfg: &Config, wal_sender_timeout: Duration) -> Duration {
    match cfg.relay.status_interval_ms {
        Some(ms) => Duration::from_millis(ms.max(10)),
        None if wal_sender_timeout.is_zero() => Duration::from_secs(1),
        None => (wal_sender_timeout / 2).min(Duration::from_secs(1)),
    }
}

/// How long the graceful close of the replication session may take at a stop.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The replication session's settings: the slot and publication, TLS, the status interval,
/// and session options that make the text of every value independent of the server's
/// settings (ISO dates, UTC, exact floats).
pub(crate) fn replication_config(
    cfg: &Config,
    interval: Duration,
) -> Result<ReplicationConfig, RelayError> {
    let pg = &cfg.postgres;
    let password = cfg
        .postgres_password()?
        .map(|s| s.expose().to_string())
        .unwrap_or_default();
    Ok(ReplicationConfig::new(
        pg.host.clone(),
        pg.user.clone(),
        password,
        pg.database.clone(),
        pg.slot.clone(),
        pg.publication.as_str(),
    )
    .with_port(pg.port)
    .with_tls(crate::postgres::tls::replication_tls(cfg))
    .with_start_lsn(pgwire_replication::Lsn::ZERO)
    .with_status_interval(interval)
    .with_wakeup_interval(interval)
    .with_buffer_size(cfg.relay.buffer_events.max(1))
    .with_options("-c datestyle=ISO -c timezone=UTC -c extra_float_digits=3")
    .with_application_name(pg.application_name.clone()))
}

/// Closes the session gracefully at a stop; a server that stopped answering would keep the
/// close waiting, so it is bounded and then cut.
pub(crate) async fn close(client: &mut ReplicationClient) {
    if tokio::time::timeout(CLOSE_TIMEOUT, client.shutdown())
        .await
        .is_err()
    {
        client.abort();
    }
}

/// Connects the replication session, checks the server's identity and timeline (gated:
/// before START_REPLICATION) and starts streaming.
pub(crate) async fn open(
    cfg: &Config,
    rcfg: ReplicationConfig,
    carry: &mut Carry,
    platform: Platform,
) -> Result<Opened, RelayError> {
    let mut client = crate::postgres::reader_thread::connect_gated(rcfg)
        .await
        .map_err(|e| Transient::Replication {
            detail: "cannot open the replication session".into(),
            source: Some(Box::new(e)),
        })?
        .map_err(|e| classify_on(e, cfg, platform))?;
    let id = client
        .identify_system()
        .await
        .map_err(|e| classify(e, cfg))?;
    recall(cfg, carry)?;
    let seen = carry.identity.as_ref().map(|(s, t)| (s.as_str(), *t));
    check_system(cfg, seen.map(|(s, _)| s), &id.system_id)?;
    // The server's history, for the failover check and the checkpoint's timeline.
    let history = timeline_history(cfg, &mut client, id.timeline).await?;
    if let Some((_, streamed)) = seen {
        if streamed != id.timeline {
            check_timeline(cfg, &history, streamed, carry.published, id.timeline)?;
        }
    } else {
        tracing::info!(system_id = %id.system_id, timeline = id.timeline, "{SERVER_IDENTIFIED}");
    }
    carry.identity = Some((id.system_id.clone(), id.timeline));
    let memory = cfg
        .relay
        .state_file
        .clone()
        .map(|path| Memory::new(path, &id.system_id, id.timeline));
    client
        .start()
        .await
        .map_err(|e| classify_on(e, cfg, platform))?;
    client
        .wait_started()
        .await
        .map_err(|e| classify_on(e, cfg, platform))?;
    Ok(Opened {
        client,
        memory,
        system_id: id.system_id,
        history,
    })
}

/// A replication session that streams, with what was learnt while opening it.
pub(crate) struct Opened {
    pub(crate) client: ReplicationClient,
    pub(crate) memory: Option<Memory>,
    pub(crate) system_id: String,
    /// The history of the server's timeline (`timeline` is its current one).
    pub(crate) history: relay_core::timeline::History,
}

/// The history of `timeline` as the server has it (timeline 1 has none).
async fn timeline_history(
    cfg: &Config,
    client: &mut ReplicationClient,
    timeline: u32,
) -> Result<relay_core::timeline::History, RelayError> {
    if timeline == 1 {
        return Ok(relay_core::timeline::History::root());
    }
    let file = client
        .timeline_history(timeline)
        .await
        .map_err(|e| classify(e, cfg))?;
    relay_core::timeline::History::parse(timeline, &String::from_utf8_lossy(&file.content))
        .map_err(|e| Definite::replication_refused_by(e).into())
}

/// Sorts replication errors into "wait and retry" and "tell the operator".
pub(crate) fn classify(e: PgWireError, cfg: &Config) -> RelayError {
    classify_on(e, cfg, Platform::SelfManaged)
}

/// [`classify`], with the advice of `platform` when the server refuses the role.
pub(crate) fn classify_on(e: PgWireError, cfg: &Config, platform: Platform) -> RelayError {
    let pg = &cfg.postgres;
    let text = e.to_string();
    let sqlstate = text
        .rsplit_once("(SQLSTATE ")
        .and_then(|(_, s)| s.get(..5))
        .unwrap_or("");
    match sqlstate {
        "55006" => Transient::SlotBusy {
            slot: pg.slot.clone(),
            detail: text,
        }
        .into(),
        "42704" => Definite::Precondition(format!(
            "{text}: the slot or publication is missing; run `outbox-relay setup` (see \
             docs/operations.md before re-creating a slot that existed)"
        ))
        .into(),
        "28P01" | "28000" => Definite::Precondition(format!(
            "PostgreSQL rejected the replication connection of user {:?}: {text}; check the \
             password and pg_hba.conf",
            pg.user
        ))
        .into(),
        "55000" => Definite::replication_refused_with(
            format!(
                "{text}; the slot can no longer be used (invalidated?); outbox-relay will not \
                 re-create it silently: see `outbox-relay setup --recreate-slot`"
            ),
            e,
        )
        .into(),
        "42501" => Definite::Precondition(format!(
            "{text}: the server does not let role {:?} replicate: {} (docs/security.md, \
             docs/platforms.md)",
            pg.user,
            platform.replication_grant(&crate::postgres::control::quote_ident(&pg.user))
        ))
        .into(),
        _ if e.is_auth() || e.is_tls() || e.is_message_too_large() => {
            RelayError::from(Definite::replication_refused_by(e))
        }
        _ => Transient::replication_by(e).into(),
    }
}

/// The slot's `confirmed_flush_lsn` now that the slot is this instance's: where PostgreSQL
/// starts sending (the preflight's value may be older if another instance confirmed since).
pub(crate) async fn slot_start(cfg: &Config) -> Result<relay_core::Lsn, RelayError> {
    let client = control::connect(cfg).await?;
    let row = client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&cfg.postgres.slot],
        )
        .await
        .map_err(control::query_err("reading the slot's confirmed position"))?;
    let text: Option<String> = row.get(0);
    text.unwrap_or_default()
        .parse()
        .map_err(|e| Definite::Precondition(format!("slot {:?}: {e}", cfg.postgres.slot)).into())
}
