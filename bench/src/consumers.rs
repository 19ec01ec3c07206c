//! `bench consumers`: the consumer half side by side, in one run on one PostgreSQL and one Kafka:
//! `outbox-relay apply` (a SQL function as the handler) against the inbox recipes in Rust and Go
//! (examples/inbox-*), all applying the same effect (`recipe_totals`: events + 1, amount + x)
//! with an inbox claim per event, each in a database of its own with a group of its own.
//!
//! Per partition count (1 and 6 by default):
//! * **drain**: a backlog of `--events` records already in the topic; events/s from the first
//!   claiming transaction's commit to the last one's, so group joins and process starts do not
//!   count;
//! * **steady**: the consumer running, records produced at `--rate` for `--seconds`; the latency
//!   of each event from its hand-off to the producer (the writer) to the commit of the
//!   transaction that claimed it and applied its effect (the claim's
//!   `pg_xact_commit_timestamp(xmin)`, PostgreSQL's clock, the same host's), p50 and p99.
//!
//! Two shapes (`--shapes`, both by default):
//! * **key-local**: the effect touches only the event's own key's row (`recipe_totals`), so
//!   partitions never share a row; the applier with `pool_size = 6`;
//! * **shared-row**: the articles' balances shape (issue 41): events keyed by account, the
//!   effect also updates the row of the account's client, one of 5 clients shared by the 64
//!   accounts (a trigger on `recipe_totals`, so every system does exactly the same work in the
//!   same transaction); partitions' transactions meet on those 5 rows; the applier with its
//!   default settings (`pool_size` 4, `batch_records` 100).
//!
//! Ten untimed seconds of the steady load come first (a cold broker made the first system
//! measured look slow).
//!
//! Commit times need `track_commit_timestamp = on` (a server restart): scripts/bench-consumers.sh
//! starts its stack with it; the run stops at once, saying so, on a server without it.
//!
//! Records: key `a-<i % 64>`, value `{"amount": 1}`, headers `id` (a UUIDv4) and `eventType`
//! (`Amount`), as the relay publishes them.

use std::{
    collections::HashMap,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use rdkafka::{
    ClientConfig,
    message::{Header, OwnedHeaders},
    producer::{FutureProducer, FutureRecord},
};
use tokio_postgres::Client;

use crate::{kafka, pg};

#[derive(clap::Args)]
pub struct ConsumersArgs {
    #[arg(long, default_value_t = 16432)]
    pg_port: u16,
    #[arg(long, default_value = "127.0.0.1:29192")]
    brokers: String,
    /// The outbox-relay binary (its `apply` subcommand).
    #[arg(long)]
    applier: PathBuf,
    /// The Rust inbox recipe's binary (examples/inbox-rust).
    #[arg(long)]
    rust_recipe: PathBuf,
    /// The Go inbox recipe's binary (examples/inbox-go).
    #[arg(long)]
    go_recipe: Option<PathBuf>,
    /// Partition counts, comma-separated.
    #[arg(long, default_value = "1,6", value_delimiter = ',')]
    partitions: Vec<i32>,
    /// Backlog of the drain.
    #[arg(long, default_value_t = 30_000)]
    events: usize,
    /// Events/s of the steady run.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Seconds of the steady run.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Shapes of the effect: `key-local`, `shared-row` (module docs).
    #[arg(long, default_value = "key-local,shared-row", value_delimiter = ',')]
    shapes: Vec<String>,
    /// Only these systems (`applier`, `rust`, `go`; default: all, Go when `--go-recipe` is
    /// given), e.g. to look at one of them between full runs.
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Where the results (results.json, report.md) go.
    #[arg(long, default_value = "target/bench-results/consumers")]
    out: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    Applier,
    RustRecipe,
    GoRecipe,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Applier => "outbox-relay apply",
            System::RustRecipe => "Rust recipe (outbox-inbox)",
            System::GoRecipe => "Go recipe (pgx + franz-go)",
        }
    }
    fn slug(self) -> &'static str {
        match self {
            System::Applier => "applier",
            System::RustRecipe => "rust",
            System::GoRecipe => "go",
        }
    }
}

/// What the effect of one event touches (module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    KeyLocal,
    SharedRow,
}

impl Shape {
    fn parse(s: &str) -> Result<Shape> {
        match s {
            "key-local" => Ok(Shape::KeyLocal),
            "shared-row" => Ok(Shape::SharedRow),
            other => bail!("--shapes: {other:?} is not key-local or shared-row"),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Shape::KeyLocal => "key-local",
            Shape::SharedRow => "shared-row",
        }
    }
    fn slug(self) -> &'static str {
        match self {
            Shape::KeyLocal => "local",
            Shape::SharedRow => "shared",
        }
    }
}

#[derive(Debug, serde::Serialize)]
struct Row {
    shape: &'static str,
    system: &'static str,
    partitions: i32,
    drain_events_per_s: f64,
    steady_p50_ms: f64,
    steady_p99_ms: f64,
    steady_events: usize,
}

const SCHEMA: &str = "
CREATE TABLE inbox (consumer text NOT NULL, event_id text NOT NULL,
  processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, event_id));
CREATE TABLE recipe_totals (aggregate_id text PRIMARY KEY, events bigint NOT NULL, amount numeric NOT NULL);
CREATE FUNCTION apply_amount(k text, v jsonb) RETURNS void LANGUAGE sql AS $$
  INSERT INTO recipe_totals (aggregate_id, events, amount) VALUES (k, 1, (v->>'amount')::numeric)
  ON CONFLICT (aggregate_id) DO UPDATE SET events = recipe_totals.events + 1,
    amount = recipe_totals.amount + EXCLUDED.amount $$;
";

/// The shared-row shape's addition: every change of an account's total also counts on its
/// client's row (5 clients for the 64 accounts).
const SHARED_ROWS: &str = "
CREATE TABLE client_totals (client int PRIMARY KEY, events bigint NOT NULL);
INSERT INTO client_totals SELECT g, 0 FROM generate_series(0, 4) AS g;
CREATE FUNCTION count_for_client() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
  UPDATE client_totals SET events = events + 1 WHERE client = abs(hashtext(NEW.aggregate_id)) % 5;
  RETURN NEW; END $$;
CREATE TRIGGER count_for_client AFTER INSERT OR UPDATE ON recipe_totals
  FOR EACH ROW EXECUTE FUNCTION count_for_client();
";

async fn fresh_db(port: u16, name: &str, shape: Shape) -> Result<Client> {
    let admin = pg::connect(port, "postgres").await?;
    // One statement each: CREATE DATABASE cannot run in the implicit transaction of a batch.
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    let c = pg::connect(port, name).await?;
    let track: String = c
        .query_one("SHOW track_commit_timestamp", &[])
        .await?
        .get(0);
    if track != "on" {
        bail!(
            "track_commit_timestamp is off on port {port}: the latencies are measured to each \
             transaction's commit. Restart the server with -c track_commit_timestamp=on \
             (scripts/bench-consumers.sh starts its stack so; `infra/stack.sh down` first if one \
             is running without it)"
        );
    }
    c.batch_execute(SCHEMA).await?;
    if shape == Shape::SharedRow {
        c.batch_execute(SHARED_ROWS).await?;
    }
    Ok(c)
}

/// Drops a phase's database and takes a checkpoint, so that its autovacuum and dirty pages do
/// not land in the next system's figures.
async fn retire_db(port: u16, name: &str) -> Result<()> {
    let admin = pg::connect(port, "postgres").await?;
    admin
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await?;
    admin.batch_execute("CHECKPOINT").await?;
    Ok(())
}

fn producer(brokers: &str) -> Result<FutureProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "1")
        .create()?)
}

/// Produces record `i` and returns its id and hand-off time (µs).
async fn produce(p: &FutureProducer, topic: &str, i: usize) -> Result<(String, i64)> {
    let id = uuid::Uuid::new_v4().to_string();
    let key = format!("a-{}", i % 64);
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "id",
            value: Some(&id),
        })
        .insert(Header {
            key: "eventType",
            value: Some("Amount"),
        });
    let at = pg::now_us();
    p.send(
        FutureRecord::to(topic)
            .key(&key)
            .payload("{\"amount\": 1}")
            .headers(headers),
        Duration::from_secs(30),
    )
    .await
    .map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?;
    Ok((id, at))
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline && matches!(self.0.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(
    a: &ConsumersArgs,
    (s, shape): (System, Shape),
    db: &str,
    topic: &str,
    group: &str,
) -> Result<Running> {
    let log = std::fs::File::create(a.out.join(format!("{group}.log")))?;
    let mut cmd = match s {
        System::Applier => {
            let cfg = a.out.join(format!("{group}.toml"));
            std::fs::write(
                &cfg,
                format!(
                    "[postgres]\nport = {}\ndatabase = \"{db}\"\n{pool}\n[kafka]\n\
                     brokers = \"{}\"\ngroup_id = \"{group}\"\ntopics = [\"{topic}\"]\n\n\
                     [apply]\nconsumer = \"bench\"\n\n[[handler]]\nevent_type = \"Amount\"\n\
                     sql = \"SELECT apply_amount(:key, :value)\"\n\n[http]\nenabled = false\n\n\
                     [retention]\ninterval_ms = 0\n",
                    a.pg_port,
                    a.brokers,
                    pool = if shape == Shape::KeyLocal {
                        "pool_size = 6\n"
                    } else {
                        ""
                    },
                ),
            )?;
            let setup = Command::new(&a.applier)
                .args(["apply", "setup", "--config"])
                .arg(&cfg)
                .output()?;
            if !setup.status.success() {
                bail!("apply setup: {}", String::from_utf8_lossy(&setup.stderr));
            }
            let mut c = Command::new(&a.applier);
            c.args(["apply", "run", "--config"]).arg(cfg);
            c
        }
        System::RustRecipe | System::GoRecipe => {
            let bin = if s == System::RustRecipe {
                &a.rust_recipe
            } else {
                a.go_recipe.as_ref().context("no go recipe")?
            };
            let mut c = Command::new(bin);
            c.env("PGHOST", "127.0.0.1")
                .env("PGPORT", a.pg_port.to_string())
                .env("PGUSER", "postgres")
                .env("PGDATABASE", db)
                .env("BROKERS", &a.brokers)
                .env("TOPIC", topic)
                .env("GROUP", group)
                .env("CONSUMER", "bench")
                .env("IDLE_MS", "3600000");
            c
        }
    };
    let child = cmd
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", s.name()))?;
    Ok(Running(child))
}

async fn claims(c: &Client) -> Result<i64> {
    Ok(c.query_one("SELECT count(*) FROM inbox", &[]).await?.get(0))
}

async fn wait_claims(c: &Client, n: usize, timeout: Duration, run: &mut Running) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while (claims(c).await? as usize) < n {
        if let Some(status) = run.0.try_wait()? {
            bail!(
                "the consumer exited ({status}) after {} of {n} claims; see its log",
                claims(c).await?
            );
        }
        if Instant::now() > deadline {
            bail!(
                "only {} of {n} events claimed after {timeout:?}",
                claims(c).await?
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

async fn drain(
    a: &ConsumersArgs,
    (s, shape): (System, Shape),
    parts: i32,
    backlog_topic: &str,
) -> Result<f64> {
    let db = format!("cons_{}_{}_{parts}_drain", shape.slug(), s.slug());
    let c = fresh_db(a.pg_port, &db, shape).await?;
    let group = format!("{db}_{}", pg::now_us());
    let mut run = start(a, (s, shape), &db, backlog_topic, &group)?;
    wait_claims(&c, a.events, Duration::from_secs(600), &mut run).await?;
    let row = c
        .query_one(
            "SELECT extract(epoch from max(pg_xact_commit_timestamp(xmin)) \
               - min(pg_xact_commit_timestamp(xmin)))::float8, \
             (SELECT sum(events)::bigint FROM recipe_totals) FROM inbox",
            &[],
        )
        .await?;
    let (span, applied): (f64, i64) = (row.get(0), row.get(1));
    if applied as usize != a.events {
        bail!("{}: {applied} effects for {} events", s.name(), a.events);
    }
    if shape == Shape::SharedRow {
        let shared: i64 = c
            .query_one("SELECT sum(events)::bigint FROM client_totals", &[])
            .await?
            .get(0);
        if shared as usize != a.events {
            bail!(
                "{}: {shared} client counts for {} events",
                s.name(),
                a.events
            );
        }
    }
    drop(run);
    drop(c);
    retire_db(a.pg_port, &db).await?;
    Ok(a.events as f64 / span.max(1e-3))
}

async fn steady(
    a: &ConsumersArgs,
    (s, shape): (System, Shape),
    parts: i32,
    seconds: f64,
) -> Result<(f64, f64, usize)> {
    let db = format!("cons_{}_{}_{parts}_steady", shape.slug(), s.slug());
    let c = fresh_db(a.pg_port, &db, shape).await?;
    let topic = format!("cons.steady.{}.{parts}.{}", s.slug(), pg::now_us());
    kafka::create_topics_with(&a.brokers, std::slice::from_ref(&topic), parts).await?;
    let group = format!("{db}_{}", pg::now_us());
    let mut run = start(a, (s, shape), &db, &topic, &group)?;
    let p = producer(&a.brokers)?;
    // Warm-up: the group has joined and applies (one record per partition at least).
    for i in 0..(parts as usize * 4) {
        produce(&p, &topic, i).await?;
    }
    wait_claims(&c, parts as usize * 4, Duration::from_secs(60), &mut run).await?;
    let n = (a.rate * seconds) as usize;
    let every = Duration::from_secs_f64(1.0 / a.rate);
    let started = tokio::time::Instant::now();
    let mut sent: HashMap<String, i64> = HashMap::with_capacity(n);
    let mut pending = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep_until(started + every * i as u32).await;
        let (p, topic) = (p.clone(), topic.clone());
        pending.push(tokio::spawn(async move { produce(&p, &topic, i).await }));
    }
    for h in pending {
        let (id, at) = h.await??;
        sent.insert(id, at);
    }
    wait_claims(
        &c,
        n + parts as usize * 4,
        Duration::from_secs(300),
        &mut run,
    )
    .await?;
    let rows = c
        .query(
            "SELECT event_id, (extract(epoch from pg_xact_commit_timestamp(xmin)) * 1e6)::bigint, \
             (extract(epoch from processed_at) * 1e6)::bigint FROM inbox",
            &[],
        )
        .await?;
    // To the commit (what is reported) and to the claiming transaction's start (printed too:
    // the difference is the transaction's own time).
    let (mut lat, mut to_start): (Vec<f64>, Vec<f64>) = rows
        .iter()
        .filter_map(|r| {
            let id: String = r.get(0);
            sent.get(&id).map(|at| {
                (
                    (r.get::<_, i64>(1) - at) as f64 / 1000.0,
                    (r.get::<_, i64>(2) - at) as f64 / 1000.0,
                )
            })
        })
        .unzip();
    lat.sort_by(f64::total_cmp);
    to_start.sort_by(f64::total_cmp);
    let q = |v: &[f64], x: f64| v[((v.len() as f64 - 1.0) * x).round() as usize];
    let (p50, p99) = (q(&lat, 0.5), q(&lat, 0.99));
    eprintln!(
        "  {} {} {parts} partitions at {:.0}/s: to the transaction's start p50 {:.1} ms p99 {:.1} ms",
        shape.name(),
        s.name(),
        a.rate,
        q(&to_start, 0.5),
        q(&to_start, 0.99)
    );
    drop(run);
    drop(c);
    retire_db(a.pg_port, &db).await?;
    Ok((p50, p99, lat.len()))
}

pub async fn run(a: ConsumersArgs) -> Result<()> {
    std::fs::create_dir_all(&a.out)?;
    let mut systems = vec![System::Applier, System::RustRecipe];
    if a.go_recipe.is_some() {
        systems.push(System::GoRecipe);
    }
    if !a.systems.is_empty() {
        systems.retain(|s| a.systems.iter().any(|x| x == s.slug()));
    }
    // A cold broker (JIT, page cache) and server made the first system measured look slow:
    // 10 untimed seconds of the steady load first, results discarded.
    eprintln!("warm-up: 10 s of the steady load (not measured)");
    let shapes = a
        .shapes
        .iter()
        .map(|s| Shape::parse(s))
        .collect::<Result<Vec<_>>>()?;
    steady(&a, (systems[0], Shape::KeyLocal), 1, 10.0).await?;
    let mut rows = Vec::new();
    for (&shape, &parts) in shapes
        .iter()
        .flat_map(|s| a.partitions.iter().map(move |p| (s, p)))
    {
        // One backlog per partition count, drained by every system with a group of its own.
        let topic = format!("cons.backlog.{parts}.{}", pg::now_us());
        kafka::create_topics_with(&a.brokers, std::slice::from_ref(&topic), parts).await?;
        let p = producer(&a.brokers)?;
        let mut hs = Vec::with_capacity(a.events);
        for i in 0..a.events {
            let (p, topic) = (p.clone(), topic.clone());
            hs.push(tokio::spawn(async move { produce(&p, &topic, i).await }));
        }
        for h in hs {
            h.await??;
        }
        for &s in &systems {
            let rate = drain(&a, (s, shape), parts, &topic).await?;
            let (p50, p99, n) = steady(&a, (s, shape), parts, a.seconds).await?;
            eprintln!(
                "{} {} {parts} partitions: drain {rate:.0}/s, steady p50 {p50:.1} ms p99 {p99:.1} ms ({n} events)",
                shape.name(),
                s.name()
            );
            rows.push(Row {
                shape: shape.name(),
                system: s.name(),
                partitions: parts,
                drain_events_per_s: rate,
                steady_p50_ms: p50,
                steady_p99_ms: p99,
                steady_events: n,
            });
        }
    }
    std::fs::write(
        a.out.join("results.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    let mut md = format!(
        "| shape | system | partitions | drain events/s ({} events) | p50 ms at {:.0}/s | p99 ms at {:.0}/s |\n|---|---|---|---|---|---|\n",
        a.events, a.rate, a.rate
    );
    for r in &rows {
        md.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.1} | {:.1} |\n",
            r.shape, r.system, r.partitions, r.drain_events_per_s, r.steady_p50_ms, r.steady_p99_ms
        ));
    }
    std::fs::write(a.out.join("report.md"), &md)?;
    print!("{md}");
    Ok(())
}
