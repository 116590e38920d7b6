//! `apply`: plan every vhost against the live broker, refuse any conflict before changing
//! anything, then converge, sinks first.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::broker::budget::Budget;
use crate::broker::{Endpoint, amqp, http, identity};
use crate::compile::CompiledTopology;
use crate::model::{Object, QueueType};
use crate::plan::fingerprint::{self, BrokerSeen, Fingerprint, Moved, SeenObject};
use crate::plan::{self, Options, Override, Plan, Step};

#[derive(Debug, Clone, Default)]
pub struct Request {
    pub dry_run: bool,
    pub prune: bool,
    pub migrate: bool,
    /// Every consumer runs the spec's contract (`plan::Options::consumers_upgraded`).
    pub consumers_upgraded: bool,
    /// What a migration's moves hold of message bodies at once at most.
    pub budget: Budget,
    /// Read over AMQP alone, never the management API: only when asked, never as a fallback.
    pub amqp_only: bool,
    /// `apply --plan`: what a saved plan was made against and would change, per vhost. Nothing
    /// is changed unless the broker still gives the same fingerprint and the same changes.
    pub expect: Option<Vec<Expected>>,
    /// Whether each vhost's fingerprint is made: for whatever shows or keeps it (JSON, `-v`,
    /// `--out`), and always with `expect`. Hashing every object read and planned was a third of
    /// a no-op apply's CPU: 0.25 s with it at 2,000 topologies, 0.17 s without.
    pub fingerprint: bool,
    /// Whether each vhost's objects are kept with their digests (`--out`), so that a plan
    /// refused later can name what moved; always with `expect`.
    pub objects: bool,
}

impl Request {
    fn fingerprints(&self) -> bool {
        self.fingerprint || self.expect.is_some()
    }
}

/// A saved plan's view of one vhost.
#[derive(Debug, Clone)]
pub struct Expected {
    pub vhost: String,
    pub fingerprint: Fingerprint,
    /// The steps that change the broker, as JSON, in order.
    pub changes: Vec<serde_json::Value>,
    /// The vhost's objects as read then; `None` in a plan made by a hopper that did not keep them.
    pub objects: Option<Vec<SeenObject>>,
}

/// Where a vhost's state was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadFrom {
    ManagementApi,
    /// Passive declarations over AMQP: the management API could not be used.
    Amqp,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub dry_run: bool,
    /// Whether the plan was carried out: not on a dry run, not when anything conflicted, and not
    /// when a saved plan was stale.
    pub applied: bool,
    /// The cluster written to, as it names itself.
    pub cluster_name: String,
    /// Why a saved plan (`apply --plan`) was refused: what changed since it was made.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stale: Vec<Stale>,
    pub vhosts: Vec<VhostReport>,
}

#[derive(Debug, Serialize)]
pub struct VhostReport {
    pub vhost: String,
    /// The release of the node written to, as it introduced itself (with nothing to write, the
    /// first AMQP node that answered).
    pub broker_version: String,
    pub read_from: ReadFrom,
    /// What this vhost's plan was made against (see `plan::fingerprint`), when asked for
    /// (`Request::fingerprint`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Fingerprint>,
    /// The vhost's objects as read, for a plan file (`Request::objects`); not printed.
    #[serde(skip)]
    pub objects: Option<Vec<SeenObject>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub steps: Vec<Step>,
    /// Policies that make a queue behave otherwise than the spec says; apply cannot change them.
    pub overrides: Vec<Override>,
    /// Steps the broker refused while applying.
    pub refused: Vec<Refusal>,
    /// How many of the plan's changes were carried out (all of them, unless the broker refused
    /// one or a run stopped).
    pub changes_applied: usize,
    /// What each migration did, in the order they ran.
    pub migrated: Vec<super::migrate::Migrated>,
    /// Where the quorum queues this plan creates get their members, when it creates any and the
    /// cluster's nodes could be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quorum_members: Option<plan::placement::QuorumMembers>,
    /// Connections lost while carrying out the plan, and the node of the cluster that took over.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failovers: Vec<amqp::Failover>,
}

/// A step the broker refused, by its index in `steps`, and the broker's reason.
#[derive(Debug, Serialize)]
pub struct Refusal {
    pub step: usize,
    pub reason: String,
    /// For want of a permission (403): the run stopped there, whatever the step.
    pub permission: bool,
}

impl Refusal {
    /// A prune deletion refused because the queue is no longer empty kept the queue, which is
    /// what the refusal is for; any other refusal stops the run.
    pub fn stops_the_run(&self, step: &Step) -> bool {
        self.permission || step.refusal_stops_the_run()
    }
}

impl Report {
    pub fn conflicts(&self) -> usize {
        self.vhosts.iter().map(|v| v.steps.iter().filter(|s| matches!(s, Step::Conflict { .. })).count()).sum()
    }

    /// Refusals that stopped the run. A prune deletion the broker refused (the queue is no
    /// longer empty) is not one: the queue was kept, which is what the refusal is for.
    pub fn refused(&self) -> usize {
        self.vhosts.iter().map(|v| v.refused.iter().filter(|r| r.stops_the_run(&v.steps[r.step])).count()).sum()
    }

    /// Changes carried out, in every vhost.
    pub fn changes_applied(&self) -> usize {
        self.vhosts.iter().map(|v| v.changes_applied).sum()
    }

    /// Steps that change the broker (planned, or carried out).
    pub fn changes(&self) -> usize {
        self.vhosts.iter().map(|v| v.steps.iter().filter(|s| s.changes()).count()).sum()
    }
}

impl VhostReport {
    /// The steps that change the broker, as a plan file keeps them.
    pub fn changes(&self) -> Vec<serde_json::Value> {
        changes(&self.steps)
    }
}

fn changes(steps: &[Step]) -> Vec<serde_json::Value> {
    steps.iter().filter(|s| s.changes()).map(|s| serde_json::to_value(s).expect("a step always serialises")).collect()
}

/// Why a saved plan no longer holds, one reason a line. Rendered where it is shown (and, as that
/// text, in the JSON report's `stale`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// The plan covers other vhosts than its spec now does.
    Vhosts { saved: Vec<String>, planned: Vec<String> },
    /// Another cluster, or another RabbitMQ release, answers.
    Broker { vhost: String },
    /// This hopper compiles the plan's spec to other objects than the hopper that made it.
    Spec { vhost: String },
    /// The broker holds everything the plan makes: it was applied (by it or an equal plan);
    /// `besides`, what else moved since it was made.
    AlreadyApplied { vhost: String, besides: Moves },
    /// The broker's objects changed since the plan was made: these, when they are known.
    Changed { vhost: String, moved: Moves },
    /// The same broker and spec, but a left-over queue's messages or consumers changed what
    /// --prune may delete.
    OtherChanges { vhost: String },
}

/// The first few objects that moved since a plan was made, and how many moved in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moves {
    pub first: Vec<(Moved, crate::model::ObjectKind, String)>,
    pub total: usize,
}

impl Moves {
    /// As many are named as a line has room for.
    const NAMED: usize = 5;

    fn of(moved: &[(Moved, &SeenObject)]) -> Moves {
        let first = moved.iter().take(Self::NAMED).map(|(how, o)| (*how, o.kind(), o.shown().to_string())).collect();
        Moves { first, total: moved.len() }
    }

    fn is_empty(&self) -> bool {
        self.total == 0
    }
}

/// `queue `audit` appeared, ...`, and how many more.
impl std::fmt::Display for Moves {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = self
            .first
            .iter()
            .map(|(how, kind, shown)| {
                let how = match how {
                    Moved::Appeared => "appeared",
                    Moved::Disappeared => "was deleted",
                    Moved::Changed => "changed",
                };
                format!("{kind} `{}` {how}", crate::output::safe(shown))
            })
            .collect();
        if self.total > self.first.len() {
            parts.push(format!("and {} more ({} objects in all)", self.total - self.first.len(), self.total));
        }
        f.write_str(&parts.join(", "))
    }
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let safe = |v: &str| crate::output::safe(v).into_owned();
        match self {
            Stale::Vhosts { saved, planned } => {
                write!(f, "the plan covers vhost(s) {saved:?}, its spec now {planned:?}")
            }
            Stale::Broker { vhost } => write!(
                f,
                "vhost `{}`: another cluster or RabbitMQ release answers than the one the plan was made against",
                safe(vhost)
            ),
            Stale::Spec { vhost } => write!(
                f,
                "vhost `{}`: this hopper compiles the plan's spec to other objects than the hopper that made it",
                safe(vhost)
            ),
            Stale::AlreadyApplied { vhost, besides } => {
                write!(
                    f,
                    "vhost `{}`: the plan was already applied: the broker holds everything it makes, so there is nothing to do",
                    safe(vhost)
                )?;
                if !besides.is_empty() {
                    write!(f, "; besides, since it was made: {besides}")?;
                }
                Ok(())
            }
            Stale::Changed { vhost, moved } if moved.is_empty() => write!(
                f,
                "vhost `{}`: the broker's objects changed since the plan was made (an exchange, queue, binding, argument or policy was declared, deleted or changed)",
                safe(vhost)
            ),
            Stale::Changed { vhost, moved } => {
                write!(f, "vhost `{}`: the broker's objects changed since the plan was made: {moved}", safe(vhost))
            }
            Stale::OtherChanges { vhost } => write!(
                f,
                "vhost `{}`: the plan would now make other changes (a left-over queue's messages or consumers changed what --prune may delete)",
                safe(vhost)
            ),
        }
    }
}

impl Serialize for Stale {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What differs between a saved plan and the plans just made; empty when it still holds.
fn staleness(expected: &[Expected], plans: &[(&Plan, &Fingerprint, Option<&[SeenObject]>)]) -> Vec<Stale> {
    let mut stale = Vec::new();
    let planned: Vec<String> = plans.iter().map(|(p, _, _)| p.vhost.clone()).collect();
    let saved: Vec<String> = expected.iter().map(|e| e.vhost.clone()).collect();
    if planned != saved {
        stale.push(Stale::Vhosts { saved, planned });
        return stale;
    }
    for (e, (plan, now, objects)) in expected.iter().zip(plans) {
        let vhost = || e.vhost.clone();
        if now.broker != e.fingerprint.broker {
            stale.push(Stale::Broker { vhost: vhost() });
        }
        if now.spec != e.fingerprint.spec {
            stale.push(Stale::Spec { vhost: vhost() });
        }
        if now.live != e.fingerprint.live {
            let moved = match (&e.objects, objects) {
                (Some(then), Some(now)) => fingerprint::moved(then, now),
                _ => Vec::new(),
            };
            let nothing_to_do = now.broker == e.fingerprint.broker
                && now.spec == e.fingerprint.spec
                && !plan.steps.iter().any(Step::changes);
            if nothing_to_do {
                // Its own changes moved the objects: applied (by this plan or an equal one).
                let the_spec: rustc_hash::FxHashSet<(crate::model::ObjectKind, String)> = plan
                    .steps
                    .iter()
                    .filter_map(|s| match s {
                        Step::InSync { object, .. } => Some(fingerprint::identity(object)),
                        _ => None,
                    })
                    .collect();
                let besides: Vec<_> = moved
                    .into_iter()
                    .filter(|(how, o)| match how {
                        Moved::Disappeared => !fingerprint::removed_by(&e.changes, o),
                        Moved::Appeared | Moved::Changed => {
                            let (kind, id) = o.identity();
                            !the_spec.contains(&(kind, id.to_string()))
                        }
                    })
                    .collect();
                stale.push(Stale::AlreadyApplied { vhost: vhost(), besides: Moves::of(&besides) });
            } else {
                stale.push(Stale::Changed { vhost: vhost(), moved: Moves::of(&moved) });
            }
        }
        if now.combined == e.fingerprint.combined && changes(&plan.steps) != e.changes {
            stale.push(Stale::OtherChanges { vhost: vhost() });
        }
    }
    stale
}

pub fn run(endpoint: &Endpoint, by_vhost: &[(&str, Vec<&CompiledTopology>)], request: &Request) -> Result<Report> {
    std::thread::scope(|scope| {
        // The spec's part of each fingerprint, hashed on a second core while the broker is read.
        let spec_hashes = request.fingerprints().then(|| {
            scope.spawn(|| by_vhost.iter().map(|(_, t)| fingerprint::spec(t, request.prune)).collect::<Vec<_>>())
        });
        let desired: Vec<plan::Desired> = by_vhost.iter().map(|(_, t)| plan::Desired::new(t)).collect();
        let spec_hashes = || spec_hashes.map(|h| h.join().expect("the spec's hashing does not panic"));
        super::runtime()?.block_on(converge(endpoint, by_vhost, request, &desired, spec_hashes))
    })
}

/// One vhost planned, with what carrying it out needs.
struct Planned {
    /// The AMQP session opened to count or probe, kept to write with.
    session: Option<amqp::Session>,
    plan: Plan,
    read_from: ReadFrom,
    note: Option<String>,
    fingerprint: Option<Fingerprint>,
    objects: Option<Vec<SeenObject>>,
    quorum_members: Option<plan::placement::QuorumMembers>,
}

/// What every vhost of one run shares: where it writes, to which cluster, as which release.
struct Run<'a> {
    endpoint: &'a Endpoint,
    by_vhost: &'a [(&'a str, Vec<&'a CompiledTopology>)],
    request: &'a Request,
    cluster: identity::Cluster,
    version: String,
}

/// Read, plan every vhost, then carry the plans out.
async fn converge(
    endpoint: &Endpoint,
    by_vhost: &[(&str, Vec<&CompiledTopology>)],
    request: &Request,
    desired: &[plan::Desired<'_>],
    spec_hashes: impl FnOnce() -> Option<Vec<String>>,
) -> Result<Report> {
    // Both endpoints and every vhost are read at once; nothing read is trusted before the
    // endpoints are known to be one cluster.
    let names: Vec<&str> = by_vhost.iter().map(|(v, _)| *v).collect();
    let reading = super::Reading::of(endpoint, &names, request.amqp_only).await;
    let mut readings = reading.vhosts;
    let (cluster, version) = identify(endpoint, reading.amqp, reading.http)?;
    let all: Vec<&CompiledTopology> = by_vhost.iter().flat_map(|(_, t)| t.iter().copied()).collect();
    super::check_release(&version, &all)?;
    let run = Run { endpoint, by_vhost, request, cluster, version };
    // Plan every vhost before changing any: a conflict anywhere stops the whole run.
    let mut work = Vec::new();
    let mut spec_hashes = spec_hashes().map(Vec::into_iter);
    readings.reverse();
    for ((vhost, topologies), desired) in by_vhost.iter().zip(desired) {
        let reading = if request.amqp_only {
            None
        } else {
            Some(readings.pop().expect("a reading for each vhost, or an error").map_err(needs_the_api)?)
        };
        let spec_hash = spec_hashes.as_mut().map(|h| h.next().expect("a spec hash for each vhost"));
        work.push(run.plan_vhost(vhost, topologies, desired, reading, spec_hash).await?);
    }

    let stale = match &request.expect {
        Some(expected) => {
            let plans: Vec<_> = work
                .iter()
                .map(|w| {
                    let fingerprint = w.fingerprint.as_ref().expect("fingerprints are made when a plan is expected");
                    (&w.plan, fingerprint, w.objects.as_deref())
                })
                .collect();
            staleness(expected, &plans)
        }
        None => Vec::new(),
    };
    let conflicts = work.iter().map(|w| w.plan.conflicts().count()).sum::<usize>();
    let apply = conflicts == 0 && !request.dry_run && stale.is_empty();
    let mut vhosts = Vec::new();
    for planned in work {
        vhosts.push(run.carry_out(planned, apply).await?);
    }
    Ok(Report { dry_run: request.dry_run, applied: apply, cluster_name: run.cluster.key(), stale, vhosts })
}

/// The cluster both endpoints belong to, and the release the first AMQP node that answered
/// runs. Read one broker and write another? Never: both endpoints must be one cluster. With
/// --amqp-only, the cluster is the one the first AMQP node names; every session connects only
/// to nodes of it. Otherwise a management API that cannot be used is an error: falling back
/// silently would hide a wrong URL and plan without the bindings.
fn identify(
    endpoint: &Endpoint,
    amqp: Result<(String, identity::Identity)>,
    http: Option<Result<identity::Cluster>>,
) -> Result<(identity::Cluster, String)> {
    let amqp = amqp?;
    let cluster = match http {
        None => identity::Cluster::greeted(&amqp.1),
        Some(http) => {
            let http = http.map_err(needs_the_api)?;
            identity::same_cluster(endpoint, &amqp, &http)?;
            http
        }
    };
    crate::output::narrate(|| {
        format!(
            "broker: {cluster} (RabbitMQ {}), AMQP {}, management API {}, as user `{}`",
            amqp.1.version,
            amqp.0,
            crate::broker::redact(&endpoint.management_url),
            endpoint.username()
        )
    });
    // The release the plan is made against; a session, opened only where something is counted
    // or written, checks its own node's.
    Ok((cluster, amqp.1.version))
}

impl Run<'_> {
    /// A session to `vhost`, on a node of the run's cluster whose release can take what is written.
    async fn connect(&self, vhost: &str) -> Result<amqp::Session> {
        let session = amqp::Session::connect(self.endpoint, vhost, &self.cluster).await?;
        // What is written is judged by the release of the node it is written to.
        let topologies = self.by_vhost.iter().find(|(v, _)| *v == vhost).map(|(_, t)| t.as_slice()).unwrap_or(&[]);
        super::check_release(&session.identity().version, topologies)?;
        Ok(session)
    }

    /// Options for planning, with the management API named only where it answered.
    fn options(&self, read_from: ReadFrom) -> Options {
        let admin = (read_from == ReadFrom::ManagementApi).then(|| self.endpoint.admin());
        Options {
            prune: self.request.prune,
            admin,
            migrate: self.request.migrate,
            consumers_upgraded: self.request.consumers_upgraded,
        }
    }

    /// Plans one vhost from its reading (over AMQP when there is none: --amqp-only), with its
    /// fingerprint and the counts a refusal or a migration needs exactly.
    async fn plan_vhost(
        &self,
        vhost: &str,
        topologies: &[&CompiledTopology],
        desired: &plan::Desired<'_>,
        reading: Option<crate::live::Live>,
        spec_hash: Option<String>,
    ) -> Result<Planned> {
        let mut session = None;
        let (mut live, read_from, note) = match reading {
            None => {
                crate::output::narrate(|| format!("vhost `{vhost}`: probing it over AMQP (--amqp-only)"));
                let probing = session.insert(self.connect(vhost).await?);
                let retyped = |q: &crate::model::Queue, t: &crate::model::QueueType| plan::retyped(topologies, q, t);
                let live = probing.probe(&plan::desired(topologies), retyped).await?;
                let note = "--amqp-only: read over AMQP: bindings are declared again (idempotent), and queues left over by earlier specs cannot be listed";
                (live, ReadFrom::Amqp, Some(note.to_string()))
            }
            Some(mut live) => {
                let left_over = super::left_over_queues(&live, desired);
                if !left_over.is_empty() {
                    let counting = session.insert(self.connect(vhost).await?);
                    super::count(self.endpoint, vhost, Some(counting), &mut live, &left_over).await?;
                }
                (live, ReadFrom::ManagementApi, None)
            }
        };
        let note = match (&live.records, note) {
            (crate::live::Records::Refused { status }, _) if !self.request.dry_run => anyhow::bail!(
                "the management API refused to list the owners' records (HTTP {status}), so hopper cannot know whether another owner made what this spec would change: user `{}` needs the `policymaker` tag (`rabbitmqctl set_user_tags`); nothing was changed",
                self.endpoint.username()
            ),
            (crate::live::Records::Refused { status }, note) => Some(
                note.map_or(String::new(), |n| n + "; ")
                    + &format!(
                        "the owners' records could not be read (HTTP {status}: user `{}` needs the `policymaker` tag), so this dry run does not know what other owners made; apply would refuse",
                        self.endpoint.username()
                    ),
            ),
            (_, note) => note,
        };
        let options = self.options(read_from);
        // The fingerprint leaves counts out, so it is hashed beside the planning, on a core of
        // its own: at 2,000 topologies each takes about 60 ms.
        let cluster_key = self.cluster.key();
        let seen = BrokerSeen { cluster_name: &cluster_key, version: &self.version };
        let keep_objects = self.request.objects || self.request.expect.is_some();
        let (mut plan, (fingerprint, objects)) = std::thread::scope(|scope| {
            let hashing = spec_hash.map(|h| {
                scope.spawn(|| {
                    (fingerprint::of(&seen, vhost, &live, h), keep_objects.then(|| fingerprint::objects(&live)))
                })
            });
            let plan = desired.plan(vhost, &live, &options);
            (plan, hashing.map(|h| h.join().expect("the fingerprint's thread does not panic")).unzip())
        });
        if self.count_exactly(vhost, &plan, &mut session, &mut live, read_from).await? {
            plan = desired.plan(vhost, &live, &options);
        }
        crate::output::narrate(|| {
            format!(
                "vhost `{vhost}`: {} exchange(s), {} queue(s), {} binding(s) read; {} change(s) planned{}",
                live.exchanges.len(),
                live.queues.len(),
                live.bindings.as_ref().map_or("unknown".to_string(), |b| b.len().to_string()),
                plan.steps.iter().filter(|s| s.changes()).count(),
                fingerprint.as_ref().map_or(String::new(), |f| format!("; fingerprint {}", f.combined))
            )
        });
        let creates_quorum = plan
            .steps
            .iter()
            .any(|s| matches!(s, Step::Create { object: Object::Queue(q) } if QueueType::of(&q.arguments) == QueueType::Quorum));
        let quorum_members = live.nodes.as_deref().filter(|_| creates_quorum).map(plan::placement::quorum_members);
        Ok(Planned { session, plan, read_from, note, fingerprint, objects: objects.flatten(), quorum_members })
    }

    /// A refusal says how many messages the queue holds, and a migration is refused for a queue
    /// with consumers: both are counted exactly, over AMQP, for the queues the plan refuses or
    /// migrates. The management API's counts lag by seconds (it would still show the consumer
    /// of a run killed a moment ago). Whether anything was counted, so the plan is made again.
    async fn count_exactly(
        &self,
        vhost: &str,
        plan: &Plan,
        session: &mut Option<amqp::Session>,
        live: &mut crate::live::Live,
        read_from: ReadFrom,
    ) -> Result<bool> {
        let counted: Vec<_> =
            plan.steps
                .iter()
                .filter_map(|s| match s {
                    Step::Conflict { object: Object::Queue(q), .. }
                    | Step::Migrate { object: Object::Queue(q), .. } => Some(q.name.clone()),
                    _ => None,
                })
                .collect();
        if counted.is_empty() {
            return Ok(false);
        }
        let counting = match session {
            Some(s) => s,
            None => session.insert(self.connect(vhost).await?),
        };
        if read_from == ReadFrom::ManagementApi {
            super::count(self.endpoint, vhost, Some(&mut *counting), live, &counted).await?;
        }
        for name in counted {
            if let (Some(q), Some((messages, consumers))) =
                (live.queues.get_mut(&name), counting.queue_counts(&name).await?)
            {
                q.messages = Some(messages.max(q.messages.unwrap_or(0)));
                q.consumers = Some(consumers);
            }
        }
        Ok(true)
    }

    /// Carries one vhost's plan out, when the run applies and it changes anything, and reports it.
    async fn carry_out(&self, planned: Planned, apply: bool) -> Result<VhostReport> {
        let Planned { mut session, plan, read_from, note, fingerprint, objects, quorum_members } = planned;
        let mut failovers = Vec::new();
        let changes = plan.steps.iter().filter(|s| s.changes()).count();
        let (refused, migrated, changes_applied) = if apply && changes > 0 {
            crate::output::narrate(|| format!("vhost `{}`: carrying out {changes} change(s)", plan.vhost));
            // Claimed before anything is made: a run stopped partway leaves nothing unclaimed.
            let mut recorded = 0;
            for step in &plan.steps {
                if let Step::Record { record, .. } = step {
                    http::write_record(self.endpoint, record)
                        .await
                        .map_err(|e| anyhow::anyhow!("{e:#}; nothing in vhost `{}` was changed", plan.vhost))?;
                    recorded += 1;
                }
            }
            if recorded == changes {
                (Vec::new(), Vec::new(), recorded)
            } else {
                let writing = match session {
                    Some(ref mut s) => s,
                    None => session.insert(self.connect(&plan.vhost).await?),
                };
                let (refused, migrated, applied) =
                    execute(writing, self.endpoint, &plan, &mut failovers, self.request.budget).await?;
                (refused, migrated, applied + recorded)
            }
        } else {
            (Vec::new(), Vec::new(), 0)
        };
        let broker_version = session.as_ref().map_or(self.version.clone(), |s| s.identity().version.clone());
        if let Some(session) = session {
            session.close().await;
        }
        let Plan { vhost, steps, overrides, .. } = plan;
        Ok(VhostReport {
            vhost,
            broker_version,
            read_from,
            fingerprint,
            objects,
            note,
            steps,
            overrides,
            refused,
            changes_applied,
            migrated,
            quorum_members,
            failovers,
        })
    }
}

/// A management API that cannot be used stops apply; where the API is not there at all (a wrong
/// URL, the plugin off), reading over AMQP alone is a way on, when asked for.
fn needs_the_api(e: anyhow::Error) -> anyhow::Error {
    let not_there = e.downcast_ref::<http::ApiError>().is_some_and(|a| a.cause == http::Cause::NotThere);
    if not_there {
        anyhow::anyhow!(
            "{e:#}; nothing was changed. hopper apply reads the broker through the management API; to read over AMQP alone (no left-over queues, bindings declared again), pass --amqp-only"
        )
    } else {
        anyhow::anyhow!("{e:#}; nothing was changed")
    }
}

/// Carries out a plan: declarations first, then migrations (whose queues' new dead-letter
/// exchanges and bindings then exist), then removals; a refusal stops the run before the next
/// group. Returns what the broker refused, what each migration did, and how many of the plan's
/// changes were carried out.
async fn execute(
    session: &mut amqp::Session,
    endpoint: &Endpoint,
    plan: &Plan,
    failovers: &mut Vec<amqp::Failover>,
    budget: Budget,
) -> Result<(Vec<Refusal>, Vec<super::migrate::Migrated>, usize)> {
    let plan::Phases { declarations, migrations, removals } = plan::phases(plan);
    // What the broker refused, and how many changes were carried out.
    let tally = |outcomes: Vec<(usize, amqp::Executed)>| -> (Vec<Refusal>, usize) {
        let mut refused = Vec::new();
        let mut applied = 0;
        for (i, outcome) in outcomes {
            match outcome {
                amqp::Executed::Refused(reason) => refused.push(Refusal { step: i, reason, permission: false }),
                amqp::Executed::Forbidden(reason) => refused.push(Refusal { step: i, reason, permission: true }),
                amqp::Executed::Done => applied += usize::from(plan.steps[i].changes()),
            }
        }
        (refused, applied)
    };
    let (mut refused, mut applied) = tally(session.execute(endpoint, plan, declarations, 0, failovers).await?);
    let mut migrated = Vec::new();
    if refused.iter().any(|r| r.stops_the_run(&plan.steps[r.step])) {
        return Ok((refused, migrated, applied));
    }
    for i in migrations {
        let done = match &plan.steps[i] {
            Step::Migrate { object: Object::Queue(q), .. } => {
                super::migrate::migrate(session, endpoint, &plan.vhost, q, budget).await
            }
            Step::MoveMessages { from, to, .. } => super::migrate::move_out(session, from, to, budget).await,
            _ => continue,
        };
        match done {
            Ok(done) => migrated.push(done),
            // As a declaration's 403: the broker's answer to this step, reported with what was
            // done (exit 3). A migration stopped between its stages resumes from the broker's
            // state on the next run; no message has left both queues.
            Err(e) if e.downcast_ref::<amqp::AccessRefused>().is_some() => {
                refused.push(Refusal { step: i, reason: format!("{e:#}"), permission: true });
                let applied = applied + migrated.len();
                return Ok((refused, migrated, applied));
            }
            Err(e) => return Err(e),
        }
    }
    applied += migrated.len();
    let outcomes = session.execute(endpoint, plan, removals, applied, failovers).await?;
    let deleted: Vec<usize> = outcomes.iter().filter(|(_, o)| *o == amqp::Executed::Done).map(|(i, _)| *i).collect();
    let (removals_refused, removed) = tally(outcomes);
    refused.extend(removals_refused);
    forget_deleted(endpoint, plan, &deleted).await?;
    Ok((refused, migrated, applied + removed))
}

/// The owners' records without what the broker has just deleted (`deleted`: the removals it
/// carried out). Only after the deletions: a run stopped before one leaves it recorded, so the
/// next run still finds it.
async fn forget_deleted(endpoint: &Endpoint, plan: &Plan, deleted: &[usize]) -> Result<()> {
    let (mut queues, mut exchanges) = (rustc_hash::FxHashSet::default(), rustc_hash::FxHashSet::default());
    for i in deleted {
        match &plan.steps[*i] {
            Step::Delete { queue, .. } => _ = queues.insert(queue),
            Step::DeleteExchange { exchange } => _ = exchanges.insert(exchange),
            _ => {}
        }
    }
    if queues.is_empty() && exchanges.is_empty() {
        return Ok(());
    }
    for after in plan.records.iter().filter_map(|r| plan::ownership::without(r, &queues, &exchanges)) {
        http::write_record(endpoint, &after).await.map_err(|e| {
            anyhow::anyhow!(
                "{e:#}; in vhost `{}` the deletions were made, and the owner's record still names them: run apply again to bring it up to date",
                plan.vhost
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObjectKind;

    /// A reason is text only where it is shown: the JSON report holds the same line.
    #[test]
    fn stale_reasons_render_as_one_line_each() {
        let queue = |n: usize| SeenObject::Queue { name: format!("q{n}"), digest: String::new() };
        let objects: Vec<SeenObject> = (0..7).map(queue).collect();
        let moved: Vec<(Moved, &SeenObject)> = objects.iter().map(|o| (Moved::Appeared, o)).collect();
        let changed = Stale::Changed { vhost: "v".into(), moved: Moves::of(&moved) };
        assert_eq!(
            changed.to_string(),
            "vhost `v`: the broker's objects changed since the plan was made: queue `q0` appeared, queue `q1` appeared, queue `q2` appeared, queue `q3` appeared, queue `q4` appeared, and 2 more (7 objects in all)"
        );
        assert_eq!(serde_json::to_value(&changed).unwrap(), serde_json::json!(changed.to_string()));
        let unknown = Stale::Changed { vhost: "v".into(), moved: Moves::default() };
        assert!(
            unknown
                .to_string()
                .ends_with("(an exchange, queue, binding, argument or policy was declared, deleted or changed)")
        );
        let applied = Stale::AlreadyApplied {
            vhost: "v".into(),
            besides: Moves { first: vec![(Moved::Disappeared, ObjectKind::Exchange, "x".into())], total: 1 },
        };
        assert!(
            applied
                .to_string()
                .ends_with("so there is nothing to do; besides, since it was made: exchange `x` was deleted")
        );
        let vhosts = Stale::Vhosts { saved: vec!["a".into()], planned: vec!["a".into(), "b".into()] };
        assert_eq!(vhosts.to_string(), r#"the plan covers vhost(s) ["a"], its spec now ["a", "b"]"#);
    }
}
