//! The CLI reference (`docs/reference/cli.md`) and the binary agree on
//! subcommands and options.
//!
//! Every subcommand `tailguard --help` lists has a section of its own.
//!
//! For each subcommand, the options its `--help` lists must each be named
//! (as `` `--option` `` or `--option` in text) in that subcommand's section of
//! the reference, or in its "Scheduler options" section for the subcommands
//! that take them; and every option the section's usage block names must be
//! one the subcommand accepts. So an option added without a line of docs, or
//! a documented option removed, fails here with the option's name.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const REFERENCE: &str = "docs/reference/cli.md";

/// Subcommands, and whether they take the shared scheduler options.
const SUBCOMMANDS: [(&str, bool); 6] = [
    ("sim", false),
    ("bench", true),
    ("tune", false),
    ("demo", true),
    ("frontier", true),
    ("clean", false),
];

fn reference() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(REFERENCE);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

/// The text of the `## ` section whose heading contains `title`, up to the
/// next `## ` heading.
fn section<'a>(reference: &'a str, title: &str) -> &'a str {
    let start = reference
        .match_indices("\n## ")
        .map(|(index, _)| index + 1)
        .find(|&index| reference[index..].lines().next().unwrap().contains(title))
        .unwrap_or_else(|| panic!("{REFERENCE} has no section {title}"));
    let rest = &reference[start + 3..];
    let end = rest.find("\n## ").map_or(rest.len(), |index| index + 1);
    &rest[..end]
}

/// Every `--option` token in `text` (letters, digits and dashes).
fn options_in(text: &str) -> BTreeSet<String> {
    let mut options = BTreeSet::new();
    let mut rest = text;
    while let Some(index) = rest.find("--") {
        let after = &rest[index + 2..];
        let name: String = after
            .chars()
            .take_while(|character| character.is_ascii_alphanumeric() || *character == '-')
            .collect();
        let preceded_by_dash = index > 0 && rest.as_bytes()[index - 1] == b'-';
        if !name.is_empty() && !preceded_by_dash && name.as_bytes()[0].is_ascii_lowercase() {
            options.insert(format!("--{name}"));
        }
        rest = &after[name.len()..];
    }
    options
}

/// The options `tailguard SUBCOMMAND --help` lists, `--help` itself left out.
fn accepted_options(subcommand: &str) -> BTreeSet<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_tailguard"))
        .args([subcommand, "--help"])
        .output()
        .expect("run tailguard");
    assert!(
        output.status.success(),
        "tailguard {subcommand} --help failed"
    );
    let help = String::from_utf8(output.stdout).unwrap();
    help.lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with('-'))
        .flat_map(|line| {
            let flags = line.split("  ").next().unwrap_or(line);
            options_in(flags)
        })
        .filter(|option| option != "--help")
        .collect()
}

/// The options named in the first ```text block of a section: its usage.
fn usage_options(section: &str) -> BTreeSet<String> {
    let block = section
        .split("```text")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap_or("");
    options_in(block)
}

/// The subcommands `tailguard --help` lists, `help` itself left out.
fn listed_subcommands() -> BTreeSet<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_tailguard"))
        .arg("--help")
        .output()
        .expect("run tailguard");
    assert!(output.status.success(), "tailguard --help failed");
    let help = String::from_utf8(output.stdout).unwrap();
    let commands = help
        .split("Commands:")
        .nth(1)
        .expect("tailguard --help lists its commands");
    commands
        .lines()
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(String::from)
        .collect()
}

#[test]
fn every_subcommand_is_checked_here_and_has_a_section() {
    let reference = reference();
    let checked: BTreeSet<String> = SUBCOMMANDS
        .iter()
        .map(|(name, _)| name.to_string())
        .collect();
    assert_eq!(
        listed_subcommands(),
        checked,
        "the subcommands of `tailguard --help` against this test's list (add a section \
         to {REFERENCE} and a line to SUBCOMMANDS)"
    );
    for name in checked {
        section(&reference, &format!("`tailguard {name}`"));
    }
}

#[test]
fn every_option_of_every_subcommand_is_documented() {
    let reference = reference();
    let shared = options_in(section(&reference, "Scheduler options"));
    for (subcommand, takes_scheduler_options) in SUBCOMMANDS {
        let own = section(&reference, &format!("`tailguard {subcommand}`"));
        let mut documented = options_in(own);
        if takes_scheduler_options {
            documented.extend(shared.iter().cloned());
        }
        for option in accepted_options(subcommand) {
            assert!(
                documented.contains(&option),
                "`tailguard {subcommand} {option}` is not documented in {REFERENCE}"
            );
        }
    }
}

#[test]
fn every_option_in_a_usage_block_exists() {
    let reference = reference();
    for (subcommand, _) in SUBCOMMANDS {
        let own = section(&reference, &format!("`tailguard {subcommand}`"));
        let usage = usage_options(own);
        assert!(!usage.is_empty(), "no usage block for {subcommand}");
        let accepted = accepted_options(subcommand);
        for option in usage {
            assert!(
                accepted.contains(&option),
                "{REFERENCE} shows `tailguard {subcommand} {option}`, which it does not accept"
            );
        }
    }
}

#[test]
fn the_option_scanner_finds_options_and_skips_prose() {
    let found = options_in("use `--mode M[,M...]` or --json; not ---x, nor --, nor --9");
    let expected: BTreeSet<String> = ["--mode", "--json"].map(String::from).into();
    assert_eq!(found, expected);
}
