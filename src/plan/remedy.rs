//! The ways out of a refused change. Each is something a user can paste: lines for a
//! topology's table in the spec, checked here by compiling the edited spec against the broker,
//! or a shell command with every name quoted. hopper never deletes or redeclares a queue that
//! holds messages to change its arguments; these say how the user can.

use serde::Serialize;

use super::{Difference, Options, Property, queue_differences};
use crate::compile::{CompiledTopology, compile_topology};
use crate::live::{Live, LiveQueue};
use crate::model::{ArgValue, Arguments, Exchange, ExchangeType, Queue, QueueName, QueueType, Role, arg};
use std::time::Duration;

use crate::compile::native;
use crate::spec::{ExchangeType as SpecExchangeType, QueueType as SpecQueueType, Strategy, Topology, format_duration};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WayOut {
    /// What to do, in a sentence.
    pub says: String,
    /// Keys to set in a topology's table of the spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<SpecEdit>,
    /// A command to run in a shell, once what `says` asks for is done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// Lines to paste into one topology's table, replacing the keys of the same name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecEdit {
    pub topology: String,
    /// The file that defines the topology.
    pub file: String,
    /// The table's header, as it is written in TOML: `[topology.orders]`.
    pub table: String,
    /// `key = value` lines, valid TOML.
    pub set: Vec<String>,
    /// Keys to remove from the table (and from `[defaults]`), when set.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

impl WayOut {
    pub fn says(text: impl Into<String>) -> WayOut {
        WayOut { says: text.into(), spec: None, command: None }
    }
}

/// Where `topology.name`'s table is, as TOML writes its header.
fn table(t: &Topology) -> String {
    format!("[topology.{}]", toml_key(&t.name))
}

/// A TOML key: bare when it can be, quoted otherwise.
pub fn toml_key(key: &str) -> String {
    let bare = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare { key.to_string() } else { toml_string(key) }
}

/// A TOML basic string with every character escaped that needs it.
pub fn toml_string(value: &str) -> String {
    toml::Value::String(value.to_string()).to_string()
}

/// A word for a POSIX shell, quoted when it needs to be.
pub fn shell_word(word: &str) -> String {
    shlex::try_quote(word).map_or_else(|_| format!("'{}'", word.replace('\'', "'\\''")), |q| q.into_owned())
}

fn edit(t: &Topology, set: Vec<String>, remove: Vec<String>) -> SpecEdit {
    SpecEdit { topology: t.name.clone(), file: t.file.display().to_string(), table: table(t), set, remove }
}

/// A queue's arguments on the broker as far as they are known: as read, or, when only the
/// broker's refusal is known (no management API), rebuilt from it. The refusal names only the
/// first argument that differs: when that is the queue type, the queue is taken to be what
/// hopper declares for the topology with that type (what an earlier spec made); otherwise the
/// spec's arguments with the one the refusal names set to the broker's value.
fn live_arguments(owner: Option<&Topology>, spec: &Queue, l: &LiveQueue) -> Option<Arguments> {
    if let Some(args) = &l.arguments {
        return Some(args.clone());
    }
    let Difference { property: Property::Argument(key), live, .. } = l.refused.as_ref()? else { return None };
    if key == arg::QUEUE_TYPE
        && let Some(t) = owner
        && let Some(queue_type) = live.as_ref().and_then(|v| SpecQueueType::declarable(&QueueType::of_value(v)))
    {
        let mut other = t.clone();
        other.queue_type = queue_type;
        if queue_type == SpecQueueType::Classic {
            other.delivery_limit = None;
        }
        return compile_topology(&other).queue(&spec.name).map(|q| q.arguments.clone());
    }
    let mut args = spec.arguments.clone();
    match live {
        Some(value) => args.insert(key.clone(), value.clone()),
        None => args.remove(key),
    };
    Some(args)
}

pub(super) fn queue_ways_out(
    vhost: &str,
    topologies: &[&CompiledTopology],
    live: &Live,
    q: &Queue,
    differences: &[Difference],
    messages: Option<u64>,
) -> Vec<WayOut> {
    let owner = topologies.iter().find(|t| t.queue(&q.name).is_some()).map(|t| &t.topology);
    let mut ways = Vec::new();
    match owner.and_then(|t| matching_spec(t, q, live)) {
        Some(way) => ways.push(way),
        None => ways.extend(unmatched(q, differences)),
    }
    let held = match messages {
        Some(0) => "it is empty now".to_string(),
        Some(n) => format!("it holds {n} message(s) now"),
        None => "its message count is unknown".to_string(),
    };
    let (v, n) = (shell_word(vhost), shell_word(&q.name));
    let entry = matches!(q.role, Role::Work { attempt: None | Some(1) });
    let first = if entry { "stop its producers, " } else { "" };
    let live_type = live.queues.get(&q.name).and_then(|l| live_arguments(owner, q, l)).map(|a| QueueType::of(&a));
    // `--` ends the options, so a name that starts with `-` is still a name.
    let way = match live_type {
        // Reading a stream removes nothing: it never drains, and no delete keeps its messages.
        Some(QueueType::Stream) => WayOut::says(format!(
            "`{}` is a stream: consuming it removes nothing, so it never drains, and deleting it (even with --if-empty) deletes its messages; keep it, and give the topology's queue another name in the spec",
            q.name
        )),
        // Quorum queues refuse --if-empty: the check is the operator's.
        Some(QueueType::Quorum) => WayOut {
            says: format!(
                "recreate it: {first}let `{}` drain ({held}); once `rabbitmqctl list_queues -p {v} name messages` shows it at 0, delete it (quorum queues do not support --if-empty) and apply again",
                q.name
            ),
            spec: None,
            command: Some(format!("rabbitmqctl delete_queue -p {v} -- {n}")),
        },
        _ => WayOut {
            says: format!(
                "recreate it: {first}let `{}` drain ({held}), delete it while empty, and apply again",
                q.name
            ),
            spec: None,
            command: Some(format!("rabbitmqctl delete_queue -p {v} --if-empty -- {n}")),
        },
    };
    ways.push(way);
    ways
}

/// The spec keys that make the topology compile to what the broker has, if there are any: the
/// queue type and the delivery limit, the two a user chooses. Checked by compiling the edited
/// topology and comparing every queue it has on the broker.
fn matching_spec(t: &Topology, q: &Queue, live: &Live) -> Option<WayOut> {
    let compiled = compile_topology(t);
    let live_args = |name: &QueueName| {
        let spec = compiled.queue(name)?;
        live_arguments(Some(t), spec, live.queues.get(name)?)
    };
    // The candidates: the queue type and delivery limit of the topology's main queue on the
    // broker (or of the refused queue, when the main queue is not there).
    let main = live_args(&t.queue).or_else(|| live_args(&q.name))?;
    let queue_type = SpecQueueType::declarable(&QueueType::of(&main))?;
    let mut candidate = t.clone();
    let (mut set, mut remove) = (Vec::new(), Vec::new());
    // The strategy the broker's main queue was made for: delayed retry in the queue (native),
    // dead letters through the retry exchange (chain), or to the dead-letter exchange.
    let strategy = if main.contains_key(native::DELAYED_RETRY_TYPE) {
        Strategy::Native
    } else if main.get(arg::DEAD_LETTER_EXCHANGE).and_then(ArgValue::as_str) == Some(t.retry_exchange.as_str()) {
        Strategy::Chain
    } else {
        Strategy::Republish
    };
    if strategy != t.strategy {
        candidate.strategy = strategy;
        set.push(format!("strategy = {}", toml_string(strategy.as_str())));
    }
    if strategy == Strategy::Native {
        // Its schedule and attempts are in its arguments: min × n up to max, limit + 1 deliveries.
        let ms = |key: &str| main.get(key).and_then(ArgValue::as_int);
        let limit = main.get(arg::DELIVERY_LIMIT).and_then(ArgValue::as_int)?;
        let attempts = u32::try_from(limit + 1).ok()?;
        if let (Some(min), Some(max)) = (ms(native::DELAYED_RETRY_MIN), ms(native::DELAYED_RETRY_MAX)) {
            let (min, max) = (Duration::from_millis(min as u64), Duration::from_millis(max as u64));
            candidate.hop_delays = (1..attempts).map(|n| (min * n).min(max)).collect();
            if candidate.hop_delays != t.hop_delays || t.strategy != Strategy::Native {
                set.push(format!(
                    "backoff = {{ initial = {}, max = {}, shape = \"linear\" }}",
                    toml_string(&format_duration(min)),
                    toml_string(&format_duration(max))
                ));
                remove.push("delays".to_string());
            }
        }
        if attempts != t.max_attempts {
            set.push(format!("max_attempts = {attempts}"));
        }
        candidate.max_attempts = attempts;
        if t.delivery_limit.is_some() {
            remove.push("delivery_limit".to_string());
        }
        candidate.delivery_limit = None;
    } else if queue_type != t.queue_type {
        candidate.queue_type = queue_type;
        set.push(format!("queue_type = {}", toml_string(queue_type.as_str())));
    }
    match (strategy, queue_type, main.get(arg::DELIVERY_LIMIT).and_then(ArgValue::as_int)) {
        (Strategy::Native, _, _) => {}
        (_, SpecQueueType::Classic, _) => {
            if t.delivery_limit.is_some() {
                remove.push("delivery_limit".to_string());
            }
            candidate.delivery_limit = None;
        }
        (_, SpecQueueType::Quorum, Some(limit)) if limit >= 1 => {
            if candidate.effective_delivery_limit() != Some(limit) {
                set.push(format!("delivery_limit = {limit}"));
            }
            candidate.delivery_limit = Some(limit);
        }
        (_, SpecQueueType::Quorum, _) => return None,
    }
    if set.is_empty() && remove.is_empty() {
        return None;
    }
    let edited = compile_topology(&candidate);
    let matches = edited.queues().all(|q| match (live.queues.get(&q.name), compiled.queue(&q.name)) {
        (None, _) => true,
        (Some(l), Some(before)) => {
            live_arguments(Some(t), before, l).is_some_and(|a| queue_differences(q, l, &a).is_empty())
        }
        (Some(l), None) => l.arguments.as_ref().is_some_and(|a| queue_differences(q, l, a).is_empty()),
    });
    matches.then(|| WayOut {
        says: "match the broker: edit the spec as below, then apply".to_string(),
        spec: Some(edit(t, set, remove)),
        command: None,
    })
}

/// The arguments the spec would give `q` were its topology of queue type `queue_type` (with the
/// spec's delivery limit, or none for a classic queue); `None` for a type no spec declares.
pub fn retyped(topologies: &[&CompiledTopology], q: &Queue, queue_type: &QueueType) -> Option<Arguments> {
    let t = topologies.iter().find(|t| t.queue(&q.name).is_some()).map(|t| &t.topology)?;
    let mut other = t.clone();
    other.queue_type = SpecQueueType::declarable(queue_type)?;
    if other.queue_type == SpecQueueType::Classic {
        other.delivery_limit = None;
    }
    compile_topology(&other).queue(&q.name).map(|q| q.arguments.clone())
}

/// Why no spec value reproduces the broker's queue, difference by difference.
fn unmatched(q: &Queue, differences: &[Difference]) -> Vec<WayOut> {
    differences
        .iter()
        .map(|d| {
            let live = d.live.as_ref().map_or("none".to_string(), ToString::to_string);
            WayOut::says(match (&d.property, &q.role) {
                (Property::Argument(a), Role::Wait { .. }) if a == arg::MESSAGE_TTL => format!(
                    "a wait queue's delay is part of its name, so `{}` with a TTL of {live} ms was declared by something else",
                    q.name
                ),
                (Property::Argument(a), _) => format!(
                    "no value of the spec's keys gives `{a}` = {live} together with the rest of `{}`'s arguments: it was declared by something else (or by an older spec)",
                    q.name
                ),
                (p, _) => format!("hopper declares every queue durable and not auto-delete; the broker's `{}` has {p} = {live}", q.name),
            })
        })
        .collect()
}

pub(super) fn exchange_ways_out(
    options: &Options,
    vhost: &str,
    topologies: &[&CompiledTopology],
    e: &Exchange,
    differences: &[Difference],
) -> Vec<WayOut> {
    let mut ways = Vec::new();
    let owner = topologies
        .iter()
        .map(|t| &t.topology)
        .find(|t| t.exchange == e.name || t.retry_exchange == e.name || t.dead_letter_exchange == e.name);
    let only_type = differences.iter().all(|d| d.property == Property::Type);
    if let Some(t) = owner {
        if t.exchange == e.name {
            let live_type = differences
                .iter()
                .find(|d| d.property == Property::Type)
                .and_then(|d| d.live.as_ref())
                .and_then(ArgValue::as_str);
            let spec_type = match live_type.map(ExchangeType::from) {
                Some(ExchangeType::Direct) => Some(SpecExchangeType::Direct),
                Some(ExchangeType::Topic) => Some(SpecExchangeType::Topic),
                Some(ExchangeType::Fanout) => Some(SpecExchangeType::Fanout),
                _ => None,
            };
            if let (true, Some(kind)) = (only_type, spec_type) {
                let mut set = vec![format!("exchange_type = {}", toml_string(kind.as_str()))];
                let mut remove = Vec::new();
                // A fanout exchange takes no routing keys, and the others need them.
                if kind == SpecExchangeType::Fanout {
                    remove.push("routing_keys".to_string());
                } else if t.exchange_type == SpecExchangeType::Fanout {
                    set.push(format!("routing_keys = [{}]", toml_string(&t.name)));
                }
                ways.push(WayOut {
                    says: "match the broker: edit the spec as below, then apply".into(),
                    spec: Some(edit(t, set, remove)),
                    command: None,
                });
            }
            ways.push(WayOut {
                says: format!(
                    "publish to a new exchange: edit the spec as below, apply, move producers to it; `{}` keeps delivering to the main queue until you delete it",
                    e.name
                ),
                spec: Some(edit(t, vec![format!("exchange = {}", toml_string(&format!("{}-v2", e.name)))], vec![])),
                command: None,
            });
        } else if t.retry_exchange == e.name {
            ways.push(WayOut {
                says: format!(
                    "use a new retry exchange: edit the spec as below, apply, give consumers the new contract (`hopper contract`); `{}` keeps routing retries already published until you delete it",
                    e.name
                ),
                spec: Some(edit(t, vec![format!("retry_exchange = {}", toml_string(&format!("{}-v2", e.name)))], vec![])),
                command: None,
            });
        }
    }
    let then = "a dead letter or message published to it in between is dropped, so stop what publishes to it first";
    ways.push(match &options.admin {
        // rabbitmqctl cannot delete an exchange; the management API can.
        Some(admin) => {
            let path = format!("{}/exchanges/{}/{}", admin.management_url, percent(vhost), percent(&e.name));
            WayOut {
                says: format!("delete `{}` and apply again (curl asks for the password); {then}", e.name),
                spec: None,
                command: Some(format!("curl -fsS -u {} -X DELETE {}", shell_word(&admin.user), shell_word(&path))),
            }
        }
        None => WayOut::says(format!(
            "delete `{}` with the management UI or API of this broker and apply again; {then}",
            e.name
        )),
    });
    ways
}

/// A path segment of the management API: every byte but unreserved ones percent-encoded.
fn percent(segment: &str) -> String {
    // `.` and `..` are path steps to curl and to servers: spelt out, they are names.
    if segment == "." || segment == ".." {
        return segment.replace('.', "%2E");
    }
    segment
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
