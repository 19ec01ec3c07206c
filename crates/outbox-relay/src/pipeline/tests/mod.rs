//! The loop without a server: a scripted replication session ([`Session`]) on one side,
//! librdkafka's mock cluster on the other. What it checks is the wiring: that the loop confirms
//! only what the progress rule allows, whatever Kafka does, and that in exactly-once mode the
//! checkpoint that ends the Kafka transaction names the last change.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use pgwire_replication::{Lsn as PgLsn, PgWireError, ReplicationEvent};
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    consumer::{BaseConsumer, Consumer},
    mocking::MockCluster,
    producer::DefaultProducerContext,
};
use relay_core::{
    Lsn,
    checkpoint::{Checkpoint, Trail},
    decode::Decoder,
    pgoutput::fixtures::{insert, relation},
    skip::Skip,
};
use tokio::sync::{mpsc, watch};

use super::{
    reports::Reports,
    state::{Connection, Pipeline, Start},
    txn::transaction_timeout,
};
use crate::{
    config::Config,
    error::RelayError,
    postgres::carry::Carry,
    postgres::session::{Session, StreamEvent},
    sink::checkpoint_topic::Identity,
    sink::{Delivered, KafkaSink, Sink},
};

/// The report's failure the Kafka edge makes of a record librdkafka refused with `code`
/// ([`crate::sink::failure_of`]): what the in-memory sink reports in its place.
pub(super) fn refused_with(code: rdkafka::error::RDKafkaErrorCode) -> crate::sink::Failure {
    crate::sink::failure_of(&rdkafka::error::KafkaError::MessageProduction(code))
}

mod cadence;
mod drain;
mod fatal;
mod memory;
mod paused;
mod refused;
mod sim;

/// A replication session that plays `events`, then stays quiet; it records what the loop
/// confirms.
struct Scripted {
    events: VecDeque<ReplicationEvent>,
    applied: Arc<Mutex<Lsn>>,
    /// Before the event with this index the stream is quiet for a while.
    pause_before: Option<usize>,
    played: usize,
}

impl Session for Scripted {
    async fn recv(&mut self) -> Result<Option<StreamEvent>, PgWireError> {
        if self.pause_before == Some(self.played) {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        self.played += 1;
        match self.events.pop_front() {
            Some(e) => Ok(Some(e.into())),
            None => std::future::pending().await,
        }
    }
    fn update_applied_lsn(&self, lsn: Lsn) {
        *self.applied.lock().unwrap() = lsn;
    }
    fn last_applied_lsn(&self) -> Lsn {
        *self.applied.lock().unwrap()
    }
    fn is_running(&self) -> bool {
        true
    }
}

const TEXT: u32 = 25;
const COMMIT: u64 = 0x1000;
const END: u64 = 0x1010;
const COMMIT2: u64 = 0x1020;
const END2: u64 = 0x1030;
const IDLE: u64 = 0x1100;

fn lsn(v: u64) -> PgLsn {
    PgLsn::from_u64(v)
}

fn xlog(data: Bytes) -> ReplicationEvent {
    ReplicationEvent::XLogData {
        wal_start: lsn(0),
        wal_end: lsn(0),
        server_time_micros: 0,
        data,
    }
}

fn outbox_columns() -> Vec<(&'static str, u32)> {
    ["id", "aggregatetype", "aggregateid", "type", "payload"]
        .iter()
        .map(|c| (*c, TEXT))
        .collect()
}

fn outbox_row(id: &str) -> ReplicationEvent {
    outbox_row_of(id, "a1")
}

/// An outbox row of aggregate `aggregate` (the record's key).
fn outbox_row_of(id: &str, aggregate: &str) -> ReplicationEvent {
    xlog(insert(
        100,
        &[id, "order", aggregate, "T", "{}"].map(|v| Some(v.as_bytes())),
    ))
}

fn begin(final_lsn: u64) -> ReplicationEvent {
    ReplicationEvent::Begin {
        final_lsn: lsn(final_lsn),
        xid: 7,
        commit_time_micros: 0,
    }
}

fn commit(at: u64, end: u64) -> ReplicationEvent {
    ReplicationEvent::Commit {
        lsn: lsn(at),
        end_lsn: lsn(end),
        commit_time_micros: 0,
    }
}

fn keepalive() -> ReplicationEvent {
    ReplicationEvent::KeepAlive {
        wal_end: lsn(IDLE),
        reply_requested: false,
        server_time_micros: 0,
    }
}

/// Two transactions of one outbox row each (`e1` ending at `END`, `e2` at `END2`), the stream
/// quiet between them (before event 4), then a keepalive.
fn two_transactions() -> VecDeque<ReplicationEvent> {
    VecDeque::from([
        begin(COMMIT),
        xlog(relation(100, "public", "outbox", &outbox_columns())),
        outbox_row("e1"),
        commit(COMMIT, END),
        begin(COMMIT2),
        outbox_row("e2"),
        commit(COMMIT2, END2),
        keepalive(),
    ])
}

/// One transaction of three outbox rows and a row of another table, then a keepalive.
fn script() -> VecDeque<ReplicationEvent> {
    let mut ev = VecDeque::from([
        begin(COMMIT),
        xlog(relation(100, "public", "outbox", &outbox_columns())),
        xlog(relation(200, "public", "orders", &[("id", TEXT)])),
    ]);
    for i in 1..=3 {
        ev.push_back(outbox_row(&format!("e{i}")));
        if i == 1 {
            ev.push_back(xlog(insert(200, &[Some(b"o1")])));
        }
    }
    ev.extend([commit(COMMIT, END), keepalive()]);
    ev
}

fn config(brokers: &str, extra: &str) -> Config {
    let toml = format!("[kafka]\nbrokers = \"{brokers}\"\nlinger_ms = 0\n{extra}");
    crate::config::test_support::load(&toml, &[]).unwrap()
}

struct Run {
    script: VecDeque<ReplicationEvent>,
    pause_before: Option<usize>,
    cfg: Config,
    sink: KafkaSink,
    reports: Reports,
    applied: Arc<Mutex<Lsn>>,
}

impl Run {
    fn new(cfg: Config) -> Self {
        let (sink, reports) = KafkaSink::new(&cfg.kafka).unwrap();
        Self {
            script: script(),
            pause_before: None,
            cfg,
            sink,
            reports: Reports::new(reports),
            applied: Arc::new(Mutex::new(Lsn::ZERO)),
        }
    }

    fn applied(&self) -> Lsn {
        *self.applied.lock().unwrap()
    }

    /// Runs the loop over the script until `until` holds of the confirmed LSN (or 20 s pass),
    /// calling `meanwhile` every 100 ms; then stops it as SIGTERM would.
    async fn until(
        &mut self,
        checkpoints: Option<Identity>,
        until: impl Fn(Lsn) -> bool,
        meanwhile: impl FnMut(Lsn),
    ) {
        self.outcome(checkpoints, until, meanwhile).await.unwrap();
    }

    /// [`until`](Self::until), returning how the loop ended (an error ends it early).
    async fn outcome(
        &mut self,
        checkpoints: Option<Identity>,
        until: impl Fn(Lsn) -> bool,
        mut meanwhile: impl FnMut(Lsn),
    ) -> Result<(), RelayError> {
        let transactional = self.cfg.kafka.transactional_id.is_some();
        if transactional {
            self.sink
                .fence_and_begin(transaction_timeout(&self.cfg))
                .await
                .unwrap();
        }
        let session = Scripted {
            events: std::mem::take(&mut self.script),
            applied: self.applied.clone(),
            pause_before: self.pause_before,
            played: 0,
        };
        let mut carry = Carry::default();
        let mut p = pipeline(
            &self.cfg,
            &self.sink,
            &mut self.reports,
            &mut carry,
            session,
            checkpoints,
        );
        let (stop, mut shutdown) = watch::channel(false);
        let applied = self.applied.clone();
        let watcher = async move {
            for _ in 0..200 {
                let now = *applied.lock().unwrap();
                if until(now) {
                    break;
                }
                meanwhile(now);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let _ = stop.send(true);
            std::future::pending::<()>().await
        };
        tokio::select! {
            r = p.run(&mut shutdown) => r,
            _ = watcher => unreachable!(),
        }
    }
}

/// The pipeline as `stream` builds it after a start without a checkpoint (`checkpoints`:
/// checkpoints under this identity), over `session`.
fn pipeline<'a, S: Session, K: Sink>(
    cfg: &'a Config,
    sink: &'a K,
    reports: &'a mut Reports,
    carry: &'a mut Carry,
    session: S,
    checkpoints: Option<Identity>,
) -> Pipeline<'a, S, K> {
    let health = HEALTH.get_or_init(crate::observe::health::Shared::new);
    let conn = connection(cfg, session, checkpoints);
    Pipeline::new(cfg, sink, reports, carry, health, conn)
}

/// A connection over `session` from the start of the stream, as [`pipeline`] builds it.
fn connection<S: Session>(
    cfg: &Config,
    session: S,
    checkpoints: Option<Identity>,
) -> Connection<S> {
    Connection {
        client: session,
        start: Start {
            start: Lsn::ZERO,
            skip: Skip::none(),
            trail: Trail::new(None),
            checkpoints,
        },
        decoder: Decoder::new(&cfg.outbox, cfg.relay.relay_headers),
        memory: None,
    }
}

/// The loop tests' run-wide state (no other task reads it here).
static HEALTH: std::sync::OnceLock<crate::observe::health::Shared> = std::sync::OnceLock::new();

/// A record's key and value.
type KeyValue = (Option<Vec<u8>>, Option<Vec<u8>>);

fn read_all(brokers: &str, topic: &str) -> Vec<KeyValue> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "loop-tests")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let mut quiet = 0;
    while quiet < 10 {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                quiet = 0;
                out.push((m.key().map(<[u8]>::to_vec), m.payload().map(<[u8]>::to_vec)));
            }
            _ => quiet += 1,
        }
    }
    out
}

#[tokio::test(flavor = "current_thread")]
async fn nothing_is_confirmed_while_kafka_is_down_and_all_of_it_once_kafka_is_back() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("outbox.event.order", 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    mock.broker_down(1).unwrap();
    let mut run = Run::new(config(&brokers, ""));
    // Three records are in flight and a keepalive passed them: nothing may be confirmed.
    let mut ticks = 0;
    run.until(
        None,
        |c| c >= Lsn(IDLE),
        |c| {
            ticks += 1;
            if ticks < 15 {
                assert_eq!(c, Lsn::ZERO, "confirmed while Kafka was down");
            } else if ticks == 15 {
                mock.broker_up(1).unwrap();
            }
        },
    )
    .await;
    assert_eq!(run.applied(), Lsn(IDLE), "everything after Kafka came back");
    assert!(
        ticks >= 15,
        "confirmed after {ticks} ticks, while Kafka was down"
    );
    let got = read_all(&brokers, "outbox.event.order");
    assert_eq!(got.len(), 3, "each record once");
}

/// An exactly-once loop on a one-broker MockCluster with the outbox topic and the checkpoint
/// topic `cp`: the cluster (keep it alive), its address, the run and the slot's identity.
fn exactly_once_run(
    transactional_id: &str,
) -> (
    MockCluster<'static, DefaultProducerContext>,
    String,
    Run,
    Identity,
) {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("outbox.event.order", 1, 1).unwrap();
    mock.create_topic("cp", 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let cfg = config(
        &brokers,
        &format!(
            "transactional_id = \"{transactional_id}\"\ncheckpoint_topic = \"cp\"\n[relay]\ndelivery = \"exactly-once\"\nstatus_interval_ms = 50\n"
        ),
    );
    let id = Identity::new(&cfg, "42", 1);
    (mock, brokers, Run::new(cfg), id)
}

#[tokio::test(flavor = "current_thread")]
async fn exactly_once_ends_the_kafka_transaction_with_a_checkpoint_naming_the_last_change() {
    let (_mock, brokers, mut run, id) = exactly_once_run("loop");
    run.until(Some(id), |c| c >= Lsn(IDLE), |_| {}).await;
    // The keepalive's progress was confirmed only with a checkpoint-only transaction.
    assert_eq!(run.applied(), Lsn(IDLE));
    let checkpoints: Vec<Checkpoint> = read_all(&brokers, "cp")
        .into_iter()
        .map(|(k, v)| {
            assert_eq!(k.as_deref(), Some(&b"42/postgres/outbox_relay"[..]));
            Checkpoint::from_json(&v.unwrap()).unwrap()
        })
        .collect();
    let first = checkpoints.first().expect("a checkpoint");
    assert!(first.covered_lsn >= Lsn(END), "{first:?}");
    let last = first.last.as_ref().unwrap();
    // Change #4 of the transaction: three outbox rows and one row of another table before it.
    assert_eq!((last.commit_lsn, last.index), (Lsn(COMMIT), 3));
    assert_eq!(last.fingerprint, "id:e3");
    assert_eq!(checkpoints.last().unwrap().covered_lsn, Lsn(IDLE));
    assert_eq!(read_all(&brokers, "outbox.event.order").len(), 3);
}

#[tokio::test(flavor = "current_thread")]
async fn a_kafka_transaction_with_records_opens_with_a_copy_of_the_previous_checkpoint() {
    let (_mock, brokers, mut run, id) = exactly_once_run("primer");
    run.script = two_transactions();
    run.pause_before = Some(4);
    run.until(Some(id), |c| c >= Lsn(IDLE), |_| {}).await;
    assert_eq!(run.applied(), Lsn(IDLE));
    let raw: Vec<Vec<u8>> = read_all(&brokers, "cp")
        .into_iter()
        .map(|(_, v)| v.unwrap())
        .collect();
    let checkpoints: Vec<Checkpoint> = raw
        .iter()
        .map(|v| Checkpoint::from_json(v).unwrap())
        .collect();
    let last_of = |c: &Checkpoint| c.last.as_ref().map(|l| l.fingerprint.clone());
    let seen: Vec<_> = checkpoints
        .iter()
        .map(|c| (c.covered_lsn, last_of(c)))
        .collect();
    // The first transaction's checkpoint, then its copy opening the second transaction, then
    // the second transaction's own (which may already cover the keepalive, else a
    // checkpoint-only transaction does).
    assert!(raw.len() >= 3, "{seen:?}");
    assert_eq!(
        raw[1], raw[0],
        "the copy is byte for byte the previous checkpoint: {seen:?}"
    );
    assert_eq!(seen[0], (Lsn(END), Some("id:e1".into())));
    for pair in seen[2..].windows(2) {
        assert!(
            pair[0].0 <= pair[1].0,
            "a checkpoint went backwards: {seen:?}"
        );
    }
    for (covered, last) in &seen[2..] {
        assert!(
            *covered >= Lsn(END2) && last.as_deref() == Some("id:e2"),
            "{seen:?}"
        );
    }
    assert_eq!(seen.last().unwrap().0, Lsn(IDLE), "{seen:?}");
    assert_eq!(read_all(&brokers, "outbox.event.order").len(), 2);
}
