//! Message-loss hazards: rules over a `Network`, the same for a compiled spec (`lint`) and a live
//! vhost (`inspect`); the cluster's rules also over queue placements alone (`diff`). One function
//! per rule; each finding names its rule, and the rule the
//! RabbitMQ behaviour it rests on. Pure.

mod rules;

use serde::Serialize;

pub use rules::{Rule, Severity};

use crate::live::{Node, Placement};
use crate::model::{ArgValue, ExchangeName, QueueName, RoleKind};
use crate::network::{DeadLetter, End, Network, Reason};
use crate::policy::{Effective, Setting, Source};
use crate::version::DeliveryCount;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub rule: Rule,
    pub severity: Severity,
    /// What happens to messages here, in one sentence.
    pub message: String,
    /// The RabbitMQ behaviour the rule rests on.
    pub because: &'static str,
    pub queues: Vec<QueueName>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exchanges: Vec<ExchangeName>,
    /// The cluster's nodes it is about (a cluster rule), by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
}

impl Finding {
    fn new(rule: Rule, message: String, queues: Vec<QueueName>, exchanges: Vec<ExchangeName>) -> Finding {
        Finding {
            rule,
            severity: rule.severity(),
            message,
            because: rule.because(),
            queues,
            exchanges,
            nodes: Vec::new(),
        }
    }

    fn on(rule: Rule, queue: &QueueName, message: String) -> Finding {
        Finding::new(rule, message, vec![queue.clone()], Vec::new())
    }
}

const KNOWN_ARGUMENTS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-queue-type",
    "x-quorum-initial-group-size",
    "x-quorum-target-group-size",
    "x-delivery-limit",
    "x-queue-master-locator",
    "x-queue-leader-locator",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-stream-filter-size-bytes",
    "x-delayed-retry-type",
    "x-delayed-retry-min",
    "x-delayed-retry-max",
    "x-consumer-timeout",
];

/// A delivery limit this high is a deliberate "never", not a trap.
const UNREACHABLE_DELIVERY_LIMIT: i64 = 10_000;

/// What a rule looks at: one queue of the network, with what it is.
struct Subject<'n> {
    n: &'n Network,
    name: &'n QueueName,
    q: &'n crate::network::Queue,
    wait: bool,
    dead_letter_queue: bool,
}

/// Every hazard in the network, worst first.
pub fn check(n: &Network) -> Vec<Finding> {
    let mut out = Vec::new();
    for name in n.queue_names() {
        let q = &n.queues[name];
        let s = Subject { n, name, q, wait: is_wait_queue(n, name), dead_letter_queue: is_dead_letter_queue(n, name) };
        dead_letter_route(&s, &mut out);
        out.extend(dead_letter_routing_key_missing(&s));
        out.extend(routing_key_without_exchange(&s));
        out.extend(wait_queue_with_consumers(&s));
        out.extend(wait_queue_without_ttl(&s));
        out.extend(expires_on_retry_path(&s));
        out.extend(drop_head_on_wait_or_dead_letter_queue(&s));
        out.extend(at_least_once_not_in_force(&s));
        out.extend(unknown_arguments(&s));
        out.extend(arguments_refused(&s));
        out.extend(delivery_limit_drops(&s));
        out.extend(redeliveries_unbounded(&s));
        out.extend(dead_letter_queue_not_terminal(&s));
        out.extend(schedule_outlives_ttl(&s));
    }
    dead_letter_cycles(n, &mut out);
    out.extend(cluster(n));
    sort(&mut out);
    out
}

/// The cluster's hazards alone: queues whose nodes are down and nodes whose alarms block
/// publishers. Nothing on a spec or a live vhost whose nodes could not be read.
pub fn cluster(n: &Network) -> Vec<Finding> {
    placements(n.queues.iter().map(|(name, q)| (name, q.placement.as_ref())), &n.nodes)
}

/// The same, from each queue's placement alone: `diff` judges a live vhost without building
/// its whole network, which took 6 to 8 ms after the last answer at 2,000 topologies.
pub fn placements<'a>(
    queues: impl IntoIterator<Item = (&'a QueueName, Option<&'a Placement>)>,
    nodes: &[Node],
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (name, placement) in queues {
        let Some(placement) = placement else { continue };
        out.extend(quorum_members_offline(name, placement));
        out.extend(quorum_below_majority(name, placement));
        out.extend(classic_queue_unavailable(name, placement));
    }
    out.extend(publishers_blocked(nodes));
    sort(&mut out);
    out
}

fn sort(out: &mut Vec<Finding>) {
    out.sort_by(|a, b| {
        (a.severity, a.rule, &a.queues, &a.exchanges).cmp(&(b.severity, b.rule, &b.queues, &b.exchanges))
    });
    out.dedup();
}

/// `a@h (online), b@h (offline)`: a quorum queue's members as messages name them.
fn members(placement: &Placement) -> (Vec<String>, String) {
    let Placement::Quorum { members, leader } = placement else { return (Vec::new(), String::new()) };
    let text = members
        .iter()
        .map(|m| {
            let lead = if leader.as_deref() == Some(m.node.as_str()) && m.online { ", leader" } else { "" };
            format!("{} ({}{lead})", m.node, if m.online { "online" } else { "offline" })
        })
        .collect::<Vec<_>>()
        .join(", ");
    let offline = members.iter().filter(|m| !m.online).map(|m| m.node.clone()).collect();
    (offline, text)
}

/// quorum-members-offline: a member on a node that does not run, a majority still online.
fn quorum_members_offline(name: &QueueName, placement: &Placement) -> Option<Finding> {
    let (online, total) = placement.quorum_counts()?;
    if online == total || online <= total / 2 {
        return None;
    }
    let (offline, text) = members(placement);
    let mut f = Finding::on(
        Rule::QuorumMembersOffline,
        name,
        format!(
            "quorum queue `{name}` has {online} of {total} members online: {text}; losing {} more stops it",
            online - total / 2
        ),
    );
    f.nodes = offline;
    Some(f)
}

/// quorum-below-majority: fewer than a majority of members online.
fn quorum_below_majority(name: &QueueName, placement: &Placement) -> Option<Finding> {
    let (online, total) = placement.quorum_counts()?;
    if online > total / 2 {
        return None;
    }
    let (offline, text) = members(placement);
    let mut f = Finding::on(
        Rule::QuorumBelowMajority,
        name,
        format!(
            "quorum queue `{name}` has {online} of {total} members online, fewer than the {} it needs: {text}; it refuses publishes and delivers nothing until one of {} is back",
            total / 2 + 1,
            offline.join(", ")
        ),
    );
    f.nodes = offline;
    Some(f)
}

/// classic-queue-unavailable: a classic queue whose node is down.
fn classic_queue_unavailable(name: &QueueName, placement: &Placement) -> Option<Finding> {
    let Placement::Classic { node, available: false } = placement else { return None };
    let mut f = Finding::on(
        Rule::ClassicQueueUnavailable,
        name,
        format!("classic queue `{name}` is unavailable: it lives on node {node}, which is down"),
    );
    f.nodes = vec![node.clone()];
    Some(f)
}

/// publishers-blocked: a node with a memory or disk alarm.
fn publishers_blocked(nodes: &[Node]) -> Vec<Finding> {
    nodes
        .iter()
        .filter(|node| !node.alarms.is_empty())
        .map(|node| {
            let alarms = node.alarms.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(" and ");
            let mut f = Finding::new(
                Rule::PublishersBlocked,
                format!(
                    "node {} has a {alarms} alarm: every connection that publishes to the cluster is blocked, the consumers' retries too, until it clears",
                    node.name
                ),
                Vec::new(),
                Vec::new(),
            );
            f.nodes = vec![node.name.clone()];
            f
        })
        .collect()
}

fn lost_or_stuck(at_least_once: bool) -> &'static str {
    if at_least_once { "they stay in the queue, retried forever" } else { "they are dropped" }
}

/// dead-letter-exchange-missing, dead-letters-unroutable, dead-letters-fan-out: where the
/// queue's dead letters go, routed as the broker routes them.
fn dead_letter_route(s: &Subject, out: &mut Vec<Finding>) {
    let name = s.name;
    let dead_letter = s.n.dead_letter(name);
    if let DeadLetter::Routed { uncertain: true, .. } = &dead_letter
        && !s.n.has(name, Setting::DeadLetterRoutingKey)
    {
        carried_keys(s, out);
    }
    out.extend(match dead_letter {
        DeadLetter::ExchangeMissing { exchange, at_least_once } => Some(Finding::new(
            Rule::DeadLetterExchangeMissing,
            format!(
                "dead letters of `{name}` go to exchange `{exchange}`, which does not exist: {}",
                lost_or_stuck(at_least_once)
            ),
            vec![name.clone()],
            vec![exchange],
        )),
        DeadLetter::Unroutable { exchange, routing_key, at_least_once } => Some(Finding::new(
            Rule::DeadLettersUnroutable,
            format!(
                "dead letters of `{name}` are published to `{exchange}` with {}, which no binding matches: {}",
                routing_key.map_or("their original routing keys".to_string(), |k| format!("routing key `{k}`")),
                lost_or_stuck(at_least_once)
            ),
            vec![name.clone()],
            vec![exchange],
        )),
        DeadLetter::Routed { exchange, queues, .. } if queues.len() > 1 => Some(Finding::new(
            Rule::DeadLettersFanOut,
            format!(
                "each dead letter of `{name}` is copied to {} queues through `{exchange}`: {}",
                queues.len(),
                join(&queues)
            ),
            [vec![name.clone()], queues].concat(),
            vec![exchange],
        )),
        _ => None,
    });
}

/// A queue with no dead-letter routing key passes its dead letters on with the key they came in
/// with, which is known when the queue feeding it set one (notes §1.3: the key the previous hop
/// assigned, not the publisher's): route each such key, as the broker will.
fn carried_keys(s: &Subject, out: &mut Vec<Finding>) {
    let name = s.name;
    for feeder in s.n.feeders(name) {
        let Some(key) = s.n.text(feeder, Setting::DeadLetterRoutingKey) else { continue };
        let came = format!("the routing key `{key}` that `{feeder}` gave them");
        match s.n.dead_letter_carrying(name, Some(&key)) {
            DeadLetter::Unroutable { exchange, at_least_once, .. } => out.push(Finding::new(
                Rule::DeadLettersUnroutable,
                format!(
                    "dead letters of `{name}` keep {came}, which no binding of `{exchange}` matches: {}",
                    lost_or_stuck(at_least_once)
                ),
                vec![name.clone()],
                vec![exchange],
            )),
            DeadLetter::Routed { exchange, queues, .. } if queues.len() > 1 => out.push(Finding::new(
                Rule::DeadLettersFanOut,
                format!(
                    "dead letters of `{name}` keep {came}, and `{exchange}` copies them to {} queues: {}",
                    queues.len(),
                    join(&queues)
                ),
                [vec![name.clone()], queues].concat(),
                vec![exchange],
            )),
            _ => {}
        }
    }
}

fn dead_letter_routing_key_missing(s: &Subject) -> Option<Finding> {
    let dlx = s.n.has(s.name, Setting::DeadLetterExchange);
    let dlrk = s.n.has(s.name, Setting::DeadLetterRoutingKey);
    (dlx && !dlrk && (s.wait || !s.n.feeders(s.name).is_empty())).then(|| {
        Finding::on(
            Rule::DeadLetterRoutingKeyMissing,
            s.name,
            format!(
                "`{}` sets no dead-letter routing key: its dead letters are routed by whatever keys they carry",
                s.name
            ),
        )
    })
}

fn routing_key_without_exchange(s: &Subject) -> Option<Finding> {
    let dlx = s.n.has(s.name, Setting::DeadLetterExchange);
    let dlrk = s.n.has(s.name, Setting::DeadLetterRoutingKey);
    (!dlx && dlrk).then(|| {
        Finding::on(
            Rule::RoutingKeyWithoutExchange,
            s.name,
            format!(
                "`{}` has a dead-letter routing key but no dead-letter exchange: its dead letters are discarded",
                s.name
            ),
        )
    })
}

fn wait_queue_with_consumers(s: &Subject) -> Option<Finding> {
    let consumers = s.q.consumers.unwrap_or(0);
    (s.wait && consumers > 0).then(|| {
        Finding::on(
            Rule::WaitQueueWithConsumers,
            s.name,
            format!("wait queue `{}` has {consumers} consumer(s): they take messages before the TTL ends", s.name),
        )
    })
}

fn wait_queue_without_ttl(s: &Subject) -> Option<Finding> {
    (!s.dead_letter_queue && s.n.is_stranding(s.name)).then(|| {
        Finding::on(
            Rule::WaitQueueWithoutTtl,
            s.name,
            format!(
                "`{}` receives dead letters from a retry loop it belongs to, but has no TTL and no consumer: they wait there forever",
                s.name
            ),
        )
    })
}

fn expires_on_retry_path(s: &Subject) -> Option<Finding> {
    let e = s.n.setting(s.name, Setting::Expires)?;
    (s.n.has(s.name, Setting::DeadLetterExchange) || !s.n.feeders(s.name).is_empty()).then(|| {
        Finding::on(
            Rule::ExpiresOnRetryPath,
            s.name,
            format!("`{}` expires after {} ms unused{}: deleted with the messages in it", s.name, e.value, source(&e)),
        )
    })
}

fn drop_head_on_wait_or_dead_letter_queue(s: &Subject) -> Option<Finding> {
    ((s.wait || s.dead_letter_queue) && s.n.can_dead_letter(s.name, Reason::Maxlen)).then(|| {
        let (what, effect) = if s.dead_letter_queue {
            ("dead-letter queue", "are discarded when it is full")
        } else {
            ("wait queue", "leave before their delay when it is full")
        };
        Finding::on(
            Rule::DropHeadOnWaitOrDeadLetterQueue,
            s.name,
            format!("{what} `{}` has a length limit with drop-head overflow: its oldest messages {effect}", s.name),
        )
    })
}

fn at_least_once_not_in_force(s: &Subject) -> Option<Finding> {
    let asked = s.n.text(s.name, Setting::DeadLetterStrategy).as_deref() == Some("at-least-once");
    if !asked || s.n.at_least_once(s.name) {
        return None;
    }
    let why = if !s.q.quorum {
        "it is a classic queue, which dead-letters at most once".to_string()
    } else {
        format!(
            "its overflow is {}, not reject-publish",
            s.n.text(s.name, Setting::Overflow).unwrap_or_else(|| "drop-head (the default)".into())
        )
    };
    Some(Finding::on(
        Rule::AtLeastOnceNotInForce,
        s.name,
        format!("`{}` asks for at-least-once dead-lettering, but {why}: dead letters can be lost in transit", s.name),
    ))
}

fn unknown_arguments(s: &Subject) -> Vec<Finding> {
    s.q.arguments
        .keys()
        .filter(|key| !KNOWN_ARGUMENTS.contains(key) || !s.n.version.knows_argument(key))
        .map(|key| {
            if KNOWN_ARGUMENTS.contains(&key) {
                return Finding::on(
                    Rule::UnknownArgument,
                    s.name,
                    format!(
                        "`{}` has argument `{key}`, which RabbitMQ {} does not know and ignores",
                        s.name, s.n.version
                    ),
                );
            }
            let hint = if KNOWN_ARGUMENTS.contains(&format!("x-{key}").as_str()) {
                format!("; did you mean `x-{key}`?")
            } else {
                KNOWN_ARGUMENTS
                    .iter()
                    .map(|k| (k, strsim::jaro_winkler(key, k)))
                    .filter(|(_, score)| *score > 0.85)
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .map(|(k, _)| format!("; did you mean `{k}`?"))
                    .unwrap_or_default()
            };
            Finding::on(
                Rule::UnknownArgument,
                s.name,
                format!("`{}` has argument `{key}`, which RabbitMQ ignores{hint}", s.name),
            )
        })
        .collect()
}

fn delivery_limit_drops(s: &Subject) -> Option<Finding> {
    if !s.q.quorum || s.n.has(s.name, Setting::DeadLetterExchange) {
        return None;
    }
    let limit = s.n.delivery_limit(s.name).filter(|l| *l < UNREACHABLE_DELIVERY_LIMIT)?;
    let default = if s.n.has(s.name, Setting::DeliveryLimit) { "" } else { " (RabbitMQ 4's default)" };
    let what = match s.n.version.delivery_count() {
        DeliveryCount::EveryReturn => "redelivered",
        DeliveryCount::FailedOnly => {
            "given back as failed (basic.reject, a consumer crash; on RabbitMQ 4.3 a nack with requeue does not count)"
        }
    };
    Some(Finding::on(
        Rule::DeliveryLimitDrops,
        s.name,
        format!(
            "quorum queue `{}` drops a message {what} more than {limit} time(s){default}: it has no dead-letter exchange",
            s.name
        ),
    ))
}

/// redeliveries-unbounded: a queue consumers read, with no delivery limit on its broker's
/// version (a quorum queue before 4.0 that sets none).
fn redeliveries_unbounded(s: &Subject) -> Option<Finding> {
    if !s.q.quorum || s.wait || s.dead_letter_queue || s.n.delivery_limit(s.name).is_some() {
        return None;
    }
    Some(Finding::on(
        Rule::RedeliveriesUnbounded,
        s.name,
        format!(
            "quorum queue `{}` has no delivery limit on RabbitMQ {}: a message that is requeued, or whose consumer crashes, is redelivered forever",
            s.name, s.n.version
        ),
    ))
}

/// schedule-outlives-ttl: a queue with native delayed retry (RabbitMQ 4.3) holds a message
/// through every retry; its message TTL (argument or policy) shorter than the whole schedule,
/// min × n capped at max for each retry the delivery limit allows, cuts the retries short.
fn schedule_outlives_ttl(s: &Subject) -> Option<Finding> {
    let args = &s.q.arguments;
    let int = |key: &str| match args.get(key) {
        Some(ArgValue::Int(n)) => Some(*n),
        _ => None,
    };
    if args.get("x-delayed-retry-type").and_then(ArgValue::as_str).is_none_or(|t| t == "disabled") {
        return None;
    }
    let (min, max) = (int("x-delayed-retry-min")?, int("x-delayed-retry-max").unwrap_or(i64::MAX));
    let retries = s.n.delivery_limit(s.name)?.min(UNREACHABLE_DELIVERY_LIMIT);
    let schedule: i64 = (1..=retries).map(|n| min.saturating_mul(n).min(max)).fold(0, i64::saturating_add);
    let ttl = s.n.setting(s.name, Setting::MessageTtl)?;
    let ArgValue::Int(ttl_ms) = ttl.value else { return None };
    (ttl_ms < schedule).then(|| {
        Finding::on(
            Rule::ScheduleOutlivesTtl,
            s.name,
            format!(
                "`{}` expires its messages after {ttl_ms} ms{}, but its {retries} delayed retries take {schedule} ms: a message that keeps failing expires before its last attempt",
                s.name,
                source(&ttl)
            ),
        )
    })
}

/// argument-refused-by-broker: arguments the broker's release no longer declares.
fn arguments_refused(s: &Subject) -> Vec<Finding> {
    s.q.arguments
        .iter()
        .filter_map(|(key, value)| {
            let why = s.n.version.refuses_argument(key, value)?;
            Some(Finding::on(
                Rule::ArgumentRefusedByBroker,
                s.name,
                format!("`{}` has {key} = {value}: {why}, so the queue cannot be declared again", s.name),
            ))
        })
        .collect()
}

fn dead_letter_queue_not_terminal(s: &Subject) -> Option<Finding> {
    if !s.dead_letter_queue {
        return None;
    }
    let what = match (s.n.setting(s.name, Setting::MessageTtl), s.n.text(s.name, Setting::DeadLetterExchange)) {
        (Some(ttl), _) => format!("expires its messages after {} ms{}", ttl.value, source(&ttl)),
        (None, Some(x)) => format!("passes its dead letters on to exchange `{x}`"),
        (None, None) => return None,
    };
    Some(Finding::on(Rule::DeadLetterQueueNotTerminal, s.name, format!("dead-letter queue `{}` {what}", s.name)))
}

/// A queue that holds messages for a TTL and then dead-letters them: from the spec's role, or on
/// a live broker from its shape.
pub fn is_wait_queue(n: &Network, name: &str) -> bool {
    let Some(q) = n.queues.get(name) else { return false };
    match q.role {
        Some(role) => role == RoleKind::Wait,
        None => n.has(name, Setting::MessageTtl) && n.has(name, Setting::DeadLetterExchange),
    }
}

/// A parking lot: from the spec's role, or on a live broker a queue that receives dead letters
/// and is named like one.
pub fn is_dead_letter_queue(n: &Network, name: &str) -> bool {
    let Some(q) = n.queues.get(name) else { return false };
    match q.role {
        Some(role) => role == RoleKind::DeadLetter,
        None => {
            let lower = name.to_ascii_lowercase();
            ["dlq", "dead", "parking", "error", "failed", "poison"].iter().any(|w| lower.contains(w))
                && !n.feeders(name).is_empty()
        }
    }
}

fn source(e: &Effective) -> String {
    match (&e.source, &e.policy) {
        (Source::Policy, Some(p)) => format!(" (set by policy `{p}`)"),
        (Source::OperatorPolicy, Some(p)) => format!(" (set by operator policy `{p}`)"),
        _ => String::new(),
    }
}

fn join(queues: &[QueueName]) -> String {
    queues.iter().map(QueueName::as_str).collect::<Vec<_>>().join(", ")
}

/// Rules on what the spec says rather than on what it compiles to: `lint` runs them, `inspect`
/// cannot (a live vhost has no contract).
pub fn check_spec<'t>(topologies: impl Iterator<Item = &'t crate::spec::Topology>) -> Vec<Finding> {
    topologies.filter_map(idempotency_key_unstated).collect()
}

/// idempotency-key-unstated: the contract falls back on the message id, and nothing in the spec
/// says that producers set one (a message without it cannot be deduplicated at all).
fn idempotency_key_unstated(t: &crate::spec::Topology) -> Option<Finding> {
    if t.idempotency_key.is_some() {
        return None;
    }
    let queues = crate::contract::contract(t).consume.into_iter().map(|c| c.queue).collect();
    Some(Finding::new(
        Rule::IdempotencyKeyUnstated,
        format!(
            "topology `{}`: its consumers can tell a duplicate only by the message id, and the spec does not say that producers set one; state it with idempotency_key = \"message_id\", or name the header producers set: idempotency_key = {{ header = \"order-id\" }}",
            t.name
        ),
        queues,
        Vec::new(),
    ))
}

/// dead-letter-cycle: a way round with no rejection, found by following every queue's
/// non-rejected deaths. The same cycle found from each of its queues is one finding.
fn dead_letter_cycles(n: &Network, out: &mut Vec<Finding>) {
    let mut found = std::collections::BTreeSet::new();
    for name in n.queue_names() {
        for reason in [Reason::Expired, Reason::Maxlen, Reason::DeliveryLimit] {
            if !n.can_dead_letter(name, reason) {
                continue;
            }
            let path = n.path(name, reason);
            if let End::DroppedAsCycle { .. } = &path.end {
                let mut queues: Vec<QueueName> = path.hops.iter().map(|h| h.queue.clone()).collect();
                queues.sort();
                queues.dedup();
                if found.insert(queues.clone()) {
                    out.push(Finding::new(
                        Rule::DeadLetterCycle,
                        format!(
                            "a message that dies in `{name}` ({}) goes round {} and is dropped on its way back",
                            reason.as_str(),
                            queues.iter().map(QueueName::as_str).collect::<Vec<_>>().join(" -> ")
                        ),
                        queues,
                        Vec::new(),
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec;

    fn lint(toml: &str) -> Vec<Finding> {
        let c = spec::from_str("t.toml", toml).unwrap_or_else(|e| panic!("{}", e.render_plain())).compiled;
        check(&Network::from_compiled(&c.iter().collect::<Vec<_>>(), crate::version::CURRENT))
    }

    #[test]
    fn a_ttl_shorter_than_a_native_schedule_is_found() {
        let toml = "[topology.orders]\nstrategy = \"native\"\nbackoff = { initial = \"1s\", max = \"3s\", shape = \"linear\" }\nmax_attempts = 5\n";
        let c = spec::from_str("t.toml", toml).unwrap_or_else(|e| panic!("{}", e.render_plain())).compiled;
        let mut n = Network::from_compiled(&c.iter().collect::<Vec<_>>(), crate::version::CURRENT);
        assert_eq!(check(&n), vec![], "hopper's own native topology is clean");
        // Retries wait 1 + 2 + 3 + 3 = 9 s: a TTL of 8 s cuts the last one short, 9 s does not.
        let q = n.queues.get_mut("orders").unwrap();
        q.arguments.insert("x-message-ttl", ArgValue::Int(8_000));
        let findings = check(&n);
        assert_eq!(findings.iter().map(|f| f.rule).collect::<Vec<_>>(), [Rule::ScheduleOutlivesTtl], "{findings:#?}");
        assert!(findings[0].message.contains("4 delayed retries take 9000 ms"), "{}", findings[0].message);
        n.queues.get_mut("orders").unwrap().arguments.insert("x-message-ttl", ArgValue::Int(9_000));
        assert_eq!(check(&n), vec![]);
    }

    #[test]
    fn every_hopper_topology_is_clean() {
        for strategy in ["republish", "chain"] {
            for queue_type in ["quorum", "classic"] {
                let findings = lint(&format!(
                    "[topology.orders]\nstrategy = \"{strategy}\"\nqueue_type = \"{queue_type}\"\nexchange_type = \"topic\"\ndelays = [\"1s\", \"5s\"]\nmax_attempts = 4\n\n[topology.emails]\nexchange_type = \"fanout\"\nmax_attempts = 1\n"
                ));
                assert_eq!(findings, vec![], "{strategy} {queue_type}");
            }
        }
    }

    #[test]
    fn a_routing_key_left_by_the_previous_hop_that_nothing_matches_is_unroutable() {
        let findings = check(&crate::network::tests::loop_without_routing_key(None));
        let rules: Vec<(Rule, Vec<&str>)> =
            findings.iter().map(|f| (f.rule, f.queues.iter().map(|q| q.as_str()).collect())).collect();
        assert!(rules.contains(&(Rule::DeadLettersUnroutable, vec!["wait"])), "{findings:#?}");
        assert!(rules.contains(&(Rule::DeadLetterRoutingKeyMissing, vec!["wait"])), "{findings:#?}");
        assert!(findings.iter().any(|f| f.rule == Rule::DeadLettersUnroutable && f.exchanges == ["orders"]));
        // An alternate exchange catches it: only the warning remains.
        let findings = check(&crate::network::tests::loop_without_routing_key(Some("unrouted")));
        assert_eq!(findings.iter().map(|f| f.rule).collect::<Vec<_>>(), [Rule::DeadLetterRoutingKeyMissing]);
    }

    #[test]
    fn a_release_decides_which_rules_apply() {
        use crate::model::ArgValue;
        use crate::version::Version;
        let upgraded = |v: Version| {
            let mut n = Network::default().with_queue("old", &[("x-queue-version", ArgValue::Int(1))]).with_queue(
                "work",
                &[("x-queue-type", ArgValue::str("quorum")), ("x-dead-letter-exchange", ArgValue::str(""))],
            );
            n.version = v;
            check(&n).into_iter().map(|f| f.rule).collect::<Vec<_>>()
        };
        // A queue from before an upgrade that 4.3 would refuse to declare again; a quorum queue
        // whose redeliveries nothing bounds on 3.x.
        assert_eq!(upgraded(Version::new(4, 3, 6)), [Rule::ArgumentRefusedByBroker]);
        assert_eq!(upgraded(Version::new(4, 0, 5)), Vec::<Rule>::new());
        assert_eq!(upgraded(Version::new(3, 10, 8)), [Rule::RedeliveriesUnbounded]);
    }

    #[test]
    fn a_cluster_judges_members_online_against_a_majority() {
        use crate::live::{Alarm, Member, Node, Placement};
        let quorum = |online: &[bool]| {
            let members =
                online.iter().enumerate().map(|(i, on)| Member { node: format!("n{i}"), online: *on }).collect();
            let mut n = Network::default().with_queue("q", &[("x-queue-type", crate::model::ArgValue::str("quorum"))]);
            n.queues.get_mut("q").unwrap().placement = Some(Placement::Quorum { leader: Some("n0".into()), members });
            cluster(&n).into_iter().map(|f| (f.rule, f.nodes)).collect::<Vec<_>>()
        };
        assert_eq!(quorum(&[true, true, true]), []);
        assert_eq!(quorum(&[true, true, false]), [(Rule::QuorumMembersOffline, vec!["n2".to_string()])]);
        assert_eq!(quorum(&[true, false, false]), [(Rule::QuorumBelowMajority, vec!["n1".to_string(), "n2".into()])]);
        // Five members: three online is a majority, two is not.
        assert_eq!(quorum(&[true, true, true, false, false])[0].0, Rule::QuorumMembersOffline);
        assert_eq!(quorum(&[true, true, false, false, false])[0].0, Rule::QuorumBelowMajority);

        let mut n = Network::default().with_queue("c", &[]);
        n.queues.get_mut("c").unwrap().placement = Some(Placement::Classic { node: "n1".into(), available: false });
        n.nodes = vec![Node { name: "n0".into(), running: true, alarms: vec![Alarm::Disk] }];
        let rules: Vec<Rule> = cluster(&n).into_iter().map(|f| f.rule).collect();
        assert_eq!(rules, [Rule::ClassicQueueUnavailable, Rule::PublishersBlocked]);
    }

    #[test]
    fn a_spec_that_does_not_say_who_sets_the_key_is_warned_about() {
        let spec = |extra: &str| {
            spec::from_str("t.toml", &format!("{extra}[topology.orders]\nstrategy = \"chain\"\ndelays = [\"1s\"]\n"))
                .unwrap_or_else(|e| panic!("{}", e.render_plain()))
        };
        let findings = check_spec(spec("").topologies());
        assert_eq!(findings.len(), 1, "{findings:#?}");
        let f = &findings[0];
        assert_eq!((f.rule, f.severity), (Rule::IdempotencyKeyUnstated, Severity::Warning));
        assert_eq!(f.queues, ["orders", "orders.attempt-2"], "the queues consumers read");
        assert!(f.message.contains("idempotency_key = \"message_id\""), "{}", f.message);
        for stated in ["idempotency_key = \"message_id\"\n", "idempotency_key = { header = \"order-id\" }\n"] {
            assert_eq!(check_spec(spec(&format!("[defaults]\n{stated}")).topologies()), vec![], "{stated}");
        }
    }

    #[test]
    fn every_rule_has_its_own_id() {
        let ids: std::collections::BTreeSet<_> = Rule::ALL.iter().map(|r| r.id()).collect();
        assert_eq!(ids.len(), Rule::ALL.len());
    }

    #[test]
    fn a_dead_letter_cycle_is_one_finding_whichever_queue_it_is_found_from() {
        let s = |v: &str| crate::model::ArgValue::str(v);
        let n = Network::default()
            .with_queue(
                "a",
                &[
                    ("x-message-ttl", crate::model::ArgValue::Int(5)),
                    ("x-dead-letter-exchange", s("")),
                    ("x-dead-letter-routing-key", s("b")),
                ],
            )
            .with_queue(
                "b",
                &[
                    ("x-message-ttl", crate::model::ArgValue::Int(5)),
                    ("x-dead-letter-exchange", s("")),
                    ("x-dead-letter-routing-key", s("a")),
                ],
            );
        let cycles: Vec<_> = check(&n).into_iter().filter(|f| f.rule == Rule::DeadLetterCycle).collect();
        assert_eq!(cycles.len(), 1, "{cycles:#?}");
        assert_eq!(cycles[0].queues, ["a", "b"]);
    }
}
