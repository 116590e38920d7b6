//! Live state over the management HTTP API: five bulk listings per vhost (exchanges, queues,
//! bindings, policies, operator policies).

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use rabbitmq_http_client::api::{Client, HttpClientError};
use rabbitmq_http_client::commons::{BindingDestinationType, PolicyTarget, QueueType};
use rabbitmq_http_client::requests::VirtualHostParams;
use rabbitmq_http_client::responses::Policy;

use super::Endpoint;
use super::identity::Identity;
use crate::live::{Live, LiveExchange, LiveQueue};
use crate::model::{ArgValue, Arguments, Binding, Destination, arg};
use crate::policy::AppliedPolicy;

pub type Api = Client<String, String, String>;

pub fn client(endpoint: &Endpoint) -> Api {
    Client::new(endpoint.management_url.clone(), endpoint.username().to_string(), endpoint.password().to_string())
}

/// Why the management API could not be used, in one sentence a user can act on.
pub fn explain(endpoint: &Endpoint, e: &HttpClientError) -> String {
    let url = &super::redact(&endpoint.management_url);
    match e {
        HttpClientError::ClientErrorResponse { status_code, .. } if status_code.as_u16() == 401 => format!(
            "the management API at {url} refused user `{}` (401): it needs a user with the `monitoring` or `management` tag",
            endpoint.username()
        ),
        HttpClientError::NotFound => format!("the management API at {url} answered 404: is the vhost there?"),
        other => format!(
            "the management API at {url} is unreachable ({}); enable it with `rabbitmq-plugins enable rabbitmq_management` or pass --management-url",
            super::redact(&other.to_string())
        ),
    }
}

/// Exchanges, queues (with arguments and counts) and bindings of one vhost.
pub async fn read(endpoint: &Endpoint, vhost: &str) -> Result<Live> {
    let api = client(endpoint);
    let err = |e: HttpClientError| anyhow!(explain(endpoint, &e));
    let overview = api.overview().await.map_err(err)?;
    let exchanges = api.list_exchanges_in(vhost).await.map_err(err)?;
    let queues = api.list_queues_in(vhost).await.map_err(err)?;
    let bindings = api.list_bindings_in(vhost).await.map_err(err)?;
    let policies = applied(api.list_policies_in(vhost).await.map_err(err)?);
    let operator_policies = applied(api.list_operator_policies_in(vhost).await.map_err(err)?);

    let mut live =
        Live { bindings: Some(BTreeSet::new()), version: Some(overview.rabbitmq_version), ..Live::default() };
    for e in exchanges {
        let arguments = arguments(&e.arguments.0);
        let exchange = LiveExchange {
            kind: e.exchange_type.as_str().into(),
            durable: e.durable,
            auto_delete: e.auto_delete,
            // rabbitmq_http_client's listing leaves `internal` out (see the README).
            internal: false,
            arguments,
        };
        live.exchanges.insert(e.name.into(), exchange);
    }
    for q in queues {
        let mut arguments = arguments(&q.arguments.0);
        // Older brokers leave out `x-queue-type` for queues declared without it.
        arguments.insert_if_absent(arg::QUEUE_TYPE, ArgValue::Str(q.queue_type.clone()));
        live.queues.insert(
            q.name.as_str().into(),
            LiveQueue {
                durable: q.durable,
                auto_delete: q.auto_delete,
                policy: matching(&policies, vhost, &q.name, &q.queue_type),
                operator_policy: matching(&operator_policies, vhost, &q.name, &q.queue_type),
                arguments: Some(arguments),
                refused: None,
                messages: Some(q.message_count),
                unacked: Some(q.unacknowledged_message_count),
                consumers: Some(u64::from(q.consumer_count)),
            },
        );
    }
    let set = live.bindings.as_mut().expect("set above");
    for b in bindings {
        // The default exchange's implicit bindings are not bindings anyone can change.
        if b.source.is_empty() {
            continue;
        }
        let destination = match b.destination_type {
            BindingDestinationType::Exchange => Destination::Exchange(b.destination.into()),
            _ => Destination::Queue(b.destination.into()),
        };
        set.insert(Binding {
            source: b.source.into(),
            destination,
            routing_key: b.routing_key,
            arguments: arguments(&b.arguments.0),
        });
    }
    Ok(live)
}

/// The cluster behind the management API, as its overview names it.
pub async fn identity(endpoint: &Endpoint) -> Result<Identity> {
    let overview = client(endpoint).overview().await.map_err(|e| anyhow!(explain(endpoint, &e)))?;
    Ok(Identity { cluster_name: overview.cluster_name, version: overview.rabbitmq_version })
}

/// The policy that applies to a queue: the matching one of highest priority (RabbitMQ does not
/// merge policies), ties broken by name. Resolved here from the policy listing rather than read
/// from the queue's `policy` field, which the management API refreshes only every few seconds.
fn matching(
    policies: &[(Policy, Arc<AppliedPolicy>)],
    vhost: &str,
    queue: &str,
    queue_type: &str,
) -> Option<Arc<AppliedPolicy>> {
    let target = match queue_type {
        "quorum" => PolicyTarget::QuorumQueues,
        "stream" => PolicyTarget::Streams,
        _ => PolicyTarget::ClassicQueues,
    };
    policies
        .iter()
        .filter(|(p, _)| p.does_match_name(vhost, queue, target))
        .max_by(|(a, _), (b, _)| a.priority.cmp(&b.priority).then_with(|| b.name.cmp(&a.name)))
        .map(|(_, applied)| applied.clone())
}

/// Each policy with what it applies, made once and shared by every queue it matches.
fn applied(policies: Vec<Policy>) -> Vec<(Policy, Arc<AppliedPolicy>)> {
    policies
        .into_iter()
        .map(|p| {
            let definition = p.definition.0.iter().flatten().filter_map(|(k, v)| Some((k.clone(), arg(v)?))).collect();
            let applied = Arc::new(AppliedPolicy { name: p.name.clone(), definition });
            (p, applied)
        })
        .collect()
}

fn arguments(map: &serde_json::Map<String, serde_json::Value>) -> Arguments {
    map.iter().filter_map(|(k, v)| Some((k.clone(), arg(v)?))).collect()
}

fn arg(v: &serde_json::Value) -> Option<ArgValue> {
    Some(match v {
        serde_json::Value::String(s) => ArgValue::Str(s.clone()),
        serde_json::Value::Bool(b) => ArgValue::Bool(*b),
        serde_json::Value::Number(n) => n.as_i64().map_or_else(|| ArgValue::Other(n.to_string()), ArgValue::Int),
        serde_json::Value::Null => return None,
        other => ArgValue::Other(other.to_string()),
    })
}

/// Creates a vhost (tests and quickstarts; `apply` itself never creates one).
pub async fn create_vhost(endpoint: &Endpoint, name: &str) -> Result<()> {
    let params = VirtualHostParams {
        name,
        description: Some("created by hopper"),
        tags: None,
        default_queue_type: Some(QueueType::Classic),
        tracing: false,
    };
    client(endpoint).create_vhost(&params).await.map_err(|e| anyhow!(explain(endpoint, &e)))
}

pub async fn delete_vhost(endpoint: &Endpoint, name: &str) -> Result<()> {
    client(endpoint).delete_vhost(name, true).await.map_err(|e| anyhow!(explain(endpoint, &e)))
}
