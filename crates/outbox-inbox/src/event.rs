//! An event to enqueue; its id is chosen by the producer (UUIDv7: time-ordered, so inbox and
//! outbox indexes grow at their right edge) and travels as the record's `id` header, which is
//! what the consumer's inbox de-duplicates on.

use uuid::Uuid;

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    id: Uuid,
    aggregate_type: String,
    aggregate_id: String,
    event_type: String,
    payload: serde_json::Value,
}

impl Event {
    /// A new event with a fresh UUIDv7 id. With the relay's default mapping it goes to topic
    /// `outbox.event.<aggregate_type>`, keyed by `aggregate_id` (one partition per aggregate,
    /// so its events stay in order), with headers `id` and `eventType` = `event_type`.
    pub fn new(
        aggregate_type: impl Into<String>,
        aggregate_id: impl Into<String>,
        event_type: impl Into<String>,
        payload: serde_json::Value,
    ) -> Event {
        Event {
            id: Uuid::now_v7(),
            aggregate_type: aggregate_type.into(),
            aggregate_id: aggregate_id.into(),
            event_type: event_type.into(),
            payload,
        }
    }

    /// The same event with an id of the caller's (e.g. derived from a request's idempotency
    /// key, so that a retried request enqueues the same event id).
    pub fn with_id(mut self, id: Uuid) -> Event {
        self.id = id;
        self
    }

    pub fn id(&self) -> Uuid {
        self.id
    }
    pub fn aggregate_type(&self) -> &str {
        &self.aggregate_type
    }
    pub fn aggregate_id(&self) -> &str {
        &self.aggregate_id
    }
    pub fn event_type(&self) -> &str {
        &self.event_type
    }
    pub fn payload(&self) -> &serde_json::Value {
        &self.payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_v7_and_increase() {
        let a = Event::new("t", "1", "E", serde_json::json!({}));
        let b = Event::new("t", "1", "E", serde_json::json!({}));
        assert_eq!(a.id().get_version_num(), 7);
        assert!(b.id() > a.id());
    }
}
