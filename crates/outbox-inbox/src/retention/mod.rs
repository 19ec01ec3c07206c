//! Inbox retention: which age of inbox rows may be deleted ([`decide`], a pure rule) and the
//! job that deletes them in small batches ([`RetentionJob`]), which needs the rule's [`Allowed`].

mod job;
mod rule;

pub use job::{Deleted, RetentionJob};
pub use rule::{Allowed, Refusal, TopicRetention, decide};
