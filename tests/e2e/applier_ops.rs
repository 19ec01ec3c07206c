//! The applier's operator-facing paths against the shared stack: the inbox cleanup and its
//! refusal, `/metrics`, `apply status`, halt, dead-letter, `apply redrive`, `apply reset` and a
//! handler typo at `apply setup`. The fault-tolerance run is tests/e2e/applier.rs.

use std::time::Duration;

use crate::support::{
    TestDb,
    applier::{
        OPS_ADD, apply_cmd, count, ops_config, ops_schema, producer, send, send_event, setup,
        subscribed_config,
    },
    check, eventually, kafka,
    relay::Relay,
    repo_root,
};

/// The inbox cleanup deletes this consumer's claims older than what its topic can replay (a
/// topic keeping records 60 s, segments rolled every 60 s: 7 minutes with the margin) and no
/// other: fresh claims and another consumer's old ones stay. A configured retention shorter than
/// the topic allows stops the applier at start (exit 3), naming the option and the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_cleanup_deletes_only_claims_the_topic_can_no_longer_replay() {
    let db = TestDb::new("ap_retention").await;
    let topic = format!("{}.notes", db.name);
    kafka::create_topic_with_configs(
        &topic,
        &[("retention.ms", "60000"), ("segment.ms", "60000")],
    )
    .await;
    let cfg = subscribed_config(
        &db,
        &topic,
        "[apply]\nconsumer = \"c\"\nignore_types = [\"Note\"]\n\n[retention]\ninterval_ms = 1000\n",
        Some(crate::support::http::free_port()),
    );
    setup(&db, &cfg);
    db.client
        .batch_execute(
            "INSERT INTO inbox (consumer, event_id, processed_at) VALUES \
             ('c', 'old-1', now() - interval '2 days'), ('c', 'old-2', now() - interval '1 hour'), \
             ('c', 'recent', now() - interval '2 minutes'), \
             ('other', 'old-3', now() - interval '2 days')",
        )
        .await
        .unwrap();
    let p = producer();
    for id in ["new-1", "new-2"] {
        send_event(&p, &topic, id, "Note", "{}").await;
    }
    let mut applier = Relay::start_with(&format!("{}-run", db.name), &cfg, &["apply", "run"], &[]);
    let claims = || async {
        db.client
            .query(
                "SELECT consumer || '/' || event_id FROM inbox ORDER BY 1",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
    };
    let left = eventually(
        "the cleanup to delete the old claims",
        Duration::from_secs(60),
        || async {
            let c = claims().await;
            (!c.iter().any(|x| x.starts_with("c/old"))
                && c.iter().filter(|x| x.starts_with("c/new")).count() == 2)
                .then_some(c)
        },
    )
    .await;
    assert_eq!(left, ["c/new-1", "c/new-2", "c/recent", "other/old-3"]);
    applier
        .wait_log("apply_inbox_cleaned", Duration::from_secs(10))
        .await;
    // Its /metrics: every documented applier metric but the handler histogram (no handler ran:
    // both records are of an ignored type), with what this run did, and none of the relay's.
    let addr = crate::support::http::relay_addr(&applier).await;
    let scrape = eventually(
        "the lag gauge (librdkafka statistics, every 2 s)",
        Duration::from_secs(20),
        || async {
            let s = crate::support::http::scrape(addr).await;
            s.types
                .contains_key("outbox_relay_apply_lag_records")
                .then_some(s)
        },
    )
    .await;
    let doc = std::fs::read_to_string(repo_root().join("docs/operations.md")).unwrap();
    let mut checked = 0;
    for (i, _) in doc.match_indices("`outbox_relay_apply_") {
        let name: String = doc[i + 1..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        if name != "outbox_relay_apply_handler_seconds" {
            assert!(
                scrape.types.contains_key(&name),
                "{name} is documented but not scraped"
            );
            checked += 1;
        }
    }
    assert!(checked >= 7, "documented applier metrics found: {checked}");
    assert_eq!(
        scrape.value(
            "outbox_relay_apply_records_total",
            &[("topic", &topic), ("result", "ignored")]
        ),
        Some(2.0)
    );
    assert_eq!(
        scrape.sum("outbox_relay_apply_inbox_deleted_total"),
        Some(2.0)
    );
    assert_eq!(
        scrape.value(
            "outbox_relay_apply_lag_records",
            &[("topic", &topic), ("partition", "0")]
        ),
        Some(0.0)
    );
    assert!(
        !scrape.types.contains_key("outbox_relay_streaming"),
        "the relay's series are not the applier's"
    );
    assert!(applier.terminate(Duration::from_secs(30)).success());
    check::note(&format!("applier_retention: claims left {left:?}"));

    let refused = cfg.replace(
        "interval_ms = 1000\n",
        "interval_ms = 1000\ninbox_ms = 60000\n",
    );
    let (status, log) = Relay::once(
        &format!("{}-refused", db.name),
        &refused,
        &["apply", "run"],
        &[],
    );
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        log.contains("retention.inbox_ms is refused") && log.contains(&topic),
        "the refusal names the option and the topic: {log}"
    );
    db.cleanup().await;
}

/// What an operator does with the applier, end to end: a handler with a typo fails `apply
/// setup` (exit 3, naming it); a record whose handler raises halts its partition under
/// `on_failure = "halt"` (nothing after it applied), goes to the dead-letter table under
/// `"dead-letter"` (the records after it applied), and once the handler is fixed `apply redrive`
/// applies it once (a second re-drive finds nothing); a stored position beyond the log's end
/// makes `apply status` exit 4 and keeps the partition from starting, until `apply reset` moves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_halt_dead_letter_redrive_reset_and_see_handler_typos_at_setup() {
    let db = TestDb::new("ap_ops").await;
    let topic = format!("{}.ops", db.name);
    kafka::create_topic(&topic, 1).await;
    ops_schema(&db).await;
    let cfg = |policy: &str, sql: &str| ops_config(&db, &topic, policy, sql, None);
    let good = OPS_ADD;
    let name = |n: &str| format!("{}-{n}", db.name);
    let (status, log) = Relay::once(
        &name("typo"),
        &cfg("halt", "SELECT ops_ad(:value)"),
        &["apply", "setup"],
        &[],
    );
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        log.contains("handler[0]") && log.contains("ops_ad"),
        "names the handler: {log}"
    );
    setup(&db, &cfg("halt", good));

    let p = producer();
    for (i, n) in [1, -1, 2].into_iter().enumerate() {
        send(&p, &topic, &format!("ev-{i}"), n).await;
    }
    let sums = || async {
        db.client
            .query("SELECT n FROM ops_sum ORDER BY event_id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, i32>(0))
            .collect::<Vec<_>>()
    };
    let dead = || async { count(&db, "SELECT count(*) FROM outbox_apply_dead_letter").await };
    let status_of = |config: &std::path::Path| {
        let out = apply_cmd("status", config, &[]);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };

    // Halt: the first record applied, the raising one stops the partition, the third waits.
    let mut a = Relay::start_with(&name("halt"), &cfg("halt", good), &["apply", "run"], &[]);
    a.wait_log("apply_partition_halted", Duration::from_secs(60))
        .await;
    assert!(a.log_text().contains("negative -1"), "{}", a.log_text());
    assert_eq!((sums().await, dead().await), (vec![1], 0));
    assert!(a.terminate(Duration::from_secs(30)).success());
    let (code, text) = status_of(&a.config);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("{topic}[0]"))
                && l.split_whitespace().nth(1) == Some("1")),
        "position 1: {text}"
    );

    // Dead-letter: the raising record goes to the table, the one after it is applied.
    let mut a = Relay::start_with(
        &name("dead"),
        &cfg("dead-letter", good),
        &["apply", "run"],
        &[],
    );
    eventually(
        "the third record applied",
        Duration::from_secs(60),
        || async { (sums().await == [1, 2]).then_some(()) },
    )
    .await;
    assert_eq!(dead().await, 1);
    assert!(a.terminate(Duration::from_secs(30)).success());

    // The handler fixed: the re-drive applies the dead letter once, and only once.
    db.client
        .batch_execute(
            "CREATE OR REPLACE FUNCTION ops_add(v jsonb, id text) RETURNS void LANGUAGE sql AS $$
               INSERT INTO ops_sum VALUES ((v->>'n')::int, id) $$",
        )
        .await
        .unwrap();
    for expected in [
        "re-driven: 1; failed again: 0",
        "re-driven: 0; failed again: 0",
    ] {
        let out = apply_cmd("redrive", &a.config, &[]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains(expected),
            "{expected}: {text}"
        );
    }
    assert_eq!((sums().await, dead().await), (vec![1, -1, 2], 0));

    // A position beyond the log's end: status says so (exit 4), the partition does not start.
    let reset = |to: &str| {
        let out = apply_cmd(
            "reset",
            &a.config,
            &["--topic", &topic, "--partition", "0", "--to", to],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(reset("100").contains("position 3 -> 100"));
    let (code, text) = status_of(&a.config);
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains("OUTSIDE THE LOG"), "{text}");
    let mut a = Relay::start_with(
        &name("out"),
        &cfg("dead-letter", good),
        &["apply", "run"],
        &[],
    );
    a.wait_log("apply_position_out_of_log", Duration::from_secs(60))
        .await;
    assert!(
        a.log_text().contains("beyond the log end 3"),
        "{}",
        a.log_text()
    );
    assert!(a.terminate(Duration::from_secs(30)).success());
    reset("3");
    assert_eq!(status_of(&a.config).0, Some(0));
    assert_eq!(sums().await, vec![1, -1, 2], "nothing applied twice");
    check::note(
        "applier_operations: typo at setup exit 3, halt at 1 of 3, dead-letter + redrive once, reset beyond the end exit 4",
    );
    db.cleanup().await;
}
