//! What hopper may remove, on a real broker: never a queue that still receives dead letters,
//! never one holding dead letters in transit, never someone else's queue or binding; and without
//! the management API, never a move it cannot see through.

use std::time::Duration;

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;

use crate::support::{self, Broker, RABBITMQ_3, RABBITMQ_4, Vhost};

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
    let out = vhost.hopper(&["apply", "--prune", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = support::text(&out.stdout);
    assert!(!stdout.contains("delete    queue    orders.attempt-4"), "{stdout}");
    assert!(stdout.contains("`orders.hop-3.wait-3s` still dead-letters into it"), "{stdout}");

    // The TTL moves them on: every one arrives in the old attempt queue, none is dropped.
    support::wait_for_count(&admin, "orders.attempt-4", 3, Duration::from_secs(20)).await;
    let out = support::text(&vhost.hopper(&["apply", "--prune", spec.to_str().unwrap()]).stdout);
    assert!(out.contains("the new contract no longer consumes"), "{out}");
    // The drained wait queue goes, once the management API's lagging count agrees it is empty.
    let start = std::time::Instant::now();
    while support::count(&admin, "orders.hop-3.wait-3s").await.is_some() {
        assert!(start.elapsed() < Duration::from_secs(30), "the empty wait queue was never pruned");
        tokio::time::sleep(Duration::from_secs(1)).await;
        vhost.hopper(&["apply", "--prune", spec.to_str().unwrap()]);
    }
    assert_eq!(support::count(&admin, "orders.attempt-4").await, Some(3));
}

#[tokio::test]
async fn lowering_max_attempts_keeps_what_still_receives_classic_on_rabbitmq_3() {
    lowering_max_attempts_keeps_what_still_receives(RABBITMQ_3, "classic").await;
}

#[tokio::test]
async fn lowering_max_attempts_keeps_what_still_receives_quorum_on_rabbitmq_4() {
    lowering_max_attempts_keeps_what_still_receives(RABBITMQ_4, "quorum").await;
}

/// A quorum wait queue whose dead-letter target was deleted by hand keeps its expired messages
/// as at-least-once dead letters in transit. A passive declaration counts them as 0; the
/// management API does not, and `--prune` must keep the queue.
#[tokio::test]
async fn dead_letters_in_transit_are_never_pruned_on_rabbitmq_4() {
    let vhost = Vhost::new(RABBITMQ_4, "prune-in-transit").await;
    let spec = vhost.spec("orders.toml", &chain(4, "\"1s\", \"1s\", \"1s\"", "quorum"));
    assert_eq!(vhost.hopper(&["apply", spec.to_str().unwrap()]).status.code(), Some(0));
    let admin = vhost.connect().await;
    let channel = admin.create_channel().await.unwrap();
    channel.queue_delete("orders.attempt-4".into(), QueueDeleteOptions::default()).await.unwrap();
    support::publish(&admin, "orders.retry", "3", &["stuck-0".to_string(), "stuck-1".to_string()]).await;
    // They expire after 1 s and cannot be delivered: ready 0, in transit 2.
    support::wait_for_count(&admin, "orders.hop-3.wait-1s", 0, Duration::from_secs(10)).await;
    let api = hopper::broker::http::client(&support::endpoint(RABBITMQ_4));
    let start = std::time::Instant::now();
    while api.get_queue_info(&vhost.name, "orders.hop-3.wait-1s").await.unwrap().message_count < 2 {
        assert!(start.elapsed() < Duration::from_secs(30), "the management API never counted the dead letters");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let spec = vhost.spec("orders.toml", &chain(3, "\"1s\", \"1s\"", "quorum"));
    let stdout = support::text(&vhost.hopper(&["apply", "--prune", spec.to_str().unwrap()]).stdout);
    assert!(!stdout.contains("delete    queue    orders.hop-3.wait-1s"), "{stdout}");
    assert!(stdout.contains("extra     queue    orders.hop-3.wait-1s  (2 message(s)"), "{stdout}");
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
    let out = vhost.hopper(&["apply", "--prune", spec.to_str().unwrap()]);
    let stdout = support::text(&out.stdout);
    assert!(stdout.contains("No changes"), "{stdout}");
    support::publish(&admin, "orders", "order.created", &["m".to_string()]).await;
    for name in ["orders.attempt-log", "orders.wait-audit", "orders.wait-9s"] {
        support::wait_for_count(&admin, name, 1, Duration::from_secs(5)).await;
    }
}

#[tokio::test]
async fn foreign_queues_are_left_alone_on_rabbitmq_3() {
    foreign_queues_are_left_alone(RABBITMQ_3).await;
}

#[tokio::test]
async fn foreign_queues_are_left_alone_on_rabbitmq_4() {
    foreign_queues_are_left_alone(RABBITMQ_4).await;
}

/// Without the management API the old wait queue's binding is invisible: a delay change is
/// refused rather than leaving both bound (every retry delivered twice).
async fn blind_delay_change_is_refused(broker: Broker) {
    let vhost = Vhost::new(broker, "prune-blind").await;
    let no_api = "http://127.0.0.1:1/api";
    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"30s\"]\n");
    assert_eq!(vhost.hopper(&["apply", "--management-url", no_api, spec.to_str().unwrap()]).status.code(), Some(0));
    let again = support::text(&vhost.hopper(&["apply", "--management-url", no_api, spec.to_str().unwrap()]).stdout);
    assert!(again.contains("No changes found"), "{again}");
    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"2s\"]\n");
    let out = vhost.hopper(&["apply", "--management-url", no_api, spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = support::text(&out.stdout);
    assert!(stdout.contains("binding of orders.retry with routing key 1: the broker has unknown"), "{stdout}");
    assert_eq!(support::count(&vhost.connect().await, "orders.wait-2s").await, None, "nothing created");
    // With the management API it goes through, moving the binding.
    let out = vhost.hopper(&["apply", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(support::text(&out.stdout).contains("unbind    binding  orders.retry -> orders.wait-30s (\"1\")"));
}

#[tokio::test]
async fn blind_delay_change_is_refused_on_rabbitmq_3() {
    blind_delay_change_is_refused(RABBITMQ_3).await;
}

#[tokio::test]
async fn blind_delay_change_is_refused_on_rabbitmq_4() {
    blind_delay_change_is_refused(RABBITMQ_4).await;
}

/// An auto-delete exchange under a hopper name would vanish with its last binding: a conflict.
#[tokio::test]
async fn an_auto_delete_exchange_is_a_conflict() {
    let vhost = Vhost::new(RABBITMQ_3, "prune-auto-delete").await;
    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"1s\"]\n");
    let admin = vhost.connect().await;
    let channel = admin.create_channel().await.unwrap();
    let options = ExchangeDeclareOptions { durable: true, auto_delete: true, ..Default::default() };
    channel
        .exchange_declare("orders.dlx".into(), lapin::ExchangeKind::Direct, options, FieldTable::default())
        .await
        .unwrap();
    let out = vhost.hopper(&["diff", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(support::text(&out.stdout).contains("auto_delete: the broker has true, the spec wants false"));
    let out = vhost.hopper(&["apply", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = support::text(&out.stdout);
    assert!(stdout.contains("dead_letter_exchange = \"orders.dlx-v2\""), "{stdout}");
}
