//! Desired objects against live state: what to create, what is already there, what cannot be
//! changed in place (and the ways out), what is left over. Pure: the broker module fills `Live`
//! and executes the plan.

pub mod fingerprint;
mod index;
mod leftover;
pub mod migrate;
pub mod ownership;
pub mod placement;
mod remedy;
mod unclaimed;

use std::collections::BTreeSet;

use rustc_hash::FxHashSet;

use serde::Serialize;

// What differs is read by `live` (a refused declaration) and judged here; it lives in `model`,
// below both, so that neither imports the other.
pub use crate::model::{Difference, Property};
pub use index::{Generators, Index, Owners};
pub use leftover::{Kept, left_over};
pub use remedy::{SpecEdit, WayOut, retyped};
pub use unclaimed::{Unclaimed, unclaimed};

use crate::compile::CompiledTopology;
use crate::live::{Live, LiveExchange, LiveQueue, Record};
use crate::model::{
    ArgValue, Arguments, Binding, Destination, Exchange, ExchangeName, Key, Object, ObjectKind, Owner, Queue,
    QueueName, QueueType, Role, arg,
};
use crate::policy::{self, Setting, Source};

/// A policy or operator policy that makes a queue behave otherwise than its spec says; `apply`
/// cannot fix it, since arguments do not outrank policies for these settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Override {
    pub queue: QueueName,
    pub setting: Setting,
    /// The spec's value, `None` when the spec does not set it.
    pub spec: Option<ArgValue>,
    pub effective: ArgValue,
    /// `policy` or `operator_policy`.
    #[serde(rename = "set_by")]
    pub source: Source,
    pub policy: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Step {
    Create {
        object: Object,
    },
    InSync {
        object: Object,
        /// Why an object that differs in form still counts as in sync.
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// Exists or may exist, and cannot be read: declared again, which RabbitMQ checks.
    Ensure {
        object: Object,
    },
    Conflict {
        object: Object,
        differences: Vec<Difference>,
        ways_out: Vec<WayOut>,
    },
    /// A queue whose arguments cannot change in place, given them under the same name by
    /// `apply --migrate`, its messages kept (see `migrate`). `resumes`: an earlier run started it.
    Migrate {
        object: Object,
        differences: Vec<Difference>,
        messages: Option<u64>,
        holding: QueueName,
        resumes: bool,
    },
    /// A left-over queue's messages moved into another queue by `apply --migrate`: an earlier
    /// chain's work queue, whose messages are due for an attempt the main queue now gives them.
    MoveMessages {
        from: QueueName,
        to: QueueName,
        messages: u64,
    },
    /// A binding between this topology's exchanges and queues that the spec no longer has,
    /// removed only after the bindings that replace it exist.
    Unbind {
        binding: Binding,
    },
    /// A queue under this topology's generated names that the spec no longer has.
    Extra {
        queue: QueueName,
        messages: Option<u64>,
        consumers: Option<u64>,
        drains_into: Option<String>,
        kept_because: Kept,
    },
    /// A binding the spec no longer has, kept for a reason (a renamed main exchange's, which
    /// publishers may still use): removed by `--prune`.
    KeptBinding {
        binding: Binding,
        kept_because: Kept,
    },
    /// An exchange of a retired or renamed topology that the spec no longer declares, kept for
    /// a reason (something still dead-letters through it or routes from it); else `--prune`
    /// deletes it.
    KeptExchange {
        exchange: ExchangeName,
        kept_because: Kept,
    },
    /// An owner's record brought up to date (`ownership`), before anything else changes: over
    /// the management API, not AMQP.
    Record {
        owner: Owner,
        /// The topologies it names.
        topologies: Vec<String>,
        #[serde(skip)]
        record: Record,
    },
    /// An extra queue removed by `--prune`: it was empty and unused. Classic queues are deleted
    /// with `if-empty` and `if-unused`, so the broker re-checks at that instant; quorum queues
    /// support neither flag, so their counts are read again immediately before the deletion
    /// (nothing routes to a left-over queue any more: its bindings were removed first).
    Delete {
        queue: QueueName,
        broker_checks: bool,
    },
    /// An earlier exchange removed by `--prune`, with `if-unused`: the broker refuses while a
    /// binding routes from it.
    DeleteExchange {
        exchange: ExchangeName,
    },
}

/// What a step does, for counting and colouring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Create,
    InSync,
    Ensure,
    Conflict,
    Migrate,
    MoveMessages,
    Unbind,
    Extra,
    Delete,
    Record,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::InSync => "in sync",
            Action::Ensure => "ensure",
            Action::Conflict => "conflict",
            Action::Migrate => "migrate",
            Action::MoveMessages => "move messages",
            Action::Unbind => "unbind",
            Action::Extra => "extra",
            Action::Delete => "delete",
            Action::Record => "record",
        }
    }

    /// Whether the step changes the broker.
    pub fn changes(self) -> bool {
        matches!(
            self,
            Action::Create
                | Action::Ensure
                | Action::Migrate
                | Action::MoveMessages
                | Action::Unbind
                | Action::Delete
                | Action::Record
        )
    }
}

impl Step {
    pub fn action(&self) -> Action {
        match self {
            Step::Create { .. } => Action::Create,
            Step::InSync { .. } => Action::InSync,
            Step::Ensure { .. } => Action::Ensure,
            Step::Conflict { .. } => Action::Conflict,
            Step::Migrate { .. } => Action::Migrate,
            Step::MoveMessages { .. } => Action::MoveMessages,
            Step::Unbind { .. } => Action::Unbind,
            Step::Extra { .. } | Step::KeptBinding { .. } | Step::KeptExchange { .. } => Action::Extra,
            Step::Delete { .. } | Step::DeleteExchange { .. } => Action::Delete,
            Step::Record { .. } => Action::Record,
        }
    }

    pub fn changes(&self) -> bool {
        self.action().changes()
    }

    /// Whether the broker refusing this step stops the run. A prune deletion it refuses (the
    /// queue is no longer empty) does not: the queue is kept, which is what the refusal is for.
    pub fn refusal_stops_the_run(&self) -> bool {
        !matches!(self, Step::Delete { .. } | Step::DeleteExchange { .. })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub vhost: String,
    pub steps: Vec<Step>,
    pub overrides: Vec<Override>,
    /// Where producers publish: bindings from these let messages in, so they come last.
    #[serde(skip)]
    pub entry_exchanges: BTreeSet<ExchangeName>,
    /// This spec's owners' records as they stand once the plan's `Record` steps are written,
    /// still naming what the plan deletes: written again without it once the broker has
    /// deleted it (`ownership::without`).
    #[serde(skip)]
    pub records: Vec<Record>,
}

/// When `apply` carries out a changing step. Nothing lets a message in before everything
/// downstream of it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Exchanges and queues (declaring a queue whose dead-letter exchange is not there yet is
    /// harmless: no message can reach the queue before `EntryBindings`).
    Objects,
    /// Bindings between them.
    Bindings,
    /// Bindings from the main exchanges, through which producers' messages enter.
    EntryBindings,
    /// Migrations, one queue at a time, wait queues first: once they dead-letter through a
    /// binding, the queues they feed can be switched without dropping their messages.
    Migrations,
    /// Bindings that moved, removed only once their replacements exist.
    Unbinds,
    /// Left-over queues.
    Deletes,
    /// Earlier exchanges, once the queues bound from them have gone: the broker re-checks
    /// (`if-unused`), so one whose queue's deletion was refused stays.
    ExchangeDeletes,
}

/// A plan's changing steps in the order they may run, as step indices; the steps of one group
/// may run at once, except the migrations, which run one at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Phases {
    /// `Objects`, `Bindings`, `EntryBindings`, in that order.
    pub declarations: Vec<Vec<usize>>,
    pub migrations: Vec<usize>,
    /// `Unbinds`, `Deletes`, `ExchangeDeletes`.
    pub removals: Vec<Vec<usize>>,
}

impl Phases {
    /// The steps of one phase.
    pub fn of(&self, phase: Phase) -> &[usize] {
        match phase {
            Phase::Objects => &self.declarations[0],
            Phase::Bindings => &self.declarations[1],
            Phase::EntryBindings => &self.declarations[2],
            Phase::Migrations => &self.migrations,
            Phase::Unbinds => &self.removals[0],
            Phase::Deletes => &self.removals[1],
            Phase::ExchangeDeletes => &self.removals[2],
        }
    }

    /// How many steps in all.
    pub fn len(&self) -> usize {
        self.declarations.iter().chain(&self.removals).map(Vec::len).sum::<usize>() + self.migrations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The phase a step runs in; `None` for a step that changes nothing.
fn phase_of(plan: &Plan, step: &Step) -> Option<Phase> {
    Some(match step {
        Step::Create { object } | Step::Ensure { object } => match object {
            Object::Exchange(_) | Object::Queue(_) => Phase::Objects,
            Object::Binding(b) if plan.entry_exchanges.contains(&b.source) => Phase::EntryBindings,
            Object::Binding(_) => Phase::Bindings,
        },
        Step::Migrate { .. } | Step::MoveMessages { .. } => Phase::Migrations,
        Step::Unbind { .. } => Phase::Unbinds,
        Step::Delete { .. } => Phase::Deletes,
        Step::DeleteExchange { .. } => Phase::ExchangeDeletes,
        Step::InSync { .. }
        | Step::Conflict { .. }
        | Step::Extra { .. }
        | Step::KeptBinding { .. }
        | Step::KeptExchange { .. }
        | Step::Record { .. } => return None,
    })
}

/// The plan's changing steps, phase by phase.
pub fn phases(plan: &Plan) -> Phases {
    let mut phases =
        Phases { declarations: vec![Vec::new(); 3], migrations: Vec::new(), removals: vec![Vec::new(); 3] };
    for (i, step) in plan.steps.iter().enumerate() {
        let Some(phase) = phase_of(plan, step) else { continue };
        let group = match phase {
            Phase::Objects => &mut phases.declarations[0],
            Phase::Bindings => &mut phases.declarations[1],
            Phase::EntryBindings => &mut phases.declarations[2],
            Phase::Migrations => &mut phases.migrations,
            Phase::Unbinds => &mut phases.removals[0],
            Phase::Deletes => &mut phases.removals[1],
            Phase::ExchangeDeletes => &mut phases.removals[2],
        };
        group.push(i);
    }
    // Wait queues first, then the queues they feed, then messages moved out of left-overs.
    let order = |i: &usize| match &plan.steps[*i] {
        Step::Migrate { object: Object::Queue(q), .. } if matches!(q.role, Role::Wait { .. }) => 0,
        Step::Migrate { .. } => 1,
        _ => 2,
    };
    phases.migrations.sort_by_key(|i| (order(i), *i));
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
/// be shared by several topologies). Objects are the same when their identities are: a binding
/// is all of it, never the text it prints as.
pub fn desired<'t>(topologies: &[&'t CompiledTopology]) -> Vec<&'t Object> {
    desired_and_keys(topologies).0
}

/// `desired`, and the identities it holds.
fn desired_and_keys<'t>(topologies: &[&'t CompiledTopology]) -> (Vec<&'t Object>, FxHashSet<Key<'t>>) {
    let mut seen = FxHashSet::default();
    let mut objects = Vec::new();
    for t in topologies {
        for o in &t.objects {
            if seen.insert(o.key()) {
                objects.push(o);
            }
        }
    }
    (objects, seen)
}

/// The queues of `desired`, by name.
pub fn desired_queues<'t>(topologies: &[&'t CompiledTopology]) -> FxHashSet<&'t QueueName> {
    topologies.iter().flat_map(|t| t.queues().map(|q| &q.name)).collect()
}

/// What a plan needs besides the two states.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Delete left-over queues that are empty and unused.
    pub prune: bool,
    /// The management API the run reads, for the commands a refusal suggests.
    pub admin: Option<Admin>,
    /// Migrate queues whose arguments cannot change in place, instead of refusing.
    pub migrate: bool,
    /// Every consumer runs the spec's contract: retry keys the spec no longer has may go.
    /// Until then they stay routed to their wait queues, so that a consumer still on the old
    /// contract never has a retry returned.
    pub consumers_upgraded: bool,
}

/// A management API's address (without credentials) and the user hopper signs in as.
#[derive(Debug, Clone)]
pub struct Admin {
    pub management_url: String,
    pub user: String,
}

pub fn plan(vhost: &str, topologies: &[&CompiledTopology], live: &Live, options: &Options) -> Plan {
    Desired::new(topologies).plan(vhost, live, options)
}

/// What a plan needs of the spec alone, made once per vhost: `apply` and `diff` make it while
/// the broker is still being read (at 500 topologies it is a third of the planning).
pub struct Desired<'t> {
    topologies: &'t [&'t CompiledTopology],
    /// `desired`, and the identities it holds.
    objects: Vec<&'t Object>,
    keys: FxHashSet<Key<'t>>,
    queues: FxHashSet<&'t QueueName>,
    /// Where the spec's bindings route from: (source, routing key).
    routes: FxHashSet<(&'t str, &'t str)>,
    owners: index::Owners<'t>,
}

impl<'t> Desired<'t> {
    pub fn new(topologies: &'t [&'t CompiledTopology]) -> Desired<'t> {
        let (objects, keys) = desired_and_keys(topologies);
        let routes = objects
            .iter()
            .filter_map(|o| match o {
                Object::Binding(b) => Some((b.source.as_str(), b.routing_key.as_str())),
                _ => None,
            })
            .collect();
        Desired {
            topologies,
            objects,
            keys,
            queues: desired_queues(topologies),
            routes,
            owners: index::Owners::new(topologies),
        }
    }

    /// The queues of `retired` topologies and of renamed ones' earlier names: counted before
    /// planning, as left-overs are.
    pub fn retiring_queues<'l>(&self, live: &'l Live) -> FxHashSet<&'l QueueName>
    where
        't: 'l,
    {
        self.retired(live).iter().flat_map(|r| r.claimed.queues.iter()).collect()
    }

    /// What this spec's owners recorded in the vhost: each topology the spec no longer has
    /// (retired), and each it still has, whose recorded objects it may no longer declare (a
    /// rename: `successor` is the topology now).
    fn retired<'l>(&self, live: &'l Live) -> Vec<leftover::Retired<'l>>
    where
        't: 'l,
    {
        let Some(records) = live.records.read() else { return Vec::new() };
        // By owner and name, once: at 10,000 topologies a search per recorded one is 10^8
        // comparisons.
        let in_spec: rustc_hash::FxHashMap<(&Owner, &str), &crate::spec::Topology> =
            self.topologies.iter().map(|c| ((&c.topology.owner, c.topology.name.as_str()), &c.topology)).collect();
        let mine = |r: &&Record| self.topologies.iter().any(|c| c.topology.owner == r.owner);
        records
            .iter()
            .filter(mine)
            .flat_map(|r| {
                r.topologies.iter().map(|(topology, claimed)| {
                    let successor = in_spec.get(&(&r.owner, topology.as_str())).copied();
                    leftover::Retired { topology, claimed, successor }
                })
            })
            .collect()
    }

    pub fn queues(&self) -> &FxHashSet<&'t QueueName> {
        &self.queues
    }

    pub fn generators(&self) -> &Generators<'t> {
        self.owners.generators()
    }

    pub fn plan(&self, vhost: &str, live: &Live, options: &Options) -> Plan {
        let index = Index::new(&self.owners, live);
        let mut steps: Vec<Step> = self.objects.iter().map(|o| step(o, live, vhost, &index, options)).collect();
        let retired = self.retired(live);
        let mut leftovers = leftover::steps(self, live, options, &index, &retired);
        let mut recorded = Vec::new();
        if live.bindings.is_none() {
            refuse_blind_moves(&index, live, &mut steps);
        }
        check_migrations(live, &index, options, &mut steps);
        if let Some(records) = live.records.read() {
            refuse_what_others_own(vhost, self.topologies, &self.objects, records, &mut steps);
            leave_what_others_own(self.topologies, records, &mut leftovers);
            let updated = ownership::updated(vhost, self.topologies, live);
            let owners: FxHashSet<&Owner> = self.topologies.iter().map(|c| &c.topology.owner).collect();
            recorded = records
                .iter()
                .filter(|r| owners.contains(&r.owner) && !updated.iter().any(|u| u.owner == r.owner))
                .chain(&updated)
                .cloned()
                .collect();
            steps.extend(updated.into_iter().map(|record| Step::Record {
                owner: record.owner.clone(),
                topologies: record.topologies.keys().cloned().collect(),
                record,
            }));
        }
        steps.extend(leftovers);
        // A policy can override only a queue it applies to. Most vhosts have none, and then the
        // spec's queues are not looked up again: at 10,000 topologies, 50,000 searches, 14 to
        // 17 ms after the last answer.
        let any_policy = live.queues.values().any(|l| l.policy.is_some() || l.operator_policy.is_some());
        let overrides = self
            .objects
            .iter()
            .filter(|_| any_policy)
            .filter_map(|o| if let Object::Queue(q) = o { Some(q) } else { None })
            .filter_map(|q| live.queues.get(&q.name).map(|l| (q, l)))
            .flat_map(|(q, l)| overrides(q, l))
            .collect();
        // An earlier main exchange bound into a renamed main queue lets messages in as well.
        let repointed = steps.iter().filter_map(|s| match s {
            Step::Create { object: Object::Binding(b) } if !self.keys.contains(&Key::Binding(b)) => {
                Some(b.source.clone())
            }
            _ => None,
        });
        let entry_exchanges =
            self.topologies.iter().map(|t| t.topology.exchange.clone()).chain(repointed.collect::<Vec<_>>()).collect();
        Plan { vhost: vhost.to_string(), steps, overrides, entry_exchanges, records: recorded }
    }
}

/// An exchange or queue another owner recorded is a conflict, whatever its state: this spec
/// would change it, bind into it, or take it over.
fn refuse_what_others_own(
    vhost: &str,
    topologies: &[&CompiledTopology],
    objects: &[&Object],
    records: &[Record],
    steps: &mut [Step],
) {
    for (i, taken) in ownership::taken(topologies, objects, records) {
        let object = objects[i].clone();
        let kind = object.kind().as_str();
        let mut ways_out = vec![WayOut::says(format!(
            "give topology `{}` names of its own (`exchange`, `queue`, `retry_exchange`, `dead_letter_exchange`, `dead_letter_queue`): owner `{}` recorded this {kind} for its topology `{}`",
            taken.my_topology, taken.theirs, taken.their_topology
        ))];
        if let Object::Exchange(e) = &object
            && topologies.iter().any(|c| c.topology.name == taken.my_topology && c.topology.exchange == e.name)
        {
            ways_out.push(WayOut::says(format!(
                "or, if topology `{}` means to bind its queue into owner `{}`'s exchange, say so: exchange_owner = \"{}\" in its table",
                taken.my_topology, taken.theirs, taken.theirs
            )));
        }
        // A team that names its owner after applying under the default (or renames it) meets
        // its own objects under the old name: the record, not the broker, is what is wrong.
        ways_out.push(WayOut {
            says: format!(
                "or, if `{}` is this spec's former owner name, delete its record (no queue, exchange or message changes): the next apply records the objects under `{}`",
                taken.theirs, taken.mine
            ),
            spec: None,
            command: Some(format!(
                "rabbitmqctl clear_global_parameter {}",
                remedy::shell_word(&Record::parameter(&taken.theirs, vhost))
            )),
        });
        steps[i] = Step::Conflict {
            object,
            differences: vec![Difference {
                property: Property::Owner,
                live: Some(ArgValue::str(taken.theirs.as_str())),
                spec: Some(ArgValue::str(taken.mine.as_str())),
            }],
            ways_out,
        };
    }
}

/// A left-over under this spec's names that another owner recorded is theirs, not this spec's
/// to unbind, report or prune.
fn leave_what_others_own(topologies: &[&CompiledTopology], records: &[Record], leftovers: &mut Vec<Step>) {
    let claims = ownership::Claims::new(records);
    if claims.is_empty() {
        return;
    }
    let owners: Vec<&Owner> = topologies.iter().map(|c| &c.topology.owner).collect();
    let others = |kind: ObjectKind, name: &str| owners.iter().all(|mine| claims.other_than(kind, name, mine).is_some());
    leftovers.retain(|s| match s {
        Step::Extra { queue, .. } | Step::Delete { queue, .. } => !others(ObjectKind::Queue, queue),
        Step::KeptExchange { exchange, .. } | Step::DeleteExchange { exchange } => {
            !others(ObjectKind::Exchange, exchange)
        }
        Step::Unbind { binding } | Step::KeptBinding { binding, .. } => match &binding.destination {
            Destination::Queue(q) => !others(ObjectKind::Queue, q),
            Destination::Exchange(e) => !others(ObjectKind::Exchange, e),
        },
        _ => true,
    });
}

fn overrides(q: &Queue, live: &LiveQueue) -> Vec<Override> {
    if live.policy.is_none() && live.operator_policy.is_none() {
        return Vec::new();
    }
    let arguments = live.arguments.as_ref().unwrap_or(&q.arguments);
    let quorum = QueueType::of(arguments) == QueueType::Quorum;
    policy::effective(quorum, arguments, live.policy.as_deref(), live.operator_policy.as_deref())
        .into_iter()
        .filter(|(_, e)| e.source != Source::Argument)
        .filter_map(|(setting, e)| {
            let spec = q.arguments.get(setting.argument());
            (spec != Some(&e.value)).then(|| Override {
                queue: q.name.clone(),
                setting,
                spec: spec.cloned(),
                effective: e.value,
                source: e.source,
                policy: e.policy.unwrap_or_default(),
            })
        })
        .collect()
}

/// Without a list of bindings (no management API), a new wait queue next to an existing retry
/// exchange means a delay changed: the old wait queue's binding cannot be seen, so it would stay,
/// and every retry would be delivered twice. Refused instead.
fn refuse_blind_moves(index: &Index, live: &Live, steps: &mut [Step]) {
    for step in steps.iter_mut() {
        let Step::Create { object: Object::Queue(q) } = step else { continue };
        let Role::Wait { hops, .. } = &q.role else { continue };
        let Some(t) = index.owner_of_queue(&q.name).first().map(|c| &c.topology) else {
            continue;
        };
        if !live.exchanges.contains_key(&t.retry_exchange) {
            continue; // a first apply: nothing to move
        }
        let hops: Vec<String> = hops.iter().map(ToString::to_string).collect();
        *step = Step::Conflict {
            object: Object::Queue(q.clone()),
            differences: vec![Difference {
                property: Property::Argument(format!(
                    "binding of {} with routing key {}",
                    t.retry_exchange,
                    hops.join(", ")
                )),
                live: Some(ArgValue::str("unknown: bindings cannot be listed without the management API")),
                spec: Some(ArgValue::str(format!("moved to {}", q.name))),
            }],
            ways_out: vec![
                WayOut::says(
                    "run apply where the management API is reachable (--management-url), so that the old wait queue's binding is removed once the new one exists",
                ),
                WayOut::says(format!(
                    "or unbind the old wait queue from `{}` yourself (routing key {}) before applying: otherwise every retry would be delivered twice",
                    t.retry_exchange,
                    hops.join(", ")
                )),
            ],
        };
    }
}

fn step(object: &Object, live: &Live, vhost: &str, index: &Index, options: &Options) -> Step {
    // Each step holds its object: cloned once, by the branch that makes the step.
    match object {
        Object::Exchange(e) => match live.exchanges.get(&e.name) {
            None => Step::Create { object: object.clone() },
            Some(l) => {
                let differences = exchange_differences(e, l);
                if differences.is_empty() {
                    Step::InSync { object: object.clone(), note: None }
                } else {
                    let owners = index.moving_bindings_of(&e.name);
                    let ways_out = remedy::exchange_ways_out(options, vhost, owners, e, &differences);
                    Step::Conflict { object: object.clone(), differences, ways_out }
                }
            }
        },
        Object::Queue(q) => queue_step(q, live, vhost, index, options),
        Object::Binding(b) => match &live.bindings {
            None => Step::Ensure { object: object.clone() },
            Some(set) if set.contains(b) => Step::InSync { object: object.clone(), note: None },
            Some(set) => match held_during_migration(b, set) {
                // Declared again now, the binding would copy every message into both queues
                // until the migration moves it back.
                Some(holding) => Step::InSync {
                    object: object.clone(),
                    note: Some(format!(
                        "on `{holding}` until the queue's interrupted migration finishes (apply --migrate)"
                    )),
                },
                None => Step::Create { object: object.clone() },
            },
        },
    }
}

fn queue_step(q: &Queue, live: &Live, vhost: &str, index: &Index, options: &Options) -> Step {
    let object = Object::Queue(q.clone());
    // An interrupted migration leaves a holding queue; without any, no name is made to look for
    // one (a name formatted per queue was a tenth of planning).
    let holding = || migrate::holding_queue(&q.name);
    let unfinished = if index.holding_queues() { live.queues.get(&holding()) } else { None };
    let l = live.queues.get(&q.name);
    let differences = match l {
        None => Vec::new(),
        Some(l) => match (&l.refused, &l.arguments) {
            (Some(d), _) => vec![d.clone()],
            (None, Some(args)) => queue_differences(q, l, args),
            (None, None) if unfinished.is_none() => return Step::Ensure { object },
            (None, None) => Vec::new(),
        },
    };
    let messages = l.and_then(|l| l.messages);
    if let Some(h) = unfinished {
        let holding = holding();
        if options.migrate {
            return Step::Migrate { object, differences, messages, holding, resumes: true };
        }
        let held = h.messages.map_or(String::new(), |n| format!(" ({n} message(s) wait there)"));
        let ways_out = vec![WayOut::says(format!(
            "an earlier `apply --migrate` was interrupted while the queue's messages were in `{holding}`{held}: run apply --migrate again to finish it"
        ))];
        let differences = vec![Difference {
            property: Property::Argument("migration".into()),
            live: Some(ArgValue::str(format!("unfinished, messages in {holding}"))),
            spec: Some(ArgValue::str("finished")),
        }];
        return Step::Conflict { object, differences, ways_out };
    }
    let Some(l) = l else { return Step::Create { object } };
    if differences.is_empty() {
        return Step::InSync { object, note: None };
    }
    let owner = index.owner_of_queue(&q.name);
    let holding = holding();
    if let Some(note) = legacy_shape(q, l, owner) {
        return if options.migrate {
            Step::Migrate { object, differences, messages, holding, resumes: false }
        } else {
            Step::InSync { object, note: Some(note) }
        };
    }
    if options.migrate {
        return Step::Migrate { object, differences, messages, holding, resumes: false };
    }
    let mut ways_out = remedy::queue_ways_out(vhost, owner, live, q, &differences, l.messages);
    if migrate::blocker(&q.name, live, index, &Default::default()).is_none() {
        ways_out.insert(
            0,
            WayOut::says(format!(
                "run apply again with --migrate: it gives `{}` its new arguments under the same name, keeping its messages (they wait in `{holding}` meanwhile) and every binding",
                q.name
            )),
        );
    }
    Step::Conflict { object, differences, ways_out }
}

/// A wait queue in the shape hopper 0.1 gave it (dead-lettering through the default exchange)
/// behaves as the current shape does: in sync, with a note. Only `apply --migrate` needs it
/// moved, to re-point its dead letters while the queue they return to is switched.
fn legacy_shape(q: &Queue, l: &LiveQueue, owner: &[&CompiledTopology]) -> Option<String> {
    let Role::Wait { hops, .. } = &q.role else { return None };
    let t = &owner.first()?.topology;
    let target = t.return_queue(*hops.first()?);
    let legacy = crate::compile::legacy_wait_queue(q, &target)?;
    let same = queue_differences(&legacy, l, l.arguments.as_ref()?).is_empty();
    same.then(|| {
        format!(
            "dead-letters into `{target}` through the default exchange, as hopper 0.1 declared it; `apply --migrate` moves it to the retry exchange's `{}` binding",
            t.return_key(hops[0])
        )
    })
}

/// A migration that cannot be carried out now becomes a conflict that says why.
fn check_migrations(live: &Live, index: &Index, options: &Options, steps: &mut [Step]) {
    if !options.migrate {
        return;
    }
    let migrating: rustc_hash::FxHashSet<QueueName> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Migrate { object: Object::Queue(q), .. } => Some(q.name.clone()),
            _ => None,
        })
        .collect();
    for step in steps.iter_mut() {
        let Step::Migrate { object: Object::Queue(q), differences, resumes: false, .. } = step else { continue };
        if let Some(why) = migrate::blocker(&q.name, live, index, &migrating) {
            *step = Step::Conflict {
                object: Object::Queue(q.clone()),
                differences: std::mem::take(differences),
                ways_out: vec![WayOut::says(format!("it cannot be migrated yet: {why}"))],
            };
        }
    }
}

/// The holding queue that has `b` while its queue is being migrated, if any.
fn held_during_migration(b: &Binding, live: &BTreeSet<Binding>) -> Option<QueueName> {
    let crate::model::Destination::Queue(queue) = &b.destination else { return None };
    let holding = migrate::holding_queue(queue);
    let moved = Binding { destination: crate::model::Destination::Queue(holding.clone()), ..b.clone() };
    live.contains(&moved).then_some(holding)
}

fn exchange_differences(e: &Exchange, l: &LiveExchange) -> Vec<Difference> {
    let mut d = Vec::new();
    if e.kind != l.kind {
        d.push(Difference {
            property: Property::Type,
            live: Some(ArgValue::str(l.kind.as_str())),
            spec: Some(ArgValue::str(e.kind.as_str())),
        });
    }
    flag(&mut d, Property::Durable, l.durable, e.durable);
    flag(&mut d, Property::AutoDelete, l.auto_delete, false);
    flag(&mut d, Property::Internal, l.internal, false);
    d
}

fn flag(d: &mut Vec<Difference>, property: Property, live: bool, spec: bool) {
    if live != spec {
        d.push(Difference { property, live: Some(ArgValue::Bool(live)), spec: Some(ArgValue::Bool(spec)) });
    }
}

/// Compares as RabbitMQ does: every integer width is equal, and a queue without `x-queue-type`
/// is a classic queue. hopper declares nothing auto-delete.
pub fn queue_differences(q: &Queue, l: &LiveQueue, live: &Arguments) -> Vec<Difference> {
    // Most queues are in sync: with the type listed, equal entries mean no difference, found
    // without sorting their keys (at 50,000 queues, tens of milliseconds after the last answer).
    if l.durable == q.durable && !l.auto_delete && live.contains_key(arg::QUEUE_TYPE) && q.arguments == *live {
        return Vec::new();
    }
    let mut live = live.clone();
    live.insert_if_absent(arg::QUEUE_TYPE, QueueType::Classic.argument());
    let mut d = Vec::new();
    flag(&mut d, Property::Durable, l.durable, q.durable);
    flag(&mut d, Property::AutoDelete, l.auto_delete, false);
    // In key order; a handful of keys, compared for each of tens of thousands of queues.
    let mut keys: Vec<&str> = q.arguments.keys().chain(live.keys()).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let (spec, live) = (q.arguments.get(key), live.get(key));
        if spec != live {
            d.push(Difference {
                property: Property::Argument(key.to_string()),
                live: live.cloned(),
                spec: spec.cloned(),
            });
        }
    }
    d
}

#[cfg(test)]
mod tests;
