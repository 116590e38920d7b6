use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::spec::{self, format_duration};

fn topology(toml: &str) -> Topology {
    spec::one(toml)
}

fn compiled(toml: &str) -> CompiledTopology {
    compile_topology(&topology(toml))
}

fn s(v: &str) -> ArgValue {
    ArgValue::str(v)
}

fn args(pairs: &[(&str, ArgValue)]) -> Arguments {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn queues(c: &CompiledTopology) -> Vec<&Queue> {
    c.objects.iter().filter_map(|o| if let Object::Queue(q) = o { Some(q) } else { None }).collect()
}

fn exchanges(c: &CompiledTopology) -> Vec<&Exchange> {
    c.objects.iter().filter_map(|o| if let Object::Exchange(e) = o { Some(e) } else { None }).collect()
}

fn bindings(c: &CompiledTopology) -> Vec<&Binding> {
    c.objects.iter().filter_map(|o| if let Object::Binding(b) = o { Some(b) } else { None }).collect()
}

/// The queue of that name; there must be exactly one.
fn queue<'c>(c: &'c CompiledTopology, name: &str) -> &'c Queue {
    let found: Vec<_> = queues(c).into_iter().filter(|q| q.name == name).collect();
    assert_eq!(found.len(), 1, "expected exactly one queue `{name}`, got {found:?}");
    found[0]
}

fn exchange_named<'c>(c: &'c CompiledTopology, name: &str) -> Option<&'c Exchange> {
    let found: Vec<_> = exchanges(c).into_iter().filter(|e| e.name == name).collect();
    assert!(found.len() <= 1, "exchange `{name}` declared {} times", found.len());
    found.first().copied()
}

fn wait_queues(c: &CompiledTopology) -> Vec<&Queue> {
    queues(c).into_iter().filter(|q| matches!(q.role, Role::Wait { .. })).collect()
}

fn wait_names(c: &CompiledTopology) -> Vec<String> {
    wait_queues(c).iter().map(|q| q.name.to_string()).collect()
}

/// Routing keys bound from `source` to `destination`, in declaration order.
fn keys(c: &CompiledTopology, source: &str, destination: &str) -> Vec<String> {
    bindings(c)
        .into_iter()
        .filter(|b| b.source == source && b.destination.name() == destination)
        .map(|b| b.routing_key.to_string())
        .collect()
}

/// `routing key -> destinations` of every binding from `source`.
fn bindings_from(c: &CompiledTopology, source: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for b in bindings(c).into_iter().filter(|b| b.source == source) {
        out.entry(b.routing_key.to_string()).or_default().insert(b.destination.name().to_string());
    }
    out
}

fn arg_str<'q>(q: &'q Queue, key: &str) -> Option<&'q str> {
    match q.arguments.get(key) {
        Some(ArgValue::Str(v)) => Some(v),
        Some(other) => panic!("queue `{}`: {key} is not a string: {other:?}", q.name),
        None => None,
    }
}

/// Where the broker sends a message dead-lettered from `q`: the queues its DLX/DLRK reach
/// through the compiled bindings (the default exchange, `""`, reaches the queue named by the key).
/// Empty when the queue does not dead-letter.
fn dead_letter_targets(c: &CompiledTopology, q: &Queue) -> Vec<String> {
    let Some(dlx) = arg_str(q, "x-dead-letter-exchange") else {
        return Vec::new();
    };
    let dlrk = arg_str(q, "x-dead-letter-routing-key")
        .unwrap_or_else(|| panic!("queue `{}` dead-letters without an explicit routing key", q.name));
    if dlx.is_empty() {
        return queues(c).into_iter().filter(|t| t.name == dlrk).map(|t| t.name.to_string()).collect();
    }
    let x = exchange_named(c, dlx).unwrap_or_else(|| panic!("queue `{}` dead-letters to undeclared `{dlx}`", q.name));
    assert_eq!(x.kind, "direct", "dead-letter exchange `{dlx}` must route by exact key");
    bindings(c)
        .into_iter()
        .filter(|b| b.source == dlx && b.routing_key == dlrk)
        .map(|b| b.destination.name().to_string())
        .collect()
}

/// Every dead-lettering queue reaches exactly one queue, and following dead letters (reject,
/// TTL expiry, delivery limit) never leads back to a queue already visited.
fn assert_dead_letter_graph_acyclic(c: &CompiledTopology) {
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for q in queues(c) {
        let targets = dead_letter_targets(c, q);
        if q.arguments.contains_key("x-dead-letter-exchange") {
            assert_eq!(targets.len(), 1, "queue `{}` dead-letters to {targets:?}, want exactly one queue", q.name);
        }
        edges.insert(q.name.to_string(), targets);
    }
    // Depth-first search with colours: 1 = on the stack, 2 = done.
    fn visit(
        node: &str,
        edges: &BTreeMap<String, Vec<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) {
        match state.get(node) {
            Some(2) => return,
            Some(1) => panic!("dead-letter cycle: {} -> {node}", path.join(" -> ")),
            _ => {}
        }
        state.insert(node.to_string(), 1);
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            visit(next, edges, state, path);
        }
        path.pop();
        state.insert(node.to_string(), 2);
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        visit(node, &edges, &mut state, &mut Vec::new());
    }
}

/// `name -> arguments` of every queue.
fn queue_arguments(c: &CompiledTopology) -> BTreeMap<String, Arguments> {
    let all = queues(c);
    let map: BTreeMap<_, _> = all.iter().map(|q| (q.name.to_string(), q.arguments.clone())).collect();
    assert_eq!(map.len(), all.len(), "a queue name is declared twice");
    map
}

/// Every queue present in both compilations has the same arguments; returns how many were compared.
fn assert_kept_queues_unchanged(before: &CompiledTopology, after: &CompiledTopology) -> usize {
    let (b, a) = (queue_arguments(before), queue_arguments(after));
    let mut compared = 0;
    for (name, old) in &b {
        if let Some(new) = a.get(name) {
            assert_eq!(old, new, "queue `{name}` kept its name but its arguments changed");
            compared += 1;
        }
    }
    compared
}

fn binding_set(c: &CompiledTopology) -> BTreeSet<Binding> {
    bindings(c).into_iter().cloned().collect()
}

const REPUBLISH_QUORUM: &str = r#"
    [topology.orders]
    exchange = "orders.events"
    exchange_type = "topic"
    routing_keys = ["order.created", "order.paid"]
    delays = ["5s", "5s", "30s"]
    max_attempts = 5
"#;

const REPUBLISH_CLASSIC: &str = r#"
    [topology.orders]
    queue_type = "classic"
    routing_keys = ["order.created", "order.paid"]
    delays = ["5s", "5s", "30s"]
    max_attempts = 5
"#;

const CHAIN: &str = r#"
    [topology.orders]
    strategy = "chain"
    delays = ["1s", "2s"]
    max_attempts = 3
"#;

const CHAIN_CLASSIC: &str = r#"
    [topology.orders]
    strategy = "chain"
    queue_type = "classic"
    routing_keys = ["a", "b"]
    delays = ["1s", "2s", "2s"]
    max_attempts = 4
"#;

const ALL: &[&str] = &[REPUBLISH_QUORUM, REPUBLISH_CLASSIC, CHAIN, CHAIN_CLASSIC];

#[test]
fn republish_quorum_main_queue_has_exactly_the_arguments_quorum_needs() {
    let c = compiled(REPUBLISH_QUORUM);
    let main = queue(&c, "orders");
    assert_eq!(main.role, Role::Work { attempt: None });
    assert_eq!(
        main.arguments,
        args(&[
            ("x-queue-type", s("quorum")),
            ("x-dead-letter-exchange", s("orders.dlx")),
            ("x-dead-letter-routing-key", s("orders.dlq")),
            ("x-delivery-limit", ArgValue::Int(crate::spec::DEFAULT_DELIVERY_LIMIT)),
            ("x-dead-letter-strategy", s("at-least-once")),
            ("x-overflow", s("reject-publish")),
        ])
    );
    assert_eq!(crate::spec::DEFAULT_DELIVERY_LIMIT, 20);
}

#[test]
fn republish_has_one_wait_queue_per_distinct_delay_bound_with_its_hops() {
    let c = compiled(REPUBLISH_QUORUM);
    // Delays 5s, 5s, 30s and four hops: the last delay repeats for hop 4.
    assert_eq!(wait_names(&c), ["orders.wait-5s", "orders.wait-30s"]);
    assert_eq!(keys(&c, "orders.retry", "orders.wait-5s"), ["1", "2"]);
    assert_eq!(keys(&c, "orders.retry", "orders.wait-30s"), ["3", "4"]);
    assert_eq!(queue(&c, "orders.wait-5s").role, Role::Wait { hops: vec![1, 2], delay: "5s".into() });
    assert_eq!(queue(&c, "orders.wait-30s").role, Role::Wait { hops: vec![3, 4], delay: "30s".into() });
    // The retry exchange routes nowhere else, but back to the main queue when a wait ends.
    let retry = bindings_from(&c, "orders.retry");
    assert_eq!(retry.keys().collect::<Vec<_>>(), ["1", "2", "3", "4", "orders"]);
    assert_eq!(retry["orders"], BTreeSet::from(["orders".to_string()]));
    assert!(retry.values().all(|d| d.len() == 1));
    assert_eq!(exchange_named(&c, "orders.retry").expect("retry exchange").kind, "direct");
}

#[test]
fn republish_wait_queues_dead_letter_to_the_main_queue_only_through_the_return_binding() {
    let c = compiled(REPUBLISH_QUORUM);
    for (name, ttl) in [("orders.wait-5s", 5_000), ("orders.wait-30s", 30_000)] {
        let q = queue(&c, name);
        assert_eq!(
            q.arguments,
            args(&[
                ("x-queue-type", s("quorum")),
                ("x-message-ttl", ArgValue::Int(ttl)),
                ("x-dead-letter-exchange", s("orders.retry")),
                ("x-dead-letter-routing-key", s("orders")),
                ("x-dead-letter-strategy", s("at-least-once")),
                ("x-overflow", s("reject-publish")),
            ]),
            "{name}"
        );
        // Never the main exchange: it would copy the message to every queue bound there.
        assert_ne!(arg_str(q, "x-dead-letter-exchange"), Some("orders.events"));
        assert_eq!(dead_letter_targets(&c, q), ["orders"]);
    }
}

#[test]
fn every_wait_queue_has_exactly_one_ttl_and_no_retry_path_expires_or_drops() {
    for toml in ALL {
        let c = compiled(toml);
        assert!(!wait_queues(&c).is_empty());
        for q in wait_queues(&c) {
            let ttls = q.arguments.keys().filter(|k| k.contains("ttl")).count();
            assert_eq!(ttls, 1, "{}: {:?}", q.name, q.arguments);
            assert!(matches!(q.arguments.get("x-message-ttl"), Some(ArgValue::Int(ms)) if *ms > 0), "{}", q.name);
            // Nobody consumes a wait queue: no binding from the main exchange reaches it.
            assert!(keys(&c, &c.topology.exchange, &q.name).is_empty(), "{}", q.name);
        }
        for q in queues(&c) {
            for forbidden in ["x-expires", "x-max-length", "x-max-length-bytes"] {
                assert!(!q.arguments.contains_key(forbidden), "{} has {forbidden}", q.name);
            }
            // Only wait queues have a TTL.
            if !matches!(q.role, Role::Wait { .. }) {
                assert!(!q.arguments.contains_key("x-message-ttl"), "{} has a TTL", q.name);
            }
        }
    }
}

#[test]
fn every_object_is_durable() {
    for toml in ALL {
        let c = compiled(toml);
        for q in queues(&c) {
            assert!(q.durable, "queue {} is not durable", q.name);
        }
        for e in exchanges(&c) {
            assert!(e.durable, "exchange {} is not durable", e.name);
        }
    }
}

#[test]
fn the_dead_letter_queue_is_terminal() {
    for toml in ALL {
        let c = compiled(toml);
        let t = &c.topology;
        let dlq = queue(&c, &t.dead_letter_queue);
        assert_eq!(dlq.role, Role::DeadLetter);
        assert!(!dlq.arguments.contains_key("x-dead-letter-exchange"), "{:?}", dlq.arguments);
        assert!(!dlq.arguments.contains_key("x-dead-letter-routing-key"), "{:?}", dlq.arguments);
        let mut want = args(&[("x-queue-type", s(t.queue_type.as_str()))]);
        if t.queue_type == QueueType::Quorum {
            want.insert("x-delivery-limit", ArgValue::Int(DEAD_LETTER_DELIVERY_LIMIT));
        }
        assert_eq!(dlq.arguments, want);
        // Reachable by name through the dead-letter exchange.
        assert_eq!(exchange_named(&c, &t.dead_letter_exchange).expect("dlx").kind, "direct");
        assert_eq!(keys(&c, &t.dead_letter_exchange, &t.dead_letter_queue), std::slice::from_ref(&t.dead_letter_queue));
        assert_eq!(bindings_from(&c, &t.dead_letter_exchange).len(), 1);
    }
}

#[test]
fn the_main_exchange_binds_the_main_queue_once_per_routing_key() {
    let c = compiled(REPUBLISH_QUORUM);
    let main = exchange_named(&c, "orders.events").expect("main exchange");
    assert_eq!(main.kind, "topic");
    assert_eq!(keys(&c, "orders.events", "orders"), ["order.created", "order.paid"]);
    // Only the main queue is bound to it.
    assert!(bindings(&c).iter().filter(|b| b.source == "orders.events").all(|b| b.destination.name() == "orders"));

    let c = compiled(CHAIN_CLASSIC);
    assert_eq!(keys(&c, "orders", "orders"), ["a", "b"]);
    assert!(bindings(&c).iter().filter(|b| b.source == "orders").all(|b| b.destination.name() == "orders"));
}

#[test]
fn republish_classic_sets_no_quorum_arguments() {
    let c = compiled(REPUBLISH_CLASSIC);
    for q in queues(&c) {
        for quorum_only in ["x-delivery-limit", "x-dead-letter-strategy", "x-overflow"] {
            assert!(!q.arguments.contains_key(quorum_only), "{} has {quorum_only}", q.name);
        }
        assert_eq!(q.arguments.get("x-queue-type"), Some(&s("classic")), "{}", q.name);
    }
    assert_eq!(
        queue(&c, "orders").arguments,
        args(&[
            ("x-queue-type", s("classic")),
            ("x-dead-letter-exchange", s("orders.dlx")),
            ("x-dead-letter-routing-key", s("orders.dlq")),
        ])
    );
    assert_eq!(wait_names(&c), ["orders.wait-5s", "orders.wait-30s"]);
}

#[test]
fn quorum_queues_that_dead_letter_do_so_at_least_once() {
    for toml in [REPUBLISH_QUORUM, CHAIN] {
        let c = compiled(toml);
        for q in queues(&c) {
            assert_eq!(q.arguments.get("x-queue-type"), Some(&s("quorum")), "{}", q.name);
            if q.arguments.contains_key("x-dead-letter-exchange") {
                assert_eq!(q.arguments.get("x-dead-letter-strategy"), Some(&s("at-least-once")), "{}", q.name);
                assert_eq!(q.arguments.get("x-overflow"), Some(&s("reject-publish")), "{}", q.name);
            }
            // Consumers read work queues: they need an explicit delivery limit.
            if matches!(q.role, Role::Work { .. }) {
                assert_eq!(q.arguments.get("x-delivery-limit"), Some(&ArgValue::Int(20)), "{}", q.name);
            }
        }
    }
}

#[test]
fn objects_are_listed_sinks_first() {
    for toml in ALL {
        let c = compiled(toml);
        let position = |kind: &str, name: &str| {
            c.objects
                .iter()
                .position(|o| o.kind() == kind && o.to_string() == name)
                .unwrap_or_else(|| panic!("{kind} `{name}` is not declared"))
        };
        for (i, o) in c.objects.iter().enumerate() {
            match o {
                Object::Queue(q) => {
                    let Some(dlx) = arg_str(q, "x-dead-letter-exchange") else { continue };
                    let dlrk = arg_str(q, "x-dead-letter-routing-key").expect("dlrk");
                    if dlx.is_empty() {
                        assert!(position("queue", dlrk) < i, "{}: its target queue `{dlrk}` comes later", q.name);
                    } else {
                        assert!(position("exchange", dlx) < i, "{}: its DLX `{dlx}` comes later", q.name);
                        // The route its dead letters take exists too, so none is dropped for lack of it.
                        let route = c.objects[..i]
                            .iter()
                            .any(|o| matches!(o, Object::Binding(b) if b.source == dlx && b.routing_key == dlrk));
                        assert!(route, "{}: no binding {dlx} ({dlrk:?}) before it", q.name);
                    }
                }
                Object::Binding(b) => {
                    assert!(position("exchange", &b.source) < i, "{b}: source comes later");
                    assert!(position("queue", b.destination.name()) < i, "{b}: destination comes later");
                }
                Object::Exchange(_) => {}
            }
        }
        let last_exchange = exchanges(&c).last().map(|e| e.name.clone());
        assert_eq!(last_exchange.as_deref(), Some(c.topology.exchange.as_str()));
        assert_eq!(c.objects.iter().filter(|o| o.kind() == "exchange").count(), exchanges(&c).len());
    }
}

#[test]
fn chain_has_one_work_queue_per_attempt_dead_lettering_through_the_retry_exchange() {
    let c = compiled(CHAIN);
    for (attempt, name) in [(1, "orders"), (2, "orders.attempt-2"), (3, "orders.attempt-3")] {
        let q = queue(&c, name);
        assert_eq!(q.role, Role::Work { attempt: Some(attempt) }, "{name}");
        assert_eq!(
            q.arguments,
            args(&[
                ("x-queue-type", s("quorum")),
                ("x-dead-letter-exchange", s("orders.retry")),
                ("x-dead-letter-routing-key", s(&attempt.to_string())),
                ("x-delivery-limit", ArgValue::Int(20)),
                ("x-dead-letter-strategy", s("at-least-once")),
                ("x-overflow", s("reject-publish")),
            ]),
            "{name}"
        );
    }
    let work: Vec<_> = queues(&c).into_iter().filter(|q| matches!(q.role, Role::Work { .. })).collect();
    assert_eq!(work.len(), 3);

    assert_eq!(
        wait_names(&c).into_iter().collect::<BTreeSet<_>>(),
        BTreeSet::from(["orders.hop-1.wait-1s".to_string(), "orders.hop-2.wait-2s".to_string(),])
    );
    for (name, ttl, target, hop) in
        [("orders.hop-1.wait-1s", 1_000, "orders.attempt-2", 1), ("orders.hop-2.wait-2s", 2_000, "orders.attempt-3", 2)]
    {
        let q = queue(&c, name);
        assert_eq!(q.arguments.get("x-message-ttl"), Some(&ArgValue::Int(ttl)), "{name}");
        assert_eq!(arg_str(q, "x-dead-letter-exchange"), Some("orders.retry"), "{name}");
        let key = target.to_string();
        assert_eq!(arg_str(q, "x-dead-letter-routing-key"), Some(key.as_str()), "{name}");
        assert_eq!(bindings_from(&c, "orders.retry")[&key], BTreeSet::from([target.to_string()]), "{name}");
        assert_eq!(
            q.role,
            Role::Wait { hops: vec![hop], delay: format_duration(std::time::Duration::from_millis(ttl as u64)) }
        );
    }

    let retry = bindings_from(&c, "orders.retry");
    let want: BTreeMap<String, BTreeSet<String>> = [
        ("1", "orders.hop-1.wait-1s"),
        ("2", "orders.hop-2.wait-2s"),
        ("3", "orders.dlq"),
        ("orders.attempt-2", "orders.attempt-2"),
        ("orders.attempt-3", "orders.attempt-3"),
    ]
    .into_iter()
    .map(|(k, d)| (k.to_string(), BTreeSet::from([d.to_string()])))
    .collect();
    assert_eq!(retry, want);
    assert_eq!(exchange_named(&c, "orders.retry").expect("retry exchange").kind, "direct");

    // The whole path, by following the compiled model: reject, wait, next attempt, ..., DLQ.
    let mut path = vec!["orders".to_string()];
    while let [target] = dead_letter_targets(&c, queue(&c, path.last().unwrap())).as_slice() {
        path.push(target.clone());
    }
    assert_eq!(
        path,
        [
            "orders",
            "orders.hop-1.wait-1s",
            "orders.attempt-2",
            "orders.hop-2.wait-2s",
            "orders.attempt-3",
            "orders.dlq"
        ]
    );
}

#[test]
fn no_topology_has_a_dead_letter_cycle() {
    for toml in ALL {
        assert_dead_letter_graph_acyclic(&compiled(toml));
    }
    assert_dead_letter_graph_acyclic(&compiled(
        r#"
        [topology.long]
        strategy = "chain"
        backoff = { initial = "1s", multiplier = 3.0, max = "1h" }
        max_attempts = 12
    "#,
    ));
}

#[test]
fn republish_dead_letters_the_main_queue_to_the_dead_letter_queue() {
    let c = compiled(REPUBLISH_QUORUM);
    assert_eq!(dead_letter_targets(&c, queue(&c, "orders")), ["orders.dlq"]);
}

#[test]
fn changing_a_delay_moves_bindings_and_never_changes_a_kept_queue() {
    for (before, after, gone, new) in [
        (
            r#"[topology.orders]
            delays = ["5s", "30s"]
            max_attempts = 4"#,
            r#"[topology.orders]
            delays = ["5s", "1m"]
            max_attempts = 4"#,
            "orders.wait-30s",
            "orders.wait-1m",
        ),
        (
            r#"[topology.orders]
            strategy = "chain"
            delays = ["5s", "30s", "2m"]
            max_attempts = 4"#,
            r#"[topology.orders]
            strategy = "chain"
            delays = ["5s", "1m", "2m"]
            max_attempts = 4"#,
            "orders.hop-2.wait-30s",
            "orders.hop-2.wait-1m",
        ),
    ] {
        let (b, a) = (compiled(before), compiled(after));
        let compared = assert_kept_queues_unchanged(&b, &a);
        let (bq, aq) = (queue_arguments(&b), queue_arguments(&a));
        // Only the wait queue whose delay changed got a new name; all others are kept.
        assert_eq!(compared, bq.len() - 1);
        let removed: Vec<_> = bq.keys().filter(|n| !aq.contains_key(*n)).collect();
        let added: Vec<_> = aq.keys().filter(|n| !bq.contains_key(*n)).collect();
        assert_eq!(removed, [gone]);
        assert_eq!(added, [new]);
        // Bindings: only those of the renamed wait queue move, with the same key.
        let (bb, ab) = (binding_set(&b), binding_set(&a));
        let lost: Vec<_> = bb.difference(&ab).collect();
        let gained: Vec<_> = ab.difference(&bb).collect();
        assert!(!lost.is_empty());
        assert!(lost.iter().all(|x| x.destination.name() == gone && x.source == "orders.retry"), "{lost:?}");
        assert!(gained.iter().all(|x| x.destination.name() == new && x.source == "orders.retry"), "{gained:?}");
        let keys_of = |v: &[&Binding]| v.iter().map(|x| x.routing_key.clone()).collect::<BTreeSet<_>>();
        assert_eq!(keys_of(&lost), keys_of(&gained));
    }
}

#[test]
fn raising_max_attempts_in_chain_keeps_every_existing_queue() {
    let before = compiled(CHAIN);
    let after = compiled(
        r#"
        [topology.orders]
        strategy = "chain"
        delays = ["1s", "2s", "4s", "8s"]
        max_attempts = 5
    "#,
    );
    let compared = assert_kept_queues_unchanged(&before, &after);
    // Every queue survives: the three work queues, two wait queues and the DLQ.
    assert_eq!(compared, queue_arguments(&before).len());
    assert_eq!(compared, 6);
    // The last attempt's reject now goes to a new hop instead of the DLQ; nothing else moves.
    let (bb, ab) = (binding_set(&before), binding_set(&after));
    let lost: Vec<_> = bb.difference(&ab).cloned().collect();
    assert_eq!(lost, [Binding::to_queue("orders.retry", "orders.dlq", "3")]);
    assert_eq!(bindings_from(&after, "orders.retry")["3"], BTreeSet::from(["orders.hop-3.wait-4s".to_string()]));
    assert_eq!(bindings_from(&after, "orders.retry")["5"], BTreeSet::from(["orders.dlq".to_string()]));
    assert_dead_letter_graph_acyclic(&after);
}

#[test]
fn raising_max_attempts_in_republish_keeps_every_existing_queue() {
    let before = compiled(
        r#"
        [topology.orders]
        delays = ["5s", "30s"]
        max_attempts = 3
    "#,
    );
    let after = compiled(
        r#"
        [topology.orders]
        delays = ["5s", "30s", "5m"]
        max_attempts = 6
    "#,
    );
    assert_eq!(assert_kept_queues_unchanged(&before, &after), queue_arguments(&before).len());
    assert!(binding_set(&before).is_subset(&binding_set(&after)));
}

#[test]
fn backoff_computes_capped_hop_delays() {
    let t = topology(
        r#"
        [topology.orders]
        backoff = { initial = "1s", multiplier = 2.0, max = "5s" }
        max_attempts = 6
    "#,
    );
    let delays: Vec<_> = (1..=t.hops()).map(|h| format_duration(t.delay(h))).collect();
    assert_eq!(delays, ["1s", "2s", "4s", "5s", "5s"]);
    let c = compile_topology(&t);
    assert_eq!(wait_names(&c), ["orders.wait-1s", "orders.wait-2s", "orders.wait-4s", "orders.wait-5s"]);
    for (name, ttl, hops) in [
        ("orders.wait-1s", 1_000, vec!["1"]),
        ("orders.wait-2s", 2_000, vec!["2"]),
        ("orders.wait-4s", 4_000, vec!["3"]),
        ("orders.wait-5s", 5_000, vec!["4", "5"]),
    ] {
        assert_eq!(queue(&c, name).arguments.get("x-message-ttl"), Some(&ArgValue::Int(ttl)), "{name}");
        assert_eq!(keys(&c, "orders.retry", name), hops, "{name}");
    }
}

#[test]
fn a_single_attempt_republish_has_no_retry_path() {
    let c = compiled(
        r#"
        [topology.orders]
        max_attempts = 1
    "#,
    );
    assert!(exchange_named(&c, "orders.retry").is_none());
    assert!(wait_queues(&c).is_empty());
    assert!(bindings(&c).iter().all(|b| b.source != "orders.retry"));
    let names: Vec<_> = queues(&c).iter().map(|q| q.name.clone()).collect();
    assert_eq!(names, ["orders.dlq", "orders"]);
    assert_eq!(dead_letter_targets(&c, queue(&c, "orders")), ["orders.dlq"]);
    let exchange_names: Vec<_> = exchanges(&c).iter().map(|e| e.name.clone()).collect();
    assert_eq!(exchange_names, ["orders.dlx", "orders"]);
}

#[test]
fn a_fanout_main_exchange_has_one_binding_without_a_routing_key() {
    let c = compiled(
        r#"
        [topology.orders]
        exchange = "orders.fanout"
        exchange_type = "fanout"
        delays = ["5s"]
        max_attempts = 2
    "#,
    );
    assert_eq!(exchange_named(&c, "orders.fanout").expect("main exchange").kind, "fanout");
    let from_main: Vec<_> = bindings(&c).into_iter().filter(|b| b.source == "orders.fanout").cloned().collect();
    assert_eq!(from_main, [Binding::to_queue("orders.fanout", "orders", "")]);
}

#[test]
fn compile_keeps_every_topology_in_order() {
    let spec = spec::from_str(
        "t.toml",
        r#"
        [topology.a]
        max_attempts = 1
        [topology.b]
        strategy = "chain"
        delays = ["1s"]
        max_attempts = 2
    "#,
    )
    .unwrap_or_else(|e| panic!("{}", e.render_plain()));
    // Compiled once, in validation: in the files' order, and as compiling again would.
    let names: Vec<&str> = spec.topologies().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    for c in &spec.compiled {
        assert_eq!(c.objects, compile_topology(&c.topology).objects);
    }
}

/// native: the main queue delays its own retries, min × n capped at max; a topology that never
/// retries has nothing to delay.
#[test]
fn native_sets_delayed_retry_on_the_main_queue_only_when_it_retries() {
    let c = compiled(
        "[topology.orders]\nstrategy = \"native\"\nbackoff = { initial = \"1s\", max = \"3s\", shape = \"linear\" }\nmax_attempts = 5\n",
    );
    let q = queue(&c, "orders");
    assert_eq!(q.arguments.get(native::DELAYED_RETRY_TYPE), Some(&s("failed")));
    assert_eq!(q.arguments.get(native::DELAYED_RETRY_MIN), Some(&ArgValue::Int(1_000)));
    assert_eq!(q.arguments.get(native::DELAYED_RETRY_MAX), Some(&ArgValue::Int(3_000)));
    assert!(wait_queues(&c).is_empty());
    let once = compiled("[topology.orders]\nstrategy = \"native\"\nmax_attempts = 1\n");
    let q = queue(&once, "orders");
    assert!(q.arguments.keys().all(|k| !k.starts_with("x-delayed-retry-")), "{:?}", q.arguments);
}
