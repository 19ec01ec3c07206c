//! The `outbox-relay` command line: its definition (here), what each subcommand does
//! ([`relay`] for the relay's, [`apply`] for the applier's), and the process around them
//! ([`process`]: logging, signals, the metrics recorder, config reloads).

pub(crate) mod apply;
pub(crate) mod process;
pub(crate) mod relay;

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

/// Moves transactional-outbox events from PostgreSQL (pgoutput) into Kafka, confirming the WAL
/// position only after Kafka has acknowledged everything before it.
#[derive(Parser)]
#[command(version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Log format: `text` or `json`. Levels come from RUST_LOG (default `info`).
    #[arg(
        long,
        global = true,
        env = "OUTBOX_RELAY_LOG_FORMAT",
        default_value = "text"
    )]
    pub(crate) log_format: String,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
    /// key, value, headers; commit-lsn 0/0 unless pg_walinspect finds it in pg_wal). Dry run
    /// by default: prints what it would send.
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
        /// Rows whose transaction committed at or after this LSN (an `outbox-relay.commit-lsn`
        /// value, e.g. 0/1A2B3C40); needs the pg_walinspect extension and that WAL still in
        /// pg_wal.
        #[arg(long, value_name = "LSN")]
        since_lsn: Option<String>,
        /// Rows whose transaction committed before this LSN (with --since-lsn).
        #[arg(long, value_name = "LSN", requires = "since_lsn")]
        until_lsn: Option<String>,
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
        action: apply::Action,
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
pub(crate) enum FailOn {
    Warning,
    Critical,
}

/// `completions` and `manpage`: printed from the CLI definition itself (so they never drift
/// from it) before logging and the runtime start. `None` for every other command.
pub(crate) fn print_generated(command: &Command) -> Option<ExitCode> {
    use clap::CommandFactory;
    match command {
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(*shell, &mut cmd, "outbox-relay", &mut std::io::stdout());
            Some(ExitCode::SUCCESS)
        }
        Command::Manpage => Some(
            match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("cannot write the man page: {e}");
                    ExitCode::from(1)
                }
            },
        ),
        _ => None,
    }
}
