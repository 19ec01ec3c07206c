//! Failover safety on every connect: the server must be the same system, and a new timeline
//! must contain every transaction already published (rule: [`relay_core::timeline`]). What was
//! published is remembered in memory ([`crate::postgres::carry::Carry`]) and, with
//! `relay.state_file`, on disk ([`crate::postgres::state_file`]) so that it survives restarts.

use std::path::PathBuf;

use relay_core::{Lsn, timeline};

use crate::{
    config::Config,
    error::{Definite, RelayError},
    postgres::carry::Carry,
    telemetry::events::{
        STATE_FILE_WRITE_FAILED, STATE_FILE_WRITTEN_AGAIN, STATE_LOADED, TIMELINE_CHANGED,
    },
};

/// Refuses a server whose WAL is another history: a different system identifier than
/// configured (`postgres.system_identifier`) or than seen before by this process (a restored
/// backup, another cluster at the same address), where the same LSNs name other transactions.
pub(crate) fn check_system(
    cfg: &Config,
    seen: Option<&str>,
    system_id: &str,
) -> Result<(), RelayError> {
    let expected = cfg.postgres.system_identifier.as_deref().or(seen);
    if let Some(expected) = expected
        && expected != system_id
    {
        return Err(RelayError::from(Definite::replication_refused(format!(
            "{}:{} is PostgreSQL system {system_id}, but this relay streams from system \
             {expected}: a restored backup or another cluster answers at that address, and its \
             WAL positions name other transactions. Refusing to stream. If the cluster was \
             rebuilt on purpose, re-create the slot (docs/operations.md), set \
             postgres.system_identifier = \"{system_id}\" and delete relay.state_file if set",
            cfg.postgres.host, cfg.postgres.port
        ))));
    }
    Ok(())
}

/// On a new timeline (failover to a promoted standby), follows it only if its history (read by
/// [`crate::postgres::session`] from the server) contains every transaction already published
/// ([`relay_core::timeline`]).
pub(crate) fn check_timeline(
    cfg: &Config,
    history: &timeline::History,
    streamed: u32,
    published: Lsn,
    server: u32,
) -> Result<(), RelayError> {
    match timeline::follow(streamed, published, history) {
        Ok(follow) => {
            tracing::warn!(
                from = streamed, to = server, fork = %follow.fork, published = %published,
                "{TIMELINE_CHANGED}: the server was promoted (failover) after every published \
                 transaction; streaming continues from the slot on the new primary"
            );
            Ok(())
        }
        Err(divergence) => Err(RelayError::from(Definite::HistoryDiverged {
            target: format!("{}:{}", cfg.postgres.host, cfg.postgres.port),
            divergence,
        })),
    }
}

/// Takes over what `relay.state_file` knows if it knows more than `carry`: at start, and on
/// every connect, so that instances sharing one file (active/passive on a shared volume) check
/// a failover against what *any* of them published ([`crate::postgres::state_file::State::supersedes`]).
pub(crate) fn recall(cfg: &Config, carry: &mut Carry) -> Result<(), RelayError> {
    let Some(path) = &cfg.relay.state_file else {
        return Ok(());
    };
    let Some(saved) = crate::postgres::state_file::load(path)? else {
        return Ok(());
    };
    let identity = carry.identity.as_ref().map(|(s, t)| (s.as_str(), *t));
    if saved.supersedes(identity, carry.published) {
        tracing::info!(
            system_id = %saved.system_id, timeline = saved.timeline, published = %saved.published,
            path = %path.display(), "{STATE_LOADED}: failover checks continue from the state file"
        );
        carry.published = saved.published_lsn().unwrap_or_default();
        carry.identity = Some((saved.system_id, saved.timeline));
    }
    Ok(())
}

/// The state file of `relay.state_file` for the server the pipeline streams from.
pub(crate) struct Memory {
    path: PathBuf,
    system_id: String,
    timeline: u32,
    /// The `published` value last written.
    saved: Option<Lsn>,
    /// The last write failed (logged once until a write succeeds again).
    failing: bool,
}

impl Memory {
    pub(crate) fn new(path: PathBuf, system_id: &str, timeline: u32) -> Memory {
        Memory {
            path,
            system_id: system_id.to_string(),
            timeline,
            saved: None,
            failing: false,
        }
    }

    /// Writes the state file if `published` moved since the last write. The write (two fsyncs)
    /// runs on tokio's blocking pool: on a slow volume it would otherwise hold up every task of
    /// the runtime thread (the replication reader, the HTTP server).
    pub(crate) async fn save(&mut self, published: Lsn) -> std::io::Result<()> {
        if self.saved == Some(published) {
            return Ok(());
        }
        let path = self.path.clone();
        let state = crate::postgres::state_file::State {
            system_id: self.system_id.clone(),
            timeline: self.timeline,
            published: published.to_string(),
        };
        tokio::task::spawn_blocking(move || crate::postgres::state_file::save(&path, &state))
            .await
            .map_err(std::io::Error::other)??;
        self.saved = Some(published);
        Ok(())
    }

    /// [`save`](Self::save), logging a failure once until a write succeeds again.
    pub(crate) async fn save_or_warn(&mut self, published: Lsn) {
        match self.save(published).await {
            Err(e) if !self.failing => {
                self.failing = true;
                tracing::warn!(
                    path = %self.path.display(), error = %e,
                    "{STATE_FILE_WRITE_FAILED}: the failover memory on disk lags behind until a write succeeds"
                );
            }
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::info!(path = %self.path.display(), "{STATE_FILE_WRITTEN_AGAIN}");
            }
            _ => {}
        }
    }
}
