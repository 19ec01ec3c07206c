//! TLS to PostgreSQL (`postgres.sslmode = "verify-full"`) on SQL connections (tokio-postgres
//! with rustls, ring provider): the server certificate must chain to the configured CA and name
//! the host connected to. (The relay's replication connection has its own TLS settings, in
//! pgwire-replication's terms, from the same two keys.)

use std::{path::Path, sync::Arc};

use rustls::{ClientConfig, RootCertStore, pki_types::CertificateDer, pki_types::pem::PemObject};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::PgSslMode;

fn bad_ca(path: &Path, detail: impl std::fmt::Display) -> String {
    format!(
        "cannot use postgres.sslrootcert {}: {detail}; give a PEM file with the CA certificate",
        path.display()
    )
}

/// The connector for `sslmode` with the CA file `sslrootcert`, or `None` when TLS is off. An
/// error is one sentence naming what to fix.
pub fn connector(
    sslmode: PgSslMode,
    sslrootcert: Option<&Path>,
) -> Result<Option<MakeRustlsConnect>, String> {
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
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Some(MakeRustlsConnect::new(config)))
}
