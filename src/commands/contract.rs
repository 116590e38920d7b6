//! `hopper contract`: what a consumer must do when a message fails, attempt by attempt.

use std::path::PathBuf;

use anyhow::Result;

use super::SpecArgs;
use crate::Exit;
use crate::contract::{AttemptRule, AttemptSource, Contract, ContractChange, Part, changes, contract};
use crate::output::{self, Format};

/// Print the consumer contract of each topology, or what changes in it since another spec.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  hopper contract topologies/ --format json > contract.json\n  git show main:topologies/orders.toml > /tmp/orders.toml\n  hopper contract topologies/orders.toml --diff /tmp/orders.toml"
)]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Show what a consumer must do differently than under this earlier spec (files or
    /// directories), topology by topology; exit 1 when anything changes.
    #[arg(long, value_name = "EARLIER_SPEC", num_args = 1..)]
    pub diff: Vec<PathBuf>,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    let spec = args.spec.load()?;
    let contracts: Vec<_> = spec.topologies().map(contract).collect();
    if !args.diff.is_empty() {
        let earlier = SpecArgs { specs: args.diff.clone(), vhost: args.spec.vhost.clone() }.load()?;
        let earlier: Vec<_> = earlier.topologies().map(contract).collect();
        return diff(&earlier, &contracts, format);
    }
    if format == Format::Json {
        output::listing("contracts", &contracts)?;
        return Ok(Exit::Ok);
    }
    for c in &contracts {
        let queues: Vec<_> = c.consume.iter().map(|q| q.queue.as_str()).collect();
        let attempt_from = attempt_from(&c.attempt_from);
        output::print(&format!(
            "topology {} (vhost {}): consume {}; attempt number from {attempt_from}; acks manual, messages persistent",
            c.topology,
            c.vhost,
            queues.join(", ")
        ))?;
        let mut table = output::table(&["attempt", "delivered from", "on failure", "message goes to"]);
        for rule in &c.attempts {
            table.add_row(vec![
                rule.attempt.to_string(),
                from(c, rule).to_string(),
                rule.on_failure.describe(),
                goes(rule),
            ]);
        }
        table.add_row(vec![
            "poison".to_string(),
            "any".to_string(),
            c.poison.describe(),
            format!("{} (dead-letter queue)", c.poison.reaches()),
        ]);
        output::print(&table.to_string())?;
        if !c.delivery_counting.is_empty() {
            let mut lines = vec!["what counts toward a quorum queue's delivery limit:".to_string()];
            for d in &c.delivery_counting {
                let default = d.default_limit.map_or("none".to_string(), |n| n.to_string());
                let not =
                    if d.not_counted.is_empty() { String::new() } else { format!("; not counted: {}", d.not_counted) };
                lines.push(format!("  RabbitMQ {}: {} (default limit {default}){not}", d.releases, d.counted));
            }
            output::print(&lines.join("\n"))?;
        }
        output::print(&duplicates(c))?;
    }
    Ok(Exit::Ok)
}

/// The queue delivery number `rule.attempt` comes from.
fn from<'c>(c: &'c Contract, rule: &AttemptRule) -> &'c str {
    c.consume.iter().find(|q| q.attempt.is_none_or(|a| a == rule.attempt)).map_or("", |q| q.queue.as_str())
}

/// Where a message that failed goes.
fn goes(rule: &AttemptRule) -> String {
    match &rule.retry {
        Some(r) => format!("{} for {}, then {}", r.wait_queue, r.delay, r.redelivered_from),
        None => format!("{} (dead-letter queue)", rule.on_failure.reaches()),
    }
}

/// One topology's change, for `--format json`.
#[derive(serde::Serialize)]
struct Changed<'a> {
    vhost: &'a str,
    topology: &'a str,
    #[serde(flatten)]
    change: ContractChange,
}

/// What changes for consumers, topology by topology (by vhost and name).
fn diff(earlier: &[Contract], now: &[Contract], format: Format) -> Result<Exit> {
    let key = |c: &Contract| (c.vhost.clone(), c.topology.clone());
    let before: std::collections::BTreeMap<_, &Contract> = earlier.iter().map(|c| (key(c), c)).collect();
    let after: std::collections::BTreeMap<_, &Contract> = now.iter().map(|c| (key(c), c)).collect();
    let mut changed = Vec::new();
    for (k, c) in &after {
        let change = match before.get(k) {
            None => ContractChange::Added,
            Some(b) => match changes(b, c) {
                parts if parts.is_empty() => continue,
                parts => ContractChange::Changed { parts },
            },
        };
        changed.push(Changed { vhost: &k.0, topology: &k.1, change });
    }
    for k in before.keys().filter(|k| !after.contains_key(*k)) {
        changed.push(Changed { vhost: &k.0, topology: &k.1, change: ContractChange::Removed });
    }
    let exit = if changed.is_empty() { Exit::Ok } else { Exit::Drift };
    if format == Format::Json {
        output::listing("changes", &changed)?;
        return Ok(exit);
    }
    let mut lines = Vec::new();
    for c in &changed {
        let name = format!("topology {} (vhost {})", output::safe(c.topology), output::safe(c.vhost));
        match &c.change {
            ContractChange::Added => {
                lines.push(format!("{name}: new; its consumers follow `hopper contract` from the start"))
            }
            ContractChange::Removed => {
                lines.push(format!("{name}: no longer in the spec; apply --prune retires it once its queues are empty"))
            }
            ContractChange::Changed { parts } => {
                lines.push(format!("{name}: consumers must change"));
                lines.extend(parts.iter().flat_map(|p| part(p, after[&(c.vhost.to_string(), c.topology.to_string())])));
            }
        }
    }
    if changed.iter().any(|c| matches!(c.change, ContractChange::Changed { .. })) {
        lines.push("Retry keys the new contract no longer has stay routed to their wait queues until `hopper apply --consumers-upgraded`, so a consumer on the old contract loses nothing meanwhile.".to_string());
    }
    if changed.is_empty() {
        lines.push("No change for consumers.".to_string());
    }
    output::print(&lines.join("\n"))?;
    Ok(exit)
}

/// A changed part as `-` (before) and `+` (after) lines.
fn part(p: &Part, now: &Contract) -> Vec<String> {
    let pair = |what: &str, before: Option<String>, after: Option<String>| {
        let mut out = Vec::new();
        if let Some(b) = before {
            out.push(format!("  {} {what}: {}", output::paint("-", "31"), output::safe(&b)));
        }
        if let Some(a) = after {
            out.push(format!("  {} {what}: {}", output::paint("+", "32"), output::safe(&a)));
        }
        out
    };
    let queues =
        |qs: &[crate::contract::ConsumeQueue]| qs.iter().map(|q| q.queue.as_str()).collect::<Vec<_>>().join(", ");
    let rule = |r: &AttemptRule| format!("{}; goes to {}", r.on_failure.describe(), goes(r));
    match p {
        Part::Consume { before, after } => pair("consume", Some(queues(before)), Some(queues(after))),
        Part::AttemptFrom { before, after } => {
            pair("attempt number from", Some(attempt_from(before)), Some(attempt_from(after)))
        }
        Part::Attempt { attempt, before, after } => {
            let label = match after {
                Some(r) => format!("attempt {attempt} (from {})", from(now, r)),
                None => format!("attempt {attempt}"),
            };
            pair(&label, before.as_ref().map(rule), after.as_ref().map(rule))
        }
        Part::Poison { before, after } => pair("poison", Some(before.describe()), Some(after.describe())),
        Part::IdempotencyKey { before, after } => {
            pair("idempotency key", Some(before.describe()), Some(after.describe()))
        }
    }
}

fn attempt_from(a: &AttemptSource) -> String {
    match a {
        AttemptSource::Header { header } => format!("header `{header}` (absent = 1)"),
        AttemptSource::Queue => "the queue it came from".to_string(),
        AttemptSource::DeliveryCount { header } => format!("header `{header}` + 1 (absent = 1)"),
    }
}

/// Where a message can arrive twice, and the key that tells the copies apart.
fn duplicates(c: &Contract) -> String {
    let key = &c.idempotency_key;
    let stated = if key.stated {
        "named by the spec's idempotency_key"
    } else {
        "the spec does not say who sets it: set idempotency_key"
    };
    let mut lines = vec![
        format!(
            "duplicates: a message can be delivered more than once; handle each {} once ({stated})",
            key.key.describe()
        ),
        format!("  {}", key.rule),
    ];
    let mut table = output::table(&["delivered twice when", "the consumer then gets"]);
    for d in &c.duplicates {
        table.add_row(vec![d.cause.label(), d.then]);
    }
    lines.push(table.to_string());
    lines.join("\n")
}
