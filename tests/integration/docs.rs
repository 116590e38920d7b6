//! The two front doors: a README of at most 400 lines that leads to the book under `docs/`, and
//! a book whose every page is in its summary, whose every link resolves, which names every
//! command, and which shows the example consumer the tests run by including the file itself.

use std::path::{Path, PathBuf};

use clap::CommandFactory;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every page of the book (`docs/*.md`, the summary included), by path, in name order.
fn pages() -> Vec<(PathBuf, String)> {
    let mut pages: Vec<(PathBuf, String)> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect();
    pages.sort();
    pages
}

/// The text outside code blocks and code spans: what a reader sees as prose and links.
fn prose(text: &str) -> String {
    let code_span = regex_lite::Regex::new("`[^`]*`").unwrap();
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(&code_span.replace_all(line, ""));
            out.push('\n');
        }
    }
    out
}

/// A heading's id as mdBook makes it: lower case, spaces to `-`, other punctuation dropped.
fn heading_id(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

fn heading_ids(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut ids = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            ids.push(heading_id(line.trim_start_matches('#').trim()));
        }
    }
    ids
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 400, "README.md has {lines} lines; the depth belongs in the book under docs/");
    assert!(readme.contains("](docs/SUMMARY.md)"), "the README leads to the book");
}

/// Every page is in the summary once, and the summary names no page that is not there.
#[test]
fn the_summary_lists_every_page_once() {
    let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).unwrap();
    let link = regex_lite::Regex::new(r"\]\(([^)]+\.md)\)").unwrap();
    let mut listed: Vec<String> = link.captures_iter(&summary).map(|c| c[1].to_string()).collect();
    let count = listed.len();
    listed.sort();
    listed.dedup();
    assert_eq!(listed.len(), count, "a page is listed twice in docs/SUMMARY.md");
    let mut pages: Vec<String> = pages()
        .into_iter()
        .map(|(p, _)| p.file_name().unwrap().to_str().unwrap().to_string())
        .filter(|name| name != "SUMMARY.md")
        .collect();
    pages.sort();
    assert_eq!(listed, pages, "docs/SUMMARY.md and the pages in docs/");
}

/// Every link of the README and of the book that points inside the repository reaches a file
/// that exists, and a heading of it when it names one.
#[test]
fn every_link_resolves() {
    let link = regex_lite::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut files = vec![(root().join("README.md"), std::fs::read_to_string(root().join("README.md")).unwrap())];
    files.extend(pages());
    let mut checked = 0;
    for (file, text) in &files {
        for target in link.captures_iter(&prose(text)).map(|c| c[1].to_string()) {
            if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let linked = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            assert!(linked.exists(), "{}: the link to {target} leads nowhere", file.display());
            if let Some(anchor) = anchor {
                let ids = heading_ids(&std::fs::read_to_string(&linked).unwrap());
                assert!(ids.iter().any(|id| id == anchor), "{}: {target}: no such heading in {ids:?}", file.display());
            }
            checked += 1;
        }
    }
    assert!(checked > 40, "only {checked} links found: is the link pattern right?");
}

/// The consumer contract's page shows `examples/retry_consumer.rs` by including it, so the
/// book always shows the consumer the tests run.
#[test]
fn the_consumer_page_includes_the_tested_example() {
    let page = std::fs::read_to_string(root().join("docs/consumer.md")).unwrap();
    assert!(page.contains("```rust\n{{#include ../examples/retry_consumer.rs}}\n```"), "docs/consumer.md");
    assert!(root().join("examples/retry_consumer.rs").exists());
}

/// The commands page names every command the command line has.
#[test]
fn every_command_is_on_the_commands_page() {
    let page = std::fs::read_to_string(root().join("docs/commands.md")).unwrap();
    let cli = hopper::commands::Cli::command();
    let names: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).filter(|n| *n != "help").collect();
    assert!(names.len() >= 14, "{names:?}");
    for name in names {
        assert!(page.contains(&format!("`hopper {name}")), "docs/commands.md does not name `hopper {name}`");
    }
}
