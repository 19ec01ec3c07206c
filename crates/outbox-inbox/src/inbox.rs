//! The consumer side. Invariant: the inbox row of an event and the effect of that event commit
//! in one transaction, so "the row exists" and "the effect was applied" are the same fact. The
//! row is claimed with `INSERT ... ON CONFLICT DO NOTHING`, never with a SELECT first: two
//! deliveries of one event racing in two transactions both see no row with SELECT, while the
//! INSERT makes the second wait on the first's primary-key entry and then insert nothing.

use tokio_postgres::Transaction;

use crate::{Error, identifier};

/// The inbox table (migrations/0003_inbox.sql): `(consumer, event_id)` primary key and
/// `processed_at`.
#[derive(Debug, Clone)]
pub struct Inbox {
    table: String,
    sql: String,
}

impl Default for Inbox {
    fn default() -> Inbox {
        Inbox::new()
    }
}

impl Inbox {
    /// `public.inbox`.
    pub fn new() -> Inbox {
        Inbox::with_table("public.inbox").expect("the default table name is valid")
    }

    /// Another table with the same columns.
    pub fn with_table(table: &str) -> Result<Inbox, Error> {
        let table = identifier::table("inbox table", table)?;
        Ok(Inbox {
            sql: format!(
                "INSERT INTO {table} (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING"
            ),
            table,
        })
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// Claims `event_id` for `consumer` in `tx`: `true` = first time, apply the effect in the
    /// same `tx`; `false` = already applied (a redelivery), skip the effect. Either way commit
    /// `tx`, then the Kafka offset. If `tx` rolls back, the claim goes with it and the event will
    /// be applied when it comes again.
    ///
    /// `consumer` names the effect, not the process: every instance of one service shares it,
    /// two services that apply different effects of the same event use two names.
    ///
    /// ```no_run
    /// # async fn demo(pg: &mut tokio_postgres::Client) -> Result<(), outbox_inbox::Error> {
    /// let inbox = outbox_inbox::Inbox::new();
    /// let tx = pg.transaction().await.map_err(outbox_inbox::Error::pg("BEGIN"))?;
    /// if inbox.process_once(&tx, "client-balances", "0190b7f5-...").await? {
    ///     tx.execute("UPDATE totals SET n = n + 1", &[]).await
    ///         .map_err(outbox_inbox::Error::pg("UPDATE totals"))?;
    /// }
    /// tx.commit().await.map_err(outbox_inbox::Error::pg("COMMIT"))?;
    /// # Ok(()) }
    /// ```
    pub async fn process_once(
        &self,
        tx: &Transaction<'_>,
        consumer: &str,
        event_id: &str,
    ) -> Result<bool, Error> {
        let n = tx
            .execute(self.sql.as_str(), &[&consumer, &event_id])
            .await
            .map_err(Error::pg_hint(
                format!("claiming event {event_id} in {}", self.table),
                "create the inbox table in the consumer's database (migrations/0003_inbox.sql)",
            ))?;
        Ok(n == 1)
    }
}

/// [`Inbox::process_once`] on `public.inbox`.
pub async fn process_once(
    tx: &Transaction<'_>,
    consumer: &str,
    event_id: &str,
) -> Result<bool, Error> {
    Inbox::new().process_once(tx, consumer, event_id).await
}
