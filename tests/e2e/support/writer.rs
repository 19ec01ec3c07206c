//! Writers that commit outbox events the way services do, and remember exactly what committed.
//!
//! Each event takes the next sequence number of its aggregate from `agg` under a row lock, so
//! per aggregate, sequence order is commit order: the consumer-side check needs no LSNs.

use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio_postgres::GenericClient;

use super::connect;

/// One committed event.
#[derive(Debug, Clone)]
pub struct Written {
    pub id: String,
    pub aggregate_type: String,
    pub aggregate: String,
    pub seq: i32,
    pub payload: serde_json::Value,
}

#[derive(Debug, Default, Clone)]
pub struct WriteStats {
    pub committed_txns: u64,
    pub rolled_back_txns: u64,
    pub rolled_back_savepoints: u64,
    pub written: Vec<Written>,
    /// Event ids inserted and then rolled back: they must never reach Kafka.
    pub discarded: Vec<String>,
}

/// The next sequence number of `agg`, under its row lock (so sequence order is commit order).
async fn next_seq(c: &impl GenericClient, agg: &str) -> Result<i32, tokio_postgres::Error> {
    Ok(c.query_one(
        "INSERT INTO agg(id, seq) VALUES ($1, 1) \
         ON CONFLICT (id) DO UPDATE SET seq = agg.seq + 1 RETURNING seq",
        &[&agg],
    )
    .await?
    .get(0))
}

/// Inserts one outbox event for `agg` in the current transaction (sequence under row lock).
pub async fn insert_event(
    c: &impl GenericClient,
    aggregate_type: &str,
    agg: &str,
    writer: usize,
) -> Result<Written, tokio_postgres::Error> {
    write_event(
        c,
        "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
         VALUES ($1::text::uuid, $2, $3, 'Event', $4::text::jsonb)",
        "x",
        aggregate_type,
        agg,
        writer,
    )
    .await
}

/// `n` events of aggregate type `order` by writer 0, one statement after another on `c`
/// (inside its transaction if it is one): the `i`-th for aggregate `agg(i)`.
pub async fn insert_orders(
    c: &impl GenericClient,
    n: usize,
    agg: impl Fn(usize) -> String,
) -> Vec<Written> {
    let mut written = Vec::with_capacity(n);
    for i in 0..n {
        written.push(insert_event(c, "order", &agg(i), 0).await.unwrap());
    }
    written
}

/// One event for `agg` with the next sequence number of its aggregate, written by `sql` ($1 the
/// id, $2 the aggregate type, $3 the aggregate, $4 the JSON payload, whose `note` is `note`).
async fn write_event(
    c: &impl GenericClient,
    sql: &str,
    note: &str,
    aggregate_type: &str,
    agg: &str,
    writer: usize,
) -> Result<Written, tokio_postgres::Error> {
    let seq = next_seq(c, agg).await?;
    let id = uuid::Uuid::new_v4().to_string();
    let payload = serde_json::json!({"aggregate": agg, "seq": seq, "writer": writer, "note": note});
    c.execute(sql, &[&id, &aggregate_type, &agg, &payload.to_string()])
        .await?;
    Ok(Written {
        id,
        aggregate_type: aggregate_type.into(),
        aggregate: agg.into(),
        seq,
        payload,
    })
}

/// A poison event: an outbox row whose key (`aggregateid`, made nullable by the test) is NULL.
pub async fn insert_null_key(c: &impl GenericClient) {
    c.execute(
        "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
         VALUES (gen_random_uuid(), 'order', NULL, 'Event', '{}')",
        &[],
    )
    .await
    .unwrap();
}

/// Like [`insert_event`], as a transactional logical message with the Debezium envelope.
pub async fn emit_event(
    c: &impl GenericClient,
    aggregate_type: &str,
    agg: &str,
    writer: usize,
) -> Result<Written, tokio_postgres::Error> {
    write_event(
        c,
        "SELECT pg_logical_emit_message(true, 'outbox', json_build_object('id', $1::text, \
         'aggregatetype', $2::text, 'aggregateid', $3::text, 'type', 'Event', \
         'payload', $4::text::json)::text)",
        "m",
        aggregate_type,
        agg,
        writer,
    )
    .await
}

/// Runs `txns` transactions on its own connection: each touches 1-3 aggregates (locked in
/// sorted order, so writers never deadlock), writes 1-4 events per aggregate, sometimes a
/// savepoint that is rolled back, and commits (about 85%) or rolls back.
pub async fn random_writer(
    conninfo: String,
    writer: usize,
    txns: usize,
    aggregates: usize,
    seed: u64,
) -> WriteStats {
    let mut c = connect(&conninfo).await;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut stats = WriteStats::default();
    for _ in 0..txns {
        let mut aggs: Vec<String> = (0..rng.random_range(1..=3))
            .map(|_| format!("agg-{}", rng.random_range(0..aggregates)))
            .collect();
        aggs.sort();
        aggs.dedup();
        let mut tx = c.transaction().await.unwrap();
        let mut pending = Vec::new();
        for agg in &aggs {
            for _ in 0..rng.random_range(1..=4) {
                pending.push(insert_event(&tx, "order", agg, writer).await.unwrap());
            }
        }
        if rng.random_bool(0.2) {
            // A savepoint whose inserts are rolled back: never published.
            let sp = tx.savepoint("sp").await.unwrap();
            let w = insert_event(&sp, "order", &aggs[0], writer).await.unwrap();
            stats.discarded.push(w.id);
            sp.rollback().await.unwrap();
            stats.rolled_back_savepoints += 1;
        }
        if rng.random_bool(0.15) {
            tx.rollback().await.unwrap();
            stats.rolled_back_txns += 1;
            stats.discarded.extend(pending.into_iter().map(|w| w.id));
        } else {
            tx.commit().await.unwrap();
            stats.committed_txns += 1;
            stats.written.extend(pending);
        }
    }
    stats
}

/// Runs `n` writers concurrently and merges what they committed.
pub async fn run_writers(conninfo: &str, n: usize, txns: usize, aggregates: usize) -> WriteStats {
    let handles: Vec<_> = (0..n)
        .map(|w| {
            tokio::spawn(random_writer(
                conninfo.to_string(),
                w,
                txns,
                aggregates,
                7 + w as u64,
            ))
        })
        .collect();
    let mut all = WriteStats::default();
    for h in handles {
        let s = h.await.unwrap();
        all.committed_txns += s.committed_txns;
        all.rolled_back_txns += s.rolled_back_txns;
        all.rolled_back_savepoints += s.rolled_back_savepoints;
        all.written.extend(s.written);
        all.discarded.extend(s.discarded);
    }
    all
}

/// Reads back what a bulk statement wrote (the outbox keeps its rows in this test).
pub async fn written_rows(c: &impl GenericClient, aggregate_prefix: &str) -> Vec<Written> {
    c.query(
        "SELECT id::text, aggregateid, (payload->>'seq')::int, payload::text FROM outbox \
         WHERE aggregateid LIKE $1 ORDER BY aggregateid, (payload->>'seq')::int",
        &[&format!("{aggregate_prefix}%")],
    )
    .await
    .unwrap()
    .into_iter()
    .map(|r| Written {
        id: r.get(0),
        aggregate_type: "order".into(),
        aggregate: r.get(1),
        seq: r.get(2),
        payload: serde_json::from_str(r.get::<_, &str>(3)).unwrap(),
    })
    .collect()
}

/// One INSERT ... SELECT of `rows` events over 10 aggregates `<prefix>0..9`, each with a
/// payload padded to about `pad` bytes.
pub async fn bulk_insert(c: &impl GenericClient, prefix: &str, rows: i32, pad: i32) {
    c.execute(
        "INSERT INTO outbox(id, aggregatetype, aggregateid, type, payload) \
         SELECT gen_random_uuid(), 'order', $1 || (i % 10), 'Event', \
                jsonb_build_object('aggregate', $1 || (i % 10), 'seq', i / 10 + 1, 'writer', 0, \
                                   'note', 'x', 'pad', repeat('p', $3)) \
           FROM generate_series(0, $2 - 1) AS i",
        &[&prefix, &rows, &pad],
    )
    .await
    .unwrap();
}
