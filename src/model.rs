//! What a broker holds: exchanges, queues and bindings with normalised arguments. Both the compiled
//! spec and the live broker are described in these terms, so that they can be compared.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// An x-argument value. RabbitMQ compares every integer width as equal, so one integer type is
/// enough; strings are strings whatever AMQP type carried them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum ArgValue {
    Int(i64),
    Str(String),
}

impl fmt::Display for ArgValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgValue::Int(n) => write!(f, "{n}"),
            ArgValue::Str(s) => write!(f, "\"{s}\""),
        }
    }
}

pub type Arguments = BTreeMap<String, ArgValue>;

/// What a queue is for in its topology.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Role {
    /// Consumers read it; `attempt` is the delivery number its messages are on (chain), or
    /// `None` when every attempt is delivered here (republish).
    Work { attempt: Option<u32> },
    /// Holds messages for one TTL, consumed by no one, then dead-letters them onward.
    Wait { hops: Vec<u32>, delay: String },
    /// Terminal: where messages go after their last attempt.
    DeadLetter,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Queue {
    pub name: String,
    pub durable: bool,
    pub arguments: Arguments,
    pub role: Role,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Exchange {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub durable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Binding {
    /// The exchange.
    pub source: String,
    /// The queue.
    pub destination: String,
    pub routing_key: String,
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {} ({:?})", self.source, self.destination, self.routing_key)
    }
}

/// One thing to declare. A compiled topology lists them sinks first: nothing is declared before
/// the objects its dead letters flow into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "object", rename_all = "snake_case")]
pub enum Object {
    Exchange(Exchange),
    Queue(Queue),
    Binding(Binding),
}

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::Exchange(_) => "exchange",
            Object::Queue(_) => "queue",
            Object::Binding(_) => "binding",
        }
    }

    pub fn name(&self) -> String {
        match self {
            Object::Exchange(e) => e.name.clone(),
            Object::Queue(q) => q.name.clone(),
            Object::Binding(b) => b.to_string(),
        }
    }
}
