// The smallest go-pq-cdc-kafka program for an outbox table, after the library's README and
// example/simple/main.go: it reads an existing publication and slot (bench/peers/README.md) and
// writes one record per outbox INSERT: key aggregateid, value the payload, headers id and
// eventType, the record outbox-relay writes. Producer: requiredAcks -1 (all ISRs);
// segmentio/kafka-go has no idempotent producer. Batching as in the library's own benchmark
// (benchmark/go-pq-cdc-kafka/main.go): 10,000 messages, 100 ms ticker.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	cdc "github.com/Trendyol/go-pq-cdc-kafka"
	"github.com/Trendyol/go-pq-cdc-kafka/config"
	cdcconfig "github.com/Trendyol/go-pq-cdc/config"
	"github.com/Trendyol/go-pq-cdc/pq/publication"
	"github.com/Trendyol/go-pq-cdc/pq/slot"
	gokafka "github.com/segmentio/kafka-go"
)

func main() {
	host := flag.String("host", "127.0.0.1", "PostgreSQL host")
	port := flag.Int("port", 5432, "PostgreSQL port")
	user := flag.String("user", "postgres", "PostgreSQL user (a replication role)")
	password := flag.String("password", "postgres", "password (the library requires one; trust auth ignores it)")
	db := flag.String("db", "bench", "database")
	tables := flag.String("table", "outbox", "outbox tables (schema public), comma-separated; all to -topic")
	slotName := flag.String("slot", "bench_gopq", "replication slot (created if missing)")
	pub := flag.String("publication", "bench_gopq_pub", "publication (created if missing: INSERT on the table)")
	topic := flag.String("topic", "outbox.event.order", "Kafka topic of every record")
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap brokers, comma-separated")
	metricPort := flag.Int("metric-port", 18081, "go-pq-cdc's Prometheus port")
	batch := flag.Int("batch", 10000, "producerBatchSize (messages)")
	ticker := flag.Duration("ticker", 100*time.Millisecond, "producerBatchTickerDuration")
	flag.Parse()

	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var pubTables publication.Tables
	mapping := map[string]string{}
	for _, t := range strings.Split(*tables, ",") {
		pubTables = append(pubTables, publication.Table{
			Name:            t,
			Schema:          "public",
			ReplicaIdentity: publication.ReplicaIdentityDefault,
		})
		mapping["public."+t] = *topic
	}
	cfg := config.Connector{
		CDC: cdcconfig.Config{
			Host:     *host,
			Port:     *port,
			Username: *user,
			Password: *password,
			Database: *db,
			Publication: publication.Config{
				CreateIfNotExists: true,
				Name:              *pub,
				Operations:        publication.Operations{publication.OperationInsert},
				Tables:            pubTables,
			},
			Slot: slot.Config{
				CreateIfNotExists:           true,
				Name:                        *slotName,
				SlotActivityCheckerInterval: 3000,
			},
			Metric: cdcconfig.MetricConfig{Port: *metricPort},
			Logger: cdcconfig.LoggerConfig{LogLevel: slog.LevelWarn},
		},
		Kafka: config.Kafka{
			TableTopicMapping:           mapping,
			Brokers:                     strings.Split(*brokers, ","),
			RequiredAcks:                -1,
			ProducerBatchSize:           *batch,
			ProducerBatchTickerDuration: *ticker,
		},
	}
	connector, err := cdc.NewConnector(ctx, cfg, handler)
	if err != nil {
		slog.Error("new connector", "error", err)
		os.Exit(1)
	}
	go func() {
		<-ctx.Done()
		connector.Close()
		os.Exit(0)
	}()
	connector.Start(ctx)
}

// handler: one record per INSERT, outbox-relay's record (key aggregateid, value payload,
// headers id and eventType). The library hands over decoded columns (pgx types): jsonb
// arrives as map[string]any and is marshalled again, uuid as [16]byte.
func handler(msg *cdc.Message) []gokafka.Message {
	if !msg.Type.IsInsert() {
		return nil
	}
	row := msg.NewData
	value, err := json.Marshal(row["payload"])
	if err != nil {
		slog.Error("payload", "error", err)
		return nil
	}
	return []gokafka.Message{{
		Key:   []byte(fmt.Sprint(row["aggregateid"])),
		Value: value,
		Headers: []gokafka.Header{
			{Key: "id", Value: []byte(uuidText(row["id"]))},
			{Key: "eventType", Value: []byte(fmt.Sprint(row["type"]))},
		},
	}}
}

func uuidText(v any) string {
	b, ok := v.([16]byte)
	if !ok {
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
