//! Endpoints are used exactly as given: an AMQP URL's host (IPv4, bracketed IPv6, a name) is the
//! host dialled, or the URL is refused with the reason; the vhost in a URL's path is used, or
//! refused when something else names another one. Only loopback addresses are ever dialled
//! (127.0.0.0/8 and [::1]); no broker here listens on [::1], so a proxy of the test's own stands
//! there in front of one.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use crate::support::{self, Broker, Vhost, hopper_env, on_every_broker, text, urlencode};

/// A TCP proxy listening on one loopback address, in front of a broker's AMQP port, that counts
/// the connections made to it: where hopper connects is seen, not inferred.
struct Proxy {
    address: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl Proxy {
    fn start(listen: &str, broker: Broker) -> Proxy {
        let listener = TcpListener::bind(listen).unwrap();
        let address = listener.local_addr().unwrap();
        let target = broker.amqp().rsplit('@').next().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                counter.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(&target) else { continue };
                let (mut client_in, mut server_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut server_in, mut client_out) = (server, client);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut client_in, &mut server_out);
                    let _ = server_out.shutdown(std::net::Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut server_in, &mut client_out);
                    let _ = client_out.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Proxy { address, accepted }
    }

    /// `amqp://guest:guest@ADDRESS`, the address as a URL writes it (`[::1]:port`).
    fn url(&self) -> String {
        format!("amqp://guest:guest@{}", self.address)
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

fn spec(vhost: &Vhost) -> String {
    vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"1s\"]\n").display().to_string()
}

/// A spec that names no vhost: it goes where the run says.
fn spec_without_vhost(vhost: &Vhost) -> String {
    let path = vhost.dir.join("no-vhost.toml");
    std::fs::write(&path, "[topology.orders]\ndelays = [\"1s\"]\n").unwrap();
    path.display().to_string()
}

fn show(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Value, String) {
    let mut all = vec!["--format", "json", "config", "show"];
    all.extend_from_slice(args);
    let out = hopper_env(&all, env);
    (out.status.code(), serde_json::from_slice(&out.stdout).unwrap_or(Value::Null), text(&out.stderr))
}

/// `[::1]` is the IPv6 loopback, not `localhost`: with no broker listening there, apply is
/// refused as a connection refused at `[::1]`, and nothing is written (it used to reach the
/// broker on 127.0.0.1 and apply). `config show` and the run agree on the host.
#[tokio::test]
async fn an_ipv6_host_is_dialled_as_given() {
    let broker = Broker::RabbitMq3_10;
    let vhost = Vhost::new(broker, "endpoint-ipv6-refused").await;
    let spec = spec(&vhost);
    let env = [("HOPPER_MANAGEMENT_URL", broker.management())];
    let out = hopper_env(&["apply", "--amqp-url", "amqp://guest:guest@[::1]:5672", &spec], &env);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot reach RabbitMQ over AMQP (amqp://[::1]:5672: connection refused"), "{stderr}");
    assert_eq!(support::count(&vhost.connect().await, "orders.dlq").await, None, "nothing was created");

    let (code, shown, stderr) = show(&["--amqp-url", "amqp://app:s3cret@[::1]:5673/%2F"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(shown["settings"]["amqp_url"]["value"], "amqp://app:***@[::1]:5673/%2F", "{shown:#}");
    assert_eq!(shown["settings"]["management_url"]["value"], "http://[::1]:15672/api", "{shown:#}");
}

/// Through a proxy on [::1], and one on 127.0.0.2 (another loopback address than the broker's):
/// apply connects to exactly the address given, and applies. On every broker.
async fn each_loopback_host_is_reached(broker: Broker) {
    for listen in ["[::1]:0", "127.0.0.2:0"] {
        let vhost = Vhost::new(broker, "endpoint-loopback").await;
        let spec = spec(&vhost);
        let proxy = Proxy::start(listen, broker);
        let url = proxy.url();
        let env = [("HOPPER_AMQP_URL", url.as_str()), ("HOPPER_MANAGEMENT_URL", broker.management())];
        let out = hopper_env(&["-v", "apply", &spec], &env);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let address = url.rsplit('@').next().unwrap();
        assert!(stderr.contains(&format!("AMQP amqp://{address}")), "{listen}: {stderr}");
        // The greeting, then the session's greeting of its node and the session itself.
        assert_eq!(proxy.accepted(), 3, "{listen}: every AMQP connection went to the address given");
        assert_eq!(support::count(&vhost.connect().await, "orders.dlq").await, Some(0), "{listen}: applied");
    }
}

/// A zone in an IPv6 address is refused with the reason, before anything is dialled; so are
/// hosts that are not what they look like, and a URL with no host at all.
#[test]
fn hosts_hopper_cannot_dial_as_written_are_refused_with_the_reason() {
    // A spec that loads, so that the refusal diff prints is the URL's, not the spec's.
    let dir = std::env::temp_dir().join(format!("hopper-test-endpoint-hosts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("orders.toml");
    std::fs::write(&spec, "[topology.orders]\ndelays = [\"1s\"]\n").unwrap();
    for (url, reason) in [
        ("amqp://[::1%25lo]:5672", "names an IPv6 address with a zone (%25lo)"),
        ("amqp://[fe80::1%25eth0]:5672", "names an IPv6 address with a zone (%25eth0)"),
        ("amqp://127.1:5672", "names the host `127.1`, which is not an IPv4 address written in full"),
        ("amqp://010.0.0.1:5672", "names the host `010.0.0.1`, which is not an IPv4 address written in full"),
        ("amqp://guest:guest@:5672", "names no host"),
        ("amqp://localhost:", "has a `:` and no port after it"),
        ("amqp://rabbit-1,rabbit-2", "names the host `rabbit-1,rabbit-2`, which is not a host name"),
    ] {
        let (code, _, stderr) = show(&["--amqp-url", url], &[]);
        assert_eq!(code, Some(2), "{url}: {stderr}");
        assert!(stderr.contains(reason), "{url}: {stderr}");
        let out = hopper_env(&["diff", "--amqp-url", url, spec.to_str().unwrap()], &[]);
        assert_eq!(out.status.code(), Some(2), "{url}");
        assert!(text(&out.stderr).contains(reason), "{url}: {}", text(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The vhost in the URL's path is the run's vhost when nothing else names one: a spec without
/// `vhost` is planned and applied there. A spec, `--vhost` or a context naming another vhost is
/// refused, naming both, before anything is read or written. On every broker.
async fn the_urls_vhost_is_used_or_refused(broker: Broker) {
    let vhost = Vhost::new(broker, "endpoint-url-vhost").await;
    let other = Vhost::new(broker, "endpoint-url-vhost-other").await;
    let url = vhost.amqp_url();
    let env = [("HOPPER_AMQP_URL", url.as_str()), ("HOPPER_MANAGEMENT_URL", broker.management())];
    let bare = spec_without_vhost(&vhost);

    // Planned against the URL's vhost, then applied there (and nowhere else).
    let out = hopper_env(&["--format", "json", "apply", "--dry-run", &bare], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["vhosts"][0]["vhost"], vhost.name.as_str(), "{report:#}");
    let out = hopper_env(&["apply", &bare], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(support::count(&vhost.connect().await, "orders.dlq").await, Some(0), "applied in the URL's vhost");

    // Another vhost named anywhere else: refused, naming both; nothing changes in either.
    let named_other = spec(&other);
    let out = hopper_env(&["apply", &named_other], &env);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "topology `orders` is in vhost `{}`, but the AMQP URL names vhost `{}`",
            other.name, vhost.name
        )),
        "{stderr}"
    );
    for args in [&["apply", "--vhost", &other.name, &bare][..], &["diff", "--vhost", &other.name, &bare]] {
        let out = hopper_env(args, &env);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "--vhost `{}` and the vhost of the AMQP URL, `{}`, disagree",
                other.name, vhost.name
            )),
            "{stderr}"
        );
    }
    assert_eq!(support::count(&other.connect().await, "orders.dlq").await, None, "nothing was created");
    let config = vhost.dir.join("config.toml");
    std::fs::write(&config, format!("[context.c]\nvhost = \"{}\"\n", other.name)).unwrap();
    let config = config.display().to_string();
    let with_context = [env[0], env[1], ("HOPPER_CONFIG", config.as_str()), ("HOPPER_CONTEXT", "c")];
    let out = hopper_env(&["inspect"], &with_context);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("the vhost of the AMQP URL, `{}`,", vhost.name)), "{stderr}");

    // The same vhost named twice is no disagreement; and `inspect` reads the URL's vhost.
    let out = hopper_env(&["diff", "--vhost", &vhost.name, &bare], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = hopper_env(&["--format", "json", "inspect"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["vhosts"][0]["vhost"], vhost.name.as_str(), "{report:#}");

    // `amqp://host` and `amqp://host/` name no vhost: the spec's (here `/`) is used.
    let (code, shown, stderr) = show(&[], &env);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(shown["settings"]["vhost"]["value"], vhost.name.as_str(), "{shown:#}");
    assert_eq!(shown["settings"]["vhost"]["from"], "url", "{shown:#}");
    let root = format!("{}/", broker.amqp());
    let (code, shown, _) = show(&["--amqp-url", &root], &[]);
    assert_eq!((code, &shown["settings"]["vhost"]["value"]), (Some(0), &Value::from("/")), "{shown:#}");
    let slash = format!("{}/{}", broker.amqp(), urlencode("/"));
    let (code, shown, _) = show(&["--amqp-url", &slash], &[]);
    assert_eq!((code, &shown["settings"]["vhost"]["from"]), (Some(0), &Value::from("url")), "{shown:#}");
}

on_every_broker!(each_loopback_host_is_reached, the_urls_vhost_is_used_or_refused);
