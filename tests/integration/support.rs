//! Brokers, throw-away vhosts, the hopper binary, and AMQP helpers for the tests.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hopper::broker::{Endpoint, http};
use lapin::options::{BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

/// A broker of the test matrix. `.ci/brokers.sh` starts both.
#[derive(Debug, Clone, Copy)]
pub struct Broker {
    pub amqp: &'static str,
    pub management: &'static str,
}

pub const RABBITMQ_3: Broker =
    Broker { amqp: "amqp://guest:guest@127.0.0.1:5672", management: "http://127.0.0.1:15672/api" };
pub const RABBITMQ_4: Broker =
    Broker { amqp: "amqp://guest:guest@127.0.0.1:5673", management: "http://127.0.0.1:15673/api" };

static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// A vhost of its own, deleted on drop (even when the test fails).
pub struct Vhost {
    pub broker: Broker,
    pub name: String,
    pub dir: PathBuf,
}

impl Vhost {
    pub async fn new(broker: Broker, test: &str) -> Vhost {
        let name = unique(&format!("hopper-test-{test}"));
        http::create_vhost(&endpoint(broker), &name).await.expect("create the test vhost");
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        Vhost { broker, name, dir }
    }

    /// Writes a spec file for this vhost and returns its path.
    pub fn spec(&self, file: &str, toml: &str) -> PathBuf {
        let path = self.dir.join(file);
        std::fs::write(&path, format!("vhost = \"{}\"\n{toml}", self.name)).unwrap();
        path
    }

    /// Runs the hopper binary against this broker.
    pub fn hopper(&self, args: &[&str]) -> Output {
        let out = Command::new(env!("CARGO_BIN_EXE_hopper"))
            .args(args)
            .env("HOPPER_AMQP_URL", self.broker.amqp)
            .env("HOPPER_MANAGEMENT_URL", self.broker.management)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        eprintln!("$ hopper {}\n{}{}", args.join(" "), text(&out.stdout), text(&out.stderr));
        out
    }

    pub async fn connect(&self) -> Connection {
        let url = format!("{}/{}", self.broker.amqp, urlencode(&self.name));
        Connection::connect(&url, ConnectionProperties::default()).await.expect("AMQP connection to the test vhost")
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let (broker, name) = (self.broker, self.name.clone());
        let _ = std::fs::remove_dir_all(&self.dir);
        // Drop may run inside the test's runtime, which must not be blocked on: use a thread.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(http::delete_vhost(&endpoint(broker), &name))
        })
        .join();
    }
}

pub fn endpoint(broker: Broker) -> Endpoint {
    Endpoint::new(broker.amqp, Some(broker.management)).unwrap()
}

pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Message count of a queue, or `None` if it does not exist.
pub async fn count(connection: &Connection, queue: &str) -> Option<u32> {
    let channel = connection.create_channel().await.unwrap();
    let r = channel
        .queue_declare(queue.into(), QueueDeclareOptions { passive: true, ..Default::default() }, FieldTable::default())
        .await;
    let _ = channel.close(200, "".into()).await;
    r.ok().map(|q| q.message_count())
}

/// Waits until `queue` holds `n` messages; panics after `limit`.
pub async fn wait_for_count(connection: &Connection, queue: &str, n: u32, limit: Duration) {
    let start = Instant::now();
    loop {
        let c = count(connection, queue).await;
        if c == Some(n) {
            return;
        }
        assert!(start.elapsed() < limit, "{queue} holds {c:?} messages after {limit:?}, expected {n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The properties every test message carries, so that a retry that drops one is caught.
pub fn rich_properties(id: &str) -> BasicProperties {
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id(id.into())
        .with_correlation_id(format!("corr-{id}").into())
        .with_content_type("application/json".into())
        .with_content_encoding("identity".into())
        .with_type("order.created".into())
        .with_app_id("hopper-tests".into())
        .with_reply_to("replies".into())
        .with_priority(3)
        .with_timestamp(1_700_000_000)
}

/// Publishes persistent messages with the given ids, each confirmed by the broker.
pub async fn publish(connection: &Connection, exchange: &str, routing_key: &str, ids: &[String]) {
    publish_with(connection, exchange, routing_key, ids, |_| None).await;
}

/// As `publish`, with headers chosen per message.
pub async fn publish_with(
    connection: &Connection,
    exchange: &str,
    routing_key: &str,
    ids: &[String],
    headers: impl Fn(&str) -> Option<lapin::types::FieldTable>,
) {
    let channel: Channel = connection.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for id in ids {
        let mut properties = rich_properties(id);
        if let Some(h) = headers(id) {
            properties = properties.with_headers(h);
        }
        let confirm = channel
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                BasicPublishOptions { mandatory: true, ..Default::default() },
                id.as_bytes(),
                properties,
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(matches!(confirm, lapin::Confirmation::Ack(None)), "publish of {id} not routed: {confirm:?}");
    }
}

/// Takes every message of a queue (acking them) and returns their message ids.
pub async fn drain(connection: &Connection, queue: &str) -> Vec<lapin::message::BasicGetMessage> {
    let channel = connection.create_channel().await.unwrap();
    let mut out = Vec::new();
    while let Some(m) = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.unwrap() {
        out.push(m);
    }
    out
}

pub fn message_id(properties: &BasicProperties) -> String {
    properties.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default()
}

/// The `(queue, reason)` of every entry of a message's `x-death` header.
pub fn deaths(properties: &BasicProperties) -> Vec<(String, String)> {
    use lapin::types::AMQPValue;
    let Some(headers) = properties.headers() else { return Vec::new() };
    let Some(AMQPValue::FieldArray(entries)) = headers.inner().get("x-death") else { return Vec::new() };
    entries
        .as_slice()
        .iter()
        .filter_map(|e| match e {
            AMQPValue::FieldTable(t) => {
                let get = |k: &str| match t.inner().get(k) {
                    Some(AMQPValue::LongString(s)) => s.to_string(),
                    Some(AMQPValue::ShortString(s)) => s.to_string(),
                    _ => String::new(),
                };
                Some((get("queue"), get("reason")))
            }
            _ => None,
        })
        .collect()
}

/// Waits until a queue exists (asynchronous imports), for at most 30 s.
pub async fn wait_for_exists(connection: &Connection, queue: &str) {
    let start = Instant::now();
    while count(connection, queue).await.is_none() {
        assert!(start.elapsed() < Duration::from_secs(30), "{queue} never appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
