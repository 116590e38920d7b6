//! `hopper apply`: plan against the live broker, then converge it, sinks first.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;

use super::{BrokerArgs, SpecArgs};
use crate::Exit;
use crate::broker::budget::Budget;
use crate::model::Object;
use crate::ops::apply::{Report, Request};
use crate::ops::plan_file::PlanFile;
use crate::ops::{self, apply::ReadFrom};
use crate::output::{self, Format, Verbosity};
use crate::plan::{Action, Property, Step, WayOut};
use crate::policy::Source;

/// Converge the broker to the spec. Nothing holding messages is ever deleted.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hopper apply topologies/
  hopper apply --dry-run topologies/orders.toml
  hopper apply --prune topologies/              also remove left-over queues that are empty and unused
  hopper apply --migrate topologies/            give queues new arguments (classic to quorum, ...) in place, keeping messages
  hopper apply --amqp-only topologies/          without the management API (bindings declared again)
  HOPPER_PASSWORD_FILE=/run/secrets/rabbitmq hopper apply --username app \\
      --amqp-url amqps://rabbit-1:5671,amqps://rabbit-2:5671 --tls-ca-cert-file ca.pem topologies/
  hopper apply --context prod topologies/       a broker named in ~/.config/hopper/config.toml

In CI, terraform-style:
  hopper apply --dry-run --detailed-exitcode --out plan.json topologies/
      exit 0: nothing to change; 2: changes pending; 3: a conflict apply would refuse; 1: error
  hopper apply --plan plan.json                 exactly those changes, or nothing (exit 4) if the
                                                broker changed since")]
pub struct Args {
    /// Spec files, or directories of *.toml files; `-` reads standard input.
    #[arg(value_name = "SPEC", required_unless_present = "plan")]
    pub specs: Vec<PathBuf>,
    /// Use this vhost for every topology, whatever the files say.
    #[arg(long, value_parser = super::vhost_name)]
    pub vhost: Option<String>,
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete queues left over from earlier versions of the spec (old wait queues), only when
    /// they are empty and have no consumers; the broker checks both at the moment of deletion.
    /// Retired and renamed topologies' earlier exchanges go too, once nothing uses them.
    #[arg(long)]
    pub prune: bool,
    /// Give a queue whose arguments cannot change in place (queue type, dead-letter settings,
    /// TTL, strategy) its new ones under the same name, keeping every message and binding: its
    /// messages wait in `hopper.migrating.<queue>` meanwhile. Needs the management API and a
    /// queue without consumers; killed at any point, the next run finishes it.
    #[arg(long)]
    pub migrate: bool,
    /// Every consumer runs the spec's retry contract: retry keys the spec no longer has
    /// (max_attempts lowered, jitter added, another strategy) may be unbound. Until then they
    /// stay routed to their wait queues, so that no consumer on the old contract has a retry
    /// returned (docs/applying.md).
    #[arg(long)]
    pub consumers_upgraded: bool,
    /// About what a migration (and a left-over queue's move) holds of message bodies at once:
    /// `64MiB`, `512KiB`, `1GB`. A message larger than half of it moves alone; messages are
    /// taken one by one, so it holds whatever their sizes (docs/migrate.md).
    #[arg(long, value_name = "SIZE", value_parser = crate::broker::budget::parse, default_value_t = Budget::default())]
    pub max_bytes_in_flight: Budget,
    /// Read the broker over AMQP alone, without the management API (a user without the
    /// `monitoring` tag, the plugin off): left-over queues cannot be listed, bindings are
    /// declared again. Never done unless asked.
    #[arg(long)]
    pub amqp_only: bool,
    /// Also list objects that are already in sync.
    #[arg(long)]
    pub show_unchanged: bool,
    /// With --dry-run, exit 0 when there is nothing to change, 2 when changes are pending,
    /// 3 on a conflict apply would refuse, 1 on any error (terraform's codes).
    #[arg(long, requires = "dry_run")]
    pub detailed_exitcode: bool,
    /// With --dry-run, also write the plan to FILE, with the fingerprint of the broker's state it
    /// was made against, for `apply --plan FILE`. Not written when the plan has a conflict.
    #[arg(long, value_name = "FILE", requires = "dry_run")]
    pub out: Option<PathBuf>,
    /// Apply the plan in FILE (from `apply --dry-run --out FILE`), exactly: nothing is changed
    /// (exit 4) if the broker's vhost changed since it was made.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["specs", "vhost", "dry_run", "prune", "migrate"])]
    pub plan: Option<PathBuf>,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    if let Some(path) = &args.plan {
        return run_saved(&args, path, format);
    }
    // Before the broker is asked anything: a plan written over its own spec loses the spec.
    if let Some(out) = &args.out
        && let Some(clash) = crate::spec::clash(out, &args.specs)
    {
        let why = match clash {
            crate::spec::Clash::Replaces(input) => {
                format!("would replace {}, a spec file this run reads", input.display())
            }
            crate::spec::Clash::JoinsDirectory(dir) => {
                format!(
                    "would be a *.toml file in {}, which this run reads as specs (the next run would read the plan as one)",
                    dir.display()
                )
            }
        };
        eprintln!(
            "error: --out {} {}; write the plan elsewhere (`--out plan.json`); nothing was read or changed",
            output::safe(&out.display().to_string()),
            output::safe(&why)
        );
        return Ok(Exit::Error);
    }
    let endpoint = args.broker.endpoint();
    let spec_args = SpecArgs { specs: args.specs.clone(), vhost: args.vhost.clone() };
    let (spec, files) = spec_args.load_sources_for(endpoint.as_ref().ok())?;
    let endpoint = endpoint?;
    let by_vhost: Vec<_> = ops::by_vhost(&spec.compiled).into_iter().collect();
    let request = Request {
        dry_run: args.dry_run,
        prune: args.prune,
        migrate: args.migrate,
        consumers_upgraded: args.consumers_upgraded,
        budget: args.max_bytes_in_flight,
        amqp_only: args.amqp_only,
        expect: None,
        fingerprint: format == Format::Json || args.out.is_some() || output::verbosity() == Verbosity::Verbose,
        objects: args.out.is_some(),
    };
    let report = ops::apply::run(&endpoint, &by_vhost, &request)?;
    render(&report, &args, format)?;
    if let Some(out) = &args.out {
        if report.conflicts() > 0 {
            eprintln!("error: no plan written to {}: a plan with a conflict cannot be applied", out.display());
        } else {
            let flags = ops::plan_file::Flags {
                prune: args.prune,
                migrate: args.migrate,
                consumers_upgraded: args.consumers_upgraded,
            };
            PlanFile::new(&report, files, flags, args.vhost.clone()).write(out)?;
            output::narrate(|| format!("plan written to {}", out.display()));
        }
    }
    let exit = exit(&report, &args);
    Ok(exit)
}

/// `apply --plan FILE`: the saved spec planned again, and carried out only if the broker still
/// gives the fingerprint and the changes the file holds.
fn run_saved(args: &Args, path: &std::path::Path, format: Format) -> Result<Exit> {
    let saved = match PlanFile::read(path) {
        Ok(saved) => saved,
        Err(message) => {
            eprintln!("error: {}; nothing was changed", output::safe(&message));
            return Ok(Exit::Error);
        }
    };
    output::narrate(|| format!("plan {}: made by hopper {}", path.display(), saved.hopper_version));
    if !saved.spec_is_as_written() {
        eprintln!(
            "error: the spec in the plan file {} was edited after the plan was made (its text is not what hopper wrote); nothing was changed\n  make the plan again: hopper apply --dry-run --out FILE SPEC...",
            output::safe(&path.display().to_string())
        );
        return Ok(Exit::Stale);
    }
    let mut sources = crate::spec::Sources::default();
    for file in &saved.spec {
        sources.add(file.path.clone(), file.text.clone());
    }
    let endpoint = args.broker.endpoint()?;
    let vhosts = super::vhosts(saved.vhost_override.as_deref(), Some(&endpoint))?;
    let spec = super::validated(sources, vhosts)?;
    let by_vhost: Vec<_> = ops::by_vhost(&spec.compiled).into_iter().collect();
    let request = Request {
        dry_run: false,
        prune: saved.prune,
        migrate: saved.migrate,
        consumers_upgraded: saved.consumers_upgraded,
        budget: args.max_bytes_in_flight,
        amqp_only: args.amqp_only,
        expect: Some(saved.expected()),
        fingerprint: true,
        objects: true,
    };
    let report = ops::apply::run(&endpoint, &by_vhost, &request)?;
    if !report.stale.is_empty() {
        if format == Format::Json {
            output::document(&report)?;
        }
        let mut lines = vec![format!(
            "error: the plan in {} no longer holds; nothing was changed:",
            output::safe(&path.display().to_string())
        )];
        lines.extend(report.stale.iter().map(|s| format!("  - {s}")));
        if report.cluster_name != saved.cluster_name {
            lines.push(format!(
                "  (the plan was made against cluster `{}`; this broker is cluster `{}`)",
                output::safe(&saved.cluster_name),
                output::safe(&report.cluster_name)
            ));
        }
        lines.push("  make the plan again: hopper apply --dry-run --out FILE SPEC...".into());
        eprintln!("{}", lines.join("\n"));
        return Ok(Exit::Stale);
    }
    render(&report, args, format)?;
    Ok(exit(&report, args))
}

fn render(report: &Report, args: &Args, format: Format) -> Result<()> {
    match format {
        Format::Json => output::document(report)?,
        Format::Table => print_report(report, args.show_unchanged)?,
    }
    // With -q the report is not printed, but a refusal is an error and says so.
    if output::verbosity() == Verbosity::Quiet && format == Format::Table {
        if report.conflicts() > 0 {
            eprintln!(
                "error: apply refused: {} conflict(s) with the broker; nothing was changed (run without -q for each conflict and its ways out)",
                report.conflicts()
            );
        } else if report.refused() > 0 {
            eprintln!(
                "error: the broker refused {} of {} change(s); {} were applied, the rest were not carried out (run without -q for which)",
                report.refused(),
                report.changes(),
                report.changes_applied()
            );
        }
    }
    Ok(())
}

fn exit(report: &Report, args: &Args) -> Exit {
    if report.conflicts() > 0 || report.refused() > 0 {
        Exit::Conflict
    } else if args.dry_run && args.detailed_exitcode && report.changes() > 0 {
        Exit::Drift
    } else {
        Exit::Ok
    }
}

fn print_report(report: &Report, show_unchanged: bool) -> Result<()> {
    let mut counts: BTreeMap<Action, usize> = BTreeMap::new();
    for v in &report.vhosts {
        let read = match v.read_from {
            ReadFrom::ManagementApi => "management API",
            ReadFrom::Amqp => "amqp",
        };
        let mut lines = vec![format!("vhost {} (read through {read})", output::safe(&v.vhost))];
        if let Some(note) = &v.note {
            lines.push(format!("  note: {note}"));
        }
        for (i, step) in v.steps.iter().enumerate() {
            *counts.entry(step.action()).or_default() += 1;
            if matches!(step, Step::InSync { note: None, .. }) && !show_unchanged {
                continue;
            }
            lines.push(describe(step));
            if let Some(r) = v.refused.iter().find(|r| r.step == i) {
                lines.push(format!("      refused by the broker: {}", r.reason));
            }
        }
        for m in &v.migrated {
            let stages: Vec<_> = m.stages.iter().map(|s| s.describe()).collect();
            let duplicates = match m.possible_duplicates {
                0 => String::new(),
                n => format!(
                    "; {n} of them had been delivered before by an interrupted run, so each may now be there twice"
                ),
            };
            lines.push(format!(
                "  {} migrated  queue    {}: {}; {} message(s) moved{duplicates}",
                output::paint("~", "32"),
                output::safe(&m.queue),
                if stages.is_empty() { "already done".to_string() } else { stages.join(", then ") },
                m.moved
            ));
        }
        if let Some(q) = &v.quorum_members {
            let on = match &q.nodes {
                Some(nodes) => format!("on {}", nodes.iter().map(|n| output::safe(n)).collect::<Vec<_>>().join(", ")),
                None => "on nodes the broker picks".to_string(),
            };
            let stopped = if q.stopped.is_empty() {
                String::new()
            } else {
                format!(" ({} not running: those members start when it is back)", q.stopped.join(", "))
            };
            lines.push(format!("  quorum queues created get {} member(s) each, {on}{stopped}", q.members));
        }
        for f in &v.failovers {
            lines.push(format!(
                "  {} failover  lost {} after {} change(s) ({}); carried on through {}",
                output::paint("~", "33"),
                f.from,
                f.done_before,
                output::safe(&f.cause),
                f.to
            ));
        }
        for o in &v.overrides {
            let who = if o.source == Source::OperatorPolicy { "operator policy" } else { "policy" };
            lines.push(format!(
                "  {} warning   queue    {}: {} is {} here but {who} `{}` makes it {}; apply cannot change a policy",
                output::paint("~", "35"),
                output::safe(&o.queue),
                o.setting,
                o.spec.as_ref().map_or("(not set)".to_string(), ToString::to_string),
                output::safe(&o.policy),
                o.effective
            ));
        }
        output::print(&lines.join("\n"))?;
    }
    let count = |a: Action| counts.get(&a).copied().unwrap_or(0);
    let total: usize = counts.values().sum();
    let changes: usize = counts.iter().filter(|(a, _)| a.changes()).map(|(_, n)| n).sum();
    let summary: Vec<_> = counts.iter().map(|(a, n)| format!("{n} {}", a.as_str())).collect();
    let summary = summary.join(", ");
    let last = if report.conflicts() > 0 {
        format!("Refused: {} conflict(s) with the broker; nothing was changed. ({summary})", report.conflicts())
    } else if report.dry_run {
        format!("Dry run: nothing was changed. Plan: {summary}.")
    } else if report.refused() > 0 {
        format!(
            "Stopped: the broker refused {} of {} change(s); {} were applied, the rest were not carried out. ({summary})",
            report.refused(),
            report.changes(),
            report.changes_applied()
        )
    } else if changes == 0 && count(Action::Extra) > 0 {
        format!(
            "No changes: everything the spec has is in place ({total} objects checked); {} left-over queue(s) kept, see above.",
            count(Action::Extra)
        )
    } else if changes == 0 {
        format!("No changes: the broker already matches the spec ({total} objects checked).")
    } else if changes == count(Action::Ensure) && count(Action::InSync) > 0 {
        format!(
            "No changes found: every exchange and queue was already there ({total} objects checked); bindings were declared again, since they cannot be listed without the management API."
        )
    } else {
        format!("Applied: {summary}.")
    };
    output::print(&last)?;
    Ok(())
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
    format!(
        "  {} {verb:<9} {:<8} {}{}",
        output::paint(symbol, colour),
        object.kind(),
        output::safe(&object.to_string()),
        output::safe(&detail)
    )
}

fn describe(step: &Step) -> String {
    match step {
        Step::Create { object } => object_line("+", "32", "create", object),
        Step::Ensure { object } => object_line("+", "32", "ensure", object),
        Step::InSync { object, note: None } => object_line("=", "2", "in sync", object),
        Step::InSync { object, note: Some(note) } => {
            format!("{}\n      note: {}", object_line("=", "2", "in sync", object), output::safe(note))
        }
        Step::Migrate { object, differences, messages, holding, resumes } => {
            let mut lines = vec![format!(
                "  {} migrate   {:<8} {}: {}{} message(s) wait in {} meanwhile",
                output::paint("~", "33"),
                object.kind(),
                output::safe(&object.to_string()),
                if *resumes { "finishes an interrupted migration; " } else { "" },
                messages.map_or("its".to_string(), |n| n.to_string()),
                output::safe(holding)
            )];
            for d in differences {
                lines.push(format!(
                    "      argument {}: {} -> {}",
                    d.property,
                    d.live.as_ref().map_or("(not set)".to_string(), ToString::to_string),
                    d.spec.as_ref().map_or("(not set)".to_string(), ToString::to_string)
                ));
            }
            lines.join("\n")
        }
        Step::Conflict { object, differences, ways_out } => {
            let owned = differences.iter().find(|d| d.property == Property::Owner);
            let why = match owned.and_then(|d| d.live.as_ref()) {
                Some(theirs) => format!("owner {theirs} recorded it, and this spec's owner is not {theirs}"),
                None => "it cannot be changed in place".to_string(),
            };
            let mut lines = vec![format!(
                "  {} conflict  {:<8} {}: {}",
                output::paint("!", "31"),
                object.kind(),
                output::safe(&object.to_string()),
                output::safe(&why)
            )];
            for d in differences.iter().filter(|d| d.property != Property::Owner) {
                lines.push(format!(
                    "      argument {}: the broker has {}, the spec wants {}",
                    d.property,
                    d.live.as_ref().map_or("(not set)".to_string(), ToString::to_string),
                    d.spec.as_ref().map_or("(not set)".to_string(), ToString::to_string)
                ));
            }
            lines.push("      safe ways out:".to_string());
            lines.extend(ways_out.iter().map(|w| way_out(w, "        ")));
            if matches!(object, Object::Queue(_)) && owned.is_none() {
                lines.push(
                    "      (hopper never deletes or redeclares a queue that holds messages to change its arguments)"
                        .into(),
                );
            }
            lines.join("\n")
        }
        Step::MoveMessages { from, to, messages } => format!(
            "  {} move      queue    {}: its {messages} message(s) into {}, where they get another attempt",
            output::paint("~", "33"),
            output::safe(from),
            output::safe(to)
        ),
        Step::Unbind { binding } => {
            format!("  {} unbind    binding  {}", output::paint("-", "33"), output::safe(&binding.to_string()))
        }
        Step::KeptBinding { binding, kept_because } => format!(
            "  {} extra     binding  {}; kept: {}",
            output::paint("~", "33"),
            output::safe(&binding.to_string()),
            output::safe(&kept_because.to_string())
        ),
        Step::Delete { queue, .. } => {
            format!("  {} delete    queue    {}  (empty and unused)", output::paint("-", "31"), output::safe(queue))
        }
        Step::KeptExchange { exchange, kept_because } => format!(
            "  {} extra     exchange {}; kept: {}",
            output::paint("~", "33"),
            output::safe(exchange),
            output::safe(&kept_because.to_string())
        ),
        Step::DeleteExchange { exchange } => format!(
            "  {} delete    exchange {}  (nothing routes from it or dead-letters through it)",
            output::paint("-", "31"),
            output::safe(exchange)
        ),
        Step::Record { owner, topologies, .. } => format!(
            "  {} record    owner    {}: {} topolog{} recorded as its own (a global parameter)",
            output::paint("+", "32"),
            output::safe(owner),
            topologies.len(),
            if topologies.len() == 1 { "y" } else { "ies" }
        ),
        Step::Extra { queue, messages, consumers, drains_into, kept_because } => {
            let count = |n: &Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
            let drains = drains_into.as_ref().map(|d| format!(", drains into {}", output::safe(d))).unwrap_or_default();
            format!(
                "  {} extra     queue    {}  ({} message(s), {} consumer(s){drains}); kept: {}",
                output::paint("~", "33"),
                output::safe(queue),
                count(messages),
                count(consumers),
                kept_because
            )
        }
    }
}

/// A way out as lines: what to do, then what to paste, indented so it copies cleanly.
pub fn way_out(w: &WayOut, indent: &str) -> String {
    let mut lines = vec![format!("{indent}- {}", output::safe(&w.says))];
    if let Some(edit) = &w.spec {
        lines.push(format!("{indent}  in {}, {}:", output::safe(&edit.file), output::safe(&edit.table)));
        for line in &edit.set {
            lines.push(format!("{indent}      {}", output::safe(line)));
        }
        for key in &edit.remove {
            lines.push(format!("{indent}  and remove `{key}` (from [defaults] too, if it is set there)"));
        }
    }
    if let Some(command) = &w.command {
        lines.push(format!("{indent}  $ {}", output::safe(command)));
    }
    lines.join("\n")
}
