-- The accounts service's database: its accounts and the outbox (migrations/0001_outbox.sql).
CREATE TABLE IF NOT EXISTS public.accounts (
    id        text   PRIMARY KEY,
    client_id text   NOT NULL,
    balance   bigint NOT NULL DEFAULT 0
);
