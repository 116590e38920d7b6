//! hopper on a three-node RabbitMQ 3.10 cluster (`.ci/cluster.sh`): apply losing the node it
//! writes to, stopped or killed, and the cluster's view in diff and inspect (members and nodes
//! down, alarms). These tests stop, kill and alarm nodes: `.config/nextest.toml` runs them one at
//! a time, and each holds a lock file so that two test runs on one machine take turns. Each node
//! it stops is started again when the test ends, failed or not.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hopper::broker::Endpoint;
use hopper::broker::http::{self, Api, segment};
use lapin::{Connection, ConnectionProperties};
use serde_json::{Value, json};

use crate::support::{all, count, hopper_env, one, publish, text, unique, urlencode};

const NODES: [u16; 3] = [1, 2, 3];

fn node_name(n: u16) -> String {
    format!("hopper-c{n}@localhost")
}

fn amqp(n: u16) -> String {
    format!("amqp://guest:guest@127.0.0.1:{}", 5680 + n)
}

fn management(n: u16) -> String {
    format!("http://127.0.0.1:{}/api", 15680 + n)
}

/// (HOPPER_AMQP_URL, HOPPER_MANAGEMENT_URL) naming these nodes, in this order.
fn urls(nodes: &[u16]) -> (String, String) {
    let join = |f: fn(u16) -> String| nodes.iter().map(|n| f(*n)).collect::<Vec<_>>().join(",");
    (join(amqp), join(management))
}

fn endpoint(n: u16) -> Endpoint {
    Endpoint::new(&amqp(n), Some(&management(n))).unwrap()
}

/// `.ci/cluster.sh ARGS`; panics with what it said unless it succeeds.
fn cluster_sh(args: &[&str]) {
    let out = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/cluster.sh"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run .ci/cluster.sh");
    assert!(out.status.success(), ".ci/cluster.sh {args:?}: {}{}", text(&out.stdout), text(&out.stderr));
}

/// The cluster, held by this test alone (other processes' cluster tests wait); checked up.
struct Cluster {
    _lock: std::fs::File,
}

impl Cluster {
    async fn take() -> Cluster {
        let lock = std::fs::File::create(std::env::temp_dir().join("hopper-cluster-tests.lock")).unwrap();
        lock.lock().unwrap();
        for n in NODES {
            let overview = Api::new(&endpoint(n)).overview().await.unwrap_or_else(|e| {
                panic!(
                    "cluster node {} is not up ({e:?}): start the test cluster with `.ci/cluster.sh up`",
                    node_name(n)
                )
            });
            assert_eq!(overview.cluster_name, "hopper-cluster");
        }
        Cluster { _lock: lock }
    }
}

/// A node taken down by a test, started again when dropped.
struct Down(u16);

impl Down {
    fn stop_app(n: u16) -> Down {
        cluster_sh(&["ctl", &n.to_string(), "stop_app"]);
        Down(n)
    }

    fn kill(n: u16) -> Down {
        cluster_sh(&["kill", &n.to_string()]);
        Down(n)
    }
}

impl Drop for Down {
    fn drop(&mut self) {
        cluster_sh(&["start", &self.0.to_string()]);
    }
}

/// A memory alarm on a node, by a high watermark no node can stay under; lifted when dropped.
struct MemoryAlarm(u16);

impl Drop for MemoryAlarm {
    fn drop(&mut self) {
        // 0.4 is RabbitMQ's default, which the test cluster runs with.
        cluster_sh(&["ctl", &self.0.to_string(), "set_vm_memory_high_watermark", "0.4"]);
    }
}

/// A vhost of the cluster, with a directory for its spec; both removed on drop.
struct Vhost {
    name: String,
    dir: std::path::PathBuf,
}

impl Vhost {
    async fn new(test: &str) -> Vhost {
        let name = unique(&format!("hopper-test-{test}"));
        http::create_vhost(&endpoint(2), &name).await.unwrap();
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        Vhost { name, dir }
    }

    fn spec(&self, file: &str, toml: &str) -> String {
        let path = self.dir.join(file);
        std::fs::write(&path, format!("vhost = \"{}\"\n{toml}", self.name)).unwrap();
        path.to_str().unwrap().to_string()
    }

    async fn connect(&self, n: u16) -> Connection {
        let url = format!("{}/{}", amqp(n), urlencode(&self.name));
        Connection::connect(&url, ConnectionProperties::default()).await.unwrap()
    }

    async fn queues(&self, n: u16) -> usize {
        let listed: Vec<Value> =
            Api::new(&endpoint(n)).get(&format!("/queues/{}?columns=name", segment(&self.name))).await.unwrap();
        listed.len()
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(http::delete_vhost(&endpoint(2), &name))
        })
        .join();
    }
}

/// `hopper --format json ARGS` pointed at these nodes: (exit code, JSON).
fn hopper_json(nodes: &[u16], args: &[&str]) -> (Option<i32>, Value) {
    let out = hopper_on(nodes, args);
    let value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}{}", text(&out.stdout), text(&out.stderr)));
    (out.status.code(), value)
}

fn hopper_on(nodes: &[u16], args: &[&str]) -> Output {
    let (amqp, management) = urls(nodes);
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    hopper_env(&all, &[("HOPPER_AMQP_URL", &amqp), ("HOPPER_MANAGEMENT_URL", &management)])
}

/// The same, started and left running.
fn spawn_hopper(nodes: &[u16], args: &[&str]) -> Child {
    let (amqp, management) = urls(nodes);
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    crate::spawned::hopper(&all, &[("HOPPER_AMQP_URL", &amqp), ("HOPPER_MANAGEMENT_URL", &management)])
}

/// `count` topologies of quorum queues: a main queue, one wait queue and a DLQ each.
fn topologies(count: usize) -> String {
    let mut toml = String::from("[defaults]\nqueue_type = \"quorum\"\n");
    for i in 0..count {
        toml.push_str(&format!("\n[topology.t{i:03}]\ndelays = [\"1s\"]\nmax_attempts = 2\n"));
    }
    toml
}

#[derive(Debug, Clone, Copy)]
enum Loss {
    /// `rabbitmqctl stop_app`: the node closes its connections and listeners, the VM stays.
    StopApp,
    /// SIGKILL to the node's VM: connections reset, nothing said.
    Kill,
}

/// apply writes 300 topologies (900 quorum queues) through node 1, listed first; once a third
/// of the queues exist, node 1 is lost. The run must carry on through another node and end
/// converged; diff is then in sync from each node, and the messages published before are all
/// there.
async fn apply_survives_losing_its_node(loss: Loss) {
    let _cluster = Cluster::take().await;
    let vhost = Vhost::new("cluster-loss").await;
    let spec = vhost.spec("spec.toml", &topologies(300));
    // Ten of them exist first, with 20 messages each in their main queues.
    let first = vhost.spec("first.toml", &topologies(10));
    let (code, _) = hopper_json(&[1, 2, 3], &["apply", &first]);
    assert_eq!(code, Some(0));
    let before = vhost.connect(2).await;
    for i in 0..10 {
        let ids: Vec<String> = (0..20).map(|m| format!("t{i:03}-{m}")).collect();
        publish(&before, &format!("t{i:03}"), &format!("t{i:03}"), &ids).await;
    }
    let _ = before.close(200, "".into()).await;

    let child = spawn_hopper(&[1, 2, 3], &["apply", &spec]);
    let started = Instant::now();
    while vhost.queues(2).await < 300 {
        assert!(started.elapsed() < Duration::from_secs(300), "apply declared fewer than 300 queues in 5 minutes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut child = child;
    assert!(child.try_wait().unwrap().is_none(), "apply finished before its node could be stopped mid-apply");
    let down = match loss {
        Loss::StopApp => Down::stop_app(1),
        Loss::Kill => Down::kill(1),
    };
    let out = child.wait_with_output().unwrap();
    eprintln!("apply while node 1 went down:\n{}", text(&out.stderr));
    // hopper must carry on through another node: with two nodes left, exit 2 and a second run
    // (what a single node gets) would hide a failover that does not work.
    assert_eq!(out.status.code(), Some(0), "apply: {}{}", text(&out.stdout), text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let failovers = &report["vhosts"][0]["failovers"];
    eprintln!("failovers: {failovers:#}");
    let failover = one(failovers, &json!({"from": "amqp://127.0.0.1:5681"}));
    assert!(
        ["amqp://127.0.0.1:5682", "amqp://127.0.0.1:5683"].contains(&failover["to"].as_str().unwrap()),
        "{failover:#}"
    );
    assert_eq!(report["applied"], true);

    // Converged: with node 1 down, through every other node, and through the list with the
    // stopped node first (the management API fails over too).
    for nodes in [&[2][..], &[3], &[1, 2, 3]] {
        let (code, diff) = hopper_json(nodes, &["diff", &spec]);
        assert_eq!((code, &diff["in_sync"]), (Some(0), &json!(true)), "diff through {nodes:?}: {diff:#}");
    }
    drop(down);
    let (code, diff) = hopper_json(&[1], &["diff", &spec]);
    assert_eq!((code, &diff["in_sync"]), (Some(0), &json!(true)), "diff through node 1: {diff:#}");
    // Nothing is left to do, and nothing was declared with other arguments (no conflict).
    let (code, again) = hopper_json(&[1, 2, 3], &["apply", &spec]);
    assert_eq!(code, Some(0));
    let actions = crate::support::actions(&again);
    assert_eq!(actions.keys().collect::<Vec<_>>(), ["in_sync"], "{actions:?}");
    // Every message published before the loss is still there.
    let after = vhost.connect(1).await;
    for i in 0..10 {
        assert_eq!(count(&after, &format!("t{i:03}")).await, Some(20), "t{i:03}");
    }
    let _ = after.close(200, "".into()).await;
}

#[tokio::test]
async fn apply_survives_its_node_stopped_mid_apply() {
    apply_survives_losing_its_node(Loss::StopApp).await;
}

#[tokio::test]
async fn apply_survives_its_node_killed_mid_apply() {
    apply_survives_losing_its_node(Loss::Kill).await;
}

/// The finding of `rule` about `queue` in an inspect or diff vhost.
#[track_caller]
fn finding<'a>(hazards: &'a Value, rule: &str, queue: &str) -> &'a Value {
    let found: Vec<&Value> =
        all(hazards, &json!({"rule": rule})).into_iter().filter(|f| f["queues"] == json!([queue])).collect();
    assert_eq!(found.len(), 1, "one {rule} about {queue} in {hazards:#}");
    found[0]
}

/// Hazards as nodes go down: a quorum member on a stopped node, then fewer than a majority
/// online; a classic queue on a stopped node is unavailable. Both inspect and diff say so.
#[tokio::test]
async fn nodes_down_are_hazards_naming_queues_members_and_nodes() {
    let _cluster = Cluster::take().await;
    let vhost = Vhost::new("cluster-hazards").await;
    let spec = vhost.spec("spec.toml", "[topology.orders]\nqueue_type = \"quorum\"\ndelays = [\"5s\"]\n");
    assert_eq!(hopper_json(&[1, 2, 3], &["apply", &spec]).0, Some(0));
    // A classic queue lives on the node it was declared on.
    let on_3 = vhost.connect(3).await;
    crate::support::queue(&on_3.create_channel().await.unwrap(), "local", Default::default()).await;
    let _ = on_3.close(200, "".into()).await;

    let (code, report) = hopper_json(&[1], &["inspect", "--vhost", &vhost.name]);
    assert_eq!(code, Some(0), "all up: no hazard: {report:#}");

    let down_3 = Down::stop_app(3);
    // The management API lists a stopped node as running for a moment after (its node list
    // lags the quorum members' state): read until it says otherwise, as an operator would.
    let start = Instant::now();
    let report = loop {
        let (code, report) = hopper_json(&[1], &["inspect", "--vhost", &vhost.name]);
        assert_eq!(code, Some(1), "{report:#}");
        let hazards = &report["vhosts"][0]["hazards"];
        if !all(hazards, &json!({"rule": "classic-queue-unavailable"})).is_empty()
            || start.elapsed() > Duration::from_secs(30)
        {
            break report;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let hazards = &report["vhosts"][0]["hazards"];
    for queue in ["orders", "orders.dlq", "orders.wait-5s"] {
        let f = finding(hazards, "quorum-members-offline", queue);
        assert_eq!(f["nodes"], json!([node_name(3)]), "{f:#}");
        let message = f["message"].as_str().unwrap();
        assert!(message.contains("2 of 3 members online") && message.contains(&node_name(3)), "{message}");
    }
    let f = finding(hazards, "classic-queue-unavailable", "local");
    assert_eq!(f["nodes"], json!([node_name(3)]));
    // diff: in sync (the objects are as the spec says), with the cluster's hazards beside.
    let (code, diff) = hopper_json(&[1], &["diff", &spec]);
    assert_eq!((code, &diff["in_sync"]), (Some(0), &json!(true)));
    finding(&diff["vhosts"][0]["hazards"], "quorum-members-offline", "orders");

    let down_2 = Down::stop_app(2);
    let (code, report) = hopper_json(&[1], &["inspect", "--vhost", &vhost.name]);
    assert_eq!(code, Some(1));
    let hazards = &report["vhosts"][0]["hazards"];
    let f = finding(hazards, "quorum-below-majority", "orders");
    assert_eq!(f["severity"], "error");
    let mut nodes: Vec<String> = serde_json::from_value(f["nodes"].clone()).unwrap();
    nodes.sort();
    assert_eq!(nodes, [node_name(2), node_name(3)], "{f:#}");
    assert!(f["message"].as_str().unwrap().contains("1 of 3 members online"), "{f:#}");
    none_about(hazards, "quorum-members-offline");
    drop(down_2);
    drop(down_3);

    // A restarted member is listed online once it has caught up: read until it is.
    let start = Instant::now();
    let (code, report) = loop {
        let (code, report) = hopper_json(&[1], &["inspect", "--vhost", &vhost.name]);
        if code == Some(0) || start.elapsed() > Duration::from_secs(60) {
            break (code, report);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert_eq!(code, Some(0), "all back: no hazard: {report:#}");
}

#[track_caller]
fn none_about(hazards: &Value, rule: &str) {
    crate::support::none(hazards, &json!({"rule": rule}));
}

/// inspect shows each queue's leader and members, and a node's memory alarm as blocking every
/// publisher of the cluster.
#[tokio::test]
async fn inspect_shows_leaders_members_and_alarms() {
    let _cluster = Cluster::take().await;
    let vhost = Vhost::new("cluster-inspect").await;
    let spec = vhost.spec("spec.toml", "[topology.orders]\nqueue_type = \"quorum\"\ndelays = [\"5s\"]\n");
    let (code, applied) = hopper_json(&[1, 2, 3], &["apply", "--dry-run", &spec]);
    assert_eq!(code, Some(0));
    // Where the members will go: every node of a three-node cluster.
    let members = &applied["vhosts"][0]["quorum_members"];
    assert_eq!(members["members"], 3, "{applied:#}");
    assert_eq!(members["nodes"], json!([node_name(1), node_name(2), node_name(3)]));
    assert_eq!(hopper_json(&[1, 2, 3], &["apply", &spec]).0, Some(0));

    let (code, report) = hopper_json(&[2], &["inspect", &spec]);
    assert_eq!(code, Some(0), "{report:#}");
    let v = &report["vhosts"][0];
    for queue in ["orders", "orders.dlq", "orders.wait-5s"] {
        let placement = &one(&v["queues"], &json!({"name": queue}))["placement"];
        assert_eq!(placement["kind"], "quorum", "{placement:#}");
        let mut members: Vec<(String, bool)> = placement["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["node"].as_str().unwrap().to_string(), m["online"].as_bool().unwrap()))
            .collect();
        members.sort();
        assert_eq!(members, NODES.map(|n| (node_name(n), true)), "{placement:#}");
        let leader = placement["leader"].as_str().unwrap();
        assert!(NODES.iter().any(|n| node_name(*n) == leader), "{placement:#}");
    }
    for n in NODES {
        assert_eq!(one(&v["nodes"], &json!({"name": node_name(n)}))["alarms"], json!([]), "{v:#}");
    }

    cluster_sh(&["ctl", "2", "set_vm_memory_high_watermark", "0.0000001"]);
    let alarm = MemoryAlarm(2);
    let (code, report) = wait_for_alarm(&spec).await;
    assert_eq!(code, Some(1));
    let v = &report["vhosts"][0];
    assert_eq!(one(&v["nodes"], &json!({"name": node_name(2)}))["alarms"], json!(["memory"]));
    assert_eq!(one(&v["nodes"], &json!({"name": node_name(1)}))["alarms"], json!([]));
    let f = one(&v["hazards"], &json!({"rule": "publishers-blocked"}));
    assert_eq!(f["nodes"], json!([node_name(2)]));
    assert!(f["message"].as_str().unwrap().contains("memory alarm"), "{f:#}");
    drop(alarm);
    let started = Instant::now();
    loop {
        let (code, _) = hopper_json(&[1], &["inspect", &spec]);
        if code == Some(0) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the memory alarm on node 2 never cleared");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// inspect until the alarm shows (the broker checks memory every second or so).
async fn wait_for_alarm(spec: &str) -> (Option<i32>, Value) {
    let started = Instant::now();
    loop {
        let (code, report) = hopper_json(&[1], &["inspect", spec]);
        if report["vhosts"][0]["hazards"].as_array().is_some_and(|h| !h.is_empty()) {
            return (code, report);
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no alarm on node 2 after 60 s: {report:#}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The cluster with its name cleared: RabbitMQ's default, in which each node reports its own
/// node name (host part fully qualified) as the cluster's. Named `hopper-cluster` again when
/// dropped, failed or not.
struct Unnamed;

impl Unnamed {
    fn clear() -> Unnamed {
        cluster_sh(&["ctl", "1", "clear_global_parameter", "cluster_name"]);
        Unnamed
    }
}

impl Drop for Unnamed {
    fn drop(&mut self) {
        cluster_sh(&["ctl", "1", "set_cluster_name", "hopper-cluster"]);
    }
}

/// `hopper --format json ARGS` with AMQP through one URL and the management API through another.
fn hopper_split(amqp: &str, management: &str, args: &[&str]) -> Output {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    hopper_env(&all, &[("HOPPER_AMQP_URL", amqp), ("HOPPER_MANAGEMENT_URL", management)])
}

/// AMQP through node 1 and the management API through node 2 are one broker, named or not:
/// apply, diff, inspect, a saved plan and redrive all run. Unnamed, node 1 greets as
/// `hopper-c1@vm` while node 2's overview says `hopper-c2@vm`; hopper proves them one cluster
/// by node 1 being among node 2's nodes.
#[tokio::test]
async fn one_cluster_through_two_nodes_named_or_not() {
    let _cluster = Cluster::take().await;
    for named in [true, false] {
        let _unnamed = (!named).then(Unnamed::clear);
        let overview = Api::new(&endpoint(2)).overview().await.unwrap();
        assert_eq!(overview.cluster_name == "hopper-cluster", named, "{}", overview.cluster_name);
        let vhost = Vhost::new("cluster-identity").await;
        let spec = vhost.spec("spec.toml", "[topology.orders]\nqueue_type = \"quorum\"\ndelays = [\"5s\"]\n");
        let plan = vhost.dir.join("plan.json");
        let plan = plan.to_str().unwrap();
        let runs: [&[&str]; 6] = [
            &["apply", "--dry-run", "--out", plan, &spec],
            &["apply", "--plan", plan],
            &["apply", &spec],
            &["diff", &spec],
            &["inspect", "--vhost", &vhost.name],
            &["redrive", "--dry-run", &spec],
        ];
        for args in runs {
            let out = hopper_split(&amqp(1), &management(2), args);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{args:?} on a cluster {}: {}{}",
                if named { "named" } else { "never named" },
                text(&out.stdout),
                text(&out.stderr)
            );
        }
    }
}

/// Two brokers stay two brokers when neither is named: the cluster's node 1 over AMQP with the
/// system broker's management API, and the other way round, are refused before anything is
/// read, and the refusal says why.
#[tokio::test]
async fn two_unnamed_brokers_are_refused() {
    let _cluster = Cluster::take().await;
    let _unnamed = Unnamed::clear();
    let system = crate::support::Broker::RabbitMq3_10;
    let cases = [(amqp(1), system.management().to_string()), (system.amqp().to_string(), management(2))];
    let dir = std::env::temp_dir().join(unique("hopper-test-two-brokers"));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("spec.toml");
    std::fs::write(&spec, "[topology.orders]\ndelays = [\"5s\"]\n").unwrap();
    for (amqp, management) in cases {
        let out = hopper_split(&amqp, &management, &["apply", "--dry-run", spec.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{amqp} with {management}: {}{stderr}", text(&out.stdout));
        assert!(stderr.contains("two different brokers"), "{stderr}");
        assert!(stderr.contains("never named"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A user who may not list the nodes (`management` tag only) cannot prove an unnamed cluster
/// one broker through two nodes: refused, saying what would let it through.
#[tokio::test]
async fn an_unnamed_cluster_unproved_for_lack_of_the_monitoring_tag_is_refused() {
    let _cluster = Cluster::take().await;
    let _unnamed = Unnamed::clear();
    let vhost = Vhost::new("cluster-no-monitoring").await;
    let spec = vhost.spec("spec.toml", "[topology.orders]\ndelays = [\"5s\"]\n");
    let api = Api::new(&endpoint(2));
    let user = unique("hopper-test-management-only");
    api.put(&format!("/users/{}", segment(&user)), &json!({"password": "pw", "tags": "management"})).await.unwrap();
    let permissions = json!({"configure": ".*", "write": ".*", "read": ".*"});
    api.put(&format!("/permissions/{}/{}", segment(&vhost.name), segment(&user)), &permissions).await.unwrap();
    let amqp = format!("amqp://{}:pw@127.0.0.1:5681", urlencode(&user));
    let out = hopper_env(
        &["apply", "--dry-run", &spec],
        &[("HOPPER_AMQP_URL", &amqp), ("HOPPER_MANAGEMENT_URL", &management(2))],
    );
    let _ = api.delete(&format!("/users/{}", segment(&user))).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}{stderr}", text(&out.stdout));
    assert!(stderr.contains("two different brokers") && stderr.contains("`monitoring` tag"), "{stderr}");
    assert!(!stderr.contains("pw@"), "{stderr}");
}

/// An owner's record is the cluster's: written through node 1, it is read through node 2 while
/// node 1 is stopped, and a second owner applying there is refused by it. With the cluster
/// named and unnamed.
async fn an_owners_record_outlives_the_node_it_was_written_on(named: bool) {
    let _cluster = Cluster::take().await;
    let _unnamed = (!named).then(Unnamed::clear);
    let vhost = Vhost::new("cluster-owner").await;
    let a = vhost.spec("a.toml", "owner = \"team-a\"\n[topology.orders]\ndelays = [\"5s\"]\nmax_attempts = 3\n");
    let (code, report) = hopper_json(&[1], &["apply", &a]);
    assert_eq!(code, Some(0), "{report:#}");
    one(&report["vhosts"][0]["steps"], &json!({"action": "record", "owner": "team-a"}));
    let parameter = format!("/global-parameters/{}", segment(&format!("hopper-owner:team-a:{}", vhost.name)));
    let _down = Down::stop_app(1);
    let record: Value = Api::new(&endpoint(2)).get(&parameter).await.unwrap();
    assert_eq!(record["value"]["topologies"]["orders"]["queues"], json!(["orders", "orders.dlq", "orders.wait-5s"]));
    let b = vhost.spec(
        "b.toml",
        "owner = \"team-b\"\n[topology.audit]\nexchange = \"orders.retry\"\nrouting_keys = [\"1\"]\ndelays = [\"5s\"]\nmax_attempts = 3\n",
    );
    let (code, report) = hopper_json(&[2, 3], &["apply", &b]);
    assert_eq!(code, Some(3), "{report:#}");
    one(&report["vhosts"][0]["steps"], &json!({"action": "conflict", "object": {"name": "orders.retry"}}));
}

#[tokio::test]
async fn an_owners_record_outlives_its_node_named() {
    an_owners_record_outlives_the_node_it_was_written_on(true).await;
}

#[tokio::test]
async fn an_owners_record_outlives_its_node_unnamed() {
    an_owners_record_outlives_the_node_it_was_written_on(false).await;
}
