//! TLS to PostgreSQL (`postgres.sslmode = "verify-full"`): the server certificate must chain to
//! the configured CA and name the configured host, on the control connection (tokio-postgres
//! with rustls) and on the replication connection (pgwire-replication's rustls), both with the
//! ring provider.

use std::sync::Arc;

use pgwire_replication::TlsConfig;
use rustls::{ClientConfig, RootCertStore, pki_types::CertificateDer, pki_types::pem::PemObject};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{
    config::{Config, PgSslMode},
    error::{Definite, RelayError},
};

fn bad_ca(path: &std::path::Path, detail: impl std::fmt::Display) -> RelayError {
    RelayError::from(Definite::Precondition(format!(
        "cannot use postgres.sslrootcert {}: {detail}; give a PEM file with the CA certificate",
        path.display()
    )))
}

/// The connector for the control connection, or `None` when TLS is off.
pub(crate) fn control_connector(cfg: &Config) -> Result<Option<MakeRustlsConnect>, RelayError> {
    connector(cfg.postgres.sslmode, cfg.postgres.sslrootcert.as_deref())
}

/// The connector for `sslmode` with the CA file `sslrootcert` (the relay's control connection,
/// the applier's connections), or `None` when TLS is off.
pub(crate) fn connector(
    sslmode: PgSslMode,
    sslrootcert: Option<&std::path::Path>,
) -> Result<Option<MakeRustlsConnect>, RelayError> {
    if sslmode == PgSslMode::Disable {
        return Ok(None);
    }
    let path = sslrootcert.expect("validated: verify-full has sslrootcert");
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| bad_ca(path, e))?;
    for cert in certs {
        roots
            .add(cert.map_err(|e| bad_ca(path, e))?)
            .map_err(|e| bad_ca(path, e))?;
    }
    if roots.is_empty() {
        return Err(bad_ca(path, "it holds no certificate"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Definite::Precondition(format!("TLS setup failed: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Some(MakeRustlsConnect::new(config)))
}

/// The TLS settings of the replication connection.
pub(crate) fn replication_tls(cfg: &Config) -> TlsConfig {
    match cfg.postgres.sslmode {
        PgSslMode::Disable => TlsConfig::disabled(),
        PgSslMode::VerifyFull => TlsConfig::verify_full(cfg.postgres.sslrootcert.clone())
            .with_sni_hostname(cfg.postgres.host.clone()),
    }
}
