-- The client-balances service's database: per-client totals and the inbox
-- (migrations/0003_inbox.sql). `events` counts the changes applied, so a change applied twice
-- shows as a total that is off and as more events than the producer wrote.
CREATE TABLE IF NOT EXISTS public.client_totals (
    client_id text   PRIMARY KEY,
    total     bigint NOT NULL,
    events    bigint NOT NULL
);
