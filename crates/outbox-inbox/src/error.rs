//! The crate's error type: each message says what failed and what to do about it.

use crate::retention::Refusal;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A table or column name that is not a plain lowercase SQL identifier.
    #[error(
        "invalid {what} {name:?}: use a lowercase SQL identifier ([a-z_][a-z0-9_]*, at most 63 \
         bytes), schema-qualified for a table (e.g. \"public.outbox\")"
    )]
    InvalidIdentifier { what: &'static str, name: String },

    /// A layout that maps two parts of the event to one column or field.
    #[error(
        "invalid layout: {0:?} is used for two parts of the event; give each part its own name"
    )]
    DuplicateName(String),

    /// A logical-message prefix the relay could not be configured to match.
    #[error("invalid message prefix {0:?}: it must be non-empty and match a [[message]] prefix")]
    InvalidPrefix(String),

    /// A statement failed in PostgreSQL.
    #[error("{what} failed; {hint}")]
    Postgres {
        what: String,
        hint: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },

    /// The retention job refused to delete (see [`Refusal`]).
    #[error(transparent)]
    Refused(#[from] Refusal),

    /// The topic's settings could not be read from Kafka.
    #[cfg(feature = "kafka")]
    #[error(
        "cannot read the configuration of topic {topic:?} from Kafka: check the brokers, that the \
         topic exists and that this client may DescribeConfigs on it"
    )]
    Kafka {
        topic: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },

    /// Kafka answered with settings that cannot be interpreted.
    #[error("topic {topic:?}: {detail}; the retention check needs the topic's real settings")]
    TopicConfig { topic: String, detail: String },
}

impl Error {
    /// Wraps a PostgreSQL error of the caller's own statement (for `map_err`).
    pub fn pg(what: &str) -> impl FnOnce(tokio_postgres::Error) -> Error + '_ {
        move |source| Error::Postgres {
            what: what.to_string(),
            hint: "see the source error",
            source,
        }
    }

    pub(crate) fn pg_hint(
        what: String,
        hint: &'static str,
    ) -> impl FnOnce(tokio_postgres::Error) -> Error {
        move |source| Error::Postgres { what, hint, source }
    }
}
