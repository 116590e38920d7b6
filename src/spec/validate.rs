//! From drafts to topologies: defaults filled in, values checked for meaning, names checked
//! against RabbitMQ's limits and against each other.

use std::collections::BTreeMap;
use std::time::Duration;

use rustc_hash::FxHashMap;

use super::parse::{Draft, Fields, Loc};
use super::{
    DEFAULT_JITTER_BUCKETS, ExchangeType, IdempotencyKey, Jitter, MAX_ATTEMPTS, MAX_JITTER_BUCKETS, MAX_TTL_MS,
    QueueType, Strategy, Topology, Vhosts,
};
use crate::compile::CompiledTopology;
use crate::diagnostic::Diagnostic;
use crate::model::{Owner, QueueName, Role, is_unsafe_char};
use crate::topology::DEFAULT_OWNER;

/// A valid topology, and where each of its names was written (or the name it derives from), so
/// that a collision is reported where the user can fix it.
struct Written {
    topology: Topology,
    explicit_dead_letter_queue: bool,
    explicit_retry_exchange: bool,
    explicit_dead_letter_exchange: bool,
    origin: Loc<String>,
    queue: Loc<String>,
    dead_letter_queue: Loc<String>,
    exchange: Loc<String>,
    exchange_type: Loc<String>,
    retry_exchange: Loc<String>,
    dead_letter_exchange: Loc<String>,
}

/// A written topology once every value is known to be good, with what it compiles to: the name
/// checks and the spec need a compiled topology, and the type says they have one.
struct Placed {
    written: Written,
    compiled: CompiledTopology,
    /// Its queues and what each is for.
    roles: Vec<(QueueName, Role)>,
}

impl Written {
    fn compile(self) -> Placed {
        let compiled = crate::compile::compile_topology(&self.topology);
        Placed { roles: roles(&compiled), compiled, written: self }
    }
}

pub(super) fn validate(
    drafts: Vec<Draft>,
    vhosts: Vhosts<'_>,
    sources: &crate::diagnostic::Sources,
    diags: &mut Vec<Diagnostic>,
) -> Vec<CompiledTopology> {
    let mut placed = Vec::with_capacity(drafts.len());
    let mut origins: BTreeMap<String, Loc<String>> = BTreeMap::new();
    for draft in drafts {
        if let Some(first) = origins.get(&draft.name.value) {
            diags.push(
                draft
                    .name
                    .diag(format!("topology `{}` is defined twice", draft.name.value))
                    .label("second definition")
                    .related(first.file, first.span.clone(), "first defined here")
                    .hint("topology names are unique across all spec files; rename one of them"),
            );
            continue;
        }
        origins.insert(draft.name.value.clone(), draft.name.clone());
        let before = diags.len();
        let complete = draft.fields.invalid.is_empty();
        let p = topology(draft, vhosts, sources, diags);
        // Only a topology whose every value is good can be compiled to check its names.
        if !complete || diags.len() > before {
            continue;
        }
        let p = p.compile();
        check_generated_names(&p, diags);
        if diags.len() == before {
            check_within(&p, diags);
        }
        if diags.len() == before {
            placed.push(p);
        }
    }
    check_collisions(&placed, diags);
    placed.into_iter().map(|p| p.compiled).collect()
}

fn one_of<T: Copy>(
    field: &Option<Loc<String>>,
    default: T,
    choices: &[(&str, T)],
    what: &str,
    diags: &mut Vec<Diagnostic>,
) -> T {
    let Some(loc) = field else { return default };
    if let Some((_, v)) = choices.iter().find(|(name, _)| *name == loc.value) {
        return *v;
    }
    let names: Vec<_> = choices.iter().map(|(n, _)| format!("\"{n}\"")).collect();
    diags.push(
        loc.diag(format!("unknown {what} \"{}\"", loc.value))
            .label(format!("not a valid {what}"))
            .hint(format!("use one of {}", names.join(", "))),
    );
    default
}

fn topology(
    draft: Draft,
    vhosts: Vhosts<'_>,
    sources: &crate::diagnostic::Sources,
    diags: &mut Vec<Diagnostic>,
) -> Written {
    let mut f = draft.fields;
    let name = &draft.name;
    check_name(name, "topology name", diags);

    let exchange_type = match &f.exchange_type {
        Some(loc) if loc.value == "headers" => {
            diags.push(
                loc.diag("headers exchanges are not supported as a main exchange")
                    .label("unsupported")
                    .hint("hopper binds with routing keys; use \"direct\", \"topic\" or \"fanout\""),
            );
            ExchangeType::Direct
        }
        _ => one_of(
            &f.exchange_type,
            ExchangeType::Direct,
            &ExchangeType::ALL.map(|t| (t.as_str(), t)),
            "exchange type",
            diags,
        ),
    };
    let strategy = one_of(&f.strategy, Strategy::Republish, &Strategy::ALL.map(|t| (t.as_str(), t)), "strategy", diags);
    let queue_type =
        one_of(&f.queue_type, QueueType::Quorum, &QueueType::ALL.map(|t| (t.as_str(), t)), "queue type", diags);

    let routing_keys = routing_keys(&f, exchange_type, draft.inherited.routing_keys, name, diags);

    let max_attempts = max_attempts(&mut f, name, diags);
    let hops = max_attempts.saturating_sub(1) as usize;
    let hop_delays = if ["delays", "backoff", "max_attempts"].iter().any(|k| f.invalid.contains(k)) {
        Vec::new() // already reported
    } else {
        hop_delays(name, &f.delays, &f.backoff, hops, draft.inherited.delays, diags)
    };

    // Names the user wrote are checked where they wrote them; names derived from the queue's
    // name only for length, once the queue's own name is known to be good.
    let queue = f.queue.clone().unwrap_or_else(|| name.clone());
    let exchange = f.exchange.clone().unwrap_or_else(|| name.clone());
    check_written_names(&f, diags);
    let derived = |field: &Option<Loc<String>>, suffix: &str| {
        field.clone().unwrap_or_else(|| Loc { value: format!("{}{suffix}", queue.value), ..queue.clone() })
    };
    let retry_exchange = derived(&f.retry_exchange, ".retry");
    let dead_letter_exchange = derived(&f.dead_letter_exchange, ".dlx");
    let dead_letter_queue = derived(&f.dead_letter_queue, ".dlq");

    if strategy == Strategy::Native {
        check_native(&f, queue_type, &hop_delays, diags);
    }
    if strategy == Strategy::Republish && hops > 0 {
        check_not_like_a_hop(&queue, diags);
    }

    let jitter = jitter(&f, strategy, draft.inherited.jitter, name, diags);
    if let (Some(j), Some(loc)) = (jitter, &f.jitter) {
        check_jitter_within_ttl(j, loc, &hop_delays, diags);
    }

    let delivery_limit = delivery_limit(&f, queue_type, strategy, draft.inherited.delivery_limit, name, diags);

    let vhost = vhost(vhosts, &draft.vhost, name, diags);
    let owner = draft.owner.as_ref().and_then(|o| owner_name(o, diags)).unwrap_or_else(|| DEFAULT_OWNER.into());
    let exchange_owner = f.exchange_owner.as_ref().and_then(|o| owner_name(o, diags));
    if let (Some(theirs), Some(loc)) = (&exchange_owner, &f.exchange_owner)
        && *theirs == owner
    {
        diags.push(
            loc.diag(format!("`exchange_owner` names `{owner}`, this file's own owner"))
                .label("not another owner")
                .hint("drop `exchange_owner`: an owner's own exchanges need no leave to bind into"),
        );
    }

    let topology = Topology {
        name: name.value.clone(),
        vhost,
        owner,
        exchange: exchange.value.as_str().into(),
        exchange_owner,
        exchange_type,
        routing_keys,
        hop_delays,
        max_attempts,
        strategy,
        queue_type,
        queue: queue.value.as_str().into(),
        retry_exchange: retry_exchange.value.as_str().into(),
        dead_letter_exchange: dead_letter_exchange.value.as_str().into(),
        dead_letter_queue: dead_letter_queue.value.as_str().into(),
        delivery_limit,
        jitter,
        idempotency_key: f.idempotency_key.as_ref().and_then(|k| idempotency_key(k, diags)),
        file: sources.path(name.file).to_path_buf(),
    };
    Written {
        explicit_dead_letter_queue: f.dead_letter_queue.is_some(),
        explicit_retry_exchange: f.retry_exchange.is_some(),
        explicit_dead_letter_exchange: f.dead_letter_exchange.is_some(),
        topology,
        origin: name.clone(),
        queue,
        dead_letter_queue,
        exchange,
        exchange_type: f.exchange_type.clone().unwrap_or_else(|| name.clone()),
        retry_exchange,
        dead_letter_exchange,
    }
}

/// The names the user wrote, where they wrote them.
fn check_written_names(f: &Fields, diags: &mut Vec<Diagnostic>) {
    let written = [
        (&f.queue, "queue name"),
        (&f.exchange, "exchange name"),
        (&f.retry_exchange, "retry exchange name"),
        (&f.dead_letter_exchange, "dead-letter exchange name"),
        (&f.dead_letter_queue, "dead-letter queue name"),
    ];
    for (field, what) in written {
        if let Some(loc) = field {
            check_name(loc, what, diags);
        }
    }
}

/// The longest hop, spread by its jitter, within the largest TTL RabbitMQ takes.
fn check_jitter_within_ttl(j: Jitter, loc: &Loc<f64>, hop_delays: &[Duration], diags: &mut Vec<Diagnostic>) {
    if let Some(longest) = hop_delays.iter().max()
        && longest.as_millis() as f64 * (1.0 + j.fraction) > MAX_TTL_MS as f64
    {
        diags.push(
            loc.diag(format!(
                "with jitter {} the longest hop ({}) would wait longer than RabbitMQ's largest TTL (10 years)",
                j.fraction,
                super::format_duration(*longest)
            ))
            .label("too long")
            .hint("RabbitMQ refuses an x-message-ttl above 315360000000 ms; lower the jitter or the delay"),
        );
    }
}

/// The keys binding the main queue: the spec's, its name's, or the one empty key of a fanout.
fn routing_keys(
    f: &Fields,
    exchange_type: ExchangeType,
    inherited: bool,
    name: &Loc<String>,
    diags: &mut Vec<Diagnostic>,
) -> Vec<String> {
    match (&f.routing_keys, exchange_type) {
        // An explicit empty list is how a fanout topology overrides keys from [defaults].
        (Some(keys), ExchangeType::Fanout) if keys.value.is_empty() => vec![String::new()],
        (Some(keys), ExchangeType::Fanout) if inherited => {
            diags.push(
                name.diag(format!(
                    "topology `{}` has a fanout exchange, but inherits routing_keys from [defaults]",
                    name.value
                ))
                .label("fanout topology")
                .related(keys.file, keys.span.clone(), "inherited from here")
                .hint("a fanout exchange takes no routing keys: set routing_keys = [] in this topology"),
            );
            vec![String::new()]
        }
        (Some(keys), ExchangeType::Fanout) => {
            diags.push(
                keys.diag("a fanout exchange ignores routing keys")
                    .label("would have no effect")
                    .hint("remove `routing_keys`, or use exchange_type = \"direct\" or \"topic\""),
            );
            vec![String::new()]
        }
        (None, ExchangeType::Fanout) => vec![String::new()],
        (Some(keys), _) if keys.value.is_empty() => {
            diags.push(
                keys.diag("`routing_keys` is empty: the main queue would receive nothing")
                    .label("no routing key")
                    .hint(format!("list the keys producers use, for example routing_keys = [\"{}\"]", name.value)),
            );
            Vec::new()
        }
        (Some(keys), _) => {
            for key in &keys.value {
                if let Some(c) = key.value.chars().find(|c| is_unsafe_char(*c)) {
                    diags.push(
                        key.diag(format!("a routing key contains the {} U+{:04X}", char_kind(c), c as u32))
                            .label("control character")
                            .hint("routing keys are printed in terminals and logs; use printable characters"),
                    );
                }
                if key.value.len() > 255 {
                    diags.push(
                        key.diag(format!("a routing key is {} bytes long; RabbitMQ allows 255", key.value.len()))
                            .label("too long")
                            .hint("routing keys are AMQP short strings; use a shorter key or a topic pattern"),
                    );
                }
            }
            keys.value.iter().map(|k| k.value.clone()).collect()
        }
        (None, _) => vec![name.value.clone()],
    }
}

/// Deliveries in total: the spec's, else one more than the delays; 1 where it was wrong (and
/// marked invalid, so that the delays are not checked against it).
fn max_attempts(f: &mut Fields, name: &Loc<String>, diags: &mut Vec<Diagnostic>) -> u32 {
    match &f.max_attempts {
        Some(m) if m.value < 1 => {
            diags.push(
                m.diag(format!("`max_attempts` must be at least 1, not {}", m.value))
                    .label("too small")
                    .hint("max_attempts counts deliveries in total: 1 means no retry"),
            );
            f.invalid.insert("max_attempts");
            1
        }
        Some(m) if m.value > MAX_ATTEMPTS => {
            diags.push(
                m.diag(format!("`max_attempts` = {} is more than hopper allows ({MAX_ATTEMPTS})", m.value))
                    .label("too large")
                    .hint("each retry is a hop through a wait queue; use backoff with a `max` for long retry windows"),
            );
            f.invalid.insert("max_attempts");
            1
        }
        Some(m) => m.value as u32,
        None => match &f.delays {
            // Without max_attempts, every delay is one hop.
            Some(d) if f.backoff.is_none() => d.value.len() as u32 + 1,
            // Already reported: the value that would have given the count was wrong.
            _ if ["max_attempts", "delays", "backoff"].iter().any(|k| f.invalid.contains(k)) => 1,
            _ => {
                diags.push(
                    name.diag(format!("topology `{}` has no `max_attempts`", name.value))
                        .label("max_attempts missing")
                        .hint("set the number of deliveries in total, for example max_attempts = 4"),
                );
                1
            }
        },
    }
}

/// A wait queue returns a message through the retry exchange with the main queue's name as
/// routing key, and hops are routed by their number (`<hop>.<bucket>` with jitter): a main
/// queue named like one would also receive, at once, every retry of that hop.
fn check_not_like_a_hop(queue: &Loc<String>, diags: &mut Vec<Diagnostic>) {
    let number = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let like_a_hop = match queue.value.split_once('.') {
        None => number(&queue.value),
        Some((hop, bucket)) => number(hop) && number(bucket),
    };
    if like_a_hop {
        diags.push(
            queue
                .diag(format!("the main queue is named `{}`, like a hop number", queue.value))
                .label("a number")
                .hint("the retry exchange routes hop numbers to wait queues and the main queue's name back to it: a queue named like a number would also receive that hop's retries at once; choose another name"),
        );
    }
}

/// The spec's `x-delivery-limit`, where the queue type has one.
fn delivery_limit(
    f: &Fields,
    queue_type: QueueType,
    strategy: Strategy,
    inherited: bool,
    name: &Loc<String>,
    diags: &mut Vec<Diagnostic>,
) -> Option<i64> {
    match (queue_type, &f.delivery_limit) {
        // Reported by check_native: the native limit counts retries.
        (_, Some(_)) if strategy == Strategy::Native => None,
        (QueueType::Classic, Some(limit)) if inherited => {
            diags.push(
                name.diag(format!(
                    "topology `{}` uses classic queues, but inherits delivery_limit from [defaults]",
                    name.value
                ))
                .label("classic topology")
                .related(limit.file, limit.span.clone(), "inherited from here")
                .hint("classic queues have no delivery limit: move delivery_limit from [defaults] into the quorum topologies, or set queue_type = \"quorum\" in this one"),
            );
            None
        }
        (QueueType::Classic, Some(limit)) => {
            diags.push(
                limit
                    .diag("`delivery_limit` applies only to quorum queues")
                    .label("classic queues have no delivery limit")
                    .hint("remove it, or use queue_type = \"quorum\""),
            );
            None
        }
        (QueueType::Classic, None) => None,
        (QueueType::Quorum, Some(limit)) if limit.value < 1 => {
            diags.push(
                limit
                    .diag(format!("`delivery_limit` must be at least 1, not {}", limit.value))
                    .label("too small")
                    .hint("it counts redeliveries after a crash or requeue; hopper needs a finite limit so a poison message ends in the dead-letter queue"),
            );
            None
        }
        (QueueType::Quorum, limit) => limit.as_ref().map(|l| l.value),
    }
}

/// The topology's vhost by the run's rule (`Vhosts`); empty where it is refused.
fn vhost(vhosts: Vhosts<'_>, vhost: &Option<Loc<String>>, name: &Loc<String>, diags: &mut Vec<Diagnostic>) -> String {
    match (vhosts, vhost) {
        (Vhosts::Override(v), _) => v.to_string(),
        (Vhosts::OfTheUrl(url), Some(v)) if v.value != url => {
            diags.push(
                v.diag(format!("topology `{}` is in vhost `{}`, but the AMQP URL names vhost `{url}`", name.value, v.value))
                    .label("not the AMQP URL's vhost")
                    .hint("hopper will not guess which one is meant: drop `vhost` here to use the URL's, or give a URL without a vhost, or with this one"),
            );
            String::new()
        }
        (_, Some(v)) if v.value.is_empty() => {
            diags.push(v.diag("`vhost` is empty").label("empty").hint("the default virtual host is vhost = \"/\""));
            String::new()
        }
        (_, Some(v)) if is_dot_segment(&v.value) => {
            diags.push(
                v.diag(vhost_problem(&v.value).unwrap_or_default())
                    .label("a dot segment")
                    .hint("as a URL path segment it names this or the parent directory; use another vhost"),
            );
            String::new()
        }
        (_, Some(v)) if v.value.len() > 255 || v.value.chars().any(is_unsafe_char) => {
            diags.push(
                v.diag(vhost_problem(&v.value).unwrap_or_default())
                    .label("not a usable vhost name")
                    .hint("a vhost name is an AMQP short string: at most 255 bytes, printable characters"),
            );
            String::new()
        }
        (_, Some(v)) => v.value.clone(),
        (Vhosts::OfTheUrl(url), None) => url.to_string(),
        (Vhosts::AsWritten, None) => "/".to_string(),
    }
}

fn hop_delays(
    name: &Loc<String>,
    delays: &Option<Loc<Vec<Loc<Duration>>>>,
    backoff: &Option<Loc<super::parse::Backoff>>,
    hops: usize,
    inherited: bool,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Duration> {
    match (delays, backoff) {
        (Some(_), Some(b)) => {
            diags.push(
                b.diag("`delays` and `backoff` are both set")
                    .label("second way to set the delays")
                    .hint("keep one: `delays` lists each wait, `backoff` computes them"),
            );
            Vec::new()
        }
        (None, None) if hops > 0 => {
            diags.push(
                name.diag(format!("topology `{}` retries {hops} time(s) but sets no delays", name.value))
                    .label("no delays")
                    .hint("add delays = [\"5s\", \"30s\"] or backoff = { initial = \"1s\", multiplier = 2.0 }, or set max_attempts = 1 for no retry"),
            );
            Vec::new()
        }
        (None, None) => Vec::new(),
        (Some(d), None) => {
            if hops > 0 && d.value.is_empty() {
                diags.push(
                    d.diag("`delays` is empty but the topology retries")
                        .label("no delay")
                        .hint("list at least one delay, for example delays = [\"30s\"]"),
                );
                return Vec::new();
            }
            if !inherited && hops == 0 && !d.value.is_empty() {
                diags.push(
                    d.diag("delays are set but max_attempts = 1 means no retry")
                        .label("never used")
                        .hint(format!("remove `delays`, or set max_attempts = {} to retry", d.value.len() + 1)),
                );
            }
            if !inherited && hops > 0 && d.value.len() > hops {
                diags.push(
                    d.diag(format!("{} delays given but max_attempts allows only {hops} retry hop(s)", d.value.len()))
                        .label("some delays would never be used")
                        .hint(format!("remove the extra delays, or raise max_attempts to {}", d.value.len() + 1)),
                );
            }
            // When delays is shorter than the hops, its last value repeats.
            (0..hops).filter_map(|h| d.value.get(h).or(d.value.last()).map(|l| l.value)).collect()
        }
        (None, Some(b)) => {
            let Some(initial) = &b.value.initial else {
                diags.push(
                    b.diag("`backoff` has no `initial` delay")
                        .label("initial missing")
                        .hint("for example: backoff = { initial = \"1s\", multiplier = 2.0, max = \"1m\" }"),
                );
                return Vec::new();
            };
            let linear = match &b.value.shape {
                None => false,
                Some(shape) if shape.value == "exponential" => false,
                Some(shape) if shape.value == "linear" => true,
                Some(shape) => {
                    let other = &shape.value;
                    diags.push(
                        shape
                            .diag(format!("unknown backoff shape \"{other}\""))
                            .label("not a valid shape")
                            .hint("use \"exponential\" (initial × multiplier^n) or \"linear\" (initial × n)"),
                    );
                    return Vec::new();
                }
            };
            if linear && let Some(m) = &b.value.multiplier {
                diags.push(
                    m.diag("a linear backoff has no multiplier")
                        .label("not used by shape = \"linear\"")
                        .hint("a linear backoff waits initial × n, capped at max: remove `multiplier`"),
                );
                return Vec::new();
            }
            let multiplier = b.value.multiplier.as_ref().map_or(2.0, |m| m.value);
            if let Some(m) = &b.value.multiplier
                && m.value < 1.0
            {
                diags.push(
                    m.diag(format!("`multiplier` must be at least 1.0, not {}", m.value))
                        .label("delays would shrink")
                        .hint("use 1.0 for a fixed delay, 2.0 to double each time"),
                );
                return Vec::new();
            }
            let cap = b.value.max.as_ref().map_or(MAX_TTL_MS as f64, |m| m.value.as_millis() as f64);
            if let Some(max) = &b.value.max
                && max.value < initial.value
            {
                diags.push(
                    max.diag("`max` is shorter than `initial`")
                        .label("below initial")
                        .hint("`max` caps the growing delay; it must be at least `initial`"),
                );
                return Vec::new();
            }
            let first = initial.value.as_millis() as f64;
            (0..hops)
                .map(|h| {
                    let grown = if linear { first * (h + 1) as f64 } else { first * multiplier.powi(h as i32) };
                    Duration::from_millis(grown.min(cap).round() as u64)
                })
                .collect()
        }
    }
}

/// Native delayed retry (RabbitMQ 4.3) is a quorum queue's: it redelivers a message failed n
/// times after min × n, capped at max, and dead-letters it past its delivery limit. A spec it
/// cannot express is refused with the nearest one it can.
fn check_native(f: &super::parse::Fields, queue_type: QueueType, hop_delays: &[Duration], diags: &mut Vec<Diagnostic>) {
    if queue_type == QueueType::Classic
        && let Some(loc) = &f.queue_type
    {
        diags.push(
            loc.diag("strategy \"native\" needs quorum queues")
                .label("classic queues cannot delay a retry")
                .hint("native delayed retry is a quorum queue feature (RabbitMQ 4.3): use queue_type = \"quorum\", or strategy = \"republish\" for classic queues"),
        );
    }
    if let Some(limit) = &f.delivery_limit {
        diags.push(
            limit.diag("with strategy \"native\" the delivery limit is set by max_attempts").label("not used").hint(
                "the broker dead-letters a message once it has failed max_attempts times: remove `delivery_limit`",
            ),
        );
    }
    let (Some(first), Some(max)) = (hop_delays.first(), hop_delays.iter().max()) else { return };
    let linear = hop_delays.iter().enumerate().all(|(k, d)| *d == (*first * (k as u32 + 1)).min(*max));
    if linear {
        return;
    }
    let at =
        f.backoff.as_ref().map(|b| (b.file, b.span.clone())).or(f.delays.as_ref().map(|d| (d.file, d.span.clone())));
    let Some((file, span)) = at else { return };
    let delays: Vec<String> = hop_delays.iter().map(|d| super::format_duration(*d)).collect();
    diags.push(
        Diagnostic::new(file, span, format!("RabbitMQ's native retry cannot wait {}", delays.join(", ")))
            .label("not a linear schedule")
            .hint(format!(
                "native retry waits initial × n, capped at max; the nearest: backoff = {{ initial = \"{}\", max = \"{}\", shape = \"linear\" }}",
                super::format_duration(*first),
                super::format_duration(*max)
            )),
    );
}

/// `jitter` and `jitter_buckets`, checked: a fraction in [0, 1] (0: none, so that a default can
/// be overridden), republish only, since only a consumer can pick a wait queue at random.
fn jitter(
    f: &super::parse::Fields,
    strategy: Strategy,
    inherited: bool,
    name: &Loc<String>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Jitter> {
    let buckets = match &f.jitter_buckets {
        None => DEFAULT_JITTER_BUCKETS,
        Some(b) if (2..=i64::from(MAX_JITTER_BUCKETS)).contains(&b.value) => b.value as u32,
        Some(b) => {
            diags.push(
                b.diag(format!("`jitter_buckets` = {} is outside 2..={MAX_JITTER_BUCKETS}", b.value))
                    .label("out of range")
                    .hint(format!(
                        "each bucket is a wait queue per hop; {DEFAULT_JITTER_BUCKETS} spreads a burst in {DEFAULT_JITTER_BUCKETS} waves"
                    )),
            );
            DEFAULT_JITTER_BUCKETS
        }
    };
    let Some(j) = &f.jitter else {
        if let Some(b) = &f.jitter_buckets {
            diags.push(
                b.diag("`jitter_buckets` without `jitter`")
                    .label("nothing to spread")
                    .hint("set the spread too, for example jitter = 0.3, or remove jitter_buckets"),
            );
        }
        return None;
    };
    if !(0.0..=1.0).contains(&j.value) {
        diags.push(
            j.diag(format!("`jitter` = {} is outside 0..=1", j.value))
                .label("out of range")
                .hint("a fraction of each hop's delay: jitter = 0.3 spreads a 10s hop over 10s to 13s; 0 turns it off"),
        );
        return None;
    }
    if j.value == 0.0 {
        return None;
    }
    let refusal = match strategy {
        Strategy::Republish => None,
        Strategy::Chain => Some((
            "strategy \"chain\" cannot spread its retries",
            "in chain the broker dead-letters a failed message to one wait queue per hop and cannot pick one at random (a consistent-hash exchange would spread by message, not at random, and needs a plugin hopper does not check); use strategy = \"republish\", where the consumer picks a wait queue at random, or jitter = 0",
        )),
        Strategy::Native => Some((
            "strategy \"native\" cannot spread its retries",
            "RabbitMQ 4.3's delayed retry waits min x n, capped at max, the same for every message; use strategy = \"republish\" for jitter, or jitter = 0",
        )),
    };
    if let Some((message, hint)) = refusal {
        let diag = if inherited {
            name.diag(format!("topology `{}` inherits `jitter` from [defaults], but {message}", name.value))
                .label("jitter inherited")
        } else {
            j.diag(message).label("jitter")
        };
        diags.push(diag.hint(hint));
        return None;
    }
    Some(Jitter { fraction: j.value, buckets })
}

/// `idempotency_key`: the message id, or a header that no one but the producer writes. A header
/// the broker or hopper sets changes between deliveries (`x-delivery-count`, `x-death`,
/// `hopper-attempt`), so a consumer deduplicating on it would take every retry for a new message.
fn idempotency_key(draft: &super::parse::KeyDraft, diags: &mut Vec<Diagnostic>) -> Option<IdempotencyKey> {
    use super::parse::KeyDraft;
    let header = match draft {
        KeyDraft::Named(name) if name.value == "message_id" => return Some(IdempotencyKey::MessageId),
        KeyDraft::Named(name) => {
            diags.push(
                name.diag(format!("unknown idempotency key \"{}\"", name.value))
                    .label("not a key hopper knows")
                    .hint(r#"use idempotency_key = "message_id" (the AMQP message-id property producers set), or idempotency_key = { header = "order-id" } for an application header"#),
            );
            return None;
        }
        KeyDraft::Header(header) => header,
    };
    let lower = header.value.to_ascii_lowercase();
    let problem = if header.value.is_empty() {
        Some(("the idempotency header is empty".to_string(), "name the header producers set".to_string()))
    } else if header.value.len() > 255 {
        Some((
            format!("the idempotency header is {} bytes long; AMQP allows 255", header.value.len()),
            "a header name is an AMQP short string; use a shorter name".to_string(),
        ))
    } else if let Some(c) = header.value.chars().find(|c| is_unsafe_char(*c)) {
        Some((
            format!("the idempotency header contains the {} U+{:04X}", char_kind(c), c as u32),
            "use printable characters".to_string(),
        ))
    } else if lower.starts_with("x-") {
        Some((
            format!("`{}` is a header RabbitMQ owns", header.value),
            "RabbitMQ sets x- headers itself and changes some on every delivery (x-death, x-delivery-count): name a header only the producer sets".to_string(),
        ))
    } else if lower.starts_with("hopper-") {
        Some((
            format!("`{}` is a header hopper owns", header.value),
            "hopper's headers change between deliveries (hopper-attempt counts attempts): name a header only the producer sets".to_string(),
        ))
    } else {
        None
    };
    match problem {
        Some((message, hint)) => {
            diags.push(header.diag(message).label("not a stable key").hint(hint));
            None
        }
        None => Some(IdempotencyKey::Header { header: header.value.clone() }),
    }
}

/// How a diagnostic names an unsafe character.
fn char_kind(c: char) -> &'static str {
    if c.is_control() { "control character" } else { "format character" }
}

/// An owner's name: it is part of the name of the global parameter that records what the owner
/// made (`hopper-owner:OWNER:VHOST`), so a short word that cannot be mistaken for a separator.
fn owner_name(o: &Loc<String>, diags: &mut Vec<Diagnostic>) -> Option<Owner> {
    let fits = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if !o.value.is_empty() && o.value.len() <= 64 && o.value.chars().all(fits) {
        return Some(Owner::new(o.value.as_str()));
    }
    diags.push(
        o.diag(format!("the owner name {:?} is not a short word", o.value))
            .label("not an owner name")
            .hint("an owner is 1 to 64 letters, digits, `-`, `_` or `.`, such as owner = \"payments\""),
    );
    None
}

/// What is wrong with a vhost name RabbitMQ or a terminal cannot take, if anything.
pub fn vhost_problem(vhost: &str) -> Option<String> {
    if vhost.is_empty() {
        Some("the vhost name is empty".into())
    } else if vhost.len() > 255 {
        Some(format!("the vhost name is {} bytes long; AMQP allows 255", vhost.len()))
    } else if is_dot_segment(vhost) {
        Some(format!(
            "the vhost name `{vhost}` cannot be addressed through the management API: as a URL path segment it means this or the parent directory (RabbitMQ answers 301, and an HTTP client reads another listing); rename the vhost"
        ))
    } else {
        vhost
            .chars()
            .find(|c| is_unsafe_char(*c))
            .map(|c| format!("the vhost name contains the {} U+{:04X}", char_kind(c), c as u32))
    }
}

/// `.` and `..`: a URL path segment of these names the directory or its parent, so the
/// management API's `/api/queues/{vhost}/{name}` would be another resource (measured on 3.10.8:
/// `/api/queues/.` listed every vhost's queues, and `%2E%2E` is answered with a 301).
fn is_dot_segment(name: &str) -> bool {
    name == "." || name == ".."
}

fn check_name(name: &Loc<String>, what: &str, diags: &mut Vec<Diagnostic>) {
    if name.value.is_empty() {
        diags.push(name.diag(format!("the {what} is empty")).label("empty name").hint("give it a name"));
    } else if is_dot_segment(&name.value) {
        diags.push(
            name.diag(format!("the {what} `{}` cannot be addressed through the management API", name.value))
                .label("a dot segment")
                .hint("as a URL path segment it names this or the parent directory; choose another name"),
        );
    } else if name.value.len() > 255 {
        diags.push(
            name.diag(format!("the {what} is {} bytes long; RabbitMQ allows 255", name.value.len()))
                .label("too long")
                .hint("names are AMQP short strings; choose a shorter name"),
        );
    } else if let Some(c) = name.value.chars().find(|c| is_unsafe_char(*c)) {
        diags.push(
            name.diag(format!("the {what} contains the {} U+{:04X}", char_kind(c), c as u32))
                .label("control character")
                .hint("names are printed in terminals and logs, where a control character can rewrite what is shown; use printable characters"),
        );
    } else if name.value.starts_with("amq.") {
        diags.push(
            name.diag(format!("the {what} `{}` starts with `amq.`", name.value))
                .label("reserved prefix")
                .hint("RabbitMQ reserves names starting with `amq.` for itself; choose another name"),
        );
    }
}

/// Generated names must fit too: an AMQP short string, 255 bytes. Reported once, at the name
/// they derive from. (A quorum queue's name plus its vhost may exceed 255 bytes: measured on
/// RabbitMQ 3.10, 4.0 and 4.3, such queues declare and work.)
fn check_generated_names(p: &Placed, diags: &mut Vec<Diagnostic>) {
    let t = &p.written.topology;
    let mut generated: Vec<String> = p.roles.iter().map(|(q, _)| q.to_string()).collect();
    if !p.written.explicit_retry_exchange {
        generated.push(t.retry_exchange.to_string());
    }
    if !p.written.explicit_dead_letter_exchange {
        generated.push(t.dead_letter_exchange.to_string());
    }
    let explicit_dlq = p.written.explicit_dead_letter_queue.then_some(t.dead_letter_queue.as_str());
    for name in generated {
        if name.len() > 255 && Some(name.as_str()) != explicit_dlq {
            diags.push(
                p.written
                    .queue
                    .diag(format!("the generated name `{name}` is {} bytes; RabbitMQ allows 255", name.len()))
                    .label("base of the generated name")
                    .hint("shorten the queue name: every name hopper derives from it must fit in 255 bytes"),
            );
            return;
        }
    }
}

/// Every queue a topology declares, with what each one is for, as the compiler makes them (the
/// names are derived in one place only): work queues by attempt, then wait queues, then the
/// dead-letter queue.
fn roles(compiled: &CompiledTopology) -> Vec<(QueueName, Role)> {
    let mut all: Vec<(QueueName, Role)> = compiled.queues().map(|q| (q.name.clone(), q.role.clone())).collect();
    all.sort_by_key(|(_, role)| match role {
        Role::Work { attempt } => (0, attempt.unwrap_or(1)),
        Role::Wait { hops, .. } => (1, hops.first().copied().unwrap_or(0)),
        Role::DeadLetter => (2, 0),
    });
    all
}

/// A queue or exchange of one topology must not play two parts: a dead-letter queue that is also
/// the main queue would send exhausted messages back into the retry path.
fn check_within(p: &Placed, diags: &mut Vec<Diagnostic>) {
    let t = &p.written.topology;
    let queues = &p.roles;
    if let Some((_, role)) = queues.iter().find(|(q, r)| *q == t.dead_letter_queue && *r != Role::DeadLetter) {
        diags.push(
            p.written
                .dead_letter_queue
                .diag(format!("the dead-letter queue `{}` is also the {}", t.dead_letter_queue, role.describe()))
                .label("dead letters would go back into the retry path")
                .hint(format!("give the dead-letter queue its own name, such as \"{}.dlq\"", t.queue)),
        );
        return;
    }
    let mut exchanges = vec![
        (&t.exchange, "main", &p.written.exchange),
        (&t.dead_letter_exchange, "dead-letter", &p.written.dead_letter_exchange),
    ];
    if t.uses_retry_exchange() {
        exchanges.push((&t.retry_exchange, "retry", &p.written.retry_exchange));
    }
    for (i, (a, role_a, _)) in exchanges.iter().enumerate() {
        if let Some((_, role_b, loc)) = exchanges[i + 1..].iter().find(|(b, _, _)| b == a) {
            diags.push(
                loc.diag(format!("exchange `{a}` would be both the {role_a} and the {role_b} exchange"))
                    .label("one exchange, two parts")
                    .hint("each part needs its own exchange: a main exchange's bindings would route retries and dead letters to its other queues"),
            );
            return;
        }
    }
}

/// Two topologies in one vhost must not declare the same queue, and an exchange may be shared
/// only as a main exchange of the same type. One diagnostic per pair of topologies.
fn check_collisions(placed: &[Placed], diags: &mut Vec<Diagnostic>) {
    // Looked up, never walked, so hashed: with every vhost the same, ordered keys compared the
    // vhost's name again at each step, 7% of a 500-topology diff's instructions (callgrind).
    let mut queues: FxHashMap<(&str, &QueueName), usize> = FxHashMap::default();
    let mut exchanges: FxHashMap<(&str, &crate::model::ExchangeName), (usize, &'static str)> = FxHashMap::default();
    let mut reported = std::collections::BTreeSet::new();
    for (i, p) in placed.iter().enumerate() {
        let t = &p.written.topology;
        // Every queue this topology shares with an earlier one, reported once per pair.
        let mut shared: BTreeMap<usize, (Vec<String>, &Loc<String>, String)> = BTreeMap::new();
        for (q, role) in &p.roles {
            match queues.get(&(t.vhost.as_str(), q)) {
                Some(&other) if other != i => {
                    let here = if *role == Role::DeadLetter { &p.written.dead_letter_queue } else { &p.written.queue };
                    shared.entry(other).or_insert_with(|| (Vec::new(), here, role.describe())).0.push(format!("`{q}`"));
                }
                Some(_) => {}
                None => {
                    queues.insert((t.vhost.as_str(), q), i);
                }
            }
        }
        for (other, (names, here, role)) in shared {
            reported.insert((other, i));
            let o = &placed[other];
            let what = match names.len() {
                1 => format!("queue {} in vhost `{}` is declared by two topologies", names[0], t.vhost),
                _ => format!("queues {} in vhost `{}` are declared by two topologies", names.join(", "), t.vhost),
            };
            diags.push(
                here.diag(what)
                    .label(format!("`{}` declares {} as its {role}", t.name, names[0]))
                    .related(
                        o.written.origin.file,
                        o.written.origin.span.clone(),
                        format!("`{}` declares it too", o.written.origin.value),
                    )
                    .hint("set `queue` (or `dead_letter_queue`) so that each topology has its own queues"),
            );
        }
        let mut mine = vec![(&t.exchange, "main"), (&t.dead_letter_exchange, "dead-letter")];
        if t.uses_retry_exchange() {
            mine.push((&t.retry_exchange, "retry"));
        }
        for (name, role) in mine {
            let key = (t.vhost.as_str(), name);
            let Some(&(other, other_role)) = exchanges.get(&key) else {
                exchanges.insert(key, (i, role));
                continue;
            };
            let o = &placed[other];
            let same_main = role == "main" && other_role == "main";
            if (same_main && o.written.topology.exchange_type == t.exchange_type) || !reported.insert((other, i)) {
                continue; // a main exchange shared by topologies of one type is fine
            }
            let (here, why) = if same_main {
                (
                    &p.written.exchange_type,
                    format!(
                        "exchange `{name}` is declared as {} here and as {} by `{}`",
                        t.exchange_type.as_str(),
                        o.written.topology.exchange_type.as_str(),
                        o.written.origin.value
                    ),
                )
            } else {
                let here = match role {
                    "main" => &p.written.exchange,
                    "retry" => &p.written.retry_exchange,
                    _ => &p.written.dead_letter_exchange,
                };
                (
                    here,
                    format!(
                        "exchange `{name}` is the {role} exchange here and the {other_role} exchange of `{}`",
                        o.written.origin.value
                    ),
                )
            };
            diags.push(
                here.diag(why)
                    .label(format!("`{}` uses `{name}`", t.name))
                    .related(
                        o.written.origin.file,
                        o.written.origin.span.clone(),
                        format!("`{}` uses it too", o.written.origin.value),
                    )
                    .hint("only main exchanges of the same type may be shared; give the others their own names"),
            );
        }
    }
}
