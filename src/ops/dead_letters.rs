//! What `inspect` and `redrive` both know of dead letters, without a broker: how they group by
//! their first death, and when reading a queue and giving its messages back could lose some.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::broker::amqp::Peeked;
use crate::model::QueueName;
use crate::network::{DeathReason, Network};
use crate::policy::Setting;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    pub first_death_queue: String,
    /// `None` for messages that never died; shown as `(none)`.
    #[serde(serialize_with = "reason_or_none")]
    pub first_death_reason: Option<DeathReason>,
    pub messages: usize,
    /// Seconds since the epoch of the oldest and newest first deaths in the group.
    pub oldest: Option<u64>,
    pub newest: Option<u64>,
}

/// What a summary shows for a first death's queue or reason it has none of: a message that
/// never died (one published straight to a dead-letter queue).
pub const NONE: &str = "(none)";

impl Group {
    /// The first death's reason as shown: RabbitMQ's name of it, or `(none)`.
    pub fn reason(&self) -> &str {
        self.first_death_reason.as_ref().map_or(NONE, DeathReason::as_str)
    }
}

fn reason_or_none<S: serde::Serializer>(reason: &Option<DeathReason>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(reason.as_ref().map_or(NONE, DeathReason::as_str))
}

/// Why reading a queue's messages and giving them back could lose some: a quorum queue whose
/// delivery limit a message near it would reach by being given back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReachableLimit {
    pub queue: QueueName,
    pub limit: i64,
    /// Where a message that reaches the limit goes: its dead-letter exchange, or `None`, dropped.
    pub dead_letter_exchange: Option<String>,
}

/// What reads a queue and gives its messages back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    Peek,
    Redrive,
}

impl ReachableLimit {
    /// The refusal, as the reader that refuses says it.
    pub fn refusal(&self, reader: Reader) -> String {
        let (queue, limit) = (&self.queue, self.limit);
        let not = match reader {
            Reader::Peek => "not peeking at",
            Reader::Redrive => "not redriving",
        };
        let then = match &self.dead_letter_exchange {
            Some(x) => format!("dead-lettered to `{x}`"),
            None => "dropped".to_string(),
        };
        format!(
            "{not} `{queue}`: it is a quorum queue with a delivery limit of {limit}, and every message a peek gives back counts as a delivery, so messages near the limit would be {then}. Read it with a consumer that acks, or move its messages to a queue without a reachable limit first"
        )
    }
}

/// Why peeking at `queue` could lose a message, if it could. A peek gives every message back;
/// on a quorum queue each return counts as a delivery (RabbitMQ 4.0 to 4.2), so a reachable
/// delivery limit would dead-letter or drop messages.
pub fn peek_refusal(n: &Network, queue: &QueueName) -> Option<ReachableLimit> {
    let q = n.queues.get(queue)?;
    let limit = n.delivery_limit(queue)?;
    if !q.quorum || limit >= 10_000 {
        return None;
    }
    Some(ReachableLimit {
        queue: queue.clone(),
        limit,
        dead_letter_exchange: n.text(queue, Setting::DeadLetterExchange),
    })
}

/// Where a queue puts the messages a reader gives back, as its type decides: a quorum queue at
/// its head in their order, counting a delivery each (on 4.3 not for a nack); a classic queue at
/// their own positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack {
    Quorum,
    Classic,
}

impl GiveBack {
    pub fn of(quorum: bool) -> GiveBack {
        if quorum { GiveBack::Quorum } else { GiveBack::Classic }
    }
}

/// The most messages read with `basic.get` that a quorum queue takes back together in their
/// order. Measured on 3.10.8, 4.0.5 and 4.3.6 with 100: given back by single or multiple nacks,
/// the first 32 or 33 kept their order and the rest came back in none; given back by a closed
/// channel (as a peek does), all of them in another order.
pub const QUORUM_ORDER_KEPT: usize = 32;

/// The queue and reason of a dead letter's first death, and its time (seconds since the epoch):
/// `x-first-death-*` where the broker set them, else the oldest `x-death` entry. Both `None` for
/// a message that never died (one published straight to a dead-letter queue).
pub fn first_death(p: &Peeked) -> (Option<String>, Option<DeathReason>, Option<u64>) {
    let queue = p.first_death_queue.clone().or_else(|| p.deaths.last().map(|d| d.queue.clone()));
    let reason = p.first_death_reason.clone().or_else(|| p.deaths.last().map(|d| d.reason.clone()));
    let time = p
        .deaths
        .iter()
        .find(|d| Some(&d.queue) == queue.as_ref() && Some(&d.reason) == reason.as_ref())
        .and_then(|d| d.time);
    (queue, reason, time)
}

/// Dead letters grouped by the queue and reason of their first death. Pure.
pub fn summarize(peeked: &[Peeked]) -> Vec<Group> {
    // Keyed by the reason's text: groups of as many messages are listed in the order of its name.
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    for p in peeked {
        let (queue, reason, time) = first_death(p);
        let queue = queue.unwrap_or_else(|| NONE.into());
        let key = (queue.clone(), reason.as_ref().map_or(NONE, DeathReason::as_str).to_string());
        let g = groups.entry(key).or_insert(Group {
            first_death_queue: queue,
            first_death_reason: reason,
            messages: 0,
            oldest: None,
            newest: None,
        });
        g.messages += 1;
        if let Some(t) = time {
            g.oldest = Some(g.oldest.map_or(t, |o| o.min(t)));
            g.newest = Some(g.newest.map_or(t, |n| n.max(t)));
        }
    }
    let mut out: Vec<Group> = groups.into_values().collect();
    out.sort_by_key(|g| std::cmp::Reverse(g.messages));
    out
}
