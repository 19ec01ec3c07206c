//! The model of PostgreSQL in the simulation: a WAL of committed transactions, a slot whose
//! confirmed position is durable only after a checkpoint, and a replication session that
//! streams from the slot and may drop its connection. In some schedules a share of the rows
//! travel as transactional logical messages (`[[message]]`) instead, in the same transactions. Every status update is checked against
//! what the model Kafka holds.

use rand::{Rng, rngs::StdRng};

use super::{Bug, World};
use crate::pipeline::tests::*;

/// One committed transaction of the model WAL.
pub(super) struct Txn {
    pub(super) commit: u64,
    pub(super) end: u64,
    /// (key, value) of each outbox row, in order.
    pub(super) rows: Vec<(String, String)>,
}

/// The model of PostgreSQL: its WAL and the slot.
pub(super) struct Pg {
    pub(super) txns: Vec<Txn>,
    /// The WAL's end after the last transaction (keepalives report it).
    pub(super) tail: u64,
    /// The slot's confirmed position as the server holds it in memory.
    pub(super) confirmed: u64,
    /// What survives a crash (written at a checkpoint).
    pub(super) durable: u64,
}

pub(super) fn wal(rng: &mut StdRng) -> Pg {
    let mut txns = Vec::new();
    let mut at = 0x1000u64;
    let mut n = 0;
    for _ in 0..rng.random_range(5..30) {
        let rows = (0..rng.random_range(1..5))
            .map(|_| {
                n += 1;
                (
                    format!("k{}", rng.random_range(0..4)),
                    format!("{{\"n\":{n}}}"),
                )
            })
            .collect::<Vec<_>>();
        let commit = at + 0x10 * rows.len() as u64;
        txns.push(Txn {
            commit,
            end: commit + 0x10,
            rows,
        });
        at = commit + 0x20;
    }
    Pg {
        txns,
        tail: at + 0x100,
        confirmed: 0,
        durable: 0,
    }
}

/// The replication session of one run: the transactions that end after `start`, then the
/// WAL's end in a keepalive; it may drop the connection before event `drop_at`.
pub(super) struct SimSession {
    pub(super) world: Arc<World>,
    pub(super) events: VecDeque<ReplicationEvent>,
    /// On a lagging standby: how long each event waits for the standby to replay it (a
    /// transaction's wait comes before its `Begin`); empty on the primary.
    pub(super) replay: VecDeque<Duration>,
    pub(super) drop_at: Option<usize>,
    pub(super) played: usize,
    pub(super) applied: Mutex<Lsn>,
}

impl SimSession {
    pub(super) fn new(world: Arc<World>, start: u64, rng: &mut StdRng, may_drop: bool) -> Self {
        let mut events = VecDeque::new();
        let mut replay = VecDeque::new();
        {
            let pg = world.pg.lock().unwrap();
            let mut first = true;
            for t in pg.txns.iter().filter(|t| t.end > start) {
                if world.standby {
                    // Replayed later than committed, a transaction at a time: the stream
                    // goes quiet between them, and each keepalive reports what the standby
                    // replayed, not the primary's end.
                    replay.resize(events.len(), Duration::ZERO);
                    replay.push_back(Duration::from_millis(rng.random_range(0..300)));
                }
                events.push_back(begin(t.commit));
                if first {
                    events.push_back(xlog(relation(100, "public", "outbox", &outbox_columns())));
                    first = false;
                }
                for (i, (key, value)) in t.rows.iter().enumerate() {
                    let id = format!("{}-{i}", t.commit);
                    if world.messages && as_message(t.commit, i) {
                        events.push_back(message(&id, key, value, t.commit + 0x10 * i as u64));
                        continue;
                    }
                    let cols = [id.as_str(), "order", key, "T", value];
                    events.push_back(xlog(insert(100, &cols.map(|v| Some(v.as_bytes())))));
                }
                events.push_back(commit(t.commit, t.end));
                if rng.random_bool(0.2) {
                    events.push_back(keepalive_at(t.end));
                }
            }
            events.push_back(keepalive_at(pg.tail));
        }
        let messages = events
            .iter()
            .filter(|e| matches!(e, ReplicationEvent::Message { .. }))
            .count();
        if messages > 0 {
            world.step(format!(
                "postgres: logical messages in this stream: {messages}"
            ));
        }
        let drop_at =
            (may_drop && rng.random_bool(0.3)).then(|| rng.random_range(0..events.len().max(1)));
        SimSession {
            world,
            events,
            replay,
            drop_at,
            played: 0,
            applied: Mutex::new(Lsn(start)),
        }
    }
}

/// Whether row `i` of the transaction committed at `commit` is written as a logical message
/// (`pg_logical_emit_message(true, 'outbox', ...)`, a `[[message]]` section) instead of an
/// outbox row, when the schedule mixes them: fixed by its place, so a replay is the same.
fn as_message(commit: u64, i: usize) -> bool {
    (commit / 0x10 + i as u64).is_multiple_of(3)
}

/// A transactional logical message with the outbox row's fields; its payload is the row's
/// value, which the record carries as written.
fn message(id: &str, key: &str, value: &str, at: u64) -> ReplicationEvent {
    let content = format!(
        r#"{{"id": "{id}", "aggregatetype": "order", "aggregateid": "{key}", "type": "T", "payload": {value}}}"#
    );
    ReplicationEvent::Message {
        transactional: true,
        lsn: lsn(at),
        prefix: "outbox".into(),
        content: Bytes::from(content),
    }
}

fn keepalive_at(wal_end: u64) -> ReplicationEvent {
    ReplicationEvent::KeepAlive {
        wal_end: lsn(wal_end),
        reply_requested: false,
        server_time_micros: 0,
    }
}

impl Session for SimSession {
    async fn recv(&mut self) -> Result<Option<StreamEvent>, PgWireError> {
        if self.drop_at == Some(self.played) {
            self.world.step(format!(
                "postgres: the connection drops before event {}",
                self.played
            ));
            self.drop_at = None;
            let e = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "simulated");
            return Err(PgWireError::Io(Arc::new(e)));
        }
        self.played += 1;
        if let Some(wait) = self.replay.pop_front().filter(|w| !w.is_zero()) {
            tokio::time::sleep(wait).await;
        }
        match self.events.pop_front() {
            Some(e) => Ok(Some(e.into())),
            None => std::future::pending().await,
        }
    }
    fn update_applied_lsn(&self, lsn: Lsn) {
        *self.applied.lock().unwrap() = lsn;
        let mut pg = self.world.pg.lock().unwrap();
        let lsn = match self.world.bug {
            Bug::ConfirmAhead => pg
                .txns
                .iter()
                .find(|t| t.end > lsn.0)
                .map_or(lsn, |t| Lsn(t.end)),
            _ => lsn,
        };
        let stored = self.world.stored();
        for t in pg.txns.iter().filter(|t| t.end <= lsn.0) {
            for (_, v) in &t.rows {
                if !stored.contains(v) {
                    self.world.violation(format!(
                        "confirmed {lsn} while {v} (transaction ending {:#x}) is not in Kafka",
                        t.end
                    ));
                }
            }
        }
        pg.confirmed = pg.confirmed.max(lsn.0);
    }
    fn last_applied_lsn(&self) -> Lsn {
        *self.applied.lock().unwrap()
    }
    fn is_running(&self) -> bool {
        true
    }
}
