//! AMQP URIs (RabbitMQ's URI spec), parsed once into what hopper dials, signs in with and prints,
//! so that what `config show` says and what a run connects to cannot disagree. lapin's own
//! parser took a bracketed IPv6 host for no host at all (`url::Url::domain` is `None` for an
//! address) and dialled `localhost`; it is handed only what this module parsed.

use std::net::{Ipv4Addr, Ipv6Addr};

use lapin::uri::{AMQPAuthority, AMQPQueryString, AMQPScheme, AMQPUri, AMQPUserInfo, SASLMechanism};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use super::Password;

/// Every byte but RFC 3986's unreserved ones is escaped: a user or vhost name printed this way
/// reads back as itself (a vhost's `/` is `%2F`).
pub(crate) const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// A host as a URL names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Ipv4(Ipv4Addr),
    /// Written in brackets; a zone (`%25eth0`) is refused, not dropped.
    Ipv6(Ipv6Addr),
    /// A DNS name, ASCII, resolved when dialled.
    Name(String),
}

impl Host {
    /// Whether it names this machine: `localhost` or a loopback address.
    pub fn is_loopback(&self) -> bool {
        match self {
            Host::Ipv4(ip) => ip.is_loopback(),
            Host::Ipv6(ip) => ip.is_loopback(),
            Host::Name(name) => name.eq_ignore_ascii_case("localhost"),
        }
    }

    /// As a resolver takes it: an address's text without brackets, which std parses as the
    /// address itself (no lookup), or the name.
    fn dialled(&self) -> String {
        match self {
            Host::Ipv4(ip) => ip.to_string(),
            Host::Ipv6(ip) => ip.to_string(),
            Host::Name(name) => name.clone(),
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Ipv4(ip) => write!(f, "{ip}"),
            Host::Ipv6(ip) => write!(f, "[{ip}]"),
            Host::Name(name) => f.write_str(name),
        }
    }
}

/// One AMQP node, as its URL gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpUri {
    pub scheme: AMQPScheme,
    pub host: Host,
    pub port: u16,
    pub user: Option<String>,
    pub password: Option<Password>,
    /// The path's vhost; `None` when the URL has no path or only `/` (RabbitMQ's URI spec makes
    /// `amqp://host/` the empty vhost, which no broker can have; clients read it as "not given").
    pub vhost: Option<String>,
    pub query: AMQPQueryString,
}

impl AmqpUri {
    /// `amqp://host:port`: where it is, safe to print.
    pub fn address(&self) -> String {
        format!("{}://{}:{}", self.scheme, self.host, self.port)
    }

    /// What lapin connects with: this node, signed in as `user`, opening `vhost`.
    pub fn dialled(&self, user: &str, password: &Password, vhost: &str) -> AMQPUri {
        AMQPUri {
            scheme: self.scheme.clone(),
            authority: AMQPAuthority {
                userinfo: AMQPUserInfo { username: user.to_string(), password: password.expose().to_string() },
                host: self.host.dialled(),
                port: self.port,
            },
            vhost: vhost.to_string(),
            query: self.query.clone(),
        }
    }
}

/// The URL as it reads back, its password `***`.
impl std::fmt::Display for AmqpUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://", self.scheme)?;
        if let Some(user) = &self.user {
            write!(f, "{}", utf8_percent_encode(user, COMPONENT))?;
        }
        if self.password.is_some() {
            f.write_str(":***")?;
        }
        if self.user.is_some() || self.password.is_some() {
            f.write_str("@")?;
        }
        write!(f, "{}:{}", self.host, self.port)?;
        match self.vhost.as_deref() {
            // Path steps to other URL parsers (the url crate drops them): spelt out, a name.
            Some(dots @ ("." | "..")) => write!(f, "/{}", dots.replace('.', "%2E"))?,
            Some(vhost) => write!(f, "/{}", utf8_percent_encode(vhost, COMPONENT))?,
            None => {}
        }
        let q = &self.query;
        let pairs = [
            ("frame_max", q.frame_max.map(|v| v.to_string())),
            ("channel_max", q.channel_max.map(|v| v.to_string())),
            ("heartbeat", q.heartbeat.map(|v| v.to_string())),
            ("connection_timeout", q.connection_timeout.map(|v| v.to_string())),
            ("auth_mechanism", q.auth_mechanism.map(|v| v.to_string())),
        ];
        for (i, (key, value)) in pairs.iter().filter_map(|(k, v)| Some((k, v.as_ref()?))).enumerate() {
            write!(f, "{}{key}={value}", if i == 0 { '?' } else { '&' })?;
        }
        Ok(())
    }
}

/// Which part of a URL a problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    UserInformation,
    Host,
    Vhost,
    Query,
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Part::UserInformation => "user or password",
            Part::Host => "host",
            Part::Vhost => "vhost",
            Part::Query => "query",
        })
    }
}

/// Which URL: the schemes it takes differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Amqp,
    Management,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Amqp => "amqp:// or amqps://, such as amqp://localhost:5672",
            Kind::Management => "http:// or https://, such as http://localhost:15672/api",
        })
    }
}

/// What is wrong with a URL. None of them quotes the user information: a malformed URL's
/// password cannot be told from the rest, so a message shows the URL `redact`ed and this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    NoSeparator(Kind),
    Scheme(String, Kind),
    Space,
    /// An `@` besides the one that ends the user information, or one after the host (which a
    /// `/`, `?` or `#` in a password ends).
    At,
    Percent(Part),
    NotUtf8(Part),
    Zone(String),
    /// A host that ends in a number but is not a dotted-quad IPv4 address: resolvers read
    /// `127.1` as 127.0.0.1 and `010.0.0.1` as 8.0.0.1.
    NotDottedQuad(String),
    NotAHostName(String),
    NoHost,
    NoPort,
    Port,
    VhostPath,
    Vhost(String),
    UnknownQuery(String),
    QueryValue(String),
    Fragment,
    Credentials,
    /// What the `url` crate found wrong (its messages never quote the URL).
    Url(url::ParseError),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::NoSeparator(kind) => write!(f, "has no `://` after its scheme: it starts with {kind}"),
            Problem::Scheme(scheme, kind) => write!(f, "starts with `{scheme}://`, not {kind}"),
            Problem::Space => {
                f.write_str("holds a space or a control character: percent-encode it (a space is %20)")
            }
            Problem::At => f.write_str(
                "has an `@` that does not end its user and password: an `@`, `/`, `?` or `#` in a user, password or vhost is percent-encoded (%40, %2F, %3F, %23)",
            ),
            Problem::Percent(part) => {
                write!(f, "has a `%` not followed by two hex digits in its {part}: a `%` itself is written %25")
            }
            Problem::NotUtf8(part) => write!(f, "has a {part} that is not UTF-8 once percent-decoded"),
            Problem::Zone(zone) => write!(
                f,
                "names an IPv6 address with a zone (%25{zone}): hopper does not dial by zone; give an address that needs none (a global or loopback one) or a host name"
            ),
            Problem::NotDottedQuad(host) => write!(
                f,
                "names the host `{host}`, which is not an IPv4 address written in full (four decimal numbers, no leading zeros): a resolver would read it as another address; write the address as a.b.c.d"
            ),
            Problem::NotAHostName(host) => write!(
                f,
                "names the host `{host}`, which is not a host name (letters, digits, `-`, `_` and `.`) nor an IP address; the nodes of a cluster are URLs of their own, comma-separated"
            ),
            Problem::NoHost => f.write_str("names no host"),
            Problem::NoPort => f.write_str("has a `:` and no port after it: drop the `:` for the default port"),
            Problem::Port => f.write_str("has a port that is not a number from 1 to 65535"),
            Problem::VhostPath => f.write_str(
                "has a path of more than one segment: the path is the vhost, and a `/` in a vhost name is written %2F",
            ),
            Problem::Vhost(problem) => write!(f, "names a vhost hopper cannot use: {problem}"),
            Problem::UnknownQuery(key) => write!(
                f,
                "has the query parameter `{key}`, which hopper does not use: it takes heartbeat, frame_max, channel_max, connection_timeout and auth_mechanism (TLS files are given with --tls-*-file)"
            ),
            Problem::QueryValue(key) => write!(f, "has a value of `{key}` that is not a number of its range"),
            Problem::Fragment => f.write_str("has a fragment (`#...`), which means nothing to a broker: percent-encode a `#` as %23"),
            Problem::Credentials => f.write_str(
                "carries credentials: give them with --username and --password-file (or HOPPER_PASSWORD) instead, so they never sit in a URL",
            ),
            Problem::Url(e) => write!(f, "is not a URL ({e})"),
        }
    }
}

/// A URL that cannot be used: as shown (`redact`ed) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriError {
    pub shown: String,
    pub problem: Problem,
}

impl std::fmt::Display for UriError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.shown, self.problem)
    }
}

impl std::error::Error for UriError {}

/// Each URL of a comma-separated list. A comma starts another URL only where what follows has a
/// scheme (`://`): RFC 3986 allows a comma in a password, and splitting there would have
/// printed half of it as a URL of its own.
pub fn split(list: &str) -> Vec<&str> {
    let mut urls: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    for (comma, _) in list.match_indices(',') {
        if list[comma + 1..].split(',').next().is_some_and(|next| next.contains("://")) {
            urls.push((start, comma));
            start = comma + 1;
        }
    }
    urls.push((start, list.len()));
    // A comma before nothing (`amqp://a,`) separates nothing.
    urls.into_iter()
        .map(|(a, b)| list[a..b].trim_matches(|c: char| c == ',' || c.is_whitespace()))
        .filter(|s| !s.is_empty())
        .collect()
}

/// A URL or a list of them with the password of each replaced by `***`, for messages. For a URL
/// that does not parse, where its password ends cannot be known: everything from the first `:`
/// of what precedes the last `@` (after a `://`, if there is one) up to that `@` is hidden.
pub fn redact(list: &str) -> String {
    split(list).into_iter().map(redact_one).collect::<Vec<_>>().join(",")
}

fn redact_one(url: &str) -> String {
    let Some(at) = url.rfind('@') else { return url.to_string() };
    let start = url[..at].find("://").map_or(0, |i| i + 3);
    match url[start..at].find(':') {
        Some(colon) => format!("{}:***{}", &url[..start + colon], &url[at..]),
        None => url.to_string(),
    }
}

/// The parts of a URL as written, before any decoding.
struct Raw<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    /// Host and port.
    hostport: &'a str,
    path: &'a str,
}

/// Splits a URL the way RFC 3986 does, refusing what the `url` crate would silently repair (it
/// drops tabs and newlines, encodes a second `@`, and removes `.` and `..` path segments, which
/// are vhost names here).
fn raw(url: &str, kind: Kind) -> Result<Raw<'_>, Problem> {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Problem::Space);
    }
    let Some((scheme, rest)) = url.split_once("://") else { return Err(Problem::NoSeparator(kind)) };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(authority_end);
    if after.contains('@') || authority.matches('@').count() > 1 {
        return Err(Problem::At);
    }
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => (Some(userinfo), hostport),
        None => (None, authority),
    };
    zone(host_text(hostport))?;
    let path = after.split(['?', '#']).next().unwrap_or("");
    let query = after.split('#').next().and_then(|a| a.split_once('?')).map(|(_, q)| q);
    // A management URL's path and query are the API's, sent as they are (a bad escape there is
    // the API's to answer).
    let checked = match kind {
        Kind::Amqp => &[
            (Part::UserInformation, userinfo.unwrap_or("")),
            (Part::Host, hostport),
            (Part::Vhost, path),
            (Part::Query, query.unwrap_or("")),
        ][..],
        Kind::Management => &[(Part::UserInformation, userinfo.unwrap_or("")), (Part::Host, hostport)][..],
    };
    for &(part, text) in checked {
        let bytes = text.as_bytes();
        let bad = bytes.iter().enumerate().any(|(i, b)| {
            *b == b'%' && !(bytes.len() > i + 2 && bytes[i + 1].is_ascii_hexdigit() && bytes[i + 2].is_ascii_hexdigit())
        });
        if bad {
            return Err(Problem::Percent(part));
        }
    }
    if after.contains('#') {
        return Err(Problem::Fragment);
    }
    Ok(Raw { scheme, userinfo, hostport, path })
}

fn decode(text: &str, part: Part) -> Result<String, Problem> {
    percent_decode_str(text).decode_utf8().map(|s| s.into_owned()).map_err(|_| Problem::NotUtf8(part))
}

/// A host as written (`raw`), and as the `url` crate parsed it.
fn host(written: &str, parsed: Option<url::Host<&str>>) -> Result<Host, Problem> {
    match parsed {
        Some(url::Host::Ipv6(ip)) => Ok(Host::Ipv6(ip)),
        Some(url::Host::Ipv4(_)) | Some(url::Host::Domain(_)) => {
            let name = decode(written, Part::Host)?;
            if name.is_empty() {
                return Err(Problem::NoHost);
            }
            // The WHATWG rule for what a resolver reads as an IPv4 address: the last label is
            // a number (decimal, or hex with 0x).
            let last = name.trim_end_matches('.').rsplit('.').next().unwrap_or("");
            let numeric = !last.is_empty()
                && (last.bytes().all(|b| b.is_ascii_digit())
                    || last
                        .strip_prefix("0x")
                        .or(last.strip_prefix("0X"))
                        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit())));
            if numeric {
                return name.parse::<Ipv4Addr>().map(Host::Ipv4).map_err(|_| Problem::NotDottedQuad(name));
            }
            if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
                return Err(Problem::NotAHostName(name));
            }
            Ok(Host::Name(name))
        }
        None => Err(Problem::NoHost),
    }
}

/// An IPv6 address's zone (`[fe80::1%25eth0]`), refused with its reason: the url crate would
/// only say "invalid IPv6 address".
fn zone(written: &str) -> Result<(), Problem> {
    if let Some(inner) = written.strip_prefix('[')
        && let Some((_, zone)) = inner.trim_end_matches(']').split_once('%')
    {
        let zone = decode(zone.strip_prefix("25").unwrap_or(zone), Part::Host)?;
        return Err(Problem::Zone(zone));
    }
    Ok(())
}

/// The port as written after the host: `None` for none; a `:` with nothing after it refused.
fn port(hostport: &str, parsed: Option<u16>) -> Result<Option<u16>, Problem> {
    let after_host = hostport.rsplit_once(']').map_or(hostport, |(_, rest)| rest);
    match parsed {
        Some(0) => Err(Problem::Port),
        Some(port) => Ok(Some(port)),
        None if after_host.ends_with(':') => Err(Problem::NoPort),
        None => Ok(None),
    }
}

fn url_error(e: url::ParseError) -> Problem {
    match e {
        url::ParseError::InvalidPort => Problem::Port,
        url::ParseError::EmptyHost => Problem::NoHost,
        e => Problem::Url(e),
    }
}

/// One AMQP URL. Errors show it redacted.
pub fn parse(text: &str) -> Result<AmqpUri, UriError> {
    parse_amqp(text).map_err(|problem| UriError { shown: redact_one(text), problem })
}

fn parse_amqp(text: &str) -> Result<AmqpUri, Problem> {
    let raw = raw(text, Kind::Amqp)?;
    let scheme = match raw.scheme.to_ascii_lowercase().as_str() {
        "amqp" => AMQPScheme::AMQP,
        "amqps" => AMQPScheme::AMQPS,
        _ => return Err(scheme_problem(raw.scheme, Kind::Amqp)),
    };
    let url = url::Url::parse(text).map_err(url_error)?;
    let host = host(host_text(raw.hostport), url.host())?;
    let port = port(raw.hostport, url.port())?.unwrap_or(scheme.default_port());
    let (user, password) = match raw.userinfo {
        None => (None, None),
        Some(info) => match info.split_once(':') {
            Some((user, password)) => (
                Some(decode(user, Part::UserInformation)?).filter(|u| !u.is_empty()),
                Some(Password::new(decode(password, Part::UserInformation)?)),
            ),
            None => (Some(decode(info, Part::UserInformation)?).filter(|u| !u.is_empty()), None),
        },
    };
    let vhost = match raw.path.strip_prefix('/') {
        None | Some("") => None,
        Some(segment) if segment.contains('/') => return Err(Problem::VhostPath),
        Some(segment) => {
            let vhost = decode(segment, Part::Vhost)?;
            if let Some(problem) = crate::spec::vhost_problem(&vhost) {
                return Err(Problem::Vhost(problem));
            }
            Some(vhost)
        }
    };
    let mut query = AMQPQueryString::default();
    for (key, value) in url.query_pairs() {
        let bad = || Problem::QueryValue(key.to_string());
        match key.as_ref() {
            "frame_max" => query.frame_max = Some(value.parse().map_err(|_| bad())?),
            "channel_max" => query.channel_max = Some(value.parse().map_err(|_| bad())?),
            "heartbeat" => query.heartbeat = Some(value.parse().map_err(|_| bad())?),
            "connection_timeout" => query.connection_timeout = Some(value.parse().map_err(|_| bad())?),
            "auth_mechanism" => query.auth_mechanism = Some(value.parse::<SASLMechanism>().map_err(|_| bad())?),
            _ => return Err(Problem::UnknownQuery(key.to_string())),
        }
    }
    Ok(AmqpUri { scheme, host, port, user, password, vhost, query })
}

fn scheme_problem(scheme: &str, kind: Kind) -> Problem {
    // Only a scheme that looks like one is quoted: whatever precedes `://` could be anything.
    if !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) {
        Problem::Scheme(scheme.to_string(), kind)
    } else {
        Problem::NoSeparator(kind)
    }
}

/// A management API base URL as given (no trailing `/`): http:// or https://, no credentials,
/// its host one hopper dials as written.
pub fn parse_management(text: &str) -> Result<(String, Host), UriError> {
    let text = text.trim().trim_end_matches('/');
    parse_management_url(text)
        .map(|host| (text.to_string(), host))
        .map_err(|problem| UriError { shown: redact_one(text), problem })
}

fn parse_management_url(text: &str) -> Result<Host, Problem> {
    let raw = raw(text, Kind::Management)?;
    if !matches!(raw.scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return Err(scheme_problem(raw.scheme, Kind::Management));
    }
    if raw.userinfo.is_some() {
        return Err(Problem::Credentials);
    }
    let written = host_text(raw.hostport);
    let url = url::Url::parse(text).map_err(url_error)?;
    // A special scheme's host is rewritten by the url crate (`127.1` becomes 127.0.0.1): read
    // the one written, as an opaque host.
    let parsed = url::Host::parse_opaque(written).map_err(url_error)?;
    let host = host(
        written,
        Some(match &parsed {
            url::Host::Domain(d) => url::Host::Domain(d.as_str()),
            url::Host::Ipv4(ip) => url::Host::Ipv4(*ip),
            url::Host::Ipv6(ip) => url::Host::Ipv6(*ip),
        }),
    )?;
    port(raw.hostport, url.port())?;
    Ok(host)
}

/// The host of `host[:port]` as written.
fn host_text(hostport: &str) -> &str {
    if hostport.starts_with('[') {
        return hostport.find(']').map_or(hostport, |end| &hostport[..=end]);
    }
    hostport.split_once(':').map_or(hostport, |(host, _)| host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_host_form_is_what_was_written() {
        let host = |url: &str| parse(url).unwrap().host;
        assert_eq!(host("amqp://127.0.0.2"), Host::Ipv4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(host("amqp://u:p@[::1]:5672"), Host::Ipv6(Ipv6Addr::LOCALHOST));
        assert_eq!(host("amqps://[::FFFF:127.0.0.1]"), Host::Ipv6("::ffff:127.0.0.1".parse().unwrap()));
        assert_eq!(host("amqp://Rabbit-1.example.com"), Host::Name("Rabbit-1.example.com".into()));
        assert_eq!(host("amqp://ho%61st"), Host::Name("hoast".into()));
        let ipv6 = parse("amqp://[::1]:5673").unwrap();
        assert_eq!(
            (ipv6.address(), ipv6.dialled("u", &Password::new("p"), "/").authority.host),
            ("amqp://[::1]:5673".into(), "::1".into())
        );
    }

    #[test]
    fn the_path_is_the_vhost_and_no_path_is_none() {
        let vhost = |url: &str| parse(url).unwrap().vhost;
        assert_eq!(vhost("amqp://h"), None);
        assert_eq!(vhost("amqp://h/"), None);
        assert_eq!(vhost("amqp://h/%2F"), Some("/".into()));
        assert_eq!(vhost("amqp://h/%2f"), Some("/".into()));
        assert_eq!(vhost("amqp://h/orders?heartbeat=5"), Some("orders".into()));
        // Path steps to the url crate, names here: refused, since the management API's paths
        // cannot address them (see `spec::vhost_problem`).
        for dots in ["amqp://h/.", "amqp://h/%2e%2E"] {
            assert!(matches!(parse(dots).unwrap_err().problem, Problem::Vhost(_)), "{dots}");
        }
        assert_eq!(parse("amqp://h/a/b").unwrap_err().problem, Problem::VhostPath);
    }

    #[test]
    fn a_comma_starts_a_url_only_before_a_scheme() {
        assert_eq!(split("amqp://a, amqp://b,amqps://c"), ["amqp://a", "amqp://b", "amqps://c"]);
        assert_eq!(split("amqp://u:p,w@a,amqp://b"), ["amqp://u:p,w@a", "amqp://b"]);
        assert_eq!(parse(split("amqp://u:p,w@a")[0]).unwrap().password, Some(Password::new("p,w")));
        assert_eq!(split(" , "), Vec::<&str>::new());
    }

    #[test]
    fn it_reads_back_as_given_but_for_the_password() {
        for (given, shown) in [
            ("amqp://us%40er:p%40ss@[::1]:5673/%2F?heartbeat=5", "amqp://us%40er:***@[::1]:5673/%2F?heartbeat=5"),
            ("AMQPS://rabbit/orders", "amqps://rabbit:5671/orders"),
            ("amqp://:secret@127.0.0.1", "amqp://:***@127.0.0.1:5672"),
            ("amqp://app@h:1", "amqp://app@h:1"),
        ] {
            assert_eq!(parse(given).unwrap().to_string(), shown, "{given}");
        }
    }

    #[test]
    fn what_cannot_be_dialled_as_written_is_refused() {
        let problem = |url: &str| parse(url).unwrap_err().problem;
        assert_eq!(problem("amqp://[fe80::1%25eth0]:5672"), Problem::Zone("eth0".into()));
        assert_eq!(problem("amqp://[fe80::1%eth0]"), Problem::Zone("eth0".into()));
        assert_eq!(problem("amqp://127.1"), Problem::NotDottedQuad("127.1".into()));
        assert_eq!(problem("amqp://0x7f.0.0.1"), Problem::NotDottedQuad("0x7f.0.0.1".into()));
        assert_eq!(problem("amqp://a.b.1"), Problem::NotDottedQuad("a.b.1".into()));
        assert_eq!(problem("amqp://:5672"), Problem::NoHost);
        assert_eq!(problem("amqp://h:"), Problem::NoPort);
        assert_eq!(problem("amqp://h:0"), Problem::Port);
        assert_eq!(problem("amqp://h?cacertfile=x"), Problem::UnknownQuery("cacertfile".into()));
        assert_eq!(problem("amqp://u:p%4@h"), Problem::Percent(Part::UserInformation));
        assert_eq!(problem("amqp://u:p\t@h"), Problem::Space);
        assert_eq!(problem("http://h"), Problem::Scheme("http".into(), Kind::Amqp));
        let management = |url: &str| parse_management(url).map(|(url, host)| (url, host.is_loopback()));
        assert_eq!(management("http://[::1]:15672/api/"), Ok(("http://[::1]:15672/api".into(), true)));
        assert_eq!(management("https://LOCALHOST/api"), Ok(("https://LOCALHOST/api".into(), true)));
        assert_eq!(management("http://127.1/api").unwrap_err().problem, Problem::NotDottedQuad("127.1".into()));
        // The API answers a bad escape in its path itself.
        assert!(management("http://localhost:15672/api%").is_ok());
    }

    #[test]
    fn a_password_is_hidden_wherever_it_may_end() {
        for (given, shown) in [
            ("amqp://app:s3cret@rabbit:5672/%2f", "amqp://app:***@rabbit:5672/%2f"),
            ("amqp://rabbit:5672", "amqp://rabbit:5672"),
            ("app:s3cret@rabbit:15672/api", "app:***@rabbit:15672/api"),
            ("app:s3:c@r@et@rabbit:15672/api", "app:***@rabbit:15672/api"),
            ("amqp//guest:s3cret@h", "amqp//guest:***@h"),
            ("amqp://guest:s3/cr?et@h", "amqp://guest:***@h"),
            ("guest:s3cret@amqp://h", "guest:***@amqp://h"),
            ("amqp://a,amqp://u:p,w@b", "amqp://a,amqp://u:***@b"),
        ] {
            assert_eq!(redact(given), shown, "{given}");
        }
    }
}
