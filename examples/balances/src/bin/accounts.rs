//! The accounts service: changes account balances, each change and its `BalanceChanged` event
//! in one transaction (the event is an outbox row, written with outbox-inbox's `enqueue`), so an
//! event exists if and only if its change committed.
//!
//! Environment: the `PG*` connection, `ACCOUNTS` (default 20) accounts `acc-<i>` of `CLIENTS`
//! (default 5) clients `client-<i % CLIENTS>`, created if missing; `CHANGES` (default 1000)
//! changes by `CONCURRENCY` (default 4) connections with `PAUSE_MS` (default 0) between two
//! changes of one connection. Prints `{"committed":N}`.

use std::time::Duration;

use anyhow::{Context, Result};
use balances::{AGGREGATE_TYPE, BalanceChanged, EVENT_TYPE, connect_pg, env_or};
use outbox_inbox::{Event, Outbox};
use rand::{Rng, SeedableRng, rngs::StdRng};

async fn change(
    pg: &mut tokio_postgres::Client,
    outbox: &Outbox,
    account: &str,
    delta: i64,
) -> Result<()> {
    let tx = pg.transaction().await?;
    let row = tx
        .query_one(
            "UPDATE accounts SET balance = balance + $2 WHERE id = $1 RETURNING client_id",
            &[&account, &delta],
        )
        .await
        .with_context(|| format!("changing the balance of {account}"))?;
    let payload = BalanceChanged {
        account: account.to_string(),
        client: row.get(0),
        delta,
    };
    let event = Event::new(
        AGGREGATE_TYPE,
        account,
        EVENT_TYPE,
        serde_json::to_value(&payload)?,
    );
    outbox.enqueue(&tx, &event).await?;
    tx.commit().await.context("COMMIT")?;
    Ok(())
}

async fn worker(id: u64, changes: u64, accounts: u64, pause: Duration) -> Result<u64> {
    let mut pg = connect_pg().await?;
    let outbox = Outbox::table();
    let mut rng = StdRng::seed_from_u64(id);
    for _ in 0..changes {
        let account = format!("acc-{}", rng.random_range(0..accounts));
        let delta = rng.random_range(-500..=1000);
        change(&mut pg, &outbox, &account, delta).await?;
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    Ok(changes)
}

#[tokio::main]
async fn main() -> Result<()> {
    let accounts: u64 = env_or("ACCOUNTS", 20)?;
    let clients: u64 = env_or("CLIENTS", 5)?;
    let changes: u64 = env_or("CHANGES", 1000)?;
    let concurrency: u64 = env_or::<u64>("CONCURRENCY", 4)?.max(1);
    let pause = Duration::from_millis(env_or("PAUSE_MS", 0)?);
    let pg = connect_pg().await?;
    for i in 0..accounts {
        pg.execute(
            "INSERT INTO accounts (id, client_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&format!("acc-{i}"), &format!("client-{}", i % clients)],
        )
        .await
        .context("creating the accounts (examples/balances/accounts.sql)")?;
    }
    let tasks: Vec<_> = (0..concurrency)
        .map(|w| {
            let n = changes / concurrency + u64::from(w < changes % concurrency);
            tokio::spawn(worker(w, n, accounts, pause))
        })
        .collect();
    let mut committed = 0;
    for t in tasks {
        committed += t.await??;
    }
    println!("{{\"committed\":{committed}}}");
    Ok(())
}
