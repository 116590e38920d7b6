//! A RabbitMQ consumer that follows hopper's consumer contract, with lapin.
//!
//!     hopper contract topologies/orders.toml --format json > contract.json
//!     cargo run --example retry_consumer -- contract.json orders
//!
//! The contract says, for each delivery number, what to do when handling fails: publish a copy
//! to the retry exchange (republish) or reject (chain, and every last attempt). This file knows
//! nothing about a particular topology; the integration tests run it against a real broker.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_lite::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
    ConfirmSelectOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use serde::Deserialize;

/// `hopper contract --format json`: one contract per topology.
#[derive(Debug, Clone, Deserialize)]
pub struct Contracts {
    /// The version of the JSON; this consumer reads version 1.
    pub schema_version: u32,
    pub contracts: Vec<Contract>,
}

/// The parts of a topology's contract a consumer needs.
#[derive(Debug, Clone, Deserialize)]
pub struct Contract {
    pub topology: String,
    pub max_attempts: u32,
    pub attempt_from: AttemptFrom,
    pub consume: Vec<ConsumeQueue>,
    pub attempts: Vec<Rule>,
    pub poison: Action,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum AttemptFrom {
    Header {
        header: String,
    },
    Queue,
    /// The broker's count of failed deliveries (native retry): the attempt is one more.
    DeliveryCount {
        header: String,
    },
}

#[derive(Debug, Clone, Deserialize)]
pub struct ConsumeQueue {
    pub queue: String,
    pub attempt: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Rule {
    pub attempt: u32,
    pub on_failure: Action,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    Publish {
        exchange: String,
        routing_key: String,
        /// With jitter: one is picked at random for each copy (see `pick`).
        #[serde(default)]
        routing_keys: Vec<String>,
        headers: BTreeMap<String, i64>,
    },
    /// With requeue (native retry) the broker redelivers it after the delay; without, it is
    /// dead-lettered. Always basic.reject: RabbitMQ 4.3 does not count a basic.nack.
    Reject { requeue: bool },
}

const DEAD_LETTER: Action = Action::Reject { requeue: false };

/// What the application's handler decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// Worth retrying later.
    Failed,
    /// Will never succeed: straight to the dead-letter queue.
    Poison,
}

pub type Handler = Arc<dyn Fn(&Delivery, u32) -> Outcome + Send + Sync>;

/// Consumes every queue of the contract until the connection closes.
pub async fn consume(connection: &Connection, contract: &Contract, handler: Handler) -> lapin::Result<()> {
    // Copies are published on their own channel, in confirm mode.
    let publisher = connection.create_channel().await?;
    publisher.confirm_select(ConfirmSelectOptions::default()).await?;
    let mut tasks = Vec::new();
    for q in &contract.consume {
        let channel = connection.create_channel().await?;
        channel.basic_qos(10, BasicQosOptions::default()).await?;
        let mut deliveries = channel
            .basic_consume(q.queue.as_str().into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
            .await?;
        let (contract, handler, publisher, queue) = (contract.clone(), handler.clone(), publisher.clone(), q.clone());
        tasks.push(tokio::spawn(async move {
            while let Some(Ok(delivery)) = deliveries.next().await {
                // Out of range (a producer counting from 0, a copy made before max_attempts was
                // lowered) counts as the nearest attempt that exists.
                let attempt = attempt_of(&contract, &queue, &delivery).clamp(1, contract.max_attempts);
                let action = match handler(&delivery, attempt) {
                    Outcome::Done => None,
                    // A failure is never acked: without a rule it is rejected to the dead-letter queue.
                    Outcome::Failed => Some(
                        contract.attempts.iter().find(|r| r.attempt == attempt).map_or(&DEAD_LETTER, |r| &r.on_failure),
                    ),
                    Outcome::Poison => Some(&contract.poison),
                };
                let settled = match action {
                    None => delivery.ack(BasicAckOptions::default()).await,
                    Some(Action::Reject { requeue }) => delivery.reject(BasicRejectOptions { requeue: *requeue }).await,
                    Some(Action::Publish { exchange, routing_key, routing_keys, headers }) => {
                        let key = pick(routing_keys).unwrap_or(routing_key);
                        republish(&publisher, &delivery, exchange, key, headers).await
                    }
                };
                if settled.is_err() {
                    break;
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    Ok(())
}

/// One of a jittered hop's routing keys, uniformly at random: the standard library's hasher is
/// seeded afresh for every `RandomState`, which is randomness enough to spread retries, without
/// a dependency. `None` without jitter.
fn pick(keys: &[String]) -> Option<&String> {
    use std::hash::BuildHasher;
    if keys.is_empty() {
        return None;
    }
    let random = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    keys.get((random % keys.len() as u64) as usize)
}

/// The delivery number: from the queue (chain), the attempt header (republish), or the broker's
/// count of failed deliveries (native).
fn attempt_of(contract: &Contract, queue: &ConsumeQueue, delivery: &Delivery) -> u32 {
    let header = |name: &str| {
        delivery.properties.headers().as_ref().and_then(|h| h.inner().get(name).cloned()).and_then(|v| match v {
            AMQPValue::ShortShortInt(n) => Some(i64::from(n)),
            AMQPValue::ShortShortUInt(n) => Some(i64::from(n)),
            AMQPValue::ShortInt(n) => Some(i64::from(n)),
            AMQPValue::ShortUInt(n) => Some(i64::from(n)),
            AMQPValue::LongInt(n) => Some(i64::from(n)),
            AMQPValue::LongUInt(n) => Some(i64::from(n)),
            AMQPValue::LongLongInt(n) => Some(n),
            _ => None,
        })
    };
    let attempt = match &contract.attempt_from {
        AttemptFrom::Queue => return queue.attempt.unwrap_or(1),
        AttemptFrom::Header { header: name } => header(name).unwrap_or(1),
        AttemptFrom::DeliveryCount { header: name } => header(name).map_or(1, |failed| failed + 1),
    };
    attempt.clamp(0, i64::from(u32::MAX)) as u32
}

/// Publishes a copy (same body and properties but `expiration` and `user_id`, the contract's
/// headers set),
/// mandatory and confirmed; acks the original only once the copy is safely routed. Otherwise the
/// original goes back to its queue, so nothing is lost (at worst a duplicate).
async fn republish(
    publisher: &Channel,
    delivery: &Delivery,
    exchange: &str,
    routing_key: &str,
    headers: &BTreeMap<String, i64>,
) -> lapin::Result<bool> {
    let mut table = delivery.properties.headers().clone().unwrap_or_default();
    for (k, v) in headers {
        table.insert(ShortString::from(k.as_str()), AMQPValue::LongLongInt(*v));
    }
    let properties = copy_properties(&delivery.properties).with_headers(table);
    let options = BasicPublishOptions { mandatory: true, ..Default::default() };
    let confirm = publisher
        .basic_publish(exchange.into(), routing_key.into(), options, &delivery.data, properties)
        .await?
        .await?;
    match confirm {
        Confirmation::Ack(None) => delivery.ack(BasicAckOptions::default()).await,
        _ => delivery.nack(BasicNackOptions { requeue: true, ..Default::default() }).await,
    }
}

/// Every property of the original except `expiration` (a copy must wait only in its wait queue)
/// and `user_id` (RabbitMQ refuses a publish whose user_id is not the connection's user).
/// Persistent whatever the original said: a retry must survive a broker restart.
fn copy_properties(p: &BasicProperties) -> BasicProperties {
    let mut copy = BasicProperties::default().with_delivery_mode(2);
    macro_rules! keep {
        ($($get:ident => $set:ident),* $(,)?) => {$(
            if let Some(v) = p.$get() {
                copy = copy.$set(v.clone());
            }
        )*};
    }
    keep!(
        content_type => with_content_type,
        content_encoding => with_content_encoding,
        priority => with_priority,
        correlation_id => with_correlation_id,
        reply_to => with_reply_to,
        message_id => with_message_id,
        timestamp => with_timestamp,
        kind => with_type,
        app_id => with_app_id,
        cluster_id => with_cluster_id,
    );
    copy
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, topology] = args.as_slice() else {
        return Err("usage: retry_consumer CONTRACT.json TOPOLOGY".into());
    };
    let document: Contracts = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    if document.schema_version != 1 {
        return Err(format!(
            "{path} is a contract of schema version {}; this consumer reads 1",
            document.schema_version
        )
        .into());
    }
    let contract =
        document.contracts.into_iter().find(|c| &c.topology == topology).ok_or("no such topology in the contract")?;
    let url = std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@localhost:5672/%2f".into());
    let connection = Connection::connect(&url, ConnectionProperties::default()).await?;
    // Replace with your own processing: here, a body of "fail" fails every time.
    let handler: Handler = Arc::new(|delivery, attempt| {
        println!("attempt {attempt}: {}", String::from_utf8_lossy(&delivery.data));
        if delivery.data == b"fail" { Outcome::Failed } else { Outcome::Done }
    });
    consume(&connection, &contract, handler).await?;
    Ok(())
}
