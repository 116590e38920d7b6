//! The only module that talks to RabbitMQ: writes over AMQP, reads over the management HTTP API.

pub mod amqp;
pub mod http;
pub mod identity;
pub mod mover;
pub mod redrive;

use anyhow::{Result, bail};
use lapin::uri::{AMQPScheme, AMQPUri};

/// Where the broker is and who we are on it. Several AMQP URLs name the nodes of one cluster:
/// each is tried in turn until one answers.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub nodes: Vec<AMQPUri>,
    /// Base URL of the management API, ending in `/api`.
    pub management_url: String,
}

impl Endpoint {
    /// `amqp_urls` is a comma-separated list; the management URL defaults to the first node's
    /// host on port 15672 (15671 over TLS).
    pub fn new(amqp_urls: &str, management_url: Option<&str>) -> Result<Self> {
        let nodes = amqp_urls
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<AMQPUri>().map_err(|e| anyhow::anyhow!("invalid AMQP URL {}: {e}", redact(s))))
            .collect::<Result<Vec<_>>>()?;
        let Some(first) = nodes.first() else { bail!("no AMQP URL given") };
        let url = match management_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => {
                let (scheme, port) = match first.scheme {
                    AMQPScheme::AMQPS => ("https", 15671),
                    AMQPScheme::AMQP => ("http", 15672),
                };
                format!("{scheme}://{}:{port}/api", first.authority.host)
            }
        };
        Ok(Endpoint { nodes, management_url: url })
    }

    pub fn username(&self) -> &str {
        &self.nodes[0].authority.userinfo.username
    }

    pub fn password(&self) -> &str {
        &self.nodes[0].authority.userinfo.password
    }

    /// The management API and user, as a refusal's commands name them.
    pub fn admin(&self) -> crate::plan::Admin {
        crate::plan::Admin { management_url: redact(&self.management_url), user: self.username().to_string() }
    }

    /// The first node's address, safe to print.
    pub fn describe(&self) -> String {
        let n = &self.nodes[0];
        format!("{}:{}", n.authority.host, n.authority.port)
    }
}

/// A URL with its password replaced, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_never_shown() {
        assert_eq!(redact("amqp://app:s3cret@rabbit:5672/%2f"), "amqp://app:***@rabbit:5672/%2f");
        assert_eq!(redact("amqp://rabbit:5672"), "amqp://rabbit:5672");
    }

    #[test]
    fn management_url_follows_the_first_node() {
        let e = Endpoint::new("amqp://u:p@10.0.0.1:5672, amqp://u:p@10.0.0.2:5672", None).unwrap();
        assert_eq!(e.nodes.len(), 2);
        assert_eq!(e.management_url, "http://10.0.0.1:15672/api");
        assert_eq!(e.username(), "u");
        let e = Endpoint::new("amqps://h:5671", None).unwrap();
        assert_eq!(e.management_url, "https://h:15671/api");
    }
}
