//! The applier's errors at its edges (start, setup, the operator's commands). A record's own
//! failure is not an error here: it is the failure policy's business (`partition`).

use outbox_service::{config::ConfigError, postgres::describe_pg};

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Something the operator must fix before the applier can run (exit 3).
    #[error("{0}")]
    Precondition(String),
    #[error("{context}: {}", describe_pg(.source))]
    Postgres {
        context: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("{context}: {source}")]
    Kafka {
        context: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
}

impl ApplyError {
    pub(crate) fn pg(
        context: impl Into<String>,
    ) -> impl FnOnce(tokio_postgres::Error) -> ApplyError {
        let context = context.into();
        move |source| ApplyError::Postgres { context, source }
    }

    pub(crate) fn kafka(
        context: impl Into<String>,
    ) -> impl FnOnce(rdkafka::error::KafkaError) -> ApplyError {
        let context = context.into();
        move |source| ApplyError::Kafka { context, source }
    }

    /// The process's exit code: 2 bad configuration, 3 unmet precondition, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            ApplyError::Config(_) => 2,
            ApplyError::Precondition(_) => 3,
            _ => 1,
        }
    }
}
