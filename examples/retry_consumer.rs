//! A RabbitMQ consumer that follows hopper's consumer contract (lapin) and handles each business
//! key once (PostgreSQL, tokio-postgres).
//!
//!     hopper contract topologies/orders.toml --format json > contract.json
//!     AMQP_URL=amqp://guest:guest@localhost:5672/%2f \
//!     DATABASE_URL='host=127.0.0.1 user=postgres dbname=test' \
//!     cargo run --example retry_consumer -- contract.json orders
//!
//! The contract says, for each delivery number, what to do when handling fails (publish a copy
//! to the retry exchange, or reject), and which key stays the same on every copy of a message.
//! RabbitMQ delivers at least once: the same message can arrive again (the contract lists when).
//! This consumer turns that into one business effect per key:
//!
//! - the key is recorded in the same transaction as the handler's effect: both, or neither;
//! - a message is acked only after that transaction commits; if the consumer dies in between,
//!   the broker delivers it again, the key is found, and it is acked without being handled;
//! - a failure rolls back, so the key is not recorded and the next attempt handles it afresh.
//!
//! When the broker, the connection or the database goes away, it connects again after an
//! exponential backoff with jitter and resumes consuming. It declares nothing: hopper owns the
//! topology, and a missing queue is an error to wait out, not something to create with other
//! arguments. It never acks a message it has not finished: a message in flight when the
//! connection goes is given back by the broker. This file knows nothing about a particular
//! topology; the integration tests run it against real brokers and a real database.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
    ConfirmSelectOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_postgres::{Client, NoTls, Transaction};

/// The keys this consumer has handled, one row each, written in the same transaction as the
/// handler's effect. Create it with your migrations (`main` below creates it if it is missing).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS processed (
    topology     text        NOT NULL,
    key          text        NOT NULL,  -- the contract's idempotency key
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topology, key)
)";

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
    /// What stays the same on every copy of a message.
    #[serde(default)]
    pub idempotency_key: Key,
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

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum Key {
    /// The AMQP message-id property.
    #[default]
    MessageId,
    /// An application header the producer sets.
    Header { header: String },
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
    /// Its effect is in the transaction: commit it with the key, then ack.
    Done,
    /// Worth retrying later; the transaction is rolled back.
    Failed,
    /// Will never succeed: straight to the dead-letter queue; rolled back.
    Poison,
}

/// The application's processing of one message.
pub trait Handler: Send + Sync + 'static {
    /// Handles delivery number `attempt`. Its effect goes through `tx`, so that it commits
    /// together with the message's key or not at all. An effect outside this database (an e-mail,
    /// an HTTP call) is not covered by the transaction: pass the key along so that it can be
    /// deduplicated there too. A database error is a `Failed` outcome: if the database is gone,
    /// the rollback fails as well and the consumer reconnects without settling the message.
    fn handle(&self, tx: &Transaction<'_>, delivery: &Delivery, attempt: u32) -> impl Future<Output = Outcome> + Send;
}

/// Where to connect, and how much to take at once.
#[derive(Debug, Clone)]
pub struct Settings {
    pub amqp_url: String,
    /// libpq style: `host=127.0.0.1 user=postgres dbname=test`.
    pub database: String,
    /// Shown by the management API and UI: an operator can tell this consumer's connections.
    pub connection_name: String,
    /// Unacknowledged messages per queue: also the most a lost connection gives back per queue.
    pub prefetch: u16,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Consumes every queue of the contract until `stop` turns true, connecting again whenever the
/// broker, the connection or the database goes away.
pub async fn run<H: Handler>(
    settings: &Settings,
    contract: &Contract,
    handler: Arc<H>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
    while !*stop.borrow() {
        let Err(e) = session(settings, contract, &handler, &mut stop, &mut backoff).await else { return };
        let wait = backoff.next();
        eprintln!("retry_consumer: {e}; connecting again in {wait:?}");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One connection's life: consumers on every queue until one of them ends (a closed channel
/// or connection, a database error) or `stop` turns true. `Ok` only when stopped.
async fn session<H: Handler>(
    settings: &Settings,
    contract: &Contract,
    handler: &Arc<H>,
    stop: &mut watch::Receiver<bool>,
    backoff: &mut Backoff,
) -> Result<(), Error> {
    // lapin could recover the connection itself (`enable_auto_recover`), re-declaring what the
    // connection had declared: off, since this consumer declares nothing, and the loop in `run`
    // shows what happens.
    let properties = ConnectionProperties::default().with_connection_name(settings.connection_name.as_str().into());
    let connection = Connection::connect(&settings.amqp_url, properties).await?;
    let ended = consume_all(&connection, settings, contract, handler, stop, backoff).await;
    // Whatever a consumer still holds is not acked: closing gives it back to its queue.
    let _ = connection.close(200, "retry_consumer stops".into()).await;
    ended
}

async fn consume_all<H: Handler>(
    connection: &Connection,
    settings: &Settings,
    contract: &Contract,
    handler: &Arc<H>,
    stop: &mut watch::Receiver<bool>,
    backoff: &mut Backoff,
) -> Result<(), Error> {
    // Copies are published on their own channel, in confirm mode.
    let publisher = connection.create_channel().await?;
    publisher.confirm_select(ConfirmSelectOptions::default()).await?;
    let mut queues = JoinSet::new();
    for queue in &contract.consume {
        // One database connection per queue: each handles one message, in one transaction, at a time.
        let database = connect_database(&settings.database).await?;
        let channel = connection.create_channel().await?;
        channel.basic_qos(settings.prefetch, BasicQosOptions::default()).await?;
        let deliveries = channel
            .basic_consume(
                queue.queue.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let consumer = QueueConsumer {
            contract: contract.clone(),
            queue: queue.clone(),
            publisher: publisher.clone(),
            database,
            handler: handler.clone(),
        };
        queues.spawn(consumer.consume(deliveries));
    }
    backoff.reset(); // connected and consuming: the next loss starts from the shortest wait
    let ended = tokio::select! {
        Some(ended) = queues.join_next() => ended.map_err(Error::from).and_then(|r| r),
        _ = stop.changed() => Ok(()),
    };
    // The others stop where they are, their messages unsettled (dropping the JoinSet would too).
    queues.shutdown().await;
    ended
}

async fn connect_database(config: &str) -> Result<Client, Error> {
    let (client, connection) = tokio_postgres::connect(config, NoTls).await?;
    // The connection does the I/O; once it ends, every call on the client fails.
    tokio::spawn(connection);
    Ok(client)
}

/// Consumes one queue of the contract.
struct QueueConsumer<H> {
    contract: Contract,
    queue: ConsumeQueue,
    publisher: Channel,
    database: Client,
    handler: Arc<H>,
}

impl<H: Handler> QueueConsumer<H> {
    async fn consume(mut self, mut deliveries: lapin::Consumer) -> Result<(), Error> {
        while let Some(delivery) = deliveries.next().await {
            self.deliver(&delivery?).await?;
        }
        Err("the broker closed the channel or the connection".into())
    }

    /// Handles one delivery to its end: acked, rejected, or republished and acked. An error
    /// leaves it unsettled: the broker gives it back when the connection closes.
    async fn deliver(&mut self, delivery: &Delivery) -> Result<(), Error> {
        // Out of range (a producer counting from 0, a copy made before max_attempts was
        // lowered) counts as the nearest attempt that exists.
        let attempt = attempt_of(&self.contract, &self.queue, delivery).clamp(1, self.contract.max_attempts);
        let Some(key) = key_of(&self.contract.idempotency_key, delivery) else {
            // Without its key a message cannot be told from its copies: park it for a person
            // (`hopper inspect --dead-letters` counts them).
            return settle(&self.publisher, delivery, Some(&self.contract.poison)).await;
        };
        let tx = self.database.transaction().await?;
        // The key first: a copy of this message delivered meanwhile (from another queue of a
        // chain) waits on this row until we commit or roll back, then finds it or takes it.
        let recorded = tx
            .execute(
                "INSERT INTO processed (topology, key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&self.contract.topology, &key],
            )
            .await?;
        if recorded == 0 {
            // Handled before, its effect committed: a duplicate. Ack it, and do nothing else.
            tx.rollback().await?;
            return settle(&self.publisher, delivery, None).await;
        }
        let action = match self.handler.handle(&tx, delivery, attempt).await {
            Outcome::Done => {
                tx.commit().await?;
                None
            }
            // A failure is never acked: without a rule it is rejected to the dead-letter queue.
            Outcome::Failed => {
                tx.rollback().await?;
                Some(
                    self.contract
                        .attempts
                        .iter()
                        .find(|r| r.attempt == attempt)
                        .map_or(&DEAD_LETTER, |r| &r.on_failure),
                )
            }
            Outcome::Poison => {
                tx.rollback().await?;
                Some(&self.contract.poison)
            }
        };
        settle(&self.publisher, delivery, action).await
    }
}

/// Acks (no action), rejects, or publishes a copy and then acks, as the contract says.
async fn settle(publisher: &Channel, delivery: &Delivery, action: Option<&Action>) -> Result<(), Error> {
    match action {
        None => delivery.ack(BasicAckOptions::default()).await?,
        Some(Action::Reject { requeue }) => delivery.reject(BasicRejectOptions { requeue: *requeue }).await?,
        Some(Action::Publish { exchange, routing_key, routing_keys, headers }) => {
            let key = pick(routing_keys).unwrap_or(routing_key);
            republish(publisher, delivery, exchange, key, headers).await?
        }
    };
    Ok(())
}

/// The message's idempotency key: its message id, or the header the spec names. `None` when
/// the producer did not set it.
fn key_of(key: &Key, delivery: &Delivery) -> Option<String> {
    let value = match key {
        Key::MessageId => delivery.properties.message_id().as_ref().map(|id| id.to_string()),
        Key::Header { header } => {
            delivery.properties.headers().as_ref().and_then(|h| h.inner().get(header.as_str()).cloned()).and_then(|v| {
                match v {
                    AMQPValue::LongString(s) => Some(s.to_string()),
                    AMQPValue::ShortString(s) => Some(s.to_string()),
                    AMQPValue::LongLongInt(n) => Some(n.to_string()),
                    AMQPValue::LongInt(n) => Some(n.to_string()),
                    _ => None,
                }
            })
        }
    };
    value.filter(|v| !v.is_empty())
}

/// Exponential backoff with jitter: after the n-th failure in a row, a wait picked at random in
/// the upper half of `base × 2^n` (capped), so that consumers cut off together do not all come
/// back in the same instant, and a broker that is down is not hammered.
struct Backoff {
    base: Duration,
    cap: Duration,
    failures: u32,
}

impl Backoff {
    fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff { base, cap, failures: 0 }
    }

    fn next(&mut self) -> Duration {
        let ceiling = self.base.saturating_mul(1 << self.failures.min(20)).min(self.cap);
        self.failures += 1;
        ceiling / 2 + ceiling.mul_f64(random() as f64 / u64::MAX as f64) / 2
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// The standard library's hasher is seeded afresh for every `RandomState`: randomness enough to
/// spread retries and reconnections, without a dependency.
fn random() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now())
}

/// One of a jittered hop's routing keys, uniformly at random. `None` without jitter.
fn pick(keys: &[String]) -> Option<&String> {
    if keys.is_empty() {
        return None;
    }
    keys.get((random() % keys.len() as u64) as usize)
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
/// headers set), mandatory and confirmed; acks the original only once the copy is safely
/// routed. Otherwise the original goes back to its queue, so nothing is lost (at worst a
/// duplicate, which its key tells apart).
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

/// Replace with your own processing: here, a body of "fail" fails every time, and any other is
/// printed. Its effect would go through `tx` (`tx.execute("UPDATE accounts ...", ...)`).
struct PrintHandler;

impl Handler for PrintHandler {
    async fn handle(&self, _tx: &Transaction<'_>, delivery: &Delivery, attempt: u32) -> Outcome {
        println!("attempt {attempt}: {}", String::from_utf8_lossy(&delivery.data));
        if delivery.data == b"fail" { Outcome::Failed } else { Outcome::Done }
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
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
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_string());
    let settings = Settings {
        amqp_url: env("AMQP_URL", "amqp://guest:guest@localhost:5672/%2f"),
        database: env("DATABASE_URL", "host=127.0.0.1 user=postgres dbname=test"),
        connection_name: format!("retry_consumer {topology}"),
        prefetch: 10,
    };
    connect_database(&settings.database).await?.batch_execute(SCHEMA).await?;
    // Ctrl-C stops it: what is in flight is given back to the broker, never acked unfinished.
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = stop.send(true);
    });
    run(&settings, &contract, Arc::new(PrintHandler), stopped).await;
    Ok(())
}
