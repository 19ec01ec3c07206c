//! `apply redrive`: applies dead-lettered records again, once their handler (or the data it
//! needed) is fixed.
//!
//! Invariant: a record's claim was kept when it was dead-lettered, so the normal path would
//! absorb it as a duplicate; the re-drive deletes its dead-letter row and runs its handler in
//! one transaction, the row first, so each dead-lettered record takes effect at most once,
//! however often the command runs, also when two re-drives run at the same time (the second
//! waits on the row's lock and finds it gone). It takes no claim and no position, so it may run
//! beside running instances.

use crate::{
    config::ApplyConfig,
    error::ApplyError,
    postgres::{handler, store::Conn},
    record::Record,
};

/// What a re-drive did.
#[derive(Debug, Default)]
pub struct Redriven {
    pub applied: u64,
    /// Records whose handler failed again (left in the table), with the error.
    pub failed: Vec<String>,
    /// Records another `apply redrive` running at the same time took first.
    pub gone: u64,
}

/// Re-drives the dead-lettered records of this consumer (of `topic` only, if given), oldest
/// first. A record that fails again stays in the table (the failures are returned).
pub async fn redrive(cfg: &ApplyConfig, topic: Option<&str>) -> Result<Redriven, ApplyError> {
    let conn = Conn::open(cfg, "redrive").await?;
    let table = &cfg.apply.dead_letter_table;
    let (schema, name) = table.split_once('.').expect("validated");
    let t = format!(
        "{}.{}",
        outbox_service::postgres::quote_ident(schema),
        outbox_service::postgres::quote_ident(name)
    );
    let rows = conn
        .client
        .query(
            &format!(
                "SELECT topic, partition, \"offset\", key, value, headers::text, \
                 (extract(epoch from \"timestamp\") * 1000)::bigint, event_id, event_type \
                 FROM {t} WHERE consumer = $1 AND ($2::text IS NULL OR topic = $2) \
                 ORDER BY failed_at, topic, partition, \"offset\""
            ),
            &[&conn.consumer, &topic],
        )
        .await
        .map_err(ApplyError::pg(format!("reading {table}")))?;
    let mut out = Redriven::default();
    for row in rows {
        let headers: String = row.get(5);
        let headers: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&headers).unwrap_or_default();
        let r = Record {
            topic: row.get(0),
            partition: row.get(1),
            offset: row.get(2),
            key: row.get(3),
            value: row.get(4),
            headers: headers
                .into_iter()
                .map(|(k, v)| (k, v.as_str().map(|s| s.as_bytes().to_vec())))
                .collect(),
            timestamp_ms: row.get(6),
            event_id: row.get(7),
            event_type: row.get(8),
        };
        let Some((h, handler)) = cfg.handler_of(r.event_type.as_deref().unwrap_or_default()) else {
            out.failed.push(format!(
                "{}: no [[handler]] for event type {:?}",
                r.at(),
                r.event_type
            ));
            continue;
        };
        let _ = handler;
        let (prepared, statement) = &conn.handlers[h];
        // The row is deleted first: a second re-drive running at the same time waits on its
        // lock and then finds it gone, so the handler runs once.
        let result = async {
            conn.client.batch_execute("BEGIN").await?;
            let deleted = conn
                .client
                .execute(
                    &format!(
                        "DELETE FROM {t} WHERE consumer = $1 AND topic = $2 AND partition = $3 \
                         AND \"offset\" = $4"
                    ),
                    &[&conn.consumer, &r.topic, &r.partition, &r.offset],
                )
                .await?;
            if deleted == 0 {
                return Ok(Err(None));
            }
            let params = match handler::bind(statement, &r) {
                Ok(p) => p,
                Err(e) => return Ok(Err(Some(e))),
            };
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                params.iter().map(|p| p.as_ref() as _).collect();
            if let Err(e) = conn.client.execute(prepared, &refs).await {
                return Ok(Err(Some(outbox_service::postgres::describe_pg(&e))));
            }
            conn.client.batch_execute("COMMIT").await?;
            Ok::<_, tokio_postgres::Error>(Ok(()))
        }
        .await;
        match result {
            Ok(Ok(())) => out.applied += 1,
            Ok(Err(why)) => {
                let _ = conn.client.batch_execute("ROLLBACK").await;
                match why {
                    Some(why) => out.failed.push(format!("{}: {why}", r.at())),
                    // Re-driven meanwhile by another `apply redrive`.
                    None => out.gone += 1,
                }
            }
            Err(e) => return Err(ApplyError::pg(format!("re-driving {}", r.at()))(e)),
        }
    }
    Ok(out)
}
