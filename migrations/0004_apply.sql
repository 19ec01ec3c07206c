-- The applier's bookkeeping (`outbox-relay apply`, docs/inbox.md) under its default names:
-- `outbox-relay apply setup` creates the same tables under the configured names. The inbox is
-- migrations/0003_inbox.sql's. Positions: the next offset to apply per (consumer, topic,
-- partition), written in the transaction that applied the record before it and only ever moved
-- forward by the applier (GREATEST); Kafka's committed offsets are advisory. Dead letters: a
-- record that cannot be applied (apply.on_failure = "dead-letter"), keyed by its coordinates,
-- written in the transaction that moves the position past it; its claim stays in the inbox.
CREATE TABLE IF NOT EXISTS public.outbox_apply_offsets (
    consumer    text        NOT NULL,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    next_offset bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition)
);
CREATE TABLE IF NOT EXISTS public.outbox_apply_dead_letter (
    consumer    text        NOT NULL,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    "offset"    bigint      NOT NULL,
    event_id    text,
    event_type  text,
    key         bytea,
    value       bytea,
    headers     jsonb       NOT NULL,
    "timestamp" timestamptz,
    error       text        NOT NULL,
    sqlstate    text,
    failed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition, "offset")
);
