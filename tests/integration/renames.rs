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

/// The main exchange and the main queue renamed in one spec, with a publisher still on the old
/// exchange throughout: the old exchange is bound into the new queue before its binding into the
/// old one goes, and kept so until `--prune`, which then removes it with the earlier retry and
/// dead-letter exchanges once nothing uses them.
async fn a_renamed_main_exchange_and_queue_keep_the_old_exchange_routed(broker: Broker) {
    let vhost = Vhost::new(broker, "rename-exchange").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", spec]).0, Some(0));
    let connection = vhost.connect().await;
    support::publish(&connection, "orders", "orders", &ids("main", 4)).await;
    support::publish(&connection, "orders.dlx", "orders.dlq", &ids("dead", 2)).await;
    let publisher = Publisher::start(vhost.amqp_url(), "orders", "orders", "old-exchange");
    support::wait_for_count_at_least(&connection, "orders", 6, Duration::from_secs(10)).await;

    let renamed = "exchange = \"orders-in\"\nqueue = \"orders-v2\"\nmax_attempts";
    vhost.spec("orders.toml", &ORDERS.replace("max_attempts", renamed));
    let (code, first) = vhost.json(&["apply", "--migrate", spec]);
    assert_eq!(code, Some(0), "{first:#}");
    let steps = support::steps(&first);
    for source in ["orders", "orders-in"] {
        support::one(
            steps,
            &json!({"action": "create", "object": {"object": "binding", "source": source, "destination": "orders-v2"}}),
        );
    }
    support::one(steps, &json!({"action": "unbind", "binding": {"source": "orders", "destination": "orders"}}));
    let (code, second) = vhost.json(&["apply", "--migrate", spec]);
    assert_eq!(code, Some(0), "{second:#}");
    support::one(
        support::steps(&second),
        &json!({"action": "kept_binding", "binding": {"source": "orders", "destination": "orders-v2"}}),
    );
    assert_eq!(vhost.json(&["diff", "--detailed-exitcode", spec]).0, Some(2), "the old exchange still routes");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (live, unrouted) = publisher.stop();
    assert!(unrouted.is_empty(), "the old exchange routed throughout: {unrouted:?}");
    assert!(live.len() > 6, "the publisher ran through the rename: {}", live.len());

    // The publishers have moved: --prune takes the old exchanges away once nothing uses them.
    apply_until_gone(
        &vhost,
        &["apply", "--migrate", "--prune", "--consumers-upgraded", spec],
        &["orders", "orders.wait-1s", "orders.dlq"],
    )
    .await;
    let exchanges: Vec<String> = support::list(broker, "exchanges", &vhost.name)
        .await
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .filter(|name| name.starts_with("orders"))
        .collect();
    assert_eq!(exchanges, ["orders-in", "orders-v2.dlx", "orders-v2.retry"], "the earlier exchanges deleted");
    let got: BTreeSet<String> = taken(&connection, "orders-v2").await.into_iter().collect();
    let want: BTreeSet<String> = [ids("main", 4), live].concat().into_iter().collect();
    let lost: Vec<&String> = want.difference(&got).collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    let dead: BTreeSet<String> = taken(&connection, "orders-v2.dlq").await.into_iter().collect();
    assert_eq!(dead, ids("dead", 2).into_iter().collect::<BTreeSet<_>>());
    assert_eq!(vhost.json(&["diff", "--detailed-exitcode", spec]).0, Some(0), "in sync once moved");
}

/// Only `retry_exchange` renamed, with a consumer on the old contract publishing retries to the
/// old one throughout: its keys stay routed until `--consumers-upgraded`, and every retry comes
/// back to the main queue; then `--prune` deletes the old exchange, and the vhost is in sync.
async fn a_renamed_retry_exchange_keeps_old_consumers_retrying(broker: Broker) {
    let vhost = Vhost::new(broker, "rename-retry").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", spec]).0, Some(0));
    let connection = vhost.connect().await;
    let old_contract = Publisher::start(vhost.amqp_url(), "orders.retry", "1", "old-contract");
    support::wait_for_count_at_least(&connection, "orders", 3, Duration::from_secs(10)).await;

    vhost.spec("orders.toml", &ORDERS.replace("max_attempts", "retry_exchange = \"orders.retry-v2\"\nmax_attempts"));
    for _ in 0..2 {
        let (code, report) = vhost.json(&["apply", "--migrate", "--prune", spec]);
        assert_eq!(code, Some(0), "{report:#}");
        support::none(
            support::steps(&report),
            &json!({"action": "unbind", "binding": {"source": "orders.retry", "routing_key": "1"}}),
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (retried, unrouted) = old_contract.stop();
    assert!(unrouted.is_empty(), "no retry returned to the old contract: {unrouted:?}");
    support::publish(&connection, "orders.retry-v2", "1", &ids("new-contract", 2)).await;

    let start = std::time::Instant::now();
    let old_exchange_gone = loop {
        let (code, report) = vhost.json(&["apply", "--migrate", "--prune", "--consumers-upgraded", spec]);
        assert_eq!(code, Some(0), "{report:#}");
        let exchanges = support::list(broker, "exchanges", &vhost.name).await;
        if exchanges.iter().all(|e| e["name"] != "orders.retry") || start.elapsed() > Duration::from_secs(60) {
            break exchanges.iter().all(|e| e["name"] != "orders.retry");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(old_exchange_gone, "the old retry exchange deleted once nothing uses it");
    support::wait_for_count(&connection, "orders.wait-1s", 0, Duration::from_secs(20)).await;
    let got: BTreeSet<String> = taken(&connection, "orders").await.into_iter().collect();
    let want: BTreeSet<String> = [retried, ids("new-contract", 2)].concat().into_iter().collect();
    let lost: Vec<&String> = want.difference(&got).collect();
    assert!(lost.is_empty(), "every retry back in the main queue; lost: {lost:?}");
    assert_eq!(vhost.json(&["diff", "--detailed-exitcode", spec]).0, Some(0), "in sync once moved");
}

/// `dead_letter_queue` renamed, then `apply --migrate`, with a publisher running: the parked
/// messages follow it, the published ones all reach the main queue, and `diff` is not in sync
/// while the old dead-letter queue holds any.
async fn a_renamed_dead_letter_queue_takes_its_parked_messages_along(broker: Broker) {
    let vhost = Vhost::new(broker, "rename-dlq").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", spec]).0, Some(0));
    let connection = vhost.connect().await;
    support::publish(&connection, "orders.dlx", "orders.dlq", &ids("parked", 6)).await;
    // Publishing to the main exchange throughout: the main queue is migrated under it.
    let publisher = Publisher::start(vhost.amqp_url(), "orders", "orders", "live");
    support::wait_for_count_at_least(&connection, "orders", 3, Duration::from_secs(10)).await;

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
    let (live, unrouted) = publisher.stop();
    assert!(unrouted.is_empty(), "routed throughout: {unrouted:?}");
    let got: BTreeSet<String> = taken(&connection, "orders").await.into_iter().collect();
    let lost: Vec<&String> = live.iter().filter(|id| !got.contains(*id)).collect();
    assert!(lost.is_empty() && live.len() > 3, "{} published, lost: {lost:?}", live.len());

    apply_until_gone(&vhost, &["apply", "--migrate", "--prune", spec], &["orders.dlq"]).await;
    let mut parked = taken(&connection, "orders.parked").await;
    parked.sort();
    let mut want = ids("parked", 6);
    want.sort();
    assert_eq!(parked, want);
    assert_eq!(vhost.json(&["diff", "--detailed-exitcode", spec]).0, Some(0));
}

/// Runs `hopper ARGS` (`--format json`) again and again, SIGKILLing the first `kills` runs that
/// are still going at a random moment, until `done`. Returns how many kills landed.
async fn killed_until(vhost: &Vhost, args: &[&str], kills: usize, done: impl AsyncFn() -> bool) -> usize {
    let mut rng = crate::spawned::Rng::from_clock();
    let (mut landed, mut runs) = (0, 0);
    // Bounded in time, not runs: each run takes the next step the broker's counts allow, and
    // the management API's counts lag by its stats interval (5 s on 3.10), more under load.
    let start = std::time::Instant::now();
    let mut args: Vec<&str> = args.to_vec();
    args.splice(0..0, ["--format", "json"]);
    loop {
        runs += 1;
        assert!(start.elapsed() < Duration::from_secs(240), "not done after {runs} runs in 240 s, {landed} killed");
        let child = crate::spawned::hopper_on(vhost.broker, &args);
        let deadline = (landed < kills).then(|| std::time::Instant::now() + Duration::from_millis(30 + rng.below(700)));
        match crate::spawned::kill_at(child, deadline).await {
            crate::spawned::End::Killed(_) => {
                landed += 1;
                eprintln!("killed run {runs}");
            }
            crate::spawned::End::Exited(out) => {
                assert_eq!(out.status.code(), Some(0), "{}{}", support::text(&out.stdout), support::text(&out.stderr));
                if landed >= kills && done().await {
                    return landed;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}

/// A rename whose runs are killed twice while they move messages: every message is in the new
/// path once the runs finish, none in a holding place, none lost.
async fn a_rename_killed_twice_mid_move_loses_nothing(broker: Broker) {
    let vhost = Vhost::new(broker, "rename-killed").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", spec]).0, Some(0));
    let connection = vhost.connect().await;
    let main = ids("main", 1500);
    support::publish(&connection, "orders", "orders", &main).await;
    support::publish(&connection, "orders.retry", "1", &ids("wait", 20)).await;
    support::publish(&connection, "orders.dlx", "orders.dlq", &ids("dead", 500)).await;
    vhost.spec("orders.toml", &ORDERS.replace("max_attempts", "queue = \"orders-v2\"\nmax_attempts"));
    let gone = async || {
        let mut gone = true;
        for q in ["orders", "orders.wait-1s", "orders.dlq"] {
            gone &= support::count(&connection, q).await.is_none();
        }
        gone
    };
    let kills = killed_until(&vhost, &["apply", "--migrate", "--prune", "--consumers-upgraded", spec], 2, gone).await;
    assert_eq!(kills, 2);
    let got = taken(&connection, "orders-v2").await;
    let unique: BTreeSet<&String> = got.iter().collect();
    let want: BTreeSet<String> = [main, ids("wait", 20)].concat().into_iter().collect();
    let lost: Vec<&String> = want.iter().filter(|id| !unique.contains(id)).collect();
    assert!(lost.is_empty(), "{} lost, such as {:?}", lost.len(), &lost[..lost.len().min(5)]);
    let dead: BTreeSet<String> = taken(&connection, "orders-v2.dlq").await.into_iter().collect();
    assert_eq!(dead, ids("dead", 500).into_iter().collect::<BTreeSet<_>>());
    eprintln!("rename killed twice: {} delivered, {} duplicate(s)", got.len(), got.len() - unique.len());
    assert_eq!(vhost.json(&["diff", "--detailed-exitcode", spec]).0, Some(0));
}

/// A retirement whose runs are killed twice: what the main, wait and dead-letter queues held is
/// all still there, in the queues that are kept, and the last run leaves only them.
async fn a_retirement_killed_twice_loses_nothing(broker: Broker) {
    let vhost = Vhost::new(broker, "retire-killed").await;
    let both = format!("{ORDERS}[topology.old]\ndelays = [\"1s\"]\nmax_attempts = 3\n");
    let spec = vhost.spec("a.toml", &both);
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", spec]).0, Some(0));
    let connection = vhost.connect().await;
    support::publish(&connection, "old", "old", &ids("main", 200)).await;
    support::publish(&connection, "old.retry", "1", &ids("wait", 50)).await;
    support::publish(&connection, "old.dlx", "old.dlq", &ids("dead", 50)).await;
    vhost.spec("a.toml", ORDERS);
    // Done once the wait queue has handed its messages back and gone.
    let done = async || support::count(&connection, "old.wait-1s").await.is_none();
    assert_eq!(killed_until(&vhost, &["apply", "--prune", spec], 2, done).await, 2);
    let main: BTreeSet<String> = taken(&connection, "old").await.into_iter().collect();
    assert_eq!(main, [ids("main", 200), ids("wait", 50)].concat().into_iter().collect::<BTreeSet<_>>());
    let dead: BTreeSet<String> = taken(&connection, "old.dlq").await.into_iter().collect();
    assert_eq!(dead, ids("dead", 50).into_iter().collect::<BTreeSet<_>>());
}

on_every_broker!(
    a_renamed_main_queue_is_moved_under_a_running_publisher,
    a_renamed_main_exchange_and_queue_keep_the_old_exchange_routed,
    a_renamed_retry_exchange_keeps_old_consumers_retrying,
    a_renamed_dead_letter_queue_takes_its_parked_messages_along,
    a_rename_killed_twice_mid_move_loses_nothing,
    a_retirement_killed_twice_loses_nothing,
);
