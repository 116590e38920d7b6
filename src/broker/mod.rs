//! The only module that talks to RabbitMQ: writes over AMQP, reads over the management HTTP API.

pub mod amqp;
pub mod http;
pub mod identity;
pub mod mover;
pub mod progress;
pub mod redrive;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use lapin::uri::{AMQPScheme, AMQPUri};

/// How long hopper waits for a connection, a TLS handshake or one request, unless `--timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the broker is and who we are on it. Several AMQP URLs name the nodes of one cluster:
/// each is tried in turn until one answers. Both endpoints sign in with the same credentials.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Each with the run's credentials in it (lapin takes them from the URI).
    pub nodes: Vec<AMQPUri>,
    /// Base URL of the management API, ending in `/api`, without credentials: the first of
    /// `management_urls`, as messages name it.
    pub management_url: String,
    /// Every management API base URL, tried in turn when one does not answer (a cluster's nodes
    /// each serve the same API): as given, or one derived from each AMQP node.
    pub management_urls: Vec<String>,
    pub username: String,
    pub password: Password,
    pub tls: Arc<tls::Tls>,
    /// For connecting, the TLS handshake, and each request.
    pub timeout: Duration,
}

/// A password: shown as `***` however it is printed, so no message can leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub fn new(secret: impl Into<String>) -> Password {
        Password(secret.into())
    }

    /// The secret itself, for signing in only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// What a run was told about the broker, before anything is connected.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub amqp_urls: String,
    pub management_url: Option<String>,
    /// Replace what the URLs carry; otherwise the first URL's, otherwise guest/guest.
    pub username: Option<String>,
    pub password: Option<Password>,
    pub tls: tls::Tls,
    pub timeout: Option<Duration>,
}

impl Endpoint {
    /// `amqp_urls` is a comma-separated list, and so is the management URL; it defaults to each
    /// node's host on port 15672 (15671 over TLS). Credentials come from the first URL.
    pub fn new(amqp_urls: &str, management_url: Option<&str>) -> Result<Self> {
        Endpoint::from_settings(Settings {
            amqp_urls: amqp_urls.to_string(),
            management_url: management_url.map(str::to_string),
            ..Settings::default()
        })
    }

    /// Whether any management URL is HTTPS (each was checked to start with http:// or https://).
    pub fn management_over_tls(&self) -> bool {
        self.management_urls.iter().any(|u| u.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://")))
    }

    /// Whether every management URL names this machine (`localhost`, a loopback address): the
    /// broker then answers on the CPUs hopper computes on.
    pub fn management_is_local(&self) -> bool {
        self.management_urls.iter().all(|url| {
            let host = url.parse::<ureq::http::Uri>().ok().and_then(|u| u.host().map(str::to_string));
            host.is_some_and(|host| {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                host.eq_ignore_ascii_case("localhost")
                    || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
            })
        })
    }

    pub fn from_settings(settings: Settings) -> Result<Self> {
        let mut nodes = settings
            .amqp_urls
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<AMQPUri>().map_err(|e| anyhow::anyhow!("invalid AMQP URL {}: {e}", redact(s))))
            .collect::<Result<Vec<_>>>()?;
        let Some(first) = nodes.first() else { bail!("no AMQP URL given") };
        let username = settings.username.unwrap_or_else(|| first.authority.userinfo.username.clone());
        let password = settings.password.unwrap_or_else(|| Password::new(first.authority.userinfo.password.clone()));
        let urls = match settings.management_url {
            Some(urls) => urls
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(management_url)
                .collect::<Result<Vec<_>>>()?,
            None => {
                let mut derived: Vec<String> = Vec::new();
                for node in &nodes {
                    let (scheme, port) = match node.scheme {
                        AMQPScheme::AMQPS => ("https", 15671),
                        AMQPScheme::AMQP => ("http", 15672),
                    };
                    let url = format!("{scheme}://{}:{port}/api", bracketed(&node.authority.host));
                    if !derived.contains(&url) {
                        derived.push(url);
                    }
                }
                derived
            }
        };
        let Some(url) = urls.first().cloned() else { bail!("no management URL given") };
        // Every node signs in as the run's user, whatever each URL said.
        for node in &mut nodes {
            node.authority.userinfo.username = username.clone();
            node.authority.userinfo.password = password.expose().to_string();
        }
        Ok(Endpoint {
            nodes,
            management_url: url,
            management_urls: urls,
            username,
            password,
            tls: Arc::new(settings.tls),
            timeout: settings.timeout.unwrap_or(DEFAULT_TIMEOUT),
        })
    }

    pub fn username(&self) -> &str {
        &self.username
    }

    /// The management API and user, as a refusal's commands name them.
    pub fn admin(&self) -> crate::plan::Admin {
        crate::plan::Admin { management_url: self.management_url.clone(), user: self.username.clone() }
    }

    /// The first node's address, safe to print.
    pub fn describe(&self) -> String {
        address(&self.nodes[0])
    }
}

/// A node's `host:port`, as messages name it.
pub fn address(node: &AMQPUri) -> String {
    let scheme = match node.scheme {
        AMQPScheme::AMQPS => "amqps",
        AMQPScheme::AMQP => "amqp",
    };
    format!("{scheme}://{}:{}", bracketed(&node.authority.host), node.authority.port)
}

fn bracketed(host: &str) -> String {
    if host.contains(':') { format!("[{host}]") } else { host.to_string() }
}

/// The management API's base URL as given: `http://` or `https://`, no credentials in it (they
/// would sit in a process list; hopper signs in with the run's user), no trailing slash.
fn management_url(url: &str) -> Result<String> {
    let url = url.trim().trim_end_matches('/');
    let Some((scheme, rest)) = url.split_once("://") else {
        bail!(
            "the management URL {} has no scheme: it must start with http:// or https://, such as http://localhost:15672/api",
            redact(url)
        );
    };
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        bail!(
            "the management URL {} must start with http:// or https://, not {scheme}://; it is the management API's base URL, such as http://localhost:15672/api",
            redact(url)
        );
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        bail!(
            "the management URL {} carries credentials: give them with --username and --password-file (or HOPPER_PASSWORD) instead, so they never sit in a URL",
            redact(url)
        );
    }
    if authority.is_empty() {
        bail!("the management URL {} names no host", redact(url));
    }
    Ok(url.to_string())
}

/// A URL with its password replaced, for messages: whatever comes before the last `@` of the
/// authority is credentials, with or without a scheme.
pub fn redact(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[start..].find(['/', '?', '#']).map_or(url.len(), |i| start + i);
    match url[start..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &url[start..start + at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..start], &url[start + at..])
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_never_shown() {
        assert_eq!(redact("amqp://app:s3cret@rabbit:5672/%2f"), "amqp://app:***@rabbit:5672/%2f");
        assert_eq!(redact("amqp://rabbit:5672"), "amqp://rabbit:5672");
        // Without a scheme, too (it used to be echoed whole).
        assert_eq!(redact("app:s3cret@rabbit:15672/api"), "app:***@rabbit:15672/api");
        assert_eq!(redact("app:s3:c@r@et@rabbit:15672/api"), "app:***@rabbit:15672/api");
        assert_eq!(format!("{:?} {}", Password::new("s3cret"), Password::new("s3cret")), "*** ***");
    }

    #[test]
    fn management_url_follows_the_first_node() {
        let e = Endpoint::new("amqp://u:p@10.0.0.1:5672, amqp://u:p@10.0.0.2:5672", None).unwrap();
        assert_eq!(e.nodes.len(), 2);
        assert_eq!(e.management_url, "http://10.0.0.1:15672/api");
        assert_eq!(e.management_urls, ["http://10.0.0.1:15672/api", "http://10.0.0.2:15672/api"]);
        assert_eq!(e.username(), "u");
        let e = Endpoint::new("amqp://a:5681,amqp://a:5682", Some("http://a:15681/api, http://a:15682/api/")).unwrap();
        assert_eq!(e.management_urls, ["http://a:15681/api", "http://a:15682/api"]);
        assert!(!e.management_over_tls());
        let e = Endpoint::new("amqps://h:5671", None).unwrap();
        assert_eq!(e.management_url, "https://h:15671/api");
        assert!(e.management_over_tls());
        let e = Endpoint::new("amqp://a:5681", Some("http://a:15681/api,HTTPS://b:15671/api")).unwrap();
        assert!(e.management_over_tls());
    }

    #[test]
    fn a_broker_on_this_machine_is_known_by_its_management_urls() {
        let local = |management: &str| Endpoint::new("amqp://rabbit", Some(management)).unwrap().management_is_local();
        for url in [
            "http://localhost:15672/api",
            "https://LOCALHOST/api",
            "http://127.0.0.1:15672/api",
            "http://127.8.0.1/api",
        ] {
            assert!(local(url), "{url}");
        }
        assert!(local("http://[::1]:15672/api, http://127.0.0.1:15673/api"));
        for url in [
            "http://rabbit:15672/api",
            "http://10.0.0.1:15672/api",
            "http://[::2]:15672/api",
            "http://localhost.example/api",
        ] {
            assert!(!local(url), "{url}");
        }
        // A cluster is local only when each of its nodes is.
        assert!(!local("http://localhost:15672/api,http://rabbit-2:15672/api"));
        // Derived from the AMQP URL when not given.
        assert!(Endpoint::new("amqp://localhost:5672", None).unwrap().management_is_local());
    }

    #[test]
    fn credentials_given_apart_replace_the_urls() {
        let settings = Settings {
            amqp_urls: "amqp://u:p@a:5672,amqp://b:5672".into(),
            username: Some("deployer".into()),
            password: Some(Password::new("s3cret")),
            ..Settings::default()
        };
        let e = Endpoint::from_settings(settings).unwrap();
        for node in &e.nodes {
            assert_eq!(
                (node.authority.userinfo.username.as_str(), node.authority.userinfo.password.as_str()),
                ("deployer", "s3cret")
            );
        }
    }

    #[test]
    fn a_management_url_without_a_scheme_is_refused_without_its_password() {
        let e = Endpoint::new("amqp://localhost", Some("app:s3cret@rabbit:15672/api")).unwrap_err().to_string();
        assert!(e.contains("app:***@rabbit") && !e.contains("s3cret"), "{e}");
        let e = Endpoint::new("amqp://localhost", Some("http://app:s3cret@rabbit:15672/api")).unwrap_err().to_string();
        assert!(e.contains("carries credentials") && !e.contains("s3cret"), "{e}");
    }
}
