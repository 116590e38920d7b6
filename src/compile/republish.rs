//! republish: one work queue; consumers publish a copy to the retry exchange on failure, and
//! wait queues dead-letter back into the work queue through the retry exchange's `return` binding.

use super::{binding, exchange, wait_queue, work_queue_arguments};
use crate::model::{ArgValue, ExchangeType, Object, Queue, QueueName, Role, arg};
use crate::topology::Topology;

pub(super) fn compile(t: &Topology, objects: &mut Vec<Object>) {
    let mut args = work_queue_arguments(t);
    args.insert(arg::DEAD_LETTER_EXCHANGE, ArgValue::Str(t.dead_letter_exchange.shared()));
    args.insert(arg::DEAD_LETTER_ROUTING_KEY, ArgValue::Str(t.dead_letter_queue.shared()));
    objects.push(Object::Queue(Queue {
        name: t.queue.clone(),
        durable: true,
        arguments: args,
        role: Role::Work { attempt: None },
    }));
    if t.hops() == 0 {
        return;
    }
    // One wait queue per distinct delay: a queue with one TTL releases messages in order. With
    // jitter a hop has a delay per bucket, each bound with its own routing key.
    let mut waits: Vec<(QueueName, Vec<u32>, std::time::Duration, Vec<String>)> = Vec::new();
    for hop in 1..=t.hops() {
        for (i, delay) in t.bucket_delays(hop).into_iter().enumerate() {
            let name = t.wait_queue_for(hop, delay);
            let key = t.bucket_key(hop, i as u32 + 1);
            match waits.iter_mut().find(|(n, _, _, _)| *n == name) {
                Some((_, hops, _, keys)) => {
                    if !hops.contains(&hop) {
                        hops.push(hop);
                    }
                    keys.push(key);
                }
                None => waits.push((name, vec![hop], delay, vec![key])),
            }
        }
    }
    let return_key = t.return_key(1);
    objects.push(exchange(&t.retry_exchange, ExchangeType::Direct));
    objects.push(binding(&t.retry_exchange, &t.queue, return_key.clone()));
    for (name, hops, delay, _) in &mut waits {
        objects.push(Object::Queue(wait_queue(t, name.clone(), std::mem::take(hops), *delay, &return_key)));
    }
    for (name, _, _, keys) in waits {
        for key in keys {
            objects.push(binding(&t.retry_exchange, &name, key));
        }
    }
}
