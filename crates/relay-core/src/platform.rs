//! Which managed PostgreSQL service the relay talks to, told by the roles the service creates,
//! and the advice that works there.
//!
//! Invariant: detection only changes *advice*, never a decision. The server stays the judge of
//! what a role may do (a role that may replicate through membership, as on RDS and Aurora, is
//! let through to the server's own check); the platform picks the words of the error when the
//! server refuses, because `ALTER ROLE … REPLICATION` cannot be run on RDS and the switch for
//! `wal_level` is a service setting, not `postgresql.conf`. Sources: docs/platforms.md.

/// A PostgreSQL service, or `SelfManaged` when no service role was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Platform {
    /// Amazon RDS for PostgreSQL or Aurora PostgreSQL (`rds_superuser`, `rds_replication`, …).
    RdsOrAurora,
    /// Google Cloud SQL (`cloudsqlsuperuser`).
    CloudSql,
    /// Google AlloyDB (`alloydbsuperuser`).
    AlloyDb,
    /// Azure Database for PostgreSQL flexible server (`azure_pg_admin`).
    AzureFlexible,
    /// Supabase (`supabase_admin`).
    Supabase,
    /// Neon (`neon_superuser`).
    Neon,
    /// Self-hosted, Crunchy Bridge, Patroni, or a service not told apart.
    #[default]
    SelfManaged,
}

/// The roles whose existence tells the platform: the preflight asks which of these exist.
pub const MARKER_ROLES: &[&str] = &[
    "rds_superuser",
    "rds_replication",
    "rdsadmin",
    "cloudsqlsuperuser",
    "alloydbsuperuser",
    "azure_pg_admin",
    "supabase_admin",
    "neon_superuser",
];

/// Roles whose members may replicate without the `REPLICATION` attribute (RDS and Aurora; the
/// list Debezium accepts): `rolreplication` stays false for them.
pub const REPLICATION_GRANTING_ROLES: &[&str] = &[
    "rds_replication",
    "rds_superuser",
    "rdsadmin",
    "rdsrepladmin",
];

impl Platform {
    /// The platform whose marker roles exist (the names of [`MARKER_ROLES`] found on the server).
    pub fn detect<'a>(existing_roles: impl IntoIterator<Item = &'a str>) -> Platform {
        let mut found = Platform::SelfManaged;
        for role in existing_roles {
            let p = match role {
                "rds_superuser" | "rds_replication" | "rdsadmin" => Platform::RdsOrAurora,
                "cloudsqlsuperuser" => Platform::CloudSql,
                "alloydbsuperuser" => Platform::AlloyDb,
                "azure_pg_admin" => Platform::AzureFlexible,
                "supabase_admin" => Platform::Supabase,
                "neon_superuser" => Platform::Neon,
                _ => continue,
            };
            // RDS's roles are the most specific advice (membership, not the attribute).
            if found == Platform::SelfManaged || p == Platform::RdsOrAurora {
                found = p;
            }
        }
        found
    }

    /// A short name for logs and messages.
    pub fn name(self) -> &'static str {
        match self {
            Platform::RdsOrAurora => "Amazon RDS / Aurora",
            Platform::CloudSql => "Google Cloud SQL",
            Platform::AlloyDb => "AlloyDB",
            Platform::AzureFlexible => "Azure Database for PostgreSQL flexible server",
            Platform::Supabase => "Supabase",
            Platform::Neon => "Neon",
            Platform::SelfManaged => "self-managed PostgreSQL",
        }
    }

    /// How to let `user` (already quoted for SQL) open a replication connection, and who runs it.
    pub fn replication_grant(self, user: &str) -> String {
        match self {
            Platform::RdsOrAurora => format!(
                "GRANT rds_replication TO {user}; run it as the master user (RDS and Aurora \
                 grant replication by membership; ALTER ROLE … REPLICATION is not permitted there)"
            ),
            Platform::CloudSql => format!(
                "ALTER ROLE {user} WITH REPLICATION; run it as postgres or another member of \
                 cloudsqlsuperuser"
            ),
            Platform::AlloyDb => format!(
                "ALTER ROLE {user} WITH REPLICATION; run it as a member of alloydbsuperuser"
            ),
            Platform::AzureFlexible => format!(
                "ALTER ROLE {user} WITH REPLICATION; run it as the server admin (a member of \
                 azure_pg_admin)"
            ),
            Platform::Supabase => format!(
                "on PostgreSQL 17 or later run ALTER ROLE {user} WITH REPLICATION as postgres; \
                 before 17 connect as the postgres user"
            ),
            Platform::Neon => "use a role created in the Neon Console, CLI or API (members of \
                 neon_superuser have REPLICATION; roles created with SQL cannot get it)"
                .to_string(),
            Platform::SelfManaged => {
                format!("ALTER ROLE {user} REPLICATION; run it as a superuser")
            }
        }
    }

    /// How to turn `wal_level` to `logical` there.
    pub fn wal_level_switch(self) -> &'static str {
        match self {
            Platform::RdsOrAurora => {
                "set rds.logical_replication = 1 in the DB parameter group (on Aurora the DB \
                 cluster parameter group) and reboot the instance"
            }
            Platform::CloudSql => {
                "set the database flag cloudsql.logical_decoding = on and restart"
            }
            Platform::AlloyDb => "set the database flag alloydb.logical_decoding = on and restart",
            Platform::AzureFlexible => {
                "set the server parameter wal_level = logical and restart the server"
            }
            Platform::Supabase => {
                "Supabase projects run with wal_level = logical; ask Supabase support why this \
                 one does not"
            }
            Platform::Neon => {
                "enable Logical Replication in the project's Settings (it restarts the computes \
                 and cannot be turned off)"
            }
            Platform::SelfManaged => {
                "set wal_level = logical in postgresql.conf (or ALTER SYSTEM SET wal_level = \
                 logical) and restart PostgreSQL"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_by_marker_roles() {
        assert_eq!(Platform::detect([]), Platform::SelfManaged);
        assert_eq!(Platform::detect(["pg_monitor"]), Platform::SelfManaged);
        assert_eq!(Platform::detect(["rds_replication"]), Platform::RdsOrAurora);
        assert_eq!(Platform::detect(["cloudsqlsuperuser"]), Platform::CloudSql);
        assert_eq!(Platform::detect(["alloydbsuperuser"]), Platform::AlloyDb);
        assert_eq!(
            Platform::detect(["azure_pg_admin"]),
            Platform::AzureFlexible
        );
        assert_eq!(Platform::detect(["supabase_admin"]), Platform::Supabase);
        assert_eq!(Platform::detect(["neon_superuser"]), Platform::Neon);
        // RDS's membership advice wins whatever the order.
        assert_eq!(
            Platform::detect(["azure_pg_admin", "rds_superuser"]),
            Platform::RdsOrAurora
        );
        assert_eq!(
            Platform::detect(["rdsadmin", "neon_superuser"]),
            Platform::RdsOrAurora
        );
        for role in MARKER_ROLES {
            assert_ne!(Platform::detect([*role]), Platform::SelfManaged, "{role}");
        }
    }

    #[test]
    fn rds_advice_is_the_membership_grant_and_never_alter_role() {
        let g = Platform::RdsOrAurora.replication_grant("\"relay\"");
        assert!(g.starts_with("GRANT rds_replication TO \"relay\""), "{g}");
        assert!(!g.contains("ALTER ROLE \"relay\""), "{g}");
        assert!(
            Platform::RdsOrAurora
                .wal_level_switch()
                .contains("rds.logical_replication = 1")
        );
        let s = Platform::SelfManaged.replication_grant("\"relay\"");
        assert!(s.starts_with("ALTER ROLE \"relay\" REPLICATION"), "{s}");
        assert!(
            Platform::CloudSql
                .wal_level_switch()
                .contains("cloudsql.logical_decoding")
        );
    }
}
