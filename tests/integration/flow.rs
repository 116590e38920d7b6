//! Real messages through every hop: published to the main exchange, failed by the example
//! consumer that follows `hopper contract`, and parked in the dead-letter queue after exactly
//! `max_attempts` deliveries, each delay honoured, nothing lost, duplicated or copied elsewhere.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lapin::options::{QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;

use lapin::message::Delivery;

use crate::retry_consumer::{self, Contract, Contracts, Outcome};
use serde_json::json;

use crate::support::{self, Broker, Database, RunningConsumer, Vhost, on_every_broker};

/// One delivery as the consumer saw it.
#[derive(Debug, Clone)]
struct Seen {
    queue: String,
    attempt: u32,
    at: Instant,
    deaths: Vec<(String, String)>,
}

type Log = Arc<Mutex<BTreeMap<String, Vec<Seen>>>>;

/// Fails every message, logging each delivery.
struct Failing {
    log: Log,
}

impl retry_consumer::Handler for Failing {
    async fn handle(&self, _tx: &tokio_postgres::Transaction<'_>, delivery: &Delivery, attempt: u32) -> Outcome {
        let id = support::message_id(&delivery.properties);
        self.log.lock().unwrap().entry(id).or_default().push(Seen {
            queue: delivery.routing_key.to_string(),
            attempt,
            at: Instant::now(),
            deaths: support::deaths(&delivery.properties),
        });
        Outcome::Failed
    }
}

/// Starts the example consumer, with a database schema of its own; it fails every message.
async fn failing_consumer(vhost: &Vhost, contract: &Contract) -> (RunningConsumer, Log, Database) {
    let log: Log = Arc::default();
    let database = Database::new(&vhost.name).await;
    let handler = Arc::new(Failing { log: log.clone() });
    let consumer = RunningConsumer::start(vhost, &database, "flow", contract, handler);
    (consumer, log, database)
}

fn contract_of(vhost: &Vhost, spec: &std::path::Path) -> Contract {
    let out = vhost.hopper(&["contract", "--format", "json", spec.to_str().unwrap()]);
    assert!(out.status.success());
    let mut document: Contracts = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(document.schema_version, 1);
    document.contracts.remove(0)
}

async fn every_hop(broker: Broker, strategy: &str, queue_type: &str) {
    let vhost = Vhost::new(broker, &format!("flow-{strategy}-{queue_type}")).await;
    let spec = vhost.spec(
        "orders.toml",
        &format!(
            r#"
            [topology.orders]
            exchange = "orders"
            exchange_type = "topic"
            routing_keys = ["order.*"]
            delays = ["300ms", "700ms"]
            max_attempts = 3
            strategy = "{strategy}"
            queue_type = "{queue_type}"
            "#
        ),
    );
    let out = vhost.hopper(&["apply", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let (code, again) = vhost.json(&["apply", spec.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let actions = support::actions(&again);
    assert_eq!(actions.keys().collect::<Vec<_>>(), ["in_sync"], "a second apply must change nothing: {again:#}");

    // Another application's queue on the main exchange: it must see each message once, never a retry.
    let admin = vhost.connect().await;
    let channel = admin.create_channel().await.unwrap();
    channel
        .queue_declare(
            "audit".into(),
            QueueDeclareOptions { durable: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .queue_bind("audit".into(), "orders".into(), "#".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .unwrap();

    let contract = contract_of(&vhost, &spec);
    let (consumer, log, _database) = failing_consumer(&vhost, &contract).await;
    let ids: Vec<String> = (0..5).map(|i| format!("order-{i}")).collect();
    // One producer counts attempts from 0: it must still get every attempt, and never be acked.
    let zero_based = |id: &str| {
        (id == "order-0").then(|| {
            let mut h = FieldTable::default();
            h.insert("hopper-attempt".into(), lapin::types::AMQPValue::ShortShortUInt(0));
            h
        })
    };
    support::publish_with(&admin, "orders", "order.created", &ids, zero_based).await;
    support::wait_for_count(&admin, "orders.dlq", ids.len() as u32, Duration::from_secs(60)).await;
    // Give a stray duplicate, if any, the time to show up before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    consumer.stop().await;

    let log = log.lock().unwrap().clone();
    assert_eq!(log.keys().cloned().collect::<Vec<_>>(), ids, "every message and only them");
    for (id, seen) in &log {
        let attempts: Vec<u32> = seen.iter().map(|s| s.attempt).collect();
        assert_eq!(attempts, vec![1, 2, 3], "{id}: exactly max_attempts deliveries, in order");
        for (k, s) in seen.iter().enumerate() {
            let attempt = k as u32 + 1;
            if attempt > 1 {
                // Redelivered through the default exchange: the routing key is the queue's name.
                let queue = &contract.consume.iter().find(|q| q.attempt.is_none_or(|a| a == attempt)).unwrap().queue;
                assert_eq!(&s.queue, queue, "{id}: attempt {attempt} delivered from {queue}");
            }
            if attempt > 1 {
                let hop = attempt - 1;
                let wait = if strategy == "chain" {
                    format!("orders.hop-{hop}.wait-{}", ["300ms", "700ms"][hop as usize - 1])
                } else {
                    format!("orders.wait-{}", ["300ms", "700ms"][hop as usize - 1])
                };
                assert!(
                    s.deaths.contains(&(wait.clone(), "expired".to_string())),
                    "{id}: attempt {attempt} went through {wait}: x-death was {:?}",
                    s.deaths
                );
                let delay = Duration::from_millis([300, 700][hop as usize - 1]);
                // The broker's timers run on Erlang's monotonic clock, which time correction may
                // speed up by as much as 1% against the OS clock ours read: 10 ms and 1% of slack.
                let waited = s.at - seen[k - 1].at + Duration::from_millis(10) + delay / 100;
                assert!(waited >= delay, "{id}: waited {waited:?} before attempt {attempt}, less than {delay:?}");
            }
        }
    }

    let parked = support::drain(&admin, "orders.dlq").await;
    let mut parked_ids: Vec<String> = parked.iter().map(|m| support::message_id(&m.delivery.properties)).collect();
    parked_ids.sort();
    assert_eq!(parked_ids, ids, "each message parked exactly once");
    for m in &parked {
        // Every property survives the retries (only `expiration` may be dropped).
        let id = support::message_id(&m.delivery.properties);
        let sent = support::rich_properties(&id);
        let got = &m.delivery.properties;
        assert_eq!(
            (got.correlation_id(), got.content_type(), got.content_encoding(), got.kind(), got.app_id()),
            (sent.correlation_id(), sent.content_type(), sent.content_encoding(), sent.kind(), sent.app_id()),
            "{id}: properties kept"
        );
        assert_eq!(
            (got.reply_to(), got.priority(), got.timestamp()),
            (sent.reply_to(), sent.priority(), sent.timestamp())
        );
        assert_eq!(got.delivery_mode(), &Some(2), "{id}: still persistent");
        let last = if strategy == "chain" { "orders.attempt-3" } else { "orders" };
        assert_eq!(support::deaths(&m.delivery.properties).first(), Some(&(last.to_string(), "rejected".to_string())));
    }
    assert_eq!(
        support::count(&admin, "audit").await,
        Some(ids.len() as u32),
        "no retry copied to the main exchange's other queues"
    );
    for q in [
        "orders",
        "orders.attempt-2",
        "orders.attempt-3",
        "orders.wait-300ms",
        "orders.wait-700ms",
        "orders.hop-1.wait-300ms",
        "orders.hop-2.wait-700ms",
    ] {
        if let Some(n) = support::count(&admin, q).await {
            assert_eq!(n, 0, "{q} is empty at the end");
        }
    }
}

/// Messages wait in the 5s wait queue while `apply` changes the delay to 1s: the old queue is
/// kept, still dead-letters into the main queue, and every waiting message is delivered.
async fn delay_change(broker: Broker, strategy: &str) {
    let vhost = Vhost::new(broker, &format!("delay-change-{strategy}")).await;
    let topology = |delay: &str| {
        format!("[topology.orders]\ndelays = [\"{delay}\"]\nmax_attempts = 2\nstrategy = \"{strategy}\"\n")
    };
    let spec = vhost.spec("orders.toml", &topology("5s"));
    assert_eq!(vhost.hopper(&["apply", spec.to_str().unwrap()]).status.code(), Some(0));
    let old_wait = if strategy == "chain" { "orders.hop-1.wait-5s" } else { "orders.wait-5s" };
    let new_wait = if strategy == "chain" { "orders.hop-1.wait-1s" } else { "orders.wait-1s" };

    // First deliveries fail, so every message is now waiting in the old wait queue.
    let contract = contract_of(&vhost, &spec);
    let (consumer, log, _database) = failing_consumer(&vhost, &contract).await;
    let admin = vhost.connect().await;
    let ids: Vec<String> = (0..5).map(|i| format!("waiting-{i}")).collect();
    support::publish(&admin, "orders", "orders", &ids).await;
    support::wait_for_count(&admin, old_wait, ids.len() as u32, Duration::from_secs(20)).await;
    consumer.stop().await;
    {
        // Each message delivered once, and failed: none is missing from the log.
        let log = log.lock().unwrap();
        assert_eq!(log.keys().collect::<Vec<_>>(), ids.iter().collect::<Vec<_>>(), "{log:?}");
        assert!(log.values().all(|s| s.len() == 1), "{log:?}");
    }

    let spec = vhost.spec("orders.toml", &topology("1s"));
    let (code, report) = vhost.json(&["apply", "--prune", spec.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let steps = support::steps(&report);
    support::one(steps, &json!({"action": "create", "object": {"object": "queue", "name": new_wait}}));
    support::one(
        steps,
        &json!({"action": "create", "object": {"object": "binding", "source": "orders.retry", "destination": new_wait, "routing_key": "1"}}),
    );
    support::one(
        steps,
        &json!({"action": "unbind", "binding": {"source": "orders.retry", "destination_type": "queue", "destination": old_wait, "routing_key": "1"}}),
    );
    // Kept while it holds messages.
    support::one(steps, &json!({"action": "extra", "queue": old_wait, "messages": 5}));
    support::none(steps, &json!({"action": "delete"}));
    assert_eq!(support::count(&admin, old_wait).await, Some(5), "apply did not touch the waiting messages");

    // A message failing now goes through the new wait queue; the waiting ones still arrive.
    let (consumer, log, _database) = failing_consumer(&vhost, &contract_of(&vhost, &spec)).await;
    support::publish(&admin, "orders", "orders", &["fresh".to_string()]).await;
    support::wait_for_count(&admin, "orders.dlq", ids.len() as u32 + 1, Duration::from_secs(30)).await;
    consumer.stop().await;
    let log = log.lock().unwrap().clone();
    for id in &ids {
        let seen = &log[id];
        assert_eq!(seen.len(), 1, "{id}: delivered once more, at its second attempt");
        assert_eq!(seen[0].attempt, 2);
        assert!(
            seen[0].deaths.contains(&(old_wait.to_string(), "expired".to_string())),
            "{id} came out of the old wait queue"
        );
    }
    assert!(log["fresh"][1].deaths.contains(&(new_wait.to_string(), "expired".to_string())));
    let mut parked: Vec<String> = support::drain(&admin, "orders.dlq")
        .await
        .iter()
        .map(|m| support::message_id(&m.delivery.properties))
        .collect();
    parked.sort();
    let mut expected = ids.clone();
    expected.push("fresh".into());
    expected.sort();
    assert_eq!(parked, expected, "nothing lost, nothing duplicated");

    // Empty now: pruned, once the management API's lagging count agrees (hopper keeps a queue
    // while either count says it holds messages).
    let start = Instant::now();
    let mut deleted = Vec::new();
    while support::count(&admin, old_wait).await.is_some() {
        assert!(start.elapsed() < Duration::from_secs(30), "{old_wait} was never pruned");
        let (code, report) = vhost.json(&["apply", "--prune", spec.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{report:#}");
        deleted.extend(support::all(support::steps(&report), &json!({"action": "delete"})).into_iter().cloned());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(deleted.len(), 1, "{deleted:#?}");
    assert_eq!(deleted[0]["queue"], old_wait, "{deleted:#?}");
}

/// Jitter, with real messages: 400 messages failed at the same instant come back spread over
/// the hop's buckets (each used, a histogram printed), each after at least its bucket's TTL, and
/// each is still delivered exactly max_attempts times and parked once. diff and lint know the
/// buckets.
async fn jittered_retries_spread(broker: Broker) {
    let vhost = Vhost::new(broker, "flow-jitter").await;
    let spec = vhost.spec(
        "orders.toml",
        r#"
        [topology.orders]
        delays = ["1s"]
        max_attempts = 3
        jitter = 1.0
        jitter_buckets = 5
        idempotency_key = "message_id"
        "#,
    );
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.hopper(&["apply", spec]).status.code(), Some(0));
    assert_eq!(vhost.json(&["diff", spec]).0, Some(0), "diff knows the buckets");
    assert_eq!(vhost.hopper(&["lint", spec]).status.code(), Some(0), "lint finds nothing wrong with them");
    let buckets: BTreeMap<String, u64> =
        [("1s", 1000), ("1250ms", 1250), ("1500ms", 1500), ("1750ms", 1750), ("2s", 2000)]
            .into_iter()
            .map(|(d, ms)| (format!("orders.wait-{d}"), ms))
            .collect();

    let contract = contract_of(&vhost, std::path::Path::new(spec));
    let (consumer, log, _database) = failing_consumer(&vhost, &contract).await;
    let admin = vhost.connect().await;
    let ids: Vec<String> = (0..400).map(|i| format!("burst-{i:03}")).collect();
    support::publish(&admin, "orders", "orders", &ids).await;
    support::wait_for_count(&admin, "orders.dlq", ids.len() as u32, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    consumer.stop().await;

    let log = log.lock().unwrap().clone();
    assert_eq!(log.keys().cloned().collect::<Vec<_>>(), ids, "every message and only them");
    let mut histogram: BTreeMap<u64, usize> = BTreeMap::new();
    for (id, seen) in &log {
        assert_eq!(
            seen.iter().map(|s| s.attempt).collect::<Vec<_>>(),
            [1, 2, 3],
            "{id}: exactly max_attempts deliveries"
        );
        for k in 1..seen.len() {
            // The most recent death names the bucket this retry waited in.
            let (queue, reason) = seen[k].deaths.first().cloned().expect("a retried message has an x-death");
            assert_eq!(reason, "expired", "{id}");
            let ttl =
                *buckets.get(&queue).unwrap_or_else(|| panic!("{id} waited in {queue}, not one of the hop's buckets"));
            *histogram.entry(ttl).or_default() += 1;
            // The broker stamps and expires in whole milliseconds of its own clock, whose timers
            // Erlang's time correction may speed up by as much as 1% against ours: a retry may
            // come back a few ms before a full TTL of ours has passed, never a bucket early.
            let waited = seen[k].at - seen[k - 1].at + Duration::from_millis(10) + Duration::from_millis(ttl) / 100;
            assert!(waited >= Duration::from_millis(ttl), "{id}: waited {waited:?} in {queue}, less than its TTL");
        }
    }
    eprintln!("retries per bucket (TTL ms: count): {histogram:?}");
    assert_eq!(histogram.len(), buckets.len(), "each bucket used: {histogram:?}");
    assert_eq!(histogram.values().sum::<usize>(), 800);
    let parked = support::drain(&admin, "orders.dlq").await;
    assert_eq!(parked.len(), ids.len(), "each message parked exactly once");
}

/// Changing jitter on a live topology is a delay change per bucket: new buckets are created and
/// bound first, old ones keep what they hold until their TTL hands it back, then go.
async fn jitter_change_keeps_waiting_messages(broker: Broker) {
    let vhost = Vhost::new(broker, "jitter-change").await;
    let topology = |jitter: &str, buckets: u32| {
        format!(
            "[topology.orders]\ndelays = [\"2s\"]\nmax_attempts = 2\njitter = {jitter}\njitter_buckets = {buckets}\n"
        )
    };
    let spec = vhost.spec("orders.toml", &topology("0.5", 3));
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.hopper(&["apply", spec]).status.code(), Some(0));
    let admin = vhost.connect().await;
    let mut ids = Vec::new();
    // As a consumer's copies would: waiting in each of the three buckets (2s, 2.5s, 3s).
    for bucket in 1..=3 {
        let batch: Vec<String> = (0..10).map(|i| format!("bucket-{bucket}-{i}")).collect();
        support::publish(&admin, "orders.retry", &format!("1.{bucket}"), &batch).await;
        ids.extend(batch);
    }
    vhost.spec("orders.toml", &topology("0.2", 2));
    let (code, report) = vhost.json(&["apply", "--prune", spec]);
    assert_eq!(code, Some(0), "{report:#}");
    let steps = support::steps(&report);
    support::one(steps, &json!({"action": "create", "object": {"object": "queue", "name": "orders.wait-2400ms"}}));
    support::none(steps, &json!({"action": "delete"}));
    // Every waiting message comes back to the main queue; then, once consumers run the new
    // contract (key 1.3 is gone), the old buckets go.
    support::wait_for_count(&admin, "orders", ids.len() as u32, Duration::from_secs(30)).await;
    let start = Instant::now();
    loop {
        vhost.hopper(&["apply", "--prune", "--consumers-upgraded", spec]);
        if vhost.json(&["diff", spec]).0 == Some(0) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the old buckets were never pruned");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut back: Vec<String> =
        support::drain(&admin, "orders").await.iter().map(|m| support::message_id(&m.delivery.properties)).collect();
    back.sort();
    ids.sort();
    assert_eq!(back, ids, "every waiting message back once");
}

on_every_broker!(
    jittered_retries_spread,
    jitter_change_keeps_waiting_messages,
    republish_quorum = every_hop("republish", "quorum"),
    republish_classic = every_hop("republish", "classic"),
    chain_quorum = every_hop("chain", "quorum"),
    chain_classic = every_hop("chain", "classic"),
    delay_change_republish = delay_change("republish"),
    delay_change_chain = delay_change("chain"),
    native_retry,
);

/// RabbitMQ 4.3's native delayed retry, with real messages: the example consumer rejects with
/// requeue as the contract says, the broker holds each message back min × n (capped at max)
/// before the next attempt, and dead-letters it after exactly max_attempts deliveries, once. On
/// older releases apply refuses before changing anything.
async fn native_retry(broker: Broker) {
    let vhost = Vhost::new(broker, "flow-native").await;
    let spec = vhost.spec(
        "orders.toml",
        r#"
        [topology.orders]
        exchange_type = "topic"
        routing_keys = ["order.*"]
        strategy = "native"
        backoff = { initial = "400ms", max = "600ms", shape = "linear" }
        max_attempts = 4
        "#,
    );
    let spec = spec.to_str().unwrap();
    if broker.version() < (4, 3) {
        let out = vhost.hopper(&["apply", spec]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = support::text(&out.stderr);
        assert!(stderr.contains("needs RabbitMQ 4.3") && stderr.contains("nothing was changed"), "{stderr}");
        assert_eq!(support::count(&vhost.connect().await, "orders").await, None, "nothing was created");
        return;
    }
    let (code, report) = vhost.json(&["apply", spec]);
    assert_eq!(code, Some(0), "{report:#}");
    let (code, diff) = vhost.json(&["diff", spec]);
    assert_eq!((code, &diff["in_sync"]), (Some(0), &json!(true)), "{diff:#}");

    let contract = contract_of(&vhost, std::path::Path::new(spec));
    let (consumer, log, _database) = failing_consumer(&vhost, &contract).await;
    let admin = vhost.connect().await;
    let ids: Vec<String> = (0..5).map(|i| format!("order-{i}")).collect();
    support::publish(&admin, "orders", "order.created", &ids).await;
    support::wait_for_count(&admin, "orders.dlq", ids.len() as u32, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    consumer.stop().await;

    let log = log.lock().unwrap().clone();
    assert_eq!(log.keys().cloned().collect::<Vec<_>>(), ids, "every message and only them");
    for (id, seen) in &log {
        let attempts: Vec<u32> = seen.iter().map(|s| s.attempt).collect();
        assert_eq!(attempts, vec![1, 2, 3, 4], "{id}: exactly max_attempts deliveries, numbered by the broker");
        for k in 1..seen.len() {
            // After the n-th failure the broker waits 400 ms × n, at most 600 ms.
            let delay = Duration::from_millis((400 * k as u64).min(600));
            let waited = seen[k].at - seen[k - 1].at;
            assert!(waited >= delay, "{id}: waited {waited:?} before attempt {}, less than {delay:?}", k + 1);
        }
    }
    let parked = support::drain(&admin, "orders.dlq").await;
    let mut parked_ids: Vec<String> = parked.iter().map(|m| support::message_id(&m.delivery.properties)).collect();
    parked_ids.sort();
    assert_eq!(parked_ids, ids, "each message dead-lettered exactly once");
    for m in &parked {
        let deaths = support::deaths(&m.delivery.properties);
        assert_eq!(deaths, [("orders".to_string(), "rejected".to_string())], "one death: the last attempt's reject");
    }
    assert_eq!(support::count(&admin, "orders").await, Some(0));
}
