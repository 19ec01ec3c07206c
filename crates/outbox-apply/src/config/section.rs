//! The applier's behaviour: `[apply]` (bookkeeping tables, batches, failures), `[[handler]]`
//! (one per event type) and `[retention]` (the inbox cleanup).

use relay_core::apply::sql::ValueType;
use serde::Deserialize;

use outbox_service::config::lenient::{from_str_or_native, option_from_str_or_native};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyRetention {
    /// How often the applier deletes this consumer's old inbox rows (in batches), after checking
    /// the retention against the topics' settings again; the first check is at start. In
    /// milliseconds; 0 = never (keep every claim, or clean up with your own job). Default 3600000.
    #[serde(
        default = "default_cleanup_interval",
        deserialize_with = "from_str_or_native"
    )]
    pub interval_ms: u64,
    /// Delete claims older than this, in milliseconds. Unset (default): the longest time any of
    /// the consumer's topics can replay a record (`retention.ms + segment.ms + 5 min`). A value
    /// shorter than that is refused (`outbox_inbox::decide`): at start the applier does not
    /// start, later (a topic's retention raised) the cleanup stops and says so.
    #[serde(default, deserialize_with = "option_from_str_or_native")]
    pub inbox_ms: Option<u64>,
    /// The replay window you guarantee for topics that keep records without a time bound
    /// (`retention.ms = -1` or compacted), in milliseconds. Without it those topics' claims are
    /// never deleted.
    #[serde(default, deserialize_with = "option_from_str_or_native")]
    pub replay_window_ms: Option<u64>,
    /// Rows per DELETE statement (each its own transaction), 1..=10000. Default 1000.
    #[serde(
        default = "default_cleanup_batch",
        deserialize_with = "from_str_or_native"
    )]
    pub batch_rows: u32,
}

fn default_cleanup_interval() -> u64 {
    3_600_000
}

fn default_cleanup_batch() -> u32 {
    1000
}

impl Default for ApplyRetention {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

/// `apply.on_failure`: what a record that cannot be applied does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnFailure {
    /// Its partition stops (the others go on), with the reason in the log, `/readyz`, the
    /// metrics and `status`; nothing after it is applied until an operator acts.
    #[default]
    Halt,
    /// It goes to the dead-letter table, with the error, in the transaction that moves the
    /// position past it; its claim is kept so a redelivery is absorbed.
    DeadLetter,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplySection {
    /// The consumer's name in the inbox, the offsets and the dead-letter tables (independent of
    /// the group id, so a group can be renamed without re-applying anything). Required.
    pub consumer: String,
    /// The inbox table (migrations/0003_inbox.sql layout). Default `public.inbox`.
    #[serde(default = "default_inbox")]
    pub inbox_table: String,
    /// The positions table. Default `public.outbox_apply_offsets`.
    #[serde(default = "default_offsets")]
    pub offsets_table: String,
    /// The dead-letter table. Default `public.outbox_apply_dead_letter`.
    #[serde(default = "default_dead_letter")]
    pub dead_letter_table: String,
    /// The header holding the event id (the claim). Default `id` (the relay's and Debezium's).
    #[serde(default = "default_id_header")]
    pub event_id_header: String,
    /// The header holding the event type (which handler). Default `eventType`.
    #[serde(default = "default_type_header")]
    pub event_type_header: String,
    /// `halt` (default) or `dead-letter`.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Event types that are claimed and not applied (no handler needed).
    #[serde(default)]
    pub ignore_types: Vec<String>,
    /// Records of one partition applied in one transaction, at most. Default 100.
    #[serde(default = "default_batch", deserialize_with = "from_str_or_native")]
    pub batch_records: usize,
    /// How long a transaction waits for more records of its partition before it runs, in
    /// milliseconds. Default 0: a transaction takes the records already read and runs; under
    /// load, records pile up while one runs, so the next takes up to `batch_records` anyway
    /// (a wait only adds latency at low rates: docs/benchmarks.md, "The consumer half").
    #[serde(
        default = "default_batch_wait",
        deserialize_with = "from_str_or_native"
    )]
    pub batch_wait_ms: u64,
    /// Time limit of each handler statement (`SET LOCAL statement_timeout`), in milliseconds;
    /// 0 = none. A handler over it is a definite failure (`on_failure`). Default 10000.
    #[serde(
        default = "default_statement_ms",
        deserialize_with = "from_str_or_native"
    )]
    pub statement_timeout_ms: u64,
    /// First wait before a transaction is retried after a transient error (the server away),
    /// in milliseconds; doubled per retry up to `retry_backoff_max_ms`. Default 100. Not for a
    /// deadlock or serialization failure: retried at once (`relay_core::apply::contention`).
    #[serde(default = "default_backoff", deserialize_with = "from_str_or_native")]
    pub retry_backoff_initial_ms: u64,
    /// Longest wait between retries, in milliseconds. Default 10000.
    #[serde(
        default = "default_backoff_max",
        deserialize_with = "from_str_or_native"
    )]
    pub retry_backoff_max_ms: u64,
    /// On SIGTERM, how long the open transactions may take to finish before they are rolled
    /// back, in milliseconds. Default 10000.
    #[serde(default = "default_shutdown", deserialize_with = "from_str_or_native")]
    pub shutdown_timeout_ms: u64,
}

/// The value's type as a handler's `:value` parameter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueAs {
    /// JSON (a value that is not JSON is a definite failure).
    #[default]
    Jsonb,
    /// UTF-8 text (a value that is not UTF-8 is a definite failure).
    Text,
    /// The bytes as they are.
    Bytea,
}

impl From<ValueAs> for ValueType {
    fn from(v: ValueAs) -> ValueType {
        match v {
            ValueAs::Jsonb => ValueType::Jsonb,
            ValueAs::Text => ValueType::Text,
            ValueAs::Bytea => ValueType::Bytea,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handler {
    /// The event type (the `apply.event_type_header` value) this handler applies.
    pub event_type: String,
    /// One SQL statement, run only when the claim is new, with named parameters `:key`,
    /// `:value`, `:headers`, `:topic`, `:partition`, `:offset`, `:timestamp`, `:event_id`,
    /// `:event_type` (e.g. `SELECT apply_balance(:value)`). Prepared by `apply setup`.
    pub sql: String,
    /// `jsonb` (default), `text` or `bytea`: the type of `:value`.
    #[serde(default)]
    pub value: ValueAs,
}

fn default_inbox() -> String {
    "public.inbox".into()
}

fn default_offsets() -> String {
    "public.outbox_apply_offsets".into()
}

fn default_dead_letter() -> String {
    "public.outbox_apply_dead_letter".into()
}

fn default_id_header() -> String {
    "id".into()
}

fn default_type_header() -> String {
    "eventType".into()
}

fn default_batch() -> usize {
    100
}

fn default_batch_wait() -> u64 {
    0
}

fn default_statement_ms() -> u64 {
    10_000
}

fn default_backoff() -> u64 {
    100
}

fn default_backoff_max() -> u64 {
    10_000
}

fn default_shutdown() -> u64 {
    10_000
}
