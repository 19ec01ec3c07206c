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
-- Three more outbox tables of the same shape, for the four-table catch-up (`--tables 4`).
CREATE TABLE IF NOT EXISTS public.outbox_2 (LIKE public.outbox INCLUDING ALL);
CREATE TABLE IF NOT EXISTS public.outbox_3 (LIKE public.outbox INCLUDING ALL);
CREATE TABLE IF NOT EXISTS public.outbox_4 (LIKE public.outbox INCLUDING ALL);

-- Payload pool: 1000 order-like JSON documents per target size (~200 B, ~4 KB, ~64 KB as jsonb
-- text; above 8 KB most items are added in one go, the item-by-item loop being quadratic).
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
        IF target > 8192 THEN
            -- ~47 characters per item as text: stay a little below the target, the loop adds the rest.
            items := (SELECT jsonb_agg(jsonb_build_object(
                        'sku', 'SKU-' || lpad(((random() * 99999)::int)::text, 5, '0'),
                        'qty', 1 + (random() * 9)::int,
                        'price', round((random() * 500)::numeric, 2)))
                      FROM generate_series(1, (target - 200) / 48));
        END IF;
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

-- The same spread over `tables` outbox tables (public.outbox, public.outbox_2, ...): row k goes to
-- table k % tables, so every transaction has rows in each of them.
CREATE OR REPLACE PROCEDURE public.bench_backlog_spread(n int, per_txn int, psize int, atype text,
                                                       tables int)
LANGUAGE plpgsql AS $$
DECLARE
    bodies jsonb[] := ARRAY(SELECT body FROM public.bench_payloads WHERE size = psize ORDER BY i);
    k int := 0;
BEGIN
    WHILE k < n LOOP
        EXECUTE format('INSERT INTO public.%I (id, aggregatetype, aggregateid, type, payload) '
                       'VALUES (gen_random_uuid(), $1, $2, ''OrderCreated'', $3)',
                       CASE WHEN k % tables = 0 THEN 'outbox' ELSE 'outbox_' || (1 + k % tables) END)
        USING atype, 'o-' || (random() * 100000)::int,
              bodies[1 + k % 1000]
                || jsonb_build_object('ts', (extract(epoch FROM clock_timestamp()) * 1e6)::bigint);
        k := k + 1;
        IF k % per_txn = 0 OR k = n THEN
            COMMIT;
        END IF;
    END LOOP;
END
$$;
