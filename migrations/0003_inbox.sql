-- The consumer's inbox: one row per (consumer, event id) it has applied. A consumer inserts the
-- row with `ON CONFLICT DO NOTHING` in the SAME transaction as the effect of the event and applies
-- the effect only when the row was inserted, so a redelivered event is absorbed instead of applied
-- twice (docs/inbox.md). Rows must be kept longer than the topic can replay its records: see the
-- retention job in docs/inbox.md before deleting any.
CREATE TABLE IF NOT EXISTS public.inbox (
    consumer     text        NOT NULL,
    event_id     text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS inbox_processed_at ON public.inbox (processed_at);
