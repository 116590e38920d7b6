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
    #[command(flatten)]
    pub broker: BrokerArgs,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub vhost: String,
    pub version: Option<String>,
    pub queues: Vec<QueueReport>,
    pub hazards: Vec<Finding>,
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
        reports.push(Report { vhost, version: live.version.clone(), queues, hazards });
    }
    match format {
        Format::Json => output::json(&reports)?,
        Format::Table => output::print(&reports.iter().map(render).collect::<Vec<_>>().join("\n"))?,
    }
    Ok(if reports.iter().all(|r| r.hazards.is_empty()) { Exit::Ok } else { Exit::Drift })
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
    let mut lines = vec![format!("vhost {} (RabbitMQ {})", r.vhost, r.version.as_deref().unwrap_or("version unknown"))];
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
