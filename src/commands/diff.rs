//! `hopper diff`: the spec against the live broker, read through the management API. Changes
//! nothing. Exit 0 in sync, 1 drift, 2 error, as `diff` and `kubectl diff`.

use anyhow::Result;

use super::{BrokerArgs, SpecArgs};
use crate::Exit;
use crate::ops::diff::{Details, Entry, Report, Status, Subject};
use crate::ops::{self};
use crate::output::{self, Format};
use crate::policy::Source;

/// Compare the spec with the live broker; exit 1 if they differ.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hopper diff topologies/                      exit 0 in sync, 1 drift, 2 error
  hopper diff --detailed-exitcode topologies/  exit 0 in sync, 2 drift, 1 error (terraform's codes)
  hopper diff topologies/ --format json | jq '.vhosts[].objects[] | select(.status != \"in_sync\")'")]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Exit 0 in sync, 2 when the broker differs from the spec, 1 on any error (terraform's
    /// codes) instead of 0, 1 and 2.
    #[arg(long)]
    pub detailed_exitcode: bool,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    let endpoint = args.broker.endpoint();
    let spec = args.spec.load_for(endpoint.as_ref().ok())?;
    let endpoint = endpoint?;
    let by_vhost: Vec<_> = ops::by_vhost(&spec.compiled).into_iter().collect();
    let report = ops::diff::run(&endpoint, &by_vhost)?;
    match format {
        Format::Json => output::document(&report)?,
        Format::Table => print(&report)?,
    }
    let exit = if report.in_sync { Exit::Ok } else { Exit::Drift };
    Ok(exit)
}

fn print(report: &Report) -> Result<()> {
    let mut lines = Vec::new();
    for v in &report.vhosts {
        let drift: Vec<&Entry> =
            v.objects.iter().filter(|e| e.status != Status::InSync || e.note().is_some()).collect();
        if drift.is_empty() && v.hazards.is_empty() && v.owners_unread.is_none() && v.unclaimed.is_empty() {
            continue;
        }
        lines.push(format!("vhost {}", output::safe(&v.vhost)));
        if let Some(status) = v.owners_unread {
            lines.push(format!(
                "  note: the owners' records could not be read (HTTP {status}: the user needs the `policymaker` tag): conflicts with other owners and retired topologies are not shown"
            ));
        }
        lines.extend(drift.into_iter().map(line));
        // The cluster's state, not drift: shown, and the exit code stays the drift's.
        lines.extend(v.hazards.iter().map(|f| format!("  {}", super::lint::describe(f).replace('\n', "\n  "))));
        // Not drift either: no spec says what they are for.
        lines.extend(v.unclaimed.iter().map(|u| {
            format!(
                "  ? unclaimed   {:<8} {}  (named as hopper names `{}`'s objects; no owner's record claims it: adopt it with a spec, or delete it by hand)",
                u.kind.as_str(),
                output::safe(&u.name),
                output::safe(&u.main_queue)
            )
        }));
    }
    let counts: Vec<String> = report.summary.iter().map(|(s, n)| format!("{n} {}", s.as_str())).collect();
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
    let kind = e.subject.kind();
    let name = output::safe(&e.subject.to_string()).into_owned();
    let value = |v: Option<&crate::model::ArgValue>| v.map_or("(not set)".to_string(), ToString::to_string);
    match (e.status, e.details.as_deref()) {
        (Status::InSync, _) => match e.note() {
            None => format!("  = in sync     {kind:<8} {name}"),
            Some(note) => format!("  = in sync     {kind:<8} {name}  (note: {})", output::safe(note)),
        },
        (Status::Missing, _) => {
            format!("  {} missing     {kind:<8} {name}  (apply creates it)", output::paint("+", "32"))
        }
        (Status::Conflict, details) => {
            let mut out = vec![format!("  {} conflict    {kind:<8} {name}", output::paint("!", "31"))];
            if let Some(Details::Conflict { differences, ways_out }) = details {
                for d in differences {
                    out.push(format!(
                        "      {}: the broker has {}, the spec wants {}",
                        d.property,
                        value(d.live.as_ref()),
                        value(d.spec.as_ref())
                    ));
                }
                out.extend(ways_out.iter().map(|w| super::apply::way_out(w, "      ")));
            }
            out.join("\n")
        }
        (Status::Extra, _) if matches!(e.subject, Subject::Binding(_)) => {
            format!("  {} extra       binding  {name}  (apply removes it)", output::paint("-", "33"))
        }
        (Status::Extra, details) => {
            let (messages, consumers, drains_into) = match details {
                Some(Details::Extra { messages, consumers, drains_into }) => {
                    (*messages, *consumers, drains_into.as_deref())
                }
                _ => (None, None, None),
            };
            let count = |n: Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
            let drains = drains_into.map(|d| format!(", drains into {}", output::safe(d))).unwrap_or_default();
            format!(
                "  {} extra       queue    {name}  ({} message(s), {} consumer(s){drains}; `apply --prune` removes it once empty)",
                output::paint("-", "33"),
                count(messages),
                count(consumers)
            )
        }
        (Status::Overridden, details) => {
            let Some(Details::Overridden { setting, spec, effective, set_by, policy }) = details else {
                return format!("  {} overridden  queue    {name}", output::paint("~", "35"));
            };
            let who = match set_by {
                Source::OperatorPolicy => "operator policy",
                _ => "policy",
            };
            format!(
                "  {} overridden  queue    {name}  {setting}: the spec says {}, {who} `{}` makes it {}",
                output::paint("~", "35"),
                value(spec.as_ref()),
                output::safe(policy),
                value(Some(effective))
            )
        }
    }
}
