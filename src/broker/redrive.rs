//! Redriving a dead-letter queue: each dead letter that a caller selects is published, as a fresh
//! copy, to one queue through the default exchange (so to exactly that queue, never to whatever
//! else a main exchange would copy it to), with a publisher confirm and `mandatory`, and
//! acknowledged in the dead-letter queue only once the broker has confirmed the copy.
//!
//! Dead letters that are not selected stay where they are: they are held unacknowledged for the
//! length of the run and given back at its end with one `basic.nack(multiple, requeue)`, which puts
//! them back in their order (a classic queue at their own positions, a quorum queue at its head).
//! They are never republished to the tail, which would reorder them and make copies.
//!
//! Killed at any instant, a dead letter is either still in the dead-letter queue, or moved, or
//! (its copy published, the original not yet acknowledged) in both. At most one batch is in
//! that state at a time, and it is written down first: before publishing a batch's copies, the
//! run records the batch's message ids in a journal queue of its own
//! (`hopper.redrive.<dead-letter queue>`, durable, confirmed) and removes the record once the
//! originals are acknowledged. The next run reads what interrupted runs left there and reports
//! those dead letters as possible duplicates; it keeps the records until it ends, so a run
//! killed in turn leaves them for the one after. The `redelivered` flag cannot tell: measured,
//! RabbitMQ 4.x delivers many dead letters already marked redelivered (those dead-lettered from
//! a quorum queue on 4.0, every one on 4.3).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures_lite::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldArray, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Consumer};

use super::amqp::{Peeked, Session, peeked, short};
use super::budget::Budget;
use super::mover::{BATCH, DELIVERY_HEADERS};
use super::properties::Expiration;
use crate::contract::ATTEMPT_HEADER;

/// How many times a message has been redriven; each redrive sets it one higher.
pub const REDRIVEN_HEADER: &str = "hopper-redriven";

/// The message's `x-death` entries as they were when it was redriven (newest first), with those
/// kept by earlier redrives after them. RabbitMQ 4.x replaces a client-published `x-death` (and
/// `x-first-death-*`) with the new death alone at the copy's next dead-lettering; 3.10 adds to
/// it. This header keeps the history on every release.
pub const DEATHS_HEADER: &str = "hopper-deaths";

/// How long a consumer with nothing to receive waits before asking the broker for the count.
const IDLE: Duration = Duration::from_millis(150);

/// One dead letter as a filter sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub message_id: Option<String>,
    pub death: Peeked,
    /// `hopper-redriven`: how many times it was redriven before.
    pub redriven: i64,
}

/// Where a redrive stops.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Dead letters to look at: the count the queue had when the run started. What dead-letters
    /// during the run arrives behind them and is not looked at, so nothing is redriven twice.
    pub scan: u64,
    /// Move at most this many.
    pub max: Option<u64>,
    /// Copies published per second at most.
    pub rate: Option<u32>,
    /// Whether some dead letters may stay: each one that does is held until the end.
    pub filtered: bool,
    pub mode: Mode,
    /// Bytes of bodies held at once at most (see `budget`).
    pub budget: Budget,
}

/// What a run does with the dead letters it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Move,
    /// A dry run: counts them and gives every dead letter back, as it gives back those that stay
    /// in a real run. It reads with a consumer, not `basic.get`: measured, a quorum queue gives
    /// back more than 32 messages taken with `basic.get` out of order, on every release.
    Look,
}

/// The consumer's prefetch. Dead letters that stay are held unacknowledged until the end of the
/// run, and each keeps its place in the window: a filtered run's window holds every dead letter
/// it will look at (up to AMQP's largest prefetch, then no limit). One consumer for the whole run:
/// measured, re-subscribing to widen the window (cancel, consume again) had a 4.3 quorum queue
/// take back the two consumers' messages out of order, and failed 3.10's connection. An
/// unfiltered run holds nothing between batches: its window is sized by bytes, as many of its
/// first dead letter (`first`, read with `basic.get` before the consumer subscribes) as fit half
/// the bound, at most two batches; one message when the queue gave none (`budget`).
fn window(limits: &Limits, first: Option<u64>) -> u16 {
    if sized_by_bytes(limits) {
        return limits.budget.window(first, 2 * BATCH);
    }
    u16::try_from(limits.scan.saturating_add(u64::from(BATCH))).unwrap_or(0)
}

/// Whether the run's window follows the bodies' sizes: when it holds no dead letter that stays.
fn sized_by_bytes(limits: &Limits) -> bool {
    !limits.filtered && limits.mode == Mode::Move
}

/// What one redrive did.
#[derive(Debug, Clone, Default)]
pub struct Redriven {
    /// Dead letters looked at.
    pub scanned: u64,
    pub moved: u64,
    /// Dead letters whose copy an interrupted run may have published without acknowledging them
    /// (see the module's comment): at most one batch per interruption. Their message ids, where
    /// they have one (`None` where not).
    pub possible_duplicates: Vec<Option<String>>,
    /// Looked at and not moved: given back, in their order.
    pub kept: u64,
    /// The deaths of the moved ones, for a summary.
    pub moved_deaths: Vec<Peeked>,
    /// Why the run stopped before its end; everything not moved is still in the queue.
    pub stopped: Option<String>,
}

pub fn dead_letter(d: &Delivery) -> DeadLetter {
    let headers = d.properties.headers().clone().unwrap_or_default();
    DeadLetter {
        message_id: d.properties.message_id().as_ref().map(ToString::to_string),
        death: peeked(d),
        redriven: headers.inner().get(REDRIVEN_HEADER).and_then(integer).unwrap_or(0),
    }
}

/// The journal of a dead-letter queue's redrives; a hash for a name too long to prefix.
pub fn journal_queue(dlq: &str) -> String {
    let name = format!("hopper.redrive.{dlq}");
    if name.len() <= 255 {
        return name;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in dlq.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("hopper.redrive.{hash:016x}")
}

/// Moves the dead letters of `from` that `selected` picks to queue `to`, within `limits`. The
/// consumer is exclusive: nobody else takes a message from `from` meanwhile. An error before the
/// consumer has subscribed is returned as such (nothing was moved; an unfiltered run's first dead
/// letter, read to size its window, goes back with the channel); after it, the run stops, gives
/// back everything it holds and says why in `stopped`. The journal it returns holds what
/// interrupted runs left (reported in `possible_duplicates`) until it is closed: close it once
/// the report has been given.
pub async fn redrive(
    session: &Session,
    from: &str,
    to: &str,
    limits: Limits,
    user: &str,
    selected: &dyn Fn(&DeadLetter) -> bool,
) -> Result<(Redriven, Option<Journal>)> {
    let lane = session.lane().await?;
    let mut counter = session.lane().await?;
    let journal_lane = session.lane().await?;
    let channel = lane.channel();
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    // A dry run changes nothing on the broker: no journal.
    let journal = match limits.mode {
        Mode::Move => Some(Journal::open(journal_lane.channel().clone(), &journal_queue(from)).await?),
        Mode::Look => None,
    };
    // The first dead letter sizes an unfiltered run's window; it is the first one looked at.
    let mut pending = VecDeque::new();
    if sized_by_bytes(&limits)
        && counter.queue_counts(from).await?.is_some_and(|(_, consumers)| consumers == 0)
        && let Some(first) = channel.basic_get(short(from)?, BasicGetOptions { no_ack: false }).await?
    {
        pending.push_back(first.delivery);
    }
    let mut run = Run {
        channel,
        from,
        to,
        user,
        limits,
        prefetch: window(&limits, pending.front().map(|d| d.data.len() as u64)),
        consumer: None,
        pending,
        held: Vec::new(),
        started: Instant::now(),
        published: 0,
        journal,
        out: Redriven::default(),
    };
    // The exclusive consumer first: while it lives no other run reads this queue or its journal.
    run.subscribe().await?;
    if let Some(journal) = run.journal.as_mut() {
        journal.read_earlier().await?;
    }
    if let Err(e) = run.go(&mut counter, selected).await {
        run.out.stopped = Some(format!("{e:#}"));
    }
    // Whatever arrived past the start count was not looked at: it goes back with the rest.
    if let Err(e) = run.unsubscribe().await {
        run.out.stopped.get_or_insert(format!("{e:#}"));
    }
    run.held.extend(run.pending.drain(..).map(|d| d.delivery_tag));
    give_back(channel, &mut run.held).await;
    let Run { journal, mut out, .. } = run;
    if let Some(journal) = &journal {
        out.possible_duplicates = journal.earlier.clone();
    }
    let _ = channel.close(200, "redriven".into()).await;
    let _ = counter.channel().close(200, "counted".into()).await;
    Ok((out, journal))
}

/// Gives back held messages one nack each, in the order they came: 4.0 and 4.3 quorum queues put
/// them back at their head in that order, classic queues at their own positions. (Measured: a
/// RabbitMQ 3.10 quorum queue takes back more than 32 messages in no particular order, by
/// single or multiple nacks alike.) If the channel is gone, the broker has given them back.
async fn give_back(channel: &Channel, held: &mut [u64]) {
    held.sort_unstable();
    for &tag in held.iter() {
        if channel.basic_nack(tag, BasicNackOptions { multiple: false, requeue: true }).await.is_err() {
            return;
        }
    }
}

/// The record of the batch whose copies are being published (see the module's comment).
pub struct Journal {
    channel: Channel,
    queue: String,
    /// What interrupted runs were copying when they stopped.
    earlier: Vec<Option<String>>,
    /// Their records, held unacknowledged until this run ends.
    earlier_tags: Vec<u64>,
}

impl Journal {
    async fn open(channel: Channel, queue: &str) -> Result<Journal> {
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        let options = QueueDeclareOptions { durable: true, ..Default::default() };
        channel
            .queue_declare(short(queue)?, options, FieldTable::default())
            .await
            .with_context(|| format!("declaring `{queue}`, where a redrive records the batch it is copying"))?;
        Ok(Journal { channel, queue: queue.to_string(), earlier: Vec::new(), earlier_tags: Vec::new() })
    }

    async fn read_earlier(&mut self) -> Result<()> {
        while let Some(m) = self.channel.basic_get(short(&self.queue)?, BasicGetOptions { no_ack: false }).await? {
            self.earlier_tags.push(m.delivery.delivery_tag);
            let ids: Vec<Option<String>> = serde_json::from_slice(&m.delivery.data)
                .with_context(|| format!("`{}` holds a record hopper did not write", self.queue))?;
            self.earlier.extend(ids);
        }
        Ok(())
    }

    async fn write(&self, ids: Vec<Option<String>>) -> Result<()> {
        let body = serde_json::to_vec(&ids)?;
        let options = BasicPublishOptions { mandatory: true, immediate: false };
        let properties = BasicProperties::default().with_delivery_mode(2).with_content_type("application/json".into());
        let confirm =
            self.channel.basic_publish("".into(), short(&self.queue)?, options, &body, properties).await?.await?;
        match confirm {
            Confirmation::Ack(None) => Ok(()),
            other => {
                bail!(
                    "`{}` did not take the record of a batch ({other:?}); nothing of the batch was copied",
                    self.queue
                )
            }
        }
    }

    /// Removes the record `write` added: the only message of the journal that is not held.
    async fn settle(&self) -> Result<()> {
        match self.channel.basic_get(short(&self.queue)?, BasicGetOptions { no_ack: false }).await? {
            Some(m) => Ok(self.channel.basic_ack(m.delivery.delivery_tag, BasicAckOptions::default()).await?),
            None => bail!("the record of the last batch is missing from `{}` (was the queue purged?)", self.queue),
        }
    }

    /// Drops the earlier records, once the run's report (which counts them) has been given, and
    /// deletes the journal once empty.
    pub async fn close(self) -> Result<()> {
        if let Some(&last) = self.earlier_tags.iter().max() {
            self.channel.basic_ack(last, BasicAckOptions { multiple: true }).await?;
        }
        let options = QueueDeleteOptions { if_empty: true, if_unused: true, ..Default::default() };
        // Refused (and the channel closed) when a record is left: it stays for the next run.
        let _ = self.channel.queue_delete(short(&self.queue)?, options).await;
        let _ = self.channel.close(200, "settled".into()).await;
        Ok(())
    }
}

struct Run<'a> {
    channel: &'a Channel,
    from: &'a str,
    to: &'a str,
    user: &'a str,
    limits: Limits,
    prefetch: u16,
    consumer: Option<Consumer>,
    /// Received by a cancelled consumer and not looked at yet.
    pending: VecDeque<Delivery>,
    /// Delivery tags of messages held unacknowledged until the end: not selected, past the start
    /// count, or whose copy failed.
    held: Vec<u64>,
    started: Instant,
    published: u64,
    journal: Option<Journal>,
    out: Redriven,
}

impl Run<'_> {
    async fn subscribe(&mut self) -> Result<()> {
        self.channel.basic_qos(self.prefetch, BasicQosOptions::default()).await?;
        let options = BasicConsumeOptions { no_ack: false, exclusive: true, ..Default::default() };
        let consumer = self
            .channel
            .basic_consume(short(self.from)?, "hopper-redrive".into(), options, FieldTable::default())
            .await
            .with_context(|| format!("consuming from `{}` to redrive it (does it have consumers?)", self.from))?;
        self.consumer = Some(consumer);
        Ok(())
    }

    /// Cancels the consumer; deliveries the broker sent before it saw the cancel are kept.
    async fn unsubscribe(&mut self) -> Result<()> {
        let Some(mut consumer) = self.consumer.take() else { return Ok(()) };
        self.channel.basic_cancel(consumer.tag(), BasicCancelOptions::default()).await?;
        while let Ok(Some(delivery)) = tokio::time::timeout(IDLE, consumer.next()).await {
            self.pending.push_back(delivery?);
        }
        Ok(())
    }

    async fn next(&mut self) -> Result<Option<Delivery>> {
        if let Some(d) = self.pending.pop_front() {
            return Ok(Some(d));
        }
        // Cancelled, with everything it was sent looked at: nothing more comes.
        let Some(consumer) = self.consumer.as_mut() else { return Ok(None) };
        match tokio::time::timeout(IDLE, consumer.next()).await {
            Ok(Some(delivery)) => Ok(Some(delivery?)),
            Ok(None) => bail!("the broker cancelled the redrive of `{}` (was the queue deleted?)", self.from),
            Err(_) => Ok(None),
        }
    }

    fn full(&self, taken: u64) -> bool {
        self.out.scanned >= self.limits.scan || self.limits.max.is_some_and(|max| self.out.moved + taken >= max)
    }

    async fn go(&mut self, counter: &mut Session, selected: &dyn Fn(&DeadLetter) -> bool) -> Result<()> {
        // With a rate, a batch is at most a second's worth: acks follow copies closely.
        let batch_size = self.limits.rate.map_or(usize::from(BATCH), |r| (r as usize).clamp(1, usize::from(BATCH)));
        while !self.full(0) {
            let mut batch = Vec::new();
            let mut bytes = 0;
            let mut idle = false;
            while batch.len() < batch_size && !self.full(batch.len() as u64) {
                // A full window: nothing more comes until the batch is acknowledged.
                let unacked = batch.len() + self.held.len();
                if self.pending.is_empty() && self.prefetch > 0 && unacked >= usize::from(self.prefetch) {
                    break;
                }
                let Some(d) = self.next().await? else {
                    idle = true;
                    break;
                };
                let size = d.data.len() as u64;
                let letter = dead_letter(&d);
                // One that does not fit the batch's bytes starts the next batch.
                let moves = self.limits.mode == Mode::Move && selected(&letter);
                if moves && !self.limits.budget.fits(bytes, batch.len(), size) {
                    self.pending.push_front(d);
                    break;
                }
                self.out.scanned += 1;
                if moves {
                    bytes += size;
                }
                if selected(&letter) && self.limits.mode == Mode::Look {
                    // Counted as a move would count it, and given back.
                    self.out.moved += 1;
                    self.out.moved_deaths.push(letter.death);
                    self.held.push(d.delivery_tag);
                } else if selected(&letter) {
                    batch.push((d, letter));
                } else {
                    self.held.push(d.delivery_tag);
                    self.out.kept += 1;
                }
            }
            self.forward(batch).await?;
            if idle && self.consumer.is_none() && self.pending.is_empty() {
                break;
            }
            // Nothing arrives and nothing is ready: either everything is on its way to us, or the
            // queue holds fewer than it did at the start (purged, expired). Cancel: every message
            // the broker sent arrives before the cancel's answer, and is looked at next.
            if idle
                && self.consumer.is_some()
                && counter.queue_counts(self.from).await?.is_none_or(|(ready, _)| ready == 0)
            {
                self.unsubscribe().await?;
            }
        }
        Ok(())
    }

    /// Publishes the copies, waits for every confirm, then acknowledges each original whose copy
    /// was confirmed and routed. A copy that failed leaves its original held, and stops the run.
    async fn forward(&mut self, batch: Vec<(Delivery, DeadLetter)>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        // Written down before any copy exists: a kill from here on leaves the record behind.
        let journal = self.journal.as_ref().expect("a run that moves has a journal");
        journal.write(batch.iter().map(|(_, letter)| letter.message_id.clone()).collect()).await?;
        let mut confirms = Vec::with_capacity(batch.len());
        for (d, _) in &batch {
            if let Some(rate) = self.limits.rate {
                let due = self.started + Duration::from_secs_f64(self.published as f64 / f64::from(rate));
                tokio::time::sleep_until(due.into()).await;
            }
            let options = BasicPublishOptions { mandatory: true, immediate: false };
            let properties = redriven_copy(&d.properties, self.user);
            confirms.push(self.channel.basic_publish("".into(), short(self.to)?, options, &d.data, properties).await?);
            self.published += 1;
        }
        let mut failure = None;
        let mut confirmed = Vec::with_capacity(batch.len());
        for ((d, letter), confirm) in batch.into_iter().zip(confirms) {
            let problem = match confirm.await? {
                Confirmation::Ack(None) => None,
                Confirmation::Ack(Some(_)) => {
                    Some(format!("no queue `{}` to redrive to (the copy was returned)", self.to))
                }
                Confirmation::Nack(_) => Some(format!("queue `{}` refused the copy (is it full?)", self.to)),
                Confirmation::NotRequested => Some("the broker did not confirm the copy".to_string()),
            };
            match problem {
                None => confirmed.push((d, letter)),
                Some(problem) => {
                    self.held.push(d.delivery_tag);
                    failure.get_or_insert(problem);
                }
            }
        }
        // One ack for the batch when nothing before it is held (it would be acknowledged too).
        match (self.held.is_empty(), confirmed.last()) {
            (true, Some((last, _))) => {
                self.channel.basic_ack(last.delivery_tag, BasicAckOptions { multiple: true }).await?;
            }
            _ => {
                for (d, _) in &confirmed {
                    self.channel.basic_ack(d.delivery_tag, BasicAckOptions { multiple: false }).await?;
                }
            }
        }
        for (_, letter) in confirmed {
            self.out.moved += 1;
            self.out.moved_deaths.push(letter.death);
        }
        if failure.is_none() {
            journal.settle().await?;
        }
        match failure {
            None => Ok(()),
            Some(problem) => {
                bail!("redriving to `{}` stopped: {problem}; the dead letter is still in `{}`", self.to, self.from)
            }
        }
    }
}

/// The copy a redrive publishes: body and properties as they were, with a fresh attempt count
/// (`hopper-attempt` removed: the consumer counts from 1 again), `hopper-redriven` one higher,
/// `hopper-deaths` keeping the death history, and `x-death` and `x-first-death-*` kept as they
/// were (every release in the matrix delivers them as published). Not kept: the broker's
/// per-delivery counts (`x-delivery-count`, `x-acquired-count`), `expiration` (the copy must not
/// expire on its way back), and `user_id` when it names another user (RabbitMQ refuses a publish
/// whose user_id is not the publishing user's, and would close the channel). Persistent.
pub fn redriven_copy(p: &BasicProperties, user: &str) -> BasicProperties {
    let mut copy = super::properties::copied(p, Expiration::Drop).with_delivery_mode(2);
    if let Some(id) = super::properties::own_user_id(p, user) {
        copy = copy.with_user_id(id.clone());
    }
    copy.with_headers(redriven_headers(p.headers().as_ref()))
}

fn redriven_headers(old: Option<&FieldTable>) -> FieldTable {
    let old = old.cloned().unwrap_or_default();
    let dropped =
        |k: &str| k == ATTEMPT_HEADER || k == REDRIVEN_HEADER || k == DEATHS_HEADER || DELIVERY_HEADERS.contains(&k);
    let mut headers: BTreeMap<ShortString, AMQPValue> =
        old.inner().iter().filter(|(k, _)| !dropped(k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
    let before = old.inner().get(REDRIVEN_HEADER).and_then(integer).unwrap_or(0);
    headers.insert(REDRIVEN_HEADER.into(), AMQPValue::LongLongInt(before.saturating_add(1)));
    let entries = |key: &str| match old.inner().get(key) {
        Some(AMQPValue::FieldArray(a)) => a.as_slice().to_vec(),
        _ => Vec::new(),
    };
    // The broker's record first; then what earlier redrives kept that it no longer has (on 4.x,
    // everything before the last redrive). An entry is one {queue, reason} first seen at `time`.
    let mut deaths = entries("x-death");
    let known: Vec<_> = deaths.iter().map(death_key).collect();
    deaths.extend(entries(DEATHS_HEADER).into_iter().filter(|e| !known.contains(&death_key(e))));
    if !deaths.is_empty() {
        headers.insert(DEATHS_HEADER.into(), AMQPValue::FieldArray(FieldArray::from(deaths)));
    }
    FieldTable::from(headers)
}

fn death_key(entry: &AMQPValue) -> Option<(String, String, Option<u64>)> {
    let AMQPValue::FieldTable(t) = entry else { return None };
    let text = |k: &str| match t.inner().get(k) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        Some(AMQPValue::ShortString(s)) => s.to_string(),
        _ => String::new(),
    };
    let time = match t.inner().get("time") {
        Some(AMQPValue::Timestamp(ts)) => Some(*ts),
        _ => None,
    };
    Some((text("queue"), text("reason"), time))
}

fn integer(v: &AMQPValue) -> Option<i64> {
    match v {
        AMQPValue::ShortShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortShortUInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortUInt(n) => Some(i64::from(*n)),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        AMQPValue::LongLongInt(n) => Some(*n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn death(queue: &str, reason: &str, time: u64) -> AMQPValue {
        let mut t = FieldTable::default();
        t.insert("queue".into(), AMQPValue::LongString(queue.into()));
        t.insert("reason".into(), AMQPValue::LongString(reason.into()));
        t.insert("count".into(), AMQPValue::LongLongInt(1));
        t.insert("time".into(), AMQPValue::Timestamp(time));
        AMQPValue::FieldTable(t)
    }

    fn keys(h: &FieldTable, key: &str) -> Vec<Option<(String, String, Option<u64>)>> {
        match h.inner().get(key) {
            Some(AMQPValue::FieldArray(a)) => a.as_slice().iter().map(death_key).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn a_redriven_copy_starts_its_attempts_again_and_keeps_its_history() {
        let mut h = FieldTable::default();
        h.insert(ATTEMPT_HEADER.into(), AMQPValue::LongLongInt(4));
        h.insert("x-delivery-count".into(), AMQPValue::LongLongInt(7));
        h.insert("x-first-death-queue".into(), AMQPValue::LongString("orders".into()));
        h.insert("x-death".into(), AMQPValue::FieldArray(vec![death("orders", "rejected", 200)].into()));
        h.insert("app".into(), AMQPValue::LongString("kept".into()));
        let p = BasicProperties::default()
            .with_headers(h)
            .with_expiration("1000".into())
            .with_user_id("someone-else".into())
            .with_message_id("m-1".into());
        let copy = redriven_copy(&p, "guest");
        let headers = copy.headers().clone().unwrap();
        assert!(!headers.contains_key(ATTEMPT_HEADER));
        assert!(!headers.contains_key("x-delivery-count"));
        assert_eq!(headers.inner().get(REDRIVEN_HEADER), Some(&AMQPValue::LongLongInt(1)));
        assert!(headers.contains_key("x-first-death-queue") && headers.contains_key("app"));
        assert_eq!(keys(&headers, "x-death"), keys(&headers, DEATHS_HEADER));
        assert_eq!(copy.expiration(), &None);
        assert_eq!(copy.user_id(), &None);
        assert_eq!(copy.message_id().as_ref().map(|s| s.as_str()), Some("m-1"));
        assert_eq!(copy.delivery_mode(), &Some(2));

        // Redriven again after the broker (4.x) replaced x-death with the new death alone.
        let mut again = headers.clone();
        again.insert("x-death".into(), AMQPValue::FieldArray(vec![death("orders", "rejected", 900)].into()));
        let copy = redriven_copy(&BasicProperties::default().with_headers(again), "guest");
        let headers = copy.headers().clone().unwrap();
        assert_eq!(headers.inner().get(REDRIVEN_HEADER), Some(&AMQPValue::LongLongInt(2)));
        let times: Vec<_> = keys(&headers, DEATHS_HEADER).into_iter().map(|k| k.unwrap().2).collect();
        assert_eq!(times, vec![Some(900), Some(200)]);
    }

    #[test]
    fn a_history_the_broker_kept_is_not_recorded_twice() {
        // 3.10 keeps the earlier entry in x-death itself.
        let mut h = FieldTable::default();
        h.insert(REDRIVEN_HEADER.into(), AMQPValue::LongLongInt(1));
        h.insert(
            "x-death".into(),
            AMQPValue::FieldArray(vec![death("orders", "expired", 900), death("orders", "rejected", 200)].into()),
        );
        h.insert(DEATHS_HEADER.into(), AMQPValue::FieldArray(vec![death("orders", "rejected", 200)].into()));
        let headers = redriven_copy(&BasicProperties::default().with_headers(h), "guest").headers().clone().unwrap();
        assert_eq!(keys(&headers, DEATHS_HEADER).len(), 2);
    }
}
