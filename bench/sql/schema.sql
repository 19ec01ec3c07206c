-- Benchmark schema (database "bench"), applied by `bench` before every workload.
-- The outbox table is migrations/0001_outbox.sql plus published_at, which only the polling relay
-- uses (log-based relays ignore the column). The partial index is what a polling relay needs to
-- find unpublished rows without scanning the table; it costs every writer the same.
CREATE TABLE IF NOT EXISTS public.outbox (
    id            uuid         PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid   varchar(255) NOT NULL,
    type          varchar(255) NOT NULL,
    payload       jsonb,
    created_at    timestamptz  NOT NULL DEFAULT now(),
    published_at  timestamptz
);
CREATE INDEX IF NOT EXISTS outbox_unpublished ON public.outbox (created_at, id)
    WHERE published_at IS NULL;

-- Payload pool: 1000 order-like JSON documents per target size (~200 B and ~4 KB as jsonb text).
-- Rows pick one at random and add "ts" (writer clock, microseconds since the Unix epoch, taken
-- just before the INSERT is sent). Like real JSON they compress (pglz) a little.
CREATE TABLE IF NOT EXISTS public.bench_payloads (
    size int NOT NULL,
    i    int NOT NULL,
    body jsonb NOT NULL,
    PRIMARY KEY (size, i)
);

CREATE OR REPLACE FUNCTION public.bench_fill_payloads(target int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    k int;
    doc jsonb;
    items jsonb;
BEGIN
    IF EXISTS (SELECT 1 FROM public.bench_payloads WHERE size = target) THEN
        RETURN;
    END IF;
    FOR k IN 0..999 LOOP
        items := '[]'::jsonb;
        doc := jsonb_build_object(
            'ts', 0, 'orderId', gen_random_uuid(), 'customer', 'c-' || (random() * 1e6)::int,
            'currency', 'EUR', 'items', items);
        WHILE length(doc::text) < target - 60 LOOP
            items := items || jsonb_build_object(
                'sku', 'SKU-' || lpad(((random() * 99999)::int)::text, 5, '0'),
                'qty', 1 + (random() * 9)::int,
                'price', round((random() * 500)::numeric, 2));
            doc := jsonb_set(doc, '{items}', items);
        END LOOP;
        INSERT INTO public.bench_payloads VALUES (target, k, doc);
    END LOOP;
END
$$;

-- Backlog writer: n rows in transactions of per_txn rows, entirely server-side (no client round
-- trips, so writing a million single-row transactions takes seconds, not minutes).
CREATE OR REPLACE PROCEDURE public.bench_backlog(n int, per_txn int, psize int, atype text)
LANGUAGE plpgsql AS $$
DECLARE
    bodies jsonb[] := ARRAY(SELECT body FROM public.bench_payloads WHERE size = psize ORDER BY i);
    k int := 0;
BEGIN
    WHILE k < n LOOP
        INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
        VALUES (gen_random_uuid(), atype, 'o-' || (random() * 100000)::int, 'OrderCreated',
                bodies[1 + k % 1000]
                  || jsonb_build_object('ts', (extract(epoch FROM clock_timestamp()) * 1e6)::bigint));
        k := k + 1;
        IF k % per_txn = 0 OR k = n THEN
            COMMIT;
        END IF;
    END LOOP;
END
$$;
