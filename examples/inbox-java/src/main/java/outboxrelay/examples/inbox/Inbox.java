package outboxrelay.examples.inbox;

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;

/**
 * The inbox: applies one event at most once per consumer.
 *
 * <p>The inbox row and the effect are written in ONE transaction: if either fails, neither stays,
 * and the event is retried as a whole. Two transactions (or a SELECT before the INSERT) would leave
 * a window where the effect is applied but not recorded, or recorded but not applied. The primary
 * key (consumer, event_id) decides, so concurrent copies of the event cannot both pass.
 */
final class Inbox implements AutoCloseable {
    private final Connection db;
    private final String consumer;
    private final PreparedStatement markSeen;
    private final PreparedStatement applyEffect;

    Inbox(Connection db, String consumer) throws SQLException {
        this.db = db;
        this.consumer = consumer;
        db.setAutoCommit(false);
        markSeen = db.prepareStatement(
                "INSERT INTO inbox (consumer, event_id) VALUES (?, ?) ON CONFLICT DO NOTHING");
        // The effect: deliberately not idempotent (a counter and a sum).
        applyEffect = db.prepareStatement(
                "INSERT INTO recipe_totals (aggregate_id, events, amount) VALUES (?, 1, ?) "
                        + "ON CONFLICT (aggregate_id) DO UPDATE "
                        + "SET events = recipe_totals.events + 1, "
                        + "amount = recipe_totals.amount + EXCLUDED.amount");
    }

    /** Returns true if the event was applied now, false if it had been applied before. */
    boolean process(String eventId, String aggregateId, BigDecimal amount) throws SQLException {
        try {
            markSeen.setString(1, consumer);
            markSeen.setString(2, eventId);
            boolean first = markSeen.executeUpdate() == 1; // 0: a redelivery, absorbed
            if (first) {
                applyEffect.setString(1, aggregateId);
                applyEffect.setBigDecimal(2, amount);
                applyEffect.executeUpdate();
            }
            db.commit();
            return first;
        } catch (SQLException e) {
            db.rollback();
            throw e;
        }
    }

    @Override
    public void close() throws SQLException {
        db.close();
    }
}
