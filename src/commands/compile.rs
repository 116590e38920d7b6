//! `hopper compile`: the exchanges, queues and bindings a spec compiles to. Offline.

use anyhow::Result;

use super::SpecArgs;
use crate::Exit;
use crate::model::Object;
use crate::output::{self, Format};

/// Show what the spec compiles to, without a broker.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  hopper compile topologies/orders.toml --format json")]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
}

pub fn run(args: Args, format: Format) -> Result<Exit> {
    let spec = args.spec.load()?;
    let compiled = &spec.compiled;
    if format == Format::Json {
        output::listing("topologies", &compiled)?;
        return Ok(Exit::Ok);
    }
    for c in compiled {
        let t = &c.topology;
        output::print(&format!(
            "topology {} (vhost {}, {} {}, {} attempt(s))",
            output::safe(&t.name),
            output::safe(&t.vhost),
            t.strategy.as_str(),
            t.queue_type.as_str(),
            t.max_attempts
        ))?;
        let mut table = output::table(&["kind", "name", "details"]);
        for o in &c.objects {
            let details = match o {
                Object::Exchange(e) => format!("type={}, durable", e.kind),
                Object::Queue(q) => {
                    let args: Vec<_> = q.arguments.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!("durable, {}", args.join(", "))
                }
                Object::Binding(b) => format!("routing key {:?}", b.routing_key),
            };
            let name = match o {
                Object::Binding(b) => format!("{} -> {}", b.source, b.destination.name()),
                other => other.to_string(),
            };
            table.add_row(vec![
                o.kind().to_string(),
                output::safe(&name).into_owned(),
                output::safe(&details).into_owned(),
            ]);
        }
        output::print(&table.to_string())?;
    }
    Ok(Exit::Ok)
}
