//! The `outbox-relay` binary: parse the command line, start logging and the runtime, run the
//! subcommand ([`cli`]), turn its outcome into the exit code.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if let Some(code) = cli::print_generated(&cli.command) {
        return code;
    }
    cli::process::init_logging(&cli.log_format);
    let Some(rt) = runtime() else {
        return ExitCode::from(1);
    };
    let result = rt.block_on(cli::relay::dispatch(cli.command));
    // A call into librdkafka that a stop cut short (a transaction waiting for Kafka) may still
    // be running on a blocking thread: do not wait for it.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(reason = e.reason(), "{e}");
            cli::relay::exit_code(&e)
        }
    }
}

/// One thread for the pipelines and the HTTP server: every hand-off between them is a task
/// switch, not a cross-thread wake-up (futex + context switch); a multi-thread runtime doubled
/// the relay's CPU at a steady 10k events/s (docs/benchmarks.md). The replication sessions'
/// socket reads run on a thread of their own (reader_thread.rs), librdkafka on its own threads.
fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            None
        }
    }
}
