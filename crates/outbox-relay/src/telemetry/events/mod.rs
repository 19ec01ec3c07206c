//! Every log event name of the relay, in one place (beside the metric names of
//! [`crate::telemetry::metrics`]).
//!
//! A log line of the relay starts its message with one of these names, alone
//! (`streaming_started`) or followed by a colon and a sentence for the person reading it
//! (`event_dead_lettered: published to the dead-letter topic instead of its own`); the details
//! are fields (`slot=…`, `reason=…`). Names are snake_case and stable: operators grep and alert
//! on them, docs/operations.md names the ones an operator acts on, and the end-to-end tests
//! wait on them. Rename one only as a breaking change.
//!
//! Call sites use the constants as inline format arguments, so the rendered text is the name
//! itself: `tracing::info!(slot = %s, "{STREAMING_STARTED}")`. The `reason` field's values
//! (`slot_busy`, `kafka_unreachable`, …) are another vocabulary, that of
//! [`crate::error::RelayError::reason`].
//!
//! The few lines that do not start with a name are listed, with why, in the test below
//! (`EXCEPTIONS`): librdkafka's own lines (`librdkafka: …`), the alert transitions (their
//! message, built by [`crate::observe::alert::Transition::message`], starts with [`ALERT_FIRING`] or
//! [`ALERT_RESOLVED`]), the process's last line (the fatal error's text, with its `reason`
//! field), the failure to start the async runtime, and two debug lines. The test reads every
//! source file of the crate and fails on any other log message that does not start with one of
//! these constants; it checks the shared crate's (`outbox_service::events`) and the applier's
//! (`outbox_apply::telemetry::events`) the same way, each against its own list.

// The pipeline: the replication stream into Kafka, and its stop (pipeline/).
/// The replication stream is open and events flow (the slot is held from now on).
pub const STREAMING_STARTED: &str = "streaming_started";
/// A stop was asked for: intake stopped, waiting for the in-flight acknowledgements.
pub const SHUTDOWN_DRAINING: &str = "shutdown_draining";
/// `relay.shutdown_timeout_ms` passed with events still unacknowledged; they are sent again.
pub const SHUTDOWN_TIMEOUT: &str = "shutdown_timeout";
/// The Kafka transaction of a stop could not be committed; its events are sent again.
pub const SHUTDOWN_COMMIT_FAILED: &str = "shutdown_commit_failed";
/// The relay stopped as asked (after draining, or before streaming began).
pub const SHUTDOWN_COMPLETE: &str = "shutdown_complete";
/// The process had not ended within its bound after the stop signal and exited anyway (a Kafka
/// client that never finished closing).
pub const SHUTDOWN_OVERRUN: &str = "shutdown_overrun";
/// A logical decoding message (a heartbeat or another prefix) was read and skipped (trace).
pub const LOGICAL_MESSAGE_IGNORED: &str = "logical_message_ignored";
/// An outbox table was renamed while in the publication; its rows are still relayed.
pub const OUTBOX_TABLE_RENAMED: &str = "outbox_table_renamed";
/// An UPDATE of an outbox row was read and not published (`table.op.invalid.behavior`).
pub const OUTBOX_UPDATE_IGNORED: &str = "outbox_update_ignored";
/// A DELETE of an outbox row was read and not published (debug).
pub const OUTBOX_DELETE_IGNORED: &str = "outbox_delete_ignored";
/// An event went to the dead-letter topic instead of its own (`relay.on_poison = "dead-letter"`).
pub const EVENT_DEAD_LETTERED: &str = "event_dead_lettered";

// The pipeline's Kafka transactions (`kafka.transactional_id`, pipeline/).
/// This instance took over the transactional id: earlier producers with it are fenced.
pub const KAFKA_PRODUCER_FENCED_OTHERS: &str = "kafka_producer_fenced_others";
/// A Kafka transaction was committed or failed, with its duration (debug).
pub const KAFKA_TRANSACTION_ENDED: &str = "kafka_transaction_ended";
/// The checkpoint topic was created (1 partition, compacted).
pub const CHECKPOINT_TOPIC_CREATED: &str = "checkpoint_topic_created";
/// At-least-once mode: the checkpoint topic cannot be used; the relay goes on without it.
pub const CHECKPOINT_TOPIC_UNUSABLE: &str = "checkpoint_topic_unusable";
/// Debug: the checkpoint reader reached the end of the checkpoint topic (how it knows it read
/// everything; librdkafka reports it as an error).
pub const CHECKPOINT_READ_END: &str = "checkpoint_read_end";
/// No checkpoint for this slot: the relay starts from the slot (duplicates possible, no loss).
pub const CHECKPOINT_MISSING: &str = "checkpoint_missing";
/// The newest checkpoint was read; changes it covers are skipped.
pub const CHECKPOINT_FOUND: &str = "checkpoint_found";
/// A promoted standby's slot keeps its checkpoints under the key it had on the standby.
pub const CHECKPOINT_STANDBY_KEY_KEPT: &str = "checkpoint_standby_key_kept";
/// At-least-once mode: the checkpoint does not fit the stream (another timeline, a changed
/// history); the relay streams from the slot without skipping.
pub const CHECKPOINT_IGNORED: &str = "checkpoint_ignored";
/// The skip after the start is over: every later change is published.
pub const CHECKPOINT_SKIP_DONE: &str = "checkpoint_skip_done";
/// At-least-once mode: a checkpoint could not be written (warned once per cause).
pub const CHECKPOINT_WRITE_FAILED: &str = "checkpoint_write_failed";
/// Debug: a checkpoint was handed to the producer (its covered LSN and last change).
pub const CHECKPOINT_WRITTEN: &str = "checkpoint_written";
/// Debug: an LSN was confirmed to PostgreSQL (sent with the next status update).
pub const LSN_CONFIRMED: &str = "lsn_confirmed";
/// The open Kafka transaction was aborted after a pipeline error; its records are sent again.
pub const KAFKA_TRANSACTION_ABORTED: &str = "kafka_transaction_aborted";
/// Aborting the open Kafka transaction failed or timed out; Kafka ends it itself.
pub const KAFKA_TRANSACTION_ABORT_FAILED: &str = "kafka_transaction_abort_failed";

// The Kafka sink (sink/).
/// librdkafka reported a client error (broker down and the like; it retries by itself).
pub const KAFKA_CLIENT_ERROR: &str = "kafka_client_error";

// The replication source (source.rs, failover.rs).
/// The first connection of the process identified the server (system id, timeline).
pub const SERVER_IDENTIFIED: &str = "server_identified";
/// The server is on a new timeline (failover) and has every published transaction.
pub const TIMELINE_CHANGED: &str = "timeline_changed";

// The state file (`relay.state_file`, failover.rs).
/// The state file knew more than this process: failover checks continue from it.
pub const STATE_LOADED: &str = "state_loaded";
/// Writing the state file failed (logged once until a write succeeds again).
pub const STATE_FILE_WRITE_FAILED: &str = "state_file_write_failed";
/// The state file was written again after [`STATE_FILE_WRITE_FAILED`].
pub const STATE_FILE_WRITTEN_AGAIN: &str = "state_file_written_again";

// The supervisor (run.rs) and the process (main.rs).
/// The pipeline ended on a transient error and is restarted after a backoff (once per reason).
pub const PIPELINE_RESTART: &str = "pipeline_restart";
/// A restart for the same reason as the last one (debug).
pub const PIPELINE_RESTART_REPEATED: &str = "pipeline_restart_repeated";
/// A source of a multi-source config started (`[source.<name>]`).
pub const SOURCE_STARTED: &str = "source_started";
/// A source stopped on a definite error; the process goes on relaying the other sources.
pub const SOURCE_STOPPED: &str = "source_stopped";
/// The process streams `relay.max_sources` sources: this one waits for one of them to stop.
pub const SOURCE_AT_CAPACITY: &str = "source_at_capacity";
/// SIGHUP re-read the config of a multi-source relay: sources added, removed, restarted.
pub const CONFIG_RELOADED: &str = "config_reloaded";
/// SIGHUP found a config that does not load; the sources run on as they were.
pub const CONFIG_RELOAD_FAILED: &str = "config_reload_failed";
/// SIGTERM or SIGINT arrived: the relay stops intake and drains.
pub const SIGNAL_RECEIVED: &str = "signal_received";
/// The Prometheus recorder could not be installed; the relay runs without `/metrics` data.
pub const METRICS_DISABLED: &str = "metrics_disabled";

// Setup and preflight (postgres/setup/, `outbox-relay setup`).
/// `outbox-relay setup` checked everything and created what was missing.
pub const SETUP_OK: &str = "setup_ok";
/// The publication was created (`postgres.create_publication = true`).
pub const PUBLICATION_CREATED: &str = "publication_created";
/// The role has no REPLICATION attribute but is a member of a role that grants replication
/// (RDS/Aurora's `rds_replication`); the server decides at the replication connection.
pub const REPLICATION_BY_MEMBERSHIP: &str = "replication_by_membership";
/// The primary refused `pg_log_standby_snapshot()` while `setup` created a slot on its standby.
pub const STANDBY_SNAPSHOT_FAILED: &str = "standby_snapshot_failed";
/// The relay streams from a standby and `postgres.primary_host` is not set.
pub const STANDBY_WITHOUT_PRIMARY: &str = "standby_without_primary";
/// The relay streams from a standby that has no physical slot on its primary.
pub const STANDBY_WITHOUT_PHYSICAL_SLOT: &str = "standby_without_physical_slot";
/// PostgreSQL 18's idle_replication_slot_timeout is on: what it means for a stopped relay.
pub const SLOT_IDLE_TIMEOUT: &str = "slot_idle_timeout";
/// The slot keeper acquired and released the idle slot (idle_replication_slot_timeout).
pub const SLOT_HELD_IDLE: &str = "slot_held_idle";
/// The slot keeper could not acquire the idle slot; it retries at the next check.
pub const SLOT_KEEPER_FAILED: &str = "slot_keeper_failed";
/// The replication slot was created; events committed from its LSN on are relayed.
pub const SLOT_CREATED: &str = "slot_created";
/// Another instance created the slot between this one's look-up and its create (both found
/// none); this one uses that slot as if it had been there.
pub const SLOT_CREATED_BY_OTHER: &str = "slot_created_by_other";
/// `setup --recreate-slot` replaced an invalidated slot; the gap between the LSNs is logged.
pub const SLOT_RECREATED: &str = "slot_recreated";
/// `setup --recreate-slot --heal`: where the gap starts and ends, and what is read to heal it.
pub const HEAL_BOUNDS: &str = "heal_bounds";
/// The heal published the gap's rows (counts: healed, doubtful, streamed by the new slot).
pub const HEAL_DONE: &str = "heal_done";
/// The heal could not cover part of the gap (the process then exits non-zero).
pub const HEAL_UNCOVERED: &str = "heal_uncovered";
/// `outbox-relay republish`: what was selected and sent (or, in a dry run, would be).
pub const REPUBLISH_DONE: &str = "republish_done";
/// Re-published or healed records: how many rows' commit LSNs were read from the WAL still on
/// disk (`pg_walinspect`); the others carry `0/0`, and why is said.
pub const COMMIT_LSNS_READ: &str = "commit_lsns_read";
/// Another connection holds the slot (an active instance); this one waits for it.
pub const SLOT_IN_USE: &str = "slot_in_use";
/// A passive instance saw the slot free (its holder gone) and takes it over at once.
pub const SLOT_FREED: &str = "slot_freed";
/// Debug: a passive instance could not look at the slot; it retries on its backoff instead.
pub const SLOT_POLL_FAILED: &str = "slot_poll_failed";
/// `setup --from-debezium` recorded where `run` starts: after Debezium's last committed transaction.
pub const CUTOVER_RECORDED: &str = "cutover_recorded";
/// `setup --from-debezium`: Debezium confirmed its slot past its stored offset (reported, not refused).
pub const CUTOVER_SLOT_AHEAD: &str = "cutover_slot_ahead";
/// `setup --from-debezium` replaced an earlier cutover's checkpoint with the connector's newer offset.
pub const CUTOVER_REPLACED: &str = "cutover_replaced";

// The slot monitor and its alerts (monitor.rs, alert.rs).
/// The monitor cannot query PostgreSQL (logged once per distinct error).
pub const SLOT_MONITOR_FAILED: &str = "slot_monitor_failed";
/// The publication stopped listing an outbox table while streaming: the relay stops.
pub const PUBLICATION_DRIFT: &str = "publication_drift";
/// The monitor found the slot invalidated (`wal_status = lost`): the relay stops.
pub const SLOT_LOST: &str = "slot_lost";
/// An alert changed to warning or critical (WARN or ERROR).
pub const ALERT_FIRING: &str = "alert_firing";
/// An alert went back to ok.
pub const ALERT_RESOLVED: &str = "alert_resolved";
/// The monitor cannot read an outbox table's health (logged once per distinct error).
pub const OUTBOX_STATS_FAILED: &str = "outbox_stats_failed";
/// The `stalled` alert fired: the monitor restarts the pipeline.
pub const PIPELINE_STALLED: &str = "pipeline_stalled";

// The alert webhook (webhook.rs).
/// `alerts.webhook.url` is set: notifications are sent to it.
pub const WEBHOOK_ENABLED: &str = "webhook_enabled";
/// `alerts.webhook.url` is invalid: no notifications are sent.
pub const WEBHOOK_DISABLED: &str = "webhook_disabled";
/// A notification was delivered (debug).
pub const WEBHOOK_SENT: &str = "webhook_sent";
/// A notification was dropped after its attempts failed.
pub const WEBHOOK_FAILED: &str = "webhook_failed";
/// The notification queue was full: a notification was dropped.
pub const WEBHOOK_QUEUE_FULL: &str = "webhook_queue_full";

// The heartbeat (heartbeat.rs).
/// A heartbeat message was written (trace).
pub const HEARTBEAT_WRITTEN: &str = "heartbeat_written";
/// The server is a standby, so no heartbeat is written (logged once).
pub const HEARTBEAT_SKIPPED: &str = "heartbeat_skipped";
/// Writing a heartbeat failed (logged once per distinct error).
pub const HEARTBEAT_FAILED: &str = "heartbeat_failed";

/// Every event name.
pub const ALL: &[&str] = &[
    STREAMING_STARTED,
    SHUTDOWN_DRAINING,
    SHUTDOWN_TIMEOUT,
    SHUTDOWN_COMMIT_FAILED,
    SHUTDOWN_COMPLETE,
    SHUTDOWN_OVERRUN,
    LOGICAL_MESSAGE_IGNORED,
    OUTBOX_TABLE_RENAMED,
    OUTBOX_UPDATE_IGNORED,
    OUTBOX_DELETE_IGNORED,
    EVENT_DEAD_LETTERED,
    KAFKA_PRODUCER_FENCED_OTHERS,
    KAFKA_TRANSACTION_ENDED,
    CHECKPOINT_TOPIC_CREATED,
    CHECKPOINT_TOPIC_UNUSABLE,
    CHECKPOINT_READ_END,
    CHECKPOINT_MISSING,
    CHECKPOINT_FOUND,
    CHECKPOINT_STANDBY_KEY_KEPT,
    CHECKPOINT_SKIP_DONE,
    CHECKPOINT_IGNORED,
    CHECKPOINT_WRITE_FAILED,
    CHECKPOINT_WRITTEN,
    LSN_CONFIRMED,
    KAFKA_TRANSACTION_ABORTED,
    KAFKA_TRANSACTION_ABORT_FAILED,
    KAFKA_CLIENT_ERROR,
    SERVER_IDENTIFIED,
    TIMELINE_CHANGED,
    STATE_LOADED,
    STATE_FILE_WRITE_FAILED,
    STATE_FILE_WRITTEN_AGAIN,
    PIPELINE_RESTART,
    PIPELINE_RESTART_REPEATED,
    SOURCE_STARTED,
    SOURCE_STOPPED,
    SOURCE_AT_CAPACITY,
    CONFIG_RELOADED,
    CONFIG_RELOAD_FAILED,
    SIGNAL_RECEIVED,
    METRICS_DISABLED,
    SETUP_OK,
    PUBLICATION_CREATED,
    REPLICATION_BY_MEMBERSHIP,
    SLOT_IDLE_TIMEOUT,
    STANDBY_WITHOUT_PHYSICAL_SLOT,
    STANDBY_WITHOUT_PRIMARY,
    STANDBY_SNAPSHOT_FAILED,
    SLOT_HELD_IDLE,
    SLOT_KEEPER_FAILED,
    SLOT_CREATED,
    SLOT_CREATED_BY_OTHER,
    SLOT_RECREATED,
    HEAL_BOUNDS,
    HEAL_DONE,
    HEAL_UNCOVERED,
    REPUBLISH_DONE,
    COMMIT_LSNS_READ,
    SLOT_IN_USE,
    SLOT_FREED,
    SLOT_POLL_FAILED,
    CUTOVER_RECORDED,
    CUTOVER_SLOT_AHEAD,
    CUTOVER_REPLACED,
    SLOT_MONITOR_FAILED,
    PUBLICATION_DRIFT,
    SLOT_LOST,
    ALERT_FIRING,
    ALERT_RESOLVED,
    PIPELINE_STALLED,
    OUTBOX_STATS_FAILED,
    WEBHOOK_ENABLED,
    WEBHOOK_DISABLED,
    WEBHOOK_SENT,
    WEBHOOK_FAILED,
    WEBHOOK_QUEUE_FULL,
    HEARTBEAT_WRITTEN,
    HEARTBEAT_SKIPPED,
    HEARTBEAT_FAILED,
];

#[cfg(test)]
mod tests;
