//! `hopper export`: the compiled topologies as RabbitMQ definitions JSON, the format of
//! `rabbitmqctl import_definitions` and the management UI's import. Offline.

use anyhow::Result;
use serde_json::{Value, json};

use super::SpecArgs;
use crate::Exit;
use crate::compile::{CompiledTopology, compile};
use crate::model::{Destination, Object};
use crate::output;
use crate::plan;

/// Print the spec as RabbitMQ definitions (JSON), for `rabbitmqctl import_definitions`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  hopper export topologies/ > definitions.json && rabbitmqctl import_definitions definitions.json"
)]
pub struct Args {
    #[command(flatten)]
    pub spec: SpecArgs,
}

pub fn run(args: Args) -> Result<Exit> {
    let spec = match args.spec.load()? {
        Ok(spec) => spec,
        Err(exit) => return Ok(exit),
    };
    output::json(&definitions(&compile(&spec)))?;
    Ok(Exit::Ok)
}

/// Definitions for every vhost of the compiled topologies. Vhosts are listed so that an import
/// creates them; each object is listed once even when topologies share it.
pub fn definitions(compiled: &[CompiledTopology]) -> Value {
    let mut vhosts: Vec<&str> = Vec::new();
    for c in compiled {
        if !vhosts.contains(&c.topology.vhost.as_str()) {
            vhosts.push(&c.topology.vhost);
        }
    }
    let (mut queues, mut exchanges, mut bindings) = (Vec::new(), Vec::new(), Vec::new());
    for vhost in &vhosts {
        let topologies: Vec<&CompiledTopology> = compiled.iter().filter(|c| c.topology.vhost == *vhost).collect();
        for object in plan::desired(&topologies) {
            match object {
                Object::Queue(q) => queues.push(json!({
                    "name": q.name, "vhost": vhost, "durable": q.durable, "auto_delete": false, "arguments": q.arguments,
                })),
                Object::Exchange(e) => exchanges.push(json!({
                    "name": e.name, "vhost": vhost, "type": e.kind, "durable": e.durable, "auto_delete": false,
                    "internal": false, "arguments": {},
                })),
                Object::Binding(b) => {
                    let (destination, destination_type) = match &b.destination {
                        Destination::Queue(q) => (q.as_str(), "queue"),
                        Destination::Exchange(e) => (e.as_str(), "exchange"),
                    };
                    bindings.push(json!({
                        "source": b.source, "vhost": vhost, "destination": destination,
                        "destination_type": destination_type, "routing_key": b.routing_key, "arguments": b.arguments,
                    }))
                }
            }
        }
    }
    let vhosts: Vec<Value> = vhosts.iter().map(|v| json!({ "name": v })).collect();
    json!({ "vhosts": vhosts, "queues": queues, "exchanges": exchanges, "bindings": bindings })
}
