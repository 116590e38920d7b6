//! What hopper may remove, on a real broker: never a queue that still receives dead letters,
//! never one holding dead letters in transit, never someone else's queue or binding; and without
//! the management API, never a move it cannot see through.

use std::time::Duration;

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;

use serde_json::json;

use crate::support::{self, Broker, Vhost, on_every_broker};

const NO_API: &str = "http://127.0.0.1:1/api";

fn chain(max_attempts: u32, delays: &str, queue_type: &str) -> String {
    format!(
        "[topology.orders]\nstrategy = \"chain\"\nqueue_type = \"{queue_type}\"\ndelays = [{delays}]\nmax_attempts = {max_attempts}\n"
    )
}

/// Lowering max_attempts in chain while messages wait for the last hop: the old attempt queue
/// still receives them, so `--prune` keeps it, and not one message is dropped.
async fn lowering_max_attempts_keeps_what_still_receives(broker: Broker, queue_type: &str) {
    let vhost = Vhost::new(broker, &format!("prune-chain-{queue_type}")).await;
    let spec = vhost.spec("orders.toml", &chain(4, "\"1s\", \"1s\", \"3s\"", queue_type));
    assert_eq!(vhost.hopper(&["apply", spec.to_str().unwrap()]).status.code(), Some(0));
    let admin = vhost.connect().await;
    let ids: Vec<String> = (0..3).map(|i| format!("late-{i}")).collect();
    // As if the consumer had rejected them at attempt 3: into the hop-3 wait queue.
    support::publish(&admin, "orders.retry", "3", &ids).await;
    support::wait_for_count(&admin, "orders.hop-3.wait-3s", 3, Duration::from_secs(5)).await;

    let spec = vhost.spec("orders.toml", &chain(3, "\"1s\", \"1s\"", queue_type));
    let (code, report) = vhost.json(&["apply", "--prune", spec.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let steps = support::steps(&report);
    support::none(steps, &json!({"action": "delete", "queue": "orders.attempt-4"}));
    let kept = support::one(steps, &json!({"action": "extra", "queue": "orders.attempt-4"}));
    let why = kept["kept_because"].as_str().unwrap();
    assert!(why.contains("`orders.hop-3.wait-3s` still dead-letters into it"), "{kept:#}");

    // The TTL moves them on: every one arrives in the old attempt queue, none is dropped.
    support::wait_for_count(&admin, "orders.attempt-4", 3, Duration::from_secs(20)).await;
    let (_, report) = vhost.json(&["apply", "--prune", spec.to_str().unwrap()]);
    let kept =
        support::one(support::steps(&report), &json!({"action": "extra", "queue": "orders.attempt-4", "messages": 3}));
    let why = kept["kept_because"].as_str().unwrap();
    assert!(why.contains("the new contract no longer consumes"), "{kept:#}");
    // The drained wait queue goes, once the management API's lagging count agrees it is empty.
    let start = std::time::Instant::now();
    while support::count(&admin, "orders.hop-3.wait-3s").await.is_some() {
        assert!(start.elapsed() < Duration::from_secs(30), "the empty wait queue was never pruned");
        tokio::time::sleep(Duration::from_secs(1)).await;
        vhost.hopper(&["apply", "--prune", spec.to_str().unwrap()]);
    }
    assert_eq!(support::count(&admin, "orders.attempt-4").await, Some(3));
}

/// A quorum wait queue whose dead-letter target was deleted by hand keeps its expired messages
/// as at-least-once dead letters in transit. A passive declaration counts them as 0; the
/// management API does not, and `--prune` must keep the queue.
async fn dead_letters_in_transit_are_never_pruned(broker: Broker) {
    let vhost = Vhost::new(broker, "prune-in-transit").await;
    let spec = vhost.spec("orders.toml", &chain(4, "\"1s\", \"1s\", \"1s\"", "quorum"));
    assert_eq!(vhost.hopper(&["apply", spec.to_str().unwrap()]).status.code(), Some(0));
    let admin = vhost.connect().await;
    let channel = admin.create_channel().await.unwrap();
    channel.queue_delete("orders.attempt-4".into(), QueueDeleteOptions::default()).await.unwrap();
    support::publish(&admin, "orders.retry", "3", &["stuck-0".to_string(), "stuck-1".to_string()]).await;
    // They expire after 1 s and cannot be delivered: ready 0, in transit 2.
    support::wait_for_count(&admin, "orders.hop-3.wait-1s", 0, Duration::from_secs(10)).await;
    let start = std::time::Instant::now();
    while support::queue_info(broker, &vhost.name, "orders.hop-3.wait-1s").await["messages"].as_u64().unwrap_or(0) < 2 {
        assert!(start.elapsed() < Duration::from_secs(30), "the management API never counted the dead letters");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let spec = vhost.spec("orders.toml", &chain(3, "\"1s\", \"1s\"", "quorum"));
    let (code, report) = vhost.json(&["apply", "--prune", spec.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let steps = support::steps(&report);
    support::none(steps, &json!({"action": "delete", "queue": "orders.hop-3.wait-1s"}));
    support::one(steps, &json!({"action": "extra", "queue": "orders.hop-3.wait-1s", "messages": 2}));
    assert!(support::count(&admin, "orders.hop-3.wait-1s").await.is_some());
}

/// A queue someone else named like hopper's and bound to the main exchange is not hopper's:
/// neither apply nor `--prune` touches it or its binding.
async fn foreign_queues_are_left_alone(broker: Broker) {
    let vhost = Vhost::new(broker, "prune-foreign").await;
    let spec = vhost.spec(
        "orders.toml",
        "[topology.orders]\nexchange_type = \"topic\"\nrouting_keys = [\"order.created\"]\ndelays = [\"1s\"]\n",
    );
    assert_eq!(vhost.hopper(&["apply", spec.to_str().unwrap()]).status.code(), Some(0));
    let admin = vhost.connect().await;
    let channel = admin.create_channel().await.unwrap();
    for name in ["orders.attempt-log", "orders.wait-audit", "orders.wait-9s"] {
        channel
            .queue_declare(
                name.into(),
                QueueDeclareOptions { durable: true, ..Default::default() },
                FieldTable::default(),
            )
            .await
            .unwrap();
        channel
            .queue_bind(
                name.into(),
                "orders".into(),
                "order.#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
    let (code, report) = vhost.json(&["apply", "--prune", spec.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let actions = support::actions(&report);
    assert_eq!(
        actions.keys().collect::<Vec<_>>(),
        ["in_sync"],
        "nothing of theirs is extra, unbound or deleted: {report:#}"
    );
    support::publish(&admin, "orders", "order.created", &["m".to_string()]).await;
    for name in ["orders.attempt-log", "orders.wait-audit", "orders.wait-9s"] {
        support::wait_for_count(&admin, name, 1, Duration::from_secs(5)).await;
    }
}

/// Without the management API the old wait queue's binding is invisible: a delay change is
/// refused rather than leaving both bound (every retry delivered twice).
async fn blind_delay_change_is_refused(broker: Broker) {
    let vhost = Vhost::new(broker, "prune-blind").await;
    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"30s\"]\n");
    assert_eq!(
        vhost.hopper(&["apply", "--amqp-only", "--management-url", NO_API, spec.to_str().unwrap()]).status.code(),
        Some(0)
    );
    let (code, again) = vhost.json(&["apply", "--amqp-only", "--management-url", NO_API, spec.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    // Bindings cannot be listed over AMQP: declared again; everything else is found in place.
    support::none(support::steps(&again), &json!({"action": "create"}));
    support::none(support::steps(&again), &json!({"action": "ensure", "object": {"object": "queue"}}));

    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"2s\"]\n");
    let (code, report) = vhost.json(&["apply", "--amqp-only", "--management-url", NO_API, spec.to_str().unwrap()]);
    assert_eq!(code, Some(3), "{report:#}");
    assert_eq!(report["applied"], false);
    let conflict = support::one(support::steps(&report), &json!({"action": "conflict"}));
    assert!(
        support::matches(conflict, &json!({"object": {"object": "queue", "name": "orders.wait-2s"}})),
        "{conflict:#}"
    );
    let differences = conflict["differences"].as_array().unwrap();
    assert_eq!(differences.len(), 1, "{conflict:#}");
    assert_eq!(differences[0]["argument"], "binding of orders.retry with routing key 1");
    assert!(differences[0]["live"].as_str().unwrap().starts_with("unknown"), "{conflict:#}");
    assert_eq!(differences[0]["spec"], "moved to orders.wait-2s");
    assert!(conflict["ways_out"].to_string().contains("--management-url"), "{conflict:#}");
    assert_eq!(support::count(&vhost.connect().await, "orders.wait-2s").await, None, "nothing created");

    // With the management API it goes through, moving the binding.
    let (code, report) = vhost.json(&["apply", spec.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    support::one(
        support::steps(&report),
        &json!({"action": "unbind", "binding": {"source": "orders.retry", "destination_type": "queue", "destination": "orders.wait-30s", "routing_key": "1"}}),
    );
}

/// An auto-delete exchange under a hopper name would vanish with its last binding: a conflict.
/// The way out is to delete it (a command against this management API) and apply again; no spec
/// edit is offered, since another dead-letter exchange would change the arguments of every queue
/// that dead-letters into it.
async fn an_auto_delete_exchange_is_a_conflict(broker: Broker) {
    let vhost = Vhost::new(broker, "prune-auto-delete").await;
    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"1s\"]\n");
    let spec = spec.to_str().unwrap();
    let admin = vhost.connect().await;
    let channel = admin.create_channel().await.unwrap();
    let options = ExchangeDeclareOptions { durable: true, auto_delete: true, ..Default::default() };
    channel
        .exchange_declare("orders.dlx".into(), lapin::ExchangeKind::Direct, options, FieldTable::default())
        .await
        .unwrap();
    let differences = json!([{"argument": "auto_delete", "live": true, "spec": false}]);
    let delete = format!(
        "curl -fsS -u {} -X DELETE {}/exchanges/{}/orders.dlx",
        broker.endpoint().username(),
        broker.management(),
        vhost.name
    );

    let (code, report) = vhost.json(&["diff", spec]);
    assert_eq!(code, Some(1));
    let conflict = support::one(support::objects(&report), &json!({"status": "conflict"}));
    assert!(support::matches(conflict, &json!({"kind": "exchange", "name": "orders.dlx"})), "{conflict:#}");
    assert_eq!(conflict["differences"], differences);

    let (code, report) = vhost.json(&["apply", spec]);
    assert_eq!(code, Some(3));
    let conflict = support::one(support::steps(&report), &json!({"action": "conflict"}));
    assert!(
        support::matches(conflict, &json!({"object": {"object": "exchange", "name": "orders.dlx"}})),
        "{conflict:#}"
    );
    assert_eq!(conflict["differences"], differences);
    support::one(&conflict["ways_out"], &json!({"command": delete}));
    support::none(&conflict["ways_out"], &json!({"spec": {}}));
    assert_eq!(support::count(&admin, "orders.dlq").await, None, "nothing was created");
}

on_every_broker!(
    lowering_max_attempts_keeps_what_still_receives_classic =
        lowering_max_attempts_keeps_what_still_receives("classic"),
    lowering_max_attempts_keeps_what_still_receives_quorum = lowering_max_attempts_keeps_what_still_receives("quorum"),
    dead_letters_in_transit_are_never_pruned,
    foreign_queues_are_left_alone,
    blind_delay_change_is_refused,
    an_auto_delete_exchange_is_a_conflict,
);
