//! The consumer side's fixtures: a consumer database with the inbox (and the recipes' totals
//! table), and the example programs under `examples/` built once per test run.

use std::{path::PathBuf, process::Command, sync::Mutex};

use super::{TestDb, repo_root};

/// A database of its own with `migrations/0003_inbox.sql` and `examples/recipes/schema.sql`.
pub async fn consumer_db(hint: &str) -> TestDb {
    let db = TestDb::new(hint).await;
    for file in ["migrations/0003_inbox.sql", "examples/recipes/schema.sql"] {
        let sql = std::fs::read_to_string(repo_root().join(file)).unwrap();
        db.client.batch_execute(&sql).await.unwrap();
    }
    db
}

/// Builds binary `bin` of workspace package `package` (once per run) and returns its path.
pub fn example_binary(package: &str, bin: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap();
    if !built.iter().any(|b| b == package) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-q", "-p", package])
            .current_dir(repo_root())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build -p {package} failed");
        built.push(package.to_string());
    }
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target"))
        .join("debug")
        .join(bin)
}

/// The `{"records":N,"applied":A,"duplicates":D}` line a recipe or consumer prints on exit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunFigures {
    pub records: u64,
    pub applied: u64,
    pub duplicates: u64,
}

impl RunFigures {
    /// Parses the last JSON line of `stdout`.
    pub fn parse(stdout: &str) -> RunFigures {
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .unwrap_or_else(|| panic!("no figures line in {stdout:?}"));
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let n = |k: &str| {
            v[k].as_u64()
                .unwrap_or_else(|| panic!("no {k} in {line:?}"))
        };
        RunFigures {
            records: n("records"),
            applied: n("applied"),
            duplicates: n("duplicates"),
        }
    }
}
