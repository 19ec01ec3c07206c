//! The applier's status document (`/status.json` of `apply run`): the partitions this instance
//! applies (position, log end, lag, halted and why) from its assignment, and the consumer's
//! dead letters and claims from its database, read every [`outbox_service::console::history::INTERVAL`] by
//! [`super::status::store_report`], the query `apply status` prints.

use serde::{Deserialize, Serialize};

/// The whole document.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ApplierStatus {
    /// Always `applier`.
    pub kind: String,
    /// When it was computed, in seconds since the Unix epoch.
    pub at: f64,
    pub version: String,
    pub consumer: String,
    pub group: String,
    /// `false` until the consumer group assigned partitions (possibly none) to this instance.
    pub joined: bool,
    pub partitions: Vec<PartitionView>,
    /// Records applied (all results) per second over the last sampling interval.
    pub records_per_sec: Option<f64>,
    /// The database's part, as last read; `None` before the first reading.
    pub store: Option<StoreView>,
    /// Why the last reading of the database failed.
    pub store_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PartitionView {
    pub topic: String,
    pub partition: i32,
    /// The next offset to apply.
    pub position: Option<i64>,
    /// The log end as last fetched.
    pub log_end: Option<i64>,
    pub lag: Option<i64>,
    /// Why the partition stopped (it stays stopped until revoked or restarted).
    pub halted: Option<String>,
    /// Rolled back and trying the same records again (a transient error, a lock conflict).
    #[serde(default)]
    pub retrying: bool,
    /// The last error a transaction of the partition was rolled back on, even after it moved
    /// on, and when (seconds since the Unix epoch).
    #[serde(default)]
    pub last_error: Option<String>,
    #[serde(default)]
    pub last_error_at: Option<f64>,
}

/// The consumer's dead letters and claims, from its database.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StoreView {
    /// When it was read, in seconds since the Unix epoch.
    pub read_at: f64,
    pub dead_letters: Vec<DeadLetterTopic>,
    pub claims: i64,
    pub oldest_claim_secs: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DeadLetterTopic {
    pub topic: String,
    pub count: i64,
    /// The newest few ([`NEWEST_DEAD_LETTERS`]).
    pub newest: Vec<DeadLetter>,
    /// The command that applies them again (the page runs nothing).
    pub redrive: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DeadLetter {
    pub partition: i32,
    pub offset: i64,
    pub event_type: Option<String>,
    pub error: String,
    pub failed_at: String,
}

/// Dead letters listed per topic.
pub const NEWEST_DEAD_LETTERS: i64 = 3;

/// `outbox-relay apply redrive --config <file> --topic <topic>`.
pub(crate) fn redrive_command(topic: &str) -> String {
    let quoted = if topic
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        topic.to_string()
    } else {
        format!("'{}'", topic.replace('\'', r"'\''"))
    };
    format!("outbox-relay apply redrive --config <applier.toml> --topic {quoted}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redrive_commands_quote_odd_topic_names() {
        assert!(redrive_command("orders.v1").ends_with("--topic orders.v1"));
        assert!(redrive_command("a b'c").ends_with(r"--topic 'a b'\''c'"));
    }
}
