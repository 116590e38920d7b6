//! Safety cases from issues, each reproduced on a real broker before its fix: bindings that look
//! alike as text, two brokers in one run, refusal hints a user pastes, graphs of hostile names,
//! and the limits of names and files. Assertions read `--format json` or the broker itself.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use hopper::broker::Endpoint;
use lapin::Connection;
use lapin::options::{BasicConsumeOptions, BasicGetOptions, BasicRejectOptions};
use lapin::types::FieldTable;
use serde_json::{Value, json};

use crate::spawned::{self, End};
use crate::support::{self, Broker, Vhost, on_every_broker};

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// Takes one message from `queue` and rejects it without requeue, as a consumer that gives up
/// does: the broker dead-letters it.
async fn reject_one(connection: &Connection, queue: &str) {
    let channel = connection.create_channel().await.unwrap();
    let start = Instant::now();
    loop {
        if let Some(m) = channel.basic_get(queue.into(), BasicGetOptions::default()).await.unwrap() {
            m.delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "nothing to reject in {queue:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The bindings to queues of a vhost, as the management API lists them: (source, queue, key).
async fn queue_bindings(broker: Broker, vhost: &str) -> BTreeSet<(String, String, String)> {
    let text = |b: &Value, k: &str| b[k].as_str().unwrap_or_default().to_string();
    support::list(broker, "bindings", vhost)
        .await
        .iter()
        .filter(|b| b["destination_type"] == "queue" && !text(b, "source").is_empty())
        .map(|b| (text(b, "source"), text(b, "destination"), text(b, "routing_key")))
        .collect()
}

/// Queue names and non-built-in exchange names of a vhost, as the management API lists them.
async fn objects_on(broker: Broker, vhost: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let name = |v: &Value| v["name"].as_str().unwrap_or_default().to_string();
    let queues = support::list(broker, "queues", vhost).await.iter().map(name).collect();
    let exchanges = support::list(broker, "exchanges", vhost)
        .await
        .iter()
        .map(name)
        .filter(|n| !n.is_empty() && !n.starts_with("amq."))
        .collect();
    (queues, exchanges)
}

/// `queue name -> queue type` of a vhost, from the management API.
async fn queue_types(broker: Broker, vhost: &str) -> BTreeMap<String, String> {
    let text = |q: &Value, k: &str| q[k].as_str().unwrap_or_default().to_string();
    support::list(broker, "queues", vhost).await.iter().map(|q| (text(q, "name"), text(q, "type"))).collect()
}

/// A diff entry for a binding to a queue, identified by all of it.
fn binding_entry(status: &str, source: &str, queue: &str, key: &str) -> Value {
    json!({
        "status": status, "kind": "binding",
        "source": source, "destination_type": "queue", "destination": queue, "routing_key": key
    })
}

/// Runs the hopper binary with exactly these broker URLs in its environment (`None`: unset, so
/// hopper derives or defaults it). Prints what it said, for a failing test's output.
fn hopper_with(amqp: Option<&str>, management: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
    command.args(args).env("NO_COLOR", "1");
    match amqp {
        Some(url) => command.env("HOPPER_AMQP_URL", url),
        None => command.env_remove("HOPPER_AMQP_URL"),
    };
    match management {
        Some(url) => command.env("HOPPER_MANAGEMENT_URL", url),
        None => command.env_remove("HOPPER_MANAGEMENT_URL"),
    };
    let out = command.output().expect("run hopper");
    eprintln!(
        "$ HOPPER_AMQP_URL={amqp:?} HOPPER_MANAGEMENT_URL={management:?} hopper {}\n{}{}",
        args.join(" "),
        support::text(&out.stdout),
        support::text(&out.stderr)
    );
    out
}

/// Runs hopper (no broker in its environment) and fails the test if it has not exited within
/// `limit`: what it was given must never make it wait forever.
fn hopper_within(limit: Duration, args: &[&str]) -> Output {
    let out = match spawned::within(spawned::hopper(args, &[]), limit) {
        End::Exited(out) => out,
        End::Killed(out) => panic!(
            "hopper {} still running after {limit:?} (killed); stderr so far:\n{}",
            args.join(" "),
            support::text(&out.stderr)
        ),
    };
    eprintln!("$ hopper {}\n{}{}", args.join(" "), support::text(&out.stdout), support::text(&out.stderr));
    out
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(support::unique(&format!("hopper-safety-{name}")));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn dir(&self, name: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::create_dir_all(&path).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

// ---------------------------------------------------------------------------------------------
// 1. Bindings are identified by their fields, not by how they print
// ---------------------------------------------------------------------------------------------

/// Two bindings that print alike, `p -> q -> r ("q -> r")`: from exchange `p -> q` to queue `r`,
/// and from exchange `p` (topology b's dead-letter exchange) to queue `q -> r` (its DLQ).
const LOOKALIKE: &str = "
[topology.a]
queue_type = \"classic\"
max_attempts = 1
exchange = \"p -> q\"
queue = \"r\"
routing_keys = [\"q -> r\"]

[topology.b]
queue_type = \"classic\"
max_attempts = 1
dead_letter_exchange = \"p\"
dead_letter_queue = \"q -> r\"
";

/// Issue: the plan keyed bindings by their text, so the second binding was taken for the first:
/// never created, and a rejected message of `b` was dropped. Both must exist, route, compare as
/// in sync, and the one deleted by hand must be the one diff reports.
async fn bindings_that_print_alike_are_two_bindings(broker: Broker) {
    let vhost = Vhost::new(broker, "safety-lookalike").await;
    let spec = vhost.spec("lookalike.toml", LOOKALIKE);
    let (code, report) = vhost.json(&["apply", s(&spec)]);
    assert_eq!(code, Some(0), "{report:#}");

    let ours = [("p -> q", "r", "q -> r"), ("p", "q -> r", "q -> r")];
    let live = queue_bindings(broker, &vhost.name).await;
    for (source, queue, key) in ours {
        let b = (source.to_string(), queue.to_string(), key.to_string());
        assert!(live.contains(&b), "the broker has no binding {b:?} after apply; it has {live:#?}");
    }

    // A message proves the dead-letter binding routes: rejected in `b`, it reaches `q -> r`.
    let connection = vhost.connect().await;
    support::publish(&connection, "", "b", &["lookalike-1".to_string()]).await;
    reject_one(&connection, "b").await;
    support::wait_for_count(&connection, "q -> r", 1, Duration::from_secs(10)).await;
    assert_eq!(support::count(&connection, "r").await, Some(0), "nothing reached `r`");

    let (code, report) = vhost.json(&["diff", s(&spec)]);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["in_sync"], true, "{report:#}");
    let objects = support::objects(&report);
    for (source, queue, key) in ours {
        support::one(objects, &binding_entry("in_sync", source, queue, key));
    }
    let total = objects.as_array().unwrap().len();

    // Delete `p` -> `q -> r` by hand: diff names that binding, by its fields, and no other.
    let channel = connection.create_channel().await.unwrap();
    channel.queue_unbind("q -> r".into(), "p".into(), "q -> r".into(), FieldTable::default()).await.unwrap();
    let live = queue_bindings(broker, &vhost.name).await;
    assert!(live.contains(&("p -> q".into(), "r".into(), "q -> r".into())), "the look-alike stays: {live:#?}");

    let (code, report) = vhost.json(&["diff", s(&spec)]);
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(report["in_sync"], false, "{report:#}");
    assert_eq!(report["summary"], json!({"in_sync": total - 1, "missing": 1}), "{report:#}");
    let objects = support::objects(&report);
    let missing = support::one(objects, &json!({"status": "missing"}));
    assert_eq!(*missing, binding_entry("missing", "p", "q -> r", "q -> r"));
    support::one(objects, &binding_entry("in_sync", "p -> q", "r", "q -> r"));
}

// ---------------------------------------------------------------------------------------------
// 2. Two brokers in one run
// ---------------------------------------------------------------------------------------------

const ORDERS: &str = "[topology.orders]\nqueue_type = \"classic\"\ndelays = [\"1s\"]\nmax_attempts = 2\n";

/// How one run names its two endpoints: the AMQP address it connected to and the management URL.
struct Pair {
    amqp: Broker,
    /// `None`: HOPPER_MANAGEMENT_URL unset, hopper derives it from the AMQP URL.
    management: Option<Broker>,
}

impl Pair {
    const ALL: [Pair; 3] = [
        // 3.10's AMQP with 4.0's management API.
        Pair { amqp: Broker::RabbitMq3_10, management: Some(Broker::RabbitMq4_0) },
        // 4.3's AMQP with 3.10's management API.
        Pair { amqp: Broker::RabbitMq4_3, management: Some(Broker::RabbitMq3_10) },
        // 4.3's AMQP alone: the management URL hopper derives (host, port 15672) is 3.10's.
        Pair { amqp: Broker::RabbitMq4_3, management: None },
    ];

    /// The broker the management URL reaches.
    fn management_broker(&self) -> Broker {
        self.management.unwrap_or(Broker::RabbitMq3_10)
    }

    /// The management URL as hopper uses it.
    fn management_url(&self) -> String {
        let derived = Endpoint::new(self.amqp.amqp(), self.management.map(|b| b.management())).unwrap().management_url;
        if self.management.is_none() {
            assert_eq!(
                derived,
                Broker::RabbitMq3_10.management().trim_end_matches('/'),
                "this case needs the URL hopper derives from {} to be the 3.10 slot's management API",
                self.amqp.amqp()
            );
        }
        derived
    }

    fn run(&self, args: &[&str]) -> Output {
        hopper_with(Some(self.amqp.amqp()), self.management.map(|b| b.management()), args)
    }

    /// Exit 2, nothing on stdout, and stderr names both endpoints and both clusters.
    async fn assert_refused(&self, out: &Output, what: &str) {
        let stderr = support::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: exit 2 expected; stderr:\n{stderr}");
        assert!(out.stdout.is_empty(), "{what}: nothing may be planned or printed:\n{}", support::text(&out.stdout));
        let amqp_cluster = cluster_name(self.amqp).await;
        let management_cluster = cluster_name(self.management_broker()).await;
        assert_ne!(amqp_cluster, management_cluster, "the test needs two clusters");
        let expected = [self.amqp.endpoint().describe(), self.management_url(), amqp_cluster, management_cluster];
        for e in expected {
            assert!(stderr.contains(&e), "{what}: stderr does not name {e:?}:\n{stderr}");
        }
    }
}

/// The cluster a broker of the matrix is, as its own management API's overview says.
async fn cluster_name(broker: Broker) -> String {
    support::api(broker).overview().await.unwrap().cluster_name
}

const ALL_BROKERS: [Broker; 3] = [Broker::RabbitMq3_10, Broker::RabbitMq4_0, Broker::RabbitMq4_3];

/// Issue: hopper planned against one broker's management API and wrote to another over AMQP.
/// A list of AMQP nodes names one cluster. When another broker is in the list and the vhost
/// exists only there, apply must not write to it (found by a hostile review: the cluster check
/// read the first node, and the session fell through to the next on a missing vhost; a native
/// topology even reached RabbitMQ 4.0).
#[tokio::test]
async fn a_node_of_another_cluster_in_the_list_is_never_written_to() {
    for (first, other, spec) in [
        (
            Broker::RabbitMq4_3,
            Broker::RabbitMq4_0,
            "[topology.jobs]\nstrategy = \"native\"\ndelays = [\"1s\", \"2s\"]\n",
        ),
        (Broker::RabbitMq3_10, Broker::RabbitMq4_0, "[topology.jobs]\ndelays = [\"1s\"]\n"),
    ] {
        let vhost = Vhost::new(other, "safety-node-list").await;
        let spec = vhost.spec("jobs.toml", spec);
        let nodes = format!("{},{}", first.amqp(), other.amqp());
        // With the first node's management API, and with none at all (AMQP alone).
        for (management, amqp_only) in [(first.management(), false), ("http://127.0.0.1:1/api", true)] {
            let args = if amqp_only { vec!["apply", "--amqp-only", s(&spec)] } else { vec!["apply", s(&spec)] };
            let out = hopper_with(Some(&nodes), Some(management), &args);
            let stderr = support::text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{}{stderr}", support::text(&out.stdout));
            if amqp_only {
                assert!(stderr.contains("not used"), "the other cluster's node is named as not used: {stderr}");
            } else {
                // The first cluster's management API is read before any session opens: the vhost
                // is missing there, and that is the refusal.
                assert!(
                    stderr.contains("does not exist on the broker at") && stderr.contains(management),
                    "the vhost is missing from the cluster named first: {stderr}"
                );
            }
            assert_eq!(support::count(&vhost.connect().await, "jobs").await, None, "nothing written to {other:?}");
        }
    }
}

/// `apply`, `apply --dry-run`, `diff` and `inspect --dead-letters` must refuse (exit 2) before
/// anything; the vhost exists on every broker, so a mistaken write would have succeeded.
#[tokio::test]
async fn two_brokers_in_one_run_are_refused_before_anything() {
    let name = support::unique("hopper-test-two-brokers");
    let mut vhosts = Vec::new();
    for b in ALL_BROKERS {
        vhosts.push(Vhost::named(b, &name).await);
    }
    let spec = vhosts[0].spec("orders.toml", ORDERS);
    // The queue inspect is asked about exists on every broker, with one message: a peek on the
    // wrong broker would find it (and mark it redelivered).
    for v in &vhosts {
        let connection = v.connect().await;
        let channel = connection.create_channel().await.unwrap();
        support::queue(&channel, "parked", FieldTable::default()).await;
        support::publish(&connection, "", "parked", &["parked-1".to_string()]).await;
    }
    for pair in Pair::ALL {
        let case = format!(
            "AMQP {:?}, management {}",
            pair.amqp,
            pair.management.map_or("derived".to_string(), |b| format!("{b:?}"))
        );
        let commands: [&[&str]; 5] = [
            &["apply", s(&spec)],
            &["apply", "--dry-run", s(&spec)],
            &["--format", "json", "apply", s(&spec)],
            &["diff", s(&spec)],
            &["inspect", "--vhost", name.as_str(), "--queue", "parked", "--dead-letters"],
        ];
        for args in commands {
            let out = pair.run(args);
            pair.assert_refused(&out, &format!("{case}: hopper {}", args.join(" "))).await;
        }
    }
    for v in &vhosts {
        let (queues, exchanges) = objects_on(v.broker, &name).await;
        assert_eq!(queues, BTreeSet::from(["parked".to_string()]), "{:?}: nothing created", v.broker);
        assert!(exchanges.is_empty(), "{:?}: nothing created: {exchanges:?}", v.broker);
        let connection = v.connect().await;
        let channel = connection.create_channel().await.unwrap();
        let m = channel.basic_get("parked".into(), BasicGetOptions { no_ack: true }).await.unwrap();
        let m = m.unwrap_or_else(|| panic!("{:?}: the parked message is gone", v.broker));
        assert!(!m.delivery.redelivered, "{:?}: the parked message was peeked at", v.broker);
    }
}

/// The same refusal for `inspect --dead-letters` when the queue exists only where the AMQP URL
/// points, the broker the user means: the management API's broker has no such queue. hopper
/// must refuse the pair before reading either, not answer from the wrong broker.
#[tokio::test]
async fn two_brokers_inspect_refuses_before_reading_the_other_broker() {
    let name = support::unique("hopper-test-two-brokers-inspect");
    let mut vhosts = Vec::new();
    for b in ALL_BROKERS {
        vhosts.push(Vhost::named(b, &name).await);
    }
    for pair in Pair::ALL {
        let queue = format!("parked-on-{:?}", pair.amqp);
        let amqp_side = vhosts.iter().find(|v| v.broker == pair.amqp).unwrap();
        let connection = amqp_side.connect().await;
        let channel = connection.create_channel().await.unwrap();
        support::queue(&channel, &queue, FieldTable::default()).await;
        support::publish(&connection, "", &queue, &["parked-1".to_string()]).await;
        let args = ["inspect", "--vhost", &name, "--queue", &queue, "--dead-letters"];
        let out = pair.run(&args);
        let case = format!("AMQP {:?}, management {:?}: hopper {}", pair.amqp, pair.management, args.join(" "));
        pair.assert_refused(&out, &case).await;
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Refusal hints that can be pasted
// ---------------------------------------------------------------------------------------------

/// A queue name with a space, so that a pasted command must quote it.
const CLASSIC: &str =
    "[topology.orders]\nqueue = \"orders eu\"\nqueue_type = \"classic\"\ndelays = [\"1s\"]\nmax_attempts = 2\n";
const QUORUM: &str = "[topology.orders]\nqueue = \"orders eu\"\nqueue_type = \"quorum\"\ndelivery_limit = 5\ndelays = [\"1s\"]\nmax_attempts = 2\n";
const QUEUES: [&str; 3] = ["orders eu", "orders eu.wait-1s", "orders eu.dlq"];

/// The TOML key a `key = value` line sets, if the line is one.
fn key_of(line: &str) -> Option<String> {
    let table: toml::Table = toml::from_str(line).ok()?;
    (table.len() == 1).then(|| table.keys().next().unwrap().clone())
}

/// The lines of a table: from its header (exclusive) to the next header.
fn table_lines(lines: &[String], header: &str) -> Option<std::ops::Range<usize>> {
    let start = lines.iter().position(|l| l.trim() == header)? + 1;
    let end = lines[start..].iter().position(|l| l.trim_start().starts_with('[')).map_or(lines.len(), |i| start + i);
    Some(start..end)
}

/// Does what a user does with a spec way out: in the file it names, in the table it names,
/// each `set` line replaces the line of the same key or is added; each `remove` key is deleted
/// from the table and from [defaults].
fn paste(edit: &Value) {
    let file = edit["file"].as_str().unwrap_or_else(|| panic!("no file in {edit:#}"));
    let table = edit["table"].as_str().unwrap_or_else(|| panic!("no table in {edit:#}"));
    let mut lines: Vec<String> = std::fs::read_to_string(file).unwrap().lines().map(String::from).collect();
    for line in edit["set"].as_array().unwrap_or_else(|| panic!("no set in {edit:#}")) {
        let line = line.as_str().unwrap();
        let key = key_of(line).unwrap_or_else(|| panic!("`{line}` is not a TOML `key = value` line"));
        let range = table_lines(&lines, table).unwrap_or_else(|| panic!("no {table} in {file}"));
        match range.clone().find(|&i| key_of(&lines[i]).as_deref() == Some(key.as_str())) {
            Some(i) => lines[i] = line.to_string(),
            None => lines.insert(range.end, line.to_string()),
        }
    }
    for key in edit["remove"].as_array().into_iter().flatten() {
        let key = key.as_str().unwrap();
        for header in [table, "[defaults]"] {
            if let Some(range) = table_lines(&lines, header) {
                let doomed: Vec<usize> = range.filter(|&i| key_of(&lines[i]).as_deref() == Some(key)).rev().collect();
                for i in doomed {
                    lines.remove(i);
                }
            }
        }
    }
    std::fs::write(file, lines.join("\n") + "\n").unwrap();
}

/// What no way out may say: an empty value, a value quoted twice, or hopper's own at-least-once
/// arguments taken for something someone else declared.
fn assert_well_formed(way: &Value) {
    // Older versions gave bare sentences: they are held to the same rules.
    let says = way.as_str().or_else(|| way["says"].as_str());
    let mut texts: Vec<&str> = vec![says.unwrap_or_else(|| panic!("no says in {way:#}"))];
    texts.extend(way["command"].as_str());
    for key in ["set", "remove"] {
        texts.extend(way["spec"][key].as_array().into_iter().flatten().map(|v| v.as_str().unwrap()));
    }
    for text in texts {
        // `key = value`: right after `= ` comes the value, not the end, a space or punctuation.
        assert!(!text.trim_end().ends_with('='), "an empty value at the end of {text:?} (way out {way:#})");
        for (i, _) in text.match_indices("= ") {
            let next = text[i + 2..].chars().next();
            assert!(
                next.is_some_and(|c| !c.is_whitespace() && !",;)".contains(c)),
                "an empty value after `=` in {text:?} (way out {way:#})"
            );
        }
        for (i, _) in text.match_indices("\"\"") {
            let next = text[i + 2..].chars().next();
            assert!(!next.is_some_and(|c| c.is_alphanumeric()), "a value quoted twice in {text:?} (way out {way:#})");
        }
        if text.contains("something else") {
            for own in ["x-dead-letter-strategy", "x-overflow", "at-least-once", "reject-publish"] {
                assert!(!text.contains(own), "hopper's own `{own}` called set by something else: {text:?}");
            }
        }
    }
    for line in way["spec"]["set"].as_array().into_iter().flatten() {
        let line = line.as_str().unwrap();
        if let Err(e) = toml::from_str::<toml::Table>(line) {
            panic!("`{line}` is not TOML: {e}");
        }
    }
}

/// The conflicts of `apply --format json`, each checked for well-formed ways out.
fn conflicts(report: &Value) -> Vec<Value> {
    let conflicts: Vec<Value> =
        support::all(support::steps(report), &json!({"action": "conflict"})).into_iter().cloned().collect();
    for c in &conflicts {
        for way in c["ways_out"].as_array().unwrap_or_else(|| panic!("no ways out in {c:#}")) {
            assert_well_formed(way);
        }
    }
    conflicts
}

/// How `apply` reads the broker: through the management API, or over AMQP alone, as it does when
/// the API cannot be used (here: nothing listens at its URL), learning a queue's arguments from
/// the broker's refusal of an equivalent declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    ManagementApi,
    AmqpAlone,
}

/// `apply --format json` read the way `reading` says: (exit code, the report).
fn apply(vhost: &Vhost, reading: Reading, spec: &Path) -> (Option<i32>, Value) {
    let (code, report) = match reading {
        Reading::ManagementApi => vhost.json(&["apply", s(spec)]),
        Reading::AmqpAlone => {
            let args = ["--format", "json", "apply", "--amqp-only", s(spec)];
            let out = hopper_with(Some(vhost.broker.amqp()), Some("http://127.0.0.1:1/api"), &args);
            let report = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", support::text(&out.stderr)));
            (out.status.code(), report)
        }
    };
    let read_from = if reading == Reading::AmqpAlone { "amqp" } else { "management_api" };
    assert_eq!(report["vhosts"][0]["read_from"], read_from, "{report:#}");
    (code, report)
}

/// Applies `before`, parks a message in the main queue, then changes the spec to `after`:
/// refused (exit 3) with nothing changed. Then pastes the spec way out, as a user would, and
/// applies again: no conflict, the message still there, and diff in sync.
async fn refusal_hints_can_be_pasted(broker: Broker, reading: Reading, before: &str, after: &str) {
    let vhost = Vhost::new(broker, "safety-paste").await;
    let spec = vhost.spec("orders.toml", before);
    assert_eq!(vhost.json(&["apply", s(&spec)]).0, Some(0));
    let types = queue_types(broker, &vhost.name).await;
    let connection = vhost.connect().await;
    support::publish(&connection, "orders", "orders", &["waiting-1".to_string()]).await;

    let spec = vhost.spec("orders.toml", after);
    let (code, report) = apply(&vhost, reading, &spec);
    assert_eq!(code, Some(3), "{report:#}");
    assert_eq!(report["applied"], false);
    assert_eq!(queue_types(broker, &vhost.name).await, types, "nothing changed");
    assert_eq!(support::count(&connection, "orders eu").await, Some(1), "the message is still there");

    let conflicts = conflicts(&report);
    assert!(!conflicts.is_empty(), "{report:#}");
    let mut edits = Vec::new();
    for c in &conflicts {
        let edit = c["ways_out"].as_array().unwrap().iter().find_map(|w| w.get("spec")).cloned();
        let edit = edit.unwrap_or_else(|| panic!("no spec edit among the ways out of {c:#}"));
        assert_eq!(edit["file"], s(&spec), "{edit:#}");
        assert_eq!(edit["table"], "[topology.orders]", "{edit:#}");
        edits.push(edit);
    }
    paste(&edits[0]);
    let pasted = std::fs::read_to_string(&spec).unwrap();
    let (code, report) = apply(&vhost, reading, &spec);
    assert_eq!(code, Some(0), "after pasting, the spec is\n{pasted}\nand apply says {report:#}");
    support::none(support::steps(&report), &json!({"action": "conflict"}));
    assert_eq!(queue_types(broker, &vhost.name).await, types);
    assert_eq!(support::count(&connection, "orders eu").await, Some(1), "the message is still there");
    let (code, diff) = vhost.json(&["diff", s(&spec)]);
    assert_eq!((code, &diff["in_sync"]), (Some(0), &json!(true)), "{diff:#}");
}

async fn classic_to_quorum_hint_pasted(broker: Broker) {
    refusal_hints_can_be_pasted(broker, Reading::ManagementApi, CLASSIC, QUORUM).await;
}

async fn quorum_to_classic_hint_pasted(broker: Broker) {
    refusal_hints_can_be_pasted(broker, Reading::ManagementApi, QUORUM, CLASSIC).await;
}

async fn classic_to_quorum_hint_pasted_over_amqp_alone(broker: Broker) {
    refusal_hints_can_be_pasted(broker, Reading::AmqpAlone, CLASSIC, QUORUM).await;
}

async fn quorum_to_classic_hint_pasted_over_amqp_alone(broker: Broker) {
    refusal_hints_can_be_pasted(broker, Reading::AmqpAlone, QUORUM, CLASSIC).await;
}

/// The other way out: drain, then paste each refused queue's `command` into a shell. It keeps
/// the broker's own check where there is one: `--if-empty` for a classic queue, none for a
/// quorum queue (RabbitMQ refuses it there). On the 3.10 slot only, because its `rabbitmqctl`
/// (the system broker's) is the one on PATH.
async fn pasted_commands_recreate_the_queues(reading: Reading, before: &str, after: &str) {
    let broker = Broker::RabbitMq3_10;
    let vhost = Vhost::new(broker, "safety-paste-command").await;
    let spec = vhost.spec("orders.toml", before);
    assert_eq!(vhost.json(&["apply", s(&spec)]).0, Some(0));
    let types = queue_types(broker, &vhost.name).await;
    let connection = vhost.connect().await;
    support::publish(&connection, "orders", "orders", &["waiting-1".to_string()]).await;
    let spec = vhost.spec("orders.toml", after);
    let (code, report) = apply(&vhost, reading, &spec);
    assert_eq!(code, Some(3), "{report:#}");

    assert_eq!(support::drain(&connection, "orders eu").await.len(), 1, "the parked message, drained");
    let conflicts = conflicts(&report);
    assert_eq!(conflicts.len(), QUEUES.len(), "{report:#}");
    for c in &conflicts {
        let queue = c["object"]["name"].as_str().unwrap();
        let command = c["ways_out"].as_array().unwrap().iter().find_map(|w| w["command"].as_str());
        let command = command.unwrap_or_else(|| panic!("no command among the ways out of {c:#}"));
        let classic = types[queue] == "classic";
        assert_eq!(command.contains(" --if-empty "), classic, "{queue:?} is a {} queue: `{command}`", types[queue]);
        let out = Command::new("sh").arg("-c").arg(command).output().expect("run sh");
        assert!(out.status.success(), "$ {command}\n{}{}", support::text(&out.stdout), support::text(&out.stderr));
        assert_eq!(support::count(&connection, queue).await, None, "`{command}` deleted {queue:?}");
    }
    let (code, report) = apply(&vhost, reading, &spec);
    if reading == Reading::AmqpAlone {
        // Over AMQP alone hopper cannot list bindings: a wait queue to create beside an existing
        // retry exchange may be a delay that moved, whose old binding it cannot see, so it
        // refuses and says why; with the management API the same spec converges.
        assert_eq!(code, Some(3), "{report:#}");
        let blind = support::one(support::steps(&report), &json!({"action": "conflict"}));
        assert_eq!(blind["object"]["name"], "orders eu.wait-1s", "{blind:#}");
        let argument = blind["differences"][0]["argument"].as_str().unwrap();
        assert!(argument.starts_with("binding of orders eu.retry"), "{blind:#}");
        let (code, report) = apply(&vhost, Reading::ManagementApi, &spec);
        assert_eq!(code, Some(0), "{report:#}");
    } else {
        assert_eq!(code, Some(0), "{report:#}");
    }
    let want = if after.contains("quorum") { "quorum" } else { "classic" };
    for (queue, kind) in queue_types(broker, &vhost.name).await {
        assert_eq!(kind, want, "{queue} recreated as the spec says");
    }
}

#[tokio::test]
async fn rabbitmq_3_10_pasted_commands_recreate_classic_as_quorum() {
    pasted_commands_recreate_the_queues(Reading::ManagementApi, CLASSIC, QUORUM).await;
}

#[tokio::test]
async fn rabbitmq_3_10_pasted_commands_recreate_quorum_as_classic() {
    pasted_commands_recreate_the_queues(Reading::ManagementApi, QUORUM, CLASSIC).await;
}

#[tokio::test]
async fn rabbitmq_3_10_pasted_commands_recreate_classic_as_quorum_over_amqp_alone() {
    pasted_commands_recreate_the_queues(Reading::AmqpAlone, CLASSIC, QUORUM).await;
}

#[tokio::test]
async fn rabbitmq_3_10_pasted_commands_recreate_quorum_as_classic_over_amqp_alone() {
    pasted_commands_recreate_the_queues(Reading::AmqpAlone, QUORUM, CLASSIC).await;
}

// ---------------------------------------------------------------------------------------------
// 4. Graphs of hostile names
// ---------------------------------------------------------------------------------------------

/// Two vhosts whose names differ by `/` and `.`, names that differ by `.` and `_`, non-ASCII
/// names, an exchange and a queue of one name, and names with `"`, `\`, `|`, `<&>'` and DOT's
/// escapes (`\N`, `\G`).
const HOSTILE: &str = r#"
[defaults]
queue_type = "classic"
max_attempts = 2
delays = ["1s"]

[topology.t1]
queue = "svc.a"

[topology.t2]
queue = "svc_a"

[topology.t3]
queue = "é"
exchange = "ü"

[topology.t4]
queue = "say \"hi\""
exchange = "back\\slash"

[topology.t5]
queue = "ü"
exchange = "注文|x"

[topology.t6]
queue = "end\\"
exchange = "a\\Nb\\G<&>'x"
exchange_type = "fanout"
max_attempts = 1
delays = []
"#;

/// The spec's objects per vhost, each as the lines its node shows: a queue its name, an
/// exchange its name and `(type)`.
fn compiled_nodes(dir: &Path) -> BTreeMap<String, Vec<Vec<String>>> {
    let (code, compiled) = support::hopper_json(None, &["compile", s(dir)]);
    assert_eq!(code, Some(0), "{compiled:#}");
    let mut seen: BTreeMap<String, BTreeSet<Vec<String>>> = BTreeMap::new();
    for t in compiled["topologies"].as_array().unwrap() {
        let vhost = t["topology"]["vhost"].as_str().unwrap().to_string();
        for o in t["objects"].as_array().unwrap() {
            let name = o["name"].as_str().map(String::from);
            let lines = match o["object"].as_str().unwrap() {
                "queue" => vec![name.unwrap()],
                "exchange" => vec![name.unwrap(), format!("({})", o["type"].as_str().unwrap())],
                _ => continue,
            };
            seen.entry(vhost.clone()).or_default().insert(lines);
        }
    }
    seen.into_iter().map(|(v, nodes)| (v, nodes.into_iter().collect())).collect()
}

/// XML character data back to text; panics on a raw `<`, `"` or an `&` that starts no entity.
fn xml_text(raw: &str) -> String {
    let mut out = String::new();
    let mut rest = raw;
    while let Some(c) = rest.chars().next() {
        if c == '&' {
            let end = rest.find(';').unwrap_or_else(|| panic!("a raw `&` in SVG text {raw:?}"));
            let entity = &rest[1..end];
            let decoded = match entity {
                "amp" => '&',
                "lt" => '<',
                "gt" => '>',
                "quot" => '"',
                "apos" => '\'',
                e if e.starts_with("#x") => char::from_u32(u32::from_str_radix(&e[2..], 16).unwrap()).unwrap(),
                e if e.starts_with('#') => char::from_u32(e[1..].parse().unwrap()).unwrap(),
                e => panic!("unknown entity &{e}; in SVG text {raw:?}"),
            };
            out.push(decoded);
            rest = &rest[end + 1..];
        } else {
            assert!(c != '<' && c != '"', "a raw {c:?} in SVG text {raw:?}");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// `(class, title, text lines)` of every `<g>` of an SVG that graphviz made.
fn svg_groups(svg: &str) -> Vec<(String, String, Vec<String>)> {
    let mut groups = Vec::new();
    for chunk in svg.split("<g id=\"").skip(1) {
        let class = chunk.split("class=\"").nth(1).and_then(|c| c.split('"').next()).unwrap_or("").to_string();
        let title = chunk.split("<title>").nth(1).and_then(|t| t.split("</title>").next()).map(xml_text);
        let mut texts = Vec::new();
        for t in chunk.split("<text").skip(1) {
            let body = t.split_once('>').unwrap().1;
            texts.push(xml_text(body.split("</text>").next().unwrap()));
        }
        groups.push((class, title.unwrap_or_default(), texts));
    }
    groups
}

/// The DOT hopper writes, one statement a line: cluster id -> node ids declared in it.
fn dot_clusters(dot: &str) -> BTreeMap<String, Vec<String>> {
    let mut clusters: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in dot.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("subgraph ") {
            current = Some(rest.trim_end_matches('{').trim().to_string());
        } else if line == "}" {
            current = None;
        } else if let Some(cluster) = &current
            && line.contains("[shape=")
        {
            clusters.entry(cluster.clone()).or_default().push(line.split(' ').next().unwrap().to_string());
        }
    }
    clusters
}

/// The spec of HOSTILE in vhosts `a/b` and `a.b`, one file each.
fn hostile_spec(dir: &Scratch) -> PathBuf {
    let specs = dir.dir("specs");
    std::fs::write(specs.join("1.toml"), format!("vhost = \"a/b\"\n{HOSTILE}")).unwrap();
    let other = HOSTILE.replace("[topology.t", "[topology.u");
    std::fs::write(specs.join("2.toml"), format!("vhost = \"a.b\"\n{other}")).unwrap();
    specs
}

/// Issue: node ids were made from names, so `svc.a` and `svc_a` (and `é` and `ü`) were one
/// node, and a `"` in a name ended the label: `dot` refused the file. Ids must be distinct,
/// every compiled object its own node in its vhost's cluster, and every name shown as it is.
#[test]
fn graph_of_hostile_names_renders_with_dot() {
    let present = Command::new("dot").arg("-V").output();
    assert!(
        present.is_ok(),
        "graphviz's `dot` is not installed: this test pipes `hopper graph` into the real `dot -Tsvg` (install graphviz)"
    );
    let scratch = Scratch::new("graph");
    let specs = hostile_spec(&scratch);
    let expected = compiled_nodes(&specs);
    assert_eq!(expected.keys().collect::<Vec<_>>(), ["a.b", "a/b"]);

    let out = support::hopper(None, &["graph", s(&specs)]);
    assert_eq!(out.status.code(), Some(0));
    let dot_text = support::text(&out.stdout);
    let mut dot = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dot");
    dot.stdin.take().unwrap().write_all(dot_text.as_bytes()).unwrap();
    let svg = dot.wait_with_output().unwrap();
    assert!(svg.status.success(), "dot -Tsvg refused hopper's graph: {}\n{dot_text}", support::text(&svg.stderr));
    let svg = support::text(&svg.stdout);

    let clusters = dot_clusters(&dot_text);
    let ids: Vec<&String> = clusters.values().flatten().collect();
    let distinct: BTreeSet<&String> = ids.iter().copied().collect();
    assert_eq!(ids.len(), distinct.len(), "node ids repeat:\n{dot_text}");

    let groups = svg_groups(&svg);
    let nodes: BTreeMap<&str, &Vec<String>> =
        groups.iter().filter(|g| g.0 == "node").map(|g| (g.1.as_str(), &g.2)).collect();
    assert_eq!(nodes.len(), ids.len(), "dot drew {} nodes for {} declared:\n{dot_text}", nodes.len(), ids.len());
    let mut drawn: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    for (cluster, members) in &clusters {
        let label = groups
            .iter()
            .find(|g| g.0 == "cluster" && &g.1 == cluster)
            .and_then(|g| g.2.first())
            .unwrap_or_else(|| panic!("no cluster {cluster} in the SVG"));
        let vhost = label.strip_prefix("vhost ").unwrap_or_else(|| panic!("cluster label {label:?}")).to_string();
        let mut shown: Vec<Vec<String>> = members.iter().map(|id| nodes[id.as_str()].clone()).collect();
        shown.sort();
        assert!(drawn.insert(vhost.clone(), shown).is_none(), "two clusters for vhost {vhost:?}");
    }
    assert_eq!(drawn, expected, "each compiled object is one node of its vhost, showing its name");
    for name in ["svc.a", "svc_a", "é", "ü", "say \"hi\"", "back\\slash", "注文|x", "end\\", "a\\Nb\\G<&>'x"] {
        assert!(
            groups.iter().any(|g| g.0 == "node" && g.2.first().is_some_and(|l| l == name)),
            "{name:?} is not shown in the SVG"
        );
    }
}

/// Mermaid text back to the label it shows: `#NN;` entity codes and `<br>` line breaks.
fn mermaid_text(label: &str) -> String {
    let mut out = String::new();
    let mut rest = label;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("<br>") {
            out.push('\n');
            rest = after;
        } else if let Some(code) = rest.strip_prefix('#').and_then(|r| r.split_once(';')).and_then(|(n, after)| {
            let c = char::from_u32(n.parse().ok()?)?;
            Some((c, after))
        }) {
            out.push(code.0);
            rest = code.1;
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The label of a Mermaid line: between its first and its last `"`. Panics if the inside holds
/// a raw `"` or `|`, which end a Mermaid label.
fn mermaid_label(line: &str) -> String {
    let (first, last) = (line.find('"').unwrap(), line.rfind('"').unwrap());
    assert!(first < last, "no quoted label in {line:?}");
    let inside = &line[first + 1..last];
    assert!(!inside.contains(['"', '|']), "a raw `\"` or `|` inside the label of {line:?}");
    mermaid_text(inside)
}

#[test]
fn mermaid_graph_of_hostile_names_keeps_nodes_and_labels_apart() {
    let scratch = Scratch::new("mermaid");
    let specs = hostile_spec(&scratch);
    let expected = compiled_nodes(&specs);
    let out = support::hopper(None, &["graph", "--style", "mermaid", s(&specs)]);
    assert_eq!(out.status.code(), Some(0));
    let text = support::text(&out.stdout);

    let mut ids = Vec::new();
    let mut drawn: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines().skip(1) {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("subgraph ") {
            let label = mermaid_label(rest);
            let vhost = label.strip_prefix("vhost ").unwrap_or_else(|| panic!("subgraph label {label:?}"));
            ids.push(rest.split(['[', '(']).next().unwrap().to_string());
            current = Some(vhost.to_string());
            assert!(drawn.insert(vhost.to_string(), Vec::new()).is_none(), "two subgraphs for {vhost:?}");
        } else if trimmed == "end" {
            current = None;
        } else if let Some(vhost) = &current {
            ids.push(trimmed.split(['[', '(']).next().unwrap().to_string());
            let shown = mermaid_label(trimmed).split('\n').map(String::from).collect();
            drawn.get_mut(vhost).unwrap().push(shown);
        } else {
            // An edge: `from -- "label" --> to` or `from -. "label" .-> to`.
            mermaid_label(trimmed);
        }
    }
    let distinct: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "ids repeat:\n{text}");
    for nodes in drawn.values_mut() {
        nodes.sort();
    }
    assert_eq!(drawn, expected, "each compiled object is one node of its vhost, showing its name:\n{text}");
}

// ---------------------------------------------------------------------------------------------
// 5. Limits and files
// ---------------------------------------------------------------------------------------------

const OK: &str = "[topology.ok]\nmax_attempts = 1\n";
const PROMPTLY: Duration = Duration::from_secs(10);

/// A 300-byte vhost is the error, where it is written; a 250-byte queue name in it is not
/// (RabbitMQ takes it, whatever the vhost: see spec_errors).
#[test]
fn a_300_byte_vhost_is_an_error_at_the_vhost_and_queue_lengths_are_not() {
    let scratch = Scratch::new("long-vhost");
    let spec = scratch.file(
        "long.toml",
        &format!("vhost = \"{}\"\n[topology.t]\nmax_attempts = 1\nqueue = \"{}\"\n", "v".repeat(300), "q".repeat(250)),
    );
    for args in [&["compile", s(&spec)][..], &["apply", "--amqp-url", "amqp://guest:guest@127.0.0.1:1", s(&spec)]] {
        let out = support::hopper(None, args);
        let stderr = support::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&format!("{}:1:9", spec.display())), "not at the vhost's value:\n{stderr}");
        assert!(stderr.contains("the vhost name is 300 bytes long"), "{stderr}");
        assert!(stderr.contains("the spec has 1 error"), "one error only:\n{stderr}");
        for unexpected in ["queue name", "generated name", "_q"] {
            assert!(!stderr.contains(unexpected), "{unexpected:?}: hopper talks about queue lengths:\n{stderr}");
        }
    }
}

#[test]
fn a_topology_table_without_topologies_is_an_error() {
    let scratch = Scratch::new("empty-topology");
    for (file, text) in [("header.toml", "[topology]\n"), ("inline.toml", "topology = {}\n")] {
        let spec = scratch.file(file, text);
        let out = support::hopper(None, &["compile", s(&spec)]);
        let stderr = support::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(out.stdout.is_empty(), "{file}: nothing compiled");
        assert!(stderr.contains("declares no topology"), "{file}: {stderr}");
        assert!(stderr.contains(&format!("{}:1:", spec.display())), "{file}: not at the key:\n{stderr}");
    }
}

#[test]
fn a_fifo_on_the_command_line_is_refused_promptly() {
    let scratch = Scratch::new("fifo");
    let fifo = scratch.path("spec.toml");
    mkfifo(&fifo);
    let out = hopper_within(PROMPTLY, &["compile", s(&fifo)]);
    let stderr = support::text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(s(&fifo)), "the FIFO is not named:\n{stderr}");
}

#[test]
fn dev_zero_is_refused_promptly() {
    let out = hopper_within(PROMPTLY, &["compile", "/dev/zero"]);
    let stderr = support::text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/dev/zero"), "{stderr}");
}

/// A directory with a good spec and one bad entry: the bad one is named, never skipped.
#[test]
fn bad_entries_of_a_spec_directory_are_named() {
    let scratch = Scratch::new("bad-entries");
    type Make = fn(&Path);
    let cases: [(&str, Make); 3] = [
        ("x.toml", |p| std::os::unix::fs::symlink("nowhere.toml", p).unwrap()),
        ("y.toml", |p| std::os::unix::fs::symlink("y.toml", p).unwrap()),
        ("z.toml", mkfifo),
    ];
    for (name, make) in cases {
        let dir = scratch.dir(name.trim_end_matches(".toml"));
        std::fs::write(dir.join("a.toml"), OK).unwrap();
        let bad = dir.join(name);
        make(&bad);
        let out = hopper_within(PROMPTLY, &["compile", s(&dir)]);
        let stderr = support::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(s(&bad)), "{name} is not named:\n{stderr}");
    }
}

/// Emacs leaves `.#a.toml`, a symbolic link to nothing, beside a file being edited.
#[test]
fn an_editor_lock_file_in_a_spec_directory_is_ignored() {
    let scratch = Scratch::new("lock");
    let dir = scratch.dir("specs");
    std::fs::write(dir.join("a.toml"), OK).unwrap();
    std::os::unix::fs::symlink("user@host.4242:1700000000", dir.join(".#a.toml")).unwrap();
    let out = hopper_within(PROMPTLY, &["--format", "json", "compile", s(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", support::text(&out.stderr));
    let compiled: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> =
        compiled["topologies"].as_array().unwrap().iter().map(|t| t["topology"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ok"]);
}

/// Names with ESC, a newline or NUL (written as TOML escapes) anywhere a spec names something:
/// refused, and nothing raw reaches the terminal.
#[test]
fn names_with_control_characters_are_refused_and_never_printed_raw() {
    let scratch = Scratch::new("control");
    let names = [(r"esc\u001b[31mred", "U+001B"), (r"line1\nline2", "U+000A"), (r"nul\u0000byte", "U+0000")];
    for (name, code) in names {
        let specs = [
            format!("[topology.t]\nmax_attempts = 1\nqueue = \"{name}\"\n"),
            format!("[topology.t]\nmax_attempts = 1\nexchange = \"{name}\"\n"),
            format!("[topology.t]\nmax_attempts = 1\ndead_letter_queue = \"{name}\"\n"),
            format!("[topology.t]\nmax_attempts = 1\ndead_letter_exchange = \"{name}\"\n"),
            format!("[topology.t]\nmax_attempts = 2\ndelays = [\"1s\"]\nretry_exchange = \"{name}\"\n"),
            format!("[topology.t]\nmax_attempts = 1\nrouting_keys = [\"{name}\"]\n"),
            format!("[topology.\"{name}\"]\nmax_attempts = 1\n"),
            format!("vhost = \"{name}\"\n[topology.t]\nmax_attempts = 1\n"),
        ];
        for text in specs {
            let spec = scratch.file("control.toml", &text);
            let out = support::hopper(None, &["compile", s(&spec)]);
            let stderr = support::text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "accepted:\n{text}\n{stderr}");
            assert!(stderr.contains(&format!("control character {code}")), "{text}\n{stderr}");
            let raw: Vec<char> = stderr.chars().filter(|c| c.is_control() && *c != '\n').collect();
            assert!(raw.is_empty(), "raw control characters {raw:?} in stderr for\n{text}\n{stderr:?}");
            assert!(!stderr.contains("line1\nline2"), "a raw newline inside a name:\n{stderr}");
        }
    }
}

#[test]
fn fanout_topology_inheriting_routing_keys_is_an_error_at_the_topology() {
    let scratch = Scratch::new("fanout");
    let text = "[defaults]\nrouting_keys = [\"k\"]\nmax_attempts = 1\n\n[topology.direct]\n\n[topology.fan]\nexchange_type = \"fanout\"\n";
    let spec = scratch.file("fanout.toml", text);
    let out = support::hopper(None, &["compile", s(&spec)]);
    let stderr = support::text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("{}:7:11", spec.display())), "not at [topology.fan]:\n{stderr}");
    assert!(stderr.contains("inherits routing_keys from [defaults]"), "{stderr}");
    assert!(stderr.contains("the spec has 1 error"), "{stderr}");

    let spec = scratch.file("fanout.toml", &format!("{text}routing_keys = []\n"));
    let (code, compiled) = support::hopper_json(None, &["compile", s(&spec)]);
    assert_eq!(code, Some(0), "{compiled:#}");
    let main_binding = |topology: &str| {
        let t = support::one(&compiled["topologies"], &json!({"topology": {"name": topology}}));
        support::one(&t["objects"], &json!({"object": "binding", "source": topology}))["routing_key"].clone()
    };
    assert_eq!(main_binding("fan"), "");
    assert_eq!(main_binding("direct"), "k");
}

#[test]
fn classic_topology_inheriting_delivery_limit_is_an_error_at_the_topology() {
    let scratch = Scratch::new("delivery-limit");
    let text =
        "[defaults]\ndelivery_limit = 5\nmax_attempts = 1\n\n[topology.q]\n\n[topology.c]\nqueue_type = \"classic\"\n";
    let spec = scratch.file("limit.toml", text);
    let out = support::hopper(None, &["compile", s(&spec)]);
    let stderr = support::text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("{}:7:11", spec.display())), "not at [topology.c]:\n{stderr}");
    assert!(stderr.contains("inherits delivery_limit from [defaults]"), "{stderr}");
    assert!(stderr.contains("the spec has 1 error"), "{stderr}");
}

/// A topology's own `delays` replace a `backoff` from [defaults]: one schedule, its own.
#[test]
fn own_delays_replace_a_default_backoff() {
    let scratch = Scratch::new("backoff");
    let text = "[defaults]\nbackoff = { initial = \"1s\", multiplier = 3.0 }\nmax_attempts = 3\n\n[topology.own]\ndelays = [\"7s\", \"11s\"]\n\n[topology.inherits]\n";
    let spec = scratch.file("backoff.toml", text);
    let (code, compiled) = support::hopper_json(None, &["compile", s(&spec)]);
    assert_eq!(code, Some(0), "{compiled:#}");
    let waits = |topology: &str| -> Vec<(String, i64)> {
        let t = support::one(&compiled["topologies"], &json!({"topology": {"name": topology}}));
        support::all(&t["objects"], &json!({"object": "queue", "role": {"kind": "wait"}}))
            .into_iter()
            .map(|q| (q["name"].as_str().unwrap().to_string(), q["arguments"]["x-message-ttl"].as_i64().unwrap()))
            .collect()
    };
    let own = support::one(&compiled["topologies"], &json!({"topology": {"name": "own"}}));
    assert_eq!(own["topology"]["hop_delays"], json!(["7s", "11s"]));
    assert_eq!(waits("own"), [("own.wait-7s".to_string(), 7000), ("own.wait-11s".to_string(), 11000)]);
    assert_eq!(waits("inherits"), [("inherits.wait-1s".to_string(), 1000), ("inherits.wait-3s".to_string(), 3000)]);
}

/// The longest names RabbitMQ takes, in a quorum topology: a 200-byte vhost, a 240-byte main
/// queue and a 253-byte dead-letter queue (so `<vhost>_<queue>` is over 255 bytes). They apply,
/// and a message a consumer rejects reaches the dead-letter queue.
async fn longest_names_apply_and_dead_letter(broker: Broker) {
    let prefix = support::unique("hopper-test-long");
    let name = format!("{prefix}-{}", "v".repeat(200 - prefix.len() - 1));
    assert_eq!(name.len(), 200);
    let vhost = Vhost::named(broker, &name).await;
    let main = format!("main-{}", "m".repeat(235));
    let dlq = format!("dlq-{}", "d".repeat(249));
    assert_eq!((main.len(), dlq.len()), (240, 253));
    let spec = vhost.spec(
        "long.toml",
        &format!(
            "[topology.long]\nqueue_type = \"quorum\"\nqueue = \"{main}\"\ndead_letter_queue = \"{dlq}\"\ndelays = [\"1s\"]\nmax_attempts = 2\n"
        ),
    );
    let (code, report) = vhost.json(&["apply", s(&spec)]);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(queue_types(broker, &name).await.get(&main).map(String::as_str), Some("quorum"));

    let connection = vhost.connect().await;
    support::publish(&connection, "long", "long", &["long-1".to_string()]).await;
    let channel = connection.create_channel().await.unwrap();
    let mut consumer = channel
        .basic_consume(main.as_str().into(), "rejecter".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next())
        .await
        .expect("the consumer gets the message")
        .unwrap()
        .unwrap();
    delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    support::wait_for_count(&connection, &dlq, 1, Duration::from_secs(30)).await;
    let parked = support::drain(&connection, &dlq).await;
    assert_eq!(support::message_id(&parked[0].delivery.properties), "long-1");
    assert_eq!(support::deaths(&parked[0].delivery.properties).first(), Some(&(main.clone(), "rejected".to_string())));
}

/// A queue name given on the command line is printed the way spec names are: a control
/// character shown as an escape, never written raw to the terminal.
async fn command_line_queue_name_is_never_printed_raw(broker: Broker) {
    let vhost = Vhost::new(broker, "safety-raw-queue").await;
    let out = vhost.hopper(&["inspect", "--vhost", &vhost.name, "--queue", "evil\u{1b}[2Jname"]);
    let stderr = support::text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr:?}");
    let raw: Vec<char> = stderr.chars().filter(|c| c.is_control() && *c != '\n').collect();
    assert!(raw.is_empty(), "raw control characters {raw:?} in stderr: {stderr:?}");
}

// ---------------------------------------------------------------------------------------------
// Every per-broker test above, on each broker of the matrix
// ---------------------------------------------------------------------------------------------

/// A user who may read but not configure (a CI job that only diffs). RabbitMQ 4.3 asks the
/// configure permission for a passive declaration, which diff uses for the exact counts of
/// left-over queues: there it keeps the management API's counts instead of failing.
/// A stream where the spec wants a queue of the same name: reading a stream removes nothing, and
/// deleting one deletes its messages even with --if-empty (found by a hostile review, measured on
/// 3.10 and 4.0), so no way out offers a delete.
async fn a_stream_in_the_way_is_never_offered_for_deletion(broker: Broker) {
    let vhost = Vhost::new(broker, "safety-stream").await;
    let connection = vhost.connect().await;
    let channel = connection.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), lapin::types::AMQPValue::LongString("stream".into()));
    let durable = lapin::options::QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("jobs".into(), durable, args).await.unwrap();
    support::publish(&connection, "", "jobs", &["a".to_string(), "b".to_string()]).await;
    let spec = vhost.spec("jobs.toml", "[topology.jobs]\ndelays = [\"1s\"]\n");
    let (code, report) = vhost.json(&["apply", s(&spec)]);
    assert_eq!(code, Some(3), "{report:#}");
    let conflict = support::one(support::steps(&report), &json!({"action": "conflict", "object": {"name": "jobs"}}));
    let ways = conflict["ways_out"].as_array().unwrap();
    assert!(ways.iter().all(|w| w.get("command").is_none()), "{conflict:#}");
    assert!(ways.iter().any(|w| w["says"].as_str().unwrap().contains("is a stream")), "{conflict:#}");
}

/// A queue whose name starts with `-`: the pasted command must still delete that queue, not
/// read the name as an option (rabbitmqctl exits 64 on `-dash`). 3.10's rabbitmqctl is the
/// one on PATH.
#[tokio::test]
async fn rabbitmq_3_10_a_pasted_command_takes_a_name_that_starts_with_a_dash() {
    let vhost = Vhost::new(Broker::RabbitMq3_10, "safety-dash").await;
    let classic = "[topology.dash]\nqueue = \"-dash\"\nqueue_type = \"classic\"\nmax_attempts = 1\n";
    let spec = vhost.spec("dash.toml", classic);
    assert_eq!(vhost.json(&["apply", s(&spec)]).0, Some(0));
    let spec = vhost.spec("dash.toml", &classic.replace("classic", "quorum"));
    let (code, report) = vhost.json(&["apply", s(&spec)]);
    assert_eq!(code, Some(3), "{report:#}");
    let conflict = support::one(support::steps(&report), &json!({"action": "conflict", "object": {"name": "-dash"}}));
    let command = conflict["ways_out"].as_array().unwrap().iter().find_map(|w| w["command"].as_str()).unwrap();
    let out = Command::new("sh").arg("-c").arg(command).output().unwrap();
    assert!(out.status.success(), "$ {command}\n{}{}", support::text(&out.stdout), support::text(&out.stderr));
    assert_eq!(support::count(&vhost.connect().await, "-dash").await, None, "`{command}` deleted -dash");
}

/// A right-to-left override in a name turns the rest of a terminal line around: refused in a
/// spec like a control character, and never printed raw.
#[test]
fn a_bidirectional_override_in_a_name_is_refused() {
    let dir = std::env::temp_dir().join(support::unique("hopper-test-bidi"));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("bidi.toml");
    std::fs::write(&spec, "[topology.t]\nqueue = \"evil\\u202eqwe\"\nmax_attempts = 1\n").unwrap();
    let out = support::hopper(None, &["compile", s(&spec)]);
    let stderr = support::text(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("format character U+202E"), "{stderr}");
    assert!(!stderr.contains('\u{202e}'), "printed raw: {stderr}");

    // Written raw into the file (TOML allows it in a string), the line quoted under the error
    // shows it replaced, not obeyed.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&spec, "[topology.t]\nqueue = \"evil\u{202e}qwe\"\nmax_attempts = 1\n").unwrap();
    let out = support::hopper(None, &["compile", s(&spec)]);
    let stderr = support::text(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains('\u{202e}'), "printed raw: {stderr}");
    assert!(stderr.contains("evil???qwe"), "{stderr}");
}

/// An internal main exchange refuses every producer's publish. Over AMQP the broker's refusal
/// names it, and apply says `internal`, not the exchange's type (found by a hostile review); the
/// management API's listing says it too.
async fn an_internal_exchange_is_named_over_amqp(broker: Broker) {
    let vhost = Vhost::new(broker, "safety-internal").await;
    let channel = vhost.connect().await.create_channel().await.unwrap();
    let options = lapin::options::ExchangeDeclareOptions { durable: true, internal: true, ..Default::default() };
    channel.exchange_declare("jobs".into(), lapin::ExchangeKind::Direct, options, FieldTable::default()).await.unwrap();
    let spec = vhost.spec("jobs.toml", "[topology.jobs]\nmax_attempts = 1\n");
    let out = hopper_with(
        Some(broker.amqp()),
        Some("http://127.0.0.1:1/api"),
        &["--format", "json", "apply", "--amqp-only", s(&spec)],
    );
    assert_eq!(out.status.code(), Some(3), "{}", support::text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let conflict = support::one(support::steps(&report), &json!({"action": "conflict", "object": {"name": "jobs"}}));
    assert_eq!(conflict["differences"], json!([{"argument": "internal", "live": true, "spec": false}]), "{conflict:#}");
    // Through the management API too: hopper's own client reads `internal` (the one it replaced
    // left it out, and the exchange read as in sync).
    let (code, report) = vhost.json(&["apply", s(&spec)]);
    assert_eq!(code, Some(3), "{report:#}");
    assert_eq!(report["vhosts"][0]["read_from"], "management_api");
    let conflict = support::one(support::steps(&report), &json!({"action": "conflict", "object": {"name": "jobs"}}));
    assert_eq!(conflict["differences"], json!([{"argument": "internal", "live": true, "spec": false}]), "{conflict:#}");
}

/// A user of its own with these permissions on the vhost: (its name, an AMQP URL signing in as
/// it, without a vhost). The test deletes it.
async fn user_with(vhost: &Vhost, tags: &str, configure: &str, read: &str, write: &str) -> (String, String) {
    let user = support::unique("hopper-test-user");
    support::create_user(vhost.broker, &user, "secret", tags).await;
    support::set_permissions(vhost.broker, &vhost.name, &user, configure, read, write).await;
    let amqp = vhost.broker.amqp().replace("guest:guest", &format!("{user}:secret"));
    (user, amqp)
}

/// A user who may not configure the topology's queues: apply stops with an error naming the
/// permission, never a conflict whose way out deletes a queue that is exactly right (found by a
/// hostile review: the refusal was read as a differing argument).
async fn a_missing_permission_is_an_error_not_a_conflict(broker: Broker) {
    let vhost = Vhost::new(broker, "safety-permission").await;
    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"1s\"]\nmax_attempts = 2\n");
    assert_eq!(vhost.json(&["apply", s(&spec)]).0, Some(0));
    let connection = vhost.connect().await;
    support::publish(&connection, "orders", "orders", &["kept".to_string()]).await;
    let (user, amqp) = user_with(&vhost, "", "^$", ".*", ".*").await;
    // No management API for this user (no tag): apply reads over AMQP and declares to learn.
    let out = hopper_with(Some(&amqp), Some(broker.management()), &["apply", "--amqp-only", s(&spec)]);
    support::delete_user(broker, &user).await;
    let (stdout, stderr) = (support::text(&out.stdout), support::text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("ACCESS_REFUSED") && stderr.contains("permission"), "{stderr}");
    assert!(!stdout.contains("delete_queue") && !stderr.contains("delete_queue"), "{stdout}{stderr}");
    assert_eq!(support::count(&connection, "orders").await, Some(1), "the message is still there");
}

/// A permission the user lacks for some of the topology's queues, met while carrying out the
/// plan: the broker refused a step, so exit 3 as the README's table says, with the steps done
/// before it reported as done (the broker holds them), not "at least 0 of N".
async fn a_permission_refused_mid_apply_says_what_was_applied(broker: Broker) {
    let vhost = Vhost::new(broker, "safety-permission-mid").await;
    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"1s\", \"5s\"]\nmax_attempts = 3\n");
    // Every name but the wait queues' may be configured.
    let (user, amqp) = user_with(&vhost, "monitoring,policymaker", "^(?!orders\\.wait).*", ".*", ".*").await;
    let out = hopper_with(Some(&amqp), Some(broker.management()), &["--format", "json", "apply", s(&spec)]);
    let table = hopper_with(Some(&amqp), Some(broker.management()), &["apply", s(&spec)]);
    support::delete_user(broker, &user).await;
    assert_eq!(out.status.code(), Some(3), "{}", support::text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let refused = report["vhosts"][0]["refused"].as_array().unwrap();
    assert!(!refused.is_empty(), "{report:#}");
    let steps = support::steps(&report);
    for r in refused {
        assert_eq!(r["permission"], true, "{r}");
        assert!(r["reason"].as_str().unwrap().contains("want of a permission"), "{r}");
        let step = &steps[r["step"].as_u64().unwrap() as usize];
        assert!(step["object"]["name"].as_str().unwrap().starts_with("orders.wait-"), "{step}");
    }
    // What the broker holds is what the report says was done: the exchanges and the queues
    // the user may configure; no binding to a wait queue (their phase never ran).
    let connection = vhost.connect().await;
    for queue in ["orders", "orders.dlq"] {
        assert!(support::count(&connection, queue).await.is_some(), "{queue} was declared");
    }
    for queue in ["orders.wait-1s", "orders.wait-5s"] {
        assert_eq!(support::count(&connection, queue).await, None, "{queue} was refused");
    }
    // The count of changes applied is what the broker now holds, as a dry run finds it, and the
    // owner's record, written before anything else (the user is a policymaker for it).
    let (_, dry) = vhost.json(&["apply", "--dry-run", s(&spec)]);
    let in_sync = support::steps(&dry).as_array().unwrap().iter().filter(|s| s["action"] == "in_sync").count();
    assert!(in_sync > 0);
    support::none(support::steps(&dry), &json!({"action": "record"}));
    assert_eq!(report["vhosts"][0]["changes_applied"], in_sync + 1, "{report:#}");
    assert_eq!(table.status.code(), Some(3));
    let (said, stderr) = (support::text(&table.stdout), support::text(&table.stderr));
    assert!(said.contains("refused by the broker: the broker refused for want of a permission"), "{said}{stderr}");
    assert!(said.contains(&format!("Stopped: the broker refused {} of ", refused.len())), "{said}");
    assert!(said.contains("were applied, the rest were not carried out"), "{said}");
}

async fn a_read_only_user_diffs_a_left_over_queue(broker: Broker) {
    let vhost = Vhost::new(broker, "safety-read-only").await;
    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"1s\"]\nmax_attempts = 2\n");
    assert_eq!(vhost.json(&["apply", s(&spec)]).0, Some(0));
    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"2s\"]\nmax_attempts = 2\n");
    assert_eq!(vhost.json(&["apply", s(&spec)]).0, Some(0), "the 1s wait queue is now left over");

    let (user, amqp) = user_with(&vhost, "monitoring", "^$", ".*", "^$").await;
    let management = broker.management().to_string();
    // The reader signs in to both endpoints with the credentials of the AMQP URL.
    let out = hopper_with(Some(&amqp), Some(&management), &["--format", "json", "diff", s(&spec)]);
    // What the broker itself does with the reader's passive declaration, release by release.
    let url = format!("{amqp}/{}", support::urlencode(&vhost.name));
    let reader = Connection::connect(&url, lapin::ConnectionProperties::default()).await.unwrap();
    let channel = reader.create_channel().await.unwrap();
    let passive = lapin::options::QueueDeclareOptions { passive: true, ..Default::default() };
    let declared = channel.queue_declare("orders.wait-1s".into(), passive, FieldTable::default()).await;
    let _ = reader.close(200, "done".into()).await;
    support::delete_user(broker, &user).await;
    // The 4.3 release notes announce that a passive declaration needs the configure permission;
    // 4.3.6 does not ask it, any more than 3.10 and 4.0 do. If a release starts asking, this
    // fails, and hopper's diff above must still have worked (it keeps the API's counts).
    assert!(declared.is_ok(), "RabbitMQ {:?}: a passive declaration without configure: {declared:?}", broker.version());
    let stderr = support::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "drift, not an error: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    support::one(
        &report["vhosts"][0]["objects"],
        &json!({"status": "extra", "kind": "queue", "name": "orders.wait-1s", "messages": 0}),
    );
}

/// What each release does with arguments 4.3 no longer takes, as `Version::refuses_argument`
/// says, measured: 3.10 and 4.0 declare a queue with any of them; 4.3 refuses
/// x-queue-version = 1 and x-queue-master-locator, and still takes x-queue-mode.
async fn arguments_refused_by_release(broker: Broker) {
    use lapin::types::AMQPValue;
    let vhost = Vhost::new(broker, "safety-refused-args").await;
    let release = hopper::version::Version::new(broker.version().0, broker.version().1, 0);
    for (name, key, value, ours) in [
        ("v1", "x-queue-version", AMQPValue::LongLongInt(1), hopper::model::ArgValue::Int(1)),
        (
            "locator",
            "x-queue-master-locator",
            AMQPValue::LongString("min-masters".into()),
            hopper::model::ArgValue::str("min-masters"),
        ),
        ("lazy", "x-queue-mode", AMQPValue::LongString("lazy".into()), hopper::model::ArgValue::str("lazy")),
    ] {
        // A connection each: 4.3 closes the whole connection over a deprecated feature.
        let connection = vhost.connect().await;
        let channel = connection.create_channel().await.unwrap();
        let mut args = FieldTable::default();
        args.insert(key.into(), value);
        let durable = lapin::options::QueueDeclareOptions { durable: true, ..Default::default() };
        let declared = channel.queue_declare(name.into(), durable, args).await;
        let refused = release.refuses_argument(key, &ours).is_some();
        assert_eq!(declared.is_err(), refused, "RabbitMQ {:?} and {key}: {declared:?}", broker.version());
        let _ = connection.close(200, "done".into()).await;
    }
}

on_every_broker!(
    an_internal_exchange_is_named_over_amqp,
    a_stream_in_the_way_is_never_offered_for_deletion,
    a_missing_permission_is_an_error_not_a_conflict,
    a_permission_refused_mid_apply_says_what_was_applied,
    arguments_refused_by_release,
    a_read_only_user_diffs_a_left_over_queue,
    bindings_that_print_alike_are_two_bindings,
    classic_to_quorum_hint_pasted,
    quorum_to_classic_hint_pasted,
    classic_to_quorum_hint_pasted_over_amqp_alone,
    quorum_to_classic_hint_pasted_over_amqp_alone,
    longest_names_apply_and_dead_letter,
    command_line_queue_name_is_never_printed_raw,
);
