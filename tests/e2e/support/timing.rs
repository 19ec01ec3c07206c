//! Where an end-to-end test's time went. A run that passes but takes minutes is unexplained
//! too (issue 40: `restart::graceful_and_kill9_restarts_mid_stream_lose_nothing` took ~8 min
//! once on PostgreSQL 14, 10-47 s in every other run, and nothing said which wait it was).
//!
//! Each test is timed from its first database ([`begin`], in `TestDb::new_on`) to its cleanup
//! ([`end`]); the helpers' waits that take [`SLOW_WAIT`] or longer are recorded under the test
//! ([`waited`]). libtest runs each test on a thread named after it, and the helpers are awaited
//! on that thread, so the thread's name is the key; a wait on another thread (a consumer inside
//! `spawn_blocking`) is recorded by its caller's helper instead. [`end`] appends one line per
//! test to `target/test-times.log`: seconds, the test, its slow waits; `scripts/test.sh` prints
//! the slowest of each pass.

use std::{
    collections::HashMap,
    io::Write,
    sync::Mutex,
    time::{Duration, Instant},
};

use super::repo_root;

/// A wait at least this long is named in the test's line (`RELAY_TEST_SLOW_WAIT_S` sets
/// another, e.g. for a stress loop hunting a few slow seconds).
pub const SLOW_WAIT: Duration = Duration::from_secs(15);

fn slow_wait() -> Duration {
    static SET: std::sync::LazyLock<Duration> = std::sync::LazyLock::new(|| {
        std::env::var("RELAY_TEST_SLOW_WAIT_S")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(SLOW_WAIT, Duration::from_secs_f64)
    });
    *SET
}

#[derive(Default)]
struct Test {
    started: Option<Instant>,
    waits: Vec<(String, Duration)>,
}

static TESTS: Mutex<Option<HashMap<String, Test>>> = Mutex::new(None);

/// The running test's name, when called on its thread.
fn current() -> Option<String> {
    let name = std::thread::current().name()?.to_string();
    name.contains("::").then_some(name)
}

fn with_test(f: impl FnOnce(&mut Test)) {
    let Some(name) = current() else { return };
    let mut tests = TESTS.lock().unwrap_or_else(|e| e.into_inner());
    f(tests
        .get_or_insert_with(HashMap::new)
        .entry(name)
        .or_default());
}

/// The test's clock starts (its first database); later calls keep the first start.
pub fn begin() {
    with_test(|t| {
        t.started.get_or_insert_with(Instant::now);
    });
}

/// A helper waited `took` for `what`; kept if it is [`SLOW_WAIT`] or longer.
pub fn waited(what: &str, took: Duration) {
    if took >= slow_wait() {
        with_test(|t| t.waits.push((what.to_string(), took)));
    }
}

/// Times `f`, a wait for `what` ([`waited`]).
pub async fn timed<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    let at = Instant::now();
    let out = f.await;
    waited(what, at.elapsed());
    out
}

/// The test ends (its cleanup): its line goes to `target/test-times.log`.
pub fn end() {
    end_into(&repo_root().join("target/test-times.log"));
}

fn end_into(path: &std::path::Path) {
    let Some(name) = current() else { return };
    let test = {
        let mut tests = TESTS.lock().unwrap_or_else(|e| e.into_inner());
        tests.get_or_insert_with(HashMap::new).remove(&name)
    };
    let Some(Test {
        started: Some(started),
        waits,
    }) = test
    else {
        return;
    };
    let waits: Vec<String> = waits
        .iter()
        .map(|(what, took)| format!("{what} {:.1} s", took.as_secs_f64()))
        .collect();
    let line = format!(
        "{:.1}\t{name}\t{}\n",
        started.elapsed().as_secs_f64(),
        if waits.is_empty() {
            "-".to_string()
        } else {
            waits.join(", ")
        }
    );
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}

/// A slow wait is kept under the test that waited, a short one is not, and the test's
/// line names it.
#[test]
fn a_slow_wait_is_named_in_its_test_s_line() {
    let me = current().expect("libtest names the thread after the test");
    begin();
    waited("short", Duration::from_secs(1));
    waited("relay log streaming_started", Duration::from_secs(42));
    let waits: Vec<String> = TESTS.lock().unwrap().as_ref().unwrap()[&me]
        .waits
        .iter()
        .map(|(w, _)| w.clone())
        .collect();
    assert_eq!(waits, ["relay log streaming_started"]);
    let dir = repo_root().join("target/e2e/timing-self-test");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("test-times.log");
    let _ = std::fs::remove_file(&path);
    end_into(&path);
    let log = std::fs::read_to_string(&path).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains(&me) && l.ends_with("relay log streaming_started 42.0 s")),
        "{log}"
    );
    assert!(!TESTS.lock().unwrap().as_ref().unwrap().contains_key(&me));
}
