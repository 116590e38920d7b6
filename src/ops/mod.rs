//! Each operation's orchestration: read the broker, call the pure core, write. Commands parse
//! arguments and render what an operation returns; they hold no logic of their own.

pub mod apply;
pub mod diff;
pub mod inspect;
pub mod migrate;
pub mod redrive;

use std::collections::BTreeMap;

use anyhow::Result;

use crate::broker::amqp::Session;
use crate::compile::CompiledTopology;
use crate::live::Live;
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

/// The management API's message counts lag by seconds, and a passive declaration does not count
/// a quorum queue's dead letters still waiting to be confirmed elsewhere: a queue left over by an
/// earlier spec is judged by the larger of the two.
pub(crate) async fn exact_counts(
    session: &mut Session,
    live: &mut Live,
    topologies: &[&CompiledTopology],
) -> Result<()> {
    // Only left-overs: a queue the spec still has is never pruned, so its count does not matter.
    let wanted = plan::desired_queues(topologies);
    for (name, queue) in live.queues.iter_mut() {
        if wanted.contains(name) || !topologies.iter().any(|t| plan::left_over(&t.topology, name, queue).is_some()) {
            continue;
        }
        match session.queue_counts(name).await {
            Ok(Some((messages, consumers))) => {
                queue.messages = Some(messages.max(queue.messages.unwrap_or(0)));
                queue.consumers = Some(consumers.max(queue.consumers.unwrap_or(0)));
            }
            Ok(None) => {}
            // A user without the configure permission (RabbitMQ 4.3 asks it for a passive
            // declaration) keeps the management API's counts: prune trusts neither alone, it
            // deletes only with the broker's own if-empty check or a fresh count.
            Err(e) if e.downcast_ref::<crate::broker::amqp::AccessRefused>().is_some() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
