//! Configuration as both programs read it: one TOML file, every key overridable from the
//! environment (`OUTBOX_RELAY__<SECTION>__<KEY>=value`), unknown keys rejected, every error
//! naming the option (and the variable that set it), secrets never printed.
//!
//! - [`load`]: the file and the environment into one table, and that table into a struct with
//!   errors that name the option;
//! - [`lenient`]: typed values written natively or as text;
//! - [`secret`]: [`Secret`] and password files.
//!
//! Each program's sections and their checks stay with the program (the relay's `config`, the
//! applier's `config` in `outbox-apply`); the PostgreSQL connection keys both share are
//! [`crate::postgres::PgConnection`].

pub mod lenient;
pub mod load;
pub mod secret;

use std::path::PathBuf;

pub use secret::Secret;

/// Prefix of environment variables that override the file.
pub const ENV_PREFIX: &str = "OUTBOX_RELAY__";

/// The configuration could not be loaded. The message says which key and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A password file (`postgres.password_file`, `kafka.sasl_password_file`).
    #[error("cannot read {key} {path}: {source}")]
    ReadSecret {
        key: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid configuration: {0}")]
    Parse(String),
    #[error(
        "environment variable {0} does not name a config key: use OUTBOX_RELAY__<SECTION>__<KEY>"
    )]
    BadEnvKey(String),
    #[error("invalid configuration: {0}")]
    Invalid(#[from] InvalidOption),
}

/// A value the program refuses: the option (as written in the file, `section.key`, with the
/// index of an array entry) and the sentence that says why and what to use instead.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct InvalidOption {
    pub option: String,
    pub message: String,
}

impl InvalidOption {
    pub fn new(option: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            option: option.into(),
            message: message.into(),
        }
    }
}
