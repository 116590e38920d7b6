//! A retry topology as the spec describes it once `[defaults]` were applied and every value was
//! checked: what `spec` produces and `compile` reads. Pure data and the rules that follow from it
//! (a hop's delays, a bucket's routing key, the delivery limit in force).

pub mod duration;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::model::{ExchangeName, Owner, QueueName};

/// The owner of a spec whose files do not name one.
pub const DEFAULT_OWNER: &str = "default";

/// The largest TTL RabbitMQ accepts (`rabbit_misc:check_expiry`): ten years in milliseconds.
pub const MAX_TTL_MS: u128 = 315_360_000_000;
/// Deliveries per message we accept; a typo such as 40 for 4 should not create 39 queues.
pub const MAX_ATTEMPTS: i64 = 100;
/// A quorum queue's delivery limit when the spec does not set one. RabbitMQ 3.x has no limit at
/// all (a crashing consumer loops forever); 4.x uses 20 but drops the message if no dead-letter
/// exchange is set. hopper always sets both.
pub const DEFAULT_DELIVERY_LIMIT: i64 = 20;

/// One retry topology after `[defaults]` were applied and every value was checked.
#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    pub name: String,
    pub vhost: String,
    /// Who applies it: its file's `owner`, else `DEFAULT_OWNER`.
    pub owner: Owner,
    pub exchange: ExchangeName,
    /// The owner of `exchange` when it is another's, said on purpose: the topology binds its
    /// queue into that owner's exchange, and neither claims nor changes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exchange_owner: Option<Owner>,
    pub exchange_type: ExchangeType,
    pub routing_keys: Vec<String>,
    /// The wait before each retry hop: `hop_delays[0]` follows the first failed delivery.
    #[serde(serialize_with = "duration::serialize_all")]
    pub hop_delays: Vec<Duration>,
    pub max_attempts: u32,
    pub strategy: Strategy,
    pub queue_type: QueueType,
    pub queue: QueueName,
    pub retry_exchange: ExchangeName,
    pub dead_letter_exchange: ExchangeName,
    pub dead_letter_queue: QueueName,
    /// As the spec sets it (quorum queues only); see `effective_delivery_limit`.
    pub delivery_limit: Option<i64>,
    /// Each hop's delay spread over `[delay, delay * (1 + fraction)]` (republish only).
    pub jitter: Option<Jitter>,
    /// What tells a consumer a message it has handled from a new one, as the spec names it
    /// (`idempotency_key`); unset, the contract relies on the message id, and lint warns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<IdempotencyKey>,
    /// The file that defines the topology.
    #[serde(skip)]
    pub file: PathBuf,
}

/// Jitter: each hop's delay becomes `buckets` delays spread evenly over
/// `[delay, delay * (1 + fraction)]`, one wait queue each; the consumer picks one at random.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Jitter {
    pub fraction: f64,
    pub buckets: u32,
}

/// The key that stays the same on every copy of a message (a redelivery, a retry copy, a redrive,
/// a migration): the producer sets it once per business event, and hopper and the broker carry
/// it unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum IdempotencyKey {
    /// The AMQP `message-id` property.
    MessageId,
    /// An application header, such as `order-id`.
    Header { header: String },
}

impl IdempotencyKey {
    /// As a person reads it: `message id (AMQP property message-id)` or `value of header `order-id``.
    pub fn describe(&self) -> String {
        match self {
            IdempotencyKey::MessageId => "message id (AMQP property message-id)".to_string(),
            IdempotencyKey::Header { header } => format!("value of header `{header}`"),
        }
    }
}

/// Wait queues per hop when the spec sets jitter without `jitter_buckets`: five delays 7.5% of
/// the delay apart at jitter 0.3, enough that a burst leaves in five waves, few enough queues.
pub const DEFAULT_JITTER_BUCKETS: u32 = 5;
/// At most this many wait queues per hop: more spreads no better than the consumer's own timing.
pub const MAX_JITTER_BUCKETS: u32 = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(test, derive(strum::EnumIter))]
pub enum ExchangeType {
    Direct,
    Topic,
    Fanout,
}

impl ExchangeType {
    /// Every one, the spec's default first: the order a hint lists them in.
    pub const ALL: [ExchangeType; 3] = [ExchangeType::Direct, ExchangeType::Topic, ExchangeType::Fanout];

    pub const fn as_str(self) -> &'static str {
        match self {
            ExchangeType::Direct => "direct",
            ExchangeType::Topic => "topic",
            ExchangeType::Fanout => "fanout",
        }
    }
}

impl From<ExchangeType> for crate::model::ExchangeType {
    fn from(t: ExchangeType) -> Self {
        match t {
            ExchangeType::Direct => crate::model::ExchangeType::Direct,
            ExchangeType::Topic => crate::model::ExchangeType::Topic,
            ExchangeType::Fanout => crate::model::ExchangeType::Fanout,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(test, derive(strum::EnumIter))]
pub enum Strategy {
    Republish,
    Chain,
    /// RabbitMQ 4.3's delayed retry in the quorum queue itself.
    Native,
}

/// The queue types a spec declares: of RabbitMQ's (`model::QueueType`), the two a retry
/// topology's queues can be. Named as RabbitMQ names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(test, derive(strum::EnumIter))]
pub enum QueueType {
    Quorum,
    Classic,
}

impl QueueType {
    /// Every one, the spec's default first: the order a hint lists them in.
    pub const ALL: [QueueType; 2] = [QueueType::Quorum, QueueType::Classic];

    pub const fn as_str(self) -> &'static str {
        match self {
            QueueType::Quorum => crate::model::QueueType::QUORUM,
            QueueType::Classic => crate::model::QueueType::CLASSIC,
        }
    }

    /// A broker's type as one a spec can declare, when it is one.
    pub fn declarable(t: &crate::model::QueueType) -> Option<QueueType> {
        match t {
            crate::model::QueueType::Quorum => Some(QueueType::Quorum),
            crate::model::QueueType::Classic => Some(QueueType::Classic),
            crate::model::QueueType::Stream | crate::model::QueueType::Other(_) => None,
        }
    }
}

impl From<QueueType> for crate::model::QueueType {
    fn from(t: QueueType) -> Self {
        match t {
            QueueType::Quorum => crate::model::QueueType::Quorum,
            QueueType::Classic => crate::model::QueueType::Classic,
        }
    }
}

impl Serialize for QueueType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Topology {
    pub fn hops(&self) -> u32 {
        self.max_attempts - 1
    }

    /// The delay before retry hop `hop` (1-based); with jitter, the shortest of its buckets.
    pub fn delay(&self, hop: u32) -> Duration {
        self.hop_delays[hop as usize - 1]
    }

    /// Hop `hop`'s delays, one per wait queue: `[delay]` without jitter; with it, `buckets`
    /// delays from `delay` to `delay * (1 + fraction)`, evenly spaced, in whole milliseconds
    /// (equal ones merged: a spread narrower than the bucket count has fewer buckets).
    pub fn bucket_delays(&self, hop: u32) -> Vec<Duration> {
        let base = self.delay(hop);
        let Some(j) = self.jitter else { return vec![base] };
        let ms = base.as_millis() as f64;
        let mut delays: Vec<Duration> = (0..j.buckets)
            .map(|i| {
                let spread = j.fraction * f64::from(i) / f64::from(j.buckets.max(2) - 1);
                Duration::from_millis((ms * (1.0 + spread)).round() as u64)
            })
            .collect();
        delays.dedup();
        delays
    }

    /// The retry exchange's routing key for bucket `bucket` (1-based) of hop `hop`: the hop's
    /// number without jitter, `<hop>.<bucket>` with it.
    pub fn bucket_key(&self, hop: u32, bucket: u32) -> String {
        match self.jitter {
            None => hop.to_string(),
            Some(_) => format!("{hop}.{bucket}"),
        }
    }

    /// The `x-delivery-limit` of the queues consumers read: the spec's, or hopper's default on
    /// quorum queues; none on classic queues. With native retry it counts the retries: a message
    /// failed max_attempts times is dead-lettered.
    pub fn effective_delivery_limit(&self) -> Option<i64> {
        match (self.strategy, self.queue_type) {
            (Strategy::Native, _) => Some(i64::from(self.hops())),
            (_, QueueType::Quorum) => Some(self.delivery_limit.unwrap_or(DEFAULT_DELIVERY_LIMIT)),
            (_, QueueType::Classic) => None,
        }
    }

    /// Whether the topology has a retry exchange: consumers publish to it (republish, when it
    /// retries at all), or its queues dead-letter through it (chain).
    pub fn uses_retry_exchange(&self) -> bool {
        match self.strategy {
            Strategy::Republish => self.hops() > 0,
            Strategy::Chain => true,
            Strategy::Native => false,
        }
    }
}

impl Strategy {
    /// Every one, the spec's default first: the order a hint lists them in.
    pub const ALL: [Strategy; 3] = [Strategy::Republish, Strategy::Chain, Strategy::Native];

    pub const fn as_str(self) -> &'static str {
        match self {
            Strategy::Republish => "republish",
            Strategy::Chain => "chain",
            Strategy::Native => "native",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `ALL` lists are kept by hand: a variant added to an enum and not to its list fails here.
    #[test]
    fn every_declarable_queue_type_is_listed() {
        use strum::IntoEnumIterator;
        assert_eq!(QueueType::iter().collect::<Vec<_>>(), QueueType::ALL);
        assert_eq!(ExchangeType::iter().collect::<Vec<_>>(), ExchangeType::ALL);
        assert_eq!(Strategy::iter().collect::<Vec<_>>(), Strategy::ALL);
    }

    /// A declarable type is RabbitMQ's type of the same name, there and back.
    #[test]
    fn declarable_queue_types_are_rabbitmqs() {
        for t in QueueType::ALL {
            let broker = crate::model::QueueType::from(t);
            assert_eq!(broker.as_str(), t.as_str());
            assert_eq!(QueueType::declarable(&broker), Some(t));
        }
        assert_eq!(QueueType::declarable(&crate::model::QueueType::Stream), None);
        assert_eq!(QueueType::declarable(&"x-other".into()), None);
    }
}
