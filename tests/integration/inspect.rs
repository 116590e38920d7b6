//! `hopper inspect --dead-letters`: the parking lot summarised from x-death without consuming a
//! message, and refused where a peek could lose one.

use std::time::Duration;

use lapin::options::{BasicGetOptions, BasicRejectOptions};

use crate::support::{self, Arg::*, Broker, Vhost, args, on_every_broker};

async fn summary_consumes_nothing(broker: Broker, queue_type: &str) {
    let vhost = Vhost::new(broker, &format!("inspect-dlq-{queue_type}")).await;
    let spec =
        vhost.spec("orders.toml", &format!("[topology.orders]\nqueue_type = \"{queue_type}\"\nmax_attempts = 1\n"));
    assert_eq!(vhost.hopper(&["apply", spec.to_str().unwrap()]).status.code(), Some(0));
    let c = vhost.connect().await;
    let ids: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    support::publish(&c, "orders", "orders", &ids).await;
    // The last (only) attempt fails: rejected, in order, into the dead-letter queue.
    let ch = c.create_channel().await.unwrap();
    for _ in &ids {
        let m = ch.basic_get("orders".into(), BasicGetOptions::default()).await.unwrap().expect("a message");
        m.delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    }
    support::wait_for_count(&c, "orders.dlq", 5, Duration::from_secs(10)).await;

    let (code, report) = vhost.json(&["inspect", "--vhost", &vhost.name, "--queue", "orders.dlq", "--dead-letters"]);
    assert_eq!(code, Some(0), "{report:#}");
    let summary = &report["vhosts"][0]["dead_letters"];
    assert_eq!(summary["peeked"], 5);
    assert_eq!(summary["groups"].as_array().unwrap().len(), 1);
    let group = &summary["groups"][0];
    assert_eq!(
        (group["first_death_queue"].as_str(), group["first_death_reason"].as_str()),
        (Some("orders"), Some("rejected"))
    );
    assert_eq!(group["messages"], 5);
    assert!(group["oldest"].as_u64().unwrap() <= group["newest"].as_u64().unwrap());
    assert!(summary["effect"].as_str().unwrap().contains("none was consumed"));
    // What a person reads: the summary, and what the peek did.
    let table = support::text(
        &vhost.hopper(&["inspect", "--vhost", &vhost.name, "--queue", "orders.dlq", "--dead-letters"]).stdout,
    );
    assert!(table.contains("dead letters in orders.dlq") && table.contains("5 peeked"), "{table}");
    assert!(table.contains("none was consumed"), "{table}");

    // Nothing was consumed, and the order is the one they were parked in.
    support::wait_for_count(&c, "orders.dlq", 5, Duration::from_secs(5)).await;
    let drained = support::drain(&c, "orders.dlq").await;
    let order: Vec<String> = drained.iter().map(|m| support::message_id(&m.delivery.properties)).collect();
    assert_eq!(order, ids);
    assert!(drained.iter().all(|m| m.delivery.redelivered), "a peek marks them redelivered, as the summary says");
}

/// A quorum queue with a low delivery limit: a peek could push messages over it. Refused.
async fn peek_refused_where_it_could_lose(broker: Broker) {
    let vhost = Vhost::new(broker, "inspect-refuse").await;
    let c = vhost.connect().await;
    let ch = c.create_channel().await.unwrap();
    support::queue(&ch, "parked.dlq", args(&[("x-queue-type", Str("quorum")), ("x-delivery-limit", Int(2))])).await;
    support::publish(&c, "", "parked.dlq", &["m".to_string()]).await;
    let out = vhost.hopper(&["inspect", "--vhost", &vhost.name, "--queue", "parked.dlq", "--dead-letters"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = support::text(&out.stderr);
    assert!(
        stderr.contains("not peeking at `parked.dlq`: it is a quorum queue with a delivery limit of 2"),
        "{stderr}"
    );
    assert_eq!(support::count(&c, "parked.dlq").await, Some(1));
}

/// A delivery limit of -1: unlimited since RabbitMQ 4.0, so a peek gives every message back; on
/// 3.10 the broker drops a message at its first return, so the peek is refused and the messages
/// stay (found by a hostile review: the peek used to empty the queue on 3.10).
async fn peek_with_a_negative_delivery_limit(broker: Broker) {
    let vhost = Vhost::new(broker, "inspect-negative-limit").await;
    let c = vhost.connect().await;
    let ch = c.create_channel().await.unwrap();
    support::queue(&ch, "parked", args(&[("x-queue-type", Str("quorum")), ("x-delivery-limit", Int(-1))])).await;
    let ids: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    support::publish(&c, "", "parked", &ids).await;
    let out = vhost.hopper(&["inspect", "--vhost", &vhost.name, "--queue", "parked", "--dead-letters"]);
    if broker.major() >= 4 {
        // Summarised, and judged as `inspect` judges it: nothing bounds its redeliveries.
        let stdout = support::text(&out.stdout);
        assert!(stdout.contains("5 peeked") && stdout.contains("[redeliveries-unbounded]"), "{stdout}");
        assert_eq!(out.status.code(), Some(1), "{}", support::text(&out.stderr));
    } else {
        assert_eq!(out.status.code(), Some(2));
        let stderr = support::text(&out.stderr);
        assert!(stderr.contains("a delivery limit of 0"), "{stderr}");
    }
    support::wait_for_count(&c, "parked", 5, std::time::Duration::from_secs(10)).await;
}

/// Parked messages without a message id (none, or an empty one) are counted: nothing can tell
/// their duplicates apart, so a redrive of them may be processed twice.
async fn dead_letters_without_a_message_id_are_counted(broker: Broker) {
    let vhost = Vhost::new(broker, "inspect-no-id").await;
    let spec = vhost.spec("orders.toml", "[topology.orders]\nqueue_type = \"classic\"\nmax_attempts = 1\n");
    assert_eq!(vhost.hopper(&["apply", spec.to_str().unwrap()]).status.code(), Some(0));
    let c = vhost.connect().await;
    support::publish(&c, "orders", "orders", &["a".to_string(), "b".to_string(), "c".to_string()]).await;
    let bare = lapin::BasicProperties::default().with_delivery_mode(2);
    support::publish_one(&c, "orders", "orders", bare.clone()).await;
    support::publish_one(&c, "orders", "orders", bare.with_message_id("".into())).await;
    let ch = c.create_channel().await.unwrap();
    for _ in 0..5 {
        let m = ch.basic_get("orders".into(), BasicGetOptions::default()).await.unwrap().expect("a message");
        m.delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    }
    support::wait_for_count(&c, "orders.dlq", 5, Duration::from_secs(10)).await;
    let args = ["inspect", "--vhost", &vhost.name, "--queue", "orders.dlq", "--dead-letters"];
    let (code, report) = vhost.json(&args);
    assert_eq!(code, Some(0), "{report:#}");
    let summary = &report["vhosts"][0]["dead_letters"];
    assert_eq!((&summary["peeked"], &summary["without_message_id"]), (&5.into(), &2.into()), "{summary:#}");
    let table = support::text(&vhost.hopper(&args).stdout);
    assert!(table.contains("2 of them without a message id"), "{table}");
}

/// `--dead-letters` prints the queue's hazards as `inspect` does, and exits as `inspect` does
/// for them: 1 with a hazard, in the table and in JSON (it used to exit 0 while printing them).
async fn dead_letters_exit_as_inspect_does(broker: Broker) {
    let vhost = Vhost::new(broker, "inspect-dlq-hazard").await;
    let c = vhost.connect().await;
    let ch = c.create_channel().await.unwrap();
    // A parking lot that expires what it parks.
    support::queue(&ch, "orders.dlq", args(&[("x-message-ttl", Int(600_000))])).await;
    let to_dlq = args(&[("x-dead-letter-exchange", Str("")), ("x-dead-letter-routing-key", Str("orders.dlq"))]);
    support::queue(&ch, "orders", to_dlq).await;
    support::publish(&c, "", "orders", &["m".to_string()]).await;
    let m = ch.basic_get("orders".into(), BasicGetOptions::default()).await.unwrap().expect("a message");
    m.delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    support::wait_for_count(&c, "orders.dlq", 1, Duration::from_secs(10)).await;

    let inspect = ["inspect", "--vhost", &vhost.name, "--queue", "orders.dlq"];
    let dead_letters = [&inspect[..], &["--dead-letters"]].concat();
    let (code, report) = vhost.json(&inspect);
    let rules = |report: &serde_json::Value| -> Vec<String> {
        let hazards = report["vhosts"][0]["hazards"].as_array().unwrap();
        hazards.iter().map(|h| format!("{} {}", h["severity"].as_str().unwrap(), h["rule"].as_str().unwrap())).collect()
    };
    assert_eq!((code, rules(&report)), (Some(1), vec!["error dead-letter-queue-not-terminal".to_string()]));
    let (code, report) = vhost.json(&dead_letters);
    assert_eq!(report["vhosts"][0]["dead_letters"]["peeked"], 1, "{report:#}");
    assert_eq!((code, rules(&report)), (Some(1), vec!["error dead-letter-queue-not-terminal".to_string()]));
    let out = vhost.hopper(&dead_letters);
    let table = support::text(&out.stdout);
    assert!(table.contains("1 peeked") && table.contains("error [dead-letter-queue-not-terminal]"), "{table}");
    assert_eq!(out.status.code(), Some(1), "{table}");
    support::wait_for_count(&c, "orders.dlq", 1, Duration::from_secs(5)).await;
}

/// A peek of more than 32 messages of a quorum queue: the broker takes them back out of order
/// (measured on 3.10, 4.0 and 4.3, `ops::inspect::QUORUM_ORDER_KEPT`), and the report says so
/// rather than claiming their order; none is consumed.
async fn a_large_quorum_peek_says_it_reorders(broker: Broker) {
    let vhost = Vhost::new(broker, "inspect-dlq-order").await;
    let c = vhost.connect().await;
    let ch = c.create_channel().await.unwrap();
    support::queue(&ch, "parked", args(&[("x-queue-type", Str("quorum")), ("x-delivery-limit", Int(1_000_000))])).await;
    let ids: Vec<String> = (0..100).map(|i| format!("m{i:03}")).collect();
    support::publish(&c, "", "parked", &ids).await;
    let (code, report) = vhost.json(&["inspect", "--vhost", &vhost.name, "--queue", "parked", "--dead-letters"]);
    assert_eq!(code, Some(0), "{report:#}");
    let summary = &report["vhosts"][0]["dead_letters"];
    assert_eq!(summary["peeked"], 100);
    let effect = summary["effect"].as_str().unwrap();
    assert!(effect.contains("not in their original order"), "{effect}");
    support::wait_for_count(&c, "parked", 100, Duration::from_secs(10)).await;
    let order: Vec<String> =
        support::drain(&c, "parked").await.iter().map(|m| support::message_id(&m.delivery.properties)).collect();
    assert_ne!(order, ids, "the broker took them back in another order: the report's sentence is still needed");
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(sorted, ids, "every message is still there");
}

on_every_broker!(
    dead_letters_exit_as_inspect_does,
    dead_letters_without_a_message_id_are_counted,
    peek_with_a_negative_delivery_limit,
    summary_consumes_nothing_classic = summary_consumes_nothing("classic"),
    summary_consumes_nothing_quorum = summary_consumes_nothing("quorum"),
    peek_refused_where_it_could_lose,
    a_large_quorum_peek_says_it_reorders,
);
