//! Release artefacts generated from the CLI itself: shell completions and the man page.

use std::process::Command;

use crate::support::relay::binary;

fn run(args: &[&str]) -> String {
    let out = Command::new(binary())
        .args(args)
        .output()
        .expect("run outbox-relay");
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn completions_cover_every_subcommand_and_are_valid_shell() {
    let bash = run(&["completions", "bash"]);
    for sub in [
        "run",
        "setup",
        "status",
        "check-config",
        "completions",
        "manpage",
        "apply",
        "redrive",
        "republish",
    ] {
        assert!(bash.contains(sub), "bash completion lacks {sub}");
    }
    assert!(bash.contains("--recreate-slot"), "flags of subcommands");
    assert!(bash.contains("--heal-margin-ms"), "flags of subcommands");
    let path = std::env::temp_dir().join(format!("outbox-relay-{}.bash", std::process::id()));
    std::fs::write(&path, &bash).unwrap();
    let syntax = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    std::fs::remove_file(&path).ok();
    assert!(syntax.status.success(), "bash -n: {syntax:?}");
    for shell in ["zsh", "fish"] {
        assert!(
            run(&["completions", shell]).contains("check-config"),
            "{shell}"
        );
    }
}

#[test]
fn the_man_page_is_roff_and_names_the_subcommands() {
    let man = run(&["manpage"]);
    assert!(man.contains(".TH outbox-relay 1"), "{man}");
    for sub in ["run", "setup", "status", "check\\-config"] {
        assert!(man.contains(sub), "man page lacks {sub}");
    }
}
