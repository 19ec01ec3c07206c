//! Tests that start servers of their own (a PostgreSQL cluster, a Kafka broker, a proxy or a
//! black hole) do so on fixed ports below 32768, and tests of different files run at the same
//! time (`--test-threads 3`). Two files naming the same port collide: the second server fails
//! to start, or `PgCluster::start` destroys the other test's cluster as "a leftover". Three such
//! pairs were found (25451: failover and stop; 25493: applier and standby; 28430:
//! outbox_hygiene and slot_trends), none yet seen failing a run. This check keeps it so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "support") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|x| x == "rs")
            && path.file_name().is_some_and(|n| n != "ports.rs")
        {
            out.push(path);
        }
    }
}

/// Every integer literal of 20000..=32767 outside comments: the ports the tests use.
fn port_literals(src: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for line in src.lines() {
        let code = line.split("//").next().unwrap();
        let bytes = code.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii_digit() {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'_') {
                    i += 1;
                }
                let before = start.checked_sub(1).map(|j| bytes[j]);
                let after = bytes.get(i).copied();
                let word =
                    |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'.');
                if !word(before) && !word(after) {
                    let digits: String = code[start..i].chars().filter(|c| *c != '_').collect();
                    if let Ok(n) = digits.parse::<u32>()
                        && (20_000..=32_767).contains(&n)
                    {
                        out.push(n);
                    }
                }
            } else {
                i += 1;
            }
        }
    }
    out
}

#[test]
fn no_two_test_files_start_servers_on_the_same_port() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut owners: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        let name = f.strip_prefix(&root).unwrap().display().to_string();
        for port in port_literals(&src) {
            let o = owners.entry(port).or_default();
            if !o.contains(&name) {
                o.push(name.clone());
            }
        }
    }
    // A scan that finds nothing would pass anything.
    assert!(owners.len() > 40, "only {} ports found", owners.len());
    let shared: Vec<String> = owners
        .iter()
        .filter(|(_, o)| o.len() > 1)
        .map(|(p, o)| format!("port {p}: {}", o.join(", ")))
        .collect();
    assert!(
        shared.is_empty(),
        "ports named by two test files:\n{}",
        shared.join("\n")
    );
}

#[test]
fn the_scan_reads_constants_and_calls_not_comments_or_longer_numbers() {
    let src = "const A: u16 = 25_441;\nlet c = PgCluster::start(28430, \"\"); // 26000\n\
               let n = 123456; let f = 25000.5; let x = y25000;";
    assert_eq!(port_literals(src), vec![25441, 28430]);
}
