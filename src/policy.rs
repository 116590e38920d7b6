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

/// Where a queue's effective value comes from. A policy and an operator policy may share a name:
/// the pair is the policy's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Argument,
    Policy,
    OperatorPolicy,
}

/// The settings that decide where a message goes and when: the ones hopper reports when a policy
/// changes them. Each is a policy key and, with `x-` in front, a queue argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Setting {
    DeadLetterExchange,
    DeadLetterRoutingKey,
    DeadLetterStrategy,
    MessageTtl,
    Expires,
    MaxLength,
    MaxLengthBytes,
    Overflow,
    DeliveryLimit,
}

impl Setting {
    pub const ALL: [Setting; 9] = [
        Setting::DeadLetterExchange,
        Setting::DeadLetterRoutingKey,
        Setting::DeadLetterStrategy,
        Setting::MessageTtl,
        Setting::Expires,
        Setting::MaxLength,
        Setting::MaxLengthBytes,
        Setting::Overflow,
        Setting::DeliveryLimit,
    ];

    /// The key in a policy definition.
    pub fn policy_key(self) -> &'static str {
        match self {
            Setting::DeadLetterExchange => "dead-letter-exchange",
            Setting::DeadLetterRoutingKey => "dead-letter-routing-key",
            Setting::DeadLetterStrategy => "dead-letter-strategy",
            Setting::MessageTtl => "message-ttl",
            Setting::Expires => "expires",
            Setting::MaxLength => "max-length",
            Setting::MaxLengthBytes => "max-length-bytes",
            Setting::Overflow => "overflow",
            Setting::DeliveryLimit => "delivery-limit",
        }
    }

    /// The queue argument.
    pub fn argument(self) -> &'static str {
        match self {
            Setting::DeadLetterExchange => "x-dead-letter-exchange",
            Setting::DeadLetterRoutingKey => "x-dead-letter-routing-key",
            Setting::DeadLetterStrategy => "x-dead-letter-strategy",
            Setting::MessageTtl => "x-message-ttl",
            Setting::Expires => "x-expires",
            Setting::MaxLength => "x-max-length",
            Setting::MaxLengthBytes => "x-max-length-bytes",
            Setting::Overflow => "x-overflow",
            Setting::DeliveryLimit => "x-delivery-limit",
        }
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.policy_key())
    }
}

/// The value a queue runs with for one setting, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub value: ArgValue,
    pub source: Source,
    /// The policy's name when `source` is a policy.
    pub policy: Option<String>,
}

/// The effective value of every setting that is set anywhere.
pub fn effective(
    quorum: bool,
    arguments: &Arguments,
    policy: Option<&AppliedPolicy>,
    operator_policy: Option<&AppliedPolicy>,
) -> BTreeMap<Setting, Effective> {
    let mut out = BTreeMap::new();
    for setting in Setting::ALL {
        let mut candidates: Vec<Effective> = Vec::new();
        if let Some(v) = arguments.get(setting.argument()) {
            candidates.push(Effective { value: v.clone(), source: Source::Argument, policy: None });
        }
        for (p, source) in [(policy, Source::Policy), (operator_policy, Source::OperatorPolicy)] {
            if let Some(p) = p
                && let Some(v) = p.definition.get(setting.policy_key())
            {
                candidates.push(Effective { value: v.clone(), source, policy: Some(p.name.clone()) });
            }
        }
        if let Some(winner) = resolve(setting, quorum, candidates) {
            out.insert(setting, winner);
        }
    }
    out
}

fn resolve(setting: Setting, quorum: bool, candidates: Vec<Effective>) -> Option<Effective> {
    let first = |source: Source| candidates.iter().find(|c| c.source == source).cloned();
    match setting {
        // Strings an argument decides; operator policies cannot set them.
        Setting::DeadLetterExchange | Setting::DeadLetterRoutingKey | Setting::DeadLetterStrategy => {
            first(Source::Argument).or_else(|| first(Source::Policy))
        }
        // On a quorum queue the policy decides overflow; on a classic queue the argument does.
        Setting::Overflow if quorum => {
            first(Source::OperatorPolicy).or_else(|| first(Source::Policy)).or_else(|| first(Source::Argument))
        }
        Setting::Overflow => {
            first(Source::Argument).or_else(|| first(Source::Policy)).or_else(|| first(Source::OperatorPolicy))
        }
        // A negative delivery limit (unlimited) anywhere: the largest wins; otherwise the smallest.
        Setting::DeliveryLimit => {
            let any_negative = candidates.iter().any(|c| c.value.as_int().is_some_and(|n| n < 0));
            let pick = candidates.into_iter().filter(|c| c.value.as_int().is_some());
            if any_negative { pick.max_by_key(|c| c.value.as_int()) } else { pick.min_by_key(|c| c.value.as_int()) }
        }
        // TTL, expires and length limits: the most conservative (smallest) wins.
        Setting::MessageTtl | Setting::Expires | Setting::MaxLength | Setting::MaxLengthBytes => {
            candidates.into_iter().filter(|c| c.value.as_int().is_some()).min_by_key(|c| c.value.as_int())
        }
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
        assert_eq!(e[&Setting::DeadLetterExchange].source, Source::Argument);
        // Without the argument, the policy sets it.
        let e = effective(true, &Arguments::new(), Some(&p), None);
        assert_eq!(e[&Setting::DeadLetterExchange].value, Str("elsewhere".into()));
        assert_eq!(e[&Setting::DeadLetterExchange].policy.as_deref(), Some("dlx"));
    }

    #[test]
    fn the_smallest_ttl_wins_wherever_it_comes_from() {
        let a = args(&[("x-message-ttl", Int(5000))]);
        let op = policy("cap", &[("message-ttl", Int(1000))]);
        let e = effective(false, &a, None, Some(&op));
        assert_eq!(
            e[&Setting::MessageTtl],
            Effective { value: Int(1000), source: Source::OperatorPolicy, policy: Some("cap".into()) }
        );
        let longer = policy("long", &[("message-ttl", Int(60000))]);
        assert_eq!(effective(false, &a, Some(&longer), None)[&Setting::MessageTtl].source, Source::Argument);
    }

    #[test]
    fn quorum_overflow_is_the_policys() {
        let a = args(&[("x-overflow", Str("reject-publish".into()))]);
        let p = policy("p", &[("overflow", Str("drop-head".into()))]);
        assert_eq!(effective(true, &a, Some(&p), None)[&Setting::Overflow].value, Str("drop-head".into()));
        assert_eq!(effective(false, &a, Some(&p), None)[&Setting::Overflow].value, Str("reject-publish".into()));
    }

    #[test]
    fn delivery_limit_min_unless_one_is_negative() {
        let a = args(&[("x-delivery-limit", Int(20))]);
        assert_eq!(
            effective(true, &a, Some(&policy("p", &[("delivery-limit", Int(5))])), None)[&Setting::DeliveryLimit].value,
            Int(5)
        );
        assert_eq!(
            effective(true, &a, Some(&policy("p", &[("delivery-limit", Int(-1))])), None)[&Setting::DeliveryLimit]
                .value,
            Int(20)
        );
    }
}
