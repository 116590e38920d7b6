//! `inspect`: the live vhost as the broker sees it. Per queue: messages, consumers, the effective
//! TTL, dead-letter exchange and limits after policies, and where each kind of death really goes,
//! hop by hop; then every hazard, worst first. Works on any queue, hopper's or not.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, bail};
use serde::Serialize;

pub use super::dead_letters::{
    GiveBack, Group, NONE, QUORUM_ORDER_KEPT, ReachableLimit, Reader, first_death, peek_refusal, summarize,
};
use crate::broker::amqp::Session;
use crate::broker::{Endpoint, http, identity};
use crate::hazard::{self, Finding};
use crate::model::{ArgValue, Arguments, QueueName, QueueType};
use crate::network::{Network, Path, Reason};
use crate::policy::{Setting, Source};

/// One vhost to inspect, and the queues in it to look at (`None`: all).
pub struct Scope {
    pub vhost: String,
    pub queues: Option<BTreeSet<QueueName>>,
}

pub struct Request {
    pub scopes: Vec<Scope>,
    /// Only this queue.
    pub queue: Option<QueueName>,
    /// Summarise the dead letters of `queue`, peeking at most this many.
    pub peek: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub vhost: String,
    pub version: Option<String>,
    /// The cluster's nodes: which run, and their alarms (absent when they could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<crate::live::Node>>,
    pub queues: Vec<QueueReport>,
    pub hazards: Vec<Finding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letters: Option<DeadLetterSummary>,
    /// Objects under hopper's names that no owner's record claims (`plan::unclaimed`); empty
    /// when the records could not be read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unclaimed: Vec<crate::plan::Unclaimed>,
}

/// The dead letters of one queue, grouped by where and why they first died.
#[derive(Debug, Serialize)]
pub struct DeadLetterSummary {
    pub queue: QueueName,
    pub peeked: usize,
    /// What the peek did to the messages, plainly.
    pub effect: PeekEffect,
    pub groups: Vec<Group>,
    /// Messages without a message id: a consumer cannot tell their duplicates (a redrive, a
    /// lost ack) from new messages.
    pub without_message_id: usize,
}

#[derive(Debug, Serialize)]
pub struct QueueReport {
    pub name: QueueName,
    /// As the broker names it: a type hopper does not know is shown as it is, not as classic.
    #[serde(rename = "type")]
    pub kind: QueueType,
    pub ready: Option<u64>,
    pub unacked: Option<u64>,
    pub consumers: Option<u64>,
    /// Each setting that decides where messages go, with where its value comes from.
    pub effective: BTreeMap<Setting, SettingValue>,
    /// For each way this queue can dead-letter, where the message goes.
    pub dead_letters: BTreeMap<Reason, Path>,
    /// RabbitMQ 4.3's delayed retry, when the queue has it: `x-delayed-retry-*` by name.
    #[serde(skip_serializing_if = "Arguments::is_empty")]
    pub delayed_retry: Arguments,
    /// Where it lives: a quorum queue's leader and members (each online or not), a classic
    /// queue's node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<crate::live::Placement>,
}

#[derive(Debug, Serialize)]
pub struct SettingValue {
    pub value: ArgValue,
    pub source: Source,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

pub fn run(endpoint: &Endpoint, request: &Request) -> Result<Vec<Report>> {
    let runtime = super::runtime()?;
    // A peek reads over AMQP what was judged safe on the management API's broker: both must be
    // one cluster before either is read. A peek is asked for with the cluster it reads.
    let peek = match request.peek {
        Some(limit) => Some((
            limit,
            runtime.block_on(async {
                let amqp_identity = identity::amqp(endpoint).await?;
                let http_identity = http::identity(endpoint).await?;
                identity::same_cluster(endpoint, &amqp_identity, &http_identity)?;
                anyhow::Ok(http_identity)
            })?,
        )),
        None => None,
    };
    let mut reports = Vec::new();
    for scope in &request.scopes {
        let vhost = &scope.vhost;
        crate::output::narrate(|| {
            format!(
                "vhost `{vhost}`: reading it through the management API at {} as user `{}`",
                crate::broker::redact(&endpoint.management_url),
                endpoint.username()
            )
        });
        let live = match runtime.block_on(http::read(endpoint, vhost, http::Stats::Counted)) {
            Ok(live) => live,
            Err(e) => bail!("hopper inspect reads the broker through the management API and cannot: {e:#}"),
        };
        let network = Network::from_live(&live);
        let selected = |q: &QueueName| {
            request.queue.as_ref().is_none_or(|only| only == q) && scope.queues.as_ref().is_none_or(|n| n.contains(q))
        };
        if let Some(only) = &request.queue
            && !network.queues.contains_key(only)
        {
            bail!("queue `{only}` does not exist in vhost `{vhost}`");
        }
        // A node's alarm is about no queue in particular: every publisher is blocked.
        let hazards: Vec<Finding> = hazard::check(&network)
            .into_iter()
            .filter(|f| f.queues.is_empty() || f.queues.iter().any(&selected))
            .collect();
        let queues =
            network.queue_names().into_iter().filter(|q| selected(q)).map(|q| queue_report(&network, q)).collect();
        let dead_letters = match (&request.queue, &peek) {
            (Some(queue), Some((limit, cluster))) => {
                if let Some(reachable) = peek_refusal(&network, queue) {
                    bail!("{}", reachable.refusal(Reader::Peek));
                }
                let peeked = runtime.block_on(async {
                    let mut session = Session::connect(endpoint, vhost, cluster).await?;
                    let peeked = session.peek(queue, *limit).await;
                    session.close().await;
                    peeked
                })?;
                let quorum = network.queues[queue].quorum;
                Some(DeadLetterSummary {
                    queue: queue.clone(),
                    peeked: peeked.len(),
                    effect: PeekEffect { give_back: GiveBack::of(quorum), peeked: peeked.len() },
                    groups: summarize(&peeked),
                    without_message_id: peeked.iter().filter(|p| p.message_id.is_none()).count(),
                })
            }
            _ => None,
        };
        // Against the records alone: what the broker holds, whatever a spec may declare.
        let unclaimed = crate::plan::unclaimed(&crate::plan::Desired::new(&[]), &live)
            .unwrap_or_default()
            .into_iter()
            .filter(|u| selected(&u.main_queue))
            .collect();
        reports.push(Report {
            unclaimed,
            vhost: vhost.clone(),
            version: live.version.clone(),
            nodes: live.nodes.clone(),
            queues,
            hazards,
            dead_letters,
        });
    }
    Ok(reports)
}

/// What a peek did to the messages it read (`peeked` of them): it gave every one back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeekEffect {
    pub give_back: GiveBack,
    pub peeked: usize,
}

impl std::fmt::Display for PeekEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (order, count) = match self.give_back {
            GiveBack::Quorum if self.peeked > QUORUM_ORDER_KEPT => (
                "go back to the head of the queue, not in their original order (a quorum queue takes back more than 32 messages read with basic.get in another order)",
                "; each counts one more delivery (x-delivery-count)",
            ),
            GiveBack::Quorum => (
                "go back to the head of the queue in their original order",
                "; each counts one more delivery (x-delivery-count)",
            ),
            GiveBack::Classic => ("go back to their original positions", ""),
        };
        write!(
            f,
            "read with basic.get and given back unacknowledged: none was consumed; they {order}, and are marked redelivered{count}"
        )
    }
}

/// As the sentence: the JSON report's `effect` is the line a person reads.
impl Serialize for PeekEffect {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

fn queue_report(n: &Network, name: &QueueName) -> QueueReport {
    let q = &n.queues[name];
    let effective = q
        .effective()
        .into_iter()
        .map(|(k, e)| (k, SettingValue { value: e.value, source: e.source, policy: e.policy }))
        .collect();
    let dead_letters =
        Reason::ALL.into_iter().filter(|r| n.can_dead_letter(name, *r)).map(|r| (r, n.path(name, r))).collect();
    let delayed_retry = q
        .arguments
        .iter()
        .filter(|(k, _)| k.starts_with("x-delayed-retry-"))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    QueueReport {
        delayed_retry,
        name: name.clone(),
        kind: QueueType::of(&q.arguments),
        ready: q.ready,
        unacked: q.unacked,
        consumers: q.consumers,
        effective,
        dead_letters,
        placement: q.placement.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::amqp::{Death, Peeked};
    use crate::network::DeathReason;

    fn message(first: (&str, &str), time: u64) -> Peeked {
        Peeked {
            first_death_queue: Some(first.0.into()),
            first_death_reason: Some(first.1.into()),
            deaths: vec![Death { queue: first.0.into(), reason: first.1.into(), count: 1, time: Some(time) }],
            redelivered: false,
            message_id: Some("m".into()),
        }
    }

    /// A message that never died is grouped and shown as `(none)`; a reason hopper does not
    /// know, as the broker wrote it.
    #[test]
    fn first_deaths_without_a_reason_or_with_another_are_shown_as_they_are() {
        let never = Peeked {
            first_death_queue: None,
            first_death_reason: None,
            deaths: vec![],
            redelivered: false,
            message_id: None,
        };
        let groups = summarize(&[never, message(("orders", "later_reason"), 5)]);
        let json = serde_json::to_value(&groups).unwrap();
        assert_eq!(json[0]["first_death_reason"], serde_json::json!("(none)"));
        assert_eq!(json[0]["first_death_queue"], serde_json::json!("(none)"));
        assert_eq!(json[1]["first_death_reason"], serde_json::json!("later_reason"));
        assert_eq!((groups[0].reason(), groups[1].reason()), ("(none)", "later_reason"));
    }

    /// The effect is a value; its sentence is what the JSON holds, and says what the type decides.
    #[test]
    fn a_peeks_effect_follows_the_queue_type() {
        let quorum = PeekEffect { give_back: GiveBack::Quorum, peeked: QUORUM_ORDER_KEPT };
        assert!(quorum.to_string().ends_with(
            "in their original order, and are marked redelivered; each counts one more delivery (x-delivery-count)"
        ));
        let many = PeekEffect { give_back: GiveBack::Quorum, peeked: QUORUM_ORDER_KEPT + 1 };
        assert!(many.to_string().contains("not in their original order"), "{many}");
        assert!(
            PeekEffect { give_back: GiveBack::Classic, peeked: 1000 }
                .to_string()
                .ends_with("go back to their original positions, and are marked redelivered")
        );
        assert_eq!(serde_json::to_value(quorum).unwrap(), serde_json::json!(quorum.to_string()));
    }

    /// A peek and a redrive refuse a reachable limit alike, each in its own words.
    #[test]
    fn a_reachable_limit_is_refused_by_each_reader() {
        use crate::model::ArgValue;
        let quorum = ("x-queue-type", ArgValue::str("quorum"));
        let n = Network::default()
            .with_queue("parked", &[quorum.clone(), ("x-delivery-limit", ArgValue::Int(2))])
            .with_queue("unlimited", &[quorum, ("x-delivery-limit", ArgValue::Int(10_000))])
            .with_queue("classic", &[("x-delivery-limit", ArgValue::Int(2))]);
        let refused = peek_refusal(&n, &"parked".into()).unwrap();
        assert_eq!((refused.limit, refused.dead_letter_exchange.as_deref()), (2, None));
        assert!(
            refused
                .refusal(Reader::Peek)
                .starts_with("not peeking at `parked`: it is a quorum queue with a delivery limit of 2,")
        );
        assert!(refused.refusal(Reader::Redrive).starts_with("not redriving `parked`: it is a quorum queue"));
        assert!(refused.refusal(Reader::Redrive).contains("would be dropped."));
        assert_eq!(peek_refusal(&n, &"unlimited".into()), None);
        assert_eq!(peek_refusal(&n, &"classic".into()), None);
    }

    #[test]
    fn dead_letters_group_by_first_death_with_oldest_and_newest() {
        let groups = summarize(&[
            message(("orders", "rejected"), 300),
            message(("orders", "rejected"), 100),
            message(("orders", "delivery_limit"), 200),
        ]);
        assert_eq!(
            groups,
            vec![
                Group {
                    first_death_queue: "orders".into(),
                    first_death_reason: Some(DeathReason::Known(Reason::Rejected)),
                    messages: 2,
                    oldest: Some(100),
                    newest: Some(300)
                },
                Group {
                    first_death_queue: "orders".into(),
                    first_death_reason: Some(DeathReason::Known(Reason::DeliveryLimit)),
                    messages: 1,
                    oldest: Some(200),
                    newest: Some(200)
                },
            ]
        );
    }
}
