//! PostgreSQL side: schema, slots and publications, the backlog writer and the steady-rate load
//! generator.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use tokio::sync::Semaphore;
use tokio_postgres::{Client, NoTls};

pub const DB: &str = "bench";
const SCHEMA: &str = include_str!("../sql/schema.sql");

/// Microseconds since the Unix epoch (CLOCK_REALTIME, the clock PostgreSQL stamps commits with).
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

pub async fn connect(port: u16, db: &str) -> Result<Client> {
    let conn =
        format!("host=127.0.0.1 port={port} user=postgres dbname={db} application_name=bench");
    let (client, connection) = tokio_postgres::connect(&conn, NoTls)
        .await
        .with_context(|| format!("connecting to {conn}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Creates the `bench` database, the outbox table and the payload pool (idempotent).
pub async fn prepare(port: u16, payload_sizes: &[i32]) -> Result<()> {
    prepare_in(port, DB, payload_sizes).await
}

/// [`prepare`] in database `db` (created if missing).
pub async fn prepare_in(port: u16, db: &str, payload_sizes: &[i32]) -> Result<()> {
    let admin = connect(port, "postgres").await?;
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&db])
        .await?
        .is_some();
    if !exists {
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await?;
    }
    let c = connect(port, db).await?;
    c.batch_execute(SCHEMA)
        .await
        .context("applying sql/schema.sql")?;
    for s in payload_sizes {
        c.execute("SELECT public.bench_fill_payloads($1)", &[s])
            .await?;
    }
    Ok(())
}

/// Empties the outbox and drops every slot and publication the benchmark created.
pub async fn reset(c: &Client) -> Result<()> {
    // Slots still held by a dying walsender cannot be dropped yet: wait a little.
    for _ in 0..100 {
        let busy = c
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'bench\\_%' AND active",
                &[],
            )
            .await?
            .get::<_, i64>(0);
        if busy == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.batch_execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
           WHERE slot_name LIKE 'bench\\_%' AND NOT active;
         DO $$DECLARE p text; BEGIN
           FOR p IN SELECT pubname FROM pg_publication WHERE pubname LIKE 'bench\\_%' LOOP
             EXECUTE format('DROP PUBLICATION %I', p);
           END LOOP; END$$;
         TRUNCATE public.outbox, public.outbox_2, public.outbox_3, public.outbox_4;
         CHECKPOINT;",
    )
    .await?;
    Ok(())
}

pub async fn drop_slot(c: &Client, slot: &str) -> Result<()> {
    for _ in 0..100 {
        let r = c
            .query_opt(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await?;
        match r {
            None => return Ok(()),
            Some(row) if !row.get::<_, bool>(0) => {
                c.execute("SELECT pg_drop_replication_slot($1)", &[&slot])
                    .await?;
                return Ok(());
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    anyhow::bail!("slot {slot} still active after 10 s")
}

/// `FOR TABLE public.outbox WITH (publish = 'insert')` (and `outbox_2` … up to `tables`), as
/// outbox-relay creates its own.
pub async fn create_publication(c: &Client, name: &str, tables: usize) -> Result<()> {
    let list = outbox_tables(tables).join(", ");
    c.batch_execute(&format!(
        "CREATE PUBLICATION {name} FOR TABLE {list} WITH (publish = 'insert')"
    ))
    .await?;
    Ok(())
}

/// The first `n` of the benchmark's outbox tables (sql/schema.sql has four).
pub fn outbox_tables(n: usize) -> Vec<String> {
    (1..=n)
        .map(|i| match i {
            1 => "public.outbox".to_string(),
            i => format!("public.outbox_{i}"),
        })
        .collect()
}

pub async fn publication_exists(c: &Client, name: &str) -> Result<bool> {
    Ok(
        c.query_opt("SELECT 1 FROM pg_publication WHERE pubname = $1", &[&name])
            .await?
            .is_some(),
    )
}

pub async fn create_slot(c: &Client, name: &str) -> Result<()> {
    c.execute(
        "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
        &[&name],
    )
    .await?;
    Ok(())
}

pub async fn current_lsn(c: &Client) -> Result<String> {
    Ok(c.query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await?
        .get(0))
}

/// Pid of the walsender serving `slot`, once it is active.
pub async fn walsender_pid(c: &Client, slot: &str) -> Result<Option<i32>> {
    Ok(c.query_opt(
        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1 AND active",
        &[&slot],
    )
    .await?
    .and_then(|r| r.get::<_, Option<i32>>(0)))
}

/// `(pg_current_wal_lsn(), sent_lsn of walsender `pid`)` as byte positions.
pub async fn wal_and_sent(c: &Client, pid: i32) -> Result<(i64, i64)> {
    let r = c
        .query_one(
            "SELECT (pg_current_wal_lsn() - '0/0')::int8, \
                    (SELECT (sent_lsn - '0/0')::int8 FROM pg_stat_replication WHERE pid = $1)",
            &[&pid],
        )
        .await?;
    let wal: i64 = r.get(0);
    Ok((wal, r.get::<_, Option<i64>>(1).unwrap_or(wal)))
}

pub async fn server_version(c: &Client) -> Result<String> {
    Ok(c.query_one("SHOW server_version", &[]).await?.get(0))
}

/// Writes `n` events in transactions of `per_txn` rows, server-side. Returns the seconds taken.
pub async fn backlog(c: &Client, n: i32, per_txn: i32, psize: i32, atype: &str) -> Result<f64> {
    backlog_spread(c, n, per_txn, psize, atype, 1).await
}

/// [`backlog`] over the first `tables` outbox tables, row by row in turn.
pub async fn backlog_spread(
    c: &Client,
    n: i32,
    per_txn: i32,
    psize: i32,
    atype: &str,
    tables: i32,
) -> Result<f64> {
    let t0 = Instant::now();
    c.batch_execute("SET synchronous_commit = off").await?;
    if tables <= 1 {
        c.execute(
            "CALL public.bench_backlog($1, $2, $3, $4)",
            &[&n, &per_txn, &psize, &atype],
        )
        .await?;
    } else {
        c.execute(
            "CALL public.bench_backlog_spread($1, $2, $3, $4, $5)",
            &[&n, &per_txn, &psize, &atype, &tables],
        )
        .await?;
    }
    c.batch_execute("RESET synchronous_commit").await?;
    Ok(t0.elapsed().as_secs_f64())
}

/// One event, committed on its own.
pub async fn insert_one(c: &Client, psize: i32, atype: &str) -> Result<()> {
    c.execute(INSERT, &[&atype, &"o-primer", &now_us(), &psize, &0i32])
        .await?;
    Ok(())
}

const INSERT: &str = "INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload) \
     SELECT gen_random_uuid(), $1, $2, 'OrderCreated', p.body || jsonb_build_object('ts', $3::int8) \
       FROM public.bench_payloads p WHERE p.size = $4 AND p.i = $5";

/// [`INSERT`] as a transactional logical message with the Debezium envelope (the table-less
/// outbox): same parameters, same payload, nothing written to a table.
const EMIT: &str = "SELECT pg_logical_emit_message(true, 'outbox', json_build_object(\
     'id', gen_random_uuid(), 'aggregatetype', $1::text, 'aggregateid', $2::text, \
     'type', 'OrderCreated', 'payload', p.body || jsonb_build_object('ts', $3::int8))::text) \
       FROM public.bench_payloads p WHERE p.size = $4 AND p.i = $5";

/// What the steady-rate writer achieved.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LoadStats {
    pub target_rate: f64,
    pub seconds: f64,
    pub sent: u64,
    pub failed: u64,
    /// Inserts whose start was more than 10 ms behind schedule (the writer could not keep up).
    pub late: u64,
    pub achieved_rate: f64,
}

/// Open-loop writer: `rate` single-row transactions per second for `seconds`, over `conns`
/// pipelined connections. Each payload carries `ts` = the writer's clock just before the INSERT
/// is handed to the connection. `messages`: logical messages ([`EMIT`]) instead of rows.
pub async fn steady_load(
    port: u16,
    conns: usize,
    rate: f64,
    seconds: f64,
    psize: i32,
    atype: &str,
    messages: bool,
) -> Result<LoadStats> {
    let dbs = vec![DB.to_string(); conns];
    steady_load_over(port, &dbs, rate, seconds, psize, atype, messages).await
}

/// [`steady_load`] over one connection per entry of `dbs` (a database may be named more than
/// once), the inserts dealt to them in turn: `rate` is the total, spread evenly.
pub async fn steady_load_over(
    port: u16,
    dbs: &[String],
    rate: f64,
    seconds: f64,
    psize: i32,
    atype: &str,
    messages: bool,
) -> Result<LoadStats> {
    let conns = dbs.len();
    let mut clients = Vec::new();
    for db in dbs {
        let c = connect(port, db).await?;
        let st = c.prepare(if messages { EMIT } else { INSERT }).await?;
        clients.push((Arc::new(c), st));
    }
    let atype: Arc<str> = Arc::from(atype);
    let permits = Arc::new(Semaphore::new(conns * 128));
    let failed = Arc::new(AtomicU64::new(0));
    let mut sent: u64 = 0;
    let mut late: u64 = 0;
    let t0 = Instant::now();
    let total = (rate * seconds).round() as u64;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut rng = rand::rngs::StdRng::from_os_rng();
    while sent < total {
        tick.tick().await;
        let due = ((t0.elapsed().as_secs_f64() * rate) as u64).min(total);
        while sent < due {
            let behind_s = t0.elapsed().as_secs_f64() - sent as f64 / rate;
            if behind_s > 0.010 {
                late += 1;
            }
            let permit = permits.clone().acquire_owned().await?;
            let (c, st) = clients[(sent as usize) % conns].clone();
            let atype = atype.clone();
            let failed = failed.clone();
            let agg = format!("o-{}", rng.random_range(0..100_000));
            let i: i32 = rng.random_range(0..1000);
            tokio::spawn(async move {
                let ts = now_us();
                if c.execute(&st, &[&&*atype, &agg, &ts, &psize, &i])
                    .await
                    .is_err()
                {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                drop(permit);
            });
            sent += 1;
        }
    }
    // Wait for the last inserts to finish.
    let _ = permits.acquire_many((conns * 128) as u32).await?;
    let secs = t0.elapsed().as_secs_f64();
    Ok(LoadStats {
        target_rate: rate,
        seconds: secs,
        sent,
        failed: failed.load(Ordering::Relaxed),
        late,
        achieved_rate: sent as f64 / secs,
    })
}
