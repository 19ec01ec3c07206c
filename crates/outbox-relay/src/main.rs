//! The `outbox-relay` binary: parse the command line, start logging and the runtime, run the
//! subcommand ([`cli`]), turn its outcome into the exit code.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    without_fastbins();
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

/// glibc's fastbins off (`M_MXFAST = 0`), before any thread starts, unless `GLIBC_TUNABLES`
/// sets them. With them, every allocation above 1 KiB (and every free of a large buffer)
/// walks the fastbins in `malloc_consolidate`: 12 % of the main thread's time in a
/// 1,000-row catch-up (perf) for 1.8 % of its instructions (callgrind), cache misses on the
/// freed records. Without them the per-thread tcache still serves small allocations.
/// Measured in turn, 12 pairs of drains of 200,000 events in 1,000-row transactions: the main
/// thread's CPU lower in 11 of 12, the process's CPU per event lower in 8 (medians of the
/// first 9: 7.6 -> 7.15 µs); single-row catch-ups alike within the spread; instructions
/// -0.4 % (bench/notebook.md, 2026-12-06 night).
fn without_fastbins() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if !std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("malloc.mxfast")) {
        // SAFETY: mallopt only changes the allocator's parameters; no thread runs yet.
        unsafe { libc::mallopt(libc::M_MXFAST, 0) };
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
