//! What a queue really does once policies and operator policies are applied to its arguments.
//! RabbitMQ does not simply let the argument win (notes §2.6, `process_args_policy`,
//! `rabbit_quorum_queue`): pure, so the rules are unit-tested one by one.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::model::{ArgValue, Arguments, QueueType};

/// What a policy applies to, as its `apply-to` says in RabbitMQ's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyTo {
    /// Exchanges and every queue.
    All,
    /// Every queue, streams too.
    Queues,
    ClassicQueues,
    QuorumQueues,
    Streams,
    Exchanges,
    /// A value this hopper does not know (a later broker's): it covers no queue hopper judges.
    Other(String),
}

impl From<&str> for ApplyTo {
    fn from(apply_to: &str) -> Self {
        match apply_to {
            "all" => ApplyTo::All,
            "queues" => ApplyTo::Queues,
            "classic_queues" => ApplyTo::ClassicQueues,
            "quorum_queues" => ApplyTo::QuorumQueues,
            "streams" => ApplyTo::Streams,
            "exchanges" => ApplyTo::Exchanges,
            other => ApplyTo::Other(other.to_string()),
        }
    }
}

impl ApplyTo {
    /// Whether it covers a queue of this type.
    pub fn covers(&self, queue_type: &QueueType) -> bool {
        match self {
            ApplyTo::All | ApplyTo::Queues => true,
            ApplyTo::ClassicQueues => *queue_type == QueueType::Classic,
            ApplyTo::QuorumQueues => *queue_type == QueueType::Quorum,
            ApplyTo::Streams => *queue_type == QueueType::Stream,
            ApplyTo::Exchanges | ApplyTo::Other(_) => false,
        }
    }
}

/// A policy (or operator policy) as RabbitMQ matches it to queues: its pattern compiled once, and
/// what it applies, shared by every queue it matches.
#[derive(Debug, Clone)]
pub struct Policy {
    name: String,
    priority: i64,
    apply_to: ApplyTo,
    /// `None` for a pattern this engine cannot compile: it matches nothing.
    pattern: Option<regex_lite::Regex>,
    applied: Arc<AppliedPolicy>,
}

impl Policy {
    pub fn new(
        name: String,
        pattern: &str,
        apply_to: ApplyTo,
        priority: i64,
        definition: BTreeMap<String, ArgValue>,
    ) -> Policy {
        Policy {
            applied: Arc::new(AppliedPolicy { name: name.clone(), definition }),
            pattern: regex_lite::Regex::new(pattern).ok(),
            name,
            priority,
            apply_to,
        }
    }
}

/// The policy that applies to a queue: the matching one of highest priority (RabbitMQ does not
/// merge policies), ties broken by name. hopper resolves it from the policy listing rather than
/// reading the queue's `policy` field, which the management API refreshes only every few seconds.
pub fn matching(policies: &[Policy], queue: &str, queue_type: &QueueType) -> Option<Arc<AppliedPolicy>> {
    policies
        .iter()
        .filter(|p| p.apply_to.covers(queue_type) && p.pattern.as_ref().is_some_and(|re| re.is_match(queue)))
        .max_by(|a, b| a.priority.cmp(&b.priority).then_with(|| b.name.cmp(&a.name)))
        .map(|p| p.applied.clone())
}

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
#[cfg_attr(test, derive(strum::EnumIter))]
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

/// The effective value of each setting that is set anywhere, in setting order: a short list
/// (a map per queue would cost far more memory than the two or three settings it holds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings(Vec<(Setting, Effective)>);

impl Settings {
    pub fn get(&self, setting: Setting) -> Option<&Effective> {
        self.0.iter().find(|(s, _)| *s == setting).map(|(_, e)| e)
    }

    pub fn contains(&self, setting: Setting) -> bool {
        self.get(setting).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (Setting, &Effective)> {
        self.0.iter().map(|(s, e)| (*s, e))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn insert(&mut self, setting: Setting, effective: Effective) {
        self.0.retain(|(s, _)| *s != setting);
        self.0.push((setting, effective));
        self.0.sort_by_key(|(s, _)| *s);
    }
}

impl IntoIterator for Settings {
    type Item = (Setting, Effective);
    type IntoIter = std::vec::IntoIter<(Setting, Effective)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// The effective value of every setting that is set anywhere.
pub fn effective(
    quorum: bool,
    arguments: &Arguments,
    policy: Option<&AppliedPolicy>,
    operator_policy: Option<&AppliedPolicy>,
) -> Settings {
    let mut out: Vec<(Setting, Effective)> = Setting::ALL
        .into_iter()
        .filter_map(|s| effective_one(s, quorum, arguments, policy, operator_policy).map(|e| (s, e)))
        .collect();
    out.shrink_to_fit();
    Settings(out)
}

/// The effective value of one setting, if it is set anywhere.
pub fn effective_one(
    setting: Setting,
    quorum: bool,
    arguments: &Arguments,
    policy: Option<&AppliedPolicy>,
    operator_policy: Option<&AppliedPolicy>,
) -> Option<Effective> {
    let argument = arguments.get(setting.argument());
    fn from(setting: Setting, p: Option<&AppliedPolicy>) -> Option<(&ArgValue, &AppliedPolicy)> {
        p.and_then(|p| Some((p.definition.get(setting.policy_key())?, p)))
    }
    let (policy, operator) = (from(setting, policy), from(setting, operator_policy));
    let pick = |source: Source| -> Option<Effective> {
        let (value, name) = match source {
            Source::Argument => (argument?, None),
            Source::Policy => policy.map(|(v, p)| (v, Some(p.name.clone())))?,
            Source::OperatorPolicy => operator.map(|(v, p)| (v, Some(p.name.clone())))?,
        };
        Some(Effective { value: value.clone(), source, policy: name })
    };
    let int = |source: Source| match source {
        Source::Argument => argument.and_then(ArgValue::as_int),
        Source::Policy => policy.and_then(|(v, _)| v.as_int()),
        Source::OperatorPolicy => operator.and_then(|(v, _)| v.as_int()),
    };
    const ALL: [Source; 3] = [Source::Argument, Source::Policy, Source::OperatorPolicy];
    match setting {
        // Strings an argument decides; operator policies cannot set them.
        Setting::DeadLetterExchange | Setting::DeadLetterRoutingKey | Setting::DeadLetterStrategy => {
            pick(Source::Argument).or_else(|| pick(Source::Policy))
        }
        // On a quorum queue the policy decides overflow; on a classic queue the argument does.
        Setting::Overflow if quorum => {
            pick(Source::OperatorPolicy).or_else(|| pick(Source::Policy)).or_else(|| pick(Source::Argument))
        }
        Setting::Overflow => {
            pick(Source::Argument).or_else(|| pick(Source::Policy)).or_else(|| pick(Source::OperatorPolicy))
        }
        // A negative delivery limit (unlimited) anywhere: the largest wins; otherwise the smallest.
        Setting::DeliveryLimit => {
            let set = ALL.into_iter().filter(|s| int(*s).is_some());
            let any_negative = ALL.into_iter().any(|s| int(s).is_some_and(|n| n < 0));
            let winner = if any_negative { set.max_by_key(|s| int(*s)) } else { set.min_by_key(|s| int(*s)) };
            winner.and_then(pick)
        }
        // TTL, expires and length limits: the most conservative (smallest) wins.
        Setting::MessageTtl | Setting::Expires | Setting::MaxLength | Setting::MaxLengthBytes => {
            ALL.into_iter().filter(|s| int(*s).is_some()).min_by_key(|s| int(*s)).and_then(pick)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_to_as_rabbitmq_reads_it() {
        let covers = |apply_to: &str, t: QueueType| ApplyTo::from(apply_to).covers(&t);
        assert!(covers("queues", QueueType::Stream) && covers("all", QueueType::Quorum));
        assert!(covers("quorum_queues", QueueType::Quorum) && !covers("quorum_queues", QueueType::Classic));
        assert!(covers("streams", QueueType::Stream) && !covers("classic_queues", QueueType::Stream));
        assert!(!covers("exchanges", QueueType::Classic) && !covers("later_kind", QueueType::Classic));
        assert_eq!(ApplyTo::from("later_kind"), ApplyTo::Other("later_kind".into()));
    }

    /// The highest priority wins, ties to the first name; a pattern that does not compile matches
    /// nothing, and a policy for another type is passed over.
    #[test]
    fn the_matching_policy_of_highest_priority_applies() {
        let policy = |name: &str, pattern: &str, apply_to: &str, priority| {
            Policy::new(name.into(), pattern, ApplyTo::from(apply_to), priority, BTreeMap::new())
        };
        let policies = [
            policy("low", "^orders", "queues", 0),
            policy("b-high", "^orders", "all", 5),
            policy("a-high", "^orders", "queues", 5),
            policy("streams-only", "^orders", "streams", 9),
            policy("broken", "(", "queues", 10),
        ];
        let name = |q: &str, t: QueueType| matching(&policies, q, &t).map(|p| p.name.clone());
        assert_eq!(name("orders.dlq", QueueType::Quorum).as_deref(), Some("a-high"));
        assert_eq!(name("orders", QueueType::Stream).as_deref(), Some("streams-only"));
        assert_eq!(name("payments", QueueType::Classic), None);
        assert_eq!(
            matching(&policies[..1], "orders", &QueueType::Classic).map(|p| p.name.clone()).as_deref(),
            Some("low")
        );
    }

    /// A setting shows as its policy key (`diff` prints it so), padded like any string.
    #[test]
    fn a_setting_shows_as_its_policy_key() {
        for setting in Setting::ALL {
            assert_eq!(setting.to_string(), setting.policy_key());
        }
        assert_eq!(format!("[{:<10}]", Setting::Expires), "[expires   ]");
    }

    /// `Setting::ALL` is kept by hand: a setting added to the enum and not to the list fails here.
    #[test]
    fn setting_all_lists_every_setting_once() {
        use strum::IntoEnumIterator;
        let missing: Vec<Setting> = Setting::iter().filter(|s| !Setting::ALL.contains(s)).collect();
        assert_eq!(missing, [], "not in Setting::ALL");
        assert_eq!(Setting::ALL.len(), Setting::iter().count(), "Setting::ALL lists a setting twice");
    }

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
        assert_eq!(e.get(Setting::DeadLetterExchange).unwrap().source, Source::Argument);
        // Without the argument, the policy sets it.
        let e = effective(true, &Arguments::new(), Some(&p), None);
        assert_eq!(e.get(Setting::DeadLetterExchange).unwrap().value, Str("elsewhere".into()));
        assert_eq!(e.get(Setting::DeadLetterExchange).unwrap().policy.as_deref(), Some("dlx"));
    }

    #[test]
    fn the_smallest_ttl_wins_wherever_it_comes_from() {
        let a = args(&[("x-message-ttl", Int(5000))]);
        let op = policy("cap", &[("message-ttl", Int(1000))]);
        let e = effective(false, &a, None, Some(&op));
        assert_eq!(
            e.get(Setting::MessageTtl).unwrap(),
            &Effective { value: Int(1000), source: Source::OperatorPolicy, policy: Some("cap".into()) }
        );
        let longer = policy("long", &[("message-ttl", Int(60000))]);
        assert_eq!(
            effective(false, &a, Some(&longer), None).get(Setting::MessageTtl).unwrap().source,
            Source::Argument
        );
    }

    #[test]
    fn quorum_overflow_is_the_policys() {
        let a = args(&[("x-overflow", Str("reject-publish".into()))]);
        let p = policy("p", &[("overflow", Str("drop-head".into()))]);
        assert_eq!(effective(true, &a, Some(&p), None).get(Setting::Overflow).unwrap().value, Str("drop-head".into()));
        assert_eq!(
            effective(false, &a, Some(&p), None).get(Setting::Overflow).unwrap().value,
            Str("reject-publish".into())
        );
    }

    #[test]
    fn delivery_limit_min_unless_one_is_negative() {
        let a = args(&[("x-delivery-limit", Int(20))]);
        assert_eq!(
            effective(true, &a, Some(&policy("p", &[("delivery-limit", Int(5))])), None)
                .get(Setting::DeliveryLimit)
                .unwrap()
                .value,
            Int(5)
        );
        assert_eq!(
            effective(true, &a, Some(&policy("p", &[("delivery-limit", Int(-1))])), None)
                .get(Setting::DeliveryLimit)
                .unwrap()
                .value,
            Int(20)
        );
        // Zero is a limit, not a negative: the smallest still wins.
        assert_eq!(
            effective(true, &a, Some(&policy("p", &[("delivery-limit", Int(0))])), None)
                .get(Setting::DeliveryLimit)
                .unwrap()
                .value,
            Int(0)
        );
    }
}
