//! The relay's subcommands (`run`, `setup`, `republish`, `status`, `check-config`): one
//! function each, from the parsed command line to an exit code; and the exit codes of their
//! errors.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use outbox_relay::{
    config::Config,
    cutover::{FromDebezium, OffsetStorage},
    error::{Definite, RelayError},
    observe::alert::Severity,
};

use super::{
    Command, FailOn,
    process::{recorder, reloads, stop_bound, stop_flag, wait_for_signal},
};

/// `status` found an alert at or above `--fail-on`.
const EXIT_ALERT: u8 = 4;

/// `setup --recreate-slot --heal` could not cover part of the gap.
const EXIT_GAP_NOT_HEALED: u8 = 5;

/// Exit codes: 0 ok, 1 runtime failure, 2 bad configuration, 3 unmet precondition,
/// 4 (`status` only) an alert at or above `--fail-on`, 5 (`setup --heal`) a gap not healed
/// completely.
pub(crate) fn exit_code(e: &RelayError) -> ExitCode {
    match e {
        RelayError::Definite(Definite::GapNotHealed { .. }) => ExitCode::from(EXIT_GAP_NOT_HEALED),
        RelayError::Definite(Definite::Config(_)) => ExitCode::from(2),
        RelayError::Definite(Definite::Precondition(_) | Definite::CheckpointTopic { .. }) => {
            ExitCode::from(3)
        }
        _ => ExitCode::from(1),
    }
}

/// Runs `command` (on the runtime `main` started).
pub(crate) async fn dispatch(command: Command) -> Result<ExitCode, RelayError> {
    match command {
        Command::Run { config } => run(config).await,
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
            match from_debezium {
                None => setup(&streams, recreate_slot, heal.then_some(heal_margin_ms)).await,
                Some(connector) => {
                    let storage = offset_storage(offsets_topic, offsets_file)?;
                    let from = FromDebezium {
                        storage,
                        connector,
                        server: topic_prefix,
                        debezium_slot,
                    };
                    outbox_relay::cutover::setup(streams[0], &from)
                        .await
                        .map(|()| ExitCode::SUCCESS)
                }
            }
        }
        Command::Republish {
            config,
            ids,
            aggregate,
            since,
            until,
            since_lsn,
            until_lsn,
            execute,
            source,
        } => {
            let req = outbox_relay::republish::Request {
                ids,
                aggregates: aggregate,
                since,
                until,
                since_lsn,
                until_lsn,
                execute,
            };
            republish(config, source.as_deref(), &req).await
        }
        Command::Status {
            config,
            fail_on,
            watch,
            interval_secs,
            source,
        } => {
            let every = watch.then(|| Duration::from_secs_f64(interval_secs.clamp(0.1, 3600.0)));
            status(config, source.as_deref(), fail_on, every).await
        }
        Command::CheckConfig { config } => {
            let cfg = load(config)?;
            println!("{cfg:#?}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Apply { action } => Ok(super::apply::main(action, wait_for_signal()).await),
        // Printed before the runtime started (super::print_generated).
        Command::Completions { .. } | Command::Manpage => Ok(ExitCode::SUCCESS),
    }
}

/// `run`: one database, or every `[source.<name>]` (each series labelled by its source; the
/// config re-read on SIGHUP).
async fn run(config: Option<PathBuf>) -> Result<ExitCode, RelayError> {
    let path = config.clone();
    let cfg = load(config)?;
    let prom = if cfg.sources.is_empty() {
        recorder(outbox_relay::telemetry::metrics::install(
            outbox_relay::observe::alert::LABELS,
        ))
    } else {
        recorder(outbox_relay::supervise::fleet::install_labelled())
    };
    let bound = cfg.streams().into_iter().map(stop_bound).max();
    let stop = stop_flag(
        wait_for_signal(),
        "stopping intake, waiting for in-flight acks",
        bound,
    );
    if cfg.sources.is_empty() {
        outbox_relay::supervise::run::run(&cfg, stop, prom).await
    } else {
        outbox_relay::supervise::fleet::run(&cfg, stop, prom, reloads(path)).await
    }
    .map(|()| ExitCode::SUCCESS)
}

/// `setup` of each source in turn.
async fn setup(
    streams: &[&Config],
    recreate_slot: bool,
    heal_margin_ms: Option<u64>,
) -> Result<ExitCode, RelayError> {
    for cfg in streams {
        outbox_relay::supervise::run::setup(cfg, recreate_slot, heal_margin_ms).await?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Where `--from-debezium` reads the connector's offsets.
fn offset_storage(
    topic: Option<String>,
    file: Option<PathBuf>,
) -> Result<OffsetStorage, RelayError> {
    match (topic, file) {
        (Some(t), None) => Ok(OffsetStorage::Topic(t)),
        (None, Some(f)) => Ok(OffsetStorage::File(f)),
        _ => Err(RelayError::from(Definite::Precondition(
            "--from-debezium needs --offsets-topic (Connect's offset.storage.topic) or \
             --offsets-file (the standalone worker's offset.storage.file.filename)"
                .into(),
        ))),
    }
}

/// `republish`: one source.
async fn republish(
    config: Option<PathBuf>,
    source: Option<&str>,
    req: &outbox_relay::republish::Request,
) -> Result<ExitCode, RelayError> {
    let root = load(config)?;
    let streams = pick(&root, source)?;
    if streams.len() > 1 {
        return Err(usage("republish reads one source: add --source <name>"));
    }
    outbox_relay::republish::republish(streams[0], req)
        .await
        .map(|_| ExitCode::SUCCESS)
}

/// `status`: one report per source; exit 4 when an alert reaches `fail_on`. With `--watch`
/// (`every`): redrawn until a signal (exit 0).
async fn status(
    config: Option<PathBuf>,
    source: Option<&str>,
    fail_on: FailOn,
    every: Option<Duration>,
) -> Result<ExitCode, RelayError> {
    let root = load(config)?;
    let streams = pick(&root, source)?;
    if let Some(every) = every {
        outbox_relay::observe::status::watch::run(&streams, every, wait_for_signal()).await;
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
