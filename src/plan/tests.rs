use super::*;
use crate::compile::GeneratedName;
use crate::live::LiveExchange;
use std::sync::Arc;

use crate::policy::AppliedPolicy;
use crate::spec;

fn prune(prune: bool) -> Options {
    Options { prune, admin: None, migrate: false, consumers_upgraded: false }
}

fn compiled(toml: &str) -> Vec<CompiledTopology> {
    spec::from_str("t.toml", toml).unwrap_or_else(|e| panic!("{}", e.render_plain())).compiled
}

const ORDERS: &str = r#"
    [topology.orders]
    delays = ["5s", "30s"]
    max_attempts = 3
"#;

fn live_from(objects: &[Object]) -> Live {
    let mut live = Live { bindings: Some(BTreeSet::new()), ..Live::default() };
    for o in objects {
        match o {
            Object::Exchange(e) => {
                live.exchanges.insert(
                    e.name.clone(),
                    LiveExchange {
                        kind: e.kind.clone(),
                        durable: e.durable,
                        auto_delete: false,
                        internal: false,
                        arguments: Arguments::new(),
                    },
                );
            }
            Object::Queue(q) => {
                live.queues.insert(
                    q.name.clone(),
                    LiveQueue {
                        durable: true,
                        arguments: Some(q.arguments.clone()),
                        messages: Some(0),
                        consumers: Some(0),
                        ..LiveQueue::default()
                    },
                );
            }
            Object::Binding(b) => {
                live.bindings.as_mut().unwrap().insert(b.clone());
            }
        }
    }
    live
}

#[test]
fn an_empty_broker_gets_everything_created() {
    let c = compiled(ORDERS);
    let p = plan("/", &[&c[0]], &Live { bindings: Some(BTreeSet::new()), ..Live::default() }, &prune(false));
    assert!(p.steps.iter().all(|s| matches!(s, Step::Create { .. })));
    assert_eq!(p.steps.len(), c[0].objects.len());
}

#[test]
fn a_converged_broker_needs_nothing() {
    let c = compiled(ORDERS);
    let p = plan("/", &[&c[0]], &live_from(&c[0].objects), &prune(false));
    assert!(!p.has_changes(), "{:#?}", p.steps);
    assert!(p.steps.iter().all(|s| matches!(s, Step::InSync { .. })));
}

#[test]
fn a_changed_delay_creates_a_queue_moves_the_binding_and_keeps_the_old_queue() {
    let old = compiled(ORDERS);
    let mut live = live_from(&old[0].objects);
    live.queues.get_mut("orders.wait-30s").unwrap().messages = Some(3);
    let new = compiled(&ORDERS.replace("30s", "45s"));
    let p = plan("/", &[&new[0]], &live, &prune(true));
    let created: Vec<_> = p
        .steps
        .iter()
        .filter_map(|s| if let Step::Create { object } = s { Some(object.to_string()) } else { None })
        .collect();
    assert_eq!(created, vec!["orders.wait-45s".to_string(), "orders.retry -> orders.wait-45s (\"2\")".to_string()]);
    let unbinds: Vec<_> = p
        .steps
        .iter()
        .filter_map(|s| if let Step::Unbind { binding } = s { Some(binding.to_string()) } else { None })
        .collect();
    assert_eq!(unbinds, vec!["orders.retry -> orders.wait-30s (\"2\")".to_string()]);
    // The unbind comes after the binding that replaces it.
    let pos = |f: &dyn Fn(&Step) -> bool| p.steps.iter().position(f).unwrap();
    assert!(
        pos(&|s| matches!(s, Step::Unbind { .. })) > pos(&|s| matches!(s, Step::Create { object: Object::Binding(_) }))
    );
    // Holding messages, it is kept even with --prune, and said to drain into the main queue.
    assert!(p.steps.iter().any(
        |s| matches!(s, Step::Extra { queue, drains_into: Some(d), .. } if queue == "orders.wait-30s" && d == "orders")
    ));
    assert!(!p.steps.iter().any(|s| matches!(s, Step::Delete { .. })));
    assert!(p.conflicts().next().is_none());
}

#[test]
fn an_empty_extra_is_deleted_only_with_prune() {
    let old = compiled(ORDERS);
    let live = live_from(&old[0].objects);
    let new = compiled(&ORDERS.replace("30s", "45s"));
    assert!(!plan("/", &[&new[0]], &live, &prune(false)).steps.iter().any(|s| matches!(s, Step::Delete { .. })));
    assert!(
        plan("/", &[&new[0]], &live, &prune(true))
            .steps
            .iter()
            .any(|s| matches!(s, Step::Delete { queue, broker_checks: false } if queue == "orders.wait-30s"))
    );
}

#[test]
fn a_changed_argument_is_a_conflict_with_both_values_and_ways_out() {
    let c = compiled(ORDERS);
    let mut live = live_from(&c[0].objects);
    let q = live.queues.get_mut("orders").unwrap();
    q.arguments.as_mut().unwrap().insert("x-delivery-limit", ArgValue::Int(5));
    let p = plan("/", &[&c[0]], &live, &prune(false));
    let conflicts: Vec<_> = p.conflicts().collect();
    assert_eq!(conflicts.len(), 1);
    let Step::Conflict { object, differences, ways_out } = conflicts[0] else { unreachable!() };
    assert_eq!(object.to_string(), "orders");
    assert_eq!(
        differences,
        &vec![Difference {
            property: Property::Argument("x-delivery-limit".into()),
            live: Some(ArgValue::Int(5)),
            spec: Some(ArgValue::Int(20))
        }]
    );
    // The spec key that matches the broker, as a line to paste.
    let edit = ways_out.iter().find_map(|w| w.spec.as_ref()).expect("a spec edit");
    assert_eq!(
        (edit.table.as_str(), edit.set.as_slice()),
        ("[topology.orders]", &["delivery_limit = 5".to_string()][..])
    );
}

#[test]
fn a_missing_queue_type_argument_means_classic() {
    let c = compiled(&format!("[defaults]\nqueue_type = \"classic\"\n{ORDERS}"));
    let q = c[0].queue("orders").unwrap();
    let mut live = q.arguments.clone();
    live.remove("x-queue-type");
    assert!(queue_differences(q, &LiveQueue { durable: true, ..LiveQueue::default() }, &live).is_empty());
}

#[test]
fn a_policy_that_changes_what_the_spec_set_is_an_override() {
    let c = compiled(ORDERS);
    let mut live = live_from(&c[0].objects);
    let cap =
        AppliedPolicy { name: "cap".into(), definition: [("message-ttl".to_string(), ArgValue::Int(1000))].into() };
    live.queues.get_mut("orders.wait-5s").unwrap().operator_policy = Some(Arc::new(cap.clone()));
    let dlx = AppliedPolicy {
        name: "dlx".into(),
        definition: [("dead-letter-exchange".to_string(), ArgValue::Str("x".into()))].into(),
    };
    let dlx = Arc::new(dlx);
    live.queues.get_mut("orders.dlq").unwrap().policy = Some(dlx.clone());
    // The argument wins for the dead-letter exchange: a policy on the main queue changes nothing.
    live.queues.get_mut("orders").unwrap().policy = Some(dlx);
    let p = plan("/", &[&c[0]], &live, &prune(false));
    assert_eq!(
        p.overrides,
        vec![
            Override {
                queue: "orders.dlq".into(),
                setting: Setting::DeadLetterExchange,
                spec: None,
                effective: ArgValue::str("x"),
                source: Source::Policy,
                policy: "dlx".into(),
            },
            Override {
                queue: "orders.wait-5s".into(),
                setting: Setting::MessageTtl,
                spec: Some(ArgValue::Int(5000)),
                effective: ArgValue::Int(1000),
                source: Source::OperatorPolicy,
                policy: "cap".into(),
            },
        ]
    );
    // A longer TTL than the spec's changes nothing: the smallest wins.
    live.queues.get_mut("orders.wait-5s").unwrap().operator_policy =
        Some(Arc::new(AppliedPolicy { definition: [("message-ttl".to_string(), ArgValue::Int(60000))].into(), ..cap }));
    assert_eq!(plan("/", &[&c[0]], &live, &prune(false)).overrides.len(), 1);
}

const CHAIN: &str = r#"
    [topology.orders]
    strategy = "chain"
    delays = ["1s", "1s", "15s"]
    max_attempts = 4
"#;

#[test]
fn a_left_over_queue_that_still_receives_dead_letters_is_never_pruned() {
    // Lowering max_attempts in chain: attempt-4 is left over, but hop-3's wait queue, left
    // over too and holding messages, still dead-letters into it.
    let old = compiled(CHAIN);
    let mut live = live_from(&old[0].objects);
    live.queues.get_mut("orders.hop-3.wait-15s").unwrap().messages = Some(3);
    let new = compiled(&CHAIN.replace("max_attempts = 4", "max_attempts = 3").replace(", \"15s\"", ""));
    let p = plan("/", &[&new[0]], &live, &prune(true));
    assert!(!p.steps.iter().any(|s| matches!(s, Step::Delete { .. })), "{:#?}", p.steps);
    let kept = |q: &str| {
        p.steps.iter().find_map(|s| match s {
            Step::Extra { queue, kept_because, .. } if queue == q => Some(kept_because.to_string()),
            _ => None,
        })
    };
    assert_eq!(
        kept("orders.attempt-4").as_deref(),
        Some("`orders.hop-3.wait-15s` still dead-letters into it; it goes once that queue has gone")
    );
    assert!(kept("orders.hop-3.wait-15s").unwrap().contains("holds 3 message(s)"));
    // The reason is a value in the plan, the same sentence in its JSON.
    let extra = p.steps.iter().find(|s| matches!(s, Step::Extra { queue, .. } if queue == "orders.attempt-4")).unwrap();
    let Step::Extra { kept_because, .. } = extra else { unreachable!() };
    assert_eq!(kept_because, &crate::plan::Kept::DeadLetteredInto { by: "orders.hop-3.wait-15s".into() });
    assert_eq!(
        serde_json::to_value(extra).unwrap()["kept_because"],
        serde_json::json!(kept("orders.attempt-4").unwrap())
    );
    // Once the wait queue has gone, the empty attempt queue is pruned.
    live.queues.remove("orders.hop-3.wait-15s");
    let p = plan("/", &[&new[0]], &live, &prune(true));
    assert!(p.steps.iter().any(|s| matches!(s, Step::Delete { queue, .. } if queue == "orders.attempt-4")));
}

#[test]
fn only_queues_of_hoppers_grammar_and_shape_are_left_overs() {
    let c = compiled(CHAIN);
    let t = &c[0].topology;
    let mut live = live_from(&c[0].objects);
    let shaped = |name: &str| live.queues[name].clone();
    assert_eq!(left_over(t, "orders.attempt-2", &shaped("orders.attempt-2")), Some(GeneratedName::Work { attempt: 2 }));
    assert_eq!(
        left_over(t, "orders.hop-1.wait-1s", &shaped("orders.hop-1.wait-1s")),
        Some(GeneratedName::Wait { hop: Some(1) })
    );
    // Someone else's queue under a similar name, or of another shape, is not hopper's.
    let foreign = LiveQueue { arguments: Some(Arguments::new()), ..LiveQueue::default() };
    assert_eq!(left_over(t, "orders.attempt-log", &foreign), None);
    assert_eq!(left_over(t, "orders.attempt-7", &foreign), None);
    assert_eq!(left_over(t, "orders.hop-01.wait-1s", &shaped("orders.hop-1.wait-1s")), None);
    // A topology moved from chain to republish still owns what chain left (and a republish wait
    // queue after a move to chain); a foreign queue bound to the main exchange stays bound.
    let r = compiled(ORDERS);
    assert_eq!(
        left_over(&r[0].topology, "orders.attempt-2", &shaped("orders.attempt-2")),
        Some(GeneratedName::Work { attempt: 2 })
    );
    live = live_from(&r[0].objects);
    live.queues.insert("orders.attempt-log".into(), foreign);
    live.bindings.as_mut().unwrap().insert(Binding::to_queue("orders", "orders.attempt-log", "order.#"));
    let p = plan("/", &[&r[0]], &live, &prune(true));
    assert!(!p.has_changes(), "{:#?}", p.steps);
}

#[test]
fn a_queue_belongs_to_its_topology_by_exact_name_not_prefix() {
    let c = compiled("[topology.orders]\ndelays = [\"5s\"]\n\n[topology.orders2]\ndelays = [\"5s\"]\n");
    let (orders, orders2) = (&c[0].topology, &c[1].topology);
    assert!(orders.owns_queue("orders.wait-9s") && orders.owns_queue("orders.dlq"));
    assert!(!orders.owns_queue("orders2.wait-5s") && orders2.owns_queue("orders2.wait-5s"));
    // Without the management API, a new wait queue of `orders2` is judged by `orders2`'s
    // retry exchange, not by `orders`'s.
    let mut live = live_from(&c[0].objects);
    live.bindings = None;
    let p = plan("/", &[&c[0], &c[1]], &live, &prune(false));
    assert!(p.conflicts().next().is_none(), "{:#?}", p.steps);
}

#[test]
fn entry_bindings_come_after_everything_they_feed() {
    let c = compiled(ORDERS);
    let p = plan("/", &[&c[0]], &Live { bindings: Some(BTreeSet::new()), ..Live::default() }, &prune(false));
    let phases = phases(&p);
    let names = |phase: Phase| phases.of(phase).iter().map(|i| p.steps[*i].clone()).collect::<Vec<_>>();
    assert!(
        names(Phase::Objects)
            .iter()
            .all(|s| matches!(s, Step::Create { object: Object::Exchange(_) | Object::Queue(_) }))
    );
    assert!(
        names(Phase::EntryBindings)
            .iter()
            .all(|s| matches!(s, Step::Create { object: Object::Binding(b) } if b.source == "orders"))
    );
    assert_eq!(names(Phase::EntryBindings).len(), 1);
    assert_eq!(phases.len(), c[0].objects.len());
}

#[test]
fn bindings_of_other_owners_on_the_main_exchange_are_left_alone() {
    let c = compiled(ORDERS);
    let mut live = live_from(&c[0].objects);
    live.bindings.as_mut().unwrap().insert(Binding::to_queue("orders", "audit", "#"));
    assert!(!plan("/", &[&c[0]], &live, &prune(false)).has_changes());
}

/// Moving a topology to another strategy changes its main queue's arguments, which cannot change
/// in place: refused, with the spec edit that goes back to what the broker has.
#[test]
fn a_strategy_change_is_refused_with_the_way_back() {
    let native = "[topology.orders]\nstrategy = \"native\"\nbackoff = { initial = \"1s\", max = \"5s\", shape = \"linear\" }\nmax_attempts = 4\n";
    let republish = "[topology.orders]\ndelays = [\"1s\", \"2s\"]\nmax_attempts = 3\n";
    for (live_spec, new_spec, want) in [
        (
            native,
            republish,
            vec![
                "strategy = \"native\"".to_string(),
                "backoff = { initial = \"1s\", max = \"3s\", shape = \"linear\" }".to_string(),
                "max_attempts = 4".to_string(),
            ],
        ),
        (republish, native, vec!["strategy = \"republish\"".to_string()]),
    ] {
        let old = compiled(live_spec);
        let live = live_from(&old[0].objects);
        let new = compiled(new_spec);
        let p = plan("/", &[&new[0]], &live, &prune(false));
        let conflict = p.conflicts().next().unwrap_or_else(|| panic!("no conflict: {:#?}", p.steps));
        let Step::Conflict { ways_out, .. } = conflict else { unreachable!() };
        let edit = ways_out.iter().find_map(|w| w.spec.as_ref()).unwrap_or_else(|| panic!("{ways_out:#?}"));
        assert_eq!(edit.set, want, "{ways_out:#?}");
        // Pasted, the spec compiles to exactly what the broker has.
        let mut text = new_spec.to_string();
        for line in &edit.set {
            let key = line.split(" = ").next().unwrap();
            text = text.lines().filter(|l| !l.starts_with(&format!("{key} ="))).collect::<Vec<_>>().join("\n") + "\n";
            text.push_str(&format!("{line}\n"));
        }
        for key in &edit.remove {
            text = text.lines().filter(|l| !l.starts_with(&format!("{key} ="))).collect::<Vec<_>>().join("\n") + "\n";
        }
        let pasted = compiled(&text);
        let p = plan("/", &[&pasted[0]], &live, &prune(false));
        assert!(p.conflicts().next().is_none(), "{text}\n{:#?}", p.steps);
    }
}

/// A binding from one topology's retry exchange to another topology's queue is someone's
/// deliberate choice, not a left-over of the first topology: never removed.
#[test]
fn a_binding_to_another_topologys_queue_is_left_alone() {
    let c = compiled("[topology.a]\ndelays = [\"5s\"]\n\n[topology.b]\ndelays = [\"5s\"]\n");
    let mut objects = c[0].objects.clone();
    objects.extend(c[1].objects.clone());
    let mut live = live_from(&objects);
    live.bindings.as_mut().unwrap().insert(Binding::to_queue("a.retry", "b", "audit"));
    let p = plan("/", &[&c[0], &c[1]], &live, &prune(false));
    assert!(!p.has_changes(), "{:#?}", p.steps);
}

fn migrate() -> Options {
    Options { migrate: true, ..Options::default() }
}

fn migrating(p: &Plan) -> Vec<String> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Migrate { object, .. } => Some(object.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_queue_type_change_is_a_conflict_or_with_migrate_a_migration_wait_queues_first() {
    let classic = compiled(&format!("{ORDERS}queue_type = \"classic\"\n"));
    let quorum = compiled(ORDERS);
    let live = live_from(&classic[0].objects);
    let refused = plan("/", &[&quorum[0]], &live, &prune(false));
    let first = refused.conflicts().next().expect("a conflict");
    let Step::Conflict { ways_out, .. } = first else { unreachable!() };
    assert!(ways_out[0].says.contains("--migrate"), "{ways_out:#?}");

    let p = plan("/", &[&quorum[0]], &live, &migrate());
    assert!(p.conflicts().next().is_none(), "{:#?}", p.steps);
    assert_eq!(migrating(&p), ["orders.dlq", "orders", "orders.wait-5s", "orders.wait-30s"]);
    let order: Vec<String> = phases(&p)
        .of(Phase::Migrations)
        .iter()
        .map(|i| match &p.steps[*i] {
            Step::Migrate { object, .. } => object.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(order, ["orders.wait-5s", "orders.wait-30s", "orders.dlq", "orders"], "wait queues first");
}

#[test]
fn a_migration_is_refused_with_consumers_a_stream_or_no_bindings() {
    let classic = compiled(&format!("{ORDERS}queue_type = \"classic\"\n"));
    let quorum = compiled(ORDERS);
    let mut live = live_from(&classic[0].objects);
    live.queues.get_mut("orders").unwrap().consumers = Some(2);
    let p = plan("/", &[&quorum[0]], &live, &migrate());
    assert!(!migrating(&p).contains(&"orders".to_string()));
    let why = p.conflicts().find_map(|s| match s {
        Step::Conflict { object, ways_out, .. } if object.to_string() == "orders" => Some(ways_out[0].says.clone()),
        _ => None,
    });
    assert!(why.unwrap().contains("2 consumer(s)"));

    live.queues.get_mut("orders").unwrap().consumers = Some(0);
    live.bindings = None;
    let p = plan("/", &[&quorum[0]], &live, &migrate());
    assert!(migrating(&p).is_empty(), "{:#?}", p.steps);
}

#[test]
fn an_old_wait_queue_is_in_sync_with_a_note_and_migrates_when_asked() {
    let c = compiled(ORDERS);
    let mut live = live_from(&c[0].objects);
    let wait = live.queues.get_mut("orders.wait-5s").unwrap().arguments.as_mut().unwrap();
    wait.insert(arg::DEAD_LETTER_EXCHANGE, ArgValue::str(""));
    wait.insert(arg::DEAD_LETTER_ROUTING_KEY, ArgValue::str("orders"));
    let p = plan("/", &[&c[0]], &live, &prune(false));
    assert!(!p.has_changes(), "{:#?}", p.steps);
    assert!(p.steps.iter().any(|s| matches!(s, Step::InSync { object, note: Some(n) } if object.to_string() == "orders.wait-5s" && n.contains("hopper 0.1"))));
    // Another TTL is a real difference, not the old shape.
    live.queues
        .get_mut("orders.wait-5s")
        .unwrap()
        .arguments
        .as_mut()
        .unwrap()
        .insert(arg::MESSAGE_TTL, ArgValue::Int(1));
    assert!(plan("/", &[&c[0]], &live, &prune(false)).conflicts().next().is_some());
    live.queues
        .get_mut("orders.wait-5s")
        .unwrap()
        .arguments
        .as_mut()
        .unwrap()
        .insert(arg::MESSAGE_TTL, ArgValue::Int(5000));
    assert_eq!(migrating(&plan("/", &[&c[0]], &live, &migrate())), ["orders.wait-5s"]);
}

#[test]
fn an_interrupted_migration_is_named_and_its_moved_bindings_are_not_declared_again() {
    let c = compiled(ORDERS);
    let mut live = live_from(&c[0].objects);
    let holding = migrate::holding_queue("orders");
    live.queues.insert(holding.clone(), live.queues["orders"].clone());
    let bindings = live.bindings.as_mut().unwrap();
    let to_orders: Vec<Binding> = bindings
        .iter()
        .filter(|b| b.destination == crate::model::Destination::Queue("orders".into()))
        .cloned()
        .collect();
    for b in to_orders {
        bindings.remove(&b);
        bindings.insert(Binding { destination: crate::model::Destination::Queue(holding.clone()), ..b });
    }
    let p = plan("/", &[&c[0]], &live, &prune(false));
    assert!(!p.steps.iter().any(|s| matches!(s, Step::Create { .. })), "{:#?}", p.steps);
    let Some(Step::Conflict { ways_out, .. }) = p.conflicts().next() else { panic!("{:#?}", p.steps) };
    assert!(ways_out[0].says.contains("interrupted"));
    let p = plan("/", &[&c[0]], &live, &migrate());
    assert!(p.steps.iter().any(|s| matches!(s, Step::Migrate { resumes: true, .. })));
}

/// Planning stays linear when every topology changes at once: each left-over queue, binding and
/// migration used to be checked against every topology or every queue (quadratic; 10,000
/// topologies with new delays had not planned after five minutes). 3,000 topologies here, each
/// step checked, no time asserted.
#[test]
fn every_topology_changing_at_once_plans_each_change() {
    let n = 3_000;
    let spec = |delays: &str, kind: &str| {
        (0..n)
            .map(|i| format!("[topology.t{i:05}]\ndelays = {delays}\nmax_attempts = 3\nqueue_type = \"{kind}\"\n"))
            .collect::<String>()
    };
    let old = compiled(&spec(r#"["5s", "30s"]"#, "classic"));
    let live = live_from(&old.iter().flat_map(|c| c.objects.clone()).collect::<Vec<_>>());

    let new = compiled(&spec(r#"["7s", "70s"]"#, "classic"));
    let topologies: Vec<&CompiledTopology> = new.iter().collect();
    let p = plan("/", &topologies, &live, &prune(true));
    let count = |f: &dyn Fn(&Step) -> bool| p.steps.iter().filter(|s| f(s)).count();
    assert_eq!(count(&|s| matches!(s, Step::Create { object: Object::Queue(_) })), 2 * n);
    assert_eq!(count(&|s| matches!(s, Step::Unbind { .. })), 2 * n, "each old wait queue's hop binding");
    // Empty and fed by nothing once unbound: deleted, with the broker's own check.
    assert_eq!(count(&|s| matches!(s, Step::Delete { broker_checks: true, .. })), 2 * n);
    assert!(p.conflicts().next().is_none());

    let quorum = compiled(&spec(r#"["5s", "30s"]"#, "quorum"));
    let topologies: Vec<&CompiledTopology> = quorum.iter().collect();
    let p = plan("/", &topologies, &live, &migrate());
    // The main, wait and dead-letter queues of each topology.
    assert_eq!(count_migrations(&p), 4 * n);
    assert!(p.conflicts().next().is_none());
}

fn count_migrations(p: &Plan) -> usize {
    p.steps.iter().filter(|s| matches!(s, Step::Migrate { .. })).count()
}

/// The main exchange and the main queue renamed in one spec: the old exchange's intake is bound
/// into the new main queue before it leaves the old one, so a publisher still on the old exchange
/// keeps a route; the next plan keeps that binding until `--prune`, like any earlier exchange's.
#[test]
fn an_earlier_exchange_renamed_with_its_queue_is_bound_into_the_new_queue_first() {
    let before = compiled(ORDERS);
    let mut live = live_from(&before[0].objects);
    live.records = crate::live::Records::Read(super::ownership::records("/", &[&before[0]]));
    let renamed =
        compiled(&ORDERS.replace("max_attempts", "exchange = \"orders-in\"\nqueue = \"orders-v2\"\nmax_attempts"));
    let (old, repointed) =
        (Binding::to_queue("orders", "orders", "orders"), Binding::to_queue("orders", "orders-v2", "orders"));
    let first = plan("/", &[&renamed[0]], &live, &prune(false));
    let created =
        first.steps.iter().position(|s| matches!(s, Step::Create { object: Object::Binding(b) } if *b == repointed));
    assert!(created.is_some(), "{:#?}", first.steps);
    assert!(first.steps.iter().any(|s| matches!(s, Step::Unbind { binding } if *binding == old)));
    let phases = super::phases(&first);
    let (bound, unbound) = (phases.declarations.concat(), phases.removals.concat());
    assert!(bound.contains(&created.unwrap()) && !unbound.contains(&created.unwrap()), "bound before the unbind");

    // Once bound (and the old binding gone), kept until --prune, and never bound twice.
    live.bindings.as_mut().unwrap().remove(&old);
    live.bindings.as_mut().unwrap().insert(repointed.clone());
    let next = plan("/", &[&renamed[0]], &live, &prune(false));
    assert!(!next.steps.iter().any(|s| matches!(s, Step::Create { object: Object::Binding(b) } if *b == repointed)));
    assert!(next.steps.iter().any(|s| matches!(s, Step::KeptBinding { binding, .. } if *binding == repointed)));
    // With --prune the user says no publisher uses the old exchange: nothing is re-pointed.
    live.bindings.as_mut().unwrap().remove(&repointed);
    live.bindings.as_mut().unwrap().insert(old.clone());
    let pruned = plan("/", &[&renamed[0]], &live, &prune(true));
    assert!(
        !pruned.steps.iter().any(|s| matches!(s, Step::Create { object: Object::Binding(b) } if b.source == "orders"))
    );
}

/// Only `retry_exchange` renamed: consumers on the old contract still publish retries to the old
/// one, whose keys into the wait queue stay until `--consumers-upgraded`, and then go.
#[test]
fn an_earlier_retry_exchange_keeps_its_keys_until_consumers_upgrade() {
    let before = compiled(ORDERS);
    let mut live = live_from(&before[0].objects);
    live.records = crate::live::Records::Read(super::ownership::records("/", &[&before[0]]));
    let renamed = compiled(&ORDERS.replace("max_attempts", "retry_exchange = \"orders.retry-v2\"\nmax_attempts"));
    let key = Binding::to_queue("orders.retry", "orders.wait-5s", "1");
    assert!(live.bindings.as_ref().unwrap().contains(&key), "{:#?}", live.bindings);
    let kept = plan("/", &[&renamed[0]], &live, &prune(true));
    assert!(
        kept.steps.iter().any(|s| matches!(s, Step::InSync { object: Object::Binding(b), note: Some(_) } if *b == key)),
        "{:#?}",
        kept.steps
    );
    assert!(!kept.steps.iter().any(|s| matches!(s, Step::Unbind { binding } if *binding == key)));
    let upgraded = Options { consumers_upgraded: true, ..prune(true) };
    let gone = plan("/", &[&renamed[0]], &live, &upgraded);
    assert!(gone.steps.iter().any(|s| matches!(s, Step::Unbind { binding } if *binding == key)), "{:#?}", gone.steps);
}

/// Only `dead_letter_exchange` renamed, once the main queue dead-letters through the new one: the
/// old exchange's binding into the dead-letter queue goes, and then the old exchange with
/// `--prune`. While the main queue still dead-letters through it, both stay.
#[test]
fn an_earlier_dead_letter_exchange_goes_once_nothing_dead_letters_through_it() {
    let before = compiled(ORDERS);
    let renamed = compiled(&ORDERS.replace("max_attempts", "dead_letter_exchange = \"orders.dead\"\nmax_attempts"));
    let old = Binding::to_queue("orders.dlx", "orders.dlq", "orders.dlq");
    let mut live = live_from(&before[0].objects);
    live.records = crate::live::Records::Read(super::ownership::records("/", &[&before[0]]));
    let unbinds = |p: &Plan| p.steps.iter().any(|s| matches!(s, Step::Unbind { binding } if *binding == old));
    let waiting = plan("/", &[&renamed[0]], &live, &Options { migrate: true, ..prune(true) });
    assert!(!unbinds(&waiting), "the main queue still dead-letters through it: {:#?}", waiting.steps);

    // Migrated: the broker now holds the new spec's objects beside the old exchange's binding.
    let mut migrated = live_from(&renamed[0].objects);
    migrated.records = live.records.clone();
    migrated.exchanges.insert("orders.dlx".into(), live.exchanges["orders.dlx"].clone());
    migrated.bindings.as_mut().unwrap().insert(old.clone());
    let first = plan("/", &[&renamed[0]], &migrated, &prune(true));
    assert!(unbinds(&first), "{:#?}", first.steps);
    migrated.bindings.as_mut().unwrap().remove(&old);
    let second = plan("/", &[&renamed[0]], &migrated, &prune(true));
    assert!(second.steps.iter().any(|s| matches!(s, Step::DeleteExchange { exchange } if exchange == "orders.dlx")));
}

/// A renamed main exchange: the topology's record names the old one, whose binding to the main
/// queue publishers may still use. Kept (and reported, so diff is not in sync) until `--prune`.
#[test]
fn a_renamed_main_exchange_keeps_its_binding_until_prune() {
    let before = compiled(ORDERS);
    let mut live = live_from(&before[0].objects);
    live.records = crate::live::Records::Read(super::ownership::records("/", &[&before[0]]));
    let renamed = compiled(&ORDERS.replace("max_attempts", "exchange = \"orders-in\"\nmax_attempts"));
    let old = Binding::to_queue("orders", "orders", "orders");
    let kept = plan("/", &[&renamed[0]], &live, &prune(false));
    assert!(
        kept.steps
            .iter()
            .any(|s| matches!(s, Step::KeptBinding { binding, kept_because: Kept::EarlierExchange { exchange, .. } }
            if *binding == old && exchange == "orders")),
        "{:#?}",
        kept.steps
    );
    assert!(!kept.steps.iter().any(|s| matches!(s, Step::Unbind { .. })), "nothing unbound without --prune");
    let pruned = plan("/", &[&renamed[0]], &live, &prune(true));
    assert!(pruned.steps.iter().any(|s| matches!(s, Step::Unbind { binding } if *binding == old)));
    // Without the record, the old exchange is no one's: left alone, as before.
    live.records = crate::live::Records::Read(Vec::new());
    let unrecorded = plan("/", &[&renamed[0]], &live, &prune(true));
    assert!(!unrecorded.steps.iter().any(|s| matches!(s, Step::Unbind { .. } | Step::KeptBinding { .. })));
}

/// A retired topology's exchanges stay while anything still dead-letters through them or routes
/// from them, and go with `--prune` once nothing does; the topology leaves the record with the
/// last of them. An exchange someone else still binds from is kept, saying so.
#[test]
fn a_retired_topologys_exchanges_go_with_prune_once_nothing_uses_them() {
    let both = compiled(&format!("{ORDERS}\n[topology.old]\ndelays = [\"5s\"]\nmax_attempts = 3\n"));
    let mut live = live_from(&both.iter().flat_map(|c| c.objects.clone()).collect::<Vec<_>>());
    live.records = crate::live::Records::Read(super::ownership::records("/", &both.iter().collect::<Vec<_>>()));
    let orders = compiled(ORDERS);
    let exchanges = |p: &Plan| -> Vec<(String, bool)> {
        p.steps
            .iter()
            .filter_map(|s| match s {
                Step::KeptExchange { exchange, .. } => Some((exchange.to_string(), false)),
                Step::DeleteExchange { exchange } => Some((exchange.to_string(), true)),
                _ => None,
            })
            .collect()
    };
    let kept = |names: &[&str]| names.iter().map(|n| (n.to_string(), false)).collect::<Vec<_>>();

    // Its queues are still there: its dead-letter and retry exchanges are routes they use. Its
    // main exchange routes nowhere once its intake is unbound (this run, before the deletions):
    // a publisher still using it gets an error rather than its messages dropped unroutable.
    let first = plan("/", &[&orders[0]], &live, &prune(true));
    let want = [("old".to_string(), true), ("old.dlx".to_string(), false), ("old.retry".to_string(), false)];
    assert_eq!(exchanges(&first), want, "{:#?}", first.steps);
    assert!(first.steps.iter().any(|s| matches!(s,
        Step::KeptExchange { exchange, kept_because: Kept::DeadLetteredInto { .. } } if exchange == "old.dlx")));

    // Its queues gone (and with them their bindings): nothing uses the exchanges.
    let old_queues: Vec<QueueName> = both
        .iter()
        .find(|c| c.topology.name == "old")
        .unwrap()
        .objects
        .iter()
        .filter_map(|o| match o {
            Object::Queue(q) => Some(q.name.clone()),
            _ => None,
        })
        .collect();
    for q in &old_queues {
        live.queues.remove(q);
    }
    live.bindings
        .as_mut()
        .unwrap()
        .retain(|b| !matches!(&b.destination, Destination::Queue(q) if old_queues.contains(q)));
    let not_pruning = plan("/", &[&orders[0]], &live, &prune(false));
    assert_eq!(exchanges(&not_pruning), kept(&["old", "old.dlx", "old.retry"]));
    let pruned = plan("/", &[&orders[0]], &live, &prune(true));
    let deleted: Vec<(String, bool)> = ["old", "old.dlx", "old.retry"].iter().map(|n| (n.to_string(), true)).collect();
    assert_eq!(exchanges(&pruned), deleted);
    // Still recorded while the deletions are only planned (a run stopped before them leaves the
    // exchanges claimed); once the broker has deleted them, the topology leaves the record.
    let record =
        pruned.steps.iter().find_map(|s| if let Step::Record { record, .. } = s { Some(record) } else { None });
    assert!(record.is_none_or(|r| r.topologies.contains_key("old")), "{record:#?}");
    assert!(pruned.records.iter().any(|r| r.topologies.contains_key("old")), "{:#?}", pruned.records);
    let exchanges: rustc_hash::FxHashSet<&crate::model::ExchangeName> = pruned
        .steps
        .iter()
        .filter_map(|s| if let Step::DeleteExchange { exchange } = s { Some(exchange) } else { None })
        .collect();
    let after: Vec<_> = pruned
        .records
        .iter()
        .filter_map(|r| super::ownership::without(r, &rustc_hash::FxHashSet::default(), &exchanges))
        .collect();
    assert!(
        !after.is_empty() && after.iter().all(|r| !r.topologies.contains_key("old")),
        "leaves the record: {after:#?}"
    );
    let deletes = super::phases(&pruned).removals.concat();
    assert!(
        pruned.steps.iter().enumerate().all(|(i, s)| !matches!(s, Step::DeleteExchange { .. }) || deletes.contains(&i))
    );

    // An audit queue someone bound to the old main exchange: its binding is not hopper's to
    // remove, and the exchange stays for it.
    live.bindings.as_mut().unwrap().insert(Binding::to_queue("old", "audit", "#"));
    let audited = plan("/", &[&orders[0]], &live, &prune(true));
    assert!(audited.steps.iter().any(|s| matches!(s,
        Step::KeptExchange { exchange, kept_because: Kept::Routes { bindings: 1 } } if exchange == "old")));
}

/// Two topologies share a main exchange and one renames its exchange and queue: the shared one
/// is still declared (the other's), yet it is this one's earlier exchange, and its publishers
/// keep a route into the new queue before the old intake goes.
#[test]
fn a_shared_earlier_main_exchange_is_bound_into_the_renamed_queue_first() {
    let shared = "[topology.a]\nexchange = \"payments\"\nrouting_keys = [\"a\"]\ndelays = [\"5s\"]\n\n[topology.b]\nexchange = \"payments\"\nrouting_keys = [\"b\"]\ndelays = [\"5s\"]\n";
    let before = compiled(shared);
    let mut live = live_from(&before.iter().flat_map(|c| c.objects.clone()).collect::<Vec<_>>());
    live.records = crate::live::Records::Read(super::ownership::records("/", &before.iter().collect::<Vec<_>>()));
    let after =
        compiled(&shared.replacen("exchange = \"payments\"", "exchange = \"payments-v2\"\nqueue = \"a-v2\"", 1));
    let p = plan("/", &after.iter().collect::<Vec<_>>(), &live, &prune(false));
    let repointed = Binding::to_queue("payments", "a-v2", "a");
    let created =
        p.steps.iter().position(|s| matches!(s, Step::Create { object: Object::Binding(b) } if *b == repointed));
    assert!(created.is_some(), "{:#?}", p.steps);
    assert!(
        p.steps
            .iter()
            .any(|s| matches!(s, Step::Unbind { binding } if *binding == Binding::to_queue("payments", "a", "a")))
    );
    assert!(super::phases(&p).of(Phase::EntryBindings).contains(&created.unwrap()), "bound with the entry bindings");
}
