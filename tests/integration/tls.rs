//! TLS against real RabbitMQ TLS listeners (`.ci/brokers.sh` starts them from the 4.0 tree with
//! a test CA it makes): AMQPS and HTTPS management on each node. `tls` asks for a client
//! certificate without requiring one, `mtls` requires one (`fail_if_no_peer_cert`), `expired`
//! serves a certificate that expired in 2020. The server certificate names `localhost` only, so
//! `127.0.0.1` is a host name mismatch. Every failure must say what failed and where.

use std::path::{Path, PathBuf};
use std::process::Output;

use hopper::broker::tls::Tls;
use hopper::broker::{Endpoint, Settings, http};
use serde_json::Value;

use crate::support::{self, hopper_env, text};

/// (AMQPS port, HTTPS port) of each node.
const TLS: (u16, u16) = (5671, 15671);
const MTLS: (u16, u16) = (5675, 15675);
const EXPIRED: (u16, u16) = (5676, 15676);

/// Where brokers.sh keeps the test CA and certificates.
fn dir() -> PathBuf {
    std::env::var_os("HOPPER_TEST_TLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/hopper-ci/trixie/etc/rabbitmq/hopper-tls"))
}

fn file(name: &str) -> String {
    dir().join(name).display().to_string()
}

fn amqps(host: &str, (port, _): (u16, u16)) -> String {
    format!("amqps://{host}:{port}")
}

fn https(host: &str, (_, port): (u16, u16)) -> String {
    format!("https://{host}:{port}/api")
}

/// The broker flags for a node at `host`, with the test CA, and the client certificate when asked.
fn flags(host: &str, node: (u16, u16), client_certificate: bool) -> Vec<String> {
    let mut f = vec![
        "--amqp-url".to_string(),
        amqps(host, node),
        "--management-url".to_string(),
        https(host, node),
        "--tls-ca-cert-file".to_string(),
        file("ca.pem"),
    ];
    if client_certificate {
        f.extend(["--tls-cert-file".to_string(), file("client.pem"), "--tls-key-file".to_string(), file("client.key")]);
    }
    f
}

/// A vhost of its own on a TLS node, created over HTTPS with the client certificate; removed
/// on drop.
struct TlsVhost {
    endpoint: Endpoint,
    name: String,
    dir: PathBuf,
}

impl TlsVhost {
    async fn new(node: (u16, u16), test: &str) -> TlsVhost {
        let tls = Tls::load(
            Some(Path::new(&file("ca.pem"))),
            Some(Path::new(&file("client.pem"))),
            Some(Path::new(&file("client.key"))),
        )
        .expect("the test CA and client certificate (run .ci/brokers.sh)");
        let settings = Settings {
            amqp_urls: amqps("localhost", node),
            management_url: Some(https("localhost", node)),
            tls,
            ..Settings::default()
        };
        let endpoint = Endpoint::from_settings(settings).unwrap();
        let name = support::unique(&format!("hopper-test-{test}"));
        http::create_vhost(&endpoint, &name).await.expect("create the test vhost over HTTPS");
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        TlsVhost { endpoint, name, dir }
    }

    fn spec(&self) -> String {
        let path = self.dir.join("orders.toml");
        std::fs::write(&path, format!("vhost = \"{}\"\n[topology.orders]\ndelays = [\"1s\"]\n", self.name)).unwrap();
        path.display().to_string()
    }
}

impl Drop for TlsVhost {
    fn drop(&mut self) {
        let (endpoint, name) = (self.endpoint.clone(), self.name.clone());
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(http::delete_vhost(&endpoint, &name))
        })
        .join();
    }
}

fn run(args: &[String]) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    hopper_env(&args, &[])
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", text(&out.stdout), text(&out.stderr)))
}

/// `hopper ARGS... SPEC` exits 2 and says exactly `expected` (one line, on stderr).
#[track_caller]
fn refused(out: &Output, expected: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end(), expected);
}

/// apply, then diff (in sync), over AMQPS and HTTPS; the files once as flags, once from the
/// environment.
#[tokio::test]
async fn apply_and_diff_over_amqps_and_https() {
    let vhost = TlsVhost::new(TLS, "tls-apply").await;
    let spec = vhost.spec();
    let mut args = vec!["--format".to_string(), "json".to_string(), "apply".to_string()];
    args.extend(flags("localhost", TLS, false));
    args.push(spec.clone());
    let out = run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = json(&out);
    assert_eq!(report["applied"], true);
    assert_eq!(report["vhosts"][0]["read_from"], "management_api");

    let ca = file("ca.pem");
    let env = [("HOPPER_AMQP_URL", "amqps://localhost:5671"), ("HOPPER_TLS_CA_CERT_FILE", ca.as_str())];
    // The management URL follows the AMQP URL: https, port 15671.
    let out = hopper_env(&["--format", "json", "diff", &spec], &env);
    assert_eq!(out.status.code(), Some(0), "in sync: {}", text(&out.stderr));
    assert_eq!(json(&out)["in_sync"], true);
}

/// No CA given: the system's roots do not know the test CA. Nor does a CA made here, now.
#[tokio::test]
async fn an_unknown_issuer_is_named() {
    let spec = TlsVhost::new(TLS, "tls-unknown-ca").await;
    let spec_file = spec.spec();
    let out = hopper_env(&["diff", "--amqp-url", "amqps://localhost:5671", &spec_file], &[]);
    refused(
        &out,
        "error: hopper diff reads the broker through the management API and cannot: the management API at https://localhost:15671/api: TLS: the server's certificate is signed by an unknown issuer (no trusted CA); pass the CA that signed it with --tls-ca-cert-file (HOPPER_TLS_CA_CERT_FILE)",
    );
    let other_ca = spec.dir.join("other-ca.pem");
    let key = spec.dir.join("other-ca.key");
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=another CA"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&other_ca)
        .output()
        .expect("openssl");
    assert!(made.status.success(), "{}", text(&made.stderr));
    let out = hopper_env(
        &[
            "apply",
            "--amqp-only",
            "--amqp-url",
            "amqps://localhost:5671",
            "--tls-ca-cert-file",
            other_ca.to_str().unwrap(),
            &spec_file,
        ],
        &[],
    );
    refused(
        &out,
        "error: cannot reach RabbitMQ over AMQP (amqps://localhost:5671: TLS: the server's certificate is signed by an unknown issuer (no trusted CA); pass the CA that signed it with --tls-ca-cert-file (HOPPER_TLS_CA_CERT_FILE))",
    );
}

/// A plain-HTTP management URL reached through an HTTPS proxy (ureq takes `HTTPS_PROXY` from
/// the environment): the proxy's certificate is checked as any other, and a failure names the
/// proxy, never a panic. The TLS node's HTTPS listener stands in for the proxy; its CA is not
/// given.
#[tokio::test]
async fn an_https_proxy_is_verified_too() {
    let dir = std::env::temp_dir().join(support::unique("hopper-test-tls-proxy"));
    std::fs::create_dir_all(&dir).unwrap();
    let spec_file = dir.join("orders.toml");
    std::fs::write(&spec_file, "[topology.orders]\ndelays = [\"1s\"]\n").unwrap();
    let out = hopper_env(
        &[
            "diff",
            "--amqp-url",
            "amqp://guest:guest@127.0.0.1:5672",
            "--management-url",
            "http://127.0.0.1:15672/api",
            spec_file.to_str().unwrap(),
        ],
        &[("HTTPS_PROXY", &https("localhost", TLS)), ("NO_PROXY", ""), ("no_proxy", "")],
    );
    let _ = std::fs::remove_dir_all(&dir);
    refused(
        &out,
        "error: hopper diff reads the broker through the management API and cannot: the management API at http://127.0.0.1:15672/api, through the proxy https://localhost:15671 (from the environment): TLS: the server's certificate is signed by an unknown issuer (no trusted CA); pass the CA that signed it with --tls-ca-cert-file (HOPPER_TLS_CA_CERT_FILE)",
    );
}

/// The certificate names `localhost`; `127.0.0.1` is another name.
#[tokio::test]
async fn a_hostname_mismatch_is_named() {
    let vhost = TlsVhost::new(TLS, "tls-mismatch").await;
    let spec = vhost.spec();
    let mut args = vec!["apply".to_string()];
    args.extend(flags("127.0.0.1", TLS, false));
    args.push(spec.clone());
    refused(
        &run(&args),
        "error: cannot reach RabbitMQ over AMQP (amqps://127.0.0.1:5671: TLS: hostname mismatch: the server's certificate is not valid for `127.0.0.1` (it names localhost); connect with a name the certificate lists)",
    );
    let ca = file("ca.pem");
    let out = hopper_env(
        &[
            "diff",
            "--amqp-url",
            "amqps://localhost:5671",
            "--management-url",
            "https://127.0.0.1:15671/api",
            "--tls-ca-cert-file",
            &ca,
            &spec,
        ],
        &[],
    );
    refused(
        &out,
        "error: hopper diff reads the broker through the management API and cannot: the management API at https://127.0.0.1:15671/api: TLS: hostname mismatch: the server's certificate is not valid for `127.0.0.1` (it names localhost); connect with a name the certificate lists",
    );
}

/// The `expired` node's certificate was valid on 1 January 2020 only.
#[tokio::test]
async fn an_expired_certificate_is_named() {
    let spec = std::env::temp_dir().join(support::unique("hopper-test-tls-expired"));
    std::fs::write(&spec, "[topology.orders]\ndelays = [\"1s\"]\n").unwrap();
    let spec = spec.display().to_string();
    let mut args = vec!["apply".to_string()];
    args.extend(flags("localhost", EXPIRED, false));
    args.push(spec.clone());
    refused(
        &run(&args),
        "error: cannot reach RabbitMQ over AMQP (amqps://localhost:5676: TLS: the server's certificate has expired (valid until 2020-01-02T00:00:00Z))",
    );
    let mut args = vec!["diff".to_string()];
    args.extend(flags("localhost", EXPIRED, false));
    args.push(spec.clone());
    refused(
        &run(&args),
        "error: hopper diff reads the broker through the management API and cannot: the management API at https://localhost:15676/api: TLS: the server's certificate has expired (valid until 2020-01-02T00:00:00Z)",
    );
    let _ = std::fs::remove_file(&spec);
}

/// The `mtls` node requires a client certificate: without one, both endpoints say so; with the
/// test client certificate, apply and diff work.
#[tokio::test]
async fn a_required_client_certificate_is_named_and_works() {
    let vhost = TlsVhost::new(MTLS, "tls-client-cert").await;
    let spec = vhost.spec();
    let mut args = vec!["apply".to_string()];
    args.extend(flags("localhost", MTLS, false));
    args.push(spec.clone());
    refused(
        &run(&args),
        "error: cannot reach RabbitMQ over AMQP (amqps://localhost:5675: TLS: the server requires a client certificate and none was given; pass a client certificate with --tls-cert-file and --tls-key-file)",
    );
    let mut args = vec!["diff".to_string()];
    args.extend(flags("localhost", MTLS, false));
    args.push(spec.clone());
    refused(
        &run(&args),
        "error: hopper diff reads the broker through the management API and cannot: the management API at https://localhost:15675/api: TLS: the server requires a client certificate and none was given; pass a client certificate with --tls-cert-file and --tls-key-file",
    );

    let mut args = vec!["--format".to_string(), "json".to_string(), "apply".to_string()];
    args.extend(flags("localhost", MTLS, true));
    args.push(spec.clone());
    let out = run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(json(&out)["applied"], true);
    args[2] = "diff".to_string();
    let out = run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(json(&out)["in_sync"], true);
}

/// A context holds the TLS files (relative to the config file) like any other setting.
#[tokio::test]
async fn a_context_carries_the_tls_files() {
    let vhost = TlsVhost::new(MTLS, "tls-context").await;
    let spec = vhost.spec();
    let config = vhost.dir.join("config.toml");
    for name in ["ca.pem", "client.pem", "client.key"] {
        std::fs::copy(dir().join(name), vhost.dir.join(name)).unwrap();
    }
    std::fs::write(
        &config,
        "[context.secure]\namqp_url = \"amqps://localhost:5675\"\nmanagement_url = \"https://localhost:15675/api\"\ntls_ca_cert_file = \"ca.pem\"\ntls_cert_file = \"client.pem\"\ntls_key_file = \"client.key\"\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let out = hopper_env(&["--format", "json", "apply", "--context", "secure", &spec], &[("HOPPER_CONFIG", &config)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(json(&out)["applied"], true);
}
