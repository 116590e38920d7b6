//! `hopper redrive`: a topology's dead letters back to its main queue.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Result, bail};

use super::{BrokerArgs, SpecArgs};
use crate::Exit;
use crate::broker::budget::Budget;
use crate::network::Reason;
use crate::ops::redrive::{Filter, Report, Request, Target};
use crate::output::{self, Format};

/// Send a topology's dead letters back to the start of its retry flow, with a fresh attempt
/// count; exit 3 if a run stopped early.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hopper redrive topologies/orders.toml --dry-run           what would move, by first death
  hopper redrive topologies/ --topology orders              every dead letter of `orders`
  hopper redrive topologies/ --reason rejected --older-than 1h --max 500 --rate 100
  hopper redrive topologies/ --id 7f3c... --id 91ab...
  hopper redrive topologies/ --topology orders --from-queue orders.parked   a renamed DLQ")]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Only these topologies of the spec [default: all of them].
    #[arg(long, value_name = "NAME")]
    pub topology: Vec<String>,
    /// Take the dead letters from this queue instead of the topology's dead-letter queue: one
    /// the spec no longer names, after a rename (one topology only; never a queue the spec
    /// still uses for something else).
    #[arg(long, value_name = "QUEUE")]
    pub from_queue: Option<String>,
    /// Only dead letters whose first death had this reason (repeatable).
    #[arg(long, value_parser = reason, value_name = "rejected|expired|maxlen|delivery_limit")]
    pub reason: Vec<Reason>,
    /// Only dead letters that first died in this queue (repeatable).
    #[arg(long, value_name = "QUEUE")]
    pub first_queue: Vec<String>,
    /// Only dead letters that first died at least this long ago (`30m`, `2h`, `1d`).
    #[arg(long, value_parser = age, value_name = "DURATION")]
    pub older_than: Option<Duration>,
    /// Only dead letters that first died less than this long ago.
    #[arg(long, value_parser = age, value_name = "DURATION")]
    pub newer_than: Option<Duration>,
    /// Only the dead letter with this message id (repeatable).
    #[arg(long = "id", value_name = "MESSAGE_ID")]
    pub ids: Vec<String>,
    /// Move at most N dead letters per topology.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max: Option<u64>,
    /// Publish at most N copies a second (`100` or `100/s`).
    #[arg(long, value_parser = rate, value_name = "N/s")]
    pub rate: Option<u32>,
    /// Hold about this many bytes of dead letters' bodies at once: `64MiB`, `512KiB`, `1GB`. A
    /// dead letter larger than half of it moves alone; dead letters are taken one by one, so it
    /// holds whatever their sizes, filter or --dry-run (docs/redrive.md).
    #[arg(long, value_name = "SIZE", value_parser = crate::broker::budget::parse, default_value_t = Budget::default())]
    pub max_bytes_in_flight: Budget,
    /// Print what would move, grouped by first death; move nothing (the dead letters are
    /// peeked at and given back, as inspect --dead-letters does).
    #[arg(long)]
    pub dry_run: bool,
}

fn reason(value: &str) -> Result<Reason, String> {
    Reason::ALL.into_iter().find(|r| r.as_str() == value).ok_or_else(|| {
        let all: Vec<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        format!("`{value}` is not a death reason; RabbitMQ's are {}", all.join(", "))
    })
}

fn age(value: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(value.trim())
        .map_err(|e| format!("`{value}` is not a duration ({e}); write a number and a unit: 30m, 2h, 1d"))?;
    if d.is_zero() {
        return Err("an age of zero selects every message or none; leave the option out".into());
    }
    Ok(d)
}

fn rate(value: &str) -> Result<u32, String> {
    let number = value.trim().strip_suffix("/s").unwrap_or(value.trim());
    match number.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "`{value}` is not a rate: write a whole number of messages a second above 0, as `100` or `100/s`"
        )),
    }
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    let endpoint = args.broker.endpoint();
    let spec = args.spec.load_for(endpoint.as_ref().ok())?;
    if let (Some(older), Some(newer)) = (args.older_than, args.newer_than)
        && older >= newer
    {
        bail!(
            "--older-than {} and --newer-than {} select nothing: a dead letter cannot have died both at least {0} and less than {1} ago",
            humantime::format_duration(older),
            humantime::format_duration(newer)
        );
    }
    let known: BTreeSet<&str> = spec.topologies().map(|t| t.name.as_str()).collect();
    if let Some(unknown) = args.topology.iter().find(|n| !known.contains(n.as_str())) {
        bail!(
            "no topology `{unknown}` in the spec; it has {}",
            known.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
        );
    }
    let mut targets: Vec<Target> = spec
        .topologies()
        .filter(|t| args.topology.is_empty() || args.topology.contains(&t.name))
        .map(|t| Target {
            topology: t.name.clone(),
            vhost: t.vhost.clone(),
            dead_letter_queue: t.dead_letter_queue.clone(),
            main_queue: t.queue.clone(),
        })
        .collect();
    if let Some(from) = &args.from_queue {
        let [target] = targets.as_mut_slice() else {
            bail!(
                "--from-queue names one queue to redrive into one topology, and {} topologies are selected; name one with --topology",
                targets.len()
            );
        };
        // Taking from a queue the spec still uses (a wait queue, a main queue) would skip its
        // delays or steal another flow's messages.
        let used = spec.compiled.iter().filter(|c| c.topology.vhost == target.vhost).find_map(|c| {
            c.queue(from).filter(|_| *from != *target.dead_letter_queue).map(|_| c.topology.name.clone())
        });
        if let Some(topology) = used {
            bail!(
                "--from-queue `{}`: topology `{topology}` of the spec uses that queue; redrive takes dead letters only from a queue the spec no longer uses, or from the topology's dead-letter queue (leave --from-queue out)",
                output::safe(from)
            );
        }
        target.dead_letter_queue = from.as_str().into();
    }
    let request = Request {
        targets,
        filter: Filter {
            reasons: args.reason.into_iter().collect(),
            first_queues: args.first_queue.into_iter().collect(),
            older_than: args.older_than,
            newer_than: args.newer_than,
            message_ids: args.ids.into_iter().collect(),
        },
        max: args.max,
        rate: args.rate,
        dry_run: args.dry_run,
        budget: args.max_bytes_in_flight,
    };
    let endpoint = endpoint?;
    let report = crate::ops::redrive::run(&endpoint, &request, |report| match format {
        Format::Json => output::document(report),
        Format::Table => Ok(output::print(&render(report))?),
    })?;
    Ok(if report.stopped() { Exit::Conflict } else { Exit::Ok })
}

fn render(report: &Report) -> String {
    let mut lines = Vec::new();
    for t in &report.topologies {
        lines.push(format!(
            "topology {} (vhost {}): {} ({}, {} dead letter(s) at the start) -> {}",
            output::safe(&t.topology),
            output::safe(&t.vhost),
            output::safe(&t.dead_letter_queue),
            t.kind,
            t.started_with,
            output::safe(&t.to)
        ));
        let (verb, stay) = if report.dry_run { ("would move", "would stay") } else { ("moved", "stayed") };
        let duplicates = match t.possible_duplicates {
            0 => String::new(),
            n => format!(
                " ({n} of them an interrupted run was copying when it stopped: each may now be in {} twice)",
                output::safe(&t.to)
            ),
        };
        let moved = t.would_move.unwrap_or(t.moved);
        let given_back = match t.given_back {
            0 => String::new(),
            n => format!("; {n} chosen to move were not moved when the run stopped (still in the dead-letter queue)"),
        };
        lines.push(format!("  looked at {}; {verb} {moved}{duplicates}{given_back}; {} {stay}", t.scanned, t.stayed));
        if !t.groups.is_empty() {
            lines.push(super::first_deaths(&t.groups));
        }
        lines.push(format!("  {}", t.effect));
        if let Some(why) = &t.stopped {
            lines.push(format!(
                "  STOPPED: {}; every dead letter not moved is still in {}",
                output::safe(why),
                output::safe(&t.dead_letter_queue)
            ));
        }
    }
    let moved: u64 = report.topologies.iter().map(|t| t.would_move.unwrap_or(t.moved)).sum();
    lines.push(if report.dry_run {
        format!("Dry run: nothing was moved; {moved} dead letter(s) would move.")
    } else if report.stopped() {
        format!("Stopped early: {moved} dead letter(s) moved; run again to go on.")
    } else {
        format!("Redriven: {moved} dead letter(s) moved.")
    });
    lines.join("\n")
}
