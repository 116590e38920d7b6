//! The consumer contract: what a consumer of a compiled topology must do with a message that
//! failed, attempt by attempt. Derived from the same topology as the objects, so the two cannot
//! disagree. Pure.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::spec::{Strategy, Topology, format_duration};

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
    pub dead_letter_queue: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum AttemptSource {
    /// The header's integer value; a message without it is on attempt 1.
    Header { header: String },
    /// The queue it was delivered from, as listed in `consume`.
    Queue,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConsumeQueue {
    pub queue: String,
    /// The delivery number of every message in this queue; absent when it carries every attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AttemptRule {
    pub attempt: u32,
    pub on_failure: Action,
    /// Where the message goes next, when there is a next attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Retry {
    pub wait_queue: String,
    pub delay: String,
    pub delay_ms: u64,
    /// The queue the next delivery comes from.
    pub redelivered_from: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Publish a copy (same body and properties, without `expiration`, with `headers` set) with
    /// publisher confirms and `mandatory`; ack the original only once the copy is confirmed and
    /// was not returned. If it is returned or nacked, do not ack: reject with requeue.
    Publish {
        exchange: String,
        routing_key: String,
        headers: BTreeMap<String, i64>,
        mandatory: bool,
        confirm: bool,
        remove_properties: Vec<String>,
        then: String,
        /// Where the copy lands.
        reaches: String,
    },
    /// `basic.reject` (or `basic.nack`) with `requeue = false`: the broker dead-letters it.
    Reject { requeue: bool, reaches: String },
}

impl Action {
    pub fn describe(&self) -> String {
        match self {
            Action::Publish { exchange, routing_key, headers, .. } => {
                let headers: String = headers.iter().map(|(k, v)| format!(", header {k}={v}")).collect();
                format!(
                    "publish a copy to exchange `{exchange}` with routing key `{routing_key}`{headers}, mandatory and confirmed; then ack"
                )
            }
            Action::Reject { .. } => "reject (requeue=false)".to_string(),
        }
    }

    pub fn reaches(&self) -> &str {
        match self {
            Action::Publish { reaches, .. } | Action::Reject { reaches, .. } => reaches,
        }
    }
}

pub fn contract(t: &Topology) -> Contract {
    let attempts = (1..=t.max_attempts)
        .map(|attempt| {
            let last = attempt == t.max_attempts;
            let retry = (!last).then(|| Retry {
                wait_queue: t.wait_queue(attempt),
                delay: format_duration(t.delay(attempt)),
                delay_ms: t.delay(attempt).as_millis() as u64,
                redelivered_from: t.work_queue(attempt + 1),
            });
            let on_failure = match (t.strategy, last) {
                (Strategy::Republish, false) => Action::Publish {
                    exchange: t.retry_exchange.clone(),
                    routing_key: attempt.to_string(),
                    headers: BTreeMap::from([(ATTEMPT_HEADER.to_string(), i64::from(attempt) + 1)]),
                    mandatory: true,
                    confirm: true,
                    remove_properties: vec!["expiration".into()],
                    then: "ack".into(),
                    reaches: t.wait_queue(attempt),
                },
                (Strategy::Chain, false) => Action::Reject { requeue: false, reaches: t.wait_queue(attempt) },
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
        Strategy::Chain => (
            AttemptSource::Queue,
            (1..=t.max_attempts)
                .map(|a| ConsumeQueue { queue: t.work_queue(a), attempt: Some(a) })
                .collect(),
            // A reject would only move it to the next hop; skip the hops by publishing.
            Action::Publish {
                exchange: t.dead_letter_exchange.clone(),
                routing_key: t.dead_letter_queue.clone(),
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
    }
}
