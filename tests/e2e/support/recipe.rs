//! The inbox recipe programs (`examples/inbox-*`, contract in `examples/recipes/README.md`):
//! built once per test run, OFFLINE (`infra/install-recipes.sh` downloaded what they need), and
//! run as child processes with the contract's environment.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    sync::OnceLock,
    time::{Duration, Instant, SystemTime},
};

use super::{kafka_brokers, repo_root};

/// Where a recipe keeps its position (examples/recipes/README.md, "Offsets").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offsets {
    /// Committed to the Kafka consumer group `GROUP`.
    KafkaGroup,
    /// In the consumer's database, table `kafka_offsets`, written with the effect.
    Database,
}

/// One recipe program: where it lives and how it is built.
pub struct Recipe {
    pub name: &'static str,
    /// Its folder, relative to the repository root.
    pub dir: &'static str,
    pub offsets: Offsets,
    build: fn(&Path) -> Result<Vec<OsString>, String>,
    built: OnceLock<Result<Vec<OsString>, String>>,
}

/// Every recipe the tests run: one row each.
pub static RECIPES: [Recipe; 4] = [
    Recipe::new("go", "examples/inbox-go", Offsets::KafkaGroup, build_go),
    Recipe::new(
        "java",
        "examples/inbox-java",
        Offsets::KafkaGroup,
        build_java,
    ),
    Recipe::new(
        "rust",
        "examples/inbox-rust",
        Offsets::KafkaGroup,
        build_rust,
    ),
    Recipe::new("sql", "examples/inbox-sql", Offsets::Database, build_sql),
];

/// What the contract's summary line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub records: u64,
    pub applied: u64,
    pub duplicates: u64,
}

/// One finished run of a recipe program.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The summary line (the last line on stdout); panics with the output if there is none.
    pub fn summary(&self) -> Summary {
        let line = self.stdout.lines().rev().find(|l| !l.trim().is_empty());
        let v: serde_json::Value = line
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no summary line on stdout: {self:?}"));
        let n = |k: &str| {
            v[k].as_u64()
                .unwrap_or_else(|| panic!("summary has no {k:?}: {self:?}"))
        };
        Summary {
            records: n("records"),
            applied: n("applied"),
            duplicates: n("duplicates"),
        }
    }
}

impl Recipe {
    const fn new(
        name: &'static str,
        dir: &'static str,
        offsets: Offsets,
        build: fn(&Path) -> Result<Vec<OsString>, String>,
    ) -> Recipe {
        Recipe {
            name,
            dir,
            offsets,
            build,
            built: OnceLock::new(),
        }
    }

    /// `None` when the recipe's folder is not on this branch (the caller says so); otherwise
    /// the program's command line, built on first use (panics with the build output on failure).
    pub async fn program(&'static self) -> Option<Vec<OsString>> {
        let dir = repo_root().join(self.dir);
        if !dir.is_dir() {
            return None;
        }
        let built = tokio::task::spawn_blocking(move || {
            self.built.get_or_init(|| (self.build)(&dir)).clone()
        })
        .await
        .unwrap();
        Some(built.unwrap_or_else(|e| panic!("cannot build the {} recipe: {e}", self.name)))
    }

    /// Runs the program to completion against the consumer database `database` and `topic`;
    /// stdout/stderr are also kept under target/e2e/<test>/.
    pub async fn run(&'static self, test: &str, database: &str, topic: &str, group: &str) -> Run {
        let argv = self.program().await.expect("recipe folder present");
        let base = super::pg_base();
        let pg = |k: &str| {
            base.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k))
                .unwrap_or_default()
                .to_string()
        };
        let dir = repo_root().join("target/e2e").join(test);
        std::fs::create_dir_all(&dir).unwrap();
        let n = std::fs::read_dir(&dir).unwrap().count();
        let (out, err) = (
            dir.join(format!("{}-{n}.out", self.name)),
            dir.join(format!("{}-{n}.err", self.name)),
        );
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .env("PGHOST", pg("host="))
            .env("PGPORT", pg("port="))
            .env("PGUSER", pg("user="))
            .env("PGDATABASE", database)
            .env("BROKERS", kafka_brokers())
            .env("TOPIC", topic)
            .env("GROUP", group_id(topic, group))
            .env("CONSUMER", format!("recipe-{}", self.name))
            // from the first assignment on (Go, Java): margin for a loaded CI machine
            .env("IDLE_MS", "4000")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {} recipe {argv:?}: {e}", self.name));
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the {} recipe ran over 60 s; stderr:\n{}",
                    self.name,
                    std::fs::read_to_string(&err).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Run {
            status,
            stdout: std::fs::read_to_string(&out).unwrap_or_default(),
            stderr: std::fs::read_to_string(&err).unwrap_or_default(),
        }
    }
}

fn build_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target"))
        .join("recipes")
}

/// Runs `cmd`; its output in the error when it fails.
fn output(what: &str, cmd: &mut Command) -> Result<String, String> {
    let o = cmd
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{what} failed ({}); run infra/install-recipes.sh if a download is missing:\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// `go build` with the module proxy off: only go.sum's modules, from the module cache.
fn build_go(dir: &Path) -> Result<Vec<OsString>, String> {
    let bin = build_dir().join("inbox-go");
    output(
        "go build (examples/inbox-go)",
        Command::new("go")
            .args(["build", "-o"])
            .arg(&bin)
            .arg(".")
            .current_dir(dir)
            .env("GOPROXY", "off")
            .env("GOFLAGS", "-mod=readonly"),
    )?;
    Ok(vec![bin.into()])
}

/// `mvn -o package` (offline), skipped while the jar is newer than pom.xml and every source.
fn build_java(dir: &Path) -> Result<Vec<OsString>, String> {
    let jar = dir.join("target/inbox-java.jar");
    let built = std::fs::metadata(&jar).and_then(|m| m.modified()).ok();
    if built.is_none_or(|b| newest_mtime(dir) > b) {
        output(
            "mvn -o package (examples/inbox-java)",
            Command::new("mvn")
                .args(["-o", "-B", "-q", "-Dstyle.color=never", "package"])
                .current_dir(dir),
        )?;
    }
    Ok(vec!["java".into(), "-jar".into(), jar.into()])
}

/// The newest modification time of pom.xml and anything under src/.
fn newest_mtime(dir: &Path) -> SystemTime {
    fn walk(p: &Path, newest: &mut SystemTime) {
        if let Ok(m) = std::fs::metadata(p) {
            *newest = (*newest).max(m.modified().unwrap_or(SystemTime::UNIX_EPOCH));
            if m.is_dir() {
                for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                    walk(&e.path(), newest);
                }
            }
        }
    }
    let mut newest = SystemTime::UNIX_EPOCH;
    walk(&dir.join("pom.xml"), &mut newest);
    walk(&dir.join("src"), &mut newest);
    newest
}

/// `cargo build` of the recipe's package; the program is the binary cargo reports.
fn build_rust(dir: &Path) -> Result<Vec<OsString>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let stdout = output(
        "cargo build (examples/inbox-rust)",
        Command::new(cargo)
            .args([
                "build",
                "--message-format=json-render-diagnostics",
                "--manifest-path",
            ])
            .arg(dir.join("Cargo.toml"))
            .current_dir(repo_root()),
    )?;
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .find_map(|m| m["executable"].as_str().map(|e| vec![OsString::from(e)]))
        .ok_or_else(|| "cargo build produced no executable".to_string())
}

/// Nothing to build: the driver script, once kcat and psql answer.
fn build_sql(dir: &Path) -> Result<Vec<OsString>, String> {
    output(
        "kcat -V (apt-get install kcat)",
        Command::new("kcat").arg("-V"),
    )?;
    output("psql --version", Command::new("psql").arg("--version"))?;
    Ok(vec!["bash".into(), dir.join("consume.sh").into()])
}

/// Produces one record WITHOUT headers (the bad input the recipes must refuse).
pub async fn produce_without_id(topic: &str, key: &str, value: &str) {
    super::kafka::produce(topic, key, value, None).await
}

/// The Kafka consumer group a recipe run named `group` uses on `topic`: each recipe row has its
/// own topic, and recipes in different languages must never share a group (their clients'
/// assignment protocols differ, and Kafka refuses the mix: INCONSISTENT_GROUP_PROTOCOL).
pub fn group_id(topic: &str, group: &str) -> String {
    format!("{topic}.{group}")
}

/// The offset the SQL recipe stored for `group` on partition 0 of `topic` in the consumer
/// database (`None`: nothing stored).
pub async fn stored_offset(db: &super::TestDb, group: &str, topic: &str) -> Option<i64> {
    db.client
        .query_opt(
            "SELECT next_offset FROM kafka_offsets \
             WHERE consumer_group = $1 AND topic = $2 AND kafka_partition = 0",
            &[&group, &topic],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
}

/// The offset `group` has committed on partition 0 of `topic` (`None`: nothing committed).
pub fn committed_offset(group: &str, topic: &str) -> Option<i64> {
    use rdkafka::{
        ClientConfig, Offset, TopicPartitionList,
        consumer::{BaseConsumer, Consumer},
    };
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let got = c
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    match got.find_partition(topic, 0).map(|p| p.offset()) {
        Some(Offset::Offset(o)) => Some(o),
        _ => None,
    }
}
