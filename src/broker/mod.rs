//! The only module that talks to RabbitMQ: writes over AMQP, reads over the management HTTP API.

pub mod amqp;
pub mod budget;
pub mod http;
pub mod identity;
pub mod mover;
pub mod properties;
pub mod redrive;
pub mod tls;
pub mod uri;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use lapin::uri::AMQPScheme;

pub use uri::{AmqpUri, Host, redact};

/// How long hopper waits for a connection, a TLS handshake or one request, unless `--timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the broker is and who we are on it. Several AMQP URLs name the nodes of one cluster:
/// each is tried in turn until one answers. Both endpoints sign in with the same credentials.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// As their URLs gave them; each signs in with `username` and `password`.
    pub nodes: Vec<AmqpUri>,
    /// The vhost the URLs' path names, if any (each URL that names one names the same).
    pub vhost: Option<String>,
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

    pub fn from_settings(settings: Settings) -> Result<Self> {
        let mut nodes = Vec::new();
        for url in uri::split(&settings.amqp_urls) {
            nodes.push(uri::parse(url).map_err(|e| anyhow::anyhow!("the AMQP URL {e}"))?);
        }
        let Some(first) = nodes.first() else { bail!("no AMQP URL given") };
        let username = settings.username.or_else(|| first.user.clone()).unwrap_or_else(|| "guest".into());
        let password = settings.password.or_else(|| first.password.clone()).unwrap_or_else(|| Password::new("guest"));
        let mut vhost: Option<&AmqpUri> = None;
        for node in &nodes {
            match (vhost, &node.vhost) {
                (Some(named), Some(v)) if named.vhost.as_ref() != Some(v) => bail!(
                    "the AMQP URLs name two vhosts: {named} names `{}` and {node} names `{v}`; the nodes of one cluster are reached in one vhost",
                    named.vhost.as_deref().unwrap_or_default()
                ),
                (None, Some(_)) => vhost = Some(node),
                _ => {}
            }
        }
        let vhost = vhost.and_then(|node| node.vhost.clone());
        let urls = match settings.management_url {
            Some(urls) => urls
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|url| {
                    uri::parse_management(url)
                        .map(|(url, _)| url)
                        .map_err(|e| anyhow::anyhow!("the management URL {e}"))
                })
                .collect::<Result<Vec<_>>>()?,
            None => {
                let mut derived: Vec<String> = Vec::new();
                for node in &nodes {
                    let (scheme, port) = match node.scheme {
                        AMQPScheme::AMQPS => ("https", 15671),
                        AMQPScheme::AMQP => ("http", 15672),
                    };
                    let url = format!("{scheme}://{}:{port}/api", node.host);
                    if !derived.contains(&url) {
                        derived.push(url);
                    }
                }
                derived
            }
        };
        let Some(url) = urls.first().cloned() else { bail!("no management URL given") };
        Ok(Endpoint {
            nodes,
            vhost,
            management_url: url,
            management_urls: urls,
            username,
            password,
            tls: Arc::new(settings.tls),
            timeout: settings.timeout.unwrap_or(DEFAULT_TIMEOUT),
        })
    }

    /// What lapin connects to for `node`, signed in as the run's user, opening `vhost`.
    pub fn dialled(&self, node: &AmqpUri, vhost: &str) -> lapin::uri::AMQPUri {
        node.dialled(&self.username, &self.password, vhost)
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
        self.nodes[0].address()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_never_shown() {
        assert_eq!(format!("{:?} {}", Password::new("s3cret"), Password::new("s3cret")), "*** ***");
    }

    /// Malformed URLs of every shape, each with `password` where a password goes.
    pub(crate) fn malformed(password: &str) -> Vec<(&'static str, String)> {
        let p = password;
        vec![
            ("amqp", format!("guest:{p}@127.0.0.1:5672")),
            ("amqp", format!("amqp//guest:{p}@127.0.0.1:5672")),
            ("amqp", format!("amqp:/guest:{p}@127.0.0.1:5672")),
            ("amqp", format!("amqp:guest:{p}@127.0.0.1:5672")),
            ("amqp", format!("http://guest:{p}@127.0.0.1:5672")),
            ("amqp", format!("amqp://guest:{p}@127.0.0.1:99999")),
            ("amqp", format!("amqp://guest:{p}@127.0.0.1:56x2")),
            ("amqp", format!("amqp://guest:{p}%zz@127.0.0.1:5672")),
            ("amqp", format!("amqp://guest:{p} x@127.0.0.1:5672")),
            ("amqp", format!("amqp://guest:{p}@more@127.0.0.1:5672")),
            ("amqp", format!("amqp://guest:{p}/x@127.0.0.1:5672")),
            ("amqp", format!("amqp://guest:{p}@[::1")),
            ("amqp", format!("amqp://guest:{p}@[::1%25lo]:5672")),
            ("amqp", format!("amqp://guest:{p}@127.1:5672")),
            ("amqp", format!("amqp://guest:{p}@/orders")),
            ("amqp", format!("amqp://guest:{p}@")),
            ("amqp", format!("amqp://guest:{p}@127.0.0.1:5672/a/b")),
            ("amqp", format!("amqp://guest:{p}@127.0.0.1:5672/%ff")),
            ("amqp", format!("amqp://guest:{p}@127.0.0.1:5672?nope=1")),
            ("amqp", format!("amqp://guest:{p}@127.0.0.1:5672#top")),
            ("amqp", format!("amqp://127.0.0.1:5673,amqp//guest:{p}@127.0.0.1:5672")),
            ("amqp", format!("amqp://guest:{p}@127.0.0.1:5672,127.0.0.1:5673")),
            ("management", format!("guest:{p}@127.0.0.1:15672/api")),
            ("management", format!("http//guest:{p}@127.0.0.1:15672/api")),
            ("management", format!("http://guest:{p}@127.0.0.1:15672/api")),
            ("management", format!("ftp://guest:{p}@127.0.0.1:15672/api")),
            ("management", format!("http://guest:{p}@127.0.0.1:99999/api")),
            ("management", format!("http://127.0.0.1:15673/api,http//guest:{p}@127.0.0.1:15672/api")),
        ]
    }

    /// A password: a marker no URL holds otherwise, then what breaks URLs (`@`, `/`, `:`, `,`,
    /// `%`, `#`, `?`, spaces, brackets).
    pub(crate) fn password() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let tail = proptest::collection::vec(
            prop_oneof![
                proptest::char::range('a', 'z'),
                proptest::char::range('0', '9'),
                proptest::sample::select(vec![
                    '@', '/', ':', ',', '%', '#', '?', ' ', '[', ']', '!', '$', '&', '\'', '(', ')', '*', '+', ';',
                    '=', '~', '-', '.', '_', 'é'
                ]),
            ],
            0..12,
        );
        tail.prop_map(|t| format!("Pw7{}", t.into_iter().collect::<String>()))
            // `/x@` follows the password in one malformed URL: `Pw7,:/` makes `://` with it.
            .prop_filter("a password holding `://` starts a URL of its own", |p| !format!("{p}/").contains("://"))
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { failure_persistence: None, ..Default::default() })]

        /// Whatever is wrong with a URL, the error and the URL as shown hold no password.
        #[test]
        fn a_malformed_url_never_shows_its_password(password in password()) {
            for (kind, url) in malformed(&password) {
                let shown = redact(&url);
                proptest::prop_assert!(!shown.contains(&password), "{url} shown as {shown}");
                let error = match kind {
                    "amqp" => Endpoint::new(&url, None),
                    _ => Endpoint::new("amqp://localhost", Some(&url)),
                };
                match error {
                    Err(e) => {
                        let e = format!("{e:#}");
                        proptest::prop_assert!(!e.contains(&password), "{url}: {e}");
                    }
                    Ok(_) => proptest::prop_assert!(false, "{url} was taken"),
                }
            }
        }
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
    fn credentials_given_apart_replace_the_urls() {
        let settings = Settings {
            amqp_urls: "amqp://u:p@a:5672,amqp://b:5672".into(),
            username: Some("deployer".into()),
            password: Some(Password::new("s3cret")),
            ..Settings::default()
        };
        let e = Endpoint::from_settings(settings).unwrap();
        for node in &e.nodes {
            let dialled = e.dialled(node, "/");
            assert_eq!(
                (dialled.authority.userinfo.username.as_str(), dialled.authority.userinfo.password.as_str()),
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
