//! Declarations over AMQP: what `apply` writes, and what it can learn without the management API.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use lapin::options::{
    ExchangeBindOptions, ExchangeDeclareOptions, ExchangeUnbindOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};

use super::Endpoint;
use crate::live::{Live, LiveExchange, LiveQueue};
use crate::model::{ArgValue, Arguments, Binding, Destination, Exchange, ExchangeType, Object, Queue, arg};
use crate::plan::{Difference, Plan, Property, Step};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// One connection to one vhost, with a channel that is reopened after the broker closes it (as
/// it does on every refused declaration). Lanes share the connection, each on its own channel.
pub struct Session {
    connection: Arc<Connection>,
    channel: Channel,
    /// How the node this session talks to introduced itself.
    identity: Arc<super::identity::Identity>,
}

/// How many channels `execute` declares on at once. The broker handles one method at a time per
/// channel; measured on 7,000 objects, 8 channels take a third of the time of one.
const LANES: usize = 8;

/// What happened to one step when the plan was carried out.
pub enum Outcome {
    Done,
    /// The broker refused, for the reason given; nothing was changed by this step.
    Refused(String),
}

impl Session {
    /// Connects to the first node that answers and belongs to `cluster` (its greeting's cluster
    /// name): a node of another cluster in the list is never written to, whatever else fails.
    pub async fn connect(endpoint: &Endpoint, vhost: &str, cluster: &str) -> Result<Session> {
        let mut failures = Vec::new();
        for node in &endpoint.nodes {
            let mut uri = node.clone();
            uri.vhost = vhost.to_string();
            let address = format!("{}:{}", uri.authority.host, uri.authority.port);
            let identity = match super::identity::of(node).await {
                Ok(identity) if identity.cluster_name == cluster => Arc::new(identity),
                Ok(identity) => {
                    failures.push(format!(
                        "{address}: cluster `{}`, not `{cluster}`: a node of another cluster, not used",
                        identity.cluster_name
                    ));
                    continue;
                }
                Err(e) => {
                    failures.push(format!("{address}: {e:#}"));
                    continue;
                }
            };
            let attempt =
                tokio::time::timeout(CONNECT_TIMEOUT, Connection::connect_uri(uri, ConnectionProperties::default()))
                    .await;
            match attempt {
                Ok(Ok(connection)) => {
                    let channel = connection.create_channel().await?;
                    return Ok(Session { connection: Arc::new(connection), channel, identity });
                }
                Ok(Err(e)) => {
                    failures.push(format!("{address}: {}", explain_connect_error(&e, vhost, endpoint.username())))
                }
                Err(_) => failures.push(format!("{address}: no answer within {}s", CONNECT_TIMEOUT.as_secs())),
            }
        }
        bail!("cannot connect to RabbitMQ over AMQP ({})", failures.join("; "))
    }

    /// The cluster and release of the node this session talks to.
    pub fn identity(&self) -> &super::identity::Identity {
        &self.identity
    }

    pub async fn close(self) {
        let _ = self.connection.close(200, "bye".into()).await;
    }

    /// Another session on the same connection, with a channel of its own.
    pub(crate) async fn lane(&self) -> Result<Session> {
        let channel = self.connection.create_channel().await.context("opening an AMQP channel")?;
        Ok(Session { connection: self.connection.clone(), channel, identity: self.identity.clone() })
    }

    async fn reopen(&mut self) -> Result<()> {
        if !self.channel.status().connected() {
            self.channel = self.connection.create_channel().await.context("reopening an AMQP channel")?;
        }
        Ok(())
    }

    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// What the broker has of `objects`, learned by declaring them: passively to see whether they
    /// exist, then as the spec wants them, which changes nothing when they are equivalent and is
    /// refused (406) naming the first argument that differs when they are not; a refused queue
    /// is declared again with what each refusal taught, until the broker accepts: then its
    /// arguments are known. A queue of another type has other arguments altogether: `retyped`
    /// gives what the spec would declare for it with that type. Bindings cannot be read over AMQP.
    pub async fn probe(
        &mut self,
        objects: &[&Object],
        retyped: impl Fn(&Queue, &str) -> Option<Arguments>,
    ) -> Result<Live> {
        let mut live = Live::default();
        for object in objects {
            match object {
                Object::Exchange(e) => {
                    if self.exchange_exists(&e.name).await? {
                        // Equivalent unless refused; a refusal names the first property that differs.
                        let mut found = LiveExchange {
                            kind: e.kind.clone(),
                            durable: e.durable,
                            auto_delete: false,
                            internal: false,
                            arguments: Arguments::new(),
                        };
                        if let Outcome::Refused(text) = self.declare_exchange(e).await? {
                            match parse_inequivalent(&text) {
                                Some(Difference { property, live: Some(value), .. }) => match (property, value) {
                                    (Property::Durable, ArgValue::Bool(b)) => found.durable = b,
                                    (Property::AutoDelete, ArgValue::Bool(b)) => found.auto_delete = b,
                                    (Property::Internal, ArgValue::Bool(b)) => found.internal = b,
                                    (_, value) => found.kind = ExchangeType::Other(value.to_string()),
                                },
                                _ => found.kind = ExchangeType::Other(format!("refused: {text}")),
                            }
                        }
                        live.exchanges.insert(e.name.clone(), found);
                    }
                }
                Object::Queue(q) => {
                    if let Some((messages, consumers)) = self.queue_counts(&q.name).await? {
                        let (mut arguments, mut refused) = match self.declare_queue(q).await? {
                            Outcome::Done => (Some(q.arguments.clone()), None),
                            Outcome::Refused(text) => (
                                None,
                                Some(parse_inequivalent(&text).unwrap_or(Difference {
                                    property: Property::Argument(text),
                                    live: None,
                                    spec: None,
                                })),
                            ),
                        };
                        // The refusal names one argument that differs. A declaration the broker
                        // accepts as equivalent changes nothing, and tells all of them: take the
                        // broker's value of each argument it names, and declare again, until it
                        // accepts (a queue has a handful of arguments; each round learns one).
                        let mut learned = q.clone();
                        for _ in 0..16 {
                            let Some(Difference { property: Property::Argument(key), live, .. }) = &refused else {
                                break;
                            };
                            let other_type = (key == arg::QUEUE_TYPE).then(|| live.as_ref().and_then(ArgValue::as_str));
                            match (other_type.flatten().and_then(|t| retyped(q, t)), live) {
                                (Some(arguments), _) => learned.arguments = arguments,
                                (None, Some(value)) => {
                                    learned.arguments.insert(key.clone(), value.clone());
                                }
                                (None, None) => {
                                    learned.arguments.remove(key);
                                }
                            }
                            match self.declare_queue(&learned).await? {
                                Outcome::Done => {
                                    (arguments, refused) = (Some(learned.arguments.clone()), None);
                                    break;
                                }
                                Outcome::Refused(text) => match parse_inequivalent(&text) {
                                    Some(d) if Some(&d) != refused.as_ref() => refused = Some(d),
                                    _ => break,
                                },
                            }
                        }
                        live.queues.insert(
                            q.name.clone(),
                            LiveQueue {
                                durable: q.durable,
                                arguments,
                                refused,
                                messages: Some(messages),
                                consumers: Some(consumers),
                                ..LiveQueue::default()
                            },
                        );
                    }
                }
                Object::Binding(_) => {}
            }
        }
        Ok(live)
    }

    async fn exchange_exists(&mut self, name: &str) -> Result<bool> {
        let options = ExchangeDeclareOptions { passive: true, ..Default::default() };
        let r = self.channel.exchange_declare(short(name)?, ExchangeKind::Direct, options, FieldTable::default()).await;
        self.soft(r, 404).await.map(|o| o.is_some())
    }

    /// Message and consumer counts, or `None` when the queue does not exist.
    pub async fn queue_counts(&mut self, name: &str) -> Result<Option<(u64, u64)>> {
        let options = QueueDeclareOptions { passive: true, ..Default::default() };
        let r = self.channel.queue_declare(short(name)?, options, FieldTable::default()).await;
        Ok(self.soft(r, 404).await?.map(|q| (u64::from(q.message_count()), u64::from(q.consumer_count()))))
    }

    async fn declare_exchange(&mut self, e: &Exchange) -> Result<Outcome> {
        let options = ExchangeDeclareOptions { durable: e.durable, ..Default::default() };
        let kind = match &e.kind {
            ExchangeType::Direct => ExchangeKind::Direct,
            ExchangeType::Topic => ExchangeKind::Topic,
            ExchangeType::Fanout => ExchangeKind::Fanout,
            ExchangeType::Headers => ExchangeKind::Headers,
            ExchangeType::Other(other) => ExchangeKind::Custom(other.clone()),
        };
        let r = self.channel.exchange_declare(short(&e.name)?, kind, options, FieldTable::default()).await;
        self.outcome(r).await
    }

    pub(crate) async fn declare_queue(&mut self, q: &Queue) -> Result<Outcome> {
        let options = QueueDeclareOptions { durable: q.durable, ..Default::default() };
        let r = self.channel.queue_declare(short(&q.name)?, options, field_table(&q.arguments)).await;
        self.outcome(r).await
    }

    pub(crate) async fn bind(&mut self, b: &Binding) -> Result<Outcome> {
        let (source, key, args) = (short(&b.source)?, short(&b.routing_key)?, field_table(&b.arguments));
        let r = match &b.destination {
            Destination::Queue(q) => {
                self.channel.queue_bind(short(q)?, source, key, QueueBindOptions::default(), args).await
            }
            Destination::Exchange(x) => {
                self.channel.exchange_bind(short(x)?, source, key, ExchangeBindOptions::default(), args).await
            }
        };
        self.outcome(r).await
    }

    /// Removes exactly this binding: RabbitMQ matches the arguments too.
    pub(crate) async fn unbind(&mut self, b: &Binding) -> Result<Outcome> {
        let (source, key, args) = (short(&b.source)?, short(&b.routing_key)?, field_table(&b.arguments));
        let r = match &b.destination {
            Destination::Queue(q) => self.channel.queue_unbind(short(q)?, source, key, args).await,
            Destination::Exchange(x) => {
                self.channel.exchange_unbind(short(x)?, source, key, ExchangeUnbindOptions::default(), args).await
            }
        };
        self.outcome(r).await
    }

    /// Deletes a queue only if it is empty at that instant (and unused, where the queue type
    /// lets the broker check it): a message that arrived since the plan was made is never lost.
    pub(crate) async fn delete_if_empty(&mut self, queue: &str, broker_checks: bool) -> Result<Outcome> {
        if !broker_checks {
            match self.queue_counts(queue).await? {
                Some((0, 0)) => {}
                Some((m, c)) => {
                    return Ok(Outcome::Refused(format!(
                        "not deleted: it now holds {m} message(s) and {c} consumer(s)"
                    )));
                }
                None => return Ok(Outcome::Done),
            }
        }
        let options = QueueDeleteOptions { if_empty: broker_checks, if_unused: broker_checks, ..Default::default() };
        let r = self.channel.queue_delete(short(queue)?, options).await;
        self.outcome(r).await
    }

    /// Carries out the plan's changes phase by phase (see `plan::phases`), each phase spread over
    /// several channels, stopping after the phase in which the broker refused a step. If the
    /// connection fails, the error says where: every step is a declaration the next run repeats
    /// harmlessly, so running apply again finishes the job.
    pub async fn execute(&mut self, plan: &Plan, phases: Vec<Vec<usize>>) -> Result<Vec<(usize, Outcome)>> {
        let mut outcomes: Vec<(usize, Outcome)> = Vec::new();
        let total = phases.iter().map(Vec::len).sum::<usize>();
        for indices in phases.into_iter().filter(|p| !p.is_empty()) {
            let lanes = indices.len().min(LANES);
            let mut tasks = tokio::task::JoinSet::new();
            for lane_number in 0..lanes {
                let mut lane = self.lane().await?;
                let steps: Vec<(usize, Step)> =
                    indices.iter().skip(lane_number).step_by(lanes).map(|&i| (i, plan.steps[i].clone())).collect();
                let (vhost, done_before) = (plan.vhost.clone(), outcomes.len());
                tasks.spawn(async move {
                    let mut done = Vec::new();
                    for (i, step) in steps {
                        let outcome = lane.run(&step).await.with_context(|| {
                            format!(
                                "in vhost `{vhost}`, at {} (at least {done_before} of {total} changes were applied before it); apply is idempotent: run it again",
                                describe(&step)
                            )
                        })?;
                        let stop = matches!(outcome, Outcome::Refused(_)) && step.refusal_stops_the_run();
                        done.push((i, outcome));
                        if stop {
                            break;
                        }
                    }
                    let _ = lane.channel.close(200, "done".into()).await;
                    anyhow::Ok(done)
                });
            }
            let mut refused = false;
            while let Some(joined) = tasks.join_next().await {
                let done = joined.context("an AMQP task failed")??;
                refused |= done
                    .iter()
                    .any(|(i, o)| matches!(o, Outcome::Refused(_)) && plan.steps[*i].refusal_stops_the_run());
                outcomes.extend(done);
            }
            if refused {
                break;
            }
        }
        outcomes.sort_by_key(|(i, _)| *i);
        Ok(outcomes)
    }

    async fn run(&mut self, step: &Step) -> Result<Outcome> {
        match step {
            Step::Create { object } | Step::Ensure { object } => match object {
                Object::Exchange(e) => self.declare_exchange(e).await,
                Object::Queue(q) => self.declare_queue(q).await,
                Object::Binding(b) => self.bind(b).await,
            },
            Step::Unbind { binding } => self.unbind(binding).await,
            Step::Delete { queue, broker_checks } => self.delete_if_empty(queue, *broker_checks).await,
            Step::InSync { .. } | Step::Conflict { .. } | Step::Extra { .. } => Ok(Outcome::Done),
            Step::Migrate { .. } => bail!("a migration is carried out by ops::migrate, not as a declaration"),
        }
    }

    /// A broker refusal (a channel error) becomes an `Outcome`; the channel is reopened.
    /// A permission the user lacks (403) is an error, never a refusal to plan around: a probe
    /// would otherwise take it for an argument that differs and offer to recreate a queue that
    /// is exactly right.
    async fn outcome<T>(&mut self, r: lapin::Result<T>) -> Result<Outcome> {
        match r {
            Ok(_) => Ok(Outcome::Done),
            Err(e) => match soft_error(&e) {
                Some((403, text)) => {
                    self.reopen().await?;
                    Err(anyhow::Error::new(AccessRefused(text)))
                }
                Some((_, text)) => {
                    self.reopen().await?;
                    Ok(Outcome::Refused(text))
                }
                None => Err(anyhow!(e).context("AMQP connection failed")),
            },
        }
    }

    /// `Ok(None)` for the one channel error that is an answer (`expected`, such as 404).
    async fn soft<T>(&mut self, r: lapin::Result<T>, expected: u16) -> Result<Option<T>> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) => match soft_error(&e) {
                Some((code, _)) if code == expected => {
                    self.reopen().await?;
                    Ok(None)
                }
                Some((403, text)) => {
                    self.reopen().await?;
                    Err(anyhow::Error::new(AccessRefused(text)))
                }
                Some((_, text)) => {
                    self.reopen().await?;
                    Err(anyhow!("the broker refused: {text}"))
                }
                None => Err(anyhow!(e).context("AMQP connection failed")),
            },
        }
    }
}

/// The broker refused a declaration for want of a permission (403). Declaring a queue needs
/// configure on it, read on it and write on its dead-letter exchange; binding needs write on
/// the queue and read on the exchange. (RabbitMQ 4.3's release notes say a passive declaration
/// needs configure too, #16085; 4.3.6 measured here does not ask it.)
#[derive(Debug)]
pub struct AccessRefused(pub String);

impl std::fmt::Display for AccessRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the broker refused for want of a permission ({}): grant the user configure and read on the topology's queues and exchanges and write on its exchanges (`rabbitmqctl set_permissions`), or run with a user that has them",
            self.0
        )
    }
}

impl std::error::Error for AccessRefused {}

fn describe(step: &Step) -> String {
    match step {
        Step::Create { object } | Step::Ensure { object } => format!("declaring {} `{object}`", object.kind()),
        Step::Unbind { binding } => format!("removing binding {binding}"),
        Step::Delete { queue, .. } => format!("deleting queue `{queue}`"),
        _ => String::new(),
    }
}

fn soft_error(e: &lapin::Error) -> Option<(u16, String)> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) if e.is_amqp_soft_error() => {
            Some((amqp.get_id(), amqp.get_message().to_string()))
        }
        _ => None,
    }
}

fn explain_connect_error(e: &lapin::Error, vhost: &str, user: &str) -> String {
    let text = e.to_string();
    if text.contains("ACCESS_REFUSED") || text.contains("403") || text.contains("authentication") {
        format!("authentication failed for user `{user}` ({text})")
    } else if text.contains("NOT_ALLOWED") || text.contains("530") {
        format!(
            "vhost `{vhost}` does not exist or user `{user}` has no access to it ({text}); create it with `rabbitmqctl add_vhost {vhost}`"
        )
    } else {
        text
    }
}

pub(crate) fn short(s: &str) -> Result<ShortString> {
    ShortString::try_new(s).map_err(|_| anyhow!("`{s}` is longer than 255 bytes"))
}

pub fn field_table(args: &Arguments) -> FieldTable {
    let mut table = FieldTable::default();
    for (k, v) in args.iter() {
        let value = match v {
            ArgValue::Bool(b) => AMQPValue::Boolean(*b),
            ArgValue::Int(n) => AMQPValue::LongLongInt(*n),
            ArgValue::Str(s) | ArgValue::Other(s) => AMQPValue::LongString(LongString::from(s.as_str())),
        };
        table.insert(ShortString::from(k), value);
    }
    table
}

/// Reads RabbitMQ's equivalence failure: `inequivalent arg 'x-message-ttl' for queue 'q' in vhost
/// '/': received the value '60000' of type 'signedint' but current is none`, or for an exchange
/// `inequivalent arg 'type' ...: received 'topic' but current is 'direct'`.
pub fn parse_inequivalent(text: &str) -> Option<Difference> {
    let rest = &text[text.find("inequivalent arg '")? + "inequivalent arg '".len()..];
    let argument = rest[..rest.find('\'')?].to_string();
    let received = &rest[rest.find("received ")? + "received ".len()..];
    let (spec, current) = received.split_once(" but current is ")?;
    // Values come typed ("of type 'signedint'") only on some versions; an argument RabbitMQ
    // only accepts as an integer is one.
    let integer = matches!(
        argument.as_str(),
        "x-message-ttl" | "x-expires" | "x-max-length" | "x-max-length-bytes" | "x-delivery-limit" | "x-max-priority"
    );
    let typed = |v: Option<ArgValue>| match v {
        Some(ArgValue::Str(s)) if integer => Some(s.parse().map_or(ArgValue::Str(s), ArgValue::Int)),
        other => other,
    };
    let property = match argument.as_str() {
        "durable" => Property::Durable,
        "auto_delete" => Property::AutoDelete,
        "internal" => Property::Internal,
        "type" => Property::Type,
        _ => Property::Argument(argument),
    };
    Some(Difference { property, live: typed(value_of(current)), spec: typed(value_of(spec)) })
}

/// `the value '60000' of type 'signedint'`, `'direct'`, `'true'` or `none`, as a value.
fn value_of(text: &str) -> Option<ArgValue> {
    let text = text.trim();
    if text == "none" {
        return None;
    }
    let quoted = |t: &str| -> Option<(String, usize)> {
        let start = t.find('\'')? + 1;
        let end = start + t[start..].find('\'')?;
        Some((t[start..end].to_string(), end + 1))
    };
    let (value, after) = quoted(text)?;
    let kind = text[after..].split_once("of type ").and_then(|(_, t)| quoted(t)).map(|(k, _)| k);
    Some(match (kind.as_deref(), value.as_str()) {
        (Some("signedint" | "long" | "short" | "byte" | "unsignedbyte" | "unsignedshort" | "unsignedint"), v) => {
            v.parse().map_or(ArgValue::Str(value.clone()), ArgValue::Int)
        }
        (Some("bool") | None, "true") => ArgValue::Bool(true),
        (Some("bool") | None, "false") => ArgValue::Bool(false),
        _ => ArgValue::Str(value),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_brokers_equivalence_failures() {
        let d = parse_inequivalent("PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'jobs' in vhost '/': received the value '60000' of type 'signedint' but current is none").unwrap();
        assert_eq!(
            d,
            Difference {
                property: Property::Argument("x-message-ttl".into()),
                live: None,
                spec: Some(ArgValue::Int(60000))
            }
        );
        let d = parse_inequivalent("PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'x' in vhost '/': received 'topic' but current is 'direct'").unwrap();
        assert_eq!(
            d,
            Difference {
                property: Property::Type,
                live: Some(ArgValue::str("direct")),
                spec: Some(ArgValue::str("topic"))
            }
        );
    }
}

/// One dead-lettering a message went through, as its `x-death` header records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    pub queue: String,
    pub reason: String,
    pub count: i64,
    /// Seconds since the epoch of the first death for this queue and reason.
    pub time: Option<u64>,
}

/// What a peek learns of one message: its deaths (newest first) and the first one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peeked {
    pub first_death_queue: Option<String>,
    pub first_death_reason: Option<String>,
    pub deaths: Vec<Death>,
    pub redelivered: bool,
}

impl Session {
    /// Reads up to `limit` messages with `basic.get` and gives every one back by closing the
    /// channel without acknowledging: none is consumed. Callers must first make sure a return
    /// cannot dead-letter or drop a message (a quorum queue's delivery limit).
    pub async fn peek(&mut self, queue: &str, limit: usize) -> Result<Vec<Peeked>> {
        let channel = self.connection.create_channel().await?;
        let mut out = Vec::new();
        while out.len() < limit {
            let Some(m) = channel.basic_get(short(queue)?, lapin::options::BasicGetOptions { no_ack: false }).await?
            else {
                break;
            };
            out.push(peeked(&m.delivery));
        }
        // Closing the channel returns every unacknowledged message to the queue.
        channel.close(200, "peek done".into()).await?;
        Ok(out)
    }
}

pub(crate) fn peeked(d: &lapin::message::Delivery) -> Peeked {
    let headers = d.properties.headers().clone().unwrap_or_default();
    let text = |v: Option<&AMQPValue>| match v {
        Some(AMQPValue::LongString(s)) => Some(s.to_string()),
        Some(AMQPValue::ShortString(s)) => Some(s.to_string()),
        _ => None,
    };
    let int = |v: Option<&AMQPValue>| match v {
        Some(AMQPValue::LongLongInt(n)) => Some(*n),
        Some(AMQPValue::LongInt(n)) => Some(i64::from(*n)),
        Some(AMQPValue::LongUInt(n)) => Some(i64::from(*n)),
        Some(AMQPValue::ShortInt(n)) => Some(i64::from(*n)),
        _ => None,
    };
    let deaths = match headers.inner().get("x-death") {
        Some(AMQPValue::FieldArray(entries)) => entries
            .as_slice()
            .iter()
            .filter_map(|e| match e {
                AMQPValue::FieldTable(t) => Some(Death {
                    queue: text(t.inner().get("queue")).unwrap_or_default(),
                    reason: text(t.inner().get("reason")).unwrap_or_default(),
                    count: int(t.inner().get("count")).unwrap_or(1),
                    time: match t.inner().get("time") {
                        Some(AMQPValue::Timestamp(ts)) => Some(*ts),
                        _ => None,
                    },
                }),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    Peeked {
        first_death_queue: text(headers.inner().get("x-first-death-queue")),
        first_death_reason: text(headers.inner().get("x-first-death-reason")),
        deaths,
        redelivered: d.redelivered,
    }
}
