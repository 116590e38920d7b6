//! Reading a vhost, the cluster's identity and counts; creating and deleting vhosts (tests).

use serde::Deserialize;

use crate::live::{Alarm, LiveQueue, Member, Node, Placement};
use crate::model::{QueueType, arg};
use crate::policy::{self, ApplyTo, Policy};

use anyhow::{Result, anyhow};

use super::listing::*;
use super::*;

/// Whether a reading of a vhost includes each queue's message and consumer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stats {
    /// Counts for every queue (`inspect`, `graph --live`).
    Counted,
    /// None: the broker gathers a queue's statistics for every queue it lists, which is most of
    /// the cost of reading a large vhost (measured on 10,000 queues: 2.66 s and 14.7 MB with,
    /// 0.39 s and 1.6 MB without). apply and diff count only the queues a decision depends on
    /// (`queue_counts`).
    Skipped,
}

/// One queue's counts as the management API has them, or `None` when it has no such queue.
/// They lag by seconds, but include a quorum queue's dead letters still in transit.
pub async fn queue_counts(endpoint: &Endpoint, vhost: &str, queue: &str) -> Result<Option<(u64, u64)>> {
    let api = Api::new(endpoint);
    // Through the listings' reader: RabbitMQ 3.10 may name a quorum queue's `online` twice.
    match api.get::<ListedQueue>(&format!("/queues/{}/{}", segment(vhost), segment(queue))).await {
        Ok(ListedQueue(q)) => Ok(Some((q.messages, q.consumers))),
        Err(HttpError::Status { status: 404, .. }) => Ok(None),
        Err(e) => Err(anyhow::Error::new(why(&api, &e))),
    }
}

/// Exchanges, queues (with arguments, and counts when asked) and bindings of one vhost, read
/// at once, and the overview beside them.
pub async fn read(endpoint: &Endpoint, vhost: &str, stats: Stats) -> Result<Live> {
    // One client for both: it makes its TLS settings once, and moves to the next management
    // URL of a cluster once.
    let api = Api::new(endpoint);
    let (live, overview) = tokio::join!(list_with(&api, vhost, stats), api.overview());
    // The overview first: once it has answered, the URL is the API's, and a 404 is the vhost.
    let overview = overview.map_err(|e| anyhow::Error::new(why(&api, &e)))?;
    Ok(Live { version: Some(overview.rabbitmq_version), ..live? })
}

/// What `read` reads but the overview: for a caller that asks for the overview itself (as
/// `identity`), and judges its answer before this one's, so that a 404 here is the vhost's and
/// not a wrong URL's. Every request beside the listing takes the broker's CPU from it; a second
/// overview is little (on RabbitMQ 4.3, 0.75 ms against the 500-topology listing's 139 ms), but
/// it is not needed. `version` is left `None` for the caller to fill.
pub async fn list(endpoint: &Endpoint, vhost: &str, stats: Stats) -> Result<Live> {
    list_with(&Api::new(endpoint), vhost, stats).await
}

pub(super) async fn list_with(api: &Api, vhost: &str, stats: Stats) -> Result<Live> {
    let err = |e: HttpError| anyhow::Error::new(why(api, &e));
    let v = segment(vhost);
    let listing = |e: HttpError| match e {
        HttpError::Status { status: 404, .. } => anyhow!(
            "vhost `{vhost}` does not exist on the broker at {} (create it with `rabbitmqctl add_vhost`)",
            api.url()
        ),
        other => err(other),
    };
    // Only the columns hopper reads; without counts, no statistics at all.
    let queues_path = match stats {
        Stats::Counted => format!("/queues/{v}?columns={}", QUEUE_FIELDS.join(",")),
        Stats::Skipped => format!(
            "/queues/{v}?disable_stats=true&enable_queue_totals=false&columns={}",
            UNCOUNTED_QUEUE_FIELDS.join(",")
        ),
    };
    // Exchanges and bindings too: on RabbitMQ 4.3 at 10,000 topologies, the exchanges without
    // statistics and with these columns cost the broker 0.7 s of CPU instead of 1.5 s, the
    // bindings 4.1 s instead of 4.6 s, and a listing that large keeps both of its cores busy.
    let paths = [
        format!("/exchanges/{v}?disable_stats=true&columns={}", EXCHANGE_COLUMNS.join(",")),
        format!("/bindings/{v}?columns={}", BINDING_COLUMNS.join(",")),
        format!("/policies/{v}"),
        format!("/operator-policies/{v}"),
    ];
    // Each listing becomes its part of `Live` as soon as it is in, while the others are on
    // their way: once the slowest has answered, little is left to do. Exchanges and bindings
    // are made on the threads that received them; queues, which wait for the policies and
    // nodes they are judged against, on this task's thread. The bindings, slowest of all, go
    // first.
    let queues = async {
        let (queues, policies, operator_policies, nodes, parameters) = tokio::join!(
            api.get::<Vec<ListedQueue>>(&queues_path),
            api.get::<Vec<PolicyInfo>>(&paths[2]),
            api.get::<Vec<PolicyInfo>>(&paths[3]),
            api.get::<Vec<NodeInfo>>("/nodes?columns=name,running,mem_alarm,disk_free_alarm"),
            api.get::<Vec<super::records::GlobalParameter>>("/global-parameters"),
        );
        let records = super::records::of_vhost(parameters, vhost).map_err(err)?;
        let queues = queues.map_err(listing)?;
        let policies = applied(policies.map_err(listing)?);
        let operator_policies = applied(operator_policies.map_err(listing)?);
        // The cluster's view: which nodes run, and their alarms. A user with the `management`
        // tag alone may not list nodes (it needs `monitoring`): then placement is not judged.
        let nodes: Option<Vec<Node>> = match nodes {
            Ok(nodes) => Some(nodes.into_iter().map(node).collect()),
            Err(HttpError::Status { status: 401 | 403, .. }) => None,
            Err(e) => return Err(err(e)),
        };
        let counted = stats == Stats::Counted;
        // Each map is collected whole (sorted once, then built) rather than inserted into
        // object by object: at 150,000 objects the inserts' searches were a third of building it.
        let queues = queues
            .into_iter()
            .map(|ListedQueue(mut q)| {
                let mut arguments = std::mem::take(&mut q.arguments);
                // Older brokers leave out `x-queue-type` for queues declared without it.
                if !arguments.contains_key(arg::QUEUE_TYPE) {
                    arguments.insert(arg::QUEUE_TYPE, q.kind.argument());
                }
                let queue = LiveQueue {
                    durable: q.durable,
                    auto_delete: q.auto_delete,
                    policy: policy::matching(&policies, &q.name, &q.kind),
                    operator_policy: policy::matching(&operator_policies, &q.name, &q.kind),
                    arguments: Some(arguments),
                    refused: None,
                    messages: counted.then_some(q.messages),
                    unacked: counted.then_some(q.messages_unacknowledged),
                    consumers: counted.then_some(q.consumers),
                    placement: nodes.as_deref().and_then(|nodes| placement(&mut q, nodes)),
                };
                (q.name, queue)
            })
            .collect();
        Ok((queues, nodes, records))
    };
    let (bindings, queues, exchanges) =
        tokio::join!(api.get::<ListedBindings>(&paths[1]), queues, api.get::<ListedExchanges>(&paths[0]));
    let (ListedExchanges(exchanges), ListedBindings(bindings)) =
        (exchanges.map_err(listing)?, bindings.map_err(listing)?);
    let (queues, nodes, records) = queues?;
    Ok(Live { exchanges, queues, bindings: Some(bindings), version: None, nodes, records })
}

pub(super) fn node(n: NodeInfo) -> Node {
    let alarms = [(n.mem_alarm, Alarm::Memory), (n.disk_free_alarm, Alarm::Disk)]
        .into_iter()
        .filter_map(|(on, alarm)| on.then_some(alarm))
        .collect();
    Node { name: n.name, running: n.running, alarms }
}

/// Where a queue lives, judged against which nodes run: a quorum member is online only when the
/// broker says so and its node runs; a classic queue is available while its node runs.
pub(super) fn placement(q: &mut QueueInfo, nodes: &[Node]) -> Option<Placement> {
    let running = |name: &str| nodes.iter().any(|n| n.name == name && n.running);
    match q.kind {
        QueueType::Quorum => {
            let members = q.members.as_ref()?;
            let members = members
                .iter()
                .map(|m| Member {
                    node: m.clone(),
                    online: running(m) && q.online.as_ref().is_none_or(|o| o.contains(m)),
                })
                .collect();
            Some(Placement::Quorum { leader: q.leader.take(), members })
        }
        QueueType::Classic => {
            let node = q.node.take()?;
            let available = running(&node) && q.state.as_deref() != Some("down");
            Some(Placement::Classic { node, available })
        }
        QueueType::Stream | QueueType::Other(_) => None,
    }
}

/// The cluster behind the management API, as its overview names it; for a cluster never named
/// (the name is the answering node's default), with its nodes, which every node lists alike.
pub async fn identity(endpoint: &Endpoint) -> Result<Cluster> {
    let api = Api::new(endpoint);
    let fail = |e: HttpError| anyhow::Error::new(why(&api, &e));
    let overview = api.overview().await.map_err(fail)?;
    let unnamed = if Cluster::is_default_name(&overview.cluster_name, &overview.node) {
        #[derive(Deserialize)]
        struct Named {
            name: String,
        }
        let members = match api.get::<Vec<Named>>("/nodes?columns=name").await {
            Ok(nodes) => {
                let mut names: Vec<String> = nodes.into_iter().map(|n| n.name).collect();
                names.sort();
                Some(names)
            }
            // A user with the `management` tag alone may not list nodes.
            Err(HttpError::Status { status: 401 | 403, .. }) => None,
            Err(e) => return Err(fail(e)),
        };
        Some(Unnamed { node: overview.node, members })
    } else {
        None
    };
    Ok(Cluster { name: overview.cluster_name, version: overview.rabbitmq_version, unnamed })
}

/// Each policy as listed, made once into what `policy::matching` matches queues against.
pub(super) fn applied(policies: Vec<PolicyInfo>) -> Vec<Policy> {
    policies
        .into_iter()
        .map(|p| {
            let definition = p.definition.into_iter().filter_map(|(k, v)| Some((k, arg(v)?))).collect();
            Policy::new(p.name, &p.pattern, ApplyTo::from(&*p.apply_to), p.priority, definition)
        })
        .collect()
}

/// Creates a vhost (tests and quickstarts; `apply` itself never creates one).
pub async fn create_vhost(endpoint: &Endpoint, name: &str) -> Result<()> {
    let api = Api::new(endpoint);
    let body =
        serde_json::json!({"description": "created by hopper", "default_queue_type": QueueType::Classic.as_str()});
    api.put(&format!("/vhosts/{}", segment(name)), &body).await.map_err(|e| anyhow!(explain(&api, &e)))
}

/// Deletes a vhost and the owners' records of it (tests and quickstarts): RabbitMQ keeps a
/// global parameter when the vhost goes, and a vhost made again under the name would inherit
/// them.
pub async fn delete_vhost(endpoint: &Endpoint, name: &str) -> Result<()> {
    let api = Api::new(endpoint);
    match api.delete(&format!("/vhosts/{}", segment(name))).await {
        Ok(()) | Err(HttpError::Status { status: 404, .. }) => {}
        Err(e) => return Err(anyhow!(explain(&api, &e))),
    }
    let listed = api.get::<Vec<super::records::GlobalParameter>>("/global-parameters").await;
    if let Ok(crate::live::Records::Read(records)) = super::records::of_vhost(listed, name) {
        for r in records {
            let path = format!("/global-parameters/{}", segment(&crate::live::Record::parameter(&r.owner, name)));
            match api.delete(&path).await {
                Ok(()) | Err(HttpError::Status { status: 404, .. }) => {}
                Err(e) => return Err(anyhow!(explain(&api, &e))),
            }
        }
    }
    Ok(())
}
