//! The process around a subcommand: logging, the stop signal, the Prometheus recorder and the
//! config re-read on SIGHUP.

use std::{path::PathBuf, time::Duration};

use metrics_exporter_prometheus::PrometheusHandle;
use outbox_relay::{
    config::Config,
    telemetry::{
        events::{CONFIG_RELOAD_FAILED, METRICS_DISABLED, SHUTDOWN_OVERRUN, SIGNAL_RECEIVED},
        log_targets,
    },
};
use tokio::sync::watch;

pub(crate) fn init_logging(format: &str) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = tracing_subscriber::EnvFilter::try_new(directives(rust_log.as_deref()))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(directives(None)));
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

/// pgwire-replication's one ERROR line, "replication worker terminated with error: …", comes
/// with every dropped PostgreSQL connection, and the relay reports the same failure itself as
/// a restart (`pipeline_restart`, a warning, with the error's text): silenced unless RUST_LOG
/// names the crate.
const QUIETED: &str = "pgwire_replication::client::tokio_client=off";

/// The log filter's directives: RUST_LOG (old module paths translated, telemetry::log_targets)
/// or `info`, with [`QUIETED`] unless RUST_LOG names pgwire_replication itself.
fn directives(rust_log: Option<&str>) -> String {
    let d = rust_log.map_or_else(|| "info".to_string(), log_targets::translate);
    if d.contains("pgwire_replication") {
        d
    } else {
        format!("{d},{QUIETED}")
    }
}

/// The Prometheus recorder behind `/metrics`. Without one (logged) the process runs on
/// without metrics rather than not at all.
pub(crate) fn recorder(
    installed: Result<PrometheusHandle, impl std::fmt::Display>,
) -> Option<PrometheusHandle> {
    installed
        .map_err(|e| {
            tracing::error!(error = %e, "{METRICS_DISABLED}: cannot install the Prometheus recorder");
        })
        .ok()
}

/// A stop flag raised once `signal` fires, logging `then` (what stopping does). With `within`,
/// the process ends that long after the signal even if a part of it never returns
/// ([`overrun_guard`]).
pub(crate) fn stop_flag(
    signal: impl Future<Output = ()> + Send + 'static,
    then: &'static str,
    within: Option<Duration>,
) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        signal.await;
        tracing::info!("{SIGNAL_RECEIVED}: {then}");
        if let Some(within) = within {
            overrun_guard(within, move || {
                tracing::error!(
                    within_s = within.as_secs(),
                    "{SHUTDOWN_OVERRUN}: the relay did not stop in time after the signal and \
                     exits now; nothing Kafka has not acknowledged was confirmed, and what is \
                     not confirmed is sent again on the next start"
                );
                std::process::exit(EXIT_SHUTDOWN_OVERRUN);
            });
        }
        let _ = tx.send(true);
    });
    rx
}

/// The exit code of a stop that overran its bound.
const EXIT_SHUTDOWN_OVERRUN: i32 = 1;

/// How long after the stop signal `run` may take: the drain's bound (`shutdown_timeout_ms`),
/// then an open Kafka transaction's abort (at most 10 s), the replication session's close
/// (2 s), the alert webhook's last flush (10 s) and the producer's destruction (0.5 s), with
/// room to spare. Taken from the config at the start (a SIGHUP does not change it).
pub(crate) fn stop_bound(cfg: &Config) -> Duration {
    cfg.shutdown_timeout() + Duration::from_secs(30)
}

/// Calls `overrun` from a thread of its own once `within` has passed, unless the process has
/// ended by then.
///
/// Invariant: a stop signal ends the process in bounded time whatever its parts do. The
/// pipeline's waits race the stop (`pipeline::stop`), but the destruction of a Kafka client
/// after it does not: librdkafka joins its threads, and a chaos run of a variant build (issue
/// 40) saw a relay with records never acknowledged that did not exit after SIGTERM. Exiting
/// here loses nothing: positions are confirmed only for what Kafka acknowledged, during the
/// drain, which its own bound ended before this fires.
fn overrun_guard(within: Duration, overrun: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("stop-guard".into())
        .spawn(move || {
            std::thread::sleep(within);
            overrun();
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "{SHUTDOWN_OVERRUN}: cannot start the stop guard; the stop is not bounded");
    }
}

/// Configs re-read on SIGHUP (a multi-source relay applies them source by source). A config
/// that does not load is logged and skipped.
pub(crate) fn reloads(path: Option<PathBuf>) -> tokio::sync::mpsc::Receiver<Config> {
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

pub(crate) async fn wait_for_signal() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stop_guard_fires_after_its_bound_and_not_before() {
        let (tx, rx) = std::sync::mpsc::channel();
        let armed = std::time::Instant::now();
        overrun_guard(Duration::from_millis(200), move || {
            let _ = tx.send(armed.elapsed());
        });
        let fired = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the guard fired");
        assert!(fired >= Duration::from_millis(200), "{fired:?}");
    }

    #[test]
    fn the_stop_bound_leaves_the_drain_its_whole_timeout() {
        let env = [("OUTBOX_RELAY__RELAY__SHUTDOWN_TIMEOUT_MS", "5000")];
        let cfg = Config::load(None, env.map(|(k, v)| (k.to_string(), v.to_string()))).unwrap();
        assert_eq!(stop_bound(&cfg), Duration::from_secs(35));
    }

    #[test]
    fn the_replication_clients_duplicate_error_is_off_unless_asked_for() {
        assert_eq!(directives(None), format!("info,{QUIETED}"));
        assert_eq!(directives(Some("debug")), format!("debug,{QUIETED}"));
        assert_eq!(
            directives(Some("info,pgwire_replication=debug")),
            "info,pgwire_replication=debug"
        );
        // The directives parse as a filter.
        assert!(tracing_subscriber::EnvFilter::try_new(directives(None)).is_ok());
    }
}
