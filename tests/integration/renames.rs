//! Renames on a real broker: a topology's main queue or dead-letter queue renamed in the spec is
//! a move. The new objects first, the intake bound to the new queue before it is unbound from the
//! old, the old wait queues left to hand back what they hold, every message moved into the new
//! path with confirms, each old queue deleted only once empty; and `diff` never in sync while an
//! old queue still holds or receives the topology's messages.

use serde_json::{Value, json};

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::{self, Broker, Publisher, Vhost, on_every_broker};

const ORDERS: &str = "owner = \"team-a\"\n[topology.orders]\ndelays = [\"1s\"]\nmax_attempts = 3\n";

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

async fn taken(connection: &lapin::Connection, queue: &str) -> Vec<String> {
    support::drain(connection, queue).await.iter().map(|m| support::message_id(&m.properties)).collect()
}

/// Runs `apply ARGS` until none of `queues` exists: a move takes a run per step it waits on.
/// Each run's report is kept.
async fn apply_until_gone(vhost: &Vhost, args: &[&str], queues: &[&str]) -> Vec<Value> {
    let connection = vhost.connect().await;
    let start = std::time::Instant::now();
    let mut reports = Vec::new();
    loop {
        let (code, report) = vhost.json(args);
        assert_eq!(code, Some(0), "{report:#}");
        reports.push(report);
        let mut left = Vec::new();
        for q in queues {
            if support::count(&connection, q).await.is_some() {
                left.push(*q);
            }
        }
        if left.is_empty() {
            return reports;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{left:?} still there after 90 s of runs: {:#}",
            reports.last().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The case: `queue = "orders-v2"`, with messages in the main, wait and dead-letter
/// queues and a publisher running throughout, and a consumer of the old contract that still
/// publishes a retry to the old retry exchange after the rename.
async fn a_renamed_main_queue_is_moved_under_a_running_publisher(broker: Broker) {
    let vhost = Vhost::new(broker, "rename-main").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", spec]).0, Some(0));
    let connection = vhost.connect().await;
    support::publish(&connection, "orders", "orders", &ids("main", 4)).await;
    support::publish(&connection, "orders.retry", "1", &ids("wait", 3)).await;
    support::publish(&connection, "orders.dlx", "orders.dlq", &ids("dead", 2)).await;
    let publisher = Publisher::start(vhost.amqp_url(), "orders", "orders", "live");
    support::wait_for_count_at_least(&connection, "orders", 6, Duration::from_secs(10)).await;

    vhost.spec("orders.toml", &ORDERS.replace("max_attempts", "queue = \"orders-v2\"\nmax_attempts"));
    let (code, diff) = vhost.json(&["diff", "--detailed-exitcode", spec]);
    assert_eq!(code, Some(2), "the old names hold the topology's messages: {diff:#}");
    for queue in ["orders", "orders.wait-1s", "orders.dlq"] {
        support::one(support::objects(&diff), &json!({"status": "extra", "kind": "queue", "name": queue}));
    }

    // The first run moves the intake: bound to the new queue first, then unbound from the old.
    let (code, first) = vhost.json(&["apply", "--migrate", "--prune", spec]);
    assert_eq!(code, Some(0), "{first:#}");
    let steps = support::steps(&first);
    support::one(
        steps,
        &json!({"action": "create", "object": {"object": "binding", "source": "orders", "destination": "orders-v2"}}),
    );
    support::one(steps, &json!({"action": "unbind", "binding": {"source": "orders", "destination": "orders"}}));
    let kept = support::one(steps, &json!({"action": "extra", "queue": "orders.wait-1s"}));
    assert!(kept["kept_because"].as_str().unwrap().contains("old contract"), "{kept:#}");
    // A consumer not yet upgraded still retries through the old retry exchange: routed, not
    // returned.
    support::publish(&connection, "orders.retry", "1", &ids("old-contract", 2)).await;
    let (code, diff) = vhost.json(&["diff", "--detailed-exitcode", spec]);
    assert_eq!(code, Some(2), "still moving: {diff:#}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (live, unrouted) = publisher.stop();
    assert!(unrouted.is_empty(), "the publisher's messages were routed throughout: {unrouted:?}");
    assert!(live.len() > 6, "the publisher ran through the rename: {}", live.len());

    // Then every consumer runs the new contract; runs go on until the old queues are gone.
    let reports = apply_until_gone(
        &vhost,
        &["apply", "--migrate", "--prune", "--consumers-upgraded", spec],
        &["orders", "orders.wait-1s", "orders.dlq"],
    )
    .await;
    let moved: Vec<&Value> =
        reports.iter().flat_map(|r| support::all(support::steps(r), &json!({"action": "move_messages"}))).collect();
    assert!(moved.iter().any(|m| m["from"] == "orders" && m["to"] == "orders-v2"), "{moved:#?}");
    assert!(moved.iter().any(|m| m["from"] == "orders.dlq" && m["to"] == "orders-v2.dlq"), "{moved:#?}");

    let got = taken(&connection, "orders-v2").await;
    let unique: BTreeSet<&String> = got.iter().collect();
    let want: BTreeSet<String> =
        [ids("main", 4), ids("wait", 3), ids("old-contract", 2), live.clone()].concat().into_iter().collect();
    let missing: Vec<&String> = want.iter().filter(|id| !unique.contains(id)).collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
    assert!(unique.iter().all(|id| want.contains(*id)), "only the topology's messages: {unique:?}");
    // Between the new binding and the old one's removal, a published message is routed to both
    // queues: a duplicate for each message published in that instant, no more.
    let duplicates = got.len() - unique.len();
    eprintln!("rename under a publisher: {} published, {duplicates} duplicate(s)", live.len());
    assert!(duplicates <= 5, "duplicates bounded by the instant both bindings exist: {duplicates}");
    let mut dead = taken(&connection, "orders-v2.dlq").await;
    dead.sort();
    assert_eq!(dead, ids("dead", 2), "the dead letters, moved to the new dead-letter queue");
    assert_eq!(vhost.json(&["diff", "--detailed-exitcode", spec]).0, Some(0), "in sync once moved");
}

/// `dead_letter_queue` renamed, then `apply --migrate`: the parked messages follow it, and
/// `diff` is not in sync while the old dead-letter queue holds any.
async fn a_renamed_dead_letter_queue_takes_its_parked_messages_along(broker: Broker) {
    let vhost = Vhost::new(broker, "rename-dlq").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", spec]).0, Some(0));
    let connection = vhost.connect().await;
    support::publish(&connection, "orders.dlx", "orders.dlq", &ids("parked", 6)).await;

    vhost.spec("orders.toml", &ORDERS.replace("max_attempts", "dead_letter_queue = \"orders.parked\"\nmax_attempts"));
    let (code, diff) = vhost.json(&["diff", "--detailed-exitcode", spec]);
    assert_eq!(code, Some(2), "{diff:#}");
    support::one(support::objects(&diff), &json!({"status": "extra", "kind": "queue", "name": "orders.dlq"}));
    let (code, report) = vhost.json(&["apply", "--migrate", spec]);
    assert_eq!(code, Some(0), "{report:#}");
    // The main queue is migrated to dead-letter into the new one in this run; until it has
    // been, it still dead-letters into the old.
    let kept = support::one(support::steps(&report), &json!({"action": "extra", "queue": "orders.dlq", "messages": 6}));
    assert!(kept["kept_because"].as_str().unwrap().contains("`orders` still dead-letters into it"), "{kept:#}");
    let (code, report) = vhost.json(&["apply", "--migrate", spec]);
    assert_eq!(code, Some(0), "{report:#}");
    let kept = support::one(support::steps(&report), &json!({"action": "extra", "queue": "orders.dlq", "messages": 6}));
    assert!(kept["kept_because"].as_str().unwrap().contains("now uses `orders.parked`"), "{kept:#}");
    assert_eq!(vhost.json(&["diff", "--detailed-exitcode", spec]).0, Some(2), "six messages still parked there");

    apply_until_gone(&vhost, &["apply", "--migrate", "--prune", spec], &["orders.dlq"]).await;
    let mut parked = taken(&connection, "orders.parked").await;
    parked.sort();
    let mut want = ids("parked", 6);
    want.sort();
    assert_eq!(parked, want);
    assert_eq!(vhost.json(&["diff", "--detailed-exitcode", spec]).0, Some(0));
}

on_every_broker!(
    a_renamed_main_queue_is_moved_under_a_running_publisher,
    a_renamed_dead_letter_queue_takes_its_parked_messages_along,
);
