//! Every name a topology generates, derived from its main queue's name in one place, so that
//! they are stable and documented. A wait queue's name holds its delay: a changed delay is a new
//! queue, never a changed argument.

use crate::model::{QueueName, RoutingKey};
use crate::topology::duration::{format_duration, parse as parse_duration};
use crate::topology::{Strategy, Topology};

/// What a generated queue name says about the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeneratedName {
    /// A wait queue; chain wait queues belong to one hop.
    Wait { hop: Option<u32> },
    /// A chain work queue.
    Work { attempt: u32 },
}

impl Topology {
    /// The queue a message waits in after failing delivery number `hop`: with native retry, the
    /// main queue itself holds it back.
    pub fn wait_queue(&self, hop: u32) -> QueueName {
        self.wait_queue_for(hop, self.delay(hop))
    }

    /// The wait queue of hop `hop` that holds messages for `delay` (with jitter, a hop has one
    /// per bucket).
    pub fn wait_queue_for(&self, hop: u32, delay: std::time::Duration) -> QueueName {
        let delay = format_duration(delay);
        match self.strategy {
            // Joined, not formatted: a spec of 10,000 topologies names 30,000 wait queues.
            Strategy::Republish => QueueName::from([self.queue.as_str(), ".wait-", &delay].concat().as_str()),
            Strategy::Chain => QueueName::new(format!("{}.hop-{hop}.wait-{delay}", self.queue)),
            Strategy::Native => self.queue.clone(),
        }
    }

    /// The routing key with which the wait queue of `hop` dead-letters into the retry exchange,
    /// bound to the queue the message returns to: that queue's name, the routing key a consumer
    /// saw when wait queues dead-lettered through the default exchange. Never a number, which
    /// would be a hop's key: chain's work queues end in `.attempt-<n>`, and validation refuses a
    /// republish main queue named like a number.
    pub fn return_key(&self, hop: u32) -> RoutingKey {
        self.return_queue(hop).into()
    }

    /// The queue a message returns to after waiting for `hop`.
    pub fn return_queue(&self, hop: u32) -> QueueName {
        match self.strategy {
            Strategy::Chain => self.work_queue(hop + 1),
            Strategy::Republish | Strategy::Native => self.queue.clone(),
        }
    }

    /// The queue consumers read for delivery number `attempt` (1-based).
    pub fn work_queue(&self, attempt: u32) -> QueueName {
        match (self.strategy, attempt) {
            (Strategy::Chain, 2..) => QueueName::new(format!("{}.attempt-{attempt}", self.queue)),
            _ => self.queue.clone(),
        }
    }

    /// Whether `name` is one of this topology's queues, under the current spec or an earlier one:
    /// the main or dead-letter queue, or a name a strategy generates. Exact, not a prefix:
    /// `orders2.wait-5s` is not `orders`'s.
    pub fn owns_queue(&self, name: &str) -> bool {
        self.queue == name || self.dead_letter_queue == name || self.generated_name(name).is_some()
    }

    /// Whether `name` is a name some strategy generates for this topology's main queue, for some
    /// delay, hop or attempt (not necessarily one the spec has now, nor its strategy now: a
    /// topology moved from republish to chain still owns its old wait queues):
    /// `<queue>.wait-<delay>` (republish), `<queue>.hop-<n>.wait-<delay>` and
    /// `<queue>.attempt-<n>` (chain), the delay spelt as hopper spells it. Returns the hop or
    /// attempt number where there is one.
    pub fn generated_name(&self, name: &str) -> Option<GeneratedName> {
        generated_suffix(name.strip_prefix(self.queue.as_str())?.strip_prefix('.')?)
    }
}

/// What follows `<queue>.` in a name some strategy generates for the main queue `<queue>`:
/// `wait-<delay>`, `attempt-<n>` (n ≥ 2) or `hop-<n>.wait-<delay>`, the delay spelt as hopper
/// spells it.
pub fn generated_suffix(rest: &str) -> Option<GeneratedName> {
    let canonical = |d: &str| parse_duration(d).is_ok_and(|p| format_duration(p) == d);
    let number = |text: &str| text.parse::<u32>().ok().filter(|n| n.to_string() == text && *n >= 1);
    if let Some(delay) = rest.strip_prefix("wait-") {
        return canonical(delay).then_some(GeneratedName::Wait { hop: None });
    }
    if let Some(n) = rest.strip_prefix("attempt-") {
        return number(n).filter(|n| *n >= 2).map(|attempt| GeneratedName::Work { attempt });
    }
    let (hop, delay) = rest.strip_prefix("hop-")?.split_once(".wait-")?;
    let hop = number(hop)?;
    canonical(delay).then_some(GeneratedName::Wait { hop: Some(hop) })
}

impl Topology {
    /// The queue a generated wait queue returns its messages to, by the strategy its name
    /// belongs to: the main queue (republish), or the next attempt's work queue (chain).
    pub fn returns_to(&self, generated: GeneratedName) -> QueueName {
        match generated {
            GeneratedName::Wait { hop: Some(hop) } => QueueName::new(format!("{}.attempt-{}", self.queue, hop + 1)),
            GeneratedName::Wait { hop: None } | GeneratedName::Work { .. } => self.queue.clone(),
        }
    }
}
