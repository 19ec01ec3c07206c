// Command inbox-go consumes what outbox-relay publishes and applies each event exactly once to
// its own PostgreSQL database, with an inbox table (examples/recipes/README.md is the contract).
//
// Kafka delivers at least once: after a crash, a rebalance or an offset reset the same record
// comes again. The inbox turns that into "applied once": per record, ONE database transaction
// inserts (consumer, event id) into the inbox with ON CONFLICT DO NOTHING and applies the effect
// only if that insert added a row. The Kafka offset is committed only after the database commit.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// joinTimeout bounds the wait for the first partition assignment (a wrong BROKERS or TOPIC
// would otherwise wait forever); IDLE_MS only counts once partitions are assigned, so a slow
// group join is not mistaken for an empty topic.
const joinTimeout = 30 * time.Second

type config struct {
	brokers  []string
	topic    string
	group    string
	consumer string
	idle     time.Duration
}

// summary is the one line printed on exit.
type summary struct {
	Records    int64 `json:"records"`
	Applied    int64 `json:"applied"`
	Duplicates int64 `json:"duplicates"`
}

func main() {
	var s summary
	err := run(&s)
	line, _ := json.Marshal(s)
	fmt.Println(string(line))
	if err != nil {
		fmt.Fprintln(os.Stderr, "inbox-go:", err)
		os.Exit(1)
	}
}

func run(s *summary) error {
	cfg, err := configFromEnv()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// PGHOST, PGPORT, PGUSER, PGDATABASE (and PGPASSWORD, PGSSLMODE...) are read by pgx itself,
	// as libpq does.
	db, err := pgx.Connect(ctx, "")
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL (check PGHOST/PGPORT/PGUSER/PGDATABASE): %w", err)
	}
	defer db.Close(context.Background())

	var assignedAt atomic.Int64 // unix nanos of the first assignment, 0 before
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.brokers...),
		kgo.ConsumerGroup(cfg.group),
		kgo.ConsumeTopics(cfg.topic),
		// A new group starts at the beginning of the topic: nothing published before the
		// consumer first ran is missed.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Records of aborted relay transactions (exactly-once mode) are never seen.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// The offset is committed by hand, after the database commit (see handle).
		kgo.DisableAutoCommit(),
		// No rebalance while a polled batch is being processed: the partitions we commit
		// offsets for stay ours until AllowRebalance.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			assignedAt.CompareAndSwap(0, time.Now().UnixNano())
		}),
	)
	if err != nil {
		return fmt.Errorf("create the Kafka client (check BROKERS): %w", err)
	}
	defer cl.Close()

	// A signal cancels ctx, which ends a poll; the record in hand is finished with work, which
	// is never cancelled (an interrupted one would be safe too: rolled back and redelivered).
	work := context.WithoutCancel(ctx)
	started := time.Now()
	last := time.Time{} // when the last records were handled
	for {
		var wait time.Duration
		if at := assignedAt.Load(); at == 0 {
			wait = joinTimeout - time.Since(started)
			if wait <= 0 {
				return fmt.Errorf("no partition of topic %q assigned to group %q within %s: check BROKERS and TOPIC", cfg.topic, cfg.group, joinTimeout)
			}
		} else {
			from := time.Unix(0, at)
			if last.After(from) {
				from = last
			}
			wait = cfg.idle - time.Since(from)
			if wait <= 0 {
				return nil // idle: done
			}
		}
		n, err := pollOnce(ctx, cl, wait, func(r *kgo.Record) error {
			return handle(work, db, cl, cfg.consumer, r, s)
		})
		if n > 0 {
			last = time.Now()
		}
		if err != nil || ctx.Err() != nil {
			return err // an error, or SIGINT/SIGTERM: stop between records
		}
	}
}

// pollOnce waits up to wait for records and hands each to handle, stopping at the first error;
// it returns how many records it handled.
func pollOnce(ctx context.Context, cl *kgo.Client, wait time.Duration, handle func(*kgo.Record) error) (int, error) {
	pollCtx, cancel := context.WithTimeout(ctx, wait)
	fetches := cl.PollFetches(pollCtx)
	cancel()
	// BlockRebalanceOnPoll holds rebalances (and Close) until this, on every path.
	defer cl.AllowRebalance()
	if ctx.Err() != nil {
		return 0, nil
	}
	for _, fe := range fetches.Errors() {
		if errors.Is(fe.Err, context.DeadlineExceeded) {
			continue // nothing arrived within wait
		}
		return 0, fmt.Errorf("fetch from %s[%d]: %w", fe.Topic, fe.Partition, fe.Err)
	}
	n := 0
	for it := fetches.RecordIter(); !it.Done() && ctx.Err() == nil; {
		if err := handle(it.Next()); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// handle applies one record at most once, then commits its offset.
func handle(ctx context.Context, db *pgx.Conn, cl *kgo.Client, consumer string, r *kgo.Record, s *summary) error {
	where := fmt.Sprintf("record %s[%d]@%d", r.Topic, r.Partition, r.Offset)
	// Bad input stops the consumer with its offset uncommitted: skipping would lose the event.
	eventID, ok := header(r, "id")
	if !ok || eventID == "" {
		return fmt.Errorf("%s has no \"id\" header: it cannot be de-duplicated, so it is not applied and its offset is not committed; fix the producer (outbox-relay sets the header from the outbox row's id) and restart", where)
	}
	if r.Key == nil {
		return fmt.Errorf("%s (event %s) has no key: the aggregate id is missing", where, eventID)
	}
	amount, err := parseAmount(r.Value)
	if err != nil {
		return fmt.Errorf("%s (event %s): %w", where, eventID, err)
	}

	// One transaction for the inbox row AND the effect: if either fails, neither stays, so the
	// event is retried as a whole. A separate transaction (or a check-then-insert SELECT) would
	// leave a window in which the effect is applied but not recorded, or recorded but not
	// applied.
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%s: begin: %w", where, err)
	}
	defer tx.Rollback(context.Background()) // no-op after Commit

	// The primary key (consumer, event_id) decides: a concurrent or earlier copy of the event
	// makes this insert add no row, and then we do nothing.
	tag, err := tx.Exec(ctx,
		`INSERT INTO inbox (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		consumer, eventID)
	if err != nil {
		return fmt.Errorf("%s: insert into inbox: %w", where, err)
	}
	inserted := tag.RowsAffected() == 1
	if inserted {
		// The effect: deliberately not idempotent (a counter and a sum).
		if _, err := tx.Exec(ctx,
			`INSERT INTO recipe_totals (aggregate_id, events, amount) VALUES ($1, 1, $2::numeric)
			 ON CONFLICT (aggregate_id) DO UPDATE
			 SET events = recipe_totals.events + 1, amount = recipe_totals.amount + EXCLUDED.amount`,
			string(r.Key), amount); err != nil {
			return fmt.Errorf("%s: apply the effect: %w", where, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%s: commit: %w", where, err)
	}

	// Only now the offset. A crash before this line redelivers the record, and the inbox
	// absorbs it; committing the offset first would lose the event on a crash in between.
	if err := cl.CommitRecords(ctx, r); err != nil {
		return fmt.Errorf("%s: commit the Kafka offset (the event is applied; a redelivery will be absorbed by the inbox): %w", where, err)
	}
	s.Records++
	if inserted {
		s.Applied++
	} else {
		s.Duplicates++
	}
	return nil
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// parseAmount reads "amount" from a payload such as {"amount": 5}, exactly (as decimal text).
func parseAmount(value []byte) (string, error) {
	dec := json.NewDecoder(strings.NewReader(string(value)))
	dec.UseNumber()
	var payload struct {
		Amount *json.Number `json:"amount"`
	}
	if err := dec.Decode(&payload); err != nil {
		return "", fmt.Errorf("the value is not a JSON object with a numeric \"amount\": %w", err)
	}
	if payload.Amount == nil {
		return "", errors.New("the value has no \"amount\" field")
	}
	return payload.Amount.String(), nil
}

func configFromEnv() (config, error) {
	var cfg config
	var missing []string
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	brokers := get("BROKERS")
	cfg.topic = get("TOPIC")
	cfg.group = get("GROUP")
	cfg.consumer = get("CONSUMER")
	if len(missing) > 0 {
		return cfg, fmt.Errorf("set %s (examples/recipes/README.md)", strings.Join(missing, ", "))
	}
	cfg.brokers = strings.Split(brokers, ",")
	cfg.idle = 3 * time.Second
	if v := os.Getenv("IDLE_MS"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return cfg, fmt.Errorf("IDLE_MS=%q: give a positive number of milliseconds", v)
		}
		cfg.idle = time.Duration(ms) * time.Millisecond
	}
	return cfg, nil
}
