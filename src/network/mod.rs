//! A vhost as a routing network: exchanges, queues with their effective settings, and every
//! binding. Built from a compiled spec or from a live broker, so that the same hazard rules and
//! the same dead-letter paths apply to both. Pure: routing is simulated, never tried.

use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Serialize;

use crate::compile::CompiledTopology;
use crate::live::Live;
use crate::model::{
    ArgValue, Arguments, Binding, Destination, ExchangeName, ExchangeType, Object, QueueName, QueueType, RoleKind,
};
use crate::policy::{self, AppliedPolicy, Effective, Setting};
use crate::version::{self, Version};

/// Maps looked up millions of times in a large vhost: hashed, with a fast hash (names are not
/// chosen by an attacker who could make them collide, and ordered output is sorted where it is
/// shown).
pub type Map<K, V> = rustc_hash::FxHashMap<K, V>;

#[derive(Debug, Clone)]
pub struct Network {
    pub exchanges: Map<ExchangeName, Exchange>,
    pub queues: Map<QueueName, Queue>,
    /// Every binding, with the bindings of each source exchange found by index.
    bindings: Vec<Binding>,
    by_source: Map<ExchangeName, Vec<usize>>,
    /// The queues whose dead letters reach each queue, computed once when first asked.
    feeders: OnceCell<Map<QueueName, Vec<QueueName>>>,
    /// The RabbitMQ release the network runs on: the live broker's, or for a spec the one it is
    /// judged for (`lint --broker-version`, the current release by default).
    pub version: Version,
    /// The cluster's nodes, for a live vhost whose nodes could be read; empty for a spec.
    pub nodes: Vec<crate::live::Node>,
}

#[derive(Debug, Clone)]
pub struct Exchange {
    pub kind: ExchangeType,
    pub durable: bool,
    pub auto_delete: bool,
    pub alternate: Option<ExchangeName>,
}

#[derive(Debug, Clone)]
pub struct Queue {
    pub quorum: bool,
    pub durable: bool,
    pub auto_delete: bool,
    pub arguments: Arguments,
    pub policy: Option<Arc<AppliedPolicy>>,
    pub operator_policy: Option<Arc<AppliedPolicy>>,
    pub ready: Option<u64>,
    pub unacked: Option<u64>,
    pub consumers: Option<u64>,
    /// The part the queue plays, when a spec says so.
    pub role: Option<RoleKind>,
    /// Where it lives in the cluster: live queues only.
    pub placement: Option<crate::live::Placement>,
}

impl Queue {
    /// Argument, policy and operator policy combined as RabbitMQ does, for every setting.
    pub fn effective(&self) -> policy::Settings {
        policy::effective(self.quorum, &self.arguments, self.policy.as_deref(), self.operator_policy.as_deref())
    }

    /// The same for one setting: worked out when asked rather than stored, so a network of a
    /// million queues stays small.
    pub fn setting(&self, setting: Setting) -> Option<Effective> {
        policy::effective_one(
            setting,
            self.quorum,
            &self.arguments,
            self.policy.as_deref(),
            self.operator_policy.as_deref(),
        )
    }
}

/// Why RabbitMQ dead-letters a message (the `reason` of `x-death`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(test, derive(strum::EnumIter))]
pub enum Reason {
    Rejected,
    Expired,
    Maxlen,
    DeliveryLimit,
}

impl Reason {
    pub const ALL: [Reason; 4] = [Reason::Rejected, Reason::Expired, Reason::Maxlen, Reason::DeliveryLimit];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Rejected => "rejected",
            Reason::Expired => "expired",
            Reason::Maxlen => "maxlen",
            Reason::DeliveryLimit => "delivery_limit",
        }
    }
}

/// A death's reason as a message's `x-death` (or `x-first-death-reason`) says it: one of
/// RabbitMQ's, or a reason hopper does not know (a later broker's), kept as its own text so that
/// a summary shows it as the broker wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeathReason {
    Known(Reason),
    Other(String),
}

impl DeathReason {
    pub fn as_str(&self) -> &str {
        match self {
            DeathReason::Known(r) => r.as_str(),
            DeathReason::Other(text) => text,
        }
    }
}

impl From<&str> for DeathReason {
    fn from(text: &str) -> Self {
        match Reason::ALL.into_iter().find(|r| r.as_str() == text) {
            Some(r) => DeathReason::Known(r),
            None => DeathReason::Other(text.to_string()),
        }
    }
}

impl std::fmt::Display for DeathReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for DeathReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Where routing a message took it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routed {
    pub queues: BTreeSet<QueueName>,
    /// The exchange does not exist.
    pub missing_exchange: Option<ExchangeName>,
    /// Taken by an alternate exchange because nothing else matched.
    pub via_alternate: Option<ExchangeName>,
    /// Some binding's match depends on what the message carries (a headers exchange, or no
    /// dead-letter routing key so the message keeps routing keys no one can know here).
    pub uncertain: bool,
}

/// What happens to one dead letter of one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum DeadLetter {
    /// No dead-letter exchange: RabbitMQ discards it.
    Discarded,
    /// The dead-letter exchange does not exist.
    ExchangeMissing { exchange: ExchangeName, at_least_once: bool },
    /// Nothing matches the routing key.
    Unroutable { exchange: ExchangeName, routing_key: Option<String>, at_least_once: bool },
    /// Delivered to these queues. `routing_key` is the key it is published with: the queue's
    /// dead-letter routing key, or else the key it carried in when an earlier hop set it.
    Routed { exchange: ExchangeName, routing_key: Option<String>, queues: Vec<QueueName>, uncertain: bool },
}

/// One step of a dead-letter path, as shown to people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hop {
    pub queue: QueueName,
    pub reason: Reason,
    pub dead_letter: DeadLetter,
}

/// How a dead-letter path ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "end", rename_all = "snake_case")]
pub enum End {
    /// Consumers read it there (a work queue).
    Consumed { queue: QueueName },
    /// It stays there: no consumer, nothing moves it on (a dead-letter queue, or a queue whose
    /// consumers are away).
    Held { queue: QueueName },
    /// It waits there forever: no consumer, no TTL, yet it is a retry hop.
    Stranded { queue: QueueName },
    /// Rejected where there is no dead-letter exchange: thrown away, as the consumer asked.
    Discarded { queue: QueueName },
    /// Lost, with the reason.
    Dropped { why: String },
    /// Dropped by RabbitMQ's cycle detection: it would come back to `queue` with no rejection
    /// since it last left it.
    DroppedAsCycle { queue: QueueName },
    /// Kept and retried by the source queue forever (quorum at-least-once with no route).
    RetriedForever { queue: QueueName },
    /// Copies went to several queues; followed no further.
    Duplicated { queues: Vec<QueueName> },
    /// Cannot be followed: the routing depends on the message.
    Unknown { why: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Path {
    pub hops: Vec<Hop>,
    pub end: End,
}

impl Default for Network {
    fn default() -> Network {
        Network {
            exchanges: Map::default(),
            queues: Map::default(),
            bindings: Vec::new(),
            by_source: Map::default(),
            feeders: OnceCell::new(),
            version: version::CURRENT,
            nodes: Vec::new(),
        }
    }
}

impl Network {
    /// The network a spec compiles to, judged as `version` runs it.
    pub fn from_compiled(topologies: &[&CompiledTopology], version: Version) -> Network {
        let mut n = Network { version, ..Network::default() };
        for o in crate::plan::desired(topologies) {
            match o {
                Object::Exchange(e) => {
                    let exchange =
                        Exchange { kind: e.kind.clone(), durable: e.durable, auto_delete: false, alternate: None };
                    n.exchanges.insert(e.name.clone(), exchange);
                }
                Object::Queue(q) => {
                    let quorum = QueueType::of(&q.arguments) == QueueType::Quorum;
                    let queue = Queue {
                        quorum,
                        durable: q.durable,
                        auto_delete: false,
                        arguments: q.arguments.clone(),
                        policy: None,
                        operator_policy: None,
                        ready: None,
                        unacked: None,
                        consumers: None,
                        role: Some(q.role.kind()),
                        placement: None,
                    };
                    n.queues.insert(q.name.clone(), queue);
                }
                Object::Binding(b) => n.add_binding(b.clone()),
            }
        }
        n
    }

    pub fn from_live(live: &Live) -> Network {
        let mut n = Network {
            version: live.version.as_deref().and_then(|v| v.parse().ok()).unwrap_or(version::CURRENT),
            nodes: live.nodes.clone().unwrap_or_default(),
            ..Network::default()
        };
        for b in live.bindings.iter().flatten() {
            n.add_binding(b.clone());
        }
        for (name, e) in &live.exchanges {
            let alternate = e.arguments.get("alternate-exchange").and_then(ArgValue::as_str).map(ExchangeName::from);
            let exchange = Exchange { kind: e.kind.clone(), durable: e.durable, auto_delete: e.auto_delete, alternate };
            n.exchanges.insert(name.clone(), exchange);
        }
        for (name, q) in &live.queues {
            let arguments = q.arguments.clone().unwrap_or_default();
            let quorum = QueueType::of(&arguments) == QueueType::Quorum;
            let ready = q.messages.map(|m| m.saturating_sub(q.unacked.unwrap_or(0)));
            let queue = Queue {
                quorum,
                durable: q.durable,
                auto_delete: q.auto_delete,
                arguments,
                policy: q.policy.clone(),
                operator_policy: q.operator_policy.clone(),
                ready,
                unacked: q.unacked,
                consumers: q.consumers,
                role: None,
                placement: q.placement.clone(),
            };
            n.queues.insert(name.clone(), queue);
        }
        n
    }

    /// Every queue's name, in name order.
    pub fn queue_names(&self) -> Vec<&QueueName> {
        let mut names: Vec<&QueueName> = self.queues.keys().collect();
        names.sort();
        names
    }

    /// Every exchange's name, in name order.
    pub fn exchange_names(&self) -> Vec<&ExchangeName> {
        let mut names: Vec<&ExchangeName> = self.exchanges.keys().collect();
        names.sort();
        names
    }

    pub fn add_binding(&mut self, b: Binding) {
        self.by_source.entry(b.source.clone()).or_default().push(self.bindings.len());
        self.bindings.push(b);
        self.feeders = OnceCell::new();
    }

    pub fn bindings(&self) -> &[Binding] {
        &self.bindings
    }

    fn bindings_from<'a>(&'a self, exchange: &str) -> impl Iterator<Item = &'a Binding> + 'a {
        self.by_source.get(exchange).into_iter().flatten().map(|&i| &self.bindings[i])
    }

    /// The exchanges and queues a message published to `exchange` reaches. `routing_key` is
    /// `None` when it cannot be known (a dead letter without a dead-letter routing key).
    pub fn route(&self, exchange: &str, routing_key: Option<&str>) -> Routed {
        let mut routed = Routed::default();
        if exchange.is_empty() {
            // The default exchange: the queue named by the routing key, if there is one.
            match routing_key {
                Some(k) if self.queues.contains_key(k) => {
                    routed.queues.insert(QueueName::from(k));
                }
                Some(_) => {}
                None => routed.uncertain = true,
            }
            return routed;
        }
        let mut seen = BTreeSet::new();
        self.route_into(exchange, routing_key, &mut routed, &mut seen);
        routed
    }

    fn route_into<'a>(
        &'a self,
        exchange: &'a str,
        key: Option<&str>,
        routed: &mut Routed,
        seen: &mut BTreeSet<&'a str>,
    ) {
        if !seen.insert(exchange) {
            return; // exchange-to-exchange loops route once
        }
        let Some(e) = self.exchanges.get(exchange) else {
            routed.missing_exchange.get_or_insert_with(|| ExchangeName::from(exchange));
            return;
        };
        let (mut matched, mut maybe) = (false, false);
        for b in self.bindings_from(exchange) {
            let hit = match e.kind {
                ExchangeType::Fanout => Some(true),
                ExchangeType::Direct => key.map(|k| k == b.routing_key),
                ExchangeType::Topic => key.map(|k| topic_matches(&b.routing_key, k)),
                // A dead letter carries the message's own headers, which are not known here;
                // a plugin's exchange routes by rules of its own.
                ExchangeType::Headers | ExchangeType::Other(_) => None,
            };
            match hit {
                Some(true) => {
                    matched = true;
                    match &b.destination {
                        Destination::Exchange(to) => self.route_into(to, key, routed, seen),
                        Destination::Queue(q) => {
                            routed.queues.insert(q.clone());
                        }
                    }
                }
                Some(false) => {}
                None => {
                    routed.uncertain = true;
                    maybe = true;
                }
            }
        }
        // The alternate exchange takes the message only when no binding matches: not known when
        // one might.
        if !matched
            && !maybe
            && let Some(alternate) = &e.alternate
        {
            routed.via_alternate.get_or_insert_with(|| alternate.clone());
            self.route_into(alternate, key, routed, seen);
        }
    }

    pub fn setting(&self, queue: &str, setting: Setting) -> Option<Effective> {
        self.queues.get(queue)?.setting(setting)
    }

    pub fn has(&self, queue: &str, setting: Setting) -> bool {
        self.setting(queue, setting).is_some()
    }

    /// Whether `queue` can dead-letter for `reason` at all.
    pub fn can_dead_letter(&self, queue: &str, reason: Reason) -> bool {
        let Some(q) = self.queues.get(queue) else { return false };
        match reason {
            Reason::Rejected => true,
            Reason::Expired => self.has(queue, Setting::MessageTtl),
            // A quorum queue does not know reject-publish-dlx and runs the default, drop-head
            // (`rabbit_quorum_queue:overflow/3`; measured on 3.10.8, 4.0.5 and 4.3.6: of three
            // messages published to a queue of max-length 1, the newest is kept).
            Reason::Maxlen => {
                (self.has(queue, Setting::MaxLength) || self.has(queue, Setting::MaxLengthBytes))
                    && match self.setting(queue, Setting::Overflow).map(|e| e.value) {
                        None => true,
                        Some(ArgValue::Str(s)) => &*s == "drop-head" || &*s == "reject-publish-dlx",
                        Some(_) => false,
                    }
            }
            Reason::DeliveryLimit => q.quorum && self.delivery_limit(queue).is_some(),
        }
    }

    /// A quorum queue's delivery limit, as the broker runs it: the effective value, or 20 when
    /// none is set on RabbitMQ 4.x (and on a spec); `None` when unlimited.
    pub fn delivery_limit(&self, queue: &str) -> Option<i64> {
        let q = self.queues.get(queue)?;
        if !q.quorum {
            return None;
        }
        match self.setting(queue, Setting::DeliveryLimit).map(|e| e.value) {
            Some(ArgValue::Int(n)) if n >= 0 => Some(n),
            Some(ArgValue::Int(_)) => self.version.negative_delivery_limit(),
            Some(_) => None,
            None => self.version.default_delivery_limit(),
        }
    }

    /// The effective value of a setting, as text (strings unquoted).
    pub fn text(&self, queue: &str, setting: Setting) -> Option<String> {
        self.setting(queue, setting).map(|e| match e.value {
            ArgValue::Str(s) => s.to_string(),
            other => other.to_string(),
        })
    }

    /// What RabbitMQ does with one dead letter of `queue`, whatever routing keys it carries.
    pub fn dead_letter(&self, queue: &str) -> DeadLetter {
        self.dead_letter_carrying(queue, None)
    }

    /// What RabbitMQ does with one dead letter of `queue` that carries routing key `key` (set by
    /// an earlier hop's dead-letter routing key; `None` when unknown). With no dead-letter
    /// routing key of its own, the queue publishes it with the keys it has (`rabbit_dead_letter:
    /// publish/5`), so that key decides where it goes.
    pub fn dead_letter_carrying(&self, queue: &str, key: Option<&str>) -> DeadLetter {
        let Some(exchange) = self.text(queue, Setting::DeadLetterExchange).map(ExchangeName::from) else {
            return DeadLetter::Discarded;
        };
        let routing_key = self.text(queue, Setting::DeadLetterRoutingKey).or_else(|| key.map(str::to_string));
        let at_least_once = self.at_least_once(queue);
        if !exchange.is_default() && !self.exchanges.contains_key(&exchange) {
            return DeadLetter::ExchangeMissing { exchange, at_least_once };
        }
        let routed = self.route(&exchange, routing_key.as_deref());
        if routed.queues.is_empty() && !routed.uncertain {
            return DeadLetter::Unroutable { exchange, routing_key, at_least_once };
        }
        DeadLetter::Routed {
            exchange,
            routing_key,
            queues: routed.queues.into_iter().collect(),
            uncertain: routed.uncertain,
        }
    }

    /// Quorum at-least-once dead-lettering really in force (otherwise it is at most once).
    pub fn at_least_once(&self, queue: &str) -> bool {
        let Some(q) = self.queues.get(queue) else { return false };
        q.quorum
            && self.text(queue, Setting::DeadLetterStrategy).as_deref() == Some("at-least-once")
            && self.text(queue, Setting::Overflow).as_deref() == Some("reject-publish")
    }

    /// Where a message that dies in `queue` for `reason` goes, hop by hop, until it is consumed,
    /// held, or lost. Follows RabbitMQ's cycle rule: a message that comes back to a queue with no
    /// rejection since it last left it is dropped. Tracks the routing key: once a hop sets a
    /// dead-letter routing key, that is the message's only key until another hop sets one.
    pub fn path(&self, queue: &str, reason: Reason) -> Path {
        let mut hops = Vec::new();
        // (queue, reason) deaths so far, newest last, as x-death records them.
        let mut deaths: Vec<(QueueName, Reason)> = Vec::new();
        let (mut current, mut reason) = (QueueName::from(queue), reason);
        // The message's routing key, once known: the publisher's keys are not.
        let mut key: Option<String> = None;
        loop {
            let dead_letter = self.dead_letter_carrying(&current, key.as_deref());
            if let DeadLetter::Routed { routing_key, .. } = &dead_letter {
                key.clone_from(routing_key);
            }
            hops.push(Hop { queue: current.clone(), reason, dead_letter: dead_letter.clone() });
            deaths.push((current.clone(), reason));
            let target = match dead_letter {
                DeadLetter::Discarded if reason == Reason::Rejected => {
                    return Path { hops, end: End::Discarded { queue: current } };
                }
                DeadLetter::Discarded => {
                    let why = format!("`{current}` has no dead-letter exchange: RabbitMQ discards it");
                    return Path { hops, end: End::Dropped { why } };
                }
                DeadLetter::ExchangeMissing { at_least_once: true, .. }
                | DeadLetter::Unroutable { at_least_once: true, .. } => {
                    return Path { hops, end: End::RetriedForever { queue: current } };
                }
                DeadLetter::ExchangeMissing { exchange, .. } => {
                    let why = format!("dead-letter exchange `{exchange}` does not exist");
                    return Path { hops, end: End::Dropped { why } };
                }
                DeadLetter::Unroutable { exchange, routing_key, .. } => {
                    let key =
                        routing_key.map_or("its original routing keys".to_string(), |k| format!("routing key `{k}`"));
                    let why = format!("nothing bound to `{exchange}` matches {key}");
                    return Path { hops, end: End::Dropped { why } };
                }
                DeadLetter::Routed { queues, uncertain: true, .. } if queues.is_empty() => {
                    let why = "the route depends on the message's own routing keys or headers".to_string();
                    return Path { hops, end: End::Unknown { why } };
                }
                DeadLetter::Routed { queues, .. } if queues.len() > 1 => {
                    return Path { hops, end: End::Duplicated { queues } };
                }
                DeadLetter::Routed { queues, .. } => queues.into_iter().next().expect("one queue"),
            };
            // RabbitMQ's cycle rule (rabbit_dead_letter:detect_cycles): unless this death was a
            // rejection, a target seen before with no rejection since is dropped.
            if reason != Reason::Rejected
                && let Some(last) = deaths.iter().rposition(|(q, _)| *q == target)
                && deaths[last..].iter().all(|(_, r)| *r != Reason::Rejected)
            {
                return Path { hops, end: End::DroppedAsCycle { queue: target } };
            }
            match self.next_death(&target) {
                Next::Consumed => return Path { hops, end: End::Consumed { queue: target } },
                Next::Held => return Path { hops, end: End::Held { queue: target } },
                Next::Stranded => return Path { hops, end: End::Stranded { queue: target } },
                Next::Dies(r) => {
                    if hops.len() > 64 {
                        let why = "the path is longer than 64 hops".to_string();
                        return Path { hops, end: End::Unknown { why } };
                    }
                    current = target;
                    reason = r;
                }
            }
        }
    }

    /// What happens next to a message that arrives in `queue`.
    fn next_death(&self, queue: &str) -> Next {
        let Some(q) = self.queues.get(queue) else { return Next::Held };
        let waits = self.can_dead_letter(queue, Reason::Expired) && self.has(queue, Setting::DeadLetterExchange);
        let consumed = match q.role {
            Some(RoleKind::Work) => true,
            Some(_) => false,
            None => q.consumers.unwrap_or(0) > 0,
        };
        if consumed && q.role != Some(RoleKind::Wait) {
            Next::Consumed
        } else if waits {
            Next::Dies(Reason::Expired)
        } else if self.is_stranding(queue) {
            Next::Stranded
        } else {
            Next::Held
        }
    }

    /// A wait queue with no way out: it receives dead letters from a queue its own dead letters
    /// lead back to (a retry loop), yet has no TTL to send them back and no consumer.
    pub fn is_stranding(&self, queue: &str) -> bool {
        let Some(q) = self.queues.get(queue) else { return false };
        self.has(queue, Setting::DeadLetterExchange)
            && !self.has(queue, Setting::MessageTtl)
            && q.role != Some(RoleKind::Work)
            && q.consumers.unwrap_or(0) == 0
            && self.loops_back(queue)
    }

    /// Whether following dead-letter routes from `queue` leads back to it.
    pub fn loops_back(&self, queue: &str) -> bool {
        let mut seen = BTreeSet::new();
        let mut todo = self.targets(queue);
        while let Some(q) = todo.pop() {
            if q == queue {
                return true;
            }
            if seen.insert(q.clone()) {
                todo.extend(self.targets(&q));
            }
        }
        false
    }

    fn targets(&self, queue: &str) -> Vec<QueueName> {
        match self.dead_letter(queue) {
            DeadLetter::Routed { queues, .. } => queues,
            _ => Vec::new(),
        }
    }

    /// Queues whose dead letters reach `queue`.
    pub fn feeders(&self, queue: &str) -> &[QueueName] {
        let all = self.feeders.get_or_init(|| {
            let mut map: Map<QueueName, Vec<QueueName>> = Map::default();
            for from in self.queue_names() {
                for to in self.targets(from) {
                    map.entry(to).or_default().push(from.clone());
                }
            }
            map
        });
        all.get(queue).map_or(&[], Vec::as_slice)
    }
}

/// Networks built by hand, for unit tests: as a live vhost would read, without a spec's roles.
#[cfg(test)]
impl Network {
    pub(crate) fn with_queue(mut self, name: &str, arguments: &[(&str, ArgValue)]) -> Network {
        let arguments: Arguments = arguments.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let quorum = QueueType::of(&arguments) == QueueType::Quorum;
        let queue = Queue {
            quorum,
            durable: true,
            auto_delete: false,
            arguments,
            policy: None,
            operator_policy: None,
            ready: Some(0),
            unacked: Some(0),
            consumers: Some(0),
            placement: None,
            role: None,
        };
        self.queues.insert(name.into(), queue);
        self
    }

    pub(crate) fn with_exchange(mut self, name: &str, kind: &str, alternate: Option<&str>) -> Network {
        let alternate = alternate.map(ExchangeName::from);
        let exchange = Exchange { kind: kind.into(), durable: true, auto_delete: false, alternate };
        self.exchanges.insert(name.into(), exchange);
        self
    }

    pub(crate) fn with_binding(mut self, source: &str, queue: &str, routing_key: &str) -> Network {
        self.add_binding(Binding::to_queue(source, queue, routing_key));
        self
    }
}

enum Next {
    Consumed,
    Held,
    Stranded,
    Dies(Reason),
}

/// AMQP topic matching: `*` is one word, `#` zero or more. Dynamic programming over words, so a
/// pattern of many `#` costs words times words, never an exponential search.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    let p: Vec<&str> = if pattern.is_empty() { Vec::new() } else { pattern.split('.').collect() };
    let k: Vec<&str> = if key.is_empty() { Vec::new() } else { key.split('.').collect() };
    // matched[j]: the pattern so far matches the first j words of the key.
    let mut matched = vec![false; k.len() + 1];
    matched[0] = true;
    for word in &p {
        let mut next = vec![false; k.len() + 1];
        for j in 0..=k.len() {
            next[j] = match *word {
                "#" => matched[j] || (j > 0 && next[j - 1]),
                "*" => j > 0 && matched[j - 1],
                w => j > 0 && matched[j - 1] && k[j - 1] == w,
            };
        }
        matched = next;
    }
    matched[k.len()]
}

#[cfg(test)]
pub(crate) mod tests;
