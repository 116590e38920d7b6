//! `apply --migrate` on real brokers: a queue gets arguments that cannot change in place under
//! the same name, while producers publish and wait queues expire into it, killed at random
//! points; afterwards every message is there (counted by message id), and `diff` is in sync.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use serde_json::json;

use crate::spawned::{self, End, Rng};
use crate::support::{self, Broker, Vhost, on_every_broker};

fn republish(queue_type: &str, delay: &str) -> String {
    format!(
        "[topology.orders]\nqueue_type = \"{queue_type}\"\nrouting_keys = [\"order.created\"]\ndelays = [\"{delay}\"]\nmax_attempts = 3\n"
    )
}

/// Publishes to the main exchange (and, as a consumer's retries would, to the retry exchange)
/// until told to stop; every publish is confirmed and mandatory, so a message that found no
/// queue at any moment of the migration fails the test. Returns the ids it published.
fn publisher(connection: Arc<lapin::Connection>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut ids = Vec::new();
        let mut n = 0;
        while !stop.load(Ordering::SeqCst) {
            let id = format!("live-{n}");
            let (exchange, key) = if n % 5 == 0 { ("orders.retry", "1") } else { ("orders", "order.created") };
            support::publish(&connection, exchange, key, std::slice::from_ref(&id)).await;
            ids.push(id);
            n += 1;
            tokio::time::sleep(Duration::from_millis(4)).await;
        }
        ids
    })
}

/// Every message of `queues`, by id, with how many copies each has.
async fn census(connection: &lapin::Connection, queues: &[&str]) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for q in queues {
        for m in support::drain(connection, q).await {
            *seen.entry(support::message_id(&m.delivery.properties)).or_insert(0) += 1;
        }
    }
    seen
}

/// The proof of issue 10: classic to quorum, 5,000 messages waiting, a publisher running and a
/// wait queue expiring into the main queue, hopper killed three times at random points.
async fn classic_to_quorum_under_load_killed_three_times(broker: Broker) {
    let vhost = Vhost::new(broker, "migrate-load").await;
    let spec = vhost.spec("orders.toml", &republish("classic", "2s"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = Arc::new(vhost.connect().await);
    let waiting: Vec<String> = (0..5_000).map(|i| format!("waiting-{i}")).collect();
    support::publish(&connection, "orders", "order.created", &waiting).await;
    let retrying: Vec<String> = (0..200).map(|i| format!("retrying-{i}")).collect();
    support::publish(&connection, "orders.retry", "1", &retrying).await;

    let stop = Arc::new(AtomicBool::new(false));
    let live = publisher(connection.clone(), stop.clone());
    vhost.spec("orders.toml", &republish("quorum", "2s"));

    let mut rng = Rng::from_clock();
    let mut kills = 0;
    let mut runs = 0;
    loop {
        runs += 1;
        assert!(runs <= 12, "apply --migrate did not finish in 12 runs");
        let child = spawned::hopper_on(broker, &["apply", "--migrate", &spec]);
        let deadline = (kills < 3).then(|| Instant::now() + Duration::from_millis(100 + rng.below(4_000)));
        match spawned::kill_at(child, deadline).await {
            End::Killed(_) => {
                kills += 1;
                eprintln!("killed run {runs}");
            }
            End::Exited(out) => {
                let status = out.status;
                eprintln!("run {runs}: {status}\n{}{}", support::text(&out.stdout), support::text(&out.stderr));
                assert_eq!(status.code(), Some(0), "apply --migrate failed");
                if kills >= 3 {
                    break;
                }
                // Finished before the kills: migrate back and forth until three kills have landed.
                let kind = if runs % 2 == 1 { "classic" } else { "quorum" };
                vhost.spec("orders.toml", &republish(kind, "2s"));
            }
        }
    }
    // The last run may have ended on classic: finish on quorum.
    vhost.spec("orders.toml", &republish("quorum", "2s"));
    assert_eq!(vhost.hopper(&["apply", "--migrate", &spec]).status.code(), Some(0));

    stop.store(true, Ordering::SeqCst);
    let published = live.await.unwrap();
    assert!(!published.is_empty());
    // The wait queue hands everything back within its TTL.
    support::wait_for_count(&connection, "orders.wait-2s", 0, Duration::from_secs(30)).await;
    let (code, diff) = vhost.json(&["diff", &spec]);
    assert_eq!(code, Some(0), "{diff:#}");
    for q in ["orders", "orders.wait-2s", "orders.dlq"] {
        assert_eq!(support::count(&connection, &format!("hopper.migrating.{q}")).await, None, "{q}'s holding queue");
    }
    let seen = census(&connection, &["orders", "orders.dlq"]).await;
    let expected: Vec<&String> = waiting.iter().chain(&retrying).chain(&published).collect();
    let lost: Vec<&&String> = expected.iter().filter(|id| !seen.contains_key(id.as_str())).collect();
    let duplicates = seen.values().filter(|n| **n > 1).count();
    eprintln!("{} messages expected, {} ids found, {duplicates} duplicated, {kills} kills", expected.len(), seen.len());
    assert!(lost.is_empty(), "{} lost, such as {:?}", lost.len(), &lost[..lost.len().min(10)]);
    assert_eq!(seen.len(), expected.len(), "ids nobody published");
}

/// A main queue with a consumer is not switched from under it: refused with the way out, and
/// nothing changes.
async fn a_queue_with_consumers_is_refused(broker: Broker) {
    let vhost = Vhost::new(broker, "migrate-consumers").await;
    let spec = vhost.spec("orders.toml", &republish("classic", "5s"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    let channel = connection.create_channel().await.unwrap();
    let _consumer = channel
        .basic_consume("orders".into(), "app".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    // The management API reports consumers a few seconds late.
    let start = Instant::now();
    loop {
        let live = hopper::broker::http::read(&broker.endpoint(), &vhost.name, hopper::broker::http::Stats::Counted)
            .await
            .unwrap();
        if live.queues.get("orders").and_then(|q| q.consumers) == Some(1) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the consumer never showed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    vhost.spec("orders.toml", &republish("quorum", "5s"));
    let (code, report) = vhost.json(&["apply", "--migrate", &spec]);
    assert_eq!(code, Some(3), "{report:#}");
    let refused = support::one(support::steps(&report), &json!({"action": "conflict", "object": {"name": "orders"}}));
    let why = refused["ways_out"][0]["says"].as_str().unwrap();
    assert!(why.contains("1 consumer(s)") && why.contains("stop them"), "{why}");
    assert_eq!(support::count(&connection, "hopper.migrating.orders").await, None);
    assert_eq!(report["applied"], json!(false));
}

/// A run killed after declaring the holding queue leaves it behind: apply without --migrate
/// refuses and says so; apply --migrate finishes the job with every message.
async fn an_interrupted_migration_is_named_and_finished(broker: Broker) {
    let vhost = Vhost::new(broker, "migrate-resume").await;
    let spec = vhost.spec("orders.toml", &republish("classic", "5s"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    let ids: Vec<String> = (0..50).map(|i| format!("m-{i}")).collect();
    support::publish(&connection, "orders", "order.created", &ids).await;
    // What a killed run leaves after its first stage: the holding queue, with the new arguments.
    vhost.spec("orders.toml", &republish("quorum", "5s"));
    let (_, compiled) = vhost.json(&["compile", &spec]);
    let orders = support::one(&compiled["topologies"][0]["objects"], &json!({"object": "queue", "name": "orders"}));
    let mut arguments = FieldTable::default();
    for (k, v) in orders["arguments"].as_object().unwrap() {
        let value = match v {
            serde_json::Value::String(s) => lapin::types::AMQPValue::LongString(s.as_str().into()),
            serde_json::Value::Number(n) => lapin::types::AMQPValue::LongLongInt(n.as_i64().unwrap()),
            other => panic!("{other}"),
        };
        arguments.insert(k.as_str().into(), value);
    }
    let channel = connection.create_channel().await.unwrap();
    channel
        .queue_declare(
            "hopper.migrating.orders".into(),
            QueueDeclareOptions { durable: true, ..Default::default() },
            arguments,
        )
        .await
        .unwrap();

    let (code, report) = vhost.json(&["apply", &spec]);
    assert_eq!(code, Some(3), "{report:#}");
    let refused = support::one(support::steps(&report), &json!({"action": "conflict", "object": {"name": "orders"}}));
    assert!(refused["ways_out"][0]["says"].as_str().unwrap().contains("interrupted"), "{refused:#}");

    let (code, report) = vhost.json(&["apply", "--migrate", &spec]);
    assert_eq!(code, Some(0), "{report:#}");
    support::one(support::steps(&report), &json!({"action": "migrate", "object": {"name": "orders"}, "resumes": true}));
    // 50 messages, counted once: set aside, then moved back (not 100 "moved").
    let migrated = support::one(&report["vhosts"][0]["migrated"], &json!({"queue": "orders"}));
    assert_eq!((migrated["moved"].as_u64(), migrated["set_aside"].as_u64()), (Some(50), Some(50)), "{migrated:#}");
    assert_eq!(vhost.json(&["diff", &spec]).0, Some(0));
    let seen = census(&connection, &["orders"]).await;
    assert_eq!(seen.keys().cloned().collect::<std::collections::BTreeSet<_>>(), ids.iter().cloned().collect());
    assert!(seen.values().all(|n| *n == 1));
}

/// A wait queue declared as hopper 0.1 did (dead-lettering through the default exchange) is in
/// sync, with a note; `apply --migrate` moves it to the return binding, messages kept.
async fn an_old_wait_queue_is_in_sync_and_migrates(broker: Broker) {
    let vhost = Vhost::new(broker, "migrate-legacy").await;
    let spec = vhost.spec("orders.toml", &republish("classic", "3s"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    let channel = connection.create_channel().await.unwrap();
    channel.queue_delete("orders.wait-3s".into(), Default::default()).await.unwrap();
    let legacy = support::args(&[
        ("x-message-ttl", support::Arg::Int(3000)),
        ("x-dead-letter-exchange", support::Arg::Str("")),
        ("x-dead-letter-routing-key", support::Arg::Str("orders")),
    ]);
    support::queue(&channel, "orders.wait-3s", legacy).await;
    support::bind(&channel, "orders.wait-3s", "orders.retry", "1").await;
    support::bind(&channel, "orders.wait-3s", "orders.retry", "2").await;

    let (code, diff) = vhost.json(&["diff", &spec]);
    assert_eq!(code, Some(0), "{diff:#}");
    let entry = support::one(support::objects(&diff), &json!({"kind": "queue", "name": "orders.wait-3s"}));
    assert!(entry["note"].as_str().unwrap().contains("hopper 0.1"), "{entry:#}");

    let ids: Vec<String> = (0..20).map(|i| format!("w-{i}")).collect();
    support::publish(&connection, "orders.retry", "1", &ids).await;
    let (code, report) = vhost.json(&["apply", "--migrate", &spec]);
    assert_eq!(code, Some(0), "{report:#}");
    let (code, diff) = vhost.json(&["diff", &spec]);
    assert_eq!(code, Some(0));
    assert!(
        support::one(support::objects(&diff), &json!({"kind": "queue", "name": "orders.wait-3s"}))
            .get("note")
            .is_none()
    );
    support::wait_for_count(&connection, "orders", 20, Duration::from_secs(20)).await;
    let seen = census(&connection, &["orders"]).await;
    assert_eq!(seen.len(), 20);
}

fn strategy(name: &str) -> String {
    format!(
        "[topology.orders]\nstrategy = \"{name}\"\nrouting_keys = [\"order.created\"]\ndelays = [\"2s\"]\nmax_attempts = 3\n"
    )
}

/// Moving a topology between strategies (republish, chain, and on 4.3 native) changes its main
/// queue's arguments: refused without --migrate, with --migrate as the first way out; done with
/// it, and every message that was waiting arrives in the main queue: from the main queue, from
/// a wait queue, and from an earlier chain's work queues (moved by --migrate once nothing feeds
/// them).
async fn strategy_moves_keep_waiting_messages(broker: Broker) {
    let vhost = Vhost::new(broker, "migrate-strategy").await;
    let spec = vhost.spec("orders.toml", &strategy("republish"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    let mut moves = vec!["chain"];
    if broker.version() >= (4, 3) {
        moves.push("native");
    }
    moves.push("republish");
    let mut ids = Vec::new();
    let mut from = "republish";
    for (n, to) in moves.into_iter().enumerate() {
        let main: Vec<String> = (0..100).map(|i| format!("main-{n}-{i}")).collect();
        support::publish(&connection, "orders", "order.created", &main).await;
        ids.extend(main);
        // As a consumer's failure would: waiting to return to the main queue (republish), or to
        // the next attempt's work queue (chain), which the next strategy no longer has.
        let waiting: Vec<String> = (0..30).map(|i| format!("waiting-{n}-{i}")).collect();
        if from != "native" {
            support::publish(&connection, "orders.retry", "1", &waiting).await;
            ids.extend(waiting);
        }
        if support::count(&connection, "orders.attempt-2").await.is_some() {
            let due: Vec<String> = (0..30).map(|i| format!("due-{n}-{i}")).collect();
            support::publish(&connection, "", "orders.attempt-2", &due).await;
            ids.extend(due);
        }
        vhost.spec("orders.toml", &strategy(to));
        let (code, report) = vhost.json(&["apply", &spec]);
        assert_eq!(code, Some(3), "{report:#}");
        let refused =
            support::one(support::steps(&report), &json!({"action": "conflict", "object": {"name": "orders"}}));
        assert!(refused["ways_out"][0]["says"].as_str().unwrap().contains("--migrate"), "{refused:#}");
        let (code, report) = vhost.json(&["apply", "--migrate", &spec]);
        assert_eq!(code, Some(0), "to {to}: {report:#}");
        // What waited in the old shape's wait queues comes back; then the left-overs go.
        let start = Instant::now();
        loop {
            let (_, report) = vhost.json(&["apply", "--migrate", "--prune", &spec]);
            let extra = support::actions(&report).contains_key("extra");
            let (code, _) = vhost.json(&["diff", &spec]);
            if code == Some(0) && !extra {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "left-overs of the move to {to} never went: {report:#}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        from = to;
    }
    let seen = census(&connection, &["orders"]).await;
    let missing: Vec<&String> = ids.iter().filter(|id| !seen.contains_key(id.as_str())).collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
    assert_eq!(seen.len(), ids.len());
    // A wait queue dead-lettering in the instant both queues are bound reaches both: a
    // duplicate, by design never a loss. Reported, not refused.
    let duplicates = seen.values().filter(|n| **n > 1).count();
    eprintln!("{} messages, {duplicates} delivered twice (returned in a binding switch)", ids.len());
}

/// A message another user published carries its `user_id`, which RabbitMQ refuses in a publish
/// by anyone else: the migration moves it into the `hopper-user-id` header instead of failing;
/// a message of hopper's own user keeps it.
async fn another_users_user_id_is_kept_in_a_header(broker: Broker) {
    let vhost = Vhost::new(broker, "migrate-user-id").await;
    let spec = vhost.spec("orders.toml", &republish("classic", "5s"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let user = support::unique("hopper-test-publisher");
    support::create_user(broker, &user, "secret", "").await;
    support::set_permissions(broker, &vhost.name, &user, "", "", ".*").await;
    let url = format!(
        "{}/{}",
        broker.amqp().replace("guest:guest", &format!("{user}:secret")),
        support::urlencode(&vhost.name)
    );
    let publisher = lapin::Connection::connect(&url, lapin::ConnectionProperties::default()).await.unwrap();
    let theirs = support::rich_properties("theirs").with_user_id(user.as_str().into());
    support::publish_one(&publisher, "orders", "order.created", theirs).await;
    let ours = vhost.connect().await;
    support::publish_one(
        &ours,
        "orders",
        "order.created",
        support::rich_properties("ours").with_user_id("guest".into()),
    )
    .await;

    vhost.spec("orders.toml", &republish("quorum", "5s"));
    let (code, report) = vhost.json(&["apply", "--migrate", &spec]);
    support::delete_user(broker, &user).await;
    assert_eq!(code, Some(0), "{report:#}");
    let moved = support::drain(&ours, "orders").await;
    let by_id = |id: &str| moved.iter().find(|m| support::message_id(&m.delivery.properties) == id).unwrap();
    let theirs = &by_id("theirs").delivery.properties;
    assert_eq!(theirs.user_id(), &None);
    let header = theirs.headers().as_ref().and_then(|h| h.inner().get("hopper-user-id").cloned());
    assert_eq!(header, Some(lapin::types::AMQPValue::LongString(user.as_str().into())));
    assert_eq!(theirs.correlation_id(), support::rich_properties("theirs").correlation_id(), "the rest kept");
    assert_eq!(by_id("ours").delivery.properties.user_id().as_ref().map(|u| u.to_string()), Some("guest".into()));
}

/// A user who may configure the topology but not hopper's holding queue: `apply --migrate` stops
/// at the refused declaration as at any other, a refusal (exit 3, `permission: true`) in the
/// report, not an error; every message is still in the main queue.
async fn a_permission_refused_mid_migration_is_a_refusal(broker: Broker) {
    let vhost = Vhost::new(broker, "migrate-permission").await;
    let spec = vhost.spec("orders.toml", &republish("classic", "5s"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    let ids: Vec<String> = (0..5).map(|i| format!("p-{i}")).collect();
    support::publish(&connection, "orders", "order.created", &ids).await;
    vhost.spec("orders.toml", &republish("quorum", "5s"));
    let user = support::unique("hopper-test-migrator");
    support::create_user(broker, &user, "secret", "monitoring,policymaker").await;
    support::set_permissions(broker, &vhost.name, &user, "^(?!hopper\\.migrating\\.).*", ".*", ".*").await;
    let amqp = broker.amqp().replace("guest:guest", &format!("{user}:secret"));
    let env = [("HOPPER_AMQP_URL", amqp.as_str()), ("HOPPER_MANAGEMENT_URL", broker.management())];
    let out = support::hopper_env(&["--format", "json", "apply", "--migrate", &spec], &env);
    support::delete_user(broker, &user).await;
    assert_eq!(out.status.code(), Some(3), "{}", support::text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let refused = report["vhosts"][0]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{report:#}");
    assert_eq!(refused[0]["permission"], true);
    assert!(refused[0]["reason"].as_str().unwrap().contains("want of a permission"), "{report:#}");
    let step = &support::steps(&report)[refused[0]["step"].as_u64().unwrap() as usize];
    assert_eq!(step["action"], "migrate", "{step}");
    assert_eq!(support::count(&connection, "orders").await, Some(5), "every message still in the main queue");
}

/// Issue 40, item 10: a migration holds a bounded number of bytes, not a count of messages. A
/// message of 1 KiB, then 32 of 4 MiB (128 MiB), waiting in a classic main queue, migrated to
/// quorum under `--max-bytes-in-flight 16MiB` (moved twice: into the holding queue and back):
/// every one is in the new queue, whole, in order, and hopper's peak memory stays under the
/// bound plus a baseline. The small one first is what a consumer's window sized from the first
/// message could not bound (it took in a window of the large ones).
async fn large_messages_migrate_within_the_bound(broker: Broker) {
    let vhost = Vhost::new(broker, "migrate-large").await;
    let spec = vhost.spec("orders.toml", &republish("classic", "1h"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    let mut messages = support::large_bodies(1, 1 << 10);
    messages[0].0 = "small-0".into();
    messages.extend(support::large_bodies(32, 4 << 20));
    for (id, body) in &messages {
        support::publish_body(&connection, "orders", "order.created", body, support::rich_properties(id)).await;
    }
    vhost.spec("orders.toml", &republish("quorum", "1h"));
    let bound: u64 = 16 << 20;
    let (out, peak) = support::hopper_peak(broker, &["apply", "--migrate", &spec, "--max-bytes-in-flight", "16MiB"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(support::text(&out.stdout).contains("33 message(s) moved"), "each message counted once");
    eprintln!("{broker:?} migrate: peak {} MiB", peak >> 20);
    let (code, diff) = vhost.json(&["diff", &spec]);
    assert_eq!(code, Some(0), "{diff:#}");
    assert_eq!(support::count(&connection, "hopper.migrating.orders").await, None);
    support::assert_large_bodies(&support::drain(&connection, "orders").await, &messages);
    support::assert_peak_within(peak, bound);
}

on_every_broker!(
    another_users_user_id_is_kept_in_a_header,
    strategy_moves_keep_waiting_messages,
    classic_to_quorum_under_load_killed_three_times,
    a_queue_with_consumers_is_refused,
    an_interrupted_migration_is_named_and_finished,
    an_old_wait_queue_is_in_sync_and_migrates,
    large_messages_migrate_within_the_bound,
    a_permission_refused_mid_migration_is_a_refusal,
);
