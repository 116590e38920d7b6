//! Connection failures named by their real cause, each against the real 3.10 broker (a wrong
//! password, a user without the management tag, a URL that is not the API's, an HTTP 400, a
//! closed port) or a socket that never answers (the timeout); apply never falls back to AMQP
//! unless asked; a password never appears in anything hopper prints; and a run with nothing to
//! write opens no AMQP session.

use std::net::TcpListener;
use std::process::Output;

use crate::spawned;
use crate::support::{self, Broker, Vhost, hopper_env, text};

const BROKER: Broker = Broker::RabbitMq3_10;

/// A password no output may ever contain.
const SECRET: &str = "Hopper-Secret-7f3c9e1d";

fn spec(vhost: &Vhost) -> String {
    vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"1s\"]\n").display().to_string()
}

/// Exit 2 and stderr exactly `expected`; nothing was created in the vhost.
#[track_caller]
fn refused(out: &Output, expected: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end(), expected);
}

async fn untouched(vhost: &Vhost) {
    assert_eq!(support::count(&vhost.connect().await, "orders.dlq").await, None, "nothing was created");
}

fn secret_file(vhost: &Vhost, secret: &str) -> String {
    let path = vhost.dir.join("password");
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    path.display().to_string()
}

/// Over AMQP, on every broker, a wrong password and a vhost that does not exist are told apart
/// by the broker's reply code (403, 530).
#[tokio::test]
async fn amqp_refusals_are_named_by_their_reply_code() {
    for broker in [Broker::RabbitMq3_10, Broker::RabbitMq4_0, Broker::RabbitMq4_3] {
        let vhost = Vhost::new(broker, "connect-codes").await;
        let spec = spec(&vhost);
        let file = secret_file(&vhost, SECRET);
        let env = [("HOPPER_AMQP_URL", broker.amqp()), ("HOPPER_MANAGEMENT_URL", broker.management())];
        let out = hopper_env(&["apply", "--amqp-only", "--username", "guest", "--password-file", &file, &spec], &env);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{broker:?}: {stderr}");
        assert!(
            stderr.contains("authentication failed for user `guest`: wrong username or password"),
            "{broker:?}: {stderr}"
        );
        assert!(!stderr.contains(SECRET), "{stderr}");
        let missing = support::unique("hopper-test-no-such-vhost");
        let out = hopper_env(&["apply", "--amqp-only", "--vhost", &missing, &spec], &env);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{broker:?}: {stderr}");
        assert!(
            stderr.contains(&format!("vhost `{missing}` does not exist or user `guest` has no access to it")),
            "{broker:?}: {stderr}"
        );
        untouched(&vhost).await;
    }
}

/// A wrong password is a wrong password on both endpoints, not a missing tag.
#[tokio::test]
async fn a_wrong_password_is_named() {
    let vhost = Vhost::new(BROKER, "connect-password").await;
    let spec = spec(&vhost);
    let file = secret_file(&vhost, SECRET);
    let env = [("HOPPER_AMQP_URL", BROKER.amqp()), ("HOPPER_MANAGEMENT_URL", BROKER.management())];
    let out = hopper_env(&["apply", "--username", "guest", "--password-file", &file, &spec], &env);
    refused(
        &out,
        &format!(
            "error: the management API at {} refused the credentials of user `guest` (401, Login failed): wrong username or password; nothing was changed",
            BROKER.management()
        ),
    );
    let out = hopper_env(&["apply", "--amqp-only", "--username", "guest", "--password-file", &file, &spec], &env);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("authentication failed for user `guest`: wrong username or password"), "{stderr}");
    untouched(&vhost).await;
}

/// A user who signs in but has no management tag is told which tag it needs.
#[tokio::test]
async fn a_user_without_the_management_tag_is_told_the_tag() {
    let vhost = Vhost::new(BROKER, "connect-tag").await;
    let spec = spec(&vhost);
    let user = support::unique("hopper-test-untagged");
    support::create_user(BROKER, &user, SECRET, "").await;
    support::set_permissions(BROKER, &vhost.name, &user, ".*", ".*", ".*").await;
    let env = [
        ("HOPPER_AMQP_URL", BROKER.amqp()),
        ("HOPPER_MANAGEMENT_URL", BROKER.management()),
        ("HOPPER_USERNAME", user.as_str()),
        ("HOPPER_PASSWORD", SECRET),
    ];
    let out = hopper_env(&["apply", &spec], &env);
    support::delete_user(BROKER, &user).await;
    refused(
        &out,
        &format!(
            "error: the management API at {} signed user `{user}` in but refused it (Not management user): it needs the `monitoring` or `management` tag (`rabbitmqctl set_user_tags`); nothing was changed",
            BROKER.management()
        ),
    );
    untouched(&vhost).await;
}

/// A management URL without `/api` reaches the web UI, which is not the API.
#[tokio::test]
async fn a_url_that_is_not_the_api_is_named() {
    let vhost = Vhost::new(BROKER, "connect-not-api").await;
    let spec = spec(&vhost);
    let ui = BROKER.management().trim_end_matches("/api").to_string();
    let out = hopper_env(&["apply", "--management-url", &ui, &spec], &[("HOPPER_AMQP_URL", BROKER.amqp())]);
    refused(
        &out,
        &format!(
            "error: the management API is not at {ui}: GET {ui}/overview answered 406 Not Acceptable; the management API's base URL ends in /api, such as http://localhost:15672/api; nothing was changed. hopper apply reads the broker through the management API; to read over AMQP alone (no left-over queues, bindings declared again), pass --amqp-only"
        ),
    );
    untouched(&vhost).await;
}

/// The broker answers 400 to a malformed path: that is what it said, not "unreachable".
#[tokio::test]
async fn an_http_400_is_what_the_broker_answered() {
    let vhost = Vhost::new(BROKER, "connect-400").await;
    let spec = spec(&vhost);
    let bad = format!("{}%", BROKER.management());
    let out = hopper_env(&["apply", "--management-url", &bad, &spec], &[("HOPPER_AMQP_URL", BROKER.amqp())]);
    refused(&out, &format!("error: the management API at {bad} answered HTTP 400; nothing was changed"));
    untouched(&vhost).await;
}

/// Nothing listens at the management URL: apply stops (it used to read over AMQP and exit 0),
/// naming the URL; `--amqp-only` is the way on, and only when asked.
#[tokio::test]
async fn a_closed_management_port_stops_apply() {
    let vhost = Vhost::new(BROKER, "connect-closed").await;
    let spec = spec(&vhost);
    let env = [("HOPPER_AMQP_URL", BROKER.amqp()), ("HOPPER_MANAGEMENT_URL", "http://127.0.0.1:1/api")];
    refused(
        &hopper_env(&["apply", &spec], &env),
        "error: cannot reach the management API at http://127.0.0.1:1/api: connection refused: nothing listens there (is this the API's port, and is the plugin on? `rabbitmq-plugins enable rabbitmq_management`); nothing was changed. hopper apply reads the broker through the management API; to read over AMQP alone (no left-over queues, bindings declared again), pass --amqp-only",
    );
    untouched(&vhost).await;
    let out = hopper_env(&["apply", "--amqp-only", &spec], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(support::count(&vhost.connect().await, "orders.dlq").await, Some(0));
}

/// A closed AMQP port is a refused connection.
#[tokio::test]
async fn a_closed_amqp_port_is_named() {
    let vhost = Vhost::new(BROKER, "connect-closed-amqp").await;
    let spec = spec(&vhost);
    let out = hopper_env(&["apply", "--amqp-url", "amqp://127.0.0.1:1", &spec], &[]);
    refused(
        &out,
        "error: cannot reach RabbitMQ over AMQP (amqp://127.0.0.1:1: connection refused: nothing listens there)",
    );
}

/// A server that accepts and never answers: `--timeout` bounds the wait, for the AMQP greeting
/// and for an HTTP request alike.
#[tokio::test]
async fn timeout_bounds_a_silent_server() {
    let vhost = Vhost::new(BROKER, "connect-timeout").await;
    let spec = spec(&vhost);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts and holds every connection, saying nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    let silent = format!("amqp://127.0.0.1:{port}");
    let out = hopper_env(&["apply", "--timeout", "1s", "--amqp-url", &silent, &spec], &[]);
    refused(
        &out,
        &format!("error: cannot reach RabbitMQ over AMQP (amqp://127.0.0.1:{port}: no answer within 1s (--timeout))"),
    );
    let api = format!("http://127.0.0.1:{port}/api");
    let env = [("HOPPER_AMQP_URL", BROKER.amqp()), ("HOPPER_TIMEOUT", "1s")];
    let out = hopper_env(&["diff", "--management-url", &api, &spec], &env);
    refused(
        &out,
        &format!(
            "error: hopper diff reads the broker through the management API and cannot: cannot reach the management API at {api}: no answer within the timeout (--timeout)"
        ),
    );
    let out = hopper_env(&["diff", "--timeout", "soon", &spec], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("`soon` is not a duration"), "{}", text(&out.stderr));
}

/// A command line and its environment.
type Run<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>);

/// A distinctive password, given every way hopper takes one, through failures and successes:
/// no byte of stdout or stderr ever holds it.
#[tokio::test]
async fn a_password_is_never_printed() {
    let vhost = Vhost::new(BROKER, "connect-secret").await;
    let spec = spec(&vhost);
    let file = secret_file(&vhost, SECRET);
    let amqp_with_secret = format!("amqp://guest:{SECRET}@127.0.0.1:5672");
    let mgmt = BROKER.management();
    let runs: Vec<Run> = vec![
        (vec!["apply", &spec], vec![("HOPPER_PASSWORD", SECRET), ("HOPPER_MANAGEMENT_URL", mgmt)]),
        (vec!["--format", "json", "apply", &spec], vec![("HOPPER_PASSWORD_FILE", &file)]),
        (vec!["apply", "--amqp-only", "--password-file", &file, &spec], vec![]),
        (vec!["diff", "--amqp-url", &amqp_with_secret, &spec], vec![]),
        (vec!["inspect", "--vhost", &vhost.name, "--amqp-url", &amqp_with_secret], vec![]),
        (vec!["apply", "--amqp-url", &amqp_with_secret, "--management-url", "127.0.0.1:15672/api", &spec], vec![]),
        (vec!["apply", "--management-url", "guest:Hopper-Secret-7f3c9e1d@127.0.0.1:15672/api", &spec], vec![]),
        (vec!["apply", "--management-url", "http://guest:Hopper-Secret-7f3c9e1d@127.0.0.1:15672/api", &spec], vec![]),
        (vec!["apply", "--amqp-url", "amqp://guest:Hopper-Secret-7f3c9e1d@127.0.0.1:1", &spec], vec![]),
        (vec!["apply", "--amqp-url", "amqps://guest:Hopper-Secret-7f3c9e1d@localhost:5671", &spec], vec![]),
        (vec!["config", "show", "--amqp-url", &amqp_with_secret], vec![("HOPPER_PASSWORD", SECRET)]),
        (vec!["--format", "json", "config", "show", "--password-file", &file], vec![]),
        (vec!["config", "show"], vec![("HOPPER_PASSWORD", SECRET), ("HOPPER_PASSWORD_FILE", &file)]),
        // The right password, every way: the runs succeed, and print it nowhere either.
        (vec!["--format", "json", "apply", "--dry-run", &spec], vec![("HOPPER_PASSWORD", "guest")]),
    ];
    let mut codes = Vec::new();
    for (args, env) in &runs {
        let out = hopper_env(args, env);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!all.contains(SECRET), "hopper {} printed the password:\n{all}", args.join(" "));
        codes.push(out.status.code());
    }
    // The failures above failed, the rest succeeded: the password went where it was meant to.
    assert_eq!(
        codes,
        [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 2, 0].map(Some),
        "exit codes of {:?}",
        runs.iter().map(|(a, _)| a.join(" ")).collect::<Vec<_>>()
    );
}

/// Malformed URLs of every shape, each with `password` where a password goes: (whether it is a
/// management URL, the URL).
fn malformed(password: &str) -> Vec<(bool, String)> {
    let p = password;
    let amqp = [
        format!("guest:{p}@127.0.0.1:5672"),
        format!("amqp//guest:{p}@127.0.0.1:5672"),
        format!("amqp:/guest:{p}@127.0.0.1:5672"),
        format!("http://guest:{p}@127.0.0.1:5672"),
        format!("amqp://guest:{p}@127.0.0.1:99999"),
        format!("amqp://guest:{p}%zz@127.0.0.1:5672"),
        format!("amqp://guest:{p} x@127.0.0.1:5672"),
        format!("amqp://guest:{p}@more@127.0.0.1:5672"),
        format!("amqp://guest:{p}/x@127.0.0.1:5672"),
        format!("amqp://guest:{p}@[::1%25lo]:5672"),
        format!("amqp://guest:{p}@127.0.0.1:5672/a/b"),
        format!("amqp://127.0.0.1:5673,amqp//guest:{p}@127.0.0.1:5672"),
    ];
    let management = [
        format!("guest:{p}@127.0.0.1:15672/api"),
        format!("http//guest:{p}@127.0.0.1:15672/api"),
        format!("http://guest:{p}@127.0.0.1:15672/api"),
        format!("http://guest:{p}@127.0.0.1:99999/api"),
    ];
    amqp.into_iter().map(|u| (false, u)).chain(management.into_iter().map(|u| (true, u))).collect()
}

/// Runs `config show` and `diff` with `url` given by flag, by variable and by a context: each
/// refuses (exit 2), and no byte of their output holds `password`.
fn refused_without_the_password(dir: &std::path::Path, spec: &str, management: bool, url: &str, password: &str) {
    let (flag, variable, key) = match management {
        false => ("--amqp-url", "HOPPER_AMQP_URL", "amqp_url"),
        true => ("--management-url", "HOPPER_MANAGEMENT_URL", "management_url"),
    };
    let config = dir.join("config.toml");
    std::fs::write(&config, format!("[context.c]\n{key} = {}\n", toml::Value::String(url.to_string()))).unwrap();
    let config = config.display().to_string();
    let context = [("HOPPER_CONFIG", config.as_str()), ("HOPPER_CONTEXT", "c")];
    for command in [&["config", "show"][..], &["diff", spec]] {
        for (args, env) in [
            ([command, &[flag, url]].concat(), vec![]),
            (command.to_vec(), vec![(variable, url)]),
            (command.to_vec(), context.to_vec()),
        ] {
            let out = hopper_env(&args, &env);
            let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert!(!all.contains(password), "hopper {} ({env:?}) printed the password:\n{all}", args.join(" "));
            assert_eq!(out.status.code(), Some(2), "hopper {} ({env:?}) took {url}:\n{all}", args.join(" "));
        }
    }
}

/// URLs malformed every way, given every way, to `config show` and `diff`: refused, and the
/// password in them is printed nowhere.
#[test]
fn a_malformed_urls_password_is_never_printed() {
    let dir = std::env::temp_dir().join(support::unique("hopper-test-malformed"));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("orders.toml");
    std::fs::write(&spec, "[topology.orders]\ndelays = [\"1s\"]\n").unwrap();
    let spec = spec.display().to_string();
    for (management, url) in malformed(SECRET) {
        refused_without_the_password(&dir, &spec, management, &url, SECRET);
    }
    // A config file whose mistake is on a URL's line: the diagnostic quotes the line.
    let config = dir.join("broken.toml");
    let env = [("HOPPER_CONFIG", config.to_str().unwrap()), ("HOPPER_CONTEXT", "c")];
    for file in [
        format!("[context.c]\namqp_url = [\"amqp://guest:{SECRET}@127.0.0.1:5672\", 5]\n"),
        format!("[context.c]\namqp_url = \"amqp://guest:{SECRET}@127.0.0.1:5672\n"),
        format!("[context.c]\nmanagement_url = [\"http//guest:{SECRET}@127.0.0.1:15672/api\", 5]\n"),
    ] {
        std::fs::write(&config, file).unwrap();
        for args in [&["config", "show"][..], &["diff", &spec]] {
            let out = hopper_env(args, &env);
            let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert!(!all.contains(SECRET), "hopper {} printed the password:\n{all}", args.join(" "));
            assert_eq!(out.status.code(), Some(2), "{all}");
        }
    }
    // Generated passwords, holding what breaks a URL, in a shape drawn for each.
    use proptest::prelude::*;
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 12,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    });
    let password = proptest::collection::vec(
        proptest::sample::select(vec![
            'a', 'z', '0', '9', '@', '/', ':', ',', '%', '#', '?', ' ', '[', ']', '!', '&', '=', 'é',
        ]),
        0..10,
    )
    .prop_map(|t| format!("Pw7{}", t.into_iter().collect::<String>()))
    .prop_filter("a password holding `://` starts a URL of its own", |p| !p.contains("://"));
    runner
        .run(&(password, 0..16usize), |(password, shape)| {
            let (management, url) = malformed(&password).swap_remove(shape);
            refused_without_the_password(&dir, &spec, management, &url, &password);
            Ok(())
        })
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TCP proxy in front of a broker's AMQP port that counts the connections made through it.
struct CountingProxy {
    url: String,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl CountingProxy {
    fn start(broker: Broker) -> CountingProxy {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = broker.amqp().rsplit('@').next().unwrap().to_string();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                counter.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = std::net::TcpStream::connect(&target) else { continue };
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
        CountingProxy { url: format!("amqp://guest:guest@127.0.0.1:{port}"), accepted }
    }

    /// The connections since the last call.
    fn take(&self) -> usize {
        self.accepted.swap(0, std::sync::atomic::Ordering::SeqCst)
    }
}

/// A run with nothing to write and nothing to count makes one AMQP connection, the greeting that
/// says which cluster answers (no credentials are sent on it); the session is opened only to
/// write. On every broker.
#[tokio::test]
async fn a_no_op_apply_and_diff_open_no_amqp_session() {
    for broker in [Broker::RabbitMq3_10, Broker::RabbitMq4_0, Broker::RabbitMq4_3] {
        let vhost = Vhost::new(broker, "connect-no-session").await;
        let spec = spec(&vhost);
        let proxy = CountingProxy::start(broker);
        let env = [("HOPPER_AMQP_URL", proxy.url.as_str()), ("HOPPER_MANAGEMENT_URL", broker.management())];
        let out = hopper_env(&["apply", &spec], &env);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        // The greeting, then the session's own greeting of its node and the session.
        assert_eq!(proxy.take(), 3, "{broker:?}: a run that writes opens a session");
        let v = vhost.name.as_str();
        // With --vhost the reading starts before the spec is loaded: its greeting is the run's
        // one connection, never made twice.
        for args in [
            &["apply", &spec][..],
            &["apply", "--dry-run", &spec],
            &["diff", &spec],
            &["apply", "--vhost", v, &spec],
            &["apply", "--dry-run", "--vhost", v, &spec],
            &["diff", "--vhost", v, &spec],
        ] {
            let out = hopper_env(args, &env);
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            assert_eq!(proxy.take(), 1, "{broker:?}: `hopper {}` in sync: the greeting alone", args.join(" "));
        }
        assert_eq!(support::count(&vhost.connect().await, "orders.dlq").await, Some(0), "it was applied");
    }
}

/// With --vhost the broker is read while the spec loads; a spec that does not load is still the
/// error reported, with its exit code, whether the broker answers or not, and nothing is created.
#[tokio::test]
async fn a_spec_error_comes_first_though_the_broker_is_read_early() {
    for broker in [Broker::RabbitMq3_10, Broker::RabbitMq4_0, Broker::RabbitMq4_3] {
        let vhost = Vhost::new(broker, "connect-early-spec-error").await;
        let bad = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"soon\"]\n").display().to_string();
        let here = [("HOPPER_AMQP_URL", broker.amqp()), ("HOPPER_MANAGEMENT_URL", broker.management())];
        let nowhere = [
            ("HOPPER_AMQP_URL", "amqp://guest:guest@127.0.0.1:1"),
            ("HOPPER_MANAGEMENT_URL", "http://127.0.0.1:1/api"),
        ];
        for env in [&here, &nowhere] {
            for command in [&["apply"][..], &["apply", "--dry-run"], &["diff"]] {
                let args: Vec<&str> = command.iter().copied().chain(["--vhost", &vhost.name, &bad]).collect();
                let out = hopper_env(&args, env);
                let stderr = text(&out.stderr);
                assert_eq!(out.status.code(), Some(2), "{broker:?} {args:?}: {stderr}");
                assert!(
                    stderr.contains("orders.toml:") && stderr.contains("invalid delay"),
                    "{broker:?} {args:?}: the spec's error, at its line: {stderr}"
                );
                assert!(!stderr.contains("127.0.0.1"), "{broker:?} {args:?}: no word of the broker: {stderr}");
            }
        }
        untouched(&vhost).await;
    }
}

/// The spec loads before the broker is read: a broker that accepts and never answers is not
/// waited for (its timeout is an hour here), and the spec's error comes, with its exit code.
#[test]
fn a_spec_error_is_not_held_back_by_a_silent_broker() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    let dir = std::env::temp_dir().join(support::unique("connect-silent"));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("orders.toml");
    std::fs::write(&bad, "[topology.orders]\ndelays = [\"soon\"]\n").unwrap();
    let (amqp, api) = (format!("amqp://127.0.0.1:{port}"), format!("http://127.0.0.1:{port}/api"));
    for command in [&["apply"][..], &["apply", "--dry-run"], &["diff"]] {
        let args: Vec<&str> = command.iter().copied().chain(["--vhost", "silent", bad.to_str().unwrap()]).collect();
        let child = spawned::hopper(
            &args,
            &[("HOPPER_AMQP_URL", &amqp), ("HOPPER_MANAGEMENT_URL", &api), ("HOPPER_TIMEOUT", "1h")],
        );
        // A deadline for a hang, not a measurement: a minute, against a wait of a second.
        let spawned::End::Exited(out) = spawned::within(child, std::time::Duration::from_secs(60)) else {
            panic!("hopper {args:?} waited for a broker that never answers instead of reporting the spec's error");
        };
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("orders.toml:") && stderr.contains("invalid delay"), "{args:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A password of 20 KB (a token stands in for one) is sent: the broker's answer is what is
/// reported, not a client that could not write its own request.
#[tokio::test]
async fn a_long_password_gets_the_brokers_answer() {
    let vhost = Vhost::new(BROKER, "connect-long-password").await;
    let spec = spec(&vhost);
    let file = secret_file(&vhost, &"t".repeat(20_000));
    let env = [("HOPPER_AMQP_URL", BROKER.amqp()), ("HOPPER_MANAGEMENT_URL", BROKER.management())];
    let out = hopper_env(&["diff", "--password-file", &file, &spec], &env);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    // RabbitMQ's web server refuses a header that long (HTTP 431), and the message says whose
    // header and its length (`Basic ` and the base64 of `guest:PASSWORD`); a broker that allowed
    // it would refuse the password (401).
    let length = "Basic ".len() + ("guest:".len() + 20_000).div_ceil(3) * 4;
    assert!(
        stderr.contains(&format!(
            "the management API at {} answered HTTP 431 (request header fields too large): its web server refuses headers this long, and hopper's credentials header is {length} bytes",
            BROKER.management()
        )) || stderr.contains("refused the credentials"),
        "{stderr}"
    );
    assert!(!stderr.contains("tttt"), "no part of the password is printed: {stderr}");
    untouched(&vhost).await;
}

/// A front to the management API that adds `bytes` of header to the first response of each
/// connection, as a proxy with large cookies may: its URL.
fn padded_front(broker: Broker, bytes: usize) -> String {
    use std::io::{BufRead, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let api = broker.management();
    let target = api.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let path = api.trim_start_matches("http://").trim_start_matches(target.as_str()).to_string();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = std::net::TcpStream::connect(&target) else { continue };
            let (mut client_in, mut server_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (server_in, mut client_out) = (server, client);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut client_in, &mut server_out);
                let _ = server_out.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let mut server_in = std::io::BufReader::new(server_in);
                let mut status = Vec::new();
                if server_in.read_until(b'\n', &mut status).is_ok() {
                    let padding = format!("x-padding: {}\r\n", "p".repeat(bytes));
                    let _ = client_out.write_all(&status).and_then(|()| client_out.write_all(padding.as_bytes()));
                    let _ = std::io::copy(&mut server_in, &mut client_out);
                }
                let _ = client_out.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    format!("http://127.0.0.1:{port}{path}")
}

/// A response head of 40 KB is read whole: ureq accepts heads up to 64 KB, and hopper's
/// response buffer holds one that size.
#[tokio::test]
async fn a_large_response_head_is_read() {
    let vhost = Vhost::new(BROKER, "connect-large-head").await;
    let spec = spec(&vhost);
    let out = vhost.hopper(&["apply", &spec]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let front = padded_front(BROKER, 40_000);
    let env = [("HOPPER_AMQP_URL", BROKER.amqp()), ("HOPPER_MANAGEMENT_URL", front.as_str())];
    for args in [&["diff", &spec][..], &["inspect", "--vhost", &vhost.name]] {
        let out = hopper_env(args, &env);
        assert_eq!(out.status.code(), Some(0), "hopper {args:?}: {}", text(&out.stderr));
    }
}
