-- The side effect the inbox recipes (examples/inbox-*) apply: a running total per aggregate.
-- Deliberately NOT idempotent (events + 1, amount + x), so applying an event twice shows.
-- Recipes need this and migrations/0003_inbox.sql in the consumer's database.
CREATE TABLE IF NOT EXISTS public.recipe_totals (
    aggregate_id text    PRIMARY KEY,
    events       bigint  NOT NULL,
    amount       numeric NOT NULL
);

-- The SQL recipe (examples/inbox-sql) keeps its Kafka position here instead of committing it to a
-- consumer group: the next offset to read per (GROUP, topic, partition), written in the SAME
-- transaction as the inbox row and the effect. The other recipes commit offsets to Kafka.
CREATE TABLE IF NOT EXISTS public.kafka_offsets (
    consumer_group  text    NOT NULL,
    topic           text    NOT NULL,
    kafka_partition integer NOT NULL,
    next_offset     bigint  NOT NULL,
    PRIMARY KEY (consumer_group, topic, kafka_partition)
);
