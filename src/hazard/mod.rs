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

/// Why a queue is part of a retry path: every message in it is one someone means to retry or
/// park, so losing one is never intended. Read from the routing network alone, so that it holds
/// for any vhost, hopper's or not. (A queue that has a dead-letter exchange of its own passes on
/// what it would otherwise drop: the drop rules never meet it.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RetryPath<'n> {
    /// The spec gives it a part (work, wait or dead-letter queue): every queue hopper compiles.
    Role(RoleKind),
    /// Another queue's dead letters reach it (the first such queue by name).
    Receives(&'n QueueName),
}

impl std::fmt::Display for RetryPath<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RetryPath::Role(RoleKind::Work) => f.write_str("it is the work queue of a retry topology"),
            RetryPath::Role(RoleKind::Wait) => f.write_str("it is a wait queue of a retry topology"),
            RetryPath::Role(RoleKind::DeadLetter) => f.write_str("it is the dead-letter queue of a retry topology"),
            RetryPath::Receives(from) => write!(f, "it receives the dead letters of `{from}`"),
        }
    }
}

/// Whether `name` is on a retry path, and why: from the spec's role; on a live vhost, when
/// another queue's dead letters reach it.
fn retry_path<'n>(n: &'n Network, name: &str) -> Option<RetryPath<'n>> {
    let q = n.queues.get(name)?;
    if let Some(role) = q.role {
        return Some(RetryPath::Role(role));
    }
    n.feeders(name).iter().min().map(RetryPath::Receives)
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
        out.extend(at_most_once_dead_lettering(&s));
        out.extend(message_ttl_drops(&s));
        out.extend(max_length_drops(&s));
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

/// at-most-once-dead-lettering: a quorum queue with a dead-letter exchange whose strategy is at
/// most once, by default or by choice. One that asks for at-least-once and does not get it is
/// `at-least-once-not-in-force`'s. Classic queues have no other way to dead-letter: not reported.
fn at_most_once_dead_lettering(s: &Subject) -> Option<Finding> {
    if !s.q.quorum || s.n.at_least_once(s.name) {
        return None;
    }
    let dlx = s.n.setting(s.name, Setting::DeadLetterExchange)?;
    let strategy = s.n.setting(s.name, Setting::DeadLetterStrategy);
    let chosen = match &strategy {
        Some(e) if e.value.as_str() == Some("at-least-once") => return None,
        Some(e) => format!("dead-letter-strategy {}{}", e.value, source(e)),
        None => "the default".to_string(),
    };
    let through = match s.n.text(s.name, Setting::DeadLetterExchange).unwrap_or_default() {
        x if x.is_empty() => "the default exchange".to_string(),
        x => format!("exchange `{x}`"),
    };
    Some(Finding::on(
        Rule::AtMostOnceDeadLettering,
        s.name,
        format!(
            "quorum queue `{}` dead-letters through {through}{} at most once ({chosen}): a dead letter its target cannot take (full, unavailable, without quorum) is lost; set dead-letter-strategy at-least-once with overflow reject-publish",
            s.name,
            source(&dlx)
        ),
    ))
}

/// message-ttl-drops: messages expire from a queue with no dead-letter exchange. A dead-letter
/// queue's TTL is `dead-letter-queue-not-terminal`'s.
fn message_ttl_drops(s: &Subject) -> Option<Finding> {
    if s.dead_letter_queue || s.n.has(s.name, Setting::DeadLetterExchange) {
        return None;
    }
    let ttl = s.n.setting(s.name, Setting::MessageTtl)?;
    let message = format!(
        "`{}` drops a message that is not consumed within its message TTL of {} ms{}: it has no dead-letter exchange",
        s.name,
        ttl.value,
        source(&ttl)
    );
    Some(dropping(s, Rule::MessageTtlDrops, message, true))
}

/// max-length-drops: a full queue with no dead-letter exchange drops its oldest messages (or a
/// classic queue with reject-publish-dlx the one published). A dead-letter queue's limit is
/// `drop-head-on-wait-or-dead-letter-queue`'s.
fn max_length_drops(s: &Subject) -> Option<Finding> {
    if s.dead_letter_queue
        || s.n.has(s.name, Setting::DeadLetterExchange)
        || !s.n.can_dead_letter(s.name, Reason::Maxlen)
    {
        return None;
    }
    let limits: Vec<String> = [Setting::MaxLength, Setting::MaxLengthBytes]
        .into_iter()
        .filter_map(|limit| s.n.setting(s.name, limit).map(|e| format!("{limit} {}{}", e.value, source(&e))))
        .collect();
    let which = match s.n.text(s.name, Setting::Overflow).as_deref() {
        Some("reject-publish-dlx") if !s.q.quorum => "the message published when it is full",
        Some("reject-publish-dlx") => {
            "its oldest message when it is full (a quorum queue runs reject-publish-dlx as drop-head)"
        }
        _ => "its oldest message when it is full",
    };
    let message = format!("`{}` drops {which} ({}): it has no dead-letter exchange", s.name, limits.join(", "));
    Some(dropping(s, Rule::MaxLengthDrops, message, true))
}

/// A drop rule's finding: a warning where the queue's own setting (`chosen`) may mean the drop,
/// an error where no one can (`Rule::severity`): on a retry path, which its message names, or
/// by a setting no one chose. The retry path is worked out here, for a queue that drops only:
/// it needs every queue's dead-letter route.
fn dropping(s: &Subject, rule: Rule, message: String, chosen: bool) -> Finding {
    let path = retry_path(s.n, s.name);
    let on = path.map(|why| format!(", and it is on a retry path ({why})")).unwrap_or_default();
    let mut f = Finding::on(rule, s.name, format!("{message}{on}"));
    if path.is_some() || !chosen {
        f.severity = Severity::Error;
    }
    f
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
    // A limit someone set may mean to drop poison messages; RabbitMQ 4's default, or a -1 that
    // 3.x reads as 0, means no such thing.
    let set = s.n.setting(s.name, Setting::DeliveryLimit);
    let chosen = matches!(set.as_ref().map(|e| &e.value), Some(ArgValue::Int(n)) if *n >= 0);
    let default = match &set {
        None => " (RabbitMQ 4's default)".to_string(),
        Some(e) if !chosen => {
            format!(" (a delivery limit of {}, which RabbitMQ {} reads as {limit})", e.value, s.n.version)
        }
        Some(e) => source(e),
    };
    let what = match s.n.version.delivery_count() {
        DeliveryCount::EveryReturn => "redelivered",
        DeliveryCount::FailedOnly => {
            "given back as failed (basic.reject, a consumer crash; on RabbitMQ 4.3 a nack with requeue does not count)"
        }
    };
    let message = format!(
        "quorum queue `{}` drops a message {what} more than {limit} time(s){default}: it has no dead-letter exchange",
        s.name
    );
    Some(dropping(s, Rule::DeliveryLimitDrops, message, chosen))
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

    fn lint(toml: &str, version: crate::version::Version) -> Vec<Finding> {
        let c = spec::from_str("t.toml", toml).unwrap_or_else(|e| panic!("{}", e.render_plain())).compiled;
        check(&Network::from_compiled(&c.iter().collect::<Vec<_>>(), version))
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
        use crate::version::Version;
        // Judged as every release of the matrix runs it: the delivery limit's default, at-most-once
        // dead-lettering and drops depend on it.
        for version in [Version::new(3, 10, 0), Version::new(4, 0, 0), crate::version::CURRENT] {
            for strategy in ["republish", "chain"] {
                for queue_type in ["quorum", "classic"] {
                    let findings = lint(
                        &format!(
                            "[topology.orders]\nstrategy = \"{strategy}\"\nqueue_type = \"{queue_type}\"\nexchange_type = \"topic\"\ndelays = [\"1s\", \"5s\"]\nmax_attempts = 4\n\n[topology.emails]\nexchange_type = \"fanout\"\nmax_attempts = 1\n"
                        ),
                        version,
                    );
                    assert_eq!(findings, vec![], "{strategy} {queue_type} on {version}");
                }
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
                &[
                    ("x-queue-type", ArgValue::str("quorum")),
                    ("x-dead-letter-exchange", ArgValue::str("")),
                    ("x-dead-letter-strategy", ArgValue::str("at-least-once")),
                    ("x-overflow", ArgValue::str("reject-publish")),
                ],
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

    /// The findings of a network as (rule, severity, queue), for the rules a test is about.
    fn judged(n: &Network, rules: &[Rule]) -> Vec<(Rule, Severity, String)> {
        check(n)
            .into_iter()
            .filter(|f| rules.contains(&f.rule))
            .map(|f| (f.rule, f.severity, f.queues.iter().map(QueueName::as_str).collect::<Vec<_>>().join(",")))
            .collect()
    }

    fn with_policy(mut n: Network, queue: &str, name: &str, definition: &[(&str, ArgValue)]) -> Network {
        let definition = definition.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        n.queues.get_mut(queue).unwrap().policy =
            Some(std::sync::Arc::new(crate::policy::AppliedPolicy { name: name.into(), definition }));
        n
    }

    #[test]
    fn quorum_dead_lettering_at_most_once_is_an_error() {
        let s = ArgValue::str;
        let quorum = |extra: &[(&'static str, ArgValue)]| {
            let mut args = vec![
                ("x-queue-type", s("quorum")),
                ("x-dead-letter-exchange", s("")),
                ("x-dead-letter-routing-key", s("park")),
            ];
            args.extend(extra.iter().cloned());
            Network::default().with_queue("park", &[]).with_queue("work", &args)
        };
        let rules = [Rule::AtMostOnceDeadLettering, Rule::AtLeastOnceNotInForce];
        let error = |rule| vec![(rule, Severity::Error, "work".to_string())];
        assert_eq!(judged(&quorum(&[]), &rules), error(Rule::AtMostOnceDeadLettering), "the default");
        let chosen = quorum(&[("x-dead-letter-strategy", s("at-most-once"))]);
        assert_eq!(judged(&chosen, &rules), error(Rule::AtMostOnceDeadLettering), "chosen");
        let message = &check(&chosen)[0].message;
        assert!(message.contains("(dead-letter-strategy \"at-most-once\")"), "{message}");
        let safe = [("x-dead-letter-strategy", s("at-least-once")), ("x-overflow", s("reject-publish"))];
        assert_eq!(judged(&quorum(&safe), &rules), []);
        // Asked for and not in force: the other rule's, not both.
        let downgraded = quorum(&[("x-dead-letter-strategy", s("at-least-once"))]);
        assert_eq!(judged(&downgraded, &rules), error(Rule::AtLeastOnceNotInForce));
        // On a quorum queue a policy's overflow overrides the argument's (notes §2.6).
        let overridden = with_policy(quorum(&safe), "work", "bounded", &[("overflow", s("drop-head"))]);
        assert_eq!(judged(&overridden, &rules), error(Rule::AtLeastOnceNotInForce));
        // A classic queue has no other way: not reported. No dead-letter exchange: nothing to lose.
        let classic = Network::default()
            .with_queue("work", &[("x-dead-letter-exchange", s("")), ("x-dead-letter-routing-key", s("park"))]);
        assert_eq!(judged(&classic, &rules), []);
        assert_eq!(judged(&Network::default().with_queue("work", &[("x-queue-type", s("quorum"))]), &rules), []);
        // A dead-letter exchange set by a policy (a blanket policy, as RabbitMQ advises).
        let blanket = with_policy(
            Network::default().with_queue("park", &[]).with_queue("work", &[("x-queue-type", s("quorum"))]),
            "work",
            "dead-letters",
            &[("dead-letter-exchange", s("")), ("dead-letter-routing-key", s("park"))],
        );
        let findings = check(&blanket);
        assert_eq!(judged(&blanket, &rules), error(Rule::AtMostOnceDeadLettering));
        assert!(findings[0].message.contains("(set by policy `dead-letters`)"), "{}", findings[0].message);
    }

    #[test]
    fn drops_are_warnings_off_a_retry_path_and_errors_on_one() {
        use crate::version::Version;
        let s = ArgValue::str;
        let drops = [Rule::MessageTtlDrops, Rule::MaxLengthDrops, Rule::DeliveryLimitDrops];
        let one = |args: &[(&str, ArgValue)]| judged(&Network::default().with_queue("q", args), &drops);
        let warning = |rule| vec![(rule, Severity::Warning, "q".to_string())];
        let error = |rule| vec![(rule, Severity::Error, "q".to_string())];

        // Off a retry path, a setting of the queue's own: a cache, a bounded buffer, a limit.
        assert_eq!(one(&[("x-message-ttl", ArgValue::Int(100))]), warning(Rule::MessageTtlDrops));
        assert_eq!(one(&[("x-max-length", ArgValue::Int(1))]), warning(Rule::MaxLengthDrops));
        assert_eq!(one(&[("x-max-length-bytes", ArgValue::Int(1))]), warning(Rule::MaxLengthDrops));
        let dlx = ("x-overflow", s("reject-publish-dlx"));
        assert_eq!(one(&[("x-max-length", ArgValue::Int(1)), dlx.clone()]), warning(Rule::MaxLengthDrops));
        // reject-publish drops nothing (the publisher is told); a quorum queue reads
        // reject-publish-dlx as drop-head.
        assert_eq!(one(&[("x-max-length", ArgValue::Int(1)), ("x-overflow", s("reject-publish"))]), []);
        let quorum = ("x-queue-type", s("quorum"));
        let limited = ("x-delivery-limit", ArgValue::Int(3));
        assert_eq!(
            one(&[quorum.clone(), limited.clone(), ("x-max-length", ArgValue::Int(1)), dlx]),
            [
                (Rule::DeliveryLimitDrops, Severity::Warning, "q".into()),
                (Rule::MaxLengthDrops, Severity::Warning, "q".into())
            ]
        );
        assert_eq!(one(&[quorum.clone(), limited.clone()]), warning(Rule::DeliveryLimitDrops));
        // A dead-letter exchange: dead-lettered, not dropped.
        assert_eq!(one(&[("x-message-ttl", ArgValue::Int(100)), ("x-dead-letter-exchange", s("elsewhere"))]), []);

        // The default delivery limit is no one's choice; nor is a -1 that 3.x reads as 0.
        assert_eq!(one(std::slice::from_ref(&quorum)), error(Rule::DeliveryLimitDrops));
        let mut old = Network::default().with_queue("q", &[quorum.clone(), ("x-delivery-limit", ArgValue::Int(-1))]);
        old.version = Version::new(3, 10, 8);
        assert_eq!(judged(&old, &drops), error(Rule::DeliveryLimitDrops));
        assert!(check(&old)[0].message.contains("which RabbitMQ 3.10.8 reads as 0"), "{:#?}", check(&old));

        // On a retry path, every one is an error, and says why it is on one.
        let fed = |args: &[(&str, ArgValue)]| {
            let into = [("x-dead-letter-exchange", s("")), ("x-dead-letter-routing-key", s("q"))];
            Network::default().with_queue("work", &into).with_queue("q", args)
        };
        for (args, rule) in [
            (vec![("x-message-ttl", ArgValue::Int(100))], Rule::MessageTtlDrops),
            (vec![("x-max-length", ArgValue::Int(1))], Rule::MaxLengthDrops),
            (vec![quorum.clone(), limited.clone()], Rule::DeliveryLimitDrops),
        ] {
            let n = fed(&args);
            assert_eq!(judged(&n, &drops), error(rule), "{args:?}");
            let f = check(&n).into_iter().find(|f| f.rule == rule).unwrap();
            assert!(f.message.ends_with("on a retry path (it receives the dead letters of `work`)"), "{}", f.message);
        }
        // A parking lot's TTL and length are the dead-letter queue rules', not these.
        let parking = Network::default()
            .with_queue("work", &[("x-dead-letter-exchange", s("")), ("x-dead-letter-routing-key", s("work.dlq"))])
            .with_queue("work.dlq", &[("x-message-ttl", ArgValue::Int(100)), ("x-max-length", ArgValue::Int(1))]);
        assert_eq!(judged(&parking, &drops), []);
        let rules: Vec<Rule> = check(&parking).into_iter().map(|f| f.rule).collect();
        assert_eq!(rules, [Rule::DropHeadOnWaitOrDeadLetterQueue, Rule::DeadLetterQueueNotTerminal]);
    }

    #[test]
    fn a_retry_path_is_read_from_the_network() {
        let s = ArgValue::str;
        let n = Network::default()
            .with_queue("b", &[("x-dead-letter-exchange", s("")), ("x-dead-letter-routing-key", s("parked"))])
            .with_queue("a", &[("x-dead-letter-exchange", s("")), ("x-dead-letter-routing-key", s("parked"))])
            .with_queue("parked", &[])
            .with_queue("alone", &[("x-message-ttl", ArgValue::Int(5))]);
        assert_eq!(retry_path(&n, "a"), None, "it dead-letters, and nothing reaches it");
        assert_eq!(retry_path(&n, "parked"), Some(RetryPath::Receives(&QueueName::from("a"))));
        assert_eq!(retry_path(&n, "alone"), None);
        assert_eq!(retry_path(&n, "absent"), None);
        let c = spec::from_str("t.toml", "[topology.orders]\ndelays = [\"1s\"]\n")
            .unwrap_or_else(|e| panic!("{}", e.render_plain()))
            .compiled;
        let n = Network::from_compiled(&c.iter().collect::<Vec<_>>(), crate::version::CURRENT);
        assert_eq!(retry_path(&n, "orders.dlq"), Some(RetryPath::Role(RoleKind::DeadLetter)));
    }

    #[test]
    fn every_rule_has_its_own_id() {
        let ids: std::collections::BTreeSet<_> = Rule::ALL.iter().map(|r| r.id()).collect();
        assert_eq!(ids.len(), Rule::ALL.len());
    }

    /// `Rule::ALL` is kept by hand: a rule added to the enum and not to the list fails here.
    #[test]
    fn rule_all_lists_every_rule_once() {
        use strum::IntoEnumIterator;
        let missing: Vec<Rule> = Rule::iter().filter(|r| !Rule::ALL.contains(r)).collect();
        assert_eq!(missing, [], "not in Rule::ALL");
        assert_eq!(Rule::ALL.len(), Rule::iter().count(), "Rule::ALL lists a rule twice");
    }

    /// Each rule shows as its id, and the book's table of rules gives every rule, each with its
    /// severity and the RabbitMQ behaviour `because` states.
    #[test]
    fn every_rule_shows_as_its_id_and_is_in_the_book_as_it_states_itself() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/hazards.md")).unwrap();
        for rule in Rule::ALL {
            assert_eq!(rule.to_string(), rule.id());
            let prefix = format!("| `{}` | ", rule.id());
            let row = readme
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no row {prefix} in docs/hazards.md"));
            let columns: Vec<&str> = row[prefix.len()..].split(" | ").collect();
            let severity = match rule.severity() {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            assert!(columns[0].starts_with(severity), "{}: {row}", rule.id());
            // The book may say more, after what the rule says.
            assert!(
                columns[1].starts_with(rule.because()),
                "{}: docs/hazards.md says\n{}\nthe rule says\n{}",
                rule.id(),
                columns[1],
                rule.because()
            );
        }
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
