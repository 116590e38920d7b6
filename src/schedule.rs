//! What a topology's retry schedule does to a message: how long each hop waits (a range, with
//! jitter), when a message that always fails reaches the dead-letter queue at the earliest and
//! the latest, how many wait queues it takes, and how many times the message is written into a
//! queue again on its way. Derived from the compiled topology. Pure.

use serde::Serialize;

use crate::compile::CompiledTopology;
use crate::model::{QueueName, Role};
use crate::spec::{Strategy, format_duration};

#[derive(Debug, Clone, Serialize)]
pub struct Schedule {
    pub topology: String,
    pub vhost: String,
    pub strategy: Strategy,
    pub max_attempts: u32,
    /// The wait after each failed delivery but the last.
    pub hops: Vec<Hop>,
    /// When a message that fails every delivery reaches the dead-letter queue, counting only
    /// the waits (not the consumer's time or the broker's).
    pub dead_letter_earliest: String,
    pub dead_letter_earliest_ms: u64,
    pub dead_letter_latest: String,
    pub dead_letter_latest_ms: u64,
    /// Wait queues the topology declares (none with native retry: the main queue holds back).
    pub wait_queues: usize,
    /// How many times such a message is written into a queue after the producer's publish: a
    /// copy the consumer publishes, or a dead-lettering by the broker, each one more write (and,
    /// with quorum queues, one more replicated write).
    pub copies: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Hop {
    /// The failed delivery after which this wait comes.
    pub after_attempt: u32,
    pub delay_min: String,
    pub delay_min_ms: u64,
    pub delay_max: String,
    pub delay_max_ms: u64,
    /// The wait queues a message may take; one without jitter, and with native retry none.
    pub wait_queues: Vec<QueueName>,
}

pub fn schedule(c: &CompiledTopology) -> Schedule {
    let t = &c.topology;
    let hops: Vec<Hop> = (1..=t.hops())
        .map(|hop| {
            let delays = t.bucket_delays(hop);
            let (min, max) = (delays[0], *delays.last().expect("a hop has a delay"));
            let wait_queues = match t.strategy {
                Strategy::Native => Vec::new(),
                _ => delays.iter().map(|d| t.wait_queue_for(hop, *d)).collect(),
            };
            Hop {
                after_attempt: hop,
                delay_min: format_duration(min),
                delay_min_ms: min.as_millis() as u64,
                delay_max: format_duration(max),
                delay_max_ms: max.as_millis() as u64,
                wait_queues,
            }
        })
        .collect();
    let earliest: u64 = hops.iter().map(|h| h.delay_min_ms).sum();
    let latest: u64 = hops.iter().map(|h| h.delay_max_ms).sum();
    let per_hop = match t.strategy {
        // The consumer's copy into the wait queue, then the wait queue's dead-lettering back.
        Strategy::Republish => 2,
        // A reject dead-letters into the wait queue, whose TTL dead-letters into the next one.
        Strategy::Chain => 2,
        // The broker holds the message back where it is.
        Strategy::Native => 0,
    };
    let ms = |ms: u64| format_duration(std::time::Duration::from_millis(ms));
    Schedule {
        topology: t.name.clone(),
        vhost: t.vhost.clone(),
        strategy: t.strategy,
        max_attempts: t.max_attempts,
        dead_letter_earliest: if earliest == 0 { "0s".into() } else { ms(earliest) },
        dead_letter_earliest_ms: earliest,
        dead_letter_latest: if latest == 0 { "0s".into() } else { ms(latest) },
        dead_letter_latest_ms: latest,
        wait_queues: c.queues().filter(|q| matches!(q.role, Role::Wait { .. })).count(),
        // The last failure dead-letters into the dead-letter queue: one more.
        copies: per_hop * t.hops() + 1,
        hops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::compile_topology;
    use crate::spec;

    #[test]
    fn jitter_spreads_each_hop_and_the_total() {
        let t = spec::one(
            "[topology.orders]\ndelays = [\"10s\", \"1m\"]\nmax_attempts = 3\njitter = 0.3\njitter_buckets = 4\n",
        );
        let s = schedule(&compile_topology(&t));
        assert_eq!(s.hops.len(), 2);
        assert_eq!((s.hops[0].delay_min_ms, s.hops[0].delay_max_ms), (10_000, 13_000));
        assert_eq!((s.hops[1].delay_min_ms, s.hops[1].delay_max_ms), (60_000, 78_000));
        assert_eq!(s.hops[0].wait_queues.len(), 4);
        assert_eq!((s.dead_letter_earliest_ms, s.dead_letter_latest_ms), (70_000, 91_000));
        assert_eq!((s.dead_letter_earliest.as_str(), s.dead_letter_latest.as_str()), ("70s", "91s"));
        assert_eq!(s.wait_queues, 8);
        assert_eq!(s.copies, 5);
    }

    #[test]
    fn a_topology_that_never_retries_dead_letters_at_once() {
        let s = schedule(&compile_topology(&spec::one("[topology.orders]\nmax_attempts = 1\n")));
        assert_eq!(s.hops.len(), 0);
        assert_eq!((s.dead_letter_earliest_ms, s.dead_letter_latest_ms), (0, 0));
        // "0s", not "0d": zero is a whole number of every unit.
        assert_eq!((s.dead_letter_earliest.as_str(), s.dead_letter_latest.as_str()), ("0s", "0s"));
        assert_eq!(s.copies, 1);
    }

    #[test]
    fn native_has_no_wait_queue_and_no_copy_per_hop() {
        let t = spec::one(
            "[topology.orders]\nstrategy = \"native\"\nbackoff = { initial = \"1s\", max = \"3s\", shape = \"linear\" }\nmax_attempts = 5\n",
        );
        let s = schedule(&compile_topology(&t));
        assert_eq!(s.wait_queues, 0);
        assert_eq!(s.copies, 1);
        assert_eq!(s.dead_letter_latest_ms, 1_000 + 2_000 + 3_000 + 3_000);
        assert!(s.hops.iter().all(|h| h.wait_queues.is_empty() && h.delay_min_ms == h.delay_max_ms));
    }
}
