//! The log event names: each declared once, in snake case, used by the code, and every log
//! message that names an event starts with its constant. Every crate that logs is checked here
//! ([`CRATES`]), each against its own list: the relay's (this module), the shared crate's and
//! the applier's.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use super::*;

/// A crate whose log lines are checked: its folder under `crates/`, the file (under `src/`)
/// that declares its event names, that file's text and the names.
struct Crate {
    dir: &'static str,
    events_file: &'static str,
    declared_in: &'static str,
    names: &'static [&'static str],
}

const CRATES: &[Crate] = &[
    Crate {
        dir: "outbox-relay",
        events_file: "telemetry/events/mod.rs",
        declared_in: include_str!("mod.rs"),
        names: ALL,
    },
    Crate {
        dir: "outbox-service",
        events_file: "events.rs",
        declared_in: include_str!("../../../../outbox-service/src/events.rs"),
        names: outbox_service::events::ALL,
    },
    Crate {
        dir: "outbox-apply",
        events_file: "telemetry/events.rs",
        declared_in: include_str!("../../../../outbox-apply/src/telemetry/events.rs"),
        names: outbox_apply::telemetry::events::ALL,
    },
];

/// Log messages that do not start with an event name, as written in the source (the path
/// from `crates/`), and why. An entry that no longer occurs fails the test too, so the list
/// stays exact.
const EXCEPTIONS: &[(&str, &str)] = &[
    // librdkafka's own lines, forwarded at their level.
    (
        "outbox-service/src/kafka_log.rs",
        "librdkafka: {log_message}",
    ),
    // `alert::Transition::message`, which starts with ALERT_FIRING or ALERT_RESOLVED.
    ("outbox-relay/src/observe/monitor/mod.rs", "{msg}"),
    // The process's last line: the fatal error's text, with its `reason` field.
    ("outbox-relay/src/main.rs", "{e}"),
    // Before the runtime (and anything else) exists.
    ("outbox-relay/src/main.rs", "cannot start the async runtime"),
    // Debug lines.
    (
        "outbox-relay/src/observe/monitor/mod.rs",
        "publication check failed; retried next poll",
    ),
    (
        "outbox-relay/src/postgres/control.rs",
        "control connection closed",
    ),
];

const LEVELS: [&str; 5] = ["trace", "debug", "info", "warn", "error"];

/// `NAME` of every `pub const NAME: &str = "…";` in `src`, with its value.
fn declared(src: &str) -> Vec<(String, String)> {
    src.lines()
        .filter_map(|l| l.strip_prefix("pub const "))
        .filter_map(|l| l.split_once(": &str = \""))
        .map(|(name, rest)| {
            let value = rest.strip_suffix("\";").expect("one constant per line");
            (name.to_string(), value.to_string())
        })
        .collect()
}

fn is_snake_case(s: &str) -> bool {
    !s.is_empty()
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && !s.ends_with('_')
        && !s.contains("__")
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A bare event-name literal: snake_case with at least one `_`, alone or before `:`/` `.
fn starts_with_bare_name(message: &str) -> bool {
    let end = message
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .unwrap_or(message.len());
    let (word, rest) = message.split_at(end);
    is_snake_case(word)
        && word.contains('_')
        && (rest.is_empty() || rest.starts_with(':') || rest.starts_with(' '))
}

#[test]
fn names_are_unique_snake_case_and_all_listed() {
    // Unique over every crate: a name means one thing wherever it is logged.
    let mut seen = BTreeSet::new();
    for krate in CRATES {
        for name in krate.names {
            assert!(is_snake_case(name), "{name:?} is not snake_case");
            assert!(seen.insert(*name), "{name:?} is listed twice");
        }
        let declared = declared(krate.declared_in);
        assert_eq!(
            declared.len(),
            krate.names.len(),
            "{}: every constant is in ALL, once",
            krate.dir
        );
        for (ident, value) in &declared {
            assert_eq!(
                *ident,
                value.to_uppercase(),
                "the constant is named after its value"
            );
            assert!(
                krate.names.contains(&value.as_str()),
                "{ident} is missing from {}'s ALL",
                krate.dir
            );
        }
    }
}

#[test]
fn the_name_checks_reject_what_they_should() {
    assert!(!is_snake_case("Streaming_started"));
    assert!(!is_snake_case("streaming-started"));
    assert!(!is_snake_case("streaming__started"));
    assert!(!is_snake_case("streaming_started_"));
    assert!(starts_with_bare_name("streaming_started"));
    assert!(starts_with_bare_name("slot_lost: stopping"));
    assert!(starts_with_bare_name("http_listening (address unknown)"));
    assert!(!starts_with_bare_name("{STREAMING_STARTED}"));
    assert!(!starts_with_bare_name("librdkafka: {log_message}"));
    assert!(!starts_with_bare_name("control connection closed"));
}

/// One `tracing::<level>!(…)` call found in source text.
#[derive(Debug, PartialEq)]
struct Call {
    line: usize,
    /// The message literal's text as written (escapes and line continuations untouched).
    message: Option<String>,
}

/// What [`scan`] found: the tracing calls, and log macros called without `tracing::`.
#[derive(Debug, Default)]
struct Scan {
    calls: Vec<Call>,
    unqualified: Vec<usize>,
}

/// The end (exclusive) of the literal or comment starting at `i`, or `None` if none does.
fn skip_non_code(b: &[u8], i: usize) -> Option<usize> {
    let at = |k: usize| b.get(k).copied().unwrap_or(0);
    match at(i) {
        b'/' if at(i + 1) == b'/' => Some(
            b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p),
        ),
        b'/' if at(i + 1) == b'*' => {
            let mut k = i + 2;
            while k < b.len() && !(at(k) == b'*' && at(k + 1) == b'/') {
                k += 1;
            }
            Some((k + 2).min(b.len()))
        }
        b'"' => {
            let mut k = i + 1;
            while k < b.len() && at(k) != b'"' {
                k += if at(k) == b'\\' { 2 } else { 1 };
            }
            Some((k + 1).min(b.len()))
        }
        // Raw strings: r"…", r#"…"#.
        b'r' if (at(i + 1) == b'"' || at(i + 1) == b'#') && (i == 0 || !is_ident(at(i - 1))) => {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if at(i + 1 + hashes) != b'"' {
                return None;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let start = i + 2 + hashes;
            Some(
                b[start..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(b.len(), |p| start + p + close.len()),
            )
        }
        // Char literals ('x', '\n', '"'); a lifetime ('a) is code.
        b'\'' if at(i + 1) == b'\\' => {
            let mut k = i + 3;
            while k < b.len() && at(k) != b'\'' {
                k += 1;
            }
            Some((k + 1).min(b.len()))
        }
        b'\'' if at(i + 2) == b'\'' => Some(i + 3),
        _ => None,
    }
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The log macro called at `i` (`info` for `info!(`), if one is.
fn macro_at(b: &[u8], i: usize) -> Option<(&'static str, usize)> {
    if i > 0 && is_ident(b[i - 1]) {
        return None;
    }
    LEVELS.into_iter().find_map(|level| {
        let rest = &b[i..];
        let after = rest.strip_prefix(level.as_bytes())?.strip_prefix(b"!")?;
        let ws = after.iter().take_while(|c| c.is_ascii_whitespace()).count();
        (after.get(ws) == Some(&b'(')).then_some((level, i + level.len() + 1 + ws + 1))
    })
}

/// Every log macro call in `src` outside comments and literals.
fn scan(src: &str) -> Scan {
    let b = src.as_bytes();
    let line_of = |i: usize| src[..i].matches('\n').count() + 1;
    let mut out = Scan::default();
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = skip_non_code(b, i) {
            i = end;
            continue;
        }
        let Some((_, args_start)) = macro_at(b, i) else {
            i += 1;
            continue;
        };
        if !src[..i].ends_with("tracing::") {
            out.unqualified.push(line_of(i));
            i = args_start;
            continue;
        }
        // The arguments, split at top-level commas; the message is the first argument
        // that is one string literal (fields come before it, format arguments after).
        let mut depth = 0usize;
        let mut k = args_start;
        let mut arg_start = k;
        let mut message = None;
        while k < b.len() {
            if let Some(end) = skip_non_code(b, k) {
                k = end;
                continue;
            }
            match b[k] {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' if depth > 0 => depth -= 1,
                b',' | b')' if depth == 0 => {
                    let arg = src[arg_start..k].trim();
                    if message.is_none()
                        && arg.len() >= 2
                        && arg.starts_with('"')
                        && skip_non_code(arg.as_bytes(), 0) == Some(arg.len())
                    {
                        message = Some(arg[1..arg.len() - 1].to_string());
                    }
                    arg_start = k + 1;
                    if b[k] == b')' {
                        break;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        out.calls.push(Call {
            line: line_of(i),
            message,
        });
        i = k + 1;
    }
    out
}

/// Why `message` is not a proper start of a log line of a crate naming `names`, if it is not.
fn problem(message: &str, names: &[&str]) -> Option<String> {
    if let Some(rest) = message.strip_prefix('{') {
        let ident = rest.split('}').next().unwrap_or("");
        let value = ident.to_lowercase();
        return if ident == value.to_uppercase() && names.contains(&value.as_str()) {
            None
        } else {
            Some(format!(
                "starts with {{{ident}}}, which is not an events.rs constant of its crate"
            ))
        };
    }
    Some(if starts_with_bare_name(message) {
        "starts with a bare event name: use its events.rs constant".into()
    } else {
        "does not start with an event name".into()
    })
}

/// The problems of the log lines in one file's `src`, of a crate naming `names`; `used`
/// collects exceptions met.
fn check(
    file: &str,
    src: &str,
    names: &[&str],
    used: &mut BTreeSet<(&'static str, &'static str)>,
) -> Vec<String> {
    let scan = scan(src);
    let mut problems: Vec<String> = scan
        .unqualified
        .iter()
        .map(|line| format!("{file}:{line}: call the log macros as tracing::<level>!"))
        .collect();
    for call in scan.calls {
        let Some(message) = call.message else {
            problems.push(format!("{file}:{}: no message literal found", call.line));
            continue;
        };
        if let Some(&e) = EXCEPTIONS.iter().find(|(f, m)| *f == file && *m == message) {
            used.insert(e);
            continue;
        }
        if let Some(p) = problem(&message, names) {
            problems.push(format!("{file}:{}: {message:?} {p}", call.line));
        }
    }
    problems
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_log_line_of_every_crate_starts_with_an_event_constant() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut used = BTreeSet::new();
    let mut problems = Vec::new();
    let (mut all_files, mut all_calls) = (0, 0);
    for krate in CRATES {
        let src = crates.join(krate.dir).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        files.sort();
        let mut calls = 0;
        let mut text = String::new();
        for path in &files {
            let body = std::fs::read_to_string(path).unwrap();
            let rel = path.strip_prefix(&src).unwrap().display().to_string();
            calls += scan(&body).calls.len();
            let file = format!("{}/src/{rel}", krate.dir);
            problems.extend(check(&file, &body, krate.names, &mut used));
            if rel != krate.events_file {
                text.push_str(&body);
            }
        }
        // A crate whose scan finds nothing would pass anything.
        assert!(
            !files.is_empty() && calls > 0,
            "{}: {} files, {calls} calls",
            krate.dir,
            files.len()
        );
        for (ident, _) in declared(krate.declared_in) {
            assert!(
                text.contains(&ident),
                "{ident} is used nowhere in {}: remove it",
                krate.dir
            );
        }
        all_files += files.len();
        all_calls += calls;
    }
    // A scanner that finds nothing would pass anything.
    assert!(
        all_files > 20 && all_calls > 40,
        "{all_files} files, {all_calls} calls"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for e in EXCEPTIONS {
        assert!(
            used.contains(e),
            "exception {e:?} no longer occurs: remove it"
        );
    }
}

#[test]
fn the_source_check_fails_on_what_it_should() {
    // Written with concat! so that this file does not contain the calls it describes.
    let mut used = BTreeSet::new();
    let bad = concat!(
        "fn f() {\n",
        "    tracing",
        "::info!(slot = %s, \"streaming_started\");\n",
        "    tracing",
        "::warn!(\n",
        "        reason = e.reason(),\n",
        "        \"slot_lost: the slot was invalidated; \\\n",
        "         stopping\"\n",
        "    );\n",
        "    tracing",
        "::debug!(\"{NOT_AN_EVENT}\");\n",
        "    tracing",
        "::error!(x = f(a, \"b\"), \"no name at all\");\n",
        "    info",
        "!(\"{STREAMING_STARTED}\");\n",
        "}\n",
    );
    let problems = check("x.rs", bad, ALL, &mut used);
    assert_eq!(problems.len(), 5, "{problems:#?}");
    assert!(
        problems[0].starts_with("x.rs:10: call the log macros"),
        "{problems:#?}"
    );
    assert!(problems[1].starts_with("x.rs:2: \"streaming_started\" starts with a bare"));
    assert!(
        problems[2].starts_with("x.rs:3: \"slot_lost: the slot"),
        "{problems:#?}"
    );
    assert!(
        problems[3].contains("{NOT_AN_EVENT}, which is not"),
        "{problems:#?}"
    );
    assert!(
        problems[4].contains("\"no name at all\" does not start"),
        "{problems:#?}"
    );

    let good = concat!(
        "// tracing",
        "::info!(\"streaming_started\") in a comment\n",
        "/* tracing",
        "::info!(\"streaming_started\") */\n",
        "const S: &str = \"tracing",
        "::info!(\\\"streaming_started\\\")\";\n",
        "fn f() {\n",
        "    let c = '(';\n",
        "    tracing",
        "::info!(slot = %s, \"{STREAMING_STARTED}\");\n",
        "    tracing",
        "::warn!(t = %f(\"a, b\"), \"{HTTP_LISTENING} (address unknown)\");\n",
        "    tracing",
        "::info!(\"{SLOT_LOST}: a {} sentence\", c);\n",
        "    metrics::counter!(\"x\").increment(1);\n",
        "}\n",
    );
    let names: Vec<&str> = ALL
        .iter()
        .chain(outbox_service::events::ALL)
        .copied()
        .collect();
    let problems = check("x.rs", good, &names, &mut used);
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(scan(good).calls.len(), 3);
    assert!(used.is_empty());
}
