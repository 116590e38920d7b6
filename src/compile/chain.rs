//! chain: one work queue per attempt; a reject at attempt k dead-letters through the retry
//! exchange (routing key k) into wait queue k, whose TTL dead-letters back through the retry
//! exchange (routing key: the next work queue's name) into the work queue of attempt k+1. Every queue's
//! arguments stay fixed when delays or max_attempts change: only bindings move. No dead-letter cycle exists, so cycle detection can never drop a message.

use super::{binding, exchange, wait_queue, work_queue_arguments};
use crate::model::{ArgValue, ExchangeType, Object, Queue, Role, arg};
use crate::topology::Topology;

pub(super) fn compile(t: &Topology, objects: &mut Vec<Object>) {
    objects.push(exchange(&t.retry_exchange, ExchangeType::Direct));
    objects.push(binding(&t.retry_exchange, &t.dead_letter_queue, t.max_attempts.to_string()));
    for attempt in (1..=t.max_attempts).rev() {
        let work = t.work_queue(attempt);
        let mut args = work_queue_arguments(t);
        args.insert(arg::DEAD_LETTER_EXCHANGE, ArgValue::Str(t.retry_exchange.shared()));
        args.insert(arg::DEAD_LETTER_ROUTING_KEY, ArgValue::str(attempt.to_string()));
        objects.push(Object::Queue(Queue {
            name: work.clone(),
            durable: true,
            arguments: args,
            role: Role::Work { attempt: Some(attempt) },
        }));
        if attempt > 1 {
            let hop = attempt - 1;
            let wait = t.wait_queue(hop);
            let return_key = t.return_key(hop);
            objects.push(binding(&t.retry_exchange, &work, return_key.clone()));
            objects.push(Object::Queue(wait_queue(t, wait.clone(), vec![hop], t.delay(hop), &return_key)));
            objects.push(binding(&t.retry_exchange, &wait, hop.to_string()));
        }
    }
}
