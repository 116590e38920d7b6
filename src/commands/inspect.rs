//! `hopper inspect`: the live vhost as the broker sees it, and every hazard.

use std::collections::BTreeSet;

use anyhow::Result;

use super::{BrokerArgs, SpecArgs};
use crate::Exit;
use crate::live::Placement;
use crate::model::QueueName;
use crate::network::{DeadLetter, End, Path};
use crate::ops::inspect::{Report, Request, Scope};
use crate::ops::{self};
use crate::output::{self, Format};
use crate::policy::Source;

/// Show where messages go on the live broker, and every hazard; exit 1 if any.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hopper inspect --vhost /                 every queue of a vhost
  hopper inspect --vhost / --queue orders  one queue, hopper's or not
  hopper inspect topologies/               the queues of a spec's topologies
  hopper inspect --vhost / --format json")]
pub struct Args {
    /// Restrict to the queues of these spec files' topologies (and their vhosts).
    #[arg(value_name = "SPEC")]
    pub specs: Vec<std::path::PathBuf>,
    /// The vhost to inspect [default: the spec's, else the context's, else "/"].
    #[arg(long, value_parser = super::vhost_name)]
    pub vhost: Option<String>,
    /// Only this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Summarise the dead letters in --queue from their x-death headers, by peeking at them
    /// (read and given back, never consumed); refused where a peek could lose a message. The
    /// queue's hazards are judged as without it (exit 1 if any).
    #[arg(long, requires = "queue")]
    pub dead_letters: bool,
    /// Peek at most this many messages.
    #[arg(long, default_value_t = 1000, requires = "dead_letters")]
    pub peek_limit: usize,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    // Which vhosts, and which queues in them.
    let mut scopes = Vec::new();
    let endpoint = args.broker.endpoint();
    if args.specs.is_empty() {
        let endpoint = endpoint.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        scopes.push(Scope { vhost: args.broker.vhost(args.vhost.as_deref(), endpoint)?, queues: None });
    } else {
        let spec_args = SpecArgs { specs: args.specs.clone(), vhost: args.vhost.clone() };
        let spec = spec_args.load_for(endpoint.as_ref().ok())?;
        for (vhost, topologies) in ops::by_vhost(&spec.compiled) {
            let names: BTreeSet<QueueName> = crate::plan::desired_queues(&topologies).into_iter().cloned().collect();
            scopes.push(Scope { vhost: vhost.to_string(), queues: Some(names) });
        }
    }
    let endpoint = endpoint?;
    let request = Request {
        scopes,
        queue: args.queue.as_deref().map(QueueName::from),
        peek: args.dead_letters.then_some(args.peek_limit),
    };
    let reports = ops::inspect::run(&endpoint, &request)?;
    match format {
        Format::Json => output::listing("vhosts", &reports)?,
        Format::Table => output::print(&reports.iter().map(render).collect::<Vec<_>>().join("\n"))?,
    }
    // With --dead-letters too: it prints the queue's hazards, so its exit code says so.
    Ok(if reports.iter().all(|r| r.hazards.is_empty()) { Exit::Ok } else { Exit::Drift })
}

fn render(r: &Report) -> String {
    let count = |n: Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
    let mut lines = vec![format!(
        "vhost {} (RabbitMQ {}; message and consumer counts as the management API last sampled them, a few seconds old)",
        output::safe(&r.vhost),
        r.version.as_deref().unwrap_or("version unknown")
    )];
    // Which nodes run and their alarms, and where each queue lives: for a cluster, or a node in
    // trouble (a single healthy broker would only repeat its own name).
    let cluster = r
        .nodes
        .as_ref()
        .is_some_and(|nodes| nodes.len() > 1 || nodes.iter().any(|n| !n.running || !n.alarms.is_empty()));
    if let Some(nodes) = r.nodes.as_ref().filter(|_| cluster) {
        let shown: Vec<String> = nodes
            .iter()
            .map(|n| {
                let state = if n.running { "running" } else { "STOPPED" };
                let alarms: Vec<String> =
                    n.alarms.iter().map(|a| format!("{} ALARM", a.as_str().to_uppercase())).collect();
                format!(
                    "{} ({state}{})",
                    output::safe(&n.name),
                    alarms.iter().map(|a| format!(", {a}")).collect::<String>()
                )
            })
            .collect();
        lines.push(format!("nodes: {}", shown.join(", ")));
    }
    for q in &r.queues {
        lines.push(format!(
            "\nqueue {}  {}, {} ready, {} unacked, {} consumer(s)",
            output::safe(&q.name),
            q.kind,
            count(q.ready),
            count(q.unacked),
            count(q.consumers)
        ));
        if !q.effective.is_empty() {
            let settings: Vec<String> = q
                .effective
                .iter()
                .map(|(k, s)| {
                    let from = match (&s.source, &s.policy) {
                        (Source::Policy, Some(p)) => format!(" (policy {p})"),
                        (Source::OperatorPolicy, Some(p)) => format!(" (operator policy {p})"),
                        _ => String::new(),
                    };
                    format!("{k}={}{from}", s.value)
                })
                .collect();
            lines.push(format!("  {}", output::safe(&settings.join(", "))));
        }
        match q.placement.as_ref().filter(|_| cluster) {
            Some(Placement::Quorum { leader, members }) => {
                let members: Vec<String> = members
                    .iter()
                    .map(|m| format!("{}{}", output::safe(&m.node), if m.online { "" } else { " (OFFLINE)" }))
                    .collect();
                lines.push(format!(
                    "  leader {}, members {}",
                    leader.as_deref().map_or("unknown".into(), output::safe),
                    members.join(", ")
                ));
            }
            Some(Placement::Classic { node, available }) => {
                let down = if *available { "" } else { " (DOWN: the queue is unavailable)" };
                lines.push(format!("  on node {}{down}", output::safe(node)));
            }
            None => {}
        }
        if !q.delayed_retry.is_empty() {
            let retry: Vec<String> = q.delayed_retry.iter().map(|(k, v)| format!("{k}={v}")).collect();
            lines.push(format!("  delayed retry: {}", retry.join(", ")));
        }
        for (reason, path) in &q.dead_letters {
            lines.push(format!("  {:<14} {}", reason.as_str(), output::safe(&describe_path(path))));
        }
    }
    if let Some(d) = &r.dead_letters {
        lines.push(format!("\ndead letters in {} ({} peeked: {})", output::safe(&d.queue), d.peeked, d.effect));
        lines.push(super::first_deaths(&d.groups));
        if d.without_message_id > 0 {
            lines.push(format!(
                "{} of them without a message id: a consumer cannot tell their duplicates from new messages, so a redrive may process them twice",
                d.without_message_id
            ));
        }
    }
    if !r.unclaimed.is_empty() {
        lines.push(format!("\n{} object(s) named as hopper names a topology's, claimed by no owner's record (left by an older hopper or made by hand: adopt them with a spec, or delete them by hand):", r.unclaimed.len()));
        lines.extend(r.unclaimed.iter().map(|u| format!("  {:<8} {}", u.kind.as_str(), output::safe(&u.name))));
    }
    if r.hazards.is_empty() {
        lines.push("\nNo hazard found.".into());
    } else {
        lines.push(format!("\n{} hazard(s), worst first:", r.hazards.len()));
        lines.extend(r.hazards.iter().map(|f| format!("  {}", super::lint::describe(f).replace('\n', "\n  "))));
    }
    lines.join("\n")
}

/// `-> orders.dlx "orders.dlq" -> orders.dlq: held there`
pub fn describe_path(p: &Path) -> String {
    let mut s = String::new();
    for (i, hop) in p.hops.iter().enumerate() {
        if i > 0 {
            s.push_str(&format!(" -> {} ({})", hop.queue, hop.reason.as_str()));
        }
        match &hop.dead_letter {
            DeadLetter::Routed { exchange, routing_key, .. } => {
                let via = if exchange.is_default() { "default exchange".to_string() } else { exchange.to_string() };
                let key = routing_key.as_ref().map(|k| format!(" \"{k}\"")).unwrap_or_default();
                s.push_str(&format!(" -> {via}{key}"));
            }
            DeadLetter::ExchangeMissing { exchange, .. } | DeadLetter::Unroutable { exchange, .. } => {
                s.push_str(&format!(" -> {exchange}"));
            }
            DeadLetter::Discarded => {}
        }
    }
    let end = match &p.end {
        End::Consumed { queue } => format!(" -> {queue}: delivered to its consumers"),
        End::Held { queue } => format!(" -> {queue}: held there until consumed"),
        End::Discarded { queue } => {
            format!(": discarded (`{queue}` has no dead-letter exchange; the consumer threw it away)")
        }
        End::Stranded { queue } => format!(" -> {queue}: STRANDED (no TTL, no consumer)"),
        End::Dropped { why } => format!(": DROPPED ({why})"),
        End::DroppedAsCycle { queue } => format!(
            ": DROPPED (it would reach `{queue}` again with no rejection in between: RabbitMQ drops it as a dead-letter cycle)"
        ),
        End::RetriedForever { queue } => format!(": STUCK in {queue}, retried forever"),
        End::Duplicated { queues } => {
            format!(": DUPLICATED to {}", queues.iter().map(QueueName::as_str).collect::<Vec<_>>().join(", "))
        }
        End::Unknown { why } => format!(": unknown ({why})"),
    };
    format!("{}{end}", s.trim_start())
}
