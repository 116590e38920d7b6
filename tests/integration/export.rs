//! `hopper export` produces definitions that, imported by the broker itself, give exactly the
//! topology `apply` would: apply then finds nothing to do.

use serde_json::json;

use crate::support::{self, Broker, Vhost, on_every_broker};

async fn import_matches_apply(broker: Broker) {
    let vhost = Vhost::new(broker, "export").await;
    let orders = vhost.spec(
        "orders.toml",
        "[topology.orders]\nexchange_type = \"topic\"\ndelays = [\"5s\", \"1m\"]\nmax_attempts = 4\n",
    );
    let payments = vhost.spec(
        "payments.toml",
        "[topology.payments]\nstrategy = \"chain\"\nmax_attempts = 3\nbackoff = { initial = \"1s\" }\nqueue_type = \"classic\"\n",
    );
    let out = vhost.hopper(&["export", orders.to_str().unwrap(), payments.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let definitions: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    support::import_definitions(broker, &definitions).await;

    // The import is asynchronous: wait for its last object.
    support::wait_for_exists(&vhost.connect().await, "payments").await;
    let (code, report) = vhost.json(&["apply", "--dry-run", orders.to_str().unwrap(), payments.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert_eq!((&report["dry_run"], &report["applied"]), (&json!(true), &json!(false)));
    assert_eq!(support::actions(&report), [("in_sync".to_string(), 29)].into(), "{report:#}");
}

on_every_broker!(import_matches_apply);
