-- The inbox pattern in plain SQL: apply one event at most once (docs/inbox.md).
--
--   psql "$CONNINFO" -v consumer=recipe -v event_id=<id header> \
--        -v aggregate_id=<record key> -v amount=<payload.amount> -f examples/inbox-sql/apply.sql
--
-- One transaction: claim (consumer, event_id) in the inbox with ON CONFLICT DO NOTHING and apply
-- the effect only if the claim inserted a row. The data-modifying CTE makes both one statement:
-- `claimed` has a row only when the inbox row is new, so a redelivered event inserts nothing
-- into the inbox and changes nothing in recipe_totals ("INSERT 0 0"). A concurrent delivery of
-- the same event waits on the inbox's primary key until this transaction ends, then claims
-- nothing. Commit the Kafka offset only after COMMIT returned.
-- Tables: migrations/0003_inbox.sql and examples/recipes/schema.sql.
\set ON_ERROR_STOP on
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

COMMIT;
