//! Checkpoints in the pipeline: at the start, the newest one read and its timeline checked,
//! which sets up the skip; then the checkpoint that ends every Kafka transaction, and, without
//! transactions, the one written after the acknowledgements it describes.
//!
//! When a checkpoint may be written, and what it covers, is the progress rule's
//! ([`relay_core::progress::Progress::checkpoint_to_write`]: never before the skip is
//! verified); this module writes it.
//!
//! What a checkpoint names (the trail's last change) is the ledger's ([`super::ledger`]). With
//! transactions, each checkpoint written here becomes the primer of the next Kafka transaction:
//! a copy of it opens the next one that carries records ([`super::send`], where the copy is
//! sent and why it is safe: it never ends up last and covers no more than an earlier
//! checkpoint named).

use relay_core::{
    Lsn,
    checkpoint::{ChangeRef, Checkpoint, Trail},
    progress::CheckpointAt,
    skip::Skip,
    timeline::{History, follow},
};

use super::state::{Pipeline, Start};
use crate::{
    config::{Config, Delivery},
    error::{Definite, RelayError},
    postgres::carry::Carry,
    postgres::session::Session,
    postgres::session::slot_start,
    sink::Sink,
    sink::checkpoint_topic::{Identity, Scope, prepare_topic, read_latest},
    telemetry::events::{
        CHECKPOINT_FOUND, CHECKPOINT_IGNORED, CHECKPOINT_MISSING, CHECKPOINT_STANDBY_KEY_KEPT,
        CHECKPOINT_TOPIC_UNUSABLE, CHECKPOINT_WRITE_FAILED, CHECKPOINT_WRITTEN,
    },
    telemetry::metrics as m,
};

/// After the slot is won and the producer fenced: reads the newest checkpoint of this slot.
/// `prepared`: what [`prepare_topic`] answered while the session opened, if it ran.
pub(super) async fn start(
    cfg: &Config,
    preflight_start: Lsn,
    system_id: &str,
    history: &History,
    scope: &Scope,
    carry: &mut Carry,
    prepared: Option<Result<bool, RelayError>>,
) -> Result<Start, RelayError> {
    let exactly_once = cfg.relay.delivery == Delivery::ExactlyOnce;
    let without = |start| Start {
        start,
        skip: Skip::none(),
        trail: Trail::new(None),
        checkpoints: None,
    };
    if !carry.checkpoint_topic_ready {
        let ready = match prepared {
            Some(answered) => answered?,
            None => prepare_topic(cfg).await?,
        };
        if !ready {
            return Ok(without(preflight_start));
        }
        carry.checkpoint_topic_ready = true;
    }
    let start = slot_start(cfg).await?;
    let plain = Identity::new(cfg, system_id, history.timeline);
    let (id, prefetched) = match identity(cfg, plain, scope).await {
        Ok(found) => found,
        Err(e) if goes_on_without(exactly_once, &e) => {
            tracing::warn!(error = %e, "{CHECKPOINT_TOPIC_UNUSABLE}: going on without checkpoints");
            return Ok(without(start));
        }
        Err(e) => return Err(e),
    };
    let fresh = |id| Start {
        start,
        skip: Skip::none(),
        trail: Trail::new(None),
        checkpoints: Some(id),
    };
    if std::mem::take(&mut carry.ignore_checkpoint) && !exactly_once {
        tracing::warn!(
            "{CHECKPOINT_IGNORED}: the last connection found the checkpoint contradicted by the \
             stream; streaming from the slot's position {start} without skipping"
        );
        return Ok(fresh(id));
    }
    let read = match prefetched {
        Some(c) => Ok(Some(c)),
        None => read_latest(cfg, id.key()).await,
    };
    let found = match read {
        Ok(found) => found,
        Err(e) if goes_on_without(exactly_once, &e) => {
            tracing::warn!(error = %e, "{CHECKPOINT_TOPIC_UNUSABLE}: going on without checkpoints");
            return Ok(without(start));
        }
        Err(e) => return Err(e),
    };
    let Some(mut c) = found else {
        tracing::info!(
            key = %id.key(), topic = %cfg.kafka.checkpoint_topic,
            "{CHECKPOINT_MISSING}: streaming from the slot's position {start}; events sent \
             before may be sent again, none is lost"
        );
        return Ok(resume(None, start, id));
    };
    if c.timeline != history.timeline {
        // Kafka holds changes of an earlier timeline: the server's history must contain them,
        // and beyond the fork the new timeline's changes are its own.
        let published = c.last.as_ref().map_or(Lsn::ZERO, |l| l.commit_lsn);
        match follow(c.timeline, published, history) {
            Ok(f) => c.covered_lsn = c.covered_lsn.min(f.fork),
            // At-least-once: the failover checks of relay.state_file decide; the checkpoint
            // only saves re-sends, it never stops the relay.
            Err(divergence) if !exactly_once => {
                tracing::warn!(
                    divergence = %divergence,
                    "{CHECKPOINT_IGNORED}: the checkpoint is of a history this server does not \
                     have; streaming from the slot's position {start} without skipping"
                );
                return Ok(fresh(id));
            }
            Err(divergence) => {
                return Err(Definite::HistoryDiverged {
                    target: format!("{}:{}", cfg.postgres.host, cfg.postgres.port),
                    divergence,
                }
                .into());
            }
        }
    }
    tracing::info!(
        key = %id.key(), covered = %c.covered_lsn,
        last = ?c.last.as_ref().map(ChangeRef::to_string), slot_start = %start,
        "{CHECKPOINT_FOUND}"
    );
    Ok(resume(Some(c), start, id))
}

/// Whether a start goes on without checkpoints after reading them failed with `e`: only in
/// at-least-once mode, and only for what the operator must change (the principal's rights, a
/// checkpoint that does not parse). A slow or unreachable broker is waited for as the events'
/// topics are: going on without would cost a heal its starting point if the slot is lost
/// later (issue 40, the CI of a13719d).
fn goes_on_without(exactly_once: bool, e: &RelayError) -> bool {
    !exactly_once && !e.is_transient()
}

/// Where a start resumes: from the slot's position `start`, skipping what the newest checkpoint
/// `found` names as already in Kafka (its trail goes on from there).
pub(super) fn resume(found: Option<Checkpoint>, start: Lsn, id: Identity) -> Start {
    use super::deliberate::{Bug, on};
    let Some(mut c) = found else {
        return Start {
            start,
            skip: Skip::none(),
            trail: Trail::new(None),
            checkpoints: Some(id),
        };
    };
    if on(Bug::SkipOneTooMany)
        && let Some(last) = c.last.as_mut()
    {
        last.index += 1;
    }
    let start = if on(Bug::ResumeFromCheckpoint) {
        c.covered_lsn
    } else {
        start
    };
    Start {
        start,
        skip: Skip::new(Some(&c), start),
        trail: Trail::new(c.last.clone()),
        checkpoints: Some(id),
    }
}

/// Under which identity this slot's checkpoints are ([`Scope`]), and, for a promoted
/// standby whose slot was made before the promotion, its newest checkpoint (read to find out).
async fn identity(
    cfg: &Config,
    plain: Identity,
    scope: &Scope,
) -> Result<(Identity, Option<Checkpoint>), RelayError> {
    match scope {
        Scope::Primary => Ok((plain, None)),
        Scope::Standby(name) => Ok((plain.of_standby_slot(name), None)),
        Scope::Promoted(name) => {
            let standby = plain.clone().of_standby_slot(name);
            match read_latest(cfg, standby.key()).await? {
                Some(c) => {
                    tracing::info!(
                        key = %standby.key(), primary_slot_name = %name,
                        "{CHECKPOINT_STANDBY_KEY_KEPT}: the slot was made on this server while \
                         it was a standby; its checkpoints stay under the standby's key"
                    );
                    Ok((standby, Some(c)))
                }
                None => Ok((plain, None)),
            }
        }
    }
}

impl<S: Session, K: Sink> Pipeline<'_, S, K> {
    /// Puts the checkpoint covering `covered` into the open Kafka transaction (or, without
    /// transactions, sends it); the progress rule decided that one is due
    /// ([`relay_core::progress::Progress::checkpoint_to_write`]). `None`: no checkpoints on
    /// this connection.
    pub(super) async fn write_checkpoint(
        &mut self,
        covered: Lsn,
    ) -> Result<Option<Lsn>, RelayError> {
        let Some(c) = self.ledger.checkpoint(covered, self.transactional) else {
            return Ok(None);
        };
        tracing::debug!(covered = %covered, last = ?c.last.as_ref().map(ChangeRef::to_string), "{CHECKPOINT_WRITTEN}");
        let (key, value) = (c.key(), c.to_json());
        let topic = &self.cfg.kafka.checkpoint_topic;
        self.sink
            .send_checkpoint(topic, &key, &value, self.transactional)
            .await?;
        if self.transactional {
            // The commit that follows opens the next transaction, which this one primes.
            self.ledger
                .checkpoint_in_transaction(topic.clone(), key, value);
        }
        Ok(Some(covered))
    }

    /// Without transactions (the caller calls it when one is due: once per status interval, or
    /// once `relay.checkpoint_bytes` were acknowledged since the last): a checkpoint for the
    /// acknowledged prefix, if it moved. A failure is warned about and
    /// changes nothing else. `true`: one was handed to the producer.
    pub(super) async fn write_acknowledged(&mut self) -> bool {
        if let Some(e) = self.sink.checkpoint_failure() {
            metrics::counter!(m::CHECKPOINTS_WRITTEN, "result" => "failed").increment(1);
            tracing::warn!(
                error = %e, topic = %self.cfg.kafka.checkpoint_topic,
                "{CHECKPOINT_WRITE_FAILED}: more events are sent again after a PostgreSQL crash"
            );
        }
        let Some(covered) = self
            .progress
            .checkpoint_to_write(self.ledger.skip_status(), CheckpointAt::Acknowledged)
        else {
            return false;
        };
        let covered = if super::deliberate::on(super::deliberate::Bug::CheckpointBeyondAcks) {
            covered.max(self.progress.received())
        } else {
            covered
        };
        match self.write_checkpoint(covered).await {
            Ok(Some(c)) => {
                self.progress.checkpoint_written(c);
                metrics::counter!(m::CHECKPOINTS_WRITTEN, "result" => "written").increment(1);
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, "{CHECKPOINT_WRITE_FAILED}");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::goes_on_without;
    use crate::error::{Definite, RelayError, Transient};

    #[test]
    fn only_an_operator_s_problem_lets_at_least_once_go_on_without_checkpoints() {
        let slow = || RelayError::from(Transient::checkpoint(String::from("offsets timed out")));
        let denied = || {
            RelayError::from(Definite::CheckpointTopic {
                topic: "t".into(),
                detail: "TopicAuthorizationFailed".into(),
            })
        };
        assert!(
            !goes_on_without(false, &slow()),
            "a slow broker is waited for"
        );
        assert!(goes_on_without(false, &denied()));
        assert!(!goes_on_without(true, &slow()));
        assert!(!goes_on_without(true, &denied()), "exactly-once stops");
    }
}
