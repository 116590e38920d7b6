//! `hopper diff`: the spec against the live broker, read through the management API. Changes
//! nothing. Exit 0 in sync, 1 drift, 2 error, as `diff` and `kubectl diff`.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use super::{BrokerArgs, SpecArgs};
use crate::Exit;
use crate::broker::{amqp, http};
use crate::compile::compile;
use crate::output::{self, Format};
use crate::plan::{self, Difference, Plan, Step};
use crate::policy::Source;

/// Compare the spec with the live broker; exit 1 if they differ.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hopper diff topologies/                      exit 0 in sync, 1 drift, 2 error
  hopper diff topologies/ --format json | jq '.vhosts[].objects[] | select(.status != \"in_sync\")'")]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

/// One object's state. `status` is `in_sync`, `missing` (apply creates it), `conflict` (an
/// argument that cannot change in place differs), `extra` (under a topology's names but no longer
/// in the spec) or `overridden` (a policy makes the queue behave otherwise than the spec says).
#[derive(Debug, Serialize)]
pub struct Entry {
    pub status: &'static str,
    /// `exchange`, `queue` or `binding`.
    pub kind: &'static str,
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<Difference>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ways_out: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumers: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drains_into: Option<String>,
    /// For `overridden`: the policy key, the spec's value, the effective value and who set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct VhostDiff {
    pub vhost: String,
    pub objects: Vec<Entry>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub in_sync: bool,
    /// Count of entries per status.
    pub summary: BTreeMap<&'static str, usize>,
    pub vhosts: Vec<VhostDiff>,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    let spec = match args.spec.load()? {
        Ok(spec) => spec,
        Err(exit) => return Ok(exit),
    };
    let endpoint = args.broker.endpoint()?;
    let compiled = compile(&spec);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let plans = runtime.block_on(async {
        let mut plans = Vec::new();
        for (vhost, topologies) in super::by_vhost(&compiled) {
            let mut live = match http::read(&endpoint, vhost).await {
                Ok(live) => live,
                Err(e) => anyhow::bail!("hopper diff reads the broker through the management API and cannot: {e:#}"),
            };
            // Exact message counts for left-over queues, when AMQP is reachable too.
            if let Ok(mut session) = amqp::Session::connect(&endpoint, vhost).await {
                super::exact_counts(&mut session, &mut live, &topologies).await?;
                session.close().await;
            }
            plans.push(plan::plan(vhost, &topologies, &live, false));
        }
        Ok(plans)
    })?;
    let report = report(&plans);
    match format {
        Format::Json => output::json(&report)?,
        Format::Table => print(&report)?,
    }
    Ok(if report.in_sync { Exit::Ok } else { Exit::Drift })
}

/// The plan, read as a description of the differences. Pure.
pub fn report(plans: &[Plan]) -> Report {
    let mut summary = BTreeMap::new();
    let vhosts: Vec<VhostDiff> = plans
        .iter()
        .map(|p| {
            let mut objects: Vec<Entry> = p.steps.iter().filter_map(entry).collect();
            objects.extend(p.overrides.iter().map(|o| Entry {
                key: Some(o.key.clone()),
                spec: o.spec.clone(),
                effective: Some(o.effective.clone()),
                source: Some(o.source),
                policy: Some(o.policy.clone()),
                ..Entry::new("overridden", "queue", o.queue.clone())
            }));
            for e in &objects {
                *summary.entry(e.status).or_insert(0) += 1;
            }
            VhostDiff { vhost: p.vhost.clone(), objects }
        })
        .collect();
    let in_sync = summary.keys().all(|s| *s == "in_sync");
    Report { in_sync, summary, vhosts }
}

impl Entry {
    fn new(status: &'static str, kind: &'static str, name: String) -> Entry {
        Entry {
            status,
            kind,
            name,
            differences: Vec::new(),
            ways_out: Vec::new(),
            messages: None,
            consumers: None,
            drains_into: None,
            key: None,
            spec: None,
            effective: None,
            source: None,
            policy: None,
        }
    }
}

fn entry(step: &Step) -> Option<Entry> {
    Some(match step {
        Step::InSync { object } => Entry::new("in_sync", object.kind(), object.name()),
        // `Ensure` only arises without the management API, which diff refuses to work without.
        Step::Create { object } | Step::Ensure { object } => Entry::new("missing", object.kind(), object.name()),
        Step::Conflict { object, differences, ways_out } => Entry {
            differences: differences.clone(),
            ways_out: ways_out.clone(),
            ..Entry::new("conflict", object.kind(), object.name())
        },
        Step::Unbind { binding } => Entry::new("extra", "binding", binding.to_string()),
        Step::Extra { queue, messages, consumers, drains_into, .. } => Entry {
            messages: *messages,
            consumers: *consumers,
            drains_into: drains_into.clone(),
            ..Entry::new("extra", "queue", queue.clone())
        },
        Step::Delete { .. } => return None,
    })
}

fn print(report: &Report) -> Result<()> {
    let mut lines = Vec::new();
    for v in &report.vhosts {
        let drift: Vec<&Entry> = v.objects.iter().filter(|e| e.status != "in_sync").collect();
        if drift.is_empty() {
            continue;
        }
        lines.push(format!("vhost {}", v.vhost));
        for e in drift {
            lines.push(line(e));
        }
    }
    let counts: Vec<String> = report.summary.iter().map(|(s, n)| format!("{n} {}", s.replace('_', " "))).collect();
    let total: usize = report.summary.values().sum();
    lines.push(if report.in_sync {
        format!("In sync: the broker matches the spec ({total} objects compared).")
    } else {
        format!(
            "Drift: {}. `hopper apply` creates what is missing; conflicts and overrides need you.",
            counts.join(", ")
        )
    });
    output::print(&lines.join("\n"))?;
    Ok(())
}

fn line(e: &Entry) -> String {
    let kind = e.kind;
    match e.status {
        "missing" => format!("  {} missing     {kind:<8} {}  (apply creates it)", output::paint("+", "32"), e.name),
        "conflict" => {
            let mut out = vec![format!("  {} conflict    {kind:<8} {}", output::paint("!", "31"), e.name)];
            for d in &e.differences {
                out.push(format!(
                    "      {}: the broker has {}, the spec wants {}",
                    d.argument,
                    d.live.as_deref().unwrap_or("(not set)"),
                    d.spec.as_deref().unwrap_or("(not set)")
                ));
            }
            out.extend(e.ways_out.iter().map(|w| format!("      - {w}")));
            out.join("\n")
        }
        "extra" if kind == "binding" => {
            format!("  {} extra       binding  {}  (apply removes it)", output::paint("-", "33"), e.name)
        }
        "extra" => {
            let count = |n: Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
            let drains = e.drains_into.as_ref().map(|d| format!(", drains into {d}")).unwrap_or_default();
            format!(
                "  {} extra       queue    {}  ({} message(s), {} consumer(s){drains}; `apply --prune` removes it once empty)",
                output::paint("-", "33"),
                e.name,
                count(e.messages),
                count(e.consumers)
            )
        }
        _ => {
            let who = match e.source {
                Some(Source::OperatorPolicy) => "operator policy",
                _ => "policy",
            };
            format!(
                "  {} overridden  queue    {}  {}: the spec says {}, {who} `{}` makes it {}",
                output::paint("~", "35"),
                e.name,
                e.key.as_deref().unwrap_or(""),
                e.spec.as_deref().unwrap_or("(not set)"),
                e.policy.as_deref().unwrap_or(""),
                e.effective.as_deref().unwrap_or("")
            )
        }
    }
}
