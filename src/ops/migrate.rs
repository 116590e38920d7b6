//! Carries out one queue's migration (`plan::migrate`), stage by stage, reading the broker again
//! before each stage: what the last stage did, or what a killed run left, decides the next.

use std::collections::BTreeSet;

use anyhow::{Result, bail};
use serde::Serialize;

use crate::broker::amqp::{Outcome, Session};
use crate::broker::budget::Budget;
use crate::broker::mover::{BATCH, Moved, Mover, Until};
use crate::broker::{Endpoint, http};
use crate::live::Live;
use crate::model::QueueType;
use crate::model::{Arguments, Binding, Destination, ExchangeName, Queue, QueueName, RoutingKey};
use crate::plan::migrate::{Stage, feeding_bindings, holding_queue, stage};

/// What one queue's migration did in this run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Migrated {
    pub queue: QueueName,
    /// Where its messages went meanwhile (or, for a left-over's messages, for good).
    pub holding: QueueName,
    /// Stages carried out, in order.
    pub stages: Vec<Stage>,
    /// Messages moved into the queue (for a migration: back, under its new arguments; for a
    /// left-over's: into `holding`), each counted once.
    pub moved: u64,
    /// Messages a migration set aside in `holding` in this run; they come back in its last
    /// stage, and are counted in `moved` then (a run that stopped between says so here).
    pub set_aside: u64,
    /// Messages the source delivered a second time: an interrupted run may have copied them
    /// already, so each may be in the queue twice.
    pub possible_duplicates: u64,
}

/// At most this many stages per queue and run: each stage changes what the next reads, so a
/// loop that does not end means something outside hopper undoes it (a consumer re-declaring
/// the old queue, say): stop and say so rather than spin.
const MAX_STAGES: usize = 12;

pub async fn migrate(
    session: &mut Session,
    endpoint: &Endpoint,
    vhost: &str,
    desired: &Queue,
    budget: Budget,
) -> Result<Migrated> {
    let holding_name = holding_queue(&desired.name);
    let holding = Queue { name: holding_name.clone(), ..desired.clone() };
    let mut done = Migrated { queue: desired.name.clone(), holding: holding_name.clone(), ..Migrated::default() };
    for _ in 0..MAX_STAGES {
        let live = http::read(endpoint, vhost, http::Stats::Skipped).await?;
        let next = stage(desired, live.queues.get(&desired.name), live.queues.get(&holding_name));
        if next == Stage::Done {
            return Ok(done);
        }
        done.stages.push(next);
        let moved = match next {
            Stage::DeclareHolding => {
                declared(session.declare_queue(&holding).await?, &holding_name)?;
                Moved::default()
            }
            Stage::EmptyOld => {
                let aside = empty_into(session, &live, &desired.name, &holding_name, budget).await?;
                done.set_aside += aside.messages;
                done.possible_duplicates += aside.possible_duplicates;
                continue;
            }
            Stage::Declare => {
                declared(session.declare_queue(desired).await?, &desired.name)?;
                Moved::default()
            }
            Stage::Return => empty_into(session, &live, &holding_name, &desired.name, budget).await?,
            Stage::Done | Stage::MoveOut => unreachable!(),
        };
        done.moved += moved.messages;
        done.possible_duplicates += moved.possible_duplicates;
    }
    bail!(
        "the migration of `{}` did not finish in {MAX_STAGES} stages ({}): something else is changing these queues",
        desired.name,
        done.stages.iter().map(|s| s.describe()).collect::<Vec<_>>().join(", ")
    )
}

/// Moves a left-over queue's messages into `to`; the queue stays, empty, for `--prune`.
pub async fn move_out(session: &mut Session, from: &QueueName, to: &QueueName, budget: Budget) -> Result<Migrated> {
    let mover = Mover::open(session).await?;
    let moved = mover.move_messages(from, to, Until::Empty, budget).await;
    mover.close().await;
    let moved = moved?;
    Ok(Migrated {
        queue: from.clone(),
        holding: to.clone(),
        stages: vec![Stage::MoveOut],
        moved: moved.messages,
        set_aside: 0,
        possible_duplicates: moved.possible_duplicates,
    })
}

/// Moves everything that reaches `from` to `to`, then deletes `from` once it is empty: its
/// messages first while it is still bound (so they keep their order ahead of new arrivals),
/// then its bindings, then the few messages that arrived meanwhile. A binding is added to `to`
/// before it is removed from `from`: a message routed between the two reaches both (a
/// duplicate), never neither.
async fn empty_into(
    session: &mut Session,
    live: &Live,
    from: &QueueName,
    to: &QueueName,
    budget: Budget,
) -> Result<Moved> {
    let queue = &live.queues[from];
    // Counted over AMQP, exactly: the management API's count lags by seconds, and would still
    // show the consumer of a run killed a moment ago.
    let n = session.queue_counts_settled(from).await?.map_or(0, |(_, consumers)| consumers);
    if n > 0 {
        bail!(
            "`{from}` has {n} consumer(s): stop them, then run apply --migrate again (its messages wait meanwhile; deleting it would cancel them)"
        );
    }
    // What feeds either queue, by source, key and arguments: the destination is what moves.
    let bindings: BTreeSet<(ExchangeName, RoutingKey, Arguments)> = feeding_bindings(live, from)
        .chain(feeding_bindings(live, to))
        .map(|b| (b.source.clone(), b.routing_key.clone(), b.arguments.clone()))
        .collect();
    let mover = Mover::open(session).await?;
    let moved = switch_and_move(session, &mover, live, from, to, &bindings, budget).await;
    mover.close().await;
    let moved = moved?;
    let quorum = queue.arguments.as_ref().is_some_and(|a| QueueType::of(a) == QueueType::Quorum);
    // Refused when a message arrived since: the next stage reads the broker again and moves it.
    let _ = session.delete_if_empty(from, !quorum).await?;
    Ok(moved)
}

/// `empty_into`'s moves, on one mover: its messages while `from` is still bound, the bindings
/// switched, then the few that arrived meanwhile (the `Until::Empty` move a mover ends with).
async fn switch_and_move(
    session: &mut Session,
    mover: &Mover,
    live: &Live,
    from: &QueueName,
    to: &QueueName,
    bindings: &BTreeSet<(ExchangeName, RoutingKey, Arguments)>,
    budget: Budget,
) -> Result<Moved> {
    let to_binding = |queue: &QueueName, (source, key, args): &(ExchangeName, RoutingKey, Arguments)| Binding {
        source: source.clone(),
        destination: Destination::Queue(queue.clone()),
        routing_key: key.clone(),
        arguments: args.clone(),
    };
    let mut moved = Moved::default();
    let switched = feeding_bindings(live, from).next().is_none();
    if !switched {
        moved += mover.move_messages(from, to, Until::CaughtUp { ready: u64::from(BATCH) }, budget).await?;
    }
    for b in bindings {
        bound(session.bind(&to_binding(to, b)).await?, to)?;
    }
    for b in bindings {
        bound(session.unbind(&to_binding(from, b)).await?, from)?;
    }
    moved += mover.move_messages(from, to, Until::Empty, budget).await?;
    Ok(moved)
}

fn declared(outcome: Outcome, queue: &QueueName) -> Result<()> {
    match outcome {
        Outcome::Done => Ok(()),
        Outcome::Refused(reason) => bail!("the broker refused to declare `{queue}`: {reason}"),
    }
}

fn bound(outcome: Outcome, queue: &QueueName) -> Result<()> {
    match outcome {
        Outcome::Done => Ok(()),
        Outcome::Refused(reason) => bail!("the broker refused to change a binding of `{queue}`: {reason}"),
    }
}
