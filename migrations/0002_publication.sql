-- The publication outbox-relay reads (name = postgres.publication, default outbox_relay).
-- INSERTs only: UPDATE/DELETE/TRUNCATE of the outbox (cleanup) are never sent, and the
-- application's DELETE needs no replica identity. Create it BEFORE the replication slot.
-- outbox-relay creates it itself when postgres.create_publication = true (the default).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'outbox_relay') THEN
        CREATE PUBLICATION outbox_relay FOR TABLE public.outbox
            WITH (publish = 'insert', publish_via_partition_root = true);
    END IF;
END
$$;
