//! The repository's documents link only to what exists.
//!
//! Every relative link in `README.md`, `BENCHMARKS.md`, `CHANGELOG.md` and the
//! Markdown files under `docs/` must name a file of the repository, and a
//! `#fragment` must name a heading of the linked Markdown file (GitHub's
//! anchors: lowercase, punctuation dropped, spaces to dashes). So a renamed
//! section or a moved page fails here, naming the document and the link,
//! instead of leaving a newcomer at a dead end. Links outside the repository
//! (`http`, `https`, `mailto`) are not followed.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documents checked, relative to the repository root.
fn documents() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = ["README.md", "BENCHMARKS.md", "CHANGELOG.md"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let mut directories = vec![PathBuf::from("docs")];
    while let Some(directory) = directories.pop() {
        let entries = std::fs::read_dir(repository().join(&directory))
            .unwrap_or_else(|error| panic!("cannot list {}: {error}", directory.display()));
        for entry in entries {
            let path = directory.join(entry.unwrap().file_name());
            if repository().join(&path).is_dir() {
                directories.push(path);
            } else if path.extension().is_some_and(|extension| extension == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut inside_fence = false;
    let mut kept = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside_fence = !inside_fence;
        } else if !inside_fence {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// GitHub's anchor for a heading's text.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|character| character.is_alphanumeric() || matches!(character, '-' | '_' | ' '))
        .map(|character| if character == ' ' { '-' } else { character })
        .collect()
}

fn anchors_of(text: &str) -> BTreeSet<String> {
    prose(text)
        .lines()
        .filter(|line| line.starts_with('#'))
        .map(|line| anchor(line.trim_start_matches('#')))
        .collect()
}

/// The targets of `[text](target)` links.
fn links_of(text: &str) -> Vec<String> {
    let prose = prose(text);
    prose
        .match_indices("](")
        .filter_map(|(index, _)| {
            let rest = &prose[index + 2..];
            rest.find(')').map(|end| rest[..end].to_string())
        })
        .filter(|target| !target.contains(char::is_whitespace))
        .collect()
}

/// `base/relative` with `.` and `..` resolved, relative to the repository.
fn resolve(base: &Path, relative: &str) -> PathBuf {
    let mut resolved = PathBuf::new();
    for component in base.join(relative).components() {
        match component {
            Component::ParentDir => {
                resolved.pop();
            }
            Component::CurDir => {}
            other => resolved.push(other),
        }
    }
    resolved
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for document in documents() {
        let text = std::fs::read_to_string(repository().join(&document)).unwrap();
        let directory = document.parent().unwrap_or(Path::new(""));
        for link in links_of(&text) {
            if ["http://", "https://", "mailto:"]
                .iter()
                .any(|scheme| link.starts_with(scheme))
            {
                continue;
            }
            let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                document.clone()
            } else {
                resolve(directory, path)
            };
            if target.starts_with("..") || !repository().join(&target).exists() {
                broken.push(format!("{}: {link} (no such file)", document.display()));
                continue;
            }
            let is_markdown = target
                .extension()
                .is_some_and(|extension| extension == "md");
            if !fragment.is_empty() && is_markdown {
                let linked = std::fs::read_to_string(repository().join(&target)).unwrap();
                if !anchors_of(&linked).contains(fragment) {
                    broken.push(format!("{}: {link} (no such heading)", document.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_github() {
    assert_eq!(
        anchor(" `tailguard frontier`: the read/write trade-off"),
        "tailguard-frontier-the-readwrite-trade-off"
    );
    assert_eq!(
        anchor("Block devices (`--allow-device`)"),
        "block-devices---allow-device"
    );
    assert_eq!(
        links_of("see [a](b.md#c) and [d](https://e)\n```\n[f](g)\n```\n"),
        vec!["b.md#c".to_string(), "https://e".to_string()]
    );
}
