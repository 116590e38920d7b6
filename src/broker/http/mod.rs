//! Live state over the management HTTP API: five bulk listings per vhost (exchanges, queues,
//! bindings, policies, operator policies). hopper's own small client over ureq (blocking calls
//! on tokio's blocking pool): a handful of GETs do not need an HTTP stack of 150 crates. Here the
//! client and what its errors mean; in `listing` what the API returns; in `read` a vhost read.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Result;
use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Endpoint;
use super::identity::{Cluster, Unnamed};
use crate::live::Live;

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

/// How many times a GET whose answer was cut off is sent again.
const GET_RESENDS: usize = 2;

impl HttpError {
    /// The connection closed before the whole answer came: reset, or ended early (ureq's "Peer
    /// disconnected"). A refusal, a timeout or TLS is not.
    fn cut_off(&self) -> bool {
        use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
        matches!(self, HttpError::Transport(ureq::Error::Io(e))
            if matches!(e.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe))
    }
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
            let mut answer = self.call_one(&self.bases[i], method, path, body.clone(), decode).await;
            // A GET changes nothing, so one whose connection the broker closed before the whole
            // answer came is sent again, twice at most: under load, RabbitMQ 4.3 at 10,000
            // topologies closed a listing's connection mid-answer ("Peer disconnected") and
            // ended a no-op apply. Anything else may have been carried out, and is not resent.
            for _ in 0..GET_RESENDS {
                if method != "GET" || !answer.as_ref().is_err_and(HttpError::cut_off) {
                    break;
                }
                answer = self.call_one(&self.bases[i], method, path, body.clone(), decode).await;
            }
            match answer {
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

mod listing;
use listing::BODY_HINT_CAP;
mod read;
mod records;
#[cfg(test)]
mod tests;

pub use listing::{BindingInfo, ExchangeInfo, ListedArguments, NodeInfo, Overview, PolicyInfo, QueueInfo};
pub use read::*;
pub use records::write_record;
