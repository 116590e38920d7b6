//! The compiled topologies as RabbitMQ definitions, the JSON of `rabbitmqctl import_definitions`
//! and of the management UI's import. Pure; written as it is serialised, borrowing the objects.

use serde::Serialize;

use crate::compile::CompiledTopology;
use crate::live::Record;
use crate::model::{Arguments, Destination, Object};

#[derive(Debug, Serialize)]
pub struct Definitions<'a> {
    pub vhosts: Vec<Vhost<'a>>,
    pub queues: Vec<QueueDefinition<'a>>,
    pub exchanges: Vec<ExchangeDefinition<'a>>,
    pub bindings: Vec<BindingDefinition<'a>>,
    /// Each owner's record of what it made in a vhost (`plan::ownership`): imported with the
    /// objects, so that `apply` after an import finds them claimed and changes nothing.
    pub global_parameters: Vec<GlobalParameter>,
}

#[derive(Debug, Serialize)]
pub struct GlobalParameter {
    pub name: String,
    pub value: Record,
}

#[derive(Debug, Serialize)]
pub struct Vhost<'a> {
    pub name: &'a str,
}

#[derive(Debug, Serialize)]
pub struct QueueDefinition<'a> {
    pub name: &'a str,
    pub vhost: &'a str,
    pub durable: bool,
    pub auto_delete: bool,
    pub arguments: &'a Arguments,
}

#[derive(Debug, Serialize)]
pub struct ExchangeDefinition<'a> {
    pub name: &'a str,
    pub vhost: &'a str,
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: Arguments,
}

#[derive(Debug, Serialize)]
pub struct BindingDefinition<'a> {
    pub source: &'a str,
    pub vhost: &'a str,
    pub destination: &'a str,
    pub destination_type: &'static str,
    pub routing_key: &'a str,
    pub arguments: &'a Arguments,
}

/// Definitions for every vhost of the compiled topologies. Vhosts are listed so that an import
/// creates them; each object is listed once even when topologies share it.
pub fn definitions(compiled: &[CompiledTopology]) -> Definitions<'_> {
    let mut d = Definitions {
        vhosts: Vec::new(),
        queues: Vec::new(),
        exchanges: Vec::new(),
        bindings: Vec::new(),
        global_parameters: Vec::new(),
    };
    for (vhost, topologies) in crate::ops::by_vhost(compiled) {
        d.vhosts.push(Vhost { name: vhost });
        for record in crate::plan::ownership::records(vhost, &topologies) {
            d.global_parameters.push(GlobalParameter { name: Record::parameter(&record.owner, vhost), value: record });
        }
        for object in crate::plan::desired(&topologies) {
            match object {
                Object::Queue(q) => d.queues.push(QueueDefinition {
                    name: &q.name,
                    vhost,
                    durable: q.durable,
                    auto_delete: false,
                    arguments: &q.arguments,
                }),
                Object::Exchange(e) => d.exchanges.push(ExchangeDefinition {
                    name: &e.name,
                    vhost,
                    kind: e.kind.as_str(),
                    durable: e.durable,
                    auto_delete: false,
                    internal: false,
                    arguments: Arguments::new(),
                }),
                Object::Binding(b) => {
                    let (destination, destination_type) = match &b.destination {
                        Destination::Queue(q) => (q.as_str(), "queue"),
                        Destination::Exchange(e) => (e.as_str(), "exchange"),
                    };
                    d.bindings.push(BindingDefinition {
                        source: &b.source,
                        vhost,
                        destination,
                        destination_type,
                        routing_key: &b.routing_key,
                        arguments: &b.arguments,
                    });
                }
            }
        }
    }
    d
}
