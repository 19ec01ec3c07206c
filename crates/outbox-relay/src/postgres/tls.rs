//! TLS to PostgreSQL (`postgres.sslmode = "verify-full"`) on the replication connection
//! (pgwire-replication's rustls, ring provider): the server certificate must chain to the
//! configured CA and name the configured host. The control connection's TLS is the shared
//! connection section's (`outbox_service::postgres::connector`).

use pgwire_replication::TlsConfig;

use crate::config::{Config, PgSslMode};

/// The TLS settings of the replication connection.
pub(crate) fn replication_tls(cfg: &Config) -> TlsConfig {
    match cfg.postgres.sslmode {
        PgSslMode::Disable => TlsConfig::disabled(),
        PgSslMode::VerifyFull => TlsConfig::verify_full(cfg.postgres.sslrootcert.clone())
            .with_sni_hostname(cfg.postgres.host.clone()),
    }
}
