//! `outbox-relay apply …`: the applier's subcommands, mounted from `outbox_apply::cli` (their
//! command line and bodies live there); this file hands them the process's recorder and stop.

use std::process::ExitCode;

pub(crate) use outbox_apply::cli::Action;

pub(crate) async fn main(
    action: Action,
    signal: impl Future<Output = ()> + Send + 'static,
) -> ExitCode {
    outbox_apply::cli::main(action, super::process::recorder, |then| {
        super::process::stop_flag(signal, then, None)
    })
    .await
}
