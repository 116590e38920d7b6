//! Rule by rule, on a real broker: each test first builds the trap by hand and shows that
//! RabbitMQ really drops, duplicates or strands a message there, then that `hopper inspect`
//! reports it (read from `--format json`), with the rule, its queues and its exchanges. On every
//! broker of the matrix; differences between versions are noted where a test asserts them.

use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicRejectOptions, ExchangeBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};
use serde_json::{Value, json};

use crate::support::{
    self, Arg::*, Broker, Vhost, args, bind, bind_with, exchange, exchange_with, on_every_broker, queue,
};

/// A vhost of its own for one trap, with a connection and a channel in it.
async fn trap(broker: Broker, name: &str) -> (Vhost, lapin::Connection, Channel) {
    let vhost = Vhost::new(broker, name).await;
    let connection = vhost.connect().await;
    let channel = connection.create_channel().await.unwrap();
    (vhost, connection, channel)
}

/// `orders`, whose rejected messages dead-letter into `orders.dlq` through the default exchange.
async fn feeds_dead_letter_queue(channel: &Channel) {
    let to_dlq = args(&[("x-dead-letter-exchange", Str("")), ("x-dead-letter-routing-key", Str("orders.dlq"))]);
    queue(channel, "orders", to_dlq).await;
}

/// Takes one message from `queue` and rejects it without requeue: the broker dead-letters it.
async fn reject_one(channel: &Channel, queue: &str) {
    let start = std::time::Instant::now();
    loop {
        if let Some(m) = channel.basic_get(queue.into(), BasicGetOptions::default()).await.unwrap() {
            m.delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "nothing to reject in {queue}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sum of the messages in these queues, counted exactly.
async fn total(connection: &lapin::Connection, queues: &[&str]) -> u32 {
    let mut n = 0;
    for q in queues {
        n += support::count(connection, q).await.unwrap_or(0);
    }
    n
}

/// A finding as a test compares it: the rule's id and the objects it names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hazard {
    rule: String,
    queues: Vec<String>,
    exchanges: Vec<String>,
}

fn hazard(rule: &str, queues: &[&str], exchanges: &[&str]) -> Hazard {
    let strings = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
    Hazard { rule: rule.to_string(), queues: strings(queues), exchanges: strings(exchanges) }
}

/// Findings from JSON (`inspect`'s `hazards`, or `lint`'s list), each checked for the fields
/// every finding has.
fn hazards(findings: &Value) -> Vec<Hazard> {
    let names = |v: &Value| -> Vec<String> {
        v.as_array().map_or(Vec::new(), |a| a.iter().map(|n| n.as_str().unwrap().to_string()).collect())
    };
    findings
        .as_array()
        .unwrap_or_else(|| panic!("findings are a list: {findings:#}"))
        .iter()
        .map(|f| {
            assert!(["error", "warning"].contains(&f["severity"].as_str().unwrap()), "{f:#}");
            assert!(!f["message"].as_str().unwrap().is_empty() && !f["because"].as_str().unwrap().is_empty(), "{f:#}");
            assert!(f.get("objects").is_none(), "queues and exchanges, not objects: {f:#}");
            assert!(f.get("exchanges").is_none_or(|e| !e.as_array().unwrap().is_empty()), "absent when none: {f:#}");
            Hazard {
                rule: f["rule"].as_str().unwrap().to_string(),
                queues: names(&f["queues"]),
                exchanges: names(&f["exchanges"]),
            }
        })
        .collect()
}

/// `hopper inspect --format json` for the whole vhost: (exit code, its hazards).
#[track_caller]
fn inspect(vhost: &Vhost) -> (Option<i32>, Vec<Hazard>) {
    let (code, reports) = vhost.json(&["inspect", "--vhost", &vhost.name]);
    assert_eq!(reports["schema_version"], 1);
    assert_eq!(reports["vhosts"].as_array().map(Vec::len), Some(1), "one report for one vhost: {reports:#}");
    (code, hazards(&reports["vhosts"][0]["hazards"]))
}

/// Inspect exits 1 and reports exactly this finding (among others).
#[track_caller]
fn assert_reported(vhost: &Vhost, expected: Hazard) {
    let (code, hazards) = inspect(vhost);
    assert_eq!(code, Some(1), "inspect exits 1 when it finds a hazard: {hazards:#?}");
    assert!(hazards.contains(&expected), "expected {expected:#?}, got {hazards:#?}");
}

/// The JSON finding of `rule` in the whole vhost (exactly one).
#[track_caller]
fn finding(vhost: &Vhost, rule: &str) -> Value {
    let (_, reports) = vhost.json(&["inspect", "--vhost", &vhost.name]);
    support::one(&reports["vhosts"][0]["hazards"], &json!({"rule": rule})).clone()
}

/// The dead-letter exchange does not exist: the rejected message is gone.
async fn dead_letter_exchange_missing(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-dlx-missing").await;
    queue(&ch, "work", args(&[("x-dead-letter-exchange", Str("nowhere")), ("x-dead-letter-routing-key", Str("x"))]))
        .await;
    support::publish(&c, "", "work", &["m".to_string()]).await;
    reject_one(&ch, "work").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(total(&c, &["work"]).await, 0, "the broker dropped it");
    assert_reported(&vhost, hazard("dead-letter-exchange-missing", &["work"], &["nowhere"]));
}

/// The dead-letter routing key matches no binding: dropped.
async fn dead_letters_unroutable(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-unroutable").await;
    exchange(&ch, "dlx", ExchangeKind::Direct).await;
    queue(&ch, "parking", FieldTable::default()).await;
    bind(&ch, "parking", "dlx", "parking").await;
    queue(&ch, "work", args(&[("x-dead-letter-exchange", Str("dlx")), ("x-dead-letter-routing-key", Str("parked"))]))
        .await;
    support::publish(&c, "", "work", &["m".to_string()]).await;
    reject_one(&ch, "work").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(total(&c, &["work", "parking"]).await, 0, "routed nowhere, dropped");
    assert_reported(&vhost, hazard("dead-letters-unroutable", &["work"], &["dlx"]));
}

/// A fanout dead-letter exchange with two queues: one failure, two copies.
async fn dead_letters_fan_out(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-fan-out").await;
    exchange(&ch, "events", ExchangeKind::Fanout).await;
    queue(&ch, "billing", FieldTable::default()).await;
    queue(&ch, "audit", FieldTable::default()).await;
    bind(&ch, "billing", "events", "").await;
    bind(&ch, "audit", "events", "").await;
    // The classic mistake: dead-lettering back through the shared exchange.
    queue(&ch, "work", args(&[("x-dead-letter-exchange", Str("events")), ("x-dead-letter-routing-key", Str("work"))]))
        .await;
    support::publish(&c, "", "work", &["m".to_string()]).await;
    reject_one(&ch, "work").await;
    support::wait_for_count(&c, "billing", 1, Duration::from_secs(5)).await;
    support::wait_for_count(&c, "audit", 1, Duration::from_secs(5)).await;
    assert_reported(&vhost, hazard("dead-letters-fan-out", &["work", "audit", "billing"], &["events"]));
}

/// Two queues dead-lettering into each other by TTL: the message is dropped as a cycle.
async fn dead_letter_cycle(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-cycle").await;
    let loop_to = |target: &'static str| {
        args(&[
            ("x-message-ttl", Int(200)),
            ("x-dead-letter-exchange", Str("")),
            ("x-dead-letter-routing-key", Str(target)),
        ])
    };
    queue(&ch, "main", loop_to("wait")).await;
    queue(&ch, "wait", loop_to("main")).await;
    support::publish(&c, "", "main", &["m".to_string()]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(total(&c, &["main", "wait"]).await, 0, "dropped as a dead-letter cycle");
    assert_reported(&vhost, hazard("dead-letter-cycle", &["main", "wait"], &[]));
}

on_every_broker!(
    a_hopper_topology_has_no_hazard,
    default_delivery_limit,
    dead_letter_exchange_missing,
    dead_letters_unroutable,
    dead_letters_fan_out,
    dead_letter_cycle,
    wait_queue_without_ttl,
    wait_queue_with_consumers,
    expires_on_retry_path,
    drop_head_on_dead_letter_queue,
    drop_head_on_wait_queue,
    at_least_once_not_in_force,
    routing_key_without_exchange,
    unknown_argument,
    delivery_limit_drops,
    dead_letter_queue_not_terminal,
    dead_letter_routing_key_missing,
    a_routing_key_left_by_the_previous_hop_is_unroutable,
    routes_through_a_topic_dead_letter_exchange,
    routes_through_an_exchange_to_exchange_binding,
    routes_to_the_alternate_exchange_of_the_dead_letter_exchange,
    a_headers_dead_letter_exchange_is_uncertain,
    inspect_one_queue_of_a_hand_built_vhost,
    inspect_a_spec_restricts_to_its_queues,
    graph_of_a_live_vhost,
    at_most_once_dead_lettering,
    drops_off_a_retry_path_are_warnings,
    drops_on_a_retry_path_are_errors,
);

/// A hopper topology on a live broker, with traffic: no hazard.
async fn a_hopper_topology_has_no_hazard(broker: Broker) {
    let vhost = Vhost::new(broker, "hazard-none").await;
    let orders = vhost.spec(
        "orders.toml",
        "[topology.orders]\nexchange_type = \"topic\"\ndelays = [\"1s\", \"5s\"]\nmax_attempts = 3\nidempotency_key = \"message_id\"\n",
    );
    let payments = vhost.spec(
        "payments.toml",
        "[topology.payments]\nstrategy = \"chain\"\nqueue_type = \"classic\"\ndelays = [\"1s\"]\nmax_attempts = 3\nidempotency_key = { header = \"payment-id\" }\n",
    );
    assert_eq!(vhost.hopper(&["apply", orders.to_str().unwrap(), payments.to_str().unwrap()]).status.code(), Some(0));
    let (code, hazards) = inspect(&vhost);
    assert_eq!((code, hazards), (Some(0), vec![]));
    let specs = [orders.to_str().unwrap(), payments.to_str().unwrap()];
    let (code, findings) = support::hopper_json(None, &[&["lint"][..], &specs].concat());
    assert_eq!((code, &findings["findings"]), (Some(0), &json!([])), "lint agrees, offline: {findings:#}");
    assert_eq!(findings["schema_version"], 1);
    // What a person reads.
    let lint = support::hopper(None, &[&["lint"][..], &specs].concat());
    assert_eq!(lint.status.code(), Some(0));
    let stdout = support::text(&lint.stdout);
    assert!(stdout.contains("no hazard in 2 topologies"), "{stdout}");
}

// ---------------------------------------------------------------------------------------------
// The remaining rules, one test each (two for drop-head), on both brokers: listed in
// `on_every_broker!` above. Helpers first.
// ---------------------------------------------------------------------------------------------

/// Takes one message from `queue` (waiting up to 5 s for it), unacked.
async fn get_one(channel: &Channel, queue: &str) -> lapin::message::BasicGetMessage {
    let start = Instant::now();
    loop {
        if let Some(m) = channel.basic_get(queue.into(), BasicGetOptions::default()).await.unwrap() {
            return m;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "nothing arrived in {queue}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A queue as the management API shows it (with fields hopper does not read, such as
/// `messages_dlx`); `None` once it is gone.
async fn queue_info(vhost: &Vhost, queue: &str) -> Option<Value> {
    let path = format!("/queues/{}/{}", support::urlencode(&vhost.name), support::urlencode(queue));
    match support::api(vhost.broker).get(&path).await {
        Ok(info) => Some(info),
        Err(hopper::broker::http::HttpError::Status { status: 404, .. }) => None,
        Err(e) => panic!("GET {path}: {e:?}"),
    }
}

/// Waits until the management API's statistics (emitted every few seconds) satisfy `ok`.
async fn wait_for_stats(vhost: &Vhost, queue: &str, what: &str, ok: impl Fn(&Value) -> bool) {
    let start = Instant::now();
    loop {
        let info = queue_info(vhost, queue).await.unwrap_or_else(|| panic!("{queue} is gone"));
        if ok(&info) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{queue}: never {what}: {info}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `hopper inspect --format json` with extra arguments: (exit code, the reports).
fn inspect_json(vhost: &Vhost, extra: &[&str]) -> (Option<i32>, Value) {
    let mut command = vec!["inspect"];
    command.extend_from_slice(extra);
    vhost.json(&command)
}

/// Where inspect says a message rejected in `queue` goes (`queues[0].dead_letters.rejected`).
fn rejected_path(vhost: &Vhost, queue: &str) -> Value {
    let (_, reports) = inspect_json(vhost, &["--vhost", &vhost.name, "--queue", queue]);
    let queues = reports["vhosts"][0]["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 1, "--queue shows one queue: {reports}");
    assert_eq!(queues[0]["name"], queue);
    queues[0]["dead_letters"]["rejected"].clone()
}

#[track_caller]
fn hazards_of<'a>(hazards: &'a [Hazard], rule: &str) -> Vec<&'a Hazard> {
    hazards.iter().filter(|h| h.rule == rule).collect()
}

/// A retry loop whose wait queue has no TTL: a rejected message waits there forever. Published
/// with its own expiration, which dead-lettering removes, so not even that lets it out.
async fn wait_queue_without_ttl(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-no-ttl").await;
    queue(&ch, "work", args(&[("x-dead-letter-exchange", Str("")), ("x-dead-letter-routing-key", Str("wait"))])).await;
    queue(&ch, "wait", args(&[("x-dead-letter-exchange", Str("")), ("x-dead-letter-routing-key", Str("work"))])).await;
    support::publish_one(&c, "", "work", support::rich_properties("m").with_expiration("400".into())).await;
    reject_one(&ch, "work").await;
    support::wait_for_count(&c, "wait", 1, Duration::from_secs(5)).await;
    // Well past the message's own 400 ms: still there, and would be forever.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(support::count(&c, "wait").await, Some(1), "stranded in wait");
    assert_eq!(support::count(&c, "work").await, Some(0), "never back in work");
    let m = get_one(&ch, "wait").await;
    assert_eq!(support::deaths(&m.properties), [("work".to_string(), "rejected".to_string())]);
    assert_eq!(m.properties.expiration(), &None, "dead-lettering removed the message's expiration");
    m.delivery.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.unwrap();
    support::wait_for_count(&c, "wait", 1, Duration::from_secs(5)).await;
    assert_reported(&vhost, hazard("wait-queue-without-ttl", &["wait"], &[]));
}

/// A consumer on a wait queue takes the message long before its TTL; nothing is dead-lettered.
async fn wait_queue_with_consumers(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-wait-consumer").await;
    queue(&ch, "work", FieldTable::default()).await;
    queue(
        &ch,
        "wait",
        args(&[
            ("x-message-ttl", Int(5000)),
            ("x-dead-letter-exchange", Str("")),
            ("x-dead-letter-routing-key", Str("work")),
        ]),
    )
    .await;
    let consumer_channel = c.create_channel().await.unwrap();
    let mut consumer = consumer_channel
        .basic_consume("wait".into(), "impatient".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    support::publish(&c, "", "wait", &["m".to_string()]).await;
    // Within 2 s, so well before the 5 s TTL.
    let delivery = tokio::time::timeout(Duration::from_secs(2), consumer.next())
        .await
        .expect("the consumer of the wait queue gets the message before its TTL")
        .unwrap()
        .unwrap();
    assert_eq!(support::message_id(&delivery.properties), "m");
    assert_eq!(support::deaths(&delivery.properties), vec![], "not dead-lettered: taken early");
    delivery.ack(BasicAckOptions::default()).await.unwrap();
    assert_eq!(total(&c, &["wait", "work"]).await, 0, "nothing left to go to work after the delay");
    // inspect counts consumers from the management API's statistics, emitted every 5 s.
    wait_for_stats(&vhost, "wait", "shows its consumer", |q| q["consumers"] == 1).await;
    // Another reading may still come from a node's older statistics: read until it agrees.
    let expected = hazard("wait-queue-with-consumers", &["wait"], &[]);
    let start = std::time::Instant::now();
    while !inspect(&vhost).1.contains(&expected) && start.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_reported(&vhost, expected);
    drop(consumer);
}

/// A wait queue with x-expires shorter than its TTL: deleted with the message in it, which never
/// reaches the work queue.
async fn expires_on_retry_path(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-expires").await;
    let wait = |expires: i64| {
        args(&[
            ("x-message-ttl", Int(5000)),
            ("x-expires", Int(expires)),
            ("x-dead-letter-exchange", Str("")),
            ("x-dead-letter-routing-key", Str("work")),
        ])
    };
    queue(&ch, "work", FieldTable::default()).await;
    queue(&ch, "wait", wait(1000)).await;
    support::publish(&c, "", "wait", &["m".to_string()]).await;
    // Watched through the management API: a passive declare would count as a use and keep the
    // queue alive.
    let start = Instant::now();
    while queue_info(&vhost, "wait").await.is_some() {
        assert!(start.elapsed() < Duration::from_secs(5), "wait never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(support::count(&c, "wait").await, None, "the wait queue is gone, with its message");
    assert_eq!(support::count(&c, "work").await, Some(0), "and the message was not dead-lettered to work");
    // The same trap with a longer fuse, so that it is still there while inspect reads it.
    queue(&ch, "wait", wait(60_000)).await;
    assert_reported(&vhost, hazard("expires-on-retry-path", &["wait"], &[]));
}

/// A dead-letter queue with x-max-length 1 and the default drop-head: of two dead letters, the
/// older is lost.
async fn drop_head_on_dead_letter_queue(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-dlq-drop-head").await;
    queue(&ch, "orders.dlq", args(&[("x-max-length", Int(1))])).await;
    feeds_dead_letter_queue(&ch).await;
    support::publish(&c, "", "orders", &["first".to_string(), "second".to_string()]).await;
    reject_one(&ch, "orders").await;
    reject_one(&ch, "orders").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let parked = support::drain(&c, "orders.dlq").await;
    let ids: Vec<String> = parked.iter().map(|m| support::message_id(&m.properties)).collect();
    assert_eq!(ids, ["second"], "the first dead letter was pushed out of the dead-letter queue and lost");
    assert_eq!(support::count(&c, "orders").await, Some(0));
    assert_reported(&vhost, hazard("drop-head-on-wait-or-dead-letter-queue", &["orders.dlq"], &[]));
}

/// A wait queue with x-max-length 1: the older message is dead-lettered at once (reason
/// `maxlen`), long before its delay.
async fn drop_head_on_wait_queue(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-wait-drop-head").await;
    queue(&ch, "work", FieldTable::default()).await;
    queue(
        &ch,
        "wait",
        args(&[
            ("x-message-ttl", Int(10_000)),
            ("x-max-length", Int(1)),
            ("x-dead-letter-exchange", Str("")),
            ("x-dead-letter-routing-key", Str("work")),
        ]),
    )
    .await;
    support::publish(&c, "", "wait", &["older".to_string(), "newer".to_string()]).await;
    // Well before the 10 s delay.
    support::wait_for_count(&c, "work", 1, Duration::from_secs(3)).await;
    let early = support::drain(&c, "work").await;
    assert_eq!(support::message_id(&early[0].properties), "older");
    assert_eq!(support::deaths(&early[0].properties), [("wait".to_string(), "maxlen".to_string())]);
    assert_eq!(support::count(&c, "wait").await, Some(1), "only the newer one waits");
    assert_reported(&vhost, hazard("drop-head-on-wait-or-dead-letter-queue", &["wait"], &[]));
}

/// Quorum at-least-once with the default overflow (drop-head) is at most once: with its
/// dead-letter exchange missing, the dead letter is dropped. With overflow reject-publish it is
/// kept in the queue (`messages_dlx`), retried until a route exists.
async fn at_least_once_not_in_force(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-at-least-once").await;
    let quorum = |overflow: Option<&'static str>| {
        let mut pairs = vec![
            ("x-queue-type", Str("quorum")),
            ("x-dead-letter-strategy", Str("at-least-once")),
            ("x-dead-letter-exchange", Str("missing")),
        ];
        pairs.extend(overflow.map(|o| ("x-overflow", Str(o))));
        args(&pairs)
    };
    queue(&ch, "lossy", quorum(None)).await;
    queue(&ch, "safe", quorum(Some("reject-publish"))).await;
    for q in ["lossy", "safe"] {
        support::publish(&c, "", q, &[format!("{q}-m")]).await;
        reject_one(&ch, q).await;
    }
    // Neither has it ready any more; whether the broker still holds it is in `messages_dlx`,
    // which the management API reports with its statistics. A quorum queue reports its first a
    // tick (5 s) after it starts, long after these rejections: any figure seen is from after them.
    assert_eq!(total(&c, &["lossy", "safe"]).await, 0);
    wait_for_stats(&vhost, "safe", "holds its dead letter", |q| q["messages_dlx"] == 1).await;
    wait_for_stats(&vhost, "lossy", "reports messages_dlx", |q| q["messages_dlx"].is_number()).await;
    assert_eq!(queue_info(&vhost, "lossy").await.unwrap()["messages_dlx"], 0, "lossy dropped it: at most once");
    assert_eq!(queue_info(&vhost, "safe").await.unwrap()["messages_dlx"], 1, "safe keeps it for retry");

    assert_reported(&vhost, hazard("at-least-once-not-in-force", &["lossy"], &[]));
    let (_, hazards) = inspect(&vhost);
    assert_eq!(
        hazards_of(&hazards, "at-least-once-not-in-force"),
        [&hazard("at-least-once-not-in-force", &["lossy"], &[])]
    );
}

/// A dead-letter routing key without a dead-letter exchange: refused as an argument; set by a
/// policy on a quorum queue, dead-lettering is off and a rejected message is discarded (it does
/// not go to the queue the key names).
async fn routing_key_without_exchange(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-dlrk-only").await;
    let refused = c.create_channel().await.unwrap();
    let e = refused
        .queue_declare(
            "refused".into(),
            QueueDeclareOptions { durable: true, ..Default::default() },
            args(&[("x-dead-letter-routing-key", Str("parked"))]),
        )
        .await
        .expect_err("RabbitMQ refuses a dead-letter routing key without an exchange");
    let message = e.to_string();
    assert!(message.contains("PRECONDITION_FAILED") && message.contains("routing_key_but_no_dlx_defined"), "{e}");
    assert!(matches!(e.kind(), lapin::ErrorKind::ProtocolError(amqp) if amqp.get_id() == 406), "{e:?}");
    assert_eq!(support::count(&c, "refused").await, None);

    let definition = json!({"dead-letter-routing-key": "parked"});
    support::declare_policy(broker, &vhost.name, false, "dlrk-only", "^work$", definition).await;
    queue(&ch, "parked", FieldTable::default()).await;
    queue(&ch, "work", args(&[("x-queue-type", Str("quorum"))])).await;
    support::publish(&c, "", "work", &["m".to_string()]).await;
    reject_one(&ch, "work").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(total(&c, &["work", "parked"]).await, 0, "discarded, not dead-lettered to `parked`");
    assert_reported(&vhost, hazard("routing-key-without-exchange", &["work"], &[]));
}

/// `overflow` without its `x-`: stored and ignored, so the queue drops the head instead of
/// refusing publishes.
async fn unknown_argument(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-unknown-arg").await;
    queue(&ch, "work", args(&[("overflow", Str("reject-publish")), ("x-max-length", Int(1))])).await;
    // Both confirmed (reject-publish would have refused the second)...
    support::publish(&c, "", "work", &["older".to_string(), "newer".to_string()]).await;
    // ...and only the newest remains: drop-head.
    let left = support::drain(&c, "work").await;
    assert_eq!(left.iter().map(|m| support::message_id(&m.properties)).collect::<Vec<_>>(), ["newer"]);
    assert_reported(&vhost, hazard("unknown-argument", &["work"], &[]));
    let message = finding(&vhost, "unknown-argument")["message"].as_str().unwrap().to_string();
    assert!(message.contains("`overflow`") && message.contains("did you mean `x-overflow`?"), "{message}");
    // What a person reads: the rule, the message with its hint, and why RabbitMQ does it.
    let out = vhost.hopper(&["inspect", "--vhost", &vhost.name]);
    assert_eq!(out.status.code(), Some(1));
    let table = support::text(&out.stdout);
    assert!(table.contains("[unknown-argument]") && table.contains(&message), "{table}");
    assert!(table.contains("because:"), "{table}");
}

/// Returns the message at the head of `queue` to it (nack, requeue) `times` times; whether it
/// was still there each time.
/// How a consumer gives a message back: the two count differently on RabbitMQ 4.3.
#[derive(Clone, Copy)]
enum Answer {
    /// `basic.nack` with requeue: counts toward the delivery limit up to 4.2, not on 4.3.
    Nack,
    /// `basic.reject` with requeue: a failed delivery, counted on every version.
    Reject,
}

/// Gets and gives back a message `times` times; how many times there was one to give back.
async fn give_back(channel: &Channel, queue: &str, times: usize, answer: Answer) -> usize {
    for i in 0..times {
        let Some(m) = channel.basic_get(queue.into(), BasicGetOptions::default()).await.unwrap() else {
            return i;
        };
        match answer {
            Answer::Nack => m.delivery.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.unwrap(),
            Answer::Reject => m.delivery.reject(BasicRejectOptions { requeue: true }).await.unwrap(),
        };
    }
    times
}

/// A quorum queue with x-delivery-limit 1 and no dead-letter exchange: two failed deliveries and
/// the message is gone. On RabbitMQ 4.3 only a reject counts: nacks with requeue do not.
async fn delivery_limit_drops(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-delivery-limit").await;
    queue(&ch, "work", args(&[("x-queue-type", Str("quorum")), ("x-delivery-limit", Int(1))])).await;
    support::publish(&c, "", "work", &["m".to_string()]).await;
    if broker.version() >= (4, 3) {
        assert_eq!(give_back(&ch, "work", 5, Answer::Nack).await, 5, "nacks do not count on 4.3");
        support::wait_for_count(&c, "work", 1, Duration::from_secs(5)).await;
    }
    let answer = if broker.version() >= (4, 3) { Answer::Reject } else { Answer::Nack };
    assert_eq!(give_back(&ch, "work", 2, answer).await, 2);
    assert!(ch.basic_get("work".into(), BasicGetOptions::default()).await.unwrap().is_none(), "dropped");
    assert_eq!(support::count(&c, "work").await, Some(0));
    assert_reported(&vhost, hazard("delivery-limit-drops", &["work"], &[]));
    if broker.version() >= (4, 3) {
        let message = finding(&vhost, "delivery-limit-drops")["message"].as_str().unwrap().to_string();
        assert!(message.contains("basic.reject") && message.contains("a nack"), "{message}");
    }
}

/// A dead-letter queue with a TTL and no dead-letter exchange: the parked message expires.
async fn dead_letter_queue_not_terminal(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-dlq-ttl").await;
    queue(&ch, "orders.dlq", args(&[("x-message-ttl", Int(200))])).await;
    feeds_dead_letter_queue(&ch).await;
    support::publish(&c, "", "orders", &["m".to_string()]).await;
    reject_one(&ch, "orders").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(total(&c, &["orders", "orders.dlq"]).await, 0, "parked, then expired: gone");
    assert_reported(&vhost, hazard("dead-letter-queue-not-terminal", &["orders.dlq"], &[]));
}

/// A wait queue with a TTL and a dead-letter exchange but no routing key: the message keeps the
/// key the previous hop gave it (`wait`), not the one it was published with, and so misses the
/// work queue's binding (an alternate exchange catches it here, to show the key).
async fn dead_letter_routing_key_missing(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-no-dlrk").await;
    exchange(&ch, "unrouted", ExchangeKind::Fanout).await;
    queue(&ch, "unrouted", FieldTable::default()).await;
    bind(&ch, "unrouted", "unrouted", "").await;
    exchange_with(&ch, "orders", ExchangeKind::Direct, args(&[("alternate-exchange", Str("unrouted"))])).await;
    exchange(&ch, "retry", ExchangeKind::Direct).await;
    queue(&ch, "orders", args(&[("x-dead-letter-exchange", Str("retry")), ("x-dead-letter-routing-key", Str("wait"))]))
        .await;
    bind(&ch, "orders", "orders", "order.created").await;
    queue(&ch, "wait", args(&[("x-message-ttl", Int(200)), ("x-dead-letter-exchange", Str("orders"))])).await;
    bind(&ch, "wait", "retry", "wait").await;

    support::publish(&c, "orders", "order.created", &["m".to_string()]).await;
    reject_one(&ch, "orders").await;
    let m = get_one(&ch, "unrouted").await;
    assert_eq!(m.delivery.routing_key.as_str(), "wait", "the key the previous hop set, not order.created");
    assert_eq!(
        support::deaths(&m.properties),
        [("wait".to_string(), "expired".to_string()), ("orders".to_string(), "rejected".to_string())]
    );
    m.delivery.ack(BasicAckOptions::default()).await.unwrap();
    assert_eq!(support::count(&c, "orders").await, Some(0), "never back in orders");
    assert_reported(&vhost, hazard("dead-letter-routing-key-missing", &["wait"], &[]));
    // inspect follows the key as the broker did: `wait` -> `orders` with `wait` -> `unrouted`.
    let path = rejected_path(&vhost, "orders");
    assert_eq!(path["hops"][1]["queue"], "wait", "{path}");
    assert_eq!(path["hops"][1]["dead_letter"]["routing_key"], "wait", "{path}");
    assert_path_ends_in(&json!({"hops": [path["hops"][1]], "end": path["end"]}), "unrouted");
    let (_, hazards) = inspect(&vhost);
    assert_eq!(hazards, [hazard("dead-letter-routing-key-missing", &["wait"], &[])]);
}

/// The same loop with no alternate exchange: the key `wait` matches nothing on the way back, so
/// the retry is dropped. An error, not only the warning.
async fn a_routing_key_left_by_the_previous_hop_is_unroutable(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-carried-key").await;
    exchange(&ch, "orders", ExchangeKind::Direct).await;
    exchange(&ch, "retry", ExchangeKind::Direct).await;
    queue(&ch, "orders", args(&[("x-dead-letter-exchange", Str("retry")), ("x-dead-letter-routing-key", Str("wait"))]))
        .await;
    bind(&ch, "orders", "orders", "order.created").await;
    queue(&ch, "wait", args(&[("x-message-ttl", Int(200)), ("x-dead-letter-exchange", Str("orders"))])).await;
    bind(&ch, "wait", "retry", "wait").await;
    support::publish(&c, "orders", "order.created", &["m".to_string()]).await;
    reject_one(&ch, "orders").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(total(&c, &["orders", "wait"]).await, 0, "dropped on its way back");
    assert_reported(&vhost, hazard("dead-letters-unroutable", &["wait"], &["orders"]));
    let path = rejected_path(&vhost, "orders");
    assert_eq!(path["end"]["end"], "dropped", "{path}");
    assert!(path["end"]["why"].as_str().unwrap().contains("routing key `wait`"), "{path}");
}

// ---------------------------------------------------------------------------------------------
// Routing simulation: where the broker delivers a dead letter, and where inspect says it goes.
// ---------------------------------------------------------------------------------------------

/// `work` rejects into `dlx` with this routing key.
async fn work_dead_lettering_to(ch: &Channel, dlx: &'static str, key: Option<&'static str>) {
    let mut pairs = vec![("x-dead-letter-exchange", Str(dlx))];
    pairs.extend(key.map(|k| ("x-dead-letter-routing-key", Str(k))));
    queue(ch, "work", args(&pairs)).await;
}

fn assert_path_ends_in(path: &Value, queue: &str) {
    assert_eq!(path["hops"][0]["dead_letter"]["outcome"], "routed", "{path}");
    assert_eq!(path["hops"][0]["dead_letter"]["queues"], json!([queue]), "{path}");
    assert_eq!(path["end"], json!({"end": "held", "queue": queue}), "{path}");
}

/// A topic dead-letter exchange: the key matches one pattern of several.
async fn routes_through_a_topic_dead_letter_exchange(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "route-topic").await;
    exchange(&ch, "dlx", ExchangeKind::Topic).await;
    for (q, pattern) in [("eu", "order.*.eu"), ("us", "order.*.us"), ("created", "order.created")] {
        queue(&ch, q, FieldTable::default()).await;
        bind(&ch, q, "dlx", pattern).await;
    }
    work_dead_lettering_to(&ch, "dlx", Some("order.failed.eu")).await;
    support::publish(&c, "", "work", &["m".to_string()]).await;
    reject_one(&ch, "work").await;
    support::wait_for_count(&c, "eu", 1, Duration::from_secs(5)).await;
    assert_eq!(total(&c, &["us", "created", "work"]).await, 0);
    assert_path_ends_in(&rejected_path(&vhost, "work"), "eu");
}

/// An exchange-to-exchange binding: the dead letter goes through `dlx` into `parking`.
async fn routes_through_an_exchange_to_exchange_binding(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "route-e2e").await;
    exchange(&ch, "dlx", ExchangeKind::Direct).await;
    exchange(&ch, "parking", ExchangeKind::Fanout).await;
    ch.exchange_bind(
        "parking".into(),
        "dlx".into(),
        "parked".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    queue(&ch, "parked", FieldTable::default()).await;
    bind(&ch, "parked", "parking", "").await;
    queue(&ch, "other", FieldTable::default()).await;
    bind(&ch, "other", "dlx", "other").await;
    work_dead_lettering_to(&ch, "dlx", Some("parked")).await;
    support::publish(&c, "", "work", &["m".to_string()]).await;
    reject_one(&ch, "work").await;
    support::wait_for_count(&c, "parked", 1, Duration::from_secs(5)).await;
    assert_eq!(total(&c, &["other", "work"]).await, 0);
    assert_path_ends_in(&rejected_path(&vhost, "work"), "parked");
}

/// An alternate exchange on the dead-letter exchange catches a dead letter no binding matches.
async fn routes_to_the_alternate_exchange_of_the_dead_letter_exchange(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "route-ae").await;
    exchange(&ch, "ae", ExchangeKind::Fanout).await;
    queue(&ch, "unrouted", FieldTable::default()).await;
    bind(&ch, "unrouted", "ae", "").await;
    exchange_with(&ch, "dlx", ExchangeKind::Direct, args(&[("alternate-exchange", Str("ae"))])).await;
    queue(&ch, "other", FieldTable::default()).await;
    bind(&ch, "other", "dlx", "other").await;
    work_dead_lettering_to(&ch, "dlx", Some("nobody")).await;
    support::publish(&c, "", "work", &["m".to_string()]).await;
    reject_one(&ch, "work").await;
    support::wait_for_count(&c, "unrouted", 1, Duration::from_secs(5)).await;
    assert_eq!(total(&c, &["other", "work"]).await, 0);
    assert_path_ends_in(&rejected_path(&vhost, "work"), "unrouted");
    let (code, hazards) = inspect(&vhost);
    assert_eq!((code, hazards), (Some(0), vec![]), "caught by the alternate exchange: not unroutable");
}

/// A headers dead-letter exchange routes on the message's own headers: the broker delivers by
/// them, and inspect says the route cannot be known rather than guessing (not even its
/// alternate exchange, which takes only what no binding matches).
async fn a_headers_dead_letter_exchange_is_uncertain(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "route-headers").await;
    exchange(&ch, "ae", ExchangeKind::Fanout).await;
    queue(&ch, "unrouted", FieldTable::default()).await;
    bind(&ch, "unrouted", "ae", "").await;
    exchange_with(&ch, "dlx", ExchangeKind::Headers, args(&[("alternate-exchange", Str("ae"))])).await;
    for kind in ["a", "b"] {
        queue(&ch, kind, FieldTable::default()).await;
        bind_with(&ch, kind, "dlx", "", args(&[("x-match", Str("all")), ("kind", Str(kind))])).await;
    }
    work_dead_lettering_to(&ch, "dlx", None).await;
    let mut headers = FieldTable::default();
    headers.insert("kind".into(), AMQPValue::LongString("b".into()));
    support::publish_one(&c, "", "work", support::rich_properties("m").with_headers(headers)).await;
    reject_one(&ch, "work").await;
    support::wait_for_count(&c, "b", 1, Duration::from_secs(5)).await;
    assert_eq!(total(&c, &["a", "unrouted", "work"]).await, 0);
    let path = rejected_path(&vhost, "work");
    assert_eq!(path["hops"][0]["dead_letter"]["uncertain"], true, "{path}");
    assert_eq!(path["hops"][0]["dead_letter"]["queues"], json!([]), "no invented target: {path}");
    assert_eq!(path["end"]["end"], "unknown", "{path}");
}

// ---------------------------------------------------------------------------------------------
// What inspect looks at, and graph.
// ---------------------------------------------------------------------------------------------

/// `inspect --queue` on a queue hopper did not create: that queue only, and only its hazards.
async fn inspect_one_queue_of_a_hand_built_vhost(broker: Broker) {
    let (vhost, _c, ch) = trap(broker, "inspect-one").await;
    queue(&ch, "parked", FieldTable::default()).await;
    queue(&ch, "work", args(&[("x-dead-letter-exchange", Str("")), ("x-dead-letter-routing-key", Str("parked"))]))
        .await;
    // Another queue with a hazard of its own.
    queue(&ch, "lost", args(&[("x-dead-letter-exchange", Str("nowhere"))])).await;
    let (code, reports) = inspect_json(&vhost, &["--vhost", &vhost.name, "--queue", "work"]);
    let names: Vec<&str> =
        reports["vhosts"][0]["queues"].as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["work"]);
    assert_eq!(reports["vhosts"][0]["hazards"], json!([]), "the other queue's hazard is not shown");
    assert_eq!(code, Some(0));
    assert_path_ends_in(&reports["vhosts"][0]["queues"][0]["dead_letters"]["rejected"], "parked");
    // The whole vhost has it.
    let (code, hazards) = inspect(&vhost);
    assert_eq!(code, Some(1));
    assert_eq!(
        hazards_of(&hazards, "dead-letter-exchange-missing"),
        [&hazard("dead-letter-exchange-missing", &["lost"], &["nowhere"])]
    );
    let unknown = vhost.hopper(&["inspect", "--vhost", &vhost.name, "--queue", "absent"]);
    assert_ne!(unknown.status.code(), Some(0));
    assert!(
        support::text(&unknown.stderr).contains("queue `absent` does not exist"),
        "{}",
        support::text(&unknown.stderr)
    );
}

/// `inspect SPEC`: the spec's queues only; a hazardous queue beside them is not its business.
async fn inspect_a_spec_restricts_to_its_queues(broker: Broker) {
    let vhost = Vhost::new(broker, "inspect-spec").await;
    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"1s\"]\nmax_attempts = 2\n");
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.hopper(&["apply", spec]).status.code(), Some(0));
    let c = vhost.connect().await;
    let ch = c.create_channel().await.unwrap();
    queue(&ch, "stray", args(&[("x-dead-letter-exchange", Str("nowhere"))])).await;
    let (code, reports) = inspect_json(&vhost, &[spec]);
    let names: Vec<&str> =
        reports["vhosts"][0]["queues"].as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["orders", "orders.dlq", "orders.wait-1s"]);
    assert_eq!(reports["vhosts"][0]["vhost"], vhost.name.as_str());
    assert_eq!((code, &reports["vhosts"][0]["hazards"]), (Some(0), &json!([])));
    let (code, hazards) = inspect(&vhost);
    assert_eq!(code, Some(1), "the whole vhost has the stray queue's hazard: {hazards:?}");
    assert_eq!(
        hazards_of(&hazards, "dead-letter-exchange-missing"),
        [&hazard("dead-letter-exchange-missing", &["stray"], &["nowhere"])]
    );
}

// ---------------------------------------------------------------------------------------------
// graph: read back as nodes (by kind and name, whatever their ids) and edges between them.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Node {
    Exchange(String),
    Queue(String),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: Node,
    to: Node,
    label: String,
    dead_letter: bool,
}

/// What a drawing shows: its vhosts' labels, its nodes and its edges, sorted.
#[derive(Debug, Default, PartialEq, Eq)]
struct Graph {
    vhosts: Vec<String>,
    nodes: Vec<Node>,
    edges: Vec<Edge>,
}

impl Graph {
    fn new(
        vhosts: Vec<String>,
        ids: std::collections::BTreeMap<String, Node>,
        edges: Vec<(String, String, String, bool)>,
    ) -> Graph {
        let node = |id: &str| ids.get(id).cloned().unwrap_or_else(|| panic!("an edge names node {id}, never declared"));
        let mut edges: Vec<Edge> = edges
            .into_iter()
            .map(|(from, to, label, dead_letter)| Edge { from: node(&from), to: node(&to), label, dead_letter })
            .collect();
        edges.sort();
        let mut nodes: Vec<Node> = ids.into_values().collect();
        nodes.sort();
        Graph { vhosts, nodes, edges }
    }

    fn edge(&self, from: &Node, to: &Node, dead_letter: bool) -> Option<&Edge> {
        self.edges.iter().find(|e| e.from == *from && e.to == *to && e.dead_letter == dead_letter)
    }
}

/// The text of a DOT double-quoted string starting at `text`, and what follows it.
fn dot_string(text: &str) -> (String, &str) {
    let mut chars = text.strip_prefix('"').unwrap_or_else(|| panic!("not a DOT string: {text}")).char_indices();
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (out, &text[i + 2..]),
            '\\' => match chars.next().map(|(_, c)| c) {
                Some('n') => out.push('\n'),
                Some(c) => out.push(c),
                None => break,
            },
            c => out.push(c),
        }
    }
    panic!("unterminated DOT string: {text}")
}

fn parse_dot(dot: &str) -> Graph {
    let (mut vhosts, mut ids, mut edges) = (Vec::new(), std::collections::BTreeMap::new(), Vec::new());
    for line in dot.lines().map(str::trim) {
        if let Some(label) = line.strip_prefix("label=") {
            vhosts.push(dot_string(label).0);
        } else if let Some((id, attributes)) = line.split_once(" [shape=") {
            let (shape, label) = attributes.split_once(", label=").unwrap();
            let label = dot_string(label).0;
            let node = match shape {
                "box" => {
                    Node::Exchange(label.split_once('\n').unwrap_or_else(|| panic!("no type: {line}")).0.to_string())
                }
                "ellipse" => Node::Queue(label),
                other => panic!("shape {other}: {line}"),
            };
            assert!(ids.insert(id.to_string(), node).is_none(), "node id {id} used twice:\n{dot}");
        } else if let Some((from, rest)) = line.split_once(" -> ") {
            let (to, attributes) = rest.split_once(" [").unwrap();
            let (style, label) = attributes.split_once("label=").unwrap();
            let dead_letter = style == "style=dashed, color=red, fontcolor=red, ";
            assert!(dead_letter || style.is_empty(), "an edge styled {style:?}: {line}");
            edges.push((from.to_string(), to.to_string(), dot_string(label).0, dead_letter));
        }
    }
    Graph::new(vhosts, ids, edges)
}

/// The text of a Mermaid quoted label: entity codes (`#34;`) and `<br>` decoded.
fn mermaid_string(text: &str) -> (String, &str) {
    let body = text.strip_prefix('"').unwrap_or_else(|| panic!("not a Mermaid string: {text}"));
    let end = body.find('"').unwrap_or_else(|| panic!("unterminated Mermaid string: {text}"));
    let decoded = body[..end].replace("<br>", "\n");
    let (mut out, mut rest) = (String::new(), decoded.as_str());
    while let Some(start) = rest.find('#') {
        out.push_str(&rest[..start]);
        let (code, after) = rest[start + 1..].split_once(';').unwrap_or_else(|| panic!("a bare # in {text}"));
        out.push(char::from_u32(code.parse().unwrap_or_else(|_| panic!("entity #{code}; in {text}"))).unwrap());
        rest = after;
    }
    out.push_str(rest);
    (out, &body[end + 1..])
}

fn parse_mermaid(mermaid: &str) -> Graph {
    let (mut vhosts, mut ids, mut edges) = (Vec::new(), std::collections::BTreeMap::new(), Vec::new());
    for line in mermaid.lines().map(str::trim) {
        if line == "flowchart LR" || line == "end" {
            continue;
        }
        if let Some(subgraph) = line.strip_prefix("subgraph ") {
            vhosts.push(mermaid_string(&subgraph[subgraph.find('"').unwrap()..]).0);
        } else if let Some((from, rest)) =
            line.split_once(' ').filter(|(_, r)| r.starts_with("-- ") || r.starts_with("-. "))
        {
            let dead_letter = rest.starts_with("-. ");
            let (label, rest) = mermaid_string(&rest[3..]);
            let to = rest.strip_prefix(if dead_letter { " .-> " } else { " --> " }).unwrap_or_else(|| panic!("{line}"));
            // An empty routing key is drawn as `""`, Mermaid having no empty label.
            let label = if label == "\"\"" { String::new() } else { label };
            edges.push((from.to_string(), to.to_string(), label, dead_letter));
        } else {
            let open = line.find('[').unwrap_or_else(|| panic!("not a node: {line}"));
            let (id, shape) = line.split_at(open);
            let (id, queue) = match id.strip_suffix('(') {
                Some(id) => (id, true),
                None => (id, false),
            };
            let label = mermaid_string(&shape[1..]).0;
            let node = if queue {
                Node::Queue(label)
            } else {
                Node::Exchange(label.split_once('\n').unwrap_or_else(|| panic!("no type: {line}")).0.to_string())
            };
            assert!(ids.insert(id.to_string(), node).is_none(), "node id {id} used twice:\n{mermaid}");
        }
    }
    Graph::new(vhosts, ids, edges)
}

/// DOT and Mermaid draw the same graph, of one vhost; bindings are solid and labelled with
/// their routing key, dead-letter routes dashed and labelled as such.
#[track_caller]
fn read_graph(vhost: &str, dot: &str, mermaid: &str) -> Graph {
    let graph = parse_dot(dot);
    assert_eq!(graph, parse_mermaid(mermaid), "DOT and Mermaid differ:\n{dot}\n{mermaid}");
    assert_eq!(graph.vhosts, [format!("vhost {vhost}")]);
    for e in &graph.edges {
        assert_eq!(e.dead_letter, e.label.starts_with("dead-letter: "), "{e:?}");
        assert_eq!(e.dead_letter, matches!((&e.from, &e.to), (Node::Queue(_), Node::Queue(_))), "{e:?}");
    }
    graph
}

#[track_caller]
fn assert_graph(graph: &Graph, binding: (&str, &str, &str), dead_letter: (&str, &str)) {
    let (exchange, queue, key) = binding;
    let solid = graph.edge(&Node::Exchange(exchange.into()), &Node::Queue(queue.into()), false);
    assert_eq!(solid.map(|e| e.label.as_str()), Some(key), "binding {exchange} -> {queue} ({key}) in {graph:#?}");
    let (from, to) = dead_letter;
    let dashed = graph.edge(&Node::Queue(from.into()), &Node::Queue(to.into()), true);
    assert!(dashed.is_some(), "dead-letter route {from} -> {to} in {graph:#?}");
}

#[test]
fn graph_of_a_spec() {
    let dir = std::env::temp_dir().join(support::unique("hopper-graph"));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("orders.toml");
    std::fs::write(&spec, "[topology.orders]\ndelays = [\"1s\"]\nmax_attempts = 2\n").unwrap();
    let graph = |style: &str| {
        let out = support::hopper(None, &["graph", "--style", style, spec.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", support::text(&out.stderr));
        support::text(&out.stdout)
    };
    let (dot, mermaid) = (graph("dot"), graph("mermaid"));
    let _ = std::fs::remove_dir_all(&dir);
    let graph = read_graph("/", &dot, &mermaid);
    // An exchange and a queue may share a name: two nodes.
    assert!(
        graph.nodes.contains(&Node::Exchange("orders".into())) && graph.nodes.contains(&Node::Queue("orders".into()))
    );
    // The main exchange binds the main queue; the wait queue dead-letters back into it, the main
    // queue into the dead-letter queue (through the dlx, bound solid).
    assert_graph(&graph, ("orders", "orders", "orders"), ("orders.wait-1s", "orders"));
    assert_graph(&graph, ("orders.dlx", "orders.dlq", "orders.dlq"), ("orders", "orders.dlq"));
    let wait = graph.edge(&Node::Queue("orders.wait-1s".into()), &Node::Queue("orders".into()), true).unwrap();
    assert!(wait.label.contains("expired") && wait.label.contains("via orders.retry \"orders\""), "{wait:?}");
}

/// `graph --live` on a vhost built by hand.
async fn graph_of_a_live_vhost(broker: Broker) {
    let (vhost, _c, ch) = trap(broker, "graph-live").await;
    exchange(&ch, "main", ExchangeKind::Direct).await;
    exchange(&ch, "dlx", ExchangeKind::Direct).await;
    queue(&ch, "parked", FieldTable::default()).await;
    bind(&ch, "parked", "dlx", "parked").await;
    queue(&ch, "work", args(&[("x-dead-letter-exchange", Str("dlx")), ("x-dead-letter-routing-key", Str("parked"))]))
        .await;
    bind(&ch, "work", "main", "job").await;
    let graph = |style: &str| {
        let out = vhost.hopper(&["graph", "--live", "--vhost", &vhost.name, "--style", style]);
        assert_eq!(out.status.code(), Some(0));
        support::text(&out.stdout)
    };
    let graph = read_graph(&vhost.name, &graph("dot"), &graph("mermaid"));
    assert_graph(&graph, ("main", "work", "job"), ("work", "parked"));
    assert_graph(&graph, ("dlx", "parked", "parked"), ("work", "parked"));
    assert_eq!(graph.edges.len(), 3, "two bindings, one dead-letter route: {graph:#?}");
}

/// A quorum queue with no delivery limit and no dead-letter exchange, given back over and over.
/// RabbitMQ 4 applies a default limit of 20: the 21st failed delivery drops the message, and
/// inspect says so (on 4.3 only rejects count, not nacks). RabbitMQ 3.10 has no default: the
/// message survives any number of returns, and inspect reports the unbounded redeliveries.
async fn default_delivery_limit(broker: Broker) {
    let vhost = Vhost::new(broker, "hazard-default-limit").await;
    let c = vhost.connect().await;
    let ch = c.create_channel().await.unwrap();
    queue(&ch, "work", args(&[("x-queue-type", Str("quorum"))])).await;
    support::publish(&c, "", "work", &["m".to_string()]).await;
    let (_, reports) = inspect_json(&vhost, &["--vhost", &vhost.name]);
    let (major, minor) = broker.version();
    let version = reports["vhosts"][0]["version"].as_str().unwrap_or_else(|| panic!("no version: {reports:#}"));
    assert!(
        version.starts_with(&format!("{major}.{minor}.")),
        "inspect read version {version} of RabbitMQ {major}.{minor}"
    );
    if broker.major() >= 4 {
        if broker.version() >= (4, 3) {
            assert_eq!(give_back(&ch, "work", 30, Answer::Nack).await, 30, "nacks do not count on 4.3");
        }
        let answer = if broker.version() >= (4, 3) { Answer::Reject } else { Answer::Nack };
        assert_eq!(give_back(&ch, "work", 20, answer).await, 20);
        // Still there after 20 returns (counted once the last return is applied).
        support::wait_for_count(&c, "work", 1, Duration::from_secs(5)).await;
        assert_eq!(give_back(&ch, "work", 1, answer).await, 1);
        assert!(
            ch.basic_get("work".into(), BasicGetOptions::default()).await.unwrap().is_none(),
            "dropped at the 21st"
        );
        assert_eq!(support::count(&c, "work").await, Some(0));
        assert_reported(&vhost, hazard("delivery-limit-drops", &["work"], &[]));
        let message = finding(&vhost, "delivery-limit-drops")["message"].as_str().unwrap().to_string();
        assert!(message.contains("more than 20 time(s) (RabbitMQ 4's default)"), "{message}");
    } else {
        assert_eq!(give_back(&ch, "work", 25, Answer::Nack).await, 25);
        // Still there after 25 returns (counted once the last return is applied).
        support::wait_for_count(&c, "work", 1, Duration::from_secs(5)).await;
        // Nothing drops it, and nothing bounds its redeliveries: a warning on 3.x only.
        assert_reported(&vhost, hazard("redeliveries-unbounded", &["work"], &[]));
        let (_, findings) = inspect(&vhost);
        assert!(findings.iter().all(|f| f.rule != "delivery-limit-drops"), "{findings:#?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Losses hopper knew of and did not report (issue 40, item 5): quorum dead-lettering at most
// once, and drops on expiry, overflow and delivery limit judged alike.
// ---------------------------------------------------------------------------------------------

/// A finding as (rule, severity, queues).
type Judged = (String, String, Vec<String>);

/// Every finding, sorted, and the exit code: from `--format json`, and the same severities and
/// rules in the table a person reads.
#[track_caller]
fn judged(vhost: &Vhost) -> (Option<i32>, Vec<Judged>) {
    let (code, reports) = vhost.json(&["inspect", "--vhost", &vhost.name]);
    let mut found: Vec<Judged> = reports["vhosts"][0]["hazards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let queues = f["queues"].as_array().unwrap().iter().map(|q| q.as_str().unwrap().to_string()).collect();
            (f["rule"].as_str().unwrap().to_string(), f["severity"].as_str().unwrap().to_string(), queues)
        })
        .collect();
    found.sort();
    let out = vhost.hopper(&["inspect", "--vhost", &vhost.name]);
    assert_eq!(out.status.code(), code, "the table exits as the JSON does");
    let table = support::text(&out.stdout);
    for (rule, severity, _) in &found {
        assert!(table.contains(&format!("{severity} [{rule}]")), "{severity} [{rule}] in:\n{table}");
    }
    (code, found)
}

fn judged_as(rule: &str, severity: &str, queues: &[&str]) -> Judged {
    (rule.to_string(), severity.to_string(), queues.iter().map(|q| q.to_string()).collect())
}

/// A quorum queue with a dead-letter exchange and the default strategy dead-letters at most
/// once: the broker takes the dead letter out of the queue and publishes it without a confirm,
/// so a target that refuses it (here a full queue with overflow reject-publish) loses it. The
/// same queue with at-least-once keeps it (`messages_dlx`) and retries. inspect reports the
/// default, whether the dead-letter exchange comes from an argument or from a policy.
async fn at_most_once_dead_lettering(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-at-most-once").await;
    queue(&ch, "park", args(&[("x-max-length", Int(1)), ("x-overflow", Str("reject-publish"))])).await;
    support::publish(&c, "", "park", &["filler".to_string()]).await;
    let quorum = |at_least_once: bool| {
        let mut pairs = vec![
            ("x-queue-type", Str("quorum")),
            ("x-delivery-limit", Int(5)),
            ("x-dead-letter-exchange", Str("")),
            ("x-dead-letter-routing-key", Str("park")),
        ];
        if at_least_once {
            pairs.extend([("x-dead-letter-strategy", Str("at-least-once")), ("x-overflow", Str("reject-publish"))]);
        }
        args(&pairs)
    };
    queue(&ch, "work", quorum(false)).await;
    queue(&ch, "safe", quorum(true)).await;
    for q in ["work", "safe"] {
        support::publish(&c, "", q, &[format!("{q}-m")]).await;
        reject_one(&ch, q).await;
    }
    assert_eq!(total(&c, &["work", "safe"]).await, 0, "neither has it ready");
    // As in at_least_once_not_in_force: a quorum queue's first statistics come a tick after it
    // starts, so any figure seen is from after the rejections.
    wait_for_stats(&vhost, "safe", "holds its dead letter", |q| q["messages_dlx"] == 1).await;
    wait_for_stats(&vhost, "work", "reports messages_dlx", |q| q["messages_dlx"].is_number()).await;
    assert_eq!(queue_info(&vhost, "work").await.unwrap()["messages_dlx"], 0, "work let go of it");
    let parked = support::drain(&c, "park").await;
    let ids: Vec<String> = parked.iter().map(|m| support::message_id(&m.properties)).collect();
    assert_eq!(ids, ["filler"], "the full target refused it: the dead letter of `work` is lost");

    // A dead-letter exchange set by a policy (RabbitMQ's advice for every quorum queue) is at
    // most once all the same.
    let definition = json!({"dead-letter-exchange": "", "dead-letter-routing-key": "park"});
    support::declare_policy(broker, &vhost.name, false, "dead-letters", "^blanket$", definition).await;
    queue(&ch, "blanket", args(&[("x-queue-type", Str("quorum")), ("x-delivery-limit", Int(5))])).await;
    let (code, found) = judged(&vhost);
    assert_eq!(
        (code, found),
        (
            Some(1),
            vec![
                judged_as("at-most-once-dead-lettering", "error", &["blanket"]),
                judged_as("at-most-once-dead-lettering", "error", &["work"]),
            ]
        )
    );
    let message = finding_on(&vhost, "at-most-once-dead-lettering", "blanket");
    assert!(message.contains("policy `dead-letters`"), "{message}");
}

/// The message of the finding of `rule` on `queue`.
#[track_caller]
fn finding_on(vhost: &Vhost, rule: &str, queue: &str) -> String {
    let (_, reports) = vhost.json(&["inspect", "--vhost", &vhost.name]);
    let f = support::one(&reports["vhosts"][0]["hazards"], &json!({"rule": rule, "queues": [queue]}));
    f["message"].as_str().unwrap().to_string()
}

/// Off any retry path, a queue whose TTL or length limit drops messages may mean to (a cache, a
/// bounded buffer), and so may one with a delivery limit of its own and no dead-letter exchange:
/// warnings. RabbitMQ 4's default delivery limit is no one's choice: an error.
async fn drops_off_a_retry_path_are_warnings(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-drops-warned").await;
    queue(&ch, "cache", args(&[("x-message-ttl", Int(100))])).await;
    queue(&ch, "bounded", args(&[("x-max-length", Int(1))])).await;
    queue(&ch, "limited", args(&[("x-queue-type", Str("quorum")), ("x-delivery-limit", Int(3))])).await;
    queue(&ch, "defaulted", args(&[("x-queue-type", Str("quorum"))])).await;
    support::publish(&c, "", "cache", &["m".to_string()]).await;
    support::wait_for_count(&c, "cache", 0, Duration::from_secs(5)).await;
    support::publish(&c, "", "bounded", &["older".to_string(), "newer".to_string()]).await;
    let left = support::drain(&c, "bounded").await;
    assert_eq!(left.iter().map(|m| support::message_id(&m.properties)).collect::<Vec<_>>(), ["newer"], "drop-head");
    // A quorum queue does not know reject-publish-dlx: it drops the head all the same.
    let overflow = [
        ("x-queue-type", Str("quorum")),
        ("x-delivery-limit", Int(3)),
        ("x-max-length", Int(1)),
        ("x-overflow", Str("reject-publish-dlx")),
    ];
    queue(&ch, "overflowing", args(&overflow)).await;
    support::publish(&c, "", "overflowing", &["older".to_string(), "newer".to_string()]).await;
    let left = support::drain(&c, "overflowing").await;
    assert_eq!(left.iter().map(|m| support::message_id(&m.properties)).collect::<Vec<_>>(), ["newer"], "drop-head");
    let (code, found) = judged(&vhost);
    let mut expected = vec![
        judged_as("max-length-drops", "warning", &["bounded"]),
        judged_as("max-length-drops", "warning", &["overflowing"]),
        judged_as("delivery-limit-drops", "warning", &["overflowing"]),
        judged_as("message-ttl-drops", "warning", &["cache"]),
        judged_as("delivery-limit-drops", "warning", &["limited"]),
    ];
    if broker.major() >= 4 {
        expected.push(judged_as("delivery-limit-drops", "error", &["defaulted"]));
    } else {
        // 3.x has no default limit: nothing drops, nothing bounds the redeliveries.
        expected.push(judged_as("redeliveries-unbounded", "warning", &["defaulted"]));
    }
    expected.sort();
    assert_eq!((code, found), (Some(1), expected));
}

/// On a retry path, where every message is one someone means to retry or park, the same drops
/// are errors: a hand-built wait queue that forgot its dead-letter exchange loses what it
/// holds when the TTL ends; a dead-letter target with a length limit pushes the oldest out; a
/// quorum target with a delivery limit and nowhere to send drops what fails there.
async fn drops_on_a_retry_path_are_errors(broker: Broker) {
    let (vhost, c, ch) = trap(broker, "hazard-drops-errors").await;
    let into =
        |target: &'static str| args(&[("x-dead-letter-exchange", Str("")), ("x-dead-letter-routing-key", Str(target))]);
    queue(&ch, "retry", args(&[("x-message-ttl", Int(200))])).await;
    queue(&ch, "held", args(&[("x-max-length", Int(1))])).await;
    queue(&ch, "again", args(&[("x-queue-type", Str("quorum")), ("x-delivery-limit", Int(3))])).await;
    queue(&ch, "work", into("retry")).await;
    queue(&ch, "orders", into("held")).await;
    queue(&ch, "payments", into("again")).await;

    support::publish(&c, "", "work", &["m".to_string()]).await;
    reject_one(&ch, "work").await;
    support::wait_for_count(&c, "retry", 1, Duration::from_secs(5)).await;
    support::wait_for_count(&c, "retry", 0, Duration::from_secs(5)).await;
    assert_eq!(total(&c, &["work", "retry"]).await, 0, "expired in `retry` with nowhere to go: lost");

    support::publish(&c, "", "orders", &["first".to_string(), "second".to_string()]).await;
    reject_one(&ch, "orders").await;
    reject_one(&ch, "orders").await;
    support::wait_for_count(&c, "orders", 0, Duration::from_secs(5)).await;
    let held = support::drain(&c, "held").await;
    assert_eq!(held.iter().map(|m| support::message_id(&m.properties)).collect::<Vec<_>>(), ["second"]);

    let (code, found) = judged(&vhost);
    let mut expected = vec![
        judged_as("delivery-limit-drops", "error", &["again"]),
        judged_as("max-length-drops", "error", &["held"]),
        judged_as("message-ttl-drops", "error", &["retry"]),
    ];
    expected.sort();
    assert_eq!((code, found), (Some(1), expected));
}
