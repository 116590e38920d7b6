//! `apply`: plan every vhost against the live broker, refuse any conflict before changing
//! anything, then converge, sinks first.

use anyhow::Result;
use serde::Serialize;

use crate::broker::{Endpoint, amqp, http, identity};
use crate::compile::CompiledTopology;
use crate::model::Object;
use crate::plan::{self, Options, Override, Plan, Step};

#[derive(Debug, Clone, Default)]
pub struct Request {
    pub dry_run: bool,
    pub prune: bool,
    pub migrate: bool,
    /// Read over AMQP alone, never the management API: only when asked, never as a fallback.
    pub amqp_only: bool,
}

/// Where a vhost's state was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadFrom {
    ManagementApi,
    /// Passive declarations over AMQP, as `--amqp-only` asks.
    Amqp,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub dry_run: bool,
    /// Whether the plan was carried out: not on a dry run, and not when anything conflicted.
    pub applied: bool,
    pub vhosts: Vec<VhostReport>,
}

#[derive(Debug, Serialize)]
pub struct VhostReport {
    pub vhost: String,
    pub read_from: ReadFrom,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub steps: Vec<Step>,
    /// Policies that make a queue behave otherwise than the spec says; apply cannot change them.
    pub overrides: Vec<Override>,
    /// Steps the broker refused while applying, by index into `steps`, with its reason.
    pub refused: Vec<(usize, String)>,
    /// What each migration did, in the order they ran.
    pub migrated: Vec<super::migrate::Migrated>,
}

impl Report {
    pub fn conflicts(&self) -> usize {
        self.vhosts.iter().map(|v| v.steps.iter().filter(|s| matches!(s, Step::Conflict { .. })).count()).sum()
    }

    /// Refusals that stopped the run. A prune deletion the broker refused (the queue is no
    /// longer empty) is not one: the queue was kept, which is what the refusal is for.
    pub fn refused(&self) -> usize {
        self.vhosts.iter().map(|v| v.refused.iter().filter(|(i, _)| v.steps[*i].refusal_stops_the_run()).count()).sum()
    }
}

pub fn run(endpoint: &Endpoint, by_vhost: &[(&str, Vec<&CompiledTopology>)], request: &Request) -> Result<Report> {
    super::runtime()?.block_on(async {
        let options = Options { prune: request.prune, admin: Some(endpoint.admin()), migrate: request.migrate };
        // Read one broker and write another? Never: both endpoints must be one cluster.
        // With --amqp-only, the cluster is the one the first AMQP node names; every session
        // connects only to nodes of it. Otherwise a management API that cannot be used is an
        // error: falling back silently would hide a wrong URL and plan without the bindings.
        let amqp_identity = identity::amqp(endpoint).await?;
        let cluster = if request.amqp_only {
            amqp_identity.1.cluster_name.clone()
        } else {
            let http_identity = http::identity(endpoint).await.map_err(needs_the_api)?;
            identity::same_cluster(endpoint, &amqp_identity, &http_identity)?;
            http_identity.cluster_name
        };
        // Plan every vhost before changing any: a conflict anywhere stops the whole run.
        let mut work = Vec::new();
        for (vhost, topologies) in by_vhost {
            let mut session = amqp::Session::connect(endpoint, vhost, &cluster).await?;
            // What is written is judged by the release of the node it is written to.
            super::check_release(&session.identity().version, topologies)?;
            let (mut live, read_from, note) = if request.amqp_only {
                let retyped = |q: &crate::model::Queue, t: &str| plan::retyped(topologies, q, t);
                let live = session.probe(&plan::desired(topologies), retyped).await?;
                let note = "--amqp-only: read over AMQP: bindings are declared again (idempotent), and queues left over by earlier specs cannot be listed";
                (live, ReadFrom::Amqp, Some(note.to_string()))
            } else {
                let mut live = http::read(endpoint, vhost).await.map_err(needs_the_api)?;
                super::exact_counts(&mut session, &mut live, topologies).await?;
                (live, ReadFrom::ManagementApi, None)
            };
            // A refusal's commands name the management API only where it answered.
            let options =
                Options { admin: (read_from == ReadFrom::ManagementApi).then(|| endpoint.admin()), ..options.clone() };
            let mut plan = plan::plan(vhost, topologies, &live, &options);
            // A refusal says how many messages the queue holds: count them exactly.
            let conflicting: Vec<_> = plan
                .conflicts()
                .filter_map(|s| match s {
                    Step::Conflict { object: Object::Queue(q), .. } => Some(q.name.clone()),
                    _ => None,
                })
                .collect();
            if !conflicting.is_empty() {
                for name in conflicting {
                    if let (Some(q), Some((messages, _))) = (live.queues.get_mut(&name), session.queue_counts(&name).await?)
                    {
                        q.messages = Some(messages.max(q.messages.unwrap_or(0)));
                    }
                }
                plan = plan::plan(vhost, topologies, &live, &options);
            }
            work.push((session, plan, read_from, note));
        }

        let conflicts = work.iter().map(|(_, p, _, _)| p.conflicts().count()).sum::<usize>();
        let apply = conflicts == 0 && !request.dry_run;
        let mut vhosts = Vec::new();
        for (mut session, plan, read_from, note) in work {
            let (refused, migrated) =
                if apply { execute(&mut session, endpoint, &plan).await? } else { (Vec::new(), Vec::new()) };
            session.close().await;
            let Plan { vhost, steps, overrides, .. } = plan;
            vhosts.push(VhostReport { vhost, read_from, note, steps, overrides, refused, migrated });
        }
        Ok(Report { dry_run: request.dry_run, applied: apply, vhosts })
    })
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

/// Declarations first, then migrations (whose queues' new dead-letter exchanges and bindings
/// then exist), then removals; a refusal stops the run before the next group.
async fn execute(
    session: &mut amqp::Session,
    endpoint: &Endpoint,
    plan: &Plan,
) -> Result<(Vec<(usize, String)>, Vec<super::migrate::Migrated>)> {
    let mut phases = plan::phases(plan);
    let after = phases.split_off(plan::MIGRATIONS + 1);
    let migrations = phases.pop().unwrap_or_default();
    let refusals = |outcomes: Vec<(usize, amqp::Outcome)>| -> Vec<(usize, String)> {
        outcomes
            .into_iter()
            .filter_map(|(i, outcome)| match outcome {
                amqp::Outcome::Refused(reason) => Some((i, reason)),
                amqp::Outcome::Done => None,
            })
            .collect()
    };
    let mut refused = refusals(session.execute(plan, phases).await?);
    let mut migrated = Vec::new();
    if refused.iter().any(|(i, _)| plan.steps[*i].refusal_stops_the_run()) {
        return Ok((refused, migrated));
    }
    for i in migrations {
        match &plan.steps[i] {
            Step::Migrate { object: Object::Queue(q), .. } => {
                migrated.push(super::migrate::migrate(session, endpoint, &plan.vhost, q).await?);
            }
            Step::MoveMessages { from, to, .. } => {
                migrated.push(super::migrate::move_out(session, from, to).await?);
            }
            _ => {}
        }
    }
    refused.extend(refusals(session.execute(plan, after).await?));
    Ok((refused, migrated))
}
