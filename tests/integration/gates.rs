//! CI gates on real brokers: `--detailed-exitcode` (0 nothing to do, 2 changes pending, 3 a
//! conflict, 1 an error) and saved plans (`apply --dry-run --out`, `apply --plan`), which are
//! carried out exactly or not at all: any change of the vhost since the plan was made refuses it
//! (exit 4) with the broker left as it was.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::support::{self, Arg::*, Broker, Vhost, args, on_every_broker, text};

const V1: &str = "[topology.orders]\ndelays = [\"1s\", \"5s\"]\nmax_attempts = 3\n";
/// V1 with its second delay changed: a wait queue to create, a binding to move.
const V2: &str = "[topology.orders]\ndelays = [\"1s\", \"10s\"]\nmax_attempts = 3\n";

/// Everything in the vhost that a change could touch: exchanges, queues with their arguments,
/// bindings, as the management API lists them.
async fn state(vhost: &Vhost) -> String {
    let live = hopper::broker::http::read(&vhost.broker.endpoint(), &vhost.name, hopper::broker::http::Stats::Counted)
        .await
        .expect("read the vhost");
    let exchanges: BTreeSet<String> = live.exchanges.keys().map(|e| e.to_string()).collect();
    let queues: Vec<String> = live.queues.iter().map(|(n, q)| format!("{n} {:?}", q.arguments)).collect();
    format!("{exchanges:?}\n{queues:#?}\n{:#?}", live.bindings)
}

fn code(out: &std::process::Output) -> Option<i32> {
    out.status.code()
}

/// The plan file as JSON.
fn plan_json(path: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("the plan was written")).expect("the plan is JSON")
}

/// The steps of an apply report that change the broker.
fn changes(report: &Value) -> Vec<Value> {
    support::steps(report)
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| ["create", "ensure", "unbind", "delete", "record"].contains(&s["action"].as_str().unwrap()))
        .cloned()
        .collect()
}

/// terraform's codes with --detailed-exitcode, hopper's own without; a dry run changes nothing.
async fn ci_gate_exit_codes(broker: Broker) {
    let vhost = Vhost::new(broker, "gate-codes").await;
    let spec = vhost.spec("orders.toml", V1);
    let spec = spec.to_str().unwrap();
    let empty = state(&vhost).await;

    assert_eq!(code(&vhost.hopper(&["apply", "--dry-run", "--detailed-exitcode", spec])), Some(2), "changes pending");
    assert_eq!(code(&vhost.hopper(&["apply", "--dry-run", spec])), Some(0), "documented: a dry run exits 0");
    assert_eq!(code(&vhost.hopper(&["diff", "--detailed-exitcode", spec])), Some(2), "drift");
    assert_eq!(code(&vhost.hopper(&["diff", spec])), Some(1), "documented: drift is 1");
    assert_eq!(state(&vhost).await, empty, "dry runs and diffs changed nothing");

    assert_eq!(code(&vhost.hopper(&["apply", spec])), Some(0));
    assert_eq!(code(&vhost.hopper(&["apply", "--dry-run", "--detailed-exitcode", spec])), Some(0), "in sync");
    let (exit, diff) = vhost.json(&["diff", "--detailed-exitcode", spec]);
    assert_eq!((exit, &diff["in_sync"], &diff["schema_version"]), (Some(0), &Value::Bool(true), &Value::from(1)));

    // A conflict: the main queue is quorum on the broker, classic in the spec.
    let conflicting = vhost.spec("classic.toml", &format!("{V1}queue_type = \"classic\"\n"));
    let conflicting = conflicting.to_str().unwrap();
    let applied = state(&vhost).await;
    assert_eq!(code(&vhost.hopper(&["apply", "--dry-run", "--detailed-exitcode", conflicting])), Some(3));
    assert_eq!(code(&vhost.hopper(&["diff", "--detailed-exitcode", conflicting])), Some(2), "diff: drift");
    assert_eq!(code(&vhost.hopper(&["apply", conflicting])), Some(3));
    // A plan that could not be applied is not written.
    let plan = vhost.dir.join("plan.json");
    let out = vhost.hopper(&["apply", "--dry-run", "--out", plan.to_str().unwrap(), conflicting]);
    assert_eq!(code(&out), Some(3));
    assert!(text(&out.stderr).contains("no plan written"), "{}", text(&out.stderr));
    assert!(!plan.exists());
    assert_eq!(state(&vhost).await, applied);

    // inspect's document carries its version too.
    let (_, inspect) = vhost.json(&["inspect", "--vhost", &vhost.name]);
    assert_eq!(inspect["schema_version"], 1);
    assert_eq!(inspect["vhosts"][0]["vhost"], vhost.name.as_str());
}

/// The plan written by a dry run is carried out exactly: its changes, from the spec as it was
/// when planned (an edit of the file since does not count), and once.
async fn a_saved_plan_is_applied_exactly(broker: Broker) {
    let vhost = Vhost::new(broker, "gate-plan").await;
    let spec = vhost.spec("orders.toml", V1);
    let plan = vhost.dir.join("plan.json");
    let empty = state(&vhost).await;
    let (exit, dry_run) = vhost.json(&[
        "apply",
        "--dry-run",
        "--detailed-exitcode",
        "--out",
        plan.to_str().unwrap(),
        spec.to_str().unwrap(),
    ]);
    assert_eq!(exit, Some(2));
    assert_eq!(
        (&dry_run["schema_version"], &dry_run["dry_run"], &dry_run["applied"]),
        (&Value::from(1), &Value::Bool(true), &Value::Bool(false))
    );
    assert_eq!(state(&vhost).await, empty, "--out changes nothing");
    let saved = plan_json(&plan);
    assert_eq!((&saved["schema_version"], &saved["kind"]), (&Value::from(1), &Value::from("hopper-plan")));
    let planned = saved["vhosts"][0]["changes"].as_array().unwrap().clone();
    assert_eq!(planned, changes(&dry_run), "the file holds the changes the dry run showed");
    assert!(saved["vhosts"][0]["fingerprint"]["combined"].as_str().unwrap().starts_with("sha256:"));
    // Without --out, JSON output still carries it (table output, without -v, does not make it).
    let (_, shown) = vhost.json(&["apply", "--dry-run", spec.to_str().unwrap()]);
    assert_eq!(shown["vhosts"][0]["fingerprint"], saved["vhosts"][0]["fingerprint"], "the same fingerprint, shown");

    // The file is edited after planning: the plan is what was reviewed, not the file.
    std::fs::write(&spec, format!("vhost = \"{}\"\n{V1}\n[topology.later]\ndelays = [\"1s\"]\n", vhost.name)).unwrap();
    let (exit, applied) = vhost.json(&["apply", "--plan", plan.to_str().unwrap()]);
    assert_eq!(exit, Some(0), "{applied:#}");
    assert_eq!(applied["applied"], true);
    assert_eq!(changes(&applied), planned, "exactly the planned changes");
    let after = state(&vhost).await;
    assert!(after.contains("orders.wait-5s") && !after.contains("later"), "{after}");
    let original = vhost.spec("original.toml", V1);
    assert_eq!(code(&vhost.hopper(&["diff", "--detailed-exitcode", original.to_str().unwrap()])), Some(0));

    // Once: the plan itself changed the vhost.
    let again = vhost.hopper(&["apply", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&again), Some(4));
    assert_eq!(state(&vhost).await, after);
}

/// The broker changes between plan and apply, by a declaration and then by a deletion: each
/// time the plan is refused (exit 4) and the broker is left exactly as it was.
async fn a_saved_plan_is_refused_after_drift(broker: Broker) {
    let vhost = Vhost::new(broker, "gate-drift").await;
    let v1 = vhost.spec("v1.toml", V1);
    assert_eq!(code(&vhost.hopper(&["apply", v1.to_str().unwrap()])), Some(0));
    let v2 = vhost.spec("v2.toml", V2);
    let plan = vhost.dir.join("plan.json");
    let make_plan = || {
        let out = vhost.hopper(&[
            "apply",
            "--dry-run",
            "--detailed-exitcode",
            "--out",
            plan.to_str().unwrap(),
            v2.to_str().unwrap(),
        ]);
        assert_eq!(code(&out), Some(2));
    };
    let connection = vhost.connect().await;
    let channel = connection.create_channel().await.unwrap();

    // Another application declares a queue in the vhost.
    make_plan();
    support::queue(&channel, "audit", args(&[("x-queue-type", Str("classic"))])).await;
    let drifted = state(&vhost).await;
    let out = vhost.hopper(&["apply", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&out), Some(4), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains("no longer holds; nothing was changed")
            && said.contains("the broker's objects changed since the plan was made: queue `audit` appeared\n"),
        "the refusal names what moved, and only that: {said}"
    );
    assert_eq!(state(&vhost).await, drifted, "nothing was changed");
    assert!(!drifted.contains("orders.wait-10s"));

    // Planned again, then someone removes a binding by hand.
    make_plan();
    channel.queue_unbind("orders.wait-1s".into(), "orders.retry".into(), "1".into(), Default::default()).await.unwrap();
    let drifted = state(&vhost).await;
    let out = vhost.hopper(&["apply", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&out), Some(4));
    let said = text(&out.stderr);
    assert!(said.contains("binding `orders.retry -> orders.wait-1s (\"1\")` was deleted\n"), "{said}");
    assert_eq!(state(&vhost).await, drifted, "nothing was changed");

    // A fresh plan goes through, once: applied again, it says so.
    make_plan();
    assert_eq!(code(&vhost.hopper(&["apply", "--plan", plan.to_str().unwrap()])), Some(0));
    let applied = state(&vhost).await;
    let again = vhost.hopper(&["apply", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&again), Some(4));
    let said = text(&again.stderr);
    assert!(said.contains("the plan was already applied: the broker holds everything it makes"), "{said}");
    assert!(!said.contains("besides"), "only the plan's own changes moved: {said}");
    assert_eq!(state(&vhost).await, applied);
    // Applied, and then something else moved too: both are said.
    support::queue(&channel, "audit-2", args(&[("x-queue-type", Str("classic"))])).await;
    let said = text(&vhost.hopper(&["apply", "--plan", plan.to_str().unwrap()]).stderr);
    assert!(
        said.contains("the plan was already applied")
            && said.contains("besides, since it was made: queue `audit-2` appeared"),
        "{said}"
    );
    assert_eq!(code(&vhost.hopper(&["diff", v2.to_str().unwrap()])), Some(1), "the old wait queue is left over");
    assert_eq!(code(&vhost.hopper(&["apply", "--dry-run", "--detailed-exitcode", v2.to_str().unwrap()])), Some(0));
}

/// Messages published between plan and apply change counts, not objects: the plan holds.
async fn traffic_does_not_make_a_plan_stale(broker: Broker) {
    let vhost = Vhost::new(broker, "gate-traffic").await;
    let v1 = vhost.spec("v1.toml", V1);
    assert_eq!(code(&vhost.hopper(&["apply", v1.to_str().unwrap()])), Some(0));
    let v2 = vhost.spec("v2.toml", V2);
    let plan = vhost.dir.join("plan.json");
    let out = vhost.hopper(&["apply", "--dry-run", "--out", plan.to_str().unwrap(), v2.to_str().unwrap()]);
    assert_eq!(code(&out), Some(0));
    let connection = vhost.connect().await;
    let ids: Vec<String> = (0..3).map(|i| format!("m{i}")).collect();
    support::publish(&connection, "orders", "orders", &ids).await;
    assert_eq!(support::count(&connection, "orders").await, Some(3));
    let out = vhost.hopper(&["apply", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&out), Some(0), "{}", text(&out.stderr));
    assert_eq!(support::count(&connection, "orders").await, Some(3), "no message touched");
    assert!(support::count(&connection, "orders.wait-10s").await.is_some(), "the plan was carried out");
}

/// A plan file that is not one, is cut short, is of another schema version, or was edited, is
/// refused before anything is changed.
async fn a_bad_plan_file_is_refused(broker: Broker) {
    let vhost = Vhost::new(broker, "gate-bad-plan").await;
    let spec = vhost.spec("orders.toml", V1);
    let plan = vhost.dir.join("plan.json");
    let out = vhost.hopper(&["apply", "--dry-run", "--out", plan.to_str().unwrap(), spec.to_str().unwrap()]);
    assert_eq!(code(&out), Some(0));
    let text_of_plan = std::fs::read_to_string(&plan).unwrap();
    let saved = plan_json(&plan);
    let empty = state(&vhost).await;
    let edited = |f: &dyn Fn(&mut Value)| {
        let mut v = saved.clone();
        f(&mut v);
        serde_json::to_string_pretty(&v).unwrap()
    };
    let bad = vhost.dir.join("bad.json");
    for (content, exit, says) in [
        (text_of_plan[..text_of_plan.len() / 2].to_string(), 2, "is not JSON"),
        ("{\"vhosts\": []}".to_string(), 2, "is not a hopper plan file"),
        (edited(&|v| v["schema_version"] = Value::from(2)), 2, "is a plan of schema version 2, and this hopper"),
        (edited(&|v| v["schema_version"] = Value::from("1")), 2, "`schema_version` is missing or not a number"),
        (edited(&|v| v.as_object_mut().unwrap().remove("spec").map(drop).unwrap()), 2, "missing field `spec`"),
        (
            edited(&|v| v["spec"][0]["text"] = Value::from("[topology.orders\n")),
            4,
            "was edited after the plan was made",
        ),
        (
            edited(&|v| {
                v["spec"][0]["text"] = Value::from("[topology.orders\n");
                v.as_object_mut().unwrap().remove("spec_digest").unwrap();
            }),
            2,
            "invalid TOML",
        ),
        // Edited to do less than hopper plans: refused, it is not what hopper would do.
        (edited(&|v| drop(v["vhosts"][0]["changes"].as_array_mut().unwrap().pop())), 4, "would now make other changes"),
        // Its spec edited: said as that, before the broker is read.
        (
            edited(&|v| {
                let text = v["spec"][0]["text"].as_str().unwrap().replace("\"5s\"", "\"6s\"");
                v["spec"][0]["text"] = Value::from(text);
            }),
            4,
            "was edited after the plan was made",
        ),
        // A plan without the spec's digest (an older hopper's) whose spec compiles otherwise now.
        (
            edited(&|v| {
                let text = v["spec"][0]["text"].as_str().unwrap().replace("\"5s\"", "\"6s\"");
                v["spec"][0]["text"] = Value::from(text);
                v.as_object_mut().unwrap().remove("spec_digest").unwrap();
            }),
            4,
            "compiles the plan's spec to other objects than the hopper that made it",
        ),
    ] {
        std::fs::write(&bad, &content).unwrap();
        let out = vhost.hopper(&["apply", "--plan", bad.to_str().unwrap()]);
        assert_eq!(code(&out), Some(exit), "{says}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(says), "{says:?} missing from {}", text(&out.stderr));
        assert_eq!(state(&vhost).await, empty, "{says}: nothing was changed");
    }
    let missing = vhost.hopper(&["apply", "--plan", vhost.dir.join("absent.json").to_str().unwrap()]);
    assert_eq!(code(&missing), Some(2));
    // --plan takes no spec, no --dry-run, no --prune: the plan says all of it.
    for extra in [&[spec.to_str().unwrap()][..], &["--dry-run"], &["--prune"]] {
        let out = vhost.hopper(&[&["apply", "--plan", plan.to_str().unwrap()][..], extra].concat());
        assert_eq!(code(&out), Some(2), "{extra:?}");
    }
    assert_eq!(state(&vhost).await, empty);
}

/// -v says which cluster, endpoints and vhost hopper reads, and never the password.
async fn verbose_names_the_broker_not_the_password(broker: Broker) {
    let vhost = Vhost::new(broker, "gate-verbose").await;
    let spec = vhost.spec("orders.toml", V1);
    let out = vhost.hopper(&["-v", "apply", "--dry-run", spec.to_str().unwrap()]);
    assert_eq!(code(&out), Some(0));
    let said = text(&out.stderr);
    let endpoint = broker.endpoint();
    for expected in [
        "hopper: broker: cluster `".to_string(),
        format!("AMQP {}", endpoint.describe()),
        format!("management API {}", broker.management()),
        format!("vhost `{}`: reading it through the management API", vhost.name),
        "fingerprint sha256:".to_string(),
    ] {
        assert!(said.contains(&expected), "{expected:?} missing from:\n{said}");
    }
    assert!(!said.contains(&format!(":{}@", endpoint.password.expose())), "a password in:\n{said}");
    let quiet = vhost.hopper(&["-q", "apply", "--dry-run", spec.to_str().unwrap()]);
    assert_eq!(code(&quiet), Some(0));
    assert!(quiet.stdout.is_empty() && quiet.stderr.is_empty(), "{}", text(&quiet.stdout));
}

on_every_broker!(
    ci_gate_exit_codes,
    a_saved_plan_is_applied_exactly,
    a_saved_plan_is_refused_after_drift,
    traffic_does_not_make_a_plan_stale,
    a_bad_plan_file_is_refused,
    verbose_names_the_broker_not_the_password,
);

/// A plan made against one broker is refused by another, even with the same vhost and objects.
#[tokio::test]
async fn a_plan_for_one_broker_is_refused_by_another() {
    let name = support::unique("hopper-test-gate-other");
    let (first, second) =
        (Vhost::named(Broker::RabbitMq4_0, &name).await, Vhost::named(Broker::RabbitMq4_3, &name).await);
    let spec = first.spec("orders.toml", V1);
    let plan = first.dir.join("plan.json");
    let out = first.hopper(&["apply", "--dry-run", "--out", plan.to_str().unwrap(), spec.to_str().unwrap()]);
    assert_eq!(code(&out), Some(0));
    let before = state(&second).await;
    let out = second.hopper(&["apply", "--plan", plan.to_str().unwrap()]);
    assert_eq!(code(&out), Some(4));
    let said = text(&out.stderr);
    assert!(
        said.contains("another cluster or RabbitMQ release") && said.contains("the plan was made against cluster"),
        "{said}"
    );
    assert_eq!(state(&second).await, before);
}
