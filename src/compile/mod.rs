//! A topology becomes exchanges, queues and bindings (DESIGN.md section 3): the sink first, then
//! the strategy's retry path (one file per strategy), then the producers' entry point. Pure.

mod chain;
mod names;
pub mod native;
mod republish;

use std::sync::LazyLock;

use serde::Serialize;

pub use names::{GeneratedName, generated_suffix};

use crate::model::{
    ArgValue, Arguments, Binding, Exchange, ExchangeName, ExchangeType, Object, Queue, QueueName, Role, RoutingKey, arg,
};
use crate::topology::{QueueType, Strategy, Topology};

/// A quorum dead-letter queue's delivery limit. The queue is terminal, so a message over the
/// limit would be dropped. RabbitMQ 4.x applies a default of 20 when none is set, and on 3.10
/// `-1` (meant as "unlimited" on 4.x) drops a message at its first requeue; a limit no operator
/// reaches by peeking is the one value both majors read the same way.
pub const DEAD_LETTER_DELIVERY_LIMIT: i64 = 1_000_000;

#[derive(Debug, Clone, Serialize)]
pub struct CompiledTopology {
    pub topology: Topology,
    pub objects: Vec<Object>,
}

impl CompiledTopology {
    pub fn queues(&self) -> impl Iterator<Item = &Queue> {
        self.objects.iter().filter_map(|o| if let Object::Queue(q) = o { Some(q) } else { None })
    }

    pub fn queue(&self, name: &str) -> Option<&Queue> {
        self.queues().find(|q| q.name == name)
    }
}

pub fn compile_topology(t: &Topology) -> CompiledTopology {
    let mut objects = Vec::new();

    // The sink: a terminal queue behind a direct exchange, so a poison message can also be
    // published there by name.
    objects.push(Object::Queue(Queue {
        name: t.dead_letter_queue.clone(),
        durable: true,
        arguments: dead_letter_queue_arguments(t),
        role: Role::DeadLetter,
    }));
    objects.push(exchange(&t.dead_letter_exchange, ExchangeType::Direct));
    objects.push(binding(&t.dead_letter_exchange, &t.dead_letter_queue, &t.dead_letter_queue));

    match t.strategy {
        Strategy::Republish => republish::compile(t, &mut objects),
        Strategy::Chain => chain::compile(t, &mut objects),
        Strategy::Native => native::compile(t, &mut objects),
    }

    // Producers' entry point last: no message flows in before everything downstream exists.
    objects.push(exchange(&t.exchange, t.exchange_type.into()));
    for key in &t.routing_keys {
        objects.push(binding(&t.exchange, &t.queue, key.as_str()));
    }
    CompiledTopology { topology: t.clone(), objects }
}

/// A queue that holds messages for `delay`, consumed by no one, then dead-letters them to the
/// retry exchange with `return_key`, which one binding routes to the queue the message returns
/// to: never the main exchange, which would copy the retry to every other queue bound there.
/// Through a binding rather than the default exchange, so that `apply --migrate` can point the
/// return at another queue while it switches the target's arguments: a dead letter sent to a
/// queue name that does not exist for a moment is dropped by the broker.
fn wait_queue(
    t: &Topology,
    name: QueueName,
    hops: Vec<u32>,
    delay: std::time::Duration,
    return_key: &RoutingKey,
) -> Queue {
    let args = [
        (arg::QUEUE_TYPE, queue_type(t)),
        (arg::MESSAGE_TTL, ArgValue::Int(delay.as_millis() as i64)),
        (arg::DEAD_LETTER_EXCHANGE, ArgValue::Str(t.retry_exchange.shared())),
        (arg::DEAD_LETTER_ROUTING_KEY, ArgValue::Str(return_key.shared())),
    ];
    // Collected once, not inserted one by one: each insert searches and shifts the list.
    let args = args.into_iter().chain(at_least_once(t)).collect();
    Queue {
        name,
        durable: true,
        arguments: args,
        role: Role::Wait { hops, delay: crate::topology::duration::format_duration(delay) },
    }
}

/// A wait queue as hopper 0.1 declared it: dead-lettering through the default exchange straight
/// to `target`. It works as the current shape does, so it is in sync, but `apply --migrate`
/// cannot re-point it; `None` when `q` is not a wait queue.
pub fn legacy_wait_queue(q: &Queue, target: &QueueName) -> Option<Queue> {
    let Role::Wait { .. } = q.role else { return None };
    let mut legacy = q.clone();
    legacy.arguments.insert(arg::DEAD_LETTER_EXCHANGE, str(""));
    legacy.arguments.insert(arg::DEAD_LETTER_ROUTING_KEY, str(target));
    Some(legacy)
}

fn work_queue_arguments(t: &Topology) -> Arguments {
    let mut args = Arguments::new();
    args.insert(arg::QUEUE_TYPE, queue_type(t));
    if let Some(limit) = t.effective_delivery_limit() {
        args.insert(arg::DELIVERY_LIMIT, ArgValue::Int(limit));
    }
    for (key, value) in at_least_once(t) {
        args.insert(key, value);
    }
    args
}

fn dead_letter_queue_arguments(t: &Topology) -> Arguments {
    let mut args = Arguments::new();
    args.insert(arg::QUEUE_TYPE, queue_type(t));
    if t.queue_type == QueueType::Quorum {
        args.insert(arg::DELIVERY_LIMIT, ArgValue::Int(DEAD_LETTER_DELIVERY_LIMIT));
    }
    args
}

/// Quorum queues dead-letter at most once unless told otherwise, and silently stay at most once
/// under the default drop-head overflow.
fn at_least_once(t: &Topology) -> impl Iterator<Item = (&'static str, ArgValue)> {
    let quorum = t.queue_type == QueueType::Quorum;
    [(arg::DEAD_LETTER_STRATEGY, &AT_LEAST_ONCE), (arg::OVERFLOW, &REJECT_PUBLISH)]
        .into_iter()
        .filter(move |_| quorum)
        .map(|(key, value)| (key, ArgValue::clone(value)))
}

fn exchange(name: &ExchangeName, kind: ExchangeType) -> Object {
    Object::Exchange(Exchange { name: name.clone(), kind, durable: true })
}

fn binding(source: &ExchangeName, destination: &QueueName, key: impl Into<RoutingKey>) -> Object {
    Object::Binding(Binding::to_queue(source.clone(), destination.clone(), key))
}

// The values every queue of a kind has, made once and shared, as the names are: 10,000
// topologies declare 50,000 `x-queue-type`s.
static CLASSIC: LazyLock<ArgValue> = LazyLock::new(|| ArgValue::str(QueueType::Classic.as_str()));
static QUORUM: LazyLock<ArgValue> = LazyLock::new(|| ArgValue::str(QueueType::Quorum.as_str()));
static AT_LEAST_ONCE: LazyLock<ArgValue> = LazyLock::new(|| ArgValue::str("at-least-once"));
static REJECT_PUBLISH: LazyLock<ArgValue> = LazyLock::new(|| ArgValue::str("reject-publish"));

fn queue_type(t: &Topology) -> ArgValue {
    match t.queue_type {
        QueueType::Classic => CLASSIC.clone(),
        QueueType::Quorum => QUORUM.clone(),
    }
}

fn str(s: &str) -> ArgValue {
    ArgValue::str(s)
}

#[cfg(test)]
mod tests;
