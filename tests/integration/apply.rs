//! `hopper apply` against a real broker: idempotence, refused conflicts that change nothing, and
//! the AMQP-only mode without the management API. Read from `--format json`, except for the one
//! test that checks what a person reads when apply refuses.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, Arg::*, Broker, Vhost, args, on_every_broker};

const ORDERS: &str = r#"
[topology.orders]
exchange_type = "topic"
routing_keys = ["order.created"]
delays = ["1s", "5s"]
max_attempts = 3
"#;

const NO_API: &str = "http://127.0.0.1:1/api";

/// `orders`, created by hand with another delivery limit, holding two messages.
async fn orders_by_hand(vhost: &Vhost) -> lapin::Connection {
    let admin = vhost.connect().await;
    let channel = admin.create_channel().await.unwrap();
    let by_hand = args(&[
        ("x-queue-type", Str("quorum")),
        ("x-dead-letter-exchange", Str("orders.dlx")),
        ("x-dead-letter-routing-key", Str("orders.dlq")),
        ("x-dead-letter-strategy", Str("at-least-once")),
        ("x-overflow", Str("reject-publish")),
        ("x-delivery-limit", Int(5)),
    ]);
    support::queue(&channel, "orders", by_hand).await;
    support::publish(&admin, "", "orders", &["precious-1".to_string(), "precious-2".to_string()]).await;
    support::wait_for_count(&admin, "orders", 2, Duration::from_secs(10)).await;
    admin
}

/// The conflict on `orders` in an apply report that refused to change anything.
fn refused_conflict(report: &Value, read_from: &str) -> Value {
    assert_eq!((&report["dry_run"], &report["applied"]), (&json!(false), &json!(false)), "{report:#}");
    assert_eq!(report["vhosts"][0]["read_from"], read_from);
    let conflict = support::one(support::steps(report), &json!({"action": "conflict"}));
    assert!(support::matches(conflict, &json!({"object": {"object": "queue", "name": "orders"}})), "{conflict:#}");
    conflict.clone()
}

/// Someone created `orders` by hand with another delivery limit and it holds messages: apply
/// refuses, naming the argument and both values, offers the spec edit that matches the broker
/// and the command to recreate the queue once drained, and changes nothing at all. Then what a
/// person reads says the same.
async fn conflict_changes_nothing(broker: Broker) {
    let vhost = Vhost::new(broker, "conflict").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let spec = spec.to_str().unwrap();
    let admin = orders_by_hand(&vhost).await;

    let (code, report) = vhost.json(&["apply", spec]);
    assert_eq!(code, Some(3), "a conflict exits 3: {report:#}");
    let conflict = refused_conflict(&report, "management_api");
    assert_eq!(
        conflict["differences"],
        json!([{"argument": "x-delivery-limit", "live": 5, "spec": 20}]),
        "the argument, with the broker's and the spec's values as numbers"
    );
    let ways_out = &conflict["ways_out"];
    let edit = support::one(ways_out, &json!({"spec": {}}));
    assert_eq!(
        edit["spec"],
        json!({"topology": "orders", "file": spec, "table": "[topology.orders]", "set": ["delivery_limit = 5"]}),
        "the spec edit that matches the broker: {ways_out:#}"
    );
    // A quorum queue: RabbitMQ refuses `--if-empty` for it, so the check is the operator's.
    let command = format!("rabbitmqctl delete_queue -p {} -- orders", vhost.name);
    let recreate = support::one(ways_out, &json!({"command": command}));
    let says = recreate["says"].as_str().unwrap();
    assert!(says.contains("drain") && says.contains("holds 2 message(s)"), "{recreate:#}");
    assert!(!ways_out.to_string().contains("orders-v2"), "no rename of a queue: {ways_out:#}");
    assert_eq!(support::count(&admin, "orders").await, Some(2), "the messages are still there");
    assert_eq!(support::count(&admin, "orders.dlq").await, None, "nothing was created");

    // What a person reads: the argument with both values, the ways out, and that nothing changed.
    let out = vhost.hopper(&["apply", spec]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = support::text(&out.stdout);
    let line = |word: &str| {
        let mut lines = stdout.lines().filter(|l| l.split_whitespace().any(|w| w.trim_end_matches(':') == word));
        lines.next().unwrap_or_else(|| panic!("no line says {word}: {stdout}"))
    };
    let conflict: Vec<&str> = line("conflict").split_whitespace().collect();
    assert!(conflict.contains(&"queue") && conflict.contains(&"orders:"), "{stdout}");
    let argument = line("x-delivery-limit");
    assert!(argument.contains("broker has 5") && argument.contains("spec wants 20"), "{argument}");
    assert!(stdout.contains(&format!("in {spec}, [topology.orders]")), "where to paste: {stdout}");
    assert!(stdout.lines().any(|l| l.trim() == "delivery_limit = 5"), "what to paste: {stdout}");
    assert!(stdout.lines().any(|l| l.trim() == format!("$ {command}")), "the command: {stdout}");
    assert!(stdout.contains("nothing was changed"), "{stdout}");
    assert_eq!(support::count(&admin, "orders").await, Some(2));
    assert_eq!(support::count(&admin, "orders.dlq").await, None);
}

/// The same conflict without the management API: the broker's refusal of the declaration names
/// the argument and its value, and apply refuses as it does with the API, changing nothing. The
/// command it offers must be one RabbitMQ accepts for this quorum queue.
async fn conflict_without_the_management_api_changes_nothing(broker: Broker) {
    let vhost = Vhost::new(broker, "conflict-amqp").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let spec = spec.to_str().unwrap();
    let admin = orders_by_hand(&vhost).await;

    let (code, report) = vhost.json(&["apply", "--amqp-only", "--management-url", NO_API, spec]);
    assert_eq!(code, Some(3), "a conflict exits 3: {report:#}");
    let conflict = refused_conflict(&report, "amqp");
    assert_eq!(support::count(&admin, "orders").await, Some(2), "the messages are still there");
    assert_eq!(support::count(&admin, "orders.dlq").await, None, "nothing was created");
    let ways_out = &conflict["ways_out"];
    let command = format!("rabbitmqctl delete_queue -p {} -- orders", vhost.name);
    let recreate = support::one(ways_out, &json!({"command": command}));
    assert!(recreate["says"].as_str().unwrap().contains("holds 2 message(s)"), "{recreate:#}");
    assert_eq!(
        conflict["differences"],
        json!([{"argument": "x-delivery-limit", "live": 5, "spec": 20}]),
        "typed as with the management API"
    );
}

/// Asked to (`--amqp-only`), apply converges over AMQP alone and a second run finds every queue
/// and exchange in place; the management API then sees exactly what the spec wants.
async fn amqp_only(broker: Broker) {
    let vhost = Vhost::new(broker, "amqp-only").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    // The management URL leads nowhere: --amqp-only never asks it.
    let no_api = ["apply", "--amqp-only", "--management-url", NO_API, spec.to_str().unwrap()];
    let (code, report) = vhost.json(&no_api);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["applied"], true);
    let v = &report["vhosts"][0];
    assert_eq!(v["read_from"], "amqp");
    let note = v["note"].as_str().unwrap();
    assert!(note.starts_with("--amqp-only: read over AMQP"), "{note}");
    // Exchanges and queues are created; bindings cannot be read over AMQP, and are declared.
    assert_eq!(support::actions(&report), [("create".to_string(), 7), ("ensure".to_string(), 5)].into(), "{report:#}");
    support::none(support::steps(&report), &json!({"action": "ensure", "object": {"object": "queue"}}));
    let admin = vhost.connect().await;
    assert_eq!(support::count(&admin, "orders.wait-5s").await, Some(0));

    let (code, again) = vhost.json(&no_api);
    assert_eq!(code, Some(0));
    // Exchanges and queues are found in place; bindings are declared again.
    assert_eq!(support::actions(&again), [("ensure".to_string(), 5), ("in_sync".to_string(), 7)].into(), "{again:#}");
    support::none(support::steps(&again), &json!({"action": "ensure", "object": {"object": "queue"}}));
    support::none(support::steps(&again), &json!({"action": "ensure", "object": {"object": "exchange"}}));

    let (code, report) = vhost.json(&["apply", "--dry-run", spec.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert_eq!((&report["dry_run"], &report["applied"]), (&json!(true), &json!(false)));
    assert_eq!(report["vhosts"][0]["read_from"], "management_api");
    // Over AMQP no owner's record was written: the management API's run writes it.
    assert_eq!(
        support::actions(&report),
        [("in_sync".to_string(), 12), ("record".to_string(), 1)].into(),
        "{report:#}"
    );
}

/// `--dry-run` shows the plan and creates nothing.
async fn dry_run_changes_nothing(broker: Broker) {
    let vhost = Vhost::new(broker, "dry-run").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let (code, report) = vhost.json(&["apply", "--dry-run", spec.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert_eq!((&report["dry_run"], &report["applied"]), (&json!(true), &json!(false)));
    assert_eq!(support::actions(&report), [("create".to_string(), 12), ("record".to_string(), 1)].into(), "{report:#}");
    support::one(
        support::steps(&report),
        &json!({"action": "create", "object": {"object": "queue", "name": "orders.dlq"}}),
    );
    assert_eq!(support::count(&vhost.connect().await, "orders.dlq").await, None);
}

/// A vhost that does not exist is an error naming it, exit 2.
async fn missing_vhost_is_a_clear_error(broker: Broker) {
    let vhost = Vhost::new(broker, "missing").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let out = vhost.hopper(&["apply", "--vhost", "no-such-vhost-for-hopper", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(support::text(&out.stderr).contains("no-such-vhost-for-hopper"));
}

on_every_broker!(
    conflict_changes_nothing,
    conflict_without_the_management_api_changes_nothing,
    amqp_only,
    dry_run_changes_nothing,
    missing_vhost_is_a_clear_error,
    retry_keys_stay_routed_until_consumers_are_upgraded,
    a_consumer_on_the_old_contract_retries_throughout_a_jitter_change,
);

/// A consumer on the old contract keeps publishing retries with key `1` while jitter is added
/// and applied, twice: every retry is routed (none returned to it) and comes back to the main
/// queue after its wait, counted by id.
async fn a_consumer_on_the_old_contract_retries_throughout_a_jitter_change(broker: Broker) {
    let vhost = Vhost::new(broker, "contract-live").await;
    let spec_of = |extra: &str| format!("[topology.orders]\ndelays = [\"1s\"]\nmax_attempts = 2\n{extra}");
    let spec = vhost.spec("orders.toml", &spec_of(""));
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", spec]).0, Some(0));
    let connection = vhost.connect().await;
    let old_consumer = support::Publisher::start(vhost.amqp_url(), "orders.retry", "1", "retry");
    tokio::time::sleep(Duration::from_millis(300)).await;
    vhost.spec("orders.toml", &spec_of("jitter = 0.5\n"));
    for _ in 0..2 {
        let (code, report) = vhost.json(&["apply", "--prune", spec]);
        assert_eq!(code, Some(0), "{report:#}");
        support::none(support::steps(&report), &json!({"action": "unbind", "binding": {"routing_key": "1"}}));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (retried, returned) = old_consumer.stop();
    assert!(returned.is_empty(), "retries returned to a consumer on the old contract: {returned:?}");
    assert!(retried.len() > 10, "it retried throughout: {}", retried.len());
    support::wait_for_count(&connection, "orders", retried.len() as u32, Duration::from_secs(20)).await;
    let mut back: Vec<String> =
        support::drain(&connection, "orders").await.iter().map(|m| support::message_id(&m.properties)).collect();
    back.sort();
    let mut want = retried.clone();
    want.sort();
    assert_eq!(back, want, "every retry back in the main queue once");
}

/// Lowering max_attempts or adding jitter removes retry keys a consumer on the old contract
/// still publishes: they stay routed to their wait queues (a retry is never returned), the plan
/// says so, and `--consumers-upgraded` lets them go.
async fn retry_keys_stay_routed_until_consumers_are_upgraded(broker: Broker) {
    let vhost = Vhost::new(broker, "contract").await;
    let spec_of = |extra: &str| {
        format!(
            "[topology.orders]\nqueue_type = \"classic\"\ndelays = [\"1h\", \"2h\", \"3h\"]\nmax_attempts = 4\n{extra}"
        )
    };
    let spec = vhost.spec("orders.toml", &spec_of(""));
    let spec = spec.to_str().unwrap();
    assert_eq!(vhost.json(&["apply", spec]).0, Some(0));
    let connection = vhost.connect().await;

    // One hop fewer, and jitter: keys 1 to 3 become 1.1 ... 2.5.
    let fewer = spec_of("jitter = 0.2\n").replace("max_attempts = 4", "max_attempts = 3").replace(", \"3h\"", "");
    vhost.spec("orders.toml", &fewer);
    let (code, report) = vhost.json(&["apply", "--prune", spec]);
    assert_eq!(code, Some(0), "{report:#}");
    support::none(support::steps(&report), &json!({"action": "unbind"}));
    for key in ["1", "2", "3"] {
        let kept = support::one(
            support::steps(&report),
            &json!({"action": "in_sync", "object": {"object": "binding", "source": "orders.retry", "routing_key": key}}),
        );
        assert!(kept["note"].as_str().unwrap().contains("--consumers-upgraded"), "{kept:#}");
    }
    let wait = support::one(support::steps(&report), &json!({"action": "extra", "queue": "orders.wait-3h"}));
    assert!(wait["kept_because"].as_str().unwrap().contains("retry key \"3\" of the old contract"), "{wait:#}");
    // A consumer on the old contract: its retries are routed (publish checks), none returned.
    for key in ["1", "2", "3"] {
        support::publish(&connection, "orders.retry", key, &[format!("old-{key}")]).await;
    }
    let table = support::text(&vhost.hopper(&["apply", "--prune", spec]).stdout);
    assert!(table.contains("kept for consumers still on the old contract"), "{table}");

    // Upgraded: the old keys go, and the old wait queues once they are empty.
    for q in ["orders.wait-1h", "orders.wait-2h", "orders.wait-3h"] {
        support::drain(&connection, q).await;
    }
    let (code, report) = vhost.json(&["apply", "--prune", "--consumers-upgraded", spec]);
    assert_eq!(code, Some(0), "{report:#}");
    for key in ["1", "2", "3"] {
        support::one(
            support::steps(&report),
            &json!({"action": "unbind", "binding": {"source": "orders.retry", "routing_key": key}}),
        );
    }
    support::one(support::steps(&report), &json!({"action": "delete", "queue": "orders.wait-3h"}));
}
