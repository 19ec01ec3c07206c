//! `outbox-relay apply …`: the applier's subcommands (the consumer half; docs/inbox.md), their
//! command line and what each does; the binary mounts [`Action`] under `apply` and calls
//! [`main`].

use std::{path::PathBuf, process::ExitCode};

use clap::Subcommand;
use metrics_exporter_prometheus::{BuildError, PrometheusHandle};
use tokio::sync::watch;

use crate::{
    ApplyError,
    config::ApplyConfig,
    telemetry::{events::APPLY_FAILED, metrics},
};

// The subcommands of `outbox-relay apply` (their help is the binary's: no doc comment here).
#[derive(Subcommand)]
pub enum Action {
    /// Apply the topics' events to the consumer's PostgreSQL until SIGINT/SIGTERM.
    Run {
        /// The applier's TOML config; every key can also come from OUTBOX_RELAY__<SECTION>__<KEY>.
        #[arg(short, long, env = "OUTBOX_RELAY_APPLY_CONFIG")]
        config: PathBuf,
    },
    /// Create the inbox, positions and dead-letter tables if missing; prepare every handler.
    Setup {
        #[arg(short, long, env = "OUTBOX_RELAY_APPLY_CONFIG")]
        config: PathBuf,
    },
    /// Set a partition's stored position (backwards too). Stop the consumer's instances first;
    /// records read again are absorbed by their claims.
    Reset {
        #[arg(short, long, env = "OUTBOX_RELAY_APPLY_CONFIG")]
        config: PathBuf,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        /// The next offset to apply.
        #[arg(long)]
        to: i64,
    },
    /// Apply the dead-lettered records again (after fixing their handler or data); each one
    /// that goes through leaves the dead-letter table in the same transaction.
    Redrive {
        #[arg(short, long, env = "OUTBOX_RELAY_APPLY_CONFIG")]
        config: PathBuf,
        /// Only the records of this topic.
        #[arg(long)]
        topic: Option<String>,
    },
    /// Print the consumer's positions against the logs (lag), its dead letters and claims. Exit
    /// 0, or 4 when a stored position is outside its log (the applier would not start it).
    Status {
        #[arg(short, long, env = "OUTBOX_RELAY_APPLY_CONFIG")]
        config: PathBuf,
    },
    /// Parse and validate the config, print it with secrets redacted, and exit.
    CheckConfig {
        #[arg(short, long, env = "OUTBOX_RELAY_APPLY_CONFIG")]
        config: PathBuf,
    },
}

fn load(path: &std::path::Path) -> Result<ApplyConfig, ApplyError> {
    Ok(ApplyConfig::load(Some(path), std::env::vars())?)
}

/// Runs `action` and turns its outcome into the exit code. The process around it is the
/// binary's: `recorder` installs what `install` returns as the metrics recorder (or logs why
/// not), `stop` gives a flag raised on SIGINT/SIGTERM that logs what stopping does.
pub async fn main(
    action: Action,
    recorder: impl FnOnce(Result<PrometheusHandle, BuildError>) -> Option<PrometheusHandle>,
    stop: impl FnOnce(&'static str) -> watch::Receiver<bool>,
) -> ExitCode {
    match dispatch(action, recorder, stop).await {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{APPLY_FAILED}: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

async fn dispatch(
    action: Action,
    recorder: impl FnOnce(Result<PrometheusHandle, BuildError>) -> Option<PrometheusHandle>,
    stop: impl FnOnce(&'static str) -> watch::Receiver<bool>,
) -> Result<ExitCode, ApplyError> {
    match action {
        Action::Run { config } => {
            let cfg = load(&config)?;
            let prom = recorder(metrics::install());
            let stop = stop("finishing the open transactions");
            crate::run(cfg, stop, prom).await?;
        }
        Action::Setup { config } => crate::setup(&load(&config)?).await?,
        Action::Reset {
            config,
            topic,
            partition,
            to,
        } => {
            let before = crate::reset(&load(&config)?, &topic, partition, to).await?;
            println!(
                "{topic}[{partition}]: position {} -> {to}",
                before.map_or("none".into(), |b| b.to_string())
            );
        }
        Action::Redrive { config, topic } => {
            let done = crate::redrive(&load(&config)?, topic.as_deref()).await?;
            println!(
                "re-driven: {}; failed again: {}{}",
                done.applied,
                done.failed.len(),
                if done.gone > 0 {
                    format!("; taken by another re-drive meanwhile: {}", done.gone)
                } else {
                    String::new()
                }
            );
            for f in &done.failed {
                println!("  {f}");
            }
            if !done.failed.is_empty() {
                return Ok(ExitCode::from(1));
            }
        }
        Action::Status { config } => {
            let report = crate::operate::status::collect(&load(&config)?).await?;
            print!("{}", report.render());
            if report.alarming() {
                return Ok(ExitCode::from(4));
            }
        }
        Action::CheckConfig { config } => println!("{:#?}", load(&config)?),
    }
    Ok(ExitCode::SUCCESS)
}
