//! Deletes inbox rows older than an allowed retention, a bounded batch per statement (each its
//! own transaction), so that no statement holds many row locks, bloats one transaction's WAL or
//! blocks the consumers' inserts for long. The cutoff is fixed when the job starts, so rows
//! claimed while it runs are never candidates and the job ends.

use tokio_postgres::Client;

use super::Allowed;
use crate::{Error, identifier};

/// What a run deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deleted {
    pub rows: u64,
    pub batches: u64,
}

/// The retention job for one inbox table, optionally one consumer's rows only.
#[derive(Debug, Clone)]
pub struct RetentionJob {
    table: String,
    consumer: Option<String>,
    batch_rows: i64,
}

impl RetentionJob {
    /// All consumers' rows of `public.inbox`, 1,000 rows per statement.
    pub fn new() -> RetentionJob {
        RetentionJob {
            table: "public.inbox".into(),
            consumer: None,
            batch_rows: 1000,
        }
    }

    /// Another inbox table.
    pub fn table(mut self, table: &str) -> Result<RetentionJob, Error> {
        self.table = identifier::table("inbox table", table)?;
        Ok(self)
    }

    /// Only `consumer`'s rows (when the consumers read topics with different retentions).
    pub fn consumer(mut self, consumer: &str) -> RetentionJob {
        self.consumer = Some(consumer.to_string());
        self
    }

    /// Rows per statement, 1..=10,000.
    pub fn batch_rows(mut self, rows: u32) -> RetentionJob {
        self.batch_rows = i64::from(rows.clamp(1, 10_000));
        self
    }

    /// Deletes the rows older than `allowed.retention()` (by `processed_at`).
    ///
    /// ```no_run
    /// # async fn demo(pg: &tokio_postgres::Client) -> Result<(), outbox_inbox::Error> {
    /// use std::time::Duration;
    /// use outbox_inbox::{RetentionJob, TopicRetention, decide};
    /// let topic = TopicRetention { topic: "orders".into(), retention_ms: 86_400_000,
    ///                              segment_ms: 3_600_000, compacted: false };
    /// let allowed = decide(Duration::from_secs(2 * 86_400), &[topic], None)?;
    /// let deleted = RetentionJob::new().run(pg, &allowed).await?;
    /// println!("deleted {} inbox rows", deleted.rows);
    /// # Ok(()) }
    /// ```
    pub async fn run(&self, client: &Client, allowed: &Allowed) -> Result<Deleted, Error> {
        let cutoff: String = client
            .query_one(
                "SELECT (now() - make_interval(secs => $1::float8))::text",
                &[&allowed.retention().as_secs_f64()],
            )
            .await
            .map_err(Error::pg_hint(
                "computing the retention cutoff".into(),
                "check the connection to the consumer's database",
            ))?
            .get(0);
        let t = &self.table;
        let sql = format!(
            "DELETE FROM {t} WHERE (consumer, event_id) IN (\
               SELECT consumer, event_id FROM {t} \
               WHERE processed_at < $1::text::timestamptz AND ($3::text IS NULL OR consumer = $3) \
               ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
        );
        let mut done = Deleted::default();
        loop {
            let n = client
                .execute(sql.as_str(), &[&cutoff, &self.batch_rows, &self.consumer])
                .await
                .map_err(Error::pg_hint(
                    format!("deleting a batch of old rows from {t}"),
                    "check that the role may DELETE from the inbox table; rows deleted so far stay deleted",
                ))?;
            done.rows += n;
            done.batches += 1;
            if (n as i64) < self.batch_rows {
                return Ok(done);
            }
        }
    }
}

impl Default for RetentionJob {
    fn default() -> RetentionJob {
        RetentionJob::new()
    }
}
