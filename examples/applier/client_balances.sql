-- The articles' second service with no application code: `outbox-relay apply` calls these
-- functions (examples/applier/applier.toml). The tables are examples/balances/client_balances.sql's
-- client_totals and an audit log; the inbox, positions and dead-letter tables come from
-- `outbox-relay apply setup`.
CREATE TABLE IF NOT EXISTS public.client_totals (
    client_id text   PRIMARY KEY,
    total     bigint NOT NULL,
    events    bigint NOT NULL
);

-- BalanceChanged {"account": ..., "client": ..., "delta": n}: the client's total moves by delta.
CREATE OR REPLACE FUNCTION public.apply_balance_changed(ev jsonb) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO public.client_totals (client_id, total, events)
    VALUES (ev->>'client', (ev->>'delta')::bigint, 1)
    ON CONFLICT (client_id) DO UPDATE
        SET total = client_totals.total + EXCLUDED.total, events = client_totals.events + 1
$$;

-- AuditNote {"n": ..., "bad": bool}: kept in audit_notes; a "bad" one is refused (it goes to the
-- dead-letter table, or halts its partition, as apply.on_failure says).
CREATE TABLE IF NOT EXISTS public.audit_notes (
    n        integer     NOT NULL,
    event_id text        NOT NULL,
    noted_at timestamptz NOT NULL DEFAULT now()
);
CREATE OR REPLACE FUNCTION public.note_audit(ev jsonb, event_id text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF (ev->>'bad')::boolean THEN
        RAISE EXCEPTION 'audit note % is refused', ev->>'n' USING ERRCODE = 'P0001';
    END IF;
    INSERT INTO public.audit_notes (n, event_id) VALUES ((ev->>'n')::int, event_id);
END
$$;
