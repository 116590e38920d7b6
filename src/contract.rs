//! The consumer contract: what a consumer of a compiled topology must do with a message that
//! failed, attempt by attempt. Derived from the same topology as the objects, so the two cannot
//! disagree. Pure.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{ExchangeName, QueueName};
use crate::spec::{IdempotencyKey, Strategy, Topology, format_duration};

/// The header that carries the delivery number of a republished copy. Not `x-` prefixed:
/// RabbitMQ 4.x owns `x-` headers and ignores an `x-death` a client publishes.
pub const ATTEMPT_HEADER: &str = "hopper-attempt";

#[derive(Debug, Clone, Serialize)]
pub struct Contract {
    pub topology: String,
    pub vhost: String,
    pub strategy: Strategy,
    pub max_attempts: u32,
    /// Where a consumer learns a message's delivery number.
    pub attempt_from: AttemptSource,
    /// The queues consumers read.
    pub consume: Vec<ConsumeQueue>,
    /// What to do when delivery number `attempt` fails.
    pub attempts: Vec<AttemptRule>,
    /// What to do with a message that can never succeed, at any attempt.
    pub poison: Action,
    pub dead_letter_queue: QueueName,
    /// For quorum queues: which answers count toward their delivery limit, by release. Reject,
    /// never nack, what must count.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub delivery_counting: Vec<DeliveryCounting>,
    /// What stays the same on every copy of a message: a consumer handles each key once.
    pub idempotency_key: KeyInContract,
    /// Every point where this topology can deliver a message more than once.
    pub duplicates: Vec<Duplicate>,
}

/// The idempotency key, and whether the spec names it.
#[derive(Debug, Clone, Serialize)]
pub struct KeyInContract {
    #[serde(flatten)]
    pub key: IdempotencyKey,
    /// `idempotency_key` is in the spec. Without it the contract relies on the message id and
    /// nothing says who sets it: `lint` warns (idempotency-key-unstated).
    pub stated: bool,
    /// What producers and consumers must do with it.
    pub rule: &'static str,
}

const KEY_RULE: &str = "the producer sets it once per business event and keeps it when it resends; hopper and the broker carry it unchanged through every retry, redrive and migration; the consumer records it in the same transaction as the message's effect, acks only after the commit, and acks without handling a message whose key is recorded";

/// A point where a message can be delivered twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DuplicateCause {
    /// The consumer (or its connection) died after the effect, before the ack reached the broker.
    ConsumerCrashBeforeAck,
    /// A retry or poison copy was confirmed, and the ack of the original was lost.
    CopyConfirmedAckLost,
    /// `hopper redrive` put a dead letter back in the main queue.
    Redrive,
    /// `apply --migrate` moved the queue's messages, or a message was routed while both the
    /// queue and its holding queue were bound.
    Migration,
    /// `apply` moved a retry binding to a new wait queue (a delay or jitter change): new bound
    /// before old unbound.
    RetryBindingMoved,
    /// A producer resent after a lost publisher confirm.
    ProducerResend,
}

impl DuplicateCause {
    /// A few words for a table; the whole sentence is `Duplicate::when`.
    pub fn label(self) -> &'static str {
        match self {
            DuplicateCause::ConsumerCrashBeforeAck => "consumer gone before its ack",
            DuplicateCause::CopyConfirmedAckLost => "copy confirmed, ack lost",
            DuplicateCause::Redrive => "hopper redrive",
            DuplicateCause::Migration => "apply --migrate",
            DuplicateCause::RetryBindingMoved => "apply moves a retry binding",
            DuplicateCause::ProducerResend => "producer resends",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Duplicate {
    pub cause: DuplicateCause,
    /// The moment it happens.
    pub when: &'static str,
    /// What the consumer then receives.
    pub then: &'static str,
}

/// Every point where a topology of this strategy delivers a message twice, and what the second
/// delivery looks like. The key is the same on each.
pub fn duplicates(t: &Topology) -> Vec<Duplicate> {
    use DuplicateCause::*;
    let mut out = vec![Duplicate {
        cause: ConsumerCrashBeforeAck,
        when: "the consumer or its connection goes away after the message's effect, before its ack reaches the broker",
        then: match t.strategy {
            Strategy::Republish => "the same message again, same hopper-attempt, marked redelivered",
            Strategy::Chain => "the same message again from the same attempt queue, marked redelivered",
            Strategy::Native => {
                "the same message again, marked redelivered; RabbitMQ 4.3 counts a lost connection as a failed delivery, so x-delivery-count is one higher"
            }
        },
    }];
    match t.strategy {
        Strategy::Republish if t.hops() > 0 => out.push(Duplicate {
            cause: CopyConfirmedAckLost,
            when: "a retry copy is confirmed and the ack of the original is lost (the connection goes away in between)",
            then: "the original again at the same attempt, and its copy after the delay at the next attempt",
        }),
        Strategy::Chain => out.push(Duplicate {
            cause: CopyConfirmedAckLost,
            when: "a poison message's copy to the dead-letter exchange is confirmed and the ack of the original is lost",
            then: "the original again at the same attempt; its copy is already in the dead-letter queue",
        }),
        _ => {}
    }
    out.push(Duplicate {
        cause: Redrive,
        when: "`hopper redrive` acks a dead letter only once its copy in the main queue is confirmed: a run stopped in between leaves it in both, and the next run redrives it again",
        then: "the message again from attempt 1, with its key; a copy may also stay in the dead-letter queue",
    });
    out.push(Duplicate {
        cause: Migration,
        when: "`apply --migrate` acks each batch at its source only once its copies are confirmed: a run killed in between leaves the batch in both queues (counted in possible_duplicates); and a message routed while the queue and its holding queue are both bound reaches both",
        then: "the same message again, with every header and property but the broker's per-delivery ones; the attempt count may start again",
    });
    if t.uses_retry_exchange() {
        out.push(Duplicate {
            cause: RetryBindingMoved,
            when: "`apply` changes a delay or the jitter: the new wait queue is bound before the old one is unbound, so a retry routed in between waits in both",
            then: "the retry twice, each after its own delay",
        });
    }
    out.push(Duplicate {
        cause: ProducerResend,
        when: "a producer resends a message whose publisher confirm it did not get",
        then: "the message twice from attempt 1: the same business event only if the producer kept its key",
    });
    out
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum AttemptSource {
    /// The header's integer value; a message without it is on attempt 1.
    Header { header: String },
    /// The queue it was delivered from, as listed in `consume`.
    Queue,
    /// The broker's count of failed deliveries so far, plus one; a message without it is on
    /// attempt 1 (native retry, RabbitMQ 4.3).
    DeliveryCount { header: String },
}

/// What makes a quorum queue count a delivery toward its delivery limit, on some releases.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryCounting {
    pub releases: &'static str,
    pub counted: &'static str,
    pub not_counted: &'static str,
    /// The limit when a queue sets none.
    pub default_limit: Option<i64>,
}

/// By release, from the release notes and measured on 3.10, 4.0 and 4.3 (the hazard tests).
pub fn delivery_counting() -> Vec<DeliveryCounting> {
    vec![
        DeliveryCounting {
            releases: "3.x",
            counted: "basic.reject or basic.nack with requeue, a consumer crash or closed channel",
            not_counted: "",
            default_limit: None,
        },
        DeliveryCounting {
            releases: "4.0 to 4.2",
            counted: "basic.reject or basic.nack with requeue, a consumer crash or closed channel",
            not_counted: "",
            default_limit: Some(20),
        },
        DeliveryCounting {
            releases: "4.3 and later",
            counted: "basic.reject (with or without requeue), a consumer crash or lost connection",
            not_counted: "basic.nack with requeue and consumer timeouts: a consumer that nacks a poison message redelivers it forever",
            default_limit: Some(20),
        },
    ]
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConsumeQueue {
    pub queue: QueueName,
    /// The delivery number of every message in this queue; absent when it carries every attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRule {
    pub attempt: u32,
    pub on_failure: Action,
    /// Where the message goes next, when there is a next attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Retry {
    /// With jitter, the first bucket's: the shortest wait.
    pub wait_queue: QueueName,
    pub delay: String,
    pub delay_ms: u64,
    /// The queue the next delivery comes from.
    pub redelivered_from: QueueName,
    /// With jitter: every bucket of the hop, one of which the consumer picks at random.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<Bucket>,
}

/// One of a jittered hop's wait queues, and the routing key that reaches it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bucket {
    pub routing_key: String,
    pub wait_queue: QueueName,
    pub delay: String,
    pub delay_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Publish a copy (same body and properties, without `expiration`, with `headers` set) with
    /// publisher confirms and `mandatory`; ack the original only once the copy is confirmed and
    /// was not returned. If it is returned or nacked, do not ack: reject with requeue.
    Publish {
        exchange: ExchangeName,
        /// With jitter, the first of `routing_keys`.
        routing_key: String,
        /// With jitter: pick one of these at random, uniformly, for each copy, so that the
        /// messages of one outage do not all come back in the same second.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        routing_keys: Vec<String>,
        headers: BTreeMap<String, i64>,
        mandatory: bool,
        confirm: bool,
        remove_properties: Vec<String>,
        then: String,
        /// Where the copy lands.
        reaches: QueueName,
    },
    /// `basic.reject` (or `basic.nack`) with `requeue = false`: the broker dead-letters it.
    Reject { requeue: bool, reaches: QueueName },
}

impl Action {
    pub fn describe(&self) -> String {
        match self {
            Action::Publish { exchange, routing_key, routing_keys, headers, .. } => {
                let headers: String = headers.iter().map(|(k, v)| format!(", header {k}={v}")).collect();
                let key = match routing_keys.as_slice() {
                    [] => format!("routing key `{routing_key}`"),
                    keys => format!("a routing key picked at random from `{}`", keys.join("`, `")),
                };
                format!(
                    "publish a copy to exchange `{exchange}` with {key}{headers}, mandatory and confirmed; then ack"
                )
            }
            Action::Reject { requeue: false, .. } => "reject (requeue=false)".to_string(),
            Action::Reject { requeue: true, .. } => {
                "basic.reject with requeue=true (not basic.nack, which RabbitMQ 4.3 does not count)".to_string()
            }
        }
    }

    pub fn reaches(&self) -> &QueueName {
        match self {
            Action::Publish { reaches, .. } | Action::Reject { reaches, .. } => reaches,
        }
    }
}

/// What changed for a topology's consumers between two specs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum ContractChange {
    /// The topology is new: nothing consumed it before.
    Added,
    /// The spec no longer has it.
    Removed,
    Changed {
        parts: Vec<Part>,
    },
}

/// One part of a contract that differs, before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "part", rename_all = "snake_case")]
pub enum Part {
    Consume {
        before: Vec<ConsumeQueue>,
        after: Vec<ConsumeQueue>,
    },
    AttemptFrom {
        before: AttemptSource,
        after: AttemptSource,
    },
    /// Attempt `attempt` as each spec has it; `None` where that spec has no such attempt.
    Attempt {
        attempt: u32,
        before: Option<AttemptRule>,
        after: Option<AttemptRule>,
    },
    Poison {
        before: Action,
        after: Action,
    },
    IdempotencyKey {
        before: IdempotencyKey,
        after: IdempotencyKey,
    },
}

/// What a consumer must do differently under `after` than under `before`; empty when nothing.
pub fn changes(before: &Contract, after: &Contract) -> Vec<Part> {
    let mut parts = Vec::new();
    if before.consume != after.consume {
        parts.push(Part::Consume { before: before.consume.clone(), after: after.consume.clone() });
    }
    if before.attempt_from != after.attempt_from {
        parts.push(Part::AttemptFrom { before: before.attempt_from.clone(), after: after.attempt_from.clone() });
    }
    let rule = |c: &Contract, n: u32| c.attempts.iter().find(|r| r.attempt == n).cloned();
    for attempt in 1..=before.max_attempts.max(after.max_attempts) {
        let (b, a) = (rule(before, attempt), rule(after, attempt));
        if b != a {
            parts.push(Part::Attempt { attempt, before: b, after: a });
        }
    }
    if before.poison != after.poison {
        parts.push(Part::Poison { before: before.poison.clone(), after: after.poison.clone() });
    }
    if before.idempotency_key.key != after.idempotency_key.key {
        parts.push(Part::IdempotencyKey {
            before: before.idempotency_key.key.clone(),
            after: after.idempotency_key.key.clone(),
        });
    }
    parts
}

pub fn contract(t: &Topology) -> Contract {
    let attempts = (1..=t.max_attempts)
        .map(|attempt| {
            let last = attempt == t.max_attempts;
            let buckets: Vec<Bucket> = match (t.jitter, last) {
                (Some(_), false) => t
                    .bucket_delays(attempt)
                    .into_iter()
                    .enumerate()
                    .map(|(i, delay)| Bucket {
                        routing_key: t.bucket_key(attempt, i as u32 + 1),
                        wait_queue: t.wait_queue_for(attempt, delay),
                        delay: format_duration(delay),
                        delay_ms: delay.as_millis() as u64,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let routing_keys: Vec<String> = buckets.iter().map(|b| b.routing_key.clone()).collect();
            let retry = (!last).then(|| Retry {
                wait_queue: t.wait_queue(attempt),
                delay: format_duration(t.delay(attempt)),
                delay_ms: t.delay(attempt).as_millis() as u64,
                redelivered_from: t.work_queue(attempt + 1),
                buckets: buckets.clone(),
            });
            let on_failure = match (t.strategy, last) {
                (Strategy::Republish, false) => Action::Publish {
                    exchange: t.retry_exchange.clone(),
                    routing_key: t.bucket_key(attempt, 1),
                    routing_keys,
                    headers: BTreeMap::from([(ATTEMPT_HEADER.to_string(), i64::from(attempt) + 1)]),
                    mandatory: true,
                    confirm: true,
                    remove_properties: vec!["expiration".into()],
                    then: "ack".into(),
                    reaches: t.wait_queue(attempt),
                },
                (Strategy::Chain, false) => Action::Reject { requeue: false, reaches: t.wait_queue(attempt) },
                // The broker holds it back for the delay, then delivers it again.
                (Strategy::Native, false) => Action::Reject { requeue: true, reaches: t.queue.clone() },
                (_, true) => Action::Reject { requeue: false, reaches: t.dead_letter_queue.clone() },
            };
            AttemptRule { attempt, on_failure, retry }
        })
        .collect();
    let (attempt_from, consume, poison) = match t.strategy {
        Strategy::Republish => (
            AttemptSource::Header { header: ATTEMPT_HEADER.into() },
            vec![ConsumeQueue { queue: t.queue.clone(), attempt: None }],
            Action::Reject { requeue: false, reaches: t.dead_letter_queue.clone() },
        ),
        Strategy::Native => (
            AttemptSource::DeliveryCount { header: "x-delivery-count".into() },
            vec![ConsumeQueue { queue: t.queue.clone(), attempt: None }],
            Action::Reject { requeue: false, reaches: t.dead_letter_queue.clone() },
        ),
        Strategy::Chain => (
            AttemptSource::Queue,
            (1..=t.max_attempts).map(|a| ConsumeQueue { queue: t.work_queue(a), attempt: Some(a) }).collect(),
            // A reject would only move it to the next hop; skip the hops by publishing.
            Action::Publish {
                exchange: t.dead_letter_exchange.clone(),
                routing_key: t.dead_letter_queue.to_string(),
                routing_keys: Vec::new(),
                headers: BTreeMap::new(),
                mandatory: true,
                confirm: true,
                remove_properties: vec!["expiration".into()],
                then: "ack".into(),
                reaches: t.dead_letter_queue.clone(),
            },
        ),
    };
    Contract {
        topology: t.name.clone(),
        vhost: t.vhost.clone(),
        strategy: t.strategy,
        max_attempts: t.max_attempts,
        attempt_from,
        consume,
        attempts,
        poison,
        dead_letter_queue: t.dead_letter_queue.clone(),
        delivery_counting: if t.queue_type == crate::spec::QueueType::Quorum {
            delivery_counting()
        } else {
            Vec::new()
        },
        idempotency_key: KeyInContract {
            key: t.idempotency_key.clone().unwrap_or(IdempotencyKey::MessageId),
            stated: t.idempotency_key.is_some(),
            rule: KEY_RULE,
        },
        duplicates: duplicates(t),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::*;
    use crate::compile::{CompiledTopology, compile_topology};
    use crate::model::{ArgValue, Object, Queue, Role};
    use crate::spec;

    fn topology(toml: &str) -> Topology {
        spec::one(toml)
    }

    fn queue<'c>(c: &'c CompiledTopology, name: &str) -> &'c Queue {
        let found: Vec<_> = c
            .objects
            .iter()
            .filter_map(|o| match o {
                Object::Queue(q) if q.name == name => Some(q),
                _ => None,
            })
            .collect();
        assert_eq!(found.len(), 1, "expected exactly one queue `{name}` in the compiled model");
        found[0]
    }

    fn arg<'q>(q: &'q Queue, key: &str) -> Option<&'q ArgValue> {
        q.arguments.get(key)
    }

    /// The queues a message published to `exchange` with `key` reaches in the compiled model
    /// (`""` is the default exchange: the queue named `key`). Hopper's retry and dead-letter
    /// exchanges are direct, so a binding matches on its exact key.
    fn routes(c: &CompiledTopology, exchange: &str, key: &str) -> Vec<String> {
        if exchange.is_empty() {
            return c
                .objects
                .iter()
                .filter_map(|o| match o {
                    Object::Queue(q) if q.name == key => Some(q.name.to_string()),
                    _ => None,
                })
                .collect();
        }
        let kind = c.objects.iter().find_map(|o| match o {
            Object::Exchange(e) if e.name == exchange => Some(e.kind.to_string()),
            _ => None,
        });
        assert_eq!(kind.as_deref(), Some("direct"), "exchange `{exchange}` is not a declared direct exchange");
        c.objects
            .iter()
            .filter_map(|o| match o {
                Object::Binding(b) if b.source == exchange && b.routing_key == key => {
                    Some(b.destination.name().to_string())
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn jittered_republish_offers_every_bucket_and_each_key_reaches_its_wait_queue_only() {
        let t = topology(
            "[topology.orders]\ndelays = [\"10s\", \"1m\"]\nmax_attempts = 3\njitter = 0.3\njitter_buckets = 4\n",
        );
        let c = compile_topology(&t);
        let k = contract(&t);
        for rule in &k.attempts[..2] {
            let Action::Publish { exchange, routing_key, routing_keys, .. } = &rule.on_failure else {
                panic!("{:?}", rule.on_failure)
            };
            let retry = rule.retry.as_ref().unwrap();
            assert_eq!(routing_keys.len(), 4);
            assert_eq!(routing_key, &routing_keys[0]);
            let base = t.delay(rule.attempt).as_millis() as u64;
            for (key, bucket) in routing_keys.iter().zip(&retry.buckets) {
                assert_eq!(key, &bucket.routing_key);
                assert_eq!(routes(&c, exchange, key), [bucket.wait_queue.to_string()], "{key}");
                let ttl = arg(queue(&c, &bucket.wait_queue), "x-message-ttl");
                assert_eq!(ttl, Some(&ArgValue::Int(bucket.delay_ms as i64)));
                assert!((base..=base * 13 / 10).contains(&bucket.delay_ms), "{} outside the spread", bucket.delay_ms);
                // Back where it came from, through the return binding: never anywhere else.
                assert_eq!(dead_letter_route(&c, &bucket.wait_queue), "orders");
            }
            let delays: Vec<u64> = retry.buckets.iter().map(|b| b.delay_ms).collect();
            assert_eq!(delays.first(), Some(&base));
            assert_eq!(delays.last(), Some(&(base * 13 / 10)));
        }
        // Without jitter, nothing changes: one key per hop, no buckets.
        let plain = contract(&topology("[topology.orders]\ndelays = [\"10s\"]\n"));
        let Action::Publish { routing_key, routing_keys, .. } = &plain.attempts[0].on_failure else { panic!() };
        assert_eq!((routing_key.as_str(), routing_keys.len()), ("1", 0));
        assert!(plain.attempts[0].retry.as_ref().unwrap().buckets.is_empty());
    }

    /// The one queue a message rejected (or expired) from `queue` dead-letters into, per the model.
    fn dead_letter_route(c: &CompiledTopology, queue_name: &str) -> String {
        let q = queue(c, queue_name);
        let (Some(ArgValue::Str(dlx)), Some(ArgValue::Str(dlrk))) =
            (arg(q, "x-dead-letter-exchange"), arg(q, "x-dead-letter-routing-key"))
        else {
            panic!("queue `{queue_name}` does not dead-letter: {:?}", q.arguments);
        };
        match routes(c, dlx, dlrk).as_slice() {
            [one] => one.clone(),
            other => panic!("queue `{queue_name}` dead-letters to {other:?}, want exactly one queue"),
        }
    }

    fn ttl_ms(c: &CompiledTopology, queue_name: &str) -> u64 {
        match arg(queue(c, queue_name), "x-message-ttl") {
            Some(ArgValue::Int(ms)) => *ms as u64,
            other => panic!("wait queue `{queue_name}` has TTL {other:?}"),
        }
    }

    const REPUBLISH: &str = r#"
        [topology.orders]
        routing_keys = ["order.created", "order.paid"]
        delays = ["5s", "5s", "30s"]
        max_attempts = 5
    "#;

    const CHAIN: &str = r#"
        [topology.orders]
        strategy = "chain"
        delays = ["1s", "2s", "3s"]
        max_attempts = 4
    "#;

    #[test]
    fn republish_contract_publishes_to_the_wait_queue_the_model_binds() {
        let t = topology(REPUBLISH);
        let c = compile_topology(&t);
        let k = contract(&t);

        assert_eq!(k.topology, "orders");
        assert_eq!(k.vhost, "/");
        assert_eq!(k.strategy, Strategy::Republish);
        assert_eq!(k.max_attempts, 5);
        assert_eq!(k.dead_letter_queue, "orders.dlq");
        assert!(matches!(&k.attempt_from, AttemptSource::Header { header } if header == ATTEMPT_HEADER));
        assert_eq!(ATTEMPT_HEADER, "hopper-attempt");
        assert!(!ATTEMPT_HEADER.starts_with("x-"));
        assert_eq!(k.consume.len(), 1);
        assert_eq!((k.consume[0].queue.as_str(), k.consume[0].attempt), ("orders", None));
        assert_eq!(queue(&c, "orders").role, Role::Work { attempt: None });

        assert_eq!(k.attempts.iter().map(|a| a.attempt).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        for rule in &k.attempts[..4] {
            let n = rule.attempt;
            let Action::Publish {
                exchange,
                routing_key,
                headers,
                mandatory,
                confirm,
                remove_properties,
                then,
                reaches,
                ..
            } = &rule.on_failure
            else {
                panic!("attempt {n}: want a publish, got {:?}", rule.on_failure);
            };
            assert_eq!(exchange, "orders.retry", "attempt {n}");
            assert_eq!(routing_key, &n.to_string(), "attempt {n}");
            assert_eq!(headers, &BTreeMap::from([("hopper-attempt".to_string(), i64::from(n) + 1)]), "attempt {n}");
            assert!(*mandatory && *confirm, "attempt {n}");
            assert!(remove_properties.iter().any(|p| p == "expiration"), "attempt {n}");
            assert_eq!(then, "ack");
            // Cross-check with the compiled model: the copy lands in the wait queue bound to the key.
            assert_eq!(routes(&c, exchange, routing_key), std::slice::from_ref(reaches), "attempt {n}");
            assert!(
                matches!(&queue(&c, reaches).role, Role::Wait { hops, .. } if hops.contains(&n)),
                "attempt {n}: {reaches} is not the wait queue of hop {n}"
            );
            assert_eq!(rule.on_failure.reaches(), reaches);
            assert!(rule.on_failure.describe().contains("orders.retry"));

            let retry = rule.retry.as_ref().unwrap_or_else(|| panic!("attempt {n} has no retry"));
            assert_eq!(&retry.wait_queue, reaches);
            assert_eq!(retry.delay_ms, ttl_ms(&c, reaches), "attempt {n}");
            assert_eq!(retry.delay, crate::spec::format_duration(std::time::Duration::from_millis(retry.delay_ms)));
            assert_eq!(retry.redelivered_from, dead_letter_route(&c, reaches), "attempt {n}");
            assert_eq!(retry.redelivered_from, "orders");
        }
        let reaches: Vec<_> = k.attempts[..4].iter().map(|a| a.on_failure.reaches().to_string()).collect();
        assert_eq!(reaches, ["orders.wait-5s", "orders.wait-5s", "orders.wait-30s", "orders.wait-30s"]);

        let last = &k.attempts[4];
        assert!(last.retry.is_none());
        assert!(matches!(&last.on_failure, Action::Reject { requeue: false, reaches } if reaches == "orders.dlq"));
        assert_eq!(dead_letter_route(&c, "orders"), *last.on_failure.reaches());
        assert!(matches!(&k.poison, Action::Reject { requeue: false, reaches } if reaches == "orders.dlq"));
        assert_eq!(k.poison.describe(), "reject (requeue=false)");
    }

    #[test]
    fn chain_contract_rejects_into_the_wait_queue_the_model_routes_to() {
        let t = topology(CHAIN);
        let c = compile_topology(&t);
        let k = contract(&t);

        assert!(matches!(k.attempt_from, AttemptSource::Queue));
        assert_eq!(k.strategy, Strategy::Chain);
        // Every work queue of the model, with its attempt, and nothing else.
        let consumed: BTreeSet<_> = k.consume.iter().map(|q| (q.queue.clone(), q.attempt)).collect();
        let work: BTreeSet<_> = c
            .objects
            .iter()
            .filter_map(|o| match o {
                Object::Queue(Queue { name, role: Role::Work { attempt }, .. }) => Some((name.clone(), *attempt)),
                _ => None,
            })
            .collect();
        assert_eq!(consumed, work);
        assert_eq!(consumed.len(), k.consume.len());
        let attempts: Vec<_> = k.consume.iter().map(|q| q.attempt).collect();
        assert_eq!(attempts, [Some(1), Some(2), Some(3), Some(4)]);
        let consumed_at = |a: u32| k.consume.iter().find(|q| q.attempt == Some(a)).map(|q| q.queue.clone()).unwrap();

        assert_eq!(k.attempts.len(), 4);
        for rule in &k.attempts[..3] {
            let n = rule.attempt;
            let Action::Reject { requeue, reaches } = &rule.on_failure else {
                panic!("attempt {n}: want a reject, got {:?}", rule.on_failure);
            };
            assert!(!requeue, "attempt {n}");
            // Cross-check: a reject from this attempt's queue dead-letters exactly there.
            assert_eq!(&dead_letter_route(&c, &consumed_at(n)), reaches, "attempt {n}");
            assert_eq!(
                queue(&c, reaches).role,
                Role::Wait { hops: vec![n], delay: rule.retry.as_ref().unwrap().delay.clone() }
            );
            let retry = rule.retry.as_ref().unwrap();
            assert_eq!(&retry.wait_queue, reaches);
            assert_eq!(retry.delay_ms, ttl_ms(&c, reaches));
            assert_eq!(retry.redelivered_from, dead_letter_route(&c, reaches), "attempt {n}");
            assert_eq!(retry.redelivered_from, consumed_at(n + 1), "attempt {n}");
        }
        let delays: Vec<_> = k.attempts[..3].iter().map(|a| a.retry.as_ref().unwrap().delay_ms).collect();
        assert_eq!(delays, [1_000, 2_000, 3_000]);

        let last = &k.attempts[3];
        assert!(last.retry.is_none());
        assert!(matches!(&last.on_failure, Action::Reject { requeue: false, reaches } if reaches == "orders.dlq"));
        assert_eq!(dead_letter_route(&c, &consumed_at(4)), "orders.dlq");

        let Action::Publish { exchange, routing_key, mandatory, confirm, reaches, headers, .. } = &k.poison else {
            panic!("chain poison must skip the hops by publishing, got {:?}", k.poison);
        };
        assert_eq!(exchange, "orders.dlx");
        assert_eq!(routing_key, "orders.dlq");
        assert_eq!(reaches, "orders.dlq");
        assert!(*mandatory && *confirm);
        assert!(headers.is_empty());
        assert_eq!(routes(&c, exchange, routing_key), std::slice::from_ref(reaches));
    }

    #[test]
    fn a_single_attempt_contract_has_only_the_reject() {
        for strategy in ["republish", "chain"] {
            let t = topology(&format!("[topology.orders]\nstrategy = \"{strategy}\"\nmax_attempts = 1\n"));
            let c = compile_topology(&t);
            let k = contract(&t);
            assert_eq!(k.attempts.len(), 1);
            assert!(k.attempts[0].retry.is_none());
            assert!(
                matches!(&k.attempts[0].on_failure, Action::Reject { requeue: false, reaches } if reaches == "orders.dlq")
            );
            assert_eq!(dead_letter_route(&c, "orders"), "orders.dlq", "{strategy}");
        }
    }

    #[test]
    fn contract_json_shape() {
        let t = topology(
            r#"
            [topology.orders]
            delays = ["5s"]
            max_attempts = 2
        "#,
        );
        let value = serde_json::to_value(contract(&t)).expect("serializable");
        assert_eq!(
            value,
            json!({
                "topology": "orders",
                "vhost": "/",
                "strategy": "republish",
                "max_attempts": 2,
                "attempt_from": { "from": "header", "header": "hopper-attempt" },
                "consume": [{ "queue": "orders" }],
                "attempts": [
                    {
                        "attempt": 1,
                        "on_failure": {
                            "action": "publish",
                            "exchange": "orders.retry",
                            "routing_key": "1",
                            "headers": { "hopper-attempt": 2 },
                            "mandatory": true,
                            "confirm": true,
                            "remove_properties": ["expiration"],
                            "then": "ack",
                            "reaches": "orders.wait-5s"
                        },
                        "retry": {
                            "wait_queue": "orders.wait-5s",
                            "delay": "5s",
                            "delay_ms": 5000,
                            "redelivered_from": "orders"
                        }
                    },
                    {
                        "attempt": 2,
                        "on_failure": { "action": "reject", "requeue": false, "reaches": "orders.dlq" }
                    }
                ],
                "poison": { "action": "reject", "requeue": false, "reaches": "orders.dlq" },
                "dead_letter_queue": "orders.dlq",
                "delivery_counting": serde_json::to_value(delivery_counting()).unwrap(),
                "idempotency_key": { "from": "message_id", "stated": false, "rule": KEY_RULE },
                "duplicates": serde_json::to_value(duplicates(&t)).unwrap()
            })
        );
        // A nack must never be what a consumer relies on: RabbitMQ 4.3 does not count it.
        assert!(value["delivery_counting"][2]["not_counted"].as_str().unwrap().contains("basic.nack"));
    }

    /// Each strategy names the points where it can deliver twice, and they are the ones it has:
    /// a consumer's lost ack everywhere, a lost ack after a confirmed copy only where the
    /// consumer publishes copies, a binding move only where there are wait queues.
    #[test]
    fn every_strategy_names_its_duplicates_and_the_key_that_tells_them_apart() {
        use DuplicateCause::*;
        let causes = |toml: &str| {
            let k = contract(&topology(toml));
            let value = serde_json::to_value(&k).unwrap();
            let causes: Vec<String> =
                value["duplicates"].as_array().unwrap().iter().map(|d| d["cause"].as_str().unwrap().into()).collect();
            (k.duplicates.iter().map(|d| d.cause).collect::<Vec<_>>(), causes, value["idempotency_key"].clone())
        };
        let all = [ConsumerCrashBeforeAck, CopyConfirmedAckLost, Redrive, Migration, RetryBindingMoved, ProducerResend];
        let (republish, names, key) = causes("[topology.orders]\ndelays = [\"1s\"]\n");
        assert_eq!(republish, all);
        assert_eq!(names[..2], ["consumer_crash_before_ack", "copy_confirmed_ack_lost"]);
        assert_eq!(key, json!({ "from": "message_id", "stated": false, "rule": KEY_RULE }));
        // No retry: no copy, no wait queue; the rest remains.
        let (single, _, _) = causes("[topology.orders]\nmax_attempts = 1\n");
        assert_eq!(single, [ConsumerCrashBeforeAck, Redrive, Migration, ProducerResend]);
        // Chain: the consumer publishes only a poison message's copy.
        let (chain, _, key) = causes(
            "[topology.orders]\nstrategy = \"chain\"\ndelays = [\"1s\"]\nidempotency_key = { header = \"order-id\" }\n",
        );
        assert_eq!(chain, all);
        assert_eq!(key, json!({ "from": "header", "header": "order-id", "stated": true, "rule": KEY_RULE }));
        let k = contract(&topology("[topology.orders]\nstrategy = \"chain\"\ndelays = [\"1s\"]\n"));
        assert!(k.duplicates[1].when.contains("poison"), "{:?}", k.duplicates[1]);
        // Native: the broker redelivers; nothing is copied or bound.
        let (native, _, key) =
            causes("[topology.orders]\nstrategy = \"native\"\ndelays = [\"1s\"]\nidempotency_key = \"message_id\"\n");
        assert_eq!(native, [ConsumerCrashBeforeAck, Redrive, Migration, ProducerResend]);
        assert_eq!(key["stated"], true);
    }

    #[test]
    fn native_contract_rejects_with_requeue_and_counts_from_the_broker() {
        let t = topology(
            "[topology.orders]\nstrategy = \"native\"\nbackoff = { initial = \"1s\", max = \"4s\", shape = \"linear\" }\nmax_attempts = 3\n",
        );
        let value = serde_json::to_value(contract(&t)).expect("serializable");
        assert_eq!(value["attempt_from"], json!({ "from": "delivery_count", "header": "x-delivery-count" }));
        assert_eq!(value["consume"], json!([{ "queue": "orders" }]));
        for (n, delay) in [(0, "1s"), (1, "2s")] {
            assert_eq!(
                value["attempts"][n]["on_failure"],
                json!({ "action": "reject", "requeue": true, "reaches": "orders" })
            );
            assert_eq!(value["attempts"][n]["retry"]["delay"], delay);
        }
        assert_eq!(
            value["attempts"][2]["on_failure"],
            json!({ "action": "reject", "requeue": false, "reaches": "orders.dlq" })
        );
    }

    #[test]
    fn chain_contract_json_names_the_queue_as_the_attempt_source() {
        let value = serde_json::to_value(contract(&topology(CHAIN))).expect("serializable");
        assert_eq!(value["strategy"], "chain");
        assert_eq!(value["attempt_from"], json!({ "from": "queue" }));
        assert_eq!(value["consume"][1], json!({ "queue": "orders.attempt-2", "attempt": 2 }));
        assert_eq!(
            value["attempts"][0]["on_failure"],
            json!({ "action": "reject", "requeue": false, "reaches": "orders.hop-1.wait-1s" })
        );
        assert_eq!(value["attempts"][0]["retry"]["redelivered_from"], "orders.attempt-2");
        assert_eq!(value["poison"]["action"], "publish");
        assert_eq!(value["poison"]["exchange"], "orders.dlx");
        assert_eq!(value["poison"]["headers"], json!({}));
        assert!(value["attempts"][3].get("retry").is_none());
    }

    /// Jitter added and `max_attempts` lowered: every retry's routing keys change and the last
    /// hop becomes a reject; the same spec changes nothing.
    #[test]
    fn a_contract_change_names_each_attempt_a_consumer_must_handle_differently() {
        let before = contract(&topology("[topology.orders]\ndelays = [\"5s\", \"30s\"]\nmax_attempts = 3\n"));
        assert!(changes(&before, &before).is_empty());
        let after = contract(&topology("[topology.orders]\ndelays = [\"5s\"]\nmax_attempts = 2\njitter = 0.2\n"));
        let attempts: Vec<(u32, bool, bool)> = changes(&before, &after)
            .into_iter()
            .filter_map(|p| match p {
                Part::Attempt { attempt, before, after } => Some((attempt, before.is_some(), after.is_some())),
                _ => None,
            })
            .collect();
        assert_eq!(attempts, [(1, true, true), (2, true, true), (3, true, false)]);
        let strategy = contract(&topology(
            "[topology.orders]\nstrategy = \"chain\"\ndelays = [\"5s\", \"30s\"]\nmax_attempts = 3\n",
        ));
        let parts = changes(&before, &strategy);
        assert!(parts.iter().any(|p| matches!(p, Part::AttemptFrom { .. })), "{parts:?}");
        assert!(parts.iter().any(|p| matches!(p, Part::Consume { .. })), "{parts:?}");
    }
}
