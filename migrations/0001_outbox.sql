-- The Debezium-compatible outbox table. Services insert one row per event in the same
-- transaction as the business change; outbox-relay publishes INSERTs only, so the row may be
-- deleted right away (even in the same transaction) to keep the table small.
CREATE TABLE IF NOT EXISTS public.outbox (
    id            uuid         PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid   varchar(255) NOT NULL,
    type          varchar(255) NOT NULL,
    payload       jsonb,
    created_at    timestamptz  NOT NULL DEFAULT now()
);
