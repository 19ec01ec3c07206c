//! `outbox-relay status --watch` as a person and as a script see it: in a real terminal (tmux:
//! `send-keys`, `capture-pane`) the view refreshes every second with real numbers while a
//! steady stream of events flows, and Ctrl-C ends it with exit 0; with stdout piped it prints
//! one plain line per refresh and SIGTERM ends it with exit 0.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crate::support::{
    TestDb, connect, eventually,
    relay::{self, Relay},
    writer,
};

const TMUX_HTTP_PORT: u16 = 28440;
const PIPE_HTTP_PORT: u16 = 28441;

/// The relay on a fixed `[http]` port (which `status` reads) and a fast monitor.
fn config(db: &TestDb, port: u16) -> String {
    db.relay_config(&format!(
        "{}\n[http]\nlisten = \"127.0.0.1:{port}\"\n\n[monitor]\npoll_interval_ms = 250\n\
         outbox_stats_interval_ms = 500\n",
        db.outbox_section()
    ))
}

/// Writes one event every 50 ms until the flag is set.
fn steady_stream(db: &TestDb) -> (Arc<AtomicBool>, tokio::task::JoinHandle<usize>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (conninfo, flag) = (db.conninfo(), stop.clone());
    let task = tokio::spawn(async move {
        let c = connect(&conninfo).await;
        let mut n = 0;
        while !flag.load(Ordering::SeqCst) {
            writer::insert_event(&c, "order", &format!("w-{}", n % 4), 0)
                .await
                .unwrap();
            n += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        n
    });
    (stop, task)
}

struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let o = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux (Debian package tmux; infra/install-deps.sh installs it)");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "watch"])
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

/// The first number on the line that starts with `prefix`.
fn number_on(screen: &str, prefix: &str) -> Option<f64> {
    let line = screen.lines().find(|l| l.starts_with(prefix))?;
    line[prefix.len()..].split_whitespace().next()?.parse().ok()
}

fn line<'a>(screen: &'a str, prefix: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} on the screen:\n{screen}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_view_refreshes_in_a_terminal_and_ctrl_c_ends_it() {
    let db = TestDb::new("watch_tty").await;
    let mut relay = Relay::streaming(&db.name, &config(&db, TMUX_HTTP_PORT)).await;
    let (stop, writer_task) = steady_stream(&db);

    let tmux = Tmux {
        socket: format!("outbox-relay-{}", db.name),
    };
    let cmd = format!(
        "RUST_LOG=warn {} status --watch --config {}; echo WATCH-EXITED-$?; sleep 60",
        relay::binary().display(),
        relay.config.display()
    );
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "watch",
        "-x",
        "200",
        "-y",
        "40",
        &cmd,
    ]);

    // Real numbers: a positive event rate once two frames were read.
    let first = eventually("a frame with events/s", Duration::from_secs(20), || async {
        let s = tmux.screen();
        number_on(&s, "  events         ")
            .filter(|r| *r > 0.0)
            .map(|_| s)
    })
    .await;
    assert!(
        first.starts_with("outbox-relay status --watch: slot "),
        "{first}"
    );
    assert!(
        line(&first, "  relay          ").contains("streaming, ready"),
        "{first}"
    );
    assert!(
        line(&first, "  events         ").contains(" acknowledged, "),
        "{first}"
    );
    assert!(
        line(&first, "  lag            ").ends_with(" behind"),
        "{first}"
    );
    assert!(
        !line(&first, "  forecast       ").contains("unknown"),
        "{first}"
    );
    assert!(
        line(&first, "  outbox table   ").contains("public.outbox: "),
        "{first}"
    );
    assert!(
        line(&first, "  alerts         ").ends_with("none"),
        "{first}"
    );
    let confirmed = |s: &str| line(s, "  confirmed      ").to_string();
    let header = |s: &str| s.lines().next().unwrap_or("").to_string();

    // It refreshes: a later frame has a new time and a new confirmed LSN.
    let (h1, c1) = (header(&first), confirmed(&first));
    let later = eventually("a refreshed frame", Duration::from_secs(20), || async {
        let s = tmux.screen();
        (s.starts_with("outbox-relay status --watch") && header(&s) != h1 && confirmed(&s) != c1)
            .then_some(s)
    })
    .await;
    assert!(!later.contains("WATCH-EXITED"), "{later}");

    tmux.run(&["send-keys", "-t", "watch", "C-c"]);
    eventually(
        "the view to exit on Ctrl-C",
        Duration::from_secs(10),
        || async { tmux.screen().contains("WATCH-EXITED-0").then_some(()) },
    )
    .await;

    stop.store(true, Ordering::SeqCst);
    assert!(writer_task.await.unwrap() > 0);
    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_it_prints_one_plain_line_per_refresh_and_stops_on_sigterm() {
    let db = TestDb::new("watch_pipe").await;
    let mut relay = Relay::streaming(&db.name, &config(&db, PIPE_HTTP_PORT)).await;
    let (stop, writer_task) = steady_stream(&db);

    let mut child = Command::new(relay::binary())
        .args(["status", "--watch", "--interval-secs", "0.5", "--config"])
        .arg(&relay.config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let (out, lines) = (child.stdout.take().unwrap(), lines.clone());
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                lines.lock().unwrap().push(l.unwrap());
            }
        })
    };
    eventually("three lines", Duration::from_secs(20), || async {
        (lines.lock().unwrap().len() >= 3).then_some(())
    })
    .await;
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    reader.join().unwrap();

    let lines = lines.lock().unwrap().clone();
    for l in &lines {
        assert!(!l.contains('\x1b'), "no escape codes when piped: {l:?}");
        assert!(
            l.len() > 20 && l.as_bytes()[4] == b'-' && l.contains("Z streaming=yes "),
            "{l}"
        );
        assert!(l.contains(" tables=public.outbox(live="), "{l}");
        assert!(l.contains(" alerts=none"), "{l}");
    }
    // From the second line on, the rate of the events the writer keeps sending.
    let rates: Vec<f64> = lines[1..]
        .iter()
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("events_per_sec="))
                .and_then(|v| v.parse().ok())
        })
        .collect();
    assert!(
        !rates.is_empty() && rates.iter().any(|r| *r > 0.0),
        "{lines:#?}"
    );

    stop.store(true, Ordering::SeqCst);
    writer_task.await.unwrap();
    assert!(relay.terminate(Duration::from_secs(30)).success());
    db.cleanup().await;
}
