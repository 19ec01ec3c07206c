//! The `outbox-relay` binary: CLI, logging, signals, exit codes.

mod apply_cli;

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use metrics_exporter_prometheus::PrometheusHandle;
use outbox_relay::{
    config::Config,
    cutover::{FromDebezium, OffsetStorage},
    error::{Definite, RelayError},
    observe::alert::Severity,
    telemetry::events::{CONFIG_RELOAD_FAILED, METRICS_DISABLED, SIGNAL_RECEIVED},
};
use tokio::sync::watch;

/// Moves transactional-outbox events from PostgreSQL (pgoutput) into Kafka, confirming the WAL
/// position only after Kafka has acknowledged everything before it.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format: `text` or `json`. Levels come from RUST_LOG (default `info`).
    #[arg(
        long,
        global = true,
        env = "OUTBOX_RELAY_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: String,
}

#[derive(Subcommand)]
enum Command {
    /// Run the relay until SIGINT/SIGTERM.
    Run {
        /// TOML config file; every key can also come from OUTBOX_RELAY__<SECTION>__<KEY>.
        #[arg(short, long, env = "OUTBOX_RELAY_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Check preconditions; create the publication and the slot if they are missing.
    Setup {
        #[arg(short, long, env = "OUTBOX_RELAY_CONFIG")]
        config: Option<PathBuf>,
        /// Drop and re-create a slot that PostgreSQL invalidated (wal_status = lost). Events
        /// committed in between are NOT relayed unless --heal is given; the gap is logged. See
        /// docs/operations.md ("Slot lost").
        #[arg(long)]
        recreate_slot: bool,
        /// With --recreate-slot: publish the lost slot's gap from the outbox table before `run`
        /// streams from the new slot (the rows committed after the checkpoint's last event and
        /// before the new slot's start, in commit order). Needs track_commit_timestamp = on and
        /// kafka.checkpoint_topic. Exits 5 naming what it could not cover.
        #[arg(long, requires = "recreate_slot")]
        heal: bool,
        /// With --heal: rows committed up to this long before the checkpoint's event are
        /// published too (commit timestamps may invert against commit order by a little).
        #[arg(long, value_name = "MS", default_value_t = 1000, requires = "heal")]
        heal_margin_ms: u64,
        /// Cut over from this Debezium PostgreSQL connector (its `name`), which must be stopped:
        /// take over the slot of postgres.slot (or create it), and record in
        /// kafka.checkpoint_topic that the first `run` starts after the last transaction the
        /// connector committed. Needs --offsets-topic or --offsets-file. See
        /// docs/migrating-from-debezium.md ("Cutover").
        #[arg(long, value_name = "CONNECTOR", conflicts_with = "recreate_slot")]
        from_debezium: Option<String>,
        /// Kafka Connect's offsets topic (the worker's offset.storage.topic), on kafka.brokers.
        #[arg(
            long,
            value_name = "TOPIC",
            requires = "from_debezium",
            conflicts_with = "offsets_file"
        )]
        offsets_topic: Option<String>,
        /// The standalone worker's offsets file (offset.storage.file.filename).
        #[arg(long, value_name = "PATH", requires = "from_debezium")]
        offsets_file: Option<PathBuf>,
        /// The connector's topic.prefix, if the offsets hold several for its name.
        #[arg(long, value_name = "PREFIX", requires = "from_debezium")]
        topic_prefix: Option<String>,
        /// The slot Debezium streams from (its slot.name). Default: postgres.slot, which is then
        /// taken over; another name makes postgres.slot a new slot (created if missing), which
        /// must start at or before Debezium's committed position.
        #[arg(long, value_name = "SLOT", requires = "from_debezium")]
        debezium_slot: Option<String>,
        /// With `[source.<name>]` tables: prepare this source only (default: every source).
        #[arg(long, value_name = "NAME")]
        source: Option<String>,
    },
    /// Re-publish outbox rows from the table, with the records streaming produces (topic,
    /// key, value, headers; commit-lsn 0/0). Dry run by default: prints what it would send.
    /// See docs/operations.md ("Re-publishing events").
    Republish {
        #[arg(short, long, env = "OUTBOX_RELAY_CONFIG")]
        config: Option<PathBuf>,
        /// Event ids (the column mapped to the `id` header), comma-separated.
        #[arg(long, value_delimiter = ',', value_name = "ID,...")]
        ids: Vec<String>,
        /// Aggregate ids (the key column), comma-separated.
        #[arg(long, value_delimiter = ',', value_name = "KEY,...")]
        aggregate: Vec<String>,
        /// Rows committed at or after this time (any timestamptz text, e.g.
        /// 2026-12-06T08:00:00Z); needs track_commit_timestamp = on.
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// Rows committed before this time (with --since).
        #[arg(long, value_name = "TIME", requires = "since")]
        until: Option<String>,
        /// Send the records (without it: a dry run that prints them and sends nothing).
        #[arg(long)]
        execute: bool,
        /// With `[source.<name>]` tables: the source to read (required with several).
        #[arg(long, value_name = "NAME")]
        source: Option<String>,
    },
    /// Print the slot's health on one screen: slot, active PID, wal_status, lag, retained WAL,
    /// safe_wal_size, last confirmation and alert state. Exit 0 when healthy, 4 on a critical
    /// alert (or on a warning with `--fail-on warning`), 1 when PostgreSQL cannot be queried.
    Status {
        #[arg(short, long, env = "OUTBOX_RELAY_CONFIG")]
        config: Option<PathBuf>,
        /// The lowest alert level that makes the exit code 4.
        #[arg(long, value_enum, default_value = "critical")]
        fail_on: FailOn,
        /// A live view, redrawn every `--interval-secs` until Ctrl-C or SIGTERM (exit 0): events/s,
        /// in flight, lag, confirmed LSN, retained WAL, loss forecast, outbox tables, alerts.
        /// One plain line per refresh when stdout is not a terminal.
        #[arg(long)]
        watch: bool,
        /// Seconds between two refreshes of `--watch`.
        #[arg(long, default_value_t = 1.0)]
        interval_secs: f64,
        /// With `[source.<name>]` tables: this source only (default: every source, one report
        /// after the other; `--watch`: one line per source).
        #[arg(long, value_name = "NAME")]
        source: Option<String>,
    },
    /// Parse and validate the config, print it with secrets redacted, and exit.
    CheckConfig {
        #[arg(short, long, env = "OUTBOX_RELAY_CONFIG")]
        config: Option<PathBuf>,
    },
    /// The applier: apply the events of Kafka topics to a consumer's PostgreSQL exactly once,
    /// through SQL handlers (docs/inbox.md).
    Apply {
        #[command(subcommand)]
        action: apply_cli::Action,
    },
    /// Print the shell completion script for `shell` (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `outbox-relay manpage > outbox-relay.1`.
    Manpage,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FailOn {
    Warning,
    Critical,
}

/// `status` found an alert at or above `--fail-on`.
const EXIT_ALERT: u8 = 4;

/// `setup --recreate-slot --heal` could not cover part of the gap.
const EXIT_GAP_NOT_HEALED: u8 = 5;

/// Exit codes: 0 ok, 1 runtime failure, 2 bad configuration, 3 unmet precondition,
/// 4 (`status` only) an alert at or above `--fail-on`, 5 (`setup --heal`) a gap not healed
/// completely.
fn exit_code(e: &RelayError) -> ExitCode {
    match e {
        RelayError::Definite(Definite::GapNotHealed { .. }) => ExitCode::from(EXIT_GAP_NOT_HEALED),
        RelayError::Definite(Definite::Config(_)) => ExitCode::from(2),
        RelayError::Definite(Definite::Precondition(_) | Definite::CheckpointTopic { .. }) => {
            ExitCode::from(3)
        }
        _ => ExitCode::from(1),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Generated from the CLI definition itself, so they never drift from it.
    match &cli.command {
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut cmd = Cli::command();
            clap_complete::generate(*shell, &mut cmd, "outbox-relay", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Command::Manpage => {
            use clap::CommandFactory;
            return match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("cannot write the man page: {e}");
                    ExitCode::from(1)
                }
            };
        }
        _ => {}
    }
    init_logging(&cli.log_format);
    // One thread for the pipelines and the HTTP server: every hand-off between them is a task
    // switch, not a cross-thread wake-up (futex + context switch); a multi-thread runtime
    // doubled the relay's CPU at a steady 10k events/s (docs/benchmarks.md). The replication
    // sessions' socket reads run on a thread of their own (reader_thread.rs), librdkafka on its
    // own threads.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Run { config } => {
                let path = config.clone();
                let cfg = load(config)?;
                // Several sources: every series is labelled by its source.
                let prom = if cfg.sources.is_empty() {
                    recorder(outbox_relay::telemetry::metrics::install(
                        outbox_relay::observe::alert::LABELS,
                    ))
                } else {
                    recorder(outbox_relay::supervise::fleet::install_labelled())
                };
                let stop = stop_flag(
                    wait_for_signal(),
                    "stopping intake, waiting for in-flight acks",
                );
                if cfg.sources.is_empty() {
                    outbox_relay::supervise::run::run(&cfg, stop, prom).await
                } else {
                    outbox_relay::supervise::fleet::run(&cfg, stop, prom, reloads(path)).await
                }
                .map(|()| ExitCode::SUCCESS)
            }
            Command::Setup {
                config,
                recreate_slot,
                heal,
                heal_margin_ms,
                from_debezium,
                offsets_topic,
                offsets_file,
                topic_prefix,
                debezium_slot,
                source,
            } => {
                let root = load(config)?;
                let streams = pick(&root, source.as_deref())?;
                if from_debezium.is_some() && streams.len() > 1 {
                    return Err(usage(
                        "--from-debezium cuts one source over: add --source <name>",
                    ));
                }
                let cfg = streams[0];
                match from_debezium {
                    None => {
                        for cfg in streams {
                            outbox_relay::supervise::run::setup(
                                cfg,
                                recreate_slot,
                                heal.then_some(heal_margin_ms),
                            )
                            .await?;
                        }
                        Ok(())
                    }
                    Some(connector) => {
                        let storage = match (offsets_topic, offsets_file) {
                            (Some(t), None) => OffsetStorage::Topic(t),
                            (None, Some(f)) => OffsetStorage::File(f),
                            _ => {
                                return Err(RelayError::from(Definite::Precondition(
                                    "--from-debezium needs --offsets-topic (Connect's \
                                     offset.storage.topic) or --offsets-file (the standalone \
                                     worker's offset.storage.file.filename)"
                                        .into(),
                                )));
                            }
                        };
                        let from = FromDebezium {
                            storage,
                            connector,
                            server: topic_prefix,
                            debezium_slot,
                        };
                        outbox_relay::cutover::setup(cfg, &from).await
                    }
                }
                .map(|()| ExitCode::SUCCESS)
            }
            Command::Republish {
                config,
                ids,
                aggregate,
                since,
                until,
                execute,
                source,
            } => {
                let root = load(config)?;
                let streams = pick(&root, source.as_deref())?;
                if streams.len() > 1 {
                    return Err(usage("republish reads one source: add --source <name>"));
                }
                let req = outbox_relay::republish::Request {
                    ids,
                    aggregates: aggregate,
                    since,
                    until,
                    execute,
                };
                outbox_relay::republish::republish(streams[0], &req)
                    .await
                    .map(|_| ExitCode::SUCCESS)
            }
            Command::Status {
                config,
                fail_on,
                watch,
                interval_secs,
                source,
            } => {
                let root = load(config)?;
                let streams = pick(&root, source.as_deref())?;
                if watch {
                    let every =
                        std::time::Duration::from_secs_f64(interval_secs.clamp(0.1, 3600.0));
                    outbox_relay::observe::status::watch::run(&streams, every, wait_for_signal())
                        .await;
                    return Ok(ExitCode::SUCCESS);
                }
                let limit = match fail_on {
                    FailOn::Warning => Severity::Warning,
                    FailOn::Critical => Severity::Critical,
                };
                let mut alert = false;
                for (i, cfg) in streams.iter().enumerate() {
                    let report = outbox_relay::observe::status::collect(cfg).await?;
                    if i > 0 {
                        println!();
                    }
                    print!("{}", report.render());
                    alert |= report.worst().is_some_and(|w| w >= limit);
                }
                Ok(if alert {
                    ExitCode::from(EXIT_ALERT)
                } else {
                    ExitCode::SUCCESS
                })
            }
            Command::CheckConfig { config } => {
                let cfg = load(config)?;
                println!("{cfg:#?}");
                Ok(ExitCode::SUCCESS)
            }
            Command::Apply { action } => Ok(apply_cli::main(action, wait_for_signal()).await),
            // Printed before the runtime started.
            Command::Completions { .. } | Command::Manpage => Ok(ExitCode::SUCCESS),
        }
    });
    // A call into librdkafka that a stop cut short (a transaction waiting for Kafka) may still
    // be running on a blocking thread: do not wait for it.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(reason = e.reason(), "{e}");
            exit_code(&e)
        }
    }
}

fn load(path: Option<PathBuf>) -> Result<Config, RelayError> {
    Ok(Config::load(path.as_deref(), std::env::vars())?)
}

/// The configs a command works on: every source, or the one `--source` names.
fn pick<'a>(root: &'a Config, source: Option<&str>) -> Result<Vec<&'a Config>, RelayError> {
    let streams = root.streams();
    let Some(want) = source else {
        return Ok(streams);
    };
    let names: Vec<&str> = streams.iter().filter_map(|s| s.source.as_deref()).collect();
    match streams
        .into_iter()
        .find(|s| s.source.as_deref() == Some(want))
    {
        Some(s) => Ok(vec![s]),
        None if names.is_empty() => Err(usage(
            "--source: the config has no [source.<name>] tables (it relays one database)",
        )),
        None => Err(usage(&format!(
            "--source {want:?}: no such source; the config has {}",
            names.join(", ")
        ))),
    }
}

/// A command line that cannot work with this config (exit code 2).
fn usage(why: &str) -> RelayError {
    RelayError::from(Definite::Config(outbox_relay::config::ConfigError::Parse(
        why.to_string(),
    )))
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// The Prometheus recorder behind `/metrics`. Without one (logged) the process runs on
/// without metrics rather than not at all.
fn recorder(
    installed: Result<PrometheusHandle, impl std::fmt::Display>,
) -> Option<PrometheusHandle> {
    installed
        .map_err(|e| {
            tracing::error!(error = %e, "{METRICS_DISABLED}: cannot install the Prometheus recorder");
        })
        .ok()
}

/// A stop flag raised once `signal` fires, logging `then` (what stopping does).
fn stop_flag(
    signal: impl Future<Output = ()> + Send + 'static,
    then: &'static str,
) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        signal.await;
        tracing::info!("{SIGNAL_RECEIVED}: {then}");
        let _ = tx.send(true);
    });
    rx
}

/// Configs re-read on SIGHUP (a multi-source relay applies them source by source). A config
/// that does not load is logged and skipped.
fn reloads(path: Option<PathBuf>) -> tokio::sync::mpsc::Receiver<Config> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hup.recv().await.is_some() {
            match Config::load(path.as_deref(), std::env::vars()) {
                Ok(cfg) => {
                    if tx.send(cfg).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::error!(
                    error = %e,
                    "{CONFIG_RELOAD_FAILED}: the sources run on with the config they have"
                ),
            }
        }
    });
    #[cfg(not(unix))]
    let _ = (path, tx);
    rx
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
