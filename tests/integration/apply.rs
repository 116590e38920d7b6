//! `hopper apply` against a real broker: idempotence, refused conflicts that change nothing, and
//! the AMQP-only mode without the management API.

use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};

use crate::support::{self, Broker, RABBITMQ_3, RABBITMQ_4, Vhost};

const ORDERS: &str = r#"
[topology.orders]
exchange_type = "topic"
routing_keys = ["order.created"]
delays = ["1s", "5s"]
max_attempts = 3
"#;

/// Someone created `orders` by hand with another delivery limit and it holds messages: apply
/// refuses with the argument, both values and the ways out, and changes nothing at all.
async fn conflict_changes_nothing(broker: Broker) {
    let vhost = Vhost::new(broker, "conflict").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let admin = vhost.connect().await;
    let channel = admin.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("orders.dlx".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString("orders.dlq".into()));
    args.insert("x-dead-letter-strategy".into(), AMQPValue::LongString("at-least-once".into()));
    args.insert("x-overflow".into(), AMQPValue::LongString("reject-publish".into()));
    args.insert("x-delivery-limit".into(), AMQPValue::LongInt(5));
    channel
        .queue_declare("orders".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    for _ in 0..2 {
        channel
            .basic_publish(
                "".into(),
                "orders".into(),
                BasicPublishOptions::default(),
                b"precious",
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .unwrap();
    }
    support::wait_for_count(&admin, "orders", 2, std::time::Duration::from_secs(10)).await;

    for args in [
        vec!["apply", spec.to_str().unwrap()],
        vec!["apply", "--management-url", "http://127.0.0.1:1/api", spec.to_str().unwrap()],
    ] {
        let out = vhost.hopper(&args);
        assert_eq!(out.status.code(), Some(3), "a conflict exits 3");
        let stdout = support::text(&out.stdout);
        assert!(stdout.contains("conflict  queue    orders"), "{stdout}");
        assert!(stdout.contains("argument x-delivery-limit: the broker has 5, the spec wants 20"), "{stdout}");
        assert!(stdout.contains("safe ways out"), "{stdout}");
        assert!(stdout.contains("queue = \"orders-v2\""), "{stdout}");
        assert!(stdout.contains("nothing was changed"), "{stdout}");
        assert_eq!(support::count(&admin, "orders").await, Some(2), "the messages are still there");
        assert_eq!(support::count(&admin, "orders.dlq").await, None, "nothing was created");
    }
}

#[tokio::test]
async fn conflict_changes_nothing_on_rabbitmq_3() {
    conflict_changes_nothing(RABBITMQ_3).await;
}

#[tokio::test]
async fn conflict_changes_nothing_on_rabbitmq_4() {
    conflict_changes_nothing(RABBITMQ_4).await;
}

/// Without the management API, apply still converges over AMQP and a second run finds every
/// queue and exchange in place.
async fn amqp_only(broker: Broker) {
    let vhost = Vhost::new(broker, "amqp-only").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let no_api = ["apply", "--management-url", "http://127.0.0.1:1/api", spec.to_str().unwrap()];
    let out = vhost.hopper(&no_api);
    assert_eq!(out.status.code(), Some(0));
    let stdout = support::text(&out.stdout);
    assert!(stdout.contains("read through amqp"), "{stdout}");
    assert!(stdout.contains("management API at http://127.0.0.1:1/api is unreachable"), "{stdout}");
    let admin = vhost.connect().await;
    assert_eq!(support::count(&admin, "orders.wait-5s").await, Some(0));
    let again = support::text(&vhost.hopper(&no_api).stdout);
    assert!(!again.contains("+ create"), "second run creates nothing: {again}");
    // And the management API then sees exactly what the spec wants.
    let out = vhost.hopper(&["apply", "--dry-run", spec.to_str().unwrap()]);
    let stdout = support::text(&out.stdout);
    assert!(stdout.contains("Dry run: nothing was changed. Plan: 11 in sync."), "{stdout}");
}

#[tokio::test]
async fn amqp_only_on_rabbitmq_3() {
    amqp_only(RABBITMQ_3).await;
}

#[tokio::test]
async fn amqp_only_on_rabbitmq_4() {
    amqp_only(RABBITMQ_4).await;
}

/// `--dry-run` shows the plan and creates nothing.
#[tokio::test]
async fn dry_run_changes_nothing() {
    let vhost = Vhost::new(RABBITMQ_3, "dry-run").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let out = vhost.hopper(&["apply", "--dry-run", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(support::text(&out.stdout).contains("+ create    queue    orders.dlq"));
    assert_eq!(support::count(&vhost.connect().await, "orders.dlq").await, None);
}

/// A vhost that does not exist is an error with a way out, exit 2.
#[tokio::test]
async fn missing_vhost_is_a_clear_error() {
    let vhost = Vhost::new(RABBITMQ_3, "missing").await;
    let spec = vhost.spec("orders.toml", ORDERS);
    let out = vhost.hopper(&["apply", "--vhost", "no-such-vhost-for-hopper", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(support::text(&out.stderr).contains("no-such-vhost-for-hopper"));
}
