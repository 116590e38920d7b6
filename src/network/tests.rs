use super::*;
use crate::spec;

fn network(toml: &str) -> Network {
    let c = spec::from_str("t.toml", toml).unwrap_or_else(|e| panic!("{}", e.render_plain())).compiled;
    Network::from_compiled(&c.iter().collect::<Vec<_>>(), crate::version::CURRENT)
}

#[test]
fn reason_all_lists_every_reason_once() {
    // `Reason::ALL` is kept by hand: a reason added to the enum and not to the list fails here.
    use strum::IntoEnumIterator;
    let missing: Vec<Reason> = Reason::iter().filter(|r| !Reason::ALL.contains(r)).collect();
    assert_eq!(missing, [], "not in Reason::ALL");
    assert_eq!(Reason::ALL.len(), Reason::iter().count(), "Reason::ALL lists a reason twice");
}

/// A death's reason is read as RabbitMQ's, where it is one, and shown as the broker wrote it.
#[test]
fn death_reasons_are_rabbitmqs_or_kept_as_written() {
    for r in Reason::ALL {
        assert_eq!(DeathReason::from(r.as_str()), DeathReason::Known(r));
        assert_eq!(DeathReason::Known(r).as_str(), r.as_str());
    }
    let later = DeathReason::from("delivery_limit_exceeded");
    assert_eq!(later, DeathReason::Other("delivery_limit_exceeded".into()));
    assert_eq!(serde_json::to_value(&later).unwrap(), serde_json::json!("delivery_limit_exceeded"));
    assert_eq!(serde_json::to_value(DeathReason::Known(Reason::Maxlen)).unwrap(), serde_json::json!("maxlen"));
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
    for (k, v) in [(Setting::DeadLetterExchange, ""), (Setting::DeadLetterRoutingKey, "orders.wait-5s")] {
        main.arguments.insert(k.argument(), ArgValue::Str(v.into()));
    }
    let p = n.path("orders", Reason::DeliveryLimit);
    assert_eq!(p.end, End::DroppedAsCycle { queue: "orders".into() }, "{p:?}");
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
    assert_eq!(n.route("orders", Some("wait")).queues, BTreeSet::from(["unrouted".into()]));
    assert_eq!(n.route("orders", Some("order.created")).queues, BTreeSet::from(["orders".into()]));
}

/// Overflow as each queue type runs it: reject-publish refuses the publish (nothing dies);
/// reject-publish-dlx dead-letters the refused message on a classic queue, and on a quorum queue,
/// which does not know it, is drop-head (measured on 3.10.8, 4.0.5 and 4.3.6).
#[test]
fn what_overflows_dies_of_maxlen() {
    let maxlen = |quorum: bool, overflow: Option<&str>| {
        let mut args = vec![("x-max-length", ArgValue::Int(1))];
        args.extend(quorum.then(|| ("x-queue-type", ArgValue::str("quorum"))));
        args.extend(overflow.map(|o| ("x-overflow", ArgValue::str(o))));
        Network::default().with_queue("q", &args).can_dead_letter("q", Reason::Maxlen)
    };
    for quorum in [false, true] {
        assert!(maxlen(quorum, None), "drop-head by default");
        assert!(maxlen(quorum, Some("drop-head")));
        assert!(!maxlen(quorum, Some("reject-publish")));
        assert!(maxlen(quorum, Some("reject-publish-dlx")), "quorum: {quorum}");
    }
}

/// Only a quorum queue with a delivery limit, its own or RabbitMQ 4's default, dead-letters
/// past it; an unlimited one never does.
#[test]
fn only_a_quorum_queue_with_a_delivery_limit_dies_of_it() {
    use crate::version::Version;
    let quorum = ("x-queue-type", ArgValue::str("quorum"));
    let dies = |args: &[(&str, ArgValue)], version: Version| {
        let mut n = Network::default().with_queue("q", args);
        n.version = version;
        n.can_dead_letter("q", Reason::DeliveryLimit)
    };
    let (v3, v4) = (Version::new(3, 10, 0), Version::new(4, 0, 0));
    assert!(dies(&[quorum.clone(), ("x-delivery-limit", ArgValue::Int(5))], v3));
    assert!(dies(std::slice::from_ref(&quorum), v4), "RabbitMQ 4's default limit");
    assert!(!dies(std::slice::from_ref(&quorum), v3), "3.x: no limit unless one is set");
    assert!(!dies(&[quorum.clone(), ("x-delivery-limit", ArgValue::Int(-1))], v4), "unlimited on 4.x");
    assert!(!dies(&[("x-delivery-limit", ArgValue::Int(5))], v4), "a classic queue has no delivery limit");
}

/// The default exchange delivers to the queue its routing key names, when there is one; a key
/// that names no queue routes nowhere, and is not uncertain.
#[test]
fn the_default_exchange_routes_by_queue_name() {
    let n = Network::default().with_queue("orders", &[]);
    assert_eq!(n.route("", Some("orders")).queues, BTreeSet::from(["orders".into()]));
    let nowhere = n.route("", Some("absent"));
    assert!(nowhere.queues.is_empty() && !nowhere.uncertain, "{nowhere:?}");
    assert!(n.route("", None).uncertain);
}

/// A compiled network is judged as the release it is given, not the latest.
#[test]
fn a_compiled_network_keeps_its_release() {
    let c = spec::from_str("t.toml", "[topology.orders]\ndelays = [\"1s\"]\n")
        .unwrap_or_else(|e| panic!("{}", e.render_plain()))
        .compiled;
    let old = crate::version::Version::new(3, 10, 0);
    assert_eq!(Network::from_compiled(&c.iter().collect::<Vec<_>>(), old).version, old);
}

/// The network read from a broker keeps what the broker said: its release, its nodes, its
/// exchanges and bindings, and each queue's arguments and counts.
#[test]
fn a_live_network_keeps_what_the_broker_said() {
    use crate::live::{LiveExchange, LiveQueue, Node};
    let mut live = Live::empty();
    live.version = Some("3.10.8".into());
    live.nodes = Some(vec![Node { name: "rabbit@a".into(), running: true, alarms: vec![] }]);
    let exchange = LiveExchange {
        kind: "direct".into(),
        durable: true,
        auto_delete: false,
        internal: false,
        arguments: Arguments::new(),
    };
    live.exchanges.insert("orders".into(), exchange);
    let binding = Binding::to_queue("orders", "q", "k");
    live.bindings = Some(BTreeSet::from([binding.clone()]));
    let arguments: Arguments = [("x-queue-type".to_string(), ArgValue::str("quorum"))].into_iter().collect();
    let queue = LiveQueue {
        durable: true,
        arguments: Some(arguments),
        messages: Some(5),
        unacked: Some(2),
        consumers: Some(1),
        ..LiveQueue::default()
    };
    live.queues.insert("q".into(), queue);
    let n = Network::from_live(&live);
    assert_eq!(n.version, Version::new(3, 10, 8));
    assert_eq!(n.nodes, live.nodes.clone().unwrap());
    assert_eq!(n.exchange_names(), [&ExchangeName::from("orders")]);
    assert_eq!(n.bindings(), [binding]);
    let q = n.queues.get("q").expect("the queue");
    assert!(q.quorum);
    assert_eq!((q.ready, q.unacked, q.consumers), (Some(3), Some(2), Some(1)));
}

/// How a dead letter's path ends, for the ends no other test reaches: a rejection with nowhere
/// to go is discarded as asked, an expiry with nowhere to go is a loss; copies to several
/// queues are followed no further; a retry hop with no TTL and no consumer strands it.
#[test]
fn a_path_ends_discarded_dropped_duplicated_or_stranded() {
    let s = |v: &str| ArgValue::str(v);
    let alone = Network::default().with_queue("q", &[("x-message-ttl", ArgValue::Int(5))]);
    assert_eq!(alone.path("q", Reason::Rejected).end, End::Discarded { queue: "q".into() });
    let expired = alone.path("q", Reason::Expired).end;
    assert!(matches!(&expired, End::Dropped { why } if why.contains("has no dead-letter exchange")), "{expired:?}");

    let fan = Network::default()
        .with_exchange("fan", "fanout", None)
        .with_queue("a", &[])
        .with_queue("b", &[])
        .with_binding("fan", "a", "")
        .with_binding("fan", "b", "")
        .with_queue("work", &[("x-dead-letter-exchange", s("fan"))]);
    assert_eq!(fan.path("work", Reason::Rejected).end, End::Duplicated { queues: vec!["a".into(), "b".into()] });

    // `work` dead-letters into `wait`, which dead-letters back but has no TTL and no consumer.
    let stuck = Network::default()
        .with_queue("work", &[("x-dead-letter-exchange", s("")), ("x-dead-letter-routing-key", s("wait"))])
        .with_queue("wait", &[("x-dead-letter-exchange", s("")), ("x-dead-letter-routing-key", s("work"))]);
    assert!(stuck.loops_back("wait") && stuck.is_stranding("wait"));
    assert_eq!(stuck.path("work", Reason::Rejected).end, End::Stranded { queue: "wait".into() });
    // With a TTL it waits and comes back instead: not stranded.
    let waiting = stuck.with_queue(
        "wait",
        &[
            ("x-message-ttl", ArgValue::Int(5)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("work")),
        ],
    );
    assert!(!waiting.is_stranding("wait"));
}

/// A queue's effective settings, all at once, are what asking for each one gives.
#[test]
fn a_queues_effective_settings_are_each_settings_own() {
    let policy = crate::policy::AppliedPolicy {
        name: "cap".into(),
        definition: [("message-ttl".to_string(), ArgValue::Int(1_000))].into_iter().collect(),
    };
    let mut n = Network::default().with_queue(
        "q",
        &[
            ("x-queue-type", ArgValue::str("quorum")),
            ("x-message-ttl", ArgValue::Int(5_000)),
            ("x-max-length", ArgValue::Int(3)),
        ],
    );
    n.queues.get_mut("q").unwrap().policy = Some(Arc::new(policy));
    let q = &n.queues["q"];
    let all: Vec<(Setting, Effective)> = q.effective().into_iter().collect();
    let each: Vec<(Setting, Effective)> =
        Setting::ALL.into_iter().filter_map(|s| q.setting(s).map(|e| (s, e))).collect();
    assert_eq!(all, each);
    assert_eq!(all.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [Setting::MessageTtl, Setting::MaxLength]);
    assert_eq!(all[0].1.value, ArgValue::Int(1_000), "the policy's smaller TTL");
}
