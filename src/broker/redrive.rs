//! Redriving a dead-letter queue: each dead letter that a caller selects is published, as a fresh
//! copy, to one queue through the default exchange (so to exactly that queue, never to whatever
//! else a main exchange would copy it to), with a publisher confirm and `mandatory`, and
//! acknowledged in the dead-letter queue only once the broker has confirmed the copy.
//!
//! Dead letters are taken one by one with `basic.get`, never pushed by a consumer: a consumer's
//! window is a count (RabbitMQ does not implement a prefetch by size), and every delivery pushed
//! is in hopper's memory, so a queue whose later dead letters are larger than its first (or a
//! filtered run, whose window must hold every dead letter that stays) would hold far more than
//! `--max-bytes-in-flight`. Taken, a dead letter's body is held only while its copy is published.
//!
//! Dead letters that are not selected stay where they are: they are held unacknowledged (their
//! delivery tags only) for the length of the run and given back at its end with one
//! `basic.nack(requeue)` each, in the order they were taken: a classic queue puts them back at
//! their own positions, a quorum queue at its head, in their order up to 32 of them and perhaps
//! not past that (see `give_back`). They are never republished to the tail, which would reorder
//! them all and make copies.
//!
//! One run at a time per dead-letter queue: a run holds an exclusive queue of its own
//! (`hopper.redrive-lock.<dead-letter queue>`, `lock`) that the broker deletes with its
//! connection, so a second run is refused at once, and a killed one leaves no lock behind.
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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldArray, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation};

use super::amqp::{Peeked, Session, peeked, short, soft_error};
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
    pub mode: Mode,
    /// Bytes of bodies held at once at most (see `budget`).
    pub budget: Budget,
}

/// What a run does with the dead letters it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Move,
    /// A dry run: counts them and gives every dead letter back, as it gives back those that stay
    /// in a real run.
    Look,
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

/// The journal of a dead-letter queue's redrives.
pub fn journal_queue(dlq: &str) -> String {
    own_queue("hopper.redrive.", dlq)
}

/// The queue whose holder is the one run redriving a dead-letter queue (see the module's comment).
pub fn lock_queue(dlq: &str) -> String {
    own_queue("hopper.redrive-lock.", dlq)
}

/// `prefix` and the dead-letter queue's name; a hash of the name where both are too long for a
/// queue name.
fn own_queue(prefix: &str, dlq: &str) -> String {
    let name = format!("{prefix}{dlq}");
    if name.len() <= 255 {
        return name;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in dlq.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{prefix}{hash:016x}")
}

/// Takes the lock of `dlq`'s redrives for as long as `session`'s connection lives; refused while
/// another run holds it. Taken before anything is checked or read: on a quorum queue, a run's
/// `basic.get`s count as consumers, which a second run would otherwise report as someone else's.
pub async fn lock(session: &Session, dlq: &str) -> Result<()> {
    let queue = lock_queue(dlq);
    let options = QueueDeclareOptions { exclusive: true, ..Default::default() };
    // A run that was just killed holds it until the broker has seen its connection go.
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        let lane = session.lane().await?;
        let declared = lane.channel().queue_declare(short(&queue)?, options, FieldTable::default()).await;
        let _ = lane.channel().close(200, "locked".into()).await;
        match declared {
            Ok(_) => return Ok(()),
            Err(e) if soft_error(&e).is_some_and(|(code, _)| code == RESOURCE_LOCKED) => {
                if Instant::now() >= deadline {
                    bail!(
                        "another redrive of `{dlq}` is running (it holds `{queue}`): wait for it to end; nothing was moved. A run whose connection dropped without closing holds it until the broker notices, at most the connection's heartbeat timeout"
                    )
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) if soft_error(&e).is_some_and(|(code, _)| code == ACCESS_REFUSED) => {
                bail!(
                    "the user may not declare `{queue}`, the queue a redrive (a dry run too) holds so that no other run reads `{dlq}` meanwhile: grant the configure permission on it; nothing was moved"
                )
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("declaring `{queue}`, which keeps other redrives of `{dlq}` out"));
            }
        }
    }
}

/// Gives the lock back, before the connection closes: the broker deletes an exclusive queue a
/// moment after its connection has gone, and a run started just after would find it held.
pub async fn unlock(session: &Session, dlq: &str) {
    if let (Ok(lane), Ok(queue)) = (session.lane().await, short(&lock_queue(dlq))) {
        let _ = lane.channel().queue_delete(queue, QueueDeleteOptions::default()).await;
        let _ = lane.channel().close(200, "unlocked".into()).await;
    }
}

/// How long `lock` waits for a lock held by a run that has just ended.
const LOCK_WAIT: Duration = Duration::from_secs(3);

/// AMQP's reply to a declaration of an exclusive queue that another connection holds.
const RESOURCE_LOCKED: u16 = 405;
/// AMQP's reply to a declaration the user's permissions do not allow.
const ACCESS_REFUSED: u16 = 403;

/// Moves the dead letters of `from` that `selected` picks to queue `to`, within `limits`, as the
/// one run on `from`: the caller holds its `lock`. An error before the first dead letter is taken
/// is returned as such (nothing was moved); after it, the run stops, gives back everything it
/// holds and says why in `stopped`. The journal it returns holds what interrupted runs left
/// (reported in `possible_duplicates`) until it is closed: close it once the report has been
/// given.
pub async fn redrive(
    session: &Session,
    from: &str,
    to: &str,
    limits: Limits,
    user: &str,
    selected: &dyn Fn(&DeadLetter) -> bool,
) -> Result<(Redriven, Option<Journal>)> {
    let lane = session.lane().await?;
    let journal_lane = session.lane().await?;
    let channel = lane.channel();
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    // A dry run leaves nothing on the broker: no journal (its lock goes with its connection).
    let journal = match limits.mode {
        Mode::Move => Some(Journal::open(journal_lane.channel().clone(), &journal_queue(from)).await?),
        Mode::Look => None,
    };
    let mut run = Run {
        channel,
        from,
        to,
        user,
        limits,
        carried: None,
        held: Vec::new(),
        started: Instant::now(),
        published: 0,
        journal,
        out: Redriven::default(),
    };
    if let Some(journal) = run.journal.as_mut() {
        journal.read_earlier().await?;
    }
    if let Err(e) = run.go(selected).await {
        run.out.stopped = Some(format!("{e:#}"));
    }
    run.held.extend(run.carried.take().map(|d| d.delivery_tag));
    settle_acks(channel, from, &mut run.held).await;
    give_back(channel, from, &mut run.held).await;
    let Run { journal, mut out, .. } = run;
    if let Some(journal) = &journal {
        out.possible_duplicates = journal.earlier.clone();
    }
    let _ = channel.close(200, "redriven".into()).await;
    Ok((out, journal))
}

/// Gives back held messages one nack each, in the order they were taken: a classic queue puts
/// them back at their own positions, a quorum queue at its head. Measured: a quorum queue takes
/// back more than 32 messages read with `basic.get` in an order of its own when the nacks come
/// back to back (single or multiple alike), on 3.10, 4.0 and 4.3; waiting after each nack for the
/// answer to a passive declaration of the queue kept 1,500 in order in most runs, not all. The
/// report says so past 32 (`ops::redrive::RedriveEffect`). Then it waits (a few seconds at most)
/// until the queue counts them ready again: a quorum queue applies nacks after the channel has
/// moved on, and one not applied when the channel closes is given back by the close instead,
/// counted as a failed delivery on 4.3 too and out of turn. If the channel is gone, the broker
/// has given them back.
async fn give_back(channel: &Channel, queue: &str, held: &mut [u64]) {
    held.sort_unstable();
    let Ok(name) = short(queue) else { return };
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let ready = async || {
        channel
            .queue_declare(name.clone(), passive, FieldTable::default())
            .await
            .ok()
            .map(|q| u64::from(q.message_count()))
    };
    let Some(before) = ready().await else { return };
    for &tag in held.iter() {
        if channel.basic_nack(tag, BasicNackOptions { multiple: false, requeue: true }).await.is_err()
            || ready().await.is_none()
        {
            return;
        }
    }
    let expected = before + held.len() as u64;
    let deadline = Instant::now() + GIVEN_BACK_WAIT;
    while ready().await.is_some_and(|n| n < expected) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long `give_back` waits for a queue to count what it gave back.
const GIVEN_BACK_WAIT: Duration = Duration::from_secs(5);

/// One more `basic.get` after the run's last acknowledgement: a queue answers it only once it has
/// applied it, and every acknowledgement before it, so the channel may close without a quorum
/// queue taking back dead letters already moved (measured; see `mover::Mover`). A dead letter it
/// takes is the queue's next and goes back last, with those held.
async fn settle_acks(channel: &Channel, queue: &str, held: &mut Vec<u64>) {
    let Ok(name) = short(queue) else { return };
    if let Ok(Some(m)) = channel.basic_get(name, BasicGetOptions { no_ack: false }).await {
        held.push(m.delivery.delivery_tag);
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
    /// Taken, and too large for the batch before it: the first of the next batch.
    carried: Option<Delivery>,
    /// Delivery tags of messages held unacknowledged until the end: not selected, looked at by a
    /// dry run, or whose copy failed.
    held: Vec<u64>,
    started: Instant,
    published: u64,
    journal: Option<Journal>,
    out: Redriven,
}

impl Run<'_> {
    /// The next dead letter: the one carried over, or the queue's next. `None` when the queue
    /// has none left (purged, expired, or taken by someone else since the start).
    async fn next(&mut self) -> Result<Option<Delivery>> {
        if let Some(d) = self.carried.take() {
            return Ok(Some(d));
        }
        let got = self
            .channel
            .basic_get(short(self.from)?, BasicGetOptions { no_ack: false })
            .await
            .with_context(|| format!("taking a dead letter from `{}` (was the queue deleted?)", self.from))?;
        Ok(got.map(|g| g.delivery))
    }

    /// Every dead letter the queue had at the start looked at. A run that reaches `--max` goes on
    /// looking, and leaves the rest: it may close its channel only after a `basic.get` that
    /// comes after its last acknowledgement (`settle_acks`), and one that took a dead letter
    /// never looked at would give it back behind the others on a quorum queue (measured).
    fn full(&self) -> bool {
        self.out.scanned >= self.limits.scan
    }

    /// As many chosen as `--max` allows, `taken` of them in the batch not moved yet.
    fn max_reached(&self, taken: u64) -> bool {
        self.limits.max.is_some_and(|max| self.out.moved + taken >= max)
    }

    async fn go(&mut self, selected: &dyn Fn(&DeadLetter) -> bool) -> Result<()> {
        // With a rate, a batch is at most a second's worth: acks follow copies closely.
        let batch_size = self.limits.rate.map_or(usize::from(BATCH), |r| (r as usize).clamp(1, usize::from(BATCH)));
        while !self.full() {
            let mut batch = Vec::new();
            let mut bytes = 0;
            let mut empty = false;
            while batch.len() < batch_size && !self.full() {
                let Some(d) = self.next().await? else {
                    empty = true;
                    break;
                };
                let size = d.data.len() as u64;
                let letter = dead_letter(&d);
                let chosen = selected(&letter) && !self.max_reached(batch.len() as u64);
                // One that does not fit the batch's bytes starts the next batch.
                let moves = self.limits.mode == Mode::Move && chosen;
                if moves && !self.limits.budget.fits(bytes, batch.len(), size) {
                    self.carried = Some(d);
                    break;
                }
                self.out.scanned += 1;
                if moves {
                    bytes += size;
                    batch.push((d, letter));
                } else if chosen {
                    // A dry run: counted as a move would count it, and given back.
                    self.out.moved += 1;
                    self.out.moved_deaths.push(letter.death);
                    self.held.push(d.delivery_tag);
                } else {
                    self.held.push(d.delivery_tag);
                    self.out.kept += 1;
                }
            }
            self.forward(batch).await?;
            if empty {
                break;
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
