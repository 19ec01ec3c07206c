-- The side effect the inbox recipes (examples/inbox-*) apply: a running total per aggregate.
-- Deliberately NOT idempotent (events + 1, amount + x), so applying an event twice shows.
-- Recipes need this and migrations/0003_inbox.sql in the consumer's database.
CREATE TABLE IF NOT EXISTS public.recipe_totals (
    aggregate_id text    PRIMARY KEY,
    events       bigint  NOT NULL,
    amount       numeric NOT NULL
);
