//! `hopper diff` on a real broker, one drift class per test: each is made by hand the way an
//! operator would, then diff must name it (read from `--format json`), with exit 1; and an
//! untouched vhost exits 0 quietly. Two tests read the table a person reads.

use std::time::Duration;

use lapin::options::QueueDeleteOptions;
use lapin::types::FieldTable;
use serde_json::{Value, json};

use crate::support::{self, Arg::*, Broker, Vhost, args, on_every_broker};

const ORDERS: &str = "[topology.orders]\nexchange_type = \"topic\"\nrouting_keys = [\"order.*\"]\ndelays = [\"1s\", \"5s\"]\nmax_attempts = 3\n";

/// A vhost with ORDERS applied, and the spec's path.
async fn applied(broker: Broker, test: &str) -> (Vhost, String) {
    let vhost = Vhost::new(broker, test).await;
    let spec = vhost.spec("orders.toml", ORDERS).to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    (vhost, spec)
}

/// `diff --format json`: (exit code, the report).
fn diff(vhost: &Vhost, spec: &str) -> (Option<i32>, Value) {
    vhost.json(&["diff", spec])
}

/// The entry of a binding to a queue, as diff identifies it: by all of it.
fn binding(status: &str, source: &str, queue: &str, key: &str) -> Value {
    json!({
        "status": status, "kind": "binding",
        "source": source, "destination_type": "queue", "destination": queue, "routing_key": key
    })
}

async fn policy(vhost: &Vhost, operator: bool, name: &str, pattern: &str, definition: Value) {
    support::declare_policy(vhost.broker, &vhost.name, operator, name, pattern, definition).await;
}

/// In sync: exit 0, every object compared, and a person reads one line.
async fn in_sync_is_quiet(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-in-sync").await;
    let (code, report) = diff(&vhost, &spec);
    assert_eq!(code, Some(0));
    assert_eq!(report["in_sync"], true);
    assert_eq!(report["summary"], json!({"in_sync": 12}));
    let out = vhost.hopper(&["diff", &spec]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = support::text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "no noise: {stdout}");
    assert!(stdout.contains("In sync") && stdout.contains("12 objects"), "{stdout}");
}

async fn binding_deleted_by_hand(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-binding").await;
    let channel = vhost.connect().await.create_channel().await.unwrap();
    channel
        .queue_unbind("orders.wait-5s".into(), "orders.retry".into(), "2".into(), FieldTable::default())
        .await
        .unwrap();
    let (code, report) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    assert_eq!(report["in_sync"], false);
    assert_eq!(report["summary"], json!({"in_sync": 11, "missing": 1}));
    let missing = support::one(support::objects(&report), &json!({"status": "missing"}));
    assert_eq!(*missing, binding("missing", "orders.retry", "orders.wait-5s", "2"));
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    assert_eq!(diff(&vhost, &spec).0, Some(0), "apply repaired it");
}

async fn queue_deleted_by_hand(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-queue").await;
    let channel = vhost.connect().await.create_channel().await.unwrap();
    channel.queue_delete("orders.wait-1s".into(), QueueDeleteOptions::default()).await.unwrap();
    let (code, report) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    assert_eq!(report["summary"], json!({"in_sync": 10, "missing": 2}));
    let objects = support::objects(&report);
    support::one(objects, &json!({"status": "missing", "kind": "queue", "name": "orders.wait-1s"}));
    // Its binding went with it.
    support::one(objects, &binding("missing", "orders.retry", "orders.wait-1s", "1"));
}

/// A wait queue recreated by hand with another TTL: a conflict, with both values, and ways out
/// that are sound for a wait queue (its delay is part of its name, so no spec edit matches).
/// The table a person reads says the same.
async fn queue_recreated_with_another_ttl(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-ttl").await;
    let channel = vhost.connect().await.create_channel().await.unwrap();
    channel.queue_delete("orders.wait-5s".into(), QueueDeleteOptions::default()).await.unwrap();
    let by_hand = args(&[
        ("x-queue-type", Str("quorum")),
        ("x-message-ttl", Int(60000)),
        ("x-dead-letter-exchange", Str("orders.retry")),
        ("x-dead-letter-routing-key", Str("orders")),
        ("x-dead-letter-strategy", Str("at-least-once")),
        ("x-overflow", Str("reject-publish")),
    ]);
    support::queue(&channel, "orders.wait-5s", by_hand).await;
    let (code, report) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    assert_eq!(report["summary"], json!({"in_sync": 10, "missing": 1, "conflict": 1}));
    let objects = support::objects(&report);
    let conflict = support::one(objects, &json!({"status": "conflict"}));
    assert!(support::matches(conflict, &json!({"kind": "queue", "name": "orders.wait-5s"})), "{conflict:#}");
    assert_eq!(conflict["differences"], json!([{"argument": "x-message-ttl", "live": 60000, "spec": 5000}]));
    let ways_out = &conflict["ways_out"];
    support::none(ways_out, &json!({"spec": {}}));
    let recreate = format!("rabbitmqctl delete_queue -p {} -- orders.wait-5s", vhost.name);
    support::one(ways_out, &json!({"command": recreate}));
    // The binding was deleted with the queue: missing as well.
    support::one(objects, &binding("missing", "orders.retry", "orders.wait-5s", "2"));

    let out = vhost.hopper(&["diff", &spec]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = support::text(&out.stdout);
    let conflict =
        stdout.lines().find(|l| l.split_whitespace().any(|w| w == "conflict")).unwrap_or_else(|| panic!("{stdout}"));
    let words: Vec<&str> = conflict.split_whitespace().collect();
    assert!(words.contains(&"queue") && words.contains(&"orders.wait-5s"), "{stdout}");
    let ttl = stdout.lines().find(|l| l.contains("x-message-ttl")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(ttl.contains("broker has 60000") && ttl.contains("spec wants 5000"), "{ttl}");
    assert!(stdout.lines().any(|l| l.trim() == format!("$ {recreate}")), "the way out: {stdout}");
    assert!(stdout.lines().last().unwrap().contains("1 conflict"), "{stdout}");
}

async fn policy_overriding_the_dead_letter_exchange(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-policy").await;
    // The dead-letter queue is terminal in the spec; this policy makes it dead-letter onward.
    policy(&vhost, false, "park-elsewhere", "^orders\\.dlq$", json!({"dead-letter-exchange": "elsewhere"})).await;
    // On the main queue the argument wins: RabbitMQ ignores this policy's DLX there.
    policy(&vhost, false, "main-dlx", "^orders$", json!({"dead-letter-exchange": "ignored"})).await;
    let (code, report) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    assert_eq!(report["summary"], json!({"in_sync": 12, "overridden": 1}));
    let overridden = support::one(support::objects(&report), &json!({"status": "overridden"}));
    assert_eq!(
        *overridden,
        json!({
            "status": "overridden", "kind": "queue", "name": "orders.dlq", "setting": "dead-letter-exchange",
            "effective": "elsewhere", "set_by": "policy", "policy": "park-elsewhere"
        }),
        "the spec does not set it: no `spec`"
    );
    support::none(support::objects(&report), &json!({"policy": "main-dlx"}));
}

async fn operator_policy_lowering_a_ttl(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-operator").await;
    policy(&vhost, true, "cap-ttl", "^orders\\.wait-", json!({"message-ttl": 2000})).await;
    let (code, report) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    let overridden = support::all(support::objects(&report), &json!({"status": "overridden"}));
    // A longer operator TTL does not override 1s.
    assert_eq!(
        overridden,
        [&json!({
            "status": "overridden", "kind": "queue", "name": "orders.wait-5s", "setting": "message-ttl",
            "spec": 5000, "effective": 2000, "set_by": "operator_policy", "policy": "cap-ttl"
        })]
    );
    // apply warns about it too: it cannot fix a policy.
    let (code, report) = vhost.json(&["apply", &spec]);
    assert_eq!(code, Some(0));
    assert_eq!(
        report["vhosts"][0]["overrides"],
        json!([{
            "queue": "orders.wait-5s", "setting": "message-ttl", "spec": 5000, "effective": 2000,
            "set_by": "operator_policy", "policy": "cap-ttl"
        }])
    );
}

/// An old wait queue with messages is extra, kept by `apply --prune` until it has drained.
async fn extra_wait_queue_after_a_delay_change(broker: Broker) {
    // A long first wait, so that the messages are still waiting while diff and apply look,
    // however loaded the machine.
    let vhost = Vhost::new(broker, "diff-extra").await;
    let first = vhost.spec("orders.toml", &ORDERS.replace("5s", "15s")).to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &first]).status.code(), Some(0));
    let admin = vhost.connect().await;
    support::publish(&admin, "", "orders.wait-15s", &["a".to_string(), "b".to_string()]).await;
    support::wait_for_count(&admin, "orders.wait-15s", 2, Duration::from_secs(5)).await;
    let spec = vhost.spec("orders.toml", &ORDERS.replace("5s", "7s")).to_str().unwrap().to_string();
    // Counts come exactly over AMQP, or from the management API, whose statistics lag by
    // seconds when the AMQP connection does not answer in time (a loaded CI machine).
    let start = std::time::Instant::now();
    let (code, report) = loop {
        let (code, report) = diff(&vhost, &spec);
        let counted = support::objects(&report)
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["status"] == "extra" && o["kind"] == "queue" && o["messages"] == 2);
        if counted || start.elapsed() > Duration::from_secs(20) {
            break (code, report);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(code, Some(1));
    let objects = support::objects(&report);
    support::one(objects, &json!({"status": "missing", "kind": "queue", "name": "orders.wait-7s"}));
    support::one(objects, &binding("missing", "orders.retry", "orders.wait-7s", "2"));
    support::one(objects, &binding("extra", "orders.retry", "orders.wait-15s", "2"));
    let extra = support::one(objects, &json!({"status": "extra", "kind": "queue"}));
    assert_eq!(
        *extra,
        json!({
            "status": "extra", "kind": "queue", "name": "orders.wait-15s",
            "messages": 2, "consumers": 0, "drains_into": "orders"
        })
    );

    let (code, report) = vhost.json(&["apply", "--prune", &spec]);
    assert_eq!(code, Some(0));
    let kept = support::one(support::steps(&report), &json!({"action": "extra", "queue": "orders.wait-15s"}));
    assert_eq!(kept["messages"], 2);
    assert!(kept["kept_because"].as_str().unwrap().contains("holds 2 message(s)"), "{kept:#}");
    support::none(support::steps(&report), &json!({"action": "delete"}));
    let (_, report) = diff(&vhost, &spec);
    support::one(support::objects(&report), &json!({"status": "extra", "name": "orders.wait-15s", "messages": 2}));
    // Drained into the main queue by its TTL; then pruned, and the vhost is in sync.
    // (A quorum at-least-once dead letter leaves the wait queue's ready count before the main
    // queue confirms it: wait for it to arrive rather than expecting it at once.)
    support::wait_for_count(&admin, "orders.wait-15s", 0, Duration::from_secs(40)).await;
    support::wait_for_count(&admin, "orders", 2, Duration::from_secs(10)).await;
    let start = std::time::Instant::now();
    while support::count(&admin, "orders.wait-15s").await.is_some() {
        assert!(start.elapsed() < Duration::from_secs(30), "never pruned");
        vhost.hopper(&["apply", "--prune", &spec]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(diff(&vhost, &spec).0, Some(0));
}

/// The JSON a program reads: every entry has a status and a kind, a queue or an exchange a
/// name, a binding its source, destination and routing key; values keep their JSON types.
async fn json_schema(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-json").await;
    policy(&vhost, true, "cap-ttl", "^orders\\.wait-5s$", json!({"message-ttl": 2000})).await;
    let channel = vhost.connect().await.create_channel().await.unwrap();
    channel.queue_unbind("orders".into(), "orders".into(), "order.*".into(), FieldTable::default()).await.unwrap();
    let (code, v) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    assert_eq!(v["in_sync"], false);
    assert_eq!(v["summary"], json!({"in_sync": 11, "missing": 1, "overridden": 1}));
    assert_eq!(v["vhosts"].as_array().unwrap().len(), 1);
    assert_eq!(v["vhosts"][0]["vhost"], vhost.name.as_str());
    let objects = support::objects(&v).as_array().unwrap();
    assert_eq!(objects.len(), 13);
    for o in objects {
        let status = o["status"].as_str().unwrap();
        assert!(["in_sync", "missing", "conflict", "extra", "overridden"].contains(&status), "{o}");
        match o["kind"].as_str().unwrap() {
            "queue" | "exchange" => assert!(o["name"].is_string(), "{o}"),
            "binding" => {
                assert!(o.get("name").is_none(), "{o}");
                assert!(o["source"].is_string() && o["destination"].is_string() && o["routing_key"].is_string(), "{o}");
                assert!(["queue", "exchange"].contains(&o["destination_type"].as_str().unwrap()), "{o}");
            }
            other => panic!("kind {other}: {o}"),
        }
    }
    let missing = support::one(support::objects(&v), &json!({"status": "missing"}));
    assert_eq!(*missing, binding("missing", "orders", "orders", "order.*"));
    let over = support::one(support::objects(&v), &json!({"status": "overridden"}));
    assert_eq!(
        *over,
        json!({
            "status": "overridden", "kind": "queue", "name": "orders.wait-5s", "setting": "message-ttl",
            "spec": 5000, "effective": 2000, "set_by": "operator_policy", "policy": "cap-ttl"
        })
    );
}

/// Without the management API, diff says what it needs and exits 2.
async fn without_the_management_api_diff_exits_2(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-no-api").await;
    let out = vhost.hopper(&["diff", "--management-url", "http://127.0.0.1:1/api", &spec]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = support::text(&out.stderr);
    assert!(stderr.contains("hopper diff reads the broker through the management API and cannot"), "{stderr}");
    assert!(stderr.contains("rabbitmq-plugins enable rabbitmq_management"), "{stderr}");
}

on_every_broker!(
    in_sync_is_quiet,
    binding_deleted_by_hand,
    queue_deleted_by_hand,
    queue_recreated_with_another_ttl,
    policy_overriding_the_dead_letter_exchange,
    operator_policy_lowering_a_ttl,
    extra_wait_queue_after_a_delay_change,
    json_schema,
    without_the_management_api_diff_exits_2,
);
