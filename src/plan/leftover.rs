//! What earlier versions of the spec left behind: bindings hopper moved away from, and queues
//! under a topology's generated names that the spec no longer has. Removed only when nothing is
//! lost by it.

use std::collections::{BTreeMap, BTreeSet};

use super::index::Index;
use super::{Desired, Options, Step};
use crate::compile::GeneratedName;
use crate::live::{Claimed, Live, LiveQueue};
use crate::model::{ArgValue, Binding, Destination, Key, QueueName, QueueType, arg};
use crate::spec::{Strategy, Topology};

/// A topology its owner recorded. With no `successor` the spec no longer has it: retired, its
/// intake unbound and each of its queues deleted once empty and unused. With one, the recorded
/// queues the successor no longer declares are its earlier names (a rename): each is moved out
/// of the same way, what it holds moved into the successor's queue of the same role.
pub(super) struct Retired<'a> {
    pub topology: &'a str,
    pub claimed: &'a Claimed,
    pub successor: Option<&'a Topology>,
}

/// The unbind, extra and delete steps for the vhost's left-overs and retired topologies.
pub(super) fn steps(
    desired: &Desired,
    live: &Live,
    options: &Options,
    index: &Index,
    retired: &[Retired],
) -> Vec<Step> {
    let prune = options.prune;
    let mut steps = Vec::new();
    let (queues, wanted, routes) = (&desired.queues, &desired.keys, &desired.routes);

    // Queues hopper made for these topologies under an earlier spec.
    let left_overs: BTreeMap<&QueueName, (GeneratedName, &LiveQueue, &Topology)> = live
        .queues
        .iter()
        .filter(|(name, _)| !queues.contains(*name))
        .filter_map(|(name, q)| {
            index.generating(name).find_map(|t| left_over(&t.topology, name, q).map(|g| (name, (g, q, &t.topology))))
        })
        .collect();
    // The queues of retired topologies that are still there, and the exchanges each recorded.
    let retiring: BTreeMap<&QueueName, &Retired> = retired
        .iter()
        .flat_map(|r| r.claimed.queues.iter().map(move |q| (q, r)))
        .filter(|(q, _)| live.queues.contains_key(*q) && !queues.contains(*q) && !left_overs.contains_key(*q))
        .collect();

    // Topologies the spec still has, with what they recorded under earlier names.
    // By main queue: the binding a renamed main exchange leaves routes there.
    let renamed: rustc_hash::FxHashMap<&QueueName, (&Retired, &Topology)> =
        retired.iter().filter_map(|r| r.successor.map(|t| (&t.queue, (r, t)))).collect();

    // Bindings hopper moves: from a topology's retry and dead-letter exchanges to its own queues,
    // and from its main exchange to its main queue. Anything else bound there (an audit queue on
    // the main exchange) belongs to someone else.
    let mut unbound = BTreeSet::new();
    // Queues a retry key of the old contract still routes into: kept with it.
    let mut old_contract: BTreeMap<&QueueName, &str> = BTreeMap::new();
    if let Some(bindings) = &live.bindings {
        for b in bindings.iter().filter(|b| !wanted.contains(&Key::Binding(b))) {
            let Destination::Queue(destination) = &b.destination else { continue };
            let ours = index.moving_bindings_of(&b.source).iter().any(|c| {
                let t = &c.topology;
                // This topology's queues, now or under an earlier spec: not another topology's.
                let own_queue = c.queue(destination).is_some()
                    || (left_overs.contains_key(destination) && t.owns_queue(destination));
                (b.source == t.exchange && *destination == t.queue)
                    || ((b.source == t.retry_exchange || b.source == t.dead_letter_exchange) && own_queue)
            });
            // A retired topology's binding between its own exchanges and queues: its intake, and
            // its retry keys. The routes its wait queues and main queue dead-letter through
            // stay (below), so that what they hold still reaches the next queue.
            let retiring_binding = retiring.get(destination).is_some_and(|r| r.claimed.exchanges.contains(&b.source));
            // The last route of a live queue's dead letters (a left-over wait queue's return
            // binding) stays until that queue has gone, or what it holds would be dropped as it
            // expires. A route the spec replaces goes.
            let replaced = routes.contains(&(b.source.as_str(), b.routing_key.as_str()));
            let still_used =
                index.dead_lettering_to(&b.source, &b.routing_key).iter().any(|name| **name != *destination);
            // A retry key the spec no longer has (max_attempts lowered, jitter added, another
            // strategy): a consumer still on the old contract publishes retries with it, and
            // unbound they would come back to it (`mandatory`) and be requeued at once, a loop
            // with no back-off. Kept until the user says every consumer runs the new contract.
            let retry_key = ours
                && !replaced
                && !options.consumers_upgraded
                && index.moving_bindings_of(&b.source).iter().any(|c| {
                    let t = &c.topology;
                    // Only republish consumers publish to the retry exchange, and only into wait
                    // queues; in a chain the broker does, by the queues' own arguments, and its
                    // routes into attempt queues are no consumer's.
                    b.source == t.retry_exchange
                        && t.strategy == Strategy::Republish
                        && matches!(t.generated_name(destination), Some(GeneratedName::Wait { hop: None }))
                });
            // The same, into a wait queue of a renamed topology's earlier names: consumers not
            // yet moved to the new names still publish retries to the earlier retry exchange.
            let earlier_retry_key = !options.consumers_upgraded
                && b.routing_key.parse::<u32>().is_ok()
                && retiring.get(destination).is_some_and(|r| {
                    r.successor.is_some_and(|t| t.strategy == Strategy::Republish)
                        && r.claimed.exchanges.contains(&b.source)
                        && moves_on(&live.queues[destination])
                });
            // An earlier retry exchange's key into a wait queue the topology still has (only
            // `retry_exchange` renamed): consumers on the old contract still publish there.
            let successor = index.owner_of_queue(destination).first().and_then(|c| renamed.get(&c.topology.queue));
            let from_earlier = successor.filter(|(r, t)| earlier(r, t, &b.source));
            let earlier_exchange_key = from_earlier.is_some_and(|(_, t)| {
                b.routing_key.parse::<u32>().is_ok()
                    && t.strategy == Strategy::Republish
                    && matches!(t.generated_name(destination), Some(GeneratedName::Wait { hop: None }))
            });
            let earlier_retry_key = earlier_retry_key || (earlier_exchange_key && !options.consumers_upgraded);
            if (retry_key || earlier_retry_key) && !still_used {
                old_contract.insert(destination, b.routing_key.as_str());
                steps.push(Step::InSync {
                    object: crate::model::Object::Binding(b.clone()),
                    note: Some(format!(
                        "kept for consumers still on the old contract, which publish retries with key {:?}; once every consumer runs the new one, apply --consumers-upgraded removes it",
                        b.routing_key.as_str()
                    )),
                });
                continue;
            }
            // The earlier main exchange's binding into a renamed topology's earlier main queue
            // (both renamed at once): publishers not yet moved to the new exchange keep a route,
            // into the new main queue, before the old one is unbound. Kept then as below.
            if let Some(t) = earlier_intake(b, destination, &retiring, live, index).filter(|_| !prune) {
                let repointed = Binding { destination: Destination::Queue(t.queue.clone()), ..b.clone() };
                if !bindings.contains(&repointed) {
                    steps.push(Step::Create { object: crate::model::Object::Binding(repointed) });
                }
            }
            // A renamed main exchange's binding to the main queue: publishers not yet moved to
            // the new exchange reach the queue through it, so it goes only with `--prune`. Not a
            // route queues dead-letter through (an earlier retry exchange's return).
            let earlier_exchange = renamed.get(destination).filter(|(r, t)| {
                index.dead_lettering_to(&b.source, &b.routing_key).is_empty() && earlier(r, t, &b.source)
            });
            if let (Some((_, t)), false) = (earlier_exchange, prune) {
                steps.push(Step::KeptBinding {
                    binding: b.clone(),
                    kept_because: Kept::EarlierExchange { exchange: b.source.clone(), topology: t.name.clone() },
                });
                continue;
            }
            // Any other binding from an exchange the topology no longer declares into one of its
            // queues (an earlier dead-letter exchange's into the dead-letter queue) goes once no
            // queue dead-letters through it.
            if (ours || retiring_binding || earlier_exchange.is_some() || from_earlier.is_some())
                && (replaced || !still_used)
            {
                unbound.insert(b.clone());
                steps.push(Step::Unbind { binding: b.clone() });
            }
        }
    }

    // Where each live queue dead-letters once this plan is applied: a left-over queue something
    // still dead-letters into is never deleted, or its next messages would be dropped. Asked
    // only when something is left over: it walks every live queue.
    let feeds = if left_overs.is_empty() && retiring.is_empty() {
        Vec::new()
    } else {
        dead_letter_targets(live, &unbound, index)
    };
    // Each queue's first feeder other than itself.
    let mut feeders: rustc_hash::FxHashMap<&QueueName, &QueueName> = rustc_hash::FxHashMap::default();
    for (from, to) in feeds.iter().filter(|(from, to)| from != to) {
        feeders.entry(to).or_insert(from);
    }
    for (name, (generated, q, topology)) in &left_overs {
        let drains_into = drains_into(q, live, index);
        let fed_by = feeders.get(*name).map(|from| (*from).clone());
        let (messages, consumers) = (q.messages.unwrap_or(1), q.consumers.unwrap_or(1));
        let work = matches!(generated, GeneratedName::Work { .. });
        // A work queue of an earlier chain: what waits there is due for another attempt, which
        // the main queue now gives it. Only once nothing feeds it any more, so it stays empty.
        if options.migrate && work && messages > 0 && consumers == 0 && fed_by.is_none() && q.messages.is_some() {
            steps.push(Step::MoveMessages { from: (*name).clone(), to: topology.queue.clone(), messages });
            continue;
        }
        let kept_because = if let Some(key) = old_contract.get(*name) {
            Some(Kept::OldContract { key: key.to_string() })
        } else if messages > 0 && work {
            Some(Kept::Unconsumed { messages, main_queue: topology.queue.clone() })
        } else if let Some(from) = fed_by {
            Some(Kept::DeadLetteredInto { by: from })
        } else if messages > 0 {
            Some(Kept::Holds { messages })
        } else if consumers > 0 {
            Some(Kept::Consumed { consumers })
        } else {
            None
        };
        steps.push(kept_or_deleted(name, q, kept_because, prune, drains_into));
    }
    let retiring = Retiring { queues: retiring, old_contract, feeders, bound_into: bound_into(live) };
    retire(&retiring, live, index, options, &mut steps);
    retire_exchanges(retired, live, index, wanted, &unbound, prune, &mut steps);
    steps
}

/// The exchanges retired and renamed topologies recorded that the spec no longer declares: each
/// deleted with `--prune` once no queue dead-letters through it and no binding is left from or
/// into it, counting the queues this plan deletes as gone: exchanges go after them, and the
/// broker re-checks the bindings (`if-unused`), so one whose queue stays, stays too. A
/// publisher still publishing to it then gets an error rather than its messages dropped as
/// unroutable.
fn retire_exchanges(
    retired: &[Retired],
    live: &Live,
    index: &Index,
    wanted: &rustc_hash::FxHashSet<Key<'_>>,
    unbound: &BTreeSet<Binding>,
    prune: bool,
    steps: &mut Vec<Step>,
) {
    let earlier: BTreeSet<&crate::model::ExchangeName> = retired
        .iter()
        .flat_map(|r| &r.claimed.exchanges)
        .filter(|e| live.exchanges.contains_key(*e) && !wanted.contains(&Key::Exchange(e)))
        .collect();
    // Without the bindings nothing says the exchange is unused (and records are read with them).
    let (false, Some(all)) = (earlier.is_empty(), &live.bindings) else { return };
    let deleting: rustc_hash::FxHashSet<QueueName> = steps
        .iter()
        .filter_map(|s| if let Step::Delete { queue, .. } = s { Some(queue.clone()) } else { None })
        .collect();
    // A queue dead-letters through an exchange by its arguments or by a policy.
    let mut dead_letterers: rustc_hash::FxHashMap<&str, &QueueName> = rustc_hash::FxHashMap::default();
    for (name, q) in live.queues.iter().filter(|(name, _)| !deleting.contains(*name)) {
        let by_args = q.arguments.as_ref().and_then(|a| a.get(arg::DEAD_LETTER_EXCHANGE)).and_then(ArgValue::as_str);
        let by_policy = [&q.policy, &q.operator_policy]
            .into_iter()
            .flatten()
            .filter_map(|p| p.definition.get("dead-letter-exchange").and_then(ArgValue::as_str));
        for exchange in by_args.into_iter().chain(by_policy) {
            dead_letterers.entry(exchange).or_insert(name);
        }
    }
    let mut bound_into: rustc_hash::FxHashMap<&str, usize> = rustc_hash::FxHashMap::default();
    for b in all {
        if let Destination::Exchange(e) = &b.destination {
            *bound_into.entry(e.as_str()).or_default() += 1;
        }
    }
    for exchange in earlier {
        let gone = |b: &Binding| {
            unbound.contains(b) || matches!(&b.destination, Destination::Queue(q) if deleting.contains(q))
        };
        // This plan's bindings from it (an earlier main exchange bound into the new main queue).
        let binding = steps.iter().filter(
            |s| matches!(s, Step::Create { object: crate::model::Object::Binding(b) } if b.source == *exchange),
        );
        let bindings = index.bound_from(exchange).iter().filter(|b| !gone(b)).count()
            + bound_into.get(exchange.as_str()).copied().unwrap_or(0)
            + binding.count();
        let kept_because = if let Some(by) = dead_letterers.get(exchange.as_str()) {
            Kept::DeadLetteredInto { by: (*by).clone() }
        } else if bindings > 0 {
            Kept::Routes { bindings }
        } else if !prune {
            Kept::NotPruning
        } else {
            steps.push(Step::DeleteExchange { exchange: exchange.clone() });
            continue;
        };
        steps.push(Step::KeptExchange { exchange: exchange.clone(), kept_because });
    }
}

/// The queues of retired topologies and of renamed ones' earlier names, with what decides each.
struct Retiring<'a> {
    queues: BTreeMap<&'a QueueName, &'a Retired<'a>>,
    /// Those a retry key of the old contract still routes into.
    old_contract: BTreeMap<&'a QueueName, &'a str>,
    /// Each queue's first feeder other than itself.
    feeders: rustc_hash::FxHashMap<&'a QueueName, &'a QueueName>,
    /// Every queue a binding routes into; `None` when bindings could not be read.
    bound_into: Option<rustc_hash::FxHashSet<&'a QueueName>>,
}

fn bound_into(live: &Live) -> Option<rustc_hash::FxHashSet<&QueueName>> {
    let bindings = live.bindings.as_ref()?;
    Some(
        bindings
            .iter()
            .filter_map(|b| if let Destination::Queue(q) = &b.destination { Some(q) } else { None })
            .collect(),
    )
}

/// The successor of the renamed topology whose earlier main exchange `b` comes from, into its
/// earlier main queue: an exchange it recorded and no longer has (`earlier`), which no queue
/// dead-letters through (a retry exchange's return is a route, not an intake), into a queue that
/// dead-letters and is not a wait queue.
fn earlier_intake<'a>(
    b: &Binding,
    destination: &QueueName,
    retiring: &BTreeMap<&QueueName, &'a Retired<'a>>,
    live: &Live,
    index: &Index,
) -> Option<&'a Topology> {
    let r = retiring.get(destination)?;
    let t = r.successor?;
    let q = &live.queues[destination];
    let dead_letters = q.arguments.as_ref().is_some_and(|a| a.get(arg::DEAD_LETTER_EXCHANGE).is_some());
    (earlier(r, t, &b.source)
        && index.dead_lettering_to(&b.source, &b.routing_key).is_empty()
        && dead_letters
        && !moves_on(q))
    .then_some(t)
}

/// An exchange the renamed topology recorded and no longer has as one of its own. Not "one the
/// spec no longer declares": another topology may share the old main exchange, and this one's
/// publishers may still use it.
fn earlier(r: &Retired, t: &Topology, exchange: &crate::model::ExchangeName) -> bool {
    r.claimed.exchanges.contains(exchange)
        && *exchange != t.exchange
        && *exchange != t.retry_exchange
        && *exchange != t.dead_letter_exchange
}

/// A queue that its TTL empties by itself: a wait queue.
fn moves_on(q: &LiveQueue) -> bool {
    q.arguments.as_ref().is_some_and(|a| a.get(arg::MESSAGE_TTL).is_some())
}

/// The queues of retired topologies and renamed ones' earlier names: each deleted with
/// `--prune` once empty, unused and no longer dead-lettered into; else kept, saying why. What an
/// earlier name holds is moved by `--migrate` into the successor's queue of the same role, once
/// nothing routes into it.
fn retire(retiring: &Retiring, live: &Live, index: &Index, options: &Options, steps: &mut Vec<Step>) {
    for (name, retired) in &retiring.queues {
        let q = &live.queues[*name];
        let fed_by = retiring.feeders.get(*name).map(|from| (*from).clone());
        let (messages, consumers) = (q.messages.unwrap_or(1), q.consumers.unwrap_or(1));
        let kept_because = if let Some(from) = fed_by {
            Some(Kept::DeadLetteredInto { by: from })
        } else if let Some(key) = retiring.old_contract.get(*name) {
            Some(Kept::OldContract { key: key.to_string() })
        } else if messages > 0 && moves_on(q) {
            Some(Kept::Holds { messages })
        } else if let (Some(t), true) = (retired.successor, messages > 0) {
            // A main or work queue dead-letters; a dead-letter queue does not.
            let dead_letters = q.arguments.as_ref().is_none_or(|a| a.get(arg::DEAD_LETTER_EXCHANGE).is_some());
            let to = if dead_letters { t.queue.clone() } else { t.dead_letter_queue.clone() };
            let routed = retiring.bound_into.as_ref().is_none_or(|into| into.contains(*name));
            if options.migrate && !routed && consumers == 0 && q.messages.is_some() {
                steps.push(Step::MoveMessages { from: (*name).clone(), to, messages });
                continue;
            }
            Some(Kept::Renamed { topology: retired.topology.to_string(), messages, to, routed })
        } else if messages > 0 {
            Some(Kept::Retired { topology: retired.topology.to_string(), messages })
        } else if consumers > 0 {
            Some(Kept::Consumed { consumers })
        } else {
            None
        };
        steps.push(kept_or_deleted(name, q, kept_because, options.prune, drains_into(q, live, index)));
    }
}

/// A queue with a reason to stay is reported with it; one without is deleted with `--prune`,
/// and otherwise reported as waiting for it.
fn kept_or_deleted(
    name: &QueueName,
    q: &LiveQueue,
    kept_because: Option<Kept>,
    prune: bool,
    drains_into: Option<String>,
) -> Step {
    let kept_because = match kept_because {
        Some(kept) => kept,
        None if !prune => Kept::NotPruning,
        None => {
            let quorum = q.arguments.as_ref().is_some_and(|a| QueueType::of(a) == QueueType::Quorum);
            return Step::Delete { queue: name.clone(), broker_checks: !quorum };
        }
    };
    Step::Extra { queue: name.clone(), messages: q.messages, consumers: q.consumers, drains_into, kept_because }
}

/// Why a left-over queue is kept rather than deleted. Unknown counts are taken as one, as the
/// decision takes them: a queue is deleted only once it is known to be empty and unused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// A work queue of an earlier chain holds messages that the new contract no longer
    /// consumes; `--migrate` moves them into the topology's main queue.
    Unconsumed {
        messages: u64,
        main_queue: QueueName,
    },
    /// Another queue still dead-letters into it: it goes once that queue has gone.
    DeadLetteredInto {
        by: QueueName,
    },
    /// It holds messages that its TTL moves on by itself.
    Holds {
        messages: u64,
    },
    Consumed {
        consumers: u64,
    },
    /// Empty and unused, but `--prune` was not passed.
    NotPruning,
    /// A retry key of the old contract still routes into it (`Options::consumers_upgraded`).
    OldContract {
        key: String,
    },
    /// A queue of a renamed topology's earlier names that holds messages: `--migrate` moves
    /// them into `to` once nothing routes into it (`routed`) and nobody consumes it.
    Renamed {
        topology: String,
        messages: u64,
        to: QueueName,
        routed: bool,
    },
    /// A binding from an exchange `topology` recorded and no longer declares (its main
    /// exchange before a rename) into its main queue.
    EarlierExchange {
        exchange: crate::model::ExchangeName,
        topology: String,
    },
    /// An exchange bindings still route from or into (unknown when they could not be read).
    Routes {
        bindings: usize,
    },
    /// A queue of a retired topology that holds messages no TTL moves on.
    Retired {
        topology: String,
        messages: u64,
    },
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kept::Unconsumed { messages, main_queue } => write!(
                f,
                "it holds {messages} message(s) that the new contract no longer consumes: consume them, or run apply --migrate to move them into `{main_queue}` once nothing dead-letters into it any more"
            ),
            Kept::DeadLetteredInto { by } => {
                write!(f, "`{by}` still dead-letters into it; it goes once that queue has gone")
            }
            Kept::Holds { messages } => {
                write!(f, "it holds {messages} message(s); its TTL moves them on by itself, prune again later")
            }
            Kept::Consumed { consumers } => write!(f, "it has {consumers} consumer(s)"),
            Kept::NotPruning => f.write_str("pass --prune to remove it, empty and unused as it is"),
            Kept::OldContract { key } => write!(
                f,
                "retry key {key:?} of the old contract still routes into it; once every consumer runs the new one, apply --consumers-upgraded removes both"
            ),
            Kept::Renamed { topology, messages, to, routed: true } => write!(
                f,
                "topology `{topology}` now uses `{to}`; this queue holds {messages} message(s), which apply --migrate moves there once nothing routes into it any more (this run removes its bindings; run it again)"
            ),
            Kept::Renamed { topology, messages, to, routed: false } => write!(
                f,
                "topology `{topology}` now uses `{to}`; this queue holds {messages} message(s): apply --migrate moves them there, once nobody consumes this queue"
            ),
            Kept::EarlierExchange { exchange, topology } => write!(
                f,
                "topology `{topology}` no longer declares `{exchange}`; publishers that still publish there reach the queue through this binding: once none does, apply --prune removes it"
            ),
            Kept::Routes { bindings } => {
                write!(f, "{bindings} binding(s) still route from or into it; it goes once they have gone")
            }
            Kept::Retired { topology, messages } => write!(
                f,
                "topology `{topology}` is retired and this queue holds {messages} message(s): consume them, move them to a queue that is consumed (the management UI's Move messages), or keep it; apply --prune deletes it once it is empty and unused"
            ),
        }
    }
}

/// As the sentence: the JSON report's `kept_because` is the line a person reads.
impl serde::Serialize for Kept {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A live queue hopper made for `t` under an earlier spec: its name follows the strategy's
/// grammar and its arguments have the shape hopper gives such a queue. A queue someone else
/// named `orders.attempt-log` is neither.
pub fn left_over(t: &Topology, name: &str, q: &LiveQueue) -> Option<GeneratedName> {
    let generated = t.generated_name(name)?;
    let args = q.arguments.as_ref()?;
    let is = |key: &str, value: &str| args.get(key).and_then(ArgValue::as_str) == Some(value);
    let shaped = match generated {
        GeneratedName::Wait { hop } => {
            // Dead-lettering through the retry exchange's return binding, or (as hopper 0.1
            // declared it) through the default exchange straight to the queue.
            let target = t.returns_to(GeneratedName::Wait { hop });
            let key = target.as_str();
            matches!(args.get(arg::MESSAGE_TTL), Some(ArgValue::Int(_)))
                && ((is(arg::DEAD_LETTER_EXCHANGE, &t.retry_exchange) && is(arg::DEAD_LETTER_ROUTING_KEY, key))
                    || (is(arg::DEAD_LETTER_EXCHANGE, "") && is(arg::DEAD_LETTER_ROUTING_KEY, &target)))
        }
        GeneratedName::Work { attempt } => {
            is(arg::DEAD_LETTER_EXCHANGE, &t.retry_exchange) && is(arg::DEAD_LETTER_ROUTING_KEY, &attempt.to_string())
        }
    };
    shaped.then_some(generated)
}

/// Where a queue's dead letters go, for people: a queue name (through the default exchange, or
/// the one queue a direct route reaches), or an exchange and routing key.
fn drains_into(q: &LiveQueue, live: &Live, index: &Index) -> Option<String> {
    let args = q.arguments.as_ref()?;
    let exchange = args.get(arg::DEAD_LETTER_EXCHANGE)?.as_str()?;
    let key = args.get(arg::DEAD_LETTER_ROUTING_KEY).and_then(ArgValue::as_str);
    let routed: Vec<&QueueName> = index
        .bound_from(exchange)
        .iter()
        .filter(|b| Some(b.routing_key.as_str()) == key)
        .filter_map(|b| if let Destination::Queue(q) = &b.destination { Some(q) } else { None })
        .collect();
    let direct = live.exchanges.get(exchange).is_some_and(|x| x.kind == crate::model::ExchangeType::Direct);
    if let ([queue], true) = (routed.as_slice(), direct) {
        return Some(queue.to_string());
    }
    match key {
        Some(k) if exchange.is_empty() => Some(k.to_string()),
        Some(k) => Some(format!("exchange {exchange} with routing key {k}")),
        None => Some(format!("exchange {exchange}")),
    }
}

/// (from, to) for every live queue whose dead letters reach a queue, through the default exchange
/// or through a dead-letter exchange's bindings, leaving out the bindings about to be removed.
fn dead_letter_targets(live: &Live, unbound: &BTreeSet<Binding>, index: &Index) -> Vec<(QueueName, QueueName)> {
    let mut edges = Vec::new();
    for (from, q) in &live.queues {
        let Some(args) = &q.arguments else { continue };
        let Some(exchange) = args.get(arg::DEAD_LETTER_EXCHANGE).and_then(ArgValue::as_str) else { continue };
        let key = args.get(arg::DEAD_LETTER_ROUTING_KEY).and_then(ArgValue::as_str);
        if exchange.is_empty() {
            edges.extend(key.map(|k| (from.clone(), QueueName::from(k))));
        } else if live.bindings.is_some() {
            // Without a routing key any binding may match: count them all, to be safe.
            for b in index.bound_from(exchange).iter().copied().filter(|b| !unbound.contains(*b)) {
                if let Destination::Queue(to) = &b.destination
                    && key.is_none_or(|k| k == b.routing_key)
                {
                    edges.push((from.clone(), to.clone()));
                }
            }
        }
    }
    edges
}
