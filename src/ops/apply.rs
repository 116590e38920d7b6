//! `apply`: plan every vhost against the live broker, refuse any conflict before changing
//! anything, then converge, sinks first.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::broker::budget::Budget;
use crate::broker::{Endpoint, amqp, http, identity};
use crate::compile::CompiledTopology;
use crate::model::Object;
use crate::plan::fingerprint::{self, BrokerSeen, Fingerprint, Moved, SeenObject};
use crate::plan::{self, Options, Override, Plan, Step};

#[derive(Debug, Clone, Default)]
pub struct Request {
    pub dry_run: bool,
    pub prune: bool,
    pub migrate: bool,
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
    pub stale: Vec<String>,
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

/// What differs between a saved plan and the plans just made; empty when it still holds.
fn staleness(expected: &[Expected], plans: &[(&Plan, &Fingerprint, Option<&[SeenObject]>)]) -> Vec<String> {
    let mut stale = Vec::new();
    let planned: Vec<&str> = plans.iter().map(|(p, _, _)| p.vhost.as_str()).collect();
    let saved: Vec<&str> = expected.iter().map(|e| e.vhost.as_str()).collect();
    if planned != saved {
        stale.push(format!("the plan covers vhost(s) {saved:?}, its spec now {planned:?}"));
        return stale;
    }
    for (e, (plan, now, objects)) in expected.iter().zip(plans) {
        let v = crate::output::safe(&e.vhost);
        if now.broker != e.fingerprint.broker {
            stale.push(format!(
                "vhost `{v}`: another cluster or RabbitMQ release answers than the one the plan was made against"
            ));
        }
        if now.spec != e.fingerprint.spec {
            stale.push(format!(
                "vhost `{v}`: this hopper compiles the plan's spec to other objects than the hopper that made it"
            ));
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
                let mut line = format!(
                    "vhost `{v}`: the plan was already applied: the broker holds everything it makes, so there is nothing to do"
                );
                if !besides.is_empty() {
                    line.push_str(&format!("; besides, since it was made: {}", named(&besides)));
                }
                stale.push(line);
            } else if moved.is_empty() {
                stale.push(format!(
                    "vhost `{v}`: the broker's objects changed since the plan was made (an exchange, queue, binding, argument or policy was declared, deleted or changed)"
                ));
            } else {
                stale.push(format!(
                    "vhost `{v}`: the broker's objects changed since the plan was made: {}",
                    named(&moved)
                ));
            }
        }
        if now.combined == e.fingerprint.combined && changes(&plan.steps) != e.changes {
            stale.push(format!(
                "vhost `{v}`: the plan would now make other changes (a left-over queue's messages or consumers changed what --prune may delete)"
            ));
        }
    }
    stale
}

/// The first few objects that moved, and how many in all: `queue `audit` appeared, ...`.
fn named(moved: &[(Moved, &SeenObject)]) -> String {
    const NAMED: usize = 5;
    let mut parts: Vec<String> = moved
        .iter()
        .take(NAMED)
        .map(|(how, o)| {
            let how = match how {
                Moved::Appeared => "appeared",
                Moved::Disappeared => "was deleted",
                Moved::Changed => "changed",
            };
            format!("{} `{}` {how}", o.kind(), crate::output::safe(o.shown()))
        })
        .collect();
    if moved.len() > NAMED {
        parts.push(format!("and {} more ({} objects in all)", moved.len() - NAMED, moved.len()));
    }
    parts.join(", ")
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

/// Read, plan every vhost, then carry the plans out.
async fn converge(
    endpoint: &Endpoint,
    by_vhost: &[(&str, Vec<&CompiledTopology>)],
    request: &Request,
    desired: &[plan::Desired<'_>],
    spec_hashes: impl FnOnce() -> Option<Vec<String>>,
) -> Result<Report> {
    let options = Options { prune: request.prune, admin: Some(endpoint.admin()), migrate: request.migrate };
    // Read one broker and write another? Never: both endpoints must be one cluster.
    // With --amqp-only, the cluster is the one the first AMQP node names; every session
    // connects only to nodes of it. Otherwise a management API that cannot be used is an
    // error: falling back silently would hide a wrong URL and plan without the bindings.
    // Both endpoints and every vhost are read at once; nothing read is trusted before the
    // endpoints are known to be one cluster.
    let names: Vec<&str> = by_vhost.iter().map(|(v, _)| *v).collect();
    let reading = super::Reading::of(endpoint, &names, request.amqp_only).await;
    let (amqp_identity, http_identity, mut readings) = (reading.amqp, reading.http, reading.vhosts);
    let amqp_identity = amqp_identity?;
    let cluster = match http_identity {
        None => identity::Cluster::greeted(&amqp_identity.1),
        Some(http_identity) => {
            let http_identity = http_identity.map_err(needs_the_api)?;
            identity::same_cluster(endpoint, &amqp_identity, &http_identity)?;
            http_identity
        }
    };
    // What a saved plan names the cluster by: the same through every node.
    let cluster_key = cluster.key();
    crate::output::narrate(|| {
        format!(
            "broker: {cluster} (RabbitMQ {}), AMQP {}, management API {}, as user `{}`",
            amqp_identity.1.version,
            amqp_identity.0,
            crate::broker::redact(&endpoint.management_url),
            endpoint.username()
        )
    });
    // The release the plan is made against, as the first AMQP node that answered says; a
    // session, opened only where something is counted or written, checks its own node's.
    let version = amqp_identity.1.version.clone();
    let all: Vec<&CompiledTopology> = by_vhost.iter().flat_map(|(_, t)| t.iter().copied()).collect();
    super::check_release(&version, &all)?;
    let connect = |vhost: &str| {
        let vhost = vhost.to_string();
        let cluster = &cluster;
        async move {
            let session = amqp::Session::connect(endpoint, &vhost, cluster).await?;
            // What is written is judged by the release of the node it is written to.
            let topologies = by_vhost.iter().find(|(v, _)| *v == vhost).map(|(_, t)| t.as_slice()).unwrap_or(&[]);
            super::check_release(&session.identity().version, topologies)?;
            anyhow::Ok(session)
        }
    };
    // Plan every vhost before changing any: a conflict anywhere stops the whole run.
    let mut work = Vec::new();
    let mut spec_hashes = spec_hashes().map(Vec::into_iter);
    readings.reverse();
    for ((vhost, topologies), desired) in by_vhost.iter().zip(desired) {
        let mut session = None;
        let (mut live, read_from, note) = if request.amqp_only {
            crate::output::narrate(|| format!("vhost `{vhost}`: probing it over AMQP (--amqp-only)"));
            let probing = session.insert(connect(vhost).await?);
            let retyped = |q: &crate::model::Queue, t: &str| plan::retyped(topologies, q, t);
            let live = probing.probe(&plan::desired(topologies), retyped).await?;
            let note = "--amqp-only: read over AMQP: bindings are declared again (idempotent), and queues left over by earlier specs cannot be listed";
            (live, ReadFrom::Amqp, Some(note.to_string()))
        } else {
            let mut live = readings.pop().expect("a reading for each vhost, or an error").map_err(needs_the_api)?;
            let left_over = super::left_over_queues(&live, desired);
            if !left_over.is_empty() {
                let counting = session.insert(connect(vhost).await?);
                super::count(endpoint, vhost, Some(counting), &mut live, &left_over).await?;
            }
            (live, ReadFrom::ManagementApi, None)
        };
        // A refusal's commands name the management API only where it answered.
        let options =
            Options { admin: (read_from == ReadFrom::ManagementApi).then(|| endpoint.admin()), ..options.clone() };
        // The fingerprint leaves counts out, so it is hashed beside the planning, on a
        // core of its own: at 2,000 topologies each takes about 60 ms.
        let seen = BrokerSeen { cluster_name: &cluster_key, version: &version };
        let spec_hash = spec_hashes.as_mut().map(|h| h.next().expect("a spec hash for each vhost"));
        let keep_objects = request.objects || request.expect.is_some();
        let (mut plan, (fingerprint, objects)) = std::thread::scope(|scope| {
            let hashing = spec_hash.map(|h| {
                scope.spawn(|| {
                    (fingerprint::of(&seen, vhost, &live, h), keep_objects.then(|| fingerprint::objects(&live)))
                })
            });
            let plan = desired.plan(vhost, &live, &options);
            (plan, hashing.map(|h| h.join().expect("the fingerprint's thread does not panic")).unzip())
        });
        let objects = objects.flatten();
        // A refusal says how many messages the queue holds, and a migration is refused for
        // a queue with consumers: count both exactly. The management API's counts lag by
        // seconds (it would still show the consumer of a run killed a moment ago).
        let counted: Vec<_> =
            plan.steps
                .iter()
                .filter_map(|s| match s {
                    Step::Conflict { object: Object::Queue(q), .. }
                    | Step::Migrate { object: Object::Queue(q), .. } => Some(q.name.clone()),
                    _ => None,
                })
                .collect();
        if !counted.is_empty() {
            let counting = match session {
                Some(ref mut s) => s,
                None => session.insert(connect(vhost).await?),
            };
            if read_from == ReadFrom::ManagementApi {
                super::count(endpoint, vhost, Some(&mut *counting), &mut live, &counted).await?;
            }
            // Consumers exactly, over AMQP: the API would still show a killed run's mover.
            for name in counted {
                if let (Some(q), Some((messages, consumers))) =
                    (live.queues.get_mut(&name), counting.queue_counts(&name).await?)
                {
                    q.messages = Some(messages.max(q.messages.unwrap_or(0)));
                    q.consumers = Some(consumers);
                }
            }
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
            .any(|s| matches!(s, Step::Create { object: Object::Queue(q) } if crate::plan::is_quorum(&q.arguments)));
        let quorum_members = live.nodes.as_deref().filter(|_| creates_quorum).map(plan::placement::quorum_members);
        work.push((session, plan, read_from, note, fingerprint, objects, quorum_members));
    }

    let stale = match &request.expect {
        Some(expected) => {
            let plans: Vec<_> = work
                .iter()
                .map(|(_, p, _, _, f, o, _)| {
                    (p, f.as_ref().expect("fingerprints are made when a plan is expected"), o.as_deref())
                })
                .collect();
            staleness(expected, &plans)
        }
        None => Vec::new(),
    };
    let conflicts = work.iter().map(|(_, p, _, _, _, _, _)| p.conflicts().count()).sum::<usize>();
    let apply = conflicts == 0 && !request.dry_run && stale.is_empty();
    let mut vhosts = Vec::new();
    for (mut session, plan, read_from, note, fingerprint, objects, quorum_members) in work {
        let mut failovers = Vec::new();
        let changes = plan.steps.iter().filter(|s| s.changes()).count();
        let (refused, migrated, changes_applied) = if apply && changes > 0 {
            crate::output::narrate(|| format!("vhost `{}`: carrying out {changes} change(s)", plan.vhost));
            let writing = match session {
                Some(ref mut s) => s,
                None => session.insert(connect(&plan.vhost).await?),
            };
            execute(writing, endpoint, &plan, &mut failovers, request.budget).await?
        } else {
            (Vec::new(), Vec::new(), 0)
        };
        let broker_version = session.as_ref().map_or(version.clone(), |s| s.identity().version.clone());
        if let Some(session) = session {
            session.close().await;
        }
        let Plan { vhost, steps, overrides, .. } = plan;
        vhosts.push(VhostReport {
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
        });
    }
    Ok(Report { dry_run: request.dry_run, applied: apply, cluster_name: cluster_key, stale, vhosts })
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
    let (removals_refused, removed) = tally(session.execute(endpoint, plan, removals, applied, failovers).await?);
    refused.extend(removals_refused);
    Ok((refused, migrated, applied + removed))
}
