//! The control connection to PostgreSQL: a plain SQL connection (never the replication
//! connection) for preflight, setup, the slot monitor, the heartbeat and `status`, and the
//! helpers every user of it shares: identifier quoting and error text.
//!
//! Invariant: [`connect`] never returns a bare driver error: a refused password, a missing
//! database or a failed TLS verification is a definite `Precondition` naming what to fix, and
//! anything else is `PostgresUnreachable` (transient). [`describe_pg`] turns a tokio-postgres
//! error into one sentence, with the SQLSTATE when the server sent one.

use outbox_service::postgres::ConnectError;
pub(crate) use outbox_service::postgres::{describe_pg, quote_ident};
use tokio_postgres::{Client, error::SqlState};

use crate::{
    config::Config,
    error::{Definite, RelayError, Transient},
};

/// Opens the control-plane connection. Errors say whether it was the address, the password or
/// the database.
pub(crate) async fn connect(cfg: &Config) -> Result<Client, RelayError> {
    connect_to(cfg, &cfg.postgres.host, cfg.postgres.port).await
}

/// The control connection to the standby's primary (`postgres.primary_host`), when configured.
pub(crate) async fn connect_primary(cfg: &Config) -> Option<Result<Client, RelayError>> {
    let pg = &cfg.postgres;
    let host = pg.primary_host.as_deref()?;
    Some(connect_to(cfg, host, pg.primary_port.unwrap_or(pg.port)).await)
}

/// [`connect`] to `host:port` with the rest of `[postgres]` (the shared connection section).
async fn connect_to(cfg: &Config, host: &str, port: u16) -> Result<Client, RelayError> {
    let pg = &cfg.postgres;
    let target = format!(
        "{host}:{port} (database {:?}, user {:?})",
        pg.database, pg.user
    );
    let (client, conn) = match pg.connection.connect_to(host, port, "control").await {
        Ok(opened) => opened,
        Err(ConnectError::Config(e)) => return Err(e.into()),
        Err(ConnectError::Tls(why)) => return Err(Definite::Precondition(why).into()),
        Err(ConnectError::Postgres(e)) => return Err(classify_connect(e, &target, cfg)),
    };
    crate::telemetry::source_scope::spawn(watch_connection(conn));
    Ok(client)
}

async fn watch_connection<F: std::future::Future<Output = Result<(), tokio_postgres::Error>>>(
    conn: F,
) {
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "control connection closed");
    }
}

fn classify_connect(e: tokio_postgres::Error, target: &str, cfg: &Config) -> RelayError {
    let pg = &cfg.postgres;
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            RelayError::from(Definite::Precondition(format!(
                "PostgreSQL rejected the credentials of user {:?} at {}:{}: check \
                 postgres.password (or OUTBOX_RELAY__POSTGRES__PASSWORD / postgres.password_file) \
                 and pg_hba.conf ({})",
                pg.user,
                pg.host,
                pg.port,
                describe_pg(&e)
            )))
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => Definite::Precondition(format!(
            "database {:?} does not exist on {}:{}: set postgres.database to the database that \
             holds the outbox table",
            pg.database, pg.host, pg.port
        ))
        .into(),
        _ if describe_pg(&e).contains("certificate") => Definite::Precondition(format!(
            "TLS verification of PostgreSQL at {}:{} failed ({}): check that \
             postgres.sslrootcert is the CA that signed the server certificate and that the \
             certificate names postgres.host",
            pg.host,
            pg.port,
            describe_pg(&e)
        ))
        .into(),
        _ => Transient::PostgresUnreachable {
            target: target.to_string(),
            detail: describe_pg(&e),
            source: e,
        }
        .into(),
    }
}

pub(crate) fn query_err(context: &'static str) -> impl Fn(tokio_postgres::Error) -> RelayError {
    move |e| {
        RelayError::from(Transient::Postgres {
            context,
            detail: describe_pg(&e),
            source: e,
        })
    }
}
