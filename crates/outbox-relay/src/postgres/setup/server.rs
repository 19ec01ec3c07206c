//! The server's settings that preflight checks or reads before the tables and the slot:
//! `wal_level`, the version (PostgreSQL 14 or later; 17 for `postgres.failover_slot`),
//! `idle_replication_slot_timeout` and `wal_sender_timeout`.

use std::time::Duration;

use relay_core::platform::Platform;
use tokio_postgres::Client;

use crate::{
    config::Config,
    error::{Definite, RelayError},
    postgres::control::query_err,
    postgres::slot::server_version,
};

/// The oldest PostgreSQL the relay streams from: pgoutput's `messages` option (the heartbeat,
/// logical messages) and streaming protocol version 2 need 14.
const MIN_SERVER_VERSION: i32 = 140_000;

/// `wal_level = logical`: without it there is no logical decoding.
pub(super) async fn check_wal_level_is_logical(
    client: &Client,
    cfg: &Config,
    platform: Platform,
) -> Result<(), RelayError> {
    let pg = &cfg.postgres;
    let wal_level: String = client
        .query_one("SELECT current_setting('wal_level')", &[])
        .await
        .map_err(query_err("read wal_level"))?
        .get(0);
    if wal_level != "logical" {
        return Err(RelayError::from(Definite::Precondition(format!(
            "wal_level is {wal_level:?} on {}:{} ({}): {}",
            pg.host,
            pg.port,
            platform.name(),
            platform.wal_level_switch()
        ))));
    }
    Ok(())
}

/// PostgreSQL 14 or later ([`MIN_SERVER_VERSION`]); the server's version number.
pub(super) async fn check_server_version(client: &Client, cfg: &Config) -> Result<i32, RelayError> {
    let pg = &cfg.postgres;
    let version = server_version(client)
        .await
        .map_err(query_err("read server_version_num"))?;
    if version < MIN_SERVER_VERSION {
        return Err(RelayError::from(Definite::Precondition(format!(
            "{}:{} runs PostgreSQL {}.{}, and outbox-relay needs PostgreSQL 14 or later (pgoutput's \
             `messages` option and protocol version 2 start there): upgrade the server, e.g. \
             with pg_upgrade",
            pg.host,
            pg.port,
            version / 10_000,
            version % 10_000
        ))));
    }
    Ok(version)
}

/// PostgreSQL 18: a slot no connection uses for longer than this is invalidated (`None`: off,
/// or an older server).
pub(super) async fn idle_replication_slot_timeout(
    client: &Client,
) -> Result<Option<Duration>, RelayError> {
    Ok(client
        .query_opt(
            "SELECT setting::bigint FROM pg_settings WHERE name = 'idle_replication_slot_timeout'",
            &[],
        )
        .await
        .map_err(query_err("read idle_replication_slot_timeout"))?
        .map(|r| r.get::<_, i64>(0))
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s as u64)))
}

/// `wal_sender_timeout`, in milliseconds whatever its unit.
pub(super) async fn read_wal_sender_timeout(client: &Client) -> Result<Duration, RelayError> {
    let wal_sender_timeout_ms: i64 = client
        .query_one(
            "SELECT setting::bigint * CASE unit WHEN 's' THEN 1000 ELSE 1 END \
               FROM pg_settings WHERE name = 'wal_sender_timeout'",
            &[],
        )
        .await
        .map_err(query_err("read wal_sender_timeout"))?
        .get(0);
    Ok(Duration::from_millis(wal_sender_timeout_ms.max(0) as u64))
}

/// `postgres.failover_slot` needs PostgreSQL 17 (failover slots start there).
pub(super) async fn check_failover_slot_version(
    client: &Client,
    cfg: &Config,
) -> Result<(), RelayError> {
    if !cfg.postgres.failover_slot {
        return Ok(());
    }
    let version = server_version(client)
        .await
        .map_err(query_err("read server_version_num"))?;
    if version < 170_000 {
        return Err(RelayError::from(Definite::Precondition(format!(
            "postgres.failover_slot = true needs PostgreSQL 17 or later, and this server is \
             {version}: set it to false (docs/operations.md, \"Failover\", says how to keep \
             the slot on a promoted standby without it)"
        ))));
    }
    Ok(())
}
