//! Live state over the management HTTP API: five bulk listings per vhost (exchanges, queues,
//! bindings, policies, operator policies). hopper's own small client over ureq (blocking calls
//! on tokio's blocking pool): a handful of GETs do not need an HTTP stack of 150 crates.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Result, anyhow};
use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::Endpoint;
use super::identity::{Cluster, Unnamed};
use crate::live::{Alarm, Live, LiveExchange, LiveQueue, Member, Node, Placement};
use crate::model::{ArgKey, ArgValue, Arguments, Binding, Destination, ExchangeName, QueueName, QueueType, arg};
use crate::policy::{self, ApplyTo, Policy};

/// A client of one management API, signed in as the run's user.
#[derive(Clone)]
pub struct Api {
    agent: ureq::Agent,
    /// Each ends in `/api`, no trailing slash: the nodes of one cluster serve the same API, so a
    /// request another node answers is as good (`--management-url` with several URLs).
    bases: Arc<Vec<String>>,
    /// The base that answered last, tried first.
    current: Arc<AtomicUsize>,
    authorization: String,
    user: String,
    /// The proxy ureq takes from the environment, named in messages about reaching the API.
    proxy: Option<ureq::Proxy>,
}

/// Why a request failed, kept apart so that each cause gets its own sentence.
#[derive(Debug)]
pub enum HttpError {
    /// No HTTP answer: refused, timed out, TLS, DNS.
    Transport(ureq::Error),
    /// An answer other than 2xx, with RabbitMQ's `reason` when the body has one.
    Status { status: u16, reason: Option<String>, html: bool },
    /// A 2xx answer that is not the JSON the API gives.
    NotJson { detail: String },
}

impl Api {
    pub fn new(endpoint: &Endpoint) -> Api {
        // Reading the system's trusted roots costs a few milliseconds of every run: only when a
        // management URL is HTTPS, or the proxy ureq takes from the environment (HTTPS_PROXY,
        // ALL_PROXY) is. Redirects are not followed, so no answer leads from HTTP to HTTPS.
        let proxy = ureq::Proxy::try_from_env();
        let over_tls = endpoint.management_over_tls()
            || proxy.as_ref().is_some_and(|p| p.protocol() == ureq::ProxyProtocol::Https);
        let credentials = format!("{}:{}", endpoint.username, endpoint.password.expose());
        let authorization = format!("Basic {}", BASE64_STANDARD.encode(credentials));
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(endpoint.timeout))
            // A redirect is reported, not followed: the API never redirects, a proxy or a web
            // page in front of it may.
            .max_redirects(0)
            .max_redirects_will_error(false)
            .user_agent(concat!("hopper/", env!("CARGO_PKG_VERSION")))
            // ureq zero-fills both buffers on each new connection (128 KB each by default), and
            // a run opens one connection a request: 1.8 MB of fresh pages a `diff`. The request
            // buffer must hold a request's head, or ureq fails before sending it: the
            // credentials' header (a token as password runs to kilobytes), a URL and a few
            // headers. The response buffer must hold the largest response head ureq accepts
            // (`max_response_header_size`, 64 KB).
            .output_buffer_size(16 * 1024 + authorization.len())
            .input_buffer_size(64 * 1024)
            .proxy(proxy.clone())
            .tls_config(endpoint.tls.http(over_tls))
            .build();
        Api {
            agent: config.new_agent(),
            bases: Arc::new(endpoint.management_urls.clone()),
            current: Arc::new(AtomicUsize::new(0)),
            authorization,
            user: endpoint.username.clone(),
            proxy,
        }
    }

    /// `, through the proxy URL (from the environment)` when the URL in use goes through one:
    /// a TLS or connection failure may be the proxy's. Never the proxy's credentials.
    fn through(&self) -> String {
        let Some(proxy) = &self.proxy else { return String::new() };
        let bypassed = self.url().parse::<ureq::http::Uri>().is_ok_and(|uri| proxy.is_no_proxy(&uri));
        if bypassed {
            return String::new();
        }
        let scheme = proxy.uri().scheme_str().unwrap_or("http");
        format!(", through the proxy {scheme}://{}:{} (from the environment)", proxy.host(), proxy.port())
    }

    /// The base URL in use (the last that answered), safe to print (it never holds credentials).
    pub fn url(&self) -> &str {
        &self.bases[self.current.load(Ordering::Relaxed)]
    }

    /// The other base URLs, tried when this one did not answer.
    fn others(&self) -> Vec<&str> {
        let url = self.url();
        self.bases.iter().map(String::as_str).filter(|b| *b != url).collect()
    }

    /// `GET {base}{path}`, as JSON of type `T`.
    /// Parsed on the thread that received the answer: a listing of a large vhost runs to tens
    /// of megabytes, and parsing it there overlaps the listings still on their way.
    pub async fn get<T: DeserializeOwned + Send + 'static>(&self, path: &str) -> Result<T, HttpError> {
        self.call("GET", path, None, |path, body| {
            serde_json::from_str(body).map_err(|e| HttpError::NotJson {
                detail: format!("GET {path}: {e}; the answer begins {:?}", body.chars().take(80).collect::<String>()),
            })
        })
        .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Result<(), HttpError> {
        self.call("PUT", path, Some(body.to_string()), ignored).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<(), HttpError> {
        self.call("POST", path, Some(body.to_string()), ignored).await
    }

    pub async fn delete(&self, path: &str) -> Result<(), HttpError> {
        self.call("DELETE", path, None, ignored).await
    }

    /// One request, to the base that answered last and, when it cannot be reached at all (a
    /// stopped node), to each other base in turn. Any answer, an error status too, is the
    /// cluster's: only a failure to reach a node moves on.
    async fn call<T: Send + 'static>(
        &self,
        method: &'static str,
        path: &str,
        body: Option<String>,
        decode: Decode<T>,
    ) -> Result<T, HttpError> {
        let first = self.current.load(Ordering::Relaxed);
        let mut failure = None;
        for i in (0..self.bases.len()).map(|k| (first + k) % self.bases.len()) {
            match self.call_one(&self.bases[i], method, path, body.clone(), decode).await {
                Err(HttpError::Transport(e)) if super::tls::explain(&e).is_none() => {
                    failure.get_or_insert(HttpError::Transport(e));
                }
                answer => {
                    self.current.store(i, Ordering::Relaxed);
                    return answer;
                }
            }
        }
        // Named by the first URL tried; `explain` adds that no other answered either.
        self.current.store(first, Ordering::Relaxed);
        Err(failure.expect("at least one management URL"))
    }

    /// One request to one base on tokio's blocking pool (ureq is synchronous), bounded by the
    /// timeout.
    async fn call_one<T: Send + 'static>(
        &self,
        base: &str,
        method: &'static str,
        path: &str,
        body: Option<String>,
        decode: Decode<T>,
    ) -> Result<T, HttpError> {
        let (agent, url, authorization) = (self.agent.clone(), format!("{base}{path}"), self.authorization.clone());
        let path = path.to_string();
        let task = tokio::task::spawn_blocking(move || -> Result<T, HttpError> {
            let request = ureq::http::Request::builder()
                .method(method)
                .uri(&url)
                .header("authorization", authorization)
                .header("accept", "application/json")
                .header("content-type", "application/json")
                .body(body.unwrap_or_default())
                .map_err(|e| HttpError::Transport(ureq::Error::Http(e)))?;
            let mut response = agent.run(request).map_err(HttpError::Transport)?;
            let status = response.status().as_u16();
            let html = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/html"));
            // A listing of a large vhost runs to megabytes: no limit but the timeout. Sized
            // from the announced length, so that it is not copied into a buffer twice as large
            // at each doubling (a hint only, capped: the length is the server's word).
            let announced = response.body().content_length().unwrap_or(0).min(BODY_HINT_CAP) as usize;
            let mut text = String::new();
            // Room the system will not give is not an error: the body then grows as it comes.
            let _ = text.try_reserve(announced);
            std::io::Read::read_to_string(&mut response.body_mut().with_config().limit(u64::MAX).reader(), &mut text)
                .map_err(|e| HttpError::Transport(ureq::Error::from(e)))?;
            if (200..300).contains(&status) {
                return decode(&path, &text);
            }
            let reason = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("reason").or_else(|| v.get("error")).and_then(Value::as_str).map(str::to_string));
            Err(HttpError::Status { status, reason, html })
        });
        task.await.unwrap_or_else(|e| Err(HttpError::NotJson { detail: format!("the request task failed: {e}") }))
    }

    /// The cluster's name and release: only those columns, without statistics, which the
    /// broker would otherwise total over every object of every vhost for this one answer
    /// (measured on 3.10 with 10,000 queues: 37 to 66 ms in full, 1.3 ms so).
    pub async fn overview(&self) -> Result<Overview, HttpError> {
        self.get("/overview?disable_stats=true&columns=cluster_name,rabbitmq_version,node").await
    }
}

/// What a 2xx answer's body becomes, given the request's path (for the error) and the body.
type Decode<T> = fn(&str, &str) -> Result<T, HttpError>;

/// For a write: the answer's body says nothing hopper uses.
fn ignored(_path: &str, _body: &str) -> Result<(), HttpError> {
    Ok(())
}

/// Why the management API could not be used: a sentence naming the URL and the real cause, and
/// which kind of cause it is (only some are helped by reading over AMQP instead).
#[derive(Debug)]
pub struct ApiError {
    pub message: String,
    pub cause: Cause,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Nothing answers, or not as the API: a wrong URL, the plugin off.
    NotThere,
    /// The user's credentials or tags.
    Refused,
    Tls,
    /// Anything else the API answered (a 5xx, a 400).
    Other,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

/// Why the management API could not be used, in one sentence naming the URL and the real cause.
pub fn explain(api: &Api, e: &HttpError) -> String {
    why(api, e).message
}

fn why(api: &Api, e: &HttpError) -> ApiError {
    let url = api.url();
    let (cause, message) = match e {
        HttpError::Transport(t) => {
            let through = api.through();
            if let Some(tls) = super::tls::explain(t) {
                return ApiError { message: format!("the management API at {url}{through}: {tls}"), cause: Cause::Tls };
            }
            let cause = match t {
                ureq::Error::Timeout(_) => "no answer within the timeout (--timeout)".to_string(),
                ureq::Error::HostNotFound => "its host name does not resolve".to_string(),
                ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                    "connection refused: nothing listens there (is this the API's port, and is the plugin on? `rabbitmq-plugins enable rabbitmq_management`)".to_string()
                }
                ureq::Error::Protocol(p) => format!(
                    "the server there does not answer in HTTP ({p}): a TLS port? then the URL starts with https://"
                ),
                ureq::Error::Io(io) => format!("{io}"),
                other => format!("{other}"),
            };
            let others = api.others();
            let others = if others.is_empty() {
                String::new()
            } else {
                format!("; nor did any other management URL answer ({})", others.join(", "))
            };
            (Cause::NotThere, format!("cannot reach the management API at {url}{through}: {cause}{others}"))
        }
        HttpError::Status { status: 401, reason, .. } => match reason.as_deref() {
            Some(r) if r.to_ascii_lowercase().contains("not management user") => (
                Cause::Refused,
                format!(
                    "the management API at {url} signed user `{}` in but refused it ({r}): it needs the `monitoring` or `management` tag (`rabbitmqctl set_user_tags`)",
                    api.user
                ),
            ),
            r => (
                Cause::Refused,
                format!(
                    "the management API at {url} refused the credentials of user `{}` (401{}): wrong username or password",
                    api.user,
                    r.map(|r| format!(", {r}")).unwrap_or_default()
                ),
            ),
        },
        // The management UI answers a path that is not the API's with a web page, or with 406
        // to a client that accepts only JSON.
        HttpError::Status { status: status @ (404 | 406), html, .. } => {
            let hint = if url.ends_with("/api") {
                "is this the management API's base URL?"
            } else {
                "the management API's base URL ends in /api, such as http://localhost:15672/api"
            };
            let what = if *status == 404 { "404 Not Found" } else { "406 Not Acceptable" };
            (
                Cause::NotThere,
                format!(
                    "the management API is not at {url}: GET {url}/overview answered {what}{}; {hint}",
                    if *html { " with a web page" } else { "" }
                ),
            )
        }
        // Request Header Fields Too Large: of hopper's headers only the credentials can grow, and
        // a token used as a password runs to kilobytes. A proxy has header limits of its own, so
        // the answer may be the proxy's: it is named where there is one.
        HttpError::Status { status: 431, .. } => {
            let through = api.through();
            let limits = if through.is_empty() {
                "the broker's management listener"
            } else {
                "the proxy or the broker's management listener"
            };
            (
                Cause::Refused,
                format!(
                    "the management API at {url}{through} answered HTTP 431 (request header fields too large): its web server refuses headers this long, and hopper's credentials header is {} bytes; a shorter password or token, or a larger header limit on {limits}",
                    api.authorization.len()
                ),
            )
        }
        HttpError::Status { status, reason, html } => (
            Cause::Other,
            format!(
                "the management API at {url} answered HTTP {status}{}{}",
                reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default(),
                if *html { " (a web page, not the API: is this the management API's base URL?)" } else { "" }
            ),
        ),
        HttpError::NotJson { detail } => (
            Cause::NotThere,
            format!(
                "the server at {url} does not answer as the management API ({detail}); the API's base URL ends in /api, such as http://localhost:15672/api"
            ),
        ),
    };
    ApiError { message, cause }
}

/// A name as one path segment: every byte but unreserved ones escaped (`/` is `%2F`), as the
/// AMQP URL's vhost is written (one escaping for both; `.` and `..` are refused as names).
pub fn segment(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, super::uri::COMPONENT).to_string()
}

// ---------------------------------------------------------------------------------------------
// What the API returns: only the fields hopper reads.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
pub struct Overview {
    pub cluster_name: String,
    pub rabbitmq_version: String,
    /// The node that answered.
    #[serde(default)]
    pub node: String,
}

/// The fields of an exchange's listing that `ExchangeInfo` reads, asked for as its `columns`.
const EXCHANGE_COLUMNS: &[&str] = &["name", "type", "durable", "auto_delete", "internal", "arguments"];

#[derive(Debug, Deserialize)]
pub struct ExchangeInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub durable: bool,
    pub auto_delete: bool,
    /// An internal exchange refuses publishes from clients.
    #[serde(default)]
    pub internal: bool,
    #[serde(default)]
    pub arguments: ListedArguments,
}

/// A queue as listed, read by `ListedQueue` (RabbitMQ 3.10 may list a field twice, which a
/// derived reader refuses); a field the listing leaves out has its default.
#[derive(Debug)]
pub struct QueueInfo {
    pub name: QueueName,
    /// The listing's `type`, which brokers list even where a queue has no `x-queue-type`.
    pub kind: QueueType,
    pub durable: bool,
    pub auto_delete: bool,
    pub arguments: Arguments,
    /// Absent until the broker has collected the queue's stats once.
    pub messages: u64,
    pub messages_unacknowledged: u64,
    pub consumers: u64,
    /// A classic queue's node; a quorum queue's leader on some releases.
    pub node: Option<String>,
    /// A classic queue whose node is down is `down`.
    pub state: Option<Cow<'static, str>>,
    /// A quorum queue's leader, members and the members the broker counts online (this lags
    /// behind a node that stopped by seconds, so a member also counts offline when its node does
    /// not run).
    pub leader: Option<String>,
    pub members: Option<Vec<String>>,
    pub online: Option<Vec<String>>,
}

/// The most room made for a body before it arrives: the largest listing of 10,000 topologies,
/// their 70,000 bindings, is about 22 MB.
const BODY_HINT_CAP: u64 = 64 << 20;

/// The fields of a queue's listing that `QueueInfo` reads, also as the `columns` asked for
/// with counts. A field added to `QueueInfo` is also named here, in `QueueField` and in
/// `ListedQueue`'s reader, and in `UNCOUNTED_QUEUE_FIELDS` unless it is a count.
const QUEUE_FIELDS: &[&str] = &[
    "name",
    "type",
    "durable",
    "auto_delete",
    "arguments",
    "messages",
    "messages_unacknowledged",
    "consumers",
    "node",
    "state",
    "leader",
    "members",
    "online",
];

/// The same without the counts: the `columns` of a listing without statistics. A queue's
/// `state` is listed without statistics too, and says when a classic queue is down on a node
/// that runs.
const UNCOUNTED_QUEUE_FIELDS: &[&str] =
    &["name", "type", "durable", "auto_delete", "arguments", "node", "state", "leader", "members", "online"];

/// A field of a queue's listing that `QueueInfo` reads, named as the listing names it.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum QueueField {
    Name,
    Type,
    Durable,
    AutoDelete,
    Arguments,
    Messages,
    MessagesUnacknowledged,
    Consumers,
    Node,
    State,
    Leader,
    Members,
    Online,
    /// A queue with statistics is listed with dozens of fields (rates, memory, garbage
    /// collection): skipped, not kept, they were most of `inspect`'s memory.
    #[serde(other)]
    Other,
}

/// A queue of a listing, read field by field as it is parsed, on the thread that received the
/// listing: at 50,000 queues the slower listings are still on their way meanwhile. A field
/// listed twice has its last value, except `online`: RabbitMQ 3.10 lists a quorum queue with a
/// member offline with `online` twice, the members online now and at its last statistics, and a
/// member is online only if every listing of it says so. A derived reader refuses such an
/// object.
struct ListedQueue(QueueInfo);

impl<'de> Deserialize<'de> for ListedQueue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ListedQueue, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = QueueInfo;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a queue")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<QueueInfo, A::Error> {
                use serde::de::Error;
                let (mut name, mut durable, mut auto_delete) = (None, None, None);
                let mut unreadable_online = None;
                let mut q = QueueInfo {
                    name: QueueName::default(),
                    kind: QueueType::Classic,
                    durable: false,
                    auto_delete: false,
                    arguments: Arguments::new(),
                    messages: 0,
                    messages_unacknowledged: 0,
                    consumers: 0,
                    node: None,
                    state: None,
                    leader: None,
                    members: None,
                    online: None,
                };
                while let Some(field) = map.next_key::<QueueField>()? {
                    match field {
                        QueueField::Name => name = Some(map.next_value()?),
                        QueueField::Type => q.kind = QueueType::from(&*map.next_value::<Text>()?.0),
                        QueueField::Durable => durable = Some(map.next_value()?),
                        QueueField::AutoDelete => auto_delete = Some(map.next_value()?),
                        QueueField::Arguments => q.arguments = map.next_value::<ListedArguments>()?.0,
                        QueueField::Messages => q.messages = map.next_value()?,
                        QueueField::MessagesUnacknowledged => q.messages_unacknowledged = map.next_value()?,
                        QueueField::Consumers => q.consumers = map.next_value()?,
                        QueueField::Node => q.node = map.next_value()?,
                        QueueField::State => q.state = map.next_value::<Option<Text>>()?.map(|s| known(s.0, STATES)),
                        QueueField::Leader => q.leader = map.next_value()?,
                        QueueField::Members => q.members = map.next_value()?,
                        // Not known is `null` or `""` (RabbitMQ's `''`, what a queue type's
                        // `i/2` answers for an item it has no value for), as if not listed.
                        // Anything else but a list of node names is refused: read as "no
                        // member online", it would warn that every member is down.
                        QueueField::Online => {
                            let listed = match map.next_value::<Value>()? {
                                Value::Null => continue,
                                Value::String(s) if s.is_empty() => continue,
                                value => match serde_json::from_value::<Vec<String>>(value.clone()) {
                                    Ok(listed) => listed,
                                    // Refused once the name is known, which may come later.
                                    Err(_) => {
                                        unreadable_online.get_or_insert(value);
                                        continue;
                                    }
                                },
                            };
                            q.online = Some(match q.online.take() {
                                None => listed,
                                Some(before) => before.into_iter().filter(|m| listed.contains(m)).collect(),
                            });
                        }
                        QueueField::Other => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                q.name = name.ok_or_else(|| A::Error::missing_field("name"))?;
                if let Some(value) = unreadable_online {
                    // Debug-quoted: a name's quotes and control characters are escaped.
                    return Err(A::Error::custom(format!(
                        "queue {:?}: `online` is {value}, not a list of node names",
                        q.name
                    )));
                }
                q.durable = durable.ok_or_else(|| A::Error::missing_field("durable"))?;
                q.auto_delete = auto_delete.ok_or_else(|| A::Error::missing_field("auto_delete"))?;
                Ok(q)
            }
        }
        d.deserialize_map(Fields).map(ListedQueue).map_err(|e| {
            // The parser adds the position again to the error made here.
            let e = e.to_string();
            serde::de::Error::custom(format!(
                "the management API listed a queue hopper cannot read: {}",
                without_position(&e)
            ))
        })
    }
}

/// Text of an answer, borrowed from it where it holds no escapes.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// Queue states as listed: one of these is shared, not made per queue.
const STATES: &[&str] = &["running", "down", "crashed", "stopped", "minority"];

/// `text` as one of `known`, shared, or else as its own copy.
fn known(text: Cow<'_, str>, known: &[&'static str]) -> Cow<'static, str> {
    match known.iter().find(|k| **k == text) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(text.into_owned()),
    }
}

/// A parser's message without the " at line L column C" that serde_json ends it with.
fn without_position(message: &str) -> &str {
    match message.rsplit_once(" at line ") {
        Some((before, at))
            if at.split_once(" column ").is_some_and(|(l, c)| l.parse::<u64>().is_ok() && c.parse::<u64>().is_ok()) =>
        {
            before
        }
        _ => message,
    }
}

/// A vhost's exchanges, made into `Live`'s map on the thread that received the listing.
struct ListedExchanges(BTreeMap<ExchangeName, LiveExchange>);

impl<'de> Deserialize<'de> for ListedExchanges {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ListedExchanges, D::Error> {
        let listed = Vec::<ExchangeInfo>::deserialize(d)?;
        let exchanges = listed.into_iter().map(|e| {
            let exchange = LiveExchange {
                kind: e.kind.as_str().into(),
                durable: e.durable,
                auto_delete: e.auto_delete,
                internal: e.internal,
                arguments: e.arguments.0,
            };
            (e.name.into(), exchange)
        });
        Ok(ListedExchanges(exchanges.collect()))
    }
}

/// A vhost's bindings, made into `Live`'s set on the thread that received the listing.
struct ListedBindings(BTreeSet<Binding>);

impl<'de> Deserialize<'de> for ListedBindings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ListedBindings, D::Error> {
        struct Bindings;
        impl<'de> serde::de::Visitor<'de> for Bindings {
            type Value = Vec<Binding>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of bindings")
            }
            // Each binding is made as it is parsed, its text borrowed from the answer until then:
            // the default exchange's implicit bindings, one per queue, are skipped without a copy.
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Binding>, A::Error> {
                let mut bindings = Vec::new();
                while let Some(b) = seq.next_element::<BindingInfo<'de>>()? {
                    // The default exchange's implicit bindings are not bindings anyone can change.
                    if b.source.is_empty() {
                        continue;
                    }
                    // Names are shared text: made from the borrowed text, without a `String` first.
                    let destination = match &*b.destination_type {
                        "exchange" => Destination::Exchange((&*b.destination).into()),
                        _ => Destination::Queue((&*b.destination).into()),
                    };
                    bindings.push(Binding {
                        source: (&*b.source).into(),
                        destination,
                        routing_key: (&*b.routing_key).into(),
                        arguments: b.arguments.0,
                    });
                }
                Ok(bindings)
            }
        }
        Ok(ListedBindings(d.deserialize_seq(Bindings)?.into_iter().collect()))
    }
}

/// A node of the cluster, as `/api/nodes` lists it. A stopped node is listed with `running:
/// false` and no alarm fields.
#[derive(Debug, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    #[serde(default)]
    pub running: bool,
    #[serde(default)]
    pub mem_alarm: bool,
    #[serde(default)]
    pub disk_free_alarm: bool,
}

/// The fields of a binding's listing that `BindingInfo` reads, asked for as its `columns`.
const BINDING_COLUMNS: &[&str] = &["source", "destination", "destination_type", "routing_key", "arguments"];

/// A binding as listed, its text borrowed from the answer where it holds no escapes.
#[derive(Debug, Deserialize)]
pub struct BindingInfo<'a> {
    #[serde(borrow)]
    pub source: Cow<'a, str>,
    #[serde(borrow)]
    pub destination: Cow<'a, str>,
    /// `queue` or `exchange`.
    #[serde(borrow)]
    pub destination_type: Cow<'a, str>,
    #[serde(borrow)]
    pub routing_key: Cow<'a, str>,
    #[serde(default)]
    pub arguments: ListedArguments,
}

#[derive(Debug, Deserialize)]
pub struct PolicyInfo {
    pub name: String,
    pub pattern: String,
    #[serde(rename = "apply-to")]
    pub apply_to: String,
    #[serde(default)]
    pub priority: i64,
    #[serde(default)]
    pub definition: Map<String, Value>,
}

// ---------------------------------------------------------------------------------------------
// Reading a vhost
// ---------------------------------------------------------------------------------------------

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

async fn list_with(api: &Api, vhost: &str, stats: Stats) -> Result<Live> {
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
        let (queues, policies, operator_policies, nodes) = tokio::join!(
            api.get::<Vec<ListedQueue>>(&queues_path),
            api.get::<Vec<PolicyInfo>>(&paths[2]),
            api.get::<Vec<PolicyInfo>>(&paths[3]),
            api.get::<Vec<NodeInfo>>("/nodes?columns=name,running,mem_alarm,disk_free_alarm"),
        );
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
        Ok((queues, nodes))
    };
    let (bindings, queues, exchanges) =
        tokio::join!(api.get::<ListedBindings>(&paths[1]), queues, api.get::<ListedExchanges>(&paths[0]));
    let (ListedExchanges(exchanges), ListedBindings(bindings)) =
        (exchanges.map_err(listing)?, bindings.map_err(listing)?);
    let (queues, nodes) = queues?;
    Ok(Live { exchanges, queues, bindings: Some(bindings), version: None, nodes })
}

fn node(n: NodeInfo) -> Node {
    let alarms = [(n.mem_alarm, Alarm::Memory), (n.disk_free_alarm, Alarm::Disk)]
        .into_iter()
        .filter_map(|(on, alarm)| on.then_some(alarm))
        .collect();
    Node { name: n.name, running: n.running, alarms }
}

/// Where a queue lives, judged against which nodes run: a quorum member is online only when the
/// broker says so and its node runs; a classic queue is available while its node runs.
fn placement(q: &mut QueueInfo, nodes: &[Node]) -> Option<Placement> {
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
fn applied(policies: Vec<PolicyInfo>) -> Vec<Policy> {
    policies
        .into_iter()
        .map(|p| {
            let definition = p.definition.into_iter().filter_map(|(k, v)| Some((k, arg(v)?))).collect();
            Policy::new(p.name, &p.pattern, ApplyTo::from(&*p.apply_to), p.priority, definition)
        })
        .collect()
}

/// A listing's `arguments` object, made into `Arguments` as it is parsed, with no map of JSON
/// values first. The names hopper reads (`arg::NAMED`) are shared, not copied: with each queue's
/// names copied, each comparison had a pointer to follow, and on RabbitMQ 4.3 at 500 topologies
/// indexing the queues by dead-letter target (`plan::index`) took 1.2 to 1.7 ms after the last
/// answer; with them shared, 0.6 ms.
#[derive(Debug, Default)]
pub struct ListedArguments(pub Arguments);

impl<'de> Deserialize<'de> for ListedArguments {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ListedArguments, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = Arguments;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of arguments")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Arguments, A::Error> {
                let mut entries: Vec<(ArgKey, Option<ArgValue>)> = Vec::new();
                while let Some(Text(key)) = map.next_key()? {
                    let value = map.next_value::<Listed>()?.0;
                    let key: ArgKey = match arg::NAMED.iter().find(|named| **named == key) {
                        Some(named) => Cow::Borrowed(named),
                        None => Cow::Owned(key.into_owned()),
                    };
                    entries.push((key, value));
                }
                // A binding's or an exchange's are mostly `{}`.
                if entries.is_empty() {
                    return Ok(Arguments::new());
                }
                // The last of a name listed twice wins, as in a map, even when it is `null`: it
                // then leaves no value, not the one listed before it.
                entries.reverse();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                entries.dedup_by(|later, earlier| later.0 == earlier.0);
                Ok(Arguments::from_sorted(entries.into_iter().filter_map(|(key, value)| Some((key, value?))).collect()))
            }
        }
        Ok(ListedArguments(d.deserialize_map(Entries)?))
    }
}

/// A policy's value as the management API lists it; `null` is no value.
fn arg(v: Value) -> Option<ArgValue> {
    Some(match v {
        Value::String(s) => ArgValue::str(s),
        Value::Bool(b) => ArgValue::Bool(b),
        Value::Number(n) => n.as_i64().map_or_else(|| ArgValue::Other(n.to_string()), ArgValue::Int),
        Value::Null => return None,
        other => ArgValue::Other(other.to_string()),
    })
}

/// An argument's value as the management API lists it, read as `arg` reads it, but straight
/// from the text where it is a string, a boolean or an integer, as almost every argument is,
/// with no JSON value made first; anything else is kept as the JSON it was listed as.
struct Listed(Option<ArgValue>);

impl<'de> Deserialize<'de> for Listed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Listed, D::Error> {
        struct Value;
        impl<'de> serde::de::Visitor<'de> for Value {
            type Value = Option<ArgValue>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an argument's value")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Some(ArgValue::str(s)))
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Self::Value, E> {
                Ok(Some(ArgValue::Bool(b)))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(Some(ArgValue::Int(n)))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(Some(i64::try_from(n).map_or_else(|_| ArgValue::Other(n.to_string()), ArgValue::Int)))
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Self::Value, E> {
                Ok(Some(ArgValue::Other(serde_json::Value::from(n).to_string())))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                let listed = serde_json::Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
                Ok(Some(ArgValue::Other(listed.to_string())))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let listed = serde_json::Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Some(ArgValue::Other(listed.to_string())))
            }
        }
        d.deserialize_any(Value).map(Listed)
    }
}

/// Creates a vhost (tests and quickstarts; `apply` itself never creates one).
pub async fn create_vhost(endpoint: &Endpoint, name: &str) -> Result<()> {
    let api = Api::new(endpoint);
    let body =
        serde_json::json!({"description": "created by hopper", "default_queue_type": QueueType::Classic.as_str()});
    api.put(&format!("/vhosts/{}", segment(name)), &body).await.map_err(|e| anyhow!(explain(&api, &e)))
}

pub async fn delete_vhost(endpoint: &Endpoint, name: &str) -> Result<()> {
    let api = Api::new(endpoint);
    match api.delete(&format!("/vhosts/{}", segment(name))).await {
        Ok(()) | Err(HttpError::Status { status: 404, .. }) => Ok(()),
        Err(e) => Err(anyhow!(explain(&api, &e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vhosts_are_one_segment() {
        assert_eq!(segment("/"), "%2F");
        assert_eq!(segment("a b/c"), "a%20b%2Fc");
        assert_eq!(segment("orders.dlq-1_~é%"), "orders.dlq-1_~%C3%A9%25");
        // The same escaping as the AMQP URL's vhost, which reads back as itself.
        let url = format!("amqp://h/{}", segment("a/b é%"));
        assert_eq!(super::super::uri::parse(&url).unwrap().vhost.as_deref(), Some("a/b é%"));
    }

    fn listed(json: &str) -> Result<Vec<QueueInfo>, serde_json::Error> {
        Ok(serde_json::from_str::<Vec<ListedQueue>>(json)?.into_iter().map(|ListedQueue(q)| q).collect())
    }

    #[test]
    fn a_queue_listed_with_a_field_twice_is_read() {
        // As RabbitMQ 3.10 lists a quorum queue with a member offline: `online` twice.
        let qs = listed(
            r#"[{"name":"orders","type":"quorum","durable":true,"auto_delete":false,"arguments":{"x-queue-type":"quorum"},
                 "members":["a","b","c"],"online":["a","b","c"],"online":["a","c"],"garbage_collection":{"x":1}},
                {"name":"old","durable":true,"auto_delete":false,"node":"n1","node":"n2"}]"#,
        )
        .unwrap();
        assert_eq!(
            qs[0].online.as_deref(),
            Some(&["a".to_string(), "c".to_string()][..]),
            "online only if every listing says so"
        );
        assert_eq!(qs[0].arguments.get("x-queue-type"), Some(&ArgValue::str("quorum")));
        assert_eq!(
            (qs[1].kind.as_str(), qs[1].node.as_deref(), qs[1].online.as_ref()),
            ("classic", Some("n2"), None),
            "the last value, classic by default"
        );
    }

    #[test]
    fn online_that_is_not_a_list_of_nodes_is_not_read_as_none_online() {
        let queue = |online: &str| {
            listed(&format!(
                r#"[{{"name":"orders","type":"quorum","durable":true,"auto_delete":false,"members":["a","b"],{online}}}]"#
            ))
        };
        assert_eq!(queue(r#""online":null"#).unwrap()[0].online, None, "not known");
        assert_eq!(queue(r#""online":"""#).unwrap()[0].online, None, "RabbitMQ's '' for not known");
        assert_eq!(
            queue(r#""online":["a"],"online":null"#).unwrap()[0].online.as_deref(),
            Some(&["a".to_string()][..]),
            "a listing that does not know leaves what another said"
        );
        // Named however it is written, even before its name; a hostile name is escaped.
        let e = listed(r#"[{"online":7,"name":"a\"b\u001b[2J","durable":true,"auto_delete":false}]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains(r#"queue "a\"b\u{1b}[2J": `online` is 7"#), "{e}");
        for odd in [r#""online":"a""#, r#""online":{"a":true}"#, r#""online":[1]"#] {
            let e = queue(odd).unwrap_err().to_string();
            assert!(e.contains("the management API listed a queue hopper cannot read"), "{odd}: {e}");
            assert!(e.contains("queue \"orders\": `online` is "), "the queue named: {odd}: {e}");
            assert!(e.contains("not a list of node names"), "{odd}: {e}");
        }
    }

    #[test]
    fn every_column_asked_for_is_a_field_read() {
        for column in QUEUE_FIELDS.iter().chain(UNCOUNTED_QUEUE_FIELDS) {
            let field: QueueField = serde_json::from_value(Value::from(*column)).unwrap();
            assert!(!matches!(field, QueueField::Other), "{column} is asked for and then skipped");
        }
        let counts = ["messages", "messages_unacknowledged", "consumers"];
        let mut uncounted: Vec<&str> = UNCOUNTED_QUEUE_FIELDS.iter().chain(&counts).copied().collect();
        let mut counted = QUEUE_FIELDS.to_vec();
        uncounted.sort();
        counted.sort();
        assert_eq!(uncounted, counted, "without statistics, every column but the counts");
    }

    /// A column left out of the list would fail the read or, where a field has a default, be
    /// read as that default (an exchange not internal, a binding without arguments).
    #[test]
    fn exchanges_and_bindings_are_read_from_the_columns_asked_for() {
        let only = |columns: &[&str], sample: Value| -> Value {
            Value::Object(columns.iter().map(|c| (c.to_string(), sample[*c].clone())).collect())
        };
        let exchange = serde_json::json!({"name": "e", "type": "topic", "durable": true, "auto_delete": true,
            "internal": true, "arguments": {"alternate-exchange": "ae"}, "vhost": "/", "user_who_performed_action": "x"});
        // Whole: a field added to the struct must be added here, and then to the columns.
        let ExchangeInfo { name, kind, durable, auto_delete, internal, arguments } =
            serde_json::from_value(only(EXCHANGE_COLUMNS, exchange)).unwrap();
        assert_eq!((name.as_str(), kind.as_str(), durable, auto_delete, internal), ("e", "topic", true, true, true));
        assert_eq!(arguments.0.len(), 1);
        let binding = serde_json::json!({"source": "s", "destination": "d", "destination_type": "exchange",
            "routing_key": "k", "arguments": {"x-match": "any"}, "vhost": "/", "properties_key": "k"});
        let text = only(BINDING_COLUMNS, binding).to_string();
        let BindingInfo { source, destination, destination_type, routing_key, arguments } =
            serde_json::from_str(&text).unwrap();
        assert_eq!((&*source, &*destination, &*destination_type, &*routing_key), ("s", "d", "exchange", "k"));
        assert_eq!(arguments.0.len(), 1);
    }

    /// As a map of JSON values made them: `null` is no value, the last of a name listed twice
    /// wins (a `null` last too), a number that is not an integer and an object are kept as their text, and a name
    /// with escapes is read whole.
    #[test]
    fn listed_arguments_read_as_a_map_would() {
        let ListedArguments(arguments) = serde_json::from_str(
            r#"{"x-message-ttl": 5000, "x-dead-letter-exchange": "dlx", "x-a\"b": true, "x-none": null,
                "x-fraction": 1.5, "x-object": {"a": [1]}, "x-message-ttl": 6000, "x-queue-type": "quorum",
                "x-expires": 1000, "x-expires": null}"#,
        )
        .unwrap();
        let read: Vec<(&str, &ArgValue)> = arguments.iter().collect();
        assert_eq!(
            read,
            [
                ("x-a\"b", &ArgValue::Bool(true)),
                ("x-dead-letter-exchange", &ArgValue::str("dlx")),
                ("x-fraction", &ArgValue::Other("1.5".into())),
                ("x-message-ttl", &ArgValue::Int(6000)),
                ("x-object", &ArgValue::Other(r#"{"a":[1]}"#.into())),
                ("x-queue-type", &ArgValue::str("quorum")),
            ]
        );
        assert!(serde_json::from_str::<ListedArguments>(r#"["x-message-ttl"]"#).is_err(), "a list is not arguments");
    }

    /// Read straight from the text, a value is what the JSON value a policy's is read through
    /// makes of it, at the edges of the integers and in every other kind of JSON.
    #[test]
    fn an_argument_is_read_as_its_json_value_would_be() {
        for json in [
            "0",
            "-1",
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "18446744073709551615",
            "1.5",
            "1e3",
            "-0.0",
            "2.5E-7",
            "true",
            "false",
            "null",
            r#""""#,
            r#""a\"b\u00e9\n""#,
            "[]",
            r#"[1,"a",null]"#,
            "{}",
            r#"{"b":{"c":[true]},"a":1}"#,
        ] {
            let Listed(read) = serde_json::from_str(json).unwrap();
            assert_eq!(read, arg(serde_json::from_str(json).unwrap()), "{json}");
        }
    }

    #[test]
    fn bindings_are_read_escapes_and_all_without_the_default_exchange() {
        let ListedBindings(bindings) = serde_json::from_str(
            r##"[{"source":"","vhost":"/","destination":"q","destination_type":"queue","routing_key":"q","arguments":{}},
                {"source":"a\"b","vhost":"/","destination":"q\u00e9","destination_type":"queue","routing_key":"k\\","arguments":{"x-match":"all"}},
                {"source":"a","vhost":"/","destination":"e","destination_type":"exchange","routing_key":"#","arguments":{}}]"##,
        )
        .unwrap();
        let listed: Vec<String> = bindings.iter().map(ToString::to_string).collect();
        assert_eq!(bindings.len(), 2, "{listed:?}");
        let escaped = bindings.iter().find(|b| b.source.as_str() == "a\"b").expect("the escaped source");
        assert_eq!(escaped.destination, Destination::Queue("qé".into()));
        assert_eq!((escaped.routing_key.as_str(), escaped.arguments.len()), ("k\\", 1));
        assert!(bindings.iter().any(|b| b.destination == Destination::Exchange("e".into())));
    }

    #[test]
    fn a_queue_without_a_name_is_an_error() {
        let e = listed(r#"[{"durable":true,"auto_delete":false}]"#).unwrap_err();
        assert!(e.to_string().contains("missing field `name`"), "{e}");
    }

    #[test]
    fn a_queue_hopper_cannot_read_is_an_error_that_says_so() {
        let e = listed(r#"[{"name":"orders","durable":"yes","auto_delete":false}]"#).unwrap_err();
        assert!(e.to_string().contains("the management API listed a queue hopper cannot read"), "{e}");
        assert_eq!(e.to_string().matches(" at line ").count(), 1, "the position once: {e}");
    }
}
