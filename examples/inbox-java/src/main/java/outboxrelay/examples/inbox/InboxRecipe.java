package outboxrelay.examples.inbox;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Consumes what outbox-relay publishes and applies each event exactly once to its own database
 * (contract: examples/recipes/README.md).
 *
 * <p>Kafka delivers at least once: after a crash, a rebalance or an offset reset the same record
 * comes again. Per record, {@link Inbox#process} de-duplicates and applies in one transaction, and
 * only after its commit is the Kafka offset committed. A record that cannot be de-duplicated (no
 * {@code id} header) stops the program with its offset uncommitted: it is never skipped.
 */
public final class InboxRecipe {
    /** Bounds the wait for the first assignment; IDLE_MS counts only from then on. */
    private static final Duration JOIN_TIMEOUT = Duration.ofSeconds(30);

    private static final ObjectMapper JSON =
            new ObjectMapper().enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS);

    /** Bad input or a failed step: the message says what happened and what to do. */
    static final class RecipeException extends Exception {
        RecipeException(String message) {
            super(message);
        }

        RecipeException(String message, Throwable cause) {
            super(message + ": " + cause.getMessage(), cause);
        }
    }

    record Config(String pgHost, String pgPort, String pgUser, String pgDatabase, String brokers,
            String topic, String group, String consumer, Duration idle) {
        static Config fromEnv() throws RecipeException {
            List<String> missing = new ArrayList<>();
            Map<String, String> env = System.getenv();
            for (String k : List.of("PGDATABASE", "BROKERS", "TOPIC", "GROUP", "CONSUMER")) {
                if (env.getOrDefault(k, "").isEmpty()) {
                    missing.add(k);
                }
            }
            if (!missing.isEmpty()) {
                throw new RecipeException(
                        "set " + String.join(", ", missing) + " (examples/recipes/README.md)");
            }
            Duration idle = Duration.ofMillis(3000);
            String idleMs = env.getOrDefault("IDLE_MS", "");
            if (!idleMs.isEmpty()) {
                long ms;
                try {
                    ms = Long.parseLong(idleMs);
                } catch (NumberFormatException e) {
                    ms = -1;
                }
                if (ms <= 0) {
                    throw new RecipeException("IDLE_MS=\"" + idleMs
                            + "\": give a positive number of milliseconds");
                }
                idle = Duration.ofMillis(ms);
            }
            return new Config(env.getOrDefault("PGHOST", "localhost"),
                    env.getOrDefault("PGPORT", "5432"),
                    env.getOrDefault("PGUSER", System.getProperty("user.name")),
                    env.get("PGDATABASE"), env.get("BROKERS"), env.get("TOPIC"),
                    env.get("GROUP"), env.get("CONSUMER"), idle);
        }
    }

    private long records;
    private long applied;
    private long duplicates;
    private volatile boolean stopping;

    public static void main(String[] args) {
        InboxRecipe recipe = new InboxRecipe();
        String error = null;
        try {
            recipe.run(Config.fromEnv());
        } catch (RecipeException e) {
            error = e.getMessage();
        }
        System.out.printf("{\"records\":%d,\"applied\":%d,\"duplicates\":%d}%n",
                recipe.records, recipe.applied, recipe.duplicates);
        System.out.flush();
        if (error != null) {
            System.err.println("inbox-java: " + error);
            if (!recipe.stopping) {
                System.exit(1);
            }
        }
    }

    void run(Config cfg) throws RecipeException {
        Properties pg = new Properties();
        pg.setProperty("user", cfg.pgUser());
        String password = System.getenv("PGPASSWORD");
        if (password != null) {
            pg.setProperty("password", password);
        }
        String url = "jdbc:postgresql://" + cfg.pgHost() + ":" + cfg.pgPort() + "/" + cfg.pgDatabase();
        try (Inbox inbox = new Inbox(DriverManager.getConnection(url, pg), cfg.consumer());
                KafkaConsumer<String, byte[]> kafka = new KafkaConsumer<>(kafkaProps(cfg))) {
            Thread main = Thread.currentThread();
            Thread onSignal = new Thread(() -> {
                // SIGTERM/SIGINT: leave poll() and stop between records.
                stopping = true;
                kafka.wakeup();
                try {
                    main.join(10_000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            Runtime.getRuntime().addShutdownHook(onSignal);
            try {
                consume(cfg, inbox, kafka);
            } finally {
                // Done without a signal: the hook must not wait for this thread at exit.
                try {
                    Runtime.getRuntime().removeShutdownHook(onSignal);
                } catch (IllegalStateException e) {
                    // already shutting down (a signal): the hook is running
                }
            }
        } catch (WakeupException e) {
            // stopping on a signal
        } catch (SQLException e) {
            throw new RecipeException("PostgreSQL at " + url
                    + " (check PGHOST/PGPORT/PGUSER/PGDATABASE and that the inbox tables exist)", e);
        }
    }

    private static Properties kafkaProps(Config cfg) {
        Properties p = new Properties();
        p.setProperty("bootstrap.servers", cfg.brokers());
        p.setProperty("group.id", cfg.group());
        // The offset is committed by hand, after the database commit (see consume).
        p.setProperty("enable.auto.commit", "false");
        // A new group starts at the beginning: nothing published before its first run is missed.
        p.setProperty("auto.offset.reset", "earliest");
        // Records of aborted relay transactions (exactly-once mode) are never seen.
        p.setProperty("isolation.level", "read_committed");
        p.setProperty("key.deserializer", StringDeserializer.class.getName());
        p.setProperty("value.deserializer", ByteArrayDeserializer.class.getName());
        return p;
    }

    private void consume(Config cfg, Inbox inbox, KafkaConsumer<String, byte[]> kafka)
            throws RecipeException, SQLException {
        long[] assignedAt = {0}; // nanoTime of the first assignment; written inside poll()
        kafka.subscribe(List.of(cfg.topic()), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                if (assignedAt[0] == 0) {
                    assignedAt[0] = System.nanoTime();
                }
            }

            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {}
        });
        long started = System.nanoTime();
        long last = 0; // nanoTime of the last record
        while (!stopping) {
            long wait;
            if (assignedAt[0] == 0) {
                wait = JOIN_TIMEOUT.toNanos() - (System.nanoTime() - started);
                if (wait <= 0) {
                    throw new RecipeException("no partition of topic \"" + cfg.topic()
                            + "\" assigned to group \"" + cfg.group() + "\" within "
                            + JOIN_TIMEOUT.toSeconds() + " s: check BROKERS and TOPIC");
                }
            } else {
                wait = cfg.idle().toNanos() - (System.nanoTime() - Math.max(assignedAt[0], last));
                if (wait <= 0) {
                    return; // idle: done
                }
            }
            // Rebalances happen only inside poll(): the partitions of the records handled below
            // stay ours while we commit their offsets.
            for (ConsumerRecord<String, byte[]> r : kafka.poll(Duration.ofNanos(wait))) {
                last = System.nanoTime();
                handle(inbox, kafka, r);
            }
        }
    }

    /** Applies one record at most once, then commits its offset. */
    private void handle(Inbox inbox, KafkaConsumer<String, byte[]> kafka,
            ConsumerRecord<String, byte[]> r) throws RecipeException, SQLException {
        String where = "record " + r.topic() + "[" + r.partition() + "]@" + r.offset();
        Header id = r.headers().lastHeader("id");
        if (id == null || id.value() == null || id.value().length == 0) {
            throw new RecipeException(where + " has no \"id\" header: it cannot be de-duplicated,"
                    + " so it is not applied and its offset is not committed; fix the producer"
                    + " (outbox-relay sets the header from the outbox row's id) and restart");
        }
        String eventId = new String(id.value(), StandardCharsets.UTF_8);
        if (r.key() == null) {
            throw new RecipeException(where + " (event " + eventId
                    + ") has no key: the aggregate id is missing");
        }
        BigDecimal amount = amount(where + " (event " + eventId + ")", r.value());

        boolean first = inbox.process(eventId, r.key(), amount);

        // Only now the offset. A crash before this line redelivers the record, and the inbox
        // absorbs it; committing the offset first would lose the event on a crash in between.
        kafka.commitSync(Map.of(new TopicPartition(r.topic(), r.partition()),
                new OffsetAndMetadata(r.offset() + 1)));
        records++;
        if (first) {
            applied++;
        } else {
            duplicates++;
        }
    }

    /** The payload's "amount", exactly (BigDecimal, never a double). */
    private static BigDecimal amount(String where, byte[] value) throws RecipeException {
        JsonNode amount;
        try {
            amount = value == null ? null : JSON.readTree(value).get("amount");
        } catch (IOException e) {
            throw new RecipeException(where + ": the value is not JSON", e);
        }
        if (amount == null || !amount.isNumber()) {
            throw new RecipeException(where + ": the value has no numeric \"amount\" field");
        }
        return amount.decimalValue();
    }
}
