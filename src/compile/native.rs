//! native (RabbitMQ 4.3): the quorum queue delays a retry itself. A consumer rejects a failed
//! message with requeue; the broker redelivers it after min × n (n: its failed deliveries so far),
//! capped at max, and dead-letters it once it has failed max_attempts times. No wait queue, no
//! retry exchange. Only a failed delivery counts (basic.reject, a crash), not a nack.

use super::work_queue_arguments;
use crate::model::{ArgValue, Object, Queue, Role, arg};
use crate::topology::Topology;

/// The arguments of RabbitMQ 4.3's delayed retry.
pub const DELAYED_RETRY_TYPE: &str = "x-delayed-retry-type";
pub const DELAYED_RETRY_MIN: &str = "x-delayed-retry-min";
pub const DELAYED_RETRY_MAX: &str = "x-delayed-retry-max";

pub(super) fn compile(t: &Topology, objects: &mut Vec<Object>) {
    let mut args = work_queue_arguments(t);
    args.insert(arg::DEAD_LETTER_EXCHANGE, ArgValue::Str(t.dead_letter_exchange.shared()));
    args.insert(arg::DEAD_LETTER_ROUTING_KEY, ArgValue::Str(t.dead_letter_queue.shared()));
    if t.hops() > 0 {
        // Validation made the schedule linear: the first delay, growing by itself, capped at the
        // longest.
        let min = t.hop_delays[0];
        let max = t.hop_delays.iter().max().copied().unwrap_or(min);
        // Only failed deliveries wait: a return that is not a failure (a consumer stopping) comes
        // straight back.
        args.insert(DELAYED_RETRY_TYPE, ArgValue::str("failed"));
        args.insert(DELAYED_RETRY_MIN, ArgValue::Int(min.as_millis() as i64));
        args.insert(DELAYED_RETRY_MAX, ArgValue::Int(max.as_millis() as i64));
    }
    objects.push(Object::Queue(Queue {
        name: t.queue.clone(),
        durable: true,
        arguments: args,
        role: Role::Work { attempt: None },
    }));
}
