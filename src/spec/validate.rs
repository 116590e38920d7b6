//! From drafts to topologies: defaults filled in, values checked for meaning, names checked
//! against RabbitMQ's limits and against each other.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use super::parse::{Draft, Loc};
use super::{DEFAULT_DELIVERY_LIMIT, ExchangeType, MAX_ATTEMPTS, MAX_TTL_MS, QueueType, Strategy, Topology};
use crate::diagnostic::{Diagnostic, FileId};

pub(super) fn validate(drafts: Vec<Draft>, vhost_override: Option<&str>, diags: &mut Vec<Diagnostic>) -> Vec<Topology> {
    let mut topologies = Vec::new();
    let mut origins: Vec<Loc<String>> = Vec::new();
    for draft in drafts {
        if let Some(first) = origins.iter().find(|o| o.value == draft.name.value) {
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
        let before = diags.len();
        let origin = draft.name.clone();
        let topology = topology(draft, vhost_override, diags);
        if diags.len() == before {
            origins.push(origin);
            topologies.push((topology, origins.len() - 1));
        } else {
            origins.push(origin);
        }
    }
    check_collisions(&topologies, &origins, diags);
    topologies.into_iter().map(|(t, _)| t).collect()
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
            .label(format!("not a {what}"))
            .hint(format!("use one of {}", names.join(", "))),
    );
    default
}

fn topology(draft: Draft, vhost_override: Option<&str>, diags: &mut Vec<Diagnostic>) -> Topology {
    let f = draft.fields;
    let name = &draft.name;
    check_name(name, "topology name", diags);

    let exchange_type = match f.exchange_type.as_ref().map(|l| l.value.as_str()) {
        Some("headers") => {
            let loc = f.exchange_type.as_ref().expect("matched Some");
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
            &[("direct", ExchangeType::Direct), ("topic", ExchangeType::Topic), ("fanout", ExchangeType::Fanout)],
            "exchange type",
            diags,
        ),
    };
    let strategy = one_of(
        &f.strategy,
        Strategy::Republish,
        &[("republish", Strategy::Republish), ("chain", Strategy::Chain)],
        "strategy",
        diags,
    );
    let queue_type = one_of(
        &f.queue_type,
        QueueType::Quorum,
        &[("quorum", QueueType::Quorum), ("classic", QueueType::Classic)],
        "queue type",
        diags,
    );

    let routing_keys = match (&f.routing_keys, exchange_type) {
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
                if key.value.len() > 255 {
                    diags.push(key.diag("a routing key is longer than 255 bytes").label("too long"));
                }
            }
            keys.value.iter().map(|k| k.value.clone()).collect()
        }
        (None, _) => vec![name.value.clone()],
    };

    let max_attempts = match &f.max_attempts {
        Some(m) if m.value < 1 => {
            diags.push(
                m.diag(format!("`max_attempts` must be at least 1, not {}", m.value))
                    .label("too small")
                    .hint("max_attempts counts deliveries in total: 1 means no retry"),
            );
            1
        }
        Some(m) if m.value > MAX_ATTEMPTS => {
            diags.push(
                m.diag(format!("`max_attempts` = {} is more than hopper allows ({MAX_ATTEMPTS})", m.value))
                    .label("too large")
                    .hint("each retry is a hop through a wait queue; use backoff with a `max` for long retry windows"),
            );
            1
        }
        Some(m) => m.value as u32,
        None => match &f.delays {
            // Without max_attempts, every delay is one hop.
            Some(d) if f.backoff.is_none() => d.value.len() as u32 + 1,
            _ => {
                diags.push(
                    name.diag(format!("topology `{}` has no `max_attempts`", name.value))
                        .label("max_attempts missing")
                        .hint("set the number of deliveries in total, for example max_attempts = 4"),
                );
                1
            }
        },
    };
    let hops = max_attempts.saturating_sub(1) as usize;
    let hop_delays = hop_delays(name, &f.delays, &f.backoff, hops, diags);

    let queue = f.queue.clone().unwrap_or_else(|| name.clone());
    check_name(&queue, "queue name", diags);
    let derived = |field: &Option<Loc<String>>, suffix: &str| {
        field.clone().unwrap_or_else(|| Loc { value: format!("{}{suffix}", queue.value), ..queue.clone() })
    };
    let exchange = f.exchange.clone().unwrap_or_else(|| name.clone());
    let retry_exchange = derived(&f.retry_exchange, ".retry");
    let dead_letter_exchange = derived(&f.dead_letter_exchange, ".dlx");
    let dead_letter_queue = derived(&f.dead_letter_queue, ".dlq");
    check_name(&exchange, "exchange name", diags);
    check_name(&retry_exchange, "retry exchange name", diags);
    check_name(&dead_letter_exchange, "dead-letter exchange name", diags);
    check_name(&dead_letter_queue, "dead-letter queue name", diags);

    let delivery_limit = match (queue_type, &f.delivery_limit) {
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
        (QueueType::Quorum, limit) => Some(limit.as_ref().map_or(DEFAULT_DELIVERY_LIMIT, |l| l.value)),
    };

    let vhost = match (vhost_override, &draft.vhost) {
        (Some(v), _) => v.to_string(),
        (None, Some(v)) if v.value.is_empty() => {
            diags.push(v.diag("`vhost` is empty").label("empty").hint("the default virtual host is vhost = \"/\""));
            String::new()
        }
        (None, Some(v)) => v.value.clone(),
        (None, None) => "/".to_string(),
    };

    let topology = Topology {
        name: name.value.clone(),
        vhost,
        exchange: exchange.value,
        exchange_type,
        routing_keys,
        hop_delays,
        max_attempts,
        strategy,
        queue_type,
        queue: queue.value.clone(),
        retry_exchange: retry_exchange.value,
        dead_letter_exchange: dead_letter_exchange.value,
        dead_letter_queue: dead_letter_queue.value,
        delivery_limit,
    };
    check_generated_names(&topology, &queue, diags);
    topology
}

fn hop_delays(
    name: &Loc<String>,
    delays: &Option<Loc<Vec<Loc<Duration>>>>,
    backoff: &Option<Loc<super::parse::Backoff>>,
    hops: usize,
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
            if hops > 0 && d.value.len() > hops {
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
                    let ms = (first * multiplier.powi(h as i32)).min(cap).round() as u64;
                    Duration::from_millis(ms)
                })
                .collect()
        }
    }
}

fn check_name(name: &Loc<String>, what: &str, diags: &mut Vec<Diagnostic>) {
    if name.value.is_empty() {
        diags.push(name.diag(format!("the {what} is empty")).label("empty name").hint("give it a name"));
    } else if name.value.len() > 255 {
        diags.push(
            name.diag(format!("the {what} is {} bytes long; RabbitMQ allows 255", name.value.len()))
                .label("too long")
                .hint("names are AMQP short strings; choose a shorter name"),
        );
    } else if name.value.starts_with("amq.") {
        diags.push(
            name.diag(format!("the {what} `{}` starts with `amq.`", name.value))
                .label("reserved prefix")
                .hint("RabbitMQ reserves names starting with `amq.` for itself; choose another name"),
        );
    }
}

/// Generated queue names must fit too; a quorum queue's internal name also holds the vhost.
fn check_generated_names(t: &Topology, queue: &Loc<String>, diags: &mut Vec<Diagnostic>) {
    if queue.value.is_empty() || queue.value.len() > 255 {
        return; // already reported
    }
    let vhost_len = percent_encoded_len(&t.vhost);
    for q in queue_names(t) {
        let limit = match t.queue_type {
            QueueType::Quorum => 255usize.saturating_sub(vhost_len + 1),
            QueueType::Classic => 255,
        };
        if q.len() > limit {
            diags.push(
                queue
                    .diag(format!("the generated queue name `{q}` is {} bytes; at most {limit} fit here", q.len()))
                    .label("base of the generated name")
                    .hint("shorten the queue name (a quorum queue's internal name is `<vhost>_<name>`, at most 255 bytes)"),
            );
            return;
        }
    }
}

fn percent_encoded_len(vhost: &str) -> usize {
    vhost.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { 1 } else { 3 }).sum()
}

/// Every queue a topology declares, dead-letter queue first.
pub(super) fn queue_names(t: &Topology) -> Vec<String> {
    let mut names = vec![t.dead_letter_queue.clone()];
    for attempt in 1..=t.max_attempts {
        let q = t.work_queue(attempt);
        if !names.contains(&q) {
            names.push(q);
        }
    }
    for hop in 1..=t.hops() {
        if hop as usize > t.hop_delays.len() {
            break;
        }
        let q = t.wait_queue(hop);
        if !names.contains(&q) {
            names.push(q);
        }
    }
    names
}

/// Two topologies in one vhost must not declare the same queue, and an exchange may be shared
/// only as a main exchange of the same type.
fn check_collisions(topologies: &[(Topology, usize)], origins: &[Loc<String>], diags: &mut Vec<Diagnostic>) {
    type Owner = (usize, &'static str, Option<ExchangeType>);
    let mut queues: BTreeMap<(&str, String), usize> = BTreeMap::new();
    let mut exchanges: BTreeMap<(&str, String), Owner> = BTreeMap::new();
    let at = |i: usize| -> (FileId, Range<usize>) { (origins[i].file, origins[i].span.clone()) };
    for (t, i) in topologies {
        for q in queue_names(t) {
            if let Some(&other) = queues.get(&(t.vhost.as_str(), q.clone())) {
                let (file, span) = at(other);
                diags.push(
                    origins[*i]
                        .diag(format!("queue `{q}` in vhost `{}` is declared by two topologies", t.vhost))
                        .label(format!("`{}` declares it", t.name))
                        .related(file, span, format!("`{}` declares it too", origins[other].value))
                        .hint("set `queue` (or `dead_letter_queue`) so that each topology has its own queues"),
                );
            } else {
                queues.insert((t.vhost.as_str(), q), *i);
            }
        }
        let mut mine: Vec<(String, &'static str, Option<ExchangeType>)> = vec![
            (t.exchange.clone(), "main", Some(t.exchange_type)),
            (t.dead_letter_exchange.clone(), "dead-letter", None),
        ];
        if t.hops() > 0 || t.strategy == Strategy::Chain {
            mine.push((t.retry_exchange.clone(), "retry", None));
        }
        for (name, role, kind) in mine {
            let key = (t.vhost.as_str(), name.clone());
            match exchanges.get(&key) {
                None => {
                    exchanges.insert(key, (*i, role, kind));
                }
                Some(&(other, "main", other_kind)) if role == "main" && other_kind == kind => {
                    let _ = other; // a main exchange shared by topologies of one type is fine
                }
                Some(&(other, other_role, other_kind)) => {
                    let (file, span) = at(other);
                    let why = if role == "main" && other_role == "main" {
                        format!(
                            "exchange `{name}` is declared as {} here and as {} by `{}`",
                            kind.map_or("?", |k| k.as_str()),
                            other_kind.map_or("?", |k| k.as_str()),
                            origins[other].value
                        )
                    } else {
                        format!(
                            "exchange `{name}` is the {role} exchange here and the {other_role} exchange of `{}`",
                            origins[other].value
                        )
                    };
                    diags.push(
                        origins[*i]
                            .diag(why)
                            .label(format!("`{}` uses `{name}`", t.name))
                            .related(file, span, format!("`{}` uses it too", origins[other].value))
                            .hint(
                                "only main exchanges of the same type may be shared; give the others their own names",
                            ),
                    );
                }
            }
        }
    }
}
