//! `hopper inspect`: the live vhost as the broker sees it. Per queue: messages, consumers, the
//! effective TTL, dead-letter exchange and limits after policies, and where each kind of death
//! really goes, hop by hop; then every hazard, worst first. Works on any queue, hopper's or not.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde::Serialize;

use super::{BrokerArgs, SpecArgs};
use crate::Exit;
use crate::broker::http;
use crate::compile::compile;
use crate::hazard::{self, Finding};
use crate::network::{DeadLetter, End, Network, Path, Reason};
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
    /// The vhost to inspect [default: "/", or the spec's].
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub vhost: Option<String>,
    /// Only this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Summarise the dead letters in --queue from their x-death headers, by peeking at them
    /// (read and given back, never consumed); refused where a peek could lose a message.
    #[arg(long, requires = "queue")]
    pub dead_letters: bool,
    /// Peek at most this many messages.
    #[arg(long, default_value_t = 1000, requires = "dead_letters")]
    pub peek_limit: usize,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub vhost: String,
    pub version: Option<String>,
    pub queues: Vec<QueueReport>,
    pub hazards: Vec<Finding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letters: Option<DeadLetterSummary>,
}

/// The dead letters of one queue, grouped by where and why they first died.
#[derive(Debug, Serialize)]
pub struct DeadLetterSummary {
    pub queue: String,
    pub peeked: usize,
    /// What the peek did to the messages, plainly.
    pub effect: String,
    pub groups: Vec<Group>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    pub first_death_queue: String,
    pub first_death_reason: String,
    pub messages: usize,
    /// Seconds since the epoch of the oldest and newest first deaths in the group.
    pub oldest: Option<u64>,
    pub newest: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct QueueReport {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub ready: Option<u64>,
    pub unacked: Option<u64>,
    pub consumers: Option<u64>,
    /// Each setting that decides where messages go, with where its value comes from.
    pub effective: BTreeMap<&'static str, Setting>,
    /// For each way this queue can dead-letter, where the message goes.
    pub dead_letters: BTreeMap<&'static str, Path>,
}

#[derive(Debug, Serialize)]
pub struct Setting {
    pub value: crate::model::ArgValue,
    pub source: Source,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    // Which vhosts, and which queues in them.
    let mut scopes: Vec<(String, Option<BTreeSet<String>>)> = Vec::new();
    if args.specs.is_empty() {
        scopes.push((args.vhost.clone().unwrap_or_else(|| "/".into()), None));
    } else {
        let spec_args = SpecArgs { specs: args.specs.clone(), vhost: args.vhost.clone() };
        let spec = match spec_args.load()? {
            Ok(spec) => spec,
            Err(exit) => return Ok(exit),
        };
        let compiled = compile(&spec);
        for (vhost, topologies) in super::by_vhost(&compiled) {
            let names = crate::plan::desired(&topologies)
                .into_iter()
                .filter_map(|o| if let crate::model::Object::Queue(q) = o { Some(q.name) } else { None })
                .collect();
            scopes.push((vhost.to_string(), Some(names)));
        }
    }
    let endpoint = args.broker.endpoint()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut reports = Vec::new();
    for (vhost, names) in scopes {
        let live = match runtime.block_on(http::read(&endpoint, &vhost)) {
            Ok(live) => live,
            Err(e) => anyhow::bail!("hopper inspect reads the broker through the management API and cannot: {e:#}"),
        };
        let network = Network::from_live(&live);
        let selected = |q: &str| {
            args.queue.as_deref().is_none_or(|only| only == q) && names.as_ref().is_none_or(|n| n.contains(q))
        };
        if let Some(only) = &args.queue
            && !network.queues.contains_key(only)
        {
            anyhow::bail!("queue `{only}` does not exist in vhost `{vhost}`");
        }
        let hazards: Vec<Finding> =
            hazard::check(&network).into_iter().filter(|f| f.objects.iter().any(|o| selected(o))).collect();
        let queues = network.queues.keys().filter(|q| selected(q)).map(|q| queue_report(&network, q)).collect();
        let dead_letters = match (&args.queue, args.dead_letters) {
            (Some(queue), true) => {
                if let Some(refusal) = peek_refusal(&network, queue) {
                    anyhow::bail!("{refusal}");
                }
                let peeked = runtime.block_on(async {
                    let mut session = crate::broker::amqp::Session::connect(&endpoint, &vhost).await?;
                    let peeked = session.peek(queue, args.peek_limit).await;
                    session.close().await;
                    peeked
                })?;
                let quorum = network.queues[queue].quorum;
                Some(DeadLetterSummary {
                    queue: queue.clone(),
                    peeked: peeked.len(),
                    effect: peek_effect(quorum),
                    groups: summarize(&peeked),
                })
            }
            _ => None,
        };
        reports.push(Report { vhost, version: live.version.clone(), queues, hazards, dead_letters });
    }
    match format {
        Format::Json => output::json(&reports)?,
        Format::Table => output::print(&reports.iter().map(render).collect::<Vec<_>>().join("\n"))?,
    }
    if args.dead_letters {
        return Ok(Exit::Ok); // a summary, not a check
    }
    Ok(if reports.iter().all(|r| r.hazards.is_empty()) { Exit::Ok } else { Exit::Drift })
}

/// Why peeking at `queue` could lose a message, if it could. A peek gives every message back;
/// on a quorum queue each return counts as a delivery (RabbitMQ 4.0 to 4.2), so a reachable
/// delivery limit would dead-letter or drop messages.
pub fn peek_refusal(n: &Network, queue: &str) -> Option<String> {
    let q = n.queues.get(queue)?;
    let limit = n.delivery_limit(queue)?;
    if !q.quorum || limit >= 10_000 {
        return None;
    }
    let then = match n.text(queue, "dead-letter-exchange") {
        Some(x) => format!("dead-lettered to `{x}`"),
        None => "dropped".to_string(),
    };
    Some(format!(
        "not peeking at `{queue}`: it is a quorum queue with a delivery limit of {limit}, and every message a peek gives back counts as a delivery, so messages near the limit would be {then}. Read it with a consumer that acks, or move its messages to a queue without a reachable limit first"
    ))
}

pub fn peek_effect(quorum: bool) -> String {
    let order = if quorum {
        "go back to the head of the queue in their original order"
    } else {
        "go back to their original positions"
    };
    let count = if quorum { "; each counts one more delivery (x-delivery-count)" } else { "" };
    format!(
        "read with basic.get and given back unacknowledged: none was consumed; they {order}, and are marked redelivered{count}"
    )
}

/// Dead letters grouped by the queue and reason of their first death. Pure.
pub fn summarize(peeked: &[crate::broker::amqp::Peeked]) -> Vec<Group> {
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    for p in peeked {
        let queue = p.first_death_queue.clone().or_else(|| p.deaths.last().map(|d| d.queue.clone()));
        let reason = p.first_death_reason.clone().or_else(|| p.deaths.last().map(|d| d.reason.clone()));
        let (queue, reason) = (queue.unwrap_or_else(|| "(none)".into()), reason.unwrap_or_else(|| "(none)".into()));
        let time = p.deaths.iter().find(|d| d.queue == queue && d.reason == reason).and_then(|d| d.time);
        let g = groups.entry((queue.clone(), reason.clone())).or_insert(Group {
            first_death_queue: queue,
            first_death_reason: reason,
            messages: 0,
            oldest: None,
            newest: None,
        });
        g.messages += 1;
        if let Some(t) = time {
            g.oldest = Some(g.oldest.map_or(t, |o| o.min(t)));
            g.newest = Some(g.newest.map_or(t, |n| n.max(t)));
        }
    }
    let mut out: Vec<Group> = groups.into_values().collect();
    out.sort_by_key(|g| std::cmp::Reverse(g.messages));
    out
}

fn queue_report(n: &Network, name: &str) -> QueueReport {
    let q = &n.queues[name];
    let effective = q
        .effective
        .iter()
        .map(|(k, e)| (*k, Setting { value: e.value.clone(), source: e.source, policy: e.policy.clone() }))
        .collect();
    let dead_letters =
        Reason::ALL.iter().filter(|r| n.can_dead_letter(name, **r)).map(|r| (r.as_str(), n.path(name, *r))).collect();
    QueueReport {
        name: name.to_string(),
        kind: if q.quorum { "quorum" } else { "classic" },
        ready: q.ready,
        unacked: q.unacked,
        consumers: q.consumers,
        effective,
        dead_letters,
    }
}

fn render(r: &Report) -> String {
    let count = |n: Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
    let mut lines = vec![format!(
        "vhost {} (RabbitMQ {}; message and consumer counts as the management API last sampled them, a few seconds old)",
        r.vhost,
        r.version.as_deref().unwrap_or("version unknown")
    )];
    for q in &r.queues {
        lines.push(format!(
            "\nqueue {}  {}, {} ready, {} unacked, {} consumer(s)",
            q.name,
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
            lines.push(format!("  {}", settings.join(", ")));
        }
        for (reason, path) in &q.dead_letters {
            lines.push(format!("  {reason:<14} {}", describe_path(path)));
        }
    }
    if let Some(d) = &r.dead_letters {
        lines.push(format!("\ndead letters in {} ({} peeked: {})", d.queue, d.peeked, d.effect));
        let mut table = output::table(&["first died in", "reason", "messages", "oldest", "newest"]);
        let time = |t: Option<u64>| {
            t.map_or("?".to_string(), |t| {
                humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t)).to_string()
            })
        };
        for g in &d.groups {
            table.add_row(vec![
                g.first_death_queue.clone(),
                g.first_death_reason.clone(),
                g.messages.to_string(),
                time(g.oldest),
                time(g.newest),
            ]);
        }
        lines.push(table.to_string());
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
                let via = if exchange.is_empty() { "default exchange".to_string() } else { exchange.clone() };
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
        End::RetriedForever { queue } => format!(": STUCK in {queue}, retried forever"),
        End::Duplicated { queues } => format!(": DUPLICATED to {}", queues.join(", ")),
        End::Unknown { why } => format!(": unknown ({why})"),
    };
    format!("{}{end}", s.trim_start())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::amqp::{Death, Peeked};

    fn message(first: (&str, &str), time: u64) -> Peeked {
        Peeked {
            first_death_queue: Some(first.0.into()),
            first_death_reason: Some(first.1.into()),
            deaths: vec![Death { queue: first.0.into(), reason: first.1.into(), count: 1, time: Some(time) }],
            redelivered: false,
        }
    }

    #[test]
    fn dead_letters_group_by_first_death_with_oldest_and_newest() {
        let groups = summarize(&[
            message(("orders", "rejected"), 300),
            message(("orders", "rejected"), 100),
            message(("orders", "delivery_limit"), 200),
        ]);
        assert_eq!(
            groups,
            vec![
                Group {
                    first_death_queue: "orders".into(),
                    first_death_reason: "rejected".into(),
                    messages: 2,
                    oldest: Some(100),
                    newest: Some(300)
                },
                Group {
                    first_death_queue: "orders".into(),
                    first_death_reason: "delivery_limit".into(),
                    messages: 1,
                    oldest: Some(200),
                    newest: Some(200)
                },
            ]
        );
    }
}
