//! `outbox-relay setup --from-debezium`: the cutover from a Debezium connector that was
//! streaming the same outbox, with no gap.
//!
//! Mechanism: the relay's own checkpoint. Setup reads Debezium's committed offset (Connect's
//! offsets topic or the standalone offsets file), applies the rule of
//! `relay_core::debezium_position` (only whole transactions whose commit LSN is below
//! `lsn_commit` are proven in Kafka), takes over Debezium's slot (or creates the configured
//! one) and writes to `kafka.checkpoint_topic`, under the key `run` will use, a checkpoint that
//! covers exactly the proven transactions. Every start of `run`, in either delivery mode, reads
//! the newest checkpoint and skips what it covers (`relay_core::skip`), so the first run starts
//! right after the last transaction Debezium committed, and the relay's own checkpoints replace
//! it from then on. No new start-up path is added to `run`.
//!
//! Invariants:
//! - The checkpoint (`relay_core::debezium_position::Proven::checkpoint`) names no change and
//!   no tables: the relay did not publish these records itself, so it cannot meet or verify
//!   them; every change of a transaction committed below `covered_lsn` is skipped, every later
//!   one published. Its key is the one `run` reads (`<system id>/<database>/<slot>`, the
//!   system id and timeline from IDENTIFY_SYSTEM, as `run` has them).
//! - Nothing is lost: the slot must send every transaction that is not proven, i.e. its start
//!   must be at or before `covered_lsn`. A new slot (`--debezium-slot` names another one, or
//!   Debezium's is missing) that starts later is refused (and dropped again if this setup
//!   created it). Debezium's own slot may be confirmed later than its stored offset, by
//!   Debezium, only for records Kafka acknowledged (`BaseSourceTask.commit` confirms the
//!   `lsn_commit` of the last acknowledged record, which Connect stores a flush later): reported
//!   (`cutover_slot_ahead`), not refused, since PostgreSQL cannot send those again anyway.
//! - Debezium must not hold its slot, nor anyone the relay's (an active walsender): refused
//!   with what to stop.
//! - A checkpoint the relay wrote itself for this slot is never overwritten: the relay ran, and
//!   its own position is newer than Debezium's. An earlier cutover's is replaced (Debezium ran
//!   again since; its newer offset proves more).

mod offsets_topic;

use std::path::PathBuf;

use relay_core::{
    Lsn,
    checkpoint::Checkpoint,
    debezium_position::{
        DebeziumOffset, Entry, Proven, is_cutover_checkpoint, read_offsets_file, slot_leaves_no_gap,
    },
};

use crate::{
    config::Config,
    error::{Definite, RelayError, Transient},
    postgres::control::{self, query_err},
    postgres::session::{classify, replication_config},
    postgres::setup::{SlotPolicy, preflight},
    sink::checkpoint_topic::{Scope, prepare_topic, read_latest},
    telemetry::events::{CUTOVER_RECORDED, CUTOVER_REPLACED, CUTOVER_SLOT_AHEAD, SETUP_OK},
};

/// Where Debezium's offsets are.
#[derive(Debug, Clone)]
pub enum OffsetStorage {
    /// Kafka Connect's offsets topic (`offset.storage.topic`), on `kafka.brokers`.
    Topic(String),
    /// The standalone worker's `offset.storage.file.filename`.
    File(PathBuf),
}

/// What `setup --from-debezium` was told.
#[derive(Debug, Clone)]
pub struct FromDebezium {
    pub storage: OffsetStorage,
    /// The connector's `name`.
    pub connector: String,
    /// Its `topic.prefix`, when the storage holds several for the name.
    pub server: Option<String>,
    /// The slot Debezium streamed from (its `slot.name`); `None`: `postgres.slot`, taken over.
    /// Another name makes `postgres.slot` a new slot for the relay.
    pub debezium_slot: Option<String>,
}

fn refused(text: String) -> RelayError {
    Definite::Precondition(text).into()
}

/// The cutover: see the module docs. The steps, in this order: no one holds either slot, read
/// Debezium's offset, the slot (taken over or created) leaves no gap, the checkpoint topic is
/// usable, the cutover's checkpoint is written (unless the relay's own is there), reported.
pub async fn setup(cfg: &Config, from: &FromDebezium) -> Result<(), RelayError> {
    let slot_name = &cfg.postgres.slot;
    let debezium_slot = from.debezium_slot.as_ref().unwrap_or(slot_name);
    let take_over = debezium_slot == slot_name;
    let control = control::connect(cfg).await?;
    let existing = check_slots_not_held(&control, from, debezium_slot, slot_name).await?;
    let entries = read_offsets(cfg, &from.storage).await?;
    let offset = DebeziumOffset::select(&entries, &from.connector, from.server.as_deref())
        .map_err(|e| refused(e.to_string()))?;
    let proven = offset.proven().map_err(|e| refused(e.to_string()))?;
    let covered = proven.complete_before;
    let created = !existing;
    let slot = preflight(&control, cfg, SlotPolicy::CreateIfMissing).await?;
    let start = slot.confirmed_flush;
    let new_slot = created || !take_over;
    if new_slot && !slot_leaves_no_gap(proven, start) {
        if created {
            drop_created_slot(&control, slot_name).await?;
        }
        return Err(gap_refused(from, slot_name, created, covered, start));
    }
    if !new_slot && start > covered {
        tracing::info!(
            slot = %slot_name, confirmed_flush = %start, lsn_commit = %covered,
            "{CUTOVER_SLOT_AHEAD}: Debezium confirmed the slot past its stored offset (it confirms \
             the lsn_commit of records Kafka acknowledged, and Connect stores offsets later); \
             PostgreSQL cannot send the transactions between again, and Debezium had them \
             acknowledged"
        );
    }

    let (system_id, timeline) = identify(cfg).await?;
    check_checkpoint_topic_usable(cfg).await?;
    let checkpoint = cutover_checkpoint(&control, cfg, proven, &system_id, timeline).await?;
    record(cfg, &checkpoint, covered).await?;
    report(cfg, &offset, created, take_over, start, covered);
    tracing::info!(slot = %slot_name, publication = %cfg.postgres.publication, confirmed_flush = %start, "{SETUP_OK}");
    Ok(())
}

/// Neither Debezium's slot nor the relay's is held by a connection (the connector, or a relay):
/// whether the relay's slot exists.
async fn check_slots_not_held(
    control: &tokio_postgres::Client,
    from: &FromDebezium,
    debezium_slot: &str,
    slot_name: &str,
) -> Result<bool, RelayError> {
    let mut existing = false;
    for (slot, whose) in [(debezium_slot, "the Debezium connector"), (slot_name, "it")] {
        let Some(row) = control
            .query_opt(
                "SELECT s.active_pid, a.application_name, a.client_addr::text \
                   FROM pg_replication_slots s \
                   LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid \
                  WHERE s.slot_name = $1",
                &[&slot],
            )
            .await
            .map_err(query_err("look up the replication slot"))?
        else {
            continue;
        };
        existing |= slot == slot_name;
        if let Some(pid) = row.get::<_, Option<i32>>(0) {
            let app: Option<String> = row.get(1);
            let addr: Option<String> = row.get(2);
            return Err(refused(format!(
                "replication slot {slot:?} is held by PID {pid} (application_name {:?}, client \
                 {}): stop {whose} first (for Debezium's connector {:?}, Kafka Connect's PUT \
                 /connectors/{}/stop, or stop the worker), wait until the slot is inactive, and \
                 run this again",
                app.unwrap_or_default(),
                addr.unwrap_or_else(|| "local".into()),
                from.connector,
                from.connector
            )));
        }
    }
    Ok(existing)
}

/// Every entry of Debezium's offset storage: the standalone worker's file or Connect's topic.
async fn read_offsets(cfg: &Config, storage: &OffsetStorage) -> Result<Vec<Entry>, RelayError> {
    Ok(match storage {
        OffsetStorage::File(path) => {
            let data = std::fs::read(path).map_err(|e| {
                refused(format!(
                    "cannot read the Connect offsets file {}: {e}",
                    path.display()
                ))
            })?;
            read_offsets_file(&data).map_err(|e| refused(format!("{}: {e}", path.display())))?
        }
        OffsetStorage::Topic(topic) => offsets_topic::read_all(cfg, topic).await?,
    })
}

/// Drops the slot this setup created, before refusing the gap it would leave.
async fn drop_created_slot(
    control: &tokio_postgres::Client,
    slot_name: &str,
) -> Result<(), RelayError> {
    control
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot_name])
        .await
        .map_err(query_err("drop the slot this setup created"))?;
    Ok(())
}

/// The refusal when the new slot starts after what Debezium proved (`created`: this setup
/// created it, and dropped it again).
fn gap_refused(
    from: &FromDebezium,
    slot_name: &str,
    created: bool,
    covered: Lsn,
    start: Lsn,
) -> RelayError {
    refused(format!(
        "Debezium's connector {:?} committed the transactions before {covered}, and the new \
         slot {slot_name:?} starts at {start}: events committed between would be lost{}. \
         Take over Debezium's own slot (postgres.slot = its slot.name); or create the new \
         slot while Debezium still runs (`outbox-relay setup`), stop Debezium once its \
         offsets are past the slot's start, and run this again; or, if Debezium's slot is \
         gone, re-publish the events committed after {covered} from the outbox table",
        from.connector,
        if created {
            ", so the slot was dropped again"
        } else {
            ""
        }
    ))
}

/// `kafka.checkpoint_topic` exists (or was created) and is usable.
async fn check_checkpoint_topic_usable(cfg: &Config) -> Result<(), RelayError> {
    if !prepare_topic(cfg).await? {
        return Err(refused(format!(
            "the cutover records its start in kafka.checkpoint_topic {:?}, which is unusable \
             (see the warning above): fix it and run this again",
            cfg.kafka.checkpoint_topic
        )));
    }
    Ok(())
}

/// The checkpoint covering what Debezium proved, under the key `run` will read.
async fn cutover_checkpoint(
    control: &tokio_postgres::Client,
    cfg: &Config,
    proven: Proven,
    system_id: &str,
    timeline: u32,
) -> Result<Checkpoint, RelayError> {
    // A slot on a standby keeps its checkpoints under a key of its own (checkpoint::Scope),
    // and on a promoted standby under that key if it has one there.
    let at = |standby: Option<&str>| {
        proven.checkpoint(
            system_id,
            &cfg.postgres.database,
            &cfg.postgres.slot,
            timeline,
            standby,
        )
    };
    Ok(match crate::postgres::standby::scope(control).await? {
        Scope::Primary => at(None),
        Scope::Standby(name) => at(Some(&name)),
        Scope::Promoted(name) => {
            let standby = at(Some(&name));
            match read_latest(cfg, standby.key()).await? {
                Some(_) => standby,
                None => at(None),
            }
        }
    })
}

/// Writes `checkpoint` unless it is there already; replaces an earlier cutover's; refuses when
/// the relay's own checkpoint is there.
async fn record(cfg: &Config, checkpoint: &Checkpoint, covered: Lsn) -> Result<(), RelayError> {
    match read_latest(cfg, checkpoint.key()).await? {
        Some(c) if c == *checkpoint => {}
        // An earlier cutover's, Debezium having run since: its newer offset replaces it.
        Some(c) if is_cutover_checkpoint(&c) => {
            tracing::info!(
                before = %c.covered_lsn, now = %covered,
                "{CUTOVER_REPLACED}: the checkpoint of an earlier `setup --from-debezium` is \
                 replaced by the connector's current offset"
            );
            offsets_topic::write(cfg, &checkpoint.key(), &checkpoint.to_json()).await?;
        }
        Some(c) => {
            return Err(refused(format!(
                "kafka.checkpoint_topic {:?} already has a checkpoint for slot {:?} \
                 (covering up to {}): the relay has run on this slot, and its own position is \
                 newer than Debezium's. Nothing was changed; start `outbox-relay run`",
                cfg.kafka.checkpoint_topic, cfg.postgres.slot, c.covered_lsn
            )));
        }
        None => offsets_topic::write(cfg, &checkpoint.key(), &checkpoint.to_json()).await?,
    }
    Ok(())
}

/// The cutover's record: the log event, and the summary on stdout for the operator.
fn report(
    cfg: &Config,
    offset: &DebeziumOffset,
    created: bool,
    take_over: bool,
    start: Lsn,
    covered: Lsn,
) {
    let slot_name = &cfg.postgres.slot;
    tracing::info!(
        connector = %offset.connector, server = %offset.server,
        lsn_commit = ?offset.lsn_commit.map(|l| l.to_string()),
        lsn = ?offset.lsn.map(|l| l.to_string()),
        lsn_proc = ?offset.lsn_proc.map(|l| l.to_string()),
        tx_id = ?offset.tx_id, ts_usec = ?offset.ts_usec,
        slot = %slot_name, slot_created = created, slot_start = %start, covered = %covered,
        "{CUTOVER_RECORDED}: `run` skips the transactions committed before {covered} (Debezium \
         published them) and publishes every later one; the transaction Debezium was in (and \
         anything it had not committed) is sent again"
    );
    println!(
        "Debezium connector {:?} (topic.prefix {:?}): lsn_commit {}, lsn {}, txId {}\n\
         slot {slot_name:?} {}, streams from {start}\n\
         recorded in {:?}: transactions committed before {covered} are Debezium's; the relay \
         publishes from there on. Start `outbox-relay run`.",
        offset.connector,
        offset.server,
        show(offset.lsn_commit),
        show(offset.lsn),
        offset.tx_id.map_or("-".into(), |t| t.to_string()),
        if take_over && !created {
            "taken over"
        } else if created {
            "created"
        } else {
            "in place"
        },
        cfg.kafka.checkpoint_topic
    );
}

fn show(l: Option<Lsn>) -> String {
    l.map_or("-".into(), |l| l.to_string())
}

/// The server's system identifier and timeline, as `run` reads them (IDENTIFY_SYSTEM), so the
/// checkpoint's key and timeline are the ones `run` looks for.
pub(crate) async fn identify(cfg: &Config) -> Result<(String, u32), RelayError> {
    let rcfg = replication_config(cfg, std::time::Duration::from_secs(1))?;
    let mut client = pgwire_replication::ReplicationClient::connect_gated(rcfg)
        .await
        .map_err(|e| classify(e, cfg))?;
    let id = client.identify_system().await;
    client.abort();
    let id = id.map_err(|e| classify(e, cfg))?;
    if id.system_id.is_empty() {
        return Err(Transient::replication("IDENTIFY_SYSTEM returned no system id").into());
    }
    Ok((id.system_id, id.timeline))
}
