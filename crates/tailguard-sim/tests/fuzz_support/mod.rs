//! Structure-aware mutation of configuration texts for the parser fuzz tests.
//!
//! A case starts from one valid file (a scenario, a bench job, a fio job file,
//! a profile) and applies a few line-level edits that keep the file's shape
//! while breaking its meaning: lines deleted, duplicated or swapped, a value
//! replaced with an extreme one (0, -1, 1e300, 2^64-1, "1000t", empty
//! strings, NUL and newline bytes), random text inserted, the text truncated.
//! Plain random text covers inputs with no structure at all. Every input is
//! bounded in size, so a parser that takes longer than the watchdog's limit on
//! one is stuck, not slow.
//!
//! The same source file serves the simulator's, the library's and the
//! command's tests (included by `#[path]`), so all parsers meet the same
//! mutations. `PROPTEST_CASES=N` runs more cases and `PROPTEST_RNG_SEED=N`
//! others; CI runs [`CI_CASES`] from a fixed seed.

#![allow(dead_code)]

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use std::sync::mpsc;
use std::time::Duration;

/// Cases per fuzz test in CI: enough to reach every key of every base file
/// with several mutations, few enough for a few seconds in a debug build.
pub const CI_CASES: u32 = 384;

/// Longest a single parse may take before the case counts as a hang; far
/// above what any bounded input needs, even in a debug build on a busy
/// machine.
pub const HANG_LIMIT: Duration = Duration::from_secs(20);

/// Values that parsers tend to trust: zero, negatives, numbers beyond every
/// integer type, infinities, huge sizes, empty and control-character strings,
/// values of the wrong type. Quoted and bare forms both, since TOML, YAML and
/// fio files quote differently.
pub const EXTREME_VALUES: &[&str] = &[
    "0",
    "-1",
    "1e300",
    "-1e300",
    "1e-300",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "nan",
    "inf",
    "-inf",
    "1000t",
    "1000p",
    "99999999999999999999k",
    "\"1000t\"",
    "\"18446744073709551615\"",
    "\"-4096\"",
    "\"0\"",
    "\"1e300\"",
    "\"\"",
    "\"\\u0000\"",
    "\"a\\nb\"",
    "\"a\\u0000b\"",
    "\u{0}",
    "true",
    "[]",
    "{}",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    "0.5",
    "1:2",
    "-",
    "k",
];

/// One edit of a text, with positions taken modulo the text's size so that
/// every drawn edit applies.
#[derive(Debug, Clone)]
pub enum Mutation {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    /// Replaces what follows the first `=` or `:` of a line.
    ReplaceValue(usize, usize),
    /// Replaces a line's key (what precedes the first `=` or `:`) with the key
    /// of another line, so keys meet each other's values.
    ReplaceKey(usize, usize),
    InsertLine(usize, String),
    InsertText(usize, String),
    Truncate(usize),
}

fn short_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,24}",
        proptest::collection::vec(any::<char>(), 0..12).prop_map(String::from_iter),
        Just("\u{0}\n\u{0}".to_string()),
        Just("[".to_string()),
        Just("[[job]]".to_string()),
        Just("[global]".to_string()),
        Just("\"".to_string()),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let position = any::<usize>();
    prop_oneof![
        1 => position.prop_map(Mutation::DeleteLine),
        1 => position.prop_map(Mutation::DuplicateLine),
        1 => (position, position).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        3 => (position, 0..EXTREME_VALUES.len()).prop_map(|(l, v)| Mutation::ReplaceValue(l, v)),
        1 => (position, position).prop_map(|(a, b)| Mutation::ReplaceKey(a, b)),
        1 => (position, short_text()).prop_map(|(l, t)| Mutation::InsertLine(l, t)),
        1 => (position, short_text()).prop_map(|(p, t)| Mutation::InsertText(p, t)),
        1 => position.prop_map(Mutation::Truncate),
    ]
}

/// Where a line's value starts: after its first `=` or `:`.
fn separator(line: &str) -> Option<usize> {
    line.find(['=', ':'])
}

/// The lines that set a value: not comments, and with a separator.
fn settings(lines: &[String]) -> Vec<usize> {
    (0..lines.len())
        .filter(|&index| {
            let line = lines[index].trim_start();
            !line.starts_with(['#', ';']) && separator(line).is_some()
        })
        .collect()
}

fn pick(items: &[usize], position: usize) -> Option<&usize> {
    items.get(position % items.len().max(1))
}

/// The largest char boundary of `text` at or below `position % (len + 1)`.
fn boundary(text: &str, position: usize) -> usize {
    let mut at = position % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Applies `mutation` to `text`.
pub fn apply(text: &str, mutation: &Mutation) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let count = lines.len().max(1);
    match mutation {
        Mutation::DeleteLine(line) if !lines.is_empty() => {
            lines.remove(line % count);
        }
        Mutation::DuplicateLine(line) if !lines.is_empty() => {
            let copy = lines[line % count].clone();
            lines.insert(line % count, copy);
        }
        Mutation::SwapLines(a, b) if !lines.is_empty() => lines.swap(a % count, b % count),
        Mutation::ReplaceValue(line, value) => {
            if let Some(&index) = pick(&settings(&lines), *line) {
                let line = &mut lines[index];
                let at = separator(line).unwrap_or(line.len());
                line.truncate(at + 1);
                line.push(' ');
                line.push_str(EXTREME_VALUES[value % EXTREME_VALUES.len()]);
            }
        }
        Mutation::ReplaceKey(from, to) => {
            let settings = settings(&lines);
            if let (Some(&from), Some(&to)) = (pick(&settings, *from), pick(&settings, *to)) {
                let key = lines[from][..separator(&lines[from]).unwrap_or(0)].to_string();
                let target = &mut lines[to];
                let at = separator(target).unwrap_or(0);
                *target = format!("{key}{}", &target[at..]);
            }
        }
        Mutation::InsertLine(line, new) => lines.insert(line % (lines.len() + 1), new.clone()),
        Mutation::InsertText(position, new) => {
            let mut text = text.to_string();
            text.insert_str(boundary(&text, *position), new);
            return text;
        }
        Mutation::Truncate(position) => return text[..boundary(text, *position)].to_string(),
        _ => {}
    }
    let mut joined = lines.join("\n");
    joined.push('\n');
    joined
}

/// A text drawn from `bases` with one to six mutations applied.
pub fn mutated(bases: &'static [&'static str]) -> impl Strategy<Value = String> {
    (0..bases.len(), proptest::collection::vec(mutation(), 1..7)).prop_map(
        move |(base, mutations)| {
            mutations
                .iter()
                .fold(bases[base].to_string(), |text, m| apply(&text, m))
        },
    )
}

/// Text with no structure: printable ASCII, or any characters, NUL included.
pub fn random_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~\n]{0,400}",
        proptest::collection::vec(any::<char>(), 0..200).prop_map(String::from_iter),
    ]
}

/// The fuzz tests' configuration: [`CI_CASES`] cases from a fixed seed (the
/// environment's `PROPTEST_CASES` and `PROPTEST_RNG_SEED` override both), no
/// failure files, and a short shrink.
pub fn config() -> Config {
    Config {
        cases: CI_CASES,
        failure_persistence: None,
        max_shrink_iters: 512,
        rng_seed: RngSeed::Fixed(15),
        ..Config::default()
    }
}

/// Runs `parse` on `input` in a thread under [`HANG_LIMIT`] and returns its
/// result; a panic in the parser is raised again here (so proptest reports
/// and shrinks the input) and a parse that outlives the limit fails the case
/// as a hang.
pub fn parse_bounded<T: Send + 'static>(
    input: &str,
    parse: impl FnOnce(&str) -> T + Send + 'static,
) -> T {
    let owned = input.to_string();
    let (sender, receiver) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let result = parse(&owned);
        let _ = sender.send(());
        result
    });
    match receiver.recv_timeout(HANG_LIMIT) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("parser still running after {HANG_LIMIT:?} on {input:?}")
        }
    }
}
