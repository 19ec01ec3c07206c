//! `relay.state_file`: what the failover checks must remember across restarts.
//!
//! Invariant: the file never claims less than the relay published before the last write. It is
//! replaced atomically (write a temporary file, fsync, rename), so a crash leaves the previous
//! or the new version, never a torn one; `published` only grows within one system and timeline
//! lineage. A crash loses at most the last second of `published` (the write interval).

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use relay_core::Lsn;
use serde::{Deserialize, Serialize};

use crate::error::{Definite, RelayError};

/// The remembered identity and progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct State {
    pub(crate) system_id: String,
    pub(crate) timeline: u32,
    /// Commit LSN (`X/Y`) of the last transaction with a record handed to Kafka.
    pub(crate) published: String,
}

impl State {
    pub(crate) fn published_lsn(&self) -> Result<Lsn, String> {
        self.published.parse().map_err(|e| format!("{e}"))
    }

    /// Whether this saved state knows more than the memory `(identity, published)`, so that
    /// the memory must take it over. Instances that share the file each write it only while
    /// they stream, so a newer file means another instance streamed since this one last did:
    /// a later timeline or a later publication of the same system, or another system (the
    /// only way one gets into the file is an instance that passed the checks after the operator
    /// deleted the file or set `postgres.system_identifier`). A file that knows less (this
    /// instance followed a promotion the file has not seen) never rewinds the memory.
    pub(crate) fn supersedes(&self, identity: Option<(&str, u32)>, published: Lsn) -> bool {
        let Some((system_id, timeline)) = identity else {
            return true;
        };
        let saved = self.published_lsn().unwrap_or_default();
        self.system_id != system_id
            || self.timeline > timeline
            || (self.timeline == timeline && saved > published)
    }
}

/// Reads the state file; `None` if it does not exist yet.
pub(crate) fn load(path: &Path) -> Result<Option<State>, RelayError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unusable(path, &e.to_string())),
    };
    let state: State = serde_json::from_str(&text).map_err(|e| unusable(path, &e.to_string()))?;
    state.published_lsn().map_err(|e| unusable(path, &e))?;
    Ok(Some(state))
}

fn unusable(path: &Path, why: &str) -> RelayError {
    RelayError::from(Definite::Precondition(format!(
        "relay.state_file {} cannot be read ({why}). It holds what the failover checks must \
         remember; restore it, or delete it to start without that memory (docs/operations.md, \
         \"Failover\")",
        path.display()
    )))
}

/// Replaces the state file atomically.
pub(crate) fn save(path: &Path, state: &State) -> std::io::Result<()> {
    let tmp = temp_path(path);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(serde_json::to_string(state)?.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename itself must survive a power loss.
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_atomically_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(load(&path).unwrap(), None);
        let s = State {
            system_id: "7713998481682642497".into(),
            timeline: 2,
            published: Lsn(0x0193_1E58).to_string(),
        };
        save(&path, &s).unwrap();
        assert_eq!(load(&path).unwrap(), Some(s));
        assert!(!temp_path(&path).exists());

        std::fs::write(
            &path,
            "{\"system_id\":\"1\",\"timeline\":1,\"published\":\"nope\"}",
        )
        .unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(
            e.contains("cannot be read") && e.contains("delete it"),
            "{e}"
        );
        std::fs::write(&path, "{\"system_id\":\"1\"}").unwrap();
        assert!(load(&path).is_err());
    }

    #[test]
    fn a_file_supersedes_memory_only_when_it_knows_more() {
        let file = State {
            system_id: "7".into(),
            timeline: 2,
            published: "0/500".into(),
        };
        // Nothing in memory yet (a fresh process).
        assert!(file.supersedes(None, Lsn::ZERO));
        // Same lineage: the later timeline or the later publication wins.
        assert!(file.supersedes(Some(("7", 2)), Lsn(0x4FF)));
        assert!(!file.supersedes(Some(("7", 2)), Lsn(0x500)));
        assert!(!file.supersedes(Some(("7", 2)), Lsn(0x600)));
        assert!(file.supersedes(Some(("7", 1)), Lsn(0x900)));
        assert!(!file.supersedes(Some(("7", 3)), Lsn(0x100)));
        // Another system got into the file only through an instance that passed the checks.
        assert!(file.supersedes(Some(("8", 5)), Lsn(0x900)));
    }
}
