//! Running sources: the supervisor of one source ([`run`]: preflight, stream, restart after a
//! transient failure), several sources in one process ([`fleet`], each task tagged by its
//! [`source_scope`]), what survives a restart ([`carry`]), the in-flight bytes shared by every
//! source ([`budget`]) and stopping from any wait ([`stop`]).

pub mod fleet;
pub(crate) mod heartbeat;
pub mod run;
pub(crate) mod slot_keeper;
