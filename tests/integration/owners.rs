//! Owners on a real broker: what an owner made is recorded on the broker (a global parameter
//! per owner and vhost, readable through the management API), and a spec of another owner is
//! refused where it would change, take over or bind into it, unless it says it means to bind.

use serde_json::{Value, json};

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
    support::delete_user(broker, &user).await;
    let stderr = support::text(&applied.stderr);
    assert_eq!(applied.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`policymaker` tag") && stderr.contains("nothing was changed"), "{stderr}");
    assert!(!stderr.contains("secret"), "{stderr}");
    let connection = vhost.connect().await;
    assert_eq!(support::count(&connection, "orders").await, None, "nothing was made");
    assert_eq!(dry.status.code(), Some(0));
    assert!(support::text(&dry.stdout).contains("needs the `policymaker` tag"), "{}", support::text(&dry.stdout));
}

on_every_broker!(a_second_owner_may_not_bind_into_the_first_owners_exchange, without_the_records_apply_changes_nothing);
