//! What a broker holds in one vhost, as far as it could be read: the live side of every
//! comparison. Filled by `broker`, read by `plan`, `network` and the operations.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::model::{Arguments, Binding, ExchangeName, ExchangeType, QueueName};
use crate::plan::Difference;
use crate::policy::AppliedPolicy;

#[derive(Debug, Clone, Default)]
pub struct Live {
    pub exchanges: BTreeMap<ExchangeName, LiveExchange>,
    pub queues: BTreeMap<QueueName, LiveQueue>,
    /// Every binding, exchange-to-exchange ones and binding arguments included; `None` when
    /// bindings cannot be listed (no management API): they are then declared again, which is
    /// idempotent.
    pub bindings: Option<BTreeSet<Binding>>,
    /// The broker's version, such as "4.0.5", when it could be read.
    pub version: Option<String>,
}

#[derive(Debug, Clone)]
pub struct LiveExchange {
    pub kind: ExchangeType,
    pub durable: bool,
    pub auto_delete: bool,
    /// Read over AMQP only: the management client hopper uses does not report it.
    pub internal: bool,
    pub arguments: Arguments,
}

#[derive(Debug, Clone, Default)]
pub struct LiveQueue {
    pub durable: bool,
    pub auto_delete: bool,
    /// `None` when they could not be read.
    pub arguments: Option<Arguments>,
    /// Set when the broker itself refused the spec's declaration (AMQP only: a 406).
    pub refused: Option<Difference>,
    pub messages: Option<u64>,
    pub consumers: Option<u64>,
    /// Delivered to a consumer and not yet acknowledged (part of `messages`).
    pub unacked: Option<u64>,
    /// The policy and operator policy that apply to it, when they could be read.
    pub policy: Option<Arc<AppliedPolicy>>,
    pub operator_policy: Option<Arc<AppliedPolicy>>,
}

impl Live {
    /// An empty vhost whose bindings are known (there are none).
    pub fn empty() -> Live {
        Live { bindings: Some(BTreeSet::new()), ..Live::default() }
    }
}
