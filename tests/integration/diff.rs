//! `hopper diff` on a real broker, one drift class per test: each is made by hand the way an
//! operator would, then diff must name it, with exit 1; and an untouched vhost exits 0 quietly.

use std::time::Duration;

use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use rabbitmq_http_client::commons::PolicyTarget;
use rabbitmq_http_client::requests::PolicyParams;

use crate::support::{self, Broker, RABBITMQ_3, RABBITMQ_4, Vhost};

const ORDERS: &str = "[topology.orders]\nexchange_type = \"topic\"\nrouting_keys = [\"order.*\"]\ndelays = [\"1s\", \"5s\"]\nmax_attempts = 3\n";

/// A vhost with ORDERS applied, and the spec's path.
async fn applied(broker: Broker, test: &str) -> (Vhost, String) {
    let vhost = Vhost::new(broker, test).await;
    let spec = vhost.spec("orders.toml", ORDERS).to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    (vhost, spec)
}

fn diff(vhost: &Vhost, spec: &str) -> (Option<i32>, String) {
    let out = vhost.hopper(&["diff", spec]);
    (out.status.code(), support::text(&out.stdout))
}

async fn policy(vhost: &Vhost, operator: bool, name: &str, pattern: &str, definition: serde_json::Value) {
    let params = PolicyParams {
        vhost: &vhost.name,
        name,
        pattern,
        apply_to: PolicyTarget::Queues,
        priority: 10,
        definition: definition.as_object().unwrap().clone(),
    };
    let api = hopper::broker::http::client(&support::endpoint(vhost.broker));
    if operator { api.declare_operator_policy(&params).await } else { api.declare_policy(&params).await }.unwrap();
}

async fn in_sync_is_quiet(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-in-sync").await;
    let (code, stdout) = diff(&vhost, &spec);
    assert_eq!(code, Some(0));
    assert_eq!(stdout.trim(), "In sync: the broker matches the spec (11 objects compared).", "no noise");
}

async fn binding_deleted_by_hand(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-binding").await;
    let channel = vhost.connect().await.create_channel().await.unwrap();
    channel
        .queue_unbind("orders.wait-5s".into(), "orders.retry".into(), "2".into(), FieldTable::default())
        .await
        .unwrap();
    let (code, stdout) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    assert!(
        stdout.contains("+ missing     binding  orders.retry -> orders.wait-5s (\"2\")  (apply creates it)"),
        "{stdout}"
    );
    assert!(stdout.contains("Drift: 1 in sync, 1 missing") || stdout.contains("1 missing"), "{stdout}");
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    assert_eq!(diff(&vhost, &spec).0, Some(0), "apply repaired it");
}

async fn queue_deleted_by_hand(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-queue").await;
    let channel = vhost.connect().await.create_channel().await.unwrap();
    channel.queue_delete("orders.wait-1s".into(), QueueDeleteOptions::default()).await.unwrap();
    let (code, stdout) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    assert!(stdout.contains("+ missing     queue    orders.wait-1s"), "{stdout}");
    assert!(
        stdout.contains("+ missing     binding  orders.retry -> orders.wait-1s (\"1\")"),
        "its binding went with it: {stdout}"
    );
}

async fn queue_recreated_with_another_ttl(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-ttl").await;
    let channel = vhost.connect().await.create_channel().await.unwrap();
    channel.queue_delete("orders.wait-5s".into(), QueueDeleteOptions::default()).await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(60000));
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString("orders".into()));
    args.insert("x-dead-letter-strategy".into(), AMQPValue::LongString("at-least-once".into()));
    args.insert("x-overflow".into(), AMQPValue::LongString("reject-publish".into()));
    channel
        .queue_declare("orders.wait-5s".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    let (code, stdout) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    assert!(stdout.contains("! conflict    queue    orders.wait-5s"), "{stdout}");
    assert!(stdout.contains("x-message-ttl: the broker has 60000, the spec wants 5000"), "{stdout}");
    // The binding was deleted with the queue: missing as well.
    assert!(stdout.contains("+ missing     binding  orders.retry -> orders.wait-5s (\"2\")"), "{stdout}");
}

async fn policy_overriding_the_dead_letter_exchange(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-policy").await;
    // The dead-letter queue is terminal in the spec; this policy makes it dead-letter onward.
    policy(&vhost, false, "park-elsewhere", "^orders\\.dlq$", serde_json::json!({"dead-letter-exchange": "elsewhere"}))
        .await;
    // On the main queue the argument wins: RabbitMQ ignores this policy's DLX there.
    policy(&vhost, false, "main-dlx", "^orders$", serde_json::json!({"dead-letter-exchange": "ignored"})).await;
    let (code, stdout) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    assert!(
        stdout.contains(
            "~ overridden  queue    orders.dlq  dead-letter-exchange: the spec says (not set), policy `park-elsewhere` makes it \"elsewhere\""
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("main-dlx"), "an argument outranks a policy's DLX: {stdout}");
}

async fn operator_policy_lowering_a_ttl(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-operator").await;
    policy(&vhost, true, "cap-ttl", "^orders\\.wait-", serde_json::json!({"message-ttl": 2000})).await;
    let (code, stdout) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    assert!(
        stdout.contains("~ overridden  queue    orders.wait-5s  message-ttl: the spec says 5000, operator policy `cap-ttl` makes it 2000"),
        "{stdout}"
    );
    assert!(!stdout.contains("orders.wait-1s"), "a longer operator TTL does not override 1s: {stdout}");
    // apply warns about it too: it cannot fix a policy.
    let out = support::text(&vhost.hopper(&["apply", &spec]).stdout);
    assert!(out.contains("operator policy `cap-ttl` makes it 2000; apply cannot change a policy"), "{out}");
}

/// An old wait queue with messages is extra, kept by `apply --prune` until it has drained.
async fn extra_wait_queue_after_a_delay_change(broker: Broker) {
    let (vhost, _) = applied(broker, "diff-extra").await;
    let admin = vhost.connect().await;
    let channel = admin.create_channel().await.unwrap();
    for _ in 0..2 {
        let properties = BasicProperties::default().with_delivery_mode(2);
        channel
            .basic_publish("".into(), "orders.wait-5s".into(), BasicPublishOptions::default(), b"x", properties)
            .await
            .unwrap();
    }
    support::wait_for_count(&admin, "orders.wait-5s", 2, Duration::from_secs(5)).await;
    let spec = vhost.spec("orders.toml", &ORDERS.replace("5s", "7s")).to_str().unwrap().to_string();
    let (code, stdout) = diff(&vhost, &spec);
    assert_eq!(code, Some(1));
    assert!(stdout.contains("+ missing     queue    orders.wait-7s"), "{stdout}");
    assert!(
        stdout.contains("- extra       binding  orders.retry -> orders.wait-5s (\"2\")  (apply removes it)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("- extra       queue    orders.wait-5s  (2 message(s), 0 consumer(s), drains into orders;"),
        "{stdout}"
    );
    let out = support::text(&vhost.hopper(&["apply", "--prune", &spec]).stdout);
    assert!(out.contains("kept: it holds 2 message(s)"), "{out}");
    let (_, stdout) = diff(&vhost, &spec);
    assert!(stdout.contains("- extra       queue    orders.wait-5s  (2 message(s)"), "still there: {stdout}");
    // Drained into the main queue by its TTL; then pruned, and the vhost is in sync.
    // (A quorum at-least-once dead letter leaves the wait queue's ready count before the main
    // queue confirms it: wait for it to arrive rather than expecting it at once.)
    support::wait_for_count(&admin, "orders.wait-5s", 0, Duration::from_secs(20)).await;
    support::wait_for_count(&admin, "orders", 2, Duration::from_secs(10)).await;
    let start = std::time::Instant::now();
    while support::count(&admin, "orders.wait-5s").await.is_some() {
        assert!(start.elapsed() < Duration::from_secs(30), "never pruned");
        vhost.hopper(&["apply", "--prune", &spec]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(diff(&vhost, &spec).0, Some(0));
}

/// The JSON schema documented in the README.
async fn json_schema(broker: Broker) {
    let (vhost, spec) = applied(broker, "diff-json").await;
    policy(&vhost, true, "cap-ttl", "^orders\\.wait-5s$", serde_json::json!({"message-ttl": 2000})).await;
    let channel = vhost.connect().await.create_channel().await.unwrap();
    channel.queue_unbind("orders".into(), "orders".into(), "order.*".into(), FieldTable::default()).await.unwrap();
    let out = vhost.hopper(&["diff", "--format", "json", &spec]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["in_sync"], false);
    assert_eq!(v["summary"], serde_json::json!({"in_sync": 10, "missing": 1, "overridden": 1}));
    let vh = &v["vhosts"][0];
    assert_eq!(vh["vhost"], vhost.name.as_str());
    let objects = vh["objects"].as_array().unwrap();
    assert!(objects.iter().all(|o| o["status"].is_string() && o["kind"].is_string() && o["name"].is_string()));
    let missing = objects.iter().find(|o| o["status"] == "missing").unwrap();
    assert_eq!(missing["kind"], "binding");
    assert_eq!(missing["name"], "orders -> orders (\"order.*\")");
    let over = objects.iter().find(|o| o["status"] == "overridden").unwrap();
    assert_eq!(
        *over,
        serde_json::json!({
            "status": "overridden", "kind": "queue", "name": "orders.wait-5s", "key": "message-ttl",
            "spec": "5000", "effective": "2000", "source": "operator_policy", "policy": "cap-ttl"
        })
    );
}

/// Without the management API, diff says what it needs and exits 2.
#[tokio::test]
async fn without_the_management_api_diff_exits_2() {
    let (vhost, spec) = applied(RABBITMQ_3, "diff-no-api").await;
    let out = vhost.hopper(&["diff", "--management-url", "http://127.0.0.1:1/api", &spec]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = support::text(&out.stderr);
    assert!(stderr.contains("hopper diff reads the broker through the management API and cannot"), "{stderr}");
    assert!(stderr.contains("rabbitmq-plugins enable rabbitmq_management"), "{stderr}");
}

macro_rules! on_both_brokers {
    ($($name:ident),* $(,)?) => {
        mod rabbitmq_3 { $(#[tokio::test] async fn $name() { super::$name(super::RABBITMQ_3).await; })* }
        mod rabbitmq_4 { $(#[tokio::test] async fn $name() { super::$name(super::RABBITMQ_4).await; })* }
    };
}

on_both_brokers!(
    in_sync_is_quiet,
    binding_deleted_by_hand,
    queue_deleted_by_hand,
    queue_recreated_with_another_ttl,
    policy_overriding_the_dead_letter_exchange,
    operator_policy_lowering_a_ttl,
    extra_wait_queue_after_a_delay_change,
    json_schema,
);
