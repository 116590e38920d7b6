//! What a broker holds in one vhost, as far as it could be read: the live side of every
//! comparison. Filled by `broker`, read by `plan`, `network` and the operations.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::model::Difference;
use crate::model::{Arguments, Binding, ExchangeName, ExchangeType, Owner, QueueName};
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
    /// The cluster's nodes as the management API sees them (one for a single broker); `None`
    /// when they could not be read (over AMQP).
    pub nodes: Option<Vec<Node>>,
    /// What each owner recorded it made in this vhost.
    pub records: Records,
}

/// The owners' records of a vhost, as far as they could be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Records {
    /// Not read: over AMQP there are none to read.
    #[default]
    NotRead,
    /// The management API refused to list them (global parameters need the `policymaker` tag).
    Refused {
        status: u16,
    },
    Read(Vec<Record>),
}

impl Records {
    pub fn read(&self) -> Option<&[Record]> {
        match self {
            Records::Read(r) => Some(r),
            _ => None,
        }
    }
}

/// What one owner made in one vhost: kept on the broker (a global parameter), since CI runners
/// keep no state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub owner: Owner,
    pub vhost: String,
    pub topologies: BTreeMap<String, Claimed>,
}

/// A topology's exchanges and queues, as its owner recorded them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Claimed {
    pub exchanges: BTreeSet<ExchangeName>,
    pub queues: BTreeSet<QueueName>,
}

impl Record {
    /// The global parameter it is kept in: global, because a vhost's parameters must belong to a
    /// component a plugin registers, and RabbitMQ refuses any other.
    pub fn parameter(owner: &Owner, vhost: &str) -> String {
        format!("{PARAMETER_PREFIX}{owner}:{vhost}", owner = owner.as_str())
    }
}

/// Every owner record's global parameter begins so.
pub const PARAMETER_PREFIX: &str = "hopper-owner:";

/// One node of the cluster, by the management API's `/api/nodes`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Node {
    pub name: String,
    pub running: bool,
    /// Resource alarms in force on the node: while any node of a cluster has one, the whole
    /// cluster blocks every connection that publishes.
    pub alarms: Vec<Alarm>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Alarm {
    /// Memory use above `vm_memory_high_watermark`.
    Memory,
    /// Free disk below `disk_free_limit`.
    Disk,
}

impl Alarm {
    pub fn as_str(self) -> &'static str {
        match self {
            Alarm::Memory => "memory",
            Alarm::Disk => "disk",
        }
    }
}

/// Where a queue lives in the cluster.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Placement {
    /// A quorum queue: a Raft group of members on distinct nodes, one the leader. It accepts
    /// publishes and delivers only while a majority of its members is online.
    Quorum { leader: Option<String>, members: Vec<Member> },
    /// A classic queue lives on one node: while that node is down the queue is unavailable.
    Classic { node: String, available: bool },
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Member {
    pub node: String,
    /// Its node runs and the broker counts the member online.
    pub online: bool,
}

impl Placement {
    /// For a quorum queue: (members online, members); `None` for a classic queue.
    pub fn quorum_counts(&self) -> Option<(usize, usize)> {
        match self {
            Placement::Quorum { members, .. } => Some((members.iter().filter(|m| m.online).count(), members.len())),
            Placement::Classic { .. } => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct LiveExchange {
    pub kind: ExchangeType,
    pub durable: bool,
    pub auto_delete: bool,
    /// An internal exchange takes no publish from a client.
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
    /// Where it lives in the cluster, when the management API said.
    pub placement: Option<Placement>,
}

impl Live {
    /// An empty vhost whose bindings are known (there are none).
    pub fn empty() -> Live {
        Live { bindings: Some(BTreeSet::new()), ..Live::default() }
    }
}
