//! Who may replicate: the managed service the server belongs to (told by the roles it
//! creates, relay_core::platform) and the role check of the preflight.
//!
//! Invariant: the relay's own check never refuses a role the server would let replicate. It
//! accepts the `REPLICATION` attribute, superuser, or membership in a role that grants
//! replication (RDS and Aurora's `rds_replication`, where `rolreplication` stays false), and
//! leaves the last word to the server; only the advice of a refusal depends on the platform.

use relay_core::platform::{MARKER_ROLES, Platform, REPLICATION_GRANTING_ROLES};
use tokio_postgres::Client;

use crate::{
    config::Config,
    error::{Definite, RelayError},
    postgres::control::{query_err, quote_ident},
    telemetry::events::REPLICATION_BY_MEMBERSHIP,
};

/// The managed service, told by which of its roles exist (relay_core::platform).
pub(crate) async fn detect_platform(client: &Client) -> Result<Platform, RelayError> {
    let roles: Vec<String> = client
        .query_one(
            "SELECT coalesce(array_agg(rolname::text), '{}') FROM pg_roles \
              WHERE rolname = ANY($1)",
            &[&MARKER_ROLES],
        )
        .await
        .map_err(query_err("read the server's roles"))?
        .get(0);
    Ok(Platform::detect(roles.iter().map(String::as_str)))
}

/// Refuses a role that has neither the attribute nor a replication-granting membership, with
/// the platform's grant; logs `replication_by_membership` for a member without the attribute.
pub(crate) async fn check(
    client: &Client,
    cfg: &Config,
    platform: Platform,
) -> Result<(), RelayError> {
    let pg = &cfg.postgres;
    let row = client
        .query_one(
            "SELECT r.rolreplication OR r.rolsuper, \
                    EXISTS (SELECT 1 FROM pg_roles g \
                             WHERE g.rolname = ANY($1) AND pg_has_role(r.oid, g.oid, 'MEMBER')) \
               FROM pg_roles r WHERE r.rolname = current_user",
            &[&REPLICATION_GRANTING_ROLES],
        )
        .await
        .map_err(query_err("read role attributes"))?;
    let (attribute, membership): (bool, bool) = (row.get(0), row.get(1));
    if !attribute && !membership {
        return Err(RelayError::from(Definite::Precondition(format!(
            "role {:?} cannot open a replication connection on {}: {} (docs/security.md for the \
             least-privilege role, docs/platforms.md for the service)",
            pg.user,
            platform.name(),
            platform.replication_grant(&quote_ident(&pg.user))
        ))));
    }
    if !attribute {
        tracing::info!(
            user = %pg.user, platform = platform.name(),
            "{REPLICATION_BY_MEMBERSHIP}: the role replicates through membership in a \
             replication role (no REPLICATION attribute); the server decides"
        );
    }
    Ok(())
}
