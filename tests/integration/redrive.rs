//! `hopper redrive` on real brokers: dead letters made by the broker (a consumer's reject, an
//! expiry), moved back to their main queue, counted by message id; killed at random points;
//! filtered; and what each release does with the `x-death` a redrive's copy carries.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures_lite::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, FieldArray, FieldTable};
use lapin::{BasicProperties, Connection};
use serde_json::{Value, json};

use crate::spawned::{self, End, Rng};
use crate::support::{self, Arg, Broker, Vhost, on_every_broker};

fn topology(name: &str, queue_type: &str) -> String {
    // A long delay: nothing comes back from a wait queue during a test.
    format!("[topology.{name}]\nqueue_type = \"{queue_type}\"\ndelays = [\"1h\"]\nmax_attempts = 2\n")
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Headers as a consumer at its third attempt would have them when it gives up: hopper's own
/// attempt counter, which a redrive must reset.
fn at_attempt(n: i64) -> FieldTable {
    let mut h = FieldTable::default();
    h.insert("hopper-attempt".into(), AMQPValue::LongLongInt(n));
    h.insert("app-header".into(), AMQPValue::LongString("kept".into()));
    h
}

/// Publishes `ids` to `queue` (through the default exchange) and makes the broker dead-letter
/// each one by a consumer's reject, in order; waits until `dlq` holds `expect` messages.
async fn reject_into(connection: &Connection, queue: &str, ids: &[String], dlq: &str, expect: u32) {
    support::publish_with(connection, "", queue, ids, |_| Some(at_attempt(3))).await;
    let channel = connection.create_channel().await.unwrap();
    for _ in ids {
        let m = channel.basic_get(queue.into(), BasicGetOptions { no_ack: false }).await.unwrap().expect("a message");
        m.delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    }
    let _ = channel.close(200, "".into()).await;
    support::wait_for_count(connection, dlq, expect, Duration::from_secs(30)).await;
}

/// Every message of a queue, in order, read and given back as a redrive gives back what stays
/// (one consumer, cancelled, then one nack each): their properties. Not `basic.get`: a quorum
/// queue gives back more than 32 messages taken that way out of order.
async fn look(connection: &Connection, queue: &str, n: usize) -> Vec<BasicProperties> {
    let n = n as u32;
    // Messages a closed channel gave back reach the queue a little later: all of them first.
    support::wait_for_count(connection, queue, n, Duration::from_secs(30)).await;
    let channel = connection.create_channel().await.unwrap();
    channel.basic_qos(u16::try_from(n + 1).unwrap_or(0), BasicQosOptions::default()).await.unwrap();
    let mut consumer = channel
        .basic_consume(queue.into(), "look".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let mut out = Vec::new();
    let mut tags = Vec::new();
    while out.len() < n as usize {
        let d =
            tokio::time::timeout(Duration::from_secs(30), consumer.next()).await.expect("delivered").unwrap().unwrap();
        tags.push(d.delivery_tag);
        out.push(d.properties.clone());
    }
    channel.basic_cancel(consumer.tag(), Default::default()).await.unwrap();
    for tag in tags {
        channel.basic_nack(tag, BasicNackOptions { multiple: false, requeue: true }).await.unwrap();
    }
    let _ = channel.close(200, "".into()).await;
    // The queue takes them back after the channel has closed: wait, so that what runs next
    // counts them all.
    support::wait_for_count(connection, queue, n, Duration::from_secs(30)).await;
    out
}

/// The next message of a queue, waiting for one given back by a closed channel to be there.
async fn get_one(channel: &lapin::Channel, queue: &str, no_ack: bool) -> lapin::message::BasicGetMessage {
    let start = Instant::now();
    loop {
        if let Some(m) = channel.basic_get(queue.into(), BasicGetOptions { no_ack }).await.unwrap() {
            return m;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{queue} stayed empty");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn ids_of(messages: &[BasicProperties]) -> Vec<String> {
    messages.iter().map(support::message_id).collect()
}

fn header<'a>(p: &'a BasicProperties, key: &str) -> Option<&'a AMQPValue> {
    p.headers().as_ref().and_then(|h| h.inner().get(key))
}

fn int_header(p: &BasicProperties, key: &str) -> Option<i64> {
    match header(p, key)? {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortShortInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        other => panic!("{key} is {other:?}"),
    }
}

/// What the last run's JSON says about one topology.
#[track_caller]
fn topology_report<'a>(report: &'a Value, name: &str) -> &'a Value {
    support::one(&report["topologies"], &json!({"topology": name}))
}

// ---------------------------------------------------------------------------------------------
// What each release does with a client-published x-death
// ---------------------------------------------------------------------------------------------

fn death_entry(queue: &str, reason: &str, time: u64) -> AMQPValue {
    let mut entry = FieldTable::default();
    entry.insert("queue".into(), AMQPValue::LongString(queue.into()));
    entry.insert("reason".into(), AMQPValue::LongString(reason.into()));
    entry.insert("count".into(), AMQPValue::LongLongInt(3));
    entry.insert("time".into(), AMQPValue::Timestamp(time));
    entry.insert("exchange".into(), AMQPValue::LongString("orders".into()));
    entry.insert(
        "routing-keys".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongString("k".into())])),
    );
    AMQPValue::FieldTable(entry)
}

/// Headers of a message that died once, in `queue`, `age` ago, as the broker records it.
fn died(queue: &str, reason: &str, age: Duration) -> FieldTable {
    let time = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() - age.as_secs();
    let mut h = FieldTable::default();
    h.insert("x-death".into(), AMQPValue::FieldArray(FieldArray::from(vec![death_entry(queue, reason, time)])));
    h.insert("x-first-death-queue".into(), AMQPValue::LongString(queue.into()));
    h.insert("x-first-death-reason".into(), AMQPValue::LongString(reason.into()));
    h.insert("x-first-death-exchange".into(), AMQPValue::LongString("orders".into()));
    h
}

/// A redrive's copy carries the dead letter's `x-death`. Measured here, for a classic and a
/// quorum queue: every release delivers a client-published `x-death` and `x-first-death-*` as
/// published; at the message's next dead-lettering, 3.10 adds its new death to them (and keeps
/// the client's `x-first-death-*`), while 4.0 and 4.3 replace both with the new death alone.
/// That is why a copy also carries `hopper-deaths`.
async fn client_published_x_death_by_release(broker: Broker) {
    let vhost = Vhost::new(broker, "redrive-xdeath").await;
    let connection = vhost.connect().await;
    let channel = connection.create_channel().await.unwrap();
    support::queue(&channel, "probe.dlq", FieldTable::default()).await;
    for kind in ["classic", "quorum"] {
        let queue = format!("probe-{kind}");
        support::queue(
            &channel,
            &queue,
            support::args(&[
                ("x-queue-type", Arg::Str(kind)),
                ("x-dead-letter-exchange", Arg::Str("")),
                ("x-dead-letter-routing-key", Arg::Str("probe.dlq")),
            ]),
        )
        .await;
        let published = died("orders", "rejected", Duration::from_secs(86_400));
        support::publish_one(&connection, "", &queue, support::rich_properties("p").with_headers(published)).await;
        let got = channel.basic_get(queue.as_str().into(), BasicGetOptions { no_ack: false }).await.unwrap().unwrap();
        let delivered = &got.delivery.properties;
        assert_eq!(support::deaths(delivered), vec![("orders".into(), "rejected".into())], "{broker:?} {kind}");
        assert_eq!(header(delivered, "x-first-death-queue"), Some(&AMQPValue::LongString("orders".into())));
        got.delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
        support::wait_for_count(&connection, "probe.dlq", 1, Duration::from_secs(10)).await;
        let got = channel.basic_get("probe.dlq".into(), BasicGetOptions { no_ack: true }).await.unwrap().unwrap();
        let dead = &got.delivery.properties;
        let first = match header(dead, "x-first-death-queue") {
            Some(AMQPValue::LongString(s)) => s.to_string(),
            other => panic!("{other:?}"),
        };
        let now_dead: (String, String) = (queue.clone(), "rejected".into());
        if broker.major() >= 4 {
            assert_eq!(support::deaths(dead), vec![now_dead], "{broker:?} {kind}: replaced");
            assert_eq!(first, queue, "{broker:?} {kind}");
        } else {
            assert_eq!(
                support::deaths(dead),
                vec![now_dead, ("orders".into(), "rejected".into())],
                "{broker:?} {kind}"
            );
            assert_eq!(first, "orders", "{broker:?} {kind}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Killed twice: nothing lost
// ---------------------------------------------------------------------------------------------

/// The proof of issue 10 B: 2,000 dead letters of two topologies (one classic, one quorum),
/// redriven by runs that are SIGKILLed twice at random points: afterwards every dead letter is
/// back at its main queue once, or twice and counted among the possible duplicates; none is
/// lost; the dead-letter queues are empty.
async fn two_thousand_dead_letters_killed_twice(broker: Broker) {
    let vhost = Vhost::new(broker, "redrive-kill").await;
    let spec = vhost.spec("t.toml", &format!("{}{}", topology("orders", "classic"), topology("payments", "quorum")));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    let orders = ids("orders", 1000);
    let payments = ids("payments", 1000);
    reject_into(&connection, "orders", &orders, "orders.dlq", 1000).await;
    reject_into(&connection, "payments", &payments, "payments.dlq", 1000).await;

    let mut rng = Rng::from_clock();
    let (mut kills, mut runs, mut reported_duplicates) = (0, 0, 0);
    let mut reported_ids = std::collections::BTreeSet::new();
    loop {
        runs += 1;
        assert!(runs <= 8, "redrive did not finish in 8 runs");
        // A rate keeps each run long enough (2,000 at 400/s: 5 s) for the kills to land mid-run.
        let child = spawned::hopper_on(broker, &["--format", "json", "redrive", &spec, "--rate", "400/s"]);
        let deadline = (kills < 2).then(|| Instant::now() + Duration::from_millis(300 + rng.below(2_000)));
        match spawned::kill_at(child, deadline).await {
            End::Killed(_) => {
                kills += 1;
                let left = (
                    support::count(&connection, "orders.dlq").await,
                    support::count(&connection, "payments.dlq").await,
                );
                eprintln!("killed run {runs}; dead letters left: {left:?}");
            }
            End::Exited(out) => {
                eprintln!("run {runs}: {}\n{}", support::text(&out.stdout), support::text(&out.stderr));
                assert_eq!(out.status.code(), Some(0), "redrive failed");
                let report: Value = serde_json::from_slice(&out.stdout).unwrap();
                for t in report["topologies"].as_array().unwrap() {
                    reported_duplicates += t["possible_duplicates"].as_u64().unwrap();
                    reported_ids.extend(t["possible_duplicate_ids"].as_array().unwrap().iter().map(|v| v.to_string()));
                    assert!(t.get("stopped").is_none(), "{t:#}");
                }
                if kills >= 2 {
                    break;
                }
            }
        }
    }
    assert_eq!(kills, 2);
    for dlq in ["orders.dlq", "payments.dlq"] {
        assert_eq!(support::count(&connection, dlq).await, Some(0), "{dlq} is empty");
    }
    let (mut duplicates, mut extra) = (0, 0);
    for (queue, expected) in [("orders", &orders), ("payments", &payments)] {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for m in support::drain(&connection, queue).await {
            let p = &m.delivery.properties;
            // A fresh attempt count, the redrive counted, the death record kept.
            assert_eq!(header(p, "hopper-attempt"), None);
            assert_eq!(int_header(p, "hopper-redriven"), Some(1));
            assert_eq!(support::deaths(p), vec![(queue.to_string(), "rejected".to_string())]);
            assert!(header(p, "hopper-deaths").is_some());
            assert_eq!(header(p, "app-header"), Some(&AMQPValue::LongString("kept".into())));
            *seen.entry(support::message_id(p)).or_default() += 1;
        }
        let lost: Vec<_> = expected.iter().filter(|id| !seen.contains_key(*id)).collect();
        assert!(lost.is_empty(), "{queue}: {} lost, such as {:?}", lost.len(), &lost[..lost.len().min(10)]);
        assert_eq!(seen.len(), expected.len(), "{queue}: ids nobody published");
        // A kill leaves at most one batch copied and not acknowledged: a copy more per kill.
        assert!(seen.values().all(|n| *n <= 1 + kills), "{queue}: a dead letter copied more than once per kill");
        for (id, _) in seen.iter().filter(|(_, n)| **n > 1) {
            assert!(reported_ids.contains(&json!(id).to_string()), "{id} is there twice and was not reported");
            duplicates += 1;
        }
        extra += seen.values().map(|n| n - 1).sum::<usize>();
    }
    eprintln!(
        "{duplicates} duplicated ({extra} extra copies), {reported_duplicates} reported as possible duplicates, {runs} runs"
    );
    assert!(duplicates <= reported_duplicates, "{duplicates} duplicates, only {reported_duplicates} reported");
    assert!(extra <= 2 * 200, "{extra} extra copies after 2 kills");
    // A killed run leaves one batch recorded in the journal at most.
    assert!(reported_duplicates <= 2 * 200, "{reported_duplicates} reported");
    for journal in ["hopper.redrive.orders.dlq", "hopper.redrive.payments.dlq"] {
        assert_eq!(support::count(&connection, journal).await, None, "{journal} is removed once settled");
    }
}

// ---------------------------------------------------------------------------------------------
// Filters
// ---------------------------------------------------------------------------------------------

/// Dead letters of every kind a filter tells apart, in a known order in `orders.dlq`:
/// two that first died a day ago (old-*), rejected ones (r-*), expired ones (e-*), and rejected
/// ones from another queue that dead-letters into the same place (l-*).
async fn mixed_dead_letters(vhost: &Vhost, queue_type: &str) -> (Connection, String, Vec<String>) {
    let spec = vhost.spec("orders.toml", &topology("orders", queue_type));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    let old = ids("old", 2);
    support::publish_with(&connection, "", "orders.dlq", &old, |_| {
        Some(died("orders", "rejected", Duration::from_secs(2 * 86_400)))
    })
    .await;
    let rejected = ids("r", 10);
    reject_into(&connection, "orders", &rejected, "orders.dlq", 12).await;
    let expired = ids("e", 5);
    let channel = connection.create_channel().await.unwrap();
    for id in &expired {
        let p = support::rich_properties(id).with_expiration("1".into());
        support::publish_one(&connection, "", "orders", p).await;
    }
    support::wait_for_count(&connection, "orders.dlq", 17, Duration::from_secs(30)).await;
    let legacy = support::args(&[
        ("x-queue-type", Arg::Str(if queue_type == "quorum" { "quorum" } else { "classic" })),
        ("x-dead-letter-exchange", Arg::Str("orders.dlx")),
        ("x-dead-letter-routing-key", Arg::Str("orders.dlq")),
    ]);
    support::queue(&channel, "legacy", legacy).await;
    let from_legacy = ids("l", 3);
    reject_into(&connection, "legacy", &from_legacy, "orders.dlq", 20).await;
    let all: Vec<String> = old.iter().chain(&rejected).chain(&expired).chain(&from_legacy).cloned().collect();
    assert_eq!(ids_of(&look(&connection, "orders.dlq", 20).await), all, "the dead letters' order to begin with");
    (connection, spec, all)
}

/// One redrive with `filter`: it moves exactly `moves` (in order) to `orders`; the rest stays in
/// `orders.dlq` in its order.
async fn redrive_moves(
    vhost: &Vhost,
    connection: &Connection,
    spec: &str,
    filter: &[&str],
    moves: &[&str],
    dlq: &mut Vec<String>,
) {
    let mut args = vec!["redrive", spec];
    args.extend_from_slice(filter);
    let (code, report) = vhost.json(&args);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["schema_version"], 1, "{report:#}");
    let t = topology_report(&report, "orders");
    assert_eq!(t["moved"], json!(moves.len()), "{filter:?}: {t:#}");
    assert!(t.get("would_move").is_none(), "only a dry run says what would move: {t:#}");
    let moved: Vec<String> = support::drain(connection, "orders")
        .await
        .iter()
        .map(|m| support::message_id(&m.delivery.properties))
        .collect();
    assert_eq!(moved, moves, "{filter:?} moved");
    dlq.retain(|id| !moves.contains(&id.as_str()));
    let stayed = look(connection, "orders.dlq", dlq.len()).await;
    assert_eq!(&ids_of(&stayed), dlq, "{filter:?}: what stayed, in its order");
    assert_eq!(t["stayed"], json!(t["scanned"].as_u64().unwrap() - moves.len() as u64), "{t:#}");
}

/// Each filter moves what it selects and nothing else; what stays keeps its order. On a quorum
/// dead-letter queue, giving back a dead letter that stays counts a delivery up to 4.2 and none
/// on 4.3 (a nack is not a failed delivery there): measured here through `x-delivery-count`.
async fn filters_move_what_they_select(broker: Broker, queue_type: &str) {
    let vhost = Vhost::new(broker, &format!("redrive-filter-{queue_type}")).await;
    let (connection, spec, mut dlq) = mixed_dead_letters(&vhost, queue_type).await;
    let connection = &connection;
    let r = |ids: &[&'static str]| ids.to_vec();

    // A dry run moves nothing, and says what would move by first death.
    let (code, report) = vhost.json(&["redrive", &spec, "--dry-run", "--reason", "expired"]);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["schema_version"], 1, "{report:#}");
    let t = topology_report(&report, "orders");
    assert_eq!((&t["moved"], &t["would_move"]), (&json!(0), &json!(5)), "a dry run moves none: {t:#}");
    assert_eq!(
        t["groups"],
        json!([{"first_death_queue": "orders", "first_death_reason": "expired", "messages": 5, "oldest": t["groups"][0]["oldest"], "newest": t["groups"][0]["newest"]}])
    );
    assert_eq!(support::count(connection, "orders").await, Some(0));
    assert_eq!(ids_of(&look(connection, "orders.dlq", dlq.len()).await), dlq);

    // Before: the look above and the dry run each gave every dead letter back once.
    let before = look(connection, "orders.dlq", dlq.len()).await;
    redrive_moves(
        &vhost,
        connection,
        &spec,
        &["--reason", "expired"],
        &r(&["e-0", "e-1", "e-2", "e-3", "e-4"]),
        &mut dlq,
    )
    .await;
    if queue_type == "quorum" {
        let after = look(connection, "orders.dlq", dlq.len()).await;
        let count = |p: &BasicProperties| int_header(p, "x-delivery-count").unwrap_or(0);
        let before: BTreeMap<String, i64> = before.iter().map(|p| (support::message_id(p), count(p))).collect();
        for p in &after {
            // Between the two looks: the first look's give-back, the redrive's, and the look
            // redrive_moves makes: each counts up to 4.2, none on 4.3 (a nack after a cancel).
            let expected = if broker.version() >= (4, 3) { 0 } else { 3 };
            let id = support::message_id(p);
            assert_eq!(count(p) - before[&id], expected, "{broker:?} {id}: deliveries counted");
        }
    }
    redrive_moves(&vhost, connection, &spec, &["--first-queue", "legacy"], &r(&["l-0", "l-1", "l-2"]), &mut dlq).await;
    redrive_moves(&vhost, connection, &spec, &["--older-than", "1d"], &r(&["old-0", "old-1"]), &mut dlq).await;
    redrive_moves(&vhost, connection, &spec, &["--id", "r-3", "--id", "r-7"], &r(&["r-3", "r-7"]), &mut dlq).await;
    redrive_moves(&vhost, connection, &spec, &["--max", "3"], &r(&["r-0", "r-1", "r-2"]), &mut dlq).await;
    redrive_moves(
        &vhost,
        connection,
        &spec,
        &["--newer-than", "1h", "--reason", "rejected"],
        &r(&["r-4", "r-5", "r-6", "r-8", "r-9"]),
        &mut dlq,
    )
    .await;
    assert!(dlq.is_empty());
}

/// Most dead letters stay (1,350 of 1,500, interleaved with those that move): the run holds them
/// all without stalling and gives them back, a classic queue in their order, and says what a
/// quorum queue does with them.
async fn many_that_stay_keep_their_order(broker: Broker, queue_type: &str) {
    let vhost = Vhost::new(broker, &format!("redrive-many-{queue_type}")).await;
    let spec = vhost.spec("orders.toml", &topology("orders", queue_type));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    let all = ids("m", 1500);
    let moves = |id: &str| id.trim_start_matches("m-").parse::<usize>().unwrap() % 10 == 0;
    support::publish_with(&connection, "", "orders.dlq", &all, |id| {
        Some(died("orders", if moves(id) { "rejected" } else { "expired" }, Duration::from_secs(60)))
    })
    .await;
    // Measured: a quorum queue takes back more than 32 messages read with basic.get in an order
    // of its own (RabbitMQ 3.10 whoever reads them, this test's own look too), and the report
    // says so; a classic queue keeps their order.
    let keeps_order = queue_type == "classic";
    let says = |report: &Value| {
        let effect = topology_report(report, "orders")["effect"].as_str().unwrap().to_string();
        let expected = if keeps_order { "back at their own positions" } else { "perhaps not in their order" };
        assert!(effect.contains(expected), "{broker:?} {queue_type}: {effect}");
    };
    let same = |found: Vec<String>, expected: &[String], what: &str| {
        if keeps_order {
            assert_eq!(found, expected, "{what}, in order");
        } else {
            let (mut found, mut expected) = (found, expected.to_vec());
            found.sort();
            expected.sort();
            assert_eq!(found, expected, "{what}");
        }
    };
    // A dry run reads them all and gives them back.
    let (code, report) = vhost.json(&["redrive", &spec, "--reason", "rejected", "--dry-run"]);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(topology_report(&report, "orders")["would_move"], json!(150));
    says(&report);
    same(ids_of(&look(&connection, "orders.dlq", all.len()).await), &all, "after a dry run");
    let (code, report) = vhost.json(&["redrive", &spec, "--reason", "rejected"]);
    assert_eq!(code, Some(0), "{report:#}");
    let t = topology_report(&report, "orders");
    assert_eq!((t["scanned"].as_u64(), t["moved"].as_u64(), t["stayed"].as_u64()), (Some(1500), Some(150), Some(1350)));
    says(&report);
    let moved: Vec<String> = support::drain(&connection, "orders")
        .await
        .iter()
        .map(|m| support::message_id(&m.delivery.properties))
        .collect();
    let expected: Vec<String> = all.iter().filter(|id| moves(id)).cloned().collect();
    same(moved, &expected, "moved");
    let stayed: Vec<String> = all.iter().filter(|id| !moves(id)).cloned().collect();
    same(ids_of(&look(&connection, "orders.dlq", stayed.len()).await), &stayed, "what stayed");
}

// ---------------------------------------------------------------------------------------------
// A dead letter that fails again during the run
// ---------------------------------------------------------------------------------------------

/// A consumer rejects everything the main queue gets, so each redriven copy dead-letters again
/// while the run goes on: the run stops at the count it started with, and redrives none twice.
async fn a_dead_letter_that_fails_again_is_not_redriven_twice(broker: Broker, queue_type: &str) {
    let vhost = Vhost::new(broker, &format!("redrive-loop-{queue_type}")).await;
    let spec = vhost.spec("orders.toml", &topology("orders", queue_type));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = Arc::new(vhost.connect().await);
    let dead = ids("m", 300);
    reject_into(&connection, "orders", &dead, "orders.dlq", 300).await;

    let stop = Arc::new(AtomicBool::new(false));
    let failing = {
        let (connection, stop) = (connection.clone(), stop.clone());
        tokio::spawn(async move {
            let channel = connection.create_channel().await.unwrap();
            channel.basic_qos(50, BasicQosOptions::default()).await.unwrap();
            let mut consumer = channel
                .basic_consume("orders".into(), "failing".into(), BasicConsumeOptions::default(), FieldTable::default())
                .await
                .unwrap();
            let mut seen = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(100), consumer.next()).await {
                    let d = d.unwrap();
                    seen.push(support::message_id(&d.properties));
                    d.reject(BasicRejectOptions { requeue: false }).await.unwrap();
                }
            }
            seen
        })
    };
    // Slow enough that copies dead-letter again long before the run ends.
    let (code, report) = vhost.json(&["redrive", &spec, "--rate", "150"]);
    assert_eq!(code, Some(0), "{report:#}");
    let t = topology_report(&report, "orders");
    assert_eq!(t["started_with"], json!(300));
    assert_eq!(t["moved"], json!(300), "{t:#}");
    support::wait_for_count(&connection, "orders.dlq", 300, Duration::from_secs(30)).await;
    stop.store(true, Ordering::SeqCst);
    let seen = failing.await.unwrap();
    let mut once: Vec<String> = seen.clone();
    once.sort();
    once.dedup();
    assert_eq!(once.len(), seen.len(), "a copy delivered twice to the main queue's consumer");
    assert_eq!(seen.len(), 300);
    for m in look(&connection, "orders.dlq", 300).await {
        assert_eq!(int_header(&m, "hopper-redriven"), Some(1), "{}", support::message_id(&m));
    }
}

// ---------------------------------------------------------------------------------------------
// Refusals: bad input, nothing moved
// ---------------------------------------------------------------------------------------------

async fn refused_before_anything_moves(broker: Broker) {
    let vhost = Vhost::new(broker, "redrive-refused").await;
    let spec = vhost.spec("orders.toml", &topology("orders", "quorum"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    reject_into(&connection, "orders", &ids("m", 5), "orders.dlq", 5).await;

    for (args, says) in [
        (vec!["--reason", "timeout"], "not a death reason"),
        (vec!["--topology", "payments"], "no topology `payments`"),
        (vec!["--older-than", "1h", "--newer-than", "30m"], "select nothing"),
        (vec!["--rate", "0"], "not a rate"),
        (vec!["--max", "0"], "0"),
    ] {
        let mut all = vec!["redrive", spec.as_str()];
        all.extend(args.iter());
        let out = vhost.hopper(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(support::text(&out.stderr).contains(says), "{args:?}: {}", support::text(&out.stderr));
    }

    // Someone reads the dead-letter queue: refused, so that what a run counts is what it moves.
    let channel = connection.create_channel().await.unwrap();
    let _reader = channel
        .basic_consume("orders.dlq".into(), "reader".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let out = vhost.hopper(&["redrive", &spec]);
    assert_eq!(out.status.code(), Some(2));
    assert!(support::text(&out.stderr).contains("1 consumer(s)"), "{}", support::text(&out.stderr));
    let _ = channel.close(200, "".into()).await;

    // A quorum dead-letter queue whose delivery limit a give-back could reach.
    let other = support::args(&[("x-queue-type", Arg::Str("quorum")), ("x-delivery-limit", Arg::Int(5))]);
    let channel = connection.create_channel().await.unwrap();
    support::queue(&channel, "tight.dlq", other).await;
    support::queue(&channel, "tight", support::args(&[("x-queue-type", Arg::Str("quorum"))])).await;
    let tight =
        vhost.spec("tight.toml", "[topology.tight]\nqueue_type = \"quorum\"\ndelays = [\"1h\"]\nmax_attempts = 2\n");
    let out = vhost.hopper(&["redrive", tight.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(support::text(&out.stderr).contains("delivery limit of 5"), "{}", support::text(&out.stderr));

    assert_eq!(support::count(&connection, "orders").await, Some(0));
    assert_eq!(support::count(&connection, "orders.dlq").await, Some(5));
}

// ---------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------

/// Issue 40, item 10: a redrive holds a bounded number of bytes, not a count of messages. 40
/// dead letters of 4 MiB (160 MiB) moved under `--max-bytes-in-flight 16MiB`: every one arrives,
/// whole, in order, and hopper's peak memory stays under the bound plus a baseline (measured,
/// a debug build: 46 MiB on each release; the batches of 200 it replaced took 194 MiB here).
/// Then dead letters of 4 MiB under a bound of 1 MiB: each moves alone.
async fn large_dead_letters_move_within_the_bound(broker: Broker) {
    let vhost = Vhost::new(broker, "redrive-large").await;
    let spec = vhost.spec("t.toml", &topology("orders", "classic"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    let messages = support::large_bodies(40, 4 << 20);
    for (id, body) in &messages {
        support::publish_body(&connection, "", "orders.dlq", body, support::rich_properties(id)).await;
    }
    let bound: u64 = 16 << 20;
    let (out, peak) =
        support::hopper_peak(broker, &["--format", "json", "redrive", &spec, "--max-bytes-in-flight", "16MiB"]);
    assert_eq!(out.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(topology_report(&report, "orders")["moved"], json!(40), "{report:#}");
    assert_eq!(support::count(&connection, "orders.dlq").await, Some(0));
    let moved = support::drain(&connection, "orders").await;
    support::assert_large_bodies(&moved, &messages);
    support::assert_peak_within(peak, bound);

    // Dead letters larger than the bound move too, one at a time: each is held with its copy.
    // 24 of 4 MiB: held together they would be 96 MiB, above the ceiling checked below.
    let larger = support::large_bodies(24, 4 << 20);
    for (id, body) in &larger {
        support::publish_body(&connection, "", "orders.dlq", body, support::rich_properties(id)).await;
    }
    let (out, peak) =
        support::hopper_peak(broker, &["--format", "json", "redrive", &spec, "--max-bytes-in-flight", "1MiB"]);
    assert_eq!(out.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(topology_report(&report, "orders")["moved"], json!(24), "{report:#}");
    support::assert_large_bodies(&support::drain(&connection, "orders").await, &larger);
    support::assert_peak_within(peak, 2 * (4 << 20));
}

/// Issue 40, item 10, where a count-sized window let bodies in: a quorum dead-letter queue whose
/// first dead letter is 1 KiB and whose 24 others are 4 MiB (96 MiB). A run sizing a consumer's
/// window from the first one took in a window of the large ones (measured: 126 to 166 MiB), and
/// a dry run or a filtered run, whose window held every dead letter that stays, took them all.
/// Taken one by one, each run stays under the bound plus the baseline, and every dead letter is
/// where it belongs, whole.
async fn mixed_sizes_and_filtered_runs_stay_within_the_bound(broker: Broker) {
    let vhost = Vhost::new(broker, "redrive-mixed").await;
    let spec = vhost.spec("t.toml", &topology("orders", "quorum"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    let mut messages = support::large_bodies(1, 1 << 10);
    messages[0].0 = "small-0".into();
    messages.extend(support::large_bodies(24, 4 << 20));
    for (id, body) in &messages {
        support::publish_body(&connection, "", "orders.dlq", body, support::rich_properties(id)).await;
    }
    let bound: u64 = 16 << 20;
    let redrive = |extra: &[&str]| {
        let mut args = vec!["--format", "json", "redrive", spec.as_str(), "--max-bytes-in-flight", "16MiB"];
        args.extend(extra);
        let (out, peak) = support::hopper_peak(broker, &args);
        let report: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", support::text(&out.stderr)));
        assert_eq!(out.status.code(), Some(0), "{report:#}");
        eprintln!("{broker:?} redrive {extra:?}: peak {} MiB", peak >> 20);
        (topology_report(&report, "orders").clone(), peak)
    };
    // A dry run looks at every one and gives them all back.
    let (t, peak) = redrive(&["--dry-run"]);
    assert_eq!(t["would_move"], json!(25), "{t:#}");
    support::assert_peak_within(peak, bound);
    support::wait_for_count(&connection, "orders.dlq", 25, Duration::from_secs(30)).await;
    // A filtered run moves two and holds the other 23 until its end.
    let (t, peak) = redrive(&["--id", "big-3", "--id", "big-20"]);
    assert_eq!((t["moved"].as_u64(), t["stayed"].as_u64()), (Some(2), Some(23)), "{t:#}");
    support::assert_peak_within(peak, bound);
    let moved = support::drain(&connection, "orders").await;
    let picked: Vec<_> = messages.iter().filter(|(id, _)| id == "big-3" || id == "big-20").cloned().collect();
    support::assert_large_bodies(&moved, &picked);
    support::wait_for_count(&connection, "orders.dlq", 23, Duration::from_secs(30)).await;
    // Then every one that is left, by a filter that selects each: a filtered run's bodies are
    // bounded too (a consumer's window had to hold every dead letter it would look at).
    let left: Vec<String> =
        messages.iter().map(|(id, _)| id.clone()).filter(|id| id != "big-3" && id != "big-20").collect();
    let by_id: Vec<&str> = left.iter().flat_map(|id| ["--id", id.as_str()]).collect();
    let (t, peak) = redrive(&by_id);
    assert_eq!(t["moved"], json!(23), "{t:#}");
    support::assert_peak_within(peak, bound);
    let mut moved: Vec<_> = support::drain(&connection, "orders").await;
    // Given back past 32 or not, a quorum queue may have reordered those that stayed: compared by id.
    moved.sort_by_key(|m| support::message_id(&m.delivery.properties));
    let mut rest: Vec<_> = messages.iter().filter(|(id, _)| id != "big-3" && id != "big-20").cloned().collect();
    rest.sort_by(|a, b| a.0.cmp(&b.0));
    support::assert_large_bodies(&moved, &rest);
    assert_eq!(support::count(&connection, "orders.dlq").await, Some(0));
}

/// Two redrives of one dead-letter queue at once: the second is refused before it reads
/// anything (exit 2), naming the run that holds the queue, and the first moves every dead letter.
async fn a_second_run_is_refused_while_one_runs(broker: Broker) {
    let vhost = Vhost::new(broker, "redrive-twice").await;
    let spec = vhost.spec("orders.toml", &topology("orders", "quorum"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    reject_into(&connection, "orders", &ids("m", 60), "orders.dlq", 60).await;
    // 60 at 10/s: six seconds, longer than a second run waits for a lock to go.
    let first = spawned::hopper_on(broker, &["--format", "json", "redrive", &spec, "--rate", "10/s"]);
    support::wait_for_count_at_least(&connection, "orders", 2, Duration::from_secs(30)).await;
    let out = vhost.hopper(&["redrive", &spec]);
    assert_eq!(out.status.code(), Some(2), "{}", support::text(&out.stderr));
    let said = support::text(&out.stderr);
    assert!(said.contains("another redrive of `orders.dlq` is running"), "{said}");
    let out = first.wait_with_output().unwrap();
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", support::text(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(topology_report(&report, "orders")["moved"], json!(60), "{report:#}");
    assert_eq!(support::count(&connection, "orders").await, Some(60));
}

/// A user who may not declare the lock queue: the run, a dry run too, is refused before it takes
/// anything (exit 2), saying which permission it needs; every dead letter stays.
async fn a_lock_the_user_may_not_take_is_named(broker: Broker) {
    let vhost = Vhost::new(broker, "redrive-lock-permission").await;
    let spec = vhost.spec("orders.toml", &topology("orders", "quorum"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    reject_into(&connection, "orders", &ids("m", 5), "orders.dlq", 5).await;
    let user = support::unique("hopper-test-redriver");
    support::create_user(broker, &user, "secret", "monitoring").await;
    support::set_permissions(broker, &vhost.name, &user, "^(?!hopper\\.redrive-lock\\.).*", ".*", ".*").await;
    let amqp = broker.amqp().replace("guest:guest", &format!("{user}:secret"));
    let env = [("HOPPER_AMQP_URL", amqp.as_str()), ("HOPPER_MANAGEMENT_URL", broker.management())];
    let dry = support::hopper_env(&["redrive", &spec, "--dry-run"], &env);
    let real = support::hopper_env(&["redrive", &spec], &env);
    support::delete_user(broker, &user).await;
    for out in [dry, real] {
        let said = support::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{said}");
        assert!(
            said.contains("grant the configure permission") && said.contains("hopper.redrive-lock.orders.dlq"),
            "{said}"
        );
    }
    support::wait_for_count(&connection, "orders.dlq", 5, Duration::from_secs(30)).await;
    assert_eq!(support::count(&connection, "orders").await, Some(0));
}

/// The main queue deleted while a redrive runs: the copies come back (`mandatory`), the run
/// stops (exit 3), and every dead letter it looked at is counted once, as moved, given back or
/// stayed; the dead-letter queue holds exactly those not moved.
async fn counts_add_up_when_the_main_queue_goes_mid_run(broker: Broker) {
    let vhost = Vhost::new(broker, "redrive-counts").await;
    let spec = vhost.spec("orders.toml", &topology("orders", "classic"));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.hopper(&["apply", &spec]).status.code(), Some(0));
    let connection = vhost.connect().await;
    reject_into(&connection, "orders", &ids("c", 150), "orders.dlq", 150).await;
    // 150 at 50/s: three seconds, the queue deleted once a few have moved (not after a fixed
    // second: on a loaded machine the run may not have started by then).
    let child = spawned::hopper_on(broker, &["--format", "json", "redrive", &spec, "--rate", "50/s"]);
    support::wait_for_count_at_least(&connection, "orders", 5, Duration::from_secs(30)).await;
    let channel = connection.create_channel().await.unwrap();
    channel.queue_delete("orders".into(), Default::default()).await.unwrap();
    let out = child.wait_with_output().unwrap();
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", support::text(&out.stderr)));
    assert_eq!(out.status.code(), Some(3), "{report:#}");
    let t = topology_report(&report, "orders");
    eprintln!("{t:#}");
    let n = |field: &str| t[field].as_u64().unwrap_or_else(|| panic!("{field} in {t:#}"));
    assert!(t["stopped"].as_str().unwrap().contains("no queue `orders`"), "{t:#}");
    assert!(n("moved") > 0 && n("moved") < 150, "{t:#}");
    assert!(n("given_back") > 0, "{t:#}");
    assert_eq!(n("scanned"), n("moved") + n("given_back") + n("stayed"), "{t:#}");
    support::wait_for_count(&connection, "orders.dlq", (150 - n("moved")) as u32, Duration::from_secs(10)).await;
    assert_eq!(support::count(&connection, "orders.dlq").await, Some((150 - n("moved")) as u32));
}

on_every_broker!(
    counts_add_up_when_the_main_queue_goes_mid_run,
    client_published_x_death_by_release,
    two_thousand_dead_letters_killed_twice,
    filters_classic = filters_move_what_they_select("classic"),
    filters_quorum = filters_move_what_they_select("quorum"),
    many_stay_classic = many_that_stay_keep_their_order("classic"),
    many_stay_quorum = many_that_stay_keep_their_order("quorum"),
    fails_again_classic = a_dead_letter_that_fails_again_is_not_redriven_twice("classic"),
    fails_again_quorum = a_dead_letter_that_fails_again_is_not_redriven_twice("quorum"),
    refused_before_anything_moves,
    a_give_back_counts_as_a_delivery_before_4_3,
    large_dead_letters_move_within_the_bound,
    mixed_sizes_and_filtered_runs_stay_within_the_bound,
    a_second_run_is_refused_while_one_runs,
    a_lock_the_user_may_not_take_is_named,
    a_renamed_dead_letter_queue_is_redriven_by_name,
);

/// After its dead-letter queue was renamed, the old one still holds what died before:
/// `--from-queue` redrives it into the topology's main queue. A queue the spec still uses
/// (a wait queue) is refused, as is one queue for two topologies.
async fn a_renamed_dead_letter_queue_is_redriven_by_name(broker: Broker) {
    let vhost = Vhost::new(broker, "redrive-from-queue").await;
    let spec =
        vhost.spec("orders.toml", &format!("{}dead_letter_queue = \"orders.parked\"\n", topology("orders", "classic")));
    let spec = spec.to_str().unwrap().to_string();
    assert_eq!(vhost.json(&["apply", &spec]).0, Some(0));
    let connection = vhost.connect().await;
    reject_into(&connection, "orders", &ids("old", 3), "orders.parked", 3).await;
    // The main queue's dead-letter routing key changes with the name: a migration.
    vhost.spec("orders.toml", &topology("orders", "classic"));
    assert_eq!(vhost.json(&["apply", "--migrate", &spec]).0, Some(0));
    let (code, report) = vhost.json(&["redrive", &spec]);
    assert_eq!((code, &topology_report(&report, "orders")["moved"]), (Some(0), &json!(0)), "the new one is empty");

    let (code, report) = vhost.json(&["redrive", &spec, "--from-queue", "orders.parked"]);
    assert_eq!(code, Some(0), "{report:#}");
    let t = topology_report(&report, "orders");
    assert_eq!((&t["dead_letter_queue"], &t["moved"]), (&json!("orders.parked"), &json!(3)), "{t:#}");
    assert_eq!(support::count(&connection, "orders.parked").await, Some(0));
    assert_eq!(ids_of(&look(&connection, "orders", 3).await), ids("old", 3));

    let out = vhost.hopper(&["redrive", &spec, "--from-queue", "orders.wait-1h"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(support::text(&out.stderr).contains("uses that queue"), "{}", support::text(&out.stderr));
    let two = vhost.spec("two.toml", &format!("{}{}", topology("orders", "classic"), topology("audit", "classic")));
    let out = vhost.hopper(&["redrive", two.to_str().unwrap(), "--from-queue", "orders.parked"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(support::text(&out.stderr).contains("name one with --topology"), "{}", support::text(&out.stderr));
}

/// What giving a message back costs on a quorum queue, by release (the reason a redrive cancels
/// its consumer and then gives back with one `basic.nack`, never by closing its channel): up to
/// 4.2 every give-back counts one delivery (`x-delivery-count`); on 4.3 a nack counts none and a
/// closed channel one.
async fn a_give_back_counts_as_a_delivery_before_4_3(broker: Broker) {
    let vhost = Vhost::new(broker, "redrive-giveback").await;
    let connection = vhost.connect().await;
    let channel = connection.create_channel().await.unwrap();
    support::queue(&channel, "q", support::args(&[("x-queue-type", Arg::Str("quorum"))])).await;
    support::publish(&connection, "", "q", &ids("m", 1)).await;
    let count = |p: &BasicProperties| int_header(p, "x-delivery-count").unwrap_or(0);
    let nack = BasicNackOptions { multiple: true, requeue: true };
    let mut seen = Vec::new();
    // basic.get, then a nack.
    let c = connection.create_channel().await.unwrap();
    let m = get_one(&c, "q", false).await;
    seen.push(count(&m.delivery.properties));
    c.basic_nack(m.delivery.delivery_tag, nack).await.unwrap();
    c.close(200, "".into()).await.unwrap();
    // A consumer, cancelled, then a nack.
    let c = connection.create_channel().await.unwrap();
    let mut consumer =
        c.basic_consume("q".into(), "x".into(), BasicConsumeOptions::default(), FieldTable::default()).await.unwrap();
    let d = consumer.next().await.unwrap().unwrap();
    seen.push(count(&d.properties));
    c.basic_cancel(consumer.tag(), Default::default()).await.unwrap();
    c.basic_nack(d.delivery_tag, nack).await.unwrap();
    c.close(200, "".into()).await.unwrap();
    // basic.get, then the channel closed.
    let c = connection.create_channel().await.unwrap();
    let m = get_one(&c, "q", false).await;
    seen.push(count(&m.delivery.properties));
    c.close(200, "".into()).await.unwrap();
    let m = get_one(&channel, "q", true).await;
    seen.push(count(&m.delivery.properties));
    let expected = if broker.version() >= (4, 3) { vec![0, 0, 0, 1] } else { vec![0, 1, 2, 3] };
    assert_eq!(seen, expected, "{broker:?}: x-delivery-count before each give-back, and at the end");
}
