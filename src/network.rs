//! A vhost as a routing network: exchanges, queues with their effective settings, and every
//! binding. Built from a compiled spec or from a live broker, so that the same hazard rules and
//! the same dead-letter paths apply to both. Pure: routing is simulated, never tried.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::compile::CompiledTopology;
use crate::model::{ArgValue, Arguments, Object, Role};
use crate::plan::{Live, Route};
use crate::policy::{self, Effective};

#[derive(Debug, Clone, Default)]
pub struct Network {
    pub exchanges: BTreeMap<String, Exchange>,
    pub queues: BTreeMap<String, Queue>,
    pub routes: Vec<Route>,
    /// The broker's major version when known (live); `None` for a spec, which is judged as
    /// RabbitMQ 4.x would run it.
    pub major: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct Exchange {
    pub kind: String,
    pub durable: bool,
    pub auto_delete: bool,
    pub alternate: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Queue {
    pub quorum: bool,
    pub durable: bool,
    pub auto_delete: bool,
    pub arguments: Arguments,
    /// Argument, policy and operator policy combined as RabbitMQ does.
    pub effective: BTreeMap<&'static str, Effective>,
    pub policy: Option<String>,
    pub operator_policy: Option<String>,
    pub ready: Option<u64>,
    pub unacked: Option<u64>,
    pub consumers: Option<u64>,
    /// The part the queue plays, when a spec says so.
    pub role: Option<Role>,
}

/// Why RabbitMQ dead-letters a message (the `reason` of `x-death`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
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

/// Where routing a message took it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routed {
    pub queues: BTreeSet<String>,
    /// The exchange does not exist.
    pub missing_exchange: Option<String>,
    /// Taken by an alternate exchange because nothing else matched.
    pub via_alternate: Option<String>,
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
    ExchangeMissing { exchange: String, at_least_once: bool },
    /// Nothing matches the routing key.
    Unroutable { exchange: String, routing_key: Option<String>, at_least_once: bool },
    /// Delivered to these queues. `routing_key` is the key it is published with: the queue's
    /// dead-letter routing key, or else the key it carried in when an earlier hop set it.
    Routed { exchange: String, routing_key: Option<String>, queues: Vec<String>, uncertain: bool },
}

/// One step of a dead-letter path, as shown to people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hop {
    pub queue: String,
    pub reason: Reason,
    pub dead_letter: DeadLetter,
}

/// How a dead-letter path ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "end", rename_all = "snake_case")]
pub enum End {
    /// Consumers read it there (a work queue).
    Consumed { queue: String },
    /// It stays there: no consumer, nothing moves it on (a dead-letter queue, or a queue whose
    /// consumers are away).
    Held { queue: String },
    /// It waits there forever: no consumer, no TTL, yet it is a retry hop.
    Stranded { queue: String },
    /// Rejected where there is no dead-letter exchange: thrown away, as the consumer asked.
    Discarded { queue: String },
    /// Lost, with the reason.
    Dropped { why: String },
    /// Kept and retried by the source queue forever (quorum at-least-once with no route).
    RetriedForever { queue: String },
    /// Copies went to several queues; followed no further.
    Duplicated { queues: Vec<String> },
    /// Cannot be followed: the routing depends on the message.
    Unknown { why: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Path {
    pub hops: Vec<Hop>,
    pub end: End,
}

const KEY_TTL: &str = "message-ttl";

impl Network {
    pub fn from_compiled(topologies: &[&CompiledTopology]) -> Network {
        let mut n = Network::default();
        for o in crate::plan::desired(topologies) {
            match o {
                Object::Exchange(e) => {
                    let exchange = Exchange { kind: e.kind, durable: e.durable, auto_delete: false, alternate: None };
                    n.exchanges.insert(e.name, exchange);
                }
                Object::Queue(q) => {
                    let quorum = is(&q.arguments, "x-queue-type", "quorum");
                    let queue = Queue {
                        quorum,
                        durable: q.durable,
                        auto_delete: false,
                        effective: policy::effective(quorum, &q.arguments, None, None),
                        arguments: q.arguments,
                        policy: None,
                        operator_policy: None,
                        ready: None,
                        unacked: None,
                        consumers: None,
                        role: Some(q.role),
                    };
                    n.queues.insert(q.name, queue);
                }
                Object::Binding(b) => n.routes.push(Route {
                    source: b.source,
                    destination: b.destination,
                    to_exchange: false,
                    routing_key: b.routing_key,
                    arguments: Arguments::new(),
                }),
            }
        }
        n
    }

    pub fn from_live(live: &Live) -> Network {
        let mut n = Network {
            routes: live.routes.clone(),
            major: live.version.as_ref().and_then(|v| v.split('.').next()?.parse().ok()),
            ..Network::default()
        };
        for (name, e) in &live.exchanges {
            let alternate = match e.arguments.get("alternate-exchange") {
                Some(ArgValue::Str(s)) => Some(s.clone()),
                _ => None,
            };
            let exchange = Exchange { kind: e.kind.clone(), durable: e.durable, auto_delete: e.auto_delete, alternate };
            n.exchanges.insert(name.clone(), exchange);
        }
        for (name, q) in &live.queues {
            let arguments = q.arguments.clone().unwrap_or_default();
            let quorum = is(&arguments, "x-queue-type", "quorum");
            let effective = policy::effective(quorum, &arguments, q.policy.as_ref(), q.operator_policy.as_ref());
            let ready = q.messages.map(|m| m.saturating_sub(q.unacked.unwrap_or(0)));
            let queue = Queue {
                quorum,
                durable: q.durable,
                auto_delete: q.auto_delete,
                arguments,
                effective,
                policy: q.policy.as_ref().map(|p| p.name.clone()),
                operator_policy: q.operator_policy.as_ref().map(|p| p.name.clone()),
                ready,
                unacked: q.unacked,
                consumers: q.consumers,
                role: None,
            };
            n.queues.insert(name.clone(), queue);
        }
        n
    }

    /// The exchanges and queues a message published to `exchange` reaches. `routing_key` is
    /// `None` when it cannot be known (a dead letter without a dead-letter routing key).
    pub fn route(&self, exchange: &str, routing_key: Option<&str>) -> Routed {
        let mut routed = Routed::default();
        if exchange.is_empty() {
            // The default exchange: the queue named by the routing key, if there is one.
            match routing_key {
                Some(k) if self.queues.contains_key(k) => {
                    routed.queues.insert(k.to_string());
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

    fn route_into(&self, exchange: &str, key: Option<&str>, routed: &mut Routed, seen: &mut BTreeSet<String>) {
        if !seen.insert(exchange.to_string()) {
            return; // exchange-to-exchange loops route once
        }
        let Some(e) = self.exchanges.get(exchange) else {
            routed.missing_exchange.get_or_insert_with(|| exchange.to_string());
            return;
        };
        let (mut matched, mut maybe) = (false, false);
        for r in self.routes.iter().filter(|r| r.source == exchange) {
            let hit = match e.kind.as_str() {
                "fanout" => Some(true),
                "direct" => key.map(|k| k == r.routing_key),
                "topic" => key.map(|k| topic_matches(&r.routing_key, k)),
                // A dead letter carries the message's own headers, which are not known here.
                "headers" => None,
                _ => None,
            };
            match hit {
                Some(true) => {
                    matched = true;
                    if r.to_exchange {
                        self.route_into(&r.destination, key, routed, seen);
                    } else {
                        routed.queues.insert(r.destination.clone());
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

    /// Whether `queue` can dead-letter for `reason` at all.
    pub fn can_dead_letter(&self, queue: &str, reason: Reason) -> bool {
        let Some(q) = self.queues.get(queue) else { return false };
        match reason {
            Reason::Rejected => true,
            Reason::Expired => q.effective.contains_key(KEY_TTL),
            Reason::Maxlen => {
                (q.effective.contains_key("max-length") || q.effective.contains_key("max-length-bytes"))
                    && match q.effective.get("overflow").map(|e| &e.value) {
                        None => true,
                        Some(ArgValue::Str(s)) => s == "drop-head" || (s == "reject-publish-dlx" && !q.quorum),
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
        match q.effective.get("delivery-limit").map(|e| &e.value) {
            Some(ArgValue::Int(n)) if *n >= 0 => Some(*n),
            Some(_) => None,
            None if self.major.is_none_or(|m| m >= 4) => Some(20),
            None => None,
        }
    }

    pub fn text(&self, queue: &str, key: &str) -> Option<String> {
        self.queues.get(queue)?.effective.get(key).map(|e| match &e.value {
            ArgValue::Str(s) => s.clone(),
            ArgValue::Int(n) => n.to_string(),
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
        let Some(exchange) = self.text(queue, "dead-letter-exchange") else { return DeadLetter::Discarded };
        let routing_key = self.text(queue, "dead-letter-routing-key").or_else(|| key.map(str::to_string));
        let at_least_once = self.at_least_once(queue);
        if !exchange.is_empty() && !self.exchanges.contains_key(&exchange) {
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
            && self.text(queue, "dead-letter-strategy").as_deref() == Some("at-least-once")
            && self.text(queue, "overflow").as_deref() == Some("reject-publish")
    }

    /// Where a message that dies in `queue` for `reason` goes, hop by hop, until it is consumed,
    /// held, or lost. Follows RabbitMQ's cycle rule: a message that comes back to a queue with no
    /// rejection since it last left it is dropped. Tracks the routing key: once a hop sets a
    /// dead-letter routing key, that is the message's only key until another hop sets one.
    pub fn path(&self, queue: &str, reason: Reason) -> Path {
        let mut hops = Vec::new();
        // (queue, reason) deaths so far, newest last, as x-death records them.
        let mut deaths: Vec<(String, Reason)> = Vec::new();
        let (mut current, mut reason) = (queue.to_string(), reason);
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
                DeadLetter::ExchangeMissing { exchange, at_least_once: true } => {
                    let _ = exchange;
                    return Path { hops, end: End::RetriedForever { queue: current } };
                }
                DeadLetter::ExchangeMissing { exchange, .. } => {
                    let why = format!("dead-letter exchange `{exchange}` does not exist");
                    return Path { hops, end: End::Dropped { why } };
                }
                DeadLetter::Unroutable { at_least_once: true, .. } => {
                    return Path { hops, end: End::RetriedForever { queue: current } };
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
                let why = format!(
                    "it would reach `{target}` again with no rejection in between: RabbitMQ drops it as a dead-letter cycle"
                );
                return Path { hops, end: End::Dropped { why } };
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
        let waits = self.can_dead_letter(queue, Reason::Expired) && q.effective.contains_key("dead-letter-exchange");
        let consumed = match &q.role {
            Some(Role::Work { .. }) => true,
            Some(_) => false,
            None => q.consumers.unwrap_or(0) > 0,
        };
        if consumed && !matches!(q.role, Some(Role::Wait { .. })) {
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
        q.effective.contains_key("dead-letter-exchange")
            && !q.effective.contains_key("message-ttl")
            && !matches!(q.role, Some(Role::Work { .. }))
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

    fn targets(&self, queue: &str) -> Vec<String> {
        match self.dead_letter(queue) {
            DeadLetter::Routed { queues, .. } => queues,
            _ => Vec::new(),
        }
    }

    /// Queues whose dead letters reach `queue`.
    pub fn feeders(&self, queue: &str) -> Vec<String> {
        self.queues
            .keys()
            .filter(|other| {
                matches!(self.dead_letter(other), DeadLetter::Routed { queues, .. } if queues.iter().any(|t| t == queue))
            })
            .cloned()
            .collect()
    }
}

/// Networks built by hand, for unit tests: as a live vhost would read, without a spec's roles.
#[cfg(test)]
impl Network {
    pub(crate) fn with_queue(mut self, name: &str, arguments: &[(&str, ArgValue)]) -> Network {
        let arguments: Arguments = arguments.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let quorum = is(&arguments, "x-queue-type", "quorum");
        let queue = Queue {
            quorum,
            durable: true,
            auto_delete: false,
            effective: policy::effective(quorum, &arguments, None, None),
            arguments,
            policy: None,
            operator_policy: None,
            ready: Some(0),
            unacked: Some(0),
            consumers: Some(0),
            role: None,
        };
        self.queues.insert(name.to_string(), queue);
        self
    }

    pub(crate) fn with_exchange(mut self, name: &str, kind: &str, alternate: Option<&str>) -> Network {
        let alternate = alternate.map(str::to_string);
        let exchange = Exchange { kind: kind.to_string(), durable: true, auto_delete: false, alternate };
        self.exchanges.insert(name.to_string(), exchange);
        self
    }

    pub(crate) fn with_binding(mut self, source: &str, queue: &str, routing_key: &str) -> Network {
        self.routes.push(Route {
            source: source.to_string(),
            destination: queue.to_string(),
            to_exchange: false,
            routing_key: routing_key.to_string(),
            arguments: Arguments::new(),
        });
        self
    }
}

enum Next {
    Consumed,
    Held,
    Stranded,
    Dies(Reason),
}

fn is(args: &Arguments, key: &str, value: &str) -> bool {
    args.get(key) == Some(&ArgValue::Str(value.to_string()))
}

/// AMQP topic matching: `*` is one word, `#` zero or more.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    fn go(p: &[&str], k: &[&str]) -> bool {
        match (p.first(), k.first()) {
            (None, None) => true,
            (Some(&"#"), _) => go(&p[1..], k) || (!k.is_empty() && go(p, &k[1..])),
            (Some(&"*"), Some(_)) => go(&p[1..], &k[1..]),
            (Some(w), Some(x)) if w == x => go(&p[1..], &k[1..]),
            _ => false,
        }
    }
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = if key.is_empty() { Vec::new() } else { key.split('.').collect() };
    let p: Vec<&str> = if pattern.is_empty() { Vec::new() } else { p };
    go(&p, &k)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::compile::compile;
    use crate::spec;

    fn network(toml: &str) -> Network {
        let c = compile(&spec::from_str("t.toml", toml).unwrap_or_else(|e| panic!("{}", e.render_plain())));
        Network::from_compiled(&c.iter().collect::<Vec<_>>())
    }

    #[test]
    fn topic_patterns() {
        assert!(topic_matches("order.*", "order.created"));
        assert!(!topic_matches("order.*", "order.created.eu"));
        assert!(topic_matches("order.#", "order"));
        assert!(topic_matches("#", ""));
        assert!(topic_matches("#.eu", "order.created.eu"));
        assert!(!topic_matches("*.eu", "eu"));
    }

    #[test]
    fn a_hopper_topology_parks_or_redelivers_every_dead_letter() {
        let n = network("[topology.orders]\ndelays = [\"5s\"]\nmax_attempts = 3\n");
        assert_eq!(n.path("orders", Reason::Rejected).end, End::Held { queue: "orders.dlq".into() });
        assert_eq!(n.path("orders", Reason::DeliveryLimit).end, End::Held { queue: "orders.dlq".into() });
        assert_eq!(n.path("orders.wait-5s", Reason::Expired).end, End::Consumed { queue: "orders".into() });
        let chain = network("[topology.orders]\nstrategy = \"chain\"\ndelays = [\"5s\"]\nmax_attempts = 3\n");
        let p = chain.path("orders", Reason::Rejected);
        assert_eq!(p.end, End::Consumed { queue: "orders.attempt-2".into() });
        assert_eq!(p.hops.iter().map(|h| h.queue.as_str()).collect::<Vec<_>>(), ["orders", "orders.hop-1.wait-5s"]);
    }

    #[test]
    fn a_cycle_without_rejection_is_dropped() {
        // A quorum main queue that dead-letters (delivery limit) into a wait queue that returns
        // to it: the classic loop, dropped on its second lap.
        let mut n = network("[topology.orders]\ndelays = [\"5s\"]\nmax_attempts = 2\n");
        let main = n.queues.get_mut("orders").unwrap();
        for (k, v) in [("dead-letter-exchange", ""), ("dead-letter-routing-key", "orders.wait-5s")] {
            main.effective.insert(
                k,
                Effective { value: ArgValue::Str(v.into()), source: policy::Source::Argument, policy: None },
            );
        }
        let p = n.path("orders", Reason::DeliveryLimit);
        assert!(matches!(&p.end, End::Dropped { why } if why.contains("dead-letter cycle")), "{p:?}");
        // A rejection breaks the cycle rule: redelivered to consumers.
        assert_eq!(n.path("orders", Reason::Rejected).end, End::Consumed { queue: "orders".into() });
    }

    /// `orders` rejects through `retry` with key `wait` into `wait`, whose TTL sends it back to
    /// the main exchange `orders` with no dead-letter routing key of its own.
    pub(crate) fn loop_without_routing_key(alternate: Option<&str>) -> Network {
        let s = |v: &str| ArgValue::Str(v.into());
        let mut n = Network::default()
            .with_exchange("orders", "direct", alternate)
            .with_exchange("retry", "direct", None)
            .with_queue("orders", &[("x-dead-letter-exchange", s("retry")), ("x-dead-letter-routing-key", s("wait"))])
            .with_queue("wait", &[("x-message-ttl", ArgValue::Int(200)), ("x-dead-letter-exchange", s("orders"))])
            .with_binding("orders", "orders", "order.created")
            .with_binding("retry", "wait", "wait");
        if let Some(ae) = alternate {
            n = n.with_exchange(ae, "fanout", None).with_queue(ae, &[]).with_binding(ae, ae, "");
        }
        n
    }

    #[test]
    fn a_dead_letter_keeps_the_routing_key_the_previous_hop_gave_it() {
        // `wait` publishes it to `orders` with key `wait`, which only the alternate exchange takes.
        let n = loop_without_routing_key(Some("unrouted"));
        let p = n.path("orders", Reason::Rejected);
        assert_eq!(p.end, End::Held { queue: "unrouted".into() });
        assert_eq!(
            p.hops[1].dead_letter,
            DeadLetter::Routed {
                exchange: "orders".into(),
                routing_key: Some("wait".into()),
                queues: vec!["unrouted".into()],
                uncertain: false
            }
        );
        // Without the alternate exchange it is dropped, and the reason names the key.
        let p = loop_without_routing_key(None).path("orders", Reason::Rejected);
        assert!(matches!(&p.end, End::Dropped { why } if why.contains("routing key `wait`")), "{p:?}");
    }

    #[test]
    fn an_alternate_exchange_is_not_assumed_when_a_binding_might_match() {
        // What reaches `wait` first is unknown here, so its key is: `order.created` would go to
        // `orders`, anything else to `unrouted`.
        let n = loop_without_routing_key(Some("unrouted"));
        let routed = n.route("orders", None);
        assert!(routed.uncertain && routed.queues.is_empty() && routed.via_alternate.is_none(), "{routed:?}");
        assert!(matches!(n.path("wait", Reason::Expired).end, End::Unknown { .. }));
        // With the key known, the alternate exchange takes what no binding matches.
        assert_eq!(n.route("orders", Some("wait")).queues, BTreeSet::from(["unrouted".to_string()]));
        assert_eq!(n.route("orders", Some("order.created")).queues, BTreeSet::from(["orders".to_string()]));
    }
}
