//! The map cannot drift: docs/architecture.md's "Code layout" names every top-level module of
//! every crate under `crates/` (declared in its `lib.rs` or `main.rs`), and names nothing that
//! is not one. A module added, moved or removed without its row fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Top-level modules a crate root declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`; an
/// inline `mod tests { .. }` is not a file of the crate's layout).
fn declared(root: &Path) -> BTreeSet<String> {
    let Ok(text) = std::fs::read_to_string(root) else {
        return BTreeSet::new();
    };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//"))
        .filter_map(|l| {
            let l = l
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            (name != "tests").then(|| name.trim().to_string())
        })
        .collect()
}

/// Per crate section (`### \`crates/<name>\``) of the layout, the backticked names of each
/// table row's first column (a folder's trailing `/` dropped, a parenthesis ignored).
fn documented(doc: &str) -> Vec<(String, BTreeSet<String>)> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Code layout"))
        .expect("docs/architecture.md has a \"## Code layout\" section");
    section
        .split("\n### ")
        .skip(1)
        .map(|sub| {
            let name = sub.lines().next().unwrap().trim().trim_matches('`');
            let crate_name = name.strip_prefix("crates/").unwrap_or(name).to_string();
            let names = sub
                .lines()
                .filter(|l| l.starts_with("| `"))
                .flat_map(|l| {
                    let first = l.trim_start_matches('|').split('|').next().unwrap();
                    let first = first.split(" (").next().unwrap();
                    first
                        .split('`')
                        .skip(1)
                        .step_by(2)
                        .map(|n| n.trim_end_matches('/').to_string())
                        .collect::<Vec<_>>()
                })
                .collect();
            (crate_name, names)
        })
        .collect()
}

#[test]
fn every_top_level_module_of_every_crate_is_named_in_the_architecture_doc() {
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).unwrap();
    let sections = documented(&doc);
    let mut crates: Vec<String> = std::fs::read_dir(repo().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    crates.sort();
    assert!(crates.len() >= 3, "crates found: {crates:?}");
    let mut problems = Vec::new();
    for krate in &crates {
        let src = repo().join("crates").join(krate).join("src");
        let mut modules = declared(&src.join("lib.rs"));
        modules.extend(declared(&src.join("main.rs")));
        assert!(!modules.is_empty(), "crates/{krate}: no modules found");
        let Some((_, names)) = sections.iter().find(|(c, _)| c == krate) else {
            problems.push(format!("crates/{krate}: no \"### `crates/{krate}`\" table"));
            continue;
        };
        for m in modules.difference(names) {
            problems.push(format!("crates/{krate}: module `{m}` is not in the table"));
        }
        for n in names.difference(&modules) {
            problems.push(format!(
                "crates/{krate}: the table names `{n}`, which is no module"
            ));
        }
    }
    for (c, _) in &sections {
        if !crates.contains(c) {
            problems.push(format!("a table for crates/{c}, which does not exist"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_parser_reads_folders_lists_and_parentheses() {
    let doc = "x\n## Code layout\n\n### `crates/a`\n\n| module | what |\n|---|---|\n\
               | `b/` | x |\n| `c`, `d` (in `e`) | y |\n\n## Next\n| `f` | z |\n";
    let s = documented(doc);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].0, "a");
    let want: BTreeSet<String> = ["b", "c", "d"].map(String::from).into();
    assert_eq!(s[0].1, want);
}
