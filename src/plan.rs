//! Desired objects against live state: what to create, what is already there, what cannot be
//! changed in place, what is left over. Pure: the broker module fills `Live`, and executes the
//! plan.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::compile::CompiledTopology;
use crate::model::{ArgValue, Arguments, Binding, Exchange, Object, Queue, Role};
use crate::policy::{self, AppliedPolicy, Source};
use crate::spec::GeneratedName;

/// What the broker holds in one vhost, as far as it could be read.
#[derive(Debug, Clone, Default)]
pub struct Live {
    pub exchanges: BTreeMap<String, LiveExchange>,
    pub queues: BTreeMap<String, LiveQueue>,
    /// `None` when bindings cannot be listed (no management API): they are declared again,
    /// which is idempotent.
    pub bindings: Option<BTreeSet<Binding>>,
    /// Every binding, exchange-to-exchange ones and binding arguments included, when listed.
    pub routes: Vec<Route>,
    /// The broker's version, such as "4.0.5", when the management API says.
    pub version: Option<String>,
}

/// A binding as routing sees it: to a queue or to another exchange, with its arguments (headers
/// exchanges match on them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Route {
    pub source: String,
    pub destination: String,
    pub to_exchange: bool,
    pub routing_key: String,
    pub arguments: Arguments,
}

#[derive(Debug, Clone, Default)]
pub struct LiveExchange {
    pub kind: String,
    pub durable: bool,
    pub auto_delete: bool,
    pub arguments: Arguments,
}

#[derive(Debug, Clone, Default)]
pub struct LiveQueue {
    pub durable: bool,
    pub auto_delete: bool,
    /// `None` when they could not be read.
    pub arguments: Option<Arguments>,
    /// Set when the broker itself refused the spec's declaration (AMQP only: a 406).
    pub refused: Option<Difference>,
    pub messages: Option<u64>,
    pub consumers: Option<u64>,
    /// Delivered to a consumer and not yet acknowledged (part of `messages`).
    pub unacked: Option<u64>,
    /// The policy and operator policy that apply to it, when they could be read.
    pub policy: Option<AppliedPolicy>,
    pub operator_policy: Option<AppliedPolicy>,
}

/// A policy or operator policy that makes a queue behave otherwise than its spec says; `apply`
/// cannot fix it, since arguments do not outrank policies for these keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Override {
    pub queue: String,
    /// The policy key, such as `message-ttl`; the argument is `x-` followed by it.
    pub key: String,
    /// The spec's value, `None` when the spec does not set it.
    pub spec: Option<String>,
    pub effective: String,
    pub source: Source,
    pub policy: String,
}

/// One argument (or property) that differs between the broker and the spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    pub argument: String,
    /// `None`: not set.
    pub live: Option<String>,
    pub spec: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Step {
    Create {
        object: Object,
    },
    InSync {
        object: Object,
    },
    /// Exists or may exist, and cannot be read: declared again, which RabbitMQ checks.
    Ensure {
        object: Object,
    },
    Conflict {
        object: Object,
        differences: Vec<Difference>,
        ways_out: Vec<String>,
    },
    /// A binding between this topology's exchanges and queues that the spec no longer has,
    /// removed only after the bindings that replace it exist.
    Unbind {
        binding: Binding,
    },
    /// A queue under this topology's generated names that the spec no longer has.
    Extra {
        queue: String,
        messages: Option<u64>,
        consumers: Option<u64>,
        drains_into: Option<String>,
        kept_because: Option<String>,
    },
    /// An extra queue removed by `--prune`: it was empty and unused. Classic queues are deleted
    /// with `if-empty` and `if-unused`, so the broker re-checks at that instant; quorum queues
    /// support neither flag, so their counts are read again immediately before the deletion
    /// (nothing routes to a left-over queue any more: its bindings were removed first).
    Delete {
        queue: String,
        broker_checks: bool,
    },
}

impl Step {
    pub fn changes(&self) -> bool {
        matches!(self, Step::Create { .. } | Step::Ensure { .. } | Step::Unbind { .. } | Step::Delete { .. })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub vhost: String,
    pub steps: Vec<Step>,
    pub overrides: Vec<Override>,
    /// Where producers publish: bindings from these let messages in, so they come last.
    #[serde(skip)]
    pub entry_exchanges: BTreeSet<String>,
}

/// The order in which a plan's changes may run, as groups of step indices; the steps of one
/// group may run at once. Nothing lets a message in before everything downstream of it exists:
/// 1. exchanges and queues (declaring a queue whose dead-letter exchange is not there yet is
///    harmless: no message can reach the queue before step 3);
/// 2. bindings between them;
/// 3. bindings from the main exchanges, through which producers' messages enter;
/// 4. bindings that moved, removed only once their replacements exist;
/// 5. left-over queues, deleted last.
pub fn phases(plan: &Plan) -> Vec<Vec<usize>> {
    let mut phases = vec![Vec::new(); 5];
    for (i, step) in plan.steps.iter().enumerate() {
        let phase = match step {
            Step::Create { object } | Step::Ensure { object } => match object {
                Object::Exchange(_) | Object::Queue(_) => 0,
                Object::Binding(b) if plan.entry_exchanges.contains(&b.source) => 2,
                Object::Binding(_) => 1,
            },
            Step::Unbind { .. } => 3,
            Step::Delete { .. } => 4,
            Step::InSync { .. } | Step::Conflict { .. } | Step::Extra { .. } => continue,
        };
        phases[phase].push(i);
    }
    phases
}

impl Plan {
    pub fn conflicts(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter().filter(|s| matches!(s, Step::Conflict { .. }))
    }

    pub fn has_changes(&self) -> bool {
        self.steps.iter().any(Step::changes)
    }
}

/// Every object of the vhost's topologies, sinks first, each declared once (a main exchange may
/// be shared by several topologies).
pub fn desired(topologies: &[&CompiledTopology]) -> Vec<Object> {
    let mut seen = BTreeSet::new();
    let mut objects = Vec::new();
    for t in topologies {
        for o in &t.objects {
            if seen.insert((o.kind(), o.name())) {
                objects.push(o.clone());
            }
        }
    }
    objects
}

pub fn plan(vhost: &str, topologies: &[&CompiledTopology], live: &Live, prune: bool) -> Plan {
    let objects = desired(topologies);
    let ctx = Context { vhost, topologies };
    let mut steps: Vec<Step> = objects.iter().map(|o| step(o, live, &ctx)).collect();
    if live.bindings.is_none() {
        refuse_blind_moves(topologies, live, &mut steps);
    }

    let wanted: BTreeSet<&Binding> =
        objects.iter().filter_map(|o| if let Object::Binding(b) = o { Some(b) } else { None }).collect();
    let queues: BTreeSet<String> =
        objects.iter().filter_map(|o| if let Object::Queue(q) = o { Some(q.name.clone()) } else { None }).collect();

    // Queues hopper made for these topologies under an earlier spec.
    let left_overs: BTreeMap<&String, (&crate::spec::Topology, GeneratedName, &LiveQueue)> = live
        .queues
        .iter()
        .filter(|(name, _)| !queues.contains(*name))
        .filter_map(|(name, q)| {
            topologies.iter().find_map(|t| left_over(&t.topology, name, q).map(|g| (name, (&t.topology, g, q))))
        })
        .collect();

    // Bindings hopper moves: from a topology's retry and dead-letter exchanges to its own queues,
    // and from its main exchange to its main queue. Anything else bound there (an audit queue on
    // the main exchange) belongs to someone else.
    let mut unbound = BTreeSet::new();
    if let Some(bindings) = &live.bindings {
        for b in bindings.iter().filter(|b| !wanted.contains(b)) {
            let ours = topologies.iter().any(|t| {
                let t = &t.topology;
                let own_queue = queues.contains(&b.destination) || left_overs.contains_key(&b.destination);
                (b.source == t.exchange && b.destination == t.queue)
                    || ((b.source == t.retry_exchange || b.source == t.dead_letter_exchange) && own_queue)
            });
            if ours {
                unbound.insert(b.clone());
                steps.push(Step::Unbind { binding: b.clone() });
            }
        }
    }

    // Where each live queue dead-letters once this plan is applied: a left-over queue something
    // still dead-letters into is never deleted, or its next messages would be dropped.
    let feeds = dead_letter_targets(live, &unbound);
    for (name, (_, generated, q)) in &left_overs {
        let drains_into = drains_into(q);
        let fed_by = feeds.iter().find(|(from, to)| to == *name && from != *name).map(|(from, _)| from.clone());
        let (messages, consumers) = (q.messages.unwrap_or(1), q.consumers.unwrap_or(1));
        let kept_because = if messages > 0 && matches!(generated, GeneratedName::Work { .. }) {
            format!(
                "it holds {messages} message(s) that the new contract no longer consumes: consume them or move them to the dead-letter queue"
            )
        } else if let Some(from) = fed_by {
            format!("`{from}` still dead-letters into it; it goes once that queue has gone")
        } else if messages > 0 {
            format!("it holds {messages} message(s); its TTL moves them on by itself, prune again later")
        } else if consumers > 0 {
            format!("it has {consumers} consumer(s)")
        } else if !prune {
            "pass --prune to remove it, empty and unused as it is".to_string()
        } else {
            let quorum =
                q.arguments.as_ref().and_then(|a| a.get("x-queue-type")) == Some(&ArgValue::Str("quorum".into()));
            steps.push(Step::Delete { queue: (*name).clone(), broker_checks: !quorum });
            continue;
        };
        steps.push(Step::Extra {
            queue: (*name).clone(),
            messages: q.messages,
            consumers: q.consumers,
            drains_into,
            kept_because: Some(kept_because),
        });
    }
    let overrides = objects
        .iter()
        .filter_map(|o| if let Object::Queue(q) = o { Some(q) } else { None })
        .filter_map(|q| live.queues.get(&q.name).map(|l| (q, l)))
        .flat_map(|(q, l)| overrides(q, l))
        .collect();
    let entry_exchanges = topologies.iter().map(|t| t.topology.exchange.clone()).collect();
    Plan { vhost: vhost.to_string(), steps, overrides, entry_exchanges }
}

fn overrides(q: &Queue, live: &LiveQueue) -> Vec<Override> {
    if live.policy.is_none() && live.operator_policy.is_none() {
        return Vec::new();
    }
    let arguments = live.arguments.as_ref().unwrap_or(&q.arguments);
    let quorum = arguments.get("x-queue-type") == Some(&ArgValue::Str("quorum".into()));
    policy::effective(quorum, arguments, live.policy.as_ref(), live.operator_policy.as_ref())
        .into_iter()
        .filter(|(_, e)| e.source != Source::Argument)
        .filter_map(|(key, e)| {
            let spec = q.arguments.get(&format!("x-{key}"));
            (spec != Some(&e.value)).then(|| Override {
                queue: q.name.clone(),
                key: key.to_string(),
                spec: spec.map(ToString::to_string),
                effective: e.value.to_string(),
                source: e.source,
                policy: e.policy.unwrap_or_default(),
            })
        })
        .collect()
}

/// Without a list of bindings (no management API), a new wait queue next to an existing retry
/// exchange means a delay changed: the old wait queue's binding cannot be seen, so it would stay,
/// and every retry would be delivered twice. Refused instead.
fn refuse_blind_moves(topologies: &[&CompiledTopology], live: &Live, steps: &mut [Step]) {
    for step in steps.iter_mut() {
        let Step::Create { object: Object::Queue(q) } = step else { continue };
        let Role::Wait { hops, .. } = &q.role else { continue };
        let Some(t) = topologies.iter().map(|t| &t.topology).find(|t| t.owns_queue(&q.name)) else {
            continue;
        };
        if !live.exchanges.contains_key(&t.retry_exchange) {
            continue; // a first apply: nothing to move
        }
        let hops: Vec<String> = hops.iter().map(ToString::to_string).collect();
        *step = Step::Conflict {
            object: Object::Queue(q.clone()),
            differences: vec![Difference {
                argument: format!("binding of {} with routing key {}", t.retry_exchange, hops.join(", ")),
                live: Some("unknown: bindings cannot be listed without the management API".into()),
                spec: Some(format!("moved to {}", q.name)),
            }],
            ways_out: vec![
                "run apply where the management API is reachable (--management-url), so that the old wait queue's binding is removed once the new one exists".into(),
                format!(
                    "or unbind the old wait queue from `{}` yourself (routing key {}) before applying: otherwise every retry would be delivered twice",
                    t.retry_exchange,
                    hops.join(", ")
                ),
            ],
        };
    }
}

/// A live queue hopper made for `t` under an earlier spec: its name follows the strategy's
/// grammar and its arguments have the shape hopper gives such a queue. A queue someone else
/// named `orders.attempt-log` is neither.
pub fn left_over(t: &crate::spec::Topology, name: &str, q: &LiveQueue) -> Option<GeneratedName> {
    let generated = t.generated_name(name)?;
    let args = q.arguments.as_ref()?;
    let is = |key: &str, value: &str| args.get(key) == Some(&ArgValue::Str(value.to_string()));
    let shaped = match generated {
        GeneratedName::Wait { hop } => {
            let target = hop.map_or(t.queue.clone(), |h| t.work_queue(h + 1));
            matches!(args.get("x-message-ttl"), Some(ArgValue::Int(_)))
                && is("x-dead-letter-exchange", "")
                && is("x-dead-letter-routing-key", &target)
        }
        GeneratedName::Work { attempt } => {
            is("x-dead-letter-exchange", &t.retry_exchange) && is("x-dead-letter-routing-key", &attempt.to_string())
        }
    };
    shaped.then_some(generated)
}

/// Where a queue's dead letters go, for people: a queue name, or an exchange and routing key.
fn drains_into(q: &LiveQueue) -> Option<String> {
    let args = q.arguments.as_ref()?;
    let text = |key: &str| {
        args.get(key).map(|v| match v {
            ArgValue::Str(s) => s.clone(),
            ArgValue::Int(n) => n.to_string(),
        })
    };
    match (text("x-dead-letter-exchange")?, text("x-dead-letter-routing-key")) {
        (e, Some(k)) if e.is_empty() => Some(k),
        (e, Some(k)) => Some(format!("exchange {e} with routing key {k}")),
        (e, None) => Some(format!("exchange {e}")),
    }
}

/// (from, to) for every live queue whose dead letters reach a queue, through the default exchange
/// or through a dead-letter exchange's bindings, leaving out the bindings about to be removed.
fn dead_letter_targets(live: &Live, unbound: &BTreeSet<Binding>) -> Vec<(String, String)> {
    let mut edges = Vec::new();
    for (from, q) in &live.queues {
        let Some(args) = &q.arguments else { continue };
        let text = |key: &str| match args.get(key) {
            Some(ArgValue::Str(s)) => Some(s.clone()),
            Some(ArgValue::Int(n)) => Some(n.to_string()),
            None => None,
        };
        let Some(exchange) = text("x-dead-letter-exchange") else { continue };
        let key = text("x-dead-letter-routing-key");
        if exchange.is_empty() {
            edges.extend(key.map(|k| (from.clone(), k)));
        } else if let Some(bindings) = &live.bindings {
            // Without a routing key any binding may match: count them all, to be safe.
            for b in bindings.iter().filter(|b| b.source == exchange && !unbound.contains(*b)) {
                if key.as_ref().is_none_or(|k| *k == b.routing_key) {
                    edges.push((from.clone(), b.destination.clone()));
                }
            }
        }
    }
    edges
}

fn step(object: &Object, live: &Live, ctx: &Context) -> Step {
    let object = object.clone();
    match &object {
        Object::Exchange(e) => match live.exchanges.get(&e.name) {
            None => Step::Create { object },
            Some(l) => {
                let differences = exchange_differences(e, l);
                if differences.is_empty() {
                    Step::InSync { object }
                } else {
                    let ways_out = ctx.exchange_ways_out(e);
                    Step::Conflict { object, differences, ways_out }
                }
            }
        },
        Object::Queue(q) => match live.queues.get(&q.name) {
            None => Step::Create { object },
            Some(l) => {
                let differences = match (&l.refused, &l.arguments) {
                    (Some(d), _) => vec![d.clone()],
                    (None, Some(args)) => queue_differences(q, l, args),
                    (None, None) => return Step::Ensure { object },
                };
                if differences.is_empty() {
                    Step::InSync { object }
                } else {
                    let ways_out = ctx.queue_ways_out(q, &differences, l.messages);
                    Step::Conflict { object, differences, ways_out }
                }
            }
        },
        Object::Binding(b) => match &live.bindings {
            None => Step::Ensure { object },
            Some(set) if set.contains(b) => Step::InSync { object },
            Some(_) => Step::Create { object },
        },
    }
}

fn exchange_differences(e: &Exchange, l: &LiveExchange) -> Vec<Difference> {
    let mut d = Vec::new();
    if e.kind != l.kind {
        d.push(Difference { argument: "type".into(), live: Some(l.kind.clone()), spec: Some(e.kind.clone()) });
    }
    flag(&mut d, "durable", l.durable, e.durable);
    flag(&mut d, "auto_delete", l.auto_delete, false);
    d
}

fn flag(d: &mut Vec<Difference>, name: &str, live: bool, spec: bool) {
    if live != spec {
        d.push(Difference { argument: name.into(), live: Some(live.to_string()), spec: Some(spec.to_string()) });
    }
}

/// Compares as RabbitMQ does: every integer width is equal, and a queue without `x-queue-type`
/// is a classic queue. hopper declares nothing auto-delete.
pub fn queue_differences(q: &Queue, l: &LiveQueue, live: &Arguments) -> Vec<Difference> {
    let mut live = live.clone();
    live.entry("x-queue-type".into()).or_insert_with(|| ArgValue::Str("classic".into()));
    let mut d = Vec::new();
    flag(&mut d, "durable", l.durable, q.durable);
    flag(&mut d, "auto_delete", l.auto_delete, false);
    let keys: BTreeSet<&String> = q.arguments.keys().chain(live.keys()).collect();
    for key in keys {
        let (spec, live) = (q.arguments.get(key), live.get(key));
        if spec != live {
            d.push(Difference {
                argument: key.clone(),
                live: live.map(ToString::to_string),
                spec: spec.map(ToString::to_string),
            });
        }
    }
    d
}

/// What a refusal needs to say how to get out of it.
struct Context<'a> {
    vhost: &'a str,
    topologies: &'a [&'a CompiledTopology],
}

impl Context<'_> {
    fn exchange_ways_out(&self, e: &Exchange) -> Vec<String> {
        let (key, producers) = self
            .topologies
            .iter()
            .map(|t| &t.topology)
            .find_map(|t| {
                if t.exchange == e.name {
                    Some(("exchange", true))
                } else if t.retry_exchange == e.name {
                    Some(("retry_exchange", false))
                } else if t.dead_letter_exchange == e.name {
                    Some(("dead_letter_exchange", false))
                } else {
                    None
                }
            })
            .unwrap_or(("exchange", true));
        let then = if producers { ", move producers to it" } else { "" };
        vec![
            format!("change the spec to match exchange `{}` as it is on the broker", e.name),
            format!(
                "or give it another name in the spec (`{key} = \"{}-v2\"`), apply{then}, then delete `{}` yourself (rabbitmqctl delete_exchange -p {} {})",
                e.name, e.name, self.vhost, e.name
            ),
        ]
    }

    fn queue_ways_out(&self, q: &Queue, differences: &[Difference], messages: Option<u64>) -> Vec<String> {
        let held = match messages {
            Some(0) => "it is empty now".to_string(),
            Some(n) => format!("it holds {n} message(s) now"),
            None => "its message count is unknown".to_string(),
        };
        let quorum = q.arguments.get("x-queue-type") == Some(&ArgValue::Str("quorum".into()));
        // Quorum queues refuse --if-empty: the check is the operator's.
        let delete = if quorum {
            format!(
                "once `rabbitmqctl list_queues -p {v} name messages` shows it at 0, `rabbitmqctl delete_queue -p {v} {n}` (quorum queues do not support --if-empty)",
                v = self.vhost,
                n = q.name
            )
        } else {
            format!("`rabbitmqctl delete_queue -p {} {} --if-empty`", self.vhost, q.name)
        };
        let mut ways = Vec::new();
        for d in differences {
            let live = d.live.clone().unwrap_or_default();
            let way = match d.argument.as_str() {
                "x-delivery-limit" => format!("set `delivery_limit = {live}` in the spec to match the broker"),
                "x-queue-type" => format!("set `queue_type = \"{live}\"` in the spec to match the broker"),
                "x-message-ttl" => format!(
                    "a wait queue's delay is part of its name, so `{}` with a TTL of {live} ms was declared by something else",
                    q.name
                ),
                other => format!(
                    "`{other}` is set by hopper, not by a spec key: the broker's value was set by something else"
                ),
            };
            ways.push(way);
        }
        let (key, base) = match (&q.role, self.topologies.iter().map(|t| &t.topology).find(|t| t.owns_queue(&q.name))) {
            (Role::DeadLetter, Some(t)) => (Some("dead_letter_queue"), t.dead_letter_queue.clone()),
            (Role::Work { .. }, Some(t)) => (Some("queue"), t.queue.clone()),
            _ => (None, q.name.clone()),
        };
        match key {
            Some(key) => ways.push(format!(
                "or migrate without losing messages: set `{key} = \"{base}-v2\"` in the spec, apply, move consumers to the new queues, let `{}` drain ({held}), then {delete}",
                q.name
            )),
            None => ways.push(format!("or let `{}` drain ({held}), then {delete}, and apply again", q.name)),
        }
        ways.push("hopper never deletes or redeclares a queue that holds messages to change its arguments".into());
        ways
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::compile;
    use crate::spec;

    fn compiled(toml: &str) -> Vec<CompiledTopology> {
        compile(&spec::from_str("t.toml", toml).unwrap_or_else(|e| panic!("{}", e.render_plain())))
    }

    const ORDERS: &str = r#"
        [topology.orders]
        delays = ["5s", "30s"]
        max_attempts = 3
    "#;

    fn live_from(objects: &[Object]) -> Live {
        let mut live = Live { bindings: Some(BTreeSet::new()), ..Live::default() };
        for o in objects {
            match o {
                Object::Exchange(e) => {
                    live.exchanges.insert(
                        e.name.clone(),
                        LiveExchange { kind: e.kind.clone(), durable: e.durable, ..LiveExchange::default() },
                    );
                }
                Object::Queue(q) => {
                    live.queues.insert(
                        q.name.clone(),
                        LiveQueue {
                            durable: true,
                            arguments: Some(q.arguments.clone()),
                            messages: Some(0),
                            consumers: Some(0),
                            ..LiveQueue::default()
                        },
                    );
                }
                Object::Binding(b) => {
                    live.bindings.as_mut().unwrap().insert(b.clone());
                }
            }
        }
        live
    }

    #[test]
    fn an_empty_broker_gets_everything_created() {
        let c = compiled(ORDERS);
        let p = plan("/", &[&c[0]], &Live { bindings: Some(BTreeSet::new()), ..Live::default() }, false);
        assert!(p.steps.iter().all(|s| matches!(s, Step::Create { .. })));
        assert_eq!(p.steps.len(), c[0].objects.len());
    }

    #[test]
    fn a_converged_broker_needs_nothing() {
        let c = compiled(ORDERS);
        let p = plan("/", &[&c[0]], &live_from(&c[0].objects), false);
        assert!(!p.has_changes(), "{:#?}", p.steps);
        assert!(p.steps.iter().all(|s| matches!(s, Step::InSync { .. })));
    }

    #[test]
    fn a_changed_delay_creates_a_queue_moves_the_binding_and_keeps_the_old_queue() {
        let old = compiled(ORDERS);
        let mut live = live_from(&old[0].objects);
        live.queues.get_mut("orders.wait-30s").unwrap().messages = Some(3);
        let new = compiled(&ORDERS.replace("30s", "45s"));
        let p = plan("/", &[&new[0]], &live, true);
        let created: Vec<_> = p
            .steps
            .iter()
            .filter_map(|s| if let Step::Create { object } = s { Some(object.name()) } else { None })
            .collect();
        assert_eq!(created, vec!["orders.wait-45s".to_string(), "orders.retry -> orders.wait-45s (\"2\")".to_string()]);
        let unbinds: Vec<_> = p
            .steps
            .iter()
            .filter_map(|s| if let Step::Unbind { binding } = s { Some(binding.to_string()) } else { None })
            .collect();
        assert_eq!(unbinds, vec!["orders.retry -> orders.wait-30s (\"2\")".to_string()]);
        // The unbind comes after the binding that replaces it.
        let pos = |f: &dyn Fn(&Step) -> bool| p.steps.iter().position(f).unwrap();
        assert!(
            pos(&|s| matches!(s, Step::Unbind { .. }))
                > pos(&|s| matches!(s, Step::Create { object: Object::Binding(_) }))
        );
        // Holding messages, it is kept even with --prune, and said to drain into the main queue.
        assert!(p.steps.iter().any(|s| matches!(s, Step::Extra { queue, drains_into: Some(d), .. } if queue == "orders.wait-30s" && d == "orders")));
        assert!(!p.steps.iter().any(|s| matches!(s, Step::Delete { .. })));
        assert!(p.conflicts().next().is_none());
    }

    #[test]
    fn an_empty_extra_is_deleted_only_with_prune() {
        let old = compiled(ORDERS);
        let live = live_from(&old[0].objects);
        let new = compiled(&ORDERS.replace("30s", "45s"));
        assert!(!plan("/", &[&new[0]], &live, false).steps.iter().any(|s| matches!(s, Step::Delete { .. })));
        assert!(
            plan("/", &[&new[0]], &live, true)
                .steps
                .iter()
                .any(|s| matches!(s, Step::Delete { queue, broker_checks: false } if queue == "orders.wait-30s"))
        );
    }

    #[test]
    fn a_changed_argument_is_a_conflict_with_both_values_and_ways_out() {
        let c = compiled(ORDERS);
        let mut live = live_from(&c[0].objects);
        let q = live.queues.get_mut("orders").unwrap();
        q.arguments.as_mut().unwrap().insert("x-delivery-limit".into(), ArgValue::Int(5));
        let p = plan("/", &[&c[0]], &live, false);
        let conflicts: Vec<_> = p.conflicts().collect();
        assert_eq!(conflicts.len(), 1);
        let Step::Conflict { object, differences, ways_out } = conflicts[0] else { unreachable!() };
        assert_eq!(object.name(), "orders");
        assert_eq!(
            differences,
            &vec![Difference { argument: "x-delivery-limit".into(), live: Some("5".into()), spec: Some("20".into()) }]
        );
        assert!(ways_out.iter().any(|w| w.contains("orders-v2")));
    }

    #[test]
    fn a_missing_queue_type_argument_means_classic() {
        let c = compiled(&format!("[defaults]\nqueue_type = \"classic\"\n{ORDERS}"));
        let Object::Queue(q) = c[0].objects.iter().find(|o| o.name() == "orders").unwrap() else { unreachable!() };
        let mut live = q.arguments.clone();
        live.remove("x-queue-type");
        assert!(queue_differences(q, &LiveQueue { durable: true, ..LiveQueue::default() }, &live).is_empty());
    }

    #[test]
    fn a_policy_that_changes_what_the_spec_set_is_an_override() {
        let c = compiled(ORDERS);
        let mut live = live_from(&c[0].objects);
        let cap =
            AppliedPolicy { name: "cap".into(), definition: [("message-ttl".to_string(), ArgValue::Int(1000))].into() };
        live.queues.get_mut("orders.wait-5s").unwrap().operator_policy = Some(cap.clone());
        let dlx = AppliedPolicy {
            name: "dlx".into(),
            definition: [("dead-letter-exchange".to_string(), ArgValue::Str("x".into()))].into(),
        };
        live.queues.get_mut("orders.dlq").unwrap().policy = Some(dlx.clone());
        // The argument wins for the dead-letter exchange: a policy on the main queue changes nothing.
        live.queues.get_mut("orders").unwrap().policy = Some(dlx);
        let p = plan("/", &[&c[0]], &live, false);
        assert_eq!(
            p.overrides,
            vec![
                Override {
                    queue: "orders.dlq".into(),
                    key: "dead-letter-exchange".into(),
                    spec: None,
                    effective: "\"x\"".into(),
                    source: Source::Policy,
                    policy: "dlx".into(),
                },
                Override {
                    queue: "orders.wait-5s".into(),
                    key: "message-ttl".into(),
                    spec: Some("5000".into()),
                    effective: "1000".into(),
                    source: Source::OperatorPolicy,
                    policy: "cap".into(),
                },
            ]
        );
        // A longer TTL than the spec's changes nothing: the smallest wins.
        live.queues.get_mut("orders.wait-5s").unwrap().operator_policy =
            Some(AppliedPolicy { definition: [("message-ttl".to_string(), ArgValue::Int(60000))].into(), ..cap });
        assert_eq!(plan("/", &[&c[0]], &live, false).overrides.len(), 1);
    }

    const CHAIN: &str = r#"
        [topology.orders]
        strategy = "chain"
        delays = ["1s", "1s", "15s"]
        max_attempts = 4
    "#;

    #[test]
    fn a_left_over_queue_that_still_receives_dead_letters_is_never_pruned() {
        // Lowering max_attempts in chain: attempt-4 is left over, but hop-3's wait queue, left
        // over too and holding messages, still dead-letters into it.
        let old = compiled(CHAIN);
        let mut live = live_from(&old[0].objects);
        live.queues.get_mut("orders.hop-3.wait-15s").unwrap().messages = Some(3);
        let new = compiled(&CHAIN.replace("max_attempts = 4", "max_attempts = 3").replace(", \"15s\"", ""));
        let p = plan("/", &[&new[0]], &live, true);
        assert!(!p.steps.iter().any(|s| matches!(s, Step::Delete { .. })), "{:#?}", p.steps);
        let kept = |q: &str| {
            p.steps.iter().find_map(|s| match s {
                Step::Extra { queue, kept_because, .. } if queue == q => kept_because.clone(),
                _ => None,
            })
        };
        assert_eq!(
            kept("orders.attempt-4").as_deref(),
            Some("`orders.hop-3.wait-15s` still dead-letters into it; it goes once that queue has gone")
        );
        assert!(kept("orders.hop-3.wait-15s").unwrap().contains("holds 3 message(s)"));
        // Once the wait queue has gone, the empty attempt queue is pruned.
        live.queues.remove("orders.hop-3.wait-15s");
        let p = plan("/", &[&new[0]], &live, true);
        assert!(p.steps.iter().any(|s| matches!(s, Step::Delete { queue, .. } if queue == "orders.attempt-4")));
    }

    #[test]
    fn only_queues_of_hoppers_grammar_and_shape_are_left_overs() {
        let c = compiled(CHAIN);
        let t = &c[0].topology;
        let mut live = live_from(&c[0].objects);
        let shaped = |name: &str| live.queues[name].clone();
        assert_eq!(
            left_over(t, "orders.attempt-2", &shaped("orders.attempt-2")),
            Some(GeneratedName::Work { attempt: 2 })
        );
        assert_eq!(
            left_over(t, "orders.hop-1.wait-1s", &shaped("orders.hop-1.wait-1s")),
            Some(GeneratedName::Wait { hop: Some(1) })
        );
        // Someone else's queue under a similar name, or of another shape, is not hopper's.
        let foreign = LiveQueue { arguments: Some(Arguments::new()), ..LiveQueue::default() };
        assert_eq!(left_over(t, "orders.attempt-log", &foreign), None);
        assert_eq!(left_over(t, "orders.attempt-7", &foreign), None);
        assert_eq!(left_over(t, "orders.hop-01.wait-1s", &shaped("orders.hop-1.wait-1s")), None);
        // Republish owns no attempt queues, and a foreign queue bound to the main exchange stays bound.
        let r = compiled(ORDERS);
        assert_eq!(left_over(&r[0].topology, "orders.attempt-2", &shaped("orders.attempt-2")), None);
        live = live_from(&r[0].objects);
        live.queues.insert("orders.attempt-log".into(), foreign);
        live.bindings.as_mut().unwrap().insert(Binding {
            source: "orders".into(),
            destination: "orders.attempt-log".into(),
            routing_key: "order.#".into(),
        });
        let p = plan("/", &[&r[0]], &live, true);
        assert!(!p.has_changes(), "{:#?}", p.steps);
    }

    #[test]
    fn a_queue_belongs_to_its_topology_by_exact_name_not_prefix() {
        let c = compiled("[topology.orders]\ndelays = [\"5s\"]\n\n[topology.orders2]\ndelays = [\"5s\"]\n");
        let (orders, orders2) = (&c[0].topology, &c[1].topology);
        assert!(orders.owns_queue("orders.wait-9s") && orders.owns_queue("orders.dlq"));
        assert!(!orders.owns_queue("orders2.wait-5s") && orders2.owns_queue("orders2.wait-5s"));
        // Without the management API, a new wait queue of `orders2` is judged by `orders2`'s
        // retry exchange, not by `orders`'s.
        let mut live = live_from(&c[0].objects);
        live.bindings = None;
        let p = plan("/", &[&c[0], &c[1]], &live, false);
        assert!(p.conflicts().next().is_none(), "{:#?}", p.steps);
    }

    #[test]
    fn entry_bindings_come_after_everything_they_feed() {
        let c = compiled(ORDERS);
        let p = plan("/", &[&c[0]], &Live { bindings: Some(BTreeSet::new()), ..Live::default() }, false);
        let phases = phases(&p);
        let names = |phase: usize| phases[phase].iter().map(|i| p.steps[*i].clone()).collect::<Vec<_>>();
        assert!(names(0).iter().all(|s| matches!(s, Step::Create { object: Object::Exchange(_) | Object::Queue(_) })));
        assert!(
            names(2).iter().all(|s| matches!(s, Step::Create { object: Object::Binding(b) } if b.source == "orders"))
        );
        assert_eq!(names(2).len(), 1);
        assert_eq!(phases.iter().map(Vec::len).sum::<usize>(), c[0].objects.len());
    }

    #[test]
    fn bindings_of_other_owners_on_the_main_exchange_are_left_alone() {
        let c = compiled(ORDERS);
        let mut live = live_from(&c[0].objects);
        live.bindings.as_mut().unwrap().insert(Binding {
            source: "orders".into(),
            destination: "audit".into(),
            routing_key: "#".into(),
        });
        assert!(!plan("/", &[&c[0]], &live, false).has_changes());
    }
}
