//! Owners on a real broker: what an owner made is recorded on the broker (a global parameter
//! per owner and vhost, readable through the management API), and a spec of another owner is
//! refused where it would change, take over or bind into it, unless it says it means to bind.

use serde_json::{Value, json};

use std::time::Duration;

use hopper::broker::http::segment;

use crate::support::{self, Broker, Vhost, on_every_broker};

const TEAM_A: &str = "owner = \"team-a\"\n[topology.orders]\ndelays = [\"5s\"]\nmax_attempts = 3\n";

/// Team B's audit queue, bound into team A's retry exchange with A's first retry key.
fn team_b(extra: &str) -> String {
    format!(
        "owner = \"team-b\"\n[topology.audit]\nexchange = \"orders.retry\"\n{extra}routing_keys = [\"1\"]\ndelays = [\"5s\"]\nmax_attempts = 3\n"
    )
}

async fn record(broker: Broker, owner: &str, vhost: &str) -> Option<Value> {
    let name = format!("hopper-owner:{owner}:{vhost}");
    support::api(broker)
        .get::<Value>(&format!("/global-parameters/{}", segment(&name)))
        .await
        .ok()
        .map(|p| p["value"].clone())
}

async fn bindings_into(broker: Broker, vhost: &str, queue: &str) -> Vec<Value> {
    support::list(broker, "bindings", vhost)
        .await
        .into_iter()
        .filter(|b| b["destination"] == queue && b["source"] != "")
        .collect()
}

async fn a_second_owner_may_not_bind_into_the_first_owners_exchange(broker: Broker) {
    let vhost = Vhost::new(broker, "owners-bind").await;
    let a = vhost.spec("a.toml", TEAM_A);
    let a = a.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", a]).0, Some(0));
    let recorded = record(broker, "team-a", &vhost.name).await.expect("team A's record");
    assert_eq!(recorded["owner"], "team-a");
    assert_eq!(recorded["vhost"], vhost.name.as_str());
    assert_eq!(recorded["topologies"]["orders"]["exchanges"], json!(["orders", "orders.dlx", "orders.retry"]));
    assert_eq!(recorded["topologies"]["orders"]["queues"], json!(["orders", "orders.dlq", "orders.wait-5s"]));
    let (_, again) = vhost.json(&["apply", a]);
    support::none(support::steps(&again), &json!({"action": "record"}));

    // Team B, unaware: refused naming team A, and nothing of B's is made or recorded.
    let b = vhost.spec("b.toml", &team_b(""));
    let b = b.to_str().unwrap();
    let (code, report) = vhost.json(&["apply", b]);
    assert_eq!(code, Some(3), "{report:#}");
    let conflict = support::one(support::steps(&report), &json!({"action": "conflict"}));
    assert_eq!(conflict["object"]["name"], "orders.retry", "{conflict:#}");
    assert_eq!(conflict["differences"], json!([{"argument": "owner", "live": "team-a", "spec": "team-b"}]));
    assert!(conflict["ways_out"].to_string().contains("exchange_owner = \\\"team-a\\\""), "{conflict:#}");
    let clear = format!("rabbitmqctl clear_global_parameter hopper-owner:team-a:{}", vhost.name);
    support::one(&conflict["ways_out"], &json!({"command": clear}));
    let connection = vhost.connect().await;
    assert_eq!(support::count(&connection, "audit").await, None, "nothing of team B's was made");
    assert_eq!(record(broker, "team-b", &vhost.name).await, None, "nor recorded");
    let (code, diff) = vhost.json(&["diff", b]);
    assert_eq!(code, Some(1));
    support::one(support::objects(&diff), &json!({"status": "conflict", "kind": "exchange", "name": "orders.retry"}));
    let out = vhost.hopper(&["apply", b]);
    let stdout = support::text(&out.stdout);
    assert!(stdout.contains("owner \"team-a\" recorded it"), "{stdout}");

    // Said on purpose: B binds into A's exchange, claims only its own objects.
    let b = vhost.spec("b.toml", &team_b("exchange_owner = \"team-a\"\n"));
    let b = b.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", b]).0, Some(0));
    let recorded = record(broker, "team-b", &vhost.name).await.expect("team B's record");
    assert_eq!(recorded["topologies"]["audit"]["exchanges"], json!(["audit.dlx", "audit.retry"]));
    assert_eq!(bindings_into(broker, &vhost.name, "audit").await.len(), 2, "from orders.retry and audit.retry");
    // A's own runs, pruning too, leave B's binding into A's exchange, and say in sync.
    assert_eq!(vhost.json(&["apply", "--prune", a]).0, Some(0));
    assert_eq!(vhost.json(&["diff", a]).0, Some(0));
    assert!(
        bindings_into(broker, &vhost.name, "audit").await.iter().any(|b| b["source"] == "orders.retry"),
        "team A's prune left team B's binding"
    );

    // Nor may B take over a queue of A's under a topology of its own.
    let b = vhost.spec(
        "b.toml",
        "owner = \"team-b\"\n[topology.copy]\nqueue = \"orders\"\ndelays = [\"5s\"]\nmax_attempts = 3\n",
    );
    let (code, report) = vhost.json(&["apply", b.to_str().unwrap()]);
    assert_eq!(code, Some(3), "{report:#}");
    support::one(
        support::steps(&report),
        &json!({"action": "conflict", "object": {"object": "queue", "name": "orders"}}),
    );
}

/// Without the `policymaker` tag the records cannot be read: apply refuses before changing
/// anything (it cannot know what another owner made); a dry run says what it does not know.
async fn without_the_records_apply_changes_nothing(broker: Broker) {
    let vhost = Vhost::new(broker, "owners-unreadable").await;
    let a = vhost.spec("a.toml", TEAM_A);
    let a = a.to_str().unwrap();
    let user = support::unique("hopper-test-no-policymaker");
    support::create_user(broker, &user, "secret", "monitoring").await;
    support::set_permissions(broker, &vhost.name, &user, ".*", ".*", ".*").await;
    let amqp = broker.amqp().replace("guest:guest", &format!("{user}:secret"));
    let env = [("HOPPER_AMQP_URL", amqp.as_str()), ("HOPPER_MANAGEMENT_URL", broker.management())];
    let applied = support::hopper_env(&["apply", "--vhost", &vhost.name, a], &env);
    let dry = support::hopper_env(&["apply", "--dry-run", "--vhost", &vhost.name, a], &env);
    let diff = support::hopper_env(&["diff", "--vhost", &vhost.name, a], &env);
    support::delete_user(broker, &user).await;
    assert!(
        support::text(&diff.stdout).contains("owners' records could not be read (HTTP 401"),
        "{}",
        support::text(&diff.stdout)
    );
    let stderr = support::text(&applied.stderr);
    assert_eq!(applied.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`policymaker` tag") && stderr.contains("nothing was changed"), "{stderr}");
    assert!(!stderr.contains("secret"), "{stderr}");
    let connection = vhost.connect().await;
    assert_eq!(support::count(&connection, "orders").await, None, "nothing was made");
    assert_eq!(dry.status.code(), Some(0));
    assert!(support::text(&dry.stdout).contains("needs the `policymaker` tag"), "{}", support::text(&dry.stdout));
}

/// Runs `apply --prune` until `done` says so (a retirement takes a run per step it waits on).
async fn prune_until(vhost: &Vhost, spec: &str, what: &str, done: impl AsyncFn() -> bool) -> Value {
    let start = std::time::Instant::now();
    loop {
        let (code, report) = vhost.json(&["apply", "--prune", spec]);
        assert_eq!(code, Some(0), "{report:#}");
        if done().await {
            return report;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{what}: not after a minute of runs: {report:#}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A topology its owner removed from the spec is retired by `apply --prune` without losing a
/// message: its intake unbound first, its wait queue left to hand back what it holds, each
/// queue deleted only once empty, the rest kept with its counts and how to get them; then it
/// leaves the owner's record, and the vhost is in sync.
async fn a_removed_topology_is_retired_without_losing_a_message(broker: Broker) {
    let vhost = Vhost::new(broker, "owners-retire").await;
    let both = format!("{TEAM_A}[topology.old]\ndelays = [\"1s\"]\nmax_attempts = 3\n");
    let spec = vhost.spec("a.toml", &both);
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", spec]).0, Some(0));
    let connection = vhost.connect().await;
    let ids = |p: &str, n: usize| (0..n).map(|i| format!("{p}-{i}")).collect::<Vec<_>>();
    support::publish(&connection, "old", "old", &ids("main", 3)).await;
    support::publish(&connection, "old.retry", "1", &ids("wait", 2)).await;
    support::publish(&connection, "old.dlx", "old.dlq", &ids("dead", 2)).await;

    vhost.spec("a.toml", TEAM_A);
    let (code, diff) = vhost.json(&["diff", "--detailed-exitcode", spec]);
    assert_eq!(code, Some(2), "drift: {diff:#}");
    for queue in ["old", "old.wait-1s", "old.dlq"] {
        support::one(support::objects(&diff), &json!({"status": "extra", "kind": "queue", "name": queue}));
    }
    let (code, report) = vhost.json(&["apply", "--prune", spec]);
    assert_eq!(code, Some(0), "{report:#}");
    support::one(
        support::steps(&report),
        &json!({"action": "unbind", "binding": {"source": "old", "destination": "old"}}),
    );
    assert!(bindings_into(broker, &vhost.name, "old").await.iter().all(|b| b["source"] != "old"), "intake unbound");
    // What holds messages stays. The wait queue may already be empty and go in this same run:
    // its 1s TTL can pass before apply reads it on a loaded machine.
    for queue in ["old", "old.dlq"] {
        support::none(support::steps(&report), &json!({"action": "delete", "queue": queue}));
    }

    // The wait queue hands its two back to the main queue, then goes; the main queue keeps all
    // five, and says how to get them.
    let start = std::time::Instant::now();
    while support::count(&connection, "old.wait-1s").await.is_some_and(|n| n > 0) {
        assert!(start.elapsed() < Duration::from_secs(20), "the wait queue's TTL hands its messages back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    prune_until(&vhost, spec, "the wait queue deleted", async || {
        support::count(&connection, "old.wait-1s").await.is_none()
    })
    .await;
    let (_, report) = vhost.json(&["apply", "--prune", spec]);
    let kept = support::one(support::steps(&report), &json!({"action": "extra", "queue": "old", "messages": 5}));
    assert!(kept["kept_because"].as_str().unwrap().contains("topology `old` is retired"), "{kept:#}");
    let mut taken: Vec<String> =
        support::drain(&connection, "old").await.iter().map(|m| support::message_id(&m.properties)).collect();
    taken.sort();
    assert_eq!(taken, [ids("main", 3), ids("wait", 2)].concat(), "every message of the main and wait queues");

    // The main queue goes, then the dead-letter queue keeps its two until they are taken.
    prune_until(&vhost, spec, "the main queue deleted", async || support::count(&connection, "old").await.is_none())
        .await;
    let (_, report) = vhost.json(&["apply", "--prune", spec]);
    support::one(support::steps(&report), &json!({"action": "extra", "queue": "old.dlq", "messages": 2}));
    let mut dead: Vec<String> =
        support::drain(&connection, "old.dlq").await.iter().map(|m| support::message_id(&m.properties)).collect();
    dead.sort();
    assert_eq!(dead, ids("dead", 2));
    prune_until(&vhost, spec, "the dead-letter queue deleted", async || {
        support::count(&connection, "old.dlq").await.is_none()
    })
    .await;
    let recorded = record(broker, "team-a", &vhost.name).await.expect("team A's record");
    assert!(recorded["topologies"].get("old").is_none(), "retired: {recorded:#}");
    assert!(recorded["topologies"].get("orders").is_some());
    assert_eq!(vhost.json(&["diff", "--detailed-exitcode", spec]).0, Some(0));
}

/// A retry topology under hopper's names that no owner's record claims (made by hand here, as an
/// older hopper or a script would have): listed by `diff` and `inspect`, never drift, never
/// touched; and once an owner claims it, no longer listed.
async fn objects_under_hoppers_names_that_no_owner_claims_are_listed(broker: Broker) {
    let vhost = Vhost::new(broker, "owners-unclaimed").await;
    let spec = vhost.spec("a.toml", TEAM_A);
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", spec]).0, Some(0));
    let connection = vhost.connect().await;
    let channel = connection.create_channel().await.unwrap();
    support::exchange(&channel, "legacy.retry", lapin::ExchangeKind::Direct).await;
    support::exchange(&channel, "legacy.dlx", lapin::ExchangeKind::Direct).await;
    let dlx = support::args(&[("x-dead-letter-exchange", support::Arg::Str("legacy.dlx"))]);
    support::queue(&channel, "legacy", dlx).await;
    let wait = support::args(&[
        ("x-message-ttl", support::Arg::Int(5000)),
        ("x-dead-letter-exchange", support::Arg::Str("legacy.retry")),
    ]);
    support::queue(&channel, "legacy.wait-5s", wait).await;
    support::queue(&channel, "legacy.notes", support::args(&[])).await;

    let want =
        [("exchange", "legacy.dlx"), ("exchange", "legacy.retry"), ("queue", "legacy"), ("queue", "legacy.wait-5s")];
    let listed = |v: &Value| -> Vec<(String, String)> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|u| (u["kind"].as_str().unwrap().to_string(), u["name"].as_str().unwrap().to_string()))
            .collect()
    };
    let want: Vec<(String, String)> = want.iter().map(|(k, n)| (k.to_string(), n.to_string())).collect();
    let (code, diff) = vhost.json(&["diff", "--detailed-exitcode", spec]);
    assert_eq!(code, Some(0), "not drift: no spec says what they are for: {diff:#}");
    assert_eq!(listed(&diff["vhosts"][0]["unclaimed"]), want, "{diff:#}");
    let text = support::text(&vhost.hopper(&["diff", spec]).stdout);
    assert!(text.contains("? unclaimed   queue    legacy.wait-5s"), "{text}");
    let (_, inspect) = vhost.json(&["inspect", "--vhost", &vhost.name]);
    assert_eq!(listed(&inspect["vhosts"][0]["unclaimed"]), want, "{inspect:#}");

    // Claimed by an owner (a spec that names it), it is that owner's to report.
    let both = format!("{TEAM_A}[topology.legacy]\ndelays = [\"5s\"]\nmax_attempts = 2\nqueue_type = \"classic\"\n");
    vhost.spec("a.toml", &both);
    let (_, diff) = vhost.json(&["diff", spec]);
    assert!(diff["vhosts"][0].get("unclaimed").is_none(), "{diff:#}");
}

on_every_broker!(
    objects_under_hoppers_names_that_no_owner_claims_are_listed,
    a_second_owner_may_not_bind_into_the_first_owners_exchange,
    without_the_records_apply_changes_nothing,
    a_removed_topology_is_retired_without_losing_a_message,
);
