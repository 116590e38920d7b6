//! Each operation's orchestration: read the broker, call the pure core, write. Commands parse
//! arguments and render what an operation returns; they hold no logic of their own.

pub mod apply;
pub mod dead_letters;
pub mod diff;
pub mod graph;
pub mod inspect;
pub mod migrate;
pub mod plan_file;
pub mod redrive;

use std::collections::BTreeMap;

use anyhow::Result;

use crate::broker::amqp::Session;
use crate::broker::identity::{Cluster, Identity};
use crate::broker::{Endpoint, http};
use crate::compile::CompiledTopology;
use crate::live::Live;
use crate::model::QueueName;
use crate::plan;

/// The compiled topologies grouped by vhost, in vhost order.
pub fn by_vhost(compiled: &[CompiledTopology]) -> BTreeMap<&str, Vec<&CompiledTopology>> {
    let mut groups: BTreeMap<&str, Vec<_>> = BTreeMap::new();
    for c in compiled {
        groups.entry(c.topology.vhost.as_str()).or_default().push(c);
    }
    groups
}

/// Refuses a spec the broker's release cannot run, before anything is read or written: native
/// delayed retry needs RabbitMQ 4.3.
pub(crate) fn check_release(version: &str, topologies: &[&CompiledTopology]) -> Result<()> {
    let Ok(release) = version.parse::<crate::version::Version>() else { return Ok(()) };
    let native: Vec<&str> = topologies
        .iter()
        .filter(|t| t.topology.strategy == crate::spec::Strategy::Native)
        .map(|t| t.topology.name.as_str())
        .collect();
    if !native.is_empty() && !release.native_delayed_retry() {
        anyhow::bail!(
            "topology {} uses strategy \"native\", which needs RabbitMQ 4.3 or later, and this broker is RabbitMQ {release}; nothing was changed. Use strategy = \"republish\" or \"chain\" on this broker",
            native.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(())
}

/// A runtime for one command: hopper's I/O is a handful of connections, one thread is enough.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// What apply, its dry run and diff read before planning, all at once: who answers at each
/// endpoint and every vhost. Nothing read is trusted before the two endpoints are known to be
/// one cluster; a failure is reported in the order the checks take.
pub struct Reading {
    /// The first AMQP node's greeting, read before any credentials are sent.
    pub amqp: Result<(String, Identity)>,
    /// The management API's cluster; `None` with `--amqp-only`, which never asks it.
    pub http: Option<Result<Cluster>>,
    /// Each vhost, in the order asked; a failure ends the reading there.
    pub vhosts: Vec<Result<Live>>,
}

impl Reading {
    pub async fn of(endpoint: &Endpoint, vhosts: &[&str], amqp_only: bool) -> Reading {
        let (amqp, http, mut readings) = tokio::join!(
            crate::broker::identity::amqp(endpoint),
            async { if amqp_only { None } else { Some(http::identity(endpoint).await) } },
            async { if amqp_only { Vec::new() } else { read_all(endpoint, vhosts).await } }
        );
        // The identity's overview is the vhosts' too: one request fewer beside the listings.
        if let Some(Ok(identity)) = &http {
            for live in readings.iter_mut().flatten() {
                live.version = Some(identity.version.clone());
            }
        }
        Reading { amqp, http, vhosts: readings }
    }
}

/// Every vhost of a run, read one after another through the management API; a failure ends
/// the reading there (it is reported in vhost order, after the endpoints' own checks, and the
/// management API's overview among them: that is what makes a 404 here the vhost's).
async fn read_all(endpoint: &Endpoint, vhosts: &[&str]) -> Vec<Result<Live>> {
    let mut readings = Vec::new();
    for vhost in vhosts {
        crate::output::narrate(|| format!("vhost `{vhost}`: reading it through the management API"));
        let live = http::list(endpoint, vhost, http::Stats::Skipped).await;
        let failed = live.is_err();
        readings.push(live);
        if failed {
            break;
        }
    }
    readings
}

/// An AMQP session for exact counts, when AMQP answered as the management API's cluster;
/// without one, counts are the management API's alone.
pub(crate) async fn counting_session(
    endpoint: &Endpoint,
    vhost: &str,
    amqp: &Option<(String, Identity)>,
    http: &Cluster,
) -> Option<Session> {
    amqp.as_ref()?;
    Session::connect(endpoint, vhost, http).await.ok()
}

/// The queues left over by earlier specs: whether `--prune` may delete one depends on its counts.
pub(crate) fn left_over_queues(live: &Live, desired: &plan::Desired) -> Vec<QueueName> {
    let retiring = desired.retiring_queues(live);
    live.queues
        .iter()
        .filter(|(name, queue)| {
            !desired.queues().contains(*name)
                && (retiring.contains(*name)
                    || desired
                        .generators()
                        .generating(name)
                        .any(|t| plan::left_over(&t.topology, name, queue).is_some()))
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Counts for the queues a decision depends on (a reading skips them for the rest), each the
/// larger of two: the management API's, which lags by seconds but includes a quorum queue's
/// dead letters still in transit (at-least-once), and a passive declaration's, exact at that
/// instant, when an AMQP session is at hand.
pub(crate) async fn count(
    endpoint: &Endpoint,
    vhost: &str,
    mut session: Option<&mut Session>,
    live: &mut Live,
    names: &[QueueName],
) -> Result<()> {
    for name in names {
        let Some(queue) = live.queues.get_mut(name) else { continue };
        let api = http::queue_counts(endpoint, vhost, name).await?;
        let amqp = match session.as_deref_mut().map(|s| s.queue_counts(name)) {
            None => None,
            Some(counting) => match counting.await {
                Ok(counts) => counts,
                // A user without the configure permission (RabbitMQ 4.3 asks it for a passive
                // declaration) keeps the management API's counts: prune trusts neither alone,
                // it deletes only with the broker's own if-empty check or a fresh count.
                Err(e) if e.downcast_ref::<crate::broker::amqp::AccessRefused>().is_some() => None,
                Err(e) => return Err(e),
            },
        };
        // `None` is less than any count: the larger of what is known.
        queue.messages = api.map(|c| c.0).max(amqp.map(|c| c.0));
        queue.consumers = api.map(|c| c.1).max(amqp.map(|c| c.1));
    }
    Ok(())
}
