//! Moving messages from one queue to another without losing one: each message is consumed,
//! published to its destination with a publisher confirm and `mandatory`, and acknowledged at
//! its source only once the broker has confirmed the copy. Killed at any instant, a message is
//! either still at its source, or at its destination, or (confirmed but not yet acknowledged)
//! at both: the source redelivers it with `redelivered` set, which is how the next run counts
//! the possible duplicates.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures_lite::StreamExt;
use lapin::Confirmation;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, ConfirmSelectOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Consumer};

use super::amqp::{Session, short};
use super::budget::Budget;
use super::properties::Expiration;

/// Deliveries in flight at once at most, however small: the most a killed run can leave at both
/// ends. Large bodies make fewer (`budget`).
pub const BATCH: u16 = 200;

/// How long a consumer with nothing to receive waits before asking the broker for the count.
const IDLE: Duration = Duration::from_millis(150);

/// Headers the broker sets on each delivery from a quorum queue. They describe the old queue's
/// deliveries, not the message: a copy that kept them would show counts its new queue never
/// made (and a native-retry consumer would take them for failed attempts).
pub(crate) const DELIVERY_HEADERS: [&str; 2] = ["x-delivery-count", "x-acquired-count"];

/// Where a copy keeps the `user_id` property of a message another user published: RabbitMQ
/// refuses a publish whose `user_id` is not the publishing connection's user.
pub const USER_ID_HEADER: &str = "hopper-user-id";

/// When a move stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The source has no message ready and none is in flight.
    Empty,
    /// The source has at most this many messages ready: it is still being fed, and the caller
    /// switches its bindings next, so that the few left are moved after the switch. Also once
    /// as many messages have moved as the source held at the start: a source fed faster than
    /// messages move would otherwise never catch up.
    CaughtUp { ready: u64 },
}

/// What one move did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    pub messages: u64,
    /// Moved messages the source had delivered before: an earlier, interrupted move may have
    /// copied them already, so each may now be at the destination twice.
    pub possible_duplicates: u64,
}

impl std::ops::AddAssign for Moved {
    fn add_assign(&mut self, other: Moved) {
        self.messages += other.messages;
        self.possible_duplicates += other.possible_duplicates;
    }
}

/// Moves messages from queue `from` to queue `to` (through the default exchange, so to exactly
/// that queue), in order, keeping each message's properties, headers and body. The consumer is
/// exclusive: nobody else takes a message from `from` meanwhile, and a queue that has consumers
/// is refused rather than raced. At most about `budget` bytes of bodies are held at once,
/// however large the messages (see `budget`): the batches are cut by bytes, and the consumer's
/// window is sized from the first message, read with `basic.get` before it subscribes.
pub async fn move_messages(session: &Session, from: &str, to: &str, until: Until, budget: Budget) -> Result<Moved> {
    let lane = session.lane().await?;
    let mut counter = session.lane().await?;
    let channel = lane.channel();
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    // Received and not in a batch yet: the first message, one that did not fit the last batch,
    // and what the consumer was sent before the broker saw its cancel.
    let mut carried = VecDeque::new();
    if counter.queue_counts(from).await?.is_some_and(|(_, consumers)| consumers == 0)
        && let Some(first) = channel.basic_get(short(from)?, BasicGetOptions { no_ack: false }).await?
    {
        carried.push_back(first.delivery);
    }
    let window = budget.window(carried.front().map(|d| d.data.len() as u64), BATCH);
    let options = BasicConsumeOptions { no_ack: false, exclusive: true, ..Default::default() };
    channel.basic_qos(window, BasicQosOptions::default()).await?;
    let mut consumer = channel
        .basic_consume(short(from)?, "hopper-move".into(), options, FieldTable::default())
        .await
        .with_context(|| format!("consuming from `{from}` to move its messages (does it have consumers?)"))?;
    let at_start = counter.queue_counts(from).await?.map_or(0, |(ready, _)| ready);
    let mut moved = Moved::default();
    loop {
        let (batch, idle) = next_batch(&mut consumer, &mut carried, budget, window, from).await?;
        moved += forward(channel, &batch, to, session.user()).await?;
        drop(batch);
        let ready = counter.queue_counts(from).await?.map_or(0, |(ready, _)| ready);
        let done = match until {
            Until::Empty => idle && carried.is_empty() && ready == 0,
            Until::CaughtUp { ready: at_most } => ready <= at_most || moved.messages >= at_start,
        };
        if done {
            break;
        }
    }
    // Deliveries sent before the broker saw the cancel are still ours: move them too, so that
    // none goes back to the source with a delivery counted against it.
    channel.basic_cancel(consumer.tag(), BasicCancelOptions::default()).await?;
    while let Ok(Some(delivery)) = tokio::time::timeout(IDLE, consumer.next()).await {
        carried.push_back(delivery?);
    }
    while let Some(first) = carried.pop_front() {
        let mut held = first.data.len() as u64;
        let mut batch = vec![first];
        while let Some(d) = carried.pop_front_if(|d| budget.fits(held, batch.len(), d.data.len() as u64)) {
            held += d.data.len() as u64;
            batch.push(d);
        }
        moved += forward(channel, &batch, to, session.user()).await?;
    }
    let _ = channel.close(200, "moved".into()).await;
    let _ = counter.channel().close(200, "counted".into()).await;
    Ok(moved)
}

/// The next batch: carried deliveries first, then the consumer's, while they fit the budget,
/// and no more than the window from the consumer (nothing more arrives until the batch is
/// acknowledged). Whether the consumer had nothing to give.
async fn next_batch(
    consumer: &mut Consumer,
    carried: &mut VecDeque<Delivery>,
    budget: Budget,
    window: u16,
    from: &str,
) -> Result<(Vec<Delivery>, bool)> {
    let mut batch = Vec::new();
    let mut held = 0;
    loop {
        let delivery = match carried.pop_front() {
            Some(d) => d,
            None if batch.len() >= usize::from(window) => return Ok((batch, false)),
            None => match tokio::time::timeout(IDLE, consumer.next()).await {
                Ok(Some(delivery)) => delivery?,
                Ok(None) => bail!("the broker cancelled the move from `{from}` (was the queue deleted?)"),
                Err(_) => return Ok((batch, true)),
            },
        };
        let size = delivery.data.len() as u64;
        if !budget.fits(held, batch.len(), size) {
            carried.push_front(delivery);
            return Ok((batch, false));
        }
        held += size;
        batch.push(delivery);
    }
}

/// Publishes copies of `batch` to queue `to`, waits for every confirm, then acknowledges the
/// originals: all of them at once when every copy was routed and confirmed. Otherwise only those
/// before the first failure, and the rest go back to the source.
async fn forward(channel: &Channel, batch: &[Delivery], to: &str, user: &str) -> Result<Moved> {
    let Some(last) = batch.last() else { return Ok(Moved::default()) };
    let mut confirms = Vec::with_capacity(batch.len());
    for d in batch {
        let options = BasicPublishOptions { mandatory: true, immediate: false };
        confirms.push(channel.basic_publish("".into(), short(to)?, options, &d.data, copy_properties(d, user)).await?);
    }
    let mut failed = None;
    for (i, confirm) in confirms.into_iter().enumerate() {
        let outcome = match confirm.await? {
            Confirmation::Ack(None) => None,
            Confirmation::Ack(Some(_)) => Some(format!("no queue `{to}` to move it to (the copy was returned)")),
            Confirmation::Nack(_) => Some(format!("queue `{to}` refused the copy (is it full?)")),
            Confirmation::NotRequested => Some("the broker did not confirm the copy".to_string()),
        };
        if let Some(reason) = outcome {
            failed.get_or_insert((i, reason));
        }
    }
    let possible_duplicates = |upto: usize| batch[..upto].iter().filter(|d| d.redelivered).count() as u64;
    match failed {
        None => {
            channel.basic_ack(last.delivery_tag, BasicAckOptions { multiple: true }).await?;
            Ok(Moved { messages: batch.len() as u64, possible_duplicates: possible_duplicates(batch.len()) })
        }
        Some((i, reason)) => {
            if i > 0 {
                channel.basic_ack(batch[i - 1].delivery_tag, BasicAckOptions { multiple: true }).await?;
            }
            channel.basic_nack(last.delivery_tag, BasicNackOptions { multiple: true, requeue: true }).await?;
            bail!(
                "moving messages to `{to}` stopped after {i} of a batch of {}: {reason}; the other {} went back where they were",
                batch.len(),
                batch.len() - i
            )
        }
    }
}

/// The message's properties for its copy: all of them, but the broker's per-delivery headers,
/// and a `user_id` of another user moved into a header (see `USER_ID_HEADER`).
fn copy_properties(d: &Delivery, user: &str) -> BasicProperties {
    let original = &d.properties;
    let foreign_user = original.user_id().as_ref().map(|u| u.to_string()).filter(|u| u != user);
    let mut kept = FieldTable::default();
    for (key, value) in original.headers().as_ref().map(|h| h.inner().iter()).into_iter().flatten() {
        if !DELIVERY_HEADERS.contains(&key.as_str()) {
            kept.insert(key.clone(), value.clone());
        }
    }
    let mut properties = super::properties::copied(original, Expiration::Keep);
    if let Some(u) = &foreign_user {
        kept.insert(USER_ID_HEADER.into(), lapin::types::AMQPValue::LongString(u.as_str().into()));
    }
    if let Some(u) = super::properties::own_user_id(original, user) {
        properties = properties.with_user_id(u.clone());
    }
    if original.headers().is_some() || foreign_user.is_some() {
        properties = properties.with_headers(kept);
    }
    properties
}
