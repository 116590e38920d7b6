//! The book's reference tables are made from the definitions the code uses, never written a
//! second time by hand: the spec's keys (`hopper::spec::keys`), the connection settings
//! (`hopper::config::Setting`), each command's options (clap). Each table sits in its page
//! between `<!-- generated: NAME -->` and `<!-- end generated -->`; this test fails when a page
//! disagrees with the code, and `HOPPER_BLESS=1 cargo nextest run --test integration reference`
//! writes the tables anew.

use std::fmt::Write as _;
use std::path::Path;

use clap::CommandFactory;
use hopper::config::Setting;
use hopper::spec::keys::{self, Value};

/// Checks (or, with HOPPER_BLESS=1, writes) the part of `page` named `name`.
fn generated(page: &str, name: &str, made: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(page);
    let text = std::fs::read_to_string(&path).unwrap();
    let begin = format!("<!-- generated: {name} -->\n");
    let end = "<!-- end generated -->";
    let start = text.find(&begin).unwrap_or_else(|| panic!("{page} has no `{}`", begin.trim_end())) + begin.len();
    let stop = start + text[start..].find(end).unwrap_or_else(|| panic!("{page}: `{name}` is not closed by `{end}`"));
    if text[start..stop] == *made {
        return;
    }
    if std::env::var_os("HOPPER_BLESS").is_some() {
        std::fs::write(&path, format!("{}{made}{}", &text[..start], &text[stop..])).unwrap();
        return;
    }
    panic!(
        "{page}'s `{name}` is not what the code defines; run HOPPER_BLESS=1 cargo nextest run --test integration reference\n--- page\n{}\n--- code\n{made}",
        &text[start..stop]
    );
}

/// A key's type as the book's table says it.
fn type_of(value: Value) -> String {
    match value {
        Value::String | Value::Choice(_) => "string".into(),
        Value::Integer { min, max: Some(max) } => format!("integer {min}..={max}"),
        Value::Integer { min, max: None } => format!("integer >= {min}"),
        Value::Number { min, max: Some(max) } => format!("number {min}..={max}"),
        Value::Number { min, max: None } => format!("number >= {min}"),
        Value::Duration => "duration".into(),
        Value::Durations => "array of durations".into(),
        Value::Strings => "array of strings".into(),
        Value::Table(_) => "table".into(),
        Value::IdempotencyKey => "string or table".into(),
    }
}

#[test]
fn the_spec_keys_table_is_the_parsers() {
    let mut table = String::from("| key | type | default | meaning |\n|---|---|---|---|\n");
    for key in keys::TOPOLOGY {
        let default = if key.default.is_empty() { "none" } else { key.default };
        writeln!(table, "| `{}` | {} | {default} | {} |", key.name, type_of(key.value), key.meaning).unwrap();
    }
    generated("docs/spec.md", "spec keys", &table);
}

#[test]
fn the_connection_table_is_the_settings() {
    let mut table =
        String::from("| setting | flag | environment | config file key | default |\n|---|---|---|---|---|\n");
    let code = |s: Option<&str>| s.map_or(String::new(), |s| format!("`{s}`"));
    for setting in Setting::ALL {
        writeln!(
            table,
            "| {} | {} | {} | {} | {} |",
            setting.meaning(),
            code(setting.flag()),
            code(setting.variable()),
            code(setting.key()),
            setting.default()
        )
        .unwrap();
    }
    generated("docs/connection.md", "connection settings", &table);
}

/// Every command's usage and options, as `--help` prints them, in one place of the book.
#[test]
fn the_command_reference_is_the_command_lines() {
    let mut cli = hopper::commands::Cli::command();
    cli.build();
    let mut text = String::from("## Global options\n\nBefore or after the command.\n\n");
    arguments(cli.get_arguments().filter(|a| a.is_global_set()), &mut text);
    // The broker's options are the same on every command that reaches a broker: listed once.
    let apply = cli.find_subcommand("apply").unwrap();
    let flags: Vec<String> =
        apply.get_arguments().filter(|a| is_broker(a)).filter_map(|a| a.get_long()).map(|l| format!("--{l}")).collect();
    let settings: Vec<&str> = Setting::ALL.iter().filter_map(|s| s.flag()).filter(|f| *f != "--vhost").collect();
    assert_eq!(flags, settings, "the broker flags are the settings' flags, in their order");
    text.push_str("## Broker options\n\nOn every command that reaches a broker ([Connection, TLS and contexts](connection.md)).\n\n");
    arguments(apply.get_arguments().filter(|a| is_broker(a)), &mut text);
    reference(&cli, "hopper", &mut text);
    generated("docs/command-reference.md", "command reference", &text);
}

fn reference(command: &clap::Command, path: &str, out: &mut String) {
    for sub in command.get_subcommands().filter(|c| c.get_name() != "help" && !c.is_hide_set()) {
        let path = format!("{path} {}", sub.get_name());
        if sub.has_subcommands() {
            reference(sub, &path, out);
            continue;
        }
        writeln!(out, "## `{path}`\n").unwrap();
        if let Some(about) = sub.get_about() {
            writeln!(out, "{}\n", outside_code(&about.to_string())).unwrap();
        }
        let usage = sub.clone().bin_name(&path).render_usage().to_string();
        writeln!(out, "```text\n{}\n```\n", usage.trim_start_matches("Usage: ")).unwrap();
        if sub.get_arguments().any(is_broker) {
            writeln!(out, "With the [broker options](#broker-options).\n").unwrap();
        }
        arguments(sub.get_arguments().filter(|a| !a.is_global_set() && !is_broker(a)), out);
    }
}

/// Help text as Markdown shows it: `<` and `>` outside code spans are text, not HTML tags.
fn outside_code(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 1 { part.to_string() } else { part.replace('<', "&lt;").replace('>', "&gt;") })
        .collect::<Vec<_>>()
        .join("`")
}

fn is_broker(arg: &clap::Arg) -> bool {
    arg.get_help_heading() == Some("Broker")
}

fn arguments<'a>(args: impl Iterator<Item = &'a clap::Arg>, out: &mut String) {
    let args: Vec<_> =
        args.filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version")).collect();
    if args.is_empty() {
        return;
    }
    writeln!(out, "| argument | meaning |\n|---|---|").unwrap();
    for arg in args {
        let takes_values = arg.get_action().takes_values();
        let value = arg.get_value_names().map_or_else(|| arg.get_id().to_string().to_uppercase(), |v| v[0].to_string());
        let name = match (arg.get_long(), arg.get_short()) {
            (Some(long), Some(short)) => format!("`-{short}`, `--{long}`"),
            (Some(long), None) => format!("`--{long}`"),
            (None, Some(short)) => format!("`-{short}`"),
            (None, None) => format!("`{value}`"),
        };
        let value = if takes_values && (arg.get_long().is_some() || arg.get_short().is_some()) {
            format!(" `{value}`")
        } else {
            String::new()
        };
        let help = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default();
        let help = outside_code(&help.replace("\n\n", " ").replace('\n', " ").replace('|', "\\|"));
        let possible: Vec<_> = arg.get_possible_values().iter().map(|v| format!("`{}`", v.get_name())).collect();
        let possible = if takes_values && !possible.is_empty() {
            format!(" One of {}.", possible.join(", "))
        } else {
            String::new()
        };
        let stop = if possible.is_empty() || help.ends_with('.') { "" } else { "." };
        writeln!(out, "| {name}{value} | {help}{stop}{possible} |").unwrap();
    }
    writeln!(out).unwrap();
}
