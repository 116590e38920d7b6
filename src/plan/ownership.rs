//! Who owns what in a vhost. Each owner's record (on the broker: `live::Record`) names the
//! topologies it made and their exchanges and queues. A spec never changes, binds into or prunes
//! what another owner recorded, unless a topology says whose exchange it binds into
//! (`exchange_owner`); and each apply brings its owner's record up to date before it changes
//! anything.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::compile::CompiledTopology;
use crate::live::{Claimed, Live, Record};
use crate::model::{ExchangeName, Object, ObjectKind, Owner, QueueName};

/// An exchange or queue the spec would declare that another owner recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub theirs: Owner,
    /// Their topology that has it.
    pub their_topology: String,
    pub mine: Owner,
    /// This spec's topology that wants it.
    pub my_topology: String,
}

/// What a topology claims: its exchanges and queues, but the main exchange when the topology
/// binds into another owner's (`exchange_owner`).
pub fn claimed(c: &CompiledTopology) -> Claimed {
    let mut claimed = Claimed::default();
    for o in &c.objects {
        match o {
            Object::Exchange(e) if c.topology.exchange_owner.is_some() && e.name == c.topology.exchange => {}
            Object::Exchange(e) => {
                claimed.exchanges.insert(e.name.clone());
            }
            Object::Queue(q) => {
                claimed.queues.insert(q.name.clone());
            }
            Object::Binding(_) => {}
        }
    }
    claimed
}

/// Each recorded exchange and queue, by kind and name: every owner that recorded it, with its
/// topology (two, when two owners applied at the same moment).
pub struct Claims<'a> {
    by_name: FxHashMap<(ObjectKind, &'a str), Vec<(&'a Owner, &'a str)>>,
}

impl<'a> Claims<'a> {
    /// Every record's claims; whether one is another owner's is asked per object.
    pub fn new(records: &'a [Record]) -> Claims<'a> {
        let mut by_name = FxHashMap::default();
        for r in records {
            for (topology, claimed) in &r.topologies {
                let names = claimed
                    .exchanges
                    .iter()
                    .map(|e| (ObjectKind::Exchange, e.as_str()))
                    .chain(claimed.queues.iter().map(|q| (ObjectKind::Queue, q.as_str())));
                for name in names {
                    by_name.entry(name).or_insert_with(Vec::new).push((&r.owner, topology.as_str()));
                }
            }
        }
        Claims { by_name }
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Whether any owner recorded an object named so.
    pub fn claimed(&self, kind: ObjectKind, name: &str) -> bool {
        self.by_name.contains_key(&(kind, name))
    }

    /// Who else recorded an object named so, if anyone did.
    pub fn other_than(&self, kind: ObjectKind, name: &str, mine: &Owner) -> Option<(&'a Owner, &'a str)> {
        self.by_name.get(&(kind, name))?.iter().copied().find(|(owner, _)| *owner != mine)
    }
}

/// Whether `c` may declare `object` though another owner recorded it: only its main exchange,
/// and only when the topology names that owner as its exchange's.
fn allowed(c: &CompiledTopology, object: &Object, theirs: &Owner) -> bool {
    matches!(object, Object::Exchange(e) if e.name == c.topology.exchange)
        && c.topology.exchange_owner.as_ref() == Some(theirs)
}

/// Every exchange and queue of the spec another owner recorded (or another owner of the same
/// spec wants), by the object's index in `objects`.
pub fn taken(topologies: &[&CompiledTopology], objects: &[&Object], records: &[Record]) -> FxHashMap<usize, Taken> {
    // What this run's own topologies would claim, as records would hold them: two owners of
    // one spec may not share an object either.
    let mut spec_records: BTreeMap<&Owner, Record> = BTreeMap::new();
    for c in topologies {
        let t = &c.topology;
        let r = spec_records.entry(&t.owner).or_insert_with(|| Record {
            owner: t.owner.clone(),
            vhost: t.vhost.clone(),
            topologies: BTreeMap::new(),
        });
        r.topologies.insert(t.name.clone(), claimed(c));
    }
    let single_owner = spec_records.len() == 1;
    let spec_owner = spec_records.keys().next().copied();
    let others = records.iter().any(|r| Some(&r.owner) != spec_owner);
    let mut found = FxHashMap::default();
    if single_owner && !others {
        return found; // the common case: one owner, alone in the vhost
    }
    let recorded = Claims::new(records);
    let spec_records: Vec<Record> = spec_records.into_values().collect();
    let wanted = Claims::new(&spec_records);
    // Which topology of the spec wants each object, and whose it is.
    let mut wanting: FxHashMap<(ObjectKind, &str), Vec<&CompiledTopology>> = FxHashMap::default();
    for c in topologies {
        for o in &c.objects {
            if let Some(name) = name_of(o) {
                wanting.entry((o.kind(), name)).or_default().push(c);
            }
        }
    }
    for (i, o) in objects.iter().enumerate() {
        let Some(name) = name_of(o) else { continue };
        for c in wanting.get(&(o.kind(), name)).into_iter().flatten() {
            let mine = &c.topology.owner;
            let other = recorded.other_than(o.kind(), name, mine).or_else(|| wanted.other_than(o.kind(), name, mine));
            if let Some((theirs, their_topology)) = other.filter(|(theirs, _)| !allowed(c, o, theirs)) {
                found.insert(
                    i,
                    Taken {
                        theirs: theirs.clone(),
                        their_topology: their_topology.to_string(),
                        mine: mine.clone(),
                        my_topology: c.topology.name.clone(),
                    },
                );
                break;
            }
        }
    }
    found
}

fn name_of(o: &Object) -> Option<&str> {
    match o {
        Object::Exchange(e) => Some(e.name.as_str()),
        Object::Queue(q) => Some(q.name.as_str()),
        Object::Binding(_) => None,
    }
}

/// The records of a vhost's topologies alone, as a first apply writes them.
pub fn records(vhost: &str, topologies: &[&CompiledTopology]) -> Vec<Record> {
    let mut records: BTreeMap<&Owner, Record> = BTreeMap::new();
    for c in topologies {
        let t = &c.topology;
        records
            .entry(&t.owner)
            .or_insert_with(|| Record { owner: t.owner.clone(), vhost: vhost.to_string(), topologies: BTreeMap::new() })
            .topologies
            .insert(t.name.clone(), claimed(c));
    }
    records.into_values().collect()
}

/// The records this vhost's owners should hold after an apply, those that differ from the
/// broker's. A topology claims what it declares now and what it recorded before that still
/// exists (a renamed queue stays its own until it is moved and deleted); a recorded topology no
/// longer in the spec stays recorded, still to be retired.
///
/// What the plan deletes stays claimed: the record is written before anything changes, and an
/// object leaves it only once the broker has deleted it (`without`, after the removals; or the
/// next plan, which no longer sees it). A run stopped before a deletion leaves it recorded.
pub fn updated(vhost: &str, topologies: &[&CompiledTopology], live: &Live) -> Vec<Record> {
    let Some(records) = live.records.read() else { return Vec::new() };
    let mut next: BTreeMap<&Owner, Record> = BTreeMap::new();
    for c in topologies {
        let t = &c.topology;
        let before = records.iter().find(|r| r.owner == t.owner);
        let record = next.entry(&t.owner).or_insert_with(|| Record {
            owner: t.owner.clone(),
            vhost: vhost.to_string(),
            topologies: before.map(|r| r.topologies.clone()).unwrap_or_default(),
        });
        let mut claimed = claimed(c);
        if let Some(old) = before.and_then(|r| r.topologies.get(&t.name)) {
            claimed.exchanges.extend(old.exchanges.iter().filter(|e| live.exchanges.contains_key(*e)).cloned());
            claimed.queues.extend(old.queues.iter().filter(|q| live.queues.contains_key(*q)).cloned());
        }
        record.topologies.insert(t.name.clone(), claimed);
    }
    // A retired topology keeps what of it is still there, and leaves the record with its last
    // queue and exchange.
    let spec: FxHashSet<(&Owner, &str)> =
        topologies.iter().map(|c| (&c.topology.owner, c.topology.name.as_str())).collect();
    for record in next.values_mut() {
        let owner = record.owner.clone();
        record.topologies.retain(|name, claimed| {
            if spec.contains(&(&owner, name.as_str())) {
                return true;
            }
            claimed.queues.retain(|q| live.queues.contains_key(q));
            claimed.exchanges.retain(|e| live.exchanges.contains_key(e));
            !claimed.queues.is_empty() || !claimed.exchanges.is_empty()
        });
    }
    next.into_values().filter(|r| !records.contains(r)).collect()
}

/// `record` once the broker has deleted `queues` and `exchanges`: a topology with nothing left
/// (a retired one) leaves it. `None` when it names none of them.
pub fn without(
    record: &Record,
    queues: &FxHashSet<&QueueName>,
    exchanges: &FxHashSet<&ExchangeName>,
) -> Option<Record> {
    let names =
        |c: &Claimed| c.queues.iter().any(|q| queues.contains(q)) || c.exchanges.iter().any(|e| exchanges.contains(e));
    if !record.topologies.values().any(names) {
        return None;
    }
    let mut after = record.clone();
    after.topologies.retain(|_, claimed| {
        claimed.queues.retain(|q| !queues.contains(q));
        claimed.exchanges.retain(|e| !exchanges.contains(e));
        !claimed.queues.is_empty() || !claimed.exchanges.is_empty()
    });
    Some(after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Records;
    use crate::spec;

    fn compiled(toml: &str) -> Vec<CompiledTopology> {
        spec::from_str("t.toml", toml).unwrap_or_else(|e| panic!("{}", e.render_plain())).compiled
    }

    const TEAM_A: &str = "owner = \"team-a\"\n[topology.orders]\ndelays = [\"5s\"]\nmax_attempts = 3\n";

    fn records_of(toml: &str) -> Vec<Record> {
        let c = compiled(toml);
        let live = Live { records: Records::Read(Vec::new()), ..Live::default() };
        updated("/", &c.iter().collect::<Vec<_>>(), &live)
    }

    fn taken_names(toml: &str, records: &[Record]) -> Vec<String> {
        let c = compiled(toml);
        let refs: Vec<&CompiledTopology> = c.iter().collect();
        let objects: Vec<&Object> = refs.iter().flat_map(|c| &c.objects).collect();
        let mut names: Vec<String> = taken(&refs, &objects, records)
            .into_iter()
            .map(|(i, t)| {
                format!(
                    "{} {} ({} of {})",
                    objects[i].kind().as_str(),
                    name_of(objects[i]).unwrap(),
                    t.theirs,
                    t.their_topology
                )
            })
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_first_apply_records_every_exchange_and_queue_and_a_second_nothing() {
        let records = records_of(TEAM_A);
        assert_eq!(records.len(), 1);
        let orders = &records[0].topologies["orders"];
        let names = |s: &std::collections::BTreeSet<_>| {
            s.iter().map(|n: &crate::model::QueueName| n.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(names(&orders.queues), ["orders", "orders.dlq", "orders.wait-5s"]);
        assert_eq!(
            orders.exchanges.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
            ["orders", "orders.dlx", "orders.retry"]
        );
        let c = compiled(TEAM_A);
        let live = Live { records: Records::Read(records), ..Live::default() };
        assert!(updated("/", &c.iter().collect::<Vec<_>>(), &live).is_empty(), "in sync: nothing to write");
        let unread = Live::default();
        assert!(updated("/", &c.iter().collect::<Vec<_>>(), &unread).is_empty(), "records not read: none written");
    }

    #[test]
    fn what_was_recorded_and_still_exists_stays_and_a_topology_gone_stays_to_be_retired() {
        let before = records_of(&format!("{TEAM_A}[topology.gone]\ndelays = [\"1s\"]\nmax_attempts = 2\n"));
        let renamed = compiled(
            "owner = \"team-a\"\n[topology.orders]\nqueue = \"orders-v2\"\ndelays = [\"5s\"]\nmax_attempts = 3\n",
        );
        let mut live = Live { records: Records::Read(before), ..Live::default() };
        live.queues.insert("orders".into(), Default::default());
        live.queues.insert("gone".into(), Default::default());
        let after = updated("/", &renamed.iter().collect::<Vec<_>>(), &live);
        let orders = &after[0].topologies["orders"];
        assert!(orders.queues.contains("orders") && orders.queues.contains("orders-v2"), "{orders:?}");
        assert!(!orders.queues.contains("orders.dlq"), "recorded, gone from the broker and the spec: dropped");
        let gone = &after[0].topologies["gone"];
        assert_eq!(
            gone.queues.iter().map(|q| q.as_str()).collect::<Vec<_>>(),
            ["gone"],
            "still to be retired: {gone:?}"
        );
        live.queues.remove("gone");
        let after = updated("/", &renamed.iter().collect::<Vec<_>>(), &live);
        assert!(!after[0].topologies.contains_key("gone"), "retired: its last queue went");
    }

    #[test]
    fn another_owners_objects_are_taken_unless_its_main_exchange_is_bound_into_on_purpose() {
        let a = records_of(TEAM_A);
        assert!(taken_names(TEAM_A, &a).is_empty(), "an owner's own");
        let b = "owner = \"team-b\"\n[topology.audit]\nexchange = \"orders.retry\"\nrouting_keys = [\"1\"]\ndelays = [\"5s\"]\nmax_attempts = 3\n";
        assert_eq!(taken_names(b, &a), ["exchange orders.retry (team-a of orders)"]);
        let on_purpose = b.replace("routing_keys", "exchange_owner = \"team-a\"\nrouting_keys");
        assert!(taken_names(&on_purpose, &a).is_empty(), "B's main exchange is A's retry exchange, said on purpose");
        let as_retry = "owner = \"team-b\"\n[topology.audit]\nretry_exchange = \"orders.retry\"\nexchange_owner = \"team-a\"\ndelays = [\"5s\"]\nmax_attempts = 3\n";
        assert_eq!(
            taken_names(as_retry, &a),
            ["exchange orders.retry (team-a of orders)"],
            "only as the main exchange"
        );
        let main = "owner = \"team-b\"\n[topology.audit]\nexchange = \"orders\"\nexchange_owner = \"team-a\"\ndelays = [\"5s\"]\nmax_attempts = 3\n";
        assert!(taken_names(main, &a).is_empty(), "team A's main exchange, bound into on purpose");
        let wrong_owner = main.replace("exchange_owner = \"team-a\"", "exchange_owner = \"team-c\"");
        assert_eq!(taken_names(&wrong_owner, &a), ["exchange orders (team-a of orders)"]);
        // Both recorded it (two applies at once): the other's claim is found, though this owner's
        // comes first.
        let mut raced = records_of(TEAM_A);
        let mut other = records_of(TEAM_A);
        other[0].owner = Owner::new("aaa-first");
        raced.extend(other);
        assert!(taken_names(TEAM_A, &raced).contains(&"queue orders (aaa-first of orders)".to_string()));
        // Two owners of one run may not share one either.
        let mut two = compiled(TEAM_A);
        let mut other =
            compiled("owner = \"team-b\"\n[topology.copy]\nqueue = \"orders\"\ndelays = [\"5s\"]\nmax_attempts = 3\n");
        two.append(&mut other);
        let refs: Vec<&CompiledTopology> = two.iter().collect();
        let objects: Vec<&Object> = refs.iter().flat_map(|c| &c.objects).collect();
        assert!(!taken(&refs, &objects, &[]).is_empty(), "team B's copy wants team A's queue `orders`");
    }
}
