//! Declarations over AMQP: what `apply` writes, and what it can learn without the management API.

use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use lapin::options::{
    ExchangeBindOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, ExchangeUnbindOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};

use super::Endpoint;
use super::identity::Cluster;
use crate::live::{Live, LiveExchange, LiveQueue};
use crate::model::{ArgValue, Arguments, Binding, Destination, Exchange, ExchangeType, Object, Queue, QueueType, arg};
use crate::network::DeathReason;
use crate::plan::{Difference, Plan, Property, Step};

/// One connection to one vhost, with a channel that is reopened after the broker closes it (as
/// it does on every refused declaration). Lanes share the connection, each on its own channel.
pub struct Session {
    connection: Arc<Connection>,
    channel: Channel,
    /// How the node this session talks to introduced itself.
    identity: Arc<super::identity::Identity>,
    /// Where this session is connected, to fail over from: the node's address, the vhost and
    /// the cluster every node it may move to must belong to.
    node: Arc<str>,
    vhost: Arc<str>,
    cluster: Arc<Cluster>,
    /// The user it signed in as: RabbitMQ refuses a publish whose `user_id` is another's.
    user: Arc<str>,
}

/// The connection to a node was lost (the node stopped, was killed, or closed it): the one error
/// `execute` fails over from, to another node of the cluster. Any other error stops the run.
#[derive(Debug)]
pub struct ConnectionLost(pub String);

impl std::fmt::Display for ConnectionLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AMQP connection failed: {}", self.0)
    }
}

impl std::error::Error for ConnectionLost {}

/// A connection lost from under `execute`, and the node that took over.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Failover {
    /// The node whose connection was lost, and why.
    pub from: String,
    pub cause: String,
    /// The node the rest was carried out on.
    pub to: String,
    /// Steps carried out before the loss (the step in flight is done again: a declaration
    /// repeated with the same arguments changes nothing).
    pub done_before: usize,
}

/// How long `execute` waits before each round of trying every node again after losing its
/// connection: a node being stopped closes its listener at once, and one restarting or a
/// cluster electing new quorum leaders takes seconds. About 16 s in all.
const BACKOFF_MS: [u64; 6] = [250, 500, 1_000, 2_000, 4_000, 8_000];

/// How many times one run may lose its connection: each loss is another node gone.
const MAX_FAILOVERS: usize = 3;

/// How many channels `execute` declares on at once. The broker handles one method at a time per
/// channel; measured on 7,000 objects, 8 channels take a third of the time of one.
const LANES: usize = 8;

/// What happened to one step when the plan was carried out.
pub enum Outcome {
    Done,
    /// The broker refused, for the reason given; nothing was changed by this step.
    Refused(String),
}

/// What a step of a plan being carried out came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Executed {
    Done,
    /// The broker refused, for the reason given; nothing was changed by this step.
    Refused(String),
    /// The broker refused for want of a permission (403): the run stops after this phase,
    /// whatever the step (the phase's other channels finish their steps, each a declaration a
    /// later run repeats harmlessly), and the report says what was done. (A probe's 403 is an
    /// error instead.)
    Forbidden(String),
}

impl Executed {
    /// Whether this outcome of `step` ends the run after its phase.
    fn stops(&self, step: &Step) -> bool {
        match self {
            Executed::Done => false,
            Executed::Refused(_) => step.refusal_stops_the_run(),
            Executed::Forbidden(_) => true,
        }
    }
}

impl Session {
    /// Connects to the first node that answers and belongs to `cluster` (by its greeting's cluster
    /// name): a node of another cluster in the list is never written to, whatever else fails.
    pub async fn connect(endpoint: &Endpoint, vhost: &str, cluster: &Cluster) -> Result<Session> {
        Session::connect_from(endpoint, vhost, cluster, 0).await
    }

    /// As `connect`, trying the nodes from the `first`-th on, round the list.
    async fn connect_from(endpoint: &Endpoint, vhost: &str, cluster: &Cluster, first: usize) -> Result<Session> {
        let mut failures = Vec::new();
        let count = endpoint.nodes.len();
        for node in (0..count).map(|k| &endpoint.nodes[(first + k) % count]) {
            let uri = endpoint.dialled(node, vhost);
            let address = node.address();
            let identity = match super::identity::of(endpoint, node).await {
                Ok(identity) if cluster.admits(&identity.cluster_name) => Arc::new(identity),
                Ok(identity) => {
                    failures.push(format!(
                        "{address}: cluster `{}`, not {cluster}: a node of another cluster, not used",
                        identity.cluster_name
                    ));
                    continue;
                }
                Err(e) => {
                    failures.push(format!("{address}: {e:#}"));
                    continue;
                }
            };
            let runtime = lapin::runtime::default_runtime()?;
            let connect =
                Connection::connect_uri_with_config(uri, ConnectionProperties::default(), endpoint.tls.amqp(), runtime);
            let attempt = tokio::time::timeout(endpoint.timeout, connect).await;
            match attempt {
                Ok(Ok(connection)) => {
                    let channel = connection.create_channel().await?;
                    return Ok(Session {
                        connection: Arc::new(connection),
                        channel,
                        identity,
                        node: address.into(),
                        vhost: vhost.into(),
                        cluster: Arc::new(cluster.clone()),
                        user: endpoint.username().into(),
                    });
                }
                Ok(Err(e)) => {
                    failures.push(format!("{address}: {}", explain_connect_error(&e, vhost, endpoint.username())))
                }
                Err(_) => failures.push(format!(
                    "{address}: no answer within {} (--timeout)",
                    humantime::format_duration(endpoint.timeout)
                )),
            }
        }
        bail!("cannot connect to RabbitMQ over AMQP ({})", failures.join("; "))
    }

    /// The cluster and release of the node this session talks to.
    pub fn identity(&self) -> &super::identity::Identity {
        &self.identity
    }

    /// The address of the node this session talks to.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// After the connection was lost: connects to another node of the same cluster, trying the
    /// nodes after the lost one first (the lost one last: it may be back), each round after a
    /// longer wait. Fails, naming every node's answer, when none took over.
    async fn failover(&mut self, endpoint: &Endpoint, cause: &str) -> Result<()> {
        let lost = endpoint.nodes.iter().position(|n| n.address() == *self.node).unwrap_or(0);
        let mut last = None;
        for wait in BACKOFF_MS {
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
            match Session::connect_from(endpoint, &self.vhost, &self.cluster, lost + 1).await {
                Ok(session) => {
                    crate::output::narrate(|| {
                        format!("lost the connection to {} ({cause}); going on through {}", self.node, session.node)
                    });
                    let old = std::mem::replace(self, session);
                    drop(old);
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        let total: u64 = BACKOFF_MS.iter().sum();
        bail!(
            "lost the connection to {} ({cause}), and no node of {} took over within {} s: {:#}",
            self.node,
            self.cluster,
            total / 1000,
            last.expect("tried at least once")
        )
    }

    pub async fn close(self) {
        let _ = self.connection.close(200, "bye".into()).await;
    }

    /// Another session on the same connection, with a channel of its own.
    pub(crate) async fn lane(&self) -> Result<Session> {
        let channel = self.connection.create_channel().await.map_err(|e| lost(e, "opening an AMQP channel"))?;
        Ok(Session {
            connection: self.connection.clone(),
            channel,
            identity: self.identity.clone(),
            node: self.node.clone(),
            vhost: self.vhost.clone(),
            cluster: self.cluster.clone(),
            user: self.user.clone(),
        })
    }

    /// The user this session signed in as.
    pub fn user(&self) -> &str {
        &self.user
    }

    async fn reopen(&mut self) -> Result<()> {
        if !self.channel.status().connected() {
            self.channel = self.connection.create_channel().await.map_err(|e| lost(e, "reopening an AMQP channel"))?;
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
        retyped: impl Fn(&Queue, &QueueType) -> Option<Arguments>,
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
                            let other_type = live.as_ref().filter(|_| key == arg::QUEUE_TYPE).map(QueueType::of_value);
                            match (other_type.and_then(|t| retyped(q, &t)), live) {
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

    /// As `queue_counts`, but waits (5 s at most) while the queue has consumers: a quorum queue
    /// counts each channel that took messages with `basic.get` as a consumer until it has seen
    /// the channel close, which under load comes seconds later (measured in CI: a migration
    /// refused for "62 consumer(s)" that the run before it had left, one per `basic.get`). A
    /// consumer that stays is still counted at the end.
    pub async fn queue_counts_settled(&mut self, name: &str) -> Result<Option<(u64, u64)>> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let counts = self.queue_counts(name).await?;
            if counts.is_none_or(|(_, consumers)| consumers == 0) || std::time::Instant::now() >= deadline {
                return Ok(counts);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
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
    /// several channels, stopping after the phase in which the broker refused a step. When the
    /// connection is lost (its node stopped or died), it connects to another node of the same
    /// cluster with backoff and carries out the rest of the phase there, the steps that were in
    /// flight again: every step is a declaration (or a removal) that a repeat with the same
    /// arguments leaves as it is. Each such move is added to `failovers`. If no node takes over,
    /// the error says where it stopped, and running apply again finishes the job.
    pub async fn execute(
        &mut self,
        endpoint: &Endpoint,
        plan: &Plan,
        phases: Vec<Vec<usize>>,
        applied_before: usize,
        failovers: &mut Vec<Failover>,
    ) -> Result<Vec<(usize, Executed)>> {
        let mut outcomes: Vec<(usize, Executed)> = Vec::new();
        // The plan's changes in all, and those an earlier group of this run carried out
        // (`applied_before`): an error says how far the whole plan got, not this group.
        let total = plan.steps.iter().filter(|s| s.changes()).count();
        for indices in phases.into_iter().filter(|p| !p.is_empty()) {
            let mut pending = indices;
            let refused = loop {
                let (done, failure) = self.phase(plan, &pending).await;
                let refused = done.iter().any(|(i, o)| o.stops(&plan.steps[*i]));
                let finished: std::collections::BTreeSet<usize> = done.iter().map(|(i, _)| *i).collect();
                outcomes.extend(done);
                let Some(e) = failure else { break refused };
                let Some(cause) = e.downcast_ref::<ConnectionLost>().map(|c| c.0.clone()) else {
                    // Counted once every lane of the phase has stopped: what the others finished
                    // was applied too.
                    let done = applied_before
                        + outcomes.iter().filter(|(i, o)| *o == Executed::Done && plan.steps[*i].changes()).count();
                    return Err(e.context(format!(
                        "in vhost `{}`, {done} of {total} changes were applied, then it stopped; apply is idempotent: run it again",
                        plan.vhost
                    )));
                };
                if refused || failovers.len() >= MAX_FAILOVERS {
                    return Err(e);
                }
                let from = self.node.to_string();
                let done = applied_before
                    + outcomes.iter().filter(|(i, o)| *o == Executed::Done && plan.steps[*i].changes()).count();
                self.failover(endpoint, &cause).await.with_context(|| {
                    format!(
                        "in vhost `{}`, {done} of {total} changes were applied; apply is idempotent: run it again",
                        plan.vhost
                    )
                })?;
                failovers.push(Failover { from, cause, to: self.node.to_string(), done_before: outcomes.len() });
                pending.retain(|i| !finished.contains(i));
            };
            if refused {
                break;
            }
        }
        outcomes.sort_by_key(|(i, _)| *i);
        Ok(outcomes)
    }

    /// One phase's steps over several channels: what each step came to, and the first error
    /// that stopped a lane (the steps it had not finished are not in the list).
    async fn phase(&self, plan: &Plan, indices: &[usize]) -> (Vec<(usize, Executed)>, Option<anyhow::Error>) {
        let lanes = indices.len().min(LANES);
        let mut tasks = tokio::task::JoinSet::new();
        let mut failure = None;
        for lane_number in 0..lanes {
            let mut lane = match self.lane().await {
                Ok(lane) => lane,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            let steps: Vec<(usize, Step)> =
                indices.iter().skip(lane_number).step_by(lanes).map(|&i| (i, plan.steps[i].clone())).collect();
            tasks.spawn(async move {
                let mut done = Vec::new();
                for (i, step) in steps {
                    let outcome = match lane.run(&step).await {
                        Ok(Outcome::Done) => Executed::Done,
                        Ok(Outcome::Refused(reason)) => Executed::Refused(reason),
                        // The broker's answer to this step, reported beside the steps done
                        // (exit 3), as every refusal.
                        Err(e) if e.downcast_ref::<AccessRefused>().is_some() => Executed::Forbidden(e.to_string()),
                        Err(e) => {
                            let e = match e.downcast::<ConnectionLost>() {
                                // Kept as it is: the caller fails over from it.
                                Ok(lost) => anyhow::Error::new(lost),
                                Err(e) => e.context(format!("at {}", describe(&step))),
                            };
                            return (done, Some(e));
                        }
                    };
                    let stop = outcome.stops(&step);
                    done.push((i, outcome));
                    if stop {
                        break;
                    }
                }
                let _ = lane.channel.close(200, "done".into()).await;
                (done, None)
            });
        }
        let mut outcomes = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((done, e)) => {
                    outcomes.extend(done);
                    // Any other error stops the run, even beside a lost connection.
                    if let Some(e) = e {
                        let lost_so_far = failure.as_ref().is_none_or(|f| f.downcast_ref::<ConnectionLost>().is_some());
                        if lost_so_far {
                            failure = Some(e);
                        }
                    }
                }
                Err(e) => failure = Some(anyhow!("an AMQP task failed: {e}")),
            }
        }
        (outcomes, failure)
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
            Step::DeleteExchange { exchange } => {
                let options = ExchangeDeleteOptions { if_unused: true, ..Default::default() };
                let r = self.channel.exchange_delete(short(exchange)?, options).await;
                self.outcome(r).await
            }
            Step::InSync { .. }
            | Step::Conflict { .. }
            | Step::Extra { .. }
            | Step::KeptBinding { .. }
            | Step::KeptExchange { .. } => Ok(Outcome::Done),
            Step::Record { .. } => bail!("an owner's record is written over the management API, not AMQP"),
            Step::Migrate { .. } | Step::MoveMessages { .. } => {
                bail!("moving messages is carried out by ops::migrate, not as a declaration")
            }
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
                None => Err(lost(e, "")),
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
                None => Err(lost(e, "")),
            },
        }
    }
}

/// A connection-level failure (not a channel's refusal), as `ConnectionLost`.
fn lost(e: lapin::Error, doing: &str) -> anyhow::Error {
    let text = if doing.is_empty() { e.to_string() } else { format!("{doing}: {e}") };
    anyhow::Error::new(ConnectionLost(text))
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
        Step::DeleteExchange { exchange } => format!("deleting exchange `{exchange}`"),
        _ => String::new(),
    }
}

pub(crate) fn soft_error(e: &lapin::Error) -> Option<(u16, String)> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) if e.is_amqp_soft_error() => {
            Some((amqp.get_id(), amqp.get_message().to_string()))
        }
        _ => None,
    }
}

fn explain_connect_error(e: &lapin::Error, vhost: &str, user: &str) -> String {
    if let Some(tls) = super::tls::explain(e) {
        return tls;
    }
    let text = e.to_string();
    // By the reply code of the broker's connection.close, never by its text.
    let code = match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => Some(amqp.get_id()),
        _ => None,
    };
    match (code, e.kind()) {
        (Some(ACCESS_REFUSED), _) | (_, lapin::ErrorKind::AuthProviderError(_)) => {
            format!("authentication failed for user `{user}`: wrong username or password ({text})")
        }
        (Some(NOT_ALLOWED), _) => format!(
            "vhost `{vhost}` does not exist or user `{user}` has no access to it ({text}); create it with `rabbitmqctl add_vhost {vhost}`"
        ),
        _ => text,
    }
}

/// AMQP 0-9-1 reply codes: what the broker answers to credentials it refuses, and to a vhost
/// that does not exist or that the user may not open.
const ACCESS_REFUSED: u16 = 403;
const NOT_ALLOWED: u16 = 530;

pub(crate) fn short(s: &str) -> Result<ShortString> {
    ShortString::try_new(s).map_err(|_| anyhow!("`{s}` is longer than 255 bytes"))
}

pub fn field_table(args: &Arguments) -> FieldTable {
    let mut table = FieldTable::default();
    for (k, v) in args.iter() {
        let value = match v {
            ArgValue::Bool(b) => AMQPValue::Boolean(*b),
            ArgValue::Int(n) => AMQPValue::LongLongInt(*n),
            ArgValue::Str(s) => AMQPValue::LongString(LongString::from(&**s)),
            ArgValue::Other(s) => AMQPValue::LongString(LongString::from(s.as_str())),
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
            v.parse().map_or(ArgValue::str(value.as_str()), ArgValue::Int)
        }
        (Some("bool") | None, "true") => ArgValue::Bool(true),
        (Some("bool") | None, "false") => ArgValue::Bool(false),
        _ => ArgValue::str(value),
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
    pub reason: DeathReason,
    pub count: i64,
    /// Seconds since the epoch of the first death for this queue and reason.
    pub time: Option<u64>,
}

/// What a peek learns of one message: its deaths (newest first) and the first one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peeked {
    pub first_death_queue: Option<String>,
    pub first_death_reason: Option<DeathReason>,
    pub deaths: Vec<Death>,
    pub redelivered: bool,
    /// The `message-id` property, when the producer set one (empty counts as none).
    pub message_id: Option<String>,
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
                    reason: DeathReason::from(text(t.inner().get("reason")).as_deref().unwrap_or_default()),
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
        first_death_reason: text(headers.inner().get("x-first-death-reason")).as_deref().map(DeathReason::from),
        deaths,
        redelivered: d.redelivered,
        message_id: d.properties.message_id().as_ref().map(|id| id.to_string()).filter(|id| !id.is_empty()),
    }
}
