//! What the two services share: the `BalanceChanged` event and the PostgreSQL connection from
//! the environment (`PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`, optional `PGPASSWORD`).

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// The event type and aggregate type of the balance changes.
pub const EVENT_TYPE: &str = "BalanceChanged";
pub const AGGREGATE_TYPE: &str = "account";

/// The payload of `BalanceChanged` (aggregate id = the account).
#[derive(Debug, Serialize, Deserialize)]
pub struct BalanceChanged {
    pub account: String,
    pub client: String,
    pub delta: i64,
}

pub fn env(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| format!("set {name}"))
}

/// `name` parsed, or `default` when unset.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> Result<T> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("{name}={v:?} is not a valid value")),
        Err(_) => Ok(default),
    }
}

pub async fn connect_pg() -> Result<tokio_postgres::Client> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(env("PGHOST")?)
        .port(env("PGPORT")?.parse().context("PGPORT is not a port")?)
        .user(env("PGUSER")?)
        .dbname(env("PGDATABASE")?);
    if let Ok(pw) = std::env::var("PGPASSWORD") {
        cfg.password(pw);
    }
    let (client, conn) = cfg
        .connect(tokio_postgres::NoTls)
        .await
        .context("connecting to PostgreSQL")?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            eprintln!("postgres connection: {e}");
        }
    });
    Ok(client)
}
