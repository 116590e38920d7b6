//! `hopper contract`: what a consumer must do when a message fails, attempt by attempt.

use anyhow::Result;

use super::SpecArgs;
use crate::Exit;
use crate::contract::{AttemptSource, Contract, contract};
use crate::output::{self, Format};

/// Print the consumer contract of each topology.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  hopper contract topologies/ --format json > contract.json")]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    let spec = args.spec.load()?;
    let contracts: Vec<_> = spec.topologies().map(contract).collect();
    if format == Format::Json {
        output::listing("contracts", &contracts)?;
        return Ok(Exit::Ok);
    }
    for c in &contracts {
        let queues: Vec<_> = c.consume.iter().map(|q| q.queue.as_str()).collect();
        let attempt_from = match &c.attempt_from {
            AttemptSource::Header { header } => format!("header `{header}` (absent = 1)"),
            AttemptSource::Queue => "the queue it came from".to_string(),
            AttemptSource::DeliveryCount { header } => format!("header `{header}` + 1 (absent = 1)"),
        };
        output::print(&format!(
            "topology {} (vhost {}): consume {}; attempt number from {attempt_from}; acks manual, messages persistent",
            c.topology,
            c.vhost,
            queues.join(", ")
        ))?;
        let mut table = output::table(&["attempt", "delivered from", "on failure", "message goes to"]);
        for rule in &c.attempts {
            let from =
                c.consume.iter().find(|q| q.attempt.is_none_or(|a| a == rule.attempt)).map_or("", |q| q.queue.as_str());
            let goes = match &rule.retry {
                Some(r) => format!("{} for {}, then {}", r.wait_queue, r.delay, r.redelivered_from),
                None => format!("{} (dead-letter queue)", rule.on_failure.reaches()),
            };
            table.add_row(vec![rule.attempt.to_string(), from.to_string(), rule.on_failure.describe(), goes]);
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
