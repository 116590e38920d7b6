//! The benchmark: hopper against the broker's own import and the cheapest complete listing of a
//! vhost, at several sizes, on each broker of the test matrix, side by side in one run; and
//! hopper's movers against the broker's shovel (docs/benchmarks.md). `scripts/bench` builds and
//! runs it (`--help`); `page` writes the benchmarks page from what it measured.
//!
//! For each broker and size, on vhosts of its own (deleted at the end, also on failure):
//!
//! - `hopper apply` into an empty vhost, against `rabbitmqctl import_definitions` of the same
//!   objects (timed until a listing shows every queue and binding: it calls itself asynchronous)
//!   and the synchronous `POST /api/definitions/{vhost}`, each into a fresh vhost;
//! - a no-op `hopper apply`, `hopper diff`, `hopper apply --dry-run` and `hopper inspect --vhost`
//!   against the cheapest complete listing of the vhost: the three large GETs hopper makes
//!   (queues and exchanges without statistics, all three with only the columns hopper reads) at
//!   once, on new connections as any command opens, timed until the bodies are in whole, not
//!   parsed; and, shown beside it, the same on connections kept alive from the round before;
//! - `hopper export` and `hopper lint` of the same specs (offline: hopper's CPU cost alone).
//!
//! Each size's reads wait until the machine is quiet (`Quiet`, `--settle`), and each read until
//! it has been quiet for half a second: none pays for the one before. They run in rounds, one
//! of each read a round (`--repeats`, then more while `--read-for` lasts), and each hopper read
//! is judged against the listing of its own round (`Paired`).
//!
//! Every hopper command's wall time and peak memory (the kernel's `ru_maxrss` of that child,
//! from `wait4`); the cheap steps are the median of `--repeats` runs. Nothing here asserts on
//! time: the integration test `bench` runs it with a few topologies so that it cannot rot.
//!
//! `--move N` measures messages moved a second instead, on a vhost of its own: N persistent
//! messages (`--move-bytes`) in a topology's dead-letter queue, moved to its main queue by
//! `hopper redrive` (timed until it exits: every copy confirmed, every original acked), and back
//! by the management UI's "Move messages" (the dynamic shovel its form creates, timed until the
//! destination holds N by a passive declaration every 5 ms); then the main queue's N messages out
//! and back by the mover of `apply --migrate`, its queue type switched. The shovel needs
//! rabbitmq_shovel_management, which `.ci/brokers.sh` enables on 4.0 and 4.3 and never on the
//! system 3.10 broker: there only hopper is timed.

pub mod page;

use std::collections::BTreeSet;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A broker of the matrix: where it answers and how to run its `rabbitmqctl`.
#[derive(Debug, Clone)]
pub struct Broker {
    /// "3.10", "4.0", "4.3": the benchmarks page's marker and the version the broker must report.
    pub name: String,
    pub amqp: String,
    /// The management API's base URL, ending in `/api`, without credentials.
    pub management: String,
    pub user: String,
    pub password: String,
    /// `rabbitmqctl` of this broker: `None` runs the host's; `Some((root, node))` runs the one
    /// inside that chroot against that node (files it reads are copied into the chroot).
    pub chroot: Option<(PathBuf, String)>,
}

impl Broker {
    /// The matrix `.ci/brokers.sh` starts: 3.10 on the host, 4.0 and 4.3 in chroots.
    pub fn matrix(name: &str) -> Result<Broker> {
        let (amqp, http, chroot) = match name {
            "3" | "3.10" => (5672, 15672, None),
            "4" | "4.0" => {
                (5673, 15673, Some(("HOPPER_RABBITMQ4_ROOT", "/var/lib/hopper-ci/trixie", "rabbit40@localhost")))
            }
            "4.3" => (5674, 15674, Some(("HOPPER_RABBITMQ43_ROOT", "/var/lib/hopper-ci/sid", "rabbit43@localhost"))),
            other => bail!("--broker takes 3.10, 4.0 or 4.3, not {other}"),
        };
        let name = match name {
            "3" => "3.10",
            "4" => "4.0",
            other => other,
        };
        Ok(Broker {
            name: name.to_string(),
            amqp: format!("amqp://guest:guest@127.0.0.1:{amqp}"),
            management: format!("http://127.0.0.1:{http}/api"),
            user: "guest".into(),
            password: "guest".into(),
            chroot: chroot.map(|(var, root, node)| {
                (PathBuf::from(std::env::var(var).unwrap_or_else(|_| root.to_string())), node.to_string())
            }),
        })
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub sizes: Vec<usize>,
    /// Runs of each cheap step (no-op, diff, dry run, inspect, listing, export, lint).
    pub repeats: usize,
    /// Runs of each first apply and import, each into a fresh vhost.
    pub fresh: usize,
    pub queue_type: String,
    pub hopper: PathBuf,
    /// `--against`: other hopper builds whose no-op apply and diff run in the same rounds, for
    /// a change measured against the build before it on the same broker state.
    pub against: Vec<PathBuf>,
    /// Run quorum queues on RabbitMQ 3.x past its file handle limit.
    pub force: bool,
    /// Progress lines on stderr.
    pub verbose: bool,
    /// `--move`: each message's body, in bytes.
    pub move_bytes: usize,
    /// Before each size's reads, wait (at most this long) until the machine is quiet: see
    /// `Quiet`. `None` does not wait; the test suite, which runs beside other tests, waits a
    /// second.
    pub settle: Option<Duration>,
    /// After `repeats` rounds of reads, more rounds (at most `MAX_ROUNDS`) while a size's
    /// reads have taken less than this: at 500 topologies a round costs seconds, at 10,000
    /// a minute, and the paired ratio's interval narrows with rounds, not with minutes.
    pub read_for: Option<Duration>,
}

/// The most rounds of reads at one size, however cheap a round is.
pub const MAX_ROUNDS: usize = 99;

/// The machine's CPUs, idle enough to measure on. hopper and the broker share this machine's
/// cores, so anything else busy (the broker of the previous size, or another broker still
/// freeing 50,000 deleted queues) takes CPU from hopper's process but hardly from the
/// listing's warm threads: with one core kept busy by `yes`, the same 500-topology diff went
/// from 1.04× to 1.51× the listing. Each size's reads begin once the whole machine has been
/// at most `Quiet::BUSY` busy for two seconds in a row, or once `--settle` has run out.
pub struct Quiet;

/// How a wait for a quiet machine ended.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Settled {
    /// The busy share of all CPUs in the last second before the reads.
    pub busy: f64,
    /// Two quiet seconds in a row were seen; otherwise the limit ran out.
    pub quiet: bool,
    pub waited: Duration,
}

impl Quiet {
    /// The share of all CPUs' time that counts as quiet: idle brokers take 1 to 3%.
    pub const BUSY: f64 = 0.10;

    /// (busy, total) jiffies of all CPUs since boot, from the text of `/proc/stat`: its first
    /// line is `cpu user nice system idle iowait irq softirq steal ...` (guest time is already
    /// in user and nice). A field that is not a number makes the line unreadable, rather than
    /// shifting the others.
    pub fn jiffies(stat: &str) -> Option<(u64, u64)> {
        let line = stat.lines().next()?.strip_prefix("cpu ")?;
        let fields: Vec<u64> = line.split_whitespace().map(|f| f.parse().ok()).collect::<Option<_>>()?;
        let total: u64 = fields.get(..8)?.iter().sum();
        let idle = fields[3] + fields[4];
        Some((total.checked_sub(idle)?, total))
    }

    /// The busy share between two readings; `None` when no time passed or a counter went
    /// backwards (the kernel does not promise that iowait only grows).
    pub fn share(before: (u64, u64), after: (u64, u64)) -> Option<f64> {
        let total = after.1.checked_sub(before.1).filter(|t| *t > 0)?;
        let busy = after.0.checked_sub(before.0)?;
        Some((busy as f64 / total as f64).min(1.0))
    }

    /// Whether the shares seen so far, one a second, end in two quiet ones.
    pub fn settled(shares: &[f64]) -> bool {
        shares.len() >= 2 && shares[shares.len() - 2..].iter().all(|s| *s <= Self::BUSY)
    }

    /// Waits, one `step` at a time, until the machine has been quiet for two steps in a row or
    /// `limit` has passed; `None` where `/proc/stat` cannot be read.
    fn wait(limit: Duration, step: Duration, say: impl Fn(String)) -> Option<Settled> {
        let read = || Self::jiffies(&fs::read_to_string("/proc/stat").ok()?);
        let start = Instant::now();
        let (mut shares, mut said) = (Vec::new(), false);
        let mut last = read()?;
        loop {
            std::thread::sleep(step);
            let now = read()?;
            if let Some(share) = Self::share(last, now) {
                shares.push(share);
            }
            last = now;
            let quiet = Self::settled(&shares);
            if quiet || start.elapsed() >= limit {
                let busy = shares.last().copied().unwrap_or(1.0);
                return Some(Settled { busy, quiet, waited: start.elapsed() });
            }
            if let Some(busy) = shares.last().filter(|b| !said && **b > Self::BUSY) {
                say(format!("waiting for the machine to be quiet ({:.0}% busy)", busy * 100.0));
                said = true;
            }
        }
    }
}

/// One measured command: wall seconds and, for hopper's own, peak memory in MB.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Sample {
    pub secs: f64,
    pub peak_mb: Option<f64>,
    /// CPU seconds (user and system) of hopper's own process: the rest of its wall time is
    /// spent waiting for the broker.
    pub cpu: Option<f64>,
}

/// The medians of a step at one size.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Step {
    pub samples: Vec<Sample>,
}

impl Step {
    pub fn median(&self) -> Option<f64> {
        median(self.samples.iter().map(|s| s.secs).collect())
    }
    pub fn cpu(&self) -> Option<f64> {
        median(self.samples.iter().filter_map(|s| s.cpu).collect())
    }
    pub fn peak_mb(&self) -> Option<f64> {
        self.samples.iter().filter_map(|s| s.peak_mb).reduce(f64::max)
    }
}

/// A hopper read against the listing, round by round: each round's time divided by the same
/// round's listing. The two reads of a round are seconds apart, on the same broker state and
/// the same share of the machine; two medians taken over minutes are not, and on this machine
/// their ratio moved by a fifth between runs of the same code (docs/benchmarks.md, "Where the target
/// stands").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    pub rounds: usize,
    /// The median of the rounds' ratios.
    pub median: f64,
    /// An interval that holds the true median ratio with at least 95% confidence, from the
    /// order statistics of the ratios (no assumption about their distribution); `None` under 6
    /// rounds, too few for one.
    pub interval: Option<(f64, f64)>,
}

impl Paired {
    /// `step`'s samples over `listing`'s, pairing them by position: `measure_size` pushes one
    /// of each a round, in round order.
    pub fn of(step: &Step, listing: &Step) -> Option<Paired> {
        if step.samples.len() != listing.samples.len() {
            return None;
        }
        let mut ratios: Vec<f64> = step
            .samples
            .iter()
            .zip(&listing.samples)
            .filter(|(_, l)| l.secs > 0.0)
            .map(|(s, l)| s.secs / l.secs)
            .collect();
        ratios.sort_by(f64::total_cmp);
        let rounds = ratios.len();
        let median = median(ratios.clone())?;
        let interval = median_interval(rounds).map(|(lo, hi)| (ratios[lo], ratios[hi]));
        Some(Paired { rounds, median, interval })
    }
}

/// The positions (0-based, in sorted order) of a distribution-free confidence interval of at
/// least 95% for the median of `n` samples: the widest-inward pair `(k, n-1-k)` for which the
/// chance that fewer than `k+1` samples fall below the median, `P(Binomial(n, 1/2) <= k)`, is
/// at most 2.5% on each side. `None` under 6 samples (even the extremes then cover less).
pub fn median_interval(n: usize) -> Option<(usize, usize)> {
    // P(B <= k), summed term by term: C(n, i) / 2^n, the terms kept as floats (n <= 99).
    let mut term = 0.5f64.powi(i32::try_from(n).ok()?);
    let mut below = 0.0;
    let mut best = None;
    for k in 0..n / 2 {
        below += term;
        if below > 0.025 {
            break;
        }
        best = Some((k, n - 1 - k));
        term = term * (n - k) as f64 / (k + 1) as f64;
    }
    best
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// Everything measured at one size on one broker.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SizeResult {
    pub topologies: usize,
    /// queues, exchanges, bindings per vhost
    pub objects: (usize, usize, usize),
    pub apply: Step,
    pub ctl_import: Step,
    pub http_import: Step,
    /// The reference: on new connections.
    pub listing: Step,
    /// The same listing on the benchmark's connections, kept alive: shown, not judged by.
    pub listing_kept_alive: Step,
    pub noop: Step,
    pub diff: Step,
    /// The `--against` builds', in the same rounds.
    pub against: Vec<Against>,
    pub dry_run: Step,
    pub inspect: Step,
    pub export: Step,
    pub lint: Step,
    /// What the run found worth saying (the broker as the limit, asynchronous imports...).
    pub notes: Vec<String>,
    /// Why the broker refused `POST /api/definitions` (a body over its limit), when it did.
    pub http_refused: Option<String>,
    /// How the wait for a quiet machine before the reads ended, when the run waited.
    pub settled: Option<Settled>,
}

/// An `--against` build's reads at one size, in the same rounds as this build's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Against {
    /// The build's file name.
    pub build: String,
    pub noop: Step,
    pub diff: Step,
}

impl SizeResult {
    pub fn total_objects(&self) -> usize {
        self.objects.0 + self.objects.1 + self.objects.2
    }

    /// Cuts every read's samples to the first `rounds`, each of which took one of each.
    pub fn keep_rounds(&mut self, rounds: usize) {
        let reads = [
            &mut self.noop,
            &mut self.diff,
            &mut self.dry_run,
            &mut self.inspect,
            &mut self.listing,
            &mut self.listing_kept_alive,
        ];
        for step in reads.into_iter().chain(self.against.iter_mut().flat_map(|a| [&mut a.noop, &mut a.diff])) {
            step.samples.truncate(rounds);
        }
    }
}

/// One broker's run: its version and every size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub broker: String,
    pub version: String,
    pub queue_type: String,
    pub repeats: usize,
    pub fresh: usize,
    pub sizes: Vec<SizeResult>,
    /// The size that could not be measured, and why.
    pub failure: Option<String>,
    pub machine: Machine,
    /// hopper's commit and the day, UTC, filled in by the command line.
    pub commit: String,
    pub date: String,
}

/// One broker's `--move` run: `messages` moved by each mover, `--repeats` times.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MoveResult {
    /// The matrix's name for the broker ("4.3") and the version it reported.
    pub broker: String,
    pub version: String,
    /// Each message's body, in bytes.
    pub bytes: usize,
    pub queue_type: String,
    pub messages: usize,
    /// `hopper redrive`, dead-letter queue to main queue: `messages` per sample.
    pub redrive: Step,
    /// The management UI's "Move messages", back: `messages` per sample; empty without the
    /// shovel plugin.
    pub shovel: Step,
    /// Why the shovel was not timed.
    pub no_shovel: Option<String>,
    /// The mover of `apply --migrate`, out to the holding queue and back: twice `messages` per
    /// sample.
    pub migrate: Step,
    pub machine: Machine,
    pub commit: String,
    pub date: String,
}

// ---------------------------------------------------------------------------------------------
// The management API, with a blocking agent of our own (long timeouts, bodies read whole)
// ---------------------------------------------------------------------------------------------

pub struct Http {
    agent: ureq::Agent,
    base: String,
    authorization: String,
    /// GETs sent again on a new connection because the broker had closed the kept-alive one
    /// (`Http::call_on`), counted so that the table says so.
    resent: AtomicUsize,
}

/// Which connections a listing is made on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Connections {
    /// New ones, as any command a pipeline runs must open: the reference hopper is judged by.
    New,
    /// The benchmark's own, kept alive from the round before: what only a long-running client
    /// has, shown beside the reference.
    KeptAlive,
}

impl Http {
    pub fn new(broker: &Broker) -> Http {
        let credentials = format!("{}:{}", broker.user, broker.password);
        Http {
            agent: Http::agent(),
            base: broker.management.clone(),
            authorization: format!("Basic {}", base64(credentials.as_bytes())),
            resent: AtomicUsize::new(0),
        }
    }

    /// How many GETs were sent again since the last call.
    pub fn take_resent(&self) -> usize {
        self.resent.swap(0, Ordering::Relaxed)
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(1800)))
            .build()
            .into()
    }

    /// (status, body)
    fn call(&self, method: &str, path: &str, body: Option<&str>) -> Result<(u16, String)> {
        self.call_on(&self.agent, method, path, body)
    }

    fn call_on(&self, agent: &ureq::Agent, method: &str, path: &str, body: Option<&str>) -> Result<(u16, String)> {
        let url = format!("{}{path}", self.base);
        let sent = self.send(agent, method, &url, body);
        // A kept-alive connection the broker closes (its idle timeout) as a request goes out
        // ends with no answer at all. A GET changes nothing, so a client sends it again on a
        // new connection; 4.0 at 2,000 topologies once ended a whole run with "Peer
        // disconnected" from it.
        let sent = match sent {
            Err(ureq::Error::Io(e)) if method == "GET" && std::ptr::eq(agent, &self.agent) && closed(&e) => {
                self.resent.fetch_add(1, Ordering::Relaxed);
                self.send(&Http::agent(), method, &url, body)
            }
            sent => sent,
        };
        let mut response = sent.with_context(|| format!("{method} {url}"))?;
        let status = response.status().as_u16();
        let body = response.body_mut().with_config().limit(u64::MAX).read_to_string()?;
        Ok((status, body))
    }

    fn send(
        &self,
        agent: &ureq::Agent,
        method: &str,
        url: &str,
        body: Option<&str>,
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        match (method, body) {
            ("GET", _) => agent.get(url).header("authorization", &self.authorization).call(),
            ("DELETE", _) => agent.delete(url).header("authorization", &self.authorization).call(),
            ("PUT", b) => agent
                .put(url)
                .header("authorization", &self.authorization)
                .content_type("application/json")
                .send(b.unwrap_or("{}")),
            ("POST", b) => agent
                .post(url)
                .header("authorization", &self.authorization)
                .content_type("application/json")
                .send(b.unwrap_or("{}")),
            _ => Err(ureq::Error::BadUri(format!("method {method}"))),
        }
    }

    pub fn get_json(&self, path: &str) -> Result<Value> {
        let (status, body) = self.call("GET", path, None)?;
        if status != 200 {
            bail!("GET {path}: HTTP {status}: {body}");
        }
        Ok(serde_json::from_str(&body)?)
    }

    fn ok(&self, method: &str, path: &str, body: Option<&str>) -> Result<()> {
        let (status, answer) = self.call(method, path, body)?;
        if !(200..300).contains(&status) {
            bail!("{method} {path}: HTTP {status}: {}", answer.chars().take(300).collect::<String>());
        }
        Ok(())
    }

    /// The cheapest complete listing of a vhost: the three large requests hopper makes (`list` in
    /// src/broker/http.rs), queues and exchanges without statistics, all three with only the
    /// columns hopper reads, at once. Returns how long the three answers took to arrive whole,
    /// and the counts they hold, parsed after the clock stopped: the reference is the broker's
    /// cost and the transfer, not a client's parsing. On new connections, the clock includes
    /// opening them, as it does for hopper, and for any other command.
    fn listing(&self, vhost: &str, connections: Connections) -> Result<(Duration, (usize, usize, usize))> {
        let paths = [
            format!(
                "/queues/{vhost}?disable_stats=true&enable_queue_totals=false&columns=name,type,durable,auto_delete,arguments,node,state,leader,members,online"
            ),
            format!("/exchanges/{vhost}?disable_stats=true&columns=name,type,durable,auto_delete,internal,arguments"),
            format!("/bindings/{vhost}?columns=source,destination,destination_type,routing_key,arguments"),
        ];
        // Made before the clock starts: making it opens nothing.
        let new = match connections {
            Connections::New => Some(Http::agent()),
            Connections::KeptAlive => None,
        };
        let agent = new.as_ref().unwrap_or(&self.agent);
        let start = Instant::now();
        let bodies: Vec<Result<String>> = std::thread::scope(|s| {
            let handles: Vec<_> = paths
                .iter()
                .map(|p| {
                    s.spawn(move || {
                        let (status, body) = self.call_on(agent, "GET", p, None)?;
                        if status != 200 {
                            bail!("GET {p}: HTTP {status}");
                        }
                        Ok(body)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("listing thread panicked")))).collect()
        });
        let took = start.elapsed();
        let mut counts = [0usize; 3];
        for (i, body) in bodies.into_iter().enumerate() {
            counts[i] = serde_json::from_str::<Vec<Value>>(&body?)?.len();
        }
        Ok((took, (counts[0], counts[1], counts[2])))
    }

    /// queues, hopper's exchanges (not the default or `amq.*`), bindings from an exchange.
    fn counts(&self, vhost: &str) -> Result<(usize, usize, usize)> {
        let q = self.get_json(&format!("/queues/{vhost}?disable_stats=true&columns=name"))?;
        let e = self.get_json(&format!("/exchanges/{vhost}?columns=name"))?;
        let b = self.get_json(&format!("/bindings/{vhost}?columns=source"))?;
        let len = |v: &Value| v.as_array().map_or(0, Vec::len);
        let exchanges = e
            .as_array()
            .into_iter()
            .flatten()
            .filter(|x| x["name"].as_str().is_some_and(|n| !n.is_empty() && !n.starts_with("amq.")))
            .count();
        let bindings =
            b.as_array().into_iter().flatten().filter(|x| x["source"].as_str().is_some_and(|s| !s.is_empty())).count();
        Ok((len(&q), exchanges, bindings))
    }

    fn create_vhost(&self, vhost: &str, user: &str) -> Result<()> {
        self.ok("PUT", &format!("/vhosts/{vhost}"), Some(r#"{"description":"hopper benchmark"}"#))?;
        self.ok("PUT", &format!("/permissions/{vhost}/{user}"), Some(r#"{"configure":".*","write":".*","read":".*"}"#))
    }

    /// A vhost of 50,000 queues takes minutes to delete, and the API may drop the request while
    /// the deletion carries on: retried until the vhost is gone.
    fn delete_vhost(&self, vhost: &str) -> Result<()> {
        for _ in 0..60 {
            if let Ok((204 | 404, _)) = self.call("DELETE", &format!("/vhosts/{vhost}"), None) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_secs(5));
            if let Ok((404, _)) = self.call("GET", &format!("/vhosts/{vhost}"), None) {
                return Ok(());
            }
        }
        bail!("vhost {vhost} is still there")
    }
}

/// Whether a request failed because its connection was closed before any answer came.
fn closed(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(e.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe)
}

fn base64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Vhosts made by a run, deleted when it ends however it ends.
struct Vhosts<'a> {
    http: &'a Http,
    names: Vec<String>,
}

impl Vhosts<'_> {
    fn delete(&mut self, name: &str) -> Result<()> {
        self.names.retain(|n| n != name);
        self.http.delete_vhost(name)
    }
}

impl Drop for Vhosts<'_> {
    fn drop(&mut self) {
        for name in std::mem::take(&mut self.names) {
            if let Err(e) = self.http.delete_vhost(&name) {
                eprintln!("bench: warning: {e}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Messages, over AMQP (for --move)
// ---------------------------------------------------------------------------------------------

/// One AMQP connection to a vhost, driven by a runtime of its own: the benchmark is blocking
/// code, and the connection must keep answering the broker while hopper or the shovel runs.
struct Amqp {
    runtime: tokio::runtime::Runtime,
    connection: lapin::Connection,
    channel: lapin::Channel,
}

impl Amqp {
    fn connect(url: &str) -> Result<Amqp> {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        let (connection, channel) = runtime.block_on(async {
            let connection = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await?;
            let channel = connection.create_channel().await?;
            channel.confirm_select(lapin::options::ConfirmSelectOptions::default()).await?;
            anyhow::Ok((connection, channel))
        })?;
        Ok(Amqp { runtime, connection, channel })
    }

    /// `n` persistent messages of `bytes` bytes each into `queue`, through the default exchange,
    /// each confirmed and routed (`mandatory`).
    fn fill(&self, queue: &str, n: usize, bytes: usize) -> Result<()> {
        use lapin::options::BasicPublishOptions;
        let body = vec![b'x'; bytes];
        self.runtime.block_on(async {
            // Confirmed in windows: the broker is never more than a window behind.
            for start in (0..n).step_by(1000) {
                let mut confirms = vec![];
                for i in start..n.min(start + 1000) {
                    let properties = lapin::BasicProperties::default()
                        .with_delivery_mode(2)
                        .with_message_id(format!("m-{i}").into());
                    let options = BasicPublishOptions { mandatory: true, immediate: false };
                    confirms
                        .push(self.channel.basic_publish("".into(), queue.into(), options, &body, properties).await?);
                }
                for confirm in confirms {
                    if !matches!(confirm.await?, lapin::Confirmation::Ack(None)) {
                        bail!("a message to {queue} was not routed or not confirmed");
                    }
                }
            }
            Ok(())
        })
    }

    /// Until `queue` holds exactly `n` messages; the instant it was seen to. The count is a
    /// passive declaration's, every 5 ms: the management API's lags by seconds.
    fn until_holds(&self, queue: &str, n: usize, timeout: Duration) -> Result<Instant> {
        let options = lapin::options::QueueDeclareOptions { passive: true, ..Default::default() };
        let deadline = Instant::now() + timeout;
        self.runtime.block_on(async {
            loop {
                let declared =
                    self.channel.queue_declare(queue.into(), options, lapin::types::FieldTable::default()).await?;
                if declared.message_count() as usize == n {
                    return Ok(Instant::now());
                }
                if Instant::now() > deadline {
                    bail!(
                        "{queue} holds {} messages, not {n}, after {} s",
                        declared.message_count(),
                        timeout.as_secs()
                    );
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    }

    fn close(self) {
        let _ = self.runtime.block_on(self.connection.close(200, "done".into()));
    }
}

// ---------------------------------------------------------------------------------------------
// Running commands
// ---------------------------------------------------------------------------------------------

/// The program that runs each measured command as its own child, set by `main` to this
/// benchmark's executable (`--measure-child`); unset (the tests), commands are children of this
/// process. Why: Linux carries a process's peak memory across `exec` from the image it replaced,
/// which for a child spawned here is this process (vfork). Once the benchmark had parsed a
/// 10,000-topology listing, every hopper command "peaked" at the benchmark's 369 MB. A child of
/// a freshly started, small process starts from that process's few MB instead.
pub static MEASURER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Runs a command, output to `log`; its wall time and (from `wait4`) its peak resident memory.
fn measure(command: &mut Command, log: &Path) -> Result<(Sample, i32)> {
    let file = fs::File::create(log)?;
    let Some(measurer) = MEASURER.get() else {
        command.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
        return wait_measured(command);
    };
    let usage = log.with_extension("usage");
    let mut through = Command::new(measurer);
    through.arg("--measure-child").arg(&usage).arg(command.get_program()).args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => through.env(key, value),
            None => through.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        through.current_dir(dir);
    }
    through.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
    let status = through.status()?;
    if !status.success() {
        bail!("the measuring child failed ({status}) for {command:?}");
    }
    let text = fs::read_to_string(&usage)?;
    let _ = fs::remove_file(&usage);
    let numbers: Vec<f64> = text.split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
    let [secs, cpu, peak_mb, code] = numbers[..] else { bail!("bad usage record {text:?}") };
    Ok((Sample { secs, peak_mb: Some(peak_mb), cpu: Some(cpu) }, code as i32))
}

/// `--measure-child USAGE PROGRAM ARGS...`: runs the program (stdio inherited) and writes its
/// wall seconds, CPU seconds, peak memory in MB and exit code into USAGE.
pub fn measure_child(args: &[String]) -> Result<()> {
    let [usage, program, rest @ ..] = args else { bail!("--measure-child USAGE PROGRAM ARGS...") };
    let (sample, code) = wait_measured(Command::new(program).args(rest))?;
    let (secs, cpu, peak) = (sample.secs, sample.cpu.unwrap_or(0.0), sample.peak_mb.unwrap_or(0.0));
    fs::write(usage, format!("{secs} {cpu} {peak} {code}\n"))?;
    Ok(())
}

/// Spawns `command` and reaps it with `wait4`, for its own resource usage.
fn wait_measured(command: &mut Command) -> Result<(Sample, i32)> {
    let start = Instant::now();
    let child = command.spawn().with_context(|| format!("running {command:?}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 reaps the child std spawned, which is then never
    // waited for through `child` (dropping a Child neither waits nor kills).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("wait4");
        }
    }
    let secs = start.elapsed().as_secs_f64();
    drop(child);
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    // ru_maxrss is in kilobytes on Linux.
    let cpu = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let sample = Sample {
        secs,
        peak_mb: Some(usage.ru_maxrss as f64 / 1024.0),
        cpu: Some(cpu(usage.ru_utime) + cpu(usage.ru_stime)),
    };
    Ok((sample, code))
}

fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

struct Run<'a> {
    broker: &'a Broker,
    options: &'a Options,
    http: &'a Http,
    dir: PathBuf,
}

impl Run<'_> {
    fn say(&self, what: impl AsRef<str>) {
        if self.options.verbose {
            eprintln!("bench {}: {}", self.broker.name, what.as_ref());
        }
    }

    fn hopper(&self, args: &[&str]) -> Command {
        self.hopper_of(&self.options.hopper, args)
    }

    fn hopper_of(&self, binary: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(binary);
        command
            .args(args)
            .env("HOPPER_AMQP_URL", &self.broker.amqp)
            .env("HOPPER_MANAGEMENT_URL", &self.broker.management)
            // A benchmark reports a slow broker rather than giving up on it: 50,000 queues on a
            // busy 3.10 once took longer than the default 30 s to list.
            .env("HOPPER_TIMEOUT", "600s")
            .env("NO_COLOR", "1");
        command
    }

    /// A hopper command that must exit with one of `codes` and whose output must hold `expect`.
    fn hopper_step(&self, args: &[&str], codes: &[i32], expect: Option<&str>) -> Result<Sample> {
        self.step_of(&self.options.hopper, args, codes, expect)
    }

    /// `hopper_step`, of the hopper build at `binary`.
    fn step_of(&self, binary: &Path, args: &[&str], codes: &[i32], expect: Option<&str>) -> Result<Sample> {
        let log = self.dir.join("hopper.log");
        let (sample, code) = measure(&mut self.hopper_of(binary, args), &log)?;
        let text = fs::read_to_string(&log).unwrap_or_default();
        if !codes.contains(&code) || expect.is_some_and(|e| !text.lines().any(|l| l.starts_with(e))) {
            bail!(
                "hopper {} exited {code}{}:\n{}",
                args.join(" "),
                expect.map(|e| format!(" (expected `{e}`)")).unwrap_or_default(),
                tail(&log)
            );
        }
        Ok(sample)
    }

    /// `rabbitmqctl` of this broker.
    fn ctl(&self, args: &[&str]) -> Command {
        match &self.broker.chroot {
            None => {
                let mut c = Command::new("rabbitmqctl");
                c.args(args);
                c
            }
            Some((root, node)) => {
                let mut c = Command::new("chroot");
                c.env_clear()
                    .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                    .env("HOME", "/root")
                    .env("LANG", "C.UTF-8")
                    .env("LC_ALL", "C.UTF-8")
                    .arg(root)
                    .args(["rabbitmqctl", "-n", node])
                    .args(args);
                c
            }
        }
    }

    /// A file `rabbitmqctl` can read: as is on the host, copied into the chroot otherwise.
    /// Returns (the path it sees, the copy to remove).
    fn ctl_file(&self, file: &Path) -> Result<(String, Option<PathBuf>)> {
        let Some((root, _)) = &self.broker.chroot else {
            return Ok((file.display().to_string(), None));
        };
        let name = format!("hopper-bench-{}-{}", std::process::id(), file.file_name().unwrap().to_string_lossy());
        let copy = root.join("tmp").join(&name);
        fs::copy(file, &copy).with_context(|| format!("copying into {}", copy.display()))?;
        set_mode(&copy, 0o644)?;
        Ok((format!("/tmp/{name}"), Some(copy)))
    }

    /// Polls until the vhost holds `expected` queues and bindings; the time from `start`.
    fn until_complete(&self, vhost: &str, expected: (usize, usize, usize), start: Instant) -> Result<f64> {
        loop {
            let q = self.http.get_json(&format!("/queues/{vhost}?disable_stats=true&columns=name"))?;
            let b = self.http.get_json(&format!("/bindings/{vhost}?columns=source"))?;
            let queues = q.as_array().map_or(0, Vec::len);
            let bindings = b
                .as_array()
                .into_iter()
                .flatten()
                .filter(|x| x["source"].as_str().is_some_and(|s| !s.is_empty()))
                .count();
            if queues >= expected.0 && bindings >= expected.2 {
                return Ok(start.elapsed().as_secs_f64());
            }
            if start.elapsed() > Duration::from_secs(3600) {
                bail!("the import into {vhost} never completed: {queues} queues, {bindings} bindings");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A note when the broker holds queues outside `vhost`, whose statistics it gathers while
    /// the reads run.
    fn other_queues(&self, vhost: &str) -> Result<Option<String>> {
        let queues = self.http.get_json("/queues?disable_stats=true&enable_queue_totals=false&columns=vhost")?;
        let others: Vec<&str> = queues
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|q| q["vhost"].as_str())
            .filter(|v| *v != vhost)
            .collect();
        if others.is_empty() {
            return Ok(None);
        }
        let vhosts: BTreeSet<&str> = others.iter().copied().collect();
        Ok(Some(format!(
            "the broker held {} other queue(s) in {} other vhost(s) when the reads began, whose statistics it gathers meanwhile: the reads may be slow",
            others.len(),
            vhosts.len()
        )))
    }

    fn check(&self, vhost: &str, expected: (usize, usize, usize), after: &str) -> Result<()> {
        let found = self.http.counts(vhost)?;
        if found != expected {
            bail!("after {after}, vhost {vhost} holds {found:?} (queues, exchanges, bindings); expected {expected:?}");
        }
        Ok(())
    }

    fn measure_size(&self, n: usize, tag: &str) -> Result<SizeResult> {
        let options = self.options;
        let specs = self.dir.join(format!("specs-{n}"));
        generate(&specs, n, &options.queue_type)?;
        let specs_arg = specs.to_str().unwrap();
        let mut result = SizeResult { topologies: n, ..Default::default() };
        let mut vhosts = Vhosts { http: self.http, names: vec![] };

        let expected = self.offline_steps(n, specs_arg, &mut result)?;
        self.quorum_handles_fit(expected)?;
        let applied = self.first_applies(n, tag, specs_arg, expected, &mut result, &mut vhosts)?;
        self.settle(&applied, specs_arg, &mut result)?;
        self.reads(&applied, specs_arg, expected, &mut result)?;
        vhosts.delete(&applied)?;
        self.ctl_imports(n, tag, specs_arg, expected, &mut result, &mut vhosts)?;
        self.http_imports(n, tag, specs_arg, expected, &mut result, &mut vhosts)?;
        Ok(result)
    }

    /// The offline steps, export and lint; returns the objects a vhost should hold.
    fn offline_steps(&self, n: usize, specs_arg: &str, result: &mut SizeResult) -> Result<(usize, usize, usize)> {
        let options = self.options;
        // Offline: export (also the expected objects) and lint.
        for _ in 0..options.repeats {
            result.export.samples.push(self.hopper_step(&["export", "--vhost", "bench", specs_arg], &[0], None)?);
            result.lint.samples.push(self.hopper_step(&["lint", specs_arg], &[0], None)?);
        }
        let defs = {
            let out = self.hopper(&["export", "--vhost", "bench", specs_arg]).output()?;
            serde_json::from_slice::<Value>(&out.stdout).context("hopper export's JSON")?
        };
        let len = |k: &str| defs[k].as_array().map_or(0, Vec::len);
        let expected = (len("queues"), len("exchanges"), len("bindings"));
        result.objects = expected;
        self.say(format!("{n} topologies: {expected:?} queues, exchanges, bindings"));
        Ok(expected)
    }

    /// Refuses a size whose quorum queues would exhaust a 3.x node's file handles.
    fn quorum_handles_fit(&self, expected: (usize, usize, usize)) -> Result<()> {
        let options = self.options;
        // RabbitMQ 3.x counts each quorum queue's files (three, measured on 3.10) in its file
        // handle cache; past its limit the node stops accepting AMQP connections on every vhost.
        if options.queue_type == "quorum" && self.broker.name.starts_with("3.") && !options.force {
            let nodes = self.http.get_json("/nodes?columns=name,fd_total")?;
            let fd_total =
                nodes.as_array().into_iter().flatten().filter_map(|n| n["fd_total"].as_u64()).min().unwrap_or(0)
                    as usize;
            if fd_total > 0 && 3 * expected.0 > fd_total * 3 / 4 {
                bail!(
                    "{} quorum queues need about {} file handles on RabbitMQ 3.x; the node allows {fd_total} (fd_total) and past its file handle cache limit it stops accepting AMQP connections: at most {} topologies, or --force",
                    expected.0,
                    3 * expected.0,
                    fd_total * 3 / 4 / 15
                );
            }
        }
        Ok(())
    }

    /// Measured: hopper's first apply. Returns the vhost applied last, kept for the reads.
    fn first_applies(
        &self,
        n: usize,
        tag: &str,
        specs_arg: &str,
        expected: (usize, usize, usize),
        result: &mut SizeResult,
        vhosts: &mut Vhosts,
    ) -> Result<String> {
        let options = self.options;
        // First apply, each into a fresh vhost; the last one stays for the reads.
        let mut applied = String::new();
        for i in 0..options.fresh {
            if !applied.is_empty() {
                vhosts.delete(&applied)?;
            }
            applied = format!("{tag}-{n}-apply-{i}");
            self.http.create_vhost(&applied, &self.broker.user)?;
            vhosts.names.push(applied.clone());
            self.say(format!("hopper apply into {applied}"));
            result.apply.samples.push(self.hopper_step(
                &["apply", "--vhost", &applied, specs_arg],
                &[0],
                Some("Applied:"),
            )?);
            self.check(&applied, expected, "hopper apply")?;
        }
        Ok(applied)
    }

    /// Not measured: lets the broker settle after the first apply before the reads.
    fn settle(&self, applied: &str, specs_arg: &str, result: &mut SizeResult) -> Result<()> {
        let options = self.options;
        // The broker is still settling right after the first apply (at 10,000 topologies it
        // has just declared 130,000 objects): one listing and one no-op apply, not measured,
        // so that the first measured read does not pay for it.
        self.say("settling: a listing and a no-op apply, not measured");
        self.http.listing(applied, Connections::KeptAlive)?;
        self.hopper_step(&["apply", "--vhost", applied, specs_arg], &[0], Some("No changes"))?;
        // The management plugin gathers every queue's statistics every few seconds, a vhost's
        // the benchmark does not read too: on RabbitMQ 4.3 at 500 topologies, with another
        // vhost of 7,500 objects on the broker, one check put the no-op apply at 1.26x the
        // listing, and another without it at 1.07x (docs/benchmarks.md).
        if let Some(note) = self.other_queues(applied)? {
            result.notes.push(note);
        }
        if let Some(limit) = options.settle {
            result.settled = Quiet::wait(limit, Duration::from_secs(1), |s| self.say(s));
            if let Some(s) = result.settled.filter(|s| !s.quiet) {
                result.notes.push(format!(
                    "the machine had not been quiet for two seconds when the reads began ({:.0}% busy after {:.0} s): they may be slow",
                    s.busy * 100.0,
                    s.waited.as_secs_f64()
                ));
            }
        }
        Ok(())
    }

    /// Measured: the reads (no-op apply, diff, dry run, inspect, listings, other builds).
    fn reads(
        &self,
        applied: &str,
        specs_arg: &str,
        expected: (usize, usize, usize),
        result: &mut SizeResult,
    ) -> Result<()> {
        let options = self.options;
        // The reads, interleaved so that the broker's state drifts alike for each. A rotation
        // alone keeps each read after the same other one (the listing always came after
        // inspect's heavy listing with statistics); a stride that changes each round, coprime
        // with the reads a round so still every read once, moves them.
        let reads_a_round = 5 + 2 * options.against.len();
        let strides: Vec<usize> = (1..reads_a_round).filter(|s| gcd(*s, reads_a_round) == 1).collect();
        result.against = options
            .against
            .iter()
            .map(|b| Against {
                build: b.file_name().unwrap_or_default().to_string_lossy().into(),
                ..Default::default()
            })
            .collect();
        self.say("no-op apply, diff, dry run, inspect, listing");
        let mut hurried = 0;
        self.http.take_resent();
        let reads = Instant::now();
        let more = |round: usize| {
            round < options.repeats
                || (round < MAX_ROUNDS && options.read_for.is_some_and(|limit| reads.elapsed() < limit))
        };
        // A read leaves the broker busy for a moment after its answer (closing connections,
        // collecting garbage), and the read after it paid for that: on RabbitMQ 4.3 at 500
        // topologies, in this rotation, hopper's reads back to back were 1.16 to 1.19x the
        // listing, half a second apart 1.10 to 1.14x (16 rounds each). Each read starts once the
        // machine has been quiet for half a second (at most `--settle`, and 5 s); whether it
        // began sooner is counted.
        let hurried_read = || {
            options.settle.is_some_and(|limit| {
                Quiet::wait(limit.min(Duration::from_secs(5)), Duration::from_millis(250), |_| {})
                    .is_some_and(|p| !p.quiet)
            })
        };
        let mut round = 0;
        let read_round = |round: usize, result: &mut SizeResult, hurried: &mut usize| -> Result<()> {
            let stride = strides[round % strides.len()];
            for which in (0..reads_a_round).map(|i| (i * stride + round) % reads_a_round) {
                *hurried += usize::from(hurried_read());
                *hurried += self.read_once(which, applied, specs_arg, expected, result, &hurried_read)?;
            }
            Ok(())
        };
        while more(round) {
            if let Err(e) = read_round(round, result, &mut hurried) {
                // A size's first apply can take a quarter of an hour at 10,000 topologies: the
                // rounds that finished are kept, each read's samples cut to them, and the failure
                // said. Without a finished round there is nothing to keep.
                if round == 0 {
                    return Err(e);
                }
                result.keep_rounds(round);
                result.notes.push(format!("round {} of the reads failed, {round} kept: {e:#}", round + 1));
                break;
            }
            round += 1;
        }
        if hurried > 0 {
            result.notes.push(format!(
                "{hurried} of {} reads began before the machine had been quiet for half a second: they may be slow",
                (reads_a_round + 1) * round
            ));
        }
        let resent = self.http.take_resent();
        if resent > 0 {
            result.notes.push(format!(
                "{resent} GETs on the benchmark's kept-alive connections found the connection closed by the broker and were sent again on a new one (a kept-alive listing's time includes it)"
            ));
        }
        Ok(())
    }

    /// One read of a round, by its number: the no-op apply, diff, dry run, inspect, the listings,
    /// then each other build's no-op apply and diff. Returns how many of its own waits for a
    /// quiet machine ended before it was quiet (the listing kept alive waits once more).
    fn read_once(
        &self,
        which: usize,
        applied: &str,
        specs_arg: &str,
        expected: (usize, usize, usize),
        result: &mut SizeResult,
        hurried_read: &dyn Fn() -> bool,
    ) -> Result<usize> {
        let options = self.options;
        let mut hurried = 0;
        match which {
            0 => result.noop.samples.push(self.hopper_step(
                &["apply", "--vhost", applied, specs_arg],
                &[0],
                Some("No changes"),
            )?),
            1 => result.diff.samples.push(self.hopper_step(&["diff", "--vhost", applied, specs_arg], &[0], None)?),
            2 => result.dry_run.samples.push(self.hopper_step(
                &["apply", "--dry-run", "--vhost", applied, specs_arg],
                &[0],
                Some("Dry run"),
            )?),
            3 => result.inspect.samples.push(self.hopper_step(&["inspect", "--vhost", applied], &[0, 1], None)?),
            4 => {
                // The reference, then, after a quiet half second of its own, the same on
                // connections kept from the round before.
                for (connections, step) in
                    [(Connections::New, &mut result.listing), (Connections::KeptAlive, &mut result.listing_kept_alive)]
                {
                    if connections == Connections::KeptAlive {
                        hurried += usize::from(hurried_read());
                    }
                    let (took, seen) = self.http.listing(applied, connections)?;
                    step.samples.push(Sample { secs: took.as_secs_f64(), peak_mb: None, cpu: None });
                    if seen.0 != expected.0 || seen.2 < expected.2 {
                        bail!("the listing of {applied} saw {seen:?}, expected {expected:?}");
                    }
                }
            }
            _ => {
                let (build, noop) = ((which - 5) / 2, (which - 5).is_multiple_of(2));
                let binary = &options.against[build];
                let (step, args) = if noop {
                    (&mut result.against[build].noop, ["apply", "--vhost", applied, specs_arg])
                } else {
                    (&mut result.against[build].diff, ["diff", "--vhost", applied, specs_arg])
                };
                step.samples.push(self.step_of(binary, &args, &[0], noop.then_some("No changes"))?);
            }
        }
        Ok(hurried)
    }

    /// Measured: `rabbitmqctl import_definitions` of the same objects.
    fn ctl_imports(
        &self,
        n: usize,
        tag: &str,
        specs_arg: &str,
        expected: (usize, usize, usize),
        result: &mut SizeResult,
        vhosts: &mut Vhosts,
    ) -> Result<()> {
        let options = self.options;
        // The broker's own imports of the same objects, each into a fresh vhost.
        if which("rabbitmqctl", &self.broker.chroot) {
            for i in 0..options.fresh {
                let vhost = format!("{tag}-{n}-ctl-{i}");
                self.http.create_vhost(&vhost, &self.broker.user)?;
                vhosts.names.push(vhost.clone());
                let file = self.dir.join(format!("defs-{vhost}.json"));
                let out = self.hopper(&["export", "--vhost", &vhost, specs_arg]).output()?;
                fs::write(&file, &out.stdout)?;
                set_mode(&file, 0o644)?;
                let (path, copy) = self.ctl_file(&file)?;
                self.say(format!("rabbitmqctl import_definitions into {vhost}"));
                let log = self.dir.join("ctl.log");
                let start = Instant::now();
                let (_, code) = measure(&mut self.ctl(&["import_definitions", &path]), &log)?;
                let returned = start.elapsed().as_secs_f64();
                if let Some(copy) = copy {
                    let _ = fs::remove_file(copy);
                }
                if code != 0 {
                    bail!("rabbitmqctl import_definitions exited {code}:\n{}", tail(&log));
                }
                let done = self.until_complete(&vhost, expected, start)?;
                self.check(&vhost, expected, "rabbitmqctl import_definitions")?;
                result.ctl_import.samples.push(Sample { secs: done, peak_mb: None, cpu: None });
                if done > returned + 0.5 {
                    result.notes.push(format!(
                        "rabbitmqctl import_definitions returned after {returned:.2} s, the vhost was complete after {done:.2} s"
                    ));
                }
                vhosts.delete(&vhost)?;
            }
        } else {
            result.notes.push("no rabbitmqctl for this broker: its import was not measured".into());
        }
        Ok(())
    }

    /// Measured: `POST /api/definitions/{vhost}` of the same objects.
    fn http_imports(
        &self,
        n: usize,
        tag: &str,
        specs_arg: &str,
        expected: (usize, usize, usize),
        result: &mut SizeResult,
        vhosts: &mut Vhosts,
    ) -> Result<()> {
        let options = self.options;
        for i in 0..options.fresh {
            let vhost = format!("{tag}-{n}-http-{i}");
            self.http.create_vhost(&vhost, &self.broker.user)?;
            vhosts.names.push(vhost.clone());
            let out = self.hopper(&["export", "--vhost", &vhost, specs_arg]).output()?;
            let mut defs: Value = serde_json::from_slice(&out.stdout)?;
            // The vhost-scoped endpoint imports into the vhost of its URL; the vhost fields are
            // stripped so that no version can create or fill another.
            if let Some(o) = defs.as_object_mut() {
                o.remove("vhosts");
            }
            for k in ["queues", "exchanges", "bindings"] {
                for o in defs[k].as_array_mut().into_iter().flatten() {
                    if let Some(o) = o.as_object_mut() {
                        o.remove("vhost");
                    }
                }
            }
            let body = defs.to_string();
            self.say(format!("POST /api/definitions/{vhost}"));
            let start = Instant::now();
            let (status, answer) = self.http.call("POST", &format!("/definitions/{vhost}"), Some(&body))?;
            // The broker's own limit, not a failure of the run: a definitions body past the
            // management API's request body limit is refused whole, and nothing is imported.
            if answer.contains("body size limit") {
                result.http_refused = Some(format!(
                    "refused by the broker (HTTP {status}): the {:.0} MB body is over the management API's request body limit (`management.http.max_body_size`, 20 MiB by default)",
                    body.len() as f64 / 1e6
                ));
                vhosts.delete(&vhost)?;
                break;
            }
            if !(200..300).contains(&status) {
                bail!("POST /definitions/{vhost}: HTTP {status}: {answer}");
            }
            let done = self.until_complete(&vhost, expected, start)?;
            self.check(&vhost, expected, "POST /api/definitions")?;
            result.http_import.samples.push(Sample { secs: done, peak_mb: None, cpu: None });
            vhosts.delete(&vhost)?;
        }
        Ok(())
    }

    /// `--move`: `n` messages in a topology's dead-letter queue, moved to its main queue by
    /// `hopper redrive` and back by the management UI's "Move messages"; then the mover of
    /// `apply --migrate`, the main queue's messages out and back, its queue type switched.
    fn measure_move(&self, n: usize, tag: &str) -> Result<MoveResult> {
        let options = self.options;
        let mut result = MoveResult {
            broker: String::new(),
            version: String::new(),
            bytes: options.move_bytes,
            machine: Machine::default(),
            commit: String::new(),
            date: String::new(),
            queue_type: options.queue_type.clone(),
            messages: n,
            redrive: Step::default(),
            shovel: Step::default(),
            no_shovel: None,
            migrate: Step::default(),
        };
        let mut vhosts = Vhosts { http: self.http, names: vec![] };
        // Letters, digits and dashes: the name goes into URLs as it is.
        let vhost = format!("{tag}-move");
        self.http.create_vhost(&vhost, &self.broker.user)?;
        vhosts.names.push(vhost.clone());
        let spec = self.move_spec();
        let spec_arg = spec.to_str().unwrap();
        self.write_move_spec(&vhost, &options.queue_type)?;
        self.hopper_step(&["apply", spec_arg], &[0], Some("Applied:"))?;
        let amqp = Amqp::connect(&format!("{}/{vhost}", self.broker.amqp))?;
        self.say(format!("filling orders.dlq with {n} messages of {} bytes", options.move_bytes));
        amqp.fill("orders.dlq", n, options.move_bytes)?;

        result.no_shovel = self.no_shovel();
        for i in 0..options.repeats {
            result.redrive.samples.push(self.redrive(n, spec_arg, &amqp)?);
            if result.no_shovel.is_none() {
                result.shovel.samples.push(self.shovel_back(i, n, &vhost, &amqp)?);
            } else {
                self.http.ok("DELETE", &format!("/queues/{vhost}/orders/contents"), None)?;
                amqp.fill("orders.dlq", n, options.move_bytes)?;
            }
        }

        self.before_migrates(n, &vhost, &amqp)?;
        self.migrates(n, spec_arg, &vhost, &amqp, &mut result)?;
        amqp.close();
        vhosts.delete(&vhost)?;
        Ok(result)
    }

    fn move_spec(&self) -> PathBuf {
        self.dir.join("move.toml")
    }

    fn write_move_spec(&self, vhost: &str, queue_type: &str) -> Result<()> {
        fs::write(
            self.move_spec(),
            format!(
                "vhost = \"{vhost}\"\n[topology.orders]\nqueue_type = \"{queue_type}\"\ndelays = [\"1h\"]\nmax_attempts = 2\nidempotency_key = \"message_id\"\n"
            ),
        )?;
        Ok(())
    }

    /// Why the shovel cannot be timed on this broker, if it cannot.
    fn no_shovel(&self) -> Option<String> {
        if matches!(self.http.call("GET", "/shovels", None), Ok((200, _))) {
            return None;
        }
        Some(if self.broker.chroot.is_none() {
            "the plugin is not enabled on the system broker, whose configuration hopper's scripts never change".into()
        } else {
            "no rabbitmq_shovel_management on this broker: .ci/brokers.sh enables it".into()
        })
    }

    /// Measured: `hopper redrive` of the `n` dead letters, orders.dlq to orders.
    fn redrive(&self, n: usize, spec_arg: &str, amqp: &Amqp) -> Result<Sample> {
        self.say(format!("hopper redrive: {n} messages orders.dlq -> orders"));
        let sample = self.hopper_step(&["--format", "json", "redrive", spec_arg], &[0], None)?;
        let log = fs::read_to_string(self.dir.join("hopper.log"))?;
        let report = log
            .find('{')
            .and_then(|start| serde_json::Deserializer::from_str(&log[start..]).into_iter::<Value>().next())
            .ok_or_else(|| anyhow!("hopper redrive printed no JSON:\n{log}"))??;
        let moved = report["topologies"][0]["moved"].as_u64();
        if moved != Some(n as u64) {
            bail!("hopper redrive moved {moved:?} dead letters, not {n}");
        }
        amqp.until_holds("orders", n, Duration::from_secs(60))?;
        self.say(format!("  {:.3} s", sample.secs));
        Ok(sample)
    }

    /// Measured: the shovel of "Move messages", orders back to orders.dlq, until all are there.
    fn shovel_back(&self, i: usize, n: usize, vhost: &str, amqp: &Amqp) -> Result<Sample> {
        // Exactly what the management UI's "Move messages" form on a queue's page submits.
        let name = format!("move-{i}");
        let body = serde_json::json!({
            "component": "shovel", "vhost": vhost, "name": name,
            "value": {
                "src-uri": format!("amqp:///{vhost}"), "src-queue": "orders", "src-protocol": "amqp091",
                "src-prefetch-count": 1000, "src-delete-after": "queue-length",
                "dest-protocol": "amqp091", "dest-uri": format!("amqp:///{vhost}"),
                "dest-add-forward-headers": false, "ack-mode": "on-confirm", "dest-queue": "orders.dlq",
            },
        });
        self.say(format!("shovel (Move messages): {n} messages orders -> orders.dlq"));
        let parameter = format!("/parameters/shovel/{vhost}/{name}");
        let start = Instant::now();
        self.http.ok("PUT", &parameter, Some(&body.to_string()))?;
        let done = amqp.until_holds("orders.dlq", n, Duration::from_secs(1800))?;
        let secs = (done - start).as_secs_f64();
        self.say(format!("  {secs:.3} s"));
        // It deletes itself once it has moved the length the queue had (not timed).
        for _ in 0..600 {
            if let Ok((404, _)) = self.http.call("GET", &parameter, None) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(Sample { secs, peak_mb: None, cpu: None })
    }

    /// Not measured: `n` messages in orders and none elsewhere, and no consumer left.
    fn before_migrates(&self, n: usize, vhost: &str, amqp: &Amqp) -> Result<()> {
        self.http.ok("DELETE", &format!("/queues/{vhost}/orders.dlq/contents"), None)?;
        self.http.ok("DELETE", &format!("/queues/{vhost}/orders/contents"), None)?;
        amqp.until_holds("orders", 0, Duration::from_secs(60))?;
        amqp.fill("orders", n, self.options.move_bytes)?;
        // apply refuses a queue with consumers, which it reads from the management API: that
        // shows the last shovel's (and redrive's) consumer for a few seconds after it has gone
        // (statistics are sampled every 5 s). Wait for a sample taken since, then until it shows
        // none on any queue of the vhost (not timed).
        std::thread::sleep(Duration::from_secs(6));
        for _ in 0..300 {
            let queues = self.http.get_json(&format!("/queues/{vhost}?columns=consumers"))?;
            let consumers: u64 = queues.as_array().into_iter().flatten().filter_map(|q| q["consumers"].as_u64()).sum();
            if consumers == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// Measured: the mover of apply --migrate, the main queue's messages out to a holding queue
    /// and back, its queue type switched each time (each run moves 2n messages and declares
    /// queues).
    fn migrates(&self, n: usize, spec_arg: &str, vhost: &str, amqp: &Amqp, result: &mut MoveResult) -> Result<()> {
        let mut queue_type = self.options.queue_type.as_str();
        for _ in 0..self.options.repeats {
            queue_type = if queue_type == "classic" { "quorum" } else { "classic" };
            self.write_move_spec(vhost, queue_type)?;
            self.say(format!("apply --migrate: orders to {queue_type} with {n} messages"));
            let sample = self.hopper_step(&["apply", "--migrate", spec_arg], &[0], None)?;
            amqp.until_holds("orders", n, Duration::from_secs(60)).context("orders after the migration")?;
            result.migrate.samples.push(sample);
            self.say(format!("  {:.3} s", sample.secs));
        }
        Ok(())
    }
}

fn which(program: &str, chroot: &Option<(PathBuf, String)>) -> bool {
    let dirs = ["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"];
    let root = chroot.as_ref().map_or(PathBuf::from("/"), |(r, _)| r.clone());
    dirs.iter().any(|d| root.join(d.trim_start_matches('/')).join(program).exists())
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// `n` topologies, one file each, a realistic mix: 4 attempts, 3 distinct delays (one of four
/// patterns), a topic exchange of its own with two routing keys: 5 queues, 3 exchanges and 7
/// bindings, 15 objects.
pub fn generate(dir: &Path, n: usize, queue_type: &str) -> Result<()> {
    const DOMAINS: [&str; 13] = [
        "orders",
        "payments",
        "invoices",
        "shipments",
        "emails",
        "users",
        "carts",
        "refunds",
        "reviews",
        "stock",
        "billing",
        "search",
        "reports",
    ];
    const EVENTS: [(&str, &str); 5] = [
        ("created", "updated"),
        ("paid", "refunded"),
        ("sent", "bounced"),
        ("opened", "closed"),
        ("requested", "approved"),
    ];
    const DELAYS: [&str; 4] =
        [r#"["5s", "30s", "5m"]"#, r#"["1s", "10s", "1m"]"#, r#"["10s", "1m", "10m"]"#, r#"["2s", "20s", "2m"]"#];
    fs::create_dir_all(dir)?;
    for i in 0..n {
        let d = DOMAINS[i % DOMAINS.len()];
        let name = format!("{d}-{i:05}");
        let (a, b) = EVENTS[(i / DOMAINS.len()) % EVENTS.len()];
        let delays = DELAYS[i % DELAYS.len()];
        let mut f = fs::File::create(dir.join(format!("{name}.toml")))?;
        write!(
            f,
            "# generated by the benchmark (examples/bench.rs)\n[topology.{name}]\nexchange = \"{name}.events\"\nexchange_type = \"topic\"\nrouting_keys = [\"{d}.{a}\", \"{d}.{b}\"]\ndelays = {delays}\nmax_attempts = 4\nqueue_type = \"{queue_type}\"\nidempotency_key = \"message_id\"\n"
        )?;
    }
    Ok(())
}

/// The version the broker reports, which must be the one named.
fn version(http: &Http, broker: &Broker) -> Result<String> {
    let overview = http.get_json("/overview").with_context(|| format!("the broker's API at {}", broker.management))?;
    let version = overview["rabbitmq_version"].as_str().unwrap_or("?").to_string();
    if !version.starts_with(&format!("{}.", broker.name)) && broker.name.contains('.') {
        bail!("the broker at {} is RabbitMQ {version}, expected {}.x", broker.management, broker.name);
    }
    Ok(version)
}

/// The prefix of a run's vhosts: whose they are (`hb<pid>`) and when, so runs never collide.
fn tag() -> String {
    format!(
        "hb{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() % 1_000_000)
    )
}

/// Measures every size on one broker.
pub fn run(broker: &Broker, options: &Options) -> Result<Report> {
    let http = Http::new(broker);
    let version = version(&http, broker)?;
    let dir = std::env::temp_dir().join(format!("hopper-bench-{}-{}", std::process::id(), broker.name));
    fs::create_dir_all(&dir)?;
    // Debian's rabbitmqctl runs as the rabbitmq user and must read the definitions.
    set_mode(&dir, 0o755)?;
    let run = Run { broker, options, http: &http, dir: dir.clone() };
    let tag = tag();
    // A size that fails ends the run, and is reported after the sizes that were measured.
    let mut sizes = vec![];
    let mut failure = None;
    for &n in &options.sizes {
        match run.measure_size(n, &tag) {
            Ok(result) => sizes.push(result),
            Err(e) => {
                failure = Some(format!(
                    "{} topologies: not measured: {}",
                    page::thousands(n),
                    format!("{e:#}").lines().next().unwrap_or("")
                ));
                break;
            }
        }
    }
    let _ = fs::remove_dir_all(&dir);
    if sizes.is_empty() {
        bail!("{}", failure.unwrap_or_default());
    }
    Ok(Report {
        broker: broker.name.clone(),
        version,
        queue_type: options.queue_type.clone(),
        repeats: options.repeats,
        fresh: options.fresh,
        sizes,
        failure,
        machine: Machine::now(),
        commit: String::new(),
        date: String::new(),
    })
}

/// `--move messages` on one broker.
pub fn run_move(broker: &Broker, options: &Options, messages: usize) -> Result<MoveResult> {
    let http = Http::new(broker);
    let version = version(&http, broker)?;
    let dir = std::env::temp_dir().join(format!("hopper-bench-{}-{}-move", std::process::id(), broker.name));
    fs::create_dir_all(&dir)?;
    let run = Run { broker, options, http: &http, dir: dir.clone() };
    let result = run.measure_move(messages, &tag());
    let _ = fs::remove_dir_all(&dir);
    Ok(MoveResult { broker: broker.name.clone(), version, machine: Machine::now(), ..result? })
}

/// The machine a run measured on, as the page states it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    /// The load average (1, 5 and 15 minutes) at the end of the run: others' work on the
    /// same cores is the noise in its figures.
    pub load: String,
}

impl Machine {
    pub fn now() -> Machine {
        let read = |path: &str| fs::read_to_string(path).unwrap_or_default();
        let field = |text: &str, key: &str| {
            text.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string())
        };
        let meminfo = read("/proc/meminfo");
        let kb = field(&meminfo, "MemTotal").and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok());
        let load = read("/proc/loadavg");
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: field(&read("/proc/cpuinfo"), "model name").unwrap_or_default(),
            memory_gib: kb.map_or(0.0, |kb| (kb / 1048576.0 * 10.0).round() / 10.0),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            load: load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        }
    }
}

/// `--offline N`: each offline command of one spec file of N topologies, no broker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Offline {
    pub topologies: usize,
    /// (the command, without the spec's path; its wall time and peak memory)
    pub commands: Vec<(String, Sample)>,
    pub machine: Machine,
    pub commit: String,
    pub date: String,
}

/// No broker: one spec file of `n` topologies (the same shape, classic queues), each offline
/// command's wall time and peak memory.
pub fn offline(hopper: &Path, n: usize) -> Result<Offline> {
    let dir = std::env::temp_dir().join(format!("hopper-bench-offline-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let outcome = (|| -> Result<Offline> {
        let spec = dir.join("spec.toml");
        let mut f = std::io::BufWriter::new(fs::File::create(&spec)?);
        f.write_all(b"[defaults]\nqueue_type = \"classic\"\nexchange_type = \"topic\"\ndelays = [\"5s\", \"30s\", \"5m\"]\nmax_attempts = 4\nidempotency_key = \"message_id\"\n\n")?;
        for i in 0..n {
            writeln!(f, "[topology.t{i}]\nrouting_keys = [\"t{i}.created\", \"t{i}.paid\"]\n")?;
        }
        drop(f);
        let spec = spec.to_str().unwrap();
        let mut commands = vec![];
        for args in [&["compile", "--format", "json", spec][..], &["lint", spec], &["export", spec], &["graph", spec]] {
            let (sample, code) = measure(Command::new(hopper).args(args), &dir.join("out"))?;
            let command = args[..args.len() - 1].join(" ");
            if code != 0 {
                bail!("hopper {command} exited {code}");
            }
            commands.push((command, sample));
        }
        Ok(Offline { topologies: n, commands, machine: Machine::now(), commit: String::new(), date: String::new() })
    })();
    let _ = fs::remove_dir_all(&dir);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_round_leaves_only_the_rounds_that_finished() {
        let step = |n: usize| Step { samples: vec![Sample { secs: 1.0, peak_mb: None, cpu: None }; n] };
        let mut result = SizeResult {
            noop: step(3),
            diff: step(2),
            listing: step(3),
            against: vec![Against { build: "b".into(), noop: step(3), diff: step(2) }],
            ..Default::default()
        };
        result.keep_rounds(2);
        let lens = [&result.noop, &result.diff, &result.listing, &result.against[0].noop, &result.against[0].diff]
            .map(|s| s.samples.len());
        assert_eq!(lens, [2; 5]);
        assert!(result.inspect.samples.is_empty(), "a read with fewer samples keeps them");
    }
}

#[cfg(test)]
mod merge_tests {
    use super::*;

    fn report(broker: &str, sizes: &[usize], commit: &str) -> Report {
        Report {
            broker: broker.into(),
            version: String::new(),
            queue_type: "classic".into(),
            repeats: 3,
            fresh: 1,
            sizes: sizes.iter().map(|n| SizeResult { topologies: *n, ..Default::default() }).collect(),
            failure: None,
            machine: Machine::default(),
            commit: commit.into(),
            date: String::new(),
        }
    }

    #[test]
    fn a_run_of_some_sizes_replaces_those_and_keeps_the_others() {
        let mut data = page::Data {
            curves: vec![report("4.3", &[500, 2000], "old"), report("4.0", &[500], "old")],
            ..Default::default()
        };
        data.merge(page::Data { curves: vec![report("4.3", &[10000], "new")], ..Default::default() });
        let runs: Vec<(String, Vec<usize>, String)> = data
            .curves
            .iter()
            .map(|r| (r.broker.clone(), r.sizes.iter().map(|s| s.topologies).collect(), r.commit.clone()))
            .collect();
        assert_eq!(
            runs,
            [
                ("4.0".to_string(), vec![500], "old".to_string()),
                ("4.3".to_string(), vec![500, 2000], "old".to_string()),
                ("4.3".to_string(), vec![10000], "new".to_string())
            ]
        );
        data.merge(page::Data { curves: vec![report("4.3", &[500, 2000, 10000], "newer")], ..Default::default() });
        assert_eq!(data.curves.iter().filter(|r| r.broker == "4.3").count(), 1, "every size replaced");
    }
}
