//! `apply --migrate`: a queue whose arguments cannot change in place gets them under the same
//! name. Its messages wait in a holding queue (declared with the new arguments) while the queue
//! is deleted and declared again; its bindings move to the holding queue and back, so that
//! every message routed meanwhile is kept. Where a migration stands is read off the broker
//! each time (which of the two queues exists, with which arguments), so a run killed at any
//! point is finished by the next. Pure: `ops::migrate` carries it out.

use serde::Serialize;

use super::queue_differences;
use crate::live::{Live, LiveQueue};
use crate::model::{Binding, Destination, Queue, QueueName, QueueType};

pub(super) const HOLDING_PREFIX: &str = "hopper.migrating.";

/// The queue that holds `queue`'s messages while it is declared again: `hopper.migrating.`
/// and its name, or, where that would exceed RabbitMQ's 255 bytes, a digest of it (stable
/// across runs and releases: FNV-1a, not the standard library's hasher, which may change).
pub fn holding_queue(queue: &str) -> QueueName {
    if HOLDING_PREFIX.len() + queue.len() <= 255 {
        return QueueName::new(format!("{HOLDING_PREFIX}{queue}"));
    }
    let digest =
        queue.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let head: String = queue
        .chars()
        .scan(0, |len, c| {
            *len += c.len_utf8();
            (*len <= 200).then_some(c)
        })
        .collect();
    QueueName::new(format!("{HOLDING_PREFIX}{head}.{digest:016x}"))
}

/// Where a queue's migration stands, from what the broker has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The queue has its old arguments: declare the holding queue with the new ones.
    DeclareHolding,
    /// The holding queue exists beside the old queue: move the old queue's bindings and messages
    /// to it, then delete the old queue once it is empty.
    EmptyOld,
    /// Only the holding queue exists: declare the queue with its new arguments.
    Declare,
    /// The queue has its new arguments and the holding queue still exists: move the bindings and
    /// messages back, then delete the holding queue.
    Return,
    Done,
    /// A left-over queue's messages moved into the queue that now gives them their attempt.
    MoveOut,
}

impl Stage {
    pub fn describe(self) -> &'static str {
        match self {
            Stage::DeclareHolding => "declaring the holding queue",
            Stage::EmptyOld => "moving the queue's bindings and messages to the holding queue",
            Stage::Declare => "declaring the queue with its new arguments",
            Stage::Return => "moving the bindings and messages back from the holding queue",
            Stage::Done => "done",
            Stage::MoveOut => "moving its messages out",
        }
    }
}

/// The next stage of `desired`'s migration.
pub fn stage(desired: &Queue, queue: Option<&LiveQueue>, holding: Option<&LiveQueue>) -> Stage {
    match (queue, holding) {
        (Some(q), h) if has_new_arguments(desired, q) => {
            if h.is_some() {
                Stage::Return
            } else {
                Stage::Done
            }
        }
        (Some(_), None) => Stage::DeclareHolding,
        (Some(_), Some(_)) => Stage::EmptyOld,
        (None, Some(_)) => Stage::Declare,
        // Neither: nothing to keep; a plain declaration creates it.
        (None, None) => Stage::Declare,
    }
}

fn has_new_arguments(desired: &Queue, q: &LiveQueue) -> bool {
    q.arguments.as_ref().is_some_and(|args| queue_differences(desired, q, args).is_empty())
}

/// The bindings through which messages reach `queue`: every binding to it but the default
/// exchange's, which every queue has and no one can move.
pub fn feeding_bindings<'l>(live: &'l Live, queue: &'l str) -> impl Iterator<Item = &'l Binding> + 'l {
    live.bindings
        .iter()
        .flatten()
        .filter(move |b| !b.source.is_empty() && matches!(&b.destination, Destination::Queue(q) if q == queue))
}

/// Why a queue cannot be migrated now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    /// The vhost's bindings could not be listed (no management API), so they cannot be moved.
    BindingsUnlisted,
    /// Reading a stream removes nothing: it cannot be emptied.
    Stream,
    /// Deleting the queue would cancel its consumers.
    Consumers { consumers: u64 },
    /// `feeder` dead-letters into it through the default exchange, which drops its dead
    /// letters while the queue is declared again; `messages`, what it holds, when known.
    DefaultExchangeFeeder { feeder: QueueName, messages: Option<u64> },
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Blocker::BindingsUnlisted => f.write_str(
                "moving a queue's bindings needs them listed: run apply where the management API is reachable",
            ),
            Blocker::Stream => f.write_str(
                "a stream cannot be emptied (reading it removes nothing): give the topology's queue another name",
            ),
            Blocker::Consumers { consumers } => write!(
                f,
                "it has {consumers} consumer(s): stop them (messages wait in the queue meanwhile), then run apply --migrate again; deleting the queue would cancel them"
            ),
            Blocker::DefaultExchangeFeeder { feeder, messages } => {
                let holds = messages.map_or("messages".to_string(), |n| format!("{n} message(s)"));
                write!(
                    f,
                    "`{feeder}` dead-letters into it through the default exchange, which would drop its dead letters while the queue is declared again: wait until `{feeder}` is empty ({holds} now) and gone (apply --prune removes it), or stop what it holds from expiring"
                )
            }
        }
    }
}

/// Why `queue` cannot be migrated now, or `None`. `migrating` names the queues this run
/// migrates, whose dead letters will no longer go through the default exchange.
pub fn blocker(
    queue: &QueueName,
    live: &Live,
    index: &super::Index,
    migrating: &rustc_hash::FxHashSet<QueueName>,
) -> Option<Blocker> {
    let l = live.queues.get(queue)?;
    if live.bindings.is_none() {
        return Some(Blocker::BindingsUnlisted);
    }
    if l.arguments.as_ref().is_some_and(|a| QueueType::of(a) == QueueType::Stream) {
        return Some(Blocker::Stream);
    }
    if let Some(consumers @ 1..) = l.consumers {
        return Some(Blocker::Consumers { consumers });
    }
    // Dead letters sent through the default exchange go to the queue by name, and are dropped
    // while it does not exist: such a feeder must move first, or drain.
    let direct = index
        .dead_lettering_to("", queue.as_str())
        .iter()
        .find(|name| **name != queue && !migrating.contains(**name))
        .and_then(|name| Some((*name, live.queues.get(*name)?)));
    if let Some((name, other)) = direct {
        return Some(Blocker::DefaultExchangeFeeder { feeder: name.clone(), messages: other.messages });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ArgValue, Arguments, Role, arg};
    use crate::plan::Index;

    fn queue(kind: &str) -> Queue {
        let mut arguments = Arguments::new();
        arguments.insert(arg::QUEUE_TYPE, ArgValue::str(kind));
        Queue { name: QueueName::new("orders"), durable: true, arguments, role: Role::Work { attempt: None } }
    }

    fn live(kind: &str) -> LiveQueue {
        LiveQueue { durable: true, arguments: Some(queue(kind).arguments), ..LiveQueue::default() }
    }

    #[test]
    fn every_state_has_one_next_stage() {
        let desired = queue("quorum");
        let (old, new, holding) = (live("classic"), live("quorum"), live("quorum"));
        assert_eq!(stage(&desired, Some(&old), None), Stage::DeclareHolding);
        assert_eq!(stage(&desired, Some(&old), Some(&holding)), Stage::EmptyOld);
        assert_eq!(stage(&desired, None, Some(&holding)), Stage::Declare);
        assert_eq!(stage(&desired, Some(&new), Some(&holding)), Stage::Return);
        assert_eq!(stage(&desired, Some(&new), None), Stage::Done);
    }

    #[test]
    fn holding_names_fit_and_differ() {
        assert_eq!(holding_queue("orders").as_str(), "hopper.migrating.orders");
        let long_a = "a".repeat(250);
        let long_b = format!("{}b", "a".repeat(249));
        let (a, b) = (holding_queue(&long_a), holding_queue(&long_b));
        assert!(a.len() <= 255 && b.len() <= 255, "{} {}", a.len(), b.len());
        assert_ne!(a, b);
        assert_eq!(a, holding_queue(&long_a), "stable across calls");
        let wide = "é".repeat(127);
        assert!(holding_queue(&wide).len() <= 255);
    }

    #[test]
    fn a_feeder_through_the_default_exchange_blocks_unless_it_moves_first() {
        let mut l = Live::empty();
        l.queues.insert(QueueName::new("orders"), live("classic"));
        let mut wait = live("classic");
        let args = wait.arguments.as_mut().unwrap();
        args.insert(arg::DEAD_LETTER_EXCHANGE, ArgValue::str(""));
        args.insert(arg::DEAD_LETTER_ROUTING_KEY, ArgValue::str("orders"));
        wait.messages = Some(3);
        l.queues.insert(QueueName::new("orders.wait-5s"), wait);
        let orders = QueueName::new("orders");
        let moving: rustc_hash::FxHashSet<QueueName> = [QueueName::new("orders.wait-5s")].into_iter().collect();
        let why = blocker(&orders, &l, &Index::new(&crate::plan::Owners::new(&[]), &l), &Default::default());
        assert_eq!(
            why,
            Some(Blocker::DefaultExchangeFeeder { feeder: QueueName::new("orders.wait-5s"), messages: Some(3) })
        );
        let why = why.unwrap().to_string();
        assert!(why.contains("orders.wait-5s") && why.contains("3 message(s)"), "{why}");
        assert_eq!(blocker(&orders, &l, &Index::new(&crate::plan::Owners::new(&[]), &l), &moving), None);
        l.queues.get_mut(&orders).unwrap().consumers = Some(2);
        let why = blocker(&orders, &l, &Index::new(&crate::plan::Owners::new(&[]), &l), &moving);
        assert_eq!(why, Some(Blocker::Consumers { consumers: 2 }));
        assert!(why.unwrap().to_string().contains("2 consumer(s)"));
    }
}
