//! `redrive`: a topology's dead letters back to the start of its retry flow. Every check is made
//! for every topology before any message moves; then each dead-letter queue is redriven in
//! turn (`broker::redrive`), or, on a dry run, peeked at.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use anyhow::{Result, bail};
use serde::Serialize;

use super::dead_letters::{GiveBack, Group, QUORUM_ORDER_KEPT, Reader, first_death, peek_refusal, summarize};
use crate::broker::amqp::Session;
use crate::broker::budget::Budget;
use crate::broker::redrive::{self, DeadLetter, Limits, Mode};
use crate::broker::{Endpoint, http, identity};
use crate::model::{QueueName, QueueType};
use crate::network::{DeathReason, Network, Reason};

/// One topology's dead-letter queue and where its dead letters go back to.
#[derive(Debug, Clone)]
pub struct Target {
    pub topology: String,
    pub vhost: String,
    pub dead_letter_queue: QueueName,
    /// The start of the retry flow: the main queue (chain: the first attempt's queue).
    pub main_queue: QueueName,
}

/// Which dead letters move. Every condition given must hold; an empty list means any.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The reason of the first death.
    pub reasons: BTreeSet<Reason>,
    /// The queue of the first death.
    pub first_queues: BTreeSet<String>,
    /// The first death happened at least this long ago.
    pub older_than: Option<Duration>,
    /// The first death happened less than this long ago.
    pub newer_than: Option<Duration>,
    pub message_ids: BTreeSet<String>,
}

impl Filter {
    /// Whether every dead letter matches.
    pub fn is_empty(&self) -> bool {
        self.reasons.is_empty()
            && self.first_queues.is_empty()
            && self.older_than.is_none()
            && self.newer_than.is_none()
            && self.message_ids.is_empty()
    }

    /// Whether `d` moves, judged at `now` (seconds since the epoch). A message without a death
    /// record (published straight to the dead-letter queue) matches no death-based condition; a
    /// death without a time matches no age. Pure.
    pub fn matches(&self, d: &DeadLetter, now: u64) -> bool {
        let (queue, reason, time) = first_death(&d.death);
        let reason_ok =
            self.reasons.is_empty() || matches!(reason, Some(DeathReason::Known(r)) if self.reasons.contains(&r));
        let queue_ok = self.first_queues.is_empty() || queue.is_some_and(|q| self.first_queues.contains(&q));
        let age = time.map(|t| now.saturating_sub(t));
        let older_ok = self.older_than.is_none_or(|min| age.is_some_and(|a| a >= min.as_secs()));
        let newer_ok = self.newer_than.is_none_or(|max| age.is_some_and(|a| a < max.as_secs()));
        let id_ok =
            self.message_ids.is_empty() || d.message_id.as_ref().is_some_and(|id| self.message_ids.contains(id));
        reason_ok && queue_ok && older_ok && newer_ok && id_ok
    }
}

pub struct Request {
    pub targets: Vec<Target>,
    pub filter: Filter,
    /// Move at most this many per topology.
    pub max: Option<u64>,
    /// Copies published per second at most.
    pub rate: Option<u32>,
    pub dry_run: bool,
    /// Bytes of dead letters' bodies held at once at most.
    pub budget: Budget,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub dry_run: bool,
    pub topologies: Vec<TopologyReport>,
}

impl Report {
    pub fn stopped(&self) -> bool {
        self.topologies.iter().any(|t| t.stopped.is_some())
    }
}

#[derive(Debug, Serialize)]
pub struct TopologyReport {
    pub topology: String,
    pub vhost: String,
    pub dead_letter_queue: QueueName,
    /// Where the dead letters went (on a dry run: would go), through the default exchange.
    pub to: QueueName,
    #[serde(rename = "type")]
    pub kind: QueueType,
    /// Dead letters in the queue when the run started: the run looks at no more than these.
    pub started_with: u64,
    pub scanned: u64,
    /// Moved by this run: none on a dry run.
    pub moved: u64,
    /// On a dry run, how many would move.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_move: Option<u64>,
    /// Dead letters that interrupted runs were copying when they stopped (their last batch, at
    /// most 200 each): each may be in the main queue twice.
    pub possible_duplicates: u64,
    /// Their message ids, where they have one.
    pub possible_duplicate_ids: Vec<String>,
    /// Looked at and left where they were, in their order.
    pub stayed: u64,
    /// Chosen to move and not moved, because the run stopped first (the main queue deleted
    /// mid-run, a copy refused, the connection lost): still in the dead-letter queue. With
    /// `moved` (a dry run: `would_move`) and `stayed`, every dead letter looked at is counted
    /// once.
    pub given_back: u64,
    /// The moved dead letters (on a dry run: those that would move), by first death.
    pub groups: Vec<Group>,
    /// What the run did to the dead letters that stayed.
    pub effect: RedriveEffect,
    /// Why the run stopped early; what was not moved is still in the dead-letter queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// Redrives (or looks at) every target, then gives the report to `emit`, and only then clears
/// the journals whose records it reports: a run killed before its report is out leaves them for
/// the next one.
pub fn run(endpoint: &Endpoint, request: &Request, emit: impl FnOnce(&Report) -> Result<()>) -> Result<Report> {
    super::runtime()?.block_on(async {
        // Judged on the management API's broker, moved on the AMQP one: both must be one cluster.
        let amqp_identity = identity::amqp(endpoint).await?;
        let http_identity = http::identity(endpoint).await?;
        identity::same_cluster(endpoint, &amqp_identity, &http_identity)?;
        let cluster = http_identity;

        // Every check for every topology first: bad input leaves the broker untouched.
        let mut checked = Vec::new();
        for target in &request.targets {
            let live = match http::read(endpoint, &target.vhost, http::Stats::Counted).await {
                Ok(live) => live,
                Err(e) => bail!("hopper redrive reads the queues through the management API and cannot: {e:#}"),
            };
            let network = Network::from_live(&live);
            let (dlq, main) = (&target.dead_letter_queue, &target.main_queue);
            for (queue, role) in [(dlq, "dead-letter queue"), (main, "main queue")] {
                if !live.queues.contains_key(queue) {
                    bail!(
                        "topology `{}`: its {role} `{queue}` does not exist in vhost `{}`; nothing was moved. Apply the topology first",
                        target.topology,
                        target.vhost
                    );
                }
            }
            if live.queues[dlq].arguments.as_ref().is_some_and(|a| QueueType::of(a) == QueueType::Stream) {
                bail!(
                    "`{dlq}` is a stream: reading a stream removes nothing, so its dead letters cannot be moved; nothing was moved"
                );
            }
            // Dead letters that stay are given back, which a quorum queue counts as a delivery
            // (up to 4.2): where a limit could be reached, refused as inspect refuses a peek.
            if let Some(reachable) = peek_refusal(&network, dlq) {
                bail!("{}", reachable.refusal(Reader::Redrive));
            }
            let mut session = Session::connect(endpoint, &target.vhost, &cluster).await?;
            redrive::lock(&session, dlq).await?;
            let Some((ready, consumers)) = session.queue_counts_settled(dlq).await? else {
                bail!("`{dlq}` disappeared in vhost `{}`; nothing was moved", target.vhost);
            };
            if consumers > 0 {
                bail!(
                    "`{dlq}` has {consumers} consumer(s): a redrive reads it alone, so that what it counts is what it moves and what stays keeps its place. Stop them and run again; nothing was moved"
                );
            }
            let kind = network.queues.get(dlq).map_or(QueueType::Classic, |q| QueueType::of(&q.arguments));
            checked.push((target, session, ready, kind));
        }

        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let selected = |d: &DeadLetter| request.filter.matches(d, now);
        let mut topologies = Vec::new();
        let mut open = Vec::new();
        for (target, session, ready, kind) in checked {
            let quorum = kind == QueueType::Quorum;
            let limits = Limits {
                scan: ready,
                max: request.max,
                rate: request.rate,
                mode: if request.dry_run { Mode::Look } else { Mode::Move },
                budget: request.budget,
            };
            let (dlq, main) = (&target.dead_letter_queue, &target.main_queue);
            // A failure to start (a consumer came between the check and now) stops this topology
            // only: what the others did is still reported.
            let (done, journal) = match redrive::redrive(&session, dlq, main, limits, endpoint.username(), &selected).await
            {
                Ok(done) => done,
                Err(e) => (redrive::Redriven { stopped: Some(format!("{e:#}")), ..Default::default() }, None),
            };
            open.push((session, journal, dlq.clone()));
            topologies.push(TopologyReport {
                topology: target.topology.clone(),
                vhost: target.vhost.clone(),
                dead_letter_queue: dlq.clone(),
                to: main.clone(),
                kind,
                started_with: ready,
                scanned: done.scanned,
                moved: if request.dry_run { 0 } else { done.moved },
                would_move: request.dry_run.then_some(done.moved),
                possible_duplicates: done.possible_duplicates.len() as u64,
                possible_duplicate_ids: done.possible_duplicates.into_iter().flatten().collect(),
                stayed: done.kept,
                given_back: done.scanned.saturating_sub(done.moved + done.kept),
                groups: summarize(&done.moved_deaths),
                effect: RedriveEffect {
                    give_back: GiveBack::of(quorum),
                    dry_run: request.dry_run,
                    given_back: done.scanned.saturating_sub(if request.dry_run { 0 } else { done.moved }),
                },
                stopped: done.stopped,
            });
        }
        let report = Report { dry_run: request.dry_run, topologies };
        emit(&report)?;
        for (session, journal, dlq) in open {
            if let Some(journal) = journal {
                journal.close().await?;
            }
            redrive::unlock(&session, &dlq).await;
            session.close().await;
        }
        Ok(report)
    })
}

/// What a run did to the dead letters it gave back: on a dry run every one, else those that
/// stayed (and those chosen but not moved when it stopped early).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedriveEffect {
    pub give_back: GiveBack,
    pub dry_run: bool,
    /// How many it gave back: a quorum queue keeps the order of at most 32 (`QUORUM_ORDER_KEPT`).
    pub given_back: u64,
}

impl std::fmt::Display for RedriveEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let which = if self.dry_run { "every dead letter was" } else { "dead letters that stayed were" };
        let many = self.given_back > QUORUM_ORDER_KEPT as u64;
        let (place, count) = match self.give_back {
            GiveBack::Quorum if many => (
                "back at the head of the queue, perhaps not in their order (a quorum queue takes back more than 32 messages read with basic.get in an order of its own)",
                QUORUM_COUNT,
            ),
            GiveBack::Quorum => ("back at the head of the queue in their order", QUORUM_COUNT),
            GiveBack::Classic => ("back at their own positions", ""),
        };
        write!(
            f,
            "{which} taken with basic.get, held unacknowledged and given back with basic.nack, one by one: {place}, marked redelivered{count}"
        )
    }
}

const QUORUM_COUNT: &str = "; on RabbitMQ 3.x to 4.2 each counts one more delivery (x-delivery-count), on 4.3 none (a nack is not a failed delivery)";

/// As the sentence: the JSON report's `effect` is the line a person reads.
impl Serialize for RedriveEffect {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::amqp::{Death, Peeked};

    fn letter(id: &str, first: Option<(&str, &str, u64)>) -> DeadLetter {
        DeadLetter {
            message_id: Some(id.into()),
            death: Peeked {
                first_death_queue: first.map(|f| f.0.into()),
                first_death_reason: first.map(|f| f.1.into()),
                deaths: first
                    .map(|(q, r, t)| vec![Death { queue: q.into(), reason: r.into(), count: 1, time: Some(t) }])
                    .unwrap_or_default(),
                redelivered: false,
                message_id: Some(id.into()),
            },
            redriven: 0,
        }
    }

    /// The sentence follows the queue type and, on a quorum queue, how many went back.
    #[test]
    fn a_redrives_effect_says_when_the_order_may_change() {
        let effect = |give_back, given_back| RedriveEffect { give_back, dry_run: false, given_back }.to_string();
        let kept = QUORUM_ORDER_KEPT as u64;
        assert!(effect(GiveBack::Quorum, kept).contains("head of the queue in their order"));
        assert!(effect(GiveBack::Quorum, kept + 1).contains("perhaps not in their order"));
        assert!(effect(GiveBack::Classic, 10_000).contains("back at their own positions"));
        assert!(!effect(GiveBack::Classic, 10_000).contains("x-delivery-count"));
    }

    #[test]
    fn every_condition_given_must_hold() {
        let now = 10_000;
        let old = letter("a", Some(("orders", "rejected", now - 3600)));
        let new = letter("b", Some(("orders", "expired", now - 60)));
        let never_died = letter("c", None);
        let any = Filter::default();
        assert!(any.matches(&old, now) && any.matches(&new, now) && any.matches(&never_died, now));

        let rejected = Filter { reasons: BTreeSet::from([Reason::Rejected]), ..Filter::default() };
        assert!(rejected.matches(&old, now) && !rejected.matches(&new, now) && !rejected.matches(&never_died, now));

        let older = Filter { older_than: Some(Duration::from_secs(600)), ..Filter::default() };
        assert!(older.matches(&old, now) && !older.matches(&new, now) && !older.matches(&never_died, now));
        let newer = Filter { newer_than: Some(Duration::from_secs(600)), ..Filter::default() };
        assert!(!newer.matches(&old, now) && newer.matches(&new, now) && !newer.matches(&never_died, now));

        let elsewhere = Filter { first_queues: BTreeSet::from(["payments".to_string()]), ..Filter::default() };
        assert!(!elsewhere.matches(&old, now));
        let ids = Filter { message_ids: BTreeSet::from(["c".to_string()]), ..Filter::default() };
        assert!(!ids.matches(&old, now) && ids.matches(&never_died, now));
        let both = Filter { message_ids: BTreeSet::from(["a".to_string()]), ..rejected };
        assert!(both.matches(&old, now) && !both.matches(&new, now));
    }
}
