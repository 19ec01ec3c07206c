//! The producer side: an event written in the caller's transaction, as an outbox row or as a
//! transactional logical message. Either way it is part of the business transaction: published
//! by outbox-relay if and only if that transaction commits.

use serde_json::{Map, Value};
use tokio_postgres::Transaction;
use uuid::Uuid;

use crate::{Error, Event, identifier};

/// Names of the five parts of an event: columns of the outbox table, or fields of a logical
/// message's JSON envelope. [`Default`] is Debezium's layout, which is also the relay's default
/// mapping (`[[outbox]]` and `[[message]]` in docs/configuration.md); a custom layout needs the
/// same names in the relay's `key_column`, `payload_column`, `headers` and `topic`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Event id (`uuid` or `text` column); the relay's `id` header.
    pub id: String,
    pub aggregate_type: String,
    /// The record key.
    pub aggregate_id: String,
    /// The relay's `eventType` header.
    pub event_type: String,
    /// The record value (`jsonb`, `json` or `text` column).
    pub payload: String,
}

impl Default for Layout {
    fn default() -> Layout {
        Layout {
            id: "id".into(),
            aggregate_type: "aggregatetype".into(),
            aggregate_id: "aggregateid".into(),
            event_type: "type".into(),
            payload: "payload".into(),
        }
    }
}

impl Layout {
    fn validated(&self, what: &'static str) -> Result<[String; 5], Error> {
        let names = [
            identifier::column(what, &self.id)?,
            identifier::column(what, &self.aggregate_type)?,
            identifier::column(what, &self.aggregate_id)?,
            identifier::column(what, &self.event_type)?,
            identifier::column(what, &self.payload)?,
        ];
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(Error::DuplicateName(n.clone()));
            }
        }
        Ok(names)
    }
}

#[derive(Debug, Clone)]
enum Destination {
    Table { sql: String, table: String },
    Message { prefix: String },
}

/// Where [`enqueue`](Outbox::enqueue) writes events. Build it once and share it.
#[derive(Debug, Clone)]
pub struct Outbox {
    destination: Destination,
    names: [String; 5],
}

impl Outbox {
    /// Rows of Debezium's `public.outbox` (migrations/0001_outbox.sql), the relay's default.
    pub fn table() -> Outbox {
        Outbox::table_with("public.outbox", Layout::default()).expect("the default layout is valid")
    }

    /// Rows of another table or layout. The statement fills the five columns from one JSON
    /// object with `json_populate_record`, so each value is converted to its column's type
    /// (`uuid` or `text` id, `jsonb`, `json` or `text` payload); other columns get their
    /// defaults.
    ///
    /// ```
    /// use outbox_inbox::{Layout, Outbox};
    /// let layout = Layout { aggregate_id: "aggregate_id".into(), event_type: "event_type".into(),
    ///                       ..Layout::default() };
    /// let outbox = Outbox::table_with("billing.outbox", layout).unwrap();
    /// assert!(Outbox::table_with("billing.outbox; --", Layout::default()).is_err());
    /// ```
    pub fn table_with(table: &str, layout: Layout) -> Result<Outbox, Error> {
        let table = identifier::table("outbox table", table)?;
        let names = layout.validated("outbox column")?;
        let cols = names.join(", ");
        let picked = names
            .iter()
            .map(|n| format!("r.{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO {table} ({cols}) SELECT {picked} \
             FROM json_populate_record(NULL::{table}, $1::text::json) AS r"
        );
        Ok(Outbox {
            destination: Destination::Table { sql, table },
            names,
        })
    }

    /// Transactional logical messages with `prefix` and the Debezium-named envelope (the relay
    /// needs a `[[message]]` section with this prefix): no outbox table to vacuum or clean up.
    ///
    /// ```
    /// let outbox = outbox_inbox::Outbox::message("outbox").unwrap();
    /// assert!(outbox_inbox::Outbox::message("").is_err());
    /// ```
    pub fn message(prefix: &str) -> Result<Outbox, Error> {
        Outbox::message_with(prefix, Layout::default())
    }

    /// The same with other envelope field names.
    pub fn message_with(prefix: &str, layout: Layout) -> Result<Outbox, Error> {
        if prefix.is_empty() {
            return Err(Error::InvalidPrefix(prefix.to_string()));
        }
        let names = layout.validated("envelope field")?;
        Ok(Outbox {
            destination: Destination::Message {
                prefix: prefix.to_string(),
            },
            names,
        })
    }

    /// The event as one JSON object named by the layout: the row for `json_populate_record`,
    /// or the message's envelope.
    fn envelope(&self, event: &Event) -> String {
        let [id, at, aid, ty, payload] = &self.names;
        let mut m = Map::new();
        m.insert(id.clone(), Value::String(event.id().to_string()));
        m.insert(at.clone(), Value::String(event.aggregate_type().into()));
        m.insert(aid.clone(), Value::String(event.aggregate_id().into()));
        m.insert(ty.clone(), Value::String(event.event_type().into()));
        m.insert(payload.clone(), event.payload().clone());
        Value::Object(m).to_string()
    }

    /// Writes `event` in `tx` and returns its id. Nothing is published unless `tx` commits;
    /// rolled back (also to a savepoint), the event never existed.
    ///
    /// ```no_run
    /// # async fn demo(tx: &tokio_postgres::Transaction<'_>) -> Result<(), outbox_inbox::Error> {
    /// use outbox_inbox::{Event, Outbox};
    /// let event = Event::new("order", "42", "OrderCreated", serde_json::json!({"total": 10}));
    /// let id = Outbox::table().enqueue(tx, &event).await?;
    /// assert_eq!(id, event.id());
    /// # Ok(()) }
    /// ```
    pub async fn enqueue(&self, tx: &Transaction<'_>, event: &Event) -> Result<Uuid, Error> {
        let envelope = self.envelope(event);
        match &self.destination {
            Destination::Table { sql, table } => {
                tx.execute(sql.as_str(), &[&envelope])
                    .await
                    .map_err(Error::pg_hint(
                        format!("inserting event {} into {table}", event.id()),
                        "check that the table exists with the layout's columns \
                     (migrations/0001_outbox.sql) and that this role may INSERT into it",
                    ))?;
            }
            Destination::Message { prefix } => {
                tx.execute(
                    "SELECT pg_logical_emit_message(true, $1::text, $2::text)",
                    &[prefix, &envelope],
                )
                .await
                .map_err(Error::pg_hint(
                    format!("emitting event {} as a logical message", event.id()),
                    "pg_logical_emit_message needs wal_level = logical and PostgreSQL 14+",
                ))?;
            }
        }
        Ok(event.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_uses_the_layout_names() {
        let layout = Layout {
            aggregate_id: "aggregate_id".into(),
            ..Layout::default()
        };
        let o = Outbox::message_with("p", layout).unwrap();
        let e = Event::new("order", "42", "Created", serde_json::json!({"total": 10}));
        let v: Value = serde_json::from_str(&o.envelope(&e)).unwrap();
        assert_eq!(v["aggregate_id"], "42");
        assert_eq!(v["id"], e.id().to_string());
        assert_eq!(v["payload"]["total"], 10);
    }

    #[test]
    fn rejects_a_layout_that_names_a_column_twice() {
        let layout = Layout {
            payload: "type".into(),
            ..Layout::default()
        };
        assert!(matches!(
            Outbox::table_with("public.outbox", layout),
            Err(Error::DuplicateName(_))
        ));
    }
}
