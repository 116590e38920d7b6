//! Moving messages from one queue to another without losing one: each message is taken,
//! published to its destination with a publisher confirm and `mandatory`, and acknowledged at
//! its source only once the broker has confirmed the copy. Killed at any instant, a message is
//! either still at its source, or at its destination, or (confirmed but not yet acknowledged)
//! at both: the source redelivers it with `redelivered` set, which is how the next run counts
//! the possible duplicates.

use anyhow::{Context, Result, bail};
use lapin::Confirmation;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};

use super::amqp::{Session, short};
use super::budget::Budget;
use super::properties::Expiration;

/// Deliveries in flight at once at most, however small: the most a killed run can leave at both
/// ends. Large bodies make fewer (`budget`).
pub const BATCH: u16 = 200;

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

/// One channel that moves messages, for a sequence of moves that ends with an `Until::Empty`
/// one. Messages are taken one by one with `basic.get`, never pushed by a consumer: a consumer's
/// window is a count (RabbitMQ does not implement a prefetch by size), so a queue whose later
/// messages are larger than its first would have a whole window of them in hopper's memory.
///
/// The sequence ends with an `Until::Empty` move because of when the channel may close. Measured
/// on 3.10, 4.0 and 4.3: a quorum queue applies the acknowledgements of messages taken with
/// `basic.get` after the channel that sent them has moved on, and a channel closed meanwhile
/// has the queue take back messages already acknowledged (200 taken and acknowledged, closed at
/// once: 167, 40 and 9 back; the answer to a passive declaration did not wait for them). A
/// `basic.get` is answered only once the queue has applied it, and so every acknowledgement the
/// channel sent before it: an `Until::Empty` move ends with one that finds the queue empty.
pub struct Mover {
    lane: Session,
}

impl Mover {
    pub async fn open(session: &Session) -> Result<Mover> {
        let lane = session.lane().await?;
        lane.channel().confirm_select(ConfirmSelectOptions::default()).await?;
        Ok(Mover { lane })
    }

    pub async fn close(self) {
        let _ = self.lane.channel().close(200, "moved".into()).await;
    }

    /// Moves messages from queue `from` to queue `to` (through the default exchange, so to
    /// exactly that queue), in order, keeping each message's properties, headers and body.
    /// Each joins the batch while the batch stays within half of `budget` (see `budget`); the
    /// caller refuses a source that has consumers.
    pub async fn move_messages(&self, from: &str, to: &str, until: Until, budget: Budget) -> Result<Moved> {
        let channel = self.lane.channel();
        // Taken, and too large for the batch before it: the first of the next batch.
        let mut carried = None;
        let mut at_start = None;
        let mut moved = Moved::default();
        loop {
            let mut batch: Vec<Delivery> = carried.take().into_iter().collect();
            let mut held: u64 = batch.iter().map(|d| d.data.len() as u64).sum();
            let mut ready = 0;
            while batch.len() < usize::from(BATCH) {
                let Some(got) = channel
                    .basic_get(short(from)?, BasicGetOptions { no_ack: false })
                    .await
                    .with_context(|| format!("taking a message from `{from}` to move it (was the queue deleted?)"))?
                else {
                    ready = 0;
                    break;
                };
                // What the queue had ready when the move began: the one taken and those behind it.
                let behind = u64::from(got.message_count);
                at_start.get_or_insert(behind + 1);
                ready = behind;
                let size = got.delivery.data.len() as u64;
                if !budget.fits(held, batch.len(), size) {
                    carried = Some(got.delivery);
                    break;
                }
                held += size;
                batch.push(got.delivery);
            }
            // Nothing taken: the queue was empty when this last `basic.get` was applied, after
            // every acknowledgement before it.
            if batch.is_empty() {
                break;
            }
            moved += forward(channel, &batch, to, self.lane.user()).await?;
            drop(batch);
            let caught_up = match until {
                Until::Empty => false,
                Until::CaughtUp { ready: at_most } => ready <= at_most || moved.messages >= at_start.unwrap_or(0),
            };
            if caught_up && carried.is_none() {
                break;
            }
        }
        Ok(moved)
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
                "moving messages to `{to}` stopped after {i} of a batch of {}: {reason}; the other {} went back to their queue",
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
