//! Each operation's orchestration: read the broker, call the pure core, write. Commands parse
//! arguments and render what an operation returns; they hold no logic of their own.

pub mod apply;
pub mod diff;
pub mod graph;
pub mod inspect;
pub mod migrate;
pub mod plan_file;
pub mod redrive;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;

use crate::broker::amqp::Session;
use crate::broker::identity::{Cluster, Identity};
use crate::broker::progress::Progress;
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
    /// Each vhost's answers are noted in `progress` as they come back.
    pub async fn of(endpoint: &Endpoint, vhosts: &[&str], amqp_only: bool, progress: &Progress) -> Reading {
        let (amqp, http, mut readings) = tokio::join!(
            crate::broker::identity::amqp(endpoint),
            async { if amqp_only { None } else { Some(http::identity(endpoint).await) } },
            async { if amqp_only { Vec::new() } else { read_all(endpoint, vhosts, progress).await } }
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

/// A reading started before the spec is loaded, when the one vhost is known from `--vhost`:
/// listing a vhost of 10,000 topologies takes seconds, and loading and compiling its spec
/// 0.3 s of it. Reads only; a spec that fails to load ends the run before the reading is used.
pub struct Early {
    vhost: String,
    /// The reading, sent once it is over; nothing when the thread that reads panicked.
    reading: std::sync::mpsc::Receiver<Result<Reading>>,
    progress: Progress,
    /// Whether the broker answers on this machine's CPUs (`Endpoint::management_is_local`).
    local: bool,
}

/// How long `Early::wait_for_spare_cpu` waits for a broker that has not answered at all.
const UNANSWERED: Duration = Duration::from_secs(1);

impl Early {
    pub fn start(endpoint: &Endpoint, vhost: Option<&str>) -> Option<Early> {
        let vhost = vhost?.to_string();
        let (endpoint, name, progress) = (endpoint.clone(), vhost.clone(), Progress::default());
        let local = endpoint.management_is_local();
        let noted = progress.clone();
        let (sent, reading) = std::sync::mpsc::sync_channel(1);
        std::thread::spawn(move || {
            let _ended = noted.ends_on_drop();
            let runtime = match runtime() {
                Ok(runtime) => runtime,
                Err(e) => return drop(sent.send(Err(e))),
            };
            let reading = runtime.block_on(Reading::of(&endpoint, &[&name], false, &noted));
            // Handed over before the runtime shuts down: joining its idle request threads took
            // 0.8 ms after the broker's last answer (RabbitMQ 4.3, 500 topologies), which the
            // plan need not wait for.
            let _ = sent.send(Ok(reading));
            runtime.shutdown_background();
        });
        Some(Early { vhost, reading, progress, local })
    }

    /// Waits, when the broker runs on this machine, until loading the spec no longer takes a
    /// CPU the broker answers with: until every listing but the last has come back (the broker
    /// then works on that one alone), the reading has ended, or nothing has answered within a
    /// second. Loaded while all three listings were on their way, the spec took the CPU from
    /// the broker's answer as much as it did once they were in (docs/benchmarks.md). A broker
    /// elsewhere does not share the CPUs: the spec loads at once, and its errors come first.
    pub fn wait_for_spare_cpu(&self) {
        if self.local {
            self.progress.wait_for_the_last_listing(UNANSWERED);
        }
    }

    /// The reading, when it is of exactly these vhosts (a spec without topologies has none);
    /// else `None`, and the run reads them itself.
    pub(crate) fn finish(early: Option<Early>, vhosts: &[&str]) -> Option<Reading> {
        let early = early?;
        if vhosts != [early.vhost.as_str()] {
            return None;
        }
        early.reading.recv().ok()?.ok()
    }
}

/// Every vhost of a run, read one after another through the management API; a failure ends
/// the reading there (it is reported in vhost order, after the endpoints' own checks, and the
/// management API's overview among them: that is what makes a 404 here the vhost's).
async fn read_all(endpoint: &Endpoint, vhosts: &[&str], progress: &Progress) -> Vec<Result<Live>> {
    let mut readings = Vec::new();
    for vhost in vhosts {
        crate::output::narrate(|| format!("vhost `{vhost}`: reading it through the management API"));
        let live = http::list(endpoint, vhost, http::Stats::Skipped, progress).await;
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
    live.queues
        .iter()
        .filter(|(name, queue)| {
            !desired.queues().contains(*name)
                && desired.generators().generating(name).any(|t| plan::left_over(&t.topology, name, queue).is_some())
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
