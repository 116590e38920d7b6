//! Rule by rule, on a real broker: each test first builds the trap by hand and shows that
//! RabbitMQ really drops, duplicates or strands a message there, then that `hopper inspect`
//! reports it, with the rule and the objects. On RabbitMQ 3.10 and 4.0; differences are noted.

use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicRejectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

use crate::support::{self, Broker, RABBITMQ_3, RABBITMQ_4, Vhost};

/// Arguments from pairs; integers as `long long`, strings as `longstr`.
pub fn args(pairs: &[(&str, Arg)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        let value = match v {
            Arg::Int(n) => AMQPValue::LongLongInt(*n),
            Arg::Str(s) => AMQPValue::LongString((*s).into()),
        };
        t.insert((*k).into(), value);
    }
    t
}

pub enum Arg {
    Int(i64),
    Str(&'static str),
}
use Arg::{Int, Str};

pub async fn queue(channel: &Channel, name: &str, arguments: FieldTable) {
    channel
        .queue_declare(name.into(), QueueDeclareOptions { durable: true, ..Default::default() }, arguments)
        .await
        .unwrap_or_else(|e| panic!("declare {name}: {e}"));
}

pub async fn exchange(channel: &Channel, name: &str, kind: ExchangeKind) {
    let options = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare(name.into(), kind, options, FieldTable::default()).await.unwrap();
}

pub async fn bind(channel: &Channel, queue: &str, exchange: &str, key: &str) {
    channel
        .queue_bind(queue.into(), exchange.into(), key.into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .unwrap();
}

/// Takes one message from `queue` and rejects it without requeue: the broker dead-letters it.
pub async fn reject_one(channel: &Channel, queue: &str) {
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

/// Sum of the messages in every queue of the vhost, counted exactly.
pub async fn total(connection: &lapin::Connection, queues: &[&str]) -> u32 {
    let mut n = 0;
    for q in queues {
        n += support::count(connection, q).await.unwrap_or(0);
    }
    n
}

/// `hopper inspect --format json` for the vhost: (exit code, hazards as (rule, objects)).
pub fn inspect(vhost: &Vhost) -> (Option<i32>, Vec<(String, Vec<String>)>) {
    let out = vhost.hopper(&["inspect", "--vhost", &vhost.name, "--format", "json"]);
    let reports: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", support::text(&out.stdout)));
    let hazards = reports[0]["hazards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let objects = h["objects"].as_array().unwrap().iter().map(|o| o.as_str().unwrap().to_string()).collect();
            (h["rule"].as_str().unwrap().to_string(), objects)
        })
        .collect();
    (out.status.code(), hazards)
}

pub fn assert_reported(vhost: &Vhost, rule: &str, objects: &[&str]) {
    let (code, hazards) = inspect(vhost);
    assert_eq!(code, Some(1), "inspect exits 1 when it finds a hazard: {hazards:?}");
    assert!(
        hazards.iter().any(|(r, o)| r == rule && objects.iter().all(|x| o.iter().any(|y| y == x))),
        "expected {rule} on {objects:?}, got {hazards:?}"
    );
    // And the human view says it too.
    let table = support::text(&vhost.hopper(&["inspect", "--vhost", &vhost.name]).stdout);
    assert!(table.contains(&format!("[{rule}]")), "{table}");
}

/// The dead-letter exchange does not exist: the rejected message is gone.
async fn dead_letter_exchange_missing(broker: Broker) {
    let vhost = Vhost::new(broker, "hazard-dlx-missing").await;
    let c = vhost.connect().await;
    let ch = c.create_channel().await.unwrap();
    queue(&ch, "work", args(&[("x-dead-letter-exchange", Str("nowhere")), ("x-dead-letter-routing-key", Str("x"))]))
        .await;
    support::publish(&c, "", "work", &["m".to_string()]).await;
    reject_one(&ch, "work").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(total(&c, &["work"]).await, 0, "the broker dropped it");
    assert_reported(&vhost, "dead-letter-exchange-missing", &["work", "nowhere"]);
}

/// The dead-letter routing key matches no binding: dropped.
async fn dead_letters_unroutable(broker: Broker) {
    let vhost = Vhost::new(broker, "hazard-unroutable").await;
    let c = vhost.connect().await;
    let ch = c.create_channel().await.unwrap();
    exchange(&ch, "dlx", ExchangeKind::Direct).await;
    queue(&ch, "parking", FieldTable::default()).await;
    bind(&ch, "parking", "dlx", "parking").await;
    queue(&ch, "work", args(&[("x-dead-letter-exchange", Str("dlx")), ("x-dead-letter-routing-key", Str("parked"))]))
        .await;
    support::publish(&c, "", "work", &["m".to_string()]).await;
    reject_one(&ch, "work").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(total(&c, &["work", "parking"]).await, 0, "routed nowhere, dropped");
    assert_reported(&vhost, "dead-letters-unroutable", &["work", "dlx"]);
}

/// A fanout dead-letter exchange with two queues: one failure, two copies.
async fn dead_letters_fan_out(broker: Broker) {
    let vhost = Vhost::new(broker, "hazard-fan-out").await;
    let c = vhost.connect().await;
    let ch = c.create_channel().await.unwrap();
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
    assert_reported(&vhost, "dead-letters-fan-out", &["work", "billing", "audit"]);
}

/// Two queues dead-lettering into each other by TTL: the message is dropped as a cycle.
async fn dead_letter_cycle(broker: Broker) {
    let vhost = Vhost::new(broker, "hazard-cycle").await;
    let c = vhost.connect().await;
    let ch = c.create_channel().await.unwrap();
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
    assert_reported(&vhost, "dead-letter-cycle", &["main", "wait"]);
}

macro_rules! on_both_brokers {
    ($($name:ident),* $(,)?) => {
        mod rabbitmq_3 { $(#[tokio::test] async fn $name() { super::$name(super::RABBITMQ_3).await; })* }
        mod rabbitmq_4 { $(#[tokio::test] async fn $name() { super::$name(super::RABBITMQ_4).await; })* }
    };
}

on_both_brokers!(dead_letter_exchange_missing, dead_letters_unroutable, dead_letters_fan_out, dead_letter_cycle);

/// A hopper topology on a live broker, with traffic: no hazard.
async fn a_hopper_topology_has_no_hazard(broker: Broker) {
    let vhost = Vhost::new(broker, "hazard-none").await;
    let orders = vhost.spec(
        "orders.toml",
        "[topology.orders]\nexchange_type = \"topic\"\ndelays = [\"1s\", \"5s\"]\nmax_attempts = 3\n",
    );
    let payments = vhost.spec(
        "payments.toml",
        "[topology.payments]\nstrategy = \"chain\"\nqueue_type = \"classic\"\ndelays = [\"1s\"]\nmax_attempts = 3\n",
    );
    assert_eq!(vhost.hopper(&["apply", orders.to_str().unwrap(), payments.to_str().unwrap()]).status.code(), Some(0));
    let (code, hazards) = inspect(&vhost);
    assert_eq!((code, hazards), (Some(0), vec![]));
    let lint = vhost.hopper(&["lint", orders.to_str().unwrap(), payments.to_str().unwrap()]);
    assert_eq!(lint.status.code(), Some(0));
}

#[tokio::test]
async fn a_hopper_topology_has_no_hazard_on_rabbitmq_3() {
    a_hopper_topology_has_no_hazard(RABBITMQ_3).await;
}

#[tokio::test]
async fn a_hopper_topology_has_no_hazard_on_rabbitmq_4() {
    a_hopper_topology_has_no_hazard(RABBITMQ_4).await;
}
