//! A topology becomes exchanges, queues and bindings (DESIGN.md section 3). Pure.

use serde::Serialize;

use crate::model::{ArgValue, Arguments, Binding, Exchange, Object, Queue, Role};
use crate::spec::{QueueType, Spec, Strategy, Topology, format_duration};

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

pub fn compile(spec: &Spec) -> Vec<CompiledTopology> {
    spec.topologies.iter().map(compile_topology).collect()
}

pub fn compile_topology(t: &Topology) -> CompiledTopology {
    let mut objects = Vec::new();
    let dlq = t.dead_letter_queue.clone();

    // The sink: a terminal queue behind a direct exchange, so a poison message can also be
    // published there by name.
    objects.push(Object::Queue(Queue {
        name: dlq.clone(),
        durable: true,
        arguments: dead_letter_queue_arguments(t),
        role: Role::DeadLetter,
    }));
    objects.push(exchange(&t.dead_letter_exchange, "direct"));
    objects.push(binding(&t.dead_letter_exchange, &dlq, &dlq));

    match t.strategy {
        Strategy::Republish => republish(t, &mut objects),
        Strategy::Chain => chain(t, &mut objects),
    }

    // Producers' entry point last: no message flows in before everything downstream exists.
    objects.push(exchange(&t.exchange, t.exchange_type.as_str()));
    for key in &t.routing_keys {
        objects.push(binding(&t.exchange, &t.queue, key));
    }
    CompiledTopology { topology: t.clone(), objects }
}

/// One work queue; consumers publish a copy to the retry exchange on failure, wait queues
/// dead-letter straight back into the work queue through the default exchange.
fn republish(t: &Topology, objects: &mut Vec<Object>) {
    let mut args = work_queue_arguments(t);
    args.insert("x-dead-letter-exchange".into(), str(&t.dead_letter_exchange));
    args.insert("x-dead-letter-routing-key".into(), str(&t.dead_letter_queue));
    objects.push(Object::Queue(Queue {
        name: t.queue.clone(),
        durable: true,
        arguments: args,
        role: Role::Work { attempt: None },
    }));
    if t.hops() == 0 {
        return;
    }
    // One wait queue per distinct delay: a queue with one TTL releases messages in order.
    let mut waits: Vec<(String, Vec<u32>, std::time::Duration)> = Vec::new();
    for hop in 1..=t.hops() {
        let name = t.wait_queue(hop);
        match waits.iter_mut().find(|(n, _, _)| *n == name) {
            Some((_, hops, _)) => hops.push(hop),
            None => waits.push((name, vec![hop], t.delay(hop))),
        }
    }
    for (name, hops, delay) in &waits {
        objects.push(Object::Queue(wait_queue(t, name, hops.clone(), *delay, &t.queue)));
    }
    objects.push(exchange(&t.retry_exchange, "direct"));
    for (name, hops, _) in &waits {
        for hop in hops {
            objects.push(binding(&t.retry_exchange, name, &hop.to_string()));
        }
    }
}

/// One work queue per attempt; a reject at attempt k dead-letters through the retry exchange
/// (routing key k) into wait queue k, whose TTL dead-letters into the work queue of attempt k+1.
/// Every queue's arguments stay fixed when delays or max_attempts change: only bindings move.
fn chain(t: &Topology, objects: &mut Vec<Object>) {
    objects.push(exchange(&t.retry_exchange, "direct"));
    objects.push(binding(&t.retry_exchange, &t.dead_letter_queue, &t.max_attempts.to_string()));
    for attempt in (1..=t.max_attempts).rev() {
        let work = t.work_queue(attempt);
        let mut args = work_queue_arguments(t);
        args.insert("x-dead-letter-exchange".into(), str(&t.retry_exchange));
        args.insert("x-dead-letter-routing-key".into(), str(&attempt.to_string()));
        objects.push(Object::Queue(Queue {
            name: work.clone(),
            durable: true,
            arguments: args,
            role: Role::Work { attempt: Some(attempt) },
        }));
        if attempt > 1 {
            let hop = attempt - 1;
            let wait = t.wait_queue(hop);
            objects.push(Object::Queue(wait_queue(t, &wait, vec![hop], t.delay(hop), &work)));
            objects.push(binding(&t.retry_exchange, &wait, &hop.to_string()));
        }
    }
}

fn wait_queue(t: &Topology, name: &str, hops: Vec<u32>, delay: std::time::Duration, target: &str) -> Queue {
    let mut args = Arguments::new();
    args.insert("x-queue-type".into(), str(t.queue_type.as_str()));
    args.insert("x-message-ttl".into(), ArgValue::Int(delay.as_millis() as i64));
    // The default exchange delivers to exactly one queue, by name: never a copy to the other
    // queues bound to the main exchange.
    args.insert("x-dead-letter-exchange".into(), str(""));
    args.insert("x-dead-letter-routing-key".into(), str(target));
    at_least_once(t, &mut args);
    Queue { name: name.to_string(), durable: true, arguments: args, role: Role::Wait { hops, delay: format_duration(delay) } }
}

fn work_queue_arguments(t: &Topology) -> Arguments {
    let mut args = Arguments::new();
    args.insert("x-queue-type".into(), str(t.queue_type.as_str()));
    if let Some(limit) = t.delivery_limit {
        args.insert("x-delivery-limit".into(), ArgValue::Int(limit));
    }
    at_least_once(t, &mut args);
    args
}

fn dead_letter_queue_arguments(t: &Topology) -> Arguments {
    let mut args = Arguments::new();
    args.insert("x-queue-type".into(), str(t.queue_type.as_str()));
    if t.queue_type == QueueType::Quorum {
        args.insert("x-delivery-limit".into(), ArgValue::Int(DEAD_LETTER_DELIVERY_LIMIT));
    }
    args
}

/// Quorum queues dead-letter at most once unless told otherwise, and silently stay at most once
/// under the default drop-head overflow.
fn at_least_once(t: &Topology, args: &mut Arguments) {
    if t.queue_type == QueueType::Quorum {
        args.insert("x-dead-letter-strategy".into(), str("at-least-once"));
        args.insert("x-overflow".into(), str("reject-publish"));
    }
}

fn exchange(name: &str, kind: &str) -> Object {
    Object::Exchange(Exchange { name: name.to_string(), kind: kind.to_string(), durable: true })
}

fn binding(source: &str, destination: &str, key: &str) -> Object {
    Object::Binding(Binding { source: source.into(), destination: destination.into(), routing_key: key.into() })
}

fn str(s: &str) -> ArgValue {
    ArgValue::Str(s.to_string())
}
