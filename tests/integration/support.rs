//! What every test module shares: the brokers of the test matrix and the macro that runs a test
//! on each, throw-away vhosts, running the hopper binary (and reading its JSON), matching JSON,
//! and AMQP helpers to declare, publish (confirmed) and count.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hopper::broker::Endpoint;
use hopper::broker::http::{self, Api, segment};
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Brokers
// ---------------------------------------------------------------------------------------------

/// A slot of the test matrix: one RabbitMQ version, started by `.ci/brokers.sh`. Its URLs come
/// from `HOPPER_TEST_AMQP_URL_<slot>` and `HOPPER_TEST_MANAGEMENT_URL_<slot>` (slot `3_10`,
/// `4_0`, `4_3`), defaulting to the ports brokers.sh uses on 127.0.0.1 with guest/guest.
///
/// Which slots the per-broker tests run on is the list in `on_every_broker!`, not this enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Broker {
    RabbitMq3_10,
    RabbitMq4_0,
    RabbitMq4_3,
}

impl Broker {
    const ALL: [Broker; 3] = [Broker::RabbitMq3_10, Broker::RabbitMq4_0, Broker::RabbitMq4_3];

    /// (environment variable suffix, default AMQP port, default management port)
    fn slot(self) -> (&'static str, u16, u16) {
        match self {
            Broker::RabbitMq3_10 => ("3_10", 5672, 15672),
            Broker::RabbitMq4_0 => ("4_0", 5673, 15673),
            Broker::RabbitMq4_3 => ("4_3", 5674, 15674),
        }
    }

    /// The RabbitMQ version the slot runs, as (major, minor).
    pub fn version(self) -> (u32, u32) {
        match self {
            Broker::RabbitMq3_10 => (3, 10),
            Broker::RabbitMq4_0 => (4, 0),
            Broker::RabbitMq4_3 => (4, 3),
        }
    }

    /// For tests whose expectation depends on the version: `if broker.major() >= 4 { ... }`.
    pub fn major(self) -> u32 {
        self.version().0
    }

    fn urls(self) -> &'static (String, String) {
        static URLS: [OnceLock<(String, String)>; 3] = [const { OnceLock::new() }; 3];
        let index = Broker::ALL.iter().position(|b| *b == self).unwrap();
        URLS[index].get_or_init(|| {
            let (suffix, amqp, management) = self.slot();
            let var = |name: &str, default: String| std::env::var(format!("{name}_{suffix}")).unwrap_or(default);
            (
                var("HOPPER_TEST_AMQP_URL", format!("amqp://guest:guest@127.0.0.1:{amqp}")),
                var("HOPPER_TEST_MANAGEMENT_URL", format!("http://127.0.0.1:{management}/api")),
            )
        })
    }

    /// The AMQP URL, with credentials and without a vhost.
    pub fn amqp(self) -> &'static str {
        &self.urls().0
    }

    /// The management API's base URL, ending in `/api`.
    pub fn management(self) -> &'static str {
        &self.urls().1
    }

    pub fn endpoint(self) -> Endpoint {
        Endpoint::new(self.amqp(), Some(self.management())).unwrap()
    }
}

/// Defines, for each listed test, one `#[tokio::test]` per broker of the matrix, in a module
/// named after the slot (`rabbitmq_3_10::in_sync_is_quiet`). `name` calls `name(broker)`;
/// `name = f(args...)` calls `f(broker, args...)`:
///
/// ```ignore
/// on_every_broker!(in_sync_is_quiet, chain_quorum = every_hop("chain", "quorum"));
/// ```
///
/// The matrix is this list, one line per slot: RabbitMQ 4.3 joins it with
/// `$crate::support::on_broker!(rabbitmq_4_3, RabbitMq4_3, $($tests)*);`.
macro_rules! on_every_broker {
    ($($tests:tt)*) => {
        $crate::support::on_broker!(rabbitmq_3_10, RabbitMq3_10, $($tests)*);
        $crate::support::on_broker!(rabbitmq_4_0, RabbitMq4_0, $($tests)*);
        $crate::support::on_broker!(rabbitmq_4_3, RabbitMq4_3, $($tests)*);
    };
}

/// One slot of `on_every_broker!`.
macro_rules! on_broker {
    (@call $broker:expr, $name:ident) => {
        super::$name($broker).await
    };
    (@call $broker:expr, $name:ident, $f:ident($($arg:expr),*)) => {
        super::$f($broker, $($arg),*).await
    };
    ($module:ident, $slot:ident, $($name:ident $(= $f:ident($($arg:expr),* $(,)?))?),* $(,)?) => {
        mod $module {
            $(
                #[tokio::test]
                async fn $name() {
                    $crate::support::on_broker!(
                        @call $crate::support::Broker::$slot, $name $(, $f($($arg),*))?
                    )
                }
            )*
        }
    };
}

pub(crate) use {on_broker, on_every_broker};

// ---------------------------------------------------------------------------------------------
// The management API, as an operator would use it
// ---------------------------------------------------------------------------------------------

pub fn api(broker: Broker) -> Api {
    Api::new(&broker.endpoint())
}

/// `GET /api/{what}/{vhost}` (`queues`, `exchanges`, `bindings`...), as JSON objects.
pub async fn list(broker: Broker, what: &str, vhost: &str) -> Vec<Value> {
    api(broker).get(&format!("/{what}/{}", segment(vhost))).await.unwrap_or_else(|e| panic!("list {what}: {e:?}"))
}

/// One queue as the management API shows it.
pub async fn queue_info(broker: Broker, vhost: &str, queue: &str) -> Value {
    api(broker).get(&format!("/queues/{}/{}", segment(vhost), segment(queue))).await.unwrap()
}

/// A policy (or operator policy) applying to queues, priority 10.
pub async fn declare_policy(broker: Broker, vhost: &str, operator: bool, name: &str, pattern: &str, definition: Value) {
    let kind = if operator { "operator-policies" } else { "policies" };
    let body = serde_json::json!({"pattern": pattern, "apply-to": "queues", "priority": 10, "definition": definition});
    api(broker).put(&format!("/{kind}/{}/{}", segment(vhost), segment(name)), &body).await.unwrap();
}

/// `POST /api/definitions`: the broker's own import.
pub async fn import_definitions(broker: Broker, definitions: &Value) {
    api(broker).post("/definitions", definitions).await.unwrap();
}

/// A user with this password and these tags (comma-separated, may be empty).
pub async fn create_user(broker: Broker, user: &str, password: &str, tags: &str) {
    let body = serde_json::json!({"password": password, "tags": tags});
    api(broker).put(&format!("/users/{}", segment(user)), &body).await.unwrap();
}

pub async fn set_permissions(broker: Broker, vhost: &str, user: &str, configure: &str, read: &str, write: &str) {
    let body = serde_json::json!({"configure": configure, "read": read, "write": write});
    api(broker).put(&format!("/permissions/{}/{}", segment(vhost), segment(user)), &body).await.unwrap();
}

pub async fn delete_user(broker: Broker, user: &str) {
    let _ = api(broker).delete(&format!("/users/{}", segment(user))).await;
}

// ---------------------------------------------------------------------------------------------
// Vhosts and the hopper binary
// ---------------------------------------------------------------------------------------------

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// A vhost of its own, with a directory for its spec files; both removed on drop (even when the
/// test fails).
pub struct Vhost {
    pub broker: Broker,
    pub name: String,
    pub dir: PathBuf,
}

impl Vhost {
    pub async fn new(broker: Broker, test: &str) -> Vhost {
        let name = unique(&format!("hopper-test-{test}"));
        http::create_vhost(&broker.endpoint(), &name).await.expect("create the test vhost");
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        Vhost { broker, name, dir }
    }

    /// A vhost with exactly this name (a name of a given length, or the same name on a second
    /// broker), with a directory of its own; both removed on drop.
    pub async fn named(broker: Broker, name: &str) -> Vhost {
        http::create_vhost(&broker.endpoint(), name).await.expect("create the test vhost");
        let dir = std::env::temp_dir().join(unique("hopper-test-dir"));
        std::fs::create_dir_all(&dir).unwrap();
        Vhost { broker, name: name.to_string(), dir }
    }

    /// Writes a spec file for this vhost and returns its path.
    pub fn spec(&self, file: &str, toml: &str) -> PathBuf {
        let path = self.dir.join(file);
        std::fs::write(&path, format!("vhost = \"{}\"\n{toml}", self.name)).unwrap();
        path
    }

    /// Runs the hopper binary against this vhost's broker.
    pub fn hopper(&self, args: &[&str]) -> Output {
        hopper(Some(self.broker), args)
    }

    /// Runs `hopper --format json ARGS` against this vhost's broker: (exit code, the JSON).
    pub fn json(&self, args: &[&str]) -> (Option<i32>, Value) {
        hopper_json(Some(self.broker), args)
    }

    pub async fn connect(&self) -> Connection {
        Connection::connect(&self.amqp_url(), ConnectionProperties::default())
            .await
            .expect("AMQP connection to the test vhost")
    }

    /// The broker's AMQP URL with this vhost.
    pub fn amqp_url(&self) -> String {
        format!("{}/{}", self.broker.amqp(), urlencode(&self.name))
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let (broker, name) = (self.broker, self.name.clone());
        let _ = std::fs::remove_dir_all(&self.dir);
        // Drop may run inside the test's runtime, which must not be blocked on: use a thread.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(http::delete_vhost(&broker.endpoint(), &name))
        })
        .join();
    }
}

/// Runs the hopper binary, pointed at `broker`; without one, with no broker URL in its
/// environment at all (anything it contacted would be a default it guessed). Prints what it
/// said, for a failing test's output.
pub fn hopper(broker: Option<Broker>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
    command.args(args).env("NO_COLOR", "1");
    for variable in CONNECTION_VARIABLES {
        command.env_remove(variable);
    }
    match broker {
        Some(b) => command.env("HOPPER_AMQP_URL", b.amqp()).env("HOPPER_MANAGEMENT_URL", b.management()),
        None => command.env_remove("HOPPER_AMQP_URL").env_remove("HOPPER_MANAGEMENT_URL"),
    };
    let out = command.output().expect("run hopper");
    eprintln!("$ hopper {}\n{}{}", args.join(" "), text(&out.stdout), text(&out.stderr));
    out
}

/// Runs the hopper binary pointed at `broker`, as `hopper` does, and measures it: its output,
/// and its peak resident memory in bytes, as GNU time reports it (`/usr/bin/time -f %M`, the
/// kernel's `ru_maxrss` of its child). Not `wait4` from here: Linux carries a process's peak
/// memory across `exec` from the image it replaced, which for a child spawned here is this test
/// process (it made the messages); GNU time's own few MB are what hopper starts from instead.
pub fn hopper_peak(broker: Broker, args: &[&str]) -> (Output, u64) {
    let usage = std::env::temp_dir().join(unique("hopper-test-usage"));
    let mut command = Command::new("/usr/bin/time");
    command.arg("-f").arg("%M").arg("-o").arg(&usage).arg(env!("CARGO_BIN_EXE_hopper")).args(args);
    command.env("NO_COLOR", "1");
    for variable in CONNECTION_VARIABLES {
        command.env_remove(variable);
    }
    command.env("HOPPER_AMQP_URL", broker.amqp()).env("HOPPER_MANAGEMENT_URL", broker.management());
    let out = command.output().expect("run hopper under /usr/bin/time (GNU time; scripts/test installs it)");
    let said = std::fs::read_to_string(&usage).unwrap_or_default();
    let _ = std::fs::remove_file(&usage);
    // The last line: GNU time writes "Command exited with non-zero status N" before it.
    let kib: u64 =
        said.lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or_else(|| panic!("GNU time said {said:?}"));
    let peak = kib * 1024;
    eprintln!("$ hopper {} (peak {} MiB)\n{}{}", args.join(" "), peak >> 20, text(&out.stdout), text(&out.stderr));
    (out, peak)
}

/// Bodies of `size` bytes, one per id, each filled with a byte of its own.
pub fn large_bodies(n: usize, size: usize) -> Vec<(String, Vec<u8>)> {
    (0..n).map(|i| (format!("big-{i}"), vec![b'a' + (i % 26) as u8; size])).collect()
}

/// `got` holds `messages`, whole and in order.
#[track_caller]
pub fn assert_large_bodies(got: &[lapin::message::BasicGetMessage], messages: &[(String, Vec<u8>)]) {
    let seen: Vec<(String, usize, u8)> =
        got.iter().map(|m| (message_id(&m.delivery.properties), m.delivery.data.len(), m.delivery.data[0])).collect();
    let want: Vec<(String, usize, u8)> = messages.iter().map(|(id, b)| (id.clone(), b.len(), b[0])).collect();
    assert_eq!(seen, want, "every message, whole, in order");
    assert!(got.iter().all(|m| m.delivery.data.iter().all(|b| *b == m.delivery.data[0])), "a body changed");
}

/// What hopper may take beyond its bound on message bodies: the program and its runtime (a
/// debug build: about 11 MiB), its buffers and the allocator's slack.
pub const BASELINE: u64 = 64 << 20;

/// A measured peak within `bound` plus `BASELINE`.
#[track_caller]
pub fn assert_peak_within(peak: u64, bound: u64) {
    assert!(
        peak < bound + BASELINE,
        "peak {} MiB over the bound of {} MiB plus {} MiB",
        peak >> 20,
        bound >> 20,
        BASELINE >> 20
    );
}

/// Every variable hopper reads to connect: a test sets the ones it means, never inherits one.
pub const CONNECTION_VARIABLES: [&str; 11] = [
    "HOPPER_AMQP_URL",
    "HOPPER_MANAGEMENT_URL",
    "HOPPER_USERNAME",
    "HOPPER_PASSWORD",
    "HOPPER_PASSWORD_FILE",
    "HOPPER_TLS_CA_CERT_FILE",
    "HOPPER_TLS_CERT_FILE",
    "HOPPER_TLS_KEY_FILE",
    "HOPPER_CONTEXT",
    "HOPPER_CONFIG",
    "HOPPER_TIMEOUT",
];

/// Runs the hopper binary with exactly these connection variables (and no other), and no
/// config file unless `HOPPER_CONFIG` is among them.
pub fn hopper_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let out = hopper_command(args, env).output().expect("run hopper");
    // What the test did, for a failing test's output: a password never, even there.
    let shown: Vec<String> = env
        .iter()
        .map(|(k, v)| if *k == "HOPPER_PASSWORD" { format!("{k}=***") } else { format!("{k}={v}") })
        .collect();
    let args: Vec<String> = args.iter().map(|a| hopper::broker::redact(a)).collect();
    eprintln!("$ {} hopper {}\n{}{}", shown.join(" "), args.join(" "), text(&out.stdout), text(&out.stderr));
    out
}

/// `hopper ARGS` with exactly these connection variables, and no config file unless
/// `HOPPER_CONFIG` is among them: for `hopper_env`, and for the runs `spawned` starts.
pub fn hopper_command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
    command.args(args).env("NO_COLOR", "1");
    for variable in CONNECTION_VARIABLES {
        command.env_remove(variable);
    }
    command.env("HOPPER_CONFIG", "/nonexistent/hopper-tests/config.toml");
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// Runs `hopper --format json ARGS`: (exit code, stdout parsed as JSON). Panics, showing both
/// streams, when stdout is not JSON.
pub fn hopper_json(broker: Option<Broker>, args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    let out = hopper(broker, &all);
    let value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "hopper {}: stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            all.join(" "),
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    (out.status.code(), value)
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

// ---------------------------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------------------------

/// Whether `value` has everything `pattern` has: objects match when each key of the pattern
/// matches (other keys are ignored), arrays and scalars only when equal. `{"name": "orders"}`
/// matches a queue named `orders`, whatever else it says about it.
pub fn matches(value: &Value, pattern: &Value) -> bool {
    match (value, pattern) {
        (Value::Object(v), Value::Object(p)) => p.iter().all(|(k, pv)| v.get(k).is_some_and(|vv| matches(vv, pv))),
        _ => value == pattern,
    }
}

/// The items of a JSON array that match `pattern`.
#[track_caller]
pub fn all<'a>(items: &'a Value, pattern: &Value) -> Vec<&'a Value> {
    let items = items.as_array().unwrap_or_else(|| panic!("not an array: {items:#}"));
    items.iter().filter(|i| matches(i, pattern)).collect()
}

/// The one item of a JSON array that matches `pattern`; panics, showing the array, unless
/// there is exactly one.
#[track_caller]
pub fn one<'a>(items: &'a Value, pattern: &Value) -> &'a Value {
    match all(items, pattern).as_slice() {
        [one] => one,
        found => panic!("{} items match {pattern:#} (expected one) in:\n{items:#}", found.len()),
    }
}

/// Panics, showing the array, if an item matches `pattern`.
#[track_caller]
pub fn none(items: &Value, pattern: &Value) {
    let found = all(items, pattern);
    assert!(found.is_empty(), "expected nothing to match {pattern:#}, found {found:#?}");
}

/// The steps of `apply --format json` in its only vhost.
#[track_caller]
pub fn steps(report: &Value) -> &Value {
    let vhosts = report["vhosts"].as_array().unwrap_or_else(|| panic!("no vhosts in {report:#}"));
    assert_eq!(vhosts.len(), 1, "one vhost: {report:#}");
    &vhosts[0]["steps"]
}

/// How many steps of each action `apply --format json` planned, over all vhosts.
pub fn actions(report: &Value) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for v in report["vhosts"].as_array().unwrap() {
        for s in v["steps"].as_array().unwrap() {
            *counts.entry(s["action"].as_str().unwrap().to_string()).or_default() += 1;
        }
    }
    counts
}

/// The entries of `diff --format json` in its only vhost.
#[track_caller]
pub fn objects(report: &Value) -> &Value {
    let vhosts = report["vhosts"].as_array().unwrap_or_else(|| panic!("no vhosts in {report:#}"));
    assert_eq!(vhosts.len(), 1, "one vhost: {report:#}");
    &vhosts[0]["objects"]
}

// ---------------------------------------------------------------------------------------------
// AMQP: declaring
// ---------------------------------------------------------------------------------------------

/// An argument value: integers as `long long`, strings as `longstr`.
pub enum Arg {
    Int(i64),
    Str(&'static str),
}

/// Arguments from pairs.
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

/// Declares a durable queue, as someone other than hopper would.
pub async fn queue(channel: &Channel, name: &str, arguments: FieldTable) {
    channel
        .queue_declare(name.into(), QueueDeclareOptions { durable: true, ..Default::default() }, arguments)
        .await
        .unwrap_or_else(|e| panic!("declare {name}: {e}"));
}

/// Declares a durable exchange.
pub async fn exchange(channel: &Channel, name: &str, kind: ExchangeKind) {
    exchange_with(channel, name, kind, FieldTable::default()).await;
}

/// An exchange with arguments (an alternate exchange, say).
pub async fn exchange_with(channel: &Channel, name: &str, kind: ExchangeKind, arguments: FieldTable) {
    let options = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare(name.into(), kind, options, arguments).await.unwrap();
}

pub async fn bind(channel: &Channel, queue: &str, exchange: &str, key: &str) {
    bind_with(channel, queue, exchange, key, FieldTable::default()).await;
}

/// A binding with arguments (what a headers exchange matches on).
pub async fn bind_with(channel: &Channel, queue: &str, exchange: &str, key: &str, arguments: FieldTable) {
    channel
        .queue_bind(queue.into(), exchange.into(), key.into(), QueueBindOptions::default(), arguments)
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// AMQP: publishing and counting
// ---------------------------------------------------------------------------------------------

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

/// Waits until `queue` holds at least `n` messages; panics after `limit`.
pub async fn wait_for_count_at_least(connection: &Connection, queue: &str, n: u32, limit: Duration) {
    let start = Instant::now();
    loop {
        let c = count(connection, queue).await;
        if c.is_some_and(|c| c >= n) {
            return;
        }
        assert!(start.elapsed() < limit, "{queue} holds {c:?} messages after {limit:?}, expected at least {n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until a queue exists (asynchronous imports), for at most 30 s.
pub async fn wait_for_exists(connection: &Connection, queue: &str) {
    let start = Instant::now();
    while count(connection, queue).await.is_none() {
        assert!(start.elapsed() < Duration::from_secs(30), "{queue} never appeared");
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

/// Publishes persistent messages with the given ids, each confirmed by the broker and routed.
pub async fn publish(connection: &Connection, exchange: &str, routing_key: &str, ids: &[String]) {
    publish_with(connection, exchange, routing_key, ids, |_| None).await;
}

/// As `publish`, with headers chosen per message.
pub async fn publish_with(
    connection: &Connection,
    exchange: &str,
    routing_key: &str,
    ids: &[String],
    headers: impl Fn(&str) -> Option<FieldTable>,
) {
    let channel = confirming(connection).await;
    for id in ids {
        let mut properties = rich_properties(id);
        if let Some(h) = headers(id) {
            properties = properties.with_headers(h);
        }
        confirmed(&channel, exchange, routing_key, id.as_bytes(), properties).await;
    }
}

/// Publishes one message with these properties, confirmed by the broker and routed.
pub async fn publish_one(connection: &Connection, exchange: &str, routing_key: &str, properties: BasicProperties) {
    confirmed(&confirming(connection).await, exchange, routing_key, b"m", properties).await;
}

/// Publishes one message with this body and these properties, confirmed by the broker and routed.
pub async fn publish_body(
    connection: &Connection,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    properties: BasicProperties,
) {
    let channel = confirming(connection).await;
    confirmed(&channel, exchange, routing_key, body, properties).await;
    let _ = channel.close(200, "".into()).await;
}

async fn confirming(connection: &Connection) -> Channel {
    let channel = connection.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    channel
}

/// `mandatory`, so that an unroutable message comes back and fails the test.
async fn confirmed(channel: &Channel, exchange: &str, routing_key: &str, body: &[u8], properties: BasicProperties) {
    let confirm = channel
        .basic_publish(
            exchange.into(),
            routing_key.into(),
            BasicPublishOptions { mandatory: true, ..Default::default() },
            body,
            properties,
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(
        matches!(confirm, lapin::Confirmation::Ack(None)),
        "publish to {exchange:?} with key {routing_key:?} not routed: {confirm:?}"
    );
}

/// Takes every message of a queue (acking them).
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

// ---------------------------------------------------------------------------------------------
// PostgreSQL, where the example consumer keeps the keys it has handled
// ---------------------------------------------------------------------------------------------

/// The database the tests use: `HOPPER_TEST_DATABASE` (libpq style), by default the local
/// server's `test` database as `postgres` (trust authentication).
pub fn database_config() -> String {
    std::env::var("HOPPER_TEST_DATABASE")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".into())
}

/// A PostgreSQL schema of its own, holding the example consumer's table (`retry_consumer::SCHEMA`),
/// so that tests run in parallel; dropped with everything in it on drop (even when the test
/// fails).
pub struct Database {
    pub schema: String,
}

impl Database {
    pub async fn new(test: &str) -> Database {
        let tag: String = test.chars().filter(char::is_ascii_alphanumeric).take(16).collect();
        let schema = unique(&format!("hopper_{tag}")).replace('-', "_").to_ascii_lowercase();
        let database = Database { schema };
        let admin = Self::connect(&database_config()).await;
        admin.batch_execute(&format!("CREATE SCHEMA \"{}\"", database.schema)).await.expect("create the test schema");
        database.client().await.batch_execute(crate::retry_consumer::SCHEMA).await.expect("the consumer's table");
        database
    }

    /// Connection settings whose unqualified names are this schema's.
    pub fn config(&self) -> String {
        format!("{} options='-c search_path={}'", database_config(), self.schema)
    }

    pub async fn client(&self) -> tokio_postgres::Client {
        Self::connect(&self.config()).await
    }

    async fn connect(config: &str) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(config, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {config}: {e}"));
        tokio::spawn(connection);
        client
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let schema = self.schema.clone();
        // As Vhost's drop: on a thread with a runtime of its own.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                let admin = Database::connect(&database_config()).await;
                let _ = admin.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")).await;
            })
        })
        .join();
    }
}

/// The example consumer, running against a vhost and a database until stopped.
pub struct RunningConsumer {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningConsumer {
    /// Starts `retry_consumer::run` with this handler; its connections are named `name`.
    pub fn start<H: crate::retry_consumer::Handler>(
        vhost: &Vhost,
        database: &Database,
        name: &str,
        contract: &crate::retry_consumer::Contract,
        handler: std::sync::Arc<H>,
    ) -> RunningConsumer {
        let settings = crate::retry_consumer::Settings {
            amqp_url: vhost.amqp_url(),
            database: database.config(),
            connection_name: name.to_string(),
            prefetch: 10,
        };
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let contract = contract.clone();
        let task =
            tokio::spawn(async move { crate::retry_consumer::run(&settings, &contract, handler, stopped).await });
        RunningConsumer { stop, task }
    }

    /// Stops it and waits until its connection is closed: what it held is back in its queue.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.await.expect("the consumer task ends without panicking");
    }
}

/// A publisher that runs on its own thread (the test's runtime is blocked while hopper runs),
/// publishing `<prefix>-<n>` to an exchange, mandatory and confirmed, until it is stopped.
pub struct Publisher {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(Vec<String>, Vec<String>)>,
}

impl Publisher {
    pub fn start(url: String, exchange: &str, routing_key: &str, prefix: &str) -> Publisher {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (exchange, routing_key, prefix) = (exchange.to_string(), routing_key.to_string(), prefix.to_string());
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async move {
                let connection = Connection::connect(&url, ConnectionProperties::default()).await.unwrap();
                let channel = confirming(&connection).await;
                let (mut confirmed, mut unrouted) = (Vec::new(), Vec::new());
                for n in 0.. {
                    if stopping.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let id = format!("{prefix}-{n}");
                    let options = BasicPublishOptions { mandatory: true, ..Default::default() };
                    let published = channel
                        .basic_publish(
                            exchange.as_str().into(),
                            routing_key.as_str().into(),
                            options,
                            id.as_bytes(),
                            rich_properties(&id),
                        )
                        .await;
                    let confirmation = match published {
                        Ok(confirm) => confirm.await,
                        Err(e) => Err(e),
                    };
                    match confirmation {
                        Ok(lapin::Confirmation::Ack(None)) => confirmed.push(id),
                        // Returned, refused, or the channel closed: not known to be routed.
                        _ => {
                            unrouted.push(id);
                            if !channel.status().connected() {
                                break;
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (confirmed, unrouted)
            })
        });
        Publisher { stop, thread }
    }

    /// Stops it: (the ids the broker confirmed and routed, those it returned or refused).
    pub fn stop(self) -> (Vec<String>, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}
