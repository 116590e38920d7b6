//! `hopper export` produces definitions that, imported by the broker itself, give exactly the
//! topology `apply` would: apply then finds nothing to do.

use crate::support::{self, Broker, RABBITMQ_3, RABBITMQ_4, Vhost};

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
    hopper::broker::http::client(&support::endpoint(broker)).import_definitions(definitions).await.unwrap();

    // The import is asynchronous: wait for its last object.
    support::wait_for_exists(&vhost.connect().await, "payments").await;
    let out = vhost.hopper(&["apply", "--dry-run", orders.to_str().unwrap(), payments.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = support::text(&out.stdout);
    assert!(stdout.contains("Dry run: nothing was changed. Plan: 26 in sync."), "{stdout}");
}

#[tokio::test]
async fn import_matches_apply_on_rabbitmq_3() {
    import_matches_apply(RABBITMQ_3).await;
}

#[tokio::test]
async fn import_matches_apply_on_rabbitmq_4() {
    import_matches_apply(RABBITMQ_4).await;
}
