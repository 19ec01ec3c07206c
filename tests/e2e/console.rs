//! The console in a real browser (headless Chromium over the DevTools protocol,
//! support/browser.rs): the relay's page shows a streaming source with its lag, retained WAL
//! and a firing alert, updates as events flow, raises no console error, and says STALE once
//! the relay stops; the applier's page shows a halted partition with its reason and a dead
//! letter with the command that re-drives it. `status` reads the same `/status.json`.

use std::time::Duration;

use crate::support::{
    TestDb,
    applier::{OPS_ADD, apply_cmd, ops_config, ops_schema, producer, send, setup},
    browser::Browser,
    http::{free_port, get},
    kafka,
    relay::Relay,
    writer,
};

const PAGE: Duration = Duration::from_secs(30);

/// Consumer `ops` of `topic` (a handler that raises on a negative `n`) with `on_failure =
/// policy`, its endpoint on `port`.
fn applier_config(db: &TestDb, topic: &str, port: u16, policy: &str) -> String {
    ops_config(db, topic, policy, OPS_ADD, Some(port))
}

/// A new topic `<db>.<name>` of `partitions` partitions and the `ops` applier of it, set up,
/// its endpoint on a free port: the topic and the port.
async fn ops_applier(db: &TestDb, name: &str, partitions: i32) -> (String, u16) {
    let topic = format!("{}.{name}", db.name);
    kafka::create_topic(&topic, partitions).await;
    ops_schema(db).await;
    let port = free_port();
    setup(db, &applier_config(db, &topic, port, "halt"));
    (topic, port)
}

/// The applier under `cfg` (`on_failure = "halt"`), once its partition halted.
async fn halted_applier(db: &TestDb, cfg: &str) -> Relay {
    let a = Relay::start_with(&format!("{}-halt", db.name), cfg, &["apply", "run"], &[]);
    a.wait_log("apply_partition_halted", Duration::from_secs(60))
        .await;
    a
}

/// A relay whose retained_wal alert fires (any retained WAL is over 1 byte) on the first poll.
fn relay_config(db: &TestDb, port: u16) -> String {
    db.relay_config(&format!(
        "{}\n[http]\nlisten = \"127.0.0.1:{port}\"\n\n[monitor]\npoll_interval_ms = 250\n\
         outbox_stats_interval_ms = 500\n\n[alerts]\nretained_wal_warning_bytes = 1\n\
         retained_wal_critical_bytes = 0\n",
        db.outbox_section()
    ))
}

/// `request` (a request line and headers, without the blank line) with `Connection: close`; the
/// whole answer.
async fn raw(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("{request}Host: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf).into_owned()
}

/// The number just before `" acknowledged"` on the page.
fn acknowledged(text: &str) -> Option<u64> {
    let before = &text[..text.find(" acknowledged")?];
    before.rsplit(' ').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relays_page_streams_alerts_updates_and_goes_stale() {
    let db = TestDb::new("console").await;
    let port = free_port();
    let cfg = relay_config(&db, port);
    let mut relay = Relay::streaming(&db.name, &cfg).await;
    for i in 0..3 {
        writer::insert_event(&db.client, "order", &format!("c-{i}"), 0)
            .await
            .unwrap();
    }
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (code, json) = get(addr, "/status.json").await;
    assert_eq!(code, 200, "{json}");
    let doc: outbox_relay::observe::console::RelayStatus = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (doc.kind.as_str(), doc.sources.len()),
        ("relay", 1),
        "{json}"
    );

    // Read-only: nothing but GET and HEAD; the page may run only its own script.
    let post = raw(addr, "POST /status.json HTTP/1.1\r\nContent-Length: 0\r\n").await;
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    let page = raw(addr, "GET / HTTP/1.1\r\n").await.to_ascii_lowercase();
    assert!(
        page.contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{page}"
    );
    let mut browser = Browser::start(&db.name);
    let page = browser.open(&format!("http://{addr}/"));
    let text = browser.wait_text(
        &page,
        "a streaming source, its lag and the alert",
        PAGE,
        |t| {
            t.contains("STREAMING")
                && t.contains("live, updated")
                && t.contains("behind")
                && t.contains("WARNING retained_wal")
                && acknowledged(t).is_some_and(|n| n >= 3)
                && t.lines()
                    .any(|l| l.starts_with("Last confirmation") && l.ends_with(" ago"))
        },
    );
    assert!(
        text.contains("Retained WAL") && text.contains("Forecast"),
        "{text}"
    );
    assert!(text.contains("since "), "the alert's start: {text}");

    // It updates: more events, a larger count, without reloading.
    for i in 3..10 {
        writer::insert_event(&db.client, "order", &format!("c-{i}"), 0)
            .await
            .unwrap();
    }
    browser.wait_text(&page, "10 events acknowledged", PAGE, |t| {
        acknowledged(t).is_some_and(|n| n >= 10)
    });
    let errors = browser.errors(&page);
    assert!(errors.is_empty(), "console errors: {errors:#?}");

    // `status` reads the same document: the relay's part of its report is there.
    let out = std::process::Command::new(crate::support::relay::binary())
        .args(["status", "--config"])
        .arg(&relay.config)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("relay            streaming, "), "{report}");

    // Stopped: the page keeps the last data and says it is stale.
    assert!(relay.terminate(Duration::from_secs(30)).success());
    page.server_stopped();
    let text = browser.wait_text(&page, "the stale indicator", PAGE, |t| t.contains("STALE"));
    assert!(text.contains("no update since"), "{text}");
    crate::support::check::note(&format!(
        "console_relay: page streaming, alert, update 3→10 acknowledged, stale after stop ({} errors)",
        errors.len()
    ));
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_appliers_page_shows_a_halted_partition_and_dead_letters() {
    let db = TestDb::new("console_ap").await;
    let (topic, port) = ops_applier(&db, "ops", 1).await;
    let cfg = |policy: &str| applier_config(&db, &topic, port, policy);
    let p = producer();
    for (i, n) in [1, -1, 2].into_iter().enumerate() {
        send(&p, &topic, &format!("ev-{i}"), n).await;
    }
    let url = format!("http://127.0.0.1:{port}/");
    let mut browser = Browser::start(&db.name);

    // Halt: the partition stops on the raising record; the page says so and why.
    let mut a = halted_applier(&db, &cfg("halt")).await;
    let page = browser.open(&url);
    let text = browser.wait_text(&page, "the halted partition and why", PAGE, |t| {
        t.contains(&format!("{topic}[0]")) && t.contains("HALTED") && t.contains("negative -1")
    });
    assert!(text.contains("consumer ops"), "{text}");
    let errors = browser.errors(&page);
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    // `apply status` reads the same document for what only the running applier knows.
    let out = apply_cmd("status", &a.config, &[]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains(&format!("{topic}[0] HALTED: ")) && report.contains("negative -1"),
        "{report}"
    );
    assert!(a.terminate(Duration::from_secs(30)).success());

    // Dead-letter: the record is listed with its coordinates and the command to re-drive it.
    let mut a = Relay::start_with(
        &format!("{}-dead", db.name),
        &cfg("dead-letter"),
        &["apply", "run"],
        &[],
    );
    let page = browser.open(&url);
    let text = browser.wait_text(&page, "the dead letter", PAGE, |t| {
        t.contains("1 dead letter;") && t.contains("apply redrive")
    });
    assert!(
        text.contains(&format!("{topic}: 1")) && text.contains("Add"),
        "{text}"
    );
    assert!(text.contains("negative -1"), "the error: {text}");
    let errors = browser.errors(&page);
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    assert!(a.terminate(Duration::from_secs(30)).success());
    page.server_stopped();
    browser.wait_text(&page, "the stale indicator", PAGE, |t| t.contains("STALE"));
    crate::support::check::note(
        "console_applier: halted partition with reason, dead letter with redrive command, stale after stop, no console errors",
    );
    db.cleanup().await;
}

/// Not a check: the screenshots of docs/images (scripts/screenshots.sh runs it). The relay
/// with a stream of events for a minute (the charts' first points) and a firing alert; the
/// applier with a dead letter and then a halted partition. PNGs in SCREENSHOT_DIR (default
/// target/screenshots).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "makes the docs' screenshots: scripts/screenshots.sh"]
async fn screenshots() {
    let dir = std::path::PathBuf::from(
        std::env::var("SCREENSHOT_DIR").unwrap_or_else(|_| "target/screenshots".into()),
    );
    let secs: u64 = std::env::var("SCREENSHOT_STREAM_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let db = TestDb::new("shots").await;
    let port = free_port();
    let mut relay = Relay::streaming(&db.name, &relay_config(&db, port)).await;
    let mut browser = Browser::start(&db.name);
    let page = browser.open(&format!("http://127.0.0.1:{port}/"));
    // 20 events a second, as scripts/demo.sh writes them.
    for i in 0..secs * 20 {
        writer::insert_event(&db.client, "order", &format!("s-{}", i % 4), 0)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    browser.wait_text(&page, "the stream", PAGE, |t| t.contains("STREAMING"));
    browser.screenshot(&page, &dir.join("console-relay.png"));
    assert!(relay.terminate(Duration::from_secs(30)).success());

    let (topic, aport) = ops_applier(&db, "orders", 2).await;
    let cfg = |policy: &str| applier_config(&db, &topic, aport, policy);
    let p = producer();
    for (i, n) in [1, -1, 2, 3, 4].into_iter().enumerate() {
        send(&p, &topic, &format!("ev-{i}"), n).await;
    }
    let mut a = Relay::start_with(
        &format!("{}-dead", db.name),
        &cfg("dead-letter"),
        &["apply", "run"],
        &[],
    );
    let page = browser.open(&format!("http://127.0.0.1:{aport}/"));
    browser.wait_text(&page, "the dead letter", PAGE, |t| {
        t.contains("1 dead letter;")
    });
    assert!(a.terminate(Duration::from_secs(30)).success());
    for (i, n) in [5, -7, 8].into_iter().enumerate() {
        send(&p, &topic, &format!("ev2-{i}"), n).await;
    }
    let mut a = halted_applier(&db, &cfg("halt")).await;
    let page = browser.open(&format!("http://127.0.0.1:{aport}/"));
    browser.wait_text(&page, "the halted partition", PAGE, |t| {
        t.contains("HALTED") && t.contains("1 dead letter;")
    });
    tokio::time::sleep(Duration::from_secs(6)).await;
    browser.screenshot(&page, &dir.join("console-applier.png"));
    assert!(a.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}
