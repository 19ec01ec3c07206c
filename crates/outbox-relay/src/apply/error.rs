//! The applier's errors at its edges (start, setup, the operator's commands). A record's own
//! failure is not an error here: it is the failure policy's business (`apply::partition`).

use crate::{config::ConfigError, postgres::control::describe_pg};

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
    /// A partition stopped on a record it cannot apply (`on_failure = "halt"`), or its position
    /// is outside the log; the others ran on until the stop.
    #[error("{0}")]
    Halted(String),
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
