//! The example consumer under fire, on real brokers and a real PostgreSQL: 2,000 messages, some
//! failing through every hop; the broker closing the consumer's connection three times; 200
//! duplicates published meanwhile. Each business key is handled once (counted in the
//! database), every message is acked or parked, and the parking lot holds exactly the keys that
//! failed max_attempts times. Also the contract's duplicates and key, and lint's warning.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lapin::message::Delivery;
use serde_json::{Value, json};

use crate::retry_consumer::{self, Contract, Contracts, Outcome};
use crate::support::{self, Broker, Database, RunningConsumer, Vhost, on_every_broker};

const MESSAGES: usize = 2_000;
const DUPLICATES: usize = 200;
const MAX_ATTEMPTS: u32 = 4;
const WAIT_QUEUES: [&str; 3] = ["orders.wait-100ms", "orders.wait-200ms", "orders.wait-300ms"];

fn key(i: usize) -> String {
    format!("order-{i:04}")
}

/// The delivery number at which key `i` succeeds, or `None` if it never does: a tenth never,
/// a tenth each at the second, third and fourth (last) delivery, through one, two and three
/// hops; the rest at once.
fn succeeds_at(i: usize) -> Option<u32> {
    match i % 10 {
        0 => None,
        1 => Some(2),
        2 => Some(3),
        3 => Some(4),
        _ => Some(1),
    }
}

/// Every handler call: key -> the attempts it was called with.
type Calls = Arc<Mutex<BTreeMap<String, Vec<u32>>>>;

/// The business: its effect is a row in `effects`, which has no unique key, so that a key
/// handled twice would show as two rows.
struct Business {
    calls: Calls,
}

impl retry_consumer::Handler for Business {
    async fn handle(&self, tx: &tokio_postgres::Transaction<'_>, delivery: &Delivery, attempt: u32) -> Outcome {
        let key = support::message_id(&delivery.properties);
        self.calls.lock().unwrap().entry(key.clone()).or_default().push(attempt);
        let i: usize = key["order-".len()..].parse().expect("a test key");
        match succeeds_at(i) {
            Some(at) if attempt >= at => {
                let attempt = attempt as i32;
                match tx.execute("INSERT INTO effects (key, attempt) VALUES ($1, $2)", &[&key, &attempt]).await {
                    Ok(_) => Outcome::Done,
                    Err(_) => Outcome::Failed,
                }
            }
            _ => Outcome::Failed,
        }
    }
}

/// The consumer's connections the management API lists now, by name.
async fn connections(vhost: &Vhost, consumer: &str) -> Vec<String> {
    let path = format!("/vhosts/{}/connections", hopper::broker::http::segment(&vhost.name));
    let listed: Vec<Value> = support::api(vhost.broker).get(&path).await.expect("list connections");
    listed
        .iter()
        .filter(|c| c["client_properties"]["connection_name"] == consumer)
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// Waits for a connection of the consumer's that is not among `seen`, and returns its name.
async fn new_connection(vhost: &Vhost, consumer: &str, seen: &BTreeSet<String>) -> String {
    let start = Instant::now();
    loop {
        if let Some(name) = connections(vhost, consumer).await.into_iter().find(|n| !seen.contains(n)) {
            return name;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the consumer never connected again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The broker closes a connection, as an operator would: `DELETE /api/connections/{name}`.
async fn close_connection(vhost: &Vhost, name: &str) {
    let path = format!("/connections/{}", hopper::broker::http::segment(name));
    support::api(vhost.broker).delete(&path).await.unwrap_or_else(|e| panic!("close {name}: {e:?}"));
}

async fn handled_keys(db: &tokio_postgres::Client) -> i64 {
    db.query_one("SELECT count(DISTINCT key) FROM effects", &[]).await.unwrap().get(0)
}

/// Waits until `n` keys have been handled.
async fn wait_for_handled(db: &tokio_postgres::Client, n: i64) {
    let start = Instant::now();
    loop {
        let handled = handled_keys(db).await;
        if handled >= n {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(180), "{handled} keys handled, waited for {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ready messages in the main queue and every wait queue (a passive declaration: exact).
async fn in_flight(admin: &lapin::Connection) -> u32 {
    let mut total = 0;
    for q in std::iter::once("orders").chain(WAIT_QUEUES) {
        total += support::count(admin, q).await.expect("the queue exists");
    }
    total
}

fn contract(vhost: &Vhost, spec: &str) -> (Contract, Value) {
    let (code, json) = vhost.json(&["contract", spec]);
    assert_eq!(code, Some(0), "{json:#}");
    let mut document: Contracts = serde_json::from_value(json.clone()).unwrap();
    (document.contracts.remove(0), json["contracts"][0].clone())
}

async fn survives_the_broker_and_duplicates(broker: Broker) {
    let vhost = Vhost::new(broker, "consumer").await;
    let spec = vhost.spec(
        "orders.toml",
        r#"
        [topology.orders]
        delays = ["100ms", "200ms", "300ms"]
        max_attempts = 4
        idempotency_key = "message_id"
        "#,
    );
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.hopper(&["apply", spec]).status.code(), Some(0));
    let (contract, json) = contract(&vhost, spec);
    assert_eq!(json["idempotency_key"]["from"], "message_id");
    assert_eq!(json["idempotency_key"]["stated"], true);

    let database = Database::new("consumer").await;
    let db = database.client().await;
    db.batch_execute("CREATE TABLE effects (key text NOT NULL, attempt int NOT NULL)").await.unwrap();
    let calls: Calls = Arc::default();
    let name = format!("retry_consumer {}", vhost.name);
    let start =
        || RunningConsumer::start(&vhost, &database, &name, &contract, Arc::new(Business { calls: calls.clone() }));
    let mut consumer = start();
    let admin = vhost.connect().await;

    // Published in three parts, the broker closing the consumer's connection after each, once
    // the consumer has handled some: there is always work left when it goes.
    let mut seen = BTreeSet::from([new_connection(&vhost, &name, &BTreeSet::new()).await]);
    let duplicated: Vec<String> = (0..DUPLICATES).map(|k| key(k * 7)).collect();
    let parts = [(0..700, 100), (700..1_400, 800), (1_400..MESSAGES, 1_300)];
    for (n, (part, handled)) in parts.into_iter().enumerate() {
        let ids: Vec<String> = part.map(key).collect();
        support::publish(&admin, "orders", "orders", &ids).await;
        if n == 1 {
            // Copies of keys handled, in flight, waiting to retry, or failing for good.
            support::publish(&admin, "orders", "orders", &duplicated).await;
        }
        wait_for_handled(&db, handled).await;
        let current = new_connection(&vhost, &name, &BTreeSet::new()).await;
        close_connection(&vhost, &current).await;
        seen.insert(current);
        let next = new_connection(&vhost, &name, &seen).await;
        eprintln!("closure {}: {} keys handled; the consumer came back as {next}", n + 1, handled_keys(&db).await);
        seen.insert(next);
    }
    assert!(seen.len() >= 4, "the consumer connected once, then after each of 3 closures: {seen:?}");

    // Everything that can succeed has, once; the failing ones and their duplicates are parked.
    let succeeding: BTreeMap<String, u32> =
        (0..MESSAGES).filter_map(|i| succeeds_at(i).map(|at| (key(i), at))).collect();
    let failing: BTreeSet<String> = (0..MESSAGES).filter(|i| succeeds_at(*i).is_none()).map(key).collect();
    let parked_at_least = (failing.len() + duplicated.iter().filter(|k| failing.contains(*k)).count()) as u32;
    wait_for_handled(&db, succeeding.len() as i64).await;
    support::wait_for_count_at_least(&admin, "orders.dlq", parked_at_least, Duration::from_secs(120)).await;
    // Until nothing is in flight with the consumer stopped (so that it holds nothing unacked):
    // then every message has been acked or parked.
    let start_waiting = Instant::now();
    loop {
        while in_flight(&admin).await > 0 {
            assert!(start_waiting.elapsed() < Duration::from_secs(120), "messages still in flight");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        consumer.stop().await;
        // Waiting retries come back to the main queue on their TTL.
        for q in WAIT_QUEUES {
            support::wait_for_count(&admin, q, 0, Duration::from_secs(10)).await;
        }
        if support::count(&admin, "orders").await == Some(0) {
            break;
        }
        consumer = start();
    }

    // Each key handled once, at the delivery it succeeds at: counted in the database.
    let rows = db.query("SELECT key, count(*), min(attempt) FROM effects GROUP BY key", &[]).await.unwrap();
    let handled: BTreeMap<String, (i64, i32)> = rows.iter().map(|r| (r.get(0), (r.get(1), r.get(2)))).collect();
    assert_eq!(handled.keys().collect::<Vec<_>>(), succeeding.keys().collect::<Vec<_>>(), "the keys that succeed");
    for (key, (count, attempt)) in &handled {
        assert_eq!(*count, 1, "{key} handled {count} times");
        assert_eq!(*attempt as u32, succeeding[key], "{key} succeeded at its attempt");
    }
    let through: BTreeMap<u32, usize> = succeeding.values().fold(BTreeMap::new(), |mut m, at| {
        *m.entry(*at).or_default() += 1;
        m
    });
    assert_eq!(through, BTreeMap::from([(1, 1_200), (2, 200), (3, 200), (4, 200)]), "some through every hop");
    let recorded: i64 =
        db.query_one("SELECT count(*) FROM processed WHERE topology = 'orders'", &[]).await.unwrap().get(0);
    assert_eq!(recorded, succeeding.len() as i64, "one key recorded per business effect");

    // The parking lot: exactly the keys that failed max_attempts times, each parked from its
    // last attempt (a duplicate of one is parked too: it failed as many times).
    let parked = support::drain(&admin, "orders.dlq").await;
    let parked_keys: BTreeSet<String> = parked.iter().map(|m| support::message_id(&m.delivery.properties)).collect();
    assert_eq!(parked_keys, failing, "the keys that never succeed, and only them");
    assert!(parked.len() as u32 >= parked_at_least, "{} parked, at least {parked_at_least}", parked.len());
    for m in &parked {
        let attempt = m.delivery.properties.headers().as_ref().and_then(|h| h.inner().get("hopper-attempt").cloned());
        assert_eq!(
            attempt,
            Some(lapin::types::AMQPValue::LongLongInt(MAX_ATTEMPTS.into())),
            "parked at its last attempt"
        );
        assert_eq!(
            support::deaths(&m.delivery.properties).first(),
            Some(&("orders".to_string(), "rejected".to_string()))
        );
    }
    let calls = calls.lock().unwrap().clone();
    for key in &failing {
        let attempts: BTreeSet<u32> = calls[key].iter().copied().collect();
        assert_eq!(attempts, (1..=MAX_ATTEMPTS).collect(), "{key} failed at every attempt");
    }
    eprintln!(
        "{} messages published ({DUPLICATES} duplicates), {} handler calls, {} keys handled once, {} parked ({} beyond one per failing copy published), {} consumer connections",
        MESSAGES + DUPLICATES,
        calls.values().map(Vec::len).sum::<usize>(),
        handled.len(),
        parked.len(),
        parked.len() as u32 - parked_at_least,
        seen.len()
    );
    drop(db);
}

on_every_broker!(survives_the_broker_and_duplicates);

/// The contract names each point a strategy delivers twice, in the JSON and in the table.
#[test]
fn the_contract_names_every_duplicate_and_its_key() {
    let dir = std::env::temp_dir().join(support::unique("hopper-consumer-contract"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("orders.toml");
    std::fs::write(
        &path,
        "[topology.orders]\ndelays = [\"1s\"]\nidempotency_key = { header = \"order-id\" }\n\n[topology.audit]\nstrategy = \"native\"\ndelays = [\"1s\"]\n",
    )
    .unwrap();
    let path = path.to_str().unwrap();
    let (code, json) = support::hopper_json(None, &["contract", path]);
    assert_eq!(code, Some(0));
    let orders = support::one(&json["contracts"], &json!({"topology": "orders"}));
    assert_eq!(
        orders["idempotency_key"],
        json!({"from": "header", "header": "order-id", "stated": true, "rule": orders["idempotency_key"]["rule"]})
    );
    let causes = |c: &Value| -> Vec<String> {
        c["duplicates"].as_array().unwrap().iter().map(|d| d["cause"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(
        causes(orders),
        [
            "consumer_crash_before_ack",
            "copy_confirmed_ack_lost",
            "redrive",
            "migration",
            "retry_binding_moved",
            "producer_resend"
        ]
    );
    let audit = support::one(&json["contracts"], &json!({"topology": "audit"}));
    assert_eq!(
        (&audit["idempotency_key"]["from"], &audit["idempotency_key"]["stated"]),
        (&json!("message_id"), &json!(false))
    );
    assert_eq!(causes(audit), ["consumer_crash_before_ack", "redrive", "migration", "producer_resend"]);
    let table = support::text(&support::hopper(None, &["contract", path]).stdout);
    assert!(
        table.contains("handle each value of header `order-id` once (named by the spec's idempotency_key)"),
        "{table}"
    );
    assert!(table.contains("the spec does not say who sets it: set idempotency_key"), "{table}");
    assert!(table.contains("copy confirmed, ack lost") && table.contains("hopper redrive"), "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// lint warns about a topology whose contract relies on a message id nobody is said to set,
/// and exits 1; stated (either way), it is clean.
#[test]
fn lint_warns_when_the_spec_does_not_say_who_sets_the_key() {
    let dir = std::env::temp_dir().join(support::unique("hopper-consumer-lint"));
    std::fs::create_dir_all(&dir).unwrap();
    let lint = |toml: &str| {
        let path = dir.join("orders.toml");
        std::fs::write(&path, toml).unwrap();
        support::hopper_json(None, &["lint", path.to_str().unwrap()])
    };
    let (code, report) = lint("[topology.orders]\ndelays = [\"1s\"]\n");
    assert_eq!(code, Some(1), "{report:#}");
    let finding = support::one(&report["findings"], &json!({"rule": "idempotency-key-unstated"}));
    assert_eq!((&finding["severity"], &finding["queues"]), (&json!("warning"), &json!(["orders"])));
    for stated in ["idempotency_key = \"message_id\"", "idempotency_key = { header = \"order-id\" }"] {
        let (code, report) = lint(&format!("[topology.orders]\ndelays = [\"1s\"]\n{stated}\n"));
        assert_eq!((code, &report["findings"]), (Some(0), &json!([])), "{stated}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
