-- The inbox pattern in plain SQL: apply one Kafka record at most once (docs/inbox.md).
--
--   psql -X -q -v consumer=<inbox consumer> -v group=<GROUP> \
--        -v record=<one line of `kcat -C -J`> -f examples/inbox-sql/apply.sql
--
-- `record` is the record as kcat's JSON envelope prints it (topic, partition, offset, key,
-- payload, headers as ["name", "value", ...]); PostgreSQL takes it apart, so no value is ever
-- spliced into SQL text. ONE transaction: claim (consumer, event id = the `id` header) in the
-- inbox with ON CONFLICT DO NOTHING, apply the effect only if the claim inserted a row, and store
-- the partition's next offset in kafka_offsets. A redelivered event inserts nothing into the inbox
-- and changes nothing in recipe_totals; a concurrent delivery of the same event waits on the
-- inbox's primary key until this transaction ends, then claims nothing. Prints 1 (applied) or 0
-- (a duplicate, absorbed). A record without an `id` header is refused (psql exits 3) before
-- anything is written, so its offset is not stored either.
-- Tables: migrations/0003_inbox.sql and examples/recipes/schema.sql. Driver: consume.sh.
\set ON_ERROR_STOP on

-- The record's parts (a column that is NULL leaves its psql variable unset: `problem` is
-- set only when the record cannot be applied).
SELECT kafka_topic, kafka_partition, kafka_offset, aggregate_id, amount, event_id,
       format('record %s[%s]@%s ', kafka_topic, kafka_partition, kafka_offset) || CASE
         WHEN event_id IS NULL OR event_id = ''
           THEN 'has no "id" header: it cannot be de-duplicated, so it is not applied and its '
                'offset is not stored; fix the producer (outbox-relay sets the header from the '
                'outbox row''s id) and restart'
         WHEN aggregate_id IS NULL THEN 'has no key: the aggregate id is missing'
         WHEN amount IS NULL THEN 'has no "amount" in its value'
       END AS problem
  FROM (SELECT r ->> 'topic' AS kafka_topic,
               r ->> 'partition' AS kafka_partition,
               r ->> 'offset' AS kafka_offset,
               r ->> 'key' AS aggregate_id,
               CAST(r ->> 'payload' AS jsonb) ->> 'amount' AS amount,
               (SELECT r -> 'headers' ->> (i + 1)
                  FROM generate_series(0, jsonb_array_length(r -> 'headers') - 2, 2) AS i
                 WHERE r -> 'headers' ->> i = 'id'
                 ORDER BY i LIMIT 1) AS event_id
          FROM (SELECT CAST(:'record' AS jsonb) AS r) AS line) AS parts \gset

-- Bad input stops here, before anything is written: skipping it would lose the event.
\if :{?problem}
  \warn :problem
  DO $$ BEGIN RAISE EXCEPTION 'record refused, nothing written (the reason is above)'; END $$;
\endif

BEGIN;

WITH claimed AS (
    INSERT INTO inbox (consumer, event_id)
    VALUES (:'consumer', :'event_id')
    ON CONFLICT DO NOTHING
    RETURNING event_id
)
INSERT INTO recipe_totals (aggregate_id, events, amount)
SELECT :'aggregate_id', 1, CAST(:'amount' AS numeric) FROM claimed
ON CONFLICT (aggregate_id) DO UPDATE
    SET events = recipe_totals.events + 1,
        amount = recipe_totals.amount + EXCLUDED.amount;
\set applied :ROW_COUNT

-- The consumer's position, in the same transaction: committed together with the effect, so a
-- crash can neither lose an event (offset stored, effect not) nor leave a gap to re-read that the
-- inbox would not absorb.
INSERT INTO kafka_offsets (consumer_group, topic, kafka_partition, next_offset)
VALUES (:'group', :'kafka_topic', CAST(:'kafka_partition' AS integer),
        CAST(:'kafka_offset' AS bigint) + 1)
ON CONFLICT (consumer_group, topic, kafka_partition) DO UPDATE
    SET next_offset = EXCLUDED.next_offset;

COMMIT;
\echo :applied
