//! The rules, each with its id, its severity and the RabbitMQ behaviour it rests on (notes §6).

use serde::{Serialize, Serializer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(test, derive(strum::EnumIter))]
pub enum Rule {
    DeadLetterExchangeMissing,
    DeadLettersUnroutable,
    DeadLettersFanOut,
    DeadLetterCycle,
    WaitQueueWithoutTtl,
    WaitQueueWithConsumers,
    ExpiresOnRetryPath,
    DropHeadOnWaitOrDeadLetterQueue,
    AtLeastOnceNotInForce,
    RoutingKeyWithoutExchange,
    UnknownArgument,
    DeliveryLimitDrops,
    DeadLetterQueueNotTerminal,
    DeadLetterRoutingKeyMissing,
    RedeliveriesUnbounded,
    ArgumentRefusedByBroker,
    ScheduleOutlivesTtl,
    QuorumMembersOffline,
    QuorumBelowMajority,
    ClassicQueueUnavailable,
    PublishersBlocked,
    IdempotencyKeyUnstated,
    AtMostOnceDeadLettering,
    MessageTtlDrops,
    MaxLengthDrops,
}

impl Rule {
    pub const ALL: [Rule; 25] = [
        Rule::DeadLetterExchangeMissing,
        Rule::DeadLettersUnroutable,
        Rule::DeadLettersFanOut,
        Rule::DeadLetterCycle,
        Rule::WaitQueueWithoutTtl,
        Rule::WaitQueueWithConsumers,
        Rule::ExpiresOnRetryPath,
        Rule::DropHeadOnWaitOrDeadLetterQueue,
        Rule::AtLeastOnceNotInForce,
        Rule::RoutingKeyWithoutExchange,
        Rule::UnknownArgument,
        Rule::DeliveryLimitDrops,
        Rule::DeadLetterQueueNotTerminal,
        Rule::DeadLetterRoutingKeyMissing,
        Rule::RedeliveriesUnbounded,
        Rule::ArgumentRefusedByBroker,
        Rule::ScheduleOutlivesTtl,
        Rule::QuorumMembersOffline,
        Rule::QuorumBelowMajority,
        Rule::ClassicQueueUnavailable,
        Rule::PublishersBlocked,
        Rule::IdempotencyKeyUnstated,
        Rule::AtMostOnceDeadLettering,
        Rule::MessageTtlDrops,
        Rule::MaxLengthDrops,
    ];

    /// The id shown in brackets and in JSON.
    pub fn id(self) -> &'static str {
        match self {
            Rule::DeadLetterExchangeMissing => "dead-letter-exchange-missing",
            Rule::DeadLettersUnroutable => "dead-letters-unroutable",
            Rule::DeadLettersFanOut => "dead-letters-fan-out",
            Rule::DeadLetterCycle => "dead-letter-cycle",
            Rule::WaitQueueWithoutTtl => "wait-queue-without-ttl",
            Rule::WaitQueueWithConsumers => "wait-queue-with-consumers",
            Rule::ExpiresOnRetryPath => "expires-on-retry-path",
            Rule::DropHeadOnWaitOrDeadLetterQueue => "drop-head-on-wait-or-dead-letter-queue",
            Rule::AtLeastOnceNotInForce => "at-least-once-not-in-force",
            Rule::RoutingKeyWithoutExchange => "routing-key-without-exchange",
            Rule::UnknownArgument => "unknown-argument",
            Rule::DeliveryLimitDrops => "delivery-limit-drops",
            Rule::DeadLetterQueueNotTerminal => "dead-letter-queue-not-terminal",
            Rule::DeadLetterRoutingKeyMissing => "dead-letter-routing-key-missing",
            Rule::RedeliveriesUnbounded => "redeliveries-unbounded",
            Rule::ArgumentRefusedByBroker => "argument-refused-by-broker",
            Rule::ScheduleOutlivesTtl => "schedule-outlives-ttl",
            Rule::QuorumMembersOffline => "quorum-members-offline",
            Rule::QuorumBelowMajority => "quorum-below-majority",
            Rule::ClassicQueueUnavailable => "classic-queue-unavailable",
            Rule::PublishersBlocked => "publishers-blocked",
            Rule::IdempotencyKeyUnstated => "idempotency-key-unstated",
            Rule::AtMostOnceDeadLettering => "at-most-once-dead-lettering",
            Rule::MessageTtlDrops => "message-ttl-drops",
            Rule::MaxLengthDrops => "max-length-drops",
        }
    }

    /// How bad a finding of this rule is, at least. The three drop rules (`message-ttl-drops`,
    /// `max-length-drops`, `delivery-limit-drops`) are warnings where the queue's own setting
    /// drops messages off any retry path, as a cache or a bounded buffer may mean to; each of
    /// their findings is an error where no one can mean the drop: on a retry path, whose every
    /// message someone means to retry or park, or by RabbitMQ 4's default delivery limit, which
    /// no one set (`dropping` in the hazard module).
    ///
    /// `at-most-once-dead-lettering` is always an error: a queue that has a dead-letter exchange
    /// means its dead letters to arrive, and a quorum queue is chosen for not losing messages.
    pub fn severity(self) -> Severity {
        match self {
            Rule::MessageTtlDrops | Rule::MaxLengthDrops | Rule::DeliveryLimitDrops => Severity::Warning,
            Rule::WaitQueueWithConsumers
            | Rule::DeadLetterRoutingKeyMissing
            | Rule::RedeliveriesUnbounded
            | Rule::ScheduleOutlivesTtl
            | Rule::QuorumMembersOffline
            | Rule::IdempotencyKeyUnstated => Severity::Warning,
            _ => Severity::Error,
        }
    }

    /// The RabbitMQ behaviour the rule rests on, in one sentence.
    pub fn because(self) -> &'static str {
        match self {
            Rule::DeadLetterExchangeMissing => {
                "RabbitMQ silently drops a dead letter whose dead-letter exchange does not exist; a quorum queue with at-least-once dead-lettering keeps it and retries forever instead."
            }
            Rule::DeadLettersUnroutable => {
                "Dead-lettering is an ordinary publish: when no binding matches, the dead letter is dropped, or with quorum at-least-once kept and retried forever."
            }
            Rule::DeadLettersFanOut => {
                "Every queue whose binding matches a dead letter gets a copy, so one failure becomes several messages."
            }
            Rule::DeadLetterCycle => {
                "RabbitMQ drops a dead letter that returns to a queue with no rejection since it last left it (a TTL, length limit or delivery limit in the loop)."
            }
            Rule::WaitQueueWithoutTtl => {
                "Dead-lettering removes a message's own expiration, so in a queue with no TTL and no consumer a dead letter waits forever."
            }
            Rule::WaitQueueWithConsumers => {
                "A consumer on a wait queue takes messages before their TTL ends, so the retry delay is not honoured."
            }
            Rule::ExpiresOnRetryPath => {
                "A queue that expires is deleted with its messages without dead-lettering them, and a wait queue has no consumer, so it counts as unused."
            }
            Rule::DropHeadOnWaitOrDeadLetterQueue => {
                "With a length limit and the default drop-head overflow, RabbitMQ removes the oldest messages: dead-lettered early from a wait queue, lost from a dead-letter queue."
            }
            Rule::AtLeastOnceNotInForce => {
                "Quorum at-least-once dead-lettering needs a dead-letter exchange and overflow reject-publish, or RabbitMQ silently falls back to at most once; classic queues ignore it."
            }
            Rule::RoutingKeyWithoutExchange => {
                "A dead-letter routing key without a dead-letter exchange is refused as an argument and, set by a policy on a quorum queue, turns dead-lettering off."
            }
            Rule::UnknownArgument => "RabbitMQ stores an x-argument it does not know without a word and ignores it.",
            Rule::DeliveryLimitDrops => {
                "A quorum queue drops a message redelivered past its delivery limit (20 by default since RabbitMQ 4.0) when it has no dead-letter exchange."
            }
            Rule::MessageTtlDrops => {
                "A message that outlives the queue's message TTL is dead-lettered, or dropped when the queue has no dead-letter exchange."
            }
            Rule::MaxLengthDrops => {
                "A queue over its max-length or max-length-bytes with the default drop-head overflow removes its oldest messages: dead-lettered, or dropped when it has no dead-letter exchange."
            }
            Rule::AtMostOnceDeadLettering => {
                "A quorum queue dead-letters at most once unless dead-letter-strategy is at-least-once with overflow reject-publish: it removes the dead letter first and publishes it without a confirm, so a target that is full, unavailable or without quorum loses it."
            }
            Rule::DeadLetterQueueNotTerminal => {
                "A dead-letter queue with a TTL expires its messages, and one with a dead-letter exchange passes them on: the parking lot does not keep them."
            }
            Rule::DeadLetterRoutingKeyMissing => {
                "Without a dead-letter routing key a dead letter keeps its current routing keys, which earlier hops rewrite, so where it goes depends on its history."
            }
            Rule::RedeliveriesUnbounded => {
                "Before RabbitMQ 4.0 a quorum queue has no delivery limit unless one is set: a message a consumer requeues, or whose consumer crashes, comes back forever and no dead-letter queue ever sees it."
            }
            Rule::ScheduleOutlivesTtl => {
                "With native delayed retry a message stays in its queue through every retry, and its TTL counts from its first arrival: a TTL shorter than the retry schedule expires it before its last attempt."
            }
            Rule::IdempotencyKeyUnstated => {
                "RabbitMQ delivers at least once: after a lost ack, a confirmed retry copy, a redrive or a migration the same message arrives again, and a consumer can only tell it from a new one by a key the producer set once and every hop kept."
            }
            Rule::ArgumentRefusedByBroker => {
                "RabbitMQ 4.3 refuses to declare a queue with x-queue-version = 1 or x-queue-master-locator: a queue that has one cannot be declared again, by a redeploy, an import or a client."
            }
            Rule::QuorumMembersOffline => {
                "A quorum queue works while a majority of its members is online; with a member on a stopped node, fewer further losses stop it, and the member catches up only when its node is back."
            }
            Rule::QuorumBelowMajority => {
                "A quorum queue with fewer than a majority of its members online has no leader: it refuses publishes (a confirm never comes, or a nack), delivers nothing, and dead letters into it are held or dropped, until a majority is back."
            }
            Rule::ClassicQueueUnavailable => {
                "A classic queue lives on one node: while that node is down, the queue cannot be declared, consumed or published to, and messages routed to it are dropped (returned with mandatory)."
            }
            Rule::PublishersBlocked => {
                "A memory or disk alarm on any node of a cluster blocks every connection that publishes, on every node, until it clears: producers stall, and so do consumers that publish their retries (republish)."
            }
        }
    }
}

impl Serialize for Rule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.id())
    }
}
