//! Message-loss hazards: rules over a `Network`, the same for a compiled spec (`lint`) and a live
//! vhost (`inspect`). Each rule names the RabbitMQ behaviour it rests on. Pure.

use serde::Serialize;

use crate::model::Role;
use crate::network::{DeadLetter, End, Network, Reason};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub rule: &'static str,
    pub severity: Severity,
    /// What happens to messages here, in one sentence.
    pub message: String,
    /// The RabbitMQ behaviour the rule rests on.
    pub because: &'static str,
    pub objects: Vec<String>,
}

/// Every rule: id, severity, and the behaviour it rests on.
pub const RULES: &[(&str, Severity, &str)] = &[
    (
        "dead-letter-exchange-missing",
        Severity::Error,
        "RabbitMQ silently drops a dead letter whose dead-letter exchange does not exist; a quorum queue with at-least-once dead-lettering keeps it and retries forever instead.",
    ),
    (
        "dead-letters-unroutable",
        Severity::Error,
        "Dead-lettering is an ordinary publish: when no binding matches, the dead letter is dropped, or with quorum at-least-once kept and retried forever.",
    ),
    (
        "dead-letters-fan-out",
        Severity::Error,
        "Every queue whose binding matches a dead letter gets a copy, so one failure becomes several messages.",
    ),
    (
        "dead-letter-cycle",
        Severity::Error,
        "RabbitMQ drops a dead letter that returns to a queue with no rejection since it last left it (a TTL, length limit or delivery limit in the loop).",
    ),
    (
        "wait-queue-without-ttl",
        Severity::Error,
        "Dead-lettering removes a message's own expiration, so in a queue with no TTL and no consumer a dead letter waits forever.",
    ),
    (
        "wait-queue-with-consumers",
        Severity::Warning,
        "A consumer on a wait queue takes messages before their TTL ends, so the retry delay is not honoured.",
    ),
    (
        "expires-on-retry-path",
        Severity::Error,
        "A queue that expires is deleted with its messages without dead-lettering them, and a wait queue has no consumer, so it counts as unused.",
    ),
    (
        "drop-head-on-wait-or-dead-letter-queue",
        Severity::Error,
        "With a length limit and the default drop-head overflow, RabbitMQ removes the oldest messages: dead-lettered early from a wait queue, lost from a dead-letter queue.",
    ),
    (
        "at-least-once-not-in-force",
        Severity::Error,
        "Quorum at-least-once dead-lettering needs a dead-letter exchange and overflow reject-publish, or RabbitMQ silently falls back to at most once; classic queues ignore it.",
    ),
    (
        "routing-key-without-exchange",
        Severity::Error,
        "A dead-letter routing key without a dead-letter exchange is refused as an argument and, set by a policy on a quorum queue, turns dead-lettering off.",
    ),
    (
        "unknown-argument",
        Severity::Error,
        "RabbitMQ stores an x-argument it does not know without a word and ignores it.",
    ),
    (
        "delivery-limit-drops",
        Severity::Error,
        "A quorum queue drops a message redelivered past its delivery limit (20 by default since RabbitMQ 4.0) when it has no dead-letter exchange.",
    ),
    (
        "dead-letter-queue-not-terminal",
        Severity::Error,
        "A dead-letter queue with a TTL expires its messages, and one with a dead-letter exchange passes them on: the parking lot does not keep them.",
    ),
    (
        "dead-letter-routing-key-missing",
        Severity::Warning,
        "Without a dead-letter routing key a dead letter keeps its current routing keys, which earlier hops rewrite, so where it goes depends on its history.",
    ),
];

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

fn rule(id: &str) -> (&'static str, Severity, &'static str) {
    *RULES.iter().find(|(r, _, _)| *r == id).expect("rule is listed")
}

/// Every hazard in the network, worst first.
pub fn check(n: &Network) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut add = |id: &str, message: String, objects: Vec<String>| {
        let (rule, severity, because) = rule(id);
        out.push(Finding { rule, severity, message, because, objects });
    };
    for (name, q) in &n.queues {
        let dlx = n.text(name, "dead-letter-exchange");
        let dlrk = n.text(name, "dead-letter-routing-key");
        let wait = is_wait_queue(n, name);
        let dlq = is_dead_letter_queue(n, name);

        let dead_letter = n.dead_letter(name);
        if let DeadLetter::Routed { uncertain: true, .. } = &dead_letter
            && dlrk.is_none()
        {
            carried_keys(n, name, &mut add);
        }
        match dead_letter {
            DeadLetter::ExchangeMissing { exchange, at_least_once } => add(
                "dead-letter-exchange-missing",
                format!(
                    "dead letters of `{name}` go to exchange `{exchange}`, which does not exist: {}",
                    if at_least_once { "they stay in the queue, retried forever" } else { "they are dropped" }
                ),
                vec![name.clone(), exchange],
            ),
            DeadLetter::Unroutable { exchange, routing_key, at_least_once } => add(
                "dead-letters-unroutable",
                format!(
                    "dead letters of `{name}` are published to `{exchange}` with {}, which no binding matches: {}",
                    routing_key.map_or("their original routing keys".to_string(), |k| format!("routing key `{k}`")),
                    if at_least_once { "they stay in the queue, retried forever" } else { "they are dropped" }
                ),
                vec![name.clone(), exchange],
            ),
            DeadLetter::Routed { exchange, queues, .. } if queues.len() > 1 => add(
                "dead-letters-fan-out",
                format!(
                    "each dead letter of `{name}` is copied to {} queues through `{exchange}`: {}",
                    queues.len(),
                    queues.join(", ")
                ),
                [vec![name.clone(), exchange], queues].concat(),
            ),
            _ => {}
        }
        if dlx.is_some() && dlrk.is_none() && (wait || !n.feeders(name).is_empty()) {
            add(
                "dead-letter-routing-key-missing",
                format!(
                    "`{name}` sets no dead-letter routing key: its dead letters are routed by whatever keys they carry"
                ),
                vec![name.clone()],
            );
        }
        if dlx.is_none() && dlrk.is_some() {
            add(
                "routing-key-without-exchange",
                format!(
                    "`{name}` has a dead-letter routing key but no dead-letter exchange: its dead letters are discarded"
                ),
                vec![name.clone()],
            );
        }
        if wait && q.consumers.unwrap_or(0) > 0 {
            add(
                "wait-queue-with-consumers",
                format!(
                    "wait queue `{name}` has {} consumer(s): they take messages before the TTL ends",
                    q.consumers.unwrap_or(0)
                ),
                vec![name.clone()],
            );
        }
        if !dlq && n.is_stranding(name) {
            add(
                "wait-queue-without-ttl",
                format!(
                    "`{name}` receives dead letters from a retry loop it belongs to, but has no TTL and no consumer: they wait there forever"
                ),
                vec![name.clone()],
            );
        }
        if let Some(e) = q.effective.get("expires")
            && (dlx.is_some() || !n.feeders(name).is_empty())
        {
            add(
                "expires-on-retry-path",
                format!("`{name}` expires after {} ms unused{}: deleted with the messages in it", e.value, source(e)),
                vec![name.clone()],
            );
        }
        if (wait || dlq) && n.can_dead_letter(name, Reason::Maxlen) {
            add(
                "drop-head-on-wait-or-dead-letter-queue",
                format!(
                    "{} `{name}` has a length limit with drop-head overflow: its oldest messages {}",
                    if dlq { "dead-letter queue" } else { "wait queue" },
                    if dlq { "are discarded when it is full" } else { "leave before their delay when it is full" }
                ),
                vec![name.clone()],
            );
        }
        if n.text(name, "dead-letter-strategy").as_deref() == Some("at-least-once") && !n.at_least_once(name) {
            let why = if !q.quorum {
                "it is a classic queue, which dead-letters at most once".to_string()
            } else {
                format!(
                    "its overflow is {}, not reject-publish",
                    n.text(name, "overflow").unwrap_or_else(|| "drop-head (the default)".into())
                )
            };
            add(
                "at-least-once-not-in-force",
                format!(
                    "`{name}` asks for at-least-once dead-lettering, but {why}: dead letters can be lost in transit"
                ),
                vec![name.clone()],
            );
        }
        for key in q.arguments.keys() {
            if KNOWN_ARGUMENTS.contains(&key.as_str()) {
                continue;
            }
            let hint = if KNOWN_ARGUMENTS.contains(&format!("x-{key}").as_str()) {
                format!("; did you mean `x-{key}`?")
            } else {
                KNOWN_ARGUMENTS
                    .iter()
                    .map(|k| (k, strsim::jaro_winkler(key, k)))
                    .filter(|(_, s)| *s > 0.85)
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .map(|(k, _)| format!("; did you mean `{k}`?"))
                    .unwrap_or_default()
            };
            add(
                "unknown-argument",
                format!("`{name}` has argument `{key}`, which RabbitMQ ignores{hint}"),
                vec![name.clone()],
            );
        }
        if q.quorum
            && dlx.is_none()
            && let Some(limit) = n.delivery_limit(name)
            && limit < UNREACHABLE_DELIVERY_LIMIT
        {
            add(
                "delivery-limit-drops",
                format!(
                    "quorum queue `{name}` drops a message redelivered more than {limit} time(s){}: it has no dead-letter exchange",
                    if q.effective.contains_key("delivery-limit") { "" } else { " (RabbitMQ 4's default)" }
                ),
                vec![name.clone()],
            );
        }
        if dlq && (q.effective.contains_key("message-ttl") || dlx.is_some()) {
            let what = match (q.effective.get("message-ttl"), &dlx) {
                (Some(ttl), _) => format!("expires its messages after {} ms{}", ttl.value, source(ttl)),
                (None, Some(x)) => format!("passes its dead letters on to exchange `{x}`"),
                _ => unreachable!(),
            };
            add("dead-letter-queue-not-terminal", format!("dead-letter queue `{name}` {what}"), vec![name.clone()]);
        }
    }
    cycles(n, &mut out);
    out.sort_by(|a, b| (a.severity, a.rule, &a.objects).cmp(&(b.severity, b.rule, &b.objects)));
    out.dedup();
    out
}

/// A queue with no dead-letter routing key passes its dead letters on with the key they came in
/// with, which is known when the queue feeding it set one (notes §1.3: the key the previous hop
/// assigned, not the publisher's): route each such key, as the broker will.
fn carried_keys(n: &Network, name: &str, add: &mut impl FnMut(&str, String, Vec<String>)) {
    for feeder in n.feeders(name) {
        let Some(key) = n.text(&feeder, "dead-letter-routing-key") else { continue };
        let came = format!("the routing key `{key}` that `{feeder}` gave them");
        match n.dead_letter_carrying(name, Some(&key)) {
            DeadLetter::Unroutable { exchange, at_least_once, .. } => add(
                "dead-letters-unroutable",
                format!(
                    "dead letters of `{name}` keep {came}, which no binding of `{exchange}` matches: {}",
                    if at_least_once { "they stay in the queue, retried forever" } else { "they are dropped" }
                ),
                vec![name.to_string(), exchange],
            ),
            DeadLetter::Routed { exchange, queues, .. } if queues.len() > 1 => add(
                "dead-letters-fan-out",
                format!(
                    "dead letters of `{name}` keep {came}, and `{exchange}` copies them to {} queues: {}",
                    queues.len(),
                    queues.join(", ")
                ),
                [vec![name.to_string(), exchange], queues].concat(),
            ),
            _ => {}
        }
    }
}

/// A queue that holds messages for a TTL and then dead-letters them: from the spec's role, or on
/// a live broker from its shape.
pub fn is_wait_queue(n: &Network, name: &str) -> bool {
    let Some(q) = n.queues.get(name) else { return false };
    match &q.role {
        Some(role) => matches!(role, Role::Wait { .. }),
        None => q.effective.contains_key("message-ttl") && q.effective.contains_key("dead-letter-exchange"),
    }
}

/// A parking lot: from the spec's role, or on a live broker a queue that receives dead letters
/// and is named like one.
pub fn is_dead_letter_queue(n: &Network, name: &str) -> bool {
    let Some(q) = n.queues.get(name) else { return false };
    match &q.role {
        Some(role) => matches!(role, Role::DeadLetter),
        None => {
            let lower = name.to_ascii_lowercase();
            ["dlq", "dead", "parking", "error", "failed", "poison"].iter().any(|w| lower.contains(w))
                && !n.feeders(name).is_empty()
        }
    }
}

fn source(e: &crate::policy::Effective) -> String {
    match (&e.source, &e.policy) {
        (crate::policy::Source::Policy, Some(p)) => format!(" (set by policy `{p}`)"),
        (crate::policy::Source::OperatorPolicy, Some(p)) => format!(" (set by operator policy `{p}`)"),
        _ => String::new(),
    }
}

/// Dead-letter cycles with a way round that has no rejection: found by following every queue's
/// non-rejected deaths.
fn cycles(n: &Network, out: &mut Vec<Finding>) {
    let (rule, severity, because) = rule("dead-letter-cycle");
    for name in n.queues.keys() {
        for reason in [Reason::Expired, Reason::Maxlen, Reason::DeliveryLimit] {
            if !n.can_dead_letter(name, reason) {
                continue;
            }
            let path = n.path(name, reason);
            if let End::Dropped { why } = &path.end
                && why.contains("dead-letter cycle")
            {
                let mut objects: Vec<String> = path.hops.iter().map(|h| h.queue.clone()).collect();
                objects.sort();
                objects.dedup();
                out.push(Finding {
                    rule,
                    severity,
                    message: format!(
                        "a message that dies in `{name}` ({}) goes round {} and is dropped on its way back",
                        reason.as_str(),
                        objects.join(" -> ")
                    ),
                    because,
                    objects,
                });
            }
        }
    }
    // The same cycle found from each of its queues is one finding.
    out.sort_by(|a, b| a.objects.cmp(&b.objects));
    out.dedup_by(|a, b| a.rule == "dead-letter-cycle" && b.rule == "dead-letter-cycle" && a.objects == b.objects);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::compile;
    use crate::spec;

    fn lint(toml: &str) -> Vec<Finding> {
        let c = compile(&spec::from_str("t.toml", toml).unwrap_or_else(|e| panic!("{}", e.render_plain())));
        check(&Network::from_compiled(&c.iter().collect::<Vec<_>>()))
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
        let rules: Vec<(&str, &[String])> = findings.iter().map(|f| (f.rule, f.objects.as_slice())).collect();
        let (wait, orders) = ("wait".to_string(), "orders".to_string());
        assert!(rules.contains(&("dead-letters-unroutable", &[wait.clone(), orders][..])), "{findings:#?}");
        assert!(rules.contains(&("dead-letter-routing-key-missing", &[wait][..])), "{findings:#?}");
        // An alternate exchange catches it: only the warning remains.
        let findings = check(&crate::network::tests::loop_without_routing_key(Some("unrouted")));
        assert_eq!(findings.iter().map(|f| f.rule).collect::<Vec<_>>(), ["dead-letter-routing-key-missing"]);
    }

    #[test]
    fn every_rule_is_listed_once() {
        let mut ids: Vec<_> = RULES.iter().map(|(r, _, _)| *r).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), RULES.len());
    }
}
