//! Which cluster answers at an endpoint. hopper reads over the management API and writes over
//! AMQP: before it trusts one with what it learned from the other, it checks that both are the
//! same cluster, as each introduces itself (AMQP `connection.start` server properties, the
//! management API's overview).

use amq_protocol::frame::{AMQPFrame, parse_frame};
use amq_protocol::protocol::{AMQPClass, connection};
use anyhow::{Context, Result, anyhow, bail};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use lapin::tcp::AMQPUriTcpExt;
use lapin::types::AMQPValue;

use super::{AmqpUri, Endpoint};

/// How a broker introduces itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `cluster_name`, the same on every node of a cluster (by default the first node's name).
    pub cluster_name: String,
    pub version: String,
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
pub fn same_cluster(endpoint: &Endpoint, amqp: &(String, Identity), http: &Identity) -> Result<()> {
    let (address, a) = amqp;
    if a.cluster_name == http.cluster_name {
        return Ok(());
    }
    bail!(
        "the AMQP endpoint {address} is cluster `{}` (RabbitMQ {}), but the management API at {} is cluster `{}` (RabbitMQ {}): they are two different brokers, and hopper will not read one and write the other. Point --management-url (HOPPER_MANAGEMENT_URL) at the management API of the broker --amqp-url (HOPPER_AMQP_URL) names",
        a.cluster_name,
        a.version,
        endpoint.management_url,
        http.cluster_name,
        http.version
    )
}
