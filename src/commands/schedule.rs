//! `hopper schedule`: each topology's retry schedule, what it costs, and when a message that
//! always fails reaches the dead-letter queue.

use anyhow::Result;

use super::SpecArgs;
use crate::Exit;
use crate::output::{self, Format};
use crate::schedule::schedule;

/// Print each topology's retry schedule: delay ranges, time to the dead-letter queue, cost.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  hopper schedule topologies/ --format json")]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    let spec = args.spec.load()?;
    let schedules: Vec<_> = spec.compiled.iter().map(schedule).collect();
    if format == Format::Json {
        output::listing("schedules", &schedules)?;
        return Ok(Exit::Ok);
    }
    for s in &schedules {
        output::print(&format!(
            "topology {} (vhost {}, {}): {} attempts; a message failing each reaches {} between {} and {}; {} wait queue(s); written into a queue {} time(s) on its way",
            output::safe(&s.topology),
            output::safe(&s.vhost),
            format!("{:?}", s.strategy).to_lowercase(),
            s.max_attempts,
            "the dead-letter queue",
            s.dead_letter_earliest,
            s.dead_letter_latest,
            s.wait_queues,
            s.copies
        ))?;
        let mut table = output::table(&["after attempt", "waits", "wait queues"]);
        for h in &s.hops {
            let waits = if h.delay_min_ms == h.delay_max_ms {
                h.delay_min.clone()
            } else {
                format!("{} to {}", h.delay_min, h.delay_max)
            };
            let queues = if h.wait_queues.is_empty() {
                "(held back in the main queue)".to_string()
            } else {
                h.wait_queues.iter().map(|q| output::safe(q).into_owned()).collect::<Vec<_>>().join(", ")
            };
            table.add_row(vec![h.after_attempt.to_string(), waits, queues]);
        }
        output::print(&table.to_string())?;
    }
    Ok(Exit::Ok)
}
