//! Which cluster answers at an endpoint. hopper reads over the management API and writes over
//! AMQP: before it trusts one with what it learned from the other, it checks that both are the
//! same cluster, as each introduces itself (AMQP `connection.start` server properties, the
//! management API's overview and, for a cluster never named, its list of nodes).
//!
//! A cluster whose `cluster_name` was never set (RabbitMQ's default) has no one name: each node
//! calls it by its own node name with its host's full name, `rabbit@host1.example.com` (from
//! `rabbit_nodes:cluster_name_default/0`; measured on 3.10.8, 4.0.5 and 4.3.6: a node
//! `hopper-c1@localhost` on host `vm` says `hopper-c1@vm`). Every node lists the same nodes, so
//! an AMQP node's greeting proves it one of them by naming one of the management API's nodes.

use amq_protocol::frame::{AMQPFrame, parse_frame};
use amq_protocol::protocol::{AMQPClass, connection};
use anyhow::{Context, Result, anyhow, bail};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use lapin::tcp::AMQPUriTcpExt;
use lapin::types::AMQPValue;

use super::{AmqpUri, Endpoint};

/// How an AMQP node introduces itself in its greeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `cluster_name`: the same on every node of a named cluster; a node's own default otherwise.
    pub cluster_name: String,
    pub version: String,
}

/// The cluster behind the management API, as it introduces itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// The name its overview gives.
    pub name: String,
    pub version: String,
    /// Set when `name` is a node's default: the cluster was never named.
    pub unnamed: Option<Unnamed>,
}

/// What tells a cluster that was never named from every node alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unnamed {
    /// The node whose management API answered, whose default name `Cluster::name` is.
    pub node: String,
    /// The cluster's nodes as `/api/nodes` lists them, sorted; `None` when the user may not list
    /// them (that needs the `monitoring` tag).
    pub members: Option<Vec<String>>,
}

impl Cluster {
    /// The cluster a greeting names, when no management API is asked (`--amqp-only`): it admits
    /// only nodes that give the same name.
    pub fn greeted(identity: &Identity) -> Cluster {
        Cluster { name: identity.cluster_name.clone(), version: identity.version.clone(), unnamed: None }
    }

    /// Whether `name`, as a node's management API overview gives it beside the node's own name,
    /// is that node's default rather than a name the cluster was given.
    pub fn is_default_name(name: &str, node: &str) -> bool {
        matches!((name.split_once('@'), node.split_once('@')), (Some((a, _)), Some((b, _))) if a == b)
    }

    /// Whether an AMQP node whose greeting gives `cluster_name` is a node of this cluster: it
    /// gives this cluster's name, or, for a cluster never named, the default name of one of its
    /// nodes. A node `A@h` defaults to `A@` and its host's full name: `h` itself (long node
    /// names), `h` and a domain, or, for a node on the host of the management API's node, the
    /// full name that node's default shows.
    pub fn admits(&self, cluster_name: &str) -> bool {
        if cluster_name == self.name {
            return true;
        }
        let Some(Unnamed { node, members: Some(members) }) = &self.unnamed else { return false };
        let (Some((id, full)), Some((_, here)), Some((_, here_full))) =
            (cluster_name.split_once('@'), node.split_once('@'), self.name.split_once('@'))
        else {
            return false;
        };
        members.iter().filter_map(|m| m.split_once('@')).any(|(member, host)| {
            member == id
                && (full == host
                    || full.strip_prefix(host).is_some_and(|domain| domain.starts_with('.'))
                    || (host == here && full == here_full))
        })
    }

    /// What names this cluster alike from every node, for what a saved plan was made against:
    /// its name, or for a cluster never named, its nodes.
    pub fn key(&self) -> String {
        match &self.unnamed {
            Some(Unnamed { members: Some(members), .. }) => format!("nodes {}", members.join(",")),
            _ => self.name.clone(),
        }
    }
}

impl std::fmt::Display for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cluster `{}`", self.name)?;
        match &self.unnamed {
            None => Ok(()),
            Some(Unnamed { members: Some(members), .. }) => {
                write!(f, " (never named; its nodes {})", members.join(", "))
            }
            Some(Unnamed { members: None, .. }) => write!(f, " (never named)"),
        }
    }
}

/// The cluster behind the first AMQP node that answers: the server properties of its
/// `connection.start`, read before any credentials are sent.
pub async fn amqp(endpoint: &Endpoint) -> Result<(String, Identity)> {
    let mut failures = Vec::new();
    for node in &endpoint.nodes {
        let address = node.address();
        match of(endpoint, node).await {
            Ok(identity) => return Ok((address, identity)),
            Err(e) => failures.push(format!("{address}: {e:#}")),
        }
    }
    bail!("cannot reach RabbitMQ over AMQP ({})", failures.join("; "))
}

/// The cluster one node belongs to. A TLS failure says what failed.
pub async fn of(endpoint: &Endpoint, node: &AmqpUri) -> Result<Identity> {
    match tokio::time::timeout(endpoint.timeout, start(endpoint, node)).await {
        Ok(Ok(identity)) => Ok(identity),
        Ok(Err(e)) => match super::tls::explain(e.as_ref()) {
            Some(tls) => Err(anyhow!(tls)),
            None => Err(e),
        },
        Err(_) => bail!("no answer within {} (--timeout)", humantime::format_duration(endpoint.timeout)),
    }
}

async fn start(endpoint: &Endpoint, node: &AmqpUri) -> Result<Identity> {
    let runtime = lapin::runtime::default_runtime()?;
    let tls = endpoint.tls.amqp();
    // No credentials are sent on this connection: it reads the greeting and closes.
    let mut stream =
        endpoint.dialled(node, "/").connect_with_config_async(tls.as_ref(), &runtime).await.map_err(connect_error)?;
    stream.write_all(b"AMQP\x00\x00\x09\x01").await?;
    stream.flush().await?;
    // A frame: type (1 byte), channel (2), payload size (4), payload, frame end (1).
    let mut frame = vec![0u8; 7];
    stream.read_exact(&mut frame).await.context("reading the broker's greeting")?;
    if frame.starts_with(b"AMQP") {
        bail!("the server does not speak AMQP 0-9-1");
    }
    // What answered instead of a broker, by its first bytes: a TLS alert record (type 21, then
    // version 3.x) or an HTTP status line.
    if frame[0] == 0x15 && frame[1] == 3 {
        bail!("the server answered with a TLS alert: it speaks TLS on this port, so the URL starts with amqps://");
    }
    if frame.starts_with(b"HTTP/") {
        bail!("the server answered in HTTP, not AMQP: is this the management port?");
    }
    let size = u32::from_be_bytes([frame[3], frame[4], frame[5], frame[6]]) as usize;
    if frame[0] != 1 || size > 1 << 20 {
        bail!("the server's greeting is not an AMQP frame: not a RabbitMQ broker's port");
    }
    frame.resize(7 + size + 1, 0);
    stream.read_exact(&mut frame[7..]).await.context("reading the broker's greeting")?;
    let _ = stream.close().await;
    let parsed = parse_frame(frame.as_slice()).map_err(|e| anyhow!("cannot read the broker's greeting: {e:?}"))?;
    let AMQPFrame::Method(_, AMQPClass::Connection(connection::AMQPMethod::Start(start))) = parsed.1 else {
        bail!("the server did not open with connection.start");
    };
    let text = |key: &str| match start.server_properties.inner().get(key) {
        Some(AMQPValue::LongString(s)) => Some(s.to_string()),
        Some(AMQPValue::ShortString(s)) => Some(s.to_string()),
        _ => None,
    };
    Ok(Identity {
        cluster_name: text("cluster_name").ok_or_else(|| anyhow!("the broker does not say its cluster name"))?,
        version: text("version").unwrap_or_default(),
    })
}

/// A connection that could not be made, named by its cause.
fn connect_error(e: std::io::Error) -> anyhow::Error {
    if super::tls::explain(&e).is_some() {
        return anyhow::Error::new(e);
    }
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => anyhow!("connection refused: nothing listens there"),
        _ => anyhow!(e),
    }
}

/// Refuses to go on when the AMQP endpoint and the management API are two different clusters:
/// hopper would plan against one broker and write to another.
pub fn same_cluster(endpoint: &Endpoint, amqp: &(String, Identity), http: &Cluster) -> Result<()> {
    let (address, a) = amqp;
    if http.admits(&a.cluster_name) {
        return Ok(());
    }
    let why = match &http.unnamed {
        None => String::new(),
        Some(Unnamed { members: Some(members), .. }) => format!(
            " The management API's cluster was never named, so each node calls it by a name of its own, and `{}` is not the default name of any of its nodes ({})",
            a.cluster_name,
            members.join(", ")
        ),
        Some(Unnamed { members: None, .. }) => format!(
            " The management API's cluster was never named, so each node calls it by a name of its own, and user `{}` may not list its nodes to prove that one of them answers over AMQP (that needs the `monitoring` tag). Name the cluster (rabbitmqctl set_cluster_name NAME), give the user the `monitoring` tag, or point both URLs at one node",
            endpoint.username()
        ),
    };
    bail!(
        "the AMQP endpoint {address} is cluster `{}` (RabbitMQ {}), but the management API at {} is {http} (RabbitMQ {}): they are two different brokers, and hopper will not read one and write the other.{why}{} Point --management-url (HOPPER_MANAGEMENT_URL) at the management API of the broker --amqp-url (HOPPER_AMQP_URL) names",
        a.cluster_name,
        a.version,
        endpoint.management_url,
        http.version,
        if why.is_empty() { "" } else { "." }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unnamed(name: &str, node: &str, members: &[&str]) -> Cluster {
        Cluster {
            name: name.into(),
            version: "3.10.8".into(),
            unnamed: Some(Unnamed {
                node: node.into(),
                members: Some(members.iter().map(|m| m.to_string()).collect()),
            }),
        }
    }

    #[test]
    fn a_named_cluster_admits_its_name_only() {
        let named = Cluster { name: "orders".into(), version: "4.3.6".into(), unnamed: None };
        assert!(named.admits("orders"));
        assert!(!named.admits("rabbit@vm"));
        assert_eq!(named.key(), "orders");
    }

    #[test]
    fn a_default_name_is_a_nodes_own() {
        assert!(Cluster::is_default_name("hopper-c1@vm", "hopper-c1@localhost"));
        assert!(Cluster::is_default_name("rabbit@h.example.com", "rabbit@h"));
        assert!(!Cluster::is_default_name("hopper-cluster", "hopper-c1@localhost"));
        assert!(!Cluster::is_default_name("other@vm", "rabbit@vm"));
    }

    #[test]
    fn nodes_on_one_host_are_told_by_their_names() {
        // As measured on the test cluster with its name cleared: three nodes on host `vm`.
        let members = ["hopper-c1@localhost", "hopper-c2@localhost", "hopper-c3@localhost"];
        let cluster = unnamed("hopper-c2@vm", "hopper-c2@localhost", &members);
        assert!(cluster.admits("hopper-c1@vm"));
        assert!(cluster.admits("hopper-c3@vm"));
        assert!(cluster.admits("hopper-c2@vm"));
        // A node of that name on another host is not one of them, nor a name of no member.
        assert!(!cluster.admits("hopper-c1@elsewhere"));
        assert!(!cluster.admits("rabbit@vm"));
        assert_eq!(cluster.key(), "nodes hopper-c1@localhost,hopper-c2@localhost,hopper-c3@localhost");
    }

    #[test]
    fn nodes_on_hosts_of_their_own_are_told_by_their_hosts() {
        let members = ["rabbit@mq1", "rabbit@mq2", "rabbit@mq3"];
        let cluster = unnamed("rabbit@mq1.example.com", "rabbit@mq1", &members);
        assert!(cluster.admits("rabbit@mq2.example.com"));
        assert!(cluster.admits("rabbit@mq3"));
        // Another broker with RabbitMQ's default node name is another broker.
        assert!(!cluster.admits("rabbit@laptop"));
        assert!(!cluster.admits("rabbit@mq10.example.com"));
        assert!(!cluster.admits("rabbit@mq1x"));
    }

    #[test]
    fn two_single_nodes_of_default_names_are_two_brokers() {
        let staging = unnamed("rabbit@staging", "rabbit@staging", &["rabbit@staging"]);
        assert!(!staging.admits("rabbit@laptop"));
        // Without the node list nothing but the name itself is admitted.
        let unlisted =
            Cluster { unnamed: Some(Unnamed { node: "rabbit@staging".into(), members: None }), ..staging.clone() };
        assert!(unlisted.admits("rabbit@staging"));
        assert!(!unlisted.admits("rabbit@staging2"));
        assert_eq!(unlisted.key(), "rabbit@staging");
    }
}
