//! What a queue really does once policies and operator policies are applied to its arguments.
//! RabbitMQ does not simply let the argument win (notes §2.6, `process_args_policy`,
//! `rabbit_quorum_queue`): pure, so the rules are unit-tested one by one.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{ArgValue, Arguments};

/// A policy or operator policy as it applies to one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedPolicy {
    pub name: String,
    /// Keys as in a policy definition: `message-ttl`, `dead-letter-exchange`, ...
    pub definition: BTreeMap<String, ArgValue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Argument,
    Policy,
    OperatorPolicy,
}

/// The value a queue runs with for one key, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub value: ArgValue,
    pub source: Source,
    /// The policy's name when `source` is a policy.
    pub policy: Option<String>,
}

/// The keys that decide where a message goes and when: the ones hopper reports when a policy
/// changes them.
pub const KEYS: &[&str] = &[
    "dead-letter-exchange",
    "dead-letter-routing-key",
    "dead-letter-strategy",
    "message-ttl",
    "expires",
    "max-length",
    "max-length-bytes",
    "overflow",
    "delivery-limit",
];

/// The effective value of every key of `KEYS` that is set anywhere.
pub fn effective(
    quorum: bool,
    arguments: &Arguments,
    policy: Option<&AppliedPolicy>,
    operator_policy: Option<&AppliedPolicy>,
) -> BTreeMap<&'static str, Effective> {
    let mut out = BTreeMap::new();
    for &key in KEYS {
        let mut candidates: Vec<Effective> = Vec::new();
        if let Some(v) = arguments.get(&format!("x-{key}")) {
            candidates.push(Effective { value: v.clone(), source: Source::Argument, policy: None });
        }
        for (p, source) in [(policy, Source::Policy), (operator_policy, Source::OperatorPolicy)] {
            if let Some(p) = p
                && let Some(v) = p.definition.get(key)
            {
                candidates.push(Effective { value: v.clone(), source, policy: Some(p.name.clone()) });
            }
        }
        if let Some(winner) = resolve(key, quorum, candidates) {
            out.insert(key, winner);
        }
    }
    out
}

fn resolve(key: &str, quorum: bool, candidates: Vec<Effective>) -> Option<Effective> {
    let first = |source: Source| candidates.iter().find(|c| c.source == source).cloned();
    match key {
        // Strings an argument decides; operator policies cannot set them.
        "dead-letter-exchange" | "dead-letter-routing-key" | "dead-letter-strategy" => {
            first(Source::Argument).or_else(|| first(Source::Policy))
        }
        // On a quorum queue the policy decides overflow; on a classic queue the argument does.
        "overflow" if quorum => {
            first(Source::OperatorPolicy).or_else(|| first(Source::Policy)).or_else(|| first(Source::Argument))
        }
        "overflow" => {
            first(Source::Argument).or_else(|| first(Source::Policy)).or_else(|| first(Source::OperatorPolicy))
        }
        // A negative delivery limit (unlimited) anywhere: the largest wins; otherwise the smallest.
        "delivery-limit" => {
            let any_negative = candidates.iter().any(|c| int(&c.value).is_some_and(|n| n < 0));
            let pick = candidates.into_iter().filter(|c| int(&c.value).is_some());
            if any_negative { pick.max_by_key(|c| int(&c.value)) } else { pick.min_by_key(|c| int(&c.value)) }
        }
        // TTL, expires and length limits: the most conservative (smallest) wins.
        _ => candidates.into_iter().filter(|c| int(&c.value).is_some()).min_by_key(|c| int(&c.value)),
    }
}

fn int(v: &ArgValue) -> Option<i64> {
    match v {
        ArgValue::Int(n) => Some(*n),
        ArgValue::Str(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, pairs: &[(&str, ArgValue)]) -> AppliedPolicy {
        AppliedPolicy { name: name.into(), definition: pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect() }
    }

    fn args(pairs: &[(&str, ArgValue)]) -> Arguments {
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    use ArgValue::{Int, Str};

    #[test]
    fn the_argument_decides_the_dead_letter_exchange() {
        let a = args(&[("x-dead-letter-exchange", Str("orders.dlx".into()))]);
        let p = policy("dlx", &[("dead-letter-exchange", Str("elsewhere".into()))]);
        let e = effective(true, &a, Some(&p), None);
        assert_eq!(e["dead-letter-exchange"].source, Source::Argument);
        // Without the argument, the policy sets it.
        let e = effective(true, &Arguments::new(), Some(&p), None);
        assert_eq!(e["dead-letter-exchange"].value, Str("elsewhere".into()));
        assert_eq!(e["dead-letter-exchange"].policy.as_deref(), Some("dlx"));
    }

    #[test]
    fn the_smallest_ttl_wins_wherever_it_comes_from() {
        let a = args(&[("x-message-ttl", Int(5000))]);
        let op = policy("cap", &[("message-ttl", Int(1000))]);
        let e = effective(false, &a, None, Some(&op));
        assert_eq!(
            e["message-ttl"],
            Effective { value: Int(1000), source: Source::OperatorPolicy, policy: Some("cap".into()) }
        );
        let longer = policy("long", &[("message-ttl", Int(60000))]);
        assert_eq!(effective(false, &a, Some(&longer), None)["message-ttl"].source, Source::Argument);
    }

    #[test]
    fn quorum_overflow_is_the_policys() {
        let a = args(&[("x-overflow", Str("reject-publish".into()))]);
        let p = policy("p", &[("overflow", Str("drop-head".into()))]);
        assert_eq!(effective(true, &a, Some(&p), None)["overflow"].value, Str("drop-head".into()));
        assert_eq!(effective(false, &a, Some(&p), None)["overflow"].value, Str("reject-publish".into()));
    }

    #[test]
    fn delivery_limit_min_unless_one_is_negative() {
        let a = args(&[("x-delivery-limit", Int(20))]);
        assert_eq!(
            effective(true, &a, Some(&policy("p", &[("delivery-limit", Int(5))])), None)["delivery-limit"].value,
            Int(5)
        );
        assert_eq!(
            effective(true, &a, Some(&policy("p", &[("delivery-limit", Int(-1))])), None)["delivery-limit"].value,
            Int(20)
        );
    }
}
