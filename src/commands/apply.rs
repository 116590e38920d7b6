//! `hopper apply`: plan against the live broker, then converge it, sinks first.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use super::{BrokerArgs, SpecArgs};
use crate::Exit;
use crate::broker::{amqp, http};
use crate::compile::compile;
use crate::model::Object;
use crate::output::{self, Format};
use crate::plan::{self, Step};

/// Converge the broker to the spec. Nothing holding messages is ever deleted.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hopper apply topologies/
  hopper apply --dry-run topologies/orders.toml
  hopper apply --prune topologies/              also remove left-over queues that are empty and unused
  HOPPER_AMQP_URL=amqp://app:secret@rabbit-1:5672,amqp://app:secret@rabbit-2:5672 hopper apply topologies/")]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete queues left over from earlier versions of the spec (old wait queues), only when
    /// they are empty and have no consumers; the broker checks both at the moment of deletion.
    #[arg(long)]
    pub prune: bool,
    /// Also list objects that are already in sync.
    #[arg(long)]
    pub show_unchanged: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    dry_run: bool,
    applied: bool,
    vhosts: Vec<VhostReport<'a>>,
}

#[derive(Serialize)]
struct VhostReport<'a> {
    vhost: &'a str,
    /// `management_api`, or `amqp` when the management API could not be used.
    read_from: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    steps: &'a [Step],
    /// Policies that make a queue behave otherwise than the spec says; apply cannot change them.
    overrides: &'a [plan::Override],
    /// Steps the broker refused while applying, with its reason.
    refused: Vec<(usize, String)>,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    let spec = match args.spec.load()? {
        Ok(spec) => spec,
        Err(exit) => return Ok(exit),
    };
    let endpoint = args.broker.endpoint()?;
    let compiled = compile(&spec);
    let by_vhost = super::by_vhost(&compiled);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        // Plan every vhost before changing any: a conflict anywhere stops the whole run.
        let mut work = Vec::new();
        for (vhost, topologies) in &by_vhost {
            let mut session = amqp::Session::connect(&endpoint, vhost).await?;
            let (mut live, read_from, note) = match http::read(&endpoint, vhost).await {
                Ok(mut live) => {
                    super::exact_counts(&mut session, &mut live, topologies).await?;
                    (live, "management_api", None)
                }
                Err(e) => {
                    let live = session.probe(&plan::desired(topologies)).await?;
                    let note = format!(
                        "{e:#}; read over AMQP instead: bindings are declared again (idempotent), and queues left over by earlier specs cannot be listed"
                    );
                    (live, "amqp", Some(note))
                }
            };
            let mut plan = plan::plan(vhost, topologies, &live, args.prune);
            // A refusal says how many messages the queue holds: count them exactly.
            let conflicting: Vec<String> = plan
                .conflicts()
                .filter_map(|s| match s {
                    Step::Conflict { object: Object::Queue(q), .. } => Some(q.name.clone()),
                    _ => None,
                })
                .collect();
            if !conflicting.is_empty() {
                for name in conflicting {
                    if let (Some(q), Some((messages, _))) = (live.queues.get_mut(&name), session.queue_counts(&name).await?) {
                        q.messages = Some(messages.max(q.messages.unwrap_or(0)));
                    }
                }
                plan = plan::plan(vhost, topologies, &live, args.prune);
            }
            work.push((session, plan, read_from, note));
        }

        let conflicts = work.iter().map(|(_, p, _, _)| p.conflicts().count()).sum::<usize>();
        let apply = conflicts == 0 && !args.dry_run;
        let mut refused_total = 0;
        let mut refusals = Vec::new();
        for (session, plan, _, _) in &mut work {
            let mut refused = Vec::new();
            if apply {
                for (i, outcome) in session.execute(plan).await? {
                    if let amqp::Outcome::Refused(reason) = outcome {
                        refused.push((i, reason));
                    }
                }
            }
            refused_total += refused.iter().filter(|(i, _)| !matches!(plan.steps[*i], Step::Delete { .. })).count();
            refusals.push(refused);
        }

        let report = Report {
            dry_run: args.dry_run,
            applied: apply,
            vhosts: work
                .iter()
                .zip(refusals)
                .map(|((_, plan, read_from, note), refused)| VhostReport {
                    vhost: &plan.vhost,
                    read_from,
                    note: note.clone(),
                    steps: &plan.steps,
                    overrides: &plan.overrides,
                    refused,
                })
                .collect(),
        };
        match format {
            Format::Json => output::json(&report)?,
            Format::Table => print_report(&report, args.show_unchanged)?,
        }
        for (session, _, _, _) in work {
            session.close().await;
        }
        Ok(if conflicts > 0 || refused_total > 0 { Exit::Conflict } else { Exit::Ok })
    })
}

fn print_report(report: &Report, show_unchanged: bool) -> Result<()> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for v in &report.vhosts {
        let mut lines = vec![format!("vhost {} (read through {})", v.vhost, v.read_from.replace('_', " "))];
        if let Some(note) = &v.note {
            lines.push(format!("  note: {note}"));
        }
        for (i, step) in v.steps.iter().enumerate() {
            *counts.entry(action(step)).or_default() += 1;
            if matches!(step, Step::InSync { .. }) && !show_unchanged {
                continue;
            }
            lines.push(describe(step));
            if let Some((_, reason)) = v.refused.iter().find(|(j, _)| *j == i) {
                lines.push(format!("      refused by the broker: {reason}"));
            }
        }
        for o in v.overrides {
            let who = if o.source == crate::policy::Source::OperatorPolicy { "operator policy" } else { "policy" };
            lines.push(format!(
                "  {} warning   queue    {}: {} is {} here but {who} `{}` makes it {}; apply cannot change a policy",
                output::paint("~", "35"),
                o.queue,
                o.key,
                o.spec.as_deref().unwrap_or("(not set)"),
                o.policy,
                o.effective
            ));
        }
        output::print(&lines.join("\n"))?;
    }
    let total: usize = counts.values().sum();
    let conflicts = counts.get("conflict").copied().unwrap_or(0);
    let changes =
        ["create", "ensure", "unbind", "delete"].iter().map(|a| counts.get(a).copied().unwrap_or(0)).sum::<usize>();
    let summary: Vec<_> = counts.iter().map(|(a, n)| format!("{n} {a}")).collect();
    // A prune deletion the broker refused (the queue is no longer empty) is not a stop: the queue
    // was kept, which is what a refusal is for; its line says so.
    let refused: usize = report
        .vhosts
        .iter()
        .map(|v| v.refused.iter().filter(|(i, _)| !matches!(v.steps[*i], Step::Delete { .. })).count())
        .sum();
    let last = if conflicts > 0 {
        format!("Refused: {conflicts} conflict(s) with the broker; nothing was changed. ({})", summary.join(", "))
    } else if report.dry_run {
        format!("Dry run: nothing was changed. Plan: {}.", summary.join(", "))
    } else if refused > 0 {
        format!(
            "Stopped: the broker refused {refused} step(s); steps before them were applied. ({})",
            summary.join(", ")
        )
    } else if changes == 0 && counts.contains_key("extra") {
        format!(
            "No changes: everything the spec has is in place ({total} objects checked); {} left-over queue(s) kept, see above.",
            counts["extra"]
        )
    } else if changes == 0 {
        format!("No changes: the broker already matches the spec ({total} objects checked).")
    } else if changes == counts.get("ensure").copied().unwrap_or(0) && counts.contains_key("in sync") {
        format!(
            "No changes found: every exchange and queue was already there ({total} objects checked); bindings were declared again, since they cannot be listed without the management API."
        )
    } else {
        format!("Applied: {}.", summary.join(", "))
    };
    output::print(&last)?;
    Ok(())
}

fn action(step: &Step) -> &'static str {
    match step {
        Step::Create { .. } => "create",
        Step::InSync { .. } => "in sync",
        Step::Ensure { .. } => "ensure",
        Step::Conflict { .. } => "conflict",
        Step::Unbind { .. } => "unbind",
        Step::Extra { .. } => "extra",
        Step::Delete { .. } => "delete",
    }
}

fn object_line(symbol: &str, colour: &str, verb: &str, object: &Object) -> String {
    let detail = match object {
        Object::Queue(q) => {
            let args: Vec<_> = q.arguments.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("  [{}]", args.join(", "))
        }
        Object::Exchange(e) => format!("  [type={}]", e.kind),
        Object::Binding(_) => String::new(),
    };
    format!("  {} {verb:<9} {:<8} {}{detail}", output::paint(symbol, colour), object.kind(), object.name())
}

fn describe(step: &Step) -> String {
    match step {
        Step::Create { object } => object_line("+", "32", "create", object),
        Step::Ensure { object } => object_line("+", "32", "ensure", object),
        Step::InSync { object } => object_line("=", "2", "in sync", object),
        Step::Conflict { object, differences, ways_out } => {
            let mut lines = vec![format!(
                "  {} conflict  {:<8} {}: it cannot be changed in place",
                output::paint("!", "31"),
                object.kind(),
                object.name()
            )];
            for d in differences {
                lines.push(format!(
                    "      argument {}: the broker has {}, the spec wants {}",
                    d.argument,
                    d.live.as_deref().unwrap_or("(not set)"),
                    d.spec.as_deref().unwrap_or("(not set)")
                ));
            }
            lines.push("      safe ways out:".to_string());
            lines.extend(ways_out.iter().map(|w| format!("        - {w}")));
            lines.join("\n")
        }
        Step::Unbind { binding } => format!("  {} unbind    binding  {binding}", output::paint("-", "33")),
        Step::Delete { queue, .. } => {
            format!("  {} delete    queue    {queue}  (empty and unused)", output::paint("-", "31"))
        }
        Step::Extra { queue, messages, consumers, drains_into, kept_because } => {
            let count = |n: &Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
            let drains = drains_into.as_ref().map(|d| format!(", drains into {d}")).unwrap_or_default();
            format!(
                "  {} extra     queue    {queue}  ({} message(s), {} consumer(s){drains}); kept: {}",
                output::paint("~", "33"),
                count(messages),
                count(consumers),
                kept_because.as_deref().unwrap_or("")
            )
        }
    }
}
